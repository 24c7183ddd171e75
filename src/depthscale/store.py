"""The run store: one directory per run on a filesystem that many machines may share.

Layout under the store root::

    runs/<run_id>/config.json    the RunConfig, the run id, package versions, device
    runs/<run_id>/checkpoint.pt  the trainer's latest checkpoint (deleted once the run is done)
    runs/<run_id>/metrics.json   final measurements: scalars and small arrays
    runs/<run_id>/curves.json    training curves, each a list over logged steps
    runs/<run_id>/DONE           completion marker, written last: a run is done iff it exists
    runs/<run_id>/FAILED         the reason the last attempt raised (a retry may still finish)
    runs/<run_id>/lease          who is running it now (host, pid, heartbeat time)
    sweeps/<name>.json           manifest: the run ids a named sweep wants
    slurm/                       submitit logs of SLURM jobs

Every file is written atomically (temp file in the same directory, fsync, ``os.replace``), so a
reader sees the old content or the new one, never a part. A finished run is never re-run and
its files are never rewritten: ``finish`` and ``fail`` on a done run change nothing.

Leases. ``claim`` creates ``lease`` atomically and exclusively (a complete temp file hard-linked
into place, which fails if the name exists; ``O_CREAT|O_EXCL`` where links are unsupported);
both are atomic on local filesystems and on NFSv3+. The holder refreshes it with ``heartbeat``
(the file's mtime, plus a check that the token in it is still ours). A lease is stale when
- on this host (same hostname and boot id): its pid is dead, a zombie, or reused (the process
  start time differs);
- on another host: its heartbeat is older than ``lease_timeout`` seconds (default 600).
A stale lease is broken under a second exclusive lock file (``lease.break``): its holder re-reads
the lease, deletes it only if it still carries the stale token, and then contends for the name
like everyone else, the exclusive create deciding. So a lease a winner has just created is never
deleted by a slower contender that saw the old one. (No file protocol can fence a holder that
was judged stale but is still alive; if that happens ``finish`` sees the token changed and
discards the late result, so a run is still recorded once.)
A done run is never claimed: the claimer checks ``DONE`` after taking the lease, and
``finish`` writes ``DONE`` before the lease is released.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import re
import socket
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Iterable

from depthscale.config import ConfigError, RunConfig, run_id

DEFAULT_LEASE_TIMEOUT = 600.0  # seconds without heartbeat after which another host may take a run
BREAK_LOCK_TIMEOUT = 30.0  # seconds after which a lock left by a breaker that died is removed
RUN_STATES = ("done", "running", "failed", "pending")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class StoreError(Exception):
    """A store that cannot be used as asked; the message is one line naming the path."""


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


def _dumps(obj: Any, indent: int | None = 1) -> bytes:
    # NaN/inf are kept (Python's json writes NaN, Infinity): a diverged run records them as they are.
    return (json.dumps(obj, indent=indent, default=_to_jsonable) + "\n").encode()


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 1) -> None:
    """Write `obj` as JSON to `path` atomically (numpy/torch values converted to plain numbers)."""
    blob = _dumps(obj, indent)
    _write_atomic(Path(path), lambda fh: fh.write(blob))


def save_torch_atomic(path: str | os.PathLike, obj: Any) -> None:
    """torch.save `obj` to `path` atomically."""
    import torch

    _write_atomic(Path(path), lambda fh: torch.save(obj, fh))


def _write_text_atomic(path: Path, text: str) -> None:
    blob = text.encode()
    _write_atomic(path, lambda fh: fh.write(blob))


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
        write_json_atomic(path, doc)

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
        save_torch_atomic(self.run_dir(rid) / "checkpoint.pt", obj)

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
        return (self._dir(rid) / "DONE").exists()

    def is_failed(self, rid: str) -> bool:
        """True if the last attempt failed and no attempt has finished."""
        d = self._dir(rid)
        return (d / "FAILED").exists() and not (d / "DONE").exists()

    def failure(self, rid: str) -> str | None:
        """The reason recorded by `fail`, or None."""
        try:
            return (self._dir(rid) / "FAILED").read_text().strip()
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
        if (d / "DONE").exists():
            warnings.warn(f"run {d} is already done; keeping the first result", stacklevel=2)
            return False
        if not self._still_ours(rid):
            warnings.warn(f"lost the lease on run {d} to another process; discarding this result",
                          stacklevel=2)
            return False
        write_json_atomic(d / "metrics.json", dict(metrics))
        write_json_atomic(d / "curves.json", dict(curves), indent=None)  # long lists: compact
        write_json_atomic(d / "DONE", {"time": time.time(), "host": _hostname(), "pid": os.getpid()})
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
        if (d / "DONE").exists():
            return
        _write_text_atomic(d / "FAILED", str(reason).rstrip("\n") + "\n")

    def _read_json(self, rid: str, name: str) -> Any:
        d = self._dir(rid)
        try:
            text = (d / name).read_text()
        except FileNotFoundError:
            raise StoreError(f"corrupted run directory {d}: {name} is missing") from None
        except OSError as e:
            raise StoreError(f"corrupted run directory {d}: {name} cannot be read: {e.strerror}") from None
        try:
            return json.loads(text)
        except ValueError:
            raise StoreError(f"corrupted run directory {d}: {name} is not valid JSON") from None

    def _require_done(self, rid: str) -> None:
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
        """(content or None if unreadable, mtime or None if the file is gone)."""
        try:
            mtime = path.stat().st_mtime
            return json.loads(path.read_text()), mtime
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError):
            try:
                return None, path.stat().st_mtime
            except OSError:
                return None, None

    def _is_stale(self, lease: dict | None, mtime: float, timeout: float | None = None) -> bool:
        if lease is not None and _same_machine(lease):
            try:
                return not _pid_alive(int(lease["pid"]), lease.get("start"))
            except (KeyError, TypeError, ValueError):
                pass
        heartbeat = mtime
        if lease is not None and isinstance(lease.get("time"), (int, float)):
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
        if (d / "DONE").exists():
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
        if (d / "DONE").exists():  # finished by the previous holder just before it released
            self.release(rid)
            return False
        self._remove_orphans(d)
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
        write_json_atomic(path, {"name": name, "run_ids": ids, "time": time.time()})
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
        """One of 'done', 'running' (live lease), 'failed', 'pending'."""
        d = self._dir(rid)
        if (d / "DONE").exists():
            return "done"
        if self.lease_info(rid) is not None:
            return "running"
        if (d / "FAILED").exists():
            return "failed"
        return "pending"

    def status(self, sweep: str | None = None):
        """pandas.DataFrame, one row per sweep manifest (or just `sweep`), indexed by sweep name:
        total, done, running, failed, pending."""
        import pandas as pd

        names = [sweep] if sweep is not None else self.manifests()
        rows = []
        for name in names:
            counts = dict.fromkeys(RUN_STATES, 0)
            ids = self.load_manifest(name)
            for rid in ids:
                counts[self.run_state(rid)] += 1
            rows.append({"sweep": name, "total": len(ids), **counts})
        cols = ["sweep", "total", *RUN_STATES]
        return pd.DataFrame(rows, columns=cols).set_index("sweep")

    # --- collecting results ---
    def collect(self, sweep: str | None = None, arrays: str = "json"):
        """One row per finished run: run_id, every config field, then the metrics.

        Scalar metrics (numbers, strings, bools, None) become columns. Array- or dict-valued
        metrics are JSON-encoded strings in a column of the same name when `arrays="json"` (parse
        with json.loads, or DuckDB's json functions) and left out when `arrays="drop"`. A metric
        whose name is a config field or "run_id" is renamed "metric_<name>". `sweep` restricts
        to that manifest's runs. Reads only: the store is never modified. A done run whose
        config.json or metrics.json is missing or unreadable raises StoreError naming it.
        """
        import pandas as pd

        if arrays not in ("json", "drop"):
            raise StoreError(f"arrays must be 'json' or 'drop', got {arrays!r}")
        ids = self.load_manifest(sweep) if sweep is not None else self.run_ids()
        rows, config_cols, metric_cols = [], {}, {}
        for rid in sorted(set(ids)):
            if not self.is_done(rid):
                continue
            doc = self._read_json(rid, "config.json")
            metrics = self._read_json(rid, "metrics.json")
            if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
                raise StoreError(f"corrupted run directory {self._dir(rid)}: config.json has no config")
            if not isinstance(metrics, dict):
                raise StoreError(f"corrupted run directory {self._dir(rid)}: metrics.json is not an object")
            row = {"run_id": rid}
            for key, value in doc["config"].items():
                config_cols[key] = None
                row[key] = value
            for key, value in metrics.items():
                col = f"metric_{key}" if key in row or key == "run_id" or key in config_cols else key
                if isinstance(value, (list, dict)):
                    if arrays == "drop":
                        continue
                    value = json.dumps(value)
                metric_cols[col] = None
                row[col] = value
            rows.append(row)
        cols = ["run_id", *config_cols, *(c for c in metric_cols if c not in config_cols)]
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


__all__ = ["Store", "StoreError", "write_json_atomic", "save_torch_atomic", "DEFAULT_LEASE_TIMEOUT",
           "RUN_STATES"]
