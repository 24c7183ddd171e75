"""Sweeps: expand a grid of configs, plan it against a store, execute it in packs.

A sweep is a list of RunConfigs. `plan` drops the runs already done, keeps this shard's share,
and groups the rest into packs (configs with equal `pack_key` that one call of the worker trains
together). Executing a pack claims its runs one by one in the store (a run someone else holds is
skipped, so the pack may shrink), calls the worker while a background thread heartbeats the
leases, and releases them. Any number of processes, on any number of machines, may execute the
same sweep against one store: each run is finished exactly once, and a killed sweep resumes
where it stopped when started again.

Executors: "inline" (this process), "process" (a local spawn pool, threads split between
workers; a worker exits when the sweep's process dies, even by SIGKILL), "slurm" (a submitit job
array; `pip install 'depthscale[slurm]'`). For hand-written sbatch arrays, give every array task
the same sweep and `shard=(task_id, n_tasks)`. Before anything runs, the packs' memory is
estimated (depthscale.memory) and a sweep that would not fit is refused.
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import json
import logging
import math
import os
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import fields
from pathlib import Path
from typing import Callable, Iterable, Sequence

from depthscale.config import PRESET_DEPTHS, ConfigError, RunConfig, make_config, run_id
from depthscale.errors import MissingExtraError, SubmissionError
from depthscale.store import Store

log = logging.getLogger(__name__)

EXECUTORS = ("inline", "process", "slurm")
COUNT_KEYS = ("ran", "skipped_done", "skipped_claimed", "failed")
SLURM_OPTIONS = ("partition", "time_min", "cpus", "gpus", "mem_gb", "array_parallelism", "wait",
                 "cluster", "folder", "additional")
_FLOAT_FIELDS = tuple(f.name for f in fields(RunConfig) if f.type in ("float", float))
_FIELD_NAMES = tuple(f.name for f in fields(RunConfig))


# --- grids -----------------------------------------------------------------------------------

def load_grid(path: str | os.PathLike) -> dict | list[dict]:
    """Read a grid from a .json or .toml file (see `expand_grid` for the format).

    A top-level key "grid" holding a list of tables is the union form; in TOML write it as
    ``[[grid]]`` tables.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            grid = json.loads(path.read_text())
        elif suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                try:
                    import tomli as tomllib
                except ModuleNotFoundError:
                    raise ConfigError(f"reading {path} needs Python >= 3.11 or `pip install tomli`") from None
            grid = tomllib.loads(path.read_text())
        else:
            raise ConfigError(f"grid file {path} must end in .json or .toml")
    except OSError as e:
        raise ConfigError(f"cannot read grid file {path}: {e.strerror or e}") from None
    except ValueError as e:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        if isinstance(e, ConfigError):
            raise
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"grid file {path} is not valid {suffix[1:].upper()}: {msg}") from None
    if isinstance(grid, dict) and set(grid) == {"grid"}:
        grid = grid["grid"]
    return grid


def expand_grid(grid: dict | Sequence[dict], preset: str = "cpu") -> list[RunConfig]:
    """The configs of a grid: the cartesian product of its values over `preset`'s defaults.

    Keys are RunConfig field names; each value is a scalar or a list of values. `depths` is
    accepted for `L`, and `L = "preset"` means the preset's depths (PRESET_DEPTHS). A `preset`
    key (scalar or list) overrides the `preset` argument. A list of such dicts is the union of
    their products. Order follows the keys and lists as written; duplicates are dropped.

    >>> grid = {"model": ["linear", "nonlinear"], "task": "difficult",
    ...         "a": [0, 0.5], "b": 0, "depths": [1, 2, 4], "seed": [0, 1]}
    >>> len(expand_grid(grid, preset="smoke"))
    24
    """
    if not isinstance(grid, (dict, list, tuple)):
        raise ConfigError(f"a grid must be a table of field = value(s) or a list of them, got {grid!r}")
    parts = [grid] if isinstance(grid, dict) else list(grid)
    if not parts:
        raise ConfigError("grid is empty")
    out: dict[str, RunConfig] = {}
    for part in parts:
        if not isinstance(part, dict):
            raise ConfigError(f"grid entries must be tables of field = value(s), got {part!r}")
        if not part:
            raise ConfigError("grid is empty (a table without keys): give at least one field")
        axes = _grid_axes(part, preset)
        names = list(axes)
        for combo in itertools.product(*axes.values()):
            values = dict(zip(names, combo))
            p = values.pop("preset", preset)
            if values.get("L") == "preset":
                raise ConfigError("L = \"preset\" must be the only value of L")
            cfg = make_config(p, **_coerce(values))
            out.setdefault(run_id(cfg), cfg)
    return list(out.values())


def _grid_axes(part: dict, preset: str) -> dict[str, list]:
    if "depths" in part and "L" in part:
        raise ConfigError("give the depths as either 'depths' or 'L', not both")
    axes = {}
    for key, value in part.items():
        name = "L" if key == "depths" else key
        if name not in _FIELD_NAMES:
            raise ConfigError(f"unknown grid key {key!r}")
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if not values:
            raise ConfigError(f"grid key {key!r} has an empty list")
        axes[name] = values
    if axes.get("L") == ["preset"]:
        presets = axes.get("preset", [preset])
        if len(presets) != 1 or presets[0] not in PRESET_DEPTHS:
            raise ConfigError(f"L = \"preset\" needs one known preset, got {presets!r}")
        axes["L"] = list(PRESET_DEPTHS[presets[0]])
    return axes


def _coerce(values: dict) -> dict:
    """Integers given for float fields become floats, so a=0 and a=0.0 are the same run."""
    return {k: float(v) if k in _FLOAT_FIELDS and isinstance(v, int) and not isinstance(v, bool) else v
            for k, v in values.items()}


# --- planning --------------------------------------------------------------------------------

def parse_shard(text: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """'i/n' (0 <= i < n) -> (i, n); a tuple is checked the same way; None stays None."""
    if text is None:
        return None
    if isinstance(text, str):
        m = re.fullmatch(r"(\d+)/(\d+)", text)
        if not m:
            raise ConfigError(f"shard must look like i/n with 0 <= i < n, got {text!r}")
        i, n = int(m.group(1)), int(m.group(2))
    else:
        try:
            i, n = text
        except (TypeError, ValueError):
            raise ConfigError(f"shard must be 'i/n' or a pair (i, n), got {text!r}") from None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (i, n)):
            raise ConfigError(f"shard must be a pair of integers, got {text!r}")
    if not 0 <= i < n:
        raise ConfigError(f"shard must be i/n with 0 <= i < n, got {i}/{n}")
    return i, n


def _shard_share(configs: Iterable[RunConfig], shard: tuple[int, int] | None) -> list[RunConfig]:
    """Deduplicated configs ordered by run id; with shard (i, n), positions p ≡ i (mod n)."""
    unique = {run_id(c): c for c in configs}
    ordered = [unique[rid] for rid in sorted(unique)]
    return ordered if shard is None else ordered[shard[0]::shard[1]]


def _default_pack_key(cfg: RunConfig) -> tuple:
    from depthscale.training import pack_key

    return pack_key(cfg)


def plan(configs: Iterable[RunConfig], store: Store | None, shard: tuple[int, int] | str | None = None,
         max_pack: int = 64, pack_key: Callable[[RunConfig], tuple] | None = None,
         retry_failed: bool = True) -> list[list[RunConfig]]:
    """Packs of the configs this process (shard) should run, in a deterministic order.

    Duplicates are dropped and the configs ordered by run id. The shard i/n keeps positions
    p ≡ i (mod n) of that ordering, taken before done runs are dropped, so every shard sees the
    same positions whenever it plans and no two shards ever get the same run. Then done runs
    (and failed ones unless `retry_failed`) are dropped, and the rest grouped by `pack_key`
    (default depthscale.training.pack_key) into packs of at most `max_pack`, split evenly.
    store None: nothing is done yet (a store that does not exist).
    """
    if not (isinstance(max_pack, int) and max_pack >= 1):
        raise ConfigError(f"max_pack must be an integer >= 1, got {max_pack!r}")
    shard = parse_shard(shard)
    key = pack_key or _default_pack_key
    ordered = _shard_share(configs, shard)
    todo = [c for c in ordered if store is None or (not store.is_done(run_id(c))
            and (retry_failed or not store.is_failed(run_id(c))))]
    groups: dict[tuple, list[RunConfig]] = {}
    for cfg in todo:
        groups.setdefault(key(cfg), []).append(cfg)
    packs = []
    for group in groups.values():
        n_packs = math.ceil(len(group) / max_pack)
        size, extra = divmod(len(group), n_packs)
        start = 0
        for j in range(n_packs):
            stop = start + size + (1 if j < extra else 0)
            packs.append(group[start:stop])
            start = stop
    return packs


# --- executing one pack ----------------------------------------------------------------------

def _resolve_worker(worker: Callable | str | None) -> Callable:
    """The worker callable: None -> depthscale.training.run_pack; 'module:function' is imported."""
    if worker is None:
        from depthscale.training import run_pack

        return run_pack
    if isinstance(worker, str):
        module, _, attr = worker.partition(":")
        if not attr:
            raise ConfigError(f"worker must be 'module:function', got {worker!r}")
        return getattr(importlib.import_module(module), attr)
    return worker


class _Heartbeat:
    """Background thread that refreshes the leases of `rids` every `interval` seconds."""

    def __init__(self, store: Store, rids: list[str], interval: float) -> None:
        self.store, self.rids, self.interval = store, rids, interval
        self._stop = threading.Event()
        self._lost: set[str] = set()
        self._thread = threading.Thread(target=self._loop, name="depthscale-heartbeat", daemon=True)

    def __enter__(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            for rid in self.rids:
                if rid in self._lost or self.store.is_done(rid):
                    continue
                try:
                    ok = self.store.heartbeat(rid)
                except OSError as e:  # a flaky shared filesystem: try again next beat
                    log.warning("heartbeat on run %s failed: %s", rid, e)
                    continue
                if not ok:
                    self._lost.add(rid)
                    log.warning("lost the lease on run %s; another process may run it too", rid)


def execute_pack(pack: list[RunConfig], store: Store | str, worker: Callable | str | None = None,
                 device: str = "cpu", progress: bool | None = None, owner: str = "") -> dict:
    """Claim the pack's runs, train the claimed ones with `worker`, release. Returns counts.

    An exception from the worker is recorded with `store.fail` for each claimed run it left
    unfinished; a run the worker neither finished nor failed is recorded as failed too.
    """
    if not isinstance(store, Store):
        store = Store(store)
    fn = _resolve_worker(worker)
    counts = dict.fromkeys(COUNT_KEYS, 0)
    owner = owner or f"sweep:{os.getpid()}"
    claimed = []
    for cfg in pack:
        rid = run_id(cfg)
        if store.is_done(rid):
            counts["skipped_done"] += 1
        elif store.claim(rid, owner):
            claimed.append(cfg)
        elif store.is_done(rid):  # finished by someone else since the plan
            counts["skipped_done"] += 1
        else:
            counts["skipped_claimed"] += 1
    if not claimed:
        return counts
    rids = [run_id(c) for c in claimed]
    before = {rid: _failed_stamp(store, rid) for rid in rids}  # FAILED of an earlier attempt

    def unrecorded(rid: str) -> bool:
        return not store.is_done(rid) and _failed_stamp(store, rid) == before[rid]

    interval = min(60.0, store.lease_timeout / 5)
    _apply_threads()
    try:
        with _Heartbeat(store, rids, interval):
            try:
                fn(claimed, store, device=device, progress=progress)
            except Exception as e:
                reason = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
                log.error("worker failed on a pack of %d runs: %s: %s", len(claimed), type(e).__name__, e)
                for rid in filter(unrecorded, rids):
                    store.fail(rid, reason)
        for rid in rids:
            if store.is_done(rid):
                counts["ran"] += 1
            else:
                if unrecorded(rid):
                    store.fail(rid, "the worker returned without finishing or failing this run")
                counts["failed"] += 1
    finally:
        for rid in rids:
            store.release(rid)
    return counts


def _failed_stamp(store: Store, rid: str) -> tuple | None:
    """Identity of the run's FAILED file (each atomic write makes a new inode), or None."""
    try:
        st = (store.run_dir(rid) / "FAILED").stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


# --- executors -------------------------------------------------------------------------------

def available_cores() -> int:
    """Cores this process may use (its CPU affinity where the OS tells, else cpu_count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_THREADS: int | None = None  # this worker process's share of the cores (process executor)


PR_SET_PDEATHSIG = 1  # linux/prctl.h
ORPHAN_POLL = 0.5  # seconds between the watchdog's checks of the parent


def _init_process_worker(threads: int, parent: int | None = None) -> None:
    """Pool initializer: give each worker process its share of the cores, so workers do not
    oversubscribe, and tie its life to the sweep's process `parent` (`_die_with_parent`). It runs
    before any task is unpickled, so the environment is set before torch (or numpy) is imported;
    `_apply_threads` calls torch.set_num_threads once torch is loaded."""
    global _THREADS
    _THREADS = threads
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    if parent is not None:
        _die_with_parent(parent)
    _apply_threads()


def _die_with_parent(parent: int) -> None:
    """Make this worker exit when the process `parent` dies, however it dies (SIGKILL included),
    so that a killed sweep leaves no orphans training on. Linux: the kernel sends SIGKILL on the
    parent's death (prctl PR_SET_PDEATHSIG); everywhere: a daemon thread that polls getppid()
    every ORPHAN_POLL seconds and exits when the parent is gone (re-parented to init)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # died before the signal was armed
        os._exit(1)
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL)
        os._exit(1)

    threading.Thread(target=watch, name="depthscale-orphan-watchdog", daemon=True).start()


def _apply_threads() -> None:
    torch = sys.modules.get("torch")  # never import it here: a worker that needs it has done so
    if _THREADS is not None and torch is not None and torch.get_num_threads() != _THREADS:
        torch.set_num_threads(_THREADS)


def _add(total: dict, counts: dict) -> None:
    for k in COUNT_KEYS:
        total[k] += counts.get(k, 0)


def _run_inline(packs, store, worker, device, progress, bar) -> dict:
    total = dict.fromkeys(COUNT_KEYS, 0)
    for pack in packs:
        counts = execute_pack(pack, store, worker, device=device, progress=progress)
        _add(total, counts)
        bar.update(len(pack))
    return total


# Relative cost of one layer of one context per step, measured at the cpu preset (d = N = 32,
# P = 128, one thread): nonlinear-family packs 1.1 ms per layer at batch 256, linear and
# single_stream ~5x that, context_updates ~48x (its P x P context attention, O(P^2 N) per layer).
_LAYER_COST = {"nonlinear": 1.0, "layer_values": 1.0, "linear": 5.0, "single_stream": 5.0,
               "context_updates": 48.0}


def pack_cost(pack: list[RunConfig]) -> float:
    """A rough estimate of a pack's training cost (arbitrary units), to start the longest packs
    first: steps x batch x layers x a per-model weight, scaled with P (P^2 for context_updates)."""
    c0 = pack[0]
    size = (c0.P / 128) ** (2 if c0.model == "context_updates" else 1) * (c0.N / 32)
    return c0.max_steps * c0.batch * sum(c.L for c in pack) * _LAYER_COST.get(c0.model, 1.0) * size


def _run_process(packs, store, worker, device, workers, bar) -> dict:
    import concurrent.futures as cf
    import multiprocessing

    # longest first (LPT): a long pack started last would leave the other workers idle at the end
    packs = sorted(packs, key=pack_cost, reverse=True)

    total = dict.fromkeys(COUNT_KEYS, 0)
    cores = available_cores()
    n = max(1, min(workers or cores, len(packs)))
    threads = max(1, cores // n)
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init_process_worker,
                                initargs=(threads, os.getpid())) as pool:
        futures = {pool.submit(execute_pack, pack, store, worker, device, False): pack
                   for pack in packs}
        for fut in cf.as_completed(futures):
            pack = futures[fut]
            try:
                _add(total, fut.result())
            except Exception as e:  # the worker process died (e.g. killed for memory)
                log.error("a worker process failed on a pack of %d runs: %s: %s",
                          len(pack), type(e).__name__, e)
                total["failed"] += sum(not store.is_done(run_id(c)) for c in pack)
            bar.update(len(pack))
    return total


def _slurm_task(pack: list[RunConfig], root: str, lease_timeout: float, worker, device: str) -> dict:
    """One SLURM array task: run one pack against the store at `root` (device "auto" is decided
    here, on the node: the submitting host may have no GPU)."""
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    store = Store(root, lease_timeout=lease_timeout)
    job = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID", "?"))
    task = os.environ.get("SLURM_ARRAY_TASK_ID", "0")
    return execute_pack(pack, store, worker, device=device, progress=False, owner=f"slurm:{job}_{task}")


def _run_slurm(packs, store, worker, device, name, opts) -> dict:
    """Submit one array job with a task per pack. Options (all optional):

    partition, time_min (timeout per task, minutes), cpus (per task), gpus (per task),
    mem_gb, array_parallelism (max tasks at once), wait (block and gather counts),
    cluster ("slurm", or "local"/"debug" to try it without SLURM), folder (log directory,
    default <store>/slurm/<name>), additional (dict of extra sbatch parameters).
    """
    submitit = _import_submitit()
    opts = check_slurm_options(opts)
    folder = Path(opts.get("folder") or store.root / "slurm" / (name or "sweep"))
    executor = submitit.AutoExecutor(folder=folder, cluster=opts.get("cluster"))
    params = {"name": f"depthscale-{name or 'sweep'}", "timeout_min": int(opts.get("time_min", 60)),
              "cpus_per_task": int(opts.get("cpus", 1)), "nodes": 1, "tasks_per_node": 1}
    if opts.get("gpus"):
        params["gpus_per_node"] = int(opts["gpus"])
    if opts.get("mem_gb"):
        params["mem_gb"] = opts["mem_gb"]
    if opts.get("partition"):
        params["slurm_partition"] = opts["partition"]
    if opts.get("array_parallelism"):
        params["slurm_array_parallelism"] = int(opts["array_parallelism"])
    if opts.get("additional"):
        params["slurm_additional_parameters"] = dict(opts["additional"])
    executor.update_parameters(**params)
    n = len(packs)
    try:
        jobs = executor.map_array(_slurm_task, packs, [str(store.root)] * n, [store.lease_timeout] * n,
                                  [worker] * n, [device] * n)
    except Exception as e:  # sbatch failed: no controller, bad partition, limits...
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        why = next((ln.strip() for ln in lines if "error" in ln.lower()), lines[0].strip() if lines else "")
        raise SubmissionError(f"SLURM submission failed: {type(e).__name__}: {why}") from None
    out = {"job_ids": [j.job_id for j in jobs], "slurm_folder": str(folder)}
    if opts.get("wait"):
        total = dict.fromkeys(COUNT_KEYS, 0)
        for job, pack in zip(jobs, packs):
            try:
                _add(total, job.result())
            except Exception as e:
                log.error("SLURM job %s failed: %s", job.job_id, str(e).splitlines()[0] if str(e) else e)
                total["failed"] += sum(not store.is_done(run_id(c)) for c in pack)
        out.update(total)
    return out


def _import_submitit():
    try:
        import submitit
    except ImportError:
        raise MissingExtraError("the slurm executor needs submitit: pip install 'depthscale[slurm]'") from None
    return submitit


def check_slurm_options(opts: dict | None) -> dict:
    """The slurm executor's options, checked (names from SLURM_OPTIONS; numbers >= 1)."""
    opts = dict(opts or {})
    unknown = sorted(set(opts) - set(SLURM_OPTIONS))
    if unknown:
        raise ConfigError(f"unknown slurm option {unknown[0]!r}; known: {', '.join(sorted(SLURM_OPTIONS))}")
    for key in ("time_min", "cpus", "array_parallelism"):
        v = opts.get(key)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            raise ConfigError(f"slurm option {key} must be an integer >= 1, got {v!r}")
    for key in ("gpus", "mem_gb"):
        v = opts.get(key)
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
                                  and math.isfinite(v)):
            raise ConfigError(f"slurm option {key} must be a number >= 0, got {v!r}")
    return opts


def concurrent_packs(executor: str, packs: list, workers: int | None = None) -> int:
    """How many of `packs` run at once on this machine (0 for slurm: they run on the nodes)."""
    if executor == "slurm":
        return 0
    if executor == "process":
        return max(1, min(workers or available_cores(), len(packs)))
    return 1


def check_memory(packs: list[list[RunConfig]], executor: str = "inline", workers: int | None = None,
                 device: str = "cpu", flag: str = "allow_memory=True") -> None:
    """Refuse (memory.MemoryRefused) packs that would not fit in this machine's memory, the
    largest `concurrent_packs` of them at once. SLURM packs run elsewhere and are not checked."""
    n = concurrent_packs(executor, packs, workers)
    if n and packs:
        from depthscale.memory import check_packs

        check_packs(packs, device, concurrent=n, flag=flag)


def run_sweep(configs: Iterable[RunConfig], store: Store | str, executor: str = "inline",
              shard: tuple[int, int] | str | None = None, workers: int | None = None,
              device: str = "cpu", max_pack: int = 64, progress: bool | None = None,
              worker: Callable | str | None = None, name: str | None = None,
              slurm: dict | None = None, pack_key: Callable | None = None,
              retry_failed: bool = True, allow_memory: bool = False) -> dict:
    """Run every config not yet done; returns counts.

    counts: planned (runs in this shard's packs), packs, ran, skipped_done (done before the
    plan, or found done at claim time), skipped_claimed (held by another process), failed,
    skipped_failed (failed before, left alone because retry_failed=False). The slurm executor
    adds job_ids and slurm_folder, and the run counts only with slurm={"wait": True}.
    `worker` is a module-level callable (or 'module:function') with the signature of
    depthscale.training.run_pack, the default. `name` writes the sweep manifest (all configs,
    not just this shard's) so that `store.status()` can report it. Packs whose estimated memory
    exceeds what this machine has are refused (memory.MemoryRefused) before anything is
    written, unless `allow_memory`. A broken run (store.is_broken) is run again.
    """
    if executor not in EXECUTORS:
        raise ConfigError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if workers is not None and not (isinstance(workers, int) and not isinstance(workers, bool)
                                    and workers >= 1):
        raise ConfigError(f"workers must be an integer >= 1, got {workers!r}")
    if executor == "slurm":  # before anything is written
        _import_submitit()
        slurm = check_slurm_options(slurm)
    if not isinstance(store, Store):
        store = Store(store)
    configs = list(configs)
    shard = parse_shard(shard)
    fn = _resolve_worker(worker)  # fail early, and hand the pool or SLURM an importable callable
    packs = plan(configs, store, shard=shard, max_pack=max_pack, pack_key=pack_key,
                 retry_failed=retry_failed)
    if not allow_memory:
        check_memory(packs, executor, workers, device)
    if name is not None:
        store.write_manifest(name, [run_id(c) for c in configs])
    share = [run_id(c) for c in _shard_share(configs, shard)]
    skipped_done = sum(store.is_done(rid) for rid in share)
    skipped_failed = 0 if retry_failed else sum(store.is_failed(rid) for rid in share)
    planned = sum(len(p) for p in packs)
    result = {"planned": planned, "packs": len(packs), **dict.fromkeys(COUNT_KEYS, 0)}
    result.update(skipped_done=skipped_done, skipped_failed=skipped_failed)
    if not packs:
        return result
    if executor == "slurm":
        out = _run_slurm(packs, store, fn, device, name, slurm)
        for k in COUNT_KEYS:
            out[k] = result[k] + out.get(k, 0)
        return {**result, **out}
    from tqdm import tqdm

    disable = None if progress is None else not progress
    with tqdm(total=planned, unit="run", desc=name or "sweep", disable=disable) as bar:
        if executor == "inline":
            counts = _run_inline(packs, store, fn, device, progress, bar)
        else:
            counts = _run_process(packs, store, fn, device, workers, bar)
    for k in COUNT_KEYS:
        result[k] += counts[k]
    return result


__all__ = ["load_grid", "expand_grid", "parse_shard", "plan", "pack_cost", "execute_pack", "run_sweep",
           "available_cores", "check_memory", "check_slurm_options", "concurrent_packs", "EXECUTORS",
           "SLURM_OPTIONS"]
