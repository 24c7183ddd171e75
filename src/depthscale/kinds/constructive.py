"""The constructive start of the controlled nonlinear model (RunConfig.qk_init = "constructive";
SPEC §3.4's recipe grid): layer l of a depth-L model starts as the l-th head of the best
equal-weight stack of L cosine-softmax heads with one gain (softmax_floor.best_stack_on), fitted on
the run's *monitor* contexts (never the evaluation set), plus the qk_std noise of the faithful start.

The stack is a setting of the model: with orthonormal columns of W_x the pre-norm makes the test
row's score N x_hat_test^T W_x^T W_q^T W_k W_x x_hat_i, so W_q^T W_k = (tau_l / N) I gives layer l the
score tau_l cos(x_i, x_test); and W_o W_v W_y = g sets the one gain. With the noise off the untrained
model's loss on the monitor contexts is the stack's (tests/test_constructive.py).
"""

from __future__ import annotations

import math

import torch

from depthscale.base import seeds
from depthscale.data.measurements import eval_contexts
from depthscale.theory.softmax_floor import best_stack_on, stack_moments

_MOMENTS: dict[tuple, dict] = {}  # the cosine heads' moments per monitor set (one per spectrum and geometry)


def monitor_key(cfg) -> tuple:
    """Everything the monitor contexts of a run depend on (its data config and the monitor's size and seed)."""
    return (cfg.d, cfg.P, cfg.a, cfg.b, cfg.task, cfg.k, cfg.noise, cfg.clusters, cfg.monitor_contexts, cfg.eval_seed)


def monitor_moments(cfg) -> dict:
    """softmax_floor.stack_moments on the run's monitor contexts (seeds.monitor_seed, drawn on the
    CPU: the same contexts the trainer's monitor sees), cached per monitor set."""
    key = monitor_key(cfg)
    if key not in _MOMENTS:
        chunks = eval_contexts(cfg, cfg.monitor_contexts, seeds.monitor_seed(cfg.eval_seed), "cpu")
        cat = lambda name: torch.cat([getattr(c, name) for c in chunks])  # noqa: E731
        _MOMENTS[key] = stack_moments(cat("X_BxPxd"), cat("xq_Bxd"), cat("y_BxP"), cat("ystar_B"))
    return _MOMENTS[key]


_STACKS: dict[tuple, dict] = {}  # the stack per (monitor set, depth): every seed of a depth starts from it


def constructive_stack(cfg) -> dict:
    """The depth-cfg.L stack a constructive run starts from: per-layer temperatures, gain and its
    in-sample loss on the monitor contexts (softmax_floor.best_stack_on) — the best stack of L heads,
    or with construct_heads = h the best stack of h heads copied L / h times (the same equal-weight
    mixture, so the same gain and loss: e.g. the best single head in every layer)."""
    h = getattr(cfg, "construct_heads", 0) or cfg.L
    key = monitor_key(cfg) + (h,)
    if key not in _STACKS:
        _STACKS[key] = best_stack_on(monitor_moments(cfg), h)
    stack = dict(_STACKS[key])
    return dict(stack, temperatures=list(stack["temperatures"]) * (cfg.L // h), L=cfg.L)


def constructive_factors(stack: dict, N: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W_q, W_k (L x N x N) with W_q^l^T W_k^l = (tau_l / N) I: sign(tau) sqrt(|tau|/N) I and sqrt(|tau|/N) I."""
    tau = torch.tensor(stack["temperatures"], dtype=torch.float64)
    s = (tau.abs() / N).sqrt()
    eye = torch.eye(N, dtype=torch.float64)
    Wq = (torch.sign(tau) * s).view(-1, 1, 1) * eye
    Wk = s.view(-1, 1, 1) * eye
    return Wq.float(), Wk.float()


def apply_stack(p: dict, stack: dict) -> dict:
    """Drawn parameters `p` (W_q, W_k carry the qk_std noise) moved onto the stack: W_q, W_k plus the
    stack's factors, and W_o = g u / |u|^2 with u = W_v W_y, so the gain W_o W_v W_y is the stack's g."""
    L, N, _ = p["Wq"].shape
    if len(stack["temperatures"]) != L:
        raise ValueError(f"a constructive stack of {len(stack['temperatures'])} heads for a model of {L} layers")
    Wq, Wk = constructive_factors(stack, N)
    u = p["Wv"] @ p["Wy"]
    gain = float(stack["gain"])
    out = dict(p, Wq=p["Wq"] + Wq, Wk=p["Wk"] + Wk, Wo=(gain * u / u.pow(2).sum()).to(p["Wo"].dtype))
    if not math.isfinite(gain):
        raise ValueError(f"constructive stack gain must be finite, got {gain!r}")
    return out


__all__ = ["monitor_moments", "constructive_stack", "constructive_factors", "apply_stack", "monitor_key"]
