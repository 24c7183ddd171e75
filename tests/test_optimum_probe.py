"""The optimum probe at L = 1, 2, 4 (issue 48 item 2): the fixed starts, their rates from the (0,0)
choice table, and the rows read against B_L (paired over contexts) on a smoke reproduction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from depthscale.analysis import paired
from depthscale.analysis.results import Results
from depthscale.experiments import convergence as cv
from depthscale.experiments import optimum_probe as op
from depthscale.experiments.convergence_spectra import CHOSEN_00
from depthscale.experiments.registry import REGISTRY


@pytest.mark.parametrize("preset", ["cpu", "paper"])
def test_at_least_sixteen_starts_per_depth_at_the_chosen_rate(preset):
    cfgs = REGISTRY[op.ID].configs(preset)
    assert REGISTRY[op.ID].part == "study" and len({c.run_id for c in cfgs}) == len(cfgs)
    for L in (1, 2, 4):
        at = [c for c in cfgs if c.L == L]
        assert len(at) == (16 if L == 1 else 20)
        assert {(c.a, c.b, c.k, c.task, c.model) for c in at} == {(0.0, 0.0, 2, "difficult", "nonlinear")}
        assert {c.max_steps for c in at} == {cv.BUDGETS[preset][-1]} and {c.batch for c in at} == {512}
        chosen = cv.study_fields(preset, CHOSEN_00[L], 1)
        assert {(c.lr, c.lr_depth_exp) for c in at} == {(chosen["lr"], chosen["lr_depth_exp"])}
        kinds = {(c.qk_init, c.qk_std, c.construct_heads) for c in at}
        assert {("constructive", n, 0) for n in (0.02, 0.1, 0.3)} <= kinds
        assert ("independent", 0.02, 0) in kinds and ("independent", 1 / math.sqrt(3 * at[0].N), 0) in kinds
        assert len({(c.tau_min, c.tau_max) for c in at if c.qk_init == "spread"}) == 3
        assert ({("constructive", n, 1) for n in (0.02, 0.1)} <= kinds) == (L > 1)
        assert all(c.wx_init == "orthogonal" and c.eval_contexts == 102_400 for c in at)


class _Reader:
    """A reader whose runs' per-context errors are given: enough for op.rows (paired's Protocol)."""

    def __init__(self, cfgs, sq):
        self.cfgs, self.sq = {c.run_id: c for c in cfgs}, sq

    def load_config(self, rid):
        return self.cfgs[rid]

    def load_curves(self, rid):
        return {}

    def per_context(self, rid, device="cpu"):
        return {"run_id": rid, "key": paired.eval_key(self.cfgs[rid]), "sq_err": self.sq[rid]}


def test_rows_and_summary_against_a_brute_force_paired_gap(monkeypatch):
    import pandas as pd

    cfgs = [c for c in REGISTRY[op.ID].configs("smoke") if c.qk_init != "spread"]
    rng = np.random.default_rng(0)
    n = 400
    stack = {L: rng.exponential(1.0, n) for L in op.DEPTHS["smoke"]}
    monkeypatch.setattr(paired, "floor_on_eval", lambda cfg, device="cpu", depths=(), reader=None: {"sq_err_stack": stack})
    sq = {c.run_id: stack[c.L] + rng.normal(0.05 if c.qk_init == "constructive" else -0.2, 0.1, n) for c in cfgs}
    df = pd.DataFrame([{**c.to_dict(), "run_id": c.run_id, "R": float(sq[c.run_id].mean()),
                        "final_monitor_loss": float(sq[c.run_id].mean()) + 0.01 * c.seed} for c in cfgs])
    res = Results(df, "smoke", _Reader(cfgs, sq))
    got = op.rows(res)
    assert len(got) == len(cfgs)
    for r in got:
        d = sq[r["run_id"]] - stack[r["L"]]
        assert r["R_minus_B"] == pytest.approx(d.mean()) and r["se"] == pytest.approx(d.std(ddof=1) / math.sqrt(n))
        assert r["below_B_2se"] == (d.mean() < -2 * d.std(ddof=1) / math.sqrt(n))
        assert r["B_L"] == pytest.approx(stack[r["L"]].mean())
    for s in op.summary(res):
        at = [r for r in got if r["L"] == s["L"]]
        assert s["R_min"] == min(r["R"] for r in at) and s["runs"] == len(at)
        assert s["below_B_2se"] == sum(r["below_B_2se"] for r in at) > 0  # the independent starts sit 0.2 below
        pick = min(at, key=lambda r: r["monitor"])
        assert s["monitor_pick"] == f"{pick['start']} s{pick['seed']}"
    assert any("more than 2 SE below B_L" in line for line in op.notes(res))


def test_export_of_a_partly_trained_probe(tmp_path):
    """studies/optimum_probe.py on a store holding a few of the probe's smoke runs: the files, the
    rows of the runs present, and the α range pinned by the lower of the probe's and the envelope's R_1, R_2."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from depthscale.store.store import Store
    from depthscale.train.training import run_pack

    root = Path(__file__).resolve().parents[1]
    cfgs = [c for c in REGISTRY[op.ID].configs("smoke") if c.qk_init == "constructive" and c.qk_std == 0.02 and c.seed == 0]
    assert {(c.L, c.construct_heads) for c in cfgs} == {(1, 0), (2, 0), (2, 1)}
    for c in cfgs:
        run_pack([c.replace(max_steps=20)], Store(tmp_path / "s"))
    done = subprocess.run([sys.executable, str(root / "studies" / "optimum_probe.py"), "--store", str(tmp_path / "s"),
                           "--preset", "smoke", "--out", str(tmp_path / "x")], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    # the runs were trained at 20 steps: other runs than the probe's (max_steps is in the id), so none is read
    assert (tmp_path / "x" / "runs.csv").read_text().strip() == ""
    for c in cfgs:
        run_pack([c], Store(tmp_path / "s"))
    done = subprocess.run([sys.executable, str(root / "studies" / "optimum_probe.py"), "--store", str(tmp_path / "s"),
                           "--preset", "smoke", "--out", str(tmp_path / "x")], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    import pandas as pd

    runs = pd.read_csv(tmp_path / "x" / "runs.csv")
    assert sorted(runs["start"]) == ["constructive-0.02", "constructive-0.02", "copies-0.02"]
    rng = json.loads((tmp_path / "x" / "alpha_range.json").read_text())
    env = pd.read_csv(root / "studies/results/convergence/curves.csv")
    assert rng["R_used"][0] == min(rng["R_envelope"][0], rng["R_probe_min"]["1"])
    assert len(rng["depths"]) == len(set(env["L"])) and (tmp_path / "x" / "probe.png").stat().st_size > 10_000


def test_a_stuck_start_is_drawn_at_the_top_edge_with_its_value(monkeypatch):
    """One stuck start (R_L − B_L = +5.26) must not squash the others' ±0.01 to a line: it is drawn at
    the edge, its value written beside it and in the caption."""
    from types import SimpleNamespace

    from depthscale.experiments import optimum_probe as opm

    names = [s.name for s in opm.starts("smoke")]
    L0 = opm.DEPTHS["smoke"][0]
    fake = [{"L": L0, "start": names[0], "seed": 0, "R_minus_B": 5.26, "se": 0.03},
            {"L": L0, "start": names[1], "seed": 0, "R_minus_B": -0.004, "se": 0.0004}]
    monkeypatch.setattr(opm, "rows", lambda res: fake)
    ax = opm.figure(SimpleNamespace(preset="smoke"), None).axes[0]
    assert ax.get_ylim()[1] < 0.1 and ax.get_ylim()[0] < -0.004
    assert [t.get_text() for t in ax.texts] == ["+5.26"]
    assert any("+5.26" in n for n in getattr(ax, "_depthscale_notes", []))
