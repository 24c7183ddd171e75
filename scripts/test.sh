#!/usr/bin/env bash
# Set up and run the test suite (smoke preset; a few minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=test,slurm bash scripts/setup.sh
. .venv/bin/activate
# one pytest worker per core (pytest-xdist; TEST_WORKERS=0 runs them in this process); tests that
# must not run beside each other share an xdist_group (--dist loadgroup)
python -m pytest -q -n "${TEST_WORKERS:-auto}" --dist loadgroup "$@"
