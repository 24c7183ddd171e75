"""Parameter draws of the controlled attention kinds (SPEC §3; the init fields of RunConfig).

One model at a time, from its own seed, on the CPU: a pack's parameters are its models' draws
stacked (kinds.attention), so a model starts identically alone or in a pack, on any device.
"""

from __future__ import annotations

import math

import torch

from depthscale.base import seeds


def draw_params(d: int, N: int, L: int, qk_std: float, seed: int, qk_init: str = "independent",
                wx_init: str = "gaussian", gain_init: str = "random", spread: tuple = (7.0, 30.0, 0.5),
                gd_step: float = 0.5, layer_values: bool = False, construct: dict | None = None) -> dict:
    """One model's parameters W_x, W_y, W_o, W_v, W_q, W_k (SPEC §3), drawn on the CPU from its own
    seed: identical whether the model is trained alone or inside a pack, on any device.
    `layer_values`: one W_v per layer (L x N x N, the LayerValues kind), else one shared W_v. A
    kind with further parameters adds them after these draws (kinds.context_updates: m).
    `construct`: qk_init = constructive's stack (kinds.constructive.constructive_stack), required there."""
    g = seeds.generator(seeds.init_seed(seed))
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    p = {
        "Wx": r(N, d) / d**0.5,  # "orthogonal": replaced below by orthonormal columns (N >= d)
        "Wy": r(N),
        "Wo": r(N) / N**0.5,
    }
    p["Wv"] = r(L, N, N) / N**0.5 if layer_values else r(N, N) / N**0.5
    p["Wq"] = r(L, N, N) * qk_std
    if wx_init == "orthogonal":  # RMS-normed W_x x is then sqrt(N) x/|x|: scores see cosines
        Q, R = torch.linalg.qr(p["Wx"])
        p["Wx"] = Q * torch.sign(torch.diagonal(R)).unsqueeze(0)
    if gain_init == "positive":
        # The data are symmetric under x -> -x, so a model can also learn to attend to the most
        # *anti*-aligned tokens and flip the sign through g = W_o W_v W_y < 0: a mirror basin that is
        # much worse on the easy task (cos = -0.5 at best instead of +1). Start in the aligned one.
        gain = torch.einsum("n,...nk,k->...", p["Wo"], p["Wv"], p["Wy"]).mean()
        if gain < 0:
            p["Wo"] = -p["Wo"]
    # "tied": W_k^l starts equal to W_q^l (then trained freely), so each layer's score matrix
    # W_q^T W_k starts as a small random positive semi-definite metric, a different one per layer
    p["Wk"] = p["Wq"].clone() if qk_init == "tied" else r(L, N, N) * qk_std
    if qk_init == "spread":
        base = spread_metric_factors(p["Wx"], L, *spread, g)
        p["Wq"], p["Wk"] = base + p["Wq"], base + p["Wk"]
    if qk_init == "constructive":  # layer l starts as head l of the best cosine stack, plus the noise drawn above
        if construct is None or layer_values:
            raise ValueError("qk_init = constructive needs its stack (kinds.constructive) and one shared W_v")
        from depthscale.kinds.constructive import apply_stack

        p = apply_stack(p, construct)
    if qk_init == "gd":  # linear model: layer l starts as one in-context gradient-descent step
        p.update(gd_start(p["Wy"], L, N, gd_step, qk_std, g))
    return p


def gd_start(Wy_N: torch.Tensor, L: int, N: int, step: float, noise: float, g: torch.Generator) -> dict:
    """The linear model's gradient-descent start (qk_init = gd): W_q = W_k = sqrt(step L N) I, so
    B_l = W_x^T W_k^T W_q W_x / N = step L I (orthonormal W_x), W_v = I and W_o = W_y / |W_y|^2
    (W_o . W_y = 1), each plus `noise` times a standard Gaussian. Then (SPEC §3.2)
    G_l = G_{l-1} (I - step S): L steps of in-context gradient descent of size `step` on the
    least-squares loss of the context, y_hat = beta^T (I - (I - step S)^L) x_test — the shared-step
    (constrained) residual polynomial of SPEC §6.2 at gamma = step L. Training starts from there."""
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    s = math.sqrt(step * L * N)
    eye = torch.eye(N)
    return {"Wq": s * eye.expand(L, N, N) + noise * r(L, N, N), "Wk": s * eye.expand(L, N, N) + noise * r(L, N, N),
            "Wv": eye + noise * r(N, N), "Wo": Wy_N / Wy_N.pow(2).sum()}


def spread_metric_factors(Wx_Nxd: torch.Tensor, L: int, tau_min: float, tau_max: float, sigma: float,
                          g: torch.Generator) -> torch.Tensor:
    """Per-layer factors F_l (N x N) with W_x^T F_l^T F_l W_x = (tau_l / N) R_l D_l R_l^T: layer l
    starts as a head of cosine temperature tau_l (geometric over [tau_min, tau_max]; the geometric
    mean at L = 1) whose metric has a random orientation R_l (Haar) and log-normal eigenvalues D_l
    (log-std sigma, mean 1). W_x must have orthonormal columns: RMS-normed W_x x is sqrt(N) x/|x|,
    so the score s_i = N x_hat_test^T E_l x_hat_i is tau_l times a (distorted) cosine."""
    N, d = Wx_Nxd.shape
    if L == 1:
        taus = torch.tensor([math.sqrt(tau_min * tau_max)])
    else:
        taus = tau_min * (tau_max / tau_min) ** (torch.arange(L, dtype=torch.float64) / (L - 1))
    out = torch.zeros(L, N, N)
    for l in range(L):
        Q, Rr = torch.linalg.qr(torch.randn(d, d, generator=g))
        R = Q * torch.sign(torch.diagonal(Rr)).unsqueeze(0)
        D = torch.exp(sigma * torch.randn(d, generator=g))
        D = D / D.mean()
        # F = sqrt(tau/N) [ (W_x R D^1/2)^T ; 0 ]: F^T F = (tau/N) W_x R D R^T W_x^T
        out[l, :d] = math.sqrt(float(taus[l]) / N) * (Wx_Nxd @ R * D.sqrt().unsqueeze(0)).T
    return out


__all__ = ["draw_params", "gd_start", "spread_metric_factors"]
