"""`lockstep bench comm`'s routes rows (bench/comm/bench_routes.py): the collectives
called from Python on the caller's memory, under every launcher users start ranks
with, the default route beside each explicit setting, each size with the host's state.

Judged on one run: at each size, in the state the size ran in, the default takes the
route of the fastest explicit setting (numpy/close, numpy/far, numpy/slots), or is no
slower than ROUTE_SLACK x it. With
--against REV: the same script under REV's Python package (built into
build/against-<sha>/python) and this checkout's, in turns; a default row more than
AGAINST_LIMIT x REV's fails, in either state, on any launcher."""
import os
import shutil
import statistics
import subprocess

from lockstep_common import USUAL_ROUND_TRIP_NS

ROUTE_SLACK = 1.10
AGAINST_LIMIT = 1.15
SETTINGS = ("numpy/close", "numpy/far", "numpy/slots")
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "comm",
                      "bench_routes.py")


def launchers(py, n, quick, defaults_only=False):
    """[(name, argv, env)] for the launchers installed here: lockstep's, torchrun (with
    torch), mpirun (with OpenMPI)"""
    tail = (["quick"] if quick else []) + (["defaults"] if defaults_only else [])
    out = [("lockstep.launch", [py, "-m", "lockstep.launch", "-n", str(n), SCRIPT, "lockstep.launch"] + tail, {})]
    if subprocess.run([py, "-c", "import torch.distributed.run"], capture_output=True, cwd="/").returncode == 0:
        out.append(("torchrun", [py, "-m", "torch.distributed.run", "--nproc_per_node", str(n), SCRIPT,
                                 "torchrun"] + tail, {"OMP_NUM_THREADS": "1"}))
    mpirun = shutil.which("mpirun")
    if mpirun:
        out.append(("mpirun", [mpirun, "-n", str(n), "--oversubscribe", "--bind-to", "none", py, SCRIPT, "mpirun"]
                    + tail, {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}))
    return out


def rank_counts(quick):
    return [2] if quick else [2, 4]


def run(py, quick, run_json, pythonpath=None, log=None):
    """Every launcher at every rank count: the rows (each with its "route")"""
    return run_turns(py, quick, run_json, [pythonpath], 1, log)[0]


def run_turns(py, quick, run_json, pythonpaths, rounds, log=None, defaults_only=False):
    """Per launcher and rank count, the script under each of pythonpaths in turns (ABBA
    over rounds), so that the builds compared meet the host in the same minute: its
    state drifts over a run. One list of rows per pythonpath."""
    out = [[] for _ in pythonpaths]
    for n in rank_counts(quick):
        for name, argv, env in launchers(py, n, quick, defaults_only):
            for i in range(rounds):
                for j in (range(len(pythonpaths)) if i % 2 == 0 else reversed(range(len(pythonpaths)))):
                    path = pythonpaths[j]
                    if log:
                        log(f"routes under {name} at {n} ranks" + (f" ({path})" if path else ""))
                    e = dict(os.environ, **env)
                    if path:
                        e["PYTHONPATH"] = path + os.pathsep + e.get("PYTHONPATH", "")
                    out[j] += run_json(argv, timeout=1800, env=e)
    return out


def state_of(rows, workload, param):
    """"usual", "apart" or None: the host's state while workload's rows ran at param"""
    rt = [x for r in rows if r["workload"].startswith("roundtrip_routes_") and r["impl"] == workload
          and r["param"] == param for x in r["reps"]]
    if not rt:
        return None
    return "usual" if statistics.median(rt) < USUAL_ROUND_TRIP_NS else "apart"


def print_tables(raw, size_name):
    """One table per routes workload: each impl's median us and route, and the state"""
    workloads = sorted({r["workload"] for r in raw if r["workload"].startswith("routes_")})
    for w in workloads:
        wr = [r for r in raw if r["workload"] == w]
        params = sorted({r["param"] for r in wr})
        impls = list(dict.fromkeys(r["impl"] for r in wr))
        print(f"\n## comm: {w} (median us, and the route taken; ratio = impl / the best explicit setting)")
        head = f"{'impl':<16}" + "".join(f"{size_name(p):>26}" for p in params)
        print(head)
        print("-" * len(head))
        for impl in impls:
            line = f"{impl:<16}"
            for p in params:
                r = next((x for x in wr if x["impl"] == impl and x["param"] == p), None)
                if r is None:
                    line += f"{'-':>26}"
                    continue
                m = statistics.median(r["reps"])
                best = best_setting(wr, p)
                cell = f"{m:.3g} {r.get('route', '?')}" + (f" ({m / best:.2f}x)" if best else "")
                line += f"{cell:>26}"
            print(line)
        print(f"{'state':<16}" + "".join(f"{state_of(raw, w, p) or '-':>26}" for p in params))


def best_row(wr, p):
    rows = [r for r in wr if r["param"] == p and r["impl"] in SETTINGS]
    return min(rows, key=lambda r: statistics.median(r["reps"])) if rows else None


def best_setting(wr, p):
    r = best_row(wr, p)
    return statistics.median(r["reps"]) if r else None


def targets(raw, size_name):
    """Per workload: the default takes the best explicit setting's route, or is no
    slower than ROUTE_SLACK x it (a default on the best one's route is that route, and
    what differs between them is the samples' spread)"""
    lines = []
    for w in sorted({r["workload"] for r in raw if r["workload"].startswith("routes_")}):
        wr = [r for r in raw if r["workload"] == w]
        missed, n = [], 0
        for r in wr:
            best = best_row(wr, r["param"]) if r["impl"] == "numpy/default" else None
            if not best:
                continue
            n += 1
            x = statistics.median(r["reps"]) / statistics.median(best["reps"])
            if x > ROUTE_SLACK and r.get("route") != best.get("route"):
                missed.append(f"{size_name(r['param'])} {x:.2f}x, {r.get('route')} where {best['impl']} took "
                              f"{best.get('route')} ({state_of(raw, w, r['param'])})")
        what = f"{w} default takes the best explicit setting's route or <= {ROUTE_SLACK}x it"
        lines.append(f"{what}: " + (f"missed at {', '.join(missed)}" if missed else f"met at all {n} sizes"))
    return lines


def build_python(root, tree, py, out=None):
    """The package built from the source tree `tree` into out (default tree/python-package,
    kept: a revision's tree does not change); returns out. Given out, it is built anew:
    this checkout may have changed since the last build."""
    if out is None:
        out = os.path.join(tree, "python-package")
        if os.path.exists(os.path.join(out, "lockstep", "__init__.py")):
            return out
    else:
        shutil.rmtree(out, ignore_errors=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", out,
                    tree], check=True, capture_output=True)
    return out


def against(before, after, size_name):
    """Lines comparing the default rows of two sets of runs, per state"""
    def med(raw):  # the median of each launch's median: one launch's placement can be slow
        runs = {}
        for r in raw:
            if r["workload"].startswith("routes_"):
                runs.setdefault((r["workload"], r["impl"], r["param"]), []).append(statistics.median(r["reps"]))
        return {k: statistics.median(v) for k, v in runs.items()}
    mb, ma = med(before), med(after)
    lines, worse = [], []
    for key, a in sorted(ma.items()):
        w, impl, p = key
        if not impl.endswith("/default") or key not in mb:
            continue
        sb, sa = state_of(before, w, p), state_of(after, w, p)
        state = sa if sb is None else sb if sb == sa else None  # a build without the probe: the other's
        lines.append(f"{w:<44} {impl:<15} {size_name(p):>8} {mb[key]:>10.3g} {a:>10.3g} {a / mb[key]:>6.2f}x "
                     f"{state or 'mixed'}")
        if state and a > AGAINST_LIMIT * mb[key]:
            worse.append(f"{w} {impl} {size_name(p)} {a / mb[key]:.2f}x ({state})")
    verdict = (f"routes: every default row <= {AGAINST_LIMIT}x before, in the state both ran in: "
               + (f"missed: {'; '.join(worse)}" if worse else "met"))
    return lines, verdict
