"""A pyopencl program that owns its context, queue and buffers and puts clembed in
its pipeline: Context.from_queue, Matrix/Ids.from_buffer on pyopencl Buffers and
Arrays, wait_for with pyopencl (user) events and raw cl_event ints, and the events
clembed returns (Matrix.event) ordering pyopencl's next commands, with no finish."""
import time

import numpy as np
import pytest

import clembed
from conftest import need

cl = pytest.importorskip("pyopencl", reason="pyopencl is not installed: no interop tests")
import pyopencl.array as cla          # noqa: E402
from pyopencl.elementwise import ElementwiseKernel  # noqa: E402

rng = np.random.default_rng(5)


@pytest.fixture(scope="module")
def pcl(ctx):
    """A pyopencl context and in-order queue on the device clembed's default context uses."""
    want = ctx.device_name
    for p in cl.get_platforms():
        try:
            devs = p.get_devices()
        except cl.Error:
            continue
        for d in devs:
            if "%s / %s" % (p.name, d.name) == want:
                c = cl.Context([d])
                return c, cl.CommandQueue(c)
    pytest.fail("pyopencl does not see clembed's device %r" % want)


def gates(q):
    """False where setting a user event that a command waits on hangs the caller: POCL's
    single-threaded basic device (pocl/pocl#1177, POCL 3.1; tests/test_util.h's
    tu_user_events_gate). There the tests open their gate before the calls it would hold."""
    d = q.device
    return not (d.platform.name == "Portable Computing Language" and d.name.startswith("basic"))


def read(q, buf, shape, wait_for):
    host = np.empty(shape, np.float32)
    cl.enqueue_copy(q, host, buf, wait_for=wait_for, is_blocking=True)
    return host


def test_from_queue_pipeline_with_user_event(pcl):
    pctx, q = pcl
    ctx = clembed.Context.from_queue(q)
    assert ctx.queue == q.int_ptr
    V, D, n = 40, 16, 24
    W = rng.standard_normal((V, D)).astype(np.float32)
    W_dev = cla.to_device(q, W)
    table = clembed.Matrix.from_buffer(ctx, W_dev, V, D)
    assert table.shape == (V, D) and table.dtype == "f32"
    ids_dev = cla.empty(q, n, np.int32)
    gate = cl.UserEvent(pctx)
    held = gates(q)
    if not held:
        gate.set_status(cl.command_execution_status.COMPLETE)
    # a pyopencl kernel writes the ids once the gate opens
    fill = ElementwiseKernel(pctx, "int *ids, int V", "ids[i] = (i * 7 + 3) % V", "fill_ids")
    ev_ids = fill(ids_dev, np.int32(V), wait_for=[gate])
    ids = clembed.Ids.from_buffer(ctx, ids_dev, n, "i32", shape=(4, 6))
    out = ctx.embed(table, ids, scale=2.0, wait_for=[ev_ids])
    assert out.shape == (4, 6, D)
    assert isinstance(out.event, cl.Event)
    if held:
        time.sleep(0.2)
        assert out.event.command_execution_status != cl.command_execution_status.COMPLETE
        gate.set_status(cl.command_execution_status.COMPLETE)
    # pyopencl doubles the output after clembed's event; the copy waits on that
    out_buf = cl.Buffer.from_int_ptr(out.buffer, retain=True)
    out_arr = cla.Array(q, (n * D,), np.float32, data=out_buf)
    double = ElementwiseKernel(pctx, "float *x", "x[i] = 2.0f * x[i]", "double_it")
    ev2 = double(out_arr, wait_for=[out.event])
    got = read(q, out_buf, (4, 6, D), [ev2])
    ids_ref = (np.arange(n) * 7 + 3) % V
    ref = (np.float32(2.0) * (np.float32(2.0) * W[ids_ref])).reshape(4, 6, D)
    assert np.array_equal(got, ref)
    ctx.finish()


def test_from_buffer_offset_ld_and_raw_handles(pcl):
    pctx, q = pcl
    ctx = clembed.Context.from_queue(q.int_ptr)          # a raw cl_command_queue
    V, D, ld, off = 10, 5, 8, 3
    W = rng.standard_normal((V, D)).astype(np.float32)
    host = np.full(off + V * ld, np.nan, np.float32)
    for r in range(V):
        host[off + r * ld: off + r * ld + D] = W[r]
    buf = cl.Buffer(pctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    table = clembed.Matrix.from_buffer(ctx, buf, V, D, offset=off, ld=ld)
    assert (table.offset, table.ld) == (off, ld)
    assert np.array_equal(table.numpy(), W)
    # an output inside a pyopencl Array that starts at an offset of its base buffer
    big = cla.zeros(q, 4 * D + 2 * D, np.float32)
    view = big[2 * D:]
    out = clembed.Matrix.from_buffer(ctx, view, 4, D)
    assert out.offset == 2 * D
    gate = cl.UserEvent(pctx)
    held = gates(q)
    if not held:
        gate.set_status(cl.command_execution_status.COMPLETE)
    ids = ctx.ids(np.array([9, 0, 4, 4], np.int64))
    ctx.lookup(table, ids, out=out, wait_for=[gate.int_ptr])    # a raw cl_event int
    if held:
        gate.set_status(cl.command_execution_status.COMPLETE)
    got = read(q, big.data, (6, D), [out.event])
    assert np.array_equal(got[2:], W[[9, 0, 4, 4]])
    assert np.array_equal(got[:2], np.zeros((2, D), np.float32))   # nothing before the offset
    # ids in a pyopencl Array at an offset
    ids_all = cla.to_device(q, np.array([-1, -1, 3, 1], np.int64))
    ids2 = clembed.Ids.from_buffer(ctx, ids_all[2:], 2, np.int64)
    assert ids2.count == 2 and np.array_equal(ids2.numpy(), [3, 1])
    r = ctx.lookup(table, ids2)
    assert np.array_equal(r.numpy(), W[[3, 1]])


def test_events_chain_between_clembed_calls(pcl):
    pctx, q = pcl
    ctx = clembed.Context.from_queue(q)
    V, D = 16, 8
    W = rng.standard_normal((V, D)).astype(np.float32)
    table = ctx.matrix(W)
    ids = rng.integers(0, V, size=12)
    gate = cl.UserEvent(pctx)
    held = gates(q)
    if not held:
        gate.set_status(cl.command_execution_status.COMPLETE)
    t = ctx.positional(12, D, wait_for=[gate])
    out = ctx.embed(table, ids, positions=t, wait_for=[t.event])
    grad = ctx.backward(out, ids, V, wait_for=[out.event])
    if held:
        time.sleep(0.1)
        assert grad.event.command_execution_status != cl.command_execution_status.COMPLETE
        gate.set_status(cl.command_execution_status.COMPLETE)
    grad.event.wait()
    P = t.numpy()
    o = out.numpy()
    assert np.array_equal(o, W[ids] + P)
    ref = np.zeros((V, D), np.float32)
    for i, v in enumerate(ids):
        ref[v] = ref[v] + o[i]
    assert np.array_equal(grad.numpy(), ref)


def test_failed_user_event_reported_by_finish(pcl):
    need("clembed_context_error")
    pctx, q = pcl
    ctx = clembed.Context.from_queue(q)
    gate = cl.UserEvent(pctx)
    out = ctx.lookup(np.zeros((4, 2), np.float32), np.array([1]), wait_for=[gate])
    gate.set_status(-1)
    with pytest.raises(clembed.Error):
        ctx.finish()
    del out


def test_event_from_another_context_refused(pcl):
    need("clembed_context_error")
    pctx, q = pcl
    other = cl.Context(pctx.devices)
    gate = cl.UserEvent(other)
    ctx = clembed.Context.from_queue(q)
    with pytest.raises(clembed.Error) as e:
        ctx.positional(4, 4, wait_for=[gate])
    assert e.value.status == clembed.ERR_INVALID_ARGUMENT
    gate.set_status(cl.command_execution_status.COMPLETE)


def test_pyopencl_queue_of_a_context(ctx, pcl):
    q = ctx.pyopencl_queue()
    assert isinstance(q, cl.CommandQueue) and q.int_ptr == ctx.queue
    pctx, pq = pcl
    assert clembed.Context.from_queue(pq).pyopencl_queue() is pq
