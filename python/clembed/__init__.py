"""clembed: the embedding layer of a transformer on any OpenCL device (Python binding).

A ctypes binding of libclembed. NumPy is required, pyopencl optional (for sharing
queues, buffers and events with a pyopencl program), matplotlib optional (clembed.plot).

    import numpy as np, clembed
    ctx = clembed.Context()                      # default device (CLEMBED_DEVICE, GPU, ..., CPU)
    W = ctx.matrix(np.random.rand(1000, 64).astype(np.float32))
    out = ctx.embed(W, np.array([[1, 2, 3]]), scale="sqrt", positions="sinusoid")
    print(out.numpy().shape)                     # (1, 3, 64)

Asynchrony: device calls enqueue and return; every one takes wait_for=[events] and
sets .event on the Matrix it writes (pyopencl.Event with pyopencl, else clembed.Event).
Errors are clembed.Error subclasses that are also the Python exception of their kind
(InvalidArgumentError is a ValueError, IndexOutOfRangeError an IndexError, ...), with
.status .call .operation .argument .index .value; a bad id found on the device is
raised as IndexOutOfRangeError by the next read or finish().
"""
from typing import List

from . import _lib
from ._version import __version__
from ._lib import LibraryNotFoundError, DTYPES
from ._errors import (Error, InvalidArgumentError, ArgumentTypeError, IndexOutOfRangeError, NoDeviceError,
                      BuildFailedError, OutOfMemoryError, UnsupportedError, MissingFunctionError, StateError,
                      OpenCLError, ERR_INVALID_ARGUMENT, ERR_INDEX_OUT_OF_RANGE, ERR_NO_DEVICE,
                      ERR_BUILD_FAILED, ERR_OUT_OF_MEMORY, ERR_UNSUPPORTED, ERR_COMMUNICATION, ERR_FILE,
                      FileError)
from ._core import Context, Matrix, Ids, Event, Device, devices, inspect, embed, default_context
from .nn import Optimizer, Embedding, EmbeddingBag, BertEmbeddings, manual_seed
from ._checkpoint import save, load, metadata

library_path = _lib.path


def library_version() -> int:
    """CLEMBED_VERSION_NUMBER of the loaded library (major*10000 + minor*100 + patch)."""
    return _lib.version_number()


def has_function(name: str) -> bool:
    """True when the loaded libclembed exports the C function `name`."""
    return _lib.has(name)


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    """clembed.plot, imported on first use (matplotlib is optional)."""
    if name == "plot":
        import importlib
        return importlib.import_module(".plot", __name__)
    raise AttributeError("module 'clembed' has no attribute %r" % name)


__all__: List[str] = [
    "Context", "Matrix", "Ids", "Event", "Device", "devices", "inspect", "embed", "default_context",
    "Optimizer", "Embedding", "EmbeddingBag", "BertEmbeddings", "manual_seed", "save", "load", "metadata",
    "Error", "InvalidArgumentError", "ArgumentTypeError", "IndexOutOfRangeError", "NoDeviceError",
    "BuildFailedError", "OutOfMemoryError", "UnsupportedError", "MissingFunctionError", "StateError",
    "OpenCLError", "LibraryNotFoundError",
    "ERR_INVALID_ARGUMENT", "ERR_INDEX_OUT_OF_RANGE", "ERR_NO_DEVICE", "ERR_BUILD_FAILED",
    "ERR_OUT_OF_MEMORY", "ERR_UNSUPPORTED", "ERR_COMMUNICATION", "ERR_FILE", "FileError",
    "library_path", "library_version", "has_function", "DTYPES", "__version__"]
