"""clembed.Optimizer and clembed.Embedding against NumPy references.

The row gradient g is the contract's float32 sum in ascending token order
(backward_f32); the optimizer updates are then checked against the contract's
float32 formulas within a few ulp (the device's sqrt and division need not be
correctly rounded)."""
import numpy as np
import pytest

import clembed
from conftest import need
from test_ops import backward_f32, assert_same_bits

rng = np.random.default_rng(7)


def close(a, b, ulps=4):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return np.all(np.abs(a - b) <= 1e-7 + ulps * 2.0 ** -23 * np.abs(b))


def case(V=24, D=6, shape=(4, 5)):
    W = rng.standard_normal((V, D)).astype(np.float32)
    ids = rng.integers(0, V // 2, size=shape)
    grad = rng.standard_normal(shape + (D,)).astype(np.float32)
    return W, ids, grad


def test_optimizer_sgd(ctx):
    W, ids, grad = case()
    table = ctx.matrix(W)
    opt = clembed.Optimizer(ctx, "sgd", 0.05)
    assert opt.step(table, grad, ids, scale=2.0) is table
    g, touched = backward_f32(grad, ids, W.shape[0], 2.0)
    got = table.numpy()
    assert close(got[touched], W[touched] - np.float32(0.05) * g[touched], 1)
    assert_same_bits(got[~touched], W[~touched])
    # lr given to step overrides the optimizer's
    opt.step(table, grad, ids, lr=0.0)
    assert_same_bits(table.numpy(), got)


def test_optimizer_sgd_weight_decay(ctx):
    need("clembed_optimizer_step")
    W, ids, grad = case()
    table = ctx.matrix(W)
    clembed.Optimizer(ctx, "sgd", 0.1, weight_decay=0.01).step(table, grad, ids)
    g, touched = backward_f32(grad, ids, W.shape[0])
    g = g + np.float32(0.01) * W
    got = table.numpy()
    assert close(got[touched], W[touched] - np.float32(0.1) * g[touched])
    assert_same_bits(got[~touched], W[~touched])


def test_optimizer_adagrad(ctx):
    need("clembed_optimizer_step")
    W, ids, grad = case()
    table = ctx.matrix(W)
    opt = clembed.Optimizer(ctx, "adagrad", 0.1)
    g, touched = backward_f32(grad, ids, W.shape[0])
    w = W.copy()
    s = np.zeros_like(W)
    for _ in range(3):
        opt.step(table, grad, ids)
        s = s + g * g
        upd = w - np.float32(0.1) * (g / (np.sqrt(s) + np.float32(1e-10)))
        w = np.where(touched[:, None], upd, w)
    state, state2, t = opt.state(table)
    assert t == 3 and state2 is None and state.shape == W.shape
    got = table.numpy()
    assert close(got, w) and close(state.numpy(), np.where(touched[:, None], s, 0))
    assert_same_bits(got[~touched], W[~touched])


def test_optimizer_rowwise_adagrad(ctx):
    need("clembed_optimizer_step")
    W, ids, grad = case()
    table = ctx.matrix(W)
    opt = clembed.Optimizer(ctx, "rowwise_adagrad", 0.1)
    g, touched = backward_f32(grad, ids, W.shape[0])
    w = W.copy()
    m = np.zeros((W.shape[0], 1), np.float32)
    for _ in range(2):
        opt.step(table, grad, ids)
        sq = np.zeros(W.shape[0], np.float32)
        for c in range(W.shape[1]):
            sq = sq + g[:, c] * g[:, c]
        m = np.where(touched[:, None], m + (sq / np.float32(W.shape[1]))[:, None], m)
        w = np.where(touched[:, None], w - (np.float32(0.1) / (np.sqrt(m) + np.float32(1e-8))) * g, w)
    state, _, _ = opt.state(table)
    assert state.shape == (W.shape[0], 1)
    assert close(table.numpy(), w) and close(state.numpy(), m)


def test_optimizer_adam(ctx):
    need("clembed_optimizer_step")
    W, ids, grad = case()
    table = ctx.matrix(W)
    b1, b2, lr, eps = 0.9, 0.999, 0.01, 1e-8
    opt = clembed.Optimizer(ctx, "adam", lr, betas=(b1, b2))
    g, touched = backward_f32(grad, ids, W.shape[0])
    w, m, u = W.copy(), np.zeros_like(W), np.zeros_like(W)
    for t in range(1, 4):
        opt.step(table, grad, ids)
        # in float64 from the float32 fields, each rounded to float32 once
        f1, f2, flr = float(np.float32(b1)), float(np.float32(b2)), float(np.float32(lr))
        one_b1, one_b2 = np.float32(1 - f1), np.float32(1 - f2)
        step = np.float32(flr * np.sqrt(1 - f2 ** t) / (1 - f1 ** t))
        m2 = m + (g - m) * one_b1
        u2 = u + (g * g - u) * one_b2
        w2 = w - step * (m2 / (np.sqrt(u2) + np.float32(eps)))
        sel = touched[:, None]
        m, u, w = np.where(sel, m2, m), np.where(sel, u2, u), np.where(sel, w2, w)
    st, st2, count = opt.state(table)
    assert count == 3
    assert close(table.numpy(), w, 8) and close(st.numpy(), m) and close(st2.numpy(), u)
    assert_same_bits(table.numpy()[~touched], W[~touched])


def test_optimizer_bad_kind(ctx):
    with pytest.raises(ValueError, match="optimizer kind"):
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
    assert close(W1[touched], W0[touched] - np.float32(0.5) * gref[touched], 1)
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


def test_embedding_with_adam(ctx):
    need("clembed_optimizer_step")
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
