"""The experiment registry (SPEC §7): coverage, deterministic expansion, shared run ids, and
reading results back by cell."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from depthscale.analysis.results import Results
from depthscale.config.paper import PAPER, SOFTMAX_GEOMETRY_FIELDS
from depthscale.config.records import PRESET_SEEDS
from depthscale.config.records import SHAPE_SEEDS, Experiment, resolve_seeds
from depthscale.config.run import ID_OPTIONAL_FIELDS, PRESET_DEPTHS, make_config
from depthscale.config.run import main_grid
from depthscale.experiments.registry import IDS, REGISTRY, all_configs, resolve_ids, summary, theory_needs
from depthscale.runs.per_context import StoredRuns

SPEC_IDS = ["fig1"] + [f"fig{i}" for i in range(3, 15)] + [f"table{i}" for i in range(1, 6)]


def ids_of(exp_id, preset="smoke", **kw):
    return {c.run_id for c in REGISTRY[exp_id].configs(preset, **kw)}


def test_registry_covers_every_spec_id():
    assert set(SPEC_IDS) <= set(IDS)
    # ours: the floors beside the softmax-ensemble theory, and the spread start's variants of fig6 and fig14
    assert set(IDS) - set(SPEC_IDS) == {"table6", "fig6-spread", "fig14-spread"}
    for e in REGISTRY.values():
        assert e.title and e.shows and e.spectra_text
        assert e.kind == ("table" if e.id.startswith("table") else "figure")
        assert e.groups or e.theory, e.id


def test_fig8_is_theory_only():
    assert REGISTRY["fig8"].configs("cpu") == []
    assert [t.kind for t in REGISTRY["fig8"].theory_for("cpu")] == ["fig8"]


@pytest.mark.parametrize("preset", ["smoke", "cpu", "paper"])
def test_configs_expand_deterministically_through_make_config(preset):
    for e in REGISTRY.values():
        a = e.configs(preset)
        b = e.configs(preset)
        assert [c.run_id for c in a] == [c.run_id for c in b]
        assert len({c.run_id for c in a}) == len(a)  # no duplicate inside one experiment
        named = set(ID_OPTIONAL_FIELDS) | {f for g in e.groups for f, _ in g.fields}  # a group's further fields
        for c in a[:5] + a[-5:]:
            extra = {f: getattr(c, f) for f in named}
            again = make_config(preset, model=c.model, task=c.task, k=c.k, a=c.a, b=c.b, L=c.L, seed=c.seed, **extra)
            assert again == c
            # the convergence study's top-16 spectrum goes beyond the preset's depths (SPEC §9: to 128)
            assert c.L in PRESET_DEPTHS[preset] or (e.id.startswith("convergence-spectra") and c.L == 128)
            assert {c.seed for c in a} <= set(resolve_seeds(preset, e.seeds))


def test_run_ids_are_shared_across_experiments():
    for preset in ("smoke", "cpu"):
        fig = {i: ids_of(i, preset) for i in IDS}
        assert fig["fig13"] < fig["fig6"]
        assert fig["table5"] == fig["fig6"]
        assert fig["table2"] == fig["fig3"]
        assert fig["table4"] == fig["fig14"]
        assert fig["fig12"] == fig["fig11"]
        # and the linear model trained at the nonlinear geometry (claim 5b)
        # the experiments reading fig6's runs with the preset's seeds hold its first seed's runs
        # (the report reads every seed the store has: fig6 trains SHAPE_SEEDS)
        fig6_0 = {c.run_id for c in REGISTRY["fig6"].configs(preset, seeds=PRESET_SEEDS[preset])}
        assert fig6_0 <= fig["fig6"]
        assert fig["table1"] > fig["fig5"] | fig6_0
        assert {(c.model, c.d, c.P) for c in REGISTRY["table1"].configs(preset) if c.run_id not in fig["fig5"] | fig["fig6"]} \
            == {("linear",) + tuple(v for _, v in SOFTMAX_GEOMETRY_FIELDS[:2])}
        assert fig["fig1"] == fig["fig3"] | fig["fig4"] | fig["fig5"] | fig6_0
        assert fig["fig7"] < fig["fig3"] | fig["fig6"]  # claim 7 reads the linear model on the easy task
        assert fig["table3"] & fig["fig5"]  # the (0,0) k=2 row


def test_all_configs_deduplicates_in_first_seen_order():
    cfgs = all_configs("all", "smoke")
    rids = [c.run_id for c in cfgs]
    assert len(rids) == len(set(rids))
    assert set(rids) == set().union(*(ids_of(i) for i in IDS))
    assert sum(len(REGISTRY[i].configs("smoke")) for i in IDS) > len(rids)
    assert [c.run_id for c in all_configs(["table5", "fig6"], "smoke")] == [c.run_id for c in REGISTRY["fig6"].configs("smoke")]


def test_seeds_and_k16_by_preset():
    assert {c.seed for c in REGISTRY["fig6"].configs("smoke")} == {0}
    assert {c.seed for c in REGISTRY["fig6"].configs("cpu")} == {0, 1, 2}  # the shape experiments: SHAPE_SEEDS
    assert {c.seed for c in REGISTRY["fig5"].configs("cpu")} == {0}  # the others: one seed fits 2 cores
    assert {c.seed for c in REGISTRY["fig6"].configs("paper")} == {0, 1, 2}
    assert {c.seed for c in REGISTRY["fig6"].configs("cpu", seeds=2)} == {0, 1}
    assert {c.seed for c in REGISTRY["fig6"].configs("cpu", seeds=[3, 5])} == {3, 5}
    assert {c.k for c in all_configs("all", "smoke")} <= {1, 2}  # SPEC §1: smoke has k = 2 only
    assert 16 in {c.k for c in all_configs("all", "cpu")}
    assert {c.k for c in REGISTRY["fig3"].configs("cpu")} == {1}  # easy task: k is fixed
    assert {c.L for c in REGISTRY["fig13"].configs("cpu")} == {1, PRESET_DEPTHS["cpu"][-1]}
    assert {c.L for c in REGISTRY["table3"].configs("cpu")} == {1, 2, PRESET_DEPTHS["cpu"][-1]}
    # the unpackable variants stop at depth 16 at cpu, and go to the preset's Lmax at paper
    for exp_id in ("fig9", "fig11", "fig12"):
        assert {c.L for c in REGISTRY[exp_id].configs("cpu")} == {1, 2, 4, 8, 16}
        assert {c.L for c in REGISTRY[exp_id].configs("paper")} == set(PRESET_DEPTHS["paper"])
    assert {c.L for c in REGISTRY["fig10"].configs("cpu")} == set(PRESET_DEPTHS["cpu"])  # packable
    assert {c.batch for c in REGISTRY["fig11"].configs("cpu")} == {64}


def test_overrides_reach_every_config():
    cfgs = REGISTRY["fig13"].configs("smoke", max_steps=7)
    assert cfgs and all(c.max_steps == 7 for c in cfgs)


def test_theory_needs():
    floors = [t for t in theory_needs("all", "cpu") if t.kind == "floor"]
    # 7 fig5 + 9 table3, (0,0) k=2 shared, at the linear geometry; table1's 7 at the nonlinear one
    assert len(floors) == 15 + 7
    assert len({t.key("cpu") for t in floors}) == 22
    assert len([t for t in theory_needs("all", "smoke") if t.kind == "floor"]) == 11 + 7  # no k=16
    assert {t.kind for t in theory_needs("all", "cpu")} == {"floor", "curves", "fig8", "softmax_floor"}
    # the ten top-2 spectra of tables 1 and 4 and the four top-16 ones of fig14
    assert len([t for t in theory_needs("all", "cpu") if t.kind == "softmax_floor"]) == 14
    assert {t.kind for t in theory_needs(["fig6"], "cpu")} == {"softmax_floor"}


def test_resolve_ids():
    assert resolve_ids("all") == IDS
    assert resolve_ids(["table1", "fig3"]) == ("fig3", "table1")  # registry order
    assert resolve_ids("fig4,fig6") == ("fig4", "fig6")
    with pytest.raises(ValueError, match="unknown experiment 'fig2'"):
        resolve_ids(["fig2"])


def test_group_words_and_the_beyond_part():
    from depthscale.experiments.registry import BEYOND_IDS, parse_ids

    assert all(REGISTRY[i].part == "paper" for i in IDS)
    assert all(REGISTRY[i].part == "beyond" for i in BEYOND_IDS)
    studies = {i for i, e in REGISTRY.items() if e.part == "study"}
    spectra = {"convergence-spectra"} | {f"convergence-spectra-{t}" for t in ("1-0", "0-1", "05-05", "top16")}
    assert studies == {"budget", "convergence", "optimum-probe"} | spectra  # run only when named: neither `all` nor `beyond`
    assert not set(IDS) & set(BEYOND_IDS) and set(IDS) | set(BEYOND_IDS) | studies == set(REGISTRY)
    assert resolve_ids("beyond") == BEYOND_IDS
    assert resolve_ids("all,beyond") == tuple(i for i in REGISTRY if i not in studies)
    assert resolve_ids("budget") == ("budget",) and resolve_ids("convergence") == ("convergence",)
    assert parse_ids("fig6,all")[0] == "fig6" and len(parse_ids("fig6,all")) == len(IDS)
    assert parse_ids("beyond") == list(BEYOND_IDS)
    with pytest.raises(ValueError, match="or all, beyond"):
        parse_ids("fig6,nope")


def test_group_fields_reach_the_configs_and_a_strict_view_reads_them_back():
    from depthscale.config.records import Experiment, RunGroup

    e = Experiment("x", "x", ("nonlinear",), "difficult", (2,), "(0,0)", "x",
                   (RunGroup("nonlinear", "difficult", 2, ((0.0, 0.0),), (1, 2, 99), (("N", 12), ("max_steps", 7))),),
                   part="beyond")
    cfgs = e.configs("smoke")
    assert [c.L for c in cfgs] == [1, 2]  # explicit depths, capped at the preset's deepest
    assert all(c.N == 12 and c.max_steps == 7 for c in cfgs)
    plain = [make_config("smoke", model="nonlinear", task="difficult", k=2, L=L) for L in (1, 2)]
    res = Results(_frame(cfgs + plain, [5.0, 6.0, 1.0, 2.0]), "smoke")
    assert res.series("nonlinear", "difficult", 2, 0, 0, (1, 2)).get("R").tolist() == [1.0, 2.0]
    v = res.view(N=12, max_steps=7)
    assert v.series("nonlinear", "difficult", 2, 0, 0, (1, 2)).get("R").tolist() == [5.0, 6.0]
    # strict: a recipe nobody trained is empty, never the default runs
    assert not v.runs("nonlinear", "difficult", 2, 0, 0, 4)
    assert not res.view(N=13).runs("nonlinear", "difficult", 2, 0, 0, 1)
    assert res.runs("nonlinear", "difficult", 2, 0, 0, 1)[0]["N"] == 8  # the view left res alone
    with pytest.raises(ValueError, match="N must be"):
        res.view(N=2)


def test_summary_counts_runs():
    rows = {r["id"]: r for r in summary()}
    assert rows["fig8"]["cpu"] == 0
    assert rows["fig6"]["cpu"] == 7 * len(PRESET_DEPTHS["cpu"]) * len(SHAPE_SEEDS["cpu"]) * len(main_grid("cpu"))
    assert rows["fig5"]["cpu"] == 7 * len(PRESET_DEPTHS["cpu"]) * len(PRESET_SEEDS["cpu"])
    assert rows["all (unique)"]["smoke"] == len(all_configs("all", "smoke"))


def test_paper_values_match_shared_json():
    path = Path(__file__).resolve().parents[2] / "shared" / "paper_values.json"
    if not path.exists():
        pytest.skip("shared/paper_values.json not present")
    assert PAPER == json.loads(path.read_text())


def _frame(cfgs, R):
    rows = []
    for c, r in zip(cfgs, R):
        row = {"run_id": c.run_id, **c.to_dict(), "R": r, "A": r, "C": r, "var_ystar": 1.0}
        rows.append(row)
    return pd.DataFrame(rows)


def test_results_mean_and_se_over_seeds_and_type_normalisation():
    cfgs = [make_config("smoke", model="nonlinear", task="difficult", a=0.0, b=0.0, L=2, seed=s) for s in (0, 1)]
    df = _frame(cfgs, [1.0, 3.0])
    df["a"] = df["a"].astype(int)  # JSON may give 0 for 0.0: cells must still match
    res = Results(df, "smoke")
    s = res.series("nonlinear", "difficult", 2, 0, 0, (1, 2))
    assert s.depths.tolist() == [2] and s.missing == (1,)
    assert s.get("R")[0] == pytest.approx(2.0)
    assert s.se["R"][0] == pytest.approx(1.0)  # std 1.414 / sqrt 2
    assert s.n.tolist() == [2]
    assert not res.other_recipe


def test_results_prefer_the_current_recipe():
    cur = make_config("smoke", model="nonlinear", task="difficult", a=0.0, b=0.0, L=1, seed=0)
    old = cur.replace(max_steps=999)
    res = Results(_frame([old, cur], [5.0, 1.0]), "smoke")
    assert [r["run_id"] for r in res.runs("nonlinear", "difficult", 2, 0.0, 0.0, 1)] == [cur.run_id]
    only_old = Results(_frame([old], [5.0]), "smoke")  # e.g. runs made with overrides
    s = only_old.series("nonlinear", "difficult", 2, 0.0, 0.0, (1,))
    assert s.missing == (1,) and not s  # never read in the current recipe's place (issue 33)
    assert only_old.has_other_recipe("nonlinear", "difficult", 2, 0.0, 0.0, 1)
    assert len(only_old.other_recipe) == 1
    assert not Results(_frame([cur], [1.0]), "smoke").has_other_recipe("nonlinear", "difficult", 2, 0.0, 0.0, 1)
    # read with the old recipe's settings, the old runs are the cell's
    assert only_old.view(max_steps=999).series("nonlinear", "difficult", 2, 0.0, 0.0, (1,)).get("R")[0] == 5.0
    other_preset = Results(_frame([cur], [1.0]), "cpu")
    assert len(other_preset) == 0


def test_results_with_a_recipe_per_cell_read_the_envelope():
    """A recipe selection hands the claims a view with one recipe per cell (Results.with_recipes)."""
    cells = [make_config("smoke", model="nonlinear", task="difficult", a=0.0, b=0.0, L=L, seed=0) for L in (1, 2)]
    slow = [c.replace(lr=c.lr / 3) for c in cells]
    res = Results(_frame(cells + slow, [3.0, 2.0, 2.5, 1.5]), "smoke")
    env = res.with_recipes({("nonlinear", "difficult", 2, 0.0, 0.0, 2): {"lr": cells[1].lr / 3}})
    assert env.series("nonlinear", "difficult", 2, 0.0, 0.0, (1, 2)).get("R").tolist() == [3.0, 1.5]
    assert res.series("nonlinear", "difficult", 2, 0.0, 0.0, (1, 2)).get("R").tolist() == [3.0, 2.0]  # unchanged
    missing = res.with_recipes({("nonlinear", "difficult", 2, 0.0, 0.0, 1): {"lr": 0.5}})
    assert missing.series("nonlinear", "difficult", 2, 0.0, 0.0, (1,)).missing == (1,)
    assert missing.has_other_recipe("nonlinear", "difficult", 2, 0.0, 0.0, 1)


def test_diverged_runs_are_left_out_of_means():
    cfgs = [make_config("smoke", model="linear", task="easy", a=2.0, b=1.0, L=4, seed=s) for s in (0, 1)]
    res = Results(_frame(cfgs, [np.nan, 0.5]), "smoke")
    s = res.series("linear", "easy", 1, 2.0, 1.0, (4,))
    assert s.get("R")[0] == 0.5 and s.n.tolist() == [1]


def test_results_from_store_leave_diverged_runs_out(tmp_path):
    """An exploded run (finite R of 1e18) is `diverged` in the store and never enters a series."""
    from depthscale.store.store import Store

    store = Store(tmp_path / "s")
    cfgs = [make_config("smoke", model="nonlinear", task="difficult", a=0.0, b=0.0, L=2, seed=s) for s in (0, 1)]
    for c, R in zip(cfgs, (1.0, 1e18)):
        store.write_config(c)
        store.finish(c.run_id, {"R": R, "R_se": 0.1, "A": R, "C": R, "L": 2, "var_ystar": 1.0,
                                "steps": 60, "stopped_because": "max_steps"},
                     {"step": [20], "loss": [R]})
    res = Results.from_store(StoredRuns(store), "smoke")
    s = res.series("nonlinear", "difficult", 2, 0, 0, (2,))
    assert s.n.tolist() == [1] and s.get("R")[0] == pytest.approx(1.0)


# ---------------------------------------------------------------- the experiment layer's shape

SRC = Path(__file__).resolve().parents[1] / "src" / "depthscale"
BELOW = ["config/records.py", "config/paper.py", "analysis/plotting.py", "analysis/claims.py", "analysis/curves.py",
         "analysis/results.py", "base/formatting.py"]
ABOVE = {"depthscale.experiments", "depthscale.experiments.registry", "depthscale.report.figures", "depthscale.report.tables",
         "depthscale.report.reproduce", "depthscale.report.pages", "depthscale.cli.main"}


def _imports(path: Path) -> set[str]:
    """Every depthscale module `path` imports, at its top or inside a function (lazy imports too)."""
    import ast

    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("depthscale"):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("depthscale")}
    return out


def test_nothing_below_the_experiments_imports_them_or_the_lookup():
    """records, paper, plotting, the claim engine, analysis, results and formatting never import the
    experiments package or anything that loads it (registry, figures, tables, report), lazily neither;
    an experiment module never imports the lookup or the report."""
    def above(mods):
        return sorted(m for m in mods if any(m == a or m.startswith(a + ".") for a in ABOVE))

    assert above(_imports(SRC / "experiments" / "registry.py"))  # (the check sees an import of the package)

    bad = {n: above(_imports(SRC / n)) for n in BELOW}
    assert {n: m for n, m in bad.items() if m} == {}
    for p in sorted((SRC / "experiments").glob("*.py")):
        if p.name == "registry.py":  # the lookup itself
            continue
        got = [m for m in above(_imports(p)) if not m.startswith("depthscale.experiments")
               or m.startswith("depthscale.experiments.registry")]
        assert got == [], (p.name, got)


def test_every_experiment_is_one_record_with_its_claims():
    from depthscale.experiments import registry

    owners = {}
    for e in REGISTRY.values():
        assert e.figure is not None or e.table is not None, e.id  # something to show
        for c in e.claims:
            assert c.id not in owners, (c.id, owners.get(c.id), e.id)
            owners[c.id] = e.id
            assert set(c.uses) <= set(REGISTRY), (c.id, c.uses)
    assert set(owners) == {c.id for c in registry.CLAIMS}
    # the report's claims are the paper's in SPEC §9 order, then ours
    ids = [c.id for c in registry.CLAIMS]
    assert ids[:16] == ["1", "2", "3", "4a", "4b", "4c", "5a", "5b", "5c", "6", "7", "8a", "8b", "9", "10", "11"]
    with pytest.raises(ValueError, match="unknown claim"):
        registry.claim("5z")


def test_register_refuses_a_second_record_with_the_same_id():
    from depthscale.config.records import register

    e = REGISTRY["fig6"]
    assert register(e) is e  # the same record again: nothing happens
    with pytest.raises(ValueError, match="registered twice"):
        register(Experiment("fig6", "another", (), "theory", (), "", ""))
    with pytest.raises(ValueError, match="part must be one of"):
        register(Experiment("new", "x", (), "theory", (), "", "", part="elsewhere"))
