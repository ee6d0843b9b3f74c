#!/usr/bin/env python3
"""Runs `clembed bench --json` and, row by row, the same work with PyTorch on
the CPU (the same shapes, dtypes and output dtype, as a PyTorch user would
write it), and prints the two side by side (median milliseconds, and how many
times faster clembed is), with whatever PyTorch this Python has (Debian's 1.13
too); the comparison with the peers a user would pick, PyTorch 2.x with FBGEMM among
them, is tools/compare/peers.py (docs/peers.md):

    python3 tools/bench/compare_torch.py [--clembed build/clembed] [--reps 15] [--rounds 3]
                                   [--threads N] [--only TEXT] [--ceiling] [--warm]

The two are run alternately, --rounds times (a shared machine's speed drifts
from minute to minute); each figure is the median over the rounds, and the
speed-up is the median of the per-round ratios (PyTorch ms / clembed ms).
Like for like with the bench, where every run of an operation follows a copy
of at least twice the largest cache: before each timed PyTorch run the script
reads a buffer of the bench's copy size (a sum), so PyTorch finds none of its
last run's rows cached either (--warm: no such sweep, PyTorch's caches as its
last run left them, which flatters it on rows whose ids repeat from run to
run).
PyTorch is only a point of comparison, never a dependency: without it the
script prints clembed's figures and says so. Rows PyTorch has no like-for-like
operation for (ggml's block types, row-wise Adagrad) show "-". The bag rows
run F.embedding_bag (caffe2's perfkernels in Debian's build, FBGEMM's
generated code in PyPI's), the 26-feature row 26 such calls and their
outputs concatenated.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compare"))
from peers import torch_sinusoid  # noqa: E402 (the PyTorch tutorial's table, one copy for both tools)


SWEEP = []  # the buffer read before each timed run (empty: none)


def median_ms(fn, reps):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        for buf in SWEEP:
            buf.sum()  # past every cache, as the bench's copy between two runs
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


class TorchRows:
    """PyTorch's version of each bench row, keeping the tensors a row needs
    while the next row has the same shapes (as the bench does)."""

    def __init__(self, threads):
        import torch

        self.torch = torch
        if threads:
            torch.set_num_threads(threads)
        self.g = torch.Generator().manual_seed(1)
        self.cache = {}

    def table(self, V, d, dt):
        key = ("table", V, d, dt)
        if key not in self.cache:
            self.cache = {k: v for k, v in self.cache.items() if k[0] != "table"}  # one table at a time
            t = self.torch
            self.cache[key] = (t.rand(V, d, generator=self.g) * 2 - 1).to(getattr(t, TORCH_DTYPES[dt]))
        return self.cache[key]

    def ids(self, n, V, sequential):
        t = self.torch
        key = ("ids", n, V, sequential)
        if key not in self.cache:
            self.cache[key] = t.arange(n) % V if sequential else t.randint(0, V, (n,), generator=self.g)
        return self.cache[key]

    def run(self, row, reps):
        """Median ms of PyTorch's version of the row, or None."""
        t = self.torch
        kind, V, d, n, seq = row["kind"], row["V"], row["d"], row["n"], row["seq"]
        tdt, odt = row["table_dtype"], row["out_dtype"]
        if tdt not in TORCH_DTYPES or odt not in TORCH_DTYPES:
            return None  # ggml's block types
        tt, ot = getattr(t, TORCH_DTYPES[tdt]), getattr(t, TORCH_DTYPES[odt])
        if kind in ("lookup", "latency", "embed_sinusoid", "embed_learned"):
            W = self.table(V, d, tdt)
            ids = self.ids(n, V, row["sequential"])
            out = t.empty(n, d, dtype=ot)
            if kind == "lookup" or kind == "latency":
                if tt == ot:
                    return median_ms(lambda: t.index_select(W, 0, ids, out=out), reps)
                return median_ms(lambda: out.copy_(t.nn.functional.embedding(ids, W)), reps)  # gather, then convert
            pe = self.positions(seq, d) if kind == "embed_sinusoid" else t.rand(seq, d, generator=self.g)
            scale = math.sqrt(d) if kind == "embed_sinusoid" else 1.0
            out3 = out.view(n // seq, seq, d)

            def fused():
                t.index_select(W, 0, ids, out=out)
                if scale != 1.0:
                    out.mul_(scale)
                out3.add_(pe)

            return median_ms(fused, reps)
        if kind == "positional":
            return median_ms(lambda: self.positions(n, d), reps)
        if kind == "rope_cache":
            inv = 1.0 / (10000.0 ** (t.arange(0, d, 2, dtype=t.float32) / d))

            def cache():
                f = t.outer(t.arange(V, dtype=t.float32), inv)
                return t.cat((f.cos(), f.sin()), dim=-1)

            return median_ms(cache, reps)
        if kind == "rope_apply":  # Hugging Face's apply_rotary_pos_emb (NeoX halves), head_dim 128
            x = (t.rand(n, d // 128, 128, generator=self.g) * 2 - 1).to(tt)
            inv = 1.0 / (10000.0 ** (t.arange(0, 128, 2, dtype=t.float32) / 128))
            f = t.outer(t.arange(n, dtype=t.float32), inv)
            emb = t.cat((f, f), dim=-1)
            cos, sin = emb.cos().to(tt)[:, None, :], emb.sin().to(tt)[:, None, :]

            def rotate_half(v):
                return t.cat((-v[..., 64:], v[..., :64]), dim=-1)

            return median_ms(lambda: x * cos + rotate_half(x) * sin, reps)
        if kind in ("backward", "backward_atomic", "sgd_update", "optimizer"):
            W = self.table(V, d, tdt)
            ids = self.ids(n, V, False)
            grad = t.rand(n, d, generator=self.g)
            if kind.startswith("backward"):
                dW = t.zeros(V, d)
                return median_ms(lambda: dW.index_add_(0, ids, grad), reps)
            if kind == "sgd_update":
                return median_ms(lambda: W.index_add_(0, ids, grad.to(tt), alpha=-1e-9), reps)
            # the sparse gradient PyTorch's embedding backward makes, then the step
            # (coalescing the repeated ids included, as clembed folds them)
            name = row["operation"]
            Wp = t.nn.Parameter(W.clone())
            idx = ids.unsqueeze(0)
            if "ROWWISE" in name:
                return None  # FBGEMM's, not PyTorch's
            if "ADAGRAD" in name:
                opt = t.optim.Adagrad([Wp], lr=1e-9)
            elif "ADAM" in name:
                opt = t.optim.SparseAdam([Wp], lr=1e-9)
            else:
                opt = t.optim.SGD([Wp], lr=1e-9)

            def step():
                Wp.grad = t.sparse_coo_tensor(idx, grad.to(tt), (V, d))
                opt.step()

            try:
                return median_ms(step, reps)
            except RuntimeError:
                return None  # this PyTorch has no such step for the dtype
        if kind in ("embed_bert", "embed_bert_backward"):
            return self.bert(row, reps)
        if kind in ("bag_sum", "bag_mean", "bags"):
            # F.embedding_bag with B starts; the 26 features as 26 calls on their own tables, their outputs
            # side by side (what TorchRec's EmbeddingBagCollection gives), as clembed_embedding_bags writes them
            F = t.nn.functional
            feats = 26 if kind == "bags" else 1
            rows, per = V // feats, n // feats
            W = self.table(V, d, tdt)
            ids = self.ids(n, rows, False)
            offsets = t.arange(0, per, seq)
            mode = "mean" if kind == "bag_mean" else "sum"
            if feats == 1:
                return median_ms(lambda: F.embedding_bag(ids, W, offsets, mode=mode), reps)
            tables = [W[f * rows:(f + 1) * rows] for f in range(feats)]
            idv = [ids[f * per:(f + 1) * per] for f in range(feats)]
            return median_ms(lambda: t.cat([F.embedding_bag(idv[f], tables[f], offsets, mode=mode)
                                            for f in range(feats)], dim=1), reps)
        if kind in ("init_normal", "init_uniform"):
            W = self.table(V, d, tdt)
            return median_ms((lambda: W.normal_(0.0, 1.0)) if kind == "init_normal" else (lambda: W.uniform_(-1.0, 1.0)),
                             reps)
        return None

    def bert(self, row, reps):
        """BERT's input layer as Hugging Face's BertEmbeddings computes it: three
        nn.Embedding (word, position, token type) summed, then nn.LayerNorm (eps
        1e-12); the backward: autograd's, every gradient accumulated (the graph
        kept and the output gradient fed again, as the bench row does)."""
        t = self.torch
        V, d, n, seq = row["V"], row["d"], row["n"], row["seq"]
        word = t.nn.Embedding(V, d)
        with t.no_grad():
            word.weight.copy_(self.table(V, d, "f32"))
        pos, types, norm = t.nn.Embedding(seq, d), t.nn.Embedding(2, d), t.nn.LayerNorm(d, eps=1e-12)
        ids = self.ids(n, V, False).view(n // seq, seq)
        tt = (t.arange(seq) >= seq // 2).long().expand(n // seq, seq)
        pids = t.arange(seq).expand(n // seq, seq)

        def forward():
            return norm(word(ids) + types(tt) + pos(pids))

        if row["kind"] == "embed_bert":
            with t.no_grad():
                return median_ms(forward, reps)
        out = forward()
        grad = t.rand(out.shape, generator=self.g)
        return median_ms(lambda: out.backward(grad, retain_graph=True), reps)

    def positions(self, length, d):
        return torch_sinusoid(self.torch, length, d)


def clembed_rows(binary, reps, only, ceiling):
    """clembed's rows in order, and the reference line (the copy every ratio uses)."""
    cmd = [binary, "bench", "--json", "--reps", str(reps)] + (["--only", only] if only else []) + \
        (["--ceiling"] if ceiling else [])
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    rows, reference = [], None
    for line in res.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            if "operation" in r:
                rows.append(r)
            elif "reference" in r:
                reference = r
    return rows, reference


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clembed", default=os.path.join(here, "..", "..", "build", "clembed"))
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3, help="alternate clembed and PyTorch this many times")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="torch threads (default: the number of CPUs, as OpenCL's CPU devices use)")
    ap.add_argument("--only", default=None, help="only the bench rows whose name contains this")
    ap.add_argument("--ceiling", action="store_true", help="also run the bench's C ceilings")
    ap.add_argument("--warm", action="store_true",
                    help="no cache sweep before PyTorch's timed runs (the bench sweeps before clembed's)")
    args = ap.parse_args()

    ours, theirs, references = [], [], []
    torch_rows, version = None, None
    try:
        torch_rows = TorchRows(args.threads)
        version = torch_rows.torch.__version__
    except ImportError:
        print("PyTorch is not installed (Debian: apt-get install python3-torch): clembed's figures only")
    for _ in range(max(1, args.rounds)):
        rows, reference = clembed_rows(args.clembed, args.reps, args.only, args.ceiling)
        ours.append(rows)
        references.append(reference)
        if torch_rows and not args.warm and not SWEEP and reference:
            SWEEP.append(torch_rows.torch.ones(reference["min_copy_bytes"] // 4))
        if torch_rows:
            theirs.append({r["operation"]: torch_rows.run(r, args.reps) for r in rows})
            torch_rows.cache = {}

    for ref in references:
        if ref:
            print(f"reference copy: {ref['reference']} at {ref['reference_gb_per_s']:.1f} GB/s; largest cache "
                  f"{ref['cache_bytes'] / 2**20:.0f} MiB from {ref['cache_source']}, copies of "
                  f"{ref['min_copy_bytes'] / 2**20:.0f} MiB or more")
    print(f"{'operation':52s} {'clembed ms':>10s} {'vs copy':>8s} {'vs C':>6s} {'torch ms':>9s} {'speed-up':>9s}")
    for k, row in enumerate(ours[0]):
        name = row["operation"]
        found = [rows[k] for rows in ours if k < len(rows) and rows[k]["operation"] == name]
        ms = statistics.median(r["median_ms"] for r in found)
        if "round_trips" in row:
            print(f"{name:52s} {ms:10.3f} {statistics.median(r['round_trips'] for r in found):6.2f} trips")
            continue
        ratio = statistics.median(r["copy_ratio"] for r in found)
        ceil = [r["ceiling_ratio"] for r in found if "ceiling_ratio" in r]
        ccol = f"{statistics.median(ceil):5.2f}x" if ceil else f"{'-':>6s}"
        tms = [t.get(name) for t in theirs]
        pairs = [(tm, r["median_ms"]) for tm, r in zip(tms, found) if tm]
        if pairs:
            tcol = f"{statistics.median(tm for tm, _ in pairs):9.2f}"
            scol = f"{statistics.median(tm / m for tm, m in pairs):8.2f}x"
        else:
            tcol, scol = f"{'-':>9s}", f"{'-':>9s}"
        print(f"{name:52s} {ms:10.2f} {ratio:7.2f}x {ccol} {tcol} {scol}")
    if theirs:
        sweep = "no cache sweep (--warm)" if args.warm else "caches swept before each timed run, as the bench's"
        print(f"(torch {version}, {args.threads} threads, {len(theirs)} rounds; {sweep})")


if __name__ == "__main__":
    sys.exit(main())
