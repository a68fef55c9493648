#!/usr/bin/env bash
# The main job: build the release preset and run the benchmark report (lockstep
# against OpenMP's two runtimes, in one run) on built-in defaults.
# Usage: scripts/bench.sh [threads|comm|load] [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh bench
cmake --preset release >/dev/null
cmake --build --preset release
scripts/python-env.sh torch                 # the Python package (python_overhead rows) and torch (gloo rows)
# DeepSpeed's shared-memory allreduce, a baseline of the torch rows (held at torch 2.13.0)
build/venv/bin/python -c "import deepspeed" 2>/dev/null ||
  build/venv/bin/python -m pip install -q deepspeed==0.19.8 torch==2.13.0 >>build/venv/pip.log 2>&1 ||
  echo "bench: deepspeed==0.19.8 could not be installed (build/venv/pip.log); no deepspeed-shm rows" >&2
exec build/venv/bin/python tools/lockstep bench "$@"
