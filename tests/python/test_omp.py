"""The `lockstep omp` command: the console script pip installs, `omp run` (the
runtime preloaded, the thread count, a program that makes no OpenMP calls, bad
arguments), `omp check` (supported, unsupported, not an ELF file), and PyTorch's CPU
ops on the runtime with the same results as on the libgomp its wheel bundles."""
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import lockstep.omp

BIN = os.path.dirname(sys.executable)
LOCKSTEP = os.path.join(BIN, "lockstep")
TIMEOUT = 300


def _run(args, env=None):
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "OMP_NUM_THREADS")}
    return subprocess.run([LOCKSTEP] + args, capture_output=True, text=True, timeout=TIMEOUT,
                          env=dict(base, **(env or {})))


def _compile(tmp_path, name, code):
    gcc = shutil.which("gcc")
    if not gcc:
        pytest.skip("no gcc to build an OpenMP program with")
    src = tmp_path / f"{name}.c"
    src.write_text(textwrap.dedent(code))
    exe = tmp_path / name
    subprocess.run([gcc, "-O1", "-fopenmp", "-o", str(exe), str(src)], check=True, timeout=TIMEOUT)
    return str(exe)


TEAM = """
    #include <omp.h>
    #include <stdio.h>
    int main(void) {
        int n = 0;
    #pragma omp parallel
    #pragma omp single
        n = omp_get_num_threads();
        printf("%d\\n", n);
        return 0;
    }
"""

OPENACC = """
    int acc_get_num_devices(int device_type); /* openacc.h's: OpenACC is not implemented */
    int main(void) {
        int x = 0;
    #pragma omp parallel
        x = 1;
        return x + acc_get_num_devices(2);
    }
"""


def test_the_console_script_is_installed_with_the_runtime():
    assert os.access(LOCKSTEP, os.X_OK)
    r = _run(["omp", "path"])
    assert r.returncode == 0, r.stderr
    path = r.stdout.strip()
    assert os.path.isfile(path) and os.path.basename(path) == "liblockstep-omp.so"
    assert os.path.dirname(path) == os.path.dirname(lockstep.omp.__file__)


def test_run_preloads_the_runtime_with_the_thread_count(tmp_path):
    exe = _compile(tmp_path, "team", TEAM)
    for n in (1, 3, 5):
        r = _run(["omp", "run", "-n", str(n), "--", exe], {"LOCKSTEP_OMP_STATS": "1"})
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(n)
        assert "lockstep-omp: stats: regions=1 " in r.stderr, r.stderr


def test_run_says_so_when_the_program_makes_no_openmp_calls():
    r = _run(["omp", "run", "--", sys.executable, "-c", "print('plain')"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "plain"
    assert "made no OpenMP calls: it ran unchanged" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["omp", "run", "-n", "0", "--", "true"], "-n 0: the thread count must be 1 or more"),
    (["omp", "run", "--"], "nothing to run"),
    (["omp", "run", "--", "/nonexistent/program"], "cannot run /nonexistent/program"),
    (["omp", "check", "/nonexistent/lib.so"], "cannot read /nonexistent/lib.so"),
])
def test_bad_arguments_exit_2_with_what_to_fix(args, message):
    r = _run(args)
    assert r.returncode == 2
    assert message in r.stderr, r.stderr


def test_check_lists_what_a_binary_needs(tmp_path):
    ok = _compile(tmp_path, "team", TEAM)
    r = _run(["omp", "check", ok])
    assert r.returncode == 0, r.stderr
    assert "GOMP_parallel@GOMP_4.0" in r.stdout and "supported" in r.stdout
    assert r.stdout.strip().endswith("0 not supported, 0 missing")
    bad = _compile(tmp_path, "openacc", OPENACC)
    r = _run(["omp", "check", bad])
    assert r.returncode == 1
    line = next(x for x in r.stdout.splitlines() if "acc_get_num_devices" in x)
    assert "NOT SUPPORTED" in line
    # and running it fails by name, never on the real libgomp
    r = _run(["omp", "run", "--", bad])
    assert r.returncode == 3
    assert "lockstep-omp: acc_get_num_devices is not supported" in r.stderr


def test_check_refuses_a_file_that_is_not_elf(tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\n")
    r = _run(["omp", "check", str(script)])
    assert r.returncode == 2
    assert "is not an ELF file" in r.stderr


MLP = """
import sys, torch
torch.manual_seed(0)
torch.set_num_threads(int(sys.argv[1]))
mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 128))
x = torch.randn(64, 256)
with torch.no_grad():
    y = mlp(x)
    a = torch.randn(192, 192)
    acc = torch.zeros(192, 192)
    for _ in range(20):
        acc = acc + a @ a
        a = torch.tanh(a @ a.T / 192.0)
torch.save({"y": y, "acc": acc, "threads": torch.get_num_threads()}, sys.argv[2])
"""


COMPARE = """
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
assert b["threads"] == int(sys.argv[3]), b["threads"]
torch.testing.assert_close(a["y"], b["y"], rtol=1e-5, atol=1e-5)
torch.testing.assert_close(a["acc"], b["acc"], rtol=1e-4, atol=1e-3)
"""


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_torch_cpu_ops_give_the_same_results_on_the_runtime(tmp_path, threads):
    # torch runs in subprocesses only: once this process had run torch's OpenMP regions
    # (libgomp's threads), the forked ranks of later tests would hang in libgomp
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    script = tmp_path / "mlp.py"
    script.write_text(MLP)
    plain, ours = tmp_path / "plain.pt", tmp_path / "ours.pt"
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "OMP_NUM_THREADS")}
    subprocess.run([sys.executable, str(script), str(threads), str(plain)], check=True,
                   timeout=TIMEOUT, env=env)
    r = _run(["omp", "run", "--", sys.executable, str(script), str(threads), str(ours)],
             {"LOCKSTEP_OMP_STATS": "1"})
    assert r.returncode == 0, r.stderr
    cmp = subprocess.run([sys.executable, "-c", COMPARE, str(plain), str(ours), str(threads)],
                         capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert cmp.returncode == 0, cmp.stderr
    stats = [x for x in r.stderr.splitlines() if x.startswith("lockstep-omp: stats:")]
    assert len(stats) == 1, r.stderr
    regions = int(stats[0].split("regions=")[1].split()[0])
    if threads > 1:  # torch opens no region with one thread
        assert regions > 0, r.stderr
