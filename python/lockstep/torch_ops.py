"""torch.ops.lockstep.all_reduce_: lockstep's allreduce as a torch custom op, so that
torch.compile keeps the call in the graph instead of breaking it.

    import lockstep.torch_ops as lt
    handle = lt.register(comm)                       # once per communicator
    torch.ops.lockstep.all_reduce_(tensor, handle, "sum")

The op mutates its tensor in place and returns nothing; its fake (meta)
implementation does nothing, which is all tracing needs. It has no backward: on a
tensor that requires grad, call it under torch.no_grad() or torch.inference_mode().

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


def all_reduce_(tensor, handle, op="sum"):
    """The op's kernel (every device; lockstep itself refuses non-CPU tensors)."""
    comm = _comms.get(handle)
    if comm is None:
        raise ValueError(f"no communicator registered under handle {handle}: call lockstep.torch_ops.register(comm)")
    if tensor.requires_grad and torch.is_grad_enabled():
        raise RuntimeError("torch.ops.lockstep.all_reduce_ has no backward: call it under torch.no_grad() "
                           "or torch.inference_mode(), or on a tensor that does not require grad")
    comm.allreduce(tensor, op)
    _bump((tensor,))  # changed in place: autograd's version counter must say so (a tuple: 0.3 us, a bare tensor 7)


def _fake(tensor, handle, op="sum"):
    return None


_lib = torch.library.Library("lockstep", "DEF")
_lib.define("all_reduce_(Tensor(a!) tensor, int handle, str op='sum') -> ()")
_lib.impl("all_reduce_", all_reduce_, "CompositeExplicitAutograd")
torch.library.register_fake("lockstep::all_reduce_", _fake, lib=_lib)
