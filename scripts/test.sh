#!/usr/bin/env bash
# Set up and run the test suite (smoke preset; a few minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=test,slurm bash scripts/setup.sh
. .venv/bin/activate
# one pytest worker per core (pytest-xdist; TEST_WORKERS=0 runs them in this process); tests that
# must not run beside each other share an xdist_group (--dist loadgroup). Each worker's torch and BLAS
# on one thread: the workers already fill the cores (two threads each oversubscribed them).
if [ "${TEST_WORKERS:-auto}" != 0 ]; then export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}; fi
python -m pytest -q -n "${TEST_WORKERS:-auto}" --dist loadgroup "$@"
