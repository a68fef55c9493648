#!/usr/bin/env bash
# Install what the build, the tests and the benchmarks need, when it is missing.
#   scripts/deps.sh test   — compilers (clang for libFuzzer), CMake, Ninja, OpenMPI
#                            (lockstep_mpi and its tests)
#   scripts/deps.sh bench  — plus clang + LLVM libomp (OpenMP baseline) and matplotlib
#                            (OpenMPI is also the collectives' baseline)
set -euo pipefail
what=${1:-test}

need_apt=()
command -v gcc >/dev/null || need_apt+=(gcc)
command -v g++ >/dev/null || need_apt+=(g++)
command -v clang >/dev/null || need_apt+=(clang)   # libFuzzer (tests) and libomp (bench)
if [ "$what" = bench ]; then
  # libomp: clang's OpenMP runtime; look for its header where Debian puts it
  if ! ls /usr/lib/llvm-*/lib/libomp.so >/dev/null 2>&1 && ! ls /usr/lib/x86_64-linux-gnu/libomp.so* >/dev/null 2>&1; then
    need_apt+=(libomp-dev)
  fi
fi
# OpenMPI: the collectives' baseline (bench) and lockstep_mpi, built and tested with it
command -v mpicc >/dev/null || need_apt+=(openmpi-bin libopenmpi-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "deps: installing ${need_apt[*]} from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

py=${PYTHON:-python3}
pip_need=()
command -v cmake >/dev/null || pip_need+=(cmake)
command -v ninja >/dev/null || pip_need+=(ninja)
if [ "$what" = bench ]; then
  "$py" -c "import matplotlib" 2>/dev/null || pip_need+=(matplotlib)
fi
if [ ${#pip_need[@]} -gt 0 ]; then
  echo "deps: installing ${pip_need[*]} from PyPI" >&2
  "$py" -m pip install -q "${pip_need[@]}"
fi
