#!/usr/bin/env python3
"""Generate tests/cli_corpus/ for tests/cli_corpus.sh (Python standard library only).

Run from anywhere:  python3 tests/cli_corpus/make_cli_corpus.py
The files are written next to this script and committed as data; the output is
deterministic.

tests/npy_corpus/ holds files that no .npy reader may accept (bad_*) and
well-formed ones (good_*). These are well-formed .npy files that the command-line
tool must still refuse in one role (exit 1, a message naming the file, no output),
and the valid files each role is tested beside:

  good_table.npy              <f4 (4, 3)    the --table the other roles are paired with
  good_ids.npy                <i4 (3,)      [0, 1, 2]: the --ids
  good_grad.npy               <f4 (3, 3)    the --grad for good_ids
  good_table_3d.npy           <f4 (4, 1, 3) a table of 3 dimensions: (4, 3) as clembed_matrix_load reads it

  bad_table_i4_2d.npy         <i4 (4, 3)    a table must be <f4 or <f2
  bad_table_i8_2d.npy         <i8 (2, 2)
  bad_table_1d.npy            <f2 (6,)      a table has 2 or more dimensions
  bad_table_0d.npy            <f4 ()
  bad_ids_f4.npy              <f4 (3,)      ids must be <i4 or <i8
  bad_ids_f2_2d.npy           <f2 (1, 3)
  bad_ids_3d.npy              <i4 (1, 1, 3) ids must be 1-D or 2-D
  bad_ids_0d.npy              <i8 ()
  bad_grad_rows.npy           <f4 (4, 3)    shape must be ids.shape + (D,): 4 rows for 3 ids
  bad_grad_1d.npy             <f4 (3,)
  bad_grad_3d.npy             <f4 (3, 1, 3)
  bad_grad_i4.npy             <i4 (3, 3)    a gradient must be <f4 or <f2
  bad_grad_cols.npy           <f4 (3, 2)    sgd: 2 columns but good_table has 3

  range_ids_i8_max.npy        <i8 (3,)      [0, INT64_MAX, 1]   out of range: found on the device
  range_ids_i8_min.npy        <i8 (3,)      [INT64_MIN, 0, 1]
  range_ids_i4_min.npy        <i4 (3,)      [0, 1, INT32_MIN]
  range_ids_rows.npy          <i4 (3,)      [0, 4, 1]           4 = the rows of good_table
  range_ids_wrap.npy          <i8 (3,)      [-1, -5, 0]         -5 = -rows - 1: bad even with wrap
"""

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def npy(descr, shape, body):
    if len(shape) == 1:
        s = "(%d,)" % shape[0]
    else:
        s = "(" + ", ".join(str(d) for d in shape) + ")"
    header = ("{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, s)).encode("latin-1")
    total = 10 + len(header) + 1
    header = header + b" " * ((-total) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + body


def count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def arr(descr, shape, values=None):
    fmt = {"<f4": "f", "<f2": "e", "<i4": "i", "<i8": "q"}[descr]
    n = count(shape)
    if values is None:
        values = [(i % 4) if fmt in "iq" else 0.5 * i for i in range(n)]
    assert len(values) == n
    return npy(descr, shape, b"".join(struct.pack("<" + fmt, v) for v in values))


I64_MAX, I64_MIN, I32_MIN = 2**63 - 1, -(2**63), -(2**31)


def files():
    return {
        "good_table": arr("<f4", (4, 3)),
        "good_ids": arr("<i4", (3,), [0, 1, 2]),
        "good_grad": arr("<f4", (3, 3)),
        "good_table_3d": arr("<f4", (4, 1, 3)),
        "bad_table_i4_2d": arr("<i4", (4, 3)),
        "bad_table_i8_2d": arr("<i8", (2, 2)),
        "bad_table_1d": arr("<f2", (6,)),
        "bad_table_0d": arr("<f4", ()),
        "bad_ids_f4": arr("<f4", (3,)),
        "bad_ids_f2_2d": arr("<f2", (1, 3)),
        "bad_ids_3d": arr("<i4", (1, 1, 3)),
        "bad_ids_0d": arr("<i8", ()),
        "bad_grad_rows": arr("<f4", (4, 3)),
        "bad_grad_1d": arr("<f4", (3,)),
        "bad_grad_3d": arr("<f4", (3, 1, 3)),
        "bad_grad_i4": arr("<i4", (3, 3)),
        "bad_grad_cols": arr("<f4", (3, 2)),
        "range_ids_i8_max": arr("<i8", (3,), [0, I64_MAX, 1]),
        "range_ids_i8_min": arr("<i8", (3,), [I64_MIN, 0, 1]),
        "range_ids_i4_min": arr("<i4", (3,), [0, 1, I32_MIN]),
        "range_ids_rows": arr("<i4", (3,), [0, 4, 1]),
        "range_ids_wrap": arr("<i8", (3,), [-1, -5, 0]),
    }


def main():
    fs = files()
    for name, data in sorted(fs.items()):
        with open(os.path.join(HERE, name + ".npy"), "wb") as fh:
            fh.write(data)
    print("wrote %d files to %s" % (len(fs), HERE))


if __name__ == "__main__":
    main()
