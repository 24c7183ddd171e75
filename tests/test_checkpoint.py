"""Training behind its storage protocol (train/storage.py) and the checkpoint format in one module
(train/checkpoint.py): the store implements the protocol, an in-memory storage with only its
methods trains and resumes a run, and a checkpoint that is not one is turned away by the format."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from depthscale.config.run import make_config
from depthscale.store.store import Store
from depthscale.train import checkpoint
from depthscale.train.storage import RunStorage
from depthscale.train.training import run_pack, train_one


class MemoryStorage:
    """RunStorage in memory: the protocol's methods and nothing else."""

    def __init__(self, logs: Path):
        self.configs, self.checkpoints, self.curves, self.results, self.failures = {}, {}, {}, {}, {}
        self.logs = logs

    def write_config(self, cfg, device=None, extra=None):
        if not self.is_done(cfg.run_id):
            self.configs[cfg.run_id] = {"config": cfg.to_dict(), **(extra or {})}

    def stored_config(self, rid):
        return self.configs.get(rid)

    def is_done(self, rid):
        return rid in self.results

    def load_metrics(self, rid):
        return self.results[rid][0]

    def save_checkpoint(self, rid, data):
        assert isinstance(data, bytes) and not self.is_done(rid)
        self.checkpoints[rid] = data

    def load_checkpoint(self, rid):
        return self.checkpoints.get(rid)

    def start_curves(self, rid, curves):
        self.curves[rid] = [dict(zip(curves, vals)) for vals in zip(*curves.values())]

    def append_curves(self, rid, rows):
        self.curves[rid].extend(rows)

    def finish(self, rid, metrics, curves, params=None):
        self.results[rid] = (metrics, curves, params)
        self.checkpoints.pop(rid, None)
        return True

    def fail(self, rid, reason):
        self.failures[rid] = reason

    def log_dir(self, rid, name):
        return self.logs / rid / name


class Killed(Exception):
    pass


def _smoke(**kw):
    return make_config("smoke", model="nonlinear", L=2, max_steps=20, eval_every=5, checkpoint_every=5,
                       eval_contexts=64, monitor_contexts=64, batch=16, **kw)


def test_the_store_implements_the_protocol(tmp_path):
    assert isinstance(Store(tmp_path / "s"), RunStorage)
    assert isinstance(MemoryStorage(tmp_path), RunStorage)
    assert not isinstance(object(), RunStorage)


def test_a_run_trains_and_resumes_through_an_in_memory_storage_alone(tmp_path):
    """Training needs nothing of a storage but the protocol: a run trained through MemoryStorage,
    and one killed after its step-10 checkpoint and resumed there, give the store's numbers."""
    cfg = _smoke()
    ref = train_one(cfg, Store(tmp_path / "s"), progress=False)
    mem = MemoryStorage(tmp_path / "logs")
    assert train_one(cfg, mem, progress=False)["R"] == ref["R"]
    assert [r["step"] for r in mem.curves[cfg.run_id]] == [5, 10, 15, 20]

    killed = MemoryStorage(tmp_path / "logs")
    save = killed.save_checkpoint

    def save_then_die(rid, data):
        save(rid, data)
        if checkpoint.parse(data)[0]["step"] == 10:
            raise Killed
    killed.save_checkpoint = save_then_die
    with pytest.raises(Killed):
        run_pack([cfg], killed, progress=False)
    del killed.save_checkpoint
    assert checkpoint.read(killed, cfg.run_id)["step"] == 10 and "Killed" in killed.failures[cfg.run_id]
    run_pack([cfg], killed, progress=False)
    assert killed.load_metrics(cfg.run_id)["R"] == ref["R"]
    assert [r["step"] for r in killed.curves[cfg.run_id]] == [5, 10, 15, 20]  # no row twice


def test_a_checkpoint_round_trips_through_its_bytes():
    ck = checkpoint.build(7, {"w": torch.arange(3.0)}, {"m": {"w": torch.zeros(3)}, "v": {"w": torch.ones(3)}, "t": 7},
                          {"steps": 7}, _smoke().to_dict(), [_smoke().to_dict()])
    back, why = checkpoint.parse(checkpoint.to_bytes(ck))
    assert why is None and back["step"] == 7 and torch.equal(back["params"]["w"], torch.arange(3.0))
    assert back["threads"] == torch.get_num_threads() and checkpoint.problem(back) is None


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_unreadable_checkpoint_warns_and_gives_none(tmp_path, damage):
    store, rid = Store(tmp_path / "s"), _smoke().run_id
    blob = checkpoint.to_bytes({"step": 3, "w": list(range(1000))})
    store.save_checkpoint(rid, {"garbage": b"not a checkpoint", "truncated": blob[: len(blob) // 2],
                                "empty": b""}[damage])
    with pytest.warns(UserWarning, match=f"ignoring unreadable checkpoint of run {rid}"):
        assert checkpoint.read(store, rid) is None
    store.save_checkpoint(rid, checkpoint.to_bytes({"step": 4}))  # the next save replaces it
    assert checkpoint.read(store, rid) == {"step": 4}


def test_the_store_reads_a_checkpoint_only_from_a_regular_file(tmp_path):
    store, rid = Store(tmp_path / "s"), _smoke().run_id
    path = store.run_dir(rid) / "checkpoint.pt"
    os.mkfifo(path)  # never a hang
    with pytest.warns(UserWarning, match=f"ignoring unreadable checkpoint {path}"):
        assert store.load_checkpoint(rid) is None
    os.unlink(path)
    store.save_checkpoint(rid, b"abc")
    assert store.load_checkpoint(rid) == b"abc" == path.read_bytes()
