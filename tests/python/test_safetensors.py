"""lockstep's safetensors reader against files written by the reference `safetensors`
package: every numpy dtype (and bfloat16 through torch), 0-d and empty shapes, and
__metadata__ read back with the same names, dtypes, shapes, offsets and sizes."""
import json
import struct
import subprocess

import numpy as np
import pytest

from conftest import INFO, every_numpy_dtype, info

st_numpy = pytest.importorskip("safetensors.numpy")


def header(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), 8 + n


def test_reads_what_safetensors_writes(tmp_path):
    rng = np.random.default_rng(0)
    tensors = every_numpy_dtype(rng)
    tensors["naïve/ünïcode.weight"] = np.ones(2, dtype=np.float32)
    path = tmp_path / "m.safetensors"
    st_numpy.save_file(tensors, str(path), metadata={"format": "np", "note": "ok ✓"})
    got = info(path)
    ref, data_start = header(path)
    assert got["format"] == "safetensors"
    assert got["data_offset"] == data_start
    meta = ref.pop("__metadata__")
    assert {k: v["value"] for k, v in got["metadata"].items()} == meta
    by_name = {t["name"]: t for t in got["tensors"]}
    assert set(by_name) == set(ref)
    for name, want in ref.items():
        have = by_name[name]
        assert have["type"] == want["dtype"], name
        assert have["dims"] == want["shape"], name
        b, e = want["data_offsets"]
        assert (have["offset"], have["size"]) == (data_start + b, e - b), name
        raw = open(path, "rb").read()[have["offset"]:have["offset"] + have["size"]]
        assert raw == np.ascontiguousarray(tensors[name]).tobytes(), name


def test_bfloat16_from_torch(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    path = tmp_path / "bf.safetensors"
    st_torch.save_file({"w": torch.ones(3, 4, dtype=torch.bfloat16)}, str(path))
    (t,) = info(path)["tensors"]
    assert (t["type"], t["dims"], t["size"]) == ("BF16", [3, 4], 24)


def test_damaged_file_names_the_problem(tmp_path):
    path = tmp_path / "m.safetensors"
    st_numpy.save_file({"a": np.ones(8, np.float32)}, str(path))
    raw = open(path, "rb").read()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(raw[:-4])
    r = subprocess.run([INFO, str(cut)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "bad model file at byte" in r.stderr and "cover" in r.stderr
