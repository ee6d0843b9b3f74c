"""EmbedOps, the forward of the layer on Context: the sinusoid table (positional), the
lookup, and the fused embed with its options, BERT's segments and norm among them; and
that layer's backward (embed_backward), which takes the same options.
"""
import ctypes
import math
from typing import Any, Dict, List, Optional, Union

import numpy as np

from . import _lib
from ._lib import lib, EXPONENTS, LAYOUTS, POSITIONS, NORMS
from ._errors import api, invalid, wrong_type, require
from ._args import DTYPE_NAMES, choice, count as _count, dtype_code, real, host_values
from ._events import WaitFor
from ._matrix import Matrix, Ids, DTypeLike
from ._context import ContextBase

byref = ctypes.byref


class EmbedOps(ContextBase):
    """Context's positional, lookup, embed and embed_backward (a mixin of clembed.Context)."""

    @api("Context.positional", "clembed_positional")
    def positional(self, length: int, dim: int, first: int = 0, base: float = 10000.0,
                   exponent: str = "pair", layout: str = "interleaved", *, out_dtype: DTypeLike = "f32",
                   out: Optional[Matrix] = None, wait_for: WaitFor = None) -> Matrix:
        """The sinusoid table of positions first .. first+length-1, shape (length, dim)."""
        s = _lib.Sinusoid_t(base=real(base, "base"), exponent=choice(EXPONENTS, exponent, "exponent"),
                            layout=choice(LAYOUTS, layout, "layout"))
        out = self._out(out, _count(length, "length"), _count(dim, "dim"), out_dtype, None)
        self._run("clembed_positional", lib.clembed_positional,
                  (self._live, byref(s), _count(first, "first"), byref(out._m)), wait_for, [out])
        return out

    @api("Context.lookup", "clembed_lookup")
    def lookup(self, table: Any, ids: Any, *, out: Optional[Matrix] = None, out_dtype: DTypeLike = "f32",
               wait_for: WaitFor = None) -> Matrix:
        """out[i] = table[ids[i]]; the output's shape is ids.shape + (cols,)."""
        table = self._as_matrix(table, "table")
        ids = self._as_ids(ids)
        out = self._out(out, ids.count, table.cols, out_dtype, ids.shape + (table.cols,))
        self._run("clembed_lookup", lib.clembed_lookup,
                  (self._live, byref(table._m), byref(ids._ids), byref(out._m)), wait_for, [out])
        return out

    @api("Context.quantize_rows", "clembed_quantize_rows")
    def quantize_rows(self, m: Any, dtype: DTypeLike, *, out: Optional[Matrix] = None,
                      wait_for: WaitFor = None) -> Matrix:
        """An f32 matrix quantized into one of FBGEMM's row-wise types ('i8_rowwise',
        'i4_rowwise', 'i2_rowwise', 'i8_tbe', 'i4_tbe', 'i2_tbe', 'fp8_rowwise'), bit for bit
        FBGEMM's quantizer (as Context.matrix(values, dtype=...) does from host values).
        Blocking. out: a matrix of that type and m's shape to write instead of a new one."""
        fn = require("clembed_quantize_rows", "Context.quantize_rows")
        m = self._as_matrix(m, "m")
        code = dtype_code(dtype, "dtype")
        if out is None:
            out = self.empty(m.rows, m.cols, code)
        elif not isinstance(out, Matrix) or out._m.dtype != code:
            raise invalid("out", "must be a %s Matrix as dtype says, not %s" % (
                DTYPE_NAMES[code], getattr(out, "dtype", type(out).__name__)))
        self._run("clembed_quantize_rows", fn, (self._live, byref(m._m), byref(out._m)), wait_for, [out])
        return out

    def _embed_options(self, table: Matrix, ids: Ids, keep: List[Any], scale: Any, positions: Any,
                       base: Any, exponent: Any, layout: Any, offset: Any, seq_len: Any,
                       sequence_offsets: Any, padding_idx: Any, on_bad_id: Any, dropout: Any,
                       seed: Any, layer: Optional[Dict[str, Any]] = None, padding_keeps_row: Any = False) -> Any:
        """clembed_embed_options from embed's arguments (uploads kept alive in `keep`);
        layer: BERT's segment and norm arguments (_layer_options)."""
        o = lib.clembed_embed_defaults()
        if (not isinstance(padding_keeps_row, (bool, int, np.bool_, np.integer))
                or int(padding_keeps_row) not in (0, 1)):
            raise invalid("padding_keeps_row", "is True or False, not %r" % (padding_keeps_row,))
        o.padding_keeps_row = 1 if padding_keeps_row else 0
        if isinstance(scale, str):
            if scale.lower() != "sqrt":
                raise invalid("scale", "is a number or 'sqrt', not %r" % scale)
            scale = math.sqrt(table.cols)
        self._common_options(o, ids, keep, scale, on_bad_id, padding_idx, seq_len, offset, sequence_offsets,
                             dropout, seed)
        if isinstance(positions, (Matrix, np.ndarray, list, tuple)):
            ptab = self._as_matrix(positions, "positions")
            keep.append(ptab)
            o.positions = POSITIONS["table"]
            o.position_table = ctypes.pointer(ptab._m)
        elif isinstance(positions, str) and positions.lower() == "table":
            raise invalid("positions", "takes the learned table itself (a Matrix or an array), not 'table'")
        else:
            o.positions = choice(POSITIONS, positions, "positions")
        o.sinusoid = _lib.Sinusoid_t(base=real(base, "base"), exponent=choice(EXPONENTS, exponent, "exponent"),
                                     layout=choice(LAYOUTS, layout, "layout"))
        if layer:
            self._layer_options(o, keep, **layer)
        return o

    def _norm_param(self, x: Any, argument: str) -> Optional[Matrix]:
        """A norm weight or bias: a Matrix as it is, or a (D,) / (1, D) array as a 1 x D F32 matrix."""
        if x is None or isinstance(x, Matrix):
            return x
        host, _, _ = host_values(x, argument)
        if host.ndim not in (1, 2) or (host.ndim == 2 and host.shape[0] != 1):
            raise invalid(argument, "is (D,) or (1, D), not of shape %s" % (host.shape,))
        return self.matrix(host.reshape(1, -1), "f32")

    def _layer_options(self, o: Any, keep: List[Any], segment_table: Any = None, segment_ids: Any = None,
                       norm: Any = None, norm_weight: Any = None, norm_bias: Any = None,
                       norm_eps: Any = 1e-5) -> None:
        """BERT's fields of clembed_embed_options (uploads kept alive in `keep`)."""
        if segment_table is not None:
            st = self._as_matrix(segment_table, "segment_table")
            keep.append(st)
            o.segment_table = ctypes.pointer(st._m)
        sids = self._as_ids(segment_ids, "segment_ids")
        if sids is not None:
            keep.append(sids)
            o.segment_ids = ctypes.pointer(sids._ids)
        o.norm.kind = choice(NORMS, norm, "norm")
        o.norm.eps = real(norm_eps, "norm_eps")
        for name, x in (("norm_weight", norm_weight), ("norm_bias", norm_bias)):
            m = self._norm_param(x, name)
            if m is not None:
                keep.append(m)
                setattr(o.norm, name[5:], ctypes.pointer(m._m))

    @api("Context.embed", "clembed_embed")
    def embed(self, table: Any, ids: Any, scale: Union[float, str] = 1.0, positions: Any = None,
              base: float = 10000.0, exponent: str = "pair", layout: str = "interleaved", offset: int = 0,
              seq_len: Optional[int] = None, sequence_offsets: Any = None, padding_idx: Optional[int] = None,
              on_bad_id: str = "check", dropout: float = 0.0, seed: int = 0, out_dtype: DTypeLike = "f32",
              out: Optional[Matrix] = None, *, wait_for: WaitFor = None, segment_table: Any = None,
              segment_ids: Any = None, norm: Optional[str] = None, norm_weight: Any = None, norm_bias: Any = None,
              norm_eps: float = 1e-5, padding_keeps_row: bool = False, remap: Any = None) -> Matrix:
        """The fused forward out[i] = dropout(scale * table[ids[i]] + P[p]), shape ids.shape + (cols,).

        scale: a number or 'sqrt' (sqrt(cols)). positions: None, 'sinusoid' (base, exponent
        'pair'|'index', layout 'interleaved'|'halves') or a Matrix / array of learned
        positions. Token i is at position first_b + i % seq_len, first_b =
        sequence_offsets[b] or offset. seq_len None: the last dimension of 2-D (or more) ids,
        0 (one sequence) for 1-D ids. padding_idx: None, or a row (negative counts from the
        end) whose token row counts as zero, or with padding_keeps_row=True is read as
        stored (PyTorch's F.embedding; either way it gets no gradient in the backward).
        on_bad_id: 'check' (deferred IndexOutOfRangeError), 'clamp', 'zero', 'wrap'.
        dropout, seed: inverted dropout with the Philox mask of seed. out_dtype 'f32', 'f16'
        or 'bf16' (or out, a Matrix to write).

        BERT's input layer, in the same pass: segment_table (token types x cols, a Matrix or
        array) and segment_ids (ids' shape; None: type 0 everywhere) add segment_table[s]
        after the positions; norm None, 'layer' (LayerNorm) or 'rms' (RMSNorm) of that sum,
        before dropout, with norm_weight and norm_bias (NumPy (cols,) or (1, cols), or a
        Matrix; None: 1 and 0; 'rms' has no bias) and norm_eps (BERT uses 1e-12).

        remap (a pruned table, FBGEMM's pruned_array; not with the layer's arguments): an
        integer array or Ids of one entry per id of the unpruned table, the kept row it reads
        or -1 for a pruned id (a zero row); ids and padding_idx are then ids of the unpruned
        table, checked against len(remap); an entry that is neither -1 nor a row is reported
        as a bad id (IndexOutOfRangeError naming 'remap').
        """
        table = self._as_matrix(table, "table")
        ids = self._as_ids(ids)
        keep: List[Any] = []
        layer = dict(segment_table=segment_table, segment_ids=segment_ids, norm=norm, norm_weight=norm_weight,
                     norm_bias=norm_bias, norm_eps=norm_eps)
        o = self._embed_options(table, ids, keep, scale, positions, base, exponent, layout, offset, seq_len,
                                sequence_offsets, padding_idx, on_bad_id, dropout, seed, layer, padding_keeps_row)
        rm = self._remap(remap, keep)
        if rm is not None:
            o.remap = ctypes.pointer(rm._ids)
        out = self._out(out, ids.count, table.cols, out_dtype, ids.shape + (table.cols,))
        self._run("clembed_embed", lib.clembed_embed,
                  (self._live, byref(table._m), byref(ids._ids), byref(o), byref(out._m)), wait_for, [out])
        return out

    _GRADS = ("table", "position_table", "segment_table", "norm_weight", "norm_bias")

    @api("Context.embed_backward", "clembed_embed_backward")
    def embed_backward(self, grad: Any, table: Any, ids: Any, *, grads: Optional[Dict[str, Matrix]] = None,
                       scale: Union[float, str] = 1.0, positions: Any = None, base: float = 10000.0,
                       exponent: str = "pair", layout: str = "interleaved", offset: int = 0,
                       seq_len: Optional[int] = None, sequence_offsets: Any = None,
                       padding_idx: Optional[int] = None, on_bad_id: str = "check", dropout: float = 0.0,
                       seed: int = 0, segment_table: Any = None, segment_ids: Any = None, norm: Optional[str] = None,
                       norm_weight: Any = None, norm_bias: Any = None, norm_eps: float = 1e-5,
                       padding_keeps_row: bool = False, wait_for: WaitFor = None) -> Dict[str, Matrix]:
        """The backward of embed with the same options (clembed_embed_backward): grad is the
        gradient of its output (ids.shape + (cols,)); the forward's rows are recomputed and
        its dropout replayed. Returns the gradients, a dict of F32 Matrices with the keys
        'table', 'position_table' (a learned positions table), 'segment_table',
        'norm_weight' and 'norm_bias' (when the forward has them). grads: the Matrices to add
        into (any of those keys), or None for new zeroed ones of every part the forward
        has. Every sum over tokens runs in ascending token order (the same bits on every
        device); without a norm, 'table' and 'position_table' are Context.backward's bits."""
        fn = require("clembed_embed_backward", "Context.embed_backward")
        table = self._as_matrix(table, "table")
        ids = self._as_ids(ids)
        grad = self._grad(grad)
        keep: List[Any] = []
        layer = dict(segment_table=segment_table, segment_ids=segment_ids, norm=norm, norm_weight=norm_weight,
                     norm_bias=norm_bias, norm_eps=norm_eps)
        o = self._embed_options(table, ids, keep, scale, positions, base, exponent, layout, offset, seq_len,
                                sequence_offsets, padding_idx, on_bad_id, dropout, seed, layer, padding_keeps_row)
        if grads is None:   # every part the forward has, zeroed
            shapes = {"table": (table.rows, table.cols)}
            if o.position_table and o.positions == POSITIONS["table"]:
                shapes["position_table"] = (o.position_table.contents.rows, table.cols)
            if o.segment_table:
                shapes["segment_table"] = (o.segment_table.contents.rows, table.cols)
            if o.norm.weight:
                shapes["norm_weight"] = (1, table.cols)
            if o.norm.bias:
                shapes["norm_bias"] = (1, table.cols)
            grads = {k: self.empty(r, c) for k, (r, c) in shapes.items()}
        elif not isinstance(grads, dict):
            raise wrong_type("grads", "must be a dict of clembed.Matrix (keys %s) or None, not %s"
                             % (", ".join(self._GRADS), type(grads).__name__))
        g = _lib.EmbedGrads_t()
        for k, m in grads.items():
            if k not in self._GRADS:
                raise invalid("grads", "has the key %r; the gradients are %s" % (k, ", ".join(self._GRADS)))
            if m is None:
                continue
            if not isinstance(m, Matrix):
                raise wrong_type("grads", "[%r] must be a clembed.Matrix, not %s" % (k, type(m).__name__))
            setattr(g, k, ctypes.pointer(m._m))
        self._run("clembed_embed_backward", fn,
                  (self._live, byref(grad._m), byref(table._m), byref(ids._ids), byref(o), byref(g)), wait_for,
                  list(grads.values()))
        return grads
