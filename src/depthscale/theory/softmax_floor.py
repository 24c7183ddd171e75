"""The softmax-ensemble floor of the nonlinear model (SPEC §3.4; not in the paper): the best single
cosine-softmax head, the best infinitely deep ensemble of such heads (a nonnegative mixture of
temperatures with one gain), and their finite-depth companions, on contexts of two sources: Monte
Carlo (`softmax_floor`) or given ones, e.g. a run's evaluation contexts (`floor_from_contexts`;
SPEC §3.4: the floor depends on the contexts). One implementation of the head moments (`_moments`)
serves both."""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np
import torch
from tqdm import tqdm

from depthscale.base import seeds
from depthscale.base.errors import InputError
from depthscale.theory.linear import check_depths, check_exponent, check_int, check_k_P, spectra

SOFTMAX_FAMILY = "cosine"


def default_temperatures() -> np.ndarray:
    """The cosine-head family of the floor: temperatures -10 ... 500 (negative ones attend away
    from the query; 0 is the uniform average), geometric where the optimum lives."""
    return np.concatenate([[-10.0, -5.0, -2.0, -1.0, 0.0], np.geomspace(0.25, 500.0, 96)])


def _batch_sizes(n: int, batches: int) -> list[int]:
    """Contexts per cross-fitting batch: n split as evenly as possible, the larger batches first."""
    return [n // batches + (1 if i < n % batches else 0) for i in range(batches)]


def context_chunk(J: int, P: int) -> int:
    """Contexts per moment computation: keeps the (chunk, J, P) attention array near 32 MB (also
    what train.memory's estimate of the softmax floor reads)."""
    return max(1, min(4096, 2**22 // (J * P)))


def cosines(x_BxPxd: torch.Tensor, q_Bxd: torch.Tensor) -> torch.Tensor:
    """cos(x_i, x_test) per context and token, BxP (in the inputs' dtype)."""
    return torch.einsum("bpd,bd->bp", x_BxPxd / torch.linalg.vector_norm(x_BxPxd, dim=-1, keepdim=True),
                        q_Bxd / torch.linalg.vector_norm(q_Bxd, dim=-1, keepdim=True))


def head_predictions(cos_BxP: torch.Tensor, y_BxP: torch.Tensor, tau_J: torch.Tensor) -> torch.Tensor:
    """Every cosine head's prediction H_j = softmax(tau_j cos) . y at gain 1, BxJ."""
    p = torch.softmax(tau_J.view(1, -1, 1) * cos_BxP.unsqueeze(1), dim=-1)  # (B, J, P)
    return torch.einsum("bjp,bp->bj", p, y_BxP)


def _moments(parts, tau_J: torch.Tensor, sizes: list[int], bar=None, keep_heads: bool = False):
    """The head moments, whatever the source of the contexts (the one implementation).

    `parts` yields (batch index i, x BxPxd, x_test Bxd, y BxP, y* B), float64, each batch's
    contexts in consecutive parts. Returns G (n_b, J, J) = sum H H^T, h (n_b, J) = sum H y*,
    T (n_b,) = sum y*^2, n (n_b,) and, with keep_heads, each context's H (n, J) in the order given."""
    J, nb = tau_J.numel(), len(sizes)
    G, h, T = np.zeros((nb, J, J)), np.zeros((nb, J)), np.zeros(nb)
    # kept heads in one array made up front: a small block kept after each part's large temporaries
    # would pin the heap above them (glibc never reuses the holes: +3.8 GB on a 102,400-context set)
    kept, row = (np.empty((int(sum(sizes)), J)) if keep_heads else None), 0
    for i, x, q, y, ystar in parts:
        H = head_predictions(cosines(x, q), y, tau_J)
        G[i] += (H.T @ H).cpu().numpy()
        h[i] += (H.T @ ystar).cpu().numpy()
        T[i] += float(ystar.pow(2).sum())
        if keep_heads:
            kept[row:row + H.shape[0]] = H.cpu().numpy()
            row += H.shape[0]
        if bar is not None:
            bar.update(x.shape[0])
    if keep_heads and row != kept.shape[0]:
        raise InputError(f"the parts hold {row} contexts, not the {kept.shape[0]} of the batches")
    n = np.asarray(sizes, dtype=np.float64)
    return (G, h, T, n, kept) if keep_heads else (G, h, T, n)


def _mc_parts(a, b, k, d, P, sizes, seed, J, device):
    """Monte Carlo contexts (SPEC §2) for `_moments`, batch by batch, in chunks of `context_chunk(J, P)`.
    The rotation O is the identity: a cosine head and the top-k selection are rotation invariant,
    so no moment changes."""
    lam, omega = spectra(d, a, b)
    f64 = dict(dtype=torch.float64, device=torch.device(device))
    gen = seeds.generator(seed, torch.device(device))
    sqrt_lam = torch.as_tensor(np.sqrt(lam), **f64)
    sqrt_om = torch.as_tensor(np.sqrt(omega), **f64)
    chunk = context_chunk(J, P)
    for i, n_i in enumerate(sizes):
        done = 0
        while done < n_i:
            nb = min(chunk, n_i - done)
            x = torch.randn(nb, P, d, generator=gen, **f64) * sqrt_lam
            q = torch.randn(nb, d, generator=gen, **f64) * sqrt_lam
            beta = torch.randn(nb, d, generator=gen, **f64) * sqrt_om
            y = torch.einsum("bpd,bd->bp", x, beta)
            ystar = torch.gather(y, 1, torch.topk(cosines(x, q), k, dim=-1).indices).mean(1)
            yield i, x, q, y, ystar
            done += nb


def _head_moments(a, b, k, d, P, samples, seed, temperatures, batches, device, progress):
    """Per-batch moments of the cosine heads on `samples` Monte Carlo contexts in `batches`
    independent batches (`_moments` on `_mc_parts`)."""
    tau_J = torch.as_tensor(temperatures, dtype=torch.float64, device=torch.device(device))
    sizes = _batch_sizes(samples, batches)
    with tqdm(total=samples, disable=None if progress else True, file=sys.stderr,
              desc=f"softmax floor a={a} b={b} k={k}", unit="ctx", unit_scale=True) as bar:
        return _moments(_mc_parts(a, b, k, d, P, sizes, seed, tau_J.numel(), device), tau_J, sizes, bar)


def mc_contexts(a, b, k, d, P, samples, seed, batches=10, temperatures=None, device="cpu"):
    """The Monte Carlo contexts `softmax_floor` with these arguments draws, as float64 tensors
    (x PxD per context, x_test, y, y*), e.g. to feed them to `floor_from_contexts`."""
    tau = default_temperatures() if temperatures is None else np.asarray(temperatures, dtype=np.float64)
    parts = list(_mc_parts(a, b, k, d, P, _batch_sizes(samples, batches), seed, tau.size, device))
    return tuple(torch.cat([p[c] for p in parts]) for c in range(1, 5))


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


def _check_temperatures(temperatures) -> np.ndarray:
    tau = default_temperatures() if temperatures is None else np.asarray(temperatures, dtype=np.float64)
    if tau.ndim != 1 or tau.size == 0 or not np.all(np.isfinite(tau)):
        raise InputError(f"temperatures must be a non-empty list of finite numbers, got {temperatures!r}")
    return tau


def _best_stacks(G, h, T, n, v_held, depths, weights: dict | None = None) -> list[float]:
    """The best depth-L stack of heads (`best_equal_weight`), cross-fitted: counts chosen on all
    batches but one, measured on the held-out one; mean over held-out batches, per depth.

    Non-increasing over depths that divide one another: a stack of L = m L' layers can repeat each
    head of the L' stack m times, the same averaged attention. So the search at L starts both from
    the mixture and from every earlier divisor's counts repeated (the better start on the fitting
    batches wins, and the local search only lowers that loss), and the reported value is at most
    the earlier divisor's (an L stack reaches what was measured for the L' stack: the min of two
    held-out estimates of nearly the same stack, which are paired and differ by little).
    `weights`, when given, receives {L: [each held-out batch's g * counts / L]} of the stack whose
    value is reported (the earlier divisor's where that one is reported)."""
    Gs, hs, Ts, ns = G.sum(0), h.sum(0), T.sum(), n.sum()
    out, counts = [], {}
    for L in depths:
        held, counts[L], vw = np.empty(len(n)), [], []
        for i in range(len(n)):
            Go, ho, To = (Gs - G[i]) / (ns - n[i]), (hs - h[i]) / (ns - n[i]), (Ts - T[i]) / (ns - n[i])
            starts = [v_held[i]] + [counts[Lp][i] * (L // Lp) for Lp in counts if Lp < L and L % Lp == 0]
            cnt, _ = min((best_equal_weight(Go, ho, To, L, start=s0) for s0 in starts), key=lambda r: r[1])
            counts[L].append(cnt)
            wl = cnt / L
            g = max(float(ho @ wl), 0.0) / max(float(wl @ Go @ wl), 1e-300)
            held[i] = (T[i] - 2 * g * (wl @ h[i]) + g * g * (wl @ G[i] @ wl)) / n[i]
            vw.append(g * wl)
        R = float(held.mean())
        cands = [(R, L)] + [(out[depths.index(Lp)], Lp) for Lp in depths[:len(out)] if Lp < L and L % Lp == 0]
        best, from_L = min(cands, key=lambda c: c[0])
        out.append(best)
        if weights is not None:
            weights[L] = vw if from_L == L else weights[from_L]
    return out


def _floor_from_moments(G, h, T, n, tau, depths: list[int]) -> tuple[dict, dict]:
    """Every number of `softmax_floor` from per-batch moments (see there). Also returns the fitted
    weights of each held-out batch: {"mixture": [v_i], "single": [(j_i, g_i)]}."""
    batches = len(n)
    Gs, hs, Ts, ns = G.sum(0), h.sum(0), T.sum(), n.sum()
    held_ens, held_one = np.empty(batches), np.empty(batches)
    v_held, one_held = [], []  # each held-out batch's mixture (also the start of its best stacks) and head
    stack_w: dict = {}  # depth -> each held-out batch's best-stack weights (g * counts / L)
    for i in range(batches):
        Go, ho = (Gs - G[i]) / (ns - n[i]), (hs - h[i]) / (ns - n[i])
        v = nonneg_mixture(Go, ho)
        v_held.append(v)
        held_ens[i] = (T[i] - 2 * v @ h[i] + v @ G[i] @ v) / n[i]
        j, g = _best_single(Go, ho)
        one_held.append((j, g))
        held_one[i] = (T[i] - 2 * g * h[i, j] + g * g * G[i, j, j]) / n[i]
    Gm, hm, Tm = Gs / ns, hs / ns, Ts / ns
    v = nonneg_mixture(Gm, hm)
    C = float(Tm - 2 * v @ hm + v @ Gm @ v)
    gain = float(v.sum())
    w = v / gain if gain > 0 else v
    A = float(np.sum(w * (gain**2 * np.diag(Gm) - 2 * gain * hm + Tm)))
    j, g1 = _best_single(Gm, hm)
    support = [dict(temperature=float(tau[i]), weight=float(w[i])) for i in np.flatnonzero(w > 1e-3)]
    sq = lambda x: float(x.std(ddof=1) / math.sqrt(batches))  # noqa: E731
    res = dict(
        single_head=float(held_one.mean()), single_head_se=sq(held_one),
        single_head_temperature=float(tau[j]), single_head_gain=g1,
        ensemble_floor=float(held_ens.mean()), se=sq(held_ens),
        # paired over the same held-out batches: far more precise than either SE
        ensemble_minus_single=float((held_ens - held_one).mean()), ensemble_minus_single_se=sq(held_ens - held_one),
        var_ystar=float(Tm), family=SOFTMAX_FAMILY,
        temperatures=[float(tau.min()), float(tau.max()), int(tau.size)],
        in_sample=dict(single_head=float(Tm - 2 * g1 * hm[j] + g1 * g1 * Gm[j, j]), ensemble_floor=C),
        mixture=dict(gain=gain, support=support),
        iid_depth=dict(C=C, A=A, delta=A - C, depths=list(depths), R=[C + (A - C) / int(L) for L in depths]),
        best_stack=dict(depths=list(depths), R=_best_stacks(G, h, T, n, v_held, list(depths), stack_w)),
    )
    return res, {"mixture": v_held, "single": one_held, "stack": stack_w}


def softmax_floor(a: float, b: float, k: int, d: int, P: int, samples: int = 20_000, seed: int = 0,
                  temperatures=None, batches: int = 10, depths=(1, 2, 4, 8, 16, 32, 64),
                  device: str = "cpu", progress: bool = True) -> dict:
    """The best single cosine-softmax head and the best infinitely deep ensemble of them, on
    `samples` Monte Carlo contexts (`floor_from_contexts` takes given ones).

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
    at depth L within the family (non-increasing over depths that divide one another: `_best_stacks`).
    """
    a, b = check_exponent("a", a), check_exponent("b", b)
    k, P = check_k_P(k, P)
    d = check_int("d", d, 1)
    batches = check_int("batches", batches, 2)
    samples = check_int("samples", samples, batches)
    seed = check_int("seed", seed, 0)
    depths = check_depths(depths)
    tau = _check_temperatures(temperatures)
    G, h, T, n = _head_moments(a, b, k, d, P, samples, seed, tau, batches, device, progress)
    res, _ = _floor_from_moments(G, h, T, n, tau, depths.tolist())
    return dict(res, samples=int(n.sum()), seed=seed, d=d, P=P, k=k, a=a, b=b)


def floor_from_contexts(x_BxPxd, xq_Bxd, y_BxP, ystar_B, temperatures=None, batches: int = 10,
                        depths=()) -> dict:
    """`softmax_floor`'s numbers on given contexts (SPEC §3.4: the floor depends on the contexts,
    so compare a run with the floor on its own evaluation contexts), cross-fitted over `batches`
    consecutive batches of them. Tensors of any float dtype (computed in float64 on their device).

    Beside softmax_floor's keys: `n`, and per context (numpy, in the order given) the squared error
    of the held-out ensemble (`sq_err_ensemble`: the mixture fitted without the context's batch)
    and of the held-out best single head (`sq_err_single`), and with `depths` the held-out best
    stack of each depth (`sq_err_stack`: {L: array}, whose mean is best_stack's R at L), for
    comparisons paired by context."""
    x, q, y, ys = (torch.as_tensor(t) for t in (x_BxPxd, xq_Bxd, y_BxP, ystar_B))
    if x.ndim != 3 or q.shape != (x.shape[0], x.shape[2]) or y.shape != x.shape[:2] or ys.shape != x.shape[:1]:
        raise InputError(f"contexts must be x BxPxd, x_test Bxd, y BxP, y* B; got shapes {tuple(x.shape)}, "
                         f"{tuple(q.shape)}, {tuple(y.shape)}, {tuple(ys.shape)}")
    return floor_from_chunks([(x, q, y, ys)], x.shape[0], temperatures, batches, depths)


def floor_from_chunks(chunks, n: int, temperatures=None, batches: int = 10, depths=()) -> dict:
    """`floor_from_contexts` on `n` contexts given as consecutive chunks (x, x_test, y, y*) of any
    sizes, e.g. an evaluation set streamed chunk by chunk (data.context_sets.ContextSet with
    hold=False): only a chunk and one moment slice are held in float64 at a time, never the whole
    set. The same numbers as `floor_from_contexts` on the concatenated tensors, bit for bit (the
    moment slices are the same rows)."""
    batches = check_int("batches", batches, 2)
    n_ctx = check_int("contexts", n, batches)
    depths = check_depths(depths).tolist() if len(depths) else []
    tau = _check_temperatures(temperatures)
    sizes = _batch_sizes(n_ctx, batches)
    ys_parts: list = []
    parts = _chunked_parts(iter(chunks), sizes, tau.size, ys_parts)
    first = next(parts)  # the device and the token count come with the first chunk
    tau_J = torch.as_tensor(tau, dtype=torch.float64, device=first[1].device)
    G, h, T, n_b, H = _moments(itertools.chain([first], parts), tau_J, sizes, keep_heads=True)
    res, fits = _floor_from_moments(G, h, T, n_b, tau, depths)
    batch_of = np.repeat(np.arange(batches), sizes)
    ystar = torch.cat(ys_parts).cpu().numpy()
    V = np.stack(fits["mixture"])[batch_of]  # each context's held-out mixture
    ens = (H * V).sum(1)
    j, g = (np.array(c)[batch_of] for c in zip(*fits["single"]))
    one = g * H[np.arange(n_ctx), j.astype(np.int64)]
    stack = {L: ((H * np.stack(w)[batch_of]).sum(1) - ystar) ** 2 for L, w in fits["stack"].items()}
    return dict(res, n=n_ctx, sq_err_ensemble=(ens - ystar) ** 2, sq_err_single=(one - ystar) ** 2,
                sq_err_stack=stack)


def _chunked_parts(chunks, sizes, J, ys_out: list):
    """Contexts for `_moments`: consecutive batches of `sizes`, in slices of `context_chunk(J, P)` from
    each batch's start, float64, cut from consecutive chunks (x, x_test, y, y*) of any sizes;
    each slice's y* is appended to `ys_out`. Holds at most a slice and a chunk."""
    buf, start = None, 0  # the float64 rows read and not yet yielded
    for i, n_i in enumerate(sizes):
        s, end = start, start + n_i
        while s < end:
            if buf is None:
                buf = _next_rows(chunks, None)
            e = min(s + context_chunk(J, buf[0].shape[1]), end)
            while buf[0].shape[0] < e - s:
                buf = _next_rows(chunks, buf)
            piece, rest = [t[: e - s] for t in buf], [t[e - s:] for t in buf]
            buf = rest if rest[0].shape[0] else None
            ys_out.append(piece[3])
            yield (i, *piece)
            s = e
        start = end
    if buf is not None or next(chunks, None) is not None:
        raise InputError(f"the chunks hold more than {start} contexts")


def _next_rows(chunks, buf):
    """`buf` (float64 rows, or None) with the next chunk's rows appended."""
    try:
        nxt = [torch.as_tensor(t).to(torch.float64) for t in next(chunks)]
    except StopIteration:
        raise InputError("the chunks hold fewer contexts than said") from None
    return nxt if buf is None else [torch.cat([a, b]) for a, b in zip(buf, nxt)]


def stack_moments(x_BxPxd, xq_Bxd, y_BxP, ystar_B, temperatures=None) -> dict:
    """The cosine heads' mean moments on given contexts, all of them in-sample (float64): G (J, J) =
    E[H H^T], h (J,) = E[H y*], T = E[y*^2], and the temperatures tau (J,) (`best_stack_on` reads them)."""
    x, q, y, ys = (torch.as_tensor(t).to(torch.float64) for t in (x_BxPxd, xq_Bxd, y_BxP, ystar_B))
    tau = _check_temperatures(temperatures)
    n = x.shape[0]
    G, h, T, _ = _moments(_chunked_parts(iter([(x, q, y, ys)]), [n], tau.size, []),
                          torch.as_tensor(tau, dtype=torch.float64, device=x.device), [n])
    return dict(G=G[0] / n, h=h[0] / n, T=float(T[0] / n), tau=tau, n=n)


def best_stack_on(moments: dict, L: int) -> dict:
    """The best equal-weight stack of L cosine heads with one gain (`best_equal_weight`), fitted and
    measured in-sample on the contexts of `moments` (`stack_moments`): each layer's temperature
    (sorted), the gain g >= 0 and the stack's loss E[(g (1/L) sum_l softmax(tau_l cos) . y - y*)^2].
    Searched from the optimal mixture and from the best single head repeated L times (the lower
    wins). This is a setting of the controlled model (orthogonal W_x, W_q^T W_k = (tau_l / N) I,
    W_o W_v W_y = g): kinds.constructive starts a depth-L model there."""
    G, h, T, tau = moments["G"], moments["h"], moments["T"], moments["tau"]
    L = int(check_int("L", L, 1))
    one, _ = best_equal_weight(G, h, T, 1)
    cnt, loss = min((best_equal_weight(G, h, T, L, start=s0) for s0 in (None, one.astype(np.float64))),
                    key=lambda r: r[1])
    w = cnt / L
    gain = max(float(h @ w), 0.0) / max(float(w @ G @ w), 1e-300)
    taus = np.repeat(tau, cnt)
    return dict(temperatures=taus.tolist(), gain=gain, R=float(T - 2 * gain * (h @ w) + gain**2 * (w @ G @ w)), L=L)


__all__ = ["context_chunk", "stack_moments", "best_stack_on", "softmax_floor", "floor_from_contexts", "floor_from_chunks", "mc_contexts", "cosines", "head_predictions", "nonneg_mixture", "best_equal_weight", "default_temperatures", "SOFTMAX_FAMILY"]
