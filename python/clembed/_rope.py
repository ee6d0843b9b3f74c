"""RopeOps, rotary position embeddings on Context: the cos/sin cache (rope_cache) and its
application to queries and keys (rope), with the scalings of clembed_rope.
"""
import ctypes
from typing import Any, Dict, Optional

import numpy as np

from ._lib import ROPE_LAYOUTS, ROPE_SCALINGS
from ._errors import api, invalid, wrong_type, require
from ._args import choice, count as _count, real, host_values
from ._events import WaitFor
from ._matrix import Matrix, DTypeLike
from ._context import ContextBase

byref = ctypes.byref


class RopeOps(ContextBase):
    """Context's rope_cache and rope (a mixin of clembed.Context)."""

    @staticmethod
    def _rope(head_dim: int, opts: Dict[str, Any]) -> Any:
        r = require("clembed_rope_defaults", "RoPE")()
        r.head_dim = _count(head_dim, "head_dim")
        for k, v in opts.items():
            if k == "layout":
                r.layout = choice(ROPE_LAYOUTS, v, "layout")
            elif k == "scaling":
                r.scaling = choice(ROPE_SCALINGS, v, "scaling")
            elif k in ("rotary_dim", "original_max_position"):
                setattr(r, k, _count(v, k))
            elif k in ("base", "factor", "low_freq_factor", "high_freq_factor", "beta_fast",
                       "beta_slow", "attention_factor"):
                setattr(r, k, real(v, k))
            else:
                raise wrong_type(k, "is not a RoPE option (base, rotary_dim, layout, scaling, factor, "
                                 "original_max_position, low_freq_factor, high_freq_factor, beta_fast, "
                                 "beta_slow, attention_factor)")
        return r

    @api("Context.rope_cache", "clembed_rope_cache")
    def rope_cache(self, length: int, head_dim: int, first: int = 0, *, out_dtype: DTypeLike = "f32",
                   out: Optional[Matrix] = None, wait_for: WaitFor = None, **rope_options: Any) -> Matrix:
        """The cos/sin cache (length x rotary_dim): a*cos(p*w_k) in column k, a*sin(p*w_k)
        in column R/2 + k. rope_options: base, rotary_dim, layout ('neox'|'gptj'),
        scaling ('none'|'linear'|'ntk'|'yarn'|'llama3'), factor, original_max_position,
        low_freq_factor, high_freq_factor, beta_fast, beta_slow, attention_factor."""
        fn = require("clembed_rope_cache", "Context.rope_cache")
        r = self._rope(head_dim, rope_options)
        R = r.rotary_dim or r.head_dim
        out = self._out(out, _count(length, "length"), R, out_dtype, None)
        self._run("clembed_rope_cache", fn, (self._live, byref(r), _count(first, "first"), byref(out._m)),
                  wait_for, [out])
        return out

    @api("Context.rope", "clembed_rope_apply")
    def rope(self, x: Any, head_dim: int, positions: Any = None, offset: int = 0, inverse: bool = False, *,
             seq_len: Optional[int] = None, out: Optional[Matrix] = None, out_dtype: DTypeLike = "f32",
             wait_for: WaitFor = None, **rope_options: Any) -> Matrix:
        """Rotary embedding applied to x: a Matrix (T x C) or an array (T, C),
        (T, heads, head_dim) or (B, S, heads, head_dim) (then seq_len = S). Row i is at
        positions[i], or offset + i % seq_len. out may be x (in place). The result has
        x's shape."""
        fn = require("clembed_rope_apply", "Context.rope")
        r = self._rope(head_dim, rope_options)
        if isinstance(x, Matrix):
            xm = x
            shape = x.shape
        else:
            a, _, _ = host_values(x, "x")
            if a.ndim < 2:
                raise invalid("x", "has at least 2 dimensions, not shape %s" % (a.shape,))
            shape = a.shape
            if seq_len is None and a.ndim == 4:
                seq_len = a.shape[1]
            rows = int(np.prod(a.shape[:-2])) if a.ndim >= 3 else a.shape[0]
            xm = self.matrix(a.reshape(rows, -1))
        pos = self._as_ids(positions, "positions")
        out = self._out(out, xm.rows, xm.cols, out_dtype, shape)
        self._run("clembed_rope_apply", fn,
                  (self._live, byref(r), byref(xm._m), byref(pos._ids) if pos is not None else None,
                   _count(seq_len or 0, "seq_len"), _count(offset, "offset"), 1 if inverse else 0, byref(out._m)),
                  wait_for, [out])
        return out
