"""What the sweep's idle workers compute for the report (issue 50: no idle core).

The best stacks of L cosine heads B_L that the construction certificate compares every series of
the softmax family with (SPEC §4; analysis.certificates.series_certificates) depend only on a
series' evaluation contexts and depths, not on its trained runs. `floor_jobs` turns the configs a
sweep trains into one job per evaluation set and depths (`compute_floor`), queued with the
theory's after the packs (sweeps.run_sweep's extra_jobs): each writes its floor into the store's
cache (store.cache: cache/floors/), where the report's paired.floor_on_eval finds it instead of
computing it in one process after the sweep. A job whose floor is cached does nothing."""

from __future__ import annotations

import time

from depthscale.analysis import paired
from depthscale.analysis.claims import CONSTRUCTION_KINDS
from depthscale.config.run import RunConfig
from depthscale.runs.per_context import StoredRuns
from depthscale.store.store import Store


def floor_series(configs) -> list[tuple[RunConfig, tuple[int, ...]]]:
    """(one config, its series' depths) per evaluation set and depths that a certificate will read:
    the series (model, task, k, a, b) of the kinds of which a stack of cosine heads is a setting
    (claims.CONSTRUCTION_KINDS), with the depths the sweep trains; one entry per floor name
    (paired.floor_cache_name), the largest sets first."""
    depths: dict[tuple, set] = {}
    first: dict[tuple, RunConfig] = {}
    for c in configs:
        if c.model not in CONSTRUCTION_KINDS:
            continue
        s = (c.model, c.task, c.k, c.a, c.b, paired.eval_key(c))
        depths.setdefault(s, set()).add(int(c.L))
        first.setdefault(s, c)
    out, seen = [], set()
    for s, Ls in depths.items():
        name = paired.floor_cache_name(first[s], None, tuple(sorted(Ls)), paired.FLOOR_BATCHES)
        if name not in seen:
            seen.add(name)
            out.append((first[s], tuple(sorted(Ls))))
    return sorted(out, key=lambda e: -e[0].eval_contexts * e[0].P)


def floor_jobs(configs, store_dir, device: str = "cpu") -> list[tuple]:
    """(compute_floor, args) for every floor_series entry the store's cache lacks."""
    reader = StoredRuns(Store(store_dir, readonly=True))
    return [(compute_floor, (str(store_dir), cfg, Ls, device)) for cfg, Ls in floor_series(configs)
            if reader.cached_floor(paired.floor_cache_name(cfg, None, Ls, paired.FLOOR_BATCHES)) is None]


def compute_floor(store_dir: str, cfg: RunConfig, depths: tuple, device: str = "cpu") -> float:
    """paired.floor_on_eval(cfg, depths=depths) into the store's cache (it reads a cached one instead
    of computing it); the seconds it took. A module-level function: the sweep's process pool runs it."""
    reader = StoredRuns(Store(store_dir))
    t0 = time.perf_counter()
    paired.floor_on_eval(cfg, device, depths=tuple(depths), reader=reader)
    paired.clear_cache()
    return time.perf_counter() - t0


__all__ = ["floor_series", "floor_jobs", "compute_floor"]
