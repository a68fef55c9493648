"""_Hosts: a lockstep group across hosts: lockstep inside each host, gloo between the
hosts' leaders."""
from __future__ import annotations

from typing import Any, List, Optional

import torch
import torch.distributed as dist

from .. import Comm, Op
from ._common import _GLOO_OPS, _bytes, _Gloo, _Tensors
from .group import LockstepGroup


class _Hosts(LockstepGroup):
    """A group over several hosts (see the module docstring): each transfer runs on this
    host's Comm, between the hosts' leaders (local rank 0) on gloo, and again on this
    host's Comm."""

    def __init__(self, comm: Comm, rank: int, size: int, hosts: List[int], gloo: Optional[_Gloo],
                 p2p: Optional[_Gloo]) -> None:
        super().__init__(comm, rank, size, p2p)
        self._host_of = hosts  # rank -> host index
        self._local = [[r for r in range(size) if hosts[r] == h] for h in range(max(hosts) + 1)]
        self._gloo = gloo  # the leaders' group, None on the other ranks

    _native_reduce_scatter = False
    _refuses = False  # see LockstepGroup._refuses

    # all-to-all: every rank's blocks go straight to their ranks through the gloo group
    # made for point to point, which spans every rank (no leaders' step would save a copy)
    def _alltoall_equal(self, send: torch.Tensor, recv: torch.Tensor) -> None:
        self._peers("all_to_all across hosts").alltoall_base(recv, send, [], []).wait()

    def _alltoall_blocks(self, ins: _Tensors, outs: _Tensors) -> None:
        self._check_splits(ins, outs)  # gloo would wait out its timeout instead
        out_sizes = [t.numel() for t in outs]
        recv = torch.empty(sum(out_sizes), dtype=torch.uint8)
        self._peers("all_to_all across hosts").alltoall_base(
            recv, torch.cat(ins), out_sizes, [t.numel() for t in ins]).wait()
        for t, part in zip(outs, torch.split(recv, out_sizes)):
            t.copy_(part)

    def _allreduce(self, t: torch.Tensor, name: Op) -> None:
        first, last = self._HOST_STEPS["all_reduce"]
        with self._step(first):
            self.comm.allreduce(t, name)
        if self._gloo is not None:
            o = dist.AllreduceOptions()
            o.reduceOp = _GLOO_OPS[name]
            self._gloo.allreduce([t], o).wait()
        with self._step(last):
            self.comm.broadcast(t, 0)

    def _allgather(self, inp: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        first, last = self._HOST_STEPS["all_gather"]
        with self._step(first):
            mine = self.comm.allgather(inp)  # this host's ranks, in rank order
        every = torch.empty((self._n,) + tuple(inp.shape), dtype=inp.dtype) if out is None else out.view(
            (self._n,) + tuple(inp.shape))
        if self._gloo is not None:  # hosts may hold different numbers of ranks: pad to the most
            most = max(len(ranks) for ranks in self._local)
            block = torch.zeros((most,) + tuple(inp.shape), dtype=inp.dtype)
            block[:len(mine)] = mine
            blocks = [torch.empty_like(block) for _ in self._local]
            self._gloo.allgather([[_bytes(b) for b in blocks]], [_bytes(block)]).wait()
            for h, ranks in enumerate(self._local):
                for k, r in enumerate(ranks):
                    every[r] = blocks[h][k]
        with self._step(last):
            self.comm.broadcast(every, 0)
        return every if out is None else out

    def _broadcast(self, t: torch.Tensor, root: int) -> None:
        h = self._host_of[root]
        first, last = self._HOST_STEPS["broadcast"]
        if self._host_of[self._me] == h:
            with self._step(first):
                self.comm.broadcast(t, self._local[h].index(root))
        if self._gloo is not None:
            o = dist.BroadcastOptions()
            o.rootRank = h
            self._gloo.broadcast([_bytes(t)], o).wait()
        if self._host_of[self._me] != h:
            with self._step(last):
                self.comm.broadcast(t, 0)

    def _barrier(self) -> None:
        first, last = self._HOST_STEPS["barrier"]
        with self._step(first):
            self.comm.barrier()
        if self._gloo is not None:
            self._gloo.barrier().wait()
        with self._step(last):
            self.comm.barrier()

    def shutdown(self) -> None:
        super().shutdown()
        self._gloo = None


