#!/usr/bin/env python3
"""clembed against the libraries a user would pick instead, row by row, in one run:
PyTorch 2.x (FBGEMM's generated kernels under its CPU embedding_bag sum and mean),
FBGEMM's table-batched embeddings (fbgemm-gpu-cpu: the training TBE with
EXACT_ROWWISE_ADAGRAD, the INT8/INT4/INT2 inference TBE), ONNX Runtime's
EmbedLayerNormalization (com.microsoft), and for GGUF tables ggml's own CPU get_rows
(llama.cpp's token-table lookup, from PyPI's prebuilt libggml-python) and llama.cpp's
Python package gguf (gguf.quants' dequantizers).

    python3 tools/compare/peers.py --install                # the peers into a venv of their own, once
    python3 tools/compare/peers.py [--only TEXT] [--rounds 2] [--reps 9] [--threads 2] [--json FILE]
                                   [--list] [--check] [--small] [--markdown] [--venv DIR] [--no-venv]
                                   [--device SPEC]
    python3 tools/compare/peers.py --from-json FILE [--markdown]   # an earlier run's table again

--install makes the venv (--venv, default $XDG_CACHE_HOME/clembed/peers-venv) and
installs the pinned peers from PyPI (PINS below: fbgemm-gpu-cpu 1.9.0 works with
PyTorch 2.14.1 only; PyPI's torch wheel is its CUDA build, which runs on a machine
without a GPU); afterwards the script runs itself with that venv's Python. The
peers are never dependencies of clembed or of tools/check.sh. clembed is the
repository's Python package (python/) over build/libclembed.so (CLEMBED_LIBRARY to
use another), on the default OpenCL device (--device).

Every row is one operation on the same shapes and dtypes in clembed and in each peer,
the peers with --threads threads (PyTorch's, ONNX Runtime's intra-op, ggml's; default:
the CPUs this process may run on, which a CPU OpenCL device uses; gguf.quants is NumPy,
one thread). Before timing,
the results are compared once: "same bits" where they are identical, else the largest
difference relative to the peer's largest value ("rel 3e-07"); the stateful rows
(optimizer steps) compare what two steps from the same state changed. Then clembed and
each peer
run alternately, pair by pair (the order flipping every pair), --reps times after a
warm-up, each run after a write of a --sweep-mib buffer (default 640 MiB, twice the
largest cache these machines report) so that no run finds the last run's rows in a
cache; --rounds repeats the whole list. A cell is the median over rounds of each
round's median; a ratio the median over rounds of (the peer's median / clembed's
median in the pairs with that peer): above 1, clembed is faster. The gathering rows
run over tables at least four times the largest cache (8,000,000 x 128 F32, 3.8 GiB;
ggml's types 1.5 GiB of blocks).

Rows whose peer is not installed are skipped, saying which; --list names the rows.
--check exits 1 when a result disagrees with a peer beyond the row's tolerance (the
same bits where the contract's order is the peer's: the lookups, the bags, ggml's
blocks); --small runs every row on small shapes, a functional run (ctest's
peers_small: --small --check --rounds 1 --reps 1 --sweep-mib 16, seconds, with
whatever peers the Python running it has).
"""
import argparse
import functools
import json
import warnings
import math
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

# the peers, pinned: an fbgemm-gpu-cpu release works with one PyTorch release
PINS = ["torch==2.14.1", "fbgemm-gpu-cpu==1.9.0", "onnxruntime==1.32.0", "onnx==1.23.2", "gguf==0.19.0",
        "libggml-python==0.20.2.post1", "numpy==2.4.6"]

# the shapes (see the module text)
REC_V, REC_D = 8_000_000, 128          # the recommendation table, 4 GiB in F32
STEP_V = 3_000_000                     # the optimizer rows' table (3 tables' worth of state each side)
N_IDS = 131072                         # ids per gathering call: 4096 bags of 32
BAGS, BAG_LEN = 4096, 32
FEATURES, FEAT_V, FEAT_D = 26, 250_000, 64  # the 26-feature set, 1.66 GB in F32
BERT_V, BERT_D, BERT_B, BERT_S = 32000, 1024, 8, 2048
GGUF_D, GGUF_BYTES, GGUF_IDS = 4096, 3 << 29, 16384
EMBED_SEQ = 2048
if "--small" in sys.argv[1:]:  # a functional run in seconds: the same rows on small shapes
    REC_V, STEP_V, N_IDS, BAGS = 100_000, 50_000, 8192, 256
    FEAT_V, BERT_V, BERT_D, BERT_B, BERT_S = 10_000, 4000, 256, 4, 256
    GGUF_BYTES, GGUF_IDS, EMBED_SEQ = 16 << 20, 1024, 256


def import_clembed():
    """The repository's Python package over build/libclembed.so (CLEMBED_LIBRARY: another library)."""
    os.environ.setdefault("CLEMBED_LIBRARY", os.path.join(ROOT, "build", "libclembed.so"))
    if os.path.join(ROOT, "python") not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, "python"))
    import clembed
    return clembed


def default_venv():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "clembed", "peers-venv")


def install(venv):
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    subprocess.run(pip + PINS, check=True)
    print("peers installed in %s: %s" % (venv, " ".join(PINS)))


# ---------------------------------------------------------------- the harness

class Env:
    """What the rows share: the context, the peers' modules, the data (one large table at a time)."""

    def __init__(self, args):
        import numpy as np
        self.np = np
        self.args = args
        clembed = import_clembed()
        self.clembed = clembed
        self.ctx = clembed.Context(args.device)
        self.versions = {"clembed": clembed.__version__, "numpy": np.__version__}
        self.mods = {}
        from importlib import metadata
        for name, mod, dist in (("torch", "torch", "torch"), ("fbgemm", "fbgemm_gpu", "fbgemm-gpu-cpu"),
                                ("onnxruntime", "onnxruntime", "onnxruntime"), ("onnx", "onnx", "onnx"),
                                ("gguf", "gguf", "gguf"), ("libggml", "libggml", "libggml-python")):
            try:
                self.mods[name] = __import__(mod)
                try:
                    self.versions[dist] = metadata.version(dist)
                except metadata.PackageNotFoundError:  # Debian's packages
                    self.versions[dist] = getattr(self.mods[name], "__version__", "?")
            except Exception as e:  # noqa: BLE001 (a peer that does not import is a peer not installed)
                self.versions[dist] = "not installed (%s)" % (str(e).splitlines() or ["?"])[0][:80]
        if "torch" in self.mods:
            self.mods["torch"].set_num_threads(args.threads)
            warnings.filterwarnings("ignore", message="Sparse invariant checks")
        self.rng = np.random.default_rng(1)
        self.sweep = np.ones(args.sweep_mib << 18, np.float32)
        self.data = {}

    def have(self, *names):
        return [n for n in names if n not in self.mods]

    def keep(self, key, make, big=False):
        """data[key] = make() once; big: drops the other big items first (memory)."""
        if key not in self.data:
            if big:
                self.drop_big()
            self.data[key] = make()
        return self.data[key]

    def drop_big(self):
        self.data = {k: v for k, v in self.data.items() if not k[0].startswith("big")}
        import gc
        gc.collect()

    def table(self, rows, cols):
        """A random F32 table in [-1, 1) (rows past 2^20 repeat a 2^20-row block: the bytes, not
        the values, are what a gather moves)."""
        np = self.np

        def make():
            base = (self.rng.random((min(rows, 1 << 20), cols), np.float32) * 2 - 1).astype(np.float32)
            t = np.empty((rows, cols), np.float32)
            for r in range(0, rows, base.shape[0]):
                k = min(base.shape[0], rows - r)
                t[r:r + k] = base[:k]
            return t
        return self.keep(("big table", rows, cols), make, big=True)

    def ids(self, n, V, tag=""):
        return self.keep(("ids", n, V, tag), lambda: self.rng.integers(0, V, n).astype(self.np.int64))

    def do_sweep(self):
        self.sweep += 1.0


def agree(ours, theirs):
    """'same bits' or the largest difference relative to the peer's largest value."""
    import numpy as np
    a = np.asarray(ours, dtype=np.float32)
    b = np.asarray(theirs, dtype=np.float32)
    if a.size != b.size:
        raise ValueError("results of %s and %s values compared" % (a.shape, b.shape))
    a = a.reshape(b.shape)
    if np.array_equal(a.view(np.uint32), b.view(np.uint32)):
        return "same bits"
    if not np.isfinite(a).all():
        return "clembed not finite!"
    scale = float(np.abs(b).max()) or 1.0
    return "rel %.1e" % (float(np.abs(a.astype(np.float64) - b).max()) / scale)


class Row:
    """name, what clembed runs, the peers' runs {label: fn}, agreement {label: text}; tol: what --check
    accepts, 0 the same bits (the contract's order is the peer's), else the largest relative difference."""

    def __init__(self, name, ours, peers, agreement, note="", tol=0.0, skipped=None):
        self.name, self.ours, self.peers, self.agreement, self.note = name, ours, peers, agreement, note
        self.tol = tol
        self.skipped = skipped or {}  # {label: why}: a peer of the row that is not installed


def badness(text):
    """An agreement text's rank: 0 for the same bits, the relative difference, inf for anything else."""
    if text == "same bits":
        return 0.0
    return float(text[4:]) if text.startswith("rel ") else math.inf


def worst(texts):
    return max(texts, key=badness)


def within(text, tol):
    """Whether an agreement text is within tol (0: the same bits; None: reported, not checked)."""
    if text == "same bits" or tol is None:
        return True
    return tol > 0 and text.startswith("rel ") and float(text[4:]) <= tol


ROWS = []  # (name, peers needed, builder(env) -> Row)


def row(name, *needs):
    def reg(fn):
        ROWS.append((name, needs, fn))
        return fn
    return reg


def time_row(env, r, reps):
    """{label: [seconds], ("clembed", label): [seconds]}: each peer and clembed in the pairs with it,
    pair by pair (the order flipping every pair), the sweep before each run."""
    times = {}
    for label, fn in r.peers.items():
        mine, theirs = times.setdefault(("clembed", label), []), times.setdefault(label, [])
        for k in range(reps + 1):
            order = ((mine, r.ours), (theirs, fn)) if k % 2 == 0 else ((theirs, fn), (mine, r.ours))
            for samples, run in order:
                env.do_sweep()
                t0 = time.perf_counter()
                run()
                dt = time.perf_counter() - t0
                if k:
                    samples.append(dt)
    return times


# ---------------------------------------------------------------- the rows

def torch_sinusoid(t, n, d):
    """The PyTorch tutorial's PositionalEncoding table (n x d): float32 sin and cos of float32 angles."""
    p = t.arange(n, dtype=t.float32).unsqueeze(1)
    div = t.exp(t.arange(0, d, 2, dtype=t.float32) * (-math.log(10000.0) / d))
    pe = t.empty(n, d)
    pe[:, 0::2] = t.sin(p * div)
    pe[:, 1::2] = t.cos(p * div)
    return pe


def torch_dtype(env, name):
    t = env.mods["torch"]
    return {"f32": t.float32, "f16": t.float16, "bf16": t.bfloat16}[name]


for _dt in ("f32", "f16", "bf16"):
    @row("lookup %s (%d x %d, %d ids)" % (_dt, REC_V, REC_D, N_IDS), "torch")
    def _lookup(env, dt=_dt):
        t, np, ctx = env.mods["torch"], env.np, env.ctx
        base = env.table(REC_V, REC_D)
        ids = env.ids(N_IDS, REC_V)
        W = t.from_numpy(base) if dt == "f32" else t.from_numpy(base).to(torch_dtype(env, dt))
        m = env.keep(("big clembed", REC_V, REC_D), lambda: ctx.matrix(base)) if dt == "f32" else \
            ctx.matrix(base, dtype=dt)
        d_ids, t_ids = ctx.ids(ids), t.from_numpy(ids)
        out = ctx.empty(N_IDS, REC_D, dt)
        o = t.empty(N_IDS, REC_D, dtype=W.dtype)

        def ours():
            ctx.lookup(m, d_ids, out=out)
            ctx.finish()

        def torch_run():
            t.index_select(W, 0, t_ids, out=o)

        ours()
        torch_run()
        return Row(None, ours, {"PyTorch index_select": torch_run},
                   {"PyTorch index_select": agree(out.numpy(np.float32), o.float().numpy())})


@row("embed sqrt(d) + sinusoid f32 (%d x %d, %d ids, seq %d)" % (REC_V, REC_D, N_IDS, EMBED_SEQ), "torch")
def _embed(env):
    t, ctx = env.mods["torch"], env.ctx
    base = env.table(REC_V, REC_D)
    ids = env.ids(N_IDS, REC_V)
    m = env.keep(("big clembed", REC_V, REC_D), lambda: ctx.matrix(base))
    d_ids = ctx.ids(ids.reshape(-1, EMBED_SEQ))
    W, t_ids = t.from_numpy(base), t.from_numpy(ids)
    out = ctx.empty(N_IDS, REC_D)
    o = t.empty(N_IDS, REC_D)
    o3 = o.view(-1, EMBED_SEQ, REC_D)
    pe = torch_sinusoid(t, EMBED_SEQ, REC_D)  # the PyTorch tutorial's buffer, made once
    scale = math.sqrt(REC_D)

    def ours():
        ctx.embed(m, d_ids, scale="sqrt", positions="sinusoid", out=out)
        ctx.finish()

    def torch_run():
        t.index_select(W, 0, t_ids, out=o)
        o.mul_(scale)
        o3.add_(pe)

    ours()
    torch_run()
    return Row(None, ours, {"PyTorch": torch_run}, {"PyTorch": agree(out.numpy(), o.numpy())},
               "PyTorch's sinusoid is float32 sin/cos of float32 angles, clembed's exact to 1e-6", tol=3e-5)


for _mode in ("sum", "mean", "max"):
    @row("bag %s f32 (%d x %d, %d bags of %d)" % (_mode, REC_V, REC_D, BAGS, BAG_LEN), "torch")
    def _bag(env, mode=_mode):
        t, np, ctx = env.mods["torch"], env.np, env.ctx
        base = env.table(REC_V, REC_D)
        ids = env.ids(N_IDS, REC_V)
        m = env.keep(("big clembed", REC_V, REC_D), lambda: ctx.matrix(base))
        offsets = np.arange(0, N_IDS, BAG_LEN, dtype=np.int64)
        d_ids, d_off = ctx.ids(ids), ctx.ids(offsets)
        W, t_ids, t_off = t.from_numpy(base), t.from_numpy(ids), t.from_numpy(offsets)
        out = ctx.empty(BAGS, REC_D)
        F = t.nn.functional
        res = {}

        def ours():
            ctx.embedding_bag(m, d_ids, d_off, mode=mode, out=out)
            ctx.finish()

        def torch_run():
            res["o"] = F.embedding_bag(t_ids, W, t_off, mode=mode)

        ours()
        torch_run()
        return Row(None, ours, {"PyTorch F.embedding_bag": torch_run},
                   {"PyTorch F.embedding_bag": agree(out.numpy(), res["o"].numpy())},
                   "clembed's max also reads each element's row back to the host (Context.embedding_bag's "
                   ".max_rows)" if mode == "max" else "")


def features_data(env):
    """The 26 tables (views of one array), their ids and offsets."""
    np = env.np
    base = env.table(FEATURES * FEAT_V, FEAT_D)
    ids = env.ids(FEATURES * N_IDS, FEAT_V, "features")
    offsets = np.arange(0, N_IDS, BAG_LEN, dtype=np.int64)
    return base, ids, offsets


def clembed_features(env, base, ids, offsets):
    """The 26 features as Context.embedding_bags takes them, each over a table of its own
    made from base's rows: (tables, feature dicts)."""
    ctx = env.ctx
    tables = [ctx.matrix(base[f * FEAT_V:(f + 1) * FEAT_V]) for f in range(FEATURES)]
    return tables, [dict(table=tables[f], ids=ctx.ids(ids[f * N_IDS:(f + 1) * N_IDS]), offsets=ctx.ids(offsets),
                         mode="sum") for f in range(FEATURES)]


def tbe_module(env, base):
    """FBGEMM's training TBE over the 26 tables with their values (FP32 weights, EXACT_ROWWISE_ADAGRAD,
    lr 0.1, eps 1e-8): its forward is the TBE forward TorchRec runs."""
    t = env.mods["torch"]
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (ComputeDevice,
                                                                        SplitTableBatchedEmbeddingBagsCodegen)
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(FEAT_V, FEAT_D, EmbeddingLocation.HOST, ComputeDevice.CPU)] * FEATURES,
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1, eps=1e-8,
        weights_precision=SparseType.FP32, output_dtype=SparseType.FP32, pooling_mode=PoolingMode.SUM)
    with t.no_grad():
        for f, w in enumerate(tbe.split_embedding_weights()):
            w.copy_(t.from_numpy(base[f * FEAT_V:(f + 1) * FEAT_V]))
    return tbe


def tbe_inputs(env, ids, offsets):
    t = env.mods["torch"]
    # the TBE's offsets: feature-major, FEATURES * BAGS + 1
    off = t.cat([t.from_numpy(offsets) + f * N_IDS for f in range(FEATURES)] +
                [t.tensor([FEATURES * N_IDS])])
    return t.from_numpy(ids), off


@row("bags: %d features of %d x %d, %d bags of %d each, sum" % (FEATURES, FEAT_V, FEAT_D, BAGS, BAG_LEN),
     "torch", "fbgemm")
def _bags(env):
    t, ctx = env.mods["torch"], env.ctx
    base, ids, offsets = features_data(env)
    _, feats = env.keep(("big features",), lambda: clembed_features(env, base, ids, offsets))
    out = ctx.empty(BAGS, FEATURES * FEAT_D)
    tbe = tbe_module(env, base)
    t_ids, t_off = tbe_inputs(env, ids, offsets)
    tabs = [t.from_numpy(base[f * FEAT_V:(f + 1) * FEAT_V]) for f in range(FEATURES)]
    fids = [t.from_numpy(ids[f * N_IDS:(f + 1) * N_IDS]) for f in range(FEATURES)]
    foff = t.from_numpy(offsets)
    F = t.nn.functional
    res = {}

    def ours():
        ctx.embedding_bags(feats, out=out)
        ctx.finish()

    def tbe_run():
        with t.no_grad():
            res["tbe"] = tbe(t_ids, t_off)

    def torch_run():
        res["torch"] = t.cat([F.embedding_bag(fids[f], tabs[f], foff, mode="sum") for f in range(FEATURES)], dim=1)

    ours()
    tbe_run()
    torch_run()
    got = out.numpy()
    return Row(None, ours, {"FBGEMM TBE forward": tbe_run, "PyTorch 26 F.embedding_bag": torch_run},
               {"FBGEMM TBE forward": agree(got, res["tbe"].numpy()),
                "PyTorch 26 F.embedding_bag": agree(got, res["torch"].numpy())})


@row("bags forward + row-wise Adagrad step: %d features of %d x %d" % (FEATURES, FEAT_V, FEAT_D), "torch", "fbgemm")
def _bags_step(env):
    t, np, ctx = env.mods["torch"], env.np, env.ctx
    base, ids, offsets = features_data(env)
    mine, feats = clembed_features(env, base, ids, offsets)  # tables of their own: the step changes them
    states = [ctx.empty(FEAT_V, 1) for _ in range(FEATURES)]
    opts = [dict(kind="rowwise_adagrad", lr=0.1, eps=1e-8, state=states[f]) for f in range(FEATURES)]
    out = ctx.empty(BAGS, FEATURES * FEAT_D)
    g = (env.rng.random((BAGS, FEATURES * FEAT_D), np.float32) * 2 - 1).astype(np.float32)
    d_g, t_g = ctx.matrix(g), t.from_numpy(g)
    tbe = tbe_module(env, base)
    t_ids, t_off = tbe_inputs(env, ids, offsets)

    def ours():
        ctx.embedding_bags(feats, out=out)
        ctx.bags_optimizer_step(feats, d_g, opts)
        ctx.finish()

    def tbe_run():
        tbe(t_ids, t_off).backward(t_g)

    ours()
    tbe_run()
    texts = []
    for f in (0, FEATURES // 2, FEATURES - 1):
        touched = np.unique(ids[f * N_IDS:(f + 1) * N_IDS])
        before = base[f * FEAT_V:(f + 1) * FEAT_V][touched]
        got = ctx.lookup(mine[f], ctx.ids(touched)).numpy() - before
        texts.append(agree(got, tbe.split_embedding_weights()[f].detach()[t.from_numpy(touched)].numpy() - before))
    return Row(None, ours, {"FBGEMM TBE fwd + fused bwd": tbe_run}, {"FBGEMM TBE fwd + fused bwd": worst(texts)},
               "what one training step from the same tables changed, compared (the touched rows of 3 tables)",
               tol=1e-5)


for _ty in ("INT8", "INT4", "INT2"):
    @row("bag sum i%s_tbe (%d x %d, %d bags of %d)" % (_ty[3:], REC_V, REC_D, BAGS, BAG_LEN),
         "torch", "fbgemm")
    def _intn(env, ty=_ty):
        t, np, ctx = env.mods["torch"], env.np, env.ctx
        from fbgemm_gpu.split_embedding_configs import SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen
        name = "i%s_tbe" % ty[3:]
        base = env.table(REC_V, REC_D)
        ids = env.ids(N_IDS, REC_V)
        offsets = np.arange(0, N_IDS + 1, BAG_LEN)
        # clembed's quantizer of FBGEMM's types (bit for bit fbgemm_gpu's quantize_embs, tested); the TBE
        # gets the same bytes
        m = ctx.quantize_rows(env.keep(("big clembed", REC_V, REC_D), lambda: ctx.matrix(base)), name)
        env.data.pop(("big clembed", REC_V, REC_D))
        stored = m.raw()
        sty = getattr(SparseType, ty)
        tbe = IntNBitTableBatchedEmbeddingBagsCodegen([("t", REC_V, REC_D, sty, EmbeddingLocation.HOST)],
                                                      device="cpu", output_dtype=SparseType.FP32,
                                                      pooling_mode=PoolingMode.SUM)
        tbe.fill_random_weights()
        w, s = tbe.split_embedding_weights()[0]
        w.copy_(t.from_numpy(stored[:, 4:]))
        s.copy_(t.from_numpy(stored[:, :4]))
        del stored
        t_ids, t_off = t.from_numpy(ids.astype(np.int32)), t.from_numpy(offsets.astype(np.int32))
        d_ids, d_off = ctx.ids(ids), ctx.ids(offsets[:-1])
        out = ctx.empty(BAGS, REC_D)
        res = {}

        def ours():
            ctx.embedding_bag(m, d_ids, d_off, mode="sum", out=out)
            ctx.finish()

        def tbe_run():
            res["o"] = tbe(t_ids, t_off)

        ours()
        tbe_run()
        return Row(None, ours, {"FBGEMM inference TBE": tbe_run},
                   {"FBGEMM inference TBE": agree(out.numpy(), res["o"].numpy())},
                   "the TBE pools fma(scale * w, q, acc + bias * w), clembed acc + fma(q, scale, bias)", tol=1e-6)


@row("backward f32 into a %d x %d gradient (%d ids)" % (REC_V, REC_D, N_IDS), "torch")
def _backward(env):
    t, np, ctx = env.mods["torch"], env.np, env.ctx
    ids = env.ids(N_IDS, REC_V)
    env.drop_big()
    grad = (env.rng.random((N_IDS, REC_D), np.float32) * 2 - 1).astype(np.float32)
    dW = ctx.empty(REC_V, REC_D)
    tdW = t.zeros(REC_V, REC_D)
    d_ids, d_grad = ctx.ids(ids), ctx.matrix(grad)
    t_ids, t_grad = t.from_numpy(ids), t.from_numpy(grad)

    def ours():
        ctx.backward(d_grad, d_ids, REC_V, out=dW)
        ctx.finish()

    def torch_run():
        tdW.index_add_(0, t_ids, t_grad)

    ours()
    torch_run()
    touched = np.unique(ids)
    got = ctx.lookup(dW, ctx.ids(touched)).numpy()
    res = agree(got, tdW[t.from_numpy(touched)].numpy())
    return Row(None, ours, {"PyTorch index_add_": torch_run}, {"PyTorch index_add_": res},
               "both add into the gradient they were given (gradient accumulation)")


for _kind, _topt in (("sgd", "SGD"), ("adagrad", "Adagrad"), ("adam", "SparseAdam")):
    @row("sparse %s step f32 (%d x %d, %d ids)" % (_kind, STEP_V, REC_D, N_IDS), "torch")
    def _step(env, kind=_kind, topt=_topt):
        t, np, ctx = env.mods["torch"], env.np, env.ctx
        base = env.table(STEP_V, REC_D)
        ids = env.ids(N_IDS, STEP_V)
        grad = (env.rng.random((N_IDS, REC_D), np.float32) * 2 - 1).astype(np.float32)
        m = ctx.matrix(base)
        states = {}
        if kind != "sgd":
            states["state"] = ctx.empty(STEP_V, REC_D)
        if kind == "adam":
            states["state2"] = ctx.empty(STEP_V, REC_D)
        Wp = t.nn.Parameter(t.from_numpy(base.copy()))
        lr = 0.1  # (updates far above the weights' last bit, so that the changes compare)
        opt = {"SGD": lambda: t.optim.SGD([Wp], lr=lr),
               "Adagrad": lambda: t.optim.Adagrad([Wp], lr=lr, eps=1e-10),
               "SparseAdam": lambda: t.optim.SparseAdam([Wp], lr=lr, eps=1e-8)}[topt]()
        d_ids, d_grad = ctx.ids(ids), ctx.matrix(grad)
        idx, t_grad = t.from_numpy(ids).unsqueeze(0), t.from_numpy(grad)
        step = [0]

        def ours():
            step[0] += 1
            ctx.optimizer_step(m, d_grad, d_ids, kind, lr, step=step[0], **states)
            ctx.finish()

        def torch_run():
            # the sparse gradient nn.Embedding(sparse=True)'s backward makes, then the step
            Wp.grad = t.sparse_coo_tensor(idx, t_grad, (STEP_V, REC_D))
            opt.step()

        for _ in range(2):  # two steps (Adam's t = 1 and 2)
            ours()
            torch_run()
        touched = np.unique(ids)
        before = base[touched]
        got = ctx.lookup(m, ctx.ids(touched)).numpy() - before
        res = agree(got, Wp.detach()[t.from_numpy(touched)].numpy() - before)
        return Row(None, ours, {"PyTorch optim.%s" % topt: torch_run}, {"PyTorch optim.%s" % topt: res},
                   "what two steps from the same table changed, compared (the touched rows)", tol=1e-5)


ROPE_T, ROPE_HEADS, ROPE_D, ROPE_CACHE = 16384, 32, 128, 8192
POS_N, POS_D, INIT_V, INIT_D = 32768, 1024, 262144, 1024
if "--small" in sys.argv[1:]:
    ROPE_T, ROPE_HEADS, POS_N, INIT_V = 1024, 4, 2048, 8192


def torch_rope_freqs(t, n, first=0):
    """Hugging Face's rotary angles: float32 positions times float32 inverse frequencies (base 10000)."""
    inv = 1.0 / (10000.0 ** (t.arange(0, ROPE_D, 2, dtype=t.float32) / ROPE_D))
    f = t.outer(t.arange(first, first + n, dtype=t.float32), inv)
    return t.cat((f, f), dim=-1)


@row("rope apply f32, NeoX halves (%d tokens x %d heads x %d)" % (ROPE_T, ROPE_HEADS, ROPE_D), "torch")
def _rope_apply(env):
    t, np, ctx = env.mods["torch"], env.np, env.ctx
    x = (env.rng.random((ROPE_T, ROPE_HEADS * ROPE_D), np.float32) * 2 - 1).astype(np.float32)
    xm, out = ctx.matrix(x), ctx.empty(ROPE_T, ROPE_HEADS * ROPE_D)
    tx = t.from_numpy(x).view(ROPE_T, ROPE_HEADS, ROPE_D)
    emb = torch_rope_freqs(t, ROPE_T)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]   # made once, as a model's rotary module caches them
    res = {}

    def ours():
        ctx.rope(xm, ROPE_D, out=out, layout="neox")
        ctx.finish()

    def torch_run():  # transformers' apply_rotary_pos_emb
        res["o"] = tx * cos + t.cat((-tx[..., ROPE_D // 2:], tx[..., :ROPE_D // 2]), dim=-1) * sin

    ours()
    torch_run()
    return Row(None, ours, {"PyTorch apply_rotary_pos_emb": torch_run},
               {"PyTorch apply_rotary_pos_emb": agree(out.numpy(), res["o"].reshape(ROPE_T, -1))},
               "PyTorch's angles are float32 products (off by up to 1e-3 at position 16,383), clembed's exact to "
               "1e-6; its cos/sin made once outside the timing", tol=None)


def angles_row(env, rows, cols, make, label, torch_value):
    """A table of exact angles' sines and cosines that clembed makes (make(out)) beside PyTorch's
    float32 version (torch_value() -> tensor), reported, not checked."""
    ctx = env.ctx
    out = ctx.empty(rows, cols)
    res = {}

    def ours():
        make(out)
        ctx.finish()

    def torch_run():
        res["o"] = torch_value()

    ours()
    torch_run()
    return Row(None, ours, {label: torch_run}, {label: agree(out.numpy(), res["o"].numpy())},
               "PyTorch's angles are float32 products, clembed's exact to 1e-6", tol=None)


@row("rope cache f32 (%d positions, R %d)" % (ROPE_CACHE, ROPE_D), "torch")
def _rope_cache(env):
    t = env.mods["torch"]

    def torch_value():  # cos and sin of the half angles, side by side, as clembed's cache holds them
        f = torch_rope_freqs(t, ROPE_CACHE)[:, :ROPE_D // 2]
        return t.cat((f.cos(), f.sin()), dim=-1)
    return angles_row(env, ROPE_CACHE, ROPE_D, lambda out: env.ctx.rope_cache(ROPE_CACHE, ROPE_D, out=out),
                      "PyTorch", torch_value)


@row("positional table f32 (%d x %d)" % (POS_N, POS_D), "torch")
def _positional(env):
    t = env.mods["torch"]
    return angles_row(env, POS_N, POS_D, lambda out: env.ctx.positional(POS_N, POS_D, out=out),
                      "PyTorch PositionalEncoding", lambda: torch_sinusoid(t, POS_N, POS_D))


for _kind in ("normal", "uniform"):
    @row("init %s f32 (%d x %d)" % (_kind, INIT_V, INIT_D), "torch")
    def _init(env, kind=_kind):
        t, ctx = env.mods["torch"], env.ctx
        m = ctx.empty(INIT_V, INIT_D)
        W = t.empty(INIT_V, INIT_D)

        def ours():
            ctx.init(m, kind)
            ctx.finish()

        def torch_run():
            W.normal_() if kind == "normal" else W.uniform_(-1.0, 1.0)

        ours()
        torch_run()
        a, b = m.numpy(), W.numpy()
        text = "mean %.1e / %.1e, std %.4f / %.4f" % (a.mean(), b.mean(), a.std(), b.std())
        return Row(None, ours, {"PyTorch": torch_run}, {"PyTorch": text},
                   "different generators (clembed: Philox, the same bits on every device): the moments compared, "
                   "clembed's / PyTorch's", tol=None)


def bert_data(env):
    np = env.np

    def make():
        r = env.rng
        W = (r.random((BERT_V, BERT_D), np.float32) * 2 - 1).astype(np.float32)
        P = (r.random((BERT_S, BERT_D), np.float32) * 2 - 1).astype(np.float32)
        T = (r.random((2, BERT_D), np.float32) * 2 - 1).astype(np.float32)
        g = (r.random(BERT_D, np.float32) + 0.5).astype(np.float32)
        b = (r.random(BERT_D, np.float32) - 0.5).astype(np.float32)
        ids = r.integers(0, BERT_V, (BERT_B, BERT_S)).astype(np.int64)
        seg = np.broadcast_to((np.arange(BERT_S) >= BERT_S // 2).astype(np.int64), (BERT_B, BERT_S)).copy()
        return W, P, T, g, b, ids, seg
    return env.keep(("bert",), make)


def torch_bert(env, data):
    t = env.mods["torch"]
    W, P, T, g, b, ids, seg = data
    word, pos, typ = t.nn.Embedding(BERT_V, BERT_D), t.nn.Embedding(BERT_S, BERT_D), t.nn.Embedding(2, BERT_D)
    norm = t.nn.LayerNorm(BERT_D, eps=1e-12)
    with t.no_grad():
        for mod, a in ((word, W), (pos, P), (typ, T), (norm.weight, g), (norm.bias, b)):
            (mod.weight if hasattr(mod, "weight") else mod).copy_(t.from_numpy(a))
    t_ids, t_seg = t.from_numpy(ids), t.from_numpy(seg)
    pids = t.arange(BERT_S).expand(BERT_B, BERT_S)
    return (lambda: norm(word(t_ids) + typ(t_seg) + pos(pids))), (word, pos, typ, norm)


def clembed_bert(env, data):
    ctx = env.ctx
    W, P, T, g, b, ids, seg = data
    m, pm, tm = ctx.matrix(W), ctx.matrix(P), ctx.matrix(T)
    gm, bm = ctx.matrix(g.reshape(1, -1)), ctx.matrix(b.reshape(1, -1))
    d_ids, d_seg = ctx.ids(ids), ctx.ids(seg)
    kw = dict(positions=pm, segment_table=tm, segment_ids=d_seg, norm="layer", norm_weight=gm, norm_bias=bm,
              norm_eps=1e-12)
    return m, d_ids, kw


@row("BERT embeddings + segments + LayerNorm (%d x %d, %d x %d)" % (BERT_V, BERT_D, BERT_B, BERT_S), "torch")
def _bert(env):
    t, ctx = env.mods["torch"], env.ctx
    data = bert_data(env)
    m, d_ids, kw = clembed_bert(env, data)
    out = ctx.empty(BERT_B * BERT_S, BERT_D)
    fwd, _ = torch_bert(env, data)
    peers, agreement, res = {}, {}, {}

    def ours():
        ctx.embed(m, d_ids, out=out, **kw)
        ctx.finish()

    def torch_run():
        with t.no_grad():
            res["torch"] = fwd()

    ours()
    got = out.numpy()
    peers["PyTorch"] = torch_run
    torch_run()
    agreement["PyTorch"] = agree(got, res["torch"].reshape(-1, BERT_D).numpy())
    skipped = {}
    missing = env.have("onnxruntime", "onnx")
    if missing:
        skipped["ONNX Runtime EmbedLayerNorm"] = "not installed: %s" % ", ".join(missing)
    else:
        run, ref = ort_bert(env, data)
        peers["ONNX Runtime EmbedLayerNorm"] = run
        agreement["ONNX Runtime EmbedLayerNorm"] = agree(got, ref.reshape(-1, BERT_D))
    return Row(None, ours, peers, agreement, "every side writes a new output each run but clembed, which writes "
               "the same buffer (ONNX Runtime's output bound to one array)", tol=1e-5, skipped=skipped)


def ort_bert(env, data):
    """ONNX Runtime's com.microsoft EmbedLayerNormalization with the layer's weights as initializers."""
    np, ort = env.np, env.mods["onnxruntime"]
    from onnx import TensorProto, helper, numpy_helper
    W, P, T, g, b, ids, seg = data
    inits = [numpy_helper.from_array(a, n) for a, n in ((W, "word"), (P, "pos"), (T, "seg"), (g, "gamma"),
                                                        (b, "beta"))]
    node = helper.make_node("EmbedLayerNormalization", ["ids", "segs", "word", "pos", "seg", "gamma", "beta"],
                            ["out", "mask_index"], domain="com.microsoft", epsilon=1e-12)
    graph = helper.make_graph([node], "bert_embeddings",
                              [helper.make_tensor_value_info("ids", TensorProto.INT32, [BERT_B, BERT_S]),
                               helper.make_tensor_value_info("segs", TensorProto.INT32, [BERT_B, BERT_S])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [BERT_B, BERT_S, BERT_D]),
                               helper.make_tensor_value_info("mask_index", TensorProto.INT32, [BERT_B])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = env.args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    i32, s32 = ids.astype(np.int32), seg.astype(np.int32)
    out = np.empty((BERT_B, BERT_S, BERT_D), np.float32)
    mask = np.empty(BERT_B, np.int32)
    io = sess.io_binding()  # the inputs and the outputs bound once: each run writes the same arrays
    for name, a in (("ids", i32), ("segs", s32)):
        io.bind_input(name, "cpu", 0, np.int32, list(a.shape), a.ctypes.data)
    io.bind_output("out", "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
    io.bind_output("mask_index", "cpu", 0, np.int32, list(mask.shape), mask.ctypes.data)

    def run():
        sess.run_with_iobinding(io)
        run.keep = (i32, s32, out, mask)
    run()
    return run, out.copy()


@row("BERT forward + embed_backward, every gradient (the same)", "torch")
def _bert_backward(env):
    t, np, ctx = env.mods["torch"], env.np, env.ctx
    data = bert_data(env)
    m, d_ids, kw = clembed_bert(env, data)
    fwd, (word, pos, typ, norm) = torch_bert(env, data)
    gout = (env.rng.random((BERT_B * BERT_S, BERT_D), np.float32) * 2 - 1).astype(np.float32)
    d_g = ctx.matrix(gout)
    out = ctx.empty(BERT_B * BERT_S, BERT_D)
    grads = {k: ctx.empty(*shape) for k, shape in (("table", (BERT_V, BERT_D)), ("position_table", (BERT_S, BERT_D)),
                                                   ("segment_table", (2, BERT_D)), ("norm_weight", (1, BERT_D)),
                                                   ("norm_bias", (1, BERT_D)))}
    t_g = t.from_numpy(gout).view(BERT_B, BERT_S, BERT_D)

    def ours():  # the forward, then every gradient (the backward recomputes the rows and the norm's statistics)
        ctx.embed(m, d_ids, out=out, **kw)
        ctx.embed_backward(d_g, m, d_ids, grads=grads, **kw)
        ctx.finish()

    def torch_run():  # the forward keeping autograd's graph, then the backward through it
        fwd().backward(t_g)

    ours()
    torch_run()
    texts = [agree(grads[k].numpy().reshape(-1), p.grad.reshape(-1).numpy())
             for k, p in (("table", word.weight), ("position_table", pos.weight), ("segment_table", typ.weight),
                          ("norm_weight", norm.weight), ("norm_bias", norm.bias))]
    return Row(None, ours, {"PyTorch autograd": torch_run}, {"PyTorch autograd": worst(texts)},
               "a training step's forward and backward on both sides, every gradient accumulated; the first "
               "step's gradients compared (the worst of the five)", tol=1e-5)


def _gguf_row(name):
    @row("lookup %s, f32 out (R x %d: %d MiB of blocks, %d ids)" % (name, GGUF_D, GGUF_BYTES >> 20, GGUF_IDS), "gguf")
    def _gguf(env):
        np, ctx, gguf = env.np, env.ctx, env.mods["gguf"]
        qt = gguf.GGMLQuantizationType[name.upper()]
        vals, nbytes = gguf.GGML_QUANT_SIZES[qt]
        rb = GGUF_D // vals * nbytes
        rows = -(-GGUF_BYTES // rb)

        def make():
            # random blocks, bit 6 of every byte clear (every f16 scale finite, |d| < 2; signs and high
            # bits set as often as not), 8192 rows repeated; mxfp4's e8m0 exponents near 2^0
            blk = env.rng.integers(0, 256, (8192, rb), dtype=np.uint8) & 0xBF
            if name == "mxfp4":
                blk.reshape(8192, -1, nbytes)[:, :, 0] = env.rng.integers(120, 135, (8192, GGUF_D // vals))
            raw = np.empty((rows, rb), np.uint8)
            for r in range(0, rows, 8192):
                k = min(8192, rows - r)
                raw[r:r + k] = blk[:k]
            return raw
        raw = env.keep(("big gguf", name), make, big=True)
        m = ctx.matrix(raw, dtype=name)
        ids = env.ids(GGUF_IDS, rows, name)
        d_ids = ctx.ids(ids)
        out = ctx.empty(GGUF_IDS, GGUF_D)
        res = {}

        def ours():
            ctx.lookup(m, d_ids, out=out)
            ctx.finish()

        def peer():
            res["o"] = gguf.quants.dequantize(raw[ids], qt)

        ours()
        peer()
        got = out.numpy()
        env.data[("big gguf m", name)] = m  # freed with the blocks
        peers = {"gguf.quants dequantize": peer}
        agreement = {"gguf.quants dequantize": agree(got, res["o"])}
        skipped = {}
        if "libggml" in env.mods:
            g = GgmlGetRows(raw, qt, GGUF_D, ids, env.args.threads)
            g()
            peers["ggml get_rows"] = g
            agreement["ggml get_rows"] = agree(got, g.result())
        else:
            skipped["ggml get_rows"] = "not installed: libggml-python"
        return Row(None, ours, peers, agreement, skipped=skipped, note=
                   "ggml's CPU get_rows (libggml-python's build of ggml); gguf.quants: the rows' blocks gathered "
                   "with NumPy, then llama.cpp's Python dequantizer (one thread)")


class GgmlGetRows:
    """ggml's CPU get_rows (llama.cpp's token-table lookup: ggml_get_rows of the table and the
    token ids, dequantized into F32 rows), from the prebuilt libggml-base / libggml-cpu of PyPI's
    libggml-python, through ctypes: one ggml context holding the table's blocks, the ids and
    the output, and a graph of the one node, computed with `threads` threads."""

    GGML_TYPE_I32 = 26

    def __init__(self, raw, qtype, cols, ids, threads):
        import ctypes
        import libggml
        from ctypes import c_bool, c_int, c_int64, c_size_t, c_void_p
        d = os.path.join(os.path.dirname(libggml.__file__), "lib64")
        b = ctypes.CDLL(os.path.join(d, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
        c = ctypes.CDLL(os.path.join(d, "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)

        class Params(ctypes.Structure):
            _fields_ = [("mem_size", c_size_t), ("mem_buffer", c_void_p), ("no_alloc", c_bool)]
        for fn, res, args in (("ggml_init", c_void_p, [Params]), ("ggml_free", None, [c_void_p]),
                              ("ggml_new_tensor_1d", c_void_p, [c_void_p, c_int, c_int64]),
                              ("ggml_new_tensor_2d", c_void_p, [c_void_p, c_int, c_int64, c_int64]),
                              ("ggml_get_rows", c_void_p, [c_void_p, c_void_p, c_void_p]),
                              ("ggml_new_graph", c_void_p, [c_void_p]),
                              ("ggml_build_forward_expand", None, [c_void_p, c_void_p]),
                              ("ggml_get_data", c_void_p, [c_void_p]), ("ggml_tensor_overhead", c_size_t, []),
                              ("ggml_graph_overhead", c_size_t, [])):
            getattr(b, fn).restype, getattr(b, fn).argtypes = res, args
        c.ggml_graph_compute_with_ctx.restype = c_int
        c.ggml_graph_compute_with_ctx.argtypes = [c_void_p, c_void_p, c_int]
        c.ggml_cpu_init()
        n = len(ids)
        mem = raw.nbytes + n * 4 + n * cols * 4 + 4 * b.ggml_tensor_overhead() + b.ggml_graph_overhead() + (64 << 20)
        self.b, self.c, self.threads = b, c, threads
        self.ctx = b.ggml_init(Params(mem, None, False))
        if not self.ctx:
            raise MemoryError("ggml_init of %d bytes failed" % mem)
        t = b.ggml_new_tensor_2d(self.ctx, int(qtype), cols, raw.shape[0])
        ctypes.memmove(b.ggml_get_data(t), raw.ctypes.data, raw.nbytes)
        i = b.ggml_new_tensor_1d(self.ctx, self.GGML_TYPE_I32, n)
        ids32 = ids.astype("int32")
        ctypes.memmove(b.ggml_get_data(i), ids32.ctypes.data, ids32.nbytes)
        self.out = b.ggml_get_rows(self.ctx, t, i)
        self.graph = b.ggml_new_graph(self.ctx)
        b.ggml_build_forward_expand(self.graph, self.out)
        self.shape = (n, cols)

    def __call__(self):
        if self.c.ggml_graph_compute_with_ctx(self.ctx, self.graph, self.threads) != 0:
            raise RuntimeError("ggml_graph_compute_with_ctx failed")

    def result(self):
        import ctypes
        import numpy as np
        n = self.shape[0] * self.shape[1]
        return np.ctypeslib.as_array((ctypes.c_float * n).from_address(self.b.ggml_get_data(self.out))) \
            .reshape(self.shape).copy()

    def __del__(self):
        if getattr(self, "ctx", None):
            self.b.ggml_free(self.ctx)
            self.ctx = None


def register_gguf():
    try:
        import_clembed()
        from clembed._args import BLOCKS, ROWWISE
        names = [n for n, (vals, _) in BLOCKS.items() if vals > 1 and n not in ROWWISE]
    except Exception:  # noqa: BLE001 (no library: the harness says so when it starts)
        names = []
    for n in names:
        _gguf_row(n)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)  # (--small is read before the parser)
    ap.add_argument("--install", action="store_true", help="install the pinned peers into --venv and stop")
    ap.add_argument("--venv", default=default_venv(), help="the peers' venv (default: %(default)s)")
    ap.add_argument("--no-venv", action="store_true", help="run with this Python even when --venv exists")
    ap.add_argument("--only", action="append", default=None,
                    help="only the rows whose name contains this (repeat for several)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="the peers' threads (default: this process's CPUs, %(default)s)")
    ap.add_argument("--sweep-mib", type=int, default=640, help="the buffer written before each run")
    ap.add_argument("--device", default=None, help="clembed's OpenCL device (clembed devices)")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the figures to FILE ('-': stdout)")
    ap.add_argument("--list", action="store_true", help="name the rows and stop")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown (docs/peers.md's)")
    ap.add_argument("--from-json", default=None, metavar="FILE",
                    help="print the table of an earlier run's --json file (no run)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a result disagrees with a peer's beyond the row's tolerance")
    ap.add_argument("--small", action="store_true",
                    help="small shapes (every table in the caches): a functional run, not a comparison")
    args = ap.parse_args()
    for name, value in (("--rounds", args.rounds), ("--reps", args.reps), ("--threads", args.threads),
                        ("--sweep-mib", args.sweep_mib)):
        if value < 1:
            ap.error("%s %d: must be 1 or more" % (name, value))
    if args.install:
        install(args.venv)
        return 0
    if args.from_json:
        with open(args.from_json) as f:
            info = json.load(f)
        (print_markdown if args.markdown else print_table)(info)
        return 1 if disagreements(info) and args.check else 0
    vpy = os.path.join(args.venv, "bin", "python")
    if (not args.no_venv and os.path.exists(vpy) and os.path.realpath(sys.prefix) != os.path.realpath(args.venv)
            and not os.environ.get("CLEMBED_PEERS_VENV")):
        os.environ["CLEMBED_PEERS_VENV"] = args.venv  # (once: never again from the venv's Python)
        os.execv(vpy, [vpy, os.path.abspath(__file__)] + sys.argv[1:])
    register_gguf()
    chosen = [r for r in ROWS if not args.only or any(o in r[0] for o in args.only)]
    if args.list:
        for name, needs, _ in ROWS:
            print("%-80s %s" % (name, ", ".join(needs)))
        return 0
    if not chosen:
        print("no row's name contains %s (--list names them)" % " or ".join(args.only), file=sys.stderr)
        return 2
    env = Env(args)
    info = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
            "cpus": os.cpu_count(), "device": env.ctx.device_name, "tuning": env.ctx.tuning, "threads": args.threads,
            "rounds": args.rounds, "reps": args.reps, "sweep_mib": args.sweep_mib, "versions": env.versions,
            "command": " ".join(["tools/compare/peers.py"] + sys.argv[1:]), "rows": []}
    print("clembed %s on %s; %s; peers with %d threads; %s" % (
        env.versions["clembed"], env.ctx.device_name, info["machine"], args.threads,
        ", ".join("%s %s" % kv for kv in env.versions.items() if kv[0] != "clembed")))
    results = {}
    for rnd in range(args.rounds):
        for name, needs, build in chosen:
            missing = env.have(*needs)
            if missing:
                results.setdefault(name, {"skipped": "not installed: %s" % ", ".join(missing)})
                continue
            r = build(env)
            times = time_row(env, r, args.reps)
            e = results.setdefault(name, {"agreement": r.agreement, "note": r.note, "tol": r.tol, "rounds": [],
                                          "skipped_peers": r.skipped})
            med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
            med["clembed"] = 1e3 * statistics.median(x for k, v in times.items() if isinstance(k, tuple) for x in v)
            e["rounds"].append(med)
            print("  round %d: %s: clembed %.2f ms, %s" % (
                rnd + 1, name, med["clembed"],
                ", ".join("%s %.2f ms" % (k, v) for k, v in med.items() if isinstance(k, str) and k != "clembed")),
                file=sys.stderr)
            del r
    for name, needs, _ in chosen:
        e = results[name]
        row_out = {"row": name}
        if "skipped" in e:
            row_out["skipped"] = e["skipped"]
        else:
            row_out["clembed_ms"] = statistics.median(rd["clembed"] for rd in e["rounds"])
            row_out["peers"] = {}
            for label in e["agreement"]:
                row_out["peers"][label] = {
                    "ms": statistics.median(rd[label] for rd in e["rounds"]),
                    "ratio": statistics.median(rd[label] / rd[("clembed", label)] for rd in e["rounds"]),
                    "agreement": e["agreement"][label], "within_tolerance": within(e["agreement"][label], e["tol"])}
            for label, why in e["skipped_peers"].items():
                row_out["peers"][label] = {"skipped": why}
            row_out["tolerance"] = "reported, not checked" if e["tol"] is None else e["tol"] or "same bits"
            if e["note"]:
                row_out["note"] = e["note"]
        info["rows"].append(row_out)
    (print_markdown if args.markdown else print_table)(info, sys.stderr if args.json == "-" else sys.stdout)
    if args.json:
        text = json.dumps(info, indent=1)
        if args.json == "-":
            print(text)
        else:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                f.write(text + "\n")
            os.replace(tmp, args.json)
    return 1 if disagreements(info) and args.check else 0


def disagreements(info):
    """The results that differ from a peer's beyond the row's tolerance, each said on stderr."""
    bad = ["%s against %s: %s (tolerance: %s)" % (r["row"], label, p["agreement"], r["tolerance"])
           for r in info["rows"] if "peers" in r for label, p in r["peers"].items()
           if "skipped" not in p and not p["within_tolerance"]]
    for b in bad:
        print("disagrees: " + b, file=sys.stderr)
    return bad


def machine():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return "%s, %d CPUs" % (line.split(":", 1)[1].strip(), os.cpu_count())
    except OSError:
        pass
    return platform.machine()


def print_markdown(info, out=sys.stdout):
    say = functools.partial(print, file=out)
    say("| row | clembed ms | peer | peer ms | peer / clembed | results |")
    say("|---|---:|---|---:|---:|---|")
    for r in info["rows"]:
        if "skipped" in r:
            say("| %s | - | (%s) | | | |" % (r["row"], r["skipped"]))
            continue
        first = True
        for label, p in r["peers"].items():
            head = (r["row"], "%.2f" % r["clembed_ms"]) if first else ("", "")
            if "skipped" in p:
                say("| %s | %s | %s | - | - | (%s) |" % (head + (label, p["skipped"])))
            else:
                say("| %s | %s | %s | %.2f | %.2fx | %s |" % (head + (label, p["ms"], p["ratio"], p["agreement"])))
            first = False


def print_table(info, out=sys.stdout):
    say = functools.partial(print, file=out)
    say("%-72s %10s  %-28s %10s %8s  %s" % ("row", "clembed ms", "peer", "peer ms", "ratio", "agreement"))
    for r in info["rows"]:
        if "skipped" in r:
            say("%-72s %10s  (%s)" % (r["row"], "-", r["skipped"]))
            continue
        first = True
        for label, p in r["peers"].items():
            head = (r["row"], "%.2f" % r["clembed_ms"]) if first else ("", "")
            if "skipped" in p:
                say("%-72s %10s  %-28s %10s %8s  (%s)" % (head + (label, "-", "-", p["skipped"])))
            else:
                say("%-72s %10s  %-28s %10.2f %7.2fx  %s" % (head + (label, p["ms"], p["ratio"], p["agreement"])))
            first = False
    say("(ratio: the peer's time over clembed's in the pairs with that peer, median over %d rounds of %d pairs; %s)"
        % (info["rounds"], info["reps"], info["date"]))


if __name__ == "__main__":
    sys.exit(main())
