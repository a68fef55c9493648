"""`lockstep bench comm --against REV`: the collectives of this checkout against those of
another revision, in the same run.

Both libraries are built (REV in a git worktree under build/against-<sha>), and their
comm benchmarks run in turns, round after round, at every rank count, so that both see
the host in the same states. Each lockstep row (workload, impl, size) gets the median
of its samples over all rounds, before and after, and the ratio after / before; the
OpenMPI rows of both runs together give the baseline. A rank count's rows are judged
only where the round trip between the CPUs was in the usual state (under
USUAL_ROUND_TRIP_NS) in both builds' rounds, and by the ratio over the same table's
OpenMPI ratio, after / before: OpenMPI's batches ran beside lockstep's in each launch,
so its ratio is the host's drift between the two builds' launches (the usual state
has faster and slower spells, which otherwise read as a change of build).
"""
import os
import statistics
import subprocess

from lockstep_common import USUAL_ROUND_TRIP_NS

COLLECTIVES = ("allreduce", "reduce_scatter", "alltoall", "bcast", "allgather")
# the most after / before may be: ranks that fit the CPUs, and more ranks than CPUs
LIMIT_FITS, LIMIT_OVERSUBSCRIBED = 1.15, 1.5


def build_revision(root, rev, target="lockstep_bench_comm"):
    """Build REV's target (its comm benchmark) beside this checkout; returns its build
    directory."""
    sha = subprocess.run(["git", "-C", root, "rev-parse", "--short", rev], check=True, capture_output=True,
                         text=True).stdout.strip()
    tree = os.path.join(root, "build", f"against-{sha}")
    build = os.path.join(tree, "build")
    if not os.path.exists(tree):
        subprocess.run(["git", "-C", root, "worktree", "add", "--detach", "-f", tree, sha], check=True,
                       capture_output=True)
    # configured every time: what CMake finds (MPI, a compiler) may have come since
    generator = [] if os.path.exists(os.path.join(build, "CMakeCache.txt")) else ["-G", "Ninja"]
    subprocess.run(["cmake", "-S", tree, "-B", build, *generator, "-DCMAKE_BUILD_TYPE=Release"], check=True,
                   capture_output=True)
    subprocess.run(["cmake", "--build", build, "--target", target], check=True, capture_output=True)
    return sha, build


def run_rounds(run_one, builds, rank_counts, rounds):
    """samples[label][(workload, impl, param)] = reps, the labels' runs taking turns"""
    samples = {label: {} for label, _ in builds}
    for i in range(rounds):
        for n in rank_counts:
            order = builds if i % 2 == 0 else builds[::-1]
            for label, build in order:
                for r in run_one(build, n):
                    if "note" not in r:
                        samples[label].setdefault((r["workload"], r["impl"], r["param"]), []).extend(r["reps"])
    return samples


def ranks_of(workload):
    return int(workload.rsplit("_", 1)[-1].rstrip("r"))


def compare(samples, before, after):
    """rows: (workload, impl, param, before, after, openmpi, usual, drift), drift the
    OpenMPI median after / before in the table, or for a table without OpenMPI rows (a
    forced path, emulated nodes) in its collective's main table at that size (None
    without OpenMPI rows in both builds)"""
    med = {label: {k: statistics.median(v) for k, v in s.items() if v} for label, s in samples.items()}
    rows = []
    for key, a in sorted(med[after].items()):
        w, impl, param = key
        if not impl.startswith("lockstep") or not w.startswith(COLLECTIVES) or key not in med[before]:
            continue
        mpi = [x for label in (before, after) for x in samples[label].get((w, "openmpi", param), [])]
        ref = (w, "openmpi", param)
        if ref not in med[before]:
            ref = (next(c for c in COLLECTIVES if w.startswith(c)) + "_" + w.rsplit("_", 1)[-1], "openmpi", param)
        refs = [med[label].get(ref) for label in (before, after)]
        drift = refs[1] / refs[0] if all(refs) else None
        rt_key = ("roundtrip_" + w.rsplit("_", 1)[-1], w, param)
        rts = [med[label].get(rt_key) for label in (before, after)]
        usual = all(rt is not None and rt < USUAL_ROUND_TRIP_NS for rt in rts)
        rows.append((w, impl, param, med[before][key], a, statistics.median(mpi) if mpi else None, usual, drift))
    return rows


def judged_ratio(row):
    """after / before over the host's drift (compare), or as measured without OpenMPI rows"""
    ratio = row[4] / row[3]
    return ratio / row[7] if row[7] else ratio


def verdicts(rows, cpus, size_name):
    """One line per rank count: the rows past the limits, judged in the usual state"""
    lines = []
    for n in sorted({ranks_of(r[0]) for r in rows}):
        mine = [r for r in rows if ranks_of(r[0]) == n]
        judged = [r for r in mine if r[6]]
        limit = LIMIT_FITS if n <= cpus else LIMIT_OVERSUBSCRIBED
        slower = [r for r in judged if judged_ratio(r) > limit]
        lost = [r for r in judged if r[5] is not None and r[3] <= r[5] < r[4]]
        what = f"{n} ranks: after <= {limit:.2f}x before"
        if n > cpus:
            what += ", and no slower than OpenMPI where before was faster"
        worst = max(judged, key=judged_ratio, default=None)
        head = f"{what}: {len(judged)} of {len(mine)} rows in the usual state"
        if not judged:
            lines.append(head + ": not judged")
            continue
        bad = [f"{r[0]} {r[1]} {size_name(r[2])} {judged_ratio(r):.2f}x" for r in slower]
        if n > cpus:
            bad += [f"{r[0]} {r[1]} {size_name(r[2])} slower than OpenMPI ({r[4]:.3g} against {r[5]:.3g})"
                    for r in lost]
        lines.append(head + (f"; missed: {'; '.join(bad)}" if bad else
                             f"; met (worst {judged_ratio(worst):.2f}x: {worst[0]} {worst[1]} {size_name(worst[2])})"))
    return lines


def print_round_trips(samples):
    """the host's state per build and rank count: the median round trip over all tables"""
    print("\n## round trip between the CPUs, median ns (usual: under "
          f"{USUAL_ROUND_TRIP_NS}), per build")
    for label, s in samples.items():
        per = {}
        for (w, impl, p), reps in s.items():
            if w.startswith("roundtrip_"):
                per.setdefault(w, []).extend(reps)
        print(f"{label:>10}: " + ", ".join(f"{w[10:]} {statistics.median(v):.0f}" for w, v in sorted(per.items())))


def print_table(rows, before, size_name):
    print(f"\n## comm against {before}: median us before and after, after / before, OpenMPI, and"
          " the ratio judged, over OpenMPI's after / before (* = a round trip of 100 ns or more in"
          " some round: not judged)")
    print(f"{'workload':<22}{'impl':<20}{'size':>9}{'before':>10}{'after':>10}{'ratio':>8}{'openmpi':>10}"
          f"{'judged':>8}")
    for r in rows:
        w, impl, p, b, a, mpi, usual = r[:7]
        print(f"{w:<22}{impl:<20}{size_name(p):>9}{b:>10.3g}{a:>10.3g}{a / b:>7.2f}x"
              f"{(f'{mpi:.3g}' if mpi else '-'):>10}{judged_ratio(r):>7.2f}x{'' if usual else ' *'}")
