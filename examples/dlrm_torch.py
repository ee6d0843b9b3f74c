#!/usr/bin/env python3
"""A DLRM-style click model trained with clembed.torch, beside the same model on PyTorch's own
nn.EmbeddingBag (and FBGEMM's TBE where fbgemm_gpu is installed, TorchRec's
EmbeddingBagCollection fed a KeyedJaggedTensor where torchrec is).

The model: a bottom MLP on 13 dense features, 26 sparse features pooled (sum) by
clembed.torch.EmbeddingBagCollection (one table per feature, the optimizer fused into the
backward), the pairwise dot products of the 27 vectors, a top MLP, a logistic loss. The click
data are synthetic, made here from a fixed seed (a hidden logistic model of the features), so
the loss falls. Each engine starts from the same tables and MLP weights and sees the same
batches; the script prints each engine's loss every --print steps and its time per step.

    PYTHONPATH=python python3 examples/dlrm_torch.py --steps 50 --rows 100000 --batch 2048
    ... --optimizer adagrad          # the optimizer both sides run (PyTorch: torch.optim.Adagrad
                                     # over sparse gradients, the same formula as clembed's)
    ... --optimizer rowwise_adagrad  # clembed and FBGEMM only (PyTorch and an unsharded TorchRec
                                     # collection have no row-wise Adagrad)
    ... --engines clembed            # one engine alone
    ... --copy                       # clembed copies each tensor (counted), as on a device with its own memory
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import clembed  # noqa: E402
import clembed.torch as ct  # noqa: E402

DENSE, FEATURES = 13, 26


def tables_rows(rows: int, features: int = FEATURES) -> list:
    """Table sizes from rows/10 to rows (as a model's features differ in size)."""
    return [max(10, int(rows * (0.1 + 0.9 * k / max(features - 1, 1)))) for k in range(features)]


class Data:
    """Synthetic clicks: dense features N(0, 1), per feature 1-3 ids per sample (a Zipf-like
    skew), the label drawn from a hidden logistic model of both."""

    def __init__(self, rows: list, seed: int, hot: int = 3) -> None:
        self.rng = np.random.default_rng(seed)
        self.rows, self.hot = rows, hot
        g = np.random.default_rng(seed + 1)
        self.w_dense = g.normal(size=DENSE)
        self.w_ids = [g.normal(size=min(r, 1000)) for r in rows]

    def batch(self, B: int):
        dense = self.rng.normal(size=(B, DENSE)).astype(np.float32)
        lengths, values, logit = [], [], dense @ self.w_dense * 0.3
        for f, r in enumerate(self.rows):
            n = self.rng.integers(1, self.hot + 1, size=B)
            ids = (self.rng.pareto(1.2, size=int(n.sum())) * r / 50).astype(np.int64) % r
            lengths.append(n)
            values.append(ids)
            starts = np.concatenate([[0], np.cumsum(n)[:-1]])
            logit = logit + np.add.reduceat(self.w_ids[f][ids % len(self.w_ids[f])], starts) * 0.2
        y = (self.rng.random(B) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        return (torch.from_numpy(dense), torch.from_numpy(np.concatenate(lengths)),
                torch.from_numpy(np.concatenate(values)), torch.from_numpy(y).reshape(B, 1))


def mlp(sizes: list, gen: torch.Generator) -> torch.nn.Sequential:
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        lin = torch.nn.Linear(a, b)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(b, a, generator=gen) * np.sqrt(2.0 / (a + b)))
            lin.bias.zero_()
        layers += [lin, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


class DLRM(torch.nn.Module):
    """Bottom MLP, the sparse features through `pool(lengths, values) -> (B, F * D)`,
    pairwise dots, top MLP."""

    def __init__(self, pool: torch.nn.Module, dim: int, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.bottom = mlp([DENSE, 64, dim], gen)
        self.pool = pool
        n = FEATURES + 1
        self.top = mlp([dim + n * (n - 1) // 2, 64, 1], gen)
        self.dim = dim
        self.iu = torch.triu_indices(n, n, 1)

    def forward(self, dense: torch.Tensor, lengths: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        e = self.pool(lengths, values).reshape(dense.shape[0], FEATURES, self.dim)
        z = torch.cat([x.unsqueeze(1), e], 1)
        dots = torch.bmm(z, z.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, dots], 1))


class ClembedPool(torch.nn.Module):
    def __init__(self, rows: list, dim: int, init: list, optimizer: str, lr: float, ctx: clembed.Context) -> None:
        super().__init__()
        tables = [dict(name="t%d" % f, num_embeddings=r, embedding_dim=dim, feature_names=["f%d" % f],
                       pooling="sum") for f, r in enumerate(rows)]
        self.ebc = ct.EmbeddingBagCollection(tables, optimizer=optimizer, lr=lr, eps=1e-10 if optimizer == "adagrad"
                                             else 1e-8, ctx=ctx, seed=0)
        self.ebc.load_state_dict({"embedding_bags.t%d.weight" % f: w for f, w in enumerate(init)}, strict=False)
        self.keys = ["f%d" % f for f in range(len(rows))]

    def forward(self, lengths: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return self.ebc(self.keys, values, lengths)


class TorchPool(torch.nn.Module):
    """PyTorch's own: one nn.EmbeddingBag(sparse=True) per feature."""

    def __init__(self, init: list) -> None:
        super().__init__()
        self.bags = torch.nn.ModuleList(torch.nn.EmbeddingBag.from_pretrained(w.clone(), freeze=False, mode="sum",
                                                                             sparse=True) for w in init)

    def forward(self, lengths: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        B = lengths.numel() // len(self.bags)
        offs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
        outs = []
        for f, bag in enumerate(self.bags):
            lo = int(offs[f * B])
            outs.append(bag(values[lo:int(offs[(f + 1) * B])], offs[f * B:(f + 1) * B] - lo))
        return torch.cat(outs, 1)


class TorchRecPool(torch.nn.Module):
    """TorchRec's EmbeddingBagCollection (unsharded, on the CPU: an nn.EmbeddingBag per table)
    fed the batch as a KeyedJaggedTensor; its tables take torch.optim.Adagrad on their dense
    gradients (untouched rows do not move: their gradient is 0)."""

    def __init__(self, rows: list, dim: int, init: list) -> None:
        super().__init__()
        from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
        from torchrec.modules.embedding_modules import EmbeddingBagCollection
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        self.kjt = KeyedJaggedTensor
        self.keys = ["f%d" % f for f in range(len(rows))]
        self.ebc = EmbeddingBagCollection(tables=[
            EmbeddingBagConfig(name="t%d" % f, embedding_dim=dim, num_embeddings=r, feature_names=[self.keys[f]],
                               pooling=PoolingType.SUM) for f, r in enumerate(rows)], device=torch.device("cpu"))
        self.ebc.load_state_dict({"embedding_bags.t%d.weight" % f: w for f, w in enumerate(init)})

    def forward(self, lengths: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return self.ebc(self.kjt.from_lengths_sync(keys=self.keys, values=values, lengths=lengths)).values()


class FbgemmPool(torch.nn.Module):
    """FBGEMM's table-batched embeddings on the CPU with its fused optimizer."""

    def __init__(self, rows: list, dim: int, init: list, optimizer: str, lr: float) -> None:
        super().__init__()
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            SplitTableBatchedEmbeddingBagsCodegen, EmbeddingLocation, ComputeDevice, OptimType)
        opt = {"rowwise_adagrad": OptimType.EXACT_ROWWISE_ADAGRAD, "adagrad": OptimType.EXACT_ADAGRAD}[optimizer]
        self.tbe = SplitTableBatchedEmbeddingBagsCodegen(
            [(r, dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for r in rows], optimizer=opt,
            learning_rate=lr, eps=1e-10 if optimizer == "adagrad" else 1e-8)
        with torch.no_grad():
            for f, w in enumerate(self.tbe.split_embedding_weights()):
                w.copy_(init[f])

    def forward(self, lengths: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        offs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
        return self.tbe(values, offs)


def train(model: DLRM, sparse_opt, data: Data, steps: int, batch: int, lr: float, every: int = 0,
          name: str = ""):
    """`steps` steps of SGD on the MLPs (and sparse_opt on the tables, where the tables do
    not step themselves): (the losses, the seconds of each step)."""
    dense_opt = torch.optim.SGD(list(model.bottom.parameters()) + list(model.top.parameters()), lr=lr)
    losses, times = [], []
    for step in range(steps):
        dense, lengths, values, y = data.batch(batch)
        t0 = time.perf_counter()
        dense_opt.zero_grad()
        if sparse_opt is not None:
            sparse_opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(dense, lengths, values), y)
        loss.backward()
        dense_opt.step()
        if sparse_opt is not None:
            sparse_opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if every and ((step + 1) % every == 0 or step == 0):
            print("%-8s step %4d  loss %.6f" % (name, step + 1, losses[-1]))
    return losses, times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--rows", type=int, default=20000, help="the largest table's rows (the smallest rows/10)")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--optimizer", default="adagrad", choices=["adagrad", "rowwise_adagrad"])
    ap.add_argument("--engines", default="clembed,torch,fbgemm,torchrec")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    ap.add_argument("--print", type=int, default=10, dest="every")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--copy", action="store_true",
                    help="clembed copies every tensor to and from the device (as where the device has its own memory)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    rows = tables_rows(a.rows)
    gen = torch.Generator().manual_seed(a.seed)
    init = [torch.randn(r, a.dim, generator=gen) * 0.05 for r in rows]
    ctx = clembed.Context()
    ct.bridge(ctx, zero_copy=False if a.copy else None)
    engines = {}
    for name in a.engines.split(","):
        if name == "clembed":
            engines[name] = (DLRM(ClembedPool(rows, a.dim, init, a.optimizer, a.lr, ctx), a.dim, a.seed), None)
        elif name == "torch":
            if a.optimizer != "adagrad":
                print("torch: skipped (PyTorch has no row-wise Adagrad; --optimizer adagrad compares it)")
                continue
            m = DLRM(TorchPool(init), a.dim, a.seed)
            engines[name] = (m, torch.optim.Adagrad(m.pool.parameters(), lr=a.lr, eps=1e-10))
        elif name == "fbgemm":
            try:
                engines[name] = (DLRM(FbgemmPool(rows, a.dim, init, a.optimizer, a.lr), a.dim, a.seed), None)
            except ImportError as e:
                print("fbgemm: skipped (%s; pip install fbgemm-gpu-cpu with its PyTorch)" % e)
        elif name == "torchrec":
            if a.optimizer != "adagrad":
                print("torchrec: skipped (its unsharded collection takes torch.optim; --optimizer adagrad compares it)")
                continue
            try:
                m = DLRM(TorchRecPool(rows, a.dim, init), a.dim, a.seed)
            except ImportError as e:
                print("torchrec: skipped (%s; pip install torchrec beside fbgemm-gpu-cpu)" % e)
                continue
            engines[name] = (m, torch.optim.Adagrad(m.pool.parameters(), lr=a.lr, eps=1e-10))
        else:
            ap.error("unknown engine %r (clembed, torch, fbgemm, torchrec)" % name)
    print("DLRM: %d features, tables of %d..%d rows x %d, batch %d, %s, lr %g, clembed on %s, torch %s, %d threads"
          % (FEATURES, min(rows), max(rows), a.dim, a.batch, a.optimizer, a.lr, ctx.device_name, torch.__version__,
             torch.get_num_threads()))
    results = {}
    for name, (model, sparse_opt) in engines.items():
        results[name] = train(model, sparse_opt, Data(rows, a.seed + 7), a.steps, a.batch, a.lr, a.every, name)
    print("time per step (median of the steps after the first):")
    for name, (losses, times) in results.items():
        print("  %-8s %8.2f ms" % (name, 1e3 * float(np.median(times[1:] if len(times) > 1 else times))))
    for peer in ("torch", "torchrec"):
        if "clembed" in results and peer in results:
            a_, b_ = np.array(results["clembed"][0]), np.array(results[peer][0])
            print("largest relative difference of the loss curves, clembed vs %s: %.3g"
                  % (peer, float(np.max(np.abs(a_ - b_) / np.abs(b_)))))
    if "clembed" in results:
        br = ct.bridge(ctx)
        print("clembed: tensors used in place: %s; copies between tensors and device buffers: %d (%d bytes)"
              % (br.zero_copy, br.copies, br.copied_bytes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
