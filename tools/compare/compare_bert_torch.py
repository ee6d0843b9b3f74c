#!/usr/bin/env python3
"""BERT's input layer, clembed against PyTorch: the forward and every gradient.

PyTorch's side is Hugging Face's BertEmbeddings written out: three nn.Embedding (word,
position, token type) summed and nn.LayerNorm (or RMSNorm, written with autograd
operations: PyTorch 1.13 has no nn.RMSNorm), with the same weights as clembed's, and
autograd's gradients for the same output gradient. Both are also compared with the same
layer in float64 (PyTorch, double), the reference the contract's tolerance is stated
against: every output within 1e-5 * (1 + |y|). Dropout is 0 (the two libraries draw
different masks).

    CLEMBED_LIBRARY=build/libclembed.so PYTHONPATH=python \\
        /usr/bin/python3 tools/compare/compare_bert_torch.py [--vocab 30522] [--hidden 768] [--batch 8] [--seq 128]
                                                     [--types 2] [--norm layer|rms] [--eps 1e-12] [--device SPEC]

Prints, for the output and each gradient, the largest difference between clembed and
PyTorch in float32, and of each from float64 (relative to 1 + |reference|), and exits 1
when clembed's output is outside the contract's tolerance. PyTorch is only a point of
comparison, never a dependency of clembed.
"""
import argparse
import sys

import numpy as np


def torch_layer(torch, W, P, T, g, b, ids, types, norm, eps, dtype):
    """The layer and its leaves in `dtype`: (out, {name: leaf tensor})."""
    V, H = W.shape
    word, pos, typ = (torch.nn.Embedding(*a.shape).to(dtype) for a in (W, P, T))
    with torch.no_grad():
        for m, a in ((word, W), (pos, P), (typ, T)):
            m.weight.copy_(torch.from_numpy(a))
    weight = torch.nn.Parameter(torch.from_numpy(g).to(dtype))
    bias = torch.nn.Parameter(torch.from_numpy(b).to(dtype)) if norm == "layer" else None
    S = ids.shape[1]
    x = word(torch.from_numpy(ids)) + pos(torch.arange(S).expand(ids.shape)) + typ(torch.from_numpy(types))
    if norm == "layer":
        out = torch.nn.functional.layer_norm(x, (H,), weight, bias, eps)
    else:
        out = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight
    leaves = {"table": word.weight, "position_table": pos.weight, "segment_table": typ.weight,
              "norm_weight": weight}
    if bias is not None:
        leaves["norm_bias"] = bias
    return out, leaves


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--types", type=int, default=2)
    ap.add_argument("--norm", choices=("layer", "rms"), default="layer")
    ap.add_argument("--eps", type=float, default=1e-12)
    ap.add_argument("--device", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed (Debian: apt-get install python3-torch); nothing to compare")
        return 0
    import clembed

    rng = np.random.default_rng(args.seed)
    V, H, B, S = args.vocab, args.hidden, args.batch, args.seq
    W = (0.05 * rng.standard_normal((V, H))).astype(np.float32)        # BERT-like scales
    P = (0.02 * rng.standard_normal((S, H))).astype(np.float32)
    T = (0.02 * rng.standard_normal((args.types, H))).astype(np.float32)
    g = (1 + 0.1 * rng.standard_normal(H)).astype(np.float32)
    b = (0.05 * rng.standard_normal(H)).astype(np.float32)
    ids = rng.integers(0, V, (B, S))
    types = (np.arange(S) >= S // 2).astype(np.int64)[None].repeat(B, 0)
    dy = rng.standard_normal((B, S, H)).astype(np.float32)
    bias = b if args.norm == "layer" else None

    ctx = clembed.Context(args.device)
    opts = dict(positions=P, segment_table=T, segment_ids=types, norm=args.norm, norm_weight=g, norm_bias=bias,
                norm_eps=args.eps)
    ours = {"output": ctx.embed(W, ids, **opts).numpy()}
    ours.update({k: m.numpy() for k, m in ctx.embed_backward(dy, W, ids, **opts).items()})
    for k in ("norm_weight", "norm_bias"):
        if k in ours:
            ours[k] = ours[k].reshape(-1)

    results = {}
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        out, leaves = torch_layer(torch, W, P, T, g, b, ids, types, args.norm, args.eps, dtype)
        out.backward(torch.from_numpy(dy).to(dtype))
        r = {"output": out.detach().numpy()}
        r.update({k: v.grad.numpy() for k, v in leaves.items()})
        results[name] = r

    print("clembed on %s; torch %s, %d threads" % (ctx.device_name, torch.__version__, torch.get_num_threads()))
    print("BERT's input layer: vocab %d, hidden %d, %d x %d tokens, %d types, %s norm, eps %g" % (
        V, H, B, S, args.types, args.norm, args.eps))
    print("%-16s %14s %16s %16s" % ("", "|clembed-torch|", "clembed vs f64", "torch vs f64"))
    print("%-16s %14s %16s %16s" % ("", "max", "max rel", "max rel"))
    ok = True
    for k in ours:
        c = ours[k].astype(np.float64)
        t32, t64 = results["float32"][k].astype(np.float64), results["float64"][k]
        rel = lambda a: float(np.max(np.abs(a - t64) / (1 + np.abs(t64))))  # noqa: E731
        print("%-16s %14.3g %16.3g %16.3g" % (k, float(np.max(np.abs(c - t32))), rel(c), rel(t32)))
        if k == "output" and rel(c) > 1e-5:
            ok = False
    print("output within 1e-5 * (1 + |y|) of float64: %s" % ("yes" if ok else "NO"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
