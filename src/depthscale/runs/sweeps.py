"""Sweeps: expand a grid of configs, plan it against a store, execute it in packs (executors.py).

A sweep is a list of RunConfigs. `plan` plans it once, as a `Plan`: it drops the runs already
done, keeps this shard's share, groups the rest into packs (configs with equal `pack_key` that one
call of the worker trains together) split to a memory budget, and checks their memory; `run_sweep`
runs that Plan (`sweep --dry-run` prints it). Executing a pack claims its runs one by one in the store (a run someone else holds is
skipped, so the pack may shrink), calls the worker while a background thread heartbeats the
leases, and releases them. Any number of processes, on any number of machines, may execute the
same sweep against one store: each run is finished exactly once, and a killed sweep resumes
where it stopped when started again.

Executors: "inline" (this process), "process" (a local spawn pool, threads split between
workers; a worker exits when the sweep's process dies, even by SIGKILL), "slurm" (a submitit job
array; `pip install 'depthscale[slurm]'`). For hand-written sbatch arrays, give every array task
the same sweep and `shard=(task_id, n_tasks)`. Before anything runs, the packs' memory is
estimated (depthscale.train.memory) and a sweep that would not fit is refused.

    p = plan(configs, store, executor="process", workers=4)
    run_sweep(p, store, name="my-sweep")
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from depthscale.base.errors import StoreError
from depthscale.config.run import FIELD_NAMES, PRESET_DEPTHS, ConfigError, RunConfig, make_config, run_id, shown
from depthscale.runs.executors import (COUNT_KEYS, EXECUTORS, check_slurm_options, concurrent_packs, import_submitit,
                                  resolve_worker, run_inline, run_process, run_slurm)
from depthscale.store import manifests
from depthscale.store.store import Store
from depthscale.train.memory import MemoryRefused


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
    except RecursionError:  # (json's and tomllib's parsers recurse once per nested [ or {)
        raise ConfigError(f"grid file {path} is nested too deeply (lists or tables within lists or tables "
                          f"too many levels deep): a grid is one table, or a list of tables, of field = value(s)") from None
    except ValueError as e:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        if isinstance(e, ConfigError):
            raise
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"grid file {path} is not valid {suffix[1:].upper()}: {msg}") from None
    if isinstance(grid, dict) and set(grid) == {"grid"}:
        grid = grid["grid"]
    return grid


MAX_WORKERS = 10_000  # --workers (processes on one machine)
MAX_GRID_RUNS = 100_000  # runs one grid may expand to (a 78k-run grid takes about 10 s to expand)
MAX_GRID_ENV = "DEPTHSCALE_MAX_GRID_RUNS"  # environment variable that raises (or lowers) it


def max_grid_runs() -> int:
    """MAX_GRID_RUNS, or the whole number in $DEPTHSCALE_MAX_GRID_RUNS."""
    text = os.environ.get(MAX_GRID_ENV, "").strip()
    if not text:
        return MAX_GRID_RUNS
    if not re.fullmatch(r"[0-9]{1,18}", text):
        raise ConfigError(f"{MAX_GRID_ENV} must be a whole number of runs, got {shown(text)}")
    return int(text)


def expand_grid(grid: dict | Sequence[dict], preset: str = "cpu", max_runs: int | None = None) -> list[RunConfig]:
    """The configs of a grid: the cartesian product of its values over `preset`'s defaults.

    Keys are RunConfig field names; each value is a scalar or a list of values. `depths` is
    accepted for `L`, and `L = "preset"` means the preset's depths (PRESET_DEPTHS). A `preset`
    key (scalar or list) overrides the `preset` argument. A list of such dicts is the union of
    their products. Order follows the keys and lists as written; duplicates are dropped. Each
    value is a number, a string or true/false (a table or a list within the list is refused). A grid
    of more than `max_runs` runs (default MAX_GRID_RUNS, or $DEPTHSCALE_MAX_GRID_RUNS) is refused
    before anything is expanded: the product of its lists' lengths, summed over its tables, is its size.

    >>> grid = {"model": ["linear", "nonlinear"], "task": "difficult",
    ...         "a": [0, 0.5], "b": 0, "depths": [1, 2, 4], "seed": [0, 1]}
    >>> len(expand_grid(grid, preset="smoke"))
    24
    """
    if not isinstance(grid, (dict, list, tuple)):
        raise ConfigError(f"a grid must be a table of field = value(s) or a list of them, got {shown(grid)}")
    parts = [grid] if isinstance(grid, dict) else list(grid)
    if not parts:
        raise ConfigError("grid is empty")
    every = []
    for part in parts:
        if not isinstance(part, dict):
            raise ConfigError(f"grid entries must be tables of field = value(s), got {shown(part)}")
        if not part:
            raise ConfigError("grid is empty (a table without keys): give at least one field")
        every.append(_grid_axes(part, preset))
    limit = max_grid_runs() if max_runs is None else max_runs
    size = sum(math.prod(len(v) for v in axes.values()) for axes in every)  # counted, not expanded
    if size > limit:
        raise ConfigError(f"the grid has {size:,} runs (the product of its lists' lengths{', summed over its tables' if len(every) > 1 else ''}), "
                          f"more than the limit of {limit:,}: split it into smaller grids, or raise the limit with "
                          f"{MAX_GRID_ENV}=N")
    out: dict[str, RunConfig] = {}
    for axes in every:
        names = list(axes)
        for combo in itertools.product(*axes.values()):
            values = dict(zip(names, combo))
            p = values.pop("preset", preset)
            if values.get("L") == "preset":
                raise ConfigError("L = \"preset\" must be the only value of L")
            cfg = make_config(p, **values)  # (RunConfig stores an integer given for a float field as a float)
            out.setdefault(run_id(cfg), cfg)
    return list(out.values())


def _grid_axes(part: dict, preset: str) -> dict[str, list]:
    if "depths" in part and "L" in part:
        raise ConfigError("give the depths as either 'depths' or 'L', not both")
    axes = {}
    for key, value in part.items():
        name = "L" if key == "depths" else key
        if name not in FIELD_NAMES:
            raise ConfigError(f"unknown grid key {key!r}")
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if not values:
            raise ConfigError(f"grid key {key!r} has an empty list")
        for v in values:
            if not isinstance(v, (str, int, float, bool)):
                what = "a table" if isinstance(v, dict) else "a list" if isinstance(v, (list, tuple)) else type(v).__name__
                raise ConfigError(f"grid key {key!r}: each value must be a number, a string or true/false, "
                                  f"got {what}: {shown(value)}")
        axes[name] = values
    if axes.get("L") == ["preset"]:
        presets = axes.get("preset", [preset])
        if len(presets) != 1 or presets[0] not in PRESET_DEPTHS:
            raise ConfigError(f"L = \"preset\" needs one known preset, got {presets!r}")
        axes["L"] = list(PRESET_DEPTHS[presets[0]])
    return axes


# --- planning --------------------------------------------------------------------------------

def parse_shard(text: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """'i/n' (0 <= i < n) -> (i, n); a tuple is checked the same way; None stays None."""
    if text is None:
        return None
    if isinstance(text, str):
        m = re.fullmatch(r"([0-9]+)/([0-9]+)", text)  # ASCII digits only (\d takes ０/２ too)
        if not m:
            raise ConfigError(f"shard must look like i/n with 0 <= i < n (digits 0-9), got {text!r}")
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
    from depthscale.kinds.lookup import pack_key

    return pack_key(cfg)


def make_packs(configs: Iterable[RunConfig], store: Store | None, shard: tuple[int, int] | str | None = None,
               max_pack: int = 64, pack_key: Callable[[RunConfig], tuple] | None = None,
               retry_failed: bool = True, pack_memory: int | None = None) -> list[list[RunConfig]]:
    """Packs of the configs this process (shard) should run, in a deterministic order (`plan`'s packs).

    Duplicates are dropped and the configs ordered by run id. The shard i/n keeps positions
    p ≡ i (mod n) of that ordering, taken before done runs are dropped, so every shard sees the
    same positions whenever it plans and no two shards ever get the same run. Then done runs
    (and failed ones unless `retry_failed`) are dropped, and the rest grouped by `pack_key`
    (default depthscale.train.training.pack_key) into packs of at most `max_pack`, split evenly.
    With `pack_memory` (bytes), a group is split into more (even) packs until each one's
    estimated peak (memory.pack_bytes) fits it; a single run that does not fit stays a pack of
    one (check_memory then refuses it). store None: nothing is done yet (a store that does not exist).
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
        parts = _even_split(group, n_packs)
        if pack_memory is not None:
            from depthscale.train.memory import pack_bytes

            while n_packs < len(group) and max(pack_bytes(p) for p in parts) > pack_memory:
                n_packs += 1
                parts = _even_split(group, n_packs)
        packs.extend(parts)
    return packs


def _even_split(group: list, n: int) -> list[list]:
    """`group` cut into n contiguous parts whose sizes differ by at most one."""
    size, extra = divmod(len(group), n)
    parts, start = [], 0
    for j in range(n):
        stop = start + size + (1 if j < extra else 0)
        parts.append(group[start:stop])
        start = stop
    return parts


def pack_memory_budget(executor: str = "inline", workers: int | None = None, device: str = "cpu",
                       slurm: dict | None = None) -> int | None:
    """Bytes one pack may use (memory.pack_bytes' estimate, above a worker's imports) so that the
    packs running at once fit: the default worker budget (memory.default_worker_budget: a share of
    this machine's available memory split over the concurrent workers, at most memory.WORKER_CAP)
    less a worker's own imports; on a GPU, its free memory shared by the workers; for SLURM, the job's --slurm-mem (the node's memory is unknown
    here, and so is a GPU's: None, no split)."""
    from depthscale.train.memory import HEADROOM, available_bytes, default_worker_budget, pack_budget

    if executor == "slurm":
        mem_gb = (slurm or {}).get("mem_gb")
        return int(HEADROOM * mem_gb * 1e9) if mem_gb and not str(device).startswith("cuda") else None
    from depthscale.runs.executors import available_cores

    n = max(1, min(workers or available_cores(), MAX_WORKERS)) if executor == "process" else 1
    if str(device).startswith("cpu"):
        return pack_budget(default_worker_budget(device, n))
    avail = available_bytes(device)  # a GPU's free memory, shared by the packs on it
    return None if avail is None else int(HEADROOM * avail / n)


def check_memory(packs: list[list[RunConfig]], executor: str = "inline", workers: int | None = None,
                 device: str = "cpu", flag: str = "allow_memory=True", pack_memory: int | None = None) -> None:
    """Refuse (memory.MemoryRefused) packs that would not fit in this machine's memory, the
    largest `concurrent_packs` of them at once, each estimated as its trainer holds its sets
    under the pack budget `pack_memory`. SLURM packs run elsewhere and are not checked."""
    n = concurrent_packs(executor, packs, workers)
    if n and packs:
        from depthscale.train.memory import check_packs

        check_packs(packs, device, concurrent=n, flag=flag, nbytes=pack_memory)


@dataclass(frozen=True)
class Plan:
    """A sweep planned once (`plan`): what `sweep --dry-run` prints and `run_sweep` runs. `configs`:
    every config of the sweep (its manifest lists them all); `packs`: this shard's runs still to
    train, split to fit `pack_memory` bytes (None: no split); `share`: the run ids of this shard;
    `skipped_done`, `skipped_failed`: runs of the share left out as done, or as failed before
    (retry_failed=False); `refusal`: why the packs would not fit this machine's memory (None: they
    fit, or run elsewhere)."""

    configs: list[RunConfig]
    packs: list[list[RunConfig]]
    shard: tuple[int, int] | None
    executor: str
    workers: int | None
    device: str
    slurm: dict | None
    pack_memory: int | None
    share: list[str]
    skipped_done: int
    skipped_failed: int
    refusal: MemoryRefused | None

    @property
    def planned(self) -> int:
        """Runs in the packs."""
        return sum(len(p) for p in self.packs)

    def check_memory(self, allow: bool = False) -> None:
        """Raise the plan's memory refusal (memory.MemoryRefused), if any, unless `allow`."""
        if self.refusal is not None and not allow:
            raise self.refusal


def _existing_store(store: Store | str | os.PathLike | None) -> Store | None:
    """A store to plan against: the Store given, or the one at a path opened read-only (None where
    there is none yet: nothing is done, and planning creates nothing)."""
    if store is None or isinstance(store, Store):
        return store
    try:
        return Store(store, readonly=True)
    except StoreError:
        return None


def _check_executor(executor: str, workers: int | None, slurm: dict | None) -> dict | None:
    """The executor's name, worker count and SLURM options checked (the options returned checked)."""
    if executor not in EXECUTORS:
        raise ConfigError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if workers is not None and not (isinstance(workers, int) and not isinstance(workers, bool)
                                    and 1 <= workers <= MAX_WORKERS):
        raise ConfigError(f"workers must be an integer between 1 and {MAX_WORKERS:,}, got {shown(workers)}")
    if executor == "slurm":  # before anything is written
        import_submitit()
        return check_slurm_options(slurm)
    return slurm


def plan(configs: Iterable[RunConfig], store: Store | str | os.PathLike | None = None,
         shard: tuple[int, int] | str | None = None, *, executor: str = "inline", workers: int | None = None,
         device: str = "cpu", slurm: dict | None = None, max_pack: int = 64, pack_key: Callable | None = None,
         retry_failed: bool = True, pack_memory: int | None = None, memory_flag: str = "allow_memory=True") -> Plan:
    """The sweep of `configs` against `store` (a Store, a path, or None: nothing done yet; nothing
    is created), planned once: the executor and its options checked, the memory budget of a pack
    (`pack_memory` bytes, default `pack_memory_budget`: this machine's memory shared by the
    workers, or --slurm-mem), the packs (`make_packs`: done runs dropped, this shard's share, split
    to fit the budget) and the memory check's verdict (`check_memory`; its refusal names
    `memory_flag` as the way to try anyway). `run_sweep` runs the Plan as it is."""
    slurm = _check_executor(executor, workers, slurm)
    configs, shard, store = list(configs), parse_shard(shard), _existing_store(store)
    if pack_memory is None:
        pack_memory = pack_memory_budget(executor, workers, device, slurm)
    packs = make_packs(configs, store, shard=shard, max_pack=max_pack, pack_key=pack_key,
                       retry_failed=retry_failed, pack_memory=pack_memory)
    try:
        check_memory(packs, executor, workers, device, flag=memory_flag, pack_memory=pack_memory)
        refusal = None
    except MemoryRefused as e:
        refusal = e
    share = [run_id(c) for c in _shard_share(configs, shard)]
    done = sum(store.is_done(rid) for rid in share) if store is not None else 0
    failed = sum(store.is_failed(rid) for rid in share) if store is not None and not retry_failed else 0
    return Plan(configs, packs, shard, executor, workers, device, slurm, pack_memory, share, done, failed, refusal)


def run_sweep(plan: Plan, store: Store | str, *, worker: Callable | str | None = None, name: str | None = None,
              progress: bool | None = None, allow_memory: bool = False, extra_jobs: Sequence[tuple] = ()) -> dict:
    """Run the packs of `plan` (sweeps.plan: nothing is planned again) into `store`; returns counts.

    counts: planned (runs in this shard's packs), packs, ran, skipped_done (done before the
    plan, or found done at claim time), skipped_claimed (held by another process),
    skipped_unreadable (a run directory this process may not read or write: warned, naming it), failed,
    skipped_failed (failed before, left alone because retry_failed=False). The slurm executor
    adds job_ids and slurm_folder, and the run counts only with slurm={"wait": True}.
    `worker` is a module-level callable (or 'module:function') with the signature of
    depthscale.train.training.run_pack, the default. `name` writes the sweep manifest (all configs,
    not just this shard's) so that `collect.status(store)` can report it. A plan whose packs would not
    fit this machine's memory (Plan.refusal: a single run too large) is refused before anything
    is written, unless `allow_memory`. A broken run (store.is_broken) is run again.
    `extra_jobs`: (module-level callable, args) pairs the process executor runs in its pool after
    the packs (reproduce's theory; executors.run_process), also when no pack is left to run; the
    other executors ignore them.
    """
    if not isinstance(plan, Plan):
        raise TypeError(f"run_sweep runs a sweeps.Plan (sweeps.plan(configs, store, ...)), got {type(plan).__name__}")
    if not isinstance(store, Store):
        store = Store(store)
    fn = resolve_worker(worker)  # fail early, and hand the pool or SLURM an importable callable
    plan.check_memory(allow_memory)
    if name is not None:
        manifests.write(store, name, [run_id(c) for c in plan.configs])
    result = {"planned": plan.planned, "packs": len(plan.packs), **dict.fromkeys(COUNT_KEYS, 0)}
    result.update(skipped_done=plan.skipped_done, skipped_failed=plan.skipped_failed)
    packs, executor, device = plan.packs, plan.executor, plan.device
    extra_jobs = list(extra_jobs) if executor == "process" else []
    if not packs and not extra_jobs:
        return result
    if executor == "slurm":
        out = run_slurm(packs, store, fn, device, name, plan.slurm)
        for k in COUNT_KEYS:
            out[k] = result[k] + out.get(k, 0)
        return {**result, **out}
    from tqdm import tqdm

    disable = None if progress is None else not progress
    with tqdm(total=plan.planned, unit="run", desc=name or "sweep", disable=disable) as bar:
        if executor == "inline":
            counts = run_inline(packs, store, fn, device, progress, bar, plan.pack_memory)
        else:
            counts = run_process(packs, store, fn, device, plan.workers, bar, extra_jobs, plan.pack_memory)
    for k in COUNT_KEYS:
        result[k] += counts[k]
    return result


__all__ = ["load_grid", "expand_grid", "parse_shard", "Plan", "plan", "make_packs", "run_sweep", "check_memory",
           "pack_memory_budget"]
