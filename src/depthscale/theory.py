"""Theory: the linear-attention depth exponents, reference curves and loss floor (SPEC §6.2,
§6.3), and the softmax-ensemble floor of the nonlinear model (SPEC §3.4; not in the paper).

Paper appendix A. Conventions fixed here (SPEC is silent on them):

- Reference curves use the population loss R(r) = sum_k lam_k omega_k r(lam_k)^2 (eq. 30).
  The constrained curve optimises the step x = gamma/L of r(lam) = (1 - x lam)^L (eq. 33) over
  [0, 2/lam_max]: R is convex in x there (a sum of even powers of affine functions) and any x
  outside has |1 - x lam_max| > 1, so the bounded search finds the global minimum.
- The free curve is 1 / sum_{n<=L} phi_n(0)^2 (eq. 37) with phi_n orthonormal for the discrete
  measure sum_k lam_k omega_k delta_{lam_k}, from Lanczos with full reorthogonalisation; phi_n(0)
  is accumulated in log space, so it cannot overflow. With m numerically distinct nodes only
  phi_0..phi_{m-1} exist; for L >= m a degree-L polynomial with r(0) = 1 vanishes on every node
  and the minimum is exactly 0, which is returned.
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
from scipy.optimize import minimize_scalar
from scipy.special import gammaln, log_ndtr
from tqdm import tqdm

__all__ = [
    "spectra",
    "zeta",
    "two_zeta",
    "exponents",
    "constrained_curve",
    "free_curve",
    "curve",
    "linear_floor",
    "floor",
    "gamma_topk",
    "predictable_component",
    "fig8_sample",
    "L_PRIME",
    "softmax_floor",
    "nonneg_mixture",
    "best_equal_weight",
    "default_temperatures",
    "SOFTMAX_FAMILY",
]

L_PRIME = 8  # default number of powers Sigma^1..Sigma^L' in the floor (module docstring)


# ---------------------------------------------------------------- validation helpers


def _check_int(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _check_k_P(k, P) -> tuple[int, int]:
    """Validate the top-k selection sizes: 1 <= k <= P."""
    k, P = _check_int("k", k, 1), _check_int("P", P, 1)
    if k > P:
        raise ValueError(f"k must be <= P = {P}, got {k}")
    return k, P


def _check_exponent(name: str, value) -> float:
    if not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


def _check_spectrum(lam, omega) -> tuple[np.ndarray, np.ndarray]:
    lam = np.asarray(lam, dtype=np.float64)
    omega = np.asarray(omega, dtype=np.float64)
    if lam.ndim != 1 or lam.size == 0:
        raise ValueError(f"lam must be a non-empty 1-D array, got shape {lam.shape}")
    if omega.shape != lam.shape:
        raise ValueError(f"omega must have the shape of lam {lam.shape}, got {omega.shape}")
    for name, arr in (("lam", lam), ("omega", omega)):
        bad = ~np.isfinite(arr) | (arr <= 0)
        if np.any(bad):
            raise ValueError(f"{name} must be finite and > 0, got {float(arr[bad][0])!r}")
    return lam, omega


def _check_depths(depths) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(depths))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"depths must be a non-empty 1-D sequence, got shape {arr.shape}")
    for L in arr.tolist():
        if isinstance(L, bool) or not float(L).is_integer() or L < 1:
            raise ValueError(f"depths must be integers >= 1, got {L!r}")
    return arr.astype(np.int64)


# ---------------------------------------------------------------- spectra and exponents


def spectra(d: int, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """lam_k = k^-a, omega_k = k^-b for k = 1..d, float64, no normalisation (eq. 2)."""
    d = _check_int("d", d, 1)
    a = _check_exponent("a", a)
    b = _check_exponent("b", b)
    k = np.arange(1, d + 1, dtype=np.float64)
    return k ** (-a), k ** (-b)


def zeta(a: float, b: float) -> float:
    """Constrained depth exponent zeta = (a + b - 1)/a, a > 0 (eq. 31, 34)."""
    if not isinstance(a, (int, float, np.integer, np.floating)) or not math.isfinite(a) or a <= 0:
        raise ValueError(f"a must be finite and > 0, got {a!r}")
    b = _check_exponent("b", b)
    return (float(a) + b - 1.0) / float(a)


def two_zeta(a: float, b: float) -> float:
    """Free-polynomial depth exponent 2 zeta (eq. 39, 40)."""
    return 2.0 * zeta(a, b)


def exponents(a: float, b: float) -> dict:
    """dict(zeta=, two_zeta=) for the CLI."""
    z = zeta(a, b)
    return dict(zeta=z, two_zeta=2.0 * z)


# ---------------------------------------------------------------- reference curves (eq. 30-40)


def constrained_curve(lam, omega, depths) -> np.ndarray:
    """min over gamma of sum_k lam_k omega_k (1 - gamma lam_k / L)^(2L), per L (eq. 33, 34)."""
    lam, omega = _check_spectrum(lam, omega)
    depths = _check_depths(depths)
    w = lam * omega
    scale = w.sum()
    wn = w / scale  # normalised weights keep the objective O(1)
    x_max = 2.0 / lam.max()  # outside [0, x_max] the top mode grows: |1 - x lam_max| > 1
    grid = np.linspace(0.0, x_max, 257)
    out = np.empty(depths.size)
    for i, L in enumerate(depths.tolist()):
        def objective(x: float) -> float:
            return float(wn @ np.power(1.0 - x * lam, 2 * L))

        # R(x) is convex on [0, x_max]: a coarse grid brackets the minimum, Brent refines it
        values = wn @ np.power(1.0 - np.outer(lam, grid), 2 * L)
        j = int(np.argmin(values))
        lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, grid.size - 1)]
        res = minimize_scalar(objective, bounds=(lo, hi), method="bounded",
                              options=dict(xatol=1e-15 * x_max, maxiter=500))
        out[i] = scale * min(float(res.fun), float(values[j]))
    return out


def _lanczos(nodes: np.ndarray, weights: np.ndarray, n_max: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lanczos on diag(nodes) from sqrt(weights), full reorthogonalisation.

    Returns recurrence coefficients alpha (n,), beta (n,) with
    beta[j] phi_{j+1}(x) = (x - alpha[j]) phi_j(x) - beta[j-1] phi_{j-1}(x), and V (m, n) with
    V[k, j] = sqrt(weights_k) phi_j(nodes_k) (orthonormal columns). n <= n_max stops early when
    the measure has fewer numerically distinct nodes.
    """
    m = nodes.size
    n_max = min(n_max, m)
    V = np.zeros((m, n_max))
    alpha = np.zeros(n_max)
    beta = np.zeros(n_max)
    v = np.sqrt(weights)
    v = v / np.linalg.norm(v)
    tol = 100.0 * np.finfo(np.float64).eps * np.abs(nodes).max() * math.sqrt(m)
    n = 0
    for j in range(n_max):
        V[:, j] = v
        n = j + 1
        z = nodes * v
        alpha[j] = v @ z
        z = z - alpha[j] * v - (beta[j - 1] * V[:, j - 1] if j > 0 else 0.0)
        for _ in range(2):  # full reorthogonalisation, twice is enough
            z = z - V[:, : j + 1] @ (V[:, : j + 1].T @ z)
        beta[j] = np.linalg.norm(z)
        if beta[j] <= tol:
            beta[j] = 0.0
            break
        v = z / beta[j]
    return alpha[:n], beta[:n], V[:, :n]


def free_curve(lam, omega, depths) -> np.ndarray:
    """min over deg <= L polynomials with r(0) = 1 of sum_k lam_k omega_k r(lam_k)^2 (eq. 35-37).

    Equals 1 / sum_{n=0}^{L} phi_n(0)^2; 0 when L >= the number of distinct nodes.
    """
    lam, omega = _check_spectrum(lam, omega)
    depths = _check_depths(depths)
    w = lam * omega
    alpha, beta, _ = _lanczos(lam, w, int(depths.max()) + 1)
    n_avail = alpha.size  # phi_0 .. phi_{n_avail-1}
    # log|phi_n(0)| through the ratios rho_n = phi_n(0)/phi_{n-1}(0) (never 0: 0 < min node)
    log_phi0 = np.empty(n_avail)
    log_phi0[0] = -0.5 * math.log(w.sum())
    rho = 0.0
    for n in range(1, n_avail):
        prev = beta[n - 2] / rho if n > 1 else 0.0
        rho = (-alpha[n - 1] - prev) / beta[n - 1]
        log_phi0[n] = log_phi0[n - 1] + math.log(abs(rho))
    log_cum = np.logaddexp.accumulate(2.0 * log_phi0)  # log sum_{n<=N} phi_n(0)^2
    out = np.zeros(depths.size)
    for i, L in enumerate(depths.tolist()):
        if L < n_avail:
            out[i] = math.exp(-log_cum[L])
    return out


def _easy_contexts(lam, omega, P, n, gen):
    """n easy-task contexts with O = I (every term below is rotation invariant): inputs U
    (n, P, d), teacher beta (n, d), x_test = x_j with j uniform, y* = beta^T x_test."""
    U = torch.randn(n, P, lam.size, generator=gen, dtype=torch.float64) * torch.from_numpy(np.sqrt(lam))
    beta = torch.randn(n, lam.size, generator=gen, dtype=torch.float64) * torch.from_numpy(np.sqrt(omega))
    x = U[torch.arange(n), torch.randint(0, P, (n,), generator=gen)]
    return U, beta, x


def _poly_basis(lam, omega, P, gen, n_poly, population, contexts=256):
    """Recurrence coefficients of polynomials psi_m orthonormal under the spectral measure the
    features live on: nodes lam_k, weights lam_k^3 omega_k (population; the loss of
    r = 1 - lam q is sum lam omega (1 - lam q)^2, so q is a regression under lam^3 omega), or
    the eigenvalues s of `contexts` sample S's with weights s^3 u^T Omega u (finite P). Many
    distinct nodes: a well-conditioned basis of any degree, which Chebyshev on [0, s_max] is not
    when the spectrum crowds near 0."""
    if population:
        nodes, weights = lam, lam**3 * omega
    else:
        U, _, _ = _easy_contexts(lam, omega, P, contexts, gen)
        s, Q = torch.linalg.eigh(U.transpose(1, 2) @ U / P)
        s = s.clamp_min(0).numpy().ravel()
        uOu = ((Q**2) * torch.from_numpy(omega)[None, :, None]).sum(1).numpy().ravel()
        nodes, weights = s, s**3 * uOu
    alpha, beta, _ = _lanczos(nodes, weights / weights.max(), n_poly)
    return alpha, beta


def _poly_features(lam, omega, P, n, coeffs, gen, population):
    """f_m = beta^T S psi_m(S) x_test (m < n_poly) and y* = beta^T x_test on n fresh contexts;
    S is the empirical U^T U / P, or Sigma with population=True."""
    alpha, beta_c = coeffs
    F = torch.empty(n, alpha.size, dtype=torch.float64)
    y = torch.empty(n, dtype=torch.float64)
    lam_t = torch.from_numpy(lam)
    chunk = max(1, 2**24 // (P * lam.size))  # ~128 MiB of inputs at a time
    for lo in range(0, n, chunk):
        c = min(chunk, n - lo)
        U, beta, x = _easy_contexts(lam, omega, P, c, gen)
        if population:
            def apply_S(v):
                return v * lam_t
        else:
            S = U.transpose(1, 2) @ U / P

            def apply_S(v, S=S):
                return (S @ v.unsqueeze(-1)).squeeze(-1)
        prev, cur = torch.zeros_like(x), x  # psi_{-1} = 0, psi_0 = const (scale is irrelevant)
        for m in range(alpha.size):
            s_cur = apply_S(cur)  # S psi_m(S) x: the feature and the next recurrence step
            F[lo:lo + c, m] = (beta * s_cur).sum(1)
            if m + 1 < alpha.size:
                nxt = (s_cur - alpha[m] * cur - (beta_c[m - 1] * prev if m else 0.0)) / beta_c[m]
                prev, cur = cur, nxt
        y[lo:lo + c] = (beta * x).sum(1)
    return F.numpy(), y.numpy()


def sample_free_curve(a: float, b: float, d: int, P: int, depths, samples: int = 10_000,
                      seed: int = 0, population: bool = False) -> dict:
    """Finite-P analogue of the free curve (easy task): the least loss E[(beta^T r(S) x_test)^2]
    over residual polynomials r of degree <= L with r(0) = 1 of the *empirical* S = U^T U / P --
    what a depth-L linear attention whose layers act as a polynomial in S can reach at this P.

    Coefficients are fitted by least squares on `samples` contexts; `held_out` (with its SE) is
    their loss on `samples` fresh contexts, `in_sample` the fit's own. A high-degree polynomial
    fitted on a finite sample can blow up on contexts whose spectrum reaches past the sample's:
    `reliable` marks held_out <= 1.25 in_sample. With population=True, S is Sigma and the
    minimum is free_curve's (a test checks it).
    """
    lam, omega = spectra(d, a, b)
    P = _check_int("P", P, 1)
    samples = _check_int("samples", samples, 16)
    depths = _check_depths(depths)
    gen = torch.Generator().manual_seed(_check_int("seed", seed, 0))
    coeffs = _poly_basis(lam, omega, P, gen, int(depths.max()), population)
    F, y = _poly_features(lam, omega, P, samples, coeffs, gen, population)
    F2, y2 = _poly_features(lam, omega, P, samples, coeffs, gen, population)
    fit, held, se = [], [], []
    for L in depths.tolist():
        n = min(L, F.shape[1])  # a basis shorter than L: the measure has fewer distinct nodes
        scale = np.linalg.norm(F[:, :n], axis=0)  # equal column norms: rcond then cuts nothing real
        coef = np.linalg.lstsq(F[:, :n] / scale, y, rcond=None)[0] / scale
        fit.append(float(np.mean((y - F[:, :n] @ coef) ** 2)))
        e2 = (y2 - F2[:, :n] @ coef) ** 2
        held.append(float(e2.mean()))
        se.append(float(e2.std(ddof=1) / math.sqrt(samples)))
    reliable = [bool(h <= 1.25 * f) for h, f in zip(held, fit)]
    return dict(depths=depths.tolist(), in_sample=fit, held_out=held, held_out_se=se,
                reliable=reliable, samples=samples, P=P, population=population)


def sample_constrained_curve(a: float, b: float, d: int, P: int, depths, samples: int = 10_000,
                             seed: int = 0) -> dict:
    """Finite-P analogue of the constrained curve (easy task): the least loss
    E[(beta^T (I - gamma S / L)^L x_test)^2] over one shared step gamma of the *empirical*
    S = U^T U / P — L steps of in-context gradient descent with the best common step size.

    gamma is fitted per depth on `samples` contexts (bounded scalar search below the step at
    which the sample's largest eigenvalue of S diverges); `held_out` (with its SE) is the loss on
    `samples` fresh contexts. In the eigenbasis S = Q diag(s) Q^T the residual is
    sum_k (Q^T beta)_k (Q^T x)_k (1 - gamma s_k / L)^L: one eigendecomposition per context."""
    lam, omega = spectra(d, a, b)
    P = _check_int("P", P, 1)
    samples = _check_int("samples", samples, 16)
    depths = _check_depths(depths)
    gen = torch.Generator().manual_seed(_check_int("seed", seed, 0))

    def draw():
        U, beta, x = _easy_contexts(lam, omega, P, samples, gen)
        s, Q = torch.linalg.eigh(U.transpose(1, 2) @ U / P)
        v = (Q.transpose(1, 2) @ beta.unsqueeze(-1)).squeeze(-1) * (Q.transpose(1, 2) @ x.unsqueeze(-1)).squeeze(-1)
        return s.clamp_min(0).numpy(), v.numpy()

    s_fit, v_fit = draw()
    s_out, v_out = draw()

    def errors(s_, v_, gamma, L):
        return ((v_ * np.power(1.0 - gamma * s_ / L, L)).sum(1)) ** 2

    fit, held, se, gammas = [], [], [], []
    for L in depths.tolist():
        g_max = 2.0 * L / float(s_fit.max())  # beyond it the top sample mode grows with L
        res = minimize_scalar(lambda g: float(errors(s_fit, v_fit, g, L).mean()), bounds=(0.0, g_max),
                              method="bounded", options=dict(xatol=1e-10 * g_max, maxiter=500))
        g = float(res.x)
        e2 = errors(s_out, v_out, g, L)
        gammas.append(g)
        fit.append(float(res.fun))
        held.append(float(e2.mean()))
        se.append(float(e2.std(ddof=1) / math.sqrt(samples)))
    return dict(depths=depths.tolist(), in_sample=fit, held_out=held, held_out_se=se, gamma=gammas,
                samples=samples, P=P)


def curve(a: float, b: float, d: int, depths) -> dict:
    """JSON-ready reference curves: dict(depths=, constrained=, free=) as lists."""
    lam, omega = spectra(d, a, b)
    depths = _check_depths(depths)
    return dict(
        depths=depths.tolist(),
        constrained=constrained_curve(lam, omega, depths).tolist(),
        free=free_curve(lam, omega, depths).tolist(),
    )


# ---------------------------------------------------------------- linear floor (eq. 41-54)


def _floor_basis(lam: np.ndarray, omega: np.ndarray, L_prime: int) -> np.ndarray:
    """B (d, n) such that per-sample h~_j = sum_k q_k t_k B[k, j] in a G-orthonormal basis.

    G_rs = tr(Omega Sigma^{r+s+1}) = sum_k (omega_k lam_k^3) lam_k^{r-1} lam_k^{s-1} (eq. 50),
    so with psi_j orthonormal under mu_k = omega_k lam_k^3 the features Sigma psi_j(Sigma) q have
    Gram matrix I. Their inner product with Omega t is sum_k omega_k lam_k psi_j(lam_k) q_k t_k,
    and with V[k, j] = sqrt(mu_k) psi_j(lam_k) the coefficient is V[k, j] sqrt(omega_k / lam_k).
    n = min(L', number of distinct eigenvalues): G^+ drops the rest.
    """
    mu = omega * lam**3
    _, _, V = _lanczos(lam, mu / mu.max(), L_prime)
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
    k, P = _check_k_P(k, P)
    L_prime = _check_int("L_prime", L_prime, 1)
    samples = _check_int("samples", samples, 2)
    seed = _check_int("seed", seed, 0)
    batch = max(1, 2**21 // (P * d)) if batch is None else _check_int("batch", batch, 1)
    # contexts are shared by m queries: the RNG cost of x_1..x_P is amortised, while the selected
    # pairs barely overlap when m << P; the SE below accounts for whatever correlation remains
    if queries_per_context is None:
        m = min(128, P)
    else:
        m = _check_int("queries_per_context", queries_per_context, 1)
    n_ctx = max(2, -(-samples // m))

    B = _floor_basis(lam, omega, L_prime)  # (d, n)
    n_basis = B.shape[1]
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed)
    f64 = dict(dtype=torch.float64, device=dev)
    sqrt_lam = torch.as_tensor(np.sqrt(lam), **f64)
    omega_t = torch.as_tensor(omega, **f64)
    B_t = torch.as_tensor(B, **f64)
    moments = _Moments(1 + n_basis)
    done = 0
    with tqdm(total=n_ctx * m, disable=None if progress else True, file=sys.stderr,
              desc=f"floor a={a} b={b} k={k}", unit="q", unit_scale=True) as bar:
        while done < n_ctx:
            nb = min(batch, n_ctx - done)
            x = torch.randn(nb, P, d, generator=gen, **f64) * sqrt_lam  # (nb, P, d)
            q = torch.randn(nb, m, d, generator=gen, **f64) * sqrt_lam  # (nb, m, d)
            x_unit = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
            scores = q @ x_unit.transpose(1, 2)  # (nb, m, P), cosine up to the factor 1/|q|
            top = torch.topk(scores, k, dim=-1).indices  # (nb, m, k)
            sel = torch.gather(x.unsqueeze(1).expand(nb, m, P, d), 2,
                               top.unsqueeze(-1).expand(nb, m, k, d))  # (nb, m, k, d)
            t = sel.mean(dim=2)  # (nb, m, d), eq. 41
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
    k, P = _check_k_P(k, P)
    L_prime = _check_int("L_prime", L_prime, 1)
    samples = _check_int("samples", samples, 16)
    gen = torch.Generator().manual_seed(_check_int("seed", seed, 0))
    f64 = dict(dtype=torch.float64)
    m = min(32, P)
    n_ctx = max(2, -(-samples // m))
    batch = max(1, 2**21 // (P * d)) if batch is None else _check_int("batch", batch, 1)
    alpha, beta_c = _poly_basis(lam, omega, P, gen, L_prime, population=False)
    om = torch.as_tensor(omega, **f64)

    def features(x, q):
        S = x.transpose(1, 2) @ x / P  # (n, d, d)
        prev, cur = torch.zeros_like(q), q  # psi_{-1} = 0, psi_0 = const
        out = []
        for j in range(alpha.size):
            s_cur = (S.unsqueeze(1) @ cur.unsqueeze(-1)).squeeze(-1)  # S psi_j(S) q
            out.append(s_cur)
            if j + 1 < alpha.size:
                nxt = (s_cur - alpha[j] * cur - (beta_c[j - 1] * prev if j else 0.0)) / beta_c[j]
                prev, cur = cur, nxt
        return torch.stack(out, -1)  # (n, m, d, n_basis)

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
    w = torch.linalg.lstsq(Gm, hv.unsqueeze(-1), rcond=1e-12).solution.squeeze(-1)
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
    P = _check_int("P", P, 1)
    k = _check_int("k", k, 1)
    if k > P:
        raise ValueError(f"k must be <= P = {P}, got {k}")
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
        raise ValueError(f"Sigma must be (d,) or (d, d), got shape {S.shape}")
    if q.shape[-1] != d or q.ndim > 2:
        raise ValueError(f"q must have shape ({d},) or (n, {d}), got {q.shape}")
    if not np.all(np.isfinite(S)) or tr_S2 <= 0:
        raise ValueError(f"Sigma must be finite and nonzero, got tr(Sigma^2) = {tr_S2!r}")
    return gamma_topk(P, k) / math.sqrt(tr_S2) * Sq


def fig8_sample(d: int, P: int, k: int, a: float, b: float, seed: int) -> dict:
    """One top-k context for Figure 8: q, selected x's, t, t_bar = c Sigma q, residual t - t_bar.

    Rotation fixed to identity. Also returns an orthonormal 2-D basis (rows: q/|q| and the part
    of t orthogonal to q) and every vector projected onto it (keys ending in ``_2d``).
    """
    lam, omega = spectra(d, a, b)
    k, P = _check_k_P(k, P)
    seed = _check_int("seed", seed, 0)
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


# ---------------------------------------------------------------- softmax-ensemble floor (SPEC §3.4)

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
    a, b = _check_exponent("a", a), _check_exponent("b", b)
    k, P = _check_k_P(k, P)
    d = _check_int("d", d, 1)
    batches = _check_int("batches", batches, 2)
    samples = _check_int("samples", samples, batches)
    seed = _check_int("seed", seed, 0)
    depths = _check_depths(depths)
    tau = default_temperatures() if temperatures is None else np.asarray(temperatures, dtype=np.float64)
    if tau.ndim != 1 or tau.size == 0 or not np.all(np.isfinite(tau)):
        raise ValueError(f"temperatures must be a non-empty list of finite numbers, got {temperatures!r}")
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
