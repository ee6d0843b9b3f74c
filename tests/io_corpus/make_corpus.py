#!/usr/bin/env python3
"""Generate the hostile-file corpus of the library's file readers (clembed_io.h).

Run from anywhere:  python3 tests/io_corpus/make_corpus.py
Python standard library only. The files are written next to this script and
committed as data; the output is deterministic, so re-running it must not
change them. It also writes EXPECTED, one line per file:
  bad_NAME<TAB>a substring the refusal's message must contain
  good_NAME<TAB>the file's tensor count
tests/test_io.c (case "corpus") checks that clembed_file_open refuses every
bad_* file with CLEMBED_ERR_INVALID_ARGUMENT and a message naming the file and
saying what is wrong, opens every good_* file, and that EXPECTED lists every
file. The fuzz targets start from these files too.
"""

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = {}  # name -> (bytes, expectation)


def bad(name, data, needle):
    FILES["bad_" + name] = (data, needle)


def good(name, data, count):
    FILES["good_" + name] = (data, str(count))


# ---------------------------------------------------------------- .npy


def npy(dict_text, body=b"", major=1, hlen=None):
    pre = 10 if major == 1 else 12
    total = (pre + len(dict_text) + 1 + 63) // 64 * 64
    header = dict_text.encode("latin-1") + b" " * (total - pre - len(dict_text) - 1) + b"\n"
    n = len(header) if hlen is None else hlen
    length = struct.pack("<H", n) if major == 1 else struct.pack("<I", n)
    return b"\x93NUMPY" + bytes([major, 0]) + length + header + body


def npy_dict(descr="'<f4'", fortran="False", shape="(2,)"):
    return "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)


good("npy_f4.npy", npy(npy_dict(shape="(2, 3)"), struct.pack("<6f", *range(6))), 1)
good("npy_v3_i8.npy", npy(npy_dict("'<i8'", shape="(3,)"), struct.pack("<3q", 1, 2, 3), major=3), 1)
bad("npy_magic_only.npy", b"\x93NUMPY", "truncated .npy header")
bad("npy_version.npy", b"\x93NUMPY\x09\x00" + b"\x00" * 60, "version 9.0")
bad("npy_header_len_lies.npy", npy(npy_dict(), struct.pack("<2f", 1, 2), hlen=60000), "points past the end")
bad("npy_v2_header_len_huge.npy", npy(npy_dict(), b"", major=2, hlen=0xFFFFFFFF), "points past the end")
bad("npy_header_empty.npy", b"\x93NUMPY\x01\x00\x00\x00", "header is empty")
bad("npy_truncated_body.npy", npy(npy_dict(shape="(5,)"), b"\x00" * 12), "truncated .npy data: expected 20 bytes, found 12")
bad("npy_trailing.npy", npy(npy_dict(), b"\x00" * 11), "trailing garbage")
bad("npy_structured.npy", npy(npy_dict("[('a', '<f4')]")), "structured")
bad("npy_object.npy", npy(npy_dict("'|O'")), "unsupported .npy dtype")
bad("npy_fortran.npy", npy(npy_dict(fortran="True", shape="(2, 3)"), b"\x00" * 24), "fortran_order True")
bad("npy_negative_dim.npy", npy(npy_dict(shape="(-3,)")), "negative")
bad("npy_overflow.npy", npy(npy_dict(shape="(4294967296, 4294967296, 16)")), "overflows")
bad("npy_zero_dim_overflow.npy", npy(npy_dict(shape="(0, 4294967296, 4294967296, 16)")), "overflows")
bad("npy_huge_claim.npy", npy(npy_dict(shape="(1099511627776,)")), "truncated .npy data")
good("npy_five_dims.npy", npy(npy_dict(shape="(1, 1, 1, 1, 1)"), b"\x00" * 4), 1)
bad("npy_65_dims.npy", npy(npy_dict(shape="(%s)" % ", ".join(["1"] * 65)), b"\x00" * 4), "more than 64 dimensions")
bad("npy_missing_shape.npy", npy("{'descr': '<f4', 'fortran_order': False}"), "missing key 'shape'")
bad("npy_duplicate_key.npy", npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}"),
    "duplicate key 'descr'")
bad("npy_unterminated_string.npy", npy("{'descr': '<f4"), "unterminated string")
bad("npy_dim_too_large.npy", npy(npy_dict(shape="(99999999999999999999999,)")), "too large")
bad("npy_junk_after_dict.npy", npy(npy_dict() + "xyz"), "after the dict")

# --------------------------------------------------------- .safetensors


def st(header, data=b"", n=None, pad=True):
    h = header.encode("utf-8") if isinstance(header, str) else header
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h) if n is None else n) + h + data


def entry(name, dtype="F32", shape="[2]", offsets="[0, 8]"):
    return '"%s": {"dtype": "%s", "shape": %s, "data_offsets": %s}' % (name, dtype, shape, offsets)


good("st_two.safetensors",
     st('{"__metadata__": {"format": "pt"}, %s, %s}' % (entry("a"), entry("b", "I64", "[1]", "[8, 16]")), b"\x00" * 16), 2)
good("st_empty.safetensors", st("{}"), 0)
bad("st_open_brace_only.safetensors", st("{", pad=False), "end of the header")
bad("st_len_past_end.safetensors", st("{}", n=1000), "points past the end")
bad("st_len_huge.safetensors", st("{}", n=2**64 - 1), "points past the end")
bad("st_trailing_comma.safetensors", st("{%s,}" % entry("a"), b"\x00" * 8), "expected a string")
bad("st_begin_after_end.safetensors", st("{%s}" % entry("a", offsets="[8, 4]"), b"\x00" * 8), "begin after they end")
bad("st_end_past_data.safetensors", st("{%s}" % entry("a", offsets="[0, 1000]"), b"\x00" * 8), "end past the data section")
bad("st_size_mismatch.safetensors", st("{%s}" % entry("a", shape="[2, 2]", offsets="[0, 12]"), b"\x00" * 12),
    "hold 12 bytes, but 4 F32 values take 16")
bad("st_shape_overflow.safetensors", st("{%s}" % entry("a", shape="[4294967296, 4294967296, 16]")), "overflows")
bad("st_zero_dim_overflow.safetensors", st("{%s}" % entry("a", shape="[0, 4294967296, 4294967296]", offsets="[0, 0]")),
    "overflows")
bad("st_offset_overflow.safetensors", st("{%s}" % entry("a", offsets="[0, 99999999999999999999999]")),
    "overflows 64 bits")
bad("st_negative_dim.safetensors", st("{%s}" % entry("a", shape="[-1]")), "negative")
bad("st_float_dim.safetensors", st("{%s}" % entry("a", shape="[2.0]")), "not an integer")
bad("st_leading_zero.safetensors", st("{%s}" % entry("a", offsets="[00, 8]"), b"\x00" * 8), "leading zero")
bad("st_unknown_dtype.safetensors", st("{%s}" % entry("a", dtype="F128"), b"\x00" * 8), "unknown safetensors dtype")
bad("st_missing_offsets.safetensors", st('{"a": {"dtype": "F32", "shape": [2]}}', b"\x00" * 8), "no 'data_offsets'")
bad("st_duplicate_name.safetensors", st("{%s, %s}" % (entry("a"), entry("a", offsets="[8, 16]")), b"\x00" * 16),
    "two tensors are named 'a'")
bad("st_duplicate_key.safetensors",
    st('{"a": {"dtype": "F32", "dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', b"\x00" * 8),
    "duplicate key 'dtype'")
bad("st_gap.safetensors", st("{%s, %s}" % (entry("a"), entry("b", offsets="[12, 20]")), b"\x00" * 20), "leave a gap")
bad("st_overlap.safetensors", st("{%s, %s}" % (entry("a"), entry("b", offsets="[4, 12]")), b"\x00" * 12), "overlap")
bad("st_uncovered_data.safetensors", st("{%s}" % entry("a"), b"\x00" * 9), "cover 8 bytes, but 9 bytes follow")
bad("st_metadata_not_string.safetensors", st('{"__metadata__": {"n": 1}}'), "is not a string")
bad("st_metadata_twice.safetensors", st('{"__metadata__": {}, "__metadata__": {}}'), "two '__metadata__'")
bad("st_bad_utf8.safetensors", st(b'{"\xc3\x28": {}}'), "invalid UTF-8")
bad("st_nul_name.safetensors", st("{%s}" % entry("a\\u0000b"), b"\x00" * 8), "NUL")
bad("st_lone_surrogate.safetensors", st("{%s}" % entry("a\\ud800"), b"\x00" * 8), "surrogate")
bad("st_deep_nesting.safetensors",
    st('{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": %s%s}}' % ("[" * 100, "]" * 100),
       b"\x00" * 8), "nests deeper")
bad("st_junk_after.safetensors", st("{} x"), "only spaces may follow")
good("st_five_dims.safetensors", st("{%s}" % entry("a", shape="[1, 1, 1, 1, 2]"), b"\x00" * 8), 1)
bad("st_65_dims.safetensors", st("{%s}" % entry("a", shape="[%s]" % ", ".join(["1"] * 64 + ["2"])), b"\x00" * 8),
    "more than 64 dimensions")
bad("st_control_char.safetensors", st('{"a\tb": {}}'), "control character")
bad("st_unterminated.safetensors", st('{"abc', pad=False), "unterminated string")
bad("st_empty_tensor_object.safetensors", st('{"a": {}}'), "empty object")
bad("st_not_an_object.safetensors", st('{"a": [1, 2]}'), "expected an object for a tensor")

# ---------------------------------------------------------------- .gguf


def gstr(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


def tinfo(name, dims, gtype=0, offset=0):
    return gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", gtype, offset)


def gguf(kvs=(), infos=(), data=b"", version=3, align=32, ntensors=None, nkv=None):
    out = b"GGUF" + struct.pack("<IQQ", version, len(infos) if ntensors is None else ntensors,
                                len(kvs) if nkv is None else nkv)
    out += b"".join(kvs) + b"".join(infos)
    if infos:
        out += b"\x00" * ((align - len(out) % align) % align)
    return out + data


U32, STRING, ARRAY, U64 = 4, 8, 9, 10
every = [kv("t.u8", 0, b"\x01"), kv("t.i8", 1, b"\xff"), kv("t.u16", 2, b"\x01\x00"), kv("t.i16", 3, b"\x01\x00"),
         kv("t.u32", 4, b"\x01\x00\x00\x00"), kv("t.i32", 5, b"\x01\x00\x00\x00"), kv("t.f32", 6, b"\x00\x00\x80\x3f"),
         kv("t.bool", 7, b"\x01"), kv("t.str", STRING, gstr("x")),
         kv("t.arr", ARRAY, struct.pack("<IQ", ARRAY, 1) + struct.pack("<IQ", STRING, 1) + gstr("y")),
         kv("t.u64", U64, b"\x00" * 8), kv("t.i64", 11, b"\x00" * 8), kv("t.f64", 12, b"\x00" * 8)]
good("gguf_kv.gguf", gguf(every + [kv("general.alignment", U32, struct.pack("<I", 64))],
                          [tinfo("token_embd.weight", [4, 2]), tinfo("b", [3], 1, 64)], b"\x00" * 70, align=64), 2)
good("gguf_no_tensors.gguf", gguf(every), 0)
good("gguf_v2.gguf", gguf([], [tinfo("w", [2])], b"\x00" * 8, version=2), 1)
bad("gguf_magic_only.gguf", b"GGUF", "ends inside the header (the version)")
bad("gguf_v1.gguf", gguf(version=1), "version 1 is not supported")
bad("gguf_big_endian.gguf", b"GGUF\x00\x00\x00\x03" + b"\x00" * 16, "big-endian")
bad("gguf_version_9.gguf", gguf(version=9), "version 9")
bad("gguf_truncated_counts.gguf", b"GGUF\x03\x00\x00\x00\x01\x00", "ends inside the header (the tensor count)")
bad("gguf_huge_kv_count.gguf", gguf(nkv=2**63), "key/value pairs, more than")
bad("gguf_huge_tensor_count.gguf", gguf(ntensors=2**40), "tensors, more than")
bad("gguf_key_len_huge.gguf", gguf(nkv=1) + struct.pack("<Q", 2**63) + b"abc" * 5, "a string of 9223372036854775808 bytes")
bad("gguf_unknown_value_type.gguf", gguf([kv("k", 13, b"\x00" * 8)]), "unknown value type 13")
bad("gguf_array_huge_count.gguf", gguf([kv("k", ARRAY, struct.pack("<IQ", U64, 2**62))]), "cannot fit")
bad("gguf_string_array_huge.gguf", gguf([kv("k", ARRAY, struct.pack("<IQ", STRING, 2**61) + gstr("a"))]), "cannot fit")
bad("gguf_array_of_array_huge.gguf", gguf([kv("k", ARRAY, struct.pack("<IQ", ARRAY, 2**60))]), "cannot fit")
bad("gguf_nested_too_deep.gguf", gguf([kv("k", ARRAY, struct.pack("<IQ", ARRAY, 1) * 9 + struct.pack("<IQ", U32, 0))]),
    "nest deeper than 8")
bad("gguf_array_unknown_type.gguf", gguf([kv("k", ARRAY, struct.pack("<IQ", 77, 1))]), "an array of unknown value type 77")
bad("gguf_truncated_value.gguf", gguf([kv("k", U64, b"\x00" * 5)]), "ends inside key/value pair 0 (key 'k')")
bad("gguf_string_value_past_end.gguf", gguf([kv("k", STRING, struct.pack("<Q", 100) + b"abc")]), "only 3 bytes are left")
bad("gguf_alignment_zero.gguf", gguf([kv("general.alignment", U32, struct.pack("<I", 0))]), "not a power of two")
bad("gguf_alignment_3.gguf", gguf([kv("general.alignment", U32, struct.pack("<I", 3))]), "not a power of two")
bad("gguf_alignment_u64.gguf", gguf([kv("general.alignment", U64, struct.pack("<Q", 32))]), "expected uint32")
bad("gguf_alignment_twice.gguf", gguf([kv("general.alignment", U32, struct.pack("<I", 32))] * 2), "given twice")
bad("gguf_name_too_long.gguf", gguf([], [tinfo("n" * 64, [2])], b"\x00" * 8), "ggml's names are shorter than 64")
bad("gguf_name_nul.gguf", gguf([], [tinfo("a\x00b", [2])], b"\x00" * 8), "NUL byte")
bad("gguf_five_dims.gguf", gguf([], [tinfo("a", [1, 1, 1, 1, 2])], b"\x00" * 8), "5 dimensions (at most 4)")
bad("gguf_negative_dim.gguf", gguf([], [tinfo("a", [2**63])]), "negative as ggml's int64")
bad("gguf_elements_overflow.gguf", gguf([], [tinfo("a", [2**32, 2**32, 16])]), "element count overflows")
bad("gguf_zero_dim_overflow.gguf", gguf([], [tinfo("a", [0, 2**40, 2**40])]), "element count overflows")
bad("gguf_unknown_type.gguf", gguf([], [tinfo("a", [2], 99)], b"\x00" * 8), "unknown ggml type 99")
bad("gguf_removed_type.gguf", gguf([], [tinfo("a", [2], 4)], b"\x00" * 8), "unknown ggml type 4")
bad("gguf_row_not_block.gguf", gguf([], [tinfo("a", [33], 8)], b"\x00" * 64), "not a multiple of q8_0's block of 32")
bad("gguf_offset_unaligned.gguf", gguf([], [tinfo("a", [2], 0, 8)], b"\x00" * 64), "not a multiple of the alignment 32")
bad("gguf_data_past_end.gguf", gguf([], [tinfo("a", [4])], b"\x00" * 15), "end past the end of the file")
bad("gguf_offset_huge.gguf", gguf([], [tinfo("a", [4], 0, 2**64 - 32)], b"\x00" * 16), "end past the end of the file")
bad("gguf_bytes_huge.gguf", gguf([], [tinfo("a", [2**30, 2**30, 4], 1)], b"\x00" * 32), "end past the end of the file")
bad("gguf_duplicate_tensor.gguf", gguf([], [tinfo("a", [2]), tinfo("a", [2], 0, 32)], b"\x00" * 40),
    "two tensors are named 'a'")
bad("gguf_truncated_tensor_info.gguf", gguf(ntensors=1) + tinfo("a", [2])[:-3], "ends inside tensor info 0")
bad("gguf_no_data_section.gguf", (b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + tinfo("a", [0]))[:], "ends before its data section")

# ggml's block types clembed takes as tables: ggml type number, values and bytes per block, clembed's name
BLOCK_TYPES = [(8, 32, 34, "q8_0"), (2, 32, 18, "q4_0"), (12, 256, 144, "q4_k"), (14, 256, 210, "q6_k"),
               (3, 32, 20, "q4_1"), (6, 32, 22, "q5_0"), (7, 32, 24, "q5_1"), (10, 256, 84, "q2_k"),
               (11, 256, 110, "q3_k"), (13, 256, 176, "q5_k"), (20, 32, 18, "iq4_nl"), (23, 256, 136, "iq4_xs"),
               (16, 256, 66, "iq2_xxs"), (17, 256, 74, "iq2_xs"), (22, 256, 82, "iq2_s"), (18, 256, 98, "iq3_xxs"),
               (21, 256, 110, "iq3_s"), (19, 256, 50, "iq1_s"), (29, 256, 56, "iq1_m"), (34, 256, 54, "tq1_0"),
               (35, 256, 66, "tq2_0"), (39, 32, 17, "mxfp4")]


def block_bytes(gtype, n):
    """n bytes of a tensor of ggml type gtype: byte i is (37 i + 11 gtype) mod 119, below 0x78, so that
    every f16 scale (a byte pair, or IQ1_M's four top nibbles) is finite, as are MXFP4's values (an
    exponent byte below 0x78). tests/test_io.c (case corpus) and tests/gguf_reader.py compute the same
    bytes."""
    return bytes((37 * i + 11 * gtype) % 119 for i in range(n))


def blocks_file():
    """A tensor of 2 rows x 2 blocks of each block type, named by clembed's name; token_embd.weight a
    q5_k one."""
    infos, data = [], b""
    for gtype, qk, nbytes, name in BLOCK_TYPES + [(13, 256, 176, "token_embd.weight")]:
        infos.append(tinfo(name, [2 * qk, 2], gtype, len(data)))
        raw = block_bytes(gtype, 4 * nbytes)
        data += raw + b"\x00" * (-len(raw) % 32)
    return gguf([], infos, data)


good("gguf_blocks.gguf", blocks_file(), len(BLOCK_TYPES) + 1)
# each type's tensor cut inside its last block, and a row that is not whole blocks
for gtype, qk, nbytes, name in BLOCK_TYPES[4:]:
    bad("gguf_%s_truncated.gguf" % name, gguf([], [tinfo("w", [qk, 3], gtype)], block_bytes(gtype, 3 * nbytes - 5)),
        "end past the end of the file")
    bad("gguf_%s_row_not_block.gguf" % name, gguf([], [tinfo("w", [qk + qk // 2, 2], gtype)], block_bytes(gtype, 8 * nbytes)),
        "values per row, not a multiple of")

# ---------------------------------------------------------------- other

bad("empty.bin", b"", "empty file")
bad("unrecognised.safetensors", b"PK\x03\x04 this is a zip archive, not a tensor file", "unrecognised")


def main():
    for name in os.listdir(HERE):
        if name.startswith(("bad_", "good_")):
            os.remove(os.path.join(HERE, name))
    lines = ["# written by make_corpus.py: FILE<TAB>the refusal's message contains this | the tensor count"]
    for name in sorted(FILES):
        data, expect = FILES[name]
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
        lines.append("%s\t%s" % (name, expect))
    with open(os.path.join(HERE, "EXPECTED"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("%d files in %s" % (len(FILES), HERE))


if __name__ == "__main__":
    main()
