"""The slurm executor through submitit: on a real single-node SLURM started for the test, and on
submitit's local executor. Skipped with the reason where submitit or SLURM is not available."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from depthscale.config import run_id
from depthscale.store import Store
from depthscale.sweeps import run_sweep

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
    return run_sweep(cfgs, store, executor="slurm", worker=fake_worker.run_pack,
                     pack_key=fake_worker.pack_key, progress=False, slurm=slurm, **kw)


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
    assert {run_id(c) for c in cfgs} == set(store.collect()["run_id"])
