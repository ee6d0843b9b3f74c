"""clembed.mpi (python/clembed/mpi.py, libclembed_mpi's sharded feature sets over mpi4py)
under mpirun: a set with every plan (ROW, TABLE with an owner, COLUMN, TABLE_ROW and the
planner's), F32 / F16 / BF16 tables and a Q8_0 one (forward only); the forward and two
steps of every optimizer against one device's Context.embedding_bags and
Context.bags_optimizer_step on the ranks' batches concatenated in rank order, bit for bit.
Each rank computes that reference itself on whole tables on its own device (every rank's
batch is a function of the rank, so every rank can make all of them) and writes the set's
parts from the whole tables' bytes through Table.shard(). Also the refusals, a bad id on
one rank and an argument the binding refuses on one rank only (no rank left waiting).

    mpirun -n 2 /usr/bin/python3 -m pytest -q python/tests/test_mpi_sets.py   (1, 2, 3 ranks...)

Skipped with the reason when not started by an MPI launcher (CLEMBED_MPI_TESTS=1 runs it in
one process all the same), without mpi4py, or when libclembed_mpi is not found. Every
check is agreed over the ranks (a failure on one fails every rank), so that no rank waits
in a collective for one that failed.
"""
import ctypes
import functools
import os
import re
import subprocess
import sys
import traceback

import numpy as np
import pytest

import clembed
from clembed import _lib

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.environ.get("CLEMBED_INCLUDE_DIR", os.path.join(HERE, "..", "..", "include"))
LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE")

if not (any(v in os.environ for v in LAUNCHER_VARS) or os.environ.get("CLEMBED_MPI_TESTS") == "1"):
    pytest.skip("not started by mpirun (mpirun -n 2 %s -m pytest %s; CLEMBED_MPI_TESTS=1 runs it in one process)"
                % (sys.executable, os.path.relpath(__file__)), allow_module_level=True)
pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install mpi4py, Debian: python3-mpi4py)")
try:
    import clembed.mpi as cmpi
except ImportError as e:
    if type(e).__name__ == "LibraryNotFoundError" and "not found" in str(e):
        pytest.skip("libclembed_mpi is not found: %s" % e, allow_module_level=True)
    raise
from mpi4py import MPI  # noqa: E402

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()


class AgreedFailure(AssertionError):
    """A check that failed on some rank, raised on every rank."""


def agree(ok, what):
    """Fails on every rank when `ok` is false on any."""
    oks = COMM.allgather(bool(ok))
    bad = [r for r, o in enumerate(oks) if not o]
    if bad:
        raise AgreedFailure("%s: fails on rank%s %s of %d" % (what, "s" if len(bad) > 1 else "", bad, SIZE))


def collective(test):
    """A test run by every rank: a failure of agree() fails it on every rank; any other
    exception may be this rank's alone, with the others waiting in a collective for it, so
    the rank prints it and aborts the job (mpirun then fails) rather than leave them waiting."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        try:
            return test(*args, **kwargs)
        except (AgreedFailure, pytest.skip.Exception):
            raise
        except BaseException:
            if SIZE > 1:
                text = "\nrank %d of %d, %s:\n%s" % (RANK, SIZE, test.__name__, traceback.format_exc())
                capture = _CONFIG[0].pluginmanager.getplugin("capturemanager") if _CONFIG else None
                if capture is not None:
                    with capture.global_and_fixture_disabled():
                        sys.stderr.write(text)
                        sys.stderr.flush()
                else:
                    sys.stderr.write(text)
                    sys.stderr.flush()
                COMM.Abort(1)
            raise
    return run


_CONFIG = []


@pytest.fixture(autouse=True)
def _pytest_config(pytestconfig):
    """The pytest config, for collective() to print past the output capture."""
    if not _CONFIG:
        _CONFIG.append(pytestconfig)


def agree_raises(cls, fn, what, text=None):
    """fn() raises cls on this rank (its message holding `text`, if given); agreed."""
    try:
        fn()
        got = "no error"
    except cls as e:
        got = None if text is None or text in str(e) else "%s: %s" % (type(e).__name__, e)
    except Exception as e:  # noqa: BLE001 - reported, then agreed
        got = "%s: %s" % (type(e).__name__, e)
    agree(got is None, "%s (rank %d: %s)" % (what, RANK, got))


# ------------------------------------------------------------------ the tables and batches

def spec(name, rows, cols, dtype, shard, owner=-1, mode="sum", weights=False, fixed=False, padding=None,
         policy="check", opt="sgd"):
    return dict(name=name, rows=rows, cols=cols, dtype=dtype, shard=shard, owner=owner, mode=mode, weights=weights,
                fixed=fixed, padding=padding, policy=policy, opt=opt)


LAST = SIZE - 1
MIXED = [
    spec("users", 1000, 16, "f32", "row", -1, "sum", weights=True, opt="adagrad"),
    spec("genres", 50, 8, "f16", "table", LAST, "mean", padding=3, opt="rowwise_adagrad"),
    spec("items", 300, 24, "bf16", "column", -1, "sum", policy="wrap", opt="adam"),
    spec("hours", 20, 4, "f32", "table", -1, "max", opt="sgd"),
    spec("words", 200, 64, "q8_0", "column", -1, "sum", weights=True, policy="clamp", opt=None),
    spec("days", 7, 8, "f32", "table_row", 0, "sum", fixed=True, opt="adagrad"),
    spec("ads", 500, 12, "f32", "auto", -1, "mean", padding=0, policy="zero", opt="rowwise_adagrad"),
]
FLOAT = [t for t in MIXED if t["dtype"] in ("f32", "f16", "bf16")]


def bags_of(r, empty_rank0=False):
    return 0 if (r == 0 and empty_rank0) else r + 2


def batch_of(t, f, r, seed, empty_rank0=False, bad=False):
    """Rank r's bags of feature f: (ids, starts or None, weights); a function of (r, f, seed)."""
    rng = np.random.default_rng([seed, f, r])
    bags = bags_of(r, empty_rank0)
    lens = np.full(bags, 2) if t["fixed"] else rng.integers(0, 5, bags)
    n = int(lens.sum())
    ids = rng.integers(0, t["rows"], n).astype(np.int64)
    if t["padding"] is not None:
        ids[rng.random(n) < 1 / 7] = t["padding"]
    w = (rng.integers(-1000, 1001, n) / 997.0).astype(np.float32)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64) if bags else np.zeros(0, np.int64)
    if bad and bags:  # one more id in the last bag, past the table
        ids = np.append(ids, t["rows"] + 5)
        w = np.append(w, np.float32(0.5))
    if t["fixed"]:
        return ids.reshape(bags, 2), None, w.reshape(bags, 2)
    return ids, starts, w


def batch_all(t, f, seed, empty_rank0=False):
    """Every rank's bags of feature f, concatenated in rank order; and this rank's first bag."""
    parts = [batch_of(t, f, r, seed, empty_rank0) for r in range(SIZE)]
    first = sum(bags_of(r, empty_rank0) for r in range(RANK))
    if t["fixed"]:
        return (np.concatenate([p[0] for p in parts]).reshape(-1, 2), None,
                np.concatenate([p[2] for p in parts]).reshape(-1, 2)), first
    ids, starts, w, base = [], [], [], 0
    for p in parts:
        ids.append(p[0])
        starts.append(p[1] + base)
        w.append(p[2])
        base += p[0].size
    return (np.concatenate(ids), np.concatenate(starts).astype(np.int64), np.concatenate(w)), first


def feature(t, b, table=None):
    ids, starts, w = b
    d = dict(ids=ids, mode=t["mode"], on_bad_id=t["policy"])
    if starts is not None:
        d["offsets"] = starts
    if t["weights"]:
        d["per_sample_weights"] = w
    if t["padding"] is not None:
        d["padding_idx"] = t["padding"]
    if table is not None:
        d["table"] = table
    return d


def make_set(ctx, T):
    fs = cmpi.FeatureSet(ctx, COMM, [dict(name=t["name"], rows=t["rows"], cols=t["cols"], dtype=t["dtype"],
                                          shard=t["shard"], owner=t["owner"]) for t in T])
    for i, t in enumerate(T):
        kind, first, ranks = fs.plan(i)
        agree(kind in ("row", "table", "column", "table_row") and first >= 0 and ranks >= 1
              and first + ranks <= SIZE, "table %d: plan %s over ranks %d + %d" % (i, kind, first, ranks))
        if t["shard"] != "auto":
            agree(kind == t["shard"], "table %d: plan %s, forced %s" % (i, kind, t["shard"]))
        if t["shard"] == "table" and t["owner"] != -1:
            agree(first == t["owner"], "table %d: owner %d, asked %d" % (i, first, t["owner"]))
        agree(fs.plan(t["name"]) == (kind, first, ranks) and fs.table(t["name"]).index == i, "table by name")
    return fs


def whole_of(ctx, t, f):
    vals = (np.random.default_rng(4242 + f).integers(-1000, 1001, (t["rows"], t["cols"])) / 997.0)
    return ctx.matrix(vals.astype(np.float32), dtype=t["dtype"])


def my_block(fs, i, t):
    """This rank's (first column, columns) of table i, as include/clembed_mpi.h defines them."""
    kind, first, ranks = fs.plan(i)
    if kind != "column":
        return 0, t["cols"]
    unit = clembed._args.BLOCKS[t["dtype"]][0]
    u = t["cols"] // unit
    if not first <= RANK < first + ranks:
        return 0, 0
    j = RANK - first
    c0 = j * u // ranks * unit
    return c0, (j + 1) * u // ranks * unit - c0


def as_bytes(m):
    """A matrix's bytes as stored, a row per row (uint8)."""
    raw = np.ascontiguousarray(m.raw())
    return raw.view(np.uint8).reshape(raw.shape[0], raw.shape[1] * raw.itemsize)


def part_of(whole_bytes, dtype, cols_all, c0, w, first_row, rows):
    """The bytes of rows [first_row, +rows) and columns [c0, c0 + w) of a whole table's bytes."""
    unit = clembed._args.BLOCKS[dtype][0] or cols_all
    ub = _lib.lib.clembed_dtype_row_bytes(_lib.DTYPES[dtype], unit)
    return np.ascontiguousarray(whole_bytes[first_row:first_row + rows, c0 // unit * ub:(c0 + w) // unit * ub])


def write_bytes(ctx, view, host):
    st = _lib.lib.clembed_matrix_write(ctx._live, ctypes.byref(view._m), host.ctypes.data_as(ctypes.c_void_p),
                                       view._m.dtype)
    ctx._check(st, "clembed_matrix_write")


def fill(ctx, fs, i, t, W):
    """Writes the whole table W's bytes into the set's table i (this rank's part)."""
    first, view = fs.table(i).shard()
    c0, w = my_block(fs, i, t)
    fits = view.cols == w and fs.table(i).first_col == c0
    past = w == 0 and view.rows == 0            # a rank past a COLUMN table's blocks: no rows
    agree((fits or past) and first + view.rows <= t["rows"],
          "table %d: the shard is %d x %d from row %d, column %d; the plan says %d columns from %d"
          % (i, view.rows, view.cols, first, fs.table(i).first_col, w, c0))
    if view.rows and view.cols:
        write_bytes(ctx, view, part_of(as_bytes(W), t["dtype"], t["cols"], c0, w, first, view.rows))


def holds(ctx, fs, i, t, W, which=0):
    """True when this rank's part of table i (or of its state `which`) has the bytes of W's."""
    if which:
        kind, view = fs.table(i).state(which)
        if kind != t["opt"]:
            return False
        first, _ = fs.table(i).shard()
        dtype = "f32"
    else:
        first, view = fs.table(i).shard()
        dtype = t["dtype"]
    c0, w = my_block(fs, i, t)
    if which and fs.plan(i)[0] != "column":
        c0, w = 0, W.cols
    if view.cols != w and not (w == 0 and view.rows == 0):   # a rank past a COLUMN table's blocks: 0 rows
        return False
    if not view.rows or not view.cols:
        return True
    return np.array_equal(as_bytes(view), part_of(as_bytes(W), dtype, W.cols, c0, w, first, view.rows))


# ------------------------------------------------------------------ the module

@collective
def test_struct_and_enum_mirror_the_header():
    """clembed_mpi_table_spec and clembed_shard_kind of include/clembed_mpi.h, as the binding has them."""
    path = os.path.join(INCLUDE, "clembed_mpi.h")
    if not os.path.exists(path):
        pytest.skip("no %s (set CLEMBED_INCLUDE_DIR)" % path)
    text = re.sub(r"/\*.*?\*/", " ", open(path).read(), flags=re.S)
    m = re.search(r"typedef\s+struct\s+clembed_mpi_table_spec\s*\{(.*?)\}", text, flags=re.S)
    fields = []
    for decl in m.group(1).split(";"):
        fields += [re.search(r"(\w+)\s*$", d.strip()).group(1) for d in decl.split(",") if d.strip()]
    agree(fields == [f[0] for f in cmpi.TableSpec_t._fields_], "clembed_mpi_table_spec's fields %s" % fields)
    e = re.search(r"typedef\s+enum\s+clembed_shard_kind\s*\{(.*?)\}", text, flags=re.S).group(1)
    consts = {k.lower(): int(v) for k, v in re.findall(r"CLEMBED_SHARD_(\w+)\s*=\s*(\d+)", e)}
    agree(consts == cmpi.SHARD_KINDS, "clembed_shard_kind %s" % consts)
    ptr = ctypes.sizeof(ctypes.c_void_p)   # LP64 and ILP32 alike: name, rows, cols, three ints, a pointer, a size
    at = (3 * ptr + 12 + ptr - 1) // ptr * ptr
    agree((cmpi.TableSpec_t.id_sample.offset, cmpi.TableSpec_t.sample_bags.offset, ctypes.sizeof(cmpi.TableSpec_t))
          == (at, at + ptr, at + 2 * ptr), "clembed_mpi_table_spec's layout")


@collective
def test_import_and_library():
    """import clembed alone leaves mpi4py out; the library is found next to libclembed (or
    where CLEMBED_MPI_LIBRARY says), bound to the package's libclembed; a bad
    CLEMBED_MPI_LIBRARY is an ImportError naming it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_", "OPAL_", "HYDRA"))}
    ok = True
    if RANK == 0:
        r = subprocess.run([sys.executable, "-c", "import sys, clembed; print('mpi4py' in sys.modules)"],
                           env=env, capture_output=True, text=True, timeout=120)
        ok = r.returncode == 0 and r.stdout.strip() == "False"
        bad = dict(env, CLEMBED_MPI_LIBRARY="/nonexistent/libclembed_mpi.so")
        code = ("import sys\ntry:\n    import clembed.mpi\nexcept ImportError as e:\n    print('ImportError', e)\n"
                "print('mpi4py' in sys.modules)")
        r2 = subprocess.run([sys.executable, "-c", code], env=bad, capture_output=True, text=True, timeout=120)
        ok = (ok, r2.returncode == 0 and r2.stdout.startswith("ImportError") and "CLEMBED_MPI_LIBRARY" in r2.stdout
              and r2.stdout.strip().endswith("False"))
        ok = ok if all(ok) else "%s %s / %s %s" % (r.stdout, r.stderr[-300:], r2.stdout, r2.stderr[-300:])
    agree(ok is True or ok == (True, True), "import clembed without mpi4py; a bad CLEMBED_MPI_LIBRARY: %s" % (ok,))
    if not os.environ.get("CLEMBED_MPI_LIBRARY") and os.path.dirname(clembed.library_path):
        base = os.path.dirname(os.path.abspath(clembed.library_path))
        agree(os.path.dirname(cmpi.library_path) in (base, os.path.join(base, "src", "mpi")),
              "libclembed_mpi %s next to libclembed %s" % (cmpi.library_path, clembed.library_path))
    if os.path.exists("/proc/self/maps"):
        mapped = {os.path.realpath(line.split()[-1]) for line in open("/proc/self/maps")
                  if re.search(r"/libclembed\.so[.\d]*$", line.strip())}
        agree(len(mapped) == 1, "one libclembed in the process: %s" % sorted(mapped))


# ------------------------------------------------------------------ forward

def check_forward(ctx, T, out_dtype, seed, empty_rank0=False):
    fs = make_set(ctx, T)
    W = [whole_of(ctx, t, i) for i, t in enumerate(T)]
    for i, t in enumerate(T):
        fill(ctx, fs, i, t, W[i])
    mine, every, first_bag = [], [], 0
    for i, t in enumerate(T):
        mine.append(feature(t, batch_of(t, i, RANK, seed, empty_rank0)))
        b, first_bag = batch_all(t, i, seed, empty_rank0)
        every.append(feature(t, b, W[i]))
    out = fs.embedding_bags(mine, out_dtype)
    ref = ctx.embedding_bags(every, out_dtype)
    B = bags_of(RANK, empty_rank0)
    agree(out.shape == (B, sum(t["cols"] for t in T)) and out.dtype == out_dtype,
          "the output's shape %s" % (out.shape,))
    agree(np.array_equal(as_bytes(out), as_bytes(ref)[first_bag:first_bag + B]),
          "the pooled rows (out %s) equal one device's" % out_dtype)
    for i, t in enumerate(T):
        if t["mode"] != "max":
            agree(out.max_rows_ids[i] is None, "no max_rows for feature %d" % i)
            continue
        got, want = out.max_rows_ids[i].numpy(), ref.max_rows_ids[i].numpy()
        agree(np.array_equal(got.reshape(-1), want.reshape(-1)[first_bag * t["cols"]:(first_bag + B) * t["cols"]]),
              "max_rows of feature %d" % i)
    for i, t in enumerate(T):   # the parts were written from the whole tables and left alone
        agree(holds(ctx, fs, i, t, W[i]), "table %d unchanged by the forward" % i)
    fs.release()


@pytest.mark.parametrize("out_dtype", ["f32", "f16", "bf16"])
@collective
def test_forward_every_plan(ctx, out_dtype):
    check_forward(ctx, MIXED, out_dtype, 1)


@collective
def test_forward_rank_without_bags(ctx):
    check_forward(ctx, MIXED, "f32", 3, empty_rank0=True)


@collective
def test_bad_id_on_one_rank(ctx):
    """The bad id is the result of the rank that passed it (IndexOutOfRangeError naming the
    feature); the others get their rows."""
    T = MIXED[:4]
    fs = make_set(ctx, T)
    W = [whole_of(ctx, t, i) for i, t in enumerate(T)]
    for i, t in enumerate(T):
        fill(ctx, fs, i, t, W[i])
    bad_rank = SIZE - 1
    mine = [feature(t, batch_of(t, i, RANK, 4, bad=(RANK == bad_rank and i == 0))) for i, t in enumerate(T)]
    every, first_bag = [], 0
    for i, t in enumerate(T):
        b, first_bag = batch_all(t, i, 4)
        every.append(feature(t, b, W[i]))
    ref = ctx.embedding_bags(every)
    try:
        out = fs.embedding_bags(mine)
        err = None
    except clembed.IndexOutOfRangeError as e:
        err = e
    if RANK == bad_rank:
        ok = (err is not None and err.argument == "ids" and err.value == T[0]["rows"] + 5
              and "features[0].ids[" in str(err) and err.call == "FeatureSet.embedding_bags")
    else:
        B = bags_of(RANK)
        ok = err is None and np.array_equal(as_bytes(out), as_bytes(ref)[first_bag:first_bag + B])
    agree(ok, "a bad id on rank %d: its IndexOutOfRangeError there, one device's rows elsewhere (rank %d: %r)"
          % (bad_rank, RANK, err))
    fs.release()


# ------------------------------------------------------------------ steps

def check_steps(ctx, T, grad_dtype, stochastic):
    fs = make_set(ctx, T)
    W, S1, S2, opts, ropts = [], [], [], [], []
    for i, t in enumerate(T):
        W.append(whole_of(ctx, t, i))
        fill(ctx, fs, i, t, W[i])
        o = dict(kind=t["opt"], lr=0.05, weight_decay=0.01 if i == 0 else 0.0)
        if stochastic and t["shard"] != "column" and t["dtype"] != "f32":
            o.update(stochastic_rounding=True, rounding_seed=99)
        s1 = ctx.empty(t["rows"], 1 if t["opt"] == "rowwise_adagrad" else t["cols"]) if t["opt"] != "sgd" else None
        s2 = ctx.empty(t["rows"], t["cols"]) if t["opt"] == "adam" else None
        S1.append(s1)
        S2.append(s2)
        opts.append(o)
        ropts.append(dict(o, state=s1, state2=s2))
    width = sum(t["cols"] for t in T)
    for step in (1, 2):
        mine, every, first_bag = [], [], 0
        for i, t in enumerate(T):
            mine.append(feature(t, batch_of(t, i, RANK, 10 + step)))
            b, first_bag = batch_all(t, i, 10 + step)
            every.append(feature(t, b, W[i]))
        out = fs.embedding_bags(mine)          # MAX's max_rows
        ref = ctx.embedding_bags(every)
        total, B = ref.rows, out.rows
        gh = (np.random.default_rng([777, step]).integers(-1000, 1001, (total, width)) / 997.0).astype(np.float32)
        g = ctx.matrix(gh[first_bag:first_bag + B], dtype=grad_dtype)
        ga = ctx.matrix(gh, dtype=grad_dtype)
        for i, t in enumerate(T):
            if t["mode"] == "max":
                mine[i]["max_rows"] = out.max_rows_ids[i]
                every[i]["max_rows"] = ref.max_rows_ids[i]
        fs.bags_step(mine, g, [dict(o, step=step) for o in opts])
        ctx.bags_optimizer_step(every, ga, [dict(o, step=step) for o in ropts])
        ctx.finish()
    for i, t in enumerate(T):
        agree(holds(ctx, fs, i, t, W[i]), "table %d (%s, %s, %s) after two steps equals one device's"
              % (i, t["name"], fs.plan(i)[0], t["opt"]))
        if S1[i] is not None:
            agree(holds(ctx, fs, i, t, S1[i], 1), "table %d's state after two steps" % i)
        else:
            agree_raises(clembed.InvalidArgumentError, lambda: fs.table(i).state(1), "sgd keeps no state")
        if S2[i] is not None:
            agree(holds(ctx, fs, i, t, S2[i], 2), "table %d's second state after two steps" % i)
    fs.release()


@collective
def test_steps_every_plan(ctx):
    check_steps(ctx, FLOAT, "f32", False)


@collective
def test_steps_bf16_table_stochastic_f16_grad(ctx):
    T = [dict(t) for t in FLOAT]
    T[1]["dtype"] = "bf16"     # a TABLE table of BF16, stochastically rounded; an F16 gradient
    check_steps(ctx, T, "f16", True)


@pytest.mark.parametrize("kind", ["row", "table", "column", "table_row"])
@collective
def test_steps_every_plan_forced(ctx, kind):
    T = []
    for i, t in enumerate(FLOAT):
        t = dict(t, shard=kind, owner=i % SIZE if kind == "table" else -1)
        if kind == "column" and t["opt"] == "rowwise_adagrad":
            t["opt"] = "adagrad"
        T.append(t)
    check_steps(ctx, T, "f32", False)


@collective
def test_init_every_plan(ctx):
    """Table.init_normal / init_uniform: the whole table's bits (Context.init's) under every plan."""
    T = [MIXED[0], MIXED[1], dict(MIXED[2], cols=40), MIXED[5]]   # column blocks of uneven widths
    with make_set(ctx, T) as fs:
        for i, t in enumerate(T):
            W = ctx.empty(t["rows"], t["cols"], t["dtype"])
            if i % 2:
                ctx.init(W, "uniform", low=-0.5, high=2.0, seed=77 + i)
                agree(fs.table(i).init_uniform(-0.5, 2.0, seed=77 + i) is fs.table(i), "init_uniform returns the table")
            else:
                ctx.init(W, "normal", mean=0.5, std=2.0, seed=1234 + i)
                fs.table(i).init_normal(0.5, 2.0, 1234 + i)
            agree(holds(ctx, fs, i, t, W), "table %d (%s) after init" % (i, fs.plan(i)[0]))
        # a parameter this binding refuses on one rank, then on every rank: every rank fails,
        # none waits, and the table is left as it was
        agree_raises(clembed.InvalidArgumentError, lambda: fs.table(0).init_normal("x" if RANK == 0 else 0.0, 1.0, 0),
                     "a bad mean on rank 0", "mean" if RANK == 0 else "rank 0 refused")
        agree_raises(clembed.InvalidArgumentError, lambda: fs.table(0).init_uniform(0.0, None, 0), "a bad high", "high")
        _, view = fs.table(0).shard()
        agree(view.rows == 0 or np.isfinite(view.numpy()).all(), "table 0 after refused inits")
    agree(fs.closed, "the with block released the set")


@collective
def test_load_every_plan(ctx):
    """Table.load: a .npy file's table into a set's tables of every plan, F32 and BF16 (converted)."""
    R, C = 301, 40
    T = [dict(MIXED[0], name="loaded%d" % i, rows=R, cols=C, shard=k, owner=-1, dtype=d)
         for i, (k, d) in enumerate((("row", "f32"), ("table", "f32"), ("column", "f32"), ("table_row", "f32"),
                                     ("column", "bf16")))]
    v = (np.arange(R * C, dtype=np.float32).reshape(R, C) % 97 - 48) / 7.0
    path = "/tmp/clembed_py_sets_load_%d.npy" % os.getppid()
    if RANK == 0:
        np.save(path, v)
    COMM.Barrier()
    with make_set(ctx, T) as fs:
        for i, t in enumerate(T):
            W = ctx.load(path, dtype=t["dtype"])
            agree(fs.table(i).load(path) is fs.table(i), "load returns the table")
            agree(holds(ctx, fs, i, t, W), "table %d (%s) after load" % (i, fs.plan(i)[0]))
        agree_raises(clembed.Error, lambda: fs.table(0).load(path if RANK == 0 and SIZE > 1 else "/nonexistent.npy"),
                     "a file one rank cannot open")
    COMM.Barrier()
    if RANK == 0:
        os.unlink(path)


@collective
def test_checkpoint_across_plans(ctx):
    """FeatureSet.save / load_checkpoint: tables and optimizer states saved under one plan load
    under another (COLUMN both ways) and continue bit for bit: one step after the load equals
    one more step of the set that never stopped."""
    path = "/tmp/clembed_py_sets_ckpt_%d.safetensors" % os.getppid()
    A = [dict(MIXED[0], shard="row"), dict(MIXED[1], shard="table", owner=SIZE - 1), dict(MIXED[2], shard="column")]
    B = [dict(MIXED[0], shard="column"), dict(MIXED[1], shard="row"), dict(MIXED[2], shard="table", owner=0)]
    opts = [dict(kind="adagrad", lr=0.05), dict(kind="sgd", lr=0.1), dict(kind="adam", lr=0.01)]
    width = sum(t["cols"] for t in A)
    with make_set(ctx, A) as a, make_set(ctx, B) as b:
        for i in range(len(A)):
            a.table(i).init_normal(0.0, 0.5, seed=40 + i)
        for step in (1, 2):
            f = [feature(t, batch_of(t, i, RANK, 60 + step)) for i, t in enumerate(A)]
            g = np.asarray([[((r * 7 + c + step) % 11 - 5) / 8.0 for c in range(width)]
                            for r in range(bags_of(RANK))], np.float32).reshape(bags_of(RANK), width)
            if step == 2:  # b continues from a's file
                agree(b.load_checkpoint(path).get("step") == "1", "the metadata came back")
                b.bags_step(f, g, [dict(o, step=step) for o in opts])
            a.bags_step(f, g, [dict(o, step=step) for o in opts])
            if step == 1:
                a.save(path, {"step": "1"})
        a.save(path + ".a", {"step": "2"})
        b.save(path + ".b", {"step": "2"})
    COMM.Barrier()
    same = open(path + ".a", "rb").read() == open(path + ".b", "rb").read()
    agree(same, "the run resumed under other plans saves the bytes of the run that never stopped")
    COMM.Barrier()
    if RANK == 0:
        for p in (path, path + ".a", path + ".b"):
            os.unlink(p)


# ------------------------------------------------------------------ refusals

@collective
def test_refusals(ctx):
    T = [MIXED[0], MIXED[2], MIXED[1]]        # ROW, COLUMN, TABLE
    fs = make_set(ctx, T)
    f = [feature(t, batch_of(t, i, RANK, 5)) for i, t in enumerate(T)]
    B, width = bags_of(RANK), sum(t["cols"] for t in T)
    g = np.zeros((B, width), np.float32)
    sgd = dict(kind="sgd", lr=0.1)
    # ROWWISE_ADAGRAD and stochastic rounding on the COLUMN table: every rank refuses
    agree_raises(clembed.UnsupportedError, lambda: fs.bags_step(f, g, [sgd, dict(kind="rowwise_adagrad", lr=0.1), sgd]),
                 "rowwise_adagrad on a COLUMN table", "ROWWISE_ADAGRAD")
    agree_raises(clembed.UnsupportedError,
                 lambda: fs.bags_step(f, g, [sgd, dict(sgd, stochastic_rounding=True), sgd]),
                 "stochastic rounding on a COLUMN table")
    # a state passed in: the set keeps its own
    st = ctx.empty(T[0]["rows"], T[0]["cols"])
    agree_raises(clembed.InvalidArgumentError,
                 lambda: fs.bags_step(f, g, [dict(kind="adagrad", lr=0.1, state=st), sgd, sgd]), "a state", "state")
    # the binding's refusals, on every rank
    agree_raises(clembed.InvalidArgumentError, lambda: fs.embedding_bags(f[:2]), "two features for three tables",
                 "3 tables")
    agree_raises(clembed.InvalidArgumentError, lambda: fs.embedding_bags([dict(f[0], table=st)] + f[1:]),
                 "a 'table' in a feature", "table")
    agree_raises(clembed.InvalidArgumentError, lambda: fs.bags_step(f, g, [sgd, sgd]), "two optimizers")
    # ...and on one rank only: that rank's error; the others fail too, naming it, and nobody waits
    if SIZE > 1:
        agree_raises(clembed.InvalidArgumentError, lambda: fs.embedding_bags(f[:2] if RANK == 0 else f),
                     "features missing on rank 0", "3 tables" if RANK == 0 else "rank 0")
        agree_raises(clembed.InvalidArgumentError,
                     lambda: fs.bags_step(f, g, [sgd, sgd] if RANK == 0 else [sgd, sgd, sgd]),
                     "optimizers missing on rank 0", "optimizers" if RANK == 0 else "rank 0")
        # a mode that differs on one rank
        odd = [f[0], f[1], dict(f[2], mode="sum" if RANK == LAST else "mean")]
        agree_raises(clembed.InvalidArgumentError, lambda: fs.embedding_bags(odd), "a disagreeing mode", "disagree")
    # a wrong out, the C library's own refusal
    agree_raises(clembed.InvalidArgumentError, lambda: fs.embedding_bags(f, out=ctx.empty(B, width - 1)),
                 "an out one column short", "cols")
    # everything still works after the refusals, and a step makes the adagrad state
    out = fs.embedding_bags(f)
    agree(out.shape == (B, width), "a forward after the refusals")
    fs.bags_step(f, g, [dict(kind="adagrad", lr=0.1), sgd, sgd])
    kind, state = fs.table(0).state(1)
    agree(kind == "adagrad" and state.cols == T[0]["cols"], "table 0's state: %s %s" % (kind, state.shape))
    agree_raises(clembed.InvalidArgumentError, lambda: fs.bags_step(f, g, [dict(kind="adam", lr=0.1), sgd, sgd]),
                 "another optimizer on a table with a state")
    # release: the views are emptied, the set refuses every call
    _, view = fs.table(0).shard()
    fs.release()
    fs.release()
    agree(fs.closed and view.rows == 0 and not view.buffer, "the views of a released set are empty")
    agree_raises(clembed.InvalidArgumentError, lambda: fs.embedding_bags(f), "a released set", "released")
    agree_raises(clembed.InvalidArgumentError, lambda: fs.plan(0), "plan of a released set", "released")

    # create: a COLUMN table of a row-wise type, an owner past the ranks, an unknown plan
    def create(**kw):
        return cmpi.FeatureSet(ctx, COMM, [dict(dict(name="t", rows=10, cols=16), **kw)])
    agree_raises(clembed.InvalidArgumentError, lambda: create(dtype="i8_rowwise", shard="column"),
                 "a COLUMN table of i8_rowwise", "column")
    agree_raises(clembed.InvalidArgumentError, lambda: create(shard="table", owner=SIZE), "an owner past the ranks",
                 "owner")
    agree_raises(clembed.InvalidArgumentError, lambda: create(shard="diagonal"), "an unknown plan", "shard")
    if SIZE > 1:   # specs that differ: every rank refuses (the library's vote)
        agree_raises(clembed.InvalidArgumentError, lambda: create(shard="table" if RANK == 0 else "row"),
                     "specs that differ", "tables[0]")
    agree_raises(clembed.InvalidArgumentError, lambda: create(colour="red") if RANK == 0 else create(),
                 "an unknown key on rank 0", "colour" if RANK == 0 else "rank 0")


@collective
def test_planner_with_id_samples(ctx):
    """'auto' tables with id samples: a plan each (never 'auto'), the same on every rank."""
    specs = []
    for i in range(5):
        rows = 4000 if i == 4 else 100
        sample = np.random.default_rng([RANK, i]).integers(0, rows, 400 if i == 4 else 20)
        specs.append(dict(name="t%d" % i, rows=rows, cols=16, id_sample=sample if i % 2 else ctx.ids(sample),
                          sample_bags=10 if i == 4 else None))
    with cmpi.FeatureSet(ctx, COMM, specs) as fs:
        plans = [fs.plan(i) for i in range(5)]
        agree(all(p[0] != "auto" for p in plans), "no plan is 'auto': %s" % plans)
        agree(all(p == q for p, q in zip(plans, COMM.bcast(plans, root=0))), "every rank sees the same plans")
        agree(len(fs) == 5 and [t.name for t in fs.tables] == ["t%d" % i for i in range(5)], "the tables")
