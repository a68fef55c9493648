"""lockstep.Comm on numpy arrays: every dtype and op against a numpy reference, identical
bits on every rank; broadcast, allgather, reduce-scatter, all-to-all, eager broadcasts,
zero-copy from the shared buffer, every spelling of the arguments."""
import hashlib
import os
import threading
import time

import numpy as np
import pytest

import lockstep
from conftest import run_ranks

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
        # broadcast and allgather on buffer views (zero-copy past small_bytes)
        for xfer in ("pull", "push"):
            for n in (20000, 300000):
                b = c.buffer(n, np.uint8, offset=64 * rank + 1)
                b[:] = np.arange(n) % 251 if rank == size - 1 else 0
                c.broadcast(b, root=size - 1, xfer=xfer)
                assert (b == np.arange(n) % 251).all()
                assert size == 1 or (c.route == "zero-copy") == (n > 262144)
                send, recv = c.buffer(n, np.uint8), c.buffer(n * size, np.uint8, offset=n + rank)
                send[:] = rank + 1
                c.allgather(send, recv, xfer=xfer)
                assert (recv.reshape(size, n) == np.arange(1, size + 1)[:, None]).all()
                assert size == 1 or (c.route == "zero-copy") == (n > 262144 or xfer == "push" and n * size > 262144)
        kept = c.buffer((2, 3), np.float32)
        kept[:] = 5
    assert kept.sum() == 30  # the view outlives close(): the mapping goes with it
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 4, 8])
def test_zero_copy_allreduce_from_the_shared_buffer(size):
    assert_same_on_every_rank(run_ranks(zero_copy_body, size))
