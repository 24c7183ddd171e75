"""The benchmark's reference: a depth sweep trained the way a research script trains it.

One model at a time, one layer at a time, each layer written as the paper writes it (SPEC §3.1,
eqs. 9-10): tokens X = [x_1..x_P, x_test], full Q, K, V for all P+1 tokens, the (P+1)x(P+1)
score matrix, the mask M(0) (only the test row is active, over the context), the residual update
H_y <- H_y + (1/L) V A^T, and a `torch.optim.Adam` per model with a warmup + cosine schedule and
grad-norm clipping. Contexts are batched and every op is a vectorised torch op: this is careful
code, not deliberately slow code. It is what depthscale's packed engine is measured against
(bench.py; `benchmarks/naive_loop.py` runs it alone).

Taken from depthscale so that the two can be compared step for step: the contexts (`sample_for`,
the same (seed, step) stream), the initial parameters (`models.Nonlinear.init_params`), the pre-norm
(`models.rms_norm`) and the learning-rate schedule (`training.base_lr`, `training.lr_factor`).
A research script would have its own versions of these, at the same cost.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from depthscale.base.errors import InputError
from depthscale.config.run import RunConfig
from depthscale.base.seeds import step_seed
from depthscale.data.contexts import make_generator, sample_for
from depthscale.kinds.base import rms_norm
from depthscale.kinds.ensemble import Nonlinear
from depthscale.kinds.lookup import model_class
from depthscale.train.schedule import base_lr, lr_factor


class NaiveAttentionStack(nn.Module):
    """The controlled nonlinear model (SPEC §3.1), literally: per-layer W_q, W_k; shared W_v."""

    def __init__(self, cfg: RunConfig):
        super().__init__()
        if model_class(cfg.model) is not Nonlinear:
            raise InputError("the naive baseline implements the nonlinear model only")
        p = Nonlinear.init_params(cfg.d, cfg.N, cfg.L, cfg.qk_std, cfg.seed, cfg.qk_init, cfg.wx_init, cfg.gain_init)
        self.L = cfg.L
        self.Wx = nn.Parameter(p["Wx"])  # N x d
        self.Wy = nn.Parameter(p["Wy"])  # N
        self.Wo = nn.Parameter(p["Wo"])  # N
        self.Wv = nn.Parameter(p["Wv"])  # N x N
        self.Wq = nn.ParameterList([nn.Parameter(p["Wq"][l]) for l in range(cfg.L)])  # N x N each
        self.Wk = nn.ParameterList([nn.Parameter(p["Wk"][l]) for l in range(cfg.L)])

    def forward(self, X_BxPxd, y_BxP, xq_Bxd):
        B, P, _ = X_BxPxd.shape
        T = P + 1
        tokens_BxTxd = torch.cat([X_BxPxd, xq_Bxd.unsqueeze(1)], 1)  # [x_1..x_P, x_test]
        y_in_BxT = torch.cat([y_BxP, torch.zeros_like(y_BxP[:, :1])], 1)  # (y_1..y_P, 0)
        # mask M(0): the test row attends to the P context tokens; nothing else is active
        mask_TxT = torch.zeros(T, T, dtype=torch.bool, device=X_BxPxd.device)
        mask_TxT[P, :P] = True
        Hx = tokens_BxTxd @ self.Wx.T  # H_x = W_x X, fixed for all layers
        Hx_hat = rms_norm(Hx)  # pre-norm
        Hy = y_in_BxT.unsqueeze(-1) * self.Wy  # H_y^0 = W_y y_in
        for l in range(self.L):
            Q = Hx_hat @ self.Wq[l].T
            K = Hx_hat @ self.Wk[l].T
            V = Hy @ self.Wv.T
            S = Q @ K.transpose(1, 2)  # B x (P+1) x (P+1)
            # A = M(0) * softmax over the positions a row may attend to
            A = torch.softmax(S.masked_fill(~mask_TxT, torch.finfo(S.dtype).min), -1) * mask_TxT
            Hy = Hy + (A @ V) / self.L  # H_y^l = H_y^{l-1} + (1/L) V A^T
        return Hy[:, P] @ self.Wo  # y_hat = W_o h_test^L


def train_naive(cfg: RunConfig, steps: int, device="cpu", on_step=None,
                amp_dtype: torch.dtype | None = None) -> tuple[NaiveAttentionStack, list[float]]:
    """Train one model for `steps` steps on fresh contexts; returns the model and its losses.
    `on_step(step, seconds)` is called after each step with that step's wall time (the loss is
    read back every step, which also synchronises a GPU). `amp_dtype`: autocast the forward."""
    model = NaiveAttentionStack(cfg).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8)
    lr0 = base_lr(cfg)
    losses = []
    for step in range(steps):
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = lr0 * lr_factor(cfg, step)
        ctx = sample_for(cfg, cfg.batch, make_generator(step_seed(cfg.seed, step), device), device)
        with torch.autocast(torch.device(device).type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = (model(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd).float() - ctx.ystar_B).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, time.perf_counter() - t0)
    return model, losses


__all__ = ["NaiveAttentionStack", "train_naive"]
