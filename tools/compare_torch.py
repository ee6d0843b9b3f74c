#!/usr/bin/env python3
"""Runs `clembed bench --json` and the same shapes with PyTorch on the CPU, and
prints the two side by side (median milliseconds, and how many times faster
clembed is). Regenerates the README's performance table:

    python3 tools/compare_torch.py [--clembed build/clembed] [--reps 15] [--rounds 3] [--threads N]

The two are run alternately, --rounds times (a shared machine's speed drifts
from minute to minute); each figure is the median over the rounds, and the
speed-up is the median of the per-round ratios (PyTorch ms / clembed ms).
PyTorch is only a point of comparison, never a dependency: without it the
script prints clembed's figures and says so.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time


def median_ms(fn, reps):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def torch_rows(reps, threads, n, d, V):
    import torch

    if threads:
        torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(1)
    W = torch.rand(V, d, generator=g) * 2 - 1
    ids = torch.randint(0, V, (n,), generator=g)
    out = torch.empty(n, d)
    rows = {}
    rows["copy (same bytes as the f32 lookup)"] = median_ms(lambda: out.copy_(W[:n]), reps)
    rows["lookup f32"] = median_ms(lambda: torch.index_select(W, 0, ids, out=out), reps)
    # half tables: PyTorch's embedding of an f16 (bf16) weight gives f16 (bf16),
    # so these compare with clembed's f16 -> f16 and bf16 -> bf16 rows
    Wh = W.half()
    outh = torch.empty(n, d, dtype=torch.half)
    rows["lookup f16 table, f16 out"] = median_ms(lambda: torch.index_select(Wh, 0, ids, out=outh), reps)
    Wb = W.bfloat16()
    outb = torch.empty(n, d, dtype=torch.bfloat16)
    rows["lookup bf16 table, bf16 out"] = median_ms(lambda: torch.index_select(Wb, 0, ids, out=outb), reps)
    # sqrt(d) * W[ids] + PE, sequences of 2048, in three in-place passes
    pos = torch.arange(2048, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(2048, d)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    out3 = out.view(n // 2048, 2048, d)
    scale = math.sqrt(d)

    def fused():
        torch.index_select(W, 0, ids, out=out)
        out.mul_(scale)
        out3.add_(pe)

    rows["embed sqrt + sinusoid"] = median_ms(fused, reps)
    learned = torch.rand(2048, d, generator=g)

    def learned_fn():
        torch.index_select(W, 0, ids, out=out)
        out3.add_(learned)

    rows["embed + learned positions"] = median_ms(learned_fn, reps)

    def positional():
        p = torch.arange(n, dtype=torch.float32).unsqueeze(1)
        t = torch.empty(n, d)
        t[:, 0::2] = torch.sin(p * div)
        t[:, 1::2] = torch.cos(p * div)
        return t

    rows["positional table"] = median_ms(positional, reps)
    grad = torch.rand(n, d, generator=g)
    dW = torch.zeros(V, d)
    rows["backward (accumulate, deterministic)"] = median_ms(lambda: dW.index_add_(0, ids, grad), reps)
    rows["sgd_update"] = median_ms(lambda: W.index_add_(0, ids, grad, alpha=-1e-9), reps)
    # sparse optimizer steps from the same gradient rows: the sparse gradient
    # tensor PyTorch's embedding backward makes, then the optimizer's step
    # (coalescing the repeated ids included, as clembed folds them)
    Wp = torch.nn.Parameter(W.clone())
    idx = ids.unsqueeze(0)
    optims = {"optimizer SGD": torch.optim.SGD([Wp], lr=1e-9),
              "optimizer ADAGRAD": torch.optim.Adagrad([Wp], lr=1e-9),
              "optimizer ADAM": torch.optim.SparseAdam([Wp], lr=1e-9)}
    for name, opt in optims.items():
        def step(opt=opt):
            Wp.grad = torch.sparse_coo_tensor(idx, grad, (V, d))
            opt.step()
        rows[name] = median_ms(step, reps)
    # initialisation of the V x d float32 table, in place
    rows["init normal f32 (V x d)"] = median_ms(lambda: W.normal_(0.0, 1.0), reps)
    rows["init uniform f32 (V x d)"] = median_ms(lambda: W.uniform_(-1.0, 1.0), reps)
    return rows, torch.__version__, torch.get_num_threads()


def clembed_rows(binary, reps):
    """clembed's rows by name, and the reference line (the copy every ratio uses)."""
    res = subprocess.run([binary, "bench", "--json", "--reps", str(reps)], check=True, capture_output=True, text=True)
    rows, reference = {}, None
    for line in res.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            if "operation" in r:
                rows[r["operation"]] = r
            elif "reference" in r:
                reference = r
    return rows, reference


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clembed", default=os.path.join(here, "..", "build", "clembed"))
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3, help="alternate clembed and PyTorch this many times")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="torch threads (default: the number of CPUs, as OpenCL's CPU devices use)")
    args = ap.parse_args()

    rounds_ours, rounds_theirs, references = [], [], []
    version, threads, have_torch = None, None, True
    for _ in range(max(1, args.rounds)):
        rows, reference = clembed_rows(args.clembed, args.reps)
        rounds_ours.append(rows)
        references.append(reference)
        shape = reference or {"n": 16384, "d": 1024, "V": 32000}
        if have_torch:
            try:
                t, version, threads = torch_rows(args.reps, args.threads, shape["n"], shape["d"], shape["V"])
                rounds_theirs.append(t)
            except ImportError:
                have_torch = False
                print("PyTorch is not installed (Debian: apt-get install python3-torch): clembed's figures only")

    def find_in(rows, prefix):
        if prefix in rows:
            return rows[prefix]
        for name, r in rows.items():
            if name.startswith(prefix):
                return r
        return None

    def find(prefix):
        """clembed's row over the rounds: median time and median ratio."""
        found = [find_in(rows, prefix) for rows in rounds_ours]
        found = [r for r in found if r is not None]
        if not found:
            return None
        merged = dict(found[0])
        for key in ("median_ms", "copy_ratio", "round_trips"):
            if key in merged:
                merged[key] = statistics.median(r[key] for r in found)
        merged["per_round_ms"] = [r["median_ms"] for r in found]
        return merged

    theirs = None
    if rounds_theirs:
        theirs = {k: statistics.median(t[k] for t in rounds_theirs) for k in rounds_theirs[0]}

    print(f"{'operation':38s} {'clembed ms':>11s} {'vs copy':>8s} {'torch ms':>9s} {'clembed speed-up':>17s}")
    for ref in references:
        if ref:
            print(f"reference copy: {ref['reference']} at {ref['reference_gb_per_s']:.1f} GB/s "
                  f"(n {ref['n']}, d {ref['d']}, V {ref['V']}; caches: host {ref['host_llc_bytes'] / 2**20:.0f} MiB, "
                  f"device {ref['device_cache_bytes'] / 2**20:.0f} MiB)")
    for prefix in ["lookup f32", "lookup f16 table, f16 out", "lookup bf16 table, bf16 out",
                   "lookup f16 table, f32 out", "lookup bf16 table, f32 out", "embed sqrt + sinusoid",
                   "embed + learned positions", "positional table", "backward (accumulate, deterministic)",
                   "sgd_update", "optimizer SGD", "optimizer ADAGRAD", "optimizer ROWWISE_ADAGRAD",
                   "optimizer ADAM", "init normal f32 (V x d)", "init uniform f32 (V x d)"]:
        r = find(prefix)
        if r is None:
            continue
        t = theirs.get(prefix) if theirs else None  # None: PyTorch has no like-for-like operation
        ratio = r.get("copy_ratio", float("nan"))
        tcol = f"{t:9.2f}" if t else f"{'-':>9s}"
        speedup = None
        if t:  # per round: PyTorch's time over clembed's from the same round
            speedup = statistics.median(tr[prefix] / ms for tr, ms in zip(rounds_theirs, r["per_round_ms"]))
        scol = f"{speedup:16.2f}x" if speedup else f"{'-':>17s}"
        print(f"{prefix:38s} {r['median_ms']:11.2f} {ratio:7.2f}x {tcol} {scol}")
    r = find("one-token")
    if r:
        print(f"{'one-token lookup + finish':38s} {r['median_ms']:11.3f} {r['round_trips']:6.2f} trips")
    if theirs:
        print(f"(torch {version}, {threads} threads, {len(rounds_theirs)} rounds; torch copy of the same bytes: "
              f"{theirs['copy (same bytes as the f32 lookup)']:.2f} ms)")


if __name__ == "__main__":
    sys.exit(main())
