"""Context, Matrix, Ids and Event: the ctypes binding of include/clembed.h.

Every public callable is wrapped by _errors.api (errors name the call) and converts its
arguments with the helpers of _args (errors name the argument); python/README.md says
how a new binding follows them.
"""
import ctypes
import ctypes.util
import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._lib import lib, Matrix_t, Ids_t
from ._lib import (DTYPES, INDEX_TYPES, POLICIES, EXPONENTS, LAYOUTS, POSITIONS, ROPE_LAYOUTS,
                   ROPE_SCALINGS, BAG_MODES, NORMS)
from ._errors import (Error, NoDeviceError, api, from_status, invalid, wrong_type, out_of_range,
                      require, PY_CALLS, ERR_NO_DEVICE, ERR_INVALID_ARGUMENT, ERR_OUT_OF_MEMORY)
from ._args import (DTYPE_NAMES, BLOCKS, FLOAT_DTYPES, choice, dtype_code, count as _count, integer, real,
                    seed as _seed, host_values, index_array, read_type)

try:  # optional
    import pyopencl as _cl
except Exception:  # pragma: no cover - depends on the machine
    _cl = None

byref = ctypes.byref

DTypeLike = Any        # 'f32' 'f16' 'bf16' 'q8_0' ..., numpy.float16, 'float16', np.dtype(...)
ArrayLike = Any        # a NumPy array or nested Python sequences
WaitFor = Any          # None, an event, or a list of events (pyopencl, clembed.Event, raw ints)

# ------------------------------------------------------------------ events

_opencl = None


def _ocl() -> ctypes.CDLL:
    """The OpenCL ICD loader, for releasing and waiting on raw events."""
    global _opencl
    if _opencl is None:
        name = ctypes.util.find_library("OpenCL") or "libOpenCL.so.1"
        o = ctypes.CDLL(name)
        o.clReleaseEvent.argtypes = [ctypes.c_void_p]
        o.clRetainEvent.argtypes = [ctypes.c_void_p]
        o.clWaitForEvents.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
        o.clGetEventInfo.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t,
                                     ctypes.c_void_p, ctypes.c_void_p]
        o.clGetCommandQueueInfo.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t,
                                            ctypes.c_void_p, ctypes.c_void_p]
        o.clCreateBuffer.restype = ctypes.c_void_p
        o.clCreateBuffer.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t,
                                     ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        _opencl = o
    return _opencl


class Event:
    """A cl_event returned by clembed when pyopencl is not installed (with pyopencl,
    clembed returns pyopencl.Event objects instead). Owns one reference."""

    def __init__(self, handle: int) -> None:
        self._h: Optional[int] = handle

    @property
    def int_ptr(self) -> int:
        """The cl_event as an int (what pyopencl calls int_ptr)."""
        return self._h or 0

    @api("Event.wait", "clWaitForEvents")
    def wait(self) -> None:
        """Blocks until the event completes."""
        arr = (ctypes.c_void_p * 1)(self._h)
        st = _ocl().clWaitForEvents(1, arr)
        if st != 0:
            raise from_status(st, "clWaitForEvents failed", "clWaitForEvents")

    @property
    def command_execution_status(self) -> int:
        """CL_EVENT_COMMAND_EXECUTION_STATUS: 0 complete, 1 running, 2 submitted, 3 queued,
        negative: failed."""
        v = ctypes.c_int()
        _ocl().clGetEventInfo(self._h, 0x11D3, ctypes.sizeof(v), byref(v), None)
        return v.value

    def __del__(self) -> None:
        if getattr(self, "_h", None):
            try:
                _ocl().clReleaseEvent(self._h)
            except Exception:
                pass
            self._h = None


def _wrap_event(handle: Optional[int]) -> Any:
    if not handle:
        return None
    if _cl is not None:
        return _cl.Event.from_int_ptr(handle, retain=False)
    return Event(handle)


def _handle(obj: Any, what: str) -> Optional[int]:
    """A raw OpenCL handle (int) from a pyopencl object, a clembed object or an int."""
    if obj is None:
        return None
    if isinstance(obj, int) and not isinstance(obj, bool):
        return obj
    if isinstance(obj, ctypes.c_void_p):
        return obj.value
    p = getattr(obj, "int_ptr", None)
    if p is None:
        raise wrong_type(what, "must be a pyopencl object or a raw OpenCL handle (int), not %s"
                         % type(obj).__name__)
    return int(p)


def _wait_list(wait_for: WaitFor) -> Tuple[int, Any]:
    if wait_for is None:
        return 0, None
    if not isinstance(wait_for, (list, tuple)):
        wait_for = [wait_for]
    hs = [_handle(e, "wait_for") for e in wait_for if e is not None]
    if not hs:
        return 0, None
    return len(hs), (ctypes.c_void_p * len(hs))(*hs)


# ------------------------------------------------------------------ data

class Matrix:
    """A rows x cols row-major matrix in an OpenCL buffer (clembed_matrix).

    .rows .cols .dtype ('f32', ...) .ld .offset .shape, .buffer (the cl_mem as an int),
    .event: the event of the last clembed operation that wrote this matrix (a
    pyopencl.Event with pyopencl installed, else a clembed.Event; None if none).
    .shape is (rows, cols), or ids.shape + (cols,) for an output of a lookup.
    numpy() and numpy.asarray(m) read it in its own type where NumPy has one (float32 for
    'f32', float16 for 'f16'), else float32 ('bf16' and the quantized dtypes widen exactly
    into float32; NumPy has no bfloat16); numpy(dtype) reads it as another.
    """

    def __init__(self, ctx: "Context", m: Matrix_t, owned: bool, keep: Any = None,
                 shape: Optional[Sequence[int]] = None) -> None:
        self.ctx = ctx
        self._m = m
        self._owned = owned
        self._keep = keep
        self._shape = tuple(shape) if shape is not None else None
        self.event: Any = None

    # --- construction
    @classmethod
    @api("Matrix.from_buffer")
    def from_buffer(cls, ctx: "Context", buf: Any, rows: int, cols: int, dtype: DTypeLike = "f32",
                    offset: int = 0, ld: int = 0) -> "Matrix":
        """A matrix in a buffer the caller owns: a pyopencl Buffer, a pyopencl.array.Array
        (its own offset is added) or a raw cl_mem int. offset and ld count elements
        (values for block-quantized types). The buffer is kept alive, never released."""
        code = dtype_code(dtype)
        name = DTYPE_NAMES[code]
        base = buf
        extra = 0
        if _cl is not None and hasattr(buf, "base_data") and hasattr(buf, "offset"):
            base = buf.base_data
            vals, nbytes = BLOCKS[name]
            if buf.offset % nbytes:
                raise invalid("buf", "the array's offset (%d bytes) is not a whole %s element"
                              % (buf.offset, name))
            extra = buf.offset // nbytes * vals
        m = Matrix_t(buffer=_handle(base, "buf"), offset=_count(offset, "offset") + extra,
                     rows=_count(rows, "rows"), cols=_count(cols, "cols"), ld=_count(ld, "ld"), dtype=code)
        return cls(ctx, m, owned=False, keep=buf)

    # --- properties
    @property
    def rows(self) -> int:
        """Rows of the matrix."""
        return self._m.rows

    @property
    def cols(self) -> int:
        """Columns (values) of each row."""
        return self._m.cols

    @property
    def ld(self) -> int:
        """Elements between row starts."""
        return self._m.ld or self._m.cols

    @property
    def offset(self) -> int:
        """First element in the buffer, in elements."""
        return self._m.offset

    @property
    def dtype(self) -> str:
        """The device dtype's name: 'f32', 'f16', 'bf16', or a block type's ('q8_0', 'q4_k', 'iq4_xs', ...:
        clembed.DTYPES)."""
        return DTYPE_NAMES.get(self._m.dtype, str(self._m.dtype))

    @property
    def buffer(self) -> int:
        """The cl_mem as an int."""
        return self._m.buffer

    @property
    def shape(self) -> Tuple[int, ...]:
        """(rows, cols), or ids.shape + (cols,) for the output of a lookup."""
        return self._shape if self._shape is not None else (self.rows, self.cols)

    def __repr__(self) -> str:
        return "clembed.Matrix(shape=%s, dtype=%r)" % (self.shape, self.dtype)

    # --- transfers
    @api("Matrix.numpy", "clembed_matrix_read")
    def numpy(self, dtype: Any = None) -> np.ndarray:
        """Reads the matrix (blocking: waits for the context's work) into a new NumPy array
        of .shape. dtype None (the default): the matrix's own type where NumPy has one,
        float32 for 'f32' and float16 for 'f16', else float32 ('bf16' values and
        dequantized blocks are exact in float32); numpy.asarray(m) reads it so. Or a type
        to read into: float32, float16, float64 (read as float32, then widened) or
        ml_dtypes.bfloat16 (when installed). Raises the deferred error of earlier work, if
        any, after reading."""
        d, host_code = read_type(dtype, self._m.dtype)
        host = np.empty((self.rows, self.cols), dtype=np.float32 if d == np.float64 else d)
        st = lib.clembed_matrix_read(self.ctx._live, byref(self._m), host.ctypes.data_as(ctypes.c_void_p),
                                     host_code)
        self.ctx._check(st, "clembed_matrix_read")
        return host.astype(d, copy=False).reshape(self.shape)

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        """numpy.asarray(m): m.numpy(dtype), in the matrix's own type when dtype is None
        (always a copy of the device's data)."""
        if copy is False:
            raise invalid("copy", "False is impossible: the values live on the device, reading them is a copy")
        return self.numpy(dtype)

    @api("Matrix.raw", "clembed_matrix_read")
    def raw(self) -> np.ndarray:
        """The matrix as stored, dense: uint8 blocks of shape (rows, row bytes) for a
        block-quantized dtype, uint16 bits for f16/bf16, float32 for f32. Blocking."""
        name = self.dtype
        vals, nbytes = BLOCKS[name]
        if vals > 1:
            out = np.empty((self.rows, self.cols // vals * nbytes), np.uint8)
        else:
            out = np.empty((self.rows, self.cols), np.float32 if name == "f32" else np.uint16)
        st = lib.clembed_matrix_read(self.ctx._live, byref(self._m), out.ctypes.data_as(ctypes.c_void_p),
                                     self._m.dtype)
        self.ctx._check(st, "clembed_matrix_read")
        return out

    @api("Matrix.write", "clembed_matrix_write")
    def write(self, array: ArrayLike) -> "Matrix":
        """Writes rows*cols host values into the matrix, converting them to its dtype as
        NumPy's assignment does (float64 and integers rounded to nearest; uint8 blocks for
        a block-quantized matrix). Blocking. Returns the matrix."""
        host, host_code, _ = host_values(array, "array", self._m.dtype)
        if host.dtype == np.uint8 and BLOCKS[self.dtype][0] > 1:
            want = self.rows * (self.cols // BLOCKS[self.dtype][0]) * BLOCKS[self.dtype][1]
            if host.size != want:
                raise invalid("array", "%d bytes written into a %d x %d %s matrix of %d bytes"
                              % (host.size, self.rows, self.cols, self.dtype, want))
        elif host.size != self.rows * self.cols:
            raise invalid("array", "%d values written into a %d x %d matrix"
                          % (host.size, self.rows, self.cols))
        st = lib.clembed_matrix_write(self.ctx._live, byref(self._m), host.ctypes.data_as(ctypes.c_void_p),
                                      host_code)
        self.ctx._check(st, "clembed_matrix_write")
        return self

    @api("Matrix.rows_view")
    def rows_view(self, first: int, count: int) -> "Matrix":
        """A matrix over rows first .. first+count-1 of this one (same buffer)."""
        first = integer(first, "first", 0, self.rows + 1)
        n = integer(count, "count", 0, self.rows - first + 1)
        m = Matrix_t(buffer=self._m.buffer, offset=self._m.offset + first * self.ld, rows=n,
                     cols=self.cols, ld=self.ld, dtype=self._m.dtype)
        return Matrix(self.ctx, m, owned=False, keep=self)

    def release(self) -> None:
        """Releases the buffer now (for a matrix clembed allocated)."""
        if self._owned and self._m.buffer:
            lib.clembed_matrix_release(byref(self._m))
        self._owned = False
        self.event = None

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass


class Ids:
    """Token ids in an OpenCL buffer (clembed_ids); .shape is the host array's shape."""

    def __init__(self, ctx: "Context", ids: Ids_t, owned: bool, shape: Sequence[int], keep: Any = None) -> None:
        self.ctx = ctx
        self._ids = ids
        self._owned = owned
        self.shape = tuple(shape)
        self._keep = keep

    @classmethod
    @api("Ids.from_buffer")
    def from_buffer(cls, ctx: "Context", buf: Any, count: int, dtype: Any = "i32", *, offset: int = 0,
                    shape: Optional[Sequence[int]] = None) -> "Ids":
        """Ids in a buffer the caller owns (pyopencl Buffer or Array, or a raw cl_mem).
        dtype 'i32' or 'i64' (or numpy.int32 / numpy.int64 and their names)."""
        if not isinstance(dtype, str):
            try:
                dtype = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}.get(np.dtype(dtype), dtype)
            except TypeError:
                pass
        elif dtype.lower() in ("int32", "int64"):
            dtype = "i" + dtype[3:]
        t = choice(INDEX_TYPES, dtype, "dtype")
        base, extra = buf, 0
        if _cl is not None and hasattr(buf, "base_data") and hasattr(buf, "offset"):
            base, extra = buf.base_data, buf.offset // (4 if t == 0 else 8)
        n = _count(count, "count")
        i = Ids_t(buffer=_handle(base, "buf"), offset=_count(offset, "offset") + extra, count=n, type=t)
        return cls(ctx, i, owned=False, shape=shape if shape is not None else (n,), keep=buf)

    @property
    def count(self) -> int:
        """Number of ids."""
        return self._ids.count

    @property
    def dtype(self) -> str:
        """'i32' or 'i64'."""
        return "i64" if self._ids.type == 1 else "i32"

    @property
    def buffer(self) -> int:
        """The cl_mem as an int."""
        return self._ids.buffer

    def __repr__(self) -> str:
        return "clembed.Ids(shape=%s, dtype=%r)" % (self.shape, self.dtype)

    @api("Ids.numpy", "clembed_ids_read")
    def numpy(self) -> np.ndarray:
        """Reads the ids (blocking) into a new int32 or int64 array of .shape."""
        out = np.empty(self.count, dtype=np.int64 if self._ids.type == 1 else np.int32)
        st = lib.clembed_ids_read(self.ctx._live, byref(self._ids), out.ctypes.data_as(ctypes.c_void_p))
        self.ctx._check(st, "clembed_ids_read")
        return out.reshape(self.shape)

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        """numpy.asarray(ids): ids.numpy() (a copy), converted to dtype if given."""
        if copy is False:
            raise invalid("copy", "False is impossible: the ids live on the device, reading them is a copy")
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def release(self) -> None:
        """Releases the buffer now (for ids clembed allocated)."""
        if self._owned and self._ids.buffer:
            lib.clembed_ids_release(byref(self._ids))
        self._owned = False

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass


# ------------------------------------------------------------------ context

def _detail(handle: Any) -> Tuple[str, str, int, int]:
    """(operation, argument, index, value) of the last failure, from clembed_context_error
    (handle None: the thread's last failure without a context)."""
    if _lib.has("clembed_context_error"):
        d = _lib.ErrorDetail_t()
        if lib.clembed_context_error(handle, byref(d)) == 0 and d.status != 0:
            op = d.operation.decode(errors="replace") if d.operation else ""
            arg = d.argument.decode(errors="replace") if d.argument else ""
            return op, arg, int(d.index), int(d.value)
    return "", "", -1, 0


def _c_error(status: int, message: str, handle: Any, operation: str) -> Error:
    """The Error of a failed C call `operation`. An error the library found after an
    earlier call returned (a bad id reported by a read or finish) names that call."""
    op, arg, index, value = _detail(handle)
    call = PY_CALLS.get(op, op) if op and op != operation else ""
    return from_status(status, message, op or operation, arg, index, value, call)


def _no_context_error(status: int, operation: str) -> Error:
    msg = lib.clembed_last_error_message()
    return _c_error(status, msg.decode(errors="replace") if msg else "", None, operation)


def _device_spec(device: Any) -> Optional[bytes]:
    """The C device spec of Context's device argument."""
    if device is None:
        return None
    if isinstance(device, Device):
        return device.spec.encode()
    if isinstance(device, str):
        return device.encode()
    if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
        devs = devices()
        n = int(device)
        if not 0 <= n < len(devs):
            listing = "; ".join("%d: %s %s / %s" % (i, d.spec, d.platform, d.name) for i, d in enumerate(devs))
            raise NoDeviceError(ERR_NO_DEVICE, "device %d: there %s %d device%s (%s)"
                                % (n, "is" if len(devs) == 1 else "are", len(devs),
                                   "" if len(devs) == 1 else "s", listing or "none"),
                                "", "device", -1, n)
        return devs[n].spec.encode()
    raise wrong_type("device", "is a device spec ('P:D', 'gpu', 'cpu', 'accelerator' or part of a "
                     "device's name), an index into clembed.devices(), a clembed.Device or None; not %r"
                     % (device,))


class Context:
    """A clembed context: a device, its queue and the compiled kernels.

    Context(device=None): device None (CLEMBED_DEVICE, else the first GPU, accelerator,
    CPU), a spec as in C ('P:D', 'gpu', 'cpu', 'accelerator', or part of "platform
    device"), an int n (the n-th of clembed.devices()) or a clembed.Device.
    Context.from_queue(q): joins a pyopencl CommandQueue (or a raw cl_command_queue
    int). Every device call takes wait_for=[events] (pyopencl events, clembed.Event or
    raw cl_event ints) and sets .event on the matrix it writes. A context is also a
    context manager: `with clembed.Context() as ctx:` closes it at the end.
    """

    @api("Context", "clembed_context_create")
    def __init__(self, device: Any = None) -> None:
        self._h = ctypes.c_void_p()
        self._queue_obj: Any = None
        spec = _device_spec(device)
        h = ctypes.c_void_p()
        st = lib.clembed_context_create(spec, byref(h))
        if st != 0:
            raise _no_context_error(st, "clembed_context_create")
        self._h = h

    @classmethod
    @api("Context.from_queue", "clembed_context_create_from_queue")
    def from_queue(cls, queue: Any) -> "Context":
        """A context on an existing queue (retained; the caller's work on it is never
        waited for by clembed)."""
        self = cls.__new__(cls)
        self._h = ctypes.c_void_p()
        h = ctypes.c_void_p()
        st = lib.clembed_context_create_from_queue(_handle(queue, "queue"), byref(h))
        if st != 0:
            raise _no_context_error(st, "clembed_context_create_from_queue")
        self._h = h
        self._queue_obj = queue
        return self

    # --- lifetime
    def close(self) -> None:
        """Destroys the context now (waits only for clembed's own commands). Using it (or
        a matrix of it) afterwards raises InvalidArgumentError."""
        h = getattr(self, "_h", None)
        if h is not None and h.value:
            lib.clembed_context_destroy(h)
        self._h = ctypes.c_void_p()

    @property
    def closed(self) -> bool:
        """True once close() has run."""
        return not getattr(self, "_h", ctypes.c_void_p()).value

    @property
    def _live(self) -> ctypes.c_void_p:
        """The C handle; InvalidArgumentError when the context is closed."""
        h = getattr(self, "_h", None)
        if h is None or not h.value:
            raise invalid("", "the clembed.Context is closed (by Context.close() or the end of its with "
                          "block): make a new one, and new matrices on it")
        return h

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- facts
    @property
    def device_name(self) -> str:
        """"platform name / device name" ("" once closed)."""
        s = lib.clembed_context_device_name(self._h)
        return s.decode(errors="replace") if s else ""

    @property
    def queue(self) -> int:
        """The cl_command_queue (int). With pyopencl, pyopencl_queue() wraps it."""
        return lib.clembed_context_queue(self._live)

    def pyopencl_queue(self) -> Any:
        """The context's queue as a pyopencl.CommandQueue (the one given to from_queue)."""
        if _cl is None:
            raise ImportError("clembed: pyopencl is not installed")
        if self._queue_obj is not None and not isinstance(self._queue_obj, int):
            return self._queue_obj
        return _cl.CommandQueue.from_int_ptr(self.queue, retain=True)

    @property
    def message(self) -> str:
        """The library's message about the last failure on this context ("" if none)."""
        s = lib.clembed_context_message(self._h)
        return s.decode(errors="replace") if s else ""

    def __repr__(self) -> str:
        return "clembed.Context(%r)" % (self.device_name if not self.closed else "closed")

    # --- errors (every C call of the binding ends in _check or _run)
    def _check(self, status: int, operation: str) -> None:
        if status != 0:
            raise _c_error(status, self.message, self._h, operation)

    def _run(self, operation: str, fn: Any, args: Sequence[Any], wait_for: WaitFor,
             targets: Sequence[Any]) -> Any:
        """Calls the device function fn(*args, wait list, event) and sets .event on the
        matrices in targets."""
        n, arr = _wait_list(wait_for)
        ev = ctypes.c_void_p()
        st = fn(*args, n, arr, byref(ev))
        self._check(st, operation)
        e = _wrap_event(ev.value)
        for t in targets:
            if t is not None:
                t.event = e
        return e

    @api("Context.finish", "clembed_finish")
    def finish(self) -> None:
        """Waits for the context's work; raises its first deferred error (then cleared)."""
        self._check(lib.clembed_finish(self._live), "clembed_finish")

    # --- data
    @api("Context.empty", "clembed_matrix_create")
    def empty(self, rows: int, cols: int, dtype: DTypeLike = "f32") -> Matrix:
        """A zero-filled rows x cols matrix of dtype on the device."""
        m = Matrix_t()
        st = lib.clembed_matrix_create(self._live, _count(rows, "rows"), _count(cols, "cols"),
                                       dtype_code(dtype), byref(m))
        self._check(st, "clembed_matrix_create")
        return Matrix(self, m, owned=True)

    @api("Context.matrix", "clembed_matrix_write")
    def matrix(self, array: ArrayLike, dtype: DTypeLike = None) -> Matrix:
        """Uploads a 2-D array.

        dtype None: the array's own, float32 -> 'f32', float16 -> 'f16' (ml_dtypes.bfloat16
        -> 'bf16'); a float64 or integer array is refused unless dtype says what to make of
        it (dtype='f32' converts, rounding to nearest). Python lists are float32 values.
        dtype: 'f32' 'f16' 'bf16' 'q8_0' 'q4_0' (the quantized ones from float values), any
        block type from uint8 blocks of shape (rows, row_bytes), or a NumPy float type."""
        if isinstance(array, Matrix):
            array = array.numpy(None)
        host, host_code, code = host_values(array, "array", dtype)
        if host.ndim != 2:
            raise invalid("array", "a matrix is 2-D, this array has shape %s" % (host.shape,))
        name = DTYPE_NAMES[code]
        rows, cols = host.shape
        if host.dtype == np.uint8 and BLOCKS[name][0] > 1:
            vals, nbytes = BLOCKS[name]
            if cols % nbytes:
                raise invalid("array", "%s rows are whole blocks of %d bytes, not %d bytes" % (name, nbytes, cols))
            cols = cols // nbytes * vals
        m = self.empty(rows, cols, code)
        st = lib.clembed_matrix_write(self._live, byref(m._m), host.ctypes.data_as(ctypes.c_void_p), host_code)
        self._check(st, "clembed_matrix_write")
        return m

    @api("Context.ids")
    def ids(self, array: ArrayLike) -> Ids:
        """Uploads token ids (int32 stays int32, other integers become int64), any shape.
        uint64 ids past 2^63 - 1 are refused (IndexOutOfRangeError), never wrapped. The copy
        is made when the buffer is created, without the queue (so it never waits behind
        gated work on a shared queue)."""
        return self._upload_ids(array, "ids")

    def _upload_ids(self, array: ArrayLike, argument: str) -> Ids:
        host = index_array(array, argument)
        i = Ids_t(buffer=self._buffer(host.nbytes, host if host.size else None), offset=0,
                  count=host.size, type=0 if host.dtype == np.int32 else 1)
        return Ids(self, i, owned=True, shape=host.shape)

    # --- argument conversion for the operations
    def _as_matrix(self, x: Any, argument: str) -> Matrix:
        """A Matrix as it is, or an array uploaded (host_values' rules)."""
        if isinstance(x, Matrix):
            return x
        if isinstance(x, (np.ndarray, list, tuple)):
            host, _, _ = host_values(x, argument)
            if host.ndim != 2:
                raise invalid(argument, "is 2-D (rows x cols), not of shape %s" % (host.shape,))
            return self.matrix(host)
        raise wrong_type(argument, "must be a clembed.Matrix or a NumPy array, not %s" % type(x).__name__)

    def _as_ids(self, x: Any, argument: str = "ids") -> Optional[Ids]:
        if x is None or isinstance(x, Ids):
            return x
        return self._upload_ids(x, argument)

    def _grad(self, grad: Any) -> Matrix:
        """A gradient: a Matrix, or an array of float32/float16 values of shape
        (..., cols), uploaded as (n, cols)."""
        if isinstance(grad, Matrix):
            return grad
        host, _, _ = host_values(grad, "grad")
        if host.ndim == 0:
            raise invalid("grad", "has at least one dimension")
        return self.matrix(host.reshape(-1, host.shape[-1]) if host.ndim != 2 else host)

    def _cl_context(self) -> int:
        c = ctypes.c_void_p()
        st = _ocl().clGetCommandQueueInfo(self.queue, 0x1090, ctypes.sizeof(c), byref(c), None)
        if st != 0:
            raise from_status(st, "clGetCommandQueueInfo(CL_QUEUE_CONTEXT) failed", "clGetCommandQueueInfo")
        return c.value or 0

    def _buffer(self, nbytes: int, host: Optional[np.ndarray] = None) -> int:
        """A new cl_mem on the context's cl_context, made without enqueueing anything
        (so it never waits behind work on a shared queue); host: bytes copied in."""
        err = ctypes.c_int()
        flags = 1 | (0x20 if host is not None else 0)    # CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR
        b = _ocl().clCreateBuffer(self._cl_context(), flags, max(int(nbytes), 4),
                                  host.ctypes.data_as(ctypes.c_void_p) if host is not None else None,
                                  byref(err))
        if err.value != 0 or not b:
            raise from_status(err.value or ERR_OUT_OF_MEMORY, "clCreateBuffer of %d bytes failed" % nbytes,
                              "clCreateBuffer")
        return b

    def _alloc(self, rows: int, cols: int, code: int) -> Matrix:
        """An output matrix, not initialised (every operation writes all of its output)."""
        row = lib.clembed_dtype_row_bytes(code, cols)
        if rows and cols and (row == 0 or row * rows >= 2 ** 64):
            raise invalid("out", "%d x %d %s overflows the address space" % (rows, cols, DTYPE_NAMES[code]))
        try:
            buf = self._buffer(row * rows)
        except Error as e:
            if e.status != -61:     # CL_INVALID_BUFFER_SIZE: past the device's largest buffer
                raise
            return self.empty(rows, cols, DTYPE_NAMES[code])   # split over several (clembed.h)
        m = Matrix_t(buffer=buf, offset=0, rows=rows, cols=cols, ld=0, dtype=code)
        return Matrix(self, m, owned=True)

    def _out(self, out: Optional[Matrix], rows: int, cols: int, out_dtype: DTypeLike,
             shape: Optional[Sequence[int]]) -> Matrix:
        """The output: `out` as given, or a new matrix of out_dtype (a float dtype)."""
        if out is None:
            out = self._alloc(rows, cols, dtype_code(out_dtype, "out_dtype", FLOAT_DTYPES))
        elif not isinstance(out, Matrix):
            raise wrong_type("out", "must be a clembed.Matrix, not %s" % type(out).__name__)
        if shape is not None and out.rows == rows and out.cols == cols:
            out._shape = tuple(shape)
        return out

    @staticmethod
    def _padding(padding_idx: Optional[int]) -> int:
        """padding_idx for C: None -> CLEMBED_NO_PADDING; negative counts from the end."""
        if padding_idx is None:
            return _lib.NO_PADDING
        return integer(padding_idx, "padding_idx", -(2 ** 63) + 1, 2 ** 63)

    @staticmethod
    def _seq_len(seq_len: Optional[int], ids: Ids) -> int:
        if seq_len is None:
            return ids.shape[-1] if len(ids.shape) >= 2 else 0
        return _count(seq_len, "seq_len")

    # --- operations
    @api("Context.positional", "clembed_positional")
    def positional(self, length: int, dim: int, first: int = 0, base: float = 10000.0,
                   exponent: str = "pair", layout: str = "interleaved", *, out_dtype: DTypeLike = "f32",
                   out: Optional[Matrix] = None, wait_for: WaitFor = None) -> Matrix:
        """The sinusoid table of positions first .. first+length-1, shape (length, dim)."""
        s = _lib.Sinusoid_t(base=real(base, "base"), exponent=choice(EXPONENTS, exponent, "exponent"),
                            layout=choice(LAYOUTS, layout, "layout"))
        out = self._out(out, _count(length, "length"), _count(dim, "dim"), out_dtype, None)
        self._run("clembed_positional", lib.clembed_positional,
                  (self._live, byref(s), _count(first, "first"), byref(out._m)), wait_for, [out])
        return out

    @api("Context.lookup", "clembed_lookup")
    def lookup(self, table: Any, ids: Any, *, out: Optional[Matrix] = None, out_dtype: DTypeLike = "f32",
               wait_for: WaitFor = None) -> Matrix:
        """out[i] = table[ids[i]]; the output's shape is ids.shape + (cols,)."""
        table = self._as_matrix(table, "table")
        ids = self._as_ids(ids)
        out = self._out(out, ids.count, table.cols, out_dtype, ids.shape + (table.cols,))
        self._run("clembed_lookup", lib.clembed_lookup,
                  (self._live, byref(table._m), byref(ids._ids), byref(out._m)), wait_for, [out])
        return out

    def _embed_options(self, table: Matrix, ids: Ids, keep: List[Any], scale: Any, positions: Any,
                       base: Any, exponent: Any, layout: Any, offset: Any, seq_len: Any,
                       sequence_offsets: Any, padding_idx: Any, on_bad_id: Any, dropout: Any,
                       seed: Any, layer: Optional[Dict[str, Any]] = None, padding_keeps_row: Any = False) -> Any:
        """clembed_embed_options from embed's arguments (uploads kept alive in `keep`);
        layer: BERT's segment and norm arguments (_layer_options)."""
        o = lib.clembed_embed_defaults()
        if (not isinstance(padding_keeps_row, (bool, int, np.bool_, np.integer))
                or int(padding_keeps_row) not in (0, 1)):
            raise invalid("padding_keeps_row", "is True or False, not %r" % (padding_keeps_row,))
        o.padding_keeps_row = 1 if padding_keeps_row else 0
        if isinstance(scale, str):
            if scale.lower() != "sqrt":
                raise invalid("scale", "is a number or 'sqrt', not %r" % scale)
            scale = math.sqrt(table.cols)
        self._common_options(o, ids, keep, scale, on_bad_id, padding_idx, seq_len, offset, sequence_offsets,
                             dropout, seed)
        if isinstance(positions, (Matrix, np.ndarray, list, tuple)):
            ptab = self._as_matrix(positions, "positions")
            keep.append(ptab)
            o.positions = POSITIONS["table"]
            o.position_table = ctypes.pointer(ptab._m)
        elif isinstance(positions, str) and positions.lower() == "table":
            raise invalid("positions", "takes the learned table itself (a Matrix or an array), not 'table'")
        else:
            o.positions = choice(POSITIONS, positions, "positions")
        o.sinusoid = _lib.Sinusoid_t(base=real(base, "base"), exponent=choice(EXPONENTS, exponent, "exponent"),
                                     layout=choice(LAYOUTS, layout, "layout"))
        if layer:
            self._layer_options(o, keep, **layer)
        return o

    def _norm_param(self, x: Any, argument: str) -> Optional[Matrix]:
        """A norm weight or bias: a Matrix as it is, or a (D,) / (1, D) array as a 1 x D F32 matrix."""
        if x is None or isinstance(x, Matrix):
            return x
        host, _, _ = host_values(x, argument)
        if host.ndim not in (1, 2) or (host.ndim == 2 and host.shape[0] != 1):
            raise invalid(argument, "is (D,) or (1, D), not of shape %s" % (host.shape,))
        return self.matrix(host.reshape(1, -1), "f32")

    def _layer_options(self, o: Any, keep: List[Any], segment_table: Any = None, segment_ids: Any = None,
                       norm: Any = None, norm_weight: Any = None, norm_bias: Any = None,
                       norm_eps: Any = 1e-5) -> None:
        """BERT's fields of clembed_embed_options (uploads kept alive in `keep`)."""
        if segment_table is not None:
            st = self._as_matrix(segment_table, "segment_table")
            keep.append(st)
            o.segment_table = ctypes.pointer(st._m)
        sids = self._as_ids(segment_ids, "segment_ids")
        if sids is not None:
            keep.append(sids)
            o.segment_ids = ctypes.pointer(sids._ids)
        o.norm.kind = choice(NORMS, norm, "norm")
        o.norm.eps = real(norm_eps, "norm_eps")
        for name, x in (("norm_weight", norm_weight), ("norm_bias", norm_bias)):
            m = self._norm_param(x, name)
            if m is not None:
                keep.append(m)
                setattr(o.norm, name[5:], ctypes.pointer(m._m))

    def _common_options(self, o: Any, ids: Ids, keep: List[Any], scale: Any, on_bad_id: Any, padding_idx: Any,
                        seq_len: Any, offset: Any, sequence_offsets: Any, dropout: Any, seed: Any) -> None:
        """The fields clembed_embed_options and clembed_backward_options share (uploads kept
        alive in `keep`)."""
        o.scale = real(scale, "scale")
        o.policy = choice(POLICIES, on_bad_id, "on_bad_id")
        o.padding_idx = self._padding(padding_idx)
        o.seq_len = self._seq_len(seq_len, ids)
        o.position_offset = _count(offset, "offset")
        so = self._as_ids(sequence_offsets, "sequence_offsets")
        if so is not None:
            keep.append(so)
            o.sequence_offsets = ctypes.pointer(so._ids)
        o.dropout = real(dropout, "dropout")
        o.dropout_seed = _seed(seed)

    @api("Context.embed", "clembed_embed")
    def embed(self, table: Any, ids: Any, scale: Union[float, str] = 1.0, positions: Any = None,
              base: float = 10000.0, exponent: str = "pair", layout: str = "interleaved", offset: int = 0,
              seq_len: Optional[int] = None, sequence_offsets: Any = None, padding_idx: Optional[int] = None,
              on_bad_id: str = "check", dropout: float = 0.0, seed: int = 0, out_dtype: DTypeLike = "f32",
              out: Optional[Matrix] = None, *, wait_for: WaitFor = None, segment_table: Any = None,
              segment_ids: Any = None, norm: Optional[str] = None, norm_weight: Any = None, norm_bias: Any = None,
              norm_eps: float = 1e-5, padding_keeps_row: bool = False) -> Matrix:
        """The fused forward out[i] = dropout(scale * table[ids[i]] + P[p]), shape ids.shape + (cols,).

        scale: a number or 'sqrt' (sqrt(cols)). positions: None, 'sinusoid' (base, exponent
        'pair'|'index', layout 'interleaved'|'halves') or a Matrix / array of learned
        positions. Token i is at position first_b + i % seq_len, first_b =
        sequence_offsets[b] or offset. seq_len None: the last dimension of 2-D (or more) ids,
        0 (one sequence) for 1-D ids. padding_idx: None, or a row (negative counts from the
        end) whose token row counts as zero, or with padding_keeps_row=True is read as
        stored (PyTorch's F.embedding; either way it gets no gradient in the backward).
        on_bad_id: 'check' (deferred IndexOutOfRangeError), 'clamp', 'zero', 'wrap'.
        dropout, seed: inverted dropout with the Philox mask of seed. out_dtype 'f32', 'f16'
        or 'bf16' (or out, a Matrix to write).

        BERT's input layer, in the same pass: segment_table (token types x cols, a Matrix or
        array) and segment_ids (ids' shape; None: type 0 everywhere) add segment_table[s]
        after the positions; norm None, 'layer' (LayerNorm) or 'rms' (RMSNorm) of that sum,
        before dropout, with norm_weight and norm_bias (NumPy (cols,) or (1, cols), or a
        Matrix; None: 1 and 0; 'rms' has no bias) and norm_eps (BERT uses 1e-12).
        """
        table = self._as_matrix(table, "table")
        ids = self._as_ids(ids)
        keep: List[Any] = []
        layer = dict(segment_table=segment_table, segment_ids=segment_ids, norm=norm, norm_weight=norm_weight,
                     norm_bias=norm_bias, norm_eps=norm_eps)
        o = self._embed_options(table, ids, keep, scale, positions, base, exponent, layout, offset, seq_len,
                                sequence_offsets, padding_idx, on_bad_id, dropout, seed, layer, padding_keeps_row)
        out = self._out(out, ids.count, table.cols, out_dtype, ids.shape + (table.cols,))
        self._run("clembed_embed", lib.clembed_embed,
                  (self._live, byref(table._m), byref(ids._ids), byref(o), byref(out._m)), wait_for, [out])
        return out

    _GRADS = ("table", "position_table", "segment_table", "norm_weight", "norm_bias")

    @api("Context.embed_backward", "clembed_embed_backward")
    def embed_backward(self, grad: Any, table: Any, ids: Any, *, grads: Optional[Dict[str, Matrix]] = None,
                       scale: Union[float, str] = 1.0, positions: Any = None, base: float = 10000.0,
                       exponent: str = "pair", layout: str = "interleaved", offset: int = 0,
                       seq_len: Optional[int] = None, sequence_offsets: Any = None,
                       padding_idx: Optional[int] = None, on_bad_id: str = "check", dropout: float = 0.0,
                       seed: int = 0, segment_table: Any = None, segment_ids: Any = None, norm: Optional[str] = None,
                       norm_weight: Any = None, norm_bias: Any = None, norm_eps: float = 1e-5,
                       padding_keeps_row: bool = False, wait_for: WaitFor = None) -> Dict[str, Matrix]:
        """The backward of embed with the same options (clembed_embed_backward): grad is the
        gradient of its output (ids.shape + (cols,)); the forward's rows are recomputed and
        its dropout replayed. Returns the gradients, a dict of F32 Matrices with the keys
        'table', 'position_table' (a learned positions table), 'segment_table',
        'norm_weight' and 'norm_bias' (when the forward has them). grads: the Matrices to add
        into (any of those keys), or None for new zeroed ones of every part the forward
        has. Every sum over tokens runs in ascending token order (the same bits on every
        device); without a norm, 'table' and 'position_table' are Context.backward's bits."""
        fn = require("clembed_embed_backward", "Context.embed_backward")
        table = self._as_matrix(table, "table")
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        keep: List[Any] = []
        layer = dict(segment_table=segment_table, segment_ids=segment_ids, norm=norm, norm_weight=norm_weight,
                     norm_bias=norm_bias, norm_eps=norm_eps)
        o = self._embed_options(table, ids, keep, scale, positions, base, exponent, layout, offset, seq_len,
                                sequence_offsets, padding_idx, on_bad_id, dropout, seed, layer, padding_keeps_row)
        if grads is None:   # every part the forward has, zeroed
            shapes = {"table": (table.rows, table.cols)}
            if o.position_table and o.positions == POSITIONS["table"]:
                shapes["position_table"] = (o.position_table.contents.rows, table.cols)
            if o.segment_table:
                shapes["segment_table"] = (o.segment_table.contents.rows, table.cols)
            if o.norm.weight:
                shapes["norm_weight"] = (1, table.cols)
            if o.norm.bias:
                shapes["norm_bias"] = (1, table.cols)
            grads = {k: self.empty(r, c) for k, (r, c) in shapes.items()}
        elif not isinstance(grads, dict):
            raise wrong_type("grads", "must be a dict of clembed.Matrix (keys %s) or None, not %s"
                             % (", ".join(self._GRADS), type(grads).__name__))
        g = _lib.EmbedGrads_t()
        for k, m in grads.items():
            if k not in self._GRADS:
                raise invalid("grads", "has the key %r; the gradients are %s" % (k, ", ".join(self._GRADS)))
            if m is None:
                continue
            if not isinstance(m, Matrix):
                raise wrong_type("grads", "[%r] must be a clembed.Matrix, not %s" % (k, type(m).__name__))
            setattr(g, k, ctypes.pointer(m._m))
        self._run("clembed_embed_backward", fn,
                  (self._live, byref(grad._m), byref(table._m), byref(ids._ids), byref(o), byref(g)), wait_for,
                  list(grads.values()))
        return grads

    def _backward_options(self, scale: Any, padding_idx: Any, scale_grad_by_freq: Any, deterministic: Any,
                          accumulate: Any, on_bad_id: Any, seq_len: Any, offset: Any, sequence_offsets: Any,
                          position_grad: Any, dropout: Any, seed: Any, ids: Ids, keep: List[Any]) -> Any:
        """clembed_backward_options from the backward's arguments (uploads kept in `keep`)."""
        o = lib.clembed_backward_defaults()
        self._common_options(o, ids, keep, scale, on_bad_id, padding_idx, seq_len, offset, sequence_offsets,
                             dropout, seed)
        o.scale_grad_by_freq = 1 if scale_grad_by_freq else 0
        o.deterministic = 1 if deterministic else 0
        o.accumulate = 1 if accumulate else 0
        if position_grad is not None:
            if not isinstance(position_grad, Matrix):
                raise wrong_type("position_grad", "must be a clembed.Matrix, not %s" % type(position_grad).__name__)
            o.position_grad = ctypes.pointer(position_grad._m)
        return o

    @api("Context.backward", "clembed_backward")
    def backward(self, grad: Any, ids: Any, vocab: int, scale: float = 1.0, padding_idx: Optional[int] = None,
                 scale_grad_by_freq: bool = False, deterministic: bool = True, out: Optional[Matrix] = None, *,
                 accumulate: bool = True, on_bad_id: str = "check", seq_len: Optional[int] = None,
                 offset: int = 0, sequence_offsets: Any = None, position_grad: Optional[Matrix] = None,
                 dropout: float = 0.0, seed: int = 0, wait_for: WaitFor = None) -> Matrix:
        """The table gradient (vocab x cols, F32): out[v] (+)= scale * sum of grad[i] over
        ids[i] == v. grad has ids.shape + (cols,) (or ids.count rows). With out None a
        new matrix (rows no id touches are 0); with out given, added into it
        (accumulate=False overwrites it)."""
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        if out is None:   # a new matrix, overwritten whole (untouched rows become 0)
            accumulate = False
        out = self._out(out, _count(vocab, "vocab"), grad.cols, "f32", None)
        keep: List[Any] = []
        o = self._backward_options(scale, padding_idx, scale_grad_by_freq, deterministic, accumulate, on_bad_id,
                                   seq_len, offset, sequence_offsets, position_grad, dropout, seed, ids, keep)
        self._run("clembed_backward", lib.clembed_backward,
                  (self._live, byref(grad._m), byref(ids._ids), byref(o), byref(out._m)), wait_for,
                  [out, position_grad])
        return out

    @api("Context.sgd", "clembed_sgd_update")
    def sgd(self, table: Matrix, grad: Any, ids: Any, lr: float, *, scale: float = 1.0,
            padding_idx: Optional[int] = None, scale_grad_by_freq: bool = False, on_bad_id: str = "check",
            seq_len: Optional[int] = None, offset: int = 0, sequence_offsets: Any = None,
            position_grad: Optional[Matrix] = None, dropout: float = 0.0, seed: int = 0,
            wait_for: WaitFor = None) -> Matrix:
        """In place: table[v] -= lr * grad[v] for the rows v in ids (the fused sparse
        step of clembed_sgd_update). Returns table (its .event set)."""
        if not isinstance(table, Matrix):
            raise wrong_type("table", "must be a clembed.Matrix (sgd updates it in place), not %s"
                             % type(table).__name__)
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        keep: List[Any] = []
        o = self._backward_options(scale, padding_idx, scale_grad_by_freq, True, True, on_bad_id, seq_len,
                                   offset, sequence_offsets, position_grad, dropout, seed, ids, keep)
        self._run("clembed_sgd_update", lib.clembed_sgd_update,
                  (self._live, byref(grad._m), byref(ids._ids), real(lr, "lr"), byref(o), byref(table._m)),
                  wait_for, [table, position_grad])
        return table

    @api("Context.init")
    def init(self, m: Matrix, kind: str = "normal", *, mean: float = 0.0, std: float = 1.0, low: float = -1.0,
             high: float = 1.0, seed: int = 0, wait_for: WaitFor = None) -> Matrix:
        """Fills m in place from Philox(seed, r*cols + c): kind 'normal' (mean, std) or
        'uniform' (low, high). Returns m."""
        if not isinstance(m, Matrix):
            raise wrong_type("m", "must be a clembed.Matrix, not %s" % type(m).__name__)
        k = choice({"normal": 0, "uniform": 1}, kind, "kind")
        s = _seed(seed)
        if k == 0:
            self._run("clembed_matrix_init_normal", lib.clembed_matrix_init_normal,
                      (self._live, byref(m._m), real(mean, "mean"), real(std, "std"), s), wait_for, [m])
        else:
            self._run("clembed_matrix_init_uniform", lib.clembed_matrix_init_uniform,
                      (self._live, byref(m._m), real(low, "low"), real(high, "high"), s), wait_for, [m])
        return m

    # --- RoPE (clembed_rope_*)
    @staticmethod
    def _rope(head_dim: int, opts: Dict[str, Any]) -> Any:
        r = require("clembed_rope_defaults", "RoPE")()
        r.head_dim = _count(head_dim, "head_dim")
        for k, v in opts.items():
            if k == "layout":
                r.layout = choice(ROPE_LAYOUTS, v, "layout")
            elif k == "scaling":
                r.scaling = choice(ROPE_SCALINGS, v, "scaling")
            elif k in ("rotary_dim", "original_max_position"):
                setattr(r, k, _count(v, k))
            elif k in ("base", "factor", "low_freq_factor", "high_freq_factor", "beta_fast",
                       "beta_slow", "attention_factor"):
                setattr(r, k, real(v, k))
            else:
                raise wrong_type(k, "is not a RoPE option (base, rotary_dim, layout, scaling, factor, "
                                 "original_max_position, low_freq_factor, high_freq_factor, beta_fast, "
                                 "beta_slow, attention_factor)")
        return r

    @api("Context.rope_cache", "clembed_rope_cache")
    def rope_cache(self, length: int, head_dim: int, first: int = 0, *, out_dtype: DTypeLike = "f32",
                   out: Optional[Matrix] = None, wait_for: WaitFor = None, **rope_options: Any) -> Matrix:
        """The cos/sin cache (length x rotary_dim): a*cos(p*w_k) in column k, a*sin(p*w_k)
        in column R/2 + k. rope_options: base, rotary_dim, layout ('neox'|'gptj'),
        scaling ('none'|'linear'|'ntk'|'yarn'|'llama3'), factor, original_max_position,
        low_freq_factor, high_freq_factor, beta_fast, beta_slow, attention_factor."""
        fn = require("clembed_rope_cache", "Context.rope_cache")
        r = self._rope(head_dim, rope_options)
        R = r.rotary_dim or r.head_dim
        out = self._out(out, _count(length, "length"), R, out_dtype, None)
        self._run("clembed_rope_cache", fn, (self._live, byref(r), _count(first, "first"), byref(out._m)),
                  wait_for, [out])
        return out

    @api("Context.rope", "clembed_rope_apply")
    def rope(self, x: Any, head_dim: int, positions: Any = None, offset: int = 0, inverse: bool = False, *,
             seq_len: Optional[int] = None, out: Optional[Matrix] = None, out_dtype: DTypeLike = "f32",
             wait_for: WaitFor = None, **rope_options: Any) -> Matrix:
        """Rotary embedding applied to x: a Matrix (T x C) or an array (T, C),
        (T, heads, head_dim) or (B, S, heads, head_dim) (then seq_len = S). Row i is at
        positions[i], or offset + i % seq_len. out may be x (in place). The result has
        x's shape."""
        fn = require("clembed_rope_apply", "Context.rope")
        r = self._rope(head_dim, rope_options)
        if isinstance(x, Matrix):
            xm = x
            shape = x.shape
        else:
            a, _, _ = host_values(x, "x")
            if a.ndim < 2:
                raise invalid("x", "has at least 2 dimensions, not shape %s" % (a.shape,))
            shape = a.shape
            if seq_len is None and a.ndim == 4:
                seq_len = a.shape[1]
            rows = int(np.prod(a.shape[:-2])) if a.ndim >= 3 else a.shape[0]
            xm = self.matrix(a.reshape(rows, -1))
        pos = self._as_ids(positions, "positions")
        out = self._out(out, xm.rows, xm.cols, out_dtype, shape)
        self._run("clembed_rope_apply", fn,
                  (self._live, byref(r), byref(xm._m), byref(pos._ids) if pos is not None else None,
                   _count(seq_len or 0, "seq_len"), _count(offset, "offset"), 1 if inverse else 0, byref(out._m)),
                  wait_for, [out])
        return out

    # --- bags of ids (clembed_embedding_bag(s), clembed_bag_backward, clembed_renorm)
    def _new_ids(self, shape: Tuple[int, ...]) -> Ids:
        """Ids (int64) written by the device, of the given shape."""
        n = int(np.prod(shape)) if shape else 0
        return Ids(self, Ids_t(buffer=self._buffer(8 * n), offset=0, count=n, type=1), owned=True, shape=shape)

    def _bags(self, ids: Ids, offsets: Any, include_last_offset: Any, keep: List[Any]) -> Tuple[Optional[Ids], int]:
        """(the CSR offsets on the device, or None for bags of one size; the number of bags)
        from PyTorch's convention: 2-D ids are bags of one size (offsets None); 1-D ids take
        offsets of B starts, or of B + 1 entries with include_last_offset (the last one the
        number of ids). An Ids of B starts is read back to append that last entry."""
        if len(ids.shape) == 2:
            if offsets is not None:
                raise invalid("offsets", "must be None for 2-D ids (each row of ids is a bag)")
            return None, ids.shape[0]
        if len(ids.shape) != 1:
            raise invalid("ids", "are 1-D (with offsets) or 2-D (a bag per row), not of shape %s" % (ids.shape,))
        if offsets is None:
            raise invalid("offsets", "is needed with 1-D ids (or pass 2-D ids, a bag per row)")
        if isinstance(offsets, Ids):
            if include_last_offset:
                if offsets.count == 0:
                    raise invalid("offsets", "has no entry; with include_last_offset it holds bags + 1")
                keep.append(offsets)
                return offsets, offsets.count - 1
            host = offsets.numpy()
        else:
            host = index_array(offsets, "offsets")
        if host.ndim != 1:
            raise invalid("offsets", "is 1-D, not of shape %s" % (host.shape,))
        if include_last_offset:
            if host.size == 0:
                raise invalid("offsets", "has no entry; with include_last_offset it holds bags + 1")
            csr = host
        else:
            csr = np.append(host.astype(np.int64), np.int64(ids.count))
        d = self._upload_ids(csr, "offsets")
        keep.append(d)
        return d, csr.size - 1

    def _bag_options(self, ids: Ids, mode: Any, per_sample_weights: Any, padding_idx: Any, on_bad_id: Any,
                     max_rows: Any, keep: List[Any]) -> Any:
        """clembed_bag_options (uploads kept alive in `keep`); max_rows an Ids or an
        integer array (the forward's, for the MAX backward)."""
        o = lib.clembed_bag_defaults()
        o.mode = choice(BAG_MODES, mode, "mode")
        o.policy = choice(POLICIES, on_bad_id, "on_bad_id")
        o.padding_idx = self._padding(padding_idx)
        if per_sample_weights is not None:
            if isinstance(per_sample_weights, Matrix):
                w = per_sample_weights
            else:
                host, _, _ = host_values(per_sample_weights, "per_sample_weights")
                if host.size != ids.count:
                    raise invalid("per_sample_weights", "has %d values for %d ids (one weight per id)"
                                  % (host.size, ids.count))
                w = self.matrix(host.reshape(ids.count, 1), "f32")
            keep.append(w)
            o.per_sample_weights = ctypes.pointer(w._m)
        if max_rows is not None:
            mr = max_rows if isinstance(max_rows, Ids) else self._upload_ids(index_array(max_rows, "max_rows"),
                                                                             "max_rows")
            keep.append(mr)
            o.max_rows = ctypes.pointer(mr._ids)
        return o

    @api("Context.embedding_bag", "clembed_embedding_bag")
    def embedding_bag(self, table: Any, ids: Any, offsets: Any = None, mode: str = "mean",
                      per_sample_weights: Any = None, padding_idx: Optional[int] = None,
                      include_last_offset: bool = False, on_bad_id: str = "check", out_dtype: DTypeLike = "f32", *,
                      out: Optional[Matrix] = None, wait_for: WaitFor = None) -> Matrix:
        """Bags of ids pooled into a row each (PyTorch's F.embedding_bag): a (bags x cols)
        Matrix. ids 2-D: a bag per row (offsets None); ids 1-D: offsets of the B bags'
        starts, or B + 1 entries with include_last_offset. mode 'sum', 'mean' or 'max',
        per column over the bag's ids in order (an empty bag gives zeros);
        per_sample_weights (the shape of ids, mode 'sum'): acc = fma(w, t, acc); ids equal
        to padding_idx are left out (negative counts from the end). table any dtype, the
        block-quantized ones included. mode 'max' also sets .max_rows on the result: the
        table row that gave each element, -1 for an empty bag (a NumPy array, read back at
        once, so the call waits for the device), and .max_rows_ids (the same on the device,
        for Context.bag_backward)."""
        fn = require("clembed_embedding_bag", "Context.embedding_bag")
        table = self._as_matrix(table, "table")
        ids = self._as_ids(ids)
        keep: List[Any] = []
        off, bags = self._bags(ids, offsets, include_last_offset, keep)
        o = self._bag_options(ids, mode, per_sample_weights, padding_idx, on_bad_id, None, keep)
        mr = None
        if o.mode == BAG_MODES["max"]:
            mr = self._new_ids((bags, table.cols))
            o.max_rows = ctypes.pointer(mr._ids)
        out = self._out(out, bags, table.cols, out_dtype, None)
        self._run("clembed_embedding_bag", fn,
                  (self._live, byref(table._m), byref(ids._ids), byref(off._ids) if off is not None else None,
                   byref(o), byref(out._m)), wait_for, [out])
        if mr is not None:
            out.max_rows_ids = mr
            out.max_rows = mr.numpy()
        return out

    _BAG_KEYS = ("table", "ids", "offsets", "mode", "per_sample_weights", "padding_idx", "include_last_offset",
                 "on_bad_id")

    def _bag_features(self, features: Any, keep: List[Any], with_max_rows: bool) -> Tuple[Any, int, int, List[Any]]:
        """(clembed_bag_feature array, their count, the bags, MAX features' max_rows Ids)
        from dicts of embedding_bag's keyword arguments plus 'table', 'ids', 'offsets'."""
        if isinstance(features, dict) or not isinstance(features, (list, tuple)):
            raise wrong_type("features", "must be a list of dicts (one per feature), not %s" % type(features).__name__)
        n = len(features)
        arr = _lib.sized_array(_lib.BagFeature_t, n)   # each struct_size set (ctypes calls no __init__ here)
        bags: Optional[int] = None
        max_rows: List[Any] = []
        for f, d in enumerate(features):
            if not isinstance(d, dict):
                raise wrong_type("features", "features[%d] must be a dict, not %s" % (f, type(d).__name__))
            unknown = sorted(set(d) - set(self._BAG_KEYS))
            if unknown or "table" not in d or "ids" not in d:
                raise invalid("features", "features[%d] has the keys %s: it takes %s ('table' and 'ids' needed)"
                              % (f, sorted(d), ", ".join(self._BAG_KEYS)))
            table = self._as_matrix(d["table"], "table")
            ids = self._as_ids(d["ids"])
            keep += [table, ids]
            off, b = self._bags(ids, d.get("offsets"), d.get("include_last_offset", False), keep)
            if bags is None:
                bags = b
            elif b != bags:
                raise invalid("features", "features[%d] has %d bags and features[0] %d: every feature has the "
                              "same bags" % (f, b, bags))
            o = self._bag_options(ids, d.get("mode", "mean"), d.get("per_sample_weights"), d.get("padding_idx"),
                                  d.get("on_bad_id", "check"), None, keep)
            mr = None
            if o.mode == BAG_MODES["max"] and with_max_rows:
                mr = self._new_ids((b, table.cols))
                o.max_rows = ctypes.pointer(mr._ids)
            max_rows.append(mr)
            arr[f].table = ctypes.pointer(table._m)
            arr[f].ids = ctypes.pointer(ids._ids)
            arr[f].offsets = ctypes.pointer(off._ids) if off is not None else None
            arr[f].options = o
        return arr, n, bags or 0, max_rows

    @api("Context.embedding_bags", "clembed_embedding_bags")
    def embedding_bags(self, features: Sequence[Dict[str, Any]], out_dtype: DTypeLike = "f32", *,
                       out: Optional[Matrix] = None, wait_for: WaitFor = None) -> Matrix:
        """Every feature of a batch in one call (a small constant number of launches):
        features are dicts of embedding_bag's keyword arguments plus 'table', 'ids' (and
        'offsets'); every feature has the same number of bags. The result is bags x (the
        features' cols together), feature f's bags in its own block of columns, in order:
        each block has the bits embedding_bag gives for that feature alone. Tables may be
        shared. MAX features' max_rows are in .max_rows_ids (a list: an Ids per feature,
        None for the others)."""
        fn = require("clembed_embedding_bags", "Context.embedding_bags")
        keep: List[Any] = []
        arr, n, bags, max_rows = self._bag_features(features, keep, True)
        cols = sum(arr[f].table.contents.cols for f in range(n))
        out = self._out(out, bags, cols, out_dtype, None)
        self._run("clembed_embedding_bags", fn, (self._live, arr, n, byref(out._m)), wait_for, [out])
        out.max_rows_ids = max_rows
        return out

    @api("Context.bag_backward", "clembed_bag_backward")
    def bag_backward(self, grad: Any, ids: Any, offsets: Any = None, *, vocab: Optional[int] = None,
                     table: Optional[Matrix] = None, mode: str = "mean", per_sample_weights: Any = None,
                     padding_idx: Optional[int] = None, include_last_offset: bool = False,
                     on_bad_id: str = "check", max_rows: Any = None, grad_weights: bool = False,
                     out: Optional[Matrix] = None, wait_for: WaitFor = None) -> Matrix:
        """The table gradient of embedding_bag (vocab x cols, F32; vocab defaults to
        table.rows): each id's row gets its bag's row of grad (bags x cols) as it is (sum),
        times its weight, or divided by its bag's count (mean), folded in ascending id
        position; under 'max', column c of a bag's gradient goes to the row max_rows
        names (the forward's .max_rows or .max_rows_ids, needed). With out None a new
        matrix; with out given, added into it. grad_weights=True (mode 'sum', table
        needed) also sets .grad_weights on the result: the gradient of per_sample_weights,
        the shape of ids (NumPy, read back at once)."""
        fn = require("clembed_bag_backward", "Context.bag_backward")
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        if table is not None and not isinstance(table, Matrix):
            table = self._as_matrix(table, "table")
        keep: List[Any] = []
        off, _ = self._bags(ids, offsets, include_last_offset, keep)
        o = self._bag_options(ids, mode, per_sample_weights, padding_idx, on_bad_id, max_rows, keep)
        if out is None:
            if vocab is None and table is None:
                raise invalid("vocab", "is needed without a table (the gradient's rows)")
            out = self.empty(_count(vocab, "vocab") if vocab is not None else table.rows, grad.cols)
        gw = self.empty(ids.count, 1) if grad_weights else None
        self._run("clembed_bag_backward", fn,
                  (self._live, byref(grad._m), byref(ids._ids), byref(off._ids) if off is not None else None,
                   byref(o), byref(table._m) if table is not None else None, byref(out._m),
                   byref(gw._m) if gw is not None else None), wait_for, [out, gw])
        if gw is not None:
            out.grad_weights = gw.numpy().reshape(ids.shape)
        return out

    @api("Context.renorm", "clembed_renorm")
    def renorm(self, table: Matrix, ids: Any, max_norm: float, norm_type: float = 2.0, *,
               wait_for: WaitFor = None) -> Matrix:
        """In place, as nn.Embedding(max_norm=...) does (PyTorch's embedding_renorm_): every
        distinct row in ids whose norm_type-norm exceeds max_norm is scaled by
        max_norm / (norm + 1e-7); other rows are not touched. norm_type > 0 or
        float('inf'). Returns table (f32, f16 or bf16)."""
        fn = require("clembed_renorm", "Context.renorm")
        if not isinstance(table, Matrix):
            raise wrong_type("table", "must be a clembed.Matrix (renormed in place), not %s" % type(table).__name__)
        ids = self._as_ids(ids)
        self._run("clembed_renorm", fn, (self._live, byref(table._m), byref(ids._ids), real(max_norm, "max_norm"),
                                         real(norm_type, "norm_type")), wait_for, [table])
        return table

    # --- files (clembed_io.h)
    @api("Context.load", "clembed_matrix_load")
    def load(self, path: Union[str, "os.PathLike[str]"], name: Optional[str] = None,
             dtype: DTypeLike = None) -> Matrix:
        """Loads a tensor of a .npy, .safetensors or .gguf file (by content) as a Matrix.
        name None: the file's only tensor (GGUF: token_embd.weight). dtype None: the
        stored type."""
        load = require("clembed_matrix_load", "Context.load")
        with _File(path) as f:
            if dtype is None:
                # the stored type of the tensor clembed_matrix_load takes; where there is none
                # (no such tensor, several and no name, a type clembed cannot load), the call
                # below refuses with C's own message (the file's tensors, the type's name)
                i = f.lookup(name)
                stored = f.info(i).dtype if i is not None else -1
                code = stored if stored >= 0 else DTYPES["f32"]
            else:
                code = dtype_code(dtype)
            m = Matrix_t()
            st = load(self._live, f.h, name.encode() if name is not None else None, code, byref(m))
            self._check(st, "clembed_matrix_load")
            return Matrix(self, m, owned=True)

    @api("Context.load_ids", "clembed_ids_load")
    def load_ids(self, path: Union[str, "os.PathLike[str]"], name: Optional[str] = None) -> Ids:
        """Loads an integer tensor (int32 or int64, any shape) of a .npy, .safetensors or
        .gguf file as Ids (shape kept). name None: the file's only tensor."""
        load = require("clembed_ids_load", "Context.load_ids")
        with _File(path) as f:
            shape = None
            if name is not None or f.count() == 1:
                t = f.info(f.index(name))
                shape = tuple(int(t.shape[k]) for k in range(t.ndim))
            i = Ids_t()
            st = load(self._live, f.h, name.encode() if name is not None else None, byref(i))
            self._check(st, "clembed_ids_load")
            return Ids(self, i, owned=True, shape=shape if shape is not None else (i.count,))


class _File:
    def __init__(self, path: Any) -> None:
        opener = require("clembed_file_open", "reading model files")
        self.path = os.fspath(path)
        self.h = ctypes.c_void_p()
        st = opener(self.path.encode(), byref(self.h))
        if st != 0:
            msg = lib.clembed_last_error_message() if _lib.has("clembed_last_error_message") else b""
            raise from_status(st, msg.decode(errors="replace") if msg else "cannot open %s" % self.path,
                              "clembed_file_open", "path")

    def __enter__(self) -> "_File":
        return self

    def __exit__(self, *exc: Any) -> None:
        lib.clembed_file_close(self.h)
        self.h = ctypes.c_void_p()

    def _fail(self, st: int, op: str) -> None:
        msg = lib.clembed_last_error_message()
        raise from_status(st, msg.decode(errors="replace") if msg else "", op)

    def count(self) -> int:
        return int(lib.clembed_file_tensor_count(self.h))

    def info(self, i: int) -> Any:
        t = _lib.TensorInfo_t()
        st = lib.clembed_file_tensor_info(self.h, i, byref(t))
        if st != 0:
            self._fail(st, "clembed_file_tensor_info")
        return t

    def lookup(self, name: Optional[str]) -> Optional[int]:
        """The index of the tensor clembed_matrix_load takes for `name` (None: the only
        one, or a GGUF file's token_embd.weight), or None where it takes none."""
        n = self.count()
        if name is None and n == 1:
            return 0
        i = ctypes.c_size_t()
        key = name if name is not None else "token_embd.weight"
        return i.value if lib.clembed_file_find(self.h, key.encode(), byref(i)) == 0 else None

    def index(self, name: Optional[str]) -> int:
        if name is None:
            n = self.count()
            if n == 1:
                return 0
            name = "token_embd.weight"
        i = ctypes.c_size_t()
        st = lib.clembed_file_find(self.h, name.encode(), byref(i))
        if st != 0:
            self._fail(st, "clembed_file_find")
        return i.value


@api("inspect", "clembed_file_open")
def inspect(path: Union[str, "os.PathLike[str]"]) -> List[Dict[str, Any]]:
    """The tensors of a .npy, .safetensors or .gguf file: a list of
    dict(name, dtype, shape, bytes); dtype is a clembed dtype name, or the file's own
    type name when clembed cannot use the type."""
    with _File(path) as f:
        out = []
        for i in range(f.count()):
            t = f.info(i)
            out.append(dict(name=t.name.decode(errors="replace") if t.name else "",
                            dtype=DTYPE_NAMES.get(t.dtype) if t.dtype >= 0
                            else (t.type_name.decode(errors="replace") if t.type_name else "?"),
                            shape=tuple(int(t.shape[k]) for k in range(t.ndim)),
                            bytes=int(t.bytes)))
        return out


class Device:
    """One OpenCL device as clembed sees it (clembed_devices)."""

    def __init__(self, spec: str, platform: str, name: str, type: int, is_default: bool,
                 global_mem_bytes: int, max_alloc_bytes: int) -> None:
        self.spec, self.platform, self.name, self.type = spec, platform, name, type
        self.is_default = is_default
        self.global_mem_bytes, self.max_alloc_bytes = global_mem_bytes, max_alloc_bytes

    @property
    def type_name(self) -> str:
        """'cpu', 'gpu', 'accelerator', 'custom' (comma-separated when several)."""
        names = [n for bit, n in ((2, "cpu"), (4, "gpu"), (8, "accelerator"), (16, "custom"))
                 if self.type & bit]
        return ",".join(names) or "default"

    def __repr__(self) -> str:
        return ("Device(spec=%r, platform=%r, name=%r, type=%r, is_default=%r)"
                % (self.spec, self.platform, self.name, self.type_name, self.is_default))


@api("devices", "clembed_devices")
def devices() -> List[Device]:
    """Every OpenCL device, in `clembed devices` order: [Device(spec, platform, name,
    type, is_default, global_mem_bytes, max_alloc_bytes)]."""
    fn = require("clembed_devices", "devices")
    n = ctypes.c_size_t()
    st = fn(None, 0, byref(n))
    if st != 0:
        raise _no_context_error(st, "clembed_devices")
    arr = (_lib.DeviceInfo_t * max(n.value, 1))()
    st = fn(arr, n.value, byref(n))
    if st != 0:
        raise _no_context_error(st, "clembed_devices")
    return [Device(d.spec.decode(), d.platform.decode(errors="replace"), d.name.decode(errors="replace"),
                   int(d.type), bool(d.is_default), int(d.global_mem_bytes), int(d.max_alloc_bytes))
            for d in arr[:n.value]]


_default: Optional[Context] = None


def default_context() -> Context:
    """The context clembed.embed, Embedding and the plots use when given none (made on
    first use, on the default device; made again if it was closed)."""
    global _default
    if _default is None or _default.closed:
        _default = Context()
    return _default


@api("embed", "clembed_embed")
def embed(table: Any, ids: Any, **options: Any) -> np.ndarray:
    """clembed's forward, NumPy in and out: an array of shape ids.shape + (cols,), float16
    for out_dtype='f16', float32 otherwise ('bf16' values are exact in float32).

    Options as Context.embed; positions may be a NumPy array. A NumPy table is uploaded
    on every call (nothing is cached, so a changed array is always seen): for repeated
    calls, upload it once (W = ctx.matrix(table)) and call ctx.embed(W, ids), or pass that
    Matrix here (then its context is used)."""
    ctx = table.ctx if isinstance(table, Matrix) else default_context()
    out = ctx.embed(table, ids, **options)
    return out.numpy(None)
