"""The claims of SPEC §9, checked on one preset's stored results: PASS/FAIL with the numbers.

Each check returns a dict {id, claim, preset, measured, expected, pass, detail, uses}. `expected`
is SPEC §9's criterion; `detail` restates the criterion as applied, with its thresholds, and then
every item's numbers and verdict. Every threshold is SPEC §9's; where SPEC leaves an operational
choice it is written here, once.

General rules:
- Missing data: a claim any of whose cells has no finite run is FAIL with measured None and detail
  "missing runs: ..."; it is never passed on partial data. Items with k not in the preset (k = 16
  at smoke) are left out of a claim and the detail says so; a claim with no items left is FAIL
  "missing runs".
- Seeds: every number is a seed mean (results.Results.series). An SE is the SE over seeds where a
  cell has two or more seeds, else the run's own evaluation SE (R_se) or the paired/bootstrap SE
  named by the claim. Fits (SPEC §6.1) are made to the seed means.
- Degenerate fits: a claim built on a fit judges only a well-posed one; a degenerate fit
  (fits.FitResult.status: too few points, a parameter on its bound, no finite SE, R² undefined)
  makes its item FAIL and the detail says "degenerate fit" with the reason.
- Paired tests (claims 3, 10) and the floor on the run's own evaluation contexts (5c) need the
  trained models (depthscale.paired on `res.store`); without a store, or without that module, or
  where it cannot read a run's model, the claim FAILs "needs the store's models for the paired
  test: ...", never passes.

Operational choices, claim by claim:
- 1: L0 = 0 fit over the preset's depths; PASS per fig3 spectrum iff the fit is well posed, R² >= 0.98
  and alpha in [min(ref) - 2 SE(alpha), max(ref) + 2 SE(alpha)], ref the L0 = 0 slopes fitted to
  the finite-size constrained (best shared GD step) and free (best polynomial) reference curves at the
  runs' d, P and depths (analysis.reference_slopes).
- 2: judged on the modes Fig. 3c shows (registry.FIG3C_MODES at FIG3C_SPECTRUM, modes <= d): the
  first depth where R_k/(omega_k lambda_k) < 2% (a mode never below counts as beyond the deepest
  depth, "never"); non-decreasing in k and not all equal. The other fig3 spectra are shown beside,
  not judged.
- 3: R_1 / Var(y*) (both seed means at L = 1) < 1%; for every L > 1 the paired difference
  R_1 - R_L on shared evaluation contexts (paired.paired_difference, one seed: its own SE; several:
  mean and SE over the per-seed differences) is not > 2 SE; top-1 mass > 0.95 at every depth.
- 4: the plateau is the seed-mean R at Lmax, its SE as above. 4a on the fig5 spectra. 4b and 4c on
  every Table 3 row: 4b |plateau - R_irr| <= 5% R_irr and the linear runs' P/d >= 8; 4c
  plateau <= 1.05 finite-P floor and plateau >= finite-P floor - 2 sqrt(SE_plateau^2 + SE_floor^2)
  (the floor is a Monte Carlo on other contexts: independent SEs add).
- 5a: top-2 items (every spectrum of fig6 and fig14's k = 2) alpha in [0.8, 1.2], R² >= 0.99;
  top-16 items (Table 4's four) |alpha - alpha_paper| <= 0.2, R² >= 0.99; every fit well posed.
- 5b: the linear model trained at the nonlinear runs' d, P, N (`res.view(d=, P=, N=)`, the
  registry's SOFTMAX_GEOMETRY_FIELDS at cpu and paper; at smoke the two geometries coincide and the
  view is fig5's runs). Its L0 is the fitted L0 where that fit is well posed, else the plateau
  (seed-mean R at Lmax): the linear model plateaus by L = 2 (claim 4a), so a 3-parameter fit is
  usually ill-posed; the detail names which was used. The nonlinear L0 is the fitted one (a
  degenerate fit FAILs). The paper's Table 1 ratio is shown beside: it compares d = 16 with d = 128.
- 5c: applies at the paper's nonlinear geometry only (d = 16, P = 64; else FAIL saying so). Every
  spectrum with a paper L0: Table 1, Table 4 top-2 and top-16. The softmax-ensemble floor is
  paired.floor_on_eval on the config of the spectrum's deepest run of its lowest seed (all runs of
  a spectrum share their evaluation contexts), computed once per (a, b, k). PASS per item iff the
  fit is well posed, |L0/L0_paper - 1| <= 5% and |L0/floor - 1| <= 5%; R_Lmax is shown beside only.
- 6: "last two depths" are the two deepest depths with finite values; relative change
  |X(Lmax) - X(Lmax/2)| / |X(Lmax/2)| for X = C_L and A_L - C_L, on fig6's b = 0 spectra.
- 7: spread = mean over L >= 2 of (max - min over modes) of the normalised reducible curves
  (R_k(L) - R_k,inf)/(R_k(1) - R_k,inf). Nonlinear: fig7's spectrum and modes, R_k,inf from
  well-posed per-mode fits (analysis.reducible_modes). Linear: the easy task at Fig. 3c's spectrum
  and modes, R_k,inf = 0 (the easy task's L0 = 0, SPEC §6.1). PASS iff nonlinear spread < linear
  spread, each from at least two modes.
- 8a: loss fit of each variant (single_stream, layer_values, context_updates; k = 2, (0,0)) over its
  own depths: well posed, alpha in [0.6, 1.3], R² >= 0.95.
- 8b: m at L = 1 is left out (at L = 1 the context states are updated after the only read of
  them: m gets no gradient and keeps its initial 0): m < 0 at every L >= 2 and max - min < 0.5.
- 9: rho at every L >= 2 (at L = 1 the context block never reaches the output).
- 10: Delta Q(q) from paired.bootstrap_dQ (L = 1 against Lmax, the bootstrap over evaluation
  contexts). One seed: Delta Q and its bootstrap SE. Several: the mean over seeds, and the larger
  of the SE over seeds and the bootstrap SE of that mean (sqrt(sum se_i^2)/n). PASS iff
  Delta Q(q) > 2 SE for every q >= 50.
- 11: Table 5's fit of L0 - C_L (L >= 2, L0 from the loss fit): both fits well posed, alpha in
  [0.8, 1.2], R² >= 0.99.
- Beyond the paper: every claim states its seeds per cell and, with fewer than 3, the reason
  (the preset's budget: registry.PRESET_SEEDS). Differences are judged against 2 combined SEs
  (seed SEs where there are seeds, else evaluation SEs; runs of one spectrum share their
  evaluation contexts, so the combined SE is conservative for a difference). B2a also needs its
  untrained control (the same clustered models at step 0: `res.view(clusters=K, max_steps=0)` at
  the deepest clustered depth). The identities the beyond experiments rest on (one tied nonlinear
  layer is one head; R = C + (A - C)/L in the Transformer) are true by construction and are
  tests (tests/test_looped.py, tests/test_transformer_experiment.py, tests/test_decompose.py), not
  claims.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Iterable

import numpy as np

from depthscale.analysis import (gap_fit, loss_fit, mode_crossings, reducible_modes, reference_slopes,
                                 rel_change_last_two)
from depthscale.atomic import plain
from depthscale.config import geometry
from depthscale.errors import InputError
from depthscale.formatting import label, number
from depthscale.registry import (FIG3_SPECTRA, FIG3C_MODES, FIG3C_SPECTRUM, FIG4_SPECTRA, FIG7_MODES,
                                 FIG7_SPECTRUM, FIG14_K16, FIG56_SPECTRA, ORIGIN, PAPER, PRESET_KS,
                                 SOFTMAX_GEOMETRY_FIELDS, TABLE3_K2, TABLE3_K16, TOP2_SPECTRA, depth_set,
                                 paper_L0_top2, preset_shape, resolve_ids)
from depthscale.results import Results, Series, Theory
from depthscale.theory import two_zeta, zeta


class MissingRuns(Exception):
    """A claim's data are not in the store."""


class CannotJudge(Exception):
    """A claim cannot be judged on these results (no store for a paired test, another geometry):
    FAIL with the reason."""


NEEDS_STORE = "needs the store's models for the paired test"


def _g(x) -> str:
    """A number in a claim's detail: 4 significant digits, 'nan' for NaN."""
    return number(x, table=False)


def fit_problem(f) -> str:
    """Why fit `f` cannot carry a claim ('' when it can): no fit, or a degenerate one and its reason."""
    if f is None:
        return "no fit"
    return "" if f.ok else f"degenerate fit: {f.reason}"


def _yes(good: bool) -> str:
    return "ok" if good else "NO"


def _verdict(good: bool, f) -> str:
    """'ok', 'NO', or 'NO (degenerate fit: reason)' at the end of an item's detail."""
    why = fit_problem(f)
    return "ok" if good else f"NO ({why})" if why else "NO"


def _fitted(f, name: str = "α") -> str:
    """'α=0.95±0.03, R²=0.998' of a fit (nan where there is none)."""
    return (f"{name}={_g(f.alpha if f else None)}±{_g(f.alpha_se if f else None)}, "
            f"R²={_g(f.r2 if f else None)}")


def _cells_text(miss: list[str]) -> str:
    more = f" (+{len(miss) - 4} more)" if len(miss) > 4 else ""
    return f"missing runs: {len(miss)} cell(s): " + "; ".join(miss[:4]) + more


def require(res: Results, model: str, task: str, k: int, spectra, depths=None, what: str = "") -> None:
    """Raise MissingRuns naming the cells (model, task, k, spectrum, L) without a finite run."""
    miss = []
    for a, b in spectra:
        s = res.series(model, task, k, a, b, depths)
        miss += [f"{model}{what}/{task}{'' if task == 'easy' else f' k={k}'} {label(a, b)} L={L}"
                 for L in s.missing]
    if miss:
        raise MissingRuns(_cells_text(miss))


def _ks(res: Results, pairs):
    """The (k, spectra) items of a claim that exist at this preset."""
    kept = [(k, sp) for k, sp in pairs if k in PRESET_KS[res.preset]]
    if not kept:
        raise MissingRuns(f"missing runs (k={','.join(str(k) for k, _ in pairs)} is not part of "
                          f"the {res.preset} preset)")
    return kept


def _item(a: float, b: float, k: int) -> str:
    """A top-2 spectrum as '(a,b)', any other k as 'k=16 (a,b)' (claims mixing k = 2 and 16)."""
    return label(a, b) if k == 2 else label(a, b, k)


def _left_out(res: Results, ks) -> str:
    """'; k=16 is not part of the smoke preset: its items are left out' (or '')."""
    gone = [k for k in ks if k not in PRESET_KS[res.preset]]
    return "".join(f"; k={k} is not part of the {res.preset} preset: its items are left out" for k in gone)


def _se(s: Series, j: int, metric: str = "R") -> tuple[float, str]:
    """The SE of a seed-mean point: over seeds with >= 2 seeds, else the run's evaluation SE."""
    if s.n[j] > 1:
        return float(s.se[metric][j]), f"SE over {int(s.n[j])} seeds"
    ev = s.get(metric + "_se")
    return (float(ev[j]) if ev is not None and len(ev) > j else math.nan), "evaluation SE (one seed)"


def _seeds_text(res: Results, ns: Iterable[int]) -> str:
    """'seeds per cell: 1 (one seed: the cpu preset's budget)', the reason with fewer than 3."""
    ns = [int(n) for n in ns]
    if not ns:
        return "seeds per cell: none"
    lo, hi = min(ns), max(ns)
    text = f"seeds per cell: {lo}" if lo == hi else f"seeds per cell: {lo}-{hi}"
    if lo == 1:
        text += f" (one seed: the {res.preset} preset's budget)"
    elif lo < 3:
        text += f" (fewer than 3: the {res.preset} preset's budget)"
    return text


def _paired():
    """depthscale.paired, or None where it is not installed (a claim that needs it then FAILs)."""
    try:
        from depthscale import paired
    except ImportError:
        return None
    return paired


def _paired_or_fail(res: Results):
    """The paired module and the store, or CannotJudge naming what is missing."""
    if res.store is None:
        raise CannotJudge(f"{NEEDS_STORE} (these results have no store)")
    pm = _paired()
    if pm is None:
        raise CannotJudge(f"{NEEDS_STORE} (depthscale.paired is not available)")
    return pm


def _call_paired(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - a run without its model cannot be paired: FAIL with why
        raise CannotJudge(f"{NEEDS_STORE} ({fn.__name__}: {type(e).__name__}: {e})") from None


def _finite_runs(res: Results, model: str, task: str, k: int, a: float, b: float, L: int) -> dict:
    """{seed: row} of a cell's finite runs."""
    out = {}
    for r in res.runs(model, task, k, a, b, L):
        try:
            if math.isfinite(float(r.get("R"))):
                out[r["seed"]] = r
        except (TypeError, ValueError):
            continue
    return out


def _judged(criterion: str, parts: list[str], extra: str = "") -> str:
    """The detail: the criterion as applied, then every item."""
    return f"criterion: {criterion}{extra} | " + "; ".join(parts)


# ---------------------------------------------------------------- the paper's claims

def c1(res, th):
    """ζ and 2ζ are asymptotes (1 << L << sqrt(λ1/λd)); at the trained d, P and depths the measured
    slope is judged against the slopes of the finite-size references fitted over the same depths."""
    require(res, "linear", "easy", 1, FIG3_SPECTRA)
    paper = {(float(r["a"]), float(r["b"])): r["alpha"] for r in PAPER["table2_linear_easy"]}
    meas, parts, ok = {}, [], True
    for a, b in FIG3_SPECTRA:
        s, f = loss_fit(res, "linear", "easy", 1, a, b)
        ref = reference_slopes(th, a, b, [int(L) for L in s.depths])
        lo, hi = min(ref["constrained"], ref["free"]), max(ref["constrained"], ref["free"])
        se = f.alpha_se if f is not None else math.nan
        r2_ok = f is not None and f.r2 >= 0.98
        in_range = (f is not None and math.isfinite(se) and math.isfinite(lo) and math.isfinite(hi)
                    and lo - 2 * se <= f.alpha <= hi + 2 * se)
        good = bool(not fit_problem(f) and r2_ok and in_range)
        ok &= good
        meas[label(a, b)] = {"alpha": f.alpha if f else None, "alpha_se": se, "r2": f.r2 if f else None,
                             "alpha_constrained_finite": ref["constrained"], "alpha_free_finite": ref["free"],
                             "zeta": zeta(a, b), "two_zeta": two_zeta(a, b), "paper_alpha": paper[(a, b)],
                             "fit_status": f.status if f else None}
        parts.append(f"{label(a, b)} {_fitted(f)} (R² {_yes(r2_ok)}); α in [{_g(lo)} - 2 SE, {_g(hi)} + 2 SE] "
                     f"= [{_g(lo - 2 * se)}, {_g(hi + 2 * se)}] {_yes(in_range)} (asymptotic ζ={_g(zeta(a, b))}, "
                     f"2ζ={_g(two_zeta(a, b))}, paper α={_g(paper[(a, b)])}) → {_verdict(good, f)}")
    return meas, ok, _judged("L0 = 0 fit well posed, R² >= 0.98, α within [min, max] of the fitted slopes of "
                             "the finite-size constrained and free references (same d, P, depths) ± 2 SE(α)",
                             parts)


def c2(res, th):
    a, b = FIG3C_SPECTRUM
    require(res, "linear", "easy", 1, [FIG3C_SPECTRUM])
    d = preset_shape(res.preset, "linear")[0]
    modes = [m for m in FIG3C_MODES if m <= d]

    def crossings(a, b):
        s = res.series("linear", "easy", 1, a, b)
        cr = mode_crossings(s, modes, d, a, b)
        return s, [cr.get(m) for m in modes]

    def text(v):
        return ",".join("never" if math.isinf(x) else f"{x:g}" for x in v)

    s, v = crossings(a, b)
    if len(s.arrays.get("mode_R", [])) == 0 or any(x is None for x in v):
        raise MissingRuns(f"missing runs: no mode-wise losses for linear/easy {label(a, b)}")
    never = any(math.isinf(x) for x in v)
    ordered = all(x <= y for x, y in zip(v, v[1:]))
    rises = len(set(v)) > 1
    ok = bool(ordered and rises)
    Lmax = int(s.depths[-1])
    meas = {f"mode {m}": (None if math.isinf(x) else x) for m, x in zip(modes, v)}
    parts = [f"{label(a, b)} modes {modes}: L* = {text(v)}"
             + (f" ('never' = not below 2% up to L={Lmax}: counted as beyond the deepest depth)" if never else "")
             + f"; non-decreasing {_yes(ordered)}, increases at least once {_yes(rises)} → {_yes(ok)}"]
    beside = []
    for a2, b2 in FIG3_SPECTRA:
        if (a2, b2) == (a, b):
            continue
        s2, v2 = crossings(a2, b2)
        if s2 and all(x is not None for x in v2):
            beside.append(f"{label(a2, b2)} {text(v2)}")
    if beside:
        parts.append("beside, not judged (other fig3 spectra): " + ", ".join(beside))
    return meas, ok, _judged(f"L* = first depth with R_k/(ω_k λ_k) < 2%, at Fig. 3c's {label(a, b)} and modes "
                             f"{modes}: never decreasing in k and increasing at least once", parts)


def c3(res, th):
    require(res, "nonlinear", "easy", 1, FIG4_SPECTRA)
    pm = _paired_or_fail(res)
    meas, parts, ok, ns = {}, [], True, []
    for a, b in FIG4_SPECTRA:
        s = res.series("nonlinear", "easy", 1, a, b)
        if int(s.depths[0]) != 1:
            raise MissingRuns(f"missing runs: nonlinear/easy {label(a, b)} L=1")
        ns += s.n.tolist()
        var = float(s.get("var_ystar")[0])
        R = s.get("R")
        R1 = float(R[0]) / var
        top1 = s.get("top1_mass")
        top1_ok = bool(np.all(np.isfinite(top1)) and np.all(top1 > 0.95))
        one = _finite_runs(res, "nonlinear", "easy", 1, a, b, 1)
        diffs, helps = {}, []
        for L in s.depths[1:].tolist():
            deep = _finite_runs(res, "nonlinear", "easy", 1, a, b, L)
            seeds = sorted(set(one) & set(deep))
            if not seeds:
                raise MissingRuns(f"missing runs: nonlinear/easy {label(a, b)}: no seed at both L=1 and L={L}")
            got = [_call_paired(pm.paired_difference, res.store, one[sd]["run_id"], deep[sd]["run_id"])
                   for sd in seeds]
            if len(got) == 1:
                dlt, se = float(got[0]["diff"]), float(got[0]["se"])
            else:
                x = np.array([float(g["diff"]) for g in got])
                dlt, se = float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x)))
            diffs[L] = (dlt, se)
            if not (math.isfinite(dlt) and math.isfinite(se)) or dlt > 2 * se:
                helps.append(L)
        good = bool(R1 < 0.01 and not helps and top1_ok)
        ok &= good
        meas[label(a, b)] = {"R1_over_var": R1, "top1_min": float(np.nanmin(top1)),
                             "paired_R1_minus_RL": {f"L={L}": {"diff": d_, "se": e_} for L, (d_, e_) in diffs.items()}}
        parts.append(f"{label(a, b)} R_1/Var(y*)={_g(R1)} (< 0.01 {_yes(R1 < 0.01)}); R_1 - R_L: "
                     + ", ".join(f"L={L} {_g(d_)}±{_g(e_)}" for L, (d_, e_) in diffs.items())
                     + (f" (depth helps at L={','.join(map(str, helps))})" if helps else " (none > 2 SE)")
                     + f"; top-1 mass min {_g(np.nanmin(top1))} (> 0.95 {_yes(top1_ok)}) → {_yes(good)}")
    return meas, ok, _judged("R_1 < 1% of Var(y*); no paired difference R_1 - R_L (shared evaluation contexts; "
                             "several seeds: mean and SE over seeds) > 2 SE; top-1 mass > 0.95 at every depth",
                             parts, "; " + _seeds_text(res, ns))


def c4a(res, th):
    require(res, "linear", "difficult", 2, FIG56_SPECTRA)
    meas, parts, ok = {}, [], True
    for a, b in FIG56_SPECTRA:
        s = res.series("linear", "difficult", 2, a, b)
        R = dict(zip(s.depths.tolist(), s.get("R")))
        Lmax = int(s.depths[-1])
        if 2 not in R:
            raise MissingRuns(f"missing runs: linear/difficult k=2 {label(a, b)} L=2")
        ratio = float(R[2] / R[Lmax])
        good = ratio <= 1.1
        ok &= good
        meas[label(a, b)] = ratio
        parts.append(f"{label(a, b)} R_2={_g(R[2])}, R_{Lmax}={_g(R[Lmax])}, ratio {_g(ratio)} {_yes(good)}")
    return meas, ok, _judged("R_2 <= 1.1 · R_Lmax (seed means), every fig5 spectrum", parts)


def _plateaus(res):
    """(k, a, b, plateau, SE, SE kind, Lmax) of every Table 3 row at this preset."""
    items = _ks(res, [(2, TABLE3_K2), (16, TABLE3_K16)])
    Lmax = depth_set(res.preset, "all")[-1]
    for k, sp in items:
        require(res, "linear", "difficult", k, sp, (Lmax,))
    out = []
    for k, sp in items:
        for a, b in sp:
            s = res.series("linear", "difficult", k, a, b, (Lmax,))
            se, kind = _se(s, 0)
            out.append((k, a, b, float(s.get("R")[0]), se, kind, Lmax, int(s.n[0])))
    return out


def c4b(res, th):
    d, P = preset_shape(res.preset, "linear")
    geo_ok = P / d >= 8
    meas, parts, ok = {}, [], geo_ok
    for k, a, b, m, _, _, Lmax, _ in _plateaus(res):
        fl = th.floor(a, b, k)
        rel = (m - fl["R_irr"]) / fl["R_irr"]
        good = bool(abs(rel) <= 0.05)
        ok &= good
        meas[label(a, b, k)] = {"plateau": m, "R_irr": fl["R_irr"], "R_irr_se": fl.get("se"), "rel_diff": rel}
        parts.append(f"{label(a, b, k)} R_{Lmax}={_g(m)} vs R_irr={_g(fl['R_irr'])}±{_g(fl.get('se'))}: "
                     f"{100 * rel:+.1f}% {_yes(good)}")
    meas["P_over_d"] = P / d
    geo = f"; the linear runs' d={d}, P={P}: P/d={P / d:g} (>= 8 {_yes(geo_ok)})"
    return meas, ok, _judged("|plateau - R_irr| <= 5% of R_irr (plateau: seed-mean R at Lmax; R_irr at the runs' "
                             "d and P) with P/d >= 8, every Table 3 row", parts, geo + _left_out(res, (2, 16)))


def c4c(res, th):
    meas, parts, ok, ns = {}, [], True, []
    for k, a, b, m, se, kind, Lmax, n in _plateaus(res):
        ns.append(n)
        fl = th.floor(a, b, k)
        fp, fse = float(fl["finite_P"]), float(fl["finite_P_se"])
        tol = 2 * math.hypot(se, fse)
        above = (m - fp) / fp
        not_above = bool(above <= 0.05)
        not_below = bool(m >= fp - tol)
        good = not_above and not_below and math.isfinite(tol)
        ok &= good
        meas[label(a, b, k)] = {"plateau": m, "plateau_se": se, "finite_P_floor": fp, "finite_P_floor_se": fse,
                                "rel_above": above, "two_se": tol}
        parts.append(f"{label(a, b, k)} R_{Lmax}={_g(m)}±{_g(se)} ({kind}) vs finite-P floor {_g(fp)}±{_g(fse)}: "
                     f"{100 * above:+.1f}% (<= +5% {_yes(not_above)}), below by {_g(max(fp - m, 0.0))} vs 2 SE "
                     f"{_g(tol)} ({_yes(not_below)}) → {_yes(good)}")
    return meas, ok, _judged("plateau <= 1.05 · finite-P floor (R_irr with each context's S) and plateau >= floor "
                             "- 2 sqrt(SE_plateau² + SE_floor²), every Table 3 row", parts,
                             "; " + _seeds_text(res, ns) + _left_out(res, (2, 16)))


def c5a(res, th):
    items = [(2, TOP2_SPECTRA)] + ([(16, FIG14_K16)] if 16 in PRESET_KS[res.preset] else [])
    for k, sp in items:
        require(res, "nonlinear", "difficult", k, sp)
    paper16 = {(float(r["a"]), float(r["b"])): r["alpha"] for r in PAPER["table4_nonlinear_fits"] if r["k"] == 16}
    meas, parts, ok = {}, [], True
    for k, sp in items:
        for a, b in sp:
            _, f = loss_fit(res, "nonlinear", "difficult", k, a, b)
            r2_ok = f is not None and f.r2 >= 0.99
            if k == 2:
                a_ok = f is not None and 0.8 <= f.alpha <= 1.2
                what = f"α in [0.8, 1.2] {_yes(a_ok)}"
                pa = None
            else:
                pa = paper16[(a, b)]
                a_ok = f is not None and abs(f.alpha - pa) <= 0.2
                what = f"|α - α_paper {_g(pa)}| = {_g(abs(f.alpha - pa) if f else None)} <= 0.2 {_yes(a_ok)}"
            good = bool(not fit_problem(f) and a_ok and r2_ok)
            ok &= good
            meas[_item(a, b, k)] = {"alpha": f.alpha if f else None, "alpha_se": f.alpha_se if f else None,
                                    "r2": f.r2 if f else None, "paper_alpha": pa,
                                    "fit_status": f.status if f else None}
            parts.append(f"{_item(a, b, k)} {_fitted(f)}: {what}, R² >= 0.99 {_yes(r2_ok)} → {_verdict(good, f)}")
    return meas, ok, _judged("well-posed fits; top-2 (figs 6, 14): α in [0.8, 1.2] and R² >= 0.99; top-16 "
                             "(Table 4): |α - α_paper| <= 0.2 and R² >= 0.99", parts, _left_out(res, (16,)))


def c5b(res, th):
    g = geometry(res.preset, "nonlinear")
    lin = res.view(d=g["d"], P=g["P"], N=g["N"])
    require(res, "nonlinear", "difficult", 2, FIG56_SPECTRA)
    require(lin, "linear", "difficult", 2, FIG56_SPECTRA, what=f" (d={g['d']}, P={g['P']}, N={g['N']})")
    P = PAPER["table1_L0_difficult_k2"]
    meas, parts, ok = {}, [], True
    for (a, b), pn, pl in zip(FIG56_SPECTRA, P["nonlinear"], P["linear"]):
        _, fn = loss_fit(res, "nonlinear", "difficult", 2, a, b)
        sl, fl = loss_fit(lin, "linear", "difficult", 2, a, b)
        if fit_problem(fl):
            L0_lin, how = float(sl.get("R")[-1]), (f"plateau R_{int(sl.depths[-1])}: the linear fit is not "
                                                   f"usable, {fit_problem(fl)}")
        else:
            L0_lin, how = fl.L0, "fitted L0"
        paper_ratio = pl / pn
        if fit_problem(fn):
            ok = False
            meas[label(a, b)] = {"L0_nonlinear": None, "L0_linear": L0_lin, "linear_L0_from": how,
                                 "paper_ratio_d16_vs_d128": paper_ratio, "fit_status": fn.status if fn else None}
            parts.append(f"{label(a, b)} nonlinear L0: {fit_problem(fn)}; linear {_g(L0_lin)} ({how}) → NO")
            continue
        ratio = L0_lin / fn.L0 if fn.L0 > 0 else math.inf
        good = bool(fn.L0 <= L0_lin / 2)
        ok &= good
        meas[label(a, b)] = {"L0_nonlinear": fn.L0, "L0_linear": L0_lin, "linear_L0_from": how, "ratio": ratio,
                             "paper_ratio_d16_vs_d128": paper_ratio}
        parts.append(f"{label(a, b)} L0 nonlinear {_g(fn.L0)} vs linear {_g(L0_lin)} ({how}): ratio {_g(ratio)} "
                     f"(>= 2 {_yes(good)}; paper's Table 1 ratio {paper_ratio:.1f} compares d=16 with d=128) "
                     f"→ {_yes(good)}")
    return meas, ok, _judged(f"L0_nonlinear <= L0_linear / 2, both trained at d={g['d']}, P={g['P']}, N={g['N']}; "
                             "nonlinear L0 from a well-posed fit; linear L0 fitted where well posed, else its "
                             "plateau, every Table 1 spectrum", parts)


def c5c(res, th):
    d, P = preset_shape(res.preset, "nonlinear")
    want = dict(SOFTMAX_GEOMETRY_FIELDS)
    if (d, P) != (want["d"], want["P"]):
        raise CannotJudge(f"not at the paper's nonlinear geometry: the {res.preset} preset's nonlinear runs are "
                          f"d={d}, P={P}, the claim is made at d={want['d']}, P={want['P']}")
    paper = {(2, a, b): v for (a, b), v in paper_L0_top2().items()}
    paper.update({(16, float(r["a"]), float(r["b"])): r["L0"] for r in PAPER["table4_nonlinear_fits"]
                  if r["k"] == 16})
    items = [(k, a, b) for (k, a, b) in paper if k in PRESET_KS[res.preset]]
    for k in sorted({k for k, _, _ in items}):
        require(res, "nonlinear", "difficult", k, [(a, b) for kk, a, b in items if kk == k])
    pm = _paired_or_fail(res)
    floors: dict = {}
    meas, parts, ok = {}, [], True
    for k, a, b in items:
        s, f = loss_fit(res, "nonlinear", "difficult", k, a, b)
        Lmax = int(s.depths[-1])
        if (a, b, k) not in floors:
            runs = _finite_runs(res, "nonlinear", "difficult", k, a, b, Lmax)
            rid = runs[min(runs)]["run_id"]
            try:
                cfg = res.store.load_config(rid)
            except Exception as e:  # noqa: BLE001 - no config, no evaluation contexts: FAIL with why
                raise CannotJudge(f"{NEEDS_STORE} (load_config {rid}: {type(e).__name__}: {e})") from None
            floors[(a, b, k)] = float(_call_paired(pm.floor_on_eval, cfg)["ensemble_floor"])
        fl, p = floors[(a, b, k)], paper[(k, a, b)]
        L0 = f.L0 if f else math.nan
        rp, rf = L0 / p - 1, L0 / fl - 1
        good = bool(not fit_problem(f) and abs(rp) <= 0.05 and abs(rf) <= 0.05)
        ok &= good
        R_deep = float(s.get("R")[-1])
        meas[_item(a, b, k)] = {"L0": f.L0 if f else None, "L0_se": f.L0_se if f else None, "paper_L0": p,
                                "ensemble_floor_on_eval": fl, "L0_vs_paper": rp, "L0_vs_floor": rf,
                                "R_Lmax": R_deep, "fit_status": f.status if f else None}
        parts.append(f"{_item(a, b, k)} L0={_g(L0)}±{_g(f.L0_se if f else None)} vs paper {_g(p)} "
                     f"({100 * rp:+.1f}%, {_yes(abs(rp) <= 0.05)}) and floor on its evaluation contexts {_g(fl)} "
                     f"({100 * rf:+.1f}%, {_yes(abs(rf) <= 0.05)}); beside: R_{Lmax}={_g(R_deep)} → "
                     f"{_verdict(good, f)}")
    return meas, ok, _judged(f"at d={d}, P={P}: the fitted L0 (well posed) within 5% of the paper's L0 and within "
                             "5% of the softmax-ensemble floor on the run's own evaluation contexts, every "
                             "spectrum with a paper L0 (Tables 1, 4)", parts, _left_out(res, (16,)))


def c6(res, th):
    spectra = [s for s in FIG56_SPECTRA if s[1] == 0]
    require(res, "nonlinear", "difficult", 2, spectra)
    meas, parts, ok = {}, [], True
    for a, b in spectra:
        s = res.series("nonlinear", "difficult", 2, a, b)
        dC, dG = rel_change_last_two(s, "C"), rel_change_last_two(s, "gap")
        good = bool(dC < 0.1 and dG < 0.1)
        ok &= good
        L1, L2 = s.depths[-2:].tolist() if len(s.depths) > 1 else (None, None)
        meas[label(a, b)] = {"C": dC, "A_minus_C": dG}
        parts.append(f"{label(a, b)} L={L1}→{L2}: ΔC/C={_g(dC)} ({_yes(dC < 0.1)}), "
                     f"Δ(A-C)/(A-C)={_g(dG)} ({_yes(dG < 0.1)}) → {_yes(good)}")
    return meas, ok, _judged("relative change of C_L and of A_L - C_L over the last two depths < 10%, fig6's b = 0 "
                             "spectra", parts)


def _spread(s: Series, modes, floor: bool) -> tuple[float, list[int]]:
    red = reducible_modes(s, modes, floor=floor)
    if len(red) < 2:
        return math.nan, sorted(red)
    M = np.stack(list(red.values()))
    keep = s.depths >= 2
    return float(np.mean(M[:, keep].max(0) - M[:, keep].min(0))), sorted(red)


def c7(res, th):
    a, b = FIG7_SPECTRUM
    a3, b3 = FIG3C_SPECTRUM
    require(res, "nonlinear", "difficult", 2, [FIG7_SPECTRUM])
    require(res, "linear", "easy", 1, [FIG3C_SPECTRUM])
    s_nl = res.series("nonlinear", "difficult", 2, a, b)
    s_li = res.series("linear", "easy", 1, a3, b3)
    d = preset_shape(res.preset, "linear")[0]
    sn, mn = _spread(s_nl, FIG7_MODES, True)
    sl, ml = _spread(s_li, [m for m in FIG3C_MODES if m <= d], False)
    ok = bool(np.isfinite(sn) and np.isfinite(sl) and sn < sl)
    parts = [f"nonlinear difficult {label(a, b)}: spread {_g(sn)} (modes {mn}, R_k,inf from well-posed fits)",
             f"linear easy {label(a3, b3)} (Fig. 3c): spread {_g(sl)} (modes {ml}, R_k,inf = 0)",
             f"{_g(sn)} < {_g(sl)} {_yes(ok)}"]
    if len(mn) < 2 or len(ml) < 2:
        parts.append(f"fewer than 2 modes with a normalised reducible curve (nonlinear {len(mn)}: a mode whose "
                     f"R_k,inf fit is degenerate is left out; linear {len(ml)}) → NO")
    return {"nonlinear_spread": sn, "linear_easy_spread": sl, "nonlinear_modes": mn, "linear_modes": ml}, ok, \
        _judged("spread (mean over L >= 2 of max - min across modes of the normalised reducible loss) of the "
                "nonlinear model at fig7's spectrum < that of the linear model on the easy task at Fig. 3c's", parts)


def c8a(res, th):
    items = [("single_stream", 2), ("layer_values", 2), ("context_updates", 2)]
    for model, k in items:
        require(res, model, "difficult", k, ORIGIN)
    meas, parts, ok = {}, [], True
    for model, k in items:
        _, f = loss_fit(res, model, "difficult", k, 0.0, 0.0)
        a_ok = f is not None and 0.6 <= f.alpha <= 1.3
        r2_ok = f is not None and f.r2 >= 0.95
        good = bool(not fit_problem(f) and a_ok and r2_ok)
        ok &= good
        meas[model] = {"alpha": f.alpha if f else None, "alpha_se": f.alpha_se if f else None,
                       "r2": f.r2 if f else None, "fit_status": f.status if f else None}
        parts.append(f"{model} {_fitted(f)}: α in [0.6, 1.3] {_yes(a_ok)}, R² >= 0.95 {_yes(r2_ok)} → "
                     f"{_verdict(good, f)}")
    return meas, ok, _judged("well-posed fit with α in [0.6, 1.3] and R² >= 0.95, each variant (k = 2, (0,0), its own depths)",
                             parts)


def c8b(res, th):
    _ks(res, [(16, ORIGIN)])
    require(res, "context_updates", "difficult", 16, ORIGIN)
    s = res.series("context_updates", "difficult", 16, 0.0, 0.0)
    R = dict(zip(s.depths.tolist(), s.get("R")))
    Lmax = int(s.depths[-1])
    if 2 not in R:
        raise MissingRuns("missing runs: context_updates/difficult k=16 (0,0) L=2")
    ratio = float(R[2] / R[Lmax])
    deep = s.depths >= 2
    m = s.get("m")[deep]
    neg = bool(np.all(np.isfinite(m)) and np.all(m < 0))
    spread = float(np.max(m) - np.min(m)) if m.size else math.nan
    flat = bool(spread < 0.5)
    sat = bool(ratio <= 1.1)
    ok = sat and neg and flat
    detail = _judged("k = 16: R_2 <= 1.1 · R_Lmax; m < 0 at every L >= 2 and max - min of m over L >= 2 < 0.5",
                     [f"R_2={_g(R[2])}, R_{Lmax}={_g(R[Lmax])}: ratio {_g(ratio)} {_yes(sat)}",
                      "m " + ", ".join(f"L={L}: {_g(x)}" for L, x in zip(s.depths[deep].tolist(), m))
                      + f": all < 0 {_yes(neg)}, spread {_g(spread)} < 0.5 {_yes(flat)} "
                      f"(paper m ≈ {PAPER['context_updates']['m_top16']})"])
    return {"R2_over_RLmax": ratio, "m": {f"L={L}": float(x) for L, x in zip(s.depths[deep].tolist(), m)},
            "m_spread": spread}, ok, detail


def c9(res, th):
    _ks(res, [(2, ORIGIN), (16, ORIGIN)])
    meas, parts, ok = {}, [], True
    for k, test, name in ((2, lambda r: r > 0.9, "> 0.9"), (16, lambda r: r < 0.3, "< 0.3")):
        if k not in PRESET_KS[res.preset]:
            raise MissingRuns(f"missing runs (k={k} is not part of the {res.preset} preset)")
        require(res, "context_updates", "difficult", k, ORIGIN)
        s = res.series("context_updates", "difficult", k, 0.0, 0.0)
        deep = s.depths >= 2
        if not deep.any():
            raise MissingRuns(f"missing runs: context_updates/difficult k={k} (0,0) at L >= 2")
        Ls, rho, r2 = s.depths[deep].tolist(), s.get("rho")[deep], s.get("rho_r2")[deep]
        good = bool(np.all(np.isfinite(rho)) and all(test(r) for r in rho))
        ok &= good
        meas[f"rho_{k}"] = {f"L={L}": float(r) for L, r in zip(Ls, rho)}
        paper = PAPER["context_updates"][f"rho_top{k}"]
        parts.append(f"ρ_{k} " + ", ".join(f"L={L}: {_g(r)}" for L, r in zip(Ls, rho))
                     + f" (fit R² {_g(np.nanmin(r2))}–{_g(np.nanmax(r2))}; paper {paper}) {name} at every L >= 2: "
                     f"{_yes(good)}")
    return meas, ok, _judged("ρ_2 > 0.9 and ρ_16 < 0.3 at every L >= 2", parts)


def c10(res, th):
    L1, Lmax = depth_set(res.preset, "ends")
    require(res, "nonlinear", "difficult", 2, ORIGIN, (L1, Lmax))
    pm = _paired_or_fail(res)
    one = _finite_runs(res, "nonlinear", "difficult", 2, 0.0, 0.0, L1)
    deep = _finite_runs(res, "nonlinear", "difficult", 2, 0.0, 0.0, Lmax)
    seeds = sorted(set(one) & set(deep))
    if not seeds:
        raise MissingRuns(f"missing runs: no seed at both L={L1} and L={Lmax}")
    got = [_call_paired(pm.bootstrap_dQ, res.store, one[s]["run_id"], deep[s]["run_id"]) for s in seeds]
    q = np.asarray(got[0]["q"], dtype=float)
    dQ = np.stack([np.asarray(g["dQ"], dtype=float) for g in got])
    bse = np.stack([np.asarray(g["se"], dtype=float) for g in got])
    n = len(seeds)
    mean = dQ.mean(0)
    boot = np.sqrt((bse ** 2).sum(0)) / n
    if n > 1:
        se = np.maximum(dQ.std(0, ddof=1) / math.sqrt(n), boot)
        how = f"the larger of the SE over {n} seeds and the bootstrap SE of their mean"
    else:
        se, how = boot, "bootstrap SE over evaluation contexts (one seed)"
    upper = q >= 50
    beyond = mean[upper] > 2 * se[upper]
    ok = bool(upper.any() and np.all(np.isfinite(se[upper])) and np.all(beyond))
    parts = [f"q={int(x)}: {_g(v)}±{_g(e)} {_yes(bool(v > 2 * e))}" for x, v, e in zip(q[upper], mean[upper], se[upper])]
    parts.append(f"beside: lowest q={int(q[0])}: {_g(mean[0])}±{_g(se[0])}")
    meas = {f"q{int(x)}": {"dQ": float(v), "se": float(e)} for x, v, e in zip(q, mean, se)}
    return meas, ok, _judged(f"ΔQ(q) = Q_{L1}(q) - Q_{Lmax}(q) > 2 SE for every q >= 50; SE: {how}", parts)


def c11(res, th):
    require(res, "nonlinear", "difficult", 2, FIG56_SPECTRA)
    meas, parts, ok = {}, [], True
    for a, b in FIG56_SPECTRA:
        f, g, _ = gap_fit(res, a, b)
        if g is None:
            ok = False
            meas[label(a, b)] = None
            why = "loss fit failed" if f is None else f"L0={_g(f.L0)}: fewer than 2 depths with L0 - C_L > 0"
            parts.append(f"{label(a, b)} no fit ({why}) → NO")
            continue
        a_ok = 0.8 <= g.alpha <= 1.2
        r2_ok = g.r2 >= 0.99
        good = bool(not fit_problem(f) and not fit_problem(g) and a_ok and r2_ok)
        ok &= good
        meas[label(a, b)] = {"alpha": g.alpha, "alpha_se": g.alpha_se, "r2": g.r2, "L0": f.L0,
                             "fit_status": g.status, "loss_fit_status": f.status}
        verdict = ("ok" if good else f"NO (L0 from a {fit_problem(f)})" if fit_problem(f) else _verdict(good, g))
        parts.append(f"{label(a, b)} {_fitted(g)}: α in [0.8, 1.2] {_yes(a_ok)}, R² >= 0.99 {_yes(r2_ok)}"
                     + (f" ({g.n_dropped} depth(s) with L0 - C_L <= 0 dropped)" if g.n_dropped else "")
                     + f" → {verdict}")
    return meas, ok, _judged("fit of L0 - C_L = c L^-α (L >= 2; L0 from a well-posed loss fit): well posed, α in "
                             "[0.8, 1.2] and R² >= 0.99, every fig6 spectrum", parts)


# ---------------------------------------------------------------- beyond the paper
# --- time and width beside depth (`scaling`, docs/beyond.md) ---

def _scaling_depths(res) -> tuple[int, ...]:
    from depthscale.registry import SCALING_DEPTHS

    return tuple(L for L in SCALING_DEPTHS if L <= depth_set(res.preset, "all")[-1])


def cB4a(res, th):
    """Width at fixed depth: every N > d against N = d, |R_N - R_d| <= 2 sqrt(SE_N^2 + SE_d^2)."""
    from depthscale.analysis import width_series
    from depthscale.registry import SCALING_SPECTRA, SCALING_WIDTHS

    N0 = geometry(res.preset, "nonlinear")["N"]
    widths = (N0,) + SCALING_WIDTHS
    meas, parts, ok, miss, ns = {}, [], True, [], []
    for a, b in SCALING_SPECTRA:
        for L in _scaling_depths(res):
            w = width_series(res, "nonlinear", "difficult", 2, a, b, L, widths)
            miss += [f"{label(a, b)} L={L} N={N}" for N in w["missing"]]
            if miss or not len(w["N"]):
                continue
            ns += [len((res if N == N0 else res.view(N=N)).runs("nonlinear", "difficult", 2, a, b, L))
                   for N in w["N"].tolist()]
            R0, s0 = w["R"][0], w["R_se"][0]
            z = (w["R"][1:] - R0) / np.sqrt(w["R_se"][1:] ** 2 + s0 ** 2)
            rel = w["R"][1:] / R0 - 1
            good = bool(np.all(np.abs(z) <= 2))
            ok &= good
            meas[f"{label(a, b)} L={L}"] = {"N": w["N"].tolist(), "R": w["R"].tolist(), "R_se": w["R_se"].tolist(),
                                            "z": z.tolist(), "rel_diff": rel.tolist()}
            parts.append(f"{label(a, b)} L={L}: R_{N0}={_g(R0)}±{_g(s0)}; "
                         + ", ".join(f"N={N}: {_g(r)} ({100 * (r / R0 - 1):+.1f}%, z={zz:+.1f})"
                                     for N, r, zz in zip(w["N"][1:], w["R"][1:], z))
                         + f" {_yes(good)}")
    if miss:
        raise MissingRuns(_cells_text(miss))
    return meas, ok, _judged("|R_N - R_d| <= 2 sqrt(SE_N² + SE_d²) (SE over seeds, or evaluation SE with one seed) "
                             f"for every N in {', '.join(map(str, SCALING_WIDTHS))}, at L = "
                             f"{', '.join(map(str, _scaling_depths(res)))}, (0,0) and (1,0)", parts,
                             "; " + _seeds_text(res, ns))


def _time_fits(res, window_pairs: bool):
    """(spectrum, L, curve, full fit, early fit) for every fig6 depth at the scaling spectra."""
    from depthscale.analysis import time_curve, time_fit
    from depthscale.registry import SCALING_SPECTRA

    require(res, "nonlinear", "difficult", 2, SCALING_SPECTRA)
    out, miss = [], []
    for a, b in SCALING_SPECTRA:
        for L in depth_set(res.preset, "all"):
            cur = time_curve(res, "nonlinear", "difficult", 2, a, b, L)
            if cur is None:
                miss.append(f"{label(a, b)} L={L}")
                continue
            out.append(((a, b), L, cur, time_fit(cur, "after_warmup"),
                        time_fit(cur, "early") if window_pairs else None))
    if miss:
        raise MissingRuns("missing curves: " + "; ".join(miss[:4]) + (f" (+{len(miss) - 4} more)" if len(miss) > 4 else ""))
    return out


def cB4b(res, th):
    """The monitor loss after warmup follows R_inf + c t^-beta: a well-posed fit with R^2 >= 0.95."""
    meas, parts, ok, ns = {}, [], True, []
    for (a, b), L, cur, f, _ in _time_fits(res, False):
        ns.append(len(cur["seeds"]))
        r2_ok = f is not None and f.r2 >= 0.95
        good = bool(not fit_problem(f) and r2_ok)
        ok &= good
        meas[f"{label(a, b)} L={L}"] = {"beta": f.alpha if f else None, "beta_se": f.alpha_se if f else None,
                                        "R_inf": f.L0 if f else None, "r2": f.r2 if f else None,
                                        "fit_status": f.status if f else None}
        parts.append(f"{label(a, b)} L={L} {_fitted(f, 'β')} (R² >= 0.95 {_yes(r2_ok)}) {_verdict(good, f)}")
    return meas, ok, _judged("fit of the seed-mean monitor loss R(t) = R_inf + c t^-β over t > warmup well posed with "
                             "R² >= 0.95, every fig6 depth at (0,0) and (1,0)", parts, "; " + _seeds_text(res, ns))


def cB4c(res, th):
    """The time exponent is the run's, not the schedule's: beta over the early window (the cosine
    rate still >= half its peak) agrees with beta over the whole post-warmup window within 2
    combined SE, both fits well posed."""
    meas, parts, ok, ns = {}, [], True, []
    for (a, b), L, cur, f, e in _time_fits(res, True):
        ns.append(len(cur["seeds"]))
        why = fit_problem(f) or fit_problem(e)
        dz = ((f.alpha - e.alpha) / math.sqrt(f.alpha_se ** 2 + e.alpha_se ** 2)
              if not why and f.alpha_se > 0 and e.alpha_se > 0 else math.nan)
        good = bool(not why and abs(dz) <= 2)
        ok &= good
        meas[f"{label(a, b)} L={L}"] = {"beta_full": f.alpha if f else None, "beta_full_se": f.alpha_se if f else None,
                                        "beta_early": e.alpha if e else None, "beta_early_se": e.alpha_se if e else None,
                                        "z": dz}
        parts.append(f"{label(a, b)} L={L} β_all={_g(f.alpha if f else None)}±{_g(f.alpha_se if f else None)} vs "
                     f"β_early={_g(e.alpha if e else None)}±{_g(e.alpha_se if e else None)}, |z|={_g(abs(dz))} <= 2 "
                     + ("ok" if good else f"NO ({why})" if why else "NO"))
    return meas, ok, _judged("β over the early window (cosine rate >= half its peak) within 2 combined SE of β over "
                             "all t > warmup, both fits well posed, every fig6 depth at (0,0) and (1,0)", parts,
                             "; " + _seeds_text(res, ns))


# --- clustered contexts (App. D.2) ---

def _clustered(res, Ks) -> dict:
    """The clustered experiment's series and fits per K (0 = Haar); MissingRuns for absent cells."""
    from depthscale.analysis import clustered_fit

    out, miss = {}, []
    for K in Ks:
        s, f = clustered_fit(res, K)
        out[K] = (s, f)
        miss += [f"nonlinear/difficult k=2 (1,0) clusters={K} L={L}" for L in s.missing]
    if miss:
        raise MissingRuns(_cells_text(miss))
    return out


def _Kname(K: int) -> str:
    return "K=inf" if K == 0 else f"K={K}"


def cB2a(res, th):
    """Layers specialise: at the deepest L the specialisation index S is more than twice its
    permutation null (the index with the class labels shuffled: its sampling-noise level) and above
    the untrained control's S (the same models at step 0), every K >= 2."""
    from depthscale.registry import CLUSTERED_KS, CLUSTERED_SPECTRUM

    Ks = [K for K in CLUSTERED_KS if K >= 2]
    got = _clustered(res, Ks)
    controls, miss = {}, []
    for K in Ks:
        s, _ = got[K]
        L = int(s.depths[-1])
        u = res.view(clusters=K, max_steps=0).series("nonlinear", "difficult", 2, *CLUSTERED_SPECTRUM, (L,))
        if not u:
            miss.append(f"nonlinear/difficult k=2 (1,0) clusters={K} max_steps=0 (untrained control) L={L}")
        controls[K] = u
    if miss:
        raise MissingRuns(_cells_text(miss))
    meas, parts, ok, ns = {}, [], True, []
    for K in Ks:
        s, _ = got[K]
        u = controls[K]
        L = int(s.depths[-1])
        ns += [int(s.n[-1]), int(u.n[0])]
        S, S0 = float(s.get("specialisation")[-1]), float(s.get("specialisation_null")[-1])
        Su = float(u.get("specialisation")[0])
        beats_null = bool(np.isfinite(S) and np.isfinite(S0) and S > 2 * S0)
        if s.n[-1] > 1 and u.n[0] > 1:
            tol = 2 * math.hypot(float(s.se["specialisation"][-1]), float(u.se["specialisation"][0]))
            how = f"by more than 2 SE ({_g(tol)})"
        else:
            tol, how = 0.0, "(one seed: no SE)"
        beats_u = bool(np.isfinite(S) and np.isfinite(Su) and S - Su > tol)
        good = beats_null and beats_u
        ok &= good
        meas[_Kname(K)] = {"L": L, "specialisation": S, "null": S0, "untrained": Su, "tolerance_vs_untrained": tol,
                           "class_cv": float(s.get("class_cv")[-1])}
        parts.append(f"{_Kname(K)} L={L}: S={_g(S)}, null {_g(S0)} (S > 2·null {_yes(beats_null)}), untrained "
                     f"{_g(Su)} (S above it {how} {_yes(beats_u)}) → {_yes(good)}")
    return meas, ok, _judged("S at the deepest L > 2 × its permutation null and > S of the untrained control (by "
                             "more than 2 SE where seeds give one), every K in {2, 4, 8}", parts,
                             "; " + _seeds_text(res, ns))


def cB2b(res, th):
    """The depth exponent does not depend on K: |alpha_K - alpha_inf| <= 2 combined SE, every K."""
    from depthscale.registry import CLUSTERED_KS

    got = _clustered(res, (*CLUSTERED_KS, 0))
    _, f0 = got[0]
    meas, parts = {}, []
    ok = not fit_problem(f0)
    meas[_Kname(0)] = {"alpha": f0.alpha if f0 else None, "alpha_se": f0.alpha_se if f0 else None}
    parts.append(f"{_Kname(0)} α={_g(f0.alpha if f0 else None)}±{_g(f0.alpha_se if f0 else None)} "
                 f"{_verdict(ok, f0)}")
    for K in CLUSTERED_KS:
        _, f = got[K]
        tol = 2 * math.hypot(f.alpha_se, f0.alpha_se) if f and f0 else math.nan
        good = bool(not fit_problem(f) and not fit_problem(f0) and abs(f.alpha - f0.alpha) <= tol)
        ok &= good
        meas[_Kname(K)] = {"alpha": f.alpha if f else None, "alpha_se": f.alpha_se if f else None,
                           "tolerance": tol}
        parts.append(f"{_Kname(K)} α={_g(f.alpha if f else None)}±{_g(f.alpha_se if f else None)} "
                     f"(|Δα| {_g(abs(f.alpha - f0.alpha) if f and f0 else None)} vs 2 SE {_g(tol)}) "
                     f"{_verdict(good, f)}")
    ns = [n for s, _ in got.values() for n in s.n.tolist()]
    return meas, ok, _judged("|α_K - α_inf| <= 2 sqrt(SE_K² + SE_inf²), well-posed fits, every K in {1, 2, 4, 8}",
                             parts, "; " + _seeds_text(res, ns))


def cB2c(res, th):
    """Fewer classes, lower floor: the fitted L0 is non-decreasing in K (1, 2, 4, 8, inf) within 2
    combined SE at each step, and L0(K=1) is below L0(K=inf) by more than 2 combined SE."""
    from depthscale.registry import CLUSTERED_KS

    Ks = (*CLUSTERED_KS, 0)
    got = _clustered(res, Ks)
    meas, parts, ok = {}, [], True
    for K in Ks:
        s, f = got[K]
        meas[_Kname(K)] = {"L0": f.L0 if f else None, "L0_se": f.L0_se if f else None,
                           "R_Lmax": float(s.get("R")[-1]), "R_Lmax_se": float(s.get("R_se")[-1]),
                           "fit_status": f.status if f else None}
        bad = fit_problem(f)
        ok &= not bad
        parts.append(f"{_Kname(K)} L0={_g(f.L0 if f else None)}±{_g(f.L0_se if f else None)}, "
                     f"R_{int(s.depths[-1])}={_g(float(s.get('R')[-1]))}" + (f" ({bad})" if bad else ""))
    fits = [got[K][1] for K in Ks]
    if all(f is not None for f in fits):
        steps = [fits[i + 1].L0 - fits[i].L0 >= -2 * math.hypot(fits[i].L0_se, fits[i + 1].L0_se)
                 for i in range(len(fits) - 1)]
        drop = fits[-1].L0 - fits[0].L0
        tol = 2 * math.hypot(fits[0].L0_se, fits[-1].L0_se)
        ok &= bool(all(steps) and drop > tol)
        parts.append(f"L0 non-decreasing in K within 2 SE: {'yes' if all(steps) else 'NO'}; "
                     f"L0(inf) - L0(1) = {_g(drop)} vs 2 SE {_g(tol)}: {'ok' if drop > tol else 'NO'}")
        meas["monotone"] = bool(all(steps))
        meas["L0_inf_minus_L0_1"] = drop
    else:
        ok = False
    ns = [n for s, _ in got.values() for n in s.n.tolist()]
    return meas, ok, _judged("fitted L0 non-decreasing in K = 1, 2, 4, 8, inf (each step within 2 combined SE) and "
                             "L0(K=1) < L0(inf) by more than 2 combined SE, well-posed fits", parts,
                             "; " + _seeds_text(res, ns))


# --- a pre-LN Transformer ---

def _transformer_series(res):
    from depthscale.registry import transformer_depths

    depths = transformer_depths(res.preset)
    require(res, "transformer", "difficult", 2, ORIGIN, depths)
    return res.series("transformer", "difficult", 2, 0.0, 0.0, depths)


def cB3b(res, th):
    """Claim 6's test on the Transformer: A_L - C_L positive and its relative change over the
    last two depths (Lmax/2, Lmax) < 10%."""
    s = _transformer_series(res)
    G = dict(zip(s.depths.tolist(), s.get("gap")))
    dG = rel_change_last_two(s, "gap")
    Ls = [L for L in s.depths.tolist() if L > 1]
    if len(Ls) < 2:
        raise MissingRuns("missing runs: fewer than two Transformer depths >= 2")
    pos = all(G[L] > 0 for L in Ls)
    good = bool(pos and dG < 0.1)
    detail = _judged("A_L - C_L > 0 at every L >= 2 and its relative change over the last two depths < 10%",
                     ["A-C " + ", ".join(f"L={L}: {_g(G[L])}" for L in Ls) + f" (all > 0 {_yes(pos)})",
                      f"Δ(A-C)/(A-C) over L={Ls[-2]}→{Ls[-1]}: {_g(dG)} "
                      + ("(grows)" if G[Ls[-1]] > G[Ls[-2]] else "(falls)") + f" < 0.1 {_yes(dG < 0.1)}"],
                     "; " + _seeds_text(res, s.n.tolist()))
    return {"A_minus_C": {f"L={L}": G[L] for L in Ls}, "rel_change": dG}, good, detail


def cB3c(res, th):
    """The ensemble's floor: C_L > 0 at every L >= 2 and, at Lmax, the shared error C_L is at least
    half the loss (R_L = C_L + (A_L - C_L)/L: in the controlled model C_L rises to near R_L)."""
    s = _transformer_series(res)
    C, R = dict(zip(s.depths.tolist(), s.get("C"))), dict(zip(s.depths.tolist(), s.get("R")))
    Ls = [L for L in s.depths.tolist() if L > 1]
    if not Ls:
        raise MissingRuns("missing runs: no Transformer depth >= 2")
    Lmax = Ls[-1]
    frac = C[Lmax] / R[Lmax]
    pos = all(C[L] > 0 for L in Ls)
    good = bool(pos and frac >= 0.5)
    detail = _judged("C_L > 0 at every L >= 2 and C_Lmax >= R_Lmax / 2",
                     ["C " + ", ".join(f"L={L}: {_g(C[L])}" for L in Ls) + f" (all > 0 {_yes(pos)})",
                      f"C/R at L={Lmax}: {_g(frac)} >= 0.5 {_yes(frac >= 0.5)}"],
                     "; " + _seeds_text(res, s.n.tolist()))
    return {"C": {f"L={L}": C[L] for L in Ls}, "C_over_R_Lmax": frac}, good, detail


def cB3d(res, th):
    """Depth lowers the Transformer's loss: R_Lmax < R_1 - 2 sqrt(SE_1^2 + SE_Lmax^2)."""
    s = _transformer_series(res)
    R = s.get("R")
    se1, kind = _se(s, 0)
    seM, _ = _se(s, len(s.depths) - 1)
    gap = float(R[0] - R[-1])
    tol = 2 * math.hypot(se1, seM)
    good = bool(int(s.depths[0]) == 1 and gap > tol)
    detail = _judged("R_Lmax < R_1 - 2 sqrt(SE_1² + SE_Lmax²)",
                     [f"R_1={_g(R[0])}±{_g(se1)}, R_{int(s.depths[-1])}={_g(R[-1])}±{_g(seM)} ({kind}); gain "
                      f"{_g(gap)} vs 2 SE {_g(tol)} {_yes(good)}"],
                     "; " + _seeds_text(res, s.n.tolist()))
    return {"R_1": float(R[0]), "R_Lmax": float(R[-1]), "gain": gap, "two_se": tol}, good, detail


# --- looped stacks (looped.py, docs/beyond.md). Conditions fixed before the cpu runs were looked at.

def _looped_cells(res, model: str, B: int) -> dict:
    """{L: cell} of one tying's curve (looped.curve's depths): seed means of R, A, C, A - C, the SE
    of R (over seeds, or the evaluation SE with one seed) and the seed count; MissingRuns naming any
    cell of the model without a run."""
    from depthscale import looped as lp

    miss = [m for m in lp.missing(res) if m.startswith(model + " ")]
    if miss:
        raise MissingRuns(_cells_text(miss))
    out = {}
    for row in lp.curve(res, model, B):
        L = row["L"]
        s = res.view(loop=B if B and L != B else 0).series(model, lp.TASK, lp.K, *lp.SPECTRUM, (L,))
        se, kind = _se(s, 0)
        out[L] = {**row, "R_se": se, "se_kind": kind, "n": int(s.n[0])}
    return out


def _z(r1: dict, r2: dict) -> float:
    """(R_1 - R_2) in units of the combined SE."""
    return (r1["R"] - r2["R"]) / math.sqrt(r1["R_se"] ** 2 + r2["R_se"] ** 2)


def _cascaded_items(res):
    from depthscale.registry import LOOPED_MODELS

    for model in LOOPED_MODELS:
        yield model, _looped_cells(res, model, 0), _looped_cells(res, model, 1)


def _ns(*cell_dicts) -> list[int]:
    return [c["n"] for cells in cell_dicts for c in cells.values()]


def cB1b(res, th):
    """Depth pays with one tied layer: R_Lmax(B = 1) < R_1 beyond 2 combined SE, both cascaded models."""
    meas, parts, ok, ns = {}, [], True, []
    for model, untied, tied in _cascaded_items(res):
        ns += _ns(untied, tied)
        L = max(tied)
        z = _z(untied[1], tied[L])
        good = bool(z > 2)
        ok &= good
        meas[model] = {"L": L, "R_1": untied[1]["R"], "R_L_tied": tied[L]["R"], "z": z}
        parts.append(f"{model}: R_1={_g(untied[1]['R'])}±{_g(untied[1]['R_se'])}, R_{L}(B=1)={_g(tied[L]['R'])}"
                     f"±{_g(tied[L]['R_se'])} (gain {_g(untied[1]['R'] - tied[L]['R'])}, z={z:+.1f} > 2) {_yes(good)}")
    return meas, ok, _judged("R_Lmax(B = 1) < R_1 by more than 2 combined SE (over seeds, or evaluation SEs with one "
                             "seed), both cascaded variants", parts, "; " + _seeds_text(res, ns))


def cB1c(res, th):
    """Aggregation survives tying: at the deepest tied depth the B = 1 model keeps at least half of the
    untied model's layer disagreement A_L - C_L, both models."""
    meas, parts, ok, ns = {}, [], True, []
    for model, untied, tied in _cascaded_items(res):
        ns += _ns(untied, tied)
        L = max(tied)
        if L not in untied:
            raise MissingRuns(f"missing runs: {model} untied L={L}")
        gu, gt = untied[L]["A_minus_C"], tied[L]["A_minus_C"]
        ratio = gt / gu if gu > 0 else math.nan
        good = bool(gu > 0 and ratio >= 0.5)
        ok &= good
        meas[model] = {"L": L, "gap_untied": gu, "gap_tied": gt, "ratio": ratio,
                       "A_tied": tied[L]["A"], "C_tied": tied[L]["C"], "A_untied": untied[L]["A"], "C_untied": untied[L]["C"]}
        parts.append(f"{model} L={L}: A-C tied {_g(gt)} vs untied {_g(gu)} (ratio {_g(ratio)} >= 0.5) {_yes(good)}")
    return meas, ok, _judged("(A_L - C_L) of the B = 1 model >= 0.5 × that of the untied model at the deepest tied "
                             "depth, both cascaded variants", parts, "; " + _seeds_text(res, ns))


def cB1d(res, th):
    """At equal parameters looping wins: every looped B at its deepest depth beats the untied
    B-layer model (the same parameter count) beyond 2 combined SE, both cascaded models."""
    from depthscale import looped as lp

    meas, parts, ok, ns = {}, [], True, []
    for model in lp.LOOPED_MODELS:
        untied = _looped_cells(res, model, 0)
        ns += _ns(untied)
        for B in lp.LOOPED_B:
            tied = {L: r for L, r in _looped_cells(res, model, B).items() if L != B}
            if not tied or B not in untied:
                continue  # (a tying with no looped depth at this preset)
            ns += _ns(tied)
            L = max(tied)
            z = _z(untied[B], tied[L])
            good = bool(z > 2)
            ok &= good
            meas[f"{model} B={B}"] = {"L": L, "R_B_untied": untied[B]["R"], "R_L_looped": tied[L]["R"], "z": z}
            parts.append(f"{model} B={B}: R_{B}(untied)={_g(untied[B]['R'])} -> R_{L}(looped)={_g(tied[L]['R'])} "
                         f"(z={z:+.1f} > 2) {_yes(good)}")
    if not meas:
        raise MissingRuns("missing runs: no looped depth at this preset")
    return meas, ok, _judged("R_L(loop B) < R_B(untied) by more than 2 combined SE at the deepest looped L of every "
                             "B = 1, 2, 4, both cascaded variants", parts, "; " + _seeds_text(res, ns))


# id, claim, expected (SPEC §9's criterion), check, experiments whose runs it uses
CLAIMS: tuple[tuple[str, str, str, Callable, tuple[str, ...]], ...] = (
    ("1", "Linear, easy: a power law in L with α between the finite-size references",
     "power law in L (L0 = 0 fit) with R² >= 0.98 and α between the fitted slopes of the constrained and the free "
     "reference curves at the same d, P and depths (±2 SE), every fig3 spectrum; the asymptotic ζ, 2ζ and the "
     "paper's α shown beside", c1, ("fig3", "table2")),
    ("2", "Linear, easy: modes are learned in order",
     "the depth at which a mode's normalised loss R_k/(ω_k λ_k) first falls below 2% never decreases with the "
     "mode index and increases at least once over the modes shown (Fig. 3c); a mode never learned counts as "
     "beyond the deepest depth", c2, ("fig3",)),
    ("3", "Nonlinear, easy: one layer suffices",
     "R_1 < 1% of Var(y*); depth does not help: no R_L below R_1 by more than 2 SE of the paired difference "
     "R_1 - R_L; top-1 mass > 0.95; every fig4 spectrum", c3, ("fig4",)),
    ("4a", "Linear, difficult: plateau by L = 2",
     "R_2 <= 1.1 · R_Lmax, every fig5 spectrum", c4a, ("fig5", "table1")),
    ("4b", "Linear, difficult: plateau at the theory floor R_irr",
     "the plateau within 5% of R_irr at the same d and P (P/d >= 8), every Table 3 row", c4b, ("table3",)),
    ("4c", "Linear, difficult: plateau at the finite-P floor (our own)",
     "the plateau at most 5% above the finite-P floor (R_irr with each context's S) and not below it by more "
     "than 2 SE, every Table 3 row", c4c, ("table3",)),
    ("5a", "Nonlinear, difficult: inverse-depth scaling",
     "α ∈ [0.8, 1.2] with R² >= 0.99 for every top-2 spectrum of figs 6 and 14, and |α - α_paper| <= 0.2 with "
     "R² >= 0.99 for the four top-16 spectra of Table 4 (well-posed fits)", c5a, ("fig6", "fig14", "table1", "table4")),
    ("5b", "Nonlinear floor at most half the linear one, both trained at the same d and P",
     "L0_nonlinear <= L0_linear / 2 with both trained at the same d and P, on the seven Table 1 spectra; the "
     "paper's Table 1 ratio (6-30x, d = 16 beside d = 128) shown beside", c5b, ("table1",)),
    ("5c", "The nonlinear floor at the paper's geometry",
     "at the paper's nonlinear geometry the fitted L0 within 5% of the paper's L0 and within 5% of the "
     "softmax-ensemble floor computed on the run's own evaluation contexts, every spectrum with a paper L0; "
     "R_Lmax shown beside", c5c, ("fig6", "fig14", "table4", "table6")),
    ("6", "C_L and A_L - C_L settle",
     "relative change over the last two depths < 10%, every spectrum of fig6 (c, d)", c6, ("fig6",)),
    ("7", "Nonlinear modes learn in parallel",
     "at the fig7 spectrum the normalised reducible curves of different modes differ by less than their spread "
     "under the linear model on the easy task (Fig. 3c)", c7, ("fig7", "fig3")),
    ("8a", "Variants keep an inverse-depth signal",
     "α ∈ [0.6, 1.3], R² >= 0.95, from a non-degenerate fit, for single_stream, layer_values, context_updates "
     "(k = 2)", c8a, ("fig9", "fig10", "fig11")),
    ("8b", "Context updates, k = 16: saturates, m negative and nearly constant",
     "R_2 <= 1.1 · R_Lmax; m negative and nearly constant (spread < 0.5) at every L >= 2", c8b, ("fig11",)),
    ("9", "Context attention: identity-like for k = 2, flat for k = 16",
     "ρ_2 > 0.9 and ρ_16 < 0.3 at every L >= 2", c9, ("fig12",)),
    ("10", "Depth improves selection in the upper tail",
     "ΔQ(q) > 0 for every q >= 50, beyond 2 SE (bootstrap over evaluation contexts)", c10, ("fig13",)),
    ("11", "Table 5: L0 - C_L decays like 1/L",
     "α ∈ [0.8, 1.2] with R² >= 0.99, every fig6 spectrum (Table 5)", c11, ("table5",)),
    ("B2a", "Clustered contexts: layers specialise in context classes (App. D.2's hypothesis)",
     "specialisation index S at the deepest L > 2x its permutation null (the index with shuffled class labels) "
     "and > S of the untrained control (the same models at step 0; by more than 2 SE where seeds give one), "
     "every K in {2, 4, 8}", cB2a, ("clustered",)),
    ("B2b", "Clustered contexts: the depth exponent does not change with the number of classes",
     "|α_K - α_inf| <= 2 combined SE, well-posed fits, every K in {1, 2, 4, 8}", cB2b, ("clustered",)),
    ("B2c", "Clustered contexts: fewer classes, lower floor",
     "fitted L0 non-decreasing in K = 1, 2, 4, 8, inf (within 2 combined SE per step) and "
     "L0(K=1) < L0(inf) by more than 2 combined SE, well-posed fits", cB2c, ("clustered",)),
    ("B4a", "Beyond: width beyond N = d does not change the loss at fixed depth",
     "|R_N - R_d| <= 2 sqrt(SE_N^2 + SE_d^2) for every N in 24, 32, 48, 64, at L = 4 and 16, (0,0) and (1,0) "
     "(the function class of SPEC §3.1 is the same for every N >= d)", cB4a, ("scaling",)),
    ("B4b", "Beyond: loss vs training step is a saturating power law after warmup",
     "fit of the monitor R(t) = R_inf + c t^-β over t > warmup well posed with R² >= 0.95, every fig6 depth "
     "at (0,0) and (1,0)", cB4b, ("scaling",)),
    ("B4c", "Beyond: the time exponent is not set by the learning-rate schedule",
     "β over the early window (cosine rate >= half its peak) within 2 combined SE of β over all t > warmup, "
     "both fits well posed, every fig6 depth at (0,0) and (1,0)", cB4c, ("scaling",)),
    ("B3b", "Beyond: the Transformer's A_L - C_L settles (claim 6's test)",
     "A_L - C_L > 0 at every L >= 2 and relative change over the last two depths (4 -> 8) < 10%", cB3b,
     ("transformer",)),
    ("B3c", "Beyond: the Transformer's loss at depth is the shared error C_L (an ensemble's floor)",
     "C_L > 0 at every L >= 2 and C_Lmax >= R_Lmax / 2", cB3c, ("transformer",)),
    ("B3d", "Beyond: depth lowers the Transformer's loss",
     "R_Lmax < R_1 - 2 sqrt(SE_1^2 + SE_Lmax^2) (SE over seeds, or evaluation SEs with one seed)", cB3d,
     ("transformer",)),
    ("B1b", "Beyond: with one tied layer, depth still buys loss (single_stream, context_updates)",
     "R_Lmax(B = 1) < R_1 by more than 2 combined SE, Lmax the deepest tied depth (8 at cpu), "
     "both cascaded variants, (0,0), k = 2", cB1b, ("looped",)),
    ("B1c", "Beyond: aggregation survives looping (layer disagreement A_L - C_L is kept)",
     "(A_L - C_L) of the B = 1 model >= 0.5 x that of the untied model at the same deepest depth, both "
     "cascaded variants", cB1c, ("looped",)),
    ("B1d", "Beyond: at equal parameters, looping a B-layer stack deeper beats the B-layer stack",
     "R_L(loop B) < R_B(untied) by more than 2 combined SE at the deepest looped L of every "
     "B = 1, 2, 4, both cascaded variants", cB1d, ("looped",)),
)


def check(claim_id: str, res: Results, th: Theory) -> dict:
    """One claim on one preset's results."""
    for cid, text, expected, fn, uses in CLAIMS:
        if cid == claim_id:
            break
    else:
        raise InputError(f"unknown claim {claim_id!r}; known: {', '.join(c[0] for c in CLAIMS)}")
    out = {"id": cid, "claim": text, "preset": res.preset, "expected": expected, "uses": list(uses)}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)  # nan in, nan out: judged below
            measured, ok, detail = fn(res, th)
    except (MissingRuns, CannotJudge) as e:
        measured, ok, detail = None, False, f"{e} (criterion: {expected})"
    except Exception as e:  # noqa: BLE001 - a broken check is a FAIL with its reason, never a PASS
        measured, ok, detail = None, False, f"error while checking: {type(e).__name__}: {e} (criterion: {expected})"
    out.update(measured=plain(measured), detail=detail)
    out["pass"] = bool(ok)
    return out


def check_all(res: Results, th: Theory, ids: str | Iterable[str] | None = "all") -> list[dict]:
    """Every claim that uses one of the experiments `ids`, in SPEC §9 order."""
    wanted = set(resolve_ids(ids))
    return [check(cid, res, th) for cid, _, _, _, uses in CLAIMS if wanted & set(uses)]


__all__ = ["CLAIMS", "check", "check_all", "require", "MissingRuns", "CannotJudge", "NEEDS_STORE", "fit_problem"]
