#!/usr/bin/env python3
"""The command-line tool with .safetensors and .gguf inputs and `clembed inspect`.

    python3 tests/cli_io.py CLEMBED_BINARY

Writes its files (a small writer of each format, as in tests/test_io.c) in a
temporary directory, runs the tool and compares with NumPy: a lookup is exact,
so every output must equal the table's rows bit for bit. Exit 0 when every
check holds, 1 otherwise, 77 (skip) without NumPy or when the tool finds no
device and CLEMBED_ALLOW_NO_DEVICE=1.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # pragma: no cover
    print("cli_io: NumPy is not installed: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_reader  # noqa: E402  (a second GGUF reader, apart from the library's)

TOOL = sys.argv[1]
CORPUS = sys.argv[2] if len(sys.argv) > 2 else None  # tests/io_corpus
failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAILED: " + what)


def run(*args):
    p = subprocess.run([TOOL] + list(args), capture_output=True, text=True)
    if p.returncode == 2 and "no OpenCL device" in p.stderr and os.environ.get("CLEMBED_ALLOW_NO_DEVICE") == "1":
        print("cli_io: no device: skipped")
        sys.exit(77)
    return p


def safetensors(path, tensors):
    """tensors: list of (name, dtype name, shape, raw bytes)."""
    header, at, data = {"__metadata__": {"format": "pt"}}, 0, b""
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        at += len(raw)
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(path, tensors, alignment=32):
    """tensors: list of (name, ggml type, NumPy shape, raw bytes)."""
    kv = gstr("general.architecture") + struct.pack("<I", 8) + gstr("llama")
    kv += gstr("general.alignment") + struct.pack("<II", 4, alignment)
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 2) + kv
    off = 0
    for name, gt, shape, raw in tensors:
        dims = list(reversed(shape))
        out += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", gt, off)
        off += -(-len(raw) // alignment) * alignment
    out += b"\0" * (-len(out) % alignment)
    for _, _, _, raw in tensors:
        out += raw + b"\0" * (-len(raw) % alignment)
    with open(path, "wb") as f:
        f.write(out)


def bf16_bytes(a):
    """float32 -> bfloat16 (round to nearest even) as raw little-endian bytes, and the values as float32."""
    u = a.astype("<f4").view("<u4").astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    return r.tobytes(), (r.astype(np.uint32) << 16).view("<f4")


# ggml's block layouts: (ggml type, values per block, bytes per block)
QTYPES = {"q8_0": (8, 32, 34), "q4_0": (2, 32, 18), "q4_k": (12, 256, 144), "q6_k": (14, 256, 210)}
F32 = np.float32


def random_blocks(rng, kind, nblocks):
    """Random block bytes whose f16 scales (d, and dmin for q4_K) are finite."""
    _, _, nbytes = QTYPES[kind]
    b = rng.integers(0, 256, size=(nblocks, nbytes), dtype=np.uint8)
    def half():
        r = rng.integers(0, 1 << 16, size=nblocks, dtype=np.uint32)
        return ((r & 0x83FF) | ((5 + r % 16) << 10)).astype("<u2").view(np.uint8).reshape(nblocks, 2)
    at = 208 if kind == "q6_k" else 0
    b[:, at:at + 2] = half()
    if kind == "q4_k":
        b[:, 2:4] = half()
    return b


def dequantize(kind, raw):
    """ggml's dequantize_row_* (a transcription in float32, operation for operation): (blocks, values)."""
    _, qk, nbytes = QTYPES[kind]
    b = np.frombuffer(raw, np.uint8).reshape(-1, nbytes)
    def half(lo):
        return b[:, lo:lo + 2].copy().view("<f2").astype(F32)  # (blocks, 1)
    if kind == "q8_0":
        return b[:, 2:].view(np.int8).astype(F32) * half(0)
    if kind == "q4_0":
        d, qs = half(0), b[:, 2:].astype(np.int32)
        return np.concatenate([((qs & 15) - 8).astype(F32) * d, ((qs >> 4) - 8).astype(F32) * d], axis=1)
    if kind == "q4_k":
        d, dmin, sc, qs = half(0), half(2), b[:, 4:16].astype(np.int32), b[:, 16:144].astype(np.int32)
        def scale_min(j):
            if j < 4:
                return sc[:, j:j + 1] & 63, sc[:, j + 4:j + 5] & 63
            return ((sc[:, j + 4:j + 5] & 15) | ((sc[:, j - 4:j - 3] >> 6) << 4),
                    (sc[:, j + 4:j + 5] >> 4) | ((sc[:, j:j + 1] >> 6) << 4))
        out = []
        for j in range(4):
            s1, m1 = scale_min(2 * j)
            s2, m2 = scale_min(2 * j + 1)
            q = qs[:, 32 * j:32 * j + 32]
            out.append((d * s1.astype(F32)) * (q & 15).astype(F32) - dmin * m1.astype(F32))
            out.append((d * s2.astype(F32)) * (q >> 4).astype(F32) - dmin * m2.astype(F32))
        return np.concatenate(out, axis=1)
    d, ql, qh = half(208), b[:, 0:128].astype(np.int32), b[:, 128:192].astype(np.int32)
    sc = b[:, 192:208].view(np.int8).astype(F32)
    out = []
    isc = np.arange(32) // 16
    for n in range(2):
        l0, h0, s0 = ql[:, 64 * n:64 * n + 64], qh[:, 32 * n:32 * n + 32], sc[:, 8 * n:8 * n + 8]
        q1 = ((l0[:, :32] & 15) | (((h0 >> 0) & 3) << 4)) - 32
        q2 = ((l0[:, 32:] & 15) | (((h0 >> 2) & 3) << 4)) - 32
        q3 = ((l0[:, :32] >> 4) | (((h0 >> 4) & 3) << 4)) - 32
        q4 = ((l0[:, 32:] >> 4) | (((h0 >> 6) & 3) << 4)) - 32
        for k, q in ((0, q1), (2, q2), (4, q3), (6, q4)):
            out.append((d * s0[:, isc + k]) * q.astype(F32))
    return np.concatenate(out, axis=1)


def quantize_dequantize(kind, x):
    """ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref of float32 rows, then dequantized."""
    blocks = x.astype(F32).reshape(-1, 32)
    with np.errstate(divide="ignore"):
        if kind == "q8_0":
            d = (np.abs(blocks).max(axis=1, keepdims=True) / F32(127)).astype(F32)
            idv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
            v = (blocks * idv).astype(np.float64)
            # roundf (half away from zero), then an integer as ggml's int8 quant: a value rounding to 0
            # is +0 dequantized, never -0
            q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int32)
            return (q.astype(F32) * d.astype(np.float16).astype(F32)).reshape(x.shape)
        first = np.argmax(np.abs(blocks), axis=1)  # the first of the largest magnitude
        d = (blocks[np.arange(len(blocks)), first][:, None] / F32(-8)).astype(F32)
        idv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
        q = np.minimum(15, np.trunc(blocks * idv + F32(8.5)).astype(np.int32))
        return ((q - 8).astype(F32) * d.astype(np.float16).astype(F32)).reshape(x.shape)


def demo_model(path, want, kind):
    """`clembed demo model FILE`: the file's tensors listed, the table's rows (first 8 values, %.9g: exact
    float32) for the default ids and for --ids."""
    rows = want.shape[0]
    for extra, ids in (([], [i * (rows - 1) // 4 for i in range(5)]), (["--ids", "3,1"], [3, 1])):
        p = run("demo", "model", path, *extra)
        check(p.returncode == 0 and p.stdout.startswith(path.rsplit(":", 1)[0] if ":" in os.path.basename(path) else path),
              "demo model %s: exit %d %r" % (path, p.returncode, p.stderr))
        lines = [l.split() for l in p.stdout.splitlines() if l.startswith("  id ")]
        check(("table: %d x %d, %s" % (rows, want.shape[1], kind)) in p.stdout and len(lines) == len(ids),
              "demo model %s: %r" % (path, p.stdout))
        for l, i in zip(lines, ids):
            vals = np.array([float(v) for v in l[2:] if v != "..."], dtype=F32)
            check(l[1] == str(i) and len(vals) == min(8, want.shape[1]) and
                  np.array_equal(vals.view("<u4"), want[i, :len(vals)].astype(F32).view("<u4")),
                  "demo model %s: row %d printed as %r" % (path, i, " ".join(l)))


def main():
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((9, 6)) * 3).astype("<f4")
    wh = w.astype("<f2")
    wb_raw, wb = bf16_bytes(w)
    ids = np.array([[3, 0, 8], [8, 1, 2]], dtype="<i8")
    with tempfile.TemporaryDirectory() as d:
        st = os.path.join(d, "model.safetensors")
        safetensors(st, [("w", "F32", w.shape, w.tobytes()), ("wh", "F16", wh.shape, wh.tobytes()),
                         ("wb", "BF16", w.shape, wb_raw), ("ids", "I64", ids.shape, ids.tobytes()),
                         ("odd", "I8", (3,), b"\1\2\3")])
        gg = os.path.join(d, "model.gguf")
        gguf(gg, [("output_norm.weight", 0, (6,), w[0].tobytes()), ("token_embd.weight", 0, w.shape, w.tobytes()),
                  ("ids", 27, ids.shape, ids.tobytes())], alignment=64)
        out = os.path.join(d, "out.npy")

        # FILE:NAME for tables and ids; the output matches the rows bit for bit
        for table, want, dt in [(st + ":w", w, "<f4"), (st + ":wh", wh, "<f2"), (st + ":wb", wb, "<f4"),
                                (gg, w, "<f4"), (gg + ":token_embd.weight", w, "<f4")]:
            for idarg in (st + ":ids", gg + ":ids"):
                p = run("embed", "--table", table, "--ids", idarg, "-o", out)
                check(p.returncode == 0, "embed --table %s --ids %s: exit %d: %s" % (table, idarg, p.returncode, p.stderr))
                if p.returncode == 0:
                    got = np.load(out)
                    check(got.dtype == np.dtype(dt) and got.shape == ids.shape + (6,),
                          "%s: dtype %s shape %s" % (table, got.dtype, got.shape))
                    check(np.array_equal(got.astype("<f4").view("<u4"), want[ids].astype("<f4").view("<u4")),
                          "%s: the output is not the table's rows" % table)

        # quantized GGUF tables, each loaded as it lies: ggml's dequantized rows bit for bit; and float tables
        # of each type from .gguf and .safetensors
        qids = np.array([[5, 0, 2], [1, 5, 3]], dtype="<i4")
        idsf = os.path.join(d, "qids.npy")
        np.save(idsf, qids)
        for kind, (gt, qk, nbytes) in QTYPES.items():
            cols, nrows = 2 * qk, 6
            blocks = random_blocks(rng, kind, nrows * cols // qk)
            qg = os.path.join(d, kind + ".gguf")
            gguf(qg, [("token_embd.weight", gt, (nrows, cols), blocks.tobytes())])
            want = dequantize(kind, blocks.tobytes()).reshape(nrows, cols)
            p = run("embed", "--table", qg, "--ids", idsf, "-o", out)
            check(p.returncode == 0, "embed --table %s: %s" % (kind, p.stderr))
            if p.returncode == 0:
                got = np.load(out)
                check(got.dtype == np.dtype("<f4") and got.shape == qids.shape + (cols,) and
                      np.array_equal(got.view("<u4"), want[qids].view("<u4")),
                      "embed --table %s.gguf: not ggml's dequantized rows" % kind)
            p = run("inspect", qg)
            check(p.returncode == 0 and p.stdout == "token_embd.weight %s %dx%d\n" % (kind, nrows, cols),
                  "inspect %s: %r" % (kind, p.stdout))
            p = run("sgd", "--table", qg, "--ids", idsf, "--grad", out, "--lr", "0.1", "-o", out + ".w.npy")
            check(p.returncode == 1 and "block-quantized" in p.stderr and not os.path.exists(out + ".w.npy"),
                  "sgd on a %s table: exit %d %r" % (kind, p.returncode, p.stderr))
        # ggml's other block types: each table looked up on the device equals the same table dequantized on
        # loading (--dtype f32, the host's code), bit for bit; inspect names it; the second reader finds the
        # bytes written (every byte below 0x78: the f16 scales are finite)
        for gt, kind in sorted(gguf_reader.CLEMBED_BLOCK_TYPES.items()):
            if kind in QTYPES:
                continue
            _, qk, nbytes = gguf_reader.GGML_TYPES[gt]
            cols, nrows = qk * (2 if qk == 32 else 1), 6
            raw = rng.integers(0, 0x78, size=nrows * cols // qk * nbytes, dtype=np.uint8)
            if kind == "mxfp4":  # exponents 32 .. 119: no subnormal values (a device may flush them)
                raw[::nbytes] |= 0x20
            raw = raw.tobytes()
            qg = os.path.join(d, kind + ".gguf")
            gguf(qg, [("token_embd.weight", gt, (nrows, cols), raw)])
            t = gguf_reader.read(qg)
            check(len(t) == 1 and t[0]["shape"] == [nrows, cols] and gguf_reader.data(qg, t[0]) == raw,
                  "%s: the second reader finds %r" % (kind, t))
            p = run("embed", "--table", qg, "--ids", idsf, "-o", out)
            check(p.returncode == 0, "embed --table %s: %s" % (kind, p.stderr))
            got = np.load(out) if p.returncode == 0 else None
            p = run("embed", "--table", qg, "--ids", idsf, "--dtype", "f32", "-o", out)
            check(p.returncode == 0, "embed --table %s --dtype f32: %s" % (kind, p.stderr))
            if got is not None and p.returncode == 0:
                want = np.load(out)
                check(got.dtype == np.dtype("<f4") and got.shape == qids.shape + (cols,) and
                      np.array_equal(got.view("<u4"), want.view("<u4")) and np.isfinite(got).all(),
                      "embed --table %s.gguf: the device's rows differ from the host's dequantization" % kind)
            p = run("inspect", qg)
            check(p.returncode == 0 and p.stdout == "token_embd.weight %s %dx%d\n" % (kind, nrows, cols),
                  "inspect %s: %r" % (kind, p.stdout))
        # tables of a type --table does not take: the message says what it takes
        bad_table = os.path.join(d, "q8k.gguf")
        gguf(bad_table, [("token_embd.weight", 15, (2, 256), b"\0" * 2 * 292)])
        int_npy, f64_npy = os.path.join(d, "int.npy"), os.path.join(d, "f64.npy")
        np.save(int_npy, np.arange(12, dtype="<i4").reshape(3, 4))
        np.save(f64_npy, np.zeros((3, 4), "<f8"))
        takes = "--table takes f32, f16, bf16, " + ", ".join(gguf_reader.CLEMBED_BLOCK_TYPES.values())  # dtype order
        for table, what in [(bad_table, "tensor 'token_embd.weight' is q8_k"), (int_npy, "the array is i32"),
                            (f64_npy, "the array is f64")]:
            p = run("embed", "--table", table, "--ids", idsf, "-o", out)
            check(p.returncode == 1 and what + "; " + takes + "\n" in p.stderr,
                  "embed --table %s: exit %d %r" % (table, p.returncode, p.stderr))

        wq = (rng.standard_normal((6, 64)) * 2).astype("<f4")
        wq[1, :32] = 0  # an all-zero block
        wqb_raw, wqb = bf16_bytes(wq)
        fg, fs = os.path.join(d, "float.gguf"), os.path.join(d, "float.safetensors")
        gguf(fg, [("token_embd.weight", 0, wq.shape, wq.tobytes()), ("h", 1, wq.shape, wq.astype("<f2").tobytes()),
                  ("b", 30, wq.shape, wqb_raw)])
        safetensors(fs, [("f", "F32", wq.shape, wq.tobytes()), ("h", "F16", wq.shape, wq.astype("<f2").tobytes()),
                         ("b", "BF16", wq.shape, wqb_raw)])
        for table, want, dt in [(fg, wq, "<f4"), (fg + ":h", wq.astype("<f2"), "<f2"), (fg + ":b", wqb.reshape(wq.shape), "<f4"),
                                (fs + ":f", wq, "<f4"), (fs + ":h", wq.astype("<f2"), "<f2"), (fs + ":b", wqb.reshape(wq.shape), "<f4")]:
            p = run("embed", "--table", table, "--ids", idsf, "-o", out)
            check(p.returncode == 0, "embed --table %s: %s" % (table, p.stderr))
            if p.returncode == 0:
                got = np.load(out)
                check(got.dtype == np.dtype(dt) and np.array_equal(got.astype("<f4").view("<u4"),
                                                                   want[qids].astype("<f4").view("<u4")),
                      "embed --table %s: not the table's rows" % table)
            # --dtype q8_0 / q4_0: quantized as ggml's reference quantizers, rows dequantized
            for kind in ("q8_0", "q4_0"):
                p = run("embed", "--table", table, "--ids", idsf, "--dtype", kind, "-o", out)
                check(p.returncode == 0, "embed --table %s --dtype %s: %s" % (table, kind, p.stderr))
                if p.returncode == 0:
                    qd = quantize_dequantize(kind, want.astype("<f4"))
                    got = np.load(out).astype("<f4")
                    check(np.array_equal(got.view("<u4"), qd[qids].view("<u4")),
                          "embed --table %s --dtype %s: not ggml's quantized rows" % (table, kind))
        demo_model(fs + ":h", wq.astype("<f2").astype("<f4"), "f16")
        for args in (["--help"], ["demo", "--help"]):
            p = run(*args)
            check(p.returncode == 0 and "demo model FILE" in p.stdout.replace("`", ""), "%s: %r" % (args, p.stdout))
        demo_model(fg, wq, "f32")
        p = run("embed", "--table", fg, "--ids", idsf, "--dtype", "q4_k", "-o", out)
        check(p.returncode == 1 and "--dtype" in p.stderr, "--dtype q4_k: exit %d %r" % (p.returncode, p.stderr))

        # a learned position table from a safetensors file
        p = run("embed", "--table", st + ":w", "--ids", st + ":ids", "--positions", st + ":w", "-o", out)
        check(p.returncode == 0, "embed --positions FILE:NAME: %s" % p.stderr)
        if p.returncode == 0:
            want = (w[ids].astype(np.float64) + w[np.arange(3)][None, :, :]).astype("<f4")
            check(np.array_equal(np.load(out), want), "embed --positions FILE:NAME: wrong values")

        # a file of several tensors needs a name; unknown names and unusable types are exit 1
        for table, needle in [(st, "pick one with"), (st + ":nope", "no tensor named 'nope'"),
                              (st + ":odd", "tensor 'odd' is i8; --table takes f32, f16, bf16, q8_0"),
                              (gg + ":output_norm.weight", "a table has 2 or more dimensions")]:
            p = run("embed", "--table", table, "--ids", st + ":ids", "-o", out)
            check(p.returncode == 1 and needle in p.stderr and "--table" in p.stderr,
                  "embed --table %s: exit %d, message %r (expected %r)" % (table, p.returncode, p.stderr, needle))
        p = run("embed", "--table", st + ":w", "--ids", st, "-o", out)
        check(p.returncode == 1 and "(w, wh, wb, ids, odd)" in p.stderr, "--ids of several tensors lists them: %r" % p.stderr)

        # outputs: .safetensors (one tensor "output") and --out-dtype; bf16 only into .safetensors
        def read_st(path):
            with open(path, "rb") as f:
                raw = f.read()
            n = struct.unpack("<Q", raw[:8])[0]
            h = json.loads(raw[8:8 + n])
            check(list(h) == ["output"], "%s: tensors %s" % (path, list(h)))
            t = h["output"]
            b, e = t["data_offsets"]
            check(8 + n + e == len(raw), "%s: data end at %d of %d bytes" % (path, 8 + n + e, len(raw)))
            body = raw[8 + n + b:8 + n + e]
            if t["dtype"] == "BF16":
                a = (np.frombuffer(body, "<u2").astype(np.uint32) << 16).view("<f4")
            else:
                a = np.frombuffer(body, {"F32": "<f4", "F16": "<f2"}[t["dtype"]])
            return t["dtype"], a.reshape(t["shape"])

        sto = os.path.join(d, "out.safetensors")
        rows = w[ids]
        for od, want_dt, want in [(None, "F32", rows), ("f16", "F16", rows.astype("<f2")), ("bf16", "BF16", bf16_bytes(rows)[1])]:
            args = ["embed", "--table", st + ":w", "--ids", st + ":ids", "-o", sto] + (["--out-dtype", od] if od else [])
            p = run(*args)
            check(p.returncode == 0, "%s: %s" % (" ".join(args), p.stderr))
            if p.returncode == 0:
                dt, got = read_st(sto)
                check(dt == want_dt and got.shape == ids.shape + (6,) and
                      np.array_equal(got.astype("<f4").view("<u4"), np.asarray(want, "<f4").reshape(got.shape).view("<u4")),
                      "embed -o .safetensors --out-dtype %s: %s %s" % (od, dt, got.shape))
        if os.path.exists(out):
            os.remove(out)
        p = run("embed", "--table", st + ":w", "--ids", st + ":ids", "--out-dtype", "bf16", "-o", out)
        check(p.returncode == 1 and ".safetensors" in p.stderr and not os.path.exists(out),
              "bf16 into .npy: exit %d %r, file left: %s" % (p.returncode, p.stderr, os.path.exists(out)))
        p32, p16 = run("positional", "--length", "7", "--dim", "6", "-o", out), None
        if p32.returncode == 0:
            pe = np.load(out)
            p16 = run("positional", "--length", "7", "--dim", "6", "--out-dtype", "f16", "-o", out)
            check(p16.returncode == 0 and np.load(out).dtype == np.dtype("<f2") and
                  np.array_equal(np.load(out), pe.astype("<f2")), "positional --out-dtype f16: %s" % p16.stderr)
        check(p32.returncode == 0, "positional: %s" % p32.stderr)
        # sgd on a bf16 table: the step in float32 on the table's own dtype, rounded to bf16
        uids = np.array([4, 1, 7], dtype="<i8")
        g = rng.standard_normal((3, 6)).astype("<f4")
        step = os.path.join(d, "step.safetensors")
        safetensors(step, [("w", "BF16", w.shape, wb_raw), ("ids", "I64", (3,), uids.tobytes()),
                           ("g", "F32", g.shape, g.tobytes())])
        p = run("sgd", "--table", step + ":w", "--ids", step + ":ids", "--grad", step + ":g", "--lr", "0.5", "-o", sto)
        check(p.returncode == 0, "sgd on a bf16 table: %s" % p.stderr)
        if p.returncode == 0:
            dt, got = read_st(sto)
            want = wb.reshape(w.shape).copy()
            want[uids] = want[uids] - np.float32(0.5) * g
            check(dt == "BF16" and np.array_equal(got.view("<u4"), bf16_bytes(want)[1].reshape(w.shape).view("<u4")),
                  "sgd on a bf16 table: %s, wrong values" % dt)

        # inspect, as text and as JSON
        p = run("inspect", gg)
        check(p.returncode == 0 and p.stdout.splitlines() == [
            "output_norm.weight f32 6", "token_embd.weight f32 9x6", "ids i64 2x3"], "inspect gguf: %r" % p.stdout)
        p = run("inspect", st, "--json")
        check(p.returncode == 0, "inspect --json: %s" % p.stderr)
        if p.returncode == 0:
            got = json.loads(p.stdout)
            want = [{"name": "w", "dtype": "f32", "shape": [9, 6], "bytes": 216},
                    {"name": "wh", "dtype": "f16", "shape": [9, 6], "bytes": 108},
                    {"name": "wb", "dtype": "bf16", "shape": [9, 6], "bytes": 108},
                    {"name": "ids", "dtype": "i64", "shape": [2, 3], "bytes": 48},
                    {"name": "odd", "dtype": "i8", "shape": [3], "bytes": 3}]
            check(got == want, "inspect --json: %r" % got)
        npy = os.path.join(d, "a.npy")
        np.save(npy, w)
        p = run("inspect", npy)
        check(p.returncode == 0 and p.stdout == "- f32 9x6\n", "inspect npy: %r" % p.stdout)
        bad = os.path.join(d, "bad.gguf")
        with open(bad, "wb") as f:
            f.write(b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0))
        p = run("inspect", bad)
        check(p.returncode == 1 and bad in p.stderr and "tensors, more than" in p.stderr, "inspect bad: %r" % p.stderr)
        p = run("inspect")
        check(p.returncode == 1, "inspect without FILE: exit %d" % p.returncode)

    # the corpus's GGUF files read by the second reader: what it finds is what `clembed inspect --json`
    # lists; it refuses the truncated ones and the rows that are not whole blocks too; the file of every
    # block type holds make_corpus.py's bytes
    if CORPUS:
        for n in sorted(os.listdir(CORPUS)):
            path = os.path.join(CORPUS, n)
            if n.startswith("good_") and n.endswith(".gguf"):
                tensors = gguf_reader.read(path)
                p = run("inspect", path, "--json")
                want = [{"name": t["name"], "dtype": gguf_reader.CLEMBED_BLOCK_TYPES.get(
                            t["ggml_type"], {0: "f32", 1: "f16", 30: "bf16"}.get(t["ggml_type"], t["type_name"])),
                         "shape": t["shape"], "bytes": t["nbytes"]} for t in tensors]
                check(p.returncode == 0 and json.loads(p.stdout) == want,
                      "%s: inspect --json %r, the second reader %r" % (n, p.stdout, want))
                if n == "good_gguf_blocks.gguf":
                    for t in tensors:
                        raw = bytes((37 * i + 11 * t["ggml_type"]) % 119 for i in range(t["nbytes"]))
                        check(gguf_reader.data(path, t) == raw, "%s: tensor %s's bytes" % (n, t["name"]))
                    check(len(tensors) == len(gguf_reader.CLEMBED_BLOCK_TYPES) + 1, "%s: %d tensors" % (n, len(tensors)))
            elif n.startswith("bad_gguf_") and (n.endswith("_truncated.gguf") or n.endswith("_row_not_block.gguf")):
                try:
                    gguf_reader.read(path)
                    check(False, "%s: the second reader takes it" % n)
                except ValueError:
                    check(True, n)

    # every hostile file of the readers' corpus, in every role: exit 1 naming the file, no output
    if CORPUS:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "out.npy")
            names = sorted(n for n in os.listdir(CORPUS) if n.startswith("bad_"))
            check(len(names) >= 40, "only %d hostile files in %s" % (len(names), CORPUS))
            for n in names:
                path = os.path.join(CORPUS, n)
                for args in (["inspect", path], ["embed", "--table", path, "--ids", path, "-o", out],
                             ["backward", "--ids", path, "--grad", path, "--vocab", "4", "-o", out]):
                    p = run(*args)
                    check(p.returncode == 1 and path in p.stderr and not os.path.exists(out),
                          "%s: exit %d, message %r" % (" ".join(args), p.returncode, p.stderr))

    print("cli_io: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
