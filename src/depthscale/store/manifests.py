"""A store's sweep manifests (``sweeps/<name>.json``): which run ids a named sweep wants. A sweep
writes its manifest before it trains (so `status` counts its runs from the start); `depthscale
train` adds its runs to the manifest "train". Written atomically; a damaged one is named."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable

from depthscale.base.atomic import DamagedJSON, read_json, remove_unless_file, write_json_atomic
from depthscale.base.errors import StoreError
from depthscale.store.store import NAME_RE, Store


def path(store: Store, name: str) -> Path:
    """The manifest file of the sweep `name` (StoreError for a name that is not one)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise StoreError(f"bad sweep name {name!r}: use letters, digits, '.', '_' and '-'")
    return store.sweeps_root / f"{name}.json"


def write(store: Store, name: str, run_ids: Iterable[str]) -> Path:
    """Record which runs the sweep `name` wants (replacing an earlier manifest of that name)."""
    store.check_writable()
    store.check_own_dirs()  # sweeps/ made a link after the store was opened
    where = path(store, name)
    ids = sorted(set(run_ids))
    for rid in ids:
        store.run_path(rid)  # validates
    try:
        if read_json(where, dict).get("run_ids") == ids:
            return where
    except (OSError, ValueError):
        pass
    remove_unless_file(where)  # a directory or a FIFO at the manifest's name
    write_json_atomic(where, {"name": name, "run_ids": ids, "time": time.time()}, strict=True)
    return where


def add(store: Store, name: str, run_ids: Iterable[str]) -> Path:
    """Add runs to the manifest `name` (created if missing), keeping the ones it lists."""
    store.check_writable()
    try:
        have = load(store, name)
    except StoreError:  # missing (or unreadable: started again)
        have = []
    return write(store, name, [*have, *run_ids])


def load(store: Store, name: str) -> list[str]:
    """The run ids the sweep `name` wants; StoreError naming the manifest if it is missing or
    damaged (unreadable, not JSON, nested too deeply, run_ids not a list of strings)."""
    where = path(store, name)
    try:
        ids = read_json(where, dict).get("run_ids")  # never blocks on a FIFO
    except FileNotFoundError:
        raise StoreError(f"no sweep {name!r} in store {store.root}") from None
    except OSError as e:
        raise StoreError(f"corrupted sweep manifest {where}: it cannot be read: {e.strerror or e}") from None
    except DamagedJSON as e:
        raise StoreError(f"corrupted sweep manifest {where}: it {e}") from None
    if not isinstance(ids, list) or not all(isinstance(rid, str) for rid in ids):  # a hand edit
        raise StoreError(f"corrupted sweep manifest {where}: its run_ids is not a list of run ids")
    return ids


def names(store: Store) -> list[str]:
    """The sweeps that have a manifest in the store, sorted."""
    return sorted(p.stem for p in store.sweeps_root.glob("*.json") if NAME_RE.match(p.stem))


__all__ = ["path", "write", "add", "load", "names"]
