"""The package follows its ecosystem's conventions: type hints and py.typed, docstrings,
keyword-only options, NumPy dtypes, __array__, no silent conversion of float64 or integer
tables, and Embedding's dtype, from_pretrained and state_dict."""
import inspect
import os

import numpy as np
import pytest

import clembed
from conftest import need

rng = np.random.default_rng(31)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint16 if a.dtype == np.float16 else np.uint32)


def public_callables():
    """(name, object) of every public function, class, method and property."""
    out = []
    for name in clembed.__all__:
        obj = getattr(clembed, name)
        if inspect.isclass(obj):
            out.append((name, obj))
            # the class's own members and those of its bases in the package (Context is
            # composed of mixins), the most derived one of each name
            members = {}
            for klass in reversed(obj.__mro__):
                if klass.__module__.split(".")[0] == "clembed":
                    members.update(vars(klass))
            for attr, member in members.items():
                if attr.startswith("_") and attr not in ("__init__", "__array__"):
                    continue
                if isinstance(member, (classmethod, staticmethod)):
                    member = member.__func__
                if callable(member) or isinstance(member, property):
                    out.append(("%s.%s" % (name, attr), member))
        elif callable(obj):
            out.append((name, obj))
    for name in ("positional", "pca", "principal_components"):
        out.append(("plot." + name, getattr(clembed.plot, name)))
    return out


def test_typed_and_documented():
    pkg = os.path.dirname(clembed.__file__)
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    # a class's docstring documents its constructor (PEP 257)
    undocumented = [n for n, o in public_callables() if not n.endswith(".__init__")
                    and not (o.fget.__doc__ if isinstance(o, property) else o.__doc__)]
    assert not undocumented, "no docstring: %s" % undocumented
    unhinted = []
    for n, o in public_callables():
        f = o.fget if isinstance(o, property) else (o.__init__ if inspect.isclass(o) else o)
        if inspect.isclass(o) and issubclass(o, BaseException):
            continue
        if not inspect.isfunction(inspect.unwrap(f)):
            continue
        sig = inspect.signature(f)
        params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")
                  and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if sig.return_annotation is inspect.Signature.empty or any(p.annotation is p.empty for p in params):
            unhinted.append(n)
    assert not unhinted, "no type hints: %s" % unhinted


# The arguments the contract lists keep its order (positional or keyword); every option
# added beyond them is keyword-only.
@pytest.mark.parametrize("fn,positional", [
    (clembed.Context.embed, ["table", "ids", "scale", "positions", "base", "exponent", "layout", "offset",
                             "seq_len", "sequence_offsets", "padding_idx", "on_bad_id", "dropout", "seed",
                             "out_dtype", "out"]),
    (clembed.Context.lookup, ["table", "ids"]),
    (clembed.Context.backward, ["grad", "ids", "vocab", "scale", "padding_idx", "scale_grad_by_freq",
                                "deterministic", "out"]),
    (clembed.Context.sgd, ["table", "grad", "ids", "lr"]),
    (clembed.Context.positional, ["length", "dim", "first", "base", "exponent", "layout"]),
    (clembed.Context.rope, ["x", "head_dim", "positions", "offset", "inverse"]),
    (clembed.Context.rope_cache, ["length", "head_dim", "first"]),
    (clembed.Context.load, ["path", "name", "dtype"]),
    (clembed.Context.init, ["m", "kind"]),
    (clembed.Optimizer.__init__, ["ctx", "kind", "lr", "eps", "betas", "weight_decay"]),
    (clembed.Optimizer.step, ["table", "grad", "ids"]),
    (clembed.Embedding.__init__, ["num_embeddings", "embedding_dim", "padding_idx", "scale", "positions", "ctx",
                                  "seed", "optimizer"]),
    (clembed.Embedding.from_pretrained, ["embeddings", "freeze", "padding_idx"]),
    (clembed.Matrix.from_buffer, ["ctx", "buf", "rows", "cols", "dtype", "offset", "ld"]),
    (clembed.Context.embed_backward, ["grad", "table", "ids"]),
    (clembed.BertEmbeddings.__init__, ["vocab_size", "hidden_size", "max_position_embeddings", "type_vocab_size"]),
    (clembed.BertEmbeddings.forward, ["input_ids", "token_type_ids"]),
])
def test_options_beyond_the_contract_are_keyword_only(fn, positional):
    params = [p for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls")]
    got = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert got == positional
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params[len(positional):])


def m_own_dtype(a, name):
    """Matrix.numpy() reads the matrix's own dtype by default where NumPy has one (f32,
    f16), else float32 (docs/python.md, "Types")."""
    return a.dtype == (np.float16 if name == "f16" else np.float32)


def test_call_shapes_of_the_contract_still_work(ctx, tmp_path):
    W = rng.standard_normal((6, 4)).astype(np.float32)
    ids = np.array([[1, 2], [5, 0]])
    table = ctx.matrix(W, "f16")                                   # dtype positional
    assert ctx.empty(2, 3, "bf16").dtype == "bf16"
    out = ctx.embed(ctx.matrix(W), ids, scale="sqrt", positions="sinusoid", base=100.0, exponent="pair",
                    layout="interleaved", offset=0, seq_len=0, sequence_offsets=None, padding_idx=None,
                    on_bad_id="check", dropout=0.0, seed=0, out_dtype="f32", out=None)
    assert out.shape == (2, 2, 4)
    assert ctx.lookup(table, ids).shape == (2, 2, 4)
    assert ctx.positional(3, 4, 2).shape == (3, 4)
    g = ctx.backward(np.ones((2, 2, 4), np.float32), ids, 6, scale=1.0, padding_idx=None,
                     scale_grad_by_freq=False, deterministic=True, out=None)
    assert g.shape == (6, 4)
    t = ctx.matrix(W)
    ctx.sgd(t, np.ones((2, 2, 4), np.float32), ids, 0.5)
    ctx.init(ctx.empty(2, 2), "uniform", low=0.0, high=1.0, seed=3)
    np.save(tmp_path / "w.npy", W)
    assert ctx.load(tmp_path / "w.npy", None, "f16").dtype == "f16"
    clembed.Optimizer(ctx, "adam", 0.01, eps=None, betas=(0.9, 0.999), weight_decay=0.0).step(t, np.ones((2, 4), np.float32), [0, 1])
    e = clembed.Embedding(6, 4, None, scale=1.0, positions=None, ctx=ctx, seed=0, optimizer=None)
    assert e.forward(ids).shape == (2, 2, 4)
    # the same calls with the contract's arguments in its order, by position
    assert ctx.embed(ctx.matrix(W), ids, "sqrt", "sinusoid", 100.0, "pair", "interleaved", 0, 0, None, None,
                     "check", 0.0, 0, "f32", None).shape == (2, 2, 4)
    assert np.array_equal(ctx.embed(ctx.matrix(W), ids, 2.0).numpy(), 2.0 * W[ids])
    assert ctx.backward(np.ones((2, 2, 4), np.float32), ids, 6, 1.0, None, False, True, None).shape == (6, 4)
    assert ctx.positional(3, 4, 2, 100.0, "pair", "interleaved").shape == (3, 4)
    assert ctx.rope(np.ones((2, 8), np.float32), 8, None, 5, False).shape == (2, 8)
    clembed.Optimizer(ctx, "adam", 0.01, None, (0.9, 0.999), 0.0).step(t, np.ones((2, 4), np.float32), [0, 1])
    e2 = clembed.Embedding(6, 4, None, 1.0, None, ctx, 0, None)
    assert np.array_equal(e2.weight.numpy(), e.weight.numpy())
    assert m_own_dtype(table.numpy(), table.dtype) and table.numpy().dtype == np.float16


def test_numpy_dtypes_and_names(ctx):
    a = rng.standard_normal((5, 3)).astype(np.float32)
    for spelling in ("f16", "F16", "float16", "half", np.float16, np.dtype("float16")):
        assert ctx.matrix(a, dtype=spelling).dtype == "f16", spelling
        assert ctx.empty(1, 1, spelling).dtype == "f16"
    for spelling in ("f32", "float32", np.float32, np.dtype("float32"), "<f4"):
        assert ctx.matrix(a, dtype=spelling).dtype == "f32", spelling
    assert ctx.matrix(a, dtype="bfloat16").dtype == "bf16"
    out = ctx.lookup(a, [2, 0], out_dtype=np.float16)
    # numpy() with no dtype: the matrix's own where NumPy has one (docs/python.md, "Types")
    assert out.dtype == "f16" and out.numpy(None).dtype == np.float16 and out.numpy().dtype == np.float16
    assert out.numpy(np.float32).dtype == np.float32
    m = ctx.matrix(a)
    assert m.numpy("float16").dtype == np.float16 and m.numpy("f16").dtype == np.float16
    assert m.numpy(np.dtype("float64")).dtype == np.float64
    assert np.array_equal(m.numpy(np.float64), a.astype(np.float64))
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.matrix(a, dtype=np.float64)
    assert e.value.argument == "dtype" and "float64" in str(e.value)
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.lookup(a, [0], out_dtype="q8_0")                  # an output is a float dtype
    assert e.value.argument == "out_dtype"
    with pytest.raises(clembed.InvalidArgumentError):
        m.numpy(np.int32)
    # Ids take NumPy's spellings too
    assert clembed.Ids.from_buffer(ctx, ctx.ids(np.array([1, 2], np.int64)).buffer, 2, np.int64).dtype == "i64"


def test_array_protocol(ctx):
    a = rng.standard_normal((4, 3)).astype(np.float32)
    m = ctx.matrix(a)
    assert np.array_equal(np.asarray(m), a)
    assert np.asarray(m, dtype=np.float64).dtype == np.float64
    out = ctx.lookup(m, np.array([[3, 1]]))
    assert np.asarray(out).shape == (1, 2, 3)                  # the shape follows the ids
    assert np.array_equal(np.asarray(out)[0], a[[3, 1]])
    assert np.array_equal(np.asarray(ctx.ids(np.array([[4, 5]]))), [[4, 5]])
    assert float(np.sum(m)) == pytest.approx(float(a.sum()), rel=1e-6)


def test_float64_and_integer_tables_need_an_explicit_dtype(ctx):
    a64 = rng.standard_normal((4, 3))
    for bad, name in ((a64, "float64"), (np.arange(12).reshape(4, 3), "int64")):
        with pytest.raises(clembed.ArgumentTypeError) as e:
            ctx.matrix(bad)
        assert isinstance(e.value, TypeError) and e.value.argument == "array"
        assert name in str(e.value) and "dtype='f32'" in str(e.value)
        with pytest.raises(clembed.ArgumentTypeError) as e:
            clembed.embed(bad, [0])
        assert e.value.argument == "table"
        with pytest.raises(clembed.ArgumentTypeError) as e:
            ctx.embed(np.zeros((4, 3), np.float32), [0], positions=bad)
        assert e.value.argument == "positions"
        with pytest.raises(clembed.ArgumentTypeError) as e:
            ctx.backward(bad, [0, 1, 2, 3], 5)
        assert e.value.argument == "grad"
    # with dtype given, converted: float64 rounded once to the device dtype
    assert np.array_equal(ctx.matrix(a64, dtype="f32").numpy(), a64.astype(np.float32))
    assert np.array_equal(ctx.matrix(np.arange(12).reshape(4, 3), dtype="f32").numpy(),
                          np.arange(12, dtype=np.float32).reshape(4, 3))
    x = np.array([[1.0 + 2.0 ** -11 + 2.0 ** -30]])           # through float32 it would round to 1
    assert ctx.matrix(x, dtype="f16").numpy()[0, 0] == np.float16(1.0 + 2.0 ** -10) == x.astype(np.float16)[0, 0]
    # Python numbers are float32, as torch.tensor makes them
    assert ctx.matrix([[1.5, 2.0], [3.0, 4.0]]).dtype == "f32"
    assert np.array_equal(clembed.embed([[1.5, 2.0], [3.0, 4.0]], [1]), [[3.0, 4.0]])
    # writing into an existing matrix converts to its dtype, as NumPy's assignment does
    m = ctx.empty(4, 3)
    m.write(a64)
    assert np.array_equal(m.numpy(), a64.astype(np.float32))


def test_embedding_dtype(ctx):
    e = clembed.Embedding(10, 6, ctx=ctx, seed=9, dtype=np.float16, padding_idx=2)
    assert e.dtype == "f16" and e.weight.dtype == "f16"
    ref = ctx.init(ctx.empty(10, 6), "normal", seed=9).numpy().astype(np.float16)
    ref[2] = 0
    assert np.array_equal(bits(e.weight.numpy(None)), bits(ref))
    out = e.forward(np.array([[1, 2, 9]]))
    assert out.dtype == np.float16 and np.array_equal(bits(out), bits(ref[[[1, 2, 9]]]))
    e.backward(np.ones((1, 3, 6), np.float16))
    e.step(lr=0.5)
    w = ref.astype(np.float32)
    w[1] -= 0.5
    w[9] -= 0.5
    assert np.array_equal(bits(e.weight.numpy(None)), bits(w.astype(np.float16)))
    with pytest.raises(clembed.InvalidArgumentError) as err:
        clembed.Embedding(4, 32, ctx=ctx, dtype="q8_0")
    assert err.value.argument == "dtype"


def test_embedding_from_pretrained(ctx):
    W = rng.standard_normal((8, 4)).astype(np.float32)
    W[3] = 5.0
    e = clembed.Embedding.from_pretrained(W, padding_idx=3, ctx=ctx)
    assert e.freeze and e.dtype == "f32" and e.num_embeddings == 8 and e.embedding_dim == 4
    ids = np.array([3, 0, 7])
    got = e.forward(ids)
    ref = W[ids].copy()                                    # the padding id reads its stored row, as in
    assert np.array_equal(got, ref)                        # torch.nn.Embedding.from_pretrained ...
    assert np.array_equal(e.weight.numpy()[3], W[3])       # ... and its row is kept as given
    with pytest.raises(clembed.StateError):
        e.backward(np.ones((3, 4), np.float32))
    with pytest.raises(RuntimeError):
        e.step(lr=0.1)
    # a Matrix is used as the weight itself
    M = ctx.matrix(W)
    shared = clembed.Embedding.from_pretrained(M, freeze=False)
    assert shared.weight is M and shared.ctx is ctx
    shared.forward(np.array([0, 0]))
    shared.backward(np.ones((2, 4), np.float32))
    shared.step(lr=0.25)
    assert np.array_equal(M.numpy()[0], W[0] - np.float32(0.5))
    # a float64 array needs a dtype; a quantized table only frozen
    with pytest.raises(clembed.ArgumentTypeError):
        clembed.Embedding.from_pretrained(W.astype(np.float64), ctx=ctx)
    assert clembed.Embedding.from_pretrained(W.astype(np.float64), dtype="f32", ctx=ctx).dtype == "f32"
    Q = rng.standard_normal((4, 64)).astype(np.float32)
    q = clembed.Embedding.from_pretrained(Q, dtype="q8_0", ctx=ctx)
    assert q.dtype == "q8_0" and q.forward(np.array([1])).dtype == np.float32
    with pytest.raises(clembed.InvalidArgumentError) as err:
        clembed.Embedding.from_pretrained(Q, freeze=False, dtype="q8_0", ctx=ctx)
    assert err.value.argument == "freeze"


def test_embedding_state_dict(ctx):
    a = clembed.Embedding(7, 5, ctx=ctx, seed=1)
    b = clembed.Embedding(7, 5, ctx=ctx, seed=2)
    sd = a.state_dict()
    assert list(sd) == ["weight"] and sd["weight"].dtype == np.float32 and sd["weight"].shape == (7, 5)
    assert b.load_state_dict(sd) == ([], [])
    assert np.array_equal(b.weight.numpy(), a.weight.numpy())
    sd["weight"][0] = 1.0                                  # a copy: the layer is unchanged
    assert not np.array_equal(a.weight.numpy()[0], sd["weight"][0])
    with pytest.raises(clembed.InvalidArgumentError) as e:
        b.load_state_dict({"weight": np.zeros((7, 4), np.float32)})
    assert e.value.argument == "state_dict" and "(7, 4)" in str(e.value)
    with pytest.raises(clembed.InvalidArgumentError):
        b.load_state_dict({"weight": sd["weight"], "bias": np.zeros(5)})
    assert b.load_state_dict({"bias": 1}, strict=False) == (["weight"], ["bias"])
    # f16 and block-quantized weights round-trip bit for bit
    h = clembed.Embedding(3, 4, ctx=ctx, seed=5, dtype="f16")
    assert h.state_dict()["weight"].dtype == np.float16
    h2 = clembed.Embedding(3, 4, ctx=ctx, seed=6, dtype="f16")
    h2.load_state_dict(h.state_dict())
    assert np.array_equal(bits(h2.weight.numpy(None)), bits(h.weight.numpy(None)))
    Q = rng.standard_normal((2, 32)).astype(np.float32)
    q = clembed.Embedding.from_pretrained(Q, dtype="q4_0", ctx=ctx)
    blocks = q.state_dict()["weight"]
    assert blocks.dtype == np.uint8 and blocks.shape == (2, 18)
    q2 = clembed.Embedding.from_pretrained(np.zeros((2, 32), np.float32), dtype="q4_0", ctx=ctx)
    q2.load_state_dict({"weight": blocks})
    assert np.array_equal(q2.weight.raw(), blocks)
