"""clembed.save and clembed.load: layers, optimizers and matrices in one checkpoint file
(clembed_checkpoint_save / clembed_checkpoint_load: a .safetensors file, written
atomically, every tensor's CRC-32C checked on load, nothing modified when a check fails).

Names in the file, for save(path, {NAME: obj}):
  a Matrix                                  NAME
  an Embedding or EmbeddingBag              NAME.weight
  a BertEmbeddings                          NAME.word_embeddings.weight, ... (its state_dict's keys)
  the optimizer state of a table T above    T.momentum1, T.momentum2 (as FBGEMM names them), with
                                            "T.optimizer" (its kind) and "T.step" (the steps taken)
                                            in the metadata, and "T.rounding_seed" where the
                                            optimizer rounds stochastically (a load checks that the
                                            Optimizer it restores into rounds with the same seed)
A layer's own optimizer (an Optimizer given at construction) is saved with it; an Optimizer
given under its own NAME saves its state of every table named in the same call (its NAME is
not used in the file: a table is named once, by the object that holds it).
"""
import ctypes
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from . import _lib
from ._lib import lib, CheckpointItem_t
from ._errors import api, invalid, require, wrong_type
from ._files import _File
from ._matrix import Matrix

PathLike = Union[str, "os.PathLike[str]"]


def _tables_of(name: str, obj: Any) -> Tuple[List[Tuple[str, Matrix]], Any]:
    """The tables an object holds, named, and its own optimizer (or None)."""
    from .nn import Embedding, EmbeddingBag, BertEmbeddings, Optimizer
    if isinstance(obj, Matrix):
        return [(name, obj)], None
    if isinstance(obj, (Embedding, EmbeddingBag)):
        opt = obj.optimizer if isinstance(obj.optimizer, Optimizer) else None
        return [(name + ".weight", obj.weight)], opt
    if isinstance(obj, BertEmbeddings):
        opt = obj.optimizer if isinstance(obj.optimizer, Optimizer) else None
        out = [(name + "." + key, getattr(obj, attr)) for key, attr in obj._KEYS.items()
               if getattr(obj, attr) is not None]
        return out, opt
    if isinstance(obj, Optimizer):
        return [], obj
    raise wrong_type("objects", "[%r] must be a clembed.Matrix, Embedding, EmbeddingBag, BertEmbeddings or "
                     "Optimizer, not %s" % (name, type(obj).__name__))


class _Plan:
    """What a save writes or a load reads: the named tables, and the optimizer that owns
    each table's state (a layer's own optimizer owns its tables; an Optimizer given under
    its own name owns the other tables it holds state for, or, when it is the only one
    given, every other table)."""

    def __init__(self, objects: Mapping[str, Any]) -> None:
        from .nn import Optimizer
        if not isinstance(objects, Mapping):
            raise wrong_type("objects", "must be a dict {name: Matrix, layer or Optimizer}, not %s"
                             % type(objects).__name__)
        self.tables: List[Tuple[str, Matrix]] = []
        self.owners: Dict[str, Any] = {}
        self.optimizers: List[Any] = []
        loose: List[Any] = []
        names: Dict[str, Any] = {}
        for name, obj in objects.items():
            if not isinstance(name, str) or not name:
                raise wrong_type("objects", "keys must be non-empty strings, not %r" % (name,))
            tables, opt = _tables_of(name, obj)
            for tname, m in tables:
                if tname in names:
                    raise invalid("objects", "two tensors would be named %r" % tname)
                names[tname] = m
                self.tables.append((tname, m))
                if opt is not None:
                    self.owners[tname] = opt
            if opt is not None and all(opt is not o for o in self.optimizers):
                self.optimizers.append(opt)
            if isinstance(obj, Optimizer) and all(obj is not o for o in loose):
                loose.append(obj)
        for tname, m in self.tables:
            if tname in self.owners:
                continue
            holders = [o for o in loose if self._holds(o, m)]
            if len(holders) > 1:
                raise invalid("objects", "two Optimizers hold state for table %r" % tname)
            if holders:
                self.owners[tname] = holders[0]
            elif len(loose) == 1:
                self.owners[tname] = loose[0]
        self.by_matrix = {id(m): n for n, m in self.tables}
        ctxs = {id(m.ctx) for _, m in self.tables}
        if len(ctxs) > 1:
            raise invalid("objects", "holds matrices of %d contexts; a checkpoint is saved from one" % len(ctxs))
        self.ctx = self.tables[0][1].ctx if self.tables else None

    @staticmethod
    def _holds(opt: Any, m: Matrix) -> bool:
        st, _, t = opt.state(m)
        return st is not None or t > 0

    def owner(self, tname: str) -> Any:
        """The optimizer that owns table tname's state, or None."""
        return self.owners.get(tname)


def _items(pairs: List[Tuple[str, Matrix]]) -> Any:
    arr = (CheckpointItem_t * max(len(pairs), 1))()
    for i, (n, m) in enumerate(pairs):
        arr[i].name = n.encode()
        arr[i].matrix = ctypes.pointer(m._m)
    return arr


@api("save", "clembed_checkpoint_save")
def save(path: PathLike, objects: Mapping[str, Any], metadata: Optional[Mapping[str, Any]] = None) -> None:
    """Saves the tables of objects ({name: Matrix, Embedding, EmbeddingBag,
    BertEmbeddings or Optimizer}), the optimizers' states of those tables and their step
    counts, and metadata ({key: value}, values written as str(value); keys must not start
    with "clembed." nor be the optimizer entries' "T.optimizer", "T.step") into one
    checkpoint file at path, atomically (the previous file stays whole if the save fails).
    Raises FileError when the file cannot be written (no space, a missing folder)."""
    save_c = require("clembed_checkpoint_save", "clembed.save")
    plan = _Plan(objects)
    pairs = list(plan.tables)
    meta: Dict[str, str] = {}
    for tname, m in plan.tables:
        opt = plan.owner(tname)
        others = [o for o in plan.optimizers if o is not opt and plan._holds(o, m)]
        if others:
            raise invalid("objects", "table %r has state in an Optimizer(%r) that does not own it (a layer's "
                          "own optimizer owns its tables)" % (tname, others[0].kind))
        if opt is not None and plan._holds(opt, m):
            st, st2, t = opt.state(m)
            meta[tname + ".optimizer"] = opt.kind
            meta[tname + ".step"] = str(t)
            if opt.stochastic_rounding:   # the rounding's seed, which the next steps' bits depend on
                meta[tname + ".rounding_seed"] = str(opt.seed)
            if st is not None:
                pairs.append((tname + ".momentum1", st))
            if st2 is not None:
                pairs.append((tname + ".momentum2", st2))
    for opt in plan.optimizers:
        for m in list(opt._state.keys()):
            if id(m) not in plan.by_matrix:
                raise invalid("objects", "an Optimizer(%r) holds state for a table that is not in objects: "
                              "name that table (its Matrix or its layer) too" % opt.kind)
    for k, v in (metadata or {}).items():
        if not isinstance(k, str):
            raise wrong_type("metadata", "keys must be strings, not %r" % (k,))
        if k in meta or any(k in (t + ".optimizer", t + ".step", t + ".rounding_seed") for t, _ in plan.tables):
            raise invalid("metadata", "key %r is an optimizer entry of the checkpoint" % k)
        meta[k] = str(v)
    if plan.ctx is None:
        from ._core import default_context
        plan.ctx = default_context()
    keys = (ctypes.c_char_p * max(len(meta), 1))(*[k.encode() for k in meta])
    values = (ctypes.c_char_p * max(len(meta), 1))(*[v.encode() for v in meta.values()])
    st = save_c(plan.ctx._live, os.fspath(path).encode(), _items(pairs), len(pairs), keys, values, len(meta))
    plan.ctx._check(st, "clembed_checkpoint_save")


def metadata(path: PathLike) -> Dict[str, str]:
    """A .safetensors file's metadata ("__metadata__"), every entry."""
    require("clembed_file_metadata", "clembed.load")
    with _File(path) as f:
        out = {}
        for i in range(int(lib.clembed_file_metadata_count(f.h))):
            k, v = ctypes.c_char_p(), ctypes.c_char_p()
            lib.clembed_file_metadata(f.h, i, ctypes.byref(k), ctypes.byref(v))
            out[(k.value or b"").decode()] = (v.value or b"").decode()
        return out


@api("load", "clembed_checkpoint_load")
def load(path: PathLike, objects: Mapping[str, Any]) -> Dict[str, str]:
    """Loads a checkpoint saved by clembed.save into objects (the same names and kinds of
    object, tables of the same shapes and dtypes), in place: the tables, and for each table
    whose optimizer state the file holds, that state and its step count into the optimizer
    that owns the table (the layer's own, or the one Optimizer given). Every tensor is
    checked (names, shapes, dtypes, CRC-32C) before anything is written: a failure raises
    InvalidArgumentError naming what differs, and nothing is modified. Returns the caller's
    metadata (the entries save was given)."""
    load_c = require("clembed_checkpoint_load", "clembed.load")
    plan = _Plan(objects)
    meta = metadata(path)
    pairs = list(plan.tables)
    # per table with state in the file: its owner, the state matrices to load into (the
    # owner's own, or new ones installed only once the load has succeeded) and the step
    restore: List[Tuple[Any, Matrix, Optional[Matrix], Optional[Matrix], int]] = []
    own = set()
    for tname, m in plan.tables:
        own.update((tname + ".optimizer", tname + ".step", tname + ".rounding_seed"))
        kind = meta.get(tname + ".optimizer", meta.get("clembed.optimizer." + tname))
        if kind is None:
            continue
        opt = plan.owner(tname)
        if opt is None:
            raise invalid("objects", "the file holds %s state for table %r, but no Optimizer in objects owns it"
                          % (kind, tname))
        if opt.kind != kind:
            raise invalid("objects", "table %r: the file's optimizer is %r, the Optimizer's %r" % (tname, kind, opt.kind))
        rseed = meta.get(tname + ".rounding_seed")
        if (rseed is not None) != bool(opt.stochastic_rounding) or (rseed is not None and rseed != str(opt.seed)):
            raise invalid("objects", "table %r: the file's run rounds %s, the Optimizer %s" % (
                tname, "stochastically with seed %s" % rseed if rseed is not None else "to nearest",
                "stochastically with seed %d" % opt.seed if opt.stochastic_rounding else "to nearest"))
        try:
            t = int(meta.get(tname + ".step", ""))
        except ValueError:
            raise invalid("path", "%s: table %r: no step count (%r) for its optimizer state"
                          % (os.fspath(path), tname, meta.get(tname + ".step")))
        st, st2, _ = opt.state(m)
        if st is None and kind in ("adagrad", "rowwise_adagrad", "adam"):
            st = m.ctx.empty(m.rows, 1 if kind == "rowwise_adagrad" else m.cols)
        if st2 is None and kind == "adam":
            st2 = m.ctx.empty(m.rows, m.cols)
        if st is not None:
            pairs.append((tname + ".momentum1", st))
        if st2 is not None:
            pairs.append((tname + ".momentum2", st2))
        restore.append((opt, m, st, st2, t))
    ctx = plan.ctx
    if ctx is None:
        from ._core import default_context
        ctx = default_context()
    st = load_c(ctx._live, os.fspath(path).encode(), _items(pairs), len(pairs))
    ctx._check(st, "clembed_checkpoint_load")
    # only now, the load done: the optimizers take the states and steps, and a table the
    # file holds no state for loses its optimizer's (it had taken no step when saved)
    restored = {id(m) for _, m, _, _, _ in restore}
    for tname, m in plan.tables:
        opt = plan.owner(tname)
        if opt is not None and id(m) not in restored and m in opt._state:
            del opt._state[m]
    for opt, m, st1, st2, t in restore:
        opt._state[m] = [st1, st2, t]
    return {k: v for k, v in meta.items() if not k.startswith("clembed.") and k not in own}
