"""lockstep from torch against what torch users run today, in the same processes,
interleaved. Run by `lockstep bench comm` when torch is importable, as:
    python -m lockstep.launch -n N bench_torch.py [quick]
and again as torch users launch ranks (the allreduce rows only; their workloads end in
"_torchrun"):
    torchrun --nproc_per_node 2 bench_torch.py [quick] torchrun
Rank 0 prints rows {"workload": "allreduce_torch_<N>r" (f32) or "allreduce_torch_bf16_<N>r",
"impl", "param": bytes, "unit": "us", "reps": [...]}: a sum, in place on a CPU tensor of
param bytes, 4 B to 16 MiB (1 MiB with quick), by
  deepspeed-shm   deepspeed.comm.inference_all_reduce(t): DeepSpeed's shared-memory
                  allreduce (a C++ op), when deepspeed is installed. Its bf16 kernel needs
                  AVX-512BW; without it DeepSpeed calls gloo, so the bf16 row is left out
                  (a note row says which level DeepSpeed found)
  lockstep-op     torch.ops.lockstep.all_reduce_(t, handle), the op torch.compile keeps
                  (the C++ kernels, or the Python ones where they could not be built: a
                  note row says which)
  lockstep-dist   torch.distributed.all_reduce(t, group=g), g a lockstep group
  lockstep        lockstep.Comm.allreduce(t)
  lockstep-buffer lockstep.Comm.allreduce(z), z a tensor in comm.buffer(): zero-copy
  torch-op-floor  torch.ops.lockstep._noop_(t, handle): an op of the same extension that
                  does nothing, torch's dispatch and no more, called back to back
  noop+lockstep   _noop_(t, handle), then lockstep.Comm.allreduce(t): the op's floor in the
                  state the op runs in. After a large collective, torch's dispatch path
                  has left the caches and costs several times torch-op-floor, and more
                  the larger the transfer that pushed it out; the op can cost no less
  torch-floor     torch.distributed.all_reduce(t, group=f), f a group of torch's own "fake"
                  back end, which does nothing: torch.distributed's cost and no more
  gloo            torch.distributed.all_reduce(t) on gloo
and rows {"workload": "<the allreduce workload> op-over-floor", "impl": "lockstep-op"}: the
op's own cost, lockstep-op minus noop+lockstep batch by batch (the two run back to
back in each round, so drift between rounds cancels; the difference of the two rows'
medians carries it whole), and rows {"workload": "tp_mlp_<N>r", "impl": "eager" or "compiled", "param": the hidden
size, "unit": "us"}: one step of a two-layer tensor-parallel MLP (f32, 4 tokens, the
first matrix split by columns and the second by rows, torch.ops.lockstep.all_reduce_
after each layer; hidden 256 with 1024 inner, and a 7B model's 4096 with 11008), eager
and under torch.compile (inductor, fullgraph), and the same step without the
all_reduce ("eager-alone", "compiled-alone"): torch.compile's own cost per call.
Each sample is the mean of a batch of about 20 ms started together (a lockstep barrier)
as seen by the slowest rank; the batches of every impl alternate, in an order that turns
each round, so drift on a shared host and a slow neighbour hit all alike. One thread per rank (OMP_NUM_THREADS=1), as tensor-parallel ranks
that fill the cores run: with more, DeepSpeed's OpenMP kernels and torch's thread pools
oversubscribe the CPUs."""
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")  # there is no GPU to find
os.environ.setdefault("LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1"))  # DeepSpeed's shm op crashes without it

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import lockstep  # noqa: E402
import lockstep.distributed  # noqa: E402,F401 (registers the "lockstep" back end)
import lockstep.torch_ops as lt  # noqa: E402

REPS = 9
BATCH_US = 20000  # per batch: long enough that the ranks' start skew (a scheduler
                  # time slice when ranks outnumber CPUs) is a small part of it


def iters_for(us_per_call):
    return max(4, min(5000, int(BATCH_US / max(us_per_call, 1e-3))))


def init():
    """The default group (gloo), through DeepSpeed when it is installed; DeepSpeed's
    module and its shm kernel level (None without it)"""
    try:
        import deepspeed
        import deepspeed.comm as dc
    except ImportError:
        dist.init_process_group("gloo")
        return None, None
    deepspeed.init_distributed(dist_backend="gloo")
    level = getattr(dc.comm.cdb, "shm_vector_kernel_level", 0)
    return dc, level


def fake_group():
    """A group of torch's do-nothing back end, or None where this torch has none"""
    try:
        import torch.testing._internal.distributed.fake_pg  # noqa: F401 (registers "fake")
        return dist.new_group(backend="fake")
    except (ImportError, RuntimeError, ValueError):
        return None


def tp_mlp(comm, handle, batch, quick):
    """The tp_mlp rows (see above), printed by rank 0"""
    torch.manual_seed(0)
    for hidden, inner in [(256, 1024)] + ([] if quick else [(4096, 11008)]):
        w1 = torch.randn(hidden, inner // comm.size) / hidden ** 0.5
        w2 = torch.randn(inner // comm.size, hidden) / inner ** 0.5
        x = torch.randn(4, hidden)

        def step(x, reduce=True):
            for _ in range(2):
                y = torch.relu(x @ w1) @ w2  # this rank's part of the layer's output
                if reduce:
                    torch.ops.lockstep.all_reduce_(y, handle, "sum")
                x = x + y
            return x

        def alone(x):
            return step(x, False)

        with torch.inference_mode():
            impls = {"eager": step, "compiled": torch.compile(step, fullgraph=True),
                     "eager-alone": alone, "compiled-alone": torch.compile(alone, fullgraph=True)}
            for f in impls.values():  # compiles here; warm, each path's time sets its batch
                batch(f, x, 2)
            iters = {name: iters_for(batch(f, x, 2)) for name, f in impls.items()}
            reps = {name: [] for name in impls}
            for _ in range(REPS):
                for name, f in impls.items():
                    reps[name].append(batch(f, x, iters[name]))
        if comm.rank == 0:
            for name, r in reps.items():
                print(json.dumps({"workload": f"tp_mlp_{comm.size}r", "impl": name, "param": hidden, "unit": "us",
                                  "reps": r}), flush=True)


def main():
    quick = "quick" in sys.argv[1:]
    suffix = "_torchrun" if "torchrun" in sys.argv[1:] else ""
    max_bytes = (1 << 20) if quick else (16 << 20)
    comm = lockstep.Comm.from_env(timeout=120, buffer_bytes=max_bytes)
    dc, level = init()
    group = dist.new_group(backend="lockstep")
    fake = fake_group()
    handle = lt.register(comm)
    slowest = np.zeros(1, np.float32)
    if comm.rank == 0:
        print(json.dumps({"note": "torch_ops", "ranks": comm.size, "value": lt.backend}))
        print(json.dumps({"note": "deepspeed_shm_level", "ranks": comm.size,
                          "value": "absent" if dc is None else level}), flush=True)

    def batch(call, t, iters):
        comm.barrier()
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            call(t)
        slowest[0] = (time.perf_counter_ns() - t0) / iters / 1000
        comm.allreduce(slowest, op="max")
        return float(slowest[0])

    SUM = dist.ReduceOp.SUM
    impls = {
        "deepspeed-shm": lambda t: dc.inference_all_reduce(t, SUM),
        "lockstep-op": lambda t: torch.ops.lockstep.all_reduce_(t, handle, "sum"),
        "lockstep-dist": lambda t: dist.all_reduce(t, group=group),
        "lockstep": lambda t: comm.allreduce(t),
        "lockstep-buffer": lambda t: comm.allreduce(t),  # given the tensor in the buffer
        "torch-op-floor": lambda t: torch.ops.lockstep._noop_(t, handle),
        "noop+lockstep": lambda t: (torch.ops.lockstep._noop_(t, handle), comm.allreduce(t)),
        "torch-floor": lambda t: dist.all_reduce(t, group=fake),
        "gloo": lambda t: dist.all_reduce(t),
    }
    for dtype, workload, min_level in [(torch.float32, f"allreduce_torch_{comm.size}r{suffix}", 1),
                                       (torch.bfloat16, f"allreduce_torch_bf16_{comm.size}r{suffix}", 2)]:
        names = [n for n in impls if not (n == "deepspeed-shm" and (dc is None or level < min_level))
                 and not (n == "torch-floor" and fake is None)]
        es = torch.tensor([], dtype=dtype).element_size()
        nbytes = 4
        while nbytes <= max_bytes:
            t = torch.zeros(max(nbytes // es, 1), dtype=dtype)  # zeros: sums stay zero, no denormals
            z = comm.buffer(t.numel(), dtype)
            z.zero_()
            arg = {name: z if name == "lockstep-buffer" else t for name in names}
            reps = {name: [] for name in names}
            # warm up every path, then its time per call (the slowest rank's, so the same
            # on every rank) sets its batch length: the first path's, taken cold, was long
            # and made its batches short
            for name in names:
                batch(impls[name], arg[name], 4)
            iters = {name: iters_for(batch(impls[name], arg[name], 4)) for name in names}
            for r in range(REPS):
                # the order turns by one each round: the batch after a slow neighbour's
                # (gloo's leaves the ranks' CPUs disturbed for a while) falls to each impl
                # at most once, which the median drops
                for name in names[r % len(names):] + names[:r % len(names)]:
                    reps[name].append(batch(impls[name], arg[name], iters[name]))
            if comm.rank == 0:
                for name, r in reps.items():
                    print(json.dumps({"workload": workload, "impl": name,
                                      "param": t.nbytes, "unit": "us", "reps": r}), flush=True)
                if "lockstep-op" in reps and "noop+lockstep" in reps:
                    paired = [a - b for a, b in zip(reps["lockstep-op"], reps["noop+lockstep"])]
                    print(json.dumps({"workload": f"{workload} op-over-floor", "impl": "lockstep-op",
                                      "param": t.nbytes, "unit": "us", "reps": paired}), flush=True)
            del z, arg  # the views go before close()
            nbytes *= 4
    if not suffix:
        tp_mlp(comm, handle, batch, quick)
    lt.unregister(handle)
    dist.destroy_process_group()
    comm.close()


if __name__ == "__main__":
    main()
