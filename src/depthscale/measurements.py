"""Measurements on fresh evaluation contexts (SPEC §5).

R_L with its standard error; the exact decomposition R_L = C_L + (A_L - C_L)/L; mode-wise losses;
top-1 attention mass; selection loss and its percentiles; learned m, mean A_1 and its rho fit.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from depthscale.contexts import Contexts, make_generator, sample_for

PERCENTILES = tuple(range(0, 101, 5))


def decomposition(f_BxL: torch.Tensor, ystar_B: torch.Tensor) -> dict:
    """R_L, its SE, A_L, C_L from per-layer predictors; R_L = C_L + (A_L - C_L)/L exactly."""
    e_BxL = (f_BxL - ystar_B.unsqueeze(1)).double()
    L = e_BxL.shape[1]
    sq_B = (e_BxL.mean(1)) ** 2
    n = sq_B.numel()
    R = sq_B.mean().item()
    se = (sq_B.std(unbiased=True).item() / math.sqrt(n)) if n > 1 else float("nan")
    A = e_BxL.pow(2).mean().item()
    if L > 1:
        cross = e_BxL.sum(1).pow(2) - e_BxL.pow(2).sum(1)  # sum over l != m of e_l e_m
        C = (cross.mean() / (L * (L - 1))).item()
    else:
        C = float("nan")
    return {"R": R, "R_se": se, "A": A, "C": C}


def input_weights(pack, m: int, ctx: Contexts) -> tuple[torch.Tensor, torch.Tensor]:
    """w = d y_hat / d y_in (exact: y_hat is linear in the labels for every model but
    single_stream), and the model's output. Returns (w_BxP, y_hat_B)."""
    y = ctx.y_BxP.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = pack(ctx.X_BxPxd, y, ctx.xq_Bxd, models=[m])[0]
        (w,) = torch.autograd.grad(out.y_hat_B.sum(), y)
    return w, out


def modewise(u_Bxd: torch.Tensor, ctx: Contexts) -> torch.Tensor:
    """Per-context mode losses omega_k ((O^T (u - t))_k)^2, Bxd; their mean over contexts is R_k."""
    v = torch.einsum("bij,bi->bj", ctx.O_Bxdxd, u_Bxd - ctx.t_Bxd)
    return ctx.omega_d * v.pow(2)


def selection_loss(p_BxLxP: torch.Tensor, sel_Bxk: torch.Tensor) -> torch.Tensor:
    """E_L(c) = || p_bar_L(c) - p* ||^2, p* = 1/k on the selected tokens (SPEC §5)."""
    pbar = p_BxLxP.mean(1)
    k = sel_Bxk.shape[1]
    pstar = torch.zeros_like(pbar).scatter_(1, sel_Bxk, 1.0 / k)
    return (pbar - pstar).pow(2).sum(1)


def top1_mass(p_BxLxP: torch.Tensor, sel_Bxk: torch.Tensor) -> torch.Tensor:
    """Attention on the matching token, averaged over layers, per context (easy task)."""
    return torch.gather(p_BxLxP, 2, sel_Bxk[:, :1].unsqueeze(1).expand(-1, p_BxLxP.shape[1], 1)).squeeze(-1).mean(1)


def rho_fit(A_PxP: np.ndarray) -> dict:
    """Least squares A ~ rho I + (1 - rho) 11^T/P: rho and R^2 over the matrix entries."""
    P = A_PxP.shape[0]
    J = np.full((P, P), 1.0 / P)
    D = np.eye(P) - J
    rho = float(((A_PxP - J) * D).sum() / (D * D).sum())
    fit = rho * np.eye(P) + (1 - rho) * J
    ss_res = float(((A_PxP - fit) ** 2).sum())
    ss_tot = float(((A_PxP - A_PxP.mean()) ** 2).sum())
    return {"rho": rho, "rho_r2": 1 - ss_res / ss_tot if ss_tot > 0 else float("nan")}


def eval_contexts(cfg, n: int, seed: int, device="cpu", chunk: int = 1024):
    """The fixed evaluation set of a data config, as chunks (same for every model and depth)."""
    gen = make_generator(seed, device)
    out, left = [], n
    while left > 0:
        b = min(chunk, left)
        out.append(sample_for(cfg, b, gen, device))
        left -= b
    return out


def measure(pack, m: int, chunks: list[Contexts], task: str) -> dict:
    """Every SPEC §5 measurement of model m of the pack on the evaluation chunks."""
    kind = pack.kind
    L = pack.depths[m]
    f_all, ys_all, mode_all, sel_all, top1_all, ystar_all = [], [], [], [], [], []
    A1_sum, nA1 = None, 0
    for ctx in chunks:
        if kind != "single_stream":
            w, out = input_weights(pack, m, ctx)
            u = torch.einsum("bp,bpd->bd", w, ctx.X_BxPxd)
            mode_all.append(modewise(u, ctx).double().sum(0))
        else:
            with torch.no_grad():
                out = pack(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, models=[m])[0]
        f_all.append(out.f_BxL.detach())
        ys_all.append(ctx.ystar_B)
        ystar_all.append(ctx.ystar_B.double())
        if out.p_BxLxP is not None:
            p = out.p_BxLxP.detach()
            if task == "easy":
                top1_all.append(top1_mass(p, ctx.sel_Bxk))
            else:
                sel_all.append(selection_loss(p, ctx.sel_Bxk))
        if out.extras and "A1_BxPxP" in out.extras:
            s = out.extras["A1_BxPxP"].detach().double().sum(0)
            A1_sum = s if A1_sum is None else A1_sum + s
            nA1 += ctx.B
    f = torch.cat(f_all)
    ystar = torch.cat(ys_all)
    res = decomposition(f, ystar)
    n = f.shape[0]
    res.update(L=L, n_eval=n, var_ystar=torch.cat(ystar_all).var().item())
    res["R_rel"] = res["R"] / res["var_ystar"]
    if mode_all:
        Rk = (torch.stack(mode_all).sum(0) / n).cpu().numpy()
        res["mode_R"] = Rk.tolist()
        res["mode_R_sum"] = float(Rk.sum())
    if top1_all:
        res["top1_mass"] = torch.cat(top1_all).double().mean().item()
    if sel_all:
        E = torch.cat(sel_all).double().cpu().numpy()
        res["selection_mean"] = float(E.mean())
        res["selection_percentiles"] = np.percentile(E, PERCENTILES).tolist()
    if kind == "context_updates":
        res["m"] = float(pack.m[m].item())
        A1 = (A1_sum / nA1).cpu().numpy()
        res["A1_mean"] = A1.tolist() if A1.shape[0] <= 64 else A1[:64, :64].tolist()
        res.update(rho_fit(A1))
    return res


__all__ = ["decomposition", "input_weights", "modewise", "selection_loss", "top1_mass", "rho_fit",
           "eval_contexts", "measure", "PERCENTILES"]
