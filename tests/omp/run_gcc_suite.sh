#!/usr/bin/env bash
# GCC's libgomp testsuite against liblockstep-omp (tests/omp/gcc_suite.py), the suite
# fetched for the installed gcc by scripts/gcc-testsuite.sh (cached between runs).
# Usage: run_gcc_suite.sh LIB WORKDIR [gcc_suite.py options]
# Exit 0 pass, 1 fail, 77 skip (no suite to be had, outside CI).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=$1 work=$2
shift 2
suite=$("$here/../../scripts/gcc-testsuite.sh")
rc=$?
if [ $rc -ne 0 ] || [ -z "$suite" ]; then
  echo "GCC's libgomp testsuite could not be had (exit $rc)" >&2
  [ -n "${CI:-}" ] && exit 1 # CI must measure conformance, never skip it
  exit 77
fi
exec python3 "$here/gcc_suite.py" --suite "$suite" --lib "$lib" --work "$work" "$@"
