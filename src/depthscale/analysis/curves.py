"""What the figures, tables and claims read off the results: power-law fits of a series (SPEC
§6.1), the Table 5 gap fit, mode-wise curves and where modes are learned, the selection-loss
quantiles, the measured plateau and the slopes of the finite-size reference curves.

Input: `results.Results` (the store's finished runs of one preset) and `results.Theory`. Fits are
made to the seed means; a series that cannot be fitted gives None, never an exception. A fit that
can be made but is degenerate (fits.FitResult.status) is returned as it is: the caller draws it as
data only and judges no claim on it.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

from depthscale.analysis.results import Results, Series, Theory, as_array
from depthscale.config.records import depth_set
from depthscale.data.measurements import PERCENTILES
from depthscale.theory.fits import FitResult, fit_gap, fit_power_law

MODE_FLOOR = 0.02  # normalised mode-wise loss that counts as learned (Fig. 3c)


def fit_series(s: Series, floor: bool, metric: str = "R") -> FitResult | None:
    """Power-law fit of a series' seed means against depth; None when it cannot be fitted."""
    if not s:
        return None
    return fit_xy(s.depths.astype(float), s.get(metric), floor)  # depths are positive and finite


def loss_fit(res: Results, model: str, task: str, k: int, a: float, b: float,
             floor: bool | None = None) -> tuple[Series, FitResult | None]:
    """The loss series over the preset's depths and its fit (L0 = 0 on the easy task)."""
    s = res.series(model, task, k, a, b)
    return s, fit_series(s, task != "easy" if floor is None else floor)


def gap_fit(res: Results, a: float, b: float, k: int = 2) -> tuple[FitResult | None, FitResult | None, Series]:
    """Table 5: L0 from the nonlinear loss fit, then L0 - C_L = c L^-alpha (L >= 2)."""
    s, f = loss_fit(res, "nonlinear", "difficult", k, a, b)
    if f is None:
        return None, None, s
    C = s.get("C")
    ok = np.isfinite(C) & (s.depths > 1)
    if ok.sum() < 2:
        return f, None, s
    try:
        return f, fit_gap(s.depths[ok].astype(float), C[ok], f.L0), s
    except ValueError:
        return f, None, s


def mode_curves(s: Series, modes: Sequence[int]) -> dict[int, np.ndarray]:
    """Seed-mean R_k over the series' depths for each mode k (1-based) present."""
    out = {}
    arrs = s.arrays.get("mode_R", [])
    if not arrs or any(x is None for x in arrs):
        return out
    M = np.stack([x[0] for x in arrs])  # depths x d
    for m in modes:
        if 1 <= m <= M.shape[1]:
            out[m] = M[:, m - 1]
    return out


def normalised_modes(s: Series, modes: Sequence[int], d: int, a: float, b: float) -> dict[int, np.ndarray]:
    """R_k / (omega_k lambda_k) (Fig. 3c)."""
    k = np.arange(1, d + 1, dtype=float)
    lw = k ** (-a) * k ** (-b)
    return {m: v / lw[m - 1] for m, v in mode_curves(s, modes).items()}


def mode_crossings(s: Series, modes: Sequence[int], d: int, a: float, b: float,
                   threshold: float = MODE_FLOOR) -> dict[int, float]:
    """Smallest depth at which each mode's normalised loss is below `threshold` (inf if never)."""
    out = {}
    for m, v in normalised_modes(s, modes, d, a, b).items():
        below = np.flatnonzero(v < threshold)
        out[m] = float(s.depths[below[0]]) if below.size else math.inf
    return out


def reducible_modes(s: Series, modes: Sequence[int], floor: bool = True) -> dict[int, np.ndarray]:
    """(R_k(L) - R_k,inf) / (R_k(1) - R_k,inf), R_k,inf the L0 of a per-mode power-law fit (Fig. 7b).
    A mode whose fit is degenerate (fits.FitResult.status) has no R_k,inf and is left out (drawn
    as missing; `reducible_modes_judged` says why, for claim 7).
    floor=False: R_k,inf = 0 without a fit (the easy task, whose loss fit has L0 = 0, SPEC §6.1):
    R_k(L) / R_k(1)."""
    return reducible_modes_judged(s, modes, floor)[0]


def reducible_modes_judged(s: Series, modes: Sequence[int], floor: bool = True) -> tuple[dict, dict]:
    """`reducible_modes` and {mode: why it has no curve} for every mode of `modes` left out
    (no runs at L = 1, fewer than 3 positive points, a degenerate fit, R_k(1) <= R_k,inf)."""
    out: dict[int, np.ndarray] = {}
    why: dict[int, str] = {}
    if not s or s.depths[0] != 1:
        return out, {m: "no runs at L = 1" for m in modes}
    curves = mode_curves(s, modes)
    why.update({m: "no mode-wise loss" for m in modes if m not in curves})
    for m, v in curves.items():
        if not floor:
            if np.isfinite(v[0]) and v[0] > 0:
                out[m] = v / v[0]
            else:
                why[m] = "R_k(1) not positive"
            continue
        ok = np.isfinite(v) & (v > 0)
        if ok.sum() < 3:
            why[m] = f"{int(ok.sum())} positive points (need 3)"
            continue
        try:
            f = fit_power_law(s.depths[ok].astype(float), v[ok], floor=True)
        except ValueError as e:
            why[m] = f"no fit: {e}"
            continue
        if not f.ok:
            why[m] = f"degenerate fit: {f.reason}"
            continue
        den = v[0] - f.L0
        if den > 0:
            out[m] = (v - f.L0) / den
        else:
            why[m] = f"R_k(1) <= fitted R_k,inf {f.L0:.4g}"
    return out, why


def rel_change_last_two(s: Series, metric: str) -> float:
    """|X(Lmax) - X(Lmax/2)| / |X(Lmax/2)| over the last two depths present (nan if < 2)."""
    y = s.get(metric)
    ok = np.flatnonzero(np.isfinite(y))
    if ok.size < 2:
        return math.nan
    prev, last = y[ok[-2]], y[ok[-1]]
    return abs(last - prev) / abs(prev) if prev != 0 else math.inf


def selection_quantiles(res: Results) -> dict | None:
    """Q_1(q), Q_Lmax(q), Delta Q(q) with SEs over seeds (fig13, claim 10); None if missing."""
    L1, Lmax = depth_set(res.preset, "ends")
    rows1 = res.runs("nonlinear", "difficult", 2, 0.0, 0.0, L1)
    rowsM = res.runs("nonlinear", "difficult", 2, 0.0, 0.0, Lmax)

    def stack(rows):
        got = [as_array(r.get("selection_percentiles")) for r in rows]
        got = [g for g in got if g is not None]
        return np.stack(got) if got else None

    Q1, QM = stack(rows1), stack(rowsM)
    if Q1 is None or QM is None:
        return None
    seeds1 = [r["seed"] for r in rows1 if as_array(r.get("selection_percentiles")) is not None]
    seedsM = [r["seed"] for r in rowsM if as_array(r.get("selection_percentiles")) is not None]
    common = sorted(set(seeds1) & set(seedsM))
    if common:  # Delta Q per seed, paired
        dQ = np.stack([Q1[seeds1.index(s)] - QM[seedsM.index(s)] for s in common])
    else:
        dQ = (Q1.mean(0) - QM.mean(0))[None]

    def se(x):
        return x.std(0, ddof=1) / math.sqrt(len(x)) if len(x) > 1 else np.full(x.shape[1], np.nan)

    return {"q": np.asarray(PERCENTILES, float), "L1": L1, "Lmax": Lmax,
            "Q1": Q1.mean(0), "Q1_se": se(Q1), "QL": QM.mean(0), "QL_se": se(QM),
            "dQ": dQ.mean(0), "dQ_se": se(dQ), "n": len(common) or 1}


def plateau(res: Results, model: str, k: int, a: float, b: float) -> tuple[float, float, int]:
    """Measured plateau of the linear model: seed-mean R at the deepest depth, its SE, and Lmax."""
    Lmax = depth_set(res.preset, "all")[-1]
    s = res.series(model, "difficult", k, a, b, (Lmax,))
    if not s:
        return math.nan, math.nan, Lmax
    return float(s.get("R")[0]), float(s.se["R"][0]), Lmax


def reference_slopes(th: Theory, a: float, b: float, depths: Sequence[int]) -> dict:
    """Fitted L0 = 0 slopes of the finite-size reference curves at this preset's d, P over the
    trained depths `depths` (claim 1): the best shared step of in-context gradient descent on the
    empirical S (constrained) and the best polynomial in it (free), each its in-sample minimum."""
    cur = th.curves(a, b)
    out = {}
    for name, key in (("constrained", "finite_P_constrained"), ("free", "finite_P")):
        ref = cur.get(key)
        if not ref:
            out[name] = math.nan
            continue
        by_L = dict(zip(ref["depths"], ref["in_sample"]))
        Ls = [L for L in depths if L in by_L and by_L[L] > 0]
        f = fit_power_law(Ls, [by_L[L] for L in Ls], floor=False) if len(Ls) >= 3 else None
        out[name] = f.alpha if f is not None and f.ok else math.nan
    return out


# --- time and width beside depth (the `scaling` experiment, docs/beyond.md) ---

def fit_xy(x, y, floor: bool = True) -> FitResult | None:
    """The saturating power law y = y_inf + c x^-alpha of SPEC §6.1 (fits.fit_power_law, on log y)
    against any positive x: width N, training step t, as `fit_series` does against depth. Only
    finite points with x, y > 0 enter; None when fewer than 3 (2 without the floor) remain or the
    fit cannot be made. A degenerate fit is returned as it is (fits.FitResult.status)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if ok.sum() < (3 if floor else 2):
        return None
    return _fit_points(x[ok].tobytes(), y[ok].tobytes(), bool(floor))


@functools.lru_cache(maxsize=4096)
def _fit_points(x: bytes, y: bytes, floor: bool) -> FitResult | None:
    """fit_power_law on the float64 points whose bytes are `x`, `y`, once per process: the fit is a
    deterministic function of them and FitResult is frozen, and the same curve is fitted many times
    (the convergence study's rows and parts, each figure and claim reading a series; a flat curve
    takes ~0.2 s: issue 50)."""
    try:
        return fit_power_law(np.frombuffer(x), np.frombuffer(y), floor=floor)
    except (ValueError, np.linalg.LinAlgError):
        return None


def width_series(res: Results, model: str, task: str, k: int, a: float, b: float, L: int,
                 widths: Sequence[int]) -> dict:
    """Seed-mean R and its SE at depth L for each width N in `widths`: the preset's own N (= d)
    from the plain results (the paper's runs), every other N from the strict view `res.view(N=N)`
    (registry: the width groups of `scaling`). Returns {N, R, R_se, run_ids, missing} with the
    arrays over the widths that have a finite run, in the order given."""
    from depthscale.config.run import geometry

    N0 = geometry(res.preset, model)["N"]
    Ns, R, se, ids, missing = [], [], [], [], []
    for N in widths:
        s = (res if int(N) == N0 else res.view(N=int(N))).series(model, task, k, a, b, (int(L),))
        if not s:
            missing.append(int(N))
            continue
        Ns.append(int(N))
        R.append(float(s.get("R")[0]))
        # one seed: the evaluation SE of R; several: the SE over seeds
        se.append(float(s.se["R"][0]) if s.n[0] > 1 else float(s.get("R_se")[0]))
        ids.append(s.run_ids[0])
    return {"N": np.array(Ns, dtype=int), "R": np.array(R), "R_se": np.array(se), "run_ids": ids,
            "missing": tuple(missing)}


TIME_WINDOWS = ("after_warmup", "early")  # the steps a time fit uses (`time_window`)


def time_window(warmup: int, max_steps: int, window: str = "after_warmup") -> tuple[float, float]:
    """(t_lo, t_hi]: the training steps a fit of R(t) uses. after_warmup: warmup < t <= max_steps;
    early: warmup < t <= warmup + (max_steps - warmup) / 2, where the cosine schedule's rate is
    still at least half its peak (after it the rate falls to 0 and the loss anneals: the late part
    of a curve measures the schedule as much as the time)."""
    if window == "after_warmup":
        return float(warmup), float(max_steps)
    if window == "early":
        return float(warmup), warmup + (max_steps - warmup) / 2.0
    raise ValueError(f"window must be one of {', '.join(TIME_WINDOWS)}, got {window!r}")


def time_curve(res: Results, model: str, task: str, k: int, a: float, b: float, L: int,
               metric: str = "R") -> dict | None:
    """The monitor curve `metric` vs training step of one cell (seed mean over the steps every seed
    logged): {t, y, warmup, max_steps, schedule, seeds, run_ids}; None without runs or curves."""
    rows = res.runs(model, task, k, a, b, L)
    got = []
    for r in rows:
        cur = res.curves(r["run_id"])
        if cur and cur.get("step") and cur.get(metric):
            got.append((r, {int(t): float(v) if v is not None else math.nan
                             for t, v in zip(cur["step"], cur[metric])}))
    if not got:
        return None
    steps = sorted(set.intersection(*(set(c) for _, c in got)))
    y = np.array([np.mean([c[t] for _, c in got]) for t in steps])
    r0 = got[0][0]
    return {"t": np.array(steps, dtype=float), "y": y, "warmup": int(r0["warmup"]),
            "max_steps": int(r0["max_steps"]), "schedule": r0.get("schedule", "cosine"),
            "seeds": [r["seed"] for r, _ in got], "run_ids": [r["run_id"] for r, _ in got]}


def time_fit(curve: dict | None, window: str = "after_warmup") -> FitResult | None:
    """R(t) = R_inf + c t^-beta over the steps of `window` (`time_window`) of a `time_curve`."""
    if curve is None:
        return None
    lo, hi = time_window(curve["warmup"], curve["max_steps"], window)
    keep = (curve["t"] > lo) & (curve["t"] <= hi)
    return fit_xy(curve["t"][keep], curve["y"][keep])


__all__ = ["fit_series", "loss_fit", "gap_fit", "mode_curves", "normalised_modes", "mode_crossings",
           "reducible_modes", "rel_change_last_two", "selection_quantiles", "plateau", "reference_slopes",
           "MODE_FLOOR", "fit_xy", "width_series", "TIME_WINDOWS", "time_window", "time_curve", "time_fit"]
