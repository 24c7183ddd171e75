"""Live training and results you can find later: curves appended as they come (and read back
whether a run is finished or not), resume without duplicate rows, the long curves table, plain
progress lines without a terminal, TensorBoard, the saved model, store paths, the one vocabulary,
comma lists of experiments, --json everywhere and a column dictionary that covers collect's table."""

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from depthscale.base.errors import StoreError
from depthscale.cli import main as cli
from depthscale.config.run import FIELD_NAMES, make_config
from depthscale.store import collect, manifests
from depthscale.store.store import CURVES_LIVE, Store
from depthscale.train import checkpoint, live
from depthscale.train.live import CURVE_KEYS
from depthscale.train.training import run_pack, train_pack

DOCS = Path(__file__).resolve().parents[1] / "docs"


def small(**kw):
    base = dict(max_steps=40, eval_every=10, checkpoint_every=20, eval_contexts=128, monitor_contexts=64,
                batch=16, patience=100)
    base.update(kw)
    return make_config("smoke", **base)


class Interrupt(Exception):
    pass


def run_cli(capsys, *argv):
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_curves_are_appended_live_and_a_resume_neither_loses_nor_doubles_rows(tmp_path):
    cfgs = [small(L=1), small(L=2)]
    ref = Store(tmp_path / "ref")
    run_pack(cfgs, ref)
    store = Store(tmp_path / "killed")
    orig = store.append_curves
    seen = {}

    def append_then_die(rid, rows):
        orig(rid, rows)
        seen[rid] = store.read_curves(rid)["step"]  # readable while the run trains
        if rows[-1]["step"] == 30 and len(seen) == 2 and all(s[-1] == 30 for s in seen.values()):
            raise Interrupt  # killed after the step-30 rows, 10 steps past the step-20 checkpoint
    store.append_curves = append_then_die
    with pytest.raises(Interrupt):
        run_pack(cfgs, store)
    for c in cfgs:
        assert not store.is_done(c.run_id)
        live = store.read_curves(c.run_id)
        assert live["step"] == [10, 20, 30] and list(live) == list(CURVE_KEYS)
    # a row cut short by the kill is left out, not an error
    with open(store.run_path(cfgs[0].run_id) / CURVES_LIVE, "a") as fh:
        fh.write('{"step": 40, "R": 1.')
    assert store.read_curves(cfgs[0].run_id)["step"] == [10, 20, 30]
    # the collect table sees the runs in progress too
    long = collect.collect_curves(store)
    assert set(long["run_id"]) == {c.run_id for c in cfgs} and sorted(set(long["step"])) == [10, 20, 30]

    store2 = Store(tmp_path / "killed")
    run_pack(cfgs, store2)  # resumes from the step-20 checkpoints
    for c in cfgs:
        got, want = store2.read_curves(c.run_id), ref.read_curves(c.run_id)
        assert got["step"] == want["step"] == [10, 20, 30, 40]  # no row lost, none twice
        assert got["R"] == pytest.approx(want["R"], rel=1e-6)
        assert not (store2.run_path(c.run_id) / CURVES_LIVE).exists()  # curves.json holds them now
        assert got == store2.load_curves(c.run_id)


def test_collect_curves_cli_gives_one_long_table(tmp_path, capsys):
    store = Store(tmp_path / "s")
    cfgs = [small(L=1), small(L=2, task="easy")]
    for c in cfgs:
        run_pack([c], store)
    out = tmp_path / "c.parquet"
    code, text, err = run_cli(capsys, "collect", "--store", store.root, "--curves", "--out", out)
    assert code == 0 and "curve rows of 2 runs" in text and err == ""
    df = pd.read_parquet(out)
    assert list(df.columns) == ["run_id", "step", "metric", "value"]
    assert set(df["metric"]) == set(CURVE_KEYS) - {"step"}
    assert len(df) == 2 * 4 * (len(CURVE_KEYS) - 1)  # runs x evaluations x metrics
    for c in cfgs:
        R = df[(df["run_id"] == c.run_id) & (df["metric"] == "R")].sort_values("step")
        assert list(R["value"]) == pytest.approx(store.load_curves(c.run_id)["R"])
    # CSV too, --json, and --sweep as in Python
    manifests.write(store, "one", [cfgs[0].run_id])
    code, text, _ = run_cli(capsys, "collect", "--store", store.root, "--curves", "--sweep", "one",
                            "--out", tmp_path / "c.csv", "--json")
    rec = json.loads(text)
    assert code == 0 and rec["runs"] == 1 and rec["columns"] == ["run_id", "step", "metric", "value"]
    assert set(pd.read_csv(tmp_path / "c.csv")["run_id"]) == {cfgs[0].run_id}
    assert len(collect.collect_curves(store, sweep="one")) == rec["rows"]


def test_parquet_has_native_list_columns_and_runs_say_when_where_and_which_preset(tmp_path, capsys):
    store = Store(tmp_path / "s")
    cfg = small(L=2)
    code, _, _ = run_cli(capsys, "train", "--preset", "smoke", "--depth", 2, "--max_steps", 20, "--eval_every", 10,
                         "--eval_contexts", 128, "--monitor_contexts", 64, "--batch", 16, "--store", store.root)
    assert code == 0
    run_pack([cfg], store)
    manifests.write(store, "mine", [cfg.run_id])
    code, text, _ = run_cli(capsys, "collect", "--store", store.root, "--out", tmp_path / "r.parquet", "--json")
    assert code == 0 and json.loads(text)["runs"] == 2
    df = pd.read_parquet(tmp_path / "r.parquet").set_index("run_id")
    assert len(df.loc[cfg.run_id, "mode_R"]) == cfg.d  # a list column, not JSON text
    assert not isinstance(df.loc[cfg.run_id, "mode_R"], str)
    assert list(df.loc[cfg.run_id, "sweeps"]) == ["mine"]
    other = next(r for r in df.index if r != cfg.run_id)
    assert list(df.loc[other, "sweeps"]) == ["train"]
    assert set(df["preset"]) == {"smoke"}
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", t) for t in df["finished_at"])
    csv = pd.read_csv(_collect_csv(store, tmp_path, capsys)).set_index("run_id")
    assert json.loads(csv.loc[cfg.run_id, "mode_R"]) == pytest.approx(list(df.loc[cfg.run_id, "mode_R"]))


def _collect_csv(store, tmp_path, capsys):
    code, _, _ = run_cli(capsys, "collect", "--store", store.root, "--out", tmp_path / "r.csv")
    assert code == 0
    return tmp_path / "r.csv"


def test_load_model_reproduces_the_stored_R(tmp_path):
    import depthscale
    from depthscale.data.measurements import eval_contexts, measure

    store = Store(tmp_path / "s")
    cfg = small(L=3)
    run_pack([cfg], store)
    assert (store.run_path(cfg.run_id) / "params.pt").stat().st_size < 100_000  # one small model
    model = depthscale.load_model(tmp_path / "s", cfg.run_id)
    assert model.M == 1 and model.depths == [3]
    R = measure(model, 0, eval_contexts(cfg, cfg.eval_contexts, cfg.eval_seed), cfg.task)["R"]
    assert R == pytest.approx(store.load_metrics(cfg.run_id)["R"], rel=1e-6)
    with pytest.raises(StoreError, match="not finished"):
        depthscale.load_model(store, "0" * 16)


def test_without_a_terminal_each_finished_run_and_each_minute_print_a_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(live, "HEARTBEAT_SECONDS", 0.0)  # "a minute" passes at every step
    cfgs = [small(L=1), small(L=2)]
    capsys.readouterr()
    train_pack(cfgs, store=Store(tmp_path / "s"))
    err = capsys.readouterr().err.splitlines()
    done = [ln for ln in err if " done: " in ln]
    assert len(done) == 2 and all(ln.startswith("depthscale: run ") and "R=" in ln for ln in done)
    beats = [ln for ln in err if re.search(r"step \d+/40 \(\d+%\), \d running", ln)]
    assert len(beats) >= 30 and "steps/s" in beats[-1] and "R=" in beats[-1]


def test_tensorboard_logger_writes_event_files_per_run(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    store = tmp_path / "s"
    code, text, _ = run_cli(capsys, "train", "--preset", "smoke", "--max_steps", 20, "--eval_every", 10,
                            "--eval_contexts", 128, "--batch", 16, "--store", store, "--log", "tensorboard", "--json")
    assert code == 0
    rid = json.loads(text)["run_id"]
    acc = EventAccumulator(str(store / "runs" / rid / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/R")] == [10, 20]
    assert [e.value for e in acc.Scalars("train/R")] == pytest.approx(Store(store).load_curves(rid)["R"], rel=1e-6)


def test_the_trainer_triggers_named_hooks_that_the_logs_attach_to(tmp_path, monkeypatch):
    """Trainer.run triggers on_eval (each run's curve row), on_checkpoint (the pack's checkpoint is
    due) and on_finish (a run's result is written). The trainer's own hooks run first: keep-best
    has seen the row, the store holds the checkpoint, TensorBoard (a stand-in SummaryWriter here)
    has logged each row as scalars and closed the run's writer; then the hooks a caller added."""
    from depthscale.base.errors import InputError
    from depthscale.kinds.lookup import build_pack
    from depthscale.train.trainer import HOOKS, Trainer

    events = []

    class Writer:
        def __init__(self, path, purge_step=None):
            self.rid = Path(path).parent.name

        def add_scalar(self, key, value, step):
            events.append(("scalar", self.rid, key, step))

        def close(self):
            events.append(("close", self.rid))

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", argparse.Namespace(SummaryWriter=Writer))
    cfgs = [small(L=1, max_steps=6, eval_every=2, checkpoint_every=4), small(L=2, max_steps=6, eval_every=2,
                                                                          checkpoint_every=4)]
    store = Store(tmp_path / "s")
    trainer = Trainer(cfgs, build_pack(cfgs), "cpu", store, ("tensorboard",))
    seen = []
    trainer.add_hook("on_eval", lambda i, row: seen.append(
        ("eval", i, row["step"], trainer.states[i].best_loss <= row["R"],
         ("scalar", cfgs[i].run_id, "train/R", row["step"]) in events)))
    trainer.add_hook("on_checkpoint", lambda step: seen.append(
        ("checkpoint", step, [checkpoint.read(store, c.run_id)["step"] for c in cfgs])))
    trainer.add_hook("on_finish", lambda i, met, curves: seen.append(
        ("finish", i, met["steps"], curves["step"], ("close", cfgs[i].run_id) in events)))
    trainer.run(progress=False)
    assert seen == [("eval", 0, 2, True, True), ("eval", 1, 2, True, True),
                    ("eval", 0, 4, True, True), ("eval", 1, 4, True, True), ("checkpoint", 4, [4, 4]),
                    ("eval", 0, 6, True, True), ("eval", 1, 6, True, True), ("checkpoint", 6, [6, 6]),
                    ("finish", 0, 6, [2, 4, 6], True), ("finish", 1, 6, [2, 4, 6], True)]
    assert HOOKS == ("on_eval", "on_checkpoint", "on_finish")
    with pytest.raises(InputError, match="hook must be one of"):
        trainer.add_hook("on_step", print)


def test_tensorboard_missing_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if not installed
    code, out, err = run_cli(capsys, "train", "--preset", "smoke", "--store", tmp_path / "s", "--log", "tensorboard")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "pip install 'depthscale[tensorboard]'" in err and not (tmp_path / "s").exists()


def test_sweep_runs_every_experiment_of_a_comma_list(tmp_path, capsys, monkeypatch):
    from depthscale.experiments import registry

    full = registry.all_configs  # the experiments' own runs, shortened to keep the test in seconds
    monkeypatch.setattr(registry, "all_configs", lambda ids, preset, seeds=None, **kw: full(
        ids, preset, seeds, **{**kw, "max_steps": 10, "eval_every": 5, "eval_contexts": 64, "monitor_contexts": 32}))
    store = tmp_path / "s"
    code, out, err = run_cli(capsys, "sweep", "--experiment", "fig9, fig10", "--preset", "smoke", "--store", store,
                             "--json")
    counts = json.loads(out)
    assert code == 0 and counts["ran"] == 6 and counts["failed"] == 0, err
    assert err.splitlines()[0] == "depthscale: preset smoke"
    assert sum(" done: " in ln for ln in err.splitlines()) == 6  # a plain line per finished run
    code, out, _ = run_cli(capsys, "status", "--store", store, "--json")
    (rec,) = json.loads(out)
    assert rec["sweep"] == "fig9_fig10-smoke" and rec["done"] == 6
    df = collect.collect(Store(store), sweep="fig9_fig10-smoke")
    assert set(df["model"]) == {"single_stream", "layer_values"}
    assert all(s == ["fig9_fig10-smoke"] for s in df["sweeps"])


def test_store_paths_resolve_and_runs_does_not_nest(tmp_path, capsys):
    s = Store(tmp_path / "s")
    assert Store(tmp_path / "s" / "runs").root == s.root  # the runs/ directory names its store
    assert Store(tmp_path / "s" / "runs", readonly=True).root == s.root
    with pytest.raises(StoreError, match="would nest as runs/runs/"):
        Store(tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
    code, _, err = run_cli(capsys, "status", "--store", tmp_path, "--json")
    assert code == 2 and "stores inside it: s" in err
    # a train run shows in status, through the store's runs/ path as well
    code, out, err = run_cli(capsys, "train", "--preset", "smoke", "--max_steps", 20, "--eval_contexts", 128,
                             "--batch", 16, "--store", tmp_path / "s" / "runs", "--json")
    assert code == 0 and json.loads(out)["R"] > 0 and "depthscale: preset smoke" in err
    code, out, _ = run_cli(capsys, "status", "--store", tmp_path / "s", "--json")
    (rec,) = json.loads(out)
    assert rec["sweep"] == "train" and rec["done"] == 1
    assert not (tmp_path / "s" / "runs" / "runs").exists()


def _parser_actions(parser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parser_actions(sub, path + (name,))
        else:
            yield path, parser, action


def test_every_flag_shows_its_default_and_choices():
    checked = 0
    for path, parser, action in _parser_actions(cli.build_parser()):
        if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction)) \
                or action.required:
            continue
        fmt = parser._get_formatter()
        text = fmt._get_help_string(action) % {"default": action.default}
        assert "default:" in text, (path, action.option_strings, text)
        if action.choices:
            assert "{" + ",".join(map(str, action.choices)) + "}" in fmt._format_action_invocation(action)
        checked += 1
    assert checked > 60
    train_help = cli.build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    assert "{context_updates,layer_values,linear,nonlinear,single_stream,transformer}" in train_help  # the registry's kinds
    assert "(default: cpu)" in train_help and "--qk_std" in train_help and "--init_qk" not in train_help


def test_theory_subcommands_take_only_their_own_flags(capsys):
    code, out, _ = run_cli(capsys, "theory", "exponents", "--a", 2, "--b", 1, "--json")
    assert code == 0 and json.loads(out) == {"zeta": 1.0, "two_zeta": 2.0}
    code, _, err = run_cli(capsys, "theory", "exponents", "--a", 2, "--b", 1, "--samples", 10)
    assert code == 2 and "unrecognized arguments: --samples 10" in err
    code, _, err = run_cli(capsys, "theory", "floor", "--a", 0, "--b", 0, "--finite-P")
    assert code == 2 and "unrecognized arguments: --finite-P" in err


def test_report_and_reproduce_print_json_or_text_never_a_dict(tmp_path, capsys, monkeypatch):
    import depthscale.report.reproduce as report_mod

    res = {"report_md": "o/report.md", "report_html": "o/report.html", "claims_json": "o/claims.json",
           "presets": ["smoke"], "passed": 3, "failed": 2, "errors": [], "diverged": [], "broken": []}
    monkeypatch.setattr(report_mod, "report", lambda *a, **k: dict(res))
    monkeypatch.setattr(report_mod, "reproduce", lambda *a, **k: {"ids": ["fig6"], "preset": "smoke", **res})
    Store(tmp_path / "s")
    code, out, err = run_cli(capsys, "report", "--store", tmp_path / "s", "--out", tmp_path / "o", "--json")
    assert code == 0 and json.loads(out) == res and err == "depthscale: preset smoke\n"
    code, out, _ = run_cli(capsys, "report", "--store", tmp_path / "s", "--out", tmp_path / "o")
    assert code == 0 and "{" not in out and "3 PASS, 2 FAIL" in out
    code, out, _ = run_cli(capsys, "reproduce", "fig6", "--preset", "smoke", "--no-run", "--store", tmp_path / "s",
                           "--out", tmp_path / "o", "--json")
    assert code == 3 and json.loads(out)["ids"] == ["fig6"]  # its runs are not in the store: exit 3 (issue 51)


def test_reproduce_on_an_incomplete_store_exits_3_saying_how_many_runs_are_missing(tmp_path, capsys, monkeypatch):
    # reproduce --no-run writes its report from a store where runs of the experiments asked for are not
    # finished, and exits 3 with one line (issue 51: a reproduction with runs missing is not a finished
    # one); the claims of experiments not asked for do not count
    import depthscale.experiments.registry as registry
    import depthscale.report.reproduce as report_mod
    from depthscale.config.run import make_config

    res = {"report_md": "o/report.md", "report_html": "o/report.html", "claims_json": "o/claims.json",
           "presets": ["smoke"], "passed": 1, "failed": 0, "inconclusive": 16, "errors": []}
    monkeypatch.setattr(report_mod, "reproduce", lambda *a, **k: {"ids": ["fig6"], "preset": "smoke", **res})
    asked = []
    monkeypatch.setattr(registry, "all_configs", lambda ids, preset: asked.append((ids, preset))
                        or [make_config("smoke", L=1), make_config("smoke", L=2)])
    Store(tmp_path / "s")
    argv = ("reproduce", "fig6", "--preset", "smoke", "--no-run", "--store", tmp_path / "s", "--out", tmp_path / "o")
    code, out, err = run_cli(capsys, *argv)
    assert code == 3 and "1 PASS, 0 FAIL, 16 INCONCLUSIVE" in out and asked == [(["fig6"], "smoke")], (code, out, err)
    assert (f"depthscale: 2 of 2 runs of fig6 at preset smoke are not finished in {tmp_path / 's'} "
            "(the same command without --no-run finishes them)") in err, err
    monkeypatch.setattr(Store, "is_done", lambda self, rid: rid == make_config("smoke", L=1).run_id)
    code, _, err = run_cli(capsys, *argv)
    assert code == 3 and "1 of 2 runs of fig6" in err, err
    monkeypatch.setattr(Store, "is_done", lambda self, rid: True)
    code, _, err = run_cli(capsys, *argv)
    assert code == 0 and "not finished" not in err, err


def _documented_columns() -> set[str]:
    text = (DOCS / "columns.md").read_text()
    return set(re.findall(r"^\| `([A-Za-z0-9_]+)` \|", text, flags=re.M))


def test_column_dictionary_covers_every_column(tmp_path):
    documented = _documented_columns()
    assert set(FIELD_NAMES) <= documented
    store = Store(tmp_path / "s")
    run_pack([small(L=1), small(L=2)], store)
    run_pack([small(L=1, task="easy", max_steps=20)], store)
    run_pack([small(L=1, model="context_updates", max_steps=10, batch=8)], store)
    cols = set(collect.collect(store).columns) | set(collect.collect_curves(store).columns) | set(collect.collect_curves(store)["metric"])
    assert cols - documented == set(), sorted(cols - documented)
