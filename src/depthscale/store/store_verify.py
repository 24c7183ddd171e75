"""What a store's run directory must hold to be believed (`store.Store` reads it through these).

A finished run is verified whenever it is read (status, collect, report, a sweep's plan,
load_model); each check gives None or one line naming the file and what is wrong, which the store
shows as the run's *broken* reason (and a sweep then runs it again):

- config.json: a RunConfig whose every field has its type (``L = "four"`` is broken), and whose
  hash is the run's id (`config_problem`): an edited config (L 4 -> 8, with or without its
  ``run_id``) no longer hashes to the directory's name. A config written by an earlier version
  under a renamed field hashes as it was stored. A config of a model kind that no loaded kind
  has (a plug-in's, its file not named by DEPTHSCALE_KINDS now) cannot be read: the run is not
  broken but *unloaded*, and its reason says so (`kind_not_loaded`).
- metrics.json: R is a number, or null where the run diverged (``R = "abc"`` and a missing R are
  broken, not "diverged" or "done with R = NaN"); stopped_because is a string; the other numbers
  the trainer writes are numbers or null; a run_id in it is the run's (`metrics_problem`).
- curves.json (and a training run's curves.jsonl rows): each curve a list of numbers or nulls,
  the steps integers (`curves_problem`, `curve_row_problem`).
- DONE is the run's manifest (`manifest_problem`): ``Store.finish`` records the run id and the
  sha256 and size of config.json, metrics.json, curves.json and params.pt. The JSON files are
  read whole whenever a finished run is read, so their size and sha256 are always checked (an
  edited R, a metrics.json or curves.json from another run, a DONE copied from another run: all
  broken). params.pt: its size always; its sha256 when it is loaded (``load_params``) or when its
  inode, mtime or ctime is not the one DONE recorded (replaced, swapped, or edited with its mtime
  set back: os.utime sets the ctime), so status on a large store hashes no model it has not
  reason to. A DONE of an earlier version (no manifest) is checked as then: params.pt's recorded
  sha256 when it is newer than DONE; a run finished before checksums were recorded is unverified
  but loadable, and an unreadable params.pt is an error naming the file.
- metrics.json and curves.json never hold a non-finite number (the store writes null), and R is
  never negative: ``"R": 1e400`` or ``-5`` is broken, not diverged.
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
import math
import os
import stat
from pathlib import Path
from typing import Any

from depthscale.base.atomic import file_kind, read_regular
from depthscale.config.kind_registry import PLUGIN_ENV, find_kind
from depthscale.config.run import FIELD_DEFAULTS, ID_OPTIONAL_FIELDS, ConfigError, RunConfig, run_id

# metrics a trainer writes as numbers (null where not finite); any of them present must be one
NUMERIC_METRICS = ("R", "R_se", "A", "C", "var_ystar", "R_rel", "mode_R_sum", "selection_mean",
                   "train_seconds", "final_monitor_loss", "lr_used")
INTEGER_METRICS = ("steps", "best_step", "n_eval")
# files of an unfinished run that must be regular files when present (a directory or a FIFO at
# the name would fail every rerun of the run's pack)
LIVE_FILES = ("lease", "FAILED", "curves.jsonl", "checkpoint.pt", "config.json", "metrics.json",
              "curves.json", "params.pt")
PARAMS_SHA = "params_sha256"  # DONE's record of params.pt: its sha256 and its size in bytes
PARAMS_BYTES = "params_bytes"  # (both kept beside the manifest for readers of earlier versions)
MANIFEST = "files"  # DONE's manifest: file name -> {"sha256", "bytes"} (params.pt: and "stat")
VOUCHED = ("config.json", "metrics.json", "curves.json", "params.pt")  # the files DONE vouches for


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_finite(v: int | float) -> bool:
    return isinstance(v, int) or math.isfinite(v)  # (an int of 400 digits is finite, and no float)


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


_NOT_LOADED = f"not loaded: set {PLUGIN_ENV} to the plug-in file that registers it"


def kind_not_loaded(reason: str | None) -> bool:
    """True if `reason` (a config_problem) says the run's model kind is not loaded."""
    return reason is not None and reason.startswith("kind ") and reason.endswith(_NOT_LOADED)


def _unloaded_kind(config: dict) -> str | None:
    """The model a config names when it reads as a kind's name (a plug-in's) that no loaded kind has."""
    model = config.get("model")
    if isinstance(model, str) and 0 < len(model) <= 100 and model.replace("-", "_").isidentifier() \
            and find_kind(model) is None:
        return model
    return None


def config_problem(rid: str, doc: Any) -> str | None:
    """What is wrong with a run's config.json document, or None (a kind not loaded: `kind_not_loaded`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        return "config.json has no config"
    if doc.get("run_id", rid) != rid:
        return f"config.json is for run {doc.get('run_id')!r}"
    kind = _unloaded_kind(doc["config"])
    if kind is not None:
        return f"kind {kind!r} {_NOT_LOADED}"
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
        if key in metrics and v is not None and not _is_finite(v):  # the store writes null, never these
            return f"metrics.json: {key} is {_short(v)}, which the store never writes (a non-finite number is null)"
    if _is_number(metrics["R"]) and metrics["R"] < 0:
        return f"metrics.json: R is negative ({_short(metrics['R'])}): no loss is"
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
            bad = [v for v in values if v is not None and not (_is_number(v) and _is_finite(v))]
            if bad:
                what = "a non-finite number (the store writes null)" if _is_number(bad[0]) else "a value that is not a number"
                return f"{name}: curve {key!r} holds {what}: {_short(bad[0])}"
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
    blob = read_regular(path)  # (no link followed)
    return hashlib.sha256(blob).hexdigest(), len(blob)


def manifest_entry(blob: bytes, st: os.stat_result | None = None) -> dict:
    """DONE's record of one file: its sha256 and size in bytes (and, given its lstat, the
    stat_key it had when the run finished)."""
    entry = {"sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}
    if st is not None:
        entry["stat"] = stat_key(st)
    return entry


def stat_key(st: os.stat_result) -> list[int]:
    """[inode, mtime ns, ctime ns, size]: a file's that no write, rename, replace or os.utime
    leaves as it was (each sets the ctime to now)."""
    return [st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size]


def manifest_problem(rid: str, d: Path, done: dict, blobs: dict[str, bytes], deep: bool = False) -> str | None:
    """What is wrong with a finished run's files against DONE's manifest (MANIFEST: name ->
    sha256 and size of every file in VOUCHED it vouches for, and the run id), or None. `blobs`:
    the bytes of the JSON files as read (their size and sha256 are always checked: they are read
    whole anyway); params.pt: its size always, its sha256 when `deep` or when its stat_key is not
    the one recorded (replaced, rewritten, touched). A DONE without a manifest (an earlier
    version's) is checked as that version did (`params_problem`)."""
    files = done.get(MANIFEST)
    if files is None:
        return params_problem(d, done, deep)
    if not isinstance(files, dict):
        return "DONE's manifest of files is not a JSON object"
    if done.get("run_id") != rid:
        return f"DONE is for run {_short(done.get('run_id'))}, not this one"
    for name in VOUCHED:
        entry = files.get(name)
        if entry is None:
            if name == "params.pt" and not os.path.lexists(d / name):
                continue  # a run that diverged to NaN has no parameters
            return f"{name} is not in DONE's manifest: not this run's"
        if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and _is_int(entry.get("bytes"))):
            return f"DONE's manifest entry for {name} is malformed"
        why = (_blob_problem(name, blobs[name], entry) if name in blobs
               else _file_problem(d / name, entry["sha256"], entry["bytes"], entry.get("stat"), deep))
        if why is not None:
            return why
    return None


def _blob_problem(name: str, blob: bytes, entry: dict) -> str | None:
    if len(blob) != entry["bytes"]:
        return f"{name} has {len(blob)} bytes, not the {entry['bytes']} DONE records: edited or replaced"
    if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
        return f"{name} does not match the sha256 DONE records: edited or replaced"
    return None


def _file_problem(path: Path, want: str, size: Any, recorded: Any, deep: bool,
                  newer_than: Path | None = None) -> str | None:
    """params.pt against a recorded sha256 and size: the size always; the sha256 if `deep`, or if
    its stat_key is not `recorded` (or, with no record, if it is newer than `newer_than`)."""
    name = path.name
    try:
        st = os.lstat(path)  # a link is not a run's file
    except FileNotFoundError:
        return f"{name} is missing"
    except OSError as e:
        return f"{name} cannot be read: {e.strerror or e}"
    if not stat.S_ISREG(st.st_mode):
        return f"{name} cannot be read: it is {file_kind(st.st_mode)}, not a file"
    if _is_int(size) and st.st_size != size:
        return f"{name} has {st.st_size} bytes, not the {size} it was written with: truncated or replaced"
    if not deep:
        if recorded is not None:
            if recorded == stat_key(st):
                return None
        else:
            try:
                if st.st_mtime_ns <= os.stat(newer_than).st_mtime_ns:
                    return None
            except (OSError, TypeError):
                pass
    try:
        got, _ = file_sha256(path)
    except OSError as e:
        return f"{name} cannot be read: {e.strerror or e}"
    if got != want:
        return f"{name} does not match the sha256 recorded when the run finished: garbled?"
    return None


def params_problem(d: Path, done: dict, deep: bool = False) -> str | None:
    """What is wrong with a finished run's params.pt against DONE's record, or None: its
    manifest entry (`manifest_problem`), or for a DONE of an earlier version its PARAMS_SHA and
    PARAMS_BYTES (the sha256 only if params.pt is newer than DONE, or `deep`). A DONE that
    records no checksum (a diverged run without parameters, an older version's run) is not
    checked."""
    files = done.get(MANIFEST)
    if isinstance(files, dict):
        entry = files.get("params.pt")
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            return None if not os.path.lexists(d / "params.pt") else "params.pt is not in DONE's manifest"
        return _file_problem(d / "params.pt", entry["sha256"], entry.get("bytes"), entry.get("stat"), deep)
    want = done.get(PARAMS_SHA)
    if not isinstance(want, str):
        return None
    return _file_problem(d / "params.pt", want, done.get(PARAMS_BYTES), None, deep, newer_than=d / "DONE")


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


__all__ = ["config_problem", "kind_not_loaded", "metrics_problem", "curves_problem", "curve_row_problem", "params_problem",
           "manifest_problem", "manifest_entry", "stat_key", "MANIFEST", "VOUCHED",
           "squatter", "stored_id", "file_sha256", "file_signature", "NUMERIC_METRICS", "INTEGER_METRICS", "LIVE_FILES",
           "PARAMS_SHA", "PARAMS_BYTES"]
