"""lockstep.load(..., dtype=): f32, f16 and bf16 tensors written by torch's save_file
arrive converted with exactly the bits torch's .to() gives (infinities, overflow,
subnormals, ties), alone and with a shard plan, in every mode that copies; other
types untouched; alias and map modes, quantized GGUF blocks and unknown dtypes refused by name."""

import numpy as np
import pytest

import lockstep

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")
gguf = pytest.importorskip("gguf")


pytestmark = pytest.mark.usefixtures("watchdog", "torch_serial")  # conftest.py


def written(tmp_path):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(129, 67, generator=g) * 900
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 1e-40, -1e-42, 65504, 65519, 65520, 7e4,
                            6e-8, 3e-8, 1.0000001, 2.5e-5, -3.3895e38])
    want = {"f32": torch.cat([special, x.reshape(-1)])[:1000].reshape(-1, 8).contiguous(),
            "bf16": x.to(torch.bfloat16), "f16": (x / 64).to(torch.float16),
            "i64": torch.arange(-3, 9), "u8": torch.arange(7, dtype=torch.uint8)}
    path = tmp_path / "c.safetensors"
    st_torch.save_file(want, str(path))
    return path, want


def bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


@pytest.mark.parametrize("mode", ["auto", "copy", "buffered"])
@pytest.mark.parametrize("dtype", [torch.float32, "bfloat16", np.float16])
def test_conversions_match_torch_bit_for_bit(tmp_path, mode, dtype):
    path, want = written(tmp_path)
    tdt = {"bfloat16": torch.bfloat16, np.float16: torch.float16}.get(dtype, dtype)
    _, got = lockstep.load(path, framework="torch", dtype=dtype, mode=mode)
    for k, t in want.items():
        ref = t.to(tdt) if t.is_floating_point() else t
        assert got[k].dtype == ref.dtype and got[k].shape == ref.shape, k
        assert torch.equal(bits(got[k]), bits(ref)), k
    plan = lockstep.ShardPlan(1, 2, {"f32": 1, "bf16": 1, "f16": 0})
    _, part = lockstep.load(path, framework="torch", dtype=dtype, mode=mode, plan=plan)
    for k in ("f32", "bf16", "f16"):
        d = 0 if k == "f16" else 1
        assert torch.equal(bits(part[k]), bits(torch.chunk(want[k], 2, d)[1].to(tdt))), k


def test_refused_by_name(tmp_path):
    path, _ = written(tmp_path)
    with pytest.raises(ValueError, match="dtype must be"):
        lockstep.load(path, dtype="float64")
    with pytest.raises(ValueError, match="dtype must be"):
        lockstep.load(path, dtype=torch.int8)
    for mode in ("alias", "map"):
        with pytest.raises(ValueError, match=mode):
            lockstep.load(path, dtype="float32", mode=mode)
    q8 = gguf.GGMLQuantizationType.Q8_0
    w = gguf.GGUFWriter(str(tmp_path / "q.gguf"), "llama")
    w.add_tensor("blk.0.q", gguf.quants.quantize(np.ones((2, 32), np.float32), q8), raw_dtype=q8)
    w.add_tensor("blk.0.h", np.full((2, 4), 1.5, np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match="blk.0.q.*Q8_0"):
        lockstep.load(tmp_path / "q.gguf", dtype="float32")
    _, got = lockstep.load(tmp_path / "q.gguf", dtype="float32", names=["blk.0.h"])
    assert got["blk.0.h"].dtype == np.float32 and (got["blk.0.h"] == 1.5).all()
