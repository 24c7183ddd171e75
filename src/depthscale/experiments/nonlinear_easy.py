"""Nonlinear attention on the easy task (SPEC §7): fig4 (one layer suffices; the top-1 attention
mass during training), with claim 3.

Operational choices:
- 3: R_1 / Var(y*) (both seed means at L = 1) < 1%; for every L > 1 the paired difference
  R_1 - R_L on shared evaluation contexts (paired.paired_difference, one seed: its own SE; several:
  mean and SE over the per-seed differences) is not > 2 SE; top-1 mass > 0.95 at every depth.
"""

from __future__ import annotations

import math

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.claims import (MissingRuns, call_paired, combine, finite_runs, gate, gated, judged, num, outcome,
                                        paired_or_fail, require, seeds_text, yes)
from depthscale.analysis.results import Results, Theory
from depthscale.base.formatting import label
from depthscale.config.paper import FIG4_SPECTRA
from depthscale.config.records import Claim, Experiment, RunGroup, depth_set, register

G4 = RunGroup("nonlinear", "easy", 1, FIG4_SPECTRA)


def one_percent_line(res: Results):
    """hlines for loss_panel: claim 3's bound 1% of Var(y*) (the seed mean at L = 1) of each spectrum."""
    def line(k, a, b):
        v = res.series("nonlinear", "easy", k, a, b).get("var_ystar")
        return (0.01 * float(v[0]), None, ":") if len(v) and np.isfinite(v[0]) else None
    return lambda k, a, b: [line(k, a, b)] if line(k, a, b) else None


def fig4(res: Results, th: Theory):
    fig, ax = pl.new_figure(3)
    for i, (sel, name) in enumerate(((lambda s: s[1] == 0, "$b=0$"), (lambda s: s[0] == 0, "$a=0$"))):
        pl.loss_panel(ax[i], res, "nonlinear", "easy", pl.pairs(1, [s for s in FIG4_SPECTRA if sel(s)]),
                      hlines=one_percent_line(res), eval_se="R_se")
        pl.panel_title(ax[i], "ab"[i], f"nonlinear, easy, {name}; dotted: 1% of Var($y^*$)")
    pl.note(fig, "(a, b) dotted: claim 3's bound R_1 < 1% of Var(y*), per spectrum in its colour; 'depth does not "
                 "help' is judged on the paired difference R_1 - R_L over shared contexts and its own SE, not on "
                 "these error bars")
    drawn = 0
    depths = depth_set(res.preset, "all")
    for L, col in zip(depths, pl.colors(len(depths))):
        runs = res.runs("nonlinear", "easy", 1, 1.0, 0.0, L)
        cur = res.curves(runs[0]["run_id"]) if runs else None
        if not cur or not cur.get("step"):
            continue
        y = np.asarray(cur["top1_mass"], float)
        ax[2].plot(cur["step"], y, color=col, lw=1.1, label=f"{L}")
        drawn += 1
    ax[2].set_xlabel("training step")
    ax[2].set_ylabel("top-1 attention mass")
    ax[2].set_ylim(-0.02, 1.02)
    if not drawn:
        pl.missing(ax[2], "missing runs or curves")
    pl.finish_legend(ax[2], drawn, "depth $L$")
    pl.panel_title(ax[2], "c", "top-1 mass during training at (1,0), seed 0")
    return fig


def c3(res, th):
    require(res, "nonlinear", "easy", 1, FIG4_SPECTRA)
    pm = paired_or_fail(res)
    meas, parts, verdicts, ns = {}, [], [], []
    for a, b in FIG4_SPECTRA:
        s = res.series("nonlinear", "easy", 1, a, b)
        if int(s.depths[0]) != 1:
            raise MissingRuns(f"missing runs: nonlinear/easy {label(a, b)} L=1")
        ns += s.n.tolist()
        var = float(s.get("var_ystar")[0])
        R = s.get("R")
        R1 = float(R[0]) / var
        top1 = s.get("top1_mass")
        unmeasured = [n for n, v in (("R_1", R[0]), ("Var(y*)", var), ("the top-1 mass", top1))
                      if not np.all(np.isfinite(v))]
        if unmeasured:  # never judged on what was not measured: INCONCLUSIVE, not a NO
            raise MissingRuns(f"missing runs: nonlinear/easy {label(a, b)}: {' and '.join(unmeasured)} not measured")
        top1_ok = bool(np.all(top1 > 0.95))
        one = finite_runs(res, "nonlinear", "easy", 1, a, b, 1)
        diffs, helps = {}, []
        for L in s.depths[1:].tolist():
            deep = finite_runs(res, "nonlinear", "easy", 1, a, b, L)
            seeds = sorted(set(one) & set(deep))
            if not seeds:
                raise MissingRuns(f"missing runs: nonlinear/easy {label(a, b)}: no seed at both L=1 and L={L}")
            got = [call_paired(pm.paired_difference, res.reader, one[sd]["run_id"], deep[sd]["run_id"])
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
        cert, problem = gate(res, [("nonlinear", "easy", 1, a, b, None)])
        verdicts.append(gated(good, problem))
        meas[label(a, b)] = {"R1_over_var": R1, "top1_min": float(np.nanmin(top1)), "certificates": cert,
                             "verdict": verdicts[-1],
                             "paired_R1_minus_RL": {f"L={L}": {"diff": d_, "se": e_} for L, (d_, e_) in diffs.items()}}
        parts.append(f"{label(a, b)} R_1/Var(y*)={num(R1)} (< 0.01 {yes(R1 < 0.01)}); R_1 - R_L: "
                     + ", ".join(f"L={L} {num(d_)}±{num(e_)}" for L, (d_, e_) in diffs.items())
                     + (f" (depth helps at L={','.join(map(str, helps))})" if helps else " (none > 2 SE)")
                     + f"; top-1 mass min {num(np.nanmin(top1))} (> 0.95 {yes(top1_ok)}) → "
                     + outcome(verdicts[-1], problem, good))
    return meas, combine(verdicts), judged("R_1 < 1% of Var(y*); no paired difference R_1 - R_L (shared evaluation "
                            "contexts; several seeds: mean and SE over seeds) > 2 SE; top-1 mass > 0.95 at every depth; "
                            "a spectrum reading a depth that fails a certificate (SPEC §4) INCONCLUSIVE",
                            parts, "; " + seeds_text(res, ns))


CLAIMS = (
    Claim("3", "Nonlinear, easy: one layer suffices",
          "R_1 < 1% of Var(y*); depth does not help: no R_L below R_1 by more than 2 SE of the paired difference "
          "R_1 - R_L; top-1 mass > 0.95; every fig4 spectrum", c3, ("fig4",), part="paper"),
)


FIG4 = register(Experiment(
    "fig4", "Nonlinear attention, easy task: loss against depth (the paper: one layer suffices)",
    ("nonlinear",), "easy", (), "b=0: a in {0,0.25,0.5,1}; a=0: b in {0,0.25,0.5,1}",
    "loss vs L; (c) top-1 attention mass vs training step at (1,0)", (G4,), figure=fig4, claims=CLAIMS))
