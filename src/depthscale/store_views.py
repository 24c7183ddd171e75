"""What a store says about its runs as a whole, as methods of the Store (`store.Store` mixes them
in): each run's state and why (done, diverged, broken, running, failed, pending: ``run_state``,
``run_info``), the sweeps' manifests (sweeps/<name>.json: the run ids a named sweep wants), and the
store as tables (collect.py: status, problems, collect)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Iterable

from depthscale import collect, divergence
from depthscale.atomic import read_regular, remove_unless_file, write_json_atomic
from depthscale.errors import StoreError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a run id or a sweep name


class StoreViews:
    """The Store's methods over run states, sweep manifests and tables (they use the Store's root,
    sweeps_root, run_path, is_done, broken_reason, lease_info, _check_finished, _read_json and
    _check_writable)."""

    # --- a run's state ---
    def done_info(self, rid: str) -> dict:
        """What DONE records of a finished run (time: POSIX seconds, host, pid); {} if unreadable."""
        try:
            doc = self._read_json(rid, "DONE")
        except StoreError:
            return {}
        return doc if isinstance(doc, dict) else {}

    def divergence(self, rid: str) -> dict | None:
        """For a done run whose training diverged: {"step", "reason"}; None otherwise."""
        if not self.is_done(rid):
            return None

        def curves():
            try:
                return self._read_json(rid, "curves.json")
            except StoreError:
                return {}

        return divergence.divergence(self._read_json(rid, "metrics.json"), curves)

    def run_info(self, rid: str) -> dict:
        """{"run_id", "state", "step", "reason"}: step and reason say where and why a run
        diverged, why it is broken, or why it failed (None otherwise)."""
        state = self.run_state(rid)
        info = {"run_id": rid, "state": state, "step": None, "reason": None}
        if state == "diverged":
            info.update(self.divergence(rid) or {})
        elif state == "broken":
            info["reason"] = self.broken_reason(rid)
        elif state == "failed":
            why = self.failure(rid)
            info["reason"] = why.splitlines()[0] if why else None
        return info

    def is_failed(self, rid: str) -> bool:
        """True if the last attempt failed and no attempt has finished."""
        d = self.run_path(rid)
        return (d / "FAILED").exists() and not self.is_done(rid)

    def failure(self, rid: str) -> str | None:
        """The reason recorded by `fail`, or None."""
        try:
            return read_regular(self.run_path(rid) / "FAILED").decode(errors="replace").strip()
        except OSError:
            return None

    def run_state(self, rid: str) -> str:
        """One of RUN_STATES: 'done', 'diverged' (finished, training diverged), 'broken' (DONE but
        no result that verifies, a run directory that is not a real directory of the store, or an
        unfinished run with a directory or a FIFO at the name of a file it writes), 'running'
        (live lease), 'failed', 'pending'."""
        d = self.run_path(rid)
        if self.run_dir_problem(rid) is not None:  # a link, a file or a FIFO at the run's name
            return "broken"
        if (d / "DONE").exists():
            if self._check_finished(rid) is not None:
                return "broken"
            return "diverged" if self.divergence(rid) is not None else "done"
        if self.lease_info(rid) is not None:
            return "running"
        if os.path.lexists(d / "DONE") or self.broken_reason(rid) is not None:
            return "broken"
        if (d / "FAILED").exists():
            return "failed"
        return "pending"

    # --- sweeps ---
    def _manifest_path(self, name: str) -> Path:
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise StoreError(f"bad sweep name {name!r}: use letters, digits, '.', '_' and '-'")
        return self.sweeps_root / f"{name}.json"

    def add_to_manifest(self, name: str, run_ids: Iterable[str]) -> Path:
        """Add runs to the manifest `name` (created if missing), keeping the ones it lists."""
        self._check_writable()
        try:
            have = self.load_manifest(name)
        except StoreError:  # missing (or unreadable: started again)
            have = []
        return self.write_manifest(name, [*have, *run_ids])

    def write_manifest(self, name: str, run_ids: Iterable[str]) -> Path:
        """Record which runs the sweep `name` wants (replacing an earlier manifest of that name)."""
        self._check_writable()
        path = self._manifest_path(name)
        ids = sorted(set(run_ids))
        for rid in ids:
            self.run_path(rid)  # validates
        try:
            if json.loads(read_regular(path))["run_ids"] == ids:
                return path
        except (OSError, ValueError, KeyError, TypeError):
            pass
        remove_unless_file(path)  # a directory or a FIFO at the manifest's name
        write_json_atomic(path, {"name": name, "run_ids": ids, "time": time.time()}, strict=True)
        return path

    def load_manifest(self, name: str) -> list[str]:
        path = self._manifest_path(name)
        try:
            ids = list(json.loads(read_regular(path))["run_ids"])  # never blocks on a FIFO
            if not all(isinstance(rid, str) for rid in ids):  # a hand edit: an object where an id belongs
                raise TypeError("a run id that is not a string")
            return ids
        except FileNotFoundError:
            raise StoreError(f"no sweep {name!r} in store {self.root}") from None
        except (OSError, ValueError, KeyError, TypeError):
            raise StoreError(f"corrupted sweep manifest {path}") from None

    def manifests(self) -> list[str]:
        return sorted(p.stem for p in self.sweeps_root.glob("*.json") if NAME_RE.match(p.stem))

    # --- the store as tables (collect.py) ---
    def status(self, sweep: str | None = None):
        """Runs per state of each sweep (collect.status)."""
        return collect.status(self, sweep)

    def problems(self, sweep: str | None = None, states: Iterable[str] = ("diverged", "broken")) -> list[dict]:
        """The diverged and broken runs of the sweeps, where and why (collect.problems)."""
        return collect.problems(self, sweep, states)

    def collect(self, sweep: str | None = None, arrays: str = "list"):
        """One row per finished run (collect.collect)."""
        return collect.collect(self, sweep, arrays)

    def collect_to(self, path: str | os.PathLike, sweep: str | None = None, arrays: str = "auto"):
        """collect() written to a .parquet or .csv file (collect.collect_to)."""
        return collect.collect_to(self, path, sweep, arrays)

    def collect_curves(self, sweep: str | None = None):
        """Every run's curves as one long table: run_id, step, metric, value (collect.collect_curves)."""
        return collect.collect_curves(self, sweep)

    def collect_curves_to(self, path: str | os.PathLike, sweep: str | None = None):
        """collect_curves() written to a .parquet or .csv file (collect.collect_curves_to)."""
        return collect.collect_curves_to(self, path, sweep)
