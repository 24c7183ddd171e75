"""Per-context re-evaluation of stored runs, for statistics paired by evaluation context (SPEC §9).

The stored metrics of a run are means over its evaluation contexts (SPEC §5). Runs with the same
data fields share those contexts (training.train_pack: eval_contexts(cfg, eval_contexts,
eval_seed)), so a difference between two runs is best judged context by context:

- `per_context`: a stored run's squared error, target and selection loss per evaluation context;
- `paired_difference`: R_a - R_b with the SE of the paired difference (claim 3);
- `bootstrap_dQ`: Delta Q(q) = Q_1(q) - Q_Lmax(q) with a paired bootstrap SE over contexts (claim 10);
- `floor_on_eval`: the softmax-ensemble floor of SPEC §3.4 on a run's own evaluation contexts (claim 5c).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from depthscale.base.atomic import write_atomic
from depthscale.base.errors import InputError
from depthscale.config.run import RunConfig
from depthscale.data.measurements import PERCENTILES, eval_batch, eval_contexts, selection_loss, split_contexts
from depthscale.theory.softmax_floor import floor_from_contexts

CACHE_FILE = "per_context.npz"  # beside params.pt in the run directory; keyed by params.pt's mtime and size
CACHE_VERSION = 1  # bump when what per_context computes changes: older files are then recomputed
_cache: dict[tuple[str, str], tuple[tuple, dict]] = {}  # (store root, run id) -> (params signature, result)
_floors: dict[tuple, dict] = {}  # floor_on_eval's results, by evaluation set and arguments
_boots: dict[tuple, dict] = {}  # bootstrap_dQ's results, by runs (and their params signatures) and arguments


def eval_key(cfg: RunConfig) -> tuple:
    """What identifies a run's evaluation contexts: equal keys, the same contexts in the same order
    (d, P, a, b, task, k, eval_seed, eval_contexts, clusters, noise)."""
    return (cfg.d, cfg.P, cfg.a, cfg.b, cfg.task, cfg.k, cfg.eval_seed, cfg.eval_contexts, cfg.clusters, cfg.noise)


def _signature(store, run_id: str) -> tuple:
    """(mtime in ns, size) of the run's params.pt: the stored model a result was computed from."""
    try:
        st = (store.run_path(run_id) / "params.pt").stat()
    except OSError:
        return ()
    return (st.st_mtime_ns, st.st_size)


def _evaluate(store, run_id: str, device, cfg: RunConfig | None = None) -> dict:
    """Every evaluation context through the stored model, in measure()'s order and slicing; `cfg`:
    the evaluation contexts of that config instead of the run's own (evaluate_on)."""
    cfg = store.load_config(run_id) if cfg is None else cfg
    pack = store.load_model(run_id, device)
    chunks = eval_contexts(cfg, cfg.eval_contexts, cfg.eval_seed, device)
    sq, ystar, sel = [], [], []
    for ctx in (part for chunk in chunks for part in split_contexts(chunk, eval_batch(device))):
        with torch.no_grad():
            out = pack(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, models=[0])[0]
        # measurements.decomposition's arithmetic: e_l = f_l - y* in float32, then the layer mean in float64
        e = (out.f_BxL - ctx.ystar_B.unsqueeze(1)).double().mean(1)
        sq.append(e.pow(2).cpu())
        ystar.append(ctx.ystar_B.double().cpu())
        if cfg.task == "difficult" and out.p_BxLxP is not None:
            sel.append(selection_loss(out.p_BxLxP, ctx.sel_Bxk).double().cpu())
    return {"sq_err": torch.cat(sq).numpy(), "ystar": torch.cat(ystar).numpy(),
            "sel_E": torch.cat(sel).numpy() if sel else None}


def _read_cached(path: Path, sig: tuple, n: int) -> dict | None:
    try:
        with np.load(path) as z:
            if int(z["version"]) != CACHE_VERSION or tuple(z["signature"].tolist()) != sig:
                return None
            out = {"sq_err": z["sq_err"], "ystar": z["ystar"], "sel_E": z["sel_E"] if bool(z["has_sel"]) else None}
    except (OSError, KeyError, ValueError, EOFError):  # missing, stale or unreadable: computed again
        return None
    return out if all(v is None or v.shape == (n,) for v in out.values()) else None


def _write_cached(path: Path, sig: tuple, arrays: dict) -> None:
    z = dict(version=np.int64(CACHE_VERSION), signature=np.asarray(sig, dtype=np.int64),
             sq_err=arrays["sq_err"], ystar=arrays["ystar"], has_sel=np.bool_(arrays["sel_E"] is not None),
             sel_E=arrays["sel_E"] if arrays["sel_E"] is not None else np.zeros(0))
    try:
        write_atomic(path, lambda fh: np.savez(fh, **z))
    except OSError:  # a store we may read but not write (a shared or fetched copy): no disk cache
        pass


def per_context(store, run_id: str, device="cpu", cache: bool = True) -> dict:
    """A stored run re-evaluated on its evaluation contexts, one number per context (SPEC §5).

    Numpy float64 arrays in the order measure() saw the contexts:
    - "sq_err": (y_hat - y*)^2 with y_hat = (1/L) sum_l f_l (their mean is the stored R);
    - "ystar": the target y*;
    - "sel_E": the selection loss E_L(c) = ||p_bar_L(c) - p*||^2 on the difficult task for a model
      with attention (the stored selection_percentiles are its percentiles), else None.
    Also "key" (`eval_key`: runs with equal keys share their contexts), "n" and "run_id".

    Cached in this process (by store root and run id) and, unless `cache` is False or the store
    is read-only, in the run directory (CACHE_FILE, written atomically); both are recomputed when
    params.pt changes (mtime or size). The arrays are read-only. The model runs on `device`; the
    numbers agree across devices to float rounding (the cache keeps the first)."""
    cfg = store.load_config(run_id)
    sig = _signature(store, run_id)
    ck = (str(store.root), run_id)
    hit = _cache.get(ck)
    if cache and hit is not None and hit[0] == sig and sig:
        return dict(hit[1])
    path = store.run_path(run_id) / CACHE_FILE
    arrays = _read_cached(path, sig, cfg.eval_contexts) if cache and sig else None
    if arrays is None:
        arrays = _evaluate(store, run_id, device)
        if cache and sig and not store.readonly and _signature(store, run_id) == sig:
            _write_cached(path, sig, arrays)
    for v in arrays.values():
        if v is not None:
            v.flags.writeable = False
    res = dict(arrays, key=eval_key(cfg), n=int(arrays["sq_err"].size), run_id=run_id)
    if cache and sig:
        _cache[ck] = (sig, res)
    return dict(res)


def evaluate_on(store, run_id: str, cfg: RunConfig, device="cpu") -> dict:
    """per_context's arrays for the stored model of `run_id` on the evaluation contexts of `cfg`
    (e.g. the run's config with another eval_seed: a fresh evaluation set), not cached."""
    if not isinstance(cfg, RunConfig):
        raise InputError(f"cfg must be a RunConfig, got {type(cfg).__name__}")
    return _evaluate(store, run_id, device, cfg)


def clear_cache() -> None:
    """Forget the in-process results (per_context, bootstrap_dQ and floor_on_eval; files on disk stay)."""
    _cache.clear()
    _floors.clear()
    _boots.clear()


def _shared(store, rid_a: str, rid_b: str, device) -> tuple[dict, dict]:
    a, b = per_context(store, rid_a, device), per_context(store, rid_b, device)
    if a["key"] != b["key"]:
        raise InputError(f"runs {rid_a} and {rid_b} do not share their evaluation contexts: "
                         f"{a['key']} != {b['key']} (d, P, a, b, task, k, eval_seed, eval_contexts, clusters, noise)")
    return a, b


def paired_difference(store, rid_a: str, rid_b: str, device="cpu") -> dict:
    """R_a - R_b over the contexts the two runs share, with the SE of the paired difference
    (SPEC §9 claim 3): diff = mean_c (sq_err_a(c) - sq_err_b(c)), se = its std (ddof 1) / sqrt(n).
    Also R_a, R_b. InputError if the runs were evaluated on different contexts."""
    a, b = _shared(store, rid_a, rid_b, device)
    d = a["sq_err"] - b["sq_err"]
    n = d.size
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return {"diff": float(d.mean()), "se": se, "n": n,
            "R_a": float(a["sq_err"].mean()), "R_b": float(b["sq_err"].mean())}


def _check_int(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise InputError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def bootstrap_dQ(store, rid_1: str, rid_L: str, percentiles=None, n_boot: int = 1000, seed: int = 0,
                 device="cpu") -> dict:
    """Delta Q(q) = Q_1(q) - Q_L(q), the difference of the selection-loss percentiles of two runs
    on their shared evaluation contexts (SPEC §5; claim 10), with a paired bootstrap SE: each of
    `n_boot` resamples draws n context indices with replacement (numpy Generator seeded by `seed`)
    and uses the same indices for both runs; `se` is the std (ddof 1) of the resampled Delta Q.

    Returns q (list), dQ, se, Q_1, Q_L (arrays over q; np.percentile, linear interpolation, as the
    stored selection_percentiles), n and n_boot. Cached in this process by the two runs (while
    their params.pt stay as they were) and the arguments: fig13 and claim 10 read the same one."""
    q = np.asarray(PERCENTILES if percentiles is None else percentiles, dtype=np.float64)
    if q.ndim != 1 or q.size == 0 or not np.all((q >= 0) & (q <= 100)):
        raise InputError(f"percentiles must be a non-empty list of numbers in [0, 100], got {percentiles!r}")
    n_boot, seed = _check_int("n_boot", n_boot, 2), _check_int("seed", seed, 0)
    sigs = (_signature(store, rid_1), _signature(store, rid_L))
    ck = (str(store.root), rid_1, rid_L, tuple(q.tolist()), n_boot, seed, sigs)
    if all(sigs) and ck in _boots:
        return _copy_boot(_boots[ck])
    res = _bootstrap(store, rid_1, rid_L, q, n_boot, seed, device)
    for k in ("dQ", "se", "Q_1", "Q_L"):
        res[k].flags.writeable = False
    if all(sigs):
        _boots[ck] = res
    return _copy_boot(res)


def _copy_boot(res: dict) -> dict:
    return dict(res, q=list(res["q"]))


def _bootstrap(store, rid_1: str, rid_L: str, q: np.ndarray, n_boot: int, seed: int, device) -> dict:
    """bootstrap_dQ's computation (its arguments checked)."""
    a, b = _shared(store, rid_1, rid_L, device)
    for rid, r in ((rid_1, a), (rid_L, b)):
        if r["sel_E"] is None:
            raise InputError(f"run {rid} has no selection loss (the easy task, or a model without attention)")
    E1, EL = a["sel_E"], b["sel_E"]
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


def floor_on_eval(cfg: RunConfig, device="cpu", temperatures=None, depths=(), batches: int = 10) -> dict:
    """The softmax-ensemble floor of SPEC §3.4 on exactly the evaluation contexts of a run with
    config `cfg` (eval_contexts(cfg, cfg.eval_contexts, cfg.eval_seed)), not on a fresh sample: the
    best single cosine head and the best nonnegative mixture of cosine-head temperatures with one
    common gain ("ensemble_floor"), each cross-fitted over `batches` consecutive batches of those
    contexts (softmax_floor.floor_from_contexts, which has every key softmax_floor.softmax_floor
    has; `depths` adds the best stacks of L heads).

    Adds "single_tau" (the best single head's temperature), "n", "key" (eval_key) and the data
    fields; "sq_err_ensemble" and "sq_err_single" are per context, in per_context's order, for
    a comparison with a run paired by context. Cached in this process."""
    if not isinstance(cfg, RunConfig):
        raise InputError(f"cfg must be a RunConfig, got {type(cfg).__name__}")
    tau = None if temperatures is None else tuple(np.asarray(temperatures, dtype=np.float64).ravel().tolist())
    ck = (eval_key(cfg), tau, tuple(np.atleast_1d(np.asarray(depths)).tolist()), batches, torch.device(device).type)
    if ck not in _floors:
        chunks = eval_contexts(cfg, cfg.eval_contexts, cfg.eval_seed, device)
        x, q, y, ys = (torch.cat([getattr(c, f) for c in chunks]) for f in ("X_BxPxd", "xq_Bxd", "y_BxP", "ystar_B"))
        res = floor_from_contexts(x, q, y, ys, temperatures=temperatures, batches=batches, depths=depths)
        for k in ("sq_err_ensemble", "sq_err_single"):
            res[k].flags.writeable = False
        res.update(single_tau=res["single_head_temperature"], key=eval_key(cfg), samples=res["n"],
                   seed=cfg.eval_seed, d=cfg.d, P=cfg.P, k=cfg.k, a=cfg.a, b=cfg.b, task=cfg.task)
        _floors[ck] = res
    return dict(_floors[ck])


__all__ = ["per_context", "evaluate_on", "paired_difference", "bootstrap_dQ", "floor_on_eval", "eval_key", "clear_cache",
           "CACHE_FILE"]
