"""Tensor-parallel shard plans: each rank loads only its part of each tensor.

    plan = lockstep.ShardPlan(rank, world, {"*.q_proj.weight": 0,      # rows
                                            "*.o_proj.weight": 1,      # columns
                                            "*.norm.weight": None})    # whole on every rank
    meta, tensors = lockstep.load(path, framework="torch", plan=plan)
    plan = lockstep.ShardPlan.from_comm(comm, split)                   # comm.rank, comm.size

Dimensions count outermost first, as torch's shape does (for GGUF too, whose files list
them innermost first). Along a split dimension of size S, rank r holds indices
[start, start + count) as torch.chunk(t, world, dim)[r] does: c = ceil(S / world),
start = min(r * c, S); ranks past the end hold an empty part. Patterns are globs
(fnmatch, case-sensitive) matched against the whole name; the first that matches
decides, and a tensor none matches is whole. The plan is computed by the C library,
so C programs (lockstep_shard_part) and Python agree on every part.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple, Union

from . import _lockstep

Split = Union[Mapping[str, Optional[int]], Iterable[Tuple[str, Optional[int]]]]


class Part(NamedTuple):
    """The part of one tensor a rank holds: dim is the split dimension (None: whole),
    indices [start, start + length) along it, the part's shape and its bytes"""
    dim: Optional[int]
    start: int
    length: int
    shape: Tuple[int, ...]
    nbytes: int


class ShardPlan:
    """rank's share of every tensor among world ranks, by name pattern -> dimension"""

    def __init__(self, rank: int, world: int, split: Split = ()) -> None:
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise ValueError(f"world must be an int >= 1, not {world!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
            raise ValueError(f"rank must be an int in 0..{world - 1} (world {world}), not {rank!r}")
        items = list(split.items()) if isinstance(split, Mapping) else list(split)
        rules: List[Tuple[str, int]] = []
        for item in items:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise TypeError(f"split must map name patterns to dimensions, not hold {item!r}")
            pattern, dim = item
            if not isinstance(pattern, str) or not pattern:
                raise TypeError(f"a split pattern must be a non-empty str, not {pattern!r}")
            if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 0):
                raise ValueError(f"split dimension for {pattern!r} must be None or an int >= 0, not {dim!r}")
            rules.append((pattern, -1 if dim is None else dim))
        self.rank, self.world = rank, world
        self._rules = rules

    @classmethod
    def from_comm(cls, comm: Any, split: Split = ()) -> "ShardPlan":
        """The plan for this process's rank of a lockstep.Comm (or anything with .rank
        and .size, as torch.distributed's process groups have through rank()/size())"""
        rank = comm.rank() if callable(getattr(comm, "rank", None)) else comm.rank
        size = comm.size() if callable(getattr(comm, "size", None)) else comm.size
        return cls(rank, size, split)

    @property
    def split(self) -> List[Tuple[str, Optional[int]]]:
        return [(p, None if d < 0 else d) for p, d in self._rules]

    def _c(self) -> Tuple[int, int, List[Tuple[str, int]]]:
        return (self.rank, self.world, self._rules)

    def parts(self, path: Union[str, "os.PathLike[str]"]) -> Dict[str, Part]:
        """name -> Part for every tensor of a checkpoint (file, index, split set or
        directory), read from the headers alone; ValueError names a tensor the plan
        cannot split (a dimension it does not have, a cut inside a quantized block)"""
        from . import checkpoint
        path = os.fspath(path)
        files = [path] if os.path.isfile(path) and not checkpoint.is_set_name(path) else \
            [p.path for p in checkpoint.resolve(path).parts]
        out: Dict[str, Part] = {}
        for f in files:
            for name, dim, start, count, shape, nbytes in _lockstep.shard_plan(f, self._c()):
                out[name] = Part(None if dim < 0 else dim, start, count, tuple(shape), nbytes)
        return out

    def __repr__(self) -> str:
        return f"ShardPlan(rank={self.rank}, world={self.world}, split={dict(self.split)!r})"
