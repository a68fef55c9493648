"""The torch rows' targets (issue 66), judged on one run's medians (bench_torch.py says
what each row is). Rows are {"workload", "impl", "param", "median"}."""

OP_OVER_FLOOR_US = 1.5     # lockstep-op over noop+lockstep (the do-nothing op, then Comm), every size (2 ranks)
OP_VS_DEEPSPEED = {2: 0.8, 4: 0.9}  # lockstep-op / deepspeed-shm, 4 B to 4 MiB
DIST_OVER_FLOOR_US = 2.0   # lockstep-dist over torch-floor, up to 16 KiB (2 ranks)
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
                # paired batch by batch where the run has it, else the medians' difference
                paired = _medians(rows, f"{w} op-over-floor")
                got = [(p, paired.get(p, {}).get("lockstep-op", m["lockstep-op"] - m["noop+lockstep"]))
                       for p, m in sorted(med.items()) if "lockstep-op" in m and "noop+lockstep" in m]
                lines.append(_verdict(f"{w} lockstep-op <= noop+lockstep + {OP_OVER_FLOOR_US} us", got,
                                      lambda v: v > OP_OVER_FLOOR_US, us))
            most = OP_VS_DEEPSPEED[ranks]
            got = [(p, m["lockstep-op"] / m["deepspeed-shm"]) for p, m in sorted(med.items())
                   if p <= 4 << 20 and "deepspeed-shm" in m and "lockstep-op" in m]
            lines.append(_verdict(f"{w} lockstep-op, 4 B-4 MiB, <= {most}x deepspeed-shm", got, lambda v: v > most,
                                  ratio))
            if ranks == 2:
                got = [(p, m["lockstep-dist"] - m["torch-floor"]) for p, m in sorted(med.items())
                       if p <= 16 << 10 and "torch-floor" in m and "lockstep-dist" in m]
                lines.append(_verdict(f"{w} lockstep-dist, up to 16 KiB, <= torch-floor + {DIST_OVER_FLOOR_US} us",
                                      got, lambda v: v > DIST_OVER_FLOOR_US, us))
                got = [(p, m["lockstep-dist"] / m["deepspeed-shm"]) for p, m in sorted(med.items())
                       if p >= 64 << 10 and "deepspeed-shm" in m and "lockstep-dist" in m]
                lines.append(_verdict(f"{w} lockstep-dist, from 64 KiB, <= {DIST_VS_DEEPSPEED}x deepspeed-shm", got,
                                      lambda v: v > DIST_VS_DEEPSPEED, ratio))
    for ranks in (2, 4):
        med = _medians(rows, f"tp_mlp_{ranks}r")
        got = [(p, m["compiled"] / m["eager"]) for p, m in sorted(med.items()) if "compiled" in m and "eager" in m]
        if got:
            alone = {p: m["compiled-alone"] / m["eager-alone"] for p, m in med.items()
                     if "compiled-alone" in m and "eager-alone" in m}
            lines.append(_verdict(f"tp_mlp_{ranks}r compiled step <= eager step", got, lambda v: v > 1.0,
                                  lambda p, v: f"hidden {p} {v:.2f}x (without the op: {alone.get(p, 0):.2f}x)"))
    return lines
