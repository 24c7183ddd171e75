"""Mode-wise loss of nonlinear attention on the difficult task (SPEC §7): fig7 (modes learn in
parallel), with claim 7.

Operational choices:
- 7: spread = mean over L >= 2 of (max - min over modes) of the normalised reducible curves
  (R_k(L) - R_k,inf)/(R_k(1) - R_k,inf). Nonlinear: fig7's spectrum and modes, R_k,inf from
  well-posed per-mode fits (analysis.reducible_modes). Linear: the easy task at Fig. 3c's spectrum
  and modes, R_k,inf = 0 (the easy task's L0 = 0, SPEC §6.1). PASS iff nonlinear spread < linear
  spread, every mode shown having its curve (issue 33: a mode is never silently dropped). A mode
  with no curve for any reason but a degenerate R_k,inf fit makes the claim FAIL naming it. A
  nonlinear mode whose fit is degenerate follows SPEC §9: FAIL where its depth effect R_k(1) -
  R_k(Lmax) is within 2 SE (SE over seeds; unknown counts as present, as claims.depth_effect), FAIL
  too where the comparison already fails on the modes with a curve (a mode added can only widen
  max - min), else INCONCLUSIVE with the reason and what would make the fit possible.
- fig7 uses (a, b) = (1, 0), a fig6 spectrum with a > 0, and draws beside it the comparison claim 7
  judges: the linear model on the easy task at Fig. 3c's spectrum (fig3's runs), R_k,inf = 0.
"""

from __future__ import annotations

import math

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.claims import (FAIL, INCONCLUSIVE, PASS, beyond_2se, degenerate_why, gate, gated, judged, num,
                                        outcome, require, yes)
from depthscale.analysis.curves import mode_curves, reducible_modes, reducible_modes_judged
from depthscale.analysis.results import Results, Series, Theory
from depthscale.base.formatting import label
from depthscale.config.paper import FIG3C_MODES, FIG3C_SPECTRUM, FIG7_MODES, FIG7_SPECTRUM
from depthscale.config.records import Claim, Experiment, RunGroup, preset_shape, register


def reducible_se(s: Series, red: dict, modes) -> dict:
    """The SE over seeds of each normalised reducible curve `red` {mode: curve}: the SE of R_k(L)
    over the same denominator (R_k(1) - R_k,inf, recovered from the curve; its own uncertainty
    left out). Empty where the series has one seed."""
    arrs = s.arrays.get("mode_R", [])
    if not arrs or any(x is None for x in arrs):
        return {}
    raw = mode_curves(s, modes)
    se = np.stack([np.asarray(x[1], float) for x in arrs])
    out = {}
    for m, v in red.items():
        j = int(np.nanargmax(np.abs(1.0 - v)))  # red = (R - R_inf) / den, red[0] = 1: den from two depths
        den = (raw[m][0] - raw[m][j]) / (v[0] - v[j]) if v[0] != v[j] else math.nan
        out[m] = se[:, m - 1] / abs(den) if math.isfinite(den) and den != 0 else np.full(len(v), np.nan)
    return out


def reducible_panel(ax, s: Series, modes, floor: bool) -> None:
    """The normalised reducible curves of `s` (R_k,inf fitted, or 0 without `floor`) with their
    SE over seeds; an ill-normalised mode dashed and named."""
    red = reducible_modes(s, modes, floor)
    se = reducible_se(s, red, modes)
    odd = []
    for i, ((m, v), col) in enumerate(zip(red.items(), pl.colors(len(red)))):
        bad = ill_normalised(v)
        odd += [f"k={m} (range {np.nanmin(v):.2g} to {np.nanmax(v):.2g})"] if bad else []
        pl.errorbar(ax, s.depths, v, se.get(m), marker=pl.MARKERS[i % len(pl.MARKERS)], color=col,
                    ls="--" if bad else "-", alpha=0.6 if bad else 1.0,
                    label=f"$k={m}$" + (" (ill-normalised)" if bad else ""))
    if odd:
        pl.note(ax, "dashed: a mode that barely improves with depth, so R_k(1) - R_k,inf is near 0 and its "
                    "normalised curve leaves [-0.5, 1.5] (SPEC §5's normalisation, not the model): " + ", ".join(odd))
    if red and not any(np.isfinite(v).any() for v in se.values()):  # one seed: the SE over seeds is NaN
        pl.note(ax, "one seed per depth: no error bars")
    elif red:
        pl.note(ax, "error bars: the SE over seeds of R_k(L), divided by the same denominator (whose own uncertainty is left out)")
    pl.logx(ax)
    ax.set_ylabel(r"$(R_k(L) - R_{k,\infty})\,/\,(R_k(1) - R_{k,\infty})$")
    ax.axhline(0, color="0.6", lw=0.6)
    if not red:
        pl.missing(ax, "missing runs, or no well-posed fit of $R_{k,\\infty}$\n"
                   "(degenerate: too few depths, or $R_{k,\\infty}$ on its bound 0)")
    pl.finish_legend(ax, len(red), "mode")


def fig7(res: Results, th: Theory):
    """(a) the nonlinear model's raw mode-wise loss; (b) its normalised reducible curves; (c) those of
    the linear model on the easy task at Fig. 3c's spectrum (R_k,inf = 0): claim 7's comparison."""
    fig, ax = pl.new_figure(3)
    a, b = FIG7_SPECTRUM
    a3, b3 = FIG3C_SPECTRUM
    s_nl = res.series("nonlinear", "difficult", 2, a, b)
    s_li = res.series("linear", "easy", 1, a3, b3)
    raw = mode_curves(s_nl, FIG7_MODES)
    for (m, v), col in zip(raw.items(), pl.colors(len(raw))):
        ok = np.isfinite(v) & (v > 0)
        ax[0].plot(s_nl.depths[ok], v[ok], "o-", color=col, ms=4, lw=1.1, label=f"$k={m}$")
    pl.loglog(ax[0], ylabel="$R_k$")
    pl.panel_title(ax[0], "a", f"nonlinear: mode-wise loss {label(a, b)}")
    if not raw:
        pl.missing(ax[0])
    pl.finish_legend(ax[0], len(raw), "mode")
    d = preset_shape(res.preset, "linear")[0]
    reducible_panel(ax[1], s_nl, FIG7_MODES, True)
    pl.panel_title(ax[1], "b", f"nonlinear, difficult {label(a, b)}: normalised")
    reducible_panel(ax[2], s_li, [m for m in FIG3C_MODES if m <= d], False)
    pl.panel_title(ax[2], "c", f"linear, easy {label(a3, b3)} (Fig. 3c): normalised")
    sn, sl = _spread(s_nl, FIG7_MODES, True)[0], _spread(s_li, [m for m in FIG3C_MODES if m <= d], False)[0]
    told = [f"{num(x)} in ({p})" if math.isfinite(x) else f"none in ({p}) (fewer than 2 modes with a curve)"
            for x, p in ((sn, "b"), (sl, "c"))]
    pl.note(fig, f"claim 7 compares (b) with (c): the spread across modes (mean over L >= 2 of max - min) is "
                 f"{told[0]} and {told[1]}; (c) has R_k,inf = 0 (the easy task's loss fit has L0 = 0)")
    return fig


def ill_normalised(curve, lo: float = -0.5, hi: float = 1.5) -> bool:
    """Whether a normalised reducible curve (R_k(L) - R_k,inf)/(R_k(1) - R_k,inf), which runs from 1
    at L = 1 towards 0, leaves [lo, hi]: its denominator is near 0 (the mode barely improves), so
    its shape is the normalisation's (fig7 (b) at the cpu preset reached -5 at L = 8)."""
    v = np.asarray(curve, float)
    v = v[np.isfinite(v)]
    return bool(v.size and (v.min() < lo or v.max() > hi))


def _spread(s: Series, modes, floor: bool) -> tuple[float, list[int], dict]:
    """(spread, the modes with a curve, {mode: why it has none})."""
    red, why = reducible_modes_judged(s, modes, floor=floor)
    if len(red) < 2:
        return math.nan, sorted(red), why
    M = np.stack(list(red.values()))
    keep = s.depths >= 2
    return float(np.mean(M[:, keep].max(0) - M[:, keep].min(0))), sorted(red), why


def mode_depth_effect(s: Series, m: int) -> tuple[bool, str]:
    """`claims.depth_effect` for mode m (1-based) of the series' mode-wise loss: (whether depth
    changes R_m: R_m(1) - R_m(Lmax) beyond 2 SE, the SEs over seeds of the two points combined;
    unknown SE counts as present, the text 'R_8(1) - R_8(64) = 0.5±0.01')."""
    arrs = s.arrays.get("mode_R", []) if s is not None else []
    if len(arrs) < 2 or any(x is None or len(x[0]) < m for x in (arrs[0], arrs[-1])):
        return True, f"depth effect of mode {m} unknown (no mode-wise loss at 2 depths)"
    (r1, se1), (rM, seM) = arrs[0], arrs[-1]
    diff = float(r1[m - 1] - rM[m - 1])
    se = math.hypot(float(se1[m - 1]), float(seM[m - 1]))
    text = f"R_{m}({int(s.depths[0])}) - R_{m}({int(s.depths[-1])}) = {num(diff)}±{num(se)}"
    return beyond_2se(diff, se), text


def degenerate_modes(s: Series, why: dict) -> dict[str, tuple[bool, str]]:
    """`claims.degenerate` for the nonlinear modes whose R_k,inf fit is degenerate (`why` from
    `reducible_modes_judged`): {'nonlinear mode m': (depth effect present, the reason with the depth
    effect and, where present, what would make the fit possible)}."""
    out = {}
    for m, w in why.items():
        if not w.startswith("degenerate fit"):
            continue
        present, text = mode_depth_effect(s, m)
        out[f"nonlinear mode {m}"] = (present, degenerate_why(w, present, text, int(s.depths[-1])))
    return out


def verdict7(sn: float, sl: float, n_nl: int, other: dict, degen: dict) -> tuple[str, str]:
    """Claim 7 before the certificate gate (SPEC §9): (verdict, the end of the degenerate modes' part).
    `n_nl`: the nonlinear modes with a curve; `other`: the modes without one for another reason than a
    degenerate fit; `degen`: `degenerate_modes`."""
    compares = bool(np.isfinite(sn) and np.isfinite(sl) and sn < sl)
    # the comparison fails on the modes that have curves. A mode added can only widen max - min at
    # every depth (so raise the nonlinear spread): a degenerate mode's curve, were it fitted, cannot
    # rescue it. With fewer than 2 nonlinear curves there is no comparison for it to fail.
    decided = not compares and (n_nl >= 2 or not np.isfinite(sl))
    absent = any(not present for present, _ in degen.values())
    end = "INCONCLUSIVE"
    if absent:
        end = "NO"
    elif decided:
        end = "NO (the comparison already fails on the modes with a curve: a mode added can only widen max - min)"
    if other or absent or decided:
        return FAIL, end
    return (INCONCLUSIVE if degen else PASS if compares else FAIL), end


def c7(res, th):
    a, b = FIG7_SPECTRUM
    a3, b3 = FIG3C_SPECTRUM
    require(res, "nonlinear", "difficult", 2, [FIG7_SPECTRUM])
    require(res, "linear", "easy", 1, [FIG3C_SPECTRUM])
    s_nl = res.series("nonlinear", "difficult", 2, a, b)
    s_li = res.series("linear", "easy", 1, a3, b3)
    d = preset_shape(res.preset, "linear")[0]
    sn, mn, why_n = _spread(s_nl, FIG7_MODES, True)
    sl, ml, why_l = _spread(s_li, [m for m in FIG3C_MODES if m <= d], False)
    dropped = {**{f"nonlinear mode {m}": w for m, w in why_n.items()}, **{f"linear mode {m}": w for m, w in why_l.items()}}
    degen = degenerate_modes(s_nl, why_n)
    other = {k: w for k, w in dropped.items() if k not in degen}
    v, end = verdict7(sn, sl, len(mn), other, degen)
    cert, problem = gate(res, [("nonlinear", "difficult", 2, a, b, None), ("linear", "easy", 1, a3, b3, None)])
    parts = [f"nonlinear difficult {label(a, b)}: spread {num(sn)} (modes {mn}, R_k,inf from well-posed fits)",
             f"linear easy {label(a3, b3)} (Fig. 3c): spread {num(sl)} (modes {ml}, R_k,inf = 0)",
             f"{num(sn)} < {num(sl)} {yes(np.isfinite(sn) and np.isfinite(sl) and sn < sl)}"]
    if other:  # a mode without its curve is not left out of the comparison: the claim fails naming it
        parts.append("modes without a normalised reducible curve: "
                     + ", ".join(f"{k} ({w})" for k, w in other.items()) + " → NO")
    if degen:  # SPEC §9: a degenerate fit is INCONCLUSIVE, FAIL where the depth effect is absent
        parts.append("modes whose R_k,inf fit is degenerate: "
                     + ", ".join(f"{k} ({w})" for k, (_, w) in degen.items()) + f" → {end}")
    if problem:
        parts.append(f"→ {outcome(gated(v, problem), problem, v == PASS)}")
    return {"nonlinear_spread": sn, "linear_easy_spread": sl, "nonlinear_modes": mn, "linear_modes": ml,
            "modes_without_curve": dropped,
            "degenerate_modes": {k: {"depth_effect": p, "why": w} for k, (p, w) in degen.items()},
            "certificates": cert}, gated(v, problem), \
        judged("spread (mean over L >= 2 of max - min across modes of the normalised reducible loss) of the "
               "nonlinear model at fig7's spectrum < that of the linear model on the easy task at Fig. 3c's, "
               "every mode shown with a curve: a mode without one FAILs the claim, except a nonlinear mode whose "
               "R_k,inf fit is degenerate (SPEC §9), which is FAIL where its depth effect R_k(1) - R_k(Lmax) is "
               "within 2 SE (SE over seeds), FAIL too where the comparison already fails on the modes with a curve "
               "(a mode added can only widen max - min), else INCONCLUSIVE; either series reading a depth that "
               "fails a certificate (SPEC §4), or the envelope with fewer than 3 seeds: INCONCLUSIVE",
               parts)


CLAIMS = (
    Claim("7", "Nonlinear modes learn in parallel",
          "at the fig7 spectrum the normalised reducible curves of different modes differ by less than their spread "
          "under the linear model on the easy task (Fig. 3c)", c7, ("fig7", "fig3"), part="paper"),
)


FIG7 = register(Experiment(
    "fig7", "Mode-wise loss of nonlinear attention (the paper: modes learn in parallel)",
    ("nonlinear", "linear"), "difficult", (2,), "(1,0)",
    "(a) raw mode-wise loss vs L; (b) normalised reducible loss (the paper: the curves collapse); "
    "(c) the same normalisation for the linear model on the easy task at Fig. 3c's spectrum, claim 7's comparison",
    (RunGroup("nonlinear", "difficult", 2, (FIG7_SPECTRUM,)),
     RunGroup("linear", "easy", 1, (FIG3C_SPECTRUM,))), reuses=("fig3", "fig6"), figure=fig7, claims=CLAIMS))
