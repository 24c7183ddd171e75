"""Where the time goes: a cheap accumulating phase timer, its records in the store, and the table
of the report's provenance (issue 15).

    with phase("forward"):
        ...

adds the wall seconds of the block to the phase "forward" of every open `record()` (and of the
process-wide total). Phases nest and are *exclusive*: time spent in an inner phase is counted
there and not in the outer one, so the phases of a record add up to the time it covered (less
what no phase covered). A phase costs two `perf_counter` calls and a few list operations: 6 µs measured on a busy
machine, four per training step (< 0.1% of a step).

On a GPU the timer reads the host clock without synchronising: kernels still running when a phase
ends are counted in a later one. The numbers are meant for the CPU jobs.

The training workers (`executors.execute_pack`) write one record per pack execution into
`<store>/timing/` (`write_pack_record`, atomic; a resumed pack writes a second record); the report
reads them back (`read_records`) and shows seconds per experiment and phase (`experiment_table`).
"""

from __future__ import annotations

import errno
import math
import os
import socket
import time
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable

from depthscale.base.atomic import DamagedJSON, read_json, write_json_atomic

TRAIN_PHASES = ("sampling", "forward", "backward", "optimiser", "evaluation", "checkpoint")
BUILD_PHASES = ("theory", "figures", "report")
PHASES = TRAIN_PHASES + BUILD_PHASES
TIMING_DIR = "timing"

_perf = time.perf_counter
_stack: list[list] = []  # open phases: [name, seconds spent in phases nested inside it]
_records: list[dict] = []  # open records: phase -> exclusive seconds
_total: dict[str, float] = {}  # every phase of this process since it started


PROFILE_RANGES = False  # True: each phase is also a torch.profiler range (benchmarks/roofline.py)


@contextmanager
def phase(name: str):
    """Count the wall time of the block to phase `name` (exclusive of nested phases)."""
    frame = [name, 0.0]
    _stack.append(frame)
    rng = None
    if PROFILE_RANGES:
        import torch

        rng = torch.autograd.profiler.record_function(name)
        rng.__enter__()
    t0 = _perf()
    try:
        yield
    finally:
        if rng is not None:
            rng.__exit__(None, None, None)
        elapsed = _perf() - t0
        _stack.pop()
        own = elapsed - frame[1]
        if _stack:
            _stack[-1][1] += elapsed
        _total[name] = _total.get(name, 0.0) + own
        for rec in _records:
            rec[name] = rec.get(name, 0.0) + own


class Record:
    """The phases counted while a `record()` block was open; `phases` (name -> seconds) and
    `wall_seconds` (the block's wall time)."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.wall_seconds = float("nan")

    @property
    def unattributed_seconds(self) -> float:
        return self.wall_seconds - sum(self.phases.values())


@contextmanager
def record():
    """Collect the phases counted inside the block (records may nest; each sees its own share)."""
    rec = Record()
    _records.append(rec.phases)
    t0 = _perf()
    try:
        yield rec
    finally:
        rec.wall_seconds = _perf() - t0
        for i in range(len(_records) - 1, -1, -1):  # by identity: equal dicts are not the same record
            if _records[i] is rec.phases:
                del _records[i]
                break


def add(name: str, seconds: float) -> None:
    """Count `seconds` measured elsewhere (e.g. theory another process computed, results.Theory)
    to phase `name` of every open record and of this process's total, as if a phase had run."""
    _total[name] = _total.get(name, 0.0) + seconds
    for rec in _records:
        rec[name] = rec.get(name, 0.0) + seconds


def timed(fn, name: str):
    """`fn` with every call counted to phase `name`."""
    def wrapper(*args, **kwargs):
        with phase(name):
            return fn(*args, **kwargs)

    wrapper.__wrapped__ = fn
    return wrapper


def totals() -> dict[str, float]:
    """Every phase counted in this process so far (seconds)."""
    return dict(_total)


# ---------------------------------------------------------------- the store's records

def timing_dir(store_root: str | os.PathLike) -> Path:
    return Path(store_root) / TIMING_DIR


def write_pack_record(store_root: str | os.PathLike, configs: list, rec: Record, threads: int | None = None) -> Path:
    """Write the phases of one pack execution (runs `configs`) to <store>/timing/ atomically; the
    file name is unique per execution (first run id, pid, time)."""
    d = timing_dir(store_root)
    if d.is_symlink():  # nothing of a store is written through a link
        raise OSError(errno.ELOOP, "timing/ is a symbolic link; no record is written through it", str(d))
    d.mkdir(parents=True, exist_ok=True)
    c0 = configs[0]
    body = {
        "runs": [c.run_id for c in configs],
        "pack": {"model": c0.model, "task": c0.task, "k": c0.k, "d": c0.d, "P": c0.P, "batch": c0.batch,
                 "depths": sorted({c.L for c in configs}), "runs": len(configs), "preset": c0.preset},
        "phases": {k: round(v, 4) for k, v in rec.phases.items()},
        "wall_seconds": round(rec.wall_seconds, 4),
        "threads": threads,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "finished": time.time(),
    }
    path = d / f"{c0.run_id}-{os.getpid()}-{time.time_ns()}.json"
    write_json_atomic(path, body, strict=True)
    return path


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def record_problem(rec) -> str | None:
    """What keeps `rec` (a JSON document) from being a pack record (one line: "it is ...", "its ..."),
    or None: an object whose runs is a list of run ids, phases an object of seconds, wall_seconds
    a number (each if present)."""
    if not isinstance(rec, dict):
        return "it is not a JSON object"
    runs, phases, wall = rec.get("runs", []), rec.get("phases", {}), rec.get("wall_seconds", 0.0)
    if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
        return "its runs is not a list of run ids"
    if not isinstance(phases, dict) or not all(_number(v) for v in phases.values()):
        return "its phases is not an object of seconds"
    if wall is not None and not _number(wall):
        return "its wall_seconds is not a number"
    return None


def read_records(store_root: str | os.PathLike) -> list[dict]:
    """Every pack record of the store. A damaged one (unreadable, no regular file, not JSON, nested
    too deeply, over atomic.MAX_JSON_BYTES, or not a record: record_problem) is skipped with one
    warning naming it; the others are read."""
    d = timing_dir(store_root)
    out = []
    for f in sorted(d.glob("*.json")) if d.is_dir() and not d.is_symlink() else ():
        try:
            rec = read_json(f)  # never follows a link, never blocks on a FIFO
            why = record_problem(rec)
        except (OSError, DamagedJSON) as e:
            why = f"it cannot be read: {e.strerror or e}" if isinstance(e, OSError) else f"it {e}"
        if why is None:
            out.append(rec)
        else:
            warnings.warn(f"skipping the damaged timing record {f}: {why}", stacklevel=2)
    return out


def experiment_table(records: Iterable[dict], experiments: dict[str, set],
                     build: dict[str, dict] | None = None) -> dict:
    """Seconds per experiment and phase. `experiments` maps an experiment id (in report order) to
    its run ids; a pack record is counted under the first experiment that holds its first run
    (runs shared by several experiments are trained once, and counted once). `build` maps an
    experiment id to its build phases (theory, figures, report). Returns {"columns", "rows",
    "total", "packs", "unassigned_packs"}: rows are (experiment, {phase: seconds}, packs)."""
    rows: dict[str, dict] = {e: {} for e in experiments}
    packs: Counter = Counter()
    unassigned = 0
    for rec in records:
        first = (rec.get("runs") or [None])[0]
        exp = next((e for e, ids in experiments.items() if first in ids), None)
        if exp is None:
            unassigned += 1
            continue
        packs[exp] += 1
        for k, v in (rec.get("phases") or {}).items():
            if isinstance(v, (int, float)):
                rows[exp][k] = rows[exp].get(k, 0.0) + v
        rows[exp]["wall"] = rows[exp].get("wall", 0.0) + float(rec.get("wall_seconds") or 0.0)
    for e, ph in (build or {}).items():  # build rows of their own (e.g. claims) come last
        row = rows.setdefault(e, {})
        for k, v in ph.items():
            row[k] = row.get(k, 0.0) + v
    cols = [p for p in PHASES if any(p in r for r in rows.values())]
    total = {c: sum(r.get(c, 0.0) for r in rows.values()) for c in cols + ["wall"]}
    return {"columns": cols, "rows": [(e, r, packs[e]) for e, r in rows.items() if r],
            "total": total, "packs": sum(packs.values()), "unassigned_packs": unassigned}


def _s(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def markdown_lines(table: dict) -> list[str]:
    """The table as Markdown lines (seconds; 'train wall' is the packs' wall time, summed)."""
    cols = table["columns"]
    if not table["rows"]:
        return []
    out = ["| experiment | " + " | ".join(cols) + " | train wall (packs) |",
           "|---|" + "---:|" * (len(cols) + 1)]
    for e, ph, n in table["rows"]:
        out.append(f"| {e} | " + " | ".join(_s(ph.get(c)) for c in cols) + f" | {_s(ph.get('wall'))} ({n}) |")
    t = table["total"]
    out.append("| **all** | " + " | ".join(f"**{_s(t[c])}**" for c in cols)
               + f" | **{_s(t['wall'])}** ({table['packs']}) |")
    return out


def html_table(table: dict) -> str:
    import html

    if not table["rows"]:
        return ""
    cols = table["columns"]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["experiment"] + cols + ["train wall (packs)"])
    body = []
    for e, ph, n in table["rows"] + [("all", table["total"], table["packs"])]:
        cells = [html.escape(e)] + [_s(ph.get(c)) for c in cols] + [f"{_s(ph.get('wall'))} ({n})"]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


__all__ = ["phase", "record", "Record", "add", "totals", "write_pack_record", "read_records", "record_problem", "experiment_table",
           "markdown_lines", "html_table", "timing_dir", "timed", "PHASES", "TRAIN_PHASES", "BUILD_PHASES"]
