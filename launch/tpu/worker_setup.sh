#!/usr/bin/env bash
# Run on every TPU VM worker (tpu_vm.sh does it over `ssh --worker=all`): a Python >= 3.11 virtual
# environment with omnidistill, JAX for TPU and gcsfs (gs:// data and configs). The TPU runtime images
# run Ubuntu 22.04, whose system Python (3.10) is older than omnidistill needs, so the interpreter
# comes from uv, which downloads a standalone CPython build.
#
#   bash launch/tpu/worker_setup.sh SOURCE_DIR VENV_DIR PYTHON_VERSION
set -euo pipefail
SRC=${1:?source directory} VENV=${2:?virtual environment directory} PY=${3:-3.12}
export PATH="$HOME/.local/bin:$PATH"
if ! command -v uv >/dev/null 2>&1; then
  curl -LsSf https://astral.sh/uv/install.sh | sh
fi
uv venv --allow-existing --python "$PY" "$VENV"
uv pip install --python "$VENV/bin/python" -e "${SRC}[gcs]" 'jax[tpu]'
"$VENV/bin/python" -c 'import sys, jax; assert sys.version_info >= (3, 11), sys.version; print("worker ready:", sys.version.split()[0], "jax", jax.__version__)'
