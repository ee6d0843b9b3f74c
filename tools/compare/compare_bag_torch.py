#!/usr/bin/env python3
"""clembed's bags against PyTorch's CPU results, for F32 tables (a comparison, not a
test of the suite: PyTorch is never a dependency).

    PYTHONPATH=python CLEMBED_LIBRARY=build/libclembed.so /usr/bin/python3 tools/compare/compare_bag_torch.py

Checks, on random bags (empty ones, padding, repeated ids, widths with and without a
vector tail):
  forward    Context.embedding_bag against F.embedding_bag, bit for bit, for sum,
             mean, max (with max_rows against max_indices), per_sample_weights,
             padding_idx, include_last_offset and 2-D ids; and it prints (without
             failing) the two corners where the contract says PyTorch differs: a
             weighted bag holding a padding id, and NaN under max
  backward   Context.bag_backward's table gradient against autograd's (dense, F32),
             and grad_weights against per_sample_weights.grad: PyTorch adds the
             contributions in another order, so within 1e-5 of the largest magnitude
             (printed: how many are bit-identical)
  renorm     Context.renorm against torch.embedding_renorm_ (PyTorch's norm in float64,
             clembed's in float32 as the contract says): within 4 ulp
Exit status 0 when everything agrees as stated, 1 otherwise, 2 without PyTorch.
"""
import sys

import numpy as np

try:
    import torch
except ImportError:
    print("PyTorch is not installed (Debian: apt-get install python3-torch): nothing compared")
    sys.exit(2)

import clembed

F = np.float32
rng = np.random.default_rng(2024)
failures = []


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def check(ok, what):
    print("%-4s %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def random_bags(V, n_bags, max_len, pad=None):
    lens = rng.integers(0, max_len + 1, size=n_bags)
    lens[::7] = 0                                           # empty bags
    n = int(lens.sum())
    ids = rng.integers(0, V, size=n)
    if n > 3:
        ids[1:4] = ids[0]                                   # a repeated id
    if pad is not None and n:
        ids[rng.integers(0, n, size=max(1, n // 8))] = pad
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    return ids.astype(np.int64), offsets


def forward(ctx):
    n_cases = 0
    for D in (1, 3, 16, 37, 128):
        W = rng.standard_normal((60, D)).astype(F)
        tW = torch.tensor(W)
        for mode in ("sum", "mean", "max"):
            for pad in (None, 5, -1):
                for weighted in ((False, True) if mode == "sum" else (False,)):
                    if weighted and pad is not None:
                        continue                            # a documented corner (below)
                    for last in (False, True):
                        ids, offsets = random_bags(60, 23, 9, None if pad is None else pad % 60)
                        w = rng.standard_normal(ids.size).astype(F) if weighted else None
                        off = np.append(offsets, ids.size) if last else offsets
                        got = ctx.embedding_bag(W, ids, off, mode=mode, per_sample_weights=w, padding_idx=pad,
                                                include_last_offset=last)
                        want = torch.nn.functional.embedding_bag(
                            torch.tensor(ids), tW, torch.tensor(off), mode=mode, padding_idx=pad,
                            include_last_offset=last, per_sample_weights=None if w is None else torch.tensor(w))
                        ok = np.array_equal(bits(got.numpy()), bits(want.numpy()))
                        if ok and mode == "max":             # the rows: max_indices, where a bag is not empty
                            _, _, _, idx = torch.ops.aten._embedding_bag_forward_only(
                                tW, torch.tensor(ids), torch.tensor(off), False, 2, False, None, last,
                                -1 if pad is None else pad % 60)
                            full = got.max_rows >= 0
                            ok = np.array_equal(got.max_rows[full], idx.numpy()[full])
                        n_cases += 1
                        if not ok:
                            check(False, "forward D %d %s pad %s weighted %s include_last_offset %s"
                                  % (D, mode, pad, weighted, last))
    # 2-D ids (bags of one size)
    W = rng.standard_normal((30, 20)).astype(F)
    ids = rng.integers(0, 30, size=(11, 4))
    for mode in ("sum", "mean", "max"):
        got = ctx.embedding_bag(W, ids, mode=mode).numpy()
        want = torch.nn.functional.embedding_bag(torch.tensor(ids), torch.tensor(W), mode=mode).numpy()
        n_cases += 1
        if not np.array_equal(bits(got), bits(want)):
            check(False, "forward 2-D ids %s" % mode)
    check(not any(f.startswith("forward") for f in failures),
          "forward: %d cases bit for bit (sum, mean, max and its rows, weights, padding, 2-D ids)" % n_cases)
    # the documented corners, printed
    W = rng.standard_normal((10, 8)).astype(F)
    ids, offsets = np.array([1, 5, 2, 5, 3]), np.array([0, 3])
    w = rng.standard_normal(5).astype(F)
    got = ctx.embedding_bag(W, ids, offsets, mode="sum", per_sample_weights=w, padding_idx=5).numpy()
    want = torch.nn.functional.embedding_bag(torch.tensor(ids), torch.tensor(W), torch.tensor(offsets), mode="sum",
                                             per_sample_weights=torch.tensor(w), padding_idx=5).numpy()
    print("note weighted bags holding a padding id: %d of %d values differ from PyTorch (the contract's corner: "
          "PyTorch rounds w * t before adding there)" % (int((bits(got) != bits(want)).sum()), got.size))
    Wn = W.copy()
    Wn[2, 0] = np.nan
    got = ctx.embedding_bag(Wn, ids, offsets, mode="max").numpy()
    want = torch.nn.functional.embedding_bag(torch.tensor(ids), torch.tensor(Wn), torch.tensor(offsets),
                                             mode="max").numpy()
    print("note NaN under max: clembed %r, PyTorch %r (the contract's corner: NaN wherever it is in the bag)"
          % (float(got[0, 0]), float(want[0, 0])))


def backward(ctx):
    for mode in ("sum", "mean", "max"):
        for weighted in ((False, True) if mode == "sum" else (False,)):
            V, D = 80, 24
            W = rng.standard_normal((V, D)).astype(F)
            ids, offsets = random_bags(V, 40, 12)
            ids[:40] = 3                                    # a frequent row
            w = rng.standard_normal(ids.size).astype(F) if weighted else None
            grad = rng.standard_normal((40, D)).astype(F)
            tW = torch.tensor(W, requires_grad=True)
            tw = torch.tensor(w, requires_grad=True) if weighted else None
            out = torch.nn.functional.embedding_bag(torch.tensor(ids), tW, torch.tensor(offsets), mode=mode,
                                                    per_sample_weights=tw)
            out.backward(torch.tensor(grad))
            fwd = ctx.embedding_bag(W, ids, offsets, mode=mode, per_sample_weights=w)
            g = ctx.bag_backward(grad, ids, offsets, table=ctx.matrix(W), mode=mode, per_sample_weights=w,
                                 max_rows=getattr(fwd, "max_rows", None), grad_weights=weighted)
            got, want = g.numpy(), tW.grad.numpy()
            scale = max(float(np.abs(want).max()), 1e-30)
            err = float(np.abs(got - want).max()) / scale
            same = int((bits(got) == bits(want)).sum())
            check(err <= 1e-5, "backward %s%s: table gradient within %.1e of the largest (%d of %d bit-identical)"
                  % (mode, ", weighted" if weighted else "", err, same, got.size))
            if weighted:
                gw, tg = g.grad_weights, tw.grad.numpy()
                err = float(np.abs(gw - tg).max()) / max(float(np.abs(tg).max()), 1e-30)
                check(err <= 1e-5, "backward sum: grad_weights within %.1e of the largest (%d of %d bit-identical)"
                      % (err, int((bits(gw) == bits(tg)).sum()), gw.size))


def renorm(ctx):
    for p in (1.0, 2.0, float("inf"), 3.0):
        W = (rng.standard_normal((50, 33)) * 2).astype(F)
        ids = rng.integers(0, 50, size=70)
        t = ctx.matrix(W)
        ctx.renorm(t, ids, 1.5, p)
        tW = torch.tensor(W)
        with torch.no_grad():
            torch.embedding_renorm_(tW, torch.tensor(ids), 1.5, p)
        got, want = t.numpy(), tW.numpy()
        ulps = np.abs(bits(got).astype(np.int64) - bits(want).astype(np.int64)).max()
        untouched = np.setdiff1d(np.arange(50), ids)
        check(ulps <= 4 and np.array_equal(bits(got[untouched]), bits(W[untouched])),
              "renorm p %g: within %d ulp of torch.embedding_renorm_ (%d of %d bit-identical), other rows untouched"
              % (p, int(ulps), int((bits(got) == bits(want)).sum()), got.size))


def main():
    ctx = clembed.Context()
    print("clembed %s on %s; torch %s, %d threads" % (clembed.__version__, ctx.device_name, torch.__version__,
                                                     torch.get_num_threads()))
    forward(ctx)
    backward(ctx)
    renorm(ctx)
    print("%d disagreement(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
