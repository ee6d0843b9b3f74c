"""clembed.mpi: a recommendation model's tables over the ranks of an MPI communicator
(libclembed_mpi's sharded feature sets, include/clembed_mpi.h), over mpi4py.

    from mpi4py import MPI
    import clembed, clembed.mpi
    ctx = clembed.Context()                                   # this rank's device
    fs = clembed.mpi.FeatureSet(ctx, MPI.COMM_WORLD, [
        dict(name="users", rows=1000000, cols=64),            # the planner's choice ("auto")
        dict(name="genres", rows=50, cols=16, dtype="f16", shard="table", owner=0),
        dict(name="items", rows=300000, cols=128, dtype="bf16", shard="column")])
    for i in range(len(fs)):
        fs.table(i).init_normal(0.0, 0.01, seed=i)            # the whole table's bits, any plan
    out = fs.embedding_bags([dict(ids=u, offsets=uo), dict(ids=g, offsets=go, mode="sum"),
                             dict(ids=it, offsets=io)])       # this rank's bags x (64 + 16 + 128)
    fs.bags_step(features, grad, [dict(kind="adagrad", lr=0.05)] * 3)

Every rank passes its own bags; every result is, bit for bit, what one device's
Context.embedding_bags / Context.bags_optimizer_step gives for the ranks' batches
concatenated in rank order, for any plan and any number of ranks. Every call but
plan(), table() and Table.shard() / .state() is collective: every rank makes it, in the
same order, with the same set. An argument this binding refuses on one rank fails the
call on every rank (the others: InvalidArgumentError naming that rank), as the C library
does with its own refusals, so no rank is left waiting.

Importing clembed does not import this module (nor mpi4py): `import clembed.mpi` does.
It loads libclembed_mpi from, in order: the path in CLEMBED_MPI_LIBRARY (only there,
when set); the folder of the libclembed the package loaded and its src/mpi/ (a build
tree); the system loader (libclembed_mpi.so.MAJOR.MINOR, the package's ABI). The library
must be bound to the same libclembed as the package, and to the MPI mpi4py uses.
"""
import atexit
import ctypes
import os
import sys
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _lib
from ._lib import Matrix_t, Ids_t, BagFeature_t, Optimizer_t, OPTIMIZERS
from ._errors import PY_CALLS, api, invalid, wrong_type
from ._args import DTYPE_NAMES, BLOCKS, choice, dtype_code, count as _count, integer, real
from ._args import seed as _seed
from ._matrix import Matrix, Ids, DTypeLike
from ._train import optimizer_options, OPTIMIZER_KEYS

byref = ctypes.byref
c_int, c_size_t, c_float, c_uint64, c_void_p, c_char_p = (ctypes.c_int, ctypes.c_size_t, ctypes.c_float,
                                                         ctypes.c_uint64, ctypes.c_void_p, ctypes.c_char_p)
POINTER = ctypes.POINTER

__all__ = ["FeatureSet", "Table", "SHARD_KINDS", "library_path", "LibraryNotFoundError"]


class LibraryNotFoundError(_lib.LibraryNotFoundError):
    """libclembed_mpi could not be loaded; the message lists every place tried (an ImportError)."""


# ------------------------------------------------------------------ the library

def _mpi_soname() -> str:
    """libclembed_mpi's name for the system loader, with the package's ABI suffix
    (libclembed_mpi.so.0.MINOR; .0.MINOR.dylib on macOS; clembed_mpi.dll)."""
    return _lib._soname().replace("clembed", "clembed_mpi", 1)


def _names_in_folder() -> List[str]:
    if sys.platform == "darwin":
        return [_mpi_soname(), "libclembed_mpi.dylib"]
    if sys.platform.startswith("win"):
        return ["clembed_mpi.dll", "libclembed_mpi.dll"]
    return [_mpi_soname(), "libclembed_mpi.so"]


def _address(lib: Any, name: str) -> Optional[int]:
    try:
        return ctypes.cast(getattr(lib, name), c_void_p).value
    except AttributeError:
        return None


def _open(name: str) -> Tuple[Optional[ctypes.CDLL], str]:
    """(CDLL, "") when `name` loads, is a libclembed_mpi with feature sets and is bound to
    the libclembed this package loaded; else (None, why)."""
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        return None, str(e)
    if not hasattr(lib, "clembed_mpi_table_create"):
        return None, "not a libclembed_mpi (no clembed_mpi_table_create)"
    if not hasattr(lib, "clembed_mpi_feature_set_create"):
        return None, "a libclembed_mpi without sharded feature sets (no clembed_mpi_feature_set_create)"
    # dlsym on the library's handle resolves clembed_version_number in the libclembed it was
    # linked to: it must be the very library the package loaded (its contexts and matrices)
    theirs, ours = _address(lib, "clembed_version_number"), _address(_lib.lib, "clembed_version_number")
    if theirs != ours:
        return None, ("bound to another copy of libclembed than the one this package loaded (%s): load "
                      "libclembed from the same folder (CLEMBED_LIBRARY) or set CLEMBED_MPI_LIBRARY to the "
                      "libclembed_mpi built with it" % _lib.path)
    return lib, ""


def load_library() -> Tuple[ctypes.CDLL, str]:
    """(CDLL, path) of libclembed_mpi. Raises LibraryNotFoundError listing what was tried."""
    tried = []
    found = _lib.library_from_env("CLEMBED_MPI_LIBRARY", _open, "clembed.mpi",
                                  "next to libclembed (%s) and on the system loader's path" % _lib.path,
                                  LibraryNotFoundError)
    if found:
        return found
    tried.append("CLEMBED_MPI_LIBRARY (not set)")
    base = os.path.dirname(os.path.abspath(_lib.path)) if os.path.dirname(_lib.path) else ""
    if base:
        folders = (base, os.path.join(base, "src", "mpi"))  # next to libclembed; a build tree's
        found = _lib.library_from_paths([os.path.join(f, n) for f in folders for n in _names_in_folder()], _open, tried)
        if found:
            return found
    else:
        tried.append("the folder of libclembed (it was loaded by the system loader as %r)" % _lib.path)
    lib, why = _open(_mpi_soname())
    if lib is not None:
        return lib, _mpi_soname()
    tried.append("%s (%s)" % (_mpi_soname(), why))
    raise LibraryNotFoundError(
        "clembed.mpi: libclembed_mpi %d.%d not found. Tried:\n  " % (_lib.MAJOR, _lib.MINOR) + "\n  ".join(tried) +
        "\nIt is built with the library when CMake finds MPI (build/src/mpi/libclembed_mpi.so); set "
        "CLEMBED_MPI_LIBRARY=/path/to/libclembed_mpi.so, or install it next to libclembed.")


# ----------------------------------------------------------------- structs

class TableSpec_t(ctypes.Structure):
    """clembed_mpi_table_spec (include/clembed_mpi.h), field for field."""
    _fields_ = [("name", c_char_p), ("rows", c_size_t), ("cols", c_size_t), ("dtype", c_int),
                ("shard", c_int), ("owner", c_int), ("id_sample", POINTER(Ids_t)), ("sample_bags", c_size_t)]


STRUCTS: Dict[str, Any] = {"clembed_mpi_table_spec": TableSpec_t}

# clembed_shard_kind
SHARD_KINDS = {"row": 0, "table": 1, "column": 2, "table_row": 3, "auto": 4}
KIND_NAMES = {v: k for k, v in SHARD_KINDS.items()}
ENUMS: Dict[str, Tuple[Dict[str, int], str]] = {"clembed_shard_kind": (SHARD_KINDS, "CLEMBED_SHARD_")}

lib, library_path = load_library()

try:
    from mpi4py import MPI
except ImportError as _e:
    raise ImportError("clembed.mpi needs mpi4py, built for the MPI that libclembed_mpi uses (%s): pip install "
                      "mpi4py, or Debian's python3-mpi4py (%s)" % (library_path, _e)) from None

# MPI_Comm as C passes it: a pointer in Open MPI, an int in MPICH and its kin
if hasattr(MPI, "_sizeof"):
    _COMM_SIZE = MPI._sizeof(MPI.Comm)
else:  # pragma: no cover - mpi4py without _sizeof
    _COMM_SIZE = ctypes.sizeof(c_void_p) if MPI.Get_library_version().startswith("Open MPI") else ctypes.sizeof(c_int)
if _COMM_SIZE == ctypes.sizeof(c_void_p):
    Comm_t: Any = c_void_p
elif _COMM_SIZE == ctypes.sizeof(c_int):
    Comm_t = c_int
else:  # pragma: no cover
    raise ImportError("clembed.mpi: mpi4py's MPI_Comm is %d bytes, neither a pointer nor an int" % _COMM_SIZE)


def _check_same_mpi() -> None:
    """libclembed_mpi's MPI (the libmpi it is linked to) is mpi4py's, by their version strings."""
    fn = getattr(lib, "MPI_Get_library_version", None)
    if fn is None:
        return
    buf = ctypes.create_string_buffer(max(int(getattr(MPI, "MAX_LIBRARY_VERSION_STRING", 8192)), 8192))
    n = c_int()
    fn.restype, fn.argtypes = c_int, [c_char_p, POINTER(c_int)]
    if fn(buf, byref(n)) != 0:
        return
    theirs = buf.value.decode(errors="replace").strip().split("\n")[0].strip()
    ours = MPI.Get_library_version().replace("\x00", "").strip().split("\n")[0].strip()
    if theirs != ours:
        raise ImportError("clembed.mpi: libclembed_mpi (%s) uses another MPI than mpi4py:\n  libclembed_mpi: %s\n"
                          "  mpi4py: %s\nBuild mpi4py for the same MPI (pip install --no-binary mpi4py mpi4py) or "
                          "the library for mpi4py's." % (library_path, theirs, ours))


_check_same_mpi()

# -------------------------------------------------------------- prototypes

CTX = c_void_p
SET = c_void_p        # clembed_mpi_feature_set *
TAB = c_void_p        # clembed_mpi_table *
PM = POINTER(Matrix_t)
PI = POINTER(Ids_t)
PBO = POINTER(_lib.BagOptions_t)

# name -> (restype, argtypes): every function of include/clembed_mpi.h
PROTOTYPES: Dict[str, Tuple[Any, List[Any]]] = {
    "clembed_mpi_table_create": (c_int, [CTX, Comm_t, c_size_t, c_size_t, c_int, POINTER(TAB)]),
    "clembed_mpi_table_load": (c_int, [CTX, Comm_t, c_void_p, c_char_p, c_int, POINTER(TAB)]),
    "clembed_mpi_table_release": (None, [TAB]),
    "clembed_mpi_table_shard": (c_int, [TAB, POINTER(c_size_t), PM]),
    "clembed_mpi_table_state": (c_int, [TAB, c_int, POINTER(c_int), PM]),
    "clembed_mpi_table_init_normal": (c_int, [TAB, c_float, c_float, c_uint64]),
    "clembed_mpi_table_init_uniform": (c_int, [TAB, c_float, c_float, c_uint64]),
    "clembed_mpi_table_load_into": (c_int, [TAB, c_void_p, c_char_p]),
    "clembed_mpi_embed": (c_int, [TAB, PI, POINTER(_lib.EmbedOptions_t), PM]),
    "clembed_mpi_embedding_bag": (c_int, [TAB, PI, PI, PBO, PM]),
    "clembed_mpi_optimizer_step": (c_int, [TAB, PM, PI, POINTER(_lib.BackwardOptions_t), POINTER(Optimizer_t)]),
    "clembed_mpi_bag_optimizer_step": (c_int, [TAB, PM, PI, PI, PBO, POINTER(Optimizer_t)]),
    "clembed_mpi_checkpoint_save": (c_int, [c_char_p, POINTER(TAB), POINTER(c_char_p), c_size_t,
                                            POINTER(c_char_p), POINTER(c_char_p), c_size_t]),
    "clembed_mpi_checkpoint_load": (c_int, [c_char_p, POINTER(TAB), POINTER(c_char_p), c_size_t]),
    # Sharded feature sets
    "clembed_mpi_feature_set_create": (c_int, [CTX, Comm_t, POINTER(TableSpec_t), c_size_t, POINTER(SET)]),
    "clembed_mpi_feature_set_plan": (c_int, [SET, c_size_t, POINTER(c_int), POINTER(c_int), POINTER(c_int)]),
    "clembed_mpi_feature_set_table": (TAB, [SET, c_size_t]),
    "clembed_mpi_feature_set_release": (None, [SET]),
    "clembed_mpi_embedding_bags": (c_int, [SET, POINTER(BagFeature_t), c_size_t, PM]),
    "clembed_mpi_bags_optimizer_step": (c_int, [SET, POINTER(BagFeature_t), c_size_t, PM, POINTER(Optimizer_t)]),
}

for _name, (_res, _args) in PROTOTYPES.items():
    if hasattr(lib, _name):
        _f = getattr(lib, _name)
        _f.restype = _res
        _f.argtypes = _args

# the Python call of each C function, for errors (_errors.PY_CALLS)
PY_CALLS.update({
    "clembed_mpi_feature_set_create": "FeatureSet", "clembed_mpi_feature_set_plan": "FeatureSet.plan",
    "clembed_mpi_embedding_bags": "FeatureSet.embedding_bags",
    "clembed_mpi_bags_optimizer_step": "FeatureSet.bags_step", "clembed_mpi_table_shard": "Table.shard",
    "clembed_mpi_table_state": "Table.state", "clembed_mpi_table_init_normal": "Table.init_normal",
    "clembed_mpi_table_init_uniform": "Table.init_uniform", "clembed_mpi_table_load_into": "Table.load",
    "clembed_mpi_checkpoint_save": "FeatureSet.save", "clembed_mpi_checkpoint_load": "FeatureSet.load_checkpoint",
})


def comm_handle(comm: Any) -> Any:
    """The C MPI_Comm of an mpi4py communicator, as ctypes passes it."""
    if not isinstance(comm, MPI.Comm):
        raise wrong_type("comm", "must be an mpi4py communicator (mpi4py.MPI.Comm, e.g. MPI.COMM_WORLD), not %s"
                         % type(comm).__name__)
    if comm == MPI.COMM_NULL:
        raise invalid("comm", "is MPI.COMM_NULL")
    return Comm_t(MPI._handleof(comm) if hasattr(MPI, "_handleof") else comm.handle)


# -------------------------------------------------------------- the sets

_SPEC_KEYS = ("name", "rows", "cols", "dtype", "shard", "owner", "id_sample", "sample_bags")
_live_sets: "weakref.WeakSet[FeatureSet]" = weakref.WeakSet()


def _collective_failure(call: Any) -> None:
    """After this rank refused its own arguments: the C call `call` with an argument the
    library refuses on this rank, so that every rank's call fails together (the others
    naming this rank) rather than waiting for this one."""
    try:
        call()
    except Exception:  # pragma: no cover - the binding's own error is the one raised
        pass


class Table:
    """Table i of a FeatureSet (clembed_mpi_feature_set_table, owned by the set): its
    initialisation (collective) and this rank's part of it (not collective)."""

    def __init__(self, fs: "FeatureSet", index: int, name: str, rows: int, cols: int, dtype: int) -> None:
        self._fs = fs
        self.index = index
        self.name = name
        self.rows = rows
        self.cols = cols
        self._dtype = dtype

    @property
    def dtype(self) -> str:
        """The table's dtype name ('f32', 'f16', 'bf16', 'q8_0', ...)."""
        return DTYPE_NAMES[self._dtype]

    @property
    def plan(self) -> Tuple[str, int, int]:
        """FeatureSet.plan(index): (kind, first_rank, ranks)."""
        return self._fs.plan(self.index)

    def _handle(self) -> int:
        t = lib.clembed_mpi_feature_set_table(self._fs._live, self.index)
        if not t:  # pragma: no cover - the set holds every table
            raise invalid("table", "table %d is not in the set" % self.index)
        return t

    def __repr__(self) -> str:
        return "clembed.mpi.Table(%r, %d x %d %s)" % (self.name, self.rows, self.cols, self.dtype)

    def _init(self, op: str, names: Tuple[str, str], a: Any, b: Any, seed: Any) -> "Table":
        t = self._handle()
        err: Optional[BaseException] = None
        try:
            x, y, s = real(a, names[0]), real(b, names[1]), _seed(seed)
        except Exception as e:
            err = e
        # the init's arguments cannot be refused on one rank alone through the library (its
        # only check is the ranks' agreement): the ranks agree here that none refused its own
        failed = [r for r, f in enumerate(self._fs.comm.allgather(err is not None)) if f]
        if err is not None:
            raise err
        if failed:
            raise invalid("", "rank%s %s refused %s arguments to this call: every rank's fails"
                          % ("s" if len(failed) > 1 else "", ", ".join(map(str, failed)),
                             "their" if len(failed) > 1 else "its"))
        self._fs.ctx._check(getattr(lib, op)(t, x, y, s), op)
        return self

    @api("Table.init_normal", "clembed_mpi_table_init_normal")
    def init_normal(self, mean: float = 0.0, std: float = 1.0, seed: int = 0) -> "Table":
        """Fills the whole table from N(mean, std) with Philox(seed, r*cols + c): the bits
        Context.init(m, 'normal', ...) gives the whole table on one device, whatever the plan.
        Collective (the ranks agree on mean, std and seed). Returns the table."""
        return self._init("clembed_mpi_table_init_normal", ("mean", "std"), mean, std, seed)

    @api("Table.init_uniform", "clembed_mpi_table_init_uniform")
    def init_uniform(self, low: float = -1.0, high: float = 1.0, seed: int = 0) -> "Table":
        """Fills the whole table from U(low, high) (Context.init's 'uniform' bits for the
        whole table, whatever the plan). Collective. Returns the table."""
        return self._init("clembed_mpi_table_init_uniform", ("low", "high"), low, high, seed)

    @api("Table.load", "clembed_mpi_table_load_into")
    def load(self, path: Any, name: Optional[str] = None) -> "Table":
        """Fills the table from tensor `name` of a model file (.npy, .safetensors, .gguf; None:
        the only tensor, or a GGUF file's token_embd.weight) of the table's shape, the bits
        Context.load gives in the table's dtype, whatever the plan: every rank opens the path
        itself (the same file, or copies of it) and reads only its own part. Collective (a
        rank that cannot open the file fails every rank's call). Returns the table."""
        from ._files import _File
        t = self._handle()
        err: Optional[BaseException] = None
        f = None
        key = None
        try:
            if name is not None and not isinstance(name, str):
                raise wrong_type("name", "must be a str or None, not %s" % type(name).__name__)
            key = name.encode() if name is not None else None
            f = _File(path)
        except Exception as e:
            err = e
        try:  # a rank that failed here still calls, with no file: every rank's call fails, none waits
            st = lib.clembed_mpi_table_load_into(t, f.h if f is not None else None, key)
        finally:
            if f is not None:
                f.__exit__(None, None, None)
        if err is not None:
            raise err
        self._fs.ctx._check(st, "clembed_mpi_table_load_into")
        return self

    @api("Table.shard", "clembed_mpi_table_shard")
    def shard(self) -> Tuple[int, Matrix]:
        """(first_row, this rank's part): the global index of its first row and a Matrix
        view of it (owned by the set: reads and writes go to the table; valid until the set
        is released). ROW and TABLE_ROW: a range of rows; TABLE: every row on the owner,
        none elsewhere; COLUMN: every row's block of columns (first_row 0; the block starts at
        .first_col). Not collective."""
        first = c_size_t()
        m = Matrix_t()
        self._fs.ctx._check(lib.clembed_mpi_table_shard(self._handle(), byref(first), byref(m)),
                            "clembed_mpi_table_shard")
        return int(first.value), self._fs._view(m)

    @api("Table.state", "clembed_mpi_table_state")
    def state(self, which: int = 1) -> Tuple[str, Matrix]:
        """(optimizer kind, this rank's part of its state `which`): 1 the first state
        ('adagrad', 'rowwise_adagrad', 'adam'), 2 Adam's second; F32 rows as the shard's
        (rows x 1 for 'rowwise_adagrad'), made by the first bags_step. A view owned by the
        set. InvalidArgumentError when there is no such state. Not collective."""
        w = integer(which, "which", 1, 3)
        kind = c_int()
        m = Matrix_t()
        self._fs.ctx._check(lib.clembed_mpi_table_state(self._handle(), w, byref(kind), byref(m)),
                            "clembed_mpi_table_state")
        names = {v: k for k, v in OPTIMIZERS.items()}
        return names.get(kind.value, str(kind.value)), self._fs._view(m)

    @property
    def first_col(self) -> int:
        """The first column of this rank's part: its block's under a COLUMN plan (block j of
        k holds the units [j*u/k, (j+1)*u/k) of the row's u units, a unit a value or a block
        of a block-quantized type), else 0."""
        kind, first, ranks = self.plan
        if kind != "column":
            return 0
        unit = BLOCKS[self.dtype][0] or self.cols
        j = self._fs.rank - first
        if not 0 <= j < ranks:
            return self.cols
        return j * (self.cols // unit) // ranks * unit


class FeatureSet:
    """A sharded feature set (clembed_mpi_feature_set): n tables over the ranks of comm,
    each by its plan, and one call per batch for all their features (feature i reads table i).

    FeatureSet(ctx, comm, tables): ctx this rank's clembed.Context (kept; it must stay open
    while the set lives), comm an mpi4py communicator (duplicated: the set speaks on its
    own), tables a list of dicts, one per table, mirroring clembed_mpi_table_spec:
      name       str (checkpoints, the planner's report; default "table<i>")
      rows, cols ints
      dtype      any dtype Context.matrix takes (default 'f32'; the block-quantized ones can
                 be looked up, not trained)
      shard      'row' (rows over every rank), 'table' (whole on one rank), 'column' (every
                 row's columns cut in blocks over the ranks), 'table_row' (rows over the
                 ranks of one node), 'auto' (the planner's choice; the default)
      owner      'table': the rank; 'table_row': a rank of the node; -1 (the default) lets
                 the planner choose
      id_sample  optional: ids of the table's feature this rank has seen in one batch (an
                 array or clembed.Ids), for the planner
      sample_bags optional: the bags those ids make (default: the rows of a 2-D id_sample,
                 else 0, not known)
    The tables start as zeros. Collective: every rank passes the same specs (but id_sample).
    A context manager: `with FeatureSet(...) as fs:` releases it at the end.
    """

    @api("FeatureSet", "clembed_mpi_feature_set_create")
    def __init__(self, ctx: Any, comm: Any, tables: Sequence[Dict[str, Any]]) -> None:
        self._s = c_void_p()
        self._views: List[Any] = []
        self.ctx = ctx
        self.comm = comm
        handle = comm_handle(comm)     # every rank passes a communicator, or none can speak
        from ._core import Context
        ctx_h = None
        try:
            if not isinstance(ctx, Context):
                raise wrong_type("ctx", "must be a clembed.Context, not %s" % type(ctx).__name__)
            ctx_h = ctx._live
            if not MPI.Is_initialized() or MPI.Is_finalized():
                raise invalid("comm", "MPI is %s" % ("finalized" if MPI.Is_finalized() else "not initialised"))
            if MPI.Query_thread() < MPI.THREAD_FUNNELED:
                raise invalid("comm", "MPI was initialised with MPI_THREAD_SINGLE; clembed_mpi needs "
                              "MPI_THREAD_FUNNELED or more (mpi4py's default, mpi4py.rc.thread_level = 'multiple')")
            specs, keep, meta = self._specs(ctx, tables)
        except Exception:
            n = len(tables) if isinstance(tables, (list, tuple)) else 1
            _collective_failure(lambda: lib.clembed_mpi_feature_set_create(ctx_h, handle, None, max(n, 1),
                                                                           byref(c_void_p())))
            raise
        s = c_void_p()
        st = lib.clembed_mpi_feature_set_create(ctx_h, handle, specs, len(meta), byref(s))
        del keep                       # the names and id samples: read by the call only
        ctx._check(st, "clembed_mpi_feature_set_create")
        self._s = s
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._tables = [Table(self, i, *m) for i, m in enumerate(meta)]
        _live_sets.add(self)

    @staticmethod
    def _specs(ctx: Any, tables: Any) -> Tuple[Any, List[Any], List[Tuple[str, int, int, int]]]:
        """(the clembed_mpi_table_spec array, what it points to, (name, rows, cols, dtype) each)."""
        if isinstance(tables, dict) or not isinstance(tables, (list, tuple)):
            raise wrong_type("tables", "must be a list of dicts (one per table), not %s" % type(tables).__name__)
        arr = (TableSpec_t * max(len(tables), 1))()
        keep: List[Any] = []
        meta = []
        for i, d in enumerate(tables):
            if not isinstance(d, dict):
                raise wrong_type("tables", "tables[%d] must be a dict, not %s" % (i, type(d).__name__))
            unknown = sorted(set(d) - set(_SPEC_KEYS))
            if unknown or "rows" not in d or "cols" not in d:
                raise invalid("tables", "tables[%d] has the keys %s: it takes %s ('rows' and 'cols' needed)"
                              % (i, sorted(d), ", ".join(_SPEC_KEYS)))
            name = d.get("name")
            if name is not None and not isinstance(name, str):
                raise wrong_type("tables", "tables[%d]['name'] must be a str or None, not %s"
                                 % (i, type(name).__name__))
            nb = name.encode() if name is not None else None
            keep.append(nb)
            arr[i].name = nb
            arr[i].rows = _count(d["rows"], "rows")
            arr[i].cols = _count(d["cols"], "cols")
            arr[i].dtype = dtype_code(d.get("dtype", "f32"), "dtype")
            arr[i].shard = choice(SHARD_KINDS, d.get("shard", "auto"), "shard")
            arr[i].owner = integer(d.get("owner", -1), "owner", -1, 2 ** 31)
            sample = d.get("id_sample")
            bags = d.get("sample_bags")
            if sample is not None:
                ids = ctx._as_ids(sample, "id_sample")
                keep.append(ids)
                arr[i].id_sample = ctypes.pointer(ids._ids)
                if bags is None and len(ids.shape) == 2:    # bags of one size, a row each
                    bags = ids.shape[0]
            arr[i].sample_bags = _count(bags if bags is not None else 0, "sample_bags")
            meta.append((name if name is not None else "table%d" % i, arr[i].rows, arr[i].cols, arr[i].dtype))
        return arr, keep, meta

    # --- lifetime
    @property
    def _live(self) -> c_void_p:
        if not self._s.value:
            raise invalid("", "the clembed.mpi.FeatureSet is released (by release() or the end of its with block)")
        return self._s

    @property
    def closed(self) -> bool:
        """True once release() has run."""
        return not self._s.value

    def release(self) -> None:
        """Releases every table (and the optimizer states), the views of them and the set's
        communicator. Collective. A second call does nothing."""
        s = getattr(self, "_s", None)
        if s is None or not s.value:
            return
        for ref in self._views:        # the views handed out point at freed buffers from now
            v = ref()
            if v is not None:
                v._m.buffer = None
                v._m.rows = 0
        self._views = []
        if not MPI.Is_finalized():
            lib.clembed_mpi_feature_set_release(s)
        self._s = c_void_p()
        _live_sets.discard(self)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass

    def __enter__(self) -> "FeatureSet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __len__(self) -> int:
        return len(getattr(self, "_tables", []))

    def __repr__(self) -> str:
        if self.closed:
            return "clembed.mpi.FeatureSet(released)"
        return "clembed.mpi.FeatureSet(%s)" % ", ".join(
            "%s: %s" % (t.name, self.plan(t.index)[0]) for t in self._tables)

    def _view(self, m: Matrix_t) -> Matrix:
        """A Matrix over m, a buffer the set owns: never released by the view, which keeps
        the set alive (release() empties it)."""
        v = Matrix(self.ctx, m, owned=False, keep=self)
        self._views.append(weakref.ref(v))
        if len(self._views) > 64:
            self._views = [r for r in self._views if r() is not None]
        return v

    # --- the tables
    @property
    def tables(self) -> List[Table]:
        """The tables, in order (Table i is fed by feature i)."""
        return list(self._tables)

    def _index(self, i: Any) -> int:
        if isinstance(i, str):
            for t in self._tables:
                if t.name == i:
                    return t.index
            raise invalid("table", "no table is named %r (the set has %s)" % (i, [t.name for t in self._tables]))
        return integer(i, "table", 0, len(self._tables)) if self._tables else integer(i, "table", 0, 0)

    @api("FeatureSet.plan", "clembed_mpi_feature_set_plan")
    def plan(self, i: Any) -> Tuple[str, int, int]:
        """Table i's plan (i an index or a table's name): (kind, first_rank, ranks), kind
        'row', 'table', 'column' or 'table_row' (never 'auto'): the first rank holding part
        of it and how many consecutive ranks do (TABLE: the owner and 1; ROW: 0 and every
        rank; COLUMN: 0 and the blocks; TABLE_ROW: the node's first rank and its ranks).
        Not collective."""
        k, first, ranks = c_int(), c_int(), c_int()
        self.ctx._check(lib.clembed_mpi_feature_set_plan(self._live, self._index(i), byref(k), byref(first),
                                                         byref(ranks)), "clembed_mpi_feature_set_plan")
        return KIND_NAMES.get(k.value, str(k.value)), int(first.value), int(ranks.value)

    @api("FeatureSet.save", "clembed_mpi_checkpoint_save")
    def save(self, path: Any, metadata: Optional[Dict[str, str]] = None) -> None:
        """Saves every table, and the optimizer states its steps made, into one checkpoint
        file under the tables' names (clembed_mpi_checkpoint_save: atomic, CRC-32C per
        tensor, the same bytes whatever the plans and the number of ranks), with `metadata`
        (str -> str: step counts, seeds). Collective: every rank passes the same path and
        metadata; the path must be on a file system every rank sees."""
        s = self._live
        keys = list((metadata or {}).keys())
        if any(not isinstance(k, str) or not isinstance(metadata[k], str) for k in keys):
            raise wrong_type("metadata", "must map str to str")
        n = len(self._tables)
        tabs = (TAB * n)(*[lib.clembed_mpi_feature_set_table(s, i) for i in range(n)])
        names = (c_char_p * n)(*[t.name.encode() for t in self._tables])
        mk = (c_char_p * max(len(keys), 1))(*[k.encode() for k in keys])
        mv = (c_char_p * max(len(keys), 1))(*[metadata[k].encode() for k in keys])
        self.ctx._check(lib.clembed_mpi_checkpoint_save(os.fsencode(path), tabs, names, n, mk, mv, len(keys)),
                        "clembed_mpi_checkpoint_save")

    @api("FeatureSet.load_checkpoint", "clembed_mpi_checkpoint_load")
    def load_checkpoint(self, path: Any) -> Dict[str, str]:
        """Loads every table (and its optimizer state, where the file holds one) from a
        checkpoint saved by FeatureSet.save or clembed_mpi_checkpoint_save, under the tables'
        names, on any number of ranks and under any plans: the next bags_step continues the
        saved run bit for bit. Every check comes before any row is written. Collective.
        Returns the file's metadata (clembed.metadata(path))."""
        s = self._live
        n = len(self._tables)
        tabs = (TAB * n)(*[lib.clembed_mpi_feature_set_table(s, i) for i in range(n)])
        names = (c_char_p * n)(*[t.name.encode() for t in self._tables])
        self.ctx._check(lib.clembed_mpi_checkpoint_load(os.fsencode(path), tabs, names, n),
                        "clembed_mpi_checkpoint_load")
        from ._checkpoint import metadata
        return metadata(path)

    @api("FeatureSet.table")
    def table(self, i: Any) -> Table:
        """Table i (an index or a table's name): init_normal / init_uniform (collective),
        shard() and state() (this rank's part)."""
        self._live
        return self._tables[self._index(i)]

    # --- the calls
    def _features(self, features: Any, keep: List[Any], forward: bool) -> Tuple[Any, int, int, List[Any]]:
        """Context._bag_features of the features (dicts of Context.embedding_bags' keys but
        'table'; the step's may hold 'max_rows'), each given a stand-in for its table (its
        shape and dtype, no buffer: C reads features[i].table of no set call)."""
        if isinstance(features, dict) or not isinstance(features, (list, tuple)):
            raise wrong_type("features", "must be a list of dicts (one per table), not %s" % type(features).__name__)
        if len(features) != len(self._tables):
            raise invalid("features", "has %d entries; the set has %d tables (feature i reads table i)"
                          % (len(features), len(self._tables)))
        plain = []
        for f, d in enumerate(features):
            if not isinstance(d, dict):
                raise wrong_type("features", "features[%d] must be a dict, not %s" % (f, type(d).__name__))
            if "table" in d:
                raise invalid("features", "features[%d] has a 'table': feature i reads the set's table i" % f)
            if forward and "max_rows" in d:
                raise invalid("features", "features[%d] has 'max_rows', an input of bags_step: embedding_bags "
                              "returns them (.max_rows_ids)" % f)
            t = self._tables[f]
            stand_in = Matrix(self.ctx, Matrix_t(buffer=None, offset=0, rows=t.rows, cols=t.cols, ld=0,
                                                 dtype=t._dtype), owned=False)
            plain.append(dict({k: v for k, v in d.items() if k != "max_rows"}, table=stand_in))
        arr, n, bags, max_rows = self.ctx._bag_features(plain, keep, forward)
        for f in range(n):
            arr[f].table = None
        if not forward:
            for f, d in enumerate(features):
                mr = d.get("max_rows")
                if mr is None:
                    continue
                mr = mr if isinstance(mr, Ids) else self.ctx._as_ids(mr, "max_rows")
                keep.append(mr)
                arr[f].options.max_rows = ctypes.pointer(mr._ids)
        return arr, n, bags, max_rows

    @api("FeatureSet.embedding_bags", "clembed_mpi_embedding_bags")
    def embedding_bags(self, features: Sequence[Dict[str, Any]], out_dtype: DTypeLike = "f32", *,
                       out: Optional[Matrix] = None) -> Matrix:
        """The forward of every feature of this rank's batch: features[i] (one per table,
        feature i reads table i) a dict of Context.embedding_bags' keys but 'table': 'ids',
        'offsets', 'mode', 'per_sample_weights', 'padding_idx', 'include_last_offset',
        'on_bad_id' ('remap' is refused); every feature this rank's same number of bags (a
        rank may have none). Returns this rank's bags x (the tables' cols together), F32, F16
        or BF16 (out_dtype, or `out`), feature i in its own block of columns: bit for bit
        the rows one device's Context.embedding_bags gives these bags in the ranks' batches
        concatenated in rank order, on the whole tables. 'max' features' max_rows (rows of
        the whole table, the input of bags_step) are in .max_rows_ids (an Ids per feature,
        None for the others). Collective and blocking: the ranks agree on out's dtype and
        each feature's mode, on_bad_id, padding_idx and whether weights are given. A bad id
        is IndexOutOfRangeError on the rank that passed it only."""
        s = self._live
        keep: List[Any] = []
        try:
            arr, n, bags, max_rows = self._features(features, keep, True)
            width = sum(t.cols for t in self._tables)
            out = self.ctx._out(out, bags, width, out_dtype, None)
        except Exception:
            _collective_failure(lambda: lib.clembed_mpi_embedding_bags(s, None, len(self._tables), None))
            raise
        st = lib.clembed_mpi_embedding_bags(s, arr, n, byref(out._m))
        self.ctx._check(st, "clembed_mpi_embedding_bags")
        out.event = None
        out.max_rows_ids = max_rows
        return out

    @api("FeatureSet.bags_step", "clembed_mpi_bags_optimizer_step")
    def bags_step(self, features: Sequence[Dict[str, Any]], grad: Any, optimizers: Sequence[Dict[str, Any]]) -> None:
        """One step of every table on every rank's bags: bit for bit one device's
        Context.bags_optimizer_step on the ranks' batches concatenated in rank order (the
        tables and their optimizer states). features as embedding_bags took them, plus
        'max_rows' for a 'max' feature (the forward's .max_rows_ids[i]); grad this rank's
        bags x (the tables' cols together), F32, F16 or BF16 (a Matrix or an array);
        optimizers one dict per table of Context.optimizer_step's optimizer keywords (kind,
        lr, step, eps, betas, weight_decay, stochastic_rounding, rounding_seed), without
        'state' or 'state2': each table keeps its own, made by its first step (Table.state
        shows it); 'step' counts the steps (Adam's t, stochastic rounding's bits), the same
        on every rank. Refused on every rank (UnsupportedError): on a COLUMN table
        'rowwise_adagrad', stochastic rounding of an F16/BF16 table, and 'adam' or weight
        decay for a 'max' feature; a step of a quantized table.
        Collective and blocking: the ranks agree on grad's dtype, the features' options and
        every optimizer field."""
        s = self._live
        keep: List[Any] = []
        try:
            arr, n, _, _ = self._features(features, keep, False)
            g = self.ctx._grad(grad)
            if isinstance(optimizers, dict) or not isinstance(optimizers, (list, tuple)):
                raise wrong_type("optimizers", "must be a list of dicts (one per table), not %s"
                                 % type(optimizers).__name__)
            if len(optimizers) != n:
                raise invalid("optimizers", "has %d entries; the set has %d tables (one per table)"
                              % (len(optimizers), n))
            os_ = _lib.sized_array(Optimizer_t, n)
            for f, spec in enumerate(optimizers):
                unknown = sorted(set(spec) - set(OPTIMIZER_KEYS)) if isinstance(spec, dict) else None
                if unknown is None or unknown or "kind" not in spec or "lr" not in spec:
                    raise invalid("optimizers", "optimizers[%d] is a dict of %s ('kind' and 'lr' needed), not %s"
                                  % (f, ", ".join(k for k in OPTIMIZER_KEYS if k not in ("state", "state2")),
                                     sorted(spec) if isinstance(spec, dict) else type(spec).__name__))
                if spec.get("state") is not None or spec.get("state2") is not None:
                    raise invalid("optimizers", "optimizers[%d] has a state: the set keeps each table's optimizer "
                                  "state itself (Table.state shows it)" % f)
                os_[f] = optimizer_options(**spec)
        except Exception:
            _collective_failure(lambda: lib.clembed_mpi_bags_optimizer_step(s, None, len(self._tables), None, None))
            raise
        st = lib.clembed_mpi_bags_optimizer_step(s, arr, n, byref(g._m), os_)
        self.ctx._check(st, "clembed_mpi_bags_optimizer_step")


@atexit.register
def _release_live_sets() -> None:
    """Releases the sets still alive at exit, before mpi4py finalizes MPI (atexit runs the
    functions registered later first; mpi4py registered its own when it was imported)."""
    for fs in list(_live_sets):
        try:
            fs.release()
        except Exception:  # pragma: no cover
            pass
