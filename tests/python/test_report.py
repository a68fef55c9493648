"""The comm report's targets (tools/lockstep_bench_comm.py comm_targets): each judged on the rows it is
given, with the sizes that missed and the Python overhead, exactly as printed."""
import importlib.machinery
import importlib.util
import os

from conftest import ROOT


def report():
    loader = importlib.machinery.SourceFileLoader("lockstep_report", os.path.join(ROOT, "tools", "lockstep"))
    spec = importlib.util.spec_from_loader("lockstep_report", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def row(workload, impl, param, median):
    return {"workload": workload, "impl": impl, "param": param, "median": median, "unit": "us"}


def test_targets_met_missed_and_absent():
    m = report()
    rows = [
        row("allreduce_2r", "openmpi", 4, 1.0), row("allreduce_2r", "lockstep", 4, 0.7),  # at the bound: met
        row("allreduce_2r", "openmpi", 1024, 2.0), row("allreduce_2r", "lockstep", 1024, 1.0),
        row("allreduce_2r", "openmpi", 1 << 20, 100.0), row("allreduce_2r", "lockstep", 1 << 20, 101.0),
        row("allreduce_4r", "openmpi", 64, 2.0), row("allreduce_4r", "lockstep", 64, 1.2),
        row("allreduce_4r", "lockstep-buffer", 64, 0.8),
        row("allreduce_4r", "openmpi", 4 << 20, 1000.0), row("allreduce_4r", "lockstep", 4 << 20, 750.0),
        row("allreduce_4r", "lockstep-buffer", 4 << 20, 250.0),
        row("allreduce_4r", "openmpi", 1 << 20, 100.0), row("allreduce_4r", "lockstep", 1 << 20, 65.0),
        row("allreduce_4r", "lockstep", 512 << 20, 1.0),  # past the range: not judged
        row("roundtrip_4r", "allreduce_4r", 4 << 20, 251.4),  # the host's state at a miss: said with it
        row("roundtrip_4r", "allreduce_4r", 1 << 20, 460.0),  # apart: 0.65x is within 0.7x there
        row("roundtrip_4r", "allreduce_4r", 64, 80.0),  # usual: 0.5x
        row("roundtrip_4r", "bcast_4r", 64, 70.0),  # another table's: not
        row("roundtrip_2r", "allreduce_2r", 4, 65.0),  # a size that met: not
        row("python_overhead_2r", "c", 64, 0.2), row("python_overhead_2r", "python", 64, 0.5),
        row("python_overhead_4r", "c", 64, 1.0), row("python_overhead_4r", "python", 64, 2.75),
        row("python_overhead_8r", "python", 64, 1.0),  # no C row: not measured
        row("python_overhead_2r", "c-broadcast", 64, 0.25), row("python_overhead_2r", "python-broadcast", 64, 0.375),
        row("python_overhead_2r", "python-allgather", 64, 0.5),  # no C row: no line
        row("python_overhead_8r", "c-reduce_scatter", 64, 2.0),
        row("python_overhead_8r", "python-reduce_scatter", 64, 2.5),  # a line without the allreduce rows
        row("python_overhead_2r", "c-alltoall", 4096, 0.25), row("python_overhead_2r", "python-alltoall", 4096, 1.0),
    ]
    assert m.lockstep_bench_comm.comm_targets(rows) == [
        "allreduce_2r lockstep, 4 B-256 KiB, <= 0.70x OpenMPI: met at all 2 sizes (worst 0.70x at 4 B)",
        "allreduce_2r lockstep, 1 MiB-16 MiB, <= 1.00x OpenMPI: missed at 1 MiB 1.01x",
        "allreduce_4r lockstep, 4 B-16 MiB, <= 0.50x OpenMPI (0.70x apart): missed at 64 B 0.60x (round trip 80 ns), "
        "4 MiB 0.75x (round trip 251 ns)",
        "allreduce_4r lockstep-buffer, 4 B-16 MiB, <= 0.50x OpenMPI (0.70x apart): met at all 2 sizes "
        "(worst 0.40x at 64 B)",
        "python_overhead_2r, 64 B, Python's allreduce <= 1.5 us over the C call: met (0.30 us)",
        "python_overhead_2r, 64 B, Python's broadcast: 0.12 us over the C call",
        "python_overhead_4r, 64 B, Python's allreduce <= 1.5 us over the C call: missed (1.75 us)",
        "python_overhead_8r, 64 B, Python's allreduce <= 1.5 us over the C call: not measured",
        "python_overhead_8r, 64 B, Python's reduce_scatter: 0.50 us over the C call",
    ]


def test_a_size_past_the_bare_exchange_is_judged_against_it():
    m = report()
    rows = [row("allreduce_4r", "openmpi", 64, 5.0), row("allreduce_4r", "lockstep", 64, 2.9),
            row("allreduce_4r", "bare-exchange", 64, 3.0),  # 0.60x: the 0.5x target asks less than the floor
            row("allreduce_4r", "openmpi", 256, 5.0), row("allreduce_4r", "lockstep", 256, 2.7),
            row("allreduce_4r", "bare-exchange", 256, 2.6),  # 0.52x, and lockstep slower than it: missed
            row("allreduce_4r", "openmpi", 1024, 10.0), row("allreduce_4r", "lockstep", 1024, 3.0),
            row("allreduce_4r", "bare-exchange", 1024, 4.0)]  # below the target: the target as written
    assert m.lockstep_bench_comm.comm_targets(rows)[2] == (
        "allreduce_4r lockstep, 4 B-16 MiB, <= 0.50x OpenMPI (0.70x apart): missed at 256 B 0.54x "
        "(the bare-exchange 0.52x); past the bare-exchange at 64 B (0.60x OpenMPI), 256 B (0.52x OpenMPI), "
        "judged against it")
    rows[4] = row("allreduce_4r", "lockstep", 256, 2.5)
    assert m.lockstep_bench_comm.comm_targets(rows)[2].startswith(
        "allreduce_4r lockstep, 4 B-16 MiB, <= 0.50x OpenMPI (0.70x apart): met at all 3 sizes (worst 0.58x at 64 B); "
        "past the bare-exchange at 64 B")


def test_targets_without_rows():
    m = report()
    lines = m.lockstep_bench_comm.comm_targets([row("allreduce_2r", "lockstep", 4, 1.0)])  # no baseline row
    assert lines == [
        "allreduce_2r lockstep, 4 B-256 KiB, <= 0.70x OpenMPI: not measured",
        "allreduce_2r lockstep, 1 MiB-16 MiB, <= 1.00x OpenMPI: not measured",
        "allreduce_4r lockstep, 4 B-16 MiB, <= 0.50x OpenMPI (0.70x apart): not measured",
        "allreduce_4r lockstep-buffer, 4 B-16 MiB, <= 0.50x OpenMPI (0.70x apart): not measured"]
    assert m.size_name(3) == "3 B" and m.size_name(1536) == "1536 B" and m.size_name(2048) == "2 KiB"


def test_round_trip_table(capsys):
    """roundtrip_<N>r rows print as a table of their own, one row per table they were
    measured with, without ratios."""
    m = report()
    rows = [row("allreduce_4r", "openmpi", 64, 2.0), row("allreduce_4r", "lockstep", 64, 1.0),
            dict(row("roundtrip_4r", "allreduce_4r", 64, 251.4), unit="ns"),
            dict(row("roundtrip_4r", "bcast_4r", 64, 64.5), unit="ns")]
    m.print_tables(rows, "comm")
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(out) if line.startswith("## comm: roundtrip_4r"))
    assert "(median ns of a cache line's round trip between rank 0 and a rank on another CPU" in out[head]
    assert out[head + 3].split() == ["allreduce_4r", "251"]
    assert out[head + 4].split() == ["bcast_4r", "64.5"]
    assert out[head - 2].split() == ["lockstep", "1", "(0.50x)"]  # the tables before keep their ratios


def test_the_op_is_judged_against_its_floor_where_it_runs():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from lockstep_bench_torch import torch_targets
    w = "allreduce_torch_2r"
    rows = [row(w, "lockstep-op", 4, 5.0), row(w, "noop+lockstep", 4, 4.0),       # +1.0: met
            row(w, "lockstep-op", 4 << 20, 500.0), row(w, "noop+lockstep", 4 << 20, 498.5),  # +1.5: at the bound
            row(w, "lockstep", 4 << 20, 470.0), row(w, "torch-op-floor", 4 << 20, 3.0)]
    lines = torch_targets(rows, lambda p: f"{p} B")
    assert lines[0] == f"{w} lockstep-op <= noop+lockstep + 1.5 us: met at all 2 sizes (worst 4194304 B +1.50 us)"
    rows[3] = row(w, "noop+lockstep", 4 << 20, 497.0)
    assert torch_targets(rows, lambda p: f"{p} B")[0] == \
        f"{w} lockstep-op <= noop+lockstep + 1.5 us: missed at 4194304 B +3.00 us"
    # paired batch by batch: the pairs' median interval decides (it says where a size is unsure)
    pair = dict(row(f"{w} op-over-floor", "lockstep-op", 4 << 20, 4.0), lo=-20.0, hi=30.0)
    assert torch_targets(rows + [pair], lambda p: f"{p} B")[0] == \
        (f"{w} lockstep-op <= noop+lockstep + 1.5 us: met at 1 of 2 sizes; at 4194304 B +4.00 us "
         "(interval from -20.00) the median is over and the interval is not")
    pair["lo"] = 2.0
    assert torch_targets(rows + [pair], lambda p: f"{p} B")[0] == \
        f"{w} lockstep-op <= noop+lockstep + 1.5 us: missed at 4194304 B +4.00 us (interval from +2.00)"


def test_the_back_end_is_judged_over_torch_and_the_collective():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from lockstep_bench_torch import torch_targets
    w = "allreduce_torch_2r"
    # 16 KiB far apart: Comm 4.4 us, torch's do-nothing back end 3.5, the back end 7.8: +0.0 over both
    rows = [row(w, "lockstep-dist", 16 << 10, 7.9), row(w, "torch-floor", 16 << 10, 3.5),
            row(w, "lockstep", 16 << 10, 4.4)]
    line = next(x for x in torch_targets(rows, lambda p: f"{p} B") if "lockstep-dist, up to" in x)
    assert line == f"{w} lockstep-dist, up to 16 KiB, <= torch-floor + lockstep + 2.0 us: met at all 1 sizes " \
        "(worst 16384 B +0.00 us)"
    rows[0] = row(w, "lockstep-dist", 16 << 10, 10.4)
    line = next(x for x in torch_targets(rows, lambda p: f"{p} B") if "lockstep-dist, up to" in x)
    assert line.endswith("missed at 16384 B +2.50 us")


def test_the_compiled_step_is_judged_by_the_ops_own_cost():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from lockstep_bench_torch import torch_targets

    def mlp(impl, hidden, median, lo, hi):
        return dict(row("tp_mlp_2r", impl, hidden, median), lo=lo, hi=hi)
    # hidden 256: the op costs +4 us compiled, +16 us eager though the compiled step is slower
    rows = [mlp("compiled", 256, 168, 166, 170), mlp("compiled-alone", 256, 164, 163, 165),
            mlp("eager", 256, 64, 63, 66), mlp("eager-alone", 256, 48, 47, 49)]
    assert torch_targets(rows, str) == \
        ["tp_mlp_2r the op's cost compiled <= eager: met at all 1 sizes (hidden 256 +4.0 us vs +16.0 us)"]
    # +50 us compiled: over even at the intervals' ends (166 - 116 = 50 > 66 - 47)
    rows[1] = mlp("compiled-alone", 256, 118, 116, 120)
    assert torch_targets(rows, str) == \
        ["tp_mlp_2r the op's cost compiled <= eager: missed at hidden 256 +50.0 us vs +16.0 us"]
    # +20 us compiled with wide intervals: over in the medians only
    rows[1] = mlp("compiled-alone", 256, 148, 140, 165)
    assert torch_targets(rows, str) == \
        ["tp_mlp_2r the op's cost compiled <= eager: met at 0 of 1 sizes; at hidden 256 +20.0 us vs +16.0 us "
         "the medians are over and the intervals are not"]


def test_the_median_interval_holds_the_median_with_95_percent_confidence():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from lockstep_common import median_interval
    # 9 samples: the 2nd and 8th (96.1 %); 7: min and max (98.4 %); 27: the 8th and 20th
    assert median_interval([9, 1, 8, 2, 7, 3, 6, 4, 5]) == (2, 8)
    assert median_interval(list(range(7))) == (0, 6)
    assert median_interval(list(range(1, 28))) == (8, 20)
    assert median_interval([5.0]) == (5.0, 5.0)


def test_routes_default_judged_against_the_best_setting_in_its_state():
    m = report()
    r = m.lockstep_bench_routes
    w = "routes_allreduce_2r_torchrun"

    def raw(impl, param, us, route="chunked"):
        return {"workload": w, "impl": impl, "param": param, "unit": "us", "reps": [us] * 3, "route": route}
    rows = [raw("numpy/default", 4096, 2.0, "small"), raw("numpy/close", 4096, 2.0, "small"),
            raw("numpy/far", 4096, 1.95, "small"), raw("numpy/slots", 4096, 2.1, "small"),  # 1.03x: met
            raw("numpy/default", 1 << 20, 120.0), raw("numpy/far", 1 << 20, 90.0, "kernel-copy"),
            raw("numpy/slots", 1 << 20, 120.0),
            raw("numpy/default", 4 << 20, 130.0, "kernel-copy"), raw("numpy/far", 4 << 20, 100.0, "kernel-copy"),
            {"workload": "roundtrip_routes_2r_torchrun", "impl": w, "param": 1 << 20, "unit": "ns", "reps": [460]}]
    assert r.targets(rows, m.size_name) == [  # 4 MiB: the best one's route, its spread: met
        f"{w} default takes the best explicit setting's route or <= 1.1x it: missed at 1 MiB 1.33x, chunked where "
        f"numpy/far took kernel-copy (apart)"]
    before = [dict(x) for x in rows]
    after = [dict(x, reps=[x["reps"][0] * (1.2 if x["impl"] == "numpy/default" and x["param"] == 1 << 20 else 1.0)]
                  * 3) for x in rows]
    lines, verdict = r.against(before, after, m.size_name)
    assert len(lines) == 3 and verdict == (
        f"routes: every default row <= 1.15x before, in the state both ran in: missed: {w} numpy/default 1 MiB "
        f"1.20x (apart)")


def test_idle_cpu_time_reads_as_locksteps_share_of_the_baseline():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import lockstep_report as lr
    rows = [{"workload": "idle", "impl": "gomp", "param": 2, "median": 0.8, "unit": "cpu_s/s"},
            {"workload": "idle", "impl": "auto", "param": 2, "median": 0.0002, "unit": "cpu_s/s"},
            {"workload": "load", "impl": "mmap+memcpy", "param": 1, "median": 2.0, "unit": "GB/s"},
            {"workload": "load", "impl": "lockstep-auto", "param": 1, "median": 4.0, "unit": "GB/s"}]
    got = {w: (lo, hi) for w, _, lo, _, hi, _ in lr.headlines(rows, ["gomp", "mmap+memcpy"])}
    assert got["idle"] == (0.00025, 0.00025)  # a quarter of a thousandth of libgomp's CPU time
    assert got["load"] == (0.5, 0.5)  # a rate: twice the baseline's GB/s costs half
    table = lr.table_markdown(rows, "idle", ["gomp"], lambda part, p: str(p), "omp")
    assert table[-2] == "| auto | 0.0002 (0.0003x) |"


def test_the_oversubscribed_graph_floor_counts_a_nodes_work(monkeypatch):
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import lockstep_bench_omp
    monkeypatch.setattr(lockstep_bench_omp.os, "cpu_count", lambda: 2)

    def omp(w, impl, t, median):
        return {"workload": w, "impl": impl, "param": t, "median": median, "unit": "us"}
    rows = [omp("handoff", "host", 2, 0.5), omp("graph", "lockstep", 1, 480.0), omp("graph", "libomp", 1, 500.0),
            omp("graph", "libomp", 4, 2000.0), omp("graph", "lockstep", 4, 1300.0)]
    lines = lockstep_bench_omp.omp_targets(rows)
    # 4 threads on 2 CPUs: 2 hand-offs of 0.5 us per CPU, and half of the 1-thread node (480 ns)
    assert "graph floor at 4 threads: 1000 ns + a node's work on 2 CPUs (480 ns at 1 thread) = 1240 ns/node" in lines
    # max(0.5 x 2000, 1.25 x 1240) = 1550
    assert "graph at 4 threads <= max(0.5x the better runtime, 1.25x the floor) = 1.55e+03: met " \
           "(1.3e+03, 0.65x the better runtime)" in lines
    rows[-1] = omp("graph", "lockstep", 4, 1600.0)
    assert any(x.startswith("graph at 4 threads") and ": MISSED (1.6e+03" in x
               for x in lockstep_bench_omp.omp_targets(rows))


def test_the_region_floor_runs_in_the_rounds_of_the_rows_it_judges(monkeypatch, tmp_path):
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import lockstep_bench_omp as bo
    monkeypatch.setattr(bo.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bo, "libomp_path", lambda: None)
    (tmp_path / "bench" / "omp").mkdir(parents=True)
    (tmp_path / "bench" / "omp" / "bench_omp").write_text("")
    calls = []
    bo.bench_omp(str(tmp_path), True, lambda cmd, env=None: calls.append(cmd[1:4]) or [], lambda s, x: None)
    assert ["host", "floor-region", "2"] not in calls  # 2 threads on 2 CPUs: no floor
    for w in bo.REGION_ROWS:  # quick: 1 round, so REGION_ROUNDS turns, the floor in each
        i = calls.index(["lockstep", w, "4"])
        row = calls[i:i + 3 * bo.REGION_ROUNDS]
        assert row == [["lockstep", w, "4"], ["gomp", w, "4"], ["host", "floor-region", "4"]] * bo.REGION_ROUNDS
    assert calls.count(["host", "floor-region", "4"]) == len(bo.REGION_ROWS) * bo.REGION_ROUNDS
    assert calls.count(["lockstep", "sync-barrier", "4"]) == 1  # other rows: their usual rounds


def test_atomic_is_reported_not_judged_at_any_thread_count(monkeypatch):
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import lockstep_bench_omp
    monkeypatch.setattr(lockstep_bench_omp.os, "cpu_count", lambda: 2)
    rows = [{"workload": "sync-atomic", "impl": impl, "param": t, "median": v, "unit": "us"}
            for t in (2, 4) for impl, v in (("lockstep", 0.05), ("gomp", 0.01), ("libomp", 0.02))]
    rows.append({"workload": "handoff", "impl": "host", "param": 2, "median": 0.5, "unit": "us"})
    lines = [x for x in lockstep_bench_omp.omp_targets(rows) if x.startswith("sync-atomic")]
    assert lines == ["sync-atomic at 2 threads: 0.050 us, 5.00x the better runtime (reported, not judged)",
                     "sync-atomic at 4 threads: 0.050 us, 5.00x the better runtime (reported, not judged)"]


def test_a_load_target_past_its_floor_is_judged_against_the_floor():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import lockstep_bench_ckpt

    def gbs(impl, state, median):
        return {"workload": f"shards {state} GB/s", "impl": impl, "param": 1, "median": median, "unit": "GB/s"}
    rows = [gbs("lockstep-shards", "cold", 1.7), gbs("direct-read", "cold", 2.5),
            gbs("direct-read-fresh", "cold", 2.0), gbs("safetensors.torch", "cold", 1.0),
            gbs("lockstep-shards", "warm", 30.0), gbs("lockstep-shards-alias", "warm", 28.0),
            gbs("safetensors.torch", "warm", 31.0), gbs("map-touch", "warm", 33.0),
            gbs("lockstep-shards-to-f32", "cold", 1.2), gbs("lockstep-tp2", "cold", 2.1)]
    lines = lockstep_bench_ckpt.targets(rows)
    # 0.9 x 2.5 = 2.25 asks more than the floor (2.0): judged at >= 0.8 x 2.0
    assert lines[0] == ("shards cold, best rounds: lockstep-shards >= 0.9x direct-read, past the floor (direct-read-fresh "
                        "2.00 GB/s: 1.12x it), restated >= 0.8x the floor: met (0.85x the floor, 0.68x direct-read)")
    # 1.5 x 1.0 lies below the floor: judged as written
    assert lines[1] == "shards cold, best rounds: lockstep-shards >= 1.5x safetensors.torch: met (1.70x, 1.70 against 1.00 GB/s)"
    assert lines[2].endswith("missed (0.97x, 30.00 against 31.00 GB/s)")  # 1.0 x 31 is below map-touch's 33
    assert "restated >= 0.8x the floor: met (0.85x the floor" in lines[3]
    assert lines[4] == ("shards cold, best rounds: lockstep-shards-to-f32 >= 0.8x lockstep-shards: missed "
                        "(0.71x, 1.20 against 1.70 GB/s)")  # against our own load: no floor
    # the slower rank: 1.7 / 2.1 = 0.81x the full load, 2.0 / 2.1 = 0.95x the floor's time
    assert lines[-1].endswith(": met (0.81x the full load, 0.95x the disk's time)")
    rows[-1] = gbs("lockstep-tp2", "cold", 1.5)
    assert ": missed (1.13x the full load, 1.33x the disk's time)" in lockstep_bench_ckpt.targets(rows)[-1]
    rows[7] = gbs("map-touch", "warm", 25.0)  # slower than load_file: no floor
    assert lockstep_bench_ckpt.targets(rows)[3] == (
        "shards warm, best rounds: lockstep-shards-alias >= 3.0x safetensors.torch: missed (0.90x, 28.00 against 31.00 GB/s) "
        "(map-touch 25.00 GB/s, slower than safetensors.torch: no floor)")
    # each impl's best round (a slow spell of the host only adds time), cold and warm;
    # units other than throughput: the medians
    rows[4] = dict(gbs("lockstep-shards", "warm", 10.0), max=31.0)
    rows[6] = dict(gbs("safetensors.torch", "warm", 29.0), max=31.0)
    rows[0] = dict(gbs("lockstep-shards", "cold", 1.4), max=1.7)
    rows[3] = dict(gbs("safetensors.torch", "cold", 0.9), max=1.2)
    rows.append({"workload": "shards cold read/size", "impl": "lockstep-tp2", "param": 1, "median": 1.01,
                 "max": 1.9, "unit": "read/size"})
    lines = lockstep_bench_ckpt.targets(rows)
    assert lines[2].startswith("shards warm, best rounds: lockstep-shards >= 1.0x safetensors.torch: met (1.00x, 31.00 against 31.00 GB/s)")
    assert lines[1].endswith("missed (1.42x, 1.70 against 1.20 GB/s)")
    assert lines[-2].endswith("the checkpoint: met (1.010x)")


def test_against_judges_over_the_drift_openmpi_saw_in_the_same_launches():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from lockstep_bench_against import compare, verdicts

    def build(lockstep, openmpi, paths):
        return {("allreduce_2r", "lockstep", 4): [lockstep] * 3, ("allreduce_2r", "openmpi", 4): [openmpi] * 3,
                ("allreduce_paths_2r", "lockstep-large", 4): [paths] * 3,
                ("roundtrip_2r", "allreduce_2r", 4): [65.0] * 3, ("roundtrip_2r", "allreduce_paths_2r", 4): [65.0] * 3}

    # after's launches caught a slower spell: OpenMPI 1.3x there too, so both rows are alike
    rows = compare({"old": build(0.07, 0.20, 0.07), "this": build(0.091, 0.26, 0.091)}, "old", "this")
    assert [round(r[7], 2) for r in rows] == [1.3, 1.3]  # the paths table takes allreduce_2r's OpenMPI
    assert verdicts(rows, 2, str) == \
        ["2 ranks: after <= 1.15x before: 2 of 2 rows in the usual state; met (worst 1.00x: allreduce_2r lockstep 4)"]
    # the same rows beside an OpenMPI that did not move: lockstep itself is 1.3x slower
    rows = compare({"old": build(0.07, 0.26, 0.07), "this": build(0.091, 0.26, 0.091)}, "old", "this")
    assert verdicts(rows, 2, str) == \
        ["2 ranks: after <= 1.15x before: 2 of 2 rows in the usual state; missed: allreduce_2r lockstep 4 1.30x; "
         "allreduce_paths_2r lockstep-large 4 1.30x"]
