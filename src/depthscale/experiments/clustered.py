"""Beyond the paper: clustered contexts (App. D.2). K fixed rotations of the input covariance
(context classes) against a fresh Haar rotation per context (K = inf: fig6's runs); do layers
specialise in classes, and does the depth law change with K? Figure, table and claims B2a-B2c.

Choices:
- a fig6 spectrum with a > 0, (1, 0), so that the rotation changes the inputs (at a = 0 Sigma is
  isotropic and every rotation gives the same inputs; b = 0 keeps the teacher isotropic, so the
  classes differ only in their input covariance); K = inf is fig6's own runs at these depths (same
  configs, same run ids).
- depths 1, 2, 4, 8, 16, 64: 32 left out (25% of the layers of a pack), 3 residual dof kept.
- B2a also needs its untrained control (the same clustered models at step 0:
  `res.view(clusters=K, max_steps=0)` at the deepest clustered depth), registered as its own groups.
"""

from __future__ import annotations

import math

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.claims import MissingRuns, cells_text, fit_problem, judged, num, seeds_text, verdict, yes
from depthscale.analysis.curves import fit_series
from depthscale.analysis.results import Results, Series, Theory
from depthscale.base.formatting import fit_status, label
from depthscale.config.records import Claim, Experiment, RunGroup, register
from depthscale.theory.fits import FitResult

CLUSTERED_SPECTRUM = (1.0, 0.0)
CLUSTERED_KS = (1, 2, 4, 8)
CLUSTERED_DEPTHS = (1, 2, 4, 8, 16, 64)  # 32 left out: 25% of the layers of a pack, 3 residual dof kept
GROUPS = ((RunGroup("nonlinear", "difficult", 2, (CLUSTERED_SPECTRUM,), CLUSTERED_DEPTHS),)
          + tuple(RunGroup("nonlinear", "difficult", 2, (CLUSTERED_SPECTRUM,), CLUSTERED_DEPTHS, (("clusters", K),))
                  for K in CLUSTERED_KS)
          # the untrained control of claim B2a: the same models at step 0, deepest depth
          + tuple(RunGroup("nonlinear", "difficult", 2, (CLUSTERED_SPECTRUM,), "deepest",
                           (("clusters", K), ("max_steps", 0))) for K in CLUSTERED_KS if K >= 2))


def clustered_depths(preset: str) -> tuple[int, ...]:
    """The experiment's depths at `preset` (CLUSTERED_DEPTHS within the preset's)."""
    return GROUPS[0].depths_for(preset)


def clustered_series(res: Results, K: int) -> Series:
    """The runs at K context classes (0 = a fresh Haar rotation per context: fig6's runs) over the
    experiment's depths."""
    view = res.view(clusters=int(K)) if K else res
    return view.series("nonlinear", "difficult", 2, *CLUSTERED_SPECTRUM, clustered_depths(res.preset))


def clustered_fit(res: Results, K: int) -> tuple[Series, FitResult | None]:
    """`clustered_series` and its fit R_L = L0 + c L^-alpha."""
    s = clustered_series(res, K)
    return s, fit_series(s, True)


def _clustered_label(K: int) -> str:
    return "∞ (Haar)" if K == 0 else str(K)


def figure(res: Results, th: Theory):
    """Beyond the paper, clustered contexts (App. D.2): (a) R_L vs L per number of context classes
    K with fits; (b) the specialisation index vs L per K >= 2, dashed: the same index with the class
    labels permuted (its sampling-noise level); (c) the deepest model's per-layer selection loss per
    class at the largest K, each class divided by its mean over layers (what the index measures)."""
    fig, ax = pl.new_figure(3, width=4.2, height=3.5)
    Ks = (*CLUSTERED_KS, 0)
    colors = pl.colors(len(Ks))
    series = {K: clustered_series(res, K) for K in Ks}
    _loss_panel(ax[0], series, colors, max(max(clustered_depths(res.preset)), 1))
    _specialisation_panel(ax[1], series, colors)
    _class_loss_panel(fig, ax[2], series[max(CLUSTERED_KS)], max(CLUSTERED_KS))
    return fig


def _loss_panel(ax, series: dict, colors, Lmax: int) -> None:
    """Panel (a): R_L vs L of each K in `series` (K -> Series; 0 is K = inf) with its fitted law
    drawn to `Lmax` where the fit is sound; notes name the K with no runs or a degenerate fit."""
    Ks = list(series)
    missing, degenerate = [], []
    for i, (K, col) in enumerate(zip(Ks, colors)):
        s = series[K]
        y = s.get("R")
        ok = np.isfinite(y) & (y > 0) if s else np.zeros(0, bool)
        if not s or not ok.any():
            missing.append(_clustered_label(K))
            continue
        f = fit_series(s, True)
        law = f is not None and f.ok
        if f is not None and not f.ok:
            degenerate.append(_clustered_label(K))
        pl.errorbar(ax, s.depths[ok], y[ok], s.se["R"][ok], marker=pl.MARKERS[i % len(pl.MARKERS)], color=col,
                    ls="none" if law else "-",
                    label=f"{_clustered_label(K)}: {pl.fit_text(f)}" if law else _clustered_label(K))
        if law:
            Lg = np.geomspace(1, Lmax, 100)
            ax.plot(Lg, f.predict(Lg), color=col, lw=0.9, alpha=0.9)
    if len(missing) == len(Ks):
        pl.missing(ax)
    pl.loglog(ax)
    if missing and len(missing) < len(Ks):
        pl.note(ax, "missing: K = " + ", ".join(missing))
    if degenerate:
        pl.note(ax, "no law drawn, degenerate fit: K = " + ", ".join(degenerate))
    pl.finish_legend(ax, len(Ks), "classes $K$")
    pl.panel_title(ax, "a", f"loss, $(a, b) = {label(*CLUSTERED_SPECTRUM)}$, $k=2$")


def _specialisation_panel(ax, series: dict, colors) -> None:
    """Panel (b): the specialisation index S_L vs L of each K >= 2 in `series`, and dashed the same
    index with the class labels permuted (its noise level)."""
    drawn = 0
    for i, (K, col) in enumerate(zip(series, colors)):
        if K < 2:
            continue
        s = series[K]
        y = s.get("specialisation")
        ok = np.isfinite(y) if s else np.zeros(0, bool)
        if not s or not ok.any():
            continue
        drawn += 1
        pl.errorbar(ax, s.depths[ok], y[ok], s.se["specialisation"][ok], marker=pl.MARKERS[i % len(pl.MARKERS)],
                    color=col, label=_clustered_label(K))
        null = s.get("specialisation_null")
        okn = np.isfinite(null)
        ax.plot(s.depths[okn], null[okn], color=col, ls="--", lw=0.8, alpha=0.8)
    pl.logx(ax)
    ax.set_ylabel("specialisation index $S_L$")
    ax.set_ylim(bottom=0)
    if not drawn:
        pl.missing(ax)
    pl.finish_legend(ax, 3, "classes $K$\n(dashed: labels permuted;\n$K=1$ and $L=1$: $S_L=0$)")
    pl.panel_title(ax, "b", "specialisation index")


def _class_loss_panel(fig, ax, s: Series, Kc: int) -> None:
    """Panel (c): a heat map of the deepest model of `s` (K = Kc classes): its selection loss per
    layer and class, each class over its mean over layers and then each layer over its own mean
    (the coefficients of variation S_L averages), layers grouped by their best class."""
    arr = None
    if s:
        got = s.arrays.get("selection_layer_class", [])
        if got and got[-1] is not None:
            arr = np.asarray(got[-1][0], float)
    if arr is None or arr.ndim != 2:
        pl.missing(ax, "missing runs", blank=True)
        pl.panel_title(ax, "c", f"per-layer, per-class selection loss, $K={Kc}$")
        return
    rel = arr / arr.mean(0, keepdims=True)  # each class over its mean over layers (its difficulty out) ...
    rel = rel / rel.mean(1, keepdims=True)  # ... then each layer over its own mean: the CVs S_L averages
    best = rel.argmin(1)
    order = np.lexsort((rel[np.arange(len(rel)), best], best))  # layers grouped by their best class
    span = float(np.nanmax(np.abs(rel - 1))) or 1.0
    im = ax.imshow(rel[order], aspect="auto", cmap="RdBu_r", vmin=1 - span, vmax=1 + span,
                   interpolation="nearest", extent=(-0.5, rel.shape[1] - 0.5, rel.shape[0] + 0.5, 0.5))
    ax.set_xticks(range(rel.shape[1]))
    nL = rel.shape[0]
    step = max(1, 2 ** math.ceil(math.log2(max(1, nL / 8))))  # at most ~8 labelled rows
    ax.set_yticks([1] + list(range(step, nL + 1, step)) if step > 1 else list(range(1, nL + 1)))
    ax.set_xlabel("context class $c$")
    ax.set_ylabel("layers, sorted by their best class")
    cb = fig.colorbar(im, ax=ax, shrink=0.9)
    cb.set_label("$E_{\\ell c}/\\bar{E}_c$, each layer over its mean\n(1 = no specialisation)", fontsize=pl.LEGEND_PT)
    L = int(s.depths[-1])
    pl.panel_title(ax, "c", f"selection loss per layer and class, $L={L}$, $K={Kc}$")


def table(res: Results, th: Theory):
    """Beyond the paper, clustered contexts: per number of context classes K (0 = a fresh Haar
    rotation per context, fig6's runs) the fit R_L = L0 + c L^-alpha over the experiment's depths,
    the deepest loss, and the specialisation index at the deepest L beside its permutation null."""
    import pandas as pd

    rows = []
    for K in (*CLUSTERED_KS, 0):
        s, f = clustered_fit(res, K)
        last = (lambda m: float(s.get(m)[-1]) if s else math.nan)
        rows.append({"K": "inf (Haar)" if K == 0 else K, "L0": f.L0 if f else math.nan,
                     "L0_se": f.L0_se if f else math.nan, "alpha": f.alpha if f else math.nan,
                     "alpha_se": f.alpha_se if f else math.nan, "r2": f.r2 if f else math.nan,
                     "fit": fit_status(f), "Lmax": int(s.depths[-1]) if s else math.nan,
                     "R_Lmax": last("R"), "R_Lmax_se": last("R_se"),
                     "specialisation_Lmax": last("specialisation") if K else math.nan,
                     "specialisation_null_Lmax": last("specialisation_null") if K else math.nan,
                     "class_cv_Lmax": last("class_cv") if K else math.nan,
                     "depths": ",".join(str(int(L)) for L in s.depths) if s else ""})
    return pd.DataFrame(rows)


def _clustered(res, Ks) -> dict:
    """The clustered experiment's series and fits per K (0 = Haar); MissingRuns for absent cells."""
    out, miss = {}, []
    for K in Ks:
        s, f = clustered_fit(res, K)
        out[K] = (s, f)
        miss += [f"nonlinear/difficult k=2 (1,0) clusters={K} L={L}" for L in s.missing]
    if miss:
        raise MissingRuns(cells_text(miss))
    return out


def _Kname(K: int) -> str:
    return "K=inf" if K == 0 else f"K={K}"


def cB2a(res, th):
    """Layers specialise: at the deepest L the specialisation index S is more than twice its
    permutation null (the index with the class labels shuffled: its sampling-noise level) and above
    the untrained control's S (the same models at step 0), every K >= 2."""
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
        raise MissingRuns(cells_text(miss))
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
            how = f"by more than 2 SE ({num(tol)})"
        else:
            tol, how = 0.0, "(one seed: no SE)"
        beats_u = bool(np.isfinite(S) and np.isfinite(Su) and S - Su > tol)
        good = beats_null and beats_u
        ok &= good
        meas[_Kname(K)] = {"L": L, "specialisation": S, "null": S0, "untrained": Su, "tolerance_vs_untrained": tol,
                           "class_cv": float(s.get("class_cv")[-1])}
        parts.append(f"{_Kname(K)} L={L}: S={num(S)}, null {num(S0)} (S > 2·null {yes(beats_null)}), untrained "
                     f"{num(Su)} (S above it {how} {yes(beats_u)}) → {yes(good)}")
    return meas, ok, judged("S at the deepest L > 2 × its permutation null and > S of the untrained control (by "
                            "more than 2 SE where seeds give one), every K in {2, 4, 8}", parts,
                            "; " + seeds_text(res, ns))


def cB2b(res, th):
    """The depth exponent does not depend on K: |alpha_K - alpha_inf| <= 2 combined SE, every K."""
    got = _clustered(res, (*CLUSTERED_KS, 0))
    _, f0 = got[0]
    meas, parts = {}, []
    ok = not fit_problem(f0)
    meas[_Kname(0)] = {"alpha": f0.alpha if f0 else None, "alpha_se": f0.alpha_se if f0 else None}
    parts.append(f"{_Kname(0)} α={num(f0.alpha if f0 else None)}±{num(f0.alpha_se if f0 else None)} "
                 f"{verdict(ok, f0)}")
    for K in CLUSTERED_KS:
        _, f = got[K]
        tol = 2 * math.hypot(f.alpha_se, f0.alpha_se) if f and f0 else math.nan
        good = bool(not fit_problem(f) and not fit_problem(f0) and abs(f.alpha - f0.alpha) <= tol)
        ok &= good
        meas[_Kname(K)] = {"alpha": f.alpha if f else None, "alpha_se": f.alpha_se if f else None,
                           "tolerance": tol}
        parts.append(f"{_Kname(K)} α={num(f.alpha if f else None)}±{num(f.alpha_se if f else None)} "
                     f"(|Δα| {num(abs(f.alpha - f0.alpha) if f and f0 else None)} vs 2 SE {num(tol)}) "
                     f"{verdict(good, f)}")
    ns = [n for s, _ in got.values() for n in s.n.tolist()]
    return meas, ok, judged("|α_K - α_inf| <= 2 sqrt(SE_K² + SE_inf²), well-posed fits, every K in {1, 2, 4, 8}",
                            parts, "; " + seeds_text(res, ns))


def cB2c(res, th):
    """Fewer classes, lower floor: the fitted L0 is non-decreasing in K (1, 2, 4, 8, inf) within 2
    combined SE at each step, and L0(K=1) is below L0(K=inf) by more than 2 combined SE."""
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
        parts.append(f"{_Kname(K)} L0={num(f.L0 if f else None)}±{num(f.L0_se if f else None)}, "
                     f"R_{int(s.depths[-1])}={num(float(s.get('R')[-1]))}" + (f" ({bad})" if bad else ""))
    fits = [got[K][1] for K in Ks]
    if all(f is not None for f in fits):
        steps = [fits[i + 1].L0 - fits[i].L0 >= -2 * math.hypot(fits[i].L0_se, fits[i + 1].L0_se)
                 for i in range(len(fits) - 1)]
        drop = fits[-1].L0 - fits[0].L0
        tol = 2 * math.hypot(fits[0].L0_se, fits[-1].L0_se)
        ok &= bool(all(steps) and drop > tol)
        parts.append(f"L0 non-decreasing in K within 2 SE: {'yes' if all(steps) else 'NO'}; "
                     f"L0(inf) - L0(1) = {num(drop)} vs 2 SE {num(tol)}: {'ok' if drop > tol else 'NO'}")
        meas["monotone"] = bool(all(steps))
        meas["L0_inf_minus_L0_1"] = drop
    else:
        ok = False
    ns = [n for s, _ in got.values() for n in s.n.tolist()]
    return meas, ok, judged("fitted L0 non-decreasing in K = 1, 2, 4, 8, inf (each step within 2 combined SE) and "
                            "L0(K=1) < L0(inf) by more than 2 combined SE, well-posed fits", parts,
                            "; " + seeds_text(res, ns))


CLAIMS = (
    Claim("B2a", "Clustered contexts: layers specialise in context classes (App. D.2's hypothesis)",
          "specialisation index S at the deepest L > 2x its permutation null (the index with shuffled class labels) "
          "and > S of the untrained control (the same models at step 0; by more than 2 SE where seeds give one), "
          "every K in {2, 4, 8}", cB2a, ("clustered",), part="beyond"),
    Claim("B2b", "Clustered contexts: the depth exponent does not change with the number of classes",
          "|α_K - α_inf| <= 2 combined SE, well-posed fits, every K in {1, 2, 4, 8}", cB2b, ("clustered",), part="beyond"),
    Claim("B2c", "Clustered contexts: fewer classes, lower floor",
          "fitted L0 non-decreasing in K = 1, 2, 4, 8, inf (within 2 combined SE per step) and "
          "L0(K=1) < L0(inf) by more than 2 combined SE, well-posed fits", cB2c, ("clustered",), part="beyond"),
)


CLUSTERED = register(Experiment(
    "clustered", "Beyond the paper: clustered contexts (App. D.2)", ("nonlinear",), "difficult",
    (2,), "(1,0); K = 1, 2, 4, 8 fixed rotations and K = inf (a fresh Haar rotation: fig6's runs)",
    "R_L vs L per K with fits; the specialisation index vs L per K; the per-layer, per-class "
    "selection loss of the deepest model", GROUPS, reuses=("fig6",), part="beyond",
    figure=figure, table=table, claims=CLAIMS))
