#!/usr/bin/env python3
"""clembed's bags over FBGEMM's row-wise tables against FBGEMM's CPU inference TBE
(IntNBitTableBatchedEmbeddingBagsCodegen) on the same tables and bags, 2 threads (a
comparison, not a test: fbgemm-gpu-cpu is a peer, never a dependency; install it with
the PyTorch release it pairs with, in a venv of its own).

    PYTHONPATH=python CLEMBED_LIBRARY=build/libclembed.so VENV/bin/python tools/compare/tbe_rowwise.py \\
        [--rows 1000000] [--cols 128] [--bags 4096] [--seq 32] [--reps 15] [--only INT4] [--pruned 1500000]

For INT8, INT4 and INT2: the table quantized by fbgemm_gpu's quantize_embs (the rows the
TBE is filled with in FBGEMM's tests); clembed's i8_tbe / i4_tbe / i2_tbe matrix holds the
same bytes (checked), the TBE's weights those bytes (checked). The bags (B bags of S
random ids, SUM, F32 output) run alternately, pair by pair, a 512 MiB buffer written
between runs so no run starts with the table's rows in the caches; each side's median.
The pooled values are compared against float64 sums of the dequantized rows (the TBE
pools fma(scale * w, q, acc + bias * w), clembed acc + fma(q, scale, bias): the same
within float32 rounding, not the same bits). Prints a table; --json for the numbers.

--pruned U: a pruned table, the rows kept of U ids (an index remapping of U entries, the
others -1, as FBGEMM's pruned_array): the ids are drawn from the U, the TBE gets the
remapping as its index_remapping, clembed as remap= (applied in the bag's own pass).
"""
import argparse
import json
import os
import platform
import sys
import time

import numpy as np

try:
    import torch
    import fbgemm_gpu  # noqa: F401
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen
    from fbgemm_gpu.tbe.utils.quantize import quantize_embs
except ImportError as e:
    print("fbgemm-gpu-cpu is not installed (%s): nothing compared" % e)
    sys.exit(2)

import clembed

TYPES = {"INT8": "i8_tbe", "INT4": "i4_tbe", "INT2": "i2_tbe"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1000000)
    ap.add_argument("--cols", type=int, default=128)
    ap.add_argument("--bags", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--pruned", type=int, default=0, help="ids of the unpruned table (> --rows), 0: none")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ctx = clembed.Context()
    rng = np.random.default_rng(1)
    sweep = np.ones(512 << 18, np.float32)  # 512 MiB, written between runs
    n = a.bags * a.seq
    remap = None
    if a.pruned:  # rows kept of a.pruned ids, in random places
        if a.pruned < a.rows:
            sys.exit("--pruned %d: fewer ids than the %d rows kept" % (a.pruned, a.rows))
        remap = np.full(a.pruned, -1, np.int32)
        remap[rng.permutation(a.pruned)[:a.rows]] = rng.permutation(a.rows).astype(np.int32)
    ids = rng.integers(0, a.pruned or a.rows, n)
    rows = remap[ids] if remap is not None else ids
    offsets = np.arange(0, n + 1, a.seq)
    t_ids, t_off = torch.from_numpy(ids.astype(np.int32)), torch.from_numpy(offsets.astype(np.int32))
    d_ids, d_off = ctx.ids(ids), ctx.ids(offsets[:-1])
    d_remap = ctx.ids(remap) if remap is not None else None
    out = ctx.empty(a.bags, a.cols)
    results = []
    x = None
    for ty, name in TYPES.items():
        if a.only and a.only not in ty:
            continue
        if x is None:
            x = (rng.random((a.rows, a.cols), np.float32) * 2 - 1).astype(np.float32)
        sty = getattr(SparseType, ty)
        q, sb = quantize_embs(torch.from_numpy(x), sty)
        tbe = IntNBitTableBatchedEmbeddingBagsCodegen([("t", a.rows, a.cols, sty, EmbeddingLocation.HOST)],
                                                      device="cpu", output_dtype=SparseType.FP32,
                                                      pooling_mode=PoolingMode.SUM,
                                                      index_remapping=[torch.from_numpy(remap)] if a.pruned else None)
        tbe.fill_random_weights()
        w, s = tbe.split_embedding_weights()[0]
        w.copy_(q)
        s.copy_(sb)
        stored = torch.cat([sb, q], 1).numpy()
        m = ctx.matrix(stored, dtype=name, cols=a.cols)
        same_bytes = bool(np.array_equal(m.raw()[:1000], ctx.matrix(x[:1000], dtype=name).raw()))
        times = {"clembed": [], "tbe": []}
        for r in range(a.reps + 1):
            for side in ("clembed", "tbe") if r % 2 == 0 else ("tbe", "clembed"):
                sweep += 1.0
                t0 = time.perf_counter()
                if side == "clembed":
                    ctx.embedding_bag(m, d_ids, d_off, mode="sum", out=out, remap=d_remap)
                    ctx.finish()
                else:
                    ref = tbe(t_ids, t_off)
                dt = time.perf_counter() - t0
                if r:
                    times[side].append(dt)
        got = out.numpy()
        ref = ref.numpy()
        vals = np.where((rows >= 0)[:, None], m.numpy()[np.maximum(rows, 0)], 0).astype(np.float64)
        vals = vals.reshape(a.bags, a.seq, a.cols)
        exact = vals.sum(1)
        scale = np.abs(vals).sum(1) + 1e-30
        res = {"type": ty, "dtype": name, "same_bytes_as_quantize_embs": same_bytes,
               "clembed_ms": 1e3 * float(np.median(times["clembed"])), "tbe_ms": 1e3 * float(np.median(times["tbe"])),
               "clembed_rel_err": float((np.abs(got - exact) / scale).max()),
               "tbe_rel_err": float((np.abs(ref - exact) / scale).max())}
        res["tbe_over_clembed"] = res["tbe_ms"] / res["clembed_ms"]
        results.append(res)
    info = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "threads": a.threads, "torch": torch.__version__,
            "fbgemm_gpu": getattr(fbgemm_gpu, "__version__", "?"), "device": ctx.device_name,
            "shape": [a.rows, a.cols], "bags": a.bags, "seq": a.seq, "reps": a.reps, "pruned": a.pruned,
            "results": results}
    if a.json:
        print(json.dumps(info, indent=1))
        return
    print("clembed vs FBGEMM's inference TBE (CPU), %d x %d table%s, %d bags of %d, %d threads, torch %s, fbgemm_gpu %s"
          % (a.rows, a.cols, ", pruned from %d ids" % a.pruned if a.pruned else "", a.bags, a.seq, a.threads,
             info["torch"], info["fbgemm_gpu"]))
    print("%-5s %-7s %12s %10s %10s %14s %12s" % ("type", "dtype", "clembed ms", "TBE ms", "TBE/clembed",
                                                 "clembed err", "TBE err"))
    for r in results:
        print("%-5s %-7s %12.3f %10.3f %10.2fx %14.2e %12.2e%s" % (
            r["type"], r["dtype"], r["clembed_ms"], r["tbe_ms"], r["tbe_over_clembed"], r["clembed_rel_err"],
            r["tbe_rel_err"], "" if r["same_bytes_as_quantize_embs"] else "  (bytes differ from quantize_embs!)"))


if __name__ == "__main__":
    main()
