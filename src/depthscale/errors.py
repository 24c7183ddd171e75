"""Which exceptions are the user's input, reported as one line with exit code 2 by the CLI.
Set DEPTHSCALE_DEBUG=1 to get the traceback instead."""

from __future__ import annotations

import os

from depthscale.config import ConfigError


class MissingExtraError(RuntimeError):
    """An optional dependency is not installed; the message names the extra to install."""


class SubmissionError(RuntimeError):
    """A cluster refused a submission (e.g. sbatch failed); the message is its first line."""


def is_user_error(exc: BaseException) -> bool:
    if os.environ.get("DEPTHSCALE_DEBUG"):
        return False
    names = {cls.__name__ for cls in type(exc).__mro__}
    return isinstance(exc, (ConfigError, ValueError, FileNotFoundError, PermissionError, NotADirectoryError,
                            IsADirectoryError, FileExistsError, MissingExtraError,
                            SubmissionError)) \
        or "StoreError" in names
