"""ContextBase: what every operation of Context stands on. A context's lifetime (create,
from_queue, close), its device and queue, the error of a failed C call (_check) and the
device call that sets .event (_run), uploads and new matrices, and the conversion of the
arguments the operations share. The operations are mixins on it (_embed.py, _rope.py,
_bags.py, _train.py, _files.py), composed into clembed.Context in _core.py. Also the
devices (Device, devices()) and the errors of calls without a context.
"""
import ctypes
from typing import Any, List, Optional, Sequence, Tuple, Type, TypeVar

import numpy as np

from . import _lib
from ._lib import lib, Matrix_t, Ids_t, POLICIES
from ._errors import (Error, NoDeviceError, api, from_status, invalid, wrong_type, require, PY_CALLS,
                      ERR_NO_DEVICE, ERR_OUT_OF_MEMORY)
from ._args import (DTYPE_NAMES, BLOCKS, ROWWISE, cols_of_row_bytes, FLOAT_DTYPES, choice, dtype_code,
                    count as _count, integer, real,
                    seed as _seed, host_values, index_array)
from ._events import WaitFor, opencl, pyopencl_module, wrap_event, wait_list, raw_handle
from ._matrix import Matrix, Ids, DTypeLike, ArrayLike

byref = ctypes.byref
C = TypeVar("C", bound="ContextBase")

# ------------------------------------------------------------------ errors


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


# ------------------------------------------------------------------ devices

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


class ContextBase:
    """A clembed context's lifetime, facts, errors, data and argument conversion (the
    base of clembed.Context; see its docstring)."""

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
    def from_queue(cls: Type[C], queue: Any) -> C:
        """A context on an existing queue (retained; the caller's work on it is never
        waited for by clembed)."""
        self = cls.__new__(cls)
        self._h = ctypes.c_void_p()
        h = ctypes.c_void_p()
        st = lib.clembed_context_create_from_queue(raw_handle(queue, "queue"), byref(h))
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

    def __enter__(self: C) -> C:
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
    def tuning(self) -> str:
        """The tuning database's entries the device runs with and where each came from
        (clembed_context_tuning; docs/tuning.md); "" once closed."""
        s = lib.clembed_context_tuning(self._h)
        return s.decode(errors="replace") if s else ""

    @property
    def queue(self) -> int:
        """The cl_command_queue (int). With pyopencl, pyopencl_queue() wraps it."""
        return lib.clembed_context_queue(self._live)

    def pyopencl_queue(self) -> Any:
        """The context's queue as a pyopencl.CommandQueue (the one given to from_queue)."""
        cl = pyopencl_module()
        if cl is None:
            raise ImportError("clembed: pyopencl is not installed")
        if self._queue_obj is not None and not isinstance(self._queue_obj, int):
            return self._queue_obj
        return cl.CommandQueue.from_int_ptr(self.queue, retain=True)

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
        n, arr = wait_list(wait_for)
        ev = ctypes.c_void_p()
        st = fn(*args, n, arr, byref(ev))
        self._check(st, operation)
        e = wrap_event(ev.value)
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
    def matrix(self, array: ArrayLike, dtype: DTypeLike = None, cols: Optional[int] = None) -> Matrix:
        """Uploads a 2-D array.

        dtype None: the array's own, float32 -> 'f32', float16 -> 'f16' (ml_dtypes.bfloat16
        -> 'bf16'); a float64 or integer array is refused unless dtype says what to make of
        it (dtype='f32' converts, rounding to nearest). Python lists are float32 values.
        dtype: 'f32' 'f16' 'bf16' 'q8_0' 'q4_0' (the quantized ones from float values), any
        block type from uint8 blocks of shape (rows, row_bytes), FBGEMM's row-wise types
        ('i8_rowwise', 'i4_rowwise', 'i2_rowwise', 'i8_tbe', 'i4_tbe', 'i2_tbe', 'fp8_rowwise')
        from float values (FBGEMM's quantizers) or from their uint8 rows as FBGEMM stores
        them, or a NumPy float type. cols: the values of such uint8 rows, where their bytes
        leave a choice (fp8_rowwise pads its values to 4 bytes; default: the most)."""
        if isinstance(array, Matrix):
            array = array.numpy(None)
        host, host_code, code = host_values(array, "array", dtype)
        if host.ndim != 2:
            raise invalid("array", "a matrix is 2-D, this array has shape %s" % (host.shape,))
        name = DTYPE_NAMES[code]
        rows, ncols = host.shape
        if cols is not None and not (host.dtype == np.uint8 and name in ROWWISE):
            raise invalid("cols", "is for uint8 rows of a row-wise type, not a %s array as %s" % (host.dtype, name))
        if host.dtype == np.uint8 and name in ROWWISE:
            most = cols_of_row_bytes(name, ncols)
            if most < 0:
                raise invalid("array", "%s rows of %d bytes hold no whole number of values" % (name, ncols))
            if cols is not None:
                cols = _count(cols, "cols")
                if lib.clembed_dtype_row_bytes(code, cols) != ncols:
                    raise invalid("cols", "%s rows of %d values are %d bytes, not %d" % (
                        name, cols, lib.clembed_dtype_row_bytes(code, cols), ncols))
                most = cols
            ncols = most
        elif host.dtype == np.uint8 and BLOCKS[name][0] > 1:
            vals, nbytes = BLOCKS[name]
            if ncols % nbytes:
                raise invalid("array", "%s rows are whole blocks of %d bytes, not %d bytes" % (name, nbytes, ncols))
            ncols = ncols // nbytes * vals
        m = self.empty(rows, ncols, code)
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

    def _remap(self, remap: Any, keep: List[Any]) -> Optional[Ids]:
        """A pruned table's remap as Ids (kept alive in `keep`): an Ids as it is, or a 1-D
        integer array uploaded (int32 or int64 as it is; other integers as int64)."""
        if remap is None:
            return None
        if isinstance(remap, Ids):
            rm = remap
        else:
            host = index_array(remap, "remap")
            if host.ndim != 1:
                raise invalid("remap", "is 1-D (an entry per id of the unpruned table), not of shape %s"
                              % (host.shape,))
            rm = self._upload_ids(host, "remap")
        keep.append(rm)
        return rm

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
        st = opencl().clGetCommandQueueInfo(self.queue, 0x1090, ctypes.sizeof(c), byref(c), None)
        if st != 0:
            raise from_status(st, "clGetCommandQueueInfo(CL_QUEUE_CONTEXT) failed", "clGetCommandQueueInfo")
        return c.value or 0

    def _buffer(self, nbytes: int, host: Optional[np.ndarray] = None) -> int:
        """A new cl_mem on the context's cl_context, made without enqueueing anything
        (so it never waits behind work on a shared queue); host: bytes copied in."""
        err = ctypes.c_int()
        flags = 1 | (0x20 if host is not None else 0)    # CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR
        b = opencl().clCreateBuffer(self._cl_context(), flags, max(int(nbytes), 4),
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
