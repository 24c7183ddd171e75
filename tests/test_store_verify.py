"""Issue 28, "a store that believes what it reads": a run directory is verified when it is read.

A real smoke sweep (two runs, 4 steps, trained once per module) is copied per test and tampered
with as the issue did: an edited config.json (L 4 -> 8, its run_id kept or removed), a config
whose L is "four", metrics.json with R = "abc" or without R, params.pt garbled or truncated, a
curves row whose step is "x", metrics.json (and other files) replaced by a FIFO, and a lease,
curves.jsonl or FAILED that is a directory. Each is named as broken by `status` and `collect`,
never a traceback or a hang, and `depthscale sweep` runs it again until it is done."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

import forked_cli

from depthscale.base.errors import StoreError
from depthscale.cli import main as cli
from depthscale.runs.sweeps import expand_grid
from depthscale.store import collect, manifests
from depthscale.store.store import Store, load_model

TINY = {"max_steps": 4, "eval_every": 2, "checkpoint_every": 2, "eval_contexts": 64, "monitor_contexts": 64,
        "batch": 16}
GRID = dict(TINY, L=[2, 4])
MORE = dict(TINY, L=[1, 2, 3, 4, 5])  # the same runs and three more, trained in the same pack
SWEEP, SWEEP_MORE = "grid-smoke", "more-smoke"
PROGRESS = re.compile(r"^depthscale: (preset |run [0-9a-f]{16} done: |\S+ \S+ pack of \d+: step )")


def run_cli(capsys, *argv) -> tuple[int, str, list[str]]:
    """cli.main in this process: (exit code, stdout, stderr lines but the progress lines)."""
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, [ln for ln in out.err.splitlines() if not PROGRESS.match(ln)]


def ids_of(grid: dict) -> dict[int, str]:
    return {c.L: c.run_id for c in expand_grid(grid, preset="smoke")}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("verify")
    (root / "grid").mkdir()
    grid = root / "grid" / "grid.json"
    grid.write_text(json.dumps(GRID))
    more = root / "grid" / "more.json"
    more.write_text(json.dumps(MORE))
    store = root / "store"
    assert cli.main(["sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(store)]) == 0
    return {"root": store, "grid": grid, "more": more, "ids": ids_of(GRID)}


@pytest.fixture
def store(base, tmp_path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(base["root"], dst, symlinks=True)
    return dst


def status_of(capsys, root: Path) -> dict:
    """status --json of the sweep: counts and {run id: reason} of its broken runs."""
    code, out, err = run_cli(capsys, "status", "--store", root, "--json")
    assert code == 0 and err == [], err
    recs = {r["sweep"]: r for r in json.loads(out)}
    return recs


def broken_of(capsys, root: Path, sweep: str = SWEEP) -> dict[str, str]:
    rec = status_of(capsys, root)[sweep]
    return {b["run_id"]: b["reason"] for b in rec["broken_runs"]}


def sweep(capsys, root: Path, grid: Path) -> dict:
    code, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", root, "--json")
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])


def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _garble(path: Path, keep_mtime: bool = False) -> None:
    st = path.stat()
    blob = bytearray(path.read_bytes())
    for i in range(len(blob) // 3, len(blob) // 3 + 16):
        blob[i] ^= 0x5A
    path.write_bytes(bytes(blob))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


# (case, file, tamper, the broken reason's start)
TAMPERS = [
    ("config_L8_run_id_kept", "config.json", lambda p: edit_json(p, lambda d: d["config"].update(L=8)),
     "config.json does not hash to its run id {rid}: edited?"),
    ("config_L8_run_id_removed", "config.json",
     lambda p: edit_json(p, lambda d: (d["config"].update(L=8), d.pop("run_id"))),
     "config.json does not hash to its run id {rid}: edited?"),
    ("config_L_four", "config.json", lambda p: edit_json(p, lambda d: d["config"].update(L="four")),
     "config.json holds no valid config: L must be an integer, got 'four'"),
    ("metrics_R_abc", "metrics.json", lambda p: edit_json(p, lambda d: d.update(R="abc")),
     "metrics.json: R is not a number: 'abc'"),
    ("metrics_without_R", "metrics.json", lambda p: edit_json(p, lambda d: d.pop("R")),
     "metrics.json has no 'R'"),
    ("params_garbled", "params.pt", _garble,
     "params.pt does not match the sha256 recorded when the run finished: garbled?"),
    ("params_truncated", "params.pt", _truncate, "params.pt has "),
    ("curves_step_x", "curves.json", lambda p: edit_json(p, lambda d: d.update(step=["x"] * len(d["step"]))),
     "curves.json: a step is not an integer: 'x'"),
]


@pytest.mark.parametrize("case,name,tamper,reason", TAMPERS, ids=[t[0] for t in TAMPERS])
def test_tampered_finished_run_is_broken_named_and_retrained(base, store, capsys, case, name, tamper, reason):
    rid = base["ids"][4]
    d = store / "runs" / rid
    tamper(d / name)
    reason = reason.format(rid=rid)

    # status names it
    rec = status_of(capsys, store)[SWEEP]
    assert rec["done"] == 1 and rec["broken"] == 1 and rec["diverged"] == 0, rec
    assert [b["run_id"] for b in rec["broken_runs"]] == [rid]
    assert rec["broken_runs"][0]["reason"].startswith(reason), rec["broken_runs"]
    assert Store(store, readonly=True).run_state(rid) == "broken"  # not diverged, not done

    # collect skips it with one warning naming it, and never places it at L = 8
    code, out, err = run_cli(capsys, "collect", "--store", store, "--out", store.parent / "t.csv")
    assert code == 0 and out.startswith("wrote 1 runs"), (out, err)
    assert err == [f"depthscale: warning: skipping broken run {d}: {rec['broken_runs'][0]['reason']}"]
    code, out, err = run_cli(capsys, "collect", "--curves", "--store", store, "--out", store.parent / "c.csv")
    assert code == 0 and len(err) == 1 and rid in err[0], err
    if name == "params.pt":
        with pytest.raises(StoreError, match="params.pt"):
            load_model(store, rid)

    # the next sweep runs it again: done, with its own config (L = 4) and a loadable model
    counts = sweep(capsys, store, base["grid"])
    assert counts["ran"] == 1 and counts["skipped_done"] == 1 and counts["failed"] == 0, counts
    s = Store(store, readonly=True)
    assert s.run_state(rid) == "done" and s.load_config(rid).L == 4
    assert isinstance(s.load_metrics(rid)["R"], float)
    load_model(store, rid)
    code, out, err = run_cli(capsys, "collect", "--store", store, "--out", store.parent / "u.csv")
    assert code == 0 and out.startswith("wrote 2 runs") and err == []
    import pandas as pd

    assert sorted(pd.read_csv(store.parent / "u.csv")["L"]) == [2, 4]


def test_bad_config_type_makes_no_traceback_in_report(base, store, capsys, tmp_path):
    rid = base["ids"][4]
    edit_json(store / "runs" / rid / "config.json", lambda d: d["config"].update(L="four"))
    code, out, err = run_cli(capsys, "report", "--store", store, "--preset", "smoke", "--out", tmp_path / "rep")
    assert code == 0, err
    assert not any("Traceback" in e or "ValueError" in e for e in err), err
    assert any(e.startswith("depthscale: warning: skipping broken run") and rid in e for e in err), err
    assert f"broken: run {rid}: config.json holds no valid config" in (tmp_path / "rep" / "report.md").read_text()


def test_garbled_params_with_its_mtime_kept_is_caught_when_loaded(base, store):
    """Loading always checks params.pt's sha256 (status does too once the file's inode, mtime or
    ctime is not the one DONE recorded: tests/test_manifest.py)."""
    rid = base["ids"][2]
    _garble(store / "runs" / rid / "params.pt", keep_mtime=True)
    with pytest.raises(StoreError, match=r"params.pt does not match the sha256 .*: garbled\?"):
        load_model(store, rid)


def test_run_finished_before_checksums_loads_unverified(base, store):
    rid = base["ids"][2]
    # a DONE as versions before checksums wrote it: no checksum, no manifest (files), no run_id
    edit_json(store / "runs" / rid / "DONE",
              lambda d: [d.pop(k) for k in ("params_sha256", "params_bytes", "files", "run_id")])
    s = Store(store, readonly=True)
    assert s.run_state(rid) == "done"
    assert load_model(store, rid) is not None
    _truncate(store / "runs" / rid / "params.pt")
    with pytest.raises(StoreError, match="params.pt cannot be read"):
        load_model(store, rid)


# --- special files: never a hang ---

def _cli(store: Path, *argv, timeout: float = 60) -> subprocess.CompletedProcess:
    return forked_cli.run(argv, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=store.parent)


def test_metrics_fifo_never_hangs_status_collect_or_sweep(base, store):
    rid = base["ids"][4]
    metrics = store / "runs" / rid / "metrics.json"
    metrics.unlink()
    os.mkfifo(metrics)
    st = _cli(store, "status", "--store", store)
    assert st.returncode == 0 and f"broken {rid}: metrics.json cannot be read: it is a FIFO, not a file" in st.stdout, st
    col = _cli(store, "collect", "--store", store, "--out", store.parent / "t.csv")
    assert col.returncode == 0 and "wrote 1 runs" in col.stdout, col
    assert f"skipping broken run {store / 'runs' / rid}: metrics.json cannot be read: it is a FIFO" in col.stderr
    sw = _cli(store, "sweep", "--grid", base["grid"], "--preset", "smoke", "--store", store)
    assert sw.returncode == 0 and "ran=1" in sw.stdout, sw
    assert metrics.is_file() and Store(store, readonly=True).run_state(rid) == "done"


def _returns(fn, timeout: float = 30):
    """fn() in a daemon thread: its result, or a failure if it blocks (a FIFO opened for reading)."""
    box = {}

    def call():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            box["error"] = e

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} blocked"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.filterwarnings("ignore::depthscale.store.collect.BrokenRunWarning")
@pytest.mark.parametrize("name", ["DONE", "config.json", "curves.json", "params.pt", "lease", "manifest"])
def test_any_fifo_is_read_without_blocking(base, store, capsys, name):
    rid, grid = base["ids"][4], base["grid"]
    if name == "lease":  # a run not finished yet, of a sweep that lists it
        rid, grid = ids_of(MORE)[1], base["more"]
        manifests.write(Store(store), SWEEP_MORE, ids_of(MORE).values())
        (store / "runs" / rid).mkdir()
    path = store / "sweeps" / f"{SWEEP}.json" if name == "manifest" else store / "runs" / rid / name
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    s = Store(store)
    _returns(lambda: collect.status(s))
    _returns(lambda: collect.collect(s))
    _returns(lambda: collect.collect_curves(s))
    _returns(lambda: s.run_info(rid))
    if name in ("DONE", "config.json", "curves.json", "params.pt"):
        assert s.run_state(rid) == "broken" and s.broken_reason(rid).startswith(name)
        assert "it is a FIFO, not a file" in s.broken_reason(rid)
    if name == "lease":  # a FIFO names no holder: the run is not running, and it is broken
        assert s.run_state(rid) == "broken" and s.broken_reason(rid) == "lease is a FIFO, not a file"
    counts = _returns(lambda: sweep(capsys, store, grid), timeout=120)
    assert counts["failed"] == 0 and counts["ran"] == {"manifest": 0, "lease": 3}.get(name, 1), counts
    assert Store(store, readonly=True).run_state(rid) == "done"
    assert path.is_file() if name != "lease" else not path.exists()  # a lease is released when done


# --- a directory where a run's file belongs ---

def test_lease_curves_and_failed_directories_are_broken_then_repaired(base, store, capsys):
    ids = ids_of(MORE)
    manifests.write(Store(store), SWEEP_MORE, ids.values())
    squat = {ids[1]: "lease", ids[3]: "curves.jsonl", ids[5]: "FAILED"}
    for rid, name in squat.items():
        (store / "runs" / rid / name).mkdir(parents=True)
        (store / "runs" / rid / name / "inside").write_text("x")
    assert broken_of(capsys, store, SWEEP_MORE) == {rid: f"{name} is a directory, not a file"
                                                      for rid, name in squat.items()}
    code, out, err = run_cli(capsys, "collect", "--curves", "--store", store, "--out", store.parent / "c.csv")
    assert code == 0 and len(err) == 3 and all(any(rid in e for e in err) for rid in squat), err

    counts = sweep(capsys, store, base["more"])  # the three train in one pack, none fails
    assert counts["ran"] == 3 and counts["skipped_done"] == 2 and counts["failed"] == 0, counts
    s = Store(store, readonly=True)
    assert all(s.run_state(rid) == "done" for rid in ids.values())
    for rid, name in squat.items():
        assert not (store / "runs" / rid / name).exists() or (store / "runs" / rid / name).is_file()
    assert status_of(capsys, store)[SWEEP_MORE]["done"] == 5


def test_failed_directory_does_not_fail_pack_mates(base, store, capsys):
    """FAILED directories in two runs of a pack of three (one made after an earlier attempt's
    claim): the sweep's claims remove them, and no run of the pack fails."""
    ids = ids_of(MORE)
    for L in (1, 3):
        (store / "runs" / ids[L]).mkdir()
    s = Store(store)
    assert s.leases.claim(ids[1], "test")  # the claim repairs it; here one appears after the claim
    (store / "runs" / ids[1] / "FAILED").mkdir()
    s.leases.release(ids[1])
    (store / "runs" / ids[3] / "FAILED").mkdir()
    counts = sweep(capsys, store, base["more"])
    assert counts["ran"] == 3 and counts["failed"] == 0, counts
    assert all(Store(store, readonly=True).run_state(rid) == "done" for rid in ids.values())


# --- curves.jsonl rows ---

def test_malformed_curves_row_is_named_not_a_valueerror(base, store, capsys):
    ids = ids_of(MORE)
    manifests.write(Store(store), SWEEP_MORE, ids.values())
    rid = ids[3]
    (store / "runs" / rid).mkdir()
    (store / "runs" / rid / "curves.jsonl").write_text('{"step": 2, "R": 1.5}\n{"step": "x"}\n')
    assert broken_of(capsys, store, SWEEP_MORE) == {rid: "curves.jsonl row 2: step is not an integer: 'x'"}
    code, out, err = run_cli(capsys, "collect", "--curves", "--store", store, "--out", store.parent / "c.csv")
    assert code == 0 and out.startswith("wrote") and "of 2 runs" in out, out
    assert err == [f"depthscale: warning: skipping broken run {store / 'runs' / rid}: "
                   f"curves.jsonl row 2: step is not an integer: 'x'"]

    counts = sweep(capsys, store, base["more"])
    assert counts["failed"] == 0 and Store(store, readonly=True).run_state(rid) == "done"
    code, out, err = run_cli(capsys, "collect", "--curves", "--store", store, "--out", store.parent / "d.csv")
    assert code == 0 and "of 5 runs" in out and err == []


def test_live_curves_verdict_is_cached_until_the_file_changes(tmp_path, monkeypatch):
    """status asks for each pending run's verdict twice: the rows are read once while the file is
    unchanged, and again after an append (a bad row appended later is caught) or a rewrite. Rows
    with whitespace around them, cut short, or followed by extra data read as json.loads would."""
    from depthscale.store import store
    from depthscale.config.run import make_config

    st = Store(tmp_path / "s")
    cfg = make_config("smoke")
    st.write_config(cfg)
    path = st.run_path(cfg.run_id) / "curves.jsonl"
    path.write_text(' {"step": 0, "R": 2.5, "lr": null}\t\n{"step": 10, "R": 2.4} x\n{"step": 20, "R"\n')
    reads = []
    real = store._live_rows
    monkeypatch.setattr(store, "_live_rows", lambda p: reads.append(p) or real(p))
    assert st.live_curves_problem(cfg.run_id) is None and st.live_curves_problem(cfg.run_id) is None
    assert len(reads) == 1
    assert [r["step"] for r in real(path)] == [0]  # the other two rows are not complete JSON rows
    with open(path, "a") as fh:
        fh.write('{"step": 30, "R": true}\n')
    assert st.live_curves_problem(cfg.run_id) == "curves.jsonl row 4: R is not a number: True"
    assert len(reads) == 2
    path.write_text('{"step": 0, "R": 2.5}\n')  # rewritten (its rerun's rows)
    assert st.live_curves_problem(cfg.run_id) is None and len(reads) == 3


@pytest.mark.parametrize("row, bad", [
    ({"step": 3, "R": 2.5, "lr": None, "n": 4}, None), ({}, None), ({"R": 1.0}, None),
    ({"step": 2.0, "R": 1.0}, "step"), ({"step": True}, "step"), ({"step": None}, "step"),
    ({"step": 1, "R": False}, "R"), ({"step": 1, "R": "2.5"}, "R"), ({"step": 1, "R": [1.0]}, "R"),
    ({"step": 1, "x": {"a": 1}}, "x"), ([1, 2], "object"), ("row", "object"), (None, "object"),
])
def test_curve_row_check_names_the_first_bad_value(row, bad):
    """store_verify.curve_row_problem (with its fast path for sound rows) against the rule: a
    JSON object, an integer step (not a bool), every other value a number or null."""
    from depthscale.store.store_verify import curve_row_problem

    why = curve_row_problem(row)
    assert (why is None) == (bad is None), why
    if bad is not None:
        assert bad in why, why


def test_fifos_among_timing_records_and_theory_entries_are_skipped(tmp_path):
    """The report reads the store's pack timing records and the theory cache's entries: a FIFO at a
    record's or entry's name (or at the cache's) is skipped, never read (it would block)."""
    from depthscale.analysis import results
    from depthscale.base import timing

    tdir = timing.timing_dir(tmp_path / "store")
    tdir.mkdir(parents=True)
    (tdir / "a.json").write_text(json.dumps({"wall": 1.0}))
    os.mkfifo(tdir / "b.json")
    assert _returns(lambda: timing.read_records(tmp_path / "store")) == [{"wall": 1.0}]
    cache = tmp_path / "theory.json"
    edir = results.theory_entries_dir(cache)
    edir.mkdir(parents=True)
    (edir / "x.json").write_text(json.dumps({"key": "k", "value": 1, "seconds": 2.0}))
    os.mkfifo(edir / "y.json")
    assert _returns(lambda: results.read_theory_entries(cache)) == [("k", 1, 2.0)]
    os.mkfifo(cache)
    import warnings

    def theory_warned():
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            results.Theory("smoke", cache=cache)
        return [str(w.message) for w in got if issubclass(w.category, results.StaleCacheWarning)]

    said = _returns(theory_warned)  # a FIFO at the cache's name: skipped unread, with one warning line
    assert len(said) == 1 and "ignoring the theory cache" in said[0], said
