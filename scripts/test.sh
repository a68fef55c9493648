#!/usr/bin/env bash
# Every test: the release build, the perturbation build (debug, random yields at
# protocol points), ThreadSanitizer, ASan+UBSan, and a clang build (warnings are errors
# in all five; clang warns where gcc does not, -Wcast-align on x86 among them);
# the readers' fuzzers for a bounded time; the Python package's tests.
# The tsan preset leaves out the runs with capped kernels (comm_*_avx2, comm_*_base;
# CMakePresets.json): they differ from comm_collectives_4 and comm_reduce_api only in
# the reduction kernels, single-threaded code within one process, and ThreadSanitizer
# sees nothing between processes; the other four builds run them (a minute less).
# Likewise it runs the random sequences at 4 ranks and the killing and cancelling
# ones at 3 (comm_random_4, comm_random_kill_3, comm_random_cancel_3: pool threads,
# the killer thread, the cancel callback), and those
# through lockstep_mpi in one layout (comm_random_mpi_5ranks_2pernode), not in
# every one (a minute less).
# Usage: scripts/test.sh [preset ...]    (default: release debug tsan asan clang)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release debug tsan asan clang)
failed=()
for p in "${presets[@]}"; do
  echo "=== $p ===" >&2
  cmake --preset "$p" >/dev/null
  cmake --build --preset "$p"
  # sanitizer builds run several times slower: stretch the in-test watchdogs
  case "$p" in tsan) slow=8 ;; asan) slow=4 ;; *) slow=1 ;; esac
  if ! LOCKSTEP_TEST_SLOWDOWN=$slow ctest --preset "$p" -j2; then
    failed+=("$p")
  fi
done
# The readers' fuzzers, a bounded minute each (LOCKSTEP_FUZZ_SECONDS to change).
echo "=== fuzz ===" >&2
scripts/fuzz.sh "${LOCKSTEP_FUZZ_SECONDS:-60}" || failed+=(fuzz)

# The Python package, built by pip through scikit-build-core, and its tests
# (skipped with: LOCKSTEP_SKIP_PYTHON=1).
if [ -z "${LOCKSTEP_SKIP_PYTHON:-}" ]; then
  echo "=== python ===" >&2
  if ! scripts/python-env.sh torch || ! (cd tests/python && ../../build/venv/bin/python -m pytest -q -p no:cacheprovider); then
    failed+=(python)
  fi
  # Again with the oldest CPython pyproject.toml admits, without torch, when the machine
  # has one (pyenv's, or on PATH): the package once installed on 3.9 and then failed
  # at import (Py_NewRef). About a minute.
  oldest=$(sed -n 's/^requires-python = ">=\([0-9.]*\)"$/\1/p' pyproject.toml)
  old_py=$(PYENV_VERSION=$oldest pyenv which "python$oldest" 2>/dev/null || command -v "python$oldest" || true)
  if [ -n "$oldest" ] && [ -n "$old_py" ] && "$old_py" -c "" 2>/dev/null; then
    echo "=== python $oldest ===" >&2
    if ! PYTHON=$old_py LOCKSTEP_VENV=build/venv$oldest scripts/python-env.sh ||
       ! (cd tests/python && "../../build/venv$oldest/bin/python" -m pytest -q -p no:cacheprovider); then
      failed+=("python$oldest")
    fi
  elif [ -z "$oldest" ]; then
    echo "python: no requires-python = \">=X.Y\" line in pyproject.toml: the oldest supported Python is not tested" >&2
  else
    echo "python: no Python $oldest on this machine: the oldest supported Python is not tested" >&2
    oldest=""
  fi
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED in: ${failed[*]}" >&2
  exit 1
fi
echo "all passed: ${presets[*]} fuzz${LOCKSTEP_SKIP_PYTHON:+ (python skipped)}${LOCKSTEP_SKIP_PYTHON:- python}${oldest:+ python$oldest}"
