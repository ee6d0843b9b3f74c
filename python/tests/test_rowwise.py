"""FBGEMM's row-wise tables through the Python package: uploads (float values quantized,
FBGEMM's own uint8 rows taken as stored), raw(), lookups and bags; and, where
fbgemm-gpu-cpu is installed, against FBGEMM itself: its quantizers' bytes, its dequantizers' values bit for bit, and its
inference TBE's pooled sums over the same rows (within the float32 rounding of its order).
fbgemm-gpu-cpu is a peer, installed with the PyTorch release it pairs with in a venv of its
own (never a dependency of the package or of tools/check.sh)."""
import numpy as np
import pytest

import clembed

ROWWISE = ("i8_rowwise", "i4_rowwise", "i2_rowwise", "i8_tbe", "i4_tbe", "i2_tbe", "fp8_rowwise")
MULTIPLE = {"i4_rowwise": 4, "i2_rowwise": 8, "i4_tbe": 2, "i2_tbe": 4}


def _values(rng, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32) * rng.uniform(0.01, 100, (rows, 1)).astype(np.float32)
    x[1] = 2.5  # a constant row
    return x


@pytest.mark.parametrize("name", ROWWISE)
def test_upload_raw_lookup_bag(ctx, name, tmp_path):
    rng = np.random.default_rng(7)
    cols = 24
    x = _values(rng, 30, cols)
    m = ctx.matrix(x, dtype=name)
    assert m.dtype == name and m.shape == (30, cols)
    raw = m.raw()
    assert raw.dtype == np.uint8 and raw.shape == (30, clembed._lib.lib.clembed_dtype_row_bytes(clembed.DTYPES[name], cols))
    vals = m.numpy()
    # quantized: within half a step of the row's range (FP8: 3 mantissa bits of the row's largest)
    step = (x.max(1) - x.min(1))[:, None] / {"i4_rowwise": 15, "i4_tbe": 15, "i2_rowwise": 3, "i2_tbe": 3}.get(name, 255)
    if name == "fp8_rowwise":
        step = np.abs(x).max(1)[:, None] / 8
    # (the f16 scale and bias: a further 2^-10 of the row's largest magnitude)
    f16 = np.abs(x).max(1)[:, None] * 2.0 ** -9 if name not in ("i8_rowwise", "fp8_rowwise") else 0
    assert np.all(np.abs(vals - x) <= step * 0.5 + f16 + 1e-3 * np.abs(x) + 1e-6)
    # FBGEMM's rows as stored upload as they are, and load so from a file of bytes
    m2 = ctx.matrix(raw, dtype=name, cols=cols)
    assert np.array_equal(m2.raw(), raw)
    path = tmp_path / "rows.npy"
    np.save(path, raw)
    m3 = ctx.load(str(path), dtype=name)
    assert m3.shape == (30, cols) and np.array_equal(m3.raw(), raw)
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.load(str(path), dtype="f32")
    assert e.value.argument == "dtype"
    ids = rng.integers(0, 30, 50)
    assert np.array_equal(ctx.lookup(m, ids).numpy().view(np.uint32), vals[ids].view(np.uint32))
    offsets = np.array([0, 3, 3, 20, 41])
    got = ctx.embedding_bag(m, ids, offsets, mode="sum").numpy()
    want = np.zeros((5, cols), np.float32)
    for b, (lo, hi) in enumerate(zip(offsets, list(offsets[1:]) + [50])):
        for i in range(lo, hi):
            want[b] = want[b] + vals[ids[i]]  # float32, in order: the contract's SUM
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_refusals(ctx):
    with pytest.raises(clembed.InvalidArgumentError, match="cols"):
        ctx.matrix(np.zeros((2, 6), np.float32), dtype="i4_rowwise")
    with pytest.raises(clembed.InvalidArgumentError):
        ctx.matrix(np.zeros((2, 7), np.uint8), dtype="i8_tbe", cols=4)
    # a row of scale and bias alone holds no values
    with pytest.raises(clembed.InvalidArgumentError):
        ctx.matrix(np.zeros((2, 8), np.uint8), dtype="i8_rowwise")
    # fp8_rowwise pads its values to 4 bytes: rows of 16 + 8 bytes hold 13 .. 16 values
    raw = np.zeros((2, 24), np.uint8)
    assert ctx.matrix(raw, dtype="fp8_rowwise").cols == 16
    assert ctx.matrix(raw, dtype="fp8_rowwise", cols=13).cols == 13


fbgemm = None
try:  # a peer, never a dependency: only where it is installed
    import torch
    import fbgemm_gpu  # noqa: F401
    fbgemm = torch.ops.fbgemm
except Exception:  # pragma: no cover - the usual case in CI
    pass
need_fbgemm = pytest.mark.skipif(fbgemm is None, reason="fbgemm-gpu-cpu is not installed (a peer, never a "
                                 "dependency: pip install fbgemm-gpu-cpu with the torch release it pairs with)")


@need_fbgemm
@pytest.mark.parametrize("cols", [8, 16, 40, 128])
def test_against_fbgemm_quantizers(ctx, cols):
    rng = np.random.default_rng(cols)
    x = _values(rng, 64, cols)
    t = torch.from_numpy(x)
    q8 = fbgemm.FloatToFused8BitRowwiseQuantized(t).numpy()
    m = ctx.matrix(x, dtype="i8_rowwise")
    assert np.array_equal(m.raw(), q8)
    d8 = fbgemm.Fused8BitRowwiseQuantizedToFloat(torch.from_numpy(q8)).numpy()
    assert np.array_equal(m.numpy().view(np.uint32), d8.view(np.uint32))
    assert np.array_equal(ctx.lookup(m, np.arange(64)).numpy().view(np.uint32), d8.view(np.uint32))
    for bits in (4, 2):
        q = fbgemm.FloatToFusedNBitRowwiseQuantizedSBHalf(t, bits).numpy()
        m = ctx.matrix(x, dtype="i%d_rowwise" % bits)
        assert np.array_equal(m.raw(), q)
        d = fbgemm.FusedNBitRowwiseQuantizedSBHalfToFloat(torch.from_numpy(q), bits).numpy()
        assert np.array_equal(m.numpy().view(np.uint32), d.view(np.uint32))
        assert np.array_equal(ctx.lookup(m, np.arange(64)).numpy().view(np.uint32), d.view(np.uint32))


@need_fbgemm
def test_against_fbgemm_hfp8(ctx):
    # FloatToFP8RowwiseQuantized is CUDA-only; its arithmetic on the CPU is
    # FloatToHFP8Quantized(x * scale, 4, 15, 0.9375) and HFP8QuantizedToFloat / scale
    rng = np.random.default_rng(3)
    x = _values(rng, 32, 20)
    m = ctx.matrix(x, dtype="fp8_rowwise")
    raw = m.raw()
    scale = (np.float32(0.9375) / (np.float32(1e-20) + np.maximum(x.max(1), -x.min(1)))).astype(np.float32)
    assert np.array_equal(raw[:, 20:24].copy().view(np.float32)[:, 0], scale)
    q = fbgemm.FloatToHFP8Quantized(torch.from_numpy(x * scale[:, None]), 4, 15, 0.9375).numpy()
    assert np.array_equal(raw[:, :20], q)
    d = fbgemm.HFP8QuantizedToFloat(torch.from_numpy(q), 4, 15).numpy() / scale[:, None]
    assert np.array_equal(m.numpy().view(np.uint32), d.astype(np.float32).view(np.uint32))
    assert np.array_equal(ctx.lookup(m, np.arange(32)).numpy().view(np.uint32), d.astype(np.float32).view(np.uint32))


@need_fbgemm
@pytest.mark.parametrize("ty,name", [("INT8", "i8_tbe"), ("INT4", "i4_tbe"), ("INT2", "i2_tbe")])
def test_against_fbgemm_inference_tbe(ctx, ty, name):
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen
    from fbgemm_gpu.tbe.utils.quantize import quantize_embs
    rng = np.random.default_rng(11)
    rows, cols, bags = 500, 64, 40
    x = _values(rng, rows, cols)
    sty = getattr(SparseType, ty)
    q, sb = quantize_embs(torch.from_numpy(x), sty)
    tbe = IntNBitTableBatchedEmbeddingBagsCodegen([("t", rows, cols, sty, EmbeddingLocation.HOST)], device="cpu",
                                                  output_dtype=SparseType.FP32, pooling_mode=PoolingMode.SUM)
    tbe.fill_random_weights()
    w, s = tbe.split_embedding_weights()[0]
    w.copy_(q)
    s.copy_(sb)
    stored = torch.cat([sb, q], 1).numpy()  # the TBE's rows: scale and bias first
    m = ctx.matrix(x, dtype=name)
    assert np.array_equal(m.raw(), stored)  # clembed's quantizer gives the TBE's rows
    lengths = rng.integers(0, 30, bags)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ids = rng.integers(0, rows, int(offsets[-1]))
    ref = tbe(torch.from_numpy(ids.astype(np.int32)), torch.from_numpy(offsets.astype(np.int32))).numpy()
    got = ctx.embedding_bag(m, ids, offsets[:-1], mode="sum").numpy()
    vals = m.numpy().astype(np.float64)
    exact = np.array([vals[ids[a:b]].sum(0) for a, b in zip(offsets[:-1], offsets[1:])])
    tol = 1e-6 * np.array([np.abs(vals[ids[a:b]]).sum(0) for a, b in zip(offsets[:-1], offsets[1:])]) + 1e-30
    assert np.all(np.abs(got - exact) <= tol) and np.all(np.abs(ref - exact) <= tol)


def test_quantize_rows(ctx):
    rng = np.random.default_rng(5)
    x = _values(rng, 20, 16)
    f = ctx.matrix(x)
    for name in ROWWISE:
        q = ctx.quantize_rows(f, name)
        assert q.dtype == name and np.array_equal(q.raw(), ctx.matrix(x, dtype=name).raw())
    with pytest.raises(clembed.UnsupportedError):
        ctx.quantize_rows(ctx.matrix(np.zeros((2, 32), np.float32)), "q8_0")
    with pytest.raises(clembed.InvalidArgumentError, match="out"):
        ctx.quantize_rows(f, "i4_rowwise", out=ctx.empty(20, 16, "i8_rowwise"))


def test_bert_layer(ctx):
    # BERT's layer (segments, LayerNorm, sinusoids) over a row-wise table: the bits of the same
    # values in an F32 table
    rng = np.random.default_rng(3)
    m = ctx.matrix(rng.standard_normal((50, 40)).astype(np.float32), dtype="i8_rowwise")
    f = ctx.matrix(m.numpy())
    kw = dict(positions="sinusoid", segment_table=rng.standard_normal((2, 40)).astype(np.float32),
              segment_ids=rng.integers(0, 2, (4, 8)), norm="layer",
              norm_weight=rng.standard_normal(40).astype(np.float32), norm_bias=rng.standard_normal(40).astype(np.float32))
    ids = rng.integers(0, 50, (4, 8))
    assert np.array_equal(ctx.embed(m, ids, **kw).numpy().view(np.uint32), ctx.embed(f, ids, **kw).numpy().view(np.uint32))
