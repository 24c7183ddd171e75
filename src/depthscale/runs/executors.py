"""Executing packs: one pack against the store (`execute_pack`: claim its runs, train them while a
background thread heartbeats the leases, record what failed, release), and the three ways of
executing many: "inline" (this process), "process" (a local spawn pool, threads split between
workers; a worker exits when the sweep's process dies, even by SIGKILL) and "slurm" (a submitit job
array; `pip install 'depthscale[slurm]'`). sweeps.plan plans the packs; sweeps.run_sweep runs them with the executor.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import math
import os
import shutil
import signal
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Callable

from depthscale.base import timing
from depthscale.config.run import ConfigError, RunConfig, run_id
from depthscale.store import lease
from depthscale.base.errors import (MissingExtraError, StorageError, SubmissionError, first_refused, is_storage_error,
                               storage_error)
from depthscale.store.store import Store
from depthscale.runs.pool import Task, exit_text
from depthscale.train.memory import WORKER_BASE, budget, release_memory, returning_memory, tune_allocator

log = logging.getLogger(__name__)

EXECUTORS = ("inline", "process", "slurm")
COUNT_KEYS = ("ran", "skipped_done", "skipped_claimed", "skipped_unreadable", "failed")
SLURM_OPTIONS = ("partition", "time_min", "cpus", "gpus", "mem_gb", "array_parallelism", "wait",
                 "cluster", "folder", "additional")


# --- executing one pack ----------------------------------------------------------------------

def resolve_worker(worker: Callable | str | None) -> Callable:
    """The worker callable: None -> depthscale.train.training.run_pack; 'module:function' is imported."""
    if worker is None:
        from depthscale.train.training import run_pack

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
                    ok = self.store.leases.heartbeat(rid)
                except OSError as e:  # a flaky shared filesystem: try again next beat
                    log.warning("heartbeat on run %s failed: %s", rid, e)
                    continue
                if not ok:
                    self._lost.add(rid)
                    log.warning("lost the lease on run %s; another process may run it too", rid)


def execute_pack(pack: list[RunConfig], store: Store | str, worker: Callable | str | None = None,
                 device: str = "cpu", progress: bool | None = None, owner: str = "",
                 pack_memory: int | None = None) -> dict:
    """Claim the pack's runs, train the claimed ones with `worker`, release. Returns counts.
    `pack_memory`: the pack budget (bytes) declared while the worker runs (memory.budget: the
    trainer streams the evaluation and monitor sets that do not fit it).

    An exception from the worker is recorded with `store.fail` for each claimed run it left
    unfinished; a run the worker neither finished nor failed is recorded as failed too. A write
    the filesystem refused (disk full, read-only: errors.is_storage_error) is raised, as an
    errors.StorageError: recording it would need the disk that is full, and the next run would
    meet it too.
    """
    if not isinstance(store, Store):
        store = Store(store)
    fn = resolve_worker(worker)
    counts = dict.fromkeys(COUNT_KEYS, 0)
    owner = owner or f"sweep:{os.getpid()}"
    claimed = []
    for cfg in pack:
        rid = run_id(cfg)
        if store.is_done(rid):
            counts["skipped_done"] += 1
        elif store.leases.claim(rid, owner):
            claimed.append(cfg)
        elif store.is_done(rid):  # finished by someone else since the plan
            counts["skipped_done"] += 1
        elif store.run_dir_problem(rid) is not None:  # claim warned, naming it: not another process's
            counts["skipped_unreadable"] += 1
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
                with timing.record() as rec, budget(pack_memory):
                    fn(claimed, store, device=device, progress=progress)
            except Exception as e:
                if is_storage_error(e):  # the first write refused (recording it failed too)
                    raise first_refused(e) from None
                reason = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
                log.error("worker failed on a pack of %d runs: %s: %s", len(claimed), type(e).__name__, e)
                for rid in filter(unrecorded, rids):
                    store.fail(rid, reason)
        _write_timing(store, claimed, rec)
        for rid in rids:
            if store.is_done(rid):
                counts["ran"] += 1
            else:
                if unrecorded(rid):
                    store.fail(rid, "the worker returned without finishing or failing this run")
                counts["failed"] += 1
    finally:
        for rid in rids:
            store.leases.release(rid)
    return counts


def _write_timing(store: Store, claimed: list[RunConfig], rec: "timing.Record") -> None:
    """The pack's phases (sampling, forward, ...) into <store>/timing/: written by the worker
    itself, so that the process executor's packs are counted too. A failure to write is logged,
    never fatal."""
    torch = sys.modules.get("torch")
    try:
        timing.write_pack_record(store.root, claimed, rec, torch.get_num_threads() if torch else None)
    except OSError as e:
        log.warning("could not write the timing of a pack of %d runs: %s", len(claimed), e)


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
    oversubscribe, tie its life to the sweep's process `parent` (`_die_with_parent`), and leave
    Ctrl-C to the sweep's process (SIGINT ignored here: run_process stops the workers). It runs
    before any task is unpickled, so the environment is set before torch (or numpy) is imported;
    `_apply_threads` calls torch.set_num_threads once torch is loaded."""
    from tqdm import tqdm

    global _THREADS
    _THREADS = threads
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: no traceback per worker
    tqdm.set_lock(threading.RLock())  # not tqdm's semaphore, which a stopped worker would leave behind
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    if parent is not None:
        _die_with_parent(parent)
    tune_allocator()  # a worker's step temporaries are reused, not page-faulted in again (x1.5)
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


def run_inline(packs, store, worker, device, progress, bar, pack_memory: int | None = None) -> dict:
    total = dict.fromkeys(COUNT_KEYS, 0)
    for pack in packs:
        counts = execute_pack(pack, store, worker, device=device, progress=progress, pack_memory=pack_memory)
        _add(total, counts)
        bar.update(len(pack))
        release_memory()  # what the pack left (its trainer's cycles, the allocator's free pages)
    return total


def pack_cost(pack: list[RunConfig]) -> float:
    """A rough estimate of a pack's training cost (arbitrary units), to start the longest packs
    first: steps x batch x layers x the model kind's relative cost of one layer of one context
    (`layer_cost`, measured at the cpu preset: a nonlinear-family layer 1.1 ms at batch 256, linear
    and single_stream ~5x that, context_updates ~48x) scaled to the geometry (`cost_scale`: with P,
    P^2 for context_updates' context attention, and N)."""
    from depthscale.kinds.lookup import model_class  # (the model layer loads torch: the sweep has done so)

    c0 = pack[0]
    kind = model_class(c0.model)
    return c0.max_steps * c0.batch * sum(c.L for c in pack) * kind.layer_cost * kind.cost_scale(c0)


def side_job(fn, *args):
    """A side job in a worker (the report's theory): its large arrays come once, so under
    memory.returning_memory, not the packs' kept memory (a cpu linear d = 32 floor job: 1,032 MiB
    in a worker tuned for packs, 463 MiB this way)."""
    with returning_memory():
        return fn(*args)


def run_process(packs, store, worker, device, workers, bar, extra_jobs=(), pack_memory: int | None = None) -> dict:
    """The packs in a local pool of spawned workers (pool.WorkerPool), longest first. `extra_jobs`,
    (module-level callable, args) pairs, are queued after every pack: the pool starts them in that
    order as workers free up, i.e. in the sweep's tail (reproduce computes the report's theory
    there). An extra job that fails is logged, never fatal; its result is not counted.

    A worker that dies (SIGKILL, the OOM killer) is an event, not the end of the sweep: a new worker
    takes its place and the pack it held is tried once more on it (the runs it had not finished;
    in two halves after a SIGKILL, which is how the OOM killer ends a process); every other pack
    goes on. A pack that kills its worker twice has its unfinished runs failed, with the reason
    ("worker process died (signal 9) twice ..."), never left looking pending. `pack_memory`: the
    pack budget (bytes, memory.budget) declared in the workers; a worker whose resident memory
    after a pack is above its imports' (memory.WORKER_BASE) plus a quarter of it retires and a
    fresh one takes its place. A pack that meets a full (or read-only) disk stops the sweep: the
    packs not started are dropped and the StorageError is raised."""
    from depthscale.runs.pool import WorkerPool

    # longest first (LPT): a long pack started last would leave the other workers idle at the end
    packs = sorted(packs, key=pack_cost, reverse=True)
    extra_jobs = list(extra_jobs)
    cores = available_cores()
    n = max(1, min(workers or cores, len(packs) + len(extra_jobs)))
    pool = WorkerPool(n, _init_process_worker, (max(1, cores // n), os.getpid()),
                      retire_above=WORKER_BASE + pack_memory // 4 if pack_memory else None)
    ledger = _Ledger(store, worker, device, bar, pool, pack_memory)
    tasks = [ledger.pack_task(pack) for pack in packs]
    tasks += [Task(("extra", j), side_job, (fn, *args), data=fn) for j, (fn, args) in enumerate(extra_jobs)]
    try:
        pool.run(tasks, ledger.on_result, ledger.on_death)
        _restart_dead_tracker()
    except KeyboardInterrupt:  # Ctrl-C: the workers stop now (their runs resume), not after their packs
        pool.close(terminate=True)
        raise
    for line in ledger.lost:
        log.error("%s", line)
    if ledger.disk_full is not None:
        e = ledger.disk_full
        raise e if isinstance(e, StorageError) else storage_error(e)
    return ledger.total


class _Ledger:
    """What run_process's pool reports, counted: each pack's counts, a failed side job's warning,
    a disk that filled, and what a worker's death means for the pack it held (`on_death`)."""

    def __init__(self, store: Store, worker, device: str, bar, pool, pack_memory: int | None) -> None:
        self.store, self.worker, self.device, self.bar, self.pool = store, worker, device, bar, pool
        self.pack_memory = pack_memory
        self.total = dict.fromkeys(COUNT_KEYS, 0)
        self.disk_full: BaseException | None = None
        self.lost: list[str] = []  # one line per pack that killed its worker twice
        self._keys = 0

    def pack_task(self, pack: list[RunConfig], attempts: int = 0) -> Task:
        self._keys += 1
        return Task(("pack", self._keys), execute_pack,
                    (pack, self.store, self.worker, self.device, False, "", self.pack_memory),
                    attempts=attempts, data=pack)

    def on_result(self, task: Task, out) -> None:
        if task.key[0] == "extra":
            if not out.ok:  # whoever needs its result computes it again
                log.warning("a side job (%s) failed in the worker pool: %s: %s",
                            getattr(task.data, "__name__", task.data), type(out.value).__name__, out.value)
            return
        pack = task.data
        self.bar.update(len(pack))
        if out.ok:
            _add(self.total, out.value)
            return
        e = out.value
        if is_storage_error(e):
            self.disk_full = self.disk_full or e
            self.pool.cancel()
            return
        log.error("a worker process failed on a pack of %d runs: %s: %s", len(pack), type(e).__name__, e)
        self.total["failed"] += sum(not self.store.is_done(run_id(c)) for c in pack)

    def on_death(self, task: Task, code: int | None) -> list[Task]:
        """A worker died running `task`: a side job is tried once more; a pack's unfinished runs
        once more on a new worker (halved after a SIGKILL), then failed with the reason."""
        if task.key[0] == "extra":
            if task.attempts == 0:
                return [Task(task.key, task.fn, task.args, attempts=1, data=task.data)]
            log.warning("a side job (%s) killed its worker twice (%s); left for whoever needs it",
                        getattr(task.data, "__name__", task.data), exit_text(code))
            return []
        pack = task.data
        left = [c for c in pack if not self.store.is_done(run_id(c))]
        self.total["ran"] += len(pack) - len(left)
        self.bar.update(len(pack) - len(left))
        if not left:
            return []
        if task.attempts == 0:
            halves = code == -signal.SIGKILL and len(left) > 1
            parts = [left[:len(left) // 2], left[len(left) // 2:]] if halves else [left]
            log.warning("a worker process died (%s) running a pack of %d runs; its %d unfinished runs go to a new "
                        "worker%s", exit_text(code), len(pack), len(left), " in two packs" if halves else "")
            return [self.pack_task(part, attempts=1) for part in parts]
        why = (f"worker process died ({exit_text(code)}) twice running this run's pack (tried again once on a new "
               f"worker); a new sweep runs it again")
        for c in left:
            self.store.fail(run_id(c), why)
        self.total["failed"] += len(left)
        self.bar.update(len(left))
        self.lost.append(f"a pack of {len(left)} run(s) ({', '.join(run_id(c) for c in left[:4])}"
                         f"{', ...' if len(left) > 4 else ''}) killed its worker twice ({exit_text(code)}): failed")
        return []


def _restart_dead_tracker() -> None:
    """If multiprocessing's resource tracker died during the sweep (killed), start a new one now,
    quietly, with one warning line. Left alone, the pool's semaphores would be unregistered with
    a tracker started on demand that never registered them, and each would print a KeyError
    traceback (nothing leaks: each semaphore is unlinked by its own finalizer)."""
    try:
        from multiprocessing import resource_tracker

        rt = resource_tracker._resource_tracker
        if getattr(rt, "_fd", None) is None or rt._check_alive():
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        saved = os.dup(2)
        try:
            os.dup2(devnull, 2)  # the new tracker's stderr: its complaints about the old one's names
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rt.ensure_running()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)
    except Exception as e:  # noqa: BLE001 - private API: at worst the tracebacks are back
        log.debug("could not restart the resource tracker: %s", e)
        return
    warnings.warn("multiprocessing's resource tracker died during the sweep (was it killed?); restarted it")


def _slurm_task(pack: list[RunConfig], root: str, lease_timeout: float, worker, device: str) -> dict:
    """One SLURM array task: run one pack against the store at `root` (device "auto" is decided
    here, on the node: the submitting host may have no GPU)."""
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    tune_allocator()
    store = Store(root, lease_timeout=lease_timeout)
    job = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID", "?"))
    task = os.environ.get("SLURM_ARRAY_TASK_ID", "0")
    return execute_pack(pack, store, worker, device=device, progress=False, owner=f"slurm:{job}_{task}")


def run_slurm(packs, store, worker, device, name, opts) -> dict:
    """Submit one array job with a task per pack. Options (all optional):

    partition, time_min (timeout per task, minutes), cpus (per task), gpus (per task),
    mem_gb, array_parallelism (max tasks at once), wait (block and gather counts),
    cluster ("slurm", or "local"/"debug" to try it without SLURM), folder (log directory,
    default <store>/slurm/<name>), additional (dict of extra sbatch parameters).
    """
    submitit = import_submitit()
    opts = check_slurm_options(opts)
    folder = Path(opts.get("folder") or store.root / "slurm" / (name or "sweep"))
    # "slurm" unless asked otherwise: submitit's own default falls back to local processes
    executor = submitit.AutoExecutor(folder=folder, cluster=opts.get("cluster") or "slurm")
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
    jobs = _submit(executor, packs, store, worker, device)
    out = {"job_ids": [j.job_id for j in jobs], "slurm_folder": str(folder)}
    if opts.get("wait"):
        total = dict.fromkeys(COUNT_KEYS, 0)
        dead = _gather(jobs, packs, store, total)
        if dead:  # a task that died (killed for memory, node lost, time out) is requeued once
            log.warning("%d SLURM task(s) died; their %d unfinished runs are submitted once more", len(dead),
                        sum(len(p) for p, _ in dead))
            again = _submit(executor, [p for p, _ in dead], store, worker, device)
            out["job_ids"] += [j.job_id for j in again]
            for pack, why in _gather(again, [p for p, _ in dead], store, total):
                for c in pack:
                    store.fail(run_id(c), f"{why} (its first task had died too; submitted once more)")
                    total["failed"] += 1
        out.update(total)
    return out


def _gather(jobs: list, packs: list, store: Store, total: dict) -> list[tuple[list, str]]:
    """Each job's counts added to `total`; [(its unfinished runs, why)] for each job that died."""
    dead = []
    for job, pack in zip(jobs, packs):
        try:
            _add(total, job.result())
        except Exception as e:  # the job died (timeout, cancelled, node lost, OOM-killed)
            why = f"SLURM job {job.job_id} failed: {' '.join(str(e).split())[:300] or type(e).__name__}"
            log.error("%s", why)
            left = [c for c in pack if not store.is_done(run_id(c))]
            if left:
                dead.append((left, why))
    return dead


def _submit(executor, packs, store: Store, worker, device: str) -> list:
    """One array job with a task per pack (SubmissionError, one line, where sbatch refuses)."""
    n = len(packs)
    try:
        return executor.map_array(_slurm_task, packs, [str(store.root)] * n, [store.lease_timeout] * n,
                                  [worker] * n, [device] * n)
    except Exception as e:  # sbatch failed: no controller, bad partition, limits...
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        why = next((ln.strip() for ln in lines if "error" in ln.lower()), lines[0].strip() if lines else "")
        raise SubmissionError(f"SLURM submission failed: {type(e).__name__}: {why}") from None


def import_submitit():
    try:
        import submitit
    except ImportError:
        raise MissingExtraError("the slurm executor needs submitit: pip install 'depthscale[slurm]'") from None
    return submitit


SLURM_COMMANDS = ("sbatch", "srun")  # what submitting needs on PATH (submitit looks for srun)


def check_slurm_cluster(cluster: str | None = None) -> None:
    """Refuse (SubmissionError, one line) to submit to SLURM where there is none: without sbatch
    and srun on PATH submitit would run the jobs as detached local processes instead. The
    clusters "local" and "debug" (submitit's stand-ins, for trying a sweep) need nothing."""
    if cluster not in (None, "slurm"):
        return
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if missing:
        raise SubmissionError(f"--executor slurm: no SLURM cluster here ({' and '.join(missing)} not found on "
                              "PATH); submit from a login node of the cluster, or use --executor process")


def check_slurm_options(opts: dict | None) -> dict:
    """The slurm executor's options, checked (names from SLURM_OPTIONS; numbers >= 1), and that
    the cluster they name is here (check_slurm_cluster)."""
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
    check_slurm_cluster(opts.get("cluster"))
    return opts


def concurrent_packs(executor: str, packs: list, workers: int | None = None) -> int:
    """How many of `packs` run at once on this machine (0 for slurm: they run on the nodes)."""
    if executor == "slurm":
        return 0
    if executor == "process":
        return max(1, min(workers or available_cores(), len(packs)))
    return 1


__all__ = ["execute_pack", "resolve_worker", "run_inline", "run_process", "run_slurm", "import_submitit",
           "check_slurm_options", "check_slurm_cluster", "concurrent_packs", "available_cores", "pack_cost", "EXECUTORS", "COUNT_KEYS",
           "SLURM_OPTIONS"]
