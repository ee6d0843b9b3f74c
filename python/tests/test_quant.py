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
                                   "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "tq1_0",
                                   "tq2_0", "mxfp4"])
def test_other_block_types(ctx, dtype):
    """ggml's other block types from their blocks: read back as they were, and the device's lookup
    equal to the host's dequantization (both checked against ggml's code in tests/test_quant.c)."""
    need("clembed_dtype_row_bytes")
    qk, nbytes = clembed._args.BLOCKS[dtype]
    V, nb = 9, 2 if qk == 32 else 1
    blocks = rng.integers(0, 0x78, size=(V, nb * nbytes), dtype=np.uint8)   # finite f16 scales
    if dtype == "mxfp4":   # exponents 32 .. 119: no subnormal values (a device may flush them)
        blocks.reshape(V, nb, nbytes)[..., 0] |= 0x20
    m = ctx.matrix(blocks, dtype=dtype)
    assert m.dtype == dtype and m.shape == (V, nb * qk)
    assert np.array_equal(m.raw(), blocks)
    deq = m.numpy()
    ids = rng.integers(0, V, size=(2, 5))
    assert np.isfinite(deq).all() and np.array_equal(ctx.lookup(m, ids).numpy().view(np.uint32), deq[ids].view(np.uint32))


@pytest.mark.parametrize("dtype", ["tq1_0", "tq2_0", "mxfp4", "iq4_nl", "q4_k"])
def test_gguf_against_gguf_py(ctx, tmp_path, dtype):
    """A GGUF file written by ggml's own Python package (gguf-py, when installed: a test tool, not a
    dependency) with a tensor of raw blocks: clembed's load as blocks (looked up on the device) and
    dequantized on loading equal gguf.quants.dequantize bit for bit. Scales are any finite f16 and
    every MXFP4 exponent (0 and 1: subnormal scales; 255: values past FLT_MAX, infinities)."""
    gguf = pytest.importorskip("gguf")
    need("clembed_matrix_load")
    qtype = getattr(gguf.GGMLQuantizationType, dtype.upper())
    qk, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    assert clembed._args.BLOCKS[dtype] == (qk, nbytes)
    V, nb = 24, 512 // qk
    blocks = rng.integers(0, 256, size=(V, nb, nbytes), dtype=np.uint8)
    if dtype == "mxfp4":
        blocks[..., 0] = np.arange(V * nb).reshape(V, nb) % 256        # every exponent byte e
    else:   # finite f16 scales: no exponent field of 31 (gguf-py's NaN payloads are NumPy's)
        for off in {"tq1_0": [52], "tq2_0": [64], "iq4_nl": [0], "q4_k": [0, 2]}[dtype]:
            hi = blocks[..., off + 1]
            blocks[..., off + 1] = np.where((hi & 0x7C) == 0x7C, hi & 0xFB, hi)
    blocks = blocks.reshape(V, nb * nbytes)
    path = tmp_path / ("%s.gguf" % dtype)
    w = gguf.GGUFWriter(str(path), "clembed-test")
    w.add_tensor("token_embd.weight", blocks, raw_shape=(V, nb * nbytes), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with np.errstate(over="ignore"):   # MXFP4's e = 255: 2^127 * 2 and more are infinities
        want = gguf.quants.dequantize(blocks, qtype).astype(np.float32)
    assert want.shape == (V, nb * qk)
    m = ctx.load(path)
    assert m.dtype == dtype and m.shape == (V, nb * qk) and np.array_equal(m.raw(), blocks)
    ids = rng.integers(0, V, size=50)
    got = ctx.lookup(m, ids).numpy()
    # the same bits, but where a device that flushes subnormal floats gives 0 for one (MXFP4's e 0, 1)
    flushed = (got == 0) & (want[ids] != 0) & (np.abs(want[ids]) < np.float32(2.0 ** -126))
    assert np.array_equal(got.view(np.uint32)[~flushed], want[ids].view(np.uint32)[~flushed])
    host = ctx.load(path, dtype="f32").numpy()
    assert np.array_equal(host.view(np.uint32), want.view(np.uint32))
    if dtype == "mxfp4":
        assert np.isinf(want).any() and (np.abs(want[want != 0]) < np.float32(2.0 ** -126)).any()
