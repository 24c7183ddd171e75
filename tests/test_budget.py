"""The budget ladder's reading (depthscale.budget): per-seed fits, the decision rule of SPEC §9 in
each of its outcomes, the figure, table and exported files — on synthetic results whose laws are
known, so every number has an independent value."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from depthscale.analysis.results import Results, Theory
from depthscale.experiments import budget
from depthscale.experiments.budget import BUDGET_STEPS
from depthscale.experiments.registry import REGISTRY


def _frame(alpha_of, L0=2.0, c=0.5, noise=0.002, drop_steps=()):
    """Budget-ladder rows at the cpu preset: R_L = L0 + c L^-alpha(start, steps) times a small
    deterministic per-seed wiggle (so per-seed fits have residuals and SEs)."""
    rows = []
    for cfg in REGISTRY["budget"].configs("cpu"):
        if cfg.max_steps in drop_steps:
            continue
        start = "spread" if cfg.qk_init == "spread" else "faithful"
        al = alpha_of(start, cfg.max_steps)
        wiggle = 1 + noise * math.sin(3.1 * cfg.L + 1.7 * cfg.seed + cfg.max_steps)
        R = (L0 + c * cfg.L ** -al) * wiggle
        rows.append({"run_id": cfg.run_id, **cfg.to_dict(), "R": R, "R_se": 0.01, "A": R + 0.1 * (cfg.L > 1),
                     "C": R - 0.1 / cfg.L * (cfg.L > 1), "var_ystar": 10.0, "best_step": cfg.max_steps,
                     "final_monitor_loss": R, "train_seconds": 1.0})
    return pd.DataFrame(rows)


def _growing(start, steps):
    """faithful: alpha grows with the budget and enters the window; spread: always ~1."""
    return 1.0 if start == "spread" else 0.2 + 0.8 * (BUDGET_STEPS.index(steps) / (len(BUDGET_STEPS) - 1))


def test_ladder_rows_recover_the_laws():
    res = Results(_frame(_growing), "cpu")
    rows = budget.ladder(res)
    assert len(rows) == 2 * len(BUDGET_STEPS)
    for r in rows:
        assert r["n_seeds"] == 3 and r["complete"] and r["n_fits_ok"] == 3
        assert r["alpha"] == pytest.approx(_growing(r["recipe"], r["steps"]), abs=0.05)
        # L0 and c trade off when alpha is small (0.2: c L^-alpha is nearly flat over 1-64)
        assert r["L0"] == pytest.approx(2.0, abs=0.1 if r["alpha"] < 0.5 else 0.02)
        assert r["budget"] == r["steps"] * 512


@pytest.mark.parametrize("alpha_of, outcome", [
    (_growing, "reproduced"),
    (lambda start, steps: 1.0 if start == "spread" else 0.2, "property of the start"),
    (lambda start, steps: 0.3, "not reproduced"),
    # in the window at the top, but the smallest budget was there too: no trend needed (both inside)
    (lambda start, steps: 1.0, "reproduced"),
])
def test_decision_rule_outcomes(alpha_of, outcome):
    d = budget.decisions(Results(_frame(alpha_of), "cpu"))
    assert [x["outcome"] for x in d] == [outcome]
    assert "(0, 0)" in d[0]["text"] or "(0,0)" in d[0]["text"]


def test_decision_waits_for_the_largest_budget():
    d = budget.decisions(Results(_frame(_growing, drop_steps=(max(BUDGET_STEPS),)), "cpu"))
    assert d[0]["outcome"] == "undecided" and "not complete" in d[0]["text"]


def test_figure_table_and_export(tmp_path):
    from matplotlib import rc_context

    from depthscale.report import figures
    from depthscale.analysis import plotting

    res = Results(_frame(_growing), "cpu")
    with rc_context(plotting.STYLE):
        fig = budget.figure(res, Theory("cpu", cache=tmp_path / "t.json"))
    assert [ax.get_title(loc="left")[:3] for ax in fig.axes] == ["(a)", "(b)", "(c)", "(d)"]
    frame = budget.table_frame(res, None)
    assert len(frame) == 2 * len(BUDGET_STEPS) and {"alpha (seeds)", "alpha SE", "L0 (seeds)"} <= set(frame.columns)
    paths = budget.export(res, tmp_path / "out")
    runs = pd.read_csv(paths[0])
    assert len(runs) == len(REGISTRY["budget"].configs("cpu"))
    dec = json.loads(paths[2].read_text())
    assert dec["decisions"][0]["outcome"] == "reproduced" and "SPEC §9" in dec["rule"]
    assert np.isfinite(pd.read_csv(paths[1])["alpha (seeds)"]).all()


def test_the_ladder_runs_as_registered():
    """cpu: (0, 0), depths 1-64, 3 seeds, both starts, batch 512, budgets x2 up to 20,000 steps, each
    run to its cap; paper: the ten top-2 spectra, depths 1-256."""
    from depthscale.config.run import PRESET_DEPTHS
    from depthscale.config.paper import TOP2_SPECTRA

    cpu = REGISTRY["budget"].configs("cpu")
    assert {(c.a, c.b) for c in cpu} == {(0.0, 0.0)} and {c.L for c in cpu} == set(PRESET_DEPTHS["cpu"])
    assert {c.seed for c in cpu} == {0, 1, 2} and {c.batch for c in cpu} == {512}
    assert sorted({c.max_steps for c in cpu}) == list(BUDGET_STEPS) and max(BUDGET_STEPS) == 20000
    assert all(BUDGET_STEPS[i + 1] == 2 * BUDGET_STEPS[i] for i in range(len(BUDGET_STEPS) - 1))
    assert all(c.min_steps == c.max_steps for c in cpu)
    assert {c.qk_init for c in cpu} == {"independent", "spread"}
    assert {(c.qk_init, c.lr_depth_exp) for c in cpu} == {("independent", 0.0), ("spread", -0.5)}
    paper = REGISTRY["budget"].configs("paper")
    assert {(c.a, c.b) for c in paper} == set(TOP2_SPECTRA) and {c.L for c in paper} == set(PRESET_DEPTHS["paper"])
    assert REGISTRY["budget"].configs("smoke") == []
