#!/usr/bin/env bash
# Runs the OpenMP corpus against lockstep's runtime. Usage: run_corpus.sh MODE PROG LIB
#   compare      PROG's output under libgomp and under LIB (LD_PRELOAD) is the same at
#                1, 2, 3, 4, 8 and 16 threads, and LOCKSTEP_OMP_STATS shows LIB ran it
#                (LOCKSTEP_CORPUS_NO_GOMP=1, for sanitizer builds: LIB's 1-thread output
#                is the reference instead)
#   fork         PROG (corpus/fork.c) under LIB alone: libgomp hangs in the child
#   unsupported  PROG (corpus/unsupported.c): each entry point exits with the message
#   env          malformed OMP_* values: a one-line warning naming the variable, and the
#                same output as with the defaults
#   budget       PROG (corpus/budget.c) under LIB alone: a lockstep pool and OpenMP
#                regions count in one budget of running threads
#   bind         PROG (corpus/bind.c) under OMP_PROC_BIND=true/close/spread without
#                OMP_PLACES, as many threads as CPUs: the team covers every CPU, and
#                the places and CPUs are libgomp's
#   arrange      PROG (corpus/arrange.c) under LIB alone: the workers of a team larger
#                than the CPUs each kept on one CPU after the master's, arranged again
#                when it moves; with LOCKSTEP_NO_SPREAD=1 left on every CPU
#   threads      threads that cannot be created: a smaller team and a warning
#   abi          LIB exports every function libgomp.so.1 exports, with its version, and
#                those libgomp 13 and 14 add
# Exit 0 pass, 1 fail, 77 skip.
set -uo pipefail
mode=$1 prog=$2 lib=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the watchdog of last resort; each program also arms its own (corpus/check.h)
limit=$((120 * ${LOCKSTEP_TEST_SLOWDOWN:-1}))
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

under_lockstep() { # N ARGS... -> stdout in $tmp/out, stderr in $tmp/err
  local n=$1; shift
  OMP_NUM_THREADS=$n LOCKSTEP_OMP_STATS=1 timeout "$limit" env LD_PRELOAD="$lib" "$@" \
    >"$tmp/out" 2>"$tmp/err"
}

case "$mode" in
compare)
  if [ -z "${LOCKSTEP_CORPUS_NO_GOMP:-}" ]; then
    ref=$(OMP_NUM_THREADS=1 timeout "$limit" "$prog") || fail "libgomp, 1 thread: exit $?"
  else
    under_lockstep 1 "$prog" || fail "lockstep, 1 thread: exit $?: $(cat "$tmp/err")"
    ref=$(cat "$tmp/out")
  fi
  case "$ref" in ok\ *) ;; *) fail "reference output '$ref'" ;; esac
  for n in 1 2 3 4 8 16; do
    if [ -z "${LOCKSTEP_CORPUS_NO_GOMP:-}" ]; then
      got=$(OMP_NUM_THREADS=$n timeout "$limit" "$prog") || fail "libgomp, $n threads: exit $?"
      [ "$got" = "$ref" ] || fail "libgomp, $n threads: '$got', 1 thread: '$ref'"
    fi
    under_lockstep "$n" "$prog" || fail "lockstep, $n threads: exit $?: $(cat "$tmp/err")"
    [ "$(cat "$tmp/out")" = "$ref" ] || fail "lockstep, $n threads: '$(cat "$tmp/out")', expected '$ref'"
    grep -Eq '^lockstep-omp: stats: regions=[1-9]' "$tmp/err" ||
      fail "lockstep, $n threads: no regions in the stats: $(cat "$tmp/err")"
    if grep -v '^lockstep-omp: stats:' "$tmp/err" | grep -q .; then
      fail "lockstep, $n threads: unexpected output on stderr: $(cat "$tmp/err")"
    fi
  done
  echo "ok: $(basename "$prog") at 1 2 3 4 8 16 threads: $ref" ;;
fork)
  for n in 1 2 4 16; do
    under_lockstep "$n" "$prog" || fail "$n threads: exit $?: $(cat "$tmp/err")"
  done
  echo "ok: fork at 1 2 4 16 threads" ;;
unsupported)
  for what in openacc:acc_get_num_devices fortran:omp_get_thread_num_; do
    c=${what%%:*} entry=${what#*:}
    under_lockstep 2 "$prog" "$c"
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "$c: exit $rc, expected a failure"
    grep -qx "lockstep-omp: $entry is not supported" "$tmp/err" ||
      fail "$c: no message for $entry: $(cat "$tmp/err")"
    grep -q '^ran' "$tmp/out" && fail "$c: the construct ran"
  done
  echo "ok: 2 unsupported entry points" ;;
env)
  under_lockstep 3 "$prog" || fail "defaults: exit $?"
  ref=$(cat "$tmp/out")
  for setting in OMP_NUM_THREADS=abc OMP_NUM_THREADS=4,x OMP_NUM_THREADS=-2 OMP_SCHEDULE=sometimes \
                 OMP_SCHEDULE=dynamic,0 OMP_PROC_BIND=maybe OMP_STACKSIZE=12Q OMP_STACKSIZE=-1 \
                 GOMP_STACKSIZE=lots OMP_DYNAMIC=perhaps OMP_WAIT_POLICY=eager OMP_MAX_ACTIVE_LEVELS=x \
                 OMP_THREAD_LIMIT=0 GOMP_SPINCOUNT=some OMP_PLACES=here LOCKSTEP_WAIT_POLICY=fast \
                 'OMP_PLACES={0:' OMP_PLACES='threads(0)' OMP_ALLOCATOR=omp_bogus_alloc \
                 OMP_ALLOCATOR=omp_default_mem_space:alignment=3 OMP_NUM_TEAMS=x \
                 OMP_TEAMS_THREAD_LIMIT=-1 OMP_AFFINITY_FORMAT=%Q OMP_CANCELLATION=sometimes; do
    var=${setting%%=*}
    [ "$var" = OMP_NUM_THREADS ] || export OMP_NUM_THREADS=3
    timeout "$limit" env "$setting" LD_PRELOAD="$lib" "$prog" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] || fail "$setting: exit $rc: $(cat "$tmp/err")"
    [ "$(grep -c "^lockstep-omp: warning: $var=" "$tmp/err")" = 1 ] ||
      fail "$setting: expected one warning naming $var: $(cat "$tmp/err")"
    [ "$(cat "$tmp/out")" = "$ref" ] || [ "$var" = OMP_NUM_THREADS ] ||
      fail "$setting: output '$(cat "$tmp/out")', expected '$ref'"
    grep -q '^ok ' "$tmp/out" || fail "$setting: output '$(cat "$tmp/out")'"
  done
  echo "ok: 24 malformed settings" ;;
budget)
  under_lockstep 4 "$prog"
  rc=$?
  [ $rc -eq 77 ] && { echo "one CPU: nothing to share" >&2; exit 77; }
  [ $rc -eq 0 ] || fail "exit $rc: $(cat "$tmp/err")"
  grep -q '^ok ' "$tmp/out" || fail "output '$(cat "$tmp/out")'"
  echo "ok: one budget: teams of $(cut -d' ' -f2- "$tmp/out")" ;;
bind)
  cpus=$(nproc)
  for policy in true close spread; do
    OMP_PROC_BIND=$policy under_lockstep "$cpus" "$prog" || fail "$policy: exit $?: $(cat "$tmp/err")"
    got=$(cat "$tmp/out")
    case "$got" in "ok places="[1-9]*" cpus=$cpus") ;; *) fail "$policy: '$got', expected places and cpus=$cpus" ;; esac
    if [ -z "${LOCKSTEP_CORPUS_NO_GOMP:-}" ]; then
      ref=$(OMP_PROC_BIND=$policy OMP_NUM_THREADS=$cpus timeout "$limit" "$prog") ||
        fail "libgomp, $policy: exit $?"
      [ "$got" = "$ref" ] || fail "$policy: '$got', libgomp '$ref'"
    fi
  done
  echo "ok: bound teams cover the $cpus CPUs" ;;
arrange)
  for run in kept free; do
    if [ $run = kept ]; then under_lockstep 1 "$prog"; else LOCKSTEP_NO_SPREAD=1 under_lockstep 1 "$prog" free; fi
    rc=$?
    [ $rc -eq 77 ] && { echo "one CPU: nothing to arrange" >&2; exit 77; }
    [ $rc -eq 0 ] || fail "$run: exit $rc: $(cat "$tmp/err")"
    grep -q '^ok cpus=' "$tmp/out" || fail "$run: output '$(cat "$tmp/out")'"
  done
  echo "ok: workers arranged after the master's CPU, $(cut -d' ' -f2 "$tmp/out")" ;;
threads)
  # a 256 MiB stack per thread in a 1 GiB address space: some workers cannot start
  (ulimit -v 1048576 && OMP_STACKSIZE=256M under_lockstep 16 "$prog") ||
    fail "exit $?: $(cat "$tmp/err")"
  grep -q '^ok ' "$tmp/out" || fail "output '$(cat "$tmp/out")'"
  grep -q '^lockstep-omp: warning: could not start thread' "$tmp/err" ||
    { echo "no thread failed to start here (address space limit not enforced?)" >&2; exit 77; }
  echo "ok: a smaller team" ;;
abi)
  gomp=$("${CC:-gcc}" -print-file-name=libgomp.so.1)
  [ -f "$gomp" ] || { echo "no libgomp.so.1 to compare with" >&2; exit 77; }
  command -v objdump >/dev/null || { echo "no objdump" >&2; exit 77; }
  funcs() { objdump -T "$1" | awk '$4 == ".text" && $2 == "g" {print $(NF-1), $NF}' | sort -u; }
  funcs "$gomp" >"$tmp/gomp"
  funcs "$lib" >"$tmp/ours"
  missing=$(comm -23 "$tmp/gomp" "$tmp/ours")
  [ -z "$missing" ] || fail "entry points libgomp exports and $lib does not: $missing"
  # what libgomp 13 and 14 add, which programs built by those gccs need
  for sv in "GOMP_5.1.1 GOMP_taskwait_depend_nowait" "GOMP_5.1.2 GOMP_add_alloc" \
            "GOMP_5.1.2 GOMP_is_alloc" "GOMP_5.1.2 GOMP_target_map_indirect_ptr" \
            "OMP_5.1.1 omp_get_mapped_ptr" "OMP_5.1.1 omp_target_is_accessible" \
            "OMP_5.1.1 omp_target_memcpy_async" "OMP_5.1.1 omp_target_memcpy_rect_async" \
            "OMP_5.2 omp_in_explicit_task" "OMP_5.2 omp_in_explicit_task_" \
            "GOMP_PLUGIN_1.4 GOMP_PLUGIN_target_rev"; do
    grep -qx "$sv" "$tmp/ours" || fail "$lib does not export $sv (the ABI of gcc 13 and 14)"
  done
  echo "ok: all $(wc -l <"$tmp/gomp") libgomp functions exported with their versions, and gcc 13/14's" ;;
*) fail "unknown mode $mode" ;;
esac
