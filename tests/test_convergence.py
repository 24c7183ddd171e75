"""The convergence study (SPEC §9): phase 1's grid chosen by the monitor, phase 2's runs, the
per-budget reading and the decision rule in each outcome — on synthetic results whose laws are known."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from depthscale.analysis.results import Results
from depthscale.config.run import grid_names
from depthscale.experiments import convergence as cv
from depthscale.experiments.registry import REGISTRY

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
    assert {(r["series"], r["steps"]) for r in rows} == {(s, n) for s in ("envelope", "faithful") for n in cv.BUDGETS[PRESET]}
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
    bad = {**ok, 8: {"doubling": False, "construction": True, "budget": True}}
    assert cv.decision(cv.study_rows(res, certify=lambda r: bad, power=lambda r: 0.9))["outcome"] == "undetermined"
    flat = _with_budgets(_grid_frame(), _flat)
    assert cv.decision(cv.study_rows(flat, certify=lambda r: ok, power=lambda r: 0.9))["outcome"] == "not reproduced"
    assert cv.decision(cv.study_rows(flat, certify=lambda r: ok, power=lambda r: 0.5))["outcome"] == "undetermined"


def test_export_writes_the_grid_budgets_and_decision(tmp_path):
    res = _with_budgets(_grid_frame(), _inverse)
    paths = cv.export(res, tmp_path)
    grid = pd.read_csv(paths[0])
    assert len(grid) == len(grid_names()) * len(DEPTHS) and grid["chosen"].sum() == len(DEPTHS)
    assert len(pd.read_csv(paths[1])) == 6
    curves = pd.read_csv(paths[2])  # per (series, budget, depth); no store here: no B_L, no certificates
    assert len(curves) == 6 * len(DEPTHS) and curves["B_L"].isna().all()
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
    res = Results.from_store(Store(tmp_path / "s"), "smoke")
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
    for doc in ("docs/recipe.md", "README.md"):
        text = (root / doc).read_text()
        assert dec["outcome"] in text and f"{row['alpha']:.2f} ± {row['alpha SE']:.2f}" in text, doc
