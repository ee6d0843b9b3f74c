"""clembed.plot: the figures are written to PNG and their data checked: the heatmap
shows the positional table, the scatter's points are the principal components."""
import numpy as np
import pytest

import clembed
from conftest import sinusoid_ref

matplotlib = pytest.importorskip("matplotlib", reason="matplotlib is not installed: no plot tests")
matplotlib.use("Agg")


def test_positional_heatmap(ctx, tmp_path):
    fig = clembed.plot.positional(48, 32, ctx=ctx, base=100.0, first=5)
    ax = fig.axes[0]
    shown = np.asarray(ax.images[0].get_array())
    assert shown.shape == (48, 32)
    assert np.array_equal(shown, ctx.positional(48, 32, first=5, base=100.0).numpy())
    assert np.abs(shown - sinusoid_ref(48, 32, 5, 100.0)).max() <= 1e-6
    assert ax.get_xlabel() == "embedding column" and ax.get_ylabel() == "position"
    assert len(fig.axes) == 2            # the colour bar
    assert ax.images[0].get_clim() == (-1.0, 1.0)
    left, right, bottom, top = ax.images[0].get_extent()
    assert (left, right, top, bottom) == (-0.5, 31.5, 4.5, 52.5)  # positions 5..52 top down
    png = tmp_path / "positional.png"
    fig.savefig(png, dpi=60)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


def test_pca_scatter(tmp_path):
    rng = np.random.default_rng(3)
    # rows on a tilted plane plus a little noise: two clear components
    basis = rng.standard_normal((2, 16))
    coef = rng.standard_normal((30, 2)) * [5.0, 2.0]
    table = (coef @ basis + 0.01 * rng.standard_normal((30, 16)) + 3.0).astype(np.float32)
    labels = ["tok%d" % i for i in range(30)]
    fig = clembed.plot.pca(table, labels)
    ax = fig.axes[0]
    pts = np.asarray(ax.collections[0].get_offsets())
    # reference: eigenvectors of the float64 covariance
    x = table.astype(np.float64)
    xc = x - x.mean(0)
    w, v = np.linalg.eigh(xc.T @ xc)
    ref = xc @ v[:, ::-1][:, :2]
    for j in range(2):   # a component's sign is free
        sgn = np.sign(ref[:, j] @ pts[:, j])
        assert np.allclose(pts[:, j], sgn * ref[:, j], atol=1e-9 * np.abs(ref).max())
    assert np.array_equal(pts, fig.points)
    assert [t.get_text() for t in ax.texts] == labels
    ratio = (w[::-1][:2] / w.sum()) * 100
    assert ax.get_xlabel() == "PC 1 (%.1f%% of variance)" % ratio[0]
    png = tmp_path / "pca.png"
    fig.savefig(png, dpi=60)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pca_of_a_matrix_and_default_labels(ctx):
    t = ctx.matrix(np.eye(4, 3, dtype=np.float32))
    fig = clembed.plot.pca(t)
    assert [x.get_text() for x in fig.axes[0].texts] == ["0", "1", "2", "3"]
    with pytest.raises(ValueError):
        clembed.plot.pca(np.zeros((3, 2)), labels=["a"])
    with pytest.raises(ValueError):
        clembed.plot.pca(np.zeros(5))


def test_missing_matplotlib_message(monkeypatch):
    import builtins
    real = builtins.__import__

    def fake(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(ImportError, match="clembed.plot needs matplotlib"):
        clembed.plot.pca(np.eye(3))
