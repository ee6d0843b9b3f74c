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
