#!/usr/bin/env python3
"""BERT's input layer on a clembed device inside a Hugging Face encoder: a small BertModel
built from a config (no download), its `embeddings` replaced by clembed.torch.BertEmbeddings
holding the same weights, then a few fine-tuning steps of a classifier on synthetic labels,
beside the unchanged model.

    pip install transformers          # (with PyTorch) not a dependency of clembed
    PYTHONPATH=python python3 examples/bert_torch.py [--steps 5] [--layers 2] [--hidden 128]

It prints the largest difference of the two encoders' outputs in evaluation mode (the same
weights: only the order of float operations differs), then each step's loss for both models
(dropout off, so the two runs see the same function) and the time per step.
"""
import argparse
import copy
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import clembed  # noqa: E402
import clembed.torch as ct  # noqa: E402


def with_clembed_embeddings(model, ctx: clembed.Context, optimizer=None, lr=None):
    """A copy of a transformers BertModel whose embeddings are clembed.torch.BertEmbeddings
    with the model's weights (and, given an optimizer, their fused steps)."""
    cfg = model.config
    out = copy.deepcopy(model)
    emb = ct.BertEmbeddings(cfg.vocab_size, cfg.hidden_size, cfg.max_position_embeddings, cfg.type_vocab_size,
                            layer_norm_eps=cfg.layer_norm_eps, hidden_dropout_prob=cfg.hidden_dropout_prob,
                            pad_token_id=cfg.pad_token_id, optimizer=optimizer, lr=lr, ctx=ctx, seed=0)
    theirs = {k: v for k, v in model.embeddings.state_dict().items() if k in emb.state_dict()}
    emb.load_state_dict(theirs, strict=False)
    out.embeddings = emb
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    a = ap.parse_args()
    try:
        from transformers import BertConfig, BertModel
    except ImportError as e:
        print("transformers is not installed (%s): pip install transformers" % e)
        return 0
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=a.hidden, num_hidden_layers=a.layers, num_attention_heads=4,
                     intermediate_size=4 * a.hidden, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ref = BertModel(cfg)
    ctx = clembed.Context()
    mine = with_clembed_embeddings(ref, ctx, optimizer="sgd", lr=a.lr)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, cfg.vocab_size, (a.batch, a.seq), generator=g)
    types = torch.randint(0, 2, (a.batch, a.seq), generator=g)
    ref.eval()
    mine.eval()
    with torch.no_grad():
        d = (ref(ids, token_type_ids=types).last_hidden_state - mine(ids, token_type_ids=types).last_hidden_state)
    print("BertModel (%d layers, hidden %d), clembed on %s, torch %s" % (a.layers, a.hidden, ctx.device_name,
                                                                       torch.__version__))
    print("largest difference of the encoders' outputs, evaluation mode: %.3g" % d.abs().max().item())
    labels = torch.randint(0, 2, (a.batch,), generator=g)
    heads = []
    for model in (ref, mine):
        model.train()
        head = torch.nn.Linear(a.hidden, 2)
        with torch.no_grad():
            head.weight.copy_(torch.randn(2, a.hidden, generator=torch.Generator().manual_seed(2)) * 0.02)
            head.bias.zero_()
        rest = [p for n, p in model.named_parameters() if not n.startswith("embeddings.")] + list(head.parameters())
        emb = [p for n, p in model.named_parameters() if n.startswith("embeddings.")] if model is ref else []
        heads.append((model, head, torch.optim.SGD(rest + emb, lr=a.lr)))
    for step in range(a.steps):
        line = []
        for name, (model, head, opt) in zip(("torch", "clembed"), heads):
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = F.cross_entropy(head(model(ids, token_type_ids=types).pooler_output), labels)
            loss.backward()       # clembed's layer steps its tables here (SGD, the same rate)
            opt.step()
            line.append("%s loss %.6f (%.1f ms)" % (name, loss.item(), 1e3 * (time.perf_counter() - t0)))
        print("step %d: %s" % (step + 1, ", ".join(line)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
