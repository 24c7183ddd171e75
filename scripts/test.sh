#!/usr/bin/env bash
# Set up and run the test suite (smoke preset; a few minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=test,slurm bash scripts/setup.sh
. .venv/bin/activate
python -m pytest -q "$@"
