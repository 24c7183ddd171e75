"""One place derives every random stream's seed (depthscale.base.seeds): the formulas are the ones every
stored result was drawn with, and no other module seeds a generator itself."""

import re
from pathlib import Path

import torch

from depthscale.base import seeds
from depthscale.config.run import make_config
from depthscale.data.contexts import make_generator, sample_for

SRC = Path(__file__).resolve().parents[1] / "src" / "depthscale"


def test_formulas_are_the_stored_ones():
    # context streams (issue 35): kind, seed, step of the Philox counter and key (philox.py)
    assert seeds.step_seed(3, 5) == seeds.StreamKey(seeds.TRAIN, 3, 5)
    assert seeds.monitor_seed(1_000_003) == seeds.StreamKey(seeds.MONITOR, 1_000_003)
    assert seeds.eval_stream_seed(1_000_003) == seeds.StreamKey(seeds.EVAL, 1_000_003) == seeds.stream_key(1_000_003)
    assert seeds.cluster_stream(4, 16) == seeds.StreamKey(seeds.CLUSTER, seeds.cluster_seed(4, 16))
    assert (seeds.ADHOC, seeds.TRAIN, seeds.EVAL, seeds.MONITOR, seeds.CLUSTER) == (0, 1, 2, 3, 4)
    assert seeds.init_seed(2) == 17 and seeds.transformer_init_seed(2) == 19
    assert seeds.cluster_seed(4, 16) == (20_261_203 * 1_000_003 + 4 * 7_919 + 16) % (2**63 - 1)


def test_the_training_stream_is_a_function_of_seed_and_step():
    cfg = make_config("smoke", model="nonlinear", task="difficult")
    a = sample_for(cfg, 4, make_generator(seeds.step_seed(1, 7)), "cpu")
    b = sample_for(cfg, 4, make_generator(seeds.step_seed(1, 7)), "cpu")
    c = sample_for(cfg, 4, make_generator(seeds.step_seed(1, 8)), "cpu")
    assert torch.equal(a.X_BxPxd, b.X_BxPxd) and not torch.equal(a.X_BxPxd, c.X_BxPxd)


def test_stream_keys_refuse_bad_fields():
    import pytest

    with pytest.raises(ValueError, match="step"):
        seeds.StreamKey(seeds.TRAIN, 1, 2**32)
    with pytest.raises(ValueError, match="kind"):
        seeds.StreamKey(9, 1)
    with pytest.raises(TypeError, match="StreamKey"):
        seeds.stream_key(1.5)
    assert seeds.StreamKey(seeds.EVAL, -1).seed == 2**64 - 1


def test_no_other_module_seeds_a_generator():
    offenders = []
    for p in sorted(SRC.rglob("*.py")):
        if p.name == "seeds.py":
            continue
        text = p.read_text()
        for pat in (r"manual_seed\(", r"1_000_003 \+|\* 1_000_003", r"\* 7 \+ [0-9]", r"default_rng\([0-9]"):
            if re.search(pat, text):
                offenders.append(f"{p.relative_to(SRC)}: {pat}")
    assert not offenders, offenders
