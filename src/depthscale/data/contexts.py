"""Contexts and tasks (SPEC §2): power-law spectra, a Haar rotation per context, teacher,
inputs, labels, and the easy / difficult retrieval targets.

The stream is counter-based (issue 35): a `ContextStream` is a `seeds.StreamKey` and the index of
its next context, and context i of a stream is a pure function of (key, i) — Philox-4x32-10 words
at counters (block, i, purpose | kind << 8, step) under the stream's seed (philox.py), turned into
Gaussians, a Householder Haar rotation, the inputs, teacher, labels and targets in float64 on the
CPU, then stored in the run's dtype. Hence the same contexts at any thread count, in any batch split,
in any pack, for any device. Two forms compute them: the fused sampler (csrc/sampler.cpp, threaded
over contexts) and, without a compiler, numpy's Philox and torch (`draws_torch`, `transform_torch`):
the same integers bit for bit, the float64 numbers to ~1e-16 relative.

Shapes: B contexts, P context pairs, d input dims, k selected tokens.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from depthscale.base import seeds
from depthscale.base.errors import InputError
from depthscale.config.run import CONTEXT_STREAM, MAX_SIZE, shown
from depthscale.data import kernels, philox


def spectrum(d: int, exponent: float, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """k^(-exponent) for k = 1..d (no normalisation)."""
    k = torch.arange(1, d + 1, dtype=torch.float64)
    return (k ** (-float(exponent))).to(dtype=dtype, device=device)


class ContextStream:
    """A context stream (`seeds.StreamKey`) and the index of its next context: each sampling call
    takes the next B contexts, so a stream read in chunks of any size gives the same contexts."""

    def __init__(self, key, start: int = 0):
        self.key, self.next = seeds.stream_key(key), int(start)

    def take(self, B: int) -> int:
        """The index of the first of the next B contexts (and move past them)."""
        start, self.next = self.next, self.next + int(B)
        return start

    def __repr__(self) -> str:
        return f"ContextStream({self.key}, next={self.next})"


def as_stream(gen) -> ContextStream:
    """`gen` itself if a ContextStream; a StreamKey or int: a new stream of it from context 0; a
    torch.Generator: the ADHOC stream keyed by one 63-bit draw from it (so successive calls with the
    same generator give fresh contexts, and a seeded generator the same ones)."""
    if isinstance(gen, ContextStream):
        return gen
    if isinstance(gen, torch.Generator):
        seed = int(torch.randint(0, 2**63 - 1, (1,), generator=gen, device=gen.device).item())
        return ContextStream(seeds.StreamKey(seeds.ADHOC, seed))
    return ContextStream(gen)


def haar_from_householder(v_BxN: torch.Tensor, d: int) -> torch.Tensor:
    """Haar rotations O_Bxdxd from d(d+1)/2 Gaussians per matrix (float64), without a LAPACK call.

    Row b holds vectors x_1..x_d of lengths d, d-1, ..., 1. With H_k the Householder reflection of
    x_k (acting on coordinates k..d: H_k x_k = alpha_k e_k, alpha_k = -sgn(x_k1) |x_k|, sgn(0) = 1)
    and s_k = sgn(alpha_k), O = H_1 H_2 ... H_d diag(s). This is the Q of a Householder QR of a
    Gaussian matrix G with the sign of diag R fixed positive (Mezzadri 2007), which is exactly Haar:
    after H_1, the columns 2..d of H_1 G are again i.i.d. Gaussian and independent of x_1, so each
    x_k may be drawn fresh (Stewart 1980). d(d+1)/2 Gaussians instead of d^2."""
    B = v_BxN.shape[0]
    if v_BxN.shape[1] != d * (d + 1) // 2:
        raise ValueError(f"need d(d+1)/2 = {d * (d + 1) // 2} Gaussians per rotation, got {v_BxN.shape[1]}")
    offs = [k * d - k * (k - 1) // 2 for k in range(d + 1)]
    x0 = v_BxN[:, offs[:-1]]  # the first entry of each x_k
    sgn = torch.where(x0 >= 0, 1.0, -1.0).to(v_BxN.dtype)
    M = torch.diag_embed(-sgn)  # diag(s), s_k = sgn(alpha_k) = -sgn(x_k1)
    for k in range(d - 1, -1, -1):
        x = v_BxN[:, offs[k]:offs[k + 1]]
        u = x.clone()
        u[:, 0] = x[:, 0] + sgn[:, k] * x.square().sum(-1).sqrt()  # x - alpha e_1
        n = u.square().sum(-1, keepdim=True).sqrt()
        u = torch.where(n > 0, u / n.clamp_min(1e-300), 0.0)  # x = 0 (a zero Gaussian, 2^-32): H = I
        w = (u.unsqueeze(-1) * M[:, k:, :]).sum(1)  # u^T M[k:, :]
        M[:, k:, :] -= 2.0 * u.unsqueeze(-1) * w.unsqueeze(1)
    return M


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


# The draws of sample_contexts do not depend on the spectrum (a, b): the runs of one seed and
# different spectra (a linear pack holds up to 11) draw the same numbers at every step, and only
# scale them differently. The draws of a few recent calls are kept, keyed by what they are a
# function of (the stream's key, the first context, the shapes): a repeat is served from here.
DRAW_CACHE_BYTES = 64 << 20
DRAW_CACHE_ENTRIES = 4  # a pack draws one batch per seed and step: the latest few are all that repeat
_DRAW_MAX_BYTES = 16 << 20
_draws: OrderedDict = OrderedDict()
_draws_lock = threading.Lock()


def _nbytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def draws_torch(key: seeds.StreamKey, start: int, B: int, d: int, P: int, task: str, noisy: bool,
                clusters: int = 0) -> tuple:
    """The spectrum-free draws of contexts start..start+B-1 of the stream `key`, computed with the
    numpy Philox of philox.py (the reference form): the rotations O (float64, B x d x d; None with
    clusters, whose rotations are fixed), the Gaussians of the inputs zX (B x P x d), of the test
    input zq (B x d; None for the easy task, whose x_test is a context input), of the teacher zb
    (B x d) and of the label noise zn (B x P, if `noisy`), the easy task's matched index j (int64,
    else None) and the class of clustered contexts cls (int64, else None)."""
    ctx = np.arange(start, start + B, dtype=np.int64)
    g = lambda purpose, n: torch.from_numpy(  # noqa: E731
        philox.gaussians(key.seed, key.kind, key.step, ctx, purpose, n))
    i = lambda purpose, n: torch.from_numpy(  # noqa: E731
        philox.integers(key.seed, key.kind, key.step, ctx, purpose, n))
    O = None if clusters else haar_from_householder(g(philox.HAAR, d * (d + 1) // 2), d)
    zX = g(philox.INPUTS, P * d).reshape(B, P, d)
    zq = g(philox.QUERY, d) if task == "difficult" else None
    zb = g(philox.TEACHER, d)
    zn = g(philox.NOISE, P) if noisy else None
    j = i(philox.MATCH, P) if task == "easy" else None
    cls = i(philox.CLASS, int(clusters)) if clusters else None
    return O, zX, zq, zb, zn, j, cls


def _draw_key(key: seeds.StreamKey, start: int, B: int, d: int, P: int, task: str, noisy: bool, clusters: int):
    """The draw cache's key of a batch's draws (they do not depend on the spectra)."""
    return (key, int(start), B, d, P, task, bool(noisy), int(clusters))


def _raw_draws(key: seeds.StreamKey, start: int, B: int, d: int, P: int, task: str, noisy: bool, clusters: int):
    """`draws_torch`'s draws (or the fused kernel's, the same numbers), from the cache if there."""
    ck = _draw_key(key, start, B, d, P, task, noisy, clusters)
    with _draws_lock:  # the trainer's prefetch thread samples beside the main thread (prefetch.py)
        hit = _draws.get(ck)
        if hit is not None:
            _draws.move_to_end(ck)
            return hit
    ops = _sampler_ops()
    if ops is not None:
        O, zX, zq, zb, zn, j, cls = ops.sampler_draws(key.seed & 0xFFFFFFFF, key.seed >> 32, key.kind, key.step,
                                                      int(start), B, d, P, task == "difficult", bool(noisy),
                                                      P if task == "easy" else 0, int(clusters))
        easy = task == "easy"
        draws = (None if clusters else O, zX, None if easy else zq, zb, zn if noisy else None,
                 j if easy else None, cls if clusters else None)
    else:
        draws = draws_torch(key, start, B, d, P, task, noisy, clusters)
    size = _nbytes(draws)
    if size <= _DRAW_MAX_BYTES:
        with _draws_lock:
            _draws[ck] = draws
            total = sum(_nbytes(v) for v in _draws.values())
            while (total > DRAW_CACHE_BYTES or len(_draws) > DRAW_CACHE_ENTRIES) and len(_draws) > 1:
                _, old = _draws.popitem(last=False)
                total -= _nbytes(old)
    return draws


def clear_draw_cache() -> None:
    with _draws_lock:
        _draws.clear()


def haar_orthogonal(B: int, d: int, gen, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """B Haar-random orthogonal matrices O_Bxdxd: the next B contexts' rotations of the stream `gen`
    (a ContextStream, StreamKey, int or torch.Generator: `as_stream`), made in float64 on the CPU
    (`haar_from_householder`) and cast."""
    stream = as_stream(gen)
    start = stream.take(B)
    ctx = np.arange(start, start + B, dtype=np.int64)
    k = stream.key
    v = torch.from_numpy(philox.gaussians(k.seed, k.kind, k.step, ctx, philox.HAAR, d * (d + 1) // 2))
    return haar_from_householder(v, d).to(dtype=dtype, device=device)


# Clustered contexts (paper App. D.2; RunConfig.clusters): with clusters = K >= 1 each context's
# rotation is one of K fixed Haar rotations, the same for every seed, stream (training, monitor,
# evaluation) and spectrum: contexts 0..K-1 of the stream seeds.cluster_stream(K, d), in float64 on
# the CPU (so the same on every device), then cast.
_cluster_cache: dict = {}


def cluster_rotations(K: int, d: int, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """The K fixed rotations of clustered contexts, O_Kxdxd (cached)."""
    if not 1 <= K <= MAX_SIZE:  # (torch takes 64-bit sizes only)
        raise InputError(f"clusters must be between 1 and {MAX_SIZE:,} here, got {shown(K)}")
    key = (int(K), int(d))
    if key not in _cluster_cache:
        _cluster_cache[key] = haar_orthogonal(int(K), int(d), seeds.cluster_stream(K, d), torch.float64)
    return _cluster_cache[key].to(dtype=dtype, device=device)


_EMPTY, _EMPTY_I = torch.empty(0, dtype=torch.float64), torch.empty(0, dtype=torch.int64)


def _sampler_ops():
    """The fused sampler (csrc/sampler.cpp) where the kernel is built and on, else None."""
    ops = kernels.fused_ops()
    return ops if ops is not None and hasattr(ops, "sampler_draws") else None


def transform_torch(O, zX, zq, zb, zn, j, sl, so, noise: float, k: int) -> list:
    """The contexts (X, y, x_test, y*, sel, t, beta; float64) of rotations O and draws zX, zq (empty:
    the easy task, whose matched index is j), zb, zn (empty: no noise), with sl, so the square roots
    of the spectra: x = O diag(sl) z has covariance O diag(lam) O^T, beta likewise with omega. The
    torch form of the fused `sampler_transform` (the same numbers to float64 rounding)."""
    X = torch.matmul(zX * sl, O.transpose(1, 2))
    beta = torch.matmul(O, (zb * so).unsqueeze(-1)).squeeze(-1)
    y = torch.matmul(X, beta.unsqueeze(-1)).squeeze(-1)
    if zn.numel():
        y = y + noise * zn
    if zq.numel() == 0:  # easy: x_test is the matched input
        sel = j.unsqueeze(1).clone()
        xq = X[torch.arange(X.shape[0]), j]
    else:
        xq = torch.matmul(O, (zq * sl).unsqueeze(-1)).squeeze(-1)
        sel = top_k_by_cosine(X, xq, k)
    d = X.shape[-1]
    t = torch.gather(X, 1, sel.unsqueeze(-1).expand(-1, -1, d)).mean(1)
    ystar = torch.gather(y, 1, sel).mean(1)
    return [X, y, xq, ystar, sel, t, beta]


def sample_contexts(B: int, d: int, P: int, a: float, b: float, task: str, k: int,
                    gen, noise: float = 0.0, dtype=torch.float32,
                    device="cpu", clusters: int = 0, cache_draws: bool = True) -> Contexts:
    """The next B contexts of the stream `gen` (a ContextStream of `make_generator`; see `as_stream`
    for the other forms), on `device` (SPEC §2). Each context is a pure function of the stream's key,
    its index in the stream and the arguments (philox.py): made in float64 on the CPU, cast to
    `dtype` and moved, so a run's contexts are the same bits whichever device trains it and however
    the stream is cut into batches. The top-k selection is made on the float64 cosines.
    `clusters` = K >= 1: each context draws its class uniformly in 0..K-1 and takes that class's
    fixed rotation (`cluster_rotations`); the Gaussians are those of clusters = 0.
    `cache_draws`=False: no other spectrum will ask for these draws (a training batch of one data
    stream), so the fused kernel makes the contexts in one pass without storing the draws (the same
    numbers; `_one_pass`)."""
    k = _task_k(task, k)
    stream = as_stream(gen)
    start = stream.take(B)
    sl, so = _root_spectra(d, a, b)
    made = _one_pass([stream.key], start, B, d, P, task, k, noise, sl, so, dtype) if not (cache_draws or clusters) else None
    if made is None:
        made = _two_calls(stream.key, start, B, d, P, task, k, noise, sl, so, dtype, int(clusters))
    ctx = _as_contexts(made, spectrum(d, a, dtype), spectrum(d, b, dtype), dtype, int(clusters))
    return ctx if torch.device(device) == torch.device("cpu") else ctx.to(device)


def _task_k(task: str, k: int) -> int:
    """k of the task (the difficult task's; the easy task selects one token), the task checked."""
    if task not in ("easy", "difficult"):
        raise InputError(f"task must be easy or difficult, got {task!r}")
    return int(k) if task == "difficult" else 1


def _as_contexts(made: tuple, lam_d: torch.Tensor, omega_d: torch.Tensor, dtype, clusters: int) -> Contexts:
    """Contexts of the tensors (X, y, x_test, y*, sel, t, β, O, classes) a sampling path made, cast
    to `dtype` (no copy where they are of it already)."""
    X, y, xq, ystar, sel, t, beta, O, cls = made
    cast = lambda v: v if v.dtype == dtype else v.to(dtype)  # noqa: E731
    return Contexts(cast(X), cast(y), cast(xq), cast(ystar), sel, cast(t), cast(beta), cast(O), lam_d, omega_d, cls,
                    clusters)


def _two_calls(key: seeds.StreamKey, start: int, B: int, d: int, P: int, task: str, k: int, noise: float,
               sl: torch.Tensor, so: torch.Tensor, dtype, clusters: int) -> tuple:
    """The contexts' tensors (X, y, x_test, y*, sel, t, β, O in `dtype`, the classes) from the draws
    (`_raw_draws`: cached, for other spectra) and the transform (the fused kernel's, else torch's)."""
    O, zX, zq, zb, zn, j, cls = _raw_draws(key, start, B, d, P, task, noise > 0, clusters)
    if clusters:
        O = cluster_rotations(clusters, d, torch.float64)[cls]
    args = (O, zX, zq if zq is not None else _EMPTY, zb, zn if zn is not None else _EMPTY,
            j if j is not None else _EMPTY_I, sl, so, float(noise), k)
    ops = _sampler_ops()  # (the kernel stores float32 contexts as the float64 ones rounded, without a cast)
    out = ops.sampler_transform(*args, dtype == torch.float32) if ops is not None else transform_torch(*args)
    # (a copy: the cached draw stays untouched whatever a caller does with its contexts)
    return (*out, O.to(dtype, copy=True), cls)


def one_pass_available() -> bool:
    """Whether `sample_contexts(..., cache_draws=False)` runs the fused one-pass kernel here (builds
    the kernel if it was not tried yet; `kernels.expected` is the question without a build)."""
    ops = _sampler_ops()
    return ops is not None and hasattr(ops, "sampler_contexts_keys")


def _one_pass(keys: list, start: int, B: int, d: int, P: int, task: str, k: int, noise: float,
              sl: torch.Tensor, so: torch.Tensor, dtype) -> tuple | None:
    """`_two_calls`' tensors by the fused kernel's one-pass `sampler_contexts_keys` (draws and
    transform per context, no float64 batch of draws written and read back), for contexts
    start..start+B-1 of each stream in `keys` (of one kind), stream by stream; None where that kernel
    is not built or the draws are already cached (the cached path is then cheaper)."""
    with _draws_lock:
        cached = any(_draw_key(key, start, B, d, P, task, noise > 0, 0) in _draws for key in keys)
    if cached or not one_pass_available():
        return None
    easy = task == "easy"
    words = torch.tensor([[key.seed & 0xFFFFFFFF, key.seed >> 32, key.step] for key in keys], dtype=torch.int64)
    out = _sampler_ops().sampler_contexts_keys(words, keys[0].kind, int(start), B, d, P, not easy, noise > 0,
                                               P if easy else 0, sl, so, float(noise), k, dtype == torch.float32)
    return (*out, None)


def sample_streams(cfg, keys: list, B: int, dtype=torch.float32) -> list[Contexts] | None:
    """Contexts 0..B-1 of each stream in `keys` (StreamKeys of one kind: the seeds of a pack at one
    step) for `cfg`'s data fields, made by one call of the fused one-pass kernel into one buffer:
    stream i's contexts are rows iB..(i+1)B of it, as views (`joined` gives them back as the whole,
    without a copy). Each the same numbers as `sample_for` on that stream with cache_draws=False
    (test). None where the one-pass kernel is not built, the keys are of several kinds, or the
    task draws classes (clusters)."""
    _check_stream(cfg)
    if getattr(cfg, "clusters", 0) or len({key.kind for key in keys}) != 1:
        return None
    d, a, b = cfg.d, cfg.a, cfg.b
    made = _one_pass(keys, 0, B, d, cfg.P, cfg.task, _task_k(cfg.task, cfg.k), cfg.noise, *_root_spectra(d, a, b),
                     dtype)
    if made is None:
        return None
    lam, omega = _spectra(d, a, b, dtype)
    K = len(keys)  # stream i's rows as views (view and unbind: two calls into C++ a field)
    parts = [(None,) * K if v is None else v.view(K, B, *v.shape[1:]).unbind(0) for v in made]
    return [_as_contexts(tuple(p[i] for p in parts), lam, omega, dtype, 0) for i in range(K)]


_ROOTS: dict = {}
_SPECTRA: dict = {}


def _kept(cache: dict, key: tuple, make: Callable[[], tuple]) -> tuple:
    """cache[key], made by make() the first time (at most 65 kept: a pack asks for the same every
    step). Read into a local: another thread, the prefetcher's, may clear the dict meanwhile."""
    made = cache.get(key)
    if made is None:
        made = make()
        if len(cache) > 64:
            cache.clear()
        cache[key] = made
    return made


def root_spectrum(d: int, exponent: float) -> torch.Tensor:
    """The square root of spectrum(d, exponent) in float64, each entry correctly rounded (IEEE sqrt,
    one entry at a time). Not torch.sqrt: on the CPU it goes through the vectorised math torch was
    built with, which on some CPUs (an Intel Xeon, seen here) is off by an ulp in a few entries --
    and these numbers are the sampler's input, so the context stream would depend on the CPU's make."""
    return torch.tensor([math.sqrt(x) for x in spectrum(d, exponent, torch.float64).tolist()], dtype=torch.float64)


def _root_spectra(d: int, a: float, b: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The square roots of the spectra in float64 (root_spectrum), the samplers' arguments (the
    kernels' and `transform_torch`'s: read, never written, never handed out; kept per (d, a, b))."""
    return _kept(_ROOTS, (int(d), float(a), float(b)), lambda: (root_spectrum(d, a), root_spectrum(d, b)))


def _spectra(d: int, a: float, b: float, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(spectrum(d, a, dtype), spectrum(d, b, dtype)), kept per (d, a, b, dtype) and handed out as
    copies (a caller may write into its contexts' spectra)."""
    lam, omega = _kept(_SPECTRA, (int(d), float(a), float(b), dtype),
                       lambda: (spectrum(d, a, dtype), spectrum(d, b, dtype)))
    return lam.clone(), omega.clone()


def joined(ts: list[torch.Tensor]) -> torch.Tensor:
    """torch.cat(ts) along dim 0, as a view where the pieces already lie one after another in one
    buffer (`sample_streams`' batches, in their order), else the copy."""
    t0 = ts[0]
    view = len(ts) > 1 and all(
        t.is_contiguous() and not t.requires_grad and t.dtype == t0.dtype and t.device == t0.device
        and t.shape[1:] == t0.shape[1:] and t.untyped_storage().data_ptr() == t0.untyped_storage().data_ptr()
        for t in ts)
    if view:
        view = all(b.storage_offset() == a.storage_offset() + a.numel() for a, b in zip(ts, ts[1:]))
    if not view:
        return torch.cat(ts)
    return t0.as_strided((sum(t.shape[0] for t in ts), *t0.shape[1:]), t0.stride(), t0.storage_offset())


def spectra_per_seed(cfgs) -> Counter:
    """How many spectra (a, b) each seed's training stream serves in a pack. A seed serving one draws
    its batch in one pass (`sample_contexts(..., cache_draws=False)`: no draws held); a seed serving
    several caches its draws for the others. The trainer samples by this rule and the memory
    estimate counts by it."""
    return Counter(s for s, _, _ in {(c.seed, c.a, c.b) for c in cfgs})


def sample_for(cfg, B: int, gen, device="cpu", dtype=torch.float32, cache_draws: bool = True) -> Contexts:
    """Contexts for a RunConfig's data fields; a run of another context stream (config.STREAMS:
    a "legacy" run stored by an earlier version) is refused in one line, never given this one's."""
    _check_stream(cfg)
    return sample_contexts(B, cfg.d, cfg.P, cfg.a, cfg.b, cfg.task, cfg.k, gen, cfg.noise, dtype, device,
                           getattr(cfg, "clusters", 0), cache_draws)


def _check_stream(cfg) -> None:
    stream = getattr(cfg, "stream", CONTEXT_STREAM)
    if stream != CONTEXT_STREAM:
        raise InputError(f"this run's contexts come from the {stream!r} context stream, which this version "
                         f"cannot draw (it draws {CONTEXT_STREAM!r}): rerun it with this version")


def make_generator(seed, device="cpu") -> ContextStream:
    """The context stream of `seed` (a seeds.StreamKey, e.g. seeds.step_seed(seed, step); a bare int
    n: the evaluation stream of n), from its first context. Contexts are made on the CPU whatever
    `device` the run trains on (SPEC §2); `device` is accepted for the callers' symmetry."""
    del device
    return ContextStream(seed)


__all__ = ["Contexts", "ContextStream", "as_stream", "sample_contexts", "cluster_rotations",
           "clear_draw_cache", "one_pass_available", "sample_for", "sample_streams", "joined", "spectra_per_seed", "spectrum", "haar_orthogonal", "haar_from_householder", "draws_torch",
           "top_k_by_cosine", "make_generator", "transform_torch"]
