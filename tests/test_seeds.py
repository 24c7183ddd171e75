"""One place derives every random stream's seed (depthscale.seeds): the formulas are the ones every
stored result was drawn with, and no other module seeds a generator itself."""

import re
from pathlib import Path

import torch

from depthscale import seeds
from depthscale.config import make_config
from depthscale.contexts import make_generator, sample_for

SRC = Path(__file__).resolve().parents[1] / "src" / "depthscale"


def test_formulas_are_the_stored_ones():
    assert seeds.step_seed(0, 0) == 17 and seeds.step_seed(3, 5) == 3 * 1_000_003 + 5 * 7_919 + 17
    assert seeds.step_seed(2**59, 10**6) < 2**63 - 1
    assert seeds.monitor_seed(1_000_003) == 1_000_004 and seeds.eval_stream_seed(1_000_003) == 1_000_003
    assert seeds.init_seed(2) == 17 and seeds.transformer_init_seed(2) == 19
    assert seeds.cluster_seed(4, 16) == (20_261_203 * 1_000_003 + 4 * 7_919 + 16) % (2**63 - 1)


def test_the_training_stream_is_a_function_of_seed_and_step():
    cfg = make_config("smoke", model="nonlinear", task="difficult")
    a = sample_for(cfg, 4, make_generator(seeds.step_seed(1, 7)), "cpu")
    b = sample_for(cfg, 4, seeds.generator(seeds.step_seed(1, 7)), "cpu")
    c = sample_for(cfg, 4, seeds.generator(seeds.step_seed(1, 8)), "cpu")
    assert torch.equal(a.X_BxPxd, b.X_BxPxd) and not torch.equal(a.X_BxPxd, c.X_BxPxd)


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
