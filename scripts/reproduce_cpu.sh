#!/usr/bin/env bash
# Set up, then reproduce every figure and table at the cpu preset and write the report.
# Resumable: run it again after an interruption and it continues where it stopped.
set -euo pipefail
# spinning OpenMP threads stall small kernels when the two cores are shared (docs/performance.md)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
STORE=${STORE:-runs/cpu}
OUT=${OUT:-report/cpu}
# trains what is missing, then writes the report (figures, tables, claims, the answer) from the store
depthscale reproduce all --preset cpu --store "$STORE" --out "$OUT" --executor process
echo "open $OUT/report.html (or read $OUT/report.md)"
