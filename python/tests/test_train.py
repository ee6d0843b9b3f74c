"""clembed.Optimizer and clembed.Embedding against NumPy references.

The row gradient g is the contract's float32 sum in ascending token order
(backward_f32); the optimizer updates are then checked against a float32 NumPy
transcription of the contract's formulas (ref_step): exact where there is no
square root or division, else within 4 ulp of that term (the device's sqrt and
division need not be correctly rounded)."""
import numpy as np
import pytest

import clembed
from conftest import philox_kc
from test_ops import backward_f32, assert_same_bits

rng = np.random.default_rng(7)


def case(V=24, D=6, shape=(4, 5)):
    W = rng.standard_normal((V, D)).astype(np.float32)
    ids = rng.integers(0, V // 2, size=shape)
    grad = rng.standard_normal(shape + (D,)).astype(np.float32)
    return W, ids, grad


F = np.float32


def ulp(x):
    return np.spacing(np.abs(np.asarray(x, np.float32))).astype(np.float64)


def within(got, want, tol, what):
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    err = np.abs(got64 - want64)
    assert np.all(err <= tol), "%s: first difference at %s: %r vs %r (tolerance %r)" % (
        what, np.argwhere(err > tol)[0], got64[err > tol][0], want64[err > tol][0], np.broadcast_to(tol, err.shape)[err > tol][0])


def ref_step(kind, w, s1, s2, g, touched, t, lr, eps, b1=0.9, b2=0.999, wd=0.0):
    """The contract's step (include/clembed.h, sparse optimizer steps) in float32 NumPy, on the
    rows in `touched`; g is the rows' gradient (backward_f32). Returns the new
    (w, s1, s2) and, for the table, the magnitude of the term computed with a square
    root and a division (None where there is none: then the result is exact)."""
    sel = touched[:, None]
    if wd != 0.0:
        g = g + F(wd) * w
    lr = F(lr)
    if kind == "sgd":
        return np.where(sel, w - lr * g, w), s1, s2, None
    if kind == "adagrad":
        s = s1 + g * g
        term = lr * (g / (np.sqrt(s) + F(eps)))
        return np.where(sel, w - term, w), np.where(sel, s, s1), s2, term
    if kind == "rowwise_adagrad":
        sq = np.zeros(w.shape[0], np.float32)
        for c in range(w.shape[1]):
            sq = sq + g[:, c] * g[:, c]
        m = s1 + (sq / F(w.shape[1]))[:, None]
        term = (lr / (np.sqrt(m) + F(eps))) * g
        return np.where(sel, w - term, w), np.where(sel, m, s1), s2, term
    # adam: 1 - beta1, 1 - beta2 and the step size in float64 from the float32 fields
    f1, f2, flr = float(F(b1)), float(F(b2)), float(lr)
    one_b1, one_b2 = F(1 - f1), F(1 - f2)
    step = F(flr * np.sqrt(1 - f2 ** t) / (1 - f1 ** t))
    m = s1 + (g - s1) * one_b1
    u = s2 + (g * g - s2) * one_b2
    term = step * (m / (np.sqrt(u) + F(eps)))
    return np.where(sel, w - term, w), np.where(sel, m, s1), np.where(sel, u, s2), term


KIND_EPS = {"sgd": 0.0, "adagrad": 1e-10, "rowwise_adagrad": 1e-8, "adam": 1e-8}


def check_steps(ctx, kind, steps=3, wd=0.0, scale=1.0, lr=0.05, betas=(0.9, 0.999)):
    """`steps` steps of Optimizer(kind) against ref_step, each from the device's own
    table and states before it: states without a division exact, the rowwise sum of
    squares (a division by cols) within 4 ulp; the table exact for SGD, else within
    4 ulp of the square-root-and-division term (plus the final rounding), with the
    rowwise rate taken from the device's new state; other rows untouched (bits)."""
    W, ids, grad = case()
    V, D = W.shape
    table = ctx.matrix(W)
    opt = clembed.Optimizer(ctx, kind, lr, betas=betas, weight_decay=wd)
    g, touched = backward_f32(grad, ids, V, scale)
    w = W.copy()
    s1 = np.zeros((V, 1 if kind == "rowwise_adagrad" else D), np.float32)
    s2 = np.zeros((V, D), np.float32)
    for t in range(1, steps + 1):
        assert opt.step(table, grad, ids, scale=scale) is table
        st, st2, count = opt.state(table)
        assert count == t
        got = table.numpy()
        gs1 = st.numpy() if st is not None else s1
        gs2 = st2.numpy() if st2 is not None else s2
        rw, r1, r2, term = ref_step(kind, w, s1, s2, g, touched, t, lr, KIND_EPS[kind], betas[0], betas[1], wd)
        what = "%s step %d" % (kind, t)
        if kind == "rowwise_adagrad":
            within(gs1, r1, 4 * ulp(r1 - s1) + ulp(r1), what + ": state")
            # the rate from the device's own sum of squares
            gw = g + F(wd) * w if wd else g
            term = (F(lr) / (np.sqrt(gs1) + F(KIND_EPS[kind]))) * gw
            rw = np.where(touched[:, None], w - term, w)
        else:
            if st is not None:
                assert_same_bits(gs1, r1)
            if st2 is not None:
                assert_same_bits(gs2, r2)
        if term is None:
            assert_same_bits(got, rw)
        else:
            within(got, rw, 4 * ulp(term) + ulp(rw), what + ": table")
        assert_same_bits(got[~touched], W[~touched])
        if st is not None:
            assert not np.any(gs1[~touched]), what + ": a state row of an untouched table row changed"
        if kind == "adam":
            assert st2.shape == (V, D) and st.shape == (V, D)
        elif kind == "adagrad":
            assert st.shape == (V, D) and st2 is None
        elif kind == "rowwise_adagrad":
            assert st.shape == (V, 1) and st2 is None
        else:
            assert st is None and st2 is None
        w, s1, s2 = got, gs1, gs2
    return opt, table


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
@pytest.mark.parametrize("wd,scale", [(0.0, 1.0), (0.01, 2.0)])
def test_optimizer_step(ctx, kind, wd, scale):
    check_steps(ctx, kind, wd=wd, scale=scale)


def test_optimizer_adam_betas(ctx):
    check_steps(ctx, "adam", steps=4, lr=0.01, betas=(0.8, 0.99))


def test_optimizer_sgd_lr_override(ctx):
    W, ids, grad = case()
    table = ctx.matrix(W)
    opt = clembed.Optimizer(ctx, "sgd", 0.05)
    opt.step(table, grad, ids)
    got = table.numpy()
    opt.step(table, grad, ids, lr=0.0)        # lr given to step overrides the optimizer's
    assert_same_bits(table.numpy(), got)


def test_optimizer_state_per_table(ctx):
    W, ids, grad = case()
    a, b = ctx.matrix(W), ctx.matrix(W)
    opt = clembed.Optimizer(ctx, "adam", 0.01)
    opt.step(a, grad, ids)
    opt.step(a, grad, ids)
    opt.step(b, grad, ids)
    sa, sb = opt.state(a), opt.state(b)
    assert sa[2] == 2 and sb[2] == 1 and sa[0] is not sb[0]
    # b's first step equals a's first step (its own zero states, t = 1)
    c = ctx.matrix(W)
    clembed.Optimizer(ctx, "adam", 0.01).step(c, grad, ids)
    assert_same_bits(b.numpy(), c.numpy())


def test_context_optimizer_step_is_the_optimizers(ctx):
    """Context.optimizer_step with the states and step count kept by the caller gives
    Optimizer.step's bits (Optimizer stands on it)."""
    W, ids, grad = case()
    a, b = ctx.matrix(W), ctx.matrix(W)
    opt = clembed.Optimizer(ctx, "adam", 0.01, weight_decay=0.1)
    m, v = ctx.empty(*W.shape), ctx.empty(*W.shape)
    for t in (1, 2):
        opt.step(a, grad, ids, scale=0.5)
        assert ctx.optimizer_step(b, grad, ids, "adam", 0.01, state=m, state2=v, step=t, eps=1e-8,
                                  weight_decay=0.1, scale=0.5) is b
    assert_same_bits(b.numpy(), a.numpy())
    assert_same_bits(m.numpy(), opt.state(a)[0].numpy())
    c = ctx.matrix(W)                                # sgd needs no state
    ctx.optimizer_step(c, grad, ids, "sgd", 0.05)
    d = ctx.matrix(W)
    clembed.Optimizer(ctx, "sgd", 0.05).step(d, grad, ids)
    assert_same_bits(c.numpy(), d.numpy())
    with pytest.raises(clembed.ArgumentTypeError) as e:
        ctx.optimizer_step(c, grad, ids, "adagrad", 0.1, state=np.zeros(W.shape, np.float32))
    assert e.value.argument == "state" and e.value.call == "Context.optimizer_step"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.optimizer_step(c, grad, ids, "adam", 0.1, state=m, state2=v, step=0)   # Adam counts from 1
    assert e.value.call == "Context.optimizer_step"


def test_optimizer_bad_kind(ctx):
    with pytest.raises(ValueError, match="argument kind: must be one of 'sgd'"):
        clembed.Optimizer(ctx, "lion", 0.1)


def test_embedding_like_nn_embedding(ctx):
    V, D = 12, 5
    emb = clembed.Embedding(V, D, padding_idx=-1, seed=3, ctx=ctx)
    assert emb.padding_idx == V - 1 and emb.weight.shape == (V, D)
    W0 = emb.weight.numpy()
    init = ctx.init(ctx.empty(V, D), "normal", seed=3).numpy()
    assert_same_bits(W0[:-1], init[:-1])
    assert np.array_equal(W0[-1], np.zeros(D, np.float32))     # the padding row starts at zero
    ids = np.array([[0, 3, 11], [3, 3, 5]])
    out = emb.forward(ids)
    ref = W0[ids].copy()
    assert isinstance(out, np.ndarray) and out.shape == (2, 3, D)
    assert_same_bits(out, ref)
    g1 = rng.standard_normal((2, 3, D)).astype(np.float32)
    emb.backward(g1)
    ids2 = np.array([7, 3])
    emb(ids2)
    g2 = rng.standard_normal((2, D)).astype(np.float32)
    emb.backward(g2)
    all_ids = np.concatenate([ids.reshape(-1), ids2])
    all_g = np.concatenate([g1.reshape(-1, D), g2])
    gref, touched = backward_f32(all_g, all_ids, V, padding_idx=V - 1)
    assert_same_bits(emb.grad, gref)
    emb.step(lr=0.5)
    W1 = emb.weight.numpy()
    assert_same_bits(W1[touched], W0[touched] - np.float32(0.5) * gref[touched])   # SGD: exact
    assert_same_bits(W1[~touched], W0[~touched])      # the padding row and unseen rows unchanged
    assert emb.grad is None
    with pytest.raises(ValueError):
        emb.backward(np.zeros((3, D)))


def test_embedding_scale_and_positions(ctx):
    V, D = 9, 4
    P = rng.standard_normal((3, D)).astype(np.float32)
    emb = clembed.Embedding(V, D, scale="sqrt", positions=P, ctx=ctx, seed=1)
    W0 = emb.weight.numpy()
    ids = np.array([[1, 2, 8], [0, 0, 4]])
    assert_same_bits(emb(ids), np.float32(2.0) * W0[ids] + P[None])
    g = rng.standard_normal((2, 3, D)).astype(np.float32)
    emb.backward(g)
    gref, _ = backward_f32(g, ids, V, 2.0)
    assert_same_bits(emb.grad, gref)


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
def test_embedding_step_with_optimizer(ctx, kind):
    """Embedding.step applies the recorded gradient (scale included, the padding row
    left out) with the optimizer: one step of the float32 reference."""
    V, D, lr = 10, 4, 0.05
    opt = clembed.Optimizer(ctx, kind, lr)
    emb = clembed.Embedding(V, D, padding_idx=2, scale="sqrt", ctx=ctx, seed=5, optimizer=opt)
    W0 = emb.weight.numpy()
    ids = np.array([[1, 2, 1], [7, 0, 7]])
    emb(ids)
    g1 = rng.standard_normal((2, 3, D)).astype(np.float32)
    emb.backward(g1)
    emb.step()
    assert emb.grad is None
    g, touched = backward_f32(g1, ids, V, 2.0, padding_idx=2)
    s = np.zeros((V, 1 if kind == "rowwise_adagrad" else D), np.float32)
    rw, _, _, term = ref_step(kind, W0, s, np.zeros((V, D), np.float32), g, touched, 1, lr, KIND_EPS[kind])
    got = emb.weight.numpy()
    if term is None:
        assert_same_bits(got, rw)
    else:
        within(got, rw, 4 * ulp(term) + ulp(rw), kind)
    assert_same_bits(got[~touched], W0[~touched])       # the padding row and unseen rows
    assert opt.state(emb.weight)[2] == 1


def test_embedding_optimizer_by_name(ctx):
    V, D = 8, 3
    emb = clembed.Embedding(V, D, ctx=ctx, optimizer="adam")
    W0 = emb.weight.numpy()
    ids = np.array([1, 2, 1])
    emb(ids)
    g = rng.standard_normal((3, D)).astype(np.float32)
    emb.backward(g)
    emb.step()
    gr, touched = backward_f32(g, ids, V)
    # Adam's first step moves each touched element by about lr * sign(g)
    d = emb.weight.numpy() - W0
    assert np.allclose(d[touched], -0.01 * np.sign(gr[touched]), rtol=1e-3, atol=1e-6)
    assert_same_bits(d[~touched], np.zeros_like(d[~touched]))


# ------------------------------------------------------------- stochastic rounding

def sr_words(seed, step, rows, cols, first_row=0):
    """include/clembed.h's random words of a rows x cols table's step: K = (x0, x1) of
    Philox(seed; step lo, step hi, 0x53524E44, 0), then x0 of Philox(K; col, row)."""
    k = philox_kc(seed & 0xFFFFFFFF, seed >> 32, [step & 0xFFFFFFFF, step >> 32, 0x53524E44, 0])
    r = (np.arange(rows, dtype=np.uint64) + np.uint64(first_row))[:, None] + np.zeros((1, cols), np.uint64)
    c = np.arange(cols, dtype=np.uint64)[None, :] + np.zeros((rows, 1), np.uint64)
    M = np.uint64(0xFFFFFFFF)
    return philox_kc(int(k[0]), int(k[1]), [c & M, c >> np.uint64(32), r & M, r >> np.uint64(32)])[0]


def sr_bits(x, words, dtype):
    """The stochastically rounded bits of float32 x (finite here): lo <= |x| < hi the
    neighbours in dtype, f = floor(2^32 (|x| - lo) / spacing), hi when f + word >= 2^32."""
    x = np.asarray(x, np.float32)
    a = np.abs(x).astype(np.float64)
    if dtype == "f16":
        lo = np.abs(x).astype(np.float16)                      # nearest, then down to <= |x|
        lo = np.where(lo.astype(np.float64) > a, np.nextafter(lo, np.float16(0)), lo).astype(np.float16)
        lo_bits = lo.view(np.uint16).astype(np.uint64)
        nxt = np.nextafter(lo, np.float16(np.inf)).astype(np.float64)
        spacing = np.where(np.isinf(nxt), 32.0, nxt - lo.astype(np.float64))
        vlo = lo.astype(np.float64)
    else:
        lo_bits = (np.abs(x).view(np.uint32) >> np.uint32(16)).astype(np.uint64)
        vlo = (lo_bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
        vhi = ((lo_bits + np.uint64(1)).astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
        spacing = np.where(np.isinf(vhi), 2.0 ** 120, vhi - vlo)
    f = np.floor((a - vlo) / spacing * 2.0 ** 32).astype(np.uint64)
    up = (f + np.asarray(words, np.uint64)) >= np.uint64(1 << 32)
    sign = np.where(np.signbit(x), 0x8000, 0).astype(np.uint64)
    return ((lo_bits + up.astype(np.uint64)) | sign).astype(np.uint16)


def table_bits(m):
    a = m.numpy()
    return a.view(np.uint16) if a.dtype == np.float16 else (a.view(np.uint32) >> np.uint32(16)).astype(np.uint16)


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_stochastic_rounding_bits(ctx, kind, dtype):
    """Every element of an F16/BF16 table after each step is the stochastic rounding of x,
    the step's float32 result (from the same step on an F32 twin), with the contract's
    Philox words of (seed, step, row, column)."""
    W, ids, grad = case(V=20, D=37)
    table = ctx.matrix(W, dtype=dtype)
    twin = ctx.matrix(table.numpy().astype(np.float32))
    seed = 0x1234_5678_9ABC
    opt = clembed.Optimizer(ctx, kind, 0.05, weight_decay=0.01, stochastic_rounding=True, seed=seed)
    topt = clembed.Optimizer(ctx, kind, 0.05, weight_decay=0.01, stochastic_rounding=True, seed=seed)
    other = 0
    for t in (1, 2, 3):
        opt.step(table, grad, ids)
        topt.step(twin, grad, ids)
        x = twin.numpy()
        want = sr_bits(x, sr_words(seed, t, *W.shape), dtype)
        got = table_bits(table)
        assert np.array_equal(got, want), "step %d: first difference at %s" % (t, np.argwhere(got != want)[0])
        nearest = x.astype(np.float16).view(np.uint16) if dtype == "f16" else None
        if nearest is not None:
            other += int(np.count_nonzero(got != nearest))
        if opt.state(table)[0] is not None:
            assert_same_bits(opt.state(table)[0].numpy(), topt.state(twin)[0].numpy())
        twin.write(table.numpy().astype(np.float32))          # the twin takes the rounded values
    assert dtype == "bf16" or other > 0


def test_stochastic_rounding_context_and_bags(ctx):
    """Context.optimizer_step's and Context.bag_optimizer_step's stochastic_rounding and
    rounding_seed are the Optimizer's; an F32 table ignores them; 0/1 only."""
    W, ids, grad = case(V=16, D=9)
    a, b = ctx.matrix(W, dtype="bf16"), ctx.matrix(W, dtype="bf16")
    opt = clembed.Optimizer(ctx, "adagrad", 0.1, stochastic_rounding=True, seed=5)
    st = ctx.empty(*W.shape)
    for t in (1, 2):
        opt.step(a, grad, ids)
        ctx.optimizer_step(b, grad, ids, "adagrad", 0.1, state=st, step=t, stochastic_rounding=True, rounding_seed=5)
    assert_same_bits(a.numpy(), b.numpy())
    n = ctx.matrix(W, dtype="bf16")
    ctx.optimizer_step(n, grad, ids, "adagrad", 0.1, state=ctx.empty(*W.shape), step=1)
    c = ctx.matrix(W, dtype="bf16")
    ctx.optimizer_step(c, grad, ids, "adagrad", 0.1, state=ctx.empty(*W.shape), step=1, stochastic_rounding=True,
                       rounding_seed=5)
    assert not np.array_equal(table_bits(n), table_bits(c))     # the option does something
    f, g = ctx.matrix(W), ctx.matrix(W)                           # ...but not to an F32 table
    ctx.optimizer_step(f, grad, ids, "sgd", 0.1, step=1)
    ctx.optimizer_step(g, grad, ids, "sgd", 0.1, step=1, stochastic_rounding=True, rounding_seed=5)
    assert_same_bits(f.numpy(), g.numpy())
    # bags: the same bits as the Optimizer's bag_step
    bids, offsets = np.array([1, 2, 2, 5, 7, 1]), np.array([0, 2, 6])
    bgrad = rng.standard_normal((2, W.shape[1])).astype(np.float32)
    p, q = ctx.matrix(W, dtype="f16"), ctx.matrix(W, dtype="f16")
    clembed.Optimizer(ctx, "sgd", 0.3, stochastic_rounding=True, seed=9).bag_step(p, bgrad, bids, offsets,
                                                                                  include_last_offset=True)
    ctx.bag_optimizer_step(q, bgrad, bids, offsets, kind="sgd", lr=0.3, step=1, stochastic_rounding=True,
                           rounding_seed=9, include_last_offset=True)
    assert_same_bits(p.numpy(), q.numpy())
    with pytest.raises(clembed.ArgumentTypeError) as e:
        clembed.Optimizer(ctx, "sgd", 0.1, stochastic_rounding=2)
    assert e.value.argument == "stochastic_rounding"
    with pytest.raises(clembed.ArgumentTypeError) as e:
        ctx.optimizer_step(f, grad, ids, "sgd", 0.1, stochastic_rounding="yes")
    assert e.value.argument == "stochastic_rounding"


def test_stochastic_rounding_unbiased(ctx):
    """10^5 elements stepped from 1 to x = 1 - 0.001 (between the BF16 values 255/256 and
    1): the stochastic mean is within 5 standard errors of x, nearest even's is 1."""
    rows, cols = 100, 1000
    W = np.ones((rows, cols), np.float32)
    grad = np.ones((rows, cols), np.float32)
    ids = np.arange(rows)
    x = float(np.float32(1) - np.float32(0.001) * np.float32(1))
    p = (x - 255 / 256) * 256
    se = np.sqrt(p * (1 - p) / (rows * cols)) / 256
    s, r = ctx.matrix(W, dtype="bf16"), ctx.matrix(W, dtype="bf16")
    ctx.optimizer_step(s, grad, ids, "sgd", 0.001, stochastic_rounding=True, rounding_seed=77)
    ctx.optimizer_step(r, grad, ids, "sgd", 0.001)
    assert abs(s.numpy().astype(np.float64).mean() - x) <= 5 * se
    assert abs(r.numpy().astype(np.float64).mean() - x) >= 100 * se
