"""Runs a function as N ranks in forked processes, each under a deadline; the
watchdog fixture for tests in one process."""
import faulthandler
import json
import multiprocessing as mp
import os
import subprocess
import time
import traceback
import uuid

import pytest

CTX = mp.get_context("fork")


@pytest.fixture
def torch_serial():
    """torch's ops on one thread in this process for the test: its intra-op OpenMP
    threads, once started here, hang the ranks later tests fork (libgomp's team does
    not survive fork), so tests that compute with torch in the pytest process use this"""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def watchdog():
    """A hang (say, a reader thread that never finishes) prints every thread's
    traceback and fails the run after 120 s instead of blocking CI"""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def _child(fn, rank, size, job, q):
    try:
        q.put((rank, "ok", fn(rank, size, job)))
    except BaseException as e:  # report everything, including assertion failures
        q.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run_ranks(fn, size, timeout=120, expect_dead=()):
    """fn(rank, size, job) in `size` processes; returns {rank: result}. A rank that does
    not finish within `timeout` fails the test (the watchdog), as does any exception."""
    job = f"py-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    q = CTX.Queue()
    procs = [CTX.Process(target=_child, args=(fn, r, size, job, q)) for r in range(size)]
    for p in procs:
        p.start()
    results, deadline = {}, time.monotonic() + timeout
    want = size - len(expect_dead)
    while len(results) < want:
        left = deadline - time.monotonic()
        if left <= 0:
            for p in procs:
                p.kill()
            pytest.fail(f"watchdog: ranks {sorted(set(range(size)) - set(results))} did not finish in {timeout} s")
        try:
            rank, status, value = q.get(timeout=min(left, 1.0))
        except Exception:
            continue
        if status != "ok":
            # the others' reports for a moment more: the first to arrive may be only a
            # consequence of another rank's failure (a connection it closed, say)
            failures, until = {rank: value}, time.monotonic() + 3
            while len(results) + len(failures) < size and time.monotonic() < until:
                try:
                    r, st, v = q.get(timeout=0.2)
                except Exception:
                    continue
                if st != "ok":
                    failures[r] = v
            for p in procs:
                p.kill()
            pytest.fail("\n".join(f"rank {r} failed: {v}" for r, v in sorted(failures.items())))
        results[rank] = value
    for p in procs:
        p.join(timeout=10)
    for r in expect_dead:
        assert procs[r].exitcode == -9, f"rank {r} should have been killed, exit code {procs[r].exitcode}"
    assert not [n for n in os.listdir("/dev/shm") if job in n], "segment left in /dev/shm"
    return results


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INFO = os.path.join(os.environ.get("LOCKSTEP_BUILD_DIR", os.path.join(ROOT, "build", "release")), "lockstep-info")


def info(path):
    """lockstep-info --json on path (the C reader's view of a model file)."""
    if not os.path.exists(INFO):
        pytest.skip(f"{INFO} is not built (scripts/test.sh builds it first)")
    r = subprocess.run([INFO, str(path), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def every_numpy_dtype(rng):
    """One small array of every numpy dtype safetensors stores, 0-d and empty included."""
    import numpy as np
    return {
        "bool": rng.integers(0, 2, (3, 2)).astype(np.bool_),
        "u8": np.arange(7, dtype=np.uint8),
        "i8": np.arange(-3, 3, dtype=np.int8),
        "i16": np.arange(6, dtype=np.int16).reshape(2, 3),
        "u16": np.arange(5, dtype=np.uint16),
        "f16": rng.standard_normal(9).astype(np.float16),
        "i32": np.arange(4, dtype=np.int32),
        "u32": np.arange(4, dtype=np.uint32),
        "f32": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "i64": np.arange(3, dtype=np.int64),
        "u64": np.arange(3, dtype=np.uint64),
        "f64": rng.standard_normal(2),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


def compile_capturing(f, *args):
    """torch.compile(f, fullgraph=True) run on args, through a backend that keeps the
    graph: returns (the output, the call_function targets of the first graph as str)"""
    import torch
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    out = torch.compile(f, backend=capture, fullgraph=True)(*args)
    assert graphs, "torch.compile did not call the backend"
    return out, [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
