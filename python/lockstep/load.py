"""lockstep.load: model files (GGUF, safetensors) into numpy arrays, through lockstep's
hardened readers and pipelined loader."""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterable, Literal, Optional, Tuple, Union

import numpy as np

from . import _lockstep

# load's modes, for type checkers and at run time (test_typing.py checks them against
# the extension's table)
Mode = Literal["auto", "alias", "copy", "buffered"]
_MODES = {name: code for code, name in enumerate(_lockstep.LOAD_MODES)}  # auto, alias, copy, buffered

# Type names both formats share, and safetensors' own; anything else (ggml's quantized
# blocks, F8, sub-byte floats) comes back as its raw bytes (uint8). numpy has no
# bfloat16: BF16 comes back as uint16 bit patterns (torch: .view(torch.bfloat16)).
_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
    "BOOL": np.bool_, "C64": np.complex64,
}


def load(path: Union[str, "os.PathLike[str]"], names: Optional[Iterable[str]] = None,
         mode: Mode = "auto", check: bool = False, readers: int = 0,
         progress: Optional[Callable[[int, int], Optional[bool]]] = None
         ) -> Tuple[Dict[str, Any], Dict[str, np.ndarray[Any, Any]]]:
    """Load a GGUF or safetensors file; returns (metadata, tensors).

    metadata: dict of the file's key/values (safetensors: its __metadata__ strings).
    tensors:  dict name -> numpy array with the file's shape (C order, outermost
              dimension first). In "alias" mode the arrays are read-only views of a
              mapping of the file (zero copy); otherwise they view one writable
              region the loader filled. The arrays keep that memory alive.
    names:    load only these tensors (KeyError for a name not in the file).
    mode:     "auto" (direct reads when the file is cold, buffered when it is in the
              page cache), "alias", "copy" (direct I/O) or "buffered".
    check:    scan float values and quantized block scales for NaN/Inf while loading;
              a bad value raises BadFileError naming the tensor, .offset = its byte.
    readers:  reads in flight (0 = the measured default).
    progress: callable(done_bytes, total_bytes), called after each chunk; return
              True (or raise) to stop the load: LoadCancelled (or your exception).

    Raises FileNotFoundError/OSError (cannot open or read), BadFileError (malformed
    file: the message says what, .offset where), ValueError (bad arguments).
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, not {mode!r}")
    if names is not None:
        if isinstance(names, (str, bytes)):
            raise TypeError("names must be a list of tensor names, not one string")
        names = list(names)
    if not isinstance(readers, int) or not 0 <= readers <= 64:
        raise ValueError("readers must be an int in 0..64 (0 = default)")
    if progress is not None and not callable(progress):
        raise TypeError("progress must be callable(done, total)")
    loaded = _lockstep.load(os.fspath(path), names, _MODES[mode], bool(check), readers, progress)
    region = memoryview(loaded)
    tensors = {}
    gguf = loaded.stats["format"] == "gguf"  # GGUF lists dimensions innermost first
    for name, type_name, dims, offset, size in loaded.tensors:
        shape = tuple(reversed(dims)) if gguf else tuple(dims)
        dt = _DTYPES.get(type_name)
        if dt is None:
            arr = np.frombuffer(region, dtype=np.uint8, count=size, offset=offset)
        else:
            arr = np.frombuffer(region, dtype=dt, count=size // np.dtype(dt).itemsize,
                                offset=offset).reshape(shape)
        tensors[name] = arr
    return dict(loaded.meta), tensors

