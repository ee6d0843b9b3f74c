#!/usr/bin/env python3
"""The PyTorch baseline of `clembed embed --scale sqrt --positions sinusoid`:

    python3 tools/compare/embed_torch.py W.npy IDS.npy OUT.npy

What a PyTorch user writes for the same job: the table memory-mapped from its
.npy file and wrapped without a copy, F.embedding of the ids, scaled by
sqrt(D), plus the standard sinusoid (base 10000, one frequency per sin/cos
pair, interleaved) of each token's position in its sequence (ids (batch,
seq)); float32 arithmetic; the result saved with NumPy.
"""
import math, sys, warnings
import numpy as np
import torch

table, ids_path, out = sys.argv[1:4]
warnings.filterwarnings("ignore", "The given NumPy array is not writable")
W = torch.from_numpy(np.load(table, mmap_mode="r"))                  # no copy of the table
ids = torch.from_numpy(np.load(ids_path)).long()
D = W.shape[1]
x = torch.nn.functional.embedding(ids, W) * math.sqrt(D)
pos = torch.arange(ids.shape[-1], dtype=torch.float32)[:, None]
freq = torch.pow(10000.0, -torch.arange(0, D, 2, dtype=torch.float32) / D)
pe = torch.empty(ids.shape[-1], D)
pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
np.save(out, (x + pe).numpy())
