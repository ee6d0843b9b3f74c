#!/usr/bin/env python3
"""The NumPy baseline of `clembed embed --scale sqrt --positions sinusoid`:

    python3 tools/compare/embed_numpy.py W.npy|W.safetensors[:NAME] IDS.npy OUT.npy

The table is memory-mapped (only the rows the ids touch are read), gathered,
scaled by sqrt(D), and the standard sinusoid (base 10000, one frequency per
sin/cos pair, interleaved) of each token's position in its sequence (ids
(batch, seq)) is added; float32 arithmetic, as the frameworks do it.
"""
import json, struct, sys
import numpy as np

table, ids_path, out = sys.argv[1:4]
if table.split(":")[0].endswith(".safetensors"):  # the header (JSON) gives the tensor's offsets
    path, _, name = table.partition(":")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = {k: v for k, v in json.loads(f.read(n)).items() if k != "__metadata__"}
    t = h[name] if name else next(iter(h.values()))
    assert t["dtype"] == "F32", "this baseline reads F32 tensors"
    W = np.memmap(path, "<f4", "r", 8 + n + t["data_offsets"][0], tuple(t["shape"]))
else:
    W = np.load(table, mmap_mode="r")
ids = np.load(ids_path)
D = W.shape[1]
x = W[ids] * np.float32(np.sqrt(D))                                   # gather (touched rows only) and scale
pos = np.arange(ids.shape[-1], dtype=np.float32)[:, None]
freq = np.float32(10000.0) ** (-np.arange(0, D, 2, dtype=np.float32) / np.float32(D))
pe = np.empty((ids.shape[-1], D), np.float32)
pe[:, 0::2], pe[:, 1::2] = np.sin(pos * freq), np.cos(pos * freq)
np.save(out, x + pe)
