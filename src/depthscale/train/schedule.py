"""How fast and how long a run trains (SPEC §4): its learning rate per depth, the warmup and cosine
schedule, and the convergence rule that stops it."""

from __future__ import annotations

import math

import torch

from depthscale.config.run import RunConfig, scaled_lr


def base_lr(cfg: RunConfig) -> float:
    """A run's learning rate before the schedule: lr (at L = 1) scaled to its depth, lr * L^lr_depth_exp.
    A looped run (loop = B) scales with its B distinct layers: each shared row's gradient sums its
    L/B copies of a 1/L branch, as a B-layer model's does, so a loop = B model at any depth starts
    and trains as the untied B-layer model would (for the nonlinear ensemble it *is* that model)."""
    return scaled_lr(cfg.lr, cfg.loop or cfg.L, cfg.lr_depth_exp)  # (config.validate bounds it the same way)


def base_lrs(cfgs: list[RunConfig]) -> torch.Tensor:
    """`base_lr` of every run of a pack (float32, M)."""
    return torch.tensor([base_lr(c) for c in cfgs], dtype=torch.float32)


def lr_factor(cfg: RunConfig, step: int) -> float:
    """Linear warmup, then cosine decay to 0 at max_steps (or constant)."""
    if cfg.warmup and step < cfg.warmup:
        return (step + 1) / cfg.warmup
    if cfg.schedule == "constant":
        return 1.0
    span = max(1, cfg.max_steps - cfg.warmup)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - cfg.warmup) / span)))


def converged(history: list[float], patience: int, rel_tol: float) -> bool:
    """No relative improvement > rel_tol of the best monitor loss over the last `patience` evals."""
    if len(history) <= patience:
        return False
    before = min(history[:-patience])
    recent = min(history[-patience:])
    return recent > before * (1 - rel_tol)


__all__ = ["base_lr", "base_lrs", "lr_factor", "converged"]
