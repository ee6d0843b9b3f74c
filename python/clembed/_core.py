"""Context, Matrix, Ids and Event: the ctypes binding of include/clembed.h."""
import ctypes
import ctypes.util
import math
import os

import numpy as np

from . import _lib
from ._lib import lib, Matrix_t, Ids_t
from ._errors import Error, make, require, ERR_INVALID_ARGUMENT

try:  # optional
    import pyopencl as _cl
except Exception:  # pragma: no cover - depends on the machine
    _cl = None

byref = ctypes.byref

# ------------------------------------------------------------------ names

DTYPES = {"f32": 0, "f16": 1, "bf16": 2, "q8_0": 3, "q4_0": 4, "q4_k": 5, "q6_k": 6}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
# values per block and bytes per block (ggml's layouts); 1 and the element size for floats
_BLOCK = {"f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18),
          "q4_k": (256, 144), "q6_k": (256, 210)}
INDEX_TYPES = {"i32": 0, "i64": 1}
POLICIES = {"check": 0, "clamp": 1, "zero": 2, "wrap": 3}
EXPONENTS = {"pair": 0, "index": 1}
LAYOUTS = {"interleaved": 0, "halves": 1}
POSITIONS = {None: 0, "none": 0, "sinusoid": 1}
ROPE_LAYOUTS = {"neox": 0, "gptj": 1}
ROPE_SCALINGS = {None: 0, "none": 0, "linear": 1, "ntk": 2, "yarn": 3, "llama3": 4}


def _choice(table, value, what):
    key = value.lower() if isinstance(value, str) else value
    if key not in table:
        raise ValueError("clembed: %s must be one of %s, not %r"
                         % (what, ", ".join(repr(k) for k in table if k is not None), value))
    return table[key]


def _dtype_code(dtype):
    if isinstance(dtype, int) and dtype in DTYPE_NAMES:
        return dtype
    if isinstance(dtype, str):
        return _choice(DTYPES, dtype, "dtype")
    d = np.dtype(dtype)
    if d == np.float32:
        return 0
    if d == np.float16:
        return 1
    raise ValueError("clembed: dtype must be one of %s (or numpy.float32 / numpy.float16), not %r"
                     % (", ".join(DTYPES), dtype))


# ------------------------------------------------------------------ events

_opencl = None


def _ocl():
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

    def __init__(self, handle):
        self._h = handle

    @property
    def int_ptr(self):
        return self._h

    def wait(self):
        arr = (ctypes.c_void_p * 1)(self._h)
        st = _ocl().clWaitForEvents(1, arr)
        if st != 0:
            raise make(st, "clWaitForEvents failed", "clWaitForEvents")

    @property
    def command_execution_status(self):
        v = ctypes.c_int()
        _ocl().clGetEventInfo(self._h, 0x11D3, ctypes.sizeof(v), byref(v), None)
        return v.value

    def __del__(self):
        if getattr(self, "_h", None):
            try:
                _ocl().clReleaseEvent(self._h)
            except Exception:
                pass
            self._h = None


def _wrap_event(handle):
    if not handle:
        return None
    if _cl is not None:
        return _cl.Event.from_int_ptr(handle, retain=False)
    return Event(handle)


def _handle(obj, what):
    """A raw OpenCL handle (int) from a pyopencl object, a clembed object or an int."""
    if obj is None:
        return None
    if isinstance(obj, int):
        return obj
    if isinstance(obj, ctypes.c_void_p):
        return obj.value
    p = getattr(obj, "int_ptr", None)
    if p is None:
        raise TypeError("clembed: %s must be a pyopencl object or a raw OpenCL handle (int), not %r"
                        % (what, type(obj).__name__))
    return int(p)


def _wait_list(wait_for):
    if wait_for is None:
        return 0, None
    if not isinstance(wait_for, (list, tuple)):
        wait_for = [wait_for]
    hs = [_handle(e, "each wait_for event") for e in wait_for if e is not None]
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
    """

    def __init__(self, ctx, m, owned, keep=None, shape=None):
        self.ctx = ctx
        self._m = m
        self._owned = owned
        self._keep = keep
        self._shape = tuple(shape) if shape is not None else None
        self.event = None

    # --- construction
    @classmethod
    def from_buffer(cls, ctx, buf, rows, cols, dtype="f32", offset=0, ld=0):
        """A matrix in a buffer the caller owns: a pyopencl Buffer, a pyopencl.array.Array
        (its own offset is added) or a raw cl_mem int. offset and ld count elements
        (values for block-quantized types). The buffer is kept alive, never released."""
        code = _dtype_code(dtype)
        name = DTYPE_NAMES[code]
        base = buf
        extra = 0
        if _cl is not None and hasattr(buf, "base_data") and hasattr(buf, "offset"):
            base = buf.base_data
            vals, nbytes = _BLOCK[name]
            if buf.offset % nbytes:
                raise ValueError("clembed: the array's offset (%d bytes) is not a whole %s element"
                                 % (buf.offset, name))
            extra = buf.offset // nbytes * vals
        m = Matrix_t(buffer=_handle(base, "buf"), offset=int(offset) + extra, rows=int(rows),
                     cols=int(cols), ld=int(ld), dtype=code)
        return cls(ctx, m, owned=False, keep=buf)

    # --- properties
    @property
    def rows(self):
        return self._m.rows

    @property
    def cols(self):
        return self._m.cols

    @property
    def ld(self):
        return self._m.ld or self._m.cols

    @property
    def offset(self):
        return self._m.offset

    @property
    def dtype(self):
        return DTYPE_NAMES.get(self._m.dtype, self._m.dtype)

    @property
    def buffer(self):
        return self._m.buffer

    @property
    def shape(self):
        return self._shape if self._shape is not None else (self.rows, self.cols)

    def __repr__(self):
        return "clembed.Matrix(shape=%s, dtype=%r)" % (self.shape, self.dtype)

    # --- transfers
    def numpy(self, dtype=np.float32):
        """Reads the matrix (blocking: waits for the context's work) into a new NumPy
        array of .shape. dtype float32 or float16 (float64 is read as float32 and
        widened). Raises the deferred error of earlier work, if any, after reading."""
        d = np.dtype(dtype)
        host_d = np.float16 if d == np.float16 else np.float32
        out = np.empty((self.rows, self.cols), dtype=host_d)
        st = lib.clembed_matrix_read(self.ctx._h, byref(self._m), out.ctypes.data_as(ctypes.c_void_p),
                                     _dtype_code(host_d))
        self.ctx._check(st, "clembed_matrix_read")
        return out.astype(d, copy=False).reshape(self.shape)

    def raw(self):
        """The matrix as stored, dense: uint8 blocks of shape (rows, row bytes) for a
        block-quantized dtype, uint16 bits for f16/bf16, float32 for f32. Blocking."""
        name = self.dtype
        vals, nbytes = _BLOCK[name]
        if vals > 1:
            out = np.empty((self.rows, self.cols // vals * nbytes), np.uint8)
        else:
            out = np.empty((self.rows, self.cols), np.float32 if name == "f32" else np.uint16)
        st = lib.clembed_matrix_read(self.ctx._h, byref(self._m), out.ctypes.data_as(ctypes.c_void_p),
                                     self._m.dtype)
        self.ctx._check(st, "clembed_matrix_read")
        return out

    def write(self, array):
        """Writes rows*cols host values (float32 or float16; others are converted to
        float32) into the matrix, converting to its dtype. Blocking."""
        a = np.asarray(array)
        if a.size != self.rows * self.cols:
            raise ValueError("clembed: %d values written into a %d x %d matrix"
                             % (a.size, self.rows, self.cols))
        a = np.ascontiguousarray(a, dtype=np.float16 if a.dtype == np.float16 else np.float32)
        st = lib.clembed_matrix_write(self.ctx._h, byref(self._m), a.ctypes.data_as(ctypes.c_void_p),
                                      _dtype_code(a.dtype))
        self.ctx._check(st, "clembed_matrix_write")
        return self

    def rows_view(self, first, count):
        """A matrix over rows first .. first+count-1 of this one (same buffer)."""
        if first < 0 or count < 0 or first + count > self.rows:
            raise IndexError("clembed: rows %d..%d outside a matrix of %d rows"
                             % (first, first + count, self.rows))
        m = Matrix_t(buffer=self._m.buffer, offset=self._m.offset + first * self.ld, rows=count,
                     cols=self.cols, ld=self.ld, dtype=self._m.dtype)
        return Matrix(self.ctx, m, owned=False, keep=self)

    def release(self):
        """Releases the buffer now (for a matrix clembed allocated)."""
        if self._owned and self._m.buffer:
            lib.clembed_matrix_release(byref(self._m))
        self._owned = False
        self.event = None

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


class Ids:
    """Token ids in an OpenCL buffer (clembed_ids); .shape is the host array's shape."""

    def __init__(self, ctx, ids, owned, shape, keep=None):
        self.ctx = ctx
        self._ids = ids
        self._owned = owned
        self.shape = tuple(shape)
        self._keep = keep

    @classmethod
    def from_buffer(cls, ctx, buf, count, dtype="i32", offset=0, shape=None):
        """Ids in a buffer the caller owns (pyopencl Buffer or Array, or a raw cl_mem)."""
        t = _choice(INDEX_TYPES, dtype if isinstance(dtype, str) else
                    {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}.get(np.dtype(dtype), dtype),
                    "ids dtype")
        base, extra = buf, 0
        if _cl is not None and hasattr(buf, "base_data") and hasattr(buf, "offset"):
            base, extra = buf.base_data, buf.offset // (4 if t == 0 else 8)
        i = Ids_t(buffer=_handle(base, "buf"), offset=int(offset) + extra, count=int(count), type=t)
        return cls(ctx, i, owned=False, shape=shape if shape is not None else (int(count),), keep=buf)

    @property
    def count(self):
        return self._ids.count

    @property
    def dtype(self):
        return "i64" if self._ids.type == 1 else "i32"

    @property
    def buffer(self):
        return self._ids.buffer

    def __repr__(self):
        return "clembed.Ids(shape=%s, dtype=%r)" % (self.shape, self.dtype)

    def numpy(self):
        out = np.empty(self.count, dtype=np.int64 if self._ids.type == 1 else np.int32)
        st = lib.clembed_ids_read(self.ctx._h, byref(self._ids), out.ctypes.data_as(ctypes.c_void_p))
        self.ctx._check(st, "clembed_ids_read")
        return out.reshape(self.shape)

    def release(self):
        if self._owned and self._ids.buffer:
            lib.clembed_ids_release(byref(self._ids))
        self._owned = False

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


def _mptr(m):
    return byref(m._m) if m is not None else None


# ------------------------------------------------------------------ context

def _detail(handle, operation):
    """(operation, argument, index, value) of the last failure, from
    clembed_context_error (handle None: the thread's last failure without a context)."""
    op, arg, index, value = operation, "", -1, 0
    if _lib.has("clembed_context_error"):
        d = _lib.ErrorDetail_t()
        if lib.clembed_context_error(handle, byref(d)) == 0 and d.status != 0:
            if d.operation:
                op = d.operation.decode(errors="replace")
            arg = d.argument.decode(errors="replace") if d.argument else ""
            index, value = int(d.index), int(d.value)
    return op, arg, index, value


def _no_context_error(status, operation):
    msg = lib.clembed_last_error_message()
    return make(status, msg.decode(errors="replace") if msg else "", *_detail(None, operation))


class Context:
    """A clembed context: a device, its queue and the compiled kernels.

    Context(device=None): device spec as in C (None: CLEMBED_DEVICE, else the first
    GPU, accelerator, CPU). Context.from_queue(q): joins a pyopencl CommandQueue (or a
    raw cl_command_queue int). Every device call takes wait_for=[events] (pyopencl
    events, clembed.Event or raw cl_event ints) and sets .event on the matrix it writes.
    """

    def __init__(self, device=None):
        h = ctypes.c_void_p()
        st = lib.clembed_context_create(device.encode() if device else None, byref(h))
        if st != 0:
            raise _no_context_error(st, "clembed_context_create")
        self._h = h
        self._queue_obj = None

    @classmethod
    def from_queue(cls, queue):
        """A context on an existing queue (retained; the caller's work on it is never
        waited for by clembed)."""
        self = cls.__new__(cls)
        h = ctypes.c_void_p()
        st = lib.clembed_context_create_from_queue(_handle(queue, "queue"), byref(h))
        if st != 0:
            raise _no_context_error(st, "clembed_context_create_from_queue")
        self._h = h
        self._queue_obj = queue
        return self

    # --- lifetime
    def close(self):
        """Destroys the context now (waits only for clembed's own commands)."""
        h = getattr(self, "_h", None)
        if h is not None and h.value:
            lib.clembed_context_destroy(h)
        self._h = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- facts
    @property
    def device_name(self):
        s = lib.clembed_context_device_name(self._h)
        return s.decode(errors="replace") if s else ""

    @property
    def queue(self):
        """The cl_command_queue (int). With pyopencl, pyopencl_queue() wraps it."""
        return lib.clembed_context_queue(self._h)

    def pyopencl_queue(self):
        if _cl is None:
            raise ImportError("clembed: pyopencl is not installed")
        if self._queue_obj is not None and not isinstance(self._queue_obj, int):
            return self._queue_obj
        return _cl.CommandQueue.from_int_ptr(self.queue, retain=True)

    @property
    def message(self):
        s = lib.clembed_context_message(self._h)
        return s.decode(errors="replace") if s else ""

    def __repr__(self):
        return "clembed.Context(%r)" % self.device_name

    # --- errors
    def _error(self, status, operation):
        return make(status, self.message, *_detail(self._h, operation))

    def _check(self, status, operation):
        if status != 0:
            raise self._error(status, operation)

    def _run(self, operation, fn, args, wait_for, targets):
        n, arr = _wait_list(wait_for)
        ev = ctypes.c_void_p()
        st = fn(*args, n, arr, byref(ev))
        self._check(st, operation)
        e = _wrap_event(ev.value)
        for t in targets:
            if t is not None:
                t.event = e
        return e

    def finish(self):
        """Waits for the context's work; raises its first deferred error (then cleared)."""
        self._check(lib.clembed_finish(self._h), "clembed_finish")

    # --- data
    def empty(self, rows, cols, dtype="f32"):
        """A zero-filled rows x cols matrix of dtype on the device."""
        m = Matrix_t()
        st = lib.clembed_matrix_create(self._h, int(rows), int(cols), _dtype_code(dtype), byref(m))
        self._check(st, "clembed_matrix_create")
        return Matrix(self, m, owned=True)

    def matrix(self, array, dtype=None):
        """Uploads a 2-D NumPy array. dtype: 'f32' 'f16' 'bf16' 'q8_0' 'q4_0' (the
        quantized ones from float values, or any block type from uint8 blocks of shape
        (rows, row_bytes)); None: 'f16' for a float16 array, else 'f32'."""
        a = np.asarray(array)
        if a.ndim != 2:
            raise ValueError("clembed: a matrix is 2-D, this array has shape %s" % (a.shape,))
        if dtype is None:
            dtype = "f16" if a.dtype == np.float16 else "f32"
        code = _dtype_code(dtype)
        name = DTYPE_NAMES[code]
        if a.dtype == np.uint8 and _BLOCK[name][0] > 1:
            vals, nbytes = _BLOCK[name]
            if a.shape[1] % nbytes:
                raise ValueError("clembed: %s rows are whole blocks of %d bytes, not %d bytes"
                                 % (name, nbytes, a.shape[1]))
            rows, cols, host, host_code = a.shape[0], a.shape[1] // nbytes * vals, \
                np.ascontiguousarray(a), code
        else:
            if a.dtype.kind not in "fiub":
                raise TypeError("clembed: cannot upload an array of %s" % a.dtype)
            host = np.ascontiguousarray(a, dtype=np.float16 if a.dtype == np.float16 else np.float32)
            rows, cols, host_code = a.shape[0], a.shape[1], _dtype_code(host.dtype)
        m = self.empty(rows, cols, name)
        st = lib.clembed_matrix_write(self._h, byref(m._m), host.ctypes.data_as(ctypes.c_void_p),
                                      host_code)
        self._check(st, "clembed_matrix_write")
        return m

    def ids(self, array):
        """Uploads token ids (int32 stays int32, other integers become int64), any shape.
        The copy is made when the buffer is created, without the queue (so it never
        waits behind gated work on a shared queue)."""
        a = np.asarray(array)
        if a.dtype.kind not in "iu" and not (a.size == 0 and a.dtype.kind == "f"):
            raise TypeError("clembed: ids must be integers, not %s" % a.dtype)
        host = np.ascontiguousarray(a, dtype=np.int32 if a.dtype == np.int32 else np.int64)
        i = Ids_t(buffer=self._buffer(host.nbytes, host if host.size else None), offset=0,
                  count=host.size, type=0 if host.dtype == np.int32 else 1)
        return Ids(self, i, owned=True, shape=a.shape)

    def _as_matrix(self, x, what):
        if isinstance(x, Matrix):
            return x
        if isinstance(x, np.ndarray) or isinstance(x, (list, tuple)):
            return self.matrix(x)
        raise TypeError("clembed: %s must be a clembed.Matrix or a NumPy array, not %s"
                        % (what, type(x).__name__))

    def _as_ids(self, x):
        if x is None or isinstance(x, Ids):
            return x
        return self.ids(x)

    def _cl_context(self):
        c = ctypes.c_void_p()
        st = _ocl().clGetCommandQueueInfo(self.queue, 0x1090, ctypes.sizeof(c), byref(c), None)
        if st != 0:
            raise make(st, "clGetCommandQueueInfo(CL_QUEUE_CONTEXT) failed", "clGetCommandQueueInfo")
        return c.value

    def _buffer(self, nbytes, host=None):
        """A new cl_mem on the context's cl_context, made without enqueueing anything
        (so it never waits behind work on a shared queue); host: bytes copied in."""
        err = ctypes.c_int()
        flags = 1 | (0x20 if host is not None else 0)    # CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR
        b = _ocl().clCreateBuffer(self._cl_context(), flags, max(int(nbytes), 4),
                                  host.ctypes.data_as(ctypes.c_void_p) if host is not None else None,
                                  byref(err))
        if err.value != 0 or not b:
            raise make(err.value or -2005, "clCreateBuffer of %d bytes failed" % nbytes, "clCreateBuffer")
        return b

    def _alloc(self, rows, cols, dtype):
        """An output matrix, not initialised (every operation writes all of its output)."""
        code = _dtype_code(dtype)
        vals, nbytes = _BLOCK[DTYPE_NAMES[code]]
        if _lib.has("clembed_dtype_row_bytes"):
            row = lib.clembed_dtype_row_bytes(code, int(cols))
        else:
            row = int(cols) * lib.clembed_dtype_size(code)
        m = Matrix_t(buffer=self._buffer(row * int(rows)), offset=0, rows=int(rows), cols=int(cols),
                     ld=0, dtype=code)
        return Matrix(self, m, owned=True)

    def _out(self, out, rows, cols, out_dtype, shape):
        if out is None:
            out = self._alloc(rows, cols, out_dtype)
        elif not isinstance(out, Matrix):
            raise TypeError("clembed: out must be a clembed.Matrix")
        if shape is not None and out.rows == rows and out.cols == cols:
            out._shape = tuple(shape)
        return out

    @staticmethod
    def _padding(padding_idx, rows):
        if padding_idx is None:
            return _lib.NO_PADDING
        p = int(padding_idx)
        if -rows <= p < 0:
            p += rows  # as nn.Embedding: -1 is the last row
        return p

    @staticmethod
    def _seq_len(seq_len, ids):
        if seq_len is None:
            return ids.shape[-1] if len(ids.shape) >= 2 else 0
        return int(seq_len)

    # --- operations
    def positional(self, length, dim, first=0, base=10000.0, exponent="pair", layout="interleaved",
                   out_dtype="f32", out=None, wait_for=None):
        """The sinusoid table of positions first .. first+length-1, shape (length, dim)."""
        s = _lib.Sinusoid_t(base=float(base), exponent=_choice(EXPONENTS, exponent, "exponent"),
                            layout=_choice(LAYOUTS, layout, "layout"))
        out = self._out(out, length, dim, out_dtype, None)
        self._run("clembed_positional", lib.clembed_positional,
                  (self._h, byref(s), int(first), byref(out._m)), wait_for, [out])
        return out

    def lookup(self, table, ids, out=None, out_dtype="f32", wait_for=None):
        """out[i] = table[ids[i]]; the output's shape is ids.shape + (cols,)."""
        table = self._as_matrix(table, "table")
        ids = self._as_ids(ids)
        out = self._out(out, ids.count, table.cols, out_dtype, ids.shape + (table.cols,))
        self._run("clembed_lookup", lib.clembed_lookup,
                  (self._h, byref(table._m), byref(ids._ids), byref(out._m)), wait_for, [out])
        return out

    def embed(self, table, ids, scale=1.0, positions=None, base=10000.0, exponent="pair",
              layout="interleaved", offset=0, seq_len=None, sequence_offsets=None, padding_idx=None,
              on_bad_id="check", dropout=0.0, seed=0, out_dtype="f32", out=None, wait_for=None):
        """The fused forward out[i] = dropout(scale * table[ids[i]] + P[p]), shape ids.shape + (cols,).

        scale: a number or 'sqrt' (sqrt(cols)). positions: None, 'sinusoid' (base, exponent
        'pair'|'index', layout 'interleaved'|'halves') or a Matrix / array of learned
        positions. Token i is at position first_b + i % seq_len, first_b =
        sequence_offsets[b] or offset. seq_len None: the last dimension of 2-D (or more) ids,
        0 (one sequence) for 1-D ids. padding_idx: None, or a row (negative counts from the
        end). on_bad_id: 'check' (deferred IndexOutOfRangeError), 'clamp', 'zero', 'wrap'.
        """
        table = self._as_matrix(table, "table")
        ids = self._as_ids(ids)
        o = lib.clembed_embed_defaults()
        if isinstance(scale, str):
            if scale.lower() != "sqrt":
                raise ValueError("clembed: scale is a number or 'sqrt', not %r" % scale)
            scale = math.sqrt(table.cols)
        o.scale = float(scale)
        o.policy = _choice(POLICIES, on_bad_id, "on_bad_id")
        o.padding_idx = self._padding(padding_idx, table.rows)
        ptab = None
        if isinstance(positions, (Matrix, np.ndarray)):
            ptab = self._as_matrix(positions, "positions")
            o.positions = 2
            o.position_table = ctypes.pointer(ptab._m)
        else:
            o.positions = _choice(POSITIONS, positions, "positions")
        o.sinusoid = _lib.Sinusoid_t(base=float(base), exponent=_choice(EXPONENTS, exponent, "exponent"),
                                     layout=_choice(LAYOUTS, layout, "layout"))
        o.seq_len = self._seq_len(seq_len, ids)
        o.position_offset = int(offset)
        so = self._as_ids(sequence_offsets)
        if so is not None:
            o.sequence_offsets = ctypes.pointer(so._ids)
        o.dropout = float(dropout)
        o.dropout_seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        out = self._out(out, ids.count, table.cols, out_dtype, ids.shape + (table.cols,))
        self._run("clembed_embed", lib.clembed_embed,
                  (self._h, byref(table._m), byref(ids._ids), byref(o), byref(out._m)), wait_for, [out])
        return out

    def _backward_options(self, rows, scale, padding_idx, scale_grad_by_freq, deterministic,
                          accumulate, on_bad_id, seq_len, offset, sequence_offsets, position_grad,
                          dropout, seed, ids, keep):
        o = lib.clembed_backward_defaults()
        o.scale = float(scale)
        o.policy = _choice(POLICIES, on_bad_id, "on_bad_id")
        o.padding_idx = self._padding(padding_idx, rows)
        o.scale_grad_by_freq = 1 if scale_grad_by_freq else 0
        o.deterministic = 1 if deterministic else 0
        o.accumulate = 1 if accumulate else 0
        o.seq_len = self._seq_len(seq_len, ids)
        o.position_offset = int(offset)
        so = self._as_ids(sequence_offsets)
        if so is not None:
            keep.append(so)
            o.sequence_offsets = ctypes.pointer(so._ids)
        if position_grad is not None:
            if not isinstance(position_grad, Matrix):
                raise TypeError("clembed: position_grad must be a clembed.Matrix")
            o.position_grad = ctypes.pointer(position_grad._m)
        o.dropout = float(dropout)
        o.dropout_seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        return o

    def _grad(self, grad, cols=None):
        if isinstance(grad, Matrix):
            return grad
        g = np.asarray(grad)
        if g.ndim == 0:
            raise ValueError("clembed: a gradient has at least one dimension")
        return self.matrix(g.reshape(-1, g.shape[-1]) if g.ndim != 2 else g)

    def backward(self, grad, ids, vocab, scale=1.0, padding_idx=None, scale_grad_by_freq=False,
                 deterministic=True, out=None, accumulate=True, on_bad_id="check", seq_len=None,
                 offset=0, sequence_offsets=None, position_grad=None, dropout=0.0, seed=0,
                 wait_for=None):
        """The table gradient (vocab x cols, F32): out[v] (+)= scale * sum of grad[i] over
        ids[i] == v. grad has ids.shape + (cols,) (or ids.count rows). With out None a
        new matrix (rows no id touches are 0); with out given, added into it
        (accumulate=False overwrites it)."""
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        if out is None:   # a new matrix, overwritten whole (untouched rows become 0)
            accumulate = False
        out = self._out(out, vocab, grad.cols, "f32", None)
        keep = []
        o = self._backward_options(out.rows, scale, padding_idx, scale_grad_by_freq, deterministic,
                                   accumulate, on_bad_id, seq_len, offset, sequence_offsets,
                                   position_grad, dropout, seed, ids, keep)
        self._run("clembed_backward", lib.clembed_backward,
                  (self._h, byref(grad._m), byref(ids._ids), byref(o), byref(out._m)), wait_for,
                  [out, position_grad])
        return out

    def sgd(self, table, grad, ids, lr, scale=1.0, padding_idx=None, scale_grad_by_freq=False,
            on_bad_id="check", seq_len=None, offset=0, sequence_offsets=None, position_grad=None,
            dropout=0.0, seed=0, wait_for=None):
        """In place: table[v] -= lr * grad[v] for the rows v in ids (the fused sparse
        step of clembed_sgd_update). Returns table (its .event set)."""
        if not isinstance(table, Matrix):
            raise TypeError("clembed: sgd updates a clembed.Matrix in place")
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        keep = []
        o = self._backward_options(table.rows, scale, padding_idx, scale_grad_by_freq, True, True,
                                   on_bad_id, seq_len, offset, sequence_offsets, position_grad,
                                   dropout, seed, ids, keep)
        self._run("clembed_sgd_update", lib.clembed_sgd_update,
                  (self._h, byref(grad._m), byref(ids._ids), float(lr), byref(o), byref(table._m)),
                  wait_for, [table, position_grad])
        return table

    def init(self, m, kind="normal", mean=0.0, std=1.0, low=-1.0, high=1.0, seed=0, wait_for=None):
        """Fills m in place from Philox(seed, r*cols + c): kind 'normal' (mean, std) or
        'uniform' (low, high). Returns m."""
        k = kind.lower() if isinstance(kind, str) else kind
        seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        if k == "normal":
            self._run("clembed_matrix_init_normal", lib.clembed_matrix_init_normal,
                      (self._h, byref(m._m), float(mean), float(std), seed), wait_for, [m])
        elif k == "uniform":
            self._run("clembed_matrix_init_uniform", lib.clembed_matrix_init_uniform,
                      (self._h, byref(m._m), float(low), float(high), seed), wait_for, [m])
        else:
            raise ValueError("clembed: init kind is 'normal' or 'uniform', not %r" % (kind,))
        return m

    # --- RoPE (clembed_rope_*)
    @staticmethod
    def _rope(head_dim, opts):
        r = require("clembed_rope_defaults", "RoPE")()
        r.head_dim = int(head_dim)
        for k, v in opts.items():
            if k == "layout":
                r.layout = _choice(ROPE_LAYOUTS, v, "layout")
            elif k == "scaling":
                r.scaling = _choice(ROPE_SCALINGS, v, "scaling")
            elif k in ("rotary_dim", "original_max_position"):
                setattr(r, k, int(v))
            elif k in ("base", "factor", "low_freq_factor", "high_freq_factor", "beta_fast",
                       "beta_slow", "attention_factor"):
                setattr(r, k, float(v))
            else:
                raise TypeError("clembed: unknown RoPE option %r" % k)
        return r

    def rope_cache(self, length, head_dim, first=0, out_dtype="f32", out=None, wait_for=None,
                   **rope_options):
        """The cos/sin cache (length x rotary_dim): a*cos(p*w_k) in column k, a*sin(p*w_k)
        in column R/2 + k. rope_options: base, rotary_dim, layout ('neox'|'gptj'),
        scaling ('none'|'linear'|'ntk'|'yarn'|'llama3'), factor, original_max_position,
        low_freq_factor, high_freq_factor, beta_fast, beta_slow, attention_factor."""
        fn = require("clembed_rope_cache", "Context.rope_cache")
        r = self._rope(head_dim, rope_options)
        R = r.rotary_dim or r.head_dim
        out = self._out(out, length, R, out_dtype, None)
        self._run("clembed_rope_cache", fn, (self._h, byref(r), int(first), byref(out._m)),
                  wait_for, [out])
        return out

    def rope(self, x, head_dim, positions=None, offset=0, inverse=False, seq_len=None, out=None,
             out_dtype="f32", wait_for=None, **rope_options):
        """Rotary embedding applied to x: a Matrix (T x C) or an array (T, C),
        (T, heads, head_dim) or (B, S, heads, head_dim) (then seq_len = S). Row i is at
        positions[i], or offset + i % seq_len. out may be x (in place). The result has
        x's shape."""
        fn = require("clembed_rope_apply", "Context.rope")
        r = self._rope(head_dim, rope_options)
        shape = None
        if isinstance(x, Matrix):
            xm = x
            shape = x.shape
        else:
            a = np.asarray(x)
            if a.ndim < 2:
                raise ValueError("clembed: rope input has at least 2 dimensions")
            shape = a.shape
            if seq_len is None and a.ndim == 4:
                seq_len = a.shape[1]
            rows = int(np.prod(a.shape[:-2])) if a.ndim >= 3 else a.shape[0]
            xm = self.matrix(a.reshape(rows, -1))
        pos = self._as_ids(positions)
        out = self._out(out, xm.rows, xm.cols, out_dtype, shape)
        self._run("clembed_rope_apply", fn,
                  (self._h, byref(r), byref(xm._m), byref(pos._ids) if pos is not None else None,
                   int(seq_len or 0), int(offset), 1 if inverse else 0, byref(out._m)),
                  wait_for, [out])
        return out

    # --- files (clembed_io.h)
    def load(self, path, name=None, dtype=None):
        """Loads a tensor of a .npy, .safetensors or .gguf file (by content) as a Matrix.
        name None: the file's only tensor (GGUF: token_embd.weight). dtype None: the
        stored type."""
        load = require("clembed_matrix_load", "Context.load")
        with _File(path) as f:
            if dtype is None:
                info = f.info(f.index(name))
                if info.dtype < 0:
                    raise Error(-2006, "%s: tensor %r has type %s, which clembed cannot use"
                                % (path, info.name.decode(errors="replace"),
                                   info.type_name.decode(errors="replace")),
                                "clembed_matrix_load", "dtype")
                code = info.dtype
            else:
                code = _dtype_code(dtype)
            m = Matrix_t()
            st = load(self._h, f.h, name.encode() if name is not None else None, code, byref(m))
            self._check(st, "clembed_matrix_load")
            return Matrix(self, m, owned=True)


    def load_ids(self, path, name=None):
        """Loads an integer tensor (int32 or int64, any shape) of a .npy, .safetensors or
        .gguf file as Ids (shape kept). name None: the file's only tensor."""
        load = require("clembed_ids_load", "Context.load_ids")
        with _File(path) as f:
            shape = None
            if name is not None or f.count() == 1:
                t = f.info(f.index(name))
                shape = tuple(int(t.shape[k]) for k in range(t.ndim))
            i = Ids_t()
            st = load(self._h, f.h, name.encode() if name is not None else None, byref(i))
            self._check(st, "clembed_ids_load")
            return Ids(self, i, owned=True, shape=shape if shape is not None else (i.count,))


class _File:
    def __init__(self, path):
        opener = require("clembed_file_open", "reading model files")
        self.path = os.fspath(path)
        self.h = ctypes.c_void_p()
        st = opener(self.path.encode(), byref(self.h))
        if st != 0:
            msg = lib.clembed_last_error_message() if _lib.has("clembed_last_error_message") else b""
            raise make(st, msg.decode(errors="replace") if msg else "cannot open %s" % self.path,
                       "clembed_file_open", "path")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        lib.clembed_file_close(self.h)
        self.h = ctypes.c_void_p()

    def _fail(self, st, op):
        msg = lib.clembed_last_error_message()
        raise make(st, msg.decode(errors="replace") if msg else "", op)

    def count(self):
        return int(lib.clembed_file_tensor_count(self.h))

    def info(self, i):
        t = _lib.TensorInfo_t()
        st = lib.clembed_file_tensor_info(self.h, i, byref(t))
        if st != 0:
            self._fail(st, "clembed_file_tensor_info")
        return t

    def index(self, name):
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


def inspect(path):
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

    def __init__(self, spec, platform, name, type, is_default, global_mem_bytes, max_alloc_bytes):
        self.spec, self.platform, self.name, self.type = spec, platform, name, type
        self.is_default = is_default
        self.global_mem_bytes, self.max_alloc_bytes = global_mem_bytes, max_alloc_bytes

    @property
    def type_name(self):
        names = [n for bit, n in ((2, "cpu"), (4, "gpu"), (8, "accelerator"), (16, "custom"))
                 if self.type & bit]
        return ",".join(names) or "default"

    def __repr__(self):
        return ("Device(spec=%r, platform=%r, name=%r, type=%r, is_default=%r)"
                % (self.spec, self.platform, self.name, self.type_name, self.is_default))


def devices():
    """Every OpenCL device, in `clembed devices` order: [Device(spec, platform, name,
    type, is_default, global_mem_bytes, max_alloc_bytes)]."""
    fn = require("clembed_devices", "clembed.devices()")
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


_default = None


def default_context():
    """The context clembed.embed and the plots use (made on first use, default device)."""
    global _default
    if _default is None:
        _default = Context()
    return _default


def embed(table, ids, **options):
    """clembed's forward on the default context, NumPy in and out: returns a float32
    array of shape ids.shape + (cols,). Options as Context.embed; positions may be
    a NumPy array."""
    ctx = default_context()
    out = ctx.embed(ctx.matrix(np.asarray(table)), ctx.ids(ids), **options)
    return out.numpy()
