"""Contexts and tasks (SPEC §2): power-law spectra, a Haar rotation per context, teacher,
inputs, labels, and the easy / difficult retrieval targets.

Shapes: B contexts, P context pairs, d input dims, k selected tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from depthscale.errors import InputError


def spectrum(d: int, exponent: float, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """k^(-exponent) for k = 1..d (no normalisation)."""
    k = torch.arange(1, d + 1, dtype=torch.float64)
    return (k ** (-float(exponent))).to(dtype=dtype, device=device)


def haar_orthogonal(B: int, d: int, gen: torch.Generator, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """B Haar-random orthogonal matrices (QR of a Gaussian, sign of diag(R) fixed). O_Bxdxd."""
    G = torch.randn(B, d, d, generator=gen, dtype=dtype, device=device)
    Q, R = torch.linalg.qr(G)
    sign = torch.sign(torch.diagonal(R, dim1=-2, dim2=-1))
    sign = torch.where(sign == 0, torch.ones_like(sign), sign)
    return Q * sign.unsqueeze(-2)


@dataclass
class Contexts:
    """A batch of B contexts. y* = beta . t exactly for noise-free labels."""

    X_BxPxd: torch.Tensor  # context inputs x_1..x_P
    y_BxP: torch.Tensor  # context labels y_i = beta . x_i (+ noise)
    xq_Bxd: torch.Tensor  # test input x_test
    ystar_B: torch.Tensor  # target y*
    sel_Bxk: torch.Tensor  # selected indices (easy: the matched j, k = 1)
    t_Bxd: torch.Tensor  # target input combination: x_j (easy) or mean of selected x_i (difficult)
    beta_Bxd: torch.Tensor  # teacher (for measurements only; models never see it)
    O_Bxdxd: torch.Tensor  # rotation of this context's spectra
    lam_d: torch.Tensor  # input spectrum lambda_k
    omega_d: torch.Tensor  # teacher spectrum omega_k

    @property
    def B(self) -> int:
        return self.X_BxPxd.shape[0]


def top_k_by_cosine(X_BxPxd: torch.Tensor, xq_Bxd: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k context inputs with the largest cosine to x_test, sorted by relevance."""
    s_BxP = torch.nn.functional.cosine_similarity(X_BxPxd, xq_Bxd.unsqueeze(1), dim=-1)
    return torch.topk(s_BxP, k, dim=-1, largest=True, sorted=True).indices


def sample_contexts(B: int, d: int, P: int, a: float, b: float, task: str, k: int,
                    gen: torch.Generator, noise: float = 0.0, dtype=torch.float32,
                    device="cpu") -> Contexts:
    """Sample B independent contexts on `device` from the generator `gen` (SPEC §2)."""
    if task not in ("easy", "difficult"):
        raise InputError(f"task must be easy or difficult, got {task!r}")
    lam = spectrum(d, a, dtype, device)
    omega = spectrum(d, b, dtype, device)
    O = haar_orthogonal(B, d, gen, dtype, device)
    # x = O diag(sqrt(lam)) z has covariance Sigma = O diag(lam) O^T; same for beta with Omega.
    zX = torch.randn(B, P + 1, d, generator=gen, dtype=dtype, device=device)
    X_all = torch.einsum("bij,bpj->bpi", O, zX * lam.sqrt())
    zb = torch.randn(B, d, generator=gen, dtype=dtype, device=device)
    beta = torch.einsum("bij,bj->bi", O, zb * omega.sqrt())
    X, xq = X_all[:, :P], X_all[:, P]
    y = torch.einsum("bpd,bd->bp", X, beta)
    if noise > 0:
        y = y + noise * torch.randn(B, P, generator=gen, dtype=dtype, device=device)
    if task == "easy":
        j = torch.randint(0, P, (B,), generator=gen, device=device)
        sel = j.unsqueeze(1)
        xq = X[torch.arange(B, device=device), j]
    else:
        sel = top_k_by_cosine(X, xq, k)
    t = torch.gather(X, 1, sel.unsqueeze(-1).expand(-1, -1, d)).mean(1)
    ystar = torch.gather(y, 1, sel).mean(1)
    return Contexts(X, y, xq, ystar, sel, t, beta, O, lam, omega)


def sample_for(cfg, B: int, gen: torch.Generator, device="cpu", dtype=torch.float32) -> Contexts:
    """Contexts for a RunConfig's data fields."""
    return sample_contexts(B, cfg.d, cfg.P, cfg.a, cfg.b, cfg.task, cfg.k, gen, cfg.noise, dtype, device)


def make_generator(seed: int, device="cpu") -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen


def step_seed(seed: int, step: int) -> int:
    """Seed of the training batch at `step`: a function of (seed, step) only, so runs that share a
    seed share their data stream whatever their depth, and a resumed run needs no RNG state."""
    return (int(seed) * 1_000_003 + int(step) * 7_919 + 17) % (2**63 - 1)


__all__ = ["Contexts", "sample_contexts", "sample_for", "spectrum", "haar_orthogonal",
           "top_k_by_cosine", "make_generator", "step_seed"]
