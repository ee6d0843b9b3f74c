"""RoPE (clembed_rope_cache, clembed_rope_apply) against float64 references; skipped
only when the loaded library lacks the functions."""
import numpy as np
import pytest

import clembed
from conftest import need

rng = np.random.default_rng(17)


def freqs(R, base=10000.0, scaling="none", factor=1.0):
    k = np.arange(R // 2)
    if scaling == "ntk":
        base = base * factor ** (R / (R - 2))
    w = base ** (-2.0 * k / R)
    if scaling == "linear":
        w = w / factor
    return w


def cache_ref(length, R, first=0, **kw):
    p = (first + np.arange(length, dtype=np.float64))[:, None]
    a = p * freqs(R, **kw)[None, :]
    return np.concatenate([np.cos(a), np.sin(a)], axis=1)


def apply_ref(x, head_dim, pos, R=None, layout="neox", inverse=False, **kw):
    x = np.asarray(x, np.float64)
    R = R or head_dim
    w = freqs(R, **kw)
    out = x.copy()
    a = pos[:, None].astype(np.float64) * w[None, :]
    c, s = np.cos(a), np.sin(a) * (-1 if inverse else 1)
    for h in range(x.shape[1] // head_dim):
        base = h * head_dim
        if layout == "neox":
            i0 = base + np.arange(R // 2)
            i1 = i0 + R // 2
        else:
            i0 = base + 2 * np.arange(R // 2)
            i1 = i0 + 1
        xa, xb = x[:, i0], x[:, i1]
        out[:, i0] = xa * c - xb * s
        out[:, i1] = xb * c + xa * s
    return out


@pytest.mark.parametrize("kw", [dict(), dict(base=500000.0), dict(scaling="linear", factor=4.0),
                                dict(scaling="ntk", factor=2.0)])
def test_rope_cache(ctx, kw):
    need("clembed_rope_cache")
    for first in (0, 3, 2 ** 20):
        m = ctx.rope_cache(33, 64, first=first, **kw)
        assert m.shape == (33, 64)
        err = np.abs(m.numpy() - cache_ref(33, 64, first, **kw)).max()
        assert err <= 1e-6, (kw, first, err)
    m = ctx.rope_cache(5, 16, rotary_dim=8, attention_factor=0.5)
    assert m.shape == (5, 8)
    assert np.abs(m.numpy() - 0.5 * cache_ref(5, 8)).max() <= 0.5e-6


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_rope_apply_shapes_and_positions(ctx, layout, rotary_dim):
    need("clembed_rope_apply")
    B, S, H, D = 2, 5, 3, 8
    x = rng.standard_normal((B, S, H, D)).astype(np.float32)
    opts = dict(layout=layout)
    if rotary_dim:
        opts["rotary_dim"] = rotary_dim
    R = rotary_dim or D

    def check(got, pos, inverse=False):
        ref = apply_ref(x.reshape(B * S, H * D), D, pos, R, layout, inverse)
        bound = 2e-6 * np.abs(x.reshape(B * S, H * D)).max() * 2 + 1e-7
        assert np.abs(got.reshape(B * S, H * D) - ref).max() <= bound

    # (B, S, heads, head_dim): positions offset + s within each sequence
    out = ctx.rope(x, D, offset=7, **opts)
    assert out.shape == x.shape
    check(out.numpy(), 7 + np.tile(np.arange(S), B))
    # (T, heads, head_dim) with explicit positions, and (T, C)
    pos = rng.integers(0, 5000, size=B * S)
    out = ctx.rope(x.reshape(B * S, H, D), D, positions=pos, **opts)
    assert out.shape == (B * S, H, D)
    check(out.numpy(), pos)
    out = ctx.rope(x.reshape(B * S, H * D), D, positions=pos, inverse=True, **opts)
    check(out.numpy(), pos, inverse=True)
    # forward then inverse gives the input back; in place on a Matrix
    m = ctx.matrix(x.reshape(B * S, H * D))
    ctx.rope(m, D, positions=pos, out=m, **opts)
    ctx.rope(m, D, positions=pos, inverse=True, out=m, **opts)
    assert np.abs(m.numpy() - x.reshape(B * S, H * D)).max() <= 1e-5


def test_rope_bad_options(ctx):
    need("clembed_rope_apply")
    with pytest.raises(TypeError, match="theta: is not a RoPE option"):
        ctx.rope_cache(4, 8, theta=3.0)
    with pytest.raises(clembed.Error) as e:
        ctx.rope(np.zeros((4, 10), np.float32), 4)      # 10 columns are not whole heads of 4
    assert e.value.status == clembed.ERR_INVALID_ARGUMENT


def test_rope_missing_function_is_named(ctx, monkeypatch):
    from clembed import _lib
    monkeypatch.setattr(_lib, "has", lambda n: n not in ("clembed_rope_apply", "clembed_rope_cache",
                                                         "clembed_rope_defaults"))
    with pytest.raises(clembed.MissingFunctionError, match="clembed_rope_apply"):
        ctx.rope(np.zeros((2, 4), np.float32), 4)
    with pytest.raises(clembed.MissingFunctionError, match="clembed_rope_cache"):
        ctx.rope_cache(2, 4)
