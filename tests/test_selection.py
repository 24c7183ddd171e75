"""The recipe grid and its selection by the monitor (SPEC §3.4, §4): the grid is fixed and whole,
and the choice reads only final monitor losses, never the evaluation loss."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd
import pytest

from depthscale.analysis.results import Results
from depthscale.analysis.selection import MONITOR_KEY, cells_from_results, envelope, main_envelope, select
from depthscale.base.errors import InputError
from depthscale.config.run import ConfigError, grid_names, grid_variant, main_grid, make_config


class MonitorOnlyRow(Mapping):
    """A run row whose every number but the seed and the final monitor loss refuses to be read."""

    ALLOWED = ("seed", MONITOR_KEY)

    def __init__(self, **kw):
        self._d = kw

    def __getitem__(self, key):
        if key not in self.ALLOWED:
            raise AssertionError(f"the selection read {key!r}")
        return self._d[key]

    def __contains__(self, key):
        return key in self._d

    def __iter__(self):
        raise AssertionError("the selection enumerated a row's keys")

    def __len__(self):
        return len(self._d)


def test_the_grid_is_the_spec_grid():
    names = grid_names()
    assert len(names) == 3 * 3 * 2 == len(set(names))
    f = grid_variant("default-1e-2-taper", 16)
    assert f == dict(qk_init="independent", qk_std=pytest.approx(1 / math.sqrt(48)), lr=1e-2, lr_depth_exp=-0.5)
    assert grid_variant("faithful-3e-3-flat", 16) == dict(qk_init="independent", qk_std=0.02, lr=3e-3, lr_depth_exp=0.0)
    assert grid_variant("constructive-1e-3-flat", 16)["qk_init"] == "constructive"
    with pytest.raises(ConfigError, match="recipe"):
        grid_variant("spread", 16)
    for n in names:  # every point is a valid cpu config of the nonlinear shape experiments
        make_config("cpu", model="nonlinear", task="difficult", L=4, **grid_variant(n, 16))


def _cells(R_of, mon_of, seeds=(0, 1, 2), depths=(1, 2)):
    cells = {}
    for L in depths:
        cells[(0.0, 0.0, 2, L)] = {n: [MonitorOnlyRow(seed=s, R=R_of(n, L, s), **{MONITOR_KEY: mon_of(n, L, s)})
                                       for s in seeds] for n in ("faithful-3e-3-flat", "default-1e-2-flat",
                                                                 "constructive-3e-3-taper")}
    return cells


def test_selection_follows_the_monitor_where_the_evaluation_loss_disagrees():
    # the evaluation loss ranks the recipes one way, the monitor the opposite way
    rank = {"faithful-3e-3-flat": 0, "default-1e-2-flat": 1, "constructive-3e-3-taper": 2}
    cells = _cells(R_of=lambda n, L, s: 2.0 + 0.1 * rank[n], mon_of=lambda n, L, s: 2.0 - 0.1 * rank[n] + 0.001 * s)
    sel = select(cells, min_seeds=3)  # any read of R raises inside MonitorOnlyRow
    assert [c["recipe"] for c in sel["chosen"]] == ["constructive-3e-3-taper"] * 2
    assert sel["chosen"][0]["monitor_mean"] == pytest.approx(2.0 - 0.2 + 0.001)
    assert sel["chosen"][0]["margin_to_next"] == pytest.approx(0.1)
    assert len(sel["table"]) == 6 and sum(r["chosen"] for r in sel["table"]) == 2
    assert sel["table"][0]["monitor_se"] == pytest.approx(0.001 / math.sqrt(3))
    env = envelope(cells, sel)
    assert all(rows[0]._d["R"] == pytest.approx(2.2) for rows in env.values())


def test_a_point_missing_a_seed_or_with_a_non_finite_monitor_cannot_win():
    cells = _cells(R_of=lambda n, L, s: 0.0, mon_of=lambda n, L, s: {"faithful-3e-3-flat": 2.0}.get(n, 1.0))
    cells[(0.0, 0.0, 2, 1)]["default-1e-2-flat"] = cells[(0.0, 0.0, 2, 1)]["default-1e-2-flat"][:2]  # lost seed 2
    cells[(0.0, 0.0, 2, 1)]["constructive-3e-3-taper"][0]._d[MONITOR_KEY] = math.nan
    sel = select(cells)
    assert sel["chosen"][0]["recipe"] == "faithful-3e-3-flat"
    assert sel["chosen"][1]["recipe"] == "default-1e-2-flat"  # tie with constructive: the grid's order
    with pytest.raises(InputError, match="min_seeds"):
        select(cells, min_seeds=0)
    assert select(cells, min_seeds=4)["chosen"][0]["recipe"] is None


def test_cells_from_results_reads_each_point_strictly():
    rows = []
    for n, mon in (("faithful-3e-3-flat", 2.1), ("constructive-3e-3-flat", 2.05)):
        for s in (0, 1):
            c = make_config("smoke", model="nonlinear", task="difficult", L=2, seed=s, **grid_variant(n, 8))
            rows.append({**c.to_dict(), "run_id": c.run_id, "R": 9.0, MONITOR_KEY: mon + 0.01 * s})
    res = Results(pd.DataFrame(rows), "smoke")
    cells = cells_from_results(res, [(0.0, 0.0)], [2])
    assert set(cells[(0.0, 0.0, 2, 2)]) == {"faithful-3e-3-flat", "constructive-3e-3-flat"}
    assert select(cells)["chosen"][0]["recipe"] == "constructive-3e-3-flat"


def _two_point_store(preset: str, mon: dict, R: dict, depths=(1, 2), seeds=(0, 1)):
    """Run rows of config.main_grid's two points at (0, 0), k = 2: final monitor loss mon[(point, L)],
    evaluation loss R[(point, L)] (+ 0.001 per seed)."""
    N = make_config(preset, model="nonlinear", task="difficult").N
    rows = []
    for n in main_grid(preset):
        for L in depths:
            for s in seeds:
                c = make_config(preset, model="nonlinear", task="difficult", L=L, seed=s, **grid_variant(n, N))
                rows.append({**c.to_dict(), "run_id": c.run_id, "R": R[(n, L)] + 0.001 * s,
                             MONITOR_KEY: mon[(n, L)] + 0.001 * s})
    return Results(pd.DataFrame(rows), preset)


def test_main_envelope_reads_the_monitor_chosen_point_per_depth():
    f, c = main_grid("cpu")
    assert (f, c) == ("faithful-3e-3-flat", "constructive-3e-3-flat")
    # L = 1: the faithful point has the lower monitor loss; L = 2: the constructive one. The
    # evaluation loss disagrees at both depths, so reading it would pick the other point.
    mon = {(f, 1): 2.10, (c, 1): 2.20, (f, 2): 2.15, (c, 2): 2.05}
    R = {(f, 1): 3.00, (c, 1): 1.00, (f, 2): 1.50, (c, 2): 4.00}
    res = main_envelope(_two_point_store("cpu", mon, R))
    chosen = {row["L"]: row["recipe"] for row in res.selection["chosen"]}
    assert chosen == {1: f, 2: c}
    assert len(res.selection["table"]) == 4 and res.selection["grid"] == [f, c]
    s = res.series("nonlinear", "difficult", 2, 0.0, 0.0)
    assert list(s.depths) == [1, 2]
    assert s.get("R") == pytest.approx([3.0005, 4.0005])  # each depth's chosen runs, mean over the two seeds
    # a view names its recipe everywhere: the constructive point at both depths, no per-cell choice
    v = res.view(**grid_variant(c, 16)).series("nonlinear", "difficult", 2, 0.0, 0.0)
    assert v.get("R") == pytest.approx([1.0005, 4.0005])


def test_a_cell_where_no_point_is_eligible_reads_no_runs_and_is_reported_missing():
    f, c = main_grid("cpu")
    mon = {(f, 1): 2.10, (c, 1): 2.20, (f, 2): math.nan, (c, 2): math.nan}  # L = 2: no finite monitor anywhere
    R = {(f, 1): 3.00, (c, 1): 1.00, (f, 2): 1.50, (c, 2): 4.00}
    res = main_envelope(_two_point_store("cpu", mon, R))
    chosen = {row["L"]: row["recipe"] for row in res.selection["chosen"]}
    assert chosen == {1: f, 2: None}
    s = res.series("nonlinear", "difficult", 2, 0.0, 0.0)
    assert list(s.depths) == [1] and 2 in list(s.missing)  # not the preset's (faithful) runs at L = 2
    assert res.has_other_recipe("nonlinear", "difficult", 2, 0.0, 0.0, 2)


def test_main_envelope_leaves_a_one_recipe_store_as_it_is():
    f, c = main_grid("cpu")
    res = _two_point_store("cpu", {(f, 1): 2.1, (c, 1): 2.0, (f, 2): 2.1, (c, 2): 2.0},
                           {(f, 1): 3.0, (c, 1): 1.0, (f, 2): 3.0, (c, 2): 1.0})
    only_faithful = Results(res.df[res.df["qk_init"] == "independent"], "cpu")
    out = main_envelope(only_faithful)
    assert out.selection is None and out.cell_recipes == {}
    assert out.series("nonlinear", "difficult", 2, 0.0, 0.0).get("R") == pytest.approx([3.0005, 3.0005])


def test_the_main_job_trains_both_points_with_three_seeds_for_the_shape_experiments():
    from depthscale.experiments.registry import REGISTRY

    for i in ("fig6", "fig14"):
        got = {(c.qk_init, c.seed) for c in REGISTRY[i].configs("cpu")}
        assert got == {(q, s) for q in ("independent", "constructive") for s in (0, 1, 2)}, i
        assert {c.seed for c in REGISTRY[i].configs("smoke")} == {0}
    assert {c.seed for c in REGISTRY["fig5"].configs("cpu")} == {0}  # the others keep PRESET_SEEDS
