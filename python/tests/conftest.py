"""Shared fixtures and float64 references for the clembed Python tests.

The library is the one named by CLEMBED_LIBRARY (ctest sets it to the built
library). A missing OpenCL device fails the tests unless CLEMBED_ALLOW_NO_DEVICE=1.
"""
import os

import numpy as np
import pytest

import clembed


@pytest.fixture(scope="session")
def ctx():
    try:
        c = clembed.Context()
    except clembed.NoDeviceError as e:
        if os.environ.get("CLEMBED_ALLOW_NO_DEVICE") == "1":
            pytest.skip("no OpenCL device (CLEMBED_ALLOW_NO_DEVICE=1): %s" % e)
        raise
    yield c
    c.finish()


@pytest.fixture(scope="session")
def example():
    """load(name): the module of examples/<name>.py, loaded from its file (its main() not run)."""
    import importlib.util

    def load(name):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", name + ".py")
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return load


@pytest.fixture
def dlrm_pair(example):
    """run(peer_pool, steps): examples/dlrm_torch.py's model (26 tables from 50 to 500 rows x 8,
    batch 64, Adagrad, lr 0.05) trained `steps` steps on clembed and on the pool
    peer_pool(ex, rows, init) makes (its tables stepped by torch.optim.Adagrad), from the same
    tables, weights and batches: (rows, [clembed's losses, the peer's], clembed's model, the peer's)."""
    import torch

    def run(peer_pool, steps):
        ex = example("dlrm_torch")
        rows = ex.tables_rows(500)
        gen = torch.Generator().manual_seed(3)
        init = [torch.randn(r, 8, generator=gen) * 0.05 for r in rows]
        a = ex.DLRM(ex.ClembedPool(rows, 8, init, "adagrad", 0.05, clembed.Context()), 8, 3)
        b = ex.DLRM(peer_pool(ex, rows, init), 8, 3)
        opt = torch.optim.Adagrad(b.pool.parameters(), lr=0.05, eps=1e-10)
        curves = [np.array(ex.train(a, None, ex.Data(rows, 11), steps, 64, 0.05)[0]),
                  np.array(ex.train(b, opt, ex.Data(rows, 11), steps, 64, 0.05)[0])]
        return rows, curves, a, b
    return run


def need(name):
    """Skips the calling test when the loaded library lacks the C function `name`."""
    if not clembed.has_function(name):
        pytest.skip("%s is not in the loaded library (%s)" % (name, clembed.library_path))


# ----------------------------------------------------------------- references

def philox_kc(k0, k1, c):
    """Philox4x32-10 with key (k0, k1) and counter words c (four arrays holding 32-bit
    values), plainly (Random123). Returns the four output words as uint64 arrays."""
    M = np.uint64(0xFFFFFFFF)
    c0, c1, c2, c3 = [np.asarray(x, np.uint64) & M for x in c]
    k0, k1 = np.uint64(k0) & M, np.uint64(k1) & M
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(0x9E3779B9)) & M
            k1 = (k1 + np.uint64(0xBB67AE85)) & M
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & M, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & M
    return c0, c1, c2, c3


def philox(seed, e):
    """Philox4x32-10 of include/clembed.h: key (seed lo, seed hi), counter (e lo, e hi, 0, 0);
    e an array of element indices. Returns the four words (uint32 arrays)."""
    e = np.asarray(e, dtype=np.uint64)
    zero = np.zeros_like(e)
    words = philox_kc(seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, [e, e >> np.uint64(32), zero, zero])
    return [w.astype(np.uint32) for w in words]


def unit(x):
    """u(x) = (x >> 8) * 2^-24 in float64 (exact)."""
    return (np.asarray(x, dtype=np.uint64) >> np.uint64(8)).astype(np.float64) / 16777216.0


def sinusoid_ref(length, dim, first=0, base=10000.0, exponent="pair", layout="interleaved"):
    """The float64 sinusoid of include/clembed.h, shape (length, dim)."""
    p = (first + np.arange(length, dtype=np.float64))[:, None]
    i = np.arange(dim)
    if layout == "halves":
        h = (dim + 1) // 2
        k = np.where(i < h, i, i - h)
        w = base ** (-2.0 * k / dim)
        is_cos = i >= h
    else:
        if exponent == "pair":
            w = base ** (-2.0 * np.floor(i / 2) / dim)
        else:
            w = base ** (-i / dim)
        is_cos = (i % 2) == 1
    a = p * w[None, :]
    return np.where(is_cos[None, :], np.cos(a), np.sin(a))


def bf16_round(x):
    """float32 -> bfloat16 (round to nearest even), returned as float32."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def backward_ref(grad, ids, vocab, scale=1.0, padding_idx=None, scale_grad_by_freq=False):
    """float64 table gradient."""
    g = np.asarray(grad, dtype=np.float64).reshape(-1, np.asarray(grad).shape[-1])
    ids = np.asarray(ids).reshape(-1)
    out = np.zeros((vocab, g.shape[1]))
    count = np.bincount(ids, minlength=vocab)
    for i, v in enumerate(ids):
        if padding_idx is not None and v == padding_idx:
            continue
        out[v] += scale * g[i] / (count[v] if scale_grad_by_freq else 1)
    return out
