"""clembed.torch: PyTorch modules whose forward runs on a clembed context's OpenCL device.

    import torch, clembed.torch as ct
    emb = ct.EmbeddingBag(100_000, 64, mode="sum", optimizer="rowwise_adagrad", lr=0.05)
    out = emb(ids, offsets)            # a CPU torch.Tensor (B, 64)
    loss = model(out).sum(); loss.backward()   # emb's rows are stepped inside the backward

Imported only when used (PyTorch 1.13 or later; the rest of clembed never needs it).
Embedding, EmbeddingBag, EmbeddingBagCollection and BertEmbeddings are torch.nn.Modules over
CPU tensors; each forward is a torch.autograd.Function, so gradients flow to the rest of the
model as usual. With optimizer= 'sgd', 'adagrad', 'rowwise_adagrad' or 'adam' the tables are
updated inside the backward by clembed's fused sparse step (only the rows used are touched, no
dense gradient of a table is ever made) and .weight.grad stays None; with optimizer=None the
tables' gradients land in .weight.grad (dense, or sparse with sparse=True, as PyTorch's), for
any torch.optim optimizer.

Memory: where the device uses the host's memory (POCL and other CPU devices; found once per
context by a probe, see Bridge), tables, ids, outputs and gradients are the tensors' own memory
(CL_MEM_USE_HOST_PTR, synchronised by mapping, which copies nothing there); elsewhere each
crosses once each way, and Bridge.copies counts every such copy.
"""
import ctypes
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ._core import Context, Matrix, Ids, default_context
from ._errors import invalid, wrong_type
from ._events import opencl
from ._lib import Matrix_t, Ids_t, lib
from .nn import Optimizer, OPTIMIZERS, draw_seed

__all__ = ["Embedding", "EmbeddingBag", "EmbeddingBagCollection", "BertEmbeddings", "Bridge", "bridge"]

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_CODES = {"f32": 0, "f16": 1, "bf16": 2}
_TORCH = {v: k for k, v in _DTYPES.items()}
_USE_HOST_PTR = 0x8
_MAP_READ, _MAP_WRITE = 0x1, 0x2


def _cl() -> ctypes.CDLL:
    o = opencl()
    if not getattr(o, "_clembed_torch", False):
        o.clEnqueueMapBuffer.restype = ctypes.c_void_p
        o.clEnqueueMapBuffer.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint64,
                                         ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint, ctypes.c_void_p,
                                         ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        o.clEnqueueUnmapMemObject.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint,
                                              ctypes.c_void_p, ctypes.c_void_p]
        o._clembed_torch = True
    return o


class Bridge:
    """How CPU tensors reach one context's device.

    .shares: the probe's finding, made once: a buffer over a tensor's memory
    (CL_MEM_USE_HOST_PTR) that a clembed kernel writes shows the values in the tensor
    itself, so the device uses the host's memory in place. .zero_copy: tensors are used in
    place (shares, unless turned off); otherwise every tensor is written to or read from a
    device buffer, and .copies / .copied_bytes count those transfers (also the maps of a
    zero-copy buffer on a device that does not share memory, which never happens here).
    """

    def __init__(self, ctx: Context, zero_copy: Optional[bool] = None) -> None:
        self.ctx = ctx
        self.copies = 0
        self.copied_bytes = 0
        v = ctypes.c_uint64(0)
        self.host_pages = lib.clembed_tuning_value(ctx._live, b"host_pages", ctypes.byref(v)) == 0 and v.value != 0
        self.shares = self._probe()
        self.zero_copy = self.shares if zero_copy is None else bool(zero_copy)

    def _probe(self) -> bool:
        t = torch.zeros(16 * 16 + 1)[1:].view(16, 16)   # 4 bytes past the allocator's alignment
        try:
            m = self._wrap(t, "f32")
        except Exception:
            return False
        one = self.ctx.matrix(np.ones((1, 16), np.float32))
        self.ctx.lookup(one, np.zeros(16, np.int32), out=m)
        self.ctx.finish()
        shared = bool((t == 1).all())
        self._sync(m, t, _MAP_READ, count=False)
        m.release()
        return shared

    def reset_counts(self) -> None:
        self.copies = 0
        self.copied_bytes = 0

    # --- buffers over tensors
    def _over(self, t: torch.Tensor, argument: str) -> int:
        """A cl_mem over a contiguous tensor's own memory (CL_MEM_USE_HOST_PTR)."""
        err = ctypes.c_int()
        b = opencl().clCreateBuffer(self.ctx._cl_context(), 1 | _USE_HOST_PTR, t.numel() * t.element_size(),
                                    ctypes.c_void_p(t.data_ptr()), ctypes.byref(err))
        if err.value != 0 or not b:
            raise invalid(argument, "clCreateBuffer over its memory failed (OpenCL error %d)" % err.value)
        return b

    def _wrap(self, t: torch.Tensor, name: str) -> Matrix:
        """A Matrix over a contiguous 2-D float tensor's own memory."""
        b = self._over(t, "tensor")
        return Matrix(self.ctx, Matrix_t(buffer=b, offset=0, rows=t.shape[0], cols=t.shape[1], ld=0,
                                         dtype=_CODES[name]), owned=True, keep=t)

    def _sync(self, m: Matrix, t: torch.Tensor, flags: int, count: bool = True) -> None:
        """Maps and unmaps a buffer made over t: the host sees the device's writes
        (_MAP_READ) or the device sees the host's (_MAP_WRITE)."""
        n = t.numel() * t.element_size()
        if n == 0:
            return
        o, q, err = _cl(), self.ctx.queue, ctypes.c_int()
        p = o.clEnqueueMapBuffer(q, m.buffer, 1, flags, 0, n, 0, None, None, ctypes.byref(err))
        if err.value != 0 or not p:
            raise invalid("tensor", "mapping its buffer failed (OpenCL error %d)" % err.value)
        o.clEnqueueUnmapMemObject(q, m.buffer, p, 0, None, None)
        self.ctx.finish()        # waits, and raises what the kernels found (a bad id under 'check')
        if count and not self.shares:
            self.copies += 1
            self.copied_bytes += n

    def _in_place(self, t: torch.Tensor) -> bool:
        return self.zero_copy and t.numel() > 0

    def matrix(self, t: torch.Tensor, argument: str) -> Tuple[Matrix, torch.Tensor]:
        """A tensor the device reads (2-D view (-1, last)): (Matrix, the tensor kept)."""
        if not isinstance(t, torch.Tensor):
            raise wrong_type(argument, "must be a torch.Tensor, not %s" % type(t).__name__)
        if t.device.type != "cpu":
            raise invalid(argument, "is on %s; clembed.torch takes CPU tensors" % t.device)
        if t.dtype not in _DTYPES:
            raise invalid(argument, "is %s; float32, float16 or bfloat16 expected" % t.dtype)
        t = t.detach().contiguous()
        t2 = t.reshape(-1, t.shape[-1]) if t.dim() != 2 else t
        name = _DTYPES[t.dtype]
        if self._in_place(t2):
            return self._wrap(t2, name), t2
        m = self.ctx.empty(t2.shape[0], t2.shape[1], name)
        self.copy(m, t2, True)
        return m, t2

    def ids(self, t: Any, argument: str = "ids") -> Tuple[Ids, torch.Tensor]:
        """Integer ids (any shape) for the device: (Ids, the tensor kept)."""
        if not isinstance(t, torch.Tensor):
            t = torch.as_tensor(np.asarray(t))
        if t.device.type != "cpu":
            raise invalid(argument, "is on %s; clembed.torch takes CPU tensors" % t.device)
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise invalid(argument, "are %s; integer ids expected" % t.dtype)
        if t.dtype not in (torch.int32, torch.int64):
            t = t.to(torch.int64)
        t = t.detach().contiguous()
        shape = tuple(t.shape)
        if self._in_place(t):
            b = self._over(t, argument)
            return Ids(self.ctx, Ids_t(buffer=b, offset=0, count=t.numel(), type=int(t.dtype == torch.int64)),
                       owned=True, shape=shape, keep=t), t
        if t.numel():
            self.copies += 1
            self.copied_bytes += t.numel() * t.element_size()
        ids = self.ctx.ids(t.numpy())
        return ids, t

    def output(self, rows: int, cols: int, dtype: torch.dtype) -> Tuple[Matrix, torch.Tensor]:
        """An output the device writes: (Matrix, the tensor that will hold it)."""
        t = torch.empty(rows, cols, dtype=dtype)
        if self._in_place(t):
            return self._wrap(t, _DTYPES[dtype]), t
        return self.ctx.empty(rows, cols, _DTYPES[dtype]), t

    def copy(self, m: Matrix, t: torch.Tensor, to_device: bool) -> None:
        """t written into m, or m read into t (blocking; counted)."""
        if not t.numel():
            return
        fn = lib.clembed_matrix_write if to_device else lib.clembed_matrix_read
        st = fn(self.ctx._live, ctypes.byref(m._m), ctypes.c_void_p(t.data_ptr()), _CODES[_DTYPES[t.dtype]])
        self.ctx._check(st, "clembed_matrix_write" if to_device else "clembed_matrix_read")
        self.copies += 1
        self.copied_bytes += t.numel() * t.element_size()

    def done(self, m: Matrix, t: torch.Tensor) -> torch.Tensor:
        """The device's writes to m, in t (after output() or table())."""
        if m._keep is t:
            self._sync(m, t, _MAP_READ)
        else:
            self.copy(m, t, False)
        return t

    def push(self, m: Matrix, t: torch.Tensor) -> None:
        """The host's writes to t, seen by the device (a table the host changed)."""
        if m._keep is t:
            self._sync(m, t, _MAP_WRITE)
        else:
            self.copy(m, t, True)

    def table(self, t: torch.Tensor) -> Matrix:
        """A long-lived table over t's memory (zero copy) or on the device (t copied in)."""
        if self._in_place(t):
            return self._wrap(t, _DTYPES[t.dtype])
        m = self.ctx.empty(t.shape[0], t.shape[1], _DTYPES[t.dtype])
        self.push(m, t)
        return m


_bridges: "weakref.WeakKeyDictionary[Context, Bridge]" = weakref.WeakKeyDictionary()


def bridge(ctx: Optional[Context] = None, zero_copy: Optional[bool] = None) -> Bridge:
    """The Bridge of a context (made on first use; zero_copy=False makes the modules made
    afterwards copy every tensor, for devices where that is faster)."""
    ctx = ctx if ctx is not None else default_context()
    b = _bridges.get(ctx)
    if b is None:
        b = _bridges[ctx] = Bridge(ctx, zero_copy)
    elif zero_copy is not None:
        b.zero_copy = bool(zero_copy)
    return b


# ------------------------------------------------------------------ tables

class _Table:
    """A table's two faces: the Parameter the model sees (CPU) and the Matrix the device
    uses, the same memory under zero copy. `fresh` says whether the host's copy is current
    (else the device's steps are read back when the weight is next used)."""

    def __init__(self, b: Bridge, w2: torch.Tensor) -> None:
        self.bridge = b
        self.w2 = w2                      # 2-D, the Parameter's storage
        self.matrix = b.table(w2)
        self.fresh = True
        self.version = w2._version

    def device_changed(self, now: bool = False) -> None:
        """The device wrote the table: the host's copy is made current at once (zero copy,
        or `now`: a table the host also steps) or when the weight is next used."""
        if now or self.matrix._keep is self.w2:
            self.bridge.done(self.matrix, self.w2)
        else:
            self.fresh = False

    def host(self) -> None:
        if not self.fresh:
            self.bridge.done(self.matrix, self.w2)
            self.fresh = True

    def ready(self) -> Matrix:
        """The Matrix for a kernel: the host's writes since the last use pushed first
        (torch.optim's in-place steps, load_state_dict; PyTorch's version counter tells)."""
        if self.w2._version != self.version:
            self.bridge.push(self.matrix, self.w2)
            self.version = self.w2._version
        return self.matrix


_MADV_HUGEPAGE = 14
_HUGE = 2 << 20


def _host_tensor(b: Bridge, rows: int, cols: int, dtype: Any) -> torch.Tensor:
    """A new table's tensor; on a device whose tuning entry sets host_pages (its memory is
    the host's), a large one is advised for transparent huge pages before its first touch,
    as clembed's own large buffers are (rows gathered at random then miss the TLB less)."""
    t = torch.empty(rows, cols, dtype=dtype)
    n = t.numel() * t.element_size()
    if b.host_pages and b.zero_copy and n >= 2 * _HUGE:
        start = (t.data_ptr() + _HUGE - 1) // _HUGE * _HUGE
        end = (t.data_ptr() + n) // _HUGE * _HUGE
        if end > start:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_HUGEPAGE)
            except (OSError, AttributeError):
                pass        # advice only
    return t


def _new_weight(b: Bridge, rows: int, cols: int, dtype: Any, seed: Optional[int], init: Optional[torch.Tensor],
                fill: Optional[float], argument: str) -> Tuple[torch.Tensor, Optional[int]]:
    """A table's tensor: `init` copied, a constant `fill`, or (seed not None) to be drawn
    on the device by the caller: (the tensor, the seed)."""
    if dtype not in _DTYPES:
        raise invalid("dtype", "is torch.float32, torch.float16 or torch.bfloat16, not %s" % (dtype,))
    if init is not None and (not isinstance(init, torch.Tensor) or tuple(init.shape) != (rows, cols)):
        raise invalid(argument, "is a torch.Tensor of shape %s" % ((rows, cols),))
    w = _host_tensor(b, rows, cols, dtype)
    if init is not None:
        w.copy_(init.detach())
        return w, None
    if fill is not None:
        w.fill_(fill)
        return w, None
    return w, draw_seed(seed)


class _TableModule(torch.nn.Module):
    """A module that owns one table as .weight (state_dict key 'weight', optimizer state
    under 'momentum1', 'momentum2', 'optimizer_step')."""

    def _init_table(self, ctx: Context, rows: int, cols: int, dtype: Any, seed: Optional[int] = None,
                    std: float = 1.0, init: Optional[torch.Tensor] = None, padding_idx: Optional[int] = None,
                    fill: Optional[float] = None, shape: Optional[Tuple[int, ...]] = None,
                    optimizer: Optional[Optimizer] = None, argument: str = "weight") -> None:
        b = bridge(ctx)
        w, self.seed = _new_weight(b, rows, cols, dtype, seed, init, fill, argument)
        self.weight = torch.nn.Parameter(w.reshape(shape) if shape is not None else w)
        # detach() shares the Parameter's version counter (.data would not): in-place steps show
        self._t = _Table(b, self.weight.detach().view(rows, cols))
        self._opt = optimizer
        if self.seed is not None:    # N(0, std) from Philox(seed), drawn on the device: the same everywhere
            ctx.init(self._t.matrix, "normal", std=std, seed=self.seed)
            if padding_idx is not None:
                self._t.matrix.rows_view(padding_idx, 1).write(np.zeros(cols, np.float32))
            self._t.device_changed(now=True)

    def __getattr__(self, name: str) -> Any:
        if name == "weight" and "_t" in self.__dict__:
            self.__dict__["_t"].host()
        return super().__getattr__(name)

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        self._t.host()
        super()._save_to_state_dict(destination, prefix, keep_vars)
        opt = self._opt
        if opt is not None:
            s, s2, t = opt.state(self._t.matrix)
            if s is not None:
                destination[prefix + "momentum1"] = torch.from_numpy(s.numpy(np.float32).copy())
            if s2 is not None:
                destination[prefix + "momentum2"] = torch.from_numpy(s2.numpy(np.float32).copy())
            destination[prefix + "optimizer_step"] = torch.tensor(t, dtype=torch.int64)

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any, strict: bool,
                              missing_keys: List[str], unexpected_keys: List[str], error_msgs: List[str]) -> None:
        self._t.host()
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        keys = [prefix + k for k in ("momentum1", "momentum2", "optimizer_step")]
        for k in keys:            # the optimizer's keys, which nn.Module's loader calls unexpected
            while k in unexpected_keys:
                unexpected_keys.remove(k)
        opt = self._opt
        if opt is None:
            unexpected_keys += [k for k in keys if k in state_dict]
            return
        s = opt._states(self._t.matrix)
        for i, k in enumerate(keys[:2]):
            if s[i] is None:
                if k in state_dict:
                    unexpected_keys.append(k)
            elif k not in state_dict:
                missing_keys.append(k)
            else:
                a = torch.as_tensor(state_dict[k]).detach().to(torch.float32)
                if tuple(a.shape) != (s[i].rows, s[i].cols):
                    error_msgs.append("size mismatch for %s: the checkpoint's shape is %s, the optimizer's state %s"
                                      % (k, tuple(a.shape), (s[i].rows, s[i].cols)))
                else:
                    s[i].write(np.ascontiguousarray(a.numpy()))
        if keys[2] in state_dict:
            s[2] = int(torch.as_tensor(state_dict[keys[2]]).item())
        else:
            missing_keys.append(keys[2])


class _Weight(_TableModule):
    """A table alone (a member of EmbeddingBagCollection.embedding_bags or of BertEmbeddings)."""

    def __init__(self, ctx: Context, rows: int, cols: int, dtype: Any, seed: Optional[int], std: float,
                 optimizer: Optional[Optimizer], padding_idx: Optional[int] = None,
                 fill: Optional[float] = None, shape: Optional[Tuple[int, ...]] = None) -> None:
        super().__init__()
        self._init_table(ctx, rows, cols, dtype, seed, std, None, padding_idx, fill, shape, optimizer)

    def extra_repr(self) -> str:
        return "%d, %d" % tuple(self._t.w2.shape)


def _make_optimizer(ctx: Context, optimizer: Any, lr: Optional[float], eps: Optional[float],
                    betas: Tuple[float, float], weight_decay: float, sparse: bool,
                    stochastic_rounding: Any = False, rounding_seed: int = 0) -> Optional[Optimizer]:
    if stochastic_rounding not in (False, True, 0, 1):
        raise wrong_type("stochastic_rounding", "must be True or False, not %r" % (stochastic_rounding,))
    if optimizer is None:
        if stochastic_rounding:
            raise invalid("stochastic_rounding", "is for a fused optimizer's step (optimizer='sgd', ...), "
                          "not optimizer=None")
        return None
    if sparse:
        raise invalid("sparse", "is for optimizer=None (a fused optimizer makes no gradient)")
    if isinstance(optimizer, Optimizer):
        if stochastic_rounding:
            raise invalid("stochastic_rounding", "is the clembed.Optimizer's own setting here "
                          "(clembed.Optimizer(..., stochastic_rounding=True, seed=...))")
        return optimizer
    if not isinstance(optimizer, str) or optimizer.lower() not in OPTIMIZERS:
        raise invalid("optimizer", "is one of %s or None, not %r" % (", ".join(OPTIMIZERS), optimizer))
    if lr is None:
        raise invalid("lr", "is needed with optimizer=%r" % optimizer)
    return Optimizer(ctx, optimizer.lower(), lr, eps, betas, weight_decay,
                     stochastic_rounding=bool(stochastic_rounding), seed=rounding_seed)


def _context(ctx: Optional[Context]) -> Context:
    if ctx is not None and not isinstance(ctx, Context):
        raise wrong_type("ctx", "must be a clembed.Context or None, not %s" % type(ctx).__name__)
    return ctx if ctx is not None else default_context()


def _count(x: Any, argument: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x <= 0:
        raise invalid(argument, "is a positive integer, not %r" % (x,))
    return int(x)


def _padding(rows: int, padding_idx: Any) -> Optional[int]:
    if padding_idx is None:
        return None
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, (int, np.integer)) \
            or not -rows <= padding_idx < rows:
        raise invalid("padding_idx", "must be a row of the table (-%d .. %d), not %r" % (rows, rows - 1, padding_idx))
    return int(padding_idx) % rows


def _grad_matrix(b: Bridge, g: torch.Tensor) -> Matrix:
    """An output gradient for the device (float32 or float16 kept, others made float32)."""
    g = g.detach()
    if g.dtype not in (torch.float32, torch.float16):
        g = g.to(torch.float32)
    return b.matrix(g.reshape(-1, g.shape[-1]), "grad")[0]


def _dense(b: Bridge, m: Matrix, dtype: torch.dtype, shape: Optional[Tuple[int, ...]] = None) -> torch.Tensor:
    """A gradient Matrix clembed made (F32) as a tensor (a read, counted)."""
    t = torch.empty(m.rows, m.cols)
    b.copy(m, t, False)
    t = t if dtype == torch.float32 else t.to(dtype)
    return t.reshape(shape) if shape is not None else t


# ------------------------------------------------------------------ Embedding

def _weight_grad(mod: "_Layer", ids: torch.Tensor, gw: torch.Tensor) -> torch.Tensor:
    """The dense gradient, or with sparse=True the rows the ids touch (padding left out),
    coalesced: what PyTorch's sparse gradient sums to."""
    if not mod.sparse:
        return gw
    rows = torch.unique(ids.reshape(-1).to(torch.int64))
    if mod.padding_idx is not None:
        rows = rows[rows != mod.padding_idx]
    return torch.sparse_coo_tensor(rows.unsqueeze(0), gw[rows], gw.shape).coalesce()


class _Layer(_TableModule):
    """What Embedding and EmbeddingBag share: one table, its settings, the optimizer."""

    def _layer_setup(self, ctx: Optional[Context], num_embeddings: Any, embedding_dim: Any, padding_idx: Any,
                     max_norm: Any, norm_type: Any, optimizer: Any, lr: Any, eps: Any, betas: Any,
                     weight_decay: Any, sparse: Any, dtype: Any, seed: Any, weight: Optional[torch.Tensor],
                     stochastic_rounding: Any = False) -> None:
        self.ctx = _context(ctx)
        self.num_embeddings = _count(num_embeddings, "num_embeddings")
        self.embedding_dim = _count(embedding_dim, "embedding_dim")
        self.padding_idx = _padding(self.num_embeddings, padding_idx)
        self.max_norm = None if max_norm is None else float(max_norm)
        self.norm_type = float(norm_type)
        self.sparse = bool(sparse)
        opt = _make_optimizer(self.ctx, optimizer, lr, eps, betas, weight_decay, self.sparse, stochastic_rounding,
                              0 if seed is None else seed)
        self._init_table(self.ctx, self.num_embeddings, self.embedding_dim, dtype, seed, 1.0, weight,
                         self.padding_idx, optimizer=opt, argument="embeddings")

    @property
    def optimizer(self) -> Optional[Optimizer]:
        """The fused optimizer (a clembed.Optimizer), or None."""
        return self._opt

    @classmethod
    def from_pretrained(cls, embeddings: torch.Tensor, freeze: bool = True, **kwargs: Any) -> Any:
        """A layer over a copy of `embeddings` (a 2-D float tensor; its dtype kept unless
        dtype= says otherwise), as PyTorch's from_pretrained: freeze=True makes
        .weight.requires_grad False. The other arguments are the constructor's."""
        if not isinstance(embeddings, torch.Tensor) or embeddings.dim() != 2:
            raise invalid("embeddings", "is a 2-D torch.Tensor")
        kwargs.setdefault("dtype", embeddings.dtype if embeddings.dtype in _DTYPES else torch.float32)
        m = cls(embeddings.shape[0], embeddings.shape[1], _weight=embeddings, **kwargs)
        m.weight.requires_grad = not freeze
        return m

    def extra_repr(self) -> str:
        return "%d, %d, padding_idx=%r, optimizer=%r, device=%r" % (
            self.num_embeddings, self.embedding_dim, self.padding_idx, self._opt.kind if self._opt else None,
            self.ctx.device_name)



class _EmbeddingFn(torch.autograd.Function):
    @staticmethod
    def forward(fctx: Any, weight: torch.Tensor, ids: torch.Tensor, mod: "Embedding") -> torch.Tensor:
        b, tab = mod._t.bridge, mod._t.ready()
        i, it = b.ids(ids)
        if mod.max_norm is not None:
            mod.ctx.renorm(tab, i, mod.max_norm, mod.norm_type)
            mod._t.device_changed(now=mod._opt is None)
        m, out = b.output(i.count, mod.embedding_dim, mod._t.w2.dtype)
        mod.ctx.embed(tab, i, scale=mod.scale, positions=mod.positions, padding_idx=mod.padding_idx,
                      padding_keeps_row=True, out=m)
        b.done(m, out)
        fctx.mod, fctx.ids = mod, it
        return out.reshape(tuple(it.shape) + (mod.embedding_dim,))

    @staticmethod
    def backward(fctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], None, None]:
        mod, ids = fctx.mod, fctx.ids
        b = mod._t.bridge
        g = _grad_matrix(b, grad)
        i, _ = b.ids(ids)
        if mod._opt is not None:
            mod._opt.step(mod._t.matrix, g, i, scale=mod.scale, padding_idx=mod.padding_idx)
            mod._t.device_changed()
            return None, None, None
        if not fctx.needs_input_grad[0]:
            return None, None, None
        dense = mod.ctx.backward(g, i, mod.num_embeddings, scale=mod.scale, padding_idx=mod.padding_idx)
        return _weight_grad(mod, ids, _dense(b, dense, mod._t.w2.dtype)), None, None


class Embedding(_Layer):
    """torch.nn.Embedding on a clembed device: forward(ids) -> ids.shape + (embedding_dim,).

    .weight starts N(0, 1) from Philox(seed) (seed None: a draw from clembed.manual_seed's
    generator), the padding row zero; padding_idx's row is read as stored and gets no
    gradient, as PyTorch's. scale (a number or 'sqrt') multiplies the rows; positions None,
    'sinusoid' or a learned (positions x dim) table added after (not trained); max_norm
    renorms the rows the ids read first, in place, as PyTorch's. optimizer ('sgd',
    'adagrad', 'rowwise_adagrad', 'adam' or a clembed.Optimizer; lr, eps, betas,
    weight_decay; stochastic_rounding=True: an f16 or bf16 table written back with
    stochastic rounding, from Philox(seed or 0, step, row, column), as
    clembed.Optimizer(..., stochastic_rounding=True, seed=seed) does; FBGEMM's TBE's
    stochastic_rounding): the fused sparse step inside the backward, .weight.grad stays None;
    None: .weight.grad as nn.Embedding's, dense or, with sparse=True, a sparse COO tensor
    (coalesced: each row the ids touch once). dtype: the table's and the output's.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, scale: Any = 1.0, positions: Any = None,
                 optimizer: Any = None, lr: Optional[float] = None, eps: Optional[float] = None,
                 betas: Tuple[float, float] = (0.9, 0.999), weight_decay: float = 0.0,
                 dtype: torch.dtype = torch.float32, ctx: Optional[Context] = None, seed: Optional[int] = None, *,
                 norm_type: float = 2.0, sparse: bool = False, stochastic_rounding: bool = False,
                 _weight: Optional[torch.Tensor] = None) -> None:
        super().__init__()
        self._layer_setup(ctx, num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, optimizer, lr, eps,
                          betas, weight_decay, sparse, dtype, seed, _weight, stochastic_rounding)
        if isinstance(scale, str) and scale.lower() != "sqrt":
            raise invalid("scale", "is a number or 'sqrt', not %r" % scale)
        self.scale = float(np.sqrt(self.embedding_dim)) if isinstance(scale, str) else float(scale)
        if positions is not None and not isinstance(positions, (str, Matrix)):
            positions = self.ctx.matrix(np.ascontiguousarray(torch.as_tensor(positions).detach()
                                                             .to(torch.float32).numpy()))
        self.positions = positions

    def forward(self, input: Any) -> torch.Tensor:
        return _EmbeddingFn.apply(self.weight, _as_ids(input), self)


def _as_ids(x: Any) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))


# ------------------------------------------------------------------ EmbeddingBag

def _csr(b: Bridge, ids: torch.Tensor, offsets: Optional[torch.Tensor], include_last_offset: bool,
         argument: str = "offsets") -> Tuple[Optional[Ids], int, Optional[torch.Tensor]]:
    """(the bags' CSR offsets on the device or None for 2-D ids, the bags, the CSR tensor)."""
    if ids.dim() == 2:
        if offsets is not None:
            raise invalid(argument, "must be None for 2-D input (each row is a bag)")
        return None, ids.shape[0], None
    if ids.dim() != 1:
        raise invalid("input", "is 1-D (with offsets) or 2-D (a bag per row), not of shape %s" % (tuple(ids.shape),))
    if offsets is None:
        raise invalid(argument, "is needed with 1-D input")
    off = _as_ids(offsets).reshape(-1).to(torch.int64)
    if include_last_offset:
        if off.numel() == 0:
            raise invalid(argument, "has no entry; with include_last_offset it holds bags + 1")
        csr = off
    else:
        csr = torch.cat([off, torch.tensor([ids.numel()], dtype=torch.int64)])
    d, t = b.ids(csr, argument)
    return d, csr.numel() - 1, t


class _BagFn(torch.autograd.Function):
    @staticmethod
    def forward(fctx: Any, weight: torch.Tensor, psw: Optional[torch.Tensor], ids: torch.Tensor,
                offsets: Optional[torch.Tensor], mod: "EmbeddingBag") -> torch.Tensor:
        b, tab = mod._t.bridge, mod._t.ready()
        i, it = b.ids(ids, "input")
        off, bags, csr = _csr(b, it, offsets, mod.include_last_offset)
        w = None
        if psw is not None:
            if psw.numel() != i.count:
                raise invalid("per_sample_weights", "has %d values for %d ids" % (psw.numel(), i.count))
            w = b.matrix(psw.detach().reshape(-1, 1).to(torch.float32), "per_sample_weights")[0]
        if mod.max_norm is not None:
            mod.ctx.renorm(tab, i, mod.max_norm, mod.norm_type)
            mod._t.device_changed(now=mod._opt is None)
        m, out = b.output(bags, mod.embedding_dim, mod._t.w2.dtype)
        mod.ctx.embedding_bag(tab, i, off, mode=mod.mode, per_sample_weights=w, padding_idx=mod.padding_idx,
                              include_last_offset=off is not None, out=m)
        b.done(m, out)
        fctx.mod, fctx.ids, fctx.csr, fctx.w = mod, it, csr, w
        fctx.psw_shape = psw.shape if psw is not None else None
        fctx.max_rows = getattr(m, "max_rows_ids", None)
        return out

    @staticmethod
    def backward(fctx: Any, grad: torch.Tensor) -> Tuple[Any, ...]:
        mod = fctx.mod
        b = mod._t.bridge
        g = _grad_matrix(b, grad)
        i, _ = b.ids(fctx.ids, "input")
        off = b.ids(fctx.csr, "offsets")[0] if fctx.csr is not None else None
        opts = dict(mode=mod.mode, per_sample_weights=fctx.w, padding_idx=mod.padding_idx,
                    include_last_offset=off is not None, max_rows=fctx.max_rows)
        gpsw = None
        if fctx.needs_input_grad[1]:   # d/d per_sample_weights (mode 'sum'): the table read again
            gg = mod.ctx.bag_backward(g, i, off, table=mod._t.matrix, grad_weights=True, **opts)
            gpsw = torch.from_numpy(gg.grad_weights.reshape(-1).copy()).reshape(fctx.psw_shape)
        if mod._opt is not None:
            mod._opt.bag_step(mod._t.matrix, g, i, off, **opts)
            mod._t.device_changed()
            return None, gpsw, None, None, None
        if not fctx.needs_input_grad[0]:
            return None, gpsw, None, None, None
        gw = _dense(b, mod.ctx.bag_backward(g, i, off, vocab=mod.num_embeddings, **opts), mod._t.w2.dtype)
        return _weight_grad(mod, fctx.ids, gw), gpsw, None, None, None


class EmbeddingBag(_Layer):
    """torch.nn.EmbeddingBag on a clembed device: forward(input, offsets=None,
    per_sample_weights=None) -> (bags, embedding_dim), PyTorch's conventions (2-D input: a
    bag per row; 1-D input with offsets of the bags' starts, or bags + 1 entries with
    include_last_offset; mode 'sum', 'mean' or 'max'; per_sample_weights with 'sum', which
    get their own gradient; padding_idx left out of its bags). The table, the optimizer
    and sparse as Embedding's.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "mean", padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, norm_type: float = 2.0, include_last_offset: bool = False,
                 optimizer: Any = None, lr: Optional[float] = None, eps: Optional[float] = None,
                 betas: Tuple[float, float] = (0.9, 0.999), weight_decay: float = 0.0, sparse: bool = False,
                 dtype: torch.dtype = torch.float32, ctx: Optional[Context] = None, seed: Optional[int] = None,
                 _weight: Optional[torch.Tensor] = None, *, stochastic_rounding: bool = False) -> None:
        super().__init__()
        if not isinstance(mode, str) or mode.lower() not in ("sum", "mean", "max"):
            raise invalid("mode", "is 'sum', 'mean' or 'max', not %r" % (mode,))
        self.mode = mode.lower()
        self.include_last_offset = bool(include_last_offset)
        self._layer_setup(ctx, num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, optimizer, lr, eps,
                          betas, weight_decay, sparse, dtype, seed, _weight, stochastic_rounding)

    def forward(self, input: Any, offsets: Any = None, per_sample_weights: Optional[torch.Tensor] = None
                ) -> torch.Tensor:
        if per_sample_weights is not None and self.mode != "sum":
            raise invalid("per_sample_weights", "are for mode 'sum' only, not %r" % self.mode)
        return _BagFn.apply(self.weight, per_sample_weights, _as_ids(input), offsets, self)

    def extra_repr(self) -> str:
        return super().extra_repr() + ", mode=%r" % self.mode


# ------------------------------------------------------------------ EmbeddingBagCollection

_POOLING = {"sum": "sum", "mean": "mean", "max": "max"}


def _spec(t: Any, k: int) -> Dict[str, Any]:
    """A table's settings from a dict or an object with the same attributes (TorchRec's
    EmbeddingBagConfig: name, num_embeddings, embedding_dim, feature_names, pooling)."""
    get = (lambda n, d=None: t.get(n, d)) if isinstance(t, dict) else (lambda n, d=None: getattr(t, n, d))
    name = get("name")
    if not isinstance(name, str) or not name:
        raise invalid("tables", "tables[%d] has no name" % k)
    pooling = get("pooling", "sum")
    pooling = getattr(pooling, "name", pooling)      # TorchRec's PoolingType.SUM
    if not isinstance(pooling, str) or pooling.lower() not in _POOLING:
        raise invalid("tables", "tables[%d] ('%s') has pooling %r: 'sum', 'mean' or 'max'" % (k, name, pooling))
    feats = list(get("feature_names", None) or [name])
    return dict(name=name, rows=_count(get("num_embeddings"), "tables[%d].num_embeddings" % k),
                cols=_count(get("embedding_dim"), "tables[%d].embedding_dim" % k), features=feats,
                pooling=pooling.lower(), dtype=get("dtype", None))


class _BagsFn(torch.autograd.Function):
    @staticmethod
    def forward(fctx: Any, anchor: torch.Tensor, batch: Any, mod: "EmbeddingBagCollection",
                *weights: torch.Tensor) -> torch.Tensor:
        b = mod._bridge
        features = mod._features(batch)
        m, out = b.output(batch["bags"], mod._cols, torch.float32)
        mod.ctx.embedding_bags(features, out=m)
        b.done(m, out)
        fctx.mod, fctx.features = mod, features
        fctx.max_rows = m.max_rows_ids
        return out

    @staticmethod
    def backward(fctx: Any, grad: torch.Tensor) -> Tuple[Any, ...]:
        mod, features = fctx.mod, fctx.features
        b = mod._bridge
        g = _grad_matrix(b, grad)
        feats = [dict(f, max_rows=mr) if mr is not None else f for f, mr in zip(features, fctx.max_rows)]
        nones = (None, None, None)
        if mod._opt is not None:
            mod._opt.bags_step(feats, g)
            for t in mod._ordered:
                t._t.device_changed()
            return nones + (None,) * len(mod._ordered)
        grads: Dict[int, Matrix] = {}
        col = 0
        for f, d in zip(mod._layout, feats):   # each feature's block of grad's columns, into its table's gradient
            t = mod._ordered[mod._table_index[f[1]]]
            gv = Matrix(mod.ctx, Matrix_t(buffer=g._m.buffer, offset=g._m.offset + col, rows=g.rows,
                                          cols=t._t.w2.shape[1], ld=g.cols, dtype=g._m.dtype), owned=False, keep=g)
            col += t._t.w2.shape[1]
            k = id(t)
            grads[k] = mod.ctx.bag_backward(gv, d["ids"], d["offsets"], vocab=t._t.w2.shape[0], mode=d["mode"],
                                            per_sample_weights=d.get("per_sample_weights"),
                                            include_last_offset=True, max_rows=d.get("max_rows"), out=grads.get(k))
        out = tuple(_dense(b, grads[id(t)], t._t.w2.dtype) if id(t) in grads and fctx.needs_input_grad[3 + j]
                    else None for j, t in enumerate(mod._ordered))
        return nones + out


class EmbeddingBagCollection(torch.nn.Module):
    """TorchRec's EmbeddingBagCollection on a clembed device: many tables, each pooling the
    bags of its features, every feature of a batch in one clembed_embedding_bags call.

    tables: dicts (or TorchRec EmbeddingBagConfigs) with name, num_embeddings,
    embedding_dim, feature_names (default [name]), pooling ('sum', 'mean', 'max' or
    TorchRec's PoolingType), dtype (default the collection's). The tables are
    .embedding_bags[name].weight (state_dict keys 'embedding_bags.<name>.weight', as
    TorchRec's), N(0, 1) from Philox(seed + the table's index) unless init_std says
    otherwise. forward(keys, values, lengths=None, offsets=None, weights=None) takes a
    batch as TorchRec's KeyedJaggedTensor holds it (or a KeyedJaggedTensor itself): keys
    the feature names, values every id of feature 0's B bags, then feature 1's, ...;
    lengths (len(keys) * B) or offsets (len(keys) * B + 1); weights (per id, optional, no
    gradient; the 'sum' tables weight their ids). Returns (B, sum of the features' dims),
    the features in the order of the tables and their feature_names, or with to_dict=True
    a dict feature -> (B, dim). optimizer as Embedding's: one per table, each with its own
    state; a table shared by several features is stepped once with their contributions.
    """

    def __init__(self, tables: Sequence[Any], optimizer: Any = None, lr: Optional[float] = None,
                 eps: Optional[float] = None, betas: Tuple[float, float] = (0.9, 0.999), weight_decay: float = 0.0,
                 dtype: torch.dtype = torch.float32, ctx: Optional[Context] = None, seed: Optional[int] = None,
                 init_std: float = 1.0, to_dict: bool = False, *, stochastic_rounding: bool = False) -> None:
        super().__init__()
        self.ctx = _context(ctx)
        self._bridge = bridge(self.ctx)
        if isinstance(tables, dict) or not isinstance(tables, (list, tuple)) or not tables:
            raise wrong_type("tables", "must be a non-empty list of table dicts or EmbeddingBagConfigs")
        specs = [_spec(t, k) for k, t in enumerate(tables)]
        names = [s["name"] for s in specs]
        if len(set(names)) != len(names):
            raise invalid("tables", "names a table twice (%s)" % ", ".join(names))
        self._opt = _make_optimizer(self.ctx, optimizer, lr, eps, betas, weight_decay, False, stochastic_rounding,
                                    0 if seed is None else seed)
        base = draw_seed(seed)
        self.embedding_bags = torch.nn.ModuleDict()
        for k, s in enumerate(specs):
            self.embedding_bags[s["name"]] = _Weight(self.ctx, s["rows"], s["cols"], s["dtype"] or dtype,
                                                     (base + k) % 2 ** 64, init_std, self._opt)
        self._ordered = [self.embedding_bags[n] for n in names]
        self._table_index = {n: k for k, n in enumerate(names)}
        self._layout: List[Tuple[str, str, str]] = []     # (feature, table, pooling) in output order
        for s in specs:
            for f in s["features"]:
                if any(f == l[0] for l in self._layout):
                    raise invalid("tables", "feature %r is in two tables" % f)
                self._layout.append((f, s["name"], s["pooling"]))
        self._cols = sum(self._ordered[self._table_index[t]]._t.w2.shape[1] for _, t, _ in self._layout)
        self.to_dict = bool(to_dict)
        self._anchor = torch.zeros(0, requires_grad=True)   # makes the backward run when no table needs a .grad

    @property
    def feature_names(self) -> List[str]:
        return [f for f, _, _ in self._layout]

    def _batch(self, keys: Any, values: Any, lengths: Any, offsets: Any, weights: Any) -> Dict[str, Any]:
        if hasattr(keys, "values") and hasattr(keys, "keys") and callable(getattr(keys, "lengths", None)):
            kjt = keys            # a TorchRec KeyedJaggedTensor
            keys, values, lengths = kjt.keys(), kjt.values(), kjt.lengths()
            weights = kjt.weights_or_none() if hasattr(kjt, "weights_or_none") else None
            offsets = None
        keys = list(keys)
        values = _as_ids(values).reshape(-1)
        if (lengths is None) == (offsets is None):
            raise invalid("lengths", "or offsets is needed (one of them)")
        if lengths is not None:
            lens = _as_ids(lengths).reshape(-1).to(torch.int64)
            if (lens < 0).any():
                raise invalid("lengths", "are not negative")
            offs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lens, 0)])
        else:
            offs = _as_ids(offsets).reshape(-1).to(torch.int64)
            if offs.numel() == 0 or offs[0] != 0 or (offs[1:] < offs[:-1]).any():
                raise invalid("offsets", "start at 0 and do not decrease")
        if not keys or (offs.numel() - 1) % len(keys):
            raise invalid("lengths", "hold len(keys) * B entries (%d keys, %d entries)"
                          % (len(keys), offs.numel() - 1))
        if int(offs[-1]) != values.numel():
            raise invalid("values", "hold %d ids; the lengths add up to %d" % (values.numel(), int(offs[-1])))
        if weights is not None and torch.as_tensor(weights).numel() != values.numel():
            raise invalid("weights", "hold one weight per value (%d for %d)"
                          % (torch.as_tensor(weights).numel(), values.numel()))
        missing = [f for f, _, _ in self._layout if f not in keys]
        if missing:
            raise invalid("keys", "lack the features %s" % ", ".join(missing))
        return dict(keys=keys, values=values, offs=offs, weights=weights, bags=(offs.numel() - 1) // len(keys))

    def _features(self, batch: Dict[str, Any]) -> List[Dict[str, Any]]:
        """The features as Context.embedding_bags takes them: the values uploaded once (each
        feature a view of them), each feature's CSR offsets of its own."""
        b, B, offs = self._bridge, batch["bags"], batch["offs"]
        ids, it = b.ids(batch["values"], "values")
        w = None
        if batch["weights"] is not None:
            w = b.matrix(torch.as_tensor(batch["weights"]).detach().reshape(-1, 1).to(torch.float32), "weights")[0]
        out = []
        for f, tname, pooling in self._layout:
            k = batch["keys"].index(f)
            lo = int(offs[k * B])
            n = int(offs[(k + 1) * B]) - lo
            fi = Ids(self.ctx, Ids_t(buffer=ids._ids.buffer, offset=lo, count=n, type=ids._ids.type), owned=False,
                     shape=(n,), keep=(ids, it))
            csr, _ = b.ids(offs[k * B:(k + 1) * B + 1] - lo, "lengths")
            d = dict(table=self._ordered[self._table_index[tname]]._t.ready(), ids=fi, offsets=csr,
                     include_last_offset=True, mode=pooling)
            if w is not None and pooling == "sum":
                d["per_sample_weights"] = Matrix(self.ctx, Matrix_t(buffer=w._m.buffer, offset=lo, rows=n, cols=1,
                                                                    ld=1, dtype=0), owned=False, keep=w)
            out.append(d)
        return out

    def forward(self, keys: Any, values: Any = None, lengths: Any = None, offsets: Any = None,
                weights: Any = None) -> Any:
        batch = self._batch(keys, values, lengths, offsets, weights)
        out = _BagsFn.apply(self._anchor, batch, self, *[t.weight for t in self._ordered])
        if not self.to_dict:
            return out
        res, col = {}, 0
        for f, tname, _ in self._layout:
            c = self._ordered[self._table_index[tname]]._t.w2.shape[1]
            res[f] = out[:, col:col + c]
            col += c
        return res

    def sync(self) -> None:
        """Reads back the device's steps into the .weight tensors (done by itself when a
        weight is used; needed only to read the tensors' memory directly)."""
        for t in self._ordered:
            t._t.host()


# ------------------------------------------------------------------ BERT's input layer

class BertEmbeddings(torch.nn.Module):
    """Hugging Face's BertEmbeddings on a clembed device, in one pass:
    dropout(LayerNorm(word[input_ids] + position[past_key_values_length + j] + token_type[token_type_ids])).

    Parameters under Hugging Face's names: word_embeddings.weight, position_embeddings.weight,
    token_type_embeddings.weight (N(0, initializer_range) from Philox(seed), the
    pad_token_id row zero, then read as stored, no gradient), LayerNorm.weight (1) and
    LayerNorm.bias (0). forward(input_ids, token_type_ids=None, position_ids=None,
    inputs_embeds=None, past_key_values_length=0) -> (batch, seq, hidden) float32, called
    as Hugging Face's BertModel calls its embeddings (other keywords are ignored);
    position_ids, when given, must be past_key_values_length + arange(seq), and
    inputs_embeds None (others are refused, naming the argument).
    In training mode, dropout with hidden_dropout_prob, the mask from Philox (a new seed
    every call; not PyTorch's generator). norm='rms' makes it RMSNorm (no bias). optimizer
    as Embedding's, stepping the rows used of each table and the norm's parameters.
    """

    def __init__(self, vocab_size: int, hidden_size: int, max_position_embeddings: int = 512,
                 type_vocab_size: int = 2, layer_norm_eps: float = 1e-12, hidden_dropout_prob: float = 0.1,
                 optimizer: Any = None, lr: Optional[float] = None, eps: Optional[float] = None,
                 betas: Tuple[float, float] = (0.9, 0.999), weight_decay: float = 0.0,
                 ctx: Optional[Context] = None, seed: Optional[int] = None, *, pad_token_id: Optional[int] = 0,
                 initializer_range: float = 0.02, norm: str = "layer") -> None:
        super().__init__()
        self.ctx = _context(ctx)
        self._bridge = bridge(self.ctx)
        V, H = _count(vocab_size, "vocab_size"), _count(hidden_size, "hidden_size")
        P, T = _count(max_position_embeddings, "max_position_embeddings"), _count(type_vocab_size, "type_vocab_size")
        if norm not in ("layer", "rms"):
            raise invalid("norm", "is 'layer' or 'rms', not %r" % (norm,))
        self.norm, self.hidden_size = norm, H
        self.layer_norm_eps = float(layer_norm_eps)
        self.hidden_dropout_prob = float(hidden_dropout_prob)
        if not 0.0 <= self.hidden_dropout_prob < 1.0:
            raise invalid("hidden_dropout_prob", "is in [0, 1), not %r" % hidden_dropout_prob)
        self.pad_token_id = _padding(V, pad_token_id)
        self._opt = _make_optimizer(self.ctx, optimizer, lr, eps, betas, weight_decay, False)
        self.seed = draw_seed(seed)
        std = float(initializer_range)
        s = self.seed
        self.word_embeddings = _Weight(self.ctx, V, H, torch.float32, s, std, self._opt, self.pad_token_id)
        self.position_embeddings = _Weight(self.ctx, P, H, torch.float32, (s + 1) % 2 ** 64, std, self._opt)
        self.token_type_embeddings = _Weight(self.ctx, T, H, torch.float32, (s + 2) % 2 ** 64, std, self._opt)
        self.LayerNorm = torch.nn.Module()
        self.LayerNorm.weight = torch.nn.Parameter(torch.ones(H))
        self.LayerNorm.bias = torch.nn.Parameter(torch.zeros(H)) if norm == "layer" else None
        self._norm_w = _Table(self._bridge, self.LayerNorm.weight.detach().view(1, H))
        self._norm_b = _Table(self._bridge, self.LayerNorm.bias.detach().view(1, H)) if norm == "layer" else None
        self._calls = 0
        self._anchor = torch.zeros(0, requires_grad=True)

    def _parts(self) -> List[Tuple[str, _Table]]:
        parts = [("table", self.word_embeddings._t), ("position_table", self.position_embeddings._t),
                 ("segment_table", self.token_type_embeddings._t), ("norm_weight", self._norm_w)]
        return parts + ([("norm_bias", self._norm_b)] if self._norm_b is not None else [])

    def forward(self, input_ids: Any = None, token_type_ids: Any = None, position_ids: Any = None,
                inputs_embeds: Any = None, past_key_values_length: int = 0, **unused: Any) -> torch.Tensor:
        if inputs_embeds is not None or input_ids is None:
            raise invalid("inputs_embeds", "are not supported: this layer looks input_ids up itself")
        ids = _as_ids(input_ids)
        if ids.dim() == 0:
            raise invalid("input_ids", "has at least one dimension")
        seq = ids.shape[-1]
        if position_ids is not None:
            want = torch.arange(past_key_values_length, past_key_values_length + seq)
            p = _as_ids(position_ids)
            if not bool((p.reshape(-1, seq) == want).all()):
                raise invalid("position_ids", "other than past_key_values_length + arange(seq) are not supported")
        types = _as_ids(token_type_ids) if token_type_ids is not None else None
        if types is not None and tuple(types.shape) != tuple(ids.shape):
            raise invalid("token_type_ids", "has shape %s, input_ids %s" % (tuple(types.shape), tuple(ids.shape)))
        self._calls += 1
        seed = (self.seed + 0x9E3779B97F4A7C15 * self._calls) % 2 ** 64
        dropout = self.hidden_dropout_prob if self.training else 0.0
        params = [self.word_embeddings.weight, self.position_embeddings.weight, self.token_type_embeddings.weight,
                  self.LayerNorm.weight] + ([self.LayerNorm.bias] if self.LayerNorm.bias is not None else [])
        return _BertFn.apply(self._anchor, ids, types, (int(past_key_values_length), seed, dropout), self, *params)

    def _options(self, ids: torch.Tensor, types: Optional[Ids], offset: int, seed: int,
                 dropout: float) -> Dict[str, Any]:
        t = dict(self._parts())
        return dict(positions=t["position_table"].ready(), offset=offset, seq_len=ids.shape[-1],
                    padding_idx=self.pad_token_id, padding_keeps_row=True, dropout=dropout, seed=seed,
                    segment_table=t["segment_table"].ready(), segment_ids=types, norm=self.norm,
                    norm_weight=t["norm_weight"].ready(),
                    norm_bias=t["norm_bias"].ready() if "norm_bias" in t else None, norm_eps=self.layer_norm_eps)

    def sync(self) -> None:
        """Reads back the device's steps into the parameters' tensors."""
        for _, t in self._parts():
            t.host()

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        self.sync()
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self._opt is not None:
            for name, t in (("LayerNorm.weight.", self._norm_w), ("LayerNorm.bias.", self._norm_b)):
                if t is None:
                    continue
                s, s2, n = self._opt.state(t.matrix)
                if s is not None:
                    destination[prefix + name + "momentum1"] = torch.from_numpy(s.numpy(np.float32).copy())
                if s2 is not None:
                    destination[prefix + name + "momentum2"] = torch.from_numpy(s2.numpy(np.float32).copy())
                destination[prefix + name + "optimizer_step"] = torch.tensor(n, dtype=torch.int64)

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any, strict: bool,
                              missing_keys: List[str], unexpected_keys: List[str], error_msgs: List[str]) -> None:
        self.sync()
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        for name, t in (("LayerNorm.weight.", self._norm_w), ("LayerNorm.bias.", self._norm_b)):
            keys = [prefix + name + k for k in ("momentum1", "momentum2", "optimizer_step")]
            if t is None or self._opt is None:
                unexpected_keys += [k for k in keys if k in state_dict]
                continue
            s = self._opt._states(t.matrix)
            for i, k in enumerate(keys[:2]):
                if s[i] is not None and k in state_dict:
                    s[i].write(np.ascontiguousarray(torch.as_tensor(state_dict[k]).detach().to(torch.float32)
                                                    .reshape(s[i].rows, s[i].cols).numpy()))
                elif s[i] is not None:
                    missing_keys.append(k)
            if keys[2] in state_dict:
                s[2] = int(torch.as_tensor(state_dict[keys[2]]).item())
            else:
                missing_keys.append(keys[2])


class _BertFn(torch.autograd.Function):
    @staticmethod
    def forward(fctx: Any, anchor: torch.Tensor, ids: torch.Tensor, types: Optional[torch.Tensor],
                setting: Tuple[int, int, float], mod: BertEmbeddings, *params: torch.Tensor) -> torch.Tensor:
        b = mod._bridge
        offset, seed, dropout = setting
        i, it = b.ids(ids, "input_ids")
        ty = b.ids(types, "token_type_ids")[0] if types is not None else None
        opts = mod._options(it, ty, offset, seed, dropout)
        word = mod.word_embeddings._t.ready()
        m, out = b.output(i.count, mod.hidden_size, torch.float32)
        mod.ctx.embed(word, i, out=m, **opts)
        b.done(m, out)
        fctx.mod, fctx.ids, fctx.types, fctx.setting = mod, it, types, setting
        return out.reshape(tuple(it.shape) + (mod.hidden_size,))

    @staticmethod
    def backward(fctx: Any, grad: torch.Tensor) -> Tuple[Any, ...]:
        mod, ids, types = fctx.mod, fctx.ids, fctx.types
        offset, seed, dropout = fctx.setting
        b = mod._bridge
        g = _grad_matrix(b, grad)
        i, _ = b.ids(ids, "input_ids")
        ty = b.ids(types, "token_type_ids")[0] if types is not None else None
        opts = mod._options(ids, ty, offset, seed, dropout)
        grads = mod.ctx.embed_backward(g, mod.word_embeddings._t.matrix, i, **opts)
        parts = mod._parts()
        nones = (None,) * 5
        if mod._opt is not None:
            flat = ids.reshape(-1).to(torch.int64)
            if mod.pad_token_id is not None:
                flat = flat[flat != mod.pad_token_id]
            seq = ids.shape[-1]
            rows = {"table": torch.unique(flat),
                    "position_table": torch.arange(offset, offset + seq, dtype=torch.int64),
                    "segment_table": torch.unique(types.reshape(-1).to(torch.int64)) if types is not None
                    else torch.zeros(1, dtype=torch.int64),
                    "norm_weight": torch.zeros(1, dtype=torch.int64), "norm_bias": torch.zeros(1, dtype=torch.int64)}
            for name, t in parts:
                r = rows[name]
                if r.numel() == 0:
                    continue
                rn = r.numpy()
                g_rows = mod.ctx.lookup(grads[name], rn)      # the rows' gradients, gathered on the device
                mod._opt.step(t.matrix, g_rows, rn)
                t.device_changed()
            return nones + (None,) * len(parts)
        out = []
        for j, (name, t) in enumerate(parts):
            if not fctx.needs_input_grad[5 + j]:
                out.append(None)
                continue
            shape = tuple(t.w2.shape) if name not in ("norm_weight", "norm_bias") else (mod.hidden_size,)
            out.append(_dense(b, grads[name], torch.float32, shape))
        return nones + tuple(out)
