"""The convergence study at four more spectra (SPEC §9 "More spectra"; issue 48 items 1, 4, 5): the
fixed grid's configs, the (0,0) choice table, the 3-seed power that adds seeds 3 and 4, the
envelope over points and budgets chosen by the monitor, γ against its closed form, the export."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from depthscale.analysis.results import Results
from depthscale.base.errors import InputError
from depthscale.experiments import convergence as cv
from depthscale.experiments import convergence_spectra as cs
from depthscale.experiments.registry import REGISTRY
from depthscale.runs.per_context import StoredRuns

ROOT = Path(__file__).resolve().parents[1]
K2, TOP16 = cs.SPECTRA[0], cs.SPECTRA[3]


def _point(cfg) -> str:
    return next(n for n in set(cs.CHOSEN_00.values()) | {cv.FAITHFUL}
                if all(getattr(cfg, k) == v for k, v in cv.study_fields(cfg.preset, n, cfg.max_steps).items()))


@pytest.mark.parametrize("preset", ["cpu", "paper"])
def test_the_fixed_grid_per_spectrum(preset):
    total = 0
    for spec in cs.SPECTRA:
        cfgs = REGISTRY[f"convergence-spectra-{spec.tag}"].configs(preset)
        depths = (1, 2, 4, 8, 16, 32, 64) + ((128,) if spec.k == 16 else ())
        assert len(cfgs) == len(depths) * 2 * 3 * 3  # depths x {chosen at (0,0), faithful} x budgets x seeds
        assert {(c.a, c.b, c.k) for c in cfgs} == {(spec.a, spec.b, spec.k)}
        assert {c.L for c in cfgs} == set(depths) and {c.seed for c in cfgs} == {0, 1, 2}
        assert {c.max_steps for c in cfgs} == {5000, 10000, 20000} and {c.batch for c in cfgs} == {512}
        assert all(not c.early_stop and c.monitor_contexts >= 10_240 for c in cfgs)
        for L in depths:
            got = {_point(c) for c in cfgs if c.L == L}
            assert got == {cs.CHOSEN_00[min(L, 64)], cv.FAITHFUL}, L  # L = 128: L = 64's point
        total += len(cfgs)
    every = REGISTRY["convergence-spectra"].configs(preset)
    assert len(every) == total == 3 * 126 + 144 and REGISTRY["convergence-spectra"].part == "study"


def test_smoke_keeps_its_depths_and_has_no_top16():
    assert REGISTRY["convergence-spectra-top16"].configs("smoke") == []
    cfgs = REGISTRY["convergence-spectra-1-0"].configs("smoke")
    assert {c.L for c in cfgs} == {1, 2, 4} and {c.max_steps for c in cfgs} == set(cv.BUDGETS["smoke"])
    assert len(cfgs) == 3 * 2 * 3 * 3


def test_the_choice_table_is_the_committed_00_study():
    chosen = json.loads((ROOT / "studies/results/convergence/decision.json").read_text())["chosen"]
    assert {c["L"]: c["recipe"] for c in chosen} == cs.CHOSEN_00


def test_spectrum_names():
    assert cs.spectrum("1,0") == K2 and cs.spectrum("0,0.5") == TOP16 and cs.spectrum("05-05").a == 0.5
    with pytest.raises(InputError, match="spectrum must be one of"):
        cs.spectrum("0,0")


def test_gamma_against_its_closed_form():
    # exact power law: the slope itself, no residual
    g = cs.gamma_fit([1, 2, 4, 8, 16], [math.nan, 0.3 * 2 ** 0.4, 0.3 * 4 ** 0.4, 0.3 * 8 ** 0.4, 0.3 * 16 ** 0.4])
    assert g["gamma"] == pytest.approx(0.4, abs=1e-12) and g["gamma_se"] == pytest.approx(0, abs=1e-12)
    assert g["depths"] == [2, 4, 8, 16] and math.exp(g["log_c"]) == pytest.approx(0.3)
    # L = 2, 4, 8 with A - C = 1, 2, 2: x = ln2 (1, 2, 3), y = ln2 (0, 1, 1): slope 1/2, residuals
    # ln2 (-1/6, 1/3, -1/6), SE = sqrt(SSR / (n - 2) / Sxx) = sqrt((ln²2 / 6) / (2 ln²2)) = sqrt(1/12)
    g = cs.gamma_fit([2, 4, 8], [1.0, 2.0, 2.0])
    assert g["gamma"] == pytest.approx(0.5) and g["gamma_se"] == pytest.approx(math.sqrt(1 / 12))
    # R² = 1 - SSR / SST = 1 - (ln²2 / 6) / (ln²2 · 2/3) = 3/4; an exact law has R² = 1
    assert g["r2"] == pytest.approx(0.75)
    assert cs.gamma_fit([2, 4, 8], [1.0, 2.0, 4.0])["r2"] == pytest.approx(1.0)
    assert "L^(γ−1) = L^(-0.500 ± 0.289)" in g["text"] and "consistent" in g["text"]
    assert math.isnan(cs.gamma_fit([2, 4], [1.0, 2.0])["gamma_se"])
    assert math.isnan(cs.gamma_fit([1], [math.nan])["gamma"])


def _frame(spec, noise: float, seeds=cs.SEEDS, preset="cpu"):
    """Every run of the spectrum with R_L = 2 + 0.1/L (+ per-seed noise), C_L = 2, A_L - C_L = 0.1 L^0.3
    (L > 1); the monitor prefers the faithful start at the largest budget and L >= 8 and the (0,0)
    point elsewhere, the evaluation loss the opposite (the choice must follow the monitor)."""
    rows = []
    for cfg in cs._experiment_of((spec,)).configs(preset, seeds=seeds):
        faithful = _point(cfg) == cv.FAITHFUL
        prefer_faithful = cfg.L >= 8 and cfg.max_steps == max(cv.BUDGETS[preset])
        mon = 2.0 - 0.01 * (faithful == prefer_faithful) - 1e-4 * cfg.max_steps / 5000 + 1e-4 * cfg.seed
        R = 2.0 + 0.1 / cfg.L + noise * math.sin(3 * cfg.seed + cfg.L) - 0.01 * (faithful != prefer_faithful)
        gap = 0.1 * cfg.L ** 0.3 if cfg.L > 1 else math.nan
        rows.append({"run_id": cfg.run_id, **cfg.to_dict(), "R": R, "R_se": 0.01, "C": 2.0 if cfg.L > 1 else math.nan,
                     "A": (2.0 + gap) if cfg.L > 1 else R, "var_ystar": 10.0, "final_monitor_loss": mon})
    return rows


def _res(rows, preset="cpu"):
    return Results(pd.DataFrame(rows), preset)


def test_seeds_three_and_four_follow_the_three_seed_power():
    quiet = _res(_frame(K2, 1e-5))
    complete, pw = cs.three_seed_power(quiet, K2)
    assert complete and pw is not None and pw >= cv.POWER_MIN
    assert cs.followup(quiet, (K2,)) == [] and cs.spectrum_seeds(quiet, K2) == (0, 1, 2)
    noisy = _frame(K2, 0.05)
    complete, pw = cs.three_seed_power(noisy_res := _res(noisy), K2)
    assert complete and (pw is None or pw < cv.POWER_MIN)
    more = cs.followup(noisy_res, (K2,))
    assert len(more) == 7 * 2 * 3 * 2 and {c.seed for c in more} == {3, 4}  # every run of the spectrum
    assert {c.run_id for c in more}.isdisjoint({r["run_id"] for r in noisy})
    assert cs.followup(_res(noisy), (TOP16,)) == []  # no top-16 runs yet: nothing decided
    # the added seeds do not change the power that called for them; until they finish the envelope is incomplete
    part = noisy + [r for r in _frame(K2, 0.05, seeds=(3, 4)) if r["L"] < 64]
    assert cs.three_seed_power(_res(part), K2) == (complete, pw)
    best = [r for r in cs.spectrum_rows(_res(part), K2, lambda row: None, lambda row: None) if r["series"] == cv.BEST][0]
    assert not best["complete"] and 64 not in best["depths"]
    full = _res(noisy + _frame(K2, 0.05, seeds=(3, 4)))
    best = [r for r in cs.spectrum_rows(full, K2, lambda row: None, lambda row: None) if r["series"] == cv.BEST][0]
    assert best["complete"] and min(best["n"]) == 5


def test_the_envelope_is_chosen_by_the_monitor_over_points_and_budgets():
    res = _res(_frame(TOP16, 1e-5))
    rows = cs.spectrum_rows(res, TOP16, certify=lambda row: None)
    best = [r for r in rows if r["series"] == cv.BEST][0]
    assert best["depths"] == [1, 2, 4, 8, 16, 32, 64, 128] and best["k"] == 16 and best["complete"]
    for L, name, st in zip(best["depths"], best["recipe"], best["steps_L"]):
        assert (name, st) == ((cv.FAITHFUL, 20000) if L >= 8 else (cs.points(L)[0], 20000)), L
    env5k = [r for r in rows if r["series"] == "envelope" and r["steps"] == 5000][0]
    assert env5k["recipe"] == [cs.points(L)[0] for L in env5k["depths"]] and set(env5k["steps_L"]) == {5000}
    assert {r["series"] for r in rows} == {"envelope", "faithful", cv.BEST} and len(rows) == 7
    assert best["gamma"]["gamma"] == pytest.approx(0.3) and best["gamma"]["depths"] == [2, 4, 8, 16, 32, 64, 128]
    dec = cv.decision(rows, TOP16.a, TOP16.b)  # R_L = 2 + 0.1/L exactly: 5a passes
    assert dec["all_depths"]["outcome"] == "reproduced" and dec["certified_depths"]["outcome"] == "undetermined"


def test_export_writes_the_00_studys_files_and_gamma(tmp_path):
    res = _res(_frame(K2, 1e-5))  # no store: the certificates say why they are missing
    paths = cs.export(res, tmp_path, K2)
    assert sorted(p.name for p in paths) == ["budgets.csv", "curves.csv", "decision.json", "gap.csv", "grid.csv"]
    dec = json.loads((tmp_path / "decision.json").read_text())
    assert dec["spectrum"] == "(1,0)" and dec["k"] == 2 and dec["seeds"] == [0, 1, 2]
    assert dec["power_5a_three_seeds"] >= cv.POWER_MIN and dec["gamma"]["gamma"] == pytest.approx(0.3)
    assert dec["decisions"][0]["outcome"] == "undetermined"  # (b) needs the certificates
    grid = pd.read_csv(tmp_path / "grid.csv")
    assert len(grid) == 7 * 3 * 2 and grid["picked"].sum() == 7
    gap = pd.read_csv(tmp_path / "gap.csv")
    assert np.allclose(gap["A_minus_C_over_L"].dropna(), (0.1 * gap["L"] ** 0.3 / gap["L"])[1:])
    assert set(pd.read_csv(tmp_path / "curves.csv")["k"]) == {2}
    notes = cs.notes(res, (K2,))
    assert "5a's power at 3 seeds" in notes[1] and "L^(γ−1)" in notes[1]
    fig = cs.figure(res, None, (K2,))
    titles = [a.get_title(loc="left") for a in fig.axes]
    assert len(titles) == 6 and all(t.startswith(f"({c}) k=2 (1,0): ") for c, t in zip("abcdef", titles)), titles
    assert "excess loss" in titles[2] and "drop per doubling" in titles[3] and "A_L - C_L" in titles[5]
    assert any(h.get_label().startswith("slope −1") for h in fig.axes[2].get_lines())
    assert any("R² = 1.000" in h.get_label() for h in fig.axes[5].get_lines())  # A - C = 0.1 L^0.3 exactly


@pytest.mark.slow
def test_reproduce_one_spectrum_at_smoke_and_export_it(tmp_path):
    import subprocess
    import sys

    from depthscale.report.reproduce import reproduce
    from depthscale.store.store import Store

    out = reproduce("convergence-spectra-1-0", "smoke", tmp_path / "s", tmp_path / "o", progress=False)
    assert out["sweep"]["failed"] == 0 and out["configs"] == 54
    res = Results.from_store(StoredRuns(Store(tmp_path / "s")), "smoke")
    assert all(c.run_id in set(res.df["run_id"]) for c in cs.followup(res, (K2,)))  # seeds 3, 4 ran where asked
    rows = cs.spectrum_rows(res, K2)
    best = [r for r in rows if r["series"] == cv.BEST][0]
    assert best["complete"] and best["certificates"] is not None and set(best["certificates"]) == {1, 2, 4}
    assert "(1,0)" in (tmp_path / "o" / "report.md").read_text()
    done = subprocess.run([sys.executable, str(ROOT / "studies" / "convergence_spectra.py"), "--store", str(tmp_path / "s"),
                           "--preset", "smoke", "--spectrum", "1,0", "--out", str(tmp_path / "x")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in (tmp_path / "x").iterdir()} >= {"grid.csv", "budgets.csv", "curves.csv", "gap.csv",
                                                           "decision.json", "convergence.png", "budgets.md"}
    # the learned metrics of the exported monitor-best envelope: per depth the runs gap.csv names
    gap = pd.read_csv(tmp_path / "x" / "gap.csv")
    done = subprocess.run([sys.executable, str(ROOT / "studies" / "learned_metrics.py"), "--store", str(tmp_path / "s"),
                           "--preset", "smoke", "--spectrum", "1,0", "--study", str(tmp_path / "x"),
                           "--out", str(tmp_path / "m")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    summary = pd.read_csv(tmp_path / "m" / "summary.csv")
    picked = {int(r.L): int(r.steps) for r in gap.itertuples()}
    assert sorted(set(summary["L"])) == sorted(picked) and len(summary) == gap["seeds"].sum()
    assert all(picked[int(r.L)] == int(r.steps) for r in summary.itertuples())
