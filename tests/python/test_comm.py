"""lockstep.Comm from Python: every dtype and op against a numpy reference, identical
bits on every rank, broadcast/allgather, the error classes, the launcher, torch."""
import datetime
import hashlib
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import lockstep
from conftest import compile_capturing, run_ranks

try:
    import torch
except ImportError:  # the torch tests skip
    torch = None


def inputs(dtype, n, rank, case):
    # large: a formula, far cheaper than the generator. Floats within +-69.4 that are not
    # multiples of a power of two, so their f32 sums round; i32 near +-2**31, so sums wrap
    if n > 1 << 20:
        v = (np.arange(n, dtype=np.int32) * (rank + 3) + case) % 1013 - 506
        return (v * 4194301).astype(np.int32) if dtype == np.int32 else (v / 7.3).astype(dtype)
    rng = np.random.default_rng(1000 * case + rank)
    if dtype == np.int32:
        return rng.integers(-(2**31), 2**31 - 1, size=n, dtype=np.int32)
    return rng.uniform(-4, 4, size=n).astype(np.float32).astype(dtype)


def reference(dtype, op, n, size, case):
    """rank-order reduction; f16 accumulated in f32 and rounded once"""
    f = {"sum": lambda a, b: a + b, "max": lambda a, v: np.where(v > a, v, a), "min": lambda a, v: np.where(v < a, v, a)}[op]
    if dtype == np.int32:
        with np.errstate(over="ignore"):
            acc = inputs(dtype, n, 0, case).astype(np.int64)
            for r in range(1, size):
                acc = f(acc, inputs(dtype, n, r, case).astype(np.int64))
                if op == "sum":
                    acc = ((acc + 2**31) % 2**32) - 2**31
        return acc.astype(np.int32)
    acc = inputs(dtype, n, 0, case).astype(np.float32)
    for r in range(1, size):
        acc = f(acc, inputs(dtype, n, r, case).astype(np.float32)).astype(np.float32)
    return acc.astype(dtype)


CASES = [(dt, op, n) for dt in (np.float32, np.float16, np.int32) for op in ("sum", "max", "min")
         for n in (0, 1, 16, 1001, 70001)]


def reduce_cases(c, rank, size, place):
    """Every CASES entry through c.allreduce, in place on place(case, dtype, n) filled with
    this rank's inputs, against the reference; returns the results' bytes."""
    out = []
    for case, (dt, op, n) in enumerate(CASES):
        a = place(case, dt, n)
        a[:] = inputs(dt, n, rank, case)
        assert c.allreduce(a, op) is a
        ref = reference(dt, op, n, size, case)
        assert a.tobytes() == ref.tobytes(), f"{dt.__name__} {op} n={n} differs from the reference"
        out.append(a.tobytes())
    return out


def assert_same_on_every_rank(res):
    for r in range(1, len(res)):
        assert res[r] == res[0], f"rank {r}'s results differ from rank 0's"


def allreduce_body(rank, size, job):
    with lockstep.Comm(job, rank, size, timeout=60) as c:
        assert (c.rank, c.size) == (rank, size)
        out = reduce_cases(c, rank, size, lambda case, dt, n: np.empty(n, dt))
        c.barrier()
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 4, 8])
def test_allreduce_matches_reference_and_is_identical(size):
    assert_same_on_every_rank(run_ranks(allreduce_body, size))


# 64 MiB each: the large path's chunks, f32 sums in rank order, f16 rounded once, i32 wrapping
LARGE_CASES = [(np.float32, "sum", 16 << 20), (np.float16, "sum", 32 << 20), (np.int32, "sum", 16 << 20)]


def large_body(rank, size, job):
    out = []
    with lockstep.Comm(job, rank, size) as c:
        for case, (dt, op, n) in enumerate(LARGE_CASES):
            a = inputs(dt, n, rank, case)
            assert c.allreduce(a, op) is a
            if rank == 0:  # the others' digests must equal this rank's
                ref = reference(dt, op, n, size, case)
                assert np.array_equal(a.view(np.uint8), ref.view(np.uint8)), f"{dt.__name__} {op} n={n} differs"
            out.append(hashlib.sha256(a).hexdigest())  # not the 64 MiB through the queue
    return out


@pytest.mark.parametrize("size", [2, 8])
def test_allreduce_of_64_mib(size):
    assert_same_on_every_rank(run_ranks(large_body, size))


def gather_body(rank, size, job):
    with lockstep.Comm(job, rank, size) as c:
        for order in ("linear", "rotated", "random", "topology"):
            for xfer in ("pull", "push"):
                for n in (1, 100, 40000, 300000):  # both sides of the 256 KiB switch
                    b = np.full(n, 7 if rank == 1 % size else 0, dtype=np.uint8)
                    assert c.broadcast(b, root=1 % size, order=order, xfer=xfer) is b
                    assert (b == 7).all()
                    send = np.full(n, rank + 1, dtype=np.int16)
                    recv = np.zeros(n * size, dtype=np.int16)
                    c.allgather(send, recv, order=order, xfer=xfer)
                    assert (recv.reshape(size, n) == np.arange(1, size + 1, dtype=np.int16)[:, None]).all()
        # without recv: a new array, block r rank r's, shaped (size, *send.shape)
        send = np.arange(6, dtype=np.float64).reshape(2, 3) * (rank + 1)
        got = c.allgather(send)
        assert got.shape == (size, 2, 3) and got.dtype == np.float64
        assert all((got[r] == np.arange(6).reshape(2, 3) * (r + 1)).all() for r in range(size))
        got = c.allgather(np.float32(rank + 0.5))  # a numpy scalar: as a 0-d array
        assert got.dtype == np.float32 and got.tolist() == [r + 0.5 for r in range(size)]
        got = c.allgather(bytes([rank, 9]))  # any other buffer: bytes, (size, nbytes)
        assert got.dtype == np.uint8 and got.tolist() == [[r, 9] for r in range(size)]
        with pytest.raises(TypeError, match="allgather needs a buffer"):
            c.allgather(3.5)  # refused before any call, on every rank
    return True


@pytest.mark.parametrize("size", [2, 3, 4, 8])
def test_broadcast_and_allgather(size):
    run_ranks(gather_body, size)


class _Name(str):
    pass


def spellings_body(rank, size, job):
    """Every way of passing broadcast's, allgather's, alltoall's and reduce_scatter's
    arguments gives the same result: buffers with plain arguments run in C, the rest
    (numpy and str roots, a recv to make, tensors) through Python. In one call the
    ranks spell the root differently, or rank 0 passes tensors, so C and Python paths
    meet and must agree on the codes (an xfer that differs between ranks is a
    MismatchError, an op a wrong result)."""
    root = size - 1
    roots = [root, np.int64(root), str(root), np.int32(root)]
    orders = [{}, {"order": "rotated"}, {"order": _Name("topology"), "xfer": "push"}, {"xfer": _Name("pull")},
              {"xfer": "push"}]
    with lockstep.Comm(job, rank, size) as c:
        for i, (r, kw) in enumerate([(roots[(k + rank) % 4], kw) for k in range(4) for kw in orders]):
            b = np.full(5, i + 10 if rank == root else -1, np.int32)
            out = c.broadcast(b, r, **kw) if i % 2 else c.broadcast(buf=b, root=r, **kw)
            assert out is b and b.tolist() == [i + 10] * 5
            send = np.full(3, rank * 100 + i, np.int16)
            recv = np.zeros(3 * size, np.int16)
            want = [x * 100 + i for x in range(size) for _ in range(3)]
            assert c.allgather(send, recv, **kw) is recv and recv.tolist() == want
            assert c.allgather(send=send, recv=recv, **kw) is recv and recv.tolist() == want
            assert c.allgather(send, **kw).reshape(-1).tolist() == want
            blocks = np.array([rank * 1000 + k * 10 + i for k in range(size)], np.int64)
            got = np.zeros(size, np.int64)
            want = [x * 1000 + rank * 10 + i for x in range(size)]
            assert c.alltoall(blocks, got) is got and got.tolist() == want
            assert c.alltoall(send=blocks).tolist() == want and c.alltoall(blocks, recv=got).tolist() == want
            assert lockstep.Comm.broadcast(c, b, root) is b and lockstep.Comm.alltoall(c, blocks, got) is got
            op = ("sum", _Name("max"), "min")[i % 3]
            every = np.stack([np.arange(2 * size, dtype=np.float32) * (i + 1) + x for x in range(size)])
            want = getattr(every, op)(axis=0)[2 * rank:2 * rank + 2].tolist()
            mine = every[rank].copy()
            if rank == 0 and torch is not None:  # the Python path (tensors), the others C's, in one call
                mine = torch.from_numpy(mine)
            out = [c.reduce_scatter(mine, op=op), c.reduce_scatter(mine, None, op)][i % 2]
            assert out.tolist() == want
            recv = mine[:2].clone() if rank == 0 and torch is not None else np.zeros(2, np.float32)
            assert c.reduce_scatter(send=mine, recv=recv, op=op) is recv and recv.tolist() == want
        import array
        got = array.array("i", [0, 0])  # with recv, any buffer of such items; without, numpy or torch
        assert c.reduce_scatter(array.array("i", range(2 * size)), got) is got
        assert got.tolist() == [size * 2 * rank, size * (2 * rank + 1)]
        with pytest.raises(TypeError, match="numpy array or a torch CPU tensor, not array"):
            c.reduce_scatter(array.array("i", range(2 * size)))
        with pytest.raises(ValueError, match="op must be one of"):  # the op first, with recv or without
            c.reduce_scatter(array.array("i", range(2 * size)), op="avg")
        if torch is not None:  # tensors through the Python path, mixed with arrays
            t = torch.full((4,), float(rank))
            assert c.broadcast(t, root=root) is t and t.tolist() == [float(root)] * 4
            recv = np.zeros(4 * size, np.float32)
            assert c.allgather(torch.full((4,), float(rank)), recv) is recv
            assert recv.tolist() == [float(x) for x in range(size) for _ in range(4)]
        c.close()  # closed: CommError, but arguments that fit no parameter are a TypeError first
        with pytest.raises(lockstep.CommError, match="closed"):
            c.broadcast(np.zeros(2), root=size)
        with pytest.raises(TypeError, match=r"allgather\(\) got an unexpected keyword argument 'recvv'"):
            c.allgather(np.zeros(2), recvv=None)
        with pytest.raises(lockstep.CommError, match="closed"):
            c.broadcast(np.zeros(2))
        with pytest.raises(lockstep.CommError, match="closed"):
            c.alltoall(np.zeros(size), np.zeros(size))
        with pytest.raises(lockstep.CommError, match="closed"):
            c.reduce_scatter(np.zeros(size, np.float32))
    return True


@pytest.mark.parametrize("size", [1, 2, 3])
def test_every_spelling_of_the_arguments_gives_the_same_result(size):
    run_ranks(spellings_body, size)


def test_a_subclass_keeps_its_own_methods():
    """Comm binds its C methods on each instance, but not over a subclass's own."""
    class Logged(lockstep.Comm):
        def broadcast(self, buf, root=0, **kw):
            self.seen.append(root)
            return super().broadcast(buf, root, **kw)

    job = f"py-sub-{os.getpid()}"
    with Logged(job, 0, 1) as c:
        c.seen = []
        a = np.arange(3)
        assert c.broadcast(a, 0, order="random") is a and c.seen == [0]
        assert c.allgather(a).tolist() == [[0, 1, 2]]  # not overridden: the C method
        assert c.allgather == c._c.allgather


def bench_call_body(rank, size, job):
    """The C reference of the benchmark's Python-overhead rows times each call, and
    refuses what it cannot time."""
    with lockstep.Comm(job, rank, size, timeout=60) as c:
        for call in ("allreduce", "broadcast", "allgather", "alltoall", "reduce_scatter"):
            assert c._c.bench_call(call, 16, 10) > 0
        for args in (("gather", 16, 1), ("allreduce", -1, 1), ("allreduce", 16, 0), ("alltoall", 15, 1),
                     ("reduce_scatter", 2**25, 1)):
            with pytest.raises(ValueError, match="bench_call needs a call"):
                c._c.bench_call(*args)
        with pytest.raises(TypeError):
            c._c.bench_call(b"allreduce", 16, 1)
        assert c.allreduce(np.full(2, rank, np.int32)).tolist() == [size * (size - 1) // 2] * 2
    return True


def test_the_benchmarks_c_reference_times_every_call():
    run_ranks(bench_call_body, 2)


def starve_body(rank, size, job):
    """A short broadcast keeps the GIL while it runs, but while it waits for a late
    peer other threads of its process still run: here one that watches for the call
    (busy is true only inside it)."""
    with lockstep.Comm(job, rank, size, timeout=60) as c:
        c.barrier()
        if rank == 1:
            time.sleep(0.5)
            c.broadcast(np.zeros(4, np.float32))
            return True
        seen, stop = threading.Event(), threading.Event()

        def watch():
            while not stop.is_set():
                if c._c.busy:
                    seen.set()

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        c.broadcast(np.ones(4, np.float32))  # rank 0 is the root: waits for rank 1
        stop.set()
        t.join(10)
        assert seen.is_set(), "no other thread ran while the broadcast waited"
    return True


def test_other_threads_run_while_a_short_call_waits():
    run_ranks(starve_body, 2, timeout=60)


def eager_body(rank, size, job):
    with lockstep.Comm(job, rank, size, broadcast_eager_bytes=1024) as c:
        total = np.zeros(1, np.int32)
        for i in range(100):  # past the ring of 16, one root for a run, then others
            root = 0 if i < 50 else i % size
            n = (0, 1, 7, 1024)[i % 4]
            b = np.full(n, i % 251 if rank == root else 255, dtype=np.uint8)
            c.broadcast(b, root=root)
            assert (b == i % 251).all()
            if i % 10 == 9:  # other calls in between settle the eager ones first
                total[0] = i
                c.allreduce(total)
                assert total[0] == i * size
        # a receiver that disagrees fails in the call; the root and the others in it
        # (when they see the failure before they start) or at the next call that waits
        # for everyone
        b = np.zeros(16 + (rank == size - 1), np.uint8)
        if rank == size - 1:
            with pytest.raises(lockstep.MismatchError):
                c.broadcast(b, root=0)
        else:
            try:
                c.broadcast(b, root=0)
            except lockstep.MismatchError:
                pass
        with pytest.raises(lockstep.MismatchError):
            c.barrier()
    return True


@pytest.mark.parametrize("size", [2, 3])
def test_eager_broadcast(size):
    run_ranks(eager_body, size)
    with pytest.raises(ValueError, match="broadcast_eager_bytes must be at most 65536"):
        lockstep.Comm("eager-params", 0, 1, broadcast_eager_bytes=65537)


def reduce_scatter_body(rank, size, job):
    with lockstep.Comm(job, rank, size) as c:
        rng = np.random.default_rng(7)
        for dtype in (np.float32, np.float16, np.int32):
            for op, fold in (("sum", np.add), ("max", np.maximum), ("min", np.minimum)):
                for count in (0, 1, 5, 3000, 300001):  # tiny, small, chunked
                    every = [rng.integers(-50, 50, size * count).astype(dtype) for _ in range(size)]
                    want = every[0].astype(np.float32 if dtype != np.int32 else np.int64)
                    for r in range(1, size):
                        want = fold(want, every[r])
                    want = want.astype(dtype).reshape(size, count)[rank]
                    got = c.reduce_scatter(every[rank], op=op)
                    assert got.dtype == dtype and got.shape == (count,)
                    assert np.array_equal(got, want), (dtype, op, count)
                    mine = every[rank].copy()  # in place: recv is this rank's block
                    view = mine.reshape(size, count)[rank]
                    assert c.reduce_scatter(mine, view, op=op) is view
                    assert np.array_equal(view, want)
        two = np.arange(size * 6, dtype=np.float32).reshape(size * 2, 3)
        assert c.reduce_scatter(two).shape == (2, 3)  # the first dimension split
        with pytest.raises(ValueError, match="equal blocks"):
            c.reduce_scatter(np.zeros(size + 1, np.float32))
        with pytest.raises(ValueError, match="one block of send"):
            c.reduce_scatter(np.zeros(size * 2, np.float32), np.zeros(3, np.float32))
        with pytest.raises(ValueError, match="one block of send"):
            c.reduce_scatter(np.zeros(size * 2, np.float32), np.zeros(2, np.int32))
        with pytest.raises(TypeError, match="float64"):
            c.reduce_scatter(np.zeros(size * 2))
        with pytest.raises(TypeError, match="reduce_scatter's send must be a numpy array or a torch CPU tensor, not list"):
            c.reduce_scatter([1.0] * (size * 2))
        with pytest.raises(TypeError, match="reduce_scatter's recv must be a numpy array or a torch CPU tensor, not "
                                            "bytearray"):
            c.reduce_scatter(np.zeros(size * 2, np.float32), bytearray(8))
        with pytest.raises(ValueError, match="C-contiguous"):
            c.reduce_scatter(np.zeros((size * 2, 2), np.float32)[:, 0])
        ro = np.zeros(2, np.float32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="writable"):
            c.reduce_scatter(np.zeros(size * 2, np.float32), ro)
        with pytest.raises(ValueError, match="overlaps"):
            s = np.zeros(size * 2 + 1, np.float32)
            c.reduce_scatter(s[:size * 2], s[1:3])  # checked in C: every rank refuses alike
        with pytest.raises(ValueError, match="op must be"):
            c.reduce_scatter(np.zeros(size, np.float32), op="prod")
        c.barrier()  # none of that broke the communicator
    return True


def alltoall_body(rank, size, job):
    with lockstep.Comm(job, rank, size, buffer_bytes=4 << 20) as c:
        for n in (0, 1, 5, 40, 3000, 300001):  # tiny, small, chunked (per block)
            send = (np.arange(size * n, dtype=np.int64) % 251 + 7 * rank).astype(np.uint8)
            got = c.alltoall(send)
            assert got.shape == send.shape and got.dtype == np.uint8
            for k in range(size):
                assert np.array_equal(got[k * n:(k + 1) * n], (np.arange(rank * n, (rank + 1) * n) % 251 + 7 * k).astype(np.uint8))
        z = c.buffer(size * 4096 * 2, np.uint8)  # zero-copy: both in the shared buffer
        z[:size * 4096] = rank
        c.alltoall(z[:size * 4096], z[size * 4096:])
        assert np.array_equal(z[size * 4096:].reshape(size, 4096), np.repeat(np.arange(size, dtype=np.uint8), 4096).reshape(size, 4096))
        with pytest.raises(ValueError, match="size equal blocks"):
            c.alltoall(np.zeros(size + 1, np.uint8))
        with pytest.raises(ValueError, match="as many bytes"):
            c.alltoall(np.zeros(size, np.uint8), np.zeros(size + 1, np.uint8))
        b = np.zeros(size * 4, np.uint8)
        with pytest.raises(ValueError, match="must not overlap"):
            c.alltoall(b[:size * 2], b[size:size * 3])
        c.barrier()
    return True


@pytest.mark.parametrize("size", [2, 3])
def test_alltoall(size):
    run_ranks(alltoall_body, size)


@pytest.mark.parametrize("size", [2, 3])
def test_reduce_scatter(size):
    run_ranks(reduce_scatter_body, size)


def zero_copy_body(rank, size, job):
    with lockstep.Comm(job, rank, size, buffer_bytes=3 << 20) as c:
        # in the shared buffer, at an offset that differs per rank and per case
        out = reduce_cases(c, rank, size, lambda case, dt, n: c.buffer(
            n, dt, offset=64 * ((rank * 3 + case) % 5) * np.dtype(dt).itemsize))
        # some ranks in the buffer, some not: the same sums
        for n in (3000, 200001):
            a = c.buffer(n, np.int32) if rank % 2 == 0 else np.empty(n, np.int32)
            a[:] = np.arange(n, dtype=np.int32) * (rank + 1)
            c.allreduce(a)
            assert (a == np.arange(n, dtype=np.int32) * (size * (size + 1) // 2)).all()
        # broadcast and allgather on buffer views (push: zero-copy past small_bytes)
        for xfer in ("pull", "push"):
            for n in (20000, 300000):
                b = c.buffer(n, np.uint8, offset=64 * rank + 1)
                b[:] = np.arange(n) % 251 if rank == size - 1 else 0
                c.broadcast(b, root=size - 1, xfer=xfer)
                assert (b == np.arange(n) % 251).all()
                send, recv = c.buffer(n, np.uint8), c.buffer(n * size, np.uint8, offset=n + rank)
                send[:] = rank + 1
                c.allgather(send, recv, xfer=xfer)
                assert (recv.reshape(size, n) == np.arange(1, size + 1)[:, None]).all()
        kept = c.buffer((2, 3), np.float32)
        kept[:] = 5
    assert kept.sum() == 30  # the view outlives close(): the mapping goes with it
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 4, 8])
def test_zero_copy_allreduce_from_the_shared_buffer(size):
    assert_same_on_every_rank(run_ranks(zero_copy_body, size))


def test_unknown_isa_cap_names_the_variable(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_ISA", "sse9")
    with pytest.raises(ValueError, match=r'LOCKSTEP_ISA must be avx512, avx2, base or unset \(got "sse9"\)'):
        lockstep.Comm(f"py-isa-{os.getpid()}", 0, 1)
    monkeypatch.setenv("LOCKSTEP_ISA", "AVX2")  # any case
    with lockstep.Comm(f"py-isa-{os.getpid()}", 0, 1) as c:
        a = np.arange(5, dtype=np.float32)
        c.allreduce(a)
        assert a.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def _cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def _isa_in_new_process(env_value):
    """lockstep.reduce_isa() in a fresh interpreter (the kernels are chosen once per
    process), with LOCKSTEP_ISA set to env_value (None: unset)"""
    env = dict(os.environ)
    env.pop("LOCKSTEP_ISA", None)
    if env_value is not None:
        env["LOCKSTEP_ISA"] = env_value
    code = textwrap.dedent("""
        import os, lockstep
        try:
            print(lockstep.reduce_isa())
        except ValueError as e:
            print("ValueError:", e)
            os.environ["LOCKSTEP_ISA"] = "base"  # fixed: the next call chooses
            print(lockstep.reduce_isa())
    """)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_reduce_isa_names_the_kernels_and_follows_the_cap():
    flags = _cpu_flags()
    widest = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "base"
    assert _isa_in_new_process(None) == [widest]
    assert _isa_in_new_process("") == [widest]
    assert _isa_in_new_process("base") == ["base"]
    assert _isa_in_new_process("AVX2") == ["avx2" if "avx2" in flags else "base"]
    assert _isa_in_new_process("avx512") == [widest]
    out = _isa_in_new_process("sse9")
    assert out == ['ValueError: environment variable LOCKSTEP_ISA must be avx512, avx2, base or unset (got "sse9")',
                   "base"]


def test_buffer_views_check_their_arguments():
    with lockstep.Comm(f"py-buf-{os.getpid()}", 0, 1, buffer_bytes=8192) as c:
        v = c.buffer((4, 8), "float32", offset=64)
        assert v.shape == (4, 8) and v.dtype == np.float32 and v.flags.writeable and v.flags.c_contiguous
        with pytest.raises(ValueError, match="larger buffer_bytes"):
            c.buffer(2049, np.float32)
        with pytest.raises(ValueError, match="multiple of the item size"):
            c.buffer(4, np.float32, offset=2)
        with pytest.raises(ValueError, match="non-negative"):
            c.buffer((-1,), np.float32)
        assert c.buffer(0, np.float32).size == 0
    with lockstep.Comm(f"py-nobuf-{os.getpid()}", 0, 1) as c:
        with pytest.raises(ValueError, match="buffer_bytes=N"):
            c.buffer(4, np.float32)
    with pytest.raises(ValueError, match="buffer_bytes must be at most"):
        lockstep.Comm("x", 0, 1, buffer_bytes=(1 << 40) + 1)
    with pytest.raises(ValueError, match="must not be negative"):
        lockstep.Comm("x", 0, 1, buffer_bytes=-1)
    shm = os.statvfs("/dev/shm")
    if 0 < shm.f_blocks * shm.f_frsize < 1 << 40:
        with pytest.raises(lockstep.CommError, match="/dev/shm has no room"):
            lockstep.Comm(f"py-full-{os.getpid()}", 0, 1, buffer_bytes=shm.f_blocks * shm.f_frsize)


def test_bad_buffers_raise_what_to_fix():
    with lockstep.Comm(f"py-args-{os.getpid()}", 0, 1) as c:
        with pytest.raises(ValueError, match="contiguous"):
            c.allreduce(np.arange(8, dtype=np.float32)[::2])
        ro = np.arange(4, dtype=np.float32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            c.allreduce(ro)
        with pytest.raises(TypeError, match="float32, float16, bfloat16 and int32"):
            c.allreduce(np.arange(4, dtype=np.float64))
        for dt in (">f4", ">i4", ">f2"):  # the right size, the wrong byte order: not float32 to the user
            with pytest.raises(TypeError, match="big-endian .*newbyteorder"):
                c.allreduce(np.ones(4, dtype=dt))
            with pytest.raises(TypeError, match=f"big-endian {dt} .*astype\\('<{dt[1:]}'\\)"):
                c.reduce_scatter(np.ones(4, dtype=dt))
        with pytest.raises(TypeError, match="buffer"):
            c.allreduce([1.0, 2.0])
        with pytest.raises(ValueError, match="op must be one of"):
            c.allreduce(np.zeros(4, np.float32), op="mean")
        with pytest.raises(ValueError, match="op must be one of"):
            c.allreduce(np.zeros(4, np.float32), 0)  # names, not codes
        with pytest.raises(TypeError, match="at most an op"):
            c.allreduce(np.zeros(4, np.float32), "sum", "max")
        with pytest.raises(TypeError, match="at most an op"):
            c.allreduce()
        with pytest.raises(TypeError, match="unexpected or repeated argument 'ops'"):
            c.allreduce(np.zeros(4, np.float32), ops="sum")
        with pytest.raises(TypeError, match="unexpected or repeated argument 'op'"):
            c.allreduce(np.zeros(4, np.float32), "sum", op="max")
        a = np.array([3, -1], np.int32)  # the bound C method and the class's, every spelling
        assert c.allreduce(a) is a and lockstep.Comm.allreduce(c, a, "max") is a
        assert c.allreduce(buf=a, op="min") is a and a.tolist() == [3, -1]
        with pytest.raises(ValueError, match="order must be one of"):
            c.broadcast(np.zeros(4, np.uint8), order="sideways")
        with pytest.raises(ValueError, match="size \\* len"):
            c.allgather(np.zeros(4, np.uint8), np.zeros(3, np.uint8))
        with pytest.raises(ValueError, match="root must be a rank from 0 to 0, not 5"):
            c.broadcast(np.zeros(4, np.uint8), root=5)
        with pytest.raises(ValueError, match="root must be a rank from 0 to 0, not -1"):
            c.broadcast(np.zeros(4, np.uint8), root=-1)
        with pytest.raises(ValueError, match="allgather's send must be a C-contiguous buffer"):
            c.allgather(np.zeros((4, 4), np.uint8)[:, ::2], np.zeros(8, np.uint8))
    with pytest.raises(ValueError, match="job must be 1 to 200 characters"):
        lockstep.Comm("", 0, 1)
    with pytest.raises(ValueError, match="job must be 1 to 200 characters"):
        lockstep.Comm("x" * 201, 0, 1)
    with pytest.raises(ValueError, match="rank"):
        lockstep.Comm("x", 3, 2)
    with pytest.raises(ValueError, match="timeout"):
        lockstep.Comm("x", 0, 1, timeout=-1)
    for bad in (0, float("nan"), datetime.timedelta(seconds=-1)):
        with pytest.raises(ValueError, match="timeout must be positive seconds, or None for no deadline"):
            lockstep.Comm("x", 0, 1, timeout=bad)
    for bad in ("5", True, [5]):
        with pytest.raises(TypeError, match="timeout must be seconds .* or None for no deadline, not"):
            lockstep.Comm("x", 0, 1, timeout=bad)
    # integers: ints, numpy ints and strings of them; no float cut, no bool, and a
    # value past the C parameter's range named rather than OverflowError
    with lockstep.Comm(f"py-intargs-{os.getpid()}", np.int64(0), "1", cpu_sharers=np.int32(0)) as c:
        assert (c.rank, c.size) == (0, 1)
        with pytest.raises(TypeError, match="root must be an integer, not float 0.0"):
            c.broadcast(np.zeros(4, np.uint8), root=0.0)
        with pytest.raises(ValueError, match="root must be a rank from 0 to 0, not 1180591620717411303424"):
            c.broadcast(np.zeros(4, np.uint8), root=2**70)
    for kw, exc, msg in ((dict(rank=0.5), TypeError, "rank must be an integer, not float 0.5"),
                         (dict(rank=True), TypeError, "rank must be an integer, not a bool"),
                         (dict(size="two"), ValueError, "size must be an integer, not 'two'"),
                         (dict(size=2**40), ValueError, "size is out of range: 1099511627776"),
                         (dict(small_bytes=2**70), ValueError, "small_bytes is out of range"),
                         (dict(buffer_bytes=1024.0), TypeError, "buffer_bytes must be an integer, not float"),
                         (dict(cpu_sharers=2**40), ValueError, "cpu_sharers is out of range"),
                         (dict(job=None), TypeError, "job must be a name .a str, or an int such as a port., not "
                                                     "NoneType"),  # (os.environ.get of an unset variable)
                         (dict(job=b"x"), TypeError, "not bytes"), (dict(job=True), TypeError, "not bool")):
        args = dict(job="x", rank=0, size=1) | kw
        with pytest.raises(exc, match=msg):
            lockstep.Comm(**args)
    # what the C layer is given: None and infinity no deadline, past 49.7 days its
    # longest, under 1 ms 1 ms; a wrap of the uint32 would give a short or no deadline
    ms = lockstep._timeout_ms
    assert [ms(None), ms(float("inf")), ms(2.5), ms(np.float32(2)), ms(1e-6), ms(1e12),
            ms(datetime.timedelta(minutes=30)), ms(datetime.timedelta(days=365))] == \
        [0, 0, 2500, 2000, 1, 2**32 - 1, 1800000, 2**32 - 1]
    with lockstep.Comm(f"py-longtimeout-{os.getpid()}", 0, 1, timeout=datetime.timedelta(days=365)) as c:
        assert c.size == 1
    # the C layer's raw argument is a uint32 count of ms: past it, an error, not a wrap
    for bad in (-1, 2**32, 2**70):
        with pytest.raises((ValueError, OverflowError),
                           match="timeout_ms must be 0 \\(no deadline\\) to 4294967295|int too big to convert"):
            lockstep._lockstep.Comm("x", 0, 1, bad)
    with pytest.raises(ValueError, match="small_bytes must be a multiple of 64"):
        lockstep.Comm("x", 0, 1, small_bytes=1000)
    with pytest.raises(ValueError, match="chunk_bytes must be"):
        lockstep.Comm("x", 0, 1, chunk_bytes=1024)
    with pytest.raises(ValueError, match="allreduce_small_bytes must be 0 \\(automatic\\) or from 256"):
        lockstep.Comm("x", 0, 1, allreduce_small_bytes=100)
    with pytest.raises(ValueError, match="cpu_sharers must be 0 \\(size\\) or at least size \\(got 1, size 2\\)"):
        lockstep.Comm("x", 0, 2, cpu_sharers=1)
    with lockstep.Comm(f"py-sharers-{os.getpid()}", 0, 1, cpu_sharers=64) as c:
        a = np.arange(5, dtype=np.float32)
        c.allreduce(a)
        assert a.tolist() == [0, 1, 2, 3, 4]
    job = f"py-closed-{os.getpid()}"
    c = lockstep.Comm(job, 0, 1)
    assert not c.closed and repr(c) == f"Comm(job={job!r}, rank=0, size=1)"
    c.close()
    assert c.closed and repr(c) == f"Comm(job={job!r}, rank=0, size=1, closed)"
    c.close()  # a second close does nothing
    with pytest.raises(lockstep.CommError, match="closed"):
        c.barrier()


def peer_death_body(rank, size, job):
    with lockstep.Comm(job, rank, size, timeout=30) as c:
        a = np.zeros(1000, np.float32)
        for i in range(1_000_000):
            if rank == 2 and i == 20:
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                c.allreduce(a)
            except lockstep.PeerDiedError:
                return i
    raise AssertionError("the peer's death was never noticed")


def test_peer_death_raises_on_the_others():
    res = run_ranks(peer_death_body, 3, expect_dead=(2,))
    assert set(res) == {0, 1}


def mismatch_body(rank, size, job):
    with lockstep.Comm(job, rank, size, timeout=30) as c:
        with pytest.raises(lockstep.MismatchError):
            c.allreduce(np.zeros(10 + rank, np.float32))
        with pytest.raises(lockstep.MismatchError):  # and it stays broken
            c.barrier()
    return True


def test_mismatch_raises_on_every_rank():
    run_ranks(mismatch_body, 2)


def tag_body(rank, size, job):
    """Comm.tag: a tag shared by both ranks carries over calls; bad tags raise
    ValueError or TypeError and change nothing; calls alike but for the tag raise
    MismatchError on every rank."""
    with lockstep.Comm(job, rank, size, timeout=20) as c:
        c.tag(7)
        x = np.full(4, rank + 1, np.int32)
        c.allreduce(x)
        c.allreduce(x)  # still 7 on both
        assert x.tolist() == [6] * 4
        for bad, err in ((256, ValueError), (-1, ValueError), (2**40, ValueError), (1.0, TypeError), (None, TypeError)):
            with pytest.raises(err, match="tag"):
                c.tag(bad)
        c.barrier()  # both still on 7
        c.tag(1 + rank)
        with pytest.raises(lockstep.MismatchError):
            c.allreduce(np.ones(4, np.float32))
    return True


def test_tags_tell_calls_apart():
    assert run_ranks(tag_body, 2, timeout=60) == {0: True, 1: True}


def kernel_copy_body(rank, size, job):
    """Rank 0's LOCKSTEP_KERNEL_COPY holds for every rank; a large allreduce by either
    way gives the same sums."""
    os.environ["LOCKSTEP_KERNEL_COPY"] = ("slow", "fast")[rank]
    os.environ.pop("LOCKSTEP_NO_CMA", None)
    with lockstep.Comm(job, rank, size, timeout=20) as c:
        got = c.kernel_copy
        x = np.full(1 << 18, rank + 1, np.float32)  # 1 MiB
        c.allreduce(x)
        assert (x == 3).all()
    return got


def test_kernel_copy_is_rank_0s(monkeypatch):
    assert run_ranks(kernel_copy_body, 2, timeout=60) == {0: "slow", 1: "slow"}
    monkeypatch.setenv("LOCKSTEP_KERNEL_COPY", "medium")
    with pytest.raises(ValueError, match=r'LOCKSTEP_KERNEL_COPY must be fast, slow, auto or unset \(got "medium"\)'):
        lockstep.Comm(f"py-kc-{os.getpid()}", 0, 1)
    monkeypatch.setenv("LOCKSTEP_KERNEL_COPY", "auto")
    monkeypatch.delenv("LOCKSTEP_NO_CMA", raising=False)
    with lockstep.Comm(f"py-kc-{os.getpid()}", 0, 1) as c:
        assert c.kernel_copy == "fast"  # alone: nothing to measure
    monkeypatch.setenv("LOCKSTEP_NO_CMA", "1")
    with lockstep.Comm(f"py-kc-{os.getpid()}", 0, 1) as c:
        assert c.kernel_copy == "off"


def refuse_body(rank, size, job):
    """Rank 1 passes a bad argument to each kind of call, the others good ones: rank 1
    raises what to fix, the others PeerArgumentError at once (the deadline, 60 s, is
    past the watchdog's 30), and the communicator goes on."""
    try:
        import torch
    except ImportError:
        torch = None
    bad = rank == 1
    f32 = np.ones(4, np.float32)
    calls = [  # (rank 1's call, the others' call, the error rank 1 gets)
        (lambda c: c.allreduce(np.ones(8, np.float32)[::2]), lambda c: c.allreduce(f32), ValueError),
        (lambda c: c.allreduce(np.ones(4)), lambda c: c.allreduce(f32), TypeError),
        (lambda c: c.allreduce(f32, op="avg"), lambda c: c.allreduce(f32), ValueError),
        (lambda c: c.broadcast(f32, root=size), lambda c: c.broadcast(f32, root=0), ValueError),
        (lambda c: c.allgather(f32, np.zeros(3, np.float32)), lambda c: c.allgather(f32), ValueError),
        (lambda c: c.alltoall(np.zeros(size * 4 + 1, np.uint8)), lambda c: c.alltoall(np.zeros(size * 4, np.uint8)),
         ValueError),
        (lambda c: c.reduce_scatter(np.ones(size * 2, np.float32), np.zeros(2, np.int32)),
         lambda c: c.reduce_scatter(np.ones(size * 2, np.float32)), ValueError),
        (lambda c: c.allreduce(f32, "sum", 3), lambda c: c.barrier(), TypeError),  # the others in a barrier
        # arguments that fit no parameter: Python's own TypeError, and the call refused
        (lambda c: c.broadcast(f32, rot=0), lambda c: c.broadcast(f32), TypeError),
        (lambda c: c.broadcast(buf=f32, root=0, xfer="pull", order="linear", extra=1),
         lambda c: c.broadcast(f32), TypeError),
        (lambda c: c.allgather(f32, None, "linear", "pull", 5), lambda c: c.allgather(f32), TypeError),
        (lambda c: c.allgather(f32, send=f32), lambda c: c.allgather(f32), TypeError),
        (lambda c: c.alltoall(), lambda c: c.alltoall(np.zeros(size * 4, np.uint8)), TypeError),
        (lambda c: c.alltoall(np.zeros(size * 4, np.uint8), order="linear"),
         lambda c: c.alltoall(np.zeros(size * 4, np.uint8)), TypeError),
        (lambda c: c.reduce_scatter(np.ones(size * 2, np.float32), recvv=None),
         lambda c: c.reduce_scatter(np.ones(size * 2, np.float32)), TypeError),
        (lambda c: c.reduce_scatter(np.ones(size * 2, np.float32), np.zeros(2, np.float16)),
         lambda c: c.reduce_scatter(np.ones(size * 2, np.float32), np.zeros(2, np.float32)), ValueError),
        # Python objects: their bytes are this process's pointers (and references not taken)
        (lambda c: c.broadcast(np.array([1, "a"], dtype=object)), lambda c: c.broadcast(np.zeros(2, np.int64)),
         TypeError),
        (lambda c: c.allgather(np.array([None], dtype=object)), lambda c: c.allgather(np.zeros(1, np.int64)),
         TypeError),
        (lambda c: c.alltoall(np.zeros(size, [("b", "i4"), ("x", "O")])),
         lambda c: c.alltoall(np.zeros(size, [("b", "i4"), ("x", "i8")])), TypeError),
        (lambda c: c.allgather(np.zeros(1, np.int64), np.zeros(size, object)),
         lambda c: c.allgather(np.zeros(1, np.int64)), TypeError),
        (lambda c: c.allreduce(np.array([1.0], dtype=object)), lambda c: c.allreduce(f32), TypeError),
    ]
    if torch is not None:
        t4 = torch.ones(4)
        calls += [
            (lambda c: c.allreduce(torch.ones(4, dtype=torch.float64)), lambda c: c.allreduce(t4), TypeError),
            # contiguous to torch, but without a data pointer: refused, not torch's RuntimeError
            (lambda c: c.allreduce(torch.ones(2, 2).to_mkldnn()), lambda c: c.allreduce(t4), ValueError),
            (lambda c: c.broadcast(torch.ones(4, 2)[:, 0]), lambda c: c.broadcast(t4), ValueError),
            # plain tensors, taken in C, refused there
            (lambda c: c.allgather(t4, torch.zeros(size * 4 - 1)), lambda c: c.allgather(t4, torch.zeros(size, 4)),
             ValueError),
            (lambda c: c.alltoall(torch.zeros(size * 2), torch.zeros(size * 2 + 1)),
             lambda c: c.alltoall(torch.zeros(size * 2), torch.zeros(size * 2)), ValueError),
            (lambda c: c.reduce_scatter(torch.ones(size * 2), torch.zeros(2, dtype=torch.int32)),
             lambda c: c.reduce_scatter(torch.ones(size * 2), torch.zeros(2)), ValueError),
        ]
    with lockstep.Comm(job, rank, size, timeout=60) as c:
        for mine, theirs, err in calls:
            with pytest.raises(err if bad else lockstep.PeerArgumentError):
                (mine if bad else theirs)(c)
        got = c.allreduce(np.full(3, rank, np.int32))
        assert got.tolist() == [size * (size - 1) // 2] * 3
    return len(calls)


@pytest.mark.parametrize("size", [2, 3])
def test_bad_arguments_on_one_rank_end_the_call_on_every_rank(size):
    res = run_ranks(refuse_body, size, timeout=30)
    assert len(set(res.values())) == 1


def fork_body(rank, size, job):
    """rank 0 forks; the child's copy of the Comm refuses every call (its rank is the
    parent's) and the child makes a Comm of its own; the parent's job goes on"""
    with lockstep.Comm(job, rank, size, timeout=30) as c:
        x = np.full(4, rank + 1, np.int32)
        c.allreduce(x)
        assert x.tolist() == [3] * 4
        if rank == 0:
            child = os.fork()
            if child == 0:
                status = 3
                try:
                    signal.alarm(30)  # the child's watchdog
                    z = np.full(4, 100, np.int32)
                    for call in (lambda: c.allreduce(z), c.barrier, lambda: c.broadcast(z, 0),
                                 lambda: c.allgather(z)):
                        with pytest.raises(lockstep.CommError, match="created before os.fork"):
                            call()
                    assert z.tolist() == [100] * 4
                    with lockstep.Comm(job + "-child", 0, 1) as own:
                        own.allreduce(z)
                    status = 0
                finally:
                    os._exit(status)
            _, st = os.waitpid(child, 0)
            assert os.waitstatus_to_exitcode(st) == 0, "the child's checks failed"
        x[:] = 10 if rank == 0 else 2
        c.allreduce(x)
        assert x.tolist() == [12, 12, 12, 12]  # 10 + 2: nothing of the child's
    return True


def test_a_forked_child_cannot_act_as_its_parents_rank():
    run_ranks(fork_body, 2)


def test_a_comm_cannot_be_pickled_or_copied():
    import copy
    import pickle
    with lockstep.Comm(f"py-pickle-{os.getpid()}", 0, 1) as c:
        for attempt in (lambda: pickle.dumps(c), lambda: copy.copy(c), lambda: copy.deepcopy(c)):
            with pytest.raises(TypeError, match="belongs to the process that created it.*create one in each "
                                                "process, e.g. with lockstep.Comm.from_env"):
                attempt()
        c.barrier()  # still usable


def late_body(rank, size, job):
    with lockstep.Comm(job, rank, size, timeout=0.3) as c:
        if rank == 1:
            import time
            time.sleep(1.0)
        with pytest.raises(lockstep.CommTimeoutError) as e:
            c.allreduce(np.zeros(4, np.float32))
        assert isinstance(e.value, TimeoutError) and isinstance(e.value, lockstep.CommError)
    return True


def test_deadline_raises_timeout():
    run_ranks(late_body, 2)


def interrupt_body(rank, size, job):
    import tempfile
    import threading
    import time
    marker = os.path.join(tempfile.gettempdir(), job + ".interrupted")
    with lockstep.Comm(job, rank, size, timeout=60) as c:
        if rank == 0:
            # Ctrl-C while rank 1 is not calling: without the cancel hook this waits out the
            # 60 s deadline (CommTimeoutError), and the signalling thread cannot even run,
            # since a 16-element call keeps the GIL
            signal.signal(signal.SIGINT, signal.default_int_handler)
            threading.Thread(target=lambda: (time.sleep(0.2), os.kill(os.getpid(), signal.SIGINT)),
                             daemon=True).start()
            with pytest.raises(KeyboardInterrupt):
                c.allreduce(np.zeros(16, np.float32))
            open(marker, "w").close()
            with pytest.raises(lockstep.CommCancelledError):  # broken from now on
                c.barrier()
        else:
            for _ in range(6000):
                if os.path.exists(marker):
                    break
                time.sleep(0.01)
            os.unlink(marker)
            with pytest.raises(lockstep.CommCancelledError) as e:
                c.allreduce(np.zeros(16, np.float32))
            assert "abandoned" in str(e.value) and isinstance(e.value, lockstep.CommError)
    return True


def test_ctrl_c_interrupts_a_waiting_call():
    run_ranks(interrupt_body, 2)


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
    launcher = subprocess.Popen([sys.executable, "-m", "lockstep.launch", "-n", "3", str(script), str(tmp_path)])
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


def test_joining_errors_say_what_to_fix():
    """A rank whose peers never come, a rank given twice and a name a live job holds:
    each a specific exception naming the job and the fix (ranks as threads: creating a
    Comm releases the GIL)."""
    job = f"py-join-{os.getpid()}"
    with pytest.raises(lockstep.CommTimeoutError, match=f"cannot join the job '{job}-late': not all of its 2 "
                                                        "ranks came within the timeout \\(200 ms\\)"):
        lockstep.Comm(f"{job}-late", 1, 2, timeout=0.2)
    made, refused = {}, []
    second = threading.Event()  # a second claim on rank 1 was refused

    def join(name, rank):
        try:
            made[name] = lockstep.Comm(job, rank, 3, timeout=30)
        except lockstep.CommError as e:
            refused.append((name, str(e)))
            second.set()

    # two threads as rank 1: whichever claims it second is refused, and rank 2 comes
    # only after that, so the job is still joining when it happens
    first = [threading.Thread(target=join, args=(n, r), daemon=True) for n, r in (("0", 0), ("1a", 1), ("1b", 1))]
    for t in first:
        t.start()
    assert second.wait(30)
    assert len(refused) == 1 and refused[0][0] in ("1a", "1b"), refused
    assert refused[0][1] == (f"cannot join the job '{job}' as rank 1: another process already holds that rank "
                             "(the same rank given twice, or two jobs started under one name)")
    with pytest.raises(lockstep.CommError, match=f"cannot create the job '{job}': a live job of that name "
                                                 "already runs on this machine"):
        lockstep.Comm(job, 0, 3, timeout=0.2)
    join("2", 2)
    for t in first:
        t.join(30)
    assert len(made) == 3 and len(refused) == 1, (made, refused)
    sums = {}

    def reduce(name):
        c = made[name]
        a = np.array([1 << (4 * c.rank)], np.int32)
        c.allreduce(a)
        sums[name] = int(a[0])

    workers = [threading.Thread(target=reduce, args=(n,), daemon=True) for n in made]
    for t in workers:
        t.start()
    for t in workers:
        t.join(30)
    assert list(sums.values()) == [0x111] * 3
    for c in made.values():
        c.close()
    # a rank 0 of another lockstep build: its header's protocol byte differs (0, which
    # no build uses; the C test takes this build's plus one)
    import struct
    path = f"/dev/shm/lockstep-{job}-old"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
        os.write(fd, struct.pack("<IIiI", 0x6c736300, 2, os.getpid(), ns) + bytes(4080))
        with pytest.raises(lockstep.CommError, match=f"cannot join the job '{job}-old': its rank 0 runs another "
                                                     "version of lockstep, whose shared memory this one cannot "
                                                     "read; run every rank with the same build"):
            lockstep.Comm(f"{job}-old", 1, 2, timeout=20)
    finally:
        os.close(fd)
        os.unlink(path)


def test_a_second_thread_in_a_call_is_refused_and_close_waits_for_the_first():
    job = f"py-busy-{os.getpid()}"
    made = {}
    joins = [threading.Thread(target=lambda r=r: made.setdefault(r, lockstep.Comm(job, r, 2, timeout=30)),
                              daemon=True) for r in (0, 1)]
    for t in joins:
        t.start()
    for t in joins:
        t.join(30)
    c0, c1 = made[0], made[1]
    assert not c0._c.busy
    out = []
    first = threading.Thread(target=lambda: out.append(c0.barrier()), daemon=True)
    first.start()  # waits for rank 1 in the barrier
    deadline = time.monotonic() + 20
    while not c0._c.busy:
        assert time.monotonic() < deadline, "the first thread never entered its barrier"
        time.sleep(0.001)
    with pytest.raises(RuntimeError, match="allreduce: another thread is in a call on this Comm; a communicator "
                                           "takes one call at a time"):
        c0.allreduce(np.ones(4, np.float32))
    with pytest.raises(RuntimeError, match="barrier: another thread"):
        c0.barrier()
    c0.close()  # the first thread's barrier goes on; the communicator is freed when it leaves
    assert c0.closed
    c1.barrier()  # rank 1 comes: the first thread's barrier ends well
    first.join(30)
    assert out == [None] and not c0._c.busy
    with pytest.raises(lockstep.CommError, match="closed"):
        c0.barrier()
    c1.close()


def test_from_env_with_a_bad_variable_names_it(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCKSTEP_RANK", "LOCKSTEP_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "abc")
    msg = r"environment variable {} is missing or not valid \(a size is 1 to 256, a rank 0 to size - 1\)"
    with pytest.raises(ValueError, match=msg.format("LOCAL_RANK")):
        lockstep.Comm.from_env()
    monkeypatch.setenv("LOCAL_RANK", "2")  # not below the size
    with pytest.raises(ValueError, match=msg.format("LOCAL_RANK")):
        lockstep.Comm.from_env()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "0")
    with pytest.raises(ValueError, match=msg.format("LOCAL_WORLD_SIZE")):
        lockstep.Comm.from_env()


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_tensors_including_bfloat16():
    def body(rank, size, job):
        with lockstep.Comm(job, rank, size) as c:
            for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
                t = torch.full((33,), rank + 1, dtype=dt)
                c.allreduce(t)
                assert (t == size * (size + 1) // 2).all(), (dt, t)
            with pytest.raises(ValueError, match="contiguous"):
                c.allreduce(torch.zeros(4, 4)[:, 0])
            with pytest.raises(TypeError, match="float64"):
                c.allreduce(torch.zeros(4, dtype=torch.float64))
            # one element (or none) at a stride other than 1, as x[:, 0] of a one-row x:
            # contiguous to torch, and moved as such, in every dtype
            for dt in (torch.bfloat16, torch.float64, torch.int64):
                row = torch.full((1, 3), 10 * rank + 1, dtype=dt)
                assert row[:, 1].is_contiguous() and row[:, 1].stride() == (3,)
                c.broadcast(row[:, 1], root=1)
                assert row.tolist() == [[10 * rank + 1, 11, 10 * rank + 1]], (dt, row)
                assert c.allgather(row[:, 2]).flatten().tolist() == [10 * r + 1 for r in range(size)]
                assert c.allgather(torch.zeros(0, 3, dtype=dt)[:, 1]).shape == (size, 0)
            # tensors go to C by address, other buffers as such, and the two mix
            mine = torch.full((2,), rank + 1, dtype=torch.int32)
            into = np.zeros((size, 2), np.int32)
            assert c.allgather(mine, into) is into and into.tolist() == [[r + 1] * 2 for r in range(size)]
            back = torch.zeros(size, 2, dtype=torch.int32)
            assert c.allgather(into[rank].copy(), back) is back and torch.equal(back, torch.tensor(into))
            blocks = np.arange(size, dtype=np.int16) + 10 * rank  # block k to rank k
            got = torch.zeros(size, dtype=torch.int16)
            assert c.alltoall(blocks, got) is got and got.tolist() == [10 * k + rank for k in range(size)]
            meta = torch.empty(size * 2, device="meta")  # on no device lockstep can read
            for call in (c.allreduce, c.broadcast, c.allgather, c.reduce_scatter, c.alltoall):
                with pytest.raises(ValueError, match="lockstep needs CPU tensors; this one is on meta .use .cpu"):
                    call(meta)
            b = torch.full((9,), 5 if rank == 0 else 0, dtype=torch.bfloat16)
            c.broadcast(b, root=0)
            assert (b == 5).all()
            g = c.allgather(torch.full((2, 2), rank, dtype=torch.bfloat16))
            assert isinstance(g, torch.Tensor) and g.dtype == torch.bfloat16 and g.shape == (size, 2, 2)
            assert g.flatten().tolist() == [float(r) for r in range(size) for _ in range(4)]
            part = c.reduce_scatter(torch.arange(size * 4, dtype=torch.bfloat16).reshape(size * 2, 2) + rank)
            assert part.dtype == torch.bfloat16 and part.shape == (2, 2)
            want = torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) * size + size * (size - 1) // 2
            assert torch.equal(part.flatten(), want.to(torch.bfloat16))

            class Mine(torch.Tensor):  # a subclass that keeps its data, as nn.Parameter
                pass
            for t in (torch.full((3,), rank + 1.0).as_subclass(Mine), torch.nn.Parameter(torch.full((3,), rank + 1.0))):
                with torch.no_grad():
                    assert c.allreduce(t) is t and t.tolist() == [3.0] * 3, type(t)
                    assert c.broadcast(t, 1) is t and t.tolist() == [3.0] * 3
                    assert c.allgather(t).tolist() == [[3.0] * 3] * size
            sparse = torch.ones(size).to_sparse()
            for call in (c.allreduce, c.broadcast, c.allgather, c.reduce_scatter):
                with pytest.raises(ValueError, match="layout is torch.sparse_coo .use .to_dense"):
                    call(sparse)
            from torch._subclasses.fake_tensor import FakeTensorMode
            with FakeTensorMode():
                fake = torch.ones(size)  # a wrapper: no data of its own
            for call in (c.allreduce, c.broadcast, c.allgather, c.reduce_scatter, c.alltoall):
                with pytest.raises(TypeError, match="FakeTensor handles its own operations"):
                    call(fake)
        return True
    run_ranks(body, 2)


def tensor_routes_body(rank, size, job):
    """Which calls reach the Python paths: none for plain CPU tensors (after the first
    tensor, which tells the extension about torch) and numpy arrays, with a recv given
    or not; each for the others."""
    from lockstep import _lockstep as ext
    names = ("allreduce", "broadcast", "allgather", "alltoall", "reduce_scatter")
    paths = (lockstep._allreduce_other, lockstep._broadcast, lockstep._allgather, lockstep._alltoall,
             lockstep._reduce_scatter)
    seen = []

    def spy(name, fn):
        def through(*args, **kw):
            seen.append(name)
            return fn(*args, **kw)
        return through
    ext._set_python_paths(*(spy(n, f) for n, f in zip(names, paths)))
    try:
        with lockstep.Comm(job, rank, size) as c:
            c.allreduce(torch.ones(1))
            seen.clear()
            total = size * (size + 1) // 2
            for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
                t = torch.full((5, 3), rank + 1, dtype=dt)
                version = t._version
                assert c.allreduce(t, op="sum") is t and (t == total).all(), dt
                assert t._version == version  # not in a graph: left alone, as in Python
                assert c.allreduce(t.fill_(rank), "max") is t and (t == size - 1).all(), dt
                part = torch.zeros(3, dtype=dt)
                assert c.reduce_scatter(torch.full((size, 3), rank + 1, dtype=dt), part) is part
                assert (part == total).all(), dt
            b = torch.full((7,), float(rank))
            assert c.broadcast(b, size - 1) is b and (b == size - 1).all()
            with torch.inference_mode():
                b = torch.full((7,), float(rank), dtype=torch.float64)
                assert c.broadcast(b, root=0, order="rotated", xfer="push") is b and (b == 0).all()
            grad = torch.full((2,), float(rank), requires_grad=True)  # only read: taken in C
            into = torch.zeros(size, 2)
            assert c.allgather(grad, into) is into and into.tolist() == [[float(r)] * 2 for r in range(size)]
            mixed = np.zeros((size, 2), np.float32)
            assert c.allgather(grad.detach(), mixed) is mixed and mixed.tolist() == into.tolist()
            got = torch.zeros(size, dtype=torch.int64)
            assert c.alltoall(torch.arange(size) + 10 * rank, got) is got
            assert got.tolist() == [10 * k + rank for k in range(size)]
            # a recv to make, for a plain tensor or a numpy array: made in C, as the
            # Python path makes it (shape, dtype, type)
            for x in (torch.full((2, 3), rank + 1, dtype=torch.bfloat16), np.full((2, 3), rank + 1, np.float16)):
                kind = type(x)
                g = c.allgather(x)
                assert type(g) is kind and g.dtype == x.dtype and tuple(g.shape) == (size, 2, 3)
                assert g.tolist() == [[[r + 1] * 3] * 2 for r in range(size)]
                blocks = x[:1].repeat(size, 0) if kind is np.ndarray else x[:1].repeat(size, 1)  # (size, 3)
                got = c.alltoall(blocks, None)
                assert type(got) is kind and tuple(got.shape) == (size, 3) and got.dtype == x.dtype
                assert got.tolist() == [[r + 1] * 3 for r in range(size)]
                # the first dimension divided when it divides, else 1-D (not at 1 rank)
                for shape, want in (((size * 2, 3), (2, 3)), ((size + 1, size), (size + 1,)), ((), (1,))):
                    if size == 1 and len(shape) == 2 and shape[1] == 1:
                        continue
                    if size > 1 and not shape:  # one element: one rank's part only at 1 rank
                        continue
                    send = (torch.full(shape, 1.0) if kind is torch.Tensor else np.full(shape, 1.0, np.float32))
                    part = c.reduce_scatter(send, op="max")
                    assert type(part) is kind and tuple(part.shape) == want and (part == 1).all()
            assert seen == []
            # the rest goes through Python, with the same results
            p = torch.nn.Parameter(torch.full((3,), rank + 1.0), requires_grad=False)  # a subclass
            assert c.allreduce(p) is p and p.tolist() == [float(total)] * 3
            w = torch.full((3,), rank + 1.0, requires_grad=True)
            with torch.no_grad():
                version = w._version
                assert c.broadcast(w, 0) is w and w.tolist() == [1.0] * 3
                assert w._version > version  # written in a graph: bumped, as torch's in-place ops do
            g = c.allgather(p)  # a recv for a subclass
            assert type(g) is torch.Tensor and g.tolist() == [[float(total)] * 3] * size
            assert c.allgather(np.float32(rank)).tolist() == list(range(size))  # a numpy scalar
            assert c.alltoall(bytes(size * 2)).tolist() == [0] * (size * 2)  # another buffer: bytes of uint8
            with pytest.raises(ValueError, match="contiguous"):
                c.allreduce(torch.ones(4, 2)[:, 0])
            assert seen == ["allreduce", "broadcast", "allgather", "allgather", "allgather", "alltoall", "allreduce"]
    finally:
        ext._set_python_paths(*paths)
    return True


@pytest.mark.skipif(torch is None, reason="torch is not installed")
@pytest.mark.parametrize("size", [1, 3])
def test_plain_tensors_and_new_recvs_run_in_c_and_the_rest_in_python(size):
    run_ranks(tensor_routes_body, size)


def try_allreduce_body(rank, size, job):
    """_c.try_allreduce (the torch.distributed back end's common case): the call on what
    allreduce takes as it is, None and nothing done (nothing refused) for the rest."""
    total = size * (size + 1) // 2
    with lockstep.Comm(job, rank, size) as c:
        a = np.full(5, rank + 1, np.int32)
        assert c._c.try_allreduce(a, 0) is a and a.tolist() == [total] * 5
        assert c._c.try_allreduce(a.fill(rank) or a, 1) is a and a.tolist() == [size - 1] * 5  # max
        others = [np.ones(4), np.ones(8, np.float32)[::2], np.ones(4, np.float32)[:0:-1], bytes(4), "x", None,
                  np.array([1.0], object)]
        if torch is not None:
            c.allreduce(torch.zeros(1))  # the first tensor, through Python, tells C about torch
            others += [torch.ones(4, dtype=torch.float64), torch.ones(4, 2)[:, 0],
                       torch.nn.Parameter(torch.ones(4), requires_grad=False), torch.ones(4, requires_grad=True)]
            t = torch.full((3,), rank + 1.0, dtype=torch.bfloat16)
            assert c._c.try_allreduce(t, 2) is t and t.tolist() == [1.0] * 3  # min
        for x in others:
            before = repr(x)
            assert c._c.try_allreduce(x, 0) is None, x
            assert repr(x) == before
        with pytest.raises(ValueError, match="a code from 0 to 2"):  # every rank alike: each raises, none waits
            c._c.try_allreduce(a, 3)
        with pytest.raises(TypeError):
            c._c.try_allreduce(a)
        assert c.allreduce(np.full(2, rank, np.int32)).tolist() == [size * (size - 1) // 2] * 2
    return True


@pytest.mark.parametrize("size", [1, 2])
def test_try_allreduce_does_the_call_or_nothing(size):
    run_ranks(try_allreduce_body, size)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_tensors_from_the_shared_buffer():
    def body(rank, size, job):
        with lockstep.Comm(job, rank, size, buffer_bytes=1 << 20) as c:
            off = 0
            for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
                t = c.buffer((30, 100), dt, offset=off)  # 3000 elements: zero-copy for every dtype
                assert isinstance(t, torch.Tensor) and t.dtype == dt and t.shape == (30, 100)
                off += t.numel() * t.element_size()
                t.copy_(torch.arange(3000).reshape(30, 100) % 7 * (rank + 1))
                c.allreduce(t)
                want = (torch.arange(3000).reshape(30, 100) % 7 * (size * (size + 1) // 2)).to(dt)
                assert torch.equal(t, want), dt
        return True
    run_ranks(body, 2)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_writing_a_tensor_that_autograd_saved_fails_its_backward():
    # Comm's calls write into tensors behind autograd's back; for a tensor in a graph they
    # bump its version, as torch's in-place ops do, so a backward that saved the old
    # values raises instead of computing a wrong gradient with the new ones
    def body(rank, size, job):
        with lockstep.Comm(job, rank, size) as c:
            calls = (("allreduce", lambda y: c.allreduce(y)),
                     ("broadcast", lambda y: c.broadcast(y, 1)),
                     ("allgather", lambda y: c.allgather(torch.ones(2), y)),
                     ("alltoall", lambda y: c.alltoall(torch.ones(4), y)),
                     ("reduce_scatter", lambda y: c.reduce_scatter(torch.ones(8), y)))
            for name, call in calls:
                x = torch.full((4,), float(rank + 1), requires_grad=True)
                y = x * 2  # in the graph: requires grad
                z = (y * y).sum()  # saves y
                v = y._version
                call(y)
                assert y._version > v, name
                with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                    z.backward()
                x = torch.full((4,), float(rank + 1), requires_grad=True)
                y = x * 2
                w = y.sum()  # saves nothing of y: the in-place write does not break it
                call(y)
                w.backward()
                assert x.grad.tolist() == [2.0] * 4, name
        return True
    run_ranks(body, 2)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_custom_op_reduces_across_ranks_and_refuses_autograd():
    def body(rank, size, job):
        import lockstep.torch_ops as lt
        with lockstep.Comm(job, rank, size) as c:
            h = lt.register(c)
            t = torch.full((1000,), float(rank + 1))
            v = t._version
            torch.ops.lockstep.all_reduce_(t, h, "max")
            assert (t == size).all(), t
            assert t._version == v + 1  # autograd sees the in-place change
            torch.ops.lockstep.all_reduce_(t, h)  # op defaults to sum
            assert (t == size * size).all(), t
            x = torch.ones(4, requires_grad=True)
            with pytest.raises(RuntimeError, match="no_grad"):
                torch.ops.lockstep.all_reduce_(x * 2, h)  # refused on every rank, before any call
            with torch.no_grad():
                torch.ops.lockstep.all_reduce_(x, h, "min")
            assert x.tolist() == [1.0] * 4
            with pytest.raises(TypeError, match="float64"):
                torch.ops.lockstep.all_reduce_(torch.zeros(3, dtype=torch.float64), h)
            m = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1)
            part = m[:, 1::2]  # non-contiguous: reduced through a copy, written back in place
            torch.ops.lockstep.all_reduce_(part, h)
            full = torch.arange(12, dtype=torch.float32).reshape(3, 4)
            assert torch.equal(part, full[:, 1::2] * (size * (size + 1) // 2)), part
            assert torch.equal(m[:, 0::2], full[:, 0::2] * (rank + 1)), m  # the rest untouched
            lt.unregister(h)
        return True
    run_ranks(body, 2)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_ops_with_bad_arguments_on_one_rank_end_the_call_on_every_rank():
    def body(rank, size, job):
        import lockstep.torch_ops as lt
        bad = rank == 1
        x = torch.ones(2, size)
        g = torch.ones(4, requires_grad=True)
        calls = [  # (rank 1's call, the others', the error rank 1 gets)
            (lambda h: torch.ops.lockstep.all_gather(x, h, 2), lambda h: torch.ops.lockstep.all_gather(x, h, 1),
             ValueError),
            (lambda h: torch.ops.lockstep.reduce_scatter(x, h, "sum", 0),
             lambda h: torch.ops.lockstep.reduce_scatter(x, h, "sum", 1), ValueError),
            (lambda h: torch.ops.lockstep.all_to_all(x, h, 0, 0), lambda h: torch.ops.lockstep.all_to_all(x, h, 1, 0),
             ValueError),
            (lambda h: torch.ops.lockstep.all_reduce_(g * 2, h), lambda h: torch.ops.lockstep.all_reduce_(x, h),
             RuntimeError),
        ]
        with lockstep.Comm(job, rank, size, timeout=60) as c:  # the deadline is past the watchdog's 30 s
            h = lt.register(c)
            for mine, theirs, err in calls:
                with pytest.raises(err if bad else lockstep.PeerArgumentError):
                    (mine if bad else theirs)(h)
            t = torch.full((3,), float(rank))
            torch.ops.lockstep.all_reduce_(t, h)  # the communicator goes on
            assert t.tolist() == [float(size * (size - 1) // 2)] * 3
            lt.unregister(h)
        return True
    run_ranks(body, 3, timeout=30)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_broadcast_and_all_gather_ops():
    def body(rank, size, job):
        import lockstep.torch_ops as lt
        with lockstep.Comm(job, rank, size) as c:
            h = lt.register(c)
            t = torch.full((5,), float(rank))
            v = t._version
            torch.ops.lockstep.broadcast_(t, h, 2)
            assert t.tolist() == [2.0] * 5 and t._version == v + 1
            t.fill_(rank + 1)
            torch.ops.lockstep.broadcast_(t, h)  # root defaults to 0
            assert t.tolist() == [1.0] * 5
            x = torch.arange(6, dtype=torch.float64).reshape(2, 3) + 10 * rank  # any dtype
            want = [torch.arange(6, dtype=torch.float64).reshape(2, 3) + 10 * r for r in range(size)]
            for dim in (0, 1, -1, -2):
                out = torch.ops.lockstep.all_gather(x, h, dim)
                assert out.is_contiguous() and torch.equal(out, torch.cat(want, dim)), (dim, out)
            out = torch.ops.lockstep.all_gather(x.t(), h, 1)  # non-contiguous input
            assert torch.equal(out, torch.cat([w.t() for w in want], 1))
            assert torch.equal(torch.ops.lockstep.all_gather(x[:, :0], h), torch.empty(2 * size, 0, dtype=x.dtype))
            for bad, msg in ((torch.tensor(1.0), "at least one dimension"), (x, "dim must be from -2 to 1")):
                with pytest.raises(ValueError, match=msg):  # refused before any call, on every rank
                    torch.ops.lockstep.all_gather(bad, h, 2)
            with pytest.raises(ValueError, match="root must be a rank from 0 to 2, not 3"):
                torch.ops.lockstep.broadcast_(t, h, 3)
            m = torch.full((4, 3), float(rank))
            torch.ops.lockstep.broadcast_(m.t(), h, 1)  # non-contiguous: through a copy, back in place
            assert m.tolist() == [[1.0] * 3] * 4, m
            g = torch.ones(4, requires_grad=True)
            for op, args in ((torch.ops.lockstep.broadcast_, (g * 2, h)), (torch.ops.lockstep.all_gather, (g, h))):
                with pytest.raises(RuntimeError, match="no_grad"):
                    op(*args)
            with torch.no_grad():
                assert torch.ops.lockstep.all_gather(g, h).tolist() == [1.0] * 4 * size
            lt.unregister(h)
        return True
    run_ranks(body, 3)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_reduce_scatter_and_all_to_all_ops():
    def body(rank, size, job):
        import lockstep.torch_ops as lt
        with lockstep.Comm(job, rank, size) as c:
            h = lt.register(c)
            base = torch.arange(6 * 4 * 5, dtype=torch.float32).reshape(6, 4, 5)
            x = base * (rank + 1)
            total = base * (size * (size + 1) // 2)
            for dim in (0, -3):  # 6 rows, 2 per rank
                out = torch.ops.lockstep.reduce_scatter(x, h, "sum", dim)
                assert out.is_contiguous() and torch.equal(out, total[2 * rank:2 * rank + 2]), (dim, out)
            xt = x.transpose(0, 2)  # non-contiguous, shape (5, 4, 6)
            out = torch.ops.lockstep.reduce_scatter(xt, h, "max", 2)
            assert out.is_contiguous() and torch.equal(out, (base * size).transpose(0, 2)[:, :, 2 * rank:2 * rank + 2])
            for dt in (torch.float16, torch.bfloat16, torch.int32):
                y = torch.full((size, 3), rank + 1, dtype=dt)
                assert torch.ops.lockstep.reduce_scatter(y, h, "min").tolist() == [[1, 1, 1]]
            assert torch.ops.lockstep.reduce_scatter(torch.empty(0, 2), h).shape == (0, 2)
            with pytest.raises(TypeError, match="float64"):  # refused on every rank, before any call
                torch.ops.lockstep.reduce_scatter(torch.zeros(size, dtype=torch.float64), h)
            with pytest.raises(ValueError, match="op must be one of"):
                torch.ops.lockstep.reduce_scatter(x, h, "prod")

            # all_to_all: part r of dim scatter_dim to rank r; the parts received, by rank,
            # concatenated along gather_dim; any dtype
            def sent(r, t=False):  # what rank r holds, tagged by rank (t: transposed, a view)
                a = torch.arange(36, dtype=torch.float64).reshape(6, 6) + 100 * r
                return a.t() if t else a
            for sd, gd, t in ((0, 0, False), (0, 1, False), (1, 0, False), (-1, -1, False), (1, 0, True)):
                mine = sent(rank, t)
                want = torch.cat([sent(k, t).narrow(sd, 2 * rank, 2) for k in range(size)], gd)
                out = torch.ops.lockstep.all_to_all(mine, h, sd, gd)
                assert out.is_contiguous() and torch.equal(out, want), (sd, gd, t, out)
            bad = [(torch.tensor(1.0), (0, 0), "all_to_all needs a tensor of at least one dimension"),
                   (mine, (2, 0), "scatter_dim must be from -2 to 1"),
                   (mine, (0, -3), "gather_dim must be from -2 to 1"),
                   (mine[:, :4], (1, 0), "all_to_all splits dimension 1 into 3 equal parts")]
            for t, dims, msg in bad:
                with pytest.raises(ValueError, match=msg):
                    torch.ops.lockstep.all_to_all(t, h, *dims)
            with pytest.raises(ValueError, match="reduce_scatter splits dimension 1 into 3 equal parts"):
                torch.ops.lockstep.reduce_scatter(x, h, "sum", 1)
            g = torch.ones(size, requires_grad=True)
            for op in (torch.ops.lockstep.reduce_scatter, torch.ops.lockstep.all_to_all):
                with pytest.raises(RuntimeError, match="no_grad"):
                    op(g, h)
            with torch.no_grad():
                assert torch.ops.lockstep.reduce_scatter(g, h).tolist() == [float(size)]
            lt.unregister(h)
        return True
    run_ranks(body, 3)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_autograd_ops_give_the_gradient_of_every_ranks_loss():
    def body(rank, size, job):
        import lockstep.torch_ops as lt
        ops = torch.ops.lockstep

        def weights(k, shape):  # rank k's loss is (output * weights(k)).sum(); exact in f32
            return (torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape) % 7 + 10 * k)

        def grad_of(op, x, *args):
            x = x.clone().requires_grad_()
            y = op(x, h, *args)
            (y * weights(rank, y.shape)).sum().backward()
            return y, x.grad

        with lockstep.Comm(job, rank, size) as c:
            h = lt.register(c)
            x = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) + 100 * rank
            for dim in (0, 2, -2):  # all_gather: the gradient is the sum over ranks of the loss's
                y, g = grad_of(ops.all_gather_autograd, x, dim)
                assert torch.equal(y.detach(), ops.all_gather(x, h, dim)), dim
                n = x.shape[dim]
                want = sum(weights(k, y.shape).narrow(dim, rank * n, n) for k in range(size))
                assert torch.equal(g, want), (dim, g, want)
            x = torch.arange(6 * 5, dtype=torch.float32).reshape(6, 5) * (rank + 1)
            for dim in (0, -2):  # reduce_scatter: every rank's weights, each in its block
                y, g = grad_of(ops.reduce_scatter_autograd, x, "sum", dim)
                assert torch.equal(y.detach(), ops.reduce_scatter(x, h, "sum", dim))
                assert torch.equal(g, torch.cat([weights(k, y.shape) for k in range(size)], dim)), (dim, g)
            x = torch.arange(6 * 6, dtype=torch.float32).reshape(6, 6) + 100 * rank
            for sd, gd in ((0, 0), (0, 1), (1, 0), (-1, -1)):  # all_to_all: block r back from rank r
                y, g = grad_of(ops.all_to_all_autograd, x, sd, gd)
                assert torch.equal(y.detach(), ops.all_to_all(x, h, sd, gd))
                q = y.shape[gd] // size
                want = torch.cat([weights(r, y.shape).narrow(gd, rank * q, q) for r in range(size)], sd)
                assert torch.equal(g, want), (sd, gd, g, want)
            x = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1)
            for src in (x, x.t()):  # all_reduce: every rank's weights, summed; any layout
                y, g = grad_of(ops.all_reduce_autograd, src, "sum")
                assert torch.equal(y.detach(), ops.all_reduce(src, h, "sum"))
                assert torch.equal(y.detach(), src / (rank + 1) * (size * (size + 1) // 2)) and y.is_contiguous()
                assert torch.equal(g, sum(weights(k, y.shape) for k in range(size))), g
            assert torch.equal(x, torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1))  # untouched
            for root in range(size):  # broadcast: the root gets every rank's weights, the others none
                y, g = grad_of(ops.broadcast_autograd, x, root)
                assert torch.equal(y.detach(), x / (rank + 1) * (root + 1))
                want = sum(weights(k, y.shape) for k in range(size)) if rank == root else torch.zeros(3, 4)
                assert torch.equal(g, want), (root, g)
            with pytest.raises(RuntimeError, match="all_reduce_autograd with op 'max' has no gradient"):
                ops.all_reduce_autograd(torch.ones(2, requires_grad=True), h, "max")  # on every rank, after it
            with torch.no_grad():
                assert ops.all_reduce_autograd(torch.full((2,), float(rank)), h, "max").tolist() == [size - 1.0] * 2
            with pytest.raises(RuntimeError, match="broadcast_autograd has one"):
                ops.broadcast(torch.ones(2, requires_grad=True), h)
            with pytest.raises(RuntimeError, match="all_reduce_autograd has one"):
                ops.all_reduce_(torch.ones(2, requires_grad=True) * 2, h)
            assert ops.all_reduce(torch.empty(2, 3, device="meta"), h).shape == (2, 3)  # the fake
            # twice differentiable: the backward is made of the same ops
            x = torch.arange(3, dtype=torch.float32).requires_grad_()
            y = ops.all_gather_autograd(x, h)
            (g,) = torch.autograd.grad((y * y).sum(), x, create_graph=True)  # 2 * sum of every rank's y
            assert torch.equal(g.detach(), 2 * size * x.detach()), g
            (gg,) = torch.autograd.grad(g.sum(), x)
            assert torch.equal(gg, torch.full((3,), 2.0 * size)), gg  # d/dx of every rank's sum of g
            with pytest.raises(RuntimeError, match="with op 'max' has no gradient"):  # on every rank, after it
                ops.reduce_scatter_autograd(torch.ones(size, requires_grad=True), h, "max")
            with torch.no_grad():
                assert ops.reduce_scatter_autograd(torch.ones(size, requires_grad=True), h, "max").tolist() == [1.0]
            with pytest.raises(RuntimeError, match="all_gather_autograd has one"):
                ops.all_gather(torch.ones(2, requires_grad=True), h)
            lt.unregister(h)
        return True
    run_ranks(body, 3)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_custom_op_stays_in_the_compiled_graph():
    import lockstep.torch_ops as lt
    with lockstep.Comm(f"py-op-{os.getpid()}", 0, 1) as c:
        h = lt.register(c)
        t = torch.arange(4, dtype=torch.float32)
        torch.ops.lockstep.all_reduce_(t, h, "sum")
        assert t.tolist() == [0, 1, 2, 3]  # one rank: unchanged, and no error

        def f(x):
            y = x * 2
            torch.ops.lockstep.all_reduce_(y, h, "sum")
            torch.ops.lockstep.broadcast_(y, h, 0)
            z = torch.ops.lockstep.all_gather(y.reshape(2, 4), h, 1)
            z = torch.ops.lockstep.reduce_scatter(z, h, "sum", 1)
            z = torch.ops.lockstep.broadcast(torch.ops.lockstep.all_reduce(z, h, "max"), h, 0)
            return torch.ops.lockstep.all_to_all(z, h, 0, 1) + 1

        out, targets = compile_capturing(f, torch.ones(8))
        assert out.shape == (2, 4) and out.flatten().tolist() == [3.0] * 8
        for name in ("all_reduce_", "broadcast_", "all_gather", "reduce_scatter", "all_to_all", "all_reduce",
                     "broadcast"):  # by whole name: all_reduce is not all_reduce_
            assert any(t.split(".")[:2] == ["lockstep", name] for t in targets), (name, targets)
        # the autograd variants too, forward and backward, through dynamo and through
        # AOTAutograd's traced backward
        def loss(x):
            y = torch.ops.lockstep.broadcast_autograd(torch.ops.lockstep.all_reduce_autograd(x, h, "sum"), h, 0)
            return (torch.ops.lockstep.all_gather_autograd(y * 2, h, 0) ** 2).sum()
        x = torch.arange(4, dtype=torch.float32, requires_grad=True)
        out, targets = compile_capturing(loss, x)
        for name in ("all_gather_autograd", "all_reduce_autograd", "broadcast_autograd"):
            assert any("lockstep." + name in t for t in targets), (name, targets)
        out.backward()
        assert x.grad.tolist() == [0.0, 8.0, 16.0, 24.0]  # d/dx (2x)^2 on one rank
        x.grad = None
        torch.compile(loss, backend="aot_eager", fullgraph=True)(x).backward()
        assert x.grad.tolist() == [0.0, 8.0, 16.0, 24.0]
        with pytest.raises(ValueError, match="register"):
            torch.ops.lockstep.all_reduce_(t, 12345, "sum")
        lt.unregister(h)


def test_the_address_entry_points_check_their_arguments():
    """Comm's broadcast, allgather and alltoall hand torch tensors to C as addresses and
    byte lengths (_c.*_ptr, private): those check their arguments as the buffer ones do
    (every rank passes the same bad arguments here, so each refuses on its own)"""
    def body(rank, size, job):
        with lockstep.Comm(job, rank, size) as c:
            a = np.arange(4, dtype=np.int32) + 4 * rank
            b = np.zeros(4 * size, np.int32)
            p, q = a.ctypes.data, b.ctypes.data
            c._c.allgather_ptr(p, a.nbytes, q, b.nbytes, 0, 0)
            assert b.tolist() == list(range(4 * size))
            c._c.broadcast_ptr(p, a.nbytes, 1, 0, 0)
            assert a.tolist() == [4, 5, 6, 7]
            c._c.alltoall_ptr(q, 8 * size, q + 8 * size, 8 * size)  # b[:4] = 2 blocks of 2 ints, into b[4:8]
            assert b[4:8].tolist() == [2 * rank, 2 * rank + 1] * 2
            for call, args, exc, msg in (
                    (c._c.broadcast_ptr, (p, 16, 0, 0), TypeError, r"broadcast_ptr\(address, bytes, root, order, xfer\)"),
                    (c._c.broadcast_ptr, (p, -1, 0, 0, 0), ValueError, "byte lengths must be >= 0"),
                    (c._c.broadcast_ptr, (p, 16, 2**40, 0, 0), OverflowError, "must fit an int"),
                    (c._c.broadcast_ptr, ("x", 16, 0, 0, 0), TypeError, "int"),
                    (c._c.allgather_ptr, (p, 16, q, 12, 0, 0), ValueError, "size . len.send. = 32 bytes, not 12"),
                    (c._c.allgather_ptr, (p, 2**62, q, 16, 0, 0), ValueError, "times 2 ranks is past any recv"),
                    (c._c.allgather_ptr, (p, 16, q), TypeError, "allgather_ptr"),
                    (c._c.alltoall_ptr, (p, 16, q, 8), ValueError, "as many bytes as send"),
                    (c._c.alltoall_ptr, (p, 16, p + 4, 16), ValueError, "must not overlap"),
                    (c._c.alltoall_ptr, (p, 16, q, 16.0), TypeError, "int")):
                with pytest.raises(exc, match=msg):
                    call(*args)
            c._c.broadcast_ptr(0, 0, 0, 0, 0)  # nothing to move: no address needed
            c._c.allgather_ptr(p, 16, q, 32, 0, 0)  # the refusals left the communicator working
            assert b[:8].tolist() == [4, 5, 6, 7] * 2
        return True
    assert run_ranks(body, 2) == {0: True, 1: True}
