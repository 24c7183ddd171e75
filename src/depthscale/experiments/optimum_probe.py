"""The optimum at small depth (issue 48 item 2; SPEC §9): are L = 1, 2 (and 4) of the (0, 0) envelope
at their optima? The argument that excludes L0 + c/L for the optimum's curve rests on it.

At (0, 0), top-2, the study's geometry, batch and largest budget, every depth of DEPTHS is trained
from many starts — the faithful start, the default scale, the constructive start with three noise
levels, random metrics with a spread of temperatures (three ranges), and for L >= 2 the best single
cosine head copied to every layer (construct_heads = 1) with two noise levels — each at two seeds,
at the rate and taper that depth chose at (0, 0) (convergence_spectra.CHOSEN_00: fixed in advance).
Read per run (`rows`): R_L on the study's evaluation contexts, the final monitor loss, and R_L − B_L
(B_L: the best equal-weight stack of L cosine heads on the same contexts) with its context-paired
SE. Per depth (`summary`): the lowest R_L over starts (the best upper bound on the optimum measured;
a minimum over starts is biased low by about its SE: the start the monitor picks is given beside),
and the starts more than 2 SE below B_L.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from depthscale.analysis import certificates, paired
from depthscale.analysis import plotting as pl
from depthscale.analysis.results import Results, Theory
from depthscale.config.records import Experiment, RunGroup, register
from depthscale.config.run import geometry, grid_variant
from depthscale.experiments import convergence as cv
from depthscale.experiments.convergence_spectra import CHOSEN_00

ID = "optimum-probe"
DEPTHS = {"smoke": (1, 2), "cpu": (1, 2, 4), "paper": (1, 2, 4)}
SEEDS = (0, 1)
NOISES = (0.02, 0.1, 0.3)  # the constructive start's W_q, W_k noise (qk_std)
SPREADS = ((2.0, 8.0), (7.0, 30.0), (15.0, 60.0))  # the random metrics' temperature ranges (tau_min, tau_max)
COPY_NOISES = (0.02, 0.1)


class Start(NamedTuple):
    name: str
    fields: dict
    depths: tuple[int, ...]  # among the preset's DEPTHS


def starts(preset: str) -> list[Start]:
    """Every start of the probe at `preset` (its depths among DEPTHS[preset])."""
    N, Ls = geometry(preset, "nonlinear")["N"], DEPTHS[preset]
    out = [Start("faithful", dict(qk_init="independent", qk_std=0.02), Ls),
           Start("default", dict(qk_init="independent", qk_std=1.0 / math.sqrt(3 * N)), Ls)]
    out += [Start(f"constructive-{n:g}", dict(qk_init="constructive", qk_std=n), Ls) for n in NOISES]
    out += [Start(f"spread-{lo:g}-{hi:g}", dict(qk_init="spread", qk_std=0.02, tau_min=lo, tau_max=hi, metric_sigma=0.5), Ls)
            for lo, hi in SPREADS]
    out += [Start(f"copies-{n:g}", dict(qk_init="constructive", qk_std=n, construct_heads=1),
                  tuple(L for L in Ls if L > 1)) for n in COPY_NOISES]
    return out


def rate(preset: str, L: int) -> dict:
    """The rate and taper depth L chose at (0, 0) (CHOSEN_00; the deepest's beyond it)."""
    name = CHOSEN_00.get(L, CHOSEN_00[max(CHOSEN_00)])
    v = grid_variant(name, geometry(preset, "nonlinear")["N"])
    return dict(lr=v["lr"], lr_depth_exp=v["lr_depth_exp"])


def run_fields(preset: str, start: Start, L: int) -> dict:
    """RunConfig fields of one start at depth L (beyond the preset's nonlinear difficult recipe)."""
    return dict(start.fields, **rate(preset, L), batch=cv.STUDY_BATCH[preset], max_steps=cv.BUDGETS[preset][-1])


def groups() -> tuple[RunGroup, ...]:
    """One group per preset, start and depth (the rate is per depth)."""
    return tuple(RunGroup("nonlinear", "difficult", 2, ((0.0, 0.0),), (L,), tuple(sorted(run_fields(p, s, L).items())), (p,))
                 for p in DEPTHS for s in starts(p) for L in s.depths)


def rows(res: Results) -> list[dict]:
    """One row per finished run: start, seed, R_L, final monitor loss, B_L and R_L − B_L with its
    context-paired SE (B_L on the run's own evaluation contexts). Computed once per Results."""
    cache = res.__dict__.setdefault("_optimum_probe_rows", None)
    if cache is None:
        cache = res.__dict__["_optimum_probe_rows"] = _rows(res)
    return cache


def _rows(res: Results) -> list[dict]:
    p, out, floors = res.preset, [], {}
    for s in starts(p):
        for L in s.depths:
            for r in res.view(**run_fields(p, s, L)).runs("nonlinear", "difficult", 2, 0.0, 0.0, L):
                if not math.isfinite(r.get("R", math.nan)):
                    continue
                got = paired.per_context(res.reader, r["run_id"])
                key = got["key"]  # (eval_key of the run's config: runs with one key share B_L's contexts)
                if key not in floors:
                    floors[key] = paired.floor_on_eval(res.reader.load_config(r["run_id"]), depths=DEPTHS[p], reader=res.reader)["sq_err_stack"]
                gap = certificates.paired_gap(got["sq_err"], floors[key][L])
                out.append({"L": L, "start": s.name, "seed": int(r["seed"]), "run_id": r["run_id"], "R": float(r["R"]),
                            "monitor": float(r.get("final_monitor_loss", math.nan)),
                            "B_L": float(np.mean(floors[key][L])), "R_minus_B": gap["diff"], "se": gap["se"],
                            "below_B_2se": bool(gap["diff"] < -2 * gap["se"])})
    return out


def summary(res: Results) -> list[dict]:
    """Per depth: runs read, the lowest R_L and its start, the start the monitor picks (lowest
    final monitor loss) and its R_L, B_L, and how many runs sit more than 2 SE below B_L."""
    out = []
    for L in DEPTHS[res.preset]:
        at = [r for r in rows(res) if r["L"] == L]
        if not at:
            continue
        low = min(at, key=lambda r: r["R"])
        pick = min(at, key=lambda r: r["monitor"] if math.isfinite(r["monitor"]) else math.inf)
        out.append({"L": L, "runs": len(at), "R_min": low["R"], "R_min_start": f"{low['start']} s{low['seed']}",
                    "R_min_minus_B": low["R_minus_B"], "R_min_se": low["se"], "monitor_pick": f"{pick['start']} s{pick['seed']}",
                    "R_monitor_pick": pick["R"], "B_L": low["B_L"], "below_B_2se": sum(r["below_B_2se"] for r in at)})
    return out


def table_frame(res: Results, th: Theory | None = None):
    import pandas as pd

    return pd.DataFrame(summary(res))


def notes(res: Results) -> list[str]:
    out = [f"Starts per depth: {', '.join(s.name for s in starts(res.preset))} (copies at L >= 2), seeds "
           f"{', '.join(map(str, SEEDS))}, {cv.BUDGETS[res.preset][-1]:,} steps of {cv.STUDY_BATCH[res.preset]} at the "
           "rate each depth chose at (0,0); R_L − B_L paired over the evaluation contexts."]
    for s in summary(res):
        out.append(f"L = {s['L']}: lowest R_L {s['R_min']:.4f} ({s['R_min_start']}; R_L − B_L {s['R_min_minus_B']:+.4f} "
                   f"± {s['R_min_se']:.4f}); the monitor picks {s['monitor_pick']} (R_L {s['R_monitor_pick']:.4f}); "
                   f"B_L {s['B_L']:.4f}; {s['below_B_2se']} of {s['runs']} runs more than 2 SE below B_L")
    return out


OFF_SCALE = 0.05  # R_L − B_L above this is drawn at the figure's top edge (a stuck start), its value written


def figure(res: Results, th: Theory):
    """Per depth, every start's R_L − B_L with its 2-SE bar (0: the best cosine stack)."""
    fig, ax = pl.new_figure(1, 1, width=7.5, height=4.2)
    ax = ax[0]
    got = rows(res)
    if not got:
        pl.missing(ax, "missing runs")
        return fig
    names = [s.name for s in starts(res.preset)]
    off = []
    for i, L in enumerate(DEPTHS[res.preset]):
        at = [r for r in got if r["L"] == L]
        x = [names.index(r["start"]) + 0.15 * r["seed"] + 0.02 * i for r in at]
        on = [k for k, r in enumerate(at) if r["R_minus_B"] <= OFF_SCALE]
        ax.errorbar([x[k] for k in on], [at[k]["R_minus_B"] for k in on], yerr=[2 * at[k]["se"] for k in on],
                    ls="none", marker="o", ms=4, capsize=2, label=f"L = {L}", color=f"C{i}")
        for k in (k for k in range(len(at)) if k not in on):  # a stuck start: at the top edge, its value beside
            ax.plot(x[k], OFF_SCALE, marker="^", ms=6, color=f"C{i}", ls="none")
            ax.annotate(f"{at[k]['R_minus_B']:+.2f}", (x[k], OFF_SCALE), textcoords="offset points", xytext=(4, -10),
                        fontsize=7, color=f"C{i}")
            off.append(f"L={L} {at[k]['start']} s{at[k]['seed']} ({at[k]['R_minus_B']:+.3g})")
    if off:
        ax.set_ylim(top=OFF_SCALE * 1.08)
        pl.note(ax, f"triangles: runs above +{OFF_SCALE} (off the scale, their R_L − B_L beside them): " + ", ".join(off))
    ax.axhline(0.0, color="k", lw=0.8, ls=":", label="$B_L$ (best stack of L cosine heads)")
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("$R_L - B_L$ (bars: 2 SE, paired over contexts)")
    ax.set_title("(0,0), top-2: every start against the reference $B_L$", loc="left", fontsize=9)
    pl.finish_legend(ax)
    return fig


OPTIMUM_PROBE = register(Experiment(
    ID, "Study: the optimum at L = 1, 2, 4 — many starts against the best cosine stacks", ("nonlinear",), "difficult",
    (2,), "(0,0)", "every start's R_L, final monitor loss and R_L − B_L ± SE per depth; the lowest R_L per depth",
    groups(), part="study", seeds=SEEDS, figure=figure, table=table_frame, notes=notes))


__all__ = ["OPTIMUM_PROBE", "ID", "DEPTHS", "SEEDS", "Start", "starts", "rate", "run_fields", "groups", "rows", "summary",
           "table_frame", "notes", "figure"]
