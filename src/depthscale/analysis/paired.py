"""Statistics paired by evaluation context, from stored runs' per-context arrays (SPEC §9).

The stored metrics of a run are means over its evaluation contexts (SPEC §5). Runs with the same
data fields share those contexts (training.train_pack: eval_contexts(cfg, eval_contexts,
eval_seed)), so a difference between two runs is best judged context by context. The arrays come
through a `RunReader` (runs.per_context.StoredRuns over a store): nothing here builds or runs a
model, and nothing here writes.

- `per_context`: a run's squared error, target and selection loss per evaluation context;
- `paired_difference`: R_a - R_b with the SE of the paired difference (claim 3);
- `bootstrap_dQ`: Delta Q(q) = Q_1(q) - Q_Lmax(q) with a paired bootstrap SE over contexts (claim 10);
- `floor_on_eval`: the softmax-ensemble floor of SPEC §3.4 on a run's own evaluation contexts (claim 5c).
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from depthscale.base import timing
from depthscale.base.errors import InputError
from depthscale.config.run import RunConfig
from depthscale.data.measurements import PERCENTILES, eval_contexts
from depthscale.theory.softmax_floor import floor_from_chunks

_floors: dict[tuple, dict] = {}  # floor_on_eval's results, by evaluation set and arguments
_boots: dict[tuple, dict] = {}  # bootstrap_dQ's results, by the two runs' selection losses and arguments


@runtime_checkable
class RunReader(Protocol):
    """The read-only door analysis reads stored runs through (Results.reader): a run's config, its
    training curves, and its per-context arrays on its own evaluation contexts ("sq_err", "ystar",
    "sel_E" or None: numpy float64 of one length, in measure()'s order; runs.per_context.evaluate)."""

    def load_config(self, run_id: str) -> RunConfig: ...

    def load_curves(self, run_id: str) -> dict: ...

    def per_context(self, run_id: str, device="cpu") -> dict: ...


def eval_key(cfg: RunConfig) -> tuple:
    """What identifies a run's evaluation contexts: equal keys, the same contexts in the same order
    (d, P, a, b, task, k, eval_seed, eval_contexts, clusters, noise)."""
    return (cfg.d, cfg.P, cfg.a, cfg.b, cfg.task, cfg.k, cfg.eval_seed, cfg.eval_contexts, cfg.clusters, cfg.noise)


def per_context(reader: RunReader, run_id: str, device="cpu") -> dict:
    """A stored run's arrays on its evaluation contexts, one number per context (SPEC §5):
    - "sq_err": (y_hat - y*)^2 with y_hat = (1/L) sum_l f_l (their mean is the stored R);
    - "ystar": the target y*;
    - "sel_E": the selection loss E_L(c) = ||p_bar_L(c) - p*||^2 on the difficult task for a model
      with attention (the stored selection_percentiles are its percentiles), else None.
    Also "key" (`eval_key`: runs with equal keys share their contexts), "n" and "run_id"."""
    cfg = reader.load_config(run_id)
    arrays = reader.per_context(run_id, device)
    return dict(arrays, key=eval_key(cfg), n=int(arrays["sq_err"].size), run_id=run_id)


def clear_cache() -> None:
    """Forget bootstrap_dQ's and floor_on_eval's results held in this process."""
    _floors.clear()
    _boots.clear()


def _shared(reader: RunReader, rid_a: str, rid_b: str, device) -> tuple[dict, dict]:
    a, b = per_context(reader, rid_a, device), per_context(reader, rid_b, device)
    if a["key"] != b["key"]:
        raise InputError(f"runs {rid_a} and {rid_b} do not share their evaluation contexts: "
                         f"{a['key']} != {b['key']} (d, P, a, b, task, k, eval_seed, eval_contexts, clusters, noise)")
    return a, b


def paired_difference(reader: RunReader, rid_a: str, rid_b: str, device="cpu") -> dict:
    """R_a - R_b over the contexts the two runs share, with the SE of the paired difference
    (SPEC §9 claim 3): diff = mean_c (sq_err_a(c) - sq_err_b(c)), se = its std (ddof 1) / sqrt(n).
    Also R_a, R_b. InputError if the runs were evaluated on different contexts."""
    a, b = _shared(reader, rid_a, rid_b, device)
    d = a["sq_err"] - b["sq_err"]
    n = d.size
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return {"diff": float(d.mean()), "se": se, "n": n,
            "R_a": float(a["sq_err"].mean()), "R_b": float(b["sq_err"].mean())}


def _check_int(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise InputError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _digest(*arrays: np.ndarray) -> str:
    """What identifies arrays by their numbers (a cache key that follows the data, not a file)."""
    h = hashlib.sha256()
    for x in arrays:
        h.update(f"{x.dtype.str}{x.shape}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()


def bootstrap_dQ(reader: RunReader, rid_1: str, rid_L: str, percentiles=None, n_boot: int = 1000, seed: int = 0,
                 device="cpu") -> dict:
    """Delta Q(q) = Q_1(q) - Q_L(q), the difference of the selection-loss percentiles of two runs
    on their shared evaluation contexts (SPEC §5; claim 10), with a paired bootstrap SE: each of
    `n_boot` resamples draws n context indices with replacement (numpy Generator seeded by `seed`)
    and uses the same indices for both runs; `se` is the std (ddof 1) of the resampled Delta Q.

    Returns q (list), dQ, se, Q_1, Q_L (arrays over q; np.percentile, linear interpolation, as the
    stored selection_percentiles), n and n_boot. Cached in this process by the two runs' selection
    losses and the arguments: fig13 and claim 10 read the same one."""
    q = np.asarray(PERCENTILES if percentiles is None else percentiles, dtype=np.float64)
    if q.ndim != 1 or q.size == 0 or not np.all((q >= 0) & (q <= 100)):
        raise InputError(f"percentiles must be a non-empty list of numbers in [0, 100], got {percentiles!r}")
    n_boot, seed = _check_int("n_boot", n_boot, 2), _check_int("seed", seed, 0)
    a, b = _shared(reader, rid_1, rid_L, device)
    for rid, r in ((rid_1, a), (rid_L, b)):
        if r["sel_E"] is None:
            raise InputError(f"run {rid} has no selection loss (the easy task, or a model without attention)")
    ck = (_digest(a["sel_E"], b["sel_E"]), tuple(q.tolist()), n_boot, seed)
    if ck not in _boots:
        res = _bootstrap(a["sel_E"], b["sel_E"], q, n_boot, seed)
        for k in ("dQ", "se", "Q_1", "Q_L"):
            res[k].flags.writeable = False
        _boots[ck] = res
    return dict(_boots[ck], q=list(_boots[ck]["q"]))


def _bootstrap(E1: np.ndarray, EL: np.ndarray, q: np.ndarray, n_boot: int, seed: int) -> dict:
    """bootstrap_dQ's computation on two selection-loss arrays paired by context (arguments checked)."""
    n = E1.size
    Q1, QL = np.percentile(E1, q), np.percentile(EL, q)
    rng = np.random.default_rng(seed)
    block = max(1, 2**21 // n)  # resamples at a time: ~16 MB of indices
    boots = []
    for s in range(0, n_boot, block):
        idx = rng.integers(0, n, size=(min(block, n_boot - s), n))
        boots.append(np.percentile(E1[idx], q, axis=1) - np.percentile(EL[idx], q, axis=1))  # (len(q), block)
    dQ_b = np.concatenate(boots, axis=1)
    return {"q": q.tolist(), "dQ": Q1 - QL, "se": dQ_b.std(axis=1, ddof=1), "Q_1": Q1, "Q_L": QL,
            "n": n, "n_boot": n_boot}


FLOOR_BATCHES = 10  # floor_on_eval's cross-fitting batches, the ones the certificates read


def floor_on_eval(cfg: RunConfig, device="cpu", temperatures=None, depths=(), batches: int = FLOOR_BATCHES,
                  reader: RunReader | None = None) -> dict:
    """The softmax-ensemble floor of SPEC §3.4 on exactly the evaluation contexts of a run with
    config `cfg` (eval_contexts(cfg, cfg.eval_contexts, cfg.eval_seed)), not on a fresh sample: the
    best single cosine head and the best nonnegative mixture of cosine-head temperatures with one
    common gain ("ensemble_floor"), each cross-fitted over `batches` consecutive batches of those
    contexts (softmax_floor.floor_from_chunks, which has every key softmax_floor.softmax_floor
    has; `depths` adds the best stacks of L heads).

    Adds "single_tau" (the best single head's temperature), "n", "key" (eval_key) and the data
    fields; "sq_err_ensemble" and "sq_err_single" are per context, in per_context's order, for
    a comparison with a run paired by context. Cached in this process and, given a `reader` that
    keeps floors (runs.per_context.StoredRuns: the store's cache/floors/), in its store, where the
    sweep's idle workers put them (report.tail.floor_jobs). A call without depths is served by a
    cached result with depths (the same numbers: the stacks are only added; `without_depths`)."""
    if not isinstance(cfg, RunConfig):
        raise InputError(f"cfg must be a RunConfig, got {type(cfg).__name__}")
    tau = None if temperatures is None else tuple(np.asarray(temperatures, dtype=np.float64).ravel().tolist())
    depths = tuple(int(L) for L in np.atleast_1d(np.asarray(depths)).tolist())
    name = floor_cache_name(cfg, tau, depths, batches)
    ck = (name, torch.device(device).type)
    if ck not in _floors:
        res = _kept_floor(reader, name, ck[1])
        if res is None:
            t0 = time.perf_counter()
            res = _compute_floor(cfg, device, temperatures, depths, batches)
            keep = getattr(reader, "cache_floor", None)
            if keep is not None:
                keep(name, res, time.perf_counter() - t0)
        for k in ("sq_err_ensemble", "sq_err_single"):
            res[k].flags.writeable = False
        _floors[ck] = res
    return dict(_floors[ck])


def floor_cache_name(cfg: RunConfig, tau, depths: tuple, batches: int) -> str:
    """'<24 hex of the evaluation set and the fit's arguments>-<12 hex of the depths>': what names a
    floor_on_eval result in this process and in a store's cache (the prefix alone: one set's floor
    with any depths)."""
    head = hashlib.sha256(repr((eval_key(cfg), tau, int(batches))).encode()).hexdigest()[:24]
    return f"{head}-{_depths_digest(tuple(depths))}"


def _kept_floor(reader, name: str, device_type: str) -> dict | None:
    """The floor named `name` from the reader's store; without depths, one of the same set with
    depths, from this process or the store (without_depths); None where neither has it."""
    read = getattr(reader, "cached_floor", None)
    got = read(name) if read is not None else None
    if got is not None:
        return _served(got)
    if not name.endswith("-" + _depths_digest(())):
        return None
    prefix = name.split("-")[0] + "-"
    for (other, dev), res in _floors.items():
        if other.startswith(prefix) and dev == device_type:
            return without_depths(res)
    names = getattr(reader, "floor_names", None)
    for other in names(prefix) if names is not None and read is not None else ():
        res = read(other)
        if res is not None:
            return without_depths(_served(res))
    return None


def _served(stored: dict) -> dict:
    """A floor read back from a store's cache as floor_on_eval gives it (its key a tuple again); the
    seconds it took where it was computed (the sweep's tail) are counted to the figures phase here."""
    timing.add("figures", float(stored.pop("seconds", 0.0)))
    return dict(stored, key=tuple(stored["key"]))


def _depths_digest(depths: tuple) -> str:
    return hashlib.sha256(repr(tuple(depths)).encode()).hexdigest()[:12]


def without_depths(res: dict) -> dict:
    """A floor_on_eval result with depths as the call without depths gives it: its stacks and its
    iid-depth curve dropped (every other number is computed before them, from the same moments)."""
    out = dict(res, sq_err_stack={}, best_stack=dict(res["best_stack"], depths=[], R=[]))
    out["iid_depth"] = dict(res["iid_depth"], depths=[], R=[])
    return out


def _compute_floor(cfg: RunConfig, device, temperatures, depths: tuple, batches: int) -> dict:
    # streamed: each chunk drawn when read (the same bits), never the whole set in float64 (issue 51:
    # the whole 102,400-context set concatenated and cast held 1.7 GB in the report's process)
    chunks = eval_contexts(cfg, cfg.eval_contexts, cfg.eval_seed, device, hold=False)
    res = floor_from_chunks(((c.X_BxPxd, c.xq_Bxd, c.y_BxP, c.ystar_B) for c in chunks), cfg.eval_contexts,
                            temperatures=temperatures, batches=batches, depths=depths)
    res.update(single_tau=res["single_head_temperature"], key=eval_key(cfg), samples=res["n"],
               seed=cfg.eval_seed, d=cfg.d, P=cfg.P, k=cfg.k, a=cfg.a, b=cfg.b, task=cfg.task)
    return res


__all__ = ["RunReader", "per_context", "paired_difference", "bootstrap_dQ", "floor_on_eval", "floor_cache_name", "FLOOR_BATCHES",
           "without_depths", "eval_key", "clear_cache"]
