"""The convergence study (SPEC §9): phase 1's grid chosen by the monitor, phase 2's runs, the
per-budget reading and the decision rule in each outcome — on synthetic results whose laws are known."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from depthscale.analysis.results import Results
from depthscale.base.errors import InputError
from depthscale.config.run import grid_names
from depthscale.experiments import convergence as cv
from depthscale.experiments.registry import REGISTRY
from depthscale.runs.per_context import StoredRuns

PRESET = "cpu"
DEPTHS = (1, 2, 4, 8, 16, 32, 64)
WINNER = {L: ("constructive-3e-3-taper" if L > 2 else "default-1e-2-flat") for L in DEPTHS}


def _row(cfg, R, mon):
    return {"run_id": cfg.run_id, **cfg.to_dict(), "R": R, "R_se": 0.01, "A": R + 0.2, "C": R - 0.05,
            "var_ystar": 10.0, MON: mon, "train_seconds": 1.0}


MON = "final_monitor_loss"


def _grid_frame():
    """Phase 1 at the cpu preset: every grid point, 3 seeds; the monitor prefers WINNER, the
    evaluation loss prefers the faithful start (the selection must follow the monitor)."""
    rows = []
    for cfg in REGISTRY["convergence"].configs(PRESET):
        name = next(n for n in grid_names() if all(getattr(cfg, k) == v for k, v in cv.study_fields(PRESET, n, cfg.max_steps).items()))
        mon = 2.0 - (0.05 if name == WINNER[cfg.L] else 0.0) + 0.001 * cfg.seed
        R = 2.0 - (0.05 if name == cv.FAITHFUL else 0.0)
        rows.append(_row(cfg, R, mon))
    return rows


def _with_budgets(rows, law):
    res = Results(pd.DataFrame(rows), PRESET)
    for cfg in cv.followup(res):
        rows.append(_row(cfg, law(cfg.L, cfg.max_steps) * (1 + 0.0005 * math.sin(cfg.seed + cfg.L)), 2.0))
    return Results(pd.DataFrame(rows), PRESET)


def test_phase_one_is_the_whole_grid_and_the_choice_follows_the_monitor():
    cfgs = REGISTRY["convergence"].configs(PRESET)
    assert len(cfgs) == len(grid_names()) * len(DEPTHS) * len(cv.GRID_SEEDS)
    assert {c.batch for c in cfgs} == {512} and {c.max_steps for c in cfgs} == {5000}
    assert all(not c.early_stop and c.eval_contexts >= 102_400 and c.monitor_contexts >= 10_240 for c in cfgs)
    sel = cv.selection_at(Results(pd.DataFrame(_grid_frame()), PRESET))
    assert {c["L"]: c["recipe"] for c in sel["chosen"]} == WINNER
    assert len(sel["table"]) == len(grid_names()) * len(DEPTHS)


def test_followup_runs_the_chosen_points_and_the_faithful_start_at_every_budget():
    res = Results(pd.DataFrame(_grid_frame()), PRESET)
    later = cv.followup(res)
    want = sum(len({WINNER[L], cv.FAITHFUL}) for L in DEPTHS) * len(cv.BUDGETS[PRESET]) * len(cv.BUDGET_SEEDS)
    assert len(later) == want == len({c.run_id for c in later})
    assert {c.max_steps for c in later} == set(cv.BUDGETS[PRESET]) and {c.seed for c in later} == set(cv.BUDGET_SEEDS)
    phase1 = {c.run_id for c in REGISTRY["convergence"].configs(PRESET)}
    assert sum(c.run_id in phase1 for c in later) == sum(len({WINNER[L], cv.FAITHFUL}) for L in DEPTHS) * 3


def _inverse(L, steps):
    return 2.0 + 0.09 / L


def _flat(L, steps):
    return 2.0 + 0.09 * L ** -0.1


def test_study_rows_recover_the_law_and_the_decision_rule_in_each_outcome():
    res = _with_budgets(_grid_frame(), _inverse)
    # phase 2's extra seeds at the grid budget (monitor 2.0, no better) leave the choice as it was
    assert {c["L"]: c["recipe"] for c in cv.selection_at(res)["chosen"]} == WINNER
    assert all(r["n_seeds"] == len(cv.GRID_SEEDS) for r in cv.selection_at(res)["table"])
    rows = cv.study_rows(res)
    assert {(r["series"], r["steps"]) for r in rows} == {(s, n) for s in ("envelope", "faithful")
                                                         for n in cv.BUDGETS[PRESET]} | {(cv.BEST, 20000)}
    top = [r for r in rows if r["series"] == "envelope" and r["steps"] == 20000][0]
    assert top["complete"] and top["alpha"] == pytest.approx(1.0, abs=0.05) and top["passes_5a"]
    assert top["recipe"] == [WINNER[L] for L in DEPTHS]
    ok = {L: {"doubling": True, "construction": True, "budget": True} for L in DEPTHS}
    assert cv.decision(rows)["outcome"] == "undetermined"  # no store, so no models to certify
    assert top["certificates"] is None and "no store" in top["certificates_why"]
    assert 0.0 <= top["power_5a"] <= 1.0  # the law holds exactly here, with tiny seed noise: high power
    assert top["power_5a"] > 0.8
    certified = cv.study_rows(res, certify=lambda r: ok, power=lambda r: 0.9)
    assert cv.decision(certified)["outcome"] == "reproduced"
    # (b) reads the certified depths alone: one failing depth cannot decide the outcome by itself
    bad = {**ok, 8: {"doubling": False, "construction": True, "budget": True}}
    dec = cv.decision(cv.study_rows(res, certify=lambda r: bad, power=lambda r: 0.9))
    assert dec["outcome"] == "reproduced" and dec["certified"] == [1, 2, 4, 16, 32, 64]
    assert dec["certified_depths"]["depths"] == [1, 2, 4, 16, 32, 64] and dec["all_depths"]["depths"] == list(DEPTHS)
    # fewer than 5 certified depths (or a span under 16x): part (b) cannot be read, undetermined
    few = {L: {**ok[L], "construction": L in (8, 16, 32, 64)} for L in DEPTHS}
    dec = cv.decision(cv.study_rows(res, certify=lambda r: few, power=lambda r: 0.9))
    assert dec["outcome"] == "undetermined" and "4 certified depths" in dec["text"]
    narrow = {L: {**ok[L], "construction": L >= 4} for L in DEPTHS}  # 4..64: five depths, span 16x
    assert cv.decision(cv.study_rows(res, certify=lambda r: narrow, power=lambda r: 0.9))["outcome"] == "reproduced"
    narrower = {L: {**ok[L], "construction": L >= 8} for L in DEPTHS}  # four depths
    assert cv.decision(cv.study_rows(res, certify=lambda r: narrower, power=lambda r: 0.9))["outcome"] == "undetermined"
    flat = _with_budgets(_grid_frame(), _flat)
    assert cv.decision(cv.study_rows(flat, certify=lambda r: ok, power=lambda r: 0.9))["outcome"] == "not reproduced"
    assert cv.decision(cv.study_rows(flat, certify=lambda r: ok, power=lambda r: 0.5))["outcome"] == "undetermined"


def _with_monitor(rows, best):
    """Budgets whose final monitor loss is lowest at `best[L]` steps (the evaluation loss prefers
    5,000); phase 1's runs (seeds 0-2 at 5,000 steps, the monitor's choice at 1.95) stay as they are."""
    res = Results(pd.DataFrame(rows), PRESET)
    have = {r["run_id"] for r in rows}
    for cfg in cv.followup(res):
        if cfg.run_id in have:
            continue
        R = _inverse(cfg.L, cfg.max_steps) - (0.01 if cfg.max_steps == 5000 else 0.0)
        rows.append(_row(cfg, R, 1.90 + 1e-4 * cfg.seed if cfg.max_steps == best[cfg.L] else 1.99))
    return Results(pd.DataFrame(rows), PRESET)


def test_the_budget_is_chosen_per_depth_by_the_final_monitor_loss_never_the_evaluation_loss():
    best = {L: (10000 if L in (2, 64) else 20000) for L in DEPTHS}
    res = _with_monitor(_grid_frame(), best)
    chosen = {c["L"]: c["recipe"] for c in cv.selection_at(res)["chosen"]}
    assert cv.monitor_best_picks(res, chosen, 0.0, 0.0) == {L: (WINNER[L], best[L]) for L in DEPTHS}
    top = [r for r in cv.study_rows(res, certify=lambda r: None, power=lambda r: None) if r["series"] == cv.BEST][0]
    assert top["steps_L"] == [best[L] for L in DEPTHS]
    assert top["monitor"] == pytest.approx([1.90 + 2e-4] * len(DEPTHS))
    # a budget with a seed missing is not eligible: L = 64's 10,000 steps lose seed 4
    rows = [r for r in res.df.to_dict("records") if not (r["L"] == 64 and r["max_steps"] == 10000 and r["seed"] == 4)]
    thin = Results(pd.DataFrame(rows), PRESET)
    assert cv.monitor_best_picks(thin, chosen, 0.0, 0.0)[64] == (WINNER[64], 5000)


def test_drops_per_doubling_and_their_ratios_tell_the_law_from_a_logarithm():
    seeds = [-0.002, 0.0, 0.002]  # each depth's seeds around its mean: SE 0.002/sqrt(3)

    def row(law):
        return {"depths": list(DEPTHS), "R": [law(L) for L in DEPTHS],
                "R_seeds": [[law(L) + e for e in seeds] for L in DEPTHS]}

    d = cv.drops(row(lambda L: 2.0 + 0.09 / L))
    assert [x["L"] for x in d] == [1, 2, 4, 8, 16, 32]
    assert [x["drop"] for x in d] == pytest.approx([0.045 / L for L in (1, 2, 4, 8, 16, 32)])
    assert [x["ratio"] for x in d[1:]] == pytest.approx([0.5] * 5) and math.isnan(d[0]["ratio"])
    assert [x["se"] for x in d] == pytest.approx([math.sqrt(2) * 0.002 / math.sqrt(3)] * 6)
    log = cv.drops(row(lambda L: 2.1 - 0.01 * math.log2(L)))
    assert [x["ratio"] for x in log[1:]] == pytest.approx([1.0] * 5)
    # the study's rows carry them
    res = _with_budgets(_grid_frame(), _inverse)
    top = [r for r in cv.study_rows(res, certify=lambda r: None, power=lambda r: None)
           if r["series"] == "envelope" and r["steps"] == 20000][0]
    assert top["drops"] == cv.drops(top) and len(top["drops"]) == 6


def test_export_writes_the_grid_budgets_and_decision(tmp_path):
    res = _with_budgets(_grid_frame(), _inverse)
    paths = cv.export(res, tmp_path)
    grid = pd.read_csv(paths[0])
    assert len(grid) == len(grid_names()) * len(DEPTHS) and grid["chosen"].sum() == len(DEPTHS)
    assert len(pd.read_csv(paths[1])) == 7  # envelope and faithful at three budgets, and the monitor-best row
    curves = pd.read_csv(paths[2])  # per (series, budget, depth); no store here: no B_L, no certificates
    assert len(curves) == 7 * len(DEPTHS) and curves["B_L"].isna().all()
    seeds = curves["monitor_seeds"].str.split().map(lambda v: [float(x) for x in v])
    assert seeds.map(len).eq(5).all() and curves["monitor"].to_numpy() == pytest.approx(seeds.map(sum) / 5, abs=1e-6)
    assert (curves[curves["steps"] == 20000]["monitor"] == 2.0).all()
    top = curves[(curves["series"] == "envelope") & (curves["steps"] == 20000)]
    assert list(top["recipe"]) == [WINNER[L] for L in DEPTHS]
    assert top["R"].to_numpy() == pytest.approx([_inverse(L, 20000) for L in DEPTHS], rel=2e-3)
    assert all(len(s.split()) == len(cv.BUDGET_SEEDS) for s in top["R_seeds"])
    assert "undetermined" in paths[3].read_text()


@pytest.mark.slow
def test_reproduce_convergence_at_smoke_runs_both_phases(tmp_path):
    from depthscale.report.reproduce import reproduce

    from depthscale.store.store import Store

    out = reproduce("convergence", "smoke", tmp_path / "s", tmp_path / "o", progress=False)
    res = Results.from_store(StoredRuns(Store(tmp_path / "s")), "smoke")
    later = cv.followup(res)
    assert out["sweep"]["failed"] == 0 and later
    done = set(pd.DataFrame(res.df)["run_id"])
    assert all(c.run_id in done for c in later)  # phase 2 ran inside the one reproduce
    notes = (tmp_path / "o" / "report.md").read_text()
    assert "Chosen by the final monitor loss — L=1: " in notes
    # the certificates and 5a's power were computed on the study's own runs (they have models)
    outcome = re.search(r"Outcome — \(0,0\): (reproduced|not reproduced|undetermined) — (.*)", notes)
    assert outcome and "certificates (doubling, construction, budget)" in outcome.group(2), notes
    assert "not computed" not in outcome.group(2) or "power" in outcome.group(2)
    rows = cv.study_rows(res)
    top = [r for r in rows if r["series"] == "envelope" and r["steps"] == cv.BUDGETS["smoke"][-1]][0]
    assert top["certificates"] is not None and set(top["certificates"]) == set(top["depths"])
    assert all({"doubling", "construction"} <= set(v) or L == min(top["depths"])
               for L, v in top["certificates"].items())
    assert all("budget" in v for v in top["certificates"].values())  # half of 160 steps is 80, a budget
    best = [r for r in rows if r["series"] == cv.BEST][0]  # the decision's row: a budget per depth by the monitor
    assert set(best["steps_L"]) <= set(cv.BUDGETS["smoke"]) and best["depths"] == top["depths"]
    assert all(math.isfinite(m) for m in best["monitor"])
    curves = pd.DataFrame(cv.curve_rows(rows))  # what curves.csv holds: B_L and each certificate's numbers
    mine = curves[(curves["series"] == "envelope") & (curves["steps"] == cv.BUDGETS["smoke"][-1])]
    assert mine["B_L"].notna().all() and (mine["B_L"] > 0).all()
    for _, c in mine.iterrows():
        assert c["budget_ok"] == top["certificates"][c["L"]]["budget"]
        assert c["budget_ok"] == (c["budget_diff"] <= 2 * c["budget_se"])


def test_the_committed_cpu_study_files_tell_one_story():
    """studies/results/convergence/: the decision names exactly the certificates curves.csv fails at
    the largest budget, its fit is budgets.csv's, and recipe.md §13 and the README quote its outcome."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    d = root / "studies" / "results" / "convergence"
    if not (d / "decision.json").exists():
        pytest.skip("the cpu study's results are not committed")
    dec = json.loads((d / "decision.json").read_text())["decisions"][0]
    curves, budgets = pd.read_csv(d / "curves.csv"), pd.read_csv(d / "budgets.csv")
    top = curves[(curves["series"] == "envelope") & (curves["steps"] == dec["budget"])]
    failing = [f"L={int(r['L'])} {n}" for _, r in top.iterrows() for n in ("doubling", "construction", "budget")
               if str(r[f"{n}_ok"]) == "False"]
    assert dec["certified"] == (not failing)
    named = re.findall(r"L=(\d+) (doubling|construction|budget) [+-]", dec["text"])
    assert sorted(f"L={L} {n}" for L, n in named) == sorted(failing)
    row = budgets[(budgets["series"] == "envelope") & (budgets["steps"] == dec["budget"])].iloc[0]
    assert f"α {row['alpha']:.2f} ± {row['alpha SE']:.2f}" in dec["text"]
    assert (row["5a"] == "pass") == dec["passes_5a"]
    # the refined rule's decision on the same export (studies/convergence_redecide.py) is what the docs quote
    refined = d / "decision_refined.json"
    if refined.exists():
        dec = json.loads(refined.read_text())["decision"]
        for part in ("all_depths", "certified_depths"):
            assert dec[part]["outcome"] in ("reproduced", "not reproduced", "undetermined")
        assert dec["outcome"] == ("not reproduced" if dec["all_depths"]["outcome"] == dec["certified_depths"]["outcome"]
                                  == "not reproduced" else dec["outcome"])
        assert f"α {row['alpha']:.2f} ± {row['alpha SE']:.2f}" in dec["text"]  # part (a) is budgets.csv's fit
        # the mechanism (issue 48 item 4): gap.csv is the envelope's C_L and A_L − C_L at that budget, and γ
        # the slope of log(A_L − C_L) on log L, against numpy's least squares and its textbook SE
        gamma = json.loads(refined.read_text())["gamma"]
        gap = pd.read_csv(d / "gap.csv")
        env = curves[(curves["series"] == "envelope") & (curves["steps"] == int(gap["steps"].iloc[0]))].sort_values("L")
        assert gap["L"].tolist() == env["L"].tolist()
        assert np.allclose(gap["A_minus_C"], env["A_minus_C"], equal_nan=True, rtol=1e-12)
        assert np.allclose(gap["A_minus_C_over_L"], env["A_minus_C"] / env["L"], equal_nan=True, rtol=1e-12)
        ok = gap["A_minus_C"].notna()
        x, y = np.log(gap["L"][ok].to_numpy(float)), np.log(gap["A_minus_C"][ok].to_numpy(float))
        (slope, icept), res, *_ = np.polyfit(x, y, 1, full=True)
        se = math.sqrt(res[0] / (len(x) - 2) / ((x - x.mean()) ** 2).sum())
        assert gamma["depths"] == gap["L"][ok].tolist()
        assert gamma["gamma"] == pytest.approx(slope, rel=1e-10) and gamma["gamma_se"] == pytest.approx(se, rel=1e-10)
    for doc in ("docs/recipe.md", "README.md"):
        text = (root / doc).read_text()
        assert dec["outcome"] in text and f"{row['alpha']:.2f} ± {row['alpha SE']:.2f}" in text, doc


def test_the_optimums_alpha_range_against_closed_forms():
    """Issue 48 item 3: through R_1, R_2 and below every deeper R_L, the law's α lies in [α_min, α_max];
    an exact law at α0 everywhere gives α_max = α0 (the bound at each depth is tight there and the
    left side falls with α); α_min = −log2(1 − (R_1 − R_2)/R_1) is L0 = 0."""
    L = list(DEPTHS)
    for a0 in (0.5, 0.7, 1.0, 1.4):
        got = cv.law_alpha_range(L, [2.0 + 0.09 * x ** -a0 for x in L])
        assert got["alpha_max"] == pytest.approx(a0, abs=1e-6)
    R = [2.0 + 0.09 * x ** -1.0 for x in L]
    got = cv.law_alpha_range(L, R)
    assert got["alpha_min"] == pytest.approx(-math.log2(1 - (R[0] - R[1]) / R[0]))
    # the achieved deep end lower than any law through the pins allows at large L: a tighter α_max, set by L = 64
    deeper = R[:-1] + [R[-1] - 0.02]
    tight = cv.law_alpha_range(L, deeper)
    assert tight["alpha_max"] < 1.0 and tight["binding_depth"] == 64
    # below what even the flattest law (α_min) reaches: no law fits
    assert math.isnan(cv.law_alpha_range(L, R[:-1] + [0.5])["alpha_max"])
    with pytest.raises(Exception, match="R_1 > R_2"):
        cv.law_alpha_range(L, [2.0, 2.1, 2.0, 2.0, 2.0, 2.0, 2.0])


def test_the_optimums_alpha_range_at_a_binding_middle_depth_and_at_its_edges():
    """With L = 4 the tightest bound, α_max has a closed form: (R_1 − R_2)(1 − 4^−α)/(1 − 2^−α) =
    (R_1 − R_2)(1 + 2^−α) = R_1 − R_4 gives α = −log2((R_1 − R_4)/(R_1 − R_2) − 1)."""
    L = list(DEPTHS)
    R = [0.3 + 0.09 * x ** -1.0 for x in L]  # values below 1: the check is R_2 > 0, not more
    R[2] -= 0.01  # L = 4 reached lower than the law allows: it binds
    got = cv.law_alpha_range(L, R)
    assert got["binding_depth"] == 4
    assert got["alpha_max"] == pytest.approx(-math.log2((R[0] - R[2]) / (R[0] - R[1]) - 1), abs=1e-6)  # tol 1e-9 in R
    assert set(got) == {"alpha_min", "alpha_max", "binding_depth", "assumptions"} and got["assumptions"] == cv.LAW_ASSUMPTIONS
    # nothing deeper than 2, or a deep end no lower than R_2: every α up to the search's cap (64) fits
    assert cv.law_alpha_range([1, 2], R[:2]) == {"alpha_min": pytest.approx(-math.log2(1 - (R[0] - R[1]) / R[0])),
                                                 "alpha_max": 64.0, "binding_depth": None,
                                                 "assumptions": cv.LAW_ASSUMPTIONS}
    flat = cv.law_alpha_range(L, R[:2] + [R[1]] * (len(L) - 2))
    assert flat["alpha_max"] == pytest.approx(64.0) and flat["binding_depth"] in L[2:]
    nan = cv.law_alpha_range(L, R[:-1] + [0.01])  # below the flattest law: nothing fits, every key still there
    assert math.isnan(nan["alpha_min"]) and math.isnan(nan["alpha_max"]) and nan["binding_depth"] is None
    assert nan["assumptions"] == cv.LAW_ASSUMPTIONS
    for depths, vals in (([1, 3, 4], [2.0, 1.9, 1.8]), ([2, 4, 8], [2.0, 1.9, 1.8]), (L, [2.0, 2.1, 1.9, 1.8, 1.7, 1.6, 1.5]),
                         (L, [1.0, 0.0, -0.1, -0.2, -0.3, -0.4, -0.5]), (L, [2.0, 2.0, 1.9, 1.8, 1.7, 1.6, 1.5])):
        with pytest.raises(InputError, match=r"^law_alpha_range needs depths starting 1, 2 with R_1 > R_2 > 0$"):
            cv.law_alpha_range(depths, vals)


def test_the_study_figure_is_redrawn_from_the_committed_export():
    """studies/convergence_redecide.py rebuilds the study's rows from curves.csv (the store is gone) and
    draws the report's six panels from them: every series and budget, and the monitor-best row whose
    drops are decision_refined.json's."""
    import importlib.util
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    d = root / "studies" / "results" / "convergence"
    if not (d / "curves.csv").exists():
        pytest.skip("the cpu study's results are not committed")
    sys.path.insert(0, str(root / "studies"))
    try:
        spec = importlib.util.spec_from_file_location("convergence_redecide", root / "studies" / "convergence_redecide.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(root / "studies"))
    rows = mod.export_rows(d)
    assert sorted((r["series"], r["steps"]) for r in rows) == sorted(
        [(s, n) for s in ("envelope", "faithful") for n in (5000, 10000, 20000)] + [(cv.BEST, 20000)])
    best = rows[-1]
    dec = json.loads((d / "decision_refined.json").read_text())["decision"]
    assert [round(x["drop"], 10) for x in best["drops"]] == [round(x["drop"], 10) for x in dec["drops"]]
    env20 = next(r for r in rows if (r["series"], r["steps"]) == ("envelope", 20000))
    assert env20["certificate_detail"] and all(math.isfinite(v["B"]) for v in env20["certificate_detail"].values())
    fig = cv.figure_rows(rows, "cpu")
    titles = [ax.get_title(loc="left") or ax.get_title() for ax in fig.axes]
    assert sum(t.startswith(f"({c})") for c in "abcdef" for t in titles) == 6, titles
