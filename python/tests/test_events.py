"""Events without pyopencl: clembed.Event (returned as Matrix.event when pyopencl is
not installed) and wait_for with clembed events and raw cl_event ints."""
import numpy as np
import pytest

import clembed
from clembed import _events


@pytest.fixture
def no_pyopencl(monkeypatch):
    monkeypatch.setattr(_events, "_cl", None)     # what pyopencl_module() answers


def test_clembed_events_chain(ctx, no_pyopencl):
    rng = np.random.default_rng(4)
    W = rng.standard_normal((11, 6)).astype(np.float32)
    table = ctx.matrix(W)
    ids = ctx.ids(np.array([[3, 1, 10], [0, 0, 2]]))
    pos = ctx.positional(3, 6)
    assert isinstance(pos.event, clembed.Event) and isinstance(pos.event.int_ptr, int)
    out = ctx.embed(table, ids, positions=pos, wait_for=[pos.event])
    grad = ctx.backward(out, ids, 11, wait_for=out.event.int_ptr)       # a raw cl_event int
    grad.event.wait()
    assert grad.event.command_execution_status == 0                      # CL_COMPLETE
    o = out.numpy()
    P = pos.numpy()
    ref = W[np.array([[3, 1, 10], [0, 0, 2]])] + P[None]
    assert np.array_equal(o, ref)
    g = np.zeros((11, 6), np.float32)
    for i, v in enumerate([3, 1, 10, 0, 0, 2]):
        g[v] = g[v] + o.reshape(-1, 6)[i]
    assert np.array_equal(grad.numpy(), g)
    table2 = ctx.sgd(table, out, ids, 0.5, wait_for=[grad.event, None])
    assert isinstance(table2.event, clembed.Event)
    ctx.finish()


def test_wait_for_rejects_other_objects(ctx):
    with pytest.raises(TypeError, match="wait_for"):
        ctx.positional(2, 2, wait_for=["not an event"])
