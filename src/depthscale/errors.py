"""Which exceptions are the user's mistake: every one derives from UserError, and the CLI reports
exactly those as one line with exit code 2 (set DEPTHSCALE_DEBUG=1 for the traceback). Any other
exception is a bug in depthscale and shows as one.

Bad input to a library call raises InputError, which is also a ValueError (so `except ValueError`
keeps working); config.ConfigError, arguments.UsageError and memory.MemoryRefused are UserErrors too.
"""

from __future__ import annotations


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


__all__ = ["UserError", "InputError", "StoreError", "MissingExtraError", "SubmissionError"]
