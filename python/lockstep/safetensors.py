"""The safetensors package's loading calls, on lockstep's reader and loader, so that code
which uses them switches with one import:

    from lockstep.safetensors import load_file, safe_open   # was: safetensors(.torch)

load_file(path, device="cpu") returns {name: torch tensor}, writable, in the order of
their data in the file (as safetensors does); it also takes what lockstep.load takes (a directory,
an index, shards). safe_open(path, framework="pt") opens one file lazily: keys(),
offset_keys(), metadata(), get_tensor(name) and get_slice(name)[...] read only the
tensor's bytes (a slice of the first dimension only its rows), into memory of their
own. framework "np" gives numpy arrays (BF16 as uint16 bit patterns)."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import _lockstep
from .load import _DTYPES, _torch_maker, load

__all__ = ["load_file", "safe_open"]

_FRAMEWORKS = {"pt": "torch", "torch": "torch", "np": "numpy", "numpy": "numpy"}


def load_file(filename: Union[str, "os.PathLike[str]"], device: Union[str, int] = "cpu") -> Dict[str, Any]:
    """{name: tensor} of a safetensors file (or any checkpoint lockstep.load takes),
    loaded whole by the pipelined loader into writable memory, then moved to device"""
    _, tensors = load(filename, mode="auto", framework="torch")
    # in the order of the data in the file, as safetensors gives them (a file's tensors
    # lie in one region in that order)
    out = dict(sorted(tensors.items(), key=lambda kv: kv[1].data_ptr())) if os.path.isfile(filename) else tensors
    if device != "cpu":
        out = {k: v.to(device) for k, v in out.items()}
    return out


class safe_open:
    """One safetensors file, opened lazily (a with-statement closes it)"""

    def __init__(self, filename: Union[str, "os.PathLike[str]"], framework: str = "pt",
                 device: Union[str, int] = "cpu") -> None:
        if framework not in _FRAMEWORKS:
            raise ValueError(f"framework must be one of {', '.join(_FRAMEWORKS)}, not {framework!r}")
        self._framework = _FRAMEWORKS[framework]
        self._to = _torch_maker() if self._framework == "torch" else None
        self._device = device
        path = os.fspath(filename)
        fmt, meta, tensors, _ = _lockstep.inspect(path)
        if fmt != "safetensors":
            raise ValueError(f"{path} is a {fmt} file, not safetensors: use lockstep.load")
        self._path = path
        self._meta = dict(meta)
        self._table = {t[0]: t for t in tensors}
        self._fd: Optional[int] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            os.close(fd)

    def keys(self) -> List[str]:
        return sorted(self._table)

    def offset_keys(self) -> List[str]:
        """The names in the order of their data in the file"""
        return [t[0] for t in sorted(self._table.values(), key=lambda t: t[3])]

    def metadata(self) -> Optional[Dict[str, str]]:
        return dict(self._meta) if self._meta else None

    def _info(self, name: str) -> Tuple[str, str, Tuple[int, ...], int, int]:
        t = self._table.get(name)
        if t is None:
            raise KeyError(f"{self._path} holds no tensor named {name!r}")
        return t

    def _read(self, offset: int, nbytes: int) -> np.ndarray[Any, Any]:
        if self._fd is None:
            raise ValueError(f"{self._path} is closed")
        buf = np.empty(nbytes, np.uint8)
        view, done = memoryview(buf.data), 0
        while done < nbytes:
            got = os.preadv(self._fd, [view[done:]], offset + done)
            if got <= 0:
                raise OSError(f"{self._path}: the file ended at byte {offset + done} inside a tensor")
            done += got
        return buf

    def _array(self, type_name: str, raw: np.ndarray[Any, Any], shape: Tuple[int, ...]) -> Any:
        dt = _DTYPES.get(type_name)
        arr = raw if dt is None else raw.view(dt).reshape(shape)
        if self._to is None:
            return arr
        t = self._to(arr, type_name)
        return t if self._device == "cpu" else t.to(self._device)

    def get_tensor(self, name: str) -> Any:
        _, type_name, dims, offset, size = self._info(name)
        return self._array(type_name, self._read(offset, size), tuple(dims))

    def get_slice(self, name: str) -> "_Slice":
        return _Slice(self, self._info(name))


class _Slice:
    """A tensor not yet read: its shape and dtype, and [...] reading only what it needs"""

    def __init__(self, f: safe_open, info: Tuple[str, str, Tuple[int, ...], int, int]) -> None:
        self._f, self._info = f, info

    def get_shape(self) -> List[int]:
        return list(self._info[2])

    def get_dtype(self) -> str:
        return self._info[1]

    def __getitem__(self, index: Any) -> Any:
        _, type_name, dims, offset, size = self._info
        shape = tuple(dims)
        idx = index if isinstance(index, tuple) else (index,)
        rows = shape[0] if shape else 0
        first = idx[0] if idx else slice(None)
        if shape and size and isinstance(first, (slice, int, np.integer)):
            row = size // rows if rows else 0
            if isinstance(first, slice):
                lo, hi, step = first.indices(rows)
                if step == 1:  # the rows lo..hi only
                    hi = max(hi, lo)
                    part = self._f._array(type_name, self._f._read(offset + lo * row, (hi - lo) * row),
                                          (hi - lo,) + shape[1:])
                    return part[(slice(None),) + idx[1:]]
            else:
                i = int(first) + (rows if int(first) < 0 else 0)
                if not 0 <= i < rows:
                    raise IndexError(f"index {int(first)} is out of range for {rows} rows")
                part = self._f._array(type_name, self._f._read(offset + i * row, row), (1,) + shape[1:])
                return part[(0,) + idx[1:]]
        return self._f.get_tensor(self._info[0])[index]
