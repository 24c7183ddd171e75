"""The CLI end to end on the smoke preset: help, one-line errors with exit code 2, nothing lost."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest


def ds(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "depthscale", *args], capture_output=True, text=True, cwd=cwd)


def one_line_error(out, fragment):
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in out.stderr, out.stderr


@pytest.mark.parametrize("cmd", ["train", "sweep", "status", "collect", "fit", "theory", "reproduce", "report", "bench"])
def test_every_subcommand_has_help_with_example(cmd):
    out = ds(cmd, "--help")
    assert out.returncode == 0 and "example:" in out.stdout and "depthscale " + cmd in out.stdout


def test_bad_inputs(tmp_path):
    store = str(tmp_path / "s")
    one_line_error(ds("sweep", "--experiment", "fig99", "--preset", "smoke", "--store", store), "unknown experiment 'fig99'")
    one_line_error(ds("train", "--preset", "smoke", "--b", "-0.5", "--store", store), "b must be")
    one_line_error(ds("train", "--preset", "smoke", "--k", "17", "--store", store), "k must be <= P = 16")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    one_line_error(ds("train", "--preset", "smoke", "--store", str(blocker / "store")), str(blocker))
    one_line_error(ds("sweep", "--experiment", "fig6", "--preset", "smoke", "--store", store, "--shard", "2/2"), "shard")
    one_line_error(ds("fit", "--depths", "1,2,4", "--losses", "1,2"), "--depths has 3 values")
    one_line_error(ds("theory", "exponents", "--a", "0", "--b", "1"), "a")
    one_line_error(ds("theory", "curve", "--a", "1", "--b", "1", "--finite-P", "--samples", "3"), "samples must be")


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_sweep_collect_status_and_corrupted_run(tmp_path):
    store = tmp_path / "s"
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"model": "nonlinear", "L": [1, 2], "max_steps": 20, "eval_contexts": 64,
                                "monitor_contexts": 64, "batch": 16}))
    out = ds("sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(store), "--json")
    assert out.returncode == 0, out.stderr
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["ran"] == 2
    again = json.loads(ds("sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(store), "--json").stdout.strip().splitlines()[-1])
    assert again["ran"] == 0 and again["skipped_done"] == 2
    st = ds("status", "--store", str(store))
    assert st.returncode == 0 and "grid-smoke" in st.stdout
    assert ds("collect", "--store", str(store), "--out", str(tmp_path / "t.csv")).returncode == 0
    import pandas as pd
    df = pd.read_csv(tmp_path / "t.csv")
    assert len(df) == 2 and {"run_id", "L", "R", "A", "C"} <= set(df.columns)
    # corrupt one finished run: collect refuses with one line, and the store is left as it was
    victim = next((store / "runs").iterdir()) / "metrics.json"
    victim.write_text("{not json")
    before = _snapshot(store)
    one_line_error(ds("collect", "--store", str(store), "--out", str(tmp_path / "u.csv")), "corrupted run directory")
    assert _snapshot(store) == before and not (tmp_path / "u.csv").exists()


def test_fit_and_theory_json():
    out = ds("fit", "--depths", "1,2,4,8,16", "--losses", "3,2,1.5,1.25,1.125", "--json")
    rec = json.loads(out.stdout)
    assert rec["alpha"] == pytest.approx(1.0, abs=1e-3) and rec["L0"] == pytest.approx(1.0, abs=1e-3)
    rec = json.loads(ds("theory", "exponents", "--a", "2", "--b", "1", "--json").stdout)
    assert rec == {"zeta": 1.0, "two_zeta": 2.0}
    rec = json.loads(ds("theory", "curve", "--a", "2", "--b", "1", "--d", "8", "--P", "32", "--depths",
                        "1,2", "--samples", "500", "--finite-P", "--json").stdout)
    fp = rec["finite_P"]
    assert fp["depths"] == [1, 2] and fp["P"] == 32 and len(fp["held_out"]) == 2
    assert all(h >= f for h, f in zip(fp["held_out"], rec["free"]))  # finite P cannot beat Sigma's optimum here


def test_theory_softmax_floor_json_and_bad_input():
    out = ds("theory", "softmax-floor", "--a", "0", "--b", "0", "--k", "2", "--d", "4", "--P", "8",
             "--samples", "400", "--seed", "0", "--depths", "1,2", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    for key in ("single_head", "ensemble_floor", "se", "var_ystar", "family"):
        assert key in res
    assert res["family"] == "cosine" and 0 < res["ensemble_floor"] < res["var_ystar"]
    assert res["best_stack"]["depths"] == [1, 2] and len(res["iid_depth"]["R"]) == 2
    one_line_error(ds("theory", "softmax-floor", "--a", "0", "--b", "0", "--k", "9", "--d", "4", "--P", "8"),
                   "k must be <= P = 8")
    one_line_error(ds("theory", "softmax-floor", "--a", "0", "--b", "0", "--temperatures", "1,x"),
                   "--temperatures")


def test_sweep_accepts_a_comma_list_of_experiments(tmp_path):
    store = str(tmp_path / "s")
    out = ds("sweep", "--experiment", "fig13,fig6", "--preset", "smoke", "--store", store)
    assert out.returncode == 0, out.stderr
    status = ds("status", "--store", store, "--json")
    assert status.returncode == 0 and "fig13_fig6-smoke" in status.stdout
