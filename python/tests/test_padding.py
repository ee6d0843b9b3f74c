"""padding_idx as PyTorch's: torch.nn.Embedding (and Hugging Face's BertEmbeddings, which
uses it) reads the padding row as stored and gives it no gradient. Context.embed's
padding_keeps_row (clembed_embed_options.padding_keeps_row) does the same; the modules
(Embedding, Embedding.from_pretrained, BertEmbeddings) use it. Compared with torch where
it is importable (Debian's python3-torch), else with NumPy references; every case has a
padding row that is not zero, so zeros for the padding id fail it."""
import numpy as np
import pytest

import clembed

try:  # optional: the reference where installed
    import torch
except Exception:  # pragma: no cover - depends on the machine
    torch = None

rng = np.random.default_rng(41)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint16 if a.dtype == np.float16 else np.uint32)


def torch_embedding(W, ids, padding_idx, grad=None):
    """(forward, weight gradient) of torch.nn.Embedding.from_pretrained(W, padding_idx), or
    the NumPy equivalent without torch: W[ids], and the sum of grad per row with the
    padding row's left out."""
    V, D = W.shape
    pad = None if padding_idx is None else padding_idx % V
    if torch is not None:
        emb = torch.nn.Embedding.from_pretrained(torch.from_numpy(W.copy()), freeze=False, padding_idx=padding_idx)
        out = emb(torch.from_numpy(np.asarray(ids, np.int64)))
        dw = None
        if grad is not None:
            out.backward(torch.from_numpy(np.asarray(grad, np.float32)))
            dw = emb.weight.grad.numpy()
        return out.detach().numpy(), dw
    out = W[np.asarray(ids)]
    dw = None
    if grad is not None:
        dw = np.zeros((V, D), np.float64)
        np.add.at(dw, np.asarray(ids).reshape(-1), np.asarray(grad, np.float64).reshape(-1, D))
        if pad is not None:
            dw[pad] = 0.0
        dw = dw.astype(np.float32)
    return out, dw


def test_ctx_embed_padding_keeps_row(ctx):
    W = (1.0 + rng.standard_normal((7, 5))).astype(np.float32)
    ids = np.array([[2, 0, 2], [6, 2, 1]])
    plain = ctx.embed(W, ids, padding_idx=2).numpy()          # C's default: the padding row counts as zero
    assert np.all(plain[ids == 2] == 0) and np.array_equal(plain[ids != 2], W[ids[ids != 2]])
    kept = ctx.embed(W, ids, padding_idx=2, padding_keeps_row=True).numpy()
    want, _ = torch_embedding(W, ids, 2)
    assert np.array_equal(bits(kept), bits(want))             # the stored row, as torch's
    assert np.array_equal(ctx.embed(W, ids, padding_idx=-5, padding_keeps_row=True).numpy(), kept)
    # with a scale and the sinusoid: the stored row scaled, plus its position, as any token
    full = ctx.embed(W, ids, scale=2.0, positions="sinusoid", padding_idx=2, padding_keeps_row=True).numpy()
    none = ctx.embed(W, ids, scale=2.0, positions="sinusoid").numpy()
    assert np.array_equal(bits(full), bits(none))
    # the module-level function takes it too
    assert np.array_equal(clembed.embed(W, ids, padding_idx=2, padding_keeps_row=True), kept)
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embed(W, ids, padding_idx=2, padding_keeps_row=2)
    assert e.value.argument == "padding_keeps_row"


def test_ctx_embed_backward_padding_keeps_row_gives_no_gradient(ctx):
    V, D = 9, 4
    W = (1.0 + rng.standard_normal((V, D))).astype(np.float32)
    ids = np.array([[3, 0, 3, 8], [1, 3, 3, 0]])
    g = rng.standard_normal(ids.shape + (D,)).astype(np.float32)
    grads = ctx.embed_backward(g, W, ids, padding_idx=3, padding_keeps_row=True)
    _, want = torch_embedding(W, ids, 3, g)
    got = grads["table"].numpy()
    assert np.all(got[3] == 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_embedding_from_pretrained_reads_the_stored_padding_row(ctx):
    """Issue 41: Embedding.from_pretrained(w, padding_idx=0) returned zeros for id 0 where
    torch.nn.Embedding returns the stored row."""
    V, D = 10, 6
    W = (1.0 + rng.standard_normal((V, D))).astype(np.float32)
    ids = np.array([[0, 4, 0], [9, 0, 2]])
    for pad in (0, -1, 4):
        emb = clembed.Embedding.from_pretrained(W, padding_idx=pad, ctx=ctx)
        want, _ = torch_embedding(W, ids, pad)
        assert np.array_equal(bits(emb(ids)), bits(want)), pad
    # trained (freeze=False): the padding row is read as stored and gets no gradient
    emb = clembed.Embedding.from_pretrained(W, freeze=False, padding_idx=0, ctx=ctx)
    g = rng.standard_normal(ids.shape + (D,)).astype(np.float32)
    out = emb(ids)
    emb.backward(g)
    want_out, want_dw = torch_embedding(W, ids, 0, g)
    assert np.array_equal(bits(out), bits(want_out))
    assert np.all(emb.grad[0] == 0)
    np.testing.assert_allclose(emb.grad, want_dw, rtol=1e-6, atol=1e-6)
    emb.step(lr=0.5)
    W1 = emb.weight.numpy()
    assert np.array_equal(bits(W1[0]), bits(W[0]))            # the padding row is not stepped
    assert np.array_equal(bits(emb(ids)[ids == 0]), bits(np.broadcast_to(W[0], (3, D))))


def test_embedding_like_torch_after_load_state_dict(ctx):
    """A layer made with padding_idx, its weights loaded from a state whose padding row is
    not zero (as a model's may be): forward and the gradient as torch's."""
    V, D = 12, 5
    emb = clembed.Embedding(V, D, padding_idx=-1, ctx=ctx, seed=5)
    assert np.all(emb.weight.numpy()[V - 1] == 0)             # made zero, as PyTorch makes it
    W = (1.0 + rng.standard_normal((V, D))).astype(np.float32)
    emb.load_state_dict({"weight": W})
    ids = np.array([[11, 3, 11, 0], [2, 11, 7, 7]])
    g = rng.standard_normal(ids.shape + (D,)).astype(np.float32)
    out = emb(ids)
    emb.backward(g)
    want_out, want_dw = torch_embedding(W, ids, -1, g)
    assert np.array_equal(bits(out), bits(want_out))
    np.testing.assert_allclose(emb.grad, want_dw, rtol=1e-6, atol=1e-6)
    # f16 and bf16 weights read the stored (rounded) row too
    for dt in ("f16", "bf16"):
        e = clembed.Embedding(V, D, padding_idx=1, ctx=ctx, dtype=dt)
        e.load_state_dict({"weight": W})
        stored = e.weight.numpy(np.float32)
        got = np.asarray(e(np.array([1, 1, 4])), np.float32)
        assert np.array_equal(got[:2], stored[[1, 1]]) and np.all(stored[1] != 0), dt


def layer_norm64(x, g, b, eps):
    x = x.astype(np.float64)
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def hf_bert_embeddings(state, ids, types, eps):
    """Hugging Face's BertEmbeddings (absolute positions, eval) on state: torch's modules
    where torch is importable (nn.Embedding(padding_idx=0) reads the [PAD] row as stored),
    else the same in float64 NumPy."""
    W, P, T = (state[k] for k in ("word_embeddings.weight", "position_embeddings.weight",
                                  "token_type_embeddings.weight"))
    g, b = state["LayerNorm.weight"], state["LayerNorm.bias"]
    S = ids.shape[-1]
    if torch is not None:
        word = torch.nn.Embedding.from_pretrained(torch.from_numpy(W.copy()), padding_idx=0)
        pos = torch.nn.Embedding.from_pretrained(torch.from_numpy(P.copy()))
        typ = torch.nn.Embedding.from_pretrained(torch.from_numpy(T.copy()))
        ln = torch.nn.LayerNorm(W.shape[1], eps=eps)
        with torch.no_grad():
            ln.weight.copy_(torch.from_numpy(g))
            ln.bias.copy_(torch.from_numpy(b))
            x = (word(torch.from_numpy(ids.astype(np.int64))) + typ(torch.from_numpy(types.astype(np.int64)))
                 + pos(torch.arange(S)))
            return ln(x).numpy().astype(np.float64)
    x = (W[ids] + P[:S]) + T[types]
    return layer_norm64(x, g, b, eps)


def test_bert_embeddings_load_state_dict_reads_the_pad_row(ctx):
    """Issue 41: BertEmbeddings.load_state_dict of a Hugging Face state whose [PAD] row is
    not zero gave the [PAD] tokens the output of a zero row (up to 1.84 off)."""
    V, H, L, eps = 30, 16, 12, 1e-12
    layer = clembed.BertEmbeddings(V, H, max_position_embeddings=L, pad_token_id=0, ctx=ctx, seed=3).eval()
    state = {"word_embeddings.weight": (0.5 + rng.standard_normal((V, H))).astype(np.float32),
             "position_embeddings.weight": (0.3 * rng.standard_normal((L, H))).astype(np.float32),
             "token_type_embeddings.weight": (0.2 * rng.standard_normal((2, H))).astype(np.float32),
             "LayerNorm.weight": (1 + 0.1 * rng.standard_normal(H)).astype(np.float32),
             "LayerNorm.bias": (0.1 * rng.standard_normal(H)).astype(np.float32)}
    layer.load_state_dict(state)
    ids = np.array([[5, 9, 0, 0, 0], [7, 0, 3, 0, 0]])        # right-padded with [PAD] = 0
    types = np.array([[0, 0, 0, 0, 0], [0, 1, 1, 1, 1]])
    got = layer(ids, types)
    want = hf_bert_embeddings(state, ids, types, eps)
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= 2e-5 * (1 + np.abs(want))), "worst %g" % err.max()
    # the [PAD] tokens are what a zero row would not give
    zero_row = dict(state)
    zero_row["word_embeddings.weight"] = state["word_embeddings.weight"].copy()
    zero_row["word_embeddings.weight"][0] = 0
    assert np.abs(hf_bert_embeddings(zero_row, ids, types, eps) - want)[ids == 0].max() > 1e-2
    # training: the [PAD] row gets no gradient and is not stepped
    layer.train()
    layer(ids, types)
    layer.backward(rng.standard_normal(ids.shape + (H,)).astype(np.float32))
    assert np.all(layer.grads["word_embeddings.weight"][0] == 0)
    layer.step(lr=0.1)
    assert np.array_equal(layer.word_embeddings.numpy()[0], state["word_embeddings.weight"][0])
