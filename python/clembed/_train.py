"""TrainOps, the backward and the sparse steps on Context: the table gradient (backward),
plain SGD (sgd), the fused optimizer step (optimizer_step: SGD, Adagrad, row-wise
Adagrad, Adam) and initialisation from Philox (init). optimizer_options makes the
clembed_optimizer of the optimizer keywords, for these steps and the bags' (_bags.py).
"""
import ctypes
from typing import Any, List, Optional, Tuple

from ._lib import lib, OPTIMIZERS
from ._errors import api, wrong_type, require
from ._args import choice, count as _count, real, seed as _seed
from ._events import WaitFor
from ._matrix import Matrix, Ids
from ._context import ContextBase

byref = ctypes.byref

OPTIMIZER_KEYS = ("kind", "lr", "state", "state2", "step", "eps", "betas", "weight_decay", "stochastic_rounding",
                  "rounding_seed")


def optimizer_options(kind: Any, lr: Any, state: Optional[Matrix] = None, state2: Optional[Matrix] = None,
                      step: Any = 1, eps: Any = None, betas: Any = (0.9, 0.999), weight_decay: Any = 0.0,
                      stochastic_rounding: Any = False, rounding_seed: Any = 0) -> Any:
    """clembed_optimizer from the optimizer keywords of Context.optimizer_step (eps None:
    the C default of the kind; stochastic_rounding and rounding_seed: its
    stochastic_rounding and seed)."""
    o = lib.clembed_optimizer_defaults(choice(OPTIMIZERS, kind, "kind"))
    o.learning_rate = real(lr, "lr")
    if eps is not None:
        o.eps = real(eps, "eps")
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise wrong_type("betas", "must be a pair (beta1, beta2), not %r" % (betas,))
    o.beta1, o.beta2 = real(betas[0], "betas"), real(betas[1], "betas")
    o.weight_decay = real(weight_decay, "weight_decay")
    o.step = _count(step, "step")
    if not isinstance(stochastic_rounding, (bool, int)) or stochastic_rounding not in (0, 1):
        raise wrong_type("stochastic_rounding", "must be True or False, not %r" % (stochastic_rounding,))
    o.stochastic_rounding = 1 if stochastic_rounding else 0
    o.seed = _seed(rounding_seed, "rounding_seed")
    for name, m in (("state", state), ("state2", state2)):
        if m is None:
            continue
        if not isinstance(m, Matrix):
            raise wrong_type(name, "must be a clembed.Matrix (F32, zeros before the first step) or None, not %s"
                             % type(m).__name__)
        setattr(o, name, ctypes.pointer(m._m))
    return o


class TrainOps(ContextBase):
    """Context's backward, sgd, optimizer_step and init (a mixin of clembed.Context)."""

    def _backward_options(self, scale: Any, padding_idx: Any, scale_grad_by_freq: Any, deterministic: Any,
                          accumulate: Any, on_bad_id: Any, seq_len: Any, offset: Any, sequence_offsets: Any,
                          position_grad: Any, dropout: Any, seed: Any, ids: Ids, keep: List[Any]) -> Any:
        """clembed_backward_options from the backward's arguments (uploads kept in `keep`)."""
        o = lib.clembed_backward_defaults()
        self._common_options(o, ids, keep, scale, on_bad_id, padding_idx, seq_len, offset, sequence_offsets,
                             dropout, seed)
        o.scale_grad_by_freq = 1 if scale_grad_by_freq else 0
        o.deterministic = 1 if deterministic else 0
        o.accumulate = 1 if accumulate else 0
        if position_grad is not None:
            if not isinstance(position_grad, Matrix):
                raise wrong_type("position_grad", "must be a clembed.Matrix, not %s" % type(position_grad).__name__)
            o.position_grad = ctypes.pointer(position_grad._m)
        return o

    @api("Context.backward", "clembed_backward")
    def backward(self, grad: Any, ids: Any, vocab: int, scale: float = 1.0, padding_idx: Optional[int] = None,
                 scale_grad_by_freq: bool = False, deterministic: bool = True, out: Optional[Matrix] = None, *,
                 accumulate: bool = True, on_bad_id: str = "check", seq_len: Optional[int] = None,
                 offset: int = 0, sequence_offsets: Any = None, position_grad: Optional[Matrix] = None,
                 dropout: float = 0.0, seed: int = 0, wait_for: WaitFor = None) -> Matrix:
        """The table gradient (vocab x cols, F32): out[v] (+)= scale * sum of grad[i] over
        ids[i] == v. grad has ids.shape + (cols,) (or ids.count rows). With out None a
        new matrix (rows no id touches are 0); with out given, added into it
        (accumulate=False overwrites it)."""
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        if out is None:   # a new matrix, overwritten whole (untouched rows become 0)
            accumulate = False
        out = self._out(out, _count(vocab, "vocab"), grad.cols, "f32", None)
        keep: List[Any] = []
        o = self._backward_options(scale, padding_idx, scale_grad_by_freq, deterministic, accumulate, on_bad_id,
                                   seq_len, offset, sequence_offsets, position_grad, dropout, seed, ids, keep)
        self._run("clembed_backward", lib.clembed_backward,
                  (self._live, byref(grad._m), byref(ids._ids), byref(o), byref(out._m)), wait_for,
                  [out, position_grad])
        return out

    @api("Context.sgd", "clembed_sgd_update")
    def sgd(self, table: Matrix, grad: Any, ids: Any, lr: float, *, scale: float = 1.0,
            padding_idx: Optional[int] = None, scale_grad_by_freq: bool = False, on_bad_id: str = "check",
            seq_len: Optional[int] = None, offset: int = 0, sequence_offsets: Any = None,
            position_grad: Optional[Matrix] = None, dropout: float = 0.0, seed: int = 0,
            wait_for: WaitFor = None) -> Matrix:
        """In place: table[v] -= lr * grad[v] for the rows v in ids (the fused sparse
        step of clembed_sgd_update). Returns table (its .event set)."""
        if not isinstance(table, Matrix):
            raise wrong_type("table", "must be a clembed.Matrix (sgd updates it in place), not %s"
                             % type(table).__name__)
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        keep: List[Any] = []
        o = self._backward_options(scale, padding_idx, scale_grad_by_freq, True, True, on_bad_id, seq_len,
                                   offset, sequence_offsets, position_grad, dropout, seed, ids, keep)
        self._run("clembed_sgd_update", lib.clembed_sgd_update,
                  (self._live, byref(grad._m), byref(ids._ids), real(lr, "lr"), byref(o), byref(table._m)),
                  wait_for, [table, position_grad])
        return table

    @api("Context.optimizer_step", "clembed_optimizer_step")
    def optimizer_step(self, table: Matrix, grad: Any, ids: Any, kind: str, lr: float, *,
                       state: Optional[Matrix] = None, state2: Optional[Matrix] = None, step: int = 1,
                       eps: Optional[float] = None, betas: Tuple[float, float] = (0.9, 0.999),
                       weight_decay: float = 0.0, scale: float = 1.0, padding_idx: Optional[int] = None,
                       scale_grad_by_freq: bool = False, on_bad_id: str = "check", seq_len: Optional[int] = None,
                       offset: int = 0, sequence_offsets: Any = None, position_grad: Optional[Matrix] = None,
                       dropout: float = 0.0, seed: int = 0, stochastic_rounding: bool = False,
                       rounding_seed: int = 0, wait_for: WaitFor = None) -> Matrix:
        """One fused sparse step of table (in place, clembed_optimizer_step): each row v
        in ids gets its gradient g (grad has ids.shape + (cols,); g as Context.backward
        folds it, with the same scale, padding_idx, scale_grad_by_freq, on_bad_id, seq_len,
        offset, sequence_offsets, position_grad, dropout and seed), then, in float32,
        weight decay and the step of kind: 'sgd', 'adagrad', 'rowwise_adagrad' or 'adam',
        with learning rate lr. The caller keeps the optimizer's state: state (F32, zeros
        before the first step; 'adagrad' and 'adam' table.rows x cols, 'rowwise_adagrad'
        table.rows x 1), state2 ('adam', table.rows x cols) and step (Adam's step number
        t >= 1). eps None: the kind's default (1e-10 'adagrad', 1e-8 otherwise); betas:
        Adam's (beta1, beta2); weight_decay: L2, g + weight_decay * w. stochastic_rounding
        (an 'f16' or 'bf16' table; 'f32' ignores it): each written element is rounded up or
        down at random, up with the probability of the fraction it would lose, from the
        random bits Philox(rounding_seed, step, row, column) (the same on every device; count
        the steps in step for every kind, so that each step draws fresh bits; seed is the
        dropout's). Only the rows in ids and their state rows are touched. clembed.Optimizer
        keeps the states and counts the steps for you. Returns table (its .event set)."""
        fn = require("clembed_optimizer_step", "Context.optimizer_step")
        if not isinstance(table, Matrix):
            raise wrong_type("table", "must be a clembed.Matrix (stepped in place), not %s" % type(table).__name__)
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        keep: List[Any] = []
        bo = self._backward_options(scale, padding_idx, scale_grad_by_freq, True, True, on_bad_id, seq_len,
                                    offset, sequence_offsets, position_grad, dropout, seed, ids, keep)
        o = optimizer_options(kind, lr, state, state2, step, eps, betas, weight_decay, stochastic_rounding,
                              rounding_seed)
        self._run("clembed_optimizer_step", fn,
                  (self._live, byref(grad._m), byref(ids._ids), byref(bo), byref(o), byref(table._m)),
                  wait_for, [table, position_grad])
        return table

    @api("Context.init")
    def init(self, m: Matrix, kind: str = "normal", *, mean: float = 0.0, std: float = 1.0, low: float = -1.0,
             high: float = 1.0, seed: int = 0, wait_for: WaitFor = None) -> Matrix:
        """Fills m in place from Philox(seed, r*cols + c): kind 'normal' (mean, std) or
        'uniform' (low, high). Returns m."""
        if not isinstance(m, Matrix):
            raise wrong_type("m", "must be a clembed.Matrix, not %s" % type(m).__name__)
        k = choice({"normal": 0, "uniform": 1}, kind, "kind")
        s = _seed(seed)
        if k == 0:
            self._run("clembed_matrix_init_normal", lib.clembed_matrix_init_normal,
                      (self._live, byref(m._m), real(mean, "mean"), real(std, "std"), s), wait_for, [m])
        else:
            self._run("clembed_matrix_init_uniform", lib.clembed_matrix_init_uniform,
                      (self._live, byref(m._m), real(low, "low"), real(high, "high"), s), wait_for, [m])
        return m
