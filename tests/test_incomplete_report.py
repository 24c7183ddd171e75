"""Issue 51 item 3, "a report never judges what was not measured": on a store where most runs are
missing (failed, or never run), every claim that reads them is INCONCLUSIVE "missing runs: N of M
runs ... (run ids in <preset>/missing_runs.json)", never FAIL; the report's first lines say the
store is incomplete and give the command that produced it, which resumes it; `reproduce` still
exits non-zero (its runs failed)."""

from __future__ import annotations

import json

import fake_worker
import failure_workers
import depthscale.train.training
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS
from depthscale.cli import main as cli
from depthscale.experiments.registry import IDS


def some_fail_pack(configs, store, device="cpu", progress=None, loggers=()) -> None:
    """The packs of depth-1 runs finish (fake_worker); every other pack fails."""
    if all(c.L == 1 for c in configs):
        return fake_worker.run_pack(configs, store, device, progress)
    return failure_workers.raising_pack(configs, store, device, progress)


def test_a_mostly_missing_store_is_inconclusive_and_says_how_to_finish(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(depthscale.train.training, "run_pack", some_fail_pack)
    store, out = tmp_path / "store", tmp_path / "out"
    argv = ["reproduce", "fig3", "--preset", "smoke", "--store", str(store), "--out", str(out)]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 3, err  # runs failed: reproduce still exits non-zero
    claims = json.loads((out / "claims.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in claims}
    assert FAIL not in verdicts.values() and PASS not in verdicts.values(), verdicts
    assert set(verdicts.values()) == {INCONCLUSIVE}
    c1 = next(c for c in claims if c["id"] == "1")  # fig3: its depth-1 runs finished, the rest failed
    assert c1["measured"] is None and c1["detail"].startswith("missing runs: "), c1["detail"]
    n, _, m = c1["detail"][len("missing runs: "):].partition(" of ")
    assert 0 < int(n) < int(m.split()[0]), c1["detail"]  # N of M: some finished, most not
    assert "(run ids in smoke/missing_runs.json)" in c1["detail"] and "cell(s)" in c1["detail"]
    listed = json.loads((out / "smoke" / "missing_runs.json").read_text())
    assert set(listed["runs"]) >= {"fig3", "fig6"}  # every experiment the claims read
    # the command that finishes the store: the one that made the report, with the experiments whose runs
    # are missing added (a report of fig3 still checks every paper claim: `reproduce fig3` alone would not)
    need = {"fig3", *listed["runs"]}
    which = listed["command"].split()[2]
    assert which == "all" if need == set(IDS) else (set(which.split(",")) == need and which.startswith("fig3,")), which
    command = f"depthscale reproduce {which} --preset smoke --store {store} --out {out}"
    assert listed["command"] == command and 0 < listed["missing"] <= listed["expected"], listed["command"]
    first = (out / "report.md").read_text().splitlines()[:4]
    line = next(ln for ln in first if "incomplete" in ln)
    shown = f"depthscale reproduce {which} --preset smoke --store {store} --out <this report's directory>"
    assert "This store is incomplete" in line and shown in line and "resumes" in line, first
    assert f"{listed['missing']} of {listed['expected']} runs" in line
    assert "This store is incomplete" in (out / "report.html").read_text()
