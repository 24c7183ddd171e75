"""The run store: layout, atomic writes, results, checkpoints, status, collect (leases: test_lease.py)."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from depthscale.base.atomic import write_json_atomic
from depthscale.base.errors import StoreError
from depthscale.config.run import make_config, run_id
from depthscale.store.collect import BrokenRunWarning
from depthscale.store import collect, manifests
from depthscale.store.store import Store

import fake_worker
from test_lease import foreign_lease


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "store")


def _finish(store: Store, cfg, **metrics):
    rid = run_id(cfg)
    store.write_config(cfg)
    base = {"R": fake_worker.expected_R(cfg), "R_L": fake_worker.expected_R(cfg), "stopped_because": "converged",
            "per_layer": [1.0, 2.0]}
    store.finish(rid, {**base, **metrics}, {"step": [0, 10], "monitor_loss": [2.0, 1.0]})
    return rid


def _snapshot(root: Path) -> dict:
    """Every file under root with its bytes and mtime."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


# --- creation and writability ---

def test_creates_layout(tmp_path):
    s = Store(tmp_path / "a" / "b")
    assert (s.root / "runs").is_dir() and (s.root / "sweeps").is_dir()
    assert list(s.root.rglob(".probe*")) == []


def test_unwritable_store_under_a_regular_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match=r"^store .*file/store is not writable: Not a directory$"):
        Store(blocker / "store")


def test_unwritable_store_by_permissions(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("running as root: chmod 0o500 does not block root's writes "
                    "(the regular-file test covers the error path)")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="is not writable: Permission denied"):
            Store(locked / "store")
        with pytest.raises(StoreError, match="is not writable"):
            Store(locked)
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("readonly", [False, True])
def test_a_path_the_system_cannot_open_is_a_store_error_from_python_too(tmp_path, readonly):
    """The CLI refuses these before opening a store (userpaths); a script calling Store() gets a
    StoreError in one line too, never the OSError/RuntimeError of pathlib (NAME_MAX, PATH_MAX, ~user)."""
    long_name = tmp_path / ("a" * 300)
    deep = tmp_path.joinpath(*["b" * 200] * 30)
    for path, why in [(long_name, "File name too long"), (deep, "File name too long"),
                      ("~depthscale_no_such_user/s", "names no home directory")]:
        with pytest.raises(StoreError, match=why) as info:
            Store(path, readonly=readonly)
        assert len(str(info.value).splitlines()) == 1 and len(str(info.value)) < 200
    assert list(tmp_path.iterdir()) == []


def test_readonly_store_needs_existing_root_and_refuses_writes(tmp_path, store):
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "nowhere", readonly=True)
    ro = Store(store.root, readonly=True)
    assert collect.collect(ro).empty
    with pytest.raises(StoreError, match="read-only"):
        ro.leases.claim("abc", "me")


# --- atomic writes ---

def test_reader_never_sees_partial_json(tmp_path):
    path = tmp_path / "metrics.json"
    big = [{"x": list(range(2000)), "i": i} for i in range(4)]
    write_json_atomic(path, {"v": 0, "rows": big})
    stop, seen, errors = threading.Event(), set(), []

    def read():
        while not stop.is_set():
            try:
                seen.add(json.loads(path.read_text())["v"])
            except Exception as e:  # a partial file would land here
                errors.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    for v in range(1, 30):
        write_json_atomic(path, {"v": v, "rows": big})
    stop.set()
    reader.join()
    assert errors == []
    assert json.loads(path.read_text())["v"] == 29 and len(seen) > 1
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no temp files left


def test_failed_write_keeps_old_content_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "x.json"
    write_json_atomic(path, {"v": 1})

    def broken_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("depthscale.base.atomic.os.fsync", broken_fsync)
    with pytest.raises(OSError):
        write_json_atomic(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_json_handles_numpy_torch_and_nan(tmp_path):
    import numpy as np
    import torch

    path = tmp_path / "m.json"
    write_json_atomic(path, {"a": np.float32(1.5), "b": np.arange(3), "c": torch.tensor([1.0, 2.0]),
                             "d": float("nan"), "e": np.int64(7)})
    back = json.loads(path.read_text())
    assert back["a"] == 1.5 and back["b"] == [0, 1, 2] and back["c"] == [1.0, 2.0] and back["e"] == 7
    assert math.isnan(back["d"])


# --- run lifecycle ---

def test_finish_lifecycle(store):
    cfg = make_config("smoke", L=2)
    rid = run_id(cfg)
    store.write_config(cfg, device="cpu")
    doc = json.loads((store.run_dir(rid) / "config.json").read_text())
    assert doc["run_id"] == rid and doc["device"] == "cpu"
    assert set(doc["versions"]) >= {"depthscale", "torch", "python", "platform"}
    assert store.load_config(rid) == cfg
    assert store.load_checkpoint(rid) is None
    store.save_checkpoint(rid, b"step 5")  # opaque bytes: their format is train/checkpoint.py's
    assert store.load_checkpoint(rid) == b"step 5"
    assert not store.is_done(rid) and store.run_state(rid) == "pending"
    with pytest.raises(StoreError, match="is not finished"):
        store.load_metrics(rid)

    assert store.finish(rid, {"R": 1.5, "stopped_because": "converged"}, {"step": [0, 1]})
    assert store.is_done(rid) and store.run_state(rid) == "done"
    assert not (store.run_dir(rid) / "checkpoint.pt").exists()
    assert store.load_metrics(rid) == {"R": 1.5, "stopped_because": "converged"}
    assert store.load_curves(rid) == {"step": [0, 1]}
    assert not [p for p in store.run_dir(rid).iterdir() if p.name.startswith(".")]

    # a finished run's files are never rewritten
    before = _snapshot(store.run_dir(rid))
    with pytest.warns(UserWarning, match="already done"):
        assert not store.finish(rid, {"R_L": 9.0}, {})
    store.fail(rid, "late failure")
    store.write_config(cfg, device="cuda")
    with pytest.raises(StoreError, match="never rewritten"):
        store.save_checkpoint(rid, b"step 6")
    assert not store.leases.claim(rid, "me")
    assert _snapshot(store.run_dir(rid)) == before


def test_write_config_is_idempotent(store):
    cfg = make_config("smoke")
    store.write_config(cfg)
    path = store.run_dir(run_id(cfg)) / "config.json"
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    time.sleep(0.01)
    store.write_config(cfg)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_fail_then_retry_finishes(store):
    cfg = make_config("smoke", seed=3)
    rid = run_id(cfg)
    store.fail(rid, "RuntimeError: boom\nTraceback ...")
    assert store.is_failed(rid) and store.run_state(rid) == "failed"
    assert store.failure(rid).startswith("RuntimeError: boom")
    _finish(store, cfg)
    assert store.is_done(rid) and not store.is_failed(rid) and store.failure(rid) is None


def test_nan_run_is_finished_as_diverged_in_strict_json(store):
    cfg = make_config("smoke", lr=2.0)
    rid = _finish(store, cfg, R_L=float("nan"), stopped_because="nan", steps=7,
                  per_layer=[float("inf"), 1.0])
    assert store.is_done(rid) and not store.is_failed(rid)  # finished: never run again
    assert store.run_state(rid) == "diverged"
    assert store.divergence(rid) == {"step": 7, "reason": "the training loss became non-finite"}
    text = (store.run_dir(rid) / "metrics.json").read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON: null
    json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in metrics.json"))
    assert store.load_metrics(rid)["R_L"] is None and store.load_metrics(rid)["per_layer"] == [None, 1.0]
    row = collect.collect(store).iloc[0]
    assert row["stopped_because"] == "nan" and math.isnan(row["R_L"])
    assert row["state"] == "diverged" and row["diverged_step"] == 7


def test_exploded_run_is_diverged_at_the_first_bad_logged_step(store):
    cfg = make_config("smoke", lr=1e3)
    rid = run_id(cfg)
    store.write_config(cfg)
    store.finish(rid, {"R": 1.3e18, "var_ystar": 5.0, "steps": 60, "stopped_because": "max_steps"},
                 {"step": [20, 40, 60], "loss": [4.0, 2e9, 1.3e18]})
    assert store.run_state(rid) == "diverged" and store.is_done(rid)
    div = store.divergence(rid)
    assert div["step"] == 40 and "1.3e+18" in div["reason"] and "Var(y*)" in div["reason"]
    ok = make_config("smoke", lr=1e-3)
    store.write_config(ok)
    store.finish(ok.run_id, {"R": 4.9, "var_ystar": 5.0, "steps": 60, "stopped_because": "max_steps"}, {})
    assert store.run_state(ok.run_id) == "done" and store.divergence(ok.run_id) is None
    df = collect.collect(store).set_index("run_id")
    assert df.loc[rid, "state"] == "diverged" and df.loc[ok.run_id, "state"] == "done"
    assert df.loc[rid, "diverged_step"] == 40 and pd.isna(df.loc[ok.run_id, "diverged_reason"])


def test_bad_run_id_is_refused(store):
    with pytest.raises(StoreError, match="bad run id"):
        store.run_dir("../escape")


# --- manifests and status ---

def test_status_counts_per_sweep(tmp_path):
    store = Store(tmp_path / "s", lease_timeout=5.0)
    cfgs = fake_worker.configs(8)
    rids = [run_id(c) for c in cfgs]
    manifests.write(store, "all", rids)
    manifests.write(store, "pair", rids[:2])
    _finish(store, cfgs[0])
    _finish(store, cfgs[1])
    assert store.leases.claim(rids[2], "me")
    foreign_lease(store, rids[3], age=60.0)  # stale: counts as pending
    store.fail(rids[4], "boom")
    _finish(store, cfgs[6], stopped_because="nan", steps=3)
    _finish(store, cfgs[7])
    (store.run_dir(rids[7]) / "metrics.json").write_text("")
    st = collect.status(store)
    assert list(st.index) == ["all", "pair"]
    assert st.loc["all"].to_dict() == {"total": 8, "done": 2, "diverged": 1, "broken": 1, "unloaded": 0, "running": 1,
                                       "failed": 1, "pending": 2}
    assert st.loc["pair"].to_dict() == {"total": 2, "done": 2, "diverged": 0, "broken": 0, "unloaded": 0, "running": 0,
                                        "failed": 0, "pending": 0}
    assert collect.problems(store) == [
        {"run_id": r, "state": s, "step": st_, "reason": why} for r, s, st_, why in sorted(
            [(rids[6], "diverged", 3, "the training loss became non-finite"),
             (rids[7], "broken", None, "metrics.json is empty")])]
    assert store.run_info(rids[4]) == {"run_id": rids[4], "state": "failed", "step": None, "reason": "boom"}
    store.leases.release(rids[2])
    with pytest.raises(StoreError, match="no sweep 'nope'"):
        collect.status(store, "nope")
    with pytest.raises(StoreError, match="bad sweep name"):
        manifests.write(store, "../x", rids)


# --- collect ---

def _filled_store(tmp_path) -> tuple[Store, list]:
    store = Store(tmp_path / "s")
    cfgs = fake_worker.configs(5)
    for c in cfgs[:4]:
        _finish(store, c, L=c.L * 10)  # a metric that collides with a config field
    store.write_config(cfgs[4])  # unfinished: not collected
    return store, cfgs


def test_collect_one_tidy_row_per_finished_run(tmp_path):
    store, cfgs = _filled_store(tmp_path)
    before = _snapshot(store.root)
    df = collect.collect(store)
    assert _snapshot(store.root) == before  # collect never modifies the store
    assert len(df) == 4 and df["run_id"].is_unique and list(df["run_id"]) == sorted(df["run_id"])
    assert list(df.columns[:3]) == ["run_id", "d", "P"]
    for _, row in df.iterrows():
        cfg = store.load_config(row["run_id"])
        assert row["L"] == cfg.L and row["metric_L"] == 10 * cfg.L
        assert row["R_L"] == fake_worker.expected_R(cfg)
        assert row["per_layer"] == [1.0, 2.0]  # a native list (JSON text only with arrays="json")
        assert row["sweeps"] == [] and row["finished_at"].endswith("+00:00")
    assert json.loads(collect.collect(store, arrays="json")["per_layer"][0]) == [1.0, 2.0]
    assert "per_layer" not in collect.collect(store, arrays="drop").columns
    manifests.write(store, "two", list(df["run_id"][:2]))
    assert list(collect.collect(store, sweep="two")["run_id"]) == list(df["run_id"][:2])


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_collect_to_round_trips(tmp_path, suffix):
    store, _ = _filled_store(tmp_path)
    out = tmp_path / "out" / f"results{suffix}"
    df = collect.collect_to(store, out)
    back = pd.read_parquet(out) if suffix == ".parquet" else pd.read_csv(out)
    if suffix == ".parquet":  # list-valued metrics are native list columns (read back as arrays)
        for col in ("per_layer", "sweeps"):
            assert all(isinstance(v, list) for v in df[col])
            back[col] = [list(v) for v in back[col]]
    else:  # a CSV cell holds them as JSON text
        assert json.loads(back["per_layer"][0]) == [1.0, 2.0]
    pd.testing.assert_frame_equal(back, df, check_dtype=(suffix == ".parquet"))
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


def test_collect_to_refuses_other_suffixes(tmp_path, store):
    with pytest.raises(StoreError, match=r"use a \.parquet or \.csv suffix"):
        collect.collect_to(store, tmp_path / "results.xlsx")


@pytest.mark.parametrize("damage", ["metrics_garbage", "metrics_missing", "config_garbage",
                                    "metrics_not_object", "metrics_no_reason", "curves_garbage",
                                    "done_garbage", "config_empty"])
def test_broken_run_is_skipped_with_one_warning_naming_it(tmp_path, damage):
    store, cfgs = _filled_store(tmp_path)
    rid = run_id(cfgs[1])
    d = store.run_dir(rid)
    name, _, how = damage.partition("_")
    path = d / ("DONE" if name == "done" else f"{name}.json")
    if how == "missing":
        path.unlink()
    else:
        path.write_text({"garbage": "\x00\x00{", "empty": "", "not_object": "[1, 2]",
                         "no_reason": '{"R_L": 1.0}'}[how])
    before = _snapshot(store.root)
    with pytest.warns(BrokenRunWarning) as caught:
        df = collect.collect(store)
    assert len(caught) == 1 and str(caught[0].message).startswith(f"skipping broken run {d}: {path.name} ")
    assert "\n" not in str(caught[0].message)
    assert len(df) == 3 and rid not in set(df["run_id"])  # the others are still collected
    assert store.run_state(rid) == "broken" and not store.is_done(rid)
    assert store.broken_reason(rid).startswith(path.name)
    with pytest.raises(StoreError, match="is broken"):
        store.load_metrics(rid)
    assert _snapshot(store.root) == before  # reading never repairs or deletes anything
    # the run is claimable again: its holder clears the broken result (DONE first), then reruns it
    assert store.leases.claim(rid, "me")
    assert not (d / "DONE").exists() and store.run_state(rid) == "running"
    _finish(store, cfgs[1])
    assert store.run_state(rid) == "done" and rid in set(collect.collect(store)["run_id"])


def test_finish_replaces_a_broken_result_without_a_lease(store):
    cfg = make_config("smoke")
    rid = _finish(store, cfg)
    (store.run_dir(rid) / "curves.json").write_text("{trunc")
    assert not store.is_done(rid)
    assert store.finish(rid, {"R": 2.0, "stopped_because": "converged"}, {"step": [1]})
    assert store.is_done(rid) and store.load_metrics(rid)["R"] == 2.0


def test_unreadable_failed_file_is_reported_not_raised(store):
    cfg = make_config("smoke")
    rid = run_id(cfg)
    (store.run_dir(rid) / "FAILED").write_bytes(b"\xff\xfe boom \x00")
    assert store.run_state(rid) == "failed" and "boom" in store.failure(rid)


@pytest.mark.parametrize("t", ["1e300", "NaN", "-Infinity"])
def test_collect_reads_a_done_time_out_of_range_as_unknown(tmp_path, t):
    store, cfgs = _filled_store(tmp_path)
    rid = run_id(cfgs[0])
    done = store.run_dir(rid) / "DONE"
    doc = json.loads(done.read_text())
    done.write_text(json.dumps(doc).replace(json.dumps(doc["time"]), t, 1))  # a hand edit of the time only
    df = collect.collect(store)
    assert len(df) == 4
    row = df[df["run_id"] == rid].iloc[0]
    assert isinstance(row["finished_at"], float) and math.isnan(row["finished_at"])


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_collect_names_and_skips_a_run_whose_metric_no_table_holds(tmp_path, suffix):
    store, cfgs = _filled_store(tmp_path)
    huge = _finish(store, cfgs[4], steps=10 ** 30)  # a foreign tool's run: beyond a 64-bit integer
    with pytest.warns(BrokenRunWarning) as caught:
        df = collect.collect_to(store, tmp_path / f"t{suffix}")
    assert [str(w.message) for w in caught] == [
        f"skipping run {store.run_dir(huge)}: metric 'steps' = {10 ** 30} does not fit a 64-bit integer"]
    assert len(df) == 4 and huge not in set(df["run_id"])


def test_collect_names_and_skips_a_run_whose_metric_kind_differs_from_the_others(tmp_path):
    store, cfgs = _filled_store(tmp_path)
    odd = _finish(store, cfgs[4], per_layer="not a list")  # the other four runs hold a list
    with pytest.warns(BrokenRunWarning) as caught:
        df = collect.collect_to(store, tmp_path / "t.parquet")
    assert [str(w.message) for w in caught] == [f"skipping run {odd}: metric 'per_layer' is text where the other runs' is list"]
    assert len(df) == 4 and odd not in set(df["run_id"])


def test_a_manifest_holding_an_object_for_a_run_id_is_corrupted_not_a_traceback(tmp_path):
    store, cfgs = _filled_store(tmp_path)
    manifests.write(store, "grid", [run_id(c) for c in cfgs[:2]])
    path = store.sweeps_root / "grid.json"
    doc = json.loads(path.read_text())
    doc["run_ids"].append({"an": "object"})
    path.write_text(json.dumps(doc))
    with pytest.raises(StoreError, match="corrupted sweep manifest"):
        manifests.load(store, "grid")
    with pytest.warns(BrokenRunWarning, match="skipping sweep 'grid'"):
        st = collect.status(store)
    assert "grid" not in st.index
    assert len(collect.collect(store)) == 4  # the runs are still collected; the manifest is named, not fatal
