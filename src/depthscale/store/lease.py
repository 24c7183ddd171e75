"""Leases: which process runs a run now, on a filesystem that many machines may share.

A lease is a small JSON file (owner, host, boot id, pid, process start time, heartbeat time and a
random token) at a path the store chooses (``runs/<run_id>/lease``). The protocol:

- `take` creates the lease atomically and exclusively (a complete temp file hard-linked into
  place, which fails if the name exists; ``O_CREAT|O_EXCL`` where links are unsupported); both
  are atomic on local filesystems and on NFSv3+. It returns the lease's token, or None.
- The holder refreshes it with `refresh` (the file's mtime, plus a check that the token in it is
  still ours) and gives it up with `drop`.
- A lease is stale (`is_stale`) when
  - on this host (same hostname and boot id): its pid is dead, a zombie, or reused (the process
    start time differs);
  - on another host: its heartbeat is older than the timeout (the store's, default 600 s); a
    heartbeat time (the file's mtime or the time the lease reports) more than the timeout ahead of
    the reader's clock is no heartbeat (a clock that far off, or an edit, would hold the run forever);
  - anywhere: its content cannot be read (a complete lease appears at once, so an unreadable one
    names no holder; an empty file gets ``EMPTY_LEASE_GRACE`` seconds, the window of the
    ``O_EXCL`` fallback).
- A stale lease is broken under a second exclusive lock file (``lease.break``): its holder
  re-reads the lease, deletes it only if it still carries the stale token, and then contends for
  the name like everyone else, the exclusive create deciding. So a lease a winner has just
  created is never deleted by a slower contender that saw the old one. (No file protocol can
  fence a holder that was judged stale but is still alive; `still_held` lets the holder find out
  before it records a result, so a run is still recorded once.)

The process identity (`identity`, `pid_alive`, `same_machine`) is read from /proc on Linux; where
it cannot be read, a lease on this host is judged by its heartbeat like a remote one.

`Leases` is a store's leases as one process holds them (``Store.leases``): claim, heartbeat,
release, and who holds a run now.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import socket
import tempfile
import time
import uuid
import warnings
from pathlib import Path

from depthscale.base.atomic import FILE_MODE, MAX_JSON_BYTES, dumps, loads_json, read_regular

DEFAULT_LEASE_TIMEOUT = 600.0  # seconds without heartbeat after which another host may take a run
BREAK_LOCK_TIMEOUT = 30.0  # seconds after which a lock left by a breaker that died is removed
EMPTY_LEASE_GRACE = 1.0  # seconds an empty lease file counts as being written (O_EXCL fallback)
TEMP_PREFIX = ".lease."  # temp files of `create_exclusive` (a run directory's cleanup spares fresh ones)


# --- process identity -------------------------------------------------------------------------

def hostname() -> str:
    return socket.gethostname()


def boot_id() -> str | None:
    """This boot of this machine (Linux): two machines misconfigured with one hostname, or one
    machine before and after a reboot, are told apart by it."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (Linux), None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode(errors="replace")
        return stat.rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def proc_start(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (Linux), None where /proc cannot tell."""
    fields = _proc_stat(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def identity() -> dict:
    """This process: host, boot id, pid and start time (what a lease records of its holder)."""
    pid = os.getpid()
    return {"host": hostname(), "boot": boot_id(), "pid": pid, "start": proc_start(pid)}


def same_machine(lease: dict) -> bool:
    """Was `lease` written on this machine, in this boot?"""
    if lease.get("host") != hostname():
        return False
    boot = boot_id()
    return boot is None or lease.get("boot") in (None, boot)


def pid_alive(pid: int, start: int | None) -> bool:
    """Is `pid` a live (non-zombie) process on this host, and the same one that started at `start`?"""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    fields = _proc_stat(pid)
    try:
        if fields is not None:
            if fields[0] == "Z":
                return False
            if start is not None and int(fields[19]) != start:
                return False  # pid reused by another process
    except (IndexError, ValueError):
        pass
    return True


# --- one lease file ---------------------------------------------------------------------------

def read_lease(path: Path) -> tuple[dict | None, float | None]:
    """(content or None if unreadable, mtime or None if the file is gone). An empty file younger
    than EMPTY_LEASE_GRACE reads as {} (being written: a holder with a fresh heartbeat)."""
    try:
        mtime = path.stat().st_mtime
        blob = read_regular(path, max_bytes=MAX_JSON_BYTES)  # a FIFO or a directory at the name: unreadable, never a hang
        if not blob and time.time() - mtime < EMPTY_LEASE_GRACE:
            return {}, mtime
        return loads_json(blob, dict), mtime  # (DamagedJSON: unreadable, a ValueError)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError):
        try:
            return None, path.stat().st_mtime
        except OSError:
            return None, None


def is_stale(lease: dict | None, mtime: float, timeout: float) -> bool:
    """Whether a lease read by `read_lease` names no live holder (module docstring)."""
    if lease is None:
        return True  # unreadable: it names no holder that could still be alive
    if same_machine(lease):
        try:
            return not pid_alive(int(lease["pid"]), lease.get("start"))
        except (KeyError, TypeError, ValueError):
            pass
    now = time.time()
    beats = [mtime] + ([float(lease["time"])] if isinstance(lease.get("time"), (int, float))
                       and not isinstance(lease["time"], bool) and math.isfinite(lease["time"]) else [])
    beats = [t for t in beats if t <= now + timeout]  # bounded by the reader's clock (module docstring)
    return not beats or now - max(beats) > timeout


def holder(path: Path, timeout: float) -> dict | None:
    """The lease at `path` if it is live, else None."""
    lease, mtime = read_lease(path)
    if mtime is None or is_stale(lease, mtime, timeout):
        return None
    return lease or {}


def create_exclusive(path: Path, blob: bytes) -> bool:
    """Create `path` with content `blob` if it does not exist, atomically; False if it exists."""
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
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
            fdl = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
        except FileExistsError:
            return False
        with os.fdopen(fdl, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        return True
    finally:
        os.unlink(tmp)


def remove_if_same(path: Path, seen: dict | None) -> None:
    """Remove `path` if it still holds `seen`: rename it aside first (one remover wins), check,
    and put it back if it was replaced meanwhile."""
    aside = path.with_name(f"{path.name}.stale.{uuid.uuid4().hex}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    got, _ = read_lease(aside)
    if got != seen:
        try:
            os.link(aside, path)
        except OSError:
            pass
    _unlink_any(aside)


def _unlink_any(path: Path) -> None:
    """Remove the file at `path`, or a directory squatting on the name (renamed aside first, so
    the name is free at once); nothing if it is gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        aside = path.with_name(f"{path.name}.stale.{uuid.uuid4().hex}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return
        shutil.rmtree(aside, ignore_errors=True)


def break_stale(path: Path, seen: dict | None, timeout: float) -> bool:
    """Delete the stale lease `seen` at `path`. True if the name may now be contended for.

    Breakers serialise on an exclusive lock file beside the lease, and under it delete the
    lease only after re-reading it and finding the same stale token. So a lease created by a
    winner is never deleted by a slower contender that saw the old one.
    """
    lock = path.with_name("lease.break")
    if not create_exclusive(lock, dumps({**identity(), "time": time.time()})):
        held, mtime = read_lease(lock)
        if mtime is not None and is_stale(held, mtime, BREAK_LOCK_TIMEOUT):
            remove_if_same(lock, held)  # a breaker died inside its few milliseconds
            return True
        return False  # someone else is breaking it; they (or the exclusive create) win
    try:
        current, mtime = read_lease(path)
        if mtime is None:
            return True  # released meanwhile
        if (current or {}).get("token") != (seen or {}).get("token") \
                or not is_stale(current, mtime, timeout):
            return False
        _unlink_any(path)  # a directory at the lease's name is unreadable, so stale: removed too
        return True
    finally:
        lock.unlink()


# --- holding a lease --------------------------------------------------------------------------

def take(path: Path, owner: str, timeout: float) -> str | None:
    """Create the lease at `path` for this process, breaking a stale one; its token, or None if
    someone else holds a live lease (or wins the race for a stale one)."""
    token = uuid.uuid4().hex
    me = identity()
    doc = {"owner": str(owner), "host": me["host"], "boot": me["boot"], "pid": me["pid"],
           "start": me["start"], "time": time.time(), "token": token}
    for _ in range(4):  # each round: create, or break a stale lease (or a dead breaker's lock)
        if create_exclusive(path, dumps(doc)):
            return token
        lease, mtime = read_lease(path)
        if mtime is None:
            continue  # released meanwhile: try again
        if not is_stale(lease, mtime, timeout) or not break_stale(path, lease, timeout):
            return None
    return None


def refresh(path: Path, token: str) -> bool:
    """Heartbeat: touch the lease at `path`; False if it is gone or no longer carries `token`."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    lease, _ = read_lease(path)
    return lease is not None and lease.get("token") == token


def still_held(path: Path, token: str) -> bool:
    """False only if the lease file at `path` is readable and carries another token."""
    lease, mtime = read_lease(path)
    return mtime is None or lease is None or lease.get("token") == token


def drop(path: Path, token: str) -> None:
    """Remove the lease at `path` if it carries `token` (a lease someone else holds is left alone)."""
    lease, _ = read_lease(path)
    if lease is not None and lease.get("token") == token:
        remove_if_same(path, lease)


# --- a store's leases ---------------------------------------------------------------------------

class Leases:
    """The leases of a store's runs (``runs/<run_id>/lease``) as one process holds them (the
    store's `leases`): `claim` takes a run's lease, `heartbeat` refreshes it, `release` drops it,
    `held` lists those this object holds and `holder` says who runs a run now. A lease held on
    another host stays valid for the store's lease_timeout seconds without a heartbeat."""

    def __init__(self, store) -> None:
        self.store = store
        self._tokens: dict[str, str] = {}  # run id -> token of a lease this object holds

    def _path(self, rid: str) -> Path:
        return self.store.run_path(rid) / "lease"

    def holder(self, rid: str) -> dict | None:
        """The lease on a run if it is live, else None."""
        return holder(self._path(rid), self.store.lease_timeout)

    def claim(self, rid: str, owner: str = "") -> bool:
        """Take the run for this process; False if it is done or someone else holds a live lease,
        or (with a warning naming it) if its directory is one this process may not read or write
        (its permissions): that run is skipped, the others go on. Once taken, the run's directory
        is made ready to run it again (Store.prepare_rerun)."""
        store = self.store
        store.check_writable()
        path = store.run_path(rid)
        why = store.run_dir_problem(rid)
        if why is not None and os.path.isdir(path) and not os.path.islink(path):  # a real directory: not ours to replace
            warnings.warn(f"skipping run {path}: {why} (fix its permissions, then run again)", stacklevel=2)
            return False
        store.run_dir(rid)
        if store.is_done(rid):
            return False
        if rid in self._tokens and self.heartbeat(rid):
            return True  # already ours
        try:
            token = take(self._path(rid), owner, store.lease_timeout)
        except PermissionError as e:  # a directory we may read but not write
            warnings.warn(f"skipping run {path}: its lease cannot be written: {e.strerror} (fix its permissions, "
                          f"then run again)", stacklevel=2)
            return False
        if token is None:
            return False
        self._tokens[rid] = token
        if store.is_done(rid):  # finished by the previous holder just before it released
            self.release(rid)
            return False
        store.prepare_rerun(rid)
        return True

    def still_ours(self, rid: str) -> bool:
        """False only if this object took a lease on `rid` and the lease file now has another token."""
        token = self._tokens.get(rid)
        return token is None or still_held(self._path(rid), token)

    def heartbeat(self, rid: str) -> bool:
        """Refresh this process's lease on `rid`; False if it is not (or no longer) ours."""
        token = self._tokens.get(rid)
        return token is not None and refresh(self._path(rid), token)

    def release(self, rid: str) -> None:
        """Drop this process's lease on `rid` (a lease someone else holds is left alone)."""
        token = self._tokens.pop(rid, None)
        if token is not None:
            drop(self._path(rid), token)

    def held(self) -> list[str]:
        """Run ids this object holds leases on."""
        return sorted(self._tokens)


__all__ = ["Leases", "take", "refresh", "drop", "still_held", "holder", "read_lease", "is_stale", "break_stale",
           "create_exclusive", "remove_if_same", "identity", "hostname", "boot_id", "proc_start",
           "pid_alive", "same_machine", "DEFAULT_LEASE_TIMEOUT", "BREAK_LOCK_TIMEOUT",
           "EMPTY_LEASE_GRACE", "TEMP_PREFIX"]
