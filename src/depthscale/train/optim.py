"""The optimiser of a pack (SPEC §4): Adam applied row-wise, with a learning rate per model.

Each parameter row belongs to one model (the pack's `row_owner`), so a model in a pack is updated
exactly as it would be alone, and a stopped model's rows are frozen. Model-agnostic: it reads the
pack only through the model protocol (kinds.base.ModelKind: `M`, `row_owner`, `model_slice`).
"""

from __future__ import annotations

import math

import torch

from depthscale.config.run import RunConfig
from depthscale.kinds.base import ModelKind

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


class RowAdam:
    """Adam over pack parameters with a learning rate per model and a mask of active models."""

    def __init__(self, pack: ModelKind, lr_mult: dict | None = None):
        self.pack = pack
        self.params = dict(pack.named_parameters())
        # optional per-parameter, per-model rate multipliers {name: tensor (M,)} (qk_lr = relative)
        self.lr_mult = {n: t.to(next(iter(self.params.values())).device) for n, t in (lr_mult or {}).items()}
        self.m = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.v = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.t = torch.zeros(pack.M, dtype=torch.float64)  # steps taken per model
        self.owner = {n: pack.row_owner(n) for n in self.params}

    @torch.no_grad()
    def step(self, lr_M: torch.Tensor, active_M: torch.Tensor, clip: float) -> None:
        dev = next(iter(self.params.values())).device
        all_active = bool(active_M.all())  # (read before the copy to the device: no sync)
        lr_M, active_M = lr_M.to(dev), active_M.to(dev)
        if clip > 0:  # per-model global grad-norm clipping
            sq = torch.zeros(self.pack.M, device=dev)
            for n, p in self.params.items():
                if p.grad is not None:  # every parameter has a leading row axis (models or layers)
                    sq.index_add_(0, self.owner[n], p.grad.pow(2).reshape(p.shape[0], -1).sum(1))
            scale_M = torch.clamp(clip / (sq.sqrt() + 1e-12), max=1.0)
        else:
            scale_M = torch.ones(self.pack.M, device=dev)
        self.t += active_M.cpu().double()
        t = self.t.clamp(min=1).to(dev)
        bc1 = 1 - ADAM_BETAS[0] ** t
        bc2 = 1 - ADAM_BETAS[1] ** t
        if all_active:  # the common case: in place, in torch.optim.Adam's arithmetic
            step_M = (-lr_M.double() / bc1).to(lr_M.dtype)
            sqrt_bc2_M = bc2.sqrt().to(lr_M.dtype)
            for n, p in self.params.items():
                if p.grad is None:
                    continue
                own = self.owner[n]
                shape = (-1,) + (1,) * (p.dim() - 1)
                g = p.grad
                if clip > 0:
                    g.mul_(scale_M[own].view(shape).to(p.dtype))
                self.m[n].lerp_(g, 1 - ADAM_BETAS[0])
                self.v[n].mul_(ADAM_BETAS[1]).addcmul_(g, g, value=1 - ADAM_BETAS[1])
                denom = self.v[n].sqrt().div_(sqrt_bc2_M[own].view(shape)).add_(ADAM_EPS)
                step_n = step_M * self.lr_mult[n] if n in self.lr_mult else step_M
                p.addcmul_(self.m[n].div(denom), step_n[own].view(shape).to(p.dtype))
                p.grad = None
            return
        for n, p in self.params.items():
            if p.grad is None:
                continue
            own = self.owner[n]
            shape = (-1,) + (1,) * (p.dim() - 1)
            g = p.grad * scale_M[own].view(shape).to(p.dtype)
            act = active_M[own].view(shape)
            m_new = ADAM_BETAS[0] * self.m[n] + (1 - ADAM_BETAS[0]) * g
            v_new = ADAM_BETAS[1] * self.v[n] + (1 - ADAM_BETAS[1]) * g * g
            self.m[n] = torch.where(act, m_new, self.m[n])
            self.v[n] = torch.where(act, v_new, self.v[n])
            lr_n = lr_M * self.lr_mult[n] if n in self.lr_mult else lr_M
            upd = (lr_n[own] / bc1[own]).view(shape) * self.m[n] / ((self.v[n] / bc2[own].view(shape)).sqrt() + ADAM_EPS)
            p.sub_(torch.where(act, upd.to(p.dtype), torch.zeros_like(p)))
            p.grad = None

    def state_of(self, m: int) -> dict:
        """Model m's moments and step count (the pack knows which rows are model m's)."""
        return {"m": {n: self.pack.model_slice(n, m, self.m[n]).clone() for n in self.params},
                "v": {n: self.pack.model_slice(n, m, self.v[n]).clone() for n in self.params},
                "t": float(self.t[m])}

    def load_state(self, m: int, st: dict) -> None:
        for n in self.params:
            self.pack.model_slice(n, m, self.m[n]).copy_(st["m"][n])
            self.pack.model_slice(n, m, self.v[n]).copy_(st["v"][n])
        self.t[m] = st["t"]


def qk_lr_mults(cfgs: list[RunConfig]) -> dict:
    """RowAdam's rate multipliers for qk_lr = relative: W_q and W_k of a gradient-descent start
    (entries sqrt(gd_step L N) on the diagonal) learn at lr times that scale, so the start's step
    size gd_step can change by a fixed fraction per optimiser step at any depth; 1 elsewhere."""
    mult = torch.tensor([math.sqrt(c.gd_step * c.L * c.N) if c.qk_lr == "relative" and c.qk_init == "gd" else 1.0
                         for c in cfgs], dtype=torch.float32)
    return {} if bool((mult == 1).all()) else {"Wq": mult, "Wk": mult}


__all__ = ["RowAdam", "qk_lr_mults", "ADAM_BETAS", "ADAM_EPS"]
