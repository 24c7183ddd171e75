"""Power of the shape claims (SPEC §9): the probability that a claim's criterion passes if the
paper's law held, by simulation from the runs' own noise.

The law: R_L = L0 + c/L, with L0 and c from the same runs' fit at α = 1 (`law_fit`); for 5a's
top-16 items, whose criterion is the paper's own α ± 0.2, the law is L0 + c L^-α_paper. Each
simulation draws every depth's seed mean as the law's value plus its measured SE times an
independent standard normal (`simulate`), and applies the claim's criterion to all simulations
at once (numpy arrays with one row per simulation). Power is the fraction that pass. With n seeds
per cell, n' seeds scale every SE by sqrt(n / n') (`seeds_for`: the fewest seeds whose power
reaches 0.8, searched with the same random draws).

Criteria:
- 5a (`criterion_5a`): the fit of SPEC §6.1 on log R, vectorised here (`batch_fit`, a projected
  Levenberg-Marquardt started at the law, the same model, bounds and degeneracy rules as
  fits.fit_power_law), well posed, α in the window and R² >= 0.99.
- 6 (`criterion_6`): under 6's own hypothesis (SPEC §9): C_L and A_L - C_L equal at the last two
  depths, each at its measured mean there; relative change of each over them < 10%.
- 11 (`criterion_11`): L0 - C_L = c'/L (the fit of L0 - C_L as measured with α = 1 imposed), L0
  the loss fit's; a depth with L0 - C_L below -2 SE fails, those <= 0 within 2 SE are left out; the
  fit of log(L0 - C_L) on log L (fits.fit_gap, L0 fixed: a straight line) with α in [0.8, 1.2] and
  R² >= 0.99, at least 4 depths left.

Choices where SPEC is silent: N_SIMS = 400 simulations (the power's SE is at most 0.025), one
fixed seed (SEED) so a report is reproducible; a depth with no finite SE makes the power
unknown (nan): a FAIL then stays a FAIL and its detail says why.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy.optimize import least_squares

from depthscale.base.errors import InputError
from depthscale.theory.fits import ALPHA_MAX

TARGET = 0.8  # SPEC §9: a FAIL with power below this is INCONCLUSIVE
N_SIMS = 400
SEED = 20261205
MAX_SEEDS = 1024  # the search for the seeds that reach TARGET stops here


def simulate(criterion: Callable[[np.ndarray], np.ndarray], mean, se, n_sims: int = N_SIMS,
             seed: int = SEED) -> float:
    """Fraction of `n_sims` draws Y = mean + se * Z (Z standard normal, one row per draw) for which
    `criterion(Y)` (a boolean array over rows) is True; nan when an SE is not finite."""
    mean, se = np.asarray(mean, dtype=np.float64), np.asarray(se, dtype=np.float64)
    if mean.shape != se.shape or mean.ndim != 1:
        raise InputError(f"mean and se must be 1-D of one length, got shapes {mean.shape} and {se.shape}")
    if not np.all(np.isfinite(se)) or not np.all(np.isfinite(mean)):
        return math.nan
    if not isinstance(n_sims, (int, np.integer)) or n_sims < 1:
        raise InputError(f"n_sims must be an integer >= 1, got {n_sims!r}")
    Z = np.random.default_rng(seed).standard_normal((int(n_sims), mean.size))
    ok = np.asarray(criterion(mean + se * Z), dtype=bool)
    return float(ok.mean())


def seeds_for(criterion, mean, se, n_seeds: int, target: float = TARGET, n_sims: int = N_SIMS,
              seed: int = SEED) -> int | None:
    """The fewest seeds n' whose power (SEs scaled by sqrt(n_seeds / n')) reaches `target`;
    None if not within MAX_SEEDS (or the power is unknown)."""
    se = np.asarray(se, dtype=np.float64)

    def pw(n):
        return simulate(criterion, mean, se * math.sqrt(n_seeds / n), n_sims, seed)

    hi = max(int(n_seeds), 1)
    top = pw(MAX_SEEDS)
    if not math.isfinite(top) or top < target:  # out of reach (e.g. a criterion the law itself fails)
        return None
    while True:
        p = pw(hi)
        if not math.isfinite(p):
            return None
        if p >= target:
            break
        if hi >= MAX_SEEDS:
            return None
        hi = min(2 * hi, MAX_SEEDS)
    lo = max(hi // 2, 1)  # pw(lo) < target unless hi is n_seeds itself
    if hi == max(int(n_seeds), 1):
        return hi
    while hi - lo > 1:  # bisection on common random numbers
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pw(mid) >= target else (mid, hi)
    return hi


def power_report(criterion, mean, se, n_seeds: int, n_sims: int = N_SIMS, seed: int = SEED) -> dict:
    """{"power", "sims", "seed", "n_seeds", "target", "seeds_for_target"} (seeds_for_target only
    computed when the power is below the target, else n_seeds)."""
    p = simulate(criterion, mean, se, n_sims, seed)
    need = (None if not math.isfinite(p) else int(n_seeds) if p >= TARGET
            else seeds_for(criterion, mean, se, n_seeds, TARGET, n_sims, seed))
    return {"power": p, "sims": int(n_sims), "seed": int(seed), "n_seeds": int(n_seeds), "target": TARGET,
            "seeds_for_target": need}


# ---------------------------------------------------------------- the fit of SPEC §6.1, vectorised

def _model(theta, logL):
    """log(L0 + exp(log c - α log L)) and the Jacobian of the log residual (S x N x 3)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        power = np.exp(theta[:, :1] - theta[:, 1:2] * logL)
        m = theta[:, 2:3] + power
        J = -np.stack([power / m, -logL * power / m, 1.0 / m], axis=2)
        return np.log(m), J


def _project(theta):
    theta[:, 1] = np.clip(theta[:, 1], 0.0, ALPHA_MAX)
    theta[:, 2] = np.clip(theta[:, 2], 0.0, None)
    return theta


def _lm(theta, logL, logR, iters: int):
    """Projected Levenberg-Marquardt on the log residuals of every row from `theta` (S x 3:
    log c, α, L0), each row until it converges (rows that have are left out of later steps).
    Returns (theta, Jacobian, cost, converged)."""
    lam = np.full(theta.shape[0], 1e-3)
    logm, J = _model(theta, logL)
    r = logR - logm
    with np.errstate(invalid="ignore"):
        cost = np.where(np.isfinite(r).all(1), np.sum(r * r, axis=1), np.inf)
    act = np.flatnonzero(np.isfinite(cost))
    for _ in range(iters):
        if act.size == 0:
            break
        Ja, ra = J[act], r[act]
        A = np.einsum("snp,snq->spq", Ja, Ja)
        g = np.einsum("snp,sn->sp", Ja, ra)
        D = np.einsum("spp->sp", A)
        A_lm = A + (lam[act, None] * (D + 1e-12))[:, :, None] * np.eye(3)[None]
        try:
            step = -np.linalg.solve(A_lm, g[:, :, None])[:, :, 0]
        except np.linalg.LinAlgError:  # a row slid to α = 0 (a flat or placeholder row) with λ ~ 0: log c and
            # L0 columns proportional, A_lm singular. The pseudo-inverse takes the least-norm step for every row
            # (the same step where A_lm is regular), so such a row ends not ok instead of raising.
            step = -(np.linalg.pinv(A_lm) @ g[:, :, None])[:, :, 0]
        trial = _project(theta[act] + step)
        logm_t, J_t = _model(trial, logL)
        r_t = logR[act] - logm_t
        with np.errstate(invalid="ignore"):
            cost_t = np.sum(r_t * r_t, axis=1)
        better = np.isfinite(cost_t) & (cost_t < cost[act])
        # converged: no step lowers the cost, the step is round-off, or the gain is round-off
        done = ((~better & (lam[act] > 1e6)) | (np.abs(step).max(1) < 1e-12)
                | (better & (cost[act] - cost_t < 1e-15 * cost[act])))
        idx = act[better]
        theta[idx], r[idx], J[idx], cost[idx] = trial[better], r_t[better], J_t[better], cost_t[better]
        lam[act] = np.where(better, lam[act] / 3, lam[act] * 4)
        act = act[~done]
    converged = np.ones(theta.shape[0], dtype=bool)
    converged[act] = False
    return theta, J, cost, converged


def batch_fit(L, R_SxN, L0, c, alpha: float = 1.0, iters: int = 80) -> dict:
    """Fit R = L0 + c L^-α on log R to every row of R_SxN at once (SPEC §6.1; fits.fit_power_law's
    model and bounds), by projected Levenberg-Marquardt from (L0, c, α) and from two starts of
    each row's own (L0 = 0 and L0 = min R / 2 at α = 1); the lowest cost wins. Returns arrays over
    rows: L0, c, alpha, alpha_se, r2 and ok (well posed: α and L0 off their bounds, finite SE of α
    and L0, R² defined, at least 4 points, converged within `iters` steps). Rows with a
    non-positive R are not ok."""
    L = np.asarray(L, dtype=np.float64)
    R = np.asarray(R_SxN, dtype=np.float64)
    S, N = R.shape
    good_rows = np.all(R > 0, axis=1) & np.all(np.isfinite(R), axis=1)
    logL = np.log(L)[None, :]
    logR = np.log(np.where(good_rows[:, None], R, 1.0))
    starts = [np.tile([math.log(max(c, 1e-12)), alpha, max(L0, 0.0)], (S, 1))]
    for frac in (0.0, 0.5):
        L0_0 = frac * np.exp(logR.min(1))
        logc0 = np.mean(np.log(np.exp(logR) - L0_0[:, None]) + logL, axis=1)
        starts.append(np.stack([logc0, np.ones(S), L0_0], axis=1))
    best = None
    for t0 in starts:
        got = _lm(t0, logL, logR, iters)
        if best is None:
            best = got
            continue
        win = got[2] < best[2]
        for b_, g_ in zip(best, got):
            b_[win] = g_[win]
    # a row still moving after `iters` steps (in practice: sliding along the flat valley towards
    # α = 0 or L0 = 0) did not converge, a degeneracy of fits.fit_power_law too
    return _judge_fit(best[0], best[1], best[2], logR, N, good_rows & best[3])


def _judge_fit(theta, J, rss, logR, N, good_rows) -> dict:
    """SEs (Gauss-Newton, free parameters only), R² in log space and the degeneracy rules."""
    L0, alpha = theta[:, 2], theta[:, 1]
    on_bound = (L0 <= 1e-8 * np.exp(logR.min(1))) | (alpha <= 1e-8) | (alpha >= ALPHA_MAX * (1 - 1e-8))
    dof = N - 3
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        A = np.einsum("snp,snq->spq", np.nan_to_num(J), np.nan_to_num(J))
        sv = np.linalg.svd(A, compute_uv=False)
        full = sv[:, -1] > sv[:, 0] * 3 * np.finfo(float).eps  # numpy's matrix_rank rule, as fit_power_law
        cov = np.linalg.pinv(A) * (rss / max(dof, 1))[:, None, None]
        se = np.where(full[:, None], np.sqrt(np.clip(np.einsum("spp->sp", cov), 0.0, None)), np.nan)
        tss = np.sum((logR - logR.mean(1, keepdims=True)) ** 2, axis=1)
        r2 = np.where(tss > 0, 1.0 - rss / tss, np.nan)
    ok = good_rows & (dof > 0) & ~on_bound & np.isfinite(se[:, 1]) & np.isfinite(se[:, 2]) & np.isfinite(r2)
    return {"L0": L0, "c": np.exp(theta[:, 0]), "alpha": alpha, "alpha_se": se[:, 1], "r2": r2, "ok": ok}


def law_fit(L, R, alpha: float = 1.0) -> tuple[float, float]:
    """(L0, c) of R_L = L0 + c L^-alpha fitted on log R (alpha fixed, 1 by default; c > 0,
    L0 >= 0): the paper's law through the runs' seed means, the centre of the simulations."""
    L, R = np.asarray(L, dtype=np.float64), np.asarray(R, dtype=np.float64)
    if L.size < 2 or not np.all(np.isfinite(R) & (R > 0)):
        raise InputError(f"need at least 2 positive losses to fit the law, got {R.tolist()}")
    x, logR = L ** -float(alpha), np.log(R)

    def resid(t):  # t = (log c, L0)
        return np.log(t[1] + np.exp(t[0]) * x) - logR

    best = None
    for frac in (0.0, 0.5, 0.9, 0.99):
        L0 = frac * float(R.min())
        c0 = max(float(np.mean((R - L0) / x)), 1e-12)
        res = least_squares(resid, [math.log(c0), L0], bounds=([-np.inf, 0.0], [np.inf, np.inf]),
                            xtol=1e-14, ftol=1e-14, gtol=1e-14)
        if best is None or res.cost < best.cost:
            best = res
    return float(best.x[1]), float(math.exp(best.x[0]))


# ---------------------------------------------------------------- the claims' criteria

def criterion_5a(L, L0, c, lo: float = 0.8, hi: float = 1.2, r2_min: float = 0.99, alpha: float = 1.0):
    """5a's item criterion over simulated seed means (rows): a well-posed fit, α in [lo, hi],
    R² >= r2_min (a top-16 item: the window α_paper ± 0.2; `alpha` is the law's, the fit's start)."""
    def crit(R_SxN):
        f = batch_fit(L, R_SxN, L0, c, alpha)
        return f["ok"] & (f["alpha"] >= lo) & (f["alpha"] <= hi) & (f["r2"] >= r2_min)
    return crit


def criterion_6(limit: float = 0.1):
    """6's item criterion over rows [C_{L'}, C_L, gap_{L'}, gap_L] (the last two depths)."""
    def crit(Y):
        dC = np.abs(Y[:, 1] - Y[:, 0]) / np.abs(Y[:, 0])
        dG = np.abs(Y[:, 3] - Y[:, 2]) / np.abs(Y[:, 2])
        return (dC < limit) & (dG < limit)
    return crit


def criterion_11(L, L0: float, lo: float = 0.8, hi: float = 1.2, r2_min: float = 0.99, se=None,
                 min_points: int = 4):
    """11's item criterion over simulated C_L (rows, L >= 2), as SPEC §9 states it: a depth with
    L0 - C_L below -2 `se` (its SE, when given) fails the row; the points with L0 - C_L <= 0 within
    2 SE are left out; with at least `min_points` left, the straight-line fit of log(L0 - C_L) on
    log L has α = -slope in [lo, hi] and R² >= r2_min."""
    logL = np.log(np.asarray(L, dtype=np.float64))[None, :]
    two_se = None if se is None else 2 * np.asarray(se, dtype=np.float64)[None, :]

    def crit(C_SxN):
        gap = L0 - C_SxN
        overshoot = np.zeros(gap.shape[0], dtype=bool) if two_se is None else np.any(gap < -two_se, axis=1)
        w = (gap > 0).astype(np.float64)
        y = np.log(np.where(gap > 0, gap, 1.0))
        n = w.sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mx, my = (w * logL).sum(1) / n, (w * y).sum(1) / n
            dx, dy = w * (logL - mx[:, None]), w * (y - my[:, None])
            sxx, sxy, syy = (dx * dx).sum(1), (dx * dy).sum(1), (dy * dy).sum(1)
            alpha = -sxy / sxx
            r2 = np.where(syy > 0, sxy * sxy / (sxx * syy), np.nan)
        return ~overshoot & (n >= min_points) & (alpha > 0) & (alpha >= lo) & (alpha <= hi) & (r2 >= r2_min)
    return crit


__all__ = ["simulate", "seeds_for", "power_report", "batch_fit", "law_fit", "criterion_5a", "criterion_6",
           "criterion_11", "TARGET", "N_SIMS", "SEED", "MAX_SEEDS"]
