"""Training helpers: clembed.Optimizer (sparse steps) and clembed.Embedding
(an nn.Embedding-like layer on a clembed context)."""
import ctypes
import weakref

import numpy as np

from . import _lib
from ._lib import lib
from ._core import Matrix, Ids, default_context, _choice
from ._errors import missing

KINDS = {"sgd": 0, "adagrad": 1, "rowwise_adagrad": 2, "adam": 3}
_EPS = {"sgd": 0.0, "adagrad": 1e-10, "rowwise_adagrad": 1e-8, "adam": 1e-8}


class Optimizer:
    """A sparse optimizer step over the rows that occur in ids (clembed_optimizer_step).

    kind: 'sgd', 'adagrad', 'rowwise_adagrad' or 'adam'. The optimizer owns its state
    matrices (F32, made zero on first use, one set per table) and counts Adam's step
    number per table. Every kind runs clembed_optimizer_step.
    """

    def __init__(self, ctx, kind, lr, eps=None, betas=(0.9, 0.999), weight_decay=0.0):
        self.ctx = ctx if ctx is not None else default_context()
        self.kind = kind.lower()
        _choice(KINDS, self.kind, "optimizer kind")
        self.lr = float(lr)
        self.eps = _EPS[self.kind] if eps is None else float(eps)
        self.betas = (float(betas[0]), float(betas[1]))
        self.weight_decay = float(weight_decay)
        self._state = weakref.WeakKeyDictionary()   # table -> [state, state2, t]

    def state(self, table):
        """(state, state2, t) of a table: the Matrix objects (or None) and the steps taken."""
        s = self._state.get(table)
        return tuple(s) if s is not None else (None, None, 0)

    def _states(self, table):
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

    def step(self, table, grad, ids, lr=None, wait_for=None, **backward_options):
        """One fused step of table (in place) with the gradient grad (ids.shape + (cols,))
        of the tokens ids. backward_options as Context.backward (scale, padding_idx,
        scale_grad_by_freq, on_bad_id, dropout, seed, ...). Returns table."""
        ctx = self.ctx
        lr = self.lr if lr is None else float(lr)
        if not _lib.has("clembed_optimizer_step"):
            raise missing("clembed_optimizer_step", "Optimizer(%r).step" % self.kind)
        ids = ctx._as_ids(ids)
        grad = ctx._grad(grad)
        keep = []
        bo = ctx._backward_options(
            table.rows, backward_options.pop("scale", 1.0), backward_options.pop("padding_idx", None),
            backward_options.pop("scale_grad_by_freq", False), True, True,
            backward_options.pop("on_bad_id", "check"), backward_options.pop("seq_len", None),
            backward_options.pop("offset", 0), backward_options.pop("sequence_offsets", None),
            backward_options.pop("position_grad", None), backward_options.pop("dropout", 0.0),
            backward_options.pop("seed", 0), ids, keep)
        if backward_options:
            raise TypeError("clembed: unknown option(s) %s" % ", ".join(sorted(backward_options)))
        s = self._states(table)
        o = lib.clembed_optimizer_defaults(KINDS[self.kind])
        o.learning_rate = lr
        o.eps = self.eps
        o.beta1, o.beta2 = self.betas
        o.weight_decay = self.weight_decay
        o.step = s[2] + 1
        if s[0] is not None:
            o.state = ctypes.pointer(s[0]._m)
        if s[1] is not None:
            o.state2 = ctypes.pointer(s[1]._m)
        ctx._run("clembed_optimizer_step", lib.clembed_optimizer_step,
                 (ctx._h, ctypes.byref(grad._m), ctypes.byref(ids._ids), ctypes.byref(bo),
                  ctypes.byref(o), ctypes.byref(table._m)), wait_for, [table])
        s[2] += 1
        return table


class Embedding:
    """A token-embedding layer in the manner of torch.nn.Embedding, on a clembed context.

    weight: a (num_embeddings x embedding_dim) F32 Matrix, drawn from N(0, 1) with
    Philox(seed) (the padding row zero). forward(ids) -> ndarray of ids.shape + (dim,):
    scale * weight[ids] (+ positions: None, 'sinusoid' or a learned (positions x dim)
    array/Matrix, not trained). backward(grad) keeps the output gradient of the last
    forward (several backward calls add up); step(lr) applies it with the optimizer
    (an Optimizer, a kind name, or None for plain SGD with lr) and clears it.
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, scale=1.0, positions=None,
                 ctx=None, seed=0, optimizer=None):
        self.ctx = ctx if ctx is not None else default_context()
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        if padding_idx is not None:
            p = int(padding_idx)
            if not -self.num_embeddings <= p < self.num_embeddings:
                raise ValueError("clembed: padding_idx %d outside [-%d, %d)" % (
                    p, self.num_embeddings, self.num_embeddings))
            padding_idx = p + self.num_embeddings if p < 0 else p
        self.padding_idx = padding_idx
        self.scale = scale
        if isinstance(positions, np.ndarray):
            positions = self.ctx.matrix(positions)
        self.positions = positions
        self.weight = self.ctx.init(self.ctx.empty(self.num_embeddings, self.embedding_dim),
                                    "normal", 0.0, 1.0, seed=seed)
        if padding_idx is not None:
            self.weight.rows_view(padding_idx, 1).write(np.zeros(self.embedding_dim, np.float32))
        if isinstance(optimizer, str):
            optimizer = Optimizer(self.ctx, optimizer, 0.01 if optimizer.lower() != "sgd" else 0.1)
        self.optimizer = optimizer
        self._ids = []
        self._grads = []
        self._last_ids = None

    def forward(self, ids):
        ids = np.asarray(ids)
        out = self.ctx.embed(self.weight, ids, scale=self.scale, positions=self.positions,
                             padding_idx=self.padding_idx)
        self._last_ids = ids
        return out.numpy()

    __call__ = forward

    def backward(self, grad):
        """Records d(loss)/d(output) of the last forward (shape ids.shape + (dim,))."""
        if self._last_ids is None:
            raise RuntimeError("clembed: backward before forward")
        g = np.asarray(grad, dtype=np.float32)
        if g.shape != self._last_ids.shape + (self.embedding_dim,):
            raise ValueError("clembed: gradient of shape %s for an output of shape %s"
                             % (g.shape, self._last_ids.shape + (self.embedding_dim,)))
        self._ids.append(self._last_ids.reshape(-1).astype(np.int64))
        self._grads.append(g.reshape(-1, self.embedding_dim))

    def zero_grad(self):
        self._ids, self._grads = [], []

    @property
    def grad(self):
        """The dense table gradient of the recorded backward calls (NumPy), or None."""
        if not self._ids:
            return None
        g = self.ctx.backward(np.concatenate(self._grads), np.concatenate(self._ids),
                              self.num_embeddings, scale=self._scale_value(),
                              padding_idx=self.padding_idx)
        return g.numpy()

    def _scale_value(self):
        if isinstance(self.scale, str):
            return float(np.sqrt(self.embedding_dim))
        return float(self.scale)

    def step(self, lr=None):
        """Applies the recorded gradient to weight (sparse: only rows that occurred) and
        clears it. lr overrides the optimizer's rate (needed without an optimizer)."""
        if not self._ids:
            return
        ids = np.concatenate(self._ids)
        grad = np.concatenate(self._grads)
        if self.optimizer is None:
            if lr is None:
                raise ValueError("clembed: step() needs lr when the Embedding has no optimizer")
            self.ctx.sgd(self.weight, grad, ids, lr, scale=self._scale_value(),
                         padding_idx=self.padding_idx)
        else:
            self.optimizer.step(self.weight, grad, ids, lr=lr, scale=self._scale_value(),
                                padding_idx=self.padding_idx)
        self.zero_grad()
