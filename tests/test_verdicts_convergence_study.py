"""The convergence study's reading pinned exactly (SPEC §4, §9): `selection_at` (phase 1's choice needs
every grid seed), `followup` (phase 2's configs, the study's fields winning over a reproduce's),
`study_curve` (the seed means of R, C, A − C and the monitor per picked depth, what it skips),
`monitor_best_picks` (the budget with the lowest seed-mean monitor, its eligibility and ties),
`study_rows` (cached only with the defaults), `_study_rows` (its series, `complete`, what `certify`
is handed) and `drops`' SEs and ratios at their edges — each on values chosen so that a changed
condition changes the answer."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from test_convergence import DEPTHS, WINNER, _grid_frame
from test_verdicts_convergence import _cfg
from test_verdicts_convergence import _run as _stored_run

from depthscale.analysis.results import Results
from depthscale.experiments import convergence as cv

PRESET = "cpu"
DEFAULT = "default-1e-2-flat"
CONSTRUCTIVE = "constructive-3e-3-taper"
COLUMNS = ("R", "R_se", "A", "C", "final_monitor_loss")


def _run(L, name, steps, seed, drop=(), **metrics):
    """test_verdicts_convergence's stored run of (L, name, steps, seed), `metrics` set and the keys `drop` left out."""
    row = {**_stored_run(_cfg(L, name, steps, seed)), **metrics}
    return {k: v for k, v in row.items() if k not in drop}


def _res(rows, drop=()):
    df = pd.DataFrame(rows)
    return Results(df.drop(columns=[c for c in drop if c in df.columns]), PRESET)


# --- selection_at, followup ---------------------------------------------------------------------

def test_selection_at_needs_every_grid_seed_of_a_point():
    rows = [r for r in _grid_frame() if not (r["L"] == 4 and r["seed"] == 2 and r["run_id"] in _winner_ids(4))]
    chosen = {c["L"]: c["recipe"] for c in cv.selection_at(Results(pd.DataFrame(rows), PRESET))["chosen"]}
    assert chosen[4] != WINNER[4]  # its monitor is best, but one of GRID_SEEDS is missing: not eligible
    assert {L: chosen[L] for L in DEPTHS if L != 4} == {L: WINNER[L] for L in DEPTHS if L != 4}
    # every point of a depth a seed short: none has all GRID_SEEDS, so the depth has no choice
    rows = [r for r in _grid_frame() if not (r["L"] == 8 and r["seed"] == 2)]
    sel = {c["L"]: c for c in cv.selection_at(Results(pd.DataFrame(rows), PRESET))["chosen"]}
    assert sel[8]["recipe"] is None and ">= 3 seeds" in sel[8]["reason"] and sel[4]["recipe"] == WINNER[4]


def _winner_ids(L):
    return {cv.make_config(PRESET, **cv.study_fields(PRESET, WINNER[L], cv.GRID_STEPS[PRESET]), model="nonlinear",
                           task="difficult", k=2, a=0.0, b=0.0, L=L, seed=s).run_id for s in cv.GRID_SEEDS}


def test_followup_builds_each_chosen_cell_at_every_budget_and_seed_the_study_winning_over_overrides(monkeypatch):
    chosen = [{"recipe": DEFAULT, "k": 16, "a": 0.5, "b": 1.0, "L": 4},
              {"recipe": None, "k": 2, "a": 1.0, "b": 0.0, "L": 8},  # no point chosen: the faithful start alone
              {"recipe": cv.FAITHFUL, "k": 2, "a": 0.0, "b": 0.0, "L": 2}]  # chosen = faithful: once
    monkeypatch.setattr(cv, "selection_at", lambda res: {"chosen": chosen})
    over = {"model": "linear", "task": "easy", "k": 1, "a": 2.0, "b": 2.0, "L": 1, "seed": 9, "batch": 7,
            "max_steps": 3, "eval_contexts": 1024}
    got = cv.followup(SimpleNamespace(preset="smoke", overrides=over))
    want = [cv.make_config("smoke", **cv.study_fields("smoke", n, st), eval_contexts=1024, model="nonlinear",
                           task="difficult", k=c["k"], a=c["a"], b=c["b"], L=c["L"], seed=s)
            for c in chosen for n in dict.fromkeys(x for x in (c["recipe"], cv.FAITHFUL) if x is not None)
            for st in cv.BUDGETS["smoke"] for s in cv.BUDGET_SEEDS]
    assert [c.run_id for c in got] == [c.run_id for c in want] and len(got) == 4 * 3 * 5
    assert {(c.preset, c.model, c.task, c.batch, c.eval_contexts) for c in got} == {("smoke", "nonlinear", "difficult", 64, 1024)}
    assert {(c.L, c.k, c.a, c.b) for c in got} == {(4, 16, 0.5, 1.0), (8, 2, 1.0, 0.0), (2, 2, 0.0, 0.0)}
    assert {c.seed for c in got} == set(cv.BUDGET_SEEDS) and {c.max_steps for c in got} == set(cv.BUDGETS["smoke"])


# --- study_curve --------------------------------------------------------------------------------

def _curve_res(drop=()):
    rows = [_run(1, DEFAULT, 5000, 0, R=2.0, C=1.5, A=2.5, final_monitor_loss=2.25),
            _run(1, DEFAULT, 5000, 1, R=3.0, C=2.5, A=4.5, final_monitor_loss=2.75),
            _run(2, DEFAULT, 5000, 0, R=9.0),  # L = 2: picked as (None, 5000), never read
            _run(4, DEFAULT, 5000, 0, R=9.0),  # L = 4: not picked
            _run(8, CONSTRUCTIVE, 10000, 0, R=math.nan),  # L = 8: picked, no finite R: skipped
            _run(16, CONSTRUCTIVE, 20000, 0, R=1.0, C=0.5, A=1.5, final_monitor_loss=1.25),
            _run(16, CONSTRUCTIVE, 20000, 1, R=1.5, C=0.75, A=2.75, final_monitor_loss=1.75),
            _run(16, CONSTRUCTIVE, 20000, 2, R=2.0, C=1.0, A=1.0, final_monitor_loss=1.0)]
    return _res(rows, drop)


PICKS = {1: (DEFAULT, 5000), 2: (None, 5000), 8: (CONSTRUCTIVE, 10000), 16: (CONSTRUCTIVE, 20000)}


def test_study_curve_takes_seed_means_of_r_c_the_gap_and_the_monitor_at_each_picked_depth():
    c = cv.study_curve(_curve_res(), PICKS, 0.0, 0.0)
    assert c == {"depths": [1, 16], "R": [2.5, 1.5], "R_seeds": [[2.0, 3.0], [1.0, 1.5, 2.0]], "C": [2.0, 0.75],
                 "gap": [1.5, 1.0], "n": [2, 3], "recipe": [DEFAULT, CONSTRUCTIVE], "steps_L": [5000, 20000],
                 "monitor": [2.5, 4.0 / 3.0], "monitor_seeds": [[2.25, 2.75], [1.25, 1.75, 1.0]]}
    # `depths` replaces the preset's
    assert cv.study_curve(_curve_res(), PICKS, 0.0, 0.0, depths=[16])["depths"] == [16]
    assert cv.study_curve(_curve_res(), PICKS, 0.0, 0.0, depths=[32, 1])["depths"] == [1]


def test_study_curve_without_c_a_or_the_monitor_in_the_store_reads_them_as_not_measured():
    c = cv.study_curve(_curve_res(drop=("C", "A", "final_monitor_loss")), PICKS, 0.0, 0.0)
    assert c["depths"] == [1, 16] and c["R"] == [2.5, 1.5]
    assert all(math.isnan(x) for x in c["C"] + c["gap"] + c["monitor"])
    assert all(math.isnan(x) for x in c["monitor_seeds"][0] + c["monitor_seeds"][1])
    assert cv.study_curve(_curve_res(drop=("R",)), PICKS, 0.0, 0.0)["depths"] == []


# --- monitor_best_picks -------------------------------------------------------------------------

def _budgets(L, name, means, seeds=cv.BUDGET_SEEDS, extra=None):
    """Runs of `name` at depth L with seed-mean final monitor loss means[steps] (exact: one value per
    budget); extra[steps]: further metrics of that budget's runs."""
    return [_run(L, name, st, s, final_monitor_loss=m, **(extra or {}).get(st, {})) for st, m in means.items()
            for s in seeds]


def test_monitor_best_picks_lowest_mean_among_budgets_with_every_seed_the_first_on_a_tie():
    rows = (_budgets(2, DEFAULT, {5000: 2.0, 20000: 1.5})
            + _budgets(2, DEFAULT, {10000: 1.0}, seeds=cv.BUDGET_SEEDS[:-1])  # best, but a seed short
            + _budgets(4, CONSTRUCTIVE, {5000: 1.5, 10000: 1.5, 20000: 1.6})  # a tie: the smaller budget
            + _budgets(8, DEFAULT, {5000: 1.75, 20000: 1.0}, extra={20000: {"R": math.nan}}))  # no R: not eligible
    chosen = {1: None, 2: DEFAULT, 4: CONSTRUCTIVE, 8: DEFAULT, 16: DEFAULT}  # L = 16 has no runs
    assert cv.monitor_best_picks(_res(rows), chosen, 0.0, 0.0) == {2: (DEFAULT, 20000), 4: (CONSTRUCTIVE, 5000),
                                                                  8: (DEFAULT, 5000)}


def test_monitor_best_picks_without_the_monitor_or_r_in_the_store_picks_nothing():
    rows = _budgets(2, DEFAULT, {5000: 2.0})
    for missing in ("final_monitor_loss", "R"):
        assert cv.monitor_best_picks(_res(rows, (missing,)), {2: DEFAULT}, 0.0, 0.0) == {}


# --- study_rows, _study_rows --------------------------------------------------------------------

def test_study_rows_caches_only_the_default_reading(monkeypatch):
    calls = []

    def fake(res, certify, power):
        calls.append((certify, power))
        return [{"call": len(calls)}]

    monkeypatch.setattr(cv, "_study_rows", fake)
    res = SimpleNamespace()
    first = cv.study_rows(res)
    assert cv.study_rows(res) is first and calls == [(None, None)]
    f, g = (lambda r: None), (lambda r: 0.5)
    assert cv.study_rows(res, certify=f) == [{"call": 2}] and calls[-1] == (f, None)
    assert cv.study_rows(res, power=g) == [{"call": 3}] and calls[-1] == (None, g)
    assert cv.study_rows(res) is first and len(calls) == 3


def test_study_rows_skips_empty_series_marks_incomplete_curves_and_hands_certify_each_row(monkeypatch):
    monkeypatch.setattr(cv, "selection_at", lambda res: {"chosen": [{"L": L, "recipe": DEFAULT, "a": 0.0, "b": 0.0}
                                                                     for L in DEPTHS]})
    rows = [_run(L, cv.FAITHFUL, 5000, s, R=2.0 + 0.1 / L) for L in DEPTHS for s in cv.BUDGET_SEEDS]
    rows += [_run(L, cv.FAITHFUL, 10000, s) for L in DEPTHS for s in cv.BUDGET_SEEDS if (L, s) != (8, 4)]
    rows += [_run(L, cv.FAITHFUL, 20000, s) for L in DEPTHS if L != 64 for s in cv.BUDGET_SEEDS]
    handed = []
    got = cv.study_rows(_res(rows), certify=lambda row: handed.append(row) or {"series": row["series"]},
                        power=lambda row: None)
    # no run of the chosen point: every envelope row and the monitor-best row are empty and skipped
    assert [(r["series"], r["steps"], r["complete"]) for r in got] == [
        ("faithful", 5000, True), ("faithful", 10000, False), ("faithful", 20000, False)]
    assert handed == got and all(r["certificates"] == {"series": "faithful"} for r in got)
    assert got[1]["n"] == [5, 5, 5, 4, 5, 5, 5] and got[2]["depths"] == list(DEPTHS[:-1])


# --- drops --------------------------------------------------------------------------------------

def test_drops_se_needs_two_seeds_and_a_ratio_needs_a_non_zero_previous_drop():
    row = {"depths": [1, 2, 4, 8, 16], "R": [4.0, 3.0, 2.5, 2.5, 2.0],
           "R_seeds": [[4.0], [2.9, 3.1], [2.5, 2.5], [2.4, 2.6], [1.9, 2.0, 2.1]]}
    d = cv.drops(row)
    assert [x["drop"] for x in d] == [1.0, 0.5, 0.0, 0.5]
    assert math.isnan(d[0]["se"])  # L = 1 has one seed: its SE, and so the drop's, is unknown
    assert d[1]["se"] == pytest.approx(math.hypot(0.1, 0.0), abs=1e-12)
    assert d[3]["se"] == pytest.approx(math.hypot(0.1, 0.1 / math.sqrt(3)), abs=1e-12)
    assert math.isnan(d[0]["ratio"]) and d[1]["ratio"] == 0.5 and d[2]["ratio"] == 0.0
    assert math.isnan(d[3]["ratio"])  # the previous drop is 0: no ratio
    assert np.isfinite([x["se"] for x in d[1:]]).all()
