"""Errors: clembed.Error built from the library's status and error detail, raised at
the call that fails or, for a bad id found on the device, at the read or finish
that reports it."""
import os
import subprocess
import sys

import numpy as np
import pytest

import clembed
from conftest import need

rng = np.random.default_rng(99)


def test_deferred_bad_id_raised_at_read(ctx):
    W = rng.standard_normal((6, 4)).astype(np.float32)
    out = ctx.embed(W, np.array([[0, 1], [9, 2]]))   # enqueued: no error yet
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        out.numpy()
    err = e.value
    assert isinstance(err, clembed.Error) and isinstance(err, IndexError)
    assert err.status == clembed.ERR_INDEX_OUT_OF_RANGE == -2002
    assert err.status_name == "CLEMBED_ERR_INDEX_OUT_OF_RANGE"
    assert "9" in err.message
    ctx.finish()   # the error was cleared by the read that reported it
    # the bad token's row is zero, the others are the table's rows
    out = ctx.embed(W, np.array([0, 9, 2]))
    with pytest.raises(clembed.IndexOutOfRangeError):
        ctx.finish()
    assert np.array_equal(out.numpy(), np.stack([W[0], np.zeros(4, np.float32), W[2]]))


def test_deferred_error_fields(ctx):
    need("clembed_context_error")
    W = rng.standard_normal((6, 4)).astype(np.float32)
    ctx.embed(W, np.array([0, 1, 2, -4, 7]))
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        ctx.finish()
    err = e.value
    assert err.operation == "clembed_embed"
    assert err.argument == "ids"
    assert err.index == 3 and err.value == -4
    # a position past a learned table
    P = np.zeros((3, 4), np.float32)
    ctx.embed(W, np.array([0, 1, 2, 3, 4]), positions=P)
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        ctx.finish()
    assert e.value.operation == "clembed_embed"
    assert e.value.argument in ("positions", "position_table")
    assert e.value.index == 3 and e.value.value == 3


def test_argument_error_raised_at_call(ctx):
    W = ctx.matrix(np.zeros((4, 3), np.float32))
    bad_out = ctx.empty(5, 3)      # 2 ids need 2 rows
    with pytest.raises(clembed.Error) as e:
        ctx.lookup(W, np.array([0, 1]), out=bad_out)
    assert e.value.status == clembed.ERR_INVALID_ARGUMENT
    assert not isinstance(e.value, clembed.IndexOutOfRangeError)
    assert e.value.message    # the library's message
    assert str(e.value).startswith("CLEMBED_ERR_INVALID_ARGUMENT (-2001)")
    if clembed.has_function("clembed_context_error"):
        assert e.value.operation in ("clembed_lookup", "clembed_embed")  # lookup is embed with the defaults
        assert e.value.argument == "out"


def test_no_device(ctx):
    with pytest.raises(clembed.NoDeviceError) as e:
        clembed.Context("no such device anywhere 123")
    assert e.value.status == clembed.ERR_NO_DEVICE
    assert ctx.device_name.split(" / ")[-1] in e.value.message   # lists the devices that exist


def test_missing_function_error_names_it(monkeypatch):
    from clembed import _lib
    monkeypatch.setattr(_lib, "has", lambda name: False)
    with pytest.raises(clembed.MissingFunctionError) as e:
        clembed.devices()
    assert isinstance(e.value, NotImplementedError) and isinstance(e.value, clembed.Error)
    assert "clembed_devices" in str(e.value) and e.value.operation == "clembed_devices"
    with pytest.raises(clembed.MissingFunctionError, match="clembed_optimizer_step"):
        clembed.Optimizer(clembed.default_context(), "adam", 0.01).step(None, None, None)
    # every kind runs clembed_optimizer_step, SGD included (no other path)
    with pytest.raises(clembed.MissingFunctionError, match="clembed_optimizer_step"):
        clembed.Optimizer(clembed.default_context(), "sgd", 0.01).step(None, None, None)


def _run_import(env):
    e = dict(os.environ)
    e.update(env)
    e = {k: v for k, v in e.items() if v is not None}
    return subprocess.run([sys.executable, "-c", "import clembed; print(clembed.library_path)"],
                          env=e, capture_output=True, text=True)


def test_library_env_var_that_does_not_load():
    r = _run_import({"CLEMBED_LIBRARY": "/nonexistent/libclembed.so.0"})
    assert r.returncode != 0
    assert "LibraryNotFoundError" in r.stderr and "/nonexistent/libclembed.so.0" in r.stderr


def test_library_not_found_lists_what_was_tried(tmp_path):
    pkg = os.path.dirname(clembed.__file__)
    dst = tmp_path / "site"
    import shutil
    shutil.copytree(pkg, dst / "clembed", ignore=shutil.ignore_patterns("libclembed*", "__pycache__"))
    env = {"PYTHONPATH": str(dst), "LD_LIBRARY_PATH": "", "CLEMBED_LIBRARY": ""}
    r = _run_import(env)
    if r.returncode == 0:
        pytest.skip("a libclembed is installed system-wide (%s)" % r.stdout.strip())
    assert "CLEMBED_LIBRARY (not set)" in r.stderr
    assert str(dst / "clembed" / "libclembed.so.0") in r.stderr
    assert 'find_library("clembed")' in r.stderr


def test_library_next_to_the_package(tmp_path):
    import shutil
    pkg = os.path.dirname(clembed.__file__)
    dst = tmp_path / "site"
    shutil.copytree(pkg, dst / "clembed", ignore=shutil.ignore_patterns("libclembed*", "__pycache__"))
    shutil.copy(os.path.realpath(clembed.library_path), dst / "clembed" / "libclembed.so.0")
    r = _run_import({"PYTHONPATH": str(dst), "CLEMBED_LIBRARY": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(dst / "clembed" / "libclembed.so.0")
