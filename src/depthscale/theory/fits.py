"""Power-law fits of loss against depth (SPEC §6.1; paper eq. 16).

Model: R_L = L0 + c L^(-alpha), c > 0, alpha > 0, L0 >= 0, fitted by bounded least squares on
log R (residuals log R - log model). Conventions fixed here:

- Parameters are (log c, alpha, L0); c > 0 is enforced by fitting log c. Bounds: 0 <= alpha <=
  ``ALPHA_MAX``, L0 >= 0.
- Several deterministic starting points (a log-log line fit, then a grid over alpha and L0);
  the lowest cost wins.
- Standard errors come from the Gauss-Newton covariance of the log-space fit,
  cov = s^2 (J^T W J)^-1 with s^2 = sum(w r^2) / (n - p). A parameter that ends on a bound is
  held fixed for the covariance (its SE is nan, and p counts only the free parameters).
  With n <= p there are no residual degrees of freedom and every SE is nan. SE(c) is from the
  delta method, c * SE(log c).
- R^2 is computed in log space (the space of the fit): 1 - sum w r^2 / sum w (log R - mean_w
  log R)^2; nan when all log R are equal.
- Optional ``weights`` multiply the squared log residuals (inverse variances of log R).
- Every fit is judged (``status``): "degenerate" with a ``reason`` when it has fewer points than
  parameters + 1 (no residual degree of freedom to test the law), alpha or a fitted L0 ends on a
  bound, the SE of alpha (or of a fitted L0) is missing or not finite, R^2 is undefined, or the
  optimiser did not converge; else "ok". A degenerate fit is data, not a law: figures draw its
  points only and claims built on it FAIL with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from depthscale.base.errors import InputError

ALPHA_MAX = 100.0  # upper bound on alpha, keeps the optimiser away from flat runaway directions

__all__ = ["FitResult", "fit_power_law", "fit_gap", "fit_dict", "degeneracy"]


@dataclass(frozen=True)
class FitResult:
    """Result of a fit of R = L0 + c L^-alpha in log space."""

    L0: float  # floor (0 when not fitted; the fixed value in fit_gap)
    c: float  # amplitude
    alpha: float  # exponent
    alpha_se: float  # Gauss-Newton SE of alpha (nan when n <= p)
    r2: float  # R^2 of log R (weighted when weights are given)
    L0_se: float = math.nan  # nan when L0 is fixed or on its bound
    c_se: float = math.nan  # delta method, c * SE(log c)
    rss: float = math.nan  # sum of weighted squared log residuals
    n: int = 0  # number of points used
    dof: int = 0  # n - number of free parameters
    floor: bool = True  # whether L0 was fitted
    success: bool = True  # least_squares reported convergence
    n_dropped: int = 0  # points dropped before fitting (fit_gap)
    note: str = ""  # human-readable remark (e.g. why points were dropped)
    status: str = "ok"  # "ok" or "degenerate" (see the module docstring)
    reason: str = ""  # why the fit is degenerate ("" when ok)

    @property
    def ok(self) -> bool:
        """Whether the fit is a law one may draw and judge (status "ok")."""
        return self.status == "ok"

    def predict(self, L: np.ndarray | float) -> np.ndarray:
        """Model value L0 + c L^-alpha."""
        return self.L0 + self.c * np.asarray(L, dtype=np.float64) ** (-self.alpha)


def _as_1d(name: str, x, positive: bool) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise InputError(f"{name} must be 1-D, got shape {arr.shape}")
    bad = ~np.isfinite(arr) | ((arr <= 0) if positive else False)
    if np.any(bad):
        what = "finite and > 0" if positive else "finite"
        raise InputError(f"{name} must be {what}, got {float(arr[bad][0])!r}")
    return arr


def _check_inputs(L, R, weights, R_name: str = "R") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    L = _as_1d("L", L, positive=True)
    R = _as_1d(R_name, R, positive=True)
    if L.shape != R.shape:
        raise InputError(f"L and {R_name} must have the same length, got {L.size} and {R.size}")
    if weights is None:
        w = np.ones_like(L)
    else:
        w = _as_1d("weights", weights, positive=True)
        if w.shape != L.shape:
            raise InputError(f"weights must have length {L.size}, got {w.size}")
    if L.size < 2:
        raise InputError(f"need at least 2 points to fit, got {L.size}")
    return L, R, w


def _model_log(theta: np.ndarray, logL: np.ndarray, floor: bool) -> tuple[np.ndarray, np.ndarray]:
    """log of L0 + c L^-alpha and the power term c L^-alpha."""
    # a trial step may overflow; least_squares then shrinks its trust region
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        power = np.exp(theta[0] - theta[1] * logL)
        L0 = theta[2] if floor else 0.0
        return np.log(L0 + power), power


def _starts(logL: np.ndarray, logR: np.ndarray, R: np.ndarray, w: np.ndarray, floor: bool,
            n_starts: int) -> list[np.ndarray]:
    """Deterministic starting points: a log-log line, then a grid over alpha (and L0)."""
    starts = []
    # weighted line fit of log R on log L gives (log c, alpha) with L0 = 0
    A = np.stack([np.ones_like(logL), -logL], axis=1) * np.sqrt(w)[:, None]
    coef, *_ = np.linalg.lstsq(A, logR * np.sqrt(w), rcond=None)
    alpha_line = float(np.clip(coef[1], 1e-3, ALPHA_MAX))
    logc_line = float(np.average(logR + alpha_line * logL, weights=w))
    starts.append(np.array([logc_line, alpha_line, 0.0]))
    # (alpha, L0 / min R) pairs, ordered so that any prefix is spread out
    if floor:
        grid = ((1.0, 0.5), (0.3, 0.9), (3.0, 0.0), (1.0, 0.9), (0.3, 0.0), (3.0, 0.5),
                (1.0, 0.0), (0.3, 0.5), (3.0, 0.9), (1.0, 0.99))
    else:
        grid = ((1.0, 0.0), (0.3, 0.0), (3.0, 0.0))
    for alpha0, frac in grid:
        L0_0 = frac * float(R.min())
        logc0 = float(np.average(np.log(R - L0_0) + alpha0 * logL, weights=w))
        starts.append(np.array([logc0, alpha0, L0_0]))
    starts = starts[: max(1, n_starts)]
    return [s if floor else s[:2] for s in starts]


def degeneracy(n: int, floor: bool, alpha: float, alpha_se: float, L0: float, L0_se: float, r2: float,
               alpha_at_bound: bool = False, L0_at_bound: bool = False, success: bool = True) -> str:
    """Why a fit of `n` points is degenerate ('' when it is not): the rules of the module docstring."""
    p = 3 if floor else 2
    why = []
    if n < p + 1:
        why.append(f"{n} points for {p} parameters (need at least {p + 1})")
    if alpha_at_bound or not (0.0 < alpha < ALPHA_MAX):
        why.append(f"alpha = {alpha:.4g} at its bound [0, {ALPHA_MAX:g}]")
    if floor and (L0_at_bound or not L0 > 0.0):
        why.append(f"L0 = {L0:.4g} at its bound 0")
    if not math.isfinite(alpha_se):
        why.append("no finite SE of alpha")
    elif floor and not L0_at_bound and L0 > 0.0 and not math.isfinite(L0_se):
        why.append("no finite SE of L0")
    if not math.isfinite(r2):
        why.append("R^2 undefined")
    if not success:
        why.append("the optimiser did not converge")
    return "; ".join(why)


def _standard_errors(J: np.ndarray, free: np.ndarray, rss: float, n: int) -> tuple[np.ndarray, int]:
    """(SE of each parameter, residual dof) from the Gauss-Newton covariance rss/dof (J^T J)^-1 over
    the parameters that are not on a bound (`free`; J: the weighted residuals' Jacobian, n x p).
    A parameter on its bound, or every one when dof <= 0 or J^T J is singular, has SE NaN."""
    p_free = int(free.sum())
    dof = n - p_free
    se = np.full(free.size, np.nan)
    if dof > 0 and p_free > 0:
        Jf = J[:, free]
        JtJ = Jf.T @ Jf
        if np.linalg.matrix_rank(JtJ) == p_free:
            cov = (rss / dof) * np.linalg.inv(JtJ)
            se[free] = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    return se, dof


def fit_power_law(L, R, floor: bool = True, n_starts: int = 6, weights=None) -> FitResult:
    """Fit R = L0 + c L^-alpha (eq. 16) by bounded least squares on log R.

    ``floor=False`` fixes L0 = 0 (a straight line in log-log, same machinery).
    """
    L, R, w = _check_inputs(L, R, weights)
    if not isinstance(n_starts, (int, np.integer)) or n_starts < 1:
        raise InputError(f"n_starts must be an integer >= 1, got {n_starts!r}")
    logL, logR, sw = np.log(L), np.log(R), np.sqrt(w)
    p = 3 if floor else 2

    def resid(theta):
        logm, _ = _model_log(theta, logL, floor)
        return sw * (logR - logm)

    def jac(theta):
        # d(log m)/d(log c) = power/m, d/d alpha = -log L power/m, d/d L0 = 1/m; residual = -that
        logm, power = _model_log(theta, logL, floor)
        with np.errstate(over="ignore", invalid="ignore"):
            m = np.exp(logm)
            cols = [power / m, -logL * power / m]
            if floor:
                cols.append(1.0 / m)
            return -sw[:, None] * np.stack(cols, axis=1)

    lb = np.array([-np.inf, 0.0, 0.0][:p])
    ub = np.array([np.inf, ALPHA_MAX, np.inf][:p])
    best = None
    for x0 in _starts(logL, logR, R, w, floor, n_starts):
        x0 = np.clip(x0, lb, ub)
        res = least_squares(resid, x0, jac=jac, bounds=(lb, ub), method="trf", x_scale="jac",
                            ftol=1e-14, xtol=1e-14, gtol=1e-14, max_nfev=5000)
        if best is None or res.cost < best.cost:
            best = res
    theta = best.x.copy()
    if floor and best.active_mask[2] != 0:
        theta[2] = 0.0  # on its bound: report the bound itself, not 1e-20
    r = resid(theta)
    rss = float(r @ r)
    n = L.size
    se, dof = _standard_errors(jac(theta), best.active_mask == 0, rss, n)

    mean_logR = np.average(logR, weights=w)
    tss = float(np.sum(w * (logR - mean_logR) ** 2))
    r2 = 1.0 - rss / tss if tss > 0 else math.nan
    c = float(np.exp(theta[0]))
    why = degeneracy(int(n), floor, float(theta[1]), float(se[1]), float(theta[2]) if floor else 0.0,
                     float(se[2]) if floor else math.nan, float(r2),
                     # on a bound up to round-off (the optimiser may stop a hair inside it)
                     alpha_at_bound=bool(best.active_mask[1] != 0 or theta[1] <= 1e-8
                                         or theta[1] >= ALPHA_MAX * (1 - 1e-8)),
                     L0_at_bound=bool(floor and (best.active_mask[2] != 0 or theta[2] <= 1e-8 * float(R.min()))),
                     success=bool(best.success))
    return FitResult(
        L0=float(theta[2]) if floor else 0.0,
        c=c,
        alpha=float(theta[1]),
        alpha_se=float(se[1]),
        r2=float(r2),
        L0_se=float(se[2]) if floor else math.nan,
        c_se=float(c * se[0]),
        rss=rss,
        n=int(n),
        dof=int(dof),
        floor=floor,
        success=bool(best.success),
        status="degenerate" if why else "ok",
        reason=why,
    )


def fit_gap(L, C, L0: float, n_starts: int = 6, weights=None) -> FitResult:
    """Fit L0 - C_L = c L^-alpha with L0 fixed (Table 5); points with L0 - C_L <= 0 are dropped."""
    L = _as_1d("L", L, positive=True)
    C = _as_1d("C", C, positive=False)
    if L.shape != C.shape:
        raise InputError(f"L and C must have the same length, got {L.size} and {C.size}")
    if not (isinstance(L0, (int, float, np.floating, np.integer)) and math.isfinite(L0)):
        raise InputError(f"L0 must be a finite number, got {L0!r}")
    gap = float(L0) - C
    keep = gap > 0
    n_dropped = int((~keep).sum())
    if keep.sum() < 2:
        raise InputError(f"need at least 2 points with L0 - C_L > 0, got {int(keep.sum())}")
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    if w is not None and w.shape != L.shape:
        raise InputError(f"weights must have length {L.size}, got {w.size}")
    res = fit_power_law(L[keep], gap[keep], floor=False, n_starts=n_starts,
                        weights=None if w is None else w[keep])
    note = ""
    if n_dropped:
        note = f"dropped {n_dropped} point(s) with L0 - C_L <= 0 at L = {L[~keep].tolist()}"
    return replace(res, L0=float(L0), n_dropped=n_dropped, note=note)


def fit_dict(depths, losses, floor: bool = True) -> dict:
    """JSON-ready fit summary: L0, c, alpha, alpha_se, r2 (plain floats), n, status ("ok" or
    "degenerate") and reason ("" when ok)."""
    f = fit_power_law(depths, losses, floor=floor)
    return dict(L0=f.L0, c=f.c, alpha=f.alpha, alpha_se=f.alpha_se, r2=f.r2, n=f.n, status=f.status,
                reason=f.reason)
