"""Shard plans from Python: every rank's part of every tensor of checkpoints the real
writers made (safetensors shards with an index, a GGUF split set with quantized
blocks), at world sizes 1-4, checked element by element against torch.chunk of the
whole tensor; ShardPlan.parts agrees with what load returns; bad plans raise errors
that name what to fix."""
import json

import numpy as np
import pytest

import lockstep

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")
gguf = pytest.importorskip("gguf")


pytestmark = pytest.mark.usefixtures("watchdog", "torch_serial")  # conftest.py


SPLIT = {"*.rows": 0, "*.cols": 1, "*.inner": 2, "*.whole": None}


def torch_set(tmp_path):
    """two shards and an index; each split kind in several dtypes and odd sizes"""
    g = torch.Generator().manual_seed(3)
    want = {}
    for i, dt in enumerate([torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.bool]):
        base = torch.randn(7 + i, 5 + 2 * i, 3, generator=g) * 9
        t = base.to(dt) if dt.is_floating_point or dt == torch.bool else base.to(torch.int64).to(dt)
        want[f"a{i}.rows"] = t[:, :, 0].contiguous()
        want[f"a{i}.cols"] = t[:, :, 1].contiguous()
        want[f"a{i}.inner"] = t.clone()
        want[f"a{i}.whole"] = t[0].clone()
    want["v.rows"] = torch.arange(10, dtype=torch.int64)
    names = sorted(want)
    half = len(names) // 2
    weight_map = {}
    for s, chunk in enumerate([names[:half], names[half:]]):
        file = f"model-{s + 1:05d}-of-00002.safetensors"
        st_torch.save_file({k: want[k] for k in chunk}, str(tmp_path / file))
        weight_map.update({k: file for k in chunk})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return index, want


def expected(t, world, rank, dim):
    if dim is None:
        return t
    chunks = torch.chunk(t, world, dim)
    if rank < len(chunks):
        return chunks[rank]
    shape = list(t.shape)
    shape[dim] = 0
    return t.new_empty(shape)


def dim_of(name):
    return SPLIT["*." + name.split(".")[-1]]


def same_bits(got, want, name):
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.shape, want.shape)
    assert torch.equal(got.contiguous().reshape(-1).view(torch.uint8),
                       want.contiguous().reshape(-1).view(torch.uint8)), name


@pytest.mark.parametrize("mode", ["copy", "buffered"])
def test_every_rank_holds_torch_chunk_of_every_tensor(tmp_path, mode):
    index, want = torch_set(tmp_path)
    for world in (1, 2, 3, 4):
        for rank in range(world):
            plan = lockstep.ShardPlan(rank, world, SPLIT)
            _, got = lockstep.load(index, framework="torch", plan=plan, mode=mode)
            assert set(got) == set(want)
            parts = plan.parts(index)
            for name, t in want.items():
                e = expected(t, world, rank, dim_of(name))
                same_bits(got[name], e, name)
                p = parts[name]
                assert p.dim == dim_of(name) and p.shape == tuple(e.shape)
                assert p.nbytes == e.numel() * e.element_size()
                if p.dim is not None:
                    assert p.start == min(rank * -(-t.shape[p.dim] // world), t.shape[p.dim])


def test_alias_takes_rows_and_refuses_columns(tmp_path):
    index, want = torch_set(tmp_path)
    rows = {k: v for k, v in SPLIT.items() if v != 1 and v != 2}
    plan = lockstep.ShardPlan(1, 3, rows)
    _, got = lockstep.load(index, mode="alias", plan=plan, framework="torch")
    for name, t in want.items():
        same_bits(got[name], expected(t, 3, 1, rows.get("*." + name.split(".")[-1])), name)
    for mode in ("alias", "map"):
        with pytest.raises(ValueError, match=mode):
            lockstep.load(index, mode=mode, plan=lockstep.ShardPlan(0, 2, SPLIT))


def gguf_quantized(tmp_path):
    """a split set (the gguf package's writer) with Q8_0 blocks of 32 and F32"""
    rng = np.random.default_rng(4)
    q8 = gguf.GGMLQuantizationType.Q8_0
    full = {"blk.q.rows": rng.standard_normal((6, 64)).astype(np.float32),
            "blk.q.cols": rng.standard_normal((5, 64)).astype(np.float32),
            "blk.f.cols": rng.standard_normal((3, 10)).astype(np.float32)}
    w = gguf.GGUFWriter(str(tmp_path / "q.gguf"), "llama", split_max_tensors=2)
    for k, a in full.items():
        if k.startswith("blk.q"):
            w.add_tensor(k, gguf.quants.quantize(a, q8), raw_dtype=q8)
        else:
            w.add_tensor(k, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tmp_path / "q-00001-of-00002.gguf"


def test_gguf_quantized_rows_and_block_columns(tmp_path):
    first = gguf_quantized(tmp_path)
    _, whole = lockstep.load(first)
    split = {"*.rows": 0, "*.cols": 1}
    for world in (1, 2, 4):  # 64 columns: 64 / world is a multiple of 32 only for 1 and 2
        for rank in range(world):
            plan = lockstep.ShardPlan(rank, world, split)
            if world == 4:
                with pytest.raises(ValueError, match="block"):
                    lockstep.load(first, plan=plan)
                continue
            _, got = lockstep.load(first, plan=plan)
            # quantized tensors come back as their raw bytes, 34 per block of 32
            rows = whole["blk.q.rows"].reshape(6, 68)
            r = -(-6 // world)
            assert (got["blk.q.rows"].reshape(-1, 68) == rows[rank * r:(rank + 1) * r]).all()
            cols = whole["blk.q.cols"].reshape(5, 2, 34)[:, rank * 2 // world:(rank + 1) * 2 // world]
            assert (got["blk.q.cols"] == cols.reshape(-1)).all()
            f = torch.chunk(torch.from_numpy(whole["blk.f.cols"]), world, 1)[rank]
            assert (torch.from_numpy(got["blk.f.cols"]) == f).all()


def test_from_comm_and_bad_plans(tmp_path):
    index, want = torch_set(tmp_path)

    class FakeComm:
        rank, size = 1, 2
    plan = lockstep.ShardPlan.from_comm(FakeComm(), SPLIT)
    assert (plan.rank, plan.world) == (1, 2) and plan.split == list(SPLIT.items())
    for rank, world in ((0, 0), (2, 2), (-1, 2), (True, 2)):
        with pytest.raises(ValueError, match="rank|world"):
            lockstep.ShardPlan(rank, world)
    with pytest.raises(ValueError, match="dimension"):
        lockstep.ShardPlan(0, 2, {"x": -1})
    with pytest.raises(TypeError, match="pattern"):
        lockstep.ShardPlan(0, 2, [(3, 0)])
    with pytest.raises(ValueError, match="a0.rows"):  # a 2-D tensor has no dimension 2
        lockstep.load(index, plan=lockstep.ShardPlan(0, 2, {"a0.rows": 2}))
    with pytest.raises(ValueError, match="a0.rows"):
        lockstep.ShardPlan(0, 2, {"a0.rows": 2}).parts(index)
    with pytest.raises(TypeError, match="ShardPlan"):
        lockstep.load(index, plan=(0, 2))
    with pytest.raises(FileNotFoundError):
        lockstep.ShardPlan(0, 2).parts(tmp_path / "missing.safetensors")
