"""`lockstep bench comm`: the C benchmark under mpirun (lockstep's collectives against
OpenMPI's), the Python call's overhead, the routes as users meet them
(lockstep_bench_routes), the torch rows, their targets, and `--against REV`."""
import json
import os
import shutil
import subprocess
import sys

import lockstep_bench_against
import lockstep_bench_routes
import lockstep_bench_torch
from lockstep_common import (ROOT, USUAL_ROUND_TRIP_NS, BenchError, collect, python_with_lockstep, run_json,
                             size_name)

COMM_BASELINES = ["openmpi", "gloo", "deepspeed-shm"]  # MPI_*, torch.distributed's gloo, DeepSpeed's shm op


def log(what):
    print(what, file=sys.stderr, flush=True)


def comm_runner(quick):
    """run(build, n): the comm benchmark of one build at n ranks, as rows"""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        raise BenchError("mpirun not found: install openmpi-bin")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

    def run(build, n):
        exe = os.path.join(build, "bench", "comm", "lockstep_bench_comm")
        if not os.path.exists(exe):
            raise BenchError("the comm benchmark is not built: install openmpi-bin and libopenmpi-dev "
                             "(scripts/bench.sh does), then reconfigure and rebuild")
        print(f"comm at {n} ranks ({build})", file=sys.stderr, flush=True)
        cmd = [mpirun, "-n", str(n), "--oversubscribe", "--bind-to", "none", exe] + (["quick"] if quick else [])
        try:
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800, env=env).stdout
        except subprocess.CalledProcessError as e:
            raise BenchError(f"{' '.join(cmd)} failed ({e.returncode}): {e.stderr.strip()[-2000:]}")
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return run


# 8 ranks (4 per CPU here) in the full run only: that collectives do not collapse when
# ranks outnumber the CPUs (about a minute more)
def comm_rank_counts(quick):
    return [2, 4] if quick else [2, 4, 8]


def bench_comm_against(build, quick, rev, rounds, ranks=None):
    """This checkout's comm benchmark against REV's, interleaved (lockstep_bench_against)"""
    try:
        sha, other = lockstep_bench_against.build_revision(ROOT, rev)
    except subprocess.CalledProcessError as e:
        raise BenchError(f"cannot build {rev}: {' '.join(e.cmd)} failed: {(e.stderr or b'').decode()[-2000:]}")
    run = comm_runner(quick)
    samples = lockstep_bench_against.run_rounds(run, [(sha, other), ("this", build)],
                                                ranks or comm_rank_counts(quick), rounds)
    rows = lockstep_bench_against.compare(samples, sha, "this")
    lockstep_bench_against.print_table(rows, sha, size_name)
    lockstep_bench_against.print_round_trips(samples)
    print(f"\n## comm against {sha}: judged on this run's medians")
    for line in lockstep_bench_against.verdicts(rows, len(os.sched_getaffinity(0)), size_name):
        print(line)
    py = python_with_lockstep()
    if py:  # the routes from Python, under every launcher, before and after in turns
        try:
            theirs = lockstep_bench_routes.build_python(ROOT, os.path.dirname(other), py)
            # this checkout's package, built now: an installed one may be older than the tree
            mine = lockstep_bench_routes.build_python(ROOT, ROOT, py, os.path.join(ROOT, "build", "this-python-package"))
        except subprocess.CalledProcessError as e:
            raise BenchError(f"cannot build a Python package: {(e.stderr or b'').decode()[-2000:]}")
        # the default rows only: the explicit settings' rows differ between builds, and
        # a batch's neighbours change its time (bench_routes.py)
        # a launch's own placement moves all its rows together, so the judgement takes
        # the median over launches (lockstep_bench_routes.against)
        before, after = lockstep_bench_routes.run_turns(py, quick, run_json, [theirs, mine], rounds, log,
                                                        defaults_only=True)
        lines, verdict = lockstep_bench_routes.against(before, after, size_name)
        print(f"\n## routes against {sha}: default rows, median us before and after, and the state")
        for line in lines:
            print(line)
        print(verdict)
    return 0


def bench_comm(build, quick, routes):
    """The comm part's samples; the routes rows, raw (each with its route), go to routes"""
    run = comm_runner(quick)
    samples = {}
    for n in comm_rank_counts(quick):
        collect(samples, run(build, n))
    py = python_with_lockstep()
    if not py:
        print("note: the lockstep Python package is not installed; no python_overhead rows "
              "(scripts/bench.sh installs it into build/venv)", file=sys.stderr)
        return samples
    def launched(what, script, args=(), timeout=600):  # script at 2 and 4 ranks under lockstep.launch
        for n in [2, 4]:
            log(f"{what} at {n} ranks")
            cmd = [py, "-m", "lockstep.launch", "-n", str(n), os.path.join(ROOT, "bench", "comm", script)]
            collect(samples, run_json(cmd + list(args), timeout=timeout))
    launched("python overhead", "bench_python.py")
    got = lockstep_bench_routes.run(py, quick, run_json, log=log)
    routes.extend(got)
    collect(samples, got)
    if subprocess.run([py, "-c", "import torch.distributed"], capture_output=True, cwd="/").returncode != 0:
        print("note: torch is not installed; no allreduce_torch rows against gloo "
              "(scripts/bench.sh installs torch==2.13.0 into build/venv)", file=sys.stderr)
        return samples
    launched("torch: lockstep against gloo", "bench_torch.py", ["quick"] if quick else [], 1800)
    # the allreduce rows again as torch users launch ranks: torchrun, 2 ranks
    log("torch: lockstep against gloo under torchrun at 2 ranks")
    cmd = [py, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           os.path.join(ROOT, "bench", "comm", "bench_torch.py")] + (["quick"] if quick else [])
    collect(samples, run_json(cmd + ["torchrun"], timeout=1800, env=dict(os.environ, OMP_NUM_THREADS="1")))
    return samples


# The collectives' targets (issues 3 and 72), judged on this run's medians: (workload,
# impl, smallest and largest message in bytes, the most lockstep / OpenMPI may be where
# the host was in its usual state at that size, and where it had the CPUs apart). A
# size where the bare exchange of the same bytes (FLOOR, measured in the same run: the
# memory traffic, and where ranks outnumber the CPUs the process switches) is slower
# than that asks for less than this host's floor, and is judged against the floor.
COMM_TARGETS = [
    ("allreduce_2r", "lockstep", 4, 256 << 10, 0.7, 0.7),
    ("allreduce_2r", "lockstep", 1 << 20, 16 << 20, 1.0, 1.0),
    ("allreduce_4r", "lockstep", 4, 16 << 20, 0.5, 0.7),
    ("allreduce_4r", "lockstep-buffer", 4, 16 << 20, 0.5, 0.7),
]
FLOOR = "bare-exchange"
PYTHON_TARGET = (64, 1.5)  # a 16-element f32 allreduce: at most this many us over the C call
PYTHON_CALLS = ["broadcast", "allgather", "alltoall", "reduce_scatter"]  # python_overhead's other rows


def round_trip(rows, w, param):
    """The host's state while table w's rows ran at this size (bench_comm's roundtrip rows):
    the median round trip in ns, or None"""
    rt = next((r for r in rows if r["workload"] == "roundtrip_" + w.rsplit("_", 1)[-1]
               and r["impl"] == w and r["param"] == param), None)
    return rt["median"] if rt else None


def comm_targets(rows):
    """One line per target: whether this run met it, with the sizes that missed."""
    lines = []
    for w, impl, lo, hi, most, most_apart in COMM_TARGETS:
        got, base, floor = [], {}, {}
        for r in rows:
            if r["workload"] == w and r["impl"] == impl and lo <= r["param"] <= hi:
                b = best_baseline(rows, w, r["param"])
                if b:
                    base[r["param"]] = b["median"]
                    got.append((r["param"], r["median"] / b["median"]))
            elif r["workload"] == w and r["impl"] == FLOOR:
                floor[r["param"]] = r["median"]
        what = f"{w} {impl}, {size_name(lo)}-{size_name(hi)}, <= {most:.2f}x OpenMPI" + (
            f" ({most_apart:.2f}x apart)" if most_apart != most else "")
        if not got:
            lines.append(f"{what}: not measured")
            continue
        got.sort()
        trips = {p: round_trip(rows, w, p) for p, _ in got}
        limit, past = {}, {}  # past: size -> the floor's ratio to OpenMPI, where it is above the limit
        for p, _ in got:
            limit[p] = most_apart if trips[p] is not None and trips[p] >= USUAL_ROUND_TRIP_NS else most
            if p in floor and floor[p] / base[p] > limit[p]:
                past[p] = limit[p] = floor[p] / base[p]
        missed = [f"{size_name(p)} {x:.2f}x" + (f" (round trip {trips[p]:.0f} ns)" if trips[p] is not None else "")
                  + (f" (the {FLOOR} {past[p]:.2f}x)" if p in past else "") for p, x in got if x > limit[p]]
        worst = max(got, key=lambda g: g[1])
        restated = (f"; past the {FLOOR} at " + ", ".join(f"{size_name(p)} ({x:.2f}x OpenMPI)" for p, x in
                                                          sorted(past.items())) + ", judged against it") if past else ""
        lines.append(f"{what}: " + (f"missed at {', '.join(missed)}" if missed else
                                    f"met at all {len(got)} sizes (worst {worst[1]:.2f}x at {size_name(worst[0])})")
                     + restated)
    size, most = PYTHON_TARGET
    for w in sorted({r["workload"] for r in rows if r["workload"].startswith("python_overhead_")}):
        med = {r["impl"]: r["median"] for r in rows if r["workload"] == w and r["param"] == size}
        what = f"{w}, {size_name(size)}, Python's allreduce <= {most} us over the C call"
        if "c" not in med or "python" not in med:
            lines.append(f"{what}: not measured")
        else:
            extra = med["python"] - med["c"]
            lines.append(f"{what}: {'met' if extra <= most else 'missed'} ({extra:.2f} us)")
        for call in PYTHON_CALLS:  # no target: what the other calls cost over C, for the record
            if f"c-{call}" in med and f"python-{call}" in med:
                lines.append(f"{w}, {size_name(size)}, Python's {call}: "
                             f"{med[f'python-{call}'] - med[f'c-{call}']:.2f} us over the C call")
    return lines + lockstep_bench_torch.torch_targets(rows, size_name)


def best_baseline(rows, w, t):
    cands = [r for r in rows if r["workload"] == w and r["param"] == t and r["impl"] in COMM_BASELINES]
    return min(cands, key=lambda r: r["median"]) if cands else None
