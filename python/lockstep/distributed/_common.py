"""What the lockstep back end's modules share: torch's reduction ops as ints, completed
works, and CPU checks."""
from __future__ import annotations

import contextlib
import os
import socket
import uuid
from typing import Any, Callable, Dict, Iterator, List, NoReturn, Optional, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future  # type: ignore[attr-defined]  # (not in torch's stubs)

from .. import Comm, Op, _lockstep
from .._args import _tensor_bytes, _torch_seen

_torch_seen(torch)  # plain tensors go to C from the first call

_Tensors = List[torch.Tensor]
_MaybeWork = Optional[dist.Work]  # None for a blocking call (see _done)

# Reduction ops as ints: comparing or hashing torch's pybind enum costs 0.2-0.5 us each
_R: Any = dist.ReduceOp.RedOpType  # (torch's stubs list none of its members)
SUM, AVG, PRODUCT, MAX, MIN, BAND, BOR, BXOR = (int(_R.SUM), int(_R.AVG), int(_R.PRODUCT), int(_R.MAX),
                                                int(_R.MIN), int(_R.BAND), int(_R.BOR), int(_R.BXOR))
_NATIVE_OPS: Dict[int, Op] = {SUM: "sum", MAX: "max", MIN: "min"}  # AVG: a sum, divided
_NATIVE_CODES = {op: _lockstep.OPS.index(name) for op, name in _NATIVE_OPS.items()}  # for try_allreduce
_GLOO_OPS: Dict[str, Any] = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,  # across hosts
                             "min": dist.ReduceOp.MIN}
_NATIVE_DTYPES = frozenset((torch.float32, torch.float16, torch.bfloat16, torch.int32))
# acc = acc op x, in place, for what lockstep has no kernel for
_FOLDS: Dict[int, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    SUM: lambda acc, x: acc.add_(x),
    AVG: lambda acc, x: acc.add_(x),
    PRODUCT: lambda acc, x: acc.mul_(x),
    MAX: lambda acc, x: torch.maximum(acc, x, out=acc),
    MIN: lambda acc, x: torch.minimum(acc, x, out=acc),
    BAND: lambda acc, x: acc.bitwise_and_(x),
    BOR: lambda acc, x: acc.bitwise_or_(x),
    BXOR: lambda acc, x: acc.bitwise_xor_(x),
}


def _not_plain(t: torch.Tensor, code: int) -> None:
    return None


def _op_by_value(opts: Any) -> int:
    return int(opts.reduceOp.op.value)


def _op_by_hash(opts: Any) -> int:
    return hash(opts.reduceOp)


# An option's op as an int: torch's ReduceOp hashes to its op's value (0.2 us; through
# its enum 0.5), which is checked here rather than assumed
_op = _op_by_hash if all(hash(dist.ReduceOp(_R(v))) == v for v in (SUM, AVG, PRODUCT, MAX, MIN, BAND, BOR, BXOR)) \
    else _op_by_value


def _completed(result: Any) -> dist.Work:
    """a torch Work that is already done, with result"""
    fut: torch.futures.Future[Any] = torch.futures.Future()
    fut.set_result(result)
    work: dist.Work = _create_work_from_future(fut)
    return work


def _done(result: Any, opts: Any) -> _MaybeWork:
    """What a collective returns: None for a blocking call (torch then waits on nothing),
    a completed work for async_op=True."""
    return _completed(result) if getattr(opts, "asyncOp", True) else None


# a gloo group (dist.ProcessGroupGloo), for send and recv and between hosts: torch's stubs
# give that type none of its collectives
_Gloo = Any

_bytes = _tensor_bytes  # a contiguous tensor's memory as uint8 (gloo moves only some dtypes)


def _not_cpu(t: torch.Tensor) -> str:
    return (f"the lockstep back end takes CPU tensors; this one is on {t.device}: "
            f"run it on a group of another back end (dist.new_group(backend=...))")


def _cpu(t: torch.Tensor) -> torch.Tensor:
    """t, a CPU tensor (point to point; collectives check with LockstepGroup._cpu)"""
    if not t.is_cpu:
        raise ValueError(_not_cpu(t))
    return t


