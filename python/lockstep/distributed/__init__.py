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

import os
import socket
import uuid
from typing import Any, List, Optional

import torch.distributed as dist

from .. import Comm
from ._common import _Gloo
from .group import LockstepGroup
from .hosts import _Hosts
from ._common import _op, _op_by_value  # noqa: F401  (the tests compare the two)

__all__ = ["LockstepGroup", "Options", "comm"]


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

