"""The Python calls' arguments, checked before they reach C: integer and name arguments,
timeouts, and the buffers (numpy arrays, torch CPU tensors, anything with the buffer
protocol): which dtype code a tensor has, where its memory lies, a recv made to match a
send. Errors name the argument and what it takes (the package's docstring)."""
from __future__ import annotations

import math as _math
import numbers as _numbers
import operator as _operator
import sys as _sys
from datetime import timedelta as _timedelta
from typing import Any, Dict, Optional, Tuple, Union

import numpy as _np

from . import _lockstep

_ORDERS = {name: code for code, name in enumerate(_lockstep.ORDERS)}  # linear, rotated, random, topology
_XFERS = {name: code for code, name in enumerate(_lockstep.XFERS)}  # pull, push
_POLICIES = {name: code for code, name in enumerate(_lockstep.WAIT_POLICIES)}  # default, auto, active, passive
_KERNEL_COPY = {"auto": 0, "off": 1, "wide": 2}  # lockstep_kernel_copy_t
_DISTANCE = {"close": 0, "far": 1, "auto": 2}  # lockstep_distance_t
_OPS = {name: code for code, name in enumerate(_lockstep.OPS)}  # sum, max, min
_NUMPY_CODES = {"f4": 0, "f2": 1, "i4": 3}  # numpy has no bfloat16: torch tensors for that
_TORCH_DTYPES: Dict[Any, int] = {}  # torch dtype -> lockstep code, filled by _torch_seen


def _int_arg(value: Any, what: str, bits: Optional[int] = 31) -> int:
    """An integer argument: an int (a numpy integer too) or a string holding one (an
    environment variable's value); a float or bool raises TypeError rather than being
    cut, and a value past the C parameter's range (a signed int of bits + 1 bits; None:
    the caller checks) ValueError naming the argument. The C layer checks the range
    that makes sense."""
    n: int
    if isinstance(value, str):
        try:
            n = int(value)
        except ValueError:
            raise ValueError(f"{what} must be an integer, not {value!r}") from None
    elif isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not a bool")
    else:
        try:
            n = _operator.index(value)
        except TypeError:
            raise TypeError(f"{what} must be an integer, not {type(value).__name__} {value!r}") from None
    if bits is not None and not -2**bits <= n < 2**bits:
        raise ValueError(f"{what} is out of range: {n}")
    return n


def _code(table: Dict[str, int], value: Any, what: str) -> int:
    try:
        return table[value]
    except (KeyError, TypeError):
        raise ValueError(f"{what} must be one of {', '.join(sorted(table))}, not {value!r}") from None


def _check_tensor(t: Any) -> None:
    """A torch tensor lockstep can hand to C: in CPU memory and contiguous."""
    if not t.is_cpu:
        raise ValueError(f"lockstep needs CPU tensors; this one is on {t.device} (use .cpu())")
    if t.layout != _sys.modules["torch"].strided:  # sparse, mkldnn (contiguous, but without a data pointer)
        raise ValueError(f"lockstep needs a dense tensor; this one's layout is {t.layout} (use .to_dense())")
    if not t.is_contiguous():
        raise ValueError("lockstep needs a contiguous tensor (use .contiguous() and copy back)")


def _torch_seen(torch: Any) -> None:
    """torch is in use (a first tensor reached a Python path, or lockstep.distributed or
    lockstep.torch_ops was imported): its dtypes' codes, and the C methods take plain
    tensors themselves from now on. Once is enough; again does no harm."""
    if _TORCH_DTYPES:
        return
    dtypes = (torch.float32, torch.float16, torch.bfloat16, torch.int32)  # lockstep's codes 0-3
    _TORCH_DTYPES.update((dtype, code) for code, dtype in enumerate(dtypes))
    _lockstep._set_torch(torch.Tensor, dtypes)


def _torch_code(t: Any, what: str = "allreduce") -> int:
    code = _TORCH_DTYPES.get(t.dtype)  # filled: t went through _is_tensor
    if code is None:
        raise TypeError(f"{what} supports float32, float16, bfloat16 and int32 tensors, not {t.dtype}")
    _check_tensor(t)
    return code


# the kinds of _lockstep.recv_shape, the one rule for the shape of a recv a call makes
_RECV_GATHER, _RECV_SAME, _RECV_SCATTER = 0, 1, 2


def _new_like(send: Any, kind: int, size: int, what: str) -> Any:
    """A new array for what a call receives, of _lockstep.recv_shape's shape: from send's
    shape and dtype for a torch tensor or numpy array (or numpy scalar, shape ()); for
    any other buffer, uint8 of its byte length."""
    if isinstance(send, (_np.ndarray, _np.generic)):
        return _np.empty(_lockstep.recv_shape(send.shape, kind, size), send.dtype)
    if _is_tensor(send):
        import torch
        return torch.empty(_lockstep.recv_shape(tuple(send.shape), kind, size), dtype=send.dtype)
    try:
        nbytes = memoryview(send).nbytes
    except TypeError:
        raise TypeError(f"{what} needs a buffer (a numpy array, a torch CPU tensor, bytes...), "
                        f"not {type(send).__name__}") from None
    return _np.empty(_lockstep.recv_shape((nbytes,), kind, size), _np.uint8)


def _address(a: Any) -> Any:
    return a.data_ptr() if _is_tensor(a) else a.ctypes.data


_TENSOR_TYPES: set[type] = set()  # torch.Tensor and the subclasses seen so far: one set lookup per call


def _is_tensor(obj: Any) -> bool:
    t = type(obj)
    if t in _TENSOR_TYPES:
        return True
    torch = _sys.modules.get("torch")  # a tensor's module is loaded; lockstep does not load it
    if torch is None or not isinstance(obj, torch.Tensor):
        return False
    if t.__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
        # a wrapper subclass (DTensor, FakeTensor...): its memory, if any, is not its data
        raise TypeError(f"lockstep needs tensors that hold their data; a {t.__name__} handles its own operations "
                        f"(for a DTensor, pass this rank's shard, .to_local())")
    if not _TENSOR_TYPES:
        _torch_seen(torch)
    _TENSOR_TYPES.add(t)  # plain tensors and subclasses that keep them (nn.Parameter, users')
    return True


def _written(t: Any) -> None:
    """After a call wrote into t in place: if t is a torch tensor in an autograd graph,
    bump its version counter, as torch's own in-place ops do, so that a backward that
    saved it raises ("modified by an inplace operation") instead of computing with the
    new values. Tensors that do not require grad are left alone (a check costs 0.04 us
    a call; the bump 0.1 us)."""
    if _is_tensor(t) and t.requires_grad:
        _bump(t)


def _bump(t: Any) -> None:
    _sys.modules["torch"]._C._increment_version((t,))


def _allreduce_other(c: _lockstep.Comm, buf: Any, code: int) -> Any:
    """The C allreduce's path for objects without the buffer protocol: torch tensors
    (bfloat16 included). None: not a tensor either, and C raises the TypeError."""
    try:
        if not _is_tensor(buf):
            return None
        dtype = _torch_code(buf)  # checked before data_ptr, which raises its own error for sparse tensors
    except (TypeError, ValueError):
        c.refuse()  # the peers' call ends now (PeerArgumentError), not at the deadline
        raise
    c.allreduce_ptr(buf.data_ptr(), buf.numel(), dtype, code)
    if buf.requires_grad:  # _written without its tensor check: this is the per-call path for tensors
        _bump(buf)
    return buf


def _tensor_bytes(t: Any) -> Any:
    """A contiguous torch tensor's memory as a 1-D uint8 tensor (a view). torch calls a
    tensor of one element, or of none, contiguous whatever its stride (x[:, 0] of a
    one-row x), but will not view a stride other than 1 as bytes: such a tensor is
    looked at through a stride of 1, which addresses the same element."""
    import torch
    flat = t.reshape(-1)
    if flat.stride(0) != 1:
        flat = flat.as_strided((flat.numel(),), (1,))
    return flat.view(torch.uint8)


def _tensor_memory(t: Any) -> Tuple[int, int]:
    """(address, byte length) of a torch tensor, checked as lockstep can hand it to C:
    the calls that move bytes take tensors this way (0.13 us against 1.75 for a byte
    view)."""
    _check_tensor(t)
    return t.data_ptr(), t.nbytes


def _send_recv_memory(send: Any, recv: Any) -> Tuple[Any, ...]:
    """What C takes for send and recv: (send address, bytes, recv address, bytes) when
    both are torch tensors, else (send, recv) as buffers, a torch tensor among them as
    a writable numpy byte view of its memory; checked either way."""
    ts, tr = _is_tensor(send), _is_tensor(recv)
    if ts and tr:
        return _tensor_memory(send) + _tensor_memory(recv)
    return _tensor_view(send) if ts else send, _tensor_view(recv) if tr else recv


def _tensor_view(t: Any) -> Any:
    _check_tensor(t)
    return _tensor_bytes(t).numpy()


_TIMEOUT_MAX_MS = 2**32 - 1  # the C layer's deadline is a uint32 count of ms: 49.7 days


def _timeout_ms(timeout: Union[float, _timedelta, None]) -> int:
    """Comm's timeout (seconds as a number or a datetime.timedelta, or None) in ms for
    the C layer: None and infinity are no deadline (0), longer ones than the C layer
    holds are cut to its longest, and anything below 1 ms becomes 1 ms."""
    if timeout is None:
        return 0
    if isinstance(timeout, _timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, _numbers.Real):
        raise TypeError(f"timeout must be seconds (a number or a datetime.timedelta) or None for no deadline, "
                        f"not {type(timeout).__name__}")
    seconds = float(timeout)
    if seconds == _math.inf:
        return 0
    if not seconds > 0:  # negative, zero or NaN
        raise ValueError(f"timeout must be positive seconds, or None for no deadline (got {timeout!r})")
    return max(1, min(_TIMEOUT_MAX_MS, int(seconds * 1000)))
