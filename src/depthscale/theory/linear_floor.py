"""The linear model's loss floor on the top-k task (SPEC §6.3; paper eq. 41-54): R_irr, its
finite-P counterpart, and the predictable component t_bar = c Sigma q of Figure 8.

Conventions fixed here (SPEC is silent on them):

- The floor R_irr = T - h^T G^+ h (eq. 51, 53) is evaluated in an orthonormal basis of the span
  {Sigma q, ..., Sigma^L' q} (orthonormal under G, eq. 50), which gives the same number as the
  monomial pseudo-inverse without ever forming powers of Sigma or an ill-conditioned Hankel
  matrix. G is exact (eq. 50); T and h are Monte Carlo means over (context, query) pairs with
  the rotation fixed to identity. L' defaults to ``L_PRIME`` = 8: at d = 128, P = 1024 every
  Table 3 row has converged by L' = 3-4 (later powers move R_irr by < 1e-4, far below the SE);
  for a = 0 the span is one-dimensional and L' is irrelevant. The estimator is bias-corrected
  (the plug-in |h_hat|^2 overshoots by tr Cov(h_hat)); its SE is the delta method with a
  covariance from independent contexts (queries that share a context are averaged first).
- gamma_{P,k} (eq. 45) is exact up to quadrature over the order-statistic densities.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import torch
from scipy.integrate import trapezoid
from scipy.special import gammaln, log_ndtr
from tqdm import tqdm

from depthscale.base import seeds
from depthscale.base.errors import InputError
from depthscale.theory.linear import basis_images, check_int, check_k_P, lanczos, poly_basis, spectra

L_PRIME = 8  # default number of powers Sigma^1..Sigma^L' in the floor (module docstring)


def floor_batch(P: int, d: int) -> int:
    """Contexts per batch of the floor's Monte Carlo by default (also train.memory's estimate)."""
    return max(1, 2**21 // (P * d))


# ---------------------------------------------------------------- the floor (eq. 41-54)


def _floor_basis(lam: np.ndarray, omega: np.ndarray, L_prime: int) -> np.ndarray:
    """B (d, n) such that per-sample h~_j = sum_k q_k t_k B[k, j] in a G-orthonormal basis.

    G_rs = tr(Omega Sigma^{r+s+1}) = sum_k (omega_k lam_k^3) lam_k^{r-1} lam_k^{s-1} (eq. 50),
    so with psi_j orthonormal under mu_k = omega_k lam_k^3 the features Sigma psi_j(Sigma) q have
    Gram matrix I. Their inner product with Omega t is sum_k omega_k lam_k psi_j(lam_k) q_k t_k,
    and with V[k, j] = sqrt(mu_k) psi_j(lam_k) the coefficient is V[k, j] sqrt(omega_k / lam_k).
    n = min(L', number of distinct eigenvalues): G^+ drops the rest.
    """
    mu = omega * lam**3
    _, _, V = lanczos(lam, mu / mu.max(), L_prime)
    return V * np.sqrt(omega / lam)[:, None]


class _Moments:
    """Streaming mean and covariance of per-context vectors (Chan et al. pairwise update)."""

    def __init__(self, dim: int):
        self.n = 0
        self.mean = np.zeros(dim)
        self.m2 = np.zeros((dim, dim))

    def add(self, z: np.ndarray) -> None:
        nb = z.shape[0]
        mb = z.mean(axis=0)
        cz = z - mb
        m2b = cz.T @ cz
        delta = mb - self.mean
        n = self.n + nb
        self.m2 += m2b + np.outer(delta, delta) * (self.n * nb / n)
        self.mean += delta * (nb / n)
        self.n = n


def linear_floor(a: float, b: float, k: int, d: int, P: int, L_prime: int = L_PRIME,
                 samples: int = 200_000, seed: int = 0, batch: int | None = None, device: str = "cpu",
                 progress: bool = True, queries_per_context: int | None = None,
                 return_all: bool = False):
    """Monte Carlo R_irr = T - h^T G^+ h of the linear model on the top-k task (eq. 51-54).

    Rotation fixed to identity (every term is rotation invariant). ``samples`` (context, query)
    pairs, rounded up to whole contexts: ``queries_per_context`` fresh queries (default
    min(128, P)) share each context x_1..x_P; ``batch`` contexts per step on ``device`` (default:
    about 2^21 context entries, batch * P * d, per step).
    G is exact (eq. 50); T, h are sample means. The plug-in h^T G^+ h is corrected for
    its O(L'/n) bias (minus tr Cov(h_hat)). The SE is the delta method, gradient (1, -2 h), with a
    covariance of the means from per-context averages (contexts are independent; queries sharing
    a context need not be). Returns (R_irr, se); with ``return_all`` also arrays of R_irr and se
    for L' = 1..n (n = min(L', number of distinct eigenvalues)).
    """
    lam, omega = spectra(d, a, b)
    k, P = check_k_P(k, P)
    L_prime = check_int("L_prime", L_prime, 1)
    samples = check_int("samples", samples, 2)
    seed = check_int("seed", seed, 0)
    batch = floor_batch(P, d) if batch is None else check_int("batch", batch, 1)
    # contexts are shared by m queries: the RNG cost of x_1..x_P is amortised, while the selected
    # pairs barely overlap when m << P; the SE below accounts for whatever correlation remains
    if queries_per_context is None:
        m = min(128, P)
    else:
        m = check_int("queries_per_context", queries_per_context, 1)
    n_ctx = max(2, -(-samples // m))

    B = _floor_basis(lam, omega, L_prime)  # (d, n)
    n_basis = B.shape[1]
    dev = torch.device(device)
    gen = seeds.generator(seed, dev)
    f64 = dict(dtype=torch.float64, device=dev)
    omega_t = torch.as_tensor(omega, **f64)
    B_t = torch.as_tensor(B, **f64)
    moments = _Moments(1 + n_basis)
    done = 0
    with tqdm(total=n_ctx * m, disable=None if progress else True, file=sys.stderr,
              desc=f"floor a={a} b={b} k={k}", unit="q", unit_scale=True) as bar:
        while done < n_ctx:
            nb = min(batch, n_ctx - done)
            _, q, t = _topk_contexts(lam, P, k, nb, m, gen, **f64)  # queries and targets (eq. 41)
            T_i = (t * t * omega_t).sum(-1)  # t^T Omega t
            h_i = (q * t) @ B_t  # (nb, m, n): h~ in the G-orthonormal basis
            z = torch.cat([T_i.unsqueeze(-1), h_i], dim=-1).mean(dim=1)  # per-context means
            moments.add(z.cpu().numpy())
            done += nb
            bar.update(nb * m)

    mean = moments.mean
    cov_mean = moments.m2 / (moments.n - 1) / moments.n  # covariance of the mean vector
    T_hat, h_hat = mean[0], mean[1:]
    R_all = np.empty(n_basis)
    se_all = np.empty(n_basis)
    for j in range(1, n_basis + 1):
        h = h_hat[:j]
        bias = np.trace(cov_mean[1 : j + 1, 1 : j + 1])  # E|h_hat|^2 = |h|^2 + tr Cov(h_hat)
        R_all[j - 1] = T_hat - (h @ h - bias)
        g = np.concatenate([[1.0], -2.0 * h])
        se_all[j - 1] = math.sqrt(max(float(g @ cov_mean[: j + 1, : j + 1] @ g), 0.0))
    R_irr, se = float(R_all[-1]), float(se_all[-1])
    if return_all:
        return R_irr, se, R_all, se_all
    return R_irr, se


def _topk_contexts(lam, P: int, k: int, n_ctx: int, m: int, gen, **f64):
    """n_ctx contexts x (n_ctx, P, d) with m queries q each and their top-k targets t (O = I)."""
    d = lam.size
    sqrt_lam = torch.as_tensor(np.sqrt(lam), **f64)
    x = torch.randn(n_ctx, P, d, generator=gen, **f64) * sqrt_lam
    q = torch.randn(n_ctx, m, d, generator=gen, **f64) * sqrt_lam
    x_unit = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    top = torch.topk(q @ x_unit.transpose(1, 2), k, dim=-1).indices  # by cosine
    sel = torch.gather(x.unsqueeze(1).expand(n_ctx, m, P, d), 2, top.unsqueeze(-1).expand(n_ctx, m, k, d))
    return x, q, sel.mean(dim=2)


def sample_linear_floor(a: float, b: float, k: int, d: int, P: int, L_prime: int = L_PRIME,
                        samples: int = 100_000, seed: int = 0, batch: int | None = None) -> dict:
    """The finite-P floor of the linear model on the top-k task: R_irr's construction (eq. 51-54)
    with each context's empirical S = U^T U / P in place of Sigma — the least
    E[(t - sum_r w_r S^r q)^T Omega (t - sum_r w_r S^r q)] over w, what a linear attention reading
    only S can reach. Features S psi_j(S) q, j < L', in a basis orthonormal under the pooled
    spectral measure of sample S's (well conditioned at any L'). w is fitted on `samples` (context,
    query) pairs; `held_out` (with its SE over contexts) is its loss on as many fresh ones, and
    `in_sample` the fit's own loss."""
    lam, omega = spectra(d, a, b)
    k, P = check_k_P(k, P)
    L_prime = check_int("L_prime", L_prime, 1)
    samples = check_int("samples", samples, 16)
    gen = seeds.generator(check_int("seed", seed, 0))
    f64 = dict(dtype=torch.float64)
    m = min(32, P)
    n_ctx = max(2, -(-samples // m))
    batch = floor_batch(P, d) if batch is None else check_int("batch", batch, 1)
    alpha, beta_c = poly_basis(lam, omega, P, gen, L_prime, population=False)
    om = torch.as_tensor(omega, **f64)

    def features(x, q):
        S = x.transpose(1, 2) @ x / P  # (n, d, d)
        images = basis_images(lambda v: (S.unsqueeze(1) @ v.unsqueeze(-1)).squeeze(-1), q, (alpha, beta_c))
        return torch.stack(images, -1)  # (n, m, d, n_basis): S psi_j(S) q

    n_b = alpha.size
    Gm, hv, T, n_seen = torch.zeros(n_b, n_b, **f64), torch.zeros(n_b, **f64), 0.0, 0
    for lo in range(0, n_ctx, batch):  # fit: G = E[F^T Omega F], h = E[F^T Omega t], T = E[t^T Omega t]
        x, q, t = _topk_contexts(lam, P, k, min(batch, n_ctx - lo), m, gen, **f64)
        F = features(x, q)
        OF = F * om[:, None]
        Gm += torch.einsum("nmdi,nmdj->ij", F, OF)
        hv += torch.einsum("nmdi,nmd->i", OF, t)
        T += float((t * t * om).sum())
        n_seen += t.shape[0] * m
    Gm, hv, T = Gm / n_seen, hv / n_seen, T / n_seen
    # gelsd (SVD), not the default gelsy: gelsy's solution changed in its last bits from one process to
    # the next on the same inputs (so did the report's finite-P floor); gelsd's does not
    w = torch.linalg.lstsq(Gm, hv.unsqueeze(-1), rcond=1e-12, driver="gelsd").solution.squeeze(-1)
    in_sample = float(T - 2 * w @ hv + w @ Gm @ w)
    per_ctx = []
    for lo in range(0, n_ctx, batch):  # held out: fresh contexts, per-context mean losses for the SE
        x, q, t = _topk_contexts(lam, P, k, min(batch, n_ctx - lo), m, gen, **f64)
        e = t - features(x, q) @ w
        per_ctx.append(((e * e * om).sum(-1)).mean(1))
    e_ctx = torch.cat(per_ctx).numpy()
    return dict(held_out=float(e_ctx.mean()), held_out_se=float(e_ctx.std(ddof=1) / math.sqrt(e_ctx.size)),
                in_sample=in_sample, samples=n_ctx * m, L_prime=n_b, d=d, P=P)


def floor(a: float, b: float, k: int, d: int, P: int, samples: int = 200_000, seed: int = 0) -> dict:
    """JSON-ready floor: dict(R_irr=, se=) from linear_floor with default L'."""
    R_irr, se = linear_floor(a, b, k, d, P, samples=samples, seed=seed)
    return dict(R_irr=R_irr, se=se)


# ---------------------------------------------------------------- predictable component (eq. 44-46)


def gamma_topk(P: int, k: int) -> float:
    """gamma_{P,k}: expected mean of the k largest of P standard normals.

    Exact up to quadrature: sum over j <= k of E[Z_(j)] with the order-statistic density
    P!/((j-1)!(P-j)!) phi(z) Phi(z)^(P-j) (1-Phi(z))^(j-1), integrated in log space on a fine
    grid (trapezoid; the integrand is smooth and decays like a Gaussian).
    """
    P = check_int("P", P, 1)
    k = check_int("k", k, 1)
    if k > P:
        raise InputError(f"k must be <= P = {P}, got {k}")
    z = np.linspace(-12.0, 12.0, 48001)
    log_phi = -0.5 * z**2 - 0.5 * math.log(2 * math.pi)
    log_cdf, log_sf = log_ndtr(z), log_ndtr(-z)
    total = 0.0
    for j in range(1, k + 1):
        log_c = gammaln(P + 1) - gammaln(j) - gammaln(P - j + 1)
        dens = np.exp(log_c + log_phi + (P - j) * log_cdf + (j - 1) * log_sf)
        total += trapezoid(z * dens, z)
    return float(total / k)


def predictable_component(q, Sigma, P: int, k: int) -> np.ndarray:
    """t_bar ~ c Sigma q, c = gamma_{P,k} / sqrt(tr Sigma^2) (eq. 45, 46).

    ``Sigma`` is a (d, d) covariance or a (d,) vector of its eigenvalues (diagonal Sigma);
    ``q`` has shape (d,) or (n, d).
    """
    S = np.asarray(Sigma, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if S.ndim == 1:
        d = S.size
        tr_S2 = float(S @ S)
        Sq = q * S
    elif S.ndim == 2 and S.shape[0] == S.shape[1]:
        d = S.shape[0]
        tr_S2 = float(np.sum(S * S.T))
        Sq = q @ S.T
    else:
        raise InputError(f"Sigma must be (d,) or (d, d), got shape {S.shape}")
    if q.shape[-1] != d or q.ndim > 2:
        raise InputError(f"q must have shape ({d},) or (n, {d}), got {q.shape}")
    if not np.all(np.isfinite(S)) or tr_S2 <= 0:
        raise InputError(f"Sigma must be finite and nonzero, got tr(Sigma^2) = {tr_S2!r}")
    return gamma_topk(P, k) / math.sqrt(tr_S2) * Sq


def fig8_sample(d: int, P: int, k: int, a: float, b: float, seed: int) -> dict:
    """One top-k context for Figure 8: q, selected x's, t, t_bar = c Sigma q, residual t - t_bar.

    Rotation fixed to identity. Also returns an orthonormal 2-D basis (rows: q/|q| and the part
    of t orthogonal to q) and every vector projected onto it (keys ending in ``_2d``).
    """
    lam, omega = spectra(d, a, b)
    k, P = check_k_P(k, P)
    seed = check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((P, d)) * np.sqrt(lam)
    q = rng.standard_normal(d) * np.sqrt(lam)
    s = (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))  # eq. 6
    selected = np.argsort(-s, kind="stable")[:k]
    x_sel = x[selected]
    t = x_sel.mean(axis=0)
    t_bar = predictable_component(q, lam, P, k)
    residual = t - t_bar
    e1 = q / np.linalg.norm(q)
    perp = t - (t @ e1) * e1
    e2 = perp / np.linalg.norm(perp) if np.linalg.norm(perp) > 0 else np.roll(e1, 1)
    basis = np.stack([e1, e2])  # (2, d)
    out = dict(lam=lam, omega=omega, q=q, x_selected=x_sel, selected=selected, scores=s, t=t,
               t_bar=t_bar, residual=residual, basis=basis)
    for key in ("q", "x_selected", "t", "t_bar", "residual"):
        out[key + "_2d"] = out[key] @ basis.T
    return out


__all__ = ["floor_batch", "linear_floor", "sample_linear_floor", "floor", "gamma_topk", "predictable_component",
           "fig8_sample", "L_PRIME"]
