"""The claims of SPEC §9, checked on one preset's stored results: PASS/FAIL with the numbers.

Each check returns a dict {id, claim, preset, measured, expected, pass, detail, uses}. Claims are
judged on the data as they are: every threshold below is SPEC §9's, and where SPEC leaves an
operational choice it is written here, once. A claim any of whose runs
are missing (no finite run in a cell it needs) is FAIL with measured None and detail
"missing runs: ..."; it is never passed on partial data. Items with k not in the preset (k = 16
at smoke) are left out of a claim; a claim with no items left is FAIL "missing runs".

Operational choices:
- "last two depths" are Lmax/2 and Lmax; relative change |X(Lmax) - X(Lmax/2)| / |X(Lmax/2)|.
- Claim 2: a mode is learned at the first depth where R_k/(omega_k lambda_k) < 2%; "grows with
  the mode index" = those depths are non-decreasing in k (never = inf) over modes 1, 2, 4, 8 and
  not all equal; checked on every fig3 spectrum.
- Claim 3: R_1 < 1% of Var(y*); "depth does not help" = (R_1 - min_L R_L) <= 1% of Var(y*); top-1
  mass > 0.95 at every depth (final evaluation).
- Claim 4: the plateau is the seed-mean R at Lmax; 4a on the fig5 spectra, 4b on table3's.
- Claim 7: spread = mean over L >= 2 of (max - min over modes) of the normalised reducible curves
  (modes 1, 2, 4, 8 at (1, 0)); PASS if nonlinear spread < linear spread.
- Claim 8: "m nearly constant" = (max - min over depths) <= 20% of |mean m|, over depths >= 2:
  at L = 1 the context states are updated after the only read of them, so m gets no gradient and
  keeps its initial value (0).
- Claim 9: rho at every depth.
- A claim built on a fit judges only a well-posed one: a degenerate fit (fits.FitResult.status:
  too few points, a parameter on its bound, no SE, R² undefined) makes its item FAIL, and the
  detail says "degenerate fit" with the reason.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Iterable

import numpy as np

from depthscale.analysis import (gap_fit, loss_fit, mode_crossings, plateau, reducible_modes, reference_slopes,
                                 rel_change_last_two, selection_quantiles)
from depthscale.atomic import plain
from depthscale.errors import InputError
from depthscale.formatting import label, number
from depthscale.registry import (FIG3_SPECTRA, FIG3C_MODES, FIG4_SPECTRA, FIG7_MODES, FIG7_SPECTRUM, FIG56_SPECTRA,
                                 ORIGIN, PAPER, PRESET_KS, TABLE3_K2, TABLE3_K16, TOP2_SPECTRA, depth_set,
                                 paper_L0_top2, preset_shape, resolve_ids)
from depthscale.results import Results, Theory
from depthscale.theory import two_zeta, zeta


class MissingRuns(Exception):
    """A claim's data are not in the store."""


def _g(x) -> str:
    """A number in a claim's detail: 4 significant digits, 'nan' for NaN."""
    return number(x, table=False)


def fit_problem(f) -> str:
    """Why fit `f` cannot carry a claim ('' when it can): no fit, or a degenerate one and its reason."""
    if f is None:
        return "no fit"
    return "" if f.ok else f"degenerate fit: {f.reason}"


def _verdict(good: bool, f) -> str:
    """'ok', 'NO', or 'NO (degenerate fit: reason)' at the end of an item's detail."""
    why = fit_problem(f)
    return "ok" if good else f"NO ({why})" if why else "NO"


def require(res: Results, model: str, task: str, k: int, spectra, depths=None) -> None:
    """Raise MissingRuns naming the cells (model, task, k, spectrum, L) without a finite run."""
    miss = []
    for a, b in spectra:
        s = res.series(model, task, k, a, b, depths)
        miss += [f"{model}/{task}{'' if task == 'easy' else f' k={k}'} {label(a, b)} L={L}" for L in s.missing]
    if miss:
        more = f" (+{len(miss) - 4} more)" if len(miss) > 4 else ""
        raise MissingRuns(f"missing runs: {len(miss)} cell(s): " + "; ".join(miss[:4]) + more)


def _ks(res: Results, pairs):
    """The (k, spectra) items of a claim that exist at this preset."""
    kept = [(k, sp) for k, sp in pairs if k in PRESET_KS[res.preset]]
    if not kept:
        raise MissingRuns(f"missing runs (k={','.join(str(k) for k, _ in pairs)} is not part of "
                          f"the {res.preset} preset)")
    return kept


# ---------------------------------------------------------------- the checks

def c1(res, th):
    """ζ and 2ζ are asymptotes (1 << L << sqrt(λ1/λd)); at the trained d, P and depths the measured
    slope is judged against the slopes of the finite-size references fitted over the same depths:
    the best shared GD step (constrained) and the best polynomial (free) in the empirical S."""
    require(res, "linear", "easy", 1, FIG3_SPECTRA)
    paper = {(float(r["a"]), float(r["b"])): r["alpha"] for r in PAPER["table2_linear_easy"]}
    meas, parts, ok = {}, [], True
    for a, b in FIG3_SPECTRA:
        s, f = loss_fit(res, "linear", "easy", 1, a, b)
        z = zeta(a, b)
        ref = reference_slopes(th, a, b, [int(L) for L in s.depths])
        lo, hi = ref["constrained"], ref["free"]
        se = f.alpha_se if f is not None and math.isfinite(f.alpha_se) else math.nan
        good = (not fit_problem(f) and math.isfinite(se) and math.isfinite(lo) and math.isfinite(hi)
                and min(lo, hi) - 2 * se <= f.alpha <= max(lo, hi) + 2 * se)
        ok &= good
        meas[label(a, b)] = {"alpha": f.alpha if f else None, "alpha_se": se, "r2": f.r2 if f else None,
                            "alpha_constrained_finite": lo, "alpha_free_finite": hi,
                            "zeta": z, "two_zeta": two_zeta(a, b), "paper_alpha": paper[(a, b)],
                            "fit_status": f.status if f else None}
        parts.append(f"{label(a, b)} α={_g(f.alpha if f else None)}±{_g(se)} in [{_g(lo)},{_g(hi)}] "
                     f"(asymptotic [{_g(z)},{_g(two_zeta(a, b))}], paper {_g(paper[(a, b)])}), "
                     f"R²={_g(f.r2 if f else None)} {_verdict(good, f)}")
    return meas, ok, "; ".join(parts)


def c2(res, th):
    require(res, "linear", "easy", 1, FIG3_SPECTRA)
    d = preset_shape(res.preset, "linear")[0]
    modes = [m for m in FIG3C_MODES if m <= d]
    meas, parts, ok = {}, [], True
    for a, b in FIG3_SPECTRA:
        s = res.series("linear", "easy", 1, a, b)
        cr = mode_crossings(s, modes, d, a, b)
        if len(cr) < 2:
            raise MissingRuns(f"missing runs: no mode-wise losses for {label(a, b)}")
        v = [cr[m] for m in modes]
        good = all(x <= y for x, y in zip(v, v[1:])) and len(set(v)) > 1
        ok &= good
        meas[label(a, b)] = {f"mode {m}": (None if math.isinf(x) else x) for m, x in zip(modes, v)}
        parts.append(f"{label(a, b)} L*=" + ",".join("never" if math.isinf(x) else f"{x:g}" for x in v)
                     + (" ok" if good else " NO"))
    return meas, ok, f"first depth with R_k/(ω_k λ_k) < 2% for modes {modes}: " + "; ".join(parts)


def c3(res, th):
    require(res, "nonlinear", "easy", 1, FIG4_SPECTRA)
    meas, parts, ok = {}, [], True
    for a, b in FIG4_SPECTRA:
        s = res.series("nonlinear", "easy", 1, a, b)
        var = float(np.nanmean(s.get("var_ystar")))
        R = s.get("R")
        R1 = float(R[0]) / var
        gain = (float(R[0]) - float(np.nanmin(R))) / var
        top1 = float(np.nanmin(s.get("top1_mass")))
        good = R1 < 0.01 and gain <= 0.01 and top1 > 0.95
        ok &= good
        meas[label(a, b)] = {"R1_over_var": R1, "depth_gain_over_var": gain, "top1_min": top1}
        parts.append(f"{label(a, b)} R_1/Var={_g(R1)}, gain={_g(gain)}, top1_min={_g(top1)} "
                     + ("ok" if good else "NO"))
    return meas, ok, "; ".join(parts)


def c4a(res, th):
    require(res, "linear", "difficult", 2, FIG56_SPECTRA)
    meas, parts, ok = {}, [], True
    for a, b in FIG56_SPECTRA:
        s = res.series("linear", "difficult", 2, a, b)
        R = dict(zip(s.depths.tolist(), s.get("R")))
        Lmax = int(s.depths[-1])
        if 2 not in R:
            raise MissingRuns(f"missing runs: linear/difficult k=2 {label(a, b)} L=2")
        ratio = R[2] / R[Lmax]
        good = ratio <= 1.1
        ok &= good
        meas[label(a, b)] = ratio
        parts.append(f"{label(a, b)} R_2/R_{Lmax}={_g(ratio)} {'ok' if good else 'NO'}")
    return meas, ok, "; ".join(parts)


def c4b(res, th):
    items = _ks(res, [(2, TABLE3_K2), (16, TABLE3_K16)])
    Lmax = depth_set(res.preset, "all")[-1]
    for k, sp in items:
        require(res, "linear", "difficult", k, sp, (Lmax,))
    meas, parts, ok = {}, [], True
    for k, sp in items:
        for a, b in sp:
            m, _, _ = plateau(res, "linear", k, a, b)
            fl = th.floor(a, b, k)
            rel = (m - fl["R_irr"]) / fl["R_irr"]
            rel_fin = (m - fl["finite_P"]) / fl["finite_P"]  # the same floor with the empirical S
            good = min(abs(rel), abs(rel_fin)) <= 0.05
            ok &= good
            near = "R_irr" if abs(rel) <= abs(rel_fin) else "finite-P floor"
            meas[label(a, b, k)] = {"plateau": m, "R_irr": fl["R_irr"], "rel_diff": rel,
                                   "finite_P_floor": fl["finite_P"], "rel_diff_finite_P": rel_fin,
                                   "approaches": near}
            parts.append(f"{label(a, b, k)} R_{Lmax}={_g(m)} vs R_irr={_g(fl['R_irr'])}±{_g(fl['se'])} "
                         f"({100 * rel:+.1f}%), finite-P {_g(fl['finite_P'])}±{_g(fl['finite_P_se'])} "
                         f"({100 * rel_fin:+.1f}%): nearer {near} {'ok' if good else 'NO'}")
    return meas, ok, "; ".join(parts)


def c5a(res, th):
    require(res, "nonlinear", "difficult", 2, TOP2_SPECTRA)
    meas, parts, ok = {}, [], True
    for a, b in TOP2_SPECTRA:
        _, f = loss_fit(res, "nonlinear", "difficult", 2, a, b)
        good = not fit_problem(f) and 0.8 <= f.alpha <= 1.2 and f.r2 >= 0.99
        ok &= good
        meas[label(a, b)] = {"alpha": f.alpha if f else None, "r2": f.r2 if f else None,
                             "fit_status": f.status if f else None}
        parts.append(f"{label(a, b)} α={_g(f.alpha if f else None)}±{_g(f.alpha_se if f else None)}, "
                     f"R²={_g(f.r2 if f else None)} {_verdict(good, f)}")
    return meas, ok, "; ".join(parts)


def c5b(res, th):
    """At the same d and P: the linear floor is R_irr at the nonlinear geometry (the trained linear
    plateau matches R_irr, claim 4b). The trained linear L0 at its own geometry and the paper's
    Table 1 ratio (d = 16 nonlinear beside d = 128 linear) are shown beside."""
    require(res, "nonlinear", "difficult", 2, FIG56_SPECTRA)
    P = PAPER["table1_L0_difficult_k2"]
    meas, parts, ok = {}, [], True
    for (a, b), pn, pl in zip(FIG56_SPECTRA, P["nonlinear"], P["linear"]):
        _, fn = loss_fit(res, "nonlinear", "difficult", 2, a, b)
        _, fl = loss_fit(res, "linear", "difficult", 2, a, b)
        R_irr = th.floor(a, b, 2, "nonlinear")["R_irr"]
        if fit_problem(fn):
            ok = False
            meas[label(a, b)] = None
            parts.append(f"{label(a, b)} nonlinear L0: {fit_problem(fn)} NO")
            continue
        ratio = R_irr / fn.L0 if fn.L0 > 0 else math.inf
        good = fn.L0 <= R_irr / 2
        ok &= good
        meas[label(a, b)] = {"L0_nonlinear": fn.L0, "R_irr_same_geometry": R_irr, "ratio": ratio,
                            "L0_linear_own_geometry": fl.L0 if fl else None,
                            "paper_ratio_d16_vs_d128": pl / pn}
        parts.append(f"{label(a, b)} L0 {_g(fn.L0)} vs R_irr {_g(R_irr)} at the same d, P: ratio "
                     f"{_g(ratio)} (paper {pl / pn:.1f}, d=16 beside d=128) {'ok' if good else 'NO'}")
    return meas, ok, "; ".join(parts)


def c5c(res, th):
    require(res, "nonlinear", "difficult", 2, TOP2_SPECTRA)
    paper = paper_L0_top2()
    meas, parts, ok = {}, [], True
    for a, b in TOP2_SPECTRA:
        s, f = loss_fit(res, "nonlinear", "difficult", 2, a, b)
        R_deep = float(s.get("R")[-1])
        fl = th.softmax_floor(a, b, 2)["ensemble_floor"]
        p = paper[(a, b)]
        L0 = f.L0 if f else math.nan
        rel = {"R_Lmax/paper": R_deep / p - 1, "R_Lmax/floor": R_deep / fl - 1,
               "L0/paper": L0 / p - 1, "L0/floor": L0 / fl - 1}
        good = not fit_problem(f) and all(abs(v) <= 0.05 for v in rel.values())
        ok &= good
        meas[label(a, b)] = {"R_Lmax": R_deep, "L0": f.L0 if f else None, "paper_L0": p, "floor": fl,
                             "fit_status": f.status if f else None}
        parts.append(f"{label(a, b)} R_{int(s.depths[-1])}={_g(R_deep)}, L0={_g(L0)} vs paper {_g(p)}, "
                     f"floor {_g(fl)} (" + ", ".join(f"{k} {100 * v:+.1f}%" for k, v in rel.items())
                     + f") {_verdict(good, f)}")
    return meas, ok, "; ".join(parts)


def c6(res, th):
    spectra = [s for s in FIG56_SPECTRA if s[1] == 0]
    require(res, "nonlinear", "difficult", 2, spectra)
    meas, parts, ok = {}, [], True
    for a, b in spectra:
        s = res.series("nonlinear", "difficult", 2, a, b)
        dC, dG = rel_change_last_two(s, "C"), rel_change_last_two(s, "gap")
        good = dC < 0.1 and dG < 0.1
        ok &= good
        meas[label(a, b)] = {"C": dC, "A_minus_C": dG}
        parts.append(f"{label(a, b)} ΔC/C={_g(dC)}, Δ(A-C)/(A-C)={_g(dG)} {'ok' if good else 'NO'}")
    return meas, ok, "; ".join(parts)


def _spread(s, modes) -> tuple[float, int]:
    red = reducible_modes(s, modes)
    if len(red) < 2:
        return math.nan, len(red)
    M = np.stack(list(red.values()))
    keep = s.depths >= 2
    return float(np.mean(M[:, keep].max(0) - M[:, keep].min(0))), len(red)


def c7(res, th):
    a, b = FIG7_SPECTRUM
    require(res, "nonlinear", "difficult", 2, [FIG7_SPECTRUM])
    require(res, "linear", "difficult", 2, [FIG7_SPECTRUM])
    s_nl = res.series("nonlinear", "difficult", 2, a, b)
    s_li = res.series("linear", "difficult", 2, a, b)
    sn, nn = _spread(s_nl, FIG7_MODES)
    sl, nl = _spread(s_li, FIG7_MODES)
    ok = bool(np.isfinite(sn) and np.isfinite(sl) and sn < sl)
    detail = (f"{label(a, b)}: mean over L>=2 of the range across modes of the normalised reducible "
              f"loss: nonlinear {_g(sn)} ({nn} modes fitted) vs linear {_g(sl)} ({nl} modes fitted)")
    if min(nn, nl) < 2:
        detail += ("; fewer than 2 modes with a well-posed (non-degenerate) fit of R_k,inf"
                   f" over {len(s_nl.depths)} depths: NO")
    return {"nonlinear_spread": sn, "linear_spread": sl}, ok, detail


def c8a(res, th):
    items = [("single_stream", 2), ("layer_values", 2), ("context_updates", 2)]
    for model, k in items:
        require(res, model, "difficult", k, ORIGIN)
    meas, parts, ok = {}, [], True
    for model, k in items:
        _, f = loss_fit(res, model, "difficult", k, 0.0, 0.0)
        good = not fit_problem(f) and 0.6 <= f.alpha <= 1.3
        ok &= good
        meas[model] = f.alpha if f else None
        parts.append(f"{model} α={_g(f.alpha if f else None)}±{_g(f.alpha_se if f else None)} "
                     f"{_verdict(good, f)}")
    return meas, ok, "; ".join(parts)


def c8b(res, th):
    _ks(res, [(16, ORIGIN)])
    require(res, "context_updates", "difficult", 16, ORIGIN)
    s = res.series("context_updates", "difficult", 16, 0.0, 0.0)
    R = dict(zip(s.depths.tolist(), s.get("R")))
    Lmax = int(s.depths[-1])
    ratio = R[2] / R[Lmax] if 2 in R else math.nan
    m = s.get("m")[s.depths >= 2]  # at L = 1 m never reaches the output: it keeps its init
    m_mean = float(np.nanmean(m))
    rel_range = float((np.nanmax(m) - np.nanmin(m)) / abs(m_mean)) if m_mean else math.inf
    ok = bool(ratio <= 1.1 and np.all(m < 0) and rel_range <= 0.2)
    detail = (f"R_2/R_{Lmax}={_g(ratio)}; m over depths >= 2: {', '.join(_g(x) for x in m)} "
              f"(mean {_g(m_mean)}, range/|mean| {_g(rel_range)}; paper m ≈ "
              f"{PAPER['context_updates']['m_top16']})")
    return {"R2_over_RLmax": ratio, "m": m.tolist(), "m_range_over_mean": rel_range}, ok, detail


def c9(res, th):
    _ks(res, [(2, ORIGIN), (16, ORIGIN)])
    meas, parts, ok = {}, [], True
    for k, test, name in ((2, lambda r: r > 0.9, "> 0.9"), (16, lambda r: r < 0.3, "< 0.3")):
        if k not in PRESET_KS[res.preset]:
            raise MissingRuns(f"missing runs (k={k} is not part of the {res.preset} preset)")
        require(res, "context_updates", "difficult", k, ORIGIN)
        s = res.series("context_updates", "difficult", k, 0.0, 0.0)
        rho, r2 = s.get("rho"), s.get("rho_r2")
        good = bool(np.all(np.isfinite(rho)) and all(test(r) for r in rho))
        ok &= good
        meas[f"rho_{k}"] = rho.tolist()
        paper = PAPER["context_updates"][f"rho_top{k}"]
        parts.append(f"ρ_{k} over depths {', '.join(_g(x) for x in rho)} (R² {_g(np.nanmin(r2))}–"
                     f"{_g(np.nanmax(r2))}; paper {paper}) {name}: {'ok' if good else 'NO'}")
    return meas, ok, "; ".join(parts)


def c10(res, th):
    require(res, "nonlinear", "difficult", 2, ORIGIN, "ends")
    sq = selection_quantiles(res)
    if sq is None:
        raise MissingRuns("missing runs: no selection percentiles at L=1 and Lmax")
    upper = sq["q"] >= 50
    dq = sq["dQ"][upper]
    ok = bool(np.all(dq > 0))
    detail = (f"ΔQ(q) = Q_1 - Q_{sq['Lmax']} for q >= 50: " + ", ".join(
        f"q{int(q)}: {_g(v)}" for q, v in zip(sq["q"][upper], dq)) + f"; lowest q: {_g(sq['dQ'][0])}")
    return {f"q{int(q)}": float(v) for q, v in zip(sq["q"], sq["dQ"])}, ok, detail


def c11(res, th):
    require(res, "nonlinear", "difficult", 2, FIG56_SPECTRA)
    meas, parts, ok = {}, [], True
    for a, b in FIG56_SPECTRA:
        f, g, _ = gap_fit(res, a, b)
        good = not fit_problem(f) and not fit_problem(g) and 0.8 <= g.alpha <= 1.2
        ok &= good
        meas[label(a, b)] = g.alpha if g else None
        if g is None:
            why = "loss fit failed" if f is None else f"L0={_g(f.L0)}: fewer than 2 depths with L0 - C_L > 0"
            parts.append(f"{label(a, b)} no fit ({why}) NO")
            continue
        verdict = ("ok" if good else f"NO (L0 from a {fit_problem(f)})" if fit_problem(f)
                   else _verdict(good, g))
        parts.append(f"{label(a, b)} α={_g(g.alpha)}±{_g(g.alpha_se)}, R²={_g(g.r2)}"
                     + (f" ({g.n_dropped} depth(s) with L0 - C_L <= 0 dropped)" if g.n_dropped else "")
                     + f" {verdict}")
    return meas, ok, "; ".join(parts)


# --- beyond the paper: time and width beside depth (`scaling`, docs/beyond.md) ---

def _scaling_depths(res) -> tuple[int, ...]:
    from depthscale.registry import SCALING_DEPTHS

    return tuple(L for L in SCALING_DEPTHS if L <= depth_set(res.preset, "all")[-1])


def cB4a(res, th):
    """Width at fixed depth: every N > d against N = d, |R_N - R_d| <= 2 sqrt(SE_N^2 + SE_d^2)
    (one seed: the evaluation SEs; the runs of one spectrum share their evaluation contexts, so
    this combined SE is conservative for a difference)."""
    from depthscale.analysis import width_series
    from depthscale.config import geometry
    from depthscale.registry import SCALING_SPECTRA, SCALING_WIDTHS

    N0 = geometry(res.preset, "nonlinear")["N"]
    widths = (N0,) + SCALING_WIDTHS
    meas, parts, ok, miss = {}, [], True, []
    for a, b in SCALING_SPECTRA:
        for L in _scaling_depths(res):
            w = width_series(res, "nonlinear", "difficult", 2, a, b, L, widths)
            miss += [f"{label(a, b)} L={L} N={N}" for N in w["missing"]]
            if miss or not len(w["N"]):
                continue
            R0, s0 = w["R"][0], w["R_se"][0]
            z = (w["R"][1:] - R0) / np.sqrt(w["R_se"][1:] ** 2 + s0 ** 2)
            rel = w["R"][1:] / R0 - 1
            good = bool(np.all(np.abs(z) <= 2))
            ok &= good
            meas[f"{label(a, b)} L={L}"] = {"N": w["N"].tolist(), "R": w["R"].tolist(), "R_se": w["R_se"].tolist(),
                                            "z": z.tolist(), "rel_diff": rel.tolist()}
            parts.append(f"{label(a, b)} L={L}: R_{N0}={_g(R0)}±{_g(s0)}; "
                         + ", ".join(f"N={N}: {100 * r:+.1f}% (z={zz:+.1f})" for N, r, zz in zip(w["N"][1:], rel, z))
                         + f" {'ok' if good else 'NO'}")
    if miss:
        more = f" (+{len(miss) - 4} more)" if len(miss) > 4 else ""
        raise MissingRuns(f"missing runs: {len(miss)} cell(s): " + "; ".join(miss[:4]) + more)
    return meas, ok, "; ".join(parts)


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
    meas, parts, ok = {}, [], True
    for (a, b), L, cur, f, _ in _time_fits(res, False):
        good = not fit_problem(f) and f.r2 >= 0.95
        ok &= good
        meas[f"{label(a, b)} L={L}"] = {"beta": f.alpha if f else None, "beta_se": f.alpha_se if f else None,
                                        "R_inf": f.L0 if f else None, "r2": f.r2 if f else None,
                                        "fit_status": f.status if f else None}
        parts.append(f"{label(a, b)} L={L} β={_g(f.alpha if f else None)}±{_g(f.alpha_se if f else None)}, "
                     f"R²={_g(f.r2 if f else None)} {_verdict(good, f)}")
    return meas, ok, "; ".join(parts)


def cB4c(res, th):
    """The time exponent is the run's, not the schedule's: beta over the early window (the cosine
    rate still >= half its peak) agrees with beta over the whole post-warmup window within 2
    combined SE, both fits well posed."""
    meas, parts, ok = {}, [], True
    for (a, b), L, cur, f, e in _time_fits(res, True):
        why = fit_problem(f) or fit_problem(e)
        dz = ((f.alpha - e.alpha) / math.sqrt(f.alpha_se ** 2 + e.alpha_se ** 2)
              if not why and f.alpha_se > 0 and e.alpha_se > 0 else math.nan)
        good = not why and abs(dz) <= 2
        ok &= good
        meas[f"{label(a, b)} L={L}"] = {"beta_full": f.alpha if f else None, "beta_full_se": f.alpha_se if f else None,
                                        "beta_early": e.alpha if e else None, "beta_early_se": e.alpha_se if e else None,
                                        "z": dz}
        parts.append(f"{label(a, b)} L={L} β_all={_g(f.alpha if f else None)}±{_g(f.alpha_se if f else None)} vs "
                     f"β_early={_g(e.alpha if e else None)}±{_g(e.alpha_se if e else None)} "
                     + ("ok" if good else f"NO ({why})" if why else f"NO (z={_g(dz)})"))
    return meas, ok, "; ".join(parts)


def _clustered(res, Ks) -> dict:
    """The clustered experiment's series and fits per K (0 = Haar); MissingRuns for absent cells."""
    from depthscale.analysis import clustered_fit

    out, miss = {}, []
    for K in Ks:
        s, f = clustered_fit(res, K)
        out[K] = (s, f)
        miss += [f"nonlinear/difficult k=2 (1, 0) clusters={K} L={L}" for L in s.missing]
    if miss:
        more = f" (+{len(miss) - 4} more)" if len(miss) > 4 else ""
        raise MissingRuns(f"missing runs: {len(miss)} cell(s): " + "; ".join(miss[:4]) + more)
    return out


def _Kname(K: int) -> str:
    return "K=inf" if K == 0 else f"K={K}"


def cB2a(res, th):
    """Layers specialise: at the deepest L the specialisation index is more than twice its
    permutation null (the index with the class labels shuffled: its sampling-noise level), every K >= 2."""
    from depthscale.registry import CLUSTERED_KS

    Ks = [K for K in CLUSTERED_KS if K >= 2]
    got = _clustered(res, Ks)
    meas, parts, ok = {}, [], True
    for K in Ks:
        s, _ = got[K]
        S, S0 = float(s.get("specialisation")[-1]), float(s.get("specialisation_null")[-1])
        good = bool(np.isfinite(S) and np.isfinite(S0) and S > 2 * S0)
        ok &= good
        meas[_Kname(K)] = {"L": int(s.depths[-1]), "specialisation": S, "null": S0,
                           "class_cv": float(s.get("class_cv")[-1])}
        parts.append(f"{_Kname(K)} L={int(s.depths[-1])}: S={_g(S)} vs null {_g(S0)} "
                     f"(ratio {_g(S / S0 if S0 > 0 else math.nan)}, class CV {_g(meas[_Kname(K)]['class_cv'])}) "
                     f"{'ok' if good else 'NO'}")
    return meas, ok, "; ".join(parts)


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
    return meas, ok, "; ".join(parts)


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
    return meas, ok, "; ".join(parts)


def _transformer_series(res):
    from depthscale.registry import transformer_depths

    depths = transformer_depths(res.preset)
    require(res, "transformer", "difficult", 2, ORIGIN, depths)
    return res.series("transformer", "difficult", 2, 0.0, 0.0, depths)


def cB3a(res, th):
    """The identity on the stored numbers (R = C + (A - C)/L, R = A at L = 1) to 1e-9 relative, and
    the model's own loss (its readout's prediction) against the hooks' decomposition to 1e-5
    relative (a float32 forward; `identity_residual`)."""
    s = _transformer_series(res)
    meas, parts, ok = {}, [], True
    for j, L in enumerate(s.depths.tolist()):
        R, A, C, resid = (float(s.get(m)[j]) for m in ("R", "A", "C", "identity_residual"))
        stored = R - (C + (A - C) / L) if L > 1 else R - A
        good = abs(stored) <= 1e-9 * abs(R) and abs(resid) <= 1e-5 * abs(R)
        ok &= good
        meas[f"L={L}"] = {"stored_residual": stored, "model_residual": resid, "R": R}
        parts.append(f"L={L}: R={_g(R)}, stored {stored:.1e}, own prediction {resid:.1e} {'ok' if good else 'NO'}")
    return meas, ok, "; ".join(parts)


def cB3b(res, th):
    """Claim 6's test on the Transformer: A_L - C_L positive and its relative change over the
    last two depths (Lmax/2, Lmax) < 10%."""
    s = _transformer_series(res)
    G = dict(zip(s.depths.tolist(), s.get("gap")))
    dG = rel_change_last_two(s, "gap")
    Ls = [L for L in s.depths.tolist() if L > 1]
    good = all(G[L] > 0 for L in Ls) and dG < 0.1
    detail = ("A-C " + ", ".join(f"L={L}: {_g(G[L])}" for L in Ls)
              + f"; Δ(A-C)/(A-C) over L={Ls[-2]}→{Ls[-1]}: {_g(dG)} "
              + ("(grows)" if G[Ls[-1]] > G[Ls[-2]] else "(falls)") + f" {'ok' if good else 'NO'}")
    return {"A_minus_C": {f"L={L}": G[L] for L in Ls}, "rel_change": dG}, good, detail


def cB3c(res, th):
    """The ensemble's floor: C_L > 0 at every L >= 2 and, at Lmax, the shared error C_L is at least
    half the loss (R_L = C_L + (A_L - C_L)/L: in the controlled model C_L rises to near R_L)."""
    s = _transformer_series(res)
    C, R = dict(zip(s.depths.tolist(), s.get("C"))), dict(zip(s.depths.tolist(), s.get("R")))
    Ls = [L for L in s.depths.tolist() if L > 1]
    Lmax = Ls[-1]
    frac = C[Lmax] / R[Lmax]
    good = all(C[L] > 0 for L in Ls) and frac >= 0.5
    detail = ("C " + ", ".join(f"L={L}: {_g(C[L])}" for L in Ls)
              + f"; C/R at L={Lmax}: {_g(frac)} {'ok' if good else 'NO'}")
    return {"C": {f"L={L}": C[L] for L in Ls}, "C_over_R_Lmax": frac}, good, detail


def cB3d(res, th):
    """Depth lowers the Transformer's loss: R_Lmax < R_1 - 2 sqrt(SE_1^2 + SE_Lmax^2)."""
    s = _transformer_series(res)
    R, se = s.get("R"), s.get("R_se")
    gap = float(R[0] - R[-1])
    tol = 2 * math.sqrt(float(se[0]) ** 2 + float(se[-1]) ** 2)
    good = int(s.depths[0]) == 1 and gap > tol
    detail = (f"R_1={_g(R[0])}±{_g(se[0])}, R_{int(s.depths[-1])}={_g(R[-1])}±{_g(se[-1])}; gain {_g(gap)} "
              f"vs 2 SE {_g(tol)} {'ok' if good else 'NO'}")
    return {"R_1": float(R[0]), "R_Lmax": float(R[-1]), "gain": gap, "two_se": tol}, good, detail

# id, claim, expected, check, experiments whose runs it uses
CLAIMS: tuple[tuple[str, str, str, Callable, tuple[str, ...]], ...] = (
    ("1", "Linear, easy: power law in L with zeta <= alpha <= 2 zeta",
     "L0=0 fit α between the fitted slopes of the finite-size constrained and free references at the same "
     "d, P and depths (±2 SE), every fig3 spectrum (ζ, 2ζ and the paper's α shown beside)", c1, ("fig3", "table2")),
    ("2", "Linear, easy: modes are learned in order",
     "depth where R_k/(ω_k λ_k) < 2% non-decreasing in k, every fig3 spectrum", c2, ("fig3",)),
    ("3", "Nonlinear, easy: one layer suffices",
     "R_1 < 1% Var(y*), depth gain <= 1% Var(y*), top-1 mass > 0.95, every fig4 spectrum", c3, ("fig4",)),
    ("4a", "Linear, difficult: plateau by L = 2",
     "R_2 <= 1.1 R_Lmax, every fig5 spectrum", c4a, ("fig5", "table1")),
    ("4b", "Linear, difficult: plateau at the theory floor R_irr",
     "within 5% of R_irr (built on Σ) or of the finite-P floor (the same construction with the empirical "
     "S), both at the runs' d and P, every table3 row; the nearer one is named", c4b, ("table3",)),
    ("5a", "Nonlinear, difficult: inverse-depth scaling",
     "α in [0.8, 1.2] and R² >= 0.99, every top-2 spectrum (fig6, fig14)", c5a, ("fig6", "fig14", "table1")),
    ("5b", "Nonlinear floor well below the linear one at the same d and P",
     "L0_nonlinear <= R_irr / 2 with R_irr at the nonlinear d, P, every fig5/6 spectrum", c5b, ("table1",)),
    ("5c", "The nonlinear floor at the paper's geometry",
     "R_Lmax and fitted L0 each within 5% of the paper's L0 and of the softmax-ensemble floor, "
     "every top-2 spectrum", c5c, ("fig6", "fig14", "table6")),
    ("6", "C_L and A_L - C_L settle",
     "relative change over the last two depths < 10%, fig6 b=0 spectra", c6, ("fig6",)),
    ("7", "Nonlinear modes learn in parallel",
     "spread of normalised reducible curves: nonlinear < linear", c7, ("fig7",)),
    ("8a", "Variants keep an inverse-depth signal",
     "α in [0.6, 1.3] for single_stream, layer_values, context_updates (k=2)", c8a, ("fig9", "fig10", "fig11")),
    ("8b", "Context updates, k=16: saturates, m nearly constant and negative",
     "R_2 <= 1.1 R_Lmax; m < 0 at every depth, range <= 20% |mean|", c8b, ("fig11",)),
    ("9", "Context attention: identity-like for k=2, flat for k=16",
     "ρ_2 > 0.9 and ρ_16 < 0.3 at every depth", c9, ("fig12",)),
    ("10", "Depth improves selection in the upper tail",
     "ΔQ(q) > 0 for q >= 50", c10, ("fig13",)),
    ("11", "Table 5: L0 - C_L decays like 1/L",
     "α in [0.8, 1.2], every fig6 spectrum", c11, ("table5",)),
    ("B2a", "Clustered contexts: layers specialise in context classes (App. D.2's hypothesis)",
     "specialisation index S at the deepest L > 2x its permutation null (the index with shuffled "
     "class labels), every K in {2, 4, 8}", cB2a, ("clustered",)),
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
    ("B3a", "Beyond: R_L = C_L + (A_L - C_L)/L holds in a pre-LN Transformer",
     "stored R, A, C satisfy it to 1e-9 relative at every depth (R = A at L = 1), and the model's own loss "
     "(its readout) equals the hooks' decomposition to 1e-5 relative (float32)", cB3a, ("transformer",)),
    ("B3b", "Beyond: the Transformer's A_L - C_L settles (claim 6's test)",
     "A_L - C_L > 0 at every L >= 2 and relative change over the last two depths (4 -> 8) < 10%", cB3b,
     ("transformer",)),
    ("B3c", "Beyond: the Transformer's loss at depth is the shared error C_L (an ensemble's floor)",
     "C_L > 0 at every L >= 2 and C_Lmax >= R_Lmax / 2", cB3c, ("transformer",)),
    ("B3d", "Beyond: depth lowers the Transformer's loss",
     "R_Lmax < R_1 - 2 sqrt(SE_1^2 + SE_Lmax^2) (evaluation SEs, one seed)", cB3d, ("transformer",)),
)


# ---- looped stacks (beyond the paper; looped.py, docs/beyond.md). Conditions fixed before the cpu
# runs were looked at. One seed: a difference is judged against 2 sqrt(SE_1^2 + SE_2^2) of the
# evaluation SEs (the runs share their evaluation contexts, so this is conservative).

def _looped_cells(res, model: str, B: int) -> dict:
    """{L: row} of one tying's curve (looped.curve), MissingRuns naming any cell without a run."""
    from depthscale import looped as lp

    miss = [m for m in lp.missing(res) if m.startswith(model + " ")]
    if miss:
        more = f" (+{len(miss) - 4} more)" if len(miss) > 4 else ""
        raise MissingRuns(f"missing runs: {len(miss)} cell(s): " + "; ".join(miss[:4]) + more)
    return {r["L"]: r for r in lp.curve(res, model, B)}


def _z(r1: dict, r2: dict) -> float:
    """(R_1 - R_2) in units of the combined evaluation SE."""
    return (r1["R"] - r2["R"]) / math.sqrt(r1["R_se"] ** 2 + r2["R_se"] ** 2)


def cB1a(res, th):
    """One tied layer repeated L times in the controlled nonlinear model is one head: A_L = C_L and
    R_L = R_1 (same init, same rate, same data: training.base_lr), to float tolerance (1e-6 relative)."""
    one = _looped_cells(res, "nonlinear", 0)
    tied = _looped_cells(res, "nonlinear", 1)
    deep = [L for L in tied if L > 1]
    if 1 not in one or not deep:
        raise MissingRuns("missing runs: nonlinear L=1 or the looped nonlinear run")
    r1, parts, ok, meas = one[1], [], True, {}
    for L in deep:
        r = tied[L]
        dAC = abs(r["A"] - r["C"]) / abs(r["A"])
        dR = abs(r["R"] - r1["R"]) / abs(r1["R"])
        good = dAC <= 1e-6 and dR <= 1e-6
        ok &= good
        meas[f"L={L}"] = {"A": r["A"], "C": r["C"], "R": r["R"], "R_1": r1["R"], "rel_A_minus_C": dAC, "rel_R_diff": dR}
        parts.append(f"B=1, L={L}: A={_g(r['A'])}, C={_g(r['C'])} (|A-C|/A={dAC:.1e}); R={_g(r['R'])} vs "
                     f"R_1={_g(r1['R'])} (rel. diff {dR:.1e}) {'ok' if good else 'NO'}")
    return meas, ok, "; ".join(parts)


def _cascaded_items(res):
    from depthscale.registry import LOOPED_MODELS

    for model in LOOPED_MODELS:
        untied = _looped_cells(res, model, 0)
        tied = _looped_cells(res, model, 1)
        yield model, untied, tied


def cB1b(res, th):
    """Depth pays with one tied layer: R_Lmax(B = 1) < R_1 beyond 2 combined SE, both cascaded models."""
    meas, parts, ok = {}, [], True
    for model, untied, tied in _cascaded_items(res):
        L = max(tied)
        z = _z(untied[1], tied[L])
        good = z > 2
        ok &= good
        meas[model] = {"L": L, "R_1": untied[1]["R"], "R_L_tied": tied[L]["R"], "z": z}
        parts.append(f"{model}: R_1={_g(untied[1]['R'])}, R_{L}(B=1)={_g(tied[L]['R'])} "
                     f"(gain {_g(untied[1]['R'] - tied[L]['R'])}, z={z:+.1f}) {'ok' if good else 'NO'}")
    return meas, ok, "; ".join(parts)


def cB1c(res, th):
    """Aggregation survives tying: at the deepest tied depth the B = 1 model keeps at least half of the
    untied model's layer disagreement A_L - C_L (the term that averaging over layers removes), both models."""
    meas, parts, ok = {}, [], True
    for model, untied, tied in _cascaded_items(res):
        L = max(tied)
        if L not in untied:
            raise MissingRuns(f"missing runs: {model} untied L={L}")
        gu, gt = untied[L]["A_minus_C"], tied[L]["A_minus_C"]
        ratio = gt / gu if gu > 0 else math.nan
        good = bool(gu > 0 and ratio >= 0.5)
        ok &= good
        meas[model] = {"L": L, "gap_untied": gu, "gap_tied": gt, "ratio": ratio,
                       "A_tied": tied[L]["A"], "C_tied": tied[L]["C"], "A_untied": untied[L]["A"], "C_untied": untied[L]["C"]}
        parts.append(f"{model} L={L}: A-C tied {_g(gt)} vs untied {_g(gu)} (ratio {_g(ratio)}) {'ok' if good else 'NO'}")
    return meas, ok, "; ".join(parts)


def cB1d(res, th):
    """At equal parameters looping wins: every looped B at its deepest depth beats the untied
    B-layer model (the same parameter count) beyond 2 combined SE, both cascaded models."""
    from depthscale import looped as lp

    meas, parts, ok = {}, [], True
    for model in lp.LOOPED_MODELS:
        untied = _looped_cells(res, model, 0)
        for B in lp.LOOPED_B:
            tied = {L: r for L, r in _looped_cells(res, model, B).items() if L != B}
            if not tied or B not in untied:
                continue  # (a tying with no looped depth at this preset)
            L = max(tied)
            z = _z(untied[B], tied[L])
            good = z > 2
            ok &= good
            meas[f"{model} B={B}"] = {"L": L, "R_B_untied": untied[B]["R"], "R_L_looped": tied[L]["R"], "z": z}
            parts.append(f"{model} B={B}: R_{B}(untied)={_g(untied[B]['R'])} -> R_{L}(looped)={_g(tied[L]['R'])} "
                         f"(z={z:+.1f}) {'ok' if good else 'NO'}")
    if not meas:
        raise MissingRuns("missing runs: no looped depth at this preset")
    return meas, ok, "; ".join(parts)


CLAIMS += (
    ("B1a", "Beyond: one tied layer repeated L times in the nonlinear model is one head",
     "B = 1 at L = 4: |A_L - C_L| <= 1e-6 A_L and |R_L - R_1| <= 1e-6 R_1 (float tolerance; A_L = C_L by "
     "construction, and the looped model trains as the L = 1 model)", cB1a, ("looped",)),
    ("B1b", "Beyond: with one tied layer, depth still buys loss (single_stream, context_updates)",
     "R_Lmax(B = 1) < R_1 by more than 2 combined evaluation SE, Lmax the deepest tied depth (8 at cpu), "
     "both cascaded variants, (0,0), k = 2", cB1b, ("looped",)),
    ("B1c", "Beyond: aggregation survives looping (layer disagreement A_L - C_L is kept)",
     "(A_L - C_L) of the B = 1 model >= 0.5 x that of the untied model at the same deepest depth, both "
     "cascaded variants", cB1c, ("looped",)),
    ("B1d", "Beyond: at equal parameters, looping a B-layer stack deeper beats the B-layer stack",
     "R_L(loop B) < R_B(untied) by more than 2 combined evaluation SE at the deepest looped L of every "
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
    except MissingRuns as e:
        measured, ok, detail = None, False, str(e)
    except Exception as e:  # noqa: BLE001 - a broken check is a FAIL with its reason, never a PASS
        measured, ok, detail = None, False, f"error while checking: {type(e).__name__}: {e}"
    out.update(measured=plain(measured), detail=detail)
    out["pass"] = bool(ok)
    return out


def check_all(res: Results, th: Theory, ids: str | Iterable[str] | None = "all") -> list[dict]:
    """Every claim that uses one of the experiments `ids`, in SPEC §9 order."""
    wanted = set(resolve_ids(ids))
    return [check(cid, res, th) for cid, _, _, _, uses in CLAIMS if wanted & set(uses)]


__all__ = ["CLAIMS", "check", "check_all", "require", "MissingRuns", "fit_problem"]
