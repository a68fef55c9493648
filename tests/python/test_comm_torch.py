"""lockstep.Comm on torch tensors: every dtype including bfloat16, which tensors run in
C and which in Python, the shared buffer as tensors, autograd's saved tensors."""

import numpy as np
import pytest

import lockstep
from conftest import run_ranks

try:
    import torch
except ImportError:  # the torch tests skip
    torch = None


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
