"""torch.distributed's "lockstep" back end (lockstep.distributed): every collective
against a reference computed here, the same bits on every rank, subgroups, groups over
several (emulated) hosts, errors, launchers."""
import datetime
import hashlib
import math
import os
import subprocess
import sys
import warnings

import pytest

from conftest import compile_capturing, run_ranks

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

SIZES = [1, 2, 3, 4]


def segments():
    return {n for n in os.listdir("/dev/shm") if n.startswith("lockstep-tdist-")}


def in_group(fn, where, timeout=60, hosts=None):
    """fn(rank, size) between init_process_group("lockstep") and destroy_process_group,
    the store a file in the directory `where`; for run_ranks. hosts: the host each rank
    claims to run on, to emulate several"""
    def body(rank, size, job):
        import lockstep.distributed as ld
        if hosts is not None:
            ld._host = lambda: f"host{hosts[rank]}/emulated"
        path = os.path.join(where, "store")
        dist.init_process_group("lockstep", init_method=f"file://{path}", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=timeout))
        try:
            return fn(rank, size)
        finally:
            dist.destroy_process_group()
    return body


def digest(*tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def value(rank, dtype, n=37):
    """rank's input: small values whose sums and products are exact in every dtype"""
    if dtype == torch.bool:
        return (torch.arange(n) + rank) % 3 == 0
    x = (torch.arange(n) * (rank + 1) + 3 * rank) % 5 - (0 if dtype == torch.uint8 else 2)
    if dtype.is_floating_point:
        x = x / 2
    return x.to(dtype)


def reference(op, dtype, size):
    """op over every rank's value(), from Python numbers, in rank order"""
    R = dist.ReduceOp
    rows = [value(r, dtype).tolist() for r in range(size)]
    out = []
    for column in zip(*rows):
        acc = column[0]
        for v in column[1:]:
            acc = {R.SUM: lambda a, b: a + b, R.AVG: lambda a, b: a + b, R.PRODUCT: lambda a, b: a * b,
                   R.MAX: max, R.MIN: min, R.BAND: lambda a, b: a & b, R.BOR: lambda a, b: a | b,
                   R.BXOR: lambda a, b: a ^ b}[op](acc, v)
        out.append(acc)
    if dtype == torch.uint8:
        out = [v % 256 for v in out]  # uint8 wraps
    want = torch.tensor(out, dtype=torch.float64 if dtype.is_floating_point else None).to(dtype)
    return want.div_(size) if op == R.AVG else want  # AVG: the sum, divided in the dtype


def cases():
    R = dist.ReduceOp
    floats = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
    ints = (torch.int32, torch.int64, torch.int16, torch.uint8)
    for dt in floats:
        for op in (R.SUM, R.AVG, R.MAX, R.MIN, R.PRODUCT):
            yield dt, op
    for dt in ints:
        for op in (R.SUM, R.MAX, R.MIN, R.PRODUCT, R.BAND, R.BOR, R.BXOR):
            yield dt, op
    for op in (R.SUM, R.MAX, R.MIN, R.BAND, R.BOR):
        yield torch.bool, op


def all_reduce_body(rank, size, rank_order=True):
    """every dtype and op, and the odd tensors, against references; returns a digest
    of the results. rank_order: rounding sums must equal adding in rank order (not so
    for lockstep's own dtypes over several hosts)"""
    out = []
    for dt, op in cases():
        t = value(rank, dt)
        dist.all_reduce(t, op=op)
        want = reference(op, dt, size)
        assert t.dtype == dt and torch.equal(t, want), (dt, op, t, want)
        out.append(t)
    # a view that is not contiguous: the result lands in it, the rest is untouched
    base = torch.full((37, 2), -1.0)
    base[:, 0] = value(rank, torch.float32)
    dist.all_reduce(base[:, 0])
    assert torch.equal(base[:, 0], reference(dist.ReduceOp.SUM, torch.float32, size))
    assert torch.equal(base[:, 1], torch.full((37,), -1.0))
    # complex (torch hands it over as float pairs), 0-d, empty
    z = torch.full((3,), complex(rank, 1), dtype=torch.complex64)
    dist.all_reduce(z)
    assert torch.equal(z, torch.full((3,), complex(size * (size - 1) // 2, size), dtype=torch.complex64))
    s = torch.tensor(rank + 1, dtype=torch.int64)
    dist.all_reduce(s)
    assert s.shape == () and s.item() == size * (size + 1) // 2
    e = torch.empty(0, dtype=torch.float64)
    dist.all_reduce(e, op=dist.ReduceOp.PRODUCT)
    assert e.shape == (0,)
    # tensors that the common case's C call does not take: the same results through the
    # checks (a subclass; a tensor that requires grad, its version bumped); and async
    want = reference(dist.ReduceOp.SUM, torch.float32, size)
    p = torch.nn.Parameter(value(rank, torch.float32), requires_grad=False)
    dist.all_reduce(p)
    assert torch.equal(p, want)
    with torch.no_grad():
        w = value(rank, torch.float32).requires_grad_()
        version = w._version
        dist.all_reduce(w)
        assert torch.equal(w, want) and w._version > version
    a = value(rank, torch.float32)
    work = dist.all_reduce(a, async_op=True)
    work.wait()
    assert torch.equal(a, want)
    # sums that round: the bits are those of adding in rank order (bfloat16: in float32,
    # rounded once), and every rank agrees
    for dt, tiny in ((torch.float32, 2.0 ** -30), (torch.float64, 2.0 ** -60), (torch.bfloat16, 2.0 ** -12)):
        def row(k):  # columns whose sum in any other order gives other bits (from 3 ranks)
            return [(1.0, -1.0, tiny, tiny)[k], (tiny, tiny, 1.0, -1.0)[k], (tiny, 1.0, -1.0, tiny)[k]]
        x = torch.tensor(row(rank), dtype=torch.float64).to(dt)
        dist.all_reduce(x)
        acc = torch.tensor(row(0), dtype=torch.float64).to(dt)
        acc = acc.double() if dt == torch.float64 else acc.float()
        for k in range(1, size):
            acc = acc + torch.tensor(row(k), dtype=torch.float64).to(dt).to(acc.dtype)
        if rank_order or dt == torch.float64:  # float64 is gathered and added here in rank order
            assert torch.equal(x, acc.to(dt)), (dt, x, acc)
        out.append(x)
    return digest(*out)


def test_the_op_of_every_option():
    """The back end reads an option's op through ReduceOp's hash (its op's value, as
    checked at import); every op, PREMUL_SUM included, gives what the enum gives."""
    import lockstep.distributed as ld
    R = dist.ReduceOp
    for op in (R.SUM, R.AVG, R.PRODUCT, R.MAX, R.MIN, R.BAND, R.BOR, R.BXOR, dist._make_nccl_premul_sum(2.0)):
        o = dist.AllreduceOptions()
        o.reduceOp = op
        assert ld._op(o) == ld._op_by_value(o) == int(o.reduceOp.op), op


@pytest.mark.parametrize("size", SIZES)
def test_all_reduce_of_every_dtype_and_op(size, tmp_path):
    got = run_ranks(in_group(all_reduce_body, tmp_path), size)
    assert len(set(got.values())) == 1, got
    assert not segments()


def collectives_body(rank, size):
    """broadcast, gathers, scatter, reduce_scatter, reduce, async, barrier"""
    R = dist.ReduceOp
    for root in range(size):
        t = torch.arange(10, dtype=torch.int64) * (rank + 1)
        dist.broadcast(t, root)
        assert torch.equal(t, torch.arange(10, dtype=torch.int64) * (root + 1))
    base = torch.zeros(4, 3, dtype=torch.bfloat16)
    base[:, 1] = rank + 1
    dist.broadcast(base[:, 1], size - 1)  # not contiguous
    assert torch.equal(base[:, 1], torch.full((4,), size, dtype=torch.bfloat16))
    assert not base[:, 0].any() and not base[:, 2].any()

    mine = torch.tensor([[rank, -rank], [2 * rank, 7]], dtype=torch.float64)
    every = [torch.tensor([[r, -r], [2 * r, 7]], dtype=torch.float64) for r in range(size)]
    out = [torch.empty(2, 2, dtype=torch.float64) for _ in range(size)]
    dist.all_gather(out, mine)
    assert all(torch.equal(o, w) for o, w in zip(out, every))
    flat = torch.empty(size * 2, 2, dtype=torch.float64)
    dist.all_gather_into_tensor(flat, mine)
    assert torch.equal(flat, torch.cat(every))
    strided = torch.empty(2, size * 2, dtype=torch.float64).t()  # an output that is not contiguous
    dist.all_gather_into_tensor(strided, mine)
    assert torch.equal(strided, torch.cat(every))
    # outputs of different sizes, output r holding rank r's input (as NCCL allows)
    def uneven(r):
        return torch.arange(r + 1, dtype=torch.int16).reshape(1, r + 1) + 100 * r
    out = [torch.empty(1, r + 1, dtype=torch.int16) for r in range(size)]
    dist.all_gather(out, uneven(rank))
    assert all(torch.equal(o, uneven(r)) for r, o in enumerate(out)), out
    if size > 1:  # rank 0's list disagrees: the same error on every rank, and the group goes on
        out = [torch.empty(r + 1 + (rank == 0 and r == size - 1), dtype=torch.int16) for r in range(size)]
        with pytest.raises(ValueError, match="output tensor r must hold rank r's input on every rank"):
            dist.all_gather(out, uneven(rank).reshape(-1))

    root = 1 % size
    got = [torch.empty(2, 2, dtype=torch.float64) for _ in range(size)] if rank == root else None
    dist.gather(mine, got, dst=root)
    if rank == root:
        assert all(torch.equal(o, w) for o, w in zip(got, every))
    part = torch.empty(3, dtype=torch.int32)
    parts = [torch.arange(3, dtype=torch.int32) + 10 * r for r in range(size)] if rank == root else None
    dist.scatter(part, parts, src=root)
    assert torch.equal(part, torch.arange(3, dtype=torch.int32) + 10 * rank)

    whole = torch.arange(size * 3, dtype=torch.float32) * (rank + 1)
    keep = whole.clone()
    o = torch.empty(3)
    dist.reduce_scatter_tensor(o, whole)
    assert torch.equal(o, torch.arange(rank * 3, rank * 3 + 3, dtype=torch.float32) * (size * (size + 1) // 2))
    assert torch.equal(whole, keep)  # the input stays as it was
    o = torch.empty(3, dtype=torch.int64)
    dist.reduce_scatter(o, [torch.full((3,), r * 100 + rank, dtype=torch.int64) for r in range(size)], op=R.MAX)
    assert torch.equal(o, torch.full((3,), rank * 100 + size - 1, dtype=torch.int64))
    # lockstep's own reduce-scatter: bf16 AVG into a non-contiguous output; f32 MIN of a list
    whole = (torch.arange(size * 4, dtype=torch.float32) + rank).to(torch.bfloat16)
    base = torch.zeros(4, 2, dtype=torch.bfloat16)
    dist.reduce_scatter_tensor(base[:, 0], whole, op=R.AVG)
    sums = torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) * size + size * (size - 1) // 2
    assert torch.equal(base[:, 0], sums.to(torch.bfloat16).div_(size)) and (base[:, 1] == 0).all()
    o = torch.empty(2)
    dist.reduce_scatter(o, [torch.tensor([r + rank, -rank], dtype=torch.float32) for r in range(size)], op=R.MIN)
    assert torch.equal(o, torch.tensor([float(rank), float(1 - size)]))

    t = torch.full((5,), float(rank + 1))
    dist.reduce(t, dst=root)
    want = size * (size + 1) / 2 if rank == root else rank + 1
    assert torch.equal(t, torch.full((5,), float(want)))  # the others' stay as they were

    w = dist.all_reduce(t := torch.ones(3), async_op=True)
    assert w.wait() and torch.equal(t, torch.full((3,), float(size)))
    dist.barrier()
    return True


@pytest.mark.parametrize("size", SIZES)
def test_broadcast_gather_scatter_reduce_scatter_and_reduce(size, tmp_path):
    assert run_ranks(in_group(collectives_body, tmp_path), size) == {r: True for r in range(size)}
    assert not segments()


def test_subgroups_errors_and_the_comm(tmp_path):
    def fn(rank, size):
        import lockstep
        import lockstep.distributed as ld
        R = dist.ReduceOp
        pair = dist.new_group(ranks=[0, 2])  # the default back end: lockstep
        if rank != 1:
            t = torch.tensor([float(rank + 1)])
            dist.all_reduce(t, group=pair)
            assert t.item() == 4.0  # ranks 0 and 2 only
            assert ld.comm(pair).size == 2
        c = ld.comm()
        assert isinstance(c, lockstep.Comm) and (c.rank, c.size) == (rank, size)

        # torch's object collectives: pickles through broadcast and all_gather
        objs = [{"from": rank, "s": "x" * 1000}] if rank == 2 else [None]
        dist.broadcast_object_list(objs, src=2)
        assert objs == [{"from": 2, "s": "x" * 1000}]
        every = [None] * size
        dist.all_gather_object(every, ("r", rank, list(range(rank))))
        assert every == [("r", r, list(range(r))) for r in range(size)]
        got = [None] * size if rank == 1 else None
        dist.gather_object({"r": rank}, got, dst=1)
        assert rank != 1 or got == [{"r": r} for r in range(size)]
        mine = [None]
        dist.scatter_object_list(mine, [f"to{r}" for r in range(size)] if rank == 0 else None, src=0)
        assert mine == [f"to{rank}"]
        gloo = dist.new_group(backend="gloo")
        with pytest.raises(ValueError, match="not a group of the lockstep back end"):
            ld.comm(gloo)

        # point to point, through the group's gloo: blocking, async, batched, any source
        nxt, prv = (rank + 1) % size, (rank - 1) % size
        got = torch.empty(3, dtype=torch.bfloat16)
        sent = dist.isend(torch.full((3,), rank, dtype=torch.bfloat16), nxt)
        dist.recv(got, prv)
        sent.wait()
        assert got.tolist() == [prv] * 3
        got2 = torch.empty(4, dtype=torch.int64)
        ops = [dist.P2POp(dist.isend, torch.arange(4) + rank, prv), dist.P2POp(dist.irecv, got2, nxt)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        assert got2.tolist() == [nxt, nxt + 1, nxt + 2, nxt + 3]
        if rank == 0:
            froms = {dist.recv(torch.empty(1)) for _ in range(size - 1)}  # no src: any source
            assert froms == set(range(1, size)), froms
        else:
            dist.send(torch.tensor([float(rank)]), 0, tag=0)
        with pytest.raises(ValueError, match="CPU tensors; this one is on meta"):
            dist.send(torch.empty(1, device="meta"), nxt)
        with pytest.raises(ValueError, match="CPU tensors; this one is on meta"):
            dist.all_reduce(torch.empty(2, device="meta"))
        with pytest.raises(ValueError, match="AVG needs a floating-point tensor"):
            dist.all_reduce(torch.ones(2, dtype=torch.int32), op=R.AVG)
        with pytest.raises(ValueError, match="cannot reduce with RedOpType.PREMUL_SUM"):
            dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum(2.0))
        with pytest.raises(ValueError, match="all_gather needs a list of 3 output tensors, not 2"):
            dist.all_gather([torch.empty(1), torch.empty(1)], torch.ones(1))
        with pytest.raises(ValueError, match="output of 3 x 2"):
            dist.all_gather_into_tensor(torch.empty(5), torch.ones(2))
        # every refusal above came before any call: the group still works
        t = torch.tensor([rank], dtype=torch.int32)
        dist.all_reduce(t, op=R.MAX)
        assert t.item() == size - 1

        # the group object itself: its name, the coalesced all_reduce (one call per
        # tensor), what it does not do, and abort, which frees the group's Comm
        world = dist.group.WORLD
        assert isinstance(world, ld.LockstepGroup) and world.getBackendName() == "lockstep"
        assert repr(world) == f"LockstepGroup(rank={rank}, size={size})"
        a, b = torch.full((3,), float(rank)), torch.full((2,), float(rank + 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch will deprecate it
            dist.all_reduce_coalesced([a, b], op=R.MAX)
        assert a.tolist() == [size - 1.0] * 3 and b.tolist() == [float(size)] * 2
        with pytest.raises(NotImplementedError, match="no monitored_barrier .use barrier."):
            world.monitored_barrier()
        spare = dist.new_group()
        spare_comm = ld.comm(spare)
        dist.distributed_c10d._abort_process_group(spare)
        assert spare_comm.closed
        t = torch.ones(1)
        dist.all_reduce(t)  # the default group goes on
        assert t.item() == size

        # ranks that disagree fail on every rank, with lockstep's error
        with pytest.raises(lockstep.MismatchError):
            dist.all_reduce(torch.ones(4 if rank == 0 else 5))
        return True

    assert run_ranks(in_group(fn, tmp_path), 3) == {0: True, 1: True, 2: True}
    assert not segments()


def test_the_calls_of_a_collective_made_of_several_are_told_apart(tmp_path):
    """all_to_all with split sizes and all_gather into outputs of different sizes make
    several Comm calls, the first an all_gather of int64 sizes; a rank in a plain
    all_gather of just those bytes meanwhile raises MismatchError, as the other rank
    does, instead of taking the sizes for its result (each case in a group of its own:
    a mismatch ends its group)"""
    def fn(rank, size):
        import lockstep
        n = size
        cases = [  # (rank 0's collective, rank 1's, which looks like rank 0's first call)
            (lambda g: dist.all_to_all_single(torch.empty(n), torch.ones(n), [1] * n, [1] * n, group=g),
             lambda g: dist.all_gather_into_tensor(torch.empty(n * 2 * n, dtype=torch.int64),
                                                   torch.zeros(2 * n, dtype=torch.int64), group=g)),
            (lambda g: dist.all_gather([torch.empty(1), torch.empty(2)], torch.ones(1 + rank), group=g),
             lambda g: dist.all_gather_into_tensor(torch.empty(n * (n + 1), dtype=torch.int64),
                                                   torch.zeros(n + 1, dtype=torch.int64), group=g)),
        ]
        for mine in cases:
            g = dist.new_group()
            with pytest.raises(lockstep.MismatchError):
                mine[rank](g)
            dist.destroy_process_group(g)
        t = torch.ones(3)
        dist.all_reduce(t)  # the default group goes on
        assert t.tolist() == [2.0] * 3
        return True

    assert run_ranks(in_group(fn, tmp_path, timeout=30), 2) == {0: True, 1: True}
    assert not segments()


def test_bad_arguments_on_one_rank_end_the_collective_on_every_rank(tmp_path):
    """rank 1's arguments are wrong (the back end's own checks), the others' right: rank 1
    raises ValueError, the others PeerArgumentError at once (the group's timeout, 120 s,
    is past the watchdog's 60), and the group goes on"""
    def fn(rank, size):
        import lockstep
        bad = rank == 1
        meta = torch.empty(2, device="meta")
        calls = [  # (rank 1's call, the others')
            (lambda: dist.all_reduce(meta), lambda: dist.all_reduce(torch.ones(2))),
            (lambda: dist.all_gather_into_tensor(torch.empty(5), torch.ones(2)),
             lambda: dist.all_gather_into_tensor(torch.empty(2 * size), torch.ones(2))),
            (lambda: dist.all_to_all_single(torch.empty(size), torch.ones(size), [1] * size, [size]),
             lambda: dist.all_to_all_single(torch.empty(size), torch.ones(size))),
            (lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.AVG),
             lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32))),
        ]
        for mine, theirs in calls:
            with pytest.raises(ValueError if bad else lockstep.PeerArgumentError):
                (mine if bad else theirs)()
        sizes = [  # (rank 1's call, the others'): shapes only the back end checks
            (lambda: dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * size + 1)),
             lambda: dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * size))),
            (lambda: dist.all_to_all_single(torch.empty(size + 1), torch.ones(size + 1)),
             lambda: dist.all_to_all_single(torch.empty(size), torch.ones(size))),
            (lambda: dist.all_to_all([torch.empty(1)] * (size - 1), [torch.ones(1)] * (size - 1)),
             lambda: dist.all_to_all([torch.empty(1) for _ in range(size)], [torch.ones(1)] * size)),
        ]
        for (mine, theirs), msg in zip(sizes, ("reduce_scatter needs an input of %d x 2" % size,
                                               "without split sizes needs an input of %d equal blocks" % size,
                                               "all_to_all takes %d input and %d output tensors" % (size, size))):
            with pytest.raises(ValueError, match=msg) if bad else pytest.raises(lockstep.PeerArgumentError):
                (mine if bad else theirs)()
        # the root's list is wrong: only the root can tell
        parts = [torch.ones(2)] * (size - 1) if rank == 0 else None
        with pytest.raises(ValueError if rank == 0 else lockstep.PeerArgumentError):
            dist.scatter(torch.empty(2), parts, src=0)
        t = torch.tensor([rank], dtype=torch.int32)
        dist.all_reduce(t)
        assert t.item() == size * (size - 1) // 2
        return True

    assert run_ranks(in_group(fn, tmp_path, timeout=120), 3, timeout=60) == {0: True, 1: True, 2: True}
    assert not segments()


def all_to_all_body(rank, size):
    """every form of all-to-all: equal blocks, uneven splits, the list form, a large
    message, split sizes the ranks disagree on"""
    # equal blocks, any dtype, into a contiguous and a strided output
    inp = torch.arange(size * 2, dtype=torch.float64) + 100 * rank
    want = torch.tensor([100 * k + 2 * rank + i for k in range(size) for i in range(2)], dtype=torch.float64)
    out = torch.empty(size * 2, dtype=torch.float64)
    dist.all_to_all_single(out, inp)
    assert torch.equal(out, want)
    base = torch.zeros(size * 2, 2, dtype=torch.float64)
    dist.all_to_all_single(base[:, 0], inp)
    assert torch.equal(base[:, 0], want) and (base[:, 1] == 0).all()
    import torch.distributed._functional_collectives as fc  # what torch.compile runs
    assert torch.equal(fc.wait_tensor(fc.all_to_all_single(inp, None, None, dist.group.WORLD)), want)
    # uneven splits, as a mixture of experts sends: rank r gives rank k r + k + 1 rows
    in_splits = [rank + k + 1 for k in range(size)]
    out_splits = [k + rank + 1 for k in range(size)]
    inp = torch.cat([torch.full((n, 3), float(10 * rank + k)) for k, n in enumerate(in_splits)])
    out = torch.empty(sum(out_splits), 3)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((n, 3), float(10 * k + rank)) for k, n in enumerate(out_splits)])
    assert torch.equal(out, want)
    strided = torch.zeros(3, sum(out_splits)).t()  # not contiguous: received into a copy
    dist.all_to_all_single(strided, inp, out_splits, in_splits)
    assert not strided.is_contiguous() and torch.equal(strided, want)
    # the list form, blocks of different sizes, 1 MiB blocks (chunked)
    ins = [torch.full((k + 1,), rank * 10 + k, dtype=torch.int64) for k in range(size)]
    outs = [torch.empty(rank + 1, dtype=torch.int64) for _ in range(size)]
    dist.all_to_all(outs, ins)
    assert all(torch.equal(outs[k], torch.full((rank + 1,), k * 10 + rank)) for k in range(size))
    bases = [torch.zeros(rank + 1, 2, dtype=torch.int64) for _ in range(size)]
    dist.all_to_all([b[:, 1] for b in bases], ins)  # strided outputs, written through copies
    assert all(torch.equal(bases[k][:, 1], torch.full((rank + 1,), k * 10 + rank)) and not bases[k][:, 0].any()
               for k in range(size))
    big = torch.arange(size * (1 << 18), dtype=torch.int32) + (rank << 24)
    got = torch.empty_like(big)
    dist.all_to_all_single(got, big)
    blocks = got.view(size, -1)
    assert all(torch.equal(blocks[k], torch.arange(rank << 18, (rank + 1) << 18, dtype=torch.int32) + (k << 24))
               for k in range(size))
    # split sizes the ranks disagree on: ValueError on every rank; the group still works
    outs_wrong = [2] + [1] * (size - 1) if rank == 0 else [1] * size
    with pytest.raises(ValueError, match="split sizes disagree"):
        dist.all_to_all_single(torch.empty(sum(outs_wrong)), torch.ones(size), outs_wrong, [1] * size)
    with pytest.raises(ValueError, match="must be %d numbers" % size):
        dist.all_to_all_single(torch.empty(size), torch.ones(size), [1] * size, [size])
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == size
    return True


@pytest.mark.parametrize("size", [2, 3])
def test_all_to_all(size, tmp_path):
    assert run_ranks(in_group(all_to_all_body, tmp_path), size) == {r: True for r in range(size)}
    assert not segments()


def test_a_killed_rank_fails_the_others_with_peer_died(tmp_path):
    def fn(rank, size):
        import signal
        import lockstep
        dist.barrier()
        if rank == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        with pytest.raises(lockstep.PeerDiedError):
            for _ in range(1000000):
                dist.all_reduce(torch.ones(1000))
        return True

    assert run_ranks(in_group(fn, tmp_path, timeout=30), 3, expect_dead=(2,)) == {0: True, 1: True}
    assert not segments()


@pytest.mark.parametrize("hosts", [[0, 1], [0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]])
def test_groups_over_several_hosts(hosts, tmp_path):
    """ranks claiming different hosts: lockstep within each, gloo between the leaders;
    interleaved and uneven hosts"""
    def fn(rank, size):
        import lockstep.distributed as ld
        assert ld.comm().size == hosts.count(hosts[rank])  # this host's ranks
        got = all_reduce_body(rank, size, rank_order=False)
        assert collectives_body(rank, size)
        every = [None] * size
        dist.all_gather_object(every, {"rank": rank})
        assert every == [{"rank": r} for r in range(size)]
        assert all_to_all_body(rank, size)  # through the point-to-point gloo group
        quiet = dist.new_group(backend="lockstep", pg_options=ld.Options(point_to_point=False))
        with pytest.raises(NotImplementedError, match="no all_to_all across hosts in a group made with Options"):
            dist.all_to_all_single(torch.empty(size), torch.ones(size), group=quiet)
        t = torch.empty(2)  # send and recv between any two ranks, on any hosts
        if rank == 0:
            for r in range(1, size):
                dist.recv(t, r)
                assert t.tolist() == [r, -r]
        else:
            dist.send(torch.tensor([rank, -rank], dtype=torch.float32), 0)
        return got

    got = run_ranks(in_group(fn, tmp_path, hosts=hosts), len(hosts))
    assert len(set(got.values())) == 1, got  # the same bits on every rank
    assert not segments()


def test_a_group_made_again_on_the_same_store(tmp_path):
    def body(rank, size, job):
        import lockstep.distributed  # noqa: F401
        store = dist.FileStore(os.path.join(tmp_path, "store"), size)
        for k in range(3):  # the same store and prefix each time: no stale job name
            dist.init_process_group("lockstep", store=store, rank=rank, world_size=size,
                                    timeout=datetime.timedelta(seconds=30))
            t = torch.tensor([float(rank + k)])
            dist.all_reduce(t)
            assert t.item() == sum(r + k for r in range(size))
            dist.destroy_process_group()
        return True

    assert run_ranks(body, 2) == {0: True, 1: True}
    assert not segments()


def test_a_gloo_group_that_fails_on_one_rank_is_made_again(tmp_path):
    """making the point-to-point gloo group fails on rank 1 once it has connected (as
    when gloo's connections break there): every rank makes it again, and the group
    works; failing every time, new_group raises on every rank, naming rank 1"""
    def fn(rank, size):
        import lockstep.distributed as ld
        real, made = dist.ProcessGroupGloo, []

        def failing(times):
            def make(*args):
                pg = real(*args)
                made.append(1)
                if rank == 1 and len(made) <= times:
                    raise RuntimeError(f"injected failure {len(made)}")
                return pg
            return make

        try:
            dist.ProcessGroupGloo = failing(1)
            g = dist.new_group()
            assert len(made) == 2  # every rank made it twice
            nxt, prv = (rank + 1) % size, (rank - 1) % size
            got = torch.empty(2)
            sent = dist.isend(torch.tensor([float(rank), 7.0]), nxt, group=g)
            dist.recv(got, prv, group=g)
            sent.wait()
            assert got.tolist() == [prv, 7.0]
            t = torch.tensor([float(rank)])
            dist.all_reduce(t, group=g)
            assert t.item() == sum(range(size))

            del made[:]
            dist.ProcessGroupGloo = failing(ld._GLOO_TRIES)
            tail = "; on this rank: injected failure 3" if rank == 1 else r" \(their own errors say why\)"
            with pytest.raises(RuntimeError, match=r"could not make the gloo group for point to point: it failed "
                                                   r"on rank\(s\) \[1\] of its 3, 3 times" + tail):
                dist.new_group()
            assert len(made) == ld._GLOO_TRIES
        finally:
            dist.ProcessGroupGloo = real
        return True

    assert run_ranks(in_group(fn, tmp_path), 3) == {0: True, 1: True, 2: True}
    assert not segments()


def test_init_from_the_launchers_variables(tmp_path):
    script = tmp_path / "tp.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "import lockstep.distributed\n"
        "dist.init_process_group('lockstep')\n"
        "t = torch.full((3,), float(dist.get_rank() + 1), dtype=torch.bfloat16)\n"
        "dist.all_reduce(t)\n"
        "assert t.tolist() == [3.0] * 3, t\n"
        "dist.destroy_process_group()\n")
    r = subprocess.run([sys.executable, "-m", "lockstep.launch", "-n", "2", str(script)], timeout=120)
    assert r.returncode == 0
    assert not segments()


def test_functional_collectives_and_torch_compile(tmp_path):
    def fn(rank, size):
        import torch.distributed._functional_collectives as fc
        group = dist.group.WORLD
        x = torch.arange(6, dtype=torch.float32) + rank
        assert torch.equal(fc.all_reduce(x, "sum", group), torch.arange(6) * 2.0 + 1)
        assert torch.equal(fc.all_gather_tensor(x, 0, group), torch.cat([x - rank, x - rank + 1]))
        assert torch.equal(fc.reduce_scatter_tensor(x, "max", 0, group), torch.arange(3) + 3 * rank + 1.0)
        assert torch.equal(fc.broadcast(x, 1, group), torch.arange(6) + 1.0)

        def f(y):
            z = y * 2
            dist.all_reduce(z)  # torch.compile makes this a functional collective
            return fc.all_gather_tensor(z + 1, 0, group)

        out, targets = compile_capturing(f, torch.full((2,), float(rank + 1)))
        assert torch.equal(out, torch.full((4,), 7.0))  # (1 + 2) * 2 + 1, from both ranks
        for name in ("_c10d_functional.all_reduce", "_c10d_functional.all_gather_into_tensor"):
            assert any(name in t for t in targets), (name, targets)
        return True

    assert run_ranks(in_group(fn, tmp_path), 2) == {0: True, 1: True}


def test_under_torchrun(tmp_path):
    """torchrun's variables: lockstep.Comm.from_env() and the back end, in one job"""
    script = tmp_path / "tr.py"
    script.write_text(
        "import os, torch, torch.distributed as dist\n"
        "import lockstep, lockstep.distributed\n"
        "c = lockstep.Comm.from_env(timeout=60)\n"
        "x = torch.full((5,), float(c.rank + 1))\n"
        "c.allreduce(x)\n"
        "assert (c.rank, c.size) == (int(os.environ['LOCAL_RANK']), 2) and x.tolist() == [3.0] * 5, x\n"
        "dist.init_process_group('lockstep')\n"
        "t = torch.tensor([dist.get_rank()], dtype=torch.int64)\n"
        "dist.all_reduce(t, op=dist.ReduceOp.MAX)\n"
        "assert t.item() == 1, t\n"
        "dist.destroy_process_group()\n"
        "c.close()\n")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        str(script)], timeout=180, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not segments()


def test_options_set_up_the_comm(tmp_path):
    import lockstep.distributed as ld
    with pytest.raises(TypeError, match="takes point_to_point, buffer_bytes.*not colour"):
        ld.Options(colour="blue")

    def body(rank, size, job):
        import lockstep.distributed as ld
        path = os.path.join(tmp_path, "store")
        dist.init_process_group("lockstep", init_method=f"file://{path}", rank=rank, world_size=size,
                                pg_options=ld.Options(buffer_bytes=1 << 20, wait_policy="auto"),
                                timeout=datetime.timedelta(seconds=60))
        try:
            z = ld.comm().buffer((1000, 64), torch.bfloat16)  # 128 KB of the 1 MiB buffer: zero-copy
            z.fill_(rank + 1)
            dist.all_reduce(z)
            assert torch.equal(z, torch.full((1000, 64), size * (size + 1) / 2, dtype=torch.bfloat16))
            with pytest.raises(ValueError, match="larger buffer_bytes"):
                ld.comm().buffer((1 << 20,), torch.float32)
            with pytest.raises(TypeError, match="must be lockstep.distributed.Options"):
                dist.new_group(backend="lockstep", pg_options={"buffer_bytes": 1})
            g = dist.new_group(backend="lockstep")  # no options: no buffer
            with pytest.raises(ValueError):
                ld.comm(g).buffer((1,), torch.float32)
            quiet = dist.new_group(backend="lockstep", pg_options=ld.Options(point_to_point=False))
            with pytest.raises(NotImplementedError, match="no send in a group made with Options.point_to_point=False"):
                dist.send(torch.ones(1), 1 - rank, group=quiet)
            assert repr(ld.Options(point_to_point=False, buffer_bytes=4)) == "Options(point_to_point=False, buffer_bytes=4)"
        finally:
            dist.destroy_process_group()
        return True

    assert run_ranks(body, 2) == {0: True, 1: True}
    assert not segments()


def random_calls_body(rank, size, seed=5, calls=120):
    """Random collectives (op, dtype, shape, root, reduction) on this back end, on
    contiguous, transposed and strided tensors, and the same calls on contiguous
    tensors in a gloo group: the results must be equal. (gloo itself mishandles
    non-contiguous tensors, so it only ever gets contiguous ones.)"""
    import random
    rng = random.Random(seed)  # the same on every rank: the same calls
    R = dist.ReduceOp
    gloo = dist.new_group(backend="gloo")
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.float64, torch.int64,
              torch.uint8, torch.int8]

    def make(dt, shape, r, layout):
        x = ((torch.arange(math.prod(shape)) * (r + 1) + r) % 5).reshape(shape).to(dt)
        if layout == "transposed" and len(shape) >= 2:
            return x.transpose(0, 1).contiguous().transpose(0, 1)
        if layout == "strided":
            wide = torch.zeros(shape + (2,), dtype=dt)
            wide[..., 1] = x
            return wide[..., 1]
        return x

    def run(op, dt, shape, layout, red, root, group):
        x = make(dt, shape, rank, layout)
        if op == "all_reduce":
            dist.all_reduce(x, op=red, group=group)
            return x
        if op == "broadcast":
            dist.broadcast(x, src=root, group=group)
            return x
        if op == "all_gather":
            outs = [make(dt, shape, 9, layout) for _ in range(size)]
            dist.all_gather(outs, x, group=group)
            return torch.stack(outs)
        if op == "all_gather_into_tensor":
            out = torch.zeros((size * shape[0],) + shape[1:], dtype=dt)
            dist.all_gather_into_tensor(out, x, group=group)
            return out
        if op == "all_to_all_single":
            out = make(dt, shape, 9, layout)
            dist.all_to_all_single(out, x, group=group)
            return out
        if op == "all_to_all":
            outs = [make(dt, shape, 9, layout) for _ in range(size)]
            dist.all_to_all(outs, [make(dt, shape, rank * 10 + k, layout) for k in range(size)], group=group)
            return torch.stack(outs)
        if op == "gather":
            outs = [make(dt, shape, 9, layout) for _ in range(size)] if rank == root else None
            dist.gather(x, outs, dst=root, group=group)
            return torch.stack(outs) if outs else x
        if op == "scatter":
            ins = [make(dt, shape, 10 + k, layout) for k in range(size)] if rank == root else None
            dist.scatter(x, ins, src=root, group=group)
            return x
        out = make(dt, shape, 9, layout)  # reduce_scatter_tensor
        dist.reduce_scatter_tensor(out, torch.cat([make(dt, shape, rank + k, "") for k in range(size)]), op=red,
                                   group=group)
        return out

    ops = ["all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_to_all_single", "all_to_all",
           "gather", "scatter", "reduce_scatter_tensor"]
    differ = []
    for i in range(calls):
        op, dt = rng.choice(ops), rng.choice(dtypes)
        shape = tuple(rng.choice([1, 2, 3, size, 2 * size]) for _ in range(rng.randint(1, 3)))
        layout, root = rng.choice(["", "transposed", "strided"]), rng.randrange(size)
        red = rng.choice([R.SUM, R.MAX, R.MIN] + ([R.PRODUCT] if dt not in (torch.float16, torch.bfloat16) else []))
        if op == "all_to_all_single" and shape[0] % size or op == "reduce_scatter_tensor" and dt == torch.int8:
            continue  # unequal blocks need split sizes; gloo has no int8 reduce_scatter
        got = run(op, dt, shape, layout, red, root, None)
        want = run(op, dt, shape, "", red, root, gloo)
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            differ.append((i, op, dt, shape, layout, red))
    return differ


def test_random_calls_agree_with_gloo(tmp_path):
    assert run_ranks(in_group(random_calls_body, tmp_path), 3) == {0: [], 1: [], 2: []}
    assert not segments()
