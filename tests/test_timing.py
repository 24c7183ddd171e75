"""The phase timer (depthscale.base.timing): exclusive nesting, records, the store's pack records and
the report's table; and that the workers of a sweep write them."""

import json
import time

import pytest

from depthscale.base import timing


def test_phases_are_exclusive_and_add_up_to_the_record():
    with timing.record() as rec:
        with timing.phase("outer"):
            time.sleep(0.02)
            with timing.phase("inner"):
                time.sleep(0.03)
            time.sleep(0.01)
    assert rec.phases["inner"] == pytest.approx(0.03, abs=0.02)
    assert rec.phases["outer"] == pytest.approx(0.03, abs=0.02)  # its own time only
    assert sum(rec.phases.values()) == pytest.approx(rec.wall_seconds, abs=0.005)
    assert rec.unattributed_seconds >= -1e-9


def test_nested_records_each_see_their_share_and_totals_accumulate():
    before = timing.totals().get("x", 0.0)
    with timing.record() as a:
        with timing.phase("x"):
            time.sleep(0.01)
        with timing.record() as b:
            with timing.phase("x"):
                time.sleep(0.01)
    assert a.phases["x"] > b.phases["x"] > 0
    assert timing.totals()["x"] - before == pytest.approx(a.phases["x"], rel=1e-9)
    with timing.record() as c, timing.record() as d:  # two open records with equal (empty) phases
        pass
    assert c.phases == d.phases == {}
    assert not timing._records  # both removed, by identity


def test_a_phase_counts_even_when_its_block_raises():
    with timing.record() as rec:
        with pytest.raises(ValueError):
            with timing.phase("fails"):
                raise ValueError
    assert "fails" in rec.phases and not timing._stack


def test_timed_wraps_a_callable():
    f = timing.timed(lambda x: x + 1, "theory")
    with timing.record() as rec:
        assert f(1) == 2
    assert "theory" in rec.phases


def test_pack_records_and_the_experiment_table(tmp_path):
    from depthscale.config.run import make_config

    a = [make_config("smoke", model="nonlinear", L=L) for L in (1, 2)]
    b = [make_config("smoke", model="linear", task="easy", L=1)]
    for cfgs, secs in ((a, 1.0), (b, 2.0), (a, 0.5)):  # the third: a resumed pack, a second record
        rec = timing.Record()
        rec.phases.update(forward=secs, backward=2 * secs)
        rec.wall_seconds = 4 * secs
        timing.write_pack_record(tmp_path, cfgs, rec, threads=1)
    (timing.timing_dir(tmp_path) / "garbled.json").write_text("{not json")
    recs = timing.read_records(tmp_path)
    assert len(recs) == 3 and all(json.dumps(r) for r in recs)
    exps = {"fig6": {c.run_id for c in a}, "fig3": {c.run_id for c in b}, "table1": {c.run_id for c in a}}
    tab = timing.experiment_table(recs, exps, {"fig6": {"figures": 0.25}, "claims": {"report": 0.1}})
    rows = {e: (ph, n) for e, ph, n in tab["rows"]}
    assert rows["fig6"][0]["forward"] == pytest.approx(1.5) and rows["fig6"][1] == 2
    assert rows["fig6"][0]["wall"] == pytest.approx(6.0) and rows["fig6"][0]["figures"] == 0.25
    assert rows["fig3"][0]["backward"] == pytest.approx(4.0)
    assert "table1" not in rows  # its runs are fig6's: counted once, under the first
    assert rows["claims"][0]["report"] == 0.1
    assert tab["total"]["forward"] == pytest.approx(3.5) and tab["packs"] == 3
    assert tab["columns"] == ["forward", "backward", "figures", "report"]
    md = timing.markdown_lines(tab)
    assert md[0].startswith("| experiment | forward") and md[-1].startswith("| **all**")
    assert "<table>" in timing.html_table(tab)


def test_a_sweep_writes_one_record_per_pack_and_the_report_shows_them(tmp_path):
    from depthscale.report import pages, reproduce as report
    from depthscale.experiments.registry import REGISTRY
    from depthscale.store.store import Store
    from depthscale.runs.sweeps import plan, run_sweep

    cfgs = [c.replace(max_steps=20, eval_contexts=256, monitor_contexts=64) for c in REGISTRY["fig6"].configs("smoke")]
    store = Store(tmp_path / "store")
    run_sweep(plan(cfgs, store), store)
    recs = timing.read_records(tmp_path / "store")
    assert len(recs) >= 1 and {"sampling", "forward", "backward", "optimiser", "evaluation"} <= set(recs[0]["phases"])
    for r in recs:
        assert sum(r["phases"].values()) <= r["wall_seconds"] + 1e-3
    overrides = {"max_steps": 20, "eval_contexts": 256, "monitor_contexts": 64}
    tab = report.phase_timing(Store(tmp_path / "store", readonly=True), "smoke", ["fig6"],
                              {"fig6": {"figures": 1.0, "theory": 2.0}}, tmp_path, overrides)
    assert [r[0] for r in tab["rows"]] == ["fig6"] and tab["packs"] == len(recs)
    # theory is cached after the first build: a later build keeps the seconds of the one that computed it
    tab2 = report.phase_timing(Store(tmp_path / "store", readonly=True), "smoke", ["fig6"],
                               {"fig6": {"figures": 1.0, "theory": 0.0}}, tmp_path, overrides)
    assert tab2["rows"][0][1]["theory"] == 2.0
    lines = pages.timing_lines({"phase_timing": tab})
    assert any(line.startswith("| fig6 |") for line in lines)
