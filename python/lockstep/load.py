"""lockstep.load: model files and checkpoints (GGUF, safetensors, sharded sets) into
numpy arrays or torch tensors, through lockstep's hardened readers and pipelined loader."""
from __future__ import annotations

import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, Literal, Optional, Tuple, Union

import numpy as np

from . import _lockstep, checkpoint
from ._lockstep import LoadCancelled
from .shard import ShardPlan

# load's modes, for type checkers and at run time (test_typing.py checks them against
# the extension's table)
Mode = Literal["auto", "alias", "copy", "buffered", "map"]
_MODES = {name: code for code, name in enumerate(_lockstep.LOAD_MODES)}  # auto, alias, copy, buffered, map

# Type names both formats share, and safetensors' own; anything else (ggml's quantized
# blocks, sub-byte floats) comes back as its raw bytes (uint8). numpy has no bfloat16
# or float8: BF16 and F8 come back as their bit patterns, uint16 and uint8 (torch:
# framework="torch" gives them their torch dtypes).
_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
    "F8_E4M3": np.uint8, "F8_E5M2": np.uint8,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
    "BOOL": np.bool_, "C64": np.complex64,
}


Framework = Literal["numpy", "torch"]

# Files of a cold set loaded at once: a file's own reads leave the disk and the CPUs
# idle between requests (the loader releases the GIL).
_FILES_IN_FLIGHT = 2


def load(path: Union[str, "os.PathLike[str]"], names: Optional[Iterable[str]] = None,
         mode: Mode = "auto", check: bool = False, readers: int = 0,
         progress: Optional[Callable[[int, int], Optional[bool]]] = None,
         framework: Framework = "numpy",
         plan: Optional[ShardPlan] = None, dtype: Any = None,
         numa: Union[str, int] = "local") -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Load a checkpoint; returns (metadata, tensors).

    path:     a GGUF or safetensors file; a Hugging Face index (*.safetensors.index.json);
              a part of a GGUF split set (NAME-00001-of-0000N.gguf: the whole set); or a
              directory holding one of those, or safetensors shards. The set is checked
              before anything is loaded (lockstep.checkpoint).
    metadata: dict of the key/values (safetensors: the __metadata__ strings; a set: the
              index's "metadata", then each file's, the first file's value of a key kept).
    tensors:  dict name -> array with the file's shape (C order, outermost dimension
              first). In "alias" mode the arrays are read-only views of a mapping of
              the file (zero copy); in "map" mode writable views of a private one
              (copy-on-write: a write copies that page, the file never changes);
              otherwise they view one writable region per file that the loader
              filled. The arrays keep that memory alive.
    framework: "numpy" (BF16 as uint16 bit patterns, as numpy has no bfloat16) or
              "torch": torch tensors on the same memory, no copy (BF16 and F16 as
              torch.bfloat16 and torch.float16, F8 as torch's float8 types).
    names:    load only these tensors (KeyError for a name not in the checkpoint).
    mode:     "auto" (direct reads when the file is cold; when it is in the page
              cache, "map", or "buffered" where dtype, a column plan or NUMA
              placement on a machine with several nodes needs the loader's own
              memory), "alias", "copy" (direct I/O), "buffered" or "map".
    check:    scan float values and quantized block scales for NaN/Inf while loading;
              a bad value raises BadFileError naming the tensor, .offset = its byte.
    readers:  reads in flight (0 = the measured default).
    progress: callable(done_bytes, total_bytes) over the whole set, called after each
              chunk; return True (or raise) to stop the load: LoadCancelled (or your
              exception).
    dtype:    "float32", "float16" or "bfloat16" (or that torch or numpy dtype): f32,
              f16 and bf16 tensors arrive converted to it, in the copy out of the read
              buffers (to nearest, ties to even, as torch's .to(); a NaN stays a NaN);
              other types as they are, except quantized GGUF blocks and sub-byte
              floats (ValueError: no dequantisation). Not with mode="alias" or "map".
    numa:     where the loaded memory goes on a machine with several NUMA nodes:
              "local" (the calling thread's node), a node number, or "off" (where
              the loader's threads first touch it). Alias and map modes map the page
              cache.
    plan:     a lockstep.ShardPlan: each tensor comes back as this rank's part of it
              (torch.chunk's rule), and only those bytes are read (a column split's
              small gaps excepted); "alias" and "map" modes take row splits only.

    Raises FileNotFoundError/OSError (cannot open or read; a missing shard or part),
    BadFileError (malformed file or set: the message says what and in which file,
    .offset where), ValueError (bad arguments; a plan that cannot split a tensor,
    named in the message).
    """
    return _load(path, names, mode, check, readers, progress, framework, plan, dtype, None, numa)


def _load(path: Union[str, "os.PathLike[str]"], names: Optional[Iterable[str]], mode: str, check: bool,
          readers: int, progress: Optional[Callable[[int, int], Optional[bool]]], framework: str,
          plan: Optional[ShardPlan], dtype: Any,
          stats: Optional[List[Dict[str, Any]]],
          numa: Union[str, int] = "local") -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """load, and each file's loader stats appended to stats (when given)"""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, not {mode!r}")
    if framework not in ("numpy", "torch"):
        raise ValueError(f"framework must be 'numpy' or 'torch', not {framework!r}")
    if names is not None:
        if isinstance(names, (str, bytes)):
            raise TypeError("names must be a list of tensor names, not one string")
        names = list(names)
    if not isinstance(readers, int) or not 0 <= readers <= 64:
        raise ValueError("readers must be an int in 0..64 (0 = default)")
    if progress is not None and not callable(progress):
        raise TypeError("progress must be callable(done, total)")
    to_type = _to_type(dtype)
    if numa in ("local", "off"):
        placement = (0, 0) if numa == "local" else (2, 0)
    elif isinstance(numa, int) and not isinstance(numa, bool) and numa >= 0:
        placement = (1, numa)
    else:
        raise ValueError(f"numa must be 'local', 'off' or a node number >= 0, not {numa!r}")
    if plan is not None and not isinstance(plan, ShardPlan):
        raise TypeError(f"plan must be a lockstep.ShardPlan, not {type(plan).__name__}")
    to = _torch_maker() if framework == "torch" else None
    path = os.fspath(path)
    if os.path.isfile(path) and not checkpoint.is_set_name(path):
        return _load_file(path, names, mode, check, readers, progress, to, plan, to_type, stats, placement)
    ck = checkpoint.resolve(path)
    want = list(ck.where) if names is None else names
    chosen: List[List[str]] = [[] for _ in ck.parts]
    for n in want:
        i = ck.where.get(n)
        if i is None:
            raise KeyError(f"no tensor named {n!r} in {path}")
        chosen[i].append(n)
    sizes = {t[0]: t[4] for p in ck.parts for t in p.tensors} if plan is None else \
        {name: part.nbytes for name, part in plan.parts(path).items()}
    jobs = [(part.path, sel) for part, sel in zip(ck.parts, chosen) if sel]
    resident = [part.resident for part, sel in zip(ck.parts, chosen) if sel]
    index_meta = ck.index_meta
    del ck  # its tables (objects a tensor) would count toward Python's next collection
    report = _SetProgress(progress, sum(sizes[n] for n in want), len(jobs)) if progress is not None else None
    part_stats: List[List[Dict[str, Any]]] = [[] for _ in jobs]

    def one(i: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        if report is not None and report.stopped:
            raise LoadCancelled("the load stopped before this file")
        return _load_file(jobs[i][0], jobs[i][1], mode, check, readers,
                          report.part(i) if report is not None else None, to, plan, to_type, part_stats[i],
                          placement)

    # A warm set is loaded by the calling thread while its files map (nothing to read):
    # mapping a file costs less than starting a thread and sharing the GIL with it.
    results: List[Tuple[Dict[str, Any], Dict[str, Any]]] = []
    warm = mode in ("auto", "alias", "map") and all(r >= _lockstep.LOAD_WARM_FRACTION for r in resident)
    while warm and len(results) < len(jobs):
        results.append(one(len(results)))
        warm = part_stats[len(results) - 1][-1]["mode"] in ("alias", "map")
    if len(results) < len(jobs):
        with ThreadPoolExecutor(min(_FILES_IN_FLIGHT, len(jobs) - len(results))) as pool:
            futures = [pool.submit(one, i) for i in range(len(results), len(jobs))]
            errors = [f.exception() for f in futures]  # each waited for: nothing loads after we return
        if any(errors):
            raise report.error if report is not None and report.error else next(e for e in errors if e)
        results += [f.result() for f in futures]
    meta_out: Dict[str, Any] = dict(index_meta)
    out: Dict[str, Any] = {}
    for (meta, tensors), st in zip(results, part_stats):
        for k, v in meta.items():
            meta_out.setdefault(k, v)
        out.update(tensors)
        if stats is not None:
            stats += st
    return meta_out, {n: out[n] for n in want}


class _SetProgress:
    """A set's progress from files loading at once: the sum of their bytes done, to the
    caller's callback one call at a time; a stop (True, or an exception) stops them all."""

    def __init__(self, fn: Callable[[int, int], Optional[bool]], total: int, n: int) -> None:
        self.fn, self.total, self.done = fn, total, [0] * n
        self.lock = threading.Lock()
        self.stopped = False
        self.error: Optional[BaseException] = None

    def part(self, i: int) -> Callable[[int, int], Optional[bool]]:
        def step(done: int, _file_total: int) -> Optional[bool]:
            with self.lock:
                if self.stopped:
                    return True
                self.done[i] = done
                try:
                    stop = self.fn(sum(self.done), self.total)
                except BaseException as e:
                    self.stopped, self.error = True, e
                    raise
                self.stopped = bool(stop)
                return stop
        return step


_TO_TYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def _to_type(dtype: Any) -> Optional[str]:
    """load's dtype as the C library names it: None, or F32, F16 or BF16"""
    if dtype is None:
        return None
    name = dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")
    if not isinstance(dtype, str) and not str(dtype).startswith("torch."):
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
    if name not in _TO_TYPES:
        raise ValueError(f"dtype must be float32, float16 or bfloat16 (a name, a torch or numpy dtype), "
                         f"not {dtype!r}")
    return _TO_TYPES[name]


def _load_file(path: str, names: Optional[List[str]], mode: str, check: bool, readers: int,
               progress: Optional[Callable[[int, int], Optional[bool]]],
               to: Optional[Callable[[np.ndarray[Any, Any], str], Any]],
               plan: Optional[ShardPlan] = None,
               to_type: Optional[str] = None,
               stats: Optional[List[Dict[str, Any]]] = None,
               placement: Tuple[int, int] = (0, 0)) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    loaded = _lockstep.load(path, names, _MODES[mode], bool(check), readers, progress,
                            plan._c() if plan is not None else None, to_type, *placement)
    if stats is not None:
        stats.append(loaded.stats)
    region = memoryview(loaded)
    tensors: Dict[str, Any] = {}
    gguf = loaded.stats["format"] == "gguf"  # GGUF lists dimensions innermost first
    for name, type_name, dims, offset, size in loaded.tensors:
        shape = tuple(reversed(dims)) if gguf else tuple(dims)
        dt = _DTYPES.get(type_name)
        if dt is None:
            arr = np.frombuffer(region, dtype=np.uint8, count=size, offset=offset)
        else:
            arr = np.frombuffer(region, dtype=dt, count=size // np.dtype(dt).itemsize,
                                offset=offset).reshape(shape)
        tensors[name] = to(arr, type_name) if to else arr
    return dict(loaded.meta), tensors


def _torch_maker() -> Callable[[np.ndarray[Any, Any], str], Any]:
    """numpy array (and the file's type name) -> a torch tensor on the same memory"""
    try:
        import torch
    except ImportError:
        raise ImportError("torch tensors need torch installed (pip install torch)") from None
    views = {"BF16": torch.bfloat16, "F8_E4M3": getattr(torch, "float8_e4m3fn", None),
             "F8_E5M2": getattr(torch, "float8_e5m2", None)}  # numpy holds their bit patterns

    def to(arr: np.ndarray[Any, Any], type_name: str) -> Any:
        if arr.flags.writeable:
            t = torch.from_numpy(arr)
        else:
            with warnings.catch_warnings():  # alias mode's arrays are read-only, as documented
                warnings.simplefilter("ignore", UserWarning)
                t = torch.from_numpy(arr)
        v = views.get(type_name)
        return t.view(v) if v is not None else t
    return to
