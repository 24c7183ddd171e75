"""Sampling ahead in a background thread (depthscale.train.prefetch) changes when the batches are drawn,
never which: a pack trained with the prefetcher on gives the same numbers bit for bit, and a change
of the running models between steps is served with freshly drawn batches."""

import numpy as np
import torch

from depthscale.config.run import make_config
from depthscale.train.prefetch import Prefetcher, prefetch_enabled
from depthscale.train.trainer import step_batches
from depthscale.train.training import train_pack


def _cfgs():
    return [make_config("smoke", model="nonlinear", task="difficult", L=L, seed=s, max_steps=12, eval_every=4,
                        eval_contexts=128, monitor_contexts=32)
            for L in (1, 2, 4) for s in (0, 1)]


def test_default_is_off_on_the_cpu_and_on_elsewhere(monkeypatch):
    monkeypatch.delenv("DEPTHSCALE_PREFETCH", raising=False)
    assert not prefetch_enabled("cpu") and prefetch_enabled("cuda") and prefetch_enabled("meta")
    monkeypatch.setenv("DEPTHSCALE_PREFETCH", "1")
    assert prefetch_enabled("cpu")


def test_prefetched_batches_are_the_step_batches():
    cfgs = _cfgs()
    pf = Prefetcher(lambda idx, step: step_batches(cfgs, idx, step, "cpu"), "cpu", enabled=True)
    try:
        for step, idx in ((0, [0, 1, 2, 3]), (1, [0, 1, 2, 3]), (2, [0, 2]), (3, [0, 2]), (5, [0, 2])):
            got = pf.get(idx, step)
            want = step_batches(cfgs, idx, step, "cpu")
            assert sorted(got) == sorted(want)
            for k in want:
                assert torch.equal(got[k].X_BxPxd, want[k].X_BxPxd) and torch.equal(got[k].ystar_B, want[k].ystar_B)
        assert pf.hits == 2 and pf.misses == 3  # steps 1 and 3 came from the thread
    finally:
        pf.close()


def test_training_with_the_prefetcher_changes_no_number(monkeypatch):
    monkeypatch.setenv("DEPTHSCALE_PREFETCH", "0")
    off = train_pack(_cfgs(), progress=False)
    monkeypatch.setenv("DEPTHSCALE_PREFETCH", "1")
    on = train_pack(_cfgs(), progress=False)
    for a, b in zip(off, on):  # (C is NaN at L = 1: no pair of layers)
        assert np.array_equal([a["R"], a["A"], a["C"]], [b["R"], b["A"], b["C"]], equal_nan=True)
