"""SPEC §4 "the final model is the model": every preset run anneals its rate to <= 1% of the peak and
trains to its cap, reports its final parameters (the monitor's best step is a diagnostic only), and
is watched on a monitor set of >= 10,240 contexts disjoint from its evaluation set; SPEC §5: the
nonlinear shape experiments evaluate on >= 102,400 contexts at the cpu and paper presets."""

from __future__ import annotations

import math

import pytest
import torch

from depthscale.base import seeds
from depthscale.config.run import PRESETS, SHAPE_EVAL_CONTEXTS, make_config
from depthscale.data.contexts import make_generator, sample_for
from depthscale.data.measurements import eval_contexts
from depthscale.experiments.registry import REGISTRY
from depthscale.train.schedule import lr_factor
from depthscale.train.training import train_pack

SHAPE_EXPERIMENTS = ("fig6", "fig14", "table1", "table4", "table5")


def _preset_configs(preset):
    out = {}
    for e in REGISTRY.values():
        for c in e.configs(preset):
            out[c.run_id] = c
    return list(out.values())


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_run_anneals_to_one_percent_and_trains_to_its_cap(preset):
    cfgs = _preset_configs(preset)
    assert cfgs
    schedules = {}  # lr_factor reads only (schedule, warmup, max_steps): each distinct one checked once
    for c in cfgs:
        if c.max_steps == 0:  # an untrained control (measured at its initialisation): no schedule
            continue
        schedules.setdefault((c.schedule, c.warmup, c.max_steps), c)
        assert not c.early_stop, (c.model, c.task)  # the convergence rule cannot stop it before its cap
        assert not c.keep_best
    for c in schedules.values():
        # the rate of the last step taken (step max_steps - 1), as a fraction of the peak (factor 1)
        assert lr_factor(c, c.max_steps - 1) <= 0.01, (c.model, c.task, c.schedule, c.max_steps, c.warmup)
        assert max(lr_factor(c, t) for t in range(c.warmup, c.max_steps)) == pytest.approx(1.0, abs=1e-3)


def test_cosine_schedule_last_step_against_the_formula():
    c = make_config("cpu", max_steps=1000, warmup=100)
    span = 900
    want = 0.5 * (1 + math.cos(math.pi * 899 / span))  # independent: the cosine at the last step taken
    assert lr_factor(c, 999) == pytest.approx(want, rel=1e-12)
    assert want <= 0.01 and lr_factor(c, 99) == 1.0 and lr_factor(c, 100) == 1.0


@pytest.mark.parametrize("preset", ("cpu", "paper"))
def test_monitor_and_evaluation_sizes_follow_spec(preset):
    cfgs = _preset_configs(preset)
    assert all(c.monitor_contexts >= 10_240 for c in cfgs)
    for e in SHAPE_EXPERIMENTS:
        nl = [c for c in REGISTRY[e].configs(preset) if c.model == "nonlinear"]
        assert nl and all(c.eval_contexts >= 102_400 for c in nl), e
    assert SHAPE_EVAL_CONTEXTS >= 102_400


def test_monitor_set_is_disjoint_from_the_evaluation_set_and_the_training_stream():
    """The monitor's seed differs from the evaluation seed and every training-step seed of the
    preset seeds; and the contexts themselves share no input vector (continuous draws: any shared
    vector would mean a shared stream)."""
    c = make_config("smoke", model="nonlinear", task="difficult", monitor_contexts=256, eval_contexts=256)
    ms, es = seeds.monitor_seed(c.eval_seed), seeds.eval_stream_seed(c.eval_seed)
    assert ms != es
    train = {seeds.step_seed(s, t) for s in range(5) for t in range(0, 20_000)}
    assert ms not in train and es not in train
    mon = eval_contexts(c, 256, ms)
    ev = eval_contexts(c, 256, es)
    tr = sample_for(c, 256, make_generator(seeds.step_seed(0, 0), "cpu"), "cpu")
    xs = lambda chunks: torch.cat([ch.xq_Bxd for ch in chunks])  # noqa: E731
    m, e, t = xs(mon), xs(ev), tr.xq_Bxd
    for a, b in ((m, e), (m, t), (e, t)):
        assert torch.cdist(a.double(), b.double()).min() > 1e-6
    assert torch.equal(m, xs(eval_contexts(c, 256, ms)))  # fixed: the same contexts every time


def test_the_reported_model_is_the_final_one_and_the_best_step_a_diagnostic():
    # a constant, far too large rate: the monitor loss wanders, so its minimum is usually not last
    for seed in range(6):
        cfg = make_config("smoke", L=2, lr=0.3, schedule="constant", warmup=0, max_steps=40, eval_every=5,
                          patience=1000, eval_contexts=512, monitor_contexts=256, seed=seed)
        met = train_pack([cfg])[0]
        if 0 < met["best_step"] < cfg.max_steps:
            break
    assert 0 < met["best_step"] < cfg.max_steps
    assert met["best_monitor"] <= met["final_monitor_loss"]
    # the same run measured at its final parameters: equal to a run with the best-step rollback off
    kept = train_pack([cfg.replace(keep_best=True)])[0]
    assert kept["best_step"] == met["best_step"] and kept["R"] != met["R"]
    assert met["steps"] == cfg.max_steps
