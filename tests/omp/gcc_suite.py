#!/usr/bin/env python3
"""GCC's libgomp testsuite (C run tests) under the system libgomp and under lockstep's runtime.

Each program of libgomp.c and libgomp.c-c++-common that DejaGnu would run on this host
(dg-do run, the default there; no unmet dg-require-effective-target, dg-skip-if or
`target` selector) is built as GCC's harness builds it: gcc -fopenmp, the test's
dg-options (else -O2), its dg-additional-options whose selector holds, its
dg-additional-sources. It runs at each thread count with its dg-set-target-env-var
settings, first under libgomp, then with LD_PRELOAD=liblockstep-omp.so. A run passes when
it exits 0 (non-zero under dg-shouldfail) within the time limit and its output matches
the dg-output patterns in order.

The step fails when a program passes under libgomp and not under lockstep: a wrong
result, a crash or a time-out always; a loud refusal by name ("lockstep-omp: X is not
supported") only with --strict. libgomp's
results are cached beside the binaries, keyed by the libgomp file; the binaries are kept
between runs (rebuilt when the source or the flags change).

Usage: gcc_suite.py --suite DIR --lib LIB [--work DIR] [--threads 2,4] [--jobs N]
                    [--only PATTERN ...] [--exclude PATTERN ...] [--san FLAGS]
                    [--no-gomp] [--strict] [--table FILE]
Exit 0 when no program regresses, 1 otherwise, 77 when the suite cannot be had.
"""
import argparse
import concurrent.futures as cf
import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys
import time

TRIPLET = "x86_64-pc-linux-gnu"
# the runtime's loud refusal of an entry point it does not implement
REFUSAL = re.compile(r"^lockstep-omp: .* is not supported$")


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


FLAGS = cpu_flags()
# DejaGnu's effective targets as they hold on a host-only x86-64 GNU/Linux machine
# (gcc/testsuite/lib/target-supports.exp and libgomp's own); unknown names are false.
EFFECTIVE = {
    "c": True, "c++": False, "lp64": True, "ilp32": False, "size32plus": True,
    "tls": True, "tls_runtime": True, "tls_native": True, "sync_int_long": True,
    "sync_long_long": True, "sse2_runtime": "sse2" in FLAGS, "avx_runtime": "avx" in FLAGS,
    "avx2_runtime": "avx2" in FLAGS, "vect_simd_clones": True, "lto": True,
    "__float128": True, "large_long_double": True, "shared": True, "fpic": True,
    "fopenmp": True, "pthread": True, "alias": True, "nonpic": False,
    "run_expensive_tests": bool(os.environ.get("GCC_TEST_RUN_EXPENSIVE")),
}


def effective(name):
    if name.startswith(("offload_", "openacc_", "hsa", "nvptx")):
        return False  # no offload device on this host
    return EFFECTIVE.get(name, False)


# ---- a small reader of DejaGnu's Tcl lists ------------------------------------------


def tcl_words(s):
    """Split a Tcl list: bare words, "quoted" (backslash escapes kept raw), {braced}."""
    words, i, n = [], 0, len(s)
    while i < n:
        if s[i].isspace():
            i += 1
            continue
        if s[i] == "{":
            depth, j = 1, i + 1
            while j < n and depth:
                depth += {"{": 1, "}": -1}.get(s[j], 0)
                j += 1
            words.append(("brace", s[i + 1:j - 1]))
            i = j
        elif s[i] == '"':
            j = i + 1
            while j < n and s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            words.append(("quote", s[i + 1:j]))
            i = j + 1
        else:
            j = i
            while j < n and not s[j].isspace():
                j += 1
            words.append(("bare", s[i:j]))
            i = j
    return words


def tcl_subst(s):
    """A quoted Tcl word's value: backslash escapes resolved as Tcl does."""
    out, i = [], 0
    esc = {"n": "\n", "t": "\t", "r": "\r"}
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            out.append(esc.get(s[i + 1], s[i + 1]))
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def word_value(w):
    kind, text = w
    return tcl_subst(text) if kind == "quote" else text


def selector_holds(expr):
    """A target/xfail selector: triplet globs, effective targets, ! && || and braces."""
    toks = re.findall(r"\|\||&&|!|\{|\}|[^\s{}!|&]+", expr)
    pos = 0

    def primary():
        nonlocal pos
        t = toks[pos]
        pos += 1
        if t == "!":
            return not primary()
        if t == "{":
            v = disj()
            pos += 1  # the closing brace
            return v
        return selector_holds_one(t)

    def chain(operand, op, combine):
        """operand (op operand)*, every operand evaluated"""
        nonlocal pos
        v = operand()
        while pos < len(toks) and toks[pos] == op:
            pos += 1
            v = combine(v, operand())
        return v

    def conj():
        return chain(primary, "&&", lambda a, b: a and b)

    def disj():
        return chain(conj, "||", lambda a, b: a or b)

    # a plain list of names (no operators) holds when any one does
    if not any(t in ("||", "&&", "!") for t in toks):
        return any(selector_holds_one(t) for t in toks if t not in "{}")
    return disj()


def selector_holds_one(t):
    if "-" in t and ("*" in t or t.count("-") >= 2):
        return fnmatch.fnmatch(TRIPLET, t)
    return effective(t)


def target_ok(words):
    """The optional trailing selector of a directive: { target X } or { xfail X }."""
    for w in words:
        if w[0] == "brace":
            inner = tcl_words(w[1])
            if inner and inner[0][1] in ("target", "xfail") and len(inner) > 1:
                sel = inner[1][1] if inner[1][0] != "bare" else " ".join(x[1] for x in inner[1:])
                return inner[0][1], selector_holds(sel)
            if inner and inner[0][1] not in ("target", "xfail"):
                return "target", selector_holds(w[1])
    return "target", True


def directives(text):
    """Every { dg-NAME args } in the file, in order."""
    out = []
    for m in re.finditer(r"\{\s*(dg-[a-z-]+)", text):
        depth, j = 1, m.start() + 1
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out.append((m.group(1), tcl_words(text[m.end():j - 1])))
    return out


class Test:
    def __init__(self, path, suite_root):
        self.path = path
        self.name = os.path.relpath(path, suite_root)
        self.run = True          # dg-do run (the default)
        self.skip = None         # why DejaGnu would not run it here
        self.options = ["-O2"]
        self.extra = []
        self.sources = []
        self.env = {}
        self.shouldfail = False
        self.xfail_run = False
        self.outputs = []
        self.timeout_factor = 1.0
        with open(path, errors="replace") as f:
            text = f.read()
        for name, words in directives(text):
            vals = [word_value(w) for w in words]
            if name == "dg-do":
                what = vals[0] if vals else "run"
                kind, ok = target_ok(words[1:])
                if what != "run":
                    self.run = False
                elif kind == "target" and not ok:
                    self.skip = "dg-do run target not met"
            elif name == "dg-options":
                if target_ok(words[1:])[1]:
                    self.options = vals[0].split()
            elif name == "dg-additional-options":
                if target_ok(words[1:])[1]:
                    self.extra += vals[0].split()
            elif name == "dg-add-options":
                pass  # __float128 needs nothing on x86-64
            elif name == "dg-additional-sources":
                self.sources += vals[0].split()
            elif name == "dg-set-target-env-var":
                self.env[vals[0]] = vals[1] if len(vals) > 1 else ""
            elif name == "dg-shouldfail":
                self.shouldfail = target_ok(words[1:])[1]
            elif name == "dg-output":
                if target_ok(words[1:])[1]:
                    self.outputs.append(vals[0])
            elif name == "dg-require-effective-target":
                if not effective(vals[0]):
                    self.skip = "requires " + vals[0]
            elif name == "dg-skip-if":
                sel = words[1][1] if len(words) > 1 else ""
                if selector_holds(sel):
                    self.skip = "dg-skip-if"
            elif name == "dg-xfail-run-if":
                sel = words[1][1] if len(words) > 1 else ""
                self.xfail_run = selector_holds(sel)
            elif name == "dg-timeout":
                self.timeout_factor = max(0.1, float(vals[0]) / 300.0)

    def key(self, flags):
        h = hashlib.sha1()
        for p in [self.path] + [os.path.join(os.path.dirname(self.path), s) for s in self.sources]:
            with open(p, "rb") as f:
                h.update(f.read())
        h.update(" ".join(flags).encode())
        return h.hexdigest()[:16]


def build(test, work, gomp_inc, san):
    flags = ["-fopenmp"] + test.options + test.extra + san
    exe = os.path.join(work, test.name.replace("/", "__") + ".exe")
    stamp = exe + ".key"
    key = test.key(flags)
    if os.path.exists(exe) and os.path.exists(stamp) and open(stamp).read() == key:
        return exe, None
    srcs = [test.path] + [os.path.join(os.path.dirname(test.path), s) for s in test.sources]
    cmd = ["gcc"] + flags + ["-I", gomp_inc, "-I", work, "-w"] + srcs + ["-o", exe, "-lm"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", timeout=600)
    if r.returncode != 0:
        return None, r.stdout[-2000:]
    with open(stamp, "w") as f:
        f.write(key)
    return exe, None


def run_one(test, exe, threads, preload, limit):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["OMP_NUM_THREADS"] = str(threads)
    env.update(test.env)
    if preload:
        env["LD_PRELOAD"] = preload
        env["LOCKSTEP_OMP_STATS"] = "1"  # its line at exit shows lockstep ran the program
    t0 = time.monotonic()
    try:
        r = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                           timeout=limit * test.timeout_factor, cwd=os.path.dirname(exe))
        out, rc = r.stdout.decode(errors="replace"), r.returncode
    except subprocess.TimeoutExpired as e:
        tail = (e.stdout or b"")[-400:].decode(errors="replace")
        return False, "timeout after %.0f s" % (time.monotonic() - t0), tail
    ok = (rc != 0) if test.shouldfail else (rc == 0)
    if preload:
        out = "".join(ln for ln in out.splitlines(True) if not ln.startswith("lockstep-omp: stats:"))
    pos = 0
    for pat in test.outputs:  # DejaGnu joins the dg-output patterns into one expression
        m = re.compile(pat).search(out, pos)
        if not m:
            return False, "output does not match %r" % pat, out[-400:]
        pos = m.end()
    if test.xfail_run:
        ok = not ok
    if ok:
        return True, "", ""
    return False, "exit %d" % rc, out[-600:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", required=True, help="the directory holding gcc-X.Y.Z/")
    ap.add_argument("--lib", required=True, help="liblockstep-omp.so")
    ap.add_argument("--work", default="gcc-suite")
    ap.add_argument("--threads", default="2,4")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", nargs="*", default=[], help="fnmatch patterns of test names")
    ap.add_argument("--exclude", nargs="*", default=[], help="fnmatch patterns to leave out")
    ap.add_argument("--san", default="", help="sanitizer flags for the programs")
    ap.add_argument("--no-gomp", action="store_true",
                    help="sanitizer builds: judge lockstep alone (every run must pass)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--strict", action="store_true",
                    help="a loud refusal (\"lockstep-omp: X is not supported\") fails too")
    ap.add_argument("--table", help="write the results as JSON here")
    a = ap.parse_args()

    roots = [d for d in os.listdir(a.suite) if d.startswith("gcc-")]
    if not roots:
        print("gcc_suite: no gcc-X.Y.Z in %s" % a.suite, file=sys.stderr)
        return 77
    gomp_dir = os.path.join(a.suite, roots[0], "libgomp")
    suite_root = os.path.join(gomp_dir, "testsuite")
    tests = []
    for sub in ("libgomp.c", "libgomp.c-c++-common"):
        for dirpath, _, files in os.walk(os.path.join(suite_root, sub)):
            for fn in sorted(files):
                if fn.endswith(".c"):
                    tests.append(Test(os.path.join(dirpath, fn), suite_root))
    tests.sort(key=lambda t: t.name)
    if a.only:
        tests = [t for t in tests if any(fnmatch.fnmatch(t.name, p) for p in a.only)]
    tests = [t for t in tests if not any(fnmatch.fnmatch(t.name, p) for p in a.exclude)]
    runnable = [t for t in tests if t.run and not t.skip]
    threads = [int(x) for x in a.threads.split(",")]
    os.makedirs(a.work, exist_ok=True)
    if not os.path.isfile(a.lib):
        print("gcc_suite: no runtime at %s" % a.lib, file=sys.stderr)
        return 1
    # libgomp's own build configuration, as its tests read it (affinity-1.c)
    with open(os.path.join(a.work, "config.h"), "w") as f:
        f.write("#define HAVE_PTHREAD_AFFINITY_NP 1\n")
    san = a.san.split()
    lib = os.path.abspath(a.lib)

    gomp_cache_file = os.path.join(a.work, "libgomp-results.json")
    gomp_id = ""
    try:
        out = subprocess.run(["gcc", "-print-file-name=libgomp.so.1"], stdout=subprocess.PIPE,
                             text=True).stdout.strip()
        st = os.stat(os.path.realpath(out))
        gomp_id = "%s:%d:%d:%s" % (os.path.realpath(out), st.st_size, int(st.st_mtime), a.threads)
    except OSError:
        pass
    gomp_cache = {}
    if os.path.exists(gomp_cache_file):
        with open(gomp_cache_file) as f:
            c = json.load(f)
        if c.get("id") == gomp_id:
            gomp_cache = c.get("results", {})

    def one(test):
        exe, err = build(test, a.work, gomp_dir, san)
        if exe is None:
            return test, "build", err, {}
        key = test.key(["-fopenmp"] + test.options + test.extra + san)
        res = {}
        gomp = gomp_cache.get(test.name)
        if not a.no_gomp and (gomp is None or gomp.get("key") != key):
            gomp = {"key": key, "ok": all(run_one(test, exe, n, None, a.timeout)[0] for n in threads)}
        for n in threads:
            res[n] = run_one(test, exe, n, lib, a.timeout)
        return test, "ran", gomp, res

    results = {}
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        for test, what, gomp, res in ex.map(one, runnable):
            results[test.name] = (what, gomp, res)
            if what == "ran" and gomp and not a.no_gomp:
                gomp_cache[test.name] = gomp
    with open(gomp_cache_file, "w") as f:
        json.dump({"id": gomp_id, "results": gomp_cache}, f)

    counts = {"ref": 0, "pass": 0, "fail": 0, "refused": 0, "gomp_fail": 0, "build": 0}
    table = {}
    for name, (what, gomp, res) in sorted(results.items()):
        if what == "build":
            counts["build"] += 1
            table[name] = "build-error"
            print("BUILD %s: %s" % (name, (gomp or "").strip().splitlines()[-1:]))
            continue
        ref = True if a.no_gomp else gomp["ok"]
        ok = all(r[0] for r in res.values())
        if not ref:
            counts["gomp_fail"] += 1
            table[name] = "libgomp-fails" + ("" if not ok else ", lockstep-passes")
            continue
        counts["ref"] += 1
        if ok:
            counts["pass"] += 1
            table[name] = "pass"
        else:
            why = "; ".join("%d threads: %s" % (n, r[1]) for n, r in res.items() if not r[0])
            tail = next(r[2] for r in res.values() if not r[0]).strip().splitlines()[-3:]
            refusal = [ln for ln in tail if REFUSAL.match(ln)]
            if refusal and not a.strict:
                counts["refused"] += 1
                table[name] = "refused: " + refusal[0]
                print("REFUSED %s: %s" % (name, refusal[0]))
                continue
            counts["fail"] += 1
            table[name] = "FAIL: " + why
            print("FAIL %s: %s | %s" % (name, why, " / ".join(tail)))
    if a.table:
        with open(a.table, "w") as f:
            json.dump({"counts": counts, "tests": table, "skipped": {
                t.name: (t.skip or "not a run test") for t in tests if not t.run or t.skip}},
                f, indent=1, sort_keys=True)
    skipped = len(tests) - len(runnable)
    print("gcc libgomp testsuite (%s), threads %s, %.0f s: %d programs %s, "
          "%d of them under lockstep, %d refused by name; %d fail under libgomp too, "
          "%d do not build, %d not run here"
          % (roots[0], a.threads, time.monotonic() - t0, counts["ref"],
             "judged (lockstep alone)" if a.no_gomp else "pass under libgomp", counts["pass"],
             counts["refused"], counts["gomp_fail"], counts["build"], skipped))
    print("%d passed, %d failed, %d skipped" % (counts["pass"], counts["fail"],
                                                skipped + counts["refused"]))
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
