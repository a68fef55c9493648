"""What the Comm calls refuse, and how they say it: bad buffers, buffer views, the
address entry points, the kernels' instruction set cap."""
import datetime
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import lockstep
from conftest import run_ranks

try:
    import torch
except ImportError:  # the torch tests skip
    torch = None


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


def test_the_torch_ops_checks_are_the_extensions():
    """The checks both kernels of the torch ops make (python/src/op_checks.c), exactly"""
    from lockstep import _lockstep as L
    assert L.check_dim(3, -1, "all_gather") == 2 and L.check_dim(1, 0, "x") == 0
    with pytest.raises(ValueError, match=r"^all_gather needs a tensor of at least one dimension \(use .reshape\(1\)\)$"):
        L.check_dim(0, 0, "all_gather")
    with pytest.raises(ValueError, match="^all_to_all's gather_dim must be from -2 to 1 for this 2-dimensional "
                                         "tensor, not 5$"):
        L.check_dim(2, 5, "all_to_all", "gather_dim")
    assert L.check_split(8, 2, 1, "reduce_scatter") is None
    with pytest.raises(ValueError, match="^reduce_scatter splits dimension 1 into 2 equal parts, one per rank, but "
                                         "it has 7 elements: pad it to a multiple of 2$"):
        L.check_split(7, 2, 1, "reduce_scatter")
    assert L.check_root(1, 2) == 1
    for bad in (-1, 2, 2**70):
        with pytest.raises(ValueError, match=f"^root must be a rank from 0 to 1, not {bad}$"):
            L.check_root(bad, 2)
    e = L.no_grad_error("all_reduce_")
    assert isinstance(e, RuntimeError) and str(e).startswith(
        "torch.ops.lockstep.all_reduce_ has no backward (torch.ops.lockstep.all_reduce_autograd has one)")
    e = L.unbound_error(5)
    assert isinstance(e, ValueError) and str(e) == \
        "no communicator registered under handle 5: call lockstep.torch_ops.register(comm)"
