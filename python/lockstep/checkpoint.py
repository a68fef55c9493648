"""Checkpoints of more than one file, resolved and checked before a byte is loaded.

A checkpoint is one of:
  - a model file (.safetensors or .gguf);
  - a Hugging Face index, `*.safetensors.index.json`: {"weight_map": {tensor: file}};
  - a GGUF split set, named by any of its parts: `NAME-00001-of-00003.gguf`, ...;
  - a directory holding exactly one of those: its index, its split set, its one model
    file, or else all its .safetensors files as shards.
resolve() reads every file's header with the hardened parser and checks the set: an
index names only files inside its directory that exist, and each of its tensors in the
file it names; every tensor is in exactly one file; the parts of a split set all exist
and agree on their split count and number. Errors name the file and, where there is
one, the byte offset (BadFileError.offset)."""
from __future__ import annotations

import errno
import json
import os
import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from . import _lockstep
from ._lockstep import BadFileError

_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
_SPLIT_NO, _SPLIT_COUNT = "split.no", "split.count"  # llama.cpp's keys, in every part


class Part(NamedTuple):
    """One file of a checkpoint: its path, metadata and tensor table as inspect() gives
    them (name, type, dims as the file orders them, file offset, bytes), and how much
    of its data was in the page cache when it was read (0..1, sampled)"""
    path: str
    format: str
    meta: List[Tuple[str, Any]]
    tensors: List[Tuple[str, str, Tuple[int, ...], int, int]]
    resident: float


class Checkpoint(NamedTuple):
    kind: str                       # "file", "index", "split" or "shards"
    parts: List[Part]
    where: Dict[str, int]           # tensor name -> index into parts
    index_meta: Dict[str, Any]      # the index's "metadata" ({} without an index)


def _bad(message: str, offset: int = 0) -> BadFileError:
    e = BadFileError(message)
    e.offset = offset
    return e


def _missing(path: str, what: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, f"{what}: no such file", path)


def _inspect(path: str) -> Part:
    fmt, meta, tensors, resident = _lockstep.inspect(path)
    return Part(path, fmt, meta, tensors, resident)


def _split_parts(path: str) -> List[str]:
    """Every part of the split set that path (one part) belongs to, in order"""
    m = _SPLIT.match(os.path.basename(path))
    assert m is not None
    count = int(m.group("count"))
    if count < 1 or int(m.group("no")) > count:
        raise _bad(f"{path}: a split part numbered {m.group('no')} of {m.group('count')}")
    folder = os.path.dirname(path)
    parts = [os.path.join(folder, f"{m.group('stem')}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    for p in parts:
        if not os.path.isfile(p):
            raise _missing(p, f"part of the split set {os.path.basename(path)} is missing")
    return parts


def _read_index(path: str) -> Tuple[Dict[str, str], Dict[str, Any], bytes]:
    raw = open(path, "rb").read()
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad(f"{path}: not JSON ({e})", getattr(e, "pos", 0)) from None
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise _bad(f"{path}: no weight_map of tensor names to file names", 0)
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict):
        raise _bad(f"{path}: metadata is not an object", raw.find(b'"metadata"'))
    return wm, meta, raw


def _index_files(path: str, wm: Dict[str, str], raw: bytes) -> List[str]:
    """The files an index names, each checked to be a plain name in its directory (a
    symlink there may point anywhere, as Hugging Face's cache's do) that exists"""
    folder = os.path.dirname(os.path.abspath(path))
    files: List[str] = []
    for name in dict.fromkeys(wm.values()):
        full = os.path.join(folder, name)
        if not name or name in (".", "..") or os.sep in name or (os.altsep and os.altsep in name):
            at = raw.find(json.dumps(name).encode())
            raise _bad(f"{path}: weight_map names {name!r}, which is not a file in {folder}", max(at, 0))
        if not os.path.isfile(full):
            raise _missing(full, f"{os.path.basename(path)} names a shard that does not exist")
        files.append(full)
    return files


def _in_directory(folder: str) -> Tuple[str, List[str]]:
    names = sorted(os.listdir(folder))
    indexes = [n for n in names if n.endswith(".safetensors.index.json")]
    if len(indexes) > 1:
        raise ValueError(f"{folder} holds several indexes ({', '.join(indexes)}): pass the one to load")
    if indexes:
        return "index", [os.path.join(folder, indexes[0])]
    st = [os.path.join(folder, n) for n in names if n.endswith(".safetensors")]
    gg = [os.path.join(folder, n) for n in names if n.endswith(".gguf")]
    if st and gg:
        raise ValueError(f"{folder} holds both .safetensors and .gguf files: pass the file or set to load")
    if st:
        return ("file" if len(st) == 1 else "shards"), st
    if len(gg) == 1 and not _SPLIT.match(os.path.basename(gg[0])):
        return "file", gg
    sets = {m.group("stem") + m.group("count") for m in map(_SPLIT.match, map(os.path.basename, gg)) if m}
    if gg and len(sets) == 1 and all(_SPLIT.match(os.path.basename(g)) for g in gg):
        return "split", _split_parts(gg[0])
    if gg:
        raise ValueError(f"{folder} holds several GGUF models: pass the file or a part of the set to load")
    raise _missing(folder, "no .safetensors, .gguf or index file in the directory")


def is_set_name(path: str) -> bool:
    """Whether a file's name makes it part of a set: an index or a split part"""
    return path.endswith(".index.json") or _SPLIT.match(os.path.basename(path)) is not None


def resolve(path: "os.PathLike[str] | str") -> Checkpoint:
    """The checkpoint at path, its files' headers read and the set checked"""
    path = os.fspath(path)
    index_meta: Dict[str, Any] = {}
    wm: Optional[Dict[str, str]] = None
    index = ""
    if os.path.isdir(path):
        kind, files = _in_directory(path)
    elif not os.path.exists(path):
        raise _missing(path, "no such checkpoint")
    elif path.endswith(".index.json"):
        kind, files = "index", [path]
    elif _SPLIT.match(os.path.basename(path)):
        kind, files = "split", _split_parts(path)
    else:
        kind, files = "file", [path]
    if kind == "index":
        index = files[0]
        wm, index_meta, raw = _read_index(index)
        files = _index_files(index, wm, raw)
    parts = [_inspect(f) for f in files]
    if kind == "split":
        count = len(parts)
        for i, p in enumerate(parts):
            meta = dict(p.meta)
            no, of = meta.get(_SPLIT_NO), meta.get(_SPLIT_COUNT)  # split.no counts from 0
            if p.format != "gguf" or of != count or no != i:
                said = f"part {no + 1} of {of}" if isinstance(no, int) else "no part of a split set"
                raise _bad(f"{p.path}: says it is {said}, but its name makes it part {i + 1} of {count}", 0)
    where: Dict[str, int] = {}
    for i, p in enumerate(parts):
        for name, _, _, offset, _ in p.tensors:
            if name in where:
                raise _bad(f"tensor {name!r} is in both {parts[where[name]].path} and {p.path}", offset)
            where[name] = i
    if wm is not None:
        base = [os.path.basename(p.path) for p in parts]  # the index's file names are plain names
        for name, file in wm.items():
            at = where.get(name)
            if at is None or base[at] != file:
                raise _bad(f"{index}: puts tensor {name!r} in {file}, which does not hold it", 0)
        extra = [n for n in where if n not in wm]
        if extra:
            raise _bad(f"{parts[where[extra[0]]].path}: holds tensor {extra[0]!r}, which the index does not list", 0)
    return Checkpoint(kind, parts, where, index_meta)
