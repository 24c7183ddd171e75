"""The store's cache of what is recomputed from finished runs: <store>/cache/per_context/<run_id>.npz,
a run's per-context arrays (its final measurement writes them, Store.cache_per_context; runs.per_context
computes them where they are missing), and <store>/cache/floors/<name>.npz, the softmax-ensemble floor
and best cosine stacks on one evaluation set (analysis.paired.floor_on_eval: they depend only on the
contexts, so the sweep's idle workers compute them). Derived numbers, never a result: a
file that is missing, unreadable, over MAX_CACHE_BYTES, of another CACHE_VERSION, of another
params.pt (its signature) or of the wrong shape is recomputed, not trusted. Written atomically,
never through a symbolic link; nothing is written into a run's directory."""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np

from depthscale.base.atomic import loads_json, read_regular, write_atomic

PER_CONTEXT_DIR = ("cache", "per_context")  # under the store root
FLOORS_DIR = ("cache", "floors")
CACHE_VERSION = 1  # bump when what is cached changes: older files are then recomputed
MAX_CACHE_BYTES = 256 * 2**20  # a cache file, by its apparent size, before a byte is read
_RUN_ID_RE = re.compile(r"^[0-9a-f]{16}$")  # what config.run_id gives; any other name is not cached
_FLOOR_NAME_RE = re.compile(r"^[0-9a-f]{24}-[0-9a-f]{12}$")  # paired.floor_cache_name: the set, the arguments


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
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):  # missing, a link, too large, stale or damaged
        return None
    return out if all(v is None or v.shape == (n,) for v in out.values()) else None


def _real_dirs(root: Path, parts=PER_CONTEXT_DIR) -> Path | None:
    """cache/per_context/ (or `parts`) under `root`, made where missing; None if any part is a link or
    no directory."""
    d = root
    for part in parts:
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


def floor_path(root: str | os.PathLike, name: str) -> Path | None:
    """Where the floor of cache name `name` is kept (None for a name floor_cache_name does not give)."""
    if not isinstance(name, str) or not _FLOOR_NAME_RE.match(name):
        return None
    return Path(root).joinpath(*FLOORS_DIR, f"{name}.npz")


def floor_names(root: str | os.PathLike, prefix: str) -> list[str]:
    """The cached floors' names that start with `prefix` (one evaluation set's, any arguments)."""
    d = Path(root).joinpath(*FLOORS_DIR)
    try:
        names = [p.stem for p in d.glob(f"{prefix}*.npz")] if d.is_dir() and not d.is_symlink() else []
    except OSError:
        return []
    return sorted(n for n in names if _FLOOR_NAME_RE.match(n))


def read_floor(root: str | os.PathLike, name: str) -> dict | None:
    """The floor cached under `name` as write_floor was given it (numbers and lists from its JSON,
    numpy arrays, {L: array} for "sq_err_stack") and "seconds", what it took to compute; None where
    there is no such file that holds one."""
    path = floor_path(root, name)
    if path is None:
        return None
    try:
        with np.load(io.BytesIO(read_regular(path, max_bytes=MAX_CACHE_BYTES))) as z:
            if int(z["version"]) != CACHE_VERSION:
                return None
            out = loads_json(bytes(z["scalars"]), dict)
            out["seconds"] = float(z["seconds"])
            for k in z.files:
                if k.startswith("a_"):
                    out[k[2:]] = z[k]
                elif k.startswith("stack_"):
                    out.setdefault("sq_err_stack", {})[int(k[6:])] = z[k]
    except (OSError, KeyError, ValueError, EOFError, TypeError, zipfile.BadZipFile):  # missing, a link, damaged
        return None
    out.setdefault("sq_err_stack", {})
    return out


def write_floor(root: str | os.PathLike, name: str, res: dict, seconds: float = 0.0) -> bool:
    """Cache the floor `res` (floor_on_eval's dict: JSON-able values, numpy arrays, "sq_err_stack"
    {L: array}) under `name` with the `seconds` it took, atomically; False where nothing was written."""
    path = floor_path(root, name)
    if path is None or not Path(root).is_dir():
        return False
    arrays = {f"a_{k}": v for k, v in res.items() if isinstance(v, np.ndarray)}
    arrays.update({f"stack_{int(L)}": v for L, v in (res.get("sq_err_stack") or {}).items()})
    rest = {k: v for k, v in res.items() if not isinstance(v, np.ndarray) and k != "sq_err_stack"}
    z = dict(version=np.int64(CACHE_VERSION), seconds=np.float64(seconds),
             scalars=np.frombuffer(json.dumps(rest).encode(), dtype=np.uint8), **arrays)
    try:
        if _real_dirs(Path(root), FLOORS_DIR) is None:
            return False
        write_atomic(path, lambda fh: np.savez(fh, **z))
    except (OSError, TypeError, ValueError):
        return False
    return True


__all__ = ["floor_path", "floor_names", "read_floor", "write_floor", "FLOORS_DIR", "params_signature", "per_context_path", "read_per_context", "write_per_context", "PER_CONTEXT_DIR", "CACHE_VERSION",
           "MAX_CACHE_BYTES"]
