"""The collectives as users meet them: called from Python on memory the caller owns,
with the ranks started the way users start them, the default route beside each
explicit setting, every row with the host's state while it ran.

Run by `lockstep bench comm`, once per launcher:
    python -m lockstep.launch -n N bench_routes.py lockstep.launch [quick] [defaults]
    torchrun --nproc_per_node N bench_routes.py torchrun [quick] [defaults]
    mpirun -n N python bench_routes.py mpirun [quick] [defaults]
("defaults": the */default rows only, as `bench comm --against` compares them: the same
rows under both builds, so that each batch runs among the same neighbours.)
Rank 0 prints rows {"workload": "routes_<call>_<N>r_<launcher>", "impl", "param": bytes
(a rank's message; allgather and all-to-all: one block), "unit": "us", "reps": [...],
"route": the route the impl's calls took}. impl is <memory>/<setting>:
  numpy/default   a numpy array, the communicator as created by default
  numpy/close     the same with distance="close": the close routes whatever the probe says
  numpy/far       distance="far": the far routes (kernel copies from the far windows)
  numpy/slots     kernel_copy="off": the slots (and zero-copy) only
  torch/default   a torch tensor (where torch is installed), allreduce only
  buffer/default  a view of comm.buffer() on every rank: zero-copy
The default is right when it is no slower than the best explicit setting.
Rows {"workload": "roundtrip_routes_<N>r_<launcher>", "impl": <the routes_ workload>,
"param": bytes, "unit": "ns", "reps": [...]}: the round trip between rank 0 and rank 1
as the default communicator's latest probe measured it (every 1024 calls), read after
each round of batches: the host's state (the C benchmark's roundtrip_<N>r rows time
the same trip between MPI ranks).
Each sample is the mean of a batch of about 10 ms started together (a barrier), as seen
by the slowest rank; the impls' batches alternate, so drift hits all alike."""
import json
import os
import random
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import lockstep  # noqa: E402

REPS = 7
BATCH_US = 10000
BUFFER_BYTES = 64 << 20  # per rank: the buffer rows stop where a call's send and recv do not fit
SETTINGS = {"default": {}, "close": {"distance": "close"}, "far": {"distance": "far"},
            "slots": {"kernel_copy": "off"}}
CALLS = ("allreduce", "reduce_scatter", "alltoall", "broadcast", "allgather")


def iters_for(us_per_call):
    return max(3, min(3000, int(BATCH_US / max(us_per_call, 1e-3))))


def sizes(quick):
    top = (1 << 20) if quick else (16 << 20)
    n, out = 4096, []
    while n <= top:
        out.append(n)
        n *= 4
    return out


def call_of(comm, call, a, recv):
    """the collective `call` on a (count float32 per rank's message) into recv"""
    if call == "allreduce":
        return lambda: comm.allreduce(a)
    if call == "reduce_scatter":
        return lambda: comm.reduce_scatter(a, recv)
    if call == "alltoall":
        return lambda: comm.alltoall(a, recv)
    if call == "broadcast":
        return lambda: comm.broadcast(a)
    return lambda: comm.allgather(a, recv)


def shapes(call, nbytes, size):
    """(send elements, recv elements) of float32 for a message of nbytes"""
    n = nbytes // 4
    if call == "reduce_scatter":
        return n * size, n
    if call in ("alltoall",):
        return n * size, n * size
    if call == "allgather":
        return n, n * size
    return n, n


def main():
    launcher = sys.argv[1] if len(sys.argv) > 1 else "lockstep.launch"
    quick = "quick" in sys.argv[2:]
    defaults_only = "defaults" in sys.argv[2:]
    base = lockstep.Comm.from_env(timeout=120, buffer_bytes=BUFFER_BYTES)  # the default, with the buffer
    comms = {"default": base}
    for name, kw in SETTINGS.items():
        if name == "default" or defaults_only:
            continue
        try:  # a build before the setting existed (bench --against) leaves its rows out
            comms[name] = lockstep.Comm(f"{base.job}-{name}", base.rank, base.size, timeout=120, **kw)
        except TypeError:
            pass
    try:
        import torch
    except ImportError:
        torch = None
    slowest = np.zeros(1, np.float32)

    def batch(comm, f, iters):
        base.barrier()
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            f()
        slowest[0] = (time.perf_counter_ns() - t0) / iters / 1000
        route = getattr(comm, "route", "?")  # before the allreduce of the times, base's last call
        base.allreduce(slowest, op="max")
        return float(slowest[0]), route

    size, rank = base.size, base.rank
    for call in CALLS:
        workload = f"routes_{call}_{size}r_{launcher}"
        for nbytes in sizes(quick):
            ns, nr = shapes(call, nbytes, size)
            a = np.zeros(ns, np.float32)  # zeros: sums stay zero, no denormals
            recv = np.zeros(nr, np.float32)
            impls = {f"numpy/{name}": (c, call_of(c, call, a, recv)) for name, c in comms.items()}
            if torch is not None and call == "allreduce":
                t = torch.zeros(ns)
                impls["torch/default"] = (base, call_of(base, call, t, None))
            za = zr = None
            if (ns + nr) * 4 <= BUFFER_BYTES:
                za = base.buffer(ns, "float32")
                zr = base.buffer(nr, "float32", offset=ns * 4)
                za[:] = 0
                impls["buffer/default"] = (base, call_of(base, call, za, zr))
            for c, f in impls.values():  # every impl warm before any is timed: the first
                batch(c, f, 3)  # one's time per call, taken cold, made its batches short
            iters = {k: iters_for(batch(c, f, 3)[0]) for k, (c, f) in impls.items()}
            reps = {k: [] for k in impls}
            routes, trips = {}, []
            for i in range(REPS):  # shuffled, the same on every rank: the batch after the
                # buffer rows' ran up to 1.5x slower at 16 MiB, so no impl always follows it
                order = list(impls.items())
                random.Random(i).shuffle(order)
                for k, (c, f) in order:
                    us, routes[k] = batch(c, f, iters[k])
                    reps[k].append(us)
                trips.append(base.distance[1] if hasattr(base, "distance") else 0)
            if rank == 0:
                for k, r in reps.items():
                    print(json.dumps({"workload": workload, "impl": k, "param": nbytes, "unit": "us", "reps": r,
                                      "route": routes[k]}), flush=True)
                if any(trips):
                    print(json.dumps({"workload": f"roundtrip_routes_{size}r_{launcher}", "impl": workload,
                                      "param": nbytes, "unit": "ns", "reps": [x for x in trips if x]}), flush=True)
            del za, zr, impls  # the views go before close()
    for name, c in comms.items():
        if name != "default":
            c.close()
    base.close()


if __name__ == "__main__":
    main()
