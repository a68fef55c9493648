"""lockstep's collectives as torch custom ops, so that torch.compile keeps the calls in
the graph instead of breaking it.

    import lockstep.torch_ops as lt
    handle = lt.register(comm)                       # once per communicator
    torch.ops.lockstep.all_reduce_(tensor, handle, "sum")    # in place
    torch.ops.lockstep.broadcast_(tensor, handle, 0)         # in place, from rank 0
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

all_reduce_ and broadcast_ change their tensor in place and return nothing; the
others return a new contiguous tensor. all_gather and all_to_all take any dtype;
reduce_scatter the dtypes and ops of all_reduce_. All take any layout: a
non-contiguous input is copied first (all_reduce_ and broadcast_ copy the result back
into it). Their fake (meta) implementations only give the
output's shape, which is all tracing needs. They have no backward: on a tensor that
requires grad, call them under torch.no_grad() or torch.inference_mode().

The op is defined through torch.library.Library (a schema and one kernel) rather than
the torch.library.custom_op decorator, whose Python autograd and view-tracking layers
cost about 20 us per eager call; this way an eager call costs about 3 us more than
comm.allreduce(tensor).
"""
import torch

_comms = {}
_bump = torch.autograd.graph.increment_version


def register(comm):
    """Make comm callable from the op; returns the integer handle to pass to it."""
    handle = id(comm)
    _comms[handle] = comm
    return handle


def unregister(handle):
    _comms.pop(handle, None)


def _comm(handle):
    comm = _comms.get(handle)
    if comm is None:
        raise ValueError(f"no communicator registered under handle {handle}: call lockstep.torch_ops.register(comm)")
    return comm


def _no_grad(tensor, name):
    if tensor.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"torch.ops.lockstep.{name} has no backward: call it under torch.no_grad() "
                           "or torch.inference_mode(), or on a tensor that does not require grad")


def all_reduce_(tensor, handle, op="sum"):
    """The op's kernel (every device; lockstep itself refuses non-CPU tensors)."""
    comm = _comm(handle)
    _no_grad(tensor, "all_reduce_")
    if tensor.is_contiguous():
        comm.allreduce(tensor, op)
    else:  # through a contiguous copy, and back into the tensor's own layout
        tensor.copy_(comm.allreduce(tensor.contiguous(), op))
    _bump((tensor,))  # changed in place: autograd's version counter must say so (a tuple: 0.3 us, a bare tensor 7)


def broadcast_(tensor, handle, root=0):
    comm = _comm(handle)
    _no_grad(tensor, "broadcast_")
    if tensor.is_contiguous():
        comm.broadcast(tensor, root)
    else:
        tensor.copy_(comm.broadcast(tensor.contiguous(), root))
    _bump((tensor,))


def _dim(tensor, dim, op, name="dim"):
    """dim as a non-negative index into tensor's dimensions, checked"""
    if tensor.dim() == 0:
        raise ValueError(f"{op} needs a tensor of at least one dimension (use .reshape(1))")
    if not -tensor.dim() <= dim < tensor.dim():
        raise ValueError(f"{op}'s {name} must be from {-tensor.dim()} to {tensor.dim() - 1} for this "
                         f"{tensor.dim()}-dimensional tensor, not {dim}")
    return dim % tensor.dim()


def _gather_shape(tensor, size, dim):
    """The output's shape, and dim as a non-negative index"""
    dim = _dim(tensor, dim, "all_gather")
    shape = list(tensor.shape)
    shape[dim] *= size
    return shape, dim


def all_gather(tensor, handle, dim=0):
    comm = _comm(handle)
    _no_grad(tensor, "all_gather")
    shape, dim = _gather_shape(tensor, comm.size, dim)
    blocks = comm.allgather(tensor.contiguous())  # (size, *shape), block r rank r's
    if dim == 0:
        return blocks.view(shape)
    return blocks.movedim(0, dim).reshape(shape)  # rank r's block at r * tensor.shape[dim], as cat


def _split_shape(tensor, size, dim, op, name="dim"):
    """tensor's shape with dim divided by size, and dim as a non-negative index"""
    dim = _dim(tensor, dim, op, name)
    shape = list(tensor.shape)
    if shape[dim] % size:
        raise ValueError(f"{op} splits dimension {dim} into {size} equal parts, one per rank, but it has "
                         f"{shape[dim]} elements: pad it to a multiple of {size}")
    shape[dim] //= size
    return shape, dim


def _parts(tensor, size, dim, part_shape):
    """tensor split along dim into size parts, as one contiguous (size, *part_shape) tensor"""
    split = list(tensor.shape[:dim]) + [size, part_shape[dim]] + list(tensor.shape[dim + 1:])
    return tensor.reshape(split).movedim(dim, 0).contiguous()


def reduce_scatter(tensor, handle, op="sum", dim=0):
    comm = _comm(handle)
    _no_grad(tensor, "reduce_scatter")
    shape, dim = _split_shape(tensor, comm.size, dim, "reduce_scatter")
    return comm.reduce_scatter(_parts(tensor, comm.size, dim, shape), op=op).view(shape)


def _all_to_all_shapes(tensor, size, scatter_dim, gather_dim):
    """(one part's shape, the output's shape, scatter_dim, gather_dim), the dims
    non-negative"""
    part, scatter_dim = _split_shape(tensor, size, scatter_dim, "all_to_all", "scatter_dim")
    gather_dim = _dim(tensor, gather_dim, "all_to_all", "gather_dim")
    shape = list(part)
    shape[gather_dim] *= size
    return part, shape, scatter_dim, gather_dim


def all_to_all(tensor, handle, scatter_dim=0, gather_dim=0):
    comm = _comm(handle)
    _no_grad(tensor, "all_to_all")
    part, shape, scatter_dim, gather_dim = _all_to_all_shapes(tensor, comm.size, scatter_dim, gather_dim)
    got = comm.alltoall(_parts(tensor, comm.size, scatter_dim, part))  # got[k]: rank k's part for me
    return got.movedim(0, gather_dim).reshape(shape)  # as torch.cat(list(got), gather_dim)


def _fake_in_place(tensor, handle, arg=None):
    return None


def _fake_gather(tensor, handle, dim=0):
    shape, _ = _gather_shape(tensor, _comm(handle).size, dim)
    return tensor.new_empty(shape)


def _fake_reduce_scatter(tensor, handle, op="sum", dim=0):
    shape, _ = _split_shape(tensor, _comm(handle).size, dim, "reduce_scatter")
    return tensor.new_empty(shape)


def _fake_all_to_all(tensor, handle, scatter_dim=0, gather_dim=0):
    _, shape, _, _ = _all_to_all_shapes(tensor, _comm(handle).size, scatter_dim, gather_dim)
    return tensor.new_empty(shape)


_lib = torch.library.Library("lockstep", "DEF")
_lib.define("all_reduce_(Tensor(a!) tensor, int handle, str op='sum') -> ()")
_lib.define("broadcast_(Tensor(a!) tensor, int handle, int root=0) -> ()")
_lib.define("all_gather(Tensor tensor, int handle, int dim=0) -> Tensor")
_lib.define("reduce_scatter(Tensor tensor, int handle, str op='sum', int dim=0) -> Tensor")
_lib.define("all_to_all(Tensor tensor, int handle, int scatter_dim=0, int gather_dim=0) -> Tensor")
for _name, _kernel, _fake in (("all_reduce_", all_reduce_, _fake_in_place), ("broadcast_", broadcast_, _fake_in_place),
                              ("all_gather", all_gather, _fake_gather),
                              ("reduce_scatter", reduce_scatter, _fake_reduce_scatter),
                              ("all_to_all", all_to_all, _fake_all_to_all)):
    _lib.impl(_name, _kernel, "CompositeExplicitAutograd")
    torch.library.register_fake("lockstep::" + _name, _fake, lib=_lib)
