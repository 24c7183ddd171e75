"""The run store: one directory per run on a filesystem that many machines may share.

Layout under the store root::

    runs/<run_id>/config.json    the RunConfig, the run id, package versions, device
                                 (runs/<run_id> is a real directory of the store: a symbolic link,
                                 a file or a FIFO there makes the run broken; nothing is read,
                                 written or deleted through a link, and its claimer removes the
                                 link itself before the run starts again)
    runs/<run_id>/checkpoint.pt  the trainer's latest checkpoint (deleted once the run is done)
    runs/<run_id>/metrics.json   final measurements: scalars and small arrays
    runs/<run_id>/curves.json    training curves, each a list over logged steps (CURVE_KEYS: step, R,
                                 A, C, top1_mass, lr)
    runs/<run_id>/curves.jsonl   the same curves while the run trains: one JSON row per evaluation,
                                 appended as it comes (deleted once the run is done)
    runs/<run_id>/params.pt      the finished run's parameters (one model's state_dict; `load_model`)
    runs/<run_id>/tensorboard/   TensorBoard event files (`--log tensorboard`)
    runs/<run_id>/DONE           completion marker and the run's manifest, written last (a run is
                                 finished iff it exists): when, where, the run id, and the sha256
                                 and size of config.json, metrics.json, curves.json and params.pt
    runs/<run_id>/FAILED         the reason the last attempt raised (a retry may still finish)
    runs/<run_id>/lease          who is running it now (host, pid, heartbeat time)
    sweeps/<name>.json           manifest: the run ids a named sweep wants (`depthscale train` adds
                                 its runs to the manifest "train")
    slurm/                       submitit logs of SLURM jobs

The root is the directory that holds runs/ and sweeps/; a path to the runs/ directory of a store
opens that store, and a new store may not be named "runs" (it would nest as runs/runs/).

Every file (but curves.jsonl, which is only appended to) is written atomically (temp file in the same directory, fsync, ``os.replace``), so a
reader sees the old content or the new one, never a part. JSON is strict: a non-finite number is
written as ``null``. A finished run is never re-run and its files are never rewritten: ``finish``
and ``fail`` on a done run change nothing.

States of a run (``run_state``): done; diverged (finished, but its training loss became
non-finite or exploded: ``divergence`` says at which step and why; never re-run, and kept apart
from done runs by readers); broken (``DONE`` exists but the run's files do not hold a result that
verifies, store_verify: a config that hashes to the run id, metrics and curves of the right
fields and types, params.pt as recorded; or an unfinished run with a directory or a FIFO where
one of its files belongs, or a malformed row in its curves.jsonl: ``broken_reason`` says which
file; a sweep runs it again, collect skips it with a warning); running (a live lease); failed
(``FAILED``, no result); pending. No file of a store is opened unless it is a regular file, so
a FIFO at a file's name never blocks a reader.

Leases (lease.py has the protocol): ``claim`` takes a run's lease for this process, ``heartbeat``
refreshes it and ``release`` drops it; a lease whose holder died, or stopped its heartbeat on
another host for ``lease_timeout`` seconds, is taken over. If this object's lease was broken while
it ran (a holder judged stale but still alive), ``finish`` sees the token changed and discards the
late result, so a run is still recorded once.
A done run is never claimed: the claimer checks ``DONE`` after taking the lease, and
``finish`` writes ``DONE`` before the lease is released. A broken run is claimed like an
unfinished one; its holder deletes ``DONE`` (first) and the unreadable result before running it.
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

from depthscale import lease
from depthscale.provenance import versions
from depthscale.atomic import (RefusedPickle, dumps, file_kind, load_torch_data, read_regular, remove_path,
                               remove_unless_file, save_torch_atomic, write_atomic, write_json_atomic, write_text_atomic)
from depthscale.collect import RUN_STATES
from depthscale.config import ConfigError, RunConfig, run_id
from depthscale.errors import StoreError
from depthscale.store_leases import StoreLeases
from depthscale.store_training import CURVES_LIVE, RENAMED_CURVES, TrainingFiles, renamed_curves
from depthscale.store_verify import (MANIFEST, PARAMS_BYTES, PARAMS_SHA, config_problem, curves_problem,
                                     file_signature, manifest_entry, manifest_problem, metrics_problem,
                                     params_problem, squatter, stat_key)
from depthscale.store_views import NAME_RE, StoreViews
from depthscale.userpaths import no_home, shown

log = logging.getLogger(__name__)

DEFAULT_LEASE_TIMEOUT = lease.DEFAULT_LEASE_TIMEOUT
REQUIRED_METRICS = ("stopped_because",)  # string keys every finished run's metrics.json holds (and R: store_verify)
_RUN_ID_RE = re.compile(r"^[0-9a-f]{16}$")  # what config.run_id gives
_JSON_FILES = ("config.json", "metrics.json", "curves.json")  # read whole (and hashed) on every check
_RESULT_FILES = ("DONE", "config.json", "metrics.json", "curves.json", "params.pt")


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


class Store(TrainingFiles, StoreLeases, StoreViews):
    """A directory of runs, safe to share between processes and machines.

    `lease_timeout`: seconds a lease held on another host stays valid without a heartbeat.
    `readonly=True` opens an existing store for reading (collect, status) without creating or
    probing anything, e.g. a copy fetched from a cluster onto a read-only mount.

    Here: opening, paths, config, finishing and reading a run's result. Mixed in: a training
    run's checkpoint and live curves (store_training), leases (store_leases), run states, sweep
    manifests and tables (store_views).
    """

    def __init__(self, root: str | os.PathLike, lease_timeout: float = DEFAULT_LEASE_TIMEOUT,
                 readonly: bool = False) -> None:
        self.root = store_root(root, readonly)
        if not lease_timeout > 0:
            raise StoreError(f"lease_timeout must be > 0 seconds, got {lease_timeout!r}")
        self.lease_timeout = float(lease_timeout)
        self.readonly = readonly
        self._leases: dict[str, str] = {}  # run id -> token of a lease this object holds
        self._checked: dict[str, tuple] = {}  # run id -> (file signature, broken reason or None)
        self._live_checked: dict[str, tuple] = {}  # the same for an unfinished run's curves.jsonl
        if readonly:
            return
        self._check_runs_root()  # before anything is written in it
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

    def _check_writable(self) -> None:
        if self.readonly:
            raise StoreError(f"store {self.root} was opened read-only")

    def run_dir(self, rid: str) -> Path:
        """The run's directory, created if needed. Whatever else is at its name (a symbolic link,
        a file, a FIFO: the run is broken, `run_dir_problem`) is removed first, with a warning
        naming it: a link itself, never anything through it; then a real directory is made."""
        self._check_writable()
        self._check_runs_root()
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
        without following anything."""
        path = self.run_path(rid)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            return f"runs/{rid} cannot be looked up: {e.strerror or e}"
        if stat.S_ISDIR(st.st_mode):
            return None
        if stat.S_ISLNK(st.st_mode):
            return f"runs/{rid} is a symbolic link (to {shown(os.readlink(path))}), not a directory of the store"
        return f"runs/{rid} is {file_kind(st.st_mode)}, not a directory"

    def _check_runs_root(self) -> None:
        """A store's runs/ is a directory of its own (nothing is written through a link)."""
        if os.path.islink(self.runs_root):
            raise StoreError(f"store {self.root}: runs/ is a symbolic link; a store writes only inside "
                             f"itself (make runs/ a directory, or open the store it points to)")

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
            if json.loads(read_regular(path)) == json.loads(dumps(doc)):
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

    # --- results ---
    def is_done(self, rid: str) -> bool:
        """True if the run finished and its result is readable (a diverged run is done too: it is
        never run again). A broken run (DONE, but no readable result) is not done."""
        return (self.run_path(rid) / "DONE").exists() and self._check_finished(rid) is None

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
        self._check_writable()
        d = self.run_dir(rid)
        if self.is_done(rid):
            warnings.warn(f"run {d} is already done; keeping the first result", stacklevel=2)
            return False
        if not self._still_ours(rid):
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
        self.release(rid)  # DONE is written: nobody may claim it any more
        return True

    def fail(self, rid: str, reason: str) -> None:
        """Record that an attempt raised (for exceptions; a NaN run is finished, not failed)."""
        self._check_writable()
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
        try:
            blob = read_regular(d / name)  # never blocks on a FIFO, never follows a link
            text = blob.decode()
        except FileNotFoundError:
            raise StoreError(f"corrupted run directory {d}: {name} is missing") from None
        except OSError as e:
            raise StoreError(f"corrupted run directory {d}: {name} cannot be read: {e.strerror}") from None
        except UnicodeDecodeError:
            raise StoreError(f"corrupted run directory {d}: {name} is not valid JSON") from None
        if not text.strip():
            raise StoreError(f"corrupted run directory {d}: {name} is empty")
        try:
            return json.loads(text), blob
        except ValueError:
            raise StoreError(f"corrupted run directory {d}: {name} is not valid JSON") from None

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
        """The finished run's model with its final weights: a depthscale.models.AttentionPack of
        one model (call it as pack(X, y, xq)[0], or measure it with depthscale.measurements)."""
        from depthscale.models import build_pack

        self._require_done(rid)
        cfg = self.load_config(rid)
        params = self.load_params(rid, map_location=device)
        pack = build_pack([cfg]).to(device)
        pack.load_model_state(0, params)
        return pack.eval()



def load_model(store: "Store | str | os.PathLike", run_id: str, device: str = "cpu"):
    """A finished run's model with its final weights (Store.load_model), from a Store or a path::

        from depthscale import load_model
        pack = load_model("runs/cpu", "0123456789abcdef")
        f = pack(X_BxPxd, y_BxP, xq_Bxd)[0].y_hat_B
    """
    if not isinstance(store, Store):
        store = Store(store, readonly=True)
    return store.load_model(run_id, device)


__all__ = ["Store", "StoreError", "store_root", "load_model", "CURVES_LIVE", "DEFAULT_LEASE_TIMEOUT", "RUN_STATES", "REQUIRED_METRICS"]
