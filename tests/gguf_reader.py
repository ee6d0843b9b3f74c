#!/usr/bin/env python3
"""A second GGUF reader, apart from the library's (src/io/gguf.c), from ggml's docs/gguf.md:
Python's standard library only. tests/cli_io.py reads every GGUF file of the corpus with it and
compares with `clembed inspect --json`, and checks the bytes of the corpus's file of every block
type against the formula make_corpus.py wrote them with.

    python3 tests/gguf_reader.py FILE.gguf      prints the tensors as JSON

read(path) -> list of dicts: name, ggml_type, type_name, shape (NumPy's order: outermost first),
offset (from the start of the file), nbytes; raises ValueError for a file that is not one.
"""

import json
import struct
import sys

# ggml's types (ggml.c's type_traits): number -> (name, values per block, bytes per block)
GGML_TYPES = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20), 6: ("q5_0", 32, 22),
    7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36), 10: ("q2_K", 256, 84), 11: ("q3_K", 256, 110),
    12: ("q4_K", 256, 144), 13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210), 15: ("q8_K", 256, 292),
    16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74), 18: ("iq3_xxs", 256, 98), 19: ("iq1_s", 256, 50),
    20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110), 22: ("iq2_s", 256, 82), 23: ("iq4_xs", 256, 136),
    24: ("i8", 1, 1), 25: ("i16", 1, 2), 26: ("i32", 1, 4), 27: ("i64", 1, 8), 28: ("f64", 1, 8),
    29: ("iq1_m", 256, 56), 30: ("bf16", 1, 2), 34: ("tq1_0", 256, 54), 35: ("tq2_0", 256, 66),
    39: ("mxfp4", 32, 17), 40: ("nvfp4", 64, 36), 41: ("q1_0", 128, 18), 42: ("q2_0", 64, 18),
}
# the block types clembed takes as tables: ggml type number -> clembed's name (inspect's dtype), in
# clembed_dtype's order
CLEMBED_BLOCK_TYPES = {8: "q8_0", 2: "q4_0", 12: "q4_k", 14: "q6_k", 3: "q4_1", 6: "q5_0", 7: "q5_1", 10: "q2_k",
                       11: "q3_k", 13: "q5_k", 20: "iq4_nl", 23: "iq4_xs", 16: "iq2_xxs", 17: "iq2_xs", 22: "iq2_s",
                       18: "iq3_xxs", 21: "iq3_s", 19: "iq1_s", 29: "iq1_m", 34: "tq1_0", 35: "tq2_0", 39: "mxfp4"}
# the value types of the key/value pairs: number -> struct format ("" for string and array)
VALUE_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 8: "", 9: "", 10: "Q", 11: "q", 12: "d"}


class _Bytes:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        if n < 0 or self.at + n > len(self.data):
            raise ValueError("the file ends inside a field (%d bytes wanted at %d of %d)" % (n, self.at, len(self.data)))
        b = self.data[self.at:self.at + n]
        self.at += n
        return b

    def unpack(self, fmt):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))[0]

    def string(self):
        return self.take(self.unpack("Q"))


def _value(r, vtype, depth=0):
    if vtype not in VALUE_FORMATS or depth > 8:
        raise ValueError("an unknown value type %d (or arrays nested too deep)" % vtype)
    if vtype == 8:
        return r.string().decode("utf-8", "replace")
    if vtype == 9:
        etype, count = r.unpack("I"), r.unpack("Q")
        if count > len(r.data):
            raise ValueError("an array of %d values in a file of %d bytes" % (count, len(r.data)))
        return [_value(r, etype, depth + 1) for _ in range(count)]
    return r.unpack(VALUE_FORMATS[vtype])


def read(path):
    with open(path, "rb") as f:
        r = _Bytes(f.read())
    if r.take(4) != b"GGUF":
        raise ValueError("not a GGUF file")
    version = r.unpack("I")
    if version not in (2, 3):
        raise ValueError("GGUF version %d" % version)
    ntensors, nkv = r.unpack("Q"), r.unpack("Q")
    if ntensors > len(r.data) or nkv > len(r.data):
        raise ValueError("counts larger than the file")
    alignment = 32
    for _ in range(nkv):
        key = r.string()
        value = _value(r, r.unpack("I"))
        if key == b"general.alignment":
            alignment = value
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError("alignment %r" % alignment)
    tensors = []
    for _ in range(ntensors):
        name = r.string().decode("utf-8")
        ndim = r.unpack("I")
        if ndim > 4:
            raise ValueError("%d dimensions" % ndim)
        dims = [r.unpack("Q") for _ in range(ndim)]
        gtype, offset = r.unpack("I"), r.unpack("Q")
        if gtype not in GGML_TYPES:
            raise ValueError("tensor %r: unknown ggml type %d" % (name, gtype))
        tname, qk, bb = GGML_TYPES[gtype]
        count = 1
        for d in dims:
            count *= d
        if (dims[0] if dims else 1) % qk:
            raise ValueError("tensor %r: rows of %d values are not whole %s blocks" % (name, dims[0], tname))
        if offset % alignment:
            raise ValueError("tensor %r: offset %d is not aligned" % (name, offset))
        tensors.append(dict(name=name, ggml_type=gtype, type_name=tname, shape=list(reversed(dims)),
                            offset=offset, nbytes=count // qk * bb))
    start = -(-r.at // alignment) * alignment
    for t in tensors:
        t["offset"] += start
        if t["offset"] + t["nbytes"] > len(r.data):
            raise ValueError("tensor %r: its data end past the end of the file" % t["name"])
    return tensors


def data(path, tensor):
    with open(path, "rb") as f:
        f.seek(tensor["offset"])
        return f.read(tensor["nbytes"])


if __name__ == "__main__":
    print(json.dumps(read(sys.argv[1]), indent=1))
