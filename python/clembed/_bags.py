"""BagOps, bags of ids on Context (PyTorch's EmbeddingBag, FBGEMM's table-batched bags):
the pooled forward of one feature (embedding_bag) or of many at once (embedding_bags),
the table gradient (bag_backward), the fused sparse optimizer steps on bags
(bag_optimizer_step, bags_optimizer_step) and renorm (nn.Embedding's max_norm).
"""
import ctypes
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _lib
from ._lib import lib, Ids_t, POLICIES, BAG_MODES
from ._errors import api, invalid, wrong_type, require
from ._args import choice, count as _count, real, host_values, index_array
from ._events import WaitFor
from ._matrix import Matrix, Ids, DTypeLike
from ._context import ContextBase
from ._train import optimizer_options, OPTIMIZER_KEYS

byref = ctypes.byref


class BagOps(ContextBase):
    """Context's embedding_bag, embedding_bags, bag_backward, bag_optimizer_step,
    bags_optimizer_step and renorm (a mixin of clembed.Context)."""

    def _new_ids(self, shape: Tuple[int, ...]) -> Ids:
        """Ids (int64) written by the device, of the given shape."""
        n = int(np.prod(shape)) if shape else 0
        return Ids(self, Ids_t(buffer=self._buffer(8 * n), offset=0, count=n, type=1), owned=True, shape=shape)

    def _bags(self, ids: Ids, offsets: Any, include_last_offset: Any, keep: List[Any]) -> Tuple[Optional[Ids], int]:
        """(the CSR offsets on the device, or None for bags of one size; the number of bags)
        from PyTorch's convention: 2-D ids are bags of one size (offsets None); 1-D ids take
        offsets of B starts, or of B + 1 entries with include_last_offset (the last one the
        number of ids). An Ids of B starts is read back to append that last entry."""
        if len(ids.shape) == 2:
            if offsets is not None:
                raise invalid("offsets", "must be None for 2-D ids (each row of ids is a bag)")
            return None, ids.shape[0]
        if len(ids.shape) != 1:
            raise invalid("ids", "are 1-D (with offsets) or 2-D (a bag per row), not of shape %s" % (ids.shape,))
        if offsets is None:
            raise invalid("offsets", "is needed with 1-D ids (or pass 2-D ids, a bag per row)")
        if isinstance(offsets, Ids):
            if include_last_offset:
                if offsets.count == 0:
                    raise invalid("offsets", "has no entry; with include_last_offset it holds bags + 1")
                keep.append(offsets)
                return offsets, offsets.count - 1
            host = offsets.numpy()
        else:
            host = index_array(offsets, "offsets")
        if host.ndim != 1:
            raise invalid("offsets", "is 1-D, not of shape %s" % (host.shape,))
        if include_last_offset:
            if host.size == 0:
                raise invalid("offsets", "has no entry; with include_last_offset it holds bags + 1")
            csr = host
        else:
            csr = np.append(host.astype(np.int64), np.int64(ids.count))
        d = self._upload_ids(csr, "offsets")
        keep.append(d)
        return d, csr.size - 1

    def _bag_options(self, ids: Ids, mode: Any, per_sample_weights: Any, padding_idx: Any, on_bad_id: Any,
                     max_rows: Any, keep: List[Any], remap: Any = None) -> Any:
        """clembed_bag_options (uploads kept alive in `keep`); max_rows an Ids or an
        integer array (the forward's, for the MAX backward)."""
        o = lib.clembed_bag_defaults()
        o.mode = choice(BAG_MODES, mode, "mode")
        o.policy = choice(POLICIES, on_bad_id, "on_bad_id")
        o.padding_idx = self._padding(padding_idx)
        if per_sample_weights is not None:
            if isinstance(per_sample_weights, Matrix):
                w = per_sample_weights
            else:
                host, _, _ = host_values(per_sample_weights, "per_sample_weights")
                if host.size != ids.count:
                    raise invalid("per_sample_weights", "has %d values for %d ids (one weight per id)"
                                  % (host.size, ids.count))
                w = self.matrix(host.reshape(ids.count, 1), "f32")
            keep.append(w)
            o.per_sample_weights = ctypes.pointer(w._m)
        if max_rows is not None:
            mr = max_rows if isinstance(max_rows, Ids) else self._upload_ids(index_array(max_rows, "max_rows"),
                                                                             "max_rows")
            keep.append(mr)
            o.max_rows = ctypes.pointer(mr._ids)
        rm = self._remap(remap, keep)
        if rm is not None:
            o.remap = ctypes.pointer(rm._ids)
        return o

    @api("Context.embedding_bag", "clembed_embedding_bag")
    def embedding_bag(self, table: Any, ids: Any, offsets: Any = None, mode: str = "mean",
                      per_sample_weights: Any = None, padding_idx: Optional[int] = None,
                      include_last_offset: bool = False, on_bad_id: str = "check", out_dtype: DTypeLike = "f32", *,
                      out: Optional[Matrix] = None, wait_for: WaitFor = None, remap: Any = None) -> Matrix:
        """Bags of ids pooled into a row each (PyTorch's F.embedding_bag): a (bags x cols)
        Matrix. ids 2-D: a bag per row (offsets None); ids 1-D: offsets of the B bags'
        starts, or B + 1 entries with include_last_offset. mode 'sum', 'mean' or 'max',
        per column over the bag's ids in order (an empty bag gives zeros);
        per_sample_weights (the shape of ids, mode 'sum'): acc = fma(w, t, acc); ids equal
        to padding_idx are left out (negative counts from the end). table any dtype, the
        block-quantized ones included. mode 'max' also sets .max_rows on the result: the
        table row that gave each element, -1 for an empty bag (a NumPy array, read back at
        once, so the call waits for the device), and .max_rows_ids (the same on the device,
        for Context.bag_backward). remap (a pruned table, FBGEMM's pruned_array): an integer
        array or Ids, one entry per id of the unpruned table, the kept row it reads or -1 for
        a pruned id, which adds nothing but counts in 'mean' (as FBGEMM's TBE divides by the
        bag's length); ids and padding_idx are ids of the unpruned table."""
        fn = require("clembed_embedding_bag", "Context.embedding_bag")
        table = self._as_matrix(table, "table")
        ids = self._as_ids(ids)
        keep: List[Any] = []
        off, bags = self._bags(ids, offsets, include_last_offset, keep)
        o = self._bag_options(ids, mode, per_sample_weights, padding_idx, on_bad_id, None, keep, remap)
        mr = None
        if o.mode == BAG_MODES["max"]:
            mr = self._new_ids((bags, table.cols))
            o.max_rows = ctypes.pointer(mr._ids)
        out = self._out(out, bags, table.cols, out_dtype, None)
        self._run("clembed_embedding_bag", fn,
                  (self._live, byref(table._m), byref(ids._ids), byref(off._ids) if off is not None else None,
                   byref(o), byref(out._m)), wait_for, [out])
        if mr is not None:
            out.max_rows_ids = mr
            out.max_rows = mr.numpy()
        return out

    _BAG_KEYS = ("table", "ids", "offsets", "mode", "per_sample_weights", "padding_idx", "include_last_offset",
                 "on_bad_id", "remap")

    def _bag_features(self, features: Any, keep: List[Any], with_max_rows: bool) -> Tuple[Any, int, int, List[Any]]:
        """(clembed_bag_feature array, their count, the bags, MAX features' max_rows Ids)
        from dicts of embedding_bag's keyword arguments plus 'table', 'ids', 'offsets'."""
        if isinstance(features, dict) or not isinstance(features, (list, tuple)):
            raise wrong_type("features", "must be a list of dicts (one per feature), not %s" % type(features).__name__)
        n = len(features)
        arr = _lib.sized_array(_lib.BagFeature_t, n)   # each struct_size set (ctypes calls no __init__ here)
        bags: Optional[int] = None
        max_rows: List[Any] = []
        for f, d in enumerate(features):
            if not isinstance(d, dict):
                raise wrong_type("features", "features[%d] must be a dict, not %s" % (f, type(d).__name__))
            unknown = sorted(set(d) - set(self._BAG_KEYS))
            if unknown or "table" not in d or "ids" not in d:
                raise invalid("features", "features[%d] has the keys %s: it takes %s ('table' and 'ids' needed)"
                              % (f, sorted(d), ", ".join(self._BAG_KEYS)))
            table = self._as_matrix(d["table"], "table")
            ids = self._as_ids(d["ids"])
            keep += [table, ids]
            off, b = self._bags(ids, d.get("offsets"), d.get("include_last_offset", False), keep)
            if bags is None:
                bags = b
            elif b != bags:
                raise invalid("features", "features[%d] has %d bags and features[0] %d: every feature has the "
                              "same bags" % (f, b, bags))
            o = self._bag_options(ids, d.get("mode", "mean"), d.get("per_sample_weights"), d.get("padding_idx"),
                                  d.get("on_bad_id", "check"), None, keep, d.get("remap"))
            mr = None
            if o.mode == BAG_MODES["max"] and with_max_rows:
                mr = self._new_ids((b, table.cols))
                o.max_rows = ctypes.pointer(mr._ids)
            max_rows.append(mr)
            arr[f].table = ctypes.pointer(table._m)
            arr[f].ids = ctypes.pointer(ids._ids)
            arr[f].offsets = ctypes.pointer(off._ids) if off is not None else None
            arr[f].options = o
        return arr, n, bags or 0, max_rows

    @api("Context.embedding_bags", "clembed_embedding_bags")
    def embedding_bags(self, features: Sequence[Dict[str, Any]], out_dtype: DTypeLike = "f32", *,
                       out: Optional[Matrix] = None, wait_for: WaitFor = None) -> Matrix:
        """Every feature of a batch in one call (a small constant number of launches):
        features are dicts of embedding_bag's keyword arguments plus 'table', 'ids' (and
        'offsets'); every feature has the same number of bags. The result is bags x (the
        features' cols together), feature f's bags in its own block of columns, in order:
        each block has the bits embedding_bag gives for that feature alone. Tables may be
        shared. MAX features' max_rows are in .max_rows_ids (a list: an Ids per feature,
        None for the others)."""
        fn = require("clembed_embedding_bags", "Context.embedding_bags")
        keep: List[Any] = []
        arr, n, bags, max_rows = self._bag_features(features, keep, True)
        cols = sum(arr[f].table.contents.cols for f in range(n))
        out = self._out(out, bags, cols, out_dtype, None)
        self._run("clembed_embedding_bags", fn, (self._live, arr, n, byref(out._m)), wait_for, [out])
        out.max_rows_ids = max_rows
        return out

    @api("Context.bag_backward", "clembed_bag_backward")
    def bag_backward(self, grad: Any, ids: Any, offsets: Any = None, *, vocab: Optional[int] = None,
                     table: Optional[Matrix] = None, mode: str = "mean", per_sample_weights: Any = None,
                     padding_idx: Optional[int] = None, include_last_offset: bool = False,
                     on_bad_id: str = "check", max_rows: Any = None, grad_weights: bool = False,
                     out: Optional[Matrix] = None, wait_for: WaitFor = None) -> Matrix:
        """The table gradient of embedding_bag (vocab x cols, F32; vocab defaults to
        table.rows): each id's row gets its bag's row of grad (bags x cols) as it is (sum),
        times its weight, or divided by its bag's count (mean), folded in ascending id
        position; under 'max', column c of a bag's gradient goes to the row max_rows
        names (the forward's .max_rows or .max_rows_ids, needed). With out None a new
        matrix; with out given, added into it. grad_weights=True (mode 'sum', table
        needed) also sets .grad_weights on the result: the gradient of per_sample_weights,
        the shape of ids (NumPy, read back at once)."""
        fn = require("clembed_bag_backward", "Context.bag_backward")
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        if table is not None and not isinstance(table, Matrix):
            table = self._as_matrix(table, "table")
        keep: List[Any] = []
        off, _ = self._bags(ids, offsets, include_last_offset, keep)
        o = self._bag_options(ids, mode, per_sample_weights, padding_idx, on_bad_id, max_rows, keep)
        if out is None:
            if vocab is None and table is None:
                raise invalid("vocab", "is needed without a table (the gradient's rows)")
            out = self.empty(_count(vocab, "vocab") if vocab is not None else table.rows, grad.cols)
        gw = self.empty(ids.count, 1) if grad_weights else None
        self._run("clembed_bag_backward", fn,
                  (self._live, byref(grad._m), byref(ids._ids), byref(off._ids) if off is not None else None,
                   byref(o), byref(table._m) if table is not None else None, byref(out._m),
                   byref(gw._m) if gw is not None else None), wait_for, [out, gw])
        if gw is not None:
            out.grad_weights = gw.numpy().reshape(ids.shape)
        return out

    @api("Context.bag_optimizer_step", "clembed_bag_optimizer_step")
    def bag_optimizer_step(self, table: Matrix, grad: Any, ids: Any, offsets: Any = None, *, kind: str, lr: float,
                           state: Optional[Matrix] = None, state2: Optional[Matrix] = None, step: int = 1,
                           eps: Optional[float] = None, betas: Tuple[float, float] = (0.9, 0.999),
                           weight_decay: float = 0.0, stochastic_rounding: bool = False, rounding_seed: int = 0,
                           mode: str = "mean", per_sample_weights: Any = None,
                           padding_idx: Optional[int] = None, include_last_offset: bool = False,
                           on_bad_id: str = "check", max_rows: Any = None, wait_for: WaitFor = None) -> Matrix:
        """One fused step of table (in place, clembed_bag_optimizer_step) with the gradient
        grad (bags x cols) of the output of embedding_bag on these bags (the same ids,
        offsets, mode, per_sample_weights, padding_idx, include_last_offset and on_bad_id;
        max_rows: the forward's .max_rows or .max_rows_ids, for mode 'max'): each row's
        gradient is folded as bag_backward folds it, then stepped as by optimizer_step,
        whose optimizer keywords (kind, lr, state, state2, step, eps, betas,
        weight_decay, stochastic_rounding, rounding_seed) it takes. Only the rows with a
        contribution are touched. Returns table (its .event set)."""
        fn = require("clembed_bag_optimizer_step", "Context.bag_optimizer_step")
        if not isinstance(table, Matrix):
            raise wrong_type("table", "must be a clembed.Matrix (stepped in place), not %s" % type(table).__name__)
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        keep: List[Any] = []
        off, _ = self._bags(ids, offsets, include_last_offset, keep)
        bo = self._bag_options(ids, mode, per_sample_weights, padding_idx, on_bad_id, max_rows, keep)
        o = optimizer_options(kind, lr, state, state2, step, eps, betas, weight_decay, stochastic_rounding,
                              rounding_seed)
        self._run("clembed_bag_optimizer_step", fn,
                  (self._live, byref(grad._m), byref(ids._ids), byref(off._ids) if off is not None else None,
                   byref(bo), byref(o), byref(table._m)), wait_for, [table])
        return table

    @api("Context.bags_optimizer_step", "clembed_bags_optimizer_step")
    def bags_optimizer_step(self, features: Sequence[Dict[str, Any]], grad: Any,
                            optimizers: Sequence[Dict[str, Any]], *, wait_for: WaitFor = None) -> None:
        """The fused steps of every feature's table (in place, clembed_bags_optimizer_step)
        from grad (bags x the features' cols together, as embedding_bags returns it):
        features as embedding_bags takes them (each 'table' a Matrix), plus 'max_rows' for
        a 'max' feature; optimizers: one dict per feature of optimizer_step's optimizer
        keywords (kind, lr, state, state2, step, eps, betas, weight_decay,
        stochastic_rounding, rounding_seed). Features that
        share a table (the same Matrix) give the same optimizer (kind, values and states);
        their contributions are folded in feature order, then id order, and the table is
        stepped once."""
        fn = require("clembed_bags_optimizer_step", "Context.bags_optimizer_step")
        if isinstance(features, dict) or not isinstance(features, (list, tuple)):
            raise wrong_type("features", "must be a list of dicts (one per feature), not %s" % type(features).__name__)
        for f, d in enumerate(features):
            if not isinstance(d, dict) or not isinstance(d.get("table"), Matrix):
                raise wrong_type("features", "features[%d]['table'] must be a clembed.Matrix (stepped in place)" % f)
        if isinstance(optimizers, dict) or not isinstance(optimizers, (list, tuple)):
            raise wrong_type("optimizers", "must be a list of dicts (one per feature), not %s"
                             % type(optimizers).__name__)
        if len(optimizers) != len(features):
            raise invalid("optimizers", "has %d entries for %d features (one per feature)"
                          % (len(optimizers), len(features)))
        grad = self._grad(grad)
        keep: List[Any] = []
        plain = [{k: v for k, v in d.items() if k != "max_rows"} for d in features]
        arr, n, _, _ = self._bag_features(plain, keep, False)
        for f, d in enumerate(features):
            if d.get("max_rows") is not None:
                mr = d["max_rows"]
                mr = mr if isinstance(mr, Ids) else self._upload_ids(index_array(mr, "max_rows"), "max_rows")
                keep.append(mr)
                arr[f].options.max_rows = ctypes.pointer(mr._ids)
        os_ = _lib.sized_array(_lib.Optimizer_t, n)   # read with the stride of os_[0].struct_size
        for f, spec in enumerate(optimizers):
            unknown = sorted(set(spec) - set(OPTIMIZER_KEYS)) if isinstance(spec, dict) else None
            if unknown is None or unknown or "kind" not in spec or "lr" not in spec:
                raise invalid("optimizers", "optimizers[%d] is a dict of %s ('kind' and 'lr' needed), not %s"
                              % (f, ", ".join(OPTIMIZER_KEYS), sorted(spec) if isinstance(spec, dict)
                                 else type(spec).__name__))
            os_[f] = optimizer_options(**spec)
        tables: List[Matrix] = [d["table"] for d in features]
        self._run("clembed_bags_optimizer_step", fn, (self._live, arr, n, byref(grad._m), os_), wait_for, tables)

    @api("Context.renorm", "clembed_renorm")
    def renorm(self, table: Matrix, ids: Any, max_norm: float, norm_type: float = 2.0, *,
               wait_for: WaitFor = None) -> Matrix:
        """In place, as nn.Embedding(max_norm=...) does (PyTorch's embedding_renorm_): every
        distinct row in ids whose norm_type-norm exceeds max_norm is scaled by
        max_norm / (norm + 1e-7); other rows are not touched. norm_type > 0 or
        float('inf'). Returns table (f32, f16 or bf16)."""
        fn = require("clembed_renorm", "Context.renorm")
        if not isinstance(table, Matrix):
            raise wrong_type("table", "must be a clembed.Matrix (renormed in place), not %s" % type(table).__name__)
        ids = self._as_ids(ids)
        self._run("clembed_renorm", fn, (self._live, byref(table._m), byref(ids._ids), real(max_norm, "max_norm"),
                                         real(norm_type, "norm_type")), wait_for, [table])
        return table
