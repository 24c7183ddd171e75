"""Which exceptions are the user's mistake: every one derives from UserError, and the CLI reports
exactly those as one line with exit code 2 (set DEPTHSCALE_DEBUG=1 for the traceback). Any other
exception is a bug in depthscale and shows as one.

Bad input to a library call raises InputError, which is also a ValueError (so `except ValueError`
keeps working); config.ConfigError, arguments.UsageError and memory.MemoryRefused are UserErrors too.
A write the filesystem refuses (disk full, over quota, read-only, no permission) raises
StorageError, which is also the OSError it was (atomic.write_atomic converts it).
"""

from __future__ import annotations

import errno
import os


class UserError(Exception):
    """Something the user can fix (input, a path, an extra to install); the message is one line."""


class InputError(UserError, ValueError):
    """A bad value passed to a depthscale function; the message names it."""


class StoreError(UserError):
    """A store that cannot be used as asked (store.Store); the message is one line naming the path."""


class MissingExtraError(UserError, RuntimeError):
    """An optional dependency is not installed; the message names the extra to install."""


class SubmissionError(UserError, RuntimeError):
    """A cluster refused a submission (e.g. sbatch failed); the message is its first line."""


# what the filesystem answers when a write cannot be done where it was asked: full, over quota,
# read-only, not permitted, too large
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG})


class StorageError(UserError, OSError):
    """A write the filesystem refused (errno in STORAGE_ERRNOS). Also an OSError with its errno
    and filename, so `except OSError` handlers treat it as before; the message is one line:
    "cannot write: no space left on device (<path>)"."""

    def __str__(self) -> str:
        why = (self.strerror or os.strerror(self.errno or 0)).lower()
        return f"cannot write: {why} ({self.filename})" if self.filename else f"cannot write: {why}"


def is_storage_error(exc: BaseException) -> bool:
    """True for an OSError whose errno says the filesystem refused a write (STORAGE_ERRNOS)."""
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def storage_error(exc: OSError, path: str | os.PathLike | None = None) -> StorageError:
    """`exc` as a StorageError naming `path` (else the path the OSError names)."""
    if isinstance(exc, StorageError):
        return exc
    where = path if path is not None else exc.filename
    return StorageError(exc.errno, exc.strerror or os.strerror(exc.errno), None if where is None else str(where))


def first_refused(exc: BaseException) -> StorageError:
    """The earliest refused write in the chain of `exc` (a refused write of the error's record,
    or the conversion to a StorageError, come later) as a StorageError naming its path."""
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__context__
    refused = [e for e in chain if is_storage_error(e)]
    return storage_error(([e for e in refused if e.filename is not None] or refused)[-1])


__all__ = ["UserError", "InputError", "StoreError", "MissingExtraError", "SubmissionError", "StorageError",
           "STORAGE_ERRNOS", "is_storage_error", "storage_error", "first_refused"]
