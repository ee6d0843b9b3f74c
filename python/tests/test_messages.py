"""The binding's lists and messages: the dtypes are the library's one list (never a
second copy in Python), and messages name things (dtypes, modes, the file's tensors)
instead of printing codes."""
import json
import os
import re
import struct

import numpy as np
import pytest

import clembed
from clembed import _args, _lib
from conftest import need


def test_the_dtype_list_is_the_librarys():
    """Every code the library names is in clembed.DTYPES under that name, with the
    library's block facts, and nothing else is: a dtype added to the library
    (src/runtime/dtypes.h) is in Python with nothing typed here."""
    lib = _lib.lib
    named = {}
    for code in range(_lib.DTYPE_CODES):
        name = lib.clembed_dtype_name(code).decode()
        if name != "unknown":
            named[name] = code
    assert named and clembed.DTYPES == named
    assert sorted(named.values()) == list(range(len(named)))   # dense: no code the scan could miss
    assert lib.clembed_dtype_name(_lib.DTYPE_CODES).decode() == "unknown"
    for name, code in named.items():
        values = lib.clembed_dtype_block_values(code)
        assert _args.BLOCKS[name] == (values, lib.clembed_dtype_row_bytes(code, values)), name
        assert _args.DTYPE_NAMES[code] == name
    assert set(_args.BLOCKS) == set(named)


def test_the_dtype_list_matches_the_header():
    """clembed.h's enum clembed_dtype names the same codes (CLEMBED_<NAME in upper case>)."""
    header = os.path.join(os.path.dirname(__file__), "..", "..", "include", "clembed.h")
    if not os.path.exists(header):
        pytest.skip("no include/clembed.h beside the package (an installed package)")
    text = open(header).read()
    enum = re.search(r"typedef enum clembed_dtype \{(.*?)\} clembed_dtype;", text, re.S)
    assert enum
    body = re.sub(r"/\*.*?\*/", "", enum.group(1), flags=re.S)
    consts = {n.lower(): int(v) for n, v in re.findall(r"CLEMBED_(\w+)\s*=\s*(\d+)", body)}
    assert consts == clembed.DTYPES


def _safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, a) in tensors.items():
        b = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_load_says_what_the_library_says(ctx, tmp_path):
    """ctx.load with no name of a file of several tensors lists them; of a tensor of a
    type no matrix holds, it names the type (the C loader's own messages)."""
    need("clembed_matrix_load")
    two = tmp_path / "two.safetensors"
    _safetensors(two, {"a": ("F32", np.ones((2, 3), np.float32)), "b": ("F32", np.zeros((2, 3), np.float32))})
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.load(two)
    assert "2 tensors" in str(e.value) and "'a', 'b'" in str(e.value)
    assert "token_embd.weight" not in str(e.value)    # no name was passed: not "no tensor named ..."
    assert ctx.load(two, "b").numpy().sum() == 0
    ids = tmp_path / "ids.safetensors"
    _safetensors(ids, {"ids": ("I64", np.arange(6, dtype=np.int64).reshape(2, 3))})
    with pytest.raises(clembed.Error) as e:
        ctx.load(ids)
    assert "'ids'" in str(e.value) and "I64" in str(e.value) and "f32" in str(e.value).lower()


def test_a_dtype_hint_only_where_there_is_a_dtype(ctx):
    """A float64 array is refused; the message says to pass dtype='f32' where the
    function takes a dtype, and to convert the array where it does not."""
    with pytest.raises(clembed.ArgumentTypeError) as e:
        ctx.matrix(np.ones((2, 4)))
    assert "dtype='f32'" in str(e.value)
    with pytest.raises(clembed.ArgumentTypeError) as e:
        ctx.backward(np.ones((2, 4)), np.array([0, 1]), 5)
    assert "dtype=" not in str(e.value) and "grad.astype(numpy.float32)" in str(e.value)


def test_messages_name_modes_and_dtypes(ctx):
    """A bag option for another mode names the mode (MEAN), and a quantized table that
    cannot be trained names its dtype (Q8_0), never their codes."""
    t = ctx.matrix(np.ones((5, 4), np.float32))
    with pytest.raises(clembed.InvalidArgumentError) as e:
        ctx.embedding_bag(t, np.array([[0, 1], [2, 3]]), mode="mean",
                          per_sample_weights=np.ones((2, 2), np.float32))
    assert "MEAN" in str(e.value) and "mode 1" not in str(e.value)
    q = ctx.matrix(np.ones((4, 32), np.float32), "q8_0")
    with pytest.raises(clembed.Error) as e:
        ctx.sgd(q, np.ones((2, 32), np.float32), np.array([0, 1]), 0.1)
    assert "Q8_0" in str(e.value) and "dtype 3" not in str(e.value)
