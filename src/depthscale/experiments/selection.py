"""Selection loss, one layer against the deepest (SPEC §7): fig13 (Q_L(q) and ΔQ(q)), with claim 10.

Operational choices:
- 10: Delta Q(q) from paired.bootstrap_dQ (L = 1 against Lmax, the bootstrap over evaluation
  contexts). One seed: Delta Q and its bootstrap SE. Several: the mean over seeds, and the larger
  of the SE over seeds and the bootstrap SE of that mean (sqrt(sum se_i^2)/n). PASS iff
  Delta Q(q) > 2 SE for every q >= 50.
"""

from __future__ import annotations

import math

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.claims import (MissingRuns, call_paired, finite_runs, gate, gated, judged, num, outcome, paired_or_fail,
                                        require, yes)
from depthscale.analysis.curves import selection_quantiles
from depthscale.analysis.results import Results, Theory
from depthscale.config.paper import ORIGIN
from depthscale.config.records import Claim, Experiment, RunGroup, depth_set, register


def fig13(res: Results, th: Theory):
    """(a) Q_1(q) and Q_Lmax(q) with their SEs over seeds; (b) Delta Q(q) with the SE claim 10
    judges it by (seeds and bootstrap; drawn only where the store holds the models), on a linear
    axis like (a), so the two panels show the same difference."""
    fig, ax = pl.new_figure(2)
    sq = selection_quantiles(res)
    if sq is None:
        for i in range(2):
            pl.missing(ax[i])
    else:
        pl.errorbar(ax[0], sq["q"], sq["Q1"], sq["Q1_se"], marker="o", color="tab:blue", label=f"{sq['L1']}")
        pl.errorbar(ax[0], sq["q"], sq["QL"], sq["QL_se"], marker="s", color="tab:red", label=f"{sq['Lmax']}")
        pl.finish_legend(ax[0], 2, "depth $L$")
        q, dQ, se, how = sq["q"], sq["dQ"], sq["dQ_se"], "SE over seeds"
        try:
            q, dQ, se, how = delta_q(res)
        except Exception as e:  # noqa: BLE001 - no models to bootstrap: the seeds' SE, and the caption says why
            pl.note(ax[1], f"error bars: SE over seeds only ({type(e).__name__}: {e})")
        pl.errorbar(ax[1], q, dQ, se, marker="o", color="tab:purple", label=f"±1 SE: {how}")
        ax[1].axhline(0, color="0.5", lw=0.8)
        pl.finish_legend(ax[1], 1)
    ax[0].set_xlabel("percentile $q$")
    ax[0].set_ylabel(r"$Q_L(q)$ of $E_L = |\bar p - p^*|^2$")
    pl.panel_title(ax[0], "a", "selection-loss percentiles, (0,0), $k=2$")
    ax[1].set_xlabel("percentile $q$")
    ax[1].set_ylabel(r"$\Delta Q(q) = Q_1(q) - Q_{L_{\max}}(q)$")
    pl.panel_title(ax[1], "b", "gain from depth per percentile")
    return fig


def delta_q(res: Results):
    """(q, Delta Q(q), its SE, how the SE was made) of L = 1 against Lmax, paired per seed by the
    bootstrap over evaluation contexts (paired.bootstrap_dQ): one seed, its bootstrap SE; several,
    the larger of the SE over seeds and the bootstrap SE of their mean. Raises MissingRuns or
    CannotJudge where it cannot be made."""
    L1, Lmax = depth_set(res.preset, "ends")
    require(res, "nonlinear", "difficult", 2, ORIGIN, (L1, Lmax))
    pm = paired_or_fail(res)
    one = finite_runs(res, "nonlinear", "difficult", 2, 0.0, 0.0, L1)
    deep = finite_runs(res, "nonlinear", "difficult", 2, 0.0, 0.0, Lmax)
    seeds = sorted(set(one) & set(deep))
    if not seeds:
        raise MissingRuns(f"missing runs: no seed at both L={L1} and L={Lmax}")
    got = [call_paired(pm.bootstrap_dQ, res.reader, one[s]["run_id"], deep[s]["run_id"]) for s in seeds]
    q = np.asarray(got[0]["q"], dtype=float)
    dQ = np.stack([np.asarray(g["dQ"], dtype=float) for g in got])
    bse = np.stack([np.asarray(g["se"], dtype=float) for g in got])
    n = len(seeds)
    mean = dQ.mean(0)
    boot = np.sqrt((bse ** 2).sum(0)) / n
    if n > 1:
        return q, mean, np.maximum(dQ.std(0, ddof=1) / math.sqrt(n), boot), \
            f"the larger of the SE over {n} seeds and the bootstrap SE of their mean"
    return q, mean, boot, "bootstrap SE over evaluation contexts (one seed)"


def judged_tail(q, mean, se) -> dict:
    """Claim 10's decision in numbers: over q >= 50, the smallest ΔQ / SE and where, and how many q
    lie beyond 2 SE (the "Measured" line listed q = 0-15, which decide nothing)."""
    upper = np.flatnonzero((q >= 50) & np.isfinite(se) & (se > 0))
    if not upper.size:
        return {"n_beyond_2se": 0, "n": int((q >= 50).sum())}
    z = mean[upper] / se[upper]
    i = int(np.argmin(z))
    return {"min_dQ_over_se": float(z[i]), "at_q": float(q[upper[i]]), "n_beyond_2se": int((z > 2).sum()),
            "n": int((q >= 50).sum())}


def c10(res, th):
    L1, Lmax = depth_set(res.preset, "ends")
    q, mean, se, how = delta_q(res)
    upper = q >= 50
    beyond = mean[upper] > 2 * se[upper]
    ok = bool(upper.any() and np.all(np.isfinite(se[upper])) and np.all(beyond))
    cert, problem = gate(res, [("nonlinear", "difficult", 2, 0.0, 0.0, (L1, Lmax))])
    parts = [f"q={int(x)}: {num(v)}±{num(e)} {yes(bool(v > 2 * e))}" for x, v, e in zip(q[upper], mean[upper], se[upper])]
    parts.append(f"beside: lowest q={int(q[0])}: {num(mean[0])}±{num(se[0])}")
    if problem:
        parts.append(f"→ {outcome(gated(ok, problem), problem, ok)}")
    meas = {"q>=50 (judged)": judged_tail(q, mean, se)}  # first: the report's "Measured" line shows the first few
    order = list(np.flatnonzero(upper)) + list(np.flatnonzero(~upper))  # the judged q's, then the rest beside
    meas.update({f"q{int(q[i])}": {"dQ": float(mean[i]), "se": float(se[i])} for i in order})
    meas["certificates"] = cert
    return meas, gated(ok, problem), judged(f"ΔQ(q) = Q_{L1}(q) - Q_{Lmax}(q) > 2 SE for every q >= 50; SE: {how}; "
                                            f"L={L1} or L={Lmax} failing a certificate (SPEC §4), or fewer than 3 "
                                            "seeds on the envelope: INCONCLUSIVE", parts)


CLAIMS = (
    Claim("10", "Depth improves selection in the upper tail",
          "ΔQ(q) > 0 for every q >= 50, beyond 2 SE (bootstrap over evaluation contexts)", c10, ("fig13",), part="paper"),
)


FIG13 = register(Experiment(
    "fig13", "Selection loss: one layer vs the deepest", ("nonlinear",), "difficult",
    (2,), "(0,0)", "Q_L(q) and Delta Q(q) = Q_1(q) - Q_Lmax(q)",
    (RunGroup("nonlinear", "difficult", 2, ORIGIN, "ends"),), reuses=("fig6",), figure=fig13, claims=CLAIMS))
