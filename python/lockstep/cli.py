"""The `lockstep` command, as pip installs it.

  lockstep omp run [-n THREADS] -- PROGRAM ARGS   run PROGRAM on lockstep's OpenMP runtime
  lockstep omp check FILE                          the OpenMP entry points FILE needs
  lockstep omp path                                where the runtime library is
  lockstep load PATH [--mode M] [--check] [--dtype T] a checkpoint, with its speed
  lockstep info PATH [--json]                      its files' metadata and tensor tables

PATH: a model file, a directory, a *.safetensors.index.json or a part of a GGUF split
set. `lockstep bench` and `report` run the C benchmarks of a source checkout's build:
from a checkout, tools/lockstep (scripts/bench.sh builds it and runs the report), or
set LOCKSTEP_SOURCE_DIR to the checkout.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from . import cli_load, omp


def _omp_check(path: str) -> int:
    rep = omp.check(path)
    total = len(rep.supported) + len(rep.failing) + len(rep.missing)
    if total == 0:
        print(f"{path} needs no OpenMP entry points (it does not use OpenMP, or loads it later)")
        return 0
    print(f"{path} needs {total} OpenMP entry points:")
    rows = [(s, "supported") for s in rep.supported]
    rows += [(s, "NOT SUPPORTED: exits with 'lockstep-omp: ... is not supported'") for s in rep.failing]
    rows += [(s, "MISSING from this runtime: the call would reach the real libgomp") for s in rep.missing]
    width = max(len(f"{s.name}@{s.version}") for s, _ in rows)
    for s, what in sorted(rows):
        print(f"  {(s.name + '@' + s.version if s.version else s.name):<{width}}  {what}")
    print(f"{len(rep.supported)} supported, {len(rep.failing)} not supported, {len(rep.missing)} missing")
    return 0 if not rep.failing and not rep.missing else 1


def _source_tool(argv: List[str]) -> int:
    root = os.environ.get("LOCKSTEP_SOURCE_DIR", "")
    tool = os.path.join(root, "tools", "lockstep") if root else ""
    if not tool or not os.path.isfile(tool):
        print(f"lockstep: `{argv[0]}` runs from a source checkout (it needs the benchmarks and "
              "tools the CMake build makes): run tools/lockstep there, or set "
              "LOCKSTEP_SOURCE_DIR to the checkout", file=sys.stderr)
        return 2
    os.execv(sys.executable, [sys.executable, tool] + argv)
    return 127  # not reached


def main(argv: Optional[List[str]] = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in and args_in[0] in ("bench", "report"):
        return _source_tool(args_in)
    ap = argparse.ArgumentParser(prog="lockstep", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("omp", help="OpenMP programs on lockstep's runtime")
    osub = o.add_subparsers(dest="omp_cmd", required=True)
    r = osub.add_parser("run", help="run a program with the runtime preloaded")
    r.add_argument("-n", "--threads", type=int, default=None, help="OMP_NUM_THREADS for the program")
    r.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS")
    c = osub.add_parser("check", help="the OpenMP entry points a binary or library needs")
    c.add_argument("file")
    osub.add_parser("path", help="print the runtime library's path")
    cli_load.add_parsers(sub)
    for name in ("bench", "report"):
        sub.add_parser(name, help="from a source checkout (tools/lockstep)")
    args = ap.parse_args(args_in)
    done = cli_load.run(args)
    if done is not None:
        return done
    try:
        if args.omp_cmd == "path":
            print(omp.runtime_path())
            return 0
        if args.omp_cmd == "check":
            return _omp_check(args.file)
        prog = args.program[1:] if args.program[:1] == ["--"] else args.program
        return omp.run(prog, args.threads)
    except omp.OmpError as e:
        print(f"lockstep: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
