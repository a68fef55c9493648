"""LockstepGroup: a torch.distributed process group whose collectives run on a
lockstep.Comm (one node; _Hosts in hosts.py adds gloo between nodes)."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, NoReturn, Optional, Sequence

import torch
import torch.distributed as dist

from .. import Comm, Op
from ._common import (_FOLDS, _NATIVE_CODES, _NATIVE_DTYPES, _NATIVE_OPS, AVG, BAND, BOR, BXOR, MAX, MIN, PRODUCT,
                      SUM, _bytes, _completed, _cpu, _done, _Gloo, _MaybeWork, _not_cpu, _not_plain, _op, _Tensors)


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


