"""Pictures of embeddings with matplotlib (optional: `pip install matplotlib`).

positional(length, dim, **options): the sinusoid table as a heatmap.
pca(table, labels=None): the rows of a table on their first two principal components.
Both return a matplotlib Figure (save it with fig.savefig("x.png")); they never
call pyplot.show().
"""
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ._errors import api, invalid


def _figure(figsize: Tuple[float, float]) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("clembed.plot needs matplotlib (pip install matplotlib, or apt install "
                          "python3-matplotlib): %s" % e) from None
    return Figure(figsize=figsize, layout="constrained")


@api("plot.positional")
def positional(length: int, dim: int, *, ctx: Any = None, cmap: str = "RdBu_r", **options: Any) -> Any:
    """Heatmap of the sinusoidal table computed by clembed: one row per position
    (top to bottom), one column per embedding column, values in [-1, 1] with a
    colour bar. options as Context.positional (first, base, exponent, layout).
    The table is fig.table (float32, shape (length, dim))."""
    from ._core import default_context
    ctx = ctx if ctx is not None else default_context()
    table = ctx.positional(length, dim, **options).numpy(np.float32)
    first = int(options.get("first", 0))
    fig = _figure((7.0, 4.5))
    ax = fig.add_subplot()
    im = ax.imshow(table, aspect="auto", interpolation="nearest", cmap=cmap, vmin=-1.0, vmax=1.0,
                   extent=(-0.5, dim - 0.5, first + length - 0.5, first - 0.5))
    ax.set_xlabel("embedding column")
    ax.set_ylabel("position")
    ax.set_title("Sinusoidal positions (base %g, %s, %s)" % (
        float(options.get("base", 10000.0)), options.get("exponent", "pair"),
        options.get("layout", "interleaved")))
    fig.colorbar(im, ax=ax, label="value")
    fig.table = table
    return fig


@api("plot.principal_components")
def principal_components(table: Any, k: int = 2) -> Tuple[np.ndarray, np.ndarray]:
    """The rows of table (centred) projected on their first k principal components
    (NumPy SVD, float64); each component's sign is chosen so that its largest loading
    is positive. Returns (points (rows x k), explained variance ratio (k,))."""
    x = np.asarray(table, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise invalid("table", "PCA needs a 2-D table of at least 2 rows, not shape %s" % (x.shape,))
    xc = x - x.mean(axis=0)
    u, s, vt = np.linalg.svd(xc, full_matrices=False)
    k = min(k, vt.shape[0])
    for j in range(k):
        if vt[j, np.argmax(np.abs(vt[j]))] < 0:
            vt[j] = -vt[j]
    points = xc @ vt[:k].T
    total = float((s ** 2).sum())
    ratio = (s[:k] ** 2) / total if total > 0 else np.zeros(k)
    if points.shape[1] < 2:   # one column: a flat second axis
        points = np.hstack([points, np.zeros((points.shape[0], 2 - points.shape[1]))])
        ratio = np.concatenate([ratio, np.zeros(2 - len(ratio))])
    return points, ratio


@api("plot.pca")
def pca(table: Any, labels: Optional[Sequence[Any]] = None, *, annotate_max: int = 200) -> Any:
    """Scatter of the rows of table (a NumPy array or a clembed.Matrix) on their first two
    principal components, each point labelled with labels[i] (default: its row number;
    at most annotate_max labels are drawn). The points are fig.points (rows x 2)."""
    from ._core import Matrix
    if isinstance(table, Matrix):
        table = table.numpy(np.float32)  # (an f16 matrix reads as float16 by default)
    points, ratio = principal_components(table, 2)
    n = points.shape[0]
    if labels is None:
        labels = [str(i) for i in range(n)]
    labels = [str(l) for l in labels]
    if len(labels) != n:
        raise invalid("labels", "%d labels for %d rows" % (len(labels), n))
    fig = _figure((6.0, 5.0))
    ax = fig.add_subplot()
    ax.scatter(points[:, 0], points[:, 1], s=24, color="tab:blue", zorder=2)
    for i in range(min(n, annotate_max)):
        ax.annotate(labels[i], (points[i, 0], points[i, 1]), textcoords="offset points",
                    xytext=(4, 3), fontsize=8)
    ax.margins(0.1)   # room for the labels of the outermost points
    ax.axhline(0, color="0.85", lw=0.8, zorder=1)
    ax.axvline(0, color="0.85", lw=0.8, zorder=1)
    ax.set_xlabel("PC 1 (%.1f%% of variance)" % (100 * ratio[0]))
    ax.set_ylabel("PC 2 (%.1f%% of variance)" % (100 * ratio[1]))
    ax.set_title("Rows of the table, first two principal components")
    fig.points = points
    return fig
