"""Bad-input rows of issue 28's "failures that say so" (tests/test_cli.py's table runs them).

`--executor slurm` where there is no SLURM (no sbatch or srun on PATH) is refused in one line
before anything is written; submitit would otherwise run the jobs as detached local processes.
The row needs submitit importable (without it the refusal is "needs submitit", a row of its own)
and no SLURM on this machine; tests/test_failures_exit.py checks both cases with stand-ins."""

from __future__ import annotations

import importlib.util
import shutil

_NO_SLURM = any(shutil.which(tool) is None for tool in ("sbatch", "srun"))
_SUBMITIT = importlib.util.find_spec("submitit") is not None

CASES = [
    ("slurm without a SLURM cluster", ("sweep", "--grid", "{grid:failures_one.json}", "--preset", "smoke",
                                       "--store", "{missing}", "--executor", "slurm"), "no SLURM cluster here"),
] if _NO_SLURM and _SUBMITIT else []

GRIDS = {"failures_one.json": '{"L": [1]}'}
