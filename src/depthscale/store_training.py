"""The files a run writes while it trains, as methods of the Store (`store.Store` mixes them in):
its checkpoint (checkpoint.pt, the state a killed run resumes from) and its live curves
(curves.jsonl, one JSON row per evaluation, appended as it comes). Both are deleted by
`Store.finish` once the run is done; `read_curves` reads a run's curves as far as they go, finished
or not."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

from depthscale.atomic import (FILE_MODE, RefusedPickle, dumps, load_torch_data, read_regular, remove_unless_file,
                               save_torch_atomic, write_text_atomic)
from depthscale.errors import StoreError
from depthscale.store_verify import curve_row_problem, file_signature

CURVES_LIVE = "curves.jsonl"  # a training run's curve rows, appended at each evaluation
RENAMED_CURVES = {"loss": "R"}  # curve names of earlier versions -> today's


def _row_line(row: dict) -> str:
    return dumps(row, indent=None).decode()


def renamed_curves(curves):
    """`curves` with the names of earlier versions renamed to today's (RENAMED_CURVES)."""
    if isinstance(curves, dict) and any(k in curves for k in RENAMED_CURVES):
        return {RENAMED_CURVES.get(k, k): v for k, v in curves.items()}
    return curves


class TrainingFiles:
    """The Store's methods for a training run's checkpoint and live curves (they use the Store's
    run_path, run_dir, is_done, load_curves and _check_writable)."""

    # --- checkpoints ---
    def save_checkpoint(self, rid: str, obj: Any) -> None:
        """torch.save `obj` (a dict) as the run's checkpoint, atomically. Refused once the run is done."""
        if self.is_done(rid):
            raise StoreError(f"run {self.run_path(rid)} is finished; its files are never rewritten")
        path = self.run_dir(rid) / "checkpoint.pt"
        remove_unless_file(path)
        save_torch_atomic(path, obj)

    def load_checkpoint(self, rid: str, map_location: Any = "cpu") -> Any | None:
        """The run's checkpoint, or None if there is none. It is read as data only
        (atomic.load_torch_data: tensors, numbers, strings, lists and dicts): a pickle that would
        import or call anything is refused unread, with one warning line naming the file, and the
        run starts again from step 0 (nothing in the file runs). An unreadable checkpoint
        (truncated, corrupt, of another layout) warns the same way and gives None."""
        path = self.run_path(rid) / "checkpoint.pt"
        if not os.path.lexists(path):
            return None
        try:  # read_regular: a FIFO or a directory at the name is unreadable, never a hang
            ck = load_torch_data(path, map_location)
            why = checkpoint_problem(ck)
        except RefusedPickle as e:
            warnings.warn(f"ignoring checkpoint {e}; the run starts again", stacklevel=2)
            return None
        except Exception as e:  # truncated, corrupt, or from an incompatible version
            why = f"{type(e).__name__}: {_first_line(e)}"
        if why is not None:
            warnings.warn(f"ignoring unreadable checkpoint {path}: {why}", stacklevel=2)
            return None
        return ck

    # --- live curves: appended while a run trains ---
    def start_curves(self, rid: str, curves: dict) -> None:
        """(Re)start the run's live curves with the rows of `curves` (a dict of equal-length
        lists: empty for a fresh run, a checkpoint's for a resumed one), so that rows logged after
        the checkpoint by a killed attempt are dropped, never doubled. Atomic."""
        if self.is_done(rid):
            raise StoreError(f"run {self.run_path(rid)} is finished; its files are never rewritten")
        keys = list(curves)
        rows = [dict(zip(keys, vals)) for vals in zip(*(curves[k] for k in keys))] if keys else []
        path = self.run_dir(rid) / CURVES_LIVE
        remove_unless_file(path)  # a directory (or a FIFO) squatting on the name
        write_text_atomic(path, "".join(_row_line(r) for r in rows))

    def append_curves(self, rid: str, rows: list[dict]) -> None:
        """Append curve rows (one JSON object a line) to the run's live curves, flushed."""
        self._check_writable()
        # O_NOFOLLOW: a link put at the name is never appended through (start_curves replaced it)
        fd = os.open(self.run_dir(rid) / CURVES_LIVE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                     FILE_MODE)
        with open(fd, "a", encoding="utf-8") as fh:
            fh.write("".join(_row_line(r) for r in rows))
            fh.flush()

    def read_curves(self, rid: str) -> dict | None:
        """The run's curves as far as they go, finished or not: a done (or diverged) run's
        curves.json, else the rows its training has appended so far (a partly written last row is
        left out); None when there are none or the run is broken. Keys as in curves.json.
        A complete row of curves.jsonl that is malformed (a step that is no integer, a value that
        is no number) raises StoreError naming it: the rows are not the run's."""
        for _ in range(2):  # the run may finish (and drop its live file) while this reads
            if (self.run_path(rid) / "DONE").exists():
                return self.load_curves(rid) if self.is_done(rid) else None
            try:
                rows = _live_rows(self.run_path(rid) / CURVES_LIVE)
            except FileNotFoundError:
                continue
            keys = list(dict.fromkeys(k for r in rows for k in r))
            return renamed_curves({k: [r.get(k) for r in rows] for k in keys}) if rows else None
        return None

    def live_curves_problem(self, rid: str) -> str | None:
        """What is wrong with an unfinished run's curves.jsonl (a malformed row), or None. Cached
        while the file's inode, size and mtime stay the same (status asks twice for each run)."""
        path = self.run_path(rid) / CURVES_LIVE
        sig = file_signature(path)
        if sig is None:  # no file (or none that can be looked up): no rows, nothing wrong
            return None
        cache = self._live_checked  # Store's, beside its cache of finished runs' verdicts
        if rid in cache and cache[rid][0] == sig:
            return cache[rid][1]
        try:
            _live_rows(path)
            why = None
        except FileNotFoundError:
            return None
        except StoreError as e:
            why = str(e)
        cache[rid] = (sig, why)
        return why


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else ""


# a checkpoint (Trainer.checkpoint): its entries and what each must be
_CHECKPOINT_FIELDS = {"step": int, "params": dict, "adam": dict, "state": dict, "config": dict, "pack": list}


def checkpoint_problem(ck: Any) -> str | None:
    """What keeps `ck` (a checkpoint as loaded) from being a checkpoint, or None. Any checkpoint
    is a dict; one that names a config (the trainer resumes only those: training.run_pack) is
    one the trainer wrote: step (an integer >= 0), params and Adam's moments m and v (names ->
    tensors), Adam's step count t (a number), the run's bookkeeping (state: a dict with string
    keys), its config and its pack (a list of configs)."""
    import torch

    if not isinstance(ck, dict):
        return f"it holds {type(ck).__name__}, not a checkpoint"
    if "config" not in ck:
        return None
    for key, kind in _CHECKPOINT_FIELDS.items():
        if not isinstance(ck.get(key), kind) or isinstance(ck.get(key), bool):
            return f"its {key!r} is missing or not {kind.__name__}"
    if ck["step"] < 0:
        return f"its step {ck['step']} is negative"
    adam = ck["adam"]
    for name, tensors in (("params", ck["params"]), ("adam m", adam.get("m")), ("adam v", adam.get("v"))):
        if not isinstance(tensors, dict) or not all(isinstance(k, str) and isinstance(t, torch.Tensor)
                                                    for k, t in tensors.items()):
            return f"its {name} are not named tensors"
    if isinstance(adam.get("t"), bool) or not isinstance(adam.get("t"), (int, float)):
        return "its adam t is not a number"
    if not all(isinstance(k, str) for k in ck["state"]):
        return "its state has a key that is not a string"
    return None


_DECODER = json.JSONDecoder()


def _live_rows(path) -> list[dict]:
    """The complete rows of a curves.jsonl (a row cut short by a kill is left out; an unreadable
    file has none); StoreError naming a complete row that is malformed. FileNotFoundError if
    there is no file."""
    try:
        text = read_regular(path).decode(errors="replace")
    except FileNotFoundError:
        raise
    except OSError:
        return []
    rows = []
    decode = _DECODER.raw_decode  # json.loads without its two wrapping calls (a pending run: ~10^3 rows)
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip(" \t\n\r")  # JSON's whitespace, which json.loads skips at both ends
        try:
            row, end = decode(line)
        except ValueError:  # a row cut short by a kill
            continue
        if end != len(line):  # json.loads' "Extra data"
            continue
        why = curve_row_problem(row)
        if why is not None:
            raise StoreError(f"{CURVES_LIVE} row {n}: {why}")
        rows.append(row)
    return rows
