"""lockstep's GGUF reader against files written by the reference `gguf` package:
every metadata value type (nested arrays included) and several tensor types, shapes
and sizes read back exactly as gguf's own reader sees them; a damaged file gives the
reader's error with a byte offset."""
import os
import subprocess

import numpy as np
import pytest

from conftest import INFO, info

gguf = pytest.importorskip("gguf")


def write(path, alignment=None):
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)  # sets general.alignment and pads to it
    w.add_uint8("v.u8", 250)
    w.add_int8("v.i8", -7)
    w.add_uint16("v.u16", 65000)
    w.add_int16("v.i16", -30000)
    w.add_uint32("v.u32", 4_000_000_000)
    w.add_int32("v.i32", -2_000_000_000)
    w.add_float32("v.f32", 0.15625)
    w.add_uint64("v.u64", 2**63 + 5)
    w.add_int64("v.i64", -(2**62))
    w.add_float64("v.f64", 2.0 / 3.0)
    w.add_bool("v.bool", True)
    w.add_string("v.str", "grüße, 世界")
    w.add_array("v.arr_int", [1, 2, 3, -4])
    w.add_array("v.arr_str", ["a", "", "ç"])
    w.add_array("v.arr_nested", [[1, 2], [3]])
    w.add_array("v.arr_empty", [])
    rng = np.random.default_rng(0)
    w.add_tensor("t.f32", rng.standard_normal((3, 32)).astype(np.float32))
    w.add_tensor("t.f16", rng.standard_normal((64,)).astype(np.float16))
    w.add_tensor("t.i8", np.arange(10, dtype=np.int8))
    w.add_tensor("t.i16", np.arange(6, dtype=np.int16).reshape(2, 3))
    w.add_tensor("t.i32", np.arange(4, dtype=np.int32))
    w.add_tensor("t.f64", np.arange(5, dtype=np.float64))
    w.add_tensor("t.q8_0", np.zeros((2, 34), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("t.empty", np.zeros((0,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


WRITTEN_NESTED = [[1, 2], [3]]  # gguf's reader flattens nested arrays; we keep them


def reference_value(key, field):
    """gguf's reader's view of a field, as plain Python."""
    return WRITTEN_NESTED if key == "v.arr_nested" else field.contents()


@pytest.mark.parametrize("alignment", [None, 64, 128])
def test_reads_what_gguf_writes(tmp_path, alignment):
    path = tmp_path / "m.gguf"
    write(path, alignment)
    got = info(path)
    ref = gguf.GGUFReader(str(path))
    assert got["version"] == 3
    assert got["alignment"] == (alignment or 32)
    assert got["data_offset"] == ref.data_offset
    # metadata: every key, in order, with the same value
    ref_keys = [k for k in ref.fields if not k.startswith("GGUF.")]
    assert list(got["metadata"]) == ref_keys
    for k in ref_keys:
        want = reference_value(k, ref.fields[k])
        have = got["metadata"][k]["value"]
        if isinstance(want, float):
            assert have == pytest.approx(want, rel=1e-7), k
        else:
            assert have == want, k
        assert got["metadata"][k]["type"] == int(ref.fields[k].types[0]), k
    # tensors: names, types, shapes (dims[0] fastest, as GGUF stores them), places, sizes
    assert [t["name"] for t in got["tensors"]] == [t.name for t in ref.tensors]
    for have, want in zip(got["tensors"], ref.tensors):
        assert have["type"] == want.tensor_type.name, want.name
        assert have["dims"] == [int(d) for d in want.shape], want.name
        assert have["offset"] == want.data_offset, want.name
        assert have["size"] == want.n_bytes, want.name
        assert have["offset"] + have["size"] <= os.path.getsize(path)


def test_damaged_files_are_named_with_an_offset(tmp_path):
    path = tmp_path / "m.gguf"
    write(path)
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 100])  # tensor data cut short
    r = subprocess.run([INFO, str(cut)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "bad model file at byte" in r.stderr and "past the end of the file" in r.stderr
    cut.write_bytes(data[:30])  # cut inside the first key
    r = subprocess.run([INFO, str(cut)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "bad model file at byte 16" in r.stderr and "too short" in r.stderr
