"""clembed.Error and its subclasses: one hierarchy for every failure, whether Python's
argument checks or the C library find it, and the one place that maps a failure to its
class, its Python call and its Python argument.

    Error                           every clembed failure (.status .message .call .operation
                                    .argument .index .value)
      InvalidArgumentError          + ValueError    CLEMBED_ERR_INVALID_ARGUMENT
        ArgumentTypeError           + TypeError     an argument of the wrong type
      IndexOutOfRangeError          + IndexError    CLEMBED_ERR_INDEX_OUT_OF_RANGE
      NoDeviceError                 + RuntimeError  CLEMBED_ERR_NO_DEVICE
      BuildFailedError              + RuntimeError  CLEMBED_ERR_BUILD_FAILED
      OutOfMemoryError              + MemoryError   CLEMBED_ERR_OUT_OF_MEMORY, OpenCL's
                                                    out-of-memory codes
      UnsupportedError              + RuntimeError  CLEMBED_ERR_UNSUPPORTED
      FileError                     + OSError       CLEMBED_ERR_FILE (a checkpoint could not be
                                                    written: no space, a write error)
        MissingFunctionError        + NotImplementedError  the loaded library lacks a function
      StateError                    + RuntimeError  a call out of order (backward before forward)
      OpenCLError                   + RuntimeError  any other OpenCL status

A public callable is wrapped by @api("Class.method"): the errors it raises name that call
(the outermost one when calls nest), and the message is one line,
"Context.backward, argument grad: <what is wrong>".
"""
import functools
import threading
from typing import Any, Callable, Optional, TypeVar

from . import _lib

OK = 0
ERR_INVALID_ARGUMENT = -2001
ERR_INDEX_OUT_OF_RANGE = -2002
ERR_NO_DEVICE = -2003
ERR_BUILD_FAILED = -2004
ERR_OUT_OF_MEMORY = -2005
ERR_UNSUPPORTED = -2006
ERR_COMMUNICATION = -2007  # libclembed_mpi's (an MPI call failed): not raised by this package's calls
ERR_FILE = -2008

# OpenCL's statuses that mean memory ran out
_CL_OUT_OF_MEMORY = {-4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES",
                     -6: "CL_OUT_OF_HOST_MEMORY"}


class Error(Exception):
    """A clembed failure.

    status     the clembed_status (a CLEMBED_ERR_* code, or an OpenCL code < 0)
    message    what is wrong (the library's message, or the binding's)
    call       the Python call that failed ("Context.embed", "Embedding.forward", ...);
               for a bad id found on the device, the call that enqueued the work
    operation  the C function ("clembed_embed", ...), "" if none
    argument   the Python argument at fault ("ids", "positions", "grad", ...), "" if none
    index      the element of that argument, -1 if none
    value      the bad value (0 if none)
    """

    def __init__(self, status: int, message: str = "", operation: str = "", argument: str = "",
                 index: int = -1, value: Any = 0, call: str = "") -> None:
        self.status = int(status)
        self.message = message
        self.operation = operation
        self.argument = argument
        self.index = index
        self.value = value
        self.call = call
        super().__init__(self.status, message)

    @property
    def status_name(self) -> str:
        """The status code's name ("CLEMBED_ERR_INVALID_ARGUMENT", "CL_OUT_OF_RESOURCES", ...)."""
        return _lib.status_string(self.status)

    def __str__(self) -> str:
        where = self.call or self.operation or "clembed"
        if self.argument:
            where += ", argument " + self.argument
        text = self.message or self.status_name
        if -1000 < self.status < 0 and self.status_name not in text:
            text += " (%s)" % self.status_name
        return "%s: %s" % (where, text)


class InvalidArgumentError(Error, ValueError):
    """CLEMBED_ERR_INVALID_ARGUMENT: an argument's value is wrong (a size, a shape, an
    unknown name, a closed context)."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong type (also a TypeError)."""


class IndexOutOfRangeError(Error, IndexError):
    """CLEMBED_ERR_INDEX_OUT_OF_RANGE: a token id or position outside its table.
    .argument names it ("ids", "positions", "sequence_offsets", ...), .index is the
    first bad element and .value its value."""


class NoDeviceError(Error, RuntimeError):
    """CLEMBED_ERR_NO_DEVICE: no OpenCL device, or none matches the spec."""


class BuildFailedError(Error, RuntimeError):
    """CLEMBED_ERR_BUILD_FAILED: a kernel did not compile (the log is in the message)."""


class OutOfMemoryError(Error, MemoryError):
    """CLEMBED_ERR_OUT_OF_MEMORY or OpenCL's CL_MEM_OBJECT_ALLOCATION_FAILURE,
    CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY."""


class UnsupportedError(Error, RuntimeError):
    """CLEMBED_ERR_UNSUPPORTED: the device or the dtype cannot do what was asked."""


class FileError(Error, OSError):
    """CLEMBED_ERR_FILE: a file could not be written (no space, a write error, a missing folder);
    the message names the path."""


class MissingFunctionError(UnsupportedError, NotImplementedError):
    """The loaded libclembed does not export the C function this call needs."""


class StateError(Error, RuntimeError):
    """A call out of order (Embedding.backward before forward, a step of a frozen weight)."""


class OpenCLError(Error, RuntimeError):
    """An OpenCL failure passed through (status < 0, > -1000; .status_name names it)."""


_CLASSES = {ERR_INVALID_ARGUMENT: InvalidArgumentError, ERR_INDEX_OUT_OF_RANGE: IndexOutOfRangeError,
            ERR_NO_DEVICE: NoDeviceError, ERR_BUILD_FAILED: BuildFailedError,
            ERR_OUT_OF_MEMORY: OutOfMemoryError, ERR_UNSUPPORTED: UnsupportedError, ERR_FILE: FileError}

# The Python call of each C function, for an error found after the call returned (a bad
# id, reported by a later read or finish). A binding of a new C function adds its line.
PY_CALLS = {
    "clembed_embed": "Context.embed", "clembed_lookup": "Context.lookup",
    "clembed_quantize_rows": "Context.quantize_rows",
    "clembed_positional": "Context.positional", "clembed_backward": "Context.backward",
    "clembed_sgd_update": "Context.sgd", "clembed_optimizer_step": "Context.optimizer_step",
    "clembed_matrix_init_normal": "Context.init", "clembed_matrix_init_uniform": "Context.init",
    "clembed_rope_cache": "Context.rope_cache", "clembed_rope_apply": "Context.rope",
    "clembed_matrix_read": "Matrix.numpy", "clembed_matrix_write": "Matrix.write",
    "clembed_matrix_create": "Context.empty", "clembed_ids_read": "Ids.numpy",
    "clembed_matrix_load": "Context.load", "clembed_ids_load": "Context.load_ids",
    "clembed_finish": "Context.finish", "clembed_context_create": "Context",
    "clembed_context_create_from_queue": "Context.from_queue", "clembed_devices": "devices",
    "clembed_file_open": "inspect", "clembed_embed_backward": "Context.embed_backward",
    "clembed_embedding_bag": "Context.embedding_bag", "clembed_embedding_bags": "Context.embedding_bags",
    "clembed_bag_backward": "Context.bag_backward", "clembed_bag_optimizer_step": "Context.bag_optimizer_step",
    "clembed_bags_optimizer_step": "Context.bags_optimizer_step", "clembed_renorm": "Context.renorm",
}

# C argument names that the binding spells differently (the same in every call).
PY_ARGUMENTS = {
    "grad_out": "grad", "grad_table": "out", "position_table": "positions", "policy": "on_bad_id",
    "dropout_seed": "seed", "position_offset": "offset", "cos_sin": "out", "learning_rate": "lr",
    "first_position": "first", "norm.kind": "norm", "norm.weight": "norm_weight", "norm.bias": "norm_bias",
    "norm.eps": "norm_eps",
}


def error_class(status: int) -> type:
    """The Error subclass of a status code."""
    status = int(status)
    if status in _CLASSES:
        return _CLASSES[status]
    if status in _CL_OUT_OF_MEMORY:
        return OutOfMemoryError
    if -1000 < status < 0:
        return OpenCLError
    return Error


def from_status(status: int, message: str = "", operation: str = "", argument: str = "",
                index: int = -1, value: Any = 0, call: str = "") -> Error:
    """The Error for a C failure: its class from the status, the C argument named as the
    binding names it, the message without a leading "operation: "."""
    if operation and message.startswith(operation + ": "):
        message = message[len(operation) + 2:]
    return error_class(status)(status, message, operation, PY_ARGUMENTS.get(argument, argument),
                               index, value, call)


def invalid(argument: str, message: str, value: Any = 0, index: int = -1) -> InvalidArgumentError:
    """A bad argument value found by the binding (a ValueError)."""
    return InvalidArgumentError(ERR_INVALID_ARGUMENT, message, "", argument, index, value)


def wrong_type(argument: str, message: str) -> ArgumentTypeError:
    """An argument of the wrong type found by the binding (a TypeError)."""
    return ArgumentTypeError(ERR_INVALID_ARGUMENT, message, "", argument)


def out_of_range(argument: str, message: str, index: int = -1, value: Any = 0) -> IndexOutOfRangeError:
    """An id or position outside its range found by the binding (an IndexError)."""
    return IndexOutOfRangeError(ERR_INDEX_OUT_OF_RANGE, message, "", argument, index, value)


def state(message: str) -> StateError:
    """A call out of order (a RuntimeError)."""
    return StateError(ERR_INVALID_ARGUMENT, message)


def missing(name: str, what: str) -> MissingFunctionError:
    """The MissingFunctionError of a C function the loaded library lacks."""
    return MissingFunctionError(
        ERR_UNSUPPORTED,
        "needs the C function %s, which the loaded library (%s, version %d) does not export"
        % (name, _lib.path, _lib.version_number()),
        operation=name, call=what)


def require(name: str, what: str) -> Any:
    """The C function `name`, or MissingFunctionError naming it and `what` needs it."""
    if not _lib.has(name):
        raise missing(name, what)
    return getattr(_lib.lib, name)


_active = threading.local()
F = TypeVar("F", bound=Callable[..., Any])


def api(call: str, operation: str = "") -> Callable[[F], F]:
    """Decorator of a public callable: every clembed.Error raised inside it (by the binding
    or the library) names `call` (and the C function `operation`) unless it names one
    already. Calls nested in another public call leave the naming to the outer one."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            if getattr(_active, "call", None) is not None:
                return fn(*args, **kwargs)
            _active.call = call
            try:
                return fn(*args, **kwargs)
            except Error as e:
                if not e.call:
                    e.call = call
                if not e.operation and operation:
                    e.operation = operation
                raise
            finally:
                _active.call = None
        return inner  # type: ignore[return-value]
    return wrap


def current_call() -> Optional[str]:
    """The public call running on this thread (None outside one)."""
    return getattr(_active, "call", None)

