"""A finished run of a plug-in kind read without its plug-in (DEPTHSCALE_KINDS unset) is named as
such by `status` and `collect` ("kind X not loaded: set DEPTHSCALE_KINDS ..."), in a state of its
own, never as broken (issue 49 item 1); a config naming no kind at all is still broken."""

from __future__ import annotations

import json

import pytest

import fuzz_fourth_cases as cases
from depthscale.cli import main as cli
from depthscale.store import collect
from depthscale.store.collect import BrokenRunWarning, UnloadedKindWarning
from depthscale.store.store import Store

NOT_LOADED = "kind 'cosine_heads' not loaded: set DEPTHSCALE_KINDS to the plug-in file that registers it"


def _set_model(root, rid, model) -> None:
    path = root / "runs" / rid / "config.json"
    doc = json.loads(path.read_text())
    doc["config"]["model"] = model
    path.write_text(json.dumps(doc))


def test_a_run_of_a_kind_not_loaded_is_unloaded_and_named_never_broken(tmp_path, capsys):
    root, (plugin, plain) = cases.finished_store(tmp_path / "s")
    _set_model(root, plugin, "cosine_heads")
    store = Store(root, readonly=True)
    assert store.run_state(plugin) == "unloaded" and store.run_state(plain) == "done"
    assert store.run_info(plugin)["reason"] == NOT_LOADED
    counts = collect.status(store).loc["train"]
    assert counts["unloaded"] == 1 and counts["broken"] == 0 and counts["done"] == 1
    with pytest.warns(UnloadedKindWarning, match=NOT_LOADED):
        assert list(collect.collect(store)["run_id"]) == [plain]

    assert cli.main(["status", "--store", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"unloaded {plugin}: {NOT_LOADED}" in lines and not any(ln.startswith("broken") for ln in lines)
    assert cli.main(["status", "--store", str(root), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)[0]
    assert [r["run_id"] for r in rec["unloaded_runs"]] == [plugin] and rec["broken_runs"] == []


@pytest.mark.parametrize("model", [3, "", "no such kind!"])
def test_a_config_that_names_no_kind_is_still_broken(tmp_path, model):
    root, (rid, _) = cases.finished_store(tmp_path / "s")
    _set_model(root, rid, model)
    store = Store(root, readonly=True)
    assert store.run_state(rid) == "broken" and "not loaded" not in store.broken_reason(rid)
    with pytest.warns(BrokenRunWarning, match="skipping broken run"):
        collect.collect(store)
