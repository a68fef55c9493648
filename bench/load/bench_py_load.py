"""The load benchmark's Python baselines, one measurement per run:

  python bench_py_load.py IMPL FILE cold|warm DROP_EXE

IMPL: safetensors.numpy (safetensors.numpy.load_file) or gguf (gguf.GGUFReader, then
every tensor's data copied out of its memory map into an array, which is what using
them costs). DROP_EXE is lockstep_bench_load, whose `drop` empties the page cache of
the file and checks it with mincore. Prints the same two JSON rows as the C side."""
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def prepare(path, state, drop):
    """cold: the file's pages dropped from the page cache; warm: all of them read in"""
    if state == "cold":
        subprocess.run([drop, "drop", path], check=True)
    else:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def prime(nbytes):
    """This VM hands memory a process frees back to the host, which then supplies it
    again at its next first touch (lockstep_bench_load's prime): the memory a load will
    need, touched and freed just before the timing, as the C side does for every impl."""
    block = np.ones(nbytes + (64 << 20), dtype=np.uint8)
    del block


def main():
    impl, path, state, drop = sys.argv[1:5]
    if impl == "safetensors.numpy":
        from safetensors.numpy import load_file
    else:
        import gguf
    prepare(path, state, drop)
    prime(os.path.getsize(path))
    t0, c0 = time.perf_counter(), cpu()
    if impl == "safetensors.numpy":
        tensors = load_file(path)
        nbytes = sum(v.nbytes for v in tensors.values())
    else:
        reader = gguf.GGUFReader(path)
        tensors = [np.array(t.data) for t in reader.tensors]
        nbytes = sum(int(t.n_bytes) for t in reader.tensors)
    secs, cpus = time.perf_counter() - t0, cpu() - c0
    fmt = path.rsplit(".", 1)[-1]
    gb = nbytes / 1e9
    for unit, value in [("GB/s", gb / secs), ("CPU-s/GB", cpus / gb)]:
        print(json.dumps({"workload": f"{fmt} {state} {unit}", "impl": impl, "param": nbytes,
                          "unit": unit, "reps": [round(value, 4)]}))


if __name__ == "__main__":
    main()
