"""Building the C++ torch ops (csrc/torch_ops.cpp) against the torch that is installed,
at first use, into a cache shared by every process of the user: the first rank to come
builds (about 10 s), the others wait for it and load the same file.

The cache key is the source, the headers it includes from lockstep, torch's version and
location, the Python ABI and the compiler (its command, and the program it runs: path,
size and time), so a new torch, lockstep or compiler builds anew.
Directory: $LOCKSTEP_CACHE, else $XDG_CACHE_HOME/lockstep, else ~/.cache/lockstep.
Compiler: $CXX, else c++, g++ or clang++ on PATH. The build is warning-clean with -Wall
(torch's and Python's headers are system headers to it).

Ahead of time (an image build, a machine without write access at run time):
    python -m lockstep._torch_build        # prints the module's path"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import List

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_HERE, "csrc", "torch_ops.cpp")


class BuildError(RuntimeError):
    """The C++ ops cannot be built here; the message says what is missing."""


def _lockstep_include() -> str:
    """lockstep's public headers: installed beside csrc, or the source tree's"""
    for d in (os.path.join(_HERE, "csrc", "include"), os.path.join(_HERE, "..", "..", "include")):
        if os.path.exists(os.path.join(d, "lockstep", "comm.h")):
            return os.path.abspath(d)
    raise BuildError(f"lockstep's headers are not beside the package ({_HERE}/csrc/include): reinstall lockstep")


def _compiler() -> str:
    cxx = os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    if not cxx or not shutil.which(cxx.split()[0]):
        raise BuildError("no C++ compiler found (set CXX, or install g++)")
    return cxx


def cache_dir() -> str:
    root = os.environ.get("LOCKSTEP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "lockstep")
    return os.path.join(root, "torch-ops")


def _command(cxx: str, out: str) -> List[str]:
    import torch
    from torch.utils import cpp_extension
    inc = _lockstep_include()
    lib = cpp_extension.library_paths()[0]
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return (cxx.split() + ["-O2", "-std=c++20", "-fPIC", "-shared", "-Wall", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                           "-I", os.path.join(_HERE, "csrc"), "-I", inc, "-isystem", sysconfig.get_paths()["include"]]
            + [f"-isystem{p}" for p in cpp_extension.include_paths()]
            + [_SOURCE, "-o", out, f"-L{lib}", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-lc10",
               f"-Wl,-rpath,{lib}"])


def _compiler_identity(cxx: str) -> str:
    """The program cxx runs, as its real path, size and modification time: an upgraded
    compiler behind the same name builds anew"""
    path = os.path.realpath(shutil.which(cxx.split()[0]) or cxx.split()[0])
    try:
        st = os.stat(path)
    except OSError:
        return path
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def _key(cxx: str) -> str:
    import torch
    h = hashlib.sha256()
    inc = _lockstep_include()
    for path in (_SOURCE, os.path.join(_HERE, "csrc", "capi.h"), os.path.join(inc, "lockstep", "comm.h")):
        with open(path, "rb") as f:
            h.update(f.read())
    for part in (torch.__version__, torch.__file__, sys.version, sysconfig.get_config_var("EXT_SUFFIX") or "", cxx,
                 _compiler_identity(cxx)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:20]


def build(force: bool = False) -> str:
    """The path of the built module (lockstep._torch_ops), building it if the cache has
    none for this torch and lockstep. Raises BuildError when it cannot be built."""
    if not os.path.exists(_SOURCE):
        raise BuildError(f"{_SOURCE} is missing: reinstall lockstep")
    cxx = _compiler()
    d = os.path.join(cache_dir(), _key(cxx))
    out = os.path.join(d, "_torch_ops" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    if os.path.exists(out) and not force:
        return out
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise BuildError(f"cannot create the cache directory {d} ({e.strerror}): set LOCKSTEP_CACHE") from None
    with open(os.path.join(d, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another rank may be building it: wait, then use its file
        if os.path.exists(out) and not force:
            return out
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".so")
        os.close(fd)
        try:
            r = subprocess.run(_command(cxx, tmp), capture_output=True, text=True)
            if r.returncode != 0:
                lines = r.stderr.strip().splitlines()
                tail = "\n".join(([ln for ln in lines if "error" in ln] or lines)[:10])
                raise BuildError(f"{cxx} could not build {_SOURCE} (exit {r.returncode}):\n{tail}")
            if r.stderr.strip():  # built, with warnings: shown, never silenced
                import warnings
                warnings.warn(f"{cxx} warned building {_SOURCE}:\n{r.stderr.strip()[:3000]}", RuntimeWarning,
                              stacklevel=2)
            os.replace(tmp, out)  # whole or not at all, for the ranks that load it
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return out


if __name__ == "__main__":
    try:
        print(build(force="--force" in sys.argv[1:]))
    except BuildError as e:
        sys.exit(f"lockstep: {e}")
