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

The decision rule (SPEC §9, refined 2026-12-06): the envelope read for it takes, per depth, the
budget with the lowest seed-mean final monitor loss (`monitor_best_picks`; the row "monitor-best");
*reproduced* if 5a passes, *not reproduced* if 5a fails with power >= 0.8, on each of (a) all depths
and (b) the certified depths alone (at least 5 spanning >= 16x); otherwise *undetermined*. Beside
it, model-free: the drops per doubling of depth Δ_L = R_L − R_2L with their SE and the ratios of
successive drops (`drops`), and the depths worse at their budget than at half of it (the budget
certificate fails) or still improving from half of it beyond 2 SE (`budget_moves`).
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
from depthscale.experiments.budget import gap_panel

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
RULE = ("SPEC §9: on the envelope whose budget is chosen per depth by the final monitor loss, the paper's shape "
        "is reproduced if claim 5a passes (α in [0.8, 1.2] with R² ≥ 0.99 on the seed-mean curve), not "
        "reproduced if 5a fails with power ≥ 0.8, on each of (a) all depths and (b) the certified depths alone "
        "(at least 5 spanning ≥ 16x in L); otherwise undetermined. Recipes: " + SELECTION_RULE + ".")


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
    reproduce's further fields) carried over, the study's own fields winning: its grid point, batch,
    budget, cell and seed (an override naming one of them used to raise a TypeError)."""
    p, out = res.preset, []
    for c in selection_at(res)["chosen"]:
        for name in dict.fromkeys(n for n in (c["recipe"], FAITHFUL) if n is not None):
            for steps in BUDGETS[p]:
                for s in BUDGET_SEEDS:
                    out.append(make_config(p, **{**res.overrides, **study_fields(p, name, steps), "model": "nonlinear",
                                                 "task": "difficult", "k": c["k"], "a": c["a"], "b": c["b"],
                                                 "L": c["L"], "seed": s}))
    return list({c.run_id: c for c in out}.values())


def study_curve(res: Results, picks: dict, a: float, b: float, k: int = 2, depths=None) -> dict:
    """Seed means and per-seed values over depth of the runs `picks` ({L: (grid point, steps)}):
    R_L, C_L, A_L - C_L and the final monitor loss (what chooses a budget). `k`, `depths` (default
    the preset's): hooks for convergence_spectra (top-16, depths beyond the preset's)."""
    p = res.preset
    out = {"depths": [], "R": [], "R_seeds": [], "C": [], "gap": [], "n": [], "recipe": [], "steps_L": [],
           "monitor": [], "monitor_seeds": []}
    for L in (PRESET_DEPTHS[p] if depths is None else depths):
        if picks.get(L) is None or picks[L][0] is None:
            continue
        name, steps = picks[L]
        rows = [r for r in res.view(**study_fields(p, name, steps)).runs("nonlinear", "difficult", k, a, b, L)
                if math.isfinite(r.get("R", math.nan))]
        if not rows:
            continue
        R = np.array([r["R"] for r in rows], float)
        mon = [float(r.get("final_monitor_loss", math.nan)) for r in rows]
        out["depths"].append(L)
        out["R"].append(float(R.mean()))
        out["R_seeds"].append(R.tolist())
        out["C"].append(float(np.mean([r.get("C", math.nan) for r in rows])))
        out["gap"].append(float(np.mean([r.get("A", math.nan) - r.get("C", math.nan) for r in rows])))
        out["n"].append(len(rows))
        out["recipe"].append(name)
        out["steps_L"].append(int(steps))
        out["monitor"].append(float(np.mean(mon)))
        out["monitor_seeds"].append(mon)
    return out


def monitor_best_picks(res: Results, chosen: dict, a: float, b: float) -> dict:
    """{L: (grid point, budget)}: per depth, the chosen point at the budget whose seed-mean final
    monitor loss is lowest, among budgets with every one of BUDGET_SEEDS finished (SPEC §4: budget is
    a recipe dimension, chosen by the monitor; never by the evaluation loss)."""
    p, picks = res.preset, {}
    for L, name in chosen.items():
        if name is None:
            continue
        best = None
        for steps in BUDGETS[p]:
            rows = [r for r in res.view(**study_fields(p, name, steps)).runs("nonlinear", "difficult", 2, a, b, L)
                    if math.isfinite(r.get("final_monitor_loss", math.nan)) and math.isfinite(r.get("R", math.nan))]
            if len(rows) < len(BUDGET_SEEDS):
                continue
            m = float(np.mean([r["final_monitor_loss"] for r in rows]))
            if best is None or m < best[0]:
                best = (m, steps)
        if best is not None:
            picks[L] = (name, best[1])
    return picks


def fit_curve(curve: dict) -> dict:
    f = fit_xy(np.array(curve["depths"], float), np.array(curve["R"], float), True)
    if f is None:
        return {"alpha": math.nan, "alpha_se": math.nan, "r2": math.nan, "L0": math.nan, "status": "no fit",
                "passes_5a": False}
    ok = f.ok and ALPHA_WINDOW[0] <= f.alpha <= ALPHA_WINDOW[1] and f.r2 >= R2_MIN
    return {"alpha": f.alpha, "alpha_se": f.alpha_se, "r2": f.r2, "L0": f.L0,
            "status": f.status if f.ok else f"degenerate: {f.reason}", "passes_5a": bool(ok)}


def _picked_view(res: Results, picks: dict, a: float, b: float, halve: bool = False, k: int = 2) -> Results:
    """`res` read with each depth's picked (grid point, steps) (Results.with_recipes); `halve`: at
    half of each depth's steps where the study has that budget (a depth without it reads no runs);
    `k`: the top-k task's (a hook for convergence_spectra's top-16)."""
    p, recipes = res.preset, {}
    for L, (name, steps) in picks.items():
        if name is None:
            continue
        if halve:
            steps = steps // 2 if steps // 2 in BUDGETS[p] else 0  # (no run has 0 steps: an empty cell)
        recipes[("nonlinear", "difficult", k, a, b, L)] = study_fields(p, name, steps)
    return res.with_recipes(recipes)


def certify_row(res: Results, row: dict, picks: dict) -> dict | None:
    """{L: {certificate: passes}} of a study row (certificates.series_certificates on the row's
    runs, `picks` {L: (grid point, steps)}: doubling, construction against B_L on their evaluation
    contexts, and budget against the same point at half its steps where the study has that budget); None where they cannot be computed
    (no store, no models: the row's `certificates_why` says why)."""
    halves = any(st // 2 in BUDGETS[res.preset] for st in row["steps_L"])
    k = row.get("k", 2)  # (a row of convergence_spectra's top-16 names its k)
    try:
        cert = certificates.series_certificates(
            _picked_view(res, picks, row["a"], row["b"], k=k), "nonlinear", "difficult", k, row["a"],
            row["b"], depths=row["depths"], half=_picked_view(res, picks, row["a"], row["b"], True, k) if halves else None)
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
    try:
        rep = power.power_report(power.criterion_5a(L, L0, c, *ALPHA_WINDOW, R2_MIN), L0 + c / L, se, min(row["n"]))
    except np.linalg.LinAlgError:  # a simulated fit met a singular step: no power rather than a crash
        return None
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


BEST = "monitor-best"  # the study row whose budget is chosen per depth by the final monitor loss


def _study_rows(res: Results, certify, power) -> list[dict]:
    sel = selection_at(res)
    rows = []
    for a, b in STUDY_SPECTRA:
        chosen = {c["L"]: c["recipe"] for c in sel["chosen"] if (c["a"], c["b"]) == (a, b)}
        series = [(series, steps, {L: (name, steps) for L, name in picks.items()})
                  for steps in BUDGETS[res.preset]
                  for series, picks in (("envelope", chosen), ("faithful", dict.fromkeys(PRESET_DEPTHS[res.preset], FAITHFUL)))]
        series.append((BEST, max(BUDGETS[res.preset]), monitor_best_picks(res, chosen, a, b)))
        for name, steps, picks in series:
            curve = study_curve(res, picks, a, b)
            if not curve["depths"]:
                continue
            row = {"series": name, "steps": steps, "a": a, "b": b, **curve, **fit_curve(curve),
                   "complete": len(curve["depths"]) == len(PRESET_DEPTHS[res.preset])
                   and min(curve["n"]) >= len(BUDGET_SEEDS)}
            row["certificates"] = certify(row) if certify is not None else certify_row(res, row, picks)
            row["power_of"] = power if power is not None else power_row  # (subrow computes it again)
            row["power_5a"] = row["power_of"](row)
            row["drops"] = drops(row)
            rows.append(row)
    return rows


def drops(row: dict) -> list[dict]:
    """The model-free shape: per doubling of depth, Δ_L = R_L − R_2L of the seed means with its SE
    (the seeds' SEs of the two depths combined: different runs), and the ratio of successive drops
    Δ_2L/Δ_L (2^−α under L0 + c L^−α: one half at α = 1; a logarithmic curve keeps it near 1)."""
    R = dict(zip(row["depths"], row["R"]))
    se = {L: float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1 else math.nan
          for L, v in zip(row["depths"], row["R_seeds"])}
    out = []
    for L in row["depths"]:
        if 2 * L in R:
            out.append({"L": L, "drop": R[L] - R[2 * L], "se": math.hypot(se[L], se[2 * L]), "ratio": math.nan})
    for prev, cur in zip(out, out[1:]):  # Δ_2L / Δ_L: successive doublings only (no ratio across a missing depth)
        cur["ratio"] = cur["drop"] / prev["drop"] if prev["drop"] != 0 and cur["L"] == 2 * prev["L"] else math.nan
    return out


def subrow(row: dict, depths: list[int]) -> dict:
    """`row` restricted to `depths` (its curve, fit and 5a's power recomputed on them)."""
    keep = [i for i, L in enumerate(row["depths"]) if L in set(depths)]
    part = {**row, **{k: [row[k][i] for i in keep] for k in CURVE_KEYS}}
    part.update(fit_curve(part))
    part["power_5a"] = row.get("power_of", power_row)(part) if len(keep) >= 2 else None
    part["drops"] = drops(part)
    return part


CURVE_KEYS = ("depths", "R", "R_seeds", "C", "gap", "n", "recipe", "steps_L", "monitor", "monitor_seeds")
MIN_CERTIFIED = 5  # SPEC §9: part (b) needs at least 5 certified depths ...
MIN_SPAN = 16  # ... spanning at least 16x in L


def _verdict(row: dict) -> str:
    """5a on one view of the curve: reproduced, not reproduced (a FAIL with power >= 0.8), or undetermined."""
    if row["passes_5a"]:
        return "reproduced"
    pw = row.get("power_5a")
    return "not reproduced" if pw is not None and pw >= POWER_MIN else "undetermined"


def decision(rows: list[dict], a: float = 0.0, b: float = 0.0) -> dict:
    """SPEC §9's rule on the monitor-best envelope: 5a with its power on (a) all depths and (b) the
    certified depths alone (at least MIN_CERTIFIED spanning MIN_SPAN x); the outcome is the parts'
    when they agree on reproduced or not reproduced, else undetermined (a depth failing a certificate
    cannot decide it by itself)."""
    top = next((r for r in rows if r["series"] == BEST and (r["a"], r["b"]) == (a, b)), None)
    if top is None or not top["complete"]:
        why = "no envelope runs yet" if top is None else "the monitor-best envelope lacks depths or seeds"
        return {"outcome": "undetermined", "text": f"{label(a, b)}: undetermined — {why}"}
    cert = top["certificates"]
    good = [L for L in top["depths"] if cert is not None and all(cert.get(L, {}).values())]
    part_a = _part(top)
    enough = len(good) >= MIN_CERTIFIED and max(good) >= MIN_SPAN * min(good)
    part_b = _part(subrow(top, good)) if enough else {
        "outcome": "undetermined", "why": f"{len(good)} certified depths ({', '.join(map(str, good)) or 'none'}); "
                                         f"the rule needs {MIN_CERTIFIED} spanning {MIN_SPAN}x"}
    same = part_a["outcome"] == part_b["outcome"] and part_a["outcome"] != "undetermined"
    outcome = part_a["outcome"] if same else "undetermined"
    worse, improving = budget_moves(top)
    text = (f"{label(a, b)}: {outcome} — (a) all depths: {part_a['text']}; (b) certified depths: "
            f"{part_b.get('text') or part_b['why']}; drops per doubling "
            + ", ".join(f"{d['drop']:.4f}±{d['se']:.4f}" for d in top["drops"])
            + (f"; worse at the chosen budget than at half of it (its budget certificate fails): "
               f"L={', '.join(map(str, worse))}" if worse else "")
            + (f"; still improving from half the budget beyond 2 SE: L={', '.join(map(str, improving))}"
               if improving else "")
            + (f"; {top['certificates_text']}" if top.get("certificates_text") else "")
            + (f"; not computed: certificates ({top.get('certificates_why')})" if cert is None else ""))
    return {"outcome": outcome, "text": text, "budgets": dict(zip(top["depths"], top["steps_L"])),
            "all_depths": part_a, "certified_depths": part_b, "certified": good, "still_improving": improving,
            "worse_at_budget": worse,
            "drops": top["drops"], "passes_5a": top["passes_5a"], "power_5a": top["power_5a"]}


def budget_moves(row: dict) -> tuple[list[int], list[int]]:
    """(depths whose budget certificate fails: R at the chosen budget above R at half of it by more than
    2 SE, i.e. worse with more steps; depths still improving: R at the chosen budget below half's by more
    than 2 SE — SPEC §4 (iii): information, not a failure), from the row's certificate_detail."""
    worse, improving = [], []
    for L, d in sorted((row.get("certificate_detail") or {}).items()):
        b = d.get("budget") or {}
        diff, se = b.get("diff", math.nan), b.get("se", math.nan)
        if b.get("ok") is False:
            worse.append(int(L))
        elif math.isfinite(diff) and math.isfinite(se) and diff < -2 * se:
            improving.append(int(L))
    return worse, improving


def _part(row: dict) -> dict:
    pw = row.get("power_5a")
    text = (f"α {row['alpha']:.2f} ± {row['alpha_se']:.2f}, R² {row['r2']:.3f}, L0 {row['L0']:.4f} ({row['status']}) "
            f"on L={', '.join(map(str, row['depths']))}; 5a {'passes' if row['passes_5a'] else 'fails'}"
            + (f", power {pw:.2f}" if pw is not None else ", power not computed")
            + (f" ({row['seeds_for_power']} seeds would reach {POWER_MIN:g})"
               if pw is not None and pw < POWER_MIN and row.get("seeds_for_power") else ""))
    return {"outcome": _verdict(row), "text": text, "alpha": row["alpha"], "alpha_se": row["alpha_se"],
            "r2": row["r2"], "L0": row["L0"], "status": row["status"], "power_5a": pw, "depths": row["depths"]}


def law_alpha_range(depths, R, tol: float = 1e-9) -> dict:
    """The exponents α a law R*_L = L0 + c L^−α (c > 0, L0 ≥ 0) can have for the *optimum's* curve
    (issue 48 item 3), if R_1 and R_2 are the optima at L = 1 and 2 (pinned: the law passes through
    them) and every deeper R_L is achieved, hence an upper bound on the optimum there
    (R*_L ≤ R_L). Through the two pins, c = (R_1 − R_2)/(1 − 2^−α) and L0 = R_1 − c; depth L's bound
    asks (R_1 − R_2)(1 − L^−α)/(1 − 2^−α) ≥ R_1 − R_L, whose left side falls with α, so the
    feasible α are an interval [α_min, α_max]: α_min from L0 ≥ 0, α_max from the tightest depth
    (bisection). Returns {"alpha_min", "alpha_max", "binding_depth", "assumptions"}; NaNs where no α fits."""
    L = np.asarray(depths, dtype=np.float64)
    R = np.asarray(R, dtype=np.float64)
    if L[0] != 1 or L[1] != 2 or not R[0] > R[1] > 0:
        raise InputError("law_alpha_range needs depths starting 1, 2 with R_1 > R_2 > 0")
    d1, deep = R[0] - R[1], [(float(l), float(R[0] - r)) for l, r in zip(L[2:], R[2:])]

    def ok(a: float) -> bool:
        return all(d1 * (1 - l ** -a) / (1 - 2 ** -a) >= need - tol for l, need in deep)

    a_min = -math.log2(1 - d1 / R[0])  # L0 = R_1 - c >= 0
    hi = 64.0
    if not ok(a_min):
        return {"alpha_min": math.nan, "alpha_max": math.nan, "binding_depth": None, "assumptions": LAW_ASSUMPTIONS}
    lo = a_min
    if ok(hi):
        lo = hi
    for _ in range(200):
        if hi - lo < 1e-10:
            break
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    slack = [d1 * (1 - l ** -lo) / (1 - 2 ** -lo) - need for l, need in deep]
    return {"alpha_min": float(a_min), "alpha_max": float(lo),
            "binding_depth": int(deep[int(np.argmin(slack))][0]) if deep else None, "assumptions": LAW_ASSUMPTIONS}


LAW_ASSUMPTIONS = ("the optimum's curve is a law L0 + c L^-alpha with c > 0 and L0 >= 0; R_1 and R_2 are the "
                   "optima at L = 1 and 2 (the envelope sits on the best single cosine head and the best 2-stack "
                   "there); every deeper R_L is achieved by a trained model, so it bounds the optimum from above")


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
            failing.append(f"{'monitor-best budget' if r['series'] == BEST else format(r['steps'], ',') + ' steps'}: " + ", ".join(
                f"L={L} " + "+".join(n for n, ok in r["certificates"][L].items() if not ok) for L in bad))
    if failing:
        pl.note(ax, "x: a depth failing a convergence certificate (SPEC §4) — " + "; ".join(failing))


def figure(res: Results, th: Theory):
    """(a) the envelope's R_L per budget (dots: seeds) and the monitor-best envelope; (b) the faithful
    start as trained; both beside the reference B_L (the best stack of L cosine heads on the same
    evaluation contexts: the construction certificate's); (c) the excess R_L − L0 of the monitor-best
    envelope on log-log axes, slope −1 (the paper's law) drawn through L = 1; (d) its drops per
    doubling of depth with their SE, beside the halving α = 1 predicts; (e) fitted α vs budget,
    claim 5a's window shaded; (f) A_L − C_L of the envelope per budget."""
    return figure_rows(study_rows(res), res.preset)


def figure_rows(rows: list[dict], preset: str):
    """`figure` from the study's rows (study_rows' form; studies/convergence_redecide.py rebuilds them
    from an export when the store is gone)."""
    fig, ax = pl.new_figure(3, 2, width=4.4, height=3.5)
    study_panels(ax[:5], rows, preset)
    gap_panel(ax[5], [r for r in rows if r["series"] == "envelope"], BUDGETS[preset], "budget",
              lambda r: {"label": f"{r['steps']:,}"})
    pl.panel_title(ax[5], "f", "layer disagreement of the envelope")
    return fig


def study_panels(ax, rows: list[dict], preset: str) -> None:
    """Panels (a)-(e) of the study's figure on the five axes `ax` (`figure`'s docstring): the curves,
    the excess on log-log axes, the drops per doubling and α per budget (the spectra's figure too)."""
    curve_panels(ax[0], ax[1], rows, preset)
    best = next((r for r in rows if r["series"] == BEST), None)
    _excess_panel(ax[2], best)
    _drops_panel(ax[3], best)
    _alpha_panel(ax[4], rows)


def curve_panels(ax_env, ax_faith, rows: list[dict], preset: str) -> None:
    cols = pl.colors(len(BUDGETS[preset]))
    BL, B = _stack_line(rows)
    for j, (axj, series) in enumerate(((ax_env, "envelope"), (ax_faith, "faithful"))):
        rr = [r for r in rows if r["series"] == series]
        for r in rr:
            col = cols[BUDGETS[preset].index(r["steps"])]
            axj.plot(r["depths"], r["R"], marker="o", ms=3, color=col, label=f"{r['steps']:,} steps")
            for L, vals in zip(r["depths"], r["R_seeds"]):
                axj.plot([L] * len(vals), vals, ls="none", marker=".", ms=2, color=col, alpha=0.6)
        best = [r for r in rows if r["series"] == BEST] if j == 0 else []
        for r in best:
            axj.plot(r["depths"], r["R"], ls="--", color="k", lw=1.2, label="monitor-best budget per depth")
        if BL:
            axj.plot(BL, B, ls="-.", color="0.4", lw=1, label="reference $B_L$ (best cosine stack)")
        _mark_failing(axj, rr + best)
        if not rr:
            pl.missing(axj)
        pl.loglog(axj)
        pl.finish_legend(axj, len(rr) + len(best) + bool(BL), "budget (dots: seeds)")
        pl.panel_title(axj, "ab"[j], f"$R_L$, {series}" + (" (chosen by the monitor)" if j == 0 else " start as trained"))


def _seed_se(row: dict) -> np.ndarray:
    return np.array([np.std(v, ddof=1) / math.sqrt(len(v)) if len(v) > 1 else math.nan for v in row["R_seeds"]])


def _excess_panel(ax, row: dict | None) -> None:
    """R_L − L0 of the monitor-best envelope (L0 its fit's) on log-log axes, ± the seeds' SE, and the
    slope −1 the paper's law predicts, through its L = 1 point: α ≈ 0.5 and α ≈ 1 part here."""
    pl.panel_title(ax, "c", "excess loss $R_L - L_0$, monitor-best envelope")
    if row is None or not math.isfinite(row["L0"]):
        pl.missing(ax, "no well-posed fit" if row is not None else "missing runs")
        return
    L, ex = np.array(row["depths"], float), np.array(row["R"], float) - row["L0"]
    ok = ex > 0
    pl.errorbar(ax, L[ok], ex[ok], _seed_se(row)[ok], marker="o", color="k",
                label=f"fit: α {row['alpha']:.2f} ± {row['alpha_se']:.2f}, $L_0$ {row['L0']:.4f}")
    if ok.any():
        i = int(np.argmax(ok))
        ax.plot(L, ex[i] * L[i] / L, ls=":", color="tab:red", label="slope −1 (α = 1), through the first point")
    pl.loglog(ax, ylabel="$R_L - L_0$")
    pl.finish_legend(ax)
    pl.note(ax, "(c): error bars are the seeds' SE of R_L (L0 held at its fit); where a bar is not visible it "
                "is smaller than the marker")


def _drops_panel(ax, row: dict | None) -> None:
    """Δ_L = R_L − R_2L with its SE per doubling of depth, beside α = 1's halving from the first drop."""
    pl.panel_title(ax, "d", "drop per doubling of depth $R_L - R_{2L}$")
    if row is None or not row["drops"]:
        pl.missing(ax)
        return
    L = np.array([d["L"] for d in row["drops"]], float)
    D = np.array([d["drop"] for d in row["drops"]], float)
    pl.errorbar(ax, L, D, np.array([d["se"] for d in row["drops"]]), marker="o", color="k",
                label="monitor-best envelope (± SE)")
    ax.plot(L, D[0] * L[0] / L, ls=":", color="tab:red", label="α = 1: each drop half the last")
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("depth $L$ (drop from $L$ to $2L$)")
    ax.set_ylabel("$R_L - R_{2L}$")
    pl.finish_legend(ax)


def _alpha_panel(ax, rows: list[dict]) -> None:
    ax.axhspan(*ALPHA_WINDOW, color="0.9", zorder=0, label="claim 5a window")
    for i, series in enumerate(("envelope", "faithful")):
        # a degenerate fit's alpha is no law (its status is in the table): only well-posed fits are drawn
        rr = sorted([r for r in rows if r["series"] == series and r["status"] == "ok"], key=lambda r: r["steps"])
        if rr:
            ax.errorbar([r["steps"] * (1.04 if i else 1.0) for r in rr], [r["alpha"] for r in rr],
                        yerr=[r["alpha_se"] if math.isfinite(r["alpha_se"]) else 0 for r in rr],
                        marker=pl.MARKERS[i], capsize=2, ls="-" if i == 0 else "--", label=series)
    ax.set_xscale("log")
    ax.set_xlabel("training steps")
    ax.set_ylabel(r"fitted $\alpha$ of the seed-mean curve (± SE)")
    pl.finish_legend(ax)
    pl.panel_title(ax, "e", "depth exponent vs budget (well-posed fits)")


def table(res: Results, th: Theory | None = None) -> list[dict]:
    """One row per (series, budget): fit, 5a, R_1, R_Lmax, C and A - C at the deepest depth, the recipes."""
    return [{"series": r["series"], "steps": steps_text(r), "spectrum": label(r["a"], r["b"]), "seeds": min(r["n"]),
             "alpha": r["alpha"], "alpha SE": r["alpha_se"], "R2": r["r2"], "L0": r["L0"], "fit": r["status"],
             "5a": "pass" if r["passes_5a"] else "fail", "R_1": r["R"][0], "R_Lmax": r["R"][-1],
             "C_Lmax": r["C"][-1], "A-C_Lmax": r["gap"][-1], "recipes": " ".join(dict.fromkeys(r["recipe"]))}
            for r in study_rows(res)]


def steps_text(r: dict) -> str:
    """A row's budget: one number, or per depth for the monitor-best row ('L=1:20,000 L=2:10,000 ...')."""
    if r["series"] != BEST:
        return f"{r['steps']}"
    return " ".join(f"L={L}:{st}" for L, st in zip(r["depths"], r["steps_L"]))


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
    final monitor loss (what chooses the budget), the recipe and its steps, B_L and each certificate's
    difference, SE and pass (empty where it does not apply)."""
    out = []
    for r in rows:
        det = r.get("certificate_detail") or {}
        for i, L in enumerate(r["depths"]):
            c = det.get(L, {})
            row = {"series": r["series"], "steps": r["steps_L"][i], "a": r["a"], "b": r["b"], "L": L,
                   "recipe": r["recipe"][i], "seeds": r["n"][i], "R": r["R"][i],
                   "R_seeds": " ".join(f"{v:.6f}" for v in r["R_seeds"][i]), "C": r["C"][i], "A_minus_C": r["gap"][i],
                   "monitor": r["monitor"][i], "monitor_seeds": " ".join(f"{v:.6f}" for v in r["monitor_seeds"][i]),
                   "B_L": c.get("B")}
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
           "table_frame", "notes", "export", "curve_rows", "RULE", "BEST", "study_curve", "fit_curve", "monitor_best_picks", "figure_rows",
           "drops", "subrow", "law_alpha_range", "LAW_ASSUMPTIONS", "curve_panels", "steps_text", "certify_row", "power_row"]
