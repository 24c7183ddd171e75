"""Linear-attention depth theory (SPEC §6.2): the exponents zeta and 2 zeta and the reference
curves of a depth-L linear attention, at the population covariance and at finite P; and the input
checks and the Lanczos recurrence the floors (linear_floor, softmax_floor) share.

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
"""

from __future__ import annotations

import math

import numpy as np
import torch

from depthscale.base import seeds
from depthscale.base.errors import InputError


# ---------------------------------------------------------------- input checks (shared by the floors)


def _minimize_scalar(*args, **kw):
    """scipy.optimize.minimize_scalar, imported on first use: scipy.optimize takes ~0.6 s to import and
    every command that validates a config loads this module (through the constructive start)."""
    from scipy.optimize import minimize_scalar

    return minimize_scalar(*args, **kw)


def check_int(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise InputError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def check_k_P(k, P) -> tuple[int, int]:
    """Validate the top-k selection sizes: 1 <= k <= P."""
    k, P = check_int("k", k, 1), check_int("P", P, 1)
    if k > P:
        raise InputError(f"k must be <= P = {P}, got {k}")
    return k, P


def check_exponent(name: str, value) -> float:
    if not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value) or value < 0:
        raise InputError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


def _check_spectrum(lam, omega) -> tuple[np.ndarray, np.ndarray]:
    lam = np.asarray(lam, dtype=np.float64)
    omega = np.asarray(omega, dtype=np.float64)
    if lam.ndim != 1 or lam.size == 0:
        raise InputError(f"lam must be a non-empty 1-D array, got shape {lam.shape}")
    if omega.shape != lam.shape:
        raise InputError(f"omega must have the shape of lam {lam.shape}, got {omega.shape}")
    for name, arr in (("lam", lam), ("omega", omega)):
        bad = ~np.isfinite(arr) | (arr <= 0)
        if np.any(bad):
            raise InputError(f"{name} must be finite and > 0, got {float(arr[bad][0])!r}")
    return lam, omega


def check_depths(depths) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(depths))
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(f"depths must be a non-empty 1-D sequence, got shape {arr.shape}")
    for L in arr.tolist():
        if isinstance(L, bool) or not float(L).is_integer() or L < 1:
            raise InputError(f"depths must be integers >= 1, got {L!r}")
    return arr.astype(np.int64)


# ---------------------------------------------------------------- spectra and exponents


def spectra(d: int, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """lam_k = k^-a, omega_k = k^-b for k = 1..d, float64, no normalisation (eq. 2)."""
    d = check_int("d", d, 1)
    a = check_exponent("a", a)
    b = check_exponent("b", b)
    k = np.arange(1, d + 1, dtype=np.float64)
    return k ** (-a), k ** (-b)


def zeta(a: float, b: float) -> float:
    """Constrained depth exponent zeta = (a + b - 1)/a, a > 0 (eq. 31, 34)."""
    if not isinstance(a, (int, float, np.integer, np.floating)) or not math.isfinite(a) or a <= 0:
        raise InputError(f"a must be finite and > 0, got {a!r}")
    b = check_exponent("b", b)
    return (float(a) + b - 1.0) / float(a)


def two_zeta(a: float, b: float) -> float:
    """Free-polynomial depth exponent 2 zeta (eq. 39, 40)."""
    return 2.0 * zeta(a, b)


def exponents(a: float, b: float) -> dict:
    """dict(zeta=, two_zeta=) for the CLI."""
    return dict(zeta=zeta(a, b), two_zeta=two_zeta(a, b))


# ---------------------------------------------------------------- reference curves (eq. 30-40)


def constrained_curve(lam, omega, depths) -> np.ndarray:
    """min over gamma of sum_k lam_k omega_k (1 - gamma lam_k / L)^(2L), per L (eq. 33, 34)."""
    lam, omega = _check_spectrum(lam, omega)
    depths = check_depths(depths)
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
        res = _minimize_scalar(objective, bounds=(lo, hi), method="bounded",
                              options=dict(xatol=1e-15 * x_max, maxiter=500))
        out[i] = scale * min(float(res.fun), float(values[j]))
    return out


def lanczos(nodes: np.ndarray, weights: np.ndarray, n_max: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    depths = check_depths(depths)
    w = lam * omega
    alpha, beta, _ = lanczos(lam, w, int(depths.max()) + 1)
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
    U = torch.randn(n, P, lam.size, generator=gen, dtype=torch.float64).mul_(torch.from_numpy(np.sqrt(lam)))  # in place: one copy
    beta = torch.randn(n, lam.size, generator=gen, dtype=torch.float64).mul_(torch.from_numpy(np.sqrt(omega)))
    x = U[torch.arange(n), torch.randint(0, P, (n,), generator=gen)]
    return U, beta, x


def poly_basis(lam, omega, P, gen, n_poly, population, contexts=256):
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
    alpha, beta, _ = lanczos(nodes, weights / weights.max(), n_poly)
    return alpha, beta


def basis_images(apply_S, v: torch.Tensor, coeffs) -> list[torch.Tensor]:
    """S psi_m(S) v for m < len(alpha), psi_m the orthonormal polynomials of the recurrence
    coefficients `coeffs` = (alpha, beta) (poly_basis) and `apply_S` a product with S; the
    three-term recurrence, never a power of S. psi_0 is a constant (its scale is irrelevant)."""
    alpha, beta_c = coeffs
    prev, cur = torch.zeros_like(v), v  # psi_{-1} = 0, psi_0 = const
    out = []
    for m in range(alpha.size):
        s_cur = apply_S(cur)  # S psi_m(S) v: the image and the next recurrence step
        out.append(s_cur)
        if m + 1 < alpha.size:
            nxt = (s_cur - alpha[m] * cur - (beta_c[m - 1] * prev if m else 0.0)) / beta_c[m]
            prev, cur = cur, nxt
    return out


def curve_chunk(P: int, d: int) -> int:
    """Contexts per chunk of _poly_features: ~128 MiB of inputs at a time (also train.memory's estimate)."""
    return max(1, 2**24 // (P * d))


def _poly_features(lam, omega, P, n, coeffs, gen, population):
    """f_m = beta^T S psi_m(S) x_test (m < n_poly) and y* = beta^T x_test on n fresh contexts;
    S is the empirical U^T U / P, or Sigma with population=True."""
    alpha, beta_c = coeffs
    F = torch.empty(n, alpha.size, dtype=torch.float64)
    y = torch.empty(n, dtype=torch.float64)
    lam_t = torch.from_numpy(lam)
    chunk = curve_chunk(P, lam.size)
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
        for m, s_img in enumerate(basis_images(apply_S, x, coeffs)):
            F[lo:lo + c, m] = (beta * s_img).sum(1)
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
    `reliable` marks held_out <= 1.25 in_sample. `degree`: the polynomial degree each depth used
    (below L where the basis has fewer distinct nodes, or where higher degrees overflow a feature:
    then that depth is not `reliable` either). With population=True, S is Sigma and the minimum
    is free_curve's (a test checks it).
    """
    lam, omega = spectra(d, a, b)
    P = check_int("P", P, 1)
    samples = check_int("samples", samples, 16)
    depths = check_depths(depths)
    gen = seeds.generator(check_int("seed", seed, 0))
    coeffs = poly_basis(lam, omega, P, gen, int(depths.max()), population)
    F, y = _poly_features(lam, omega, P, samples, coeffs, gen, population)
    F2, y2 = _poly_features(lam, omega, P, samples, coeffs, gen, population)
    usable = _finite_columns(F, F2)
    fit, held, se, degree = [], [], [], []
    with np.errstate(over="ignore", invalid="ignore"):
        for L in depths.tolist():
            n = min(L, usable)  # a basis shorter than L: fewer distinct nodes, or the degrees that overflow
            scale = np.linalg.norm(F[:, :n], axis=0)  # equal column norms: rcond then cuts nothing real
            coef = np.linalg.lstsq(F[:, :n] / scale, y, rcond=None)[0] / scale
            fit.append(float(np.mean((y - F[:, :n] @ coef) ** 2)))
            e2 = (y2 - F2[:, :n] @ coef) ** 2
            held.append(float(e2.mean()))
            se.append(float(e2.std(ddof=1) / math.sqrt(samples)))
            degree.append(n)
    reliable = [bool(h <= 1.25 * f) and n == min(L, F.shape[1])
                for h, f, n, L in zip(held, fit, degree, depths.tolist())]
    return dict(depths=depths.tolist(), in_sample=fit, held_out=held, held_out_se=se, degree=degree,
                reliable=reliable, samples=samples, P=P, population=population)


def _finite_columns(*features: np.ndarray) -> int:
    """How many leading feature columns can enter a least-squares fit: finite in every sample, with
    a finite, non-zero norm. A high-degree psi_m grows exponentially on a context whose spectrum
    reaches past the basis's nodes (|f| ~ 1e110 at m = 255, d = 32, P = 128) and overflows near
    m = 385-550 (where, depends on the contexts drawn); the curve there uses the degrees below (an upper bound on the least loss) and is not
    `reliable`."""
    with np.errstate(over="ignore", invalid="ignore"):
        ok = np.ones(features[0].shape[1], dtype=bool)
        for f in features:
            norm = np.linalg.norm(f, axis=0)
            ok &= np.isfinite(f).all(axis=0) & np.isfinite(norm) & (norm > 0)
    return int(np.argmin(ok)) if not ok.all() else int(ok.size)


def _eigen_parts(U, beta, x, P: int):
    """Per context the eigenvalues s of S = U^T U / P (clamped at 0) and v = (Q^T beta) * (Q^T x)."""
    s, Q = torch.linalg.eigh(U.transpose(1, 2) @ U / P)
    v = (Q.transpose(1, 2) @ beta.unsqueeze(-1)).squeeze(-1) * (Q.transpose(1, 2) @ x.unsqueeze(-1)).squeeze(-1)
    return s.clamp_min(0).numpy(), v.numpy()


def _eigen_contexts(lam, omega, P: int, n: int, gen, chunk: int | None = None):
    """`_eigen_parts` of `_easy_contexts(lam, omega, P, n, gen)`, the same bits, with the inputs U
    drawn `chunk` contexts at a time (default curve_chunk's ~128 MiB; the whole U of the cpu preset's
    curves held 655 MB, issue 51). The generator draws all of U before beta and the query indices,
    so U is drawn twice: once to reach beta (discarded), then again from the saved state, chunk by
    chunk. torch's normal sampler gives a long draw's numbers in pieces of whole 16-number blocks, so
    every chunk but the last is a multiple of 16 numbers; the generator ends where one draw leaves it."""
    d = lam.size
    step = 16 // math.gcd(P * d, 16)  # contexts per 16-number block boundary
    chunk = curve_chunk(P, d) if chunk is None else int(chunk)
    chunk = max(step, chunk - chunk % step)
    if n <= chunk or P * d < 16:
        return _eigen_parts(*_easy_contexts(lam, omega, P, n, gen), P)
    f64 = dict(generator=gen, dtype=torch.float64)
    start = gen.get_state()
    for lo in range(0, n, chunk):
        torch.randn(min(chunk, n - lo), P, d, **f64)
    beta = torch.randn(n, d, **f64).mul_(torch.from_numpy(np.sqrt(omega)))
    idx = torch.randint(0, P, (n,), generator=gen)
    end = gen.get_state()
    gen.set_state(start)
    s_parts, v_parts = [], []
    for lo in range(0, n, chunk):
        c = min(chunk, n - lo)
        U = torch.randn(c, P, d, **f64).mul_(torch.from_numpy(np.sqrt(lam)))
        s, v = _eigen_parts(U, beta[lo:lo + c], U[torch.arange(c), idx[lo:lo + c]], P)
        s_parts.append(s)
        v_parts.append(v)
    gen.set_state(end)
    return np.concatenate(s_parts), np.concatenate(v_parts)


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
    P = check_int("P", P, 1)
    samples = check_int("samples", samples, 16)
    depths = check_depths(depths)
    gen = seeds.generator(check_int("seed", seed, 0))

    s_fit, v_fit = _eigen_contexts(lam, omega, P, samples, gen)
    s_out, v_out = _eigen_contexts(lam, omega, P, samples, gen)

    def errors(s_, v_, gamma, L):
        return ((v_ * np.power(1.0 - gamma * s_ / L, L)).sum(1)) ** 2

    fit, held, se, gammas = [], [], [], []
    for L in depths.tolist():
        g_max = 2.0 * L / float(s_fit.max())  # beyond it the top sample mode grows with L
        res = _minimize_scalar(lambda g: float(errors(s_fit, v_fit, g, L).mean()), bounds=(0.0, g_max),
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
    depths = check_depths(depths)
    return dict(
        depths=depths.tolist(),
        constrained=constrained_curve(lam, omega, depths).tolist(),
        free=free_curve(lam, omega, depths).tolist(),
    )


__all__ = ["curve_chunk", "spectra", "zeta", "two_zeta", "exponents", "constrained_curve", "free_curve", "curve",
           "sample_free_curve", "sample_constrained_curve", "lanczos", "poly_basis", "basis_images", "check_int",
           "check_k_P", "check_exponent", "check_depths"]
