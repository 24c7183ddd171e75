"""The run store: one directory per run on a filesystem that many machines may share.

Layout under the store root::

    runs/<run_id>/config.json    the RunConfig, the run id, package versions, device
    runs/<run_id>/checkpoint.pt  the trainer's latest checkpoint (deleted once the run is done)
    runs/<run_id>/metrics.json   final measurements: scalars and small arrays
    runs/<run_id>/curves.json    training curves, each a list over logged steps
    runs/<run_id>/DONE           completion marker, written last (a run is finished iff it exists)
    runs/<run_id>/FAILED         the reason the last attempt raised (a retry may still finish)
    runs/<run_id>/lease          who is running it now (host, pid, heartbeat time)
    sweeps/<name>.json           manifest: the run ids a named sweep wants
    slurm/                       submitit logs of SLURM jobs

Every file is written atomically (temp file in the same directory, fsync, ``os.replace``), so a
reader sees the old content or the new one, never a part. JSON is strict: a non-finite number is
written as ``null``. A finished run is never re-run and its files are never rewritten: ``finish``
and ``fail`` on a done run change nothing.

States of a run (``run_state``): done; diverged (finished, but its training loss became
non-finite or exploded: ``divergence`` says at which step and why; never re-run, and kept apart
from done runs by readers); broken (``DONE`` exists but the run's files do not hold a readable
result: ``broken_reason`` says which file; a sweep runs it again, collect skips it with a
warning); running (a live lease); failed (``FAILED``, no result); pending.

Leases. ``claim`` creates ``lease`` atomically and exclusively (a complete temp file hard-linked
into place, which fails if the name exists; ``O_CREAT|O_EXCL`` where links are unsupported);
both are atomic on local filesystems and on NFSv3+. The holder refreshes it with ``heartbeat``
(the file's mtime, plus a check that the token in it is still ours). A lease is stale when
- on this host (same hostname and boot id): its pid is dead, a zombie, or reused (the process
  start time differs);
- on another host: its heartbeat is older than ``lease_timeout`` seconds (default 600);
- anywhere: its content cannot be read (a complete lease appears at once, so an unreadable one
  names no holder; an empty file gets ``EMPTY_LEASE_GRACE`` seconds, the window of the
  ``O_EXCL`` fallback below).
A stale lease is broken under a second exclusive lock file (``lease.break``): its holder re-reads
the lease, deletes it only if it still carries the stale token, and then contends for the name
like everyone else, the exclusive create deciding. So a lease a winner has just created is never
deleted by a slower contender that saw the old one. (No file protocol can fence a holder that
was judged stale but is still alive; if that happens ``finish`` sees the token changed and
discards the late result, so a run is still recorded once.)
A done run is never claimed: the claimer checks ``DONE`` after taking the lease, and
``finish`` writes ``DONE`` before the lease is released. A broken run is claimed like an
unfinished one; its holder deletes ``DONE`` (first) and the unreadable result before running it.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import platform
import re
import shutil
import socket
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Iterable

from depthscale.config import ConfigError, RunConfig, run_id

log = logging.getLogger(__name__)

DEFAULT_LEASE_TIMEOUT = 600.0  # seconds without heartbeat after which another host may take a run
BREAK_LOCK_TIMEOUT = 30.0  # seconds after which a lock left by a breaker that died is removed
EMPTY_LEASE_GRACE = 1.0  # seconds an empty lease file counts as being written (O_EXCL fallback)
RUN_STATES = ("done", "diverged", "broken", "running", "failed", "pending")
REQUIRED_METRICS = ("stopped_because",)  # keys every finished run's metrics.json holds
DIVERGED_FACTOR = 1e6  # a finished loss R above this many times Var(y*) has diverged
_RESULT_FILES = ("DONE", "config.json", "metrics.json", "curves.json")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class StoreError(Exception):
    """A store that cannot be used as asked; the message is one line naming the path."""


class BrokenRunWarning(UserWarning):
    """A finished run whose files do not hold a readable result was skipped."""


# --- atomic writes ---------------------------------------------------------------------------

def _file_mode() -> int:
    """Mode for new files: what open() would give under the umask (mkstemp alone gives 0600,
    which would hide results from collaborators on a shared filesystem)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _file_mode()


def _fsync_dir(directory: Path) -> None:
    """Make a rename inside `directory` durable (best effort: not every filesystem allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomic(path: Path, write) -> None:
    """Call write(binary file) on a temp file beside `path`, fsync it, then rename it over `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def _to_jsonable(obj: Any) -> Any:
    """json `default`: numpy and torch scalars and arrays become Python numbers and lists."""
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, torch tensors
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serializable")


def _strict(obj: Any) -> Any:
    """`obj` with numpy/torch values as plain Python ones and every non-finite float as None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_strict(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return _strict(_to_jsonable(obj))


def _dumps(obj: Any, indent: int | None = 1, strict: bool = True) -> bytes:
    """JSON bytes; strict: non-finite numbers become null (never a bare NaN or Infinity)."""
    if strict:
        return (json.dumps(_strict(obj), indent=indent, allow_nan=False) + "\n").encode()
    return (json.dumps(obj, indent=indent, default=_to_jsonable) + "\n").encode()


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 1,
                      strict: bool = False) -> None:
    """Write `obj` as JSON to `path` atomically (numpy/torch values converted to plain numbers).
    strict=True writes non-finite numbers as null (the store's own files are always strict)."""
    blob = _dumps(obj, indent, strict)
    _write_atomic(Path(path), lambda fh: fh.write(blob))


def save_torch_atomic(path: str | os.PathLike, obj: Any) -> None:
    """torch.save `obj` to `path` atomically."""
    import torch

    _write_atomic(Path(path), lambda fh: torch.save(obj, fh))


def _write_text_atomic(path: Path, text: str) -> None:
    blob = text.encode()
    _write_atomic(path, lambda fh: fh.write(blob))


def _remove_path(path: Path) -> None:
    """Remove a file, or a directory squatting on a run file's name; nothing if it is gone."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
    except FileNotFoundError:
        pass


# --- process identity (for leases) ------------------------------------------------------------

def _hostname() -> str:
    return socket.gethostname()


def _boot_id() -> str | None:
    """This boot of this machine (Linux): two machines misconfigured with one hostname, or one
    machine before and after a reboot, are told apart by it."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _same_machine(lease: dict) -> bool:
    if lease.get("host") != _hostname():
        return False
    boot = _boot_id()
    return boot is None or lease.get("boot") in (None, boot)


def _proc_start(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (Linux), None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode(errors="replace")
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _pid_alive(pid: int, start: int | None) -> bool:
    """Is `pid` a live (non-zombie) process on this host, and the same one that started at `start`?"""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode(errors="replace")
        fields_ = stat.rsplit(")", 1)[1].split()
        if fields_[0] == "Z":
            return False
        if start is not None and int(fields_[19]) != start:
            return False  # pid reused by another process
    except (OSError, IndexError, ValueError):
        pass
    return True


# --- the store -------------------------------------------------------------------------------

class Store:
    """A directory of runs, safe to share between processes and machines.

    `lease_timeout`: seconds a lease held on another host stays valid without a heartbeat.
    `readonly=True` opens an existing store for reading (collect, status) without creating or
    probing anything, e.g. a copy fetched from a cluster onto a read-only mount.
    """

    def __init__(self, root: str | os.PathLike, lease_timeout: float = DEFAULT_LEASE_TIMEOUT,
                 readonly: bool = False) -> None:
        self.root = Path(root).expanduser().absolute()
        if not lease_timeout > 0:
            raise StoreError(f"lease_timeout must be > 0 seconds, got {lease_timeout!r}")
        self.lease_timeout = float(lease_timeout)
        self.readonly = readonly
        self._leases: dict[str, str] = {}  # run id -> token of a lease this object holds
        self._checked: dict[str, tuple] = {}  # run id -> (file signature, broken reason or None)
        if readonly:
            if not self.runs_root.is_dir():
                raise StoreError(f"store {self.root} does not exist (no runs/ directory)")
            return
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
    def _dir(self, rid: str) -> Path:
        if not isinstance(rid, str) or not _NAME_RE.match(rid):
            raise StoreError(f"bad run id {rid!r}")
        return self.runs_root / rid

    def _check_writable(self) -> None:
        if self.readonly:
            raise StoreError(f"store {self.root} was opened read-only")

    def run_dir(self, rid: str) -> Path:
        """The run's directory, created if needed."""
        self._check_writable()
        path = self._dir(rid)
        path.mkdir(exist_ok=True)
        return path

    def run_ids(self) -> list[str]:
        """Every run id that has a directory in this store, sorted."""
        return sorted(p.name for p in self.runs_root.iterdir() if p.is_dir() and _NAME_RE.match(p.name))

    # --- config ---
    def write_config(self, cfg: RunConfig, device: str | None = None) -> None:
        """Write config.json: the config, its run id, package versions, and the device if given.

        Idempotent: nothing is written when the content would not change, or when the run is done.
        """
        rid = run_id(cfg)
        if self.is_done(rid):
            return
        doc = {"run_id": rid, "config": cfg.to_dict(), "versions": _versions()}
        if device is not None:
            doc["device"] = str(device)
        path = self.run_dir(rid) / "config.json"
        try:
            if json.loads(path.read_text()) == json.loads(_dumps(doc)):
                return
        except (OSError, ValueError):
            pass
        if path.is_dir():
            _remove_path(path)
        write_json_atomic(path, doc, strict=True)

    def load_config(self, rid: str) -> RunConfig:
        doc = self._read_json(rid, "config.json")
        try:
            return RunConfig.from_dict(doc["config"])
        except (KeyError, TypeError, ConfigError) as e:
            raise StoreError(f"corrupted run directory {self._dir(rid)}: config.json: {e}") from None

    # --- checkpoints ---
    def save_checkpoint(self, rid: str, obj: Any) -> None:
        """torch.save `obj` (a dict) as the run's checkpoint, atomically. Refused once the run is done."""
        if self.is_done(rid):
            raise StoreError(f"run {self._dir(rid)} is finished; its files are never rewritten")
        path = self.run_dir(rid) / "checkpoint.pt"
        if path.is_dir():
            _remove_path(path)
        save_torch_atomic(path, obj)

    def load_checkpoint(self, rid: str, map_location: Any = "cpu") -> Any | None:
        """The run's checkpoint, or None if there is none; an unreadable one warns and gives None."""
        path = self._dir(rid) / "checkpoint.pt"
        if not path.exists():
            return None
        import torch

        try:
            return torch.load(path, map_location=map_location, weights_only=False)
        except Exception as e:  # truncated, corrupt, or from an incompatible version
            warnings.warn(f"ignoring unreadable checkpoint {path}: {type(e).__name__}: {e}",
                          stacklevel=2)
            return None

    # --- results ---
    def is_done(self, rid: str) -> bool:
        """True if the run finished and its result is readable (a diverged run is done too: it is
        never run again). A broken run (DONE, but no readable result) is not done."""
        return (self._dir(rid) / "DONE").exists() and self._check_finished(rid) is None

    def is_broken(self, rid: str) -> bool:
        """True if DONE exists but the run's files do not hold a readable result."""
        return self.broken_reason(rid) is not None

    def broken_reason(self, rid: str) -> str | None:
        """Why a finished run is broken (one line naming the file), or None if it is not."""
        if not (self._dir(rid) / "DONE").exists():
            return None
        return self._check_finished(rid)

    def _signature(self, d: Path) -> tuple:
        sig = []
        for name in _RESULT_FILES:
            try:
                st = (d / name).stat()
                sig.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                sig.append(None)
        return tuple(sig)

    def _check_finished(self, rid: str) -> str | None:
        """None if the finished run's DONE, config.json, metrics.json and curves.json are sound,
        else what is wrong. Cached while none of the files changes."""
        d = self._dir(rid)
        sig = self._signature(d)
        cached = self._checked.get(rid)
        if cached is not None and cached[0] == sig:
            return cached[1]
        reason = None
        try:
            self._finished_docs(rid)
        except StoreError as e:
            reason = self._why(rid, e)
        self._checked[rid] = (sig, reason)
        return reason

    def _why(self, rid: str, err: StoreError) -> str:
        """The part of a "corrupted run directory <dir>: ..." message after the directory."""
        prefix = f"corrupted run directory {self._dir(rid)}: "
        text = str(err)
        return text[len(prefix):] if text.startswith(prefix) else text

    def _finished_docs(self, rid: str) -> tuple[dict, dict, dict]:
        """(config.json, metrics.json, DONE) of a finished run, checked, and curves.json checked to
        be a JSON object: StoreError naming the file otherwise."""
        d = self._dir(rid)

        def bad(msg: str) -> StoreError:
            return StoreError(f"corrupted run directory {d}: {msg}")

        done = self._read_json(rid, "DONE")
        if not isinstance(done, dict):
            raise bad("DONE is not a JSON object")
        doc = self._read_json(rid, "config.json")
        if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
            raise bad("config.json has no config")
        if doc.get("run_id", rid) != rid:
            raise bad(f"config.json is for run {doc.get('run_id')!r}")
        metrics = self._read_json(rid, "metrics.json")
        if not isinstance(metrics, dict):
            raise bad("metrics.json is not a JSON object")
        for key in REQUIRED_METRICS:
            if not isinstance(metrics.get(key), str):
                raise bad(f"metrics.json has no {key!r}")
        if not isinstance(self._read_json(rid, "curves.json"), dict):
            raise bad("curves.json is not a JSON object")
        return doc, metrics, done

    def divergence(self, rid: str) -> dict | None:
        """For a done run whose training diverged: {"step", "reason"}; None otherwise."""
        if not self.is_done(rid):
            return None
        metrics = self._read_json(rid, "metrics.json")
        found = diverged(metrics)
        if found is None:
            return None
        if found["step"] is None or found.get("from_curves"):
            try:
                curves = self._read_json(rid, "curves.json")
            except StoreError:
                curves = {}
            step = _first_bad_step(curves, metrics)
            if step is not None:
                found["step"] = step
        found.pop("from_curves", None)
        return found

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
        d = self._dir(rid)
        return (d / "FAILED").exists() and not self.is_done(rid)

    def failure(self, rid: str) -> str | None:
        """The reason recorded by `fail`, or None."""
        try:
            return (self._dir(rid) / "FAILED").read_bytes().decode(errors="replace").strip()
        except OSError:
            return None

    def finish(self, rid: str, metrics: dict, curves: dict) -> bool:
        """Record a finished run: metrics.json, curves.json, then DONE; then drop the checkpoint
        and release this object's lease on it.

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
        write_json_atomic(d / "metrics.json", dict(metrics), strict=True)
        write_json_atomic(d / "curves.json", dict(curves), indent=None, strict=True)  # long lists: compact
        write_json_atomic(d / "DONE", {"time": time.time(), "host": _hostname(), "pid": os.getpid()},
                          strict=True)
        for name in ("FAILED", "checkpoint.pt"):
            try:
                (d / name).unlink()
            except FileNotFoundError:
                pass
        self.release(rid)  # DONE is written: nobody may claim it any more
        return True

    def fail(self, rid: str, reason: str) -> None:
        """Record that an attempt raised (for exceptions; a NaN run is finished, not failed)."""
        self._check_writable()
        d = self.run_dir(rid)
        if self.is_done(rid):
            return
        if (d / "FAILED").is_dir():
            _remove_path(d / "FAILED")
        _write_text_atomic(d / "FAILED", str(reason).rstrip("\n") + "\n")

    def _clear_broken(self, d: Path) -> None:
        """Delete a broken result: DONE first (the run is then unfinished to every reader), then
        the unreadable files. Called by the lease holder (or by `finish` of an unleased run)."""
        if not (d / "DONE").exists():
            return
        reason = self._check_finished(d.name)
        if reason is None:
            return
        log.warning("run %s was broken (%s): running it again", d, reason)
        for name in ("DONE", "metrics.json", "curves.json"):
            _remove_path(d / name)
        try:
            doc = self._read_json(d.name, "config.json")
            if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
                raise StoreError("no config")
        except StoreError:  # rewritten by the rerun (write_config)
            _remove_path(d / "config.json")

    def _read_json(self, rid: str, name: str) -> Any:
        d = self._dir(rid)
        try:
            text = (d / name).read_bytes().decode()
        except FileNotFoundError:
            raise StoreError(f"corrupted run directory {d}: {name} is missing") from None
        except OSError as e:
            raise StoreError(f"corrupted run directory {d}: {name} cannot be read: {e.strerror}") from None
        except UnicodeDecodeError:
            raise StoreError(f"corrupted run directory {d}: {name} is not valid JSON") from None
        if not text.strip():
            raise StoreError(f"corrupted run directory {d}: {name} is empty")
        try:
            return json.loads(text)
        except ValueError:
            raise StoreError(f"corrupted run directory {d}: {name} is not valid JSON") from None

    def _require_done(self, rid: str) -> None:
        reason = self.broken_reason(rid)
        if reason is not None:
            raise StoreError(f"run {self._dir(rid)} is broken: {reason}")
        if not self.is_done(rid):
            raise StoreError(f"run {self._dir(rid)} is not finished")

    def load_metrics(self, rid: str) -> dict:
        self._require_done(rid)
        return self._read_json(rid, "metrics.json")

    def load_curves(self, rid: str) -> dict:
        self._require_done(rid)
        return self._read_json(rid, "curves.json")

    # --- leases ---
    def _lease_path(self, rid: str) -> Path:
        return self._dir(rid) / "lease"

    def _read_lease(self, path: Path) -> tuple[dict | None, float | None]:
        """(content or None if unreadable, mtime or None if the file is gone). An empty file younger
        than EMPTY_LEASE_GRACE reads as {} (being written: a holder with a fresh heartbeat)."""
        try:
            mtime = path.stat().st_mtime
            blob = path.read_bytes()
            if not blob and time.time() - mtime < EMPTY_LEASE_GRACE:
                return {}, mtime
            lease = json.loads(blob)
            return (lease if isinstance(lease, dict) else None), mtime
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError):
            try:
                return None, path.stat().st_mtime
            except OSError:
                return None, None

    def _is_stale(self, lease: dict | None, mtime: float, timeout: float | None = None) -> bool:
        if lease is None:
            return True  # unreadable: it names no holder that could still be alive
        if _same_machine(lease):
            try:
                return not _pid_alive(int(lease["pid"]), lease.get("start"))
            except (KeyError, TypeError, ValueError):
                pass
        heartbeat = mtime
        if isinstance(lease.get("time"), (int, float)) and math.isfinite(lease["time"]):
            heartbeat = max(heartbeat, float(lease["time"]))
        return time.time() - heartbeat > (self.lease_timeout if timeout is None else timeout)

    def lease_info(self, rid: str) -> dict | None:
        """The lease on a run if it is live, else None."""
        lease, mtime = self._read_lease(self._lease_path(rid))
        if mtime is None or self._is_stale(lease, mtime):
            return None
        return lease or {}

    def claim(self, rid: str, owner: str = "") -> bool:
        """Take the run for this process; False if it is done or someone else holds a live lease."""
        self._check_writable()
        d = self.run_dir(rid)
        if self.is_done(rid):
            return False
        path = self._lease_path(rid)
        if rid in self._leases and self.heartbeat(rid):
            return True  # already ours
        token = uuid.uuid4().hex
        doc = {"owner": str(owner), "host": _hostname(), "boot": _boot_id(), "pid": os.getpid(),
               "start": _proc_start(os.getpid()), "time": time.time(), "token": token}
        for _ in range(4):  # each round: create, or break a stale lease (or a dead breaker's lock)
            if self._create_exclusive(path, _dumps(doc)):
                break
            lease, mtime = self._read_lease(path)
            if mtime is None:
                continue  # released meanwhile: try again
            if not self._is_stale(lease, mtime) or not self._break(path, lease):
                return False
        else:
            return False
        self._leases[rid] = token
        if self.is_done(rid):  # finished by the previous holder just before it released
            self.release(rid)
            return False
        self._remove_orphans(d)
        self._clear_broken(d)
        return True

    def _remove_orphans(self, d: Path) -> None:
        """Delete temp files a killed writer left in run directory `d` (we hold its lease, so no
        one else writes there; another contender's lease temp file is left unless it is old)."""
        for p in d.glob(".*.tmp"):
            try:
                if not p.name.startswith(".lease.") or time.time() - p.stat().st_mtime > 60:
                    p.unlink()
            except FileNotFoundError:
                pass

    def _create_exclusive(self, path: Path, blob: bytes) -> bool:
        """Create `path` with content `blob` if it does not exist, atomically; False if it exists."""
        fd, tmp = tempfile.mkstemp(prefix=".lease.", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, _FILE_MODE)
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)  # atomic, fails if `path` exists: the classic NFS-safe lock
                return True
            except FileExistsError:
                return False
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                    raise
            try:  # no hard links here: exclusive create (a reader may briefly see it empty)
                fdl = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, _FILE_MODE)
            except FileExistsError:
                return False
            with os.fdopen(fdl, "wb") as fh:
                fh.write(blob)
                fh.flush()
                os.fsync(fh.fileno())
            return True
        finally:
            os.unlink(tmp)

    def _break(self, path: Path, seen: dict | None) -> bool:
        """Delete the stale lease `seen` at `path`. True if the name may now be contended for.

        Breakers serialise on an exclusive lock file beside the lease, and under it delete the
        lease only after re-reading it and finding the same stale token. So a lease created by a
        winner is never deleted by a slower contender that saw the old one.
        """
        lock = path.with_name("lease.break")
        me = _dumps({"host": _hostname(), "boot": _boot_id(), "pid": os.getpid(),
                     "start": _proc_start(os.getpid()), "time": time.time()})
        if not self._create_exclusive(lock, me):
            held, mtime = self._read_lease(lock)
            if mtime is not None and self._is_stale(held, mtime, BREAK_LOCK_TIMEOUT):
                self._remove_if_same(lock, held)  # a breaker died inside its few milliseconds
                return True
            return False  # someone else is breaking it; they (or the exclusive create) win
        try:
            current, mtime = self._read_lease(path)
            if mtime is None:
                return True  # released meanwhile
            if (current or {}).get("token") != (seen or {}).get("token") \
                    or not self._is_stale(current, mtime):
                return False
            path.unlink()
            return True
        finally:
            lock.unlink()

    def _remove_if_same(self, path: Path, seen: dict | None) -> None:
        """Remove `path` if it still holds `seen`: rename it aside first (one remover wins), check,
        and put it back if it was replaced meanwhile."""
        aside = path.with_name(f"{path.name}.stale.{uuid.uuid4().hex}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return
        got, _ = self._read_lease(aside)
        if got != seen:
            try:
                os.link(aside, path)
            except OSError:
                pass
        os.unlink(aside)

    def _still_ours(self, rid: str) -> bool:
        """False only if this object took a lease on `rid` and the lease file now has another token."""
        token = self._leases.get(rid)
        if token is None:
            return True
        lease, mtime = self._read_lease(self._lease_path(rid))
        return mtime is None or lease is None or lease.get("token") == token

    def heartbeat(self, rid: str) -> bool:
        """Refresh this process's lease on `rid`; False if it is not (or no longer) ours."""
        token = self._leases.get(rid)
        if token is None:
            return False
        path = self._lease_path(rid)
        try:
            os.utime(path)
        except FileNotFoundError:
            return False
        lease, _ = self._read_lease(path)
        return lease is not None and lease.get("token") == token

    def release(self, rid: str) -> None:
        """Drop this process's lease on `rid` (a lease someone else holds is left alone)."""
        token = self._leases.pop(rid, None)
        if token is None:
            return
        path = self._lease_path(rid)
        lease, _ = self._read_lease(path)
        if lease is not None and lease.get("token") == token:
            self._remove_if_same(path, lease)

    def held(self) -> list[str]:
        """Run ids this object holds leases on."""
        return sorted(self._leases)

    # --- sweeps ---
    def _manifest_path(self, name: str) -> Path:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise StoreError(f"bad sweep name {name!r}: use letters, digits, '.', '_' and '-'")
        return self.sweeps_root / f"{name}.json"

    def write_manifest(self, name: str, run_ids: Iterable[str]) -> Path:
        """Record which runs the sweep `name` wants (replacing an earlier manifest of that name)."""
        self._check_writable()
        path = self._manifest_path(name)
        ids = sorted(set(run_ids))
        for rid in ids:
            self._dir(rid)  # validates
        try:
            if json.loads(path.read_text())["run_ids"] == ids:
                return path
        except (OSError, ValueError, KeyError, TypeError):
            pass
        write_json_atomic(path, {"name": name, "run_ids": ids, "time": time.time()}, strict=True)
        return path

    def load_manifest(self, name: str) -> list[str]:
        path = self._manifest_path(name)
        try:
            return list(json.loads(path.read_text())["run_ids"])
        except FileNotFoundError:
            raise StoreError(f"no sweep {name!r} in store {self.root}") from None
        except (OSError, ValueError, KeyError, TypeError):
            raise StoreError(f"corrupted sweep manifest {path}") from None

    def manifests(self) -> list[str]:
        return sorted(p.stem for p in self.sweeps_root.glob("*.json") if _NAME_RE.match(p.stem))

    def run_state(self, rid: str) -> str:
        """One of RUN_STATES: 'done', 'diverged' (finished, training diverged), 'broken' (DONE but
        no readable result), 'running' (live lease), 'failed', 'pending'."""
        d = self._dir(rid)
        if (d / "DONE").exists():
            if self._check_finished(rid) is not None:
                return "broken"
            return "diverged" if self.divergence(rid) is not None else "done"
        if self.lease_info(rid) is not None:
            return "running"
        if (d / "FAILED").exists():
            return "failed"
        return "pending"

    def _sweep_ids(self, name: str, strict: bool) -> list[str] | None:
        """The manifest's run ids; a corrupted manifest raises if `strict`, else warns and gives None."""
        try:
            ids = self.load_manifest(name)
            for rid in ids:
                self._dir(rid)
            return ids
        except StoreError as e:
            if strict:
                raise
            warnings.warn(f"skipping sweep {name!r}: {e}", BrokenRunWarning, stacklevel=3)
            return None

    def status(self, sweep: str | None = None):
        """pandas.DataFrame, one row per sweep manifest (or just `sweep`), indexed by sweep name:
        total, then a count per state of RUN_STATES. A corrupted manifest is skipped with a
        warning (or raises StoreError when it is the `sweep` asked for)."""
        import pandas as pd

        names = [sweep] if sweep is not None else self.manifests()
        rows = []
        for name in names:
            ids = self._sweep_ids(name, strict=sweep is not None)
            if ids is None:
                continue
            counts = dict.fromkeys(RUN_STATES, 0)
            for rid in ids:
                counts[self.run_state(rid)] += 1
            rows.append({"sweep": name, "total": len(ids), **counts})
        cols = ["sweep", "total", *RUN_STATES]
        return pd.DataFrame(rows, columns=cols).set_index("sweep")

    def problems(self, sweep: str | None = None, states: Iterable[str] = ("diverged", "broken")) -> list[dict]:
        """`run_info` of every run in `states` among the sweep's runs (default: every manifest's)."""
        names = [sweep] if sweep is not None else self.manifests()
        ids: set[str] = set()
        for name in names:
            ids.update(self._sweep_ids(name, strict=sweep is not None) or [])
        want = set(states)
        out = []
        for rid in sorted(ids):
            info = self.run_info(rid)
            if info["state"] in want:
                out.append(info)
        return out

    # --- collecting results ---
    def collect(self, sweep: str | None = None, arrays: str = "json"):
        """One row per finished run: run_id, every config field, its state, then the metrics.

        state is "done" or "diverged" (then diverged_step and diverged_reason say where and why;
        see `divergence`; NaN for a done run). Scalar metrics (numbers, strings, bools; null as NaN) become columns.
        Array- or dict-valued metrics are JSON-encoded strings in a column of the same name when
        `arrays="json"` (parse with json.loads, or DuckDB's json functions) and left out when
        `arrays="drop"`. A metric whose name is a config field, "run_id" or a state column is
        renamed "metric_<name>". `sweep` restricts to that manifest's runs. Reads only: the store
        is never modified. A broken run (DONE, but its files hold no readable result) is skipped
        with a BrokenRunWarning naming it.
        """
        import pandas as pd

        if arrays not in ("json", "drop"):
            raise StoreError(f"arrays must be 'json' or 'drop', got {arrays!r}")
        ids = self._sweep_ids(sweep, strict=True) if sweep is not None else self.run_ids()
        rows, config_cols, metric_cols = [], {}, {}
        state_cols = ("state", "diverged_step", "diverged_reason")
        for rid in sorted(set(ids)):
            d = self._dir(rid)
            if not (d / "DONE").exists():
                continue
            try:
                doc, metrics, _ = self._finished_docs(rid)
            except StoreError as e:
                warnings.warn(f"skipping broken run {d}: {self._why(rid, e)}",
                              BrokenRunWarning, stacklevel=2)
                continue
            div = diverged(metrics)
            if div is not None:
                div = self.divergence(rid) or div
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

    def collect_to(self, path: str | os.PathLike, sweep: str | None = None, arrays: str = "json"):
        """collect() written to `path`: .parquet or .csv by suffix (atomically). Returns the frame."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".parquet", ".csv"):
            raise StoreError(f"cannot write {path}: use a .parquet or .csv suffix")
        df = self.collect(sweep=sweep, arrays=arrays)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if suffix == ".parquet":
                _write_atomic(path, lambda fh: df.to_parquet(fh, index=False))
            else:
                blob = df.to_csv(index=False).encode()
                _write_atomic(path, lambda fh: fh.write(blob))
        except OSError as e:
            raise StoreError(f"cannot write {path}: {e.strerror or e}") from None
        except (TypeError, ValueError) as e:  # pyarrow: a column mixing types across runs
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise StoreError(f"cannot write {path}: {msg}") from None
        return df


def _num(x: Any) -> float:
    """x as a float; NaN where it is no number (null, a string)."""
    if isinstance(x, bool):
        return float("nan")
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def diverged(metrics: dict) -> dict | None:
    """{"step", "reason"} if a finished run's metrics say its training diverged, else None: it
    stopped on a non-finite loss (stopped_because "nan" or "diverged"), or its final loss R is
    not finite or above DIVERGED_FACTOR x Var(y*). step is the run's last step (Store.divergence
    finds the first logged step where the loss went bad)."""
    steps = metrics.get("steps")
    step = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
    why = metrics.get("stopped_because")
    if why in ("nan", "diverged"):
        reason = metrics.get("diverged_reason")
        return {"step": step, "reason": reason if isinstance(reason, str) and reason
                else "the training loss became non-finite"}
    if "R" not in metrics:
        return None
    R, var = _num(metrics["R"]), _num(metrics.get("var_ystar"))
    if not math.isfinite(R):
        return {"step": step, "reason": "the final loss R is not finite", "from_curves": True}
    if math.isfinite(var) and var > 0 and R > DIVERGED_FACTOR * var:
        return {"step": step, "reason": f"the final loss R = {R:.3g} is above {DIVERGED_FACTOR:.0e} x "
                                        f"Var(y*) = {var:.3g}", "from_curves": True}
    return None


def _first_bad_step(curves: Any, metrics: dict) -> int | None:
    """First logged step whose monitor loss is non-finite or above DIVERGED_FACTOR x Var(y*)."""
    if not isinstance(curves, dict):
        return None
    steps, losses = curves.get("step"), curves.get("loss")
    if not isinstance(steps, list) or not isinstance(losses, list):
        return None
    var = _num(metrics.get("var_ystar"))
    limit = DIVERGED_FACTOR * var if math.isfinite(var) and var > 0 else math.inf
    for st, loss in zip(steps, losses):
        v = _num(loss)
        if (not math.isfinite(v) or v > limit) and isinstance(st, int):
            return st
    return None


def _versions() -> dict:
    """Versions that a rerun needs, read from package metadata (importing torch is slow)."""
    from importlib.metadata import PackageNotFoundError, version

    import depthscale

    out = {"depthscale": depthscale.__version__, "python": sys.version.split()[0],
           "platform": platform.platform()}
    for pkg in ("torch", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


__all__ = ["Store", "StoreError", "BrokenRunWarning", "write_json_atomic", "save_torch_atomic",
           "DEFAULT_LEASE_TIMEOUT", "RUN_STATES", "REQUIRED_METRICS", "DIVERGED_FACTOR", "diverged"]
