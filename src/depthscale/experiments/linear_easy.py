"""Linear attention on the easy task (SPEC §7): fig3 (power laws in depth, the finite-size
reference curves, the mode-wise loss) and table2 (ζ ≤ α ≤ 2ζ), with claims 1 and 2.

Operational choices:
- 1: L0 = 0 fit over the preset's depths; PASS per fig3 spectrum iff the fit is well posed, R² >= 0.98
  and alpha in [min(ref) - 2 SE(alpha), max(ref) + 2 SE(alpha)], ref the L0 = 0 slopes fitted to
  the finite-size constrained (best shared GD step) and free (best polynomial) reference curves at the
  runs' d, P and depths (analysis.reference_slopes).
- 2: judged on the modes Fig. 3c shows (paper.FIG3C_MODES at FIG3C_SPECTRUM, modes <= d): the
  first depth where R_k/(omega_k lambda_k) < 2% (a mode never below counts as beyond the deepest
  depth, "never"); non-decreasing in k and not all equal. The other fig3 spectra are shown beside,
  not judged.
"""

from __future__ import annotations

import math

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.claims import (MissingRuns, combine, fit_problem, fitted, gate, gated, judged, num, outcome, problems,
                                        require, shape_verdict, yes)
from depthscale.analysis.curves import MODE_FLOOR, loss_fit, mode_crossings, normalised_modes, reference_slopes
from depthscale.analysis.results import Results, Theory
from depthscale.base.formatting import fit_status, label
from depthscale.config.paper import FIG3_SPECTRA, FIG3C_MODES, FIG3C_SPECTRUM, PAPER
from depthscale.config.records import Claim, Experiment, RunGroup, TheoryNeed, preset_shape, register
from depthscale.theory.linear import two_zeta, zeta

R2_1 = 0.98  # claim 1's R² threshold (SPEC §9): a fit below it is drawn dashed

G3 = RunGroup("linear", "easy", 1, FIG3_SPECTRA)


def fig3(res: Results, th: Theory):
    fig, ax = pl.new_figure(3)
    for i, (sel, name) in enumerate(((lambda s: s[0] == 2.0, "$a=2$, $b$ varies"),
                                     (lambda s: s[1] == 2.0, "$b=2$, $a$ varies"))):
        spectra = sorted(s for s in FIG3_SPECTRA if sel(s))  # legend in spectrum order
        theory = []
        for (a, b), col in zip(spectra, pl.colors(len(spectra))):  # finite-size reference curves, same colour
            c = th.curves(a, b)  # at this d and P: what claim 1 judges the measured slope against
            for key, ls in (("finite_P_constrained", ":"), ("finite_P", "--")):
                ref = c.get(key)
                if ref:
                    y = np.asarray(ref["in_sample"], float)
                    ok = y > 0
                    ax[i].plot(np.asarray(ref["depths"], float)[ok], y[ok], ls=ls, color=col, lw=0.9, alpha=0.8)
                    theory += y[ok].tolist()
        pl.loss_panel(ax[i], res, "linear", "easy", pl.pairs(1, spectra), fit=True, r2_min=R2_1)
        data = [res.series("linear", "easy", 1, a, b).get("R") for a, b in spectra]
        data = np.concatenate([x for x in data if len(x)] or [np.zeros(0)])
        data = data[np.isfinite(data) & (data > 0)]
        if data.size:  # theory curves may fall far below the data: at most 30x beyond it
            th_in = [t for t in theory if data.min() / 30 <= t <= data.max() * 30]
            pl.bound_y(ax[i], list(data) + th_in, log=True)
        pl.panel_title(ax[i], "ab"[i], f"linear, easy, {name}")
    # one key for the line styles, below the panels; the colour of a spectrum is the same for its
    # data, its fit and its two theory curves (panel legends)
    from matplotlib.lines import Line2D

    key = [Line2D([], [], color="0.3", marker="o", ls="none", ms=4, label="trained (seed mean)"),
           Line2D([], [], color="0.3", ls="-", lw=0.9, label=r"fit $c\,L^{-\alpha}$"),
           Line2D([], [], color="0.3", ls="--", lw=0.9, label="theory: best polynomial in $S$ (free)"),
           Line2D([], [], color="0.3", ls=":", lw=0.9, label="theory: best shared GD step (constrained)")]
    fig.legend(handles=key, loc="outside lower center", ncol=4, frameon=False, fontsize=pl.LEGEND_PT,
               title="line style (the colour of a spectrum is shared by its data, fit and theory)",
               title_fontsize=pl.LEGEND_PT)
    a, b = FIG3C_SPECTRUM
    s = res.series("linear", "easy", 1, a, b)
    d = preset_shape(res.preset, "linear")[0]
    norm = normalised_modes(s, FIG3C_MODES, d, a, b)
    for (m, v), col in zip(norm.items(), pl.colors(len(norm))):
        ok = np.isfinite(v) & (v > 0)
        ax[2].plot(s.depths[ok], v[ok], "o-", color=col, ms=4, lw=1.1, label=f"$k={m}$")
    ax[2].axhline(MODE_FLOOR, color="k", ls="--", lw=0.8, label="2% (learned)")
    pl.loglog(ax[2], ylabel=r"$R_k\,/\,(\omega_k \lambda_k)$")
    if not norm:
        pl.missing(ax[2])
    pl.finish_legend(ax[2], len(norm) + 1, "mode")
    pl.panel_title(ax[2], "c", f"normalised mode-wise loss {label(a, b)}")
    return fig


def table2(res: Results, th: Theory):
    import pandas as pd

    paper = {(float(r["a"]), float(r["b"])): r for r in PAPER["table2_linear_easy"]}
    rows = []
    for a, b in FIG3_SPECTRA:
        s, f = loss_fit(res, "linear", "easy", 1, a, b)
        z = zeta(a, b)
        ref = reference_slopes(th, a, b, [int(L) for L in s.depths]) if s else {"constrained": math.nan,
                                                                                "free": math.nan}
        rows.append({"a": a, "b": b, "zeta": z, "alpha": f.alpha if f else math.nan,
                     "alpha_se": f.alpha_se if f else math.nan, "r2": f.r2 if f else math.nan,
                     "fit": fit_status(f), "two_zeta": two_zeta(a, b), "alpha_constrained_finite": ref["constrained"],
                     "alpha_free_finite": ref["free"], "paper_alpha": paper[(a, b)]["alpha"]})
    return pd.DataFrame(rows)


def c1(res, th):
    """ζ and 2ζ are asymptotes (1 << L << sqrt(λ1/λd)); at the trained d, P and depths the measured
    slope is judged against the slopes of the finite-size references fitted over the same depths."""
    require(res, "linear", "easy", 1, FIG3_SPECTRA)
    paper = {(float(r["a"]), float(r["b"])): r["alpha"] for r in PAPER["table2_linear_easy"]}
    meas, parts, verdicts = {}, [], []
    for a, b in FIG3_SPECTRA:
        s, f = loss_fit(res, "linear", "easy", 1, a, b)
        ref = reference_slopes(th, a, b, [int(L) for L in s.depths])
        lo, hi = min(ref["constrained"], ref["free"]), max(ref["constrained"], ref["free"])
        se = f.alpha_se if f is not None else math.nan
        r2_ok = f is not None and f.r2 >= R2_1
        in_range = (f is not None and math.isfinite(se) and math.isfinite(lo) and math.isfinite(hi)
                    and lo - 2 * se <= f.alpha <= hi + 2 * se)
        good = bool(not fit_problem(f) and r2_ok and in_range)
        cert, problem = gate(res, [("linear", "easy", 1, a, b, None)])
        if not (math.isfinite(lo) and math.isfinite(hi)):  # nothing to judge α against: not a NO
            problem = problems(problem, "no finite-size reference slope (the theory's curves not computed, or their "
                                        "fit not well posed)")
        v, why = shape_verdict(good, problem, None, (f,), s)
        verdicts.append(v)
        meas[label(a, b)] = {"verdict": v, "certificates": cert, "alpha": f.alpha if f else None, "alpha_se": se, "r2": f.r2 if f else None,
                             "alpha_constrained_finite": ref["constrained"], "alpha_free_finite": ref["free"],
                             "zeta": zeta(a, b), "two_zeta": two_zeta(a, b), "paper_alpha": paper[(a, b)],
                             "fit_status": f.status if f else None}
        parts.append(f"{label(a, b)} {fitted(f)} (R² {yes(r2_ok)}); α in [{num(lo)} - 2 SE, {num(hi)} + 2 SE] "
                     f"= [{num(lo - 2 * se)}, {num(hi + 2 * se)}] {yes(in_range)} (asymptotic ζ={num(zeta(a, b))}, "
                     f"2ζ={num(two_zeta(a, b))}, paper α={num(paper[(a, b)])}) → {outcome(v, why, good, f)}")
    return meas, combine(verdicts), judged(
        "L0 = 0 fit well posed, R² >= 0.98, α within [min, max] of the fitted slopes of the finite-size constrained "
        "and free references (same d, P, depths) ± 2 SE(α); a degenerate fit INCONCLUSIVE (FAIL where R_1 - R_Lmax "
        "is within 2 SE); an item reading a depth that fails a certificate (SPEC §4) INCONCLUSIVE", parts)


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
    cert, problem = gate(res, [("linear", "easy", 1, a, b, None)])
    meas = {f"mode {m}": (None if math.isinf(x) else x) for m, x in zip(modes, v)}
    meas["certificates"] = cert
    parts = [f"{label(a, b)} modes {modes}: L* = {text(v)}"
             + (f" ('never' = not below 2% up to L={Lmax}: counted as beyond the deepest depth)" if never else "")
             + f"; non-decreasing {yes(ordered)}, increases at least once {yes(rises)} → "
             + outcome(gated(ok, problem), problem, ok)]
    beside = []
    for a2, b2 in FIG3_SPECTRA:
        if (a2, b2) == (a, b):
            continue
        s2, v2 = crossings(a2, b2)
        if s2 and all(x is not None for x in v2):
            beside.append(f"{label(a2, b2)} {text(v2)}")
    if beside:
        parts.append("beside, not judged (other fig3 spectra): " + ", ".join(beside))
    return meas, gated(ok, problem), judged(
        f"L* = first depth with R_k/(ω_k λ_k) < 2%, at Fig. 3c's {label(a, b)} and modes {modes}: never decreasing in "
        "k and increasing at least once; depths failing a certificate (SPEC §4): INCONCLUSIVE", parts)


CLAIMS = (
    Claim("1", "Linear, easy: a power law in L with α between the finite-size references",
          "power law in L (L0 = 0 fit) with R² >= 0.98 and α between the fitted slopes of the constrained and the free "
          "reference curves at the same d, P and depths (±2 SE), every fig3 spectrum; the asymptotic ζ, 2ζ and the "
          "paper's α shown beside", c1, ("fig3", "table2"), part="paper"),
    Claim("2", "Linear, easy: modes are learned in order",
          "the depth at which a mode's normalised loss R_k/(ω_k λ_k) first falls below 2% never decreases with the "
          "mode index and increases at least once over the modes shown (Fig. 3c); a mode never learned counts as "
          "beyond the deepest depth", c2, ("fig3",), part="paper"),
)

FIG3 = register(Experiment(
    "fig3", "Linear attention, easy task: power laws in depth",
    ("linear",), "easy", (), "a=2: b in {0.5,1,1.5,2}; b=2: a in {0.5,1,1.5,2}",
    "loss vs L with power-law fits and the finite-size references at the same d, P (best shared "
    "GD step, best polynomial in the empirical S); "
    "(c) normalised mode-wise loss for a few modes, floor 2%", (G3,),
    tuple(TheoryNeed("curves", a, b) for a, b in FIG3_SPECTRA), figure=fig3, claims=CLAIMS))
TABLE2 = register(Experiment(
    "table2", "Linear, easy task: zeta <= alpha <= 2 zeta", ("linear",), "easy", (),
    "fig3 spectra", "zeta, measured alpha, 2 zeta, the finite-size reference slopes",
    (G3,), reuses=("fig3",), table=table2))
