"""lockstep against torch.distributed's gloo back end, from torch, in the same processes,
interleaved. Run by `lockstep bench comm` when torch is importable, as:
    python -m lockstep.launch -n N bench_torch.py [quick]
Rank 0 prints rows {"workload": "allreduce_torch_<N>r", "impl", "param": bytes, "unit": "us",
"reps": [...]}, f32 sum, in place on a torch CPU tensor, and the same for bf16 tensors
("allreduce_torch_bf16_<N>r", the message size in bytes again, without lockstep-op):
  gloo        torch.distributed.all_reduce(t) on a gloo process group
  lockstep    lockstep.Comm.allreduce(t)
  lockstep-op torch.ops.lockstep.all_reduce_(t, handle), the custom op torch.compile keeps
  lockstep-buffer lockstep.Comm.allreduce(z), z a tensor from comm.buffer(): zero-copy
  lockstep-dist torch.distributed.all_reduce(t, group=g), g a group of lockstep's
              torch.distributed back end (lockstep.distributed): gloo's call, another back end
Each sample is the mean of a batch of about 20 ms started together (a lockstep barrier)
as seen by the slowest rank; batches of the three alternate, so drift on a shared host
hits all alike."""
import json
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import lockstep
import lockstep.distributed  # noqa: F401 (registers the "lockstep" back end)
import lockstep.torch_ops as lt

REPS = 9


BATCH_US = 20000  # per batch: long enough that the ranks' start skew (a scheduler
                  # time slice when ranks outnumber CPUs) is a small part of it


def iters_for(us_per_call):
    return max(4, min(5000, int(BATCH_US / max(us_per_call, 1e-3))))


def main():
    quick = len(sys.argv) > 1 and sys.argv[1] == "quick"
    max_bytes = (1 << 20) if quick else (16 << 20)
    comm = lockstep.Comm.from_env(timeout=120, buffer_bytes=max_bytes)
    dist.init_process_group("gloo")
    group = dist.new_group(backend="lockstep")
    handle = lt.register(comm)
    slowest = np.zeros(1, np.float32)

    def batch(call, t, iters):
        comm.barrier()
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            call(t)
        slowest[0] = (time.perf_counter_ns() - t0) / iters / 1000
        comm.allreduce(slowest, op="max")
        return float(slowest[0])

    impls = {
        "gloo": lambda t: dist.all_reduce(t),
        "lockstep": lambda t: comm.allreduce(t),
        "lockstep-op": lambda t: torch.ops.lockstep.all_reduce_(t, handle, "sum"),
        "lockstep-buffer": lambda t: comm.allreduce(t),  # given the tensor in the buffer
        "lockstep-dist": lambda t: dist.all_reduce(t, group=group),
    }
    # bf16: what tensor-parallel inference reduces; sizes in bytes as for f32
    for dtype, workload, names in [
            (torch.float32, f"allreduce_torch_{comm.size}r", list(impls)),
            (torch.bfloat16, f"allreduce_torch_bf16_{comm.size}r", ["gloo", "lockstep", "lockstep-buffer", "lockstep-dist"])]:
        es = torch.tensor([], dtype=dtype).element_size()
        nbytes = 4
        while nbytes <= max_bytes:
            t = torch.zeros(nbytes // es, dtype=dtype)  # zeros: sums stay zero, no denormals
            z = comm.buffer(nbytes // es, dtype)
            z.zero_()
            arg = {name: z if name == "lockstep-buffer" else t for name in names}
            reps = {name: [] for name in names}
            # warm up every path; the time per call (the slowest rank's, so the same on
            # every rank) sets each one's batch length
            iters = {name: iters_for(batch(impls[name], arg[name], 4)) for name in names}
            for _ in range(REPS):
                for name in names:
                    reps[name].append(batch(impls[name], arg[name], iters[name]))
            if comm.rank == 0:
                for name, r in reps.items():
                    print(json.dumps({"workload": workload, "impl": name,
                                      "param": nbytes, "unit": "us", "reps": r}), flush=True)
            del z, arg  # the views go before close()
            nbytes *= 4
    lt.unregister(handle)
    dist.destroy_process_group()
    comm.close()


if __name__ == "__main__":
    main()
