"""The torch rows' targets (issue 66), judged on one run's medians (bench_torch.py says
what each row is). Rows are {"workload", "impl", "param", "median", "lo"} (lo: the low end
of the median's 95 % interval, lockstep_common.median_interval)."""

OP_OVER_FLOOR_US = 1.5     # lockstep-op over noop+lockstep (the do-nothing op, then Comm), every size (2 ranks)
OP_VS_DEEPSPEED = {2: 0.8, 4: 0.9}  # lockstep-op / deepspeed-shm, 4 B to 4 MiB
DIST_OVER_FLOOR_US = 2.0   # lockstep-dist over torch-floor + lockstep (Comm), up to 16 KiB (2 ranks)
DIST_VS_DEEPSPEED = 0.8    # lockstep-dist / deepspeed-shm, from 64 KiB (2 ranks)


def _medians(rows, workload):
    """{param: {impl: median}} of one workload"""
    out = {}
    for r in rows:
        if r["workload"] == workload:
            out.setdefault(r["param"], {})[r["impl"]] = r["median"]
    return out


def _verdict(what, got, bad, fmt):
    """One line: got is [(param, value)], bad(value) says a miss"""
    if not got:
        return f"{what}: not measured"
    missed = [(p, v) for p, v in got if bad(v)]
    worst = max(got, key=lambda g: g[1])
    if missed:
        return f"{what}: missed at " + ", ".join(f"{fmt(p, v)}" for p, v in missed)
    return f"{what}: met at all {len(got)} sizes (worst {fmt(*worst)})"


def _op_over_floor(rows, w, med, size_name):
    """lockstep-op over noop+lockstep, paired batch by batch where the run has it (else the
    medians' difference). At sizes where a call takes hundreds of us, the batches of one
    run scatter by more than the target: a size misses only when the 95 % interval of the
    median lies wholly above it, and one whose median alone is above it is named apart."""
    pairs = {r["param"]: r for r in rows if r["workload"] == f"{w} op-over-floor" and r["impl"] == "lockstep-op"}
    got = []
    for p, m in sorted(med.items()):
        if "lockstep-op" not in m or "noop+lockstep" not in m:
            continue
        r = pairs.get(p)
        if r is None:
            v = m["lockstep-op"] - m["noop+lockstep"]
            got.append((p, v, v))
        else:
            got.append((p, r["median"], r.get("lo", r["median"])))
    what = f"{w} lockstep-op <= noop+lockstep + {OP_OVER_FLOOR_US} us"
    if not got:
        return f"{what}: not measured"

    def fmt(p, v, lo):
        return f"{size_name(p)} {v:+.2f} us" + (f" (interval from {lo:+.2f})" if lo != v else "")
    missed = [g for g in got if g[2] > OP_OVER_FLOOR_US]
    unsure = [g for g in got if g[1] > OP_OVER_FLOOR_US >= g[2]]
    if missed:
        return f"{what}: missed at " + ", ".join(fmt(*g) for g in missed)
    if unsure:
        return (f"{what}: met at {len(got) - len(unsure)} of {len(got)} sizes; at " +
                ", ".join(fmt(*g) for g in unsure) + " the median is over and the interval is not")
    return f"{what}: met at all {len(got)} sizes (worst {fmt(*max(got, key=lambda g: g[1]))})"


def _tp_mlp(rows, ranks):
    """The compiled step judged by the op's own cost in it: (compiled - compiled-alone) <=
    (eager - eager-alone). A hidden size misses only when the compiled op's cost, taken at
    the low ends of the rows' median intervals, is above the eager op's at the high ends:
    at hidden 4096 the matrix products take tens of ms and the op a few tens of us."""
    by = {}
    for r in rows:
        if r["workload"] == f"tp_mlp_{ranks}r":
            by.setdefault(r["param"], {})[r["impl"]] = r
    names = ("compiled", "compiled-alone", "eager", "eager-alone")
    got = [(p, m) for p, m in sorted(by.items()) if all(n in m for n in names)]
    if not got:
        return []
    what = f"tp_mlp_{ranks}r the op's cost compiled <= eager"
    said, missed, unsure = [], [], []
    for p, m in got:
        lo = lambda n: m[n].get("lo", m[n]["median"])  # noqa: E731
        hi = lambda n: m[n].get("hi", m[n]["median"])  # noqa: E731
        compiled = m["compiled"]["median"] - m["compiled-alone"]["median"]
        eager = m["eager"]["median"] - m["eager-alone"]["median"]
        said.append(f"hidden {p} {compiled:+.1f} us vs {eager:+.1f} us")
        if lo("compiled") - hi("compiled-alone") > hi("eager") - lo("eager-alone"):
            missed.append(said[-1])
        elif compiled > eager:
            unsure.append(said[-1])
    if missed:
        return [f"{what}: missed at " + ", ".join(missed)]
    if unsure:
        return [f"{what}: met at {len(got) - len(unsure)} of {len(got)} sizes; at " + ", ".join(unsure) +
                " the medians are over and the intervals are not"]
    return [f"{what}: met at all {len(got)} sizes (" + ", ".join(said) + ")"]


def torch_targets(rows, size_name):
    lines = []
    for ranks, launcher in ((2, ""), (4, ""), (2, "_torchrun")):
        for dtype in ("", "bf16_"):
            w = f"allreduce_torch_{dtype}{ranks}r{launcher}"
            med = _medians(rows, w)
            if not med:
                continue
            us = lambda p, v: f"{size_name(p)} {v:+.2f} us"  # noqa: E731
            ratio = lambda p, v: f"{size_name(p)} {v:.2f}x"  # noqa: E731
            if ranks == 2:  # the op's floor where it runs: torch's dispatch after the last call, then Comm
                lines.append(_op_over_floor(rows, w, med, size_name))
            most = OP_VS_DEEPSPEED[ranks]
            got = [(p, m["lockstep-op"] / m["deepspeed-shm"]) for p, m in sorted(med.items())
                   if p <= 4 << 20 and "deepspeed-shm" in m and "lockstep-op" in m]
            lines.append(_verdict(f"{w} lockstep-op, 4 B-4 MiB, <= {most}x deepspeed-shm", got, lambda v: v > most,
                                  ratio))
            if ranks == 2:
                # the back end's own cost: torch.distributed's (its do-nothing back end) and
                # the collective's (Comm, which a far-apart host makes several us at 16 KiB)
                # are its floor
                got = [(p, m["lockstep-dist"] - m["torch-floor"] - m["lockstep"]) for p, m in sorted(med.items())
                       if p <= 16 << 10 and "torch-floor" in m and "lockstep-dist" in m and "lockstep" in m]
                lines.append(_verdict(f"{w} lockstep-dist, up to 16 KiB, <= torch-floor + lockstep + "
                                      f"{DIST_OVER_FLOOR_US} us", got, lambda v: v > DIST_OVER_FLOOR_US, us))
                got = [(p, m["lockstep-dist"] / m["deepspeed-shm"]) for p, m in sorted(med.items())
                       if p >= 64 << 10 and "deepspeed-shm" in m and "lockstep-dist" in m]
                lines.append(_verdict(f"{w} lockstep-dist, from 64 KiB, <= {DIST_VS_DEEPSPEED}x deepspeed-shm", got,
                                      lambda v: v > DIST_VS_DEEPSPEED, ratio))
    for ranks in (2, 4):
        lines += _tp_mlp(rows, ranks)
    return lines
