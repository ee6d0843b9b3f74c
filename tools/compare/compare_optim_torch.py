#!/usr/bin/env python3
"""Compares clembed_optimizer_step with PyTorch's sparse optimizers on the same
embedding, ids, gradients and hyper-parameters, step by step:

    python3 tools/compare/compare_optim_torch.py [--lib build/libclembed.so] [--steps 5] [--device SPEC]

  SGD             torch.optim.SGD on nn.Embedding(sparse=True)
  ADAGRAD         torch.optim.Adagrad on a sparse gradient (lr_decay 0, initial accumulator 0)
  ADAM            torch.optim.SparseAdam
  (ROWWISE_ADAGRAD has no PyTorch counterpart; FBGEMM's EXACT_ROWWISE_ADAGRAD
  is its reference.)

For each, it prints after every step the largest difference of the table and
of the states, relative to the tensor's largest magnitude, and how many
elements differ at all. PyTorch sums repeated ids in its own order (coalesce),
where clembed folds them in ascending token order, and may fuse a multiply-add
(w + (-lr) * g), so the last bits differ; a row repeated 125 times (one of the
rows here) has a gradient whose rounding error is about 1e-5 of its size either
way, and Adam's second moment squares it. The script exits 1 if a difference
exceeds --max-rel (default 1e-4) of the tensor's largest magnitude. Uses the library through ctypes; PyTorch (Debian: python3-torch, run
with /usr/bin/python3) and NumPy are needed.
"""
import argparse
import ctypes as C
import os
import sys

import numpy as np


class Matrix(C.Structure):
    _fields_ = [("buffer", C.c_void_p), ("offset", C.c_size_t), ("rows", C.c_size_t), ("cols", C.c_size_t),
                ("ld", C.c_size_t), ("dtype", C.c_int)]


class Ids(C.Structure):
    _fields_ = [("buffer", C.c_void_p), ("offset", C.c_size_t), ("count", C.c_size_t), ("type", C.c_int)]


class BackwardOptions(C.Structure):
    _fields_ = [("scale", C.c_float), ("policy", C.c_int), ("padding_idx", C.c_int64),
                ("scale_grad_by_freq", C.c_int), ("deterministic", C.c_int), ("accumulate", C.c_int),
                ("seq_len", C.c_size_t), ("position_offset", C.c_size_t), ("sequence_offsets", C.c_void_p),
                ("position_grad", C.c_void_p), ("dropout", C.c_float), ("dropout_seed", C.c_uint64)]


class Optimizer(C.Structure):
    _fields_ = [("kind", C.c_int), ("learning_rate", C.c_float), ("eps", C.c_float), ("beta1", C.c_float),
                ("beta2", C.c_float), ("weight_decay", C.c_float), ("step", C.c_uint64),
                ("state", C.POINTER(Matrix)), ("state2", C.POINTER(Matrix))]


SGD, ADAGRAD, ROWWISE_ADAGRAD, ADAM = 0, 1, 2, 3


class Lib:
    def __init__(self, path, device):
        self.l = C.CDLL(path)
        l = self.l
        l.clembed_status_string.restype = C.c_char_p
        l.clembed_context_message.restype = C.c_char_p
        l.clembed_context_device_name.restype = C.c_char_p
        l.clembed_last_error_message.restype = C.c_char_p
        l.clembed_backward_defaults.restype = BackwardOptions
        l.clembed_optimizer_defaults.restype = Optimizer
        l.clembed_optimizer_defaults.argtypes = [C.c_int]
        self.ctx = C.c_void_p()
        s = l.clembed_context_create(device.encode() if device else None, C.byref(self.ctx))
        if s:
            raise RuntimeError(l.clembed_last_error_message().decode())

    def check(self, s, what):
        if s:
            raise RuntimeError(f"{what}: {self.l.clembed_status_string(s).decode()}: "
                               f"{self.l.clembed_context_message(self.ctx).decode()}")

    def matrix(self, a):
        a = np.ascontiguousarray(a, dtype=np.float32)
        m = Matrix()
        self.check(self.l.clembed_matrix_create(self.ctx, C.c_size_t(a.shape[0]), C.c_size_t(a.shape[1]), 0,
                                                C.byref(m)), "matrix_create")
        self.check(self.l.clembed_matrix_write(self.ctx, C.byref(m), a.ctypes.data_as(C.c_void_p), 0), "write")
        return m

    def read(self, m):
        a = np.empty((m.rows, m.cols), np.float32)
        self.check(self.l.clembed_matrix_read(self.ctx, C.byref(m), a.ctypes.data_as(C.c_void_p), 0), "read")
        return a

    def ids(self, a):
        a = np.ascontiguousarray(a, dtype=np.int64)
        i = Ids()
        self.check(self.l.clembed_ids_create(self.ctx, a.ctypes.data_as(C.c_void_p), C.c_size_t(a.size), 1,
                                             C.byref(i)), "ids_create")
        return i

    def release(self, *ms):
        for m in ms:
            if isinstance(m, Matrix):
                self.l.clembed_matrix_release(C.byref(m))
            else:
                self.l.clembed_ids_release(C.byref(m))


def ulps(a, b):
    """max |a - b| relative to max |b| (the tensor's scale)."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return float(np.max(np.abs(a - b))) / scale if scale > 0 else float(np.max(np.abs(a - b), initial=0.0))


def run(lib, torch, kind, steps, V, d, n, lr, rng):
    import torch.nn as nn

    W0 = rng.uniform(-1, 1, (V, d)).astype(np.float32)
    emb = nn.Embedding(V, d, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(torch.from_numpy(W0))
    if kind == SGD:
        topt = torch.optim.SGD(emb.parameters(), lr=lr)
    elif kind == ADAGRAD:
        topt = torch.optim.Adagrad(emb.parameters(), lr=lr, eps=1e-10)
    else:
        topt = torch.optim.SparseAdam(emb.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8)

    table = lib.matrix(W0)
    s1 = lib.matrix(np.zeros((V, d), np.float32)) if kind != SGD else None
    s2 = lib.matrix(np.zeros((V, d), np.float32)) if kind == ADAM else None
    o = lib.l.clembed_optimizer_defaults(kind)
    o.learning_rate = lr
    if s1 is not None:
        o.state = C.pointer(s1)
    if s2 is not None:
        o.state2 = C.pointer(s2)
    bo = lib.l.clembed_backward_defaults()
    worst = 0.0
    for step in range(1, steps + 1):
        ids = rng.integers(0, V // 2, n)  # half the rows never occur
        ids[: n // 4] = 3  # and one row many times
        G = rng.uniform(-1, 1, (n, d)).astype(np.float32)
        topt.zero_grad()
        out = emb(torch.from_numpy(ids))
        out.backward(torch.from_numpy(G))
        topt.step()
        gm, im = lib.matrix(G), lib.ids(ids)
        o.step = step
        lib.check(lib.l.clembed_optimizer_step(lib.ctx, C.byref(gm), C.byref(im), C.byref(bo), C.byref(o),
                                               C.byref(table), 0, None, None), "optimizer_step")
        lib.check(lib.l.clembed_finish(lib.ctx), "finish")
        lib.release(gm, im)
        ours = lib.read(table)
        theirs = emb.weight.detach().numpy()
        line = f"  step {step}: table {ulps(ours, theirs):9.2e}, {int(np.sum(ours != theirs)):5d} of {ours.size} differ"
        worst = max(worst, ulps(ours, theirs))
        st = topt.state[emb.weight]
        if kind == ADAGRAD:
            u = ulps(lib.read(s1), st["sum"].to_dense().numpy())
            line += f"; sum {u:9.2e}"
            worst = max(worst, u)
        if kind == ADAM:
            u1 = ulps(lib.read(s1), st["exp_avg"].numpy())
            u2 = ulps(lib.read(s2), st["exp_avg_sq"].numpy())
            line += f"; exp_avg {u1:9.2e}, exp_avg_sq {u2:9.2e}"
            worst = max(worst, u1, u2)
        print(line)
    lib.release(*(m for m in (table, s1, s2) if m is not None))
    return worst


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.path.join(here, "..", "..", "build", "libclembed.so"))
    ap.add_argument("--device", default=None)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--max-rel", type=float, default=1e-4)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed (Debian: apt-get install python3-torch; run with /usr/bin/python3)")
        return 1
    torch.set_num_threads(1)
    lib = Lib(args.lib, args.device)
    print(f"device: {lib.l.clembed_context_device_name(lib.ctx).decode()}, torch {torch.__version__}")
    rng = np.random.default_rng(7)
    worst = 0.0
    for kind, name, lr in ((SGD, "SGD", 0.1), (ADAGRAD, "ADAGRAD", 0.01), (ADAM, "ADAM (SparseAdam)", 0.01)):
        print(name)
        worst = max(worst, run(lib, torch, kind, args.steps, 200, 33, 500, lr, rng))
    lib.l.clembed_context_destroy(lib.ctx)
    print(f"largest difference {worst:.2e} of the tensor's scale (limit {args.max_rel:g})")
    return 0 if worst <= args.max_rel else 1


if __name__ == "__main__":
    sys.exit(main())
