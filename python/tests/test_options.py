"""An FFI caller's option structs (include/clembed.h, "Option structs"): a ctypes program
declares the structs itself, as pyopencl users do. Issue 41: a program built against
0.2's clembed_embed_options crashed in 0.3's clembed_embed, which read past its struct.
Now every struct starts with struct_size and every call reads the caller's struct only
that far: a struct from before a field was added is read without it (the field takes its
default), a struct of clembed 0.3 (no struct_size) is refused with INVALID_ARGUMENT, and
neither is read past its end (each lives in a buffer of exactly its size, here at the end
of a page followed by an unreadable one where the system allows, so an over-read faults)."""
import ctypes
import mmap

import numpy as np
import pytest

import clembed
from clembed import _lib

c_size_t, c_float, c_int, c_int64, c_uint64, c_double = (ctypes.c_size_t, ctypes.c_float, ctypes.c_int,
                                                          ctypes.c_int64, ctypes.c_uint64, ctypes.c_double)
PM, PI = ctypes.POINTER(_lib.Matrix_t), ctypes.POINTER(_lib.Ids_t)
INVALID = clembed.ERR_INVALID_ARGUMENT


class V03Sinusoid(ctypes.Structure):
    _fields_ = [("base", c_double), ("exponent", c_int), ("layout", c_int)]


class V03Norm(ctypes.Structure):
    _fields_ = [("kind", c_int), ("weight", PM), ("bias", PM), ("eps", c_float)]


class V03EmbedOptions(ctypes.Structure):
    """clembed_embed_options as clembed 0.3 declared it (no struct_size)."""
    _fields_ = [("scale", c_float), ("policy", c_int), ("padding_idx", c_int64), ("positions", c_int),
                ("sinusoid", V03Sinusoid), ("position_table", PM), ("seq_len", c_size_t),
                ("position_offset", c_size_t), ("sequence_offsets", PI), ("dropout", c_float),
                ("dropout_seed", c_uint64), ("segment_table", PM), ("segment_ids", PI), ("norm", V03Norm)]


class V03BagOptions(ctypes.Structure):
    _fields_ = [("mode", c_int), ("policy", c_int), ("padding_idx", c_int64), ("per_sample_weights", PM),
                ("max_rows", PI)]


class Older(_lib.Options_t):
    """clembed_embed_options as a binding written before padding_keeps_row declares it."""
    _fields_ = [f for f in _lib.EmbedOptions_t._fields_ if f[0] not in ("padding_keeps_row", "remap")]


class Fenced:
    """n bytes that end where an unreadable page begins (where mmap and mprotect allow;
    else a plain buffer of exactly n bytes)."""

    def __init__(self, data: bytes) -> None:
        n = len(data)
        page = mmap.PAGESIZE
        self.size = (n + page - 1) // page * page + page
        self.map = mmap.mmap(-1, self.size)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.map)) + self.size - page - n
        ctypes.memmove(self.addr, data, n)
        libc = ctypes.CDLL(None)
        try:
            libc.mprotect.argtypes = [ctypes.c_void_p, c_size_t, c_int]
            self.fenced = libc.mprotect(ctypes.c_void_p(self.addr + n), page, 0) == 0   # PROT_NONE
        except AttributeError:  # pragma: no cover
            self.fenced = False

    def ptr(self, t):
        return ctypes.cast(ctypes.c_void_p(self.addr), ctypes.POINTER(t))


def call_embed(ctx, table, ids, opt_ptr, out):
    return _lib.lib.clembed_embed(ctx._live, ctypes.byref(table._m), ctypes.byref(ids._ids),
                                  ctypes.cast(opt_ptr, ctypes.POINTER(_lib.EmbedOptions_t)), ctypes.byref(out._m),
                                  0, None, None)


def detail(ctx):
    d = _lib.ErrorDetail_t()
    _lib.lib.clembed_context_error(ctx._live, ctypes.byref(d))
    return d.argument.decode(), int(d.value)


def make_case(ctx):
    W = (1.0 + np.arange(24, dtype=np.float32)).reshape(6, 4)
    table = ctx.matrix(W)
    ids = ctx.ids(np.array([2, 5, 2], np.int32))
    out = ctx.empty(3, 4)
    return W, table, ids, out


def test_a_0_3_struct_is_refused_not_read_past(ctx):
    W, table, ids, out = make_case(ctx)
    for scale in (1.0, 0.5, 8.0, 0.0):
        for policy in range(4):
            o = V03EmbedOptions(scale=scale, policy=policy, padding_idx=-2 ** 63, sinusoid=V03Sinusoid(10000.0),
                                norm=V03Norm(eps=1e-5))
            buf = Fenced(bytes(o))
            assert call_embed(ctx, table, ids, buf.ptr(V03EmbedOptions), out) == INVALID, (scale, policy)
            arg, value = detail(ctx)
            assert arg == "opt"
    for mode in range(3):
        b = V03BagOptions(mode=mode, policy=0, padding_idx=-2 ** 63)
        buf = Fenced(bytes(b))
        offs = ctx.ids(np.array([0, 1, 3], np.int32))
        st = _lib.lib.clembed_embedding_bag(ctx._live, ctypes.byref(table._m), ctypes.byref(ids._ids),
                                            ctypes.byref(offs._ids), buf.ptr(_lib.BagOptions_t),
                                            ctypes.byref(ctx.empty(2, 4)._m), 0, None, None)
        assert st == INVALID, mode
    ctx.finish()


def test_an_older_binding_struct_is_read_as_far_as_it_goes(ctx):
    W, table, ids, out = make_case(ctx)
    o = Older()                                   # struct_size = its own (smaller) size
    assert o.struct_size == ctypes.sizeof(Older) < ctypes.sizeof(_lib.EmbedOptions_t)
    o.scale, o.padding_idx = 1.0, 2
    o.sinusoid.base = 10000.0
    o.norm.eps = 1e-5
    buf = Fenced(bytes(o))
    assert call_embed(ctx, table, ids, buf.ptr(Older), out) == 0, ctx.message
    got = out.numpy()
    assert np.all(got[[0, 2]] == 0) and np.array_equal(got[1], W[5])     # padding_keeps_row: its default, 0
    # the same bytes followed by padding_keeps_row = 1: not read while struct_size is the older one
    full = _lib.EmbedOptions_t()
    ctypes.memmove(ctypes.addressof(full), ctypes.addressof(o), ctypes.sizeof(o))
    full.padding_keeps_row = 1
    assert full.struct_size == ctypes.sizeof(Older)
    assert call_embed(ctx, table, ids, ctypes.pointer(full), out) == 0
    assert np.all(out.numpy()[[0, 2]] == 0)
    full.struct_size = ctypes.sizeof(full)                                    # this version's: read
    assert call_embed(ctx, table, ids, ctypes.pointer(full), out) == 0
    assert np.array_equal(out.numpy(), W[[2, 5, 2]])


def test_sizes_are_checked(ctx):
    W, table, ids, out = make_case(ctx)
    o = _lib.lib.clembed_embed_defaults()
    for size in (0, 3, ctypes.sizeof(o) + 8, 2 ** 40):
        o.struct_size = size
        assert call_embed(ctx, table, ids, ctypes.pointer(o), out) == INVALID, size
        assert detail(ctx) == ("opt", size)
    o.struct_size = ctypes.sizeof(o)
    o.norm.struct_size = 0
    assert call_embed(ctx, table, ids, ctypes.pointer(o), out) == INVALID
    assert detail(ctx)[0] == "norm"
    # made in Python, the struct and the structs inside it carry their sizes
    p = _lib.EmbedOptions_t(scale=1.0, padding_idx=-2 ** 63)
    p.sinusoid.base, p.norm.eps = 10000.0, 1e-5
    assert call_embed(ctx, table, ids, ctypes.pointer(p), out) == 0
    assert np.array_equal(out.numpy(), W[[2, 5, 2]])
