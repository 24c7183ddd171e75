"""Adding an experiment is one file (issue "A house a newcomer can change"): a toy experiment written
in tmp_path and named by DEPTHSCALE_EXPERIMENTS appears in `depthscale sweep --experiment`,
`reproduce` and the report, with its runs, its figure, its table and its claim; nothing else of the
toolkit is touched. Each command runs in a subprocess, where the registry loads the file."""

from __future__ import annotations

import json
import os

import pytest

import forked_cli

from depthscale.base.errors import InputError
from depthscale.experiments.registry import PLUGIN_ENV, plugin_files
from depthscale.store.store import Store

TOY = '''"""A toy experiment: the nonlinear model at (0,0), depths 1 and 2 (smoke), one figure, one table,
one claim."""

import pandas as pd

from depthscale.analysis import plotting as pl
from depthscale.analysis.claims import judged, num, require, yes
from depthscale.config.records import Claim, Experiment, RunGroup, register

SPECTRUM = (0.0, 0.0)


def figure(res, th):
    fig, ax = pl.new_figure(1)
    pl.loss_panel(ax[0], res, "nonlinear", "difficult", [(2, SPECTRUM)])
    pl.panel_title(ax[0], "a", "toy: loss vs depth")
    return fig


def table(res, th):
    s = res.series("nonlinear", "difficult", 2, *SPECTRUM, (1, 2))
    return pd.DataFrame({"L": s.depths, "R": s.get("R")})


def deeper_is_no_worse(res, th):
    require(res, "nonlinear", "difficult", 2, [SPECTRUM], (1, 2))
    R = res.series("nonlinear", "difficult", 2, *SPECTRUM, (1, 2)).get("R")
    ok = bool(R[1] <= 1.5 * R[0])
    return {"R_1": float(R[0]), "R_2": float(R[1])}, ok, judged("R_2 <= 1.5 R_1", [f"R_1={num(R[0])}, R_2={num(R[1])} {yes(ok)}"])


register(Experiment(
    "toy", "Toy: a newcomer's experiment", ("nonlinear",), "difficult", (2,), "(0,0)", "loss vs L at L = 1, 2",
    (RunGroup("nonlinear", "difficult", 2, (SPECTRUM,), (1, 2)),), part="beyond", figure=figure, table=table,
    claims=(Claim("T1", "Toy: a second layer does not make the loss worse", "R_2 <= 1.5 R_1", deeper_is_no_worse,
                  ("toy",), part="beyond"),)))
'''


def depthscale(*args, env):
    return forked_cli.run(args, env=env, timeout=900)


def test_a_toy_experiment_in_one_file_reaches_sweep_reproduce_and_the_report(tmp_path):
    plugin = tmp_path / "plugins" / "toy.py"
    plugin.parent.mkdir()
    plugin.write_text(TOY)
    env = {**os.environ, PLUGIN_ENV: str(plugin.parent), "OMP_NUM_THREADS": "1"}  # a directory of plug-ins
    store, out, again = tmp_path / "store", tmp_path / "out", tmp_path / "again"

    r = depthscale("sweep", "--experiment", "toy", "--preset", "smoke", "--store", str(store), "--executor",
                   "inline", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    s = Store(store, readonly=True)
    runs = [s.load_config(rid) for rid in s.run_ids() if s.is_done(rid)]
    assert sorted((c.model, c.a, c.b, c.L) for c in runs) == [("nonlinear", 0.0, 0.0, 1), ("nonlinear", 0.0, 0.0, 2)]

    r = depthscale("reproduce", "toy", "--preset", "smoke", "--store", str(store), "--out", str(out),
                   "--executor", "inline", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("toy.png", "toy.pdf", "toy.csv", "toy.md"):
        assert (out / "smoke" / name).stat().st_size > 0, name
    claims = {c["id"]: c for c in json.loads((out / "claims.json").read_text())}
    assert claims["T1"]["measured"] is not None and claims["T1"]["uses"] == ["toy"], claims["T1"]
    assert "1" in claims and "11" in claims  # the paper's claims, counted whichever ids are built
    md = (out / "report.md").read_text()
    assert "toy: Toy: a newcomer's experiment" in md and "![toy](smoke/toy.png)" in md and "| T1 |" in md

    r = depthscale("report", "--store", str(store), "--out", str(again), "--preset", "smoke", "--experiment",
                   "all,beyond", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "toy: Toy" in (again / "report.md").read_text()
    assert (again / "smoke" / "toy.csv").read_text() == (out / "smoke" / "toy.csv").read_text()

    # without the plug-in the id is unknown: the file was the only change
    plain = {k: v for k, v in env.items() if k != PLUGIN_ENV}
    r = depthscale("sweep", "--experiment", "toy", "--preset", "smoke", "--store", str(store), "--dry-run", env=plain)
    assert r.returncode == 2 and "unknown experiment 'toy'" in r.stderr + r.stdout


def test_plugin_paths(tmp_path):
    (tmp_path / "b.py").write_text("")
    (tmp_path / "a.py").write_text("")
    (tmp_path / "_skip.py").write_text("")
    assert plugin_files(str(tmp_path)) == [tmp_path / "a.py", tmp_path / "b.py"]  # sorted, '_' files left out
    assert plugin_files(f"{tmp_path / 'b.py'}{os.pathsep}{tmp_path}") == [tmp_path / "b.py", tmp_path / "a.py",
                                                                          tmp_path / "b.py"]
    assert plugin_files("") == []
    with pytest.raises(InputError, match="no experiment file or directory"):
        plugin_files(str(tmp_path / "nope.py"))


def test_a_broken_plugin_is_named(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('boom')\n")
    env = {**os.environ, PLUGIN_ENV: str(bad)}
    r = depthscale("sweep", "--experiment", "fig6", "--preset", "smoke", "--store", str(tmp_path / "s"), "--dry-run",
                   env=env)
    assert r.returncode != 0 and "bad.py" in r.stderr + r.stdout and "boom" in r.stderr + r.stdout


@pytest.mark.parametrize("body", ["raise SystemExit(5)", "import sys; sys.exit('bye')", "raise SystemExit",
                                  "raise GeneratorExit", "raise RuntimeError('two\\nlines')"])
def test_a_plugin_raising_anything_at_load_is_one_line_naming_it(tmp_path, body):
    """Issue 37, item 9: not only Exception's subclasses: SystemExit and GeneratorExit from a
    plug-in are one line naming the file and exit 2, never the plug-in's own exit code or a traceback."""
    bad = tmp_path / "bad.py"
    bad.write_text(body + "\n")
    r = depthscale("sweep", "--experiment", "fig6", "--preset", "smoke", "--store", str(tmp_path / "s"), "--dry-run",
                   env={**os.environ, PLUGIN_ENV: str(bad)})
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 1 and str(bad) in lines[0], r.stderr
    assert lines[0].startswith("depthscale: error: ") and "Traceback" not in r.stderr


def test_ctrl_c_while_a_plugin_loads_stops_the_program_as_ctrl_c(tmp_path):
    bad = tmp_path / "slow.py"
    bad.write_text("raise KeyboardInterrupt\n")
    r = depthscale("sweep", "--experiment", "fig6", "--preset", "smoke", "--store", str(tmp_path / "s"), "--dry-run",
                   env={**os.environ, PLUGIN_ENV: str(bad)})
    assert r.returncode == 130 and "Traceback" not in r.stderr and r.stderr.startswith("depthscale: interrupted")


def test_a_plugin_whose_figure_raises_fails_reproduce_and_report_naming_it(tmp_path):
    """Issue 37, item 9: the rest of the report is written, and one line names the plug-in's file;
    exit 2 (not 0)."""
    plugin = tmp_path / "toy.py"
    plugin.write_text(TOY.replace("    fig, ax = pl.new_figure(1)\n", "    raise RuntimeError('boom')\n"))
    env = {**os.environ, PLUGIN_ENV: str(plugin), "OMP_NUM_THREADS": "1"}
    store, out = tmp_path / "store", tmp_path / "out"
    r = depthscale("reproduce", "toy", "--preset", "smoke", "--store", str(store), "--out", str(out),
                   "--executor", "inline", env=env)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("depthscale: error:")]
    assert r.returncode == 2 and len(errors) == 1, r.stdout + r.stderr
    assert str(plugin) in errors[0] and "RuntimeError: boom" in errors[0] and "Traceback" not in r.stderr
    assert (out / "report.md").is_file() and (out / "claims.json").is_file()  # the rest is written
    r = depthscale("report", "--store", str(store), "--out", str(tmp_path / "again"), "--experiment", "toy", env=env)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("depthscale: error:")]
    assert r.returncode == 2 and len(errors) == 1 and str(plugin) in errors[0], r.stdout + r.stderr
