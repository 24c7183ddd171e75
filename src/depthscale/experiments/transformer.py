"""Beyond the paper: the decomposition in a standard pre-LN Transformer (issue 16 item 3;
depthscale.kinds.transformer): fig6's task at (0,0), k = 2, read as an ensemble through f_l = z_0 + L d_l
(depthscale.data.decompose), beside the controlled nonlinear model (fig6's runs). Figure, table and
claims B3b-B3d.

Choices: depths 1-8 keep it near 15 core-minutes at the cpu preset (a depth-8 step costs ~8x a
depth-1 step: no packing across depth).
"""

from __future__ import annotations

import math

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.claims import MissingRuns, judged, num, point_se, require, seeds_text, yes
from depthscale.analysis.curves import fit_series, rel_change_last_two
from depthscale.analysis.results import Results, Theory
from depthscale.base.formatting import fit_status
from depthscale.config.paper import ORIGIN
from depthscale.config.records import Claim, Experiment, RunGroup, register
from depthscale.config.run import PRESET_DEPTHS

TRANSFORMER_DEPTHS = (1, 2, 4, 8)


def transformer_depths(preset: str) -> tuple[int, ...]:
    """The experiment's depths at `preset`: TRANSFORMER_DEPTHS up to the preset's deepest (what
    RunGroup.depths_for gives its group)."""
    return tuple(L for L in TRANSFORMER_DEPTHS if L <= max(PRESET_DEPTHS[preset]))


def figure(res: Results, th: Theory):
    """Beyond the paper: a pre-LN Transformer read through the decomposition (0,0), k = 2. (a) R_L
    of the Transformer and of the controlled nonlinear model (fig6's runs, if stored) with their
    fits; (b) the Transformer's A_L, C_L, A_L - C_L (linear y: C_L may be negative); (c) A_L - C_L
    of both models (does it settle, as claim 6 asks, or grow?)."""
    fig, ax = pl.new_figure(3, width=3.9)
    tr = res.series("transformer", "difficult", 2, 0.0, 0.0, transformer_depths(res.preset))
    nl = res.series("nonlinear", "difficult", 2, 0.0, 0.0)
    models = (("pre-LN Transformer", tr, "tab:red", "o"), ("controlled nonlinear (fig6)", nl, "tab:blue", "s"))
    drawn, absent = 0, []
    for name, s, col, mk in models:
        y = s.get("R") if s else np.zeros(0)
        ok = np.isfinite(y) & (y > 0) if s else np.zeros(0, bool)
        if not ok.any():
            absent.append(name)
            continue
        drawn += 1
        f = fit_series(s, True)
        law = f is not None and f.ok
        err = s.se["R"] if np.isfinite(s.se["R"]).any() else s.get("R_se")  # one seed: the evaluation SE
        pl.errorbar(ax[0], s.depths[ok], y[ok], err[ok], marker=mk, color=col,
                    label=f"{name}: {pl.fit_text(f)}" if law else f"{name}" + ("" if f is None else " (fit degenerate)"),
                    ls="none" if law else "-")
        if law:
            Lg = np.geomspace(1, s.depths[ok][-1], 100)
            ax[0].plot(Lg, f.predict(Lg), color=col, lw=0.9, alpha=0.9)
    pl.loglog(ax[0])
    if not drawn:
        pl.missing(ax[0])
    for n in absent if drawn else ():
        pl.note(ax[0], f"not stored: {n}")
    pl.finish_legend(ax[0], 2, r"(0,0), $k=2$; fits $L_0 + c\,L^{-\alpha}$")
    pl.panel_title(ax[0], "a", "loss vs depth (bars: SE)")
    if tr:
        for metric, col, mk, lab in (("A", "tab:green", "^", "$A_L$"), ("gap", "tab:orange", "D", "$A_L - C_L$"),
                                     ("R", "tab:red", "o", "$R_L$"), ("C", "tab:purple", "s", "$C_L$")):
            y = tr.get(metric)
            ok = np.isfinite(y) & ((tr.depths > 1) if metric in ("C", "gap") else True)
            err = tr.get("R_se") if metric == "R" and not np.isfinite(tr.se["R"]).any() else tr.se[metric]
            pl.errorbar(ax[1], tr.depths[ok], y[ok], err[ok], marker=mk, color=col, label=lab)
        ax[1].axhline(0.0, color="0.6", lw=0.7)
        v = tr.get("var_ystar")
        if np.isfinite(v).any():
            ax[1].axhline(float(np.nanmean(v)), color="0.4", ls="--", lw=0.8, label=r"Var$(y^*)$")
        pl.finish_legend(ax[1], 5, "pre-LN Transformer")
    else:
        pl.missing(ax[1])
    pl.logx(ax[1])
    ax[1].set_ylabel("$A_L$, $C_L$, $R_L$")
    pl.panel_title(ax[1], "b", "Transformer: the decomposition, (0,0), $k=2$")
    drawn = 0
    for name, s, col, mk in models:
        y = s.get("gap") if s else np.zeros(0)
        ok = np.isfinite(y) & (s.depths > 1) & (y > 0) if s else np.zeros(0, bool)
        if ok.any():
            pl.errorbar(ax[2], s.depths[ok], y[ok], s.se["gap"][ok], marker=mk, color=col, label=name)
            drawn += 1
    pl.loglog(ax[2], ylabel="$A_L - C_L$")
    if not drawn:
        pl.missing(ax[2])
    pl.finish_legend(ax[2], 2, r"(0,0), $k=2$")
    pl.panel_title(ax[2], "c", "$A_L - C_L$: settles or grows?")
    return fig


def table(res: Results, th: Theory):
    """Beyond the paper, the pre-LN Transformer at (0,0), k = 2: per depth R (± SE), R / Var(y*),
    A, C, A - C, (A - C)/L, the residual of R = C + (A - C)/L with R the model's own loss
    (`identity_residual`), the steps trained, the controlled nonlinear model's R at the same depth
    (fig6's run, NaN if not stored), and the fit R = L0 + c L^-alpha over the Transformer's depths
    (the same in every row, with its status)."""
    import pandas as pd

    depths = transformer_depths(res.preset)
    s = res.series("transformer", "difficult", 2, 0.0, 0.0, depths)
    nl = res.series("nonlinear", "difficult", 2, 0.0, 0.0, depths)
    R_nl = dict(zip(nl.depths.tolist(), nl.get("R"))) if nl else {}
    f = fit_series(s, True)
    fit = {"L0": f.L0 if f else math.nan, "alpha": f.alpha if f else math.nan,
           "alpha_se": f.alpha_se if f else math.nan, "r2": f.r2 if f else math.nan, "fit": fit_status(f)}
    rows = []
    for j, L in enumerate(s.depths.tolist() if s else []):
        v = {m: float(s.get(m)[j]) for m in ("R", "R_se", "R_rel", "A", "C", "gap", "identity_residual", "steps")}
        many = L > 1
        rows.append({"L": L, "R": v["R"], "R_se": v["R_se"], "R_over_var": v["R_rel"], "A": v["A"],
                     "C": v["C"] if many else math.nan, "A_minus_C": v["gap"] if many else math.nan,
                     "A_minus_C_over_L": v["gap"] / L if many else math.nan,
                     "identity_residual": v["identity_residual"], "steps": v["steps"],
                     "R_nonlinear": R_nl.get(L, math.nan), **fit})
    for L in (s.missing if s is not None else ()):
        rows.append({"L": L, "R": math.nan, **fit})
    return pd.DataFrame(rows).sort_values("L").reset_index(drop=True) if rows else pd.DataFrame(
        [{"L": L, "R": math.nan, **fit} for L in depths])


def _transformer_series(res):
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
    detail = judged("A_L - C_L > 0 at every L >= 2 and its relative change over the last two depths < 10%",
                    ["A-C " + ", ".join(f"L={L}: {num(G[L])}" for L in Ls) + f" (all > 0 {yes(pos)})",
                     f"Δ(A-C)/(A-C) over L={Ls[-2]}→{Ls[-1]}: {num(dG)} "
                     + ("(grows)" if G[Ls[-1]] > G[Ls[-2]] else "(falls)") + f" < 0.1 {yes(dG < 0.1)}"],
                    "; " + seeds_text(res, s.n.tolist()))
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
    detail = judged("C_L > 0 at every L >= 2 and C_Lmax >= R_Lmax / 2",
                    ["C " + ", ".join(f"L={L}: {num(C[L])}" for L in Ls) + f" (all > 0 {yes(pos)})",
                     f"C/R at L={Lmax}: {num(frac)} >= 0.5 {yes(frac >= 0.5)}"],
                    "; " + seeds_text(res, s.n.tolist()))
    return {"C": {f"L={L}": C[L] for L in Ls}, "C_over_R_Lmax": frac}, good, detail


def cB3d(res, th):
    """Depth lowers the Transformer's loss: R_Lmax < R_1 - 2 sqrt(SE_1^2 + SE_Lmax^2)."""
    s = _transformer_series(res)
    R = s.get("R")
    se1, kind = point_se(s, 0)
    seM, _ = point_se(s, len(s.depths) - 1)
    gap = float(R[0] - R[-1])
    tol = 2 * math.hypot(se1, seM)
    good = bool(int(s.depths[0]) == 1 and gap > tol)
    detail = judged("R_Lmax < R_1 - 2 sqrt(SE_1² + SE_Lmax²)",
                    [f"R_1={num(R[0])}±{num(se1)}, R_{int(s.depths[-1])}={num(R[-1])}±{num(seM)} ({kind}); gain "
                     f"{num(gap)} vs 2 SE {num(tol)} {yes(good)}"],
                    "; " + seeds_text(res, s.n.tolist()))
    return {"R_1": float(R[0]), "R_Lmax": float(R[-1]), "gain": gap, "two_se": tol}, good, detail


CLAIMS = (
    Claim("B3b", "Beyond: the Transformer's A_L - C_L settles (claim 6's test)",
          "A_L - C_L > 0 at every L >= 2 and relative change over the last two depths (4 -> 8) < 10%", cB3b,
          ("transformer",), part="beyond"),
    Claim("B3c", "Beyond: the Transformer's loss at depth is the shared error C_L (an ensemble's floor)",
          "C_L > 0 at every L >= 2 and C_Lmax >= R_Lmax / 2", cB3c, ("transformer",), part="beyond"),
    Claim("B3d", "Beyond: depth lowers the Transformer's loss",
          "R_Lmax < R_1 - 2 sqrt(SE_1^2 + SE_Lmax^2) (SE over seeds, or evaluation SEs with one seed)", cB3d,
          ("transformer",), part="beyond"),
)


TRANSFORMER = register(Experiment(
    "transformer", "Beyond the paper: the decomposition in a pre-LN Transformer", ("transformer",),
    "difficult", (2,), "(0,0)",
    "a standard pre-LN Transformer (softmax attention + MLP blocks, one token stream) read as an "
    "ensemble through the decomposition f_l = z_0 + L d_l (depthscale.data.decompose): loss, C_L, "
    "A_L - C_L vs L beside the controlled nonlinear model (fig6's runs at (0,0))",
    (RunGroup("transformer", "difficult", 2, ORIGIN, TRANSFORMER_DEPTHS),),
    reuses=("fig6",), part="beyond", figure=figure, table=table, claims=CLAIMS))
