"""What the parts of `lockstep bench` share: running a benchmark that prints JSON rows,
collecting its samples, the interpreter with the lockstep package, sizes' names."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a cache line's round trip between the CPUs under this (ns): the host in its usual state;
# over it, the vCPUs placed far apart (about 460 ns here), as sockets are on servers
USUAL_ROUND_TRIP_NS = 100


class BenchError(Exception):
    pass


def run_json(cmd, timeout=600, env=None):
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout,
                             env=env).stdout
    except subprocess.CalledProcessError as e:
        raise BenchError(f"{' '.join(cmd)} failed ({e.returncode}): {e.stderr.strip()}")
    except subprocess.TimeoutExpired:
        raise BenchError(f"{' '.join(cmd)} did not finish in {timeout} s")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def collect(samples, rows):
    for r in rows:
        if "note" in r:  # not a measurement: said once, here
            print(f"{r['note']} at {r['ranks']} ranks: {r['value']} (lockstep_comm_kernel_copy)", flush=True)
            continue
        key = (r["workload"], r["impl"], r["param"])
        samples.setdefault(key, {"unit": r["unit"], "reps": []})["reps"].extend(r["reps"])


def median_interval(xs):
    """(lo, hi): order statistics that hold the true median with at least 95 % confidence,
    free of any assumption on the distribution (the binomial's tails), from 6 samples;
    with fewer, min and max (5: 94 %)."""
    xs = sorted(xs)
    n, j, tail = len(xs), 0, 0.0
    term = 0.5 ** n  # P(Binomial(n, 1/2) == k), k from 0
    for k in range(n // 2):
        if tail + term > 0.025:
            break
        tail += term
        j = k + 1
        term = term * (n - k) / (k + 1)
    j = max(j, 1)
    return xs[j - 1], xs[n - j]


def python_with_lockstep():
    """An interpreter that can import the lockstep package: this one, or build/venv's."""
    for py in [os.environ.get("LOCKSTEP_PYTHON"), sys.executable,
               os.path.join(ROOT, "build", "venv", "bin", "python")]:
        if py and os.path.exists(py) and subprocess.run(
                [py, "-c", "import lockstep._lockstep"], capture_output=True, cwd="/").returncode == 0:
            return py
    return None


def size_name(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"
