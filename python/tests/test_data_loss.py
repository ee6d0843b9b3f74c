"""What NumPy and PyTorch users would lose silently: the output dtype, ids past int64,
identical layer weights, and a table copy that might go stale."""
import numpy as np
import pytest

import clembed
from conftest import bf16_round

rng = np.random.default_rng(77)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint16 if a.dtype == np.float16 else np.uint32)


# ------------------------------------------------------------ output dtypes

def test_f16_output_reads_as_float16(ctx):
    W = (rng.standard_normal((9, 6)) * 50).astype(np.float32)
    ids = np.array([[3, 0, 8], [1, 1, 2]])
    want = W[ids].astype(np.float16)                     # one rounding, to nearest even
    got = clembed.embed(W, ids, out_dtype="f16")
    assert got.dtype == np.float16 and got.shape == (2, 3, 6)
    assert np.array_equal(bits(got), bits(want))
    m = ctx.embed(W, ids, out_dtype="f16")
    assert m.dtype == "f16"
    assert m.numpy(None).dtype == np.float16 and np.array_equal(bits(m.numpy(None)), bits(want))
    assert m.numpy().dtype == np.float16                 # the default: the matrix's own dtype (docs/python.md)
    assert np.array_equal(bits(m.numpy()), bits(want))
    assert np.asarray(m).dtype == np.float16
    assert m.numpy(np.float32).dtype == np.float32       # a wider type on request
    assert np.array_equal(m.numpy(np.float32), want.astype(np.float32))
    # an f16 table read back is float16 too
    assert ctx.matrix(W.astype(np.float16)).numpy(None).dtype == np.float16
    assert ctx.matrix(W.astype(np.float16)).numpy().dtype == np.float16


def test_numpy_default_is_the_matrix_dtype(ctx):
    """Matrix.numpy() with no dtype: f32 -> float32, f16 -> float16 (NumPy has both);
    bf16 and the block types -> float32 (exact); numpy.asarray the same."""
    W = (rng.standard_normal((4, 64)) * 3).astype(np.float32)
    want = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "q8_0": np.float32, "q4_0": np.float32}
    for name, t in want.items():
        m = ctx.matrix(W, dtype=name)
        assert m.numpy().dtype == t, name
        assert np.asarray(m).dtype == t, name
        assert np.array_equal(bits(m.numpy()), bits(m.numpy(None))), name
        assert np.array_equal(m.numpy().astype(np.float32), m.numpy(np.float32)), name   # the same values
    # an output of lookup/embed too, in the shape of the ids
    out = ctx.lookup(ctx.matrix(W, dtype="f16"), [[1, 3]], out_dtype="f16")
    assert out.numpy().dtype == np.float16 and out.numpy().shape == (1, 2, 64)


def test_bf16_output_reads_as_float32_exactly(ctx):
    W = (rng.standard_normal((7, 5)) * 3).astype(np.float32)
    ids = np.array([6, 0, 3])
    got = clembed.embed(W, ids, out_dtype="bf16", scale=1.5)
    assert got.dtype == np.float32                        # NumPy has no bfloat16
    ref = bf16_round((np.float32(1.5) * W[ids]).astype(np.float32))
    assert np.array_equal(bits(got), bits(ref))           # the bf16 values, exactly
    assert ctx.embed(W, ids, out_dtype="bf16").numpy().dtype == np.float32


# ------------------------------------------------------------ ids past int64

def test_uint64_ids_past_2_63_are_refused(ctx):
    W = rng.standard_normal((5, 3)).astype(np.float32)
    big = np.array([1, 2 ** 64 - 1, 0], dtype=np.uint64)
    for call in (lambda: ctx.ids(big),
                 lambda: ctx.lookup(W, big),
                 lambda: clembed.embed(W, big, on_bad_id="wrap"),
                 lambda: clembed.embed(W, big, on_bad_id="clamp")):
        with pytest.raises(clembed.IndexOutOfRangeError) as e:
            call()
        err = e.value
        assert isinstance(err, IndexError) and err.argument == "ids"
        assert err.index == 1 and err.value == 2 ** 64 - 1
        assert "18446744073709551615" in str(err) and "2^63 - 1" in str(err)
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        ctx.ids(np.array([[0, 0], [2 ** 63, 1]], dtype=np.uint64))
    assert e.value.index == 2 and e.value.value == 2 ** 63
    # uint64 ids that fit are taken as they are
    ok = np.array([4, 0, 2], dtype=np.uint64)
    assert np.array_equal(clembed.embed(W, ok), W[[4, 0, 2]])
    # and a sequence offset past 2^63 - 1 is refused by name
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        ctx.embed(W, np.array([0, 1]), positions="sinusoid", sequence_offsets=np.array([2 ** 64 - 2], np.uint64))
    assert e.value.argument == "sequence_offsets" and e.value.index == 0


# ------------------------------------------------------------ layer seeds

def test_embedding_layer_seeds(ctx):
    # the contract's default seed 0: layers made alike start equal, reproducibly, and say so
    c = clembed.Embedding(100, 16, ctx=ctx)
    d = clembed.Embedding(100, 16, ctx=ctx)
    assert c.seed == d.seed == 0 and np.array_equal(c.weight.numpy(), d.weight.numpy())
    assert "seed" in clembed.Embedding.__doc__ and "0 by" in clembed.Embedding.__doc__
    # seed=None: a fresh seed per layer, so layers made alike start apart (PyTorch's way)
    a = clembed.Embedding(100, 16, ctx=ctx, seed=None)
    b = clembed.Embedding(100, 16, ctx=ctx, seed=None)
    assert a.seed != b.seed
    assert not np.array_equal(a.weight.numpy(), b.weight.numpy())
    # .seed reproduces a layer
    assert np.array_equal(clembed.Embedding(100, 16, ctx=ctx, seed=a.seed).weight.numpy(), a.weight.numpy())
    # manual_seed makes a sequence of unseeded layers reproducible, as torch.manual_seed does
    clembed.manual_seed(1234)
    first = [clembed.Embedding(20, 4, ctx=ctx, seed=None) for _ in range(2)]
    clembed.manual_seed(1234)
    again = [clembed.Embedding(20, 4, ctx=ctx, seed=None) for _ in range(2)]
    assert [e.seed for e in first] == [e.seed for e in again]
    assert first[0].seed != first[1].seed
    for x, y in zip(first, again):
        assert np.array_equal(x.weight.numpy(), y.weight.numpy())
    clembed.manual_seed(1235)
    assert clembed.Embedding(20, 4, ctx=ctx, seed=None).seed != first[0].seed


# ------------------------------------------------------------ the NumPy path

def test_numpy_embed_sees_every_change_and_takes_a_resident_matrix(ctx):
    W = rng.standard_normal((6, 4)).astype(np.float32)
    ids = np.array([5, 1])
    assert np.array_equal(clembed.embed(W, ids), W[ids])
    W[5] = 7.0                                     # nothing is cached: the next call sees it
    assert np.array_equal(clembed.embed(W, ids), W[ids])
    # a resident Matrix is used as it is, on its own context, with no upload
    other = clembed.Context()
    try:
        M = other.matrix(W)
        got = clembed.embed(M, ids, scale=2.0)
        assert np.array_equal(got, np.float32(2.0) * W[ids])
    finally:
        other.close()
    doc = " ".join(clembed.embed.__doc__.split())
    assert "uploaded on every call" in doc and "ctx.matrix" in doc
