"""The researcher's second day, at the command line: --help shows the defaults of the preset and
model given, every flag in both spellings, --version, train --print-config with each value's source,
sweep --dry-run, a run's config.json (or a collected row) as a grid, and bad input to the new
commands as one line with exit code 2. In-process (cli.main) and on the smoke preset: seconds."""

import json
import re

import pytest

from depthscale import __version__
from depthscale.cli import main as cli
from depthscale.config import run as config
from depthscale.config.run import (FIELD_DEFAULTS, FIELD_HELP, FIELD_NAMES, PRESETS, TASKS, config_and_sources,
                               depth_steps, geometry, make_config, preset_fields, recipe_fields)
from depthscale.config.kind_registry import kind_names
from depthscale.store import collect
from depthscale.store.store import Store


def run_cli(capsys, *argv):
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(capsys, fragment, *argv):
    code, out, err = run_cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and fragment in lines[0], (code, err)
    assert lines[0].startswith("depthscale: error: ") and "Traceback" not in err
    return lines[0]


def help_of(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--help"])
    assert exc.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare word by word


def flag_help(text: str, flag: str) -> str:
    """The help text of one flag (in the options, after the usage and the group's description),
    from its name to the next flag's."""
    text = text[text.rindex("without training."):]
    m = re.search(rf" {re.escape(flag)} \S+ (.*?)(?= --[A-Za-z]|$)", text)
    assert m, flag
    return m.group(1)


# --- see before you run ------------------------------------------------------------------------

def test_help_shows_the_defaults_of_the_preset_and_model_given(capsys):
    smoke = help_of(capsys, "train", "--preset", "smoke", "--model", "nonlinear")
    assert "(default: 0.01 [preset])" in flag_help(smoke, "--lr")
    assert "(default: independent [default])" in flag_help(smoke, "--qk_init")
    assert "(default: 8 [geometry])" in flag_help(smoke, "--d")
    assert "(default: 60 [preset])" in flag_help(smoke, "--max_steps")
    assert "(given: nonlinear)" in flag_help(smoke, "--model")
    cpu = help_of(capsys, "train")  # no preset given: the cpu preset's, as before
    assert "(default: 0.003 [recipe])" in flag_help(cpu, "--lr")
    linear = help_of(capsys, "train", "--preset", "cpu", "--model", "linear", "--depth", "64")
    assert "(default: gd [recipe])" in flag_help(linear, "--qk_init")
    assert "(default: 1000 [depth])" in flag_help(linear, "--max_steps")
    assert "(default: 32 [geometry])" in flag_help(linear, "--d")
    # a bad value among them: the help still shows (the cpu preset's defaults)
    assert "(default: 0.01 [preset])" in flag_help(help_of(capsys, "train", "--preset", "smoke", "--k", "99"), "--lr")


def test_every_help_line_is_whole():
    docs = FIELD_HELP
    assert set(docs) == set(FIELD_NAMES)
    assert docs["grad_clip"].endswith("starves the small W_q, W_k gradients below Adam's eps)")
    assert docs["grad_clip"].count("(") == docs["grad_clip"].count(")")
    assert docs["eval_contexts"] == "fresh evaluation contexts"  # a section heading is not a continuation
    assert all("---" not in text for text in docs.values())


def test_help_shows_the_whole_grad_clip_comment(capsys):
    text = flag_help(help_of(capsys, "train", "--preset", "smoke"), "--grad_clip")
    assert "below Adam's eps) (default: 0.0 [default])" in text


def test_print_config_names_each_fields_source(capsys):
    code, out, _ = run_cli(capsys, "train", "--preset", "cpu", "--model", "linear", "--depth", "64", "--print-config",
                           "--json")
    res = json.loads(out)
    src, cfg = res["source"], res["config"]
    assert code == 0 and res["run_id"] == make_config("cpu", model="linear", L=64).run_id and res["state"] is None
    assert (src["d"], cfg["d"]) == ("geometry", 32)
    assert (src["qk_init"], cfg["qk_init"]) == ("recipe", "gd")
    assert (src["max_steps"], cfg["max_steps"]) == ("depth", 1000)
    assert (src["L"], cfg["L"]) == ("flag", 64)
    assert src["seed"] == "default"
    code, out, _ = run_cli(capsys, "train", "--preset", "smoke", "--print-config", "--json")
    res = json.loads(out)
    assert (res["source"]["lr"], res["config"]["lr"]) == ("preset", 0.01)
    assert (res["source"]["qk_init"], res["config"]["qk_init"]) == ("default", "independent")
    # text: one line per field with its value and source; nothing trained, no store needed
    code, out, err = run_cli(capsys, "train", "--preset", "smoke", "--lr", "0.05", "--print_config")
    assert code == 0 and re.search(r"^\s+lr\s+0\.05\s+flag$", out, re.M) and re.search(r"^\s+d\s+8\s+geometry$", out, re.M)
    assert len(out.strip().splitlines()) == 1 + len(FIELD_NAMES)


@pytest.mark.parametrize("argv", [("--preset", "cpu", "--model", "linear", "--depth", "64"),
                                  ("--preset", "smoke", "--task", "easy", "--k", "1", "--lr", "0.05"),
                                  ("--preset", "paper", "--task", "easy", "--max_steps", "7")])
def test_print_config_is_make_configs_one_fold(capsys, monkeypatch, argv):
    """--print-config shows the config and sources of config_and_sources, the fold make_config (and
    so the run) makes, and folds the layers once."""
    folds = []
    layers = config._layers
    monkeypatch.setattr(config, "_layers", lambda *a: folds.append(a) or layers(*a))
    code, out, _ = run_cli(capsys, "train", *argv, "--print-config", "--json")
    res = json.loads(out)
    flags = dict(zip(argv[::2], argv[1::2]))
    given = {k.lstrip("-").replace("depth", "L"): v for k, v in flags.items() if k != "--preset"}
    given = {k: (float(v) if k == "lr" else v if k in ("model", "task") else int(v)) for k, v in given.items()}
    # (the parser's --help defaults fold the cpu preset's layers first: no flag given)
    assert code == 0 and [f for f in folds if f[1]] == [(flags["--preset"], given)]
    cfg, src = config_and_sources(flags["--preset"], **given)
    assert res["source"] == src and res["config"] == cfg.to_dict() == make_config(flags["--preset"], **given).to_dict()
    assert res["run_id"] == cfg.run_id


def test_print_config_says_whether_the_store_holds_the_run(tmp_path, capsys):
    args = ("train", "--preset", "smoke", "--max_steps", "4", "--eval_every", "2", "--store", tmp_path / "s")
    _, out, _ = run_cli(capsys, *args, "--print-config", "--json")
    assert json.loads(out)["state"] == "new" and not (tmp_path / "s").exists()
    assert run_cli(capsys, *args, "--json")[0] == 0
    _, out, _ = run_cli(capsys, *args, "--print-config", "--json")
    assert json.loads(out)["state"] == "done"


CASES = [(p, m, t, L) for p in PRESETS for m in kind_names() for t in TASKS for L in (1, 64)]


@pytest.mark.parametrize("preset, model, task, L", CASES)
def test_the_sources_replay_make_config(preset, model, task, L):
    """Each field's value is the value of the layer its source names (so the replay and make_config
    agree on every field of every preset, model and task)."""
    given = {"model": model, "task": task, "L": L}
    cfg = make_config(preset, **given).to_dict()
    layers = {"default": FIELD_DEFAULTS, "preset": preset_fields(preset), "geometry": geometry(preset, model),
              "recipe": recipe_fields(preset, model, task), "flag": given}
    steps = depth_steps(preset, model, task, L)
    if steps is not None:
        layers["depth"] = {"max_steps": steps, "min_steps": steps // 2}
    for name, src in config_and_sources(preset, **given)[1].items():
        want = 1 if (name == "k" and task == "easy") else layers[src][name]
        assert cfg[name] == want, (name, src)


# --- one spelling ------------------------------------------------------------------------------

def test_every_flag_takes_both_spellings():
    p = cli.build_parser()
    for a, b in ((["--max-steps", "10"], ["--max_steps", "10"]), (["--qk-init", "tied"], ["--qk_init", "tied"]),
                 (["--eval-seed", "7"], ["--eval_seed", "7"]), (["--print_config"], ["--print-config"]),
                 (["--allow_memory"], ["--allow-memory"]), (["--lr-depth-exp=0.5"], ["--lr_depth_exp=0.5"]),
                 (["--depth", "4"], ["--L", "4"]), (["--max_st", "10"], ["--max_steps", "10"])):
        assert vars(p.parse_args(["train", *a])) == vars(p.parse_args(["train", *b])), (a, b)
    assert p.parse_args(["train", "--max-steps", "10"]).max_steps == 10
    grid = ["sweep", "--grid", "g.json", "--store", "s"]
    for a, b in ((["--pack_memory", "2"], ["--pack-memory", "2"]), (["--dry_run"], ["--dry-run"]),
                 (["--slurm_time", "5"], ["--slurm-time", "5"])):
        assert vars(p.parse_args(grid + a)) == vars(p.parse_args(grid + b)), (a, b)
    assert p.parse_args(["theory", "curve", "--a", "1", "--b", "1", "--finite_P"]).finite_P
    assert p.parse_args(["fit", "--depths", "1", "--losses", "1", "--no_floor"]).no_floor


def test_help_and_errors_name_each_flag_once(capsys):
    text = help_of(capsys, "train")
    usage, options = text[:text.index("Train one model")], text[text.index("options:"):]
    for part in (usage, options):
        assert "--max_steps" in part and "--max-steps" not in part and "--qk-init" not in part
        assert "--print-config" in part and "--print_config" not in part
    one_line_error(capsys, "argument --qk_init: invalid choice: 'bogus'", "train", "--qk-init", "bogus")
    one_line_error(capsys, "unrecognized arguments: --init-qk 1", "train", "--init-qk", "1")


def test_version(capsys):
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.strip() == f"depthscale {__version__}"
    one_line_error(capsys, "the following arguments are required: cmd")


def test_train_with_depth_and_max_steps_in_either_spelling(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "train", "--preset", "smoke", "--model", "nonlinear", "--depth", "4",
                           "--max-steps", "10", "--eval-every", "5", "--json", "--store", tmp_path / "s")
    res = json.loads(out)
    assert code == 0 and res["L"] == 4 and res["steps"] == 10 and res["state"] == "done"
    # the command as written: without --store the run trains in memory, nothing is saved
    code, out, err = run_cli(capsys, "train", "--preset", "smoke", "--model", "nonlinear", "--depth", "4",
                             "--max-steps", "10", "--json")
    res = json.loads(out)
    assert code == 0 and res["L"] == 4 and res["steps"] == 10 and "not saved" in err
    one_line_error(capsys, "--log needs --store", "train", "--preset", "smoke", "--log", "tensorboard")


# --- sweep --dry-run and run records as grids --------------------------------------------------

def _grid(tmp_path, **extra):
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"model": "nonlinear", "depths": [1, 2, 4], "seed": [0, 1], "max_steps": 10,
                                "eval_every": 5, "eval_contexts": 64, "monitor_contexts": 64, **extra}))
    return path


def test_dry_run_lists_the_runs_and_trains_nothing(tmp_path, capsys):
    grid = _grid(tmp_path)
    store = tmp_path / "new"
    code, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store, "--dry-run")
    lines = out.strip().splitlines()
    assert code == 0 and lines[0].startswith("sweep g-smoke: 6 runs to train in 1 pack (0 of 6 already done")
    runs = [ln for ln in lines if re.match(r"^  [0-9a-f]{16}  ", ln)]
    assert len(runs) == 6 and all(re.search(r"L=\d, seed=\d$", ln) for ln in runs)
    assert not store.exists()  # nothing created
    Store(tmp_path / "empty")
    code, out, _ = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", tmp_path / "empty",
                           "--dry_run", "--json")
    res = json.loads(out)
    assert code == 0 and res["planned"] == 6 and res["packs"] == 1 and res["vary"] == ["L", "seed"]
    assert sorted(r["L"] for r in res["runs"]) == [1, 1, 2, 2, 4, 4]
    assert list((tmp_path / "empty" / "runs").iterdir()) == [] and list((tmp_path / "empty" / "sweeps").iterdir()) == []


def test_a_runs_config_json_and_a_collected_row_are_grids_of_that_run(tmp_path, capsys):
    store = tmp_path / "s"
    code, out, _ = run_cli(capsys, "train", "--preset", "smoke", "--depth", "2", "--max_steps", "6", "--eval_every",
                           "3", "--eval_contexts", "64", "--store", store, "--json")
    rid = json.loads(out)["run_id"]
    config_json = store / "runs" / rid / "config.json"
    row = tmp_path / "row.json"
    collect.collect(Store(store)).iloc[0].to_json(row)
    rows = tmp_path / "rows.json"
    collect.collect(Store(store)).to_json(rows, orient="records")
    for grid in (config_json, row, rows):
        for preset in ("smoke", "cpu"):  # the record gives every field: the preset is only a label
            code, out, _ = run_cli(capsys, "sweep", "--grid", grid, "--preset", preset, "--store", tmp_path / "other",
                                   "--dry-run", "--json")
            res = json.loads(out)
            assert code == 0 and [r["run_id"] for r in res["runs"]] == [rid], (grid, preset)
        code, out, _ = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store, "--json")
        assert code == 0 and json.loads(out)["skipped_done"] == 1 and json.loads(out)["ran"] == 0
    # an unknown field inside a config.json, or a row missing a field: one line naming it
    doc = json.loads(config_json.read_text())
    doc["config"]["bogus"] = 1
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    one_line_error(capsys, "unknown config field 'bogus'", "sweep", "--grid", tmp_path / "bad.json", "--preset", "smoke",
                   "--store", store, "--dry-run")
    rec = json.loads(row.read_text())
    rec["lrr"] = rec.pop("lr")
    (tmp_path / "bad2.json").write_text(json.dumps(rec))
    one_line_error(capsys, "without the config field 'lr'", "sweep", "--grid", tmp_path / "bad2.json", "--preset",
                   "smoke", "--store", store, "--dry-run")
    # a plain grid with a provenance key is still refused
    (tmp_path / "plain.json").write_text(json.dumps({"L": 1, "device": "cpu"}))
    one_line_error(capsys, "unknown grid key 'device'", "sweep", "--grid", tmp_path / "plain.json", "--preset", "smoke",
                   "--store", store, "--dry-run")


# --- bad input to the new commands: one line, exit 2 -------------------------------------------

def test_bad_inputs_to_plot_and_compare(tmp_path, capsys):
    store = Store(tmp_path / "s")
    cfg = make_config("smoke")
    store.write_config(cfg)
    store.finish(cfg.run_id, {"R": 1.0, "steps": 6, "stopped_because": "max_steps"}, {"step": [3, 6], "R": [2.0, 1.0]})
    (tmp_path / "file").write_text("x")
    S = ("--store", tmp_path / "s")
    one_line_error(capsys, "use a .png or .pdf suffix", "plot", "curves", *S, "--out", tmp_path / "c.txt")
    one_line_error(capsys, "--metric 'bogus' is not a curve", "plot", "curves", *S, "--metric", "R,bogus",
                   "--out", tmp_path / "c.png")
    one_line_error(capsys, "does not exist", "plot", "curves", "--store", tmp_path / "missing", "--out", tmp_path / "c.png")
    one_line_error(capsys, "no sweep 'nope'", "plot", "curves", *S, "--sweep", "nope", "--out", tmp_path / "c.png")
    one_line_error(capsys, "no run 'ffff'", "plot", "curves", *S, "--run", "ffff", "--out", tmp_path / "c.png")
    one_line_error(capsys, "is a file", "plot", "curves", *S, "--out", tmp_path / "file" / "c.png")
    one_line_error(capsys, "--out is empty", "plot", "curves", *S, "--out", "")
    one_line_error(capsys, "is neither a run directory nor a store", "compare", tmp_path / "nope", tmp_path / "s")
    one_line_error(capsys, "give two runs or two stores", "compare", tmp_path / "s",
                   tmp_path / "s" / "runs" / cfg.run_id)
    one_line_error(capsys, "no run 'abc'", "compare", "abc", cfg.run_id, *S)
    one_line_error(capsys, "does not exist", "compare", "a", "b", "--store", tmp_path / "missing")
    one_line_error(capsys, "the following arguments are required: b", "compare", "a")
    assert not (tmp_path / "missing").exists() and not (tmp_path / "c.png").exists()


@pytest.mark.parametrize("argv", [("plot",), ("plot", "curves"), ("compare",)])
def test_the_new_commands_have_help_with_an_example(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "example:" in out and "depthscale " + " ".join(argv) in out
