"""What training needs from storage, declared: `RunStorage`. The trainer, the sweep worker
(training.run_pack) and the live log call these methods and no others, so anything that has them
can hold a training's runs (store.Store does; a test trains through an in-memory one). The
checkpoint's bytes are opaque here: their format is checkpoint.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from depthscale.config.run import RunConfig


@runtime_checkable
class RunStorage(Protocol):
    """The runs of a training, by run id."""

    def write_config(self, cfg: RunConfig, device: str | None = None, extra: dict | None = None) -> None:
        """Record the run's config (and the entries of `extra`); nothing once the run is done."""

    def stored_config(self, rid: str) -> dict | None:
        """The run's config record as written (None: none readable), for what a resume keeps of it."""

    def is_done(self, rid: str) -> bool:
        """True once the run's result is written (it is never trained again)."""

    def load_metrics(self, rid: str) -> dict:
        """A done run's metrics."""

    def save_checkpoint(self, rid: str, data: bytes) -> None:
        """Keep `data` as the run's checkpoint, replacing the last one whole (never half of it)."""

    def load_checkpoint(self, rid: str) -> bytes | None:
        """The run's last checkpoint as saved, None where there is none that can be read."""

    def start_curves(self, rid: str, curves: dict) -> None:
        """(Re)start the run's live curve rows with those of `curves` (lists of one length)."""

    def append_curves(self, rid: str, rows: list[dict]) -> None:
        """Add curve rows to the run's live curves."""

    def finish(self, rid: str, metrics: dict, curves: dict, params: dict | None = None) -> bool:
        """Write the run's result (metrics, curves, final parameters); False where it is not kept."""

    def fail(self, rid: str, reason: str) -> None:
        """Record that an attempt at the run raised."""

    # optional, looked up by the trainer where it exists (a storage without it is not less of one):
    # cache_per_context(rid, arrays) -> bool keeps a finished run's per-context arrays
    # (data.measurements.per_context_arrays of its final measurement) for the analysis to read

    def log_dir(self, rid: str, name: str) -> Path:
        """A directory of the run for a logger's files (`name`: e.g. tensorboard)."""


__all__ = ["RunStorage"]
