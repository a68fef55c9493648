"""lockstep's collectives as torch custom ops, so that torch.compile keeps the calls in
the graph instead of breaking it.

    import lockstep.torch_ops as lt
    handle = lt.register(comm)                       # once per communicator
    torch.ops.lockstep.all_reduce_(tensor, handle, "sum")    # in place
    torch.ops.lockstep.broadcast_(tensor, handle, 0)         # in place, from rank 0
    out = torch.ops.lockstep.all_reduce(tensor, handle, "sum")  # the same, into a new tensor
    out = torch.ops.lockstep.broadcast(tensor, handle, 0)       # the same, into a new tensor
    out = torch.ops.lockstep.all_gather(tensor, handle, -1)  # a new tensor: every rank's
                                                             # tensor, concatenated along
                                                             # that dim (as torch.cat)
    part = torch.ops.lockstep.reduce_scatter(tensor, handle, "sum", 0)
                    # tensor split along dim 0 into size equal parts; part r of the sum
                    # of every rank's tensor, on rank r
    out = torch.ops.lockstep.all_to_all(tensor, handle, 1, 0)
                    # tensor split along dim 1 into size equal parts, part r sent to
                    # rank r; the parts received, from rank 0 first, concatenated
                    # along dim 0 (scatter and gather dims as in sequence parallelism;
                    # 0, 0 is torch.distributed.all_to_all_single with equal splits)

A call whose arguments are wrong on one rank (a dim out of range, a size that does
not split, a tensor that requires grad) raises there and lockstep.PeerArgumentError on
the others, at once, as lockstep.Comm's calls do.

all_reduce_ and broadcast_ change their tensor in place and return nothing; the
others return a new contiguous tensor. all_gather and all_to_all take any dtype;
reduce_scatter the dtypes and ops of all_reduce_. All take any layout: a
non-contiguous input is copied first (all_reduce_ and broadcast_ copy the result back
into it). Their fake (meta) implementations only give the
output's shape, which is all tracing needs. They have no backward: on a tensor that
requires grad, call them under torch.no_grad() or torch.inference_mode().

For autograd, all_reduce_autograd, broadcast_autograd, all_gather_autograd,
reduce_scatter_autograd and all_to_all_autograd take the same arguments as the ops
without the suffix and give the same results, with a backward: the gradient of the
sum over ranks of each rank's loss, as torch's autograd functional collectives give
it. all_reduce's (sum) is the all_reduce of the output's gradient; broadcast's the
same on the root and zeros elsewhere (every rank takes part in that all_reduce);
all_gather's the reduce_scatter (sum) of it along the same dim, reduce_scatter's the
all_gather of it, all_to_all's an all_to_all with scatter_dim and gather_dim swapped,
each itself differentiable. Every rank must then run its backward (the backward's
collectives meet in the same order on every rank). all_reduce_autograd and
reduce_scatter_autograd with max or min have no gradient: on a tensor that requires
grad (grad enabled), they raise RuntimeError on every rank once their transfer is
done, so the ranks stay in step. They are separate ops because torch's Python autograd
layer costs about 3.5 us per eager call outside torch.inference_mode(), which
inference should not pay. all_reduce_ and broadcast_ change their tensor in place,
which torch's custom ops cannot give a backward for; all_reduce and broadcast copy
the tensor first and have the autograd variants.

The ops' kernels are C++ (csrc/torch_ops.cpp): the dispatcher calls the library
without Python in between, so a call costs torch's dispatch (the do-nothing op
torch.ops.lockstep._noop_(tensor, handle) measures it) plus lockstep's own call. They
are built against the installed torch at the first import, about 10 s, and cached
(lockstep/_torch_build.py says where and when they are rebuilt). Where they cannot be
built (no C++ compiler, no headers) one RuntimeWarning says why and Python kernels with
the same behaviour serve, about 2 us slower a call; backend says which ("cpp" or
"python"), and LOCKSTEP_TORCH_OPS=cpp (raise instead of falling back) or =python
chooses. Failures raise what lockstep.Comm's calls raise, through either.
"""
from __future__ import annotations

import importlib.util
import os
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

import torch

from . import _lockstep, _torch_build
from ._args import _torch_seen

if TYPE_CHECKING:
    import lockstep
    from lockstep import Op

_R = TypeVar("_R")
_Setup = Callable[[Any, Tuple[Any, ...], Any], None]  # setup_context(ctx, inputs, output)

_torch_seen(torch)  # plain tensors go to C from the first call
_comms: Dict[int, lockstep.Comm] = {}
_cpp: Any = None  # the C++ kernels' module (lockstep._torch_ops), set at the end
_bump = torch._C._increment_version  # of a tuple of tensors: torch.autograd.graph.increment_version's own call


def register(comm: "lockstep.Comm") -> int:
    """Make comm callable from the op; returns the integer handle to pass to it."""
    handle = id(comm)
    _comms[handle] = comm
    if _cpp is not None:
        _cpp.bind(handle, comm._c, comm.rank, comm.size)
    return handle


def unregister(handle: int) -> None:
    _comms.pop(handle, None)
    if _cpp is not None:
        _cpp.unbind(handle)


def _comm(handle: int) -> lockstep.Comm:
    comm = _comms.get(handle)
    if comm is None:
        raise _lockstep.unbound_error(handle)
    return comm


def _refusing(comm: lockstep.Comm, check: Callable[..., _R], *args: Any) -> _R:
    """check(*args); when it raises (this rank's arguments are wrong), take this rank's
    turn in the call anyway, refused, so that the peers' call ends at once with
    lockstep.PeerArgumentError instead of at the deadline (see lockstep.Comm)"""
    try:
        return check(*args)
    except (TypeError, ValueError, RuntimeError):
        comm._refused()
        raise


def _no_grad(comm: lockstep.Comm, tensor: torch.Tensor, name: str) -> None:
    if tensor.requires_grad and torch.is_grad_enabled():
        comm._refused()  # as _refusing does; here the check costs no call of its own
        raise _lockstep.no_grad_error(name)


def all_reduce_(tensor: torch.Tensor, handle: int, op: Op = "sum") -> None:
    """The op's kernel (every device; lockstep itself refuses non-CPU tensors). The
    in-place kernels are the per-call path of eager inference: each step here costs."""
    comm = _comms.get(handle)
    if comm is None:
        comm = _comm(handle)  # raises
    if tensor.requires_grad:
        _no_grad(comm, tensor, "all_reduce_")
    if tensor.is_contiguous():
        comm.allreduce(tensor, op)
    else:  # through a contiguous copy, and back into the tensor's own layout
        tensor.copy_(comm.allreduce(tensor.contiguous(), op))
    _bump((tensor,))  # changed in place: autograd's version counter must say so


def broadcast_(tensor: torch.Tensor, handle: int, root: int = 0) -> None:
    comm = _comms.get(handle)
    if comm is None:
        comm = _comm(handle)
    if tensor.requires_grad:
        _no_grad(comm, tensor, "broadcast_")
    if tensor.is_contiguous():
        comm.broadcast(tensor, root)
    else:
        tensor.copy_(comm.broadcast(tensor.contiguous(), root))
    _bump((tensor,))


def all_reduce(tensor: torch.Tensor, handle: int, op: Op = "sum") -> torch.Tensor:
    """all_reduce_ into a new contiguous tensor; tensor stays as it was"""
    comm = _comm(handle)
    _no_grad(comm, tensor, "all_reduce")
    return comm.allreduce(tensor.clone(memory_format=torch.contiguous_format), op)


def broadcast(tensor: torch.Tensor, handle: int, root: int = 0) -> torch.Tensor:
    """broadcast_ into a new contiguous tensor: the root's tensor, on every rank"""
    comm = _comm(handle)
    _no_grad(comm, tensor, "broadcast")
    out = tensor.clone(memory_format=torch.contiguous_format) if comm.rank == root else torch.empty(
        tensor.shape, dtype=tensor.dtype)
    return comm.broadcast(out, root)


def _dim(tensor: torch.Tensor, dim: int, op: str, name: str = "dim") -> int:
    """dim as a non-negative index into tensor's dimensions, checked"""
    return int(_lockstep.check_dim(tensor.dim(), dim, op, name))


def _gather_shape(tensor: torch.Tensor, size: int, dim: int) -> Tuple[List[int], int]:
    """The output's shape, and dim as a non-negative index"""
    dim = _dim(tensor, dim, "all_gather")
    shape = list(tensor.shape)
    shape[dim] *= size
    return shape, dim


def all_gather(tensor: torch.Tensor, handle: int, dim: int = 0) -> torch.Tensor:
    comm = _comm(handle)
    _no_grad(comm, tensor, "all_gather")
    shape, dim = _refusing(comm, _gather_shape, tensor, comm.size, dim)
    blocks: torch.Tensor = comm.allgather(tensor.contiguous())  # (size, *shape), block r rank r's
    if dim == 0:
        return blocks.view(shape)
    return blocks.movedim(0, dim).reshape(shape)  # rank r's block at r * tensor.shape[dim], as cat


def _split_shape(tensor: torch.Tensor, size: int, dim: int, op: str, name: str = "dim") -> Tuple[List[int], int]:
    """tensor's shape with dim divided by size, and dim as a non-negative index"""
    dim = _dim(tensor, dim, op, name)
    shape = list(tensor.shape)
    _lockstep.check_split(shape[dim], size, dim, op)
    shape[dim] //= size
    return shape, dim


def _parts(tensor: torch.Tensor, size: int, dim: int, part_shape: Sequence[int]) -> torch.Tensor:
    """tensor split along dim into size parts, as one contiguous (size, *part_shape) tensor"""
    split = list(tensor.shape[:dim]) + [size, part_shape[dim]] + list(tensor.shape[dim + 1:])
    return tensor.reshape(split).movedim(dim, 0).contiguous()


def reduce_scatter(tensor: torch.Tensor, handle: int, op: Op = "sum", dim: int = 0) -> torch.Tensor:
    comm = _comm(handle)
    _no_grad(comm, tensor, "reduce_scatter")
    shape, dim = _refusing(comm, _split_shape, tensor, comm.size, dim, "reduce_scatter")
    out: torch.Tensor = comm.reduce_scatter(_parts(tensor, comm.size, dim, shape), op=op)
    return out.view(shape)


def _all_to_all_shapes(tensor: torch.Tensor, size: int, scatter_dim: int, gather_dim: int
                       ) -> Tuple[List[int], List[int], int, int]:
    """(one part's shape, the output's shape, scatter_dim, gather_dim), the dims
    non-negative"""
    part, scatter_dim = _split_shape(tensor, size, scatter_dim, "all_to_all", "scatter_dim")
    gather_dim = _dim(tensor, gather_dim, "all_to_all", "gather_dim")
    shape = list(part)
    shape[gather_dim] *= size
    return part, shape, scatter_dim, gather_dim


def all_to_all(tensor: torch.Tensor, handle: int, scatter_dim: int = 0, gather_dim: int = 0) -> torch.Tensor:
    comm = _comm(handle)
    _no_grad(comm, tensor, "all_to_all")
    part, shape, scatter_dim, gather_dim = _refusing(comm, _all_to_all_shapes, tensor, comm.size, scatter_dim,
                                                     gather_dim)
    got: torch.Tensor = comm.alltoall(_parts(tensor, comm.size, scatter_dim, part))  # got[k]: rank k's part for me
    return got.movedim(0, gather_dim).reshape(shape)  # as torch.cat(list(got), gather_dim)


def _fake_in_place(tensor: torch.Tensor, handle: int, arg: Any = None) -> None:
    return None


def _fake_same(tensor: torch.Tensor, handle: int, arg: Any = None) -> torch.Tensor:
    return tensor.new_empty(tensor.shape)


def _fake_gather(tensor: torch.Tensor, handle: int, dim: int = 0) -> torch.Tensor:
    shape, _ = _gather_shape(tensor, _comm(handle).size, dim)
    return tensor.new_empty(shape)


def _fake_reduce_scatter(tensor: torch.Tensor, handle: int, op: Op = "sum", dim: int = 0) -> torch.Tensor:
    shape, _ = _split_shape(tensor, _comm(handle).size, dim, "reduce_scatter")
    return tensor.new_empty(shape)


def _fake_all_to_all(tensor: torch.Tensor, handle: int, scatter_dim: int = 0, gather_dim: int = 0) -> torch.Tensor:
    _, shape, _, _ = _all_to_all_shapes(tensor, _comm(handle).size, scatter_dim, gather_dim)
    return tensor.new_empty(shape)


# ---- the autograd variants: the gradient of the sum of every rank's loss -------------

def _keep(names: Sequence[str]) -> _Setup:
    """setup_context that keeps these of the op's arguments (after the tensor) on ctx"""
    def setup(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
        for name, value in zip(names, inputs[1:]):
            setattr(ctx, name, value)
    return setup


_keep_reduce_scatter = _keep(("handle", "op", "dim"))


def _sum_only(ctx: Any, name: str) -> None:
    """setup_context's check for the reductions: only 'sum' has a gradient"""
    if ctx.op != "sum":
        raise RuntimeError(f"torch.ops.lockstep.{name}_autograd with op {ctx.op!r} has no gradient (only 'sum' "
                           f"has): call it under torch.no_grad() or on a tensor that does not require grad")


def _setup_reduce_scatter(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    _keep_reduce_scatter(ctx, inputs, output)
    _sum_only(ctx, "reduce_scatter")


_keep_all_reduce = _keep(("handle", "op"))


def _setup_all_reduce(ctx: Any, inputs: Tuple[Any, ...], output: Any) -> None:
    _keep_all_reduce(ctx, inputs, output)
    _sum_only(ctx, "all_reduce")


def _rest(ctx: Any) -> Tuple[None, ...]:
    """no gradient for the arguments after the tensor"""
    return (None,) * (len(ctx.needs_input_grad) - 1)


def _all_reduce_backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
    return (torch.ops.lockstep.all_reduce_autograd(grad, ctx.handle, "sum"),) + _rest(ctx)


def _broadcast_backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
    total = torch.ops.lockstep.all_reduce_autograd(grad, ctx.handle, "sum")  # on every rank
    return (total if _comm(ctx.handle).rank == ctx.root else torch.zeros_like(total),) + _rest(ctx)


def _all_gather_backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
    return (torch.ops.lockstep.reduce_scatter_autograd(grad, ctx.handle, "sum", ctx.dim),) + _rest(ctx)


def _reduce_scatter_backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
    return (torch.ops.lockstep.all_gather_autograd(grad, ctx.handle, ctx.dim),) + _rest(ctx)


def _all_to_all_backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
    return (torch.ops.lockstep.all_to_all_autograd(grad, ctx.handle, ctx.gather_dim, ctx.scatter_dim),) + _rest(ctx)


_SCHEMAS = {
    "all_reduce_": "(Tensor(a!) tensor, int handle, str op='sum') -> ()",
    "broadcast_": "(Tensor(a!) tensor, int handle, int root=0) -> ()",
    "all_reduce": "(Tensor tensor, int handle, str op='sum') -> Tensor",
    "broadcast": "(Tensor tensor, int handle, int root=0) -> Tensor",
    "all_gather": "(Tensor tensor, int handle, int dim=0) -> Tensor",
    "reduce_scatter": "(Tensor tensor, int handle, str op='sum', int dim=0) -> Tensor",
    "all_to_all": "(Tensor tensor, int handle, int scatter_dim=0, int gather_dim=0) -> Tensor",
    "_noop_": "(Tensor(a!) tensor, int handle) -> ()",
}
_lib = torch.library.Library("lockstep", "DEF")  # type: ignore[no-untyped-call]  # (torch 2.13's)


def _noop_(tensor: torch.Tensor, handle: int) -> None:
    """torch's dispatch and nothing else: the benchmark's floor for any op"""


def _load_cpp() -> Any:
    """The C++ kernels (csrc/torch_ops.cpp), built for this torch at first use, or None
    with one warning when they cannot be built or loaded (the Python kernels serve)"""
    choice = os.environ.get("LOCKSTEP_TORCH_OPS", "auto")
    if choice not in ("auto", "cpp", "python"):
        raise ValueError(f"LOCKSTEP_TORCH_OPS must be auto, cpp or python, not {choice!r}")
    if choice == "python":
        return None
    try:
        spec = importlib.util.spec_from_file_location("lockstep._torch_ops", _torch_build.build())
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # registers the CPU kernels
        return module
    except (_torch_build.BuildError, ImportError, OSError) as e:
        if choice == "cpp":
            raise
        warnings.warn(f"lockstep.torch_ops uses its Python kernels (a few us more per call): the C++ ones are not "
                      f"available: {e}", RuntimeWarning, stacklevel=3)
        return None


# name, Python kernel, fake, and for the functional ops the autograd variant's backward
# and setup_context. The kernels run below torch's autograd layer, where grad mode is
# off, so _no_grad lets the variants through.
_OPS = (("all_reduce_", all_reduce_, _fake_in_place, None), ("broadcast_", broadcast_, _fake_in_place, None),
        ("all_reduce", all_reduce, _fake_same, (_all_reduce_backward, _setup_all_reduce)),
        ("broadcast", broadcast, _fake_same, (_broadcast_backward, _keep(("handle", "root")))),
        ("all_gather", all_gather, _fake_gather, (_all_gather_backward, _keep(("handle", "dim")))),
        ("reduce_scatter", reduce_scatter, _fake_reduce_scatter, (_reduce_scatter_backward, _setup_reduce_scatter)),
        ("all_to_all", all_to_all, _fake_all_to_all,
         (_all_to_all_backward, _keep(("handle", "scatter_dim", "gather_dim")))),
        ("_noop_", _noop_, _fake_in_place, None))
for _name, _kernel, _fake, _grad in _OPS:
    _lib.define(_name + _SCHEMAS[_name])  # type: ignore[no-untyped-call]
    torch.library.register_fake("lockstep::" + _name, _fake, lib=_lib)
    if _grad is not None:
        _lib.define(_name + "_autograd" + _SCHEMAS[_name])  # type: ignore[no-untyped-call]
        torch.library.register_fake(f"lockstep::{_name}_autograd", _fake, lib=_lib)
        torch.library.register_autograd(f"lockstep::{_name}_autograd", _grad[0], setup_context=_grad[1], lib=_lib)

_cpp = _load_cpp()
backend = "cpp" if _cpp is not None else "python"  # whose kernels the ops run
if _cpp is None:
    for _name, _kernel, _fake, _grad in _OPS:
        _lib.impl(_name, _kernel, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
        if _grad is not None:
            _lib.impl(_name + "_autograd", _kernel, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
