"""The store's cache of what is recomputed from finished runs: <store>/cache/per_context/<run_id>.npz,
a run's per-context arrays (its final measurement writes them, Store.cache_per_context; runs.per_context
computes them where they are missing). Derived numbers, never a result: a
file that is missing, unreadable, over MAX_CACHE_BYTES, of another CACHE_VERSION, of another
params.pt (its signature) or of the wrong shape is recomputed, not trusted. Written atomically,
never through a symbolic link; nothing is written into a run's directory."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import numpy as np

from depthscale.base.atomic import read_regular, write_atomic

PER_CONTEXT_DIR = ("cache", "per_context")  # under the store root
CACHE_VERSION = 1  # bump when what is cached changes: older files are then recomputed
MAX_CACHE_BYTES = 256 * 2**20  # a cache file, by its apparent size, before a byte is read
_RUN_ID_RE = re.compile(r"^[0-9a-f]{16}$")  # what config.run_id gives; any other name is not cached


def per_context_path(root: str | os.PathLike, run_id: str) -> Path | None:
    """Where a run's per-context arrays are cached (None for a name that is not a run id)."""
    if not isinstance(run_id, str) or not _RUN_ID_RE.match(run_id):
        return None
    return Path(root).joinpath(*PER_CONTEXT_DIR, f"{run_id}.npz")


def params_signature(run_dir: str | os.PathLike) -> tuple:
    """(mtime in ns, size) of the run's params.pt: the stored model cached arrays were computed from;
    () where there is none."""
    try:
        st = (Path(run_dir) / "params.pt").stat()
    except OSError:
        return ()
    return (st.st_mtime_ns, st.st_size)


def read_per_context(root: str | os.PathLike, run_id: str, signature: tuple, n: int) -> dict | None:
    """The cached arrays ("sq_err", "ystar", "sel_E" or None) of `run_id` computed from the params.pt
    of `signature`, each of shape (n,); None where there is no such file that holds them."""
    path = per_context_path(root, run_id)
    if path is None or not signature:
        return None
    try:
        with np.load(io.BytesIO(read_regular(path, max_bytes=MAX_CACHE_BYTES))) as z:
            if int(z["version"]) != CACHE_VERSION or tuple(z["signature"].tolist()) != tuple(signature):
                return None
            out = {"sq_err": z["sq_err"], "ystar": z["ystar"], "sel_E": z["sel_E"] if bool(z["has_sel"]) else None}
    except (OSError, KeyError, ValueError, EOFError):  # missing, a link, too large, stale or damaged
        return None
    return out if all(v is None or v.shape == (n,) for v in out.values()) else None


def _real_dirs(root: Path) -> Path | None:
    """cache/per_context/ under `root`, made where missing; None if any part is a link or no directory."""
    d = root
    for part in PER_CONTEXT_DIR:
        d = d / part
        if d.is_symlink():
            return None
        d.mkdir(exist_ok=True)
        if d.is_symlink() or not d.is_dir():
            return None
    return d


def write_per_context(root: str | os.PathLike, run_id: str, signature: tuple, arrays: dict) -> bool:
    """Cache `arrays` of `run_id` (computed from the params.pt of `signature`) atomically; False where
    nothing was written (a store we may read but not write, a link in the way)."""
    path = per_context_path(root, run_id)
    if path is None or not signature or not Path(root).is_dir():
        return False
    z = dict(version=np.int64(CACHE_VERSION), signature=np.asarray(signature, dtype=np.int64),
             sq_err=arrays["sq_err"], ystar=arrays["ystar"], has_sel=np.bool_(arrays["sel_E"] is not None),
             sel_E=arrays["sel_E"] if arrays["sel_E"] is not None else np.zeros(0))
    try:
        if _real_dirs(Path(root)) is None:
            return False
        write_atomic(path, lambda fh: np.savez(fh, **z))  # replaces a link at the name, never writes through it
    except OSError:
        return False
    return True


__all__ = ["params_signature", "per_context_path", "read_per_context", "write_per_context", "PER_CONTEXT_DIR", "CACHE_VERSION",
           "MAX_CACHE_BYTES"]
