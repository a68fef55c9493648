"""The Python call's overhead over the C call, in the same processes, interleaved.
Run by `lockstep bench comm` as: python -m lockstep.launch -n N bench_python.py
Rank 0 prints rows {"workload": "python_overhead_<N>r", "impl": "c" | "python",
"param": bytes, "unit": "us", "reps": [...]}."""
import json
import time

import numpy as np

import lockstep

REPS, ITERS = 15, 1500  # many short batches: a median that survives a preempted rank


def main():
    c = lockstep.Comm.from_env(timeout=60)
    for count in (16, 1024):
        a = np.zeros(count, np.float32)
        py, cc = [], []
        c._c.bench_allreduce(count, 200)  # warm up both paths
        for _ in range(200):
            c.allreduce(a)
        for _ in range(REPS):
            c.barrier()
            t0 = time.perf_counter_ns()
            for _ in range(ITERS):
                c.allreduce(a)
            py.append((time.perf_counter_ns() - t0) / ITERS / 1000)
            c.barrier()
            cc.append(c._c.bench_allreduce(count, ITERS) / 1000)
        if c.rank == 0:
            for impl, reps in (("c", cc), ("python", py)):
                print(json.dumps({"workload": f"python_overhead_{c.size}r", "impl": impl,
                                  "param": count * 4, "unit": "us", "reps": reps}), flush=True)
    c.close()


if __name__ == "__main__":
    main()
