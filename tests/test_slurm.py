"""The slurm executor through submitit: on a real single-node SLURM started for the test, and on
submitit's local executor. Skipped with the reason where submitit or SLURM is not available."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from depthscale.config.run import run_id
from depthscale.runs.sweeps import plan, run_sweep
from depthscale.store import collect, manifests
from depthscale.store.store import Store

import fake_worker
from fake_worker import events
from slurm_cluster import ClusterUnavailable, start_cluster

TESTS = Path(__file__).resolve().parent

submitit = pytest.importorskip("submitit",
                               reason="submitit is not installed: pip install 'depthscale[slurm]'")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        c = start_cluster(tmp_path_factory.mktemp("slurm"))
    except ClusterUnavailable as e:
        print(f"\n{e}")
        pytest.skip(str(e).splitlines()[0])
    yield c
    c.stop()


@pytest.fixture
def job_env(tmp_path, monkeypatch) -> Path:
    """Environment the jobs inherit: the fake worker importable, its execution log."""
    logdir = tmp_path / "log"
    logdir.mkdir()
    monkeypatch.setenv("FAKE_WORKER_LOG", str(logdir))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return logdir


def _sweep(cfgs, store, slurm, **kw):
    run = {k: kw.pop(k) for k in ("name", "allow_memory") if k in kw}
    return run_sweep(plan(cfgs, store, executor="slurm", pack_key=fake_worker.pack_key, slurm=slurm, **kw), store,
                     worker=fake_worker.run_pack, progress=False, **run)


def _check_once(store, logdir, cfgs):
    for c in cfgs:
        assert store.is_done(c.run_id)
        assert [e for e, _ in events(logdir, c.run_id)] == ["start", "finish"]
        assert store.load_metrics(c.run_id)["pid"] != os.getpid()


def test_slurm_job_array_runs_a_sweep(tmp_path, cluster, job_env, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    store = Store(tmp_path / "store")
    cfgs = fake_worker.configs(6)
    opts = {"partition": cluster.partition, "time_min": 5, "cpus": 1, "array_parallelism": 2,
            "wait": True}
    counts = _sweep(cfgs, store, opts, max_pack=2, name="tiny")
    assert counts["ran"] == 6 and counts["failed"] == 0 and counts["packs"] == 3, (counts, cluster.logs())
    array = {j.split("_")[0] for j in counts["job_ids"]}
    assert len(array) == 1 and sorted(j.split("_")[1] for j in counts["job_ids"]) == ["0", "1", "2"]
    assert Path(counts["slurm_folder"]).is_relative_to(store.root)
    _check_once(store, job_env, cfgs)
    owners = {store.load_metrics(c.run_id)["pid"] for c in cfgs}
    assert len(owners) == 3  # one process per array task

    # without waiting: submit more, the jobs finish on their own, a rerun has nothing to do
    more = fake_worker.configs(8)
    counts = _sweep(more, store, {**opts, "wait": False}, max_pack=2)
    assert counts["planned"] == 2 and counts["skipped_done"] == 6 and len(counts["job_ids"]) == 1
    deadline = time.monotonic() + 60
    while not all(store.is_done(c.run_id) for c in more):
        assert time.monotonic() < deadline, cluster.logs()
        time.sleep(0.5)
    assert _sweep(more, store, opts)["planned"] == 0
    _check_once(store, job_env, more)


def test_submitit_local_executor(tmp_path, job_env):
    store = Store(tmp_path / "store")
    cfgs = fake_worker.configs(3)
    counts = _sweep(cfgs, store, {"cluster": "local", "wait": True, "time_min": 5}, max_pack=2)
    assert counts["ran"] == 3 and counts["packs"] == 2
    _check_once(store, job_env, cfgs)
    assert {run_id(c) for c in cfgs} == set(collect.collect(store)["run_id"])


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "depthscale", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def _submission(store_root: Path, job_id: str) -> str:
    """The sbatch script submitit wrote for an array job."""
    scripts = list(store_root.glob(f"slurm/*/{job_id.split('_')[0]}_submission.sh"))
    assert len(scripts) == 1, list(store_root.rglob("*_submission.sh"))
    return scripts[0].read_text()


def test_cli_sweep_on_slurm_with_parallelism_and_time(tmp_path, cluster):
    """`depthscale sweep --executor slurm --slurm-parallelism/--slurm-time` end to end: the flags
    reach sbatch (--array=...%2, --time=5), the jobs train the runs, a second sweep has nothing
    to do."""
    store = tmp_path / "store"
    grid = tmp_path / "grid.json"  # two linear depths: two packs, two array tasks
    grid.write_text(json.dumps({"model": "linear", "L": [1, 2], "max_steps": 10, "eval_contexts": 32,
                                "monitor_contexts": 32, "batch": 8, "eval_every": 5}))
    out = _cli("sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(store), "--executor",
               "slurm", "--slurm-partition", cluster.partition, "--slurm-parallelism", "2",
               "--slurm-time", "5", "--slurm-cpus", "1", "--json", env=cluster.env)
    assert out.returncode == 0, (out.stderr, cluster.logs())
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["planned"] == 2 and counts["packs"] == 2 and len(counts["job_ids"]) == 2
    script = _submission(store, counts["job_ids"][0])
    assert "#SBATCH --array=0-1%2" in script and "#SBATCH --time=5" in script, script
    assert f"#SBATCH --partition={cluster.partition}" in script
    st = Store(store, readonly=True)
    rids = manifests.load(st, "grid-smoke")
    deadline = time.monotonic() + 240  # each job imports torch, then trains for a second
    while not all(st.is_done(r) for r in rids):
        assert time.monotonic() < deadline, cluster.logs()
        time.sleep(1)
    assert {st.run_state(r) for r in rids} == {"done"}
    again = _cli("sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(store), "--executor",
                 "slurm", "--slurm-parallelism", "2", "--json", env=cluster.env)
    assert again.returncode == 0 and json.loads(again.stdout.strip().splitlines()[-1])["planned"] == 0


def test_readme_cluster_command_submits(tmp_path, cluster):
    """The README's cluster command as written (the paper preset, --device cuda on a submitting
    host without a GPU: the device is the nodes' business) submits; the jobs are then cancelled."""
    store = tmp_path / "runs" / "paper"  # the README's /shared/runs/paper
    out = _cli("sweep", "--experiment", "fig6", "--preset", "paper", "--store", str(store), "--executor",
               "slurm", "--slurm-parallelism", "32", "--device", "cuda", "--json", env=cluster.env)
    try:
        assert out.returncode == 0, (out.stderr, cluster.logs())
        counts = json.loads(out.stdout.strip().splitlines()[-1])
        assert counts["packs"] >= 1 and len(counts["job_ids"]) == counts["packs"]
        assert f"%{min(32, counts['packs'])}\n" in _submission(store, counts["job_ids"][0])  # submitit caps it
    finally:
        subprocess.run(["scancel", "--full", "--quiet", f"--partition={cluster.partition}"],
                       env={**os.environ, **cluster.env}, capture_output=True, timeout=30)
