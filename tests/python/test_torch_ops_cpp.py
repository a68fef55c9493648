"""torch.ops.lockstep.* through the C++ kernels: the same results as the Python kernels
and as gloo, a compiled tensor-parallel MLP in one graph, the failures, and the
fallback where the kernels cannot be built."""
import os
import subprocess
import sys
import tempfile

import pytest

import lockstep
from conftest import run_ranks

try:
    import torch
except ImportError:  # the torch tests skip
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def launch(n, script, *args, env=None, timeout=240):
    """script as n ranks under lockstep.launch, with a watchdog"""
    r = subprocess.run([sys.executable, "-m", "lockstep.launch", "-n", str(n), os.path.join(HERE, "ranks", script),
                        *args], env=dict(os.environ, **(env or {})), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _bits(t):
    return t.contiguous().view(-1).view(torch.uint8)  # NaNs and -0.0 compared too


@needs_torch
def test_cpp_kernels_give_the_python_kernels_results_and_gloos():
    with tempfile.TemporaryDirectory() as d:
        for backend in ("cpp", "python"):
            launch(2, "torch_ops_results.py", d, env={"LOCKSTEP_TORCH_OPS": backend})
        for rank in range(2):
            cpp = torch.load(os.path.join(d, f"cpp-{rank}.pt"))
            py = torch.load(os.path.join(d, f"python-{rank}.pt"))
            assert cpp.keys() == py.keys() and len(cpp) == 84
            for name, t in cpp.items():  # bit for bit: the same library calls underneath
                assert t.dtype == py[name].dtype and t.shape == py[name].shape, name
                assert torch.equal(_bits(t), _bits(py[name])), name
            for name, t in cpp.items():  # two ranks: a + b is b + a, so gloo's sums are bit-identical too
                if name.startswith("gloo/"):
                    mine = name[len("gloo/"):]
                    assert torch.equal(cpp[mine], t), name


@needs_torch
def test_the_ops_run_the_cpp_kernels_where_a_compiler_is():
    import lockstep.torch_ops as lt
    assert lt.backend == "cpp"  # the machine that runs the tests has g++; the fallback is tested below
    assert lt._cpp is not None


@needs_torch
def test_without_a_compiler_the_python_kernels_serve_with_one_warning():
    code = ("import warnings, torch, lockstep, lockstep.torch_ops as lt\n"
            "c = lockstep.Comm('nocxx-%d' % __import__('os').getpid(), 0, 1)\n"
            "h = lt.register(c); t = torch.ones(3); torch.ops.lockstep.all_reduce_(t, h, 'max')\n"
            "print(lt.backend, t.tolist())\n")
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as empty:
        env = dict(os.environ, LOCKSTEP_CACHE=cache, PATH=empty, CXX="")
        r = subprocess.run([sys.executable, "-W", "always", "-c", code], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split("\n")[0] == "python [1.0, 1.0, 1.0]"
        assert r.stderr.count("RuntimeWarning") == 1 and "no C++ compiler found (set CXX" in r.stderr, r.stderr
        env["LOCKSTEP_TORCH_OPS"] = "cpp"  # asked for: the error itself
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "BuildError: no C++ compiler found" in r.stderr, r.stderr
        env["LOCKSTEP_TORCH_OPS"] = "fast"
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "LOCKSTEP_TORCH_OPS must be auto, cpp or python" in r.stderr, r.stderr


@needs_torch
def test_a_compiled_tensor_parallel_mlp_keeps_the_op_in_one_graph():
    def body(rank, size, job):
        import torch._dynamo

        import lockstep.torch_ops as lt
        torch.manual_seed(0)
        w1, w2 = torch.randn(16, 32), torch.randn(32, 16)
        mine1, mine2 = w1.chunk(size, 1)[rank], w2.chunk(size, 0)[rank]  # column- then row-parallel
        with lockstep.Comm(job, rank, size) as c:
            h = lt.register(c)

            def step(x):
                y = torch.relu(x @ mine1) @ mine2  # this rank's part of the sum
                torch.ops.lockstep.all_reduce_(y, h, "sum")
                y = torch.relu(y @ mine1) @ mine2
                return torch.ops.lockstep.all_reduce(y, h, "sum")

            x = torch.randn(4, 16)
            torch._dynamo.reset()
            explained = torch._dynamo.explain(step)(x)
            assert explained.graph_count == 1 and explained.graph_break_count == 0, explained
            eager = step(x)
            compiled = torch.compile(step, fullgraph=True)(x)
            whole = torch.relu(torch.relu(x @ w1) @ w2 @ w1) @ w2  # one rank holding all the weights
            assert torch.allclose(eager, whole, rtol=1e-4, atol=1e-3)
            assert torch.allclose(compiled, eager, rtol=1e-5, atol=1e-5)
            lt.unregister(h)
        return True
    run_ranks(body, 2, timeout=240)


def _failing_rank(kind):
    """A body whose rank 1 fails the way kind says while rank 0 is in an op"""
    def body(rank, size, job):
        import lockstep.torch_ops as lt
        assert lt.backend == "cpp"
        with lockstep.Comm(job, rank, size, timeout=2 if kind == "timeout" else 60) as c:
            h = lt.register(c)
            t = torch.ones(256)
            torch.ops.lockstep.all_reduce_(t, h, "sum")  # both in step first
            if rank == 1:
                if kind == "death":
                    os.kill(os.getpid(), 9)
                if kind == "timeout":
                    import time
                    time.sleep(4)
                    return "late"
                with pytest.raises(lockstep.MismatchError):
                    torch.ops.lockstep.broadcast_(t, h, 0)
                return "mismatch"
            errors = {"death": lockstep.PeerDiedError, "timeout": lockstep.CommTimeoutError,
                      "mismatch": lockstep.MismatchError}
            with pytest.raises(errors[kind]):
                torch.ops.lockstep.all_reduce_(t, h, "sum")
            with pytest.raises(lockstep.CommError):  # the communicator stays broken
                torch.ops.lockstep.all_gather(t, h, 0)
            lt.unregister(h)
        return kind
    return body


@needs_torch
@pytest.mark.parametrize("kind", ["death", "timeout", "mismatch"])
def test_cpp_ops_raise_lockstep_errors_when_a_peer_dies_is_late_or_calls_another(kind):
    res = run_ranks(_failing_rank(kind), 2, timeout=60, expect_dead=(1,) if kind == "death" else ())
    assert res[0] == kind


@needs_torch
def test_cpp_ops_refuse_bad_tensors_and_keep_the_peers_in_step():
    def body(rank, size, job):
        import lockstep.torch_ops as lt
        with lockstep.Comm(job, rank, size) as c:
            h = lt.register(c)
            good = torch.ones(4)
            bad = [(torch.ones(4, dtype=torch.float64), TypeError, "float64"),
                   (torch.ones(4), ValueError, "op must be one of max, min, sum"),
                   (torch.ones(4, requires_grad=True), RuntimeError, "no backward")]
            for t, err, msg in bad:
                if rank == 1:
                    with pytest.raises(err, match=msg):
                        torch.ops.lockstep.all_reduce_(t, h, "mean" if err is ValueError else "sum")
                else:
                    with pytest.raises(lockstep.PeerArgumentError):
                        torch.ops.lockstep.all_reduce_(good, h, "sum")
            with pytest.raises(ValueError, match="root must be a rank from 0 to 1, not 2"):
                torch.ops.lockstep.broadcast_(good, h, 2)  # on every rank: all refuse
            torch.ops.lockstep.all_reduce_(good, h, "sum")
            assert good.tolist() == [2.0] * 4
            c.close()
            with pytest.raises(lockstep.CommError, match="closed"):
                torch.ops.lockstep.all_reduce_(good, h, "sum")
            lt.unregister(h)
        return True
    run_ranks(body, 2, timeout=60)


@needs_torch
def test_the_ops_build_ahead_of_time_warning_free_and_per_compiler():
    import lockstep._torch_build as tb
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, LOCKSTEP_CACHE=cache)
        r = subprocess.run([sys.executable, "-W", "error", "-m", "lockstep._torch_build"], env=env,
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr  # -W error: a compiler warning would fail it
        path = r.stdout.strip()
        assert path.startswith(os.path.join(cache, "torch-ops")) and os.path.exists(path)
    cmd = tb._command(tb._compiler(), "/dev/null")
    assert "-Wall" in cmd and "-w" not in cmd
    # another compiler program behind the same command is another cache entry
    with tempfile.TemporaryDirectory() as bin_dir:
        real = tb.shutil.which(tb._compiler().split()[0])
        fake = os.path.join(bin_dir, "c++")
        with open(fake, "w") as f:
            f.write(f'#!/bin/sh\nexec {real} "$@"\n')
        os.chmod(fake, 0o755)
        assert tb._compiler_identity(fake) != tb._compiler_identity(real)
        assert tb._compiler_identity(fake).startswith(os.path.realpath(fake))
