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
    assert isinstance(e.value, clembed.InvalidArgumentError) and isinstance(e.value, ValueError)
    assert e.value.message    # the library's message
    assert e.value.status_name == "CLEMBED_ERR_INVALID_ARGUMENT"
    assert e.value.call == "Context.lookup" and e.value.operation == "clembed_lookup"
    assert e.value.argument == "out"
    assert str(e.value).startswith("Context.lookup, argument out: out is 5 x 3")


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
    assert str(dst / "clembed" / clembed._lib._soname()) in r.stderr
    assert 'find_library("clembed")' in r.stderr


def test_library_next_to_the_package(tmp_path):
    import shutil
    pkg = os.path.dirname(clembed.__file__)
    dst = tmp_path / "site"
    shutil.copytree(pkg, dst / "clembed", ignore=shutil.ignore_patterns("libclembed*", "__pycache__"))
    soname = clembed._lib._soname()       # libclembed.so.0.MINOR
    shutil.copy(os.path.realpath(clembed.library_path), dst / "clembed" / soname)
    r = _run_import({"PYTHONPATH": str(dst), "CLEMBED_LIBRARY": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(dst / "clembed" / soname)


# ------------------------------------------------------------ one hierarchy

def test_the_same_mistake_is_the_same_class_wherever_it_is_found(ctx):
    W = ctx.matrix(np.zeros((4, 3), np.float32))
    # a bad value: found by the binding (an unknown policy) or by the library (dropout 2)
    for call, arg in ((lambda: ctx.embed(W, [0], on_bad_id="ignore"), "on_bad_id"),
                      (lambda: ctx.embed(W, [0], dropout=2.0), "dropout"),
                      (lambda: ctx.empty(-1, 3), "rows"),
                      (lambda: ctx.embed(W, [0], padding_idx=9), "padding_idx")):
        with pytest.raises(clembed.InvalidArgumentError) as e:
            call()
        assert isinstance(e.value, ValueError) and isinstance(e.value, clembed.Error)
        assert e.value.status == clembed.ERR_INVALID_ARGUMENT
        assert e.value.argument == arg, (arg, str(e.value))
        assert ("argument %s: " % arg) in str(e.value)
    # a wrong type: also a TypeError
    with pytest.raises(clembed.ArgumentTypeError) as e:
        ctx.embed(W, [0], scale=[1.0])
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError)
    assert e.value.argument == "scale"
    with pytest.raises(clembed.ArgumentTypeError):
        ctx.lookup(W, np.array([0.5]))
    # an id outside the table, on the device or on the host: IndexError
    with pytest.raises(IndexError):
        ctx.lookup(W, [9]).numpy()
    with pytest.raises(IndexError):
        ctx.ids(np.array([2 ** 63], np.uint64))


def test_classes_of_every_status():
    from clembed import _errors
    want = {-2001: clembed.InvalidArgumentError, -2002: clembed.IndexOutOfRangeError,
            -2003: clembed.NoDeviceError, -2004: clembed.BuildFailedError,
            -2005: clembed.OutOfMemoryError, -2006: clembed.UnsupportedError,
            -4: clembed.OutOfMemoryError, -5: clembed.OutOfMemoryError, -6: clembed.OutOfMemoryError,
            -30: clembed.OpenCLError, -59: clembed.OpenCLError}
    python_kind = {clembed.InvalidArgumentError: ValueError, clembed.IndexOutOfRangeError: IndexError,
                   clembed.OutOfMemoryError: MemoryError, clembed.NoDeviceError: RuntimeError,
                   clembed.BuildFailedError: RuntimeError, clembed.UnsupportedError: RuntimeError,
                   clembed.OpenCLError: RuntimeError}
    for status, cls in want.items():
        e = _errors.from_status(status, "what", "clembed_embed", "grad_out")
        assert type(e) is cls and isinstance(e, python_kind[cls]) and isinstance(e, clembed.Error)
        assert e.argument == "grad"                    # the binding's name of the C argument
    assert "CL_INVALID_VALUE" in str(_errors.from_status(-30, "clEnqueueX failed"))
    assert issubclass(clembed.MissingFunctionError, NotImplementedError)
    assert issubclass(clembed.StateError, RuntimeError)
    # the contract's constructor still works
    e = clembed.Error(-2001, "message")
    assert e.status == -2001 and e.message == "message" and str(e) == "clembed: message"


def test_one_message_naming_the_python_call_and_argument(ctx):
    W = ctx.matrix(np.zeros((4, 3), np.float32))
    with pytest.raises(clembed.Error) as e:
        ctx.embed(W, [0], dropout=2.0)
    s = str(e.value)
    assert s == "Context.embed, argument dropout: dropout 2 is outside [0, 1)", s
    # the C argument grad_out is the Python argument grad
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.backward(np.zeros((2, 3), np.float32), np.array([0, 1]), 4, out=ctx.empty(4, 2))
    assert e.value.argument == "grad" and e.value.call == "Context.backward"
    assert str(e.value).startswith("Context.backward, argument grad: ")
    assert str(e.value).count("clembed_backward") == 0
    # lookup's errors name lookup, at the call and when found on the device
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        ctx.lookup(W, np.array([0, 7])).numpy()
    assert e.value.call == "Context.lookup" and e.value.operation == "clembed_lookup"
    assert str(e.value) == "Context.lookup, argument ids: ids[1] = 7 is outside [0, 4)"
    ctx.lookup(W, np.array([7, 0]))
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        ctx.finish()
    assert e.value.call == "Context.lookup" and e.value.index == 0
    # a nested call is named by the outer one
    emb = clembed.Embedding(4, 3, ctx=ctx, seed=1)
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        emb.forward(np.array([1, 2 ** 64 - 1], np.uint64))
    assert e.value.call == "Embedding.forward" and e.value.argument == "ids"


def test_closed_context_says_so():
    c = clembed.Context()
    m = c.matrix(np.ones((2, 2), np.float32))
    c.close()
    assert c.closed and "closed" in repr(c)
    for call in (lambda: c.empty(2, 2), lambda: m.numpy(), lambda: c.lookup(m, [0]), lambda: c.ids([1]),
                 lambda: c.finish(), lambda: m.write(np.zeros(4, np.float32))):
        with pytest.raises(clembed.InvalidArgumentError) as e:
            call()
        assert "Context is closed" in str(e.value), str(e.value)
    # the default context is made again once closed
    d = clembed.default_context()
    d.close()
    assert not clembed.default_context().closed


def test_device_argument(ctx):
    need("clembed_devices")
    devs = clembed.devices()
    with pytest.raises(clembed.NoDeviceError) as e:
        clembed.Context(device=len(devs) + 4)
    assert isinstance(e.value, RuntimeError) and e.value.argument == "device"
    assert "device %d: there" % (len(devs) + 4) in str(e.value) and devs[0].spec in str(e.value)
    with clembed.Context(device=0) as c:                 # an index into clembed.devices()
        assert c.device_name == "%s / %s" % (devs[0].platform, devs[0].name)
    with clembed.Context(device=devs[0]) as c:           # a Device
        assert c.device_name == "%s / %s" % (devs[0].platform, devs[0].name)
    with pytest.raises(clembed.ArgumentTypeError) as e:
        clembed.Context(device=1.5)
    assert e.value.argument == "device" and "'P:D'" in str(e.value)


def test_sizes_are_checked_before_the_library(ctx):
    with pytest.raises(clembed.InvalidArgumentError) as e:
        clembed.Embedding(-1, 4, ctx=ctx)
    assert str(e.value) == "Embedding, argument num_embeddings: -1 is negative"
    assert "overflow" not in str(e.value)
    with pytest.raises(clembed.InvalidArgumentError) as e:
        clembed.Embedding(4, -2, ctx=ctx)
    assert e.value.argument == "embedding_dim"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        clembed.Embedding(4, 2, padding_idx=4, ctx=ctx)
    assert e.value.argument == "padding_idx" and "outside [-4, 4)" in str(e.value)
    with pytest.raises(clembed.ArgumentTypeError) as e:
        ctx.empty(2.5, 3)
    assert e.value.argument == "rows"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.empty(2 ** 64, 3)
    assert e.value.argument == "rows"


def test_library_of_another_minor_release_is_refused(tmp_path):
    """The ctypes mirrors are one ABI's: a package of 0.2 refuses a 0.3 library (and the
    other way round), naming both versions."""
    import shutil
    pkg = os.path.dirname(clembed.__file__)
    dst = tmp_path / "site"
    shutil.copytree(pkg, dst / "clembed", ignore=shutil.ignore_patterns("libclembed*", "__pycache__"))
    major, minor = clembed.library_version() // 10000, clembed.library_version() // 100 % 100
    other = "%d.%d.0" % (major, minor + 1)
    (dst / "clembed" / "_version.py").write_text('__version__ = "%s"\n' % other)
    r = _run_import({"PYTHONPATH": str(dst), "CLEMBED_LIBRARY": os.path.realpath(clembed.library_path)})
    assert r.returncode != 0
    assert "LibraryNotFoundError" in r.stderr
    assert "this package (clembed %s) needs %d.%d.x" % (other, major, minor + 1) in r.stderr
