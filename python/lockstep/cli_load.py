"""`lockstep load PATH` and `lockstep info PATH`: a checkpoint (a model file, a
directory, a *.safetensors.index.json or any part of a GGUF split set) loaded with a
progress bar and a closing line of its speed, or its files' metadata and tensor
tables. One implementation, for the installed command and tools/lockstep alike."""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from typing import Any, Dict, List, Optional

from . import checkpoint
from .load import _MODES, _load
from ._lockstep import BadFileError, LoadError


def add_parsers(sub: Any) -> None:
    s = sub.add_parser("info", help="a checkpoint's metadata and tensor tables, file by file")
    s.add_argument("path", help="a model file, a directory, an index or a part of a split set")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s = sub.add_parser("load", help="load a checkpoint and report the speed")
    s.add_argument("path", help="a model file, a directory, an index or a part of a split set")
    s.add_argument("--to", choices=["host", "cuda"], default="host",
                   help="cuda: one file through the CUDA sink (the lockstep-load program)")
    s.add_argument("--mode", choices=list(_MODES), default="auto")
    s.add_argument("--check", action="store_true", help="scan values for NaN/Inf while loading")
    s.add_argument("--readers", type=int, default=0,
                   help="reads in flight per file (default 2; 6 when converting or gathering columns)")
    s.add_argument("--dtype", choices=["float32", "float16", "bfloat16"],
                   help="convert f32, f16 and bf16 tensors to this type while loading")
    s.add_argument("--numa", default="local", help="local (default), off, or a node number: where the "
                   "loaded memory goes on a machine with several NUMA nodes")
    s.add_argument("--json", action="store_true", help="machine-readable closing line")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _bar(done: int, total: int) -> None:
    width = 40
    fill = int(done / total * width) if total else width
    pct = 100.0 * done / total if total else 100.0
    sys.stderr.write(f"\r[{'#' * fill}{' ' * (width - fill)}] {pct:5.1f}%  {done / 1e9:.2f} / {total / 1e9:.2f} GB")
    sys.stderr.flush()


def _error(path: str, e: BaseException) -> int:
    at = f" (at byte {e.offset})" if isinstance(e, BadFileError) and getattr(e, "offset", None) is not None else ""
    print(f"lockstep: {path}: {e}{at}", file=sys.stderr)
    return 1


def cmd_load(args: argparse.Namespace) -> int:
    if args.to == "cuda":
        return _cuda(args)
    tty = sys.stderr.isatty() and not args.json
    stats: List[Dict[str, Any]] = []
    t0, c0 = time.perf_counter(), _cpu()
    try:
        _, tensors = _load(args.path, None, args.mode, args.check, args.readers,
                           _bar if tty else None, "numpy", None, args.dtype, stats,
                           int(args.numa) if args.numa.isdigit() else args.numa)
    except (OSError, LoadError, ValueError, KeyError) as e:
        if tty:
            sys.stderr.write("\n")
        return _error(args.path, e)
    secs, cpus = time.perf_counter() - t0, _cpu() - c0
    if tty:
        sys.stderr.write("\n")
    nbytes = sum(s["bytes"] for s in stats)
    resident = sum(s["resident"] * s["bytes"] for s in stats) / nbytes if nbytes else 1.0
    modes = sorted({s["mode"] for s in stats}) or [args.mode]
    fallback = [s for s in stats if s["direct_fallback"]]
    out = {"bytes": nbytes, "tensors": len(tensors), "files": len(stats), "seconds": round(secs, 6),
           "gb_per_s": round(nbytes / secs / 1e9, 4) if secs > 0 else 0.0,
           "cpu_s_per_gb": round(cpus / (nbytes / 1e9), 4) if nbytes else 0.0,
           "mode": "+".join(modes), "direct_fallback": bool(fallback),
           "fallback_offset": fallback[0]["fallback_offset"] if fallback else 0,
           "resident": round(resident, 3), "checked": bool(args.check), "dtype": args.dtype,
           "numa_node": stats[0]["numa_node"] if stats else -1}
    if args.json:
        print(json.dumps(out))
        return 0
    files = f" from {out['files']} files" if out["files"] > 1 else ""
    line = (f"loaded {out['tensors']} tensors, {nbytes} bytes{files} in {secs:.3f} s: {out['gb_per_s']:.2f} GB/s, "
            f"{out['cpu_s_per_gb']:.3f} CPU-s/GB (mode {out['mode']}")
    if fallback:
        line += f", direct I/O refused: buffered from byte {out['fallback_offset']}"
    if args.dtype:
        line += f", converted to {args.dtype}"
    print(line + f"{', values checked' if args.check else ''}; {100 * resident:.0f} % was in the page cache)")
    return 0


def _cuda(args: argparse.Namespace) -> int:
    """--to cuda: the C program, which has the CUDA sink (one file)"""
    if os.path.isdir(args.path) or checkpoint.is_set_name(args.path):
        print("lockstep: --to cuda loads one model file (the CUDA sink is in the C library's "
              "lockstep-load); name a file of the set", file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    places = [os.environ.get("LOCKSTEP_BUILD_DIR", ""), os.path.join(here, "..", "..", "build", "release")]
    places += os.environ.get("PATH", "").split(os.pathsep)
    exe = next((os.path.join(p, "lockstep-load") for p in places
                if p and os.path.exists(os.path.join(p, "lockstep-load"))), None)
    if exe is None:
        print("lockstep: --to cuda needs the lockstep-load program of a CMake build or install "
              "(cmake --build build/release), or set LOCKSTEP_BUILD_DIR", file=sys.stderr)
        return 2
    extra = ["--mode", args.mode] + (["--check"] if args.check else []) + (["--json"] if args.json else [])
    extra += ["--readers", str(args.readers)] if args.readers else []
    os.execv(exe, [exe, args.path, "--to", "cuda"] + extra)
    return 127  # not reached


def _value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v if len(v) <= 60 else v[:57] + "...")
    if isinstance(v, list):
        head = ", ".join(_value(x) for x in v[:4])
        return f"[{head}{', ...' if len(v) > 4 else ''}] ({len(v)})"
    return str(v)


def cmd_info(args: argparse.Namespace) -> int:
    try:
        ck = checkpoint.resolve(args.path)
    except (OSError, LoadError, ValueError) as e:
        return _error(args.path, e)
    if args.json:
        print(json.dumps({"kind": ck.kind, "index_metadata": ck.index_meta, "files": [
            {"path": p.path, "format": p.format, "metadata": dict(p.meta),
             "tensors": [{"name": n, "type": t, "dims": list(d), "offset": o, "bytes": b}
                         for n, t, d, o, b in p.tensors]} for p in ck.parts]}))
        return 0
    total = sum(t[4] for p in ck.parts for t in p.tensors)
    print(f"{args.path}: {ck.kind}, {len(ck.parts)} file{'s' if len(ck.parts) > 1 else ''}, "
          f"{len(ck.where)} tensors, {total} bytes")
    for p in ck.parts:
        print(f"\n{p.path}: {p.format}, {len(p.meta)} metadata entries, {len(p.tensors)} tensors")
        for k, v in p.meta:
            print(f"  {k:<40} {_value(v)}")
        print(f"\n  {'tensor':<40} {'type':<8} {'shape':<24} {'offset':>14} {'bytes':>14}")
        for name, typ, dims, off, nb in p.tensors:
            shape = "x".join(map(str, dims)) or "scalar"
            print(f"  {name:<40} {typ:<8} {shape:<24} {off:>14} {nb:>14}")
    return 0


def run(args: argparse.Namespace) -> Optional[int]:
    """The exit code of info or load, None for other commands"""
    return cmd_info(args) if args.cmd == "info" else cmd_load(args) if args.cmd == "load" else None
