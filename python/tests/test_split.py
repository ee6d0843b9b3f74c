"""Tables past one buffer: a context made with CLEMBED_MAX_BUFFER_BYTES below the
table's size splits what it creates and loads over several buffers, and every
result is the same bits as with the session's context (no limit)."""
import ctypes
import os

import numpy as np
import pytest

import clembed
from conftest import need


@pytest.fixture(scope="module")
def small_buffers():
    """A context whose matrices lie in buffers of at most 4000 bytes."""
    os.environ["CLEMBED_MAX_BUFFER_BYTES"] = "4000"
    try:
        c = clembed.Context()
    finally:
        del os.environ["CLEMBED_MAX_BUFFER_BYTES"]
    yield c
    c.finish()


def _pieces(ctx, m):
    """The buffers m lies in (clembed_matrix_pieces)."""
    n = ctypes.c_size_t()
    st = clembed._lib.lib.clembed_matrix_pieces(ctx._live, ctypes.byref(m._m), 0, None, None, ctypes.byref(n))
    assert st == 0
    return n.value


def test_load_split(ctx, small_buffers, tmp_path):
    need("clembed_matrix_load")
    need("clembed_matrix_pieces")
    rng = np.random.default_rng(5)
    W = rng.standard_normal((300, 64)).astype(np.float32)        # 76,800 bytes: 20 buffers of 15 rows
    p = tmp_path / "w.npy"
    np.save(p, W)
    ids = rng.integers(0, 300, size=(4, 25))
    for dtype in ("f32", "f16", "q8_0"):
        whole = ctx.load(p, dtype=dtype)
        split = small_buffers.load(p, dtype=dtype)
        assert _pieces(ctx, whole) == 1 and _pieces(small_buffers, split) > 1
        assert np.array_equal(split.raw(), whole.raw())
        a = ctx.embed(whole, ids, scale=2.0, positions="sinusoid").numpy()
        b = small_buffers.embed(split, ids, scale=2.0, positions="sinusoid").numpy()
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    # a view of rows of a split table
    split = small_buffers.load(p)
    assert np.array_equal(split.rows_view(40, 200).numpy(), W[40:240])


def test_train_split(ctx, small_buffers):
    need("clembed_matrix_pieces")
    rng = np.random.default_rng(6)
    W = rng.standard_normal((200, 32)).astype(np.float32)
    ids = rng.integers(0, 200, size=50)
    G = rng.standard_normal((50, 32)).astype(np.float32)
    results = []
    for c in (ctx, small_buffers):
        t = c.matrix(W)
        c.sgd(t, G, ids, lr=0.1)
        results.append(t.numpy())
    assert _pieces(small_buffers, small_buffers.matrix(W)) > 1
    assert np.array_equal(results[0].view(np.uint32), results[1].view(np.uint32))
