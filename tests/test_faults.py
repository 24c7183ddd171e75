"""Fault injection on a real store (smoke runs, trained once per module): every file of a finished
run and of a running one is removed, emptied, truncated or garbled, and `status`, `sweep`,
`collect` and `report` must behave as issue 12 says: a broken finished run shows as broken, is
skipped by collect/report with one warning line naming it, and is run again by the next sweep;
a damaged running run never blocks the store. Also: the memory estimate against a measured run."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from depthscale.cli import main as cli
from depthscale.config.run import make_config, run_id
from depthscale.store import manifests
from depthscale.store.store import Store

TINY = {"model": "nonlinear", "max_steps": 20, "eval_contexts": 64, "monitor_contexts": 64, "batch": 16,
        "eval_every": 10, "checkpoint_every": 10}
GRID = [dict(TINY, L=[1, 2, 3]), dict(TINY, L=1, lr=1e6)]  # three good runs and one that diverges
SWEEP = "grid-smoke"
FINISHED_FILES = ("DONE", "config.json", "metrics.json", "curves.json")
RUNNING_FILES = ("config.json", "checkpoint.pt", "lease", "FAILED")
DAMAGES = ("missing", "empty", "truncated", "garbage", "not_object", "directory")


def run_cli(capsys, *argv) -> tuple[int, str, list[str]]:
    """cli.main in this process: (exit code, stdout, stderr lines but the progress lines: the preset
    used, a line per finished run and the minute's heartbeat, printed when stderr is no terminal)."""
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    progress = re.compile(r"^depthscale: (preset |run [0-9a-f]{16} done: |\S+ \S+ pack of \d+: step )")
    return code, out.out, [ln for ln in out.err.splitlines() if not progress.match(ln)]


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def states(capsys, root: Path) -> dict:
    code, out, err = run_cli(capsys, "status", "--store", root, "--json")
    assert code == 0 and err == [], err
    rec = json.loads(out)[0]
    store = Store(root, readonly=True)
    return {"counts": {k: rec[k] for k in ("done", "diverged", "broken", "running", "failed", "pending")},
            "of": {rid: store.run_state(rid) for rid in manifests.load(store, rec["sweep"])}, "rec": rec}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    """A store with three done runs, one diverged run, and one running run (killed after its
    step-10 checkpoint, an earlier attempt's FAILED, a lease held by this live process)."""
    from depthscale.train.training import run_pack

    root = tmp_path_factory.mktemp("faults")
    grid = root / "grid.json"
    grid.write_text(json.dumps({"grid": GRID}))
    store_root = root / "store"
    assert cli.main(["sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(store_root)]) == 0
    store = Store(store_root)
    running = make_config("smoke", **dict(TINY, L=4))

    class Killed(Exception):
        pass

    def save_then_die(rid, obj, _orig=store.save_checkpoint):
        _orig(rid, obj)
        raise Killed

    store.save_checkpoint = save_then_die
    with pytest.raises(Killed):
        run_pack([running], store)
    rid = running.run_id
    assert Store(store_root).leases.claim(rid, "a live holder")  # this process: alive, so "running"
    (store.run_dir(rid) / ".metrics.json.abc.tmp").write_text("{")  # a killed writer's temp file
    cfgs = [make_config("smoke", **dict(TINY, L=L)) for L in (1, 2, 3)]
    diverged = make_config("smoke", **dict(TINY, L=1, lr=1e6))
    # the same sweep with the running run in it (same manifest name: grid-smoke)
    (root / "all").mkdir()
    grid_all = root / "all" / "grid.json"
    grid_all.write_text(json.dumps({"grid": [dict(TINY, L=[1, 2, 3, 4]), GRID[1]]}))
    manifests.write(Store(store_root), SWEEP, manifests.load(Store(store_root), SWEEP) + [rid])
    return {"root": store_root, "grid": grid, "grid_all": grid_all, "done": [c.run_id for c in cfgs],
            "diverged": diverged.run_id, "running": rid}


@pytest.fixture
def store_copy(base, tmp_path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(base["root"], dst, symlinks=True)
    return dst


def damage(path: Path, how: str) -> None:
    blob = path.read_bytes() if path.is_file() else b""
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(blob[: max(1, len(blob) // 2)])
    elif how == "garbage":
        path.write_bytes(b"\x00\xff\x13garbage\x80" * 7)
    elif how == "not_object":
        path.write_bytes(b"[1, 2, 3]\n")
    elif how == "directory":
        path.unlink()
        path.mkdir()
        (path / "inside").write_text("x")


def test_base_store_states(base, capsys):
    st = states(capsys, base["root"])
    assert st["counts"] == {"done": 3, "diverged": 1, "broken": 0, "running": 1, "failed": 0, "pending": 0}
    div = st["rec"]["diverged_runs"]
    assert [d["run_id"] for d in div] == [base["diverged"]] and div[0]["step"] is not None
    assert "non-finite" in div[0]["reason"]
    text = (base["root"] / "runs" / base["diverged"] / "metrics.json").read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("name", FINISHED_FILES)
def test_damaged_finished_run(store_copy, base, capsys, name, how):
    victim = base["done"][1]
    d = store_copy / "runs" / victim
    damage(d / name, how)
    unfinished = name == "DONE" and how == "missing"  # no DONE: an unfinished run, not a broken one
    if name == "DONE" and how == "not_object":
        (d / name).write_text("[]")
    before = snapshot(store_copy)

    st = states(capsys, store_copy)
    assert st["of"][victim] == ("pending" if unfinished else "broken")
    assert st["counts"]["done"] == 2 and st["counts"]["diverged"] == 1
    if not unfinished:
        (broken,) = st["rec"]["broken_runs"]
        assert broken["run_id"] == victim and broken["reason"].startswith(name)

    code, out, err = run_cli(capsys, "collect", "--store", store_copy, "--out", store_copy.parent / "t.csv")
    assert code == 0 and out.startswith("wrote 3 runs")  # two done, one diverged
    assert err == ([] if unfinished else [f"depthscale: warning: skipping broken run {d}: {broken['reason']}"])
    assert snapshot(store_copy) == before  # status and collect only read

    code, out, err = run_cli(capsys, "sweep", "--grid", base["grid"], "--preset", "smoke", "--store",
                             store_copy, "--json")
    assert code == 0, err
    counts = json.loads(out.strip().splitlines()[-1])
    assert counts["ran"] == 1 and counts["skipped_done"] == 3 and counts["failed"] == 0
    assert Store(store_copy, readonly=True).run_state(victim) == "done"
    code, out, err = run_cli(capsys, "collect", "--store", store_copy, "--out", store_copy.parent / "u.csv")
    assert code == 0 and out.startswith("wrote 4 runs") and err == []


@pytest.mark.parametrize("how", ("missing", "empty", "truncated", "garbage", "not_object"))
@pytest.mark.parametrize("name", RUNNING_FILES)
def test_damaged_running_run(store_copy, base, capsys, name, how):
    rid = base["running"]
    d = store_copy / "runs" / rid
    damage(d / name, how)
    if name == "lease" and how == "empty":  # an empty lease gets a second's grace (being written)
        os.utime(d / name, (0, 0))
    st = states(capsys, store_copy)
    # a missing or unreadable lease is stale at once: the run is then failed (an earlier
    # attempt's FAILED is there)
    expect = "failed" if name == "lease" else "running"
    assert st["of"][rid] == expect and st["counts"]["done"] == 3 and st["counts"]["broken"] == 0
    code, out, err = run_cli(capsys, "collect", "--store", store_copy, "--out", store_copy.parent / "t.csv")
    assert code == 0 and out.startswith("wrote 4 runs") and err == []  # a running run is not collected

    # its holder dies: the next sweep takes the run, resumes or restarts it, and finishes it
    lease = d / "lease"
    if name != "lease":
        doc = json.loads(lease.read_text())
        doc["pid"], doc["start"] = dead_pid(), None
        lease.write_text(json.dumps(doc))
    code, out, err = run_cli(capsys, "sweep", "--grid", base["grid_all"], "--preset", "smoke", "--store",
                             store_copy, "--json")
    assert code == 0, err
    counts = json.loads(out.strip().splitlines()[-1])
    assert counts["ran"] == 1 and counts["skipped_done"] == 4 and counts["skipped_claimed"] == 0
    if name == "checkpoint.pt" and how != "missing":
        assert len(err) == 1 and err[0].startswith("depthscale: warning: ignoring unreadable checkpoint")
    else:
        assert err == []
    store = Store(store_copy, readonly=True)
    assert store.run_state(rid) == "done" and not list(d.glob(".*.tmp")) and not (d / "FAILED").exists()


def test_report_skips_broken_runs_and_shows_diverged_ones(store_copy, base, capsys, tmp_path):
    broken = {base["done"][0]: ("metrics.json", "truncated"), base["done"][2]: ("curves.json", "garbage")}
    for rid, (name, how) in broken.items():
        damage(store_copy / "runs" / rid / name, how)
    damage(store_copy / "runs" / base["running"] / "config.json", "garbage")
    before = snapshot(store_copy)
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, "report", "--store", store_copy, "--out", out_dir)
    assert code == 0, err
    warn = [e for e in err if e.startswith("depthscale: warning: skipping broken run")]
    assert len(warn) == 2 and all(any(rid in w for w in warn) for rid in broken), err
    assert snapshot(store_copy) == before  # the report never writes to the store
    md = (out_dir / "report.md").read_text()
    assert "run states: 1 done, 1 diverged" in md and "2 broken in the store (skipped)" in md
    assert f"diverged: run {base['diverged']} (nonlinear, L = 1) at step" in md
    for rid, (name, _) in broken.items():
        assert f"broken: run {rid}: {name}" in md
    assert base["diverged"] in (out_dir / "report.html").read_text()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_memory_estimate_is_close_to_a_measured_run():
    """pack_bytes against the resident memory a real (small) training run adds (0.8-1.7x seen)."""
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child of a large pytest
    # process would start with the parent's high-water mark
    code = ("import json\n"
            "from depthscale.config.run import make_config\n"
            "from depthscale.train.memory import pack_bytes\n"
            "from depthscale.train.training import train_pack\n"
            "def hwm():\n"
            "    for line in open('/proc/self/status'):\n"
            "        if line.startswith('VmHWM:'):\n"
            "            return int(line.split()[1]) * 1024\n"
            "cfgs = [make_config('smoke', L=2, batch=60000, max_steps=2, eval_every=2, warmup=0)]\n"
            "base = hwm()\n"
            "train_pack(cfgs, progress=False)\n"
            "print(json.dumps({'used': hwm() - base, 'estimate': pack_bytes(cfgs)}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["used"] > 0 and 0.6 <= res["estimate"] / res["used"] <= 2.5, (res, out.stderr[-2000:])


def test_memory_refusal_names_estimate_and_available(tmp_path, capsys, monkeypatch):
    from depthscale.train import memory

    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 2**30)
    root = tmp_path / "s"
    code, out, err = run_cli(capsys, "train", "--preset", "smoke", "--batch", "1000000", "--store", root)
    assert code == 2 and len(err) == 1 and not root.exists()
    assert "needs about" in err[0] and "1 GiB is available on cpu" in err[0] and "--allow-memory" in err[0]
    grid = tmp_path / "g.json"
    grid.write_text(json.dumps({"P": 10000000, "model": "nonlinear"}))
    code, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", root)
    assert code == 2 and len(err) == 1 and "needs about" in err[0] and not root.exists()
    cfg = make_config("smoke", batch=1000000)
    assert memory.pack_bytes([cfg]) > 2**30 and run_id(cfg)  # the estimate is what was refused


def test_a_memory_estimate_starts_no_kernel_build_and_counts_the_one_pass_sampler(monkeypatch):
    # pack_bytes (a sweep's plan, --dry-run) asks kernels.expected(), never builds; with the kernels
    # on, a seed of one spectrum holds its batch's float32 contexts only, off its float64 draws too
    from depthscale.data import kernels
    from depthscale.train import memory
    from depthscale.config.run import make_config

    monkeypatch.setitem(kernels._STATE, "tried", False)
    monkeypatch.setitem(kernels._STATE, "ops", None)
    monkeypatch.setattr(kernels, "_build", lambda *a, **k: pytest.fail("a memory estimate started a kernel build"))
    cfg = make_config("smoke")
    one_pass = memory.pack_bytes([cfg])
    monkeypatch.setenv("DEPTHSCALE_FUSED", "0")
    cached = memory.pack_bytes([cfg])
    extra = memory.FLOAT * cfg.batch * (memory._per_context(cfg) - memory.stored_floats(cfg))
    assert cached - one_pass == extra > 0
    assert not kernels._STATE["tried"]
