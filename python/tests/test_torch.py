"""clembed.torch: the PyTorch modules against PyTorch's own modules and autograd (float64
references written here for the fused optimizer steps), on the default device, with the
tensors used in place (zero copy) and copied."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
import torch.nn.functional as F  # noqa: E402

import clembed  # noqa: E402
import clembed.torch as ct  # noqa: E402


@pytest.fixture(params=[True, False], ids=["zero_copy", "copied"])
def ctx(request):
    """A context per test whose tensors are used in place, or copied each way."""
    c = clembed.Context()
    ct.bridge(c, zero_copy=request.param)
    yield c
    c.close()


def f64(t):
    return t.detach().to(torch.float64)


def close(a, b, rel=1e-6, what=""):
    a, b = f64(a), f64(b)
    err = (a - b).abs().max().item() if a.numel() else 0.0
    scale = max(b.abs().max().item() if b.numel() else 0.0, 1e-30)
    assert a.shape == b.shape and err <= rel * scale, "%s: max error %g of %g" % (what, err, scale)


# ------------------------------------------------------------------ Embedding

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_embedding_forward_and_dense_grad(ctx, dtype):
    e = ct.Embedding(64, 12, padding_idx=5, ctx=ctx, seed=3, dtype=dtype)
    assert e.weight.dtype == dtype and e.weight[5].abs().sum() == 0
    ids = torch.tensor([[1, 5, 9, 9, 63], [0, 2, 5, 1, 1]])
    out = e(ids)
    assert out.dtype == dtype and out.shape == (2, 5, 12)
    assert torch.equal(out, F.embedding(ids, e.weight.detach()))          # rows as stored: bit for bit
    g = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(1)).to(dtype)
    out.backward(g)
    w = f64(e.weight).requires_grad_()
    F.embedding(ids, w, padding_idx=5).backward(f64(g))
    assert e.weight.grad.dtype == dtype
    close(e.weight.grad, w.grad, 1e-2 if dtype != torch.float32 else 1e-6, "weight.grad")
    assert e.weight.grad[5].abs().sum() == 0 and e.weight.grad[3].abs().sum() == 0


def test_embedding_sparse_grad_scale_and_max_norm(ctx):
    e = ct.Embedding(40, 8, padding_idx=0, sparse=True, scale="sqrt", ctx=ctx, seed=4)
    ids = torch.tensor([3, 0, 7, 3, 39])
    out = e(ids)
    assert torch.equal(out, F.embedding(ids, e.weight.detach()) * torch.tensor(np.sqrt(8.0), dtype=torch.float32))
    out.sum().backward()
    g = e.weight.grad
    assert g.is_sparse
    ref = f64(e.weight).requires_grad_()
    (F.embedding(ids, ref, padding_idx=0) * np.sqrt(8.0)).sum().backward()
    close(g.to_dense(), ref.grad, 1e-6, "sparse grad")
    assert sorted(g.coalesce().indices()[0].tolist()) == [3, 7, 39]
    # max_norm renorms the rows read, in place, as PyTorch's
    w0 = torch.randn(10, 4, generator=torch.Generator().manual_seed(2)) * 3
    e2 = ct.Embedding.from_pretrained(w0, freeze=True, max_norm=1.0, ctx=ctx)
    ref2 = torch.nn.Embedding.from_pretrained(w0.clone(), max_norm=1.0)
    ids2 = torch.tensor([1, 4, 4, 9])
    close(e2(ids2), ref2(ids2), 1e-6, "max_norm forward")
    close(e2.weight, ref2.weight, 1e-6, "max_norm weight")
    assert not e2.weight.requires_grad


def test_embedding_trains_with_torch_optim(ctx):
    """optimizer=None: .weight is a Parameter that torch.optim steps on the host; the next
    forward reads the stepped values."""
    e = ct.Embedding(30, 6, ctx=ctx, seed=5)
    ref = torch.nn.Embedding(30, 6)
    with torch.no_grad():
        ref.weight.copy_(e.weight)
    o1 = torch.optim.SGD(e.parameters(), lr=0.5)
    o2 = torch.optim.SGD(ref.parameters(), lr=0.5)
    ids = torch.tensor([[1, 2, 3], [3, 3, 29]])
    for _ in range(3):
        for m, o in ((e, o1), (ref, o2)):
            o.zero_grad()
            (m(ids) ** 2).sum().backward()
            o.step()
    close(e.weight, ref.weight, 1e-6, "weights after 3 SGD steps")
    assert torch.equal(e(ids), F.embedding(ids, e.weight.detach()))


# ------------------------------------------------------------------ fused optimizer steps

def _reference_step(kind, w, g, states, t, lr, eps, betas, wd):
    """One step of `kind` in float64 on the rows with a gradient (clembed.h's formulas)."""
    rows = (g != 0).any(dim=1).nonzero().reshape(-1)
    w, g = w.clone(), g.clone()
    for r in rows.tolist():
        gr = g[r] + wd * w[r] if wd else g[r]
        if kind == "sgd":
            w[r] -= lr * gr
        elif kind == "adagrad":
            states[0][r] += gr * gr
            w[r] -= lr * gr / (states[0][r].sqrt() + eps)
        elif kind == "rowwise_adagrad":
            states[0][r] += (gr * gr).mean()
            w[r] -= lr / (states[0][r].sqrt() + eps) * gr
        else:
            b1, b2 = betas
            states[0][r] += (gr - states[0][r]) * (1 - b1)
            states[1][r] += (gr * gr - states[1][r]) * (1 - b2)
            w[r] -= lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * states[0][r] / (states[1][r].sqrt() + eps)
    return w


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_bag_fused_step_matches_the_optimizer_by_hand(ctx, kind, mode):
    eps = {"sgd": 0.0, "adagrad": 1e-10, "rowwise_adagrad": 1e-8, "adam": 1e-8}[kind]
    lr, betas, wd = 0.05, (0.9, 0.99), 0.01
    bag = ct.EmbeddingBag(50, 8, mode=mode, padding_idx=2, optimizer=kind, lr=lr, eps=eps, betas=betas,
                          weight_decay=wd, ctx=ctx, seed=6)
    w = f64(bag.weight)
    states = [torch.zeros(50, 8 if kind != "rowwise_adagrad" else 1, dtype=torch.float64) for _ in range(2)]
    if kind == "rowwise_adagrad":
        states = [torch.zeros(50, dtype=torch.float64)]
    ids = torch.tensor([4, 2, 9, 9, 1, 30, 2, 49, 4])
    offsets = torch.tensor([0, 3, 3, 7])
    gen = torch.Generator().manual_seed(7)
    for t in range(1, 4):
        before = bag.weight.detach().clone()
        out = bag(ids, offsets)
        ref = torch.nn.EmbeddingBag.from_pretrained(before.clone(), freeze=False, mode=mode, padding_idx=2)
        close(out, ref(ids, offsets), 1e-6, "forward")
        gout = torch.randn(out.shape, generator=gen)
        out.backward(gout)
        assert bag.weight.grad is None
        wr = f64(before).requires_grad_()
        F.embedding_bag(ids, wr, offsets, mode=mode, padding_idx=2).backward(f64(gout))
        w = _reference_step(kind, f64(before), wr.grad, states, t, lr, eps, betas, wd)
        close(bag.weight, w, 2e-5, "%s step %d" % (kind, t))
        assert torch.equal(bag.weight[2], before[2]) and torch.equal(bag.weight[10], before[10])
    sd = bag.state_dict()
    assert int(sd["optimizer_step"]) == 3
    if kind != "sgd":
        close(sd["momentum1"].reshape(states[0].shape), states[0], 1e-4, "state")


def test_embedding_fused_step_and_state_dict_resume(ctx):
    """A run of 4 steps equals, bit for bit, 2 steps, a state_dict into a new module, 2 steps."""
    ids = torch.tensor([[1, 2, 3], [3, 4, 4]])

    def run(m, steps):
        for k in range(steps):
            (m(ids) * (k + 1)).pow(2).sum().backward()

    a = ct.Embedding(20, 4, optimizer="adam", lr=0.01, ctx=ctx, seed=8)
    b = ct.Embedding(20, 4, optimizer="adam", lr=0.01, ctx=ctx, seed=8)
    run(a, 2)
    run(b, 2)
    sd = b.state_dict()
    assert set(sd) == {"weight", "momentum1", "momentum2", "optimizer_step"}
    c = ct.Embedding(20, 4, optimizer="adam", lr=0.01, ctx=ctx, seed=99)
    res = c.load_state_dict(sd)
    assert not res.missing_keys and not res.unexpected_keys
    run(a, 2)
    run(c, 2)
    assert torch.equal(a.weight, c.weight)
    with pytest.raises(RuntimeError, match="weight"):
        c.load_state_dict({"weight": torch.zeros(3, 4), "momentum1": sd["momentum1"],
                           "momentum2": sd["momentum2"], "optimizer_step": sd["optimizer_step"]})


# ------------------------------------------------------------------ EmbeddingBag

@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_against_pytorch(ctx, mode):
    bag = ct.EmbeddingBag(40, 16, mode=mode, padding_idx=1, ctx=ctx, seed=9)
    ids = torch.tensor([5, 1, 7, 7, 39, 0, 12, 1])
    offsets = torch.tensor([0, 2, 2, 5, 8])     # an empty bag, and include_last_offset
    bag.include_last_offset = True
    out = bag(ids, offsets)
    w = f64(bag.weight).requires_grad_()
    ref = F.embedding_bag(ids, w, offsets, mode=mode, padding_idx=1, include_last_offset=True)
    close(out, ref, 1e-6, "forward")
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    out.backward(g)
    ref.backward(f64(g))
    close(bag.weight.grad, w.grad, 1e-6, "weight.grad")
    bag2 = ct.EmbeddingBag(40, 16, mode=mode, ctx=ctx, seed=9)
    x2 = torch.tensor([[1, 2, 3], [3, 3, 39]])
    close(bag2(x2), F.embedding_bag(x2, bag2.weight.detach(), mode=mode), 1e-6, "2-D input")


def test_per_sample_weights_get_their_gradient(ctx):
    bag = ct.EmbeddingBag(30, 8, mode="sum", ctx=ctx, seed=10)
    ids = torch.tensor([1, 2, 3, 4, 29])
    offsets = torch.tensor([0, 2])
    psw = torch.tensor([0.5, -1.0, 2.0, 0.25, 1.5], requires_grad=True)
    out = bag(ids, offsets, per_sample_weights=psw)
    w = f64(bag.weight).requires_grad_()
    p = f64(psw).requires_grad_()
    ref = F.embedding_bag(ids, w, offsets, mode="sum", per_sample_weights=p)
    close(out, ref, 1e-6, "weighted forward")
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(4))
    out.backward(g)
    ref.backward(f64(g))
    close(psw.grad, p.grad, 1e-6, "per_sample_weights.grad")
    close(bag.weight.grad, w.grad, 1e-6, "weight.grad")


def test_sparse_bag_grad_for_sparse_adam(ctx):
    bag = ct.EmbeddingBag(25, 4, mode="mean", sparse=True, ctx=ctx, seed=11)
    ids = torch.tensor([[0, 1, 1], [24, 5, 0]])
    bag(ids).sum().backward()
    assert bag.weight.grad.is_sparse
    w = f64(bag.weight).requires_grad_()
    F.embedding_bag(ids, w, mode="mean").sum().backward()
    close(bag.weight.grad.to_dense(), w.grad, 1e-6, "sparse")
    torch.optim.SparseAdam(list(bag.parameters()), lr=0.1).step()


# ------------------------------------------------------------------ EmbeddingBagCollection

class _KJT:
    """The parts of TorchRec's KeyedJaggedTensor the collection reads."""

    def __init__(self, keys, values, lengths, weights=None):
        self._k, self._v, self._l, self._w = keys, values, lengths, weights

    def keys(self):
        return self._k

    def values(self):
        return self._v

    def lengths(self):
        return self._l

    def weights_or_none(self):
        return self._w


def _batch(B=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    keys = ["b", "a", "c"]              # the batch's own order differs from the collection's
    rows = {"a": 100, "b": 100, "c": 60}
    lengths = torch.randint(0, 4, (len(keys) * B,), generator=g)
    values = torch.cat([torch.randint(0, rows[k], (int(lengths[i * B:(i + 1) * B].sum()),), generator=g)
                        for i, k in enumerate(keys)])
    return keys, values, lengths


def _reference(ebc, keys, values, lengths, weights=None):
    """Each feature through F.embedding_bag (float64), in the collection's order."""
    B = lengths.numel() // len(keys)
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
    ws = {n: f64(t.weight).requires_grad_() for n, t in ebc.embedding_bags.items()}
    outs = []
    for f, tname, pooling in ebc._layout:
        k = keys.index(f)
        lo = int(offs[k * B])
        ids = values[lo:int(offs[(k + 1) * B])]
        o = offs[k * B:(k + 1) * B] - lo
        psw = f64(weights[lo:lo + ids.numel()]) if weights is not None and pooling == "sum" else None
        outs.append(F.embedding_bag(ids, ws[tname], o, mode=pooling, per_sample_weights=psw))
    return torch.cat(outs, dim=1), ws


def test_collection_forward_grads_and_names(ctx):
    tables = [dict(name="t_ab", num_embeddings=100, embedding_dim=8, feature_names=["a", "b"], pooling="sum"),
              dict(name="t_c", num_embeddings=60, embedding_dim=4, feature_names=["c"], pooling="mean")]
    ebc = ct.EmbeddingBagCollection(tables, ctx=ctx, seed=12)
    assert ebc.feature_names == ["a", "b", "c"]
    assert set(ebc.state_dict()) == {"embedding_bags.t_ab.weight", "embedding_bags.t_c.weight"}
    keys, values, lengths = _batch()
    weights = torch.rand(values.numel(), generator=torch.Generator().manual_seed(5))
    out = ebc(_KJT(keys, values, lengths, weights))
    ref, ws = _reference(ebc, keys, values, lengths, weights)
    assert out.shape == (4, 20)
    close(out, ref, 1e-6, "pooled")
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(6))
    out.backward(g)
    ref.backward(f64(g))
    for n, t in ebc.embedding_bags.items():
        close(t.weight.grad, ws[n].grad, 1e-6, "grad of " + n)
    ebc.to_dict = True
    d = ebc(keys, values, offsets=torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)]))
    assert list(d) == ["a", "b", "c"] and d["c"].shape == (4, 4)
    close(torch.cat([d["a"], d["b"], d["c"]], 1), _reference(ebc, keys, values, lengths)[0], 1e-6, "dict")


@pytest.mark.parametrize("kind", ["rowwise_adagrad", "adam"])
def test_collection_fused_step(ctx, kind):
    tables = [dict(name="t_ab", num_embeddings=100, embedding_dim=8, feature_names=["a", "b"]),
              dict(name="t_c", num_embeddings=60, embedding_dim=4, feature_names=["c"], pooling="max")]
    ebc = ct.EmbeddingBagCollection(tables, optimizer=kind, lr=0.02, ctx=ctx, seed=13)
    keys, values, lengths = _batch(seed=1)
    before = {n: f64(t.weight) for n, t in ebc.embedding_bags.items()}
    out = ebc(keys, values, lengths)
    ref, ws = _reference(ebc, keys, values, lengths)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(8))
    out.backward(g)
    ref.backward(f64(g))
    eps = 1e-8
    for n, t in ebc.embedding_bags.items():
        assert t.weight.grad is None
        cols = before[n].shape[1]
        st = [torch.zeros(before[n].shape[0], dtype=torch.float64)] if kind == "rowwise_adagrad" else \
            [torch.zeros(before[n].shape[0], cols, dtype=torch.float64) for _ in range(2)]
        w = _reference_step(kind, before[n], ws[n].grad, st, 1, 0.02, eps, (0.9, 0.999), 0.0)
        close(t.weight, w, 2e-5, "table " + n)
    sd = ebc.state_dict()
    assert "embedding_bags.t_ab.momentum1" in sd and int(sd["embedding_bags.t_c.optimizer_step"]) == 1


def test_collection_errors(ctx):
    ebc = ct.EmbeddingBagCollection([dict(name="t", num_embeddings=10, embedding_dim=4)], ctx=ctx, seed=1)
    with pytest.raises(ValueError, match="keys"):
        ebc(["x"], torch.tensor([1]), torch.tensor([1]))
    with pytest.raises(ValueError, match="values"):
        ebc(["t"], torch.tensor([1, 2]), torch.tensor([1]))
    with pytest.raises(IndexError):
        ebc(["t"], torch.tensor([10]), torch.tensor([1]))
    with pytest.raises(ValueError, match="pooling"):
        ct.EmbeddingBagCollection([dict(name="t", num_embeddings=10, embedding_dim=4, pooling="median")], ctx=ctx)
    with pytest.raises(ValueError, match="lr"):
        ct.EmbeddingBagCollection([dict(name="t", num_embeddings=10, embedding_dim=4)], optimizer="adam", ctx=ctx)


# ------------------------------------------------------------------ BertEmbeddings

def _bert_reference(m, ids, types, offset=0):
    word, pos, typ = (f64(m.word_embeddings.weight).requires_grad_(), f64(m.position_embeddings.weight)
                      .requires_grad_(), f64(m.token_type_embeddings.weight).requires_grad_())
    lw, lb = f64(m.LayerNorm.weight).requires_grad_(), f64(m.LayerNorm.bias).requires_grad_()
    seq = ids.shape[-1]
    x = F.embedding(ids, word, padding_idx=m.pad_token_id) + pos[offset:offset + seq] + typ[types]
    return F.layer_norm(x, (x.shape[-1],), lw, lb, eps=m.layer_norm_eps), [word, pos, typ, lw, lb]


def test_bert_embeddings_against_layer_norm(ctx):
    m = ct.BertEmbeddings(120, 32, max_position_embeddings=16, hidden_dropout_prob=0.1, ctx=ctx, seed=14)
    assert list(m.state_dict()) == ["word_embeddings.weight", "position_embeddings.weight",
                                    "token_type_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias"]
    m.eval()
    ids = torch.tensor([[5, 0, 9, 119], [1, 2, 3, 0]])
    types = torch.tensor([[0, 0, 1, 1], [1, 0, 1, 0]])
    out = m(ids, types, past_key_values_length=3)
    ref, params = _bert_reference(m, ids, types, 3)
    close(out, ref, 1e-5, "forward")
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(9))
    out.backward(g)
    ref.backward(f64(g))
    mine = [m.word_embeddings.weight, m.position_embeddings.weight, m.token_type_embeddings.weight,
            m.LayerNorm.weight, m.LayerNorm.bias]
    for name, a, b in zip(["word", "position", "type", "ln weight", "ln bias"], mine, params):
        close(a.grad, b.grad, 1e-5, name)
    assert m.word_embeddings.weight.grad[0].abs().sum() == 0        # [PAD] gets no gradient
    m.train()                                                        # dropout: about 10 % zeros, the rest / 0.9
    y = m(ids.repeat(64, 1), types.repeat(64, 1))
    frac = (y == 0).double().mean().item()
    assert 0.07 < frac < 0.13, frac


def test_bert_embeddings_fused_sgd_equals_torch_sgd(ctx):
    a = ct.BertEmbeddings(50, 16, max_position_embeddings=8, hidden_dropout_prob=0.0, optimizer="sgd", lr=0.1,
                          ctx=ctx, seed=15)
    b = ct.BertEmbeddings(50, 16, max_position_embeddings=8, hidden_dropout_prob=0.0, ctx=ctx, seed=15)
    opt = torch.optim.SGD(b.parameters(), lr=0.1)
    ids = torch.tensor([[3, 4, 0, 7]])
    for _ in range(2):
        a(ids).pow(2).sum().backward()
        opt.zero_grad()
        b(ids).pow(2).sum().backward()
        opt.step()
    for k, v in b.state_dict().items():
        close(a.state_dict()[k], v, 1e-5, k)


# ------------------------------------------------------------------ memory and errors

def test_zero_copy_is_counted(ctx):
    br = ct.bridge(ctx)
    bag = ct.EmbeddingBag(1000, 16, mode="sum", optimizer="rowwise_adagrad", lr=0.1, ctx=ctx, seed=16)
    br.reset_counts()
    for _ in range(3):
        bag(torch.randint(0, 1000, (64, 8))).sum().backward()
    if br.zero_copy and br.shares:
        assert br.copies == 0 and br.copied_bytes == 0
    else:
        assert br.copies >= 3 * 3 and br.copied_bytes > 0     # ids, output, gradient, each step


def test_bad_input(ctx):
    e = ct.Embedding(10, 4, ctx=ctx, seed=1)
    with pytest.raises(IndexError):        # raised by the forward itself, the output never returned
        e(torch.tensor([10]))
    with pytest.raises(ValueError, match="integer ids"):
        e(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="optimizer"):
        ct.Embedding(10, 4, optimizer="lamb", lr=0.1, ctx=ctx)
    with pytest.raises(ValueError, match="sparse"):
        ct.Embedding(10, 4, optimizer="sgd", lr=0.1, sparse=True, ctx=ctx)
    with pytest.raises(ValueError, match="padding_idx"):
        ct.Embedding(10, 4, padding_idx=10, ctx=ctx)
    with pytest.raises(ValueError, match="mode"):
        ct.EmbeddingBag(10, 4, mode="median", ctx=ctx)
    with pytest.raises(ValueError, match="per_sample_weights"):
        ct.EmbeddingBag(10, 4, mode="mean", ctx=ctx)(torch.tensor([[1]]), per_sample_weights=torch.ones(1, 1))
    assert torch.equal(e(torch.tensor([9])), e.weight.detach()[9:10])    # usable after the errors


def test_modules_in_a_model_and_compile():
    """A module inside an nn.Sequential trains end to end; with PyTorch 2, torch.compile
    of the model runs (the clembed call is a graph break)."""
    c = clembed.Context()
    model = torch.nn.Sequential(ct.EmbeddingBag(100, 8, mode="mean", optimizer="adagrad", lr=0.1, ctx=c, seed=2),
                                torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model[1].parameters(), lr=0.1)
    x = torch.randint(0, 100, (16, 4), generator=torch.Generator().manual_seed(0))
    y = torch.rand(16, 1, generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    if hasattr(torch, "compile") and int(torch.__version__.split(".")[0]) >= 2:
        compiled = torch.compile(model)
        close(compiled(x), model(x), 1e-6, "compiled")


def test_dlrm_example_loss_curve_matches_pytorch(dlrm_pair):
    """examples/dlrm_torch.py: 100 steps with Adagrad, the clembed model's loss curve within
    1e-5 relative of the same model on nn.EmbeddingBag with torch.optim.Adagrad."""
    rows, curves, a, b = dlrm_pair(lambda ex, rows, init: ex.TorchPool(init), 100)
    assert curves[0][-10:].mean() < curves[0][:10].mean()          # it learns
    rel = np.abs(curves[0] - curves[1]) / np.abs(curves[1])
    assert rel.max() <= 1e-5, rel.max()
    for f in range(len(rows)):                                     # and the tables agree
        close(a.pool.ebc.embedding_bags["t%d" % f].weight, b.pool.bags[f].weight, 1e-4, "table %d" % f)


def test_bert_example_inside_a_transformers_encoder(example):
    """examples/bert_torch.py's swap: a small transformers BertModel with clembed's layer
    gives the encoder's outputs within 1e-5, and its losses follow the unchanged model's
    over SGD steps (dropout off)."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
    ex = example("bert_torch")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=500, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ref = transformers.BertModel(cfg)
    mine = ex.with_clembed_embeddings(ref, clembed.Context(), optimizer="sgd", lr=0.05)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 500, (3, 10), generator=g)
    types = torch.randint(0, 2, (3, 10), generator=g)
    for m in (ref, mine):
        m.eval()
    close(mine(ids, token_type_ids=types).last_hidden_state, ref(ids, token_type_ids=types).last_hidden_state,
          1e-5, "encoder output")
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05)
    opt_mine = torch.optim.SGD([p for n, p in mine.named_parameters() if not n.startswith("embeddings.")], lr=0.05)
    for _ in range(3):
        losses = []
        for m, o in ((ref, opt_ref), (mine, opt_mine)):
            o.zero_grad()
            loss = m(ids, token_type_ids=types).last_hidden_state.pow(2).mean()
            loss.backward()
            o.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-5 * abs(losses[0]), losses
    close(mine.embeddings.word_embeddings.weight, ref.embeddings.word_embeddings.weight, 1e-5, "word embeddings")


def test_signatures_follow_the_contract():
    """The positional order of API.md's "Python: PyTorch modules"."""
    import inspect

    def names(cls):
        return [p.name for p in inspect.signature(cls.__init__).parameters.values()
                if p.kind == p.POSITIONAL_OR_KEYWORD][1:]
    assert names(ct.Embedding)[:14] == ["num_embeddings", "embedding_dim", "padding_idx", "max_norm", "scale",
                                        "positions", "optimizer", "lr", "eps", "betas", "weight_decay", "dtype",
                                        "ctx", "seed"]
    assert names(ct.EmbeddingBag)[:4] == ["num_embeddings", "embedding_dim", "mode", "padding_idx"]
    assert names(ct.EmbeddingBagCollection)[:2] == ["tables", "optimizer"]
    assert names(ct.BertEmbeddings)[:7] == ["vocab_size", "hidden_size", "max_position_embeddings", "type_vocab_size",
                                            "layer_norm_eps", "hidden_dropout_prob", "optimizer"]


def test_stochastic_rounding_through_the_optimizer(ctx):
    # a BF16 table's fused step with a clembed.Optimizer(stochastic_rounding=True): the bits of
    # the same step through Context.optimizer_step on the same table (the rounding's Philox
    # words keyed by seed, step, row and column), and not round-to-nearest's
    w = torch.randn(20, 8).to(torch.bfloat16)
    ids = torch.tensor([1, 2, 3, 1])

    def module_steps(sr):
        opt = clembed.Optimizer(ctx, "sgd", 1e-3, stochastic_rounding=sr, seed=7)
        e = ct.Embedding.from_pretrained(w.clone(), freeze=False, optimizer=opt, ctx=ctx)
        for _ in range(3):
            e(ids).float().sum().backward()
        return e.weight.detach().float().numpy()

    def by_hand():
        t = ctx.matrix(w.float().numpy(), dtype="bf16")
        opt = clembed.Optimizer(ctx, "sgd", 1e-3, stochastic_rounding=True, seed=7)
        for _ in range(3):
            opt.step(t, np.ones((4, 8), np.float32), ids.numpy())
        return t.numpy()

    sr, rn = module_steps(True), module_steps(False)
    assert np.array_equal(sr.view(np.uint32), by_hand().view(np.uint32))
    assert not np.array_equal(sr, rn)


def test_stochastic_rounding_keyword(ctx):
    # stochastic_rounding=True with a string optimizer: the bits of the same steps through a
    # clembed.Optimizer(stochastic_rounding=True, seed=the module's seed), in Embedding,
    # EmbeddingBag and EmbeddingBagCollection; refused without a fused optimizer, beside an
    # Optimizer object (whose own setting it is) and when not a bool
    w = torch.randn(20, 8).to(torch.bfloat16)
    ids = torch.tensor([1, 2, 3, 1])

    def by_hand(seed, bag):
        t = ctx.matrix(w.float().numpy(), dtype="bf16")
        opt = clembed.Optimizer(ctx, "sgd", 1e-3, stochastic_rounding=True, seed=seed)
        for _ in range(3):
            if bag:
                opt.bag_step(t, np.ones((2, 8), np.float32), ids.numpy(), np.array([0, 2]), mode="sum")
            else:
                opt.step(t, np.ones((4, 8), np.float32), ids.numpy())
        return t.numpy()

    for seed in (None, 5):
        e = ct.Embedding.from_pretrained(w.clone(), freeze=False, optimizer="sgd", lr=1e-3, ctx=ctx, seed=seed,
                                         stochastic_rounding=True)
        b = ct.EmbeddingBag.from_pretrained(w.clone(), freeze=False, mode="sum", optimizer="sgd", lr=1e-3, ctx=ctx,
                                            seed=seed, stochastic_rounding=True)
        for _ in range(3):
            e(ids).float().sum().backward()
            b(ids, torch.tensor([0, 2])).float().sum().backward()
        want = by_hand(seed or 0, False)
        assert np.array_equal(e.weight.detach().float().numpy().view(np.uint32), want.view(np.uint32))
        assert np.array_equal(b.weight.detach().float().numpy().view(np.uint32),
                              by_hand(seed or 0, True).view(np.uint32))
        rn = ct.Embedding.from_pretrained(w.clone(), freeze=False, optimizer="sgd", lr=1e-3, ctx=ctx, seed=seed)
        for _ in range(3):
            rn(ids).float().sum().backward()
        assert not np.array_equal(rn.weight.detach().float().numpy(), want)
    c = ct.EmbeddingBagCollection([dict(name="t", num_embeddings=20, embedding_dim=8, feature_names=["f"],
                                        dtype=torch.bfloat16)], optimizer="sgd", lr=1e-3, ctx=ctx, seed=3,
                                  stochastic_rounding=True)
    assert c._opt.stochastic_rounding and c._opt.seed == 3
    with pytest.raises(clembed.InvalidArgumentError, match="stochastic_rounding"):
        ct.Embedding(20, 8, ctx=ctx, stochastic_rounding=True)
    with pytest.raises(clembed.InvalidArgumentError, match="stochastic_rounding"):
        ct.Embedding(20, 8, ctx=ctx, optimizer=clembed.Optimizer(ctx, "sgd", 1e-3), stochastic_rounding=True)
    with pytest.raises(clembed.Error, match="stochastic_rounding"):
        ct.EmbeddingBag(20, 8, ctx=ctx, optimizer="sgd", lr=1e-3, stochastic_rounding="yes")
