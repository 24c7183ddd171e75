"""A store read back as tables: one row per finished run (`collect`, `collect_to`), and for each
named sweep the count of its runs in every state (`status`) and the runs that need a look
(`problems`). Reads only: the store is never modified. `store.Store`'s methods of the same names
call these; they use only its public methods."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Iterable

from depthscale.atomic import write_atomic, write_text_atomic
from depthscale.divergence import diverged
from depthscale.errors import StoreError

RUN_STATES = ("done", "diverged", "broken", "running", "failed", "pending")


class BrokenRunWarning(UserWarning):
    """A finished run whose files do not hold a readable result (or a corrupted manifest) was skipped."""


def sweep_ids(store, name: str, strict: bool) -> list[str] | None:
    """The manifest's run ids; a corrupted manifest raises if `strict`, else warns and gives None."""
    try:
        ids = store.load_manifest(name)
        for rid in ids:
            store.run_path(rid)  # validates
        return ids
    except StoreError as e:
        if strict:
            raise
        warnings.warn(f"skipping sweep {name!r}: {e}", BrokenRunWarning, stacklevel=4)
        return None


def status(store, sweep: str | None = None):
    """pandas.DataFrame, one row per sweep manifest (or just `sweep`), indexed by sweep name:
    total, then a count per state of RUN_STATES. A corrupted manifest is skipped with a
    warning (or raises StoreError when it is the `sweep` asked for)."""
    import pandas as pd

    names = [sweep] if sweep is not None else store.manifests()
    rows = []
    for name in names:
        ids = sweep_ids(store, name, strict=sweep is not None)
        if ids is None:
            continue
        counts = dict.fromkeys(RUN_STATES, 0)
        for rid in ids:
            counts[store.run_state(rid)] += 1
        rows.append({"sweep": name, "total": len(ids), **counts})
    cols = ["sweep", "total", *RUN_STATES]
    return pd.DataFrame(rows, columns=cols).set_index("sweep")


def problems(store, sweep: str | None = None, states: Iterable[str] = ("diverged", "broken")) -> list[dict]:
    """`run_info` of every run in `states` among the sweep's runs (default: every manifest's)."""
    names = [sweep] if sweep is not None else store.manifests()
    ids: set[str] = set()
    for name in names:
        ids.update(sweep_ids(store, name, strict=sweep is not None) or [])
    want = set(states)
    out = []
    for rid in sorted(ids):
        info = store.run_info(rid)
        if info["state"] in want:
            out.append(info)
    return out


def collect(store, sweep: str | None = None, arrays: str = "json"):
    """One row per finished run: run_id, every config field, its state, then the metrics.

    state is "done" or "diverged" (then diverged_step and diverged_reason say where and why;
    see `Store.divergence`; NaN for a done run). Scalar metrics (numbers, strings, bools; null as
    NaN) become columns. Array- or dict-valued metrics are JSON-encoded strings in a column of the
    same name when `arrays="json"` (parse with json.loads, or DuckDB's json functions) and left out
    when `arrays="drop"`. A metric whose name is a config field, "run_id" or a state column is
    renamed "metric_<name>". `sweep` restricts to that manifest's runs. A broken run (DONE, but its
    files hold no readable result) is skipped with a BrokenRunWarning naming it.
    """
    import pandas as pd

    if arrays not in ("json", "drop"):
        raise StoreError(f"arrays must be 'json' or 'drop', got {arrays!r}")
    ids = sweep_ids(store, sweep, strict=True) if sweep is not None else store.run_ids()
    rows, config_cols, metric_cols = [], {}, {}
    state_cols = ("state", "diverged_step", "diverged_reason")
    for rid in sorted(set(ids)):
        d = store.run_path(rid)
        if not (d / "DONE").exists():
            continue
        docs, why = store.read_finished(rid)
        if docs is None:
            warnings.warn(f"skipping broken run {d}: {why}", BrokenRunWarning, stacklevel=3)
            continue
        doc, metrics = docs
        div = diverged(metrics)
        if div is not None:
            div = store.divergence(rid) or div
        row = {"run_id": rid}
        for key, value in doc["config"].items():
            config_cols[key] = None
            row[key] = value
        nan = float("nan")  # (not None: a column of None would not round-trip through CSV)
        row.update(state="diverged" if div else "done",
                   diverged_step=nan if div is None or div["step"] is None else div["step"],
                   diverged_reason=div["reason"] if div else nan)
        for key, value in metrics.items():
            col = f"metric_{key}" if key in row or key == "run_id" or key in config_cols \
                or key in state_cols else key
            if isinstance(value, (list, dict)):
                if arrays == "drop":
                    continue
                value = json.dumps(value)
            elif value is None:
                value = float("nan")
            metric_cols[col] = None
            row[col] = value
        rows.append(row)
    cols = ["run_id", *config_cols, *state_cols, *(c for c in metric_cols if c not in config_cols)]
    return pd.DataFrame(rows, columns=cols)


def collect_to(store, path: str | os.PathLike, sweep: str | None = None, arrays: str = "json"):
    """collect() written to `path`: .parquet or .csv by suffix (atomically). Returns the frame."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise StoreError(f"cannot write {path}: use a .parquet or .csv suffix")
    df = collect(store, sweep=sweep, arrays=arrays)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".parquet":
            write_atomic(path, lambda fh: df.to_parquet(fh, index=False))
        else:
            write_text_atomic(path, df.to_csv(index=False))
    except OSError as e:
        raise StoreError(f"cannot write {path}: {e.strerror or e}") from None
    except (TypeError, ValueError) as e:  # pyarrow: a column mixing types across runs
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StoreError(f"cannot write {path}: {msg}") from None
    return df


__all__ = ["collect", "collect_to", "status", "problems", "sweep_ids", "BrokenRunWarning", "RUN_STATES"]
