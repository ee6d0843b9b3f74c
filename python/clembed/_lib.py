"""Loading libclembed and declaring its C interface for ctypes.

The library is looked for, in this order:
  1. the path in the environment variable CLEMBED_LIBRARY (when set, only there);
  2. next to this package (a libclembed copied into the package folder);
  3. the system loader: ctypes.util.find_library("clembed"), then "libclembed.so.0".
"""
import ctypes
import ctypes.util
import os
import sys

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


class LibraryNotFoundError(ImportError):
    """libclembed could not be loaded; the message lists every place tried."""


def _candidates_next_to_package():
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.platform == "darwin":
        names = ["libclembed.0.dylib", "libclembed.dylib"]
    elif sys.platform.startswith("win"):
        names = ["clembed.dll", "libclembed.dll"]
    else:
        names = ["libclembed.so.0", "libclembed.so"]
    return [os.path.join(here, n) for n in names]


def load_library():
    """Returns (CDLL, path). Raises LibraryNotFoundError listing what was tried."""
    tried = []
    env = os.environ.get("CLEMBED_LIBRARY")
    if env:
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise LibraryNotFoundError(
                "clembed: cannot load the library named by CLEMBED_LIBRARY=%r: %s\n"
                "Unset CLEMBED_LIBRARY to search next to the package and on the system loader's path."
                % (env, e)) from None
    tried.append("CLEMBED_LIBRARY (not set)")
    for path in _candidates_next_to_package():
        if not os.path.exists(path):
            tried.append("%s (no such file)" % path)
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    names = []
    found = ctypes.util.find_library("clembed")
    if found:
        names.append(found)
    else:
        tried.append('ctypes.util.find_library("clembed") (found nothing)')
    names.append("libclembed.so.0")
    for name in names:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            tried.append("%s (%s)" % (name, e))
    raise LibraryNotFoundError(
        "clembed: libclembed not found. Tried:\n  " + "\n  ".join(tried) +
        "\nBuild it (cmake -S . -B build && cmake --build build) and set "
        "CLEMBED_LIBRARY=/path/to/libclembed.so.0, or install it where the system loader finds it.")


# ----------------------------------------------------------------- structs

class Matrix_t(ctypes.Structure):
    _fields_ = [("buffer", c_void_p), ("offset", c_size_t), ("rows", c_size_t),
                ("cols", c_size_t), ("ld", c_size_t), ("dtype", c_int)]


class Ids_t(ctypes.Structure):
    _fields_ = [("buffer", c_void_p), ("offset", c_size_t), ("count", c_size_t), ("type", c_int)]


class Sinusoid_t(ctypes.Structure):
    _fields_ = [("base", c_double), ("exponent", c_int), ("layout", c_int)]


class EmbedOptions_t(ctypes.Structure):
    _fields_ = [("scale", c_float), ("policy", c_int), ("padding_idx", c_int64),
                ("positions", c_int), ("sinusoid", Sinusoid_t),
                ("position_table", POINTER(Matrix_t)), ("seq_len", c_size_t),
                ("position_offset", c_size_t), ("sequence_offsets", POINTER(Ids_t)),
                ("dropout", c_float), ("dropout_seed", c_uint64)]


class BackwardOptions_t(ctypes.Structure):
    _fields_ = [("scale", c_float), ("policy", c_int), ("padding_idx", c_int64),
                ("scale_grad_by_freq", c_int), ("deterministic", c_int), ("accumulate", c_int),
                ("seq_len", c_size_t), ("position_offset", c_size_t),
                ("sequence_offsets", POINTER(Ids_t)), ("position_grad", POINTER(Matrix_t)),
                ("dropout", c_float), ("dropout_seed", c_uint64)]


class Optimizer_t(ctypes.Structure):
    _fields_ = [("kind", c_int), ("learning_rate", c_float), ("eps", c_float),
                ("beta1", c_float), ("beta2", c_float), ("weight_decay", c_float),
                ("step", c_uint64), ("state", POINTER(Matrix_t)), ("state2", POINTER(Matrix_t))]


class Rope_t(ctypes.Structure):
    _fields_ = [("base", c_double), ("head_dim", c_size_t), ("rotary_dim", c_size_t),
                ("layout", c_int), ("scaling", c_int), ("factor", c_double),
                ("original_max_position", c_size_t), ("low_freq_factor", c_double),
                ("high_freq_factor", c_double), ("beta_fast", c_double), ("beta_slow", c_double),
                ("attention_factor", c_double)]


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


EV = [c_uint, POINTER(c_void_p), POINTER(c_void_p)]   # wait list count, list, event out
CTX = c_void_p
PM = POINTER(Matrix_t)
PI = POINTER(Ids_t)

# name -> (restype, argtypes). Functions of the 0.1 library and the later ones alike;
# a function the loaded library lacks is simply not declared (see has()).
_PROTOTYPES = {
    "clembed_status_string": (c_char_p, [c_int]),
    "clembed_version_number": (c_uint, []),
    "clembed_context_create": (c_int, [c_char_p, POINTER(c_void_p)]),
    "clembed_context_create_from_queue": (c_int, [c_void_p, POINTER(c_void_p)]),
    "clembed_context_destroy": (None, [CTX]),
    "clembed_context_queue": (c_void_p, [CTX]),
    "clembed_context_device_name": (c_char_p, [CTX]),
    "clembed_context_message": (c_char_p, [CTX]),
    "clembed_last_error_message": (c_char_p, []),
    "clembed_finish": (c_int, [CTX]),
    "clembed_dtype_size": (c_size_t, [c_int]),
    "clembed_dtype_row_bytes": (c_size_t, [c_int, c_size_t]),
    "clembed_matrix_create": (c_int, [CTX, c_size_t, c_size_t, c_int, PM]),
    "clembed_matrix_write": (c_int, [CTX, PM, c_void_p, c_int]),
    "clembed_matrix_read": (c_int, [CTX, PM, c_void_p, c_int]),
    "clembed_matrix_release": (None, [PM]),
    "clembed_ids_create": (c_int, [CTX, c_void_p, c_size_t, c_int, PI]),
    "clembed_ids_read": (c_int, [CTX, PI, c_void_p]),
    "clembed_ids_release": (None, [PI]),
    "clembed_embed_defaults": (EmbedOptions_t, []),
    "clembed_backward_defaults": (BackwardOptions_t, []),
    "clembed_positional": (c_int, [CTX, POINTER(Sinusoid_t), c_size_t, PM] + EV),
    "clembed_lookup": (c_int, [CTX, PM, PI, PM] + EV),
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
    # Files
    "clembed_file_open": (c_int, [c_char_p, POINTER(c_void_p)]),
    "clembed_file_close": (None, [c_void_p]),
    "clembed_file_tensor_count": (c_size_t, [c_void_p]),
    "clembed_file_tensor_info": (c_int, [c_void_p, c_size_t, POINTER(TensorInfo_t)]),
    "clembed_file_find": (c_int, [c_void_p, c_char_p, POINTER(c_size_t)]),
    "clembed_matrix_load": (c_int, [CTX, c_void_p, c_char_p, c_int, PM]),
    "clembed_ids_load": (c_int, [CTX, c_void_p, c_char_p, PI]),
}

lib, path = load_library()

for _name, (_res, _args) in _PROTOTYPES.items():
    if hasattr(lib, _name):
        _f = getattr(lib, _name)
        _f.restype = _res
        _f.argtypes = _args


def has(name):
    """True when the loaded library exports the C function `name`."""
    return name in _PROTOTYPES and hasattr(lib, name)


def status_string(status):
    s = lib.clembed_status_string(int(status))
    return s.decode() if s else "CLEMBED_UNKNOWN_STATUS"


def version_number():
    return int(lib.clembed_version_number())


# CLEMBED_NO_PADDING: -1 in the 0.1 library, INT64_MIN from the API that added
# clembed_context_error (0.2), where -1 means the last row as in PyTorch.
NO_PADDING = (-(2 ** 63)) if (version_number() >= 200 or has("clembed_context_error")) else -1
