"""Contexts and tasks (SPEC §2): power-law spectra, a Haar rotation per context, teacher,
inputs, labels, and the easy / difficult retrieval targets.

Shapes: B contexts, P context pairs, d input dims, k selected tokens.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

from depthscale import kernels, seeds
from depthscale.config import MAX_SIZE, shown
from depthscale.errors import InputError


def spectrum(d: int, exponent: float, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """k^(-exponent) for k = 1..d (no normalisation)."""
    k = torch.arange(1, d + 1, dtype=torch.float64)
    return (k ** (-float(exponent))).to(dtype=dtype, device=device)


def haar_orthogonal(B: int, d: int, gen: torch.Generator, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """B Haar-random orthogonal matrices (QR of a Gaussian, sign of diag(R) fixed). O_Bxdxd.
    On the CPU in float32 the fused library's `haar_q` computes the Q (Gram-Schmidt twice in
    double precision); elsewhere torch.linalg.qr. The two agree to float rounding (~1e-7)."""
    G = torch.randn(B, d, d, generator=gen, dtype=dtype, device=device)
    if G.dtype == torch.float32 and G.device.type == "cpu" and G.shape[0] > 0 and d > 0:
        ops = kernels.fused_ops()
        if ops is not None:  # the same Q to float rounding (Gram-Schmidt twice, in double): 3.7x faster
            return ops.haar_q(G.contiguous())
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
    cls_B: torch.Tensor | None = None  # context class 0..K-1 with clusters = K >= 1; None with a fresh Haar rotation each
    clusters: int = 0  # K (RunConfig.clusters): 0 = a fresh Haar rotation per context

    @property
    def B(self) -> int:
        return self.X_BxPxd.shape[0]

    def _map(self, fn) -> "Contexts":
        return Contexts(**{f: (fn(v) if isinstance(v, torch.Tensor) else v) for f, v in self.__dict__.items()})

    def to(self, device, non_blocking: bool = False) -> "Contexts":
        """The same contexts on `device` (every tensor moved; the numbers unchanged). `non_blocking`:
        an asynchronous copy from pinned memory (prefetch.py)."""
        return self._map(lambda v: v.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "Contexts":
        """The same contexts in page-locked host memory (for an asynchronous copy to a GPU)."""
        return self._map(lambda v: v.pin_memory())


def top_k_by_cosine(X_BxPxd: torch.Tensor, xq_Bxd: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k context inputs with the largest cosine to x_test, sorted by relevance."""
    # torch.nn.functional.cosine_similarity's arithmetic (each vector over its clamped norm, then
    # the dot product), bit for bit, without expanding x_test to B x P x d first: 1.6x faster
    eps = 1e-8
    xn = torch.linalg.vector_norm(X_BxPxd, 2, dim=-1, keepdim=True).clamp_min_(eps)
    qn = torch.linalg.vector_norm(xq_Bxd, 2, dim=-1, keepdim=True).clamp_min_(eps)
    s_BxP = ((X_BxPxd / xn) * (xq_Bxd / qn).unsqueeze(1)).sum(-1)
    return torch.topk(s_BxP, k, dim=-1, largest=True, sorted=True).indices


# The random draws of sample_contexts do not depend on the spectrum (a, b): the runs of one seed
# and different spectra (a linear pack holds up to 11) draw the same Gaussians at every step, and
# only scale them differently. The draws are kept for the next call from the same generator state
# (same shapes), which then gets them, and the generator's state after them, without drawing again:
# every number is the same, bit for bit, as a fresh draw. A few recent draws, small ones only.
DRAW_CACHE_BYTES = 64 << 20
DRAW_CACHE_ENTRIES = 4  # a pack draws one batch per seed and step: the latest few are all that repeat
_DRAW_MAX_BYTES = 16 << 20
_draws: OrderedDict = OrderedDict()
_draws_lock = threading.Lock()


def _nbytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def _raw_draws(B: int, d: int, P: int, task: str, noisy: bool, gen: torch.Generator, dtype, device):
    """The spectrum-free draws of `sample_contexts`, in its order: the Haar rotations O, the
    Gaussians of the inputs zX and of the teacher zb, the label noise (if `noisy`), the easy
    task's matched index j (None otherwise). Served from the cache when `gen` is in a state it has
    seen with these shapes (then `gen` is moved on to where the draws left it)."""
    state = gen.get_state()
    key = (B, d, P, task, bool(noisy), dtype, str(device), state.numpy().tobytes())
    with _draws_lock:  # the trainer's prefetch thread samples beside the main thread (prefetch.py)
        hit = _draws.get(key)
        if hit is not None:
            _draws.move_to_end(key)
    if hit is not None:
        gen.set_state(hit[1])
        return hit[0]
    O = haar_orthogonal(B, d, gen, dtype, device)
    zX = torch.randn(B, P + 1, d, generator=gen, dtype=dtype, device=device)
    zb = torch.randn(B, d, generator=gen, dtype=dtype, device=device)
    zn = torch.randn(B, P, generator=gen, dtype=dtype, device=device) if noisy else None
    j = torch.randint(0, P, (B,), generator=gen, device=device) if task == "easy" else None
    draws = (O, zX, zb, zn, j)
    size = _nbytes(draws)
    if size <= _DRAW_MAX_BYTES:
        with _draws_lock:
            _draws[key] = (draws, gen.get_state())
            total = sum(_nbytes(v[0]) for v in _draws.values())
            while (total > DRAW_CACHE_BYTES or len(_draws) > DRAW_CACHE_ENTRIES) and len(_draws) > 1:
                _, (old, _) = _draws.popitem(last=False)
                total -= _nbytes(old)
    return draws


def clear_draw_cache() -> None:
    with _draws_lock:
        _draws.clear()


# Clustered contexts (paper App. D.2; RunConfig.clusters): with clusters = K >= 1 each context's
# rotation is one of K fixed Haar rotations, the same for every seed, stream (training, monitor,
# evaluation) and spectrum: drawn once per (K, d) from a generator seeded by CLUSTER_SEED, K and d
# only, in float64 on the CPU (so the same on every device), then cast.
_cluster_cache: dict = {}


def cluster_rotations(K: int, d: int, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """The K fixed rotations of clustered contexts, O_Kxdxd (cached)."""
    if not 1 <= K <= MAX_SIZE:  # (torch takes 64-bit sizes only)
        raise InputError(f"clusters must be between 1 and {MAX_SIZE:,} here, got {shown(K)}")
    key = (int(K), int(d))
    if key not in _cluster_cache:
        gen = seeds.generator(seeds.cluster_seed(K, d))
        _cluster_cache[key] = haar_orthogonal(int(K), int(d), gen, torch.float64)
    return _cluster_cache[key].to(dtype=dtype, device=device)


def sample_contexts(B: int, d: int, P: int, a: float, b: float, task: str, k: int,
                    gen: torch.Generator, noise: float = 0.0, dtype=torch.float32,
                    device="cpu", clusters: int = 0) -> Contexts:
    """Sample B independent contexts from the generator `gen` and return them on `device` (SPEC §2).
    Everything is computed where `gen` lives — the CPU for every generator of `make_generator` — and
    then moved: a run's contexts are the same bits whichever device trains it.
    `clusters` = K >= 1: after the usual draws (the fresh Haar rotation is drawn and discarded, so
    the Gaussians equal those of clusters = 0), each context draws its class uniformly in 0..K-1
    from `gen` and takes that class's fixed rotation (`cluster_rotations`); 0: a fresh rotation each."""
    if task not in ("easy", "difficult"):
        raise InputError(f"task must be easy or difficult, got {task!r}")
    out_device, device = torch.device(device), gen.device  # drawn and computed where the stream lives
    lam = spectrum(d, a, dtype, device)
    omega = spectrum(d, b, dtype, device)
    O, zX, zb, zn, j = _raw_draws(B, d, P, task, noise > 0, gen, dtype, device)
    cls = None
    if clusters:
        cls = torch.randint(0, int(clusters), (B,), generator=gen, device=device)
        O = cluster_rotations(int(clusters), d, dtype, device)[cls]
    # x = O diag(sqrt(lam)) z has covariance Sigma = O diag(lam) O^T; same for beta with Omega.
    X_all = torch.einsum("bij,bpj->bpi", O, zX * lam.sqrt())
    beta = torch.einsum("bij,bj->bi", O, zb * omega.sqrt())
    O = O.clone()  # (the cached draw stays untouched whatever a caller does with its contexts)
    X, xq = X_all[:, :P], X_all[:, P]
    y = torch.einsum("bpd,bd->bp", X, beta)
    if noise > 0:
        y = y + noise * zn
    if task == "easy":
        sel = j.unsqueeze(1).clone()  # (not a view of the cached draw)
        xq = X[torch.arange(B, device=device), j]
    else:
        sel = top_k_by_cosine(X, xq, k)
    t = torch.gather(X, 1, sel.unsqueeze(-1).expand(-1, -1, d)).mean(1)
    ystar = torch.gather(y, 1, sel).mean(1)
    ctx = Contexts(X, y, xq, ystar, sel, t, beta, O, lam, omega, cls, int(clusters))
    return ctx if out_device == device else ctx.to(out_device)


def sample_for(cfg, B: int, gen: torch.Generator, device="cpu", dtype=torch.float32) -> Contexts:
    """Contexts for a RunConfig's data fields."""
    return sample_contexts(B, cfg.d, cfg.P, cfg.a, cfg.b, cfg.task, cfg.k, gen, cfg.noise, dtype, device,
                           getattr(cfg, "clusters", 0))


def make_generator(seed: int, device="cpu") -> torch.Generator:
    """The generator of a data stream. Always a CPU generator, whatever `device` the run trains on
    (SPEC §2: same seed, same contexts, bit for bit, on a CPU or a GPU): `sample_contexts` draws and
    computes the contexts on the CPU and moves them. `device` is accepted for the callers' symmetry."""
    del device
    return seeds.generator(seed)


step_seed = seeds.step_seed  # (seeds.py derives every stream's seed)
CLUSTER_SEED = seeds.CLUSTER_SEED


__all__ = ["Contexts", "sample_contexts", "cluster_rotations", "CLUSTER_SEED", "clear_draw_cache", "sample_for", "spectrum", "haar_orthogonal",
           "top_k_by_cosine", "make_generator", "step_seed"]
