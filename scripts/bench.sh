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
exec build/venv/bin/python tools/lockstep bench "$@"
