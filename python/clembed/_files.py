"""FileOps, tensors of model files on Context (clembed_io.h: .npy, .safetensors, .gguf,
by content): load (a Matrix), load_ids (Ids); and inspect(path), a file's tensors.
"""
import ctypes
import os
from typing import Any, Dict, List, Optional, Union

from . import _lib
from ._lib import lib, Matrix_t, Ids_t, DTYPES
from ._errors import api, from_status, require
from ._args import DTYPE_NAMES, dtype_code
from ._matrix import Matrix, Ids, DTypeLike
from ._context import ContextBase

byref = ctypes.byref


class FileOps(ContextBase):
    """Context's load and load_ids (a mixin of clembed.Context)."""

    @api("Context.load", "clembed_matrix_load")
    def load(self, path: Union[str, "os.PathLike[str]"], name: Optional[str] = None,
             dtype: DTypeLike = None) -> Matrix:
        """Loads a tensor of a .npy, .safetensors or .gguf file (by content) as a Matrix.
        name None: the file's only tensor (GGUF: token_embd.weight). dtype None: the
        stored type."""
        load = require("clembed_matrix_load", "Context.load")
        with _File(path) as f:
            if dtype is None:
                # the stored type of the tensor clembed_matrix_load takes; where there is none
                # (no such tensor, several and no name, a type clembed cannot load), the call
                # below refuses with C's own message (the file's tensors, the type's name)
                i = f.lookup(name)
                stored = f.info(i).dtype if i is not None else -1
                code = stored if stored >= 0 else DTYPES["f32"]
            else:
                code = dtype_code(dtype)
            m = Matrix_t()
            st = load(self._live, f.h, name.encode() if name is not None else None, code, byref(m))
            self._check(st, "clembed_matrix_load")
            return Matrix(self, m, owned=True)

    @api("Context.load_ids", "clembed_ids_load")
    def load_ids(self, path: Union[str, "os.PathLike[str]"], name: Optional[str] = None) -> Ids:
        """Loads an integer tensor (int32 or int64, any shape) of a .npy, .safetensors or
        .gguf file as Ids (shape kept). name None: the file's only tensor."""
        load = require("clembed_ids_load", "Context.load_ids")
        with _File(path) as f:
            shape = None
            if name is not None or f.count() == 1:
                t = f.info(f.index(name))
                shape = tuple(int(t.shape[k]) for k in range(t.ndim))
            i = Ids_t()
            st = load(self._live, f.h, name.encode() if name is not None else None, byref(i))
            self._check(st, "clembed_ids_load")
            return Ids(self, i, owned=True, shape=shape if shape is not None else (i.count,))


class _File:
    def __init__(self, path: Any) -> None:
        opener = require("clembed_file_open", "reading model files")
        self.path = os.fspath(path)
        self.h = ctypes.c_void_p()
        st = opener(self.path.encode(), byref(self.h))
        if st != 0:
            msg = lib.clembed_last_error_message() if _lib.has("clembed_last_error_message") else b""
            raise from_status(st, msg.decode(errors="replace") if msg else "cannot open %s" % self.path,
                              "clembed_file_open", "path")

    def __enter__(self) -> "_File":
        return self

    def __exit__(self, *exc: Any) -> None:
        lib.clembed_file_close(self.h)
        self.h = ctypes.c_void_p()

    def _fail(self, st: int, op: str) -> None:
        msg = lib.clembed_last_error_message()
        raise from_status(st, msg.decode(errors="replace") if msg else "", op)

    def count(self) -> int:
        return int(lib.clembed_file_tensor_count(self.h))

    def info(self, i: int) -> Any:
        t = _lib.TensorInfo_t()
        st = lib.clembed_file_tensor_info(self.h, i, byref(t))
        if st != 0:
            self._fail(st, "clembed_file_tensor_info")
        return t

    def lookup(self, name: Optional[str]) -> Optional[int]:
        """The index of the tensor clembed_matrix_load takes for `name` (None: the only
        one, or a GGUF file's token_embd.weight), or None where it takes none."""
        n = self.count()
        if name is None and n == 1:
            return 0
        i = ctypes.c_size_t()
        key = name if name is not None else "token_embd.weight"
        return i.value if lib.clembed_file_find(self.h, key.encode(), byref(i)) == 0 else None

    def index(self, name: Optional[str]) -> int:
        if name is None:
            n = self.count()
            if n == 1:
                return 0
            name = "token_embd.weight"
        i = ctypes.c_size_t()
        st = lib.clembed_file_find(self.h, name.encode(), byref(i))
        if st != 0:
            self._fail(st, "clembed_file_find")
        return i.value


@api("inspect", "clembed_file_open")
def inspect(path: Union[str, "os.PathLike[str]"]) -> List[Dict[str, Any]]:
    """The tensors of a .npy, .safetensors or .gguf file: a list of
    dict(name, dtype, shape, bytes); dtype is a clembed dtype name, or the file's own
    type name when clembed cannot use the type."""
    with _File(path) as f:
        out = []
        for i in range(f.count()):
            t = f.info(i)
            out.append(dict(name=t.name.decode(errors="replace") if t.name else "",
                            dtype=DTYPE_NAMES.get(t.dtype) if t.dtype >= 0
                            else (t.type_name.decode(errors="replace") if t.type_name else "?"),
                            shape=tuple(int(t.shape[k]) for k in range(t.ndim)),
                            bytes=int(t.bytes)))
        return out
