"""torch.distributed's "lockstep" back end: torch's collectives on CPU tensors through
lockstep's shared memory between the ranks of a node (and gloo between nodes).

    import torch.distributed as dist
    import lockstep.distributed                # registers the back end
    dist.init_process_group("lockstep")        # under torchrun or python -m lockstep.launch
    dist.all_reduce(t)

or, next to a group of another back end:

    g = dist.new_group(backend="lockstep")
    dist.all_reduce(t, group=g)

Code written for torch.distributed (DeepSpeed's, vLLM's or SGLang's CPU paths) then runs
unchanged. Every call is synchronous: it returns when this rank's part is done, and
with async_op=True the returned work is already complete. Calls on one group must come
one at a time (not from two threads at once), in the same order on every rank. What
each call does:

  all_reduce          SUM, MAX, MIN and AVG of float32, float16, bfloat16 and int32
                      tensors run in lockstep's allreduce (AVG: the sum, divided). Other
                      dtypes (float64, int64, bool...) and ops (PRODUCT, BAND, BOR, BXOR)
                      gather every rank's tensor and reduce them in rank order, so every
                      rank still gets the same bits, at size times the memory.
  broadcast, all_gather, all_gather_into_tensor, gather, scatter: any dtype. all_gather
    takes outputs of different sizes too (output r holds rank r's input, as NCCL
    allows; checked on every rank, ValueError), padded to the largest.
  reduce_scatter(_tensor): lockstep's reduce-scatter (each rank reduces only its
    part) for the dtypes and ops all_reduce runs natively; otherwise, and across
    hosts, an all_reduce of the whole input, then this rank's part.
  reduce: an all_reduce; the other ranks' tensors stay as they were.
  barrier

  all_to_all, all_to_all_single: lockstep's all-to-all, any dtype; unequal split sizes
    (agreed on by every rank: checked, ValueError) pad every block to the largest.
    Across hosts: through the point-to-point gloo group below (gloo's speed).

  send, recv (isend, irecv, batch_isend_irecv; recv from any source): through a gloo
    group over the same ranks that every lockstep group makes for them (full-mesh TCP
    connections, made once at creation), with gloo's semantics, timeouts and errors.
    pg_options=Options(point_to_point=False) skips it; send and recv then raise
    NotImplementedError.

CUDA tensors raise ValueError.
A collective whose arguments this back end rejects on one rank (a CUDA tensor, sizes
that do not fit, an op it cannot do) raises ValueError there and, at once,
lockstep.PeerArgumentError on the others, whose call did nothing; the group goes on.
(Not in a group over several hosts: the other hosts wait out the timeout. Nor for
what torch itself checks before it reaches the back end.)
torch.compile turns dist.* calls into torch's functional collectives
(torch.distributed._functional_collectives), which run here too.

comm(group) gives a group's lockstep.Comm, for zero-copy buffers or torch.ops.lockstep;
pg_options=lockstep.distributed.Options(buffer_bytes=..., ...) sets up that Comm.
Failures raise lockstep's CommError subclasses (PeerDiedError, CommTimeoutError,
MismatchError...) from the torch call; the deadline is the group's timeout.

A group whose ranks run on several hosts (told apart by hostname and boot id) runs
lockstep within each host and gloo between the hosts' leaders (their lowest ranks), as
lockstep_mpi does with MPI: an all_reduce is the host's allreduce, the leaders' gloo
allreduce and the host's broadcast, so every rank still gets the same bits, but f16 and
bf16 sums are rounded on both levels, and errors between hosts are gloo's. comm(group)
is then this host's Comm, with this host's ranks.
"""
from __future__ import annotations

import contextlib
import os
import socket
import uuid
from typing import Any, Callable, Dict, Iterator, List, NoReturn, Optional, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future  # type: ignore[attr-defined]  # (not in torch's stubs)

from . import Comm, Op, _lockstep, _tensor_bytes, _torch_seen

_torch_seen(torch)  # plain tensors go to C from the first call

_Tensors = List[torch.Tensor]
_MaybeWork = Optional[dist.Work]  # None for a blocking call (see _done)

__all__ = ["LockstepGroup", "Options", "comm"]

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


class LockstepGroup(dist.ProcessGroup):
    """A process group whose collectives run on a lockstep.Comm (see the module docstring).
    Made by dist.init_process_group / dist.new_group with backend="lockstep"."""

    def __init__(self, comm: Comm, rank: int, size: int, p2p: Optional[_Gloo] = None) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # (torch's stubs lack this overload)
        self.comm: Comm = comm
        self._me, self._n = rank, size  # self.rank() and self.size() cost 0.9 us each
        self._p2p = p2p  # gloo over the same ranks, for send and recv; None without
        # allreduce's common case (a plain CPU tensor of a dtype lockstep reduces) in one C
        # call, which returns None for any other tensor; only where _allreduce is this class's
        self._plain_allreduce = (comm._c.try_allreduce if type(self)._allreduce is LockstepGroup._allreduce
                                 else _not_plain)

    def getBackendName(self) -> str:
        return "lockstep"

    # A collective's own argument checks, before its first transfer: a rank that fails
    # one still takes its turn in that transfer's Comm call, refused, so that the other
    # ranks' call ends at once (lockstep.PeerArgumentError) instead of at the deadline.
    # Only where every rank's first Comm call of a collective is the same one (_Hosts:
    # not so, its ranks skip or add Comm calls by host).
    _refuses = True

    def _invalid(self, msg: str) -> ValueError:
        """ValueError(msg), for this rank's arguments to a collective, found before its
        first transfer (see _refuses)"""
        if self._refuses:
            self.comm._refused()
        return ValueError(msg)

    def _cpu(self, t: torch.Tensor) -> torch.Tensor:
        """t, a CPU tensor: a collective's argument"""
        if not t.is_cpu:
            raise self._invalid(_not_cpu(t))
        return t

    # Collectives made of several Comm calls tag each call with its step (Comm.tag), an
    # outer collective's step in the high 4 bits where they nest (_Hosts' transfers
    # inside them): a rank at another step, or in another collective whose Comm call
    # merely looks the same, then makes the call raise MismatchError on every rank
    # instead of pairing with it. Single-call collectives keep tag 0.
    _SPLITS, _SPLIT_BLOCKS, _SIZES, _PADDED = 1, 2, 3, 4  # all_to_all with splits, uneven all_gather
    _HOST_STEPS = {"all_reduce": (5, 6), "all_gather": (7, 8), "broadcast": (9, 10), "barrier": (11, 12)}
    _tag_now = 0

    @contextlib.contextmanager
    def _step(self, step: int) -> Iterator[None]:
        before = self._tag_now
        self._tag_now = (before << 4 | step) & 0xff
        self.comm.tag(self._tag_now)
        try:
            yield
        finally:
            self._tag_now = before
            if not self.comm.closed:  # (aborted meanwhile: nothing to put back)
                self.comm.tag(before)

    # The four transfers everything below is made of; _Hosts replaces them across hosts.
    def _allreduce(self, t: torch.Tensor, name: Op) -> None:
        """t (contiguous, a dtype lockstep reduces) = name over every rank's t"""
        self.comm.allreduce(t, name)

    def _allgather(self, inp: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """every rank's inp (contiguous) into out, or a new (size, *inp.shape) tensor"""
        got: torch.Tensor = self.comm.allgather(inp, out)
        return got

    def _broadcast(self, t: torch.Tensor, root: int) -> None:
        self.comm.broadcast(t, root)

    def _barrier(self) -> None:
        self.comm.barrier()

    # torch names every group after making it; its functional collectives (what
    # torch.compile turns dist.* calls into) find the group by that name, which the base
    # class keeps only in C++ back ends
    def _set_group_name(self, name: Any) -> None:
        super()._set_group_name(name)
        self._name = name

    @property
    def group_name(self) -> Any:
        return self._name

    def __repr__(self) -> str:
        return f"LockstepGroup(rank={self._me}, size={self._n})"

    # ---- the reductions ---------------------------------------------------------------
    # (The collectives' `type: ignore[override]`: torch calls a Python back end's methods
    # as (tensors, options), and a blocking call may return None, while torch 2.13's stubs
    # give ProcessGroup's methods the signatures of its own Python-facing overloads.)

    def _reduce(self, t: torch.Tensor, op: int) -> None:
        """t = op over every rank's t, in place, the same bits on every rank"""
        self._cpu(t)
        fold = _FOLDS.get(op)
        if fold is None:
            raise self._invalid(f"the lockstep back end cannot reduce with {dist.ReduceOp.RedOpType(op)}: it takes "
                                f"SUM, AVG, MAX, MIN, PRODUCT, BAND, BOR and BXOR")
        if op == AVG and not t.is_floating_point():
            raise self._invalid(f"AVG needs a floating-point tensor, not {t.dtype}")
        work = t if t.is_contiguous() else t.contiguous()
        if t.dtype in _NATIVE_DTYPES and (op == AVG or op in _NATIVE_OPS):
            self._allreduce(work, _NATIVE_OPS.get(op, "sum"))
        elif work.numel():
            every = self._allgather(work)  # (size, *shape), rank r's at [r]
            acc = every[0]
            for r in range(1, self._n):  # in rank order, as on every rank
                acc = fold(acc, every[r])
            work.copy_(acc)
        if op == AVG:
            work.div_(self._n)
        if work is not t:
            t.copy_(work)

    def allreduce(self, tensors: _Tensors, opts: Any = None) -> _MaybeWork:  # type: ignore[override]
        op = _op(opts) if opts is not None else SUM
        code = _NATIVE_CODES.get(op)
        for t in tensors:
            if code is None or self._plain_allreduce(t, code) is None:
                self._reduce(t, op)  # the rest: other ops, dtypes, layouts; and the checks
        return _done(tensors, opts)

    def allreduce_coalesced(self, tensors: _Tensors, opts: Any = None) -> _MaybeWork:  # type: ignore[override]
        return self.allreduce(tensors, opts)

    def reduce(self, tensors: _Tensors, opts: Any) -> _MaybeWork:  # type: ignore[override]
        for t in tensors:
            self._reduce(t if self._me == opts.rootRank else t.clone(), _op(opts))
        return _done(tensors, opts)

    _native_reduce_scatter = True  # (across hosts: the all_reduce path)

    def _reduce_scatter_one(self, out: torch.Tensor, whole: torch.Tensor, op: int) -> None:
        """out = this rank's part of op over every rank's whole (size * out.numel() elements)"""
        self._cpu(out)
        if whole.numel() != out.numel() * self._n or whole.dtype != out.dtype:
            raise self._invalid(f"reduce_scatter needs an input of {self._n} x {out.numel()} {out.dtype} "
                                f"elements, not {whole.numel()} {whole.dtype}")
        name: Optional[Op] = _NATIVE_OPS.get(op, "sum" if op == AVG else None)
        if (self._native_reduce_scatter and name and whole.dtype in _NATIVE_DTYPES and
                (op != AVG or whole.is_floating_point())):
            src = whole if whole.is_contiguous() else whole.contiguous()
            dst = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype)
            self.comm.reduce_scatter(src.view(-1), dst.view(-1), name)
            if op == AVG:
                dst.div_(self._n)
            if dst is not out:
                out.copy_(dst)
            return
        whole = whole.clone(memory_format=torch.contiguous_format)  # the input stays as it was
        self._reduce(whole, op)
        out.copy_(whole.view(self._n, -1)[self._me].view(out.shape))

    def reduce_scatter(self, outputs: _Tensors, input_lists: List[_Tensors],  # type: ignore[override]
                       opts: Any) -> _MaybeWork:
        for out, parts in zip(outputs, input_lists):
            self._reduce_scatter_one(out, torch.cat([p.reshape(-1) for p in parts]), _op(opts))
        return _done(outputs, opts)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,  # type: ignore[override]
                              opts: Any) -> _MaybeWork:
        self._reduce_scatter_one(output, input.reshape(-1), _op(opts))
        return _done(output, opts)

    _reduce_scatter_base = reduce_scatter_single  # type: ignore[assignment]

    def reduce_scatter_tensor_coalesced(self, outputs: _Tensors, inputs: _Tensors,  # type: ignore[override]
                                        opts: Any) -> _MaybeWork:
        for out, inp in zip(outputs, inputs):
            self._reduce_scatter_one(out, inp.reshape(-1), _op(opts))
        return _done(outputs, opts)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced  # type: ignore[assignment]

    # ---- moving data ------------------------------------------------------------------

    def broadcast(self, tensors: _Tensors, opts: Any) -> _MaybeWork:  # type: ignore[override]
        for t in tensors:
            work = self._cpu(t) if t.is_contiguous() else t.contiguous()
            self._broadcast(work, opts.rootRank)
            if work is not t:
                t.copy_(work)
        return _done(tensors, opts)

    def _gather(self, inp: torch.Tensor) -> torch.Tensor:
        """every rank's inp, as a (size, *inp.shape) tensor"""
        return self._allgather(self._cpu(inp).contiguous())

    def allgather(self, output_lists: List[_Tensors], inputs: _Tensors,  # type: ignore[override]
                  opts: Any = None) -> _MaybeWork:
        for outs, inp in zip(output_lists, inputs):
            if len(outs) != self._n:
                raise self._invalid(f"all_gather needs a list of {self._n} output tensors, not {len(outs)}")
            k = inp.numel()
            if any(out.numel() != k for out in outs):
                self._gather_uneven(outs, inp)
                continue
            every = self._gather(inp)
            for r, out in enumerate(outs):
                out.copy_(every[r])
        return _done(output_lists, opts)

    def _gather_uneven(self, outs: _Tensors, inp: torch.Tensor) -> None:
        """all_gather into outputs of different sizes (output r: rank r's input, as NCCL
        allows): the sizes first, so that every rank raises the same ValueError when the
        ranks disagree (and the group stays usable), then blocks padded to the largest"""
        inp = self._cpu(inp).contiguous()
        sizes = torch.tensor([inp.numel()] + [out.numel() for out in outs], dtype=torch.int64)
        with self._step(self._SIZES):
            every = self._allgather(sizes)  # (n, n + 1): each rank's input size and output sizes
        outs_sizes = every[:, 1:]
        if not (torch.equal(outs_sizes, outs_sizes[:1].expand_as(outs_sizes)) and
                torch.equal(every[:, 0], outs_sizes[0])):
            raise ValueError(f"all_gather: output tensor r must hold rank r's input on every rank; the ranks' inputs "
                             f"hold {every[:, 0].tolist()} elements and their output lists "
                             f"{[row.tolist() for row in outs_sizes]}")
        block = torch.zeros(int(outs_sizes[0].max()), dtype=inp.dtype)
        block[:inp.numel()] = inp.reshape(-1)
        with self._step(self._PADDED):
            got = self._allgather(block)  # (n, largest)
        for r, out in enumerate(outs):
            out.copy_(got[r, :out.numel()].view(out.shape))

    allgather_coalesced = allgather  # type: ignore[assignment]

    def _gather_into(self, output: torch.Tensor, inp: torch.Tensor) -> None:
        self._cpu(output)
        if output.numel() != inp.numel() * self._n or output.dtype != inp.dtype:
            raise self._invalid(f"all_gather_into_tensor needs an output of {self._n} x {inp.numel()} "
                                f"{inp.dtype} elements, not {output.numel()} {output.dtype}")
        if output.is_contiguous():
            self._allgather(self._cpu(inp).contiguous(), output)
        else:
            output.copy_(self._gather(inp).view(output.shape))

    def all_gather_single(self, output: torch.Tensor, inp: torch.Tensor,  # type: ignore[override]
                          opts: Any = None) -> _MaybeWork:
        self._gather_into(output, inp)
        return _done(output, opts)

    _allgather_base = all_gather_single  # type: ignore[assignment]

    def allgather_into_tensor_coalesced(self, outputs: _Tensors, inputs: _Tensors,  # type: ignore[override]
                                        opts: Any = None) -> _MaybeWork:
        for out, inp in zip(outputs, inputs):
            self._gather_into(out, inp)
        return _done(outputs, opts)

    all_gather_single_coalesced = allgather_into_tensor_coalesced  # type: ignore[assignment]

    def gather(self, output_lists: List[_Tensors], inputs: _Tensors, opts: Any) -> _MaybeWork:  # type: ignore[override]
        root = self._me == opts.rootRank
        for k, inp in enumerate(inputs):
            every = self._gather(inp)  # every rank takes part; only the root keeps it
            if root:
                for r, out in enumerate(output_lists[k]):
                    out.copy_(every[r])
        return _done(output_lists, opts)

    def scatter(self, outputs: _Tensors, input_lists: List[_Tensors],  # type: ignore[override]
                opts: Any) -> _MaybeWork:
        root = self._me == opts.rootRank
        for k, out in enumerate(outputs):
            self._cpu(out)
            if root:
                parts = input_lists[k]
                if len(parts) != self._n:
                    raise self._invalid(f"scatter needs a list of {self._n} tensors on the root, not {len(parts)}")
                whole = torch.stack([p.reshape(out.shape) for p in parts])
            else:
                whole = torch.empty((self._n,) + tuple(out.shape), dtype=out.dtype)
            self._broadcast(whole, opts.rootRank)
            out.copy_(whole[self._me])
        return _done(outputs, opts)

    # ---- all-to-all -------------------------------------------------------------------

    def _alltoall_equal(self, send: torch.Tensor, recv: torch.Tensor) -> None:
        """block k of send (contiguous uint8) to rank k, block k of recv from rank k"""
        self.comm.alltoall(send, recv)

    def _check_splits(self, ins: _Tensors, outs: _Tensors) -> torch.Tensor:
        """every rank's block sizes, (n, n): row r what rank r sends to each rank; the
        same ValueError on every rank unless each send matches its receiver's expectation"""
        n = self._n
        sizes = torch.tensor([t.numel() for t in ins] + [t.numel() for t in outs], dtype=torch.int64)
        with self._step(self._SPLITS):
            every = self._allgather(sizes)  # (n, 2n): what each rank sends, and expects
        if not torch.equal(every[:, :n], every[:, n:].t()):  # the same verdict on every rank
            raise ValueError("all_to_all: the ranks' split sizes disagree (what rank r sends to rank k must be "
                             "what rank k expects from rank r)")
        return every[:, :n]

    def _alltoall_blocks(self, ins: _Tensors, outs: _Tensors) -> None:
        """ins[k] to rank k, outs[k] from rank k: contiguous uint8 tensors, sizes in
        any pattern the ranks agree on. Unequal blocks are padded to the largest."""
        n = self._n
        m = int(self._check_splits(ins, outs).max())
        send = torch.zeros((n, m), dtype=torch.uint8)
        for k, t in enumerate(ins):
            send[k, :t.numel()] = t
        recv = torch.empty((n, m), dtype=torch.uint8)
        with self._step(self._SPLIT_BLOCKS):
            self.comm.alltoall(send, recv)
        for k, t in enumerate(outs):
            t.copy_(recv[k, :t.numel()])

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor,  # type: ignore[override]
                      output_split_sizes: List[int], input_split_sizes: List[int],
                      opts: Any = None) -> _MaybeWork:
        self._cpu(output)
        self._cpu(input)
        n = self._n
        if not output_split_sizes and not input_split_sizes:  # equal blocks: one call
            if input.numel() % n or output.numel() != input.numel() or output.dtype != input.dtype:
                raise self._invalid(f"all_to_all_single without split sizes needs an input of {n} equal blocks and "
                                    f"an output like it; got {tuple(input.shape)} {input.dtype} and "
                                    f"{tuple(output.shape)} {output.dtype}")
            src = input if input.is_contiguous() else input.contiguous()
            dst = output if output.is_contiguous() else torch.empty(output.shape, dtype=output.dtype)
            self._alltoall_equal(_bytes(src), _bytes(dst))
            if dst is not output:
                output.copy_(dst)
            return _done(output, opts)

        def blocks(t: torch.Tensor, splits: Sequence[int]) -> _Tensors:
            rows = t.shape[0] if t.dim() else 1
            splits = list(splits) or [rows // n] * n
            if len(splits) != n or sum(splits) != rows:
                raise self._invalid(f"all_to_all_single: split sizes {splits} must be {n} numbers that add up to "
                                    f"dimension 0 ({rows})")
            return [_bytes(p.contiguous()) for p in torch.split(t, splits)]

        ins = blocks(input, input_split_sizes)
        work = output if output.is_contiguous() else torch.empty(output.shape, dtype=output.dtype)
        self._alltoall_blocks(ins, blocks(work, output_split_sizes))  # views of work, written in place
        if work is not output:
            output.copy_(work)
        return _done(output, opts)

    all_to_all_single = alltoall_base  # type: ignore[assignment]  # what dist.all_to_all_single calls

    def alltoall(self, output_tensors: _Tensors, input_tensors: _Tensors,  # type: ignore[override]
                 opts: Any = None) -> _MaybeWork:
        if len(output_tensors) != self._n or len(input_tensors) != self._n:
            raise self._invalid(f"all_to_all takes {self._n} input and {self._n} output tensors")
        works = [o if o.is_contiguous() else torch.empty(o.shape, dtype=o.dtype)
                 for o in map(self._cpu, output_tensors)]
        ins = [_bytes(self._cpu(t).contiguous()) for t in input_tensors]
        self._alltoall_blocks(ins, [_bytes(w) for w in works])
        for o, w in zip(output_tensors, works):
            if w is not o:
                o.copy_(w)
        return _done(output_tensors, opts)

    def barrier(self, opts: Any = None) -> dist.Work:
        self._barrier()
        return _completed(None)  # a work even when blocking: some callers (torch.distributed.rpc) wait on it

    # ---- what lockstep does not do ----------------------------------------------------

    def _none(self, what: str) -> NoReturn:
        raise NotImplementedError(f"the lockstep back end has no {what}; run it on a group of another "
                                  f"back end, e.g. dist.new_group(backend=\"gloo\")")

    # ---- point to point: gloo's -------------------------------------------------------

    def _peers(self, what: str) -> _Gloo:
        if self._p2p is None:
            self._none(f"{what} in a group made with Options(point_to_point=False)")
        return self._p2p

    def send(self, tensors: _Tensors, dst: int, tag: int) -> dist.Work:
        work: dist.Work = self._peers("send").send([_cpu(t) for t in tensors], dst, tag)
        return work

    def recv(self, tensors: _Tensors, src: int, tag: int) -> dist.Work:
        work: dist.Work = self._peers("recv").recv([_cpu(t) for t in tensors], src, tag)
        return work

    def recv_anysource(self, tensors: _Tensors, tag: int) -> dist.Work:
        work: dist.Work = self._peers("recv").recv_anysource([_cpu(t) for t in tensors], tag)
        return work

    def monitored_barrier(self, *a: Any, **k: Any) -> NoReturn:
        self._none("monitored_barrier (use barrier)")

    # ---- teardown ---------------------------------------------------------------------

    def shutdown(self) -> None:
        self.comm.close()
        self._p2p = None

    def abort(self) -> None:
        self.comm.close()
        self._p2p = None


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


def _host() -> str:
    """what tells hosts apart: the name and, for machines that share one, the boot"""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


class Options:
    """Settings for a lockstep group, given as pg_options to dist.init_process_group or
    dist.new_group. For the lockstep.Comm behind it: buffer_bytes (zero-copy: all_reduce
    of tensors from comm(group).buffer(...) skips the copies through shared memory),
    cpu_sharers, wait_policy, small_bytes, chunk_bytes, allreduce_small_bytes,
    broadcast_eager_bytes (broadcasts up to that size return on the root at once: see
    lockstep.Comm), as lockstep.Comm takes them; the deadline is the group's timeout.
    point_to_point=False: no gloo group for send and recv (which then raise)."""

    KEYS = ("buffer_bytes", "cpu_sharers", "wait_policy", "small_bytes", "chunk_bytes", "allreduce_small_bytes",
            "broadcast_eager_bytes")

    def __init__(self, point_to_point: bool = True, **comm_kwargs: Any) -> None:
        bad = sorted(set(comm_kwargs) - set(self.KEYS))
        if bad:
            raise TypeError(f"lockstep.distributed.Options takes point_to_point, {', '.join(self.KEYS)}; "
                            f"not {', '.join(bad)}")
        self.point_to_point = bool(point_to_point)
        self.comm_kwargs = comm_kwargs

    def __repr__(self) -> str:
        kw = ([] if self.point_to_point else ["point_to_point=False"]) + [f"{k}={v!r}" for k, v in
                                                                           self.comm_kwargs.items()]
        return f"Options({', '.join(kw)})"


_GLOO_TRIES = 3


def _gloo(store: Any, prefix: str, rank: int, size: int, timeout: Any, what: str) -> _Gloo:
    """A ProcessGroupGloo of `size` ranks over store, made by every one of them together.
    Making one fails now and then in gloo's connections on one rank ("Gloo connectFullMesh
    failed ... Connection closed by peer", 1 CI run in 11 here, in a group made right
    after others), while the others' may have succeeded. So every rank tells the others
    whether its own succeeded, and if any failed every rank drops its own and they make
    one again under a new prefix, up to _GLOO_TRIES times."""
    for attempt in range(_GLOO_TRIES):
        at = f"{prefix}/{attempt}/"
        try:
            prefixed = dist.PrefixStore(at, store)  # type: ignore[attr-defined]  # (not in torch's stubs' exports)
            pg, err = dist.ProcessGroupGloo(prefixed, rank, size, timeout), None
        except RuntimeError as e:
            pg, err = None, e
        store.set(f"{at}made/{rank}", b"0" if pg is None else b"1")
        failed = [r for r in range(size) if store.get(f"{at}made/{r}") != b"1"]
        if not failed:
            assert pg is not None  # (this rank's own succeeded)
            return pg
        del pg  # closes its connections: the next try connects anew
    mine = f"; on this rank: {err}" if err is not None else " (their own errors say why)"
    raise RuntimeError(f"could not make the gloo group {what}: it failed on rank(s) {failed} of its {size}, "
                       f"{_GLOO_TRIES} times{mine}") from err


def _create(opts: Any, options: Optional[Options]) -> LockstepGroup:
    if options is None:
        options = Options()
    elif not isinstance(options, Options):
        raise TypeError(f"pg_options for the lockstep back end must be lockstep.distributed.Options(...), "
                        f"not {type(options).__name__}")
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    # The store is the group's own (torch prefixes it). A group made again under the same
    # prefix (after destroy_process_group) must not read the last one's keys: each rank
    # counts its creations, and every rank has made as many.
    n = store.add(f"lockstep/made/{rank}", 1)
    key = f"lockstep/{n}"
    host = _host()
    store.set(f"{key}/host/{rank}", host)
    names = [store.get(f"{key}/host/{r}").decode() for r in range(size)]
    order = list(dict.fromkeys(names))  # hosts in the order of their lowest rank
    hosts = [order.index(h) for h in names]
    me = hosts[rank]
    local = [r for r in range(size) if hosts[r] == me]
    if local[0] == rank:  # this host's leader names its segment
        store.set(f"{key}/job/{me}", f"tdist-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    job = store.get(f"{key}/job/{me}").decode()
    seconds = opts.timeout.total_seconds() if opts.timeout is not None else 0
    c = Comm(job, local.index(rank), len(local), timeout=seconds if seconds > 0 else None, **options.comm_kwargs)
    try:  # the gloo groups: every rank of the group (of the leaders) takes part in making them
        p2p = None
        if options.point_to_point:
            p2p = _gloo(store, f"{key}/p2p", rank, size, opts.timeout, "for point to point")
        if len(order) == 1:
            return LockstepGroup(c, rank, size, p2p)
        gloo = None
        if local[0] == rank:
            gloo = _gloo(store, f"{key}/leaders", me, len(order), opts.timeout, "of the hosts' leaders")
        return _Hosts(c, rank, size, hosts, gloo, p2p)
    except BaseException:
        c.close()  # not left open until the garbage collector finds it
        raise


def comm(group: Optional[dist.ProcessGroup] = None) -> Comm:
    """The lockstep.Comm a lockstep group runs on (the default group when None): for
    comm.buffer() views, or lockstep.torch_ops.register(comm)."""
    g = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(g, LockstepGroup):
        raise ValueError(f"{g!r} is not a group of the lockstep back end")
    return g.comm


dist.Backend.register_backend("lockstep", _create, extended_api=True, devices=["cpu"])
