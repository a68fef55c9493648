"""lockstep: collectives between processes on one node, through shared memory.

    comm = lockstep.Comm.from_env()        # under python -m lockstep.launch, torchrun or mpirun
    comm.allreduce(array)                  # in place; numpy arrays or torch CPU tensors
    comm.broadcast(array, root=0)
    comm.allgather(send, recv)             # recv holds size * len(send)
    part = comm.reduce_scatter(send)       # this rank's block of the sum of every rank's send
    recv = comm.alltoall(send)             # block r of send to rank r; block k of recv from rank k
    recv = comm.allgather(send)            # a new (size, *send.shape) array or tensor
    comm.barrier()

Zero-copy allreduce: create the communicator with buffer_bytes=N (per rank, the same on
every rank) and keep the data in comm.buffer(...) views; an allreduce whose array lies
there on every rank skips the copies through shared memory (3-5x faster from 16 KiB):

    comm = lockstep.Comm.from_env(buffer_bytes=64 << 20)
    x = comm.buffer((4096, 1024), numpy.float32)       # or torch.bfloat16: a tensor
    comm.allreduce(x)

When other busy processes share this machine's CPUs (another job, or the ranks of
another communicator), pass their total, these ranks included, as cpu_sharers=N: with
more of them than CPUs, waits yield the CPU at once instead of spinning on it.

Broadcast and allgather go zero-copy too past 256 KiB (the small_bytes default) when
the senders' arrays are buffer views (the default xfer="pull": every rank's send, or
the broadcast root's array), or with xfer="push" when the receivers' are (a push
broadcast also from 576 KiB for all receivers together if the root's array is one
too). Otherwise keep xfer="pull": pushing through shared memory copies every block
twice, and a broadcast's copies all on the root (see lockstep/comm.h).

Eager broadcasts: with broadcast_eager_bytes=N (at most 65536, the same on every rank)
a broadcast of at most N bytes returns on the root as soon as its data is in shared
memory, and each receiver waits for the root alone (at 4 and 8 ranks on 2 CPUs, 64 B
broadcasts 0.6-0.7x OpenMPI's time instead of 4-5x). The root then learns of a
receiver's mismatch or death only in a later call.

Failures raise subclasses of CommError: PeerDiedError (a rank died), CommTimeoutError
(a rank missed the deadline; also a TimeoutError), MismatchError (ranks called
different collectives), CommCancelledError (another rank abandoned the call). After one
of these the communicator is broken on every rank. Ctrl-C (or any signal handler that
raises) interrupts a call that waits for peers within about 10 ms: that rank gets the
handler's exception (KeyboardInterrupt), the others CommCancelledError.
A call whose arguments are wrong on one rank raises ValueError or TypeError there and
PeerArgumentError (a CommError) on the others, at once: that rank still takes its turn
in the call, refused. The call does nothing on any rank and the communicator goes on
(except when the others wait in a barrier while some are in another call, or in an
eager broadcast: that is a MismatchError, as for ranks that call different
collectives).

A Comm takes one call at a time: a thread that calls while another thread is in a
call on the same Comm gets RuntimeError (the call in flight goes on). close() during a
call frees the communicator when that call returns.
A Comm belongs to the process that created it: in a child made by os.fork() (or
multiprocessing's fork start method) its calls raise CommError and touch nothing, while
the parent's rank goes on; create a new Comm, with a job of its own, in the child.

The package is typed (py.typed): op, order, xfer and wait_policy are Literal names
(lockstep.Op, Order, Xfer, WaitPolicy), so a type checker flags a wrong one before the
job runs.

lockstep.reduce_isa() names the reduction kernels' instruction set; the LOCKSTEP_ISA
environment variable (avx512, avx2 or base) caps it.
Bad buffers raise ValueError (read-only, non-contiguous, wrong size) or TypeError
(not a buffer, unsupported dtype).

    meta, tensors = lockstep.load("model.gguf")   # or .safetensors; see lockstep.load

With torch: lockstep.torch_ops (the collectives as torch ops torch.compile keeps) and
lockstep.distributed (a torch.distributed back end: dist.init_process_group("lockstep")).
Comm's calls are not differentiable: autograd sees a tensor they write as unchanged
(a gradient flows through it as through the identity). For a tensor that requires
grad they bump its version, as torch's in-place ops do, so a backward that saved its
old values raises instead of using the new ones. lockstep.torch_ops has ops with a
backward.
"""
from __future__ import annotations

import numbers as _numbers
from datetime import timedelta as _timedelta
from typing import Any, List, Literal, Optional, Sequence, SupportsIndex, Tuple, TypeVar, Union

import numpy as _np

from . import _lockstep
from ._args import (_DISTANCE, _KERNEL_COPY, _NUMPY_CODES, _OPS, _ORDERS, _POLICIES, _RECV_GATHER,
                    _RECV_SAME, _RECV_SCATTER, _XFERS, _address, _allreduce_other, _code, _int_arg,
                    _is_tensor, _new_like, _send_recv_memory, _tensor_memory, _timeout_ms, _torch_code,
                    _written)
from ._lockstep import (BadFileError, CommCancelledError, CommError, CommTimeoutError, LoadCancelled,
                        LoadError, MismatchError, PeerArgumentError, PeerDiedError)
from .load import load
from .shard import ShardPlan

__all__ = ["Comm", "CommError", "PeerDiedError", "CommTimeoutError", "MismatchError", "CommCancelledError",
           "PeerArgumentError",
           "load", "ShardPlan", "LoadError", "BadFileError", "LoadCancelled", "reduce_isa", "__version__",
           "Op", "Order", "Xfer", "WaitPolicy"]
__version__ = _lockstep.version

# The names of the string arguments, for type checkers (the package ships py.typed) and
# at run time: tests/python/test_typing.py checks that they list the extension's tables.
Op = Literal["sum", "max", "min"]
Order = Literal["linear", "rotated", "random", "topology"]
Xfer = Literal["pull", "push"]
WaitPolicy = Literal["default", "auto", "active", "passive"]
KernelCopy = Literal["auto", "off", "wide"]
Distance = Literal["auto", "close", "far"]
# an integer argument: an int, a numpy integer, or a string holding one (an
# environment variable's value)
IntArg = Union[SupportsIndex, str]
# the caller's buffer (a numpy array, a torch CPU tensor, any writable C-contiguous
# buffer): the calls that write into it return that same object
Buf = TypeVar("Buf")


def reduce_isa() -> str:
    """The instruction set of the reduction kernels in this process: "avx512", "avx2" or
    "base", from what the CPU supports, capped by the LOCKSTEP_ISA environment variable
    (chosen once, at the first call or communicator). Every choice gives the same bits.
    Raises ValueError while LOCKSTEP_ISA holds anything but those names."""
    return _lockstep.reduce_isa()



class Comm:
    """A communicator over `size` ranks of one job (see the module docstring).

    timeout: the deadline of every wait, in seconds (a number or a datetime.timedelta);
    None or infinity for none. The C layer holds up to 49.7 days; longer ones are cut
    to that.

    Each Comm binds the extension's methods of the same names over allreduce,
    broadcast, allgather, alltoall and reduce_scatter (not over a subclass's own): for
    numpy arrays and plain torch CPU tensors with plain arguments (an int root, names
    for op, order and xfer, a recv given) the whole call runs in C (16 floats at 2
    ranks: 0.13-0.25 us over the C call alone for numpy, 0.2-0.5 for tensors, whose
    attributes cost); the rest (tensor subclasses, a tensor that requires grad to write
    into, a recv to make) goes on in Python.

    distance: "auto" (routes follow the ranks' distance as probed, see Comm.distance),
    or "close" or "far" to fix it (rank 0's setting counts)."""

    def __init__(self, job: Union[str, int], rank: IntArg, size: IntArg,
                 timeout: Union[float, _timedelta, None] = 60.0, wait_policy: WaitPolicy = "default",
                 small_bytes: IntArg = 0, chunk_bytes: IntArg = 0, allreduce_small_bytes: IntArg = 0,
                 buffer_bytes: IntArg = 0, cpu_sharers: IntArg = 0, broadcast_eager_bytes: IntArg = 0,
                 kernel_copy: KernelCopy = "auto", distance: Distance = "auto") -> None:
        nbytes = (_int_arg(small_bytes, "small_bytes", 63), _int_arg(chunk_bytes, "chunk_bytes", 63),
                  _int_arg(allreduce_small_bytes, "allreduce_small_bytes", 63),
                  _int_arg(buffer_bytes, "buffer_bytes", 63))
        if isinstance(job, bool) or not isinstance(job, (str, _numbers.Integral)):  # str(None): a job "None"
            raise TypeError(f"job must be a name (a str, or an int such as a port), not {type(job).__name__}: "
                            f"the same on every rank of the job, or use lockstep.Comm.from_env()")
        self._c = _lockstep.Comm(str(job), _int_arg(rank, "rank"), _int_arg(size, "size"), _timeout_ms(timeout),
                                 _code(_POLICIES, wait_policy, "wait_policy"), *nbytes,
                                 _int_arg(cpu_sharers, "cpu_sharers"),
                                 _int_arg(broadcast_eager_bytes, "broadcast_eager_bytes", 63),
                                 _code(_KERNEL_COPY, kernel_copy, "kernel_copy"), _code(_DISTANCE, distance, "distance"))
        self.job: str = str(job)
        self.rank: int = self._c.rank
        self.size: int = self._c.size
        for name in _C_METHODS:  # no Python frame per call for numpy arrays: 0.1 us of 0.3 (allreduce)
            if getattr(type(self), name) is getattr(Comm, name):
                setattr(self, name, getattr(self._c, name))

    @classmethod
    def from_env(cls, **kw: Any) -> Comm:
        """Join the job described by the launcher's variables (torchrun's LOCAL_RANK /
        LOCAL_WORLD_SIZE / MASTER_ADDR / MASTER_PORT, OpenMPI's OMPI_COMM_WORLD_LOCAL_*,
        or LOCKSTEP_RANK / LOCKSTEP_SIZE / LOCKSTEP_JOB)."""
        job, rank, size = _lockstep.env_params()
        return cls(job, rank, size, **kw)

    def __reduce__(self) -> Any:
        raise TypeError("a lockstep.Comm belongs to the process that created it and cannot be pickled, "
                        "copied or sent to another process (multiprocessing's spawn start method): "
                        "create one in each process, e.g. with lockstep.Comm.from_env()")

    def allreduce(self, buf: Buf, op: Op = "sum") -> Buf:
        """Reduce buf over all ranks, in place, and return it. op: "sum", "max" or "min".
        Every rank gets identical bits."""
        return self._c.allreduce(buf, op)

    def buffer(self, shape: Union[int, Sequence[int]], dtype: Any = "float32", offset: int = 0) -> Any:
        """A view of this rank's shared buffer (buffer_bytes at creation): a numpy array
        of shape and dtype starting offset bytes in, or a torch tensor when dtype is a
        torch dtype. Allreduces of such views (on every rank) run zero-copy. Views stay
        valid after close(); the memory goes with the last of them."""
        mod = getattr(type(dtype), "__module__", "")
        if mod.startswith("torch"):
            import torch
            esize = torch.empty((), dtype=dtype).element_size()
        else:
            dtype = _np.dtype(dtype)
            esize = dtype.itemsize
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        count = 1
        for n in shape:
            if not isinstance(n, int) or n < 0:
                raise ValueError(f"shape must hold non-negative ints, not {shape!r}")
            count *= n
        mem = memoryview(self._c)  # ValueError when the Comm has no buffer
        if not isinstance(offset, int) or offset < 0 or offset % esize:
            raise ValueError(f"offset must be a non-negative multiple of the item size ({esize}), not {offset!r}")
        if offset + count * esize > mem.nbytes:
            raise ValueError(f"{count * esize} bytes at offset {offset} do not fit in the {mem.nbytes}-byte "
                             f"buffer: create the Comm with a larger buffer_bytes")
        view = mem[offset:offset + count * esize]
        if mod.startswith("torch"):
            return torch.frombuffer(view, dtype=dtype, count=count).view(shape) if count else \
                torch.empty(shape, dtype=dtype)
        return _np.frombuffer(view, dtype=dtype, count=count).reshape(shape)

    def _refused(self) -> None:
        """After this rank's own check of a collective's arguments raised: take its turn
        in the call anyway, refused, so that the peers' call ends at once with
        PeerArgumentError instead of at the deadline (the caller then re-raises)."""
        self._c.refuse()

    def broadcast(self, buf: Buf, root: int = 0, order: Order = "linear", xfer: Xfer = "pull") -> Buf:
        """Copy root's buf into every rank's buf (same byte length everywhere); returns buf.
        order: "linear", "rotated", "random" or "topology", the order root's copies go
        in; xfer: "pull" or "push" (see the module docstring)."""
        return self._c.broadcast(buf, root, order, xfer)

    def allgather(self, send: Any, recv: Optional[Any] = None, order: Order = "linear", xfer: Xfer = "pull") -> Any:
        """recv[r * len(send) : (r + 1) * len(send)] = rank r's send, on every rank;
        returns recv. Without recv, a new one: for a numpy array or torch tensor of
        shape S (a numpy scalar: S = ()), one of shape (size, *S) and the same dtype
        (block r is rank r's); for any other buffer, a numpy uint8 array of shape
        (size, nbytes). order and xfer as for broadcast."""
        return self._c.allgather(send, recv, order, xfer)

    def alltoall(self, send: Any, recv: Optional[Any] = None) -> Any:
        """recv block k = rank k's block `rank` of send, where send (and recv) hold size
        equal blocks of bytes, block r for rank r; returns recv (a new array or tensor
        like send without it). recv must not overlap send."""
        return self._c.alltoall(send, recv)

    def reduce_scatter(self, send: Any, recv: Optional[Any] = None, op: Op = "sum") -> Any:
        """recv = this rank's block of send, reduced over all ranks in rank order (as
        allreduce: the same dtypes and ops, f16/bf16 in f32, the same bits whichever
        rank computes them); returns recv. send (numpy array or torch CPU tensor,
        C-contiguous) holds size equal blocks, block r for rank r; recv holds one block
        of the same dtype, and may be this rank's block of send (with recv given,
        any C-contiguous buffers of those dtypes will do). Without recv, a new one:
        send's shape with its first dimension divided by size when it divides, else
        1-D."""
        return self._c.reduce_scatter(send, recv, op)

    def peers(self, order: Order = "linear") -> List[int]:
        """The other ranks, in the order a broadcast or allgather with this order visits
        them from this rank ("topology": ranks on this CPU first, then SMT siblings,
        same L3, same NUMA node)."""
        return self._c.peers(_code(_ORDERS, order, "order"))

    def barrier(self) -> None:
        self._c.barrier()

    def tag(self, tag: IntArg) -> None:
        """From now on this rank's calls on this Comm carry tag (0-255; 0 at creation),
        which every rank compares as it compares the call itself: calls alike but for
        their tags raise MismatchError on every rank. For a layer that makes one
        operation of several calls, so that a rank at another step, or in another
        operation, cannot be paired with a call that merely looks the same. Local: it
        sends nothing."""
        self._c.tag(_int_arg(tag, "tag"))

    def close(self) -> None:
        self._c.close()

    @property
    def kernel_copy(self) -> bool:
        """Whether this rank offers kernel copies (process_vm_readv/writev straight
        between the ranks' memory) where the route table takes them: False when a
        security module refused them at creation, or kernel_copy="off" (or
        LOCKSTEP_KERNEL_COPY=off). A call moves that way only if every rank offers."""
        return self._c.kernel_copy

    @property
    def distance(self) -> Tuple[str, int]:
        """How far apart the ranks sit, as ("close" or "far", round trip in ns): a cache
        line's round trip between rank 0 and rank 1 (where ranks outnumber the CPUs,
        the first rank on another CPU than rank 0), measured at creation, every 1024
        calls, and in large calls 50 ms after the last measurement; far apart, large
        calls move by kernel copy. The round trip is 0 until measured (one rank, or no
        partner answered from another CPU).
        LOCKSTEP_COMM_DISTANCE=close or far in rank 0's environment overrides it."""
        return self._c.distance

    @property
    def route(self) -> str:
        """The route this rank's last call took: "none", "inline", "small", "chunked",
        "zero-copy", "kernel-copy" or "eager" (the Routes table of lockstep/comm.h)."""
        return self._c.route

    @property
    def closed(self) -> bool:
        """True once close() has been called."""
        return self._c.closed

    def __repr__(self) -> str:
        return (f"Comm(job={self.job!r}, rank={self.rank}, size={self.size}"
                + (", closed)" if self.closed else ")"))

    def __enter__(self) -> Comm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_C_METHODS = ("allreduce", "broadcast", "allgather", "alltoall", "reduce_scatter")


# The Python paths of the C methods bound on each Comm (see _C_METHODS), for what they
# do not take on themselves: torch tensors, a recv to make, arguments to convert or to
# refuse. c is the Comm's C communicator; the arguments are the caller's.

def _broadcast(c: _lockstep.Comm, buf: Any, root: Any = 0, order: Any = "linear", xfer: Any = "pull") -> Any:
    try:
        root = _lockstep.check_root(_int_arg(root, "root", None), c.size)
        o, x = _code(_ORDERS, order, "order"), _code(_XFERS, xfer, "xfer")
        memory = _tensor_memory(buf) if _is_tensor(buf) else None
    except (TypeError, ValueError):
        c.refuse()  # the peers' call ends now (PeerArgumentError), not at the deadline
        raise
    if memory is None:
        c.broadcast_buf(buf, root, o, x)
    else:
        c.broadcast_ptr(memory[0], memory[1], root, o, x)
    _written(buf)
    return buf


def _allgather(c: _lockstep.Comm, send: Any, recv: Any = None, order: Any = "linear", xfer: Any = "pull") -> Any:
    if recv is None:
        try:
            recv = _new_like(send, _RECV_GATHER, c.size, "allgather")
        except (TypeError, ValueError):
            c.refuse()
            raise
        return c.allgather(send, recv, order, xfer)  # the C method again, now with recv
    try:
        o, x = _code(_ORDERS, order, "order"), _code(_XFERS, xfer, "xfer")
        m = _send_recv_memory(send, recv)
    except (TypeError, ValueError):
        c.refuse()
        raise
    if len(m) == 2:
        c.allgather_buf(m[0], m[1], o, x)
    else:
        c.allgather_ptr(m[0], m[1], m[2], m[3], o, x)
    _written(recv)
    return recv


def _alltoall(c: _lockstep.Comm, send: Any, recv: Any = None) -> Any:
    if recv is None:
        try:
            recv = _new_like(send, _RECV_SAME, c.size, "alltoall")
        except (TypeError, ValueError):
            c.refuse()
            raise
        return c.alltoall(send, recv)
    try:
        m = _send_recv_memory(send, recv)
    except (TypeError, ValueError):
        c.refuse()
        raise
    if len(m) == 2:
        c.alltoall_buf(m[0], m[1])
    else:
        c.alltoall_ptr(m[0], m[1], m[2], m[3])
    _written(recv)
    return recv


def _reduce_scatter(c: _lockstep.Comm, send: Any, recv: Any = None, op: Any = "sum") -> Any:
    if recv is None:
        try:
            _code(_OPS, op, "op")  # checked first, as with recv
            recv = _rs_recv(send, c.size)
        except (TypeError, ValueError):
            c.refuse()
            raise
        return c.reduce_scatter(send, recv, op)  # the C method again (which checks send), now with recv
    try:
        op_code = _code(_OPS, op, "op")
        scode, n = _rs_operand(send, "send", False)
        if n % c.size:
            raise ValueError(f"reduce_scatter's send must hold size ({c.size}) equal blocks; "
                             f"it holds {n} elements")
        count = n // c.size
        rcode, rn = _rs_operand(recv, "recv", True)
        if rcode != scode or rn != count:
            raise ValueError(f"reduce_scatter's recv must hold one block of send: {count} elements of send's "
                             f"dtype, not {rn} of another" if rcode != scode else
                             f"reduce_scatter's recv must hold one block of send: {count} elements, not {rn}")
    except (TypeError, ValueError):
        c.refuse()
        raise
    c.reduce_scatter_ptr(_address(send), _address(recv), count, scode, op_code)  # tensors (numpy arrays: in C)
    _written(recv)
    return recv


def _rs_recv(send: Any, size: int) -> Any:
    """A new recv for reduce_scatter(send): send's shape with its first dimension divided
    by size when it divides, else 1-D; send's dtype. (The call checks send.)"""
    tensor = _is_tensor(send)
    if not tensor and not isinstance(send, _np.ndarray):
        raise TypeError(f"reduce_scatter's send must be a numpy array or a torch CPU tensor, "
                        f"not {type(send).__name__}")
    shape = _lockstep.recv_shape(tuple(send.shape), _RECV_SCATTER, size)
    if tensor:
        import torch
        return torch.empty(shape, dtype=send.dtype)
    return _np.empty(shape, send.dtype)


def _rs_operand(a: Any, what: str, writable: bool) -> Tuple[int, int]:
    """(dtype code, element count) of a numpy array or torch tensor, checked"""
    if _is_tensor(a):
        return _torch_code(a, "reduce_scatter"), a.numel()
    if not isinstance(a, _np.ndarray):
        raise TypeError(f"reduce_scatter's {what} must be a numpy array or a torch CPU tensor, "
                        f"not {type(a).__name__}")
    code = _NUMPY_CODES.get(a.dtype.str.lstrip("<=|"))
    if code is None and a.dtype.byteorder == ">":
        raise TypeError(f"reduce_scatter reduces numbers in this machine's byte order; {what} is big-endian "
                        f"{a.dtype.str} (convert it first, e.g. x.astype('<{a.dtype.str[1:]}'))")
    if code is None:
        raise TypeError(f"reduce_scatter supports float32, float16, bfloat16 and int32; {what} is {a.dtype}")
    if not a.flags.c_contiguous:
        raise ValueError(f"reduce_scatter's {what} must be C-contiguous (numpy.ascontiguousarray)")
    if writable and not a.flags.writeable:
        raise ValueError(f"reduce_scatter's {what} must be writable")
    return code, a.size


for _name in _C_METHODS[1:]:  # Python's own errors for arguments that fit no parameter name the method
    _path = globals()["_" + _name]
    _path.__qualname__ = f"Comm.{_name}"
    _path.__code__ = _path.__code__.replace(co_name=_name)
_lockstep._set_python_paths(_allreduce_other, _broadcast, _allgather, _alltoall, _reduce_scatter)
_lockstep._set_numpy(_np.ndarray, _np.empty)
