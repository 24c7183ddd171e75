"""RowAdam: row-wise Adam over a pack's parameters (a learning rate and step count per model)."""

import pytest
import torch

from depthscale.config.run import make_config
from depthscale.kinds.lookup import build_pack
from depthscale.train.optim import ADAM_BETAS, ADAM_EPS, RowAdam


def _reference_step(opt: RowAdam, lr_M: torch.Tensor, clip: float, mult: dict) -> None:
    """One step of every model in torch.optim.Adam's in-place arithmetic, tensor by tensor."""
    M = opt.pack.M
    if clip > 0:
        sq = torch.zeros(M)
        for n, p in opt.params.items():
            sq.index_add_(0, opt.owner[n], p.grad.pow(2).reshape(p.shape[0], -1).sum(1))
        scale_M = torch.clamp(clip / (sq.sqrt() + 1e-12), max=1.0)
    opt.t += 1
    bc1, bc2 = 1 - ADAM_BETAS[0] ** opt.t, 1 - ADAM_BETAS[1] ** opt.t
    step_M, sqrt_bc2_M = (-lr_M.double() / bc1).to(lr_M.dtype), bc2.sqrt().to(lr_M.dtype)
    for n, p in opt.params.items():
        own, shape, g = opt.owner[n], (-1,) + (1,) * (p.dim() - 1), p.grad
        if clip > 0:
            g.mul_(scale_M[own].view(shape))
        opt.m[n].lerp_(g, 1 - ADAM_BETAS[0])
        opt.v[n].mul_(ADAM_BETAS[1]).addcmul_(g, g, value=1 - ADAM_BETAS[1])
        denom = opt.v[n].sqrt().div_(sqrt_bc2_M[own].view(shape)).add_(ADAM_EPS)
        step_n = step_M * mult[n] if n in mult else step_M
        with torch.no_grad():
            p.addcmul_(opt.m[n].div(denom), step_n[own].view(shape))
        p.grad = None


@pytest.mark.parametrize("clip", [0.0, 0.5])
def test_row_adam_is_adams_arithmetic_tensor_by_tensor_bit_for_bit(clip):
    # RowAdam against its per-tensor arithmetic written out here (a form that regroups its ops, a
    # foreach or a fused kernel, must keep these bits), several steps, per-model rates, multipliers
    cfgs = [make_config("smoke", model="nonlinear", L=L, seed=s) for s in (0, 1) for L in (1, 3)]
    packs = [build_pack(cfgs), build_pack(cfgs)]
    mult = {"Wq": torch.tensor([1.0, 2.0, 0.5, 3.0]), "Wk": torch.tensor([1.0, 2.0, 0.5, 3.0])}
    opts = [RowAdam(packs[0], mult), RowAdam(packs[1], mult)]
    g = torch.Generator().manual_seed(0)
    lr_M = torch.tensor([1e-3, 2e-3, 5e-4, 1e-2])
    for _ in range(4):
        grads = {n: torch.randn(p.shape, generator=g) for n, p in packs[0].named_parameters()}
        for pk in packs:
            for n, p in pk.named_parameters():
                p.grad = grads[n].clone()
        opts[0].step(lr_M, torch.ones(4, dtype=torch.bool), clip)
        _reference_step(opts[1], lr_M, clip, mult)
    for (n, a), (_, b) in zip(packs[0].named_parameters(), packs[1].named_parameters()):
        assert torch.equal(a, b), n
        assert torch.equal(opts[0].m[n], opts[1].m[n]) and torch.equal(opts[0].v[n], opts[1].v[n]), n

