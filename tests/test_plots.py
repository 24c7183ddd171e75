"""`depthscale plot curves` and `depthscale compare` on stores of made-up finished runs (no
training: seconds), and the example notebook docs/notebook_sweep_to_figure.py run whole at the
smoke preset."""

import json
import os
import runpy
from pathlib import Path

import numpy as np
import pytest

from depthscale.cli import main as cli
from depthscale.cli.plots import curve_labels, curves_figure, load_curves, parse_metrics
from depthscale.config.run import make_config
from depthscale.store import manifests
from depthscale.store.store import Store

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "notebook_sweep_to_figure.py"


def run_cli(capsys, *argv):
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def fake_run(store: Store, cfg, R: float, steps=(10, 20, 30)) -> str:
    """A finished run with curves and metrics made up (R falling to `R`)."""
    store.write_config(cfg, device="cpu")
    n = len(steps)
    Rs = [R * (1 + 0.5 * (n - 1 - i)) for i in range(n)]
    curves = {"step": list(steps), "R": Rs, "A": [r * 1.5 for r in Rs],
              "C": [None if cfg.L == 1 else r * 0.9 for r in Rs], "top1_mass": [0.2 + 0.1 * i for i in range(n)],
              "lr": [0.01] * n}
    store.finish(cfg.run_id, {"R": R, "R_se": 0.01 * R, "A": 1.5 * R, "C": 0.9 * R, "steps": steps[-1],
                              "stopped_because": "max_steps"}, curves)
    manifests.add(store, "depths", [cfg.run_id])
    return cfg.run_id


@pytest.fixture
def depth_store(tmp_path):
    store = Store(tmp_path / "a")
    ids = {L: fake_run(store, make_config("smoke", task="easy", L=L), R=2.0 / L) for L in (1, 2, 4)}
    return store, ids


def test_plot_curves_draws_one_line_per_run_labelled_by_what_differs(depth_store, tmp_path, capsys):
    store, ids = depth_store
    out = tmp_path / "curves.png"
    code, text, err = run_cli(capsys, "plot", "curves", "--store", store.root, "--sweep", "depths", "--out", out,
                              "--json")
    res = json.loads(text)
    assert code == 0 and out.stat().st_size > 10_000 and err == ""
    assert res["fields"] == ["L"] and list(res["runs"].values()) == ["L=1", "L=2", "L=4"]
    assert res["metrics"] == ["R", "gap", "top1_mass"]
    from matplotlib.image import imread

    img = imread(out)
    assert img.shape[1] == round(3 * 3.8 * 200) and img.shape[0] == round(3.0 * 200)  # 200 dpi
    # the figure itself: one line per run in every panel, the legend at >= 8 pt
    curves, skipped = load_curves(store, list(ids.values()))
    labels, fields = curve_labels({r: store.load_config(r).to_dict() for r in curves})
    fig = curves_figure(curves, labels, parse_metrics("R,gap,top1_mass"), title="L")
    assert not skipped and fields == ["L"]
    for ax in fig.axes:
        assert len(ax.get_lines()) == 3
    (legend,) = fig.legends
    assert sorted(t.get_text() for t in legend.get_texts()) == ["L=1", "L=2", "L=4"]
    assert min(t.get_fontsize() for t in legend.get_texts()) >= 8
    gap = fig.axes[1].get_lines()
    y = {line.get_label(): line.get_ydata() for line in gap}
    assert np.all(np.isnan(y["L=1"])) and np.allclose(y["L=2"], [1.5 * r - 0.9 * r for r in curves[ids[2]]["R"]])


def test_plot_curves_picks_runs_and_writes_pdf(depth_store, tmp_path, capsys):
    store, ids = depth_store
    pending = make_config("smoke", task="easy", L=8)
    store.write_config(pending)  # no curves yet: left out with a warning
    out = tmp_path / "sub" / "two.pdf"
    code, text, err = run_cli(capsys, "plot", "curves", "--store", store.root, "--run", ids[1][:6], ids[4],
                              "--metric", "R", "--out", out)
    assert code == 0 and out.read_bytes()[:4] == b"%PDF" and "2 runs (labelled by L)" in text
    code, text, err = run_cli(capsys, "plot", "curves", "--store", store.root, "--out", tmp_path / "all.png", "--json")
    assert code == 0 and len(json.loads(text)["runs"]) == 3 and json.loads(text)["skipped"] == [pending.run_id]
    assert err.strip() == f"depthscale: warning: run {pending.run_id} has no curves yet (left out)"


def test_compare_two_runs(depth_store, capsys):
    store, ids = depth_store
    code, text, _ = run_cli(capsys, "compare", ids[1], ids[4][:8], "--store", store.root)
    assert code == 0
    assert "config fields that differ:" in text and any(ln.split() == ["L", "1", "4"] for ln in text.splitlines())
    assert "R_B/R_A = 0.25" in text
    code, text, _ = run_cli(capsys, "compare", store.run_path(ids[2]), store.run_path(ids[4]), "--json")
    res = json.loads(text)
    assert code == 0 and res["config_diff"] == {"L": [2, 4]} and res["R_ratio"] == pytest.approx(0.5)
    assert res["metrics"]["steps"] == [30, 30] and res["metrics"]["stopped_because"] == ["max_steps", "max_steps"]


def test_compare_two_stores_matches_runs_by_config(depth_store, tmp_path, capsys):
    store, ids = depth_store
    other = Store(tmp_path / "b")
    fake_run(other, make_config("smoke", task="easy", L=2), R=1.1)  # R_A = 1.0
    fake_run(other, make_config("smoke", task="easy", L=4), R=0.45)  # R_A = 0.5
    fake_run(other, make_config("smoke", task="easy", L=4, seed=1), R=0.5)  # only in B
    code, text, _ = run_cli(capsys, "compare", store.root, other.root, "--json")
    res = json.loads(text)
    assert code == 0 and res["matched"] == 2 and res["only_a"] == 1 and res["only_b"] == 1
    assert {r["L"]: round(r["R_ratio"], 6) for r in res["runs"]} == {2: 1.1, 4: 0.9}
    assert res["R_ratio"]["median"] == pytest.approx(1.0)
    code, text, _ = run_cli(capsys, "compare", store.root, other.root)
    assert code == 0 and "matched runs (same config apart from provenance): 2; only in A: 1; only in B: 1" in text
    assert "R_B/R_A over 2 runs" in text


def test_the_notebook_goes_from_a_sweep_to_a_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPTHSCALE_NOTEBOOK_OUT", str(tmp_path))
    monkeypatch.setenv("DEPTHSCALE_NOTEBOOK_PRESET", "smoke")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    text = NOTEBOOK.read_text()
    assert text.count("# %%") >= 8 and "jupytext" in text and "import jupytext" not in text
    ns = runpy.run_path(str(NOTEBOOK), run_name="__notebook__")
    assert len(ns["df"]) == 8 and set(ns["fits"]) == {0.0, 1.0}
    for name in ("loss_vs_depth.png", "loss_vs_depth.pdf", "curves.png"):
        assert (tmp_path / name).stat().st_size > 5_000, name
    assert manifests.load(Store(tmp_path / "store"), "notebook")
    assert os.path.isdir(tmp_path / "store" / "runs")
