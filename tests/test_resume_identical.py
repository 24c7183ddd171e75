"""Resume is bit-identical to an uninterrupted run (issue 28 item 8).

A model's numbers depend on its pack-mates through float rounding, so a killed pack resumes as the
same pack (trainer.py's module docstring): these tests kill a pack at the store writes where that
used to fail (while its checkpoints are written, before a stopped run's result, between the
results of the last step, twice in a row, and with a real SIGKILL through the CLI) and compare
every run's metrics and curves with the uninterrupted run's, bit for bit."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from depthscale.config.run import make_config
from depthscale.store.store import Store
from depthscale.train import training
from depthscale.train.checkpoint import parse
from depthscale.train.training import run_pack

# runs that stop at different steps (converged at 20, 45 and 60, max_steps) and one whose loss is
# NaN from the first step: every kind of stop happens while its pack-mates train on
FIELDS = dict(max_steps=60, eval_every=5, checkpoint_every=10, patience=2, min_steps=10, rel_tol=0.003, early_stop=True,
              keep_best=True, eval_contexts=256, monitor_contexts=128, batch=32)
CFGS = [make_config("smoke", L=L, seed=s, **FIELDS) for s in (0, 1) for L in (1, 2, 4)] + [
    make_config("smoke", L=2, seed=2, **FIELDS)]
CLOCK = {"train_seconds"}  # the only field that differs (wall time)


def _poisoned(orig):
    """build_pack with the seed-2 model's W_y NaN: its loss is NaN at step 1, and it stops there."""
    def build(cfgs):
        pk = orig(cfgs)
        with torch.no_grad():
            for j, c in enumerate(cfgs):
                if c.seed == 2:
                    pk.Wy[j].fill_(float("nan"))
        return pk
    return build


@pytest.fixture
def poisoned(monkeypatch):
    monkeypatch.setattr(training, "build_pack", _poisoned(training.build_pack))


class Killed(BaseException):
    pass


def killed_at(store: Store, k: int, log: list | None = None) -> Store:
    """`store` whose k-th checkpoint or result write never happens: the process dies right before
    it (k = 0: never); `log` records the writes."""
    n = [0]

    def hook(kind, orig):
        def write(rid, obj, *a, **kw):
            n[0] += 1
            if n[0] == k:
                raise Killed
            if log is not None:
                log.append((kind, parse(obj)[0]["step"] if kind == "checkpoint" else obj["steps"], rid))
            return orig(rid, obj, *a, **kw)
        return write
    store.save_checkpoint = hook("checkpoint", store.save_checkpoint)
    store.finish = hook("finish", store.finish)
    return store


def outcome(store: Store, cfgs=CFGS) -> dict:
    """Every run's metrics (but the wall time) and curves, as text: equal means bit-identical."""
    res = {}
    for c in cfgs:
        met = {k: v for k, v in store.load_metrics(c.run_id).items() if k not in CLOCK}
        res[c.run_id] = json.dumps([met, store.load_curves(c.run_id)], sort_keys=True, default=repr)
    return res


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted pack: its outcome and the order of its store writes."""
    mp = pytest.MonkeyPatch()
    mp.setattr(training, "build_pack", _poisoned(training.build_pack))  # (the `poisoned` fixture, module-scoped)
    try:
        log: list = []
        store = killed_at(Store(tmp_path_factory.mktemp("reference")), 0, log)
        run_pack(CFGS, store, progress=False)
        return outcome(store), log
    finally:
        mp.undo()


def test_the_reference_stops_in_every_way(reference):
    res, log = reference
    stops = {(json.loads(v)[0]["stopped_because"], json.loads(v)[0]["steps"]) for v in res.values()}
    assert {s for s, _ in stops} == {"converged", "max_steps", "nan"}
    assert len({n for _, n in stops}) >= 4  # stops at several steps: the pack shrinks while it trains
    # no result is written before the others' checkpoints at its step
    for j, (kind, step, rid) in enumerate(log):
        if kind == "finish":
            assert any(k == "checkpoint" and s == step and r == rid for k, s, r in log[:j])


def _kill_points(log: list) -> dict:
    """Where to kill, by what it leaves behind."""
    fins = [j for j, (kind, _, _) in enumerate(log) if kind == "finish"]
    first_done = fins[1]  # (the NaN run's result, at step 1, is fins[0])
    # a checkpoint round after a run finished, cut in the middle: two steps, and a done pack-mate
    mixed = next(j for j in range(first_done + 1, len(log)) if log[j][0] == "checkpoint" and log[j - 1][0] == "checkpoint"
                 and log[j - 1][1] == log[j][1] and log[j - 1][1] != log[j - 2][1])
    return {"before the first result": fins[0], "before a converged run's result": first_done,
            "mid-checkpoint after a result": mixed, "between the last results": fins[-1]}


@pytest.mark.parametrize("where", ["before the first result", "before a converged run's result",
                                   "mid-checkpoint after a result", "between the last results"])
def test_a_killed_pack_resumes_bit_identical(reference, poisoned, tmp_path, where):
    ref, log = reference
    k = _kill_points(log)[where] + 1  # (the writes count from 1)
    with pytest.raises(Killed):
        run_pack(CFGS, killed_at(Store(tmp_path), k), progress=False)
    run_pack(CFGS, Store(tmp_path), progress=False)
    assert outcome(Store(tmp_path)) == ref


def test_killed_twice_resumes_bit_identical(reference, poisoned, tmp_path):
    ref, log = reference
    points = _kill_points(log)
    with pytest.raises(Killed):
        run_pack(CFGS, killed_at(Store(tmp_path), points["before a converged run's result"] + 1), progress=False)
    with pytest.raises(Killed):  # the resumed attempt, killed again a few writes on
        run_pack(CFGS, killed_at(Store(tmp_path), 4), progress=False)
    run_pack(CFGS, Store(tmp_path), progress=False)
    assert outcome(Store(tmp_path)) == ref


KILL_AT = """
import os, signal, sys
from depthscale.cli import main as cli
from depthscale.store.store import Store
n, k = [0], int(os.environ["KILL_AT_WRITE"])
orig = Store.save_checkpoint
def save(self, rid, obj):
    n[0] += 1
    if n[0] == k:
        os.kill(os.getpid(), signal.SIGKILL)
    return orig(self, rid, obj)
Store.save_checkpoint = save
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_sweep_sigkilled_at_a_checkpoint_resumes_bit_identical(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"grid": {"L": [1, 2, 4], "seed": [0, 1], "max_steps": [40], "eval_every": [10],
                                         "checkpoint_every": [10], "eval_contexts": [256],
                                         "monitor_contexts": [128]}}))
    env = dict(os.environ, PYTHONPATH=str(Path(training.__file__).parents[1]))

    def sweep(store, kill_at=0):
        return subprocess.run([sys.executable, "-c", KILL_AT, "sweep", "--grid", str(grid), "--preset", "smoke",
                               "--store", str(store)], env=dict(env, KILL_AT_WRITE=str(kill_at)),
                              capture_output=True, text=True, timeout=300)
    assert sweep(tmp_path / "ref").returncode == 0
    killed = sweep(tmp_path / "killed", kill_at=9)  # in the middle of the step-20 checkpoints (6 runs)
    assert killed.returncode == -9
    again = sweep(tmp_path / "killed")
    assert again.returncode == 0, again.stderr
    ref, res = Store(tmp_path / "ref"), Store(tmp_path / "killed")
    rids = sorted(ref.run_ids())
    assert len(rids) == 6 and sorted(res.run_ids()) == rids
    cfgs = [ref.load_config(r) for r in rids]
    assert outcome(res, cfgs) == outcome(ref, cfgs)
    assert all(math.isfinite(ref.load_metrics(r)["R"]) for r in rids)


@pytest.mark.parametrize("where", ["before a converged run's result", "mid-checkpoint after a result"])
def test_a_pack_resumed_at_another_thread_count_is_bit_identical(reference, poisoned, tmp_path, where):
    """Issue 37, item 4: the process executor splits the cores between as many workers as packs
    remain, so a resumed pack's worker may get another intra-op thread count than the killed one
    had, and float sums depend on it. A checkpoint records its thread count and the resume trains
    at it (training.recorded_threads), then gives the worker its own count back."""
    ref, log = reference
    k = _kill_points(log)[where] + 1
    with pytest.raises(Killed):
        run_pack(CFGS, killed_at(Store(tmp_path), k), progress=False)
    before = torch.get_num_threads()
    other = 1 if before > 1 else 4
    torch.set_num_threads(other)
    try:
        run_pack(CFGS, Store(tmp_path), progress=False)
        assert torch.get_num_threads() == other  # the worker's own count back after the pack
    finally:
        torch.set_num_threads(before)
    assert outcome(Store(tmp_path)) == ref


def test_recorded_threads_is_ignored_unless_one_sane_count():
    n = torch.get_num_threads()
    for cks in ([], [{}], [{"threads": 3}, {"threads": 5}], [{"threads": "2"}], [{"threads": 0}], [{"threads": True}]):
        with training.recorded_threads(cks):
            assert torch.get_num_threads() == n
    with training.recorded_threads([{"threads": n + 1}, {"threads": n + 1}]):
        assert torch.get_num_threads() == n + 1
    assert torch.get_num_threads() == n


def test_a_process_sweep_sigkilled_after_a_pack_finished_resumes_bit_identical(tmp_path):
    """Issue 37, item 4, as it was found: two packs (max_steps 40 and 600) in two process workers
    (a core each where there are two), the sweep SIGKILLed once the short pack is done and the long
    one has a checkpoint; the resumed sweep has one pack left, so its worker gets all the cores,
    and still every run's numbers are the uninterrupted sweep's, bit for bit."""
    import signal
    import time

    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"grid": {"L": [1, 2], "seed": [0, 1], "max_steps": [40, 600], "eval_every": [10],
                                         "checkpoint_every": [10], "eval_contexts": [256],
                                         "monitor_contexts": [128], "early_stop": [False]}}))
    env = dict(os.environ, PYTHONPATH=str(Path(training.__file__).parents[1]))
    argv = [sys.executable, "-m", "depthscale", "sweep", "--grid", str(grid), "--preset", "smoke", "--executor",
            "process", "--workers", "2"]

    def sweep(store):
        return subprocess.run(argv + ["--store", str(store)], env=env, capture_output=True, text=True, timeout=600)

    assert sweep(tmp_path / "ref").returncode == 0
    ref = Store(tmp_path / "ref")
    rids = sorted(ref.run_ids())
    short = {r for r in rids if ref.load_config(r).max_steps == 40}
    assert len(rids) == 8 and len(short) == 4
    killed = tmp_path / "killed"
    proc = subprocess.Popen(argv + ["--store", str(killed)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            runs = killed / "runs"
            if all((runs / r / "DONE").exists() for r in short) and any(
                    (runs / r / "checkpoint.pt").exists() for r in set(rids) - short):
                break
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if proc.returncode != -signal.SIGKILL or all((killed / "runs" / r / "DONE").exists() for r in rids):
        pytest.skip("the sweep finished before it could be killed (a machine much faster than this test's)")
    again = sweep(killed)
    assert again.returncode == 0, again.stderr
    cfgs = [ref.load_config(r) for r in rids]
    assert outcome(Store(killed), cfgs) == outcome(ref, cfgs)
