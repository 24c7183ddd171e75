"""The budget ladder (SPEC §9, a study, not a claim): does the faithful start reach the paper's
inverse-depth shape as the training budget grows, or is the shape a property of the spread start?

Superseded by the convergence study (experiments/convergence.py, `reproduce convergence`; issue 33):
the ladder judged the faithful start alone on its best monitor step, while SPEC §4 now reports the
final model and chooses each depth's recipe from a fixed grid by the monitor. It stays registered
(`budget`) so that its committed results under studies/results/budget/ can be read and redrawn.

A study (part "study": run only when named; the report adds it when the store has its runs), with
its decision rule and outcome as notes under its figure and table.

Runs: `BUDGET` below (top-2, d = N = 16, P = 64, batch 512, budgets of BUDGET_STEPS steps,
each run on its own cosine schedule to its cap, both starts of
config.RECIPE_VARIANTS, 3 seeds). Read here, per (start, budget, spectrum):
- per seed: the fit R_L = L0 + c L^-alpha (SPEC §6.1) over the preset's depths; alpha, L0 and R²
  are then given as mean ± SE over the seeds whose fit is well posed (`n_ok` of `n_seeds`);
- the fit of the seed-mean curve (the one claim 5a would judge), its alpha ± SE, R² and status;
- seed means of R_L, C_L and A_L - C_L at every depth.

The decision rule (SPEC §9) is applied as written there: the paper's shape is reproduced only if
the faithful start reaches claim 5a's window (alpha in [0.8, 1.2] with R² >= 0.99, on the fit of
the seed-mean curve) at the largest budget AND the trend with budget points there (alpha at the
largest budget closer to the window than at the smallest, by more than 2 SE over seeds); if only
the spread start reaches the window, the shape is a property of the start.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.curves import fit_series, fit_xy
from depthscale.analysis.results import Results, Theory, mean_se
from depthscale.base.formatting import label
from depthscale.config.paper import ORIGIN, TOP2_SPECTRA
from depthscale.config.records import Experiment, RunGroup, depth_set, register, variant_fields

# the budget ladder (SPEC §9, a study; docs/recipe.md §12): top-2, d = N = 16, P = 64, batch 512,
# budgets x2 up to the paper's 20,000 steps; every run goes to its cap (min_steps = max_steps), on the
# cosine schedule of its own budget; both starts, 3 seeds at every preset. cpu: (0, 0), depths 1-64;
# paper: the ten top-2 spectra, depths 1-256
BUDGET_BATCH = 512
BUDGET_STEPS = (1250, 2500, 5000, 10000, 20000)
BUDGET_SEEDS = (0, 1, 2)
BUDGET_RECIPES = ("faithful", "spread")

ALPHA_WINDOW = (0.8, 1.2)  # claim 5a's window
R2_MIN = 0.99  # claim 5a's R²


def budget_view(res: Results, recipe: str, steps: int) -> Results:
    """The runs of one start at one budget (the fields of the registry's budget groups)."""
    return res.view(**dict(variant_fields(recipe)), batch=BUDGET_BATCH, max_steps=steps, min_steps=steps)


def ladder_spectra(preset: str) -> tuple:
    """The spectra the ladder runs at `preset` (registry groups of that preset)."""
    out = []
    for g in BUDGET.groups_for(preset):
        out += [s for s in g.spectra if s not in out]
    return tuple(out) or ORIGIN


def _rows(view: Results, a: float, b: float) -> list[dict]:
    """Every finished run of the spectrum in the view, all depths and seeds."""
    return [r for L in depth_set(view.preset, "all") for r in view.runs("nonlinear", "difficult", 2, a, b, L)]


def _per_seed(view: Results, a: float, b: float) -> list[dict]:
    """One fit per seed (the seed's R_L over depth)."""
    by_seed: dict[int, dict[int, float]] = {}
    for row in _rows(view, a, b):
        if math.isfinite(row.get("R", math.nan)):
            by_seed.setdefault(int(row["seed"]), {})[int(row["L"])] = float(row["R"])
    out = []
    for seed, curve in sorted(by_seed.items()):
        L = np.array(sorted(curve), float)
        f = fit_xy(L, np.array([curve[int(x)] for x in L]), True)
        out.append({"seed": seed, "n_depths": len(L), "fit": f})
    return out


def ladder(res: Results) -> list[dict]:
    """One row per (start, budget, spectrum) with any finished run."""
    rows = []
    for recipe in BUDGET_RECIPES:
        for steps in BUDGET_STEPS:
            v = budget_view(res, recipe, steps)
            for a, b in ladder_spectra(res.preset):
                s = v.series("nonlinear", "difficult", 2, a, b)
                if not s:
                    continue
                seeds = _per_seed(v, a, b)
                ok = [x["fit"] for x in seeds if x["fit"] is not None and x["fit"].ok]
                alpha, alpha_se = mean_se([f.alpha for f in ok])
                L0, L0_se = mean_se([f.L0 for f in ok])
                r2, _ = mean_se([f.r2 for f in ok])
                f = fit_series(s, True)
                rows.append({
                    "recipe": recipe, "steps": steps, "budget": steps * BUDGET_BATCH, "a": a, "b": b,
                    "n_seeds": int(np.max(s.n)) if len(s.n) else 0, "n_fits_ok": len(ok),
                    "alpha": alpha, "alpha_se": alpha_se, "L0": L0, "L0_se": L0_se, "r2": r2,
                    "mean_fit_alpha": f.alpha if f else math.nan, "mean_fit_alpha_se": f.alpha_se if f else math.nan,
                    "mean_fit_L0": f.L0 if f else math.nan, "mean_fit_r2": f.r2 if f else math.nan,
                    "mean_fit_status": (f.status if f.ok else f"degenerate: {f.reason}") if f else "no fit",
                    "depths": s.depths.tolist(), "R": s.get("R").tolist(), "R_se_seeds": s.se["R"].tolist(),
                    "C": s.get("C").tolist(), "gap": s.get("gap").tolist(),
                    "complete": not s.missing and (len(s.n) > 0 and int(np.min(s.n)) == len(BUDGET_SEEDS)),
                })
    return rows


def _in_window(row: dict) -> bool:
    return (row["mean_fit_status"] == "ok" and ALPHA_WINDOW[0] <= row["mean_fit_alpha"] <= ALPHA_WINDOW[1]
            and row["mean_fit_r2"] >= R2_MIN)


def _distance(alpha: float) -> float:
    """How far alpha lies outside claim 5a's window (0 inside)."""
    lo, hi = ALPHA_WINDOW
    return max(lo - alpha, alpha - hi, 0.0)


def decision(rows: list[dict], a: float = 0.0, b: float = 0.0) -> dict:
    """SPEC §9's decision rule at one spectrum, on the budgets whose runs are all there."""
    by = {r: sorted([x for x in rows if x["recipe"] == r and (x["a"], x["b"]) == (a, b) and x["complete"]],
                    key=lambda x: x["steps"]) for r in BUDGET_RECIPES}
    out = {"spectrum": label(a, b), "budgets": {r: [x["steps"] for x in v] for r, v in by.items()}}
    if not by["faithful"]:
        out.update(outcome="undecided", text=f"{label(a, b)}: no complete budget of the faithful start yet")
        return out
    top = {r: (v[-1] if v else None) for r, v in by.items()}
    # the trend runs from the smallest budget whose seeds' fits are well posed (a budget where every
    # seed's fit is degenerate has no per-seed alpha to compare) to the largest
    f_hi = by["faithful"][-1]
    f_lo = next((x for x in by["faithful"] if math.isfinite(x["alpha"])), f_hi)
    reach = {r: (t is not None and _in_window(t)) for r, t in top.items()}
    se = math.hypot(f_lo["alpha_se"], f_hi["alpha_se"]) if f_lo is not f_hi else math.nan
    closer = _distance(f_lo["alpha"]) - _distance(f_hi["alpha"])
    trend = bool(f_lo is not f_hi and math.isfinite(se) and closer > 2 * se) or (
        f_lo is not f_hi and _distance(f_lo["alpha"]) == 0 == _distance(f_hi["alpha"]))
    largest = max(BUDGET_STEPS)
    full = f_hi["steps"] == largest
    if reach["faithful"] and trend and full:
        outcome = "reproduced"
    elif reach["spread"] and not reach["faithful"] and full:
        outcome = "property of the start"
    elif full:
        outcome = "not reproduced"
    else:
        outcome = "undecided"
    def alpha_txt(t):
        return (f"α {t['mean_fit_alpha']:.2f} ± {t['mean_fit_alpha_se']:.2f} (R² {t['mean_fit_r2']:.3f}; "
                f"per-seed α {t['alpha']:.2f} ± {t['alpha_se']:.2f}) at {t['steps']:,} steps")
    parts = [f"faithful: {alpha_txt(f_hi)}" + (" — in the window" if reach["faithful"] else " — outside the window")]
    skipped = [x["steps"] for x in by["faithful"] if x["steps"] < f_lo["steps"]]
    if skipped:
        parts.append(f"faithful at {', '.join(f'{n:,}' for n in skipped)} steps: no seed's fit well posed "
                     f"(fit of the seed-mean curve: {'; '.join(x['mean_fit_status'] for x in by['faithful'] if x['steps'] in skipped)})")
    if f_lo is not f_hi:
        parts.append(f"faithful trend {f_lo['steps']:,} → {f_hi['steps']:,} steps: per-seed α {f_lo['alpha']:.2f} → "
                     f"{f_hi['alpha']:.2f} (distance to the window shrinks by {closer:+.2f}, 2 SE = {2 * se:.2f}: "
                     f"{'points there' if trend else 'does not point there'})")
    if top["spread"] is not None:
        parts.append(f"spread: {alpha_txt(top['spread'])}" + (" — in the window" if reach["spread"] else " — outside"))
    if not full:
        parts.append(f"the largest budget ({largest:,} steps) is not complete yet")
    out.update(outcome=outcome, faithful_in_window=reach["faithful"], spread_in_window=reach["spread"],
               trend_points_there=trend, text=f"{label(a, b)}: {outcome}. " + "; ".join(parts))
    return out


RULE = ("SPEC §9: the paper's shape is reproduced only if the faithful start reaches claim 5a's window "
        "(α in [0.8, 1.2] with R² ≥ 0.99) at the largest budget and the trend with budget points there "
        "(per-seed α moves towards the window by more than 2 SE from the smallest to the largest budget); "
        "if only the spread variant reaches it, the shape is a property of the start.")


# ---------------------------------------------------------------- figure and table

def budget_groups() -> tuple[RunGroup, ...]:
    out = []
    for recipe in BUDGET_RECIPES:
        for steps in BUDGET_STEPS:
            f = variant_fields(recipe) + (("batch", BUDGET_BATCH), ("max_steps", steps), ("min_steps", steps))
            out.append(RunGroup("nonlinear", "difficult", 2, ORIGIN, "all", f, ("cpu",)))
            out.append(RunGroup("nonlinear", "difficult", 2, TOP2_SPECTRA, "all", f, ("paper",)))
    return tuple(out)


def figure(res: Results, th: Theory):
    """(a) α ± SE over seeds against the budget, both starts, claim 5a's window shaded; (b, c) R_L
    against L per budget for each start; (d) A_L - C_L against L per budget (faithful solid, spread
    dashed). First spectrum of the ladder ((0, 0) at cpu)."""
    rows = ladder(res)
    a, b = ladder_spectra(res.preset)[0]
    rows = [r for r in rows if (r["a"], r["b"]) == (a, b)]
    fig, ax = pl.new_figure(2, 2, width=4.6, height=3.6)
    ax[0].axhspan(*ALPHA_WINDOW, color="0.9", zorder=0, label="claim 5a window")
    for i, recipe in enumerate(BUDGET_RECIPES):
        rr = sorted([r for r in rows if r["recipe"] == recipe], key=lambda r: r["budget"])
        if rr:
            x = np.array([r["budget"] for r in rr], float) * (1.04 if i else 1.0)
            ax[0].errorbar(x, [r["alpha"] for r in rr], yerr=[r["alpha_se"] if math.isfinite(r["alpha_se"]) else 0
                                                              for r in rr],
                           marker=pl.MARKERS[i], ls="-" if recipe == "faithful" else "--", capsize=2,
                           label=f"{recipe} ({rr[-1]['n_seeds']} seeds)")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("training budget (steps × 512 contexts)")
    ax[0].set_ylabel(r"fitted $\alpha$ (mean ± SE over seeds)")
    pl.finish_legend(ax[0], title="start")
    pl.panel_title(ax[0], "a", rf"depth exponent vs budget, {label(a, b)}")
    for j, recipe in enumerate(BUDGET_RECIPES):
        axj = ax[1 + j]
        rr = sorted([r for r in rows if r["recipe"] == recipe], key=lambda r: r["steps"])
        cols = pl.colors(len(BUDGET_STEPS))
        for r in rr:
            col = cols[BUDGET_STEPS.index(r["steps"])]
            axj.plot(r["depths"], r["R"], marker="o", ms=3, color=col, label=f"{r['steps']:,} steps")
        if not rr:
            pl.missing(axj)
        pl.loglog(axj)
        pl.finish_legend(axj, len(rr), "budget")
        pl.panel_title(axj, "bc"[j], f"$R_L$ per budget, {recipe} start")
    gap_panel(ax[3], rows, BUDGET_STEPS, "f: faithful, s: spread",
              lambda r: {"ls": "-" if r["recipe"] == "faithful" else "--", "label": f"{r['recipe'][0]}. {r['steps']:,}"})
    pl.panel_title(ax[3], "d", "layer disagreement per budget")
    return fig


def gap_panel(ax, rows: list[dict], budgets: tuple[int, ...], title: str, style) -> None:
    """A_L - C_L against L (L > 1, where positive) of each row (its depths, gap and steps), coloured
    by its budget's place in `budgets`, with `style(row)`'s plot arguments (its label among them)."""
    cols = pl.colors(len(budgets))
    for r in rows:
        d, g = np.array(r["depths"]), np.array(r["gap"], float)
        ok = (d > 1) & np.isfinite(g) & (g > 0)
        ax.plot(d[ok], g[ok], marker="o", ms=3, color=cols[budgets.index(r["steps"])], **style(r))
    if rows:
        pl.loglog(ax, ylabel="$A_L - C_L$")
        pl.finish_legend(ax, title=title)
    else:
        pl.missing(ax)


def table(res: Results, th: Theory | None = None) -> list[dict]:
    """One row per (start, budget, spectrum): the numbers of `ladder` without the per-depth lists,
    C_L and A_L - C_L at the deepest depth, and the decision at each spectrum as a last row."""
    rows = ladder(res)
    out = []
    for r in rows:
        out.append({"start": r["recipe"], "steps": r["steps"], "spectrum": label(r["a"], r["b"]),
                    "seeds": r["n_seeds"], "alpha (seeds)": r["alpha"], "alpha SE": r["alpha_se"],
                    "R2 (seeds)": r["r2"], "L0 (seeds)": r["L0"], "L0 SE": r["L0_se"],
                    "alpha (mean curve)": r["mean_fit_alpha"], "R2 (mean curve)": r["mean_fit_r2"],
                    "fit": r["mean_fit_status"], "R_1": r["R"][0], "R_Lmax": r["R"][-1],
                    "C_Lmax": r["C"][-1], "A-C_Lmax": r["gap"][-1]})
    return out


def table_frame(res: Results, th: Theory):
    import pandas as pd

    return pd.DataFrame(table(res, th))


def notes(res: Results) -> list[str]:
    """The rule and its outcome at each spectrum, as lines for the report."""
    return [f"Decision rule — {RULE}"] + [f"Outcome — {d['text']}" for d in decisions(res)]


def decisions(res: Results) -> list[dict]:
    rows = ladder(res)
    return [decision(rows, a, b) for a, b in ladder_spectra(res.preset)]


def export(res: Results, out_dir: str | Path) -> list[Path]:
    """The ladder's small result files (committed under studies/results/budget/): per-run rows
    (ladder_runs.csv), the summary per start and budget (ladder.csv) and the decision (decision.json)."""
    import pandas as pd

    from depthscale.base.atomic import write_json_atomic, write_text_atomic

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    for recipe in BUDGET_RECIPES:
        for steps in BUDGET_STEPS:
            v = budget_view(res, recipe, steps)
            for a, b in ladder_spectra(res.preset):
                for row in _rows(v, a, b):
                    runs.append({"start": recipe, "steps": steps, "a": a, "b": b, "seed": row["seed"], "L": row["L"],
                                 **{k: row.get(k) for k in ("R", "R_se", "A", "C", "best_step",
                                                            "final_monitor_loss", "train_seconds", "run_id")}})
    p1 = out_dir / "ladder_runs.csv"
    write_text_atomic(p1, pd.DataFrame(runs).sort_values(["start", "steps", "a", "b", "L", "seed"]).to_csv(index=False)
                      if runs else "")
    p2 = out_dir / "ladder.csv"
    write_text_atomic(p2, pd.DataFrame(table(res)).to_csv(index=False))
    p3 = out_dir / "decision.json"
    write_json_atomic(p3, {"rule": RULE, "decisions": decisions(res), "preset": res.preset})
    return [p1, p2, p3]


BUDGET = register(Experiment(
    "budget", "Study: the budget ladder (faithful start vs spread variant)", ("nonlinear",),
    "difficult", (2,), "cpu: (0,0); paper: the ten top-2 spectra",
    "alpha +- SE over seeds, R^2, L0, C_L and A_L - C_L per training budget (steps x 512) for "
    "both starts; SPEC §9's decision rule", budget_groups(), part="study", seeds=BUDGET_SEEDS,
    figure=figure, table=table_frame, notes=notes))


__all__ = ["BUDGET", "BUDGET_BATCH", "BUDGET_STEPS", "BUDGET_SEEDS", "BUDGET_RECIPES", "budget_groups", "ladder",
           "decision", "decisions", "figure", "table", "table_frame", "notes", "export", "budget_view", "RULE",
           "ALPHA_WINDOW"]
