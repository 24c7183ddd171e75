"""Tables 1-5 of the paper and our Table 6, rebuilt from stored results (SPEC §7, §8): each a
pandas DataFrame with the paper's values beside ours (columns `paper_*`), written as CSV and
Markdown. Never retrains; a missing cell is NaN ('—' in Markdown). Every fitted number comes
with the fit's status beside it (column `fit*`: "ok", or "degenerate: <reason>", or "no fit"):
a degenerate fit's numbers are shown, never as a law (fits.FitResult.status).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np

from depthscale.analysis import gap_fit, loss_fit, plateau, reference_slopes
from depthscale.formatting import number
from depthscale.registry import (FIG3_SPECTRA, FIG56_SPECTRA, PAPER, PRESET_KS, REGISTRY, SOFTMAX_GEOMETRY_FIELDS, TABLE3_K2, TABLE3_K16,
                                 TOP2_SPECTRA, paper_L0_top2)
from depthscale.results import Results, Theory
from depthscale.theory import two_zeta, zeta


def fit_status(f) -> str:
    """A table cell saying whether fit `f` is a law: 'ok', 'degenerate: <reason>' or 'no fit'."""
    if f is None:
        return "no fit"
    return "ok" if f.ok else f"degenerate: {f.reason}"


def linear_L0(res: Results, a: float, b: float) -> tuple[float, str]:
    """The linear model's L0 on the difficult task: the fitted L0 where the fit is well posed, else
    the plateau R_Lmax (seed mean; the linear model plateaus by L = 2, claim 4a, so a 3-parameter
    fit of a flat curve is often degenerate), and which of the two it is."""
    s, f = loss_fit(res, "linear", "difficult", 2, a, b)
    if f is not None and f.ok:
        return f.L0, "fit"
    R = s.get("R") if s else np.zeros(0)
    return (float(R[-1]), f"plateau R_{int(s.depths[-1])}") if len(R) else (math.nan, "missing")


def table1(res: Results, th: Theory):
    """L0 nonlinear (fit, well posed only) beside L0 linear at its own geometry and the linear model
    trained at the nonlinear geometry d = N = 16, P = 64 (registry.SOFTMAX_GEOMETRY_FIELDS: claim
    5b's comparison), and the theory floor R_irr there."""
    import pandas as pd

    P = PAPER["table1_L0_difficult_k2"]
    same = res.view(**dict(SOFTMAX_GEOMETRY_FIELDS))
    rows = []
    for (a, b), pnl, pli in zip(FIG56_SPECTRA, P["nonlinear"], P["linear"]):
        s_nl, f_nl = loss_fit(res, "nonlinear", "difficult", 2, a, b)
        L0n = f_nl.L0 if f_nl is not None else math.nan  # shown also from a degenerate fit, flagged by fit_nonlinear
        L0l, how_l = linear_L0(res, a, b)
        L0s, how_s = linear_L0(same, a, b)
        var = s_nl.get("var_ystar")
        R_irr = th.floor(a, b, 2, "nonlinear")["R_irr"]  # the linear floor at the nonlinear d, P
        rows.append({"a": a, "b": b, "L0_nonlinear": L0n, "fit_nonlinear": fit_status(f_nl),
                     "R_Lmax_nonlinear": float(s_nl.get("R")[-1]) if s_nl else math.nan,
                     "L0_linear": L0l, "L0_linear_is": how_l,
                     "L0_linear_same_geometry": L0s, "L0_linear_same_geometry_is": how_s,
                     "ratio_same_geometry_trained": L0s / L0n if L0n > 0 else math.nan,
                     "R_irr_at_nonlinear_geometry": R_irr,
                     "L0_nonlinear_over_var": L0n / np.nanmean(var) if len(var) and np.isfinite(var).any() else math.nan,
                     "paper_L0_nonlinear": pnl, "paper_L0_linear": pli,
                     "paper_ratio": pli / pnl})
    return pd.DataFrame(rows)


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


def table3(res: Results, th: Theory):
    import pandas as pd

    paper = {(r["k"], float(r["a"]), float(r["b"])): r for r in PAPER["table3_linear_floor"]}
    rows = []
    for k, spectra in ((2, TABLE3_K2), (16, TABLE3_K16)):
        for a, b in spectra:
            p = paper[(k, a, b)]
            if k in PRESET_KS[res.preset]:
                fl = th.floor(a, b, k)
                R_irr, se, fin, fin_se = fl["R_irr"], fl["se"], fl["finite_P"], fl["finite_P_se"]
            else:
                R_irr = se = fin = fin_se = math.nan
            m, m_se, _ = plateau(res, "linear", k, a, b)
            rows.append({"k": k, "a": a, "b": b, "R_irr": R_irr, "R_irr_se": se,
                         "finite_P_floor": fin, "finite_P_floor_se": fin_se,
                         "plateau": m, "plateau_se": m_se,
                         "diff_pct": 100 * (m - R_irr) / R_irr if R_irr and np.isfinite(R_irr) else math.nan,
                         "diff_finite_P_pct": 100 * (m - fin) / fin if fin and np.isfinite(fin) else math.nan,
                         "paper_R_irr": p["theory"], "paper_R_irr_se": p["theory_se"],
                         "paper_measured": p["measured"],
                         "paper_diff_pct": 100 * (p["measured"] - p["theory"]) / p["theory"]})
    return pd.DataFrame(rows)


def table4(res: Results, th: Theory):
    import pandas as pd

    rows = []
    for p in PAPER["table4_nonlinear_fits"]:
        k, a, b = p["k"], float(p["a"]), float(p["b"])
        _, f = loss_fit(res, "nonlinear", "difficult", k, a, b)
        rows.append({"k": k, "a": a, "b": b, "L0": f.L0 if f else math.nan,
                     "alpha": f.alpha if f else math.nan, "alpha_se": f.alpha_se if f else math.nan,
                     "r2": f.r2 if f else math.nan, "fit": fit_status(f), "paper_L0": p["L0"],
                     "paper_alpha": p["alpha"],
                     "paper_alpha_se": p["alpha_se"], "paper_r2": p["r2"]})
    return pd.DataFrame(rows)


def table5(res: Results, th: Theory):
    import pandas as pd

    rows = []
    for p in PAPER["table5_gap_fits"]:
        a, b = float(p["a"]), float(p["b"])
        f, g, _ = gap_fit(res, a, b)
        rows.append({"a": a, "b": b, "L0": f.L0 if f else math.nan,
                     "alpha": g.alpha if g else math.nan, "alpha_se": g.alpha_se if g else math.nan,
                     "r2": g.r2 if g else math.nan, "points_dropped": g.n_dropped if g else math.nan,
                     "fit_L0": fit_status(f), "fit": fit_status(g),
                     "paper_alpha": p["alpha"], "paper_alpha_se": p["alpha_se"], "paper_r2": p["r2"]})
    return pd.DataFrame(rows)


def table6(res: Results, th: Theory):
    """The nonlinear floor, three ways, on every top-2 spectrum of Tables 1 and 4."""
    import pandas as pd

    paper = paper_L0_top2()
    rows = []
    for a, b in TOP2_SPECTRA:
        s, f = loss_fit(res, "nonlinear", "difficult", 2, a, b)
        R = s.get("R") if s else np.zeros(0)
        R_deep = float(R[-1]) if len(R) and np.isfinite(R[-1]) else math.nan
        sf = th.softmax_floor(a, b, 2)
        p = paper[(a, b)]
        L0 = f.L0 if f else math.nan
        rows.append({"a": a, "b": b, "paper_L0": p, "single_head": sf["single_head"],
                     "ensemble_floor": sf["ensemble_floor"], "ensemble_floor_se": sf["se"],
                     "L0": L0, "fit": fit_status(f), "R_Lmax": R_deep, "Lmax": int(s.depths[-1]) if s else math.nan,
                     "paper_over_floor": p / sf["ensemble_floor"],
                     "L0_over_paper": L0 / p, "R_Lmax_over_paper": R_deep / p,
                     "R_Lmax_over_floor": R_deep / sf["ensemble_floor"],
                     "iid_C": sf["iid_depth"]["C"], "iid_delta": sf["iid_depth"]["delta"]})
    return pd.DataFrame(rows)


def clustered(res: Results, th: Theory):
    """Beyond the paper, clustered contexts: per number of context classes K (0 = a fresh Haar
    rotation per context, fig6's runs) the fit R_L = L0 + c L^-alpha over the experiment's depths,
    the deepest loss, and the specialisation index at the deepest L beside its permutation null."""
    import pandas as pd

    from depthscale.analysis import clustered_fit
    from depthscale.registry import CLUSTERED_KS

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


TABLES: dict[str, Callable] = {"table1": table1, "table2": table2, "table3": table3,
                               "table4": table4, "table5": table5, "table6": table6,
                               "clustered": clustered}


def scaling(res: Results, th: Theory):
    """Beyond the paper: the saturating power law y = y_inf + c x^-exponent along depth (fig6's
    runs, N = d), width (L fixed) and training step (the monitor curve of each fig6 depth, over
    the steps after warmup and over the early window where the cosine rate is >= half its peak),
    per spectrum: exponent +- SE, R^2, asymptote, the first and last y of the fitted points."""
    import pandas as pd

    from depthscale.analysis import fit_series, fit_xy, time_curve, time_fit, time_window, width_series
    from depthscale.config import geometry
    from depthscale.registry import SCALING_DEPTHS, SCALING_SPECTRA, SCALING_WIDTHS, depth_set

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


TABLES["scaling"] = scaling

def looped(res: Results, th: Theory):
    """Looped stacks (beyond the paper): per model x tying (untied, B = 1, 2, 4) x depth, R, A, C,
    A - C, the trained parameter count, the gain over the one-layer model, that gain per thousand
    added parameters, and the gain over the untied model with the same parameters (looped.py)."""
    from depthscale import looped as lp

    return lp.frame(res)


TABLES["looped"] = looped


def transformer(res: Results, th: Theory):
    """Beyond the paper, the pre-LN Transformer at (0,0), k = 2: per depth R (± SE), R / Var(y*),
    A, C, A - C, (A - C)/L, the residual of R = C + (A - C)/L with R the model's own loss
    (`identity_residual`), the steps trained, the controlled nonlinear model's R at the same depth
    (fig6's run, NaN if not stored), and the fit R = L0 + c L^-alpha over the Transformer's depths
    (the same in every row, with its status)."""
    import pandas as pd

    from depthscale.analysis import fit_series
    from depthscale.registry import transformer_depths

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


TABLES["transformer"] = transformer

def markdown_table(df) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(number(row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def write_table(table_id: str, res: Results, th: Theory, out_dir: str | Path):
    """Build table `table_id` and write <out_dir>/<table_id>.csv and .md. Returns (frame, paths)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = TABLES[table_id](res, th)
    paths = [out_dir / f"{table_id}.csv", out_dir / f"{table_id}.md"]
    df.to_csv(paths[0], index=False)
    e = REGISTRY[table_id]
    paths[1].write_text(f"### {table_id}: {e.title} [preset {res.preset}]\n\n" + markdown_table(df))
    return df, paths


__all__ = ["TABLES", "fit_status", "table1", "table2", "table3", "table4", "table5", "table6", "markdown_table", "write_table"]
