"""Run unmodified OpenMP programs on lockstep's runtime (liblockstep-omp.so).

The runtime exports libgomp's entry points with libgomp's symbol versions, so a program
built by ``gcc -fopenmp`` (or a library such as PyTorch's, which bundles libgomp) runs
on it when it is preloaded::

    lockstep omp run -n 4 -- ./my_program args     # LD_PRELOAD set for you
    lockstep omp check ./libfoo.so                  # the entry points it needs

``LOCKSTEP_OMP_STATS=1`` prints, at exit, the regions, barriers and tasks the runtime
ran. Entry points the runtime does not implement (OpenACC, the Fortran bindings) end
the program with ``lockstep-omp: NAME is not supported``.
"""
from __future__ import annotations

import ctypes
import os
import struct
import sys
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

LIBRARY = "liblockstep-omp.so"
_PREFIXES = (b"GOMP_", b"omp_", b"GOACC_", b"acc_")


class OmpError(Exception):
    """The runtime cannot be found, or a file is not one `lockstep omp check` can read."""


def runtime_path() -> str:
    """The runtime's path: $LOCKSTEP_OMP_LIB, the installed package's copy, or a build
    tree's (build/release) when running from a source checkout."""
    env = os.environ.get("LOCKSTEP_OMP_LIB")
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    cands = [env] if env else []
    cands += [os.path.join(here, LIBRARY), os.path.join(root, "build", "release", LIBRARY)]
    for cand in cands:
        if cand and os.path.isfile(cand):
            return cand
    if env:
        raise OmpError(f"LOCKSTEP_OMP_LIB={env} is not a file: point it at {LIBRARY}")
    raise OmpError(f"{LIBRARY} not found next to the lockstep package or in build/release: "
                   "reinstall the package (pip install .) or build the release preset")


class Symbol(NamedTuple):
    name: str
    version: str  # "" when the reference carries no version


def _read_elf(path: str) -> Tuple[bytes, List[Tuple[int, int, int, int, int]]]:
    """The file's bytes and its section headers (type, offset, size, link, entsize)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise OmpError(f"cannot read {path}: {e.strerror}") from None
    if data[:4] != b"\x7fELF":
        raise OmpError(f"{path} is not an ELF file (a script? check the program it runs)")
    if data[4] != 2 or data[5] != 1:
        raise OmpError(f"{path}: only 64-bit little-endian ELF files are read")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for i in range(shnum):
        base = shoff + i * shentsize
        if base + 64 > len(data):
            raise OmpError(f"{path}: section header {i} lies past the end of the file")
        sh_type, = struct.unpack_from("<I", data, base + 4)
        off, size = struct.unpack_from("<QQ", data, base + 0x18)
        link, = struct.unpack_from("<I", data, base + 0x28)
        entsize, = struct.unpack_from("<Q", data, base + 0x38)
        sections.append((sh_type, off, size, link, entsize))
    return data, sections


def _cstr(data: bytes, off: int) -> bytes:
    end = data.find(b"\0", off)
    return data[off:end if end >= 0 else len(data)]


def _version_names(data: bytes, sections: Sequence[Tuple[int, int, int, int, int]]) -> Dict[int, str]:
    """Version index -> name, from the needed (verneed) and defined (verdef) tables."""
    names: Dict[int, str] = {}
    for sh_type, off, size, link, _ in sections:
        if sh_type not in (0x6FFFFFFE, 0x6FFFFFFD):
            continue
        stroff = sections[link][1]
        pos, end = off, off + size
        while off <= pos < end:
            if sh_type == 0x6FFFFFFE:  # Verneed: version, cnt, file, aux, next
                _, cnt, _, aux, nxt = struct.unpack_from("<HHIII", data, pos)
                a = pos + aux
                for _ in range(cnt):  # Vernaux: hash, flags, other, name, next
                    _, _, other, name, anext = struct.unpack_from("<IHHII", data, a)
                    names[other & 0x7FFF] = _cstr(data, stroff + name).decode(errors="replace")
                    if not anext:
                        break
                    a += anext
            else:  # Verdef: version, flags, ndx, cnt, hash, aux, next
                _, _, ndx, cnt, _, aux, nxt = struct.unpack_from("<HHHHIII", data, pos)
                if cnt:
                    name, = struct.unpack_from("<I", data, pos + aux)
                    names[ndx] = _cstr(data, stroff + name).decode(errors="replace")
            if not nxt:
                break
            pos += nxt
    return names


def elf_symbols(path: str, defined: bool) -> Set[Symbol]:
    """The OpenMP entry points an ELF file references (defined=False) or defines."""
    data, sections = _read_elf(path)
    versions = _version_names(data, sections)
    versym: Optional[Tuple[int, int]] = None
    for sh_type, off, size, _, _ in sections:
        if sh_type == 0x6FFFFFFF:
            versym = (off, size)
    out: Set[Symbol] = set()
    for sh_type, off, size, link, entsize in sections:
        if sh_type != 11 or not entsize:  # SHT_DYNSYM
            continue
        stroff = sections[link][1]
        for i in range(size // entsize):
            name_off, info, _, shndx = struct.unpack_from("<IBBH", data, off + i * entsize)
            if (shndx != 0) != defined or info >> 4 == 0:  # wanted kind; not STB_LOCAL
                continue
            name = _cstr(data, stroff + name_off)
            if not name.startswith(_PREFIXES):
                continue
            ver = ""
            if versym and versym[0] + 2 * i + 2 <= len(data):
                ndx, = struct.unpack_from("<H", data, versym[0] + 2 * i)
                ver = versions.get(ndx & 0x7FFF, "")
            out.add(Symbol(name.decode(), ver))
    return out


def unsupported_names(lib: str) -> Set[str]:
    """The entry points the runtime exports only to fail by name."""
    fn = ctypes.CDLL(lib).lockstep_omp_unsupported_names
    fn.restype = ctypes.c_void_p
    addr = fn()
    names: Set[str] = set()
    while True:
        name = ctypes.string_at(addr)
        if not name:
            return names
        names.add(name.decode())
        addr += len(name) + 1


class Report(NamedTuple):
    supported: List[Symbol]
    failing: List[Symbol]   # exported to fail by name
    missing: List[Symbol]   # not exported at all: calls would reach the real libgomp


def check(path: str, lib: Optional[str] = None) -> Report:
    """Which of the OpenMP entry points path needs the runtime implements."""
    lib = lib or runtime_path()
    needed = elf_symbols(path, defined=False)
    ours = elf_symbols(lib, defined=True)
    names = {s.name for s in ours}
    stubs = unsupported_names(lib)
    sup: List[Symbol] = []
    fail: List[Symbol] = []
    miss: List[Symbol] = []
    for sym in sorted(needed):
        present = sym in ours if sym.version else sym.name in names
        if not present:
            miss.append(sym)
        elif sym.name in stubs:
            fail.append(sym)
        else:
            sup.append(sym)
    return Report(sup, fail, miss)


def run_env(threads: Optional[int], base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment `lockstep omp run` gives the program."""
    env = dict(os.environ if base is None else base)
    lib = runtime_path()
    pre = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = lib + (":" + pre if pre else "")
    if threads is not None:
        if threads < 1:
            raise OmpError(f"-n {threads}: the thread count must be 1 or more")
        env["OMP_NUM_THREADS"] = str(threads)
    env["LOCKSTEP_OMP_RUN_PID"] = str(os.getpid())
    return env


def run(argv: Sequence[str], threads: Optional[int] = None) -> int:
    """Replace this process with argv on the runtime (exec; returns only on failure)."""
    if not argv:
        raise OmpError("nothing to run: lockstep omp run [-n THREADS] -- PROGRAM ARGS")
    env = run_env(threads)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], list(argv), env)
    except OSError as e:
        raise OmpError(f"cannot run {argv[0]}: {e.strerror}") from None
    return 127  # not reached
