"""torch.ops.lockstep.all_reduce_: lockstep's allreduce as a torch custom op, so that
torch.compile keeps the call in the graph instead of breaking it.

    import lockstep.torch_ops as lt
    handle = lt.register(comm)                       # once per communicator
    torch.ops.lockstep.all_reduce_(tensor, handle, "sum")

The op mutates its tensor in place and returns nothing; its fake (meta)
implementation does nothing, which is all tracing needs.
"""
import torch

_comms = {}


def register(comm):
    """Make comm callable from the op; returns the integer handle to pass to it."""
    handle = id(comm)
    _comms[handle] = comm
    return handle


def unregister(handle):
    _comms.pop(handle, None)


@torch.library.custom_op("lockstep::all_reduce_", mutates_args=("tensor",))
def all_reduce_(tensor: torch.Tensor, handle: int, op: str = "sum") -> None:
    comm = _comms.get(handle)
    if comm is None:
        raise ValueError(f"no communicator registered under handle {handle}: call lockstep.torch_ops.register(comm)")
    comm.allreduce(tensor, op)


@all_reduce_.register_fake
def _(tensor, handle, op="sum"):
    return None
