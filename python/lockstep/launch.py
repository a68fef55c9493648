"""python -m lockstep.launch -n N script.py [args...]

Starts N copies of script.py on this machine with the variables torchrun sets
(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so that
lockstep.Comm.from_env() (and torch.distributed) find each other. If one copy fails
the others are stopped; the exit code is the first failure's.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
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
    procs = []
    for r in range(a.nproc):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(a.nproc),
                   LOCAL_WORLD_SIZE=str(a.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [sys.executable] + (["-m"] if a.module else []) + [a.target] + a.args
        procs.append(subprocess.Popen(cmd, env=env))
    code = 0
    try:
        live = list(procs)
        while live:
            for p in list(live):
                rc = p.poll()
                if rc is None:
                    continue
                live.remove(p)
                if rc != 0 and code == 0:
                    code = rc if rc > 0 else 128 - rc
                    for q in live:  # one failed: stop the rest
                        q.send_signal(signal.SIGTERM)
            time.sleep(0.01)
    except KeyboardInterrupt:
        for p in procs:
            p.send_signal(signal.SIGINT)
        code = 130
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    return code


if __name__ == "__main__":
    sys.exit(main())
