"""Failures from Python: a dead peer, a mismatch, a deadline, Ctrl-C, one rank's bad
arguments, a forked child, a second thread, joining errors; tags and kernel-copy settings."""
import functools
import os
import signal
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
    """Each rank's setting is its own; a call moves by kernel copy only where both
    allow, and every mix gives the same sums."""
    setting = ("wide", "off")[rank]
    with lockstep.Comm(job, rank, size, timeout=20, kernel_copy=setting) as c:
        got = c.kernel_copy
        x = np.full(1 << 18, rank + 1, np.float32)  # 1 MiB
        c.allreduce(x)
        assert (x == 3).all()
    return got


def refused_by_name(monkeypatch, var, bad, values, keyword, bad_keyword):
    """A malformed setting, in the environment and as Comm's keyword: each refused with
    a message naming it and the values it takes"""
    monkeypatch.setenv(var, bad)
    with pytest.raises(ValueError, match=rf'{var} must be {values} or unset \(got "{bad}"\)'):
        lockstep.Comm(f"py-bad-{os.getpid()}", 0, 1)
    monkeypatch.delenv(var)
    with pytest.raises(ValueError, match=rf"{keyword} must be one of"):
        lockstep.Comm(f"py-bad-{os.getpid()}", 0, 1, **{keyword: bad_keyword})


def test_kernel_copy_settings(monkeypatch):
    monkeypatch.delenv("LOCKSTEP_KERNEL_COPY", raising=False)
    got = run_ranks(kernel_copy_body, 2, timeout=60)
    assert got[1] is False and got[0] in (True, False)  # rank 0: as the system allows
    refused_by_name(monkeypatch, "LOCKSTEP_KERNEL_COPY", "medium", "auto, off, wide", "kernel_copy", "fast")
    with lockstep.Comm(f"py-kc-{os.getpid()}", 0, 1) as c:
        assert c.kernel_copy is True  # alone: no peer to refuse
    with lockstep.Comm(f"py-kc-{os.getpid()}", 0, 1, kernel_copy="off") as c:
        assert c.kernel_copy is False
    monkeypatch.setenv("LOCKSTEP_KERNEL_COPY", "off")
    with lockstep.Comm(f"py-kc-{os.getpid()}", 0, 1, kernel_copy="wide") as c:
        assert c.kernel_copy is False  # the environment wins, for experiments


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


def distance_body(rank, size, job, distance="auto"):
    """The ranks read one judgement of their distance, and a large call's route
    follows it: far apart (forced here), a 1 MiB allreduce moves by kernel copy where
    the system allows it, close together through the chunk slots."""
    with lockstep.Comm(job, rank, size, timeout=20, distance=distance) as c:
        x = np.full(1 << 18, rank + 1, np.float32)  # 1 MiB
        c.allreduce(x)
        assert (x == 3).all()
        return c.distance, c.route, c.kernel_copy


def test_distance_and_route(monkeypatch):
    for forced, route in (("far", "kernel-copy"), ("close", "chunked")):
        monkeypatch.setenv("LOCKSTEP_COMM_DISTANCE", forced)
        got = run_ranks(distance_body, 2, timeout=60)
        (d0, rt0), route0, kc = got[0]
        assert got[1][0][0] == d0 and got[1][1] == route0  # one judgement, one route
        if rt0 > 0:  # rank 1 answered the probe at creation (a loaded machine may not)
            assert d0 == forced and route0 == (route if kc else "chunked")
    monkeypatch.delenv("LOCKSTEP_COMM_DISTANCE")
    got = run_ranks(functools.partial(distance_body, distance="far"), 2, timeout=60)  # set, not probed: always
    assert got[0][0][0] == got[1][0][0] == "far" and got[0][1] == ("kernel-copy" if got[0][2] else "chunked")
    refused_by_name(monkeypatch, "LOCKSTEP_COMM_DISTANCE", "near", "auto, close, far", "distance", "near")
    with lockstep.Comm(f"py-dist-{os.getpid()}", 0, 1) as c:
        assert c.distance == ("close", 0) and c.route == "none"  # alone: nothing measured
        c.allreduce(np.ones(4, np.float32))
        assert c.route == "none"  # one rank moves nothing
