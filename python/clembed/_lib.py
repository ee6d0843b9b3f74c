"""Loading libclembed and declaring its C interface for ctypes.

The library is looked for, in this order:
  1. the path in the environment variable CLEMBED_LIBRARY (when set, only there);
  2. next to this package (a libclembed copied into the package folder);
  3. the system loader: ctypes.util.find_library("clembed"), then "libclembed.so.0.MINOR".
A library of another major.minor (0.x) or major (from 1.0) than this package is passed over
(and refused when CLEMBED_LIBRARY names it): the structs below mirror one ABI
(docs/design.md, "Versions"). tests/abi_layout.c and tests/test_abi.py check every struct,
enum constant and prototype here against the headers.
"""
import ctypes
import ctypes.util
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from ._version import __version__

c_size_t = ctypes.c_size_t
c_int = ctypes.c_int
c_int64 = ctypes.c_int64
c_uint64 = ctypes.c_uint64
c_float = ctypes.c_float
c_double = ctypes.c_double
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_uint = ctypes.c_uint
POINTER = ctypes.POINTER

MAJOR, MINOR, PATCH = (int(x) for x in __version__.split("."))


class LibraryNotFoundError(ImportError):
    """libclembed could not be loaded; the message lists every place tried."""


def _abi(number: int) -> Tuple[int, ...]:
    """The part of a version number (major*10000 + minor*100 + patch) that fixes the ABI."""
    major, minor = number // 10000, number // 100 % 100
    return (major, minor) if major == 0 else (major,)


def _version_text(number: int) -> str:
    return "%d.%d.%d" % (number // 10000, number // 100 % 100, number % 100)


def _soname() -> str:
    if sys.platform == "darwin":
        return "libclembed.%s.dylib" % ".".join(str(v) for v in _abi(MAJOR * 10000 + MINOR * 100))
    if sys.platform.startswith("win"):
        return "clembed.dll"
    return "libclembed.so." + ".".join(str(v) for v in _abi(MAJOR * 10000 + MINOR * 100))


def _candidates_next_to_package() -> List[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    names = [_soname()]
    if sys.platform == "darwin":
        names.append("libclembed.dylib")
    elif sys.platform.startswith("win"):
        names.append("libclembed.dll")
    else:
        names.append("libclembed.so")
    return [os.path.join(here, n) for n in names]


def _open(name: str) -> Tuple[Optional[ctypes.CDLL], str]:
    """(CDLL, "") when name loads and has this package's ABI, else (None, why)."""
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        return None, str(e)
    try:
        fn = lib.clembed_version_number
    except AttributeError:
        return None, "not a libclembed (no clembed_version_number)"
    fn.restype = c_uint
    fn.argtypes = []
    number = int(fn())
    if _abi(number) != _abi(MAJOR * 10000 + MINOR * 100):
        return None, ("libclembed %s, but this package (clembed %s) needs %s.x: each 0.x minor "
                      "release may change the ABI" % (_version_text(number), __version__,
                                                      ".".join(str(v) for v in _abi(MAJOR * 10000 + MINOR * 100))))
    return lib, ""


def library_from_env(var: str, opener: Any, who: str, elsewhere: str,
                     error: type = LibraryNotFoundError) -> Optional[Tuple[ctypes.CDLL, str]]:
    """(CDLL, path) from the path in environment variable `var` (opened with `opener`, which
    returns (CDLL or None, why)); None when `var` is not set. Raises LibraryNotFoundError when
    the library named there cannot be used (`who` names the caller, `elsewhere` where the
    search goes without the variable; `error` the exception class)."""
    env = os.environ.get(var)
    if not env:
        return None
    lib, why = opener(env)
    if lib is not None:
        return lib, env
    raise error("%s: cannot use the library named by %s=%r: %s\nUnset %s to search %s."
                % (who, var, env, why, var, elsewhere)) from None


def library_from_paths(paths: Any, opener: Any, tried: List[str]) -> Optional[Tuple[ctypes.CDLL, str]]:
    """(CDLL, path) of the first of `paths` that exists and `opener` accepts (it returns
    (CDLL or None, why)); None when none does, each path and why appended to `tried`."""
    for path in paths:
        if not os.path.exists(path):
            tried.append("%s (no such file)" % path)
            continue
        lib, why = opener(path)
        if lib is not None:
            return lib, path
        tried.append("%s (%s)" % (path, why))
    return None


def load_library() -> Tuple[ctypes.CDLL, str]:
    """Returns (CDLL, path). Raises LibraryNotFoundError listing what was tried."""
    tried = []
    found = library_from_env("CLEMBED_LIBRARY", _open, "clembed",
                             "next to the package and on the system loader's path")
    if found:
        return found
    tried.append("CLEMBED_LIBRARY (not set)")
    found = library_from_paths(_candidates_next_to_package(), _open, tried)
    if found:
        return found
    names = []
    found = ctypes.util.find_library("clembed")
    if found:
        names.append(found)
    else:
        tried.append('ctypes.util.find_library("clembed") (found nothing)')
    names.append(_soname())
    for name in names:
        lib, why = _open(name)
        if lib is not None:
            return lib, name
        tried.append("%s (%s)" % (name, why))
    raise LibraryNotFoundError(
        "clembed: libclembed %d.%d not found. Tried:\n  " % (MAJOR, MINOR) + "\n  ".join(tried) +
        "\nBuild it (cmake -S . -B build && cmake --build build) and set "
        "CLEMBED_LIBRARY=/path/to/build/libclembed.so, or run tools/python_setup.sh, which installs "
        "the package with its library.")


# ----------------------------------------------------------------- structs
# Mirrors of include/clembed.h and include/clembed_io.h, field for field.

class Matrix_t(ctypes.Structure):
    _fields_ = [("buffer", c_void_p), ("offset", c_size_t), ("rows", c_size_t),
                ("cols", c_size_t), ("ld", c_size_t), ("dtype", c_int)]


class Ids_t(ctypes.Structure):
    _fields_ = [("buffer", c_void_p), ("offset", c_size_t), ("count", c_size_t), ("type", c_int)]


class Options_t(ctypes.Structure):
    """An option struct of include/clembed.h ("Option structs"): its first field,
    struct_size, is the size of the struct as this binding declares it, and every call
    reads the struct only that far (so a binding written against an older header keeps
    working with a later library: the fields it lacks take their defaults). The C
    _defaults() functions set it; a struct made here sets it too (and in the option
    structs inside it), as does sized() for the elements of a ctypes array, which
    ctypes makes without calling __init__."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not args and "struct_size" not in kwargs:
            sized(self)


def sized(s: Any) -> Any:
    """Sets struct_size of the option struct s (and of the option structs inside it)
    where it is 0, to the size of its declaration here. Returns s."""
    if s.struct_size == 0:
        s.struct_size = ctypes.sizeof(s)
    for name, t in type(s)._fields_:
        if isinstance(t, type) and issubclass(t, Options_t):
            sized(getattr(s, name))
    return s


def sized_array(t: Any, n: int) -> Any:
    """A ctypes array of max(n, 1) option structs t, each sized (C reads an array of
    them with the stride of its first element's struct_size)."""
    arr = (t * max(n, 1))()
    for k in range(len(arr)):
        sized(arr[k])
    return arr


class Sinusoid_t(Options_t):
    _fields_ = [("struct_size", c_size_t), ("base", c_double), ("exponent", c_int), ("layout", c_int)]


class Norm_t(Options_t):
    _fields_ = [("struct_size", c_size_t), ("kind", c_int), ("weight", POINTER(Matrix_t)),
                ("bias", POINTER(Matrix_t)), ("eps", c_float)]


class EmbedOptions_t(Options_t):
    _fields_ = [("struct_size", c_size_t), ("scale", c_float), ("policy", c_int), ("padding_idx", c_int64),
                ("positions", c_int), ("sinusoid", Sinusoid_t),
                ("position_table", POINTER(Matrix_t)), ("seq_len", c_size_t),
                ("position_offset", c_size_t), ("sequence_offsets", POINTER(Ids_t)),
                ("dropout", c_float), ("dropout_seed", c_uint64),
                ("segment_table", POINTER(Matrix_t)), ("segment_ids", POINTER(Ids_t)), ("norm", Norm_t),
                ("padding_keeps_row", c_int), ("remap", POINTER(Ids_t))]


class EmbedGrads_t(Options_t):
    _fields_ = [("struct_size", c_size_t), ("table", POINTER(Matrix_t)), ("position_table", POINTER(Matrix_t)),
                ("segment_table", POINTER(Matrix_t)), ("norm_weight", POINTER(Matrix_t)),
                ("norm_bias", POINTER(Matrix_t))]


class BackwardOptions_t(Options_t):
    _fields_ = [("struct_size", c_size_t), ("scale", c_float), ("policy", c_int), ("padding_idx", c_int64),
                ("scale_grad_by_freq", c_int), ("deterministic", c_int), ("accumulate", c_int),
                ("seq_len", c_size_t), ("position_offset", c_size_t),
                ("sequence_offsets", POINTER(Ids_t)), ("position_grad", POINTER(Matrix_t)),
                ("dropout", c_float), ("dropout_seed", c_uint64)]


class Optimizer_t(Options_t):
    _fields_ = [("struct_size", c_size_t), ("kind", c_int), ("learning_rate", c_float), ("eps", c_float),
                ("beta1", c_float), ("beta2", c_float), ("weight_decay", c_float),
                ("step", c_uint64), ("state", POINTER(Matrix_t)), ("state2", POINTER(Matrix_t)),
                ("stochastic_rounding", c_int), ("seed", c_uint64), ("first_row", c_uint64)]


class Rope_t(Options_t):
    _fields_ = [("struct_size", c_size_t), ("base", c_double), ("head_dim", c_size_t), ("rotary_dim", c_size_t),
                ("layout", c_int), ("scaling", c_int), ("factor", c_double),
                ("original_max_position", c_size_t), ("low_freq_factor", c_double),
                ("high_freq_factor", c_double), ("beta_fast", c_double), ("beta_slow", c_double),
                ("attention_factor", c_double)]


class BagOptions_t(Options_t):
    _fields_ = [("struct_size", c_size_t), ("mode", c_int), ("policy", c_int), ("padding_idx", c_int64),
                ("per_sample_weights", POINTER(Matrix_t)), ("max_rows", POINTER(Ids_t)), ("remap", POINTER(Ids_t))]


class BagFeature_t(Options_t):
    _fields_ = [("struct_size", c_size_t), ("table", POINTER(Matrix_t)), ("ids", POINTER(Ids_t)), ("offsets", POINTER(Ids_t)),
                ("options", BagOptions_t)]


class DeviceInfo_t(ctypes.Structure):
    _fields_ = [("spec", ctypes.c_char * 16), ("platform", ctypes.c_char * 128),
                ("name", ctypes.c_char * 128), ("type", c_uint64), ("is_default", c_int),
                ("global_mem_bytes", c_uint64), ("max_alloc_bytes", c_uint64)]


class ErrorDetail_t(ctypes.Structure):
    _fields_ = [("status", c_int), ("operation", c_char_p), ("argument", c_char_p),
                ("index", c_int64), ("value", c_int64)]


class TensorInfo_t(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("type_name", c_char_p), ("ndim", c_int),
                ("shape", c_uint64 * 4), ("bytes", c_uint64)]


class CheckpointItem_t(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("matrix", POINTER(Matrix_t))]


# C struct name -> its mirror (every public struct; test_abi.py compares the layouts)
STRUCTS: Dict[str, Any] = {
    "clembed_matrix": Matrix_t, "clembed_ids": Ids_t, "clembed_sinusoid": Sinusoid_t,
    "clembed_embed_options": EmbedOptions_t, "clembed_backward_options": BackwardOptions_t,
    "clembed_optimizer": Optimizer_t, "clembed_rope": Rope_t, "clembed_device_info": DeviceInfo_t,
    "clembed_error_detail": ErrorDetail_t, "clembed_tensor_info": TensorInfo_t,
    "clembed_checkpoint_item": CheckpointItem_t,
    "clembed_norm": Norm_t, "clembed_embed_grads": EmbedGrads_t,
    "clembed_bag_options": BagOptions_t, "clembed_bag_feature": BagFeature_t,
}

# ------------------------------------------------------------------- enums
# The Python names of the C enum constants (lower case; the C name is the prefix in
# ENUMS plus the name in upper case). The binding's string arguments are these names.

# The dtypes are the library's one list (src/runtime/dtypes.h), asked of the loaded library
# below (dtype_facts): filled in place once it is loaded, so ENUMS holds the same dict.
DTYPES: Dict[str, int] = {}
INDEX_TYPES = {"i32": 0, "i64": 1}
POLICIES = {"check": 0, "clamp": 1, "zero": 2, "wrap": 3}
EXPONENTS = {"pair": 0, "index": 1}
LAYOUTS = {"interleaved": 0, "halves": 1}
POSITIONS = {"none": 0, "sinusoid": 1, "table": 2}
OPTIMIZERS = {"sgd": 0, "adagrad": 1, "rowwise_adagrad": 2, "adam": 3}
ROPE_LAYOUTS = {"neox": 0, "gptj": 1}
ROPE_SCALINGS = {"none": 0, "linear": 1, "ntk": 2, "yarn": 3, "llama3": 4}
NORMS = {"none": 0, "layer": 1, "rms": 2}
BAG_MODES = {"sum": 0, "mean": 1, "max": 2}
STRUCT_TYPES = {"sinusoid": 0, "norm": 1, "embed_options": 2, "embed_grads": 3, "backward_options": 4,
                "optimizer": 5, "rope": 6, "bag_options": 7, "bag_feature": 8}
STATUSES = {"ok": 0, "err_invalid_argument": -2001, "err_index_out_of_range": -2002,
            "err_no_device": -2003, "err_build_failed": -2004, "err_out_of_memory": -2005,
            "err_unsupported": -2006, "err_communication": -2007, "err_file": -2008}

# C enum type -> (its Python table, the prefix of its constants' C names)
ENUMS: Dict[str, Tuple[Dict[str, int], str]] = {
    "clembed_status": (STATUSES, "CLEMBED_"),
    "clembed_dtype": (DTYPES, "CLEMBED_"),
    "clembed_index_type": (INDEX_TYPES, "CLEMBED_"),
    "clembed_index_policy": (POLICIES, "CLEMBED_INDEX_"),
    "clembed_exponent": (EXPONENTS, "CLEMBED_EXPONENT_"),
    "clembed_layout": (LAYOUTS, "CLEMBED_LAYOUT_"),
    "clembed_positions": (POSITIONS, "CLEMBED_POSITIONS_"),
    "clembed_optimizer_kind": (OPTIMIZERS, "CLEMBED_"),
    "clembed_rope_layout": (ROPE_LAYOUTS, "CLEMBED_ROPE_"),
    "clembed_rope_scaling": (ROPE_SCALINGS, "CLEMBED_ROPE_SCALING_"),
    "clembed_norm_kind": (NORMS, "CLEMBED_NORM_"),
    "clembed_bag_mode": (BAG_MODES, "CLEMBED_BAG_"),
    "clembed_struct_type": (STRUCT_TYPES, "CLEMBED_STRUCT_"),
}

# clembed_struct_type name -> its mirror (test_abi.py checks clembed_struct_size against them)
STRUCT_MIRRORS: Dict[str, Any] = {
    "sinusoid": Sinusoid_t, "norm": Norm_t, "embed_options": EmbedOptions_t, "embed_grads": EmbedGrads_t,
    "backward_options": BackwardOptions_t, "optimizer": Optimizer_t, "rope": Rope_t,
    "bag_options": BagOptions_t, "bag_feature": BagFeature_t,
}

NO_PADDING = -(2 ** 63)   # CLEMBED_NO_PADDING (INT64_MIN)

# -------------------------------------------------------------- prototypes

EV = [c_uint, POINTER(c_void_p), POINTER(c_void_p)]   # wait list count, list, event out
CTX = c_void_p
PM = POINTER(Matrix_t)
PI = POINTER(Ids_t)

# name -> (restype, argtypes); a function the loaded library lacks is not declared (see has())
PROTOTYPES: Dict[str, Tuple[Any, List[Any]]] = {
    "clembed_status_string": (c_char_p, [c_int]),
    "clembed_version_number": (c_uint, []),
    "clembed_context_create": (c_int, [c_char_p, POINTER(c_void_p)]),
    "clembed_context_create_from_queue": (c_int, [c_void_p, POINTER(c_void_p)]),
    "clembed_context_destroy": (None, [CTX]),
    "clembed_context_queue": (c_void_p, [CTX]),
    "clembed_context_device_name": (c_char_p, [CTX]),
    "clembed_context_tuning": (c_char_p, [CTX]),
    "clembed_tuning_file": (c_int, [c_char_p, c_size_t]),
    "clembed_tuning_value": (c_int, [CTX, c_char_p, POINTER(ctypes.c_uint64)]),
    "clembed_context_message": (c_char_p, [CTX]),
    "clembed_last_error_message": (c_char_p, []),
    "clembed_finish": (c_int, [CTX]),
    "clembed_dtype_size": (c_size_t, [c_int]),
    "clembed_dtype_block_values": (c_size_t, [c_int]),
    "clembed_dtype_row_bytes": (c_size_t, [c_int, c_size_t]),
    "clembed_dtype_name": (c_char_p, [c_int]),
    "clembed_matrix_create": (c_int, [CTX, c_size_t, c_size_t, c_int, PM]),
    "clembed_matrix_write": (c_int, [CTX, PM, c_void_p, c_int]),
    "clembed_matrix_read": (c_int, [CTX, PM, c_void_p, c_int]),
    "clembed_matrix_release": (None, [PM]),
    "clembed_ids_create": (c_int, [CTX, c_void_p, c_size_t, c_int, PI]),
    "clembed_ids_read": (c_int, [CTX, PI, c_void_p]),
    "clembed_ids_release": (None, [PI]),
    "clembed_embed_defaults": (EmbedOptions_t, []),
    "clembed_backward_defaults": (BackwardOptions_t, []),
    "clembed_sinusoid_defaults": (Sinusoid_t, []),
    "clembed_norm_defaults": (Norm_t, []),
    "clembed_embed_grads_defaults": (EmbedGrads_t, []),
    "clembed_bag_feature_defaults": (BagFeature_t, []),
    "clembed_struct_size": (c_size_t, [c_int]),
    "clembed_struct_read": (c_int, [CTX, c_char_p, c_char_p, c_int, c_void_p, c_void_p]),
    "clembed_positional": (c_int, [CTX, POINTER(Sinusoid_t), c_size_t, PM] + EV),
    "clembed_lookup": (c_int, [CTX, PM, PI, PM] + EV),
    "clembed_quantize_rows": (c_int, [CTX, PM, PM] + EV),
    "clembed_embed": (c_int, [CTX, PM, PI, POINTER(EmbedOptions_t), PM] + EV),
    "clembed_backward": (c_int, [CTX, PM, PI, POINTER(BackwardOptions_t), PM] + EV),
    "clembed_sgd_update": (c_int, [CTX, PM, PI, c_float, POINTER(BackwardOptions_t), PM] + EV),
    "clembed_matrix_init_normal": (c_int, [CTX, PM, c_float, c_float, c_uint64] + EV),
    "clembed_matrix_init_uniform": (c_int, [CTX, PM, c_float, c_float, c_uint64] + EV),
    # Devices and error detail
    "clembed_devices": (c_int, [POINTER(DeviceInfo_t), c_size_t, POINTER(c_size_t)]),
    "clembed_context_error": (c_int, [CTX, POINTER(ErrorDetail_t)]),
    # Sparse optimizer steps
    "clembed_optimizer_defaults": (Optimizer_t, [c_int]),
    "clembed_optimizer_step": (c_int, [CTX, PM, PI, POINTER(BackwardOptions_t),
                                       POINTER(Optimizer_t), PM] + EV),
    # RoPE
    "clembed_rope_defaults": (Rope_t, []),
    "clembed_rope_cache": (c_int, [CTX, POINTER(Rope_t), c_size_t, PM] + EV),
    "clembed_rope_apply": (c_int, [CTX, POINTER(Rope_t), PM, PI, c_size_t, c_size_t, c_int, PM] + EV),
    # BERT's input layer
    "clembed_embed_backward": (c_int, [CTX, PM, PM, PI, POINTER(EmbedOptions_t), POINTER(EmbedGrads_t)] + EV),
    # Files
    "clembed_file_open": (c_int, [c_char_p, POINTER(c_void_p)]),
    "clembed_file_close": (None, [c_void_p]),
    "clembed_file_tensor_count": (c_size_t, [c_void_p]),
    "clembed_file_tensor_info": (c_int, [c_void_p, c_size_t, POINTER(TensorInfo_t)]),
    "clembed_file_find": (c_int, [c_void_p, c_char_p, POINTER(c_size_t)]),
    "clembed_matrix_load": (c_int, [CTX, c_void_p, c_char_p, c_int, PM]),
    "clembed_ids_load": (c_int, [CTX, c_void_p, c_char_p, PI]),
    "clembed_file_metadata_count": (c_size_t, [c_void_p]),
    "clembed_file_metadata": (c_int, [c_void_p, c_size_t, POINTER(c_char_p), POINTER(c_char_p)]),
    "clembed_file_metadata_find": (c_char_p, [c_void_p, c_char_p]),
    # Checkpoints
    "clembed_checkpoint_save": (c_int, [CTX, c_char_p, POINTER(CheckpointItem_t), c_size_t, POINTER(c_char_p),
                                        POINTER(c_char_p), c_size_t]),
    "clembed_checkpoint_load": (c_int, [CTX, c_char_p, POINTER(CheckpointItem_t), c_size_t]),
    # Bags of ids
    "clembed_bag_defaults": (BagOptions_t, []),
    "clembed_embedding_bag": (c_int, [CTX, PM, PI, PI, POINTER(BagOptions_t), PM] + EV),
    "clembed_embedding_bags": (c_int, [CTX, POINTER(BagFeature_t), c_size_t, PM] + EV),
    "clembed_bag_backward": (c_int, [CTX, PM, PI, PI, POINTER(BagOptions_t), PM, PM, PM] + EV),
    "clembed_bag_optimizer_step": (c_int, [CTX, PM, PI, PI, POINTER(BagOptions_t), POINTER(Optimizer_t),
                                           PM] + EV),
    "clembed_bags_optimizer_step": (c_int, [CTX, POINTER(BagFeature_t), c_size_t, PM, POINTER(Optimizer_t)]
                                    + EV),
    "clembed_renorm": (c_int, [CTX, PM, PI, c_float, c_float] + EV),
    # Tables past one buffer
    "clembed_matrix_pieces": (c_int, [CTX, PM, c_size_t, PM, POINTER(c_size_t), POINTER(c_size_t)]),
}

lib, path = load_library()

for _name, (_res, _args) in PROTOTYPES.items():
    if hasattr(lib, _name):
        _f = getattr(lib, _name)
        _f.restype = _res
        _f.argtypes = _args


# The codes asked for dtypes: the list's values are small and dense (0, 1, 2, ...).
DTYPE_CODES = 256


def dtype_facts() -> Dict[str, Tuple[int, int, int]]:
    """name -> (code, values per block, bytes per block) of every dtype the loaded library
    names (clembed_dtype_name, clembed_dtype_block_values, clembed_dtype_row_bytes over
    codes 0..DTYPE_CODES-1), in code order: the library's one list, never re-typed here.
    A float type's block is one value of its element size."""
    facts = {}
    for code in range(DTYPE_CODES):
        name = lib.clembed_dtype_name(code)
        name = name.decode() if name else "unknown"
        if name == "unknown":
            continue
        values = int(lib.clembed_dtype_block_values(code))
        facts[name] = (code, values, int(lib.clembed_dtype_row_bytes(code, values)))
    return facts


DTYPE_FACTS = dtype_facts()
DTYPES.update((name, f[0]) for name, f in DTYPE_FACTS.items())


def has(name: str) -> bool:
    """True when the loaded library exports the C function `name`."""
    return name in PROTOTYPES and hasattr(lib, name)


def status_string(status: int) -> str:
    """clembed_status_string: the fixed name of a status code."""
    s = lib.clembed_status_string(int(status))
    return s.decode() if s else "CLEMBED_UNKNOWN_STATUS"


def version_number() -> int:
    """clembed_version_number() of the loaded library."""
    return int(lib.clembed_version_number())
