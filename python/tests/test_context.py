"""Devices and contexts."""
import numpy as np
import pytest

import clembed
from conftest import need


def test_devices_and_specs(ctx):
    need("clembed_devices")
    devs = clembed.devices()
    assert devs, "no device listed although a context exists"
    defaults = [d for d in devs if d.is_default]
    assert len(defaults) == 1
    for d in devs:
        assert isinstance(d, clembed.Device)
        assert ":" in d.spec and d.name and d.platform and d.type != 0
        assert d.global_mem_bytes > 0 and 0 < d.max_alloc_bytes <= d.global_mem_bytes
    assert defaults[0].name in ctx.device_name
    with clembed.Context(defaults[0].spec) as c:
        assert c.device_name == "%s / %s" % (defaults[0].platform, defaults[0].name)
        m = c.matrix(np.ones((2, 2), np.float32))
        assert np.array_equal(m.numpy(), np.ones((2, 2), np.float32))


def test_library_facts():
    assert clembed.library_version() >= 100
    assert clembed.library_path
    assert set(clembed.DTYPES) >= {"f32", "f16", "bf16", "q8_0", "q4_0"}


def test_context_close_is_idempotent():
    c = clembed.Context()
    assert "clembed.Context(" in repr(c)
    c.close()
    c.close()
