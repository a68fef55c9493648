"""torch.ops.lockstep.*: results across ranks, bad arguments on one rank, the autograd
variants' gradients, and the ops inside a torch.compile graph."""
import math
import os

import pytest

import lockstep
from conftest import compile_capturing, run_ranks

try:
    import torch
except ImportError:  # the torch tests skip
    torch = None


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
