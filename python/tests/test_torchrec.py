"""clembed.torch.EmbeddingBagCollection against TorchRec's own EmbeddingBagCollection,
fed TorchRec's own KeyedJaggedTensor and TorchRec's EmbeddingBagConfigs: the same tables
(loaded through TorchRec's state_dict names), the same pooled outputs bit for bit (both
pool each bag's ids in order, as F.embedding_bag does) and the gradients of the tables.
Runs where TorchRec is installed (a peer, never a dependency: with fbgemm-gpu-cpu and
the PyTorch it pairs with, in a venv of their own), skipped, saying why, elsewhere."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
try:
    from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
    from torchrec.modules.embedding_modules import EmbeddingBagCollection as TorchRecEBC
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
except Exception as e:  # noqa: BLE001 (not installed, or not importable with this PyTorch)
    pytest.skip("TorchRec is not importable here (%s): pip install torchrec beside fbgemm-gpu-cpu"
                % str(e).splitlines()[0][:100], allow_module_level=True)

import clembed  # noqa: E402
import clembed.torch as ct  # noqa: E402


def configs():
    return [EmbeddingBagConfig(name="t_user", embedding_dim=16, num_embeddings=1000, feature_names=["user", "friend"],
                               pooling=PoolingType.SUM),
            EmbeddingBagConfig(name="t_item", embedding_dim=8, num_embeddings=500, feature_names=["item"],
                               pooling=PoolingType.MEAN)]


def batch(rng, B):
    keys = ["user", "friend", "item"]
    rows = {"user": 1000, "friend": 1000, "item": 500}
    lengths = rng.integers(0, 5, len(keys) * B)          # empty bags included
    values = np.concatenate([rng.integers(0, rows[k], int(n)) for k, n in
                             zip(np.repeat(keys, B), lengths)]).astype(np.int64)
    return KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.from_numpy(values),
                                               lengths=torch.from_numpy(lengths.astype(np.int64)))


def test_torchrec_kjt_forward_and_gradients():
    ctx = clembed.Context()
    rng = np.random.default_rng(5)
    ref = TorchRecEBC(tables=configs(), device=torch.device("cpu"))
    ours = ct.EmbeddingBagCollection(configs(), ctx=ctx)
    ours.load_state_dict(ref.state_dict())                # TorchRec's names: embedding_bags.<table>.weight
    for name, w in ref.state_dict().items():
        assert torch.equal(ours.state_dict()[name], w), name
    for B in (1, 7, 64):
        kjt = batch(rng, B)
        want = ref(kjt).values()                           # a KeyedTensor: [B, 16 + 16 + 8]
        got = ours(kjt)
        assert got.shape == want.shape == (B, 40)
        assert torch.equal(got, want), "B=%d: max difference %g" % (B, (got - want).abs().max().item())
        g = torch.from_numpy(rng.standard_normal((B, 40)).astype(np.float32))
        for m in (ref, ours):
            m.zero_grad()
        (want * g).sum().backward()
        (got * g).sum().backward()
        for name in ("t_user", "t_item"):
            a = ours.embedding_bags[name].weight.grad
            b = ref.embedding_bags[name].weight.grad
            b = b.to_dense() if b.is_sparse else b
            a = a.to_dense() if a.is_sparse else a
            err = (a.double() - b.double()).abs().max().item()
            assert err <= 1e-6 * max(b.abs().max().item(), 1e-30), "%s: gradient off by %g" % (name, err)
    ctx.close()


def test_dlrm_example_against_torchrec(dlrm_pair):
    """examples/dlrm_torch.py's torchrec engine: 50 steps with Adagrad, clembed's loss curve
    within 1e-5 relative of TorchRec's collection's (torch.optim.Adagrad on its tables)."""
    _, curves, _, _ = dlrm_pair(lambda ex, rows, init: ex.TorchRecPool(rows, 8, init), 50)
    rel = np.abs(curves[0] - curves[1]) / np.abs(curves[1])
    assert rel.max() <= 1e-5, rel.max()
