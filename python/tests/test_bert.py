"""BERT's input layer: Context.embed with segments and a norm, Context.embed_backward and
clembed.BertEmbeddings, against float64 NumPy references written here (the contract's
tolerances: outputs within 1e-5 * (1 + |y|), gradients within 1e-5 of the sum of their
terms' sizes), and the bits of Context.backward where the contract says so."""
import numpy as np
import pytest

import clembed
from conftest import need

rng = np.random.default_rng(27)


def layer_case(V=40, D=48, B=3, S=8, T=2):
    W = (0.3 + rng.standard_normal((V, D))).astype(np.float32)
    P = (0.5 * rng.standard_normal((S + 4, D))).astype(np.float32)
    St = (0.2 * rng.standard_normal((T, D))).astype(np.float32)
    g = (1 + 0.2 * rng.standard_normal(D)).astype(np.float32)
    b = (0.1 * rng.standard_normal(D)).astype(np.float32)
    ids = rng.integers(0, V, (B, S))
    types = (np.arange(B * S).reshape(B, S) % S >= S // 2).astype(np.int32)
    return W, P, St, g, b, ids, types


def x_of(W, P, St, ids, types, offset=0, scale=1.0):
    """x in float32 in the contract's order: (scale * W[id] + P[p]) + S[s]."""
    S = ids.shape[-1]
    return (np.float32(scale) * W[ids] + P[offset:offset + S]) + St[types]


def norm64(x, kind, g, b, eps):
    x = x.astype(np.float64)
    m = x.mean(-1, keepdims=True) if kind == "layer" else 0.0
    r = 1.0 / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps)
    y = (x - m) * r * g
    return y + b if kind == "layer" else y


def norm_backward64(x, dy, kind, g, eps):
    """dx, and g * xh (the weight's per-token terms), in float64."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    m = x.mean(-1, keepdims=True) if kind == "layer" else 0.0
    r = 1.0 / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps)
    xh = (x - m) * r
    h = dy * g
    a = h.mean(-1, keepdims=True) if kind == "layer" else 0.0
    bb = (h * xh).mean(-1, keepdims=True)
    return r * ((h - a) - xh * bb), dy * xh


def within(got, want, size, what):
    tol = 1e-5 * (1 + size)
    err = np.abs(np.asarray(got, np.float64) - want)
    assert np.all(err <= tol), "%s: worst %g at %s" % (what, (err / tol).max(), np.unravel_index(np.argmax(err / tol),
                                                                                              err.shape))


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_forward_against_float64(ctx, kind):
    need("clembed_embed_backward")
    W, P, St, g, b, ids, types = layer_case()
    bias = b if kind == "layer" else None
    out = ctx.embed(W, ids, positions=P, offset=2, segment_table=St, segment_ids=types, norm=kind,
                    norm_weight=g, norm_bias=bias, norm_eps=1e-12, scale=1.5).numpy()
    want = norm64(x_of(W, P, St, ids, types, 2, 1.5), kind, g, b, 1e-12)
    assert out.shape == ids.shape + (W.shape[1],)
    within(out, want, np.abs(want), "forward " + kind)
    # a Matrix weight (1, D) and the default eps
    out = ctx.embed(W, ids, positions=P, segment_table=ctx.matrix(St), segment_ids=types, norm=kind,
                    norm_weight=ctx.matrix(g.reshape(1, -1))).numpy()
    want = norm64(x_of(W, P, St, ids, types), kind, g, np.zeros_like(g), 1e-5)
    within(out, want, np.abs(want), "forward %s, Matrix weight" % kind)


def test_segments_without_a_norm_and_default_types(ctx):
    need("clembed_embed_backward")
    W, P, St, g, b, ids, types = layer_case()
    out = ctx.embed(W, ids, positions=P, segment_table=St).numpy()   # type 0 everywhere
    assert np.array_equal(out, x_of(W, P, St, ids, np.zeros_like(types)))


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_backward_against_float64(ctx, kind):
    need("clembed_embed_backward")
    W, P, St, g, b, ids, types = layer_case()
    bias = b if kind == "layer" else None
    dy = rng.standard_normal(ids.shape + (W.shape[1],)).astype(np.float32)
    grads = ctx.embed_backward(dy, W, ids, positions=P, segment_table=St, segment_ids=types, norm=kind,
                               norm_weight=g, norm_bias=bias, norm_eps=1e-12, scale=2.0)
    assert set(grads) == {"table", "position_table", "segment_table", "norm_weight"} | (
        {"norm_bias"} if kind == "layer" else set())
    x = x_of(W, P, St, ids, types, 0, 2.0)
    dx, gxh = norm_backward64(x, dy, kind, g, 1e-12)
    mag = np.abs(dx) + 1e-3   # the terms' sizes, roughly
    D = W.shape[1]
    flat, fdx, fmag = ids.reshape(-1), dx.reshape(-1, D), mag.reshape(-1, D)
    want_t, size_t = np.zeros(W.shape), np.zeros(W.shape)
    np.add.at(want_t, flat, 2.0 * fdx)
    np.add.at(size_t, flat, 2.0 * fmag)
    within(grads["table"].numpy(), want_t, 10 * size_t, "grads table")
    within(grads["position_table"].numpy()[:ids.shape[1]], dx.sum(0), 10 * mag.sum(0), "grads positions")
    want_s = np.stack([fdx[types.reshape(-1) == s].sum(0) for s in range(2)])
    size_s = np.stack([fmag[types.reshape(-1) == s].sum(0) for s in range(2)])
    within(grads["segment_table"].numpy(), want_s, 10 * size_s, "grads segments")
    within(grads["norm_weight"].numpy()[0], gxh.reshape(-1, D).sum(0), 10 * np.abs(gxh).reshape(-1, D).sum(0),
           "grads norm_weight")
    if kind == "layer":
        within(grads["norm_bias"].numpy()[0], dy.reshape(-1, D).sum(0).astype(np.float64),
               np.abs(dy).reshape(-1, D).sum(0), "grads norm_bias")
    # accumulated: the same call again doubles them (up to the last bits)
    before = grads["segment_table"].numpy()
    ctx.embed_backward(dy, W, ids, grads={"segment_table": grads["segment_table"]}, positions=P,
                       segment_table=St, segment_ids=types, norm=kind, norm_weight=g, norm_bias=bias,
                       norm_eps=1e-12, scale=2.0)
    assert np.array_equal(grads["segment_table"].numpy(), before + before)


def test_without_a_norm_the_bits_of_backward(ctx):
    need("clembed_embed_backward")
    W, P, St, g, b, ids, types = layer_case()
    dy = rng.standard_normal(ids.shape + (W.shape[1],)).astype(np.float32)
    grads = ctx.embed_backward(dy, W, ids, positions=P, segment_table=St, segment_ids=types, dropout=0.25, seed=5,
                               scale=3.0)
    pg = ctx.empty(P.shape[0], P.shape[1])
    dW = ctx.backward(dy, ids, W.shape[0], scale=3.0, dropout=0.25, seed=5, position_grad=pg)
    a, c = grads["table"].numpy(), dW.numpy()
    assert np.array_equal(a.view(np.uint32), c.view(np.uint32))
    assert np.array_equal(grads["position_table"].numpy().view(np.uint32), pg.numpy().view(np.uint32))


def test_bad_segment_ids_and_arguments(ctx):
    need("clembed_embed_backward")
    W, P, St, g, b, ids, types = layer_case()
    bad = types.copy()
    bad[1, 3] = 7
    out = ctx.embed(W, ids, positions=P, segment_table=St, segment_ids=bad)
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        out.numpy()
    assert e.value.argument == "segment_ids" and e.value.index == 1 * ids.shape[1] + 3 and e.value.value == 7
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embed(W, ids, norm="rms", norm_bias=b)
    assert e.value.argument == "norm_bias"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embed(W, ids, norm="batch")
    assert e.value.argument == "norm"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embed(W, ids, norm="layer", norm_weight=np.ones((2, W.shape[1]), np.float32))
    assert e.value.argument == "norm_weight"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embed(W, ids, segment_ids=types)
    assert e.value.argument == "segment_ids"
    dy = np.zeros(ids.shape + (W.shape[1],), np.float32)
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embed_backward(dy, W, ids, grads={"weights": ctx.empty(1, 1)})
    assert e.value.argument == "grads"
    with pytest.raises(clembed.InvalidArgumentError):     # the forward has no norm bias
        ctx.embed_backward(dy, W, ids, grads={"norm_bias": ctx.empty(1, W.shape[1])})


def test_bert_embeddings_trains(ctx):
    need("clembed_embed_backward")
    V, H, B, S = 30, 16, 4, 6
    layer = clembed.BertEmbeddings(V, H, max_position_embeddings=S, ctx=ctx, seed=3, initializer_range=0.5)
    ids = rng.integers(1, V, (B, S))
    types = (np.arange(B * S).reshape(B, S) % S >= S // 2).astype(np.int32)
    target = rng.standard_normal((B, S, H)).astype(np.float32)
    # the forward is the contract's layer of the module's tables
    sd = layer.state_dict()
    out = layer(ids, types)
    want = norm64(x_of(sd["word_embeddings.weight"], sd["position_embeddings.weight"],
                       sd["token_type_embeddings.weight"], ids, types), "layer", sd["LayerNorm.weight"],
                  sd["LayerNorm.bias"], 1e-12)
    within(out, want, np.abs(want), "BertEmbeddings.forward")
    losses = []
    for _ in range(60):
        out = layer(ids, types)
        losses.append(float(((out - target) ** 2).mean()))
        layer.backward(2 * (out - target) / out.size)
        layer.step(lr=5.0)
    assert losses[-1] < 0.3 * losses[0], losses[::10]
    assert layer.grads is None   # cleared by step
    # only rows that occurred move; the padding row (id 0) stays zero
    w = layer.word_embeddings.numpy()
    assert np.array_equal(w[0], np.zeros(H, np.float32))
    unused = sorted(set(range(1, V)) - set(ids.reshape(-1).tolist()))
    assert np.array_equal(w[unused], sd["word_embeddings.weight"][unused])


def test_bert_embeddings_adam_dropout_and_state(ctx):
    need("clembed_embed_backward")
    V, H, S = 20, 8, 5
    layer = clembed.BertEmbeddings(V, H, max_position_embeddings=8, ctx=ctx, seed=1, hidden_dropout_prob=0.2,
                                   optimizer=clembed.Optimizer(ctx, "adam", 0.05), norm="rms")
    assert layer.norm_bias is None and "LayerNorm.bias" not in layer.state_dict()
    ids = rng.integers(0, V, (2, S))
    a, c = layer(ids), layer(ids)
    assert not np.array_equal(a, c)                  # a fresh mask each call in training
    layer.eval()
    a, c = layer(ids), layer(ids)
    assert np.array_equal(a, c)
    layer.train()
    target = rng.standard_normal(a.shape).astype(np.float32)
    first = None
    for _ in range(40):
        out = layer(ids, past_key_values_length=2)
        loss = float(((out - target) ** 2).mean())
        first = loss if first is None else first
        layer.backward(2 * (out - target) / out.size)
        layer.step()
    assert loss < 0.7 * first
    other = clembed.BertEmbeddings(V, H, max_position_embeddings=8, ctx=ctx, seed=9, norm="rms")
    other.load_state_dict(layer.state_dict())
    layer.eval()
    assert np.array_equal(other.eval()(ids), layer(ids))
    with pytest.raises(clembed.InvalidArgumentError):
        other.load_state_dict({"word_embeddings.weight": np.zeros((V, H), np.float32)})
    with pytest.raises(clembed.StateError):
        clembed.BertEmbeddings(V, H, ctx=ctx).backward(np.zeros((1, 1, H), np.float32))
    with pytest.raises(clembed.InvalidArgumentError):
        layer(ids, np.zeros((1, S), np.int32))
