"""One rank of test_torch_ops_cpp's comparison, started by lockstep.launch:
    torch_ops_results.py OUT_DIR
Runs every torch.ops.lockstep op (and torch.distributed's gloo where it has the same
collective) on inputs fixed by the rank, and saves {name: tensor} to
OUT_DIR/<backend>-<rank>.pt, backend being lockstep.torch_ops.backend."""
import os
import sys

import torch
import torch.distributed as dist

import lockstep
import lockstep.torch_ops as lt


def inputs(rank, dtype):
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(6, 4, generator=g) * 100
    return x.to(dtype) if dtype.is_floating_point else (x * 1000).to(dtype)


def main():
    out_dir = sys.argv[1]
    comm = lockstep.Comm.from_env(timeout=60)
    dist.init_process_group("gloo")
    h, n, me = lt.register(comm), comm.size, comm.rank
    ops = torch.ops.lockstep
    res = {}
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32):
        k = str(dtype).split(".")[1]
        x = inputs(me, dtype)
        for op in ("sum", "max", "min"):
            t = x.clone()
            ops.all_reduce_(t, h, op)
            res[f"all_reduce_/{k}/{op}"] = t
            res[f"all_reduce/{k}/{op}"] = ops.all_reduce(x, h, op)
            res[f"reduce_scatter/{k}/{op}"] = ops.reduce_scatter(x, h, op, 0)
            res[f"reduce_scatter_dim1/{k}/{op}"] = ops.reduce_scatter(x, h, op, 1)
        strided = x.clone().t()  # not contiguous: through a copy, written back
        ops.all_reduce_(strided, h, "sum")
        res[f"all_reduce_strided/{k}"] = strided
        t = x.clone()
        ops.broadcast_(t, h, n - 1)
        res[f"broadcast_/{k}"] = t
        res[f"broadcast/{k}"] = ops.broadcast(x, h, 0)
        res[f"all_gather/{k}"] = ops.all_gather(x, h, 0)
        res[f"all_gather_dim1/{k}"] = ops.all_gather(x, h, -1)
        res[f"all_to_all/{k}"] = ops.all_to_all(x, h, 0, 1)
        res[f"all_to_all_10/{k}"] = ops.all_to_all(x, h, 1, 0)
        if dtype in (torch.float32, torch.int32):  # gloo's, reduced in the dtype itself
            for op, rop in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX)):
                t = x.clone()
                dist.all_reduce(t, rop)
                res[f"gloo/all_reduce/{k}/{op}"] = t
            parts = [torch.empty(6, 4, dtype=dtype) for _ in range(n)]
            dist.all_gather(parts, x)
            res[f"gloo/all_gather/{k}"] = torch.cat(parts, 0)
            recv = torch.empty(6 // n, 4, dtype=dtype)
            dist.reduce_scatter_tensor(recv, x)
            res[f"gloo/reduce_scatter/{k}/sum"] = recv
    torch.save(res, os.path.join(out_dir, f"{lt.backend}-{me}.pt"))
    lt.unregister(h)
    dist.destroy_process_group()
    comm.close()


if __name__ == "__main__":
    main()
