"""The load benchmark's sharded-checkpoint rows, one measurement per run:

  python bench_py_ckpt.py IMPL DIR cold|warm DROP_EXE

DIR holds safetensors shards and their index (make_files.py). IMPL:
  lockstep-shards        lockstep.load(DIR, framework="torch"): writable torch tensors
  lockstep-shards-alias  the same in alias mode: read-only views of the page cache
  lockstep-shards-to-f32 the same with dtype="float32": the f16 and bf16 tensors
                         converted while loading (GB/s of the checkpoint's bytes)
  safetensors.torch      safetensors.torch.load_file on each shard in turn
  direct-read            the ceiling: lockstep_bench_load's direct reads of every shard
  map-touch              warm only, the floor of a mapping: each shard mapped whole
                         (private, writable), a view per tensor (its place known
                         beforehand: no header read) and every page touched as below
  direct-read-fresh      the same reads into new memory of each shard's size, its first
                         touch included (lockstep_bench_load direct-read-fresh)
  lockstep-tp2           two processes at once, each loading its rows of every tensor
                         (lockstep.ShardPlan(rank, 2, {"*": 0})), started together; the
                         time is the slower rank's, the bytes both ranks' reads from
                         storage (/proc/self/io read_bytes: cold only)
Every load is followed by a read of one byte of every 4 KiB page of every tensor:
safetensors 0.8's load_file maps the file, so its pages arrive at their first use,
and a load is counted until all its data is in memory. Every impl starts with the
memory it will need touched and freed just before its timing (bench_py_load.prime: this
VM hands freed memory back to its host, and a process that touches it first waits for
the host to back it again, 2-7x slower). DROP_EXE is
lockstep_bench_load (`drop` empties the page cache of a file). Prints the rows
"shards STATE GB/s" and "shards STATE CPU-s/GB" (GB: the checkpoint's bytes), and for
lockstep-tp2 "shards STATE read/size" (bytes read from storage over the checkpoint's)."""
import json
import mmap
import os
import resource
import subprocess
import sys
import time

from bench_py_load import prepare, prime  # beside this file


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def shards(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".safetensors"))


def touch(tensors, torch):
    """one byte of every page of every tensor, so that mapped pages are read"""
    s = 0
    for t in tensors.values():
        if t.numel():
            s += int(t.reshape(-1).view(torch.uint8)[::4096].sum())
    return s


def direct_read(files, state, exe, impl="direct-read"):
    """(bytes, seconds, CPU seconds) of a ceiling over every shard"""
    nbytes = secs = cpus = 0.0
    for f in files:
        out = subprocess.run([exe, impl, f, state], capture_output=True, text=True, check=True).stdout
        rows = {r["unit"]: r for r in map(json.loads, (x for x in out.splitlines() if x.startswith("{")))}
        gb = rows["GB/s"]["param"] / 1e9
        nbytes += rows["GB/s"]["param"]
        secs += gb / rows["GB/s"]["reps"][0]
        cpus += gb * rows["CPU-s/GB"]["reps"][0]
    return nbytes, secs, cpus


def read_bytes():
    with open("/proc/self/io") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("read_bytes:"))


def tp_rank(rank, world, folder):
    """One rank of lockstep-tp2: ready, wait for the go, load its rows, report"""
    import torch
    import lockstep
    plan = lockstep.ShardPlan(rank, world, {"*": 0})
    prime(checkpoint_bytes(folder) // world)
    print("ready", flush=True)
    sys.stdin.readline()
    t0, c0, r0 = time.perf_counter(), cpu(), read_bytes()
    _, tensors = lockstep.load(folder, framework="torch", plan=plan)
    touch(tensors, torch)
    print(json.dumps([time.perf_counter() - t0, cpu() - c0, read_bytes() - r0]), flush=True)


def tp2(folder, files, state, exe):
    """(bytes of the checkpoint, slower rank's seconds, CPU seconds, bytes read)"""
    for f in files:
        prepare(f, state, exe)
    ranks = [subprocess.Popen([sys.executable, __file__, "tp-rank", folder, str(r), "2"], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE) for r in range(2)]
    for p in ranks:
        assert p.stdout.readline().strip() == "ready"
    for p in ranks:  # both go at once
        p.stdin.write("go\n")
        p.stdin.flush()
    got = [json.loads(p.communicate()[0]) for p in ranks]
    if any(p.returncode for p in ranks):
        raise SystemExit("a tp2 rank failed")
    return checkpoint_bytes(folder), max(g[0] for g in got), sum(g[1] for g in got), sum(g[2] for g in got)


def checkpoint_bytes(folder):
    from lockstep import checkpoint
    return sum(t[4] for part in checkpoint.resolve(folder).parts for t in part.tensors)


def main():
    if sys.argv[1] == "tp-rank":
        return tp_rank(int(sys.argv[3]), int(sys.argv[4]), sys.argv[2])
    impl, folder, state, exe = sys.argv[1:5]
    files = shards(folder)
    extra = []
    if impl == "lockstep-tp2":
        nbytes, secs, cpus, nread = tp2(folder, files, state, exe)
        if state == "cold":
            extra = [("read/size", nread / nbytes)]
    elif impl in ("direct-read", "direct-read-fresh"):
        prime(checkpoint_bytes(folder))  # handed on: each shard's process is new
        nbytes, secs, cpus = direct_read(files, state, exe, impl)
    else:
        import torch
        import lockstep
        from safetensors.torch import load_file
        for f in files:
            prepare(f, state, exe)
        if impl == "map-touch":  # the tensors' places, read before the timing (and only here:
            # the tables, alive, would count toward Python's next collection in a load timed)
            layout = [[(t[0], t[3], t[4]) for t in lockstep.checkpoint.resolve(f).parts[0].tensors] for f in files]
        nbytes = checkpoint_bytes(folder)
        prime(2 * nbytes if impl == "lockstep-shards-to-f32" else nbytes)  # at most 2x: f16 to f32
        t0, c0 = time.perf_counter(), cpu()
        if impl == "safetensors.torch":
            tensors = {}
            for f in files:
                tensors.update(load_file(f))
        elif impl == "map-touch":
            tensors = {}
            for f, part in zip(files, layout):
                with open(f, "rb") as fh:
                    whole = torch.frombuffer(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY), dtype=torch.uint8)
                tensors.update((name, whole[at:at + size]) for name, at, size in part)
        else:
            _, tensors = lockstep.load(folder, framework="torch",
                                       mode="alias" if impl == "lockstep-shards-alias" else "auto",
                                       dtype="float32" if impl == "lockstep-shards-to-f32" else None)
        touch(tensors, torch)
        secs, cpus = time.perf_counter() - t0, cpu() - c0
    gb = nbytes / 1e9
    for unit, value in [("GB/s", gb / secs), ("CPU-s/GB", cpus / gb)] + extra:
        print(json.dumps({"workload": f"shards {state} {unit}", "impl": impl, "param": int(nbytes),
                          "unit": unit, "reps": [round(value, 4)]}))


if __name__ == "__main__":
    main()
