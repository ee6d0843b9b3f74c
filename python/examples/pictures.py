"""Draws the two pictures of the README's Python section:
docs/python-positional.png (the sinusoid table) and docs/python-pca.png (its rows'
first two principal components).

    CLEMBED_LIBRARY=build/libclembed.so PYTHONPATH=python /usr/bin/python3 python/examples/pictures.py docs
"""
import os
import sys

import matplotlib
matplotlib.use("Agg")

import clembed  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "."
ctx = clembed.Context()

fig = clembed.plot.positional(128, 64, ctx=ctx)
fig.savefig(os.path.join(out, "python-positional.png"), dpi=100)

table = ctx.positional(24, 64).numpy()
fig = clembed.plot.pca(table, labels=["p%d" % i for i in range(24)])
fig.axes[0].set_title("Sinusoidal positions 0-23 (d = 64) by PCA")
fig.savefig(os.path.join(out, "python-pca.png"), dpi=100)
print("wrote", os.path.join(out, "python-positional.png"), os.path.join(out, "python-pca.png"))
