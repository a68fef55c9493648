"""python -m lockstep.launch and Comm.from_env: the variables, signals passed on, what
a missing launcher says; the peers' send order."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import lockstep
from conftest import run_ranks



def test_launcher_sets_the_variables(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, lockstep, sys
        c = lockstep.Comm.from_env(timeout=30)
        a = np.full(16, c.rank + 1, np.float32)
        c.allreduce(a)
        assert (a == sum(range(1, c.size + 1))).all(), a
        sys.exit(0 if c.size == 3 else 3)
    """))
    r = subprocess.run([sys.executable, "-m", "lockstep.launch", "-n", "3", str(script)], timeout=120)
    assert r.returncode == 0
    bad = tmp_path / "bad.py"
    bad.write_text("import sys, os; sys.exit(5 if os.environ['LOCAL_RANK'] == '1' else 0)\n")
    r = subprocess.run([sys.executable, "-m", "lockstep.launch", "-n", "2", str(bad)], timeout=120,
                       capture_output=True, text=True)
    assert r.returncode == 5 and "lockstep.launch: rank 1 exited with code 5" in r.stderr, r.stderr
    segv = tmp_path / "segv.py"  # a copy killed by a signal: named, and the exit code 128 + its number
    segv.write_text("import os, signal, time\nif os.environ['RANK'] == '2': os.kill(os.getpid(), signal.SIGSEGV)\n"
                    "time.sleep(60)\n")
    r = subprocess.run([sys.executable, "-m", "lockstep.launch", "-n", "3", str(segv)], timeout=60,
                       capture_output=True, text=True)
    assert r.returncode == 128 + signal.SIGSEGV, r
    assert "lockstep.launch: rank 2 was killed by SIGSEGV; stopping the other 2" in r.stderr, r.stderr
    # a copy that ignores the SIGTERM sent after another failed is killed 10 s later
    # (before, the launcher waited for it: here 120 s, past this call's timeout)
    stubborn = tmp_path / "stubborn.py"
    stubborn.write_text(textwrap.dedent(f"""
        import os, signal, sys, time
        ready = {str(tmp_path / "ready")!r}
        if os.environ["RANK"] == "0":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            open(ready, "w").close()
            time.sleep(120)
        while not os.path.exists(ready):
            time.sleep(0.01)
        sys.exit(5)
    """))
    r = subprocess.run([sys.executable, "-m", "lockstep.launch", "-n", "2", str(stubborn)], timeout=60)
    assert r.returncode == 5
    for n in ("0", "257"):  # refused before any process starts
        r = subprocess.run([sys.executable, "-m", "lockstep.launch", "-n", n, str(bad)], timeout=120,
                           capture_output=True, text=True)
        assert r.returncode == 2 and f"-n must be from 1 to 256 (the most ranks a communicator has), not {n}" \
            in r.stderr, r.stderr


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_stopping_the_launcher_stops_every_copy(tmp_path, signum):
    """a launcher stopped by a signal (a scheduler's SIGTERM, a closed terminal's SIGHUP,
    Ctrl-C) passes it on, so no copy is left running; before, SIGTERM and SIGHUP left
    them all behind"""
    script = tmp_path / "sleeper.py"
    script.write_text("import os, sys, time\n"
                      "open(os.path.join(sys.argv[1], os.environ['RANK']), 'w').write(str(os.getpid()))\n"
                      "time.sleep(120)\n")
    # SIGINT as a terminal leaves it: a shell without job control starts background
    # commands (a CI script's `cmd &`) with it ignored, and Python then raises no
    # KeyboardInterrupt
    launcher = subprocess.Popen([sys.executable, "-m", "lockstep.launch", "-n", "3", str(script), str(tmp_path)],
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        files = [tmp_path / str(r) for r in range(3)]
        while not all(f.exists() and f.read_text() for f in files):
            assert time.monotonic() < deadline, "the copies did not start"
            time.sleep(0.01)
        pids = [int(f.read_text()) for f in files]
        launcher.send_signal(signum)
        assert launcher.wait(timeout=60) == 128 + signum
        assert not [p for p in pids if _alive(p)], "a copy outlived its launcher"
    finally:
        launcher.kill()
        for f in tmp_path.glob("[0-9]"):  # no copy outlives a failed test either
            try:
                with open(f"/proc/{int(f.read_text())}/cmdline", "rb") as c:
                    if str(script).encode() in c.read():
                        os.kill(int(f.read_text()), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def test_from_env_without_a_launcher_says_what_to_do():
    env = {k: v for k, v in os.environ.items()
           if k not in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCKSTEP_RANK", "LOCKSTEP_SIZE")
           and not k.startswith("OMPI_")}
    code = "import lockstep\ntry:\n lockstep.Comm.from_env()\nexcept RuntimeError as e:\n print(e)\n"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60).stdout
    assert "lockstep.launch" in out


def peers_body(rank, size, job):
    with lockstep.Comm(job, rank, size) as c:
        out = {o: c.peers(o) for o in ("linear", "rotated", "random", "topology")}
        with pytest.raises(ValueError, match="order must be one of"):
            c.peers("nearest")
        c.barrier()
    return out


def test_peers_lists_the_send_order():
    for rank, got in run_ranks(peers_body, 3).items():
        others = [r for r in range(3) if r != rank]
        assert got["linear"] == others
        assert got["rotated"] == [(rank + 1) % 3, (rank + 2) % 3]
        assert sorted(got["random"]) == others and sorted(got["topology"]) == others
    with lockstep.Comm(f"py-peers-{os.getpid()}", 0, 1) as c:
        assert c.peers("topology") == []
