"""clembed.Error and its subclasses, built from the library's structured error detail."""
from . import _lib

OK = 0
ERR_INVALID_ARGUMENT = -2001
ERR_INDEX_OUT_OF_RANGE = -2002
ERR_NO_DEVICE = -2003
ERR_BUILD_FAILED = -2004
ERR_OUT_OF_MEMORY = -2005
ERR_UNSUPPORTED = -2006


class Error(Exception):
    """A clembed failure.

    status     the clembed_status (a CLEMBED_ERR_* code, or an OpenCL code < 0)
    message    the library's message (clembed_context_message)
    operation  the C function that failed ("clembed_embed", ...), "" if unknown
    argument   the argument at fault ("ids", "position_table", ...), "" if none
    index      the element of that argument, -1 if none
    value      the bad value (0 if none)
    """

    def __init__(self, status, message="", operation="", argument="", index=-1, value=0):
        self.status = int(status)
        self.message = message
        self.operation = operation
        self.argument = argument
        self.index = index
        self.value = value
        super().__init__(self.status, message)

    @property
    def status_name(self):
        return _lib.status_string(self.status)

    def __str__(self):
        head = "%s (%d)" % (self.status_name, self.status)
        if self.operation:
            head += " in " + self.operation
        return head + (": " + self.message if self.message else "")


class IndexOutOfRangeError(Error, IndexError):
    """CLEMBED_ERR_INDEX_OUT_OF_RANGE: a token id or position outside its table.
    .argument names it ("ids", "positions", "sequence_offsets", ...), .index is the
    first bad element and .value its value."""


class NoDeviceError(Error):
    """CLEMBED_ERR_NO_DEVICE: no OpenCL device, or none matches the spec."""


class MissingFunctionError(Error, NotImplementedError):
    """The loaded libclembed does not export the C function this call needs."""


_CLASSES = {ERR_INDEX_OUT_OF_RANGE: IndexOutOfRangeError, ERR_NO_DEVICE: NoDeviceError}


def make(status, message="", operation="", argument="", index=-1, value=0):
    cls = _CLASSES.get(int(status), Error)
    return cls(status, message, operation, argument, index, value)


def missing(name, what):
    return MissingFunctionError(
        ERR_UNSUPPORTED,
        "%s needs the C function %s, which the loaded library (%s, version %d) does not export"
        % (what, name, _lib.path, _lib.version_number()),
        operation=name)


def require(name, what):
    if not _lib.has(name):
        raise missing(name, what)
    return getattr(_lib.lib, name)
