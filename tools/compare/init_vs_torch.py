#!/usr/bin/env python3
"""clembed_matrix_init_normal / _uniform against PyTorch's normal_ / uniform_,
interleaved pair by pair in one process (a shared machine's drift hits both):

    /usr/bin/python3 tools/compare/init_vs_torch.py [ROWS COLS PAIRS] [--lib build/libclembed.so] [--threads 2]

Prints the median times and the median of the per-pair ratios (PyTorch time /
clembed time) with their range. The library is used through ctypes on the
default device (CLEMBED_DEVICE); PyTorch is only a point of comparison.
"""
import argparse
import ctypes as C
import os
import statistics
import sys
import time


class Matrix(C.Structure):
    _fields_ = [("buffer", C.c_void_p), ("offset", C.c_size_t), ("rows", C.c_size_t), ("cols", C.c_size_t),
                ("ld", C.c_size_t), ("dtype", C.c_int)]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", type=int, nargs="?", default=32000)
    ap.add_argument("cols", type=int, nargs="?", default=1024)
    ap.add_argument("pairs", type=int, nargs="?", default=9)
    ap.add_argument("--lib", default=os.path.join(here, "..", "..", "build", "libclembed.so"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed (Debian: apt-get install python3-torch; run with /usr/bin/python3)")
        return 1
    torch.set_num_threads(args.threads)
    lib = C.CDLL(args.lib)
    lib.clembed_last_error_message.restype = C.c_char_p
    lib.clembed_context_message.restype = C.c_char_p
    ctx = C.c_void_p()
    if lib.clembed_context_create(None, C.byref(ctx)):
        print(lib.clembed_last_error_message().decode())
        return 2
    m = Matrix()
    if lib.clembed_matrix_create(ctx, C.c_size_t(args.rows), C.c_size_t(args.cols), 0, C.byref(m)):
        print(lib.clembed_context_message(ctx).decode())
        return 2
    W = torch.empty(args.rows, args.cols)
    sig = [C.c_void_p, C.POINTER(Matrix), C.c_float, C.c_float, C.c_uint64, C.c_uint, C.c_void_p, C.c_void_p]
    lib.clembed_matrix_init_normal.argtypes = sig
    lib.clembed_matrix_init_uniform.argtypes = sig

    def ours(normal):
        f = lib.clembed_matrix_init_normal if normal else lib.clembed_matrix_init_uniform
        t = time.perf_counter()
        if f(ctx, C.byref(m), 0.0 if normal else -1.0, 1.0, 7, 0, None, None) or lib.clembed_finish(ctx):
            raise RuntimeError(lib.clembed_context_message(ctx).decode())
        return time.perf_counter() - t

    def theirs(normal):
        t = time.perf_counter()
        if normal:
            W.normal_(0.0, 1.0)
        else:
            W.uniform_(-1.0, 1.0)
        return time.perf_counter() - t

    for normal in (1, 0):
        ours(normal)  # warm-up: builds the kernel
        theirs(normal)
        a, b, r = [], [], []
        for _ in range(args.pairs):
            x, y = ours(normal), theirs(normal)
            a.append(x)
            b.append(y)
            r.append(y / x)
        print(f"{'normal' if normal else 'uniform'} {args.rows}x{args.cols}: clembed {statistics.median(a) * 1e3:.1f} ms, "
              f"torch {statistics.median(b) * 1e3:.1f} ms, speed-up {statistics.median(r):.2f}x "
              f"(pairs {min(r):.2f} - {max(r):.2f})")
    lib.clembed_matrix_release(C.byref(m))
    lib.clembed_context_destroy(ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
