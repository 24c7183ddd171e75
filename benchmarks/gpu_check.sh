#!/usr/bin/env bash
# The GPU check of issue 29 (parity CPU vs CUDA, bench at the cpu and paper presets, one paper fig6
# pack of 20,000 steps), written as JSON to <out>/gpu_check.json; <= 6 minutes on one H200.
#   bash benchmarks/gpu_check.sh "$OUT"          # on the CUDA machine
#   bash benchmarks/gpu_check.sh --dry /tmp/gc   # on any CPU, small: proves the script (a CI test runs it)
# Runs the package from src/ when it is not installed (the device machine has torch but no install).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! python -c "import depthscale" 2>/dev/null; then
  export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}"
fi
exec timeout 360 python "$here/benchmarks/gpu_check.py" "$@"
