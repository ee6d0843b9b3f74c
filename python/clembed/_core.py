"""clembed.Context, composed of its parts, and the package's functions on the default
context (default_context, embed). The binding of include/clembed.h lives in:

    _events.py    Event, wait_for lists, raw handles, the optional pyopencl
    _matrix.py    Matrix, Ids
    _context.py   ContextBase (lifetime, device, errors, data, argument conversion),
                  Device, devices
    _embed.py     EmbedOps: positional, lookup, embed (BERT's segments and norm),
                  embed_backward
    _rope.py      RopeOps: rope_cache, rope
    _bags.py      BagOps: embedding_bag(s), bag_backward, bag(s)_optimizer_step, renorm
    _train.py     TrainOps: backward, sgd, optimizer_step, init
    _files.py     FileOps: load, load_ids; inspect

Every public callable is wrapped by _errors.api (errors name the call) and converts its
arguments with the helpers of _args (errors name the argument); python/README.md says
how a new binding follows them. The names this module held before the split (Matrix,
Ids, Event, Device, devices, inspect, WaitFor, ...) are still importable from it.
"""
from typing import Any, Optional

import numpy as np

from ._events import Event, WaitFor
from ._matrix import Matrix, Ids, DTypeLike, ArrayLike
from ._context import ContextBase, Device, devices
from ._embed import EmbedOps
from ._rope import RopeOps
from ._bags import BagOps
from ._train import TrainOps
from ._files import FileOps, inspect
from ._errors import api

__all__ = ["Context", "Matrix", "Ids", "Event", "Device", "devices", "inspect", "embed", "default_context",
           "WaitFor", "DTypeLike", "ArrayLike", "ContextBase"]


class Context(EmbedOps, RopeOps, BagOps, TrainOps, FileOps):
    """A clembed context: a device, its queue and the compiled kernels.

    Context(device=None): device None (CLEMBED_DEVICE, else the first GPU, accelerator,
    CPU), a spec as in C ('P:D', 'gpu', 'cpu', 'accelerator', or part of "platform
    device"), an int n (the n-th of clembed.devices()) or a clembed.Device.
    Context.from_queue(q): joins a pyopencl CommandQueue (or a raw cl_command_queue
    int). Every device call takes wait_for=[events] (pyopencl events, clembed.Event or
    raw cl_event ints) and sets .event on the matrix it writes. A context is also a
    context manager: `with clembed.Context() as ctx:` closes it at the end.
    """


_default: Optional[Context] = None


def default_context() -> Context:
    """The context clembed.embed, Embedding and the plots use when given none (made on
    first use, on the default device; made again if it was closed)."""
    global _default
    if _default is None or _default.closed:
        _default = Context()
    return _default


@api("embed", "clembed_embed")
def embed(table: Any, ids: Any, **options: Any) -> np.ndarray:
    """clembed's forward, NumPy in and out: an array of shape ids.shape + (cols,), float16
    for out_dtype='f16', float32 otherwise ('bf16' values are exact in float32).

    Options as Context.embed; positions may be a NumPy array. A NumPy table is uploaded
    on every call (nothing is cached, so a changed array is always seen): for repeated
    calls, upload it once (W = ctx.matrix(table)) and call ctx.embed(W, ids), or pass that
    Matrix here (then its context is used)."""
    ctx = table.ctx if isinstance(table, Matrix) else default_context()
    out = ctx.embed(table, ids, **options)
    return out.numpy(None)
