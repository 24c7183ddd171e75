"""The softmax-ensemble floor of the nonlinear model (SPEC §3.4; not in the paper): the best single
cosine-softmax head, the best infinitely deep ensemble of such heads (a nonnegative mixture of
temperatures with one gain), and their finite-depth companions, by Monte Carlo over contexts."""

from __future__ import annotations

import math
import sys

import numpy as np
import torch
from tqdm import tqdm

from depthscale.errors import InputError
from depthscale.theory import check_depths, check_exponent, check_int, check_k_P, spectra

SOFTMAX_FAMILY = "cosine"


def default_temperatures() -> np.ndarray:
    """The cosine-head family of the floor: temperatures -10 ... 500 (negative ones attend away
    from the query; 0 is the uniform average), geometric where the optimum lives."""
    return np.concatenate([[-10.0, -5.0, -2.0, -1.0, 0.0], np.geomspace(0.25, 500.0, 96)])


def _head_moments(a, b, k, d, P, samples, seed, temperatures, batches, device, progress):
    """Per-batch moments of the cosine-head predictions H_j = softmax(tau_j cos) . y.

    Returns G (n_b, J, J) = sum H H^T, h (n_b, J) = sum H y*, T (n_b,) = sum y*^2, n (n_b,):
    `batches` independent batches of contexts. The rotation O is fixed to the identity: a cosine
    head and the top-k selection are rotation invariant, so every moment is unchanged."""
    lam, omega = spectra(d, a, b)
    dev = torch.device(device)
    f64 = dict(dtype=torch.float64, device=dev)
    gen = torch.Generator(device=dev).manual_seed(seed)
    tau_J = torch.as_tensor(temperatures, **f64)
    J = tau_J.numel()
    sqrt_lam = torch.as_tensor(np.sqrt(lam), **f64)
    sqrt_om = torch.as_tensor(np.sqrt(omega), **f64)
    chunk = max(1, min(4096, 2**22 // (J * P)))
    per = [samples // batches + (1 if i < samples % batches else 0) for i in range(batches)]
    G = np.zeros((batches, J, J))
    h = np.zeros((batches, J))
    T = np.zeros(batches)
    with tqdm(total=samples, disable=None if progress else True, file=sys.stderr,
              desc=f"softmax floor a={a} b={b} k={k}", unit="ctx", unit_scale=True) as bar:
        for i, n_i in enumerate(per):
            done = 0
            while done < n_i:
                nb = min(chunk, n_i - done)
                x = torch.randn(nb, P, d, generator=gen, **f64) * sqrt_lam
                q = torch.randn(nb, d, generator=gen, **f64) * sqrt_lam
                beta = torch.randn(nb, d, generator=gen, **f64) * sqrt_om
                y = torch.einsum("bpd,bd->bp", x, beta)
                cos = torch.einsum("bpd,bd->bp", x / torch.linalg.vector_norm(x, dim=-1, keepdim=True),
                                   q / torch.linalg.vector_norm(q, dim=-1, keepdim=True))
                ystar = torch.gather(y, 1, torch.topk(cos, k, dim=-1).indices).mean(1)
                p = torch.softmax(tau_J.view(1, J, 1) * cos.unsqueeze(1), dim=-1)  # (nb, J, P)
                H = torch.einsum("bjp,bp->bj", p, y)
                G[i] += (H.T @ H).cpu().numpy()
                h[i] += (H.T @ ystar).cpu().numpy()
                T[i] += float(ystar.pow(2).sum())
                done += nb
                bar.update(nb)
    return G, h, T, np.asarray(per, dtype=np.float64)


def nonneg_mixture(G: np.ndarray, h: np.ndarray) -> np.ndarray:
    """argmin_{v >= 0} v^T G v - 2 h^T v (the convex QP of the ensemble floor), exactly, by NNLS on
    a square root of G: with G = A^T A and A^T c = h, |A v - c|^2 = v^T G v - 2 h^T v + const."""
    from scipy.optimize import nnls

    s, U = np.linalg.eigh((G + G.T) / 2)
    keep = s > s.max() * 1e-13
    A = np.sqrt(s[keep])[:, None] * U[:, keep].T
    c = (U[:, keep].T @ h) / np.sqrt(s[keep])
    v, _ = nnls(A, c, maxiter=50 * G.shape[0])
    return v


def _best_single(G: np.ndarray, h: np.ndarray) -> tuple[int, float]:
    """Index and gain (>= 0) of the best single head: min_j min_g g^2 G_jj - 2 g h_j."""
    gain = np.clip(h, 0, None) / np.maximum(np.diag(G), 1e-300)
    j = int(np.argmin(gain**2 * np.diag(G) - 2 * gain * h))
    return j, float(gain[j])


def best_equal_weight(G: np.ndarray, h: np.ndarray, T: float, L: int, start: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """The best depth-L stack of heads from the family: L heads (repeats allowed) averaged with
    equal weights and one common gain g >= 0, i.e. integer counts n_j summing to L.

    For counts n the loss with the best gain is T - max(h.w, 0)^2 / (w^T G w), w = n / L. Start from
    the largest-remainder rounding of `start` (default: the optimal mixture) and move one layer
    from head i to head j while the loss falls (each move scored exactly, O(J^2) per sweep): a
    local optimum of a small integer problem, so an upper bound on the true best stack that is
    exact for L = 1 (checked against brute force in the tests). Returns (counts, loss)."""
    J = h.size
    if start is None:
        start = nonneg_mixture(G, h)
    w0 = start / start.sum() if start.sum() > 0 else np.full(J, 1.0 / J)
    n = np.floor(w0 * L).astype(np.int64)
    for j in np.argsort(-(w0 * L - n))[: L - n.sum()]:
        n[j] += 1

    def loss_of(hw, wGw):
        return T - np.where(hw > 0, hw, 0.0) ** 2 / np.maximum(wGw, 1e-300)

    if L == 1:  # exhaustive
        losses = loss_of(h, np.diag(G))
        n = np.zeros(J, dtype=np.int64)
        n[int(np.argmin(losses))] = 1
        return n, float(losses.min())
    dG = np.diag(G)
    for _ in range(10 * L + 100):
        w = n / L
        Gw, hw = G @ w, h @ w
        wGw = w @ Gw
        cur = float(loss_of(hw, wGw))
        # move 1/L from i (n_i > 0) to j: w' = w + (e_j - e_i)/L
        src = np.flatnonzero(n > 0)
        dh = (h[None, :] - h[src, None]) / L  # (S, J)
        dq = (2 * (Gw[None, :] - Gw[src, None]) / L
              + (dG[None, :] + dG[src, None] - 2 * G[src, :]) / L**2)
        cand = loss_of(hw + dh, wGw + dq)
        i, j = np.unravel_index(int(np.argmin(cand)), cand.shape)
        if cand[i, j] >= cur - 1e-12 * max(1.0, abs(cur)):
            return n, cur
        n[src[i]] -= 1
        n[j] += 1
    return n, float(loss_of(h @ (n / L), (n / L) @ G @ (n / L)))


def softmax_floor(a: float, b: float, k: int, d: int, P: int, samples: int = 20_000, seed: int = 0,
                  temperatures=None, batches: int = 10, depths=(1, 2, 4, 8, 16, 32, 64),
                  device: str = "cpu", progress: bool = True) -> dict:
    """The best single cosine-softmax head and the best infinitely deep ensemble of them.

    A head attends with p = softmax(tau cos(x_i, x_test)) and predicts g p . y. The controlled
    model's infinitely deep limit averages its layers' attention rows with one common gain, and the
    loss is convex in that average, so its best value over a family of heads is the nonnegative
    mixture min_{v >= 0} E[(sum_j v_j H_j - y*)^2] (SPEC §3.4; v_j = g w_j). Both optima are
    cross-fitted: weights chosen on all batches but one and measured on the held-out one; the
    value is the mean over held-out batches and `se` their standard error (independent batches).
    `iid_depth` is the finite-depth companion: L layers drawn independently from the optimal
    mixture (temperature j with probability w_j, gain g = sum v) give exactly
    E R_L = C + (A - C)/L, C the mixture's loss and A the mean loss of one drawn head.
    `best_stack` is the other companion: the best depth-L stack of heads of the family, equal
    weights and one gain (`best_equal_weight`), cross-fitted — what joint training could reach
    at depth L within the family.
    """
    a, b = check_exponent("a", a), check_exponent("b", b)
    k, P = check_k_P(k, P)
    d = check_int("d", d, 1)
    batches = check_int("batches", batches, 2)
    samples = check_int("samples", samples, batches)
    seed = check_int("seed", seed, 0)
    depths = check_depths(depths)
    tau = default_temperatures() if temperatures is None else np.asarray(temperatures, dtype=np.float64)
    if tau.ndim != 1 or tau.size == 0 or not np.all(np.isfinite(tau)):
        raise InputError(f"temperatures must be a non-empty list of finite numbers, got {temperatures!r}")
    G, h, T, n = _head_moments(a, b, k, d, P, samples, seed, tau, batches, device, progress)
    Gs, hs, Ts, ns = G.sum(0), h.sum(0), T.sum(), n.sum()
    held_ens, held_one = np.empty(batches), np.empty(batches)
    v_held = []  # each held-out batch's mixture, reused as the start of its best stacks below
    for i in range(batches):
        Go, ho = (Gs - G[i]) / (ns - n[i]), (hs - h[i]) / (ns - n[i])
        v = nonneg_mixture(Go, ho)
        v_held.append(v)
        held_ens[i] = (T[i] - 2 * v @ h[i] + v @ G[i] @ v) / n[i]
        j, g = _best_single(Go, ho)
        held_one[i] = (T[i] - 2 * g * h[i, j] + g * g * G[i, j, j]) / n[i]
    Gm, hm, Tm = Gs / ns, hs / ns, Ts / ns
    v = nonneg_mixture(Gm, hm)
    C = float(Tm - 2 * v @ hm + v @ Gm @ v)
    gain = float(v.sum())
    w = v / gain if gain > 0 else v
    A = float(np.sum(w * (gain**2 * np.diag(Gm) - 2 * gain * hm + Tm)))
    j, g1 = _best_single(Gm, hm)
    support = [dict(temperature=float(tau[i]), weight=float(w[i])) for i in np.flatnonzero(w > 1e-3)]
    # the best stack of L cosine heads (equal weights: the model's 1/L average), cross-fitted like
    # the floor: counts chosen on all batches but one, measured on the held-out one
    best_L = []
    for L in depths.tolist():
        held = np.empty(batches)
        for i in range(batches):
            Go, ho = (Gs - G[i]) / (ns - n[i]), (hs - h[i]) / (ns - n[i])
            cnt, _ = best_equal_weight(Go, ho, float((Ts - T[i]) / (ns - n[i])), int(L), start=v_held[i])
            wl = cnt / L
            g = max(float(ho @ wl), 0.0) / max(float(wl @ Go @ wl), 1e-300)
            held[i] = (T[i] - 2 * g * (wl @ h[i]) + g * g * (wl @ G[i] @ wl)) / n[i]
        best_L.append(float(held.mean()))
    sq = lambda x: float(x.std(ddof=1) / math.sqrt(batches))  # noqa: E731
    return dict(
        single_head=float(held_one.mean()), single_head_se=sq(held_one),
        single_head_temperature=float(tau[j]), single_head_gain=g1,
        ensemble_floor=float(held_ens.mean()), se=sq(held_ens),
        # paired over the same held-out batches: far more precise than either SE
        ensemble_minus_single=float((held_ens - held_one).mean()), ensemble_minus_single_se=sq(held_ens - held_one),
        var_ystar=float(Tm), family=SOFTMAX_FAMILY,
        temperatures=[float(tau.min()), float(tau.max()), int(tau.size)],
        in_sample=dict(single_head=float(Tm - 2 * g1 * hm[j] + g1 * g1 * Gm[j, j]), ensemble_floor=C),
        mixture=dict(gain=gain, support=support),
        iid_depth=dict(C=C, A=A, delta=A - C, depths=depths.tolist(),
                       R=[C + (A - C) / int(L) for L in depths]),
        best_stack=dict(depths=depths.tolist(), R=best_L),
        samples=int(ns), seed=seed, d=d, P=P, k=k, a=a, b=b,
    )


__all__ = ["softmax_floor", "nonneg_mixture", "best_equal_weight", "default_temperatures", "SOFTMAX_FAMILY"]
