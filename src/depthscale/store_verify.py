"""What a store's run directory must hold to be believed (`store.Store` reads it through these).

A finished run is verified whenever it is read (status, collect, report, a sweep's plan,
load_model); each check gives None or one line naming the file and what is wrong, which the store
shows as the run's *broken* reason (and a sweep then runs it again):

- config.json: a RunConfig whose every field has its type (``L = "four"`` is broken), and whose
  hash is the run's id (`config_problem`): an edited config (L 4 -> 8, with or without its
  ``run_id``) no longer hashes to the directory's name. A config written by an earlier version
  under a renamed field hashes as it was stored.
- metrics.json: R is a number, or null where the run diverged (``R = "abc"`` and a missing R are
  broken, not "diverged" or "done with R = NaN"); stopped_because is a string; the other numbers
  the trainer writes are numbers or null; a run_id in it is the run's (`metrics_problem`).
- curves.json (and a training run's curves.jsonl rows): each curve a list of numbers or nulls,
  the steps integers (`curves_problem`, `curve_row_problem`).
- params.pt: ``Store.finish`` records its sha256 and size in DONE. Reading a run's state checks
  the size, and the sha256 only when params.pt is newer than DONE (it was rewritten after the run
  finished), so status and collect of a large store never hash every model; ``load_params`` (and
  so load_model) always checks the sha256 (`params_problem`). A run finished before checksums
  were recorded is unverified but loadable: load_params tries it, and an unreadable one is an
  error naming the file.
- Any file of a run (and a lease, a manifest) is read only if it is a regular file: a FIFO, a
  socket, a device, a directory or a symbolic link at its name is broken (never a hang, never a
  read through the link); for a run that is not finished, `squatter` names such a file among the
  ones a training run writes, and the claimer of the run removes it (a link itself, never what
  it names). The run's directory itself must be a real directory of the store
  (`Store.run_dir_problem`).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from depthscale.atomic import file_kind, read_regular
from depthscale.config import FIELD_DEFAULTS, ID_OPTIONAL_FIELDS, ConfigError, RunConfig, run_id

# metrics a trainer writes as numbers (null where not finite); any of them present must be one
NUMERIC_METRICS = ("R", "R_se", "A", "C", "var_ystar", "R_rel", "mode_R_sum", "selection_mean",
                   "train_seconds", "final_monitor_loss", "lr_used")
INTEGER_METRICS = ("steps", "best_step", "n_eval")
# files of an unfinished run that must be regular files when present (a directory or a FIFO at
# the name would fail every rerun of the run's pack)
LIVE_FILES = ("lease", "FAILED", "curves.jsonl", "checkpoint.pt", "config.json", "metrics.json",
              "curves.json", "params.pt")
PARAMS_SHA = "params_sha256"  # DONE's record of params.pt: its sha256 and its size in bytes
PARAMS_BYTES = "params_bytes"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def file_signature(path: Path) -> tuple | None:
    """(inode, mtime in ns, ctime in ns, size, mode) of the name `path` itself (a symbolic link is
    not followed), None where it cannot be looked up: a verdict cached with it stands while the
    file is not rewritten, appended to, replaced or relinked. The ctime changes with any of those
    even when the mtime is set back (os.utime sets the ctime to now)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_mode


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def stored_id(raw: dict) -> str:
    """The run id of a config as stored (run_id's formula over the dict as written, field names
    of earlier versions included): what a run written before a field was renamed was hashed as."""
    dct = {k: v for k, v in raw.items()
           if k != "preset" and not (k in ID_OPTIONAL_FIELDS and v == FIELD_DEFAULTS.get(k))}
    blob = json.dumps(dct, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_problem(rid: str, doc: Any) -> str | None:
    """What is wrong with a run's config.json document, or None."""
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        return "config.json has no config"
    if doc.get("run_id", rid) != rid:
        return f"config.json is for run {doc.get('run_id')!r}"
    try:
        cfg = RunConfig.from_dict(doc["config"])
    except (ConfigError, TypeError, ValueError) as e:
        return f"config.json holds no valid config: {e}"
    if run_id(cfg) != rid:
        try:
            same = stored_id(doc["config"]) == rid
        except (TypeError, ValueError):
            same = False
        if not same:
            return f"config.json does not hash to its run id {rid}: edited?"
    return None


def metrics_problem(rid: str, metrics: Any, required: tuple[str, ...] = ("stopped_because",)) -> str | None:
    """What is wrong with a finished run's metrics.json document, or None."""
    if not isinstance(metrics, dict):
        return "metrics.json is not a JSON object"
    for key in required:
        if not isinstance(metrics.get(key), str):
            return f"metrics.json has no {key!r}"
    if "R" not in metrics:
        return "metrics.json has no 'R'"
    if metrics.get("run_id", rid) != rid:
        return f"metrics.json is for run {metrics.get('run_id')!r}"
    for key in NUMERIC_METRICS:
        v = metrics.get(key)
        if key in metrics and v is not None and not _is_number(v):
            return f"metrics.json: {key} is not a number: {_short(v)}"
    for key in INTEGER_METRICS:
        v = metrics.get(key)
        if key in metrics and v is not None and not _is_int(v):
            return f"metrics.json: {key} is not an integer: {_short(v)}"
    return None


def curves_problem(curves: Any, name: str = "curves.json") -> str | None:
    """What is wrong with a finished run's curves.json document, or None."""
    if not isinstance(curves, dict):
        return f"{name} is not a JSON object"
    for key, values in curves.items():
        if not isinstance(values, list):
            return f"{name}: curve {key!r} is not a list"
        if key == "step":
            bad = [v for v in values if not _is_int(v)]
            if bad:
                return f"{name}: a step is not an integer: {_short(bad[0])}"
        else:
            bad = [v for v in values if v is not None and not _is_number(v)]
            if bad:
                return f"{name}: curve {key!r} holds a value that is not a number: {_short(bad[0])}"
    return None


_PLAIN = frozenset({int, float, type(None)})  # the types json gives a sound row's values (bool is not one)


def curve_row_problem(row: Any) -> str | None:
    """What is wrong with one row of a training run's curves.jsonl, or None."""
    if type(row) is dict and type(row.get("step", 0)) is int and all(type(v) in _PLAIN for v in row.values()):
        return None  # the common case, without the checks below (status reads every row of every pending run)
    if not isinstance(row, dict):
        return "is not a JSON object"
    if "step" in row and not _is_int(row["step"]):
        return f"step is not an integer: {_short(row['step'])}"
    for key, v in row.items():
        if key != "step" and v is not None and not _is_number(v):
            return f"{key} is not a number: {_short(v)}"
    return None


def file_sha256(path: Path) -> tuple[str, int]:
    """(sha256 hex, size) of the regular file at `path` (OSError for anything else)."""
    blob = read_regular(path)
    return hashlib.sha256(blob).hexdigest(), len(blob)


def params_problem(d: Path, done: dict, deep: bool = False) -> str | None:
    """What is wrong with a finished run's params.pt against DONE's record, or None. Runs whose
    DONE records no checksum (a diverged run without parameters, an earlier version's run) are
    not checked. Not `deep`: the size, and the sha256 only if params.pt is newer than DONE."""
    want = done.get(PARAMS_SHA)
    if not isinstance(want, str):
        return None
    path = d / "params.pt"
    try:
        st = os.lstat(path)  # a link is not a run's file
    except FileNotFoundError:
        return "params.pt is missing"
    except OSError as e:
        return f"params.pt cannot be read: {e.strerror or e}"
    if not stat.S_ISREG(st.st_mode):
        return f"params.pt cannot be read: it is {file_kind(st.st_mode)}, not a file"
    size = done.get(PARAMS_BYTES)
    if _is_int(size) and st.st_size != size:
        return f"params.pt has {st.st_size} bytes, not the {size} it was written with: truncated or replaced"
    if not deep:
        try:
            newer = st.st_mtime_ns > os.stat(d / "DONE").st_mtime_ns
        except OSError:
            newer = True
        if not newer:
            return None
    try:
        got, _ = file_sha256(path)
    except OSError as e:
        return f"params.pt cannot be read: {e.strerror or e}"
    if got != want:
        return "params.pt does not match the sha256 recorded when the run finished: garbled?"
    return None


def squatter(d: Path) -> str | None:
    """The first of an unfinished run's files (LIVE_FILES) whose name holds a directory, a FIFO
    or another special file, as a broken reason; None if there is none."""
    for name in LIVE_FILES:
        try:
            mode = os.lstat(d / name).st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):
            return f"{name} is {file_kind(mode)}, not a file"
    return None


__all__ = ["config_problem", "metrics_problem", "curves_problem", "curve_row_problem", "params_problem",
           "squatter", "stored_id", "file_sha256", "file_signature", "NUMERIC_METRICS", "INTEGER_METRICS", "LIVE_FILES",
           "PARAMS_SHA", "PARAMS_BYTES"]
