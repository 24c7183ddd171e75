#!/usr/bin/env bash
# Create .venv (if missing) and install depthscale with the CPU build of torch.
# GPU users: install your own torch into the venv first; this script keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -d .venv ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[${EXTRAS:-test}]"
# The package's bytecode, written once: an editable install has none, and where PYTHONDONTWRITEBYTECODE
# is set no process writes it, so every `depthscale` process compiled the sources again (≈ 0.3 s each;
# issue 50). Python checks each file's stamp, so an edited source is still compiled afresh.
python -m compileall -q src/depthscale >/dev/null
