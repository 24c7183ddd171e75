"""Every random stream's seed, derived in one place, and the one generator factory.

A run is named by its config (config.run_id); every number it draws comes from a stream whose seed
is a function of that config and nothing else (no global RNG state), so a run is the same alone,
in a pack, resumed, or on another device:

| stream | seed | where it is used |
|---|---|---|
| training batch at step t | `step_seed(seed, t)` | trainer.step_batches, naive |
| evaluation contexts | `eval_stream_seed(eval_seed)` = eval_seed | measurements.eval_contexts callers |
| monitor contexts | `monitor_seed(eval_seed)` = eval_seed + 1 | the trainer's convergence monitor |
| model initialisation | `init_seed(seed)` = 7 seed + 3 (controlled kinds), `transformer_init_seed` = 7 seed + 5 | kinds.init, kinds.transformer |
| clustered contexts' K fixed rotations | `cluster_seed(K, d)` | contexts.cluster_rotations |
| specialisation null (class-label permutation) | `SPECIALISATION_NULL_SEED` = 0 | measurements |
| theory Monte Carlo | `THEORY_SEED` = 0 (the registry's theory needs) | results.compute_need |
| paired bootstrap over evaluation contexts | `BOOTSTRAP_SEED` = 0 | paired.bootstrap_dQ, claim 10 |
| benchmarks' random operands | `BENCH_SEED` = 0 | bench, roofline |

The training and evaluation streams are disjoint by construction: step seeds are reduced modulo
2^63 − 1 from seed · 1,000,003 + t · 7,919 + 17, evaluation seeds are the config's eval_seed
(1,000,003 by default) and its successor. Every formula here is the one stored results were drawn
with: changing one changes every run id's numbers, so it is not done lightly (and the store's
results would have to be regenerated).
"""

from __future__ import annotations

import torch

_MOD = 2**63 - 1
MONITOR_SEED_OFFSET = 1  # the monitor set's seed is the evaluation seed plus this
CLUSTER_SEED = 20_261_203
SPECIALISATION_NULL_SEED = 0
THEORY_SEED = 0
BOOTSTRAP_SEED = 0
BENCH_SEED = 0


def step_seed(seed: int, step: int) -> int:
    """Seed of the training batch at `step`: a function of (seed, step) only, so runs that share a
    seed share their data stream whatever their depth, and a resumed run needs no RNG state."""
    return (int(seed) * 1_000_003 + int(step) * 7_919 + 17) % _MOD


def eval_stream_seed(eval_seed: int) -> int:
    """Seed of a run's evaluation contexts (shared by every run of one data configuration)."""
    return int(eval_seed)


def monitor_seed(eval_seed: int) -> int:
    """Seed of the convergence monitor's fixed contexts: apart from the evaluation set."""
    return int(eval_seed) + MONITOR_SEED_OFFSET


def init_seed(seed: int) -> int:
    """Seed of a controlled model's parameter draws (kinds.init.draw_params)."""
    return int(seed) * 7 + 3


def transformer_init_seed(seed: int) -> int:
    """Seed of a pre-LN Transformer's parameter draws (kinds.transformer)."""
    return int(seed) * 7 + 5


def cluster_seed(K: int, d: int) -> int:
    """Seed of the K fixed rotations of clustered contexts at dimension d (the same for every run,
    stream and spectrum)."""
    return (CLUSTER_SEED * 1_000_003 + int(K) * 7_919 + int(d)) % _MOD


def generator(seed: int, device="cpu") -> torch.Generator:
    """A torch generator seeded with `seed` on `device` (the CPU unless a caller says otherwise)."""
    return torch.Generator(device=device).manual_seed(int(seed))


__all__ = ["step_seed", "eval_stream_seed", "monitor_seed", "init_seed", "transformer_init_seed", "cluster_seed",
           "generator", "MONITOR_SEED_OFFSET", "CLUSTER_SEED", "SPECIALISATION_NULL_SEED", "THEORY_SEED",
           "BOOTSTRAP_SEED", "BENCH_SEED"]
