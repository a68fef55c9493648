"""lockstep.load against files written by the reference `safetensors` and `gguf`
packages: every dtype and shape reads back equal to the reference readers' arrays in
every mode; alias arrays are read-only views, the others writable (map's copy-on-write); selection by name;
progress and cancel; the value check names tensor and offset (a float NaN and a Q8_0
block scale); bad files and bad arguments raise their specific exceptions."""
import struct

import numpy as np
import pytest

import lockstep
from conftest import every_numpy_dtype

st_numpy = pytest.importorskip("safetensors.numpy")
gguf = pytest.importorskip("gguf")

MODES = ["auto", "alias", "copy", "buffered", "map"]


pytestmark = pytest.mark.usefixtures("watchdog")  # conftest.py: 120 s, then a traceback


def st_file(tmp_path):
    rng = np.random.default_rng(3)
    tensors = every_numpy_dtype(rng)
    tensors["big"] = rng.standard_normal((300, 1000)).astype(np.float32)  # crosses chunks
    path = tmp_path / "m.safetensors"
    st_numpy.save_file(tensors, str(path), metadata={"format": "np", "note": "ok ✓"})
    return path, tensors


def gguf_file(tmp_path, q8_scale=None):
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("v.u32", 7)
    w.add_float32("v.f32", 0.5)
    w.add_bool("v.bool", True)
    w.add_string("v.str", "grüße")
    w.add_array("v.arr", [1, 2, 3])
    w.add_array("v.strs", ["a", "b"])
    rng = np.random.default_rng(4)
    w.add_tensor("t.f32", rng.standard_normal((3, 32)).astype(np.float32))
    w.add_tensor("t.f16", rng.standard_normal((64,)).astype(np.float16))
    w.add_tensor("t.i32", np.arange(4, dtype=np.int32))
    q = gguf.quants.quantize(rng.standard_normal((4, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    if q8_scale is not None:  # the first block's f16 scale
        q = q.copy()
        q[1, 34:36] = np.frombuffer(struct.pack("<H", q8_scale), dtype=np.uint8)
    w.add_tensor("t.q8_0", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("t.big", rng.standard_normal((512, 1024)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("mode", MODES)
def test_safetensors_round_trip(tmp_path, mode):
    path, ref = st_file(tmp_path)
    meta, got = lockstep.load(path, mode=mode, check=True)
    assert meta == {"format": "np", "note": "ok ✓"}
    assert set(got) == set(ref)
    for name, want in ref.items():
        have = got[name]
        assert have.dtype == want.dtype and have.shape == want.shape, name
        assert np.array_equal(have, want), name
        assert have.flags.writeable == (mode != "alias"), name
    if mode != "alias":  # a private copy: writing it changes nothing on disk
        got["big"][0, 0] = 42.0
        assert st_numpy.load_file(str(path))["big"][0, 0] == ref["big"][0, 0]


@pytest.mark.parametrize("mode", MODES)
def test_gguf_round_trip(tmp_path, mode):
    path = gguf_file(tmp_path)
    meta, got = lockstep.load(path, mode=mode, check=True, readers=3)
    assert meta["v.u32"] == 7 and meta["v.f32"] == 0.5 and meta["v.bool"] is True
    assert meta["v.str"] == "grüße" and meta["v.arr"] == [1, 2, 3] and meta["v.strs"] == ["a", "b"]
    reader = gguf.GGUFReader(str(path))
    assert set(got) == {t.name for t in reader.tensors}
    for t in reader.tensors:
        want = np.asarray(t.data)
        have = got[t.name]
        if t.tensor_type == gguf.GGMLQuantizationType.Q8_0:
            assert have.dtype == np.uint8 and have.size == t.n_bytes  # raw blocks
            assert np.array_equal(have, want.reshape(-1).view(np.uint8))
        else:
            assert have.shape == want.shape and have.dtype == want.dtype, t.name
            assert np.array_equal(have, want), t.name


def test_bfloat16_through_torch(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    x = torch.randn(5, 7, dtype=torch.bfloat16)
    path = tmp_path / "bf.safetensors"
    st_torch.save_file({"x": x}, str(path))
    _, got = lockstep.load(path)
    assert got["x"].dtype == np.uint16  # numpy has no bfloat16: the bit patterns
    assert torch.equal(torch.from_numpy(got["x"]).view(torch.bfloat16), x)


def test_selection_and_progress(tmp_path):
    path, ref = st_file(tmp_path)
    seen = []
    _, got = lockstep.load(path, names=["big", "i8"], progress=lambda d, t: seen.append((d, t)))
    assert set(got) == {"big", "i8"}
    assert np.array_equal(got["big"], ref["big"])
    total = ref["big"].nbytes + ref["i8"].nbytes
    assert seen and seen[-1] == (total, total)
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    with pytest.raises(KeyError, match="nope"):
        lockstep.load(path, names=["big", "nope"])


def test_cancel_and_callback_errors(tmp_path):
    path = gguf_file(tmp_path)
    with pytest.raises(lockstep.LoadCancelled):
        lockstep.load(path, mode="copy", progress=lambda d, t: True)

    class Stop(Exception):
        pass

    def boom(done, total):
        raise Stop("from the callback")

    with pytest.raises(Stop):
        lockstep.load(path, progress=boom)


@pytest.mark.parametrize("mode", MODES)
def test_check_finds_nan_and_bad_block_scale(tmp_path, mode):
    path, ref = st_file(tmp_path)
    bad = dict(ref)
    bad["big"] = ref["big"].copy()
    bad["big"][7, 9] = np.nan
    st_numpy.save_file(bad, str(path))
    with pytest.raises(lockstep.BadFileError, match='"big"') as e:
        lockstep.load(path, mode=mode, check=True)
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    import json
    begin = json.loads(raw[8:8 + n])["big"]["data_offsets"][0]
    assert e.value.offset == 8 + n + begin + (7 * 1000 + 9) * 4
    _, got = lockstep.load(path, mode=mode)  # unchecked, the NaN loads as it is
    assert np.isnan(got["big"][7, 9])

    gpath = gguf_file(tmp_path, q8_scale=0x7E00)  # NaN as the second block's scale
    with pytest.raises(lockstep.BadFileError, match="t.q8_0.*block scale"):
        lockstep.load(gpath, mode=mode, check=True)


def test_bad_files_and_arguments(tmp_path):
    path, _ = st_file(tmp_path)
    raw = open(path, "rb").read()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(raw[:50])
    with pytest.raises(lockstep.BadFileError) as e:
        lockstep.load(cut)
    assert isinstance(e.value, ValueError) and 0 <= e.value.offset <= 50
    with pytest.raises(FileNotFoundError):
        lockstep.load(tmp_path / "missing.gguf")
    with pytest.raises(ValueError, match="mode"):
        lockstep.load(path, mode="fast")
    with pytest.raises(TypeError, match="list"):
        lockstep.load(path, names="big")
    with pytest.raises(ValueError, match="readers"):
        lockstep.load(path, readers=100)
    with pytest.raises(TypeError, match="callable"):
        lockstep.load(path, progress=3)


def test_load_command(tmp_path):
    """`lockstep load FILE` (tools/lockstep -> lockstep-load): the closing line's fields,
    the check, and a bad file's exit code and message with its offset."""
    import json
    import os
    import subprocess
    import sys

    from conftest import INFO, ROOT

    if not os.path.exists(INFO.replace("lockstep-info", "lockstep-load")):
        pytest.skip("lockstep-load is not built (scripts/test.sh builds it first)")
    tool = [sys.executable, os.path.join(ROOT, "tools", "lockstep"), "load"]
    env = dict(os.environ, LOCKSTEP_BUILD_DIR=os.path.dirname(INFO))
    path, ref = st_file(tmp_path)
    total = sum(v.nbytes for v in ref.values())
    for mode in MODES:
        r = subprocess.run(tool + [str(path), "--mode", mode, "--check", "--json"], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["bytes"] == total and out["tensors"] == len(ref) and out["checked"] is True
        assert out["mode"] in ("copy", "map") if mode == "auto" else out["mode"] == mode
        assert out["seconds"] > 0 and out["gb_per_s"] > 0
    r = subprocess.run(tool + [str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(f"loaded {len(ref)} tensors, {total} bytes in ")
    assert "GB/s" in r.stdout and "CPU-s/GB" in r.stdout
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(path.read_bytes()[:40])
    r = subprocess.run(tool + [str(cut)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "at byte" in r.stderr
    r = subprocess.run(tool + [str(path), "--to", "cuda"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 1)
    if r.returncode == 1:  # no GPU here: a clear message, not a crash
        assert "CUDA" in r.stderr


def test_load_and_info_commands_take_a_set(tmp_path, capsys):
    """The installed command (lockstep.cli, what tools/lockstep runs too): load and info
    on a directory of shards, a conversion, and a missing path's exit code"""
    import json

    from lockstep.cli import main
    st_numpy = pytest.importorskip("safetensors.numpy")
    want = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.float16)}
    st_numpy.save_file({"a": want["a"]}, str(tmp_path / "m-00001-of-00002.safetensors"))
    st_numpy.save_file({"b": want["b"]}, str(tmp_path / "m-00002-of-00002.safetensors"))
    assert main(["load", str(tmp_path), "--json", "--check"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["files"] == 2 and out["tensors"] == 2 and out["bytes"] == 48 + 10 and out["checked"] is True
    assert main(["load", str(tmp_path), "--dtype", "float32"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("loaded 2 tensors, 68 bytes from 2 files in ") and "converted to float32" in line
    assert main(["info", str(tmp_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "shards" and [len(f["tensors"]) for f in info["files"]] == [1, 1]
    assert info["files"][0]["tensors"][0] == {"name": "a", "type": "F32", "dims": [3, 4],
                                               "offset": info["files"][0]["tensors"][0]["offset"], "bytes": 48}
    assert main(["info", str(tmp_path)]) == 0
    assert "shards, 2 files, 2 tensors, 58 bytes" in capsys.readouterr().out
    assert main(["load", str(tmp_path / "missing")]) == 1
    assert "no such checkpoint" in capsys.readouterr().err


# A bad scale in the second block of each block type whose scale is not a plain
# f16 at a fixed place: (type, block bytes, offset in the block -> bytes written there).
ODD_SCALES = [
    ("Q1_0", 18, {0: struct.pack("<H", 0x7E00)}),                   # f16 NaN
    ("IQ1_M", 56, {52: struct.pack("<H", 0xC000), 54: struct.pack("<H", 0x7000)}),  # f16 Inf from top nibbles
    ("MXFP4", 17, {0: b"\xff"}),                                      # E8M0 NaN
    ("NVFP4", 36, {2: b"\x7f"}),                                      # third sub-block's UE4M3 NaN
]


@pytest.mark.parametrize("type_name,block,patch", ODD_SCALES, ids=[t[0] for t in ODD_SCALES])
def test_check_block_scales_of_packed_types(tmp_path, type_name, block, patch):
    if type_name not in gguf.GGMLQuantizationType.__members__:  # the gguf package writes the files
        pytest.skip(f"this gguf package has no {type_name} (newer ones, for Python 3.10+, have it)")
    qt = gguf.GGMLQuantizationType[type_name]
    blocks = np.full((2, block), 0x11, dtype=np.uint8)  # finite scales, arbitrary codes
    for at in patch:  # first block: the same field, finite
        blocks[0, at:at + len(patch[at])] = 0
    blocks[1] = blocks[0]
    clean = tmp_path / "clean.gguf"
    bad = tmp_path / "bad.gguf"
    for path, data in [(clean, blocks), (bad, blocks.copy())]:
        if path == bad:
            for at, b in patch.items():
                data[1, at:at + len(b)] = np.frombuffer(b, dtype=np.uint8)
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_tensor("t.odd", data, raw_dtype=qt)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    _, got = lockstep.load(clean, check=True)
    assert got["t.odd"].tobytes() == blocks.tobytes()
    with pytest.raises(lockstep.BadFileError, match="t.odd.*block scale") as e:
        lockstep.load(bad, mode="copy", check=True)
    raw = open(bad, "rb").read()
    start = raw.find(blocks.tobytes()[:block])  # the tensor's first block
    assert start > 0 and e.value.offset == start + block


def test_numa_placement_arguments(tmp_path):
    """numa: a node that exists binds the loaded memory there (the C test checks the
    pages); one that does not, or an unknown word, is a ValueError naming it"""
    path, ref = st_file(tmp_path)
    _, got = lockstep.load(path, numa=0, mode="copy")
    assert all((got[k] == v).all() for k, v in ref.items())
    _, got = lockstep.load(path, numa="off")
    assert all((got[k] == v).all() for k, v in ref.items())
    with pytest.raises(ValueError, match="NUMA node 4096"):
        lockstep.load(path, numa=4096)
    for bad in ("near", -1, True, 1.0):
        with pytest.raises(ValueError, match="numa must be"):
            lockstep.load(path, numa=bad)
