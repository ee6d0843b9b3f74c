"""Bags of ids from Python: Context.embedding_bag (PyTorch's F.embedding_bag arguments),
Context.embedding_bags, Context.bag_backward, Context.renorm, Optimizer.bag_step and
bags_step, clembed.EmbeddingBag and Embedding's max_norm, against float32 NumPy
references in the contract's order, bit for bit. (PyTorch's own results are compared by
tools/compare/compare_bag_torch.py, outside the test suite.)"""
import ctypes
import ctypes.util

import numpy as np
import pytest

import clembed
from conftest import need

rng = np.random.default_rng(24)
F = np.float32
_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.fmaf.restype = ctypes.c_float
_libm.fmaf.argtypes = [ctypes.c_float, ctypes.c_float, ctypes.c_float]


def fma(a, b, c):
    """fmaf of the C library: a * b + c rounded once (what the contract's weighted SUM does)."""
    return F(_libm.fmaf(float(a), float(b), float(c)))


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint16 if a.dtype == np.float16 else np.uint32)


def bags_of(ids, offsets, include_last_offset=False):
    """[(lo, hi)] of PyTorch's convention."""
    ids = np.asarray(ids)
    if ids.ndim == 2:
        L = ids.shape[1]
        return [(b * L, b * L + L) for b in range(ids.shape[0])]
    o = list(np.asarray(offsets).reshape(-1))
    if not include_last_offset:
        o = o + [ids.size]
    return [(int(o[b]), int(o[b + 1])) for b in range(len(o) - 1)]


def ref_bag(W, ids, offsets, mode, weights=None, pad=None, include_last_offset=False):
    """(out float32, max_rows) in the contract's order."""
    flat = np.asarray(ids).reshape(-1)
    w = None if weights is None else np.asarray(weights, F).reshape(-1)
    bags = bags_of(ids, offsets, include_last_offset)
    out = np.zeros((len(bags), W.shape[1]), F)
    mr = np.full((len(bags), W.shape[1]), -1, np.int64)
    for b, (lo, hi) in enumerate(bags):
        taken = [j for j in range(lo, hi) if flat[j] != pad]
        for c in range(W.shape[1]):
            acc = F(0)
            for k, j in enumerate(taken):
                t = W[flat[j], c]
                if mode == "max":
                    if k == 0 or t > acc or (np.isnan(t) and not np.isnan(acc)):
                        acc, mr[b, c] = t, flat[j]
                elif w is not None:
                    acc = fma(w[j], t, acc)
                else:
                    acc = F(acc + t)
            if mode == "mean" and taken:
                acc = F(acc / F(len(taken)))
            out[b, c] = acc
    return out, mr


def ref_bag_grad(V, grad, ids, offsets, mode, weights=None, pad=None, max_rows=None, include_last_offset=False):
    """The table gradient folded from zero in ascending id position; touched rows."""
    flat = np.asarray(ids).reshape(-1)
    w = None if weights is None else np.asarray(weights, F).reshape(-1)
    G = np.zeros((V, grad.shape[1]), F)
    touched = np.zeros(V, bool)
    for b, (lo, hi) in enumerate(bags_of(ids, offsets, include_last_offset)):
        taken = [j for j in range(lo, hi) if flat[j] != pad]
        seen = set()
        for j in taken:
            v = flat[j]
            if mode == "max":
                here = max_rows[b] == v
                x = np.where(here & (v not in seen), grad[b], F(0)).astype(F)
                seen.add(v)
                touched[v] |= bool(here.any())
            elif mode == "mean":
                x = (grad[b] / F(len(taken))).astype(F)
                touched[v] = True
            else:
                x = (grad[b] * F(w[j])).astype(F) if w is not None else grad[b]
                touched[v] = True
            G[v] = G[v] + x
    return G, touched


def test_embedding_bag_modes(ctx):
    need("clembed_embedding_bag")
    W = rng.standard_normal((20, 7)).astype(F)
    ids = rng.integers(0, 20, size=17)
    offsets = np.array([0, 3, 3, 9, 12])           # bag 1 empty
    for mode in ("sum", "mean", "max"):
        for pad in (None, 4):
            ids[2] = 4
            out = ctx.embedding_bag(W, ids, offsets, mode=mode, padding_idx=pad)
            want, mr = ref_bag(W, ids, offsets, mode, pad=pad)
            assert out.shape == (5, 7)
            assert np.array_equal(bits(out.numpy()), bits(want)), (mode, pad)
            if mode == "max":
                assert np.array_equal(out.max_rows, mr)
    # include_last_offset, weights, 2-D ids, an F16 output, int32 offsets, an Ids of offsets
    csr = np.array([0, 5, 5, 17], np.int32)
    w = rng.standard_normal(17).astype(F)
    out = ctx.embedding_bag(W, ids, csr, mode="sum", per_sample_weights=w, include_last_offset=True)
    assert np.array_equal(bits(out.numpy()), bits(ref_bag(W, ids, csr, "sum", w, include_last_offset=True)[0]))
    out = ctx.embedding_bag(W, ctx.ids(ids), ctx.ids(csr), mode="mean", include_last_offset=True, out_dtype="f16")
    want = ref_bag(W, ids, csr, "mean", include_last_offset=True)[0]
    assert out.numpy(None).dtype == np.float16
    assert np.array_equal(bits(out.numpy(None)), bits(want.astype(np.float16)))
    ids2 = rng.integers(0, 20, size=(6, 3))
    W32 = rng.standard_normal((20, 32)).astype(F)
    out = ctx.embedding_bag(ctx.matrix(W32, "q8_0"), ids2, mode="sum")
    Wq = ctx.matrix(W32, "q8_0").numpy()
    assert np.array_equal(bits(out.numpy()), bits(ref_bag(Wq, ids2, None, "sum")[0]))


@pytest.mark.parametrize("fn,positional", [
    (clembed.Context.embedding_bag, ["table", "ids", "offsets", "mode", "per_sample_weights", "padding_idx",
                                     "include_last_offset", "on_bad_id", "out_dtype"]),
    (clembed.Context.embedding_bags, ["features", "out_dtype"]),
    (clembed.Context.bag_backward, ["grad", "ids", "offsets"]),
    (clembed.Context.renorm, ["table", "ids", "max_norm", "norm_type"]),
    (clembed.Optimizer.bag_step, ["table", "grad", "ids", "offsets"]),
    (clembed.Optimizer.bags_step, ["features", "grad"]),
    (clembed.EmbeddingBag.__init__, ["num_embeddings", "embedding_dim", "mode", "padding_idx", "max_norm",
                                     "norm_type", "ctx", "seed", "optimizer"]),
    (clembed.EmbeddingBag.forward, ["ids", "offsets", "per_sample_weights"]),
])
def test_arguments_in_the_contract_order(fn, positional):
    """The contract's arguments keep their order, positional or keyword; what clembed adds is keyword-only."""
    import inspect
    params = [p for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls")]
    got = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert got == positional
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params[len(positional):])


def test_bad_offsets_and_arguments(ctx):
    need("clembed_embedding_bag")
    W = rng.standard_normal((5, 3)).astype(F)
    out = ctx.embedding_bag(W, [1, 2, 3, 4], [0, 3, 2])      # decreasing
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        out.numpy()
    assert e.value.argument == "offsets" and e.value.index == 2 and e.value.value == 2
    assert e.value.call == "Context.embedding_bag"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embedding_bag(W, [1, 2, 3])                       # 1-D ids, no offsets
    assert e.value.argument == "offsets"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embedding_bag(W, [[1, 2]], [0])                   # 2-D ids with offsets
    assert e.value.argument == "offsets"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embedding_bag(W, [1, 2], [0], mode="median")
    assert e.value.argument == "mode"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embedding_bag(W, [1, 2], [0], mode="mean", per_sample_weights=[1.0, 2.0])
    assert e.value.argument == "per_sample_weights"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embedding_bag(W, [1, 2], [0], mode="sum", per_sample_weights=[1.0])
    assert e.value.argument == "per_sample_weights"
    ctx.embedding_bag(W, [1, 9], [0], mode="sum")
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        ctx.finish()
    assert e.value.argument == "ids" and e.value.index == 1 and e.value.value == 9


def test_embedding_bags_equal_single_calls(ctx):
    need("clembed_embedding_bags")
    A = ctx.matrix(rng.standard_normal((30, 16)).astype(F))
    B = ctx.matrix(rng.standard_normal((12, 64)).astype(F), "q8_0")
    feats = [dict(table=A, ids=rng.integers(0, 30, size=(8, 4)), mode="sum"),
             dict(table=B, ids=rng.integers(0, 12, size=21), offsets=[0, 2, 2, 5, 9, 12, 12, 20], mode="mean"),
             dict(table=A, ids=rng.integers(0, 30, size=(8, 2)), mode="max")]
    out = ctx.embedding_bags(feats)
    assert out.shape == (8, 16 + 64 + 16)
    got = out.numpy()
    col = 0
    for f in feats:
        one = ctx.embedding_bag(f["table"], f["ids"], f.get("offsets"), mode=f["mode"]).numpy()
        assert np.array_equal(bits(got[:, col:col + one.shape[1]]), bits(one))
        col += one.shape[1]
    assert out.max_rows_ids[0] is None and out.max_rows_ids[2] is not None
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embedding_bags([dict(table=A, ids=np.zeros((3, 2), int)), dict(table=A, ids=np.zeros((4, 2), int))])
    assert e.value.argument == "features"


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_bag_backward(ctx, mode):
    need("clembed_bag_backward")
    V, D = 15, 6
    W = rng.standard_normal((V, D)).astype(F)
    ids = rng.integers(0, V, size=25)
    ids[3:9] = 2                                              # repeats inside one bag
    offsets = np.array([0, 2, 10, 10, 18])
    grad = rng.standard_normal((5, D)).astype(F)
    w = rng.standard_normal(25).astype(F) if mode == "sum" else None
    fwd = ctx.embedding_bag(W, ids, offsets, mode=mode, per_sample_weights=w)
    mr = getattr(fwd, "max_rows", None)
    table = ctx.matrix(W)
    g = ctx.bag_backward(grad, ids, offsets, table=table, mode=mode, per_sample_weights=w, max_rows=mr,
                         grad_weights=mode == "sum")
    G, _ = ref_bag_grad(V, grad, ids, offsets, mode, w, max_rows=mr)
    assert np.array_equal(bits(g.numpy()), bits(G))
    if mode == "sum":
        gw = np.zeros(25, F)
        for b, (lo, hi) in enumerate(bags_of(ids, offsets)):
            for j in range(lo, hi):
                acc = F(0)
                for c in range(D):
                    acc = F(acc + F(grad[b, c] * W[ids[j], c]))
                gw[j] = acc
        assert np.array_equal(bits(g.grad_weights), bits(gw))


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
def test_bag_step(ctx, kind):
    need("clembed_bag_optimizer_step")
    V, D = 12, 5
    W = rng.standard_normal((V, D)).astype(F)
    ids = rng.integers(0, V, size=(6, 3))
    grad = rng.standard_normal((6, D)).astype(F)
    table = ctx.matrix(W)
    opt = clembed.Optimizer(ctx, kind, 0.1)
    opt.bag_step(table, grad, ids, mode="mean")
    G, touched = ref_bag_grad(V, grad, ids, None, "mean")
    got = table.numpy()
    assert np.array_equal(bits(got[~touched]), bits(W[~touched]))    # untouched rows keep every bit
    if kind == "sgd":
        assert np.array_equal(bits(got[touched]), bits((W - F(0.1) * G)[touched]))
    else:
        assert not np.array_equal(got[touched], W[touched])
        state, _, t = opt.state(table)
        assert t == 1 and state is not None


def test_bags_step_shared_table(ctx):
    need("clembed_bags_optimizer_step")
    V, D = 10, 4
    W = rng.standard_normal((V, D)).astype(F)
    A = ctx.matrix(W)
    ids1, ids2 = rng.integers(0, V, size=(3, 2)), rng.integers(0, V, size=(3, 4))
    grad = rng.standard_normal((3, 2 * D)).astype(F)
    opt = clembed.Optimizer(ctx, "sgd", 0.5)
    opt.bags_step([dict(table=A, ids=ids1, mode="sum"), dict(table=A, ids=ids2, mode="sum")], grad)
    G, _ = ref_bag_grad(V, grad[:, :D], ids1, None, "sum")
    G2 = G.copy()
    for b, (lo, hi) in enumerate(bags_of(ids2, None)):     # the second feature's contributions after the first's
        for j in range(lo, hi):
            G2[ids2.reshape(-1)[j]] = G2[ids2.reshape(-1)[j]] + grad[b, D:]
    touched = np.zeros(V, bool)
    touched[ids1.reshape(-1)] = touched[ids2.reshape(-1)] = True
    want = np.where(touched[:, None], W - F(0.5) * G2, W)
    assert np.array_equal(bits(A.numpy()), bits(want))


def test_context_bag_optimizer_steps(ctx):
    """Context.bag_optimizer_step and bags_optimizer_step, the caller keeping the states,
    give the bits of Optimizer.bag_step and bags_step (which stand on them)."""
    need("clembed_bags_optimizer_step")
    V, D = 10, 4
    W = rng.standard_normal((V, D)).astype(F)
    ids = rng.integers(0, V, size=(3, 2))
    grad = rng.standard_normal((3, D)).astype(F)
    a, b = ctx.matrix(W), ctx.matrix(W)
    opt = clembed.Optimizer(ctx, "rowwise_adagrad", 0.5)
    opt.bag_step(a, grad, ids, mode="sum")
    state = ctx.empty(V, 1)
    assert ctx.bag_optimizer_step(b, grad, ids, mode="sum", kind="rowwise_adagrad", lr=0.5, state=state,
                                  eps=1e-8) is b
    assert np.array_equal(bits(b.numpy()), bits(a.numpy()))
    assert np.array_equal(bits(state.numpy()), bits(opt.state(a)[0].numpy()))
    # two features on one table, then one of its own
    ids2 = rng.integers(0, V, size=(3, 3))
    grad2 = rng.standard_normal((3, 3 * D)).astype(F)
    c, d, e_, f_ = (ctx.matrix(W) for _ in range(4))
    max_rows = ctx.embedding_bag(W, ids2, mode="max").max_rows

    def feats(t, u):
        return [dict(table=t, ids=ids, mode="sum"), dict(table=t, ids=ids2, mode="mean"),
                dict(table=u, ids=ids2, mode="max", max_rows=max_rows)]

    adam = clembed.Optimizer(ctx, "adam", 0.01)
    adam.bags_step(feats(c, e_), grad2)
    m, v, m2, v2 = (ctx.empty(V, D) for _ in range(4))
    one = dict(kind="adam", lr=0.01, state=m, state2=v, step=1)
    ctx.bags_optimizer_step(feats(d, f_), grad2, [one, one, dict(kind="adam", lr=0.01, state=m2, state2=v2)])
    assert np.array_equal(bits(d.numpy()), bits(c.numpy()))
    assert np.array_equal(bits(f_.numpy()), bits(e_.numpy()))
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.bags_optimizer_step(feats(d, f_), grad2, [one, one])
    assert e.value.argument == "optimizers" and e.value.call == "Context.bags_optimizer_step"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.bags_optimizer_step(feats(d, f_), grad2, [one, one, dict(kind="adam", rate=0.1)])
    assert e.value.argument == "optimizers" and "rate" in str(e.value)


def test_renorm(ctx):
    need("clembed_renorm")
    W = (rng.standard_normal((8, 6)) * 3).astype(F)
    ids = [1, 3, 3, 6]
    for p in (1.0, 2.0, float("inf")):
        t = ctx.matrix(W)
        ctx.renorm(t, ids, 2.0, p)
        want = W.copy()
        for v in sorted(set(ids)):
            a = np.abs(W[v])
            if p == 1.0:
                s = F(0)
                for x in a:
                    s = F(s + x)
                norm = s
            elif p == 2.0:
                s = F(0)
                for x in a:
                    s = F(s + F(x * x))
                norm = F(np.sqrt(s))
            else:
                norm = a.max()
            if norm > F(2.0):
                want[v] = W[v] * F(F(2.0) / F(norm + F(1e-7)))
        assert np.array_equal(bits(t.numpy()), bits(want)), p
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.renorm(ctx.matrix(W), ids, -1.0)
    assert e.value.argument == "max_norm"


def test_embedding_bag_layer_trains(ctx):
    need("clembed_bag_optimizer_step")
    layer = clembed.EmbeddingBag(40, 8, mode="mean", padding_idx=0, ctx=ctx, seed=3,
                                 optimizer=clembed.Optimizer(ctx, "rowwise_adagrad", 0.5))
    assert np.array_equal(layer.weight.numpy()[0], np.zeros(8, F))
    target = rng.standard_normal((16, 8)).astype(F)
    ids = rng.integers(0, 40, size=(16, 5))
    first = None
    for step in range(30):
        out = layer.forward(ids)
        diff = out - target
        loss = float(np.mean(diff * diff))
        first = loss if first is None else first
        layer.backward(2 * diff / diff.size)
        layer.step()
    assert loss < 0.5 * first
    assert np.array_equal(layer.weight.numpy()[0], np.zeros(8, F))   # the padding row is never stepped
    # two forward/backward pairs make one step; .grad is their table gradient
    l2 = clembed.EmbeddingBag(10, 3, mode="sum", ctx=ctx, seed=1)
    x1, x2 = np.array([1, 2, 3]), np.array([3, 4])
    l2.forward(x1, [0, 1])
    l2.backward(np.ones((2, 3), F))
    l2.forward(x2, [0])
    l2.backward(2 * np.ones((1, 3), F))
    G = np.zeros((10, 3), F)
    for v, g in ((1, 1), (2, 1), (3, 1), (3, 2), (4, 2)):
        G[v] += g
    assert np.array_equal(l2.grad, G)
    w0 = l2.weight.numpy()
    l2.step(lr=0.25)
    assert np.array_equal(bits(l2.weight.numpy()), bits(w0 - F(0.25) * G))
    with pytest.raises(clembed.StateError):
        clembed.EmbeddingBag(4, 2, ctx=ctx).backward(np.zeros((1, 2), F))


def test_max_norm(ctx):
    need("clembed_renorm")
    e = clembed.Embedding(6, 4, ctx=ctx, seed=5, max_norm=0.5)
    before = e.weight.numpy()
    out = e.forward(np.array([1, 1, 4]))
    after = e.weight.numpy()
    assert np.all(np.linalg.norm(after[[1, 4]], axis=1) <= 0.5 + 1e-6)
    assert np.array_equal(after[[0, 2, 3, 5]], before[[0, 2, 3, 5]])
    assert np.array_equal(out, after[[1, 1, 4]])
    b = clembed.EmbeddingBag(6, 4, ctx=ctx, seed=5, max_norm=0.5, norm_type=1.0, mode="sum")
    b.forward(np.array([[2, 3]]))
    assert np.all(np.abs(b.weight.numpy()[[2, 3]]).sum(axis=1) <= 0.5 + 1e-6)
