"""The run store: one directory per run on a filesystem that many machines may share.

Layout under the store root::

    runs/<run_id>/config.json    the RunConfig, the run id, package versions, device
                                 (runs/<run_id> is a real directory of the store: a symbolic link,
                                 a file or a FIFO there makes the run broken; nothing is read,
                                 written or deleted through a link, and its claimer removes the
                                 link itself before the run starts again)
    runs/<run_id>/checkpoint.pt  the trainer's latest checkpoint: bytes the store keeps whole and
                                 does not read (their format: train/checkpoint.py); deleted once
                                 the run is done
    runs/<run_id>/metrics.json   final measurements: scalars and small arrays
    runs/<run_id>/curves.json    training curves, each a list over logged steps (CURVE_KEYS: step, R,
                                 A, C, top1_mass, lr)
    runs/<run_id>/curves.jsonl   the same curves while the run trains: one JSON row per evaluation,
                                 appended as it comes (deleted once the run is done)
    runs/<run_id>/params.pt      the finished run's parameters (one model's state_dict; `load_model`)
    runs/<run_id>/tensorboard/   TensorBoard event files (`--log tensorboard`; `log_dir`)
    runs/<run_id>/DONE           completion marker and the run's manifest, written last (a run is
                                 finished iff it exists): when, where, the run id, and the sha256
                                 and size of config.json, metrics.json, curves.json and params.pt
    runs/<run_id>/FAILED         the reason the last attempt raised (a retry may still finish)
    runs/<run_id>/lease          who is running it now (host, pid, heartbeat time; lease.py)
    sweeps/<name>.json           manifest: the run ids a named sweep wants (manifests.py;
                                 `depthscale train` adds its runs to the manifest "train")
    timing/                      one record per pack execution: seconds per phase (base/timing.py)
    cache/per_context/<run_id>.npz  a finished run's per-context arrays, written from its final
                                 measurement (cache_per_context), recomputed from params.pt when
                                 missing or stale (cache.py); nothing derived is written into a run's directory
    cache/floors/<name>.npz      the best cosine stacks and the softmax-ensemble floor on one evaluation
                                 set (analysis.paired.floor_on_eval; the sweep's tail computes them)
    slurm/                       submitit logs of SLURM jobs

The root is the directory that holds runs/ and sweeps/; a path to the runs/ directory of a store
opens that store, and a new store may not be named "runs" (it would nest as runs/runs/).

Every file (but curves.jsonl, which is only appended to) is written atomically (temp file in the
same directory, fsync, ``os.replace``), so a reader sees the old content or the new one, never a
part. JSON is strict: a non-finite number is written as ``null``. A finished run is never re-run
and its files are never rewritten: ``finish`` and ``fail`` on a done run change nothing.

States of a run (``run_state``): done; diverged (finished, but its training loss became
non-finite or exploded: ``divergence`` says at which step and why; never re-run, and kept apart
from done runs by readers); broken (``DONE`` exists but the run's files do not hold a result that
verifies, store_verify: a config that hashes to the run id, metrics and curves of the right
fields and types, params.pt as recorded; or an unfinished run with a directory or a FIFO where
one of its files belongs, or a malformed row in its curves.jsonl: ``broken_reason`` says which
file; a sweep runs it again, collect skips it with a warning); unloaded (``DONE``, but its config
names a model kind not loaded now: a plug-in's, its file not named by DEPTHSCALE_KINDS; collect
skips it saying so); running (a live lease); failed (``FAILED``, no result); pending. No file of
a store is opened unless it is a regular file, so a FIFO at a file's name never blocks a reader.

The concepts beside this class, each with its own methods: the leases (lease.Leases, this
object's ``leases``: ``claim`` takes a run's lease for this process, ``heartbeat`` refreshes it,
``release`` drops it; a lease whose holder died, or stopped its heartbeat on another host for
``lease_timeout`` seconds, is taken over); the sweeps' manifests (manifests.py); the store read
as tables (collect.py: status, problems, collect, collect_curves). If this object's lease was
broken while it ran (a holder judged stale but still alive), ``finish`` sees the token changed
and discards the late result, so a run is still recorded once. A done run is never claimed: the
claimer checks ``DONE`` after taking the lease, and ``finish`` writes ``DONE`` before the lease
is released. A broken run is claimed like an unfinished one; its holder deletes ``DONE`` (first)
and the unreadable result before running it (``prepare_rerun``).

A Store is what training writes through (train/storage.RunStorage: config, checkpoint, live
curves, result, failure); the package's train layer never imports it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from depthscale.base.provenance import versions
from depthscale.store import cache, divergence, lease
from depthscale.base.atomic import (FILE_MODE, MAX_JSON_BYTES, DamagedJSON, RefusedPickle, TooLargeError, dumps, file_kind,
                               load_torch_data, loads_json, read_json, read_regular, remove_path,
                               remove_temp_files, remove_unless_file, save_torch_atomic, write_atomic,
                               write_json_atomic, write_text_atomic)
from depthscale.base.errors import StoreError
from depthscale.config.run import ConfigError, RunConfig, run_id
from depthscale.store.store_verify import (LIVE_FILES, MANIFEST, PARAMS_BYTES, PARAMS_SHA, config_problem, curve_row_problem, kind_not_loaded,
                                     curves_problem, file_signature, manifest_entry, manifest_problem, metrics_problem,
                                     params_problem, squatter, stat_key)
from depthscale.base.compat import renamed_curves
from depthscale.base.userpaths import no_home, shown

log = logging.getLogger(__name__)

REQUIRED_METRICS = ("stopped_because",)  # string keys every finished run's metrics.json holds (and R: store_verify)
_RUN_ID_RE = re.compile(r"^[0-9a-f]{16}$")  # what config.run_id gives
_JSON_FILES = ("config.json", "metrics.json", "curves.json")  # read whole (and hashed) on every check
_RESULT_FILES = ("DONE", "config.json", "metrics.json", "curves.json", "params.pt")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a run id or a sweep name
CURVES_LIVE = "curves.jsonl"  # a training run's curve rows, appended at each evaluation
STORE_DIRS = ("runs", "sweeps", "timing", "slurm", "cache")  # what a store holds under its root (its own directories)


def _row_line(row: dict) -> str:
    return dumps(row, indent=None).decode()


# --- the store -------------------------------------------------------------------------------

def store_root(path: str | os.PathLike, readonly: bool = False) -> Path:
    """The store a path names: the directory holding runs/ and sweeps/. A path to the runs/
    directory of a store names that store; a new store named "runs" would nest as runs/runs/ and
    is refused (StoreError), as is a read of a directory that holds no store."""
    try:
        p = Path(path).expanduser().absolute()
        return _store_root(p, readonly)
    except OSError as e:  # a name too long to look up (Path.is_dir raises ENAMETOOLONG), a loop of links
        raise StoreError(f"store {shown(str(path))!r}: {e.strerror or e}") from None
    except RuntimeError:  # Path.expanduser: ~user names nobody (or there is no HOME)
        raise StoreError(f"store {shown(str(path))!r}: {no_home(str(path).split(os.sep, 1)[0])}") from None


def _store_root(p: Path, readonly: bool) -> Path:
    if (p / "runs").is_dir():
        return p
    if p.name == "runs" and p.is_dir() and (p.parent / "sweeps").is_dir():
        return p.parent  # the runs/ directory of a store
    if readonly or p.name == "runs":
        try:
            inside = sorted(q.name for q in p.iterdir() if (q / "runs").is_dir()) if p.is_dir() else []
        except OSError:
            inside = []
        hint = f" (stores inside it: {', '.join(inside)})" if inside else ""
        if readonly:
            raise StoreError(f"store {p} does not exist (no runs/ directory){hint}")
        raise StoreError(f"store {p}: a store holds runs/ and sweeps/, so this one would nest as runs/runs/; "
                         f"name the store itself, e.g. {p / 'mystore'}{hint}")
    return p


def store_part(path: str | os.PathLike) -> tuple[Path, str] | None:
    """(the store's root, "runs/"...) when `path` (resolved) is a store's root or lies inside one
    of its directories (STORE_DIRS), else None: a place no report or table may be written."""
    p = Path(path).expanduser().resolve()
    for root in (p, *p.parents):
        if (root / "runs").is_dir() and not (root / "runs").is_symlink():
            if p == root:
                return root, "its root"
            part = p.relative_to(root).parts[0]
            if part in STORE_DIRS:
                return root, f"{part}/"
    return None


class Store:
    """A directory of runs, safe to share between processes and machines.

    `lease_timeout`: seconds a lease held on another host stays valid without a heartbeat.
    `readonly=True` opens an existing store for reading (collect, status) without creating or
    probing anything, e.g. a copy fetched from a cluster onto a read-only mount.

    Its methods, in this order: opening and paths; a run's config; its result (finishing, failing,
    checking and reading it, its parameters and model); readying a claimed run; the files it
    writes while it trains (checkpoint, live curves); its state. Its leases are `leases`.
    """

    def __init__(self, root: str | os.PathLike, lease_timeout: float = lease.DEFAULT_LEASE_TIMEOUT,
                 readonly: bool = False) -> None:
        self.root = store_root(root, readonly)
        if not lease_timeout > 0:
            raise StoreError(f"lease_timeout must be > 0 seconds, got {lease_timeout!r}")
        self.lease_timeout = float(lease_timeout)
        self.readonly = readonly
        self.leases = lease.Leases(self)  # the leases this object holds (claim, heartbeat, release)
        self._checked: dict[str, tuple] = {}  # run id -> (file signature, broken reason or None)
        self._live_checked: dict[str, tuple] = {}  # the same for an unfinished run's curves.jsonl
        if readonly:
            return
        self.check_own_dirs()  # before anything is written in it
        try:
            for sub in (self.root, self.runs_root, self.sweeps_root):
                sub.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".probe.", dir=self.runs_root)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise StoreError(f"store {self.root} is not writable: {e.strerror or e}") from None

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def __reduce__(self):  # pickles as its root and settings, never with the leases it holds
        return (Store, (str(self.root), self.lease_timeout, self.readonly))

    @property
    def runs_root(self) -> Path:
        return self.root / "runs"

    @property
    def sweeps_root(self) -> Path:
        return self.root / "sweeps"

    # --- paths ---
    def run_path(self, rid: str) -> Path:
        """The run's directory (not created); StoreError for a bad run id."""
        if not isinstance(rid, str) or not NAME_RE.match(rid):
            raise StoreError(f"bad run id {rid!r}")
        return self.runs_root / rid

    def check_writable(self) -> None:
        if self.readonly:
            raise StoreError(f"store {self.root} was opened read-only")

    def run_dir(self, rid: str) -> Path:
        """The run's directory, created if needed. Whatever else is at its name (a symbolic link,
        a file, a FIFO: the run is broken, `run_dir_problem`) is removed first, with a warning
        naming it: a link itself, never anything through it; then a real directory is made."""
        self.check_writable()
        self.check_own_dirs()
        path = self.run_path(rid)
        why = self.run_dir_problem(rid)
        if why is not None:
            try:
                os.unlink(path)  # never follows a link, never removes a directory
            except (FileNotFoundError, IsADirectoryError, PermissionError) as e:  # raced by another claimer
                if not isinstance(e, FileNotFoundError) and self.run_dir_problem(rid) is not None:
                    raise StoreError(f"run {path} is broken ({why}) and cannot be replaced: {e.strerror}") from None
            else:
                warnings.warn(f"run {path} was broken ({why}): removed it (nothing it pointed to); "
                              f"the run starts again", stacklevel=2)
        path.mkdir(exist_ok=True)
        return path

    def run_dir_problem(self, rid: str) -> str | None:
        """Why the run's directory cannot be the run's (one line), or None (absent, or a real
        directory). It must be a directory of the store itself: a symbolic link there (to a
        directory elsewhere, or to another run's) would make the store read and write files
        outside the run; a file, a FIFO or a dangling link holds no run. Checked with lstat,
        without following anything. A directory this process may not search (mode 000 for
        another user) cannot be read: its run is broken, named, and skipped by every reader."""
        path = self.run_path(rid)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            return f"runs/{rid} cannot be looked up: {e.strerror or e}"
        if stat.S_ISDIR(st.st_mode):
            try:  # every file of the run is looked up through it: one we may not search (mode 000) is unreadable
                os.lstat(os.path.join(path, "."))
            except OSError as e:
                return f"runs/{rid} cannot be read: {e.strerror or e}"
            return None
        if stat.S_ISLNK(st.st_mode):
            return f"runs/{rid} is a symbolic link (to {shown(os.readlink(path))}), not a directory of the store"
        return f"runs/{rid} is {file_kind(st.st_mode)}, not a directory"

    def check_own_dirs(self) -> None:
        """A store's runs/, sweeps/ and timing/ are directories of its own (nothing is written
        through a link: a manifest or a timing record would land wherever it points)."""
        for sub in STORE_DIRS[:3]:
            if os.path.islink(self.root / sub):
                raise StoreError(f"store {self.root}: {sub}/ is a symbolic link; a store writes only inside "
                                 f"itself (make {sub}/ a directory, or open the store it points to)")

    def run_ids(self) -> list[str]:
        """Every run id that has an entry in runs/ of this store (a directory, or something a
        run's directory should be and is not: its run is broken), sorted."""
        return sorted(p.name for p in self.runs_root.iterdir()
                      if NAME_RE.match(p.name) and (p.is_dir() or _RUN_ID_RE.match(p.name)))

    # --- config ---
    def write_config(self, cfg: RunConfig, device: str | None = None, extra: dict | None = None) -> None:
        """Write config.json: the config, its run id, package versions, the device if given, and the
        entries of `extra` (e.g. whether the fused CPU kernels trained it).

        Idempotent: nothing is written when the content would not change, or when the run is done.
        """
        rid = run_id(cfg)
        if self.is_done(rid):
            return
        doc = {"run_id": rid, "config": cfg.to_dict(), "versions": versions()}
        if device is not None:
            doc["device"] = str(device)
        doc.update(extra or {})
        path = self.run_dir(rid) / "config.json"
        try:
            if read_json(path) == json.loads(dumps(doc)):
                return
        except (OSError, ValueError):
            pass
        remove_unless_file(path)  # a directory or a FIFO squatting on the name
        write_json_atomic(path, doc, strict=True)

    def load_config(self, rid: str) -> RunConfig:
        """The run's RunConfig, from config.json; StoreError if it is missing or not a valid config."""
        doc = self._read_json(rid, "config.json")
        try:
            return RunConfig.from_dict(doc["config"])
        except (KeyError, TypeError, ConfigError) as e:
            raise StoreError(f"corrupted run directory {self.run_path(rid)}: config.json: {e}") from None

    def stored_config(self, rid: str) -> dict | None:
        """config.json as stored (its extra entries too), None where there is none to read."""
        if self.run_dir_problem(rid) is not None:
            return None
        try:
            doc = self._read_json(rid, "config.json")
        except StoreError:
            return None
        return doc if isinstance(doc, dict) else None

    def log_dir(self, rid: str, name: str) -> Path:
        """The run's directory for a logger's files (`name`: tensorboard), in its run directory."""
        if not NAME_RE.match(name):
            raise StoreError(f"bad log directory name {name!r}")
        return self.run_dir(rid) / name

    # --- results ---
    def is_done(self, rid: str) -> bool:
        """True if the run finished and its result is readable (a diverged run is done too: it is
        never run again). A broken run (DONE, but no readable result) is not done."""
        return self.run_dir_problem(rid) is None and (self.run_path(rid) / "DONE").exists() \
            and self._check_finished(rid) is None

    def is_broken(self, rid: str) -> bool:
        """True if DONE exists but the run's files do not hold a readable result."""
        return self.broken_reason(rid) is not None

    def broken_reason(self, rid: str) -> str | None:
        """Why a run is broken (one line naming the file), or None if it is not: a finished run
        whose files do not verify (store_verify), or an unfinished one with a directory or a
        FIFO at the name of a file it writes (its claimer removes it) or a malformed row in its
        curves.jsonl (its rerun rewrites the file from its checkpoint)."""
        d = self.run_path(rid)
        why = self.run_dir_problem(rid)
        if why is not None:
            return why
        if not os.path.lexists(d / "DONE"):
            return (squatter(d) or self.live_curves_problem(rid)) if d.is_dir() else None
        return self._check_finished(rid)

    def _signature(self, d: Path) -> tuple:
        return tuple(file_signature(d / name) for name in _RESULT_FILES)

    def _check_finished(self, rid: str) -> str | None:
        """None if the finished run's DONE, config.json, metrics.json and curves.json are sound,
        else what is wrong. Cached while none of the files changes."""
        d = self.run_path(rid)
        why = self.run_dir_problem(rid)
        if why is not None:
            return why
        sig = self._signature(d)
        cached = self._checked.get(rid)
        if cached is not None and cached[0] == sig:
            return cached[1]
        reason = self.read_finished(rid)[1]
        self._checked[rid] = (sig, reason)
        return reason

    def read_finished(self, rid: str) -> tuple[tuple[dict, dict] | None, str | None]:
        """((config.json, metrics.json), None) of a finished run whose DONE, config.json,
        metrics.json, curves.json and params.pt verify (store_verify: the config hashes to the run
        id, the metrics and curves have their fields and types, params.pt its recorded size),
        else (None, what is wrong: one line naming the file)."""
        d = self.run_path(rid)
        why = self.run_dir_problem(rid)
        if why is not None:
            return None, why
        try:
            done = self._read_json(rid, "DONE")
            if not isinstance(done, dict):
                return None, "DONE is not a JSON object"
            (doc, metrics, curves), blobs = zip(*(self._read_doc(rid, name) for name in _JSON_FILES))
            why = (config_problem(rid, doc) or metrics_problem(rid, metrics, REQUIRED_METRICS)
                   or curves_problem(curves) or manifest_problem(rid, d, done, dict(zip(_JSON_FILES, blobs))))
            if why is not None:
                return None, why
        except StoreError as e:  # _read_json: "corrupted run directory <d>: <what>"
            text, prefix = str(e), f"corrupted run directory {d}: "
            return None, text[len(prefix):] if text.startswith(prefix) else text
        return (doc, metrics), None

    def finish(self, rid: str, metrics: dict, curves: dict, params: dict | None = None) -> bool:
        """Record a finished run: params.pt (the model's parameters, if given), metrics.json,
        curves.json, then DONE; then drop the checkpoint and the live curves and release this
        object's lease on it.

        Returns False (with a warning) and writes nothing if the run is already done, or if this
        object's lease on it was broken and someone else now holds it (their result will count).
        """
        self.check_writable()
        d = self.run_dir(rid)
        if self.is_done(rid):
            warnings.warn(f"run {d} is already done; keeping the first result", stacklevel=2)
            return False
        if not self.leases.still_ours(rid):
            warnings.warn(f"lost the lease on run {d} to another process; discarding this result",
                          stacklevel=2)
            return False
        self._clear_broken(d)
        for name in ("metrics.json", "curves.json", "params.pt", "DONE"):  # a directory or a FIFO there
            remove_unless_file(d / name)
        done = {"time": time.time(), "host": lease.hostname(), "pid": os.getpid(), "run_id": rid}
        files = {}
        if params is not None:
            sha, size = save_torch_atomic(d / "params.pt", dict(params))
            done.update({PARAMS_SHA: sha, PARAMS_BYTES: size})
            files["params.pt"] = {"sha256": sha, "bytes": size, "stat": stat_key(os.lstat(d / "params.pt"))}
        else:
            remove_path(d / "params.pt")  # an earlier attempt's: not this result's
        for name, obj, indent in (("metrics.json", metrics, 1), ("curves.json", curves, None)):  # curves: compact
            blob = dumps(dict(obj), indent, strict=True)
            write_atomic(d / name, lambda fh, b=blob: fh.write(b))
            files[name] = manifest_entry(blob)
        try:
            files["config.json"] = manifest_entry(read_regular(d / "config.json"))
        except OSError:  # no config written (the run is broken without one anyway)
            pass
        write_json_atomic(d / "DONE", {**done, MANIFEST: files}, strict=True)  # the manifest, last
        for name in ("FAILED", "checkpoint.pt", CURVES_LIVE):
            remove_path(d / name)  # a directory at the name too
        self.leases.release(rid)  # DONE is written: nobody may claim it any more
        return True

    def cache_per_context(self, rid: str, arrays: dict) -> bool:
        """Keep a finished run's per-context arrays (its final measurement's, in the order and
        arithmetic of runs.per_context.evaluate) in the store's cache under its params.pt's
        signature, so that the analysis reads them instead of evaluating the model again; False
        where nothing was written (not done, no params.pt, a link in the way)."""
        self.check_writable()
        if not self.is_done(rid):
            return False
        sig = cache.params_signature(self.run_path(rid))
        return bool(sig) and cache.write_per_context(self.root, rid, sig, arrays)

    def fail(self, rid: str, reason: str) -> None:
        """Record that an attempt raised (for exceptions; a NaN run is finished, not failed)."""
        self.check_writable()
        d = self.run_dir(rid)
        if self.is_done(rid):
            return
        if (d / "FAILED").is_dir():
            remove_path(d / "FAILED")
        write_text_atomic(d / "FAILED", str(reason).rstrip("\n") + "\n")

    def _clear_broken(self, d: Path) -> None:
        """Delete a broken result: DONE first (the run is then unfinished to every reader), then
        the unreadable files. Called by the lease holder (or by `finish` of an unleased run)."""
        if not (d / "DONE").exists():
            return
        reason = self._check_finished(d.name)
        if reason is None:
            return
        log.warning("run %s was broken (%s): running it again", d, reason)
        for name in ("DONE", "metrics.json", "curves.json", "params.pt"):
            remove_path(d / name)
        try:
            bad = config_problem(d.name, self._read_json(d.name, "config.json"))
        except StoreError:
            bad = "unreadable"
        if bad is not None:  # rewritten by the rerun (write_config)
            remove_path(d / "config.json")

    def _read_json(self, rid: str, name: str) -> Any:
        return self._read_doc(rid, name)[0]

    def _read_doc(self, rid: str, name: str) -> tuple[Any, bytes]:
        """(the JSON in the run's file `name`, its bytes); StoreError naming what is wrong."""
        d = self.run_path(rid)
        try:  # never blocks on a FIFO, never follows a link, never reads more than MAX_JSON_BYTES
            blob = read_regular(d / name, max_bytes=MAX_JSON_BYTES)
            return loads_json(blob.decode()), blob
        except FileNotFoundError:
            raise StoreError(f"corrupted run directory {d}: {name} is missing") from None
        except OSError as e:
            raise StoreError(f"corrupted run directory {d}: {name} cannot be read: {e.strerror}") from None
        except UnicodeDecodeError:
            raise StoreError(f"corrupted run directory {d}: {name} is not valid JSON") from None
        except DamagedJSON as e:  # empty, not JSON, nested too deeply
            raise StoreError(f"corrupted run directory {d}: {name} {e}") from None

    def _require_done(self, rid: str) -> None:
        reason = self.broken_reason(rid)
        if reason is not None:
            raise StoreError(f"run {self.run_path(rid)} is broken: {reason}")
        if not self.is_done(rid):
            raise StoreError(f"run {self.run_path(rid)} is not finished")

    def load_metrics(self, rid: str) -> dict:
        self._require_done(rid)
        return self._read_json(rid, "metrics.json")

    def load_curves(self, rid: str) -> dict:
        """The finished run's curves (curves.json; a curve named "loss" by earlier versions is R)."""
        self._require_done(rid)
        return renamed_curves(self._read_json(rid, "curves.json"))

    # --- the finished model ---
    def load_params(self, rid: str, map_location: Any = "cpu") -> dict:
        """The finished run's parameters (params.pt: name -> tensor of one model), checked against
        the sha256 DONE recorded (a run finished before checksums were recorded: loaded unchecked)."""
        self._require_done(rid)
        d = self.run_path(rid)
        path = d / "params.pt"
        if not path.exists():
            raise StoreError(f"run {d} has no params.pt (a run that diverged to NaN, "
                             f"or one finished by an earlier version)")
        why = params_problem(d, self.done_info(rid), deep=True)
        if why is not None:
            raise StoreError(f"run {d} is broken: {why}")
        try:
            return load_torch_data(path, map_location)
        except RefusedPickle:
            raise StoreError(f"run {d} is broken: params.pt holds more than tensors (refused unread)") from None
        except Exception as e:  # noqa: BLE001 - truncated or corrupt
            raise StoreError(f"corrupted run directory {self.run_path(rid)}: params.pt cannot be read: "
                             f"{type(e).__name__}") from None

    def load_model(self, rid: str, device: str = "cpu"):
        """The finished run's model with its final weights: a depthscale.kinds.lookup.AttentionPack of
        one model (call it as pack(X, y, xq)[0], or measure it with depthscale.data.measurements)."""
        from depthscale.kinds.lookup import build_pack

        self._require_done(rid)
        cfg = self.load_config(rid)
        params = self.load_params(rid, map_location=device)
        pack = build_pack([cfg]).to(device)
        pack.load_model_state(0, params)
        return pack.eval()

    def prepare_rerun(self, rid: str) -> None:
        """Make a claimed run's directory ready to run again (its lease holder calls it: nobody
        else writes there): temp files a killed writer left (not a contender's fresh lease temp
        file), a broken result, and a directory or a FIFO at a file's name (each would fail every
        attempt)."""
        d = self.run_path(rid)
        remove_temp_files(d, spare_prefix=lease.TEMP_PREFIX, spare_seconds=60)
        self._clear_broken(d)
        for name in LIVE_FILES:
            what = remove_unless_file(d / name) if name != "lease" else None
            if what is not None:
                log.warning("run %s: %s was not a file (%s); removed before the run starts again", d, name, what)

    # --- checkpoints: opaque bytes (their format is the trainer's: train/checkpoint.py) ---
    def save_checkpoint(self, rid: str, data: bytes) -> None:
        """Write `data` as the run's checkpoint.pt, atomically. Refused once the run is done."""
        if self.is_done(rid):
            raise StoreError(f"run {self.run_path(rid)} is finished; its files are never rewritten")
        path = self.run_dir(rid) / "checkpoint.pt"
        remove_unless_file(path)
        write_atomic(path, lambda fh: fh.write(data))

    def load_checkpoint(self, rid: str) -> bytes | None:
        """The bytes of the run's checkpoint.pt (at most MAX_FILE_BYTES, from a regular file in a
        real run directory), or None if there is none; one that cannot be read (a FIFO or a
        directory at the name, too large) warns with its path and gives None."""
        path = self.run_path(rid) / "checkpoint.pt"
        if self.run_dir_problem(rid) is not None or not os.path.lexists(path):
            return None  # (a run directory that is a link: its claimer replaces it, the run starts again)
        try:
            return read_regular(path)
        except OSError as e:
            warnings.warn(f"ignoring unreadable checkpoint {path}: {e.strerror or e}", stacklevel=2)
            return None

    # --- live curves: appended while a run trains ---
    def start_curves(self, rid: str, curves: dict) -> None:
        """(Re)start the run's live curves with the rows of `curves` (a dict of equal-length
        lists: empty for a fresh run, a checkpoint's for a resumed one), so that rows logged after
        the checkpoint by a killed attempt are dropped, never doubled. Atomic."""
        if self.is_done(rid):
            raise StoreError(f"run {self.run_path(rid)} is finished; its files are never rewritten")
        keys = list(curves)
        rows = [dict(zip(keys, vals)) for vals in zip(*(curves[k] for k in keys))] if keys else []
        path = self.run_dir(rid) / CURVES_LIVE
        remove_unless_file(path)  # a directory (or a FIFO) squatting on the name
        write_text_atomic(path, "".join(_row_line(r) for r in rows))

    def append_curves(self, rid: str, rows: list[dict]) -> None:
        """Append curve rows (one JSON object a line) to the run's live curves, flushed."""
        self.check_writable()
        # O_NOFOLLOW: a link put at the name is never appended through (start_curves replaced it)
        fd = os.open(self.run_dir(rid) / CURVES_LIVE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                     FILE_MODE)
        with open(fd, "a", encoding="utf-8") as fh:
            fh.write("".join(_row_line(r) for r in rows))
            fh.flush()

    def read_curves(self, rid: str) -> dict | None:
        """The run's curves as far as they go, finished or not: a done (or diverged) run's
        curves.json, else the rows its training has appended so far (a partly written last row is
        left out); None when there are none or the run is broken. Keys as in curves.json.
        A complete row of curves.jsonl that is malformed (a step that is no integer, a value that
        is no number) raises StoreError naming it: the rows are not the run's."""
        for _ in range(2):  # the run may finish (and drop its live file) while this reads
            if (self.run_path(rid) / "DONE").exists():
                return self.load_curves(rid) if self.is_done(rid) else None
            try:
                rows = _live_rows(self.run_path(rid) / CURVES_LIVE)
            except FileNotFoundError:
                continue
            keys = list(dict.fromkeys(k for r in rows for k in r))
            return renamed_curves({k: [r.get(k) for r in rows] for k in keys}) if rows else None
        return None

    def live_curves_problem(self, rid: str) -> str | None:
        """What is wrong with an unfinished run's curves.jsonl (a malformed row), or None. Cached
        while the file's inode, size and mtime stay the same (status asks twice for each run)."""
        path = self.run_path(rid) / CURVES_LIVE
        sig = file_signature(path)
        if sig is None:  # no file (or none that can be looked up): no rows, nothing wrong
            return None
        cache = self._live_checked  # beside the cache of finished runs' verdicts (_checked)
        if rid in cache and cache[rid][0] == sig:
            return cache[rid][1]
        try:
            _live_rows(path)
            why = None
        except FileNotFoundError:
            return None
        except StoreError as e:
            why = str(e)
        cache[rid] = (sig, why)
        return why

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
        elif state in ("broken", "unloaded"):
            info["reason"] = self.broken_reason(rid)
        elif state == "failed":
            why = self.failure(rid)
            info["reason"] = why.splitlines()[0] if why else None
        return info

    def is_failed(self, rid: str) -> bool:
        """True if the last attempt failed and no attempt has finished."""
        d = self.run_path(rid)
        return self.run_dir_problem(rid) is None and (d / "FAILED").exists() and not self.is_done(rid)

    def failure(self, rid: str) -> str | None:
        """The reason recorded by `fail`, or None."""
        try:
            return read_regular(self.run_path(rid) / "FAILED").decode(errors="replace").strip()
        except OSError:
            return None

    def run_state(self, rid: str) -> str:
        """One of RUN_STATES: 'done', 'diverged' (finished, training diverged), 'broken' (DONE but
        no result that verifies, a run directory that is not a real directory of the store, or an
        unfinished run with a directory or a FIFO at the name of a file it writes), 'unloaded'
        (DONE, but its config names a model kind not loaded now: a plug-in's, DEPTHSCALE_KINDS
        unset), 'running' (live lease), 'failed', 'pending'."""
        d = self.run_path(rid)
        if self.run_dir_problem(rid) is not None:  # a link, a file or a FIFO at the run's name
            return "broken"
        if (d / "DONE").exists():
            why = self._check_finished(rid)
            if why is not None:
                return "unloaded" if kind_not_loaded(why) else "broken"
            return "diverged" if self.divergence(rid) is not None else "done"
        if self.leases.holder(rid) is not None:
            return "running"
        if os.path.lexists(d / "DONE") or self.broken_reason(rid) is not None:
            return "broken"
        if (d / "FAILED").exists():
            return "failed"
        return "pending"


def load_model(store: "Store | str | os.PathLike", run_id: str, device: str = "cpu"):
    """A finished run's model with its final weights (Store.load_model), from a Store or a path::

        from depthscale import load_model
        pack = load_model("runs/cpu", "0123456789abcdef")
        f = pack(X_BxPxd, y_BxP, xq_Bxd)[0].y_hat_B
    """
    if not isinstance(store, Store):
        store = Store(store, readonly=True)
    return store.load_model(run_id, device)


# --- a training run's live curves' rows ---------------------------------------------------------

_DECODER = json.JSONDecoder()


def _live_rows(path) -> list[dict]:
    """The complete rows of a curves.jsonl (a row cut short by a kill is left out; an unreadable
    file has none); StoreError naming a complete row that is malformed. FileNotFoundError if
    there is no file."""
    try:
        text = read_regular(path, max_bytes=MAX_JSON_BYTES).decode(errors="replace")
    except FileNotFoundError:
        raise
    except TooLargeError as e:  # (a sparse file of gigabytes: refused before a byte is read)
        raise StoreError(f"{CURVES_LIVE} cannot be read: {e.strerror}") from None
    except OSError:
        return []
    rows = []
    decode = _DECODER.raw_decode  # json.loads without its two wrapping calls (a pending run: ~10^3 rows)
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip(" \t\n\r")  # JSON's whitespace, which json.loads skips at both ends
        try:
            row, end = decode(line)
        except ValueError:  # a row cut short by a kill
            continue
        except RecursionError:  # json's parser recurses once per level
            raise StoreError(f"{CURVES_LIVE} row {n}: it is nested too deeply") from None
        if end != len(line):  # json.loads' "Extra data"
            continue
        why = curve_row_problem(row)
        if why is not None:
            raise StoreError(f"{CURVES_LIVE} row {n}: {why}")
        rows.append(row)
    return rows

__all__ = ["Store", "store_root", "store_part", "STORE_DIRS", "load_model", "CURVES_LIVE", "REQUIRED_METRICS"]
