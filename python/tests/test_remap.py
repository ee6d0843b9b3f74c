"""Pruned tables through the Python package: embed, embedding_bag and embedding_bags with
remap= (FBGEMM's pruned_array: remap[id] the kept row, -1 a pruned id) against a NumPy
reference written here (the float32 order of the contract); the errors; and, where
fbgemm-gpu-cpu is installed, against FBGEMM's inference TBE with an index_remapping on the
same INT8 rows (SUM and MEAN: a pruned id counts in the mean's length there too).
fbgemm-gpu-cpu is a peer, never a dependency."""
import numpy as np
import pytest

import clembed

F = np.float32


def _pruned(rng, kept, urows, cols):
    table = rng.standard_normal((kept, cols)).astype(F)
    remap = np.full(urows, -1, np.int64)
    keep = rng.permutation(urows)[:kept]
    remap[keep] = rng.permutation(kept)
    return table, remap


def _bag_ref(table, remap, ids, offsets, mode, pad=None):
    """Bag b in float32: ids in order, acc = acc + t from 0; mean divides by the taken
    and pruned ids (FBGEMM's length), the padding id left out."""
    out = np.zeros((len(offsets) - 1, table.shape[1]), F)
    for b in range(len(offsets) - 1):
        acc = np.zeros(table.shape[1], F)
        count = 0
        for i in ids[offsets[b]:offsets[b + 1]]:
            if pad is not None and i == pad:
                continue
            count += 1
            if remap[i] >= 0:
                acc = (acc + table[remap[i]]).astype(F)
        out[b] = acc / F(count) if mode == "mean" and count else acc
    return out


def test_embed_and_bags(ctx):
    rng = np.random.default_rng(5)
    table, remap = _pruned(rng, 40, 100, 24)
    m = ctx.matrix(table)
    ids = rng.integers(0, 100, 300)
    want = np.where((remap[ids] >= 0)[:, None], table[np.maximum(remap[ids], 0)], 0).astype(F)
    for rm in (remap, remap.astype(np.int32), ctx.ids(remap)):
        got = ctx.embed(m, ids, remap=rm).numpy()
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 9, 50))])
    bids = rng.integers(0, 100, int(offsets[-1]))
    pad = int(np.flatnonzero(remap >= 0)[-1])  # a kept id as the padding: left out of sum and count
    for mode in ("sum", "mean"):
        got = ctx.embedding_bag(m, bids, offsets, mode=mode, include_last_offset=True, remap=remap,
                                padding_idx=pad).numpy()
        ref = _bag_ref(table, remap, bids, offsets, mode, pad)
        if mode == "sum":
            assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
        else:
            assert np.allclose(got, ref, rtol=2.5e-7, atol=0)
    # the multi-table call: a remapped feature beside a plain one
    other = rng.standard_normal((10, 8)).astype(F)
    oids = rng.integers(0, 10, int(offsets[-1]))
    out = ctx.embedding_bags([dict(table=m, ids=bids, offsets=offsets, include_last_offset=True, mode="sum",
                                   remap=remap),
                              dict(table=ctx.matrix(other), ids=oids, offsets=offsets, include_last_offset=True,
                                   mode="sum")]).numpy()
    assert np.array_equal(out[:, :24].view(np.uint32), _bag_ref(table, remap, bids, offsets, "sum").view(np.uint32))
    assert np.array_equal(out[:, 24:].view(np.uint32),
                          _bag_ref(other, np.arange(10), oids, offsets, "sum").view(np.uint32))


def test_errors(ctx):
    table, remap = _pruned(np.random.default_rng(1), 4, 10, 8)
    m = ctx.matrix(table)
    ctx.embed(m, [0, 10], remap=remap)  # 10 is past remap_rows
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        ctx.finish()
    assert e.value.argument == "ids" and e.value.index == 1 and e.value.value == 10
    damaged = remap.copy()
    damaged[3] = 4  # past the kept rows
    ctx.embedding_bag(m, [0, 3], [0], mode="sum", remap=damaged)
    with pytest.raises(clembed.IndexOutOfRangeError) as e:
        ctx.finish()
    assert e.value.argument == "remap" and e.value.index == 3
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embed(m, [0], remap=remap, padding_idx=10)
    assert e.value.argument == "padding_idx"
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embed(m, [0], remap=remap.reshape(2, 5))
    assert e.value.argument == "remap"
    with pytest.raises(clembed.UnsupportedError) as e:
        ctx.embed(m, [0], remap=remap, norm="rms")
    assert e.value.argument == "remap"


fbgemm = None
try:  # a peer, never a dependency: only where it is installed
    import torch
    import fbgemm_gpu  # noqa: F401
    fbgemm = torch.ops.fbgemm
except Exception:  # pragma: no cover - the usual case in CI
    pass


@pytest.mark.skipif(fbgemm is None, reason="fbgemm-gpu-cpu is not installed (a peer, never a dependency)")
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_against_fbgemm_pruned_tbe(ctx, mode):
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen
    from fbgemm_gpu.tbe.utils.quantize import quantize_embs
    rng = np.random.default_rng(17)
    kept, urows, cols, bags = 300, 1000, 64, 40
    x, remap = _pruned(rng, kept, urows, cols)
    q, sb = quantize_embs(torch.from_numpy(x), SparseType.INT8)
    tbe = IntNBitTableBatchedEmbeddingBagsCodegen(
        [("t", kept, cols, SparseType.INT8, EmbeddingLocation.HOST)], device="cpu", output_dtype=SparseType.FP32,
        pooling_mode=PoolingMode.SUM if mode == "sum" else PoolingMode.MEAN,
        index_remapping=[torch.from_numpy(remap.astype(np.int32))])
    tbe.fill_random_weights()
    w, s = tbe.split_embedding_weights()[0]
    w.copy_(q)
    s.copy_(sb)
    m = ctx.matrix(x, dtype="i8_tbe")
    assert np.array_equal(m.raw(), torch.cat([sb, q], 1).numpy())
    lengths = rng.integers(0, 30, bags)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ids = rng.integers(0, urows, int(offsets[-1]))
    ref = tbe(torch.from_numpy(ids.astype(np.int32)), torch.from_numpy(offsets.astype(np.int32))).numpy()
    got = ctx.embedding_bag(m, ids, offsets, mode=mode, include_last_offset=True, remap=remap).numpy()
    vals = m.numpy().astype(np.float64)
    exact = np.zeros((bags, cols))
    mag = np.zeros((bags, cols))
    for b, (a, z) in enumerate(zip(offsets[:-1], offsets[1:])):
        r = remap[ids[a:z]]
        r = r[r >= 0]
        n = (z - a) if mode == "mean" and z > a else 1  # FBGEMM's length counts the pruned ids
        exact[b] = vals[r].sum(0) / n
        mag[b] = np.abs(vals[r]).sum(0) / n
    tol = 1e-6 * mag + 1e-30
    assert np.all(np.abs(got - exact) <= tol) and np.all(np.abs(ref - exact) <= tol)
