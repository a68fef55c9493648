"""`lockstep bench load`'s sharded-checkpoint rows (bench/load/bench_py_ckpt.py): lockstep
loading a directory of safetensors shards into torch tensors beside the safetensors
package file by file and the disk's direct-read ceiling, cold and warm, and the
targets of issue 73 judged on them."""
import os

IMPLS = ["lockstep-shards", "lockstep-shards-alias", "lockstep-shards-to-f32", "lockstep-tp2", "safetensors.torch",
         "direct-read", "direct-read-fresh", "map-touch"]
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "load",
                      "bench_py_ckpt.py")

# (impl, state, against, at least): lockstep's GB/s over the other's. Alias mode's 3x
# load_file lies past the floor, as load_file maps the file too: both pay the first
# touch of every page, which is most of a warm load. Restated against the floor
# measured in the same run (map-touch: the shards mapped and touched, no parsing):
# alias meets it at >= ALIAS_FLOOR x the floor's GB/s (<= 1.25x its time).
ALIAS_FLOOR = 0.8
TARGETS = [("lockstep-shards", "cold", "direct-read", 0.9),
           ("lockstep-shards", "cold", "safetensors.torch", 1.5),
           ("lockstep-shards", "warm", "safetensors.torch", 1.0),
           ("lockstep-shards-alias", "warm", "safetensors.torch", 3.0),
           # bf16/f16 -> f32 while loading, against the same load without conversion,
           # from disk; warm, both are memory-bound and converting writes twice the
           # bytes into fresh pages the kernel must zero first (half the cycles)
           ("lockstep-shards-to-f32", "cold", "lockstep-shards", 0.8)]
# two ranks loading their rows at once: together they read at most this much of the
# checkpoint, and the slower rank takes at most 0.65x one full load's time, or, where
# the disk is the limit (both ranks share it), 1.25x the time the disk needs for the
# checkpoint at its direct-read ceiling (issue 73's target restated against that floor)
TP_READ, TP_TIME, TP_FLOOR = 1.05, 0.65, 1.25


def measure(py, folder, exe, rep, run_json):
    """One round of every impl in both states; rows. The order turns by one each round:
    the first warm load after the cold ones runs slow (both mappings measured 30-59
    GB/s there against 60-78 elsewhere), and that place falls to each impl at most once
    in a run, which the median drops."""
    rows = []
    order = IMPLS[rep % len(IMPLS):] + IMPLS[:rep % len(IMPLS)]
    for state in ["cold", "warm"]:
        for impl in order:
            if (impl != "direct-read-fresh" or state == "cold") and (impl != "map-touch" or state == "warm"):
                rows += run_json([py, SCRIPT, impl, folder, state, exe])  # floors: new memory cold, a mapping warm
    return rows


def targets(rows):
    """A line per target, met or missed with its figure"""
    def median(impl, state, unit="GB/s"):
        r = next((r for r in rows if r["workload"] == f"shards {state} {unit}" and r["impl"] == impl), None)
        return r["median"] if r else None
    lines = []
    floor = median("map-touch", "warm")
    for impl, state, other, least in TARGETS:
        a, b = median(impl, state), median(other, state)
        what = f"shards {state}: {impl} >= {least}x {other}"
        if a is None or b is None:
            lines.append(f"{what}: not measured")
            continue
        line = f"{what}: {'met' if a >= least * b else 'missed'} ({a / b:.2f}x, {a:.2f} against {b:.2f} GB/s)"
        if impl == "lockstep-shards-alias" and floor and a < least * b and least * b > floor:
            line = (f"{what}, past the floor (map-touch {floor:.2f} GB/s: {least * b / floor:.2f}x it), restated "
                    f">= {ALIAS_FLOOR}x the floor: {'met' if a >= ALIAS_FLOOR * floor else 'missed'} "
                    f"({a / floor:.2f}x the floor, {a / b:.2f}x {other})")
        lines.append(line)
    ours, fresh = median("lockstep-shards", "cold"), median("direct-read-fresh", "cold")
    if ours and fresh:  # the reads into new memory, first touch included: reported
        lines.append(f"shards cold: lockstep-shards against direct reads into new memory (direct-read-fresh): "
                     f"{ours / fresh:.2f}x ({ours:.2f} against {fresh:.2f} GB/s), reported")
    read = median("lockstep-tp2", "cold", "read/size")
    lines.append(f"shards cold: lockstep-tp2 reads <= {TP_READ}x the checkpoint: " +
                 ("not measured" if read is None else f"{'met' if read <= TP_READ else 'missed'} ({read:.3f}x)"))
    tp, full, ceiling = (median(i, "cold") for i in ("lockstep-tp2", "lockstep-shards", "direct-read"))
    if None in (tp, full, ceiling):
        lines.append("shards cold: lockstep-tp2's slower rank: not measured")
    else:  # times are bytes / GB/s: the slower rank's over one full load's, and over the floor's
        t_full, t_floor = full / tp, ceiling / tp
        met = t_full <= TP_TIME or t_floor <= TP_FLOOR
        lines.append(f"shards cold: lockstep-tp2's slower rank <= {TP_TIME}x one full load or <= {TP_FLOOR}x "
                     f"the disk's time for the checkpoint: {'met' if met else 'missed'} ({t_full:.2f}x the "
                     f"full load, {t_floor:.2f}x the disk's time)")
    return lines
