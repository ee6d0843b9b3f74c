"""Matrix and Ids: a matrix (clembed_matrix) and token ids (clembed_ids) in an OpenCL
buffer, their transfers and views. Their context (Context, composed in _core.py) runs the
C calls: Matrix and Ids use its handle (ctx._live) and its status check (ctx._check), as
its own operations do.
"""
import ctypes
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple

import numpy as np

from ._lib import lib, Matrix_t, Ids_t, INDEX_TYPES
from ._errors import api, invalid
from ._args import DTYPE_NAMES, BLOCKS, ROWWISE, is_block, row_bytes
from ._args import choice, dtype_code, count as _count, integer, host_values, read_type
from ._events import raw_handle, pyopencl_module

if TYPE_CHECKING:  # pragma: no cover
    from ._core import Context

byref = ctypes.byref

DTypeLike = Any        # 'f32' 'f16' 'bf16' 'q8_0' ..., numpy.float16, 'float16', np.dtype(...)
ArrayLike = Any        # a NumPy array or nested Python sequences


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
        if pyopencl_module() is not None and hasattr(buf, "base_data") and hasattr(buf, "offset"):
            base = buf.base_data
            vals, nbytes = BLOCKS[name]
            if name in ROWWISE:  # a row is the block
                vals = _count(cols, "cols")
                nbytes = row_bytes(name, vals) or 1
            if buf.offset % nbytes:
                raise invalid("buf", "the array's offset (%d bytes) is not a whole %s element"
                              % (buf.offset, name))
            extra = buf.offset // nbytes * vals
        m = Matrix_t(buffer=raw_handle(base, "buf"), offset=_count(offset, "offset") + extra,
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
        if is_block(name):
            out = np.empty((self.rows, row_bytes(name, self.cols)), np.uint8)
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
        if host.dtype == np.uint8 and is_block(self.dtype):
            want = self.rows * row_bytes(self.dtype, self.cols)
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
        if pyopencl_module() is not None and hasattr(buf, "base_data") and hasattr(buf, "offset"):
            base, extra = buf.base_data, buf.offset // (4 if t == 0 else 8)
        n = _count(count, "count")
        i = Ids_t(buffer=raw_handle(base, "buf"), offset=_count(offset, "offset") + extra, count=n, type=t)
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
