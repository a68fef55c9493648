"""python -m lockstep.launch -n N script.py [args...]

Starts N copies of script.py on this machine with the variables torchrun sets
(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so that
lockstep.Comm.from_env() (and torch.distributed) find each other. If one copy fails
the others are stopped, and the launcher says which rank failed and how (on stderr);
the exit code is the first failure's. Ctrl-C (SIGINT), SIGTERM and SIGHUP sent to the
launcher are passed on to every copy (then, after 10 s, SIGKILL), so none is left
running when the launcher is stopped; the exit code is then 128 plus the signal's
number.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from types import FrameType
from typing import List, NoReturn, Optional, Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _Stopped(Exception):
    """the launcher got SIGTERM or SIGHUP"""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stopped(signum: int, frame: Optional[FrameType]) -> NoReturn:
    raise _Stopped(signum)


def _stop(procs: Sequence[subprocess.Popen[bytes]], signum: int) -> None:
    """signum to every copy still running; SIGKILL to those still there after 10 s (or
    at once on a second signal)"""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signum)
    deadline = time.monotonic() + 10
    try:
        for p in procs:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    except (subprocess.TimeoutExpired, KeyboardInterrupt, _Stopped):
        pass
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _how(rc: int) -> str:
    """a copy's exit status, in words"""
    if rc > 0:
        return f"exited with code {rc}"
    try:
        return f"was killed by {signal.Signals(-rc).name}"
    except ValueError:
        return f"was killed by signal {-rc}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lockstep.launch", description=__doc__.split("\n")[2])
    ap.add_argument("-n", "--nproc", type=int, required=True, help="number of processes (ranks)")
    ap.add_argument("-m", dest="module", action="store_true", help="run the target as a module (python -m)")
    ap.add_argument("target", help="script (or module with -m)")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    from lockstep import _lockstep
    if not 1 <= a.nproc <= _lockstep.MAX_RANKS:
        ap.error(f"-n must be from 1 to {_lockstep.MAX_RANKS} (the most ranks a communicator has), "
                 f"not {a.nproc}")
    port = str(free_port())
    procs: List[subprocess.Popen[bytes]] = []
    # before the first copy starts, so that a stop never leaves one behind (the copies
    # start with the default handlers: exec resets them)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stopped)
    code = 0
    try:
        for r in range(a.nproc):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(a.nproc),
                       LOCAL_WORLD_SIZE=str(a.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            cmd = [sys.executable] + (["-m"] if a.module else []) + [a.target] + a.args
            procs.append(subprocess.Popen(cmd, env=env))
        live = list(procs)
        while live:
            for p in list(live):
                rc = p.poll()
                if rc is None:
                    continue
                live.remove(p)
                if rc != 0 and code == 0:
                    code = rc if rc > 0 else 128 - rc
                    print(f"lockstep.launch: rank {procs.index(p)} {_how(rc)}"
                          + (f"; stopping the other {len(live)}" if live else ""), file=sys.stderr, flush=True)
                    _stop(live, signal.SIGTERM)  # one failed: stop the rest
            time.sleep(0.01)
    except KeyboardInterrupt:
        _stop(procs, signal.SIGINT)
        return 128 + signal.SIGINT
    except _Stopped as e:
        _stop(procs, e.signum)
        return 128 + e.signum
    return code


if __name__ == "__main__":
    sys.exit(main())
