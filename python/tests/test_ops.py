"""Every compute call of the binding against NumPy references.

Exact (bit for bit) where the contract is exact: transfers, lookup, embed without a
sinusoid (float32 scale*W + P in that order, then the output dtype's rounding),
the dropout mask, the deterministic backward (float32 sums in ascending token
order), uniform init. The sinusoid against float64 within the contract's 1e-6
(4e-6 once added to a token row); the normal init within float32 accuracy.
"""
import math

import numpy as np
import pytest

import clembed
from conftest import philox, unit, sinusoid_ref, bf16_round, backward_ref

rng = np.random.default_rng(1234)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint16 if a.dtype == np.float16 else np.uint32)


def assert_same_bits(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert np.array_equal(bits(a), bits(b)), "first difference at %s" % (
        np.argwhere(bits(a) != bits(b))[0],)


# ---------------------------------------------------------------- transfers

@pytest.mark.parametrize("rows,cols", [(1, 1), (7, 3), (33, 65)])
def test_matrix_round_trip_f32(ctx, rows, cols):
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    m = ctx.matrix(a)
    assert (m.rows, m.cols, m.dtype, m.shape) == (rows, cols, "f32", (rows, cols))
    assert_same_bits(m.numpy(), a)
    assert m.numpy(np.float64).dtype == np.float64


def test_matrix_f16_and_bf16_round_to_nearest_even(ctx):
    a = (rng.standard_normal((9, 17)) * 100).astype(np.float32)
    m16 = ctx.matrix(a, dtype="f16")
    assert m16.dtype == "f16"
    assert_same_bits(m16.numpy(np.float16), a.astype(np.float16))
    assert_same_bits(m16.numpy(np.float32), a.astype(np.float16).astype(np.float32))
    mb = ctx.matrix(a, dtype="bf16")
    assert mb.dtype == "bf16"
    assert_same_bits(mb.numpy(), bf16_round(a))
    # a float16 array uploads as f16, a float64 array as f32 when asked (converted)
    assert ctx.matrix(a.astype(np.float16)).dtype == "f16"
    assert_same_bits(ctx.matrix(a.astype(np.float64), dtype="f32").numpy(), a)


def test_empty_is_zero_and_write(ctx):
    m = ctx.empty(5, 4, "f16")
    assert m.dtype == "f16"
    assert np.array_equal(m.numpy(), np.zeros((5, 4), np.float32))
    m.write(np.arange(20, dtype=np.float32))
    assert np.array_equal(m.numpy(), np.arange(20, dtype=np.float32).reshape(5, 4))
    m.rows_view(2, 2).write(np.full((2, 4), -1.0, np.float32))
    ref = np.arange(20, dtype=np.float32).reshape(5, 4)
    ref[2:4] = -1
    assert np.array_equal(m.numpy(), ref)
    with pytest.raises(ValueError):
        m.write(np.zeros(3))


@pytest.mark.parametrize("dt", [np.int32, np.int64, np.int16, np.uint8])
def test_ids_any_shape(ctx, dt):
    a = rng.integers(0, 100, size=(2, 3, 4)).astype(dt)
    ids = ctx.ids(a)
    assert ids.shape == (2, 3, 4) and ids.count == 24
    assert ids.dtype == ("i32" if dt == np.int32 else "i64")
    assert np.array_equal(ids.numpy(), a)
    assert ctx.ids(np.zeros(0, np.int64)).count == 0
    with pytest.raises(TypeError):
        ctx.ids(np.array([1.5]))


# ---------------------------------------------------------------- lookup

@pytest.mark.parametrize("tdt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("idt", [np.int32, np.int64])
def test_lookup_bit_exact(ctx, tdt, idt):
    V, D = 50, 13
    W = rng.standard_normal((V, D)).astype(np.float32)
    W[3, 2] = np.inf
    W[4, 0] = -0.0
    ids = rng.integers(0, V, size=(4, 6)).astype(idt)
    table = ctx.matrix(W, dtype=tdt)
    stored = {"f32": W, "f16": W.astype(np.float16).astype(np.float32), "bf16": bf16_round(W)}[tdt]
    out = ctx.lookup(table, ids)
    assert out.shape == (4, 6, D) and out.rows == 24 and out.cols == D
    assert_same_bits(out.numpy(), stored[ids])
    # f16 output: the float16 rounding of the same values
    out16 = ctx.lookup(table, ids, out_dtype="f16")
    assert_same_bits(out16.numpy(np.float16), stored[ids].astype(np.float16))


def test_lookup_into_out_and_numpy_in(ctx):
    W = rng.standard_normal((10, 4)).astype(np.float32)
    out = ctx.empty(3, 4)
    r = ctx.lookup(W, [9, 0, 9], out=out)
    assert r is out and out.shape == (3, 4)
    assert_same_bits(out.numpy(), W[[9, 0, 9]])


def test_module_embed_numpy_in_numpy_out(ctx):
    W = rng.standard_normal((20, 8)).astype(np.float32)
    ids = rng.integers(0, 20, size=(3, 5))
    out = clembed.embed(W, ids, scale=2.0)
    assert isinstance(out, np.ndarray) and out.shape == (3, 5, 8) and out.dtype == np.float32
    assert_same_bits(out, np.float32(2.0) * W[ids])
    P = rng.standard_normal((5, 8)).astype(np.float32)
    out = clembed.embed(W, ids, positions=P)
    assert_same_bits(out, W[ids] + P[None, :, :])


# ---------------------------------------------------------------- positional

@pytest.mark.parametrize("exponent,layout", [("pair", "interleaved"), ("index", "interleaved"),
                                             ("pair", "halves")])
@pytest.mark.parametrize("dim", [1, 6, 7, 64])
def test_positional_against_float64(ctx, exponent, layout, dim):
    for first, base in [(0, 10000.0), (1000, 500.0), (2 ** 20 - 3, 10000.0)]:
        t = ctx.positional(40, dim, first=first, base=base, exponent=exponent, layout=layout)
        assert t.shape == (40, dim)
        ref = sinusoid_ref(40, dim, first, base, exponent, layout)
        err = np.abs(t.numpy().astype(np.float64) - ref).max()
        assert err <= 1e-6, (first, base, err)


def test_positional_f16_output(ctx):
    t = ctx.positional(16, 10, out_dtype="f16").numpy(np.float16)
    ref = sinusoid_ref(16, 10)
    # the float16 rounding of a value within 1e-6 of the reference
    assert np.all(np.abs(t.astype(np.float64) - ref) <= 1e-6 + np.abs(ref) * 2.0 ** -11)


def test_positional_bad_options(ctx):
    with pytest.raises(clembed.Error) as e:
        ctx.positional(4, 8, exponent="index", layout="halves")
    assert e.value.status == clembed.ERR_INVALID_ARGUMENT
    with pytest.raises(ValueError, match="layout"):
        ctx.positional(4, 8, layout="diagonal")


# ---------------------------------------------------------------- embed

def embed_ref(W, ids, scale=1.0, P=None, seq_len=0, offset=0, seq_offsets=None, padding_idx=None,
              dropout=0.0, seed=0):
    """(float32 token part, positional part as float64 or float32 table rows, keep mask, keep factor)."""
    ids = np.asarray(ids).reshape(-1)
    n, D = ids.size, W.shape[1]
    tok = np.float32(scale) * W[ids]
    if padding_idx is not None:
        tok[ids == padding_idx] = 0
    i = np.arange(n)
    b = i // seq_len if seq_len else np.zeros(n, np.int64)
    first = np.asarray(seq_offsets)[b] if seq_offsets is not None else offset
    pos = first + (i % seq_len if seq_len else i)
    mask = np.ones((n, D), bool)
    keep = np.float32(1.0)
    if dropout > 0:
        e = (i[:, None] * D + np.arange(D)[None, :]).reshape(-1)
        mask = (unit(philox(seed, e)[0]) >= dropout).reshape(n, D)
        keep = np.float32(1.0) / (np.float32(1.0) - np.float32(dropout))
    return tok, pos, mask, keep


@pytest.mark.parametrize("scale", [1.0, 0.5, "sqrt"])
def test_embed_learned_positions_exact(ctx, scale):
    V, D, B, S = 30, 12, 3, 7
    W = rng.standard_normal((V, D)).astype(np.float32)
    P = rng.standard_normal((20, D)).astype(np.float32)
    ids = rng.integers(0, V, size=(B, S)).astype(np.int32)
    out = ctx.embed(ctx.matrix(W), ctx.ids(ids), scale=scale, positions=ctx.matrix(P), offset=4)
    s = math.sqrt(D) if scale == "sqrt" else scale
    tok, pos, _, _ = embed_ref(W, ids, s, seq_len=S, offset=4)   # seq_len from the ids' shape
    assert out.shape == (B, S, D)
    assert_same_bits(out.numpy(), (tok + P[pos]).reshape(B, S, D))


def test_embed_sinusoid_options(ctx):
    V, D = 40, 10
    W = rng.standard_normal((V, D)).astype(np.float32)
    table = ctx.matrix(W)
    ids = rng.integers(0, V, size=23)
    for kw in [dict(), dict(base=100.0, exponent="index"), dict(layout="halves", offset=9),
               dict(seq_len=5, offset=1000)]:
        out = ctx.embed(table, ids, scale=3.0, positions="sinusoid", **kw).numpy().astype(np.float64)
        tok, pos, _, _ = embed_ref(W, ids, 3.0, seq_len=kw.get("seq_len", 0), offset=kw.get("offset", 0))
        sref = np.stack([sinusoid_ref(1, D, p, kw.get("base", 10000.0), kw.get("exponent", "pair"),
                                      kw.get("layout", "interleaved"))[0] for p in pos])
        ref = tok.astype(np.float64) + sref
        assert np.all(np.abs(out - ref) <= 4e-6 + np.abs(ref) * 2.0 ** -23), kw


def test_embed_seq_len_and_sequence_offsets(ctx):
    V, D = 16, 5
    W = rng.standard_normal((V, D)).astype(np.float32)
    P = rng.standard_normal((64, D)).astype(np.float32)
    ids = rng.integers(0, V, size=(4, 3))
    for so_dt in (np.int32, np.int64):
        so = np.array([0, 10, 3, 50], so_dt)
        out = ctx.embed(W, ids, positions=P, sequence_offsets=so)
        tok, pos, _, _ = embed_ref(W, ids, seq_len=3, seq_offsets=so)
        assert_same_bits(out.numpy(), (tok + P[pos]).reshape(4, 3, D))
    # explicit seq_len=0: the 12 ids are one sequence (positions 0..11)
    out = ctx.embed(W, ids, positions=P, seq_len=0)
    assert_same_bits(out.numpy(), (W[ids.reshape(-1)] + P[:12]).reshape(4, 3, D))
    # 1-D ids with seq_len 4: positions restart every 4 tokens
    out = ctx.embed(W, ids.reshape(-1), positions=P, seq_len=4, offset=2)
    assert_same_bits(out.numpy(), W[ids.reshape(-1)] + P[2 + np.arange(12) % 4])


def test_embed_padding(ctx):
    V, D = 9, 4
    W = rng.standard_normal((V, D)).astype(np.float32)
    P = rng.standard_normal((6, D)).astype(np.float32)
    ids = np.array([0, 3, 8, 3, 1, 8])
    for pad, row in [(3, 3), (-1, 8), (-9, 0)]:
        out = ctx.embed(W, ids, positions=P, padding_idx=pad).numpy()
        ref = W[ids] + P
        ref[ids == row] = P[ids == row]  # the padding row's token part is zero, positions still added
        assert_same_bits(out, ref)
    assert_same_bits(ctx.embed(W, ids, padding_idx=None).numpy(), W[ids])


def test_embed_on_bad_id_policies(ctx):
    V, D = 5, 3
    W = rng.standard_normal((V, D)).astype(np.float32)
    ids = np.array([0, 7, -1, 4, -6], np.int64)
    clamp = ctx.embed(W, ids, on_bad_id="clamp").numpy()
    assert_same_bits(clamp, W[np.clip(ids, 0, V - 1)])
    zero = ctx.embed(W, ids, on_bad_id="zero").numpy()
    ref = W[np.clip(ids, 0, V - 1)].copy()
    ref[(ids < 0) | (ids >= V)] = 0
    assert_same_bits(zero, ref)
    ctx.finish()   # ZERO reports nothing
    wrap_ids = np.array([0, -1, -5, 4])
    assert_same_bits(ctx.embed(W, wrap_ids, on_bad_id="wrap").numpy(), W[wrap_ids % V])
    with pytest.raises(ValueError, match="on_bad_id"):
        ctx.embed(W, ids, on_bad_id="ignore")


@pytest.mark.parametrize("p,seed", [(0.25, 7), (0.5, 2 ** 40 + 3)])
def test_embed_dropout_mask_exact(ctx, p, seed):
    V, D = 50, 9
    W = rng.standard_normal((V, D)).astype(np.float32)
    ids = rng.integers(0, V, size=(6, 11))
    out = ctx.embed(W, ids, scale=2.0, dropout=p, seed=seed).numpy().reshape(-1, D)
    tok, _, mask, keep = embed_ref(W, ids, 2.0, dropout=p, seed=seed)
    ref = np.where(mask, tok * keep, np.float32(0))
    assert_same_bits(out, ref)
    assert abs((~mask).mean() - p) < 0.1


def test_embed_output_dtypes_and_out(ctx):
    V, D = 12, 6
    W = rng.standard_normal((V, D)).astype(np.float32)
    ids = rng.integers(0, V, size=7)
    ref = np.float32(1.5) * W[ids]
    assert_same_bits(ctx.embed(W, ids, scale=1.5, out_dtype="f16").numpy(np.float16), ref.astype(np.float16))
    assert_same_bits(ctx.embed(W, ids, scale=1.5, out_dtype="bf16").numpy(), bf16_round(ref))
    out = ctx.empty(7, D)
    assert ctx.embed(W, ids, scale=1.5, out=out) is out
    assert_same_bits(out.numpy(), ref)


# ---------------------------------------------------------------- backward, sgd

def backward_f32(grad, ids, vocab, scale=1.0, padding_idx=None, freq=False):
    """The contract's float32 operations in ascending token order."""
    g = np.asarray(grad, np.float32).reshape(-1, np.asarray(grad).shape[-1])
    ids = np.asarray(ids).reshape(-1)
    out = np.zeros((vocab, g.shape[1]), np.float32)
    touched = np.zeros(vocab, bool)
    for v in np.unique(ids):
        if padding_idx is not None and v == padding_idx:
            continue
        S = np.zeros(g.shape[1], np.float32)
        for i in np.nonzero(ids == v)[0]:
            S = S + g[i]
        r = np.float32(scale) * S
        if freq:
            r = r / np.float32((ids == v).sum())
        out[v] = r
        touched[v] = True
    return out, touched


@pytest.mark.parametrize("scale,pad,freq", [(1.0, None, False), (2.5, 3, False), (1.0, -1, True)])
@pytest.mark.parametrize("deterministic", [True, False])
def test_backward(ctx, scale, pad, freq, deterministic):
    V, D = 20, 7
    ids = rng.integers(0, V, size=(5, 9))
    ids[0, :5] = 3       # a repeated id
    grad = rng.standard_normal((5, 9, D)).astype(np.float32)
    out = ctx.backward(grad, ids, V, scale=scale, padding_idx=pad, scale_grad_by_freq=freq,
                       deterministic=deterministic)
    assert out.shape == (V, D) and out.dtype == "f32"
    row = None if pad is None else pad % V
    ref64 = backward_ref(grad, ids, V, scale, row, freq)
    got = out.numpy()
    assert np.allclose(got, ref64, rtol=1e-5, atol=1e-5)
    if deterministic:
        assert_same_bits(got, backward_f32(grad, ids, V, scale, row, freq)[0])
        again = ctx.backward(grad, ids, V, scale=scale, padding_idx=pad, scale_grad_by_freq=freq)
        assert_same_bits(again.numpy(), got)


def test_backward_accumulates_into_out(ctx):
    V, D = 8, 3
    ids = np.array([1, 2, 1])
    grad = rng.standard_normal((3, D)).astype(np.float32)
    start = rng.standard_normal((V, D)).astype(np.float32)
    out = ctx.matrix(start)
    ctx.backward(grad, ids, V, out=out)
    ref, _ = backward_f32(grad, ids, V)
    assert_same_bits(out.numpy(), start + ref)
    ctx.backward(grad, ids, V, out=out, accumulate=False)
    assert_same_bits(out.numpy(), ref)


@pytest.mark.parametrize("tdt", ["f32", "f16", "bf16"])
def test_sgd_touches_only_its_rows(ctx, tdt):
    V, D = 30, 5
    W = rng.standard_normal((V, D)).astype(np.float32)
    table = ctx.matrix(W, dtype=tdt)
    before = table.numpy()
    ids = rng.integers(0, 10, size=(3, 4))
    grad = rng.standard_normal((3, 4, D)).astype(np.float32)
    r = ctx.sgd(table, grad, ids, 0.1, scale=2.0)
    assert r is table and table.event is not None
    after = table.numpy()
    g, touched = backward_f32(grad, ids, V, 2.0)
    ref = before.astype(np.float64) - 0.1 * g.astype(np.float64)
    rnd = {"f32": 2.0 ** -23, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}[tdt]
    assert np.all(np.abs(after[touched] - ref[touched]) <= 1e-6 + rnd * np.abs(ref[touched]))
    assert_same_bits(after[~touched], before[~touched])


# ---------------------------------------------------------------- init

def init_words(seed, n):
    """The Philox words of elements 0 .. n-1 (include/clembed.h): one counter per
    four consecutive elements, element e is word e % 4 of counter e // 4."""
    e = np.arange(n)
    x = philox(seed, e // 4)
    return np.choose(e % 4, x), x, e


def test_init_uniform_exact(ctx):
    m = ctx.empty(17, 9)
    for seed, low, high in [(0, -1.0, 1.0), (2 ** 33 + 5, 2.0, 3.5)]:
        ctx.init(m, "uniform", low=low, high=high, seed=seed)
        xj, _, _ = init_words(seed, 17 * 9)
        u = unit(xj).astype(np.float32)
        lo, hi = np.float32(low), np.float32(high)
        h = np.float32(2)
        ref = h * (lo / h + (hi / h - lo / h) * u)
        assert_same_bits(m.numpy(), ref.reshape(17, 9))


def test_init_normal_transform(ctx):
    n = 33 * 7
    m = ctx.init(ctx.empty(33, 7), "normal", mean=0.5, std=3.0, seed=2 ** 40 + 9).numpy().reshape(-1)
    _, x, e = init_words(2 ** 40 + 9, n)
    j = e % 4
    a, b = np.where(j < 2, x[0], x[2]), np.where(j < 2, x[1], x[3])
    v = ((a.astype(np.uint64) >> np.uint64(8)).astype(np.float64) + 1) / 16777216.0
    t = unit(b)
    R = np.sqrt(-2 * np.log(v))
    z = np.where(j % 2 == 0, R * np.cos(2 * np.pi * t), R * np.sin(2 * np.pi * t))
    ref = 0.5 + 3.0 * z
    # z within 4 ulp of the exact transform, then mean + std * z in float32
    tol = 3.0 * 4 * np.spacing(np.abs(z).astype(np.float32)).astype(np.float64) + 2 * np.spacing(
        np.abs(ref).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(m - ref) <= tol)


def test_init_normal(ctx):
    m = ctx.init(ctx.empty(64, 64), "normal", mean=1.0, std=2.0, seed=11)
    a = m.numpy()
    assert abs(a.mean() - 1.0) < 4 * 2.0 / 64 and abs(a.std() - 2.0) < 0.1
    b = ctx.init(ctx.empty(64, 64), "normal", mean=1.0, std=2.0, seed=11).numpy()
    assert_same_bits(a, b)
    c = ctx.init(ctx.empty(64, 64), "normal", mean=1.0, std=2.0, seed=12).numpy()
    assert not np.array_equal(a, c)
    with pytest.raises(ValueError):
        ctx.init(m, "cauchy")


def test_raw_bits(ctx):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    assert np.array_equal(ctx.matrix(a).raw(), a)
    assert np.array_equal(ctx.matrix(a, "f16").raw(), a.astype(np.float16).view(np.uint16))
    assert np.array_equal(ctx.matrix(a, "bf16").raw(), (bf16_round(a).view(np.uint32) >> 16).astype(np.uint16))
