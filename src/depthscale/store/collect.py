"""A store read back as tables: one row per finished run (`collect`, `collect_to`), every run's
training curves as one long table (`collect_curves`, `collect_curves_to`), and for each
named sweep the count of its runs in every state (`status`) and the runs that need a look
(`problems`). Reads only: the store is never modified. Each takes the store (store.Store) and
uses only its public methods and the manifests (manifests.py)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Iterable

from depthscale.base.atomic import remove_stale_temp_files, write_atomic, write_text_atomic
from depthscale.base.errors import StoreError
from depthscale.store import manifests
from depthscale.store.divergence import diverged
from depthscale.store.store_verify import kind_not_loaded

RUN_STATES = ("done", "diverged", "broken", "unloaded", "running", "failed", "pending")


class BrokenRunWarning(UserWarning):
    """A finished run whose files do not hold a readable result (or a corrupted manifest) was skipped."""


class UnloadedKindWarning(UserWarning):
    """A finished run of a model kind not loaded now (a plug-in's: DEPTHSCALE_KINDS) was skipped."""


def sweep_ids(store, name: str, strict: bool) -> list[str] | None:
    """The manifest's run ids; a corrupted manifest raises if `strict`, else warns and gives None."""
    try:
        ids = manifests.load(store, name)
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

    names = [sweep] if sweep is not None else manifests.names(store)
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


def problems(store, sweep: str | None = None, states: Iterable[str] = ("diverged", "broken", "unloaded")) -> list[dict]:
    """`run_info` of every run in `states` among the sweep's runs (default: every manifest's)."""
    names = [sweep] if sweep is not None else manifests.names(store)
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


ARRAYS = ("list", "json", "drop")  # how collect writes list-valued metrics
CURVE_COLUMNS = ("run_id", "step", "metric", "value")  # the long table of collect_curves


def _sweeps_of(store) -> dict[str, list[str]]:
    """run id -> the sweeps (manifests) that list it, in name order; unreadable manifests are
    left out (status and problems report them)."""
    out: dict[str, list[str]] = {}
    for name in manifests.names(store):
        try:
            ids = manifests.load(store, name)
        except StoreError:
            continue
        for rid in ids:
            out.setdefault(rid, []).append(name)
    return out


def _utc(t) -> str | float:
    """A POSIX time as ISO 8601 UTC (seconds), NaN if unknown."""
    import datetime as dt

    if not isinstance(t, (int, float)) or isinstance(t, bool):
        return float("nan")
    try:  # a hand-edited DONE: NaN, inf or 1e300 is no time
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):
        return float("nan")


INT64 = (-(2 ** 63), 2 ** 63 - 1)


def _kind(value) -> str:
    """A metric value's column kind: number, text, list or dict (null counts as a number: NaN)."""
    if value is None or isinstance(value, (bool, int, float)):
        return "number"
    return {str: "text", list: "list", dict: "dict"}.get(type(value), type(value).__name__)


def bad_metric(metrics: dict) -> str | None:
    """Why a run's metrics cannot be a row of the table (an integer beyond 64 bits, which no Parquet
    column holds), or None."""
    for key, value in metrics.items():
        if isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
            return f"metric {key!r} = {value} does not fit a 64-bit integer"
    return None


def _mixed_kinds(rows: list[dict]) -> dict[str, str]:
    """{run id: why} for the runs whose value of a metric is of another kind than most runs' (a
    number in one run, text in another: no table column holds both), so that collect skips and
    names them instead of failing the whole table."""
    from collections import Counter

    out = {}
    for key in dict.fromkeys(k for r in rows for k in r if k != "run_id"):
        kinds = Counter(_kind(r[key]) for r in rows if key in r)
        if len(kinds) < 2:
            continue
        major = kinds.most_common(1)[0][0]
        for r in rows:
            if key in r and _kind(r[key]) != major and r["run_id"] not in out:
                out[r["run_id"]] = f"metric {key!r} is {_kind(r[key])} where the other runs' is {major}"
    return out


def _without_mixed(rows: list[tuple[dict, dict]], stacklevel: int) -> list[dict]:
    """The table rows of (row, raw metrics) pairs, less the runs `_mixed_kinds` names (each warned)."""
    bad = _mixed_kinds([{"run_id": row["run_id"], **metrics} for row, metrics in rows])
    for rid, why in sorted(bad.items()):
        warnings.warn(f"skipping run {rid}: {why}", BrokenRunWarning, stacklevel=stacklevel + 1)
    return [row for row, _ in rows if row["run_id"] not in bad]


def collect(store, sweep: str | None = None, arrays: str = "list"):
    """One row per finished run: run_id, every config field, its state, the sweeps that list it,
    when it finished, then the metrics (every column is described in docs/columns.md).

    state is "done" or "diverged" (then diverged_step and diverged_reason say where and why;
    see `Store.divergence`; NaN for a done run). sweeps is the list of manifests that name the run
    ("train" for runs of `depthscale train`), finished_at the UTC time its DONE was written (ISO
    8601). Scalar metrics (numbers, strings, bools; null as NaN) become columns. List-valued
    metrics (mode_R, selection_percentiles, ...) are Python lists when `arrays="list"` (native
    list columns in Parquet), JSON strings when `arrays="json"` (what a CSV holds; parse with
    json.loads) and left out when `arrays="drop"`; dict-valued ones are JSON strings unless dropped.
    A metric whose name is a config field, "run_id" or a state column is renamed "metric_<name>".
    `sweep` restricts to that manifest's runs. A broken run (DONE, but its files hold no readable
    result) is skipped with a BrokenRunWarning naming it, a run of a kind not loaded with an
    UnloadedKindWarning saying so.
    """
    import pandas as pd

    if arrays not in ARRAYS:
        raise StoreError(f"arrays must be one of {', '.join(ARRAYS)}, got {arrays!r}")
    ids = sweep_ids(store, sweep, strict=True) if sweep is not None else store.run_ids()
    sweeps_of = _sweeps_of(store)
    rows, config_cols, metric_cols, list_cols = [], {}, {}, set()
    state_cols = ("state", "diverged_step", "diverged_reason", "sweeps", "finished_at")
    for rid in sorted(set(ids)):
        d = store.run_path(rid)
        if store.run_dir_problem(rid) is None and not (d / "DONE").exists():  # (an unreadable run: named below)
            continue
        docs, why = store.read_finished(rid)
        if docs is None:
            if kind_not_loaded(why):
                warnings.warn(f"skipping run {d}: {why}", UnloadedKindWarning, stacklevel=3)
            else:
                warnings.warn(f"skipping broken run {d}: {why}", BrokenRunWarning, stacklevel=3)
            continue
        doc, metrics = docs
        why = bad_metric(metrics)
        if why is not None:
            warnings.warn(f"skipping run {d}: {why}", BrokenRunWarning, stacklevel=3)
            continue
        div = diverged(metrics)
        if div is not None:
            div = store.divergence(rid) or div
        row = {"run_id": rid}
        for key, value in doc["config"].items():
            config_cols[key] = None
            row[key] = value
        nan = float("nan")  # (not None: a column of None would not round-trip through CSV)
        in_sweeps = sweeps_of.get(rid, [])
        row.update(state="diverged" if div else "done",
                   diverged_step=nan if div is None or div["step"] is None else div["step"],
                   diverged_reason=div["reason"] if div else nan,
                   sweeps=in_sweeps if arrays != "json" else json.dumps(in_sweeps),
                   finished_at=_utc(store.done_info(rid).get("time")))
        for key, value in metrics.items():
            col = f"metric_{key}" if key in row or key == "run_id" or key in config_cols \
                or key in state_cols else key
            if isinstance(value, (list, dict)):
                if arrays == "drop":
                    continue
                if isinstance(value, dict) or arrays == "json":
                    value = json.dumps(value)
                else:
                    list_cols.add(col)
            elif value is None:
                value = float("nan")
            metric_cols[col] = None
            row[col] = value
        rows.append((row, metrics))
    rows = _without_mixed(rows, stacklevel=3)
    cols = ["run_id", *config_cols, *state_cols, *(c for c in metric_cols if c not in config_cols)]
    df = pd.DataFrame(rows, columns=cols)
    for col in list_cols:  # a run without the metric: null, not NaN (a list column holds lists)
        df[col] = [v if isinstance(v, list) else None for v in df[col]]
    return df


def collect_curves(store, sweep: str | None = None):
    """Every run's training curves as one long table, columns CURVE_COLUMNS: run_id, step,
    metric (R, A, C, top1_mass, lr: the monitor evaluations, docs/columns.md) and value (NaN where
    a value is not defined). Finished runs give their curves.json; runs still training give the
    rows logged so far (curves.jsonl). `sweep` restricts to that manifest's runs; broken runs are
    skipped with a BrokenRunWarning naming them."""
    import pandas as pd

    ids = sweep_ids(store, sweep, strict=True) if sweep is not None else store.run_ids()
    parts = []
    for rid in sorted(set(ids)):
        reason = store.broken_reason(rid)
        if reason is not None:
            warnings.warn(f"skipping broken run {store.run_path(rid)}: {reason}", BrokenRunWarning, stacklevel=3)
            continue
        try:
            cur = store.read_curves(rid)
        except StoreError as e:
            warnings.warn(f"skipping run {store.run_path(rid)}: {e}", BrokenRunWarning, stacklevel=3)
            continue
        steps = cur.get("step") if isinstance(cur, dict) else None
        if not isinstance(steps, list) or not steps:
            continue
        for metric, values in cur.items():
            if metric == "step" or not isinstance(values, list) or len(values) != len(steps):
                continue
            parts.append(pd.DataFrame({"run_id": rid, "step": steps, "metric": metric,
                                       "value": pd.to_numeric(pd.Series(values, dtype=object), errors="coerce")}))
    if not parts:
        return pd.DataFrame({"run_id": pd.Series(dtype=str), "step": pd.Series(dtype="int64"),
                             "metric": pd.Series(dtype=str), "value": pd.Series(dtype=float)})
    df = pd.concat(parts, ignore_index=True)
    df["step"] = df["step"].astype("int64")
    df["value"] = df["value"].astype(float)
    return df[list(CURVE_COLUMNS)]


def collect_curves_to(store, path: str | os.PathLike, sweep: str | None = None):
    """collect_curves() written to `path`: .parquet or .csv by suffix (atomically). Returns the frame."""
    path = _table_path(path)
    df = collect_curves(store, sweep=sweep)
    _write_table(df, path)
    return df


def _table_path(path) -> Path:
    path = Path(path)
    if path.suffix.lower() not in (".parquet", ".csv"):
        raise StoreError(f"cannot write {path}: use a .parquet or .csv suffix")
    return path


def collect_to(store, path: str | os.PathLike, sweep: str | None = None, arrays: str = "auto"):
    """collect() written to `path`: .parquet or .csv by suffix (atomically). Returns the frame.
    arrays="auto": native list columns in Parquet, JSON strings in CSV."""
    path = _table_path(path)
    suffix = path.suffix.lower()
    if arrays == "auto":
        arrays = "list" if suffix == ".parquet" else "json"
    if suffix == ".csv" and arrays == "list":
        raise StoreError(f"cannot write {path}: a CSV cell holds no list (use arrays='json' or a .parquet file)")
    df = collect(store, sweep=sweep, arrays=arrays)
    _write_table(df, path)
    return df


def _write_table(df, path: Path) -> None:
    suffix = path.suffix.lower()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(path.parent, path.name)  # an earlier collect's, killed with -9
        if suffix == ".parquet":
            write_atomic(path, lambda fh: df.to_parquet(fh, index=False))
        else:
            write_text_atomic(path, df.to_csv(index=False))
    except OSError as e:
        raise StoreError(f"cannot write {path}: {e.strerror or e}") from None
    except (TypeError, ValueError) as e:  # pyarrow: a column mixing types across runs
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StoreError(f"cannot write {path}: {msg}") from None


__all__ = ["collect", "collect_to", "collect_curves", "collect_curves_to", "status", "problems", "sweep_ids",
           "BrokenRunWarning", "UnloadedKindWarning", "RUN_STATES", "ARRAYS", "CURVE_COLUMNS"]
