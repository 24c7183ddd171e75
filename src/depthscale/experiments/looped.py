"""Beyond the paper: looped stacks, weights tied across depth (docs/beyond.md). B distinct layers
repeated L/B times (B = 1, 2, 4) for the two cascaded variants (single_stream, context_updates),
untied beside them; and the nonlinear model with one layer repeated at L = 4 against L = 1 (A_L = C_L
by construction). Figure, table and claims B1b-B1d; the per-run reading is experiments.looped_runs'.

Choices:
- the untied models are fig9's / fig11's / fig6's own runs at the same depths (same configs, same
  ids); a loop = B model at L = B is the untied B-layer model (same init, same rate:
  training.base_lr), so each looped group starts at L = 2B.
- depths stop at 8: the looped runs then cost about eight core-minutes at the cpu preset on a
  quiet machine (a depth-16 run of a cascaded variant costs 1-1.5 min, and four of them more than
  doubled that).
- conditions fixed before the cpu runs were looked at.
the runs and their reading back are experiments.looped_runs (the tests use it too).
"""

from __future__ import annotations

import math

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.claims import MissingRuns, cells_text, judged, num, point_se, seeds_text, yes
from depthscale.analysis.results import Results, Theory
from depthscale.config.paper import ORIGIN
from depthscale.config.records import Claim, Experiment, RunGroup, preset_shape, register
from depthscale.config.run import geometry

from depthscale.experiments import looped_runs as lp
from depthscale.experiments.looped_runs import (LOOPED_B, LOOPED_DEPTHS, LOOPED_GROUPS, LOOPED_MAX_DEPTH,  # noqa: F401
                                                LOOPED_MODELS)


def figure(res: Results, th: Theory):
    """Looped stacks (beyond the paper): per cascaded variant (rows), untied and B distinct layers
    repeated L/B times (B = 1, 2, 4): loss, C_L and A_L - C_L vs depth, and loss vs trained parameters.
    A tied curve starts at the untied L = B run: at L = B the looped model is that model."""
    models = (("single_stream", "single stream"), ("context_updates", "context updates"))
    fig, ax = pl.new_figure(4, len(models), width=3.4, height=3.0)
    colors = pl.colors(len(lp.TYINGS))
    letters = iter("abcdefghijklmnop")
    tying_lab = lambda B: "untied" if B == 0 else f"$B={B}$"  # noqa: E731
    for row, (model, name) in enumerate(models):
        axs = ax[4 * row:4 * row + 4]
        curves = {B: lp.curve(res, model, B) for B in lp.TYINGS}
        d, _ = preset_shape(res.preset, model)
        N = geometry(res.preset, model)["N"]
        drawn = [0, 0, 0, 0]
        for i, B in enumerate(lp.TYINGS):
            rows = curves[B]
            if not rows:
                continue
            kw = dict(marker=pl.MARKERS[i % len(pl.MARKERS)], color=colors[i], ls="-" if B == 0 else "--",
                      label=tying_lab(B))
            L = np.array([r["L"] for r in rows], float)
            for j, key in enumerate(("R", "C", "A_minus_C")):  # one seed: no SE over seeds to draw
                y = np.array([r[key] for r in rows], float)
                ok = np.isfinite(y) & ((L > 1) if j else True) & ((y > 0) if j != 1 else True)
                if ok.any():
                    pl.errorbar(axs[j], L[ok], y[ok], None, **kw)
                    drawn[j] += 1
            n = np.array([lp.n_params(model, d, N, int(Lr), B) for Lr in L], float)
            y = np.array([r["R"] for r in rows], float)
            ok = np.isfinite(y)
            if ok.any():  # a tied curve is vertical: depth adds no parameters
                axs[3].plot(n[ok], y[ok], **kw, ms=4, lw=1.1)
                drawn[3] += 1
                for Lr, nx, yy in zip(L[ok], n[ok], y[ok]):  # untied: every depth; tied: the deepest
                    if B == 0 or (Lr == L[ok].max() and ok.sum() > 1):
                        axs[3].annotate(f"$L={int(Lr)}$", (nx, yy), textcoords="offset points",
                                        xytext=(4, -3) if B else (-4, 4), ha="left" if B else "right",
                                        fontsize=7, color=colors[i])
        pl.loglog(axs[0])
        pl.logx(axs[1])
        axs[1].axhline(0.0, color="0.6", lw=0.6)
        axs[1].set_ylabel("$C_L$")
        pl.loglog(axs[2], ylabel="$A_L - C_L$")
        axs[3].set_xscale("log")
        lo, hi = axs[3].get_xlim()
        axs[3].set_xlim(lo / 1.3, hi * 1.3)  # room for the depth labels
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        counts = sorted({lp.n_params(model, d, N, r["L"], B) for B in lp.TYINGS for r in curves[B]})
        if counts:  # ticks at the parameter counts drawn (one per distinct-layer count), as integers
            axs[3].xaxis.set_major_locator(FixedLocator(counts))
            axs[3].xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
            axs[3].xaxis.set_minor_locator(NullLocator())
        axs[3].set_xlabel("trained parameters")
        axs[3].set_ylabel("loss $R_L$")
        pl.logy(axs[3])
        titles = (f"{name}: loss", f"{name}: $C_L$", f"{name}: $A_L - C_L$", f"{name}: loss vs parameters")
        for j in range(4):
            if not drawn[j]:
                pl.missing(axs[j])
            title = "tying, (0,0), $k=2$" + ("\n$B$ layers looped $L/B$ times;\nfrom the untied $L=B$ model" if j == 0 else "")
            pl.finish_legend(axs[j], len(lp.TYINGS), title)
            pl.panel_title(axs[j], next(letters), titles[j])
    return fig


def table(res: Results, th: Theory):
    """Looped stacks (beyond the paper): per model x tying (untied, B = 1, 2, 4) x depth, R, A, C,
    A - C, the trained parameter count, the gain over the one-layer model, that gain per thousand
    added parameters, and the gain over the untied model with the same parameters (looped.py)."""
    return lp.frame(res)


def _looped_cells(res, model: str, B: int) -> dict:
    """{L: cell} of one tying's curve (looped.curve's depths): seed means of R, A, C, A - C, the SE
    of R (over seeds, or the evaluation SE with one seed) and the seed count; MissingRuns naming any
    cell of the model without a run."""
    miss = [m for m in lp.missing(res) if m.startswith(model + " ")]
    if miss:
        raise MissingRuns(cells_text(miss))
    out = {}
    for row in lp.curve(res, model, B):
        L = row["L"]
        s = res.view(loop=B if B and L != B else 0).series(model, lp.TASK, lp.K, *lp.SPECTRUM, (L,))
        se, kind = point_se(s, 0)
        out[L] = {**row, "R_se": se, "se_kind": kind, "n": int(s.n[0])}
    return out


def _z(r1: dict, r2: dict) -> float:
    """(R_1 - R_2) in units of the combined SE."""
    return (r1["R"] - r2["R"]) / math.sqrt(r1["R_se"] ** 2 + r2["R_se"] ** 2)


def _cascaded_items(res):
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
        parts.append(f"{model}: R_1={num(untied[1]['R'])}±{num(untied[1]['R_se'])}, R_{L}(B=1)={num(tied[L]['R'])}"
                     f"±{num(tied[L]['R_se'])} (gain {num(untied[1]['R'] - tied[L]['R'])}, z={z:+.1f} > 2) {yes(good)}")
    return meas, ok, judged("R_Lmax(B = 1) < R_1 by more than 2 combined SE (over seeds, or evaluation SEs with one "
                            "seed), both cascaded variants", parts, "; " + seeds_text(res, ns))


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
        parts.append(f"{model} L={L}: A-C tied {num(gt)} vs untied {num(gu)} (ratio {num(ratio)} >= 0.5) {yes(good)}")
    return meas, ok, judged("(A_L - C_L) of the B = 1 model >= 0.5 × that of the untied model at the deepest tied "
                            "depth, both cascaded variants", parts, "; " + seeds_text(res, ns))


def cB1d(res, th):
    """At equal parameters looping wins: every looped B at its deepest depth beats the untied
    B-layer model (the same parameter count) beyond 2 combined SE, both cascaded models."""
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
            parts.append(f"{model} B={B}: R_{B}(untied)={num(untied[B]['R'])} -> R_{L}(looped)={num(tied[L]['R'])} "
                         f"(z={z:+.1f} > 2) {yes(good)}")
    if not meas:
        raise MissingRuns("missing runs: no looped depth at this preset")
    return meas, ok, judged("R_L(loop B) < R_B(untied) by more than 2 combined SE at the deepest looped L of every "
                            "B = 1, 2, 4, both cascaded variants", parts, "; " + seeds_text(res, ns))


CLAIMS = (
    Claim("B1b", "Beyond: with one tied layer, depth still buys loss (single_stream, context_updates)",
          "R_Lmax(B = 1) < R_1 by more than 2 combined SE, Lmax the deepest tied depth (8 at cpu), "
          "both cascaded variants, (0,0), k = 2", cB1b, ("looped",), part="beyond"),
    Claim("B1c", "Beyond: aggregation survives looping (layer disagreement A_L - C_L is kept)",
          "(A_L - C_L) of the B = 1 model >= 0.5 x that of the untied model at the same deepest depth, both "
          "cascaded variants", cB1c, ("looped",), part="beyond"),
    Claim("B1d", "Beyond: at equal parameters, looping a B-layer stack deeper beats the B-layer stack",
          "R_L(loop B) < R_B(untied) by more than 2 combined SE at the deepest looped L of every "
          "B = 1, 2, 4, both cascaded variants", cB1d, ("looped",), part="beyond"),
)


LOOPED = register(Experiment(
    "looped", "Beyond the paper: looped stacks (weights tied across depth)",
    ("nonlinear", "single_stream", "context_updates"), "difficult", (2,), "(0,0)",
    "loss, C_L and A_L - C_L vs L and loss vs parameter count for single_stream and "
    "context_updates untied and looped (B distinct layers repeated L/B times, B = 1, 2, 4); "
    "nonlinear with one layer repeated at L = 4 against L = 1 (A_L = C_L by construction)",
    LOOPED_GROUPS, reuses=("fig6", "fig9", "fig11"), part="beyond", figure=figure, table=table, claims=CLAIMS))
