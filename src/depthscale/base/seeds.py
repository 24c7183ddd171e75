"""Every random stream's key and seed, derived in one place, and the one generator factory.

A run is named by its config (config.run_id); every number it draws comes from a stream whose key
is a function of that config and nothing else (no global RNG state), so a run is the same alone,
in a pack, resumed, or on another device.

Contexts come from the counter-based generator of `depthscale.data.philox` (issue 35): a context stream
is a `StreamKey` (kind, seed, step) and each context is then a pure function of (key, index in the
stream, purpose): the layout of the Philox key and counter is in philox.py's docstring.

| stream | key | where it is used |
|---|---|---|
| training batch at step t | `step_seed(seed, t)` = StreamKey(TRAIN, seed, t) | trainer.step_batches, naive |
| evaluation contexts | `eval_stream_seed(eval_seed)` = StreamKey(EVAL, eval_seed); a bare int n means StreamKey(EVAL, n) | measurements.eval_contexts callers |
| monitor contexts | `monitor_seed(eval_seed)` = StreamKey(MONITOR, eval_seed) | the trainer's convergence monitor |
| clustered contexts' K fixed rotations | `cluster_stream(K, d)` = StreamKey(CLUSTER, cluster_seed(K, d)) | contexts.cluster_rotations |
| contexts from a torch.Generator g | StreamKey(ADHOC, one 63-bit draw from g) | tests, benchmarks |
| model initialisation | `init_seed(seed)` = 7 seed + 3 (controlled kinds), `transformer_init_seed` = 7 seed + 5 | kinds.init, kinds.transformer |
| specialisation null (class-label permutation) | `SPECIALISATION_NULL_SEED` = 0 | measurements |
| theory Monte Carlo | `THEORY_SEED` = 0 (the registry's theory needs) | results.compute_need |
| paired bootstrap over evaluation contexts | `BOOTSTRAP_SEED` = 0 | paired.bootstrap_dQ, claim 10 |
| benchmarks' random operands | `BENCH_SEED` = 0 | bench, roofline |

The training, evaluation, monitor and cluster streams are disjoint by construction, whatever their
seeds: the kind is a field of every Philox counter (a training batch of seed s and the evaluation
set of eval_seed s share no number), and within the training kind the step is another. (The
torch-generator streams of model initialisation and theory are a different generator altogether.)
Every formula here is the one stored results were drawn with: changing one changes every run id's
numbers, so it is not done lightly (and the store's results would have to be regenerated).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_MOD = 2**63 - 1
MONITOR_SEED_OFFSET = 1  # (the old stream's monitor seed was the evaluation seed plus this; kept for callers)
# context streams' kinds (a byte of every Philox counter: philox.py)
ADHOC, TRAIN, EVAL, MONITOR, CLUSTER = 0, 1, 2, 3, 4
KIND_NAMES = {ADHOC: "adhoc", TRAIN: "training", EVAL: "evaluation", MONITOR: "monitor", CLUSTER: "cluster"}
CLUSTER_SEED = 20_261_203
SPECIALISATION_NULL_SEED = 0
THEORY_SEED = 0
BOOTSTRAP_SEED = 0
BENCH_SEED = 0


@dataclass(frozen=True)
class StreamKey:
    """A context stream: its kind (TRAIN, EVAL, MONITOR, CLUSTER, ADHOC), a 64-bit seed and the
    training step (0 for the other kinds). Contexts i = 0, 1, ... of the stream are a function of
    this key and i only."""

    kind: int
    seed: int
    step: int = 0

    def __post_init__(self):
        if self.kind not in KIND_NAMES:
            raise ValueError(f"unknown stream kind {self.kind!r}")
        if not 0 <= int(self.step) < 2**32:
            raise ValueError(f"a stream's step must be in [0, 2^32), got {self.step}")
        object.__setattr__(self, "seed", int(self.seed) % 2**64)  # (a negative seed: its two's complement)
        object.__setattr__(self, "step", int(self.step))


def step_seed(seed: int, step: int) -> StreamKey:
    """The stream of the training batch at `step`: a function of (seed, step) only, so runs that
    share a seed share their data stream whatever their depth, and a resumed run needs no RNG state."""
    return StreamKey(TRAIN, int(seed), int(step))


def eval_stream_seed(eval_seed: int) -> StreamKey:
    """The stream of a run's evaluation contexts (shared by every run of one data configuration)."""
    return StreamKey(EVAL, int(eval_seed))


def monitor_seed(eval_seed: int) -> StreamKey:
    """The stream of the convergence monitor's fixed contexts: apart from the evaluation set."""
    return StreamKey(MONITOR, int(eval_seed))


def stream_key(key) -> StreamKey:
    """A StreamKey as given; a bare int n: the evaluation stream of n (`eval_contexts(cfg, n, cfg.eval_seed)`)."""
    if isinstance(key, StreamKey):
        return key
    if isinstance(key, bool) or not isinstance(key, int):
        raise TypeError(f"a context stream is a seeds.StreamKey or an int seed, got {type(key).__name__}")
    return eval_stream_seed(key)


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


def cluster_stream(K: int, d: int) -> StreamKey:
    """The stream of the K fixed rotations of clustered contexts at dimension d (contexts 0..K-1)."""
    return StreamKey(CLUSTER, cluster_seed(K, d))


def generator(seed: int, device="cpu") -> torch.Generator:
    """A torch generator seeded with `seed` on `device` (the CPU unless a caller says otherwise)."""
    return torch.Generator(device=device).manual_seed(int(seed))


__all__ = ["StreamKey", "stream_key", "cluster_stream", "ADHOC", "TRAIN", "EVAL", "MONITOR", "CLUSTER", "KIND_NAMES", "step_seed", "eval_stream_seed", "monitor_seed", "init_seed", "transformer_init_seed", "cluster_seed",
           "generator", "MONITOR_SEED_OFFSET", "CLUSTER_SEED", "SPECIALISATION_NULL_SEED", "THEORY_SEED",
           "BOOTSTRAP_SEED", "BENCH_SEED"]
