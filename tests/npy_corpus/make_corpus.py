#!/usr/bin/env python3
"""Generate the .npy test corpus for tests/test_npy.c (Python standard library only).

Run from anywhere:  python3 tests/npy_corpus/make_corpus.py
The files are written next to this script and committed as data; the output is
deterministic, so re-running it must not change them.

Every "good_*" file holds arange(count) values (0, 1, 2, ...) converted to its
dtype; test_npy.c checks dtype, shape and values from its own table.  Every
"bad_*" file is one the command-line tool takes in no role: the library's reader
(clembed_file_open) refuses it with a message that contains the file name and
the substring listed in brackets, or (the types clembed cannot use, listed
without brackets) lists it with dtype -1; test_npy.c checks which.

good files (dtype, shape):
  good_f4_1d.npy            <f4 (5,)
  good_f2_2d.npy            <f2 (2, 3)
  good_i4_1d.npy            <i4 (4,)
  good_i8_2d.npy            <i8 (3, 2)
  good_v2.npy               <f4 (3,)      format 2.0 (4-byte header length)
  good_v3.npy               <i4 (2, 2)    format 3.0 (utf-8 header)
  good_empty.npy            <f4 (0,)      no data bytes
  good_empty_2d.npy         <f4 (0, 5)    no data bytes
  good_keys_reordered.npy   <f4 (2, 2)    keys in the order shape, fortran_order, descr
  good_whitespace.npy       <i4 (3,)      double quotes, tabs/newlines, spaces inside the
                                          tuple, no trailing comma after the last item
  good_unpadded.npy         <i4 (2,)      header neither 64-byte aligned nor '\\n'-terminated
  good_py2_long.npy         <i8 (3,)      Python 2 style "(3L,)" as written by old NumPy
  good_3d.npy               <i4 (2, 2, 2)
  good_9d.npy               <f4 (1, 2, 1, 1, 3, 1, 1, 1, 2)
  good_scalar_0d.npy        <i8 ()        zero-dimensional: ndim 0, count 1

bad files [expected message substring], or listed with dtype -1:
  bad_empty_file.npy           0 bytes                                ["empty file"]
  bad_magic.npy                "\\x93NUMPZ" magic                      ["not a .npy, .safetensors or .gguf file"]
  bad_truncated_magic.npy      only the first 4 magic bytes            ["not a .npy, .safetensors or .gguf file"]
  bad_version.npy              format 9.0                              ["version"]
  bad_version_minor.npy        format 1.1                              ["version"]
  bad_truncated_header.npy     ends inside the 2-byte header length    ["ends inside the header length"]
  bad_header_len_lies.npy      header length 60000, file far shorter   ["points past the end of the file"]
  bad_v2_header_len_huge.npy   format 2.0, header length 0xffffffff    ["points past the end of the file"]
  bad_header_len_zero.npy      header length 0                         ["header is empty"]
  bad_truncated_body.npy       <f4 (5,) with 12 of 20 data bytes       ["truncated .npy data: expected 20 bytes, found 12"]
  bad_trailing_garbage.npy     <f4 (2,) followed by 3 extra bytes      ["trailing garbage"]
  bad_big_endian.npy           '>f4'                                   listed, unusable
  bad_f8.npy                   '<f8'                                   listed, unusable
  bad_u4.npy                   '<u4'                                   listed, unusable
  bad_pipe_f4.npy              '|f4'                                   listed, unusable
  bad_native_f4.npy            '=f4'                                   listed, unusable
  bad_object.npy               '|O'                                    ["unsupported .npy dtype '|O'"]
  bad_structured_dtype.npy     [('a', '<f4'), ('b', '<i4')]            ["structured"]
  bad_fortran.npy              'fortran_order': True, shape (2, 3)     ["fortran_order"]
  bad_fortran_not_bool.npy     'fortran_order': 0                      ["fortran_order"]
  bad_negative_dim.npy         shape (-3,)                             ["negative"]
  bad_nonnumeric_dim.npy       shape ('3',)                            ["non-numeric"]
  bad_float_dim.npy            shape (3.0,)                            ["non-numeric"]
  bad_dim_too_large.npy        shape (99999999999999999999999,)       ["too large"]
  bad_huge_dims_overflow.npy   shape (4294967296, 4294967296, 16)      ["overflow"]
  bad_bytes_overflow.npy       <i8 (2305843009213693952,): count fits,
                               count * 8 = 2**64 does not              ["overflow"]
  bad_huge_body_claim.npy      <f4 (1099511627776,), no data (must not
                               try to allocate 4 TiB)                  ["truncated"]
  bad_too_many_dims.npy        65 dimensions                           ["more than 64 dimensions"]
  bad_not_a_dict.npy           header is a list                        ["not a dict"]
  bad_shape_not_tuple.npy      shape (3) (an int in Python)            ["not a tuple"]
  bad_shape_list.npy           shape [3]                               ["not a tuple"]
  bad_missing_shape.npy        no 'shape' key                          ["missing key 'shape'"]
  bad_missing_descr.npy        no 'descr' key                          ["missing key 'descr'"]
  bad_missing_fortran.npy      no 'fortran_order' key                  ["missing key 'fortran_order'"]
  bad_unknown_key.npy          extra key 'foo'                         ["unexpected key"]
  bad_duplicate_key.npy        'shape' given twice                     ["duplicate"]
  bad_unterminated_dict.npy    dict never closed                       ["unterminated dict"]
  bad_unterminated_string.npy  header "{'descr': '<f4" + padding      ["unterminated string"]
  bad_junk_after_dict.npy      "xyz" after the closing brace           ["after the dict"]
  bad_nul_in_header.npy        NUL byte inside the dict                ["malformed .npy header"]
"""

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = b"\x93NUMPY"


def header_dict(descr, shape, fortran=False):
    if len(shape) == 1:
        s = "(%d,)" % shape[0]
    else:
        s = "(" + ", ".join(str(d) for d in shape) + ")"
    return "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (
        descr if descr.startswith("[") else "'%s'" % descr,
        "True" if fortran else "False",
        s,
    )


def npy(header, body=b"", version=(1, 0), pad=True, hlen=None):
    """Assemble a .npy file.  header: str or bytes (the dict text)."""
    if isinstance(header, str):
        header = header.encode("utf-8" if version[0] >= 3 else "latin-1")
    prelen = 10 if version[0] == 1 else 12
    if pad:
        total = prelen + len(header) + 1
        header = header + b" " * ((-total) % 64) + b"\n"
    if hlen is None:
        hlen = len(header)
    lenfield = struct.pack("<H" if version[0] == 1 else "<I", hlen)
    return MAGIC + bytes(version) + lenfield + header + body


def arange(fmt, n):
    return b"".join(struct.pack("<" + fmt, i) for i in range(n))


def prod(shape):
    p = 1
    for d in shape:
        p *= d
    return p


def good(descr, shape, **kw):
    fmt = {"<f4": "f", "<f2": "e", "<i4": "i", "<i8": "q"}[descr]
    return npy(header_dict(descr, shape), arange(fmt, prod(shape)), **kw)


def files():
    f = {}
    # ---------------------------------------------------------------- good
    f["good_f4_1d"] = good("<f4", (5,))
    f["good_f2_2d"] = good("<f2", (2, 3))
    f["good_i4_1d"] = good("<i4", (4,))
    f["good_i8_2d"] = good("<i8", (3, 2))
    f["good_v2"] = good("<f4", (3,), version=(2, 0))
    f["good_v3"] = good("<i4", (2, 2), version=(3, 0))
    f["good_empty"] = good("<f4", (0,))
    f["good_empty_2d"] = good("<f4", (0, 5))
    f["good_keys_reordered"] = npy(
        "{'shape': (2, 2), 'fortran_order': False, 'descr': '<f4'}", arange("f", 4))
    f["good_whitespace"] = npy(
        '{ "descr" :\t"<i4" ,\n  "fortran_order":False,"shape" : ( 3 , ) }',
        arange("i", 3))
    f["good_unpadded"] = npy(
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", arange("i", 2), pad=False)
    f["good_py2_long"] = npy(
        "{'descr': '<i8', 'fortran_order': False, 'shape': (3L,), }", arange("q", 3))
    f["good_3d"] = good("<i4", (2, 2, 2))
    f["good_9d"] = good("<f4", (1, 2, 1, 1, 3, 1, 1, 1, 2))
    f["good_scalar_0d"] = npy(
        "{'descr': '<i8', 'fortran_order': False, 'shape': (), }", arange("q", 1))

    # ----------------------------------------------------------------- bad
    ok_f4_3 = good("<f4", (3,))
    f["bad_empty_file"] = b""
    f["bad_magic"] = b"\x93NUMPZ" + ok_f4_3[6:]
    f["bad_truncated_magic"] = MAGIC[:4]
    f["bad_version"] = MAGIC + b"\x09\x00" + ok_f4_3[8:]
    f["bad_version_minor"] = MAGIC + b"\x01\x01" + ok_f4_3[8:]
    f["bad_truncated_header"] = MAGIC + b"\x01\x00" + b"\x76"
    f["bad_header_len_lies"] = npy(header_dict("<f4", (3,)), arange("f", 3), hlen=60000)
    f["bad_v2_header_len_huge"] = npy(header_dict("<f4", (3,)), arange("f", 3),
                                      version=(2, 0), hlen=0xFFFFFFFF)
    f["bad_header_len_zero"] = MAGIC + b"\x01\x00" + b"\x00\x00"
    f["bad_truncated_body"] = npy(header_dict("<f4", (5,)), arange("f", 3))
    f["bad_trailing_garbage"] = npy(header_dict("<f4", (2,)), arange("f", 2) + b"xyz")
    f["bad_big_endian"] = npy(header_dict(">f4", (3,)), struct.pack(">3f", 0, 1, 2))
    f["bad_f8"] = npy(header_dict("<f8", (3,)), struct.pack("<3d", 0, 1, 2))
    f["bad_u4"] = npy(header_dict("<u4", (3,)), arange("I", 3))
    f["bad_pipe_f4"] = npy(header_dict("|f4", (3,)), arange("f", 3))
    f["bad_native_f4"] = npy(header_dict("=f4", (3,)), arange("f", 3))
    f["bad_object"] = npy(header_dict("|O", (1,)), b"\x00" * 8)
    f["bad_structured_dtype"] = npy(
        header_dict("[('a', '<f4'), ('b', '<i4')]", (2,)), b"\x00" * 16)
    f["bad_fortran"] = npy(header_dict("<f4", (2, 3), fortran=True), arange("f", 6))
    f["bad_fortran_not_bool"] = npy(
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,), }", arange("f", 3))
    f["bad_negative_dim"] = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }")
    f["bad_nonnumeric_dim"] = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': ('3',), }", arange("f", 3))
    f["bad_float_dim"] = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3.0,), }", arange("f", 3))
    f["bad_dim_too_large"] = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }")
    f["bad_huge_dims_overflow"] = npy(header_dict("<f4", (4294967296, 4294967296, 16)))
    f["bad_bytes_overflow"] = npy(header_dict("<i8", (2305843009213693952,)))
    f["bad_huge_body_claim"] = npy(header_dict("<f4", (1099511627776,)))
    f["bad_too_many_dims"] = npy(header_dict("<f4", (1,) * 65), arange("f", 1))
    f["bad_not_a_dict"] = npy("['descr', '<f4', 'fortran_order', False, 'shape', (3,)]",
                              arange("f", 3))
    f["bad_shape_not_tuple"] = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", arange("f", 3))
    f["bad_shape_list"] = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': [3], }", arange("f", 3))
    f["bad_missing_shape"] = npy("{'descr': '<f4', 'fortran_order': False, }", arange("f", 1))
    f["bad_missing_descr"] = npy("{'fortran_order': False, 'shape': (3,), }", arange("f", 3))
    f["bad_missing_fortran"] = npy("{'descr': '<f4', 'shape': (3,), }", arange("f", 3))
    f["bad_unknown_key"] = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'foo': 1, }", arange("f", 3))
    f["bad_duplicate_key"] = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'shape': (3,), }",
        arange("f", 3))
    f["bad_unterminated_dict"] = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), ", arange("f", 3))
    f["bad_unterminated_string"] = npy("{'descr': '<f4", arange("f", 3))
    f["bad_junk_after_dict"] = npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), } xyz", arange("f", 3))
    f["bad_nul_in_header"] = npy(
        b"{'descr': '<f4', 'fortran_order': False,\x00 'shape': (3,), }", arange("f", 3))
    return f


def main():
    for name, data in sorted(files().items()):
        with open(os.path.join(HERE, name + ".npy"), "wb") as fh:
            fh.write(data)
    print("wrote %d files to %s" % (len(files()), HERE))


if __name__ == "__main__":
    main()
