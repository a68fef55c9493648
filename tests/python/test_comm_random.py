"""Random sequences of lockstep.Comm calls at 2 and 3 ranks, each rank passing its own
kind of container for the same call: numpy arrays and slices of them, plain torch
tensors, tensor subclasses (Python's path), inference tensors, views of the shared
buffer, bytearrays; recv given or made. Whatever each rank passes, every result must
equal the reference computed here, sends must stay as they were, and calls must
return what they were given. Now and then one rank passes a bad argument (it raises
ValueError or TypeError, the others PeerArgumentError, nothing changes, the next call
runs) or disagrees on the count (MismatchError on every rank, here and in the next
call; then a new Comm). tests/comm/test_comm_random.c does the same for the C calls,
with every placement and setting."""
import random

import numpy as np
import pytest

import lockstep
from conftest import run_ranks

try:
    import torch
except ImportError:  # the tensor containers are left out
    torch = None

KINDS = ["allreduce"] * 3 + ["reduce_scatter", "alltoall"] + ["broadcast"] * 2 + ["allgather"] * 2 + ["barrier"]
NP_DTYPES = {"f32": np.float32, "f16": np.float16, "i32": np.int32}
ESIZE = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "u8": 1}


def values(call, rank, n):
    """-11 .. 11: every sum over ranks is exact in every dtype"""
    i = np.arange(n, dtype=np.int64)
    return ((i * 7 + call * 13 + rank * 29) % 23 - 11).astype(np.float64)


def byte_values(call, rank, n):
    i = np.arange(n, dtype=np.int64)
    return ((i * 131 + (i >> 12) * 7 + call * 17 + rank * 101) & 0xFF).astype(np.uint8)


def reduced(op, call, size, n):
    every = np.stack([values(call, r, n) for r in range(size)])
    return {"sum": every.sum(0), "max": every.max(0), "min": every.min(0)}[op]


def as_float64(obj):
    """a container's elements as float64, whatever it is"""
    if torch is not None and isinstance(obj, torch.Tensor):
        return obj.detach().reshape(-1).to(torch.float64).numpy()
    return np.asarray(obj).reshape(-1).astype(np.float64)


def as_bytes(obj):
    if torch is not None and isinstance(obj, torch.Tensor):
        flat = obj.detach().reshape(-1)
        fresh = torch.empty(flat.shape, dtype=flat.dtype)  # strides of its own (a 1-element view's may be 0)
        return fresh.copy_(flat).view(torch.uint8).numpy().tobytes()
    return bytes(memoryview(obj).cast("B")) if not isinstance(obj, np.ndarray) else obj.tobytes()


class Maker:
    """Makes one rank's containers for a call, of its own kind each time"""

    def __init__(self, comm, buffer_bytes, rng):
        self.comm, self.buffer_bytes, self.rng = comm, buffer_bytes, rng
        self.offset = 0  # where the next view of the shared buffer starts

    def kinds(self, dtype):
        in_numpy = dtype != "bf16"
        out = ["np", "np_slice"] if in_numpy else []
        if torch is not None:
            out += ["t", "t_infer", "t_sub"]
        if self.buffer_bytes:
            out += ["buf_np"] if in_numpy else []
            out += ["buf_t"] if torch is not None else []
        if dtype == "u8":
            out += ["bytearray"]
        return out

    def make(self, dtype, data):
        """a container of dtype ("f32", "f16", "bf16", "i32" or "u8") holding data"""
        kind = self.rng.choice(self.kinds(dtype))
        n = len(data)
        start = -(-self.offset // 64) * 64  # of a view of the shared buffer: after this call's others
        if kind.startswith("buf_"):
            if start + n * ESIZE[dtype] > self.buffer_bytes:
                kind = kind[4:]  # no room left in the buffer
            else:
                self.offset = start + n * ESIZE[dtype]
        if kind == "bytearray":
            return bytearray(np.asarray(data, np.uint8).tobytes())
        if kind in ("np", "np_slice", "buf_np"):
            npd = np.uint8 if dtype == "u8" else NP_DTYPES[dtype]
            if kind == "np":
                a = np.empty(n, npd)
            elif kind == "np_slice":
                base = np.empty(n + 7, npd)
                a = base[3:3 + n]
            else:
                a = self.comm.buffer(n, npd, start)
            a[...] = data
            return a
        td = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
              "u8": torch.uint8}[dtype]
        src = torch.from_numpy(np.asarray(data, np.float64)).to(td) if dtype != "u8" else \
            torch.from_numpy(np.asarray(data, np.uint8).copy())
        if kind == "t":
            return src.clone()
        if kind == "t_infer":
            with torch.inference_mode():
                return src.clone()
        if kind == "t_sub":  # a subclass: the Python path
            return torch.nn.Parameter(src.clone(), requires_grad=False)
        return self.comm.buffer(n, td, start).copy_(src)


def settings(seed, gen):
    r = random.Random(f"{seed}/{gen}")
    return dict(small_bytes=r.choice([256, 4096, 262144]), chunk_bytes=r.choice([4096, 65536, 1 << 20]),
                allreduce_small_bytes=r.choice([0, 256, 8192]), broadcast_eager_bytes=r.choice([0, 0, 1024]),
                buffer_bytes=r.choice([0, 4 << 20])), 15 + r.randrange(30)


def pick_call(seed, gen, i, size, eager):
    r = random.Random(f"{seed}/{gen}/{i}")
    k = dict(kind=r.choice(KINDS), dtype=r.choice(["f32", "f16", "i32", "bf16"] if torch is not None
                                                   else ["f32", "f16", "i32"]),
             op=r.choice(["sum", "max", "min"]), root=r.randrange(size), xfer=r.choice(["pull", "push"]),
             n=r.choice([0, 1, 3, 16, 100, 1000, 4099, 20000, 70001, r.randrange(1, 300000)]),
             recv_given=r.random() < 0.5, fault=None, odd=r.randrange(size), how=r.randrange(4))
    if k["kind"] in ("alltoall", "allgather", "broadcast"):
        k["dtype"] = "u8"
    f = r.random()
    is_eager = k["kind"] == "broadcast" and k["n"] <= eager and eager
    if size > 1 and not is_eager:
        if f < 0.08:
            k["fault"] = "refuse"
        elif f < 0.10 and k["kind"] != "barrier":
            k["fault"] = "mismatch"
    return k


def bad_call(c, k, size):
    """the odd rank's call with a bad argument: (what it calls, the error it raises)"""
    kind, how = k["kind"], k["how"]
    f64 = np.ones(4)
    if kind == "allreduce":
        return [(lambda: c.allreduce(np.ones(8, np.float32)[::2]), ValueError),
                (lambda: c.allreduce(f64), TypeError),
                (lambda: c.allreduce(np.ones(4, np.float32), op="avg"), ValueError),
                (lambda: c.allreduce(np.frombuffer(bytes(16), np.float32)), ValueError)][how]
    if kind == "reduce_scatter":
        return [(lambda: c.reduce_scatter(np.ones(size * 2, np.float32), np.zeros(2, np.int32)), ValueError),
                (lambda: c.reduce_scatter(np.ones(size * 2 + 1, np.float32), np.zeros(2, np.float32)), ValueError),
                (lambda: c.reduce_scatter(np.ones(size * 2), None), TypeError),
                (lambda: c.reduce_scatter(np.ones(size * 2, np.float32), op="prod"), ValueError)][how]
    if kind == "broadcast":
        return [(lambda: c.broadcast(np.zeros(4, np.uint8), root=size), ValueError),
                (lambda: c.broadcast(np.frombuffer(bytes(4), np.uint8)), ValueError),
                (lambda: c.broadcast(np.zeros(4, np.uint8), xfer="sideways"), ValueError),
                (lambda: c.broadcast(np.array([None], dtype=object)), TypeError)][how]
    if kind == "allgather":
        return [(lambda: c.allgather(np.zeros(4, np.uint8), np.zeros(4 * size + 1, np.uint8)), ValueError),
                (lambda: c.allgather(np.zeros(8, np.uint8)[::2]), ValueError),
                (lambda: c.allgather(np.zeros(4, np.uint8), order="spiral"), ValueError),
                (lambda: c.allgather(np.zeros(4, np.uint8), np.frombuffer(bytes(4 * size), np.uint8)),
                 ValueError)][how]
    if kind == "alltoall":
        return [(lambda: c.alltoall(np.zeros(size * 4 + 1, np.uint8)), ValueError),
                (lambda: c.alltoall(np.zeros(size * 4, np.uint8), np.zeros(size * 4 - 1, np.uint8)), ValueError),
                (lambda: c.alltoall(np.zeros(size, object)), TypeError),
                (lambda: c.alltoall(np.zeros(size * 8, np.uint8)[::2]), ValueError)][how]
    return (lambda: c.allreduce(f64), TypeError)  # the others are in a barrier


ERRORS = {None: None, "refuse": lockstep.PeerArgumentError, "mismatch": lockstep.MismatchError}  # for the others


def random_body(rank, size, job, seed=1, calls=240):
    gen = done = 0
    counts = {None: 0, "refuse": 0, "mismatch": 0}
    while done < calls:
        kw, length = settings(seed, gen)
        with lockstep.Comm(f"{job}-{gen}", rank, size, timeout=30, **kw) as c:
            for i in range(length):
                if done == calls:
                    break
                call = done
                done += 1
                k = pick_call(seed, gen, i, size, kw["broadcast_eager_bytes"])
                counts[k["fault"]] += 1
                mk = Maker(c, kw["buffer_bytes"], random.Random(f"{seed}/{gen}/{i}/{rank}"))
                odd = rank == k["odd"] and k["fault"] is not None
                if odd and k["fault"] == "refuse":
                    fn, err = bad_call(c, k, size)
                    with pytest.raises(err):
                        fn()
                    continue
                n = k["n"] + (1 if odd else 0)  # the odd rank of a mismatch disagrees on the count
                run_call(c, k, n, rank, size, call, mk, ERRORS[k["fault"]])
                if k["fault"] == "mismatch":
                    with pytest.raises(lockstep.MismatchError):
                        c.barrier()
                    break
        gen += 1
    return counts


def run_call(c, k, n, rank, size, call, mk, expect_error):
    kind, dtype, op = k["kind"], k["dtype"], k["op"]
    where = f"rank {rank}, call {call}: {kind} of {n} {dtype}"
    if kind == "barrier":
        if expect_error:
            with pytest.raises(expect_error):
                c.barrier()
        else:
            c.barrier()
        return
    n_send = {"allreduce": n, "reduce_scatter": n * size, "alltoall": n * size, "broadcast": n,
              "allgather": n}[kind]
    n_recv = {"allreduce": 0, "reduce_scatter": n, "alltoall": n * size, "broadcast": 0,
              "allgather": n * size}[kind]
    if dtype == "u8":
        data = byte_values(call, rank, n_send) if kind != "broadcast" or rank == k["root"] else \
            np.full(n_send, 0x5A, np.uint8)
    else:
        data = values(call, rank, n_send)
    send = mk.make(dtype, data)
    recv = None
    if kind in ("reduce_scatter", "alltoall", "allgather") and k["recv_given"]:
        recv = mk.make(dtype, np.full(n_recv, 7 if dtype != "u8" else 0xC3))
    before_send = as_bytes(send)
    before_recv = None if recv is None else as_bytes(recv)
    fn = {"allreduce": lambda: c.allreduce(send, op),
          "reduce_scatter": lambda: c.reduce_scatter(send, recv, op),
          "alltoall": lambda: c.alltoall(send, recv),
          "broadcast": lambda: c.broadcast(send, k["root"], xfer=k["xfer"]),
          "allgather": lambda: c.allgather(send, recv, xfer=k["xfer"])}[kind]
    if expect_error:
        with pytest.raises(expect_error):
            fn()
        assert as_bytes(send) == before_send, f"{where}: the failed call changed send"
        assert recv is None or as_bytes(recv) == before_recv, f"{where}: the failed call changed recv"
        return
    got = fn()
    if kind in ("allreduce", "broadcast"):
        assert got is send, f"{where}: returned another object"
    elif recv is not None:
        assert got is recv, f"{where}: returned another object"
    if kind == "allreduce":
        assert np.array_equal(as_float64(got), reduced(op, call, size, n)), where
        return
    assert as_bytes(send) == before_send or kind == "broadcast", f"{where}: send changed"
    if kind == "reduce_scatter":
        want = reduced(op, call, size, n * size)[rank * n:(rank + 1) * n]
        assert np.array_equal(as_float64(got), want), where
    elif kind == "broadcast":
        assert as_bytes(got) == byte_values(call, k["root"], n).tobytes(), where
    elif kind == "allgather":
        want = np.concatenate([byte_values(call, r, n) for r in range(size)])
        assert as_bytes(got) == want.tobytes(), where
    else:  # alltoall: block r from rank r, its block `rank`
        want = np.concatenate([byte_values(call, r, n * size)[rank * n:(rank + 1) * n] for r in range(size)])
        assert as_bytes(got) == want.tobytes(), where


@pytest.mark.parametrize("size,seed", [(2, 1), (3, 2)])
def test_random_calls_with_mixed_containers_refusals_and_mismatches(size, seed):
    res = run_ranks(lambda r, s, j: random_body(r, s, j, seed), size, timeout=300)
    counts = res[0]
    assert len(set(map(str, res.values()))) == 1
    assert counts["refuse"] and counts["mismatch"] and counts[None] > 150, counts
