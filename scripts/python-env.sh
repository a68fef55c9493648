#!/usr/bin/env bash
# build/venv: a virtual environment (seeing the system's numpy and build tools) with the
# lockstep package installed from this checkout by pip (scikit-build-core over the same
# CMake build). `scripts/python-env.sh torch` also installs torch==2.13.0 (the CPU build
# kept on these machines; any other version pulls gigabytes of CUDA packages).
# PYTHON picks the interpreter (python3), LOCKSTEP_VENV the directory (build/venv).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
venv=${LOCKSTEP_VENV:-build/venv}
[ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv"
vpy=$venv/bin/python
"$vpy" -c "import scikit_build_core, numpy, pytest, gguf, safetensors" 2>/dev/null || \
  "$vpy" -m pip install -q scikit-build-core numpy pytest gguf safetensors
# mypy, for the tests that type-check the package and a user's code against it (they skip without it)
"$vpy" -c "import mypy" 2>/dev/null || "$vpy" -m pip install -q mypy >/dev/null 2>&1 || \
  echo "python-env: mypy could not be installed; tests/python/test_typing.py's mypy tests will skip" >&2
log=$venv/pip.log
if ! "$vpy" -m pip install -q --no-build-isolation . >"$log" 2>&1; then
  cat "$log" >&2
  echo "python-env: pip install . failed (log above)" >&2
  exit 1
fi
if [ "${1:-}" = torch ] && ! "$vpy" -c "import torch" 2>/dev/null; then
  "$vpy" -m pip install -q torch==2.13.0 >>"$log" 2>&1 || \
    echo "python-env: torch==2.13.0 could not be installed (see $log); the torch tests will skip" >&2
fi
