"""The package's types: it ships py.typed, its public functions and Comm's methods
(and the launcher's and torch back end's entries) are annotated and their hints
resolve, the Literal names are the extension's tables, the extension's stub names what
the extension has, the package itself passes mypy --strict, and mypy (run on snippets
against the installed package) accepts correct calls and flags wrong names for op,
order, xfer and mode."""
import ast
import importlib.util
import inspect
import json
import os
import struct
import subprocess
import sys
import textwrap
import typing

import pytest

import lockstep


def _public_callables():
    import lockstep.cli
    import lockstep.launch
    import lockstep.omp
    yield "launch.main", lockstep.launch.main
    yield "cli.main", lockstep.cli.main
    for name in ("runtime_path", "elf_symbols", "unsupported_names", "check", "run_env", "run"):
        yield f"omp.{name}", getattr(lockstep.omp, name)
    if importlib.util.find_spec("torch") is not None:
        import lockstep.distributed
        yield "distributed.comm", lockstep.distributed.comm
        yield "distributed.Options.__init__", lockstep.distributed.Options.__init__
    for name in lockstep.__all__:
        obj = getattr(lockstep, name)
        if inspect.isfunction(obj):
            yield name, obj
    for name, member in vars(lockstep.Comm).items():
        if name.startswith("_") and name not in ("__init__", "__enter__", "__exit__"):
            continue
        if isinstance(member, property):
            yield f"Comm.{name}", member.fget
        elif isinstance(member, classmethod):
            yield f"Comm.{name}", member.__func__
        elif inspect.isfunction(member):
            yield f"Comm.{name}", member


def test_the_package_ships_py_typed_and_the_extension_stub():
    here = os.path.dirname(lockstep.__file__)
    assert os.path.isfile(os.path.join(here, "py.typed"))
    assert os.path.isfile(os.path.join(here, "_lockstep.pyi"))


def test_every_public_function_and_method_is_annotated():
    seen = dict(_public_callables())
    assert {"launch.main", "reduce_isa", "load", "Comm.__init__", "Comm.allreduce", "Comm.broadcast", "Comm.allgather",
            "Comm.alltoall", "Comm.reduce_scatter", "Comm.barrier", "Comm.from_env", "Comm.buffer",
            "Comm.kernel_copy", "Comm.closed"} <= set(seen)
    missing = []
    for name, fn in seen.items():
        ann = fn.__annotations__
        params = [p for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls")]
        missing += [f"{name}({p.name})" for p in params if p.name not in ann]
        if "return" not in ann:
            missing.append(f"{name} -> ?")
    assert not missing, f"not annotated: {missing}"


def test_the_literal_names_are_the_extensions_tables():
    # the Literal names are written out for type checkers; the codes come from the
    # extension's tables (each checked against its C enum when the extension compiles)
    from lockstep import _lockstep
    load_module = sys.modules["lockstep.load"]
    assert typing.get_args(lockstep.Op) == _lockstep.OPS == ("sum", "max", "min")
    assert typing.get_args(lockstep.Order) == _lockstep.ORDERS
    assert typing.get_args(lockstep.Xfer) == _lockstep.XFERS
    assert typing.get_args(lockstep.WaitPolicy) == _lockstep.WAIT_POLICIES
    assert typing.get_args(load_module.Mode) == _lockstep.LOAD_MODES
    assert _lockstep.WAIT_POLICIES.index("passive") == 3 and _lockstep.LOAD_MODES.index("buffered") == 3


def test_the_annotations_resolve_at_run_time():
    # typing.get_type_hints evaluates every annotation (they are strings under the
    # future import): a name that exists only for type checkers raises NameError
    for name, fn in _public_callables():
        hints = typing.get_type_hints(fn)
        assert "return" in hints, name
    assert typing.get_type_hints(lockstep.Comm.allreduce)["op"] == lockstep.Op
    assert typing.get_type_hints(lockstep.Comm.__init__)["wait_policy"] == lockstep.WaitPolicy


def _stub_names(body):
    """the names a stub's module or class body defines"""
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _public(obj):
    return {n for n in dir(obj) if not (n.startswith("__") and n.endswith("__"))}


def test_the_extension_stub_lists_what_the_extension_has(tmp_path):
    # the package's own calls are type-checked against the stub (below): it must name
    # exactly the extension's functions, constants, types and their members
    from lockstep import _lockstep
    here = os.path.dirname(lockstep.__file__)
    with open(os.path.join(here, "_lockstep.pyi")) as f:
        tree = ast.parse(f.read())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    helpers = {"_B", "_Loaded"}  # a TypeVar; load's result type, not a module attribute
    assert _stub_names(tree.body) - helpers == _public(_lockstep)
    assert _stub_names(classes["Comm"].body) - {"__init__", "__buffer__"} == _public(_lockstep.Comm)
    header = json.dumps({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    path = tmp_path / "one.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + struct.pack("<f", 1.5))
    loaded = _lockstep.load(str(path), None, 0, False, 0, None)
    assert _stub_names(classes["_Loaded"].body) - {"__buffer__"} == _public(loaded)
    assert memoryview(loaded).nbytes >= 4  # both types the stub gives __buffer__ have the buffer protocol
    c = _lockstep.Comm(f"stubcheck-{os.getpid()}", 0, 1, 5000, 0, 0, 0, 0, 64)
    try:
        assert memoryview(c).nbytes >= 64
    finally:
        c.close()


def test_the_package_itself_passes_mypy_strict(tmp_path):
    # the package's modules as they are installed, against the extension's stub
    mods = ["lockstep", "lockstep.load", "lockstep.checkpoint", "lockstep.shard", "lockstep.launch", "lockstep.omp",
            "lockstep.cli", "lockstep.cli_load"]
    args = []
    if importlib.util.find_spec("torch") is not None:
        mods += ["lockstep.torch_ops", "lockstep.distributed", "lockstep.safetensors"]
    else:  # torch is optional: the package imports it only for a tensor it is given
        (tmp_path / "mypy.ini").write_text("[mypy]\n[mypy-torch.*]\nignore_missing_imports = True\n")
        args = ["--config-file", str(tmp_path / "mypy.ini")]
    rc, out = _mypy(tmp_path, None, args + [a for m in mods for a in ("-m", m)])
    assert rc == 0, out


def _mypy(tmp_path, code, targets=None):
    pytest.importorskip("mypy", reason="mypy is not installed (scripts/python-env.sh installs it)")
    if targets is None:
        src = tmp_path / "use.py"
        src.write_text(textwrap.dedent(code))
        targets = [str(src)]
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir",
                        str(tmp_path / "cache"), "--python-version", f"{sys.version_info[0]}.{sys.version_info[1]}",
                        *targets], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


GOOD = """
    from datetime import timedelta
    import numpy as np
    import numpy.typing as npt
    import lockstep

    def body(comm: lockstep.Comm) -> float:
        x: npt.NDArray[np.float32] = np.ones(16, np.float32)
        y = comm.allreduce(x, op="max")     # the same array back
        z: npt.NDArray[np.float32] = comm.broadcast(y, root=0, order="topology", xfer="push")
        g = comm.allgather(x)
        comm.barrier()
        peers: list[int] = comm.peers("rotated")
        isa: str = lockstep.reduce_isa()
        return float(z[0]) + float(len(peers)) + float(len(isa)) + float(g.size)

    def main() -> None:
        try:
            with lockstep.Comm("job", 0, 1, timeout=timedelta(seconds=5), wait_policy="auto") as c:
                body(c)
            env = lockstep.Comm.from_env(timeout=None)
            rank: int = env.rank
            print(rank)
        except lockstep.PeerDiedError as e:
            err: lockstep.CommError = e
            print(err)
        except lockstep.CommTimeoutError as e:
            t: TimeoutError = e
            print(t)
        meta, tensors = lockstep.load("m.gguf", names=["a"], mode="alias", progress=lambda d, t: None)
        try:
            lockstep.load("m.safetensors")
        except lockstep.BadFileError as e:
            where: int = e.offset
            print(where)
        print(meta, tensors["a"].shape)
"""


def test_mypy_accepts_correct_use(tmp_path):
    rc, out = _mypy(tmp_path, GOOD)
    assert rc == 0, out


def test_mypy_flags_wrong_names_and_types(tmp_path):
    rc, out = _mypy(tmp_path, """
        import numpy as np
        import lockstep

        c = lockstep.Comm("job", 0, 1, timeout="60")
        x = np.ones(4, np.float32)
        c.allreduce(x, op="avg")
        c.broadcast(x, order="nearest")
        c.allgather(x, xfer="pul")
        lockstep.load("m.gguf", mode="mmap")
        n: str = c.size
        lockstep.load(b"m.gguf")
    """)
    assert rc == 1, out
    for line in (5, 7, 8, 9, 10, 11, 12):
        assert f"use.py:{line}: error" in out, (line, out)
