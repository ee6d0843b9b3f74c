"""OpenCL events and handles for every device call: clembed.Event (when pyopencl is not
installed), the wait lists of wait_for=, and the raw handles taken from pyopencl objects.

pyopencl is optional: pyopencl_module() is it, or None. Every use of pyopencl in the
package asks pyopencl_module() at the time of the call (the tests set _cl to None to
run without it).
"""
import ctypes
import ctypes.util
from typing import Any, Optional, Tuple

from ._errors import api, from_status, wrong_type

try:  # optional
    import pyopencl as _cl
except Exception:  # pragma: no cover - depends on the machine
    _cl = None

WaitFor = Any          # None, an event, or a list of events (pyopencl, clembed.Event, raw ints)

_opencl = None


def pyopencl_module() -> Any:
    """The pyopencl module, or None when it is not installed."""
    return _cl


def opencl() -> ctypes.CDLL:
    """The OpenCL ICD loader, for releasing and waiting on raw events, reading a queue's
    context and creating buffers without the queue."""
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
        st = opencl().clWaitForEvents(1, arr)
        if st != 0:
            raise from_status(st, "clWaitForEvents failed", "clWaitForEvents")

    @property
    def command_execution_status(self) -> int:
        """CL_EVENT_COMMAND_EXECUTION_STATUS: 0 complete, 1 running, 2 submitted, 3 queued,
        negative: failed."""
        v = ctypes.c_int()
        opencl().clGetEventInfo(self._h, 0x11D3, ctypes.sizeof(v), ctypes.byref(v), None)
        return v.value

    def __del__(self) -> None:
        if getattr(self, "_h", None):
            try:
                opencl().clReleaseEvent(self._h)
            except Exception:
                pass
            self._h = None


def wrap_event(handle: Optional[int]) -> Any:
    """The event a device call returned (a reference it owns): a pyopencl.Event with
    pyopencl, else a clembed.Event; None for none."""
    if not handle:
        return None
    if _cl is not None:
        return _cl.Event.from_int_ptr(handle, retain=False)
    return Event(handle)


def raw_handle(obj: Any, what: str) -> Optional[int]:
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


def wait_list(wait_for: WaitFor) -> Tuple[int, Any]:
    """(count, ctypes array of cl_event or None) of a wait_for argument."""
    if wait_for is None:
        return 0, None
    if not isinstance(wait_for, (list, tuple)):
        wait_for = [wait_for]
    hs = [raw_handle(e, "wait_for") for e in wait_for if e is not None]
    if not hs:
        return 0, None
    return len(hs), (ctypes.c_void_p * len(hs))(*hs)
