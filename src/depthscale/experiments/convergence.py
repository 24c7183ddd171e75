"""The convergence study (SPEC §9, a study, not a claim; it replaces the budget ladder): is the
measured depth shape that of converged models, and does it reach the paper's law?

Two phases at (0, 0), top-2, d = N = 16, P = 64 at cpu (the smoke preset: its own small geometry):
1. the recipe grid (config.grid_names: start x rate x taper, 18 points) at one budget
   (`GRID_STEPS`), `GRID_SEEDS`; depthscale.analysis.selection picks, per depth, the point with the lowest
   seed-mean *final monitor loss* (never the evaluation loss);
2. the chosen points, and the faithful start as trained (faithful-3e-3-flat, the paper's
   procedure as far as it is known), at every budget of `BUDGETS` with `BUDGET_SEEDS`
   (`followup`: phase 2's runs depend on phase 1's results).
Read per budget (`study_rows`): the envelope's seed-mean R_L with its per-seed values, C_L and
A_L - C_L, the fit R_L = L0 + c L^-alpha of the seed-mean curve (alpha ± SE, R², L0) and claim 5a's
criterion on it; the faithful start's R_L and fit beside it. Certificates (SPEC §4) and the power
of 5a (SPEC §9) per row: `certify_row` (depthscale.analysis.certificates on the row's runs: doubling,
construction against B_L on their evaluation contexts, budget against half the budget) and
`power_row` (depthscale.analysis.power: 5a's criterion simulated under R_L = L0 + c/L with each depth's SE
over seeds); a row where they cannot be computed says why and is undetermined.

The decision rule (SPEC §9): *reproduced* if the certified envelope passes 5a at the largest
budget; *not reproduced* if it fails 5a there with power >= 0.8; otherwise *undetermined*.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from depthscale.analysis import certificates, power
from depthscale.analysis import plotting as pl
from depthscale.analysis.curves import fit_xy
from depthscale.analysis.results import Results, Theory
from depthscale.analysis.selection import RULE as SELECTION_RULE
from depthscale.analysis.selection import cells_from_results, select
from depthscale.base.errors import InputError
from depthscale.base.formatting import label
from depthscale.config.paper import ORIGIN
from depthscale.config.records import PRESET_DEPTHS, Experiment, RunGroup, register
from depthscale.config.run import geometry, grid_names, grid_variant, make_config

FAITHFUL = "faithful-3e-3-flat"  # the faithful start as trained (SPEC §3.4: qk_std 0.02, lr 3e-3, one rate)
STUDY_BATCH = {"smoke": 64, "cpu": 512, "paper": 512}
# phase 1's budget; smoke's is not the smoke preset's 60 steps, so that the smoke preset's default
# runs (= grid point faithful-1e-2-flat at 60 steps) are not mistaken for the study's
GRID_STEPS = {"smoke": 40, "cpu": 5000, "paper": 5000}
BUDGETS = {"smoke": (40, 80, 160), "cpu": (5000, 10000, 20000), "paper": (5000, 10000, 20000)}
GRID_SEEDS = (0, 1, 2)
BUDGET_SEEDS = (0, 1, 2, 3, 4)
STUDY_SPECTRA = ORIGIN
ALPHA_WINDOW = (0.8, 1.2)  # claim 5a (top-2)
R2_MIN = 0.99
POWER_MIN = 0.8
RULE = ("SPEC §9: the paper's shape is reproduced if the certified envelope passes claim 5a (α in [0.8, 1.2] "
        "with R² ≥ 0.99 on the seed-mean curve) at the largest budget; not reproduced if it fails 5a there "
        "with power ≥ 0.8; otherwise undetermined. Recipes: " + SELECTION_RULE + ".")


def study_fields(preset: str, name: str, steps: int) -> dict:
    """RunConfig fields of grid point `name` at `steps` steps of the study's batch (every run to its cap)."""
    N = geometry(preset, "nonlinear")["N"]
    return dict(grid_variant(name, N), batch=STUDY_BATCH[preset], max_steps=steps)


def grid_groups() -> tuple[RunGroup, ...]:
    """Phase 1: every grid point at the grid budget, per preset (the default scale's qk_std depends on N)."""
    return tuple(RunGroup("nonlinear", "difficult", 2, STUDY_SPECTRA, "all",
                          tuple(sorted(study_fields(p, n, GRID_STEPS[p]).items())), (p,))
                 for p in STUDY_BATCH for n in grid_names())


def selection_at(res: Results) -> dict:
    """selection.select on phase 1's runs: GRID_SEEDS only (phase 2 adds seeds to the chosen points'
    runs at the grid budget, which must not change the choice), every one of them required."""
    p = res.preset
    cells = cells_from_results(res, STUDY_SPECTRA, PRESET_DEPTHS[p], 2, seeds=GRID_SEEDS, batch=STUDY_BATCH[p],
                               max_steps=GRID_STEPS[p])
    return select(cells, min_seeds=len(GRID_SEEDS))


def followup(res: Results) -> list:
    """Phase 2's runs: each depth's chosen point and the faithful start at every budget, BUDGET_SEEDS
    (runs phase 1 already holds have the same ids and are not trained again); `res.overrides` (a
    reproduce's further fields) carried over, the study's own batch and budgets winning."""
    p, out = res.preset, []
    for c in selection_at(res)["chosen"]:
        for name in dict.fromkeys(n for n in (c["recipe"], FAITHFUL) if n is not None):
            for steps in BUDGETS[p]:
                for s in BUDGET_SEEDS:
                    out.append(make_config(p, **{**res.overrides, **study_fields(p, name, steps)}, model="nonlinear",
                                           task="difficult", k=c["k"], a=c["a"], b=c["b"], L=c["L"], seed=s))
    return list({c.run_id: c for c in out}.values())


def _curve(res: Results, picks: dict, steps: int, a: float, b: float) -> dict:
    """Seed means and per-seed values over depth of the runs `picks` ({L: grid point}) at `steps`."""
    p, out = res.preset, {"depths": [], "R": [], "R_seeds": [], "C": [], "gap": [], "n": [], "recipe": []}
    for L in PRESET_DEPTHS[p]:
        if picks.get(L) is None:
            continue
        rows = [r for r in res.view(**study_fields(p, picks[L], steps)).runs("nonlinear", "difficult", 2, a, b, L)
                if math.isfinite(r.get("R", math.nan))]
        if not rows:
            continue
        R = np.array([r["R"] for r in rows], float)
        out["depths"].append(L)
        out["R"].append(float(R.mean()))
        out["R_seeds"].append(R.tolist())
        out["C"].append(float(np.mean([r.get("C", math.nan) for r in rows])))
        out["gap"].append(float(np.mean([r.get("A", math.nan) - r.get("C", math.nan) for r in rows])))
        out["n"].append(len(rows))
        out["recipe"].append(picks[L])
    return out


def _fit(curve: dict) -> dict:
    f = fit_xy(np.array(curve["depths"], float), np.array(curve["R"], float), True)
    if f is None:
        return {"alpha": math.nan, "alpha_se": math.nan, "r2": math.nan, "L0": math.nan, "status": "no fit",
                "passes_5a": False}
    ok = f.ok and ALPHA_WINDOW[0] <= f.alpha <= ALPHA_WINDOW[1] and f.r2 >= R2_MIN
    return {"alpha": f.alpha, "alpha_se": f.alpha_se, "r2": f.r2, "L0": f.L0,
            "status": f.status if f.ok else f"degenerate: {f.reason}", "passes_5a": bool(ok)}


def _picked_view(res: Results, picks: dict, steps: int, a: float, b: float) -> Results:
    """`res` read with each depth's picked grid point at `steps` (Results.with_recipes)."""
    p = res.preset
    return res.with_recipes({("nonlinear", "difficult", 2, a, b, L): study_fields(p, name, steps)
                             for L, name in picks.items() if name is not None})


def certify_row(res: Results, row: dict, picks: dict) -> dict | None:
    """{L: {certificate: passes}} of a study row (certificates.series_certificates on the row's
    runs: doubling, construction against B_L on their evaluation contexts, and budget against the
    same picks at half the budget where the study has it); None where they cannot be computed
    (no store, no models: the row's `certificates_why` says why)."""
    half = row["steps"] // 2
    try:
        cert = certificates.series_certificates(
            _picked_view(res, picks, row["steps"], row["a"], row["b"]), "nonlinear", "difficult", 2, row["a"],
            row["b"], depths=row["depths"],
            half=_picked_view(res, picks, half, row["a"], row["b"]) if half in BUDGETS[res.preset] else None)
    except Exception as e:  # noqa: BLE001 - uncertifiable rows are undetermined, with the reason
        row["certificates_why"] = f"{type(e).__name__}: {e}"
        return None
    row["certificates_text"] = certificates.summary_text(cert)
    detail = {int(L): {"B": p["B"], **{n: p[n] for n in certificates.NAMES if p[n] is not None}}
              for L, p in cert["per_depth"].items()}
    row["certificate_detail"] = detail  # B_L and each certificate's diff, se, ok: curves.csv and the figure
    return {L: {n: bool(d[n]["ok"]) for n in certificates.NAMES if n in d} for L, d in detail.items()}


def power_row(row: dict) -> float | None:
    """Claim 5a's power on a study row (SPEC §9): its criterion simulated under R_L = L0 + c/L (L0, c
    from the row's seed means at alpha = 1) with each depth's SE over seeds; None without a law fit or
    with a depth of one seed."""
    L, R = np.array(row["depths"], float), np.array(row["R"], float)
    se = np.array([np.std(v, ddof=1) / math.sqrt(len(v)) if len(v) > 1 else math.nan for v in row["R_seeds"]])
    if not np.all(np.isfinite(se)):
        return None
    try:
        L0, c = power.law_fit(L, R)
    except InputError:
        return None
    rep = power.power_report(power.criterion_5a(L, L0, c, *ALPHA_WINDOW, R2_MIN), L0 + c / L, se, min(row["n"]))
    row["seeds_for_power"] = rep["seeds_for_target"]
    return float(rep["power"])


def study_rows(res: Results, certify=None, power=None) -> list[dict]:
    """One row per (budget, spectrum, series: envelope | faithful): the curve, its fit and 5a, the
    certificates (`certify(row)`, default certify_row on the row's runs) and the power of 5a
    (`power(row)`, default power_row). With the defaults, computed once per Results (the figure,
    table, notes and export all read them)."""
    if certify is not None or power is not None:
        return _study_rows(res, certify, power)
    cached = getattr(res, "_convergence_rows", None)
    if cached is None:
        cached = res._convergence_rows = _study_rows(res, None, None)
    return cached


def _study_rows(res: Results, certify, power) -> list[dict]:
    sel = selection_at(res)
    rows = []
    for a, b in STUDY_SPECTRA:
        chosen = {c["L"]: c["recipe"] for c in sel["chosen"] if (c["a"], c["b"]) == (a, b)}
        for steps in BUDGETS[res.preset]:
            for series, picks in (("envelope", chosen), ("faithful", {L: FAITHFUL for L in PRESET_DEPTHS[res.preset]})):
                curve = _curve(res, picks, steps, a, b)
                if not curve["depths"]:
                    continue
                row = {"series": series, "steps": steps, "a": a, "b": b, **curve, **_fit(curve),
                       "complete": len(curve["depths"]) == len(PRESET_DEPTHS[res.preset])
                       and min(curve["n"]) >= len(BUDGET_SEEDS)}
                row["certificates"] = certify(row) if certify is not None else certify_row(res, row, picks)
                row["power_5a"] = power(row) if power is not None else power_row(row)
                rows.append(row)
    return rows


def decision(rows: list[dict], a: float = 0.0, b: float = 0.0) -> dict:
    """SPEC §9's rule on the envelope at the largest budget (see the module docstring)."""
    env = sorted([r for r in rows if r["series"] == "envelope" and (r["a"], r["b"]) == (a, b)], key=lambda r: r["steps"])
    top = env[-1] if env else None
    if top is None or not top["complete"]:
        why = "no envelope runs yet" if top is None else f"the envelope at {top['steps']:,} steps is not complete"
        return {"outcome": "undetermined", "text": f"{label(a, b)}: undetermined — {why}"}
    cert = top["certificates"]
    certified = cert is not None and all(all(v.values()) for v in cert.values())
    pw = top["power_5a"]
    fit = f"α {top['alpha']:.2f} ± {top['alpha_se']:.2f}, R² {top['r2']:.3f} ({top['status']}) at {top['steps']:,} steps"
    if certified and top["passes_5a"]:
        outcome = "reproduced"
    elif certified and not top["passes_5a"] and pw is not None and pw >= POWER_MIN:
        outcome = "not reproduced"
    else:
        outcome = "undetermined"
    missing = [w for w, v in (("certificates", cert), ("power", pw)) if v is None]
    why = top.get("certificates_why")
    text = (f"{label(a, b)}: {outcome} — envelope {fit}; 5a {'passes' if top['passes_5a'] else 'fails'}"
            + (f"; not computed: {', '.join(missing)}" + (f" ({why})" if why and cert is None else "") if missing else "")
            + (f"; {top['certificates_text']}" if top.get("certificates_text") else
               "" if cert is None or certified else "; a depth fails a certificate")
            + (f"; power {pw:.2f}" if pw is not None else "")
            + (f" ({top['seeds_for_power']} seeds would reach {POWER_MIN:g})"
               if pw is not None and pw < POWER_MIN and top.get("seeds_for_power") else ""))
    return {"outcome": outcome, "text": text, "budget": top["steps"], "passes_5a": top["passes_5a"],
            "certified": certified if cert is not None else None, "power_5a": pw}


def _stack_line(rows: list[dict]) -> tuple[list, list]:
    """B_L over depth (the best cosine stack on the evaluation contexts the study's runs share), from
    the certificates of the largest budget's row that has them."""
    for r in sorted(rows, key=lambda r: -r["steps"]):
        det = r.get("certificate_detail") or {}
        pts = sorted((L, v["B"]) for L, v in det.items() if v.get("B") is not None and math.isfinite(v["B"]))
        if pts:
            return [L for L, _ in pts], [B for _, B in pts]
    return [], []


def _mark_failing(ax, rows: list[dict]) -> None:
    """A red x on every depth of `rows` that fails a certificate (as fig6 and fig14 mark them), and a
    caption line naming the failures per budget."""
    failing = []
    for r in rows:
        bad = sorted(L for L, c in (r.get("certificates") or {}).items() if not all(c.values()))
        if bad:
            R = dict(zip(r["depths"], r["R"]))
            ax.plot(bad, [R[L] for L in bad], ls="none", marker="x", ms=8, mew=1.6, color="tab:red", zorder=5)
            failing.append(f"{r['steps']:,} steps: " + ", ".join(
                f"L={L} " + "+".join(n for n, ok in r["certificates"][L].items() if not ok) for L in bad))
    if failing:
        pl.note(ax, "x: a depth failing a convergence certificate (SPEC §4) — " + "; ".join(failing))


def figure(res: Results, th: Theory):
    """(a) the envelope's R_L per budget with each seed's value; (b) the faithful start as trained;
    both beside B_L, the best stack of L cosine heads on the same evaluation contexts (the
    construction certificate's reference); (c) fitted alpha vs budget, claim 5a's window shaded;
    (d) A_L - C_L of the envelope per budget."""
    rows = study_rows(res)
    fig, ax = pl.new_figure(2, 2, width=4.6, height=3.6)
    cols = pl.colors(len(BUDGETS[res.preset]))
    BL, B = _stack_line(rows)
    for j, series in enumerate(("envelope", "faithful")):
        rr = [r for r in rows if r["series"] == series]
        for r in rr:
            col = cols[BUDGETS[res.preset].index(r["steps"])]
            ax[j].plot(r["depths"], r["R"], marker="o", ms=3, color=col, label=f"{r['steps']:,} steps")
            for L, vals in zip(r["depths"], r["R_seeds"]):
                ax[j].plot([L] * len(vals), vals, ls="none", marker=".", ms=2, color=col, alpha=0.6)
        if BL:
            ax[j].plot(BL, B, ls="-.", color="k", lw=1, label="$B_L$: best cosine stack")
        _mark_failing(ax[j], rr)
        if not rr:
            pl.missing(ax[j])
        pl.loglog(ax[j])
        pl.finish_legend(ax[j], len(rr) + bool(BL), "budget (dots: seeds)")
        pl.panel_title(ax[j], "ab"[j], f"$R_L$, {series}" + (" (chosen by the monitor)" if j == 0 else " start as trained"))
    ax[2].axhspan(*ALPHA_WINDOW, color="0.9", zorder=0, label="claim 5a window")
    for i, series in enumerate(("envelope", "faithful")):
        # a degenerate fit's alpha is no law (its status is in the table): only well-posed fits are drawn
        rr = sorted([r for r in rows if r["series"] == series and r["status"] == "ok"], key=lambda r: r["steps"])
        if rr:
            ax[2].errorbar([r["steps"] * (1.04 if i else 1.0) for r in rr], [r["alpha"] for r in rr],
                           yerr=[r["alpha_se"] if math.isfinite(r["alpha_se"]) else 0 for r in rr],
                           marker=pl.MARKERS[i], capsize=2, ls="-" if i == 0 else "--", label=series)
    ax[2].set_xscale("log")
    ax[2].set_xlabel("training steps")
    ax[2].set_ylabel(r"fitted $\alpha$ of the seed-mean curve (± SE)")
    pl.finish_legend(ax[2])
    pl.panel_title(ax[2], "c", "depth exponent vs budget (well-posed fits)")
    env = [r for r in rows if r["series"] == "envelope"]
    for r in env:
        d, g = np.array(r["depths"]), np.array(r["gap"], float)
        ok = (d > 1) & np.isfinite(g) & (g > 0)
        ax[3].plot(d[ok], g[ok], marker="o", ms=3, color=cols[BUDGETS[res.preset].index(r["steps"])],
                   label=f"{r['steps']:,}")
    if env:
        pl.loglog(ax[3], ylabel="$A_L - C_L$")
        pl.finish_legend(ax[3], title="budget")
    else:
        pl.missing(ax[3])
    pl.panel_title(ax[3], "d", "layer disagreement of the envelope")
    return fig


def table(res: Results, th: Theory | None = None) -> list[dict]:
    """One row per (series, budget): fit, 5a, R_1, R_Lmax, C and A - C at the deepest depth, the recipes."""
    return [{"series": r["series"], "steps": r["steps"], "spectrum": label(r["a"], r["b"]), "seeds": min(r["n"]),
             "alpha": r["alpha"], "alpha SE": r["alpha_se"], "R2": r["r2"], "L0": r["L0"], "fit": r["status"],
             "5a": "pass" if r["passes_5a"] else "fail", "R_1": r["R"][0], "R_Lmax": r["R"][-1],
             "C_Lmax": r["C"][-1], "A-C_Lmax": r["gap"][-1], "recipes": " ".join(dict.fromkeys(r["recipe"]))}
            for r in study_rows(res)]


def table_frame(res: Results, th: Theory):
    import pandas as pd

    return pd.DataFrame(table(res, th))


def notes(res: Results) -> list[str]:
    """The rule, the grid's choice per depth, and the outcome, as lines for the report."""
    sel = selection_at(res)
    picks = "; ".join(f"L={c['L']}: {c['recipe'] or c.get('reason')}" for c in sel["chosen"]) or "no grid runs yet"
    rows = study_rows(res)
    return ([f"Decision rule — {RULE}", f"Chosen by the final monitor loss — {picks}"]
            + [f"Outcome — {decision(rows, a, b)['text']}" for a, b in STUDY_SPECTRA])


def export(res: Results, out_dir: str | Path) -> list[Path]:
    """The study's small result files (studies/results/convergence/): the grid's whole table
    (grid.csv), the per-budget rows (budgets.csv), the per-depth curves with B_L and the certificates
    (curves.csv) and the choice and decision (decision.json)."""
    import pandas as pd

    from depthscale.base.atomic import write_json_atomic, write_text_atomic

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sel = selection_at(res)
    grid = [{k: v for k, v in r.items() if k != "monitor_per_seed"} for r in sel["table"]]
    p1 = out_dir / "grid.csv"
    write_text_atomic(p1, pd.DataFrame(grid).to_csv(index=False) if grid else "")
    p2 = out_dir / "budgets.csv"
    write_text_atomic(p2, pd.DataFrame(table(res)).to_csv(index=False))
    rows = study_rows(res)
    p4 = out_dir / "curves.csv"
    write_text_atomic(p4, pd.DataFrame(curve_rows(rows)).to_csv(index=False))
    p3 = out_dir / "decision.json"
    write_json_atomic(p3, {"rule": RULE, "preset": res.preset, "chosen": sel["chosen"],
                           "decisions": [decision(rows, a, b) for a, b in STUDY_SPECTRA]})
    return [p1, p2, p4, p3]


def curve_rows(rows: list[dict]) -> list[dict]:
    """One row per (series, budget, spectrum, depth): the seed mean and each seed's R_L, C_L, A_L - C_L,
    the recipe, B_L and each certificate's difference, SE and pass (empty where it does not apply)."""
    out = []
    for r in rows:
        det = r.get("certificate_detail") or {}
        for i, L in enumerate(r["depths"]):
            c = det.get(L, {})
            row = {"series": r["series"], "steps": r["steps"], "a": r["a"], "b": r["b"], "L": L, "recipe": r["recipe"][i],
                   "seeds": r["n"][i], "R": r["R"][i], "R_seeds": " ".join(f"{v:.6f}" for v in r["R_seeds"][i]),
                   "C": r["C"][i], "A_minus_C": r["gap"][i], "B_L": c.get("B")}
            for n in certificates.NAMES:
                row |= {f"{n}_diff": c[n]["diff"], f"{n}_se": c[n]["se"], f"{n}_ok": c[n]["ok"]} if n in c else {}
            out.append(row)
    return out


CONVERGENCE = register(Experiment(
    "convergence", "Study: convergence — the recipe grid chosen by the monitor, then budgets", ("nonlinear",),
    "difficult", (2,), "(0,0)",
    "R_L of the monitor-chosen envelope and of the faithful start per budget (seeds shown), alpha ± SE, R², "
    "L0, C_L, A_L - C_L; the grid's table; SPEC §9's decision rule", grid_groups(), part="study",
    seeds=GRID_SEEDS, figure=figure, table=table_frame, notes=notes, followup=followup))


__all__ = ["CONVERGENCE", "FAITHFUL", "STUDY_BATCH", "GRID_STEPS", "BUDGETS", "GRID_SEEDS", "BUDGET_SEEDS",
           "study_fields", "grid_groups", "selection_at", "followup", "study_rows", "decision", "figure", "table",
           "table_frame", "notes", "export", "curve_rows", "RULE"]
