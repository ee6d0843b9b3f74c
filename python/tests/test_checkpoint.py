"""clembed.save / clembed.load and Optimizer.state_dict / load_state_dict.

A run of K steps equals, bit for bit, k steps, a save, a load into fresh layers and
optimizers and K - k steps; the file is a .safetensors file whose header and CRC-32s are
checked here with json and a plain CRC-32C (and by the safetensors package where it is installed);
bad files and mismatched objects are refused with nothing modified."""
import json
import os
import struct

import numpy as np
import pytest

import clembed
from conftest import need

rng = np.random.default_rng(11)
V, D, B = 50, 8, 12


def batch(step):
    r = np.random.default_rng(1000 + step)
    ids = r.integers(0, V, size=B)
    grad = r.standard_normal((B, D)).astype(np.float32)
    offsets = np.arange(0, B + 1, 3)
    bgrad = r.standard_normal((len(offsets) - 1, D)).astype(np.float32)
    return ids, grad, offsets, bgrad


def layers(ctx, kind):
    emb = clembed.Embedding(V, D, ctx=ctx, seed=5, optimizer=clembed.Optimizer(ctx, kind, 0.05), dtype="bf16")
    bag = clembed.EmbeddingBag(V, D, mode="sum", ctx=ctx, seed=6, optimizer=clembed.Optimizer(ctx, kind, 0.03))
    return emb, bag


def train(emb, bag, first, last):
    for s in range(first, last + 1):
        ids, grad, offsets, bgrad = batch(s)
        emb.forward(ids)
        emb.backward(grad)
        emb.step()
        bag.forward(ids, offsets[:-1])
        bag.backward(bgrad)
        bag.step()


def crc32c(data):
    """CRC-32C (Castagnoli, RFC 3720's: reflected polynomial 0x82F63B78), a byte-wise table."""
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 255] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def test_crc32c_reference():
    assert crc32c(b"123456789") == 0xE3069283   # the check value of CRC-32C (RFC 3720)


def read_header(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:], 8 + n


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
def test_resume_is_exact(ctx, tmp_path, kind):
    need("clembed_checkpoint_save")
    K, k = 6, 2
    a_emb, a_bag = layers(ctx, kind)
    train(a_emb, a_bag, 1, K)
    b_emb, b_bag = layers(ctx, kind)
    train(b_emb, b_bag, 1, k)
    path = tmp_path / "run.safetensors"
    clembed.save(path, {"emb": b_emb, "bag": b_bag}, metadata={"epoch": 3, "seed": "x"})
    c_emb, c_bag = layers(ctx, kind)
    c_emb.weight.write(np.zeros((V, D), np.float32))   # nothing of the fresh layers survives the load
    meta = clembed.load(path, {"emb": c_emb, "bag": c_bag})
    assert meta == {"epoch": "3", "seed": "x"}
    assert c_emb.optimizer.state(c_emb.weight)[2] == k
    train(c_emb, c_bag, k + 1, K)
    for a, c in ((a_emb, c_emb), (a_bag, c_bag)):
        assert np.array_equal(a.weight.raw(), c.weight.raw())
        sa, sc = a.optimizer.state(a.weight), c.optimizer.state(c.weight)
        assert sa[2] == sc[2] == K
        for x, y in zip(sa[:2], sc[:2]):
            assert (x is None) == (y is None)
            if x is not None:
                assert np.array_equal(x.numpy(None).view(np.uint32), y.numpy(None).view(np.uint32))


def test_the_file_as_safetensors(ctx, tmp_path):
    need("clembed_checkpoint_save")
    emb, bag = layers(ctx, "adam")
    train(emb, bag, 1, 2)
    q = ctx.matrix(rng.standard_normal((4, 64)).astype(np.float32), "q8_0")
    path = tmp_path / "c.safetensors"
    clembed.save(path, {"emb": emb, "q": q}, metadata={"note": "caf\u00e9"})
    header, data, start = read_header(path)
    assert start % 64 == 0
    meta = header.pop("__metadata__")
    assert meta["clembed.checkpoint"] == "1" and meta["note"] == "caf\u00e9"
    assert meta["emb.weight.optimizer"] == "adam" and meta["emb.weight.step"] == "2"
    assert list(header) == ["emb.weight", "q", "emb.weight.momentum1", "emb.weight.momentum2"]
    assert header["emb.weight"]["dtype"] == "BF16" and header["emb.weight"]["shape"] == [V, D]
    assert header["q"]["dtype"] == "U8" and header["q"]["shape"] == [4, 2 * 34]
    for name, t in header.items():
        b, e = t["data_offsets"]
        entry = meta["clembed.tensor." + name]
        assert entry.endswith("crc32c=%08x" % crc32c(data[b:e])), (name, entry)
    assert np.array_equal(np.frombuffer(data[slice(*header["q"]["data_offsets"])], np.uint8).reshape(4, 68),
                          q.raw())
    w = np.frombuffer(data[slice(*header["emb.weight.momentum2"]["data_offsets"])], np.float32).reshape(V, D)
    assert np.array_equal(w, emb.optimizer.state(emb.weight)[1].numpy(None))
    assert clembed.inspect(path)[0] == dict(name="emb.weight", dtype="bf16", shape=(V, D), bytes=V * D * 2)
    try:
        from safetensors import safe_open
    except ImportError:
        return
    with safe_open(str(path), "np") as f:   # the reference reader (NumPy has no bfloat16: F32 and U8 tensors)
        assert f.metadata() == meta
        assert np.array_equal(f.get_tensor("emb.weight.momentum1"), emb.optimizer.state(emb.weight)[0].numpy(None))
        assert np.array_equal(f.get_tensor("q"), q.raw())


def test_bert_and_matrices_together(ctx, tmp_path):
    need("clembed_checkpoint_save")
    bert = clembed.BertEmbeddings(30, 8, max_position_embeddings=16, type_vocab_size=2, ctx=ctx, optimizer="adagrad")
    m = ctx.matrix(rng.standard_normal((5, 3)).astype(np.float32))
    opt = clembed.Optimizer(ctx, "rowwise_adagrad", 0.1)
    opt.step(m, rng.standard_normal((2, 3)).astype(np.float32), np.array([1, 4]))
    path = tmp_path / "b.safetensors"
    clembed.save(path, {"bert": bert, "m": m, "opt": opt})
    names = [t["name"] for t in clembed.inspect(path)]
    assert "bert.word_embeddings.weight" in names and "m.momentum1" in names
    bert2 = clembed.BertEmbeddings(30, 8, max_position_embeddings=16, type_vocab_size=2, ctx=ctx,
                                   optimizer="adagrad", seed=9)
    m2 = ctx.matrix(np.zeros((5, 3), np.float32))
    opt2 = clembed.Optimizer(ctx, "rowwise_adagrad", 0.1)
    assert clembed.load(path, {"bert": bert2, "m": m2, "opt": opt2}) == {}
    for k, a in bert.state_dict().items():
        assert np.array_equal(a, bert2.state_dict()[k]), k
    assert np.array_equal(m.numpy(None), m2.numpy(None))
    assert np.array_equal(opt.state(m)[0].numpy(None), opt2.state(m2)[0].numpy(None)) and opt2.state(m2)[2] == 1
    # an optimizer's state of a table that is not named is refused
    with pytest.raises(clembed.InvalidArgumentError, match="not in objects"):
        clembed.save(path, {"opt": opt})


def test_refusals_modify_nothing(ctx, tmp_path):
    need("clembed_checkpoint_save")
    emb, bag = layers(ctx, "adagrad")
    train(emb, bag, 1, 1)
    path = tmp_path / "r.safetensors"
    clembed.save(path, {"emb": emb})
    other = clembed.Embedding(V + 1, D, ctx=ctx, dtype="bf16", optimizer=clembed.Optimizer(ctx, "adagrad", 0.1))
    before = other.weight.raw().copy()
    with pytest.raises(clembed.InvalidArgumentError, match="51 x 8 bf16"):
        clembed.load(path, {"emb": other})
    assert np.array_equal(before, other.weight.raw())
    with pytest.raises(clembed.InvalidArgumentError, match="no tensor 'x.weight'"):
        clembed.load(path, {"x": other})
    wrong_kind = clembed.Embedding(V, D, ctx=ctx, dtype="bf16", optimizer=clembed.Optimizer(ctx, "adam", 0.1))
    with pytest.raises(clembed.InvalidArgumentError, match="'adagrad'"):
        clembed.load(path, {"emb": wrong_kind})
    # one flipped bit in the data
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 1
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(raw))
    fresh, _ = layers(ctx, "adagrad")
    before = fresh.weight.raw().copy()
    with pytest.raises(clembed.InvalidArgumentError, match="is damaged"):
        clembed.load(bad, {"emb": fresh})
    assert np.array_equal(before, fresh.weight.raw())
    bad.write_bytes(bytes(raw[:-10]))
    with pytest.raises(clembed.InvalidArgumentError):
        clembed.load(bad, {"emb": fresh})
    assert np.array_equal(before, fresh.weight.raw())
    # saving: a missing folder, a reserved key, a key that is an optimizer entry
    with pytest.raises(clembed.FileError, match="no-such-folder") as e:
        clembed.save(tmp_path / "no-such-folder" / "x.safetensors", {"emb": emb})
    assert isinstance(e.value, OSError) and e.value.status == clembed.ERR_FILE
    with pytest.raises(clembed.InvalidArgumentError, match="clembed's own"):
        clembed.save(path, {"emb": emb}, metadata={"clembed.x": 1})
    with pytest.raises(clembed.InvalidArgumentError, match="optimizer entry"):
        clembed.save(path, {"emb": emb}, metadata={"emb.weight.step": 1})
    assert [p.name for p in tmp_path.iterdir() if "clembed-tmp" in p.name] == []


def test_optimizer_state_dict(ctx):
    W = rng.standard_normal((V, D)).astype(np.float32)
    a, b = ctx.matrix(W), ctx.matrix(W)
    o1 = clembed.Optimizer(ctx, "adam", 0.02)
    for s in range(1, 4):
        ids, grad, _, _ = batch(s)
        o1.step(a, grad, ids)
    sd = o1.state_dict()
    assert sd["kind"] == "adam" and sd["state"][0]["step"] == 3 and sd["state"][0]["momentum2"].shape == (V, D)
    b.write(a.numpy(None))
    o2 = clembed.Optimizer(ctx, "adam", 0.5)
    o2.load_state_dict(sd, [b])
    assert o2.lr == pytest.approx(0.02) and o2.state(b)[2] == 3
    for s in range(4, 6):
        ids, grad, _, _ = batch(s)
        o1.step(a, grad, ids)
        o2.step(b, grad, ids)
    assert np.array_equal(a.numpy(None), b.numpy(None))
    with pytest.raises(clembed.InvalidArgumentError, match="'adam' optimizer, this one is 'sgd'"):
        clembed.Optimizer(ctx, "sgd", 0.1).load_state_dict(sd, [b])
    with pytest.raises(clembed.InvalidArgumentError, match="1 tables' states for 0 tables"):
        clembed.Optimizer(ctx, "adam", 0.1).load_state_dict(sd)


def test_resume_with_stochastic_rounding(ctx, tmp_path):
    """A bf16 table stepped with stochastic rounding resumes exactly (the rounding's bits
    depend on the seed and the step count, both restored); an Optimizer that rounds
    otherwise is refused."""
    need("clembed_checkpoint_save")

    def layer():
        opt = clembed.Optimizer(ctx, "adagrad", 0.05, stochastic_rounding=True, seed=42)
        return clembed.Embedding(V, D, ctx=ctx, seed=5, optimizer=opt, dtype="bf16")

    def run(emb, first, last):
        for s in range(first, last + 1):
            ids, grad, _, _ = batch(s)
            emb.forward(ids)
            emb.backward(grad * np.float32(1e-3))   # small updates: the rounding decides them
            emb.step()

    a, b, c = layer(), layer(), layer()
    run(a, 1, 5)
    run(b, 1, 2)
    path = tmp_path / "sr.safetensors"
    clembed.save(path, {"emb": b})
    assert clembed.metadata(path)["emb.weight.rounding_seed"] == "42"
    clembed.load(path, {"emb": c})
    run(c, 3, 5)
    assert np.array_equal(a.weight.raw(), c.weight.raw())
    nearest = clembed.Embedding(V, D, ctx=ctx, dtype="bf16", optimizer=clembed.Optimizer(ctx, "adagrad", 0.05))
    with pytest.raises(clembed.InvalidArgumentError, match="stochastically with seed 42"):
        clembed.load(path, {"emb": nearest})


def test_load_restores_the_optimizer_exactly(ctx, tmp_path):
    """A file saved before any step, loaded into a layer whose optimizer has stepped, leaves
    it without state (as saved); a refused load leaves the optimizer as it was."""
    need("clembed_checkpoint_save")
    emb, _ = layers(ctx, "adam")
    path = tmp_path / "fresh.safetensors"
    clembed.save(path, {"emb": emb})                    # no step yet: no optimizer entries
    train(emb, layers(ctx, "adam")[1], 1, 2)
    assert emb.optimizer.state(emb.weight)[2] == 2
    clembed.load(path, {"emb": emb})
    assert emb.optimizer.state(emb.weight) == (None, None, 0)
    # a refused load (another shape) makes no state in the optimizer
    other = clembed.Embedding(V + 1, D, ctx=ctx, dtype="bf16", optimizer=clembed.Optimizer(ctx, "adam", 0.1))
    stepped = tmp_path / "stepped.safetensors"
    a_emb, a_bag = layers(ctx, "adam")
    train(a_emb, a_bag, 1, 1)
    clembed.save(stepped, {"emb": a_emb})
    with pytest.raises(clembed.InvalidArgumentError):
        clembed.load(stepped, {"emb": other})
    assert other.optimizer.state(other.weight) == (None, None, 0)
    with pytest.raises(clembed.InvalidArgumentError, match="optimizer entry"):
        clembed.save(path, {"emb": emb}, metadata={"emb.weight.optimizer": "sgd"})   # even without state
