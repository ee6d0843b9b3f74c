"""Block-quantized tables (Q8_0, Q4_0: ggml's layouts and reference quantizers),
checked bit for bit against NumPy transcriptions of ggml's quantize_row_q8_0_ref,
quantize_row_q4_0_ref and dequantize_row_*; skipped only when the loaded library
lacks clembed_dtype_row_bytes (the block formats' API)."""
import numpy as np
import pytest

import clembed
from conftest import need

rng = np.random.default_rng(8)


def q8_0_ref(x):
    """(blocks as uint8 (rows, nb*34), dequantized float32)."""
    x = np.asarray(x, np.float32)
    rows, cols = x.shape
    xb = x.reshape(rows, cols // 32, 32)
    amax = np.abs(xb).max(axis=2)
    d = amax / np.float32(127)
    idd = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0)).astype(np.float32)
    v = (xb * idd[..., None]).astype(np.float64)
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)
    dh = d.astype(np.float16)
    blocks = np.concatenate([dh[..., None].view(np.uint8).reshape(rows, -1, 2),
                             q.view(np.uint8)], axis=2).reshape(rows, -1)
    deq = (q.astype(np.float32) * dh.astype(np.float32)[..., None]).reshape(rows, cols)
    return blocks, deq


def q4_0_ref(x):
    x = np.asarray(x, np.float32)
    rows, cols = x.shape
    xb = x.reshape(rows, cols // 32, 32)
    first = np.argmax(np.abs(xb), axis=2)          # the first of the largest magnitudes
    mx = np.take_along_axis(xb, first[..., None], axis=2)[..., 0]
    d = (mx / np.float32(-8)).astype(np.float32)
    idd = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0)).astype(np.float32)
    v = (xb * idd[..., None]).astype(np.float32) + np.float32(8.5)
    qi = np.minimum(15, np.trunc(v).astype(np.int64).astype(np.int8).astype(np.int64))
    lo, hi = qi[..., :16], qi[..., 16:]
    qs = (lo | (hi << 4)).astype(np.uint8)
    dh = d.astype(np.float16)
    blocks = np.concatenate([dh[..., None].view(np.uint8).reshape(rows, -1, 2), qs], axis=2).reshape(rows, -1)
    deq = ((qi - 8).astype(np.float32) * dh.astype(np.float32)[..., None]).reshape(rows, cols)
    return blocks, deq


@pytest.mark.parametrize("dtype,ref", [("q8_0", q8_0_ref), ("q4_0", q4_0_ref)])
def test_quantized_table(ctx, dtype, ref):
    need("clembed_dtype_row_bytes")
    V, D = 20, 96
    W = (rng.standard_normal((V, D)) * rng.uniform(0.01, 10, size=(V, 1))).astype(np.float32)
    W[3, :32] = 0                     # an all-zero block
    blocks, deq = ref(W)
    m = ctx.matrix(W, dtype=dtype)
    assert m.dtype == dtype and m.shape == (V, D)
    assert np.array_equal(m.raw(), blocks)
    assert np.array_equal(m.numpy(), deq)
    ids = rng.integers(0, V, size=(3, 7))
    assert np.array_equal(ctx.lookup(m, ids).numpy(), deq[ids])
    # from the blocks themselves
    mb = ctx.matrix(blocks, dtype=dtype)
    assert mb.shape == (V, D) and np.array_equal(mb.numpy(), deq)
    # a quantized table cannot be trained
    with pytest.raises(clembed.Error) as e:
        ctx.sgd(m, np.zeros((2, D), np.float32), np.array([0, 1]), 0.1)
    assert e.value.status in (clembed.ERR_UNSUPPORTED, clembed.ERR_INVALID_ARGUMENT)


@pytest.mark.parametrize("dtype", ["q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q5_k", "iq4_nl", "iq4_xs",
                                   "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"])
def test_other_block_types(ctx, dtype):
    """ggml's other block types from their blocks: read back as they were, and the device's lookup
    equal to the host's dequantization (both checked against ggml's code in tests/test_quant.c)."""
    need("clembed_dtype_row_bytes")
    qk, nbytes = clembed._args.BLOCKS[dtype]
    V, nb = 9, 2 if qk == 32 else 1
    blocks = rng.integers(0, 0x78, size=(V, nb * nbytes), dtype=np.uint8)   # finite f16 scales
    m = ctx.matrix(blocks, dtype=dtype)
    assert m.dtype == dtype and m.shape == (V, nb * qk)
    assert np.array_equal(m.raw(), blocks)
    deq = m.numpy()
    ids = rng.integers(0, V, size=(2, 5))
    assert np.isfinite(deq).all() and np.array_equal(ctx.lookup(m, ids).numpy().view(np.uint32), deq[ids].view(np.uint32))
