"""The CLI end to end on the smoke preset: help, one-line errors with exit code 2, nothing lost."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import forked_cli


def ds(*args, cwd=None):
    return forked_cli.run(args, cwd=cwd)


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
    df = pd.read_csv(tmp_path / "t.csv")
    assert len(df) == 2 and {"run_id", "L", "R", "A", "C"} <= set(df.columns)
    # corrupt one finished run: collect skips it with one warning naming it, status shows it as
    # broken, reading leaves the store as it was, and the next sweep runs it again
    victim_dir = next((store / "runs").iterdir())
    (victim_dir / "metrics.json").write_text("{not json")
    before = _snapshot(store)
    out = ds("collect", "--store", str(store), "--out", str(tmp_path / "u.csv"))
    assert out.returncode == 0 and out.stderr.splitlines() == [
        f"depthscale: warning: skipping broken run {victim_dir}: metrics.json is not valid JSON"], out.stderr
    assert len(pd.read_csv(tmp_path / "u.csv")) == 1
    st = ds("status", "--store", str(store), "--json")
    rec = json.loads(st.stdout)[0]
    assert rec["broken"] == 1 and rec["done"] == 1
    assert rec["broken_runs"] == [{"run_id": victim_dir.name, "step": None, "reason": "metrics.json is not valid JSON"}]
    assert f"broken {victim_dir.name}: metrics.json is not valid JSON" in ds("status", "--store", str(store)).stdout
    assert _snapshot(store) == before
    again = json.loads(ds("sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(store), "--json").stdout.strip().splitlines()[-1])
    assert again["ran"] == 1 and again["skipped_done"] == 1
    out = ds("collect", "--store", str(store), "--out", str(tmp_path / "v.csv"))
    assert out.returncode == 0 and out.stderr == "" and len(pd.read_csv(tmp_path / "v.csv")) == 2


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


# --- every bad input: one line on stderr, exit code 2, nothing written (docs/bad_inputs.md) ---

DOCS = Path(__file__).resolve().parents[1] / "docs" / "bad_inputs.md"
GIB16 = 16 * 2**30  # the available memory the table is made with (the real one varies by machine)
TRAIN = ("train", "--preset", "smoke", "--store", "{store}")
INT_FIELDS = ("d", "P", "N", "depth", "k", "batch", "eval_every", "monitor_contexts",
              "patience", "checkpoint_every", "eval_contexts")
NONNEG_FLOATS = ("a", "b", "noise", "qk_std", "rel_tol", "grad_clip", "metric_sigma")
GRIDS = {"empty.json": "", "empty.toml": "", "nokeys.json": "{}", "nolist.json": "[]", "badjson.json": "{",
         "badtoml.toml": "a = [", "grid.yaml": "a: 1", "unknown.json": '{"nope": 1}',
         "emptylist.json": '{"L": []}', "badmodel.json": '{"model": 3}', "seed.json": '{"seed": -1}',
         "evalseed.json": '{"eval_seed": -1}', "presetL.json": '{"L": ["preset", 2]}',
         "huge.json": '{"P": 10000000}', "ok.json": '{"L": 1, "max_steps": 2}'}


def _bad_inputs() -> list[tuple[str, tuple, str]]:
    """(what is wrong, argv with {store} {missing} {file} {dir} {empty} {grid:NAME} placeholders,
    a fragment of the one-line message)."""
    cases = []
    for f in INT_FIELDS:
        for v, frag in (("0", ">= 1"), ("-1", ">= 1"), ("abc", "invalid int value"), ("1.5", "invalid int value")):
            cases.append((f"--{f} {v}", TRAIN + (f"--{f}", v), frag))
    # warmup >= 0; max_steps >= 0 (0: the untrained model, measured: claim B2a's control)
    for f in ("warmup", "max_steps"):
        for v, frag in (("-1", ">= 0"), ("abc", "invalid int value"), ("1.5", "invalid int value")):
            cases.append((f"--{f} {v}", TRAIN + (f"--{f}", v), frag))
    for f in ("seed", "eval_seed"):
        for v, frag in (("-1", f"{f} must be"), ("abc", "invalid int value"), (str(2**64), "[0, 2**60)")):
            cases.append((f"--{f} {v}", TRAIN + (f"--{f}", v), frag))
    for f in NONNEG_FLOATS:
        for v, frag in (("-1", ">= 0"), ("nan", "finite"), ("inf", "finite"), ("abc", "invalid float value")):
            cases.append((f"--{f} {v}", TRAIN + (f"--{f}", v), frag))
    for v, frag in (("0", "> 0"), ("-1", "> 0"), ("nan", "finite"), ("inf", "finite")):
        cases.append((f"--lr {v}", TRAIN + ("--lr", v), frag))
    for v in ("nan", "inf"):
        cases.append((f"--lr_depth_exp {v}", TRAIN + ("--lr_depth_exp", v), "finite"))
    for v, frag in (("0", "> 0"), ("-1", "> 0"), ("nan", "finite")):
        cases.append((f"--tau_min {v}", TRAIN + ("--tau_min", v), frag))
    cases += [
        ("--tau_max below --tau_min", TRAIN + ("--tau_max", "1"), "tau_max must be >= tau_min"),
        ("--a 1e308 (spectrum underflows)", TRAIN + ("--a", "1e308"), "a must be <= 100"),
        ("--N below --d", TRAIN + ("--N", "4"), "N must be >= d"),
        ("--k above --P", TRAIN + ("--k", "17"), "k must be <= P = 16"),
        ("qk_init spread with gaussian W_x", TRAIN + ("--qk_init", "spread", "--wx_init", "gaussian"),
         "wx_init must be orthogonal"),
    ]
    for f in ("model", "task", "schedule", "qk_init", "wx_init", "gain_init", "qk_lr"):
        cases.append((f"--{f} bogus", TRAIN + (f"--{f}", "bogus"), f"argument --{f}: invalid choice: 'bogus'"))
    cases += [
        ("--init_qk (renamed --qk_std)", TRAIN + ("--init_qk", "0.1"), "unrecognized arguments: --init_qk 0.1"),
        ("--keep_best maybe", TRAIN + ("--keep_best", "maybe"), "expected true or false"),
        ("--log bogus", TRAIN + ("--log", "bogus"), "argument --log: invalid choice: 'bogus'"),
        ("--log tensorboard without the package", TRAIN + ("--log", "tensorboard"),
         "--log tensorboard needs the tensorboard package: pip install 'depthscale[tensorboard]'"),
        ("a new store named runs (would nest)", ("train", "--preset", "smoke", "--store", "{tmp}/runs"),
         "would nest as runs/runs/"),
    ]
    cases += [
        ("--preset bogus", ("train", "--preset", "bogus", "--store", "{store}"), "invalid choice: 'bogus'"),
        ("--depth 100000000 (memory)", TRAIN + ("--depth", "100000000"), "is available on cpu"),
        ("--batch 3000000 (memory)", ("train", "--store", "{store}", "--batch", "3000000"), "is available on cpu"),
        ("--P 10000000 (memory)", TRAIN + ("--P", "10000000", "--k", "1"), "is available on cpu"),
        ("--d 100000 --N 100000 (memory)", TRAIN + ("--d", "100000", "--N", "100000"), "is available on cpu"),
        ("--eval_contexts 1e9 (memory)", TRAIN + ("--eval_contexts", "1000000000"), "is available on cpu"),
        ("empty --store", ("train", "--preset", "smoke", "--store", ""), "--store is empty"),
        ("--store is a file", ("train", "--preset", "smoke", "--store", "{file}"), "is not writable"),
        ("--store under a file", ("train", "--preset", "smoke", "--store", "{file}/store"), "is not writable"),
        ("--log without --store", ("train", "--preset", "smoke", "--log", "tensorboard"), "--log needs --store"),
        ("unknown option", TRAIN + ("--nope", "1"), "unrecognized arguments: --nope 1"),
        ("--device bogus", TRAIN + ("--device", "tpu"), "invalid choice: 'tpu'"),
    ]
    SWEEP = ("sweep", "--preset", "smoke", "--store", "{store}")
    for name, frag in (("empty.json", "is empty"), ("empty.toml", "is empty"), ("nokeys.json", "grid is empty"),
                       ("nolist.json", "grid is empty"), ("badjson.json", "is not valid JSON"),
                       ("badtoml.toml", "is not valid TOML"), ("grid.yaml", "must end in .json or .toml"),
                       ("unknown.json", "unknown grid key 'nope'"), ("emptylist.json", "has an empty list"),
                       ("badmodel.json", "model must be one of"), ("seed.json", "seed must be >= 0"),
                       ("evalseed.json", "eval_seed must be an integer in [0, 2**60)"),
                       ("presetL.json", 'must be the only value of L'),
                       ("huge.json", "is available on cpu")):
        cases.append((f"grid file {name}", SWEEP + ("--grid", "{grid:%s}" % name), frag))
    cases += [
        ("no --experiment nor --grid", SWEEP, "give exactly one of --experiment ID or --grid FILE"),
        ("both --experiment and --grid", SWEEP + ("--experiment", "fig6", "--grid", "{grid:ok.json}"),
         "give exactly one of"),
        ("empty --experiment", SWEEP + ("--experiment", ""), "give exactly one of"),
        ("unknown experiment", SWEEP + ("--experiment", "fig99"), "unknown experiment 'fig99'"),
        ("unknown experiment in a list", SWEEP + ("--experiment", "fig6,nope"), "unknown experiment 'nope'"),
        ("unknown experiment in a spaced list", SWEEP + ("--experiment", "fig6, nope"), "unknown experiment 'nope'"),
        ("empty item in a list", SWEEP + ("--experiment", "fig6,,fig5"), "unknown experiment ''"),
        ("sweep --log bogus", SWEEP + ("--grid", "{grid:ok.json}", "--log", "bogus"), "invalid choice: 'bogus'"),
        ("sweep --log tensorboard without the package", SWEEP + ("--grid", "{grid:ok.json}", "--log", "tensorboard"),
         "pip install 'depthscale[tensorboard]'"),
        ("sweep into a new store named runs", ("sweep", "--preset", "smoke", "--store", "{tmp}/runs", "--grid",
                                               "{grid:ok.json}"), "would nest as runs/runs/"),
        ("missing grid file", SWEEP + ("--grid", "{missing}.json"), "no such file"),
        ("grid is a directory", SWEEP + ("--grid", "{dir}"), "a directory, not a grid file"),
        ("--shard 2/2", SWEEP + ("--grid", "{grid:ok.json}", "--shard", "2/2"), "shard must be i/n"),
        ("--shard 1/0", SWEEP + ("--grid", "{grid:ok.json}", "--shard", "1/0"), "shard must be i/n"),
        ("--shard abc", SWEEP + ("--grid", "{grid:ok.json}", "--shard", "abc"), "shard must look like i/n"),
        ("--shard -1/2", SWEEP + ("--grid", "{grid:ok.json}", "--shard=-1/2"), "shard must look like i/n"),
        ("--workers 0", SWEEP + ("--grid", "{grid:ok.json}", "--workers", "0"), "--workers must be >= 1"),
        ("--workers -3", SWEEP + ("--grid", "{grid:ok.json}", "--workers=-3"), "--workers must be >= 1"),
        ("--executor threads", SWEEP + ("--grid", "{grid:ok.json}", "--executor", "threads"), "invalid choice"),
        ("--slurm-time without slurm", SWEEP + ("--grid", "{grid:ok.json}", "--slurm-time", "5"),
         "--slurm-time needs --executor slurm"),
        ("--slurm-time 0", SWEEP + ("--grid", "{grid:ok.json}", "--executor", "slurm", "--slurm-time", "0"),
         "--slurm-time must be >= 1"),
        ("--slurm-parallelism 0", SWEEP + ("--grid", "{grid:ok.json}", "--executor", "slurm",
                                           "--slurm-parallelism", "0"), "--slurm-parallelism must be >= 1"),
        ("--slurm-cpus -1", SWEEP + ("--grid", "{grid:ok.json}", "--executor", "slurm", "--slurm-cpus=-1"),
         "--slurm-cpus must be >= 1"),
        ("--slurm-mem 0", SWEEP + ("--grid", "{grid:ok.json}", "--executor", "slurm", "--slurm-mem", "0"),
         "--slurm-mem must be > 0"),
        ("--pack-memory 0", SWEEP + ("--grid", "{grid:ok.json}", "--pack-memory", "0"),
         "--pack-memory must be a finite number > 0"),
        ("--pack-memory nan", SWEEP + ("--grid", "{grid:ok.json}", "--pack-memory", "nan"),
         "--pack-memory must be a finite number > 0"),
        ("--slurm-time abc", SWEEP + ("--grid", "{grid:ok.json}", "--executor", "slurm", "--slurm-time", "abc"),
         "invalid int value"),
        ("slurm without submitit", SWEEP + ("--grid", "{grid:ok.json}", "--executor", "slurm"),
         "pip install 'depthscale[slurm]'"),
        ("empty --store", ("sweep", "--preset", "smoke", "--store", "", "--grid", "{grid:ok.json}"),
         "--store is empty"),
    ]
    for cmd in ("status", "collect"):
        out = ("--out", "{tmp}/t.csv") if cmd == "collect" else ()
        cases += [
            ("missing store (not created)", (cmd, "--store", "{missing}") + out, "does not exist"),
            ("empty --store", (cmd, "--store", "") + out, "--store is empty"),
            ("--store is a file", (cmd, "--store", "{file}") + out, "does not exist"),
        ]
    cases += [
        ("a directory of stores, not a store", ("status", "--store", "{tmp}"), "stores inside it: empty, store"),
        ("collect --sweep unknown", ("collect", "--store", "{store}", "--out", "{tmp}/t.csv", "--sweep", "nope"),
         "no sweep 'nope' in store"),
        ("collect --curves --sweep unknown", ("collect", "--store", "{store}", "--curves", "--out", "{tmp}/c.csv",
                                              "--sweep", "nope"), "no sweep 'nope' in store"),
        ("collect --curves --out .xlsx", ("collect", "--store", "{store}", "--curves", "--out", "{tmp}/c.xlsx"),
         "use a .parquet or .csv suffix"),
        ("collect --curves missing store", ("collect", "--store", "{missing}", "--curves", "--out", "{tmp}/c.csv"),
         "does not exist"),
        ("empty --out", ("collect", "--store", "{store}", "--out", ""), "--out is empty"),
        ("--out .xlsx", ("collect", "--store", "{store}", "--out", "{tmp}/t.xlsx"), "use a .parquet or .csv suffix"),
        ("--out is a directory", ("collect", "--store", "{store}", "--out", "{dir}.csv"), "is a directory"),
        ("--out under a file", ("collect", "--store", "{store}", "--out", "{file}/t.csv"), "is a file"),
    ]
    FIT = ("fit", "--depths")
    cases += [
        ("all depths equal", FIT + ("2,2,2,2", "--losses", "4,3,2,1"), "at least 3 distinct depths"),
        ("two depths with a floor", FIT + ("1,2", "--losses", "3,2"), "at least 3 distinct depths"),
        ("one depth, --no-floor", FIT + ("2,2", "--losses", "3,2", "--no-floor"), "at least 2 distinct depths"),
        ("all losses equal", FIT + ("1,2,4,8", "--losses", "3,3,3,3"), "all equal"),
        ("losses 1e308 (all equal, past the fit's range)", FIT + ("1,2,4,8", "--losses", "1e308,1e308,1e308,1e308"),
         "--losses must be in [1e-100, 1e+100], got 1e+308"),
        ("losses near overflow", FIT + ("1,2,4,8", "--losses", "1e308,1e307,1e306,1e305"), "--losses must be in [1e-100, 1e+100]"),
        ("lengths differ", FIT + ("1,2,4", "--losses", "1,2"), "--depths has 3 values"),
        ("empty --depths", FIT + ("", "--losses", "1"), "--depths is empty"),
        ("not numbers", FIT + ("1,a,4", "--losses", "3,2,1"), "comma-separated list of numbers"),
        ("nan depth", FIT + ("1,nan,4", "--losses", "3,2,1"), "finite numbers"),
        ("inf loss", FIT + ("1,2,4", "--losses", "3,inf,1"), "finite numbers"),
        ("depth 0", FIT + ("0,1,2", "--losses", "3,2,1"), "--depths must be in [1e-06, 1e+12], got 0.0"),
        ("loss 0", FIT + ("1,2,4", "--losses", "0,2,1"), "--losses must be in [1e-100, 1e+100], got 0.0"),
        ("negative loss", FIT + ("1,2,4", "--losses=-1,2,1"), "--losses must be in [1e-100, 1e+100], got -1.0"),
        ("missing --losses", FIT + ("1,2,4",), "the following arguments are required: --losses"),
    ]
    TH = ("theory",)
    cases += [
        ("exponents --a 1e308", TH + ("exponents", "--a", "1e308", "--b", "1"), "--a must be between 0 and 100"),
        ("exponents --a 0", TH + ("exponents", "--a", "0", "--b", "1"), "a must be finite and > 0"),
        ("exponents --a nan", TH + ("exponents", "--a", "nan", "--b", "1"), "--a must be a finite number"),
        ("exponents --b inf", TH + ("exponents", "--a", "1", "--b", "inf"), "--b must be a finite number"),
        ("exponents --b -1", TH + ("exponents", "--a", "1", "--b=-1"), "b must be finite and >= 0"),
        ("curve --P -1", TH + ("curve", "--a", "1", "--b", "1", "--P=-1"), "--P must be >= 1"),
        ("curve --d 0", TH + ("curve", "--a", "1", "--b", "1", "--d", "0"), "--d must be >= 1"),
        ("curve --depths 0,1", TH + ("curve", "--a", "1", "--b", "1", "--depths", "0,1"), "integers >= 1"),
        ("curve --depths 1.5", TH + ("curve", "--a", "1", "--b", "1", "--depths", "1.5"), "integers >= 1"),
        ("curve --depths empty", TH + ("curve", "--a", "1", "--b", "1", "--depths", ""), "--depths is empty"),
        ("curve --finite-P --samples 3", TH + ("curve", "--a", "1", "--b", "1", "--finite-P", "--samples", "3"),
         "samples must be"),
        ("floor --samples 1e11", TH + ("floor", "--a", "0", "--b", "0", "--samples", "100000000000"),
         "--samples must be between 1 and 100,000,000"),
        ("floor --samples 0", TH + ("floor", "--a", "0", "--b", "0", "--samples", "0"), "--samples must be"),
        ("floor --samples 1e8 (memory)", TH + ("floor", "--a", "0", "--b", "0", "--samples", "100000000"),
         "of memory (estimate)"),
        ("floor --k 0", TH + ("floor", "--a", "0", "--b", "0", "--k", "0"), "--k must be >= 1"),
        ("floor --k above --P", TH + ("floor", "--a", "0", "--b", "0", "--k", "200"), "k must be <= P = 128"),
        ("floor --seed -1", TH + ("floor", "--a", "0", "--b", "0", "--seed=-1"), "--seed must be an integer in [0, 2**60)"),
        ("softmax-floor --temperatures 1,x", TH + ("softmax-floor", "--a", "0", "--b", "0", "--temperatures", "1,x"),
         "--temperatures"),
        ("softmax-floor --temperatures nan", TH + ("softmax-floor", "--a", "0", "--b", "0", "--temperatures", "nan"),
         "finite numbers"),
        ("unknown theory", TH + ("bogus", "--a", "0", "--b", "0"), "invalid choice: 'bogus'"),
        ("exponents with --samples (not its flag)", TH + ("exponents", "--a", "1", "--b", "1", "--samples", "10"),
         "unrecognized arguments: --samples 10"),
        ("floor with --finite-P (curve's flag)", TH + ("floor", "--a", "0", "--b", "0", "--finite-P"),
         "unrecognized arguments: --finite-P"),
        ("curve with --k (not its flag)", TH + ("curve", "--a", "1", "--b", "1", "--k", "2"),
         "unrecognized arguments: --k 2"),
        ("theory without a subcommand", TH, "the following arguments are required: {exponents,curve,floor,"),
        ("theory without --a", TH + ("floor", "--b", "0"), "the following arguments are required: --a"),
    ]
    REPRO = ("reproduce", "fig6", "--preset", "smoke", "--store", "{store}")
    cases += [
        ("unknown id", ("reproduce", "fig99", "--preset", "smoke", "--store", "{store}", "--out", "{tmp}/o"),
         "unknown experiment 'fig99'"),
        ("unknown id in a spaced list", ("reproduce", "fig6, fig99", "--preset", "smoke", "--store", "{store}",
                                         "--out", "{tmp}/o"), "unknown experiment 'fig99'"),
        ("--out is a file", REPRO + ("--out", "{file}"), "is a file, not a directory"),
        ("--out under a file", REPRO + ("--out", "{file}/out"), "is a file, not a directory"),
        ("empty --out", REPRO + ("--out", ""), "--out is empty"),
        ("empty --store", ("reproduce", "fig6", "--store", "", "--out", "{tmp}/o"), "--store is empty"),
        ("--workers 0", REPRO + ("--out", "{tmp}/o", "--workers", "0"), "--workers must be >= 1"),
        ("slurm without submitit", REPRO + ("--out", "{tmp}/o", "--executor", "slurm"),
         "pip install 'depthscale[slurm]'"),
        ("report: missing store", ("report", "--store", "{missing}", "--out", "{tmp}/o"), "does not exist"),
        ("report: --out is a file", ("report", "--store", "{store}", "--out", "{file}"), "is a file, not a directory"),
        ("report: empty --out", ("report", "--store", "{store}", "--out", ""), "--out is empty"),
        ("report: --preset bogus", ("report", "--store", "{store}", "--out", "{tmp}/o", "--preset", "x"),
         "invalid choice: 'x'"),
        ("report: no finished runs", ("report", "--store", "{empty}", "--out", "{tmp}/o"), "has no finished runs"),
        ("report: --experiment bogus", ("report", "--store", "{store}", "--out", "{tmp}/o", "--experiment", "fig2"),
         "unknown experiment 'fig2'"),
        ("bench --steps 0", ("bench", "--preset", "smoke", "--steps", "0"), "--steps must be between 1"),
        ("bench --steps 1e8", ("bench", "--preset", "smoke", "--steps", "100000000"), "--steps must be between 1"),
        ("bench --steps -5", ("bench", "--preset", "smoke", "--steps=-5"), "--steps must be between 1"),
        ("bench --dtype bogus", ("bench", "--dtype", "fp8"), "invalid choice: 'fp8'"),
        ("no command", (), "the following arguments are required: cmd"),
        ("unknown command", ("frobnicate",), "invalid choice: 'frobnicate'"),
    ]
    for module in _case_modules():
        cases += module.CASES
    return cases


def _case_modules() -> list:
    """More cases live beside this file, one module per area (tests/bad_cases_*.py): each has CASES
    (rows as above), and may have GRIDS (more grid files) and prepare(tmp_path) -> {placeholder: path}
    to make the special files its cases name (a FIFO, a symlink, ...)."""
    import importlib

    return [importlib.import_module(p.stem) for p in sorted(Path(__file__).parent.glob("bad_cases_*.py"))]


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.is_dir(), p.read_bytes() if p.is_file() else b"")
            for p in sorted(root.rglob("*"))}


def test_every_bad_input_gets_one_line_exit_2_and_changes_nothing(tmp_path, capsys, monkeypatch):
    from depthscale.cli import main as cli
    from depthscale.train import memory
    from depthscale.config.run import make_config
    from depthscale.store.store import Store

    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": GIB16)
    store = Store(tmp_path / "store")
    cfg = make_config("smoke")
    store.write_config(cfg)
    store.finish(cfg.run_id, {"R": 1.0, "var_ystar": 2.0, "steps": 60, "stopped_because": "max_steps"}, {})
    Store(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir.csv").mkdir()
    grids = dict(GRIDS)
    for module in _case_modules():
        grids.update(getattr(module, "GRIDS", {}))
    for name, text in grids.items():
        (tmp_path / name).write_text(text)
    subs = {"store": tmp_path / "store", "missing": tmp_path / "missing", "file": tmp_path / "file",
            "dir": tmp_path / "dir", "empty": tmp_path / "empty", "tmp": tmp_path}
    for module in _case_modules():
        if hasattr(module, "prepare"):
            subs.update(module.prepare(tmp_path))
    rows, failures = [], []
    for what, argv, fragment in _bad_inputs():
        args = []
        for a in argv:
            for key, val in subs.items():
                a = a.replace("{%s}" % key, str(val))
            if a.startswith("{grid:"):
                a = str(tmp_path / a[6:-1])
            args.append(a)
        before = _tree(tmp_path)
        with monkeypatch.context() as m:
            if what == "slurm without submitit":
                m.setitem(sys.modules, "submitit", None)
            if "without the package" in what:
                m.setitem(sys.modules, "torch.utils.tensorboard", None)
            capsys.readouterr()
            code = cli.main(args)
            out = capsys.readouterr()
        lines = out.err.strip().splitlines()
        msg = (lines[0] if lines else "").replace(str(tmp_path), "<tmp>")
        ok = code == 2 and len(lines) == 1 and fragment in lines[0] and "Traceback" not in out.err \
            and _tree(tmp_path) == before
        if not ok:
            failures.append((what, args, code, out.err[-500:], _tree(tmp_path) == before))
        cmd = " ".join(a if a and " " not in a else repr(a) for a in argv)
        rows.append(f"| {len(rows) + 1} | {argv[0] if argv else '—'} | {what} | `depthscale {cmd}` | {code} | "
                    f"`{msg.replace('|', '/')}` |")
    assert not failures, failures
    assert len(rows) >= 147
    text = "\n".join([
        "# Bad inputs and what each gets",
        "",
        "Generated by `tests/test_cli.py::test_every_bad_input_gets_one_line_exit_2_and_changes_nothing`",
        "(it rewrites this file when the table changes). Every input below gets one line on stderr and",
        "exit code 2, and leaves the store (and every other file) as it was: a missing store is not",
        "created. Placeholders: `{store}` a store with one finished run, `{empty}` a store without runs,",
        "`{missing}` a path that does not exist, `{file}` a regular file, `{dir}` a directory,",
        "`{grid:NAME}` a grid file (contents in the test's `GRIDS` and the `GRIDS` of tests/bad_cases_*.py),",
        "`<tmp>` the test's directory; other placeholders are made by `prepare` in tests/bad_cases_*.py.",
        f"Memory estimates are compared with {GIB16 // 2**30} GiB available (the test fixes it; the real",
        "number is read from /proc/meminfo, or the GPU, at run time).",
        "",
        "| # | command | what is wrong | input | exit | stderr |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ])
    if not DOCS.exists() or DOCS.read_text() != text:
        DOCS.write_text(text)


@pytest.mark.parametrize("lr, why", [("1e3", "explodes"), ("1e6", "becomes NaN")])
def test_diverged_train_run_has_its_own_state(tmp_path, capsys, lr, why):
    """`--lr 1e3` explodes (R ~ 1e18: was recorded as a normal finish), `--lr 1e6` goes NaN; both are
    `diverged` (with the step and the reason) in train --json, status and collect, and `L` is kept."""
    from depthscale.cli import main as cli

    store = tmp_path / "s"
    args = ["train", "--preset", "smoke", "--depth", "2", "--lr", lr, "--store", str(store), "--json"]
    capsys.readouterr()
    assert cli.main(args) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["L"] == 2 and rec["model"] == "nonlinear" and rec["state"] == "diverged", rec
    assert isinstance(rec["diverged_step"], int) and 0 < rec["diverged_step"] <= rec["steps"]
    assert ("non-finite" in rec["diverged_reason"]) or ("Var(y*)" in rec["diverged_reason"])
    text = (store / "runs" / rec["run_id"] / "metrics.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in metrics.json"))
    assert cli.main(["train", "--preset", "smoke", "--depth", "2", "--lr", lr, "--store", str(store)]) == 0
    line = capsys.readouterr().out
    assert f"DIVERGED at step {rec['diverged_step']}" in line  # loaded, not retrained
    assert cli.main(["collect", "--store", str(store), "--out", str(tmp_path / "t.csv")]) == 0
    assert "(1 diverged: column state)" in capsys.readouterr().out
    row = pd.read_csv(tmp_path / "t.csv").iloc[0]
    assert row["state"] == "diverged" and row["diverged_step"] == rec["diverged_step"]
    from depthscale.store.store import Store

    assert Store(store, readonly=True).run_state(rec["run_id"]) == "diverged"


def test_slurm_without_submitit_is_one_line(tmp_path, monkeypatch):
    """Through a real subprocess: an import hook hides submitit; nothing is written."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import sys\nclass _Hide:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'submitit' or name.startswith('submitit.'):\n"
        "            raise ModuleNotFoundError(\"No module named 'submitit'\")\n"
        "sys.meta_path.insert(0, _Hide())\n")
    grid = tmp_path / "g.json"
    grid.write_text(json.dumps({"L": 1}))
    env = {**__import__("os").environ, "PYTHONPATH": str(shim)}
    out = subprocess.run([sys.executable, "-m", "depthscale", "sweep", "--grid", str(grid), "--preset", "smoke",
                          "--store", str(tmp_path / "s"), "--executor", "slurm", "--slurm-parallelism", "4"],
                         capture_output=True, text=True, env=env)
    one_line_error(out, "pip install 'depthscale[slurm]'")
    assert not (tmp_path / "s").exists()
