"""Model and array files (clembed_io.h): ctx.load and clembed.inspect; skipped only
when the loaded library lacks the functions."""
import numpy as np
import pytest

import clembed
from conftest import need


def test_load_npy(ctx, tmp_path):
    need("clembed_matrix_load")
    W = np.random.default_rng(2).standard_normal((7, 5)).astype(np.float32)
    p = tmp_path / "w.npy"
    np.save(p, W)
    m = ctx.load(p)
    assert m.shape == (7, 5) and m.dtype == "f32"
    assert np.array_equal(m.numpy(), W)
    m16 = ctx.load(str(p), dtype="f16")
    assert m16.dtype == "f16"
    assert np.array_equal(m16.numpy(np.float16), W.astype(np.float16))
    # 3-D loads as rows = first dimension
    np.save(tmp_path / "w3.npy", W.reshape(7, 1, 5).astype(np.float16))
    m3 = ctx.load(tmp_path / "w3.npy")
    assert m3.shape == (7, 5) and m3.dtype == "f16"


def test_inspect_npy(tmp_path):
    need("clembed_file_open")
    p = tmp_path / "w.npy"
    np.save(p, np.zeros((3, 4), np.float16))
    info = clembed.inspect(p)
    assert info == [dict(name="", dtype="f16", shape=(3, 4), bytes=24)]


def test_bad_file(ctx, tmp_path):
    need("clembed_file_open")
    p = tmp_path / "bad.npy"
    p.write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(clembed.Error) as e:
        clembed.inspect(p)
    assert e.value.status == clembed.ERR_INVALID_ARGUMENT
    assert "bad.npy" in str(e.value)


def test_missing_function_is_named(ctx, monkeypatch, tmp_path):
    from clembed import _lib
    monkeypatch.setattr(_lib, "has", lambda n: not n.startswith("clembed_file")
                        and n != "clembed_matrix_load")
    with pytest.raises(clembed.MissingFunctionError, match="clembed_matrix_load"):
        ctx.load(tmp_path / "x.npy")
    with pytest.raises(clembed.MissingFunctionError, match="clembed_file_open"):
        clembed.inspect(tmp_path / "x.npy")


def test_load_ids(ctx, tmp_path):
    need("clembed_ids_load")
    ids = np.random.default_rng(1).integers(0, 50, size=(3, 4))
    for dt in (np.int32, np.int64):
        p = tmp_path / ("ids_%s.npy" % np.dtype(dt).name)
        np.save(p, ids.astype(dt))
        i = ctx.load_ids(p)
        assert i.shape == (3, 4) and i.dtype == ("i32" if dt == np.int32 else "i64")
        assert np.array_equal(i.numpy(), ids)
    W = np.random.default_rng(2).standard_normal((50, 3)).astype(np.float32)
    out = ctx.lookup(W, ctx.load_ids(tmp_path / "ids_int64.npy"))
    assert out.shape == (3, 4, 3) and np.array_equal(out.numpy(), W[ids])


def write_safetensors(path, tensors):
    import json
    import struct
    header, blobs, off = {}, [], 0
    for name, (dtype, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_safetensors_inspect_and_load(ctx, tmp_path):
    need("clembed_matrix_load")
    W = np.random.default_rng(3).standard_normal((4, 2, 3)).astype(np.float32)
    ids = np.array([3, 0, 2, 2, 1], np.int64)
    p = tmp_path / "model.safetensors"
    write_safetensors(p, {"emb": ("F32", W), "ids": ("I64", ids)})
    info = clembed.inspect(p)
    assert [d["name"] for d in info] == ["emb", "ids"]
    assert info[0]["dtype"] == "f32" and info[0]["shape"] == (4, 2, 3) and info[0]["bytes"] == 96
    assert info[1]["shape"] == (5,) and info[1]["bytes"] == 40
    m = ctx.load(p, name="emb")
    assert m.shape == (4, 6) and np.array_equal(m.numpy(), W.reshape(4, 6))
    if clembed.has_function("clembed_ids_load"):
        i = ctx.load_ids(p, name="ids")
        assert i.shape == (5,) and np.array_equal(i.numpy(), ids)
    with pytest.raises(clembed.Error) as e:
        ctx.load(p, name="missing")
    assert e.value.status == clembed.ERR_INVALID_ARGUMENT and "emb" in str(e.value)
