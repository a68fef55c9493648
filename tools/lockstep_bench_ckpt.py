"""`lockstep bench load`'s sharded-checkpoint rows (bench/load/bench_py_ckpt.py): lockstep
loading a directory of safetensors shards into torch tensors beside the safetensors
package file by file and the disk's direct-read ceiling, cold and warm, and the
targets of issue 73 judged on them."""
import os

IMPLS = ["lockstep-shards", "lockstep-shards-alias", "safetensors.torch", "direct-read"]
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "load",
                      "bench_py_ckpt.py")

# (impl, state, against, at least): lockstep's GB/s over the other's
TARGETS = [("lockstep-shards", "cold", "direct-read", 0.9),
           ("lockstep-shards", "cold", "safetensors.torch", 1.5),
           ("lockstep-shards", "warm", "safetensors.torch", 1.0),
           ("lockstep-shards-alias", "warm", "safetensors.torch", 3.0)]


def measure(py, folder, exe, rep, run_json):
    """One round of every impl in both states (the order alternating by round); rows"""
    rows = []
    for state in ["cold", "warm"]:
        for impl in (IMPLS if rep % 2 == 0 else IMPLS[::-1]):
            rows += run_json([py, SCRIPT, impl, folder, state, exe])
    return rows


def targets(rows):
    """A line per target, met or missed with its figure"""
    def median(impl, state):
        r = next((r for r in rows if r["workload"] == f"shards {state} GB/s" and r["impl"] == impl), None)
        return r["median"] if r else None
    lines = []
    for impl, state, other, least in TARGETS:
        a, b = median(impl, state), median(other, state)
        what = f"shards {state}: {impl} >= {least}x {other}"
        lines.append(f"{what}: " + ("not measured" if a is None or b is None
                                    else f"{'met' if a >= least * b else 'missed'} ({a / b:.2f}x, "
                                         f"{a:.2f} against {b:.2f} GB/s)"))
    return lines
