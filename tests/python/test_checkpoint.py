"""Checkpoints of several files, written by the real writers (safetensors' save_file per
shard with a Hugging Face index beside them; gguf's split writer), loaded whole by
lockstep.load from the index, the directory or any split part, into numpy arrays and
torch tensors equal to what the writers were given; the lockstep.safetensors calls
against the safetensors package's own; and hostile sets, each refused with a named
error before anything is loaded."""
import json
import os
import threading

import numpy as np
import pytest

import lockstep

st_numpy = pytest.importorskip("safetensors.numpy")
gguf = pytest.importorskip("gguf")


pytestmark = pytest.mark.usefixtures("watchdog")  # conftest.py: 120 s, then a traceback


def sharded(tmp_path, n=3, name="model"):
    """n shards of a few tensors each and their index, as transformers lays them out"""
    rng = np.random.default_rng(7)
    tensors, weight_map = {}, {}
    for s in range(n):
        shard = {f"layers.{s}.w": rng.standard_normal((64, 48)).astype(np.float32),
                 f"layers.{s}.b": rng.standard_normal(48).astype(np.float16),
                 f"layers.{s}.i": np.arange(10 + s, dtype=np.int32)}
        file = f"{name}-{s + 1:05d}-of-{n:05d}.safetensors"
        st_numpy.save_file(shard, str(tmp_path / file), metadata={"format": "np", "shard": str(s)})
        tensors.update(shard)
        weight_map.update({k: file for k in shard})
    index = tmp_path / f"{name}.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": sum(a.nbytes for a in tensors.values())},
                                 "weight_map": weight_map}))
    return index, tensors


def assert_same(got, want):
    assert set(got) == set(want)
    for k, a in want.items():
        g = got[k]
        g = g.numpy() if hasattr(g, "numpy") else g
        assert g.dtype == a.dtype and g.shape == a.shape and (g == a).all(), k


@pytest.mark.parametrize("mode", ["auto", "alias", "copy", "buffered", "map"])
def test_index_and_directory_load_every_shard(tmp_path, mode):
    index, want = sharded(tmp_path)
    for path in (index, tmp_path):
        meta, got = lockstep.load(path, mode=mode)
        assert_same(got, want)
        assert meta["total_size"] == sum(a.nbytes for a in want.values())  # the index's, first
        assert meta["format"] == "np"


def test_progress_covers_the_set_and_names_select(tmp_path):
    index, want = sharded(tmp_path)
    seen = []
    _, got = lockstep.load(index, progress=lambda done, total: seen.append((done, total)))
    total = sum(a.nbytes for a in want.values())
    assert seen[-1] == (total, total) and all(b[0] >= a[0] for a, b in zip(seen, seen[1:]))
    _, got = lockstep.load(index, names=["layers.2.w", "layers.0.b"])
    assert list(got) == ["layers.2.w", "layers.0.b"]
    assert (got["layers.2.w"] == want["layers.2.w"]).all()
    with pytest.raises(KeyError, match="nope"):
        lockstep.load(index, names=["nope"])


@pytest.mark.parametrize("mode", ["copy", "map"])
def test_a_set_loads_files_at_once_and_stops_as_one(tmp_path, mode):
    """files load two at a time (a set just written, so warm, and mapped: one by one in
    the calling thread): the callback is entered by one at a time with the set's bytes,
    and a stop or an exception from it ends the whole load with that error"""
    index, want = sharded(tmp_path, n=5)
    total = sum(a.nbytes for a in want.values())
    inside, seen, threads = [0], [], set()

    def watch(done, t):
        inside[0] += 1
        assert inside[0] == 1  # never two calls at once
        seen.append(done)
        threads.add(threading.get_ident())
        inside[0] -= 1

    stats = []
    from lockstep.load import _load
    _, got = _load(index, None, mode, False, 0, watch, "numpy", None, None, stats)
    assert_same(got, want)
    assert seen[-1] == total and seen == sorted(seen)
    assert [s["mode"] for s in stats] == [mode] * 5 and sum(s["bytes"] for s in stats) == total
    assert (threads == {threading.get_ident()}) == (mode == "map")
    with pytest.raises(lockstep.LoadCancelled):
        lockstep.load(index, mode=mode, progress=lambda done, t: done > 0)

    class Stop(Exception):
        pass

    def boom(done, t):
        raise Stop("from the callback")

    with pytest.raises(Stop):
        lockstep.load(index, mode=mode, progress=boom)


def test_torch_tensors_share_the_loaded_memory(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    want = {"bf": torch.randn(5, 7).to(torch.bfloat16), "h": torch.randn(3).half(), "f": torch.randn(2, 2),
            "i": torch.arange(6, dtype=torch.int64), "b": torch.tensor([True, False])}
    path = tmp_path / "t.safetensors"
    st_torch.save_file(want, str(path))
    for mode in ("auto", "alias", "map"):
        _, got = lockstep.load(path, framework="torch", mode=mode)
        for k, t in want.items():
            assert got[k].dtype == t.dtype and torch.equal(got[k], t), k
    _, got = lockstep.load(path, framework="torch")
    a, b = got["f"], got["h"]
    a.fill_(3)  # writable, and each tensor its own bytes of the one region
    assert torch.equal(b, want["h"])


def test_lockstep_safetensors_behaves_as_the_package(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    import safetensors
    from lockstep import safetensors as lst
    want = {"z.w": torch.randn(9, 4), "a.bf": torch.randn(6, 3).to(torch.bfloat16), "m.i": torch.arange(5)}
    path = str(tmp_path / "t.safetensors")
    st_torch.save_file(want, path, metadata={"k": "v"})
    ref, got = st_torch.load_file(path), lst.load_file(path)
    assert list(got) == list(ref)
    for k in ref:
        assert got[k].dtype == ref[k].dtype and torch.equal(got[k], ref[k])
    with safetensors.safe_open(path, framework="pt") as r, lst.safe_open(path, framework="pt") as f:
        assert f.keys() == r.keys() and f.metadata() == r.metadata()
        assert f.offset_keys() == r.offset_keys()
        for k in r.keys():
            assert torch.equal(f.get_tensor(k), r.get_tensor(k))
            rs, fs = r.get_slice(k), f.get_slice(k)
            assert fs.get_shape() == rs.get_shape() and fs.get_dtype() == rs.get_dtype()
            for idx in (slice(1, 3), slice(None), 2, -1, (slice(0, 2), slice(1, 3)), slice(4, 1), 99):
                try:
                    want_part = rs[idx]
                except Exception:  # refused by the package: refused here too
                    with pytest.raises((IndexError, ValueError)):
                        fs[idx]
                    continue
                assert torch.equal(fs[idx], want_part), (k, idx)
        with pytest.raises(KeyError, match="nope"):
            f.get_tensor("nope")
    with lst.safe_open(path, framework="np") as f:
        assert (f.get_tensor("z.w") == want["z.w"].numpy()).all()
    with pytest.raises(ValueError, match="framework"):
        lst.safe_open(path, framework="jax")


def gguf_split(tmp_path, per_part=2):
    rng = np.random.default_rng(9)
    want = {f"t{i}": rng.standard_normal((4, 8 + i)).astype(np.float32) for i in range(5)}
    w = gguf.GGUFWriter(str(tmp_path / "g.gguf"), "llama", split_max_tensors=per_part)
    w.add_uint32("v.u32", 11)
    for k, a in want.items():
        w.add_tensor(k, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    parts = sorted(p for p in os.listdir(tmp_path) if p.endswith(".gguf"))
    assert len(parts) == 3 and parts[0] == "g-00001-of-00003.gguf"
    return [tmp_path / p for p in parts], want


def test_gguf_split_set_from_any_part_or_the_directory(tmp_path):
    parts, want = gguf_split(tmp_path)
    for path in (parts[0], parts[2], tmp_path):
        meta, got = lockstep.load(path)
        assert_same(got, want)
        assert meta["v.u32"] == 11 and meta["split.count"] == 3


def test_hostile_sets_are_refused_by_name(tmp_path):
    index, _ = sharded(tmp_path)
    doc = json.loads(index.read_text())
    bad = tmp_path / "bad.safetensors.index.json"
    for target in ("../outside.safetensors", "/etc/passwd", "sub/x.safetensors", ".."):
        d = dict(doc, weight_map=dict(doc["weight_map"], **{"layers.0.w": target}))
        bad.write_text(json.dumps(d))
        with pytest.raises(lockstep.BadFileError, match="not a file in") as e:
            lockstep.load(bad)
        assert e.value.offset > 0 and bad.read_bytes()[e.value.offset:].startswith(json.dumps(target).encode())
    d = dict(doc, weight_map=dict(doc["weight_map"], **{"layers.0.w": "missing.safetensors"}))
    bad.write_text(json.dumps(d))
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        lockstep.load(bad)
    bad.write_text("{not json")
    with pytest.raises(lockstep.BadFileError, match="not JSON"):
        lockstep.load(bad)
    bad.unlink()
    # a tensor in two shards: the directory's shards without the index
    index.unlink()
    st_numpy.save_file({"layers.1.w": np.zeros(2, np.float32)}, str(tmp_path / "model-extra.safetensors"))
    with pytest.raises(lockstep.BadFileError, match="layers.1.w.*both"):
        lockstep.load(tmp_path)
    # an index that leaves a shard's tensor out
    sub = tmp_path / "sub"
    sub.mkdir()
    index, _ = sharded(sub)
    d = json.loads(index.read_text())
    del d["weight_map"]["layers.1.i"]
    index.write_text(json.dumps(d))
    with pytest.raises(lockstep.BadFileError, match="does not list"):
        lockstep.load(index)


def test_split_sets_with_a_part_missing_or_disagreeing(tmp_path):
    parts, _ = gguf_split(tmp_path)
    os.rename(parts[1], tmp_path / "aside.gguf")
    with pytest.raises(FileNotFoundError, match="g-00002-of-00003.gguf"):
        lockstep.load(parts[0])
    os.rename(tmp_path / "aside.gguf", parts[1])
    os.rename(parts[2], tmp_path / "x.gguf")
    os.rename(parts[1], parts[2])  # part 2's file named as part 3
    os.rename(tmp_path / "x.gguf", parts[1])
    with pytest.raises(lockstep.BadFileError, match="part 3 of 3.*part 2 of 3"):
        lockstep.load(parts[0])


def test_bad_arguments(tmp_path):
    index, _ = sharded(tmp_path)
    with pytest.raises(ValueError, match="framework"):
        lockstep.load(index, framework="jax")
    with pytest.raises(FileNotFoundError):
        lockstep.load(tmp_path / "none")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no .safetensors"):
        lockstep.load(empty)


def test_every_dtype_torch_writes_and_255_byte_names(tmp_path):
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    from lockstep import safetensors as lst
    dts = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
           torch.bfloat16, torch.float32, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2,
           torch.uint16, torch.uint32, torch.uint64]
    g = torch.Generator().manual_seed(5)
    want = {}
    for i, dt in enumerate(dts):
        name = (f"{i:02d}." + "n" * 255)[:255]  # names of 255 bytes, unique by their start
        base = torch.randn(3, 4, generator=g) * 8
        want[name] = base.to(dt) if dt.is_floating_point or dt == torch.bool else base.abs().to(dt)
    want["scalar"] = torch.tensor(2.5)
    want["empty"] = torch.zeros(0, 3, dtype=torch.bfloat16)
    path = tmp_path / "all.safetensors"
    st_torch.save_file(want, str(path))
    ref = st_torch.load_file(str(path))
    for got in (lockstep.load(path, framework="torch")[1], lst.load_file(path)):
        for k, t in ref.items():
            assert len(k.encode()) <= 255 and got[k].dtype == t.dtype and got[k].shape == t.shape, k
            assert torch.equal(got[k].reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)), k  # bits
