"""Beyond the paper: loss against training time and width beside depth (issue 16 item 4). fig6's runs
at two spectra give the depth law and the training curves (loss vs step); width groups add N > d
at two depths (N = d is fig6's own runs: same configs, same run ids). Figure, table and claims
B4a-B4c.

Choices:
- widths are absolute: at smoke (d = 8) the axis is 8, 24, ..., 64; depths above the preset's
  deepest are dropped (smoke keeps L = 4).
- the time fits R_inf + c t^-beta are made after warmup (the cosine decay of the learning rate
  confounds the late part; B4c compares the early window, where the rate is >= half its peak).
"""

from __future__ import annotations

import math

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.curves import fit_series, fit_xy, time_curve, time_fit, time_window, width_series
from depthscale.analysis.claims import (MissingRuns, cells_text, fit_problem, fitted, judged, num, require, seeds_text, verdict,
                               yes)
from depthscale.analysis.results import Results, Theory
from depthscale.base.formatting import fit_status, label
from depthscale.config.records import Claim, Experiment, RunGroup, depth_set, register
from depthscale.config.run import geometry

SCALING_SPECTRA = ((0.0, 0.0), (1.0, 0.0))
SCALING_WIDTHS = (24, 32, 48, 64)  # N beyond the preset's N = d
SCALING_DEPTHS = (4, 16)
SCALING_TIME_DEPTHS = (1, 4, 16, 64)  # the depths whose training curves panels (c, d) draw


def _width_panel(ax, res: Results, a: float, b: float, depths, widths) -> None:
    """R vs width N at fixed depths (colour and marker: depth; error bars: the evaluation SE), with
    the fit R_inf + c N^-beta where it is well posed; dotted: the deepest N = d run (what depth buys)."""
    colors = pl.colors(len(depths))
    drawn, degenerate = 0, []
    for j, (L, col) in enumerate(zip(depths, colors)):
        w = width_series(res, "nonlinear", "difficult", 2, a, b, L, widths)
        if not len(w["N"]):
            continue
        drawn += 1
        f = fit_xy(w["N"], w["R"])
        law = f is not None and f.ok
        if not law:
            degenerate.append(f"{L}")
        pl.errorbar(ax, w["N"] * (1 + 0.02 * (j - (len(depths) - 1) / 2)), w["R"], w["R_se"],
                    marker=pl.MARKERS[j % len(pl.MARKERS)], color=col, ls="none" if law else "-",
                    label=rf"{L}: $\beta_N = {f.alpha:.2f} \pm {f.alpha_se:.2f}$" if law else f"{L}")
        if law:
            Ng = np.geomspace(w["N"].min(), w["N"].max(), 60)
            ax.plot(Ng, f.predict(Ng), color=col, lw=0.9)
    deep = res.series("nonlinear", "difficult", 2, a, b)
    if deep:
        ax.axhline(float(deep.get("R")[-1]), color="0.4", lw=0.8, ls=":",
                   label=f"$L = {int(deep.depths[-1])}$, $N = {widths[0]}$")
    ax.set_xscale("log", base=2)
    pl.log_axis_ticks(ax.xaxis, widths)
    ax.set_xlabel("width $N$")
    ax.set_ylabel("loss $R$")
    if not drawn:
        pl.missing(ax)
    if degenerate:
        pl.note(ax, f"no law drawn for L = {', '.join(degenerate)} (no well-posed fit)")
    pl.finish_legend(ax, drawn + 1, "depth $L$")


def _time_panel(ax, res: Results, a: float, b: float, depths) -> None:
    """The monitor loss vs training step after warmup at fixed depths, with the fit
    R_inf + c t^-beta over those steps; shaded: where the cosine rate is below half its peak."""
    colors = pl.colors(len(depths))
    drawn, degenerate, cur0 = 0, [], None
    for i, (L, col) in enumerate(zip(depths, colors)):
        cur = time_curve(res, "nonlinear", "difficult", 2, a, b, L)
        if cur is None:
            continue
        cur0 = cur0 or cur
        drawn += 1
        lo, hi = time_window(cur["warmup"], cur["max_steps"], "after_warmup")
        keep = (cur["t"] > lo) & (cur["t"] <= hi)
        f = time_fit(cur, "after_warmup")
        law = f is not None and f.ok
        if not law:
            degenerate.append(f"{L}")
        ax.plot(cur["t"][keep], cur["y"][keep], marker=pl.MARKERS[i % len(pl.MARKERS)], ms=2.5, lw=0.6, color=col,
                alpha=0.8, label=rf"{L}: $\beta_t = {f.alpha:.2f} \pm {f.alpha_se:.2f}$" if law else f"{L}")
        if law:
            tg = np.geomspace(cur["t"][keep].min(), hi, 80)
            ax.plot(tg, f.predict(tg), color=col, lw=1.4)
    ax.set_xscale("log")
    if cur0 is not None and cur0["schedule"] == "cosine":
        half = time_window(cur0["warmup"], cur0["max_steps"], "early")[1]
        ax.axvspan(half, cur0["max_steps"] * 1.05, color="0.9", zorder=0, label="cosine rate < ½ peak")
    pl.logy(ax)
    pl.log_axis_ticks(ax.xaxis)
    ax.set_xlabel("training step $t$ (after warmup)")
    ax.set_ylabel("monitor loss $R(t)$")
    if not drawn:
        pl.missing(ax, "missing runs or curves")
    if degenerate:
        pl.note(ax, f"no law drawn for L = {', '.join(degenerate)} (no well-posed fit)")
    pl.finish_legend(ax, drawn + 1, r"depth $L$; fit $R_\infty + c\,t^{-\beta_t}$")


def figure(res: Results, th: Theory):
    """Beyond the paper: loss vs depth (fig6's runs), width and training step at the same spectra;
    one row per spectrum, so that each panel's axis spans one spectrum's loss."""
    spectra = SCALING_SPECTRA[:2]
    fig, ax = pl.new_figure(3, len(spectra), width=4.0, height=3.4)
    N0 = geometry(res.preset, "nonlinear")["N"]
    all_L = depth_set(res.preset, "all")
    depths = [L for L in SCALING_DEPTHS if L <= all_L[-1]]
    tdepths = [L for L in SCALING_TIME_DEPTHS if L in all_L] or list(all_L)
    letters = "abcdef"
    for r, (a, b) in enumerate(spectra):
        p = ax[3 * r:3 * r + 3]
        pl.loss_panel(p[0], res, "nonlinear", "difficult", [(2, (a, b))], fit=True)
        pl.panel_title(p[0], letters[3 * r], rf"depth at {label(a, b)}: $N = d = {N0}$")
        _width_panel(p[1], res, a, b, depths, (N0,) + SCALING_WIDTHS)
        pl.panel_title(p[1], letters[3 * r + 1], f"width at {label(a, b)}: fixed depth")
        _time_panel(p[2], res, a, b, tdepths)
        pl.panel_title(p[2], letters[3 * r + 2], rf"time at {label(a, b)}: $N = {N0}$, monitor contexts")
    return fig


def table(res: Results, th: Theory):
    """Beyond the paper: the saturating power law y = y_inf + c x^-exponent along depth (fig6's
    runs, N = d), width (L fixed) and training step (the monitor curve of each fig6 depth, over
    the steps after warmup and over the early window where the cosine rate is >= half its peak),
    per spectrum: exponent +- SE, R^2, asymptote, the first and last y of the fitted points."""
    import pandas as pd

    N0 = geometry(res.preset, "nonlinear")["N"]
    all_L = depth_set(res.preset, "all")

    def row(axis, a, b, fixed, window, x, y, f):
        x, y = np.asarray(x, float), np.asarray(y, float)
        return {"axis": axis, "a": a, "b": b, "fixed": fixed, "window": window, "n": int(len(x)),
                "exponent": f.alpha if f else math.nan, "exponent_se": f.alpha_se if f else math.nan,
                "r2": f.r2 if f else math.nan, "asymptote": f.L0 if f else math.nan,
                "asymptote_se": f.L0_se if f else math.nan,
                "y_first": float(y[0]) if len(y) else math.nan, "y_last": float(y[-1]) if len(y) else math.nan,
                "fit": fit_status(f)}

    rows = []
    for a, b in SCALING_SPECTRA:
        s = res.series("nonlinear", "difficult", 2, a, b)
        rows.append(row("depth L", a, b, f"N={N0}", f"L={all_L[0]}..{all_L[-1]}", s.depths if s else [],
                        s.get("R") if s else [], fit_series(s, True)))
        for L in (L for L in SCALING_DEPTHS if L <= all_L[-1]):
            w = width_series(res, "nonlinear", "difficult", 2, a, b, L, (N0,) + SCALING_WIDTHS)
            rows.append(row("width N", a, b, f"L={L}", f"N={N0}..{SCALING_WIDTHS[-1]}", w["N"], w["R"],
                            fit_xy(w["N"], w["R"])))
        for L in all_L:
            cur = time_curve(res, "nonlinear", "difficult", 2, a, b, L)
            for window in ("after_warmup", "early"):
                if cur is None:
                    rows.append(row("step t", a, b, f"L={L}, N={N0}", window, [], [], None))
                    continue
                lo, hi = time_window(cur["warmup"], cur["max_steps"], window)
                keep = (cur["t"] > lo) & (cur["t"] <= hi)
                rows.append(row("step t", a, b, f"L={L}, N={N0}", f"{window}: t in ({lo:g}, {hi:g}]",
                                cur["t"][keep], cur["y"][keep], time_fit(cur, window)))
    return pd.DataFrame(rows)


def _scaling_depths(res) -> tuple[int, ...]:
    return tuple(L for L in SCALING_DEPTHS if L <= depth_set(res.preset, "all")[-1])


def _time_fits(res, window_pairs: bool):
    """(spectrum, L, curve, full fit, early fit) for every fig6 depth at the scaling spectra."""
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


def cB4a(res, th):
    """Width at fixed depth: every N > d against N = d, |R_N - R_d| <= 2 sqrt(SE_N^2 + SE_d^2)."""
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
            parts.append(f"{label(a, b)} L={L}: R_{N0}={num(R0)}±{num(s0)}; "
                         + ", ".join(f"N={N}: {num(r)} ({100 * (r / R0 - 1):+.1f}%, z={zz:+.1f})"
                                     for N, r, zz in zip(w["N"][1:], w["R"][1:], z))
                         + f" {yes(good)}")
    if miss:
        raise MissingRuns(cells_text(miss))
    return meas, ok, judged("|R_N - R_d| <= 2 sqrt(SE_N² + SE_d²) (SE over seeds, or evaluation SE with one seed) "
                            f"for every N in {', '.join(map(str, SCALING_WIDTHS))}, at L = "
                            f"{', '.join(map(str, _scaling_depths(res)))}, (0,0) and (1,0)", parts,
                            "; " + seeds_text(res, ns))


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
        parts.append(f"{label(a, b)} L={L} {fitted(f, 'β')} (R² >= 0.95 {yes(r2_ok)}) {verdict(good, f)}")
    return meas, ok, judged("fit of the seed-mean monitor loss R(t) = R_inf + c t^-β over t > warmup well posed with "
                            "R² >= 0.95, every fig6 depth at (0,0) and (1,0)", parts, "; " + seeds_text(res, ns))


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
        parts.append(f"{label(a, b)} L={L} β_all={num(f.alpha if f else None)}±{num(f.alpha_se if f else None)} vs "
                     f"β_early={num(e.alpha if e else None)}±{num(e.alpha_se if e else None)}, |z|={num(abs(dz))} <= 2 "
                     + ("ok" if good else f"NO ({why})" if why else "NO"))
    return meas, ok, judged("β over the early window (cosine rate >= half its peak) within 2 combined SE of β over "
                            "all t > warmup, both fits well posed, every fig6 depth at (0,0) and (1,0)", parts,
                            "; " + seeds_text(res, ns))


CLAIMS = (
    Claim("B4a", "Beyond: width beyond N = d does not change the loss at fixed depth",
          "|R_N - R_d| <= 2 sqrt(SE_N^2 + SE_d^2) for every N in 24, 32, 48, 64, at L = 4 and 16, (0,0) and (1,0) "
          "(the function class of SPEC §3.1 is the same for every N >= d)", cB4a, ("scaling",), part="beyond"),
    Claim("B4b", "Beyond: loss vs training step is a saturating power law after warmup",
          "fit of the monitor R(t) = R_inf + c t^-β over t > warmup well posed with R² >= 0.95, every fig6 depth "
          "at (0,0) and (1,0)", cB4b, ("scaling",), part="beyond"),
    Claim("B4c", "Beyond: the time exponent is not set by the learning-rate schedule",
          "β over the early window (cosine rate >= half its peak) within 2 combined SE of β over all t > warmup, "
          "both fits well posed, every fig6 depth at (0,0) and (1,0)", cB4c, ("scaling",), part="beyond"),
)


SCALING = register(Experiment(
    "scaling", "Beyond the paper: loss vs training time and width beside depth", ("nonlinear",),
    "difficult", (2,), "(0,0), (1,0); N = d (fig6's runs) and N = 24, 32, 48, 64 at L = 4, 16",
    "(a) R vs depth L at N = d with fits (fig6's runs); (b) R vs width N at L = 4 and 16 with "
    "fits; (c, d) the monitor loss vs training step t at fixed depths, fits R_inf + c t^-beta "
    "after warmup (the cosine decay of the learning rate confounds the late part)",
    (RunGroup("nonlinear", "difficult", 2, SCALING_SPECTRA),)
    + tuple(RunGroup("nonlinear", "difficult", 2, SCALING_SPECTRA, SCALING_DEPTHS, (("N", N),))
            for N in SCALING_WIDTHS),
    reuses=("fig6",), part="beyond", figure=figure, table=table, claims=CLAIMS))
