"""Training helpers: clembed.Optimizer (sparse steps), clembed.Embedding and clembed.EmbeddingBag
(nn.Embedding- and nn.EmbeddingBag-like layers on a clembed context) and clembed.manual_seed (the generator that
draws the seeds of layers made without one, as PyTorch's global RNG does)."""
import json
import os
import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._lib import OPTIMIZERS
from ._core import Context, Matrix, Ids, default_context, inspect, WaitFor
from ._errors import api, invalid, wrong_type, state, require
from ._args import (FLOAT_DTYPES, choice, count, dtype_code, host_values, index_array,
                    integer, real, seed as _seed)

KINDS = OPTIMIZERS
FLOAT_NAMES = ("f32", "f16", "bf16")   # the dtypes a layer trains (Matrix.dtype)
_EPS = {"sgd": 0.0, "adagrad": 1e-10, "rowwise_adagrad": 1e-8, "adam": 1e-8}

# ------------------------------------------------------------------ seeds

_generator: Optional[np.random.Generator] = None


def manual_seed(seed: int) -> None:
    """Seeds the generator that draws the Philox seed of every layer made with seed=None
    (Embedding, and the layers that follow its convention), as torch.manual_seed does:
    after manual_seed(s), the same sequence of layers starts from the same weights. Without
    it, that generator starts from fresh OS entropy, so two layers differ."""
    global _generator
    _generator = np.random.default_rng(_seed(seed))


def draw_seed(seed: Optional[int], argument: str = "seed") -> int:
    """A layer's Philox seed: `seed` itself (an int, taken modulo 2^64), or, for None, a
    fresh 64-bit draw from the generator of manual_seed."""
    global _generator
    if seed is not None:
        return _seed(seed, argument)
    if _generator is None:
        _generator = np.random.default_rng()
    return int(_generator.integers(0, 2 ** 64, dtype=np.uint64))


# ------------------------------------------------------------------ optimizer

class Optimizer:
    """A sparse optimizer step over the rows that occur in ids (clembed_optimizer_step).

    kind: 'sgd', 'adagrad', 'rowwise_adagrad' or 'adam'. The optimizer owns its state
    matrices (F32, made zero on first use, one set per table) and counts the steps per
    table (Adam's t, and stochastic rounding's step). Every kind runs clembed_optimizer_step.
    stochastic_rounding=True writes an 'f16' or 'bf16' table back with stochastic rounding
    (up with the probability of the fraction rounding down would lose; 'f32' tables ignore
    it), from the random bits Philox(seed, step, row, column): the same bits on every
    device, a fresh draw at every step.
    """

    @api("Optimizer")
    def __init__(self, ctx: Optional[Context], kind: str, lr: float, eps: Optional[float] = None,
                 betas: Tuple[float, float] = (0.9, 0.999), weight_decay: float = 0.0, *,
                 stochastic_rounding: bool = False, seed: int = 0) -> None:
        self.ctx = ctx if ctx is not None else default_context()
        choice(KINDS, kind, "kind")
        self.kind = kind.lower()
        self.lr = real(lr, "lr")
        self.eps = _EPS[self.kind] if eps is None else real(eps, "eps")
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise wrong_type("betas", "must be a pair (beta1, beta2), not %r" % (betas,))
        self.betas = (real(betas[0], "betas"), real(betas[1], "betas"))
        self.weight_decay = real(weight_decay, "weight_decay")
        if not isinstance(stochastic_rounding, (bool, int)) or stochastic_rounding not in (0, 1):
            raise wrong_type("stochastic_rounding", "must be True or False, not %r" % (stochastic_rounding,))
        self.stochastic_rounding = bool(stochastic_rounding)
        self.seed = _seed(seed)
        self._state: "weakref.WeakKeyDictionary[Matrix, List[Any]]" = weakref.WeakKeyDictionary()

    def state(self, table: Matrix) -> Tuple[Optional[Matrix], Optional[Matrix], int]:
        """(state, state2, t) of a table: the Matrix objects (or None) and the steps taken."""
        s = self._state.get(table)
        return (s[0], s[1], s[2]) if s is not None else (None, None, 0)

    def _states(self, table: Matrix) -> List[Any]:
        s = self._state.get(table)
        if s is None:
            st = st2 = None
            if self.kind == "adagrad":
                st = self.ctx.empty(table.rows, table.cols)
            elif self.kind == "rowwise_adagrad":
                st = self.ctx.empty(table.rows, 1)
            elif self.kind == "adam":
                st = self.ctx.empty(table.rows, table.cols)
                st2 = self.ctx.empty(table.rows, table.cols)
            s = self._state[table] = [st, st2, 0]
        return s

    def tables(self) -> List[Matrix]:
        """The tables this optimizer holds state for, in the order it first stepped them."""
        return list(self._state.keys())

    def state_dict(self, tables: Optional[Sequence[Matrix]] = None) -> Dict[str, Any]:
        """The optimizer's settings and its state of each table (default: every table it
        holds state for, in the order of tables()), as torch.optim's state_dict lays them out:
        {'kind', 'lr', 'eps', 'betas', 'weight_decay', 'stochastic_rounding', 'seed',
        'state': [{'momentum1': ndarray or
        None, 'momentum2': ndarray or None, 'step': int}, ...]}, entry i for tables[i]; the
        arrays are float32 copies (exact)."""
        tables = self.tables() if tables is None else list(tables)
        state = []
        for t in tables:
            if not isinstance(t, Matrix):
                raise wrong_type("tables", "must be clembed.Matrix objects, not %s" % type(t).__name__)
            st, st2, n = self.state(t)
            state.append({"momentum1": st.numpy(None) if st is not None else None,
                          "momentum2": st2.numpy(None) if st2 is not None else None, "step": n})
        return {"kind": self.kind, "lr": self.lr, "eps": self.eps, "betas": self.betas,
                "weight_decay": self.weight_decay, "stochastic_rounding": self.stochastic_rounding,
                "seed": self.seed, "state": state}

    @api("Optimizer.load_state_dict", "clembed_matrix_write")
    def load_state_dict(self, state_dict: Dict[str, Any], tables: Optional[Sequence[Matrix]] = None) -> None:
        """Restores what state_dict() gave: the settings (lr, eps, betas, weight_decay,
        stochastic_rounding, seed; the kind must be this optimizer's) and state entry i into tables[i] (default: the tables
        this optimizer already holds state for, in the order of tables(); the counts must
        agree), its state matrices made if it had none. Every entry is checked (shapes,
        kind) before anything is written."""
        if not isinstance(state_dict, dict) or "state" not in state_dict:
            raise wrong_type("state_dict", "must be a dict from Optimizer.state_dict()")
        if state_dict.get("kind") != self.kind:
            raise invalid("state_dict", "is of a %r optimizer, this one is %r" % (state_dict.get("kind"), self.kind))
        tables = self.tables() if tables is None else list(tables)
        entries = list(state_dict["state"])
        if len(entries) != len(tables):
            raise invalid("state_dict", "holds %d tables' states for %d tables" % (len(entries), len(tables)))
        shapes = {"adagrad": (True, False), "rowwise_adagrad": (True, False), "adam": (True, True),
                  "sgd": (False, False)}[self.kind]
        arrays = []
        for i, (t, e) in enumerate(zip(tables, entries)):
            if not isinstance(t, Matrix):
                raise wrong_type("tables", "must be clembed.Matrix objects, not %s" % type(t).__name__)
            cols = 1 if self.kind == "rowwise_adagrad" else t.cols
            pair = []
            for key, wanted in zip(("momentum1", "momentum2"), shapes):
                a = e.get(key)
                if wanted and a is not None:
                    a = np.asarray(a, dtype=np.float32)
                    if a.shape != (t.rows, cols):
                        raise invalid("state_dict", "state[%d][%r] has shape %s, the table needs %s"
                                      % (i, key, a.shape, (t.rows, cols)))
                elif a is not None:
                    raise invalid("state_dict", "state[%d] has %r, which a %r optimizer has not" % (i, key, self.kind))
                pair.append(a)
            arrays.append((t, pair, int(e.get("step", 0))))
        b = state_dict.get("betas", self.betas)
        if not isinstance(b, (tuple, list)) or len(b) != 2:
            raise wrong_type("state_dict", "['betas'] must be a pair, not %r" % (b,))
        settings = dict(lr=real(state_dict.get("lr", self.lr), "lr"), eps=real(state_dict.get("eps", self.eps), "eps"),
                        betas=(real(b[0], "betas"), real(b[1], "betas")),
                        weight_decay=real(state_dict.get("weight_decay", self.weight_decay), "weight_decay"),
                        stochastic_rounding=bool(state_dict.get("stochastic_rounding", self.stochastic_rounding)),
                        seed=_seed(state_dict.get("seed", self.seed)))
        for k, v in settings.items():   # every setting checked above, before any is set
            setattr(self, k, v)
        for t, pair, n in arrays:
            s = self._states(t)
            for k in range(2):
                if s[k] is not None:
                    if pair[k] is not None:
                        s[k].write(pair[k])
                    else:
                        s[k].write(np.zeros((s[k].rows, s[k].cols), np.float32))
            s[2] = n

    def _settings(self, s: List[Any], lr: Optional[float]) -> Dict[str, Any]:
        """The optimizer keywords of Context.optimizer_step for the next step of the table
        whose state list is s ([state, state2, t])."""
        return dict(kind=self.kind, lr=self.lr if lr is None else real(lr, "lr"), state=s[0], state2=s[1],
                    step=s[2] + 1, eps=self.eps, betas=self.betas, weight_decay=self.weight_decay,
                    stochastic_rounding=self.stochastic_rounding, rounding_seed=self.seed)

    @api("Optimizer.bag_step", "clembed_bag_optimizer_step")
    def bag_step(self, table: Matrix, grad: Any, ids: Any, offsets: Any = None, *, lr: Optional[float] = None,
                 mode: str = "mean", per_sample_weights: Any = None, padding_idx: Optional[int] = None,
                 include_last_offset: bool = False, on_bad_id: str = "check", max_rows: Any = None,
                 wait_for: WaitFor = None) -> Matrix:
        """One fused step of table (in place) with the gradient grad (bags x cols) of the
        output of Context.embedding_bag on these bags (the same arguments; max_rows: the
        forward's, for mode 'max'): each row is folded as Context.bag_backward folds it, then
        stepped; only the rows with a contribution are touched. Returns table."""
        require("clembed_bag_optimizer_step", "Optimizer(%r).bag_step" % self.kind)
        if not isinstance(table, Matrix):
            raise wrong_type("table", "must be a clembed.Matrix (stepped in place), not %s" % type(table).__name__)
        s = self._states(table)
        self.ctx.bag_optimizer_step(table, grad, ids, offsets, mode=mode, per_sample_weights=per_sample_weights,
                                    padding_idx=padding_idx, include_last_offset=include_last_offset,
                                    on_bad_id=on_bad_id, max_rows=max_rows, wait_for=wait_for,
                                    **self._settings(s, lr))
        s[2] += 1
        return table

    @api("Optimizer.bags_step", "clembed_bags_optimizer_step")
    def bags_step(self, features: Sequence[Dict[str, Any]], grad: Any, *, lr: Optional[float] = None,
                  wait_for: WaitFor = None) -> None:
        """The fused steps of every feature's table with this optimizer (each table its own
        state), from grad (bags x the features' cols together, as Context.embedding_bags
        returns it): features as Context.embedding_bags takes them, plus 'max_rows' for a
        'max' feature. A table shared by several features (the same Matrix) folds their
        contributions in feature order, then id order, and is stepped once."""
        require("clembed_bags_optimizer_step", "Optimizer(%r).bags_step" % self.kind)
        if isinstance(features, dict) or not isinstance(features, (list, tuple)):
            raise wrong_type("features", "must be a list of dicts (one per feature), not %s" % type(features).__name__)
        for f, d in enumerate(features):
            if not isinstance(d, dict) or not isinstance(d.get("table"), Matrix):
                raise wrong_type("features", "features[%d]['table'] must be a clembed.Matrix (stepped in place)" % f)
        seen: Dict[int, Tuple[List[Any], Dict[str, Any]]] = {}   # a table's states and settings, once
        for d in features:
            table = d["table"]
            if id(table) not in seen:
                s = self._states(table)
                seen[id(table)] = (s, self._settings(s, lr))
        self.ctx.bags_optimizer_step(features, grad, [seen[id(d["table"])][1] for d in features], wait_for=wait_for)
        for s, _ in seen.values():
            s[2] += 1

    @api("Optimizer.step", "clembed_optimizer_step")
    def step(self, table: Matrix, grad: Any, ids: Any, *, lr: Optional[float] = None, wait_for: WaitFor = None,
             **backward_options: Any) -> Matrix:
        """One fused step of table (in place) with the gradient grad (ids.shape + (cols,))
        of the tokens ids. backward_options as Context.backward (scale, padding_idx,
        scale_grad_by_freq, on_bad_id, seq_len, offset, sequence_offsets, position_grad,
        dropout, seed). Returns table."""
        lr = self.lr if lr is None else real(lr, "lr")
        require("clembed_optimizer_step", "Optimizer(%r).step" % self.kind)
        if not isinstance(table, Matrix):
            raise wrong_type("table", "must be a clembed.Matrix (stepped in place), not %s" % type(table).__name__)
        opts = ("scale", "padding_idx", "scale_grad_by_freq", "on_bad_id", "seq_len", "offset", "sequence_offsets",
                "position_grad", "dropout", "seed")
        unknown = sorted(set(backward_options) - set(opts))
        if unknown:
            raise wrong_type(unknown[0], "is not an option of Optimizer.step (%s)" % ", ".join(opts))
        s = self._states(table)
        self.ctx.optimizer_step(table, grad, ids, wait_for=wait_for, **self._settings(s, lr), **backward_options)
        s[2] += 1
        return table


def _optimizer(ctx: Context, optimizer: Any) -> Optional[Optimizer]:
    """A layer's optimizer argument: an Optimizer, a kind name (its default rate), or None."""
    if isinstance(optimizer, str):
        return Optimizer(ctx, optimizer, 0.01 if optimizer.lower() != "sgd" else 0.1)
    if optimizer is not None and not isinstance(optimizer, Optimizer):
        raise wrong_type("optimizer", "must be a clembed.Optimizer, a kind name or None, not %s"
                         % type(optimizer).__name__)
    return optimizer


def _padding_row(num_embeddings: int, padding_idx: Any) -> Optional[int]:
    """padding_idx as a row (negative counts from the end, as in nn.Embedding), or None."""
    if padding_idx is None:
        return None
    p = integer(padding_idx, "padding_idx", -num_embeddings, num_embeddings)
    return p + num_embeddings if p < 0 else p


def _layer_weight(ctx: Context, rows: int, cols: int, code: int, seed: int, padding_idx: Optional[int]) -> Matrix:
    """A layer's weight: N(0, 1) from Philox(seed), the padding row zero."""
    w = ctx.init(ctx.empty(rows, cols, code), "normal", mean=0.0, std=1.0, seed=seed)
    if padding_idx is not None:
        w.rows_view(padding_idx, 1).write(np.zeros(cols, np.float32))
    return w


# ------------------------------------------------------------------ embedding

class LoadResult(NamedTuple):
    """What Embedding.load_state_dict did not use (as PyTorch's _IncompatibleKeys)."""
    missing_keys: List[str]
    unexpected_keys: List[str]


class Embedding:
    """A token-embedding layer in the manner of torch.nn.Embedding, on a clembed context.

    weight: a (num_embeddings x embedding_dim) Matrix of dtype 'f32', 'f16' or 'bf16',
    drawn from N(0, 1) with Philox(seed) (the padding row zero). An int seed (0 by
    default) gives the same weights on every device and run, so two layers made with the
    default seed start equal; seed=None draws a fresh seed from clembed's generator
    (clembed.manual_seed makes that reproducible), so layers made alike differ, as in
    PyTorch. .seed is the seed used.
    forward(ids) -> ndarray of ids.shape + (dim,) (float16 for an 'f16' weight, else
    float32): scale * weight[ids] (+ positions: None, 'sinusoid' or a learned (positions x
    dim) array/Matrix, not trained). padding_idx as torch.nn.Embedding's: the padding row
    is read as stored (zero unless it was changed) and never gets a gradient (Context.embed's
    padding_keeps_row). backward(grad) keeps the output gradient of the last
    forward (several backward calls add up); step(lr) applies it with the optimizer (an
    Optimizer, a kind name, or None for plain SGD with lr) and clears it.
    max_norm (as nn.Embedding): each forward first renorms, in place, the rows its ids
    read whose norm_type-norm exceeds max_norm (Context.renorm).
    """

    @api("Embedding")
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 scale: Union[float, str] = 1.0, positions: Any = None, ctx: Optional[Context] = None,
                 seed: Optional[int] = 0, optimizer: Any = None, *, dtype: Any = "f32",
                 max_norm: Optional[float] = None, norm_type: float = 2.0) -> None:
        self._setup(num_embeddings, embedding_dim, padding_idx, scale, positions, ctx, optimizer, max_norm,
                    norm_type)
        code = dtype_code(dtype, "dtype", FLOAT_DTYPES)
        self.seed: Optional[int] = draw_seed(seed)
        self.freeze = False
        self.weight = _layer_weight(self.ctx, self.num_embeddings, self.embedding_dim, code, self.seed,
                                    self.padding_idx)

    def _setup(self, num_embeddings: Any, embedding_dim: Any, padding_idx: Any, scale: Any, positions: Any,
               ctx: Optional[Context], optimizer: Any, max_norm: Any = None, norm_type: Any = 2.0) -> None:
        self.ctx = ctx if ctx is not None else default_context()
        self.num_embeddings = count(num_embeddings, "num_embeddings")
        self.embedding_dim = count(embedding_dim, "embedding_dim")
        self.padding_idx = _padding_row(self.num_embeddings, padding_idx)
        self.max_norm = None if max_norm is None else real(max_norm, "max_norm")
        self.norm_type = real(norm_type, "norm_type")
        if isinstance(scale, str):
            if scale.lower() != "sqrt":
                raise invalid("scale", "is a number or 'sqrt', not %r" % scale)
        else:
            scale = real(scale, "scale")
        self.scale = scale
        if positions is not None and not isinstance(positions, (str, Matrix)):
            positions = self.ctx.matrix(host_values(positions, "positions")[0])
        self.positions = positions
        self.optimizer = _optimizer(self.ctx, optimizer)
        self._ids: List[np.ndarray] = []
        self._grads: List[np.ndarray] = []
        self._last_ids: Optional[np.ndarray] = None

    @classmethod
    @api("Embedding.from_pretrained")
    def from_pretrained(cls, embeddings: Any, freeze: bool = True, padding_idx: Optional[int] = None, *,
                        dtype: Any = None, scale: Union[float, str] = 1.0, positions: Any = None,
                        ctx: Optional[Context] = None, optimizer: Any = None, max_norm: Optional[float] = None,
                        norm_type: float = 2.0) -> "Embedding":
        """A layer whose weight is `embeddings`, as torch.nn.Embedding.from_pretrained: a 2-D
        NumPy array (uploaded as Context.matrix does: dtype None keeps float32/float16, a
        float64 or integer array needs dtype) or a clembed.Matrix (used as the weight
        itself, not copied). The padding row is kept as given and read as stored, as
        PyTorch's is (it gets no gradient). freeze=True (the default):
        backward and step refuse (a table of any dtype, block-quantized ones included);
        freeze=False trains it (f32, f16 or bf16)."""
        self = cls.__new__(cls)
        if isinstance(embeddings, Matrix):
            if dtype is not None:
                raise invalid("dtype", "is the Matrix's own (%s) when embeddings is a Matrix" % embeddings.dtype)
            if ctx is not None and ctx is not embeddings.ctx:
                raise invalid("ctx", "differs from the context of the embeddings Matrix")
            ctx = embeddings.ctx
            weight = embeddings
        else:
            ctx = ctx if ctx is not None else default_context()
            weight = ctx.matrix(embeddings, dtype)
        self._setup(weight.rows, weight.cols, padding_idx, scale, positions, ctx, optimizer, max_norm, norm_type)
        self.seed = None
        self.freeze = bool(freeze)
        if not self.freeze and weight.dtype not in FLOAT_NAMES:
            raise invalid("freeze", "False needs an f32, f16 or bf16 weight to train, not %s" % weight.dtype)
        self.weight = weight
        return self

    # --- facts
    @property
    def dtype(self) -> str:
        """The weight's device dtype ('f32', 'f16', 'bf16', or a block type when frozen)."""
        return self.weight.dtype

    @property
    def _out_dtype(self) -> str:
        return self.weight.dtype if self.weight.dtype in ("f16", "bf16") else "f32"

    def __repr__(self) -> str:
        return "clembed.Embedding(%d, %d, padding_idx=%r, dtype=%r)" % (
            self.num_embeddings, self.embedding_dim, self.padding_idx, self.dtype)

    # --- state
    def state_dict(self) -> Dict[str, np.ndarray]:
        """{'weight': a copy of the weight}: float32 (float16 for an 'f16' weight; 'bf16'
        values are exact in float32), or uint8 blocks for a block-quantized weight (so
        load_state_dict restores it bit for bit)."""
        if self.weight.dtype not in FLOAT_NAMES:
            return {"weight": self.weight.raw()}
        return {"weight": self.weight.numpy(None)}

    @api("Embedding.load_state_dict", "clembed_matrix_write")
    def load_state_dict(self, state_dict: Dict[str, Any], strict: bool = True) -> LoadResult:
        """Writes state_dict['weight'] (num_embeddings x embedding_dim values, converted to
        the weight's dtype as Matrix.write does; uint8 blocks for a block-quantized weight)
        into the weight, in place. strict: a missing 'weight' or another key is an error.
        Returns (missing_keys, unexpected_keys). Recorded gradients are kept."""
        if not isinstance(state_dict, dict):
            raise wrong_type("state_dict", "must be a dict, not %s" % type(state_dict).__name__)
        missing_keys = [] if "weight" in state_dict else ["weight"]
        unexpected = sorted(k for k in state_dict if k != "weight")
        if strict and (missing_keys or unexpected):
            raise invalid("state_dict", "missing keys %s, unexpected keys %s" % (missing_keys, unexpected))
        if "weight" in state_dict:
            w = state_dict["weight"]
            a = w.numpy(None) if isinstance(w, Matrix) else np.asarray(w)
            blocks = a.dtype == np.uint8 and self.dtype not in ("f32", "f16", "bf16")
            want = (self.num_embeddings, a.shape[-1] if blocks else self.embedding_dim)
            if a.shape != want or (blocks and a.shape != self.weight.raw().shape):
                raise invalid("state_dict", "['weight'] has shape %s, the layer's weight %s"
                              % (a.shape, (self.num_embeddings, self.embedding_dim)))
            self.weight.write(a)
        return LoadResult(missing_keys, unexpected)

    # --- forward and training
    @api("Embedding.forward", "clembed_embed")
    def forward(self, ids: Any) -> np.ndarray:
        """scale * weight[ids] (+ positions), an ndarray of ids.shape + (dim,); with
        max_norm, the rows ids read are renormed first (in place)."""
        ids = np.asarray(ids)
        if self.max_norm is not None:
            self.ctx.renorm(self.weight, ids, self.max_norm, self.norm_type)
        out = self.ctx.embed(self.weight, ids, scale=self.scale, positions=self.positions,
                             padding_idx=self.padding_idx, padding_keeps_row=True, out_dtype=self._out_dtype)
        self._last_ids = ids
        return out.numpy(None)

    __call__ = forward

    @api("Embedding.backward")
    def backward(self, grad: Any) -> None:
        """Records d(loss)/d(output) of the last forward (shape ids.shape + (dim,), float32
        or float16)."""
        if self.freeze:
            raise state("the weight is frozen (from_pretrained(..., freeze=True)): no gradient is kept")
        if self._last_ids is None:
            raise state("backward before forward")
        g, _, _ = host_values(grad, "grad")
        if g.shape != self._last_ids.shape + (self.embedding_dim,):
            raise invalid("grad", "has shape %s, the output of the last forward %s"
                          % (g.shape, self._last_ids.shape + (self.embedding_dim,)))
        self._ids.append(self._last_ids.reshape(-1).astype(np.int64))
        self._grads.append(g.reshape(-1, self.embedding_dim))

    def zero_grad(self) -> None:
        """Forgets the recorded gradients."""
        self._ids, self._grads = [], []

    @property
    def grad(self) -> Optional[np.ndarray]:
        """The dense table gradient of the recorded backward calls (NumPy float32), or None."""
        if not self._ids:
            return None
        g = self.ctx.backward(np.concatenate(self._grads), np.concatenate(self._ids),
                              self.num_embeddings, scale=self._scale_value(),
                              padding_idx=self.padding_idx)
        return g.numpy()

    def _scale_value(self) -> float:
        if isinstance(self.scale, str):
            return float(np.sqrt(self.embedding_dim))
        return float(self.scale)

    @api("Embedding.step")
    def step(self, lr: Optional[float] = None) -> None:
        """Applies the recorded gradient to weight (sparse: only rows that occurred) and
        clears it. lr overrides the optimizer's rate (needed without an optimizer)."""
        if self.freeze:
            raise state("the weight is frozen (from_pretrained(..., freeze=True)): step() changes nothing")
        if not self._ids:
            return
        ids = np.concatenate(self._ids)
        grad = np.concatenate(self._grads)
        if self.optimizer is None:
            if lr is None:
                raise invalid("lr", "is needed when the Embedding has no optimizer")
            self.ctx.sgd(self.weight, grad, ids, lr, scale=self._scale_value(), padding_idx=self.padding_idx)
        else:
            self.optimizer.step(self.weight, grad, ids, lr=lr, scale=self._scale_value(),
                                padding_idx=self.padding_idx)
        self.zero_grad()


# ------------------------------------------------------------------ bags

class _BagRecord(NamedTuple):
    """A forward's bags, kept for backward and step: flat ids, CSR offsets (bags + 1),
    weights or None, max_rows or None, and the output gradient once backward gave it."""
    ids: np.ndarray
    offsets: np.ndarray
    weights: Optional[np.ndarray]
    max_rows: Optional[np.ndarray]
    grad: Optional[np.ndarray]


class EmbeddingBag:
    """Bags of ids pooled per sample, in the manner of torch.nn.EmbeddingBag, on a clembed
    context.

    weight: a (num_embeddings x embedding_dim) Matrix ('f32', 'f16' or 'bf16') drawn from
    N(0, 1) with Philox(seed) (the padding row zero; seed 0 by default, None draws a fresh
    one, as Embedding).
    forward(ids, offsets=None, per_sample_weights=None) -> ndarray (bags, dim): 2-D ids are
    a bag per row; 1-D ids take offsets of the bags' starts (or bags + 1 entries with
    include_last_offset=True); mode 'sum', 'mean' or 'max'; per_sample_weights with 'sum'.
    max_norm: the rows the ids read are renormed first, in place (Context.renorm).
    backward(grad) keeps the gradient (bags, dim) of the last forward (several forward and
    backward pairs add up); step(lr) applies them in one fused step (Optimizer.bag_step:
    the optimizer, a kind name, or None for plain SGD with lr) and clears them; .grad is
    their dense table gradient.
    """

    @api("EmbeddingBag")
    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "mean",
                 padding_idx: Optional[int] = None, max_norm: Optional[float] = None, norm_type: float = 2.0,
                 ctx: Optional[Context] = None, seed: Optional[int] = 0, optimizer: Any = None, *,
                 dtype: Any = "f32") -> None:
        self.ctx = ctx if ctx is not None else default_context()
        self.num_embeddings = count(num_embeddings, "num_embeddings")
        self.embedding_dim = count(embedding_dim, "embedding_dim")
        choice(_lib.BAG_MODES, mode, "mode")
        self.mode = mode.lower()
        if padding_idx is not None:
            n = self.num_embeddings
            p = integer(padding_idx, "padding_idx", -n, n)
            padding_idx = p + n if p < 0 else p
        self.padding_idx = padding_idx
        self.max_norm = None if max_norm is None else real(max_norm, "max_norm")
        self.norm_type = real(norm_type, "norm_type")
        if isinstance(optimizer, str):
            optimizer = Optimizer(self.ctx, optimizer, 0.01 if optimizer.lower() != "sgd" else 0.1)
        elif optimizer is not None and not isinstance(optimizer, Optimizer):
            raise wrong_type("optimizer", "must be a clembed.Optimizer, a kind name or None, not %s"
                             % type(optimizer).__name__)
        self.optimizer = optimizer
        code = dtype_code(dtype, "dtype", FLOAT_DTYPES)
        self.seed: Optional[int] = draw_seed(seed)
        self.weight = self.ctx.init(self.ctx.empty(self.num_embeddings, self.embedding_dim, code), "normal",
                                    mean=0.0, std=1.0, seed=self.seed)
        if self.padding_idx is not None:
            self.weight.rows_view(self.padding_idx, 1).write(np.zeros(self.embedding_dim, np.float32))
        self._records: List[_BagRecord] = []
        self._last: Optional[_BagRecord] = None

    def __repr__(self) -> str:
        return "clembed.EmbeddingBag(%d, %d, mode=%r, padding_idx=%r)" % (
            self.num_embeddings, self.embedding_dim, self.mode, self.padding_idx)

    @api("EmbeddingBag.forward", "clembed_embedding_bag")
    def forward(self, ids: Any, offsets: Any = None, per_sample_weights: Any = None, *,
                include_last_offset: bool = False) -> np.ndarray:
        """The bags pooled: an ndarray (bags, dim), float16 for an 'f16' weight, else float32."""
        a = index_array(ids, "ids")
        if self.max_norm is not None:
            self.ctx.renorm(self.weight, a, self.max_norm, self.norm_type)
        out = self.ctx.embedding_bag(self.weight, a, offsets, mode=self.mode, per_sample_weights=per_sample_weights,
                                     padding_idx=self.padding_idx, include_last_offset=include_last_offset,
                                     out_dtype="f16" if self.weight.dtype == "f16" else "f32")
        bags = out.rows
        if a.ndim == 2:
            csr = np.arange(0, a.size + 1, max(a.shape[1], 1), dtype=np.int64)[:bags + 1]
            if a.shape[1] == 0:
                csr = np.zeros(bags + 1, np.int64)
        else:
            o = np.asarray(offsets.numpy() if isinstance(offsets, Ids) else offsets).astype(np.int64).reshape(-1)
            csr = o if include_last_offset else np.append(o, np.int64(a.size))
        w = None if per_sample_weights is None else np.asarray(
            per_sample_weights.numpy() if isinstance(per_sample_weights, Matrix) else per_sample_weights,
            np.float32).reshape(-1)
        self._last = _BagRecord(a.reshape(-1).astype(np.int64), csr, w, getattr(out, "max_rows", None), None)
        return out.numpy(None)

    __call__ = forward

    @api("EmbeddingBag.backward")
    def backward(self, grad: Any) -> None:
        """Records d(loss)/d(output) of the last forward, shape (bags, dim)."""
        if self._last is None:
            raise state("backward before forward")
        g, _, _ = host_values(grad, "grad")
        bags = self._last.offsets.size - 1
        if g.shape != (bags, self.embedding_dim):
            raise invalid("grad", "has shape %s, the output of the last forward %s"
                          % (g.shape, (bags, self.embedding_dim)))
        self._records.append(self._last._replace(grad=g.astype(np.float32)))

    def zero_grad(self) -> None:
        """Forgets the recorded gradients."""
        self._records = []

    def _joined(self) -> _BagRecord:
        """The recorded forwards as one batch of bags (offsets shifted, in order)."""
        ids, offs, ws, mrs, gs = [], [np.zeros(1, np.int64)], [], [], []
        start = 0
        for r in self._records:
            ids.append(r.ids)
            offs.append(r.offsets[1:] + start)
            start += r.ids.size
            ws.append(r.weights if r.weights is not None else np.ones(r.ids.size, np.float32))
            if r.max_rows is not None:
                mrs.append(r.max_rows.reshape(-1, self.embedding_dim))
            gs.append(r.grad)
        weighted = any(r.weights is not None for r in self._records)
        return _BagRecord(np.concatenate(ids), np.concatenate(offs), np.concatenate(ws) if weighted else None,
                          np.concatenate(mrs) if mrs else None, np.concatenate(gs))

    @property
    def grad(self) -> Optional[np.ndarray]:
        """The dense table gradient of the recorded backward calls (NumPy float32), or None."""
        if not self._records:
            return None
        r = self._joined()
        g = self.ctx.bag_backward(r.grad, r.ids, r.offsets, vocab=self.num_embeddings, mode=self.mode,
                                  per_sample_weights=r.weights, padding_idx=self.padding_idx,
                                  include_last_offset=True, max_rows=r.max_rows)
        return g.numpy()

    @api("EmbeddingBag.step", "clembed_bag_optimizer_step")
    def step(self, lr: Optional[float] = None) -> None:
        """Applies the recorded gradients to weight in one fused step (only the rows with a
        contribution change) and clears them. lr overrides the optimizer's rate (needed
        without an optimizer: plain SGD)."""
        if not self._records:
            return
        opt = self.optimizer
        if opt is None:
            if lr is None:
                raise invalid("lr", "is needed when the EmbeddingBag has no optimizer")
            opt = Optimizer(self.ctx, "sgd", lr)
        r = self._joined()
        opt.bag_step(self.weight, r.grad, r.ids, r.offsets, lr=lr, mode=self.mode, per_sample_weights=r.weights,
                     padding_idx=self.padding_idx, include_last_offset=True, max_rows=r.max_rows)
        self.zero_grad()


# ------------------------------------------------------------------ BERT's input layer

class BertEmbeddings:
    """BERT's input layer in the manner of Hugging Face's BertEmbeddings, on a clembed
    context, in one pass (Context.embed with segments and a norm):
    dropout(LayerNorm(word[input_ids] + position[offset + j] + token_type[token_type_ids])).

    The tables (Matrices, F32): word_embeddings (vocab_size x hidden_size),
    position_embeddings (max_position_embeddings x hidden_size), token_type_embeddings
    (type_vocab_size x hidden_size), drawn from N(0, initializer_range) with Philox (the
    pad_token_id row zero, then read as stored, as Hugging Face's is: a loaded state's [PAD]
    row counts; it gets no gradient); norm_weight 1 and norm_bias 0 (1 x hidden_size). norm 'rms'
    makes the norm RMSNorm (no bias). seed as Embedding's (None: clembed's generator).
    forward(input_ids, token_type_ids=None) -> ndarray (batch, seq, hidden), float32;
    with train() (the default) and hidden_dropout_prob > 0 a fresh dropout mask each call.
    backward(grad) adds the gradients of every table and of the norm for the last forward
    (Context.embed_backward, which recomputes the rows and replays the mask); step(lr)
    applies them to the rows that had a gradient (an Optimizer, a kind name, or None for
    plain SGD with lr) and clears them. state_dict() uses Hugging Face's names.
    """

    _KEYS = {"word_embeddings.weight": "word_embeddings", "position_embeddings.weight": "position_embeddings",
             "token_type_embeddings.weight": "token_type_embeddings", "LayerNorm.weight": "norm_weight",
             "LayerNorm.bias": "norm_bias"}

    @api("BertEmbeddings")
    def __init__(self, vocab_size: int, hidden_size: int, max_position_embeddings: int = 512,
                 type_vocab_size: int = 2, *, layer_norm_eps: float = 1e-12, hidden_dropout_prob: float = 0.0,
                 pad_token_id: Optional[int] = 0, initializer_range: float = 0.02, norm: str = "layer",
                 ctx: Optional[Context] = None, seed: Optional[int] = None, optimizer: Any = None) -> None:
        self.ctx = ctx if ctx is not None else default_context()
        self.vocab_size = count(vocab_size, "vocab_size")
        self.hidden_size = count(hidden_size, "hidden_size")
        self.max_position_embeddings = count(max_position_embeddings, "max_position_embeddings")
        self.type_vocab_size = count(type_vocab_size, "type_vocab_size")
        self.norm = "rms" if choice({"layer": 1, "rms": 2}, norm, "norm") == 2 else "layer"
        self.layer_norm_eps = real(layer_norm_eps, "layer_norm_eps")
        self.hidden_dropout_prob = real(hidden_dropout_prob, "hidden_dropout_prob")
        if pad_token_id is not None:
            pad_token_id = integer(pad_token_id, "pad_token_id", 0, self.vocab_size)
        self.pad_token_id = pad_token_id
        std = real(initializer_range, "initializer_range")
        self.seed: int = draw_seed(seed)
        self.training = True
        self.optimizer = _optimizer(self.ctx, optimizer)
        ctx_, H, s = self.ctx, self.hidden_size, self.seed
        self.word_embeddings = ctx_.init(ctx_.empty(self.vocab_size, H), "normal", std=std, seed=s)
        self.position_embeddings = ctx_.init(ctx_.empty(self.max_position_embeddings, H), "normal", std=std,
                                             seed=(s + 1) % 2 ** 64)
        self.token_type_embeddings = ctx_.init(ctx_.empty(self.type_vocab_size, H), "normal", std=std,
                                               seed=(s + 2) % 2 ** 64)
        if pad_token_id is not None:
            self.word_embeddings.rows_view(pad_token_id, 1).write(np.zeros(H, np.float32))
        self.norm_weight = ctx_.matrix(np.ones((1, H), np.float32))
        self.norm_bias: Optional[Matrix] = ctx_.empty(1, H) if self.norm == "layer" else None
        self._calls = 0           # forward calls: each draws its own dropout seed
        self._last: Optional[Dict[str, Any]] = None
        self._grads: Optional[Dict[str, Matrix]] = None
        self._rows: Dict[str, List[np.ndarray]] = {}

    @classmethod
    @api("BertEmbeddings.from_pretrained", "clembed_matrix_load")
    def from_pretrained(cls, path: Union[str, "os.PathLike[str]"], *, prefix: Optional[str] = None,
                        hidden_dropout_prob: Optional[float] = None, ctx: Optional[Context] = None,
                        seed: Optional[int] = None, optimizer: Any = None) -> "BertEmbeddings":
        """A Hugging Face BERT's input layer from its own files, without PyTorch: path a model
        folder holding config.json and model.safetensors (or the .safetensors file, with
        config.json beside it). The sizes, layer_norm_eps, pad_token_id and (unless given)
        hidden_dropout_prob come from config.json; the five tensors are loaded from the
        file through clembed_matrix_load as F32: <prefix>word_embeddings.weight,
        position_embeddings.weight, token_type_embeddings.weight, LayerNorm.weight and
        LayerNorm.bias, prefix 'embeddings.' (a BertModel's) or 'bert.embeddings.' (a
        BertFor... model's), found from the file's names when None. The layer comes in
        evaluation mode, as Hugging Face's from_pretrained returns a model (.train() for
        dropout). A tensor missing or of another shape than config.json gives, or a
        position_embedding_type other than "absolute": InvalidArgumentError naming path."""
        folder = os.fspath(path)
        if os.path.isdir(folder):
            weights = os.path.join(folder, "model.safetensors")
        else:
            weights, folder = folder, os.path.dirname(folder)
        try:
            with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
                cfg = json.load(f)
        except (OSError, ValueError) as e:
            raise invalid("path", "has no readable config.json beside the weights: %s" % e) from None
        if not isinstance(cfg, dict):
            raise invalid("path", "config.json is not a JSON object")
        ctx = ctx if ctx is not None else default_context()
        names = {t["name"]: t["shape"] for t in inspect(weights)}
        if prefix is None:
            prefix = next((p for p in ("embeddings.", "bert.embeddings.") if p + "word_embeddings.weight" in names),
                          None)
            if prefix is None:
                raise invalid("path", "%s holds no embeddings.word_embeddings.weight (nor bert.embeddings....); "
                              "give prefix" % weights)
        try:
            H = int(cfg["hidden_size"])
            sizes = dict(vocab_size=int(cfg["vocab_size"]), max_position_embeddings=int(cfg.get("max_position_embeddings", 512)),
                         type_vocab_size=int(cfg.get("type_vocab_size", 2)))
        except (KeyError, TypeError, ValueError) as e:
            raise invalid("path", "config.json lacks a size (%s)" % e) from None
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise invalid("path", "config.json's position_embedding_type is %r; the layer adds absolute "
                          "positions only" % cfg.get("position_embedding_type"))
        drop = cfg.get("hidden_dropout_prob", 0.0) if hidden_dropout_prob is None else hidden_dropout_prob
        pad = cfg.get("pad_token_id", 0)
        if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int)):
            raise invalid("path", "config.json's pad_token_id is %r, not an integer" % (pad,))
        self = cls(sizes["vocab_size"], H, sizes["max_position_embeddings"], sizes["type_vocab_size"],
                   layer_norm_eps=cfg.get("layer_norm_eps", 1e-12), hidden_dropout_prob=drop,
                   pad_token_id=pad if pad is not None and 0 <= pad < sizes["vocab_size"] else None, ctx=ctx,
                   seed=seed, optimizer=optimizer)
        want = {"word_embeddings": (sizes["vocab_size"], H), "position_embeddings": (sizes["max_position_embeddings"], H),
                "token_type_embeddings": (sizes["type_vocab_size"], H), "LayerNorm.weight": (H,),
                "LayerNorm.bias": (H,)}
        for key, shape in want.items():
            name = prefix + key + ("" if key.startswith("LayerNorm") else ".weight")
            if name not in names:
                raise invalid("path", "%s has no tensor %s" % (weights, name))
            if tuple(names[name]) != shape:
                raise invalid("path", "%s: %s has shape %s; config.json gives %s" % (weights, name,
                                                                                      tuple(names[name]), shape))
            m = ctx.load(weights, name, "f32")
            attr = {"LayerNorm.weight": "norm_weight", "LayerNorm.bias": "norm_bias"}.get(key, key)
            setattr(self, attr, m)
        return self.eval()

    def __repr__(self) -> str:
        return "clembed.BertEmbeddings(%d, %d, max_position_embeddings=%d, type_vocab_size=%d, norm=%r)" % (
            self.vocab_size, self.hidden_size, self.max_position_embeddings, self.type_vocab_size, self.norm)

    def train(self, mode: bool = True) -> "BertEmbeddings":
        """Training mode (dropout applied) or, with mode False, evaluation mode. Returns self."""
        self.training = bool(mode)
        return self

    def eval(self) -> "BertEmbeddings":
        """Evaluation mode: no dropout. Returns self."""
        return self.train(False)

    def _tables(self) -> Dict[str, Optional[Matrix]]:
        return {"word_embeddings": self.word_embeddings, "position_embeddings": self.position_embeddings,
                "token_type_embeddings": self.token_type_embeddings, "norm_weight": self.norm_weight,
                "norm_bias": self.norm_bias}

    def _options(self, offset: int, seq_len: int, seed: int, dropout: float, token_type_ids: Any) -> Dict[str, Any]:
        # the [PAD] row read as stored (Hugging Face's nn.Embedding(padding_idx=pad_token_id)), no gradient
        return dict(positions=self.position_embeddings, offset=offset, seq_len=seq_len,
                    padding_idx=self.pad_token_id, padding_keeps_row=True, dropout=dropout, seed=seed,
                    segment_table=self.token_type_embeddings, segment_ids=token_type_ids, norm=self.norm,
                    norm_weight=self.norm_weight, norm_bias=self.norm_bias, norm_eps=self.layer_norm_eps)

    @api("BertEmbeddings.forward", "clembed_embed")
    def forward(self, input_ids: Any, token_type_ids: Any = None, *, past_key_values_length: int = 0) -> np.ndarray:
        """The layer's output for input_ids (batch, seq) (or (seq,)): token j of a sequence is
        at position past_key_values_length + j; token_type_ids of the same shape (None: 0)."""
        ids = np.asarray(input_ids)
        if ids.ndim == 0:
            raise invalid("input_ids", "has at least one dimension")
        types = None
        if token_type_ids is not None:
            types = np.asarray(token_type_ids)
            if types.shape != ids.shape:
                raise invalid("token_type_ids", "has shape %s, input_ids %s" % (types.shape, ids.shape))
        offset = count(past_key_values_length, "past_key_values_length")
        dropout = self.hidden_dropout_prob if self.training else 0.0
        seed = (self.seed + 0x9E3779B97F4A7C15 * (self._calls + 1)) % 2 ** 64
        self._calls += 1
        opts = self._options(offset, ids.shape[-1], seed, dropout, types)
        out = self.ctx.embed(self.word_embeddings, ids, **opts)
        self._last = dict(ids=ids, types=types, opts=opts)
        return out.numpy(None)

    __call__ = forward

    @api("BertEmbeddings.backward", "clembed_embed_backward")
    def backward(self, grad: Any) -> None:
        """Adds the gradients of the last forward's output gradient `grad` (its shape,
        float32 or float16) into the layer's gradients (several calls add up)."""
        if self._last is None:
            raise state("backward before forward")
        ids = self._last["ids"]
        g, _, _ = host_values(grad, "grad")
        if g.shape != ids.shape + (self.hidden_size,):
            raise invalid("grad", "has shape %s, the output of the last forward %s"
                          % (g.shape, ids.shape + (self.hidden_size,)))
        if self._grads is None:
            H = self.hidden_size
            shapes = {"table": self.vocab_size, "position_table": self.max_position_embeddings,
                      "segment_table": self.type_vocab_size, "norm_weight": 1}
            if self.norm_bias is not None:
                shapes["norm_bias"] = 1
            self._grads = {k: self.ctx.empty(r, H) for k, r in shapes.items()}
        self.ctx.embed_backward(g, self.word_embeddings, ids, grads=self._grads, **self._last["opts"])
        # the rows that receive a gradient (bad ids among them are refused by the backward)
        seq, offset = ids.shape[-1], self._last["opts"]["offset"]
        flat = ids.reshape(-1).astype(np.int64)
        if self.pad_token_id is not None:
            flat = flat[flat != self.pad_token_id]
        types = self._last["types"]
        self._rows.setdefault("table", []).append(flat)
        self._rows.setdefault("position_table", []).append(np.arange(offset, offset + seq, dtype=np.int64))
        self._rows.setdefault("segment_table", []).append(
            np.zeros(1, np.int64) if types is None else types.reshape(-1).astype(np.int64))

    @property
    def grads(self) -> Optional[Dict[str, np.ndarray]]:
        """The gradients added by backward since the last step (NumPy float32), under
        Hugging Face's names, or None."""
        if self._grads is None:
            return None
        names = {"table": "word_embeddings.weight", "position_table": "position_embeddings.weight",
                 "segment_table": "token_type_embeddings.weight", "norm_weight": "LayerNorm.weight",
                 "norm_bias": "LayerNorm.bias"}
        return {names[k]: m.numpy() for k, m in self._grads.items()}

    def zero_grad(self) -> None:
        """Forgets the gradients."""
        self._grads = None
        self._rows = {}

    @api("BertEmbeddings.step")
    def step(self, lr: Optional[float] = None) -> None:
        """Applies the gradients to the rows that had one (every row of the norm) with the
        optimizer (lr overrides its rate), or plain SGD with lr, then clears them."""
        if self._grads is None:
            return
        if self.optimizer is None and lr is None:
            raise invalid("lr", "is needed when the layer has no optimizer")
        targets = {"table": self.word_embeddings, "position_table": self.position_embeddings,
                   "segment_table": self.token_type_embeddings, "norm_weight": self.norm_weight,
                   "norm_bias": self.norm_bias}
        for k, g in self._grads.items():
            rows = np.unique(np.concatenate(self._rows[k])) if k in self._rows else np.zeros(1, np.int64)
            if rows.size == 0:
                continue
            g_rows = self.ctx.lookup(g, rows)          # the rows' gradients, gathered
            if self.optimizer is None:
                self.ctx.sgd(targets[k], g_rows, rows, lr)
            else:
                self.optimizer.step(targets[k], g_rows, rows, lr=lr)
        self.zero_grad()

    def state_dict(self) -> Dict[str, np.ndarray]:
        """The tables under Hugging Face's names (word_embeddings.weight, ...,
        LayerNorm.weight and, for 'layer', LayerNorm.bias as (hidden,) arrays), float32 copies."""
        out = {}
        for key, attr in self._KEYS.items():
            m = getattr(self, attr)
            if m is not None:
                a = m.numpy(None)
                out[key] = a.reshape(-1) if attr.startswith("norm") else a
        return out

    @api("BertEmbeddings.load_state_dict", "clembed_matrix_write")
    def load_state_dict(self, state_dict: Dict[str, Any], strict: bool = True) -> LoadResult:
        """Writes the tables of state_dict (Hugging Face's names, as state_dict gives them:
        float32 or float16 arrays of the tables' shapes; the norm's (hidden,) or
        (1, hidden)) in place. strict: a missing or unknown key is an error."""
        if not isinstance(state_dict, dict):
            raise wrong_type("state_dict", "must be a dict, not %s" % type(state_dict).__name__)
        want = [k for k, a in self._KEYS.items() if getattr(self, a) is not None]
        missing_keys = [k for k in want if k not in state_dict]
        unexpected = sorted(k for k in state_dict if k not in want)
        if strict and (missing_keys or unexpected):
            raise invalid("state_dict", "missing keys %s, unexpected keys %s" % (missing_keys, unexpected))
        for k in want:
            if k not in state_dict:
                continue
            m = getattr(self, self._KEYS[k])
            a = np.asarray(state_dict[k])
            if a.size != m.rows * m.cols or (a.ndim == 2 and a.shape != (m.rows, m.cols)):
                raise invalid("state_dict", "[%r] has shape %s, the layer's %s" % (k, a.shape, (m.rows, m.cols)))
            m.write(a.reshape(m.rows, m.cols))
        return LoadResult(missing_keys, unexpected)
