"""The ctypes mirrors of python/clembed/_lib.py against the C headers, so that a header
change cannot silently corrupt a call: every struct's size, alignment and field offsets
and sizes (as tests/abi_layout.c, compiled with the headers, prints them), every enum
constant's value, and every prototype's argument and result types. The field and
constant lists themselves are read from the headers, so a field added there and
forgotten in abi_layout.c or _lib.py fails here too.

ctest runs it with CLEMBED_ABI_LAYOUT=<the built abi_layout>; no device is needed."""
import ctypes
import os
import re
import subprocess

import pytest

import clembed
from clembed import _lib

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.environ.get("CLEMBED_INCLUDE_DIR", os.path.join(HERE, "..", "..", "include"))
HEADERS = ["clembed.h", "clembed_io.h"]

# Public structs and enums that the binding does not use yet, with the reason. Everything
# else in the headers must have its mirror.
NOT_BOUND = {}


def _strip(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^\s*#[^\n]*(\\\n[^\n]*)*", " ", text, flags=re.M)


@pytest.fixture(scope="module")
def header():
    return " ".join(_strip(open(os.path.join(INCLUDE, h)).read()) for h in HEADERS)


@pytest.fixture(scope="module")
def layout():
    """{'struct': {name: (size, align)}, 'field': {name: [(field, offset, size)]}, 'const': {name: value},
    'libsize': {name: clembed_struct_size of the option struct}}"""
    exe = os.environ.get("CLEMBED_ABI_LAYOUT")
    if not exe:
        for guess in (os.path.join(HERE, "..", "..", "build", "tests", "abi_layout"),):
            if os.path.exists(guess):
                exe = guess
    if not exe:
        pytest.skip("CLEMBED_ABI_LAYOUT is not set (ctest sets it to the built tests/abi_layout)")
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    got = {"struct": {}, "field": {}, "const": {}, "libsize": {}}
    for line in out.splitlines():
        kind, name, *rest = line.split()
        if kind == "struct":
            got["struct"][name] = (int(rest[0]), int(rest[1]))
            got["field"][name] = []
        elif kind == "field":
            got["field"][name].append((rest[0], int(rest[1]), int(rest[2])))
        elif kind == "const":
            got["const"][name] = int(rest[0])
        elif kind == "libsize":
            got["libsize"][name] = int(rest[0])
    return got


def header_structs(text):
    """{struct name: [field names in order]} of every struct defined in the headers."""
    out = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        assert m.group(1) == m.group(3), "typedef struct %s {...} %s" % (m.group(1), m.group(3))
        fields = []
        for decl in m.group(2).split(";"):
            decl = decl.strip()
            if not decl:
                continue
            assert "{" not in decl and "(" not in decl, "struct %s: a field the test cannot read: %s" % (
                m.group(1), decl)
            first, *more = [d.strip() for d in decl.split(",")]
            for d in [first] + more:
                name = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", d)
                fields.append(name.group(1))
        out[m.group(1)] = fields
    return out


def header_enums(text):
    """{enum type name: [constant names]} of every enum in the headers."""
    out = {}
    for m in re.finditer(r"typedef\s+enum\s*\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        out[m.group(2)] = [c.split("=")[0].strip() for c in m.group(1).split(",") if c.strip()]
    return out


def header_functions(text):
    """{function name: (result type, [parameter types])} of every CLEMBED_API function."""
    out = {}
    for m in re.finditer(r"CLEMBED_API\s+([^;(]*?)\b(clembed_\w+)\s*\(([^;]*?)\)\s*;", text, flags=re.S):
        params = [" ".join(p.split()) for p in m.group(3).split(",")]
        if params == ["void"]:
            params = []
        out[m.group(2)] = (" ".join(m.group(1).split()), params)
    return out


def test_every_struct_matches_the_header(header, layout):
    structs = header_structs(header)
    assert "clembed_matrix" in structs and "clembed_embed_options" in structs   # the parser reads them
    for name, fields in structs.items():
        if name in NOT_BOUND:
            continue
        assert name in layout["struct"], "tests/abi_layout.c does not list struct %s" % name
        assert name in _lib.STRUCTS, "python/clembed/_lib.py has no mirror of struct %s" % name
        c_fields = layout["field"][name]
        assert [f[0] for f in c_fields] == fields, (
            "struct %s: abi_layout.c lists %s, the header has %s" % (name, [f[0] for f in c_fields], fields))
        mirror = _lib.STRUCTS[name]
        assert [f[0] for f in mirror._fields_] == fields, (
            "struct %s: _lib.py has %s, the header %s" % (name, [f[0] for f in mirror._fields_], fields))
        size, align = layout["struct"][name]
        assert ctypes.sizeof(mirror) == size, "sizeof(%s): C %d, ctypes %d" % (name, size, ctypes.sizeof(mirror))
        assert ctypes.alignment(mirror) == align, "alignof(%s): C %d, ctypes %d" % (
            name, align, ctypes.alignment(mirror))
        for field, offset, fsize in c_fields:
            d = getattr(mirror, field)
            assert (d.offset, d.size) == (offset, fsize), "%s.%s: C offset %d size %d, ctypes %d %d" % (
                name, field, offset, fsize, d.offset, d.size)
    assert set(_lib.STRUCTS) <= set(structs), "mirrors of structs the headers lack: %s" % (
        set(_lib.STRUCTS) - set(structs))


def test_option_structs_carry_their_size(header, layout):
    """The option structs (include/clembed.h, "Option structs") start with struct_size; the
    library's clembed_struct_size of each is the header's sizeof and the mirror's, and a
    mirror made here, the option structs inside it and each element of _lib.sized_array
    carry their own size (an option struct with struct_size 0 is refused by every call)."""
    structs = header_structs(header)
    names = {"clembed_" + k: t for k, t in _lib.STRUCT_MIRRORS.items()}
    assert set(layout["libsize"]) == set(names), "abi_layout.c prints libsize of %s" % sorted(layout["libsize"])
    for name, mirror in names.items():
        assert structs[name][0] == "struct_size", "%s does not start with struct_size" % name
        assert _lib.STRUCTS[name] is mirror
        assert layout["libsize"][name] == layout["struct"][name][0] == ctypes.sizeof(mirror), (
            "%s: clembed_struct_size %d, sizeof %d, ctypes %d" % (
                name, layout["libsize"][name], layout["struct"][name][0], ctypes.sizeof(mirror)))
        assert _lib.lib.clembed_struct_size(_lib.STRUCT_TYPES[name[len("clembed_"):]]) == ctypes.sizeof(mirror)
        made = mirror()
        assert made.struct_size == ctypes.sizeof(mirror), name
    assert [n for n, f in structs.items() if f[0] == "struct_size"] and all(
        n in names for n, f in structs.items() if f[0] == "struct_size"), "a sized struct without a mirror table entry"
    o = _lib.EmbedOptions_t()
    assert (o.sinusoid.struct_size, o.norm.struct_size) == (ctypes.sizeof(_lib.Sinusoid_t), ctypes.sizeof(_lib.Norm_t))
    arr = _lib.sized_array(_lib.BagFeature_t, 3)
    assert all(arr[k].struct_size == ctypes.sizeof(_lib.BagFeature_t) and
               arr[k].options.struct_size == ctypes.sizeof(_lib.BagOptions_t) for k in range(3))
    for fn, mirror in (("clembed_embed_defaults", _lib.EmbedOptions_t), ("clembed_backward_defaults",
                                                                          _lib.BackwardOptions_t),
                       ("clembed_sinusoid_defaults", _lib.Sinusoid_t), ("clembed_norm_defaults", _lib.Norm_t),
                       ("clembed_embed_grads_defaults", _lib.EmbedGrads_t), ("clembed_rope_defaults", _lib.Rope_t),
                       ("clembed_bag_defaults", _lib.BagOptions_t),
                       ("clembed_bag_feature_defaults", _lib.BagFeature_t)):
        assert getattr(_lib.lib, fn)().struct_size == ctypes.sizeof(mirror), fn
    assert _lib.lib.clembed_optimizer_defaults(3).struct_size == ctypes.sizeof(_lib.Optimizer_t)


def test_every_enum_constant_matches(header, layout):
    enums = header_enums(header)
    assert "clembed_dtype" in enums and "clembed_status" in enums
    for enum, constants in enums.items():
        if enum in NOT_BOUND:
            continue
        assert enum in _lib.ENUMS, "python/clembed/_lib.py has no table of enum %s" % enum
        table, prefix = _lib.ENUMS[enum]
        python = {prefix + k.upper(): v for k, v in table.items()}
        assert sorted(python) == sorted(constants), "enum %s: Python names %s, the header %s" % (
            enum, sorted(python), sorted(constants))
        for c in constants:
            assert c in layout["const"], "tests/abi_layout.c does not print %s" % c
            assert python[c] == layout["const"][c], "%s: C %d, Python %d" % (c, layout["const"][c], python[c])
    assert layout["const"]["CLEMBED_NO_PADDING"] == _lib.NO_PADDING
    errors = {n: getattr(clembed, n) for n in dir(clembed) if n.startswith("ERR_")}
    for n, v in errors.items():
        assert layout["const"]["CLEMBED_" + n] == v


def test_versions_agree(layout):
    c = layout["const"]
    header = "%d.%d.%d" % (c["CLEMBED_VERSION_MAJOR"], c["CLEMBED_VERSION_MINOR"], c["CLEMBED_VERSION_PATCH"])
    assert clembed.__version__ == header
    assert clembed.library_version() == (c["CLEMBED_VERSION_MAJOR"] * 10000 + c["CLEMBED_VERSION_MINOR"] * 100
                                         + c["CLEMBED_VERSION_PATCH"])


# C type (without const) -> the ctypes type a prototype must use
_SCALARS = {"size_t": ctypes.c_size_t, "uint64_t": ctypes.c_uint64, "int64_t": ctypes.c_int64,
            "cl_ulong": ctypes.c_uint64, "cl_device_type": ctypes.c_uint64, "int": ctypes.c_int,
            "unsigned": ctypes.c_uint, "cl_uint": ctypes.c_uint, "float": ctypes.c_float,
            "double": ctypes.c_double, "cl_float": ctypes.c_float}
_HANDLES = {"cl_mem", "cl_command_queue", "cl_event", "cl_context", "cl_device_id"}


def _expected(ctype, enums):
    """('exact', ctypes type) or ('pointer', None) for a C type written in a header."""
    words = ctype.replace("*", " * ").split()
    stars = words.count("*")
    words = [w for w in words if w not in ("const", "struct", "*")]
    assert len(words) == 2, "a parameter the test cannot read (type and name): %r" % ctype
    b = words[0]             # words[1] is the parameter's name
    if stars == 0 and b in _HANDLES:
        return "pointer", None
    if stars == 1 and b == "char":
        return "exact", ctypes.c_char_p
    if stars == 1 and b in _lib.STRUCTS:
        return "exact", ctypes.POINTER(_lib.STRUCTS[b])
    if stars:
        return "pointer", None
    if b == "void":
        return "exact", None
    if b in enums or b == "clembed_status":
        return "exact", ctypes.c_int
    if b in _lib.STRUCTS:
        return "exact", _lib.STRUCTS[b]
    assert b in _SCALARS, "a C type the test does not know: %r" % ctype
    return "exact", _SCALARS[b]


def _check(kind, want, got, what):
    if kind == "exact":
        assert got is want, "%s: the header says %s, _lib.py %s" % (what, want, got)
    else:
        ok = got in (ctypes.c_void_p, ctypes.c_char_p) or (isinstance(got, type) and issubclass(got, ctypes._Pointer))
        assert ok, "%s: the header has a pointer, _lib.py %s" % (what, got)


def test_every_prototype_matches(header):
    functions = header_functions(header)
    enums = header_enums(header)
    assert "clembed_embed" in functions
    for name, (res, args) in _lib.PROTOTYPES.items():
        assert name in functions, "_lib.py declares %s, which the headers do not" % name
        c_res, c_params = functions[name]
        assert len(args) == len(c_params), "%s: %d parameters in the header, %d in _lib.py" % (
            name, len(c_params), len(args))
        _check(*_expected(c_res + " r", enums), res, "%s result" % name)
        for i, (p, a) in enumerate(zip(c_params, args)):
            _check(*_expected(p, enums), a, "%s parameter %d (%s)" % (name, i + 1, p))
