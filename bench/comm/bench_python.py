"""The Python call's overhead over the C call, in the same processes, interleaved.
Run by `lockstep bench comm` as: python -m lockstep.launch -n N bench_python.py
Rank 0 prints rows {"workload": "python_overhead_<N>r", "impl": ..., "param": bytes,
"unit": "us", "reps": [...]}: impl "c" and "python" for allreduce (the target's rows),
"c-<call>" and "python-<call>" for broadcast, allgather, alltoall and reduce_scatter,
each on numpy float32 arrays (param: the bytes of the call's buffer, allgather's send)."""
import json
import time

import numpy as np

import lockstep

REPS, ITERS = 15, 1500  # many short batches: a median that survives a preempted rank


def python_call(c, call, count):
    """the Python call of `call` on count floats, as bench_call makes it in C"""
    a = np.zeros(count, np.float32)
    recv = np.zeros(count * c.size if call == "allgather" else count // c.size if call == "reduce_scatter"
                    else count, np.float32)
    return {"allreduce": lambda: c.allreduce(a), "broadcast": lambda: c.broadcast(a),
            "allgather": lambda: c.allgather(a, recv), "alltoall": lambda: c.alltoall(a, recv),
            "reduce_scatter": lambda: c.reduce_scatter(a, recv)}[call]


def main():
    c = lockstep.Comm.from_env(timeout=60)
    cases = [("allreduce", 16), ("allreduce", 1024)] + [(call, 16) for call in
                                                        ("broadcast", "allgather", "alltoall", "reduce_scatter")]
    for call, count in cases:
        f = python_call(c, call, count)
        py, cc = [], []
        c._c.bench_call(call, count, 200)  # warm up both paths
        for _ in range(200):
            f()
        for _ in range(REPS):
            c.barrier()
            t0 = time.perf_counter_ns()
            for _ in range(ITERS):
                f()
            py.append((time.perf_counter_ns() - t0) / ITERS / 1000)
            c.barrier()
            cc.append(c._c.bench_call(call, count, ITERS) / 1000)
        if c.rank == 0:
            suffix = "" if call == "allreduce" else f"-{call}"
            for impl, reps in (("c" + suffix, cc), ("python" + suffix, py)):
                print(json.dumps({"workload": f"python_overhead_{c.size}r", "impl": impl,
                                  "param": count * 4, "unit": "us", "reps": reps}), flush=True)
    c.close()


if __name__ == "__main__":
    main()
