"""Argument conversion shared by every binding: each helper takes the Python argument's
name and raises the clembed.Error subclass that names it (see _errors.py).

    choice(table, value, "on_bad_id")   a name of one of _lib's enum tables -> its code
    dtype_code(value, "out_dtype")      'f16', numpy.float16, 'float16', np.dtype(...) -> code
    count(value, "rows")                a non-negative integer that fits size_t
    integer(value, "offset", lo, hi)    an integer in [lo, hi)
    real(value, "scale")                a Python float
    seed(value, "seed")                 an integer taken modulo 2^64
    host_values(array, "table", dtype)  a host array to upload into a matrix (no silent
                                        float64 or integer conversion)
    index_array(array, "ids")           int32/int64 ids (uint64 past 2^63 - 1 refused)
    read_type(dtype)                    the NumPy type Matrix.numpy(dtype) returns
"""
import operator
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ._lib import DTYPES, DTYPE_FACTS, lib
from ._errors import invalid, wrong_type, out_of_range

DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
F32, F16, BF16 = DTYPES["f32"], DTYPES["f16"], DTYPES["bf16"]
FLOAT_DTYPES = (F32, F16, BF16)
# values per block and bytes per block (ggml's layouts); 1 and the element size for floats:
# the library's facts (_lib.DTYPE_FACTS), not a second list
BLOCKS = {name: (values, nbytes) for name, (_, values, nbytes) in DTYPE_FACTS.items()}
# FBGEMM's row-wise types: a row is their block (values per block 0 in the facts)
ROWWISE = {name for name, (_, values, _) in DTYPE_FACTS.items() if values == 0}


def is_block(name: str) -> bool:
    """Whether a dtype's matrices hold blocks (ggml's types, FBGEMM's row-wise ones)."""
    return BLOCKS[name][0] != 1


def row_bytes(name: str, cols: int) -> int:
    """Bytes of a row of cols values of the dtype (clembed_dtype_row_bytes; 0: cols it cannot take)."""
    return int(lib.clembed_dtype_row_bytes(DTYPES[name], cols))


def cols_of_row_bytes(name: str, nbytes: int) -> int:
    """The values a row of nbytes holds (the most, where padding leaves a choice); -1 for none."""
    vals, bb = BLOCKS[name]
    if vals > 0:
        return nbytes // bb * vals if nbytes % bb == 0 else -1
    # row-wise: the bytes grow with cols; the largest cols whose row is nbytes
    lo, hi = 0, 8 * nbytes + 8
    while lo < hi:
        mid = (lo + hi + 1) // 2
        rb = 0
        for c in range(mid, max(mid - 8, -1), -1):  # the nearest cols at or below mid it takes
            rb = row_bytes(name, c)
            if rb:
                break
        if rb and rb <= nbytes:
            lo = mid
        else:
            hi = mid - 1
    for c in range(lo, max(lo - 8, -1), -1):
        if row_bytes(name, c) == nbytes:
            return c
    return -1
# NumPy's and PyTorch's spellings of the float dtypes
_ALIASES = {"float32": "f32", "float": "f32", "half": "f16", "float16": "f16", "bfloat16": "bf16",
            "torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16"}
U64 = 2 ** 64


def _names(table: Dict[Any, int]) -> str:
    return ", ".join(repr(k) for k in table)


def choice(table: Dict[str, int], value: Any, argument: str) -> int:
    """The code of `value`, one of table's names (any case; None means 'none' where the
    table has it)."""
    if value is None and "none" in table:
        return table["none"]
    if not isinstance(value, str):
        raise wrong_type(argument, "must be one of %s, not %r" % (_names(table), value))
    key = value.lower()
    if key not in table:
        raise invalid(argument, "must be one of %s, not %r" % (_names(table), value))
    return table[key]


def _bfloat16(d: np.dtype) -> bool:
    return d.name == "bfloat16" and d.itemsize == 2   # ml_dtypes.bfloat16, when installed


def _numpy_code(d: np.dtype) -> Optional[int]:
    """The clembed dtype of a NumPy dtype, None when it has none."""
    if d == np.float32:
        return F32
    if d == np.float16:
        return F16
    if _bfloat16(d):
        return BF16
    return None


def dtype_code(value: Any, argument: str = "dtype", allowed: Tuple[int, ...] = ()) -> int:
    """A clembed dtype from its name ('f32', 'f16', 'bf16', 'q8_0', 'q4_0', 'q4_k', 'q6_k',
    any case), a NumPy float type or name (numpy.float16, 'float16', np.dtype('float32'),
    ml_dtypes.bfloat16) or its code. `allowed`: the codes this argument takes (default all)."""
    code = None
    if isinstance(value, str):
        key = value.lower()
        key = _ALIASES.get(key, key)
        code = DTYPES.get(key)
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        code = int(value) if int(value) in DTYPE_NAMES else None
    if code is None and value is not None and not isinstance(value, (bool, int)):
        try:
            code = _numpy_code(np.dtype(value))
        except TypeError:
            code = None
    names = [DTYPE_NAMES[c] for c in (allowed or DTYPE_NAMES)]
    if code is None:
        raise invalid(argument, "%r is not a clembed dtype; it takes %s (or numpy.float32, numpy.float16 "
                      "and their names)" % (value, ", ".join(names)))
    if allowed and code not in allowed:
        raise invalid(argument, "%s is not allowed here; it takes %s" % (DTYPE_NAMES[code], ", ".join(names)))
    return code


def integer(value: Any, argument: str, low: int, high: int) -> int:
    """An integer (a Python or NumPy int, not a bool or a float) in [low, high)."""
    if isinstance(value, bool):
        raise wrong_type(argument, "must be an integer, not a bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise wrong_type(argument, "must be an integer, not %s" % type(value).__name__) from None
    if not low <= v < high:
        if v < low and low == 0:
            raise invalid(argument, "%d is negative" % v, value=v)
        raise invalid(argument, "%d is outside [%d, %d)" % (v, low, high), value=v)
    return v


def count(value: Any, argument: str) -> int:
    """A size: a non-negative integer below 2^64."""
    return integer(value, argument, 0, U64)


def real(value: Any, argument: str) -> float:
    """A real number as a Python float."""
    if isinstance(value, (str, bytes)) or value is None:
        raise wrong_type(argument, "must be a number, not %r" % (value,))
    try:
        return float(value)
    except (TypeError, ValueError):
        raise wrong_type(argument, "must be a number, not %s" % type(value).__name__) from None


def seed(value: Any, argument: str = "seed") -> int:
    """A 64-bit seed: an integer in [-2^63, 2^64), taken modulo 2^64."""
    return integer(value, argument, -(2 ** 63), U64) % U64


# host_values' dtype where the calling function takes no dtype argument (its refusal then
# says to convert the array, not to pass a dtype the function does not have)
NO_DTYPE: Any = object()


def host_values(array: Any, argument: str, dtype: Any = NO_DTYPE) -> Tuple[np.ndarray, int, int]:
    """(contiguous host array, its clembed host dtype, the matrix dtype) to upload `array`.

    dtype None (or NO_DTYPE, for a function that takes no dtype): the NumPy array's own
    type: float32 -> 'f32', float16 -> 'f16', ml_dtypes.bfloat16 -> 'bf16'. Any other NumPy
    type (float64, integers) is refused (ArgumentTypeError): converting it is the caller's
    explicit choice, dtype='f32' (or 'f16', 'bf16', 'q8_0', ...) where the function takes a
    dtype, which rounds float64 to nearest (directly to float16 for 'f16', through float32
    otherwise) and integers to nearest float32; else the caller converts it.
    A uint8 array with a block-quantized dtype is blocks of that dtype.
    Python numbers (lists, tuples, scalars) are float32, as torch.tensor makes them."""
    if isinstance(array, np.ndarray):
        a = array
    else:
        try:
            a = np.asarray(array)
        except (TypeError, ValueError) as e:
            raise wrong_type(argument, "must be an array of numbers: %s" % e) from None
        if a.dtype.kind in "biuf" and not isinstance(array, np.generic):
            a = a.astype(np.float32)
    own = _numpy_code(a.dtype)
    if dtype is None or dtype is NO_DTYPE:
        if own is None:
            how = ("pass dtype='f32' (or 'f16', 'bf16') to convert it, or convert it yourself"
                   if dtype is None else "convert it first")
            raise wrong_type(argument, "is a %s array, and clembed matrices hold f32, f16 or bf16: %s "
                             "(%s.astype(numpy.float32))" % (a.dtype, how, argument))
        code = own
    else:
        code = dtype_code(dtype, "dtype")
    if a.dtype == np.uint8 and is_block(DTYPE_NAMES[code]):
        host, host_code = a, code
    elif own is not None:
        host, host_code = a, own
    elif a.dtype.kind in "biuf":
        host_code = F16 if code == F16 else F32
        host = a.astype(np.float16 if host_code == F16 else np.float32)
    else:
        raise wrong_type(argument, "must hold numbers, not %s" % a.dtype)
    return np.ascontiguousarray(host), host_code, code


def index_array(array: Any, argument: str = "ids") -> np.ndarray:
    """Ids as a contiguous int32 (kept) or int64 (any other integer type) array of the same
    shape. uint64 values past 2^63 - 1 are refused (IndexOutOfRangeError), never wrapped."""
    try:
        a = np.asarray(array)
    except (TypeError, ValueError) as e:
        raise wrong_type(argument, "must be an array of integers: %s" % e) from None
    if a.dtype.kind not in "iu":
        if a.size == 0 and a.dtype.kind == "f":    # [] or numpy.array([])
            a = a.astype(np.int64)
        elif a.dtype == object:
            raise wrong_type(argument, "must be integers that fit int64 (clembed's largest id is 2^63 - 1)")
        else:
            raise wrong_type(argument, "must be integers, not %s" % a.dtype)
    if a.dtype.kind == "u" and a.dtype.itemsize == 8 and a.size:
        big = a >= np.uint64(2 ** 63)
        if big.any():
            i = int(np.argmax(big.reshape(-1)))
            v = int(a.reshape(-1)[i])
            raise out_of_range(argument, "%s[%d] = %d is past 2^63 - 1, the largest id clembed takes "
                               "(ids are int64 on the device)" % (argument, i, v), index=i, value=v)
    return np.ascontiguousarray(a, dtype=np.int32 if a.dtype == np.int32 else np.int64)


def natural_type(code: int) -> np.dtype:
    """The NumPy type a matrix of dtype `code` reads into by default: float16 for f16,
    float32 for the others (bf16 and the quantized types widen exactly into float32)."""
    return np.dtype(np.float16 if code == F16 else np.float32)


def read_type(dtype: Any, code: int) -> Tuple[np.dtype, int]:
    """(NumPy type of the result, clembed host dtype to read) for Matrix.numpy(dtype):
    None -> natural_type(code); float32, float16, ml_dtypes.bfloat16 read as such; float64
    read as float32 and widened (exact)."""
    if dtype is None:
        d = natural_type(code)
    elif isinstance(dtype, str) and _ALIASES.get(dtype.lower(), dtype.lower()) in DTYPES:
        name = _ALIASES.get(dtype.lower(), dtype.lower())
        if name == "bf16":
            d = _bfloat16_type()
        elif name in ("f32", "f16"):
            d = np.dtype(np.float32 if name == "f32" else np.float16)
        else:
            raise invalid("dtype", "reads values as float32, float16, float64 or bfloat16, not %s blocks "
                          "(Matrix.raw() gives the blocks)" % name)
    else:
        try:
            d = np.dtype(dtype)
        except TypeError:
            raise wrong_type("dtype", "%r is not a NumPy type" % (dtype,)) from None
    if d == np.float64:
        return d, F32
    host = _numpy_code(d)
    if host is None:
        raise invalid("dtype", "reads float32, float16, float64 (widened from float32) or "
                      "ml_dtypes.bfloat16, not %s" % d)
    return d, host


def _bfloat16_type() -> np.dtype:
    try:
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        raise invalid("dtype", "NumPy has no bfloat16 without the ml_dtypes package; read bf16 values "
                      "as float32 (exact) instead") from None
    return np.dtype(ml_dtypes.bfloat16)
