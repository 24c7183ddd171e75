"""The roofline of one packed training step of the nonlinear model (bench.py's speed report): its
major ops with the FLOPs and bytes each must move and the transcendental functions it evaluates
(`step_ops`), and the time each takes at least on a machine of a given matmul peak, memory
bandwidth and transcendental rates (`roofline`). Pure arithmetic; depthscale.bench.machine measures the
machine."""

from __future__ import annotations

from depthscale.kinds.ensemble import fused_scale_flops

F32 = 4  # bytes per element (float64 ops count their elements twice)
# Philox-4x32-10 per 32-bit word: 10 rounds of two 32x32->64 multiplies, four xors and the key's
# two additions per block of four words (integer work on the same vector units, counted as FLOPs)
PHILOX_OPS_PER_WORD = 10 * 8 / 4
SAMPLER_DRAWS = "sampler draws: Philox words, Box-Muller Gaussians, Householder Haar O (float64)"
SAMPLER_TRANSFORM = "sampler transform: x = O Λ^½ z, β, labels y = X β, cosine top-k (float32 out)"
SAMPLER_ONE_PASS = "sampler, one pass per context: Philox, Box-Muller, Haar O, x = O Λ^½ z, labels, top-k"


def _sampling(add, B: int, d: int, P: int, task: str, one_pass: bool) -> None:
    """step_ops' sampling rows for one batch of B contexts (`add` as step_ops' own)."""
    X = B * P * d
    # the fused counter-based sampler (csrc/sampler.cpp, issue 35), in float64: Philox
    # words, Box-Muller Gaussians, the Householder Haar rotation, then the float32 contexts
    n_in = P + (task == "difficult")  # the context's inputs, and x_test on the difficult task
    n_gauss = B * (d * (d + 1) // 2 + n_in * d + d)  # Haar vectors, inputs, teacher
    # (one row per kernel call, as the profiler sees them; each row sums its parts)
    draws, transform = (SAMPLER_ONE_PASS, SAMPLER_ONE_PASS) if one_pass else (SAMPLER_DRAWS, SAMPLER_TRANSFORM)
    mem = 0 if one_pass else 1  # one pass: the draws and the contexts' float64 forms stay in cache
    add("sampling", draws, PHILOX_OPS_PER_WORD * n_gauss, 0)  # Philox words
    add("sampling", draws, 0, mem * 2 * n_gauss, log=n_gauss / 2, sqrt=n_gauss / 2,  # Box-Muller
        sin=n_gauss / 2, cos=n_gauss / 2)
    add("sampling", draws, 2 * B * d * d * (d + 1),  # O = H_1 ... H_d
        mem * 2 * (B * d * (d + 1) // 2 + B * d * d), sqrt=B * d)
    add("sampling", transform, 2 * B * n_in * d * d + 2 * B * d * d,  # x = O Λ^½ z, β
        mem * (2 * B * n_in * d + 2 * B * d * d) + B * n_in * d)
    add("sampling", transform, 2 * B * P * d, mem * X + B * P)  # labels y = X β
    if task == "difficult":
        add("sampling", transform, 4 * B * P * d, mem * (X + B * P), sqrt=B * (P + 1))  # cosine top-k
    if one_pass:  # what it writes besides X, x_test and y: t, β, y*, O (float32)
        add("sampling", SAMPLER_ONE_PASS, 0, 2 * B * d + B + B * d * d)


def step_ops(d: int, N: int, P: int, B: int, groups: list[list[int]], task: str = "difficult",
             n_params: int = 0, fused: bool = False, one_pass: bool = False) -> list[dict]:
    """The major ops of one packed training step of the nonlinear model, as the engine executes
    them (`contexts.sample_contexts` with the fused sampler, `Nonlinear.ensemble_forward`, its two hand-written
    backwards, `RowAdam`), each with its FLOPs and the bytes it must move: every input read once
    and every output written once (float32). `groups`: the depths of the models sharing a batch.
    `fused`: the fused kernels run (`kernels`): the test row's B x T x P scores never reach memory,
    so its ops move only their inputs and outputs, and its backward recomputes the scores (2BTdP
    more FLOPs); the scales come from M_g = W_xᵀW_x without the B x P x G x N projections, written
    with the test token's scale folded in. Ops on small tensors (parameters, E_l, the B x T
    predictions) are left out; they are a few percent of the bytes. `calls`: the transcendental
    functions each op evaluates (exp, log, sqrt, sin, cos; the sampler's Gaussians are Box-Muller pairs).
    `one_pass`: the sampler runs as one kernel call that keeps each context's float64 draws in a
    per-thread buffer (`sampler_contexts_keys`: one spectrum per seed): one row, the same work, moving
    only the float32 contexts it writes. Returns dicts {op, phase, flops, bytes, calls}, summed over groups."""
    ops: dict[tuple, list] = {}

    def add(phase: str, op: str, flops: float, elems: float, **calls: float) -> None:
        acc = ops.setdefault((phase, op), [0.0, 0.0, {}])
        acc[0] += flops
        acc[1] += elems * F32
        for fn, n in calls.items():
            acc[2][fn] = acc[2].get(fn, 0.0) + n

    for depths in groups:
        G, T = len(depths), sum(depths)
        S = B * T * P  # the score tensor: one entry per context, layer and context token
        H = B * P * G * N  # the projections W_x x of every model and context token
        X, u = B * P * d, B * T * d
        _sampling(add, B, d, P, task, one_pass)
        # forward
        if fused:
            # out: rc and rcq = rc r_test (B x G x P, the test row's layout), r_test (B x G)
            add("forward", "scales: r = (xᵀM_g x / N + ε)^-½", fused_scale_flops(B, P, G, d),
                X + B * d + 2 * B * G * P + B * G, sqrt=B * G * (P + 1))
        else:
            add("forward", "scales: h = X W_xᵀ", 2 * B * P * d * G * N, X + H)
            add("forward", "scales: r = 1/rms(h)", 0, H + B * P * G, sqrt=B * P * G)
        add("forward", "u = x_test [E_1..E_T] · r_test", 2 * B * T * d * d, 3 * u)
        if fused:  # in: u, X, rc (B x G x P), y; out: py, lse (forward) / du, d rc (backward)
            add("forward", "fused test row: s = r u Xᵀ, softmax, p·y", 2 * S * d + 2 * S,
                u + X + B * G * P + B * P + 2 * B * T, exp=S, log=B * T)
        else:
            add("forward", "scores s = u Xᵀ", 2 * B * T * d * P, u + X + S)
            add("forward", "s ← r_i s (per model)", 0, 2 * S + B * G * P)
            add("forward", "softmax", 0, 2 * S, exp=S)
            add("forward", "readout p·y", 2 * S, S + B * P)
        # backward
        if fused:
            add("backward", "fused test row: recompute s, ds, d r_i, du = ds X", 4 * S * d,
                2 * u + X + 2 * B * G * P + B * P + 3 * B * T, exp=S)
        else:
            add("backward", "ds = p (y − p·y) dpy", 0, 2 * S + B * P)
            add("backward", "d r_i = Σ_l ds s / r", 0, 3 * S + B * G * P)
            add("backward", "ds ← r_i ds (per model)", 0, 2 * S + B * G * P)
            add("backward", "du = ds X", 2 * B * T * d * P, S + X + u)
        add("backward", "dE = x_testᵀ du (and d r_test)", 2 * B * T * d * d, 3 * u)
        if fused:
            add("backward", "scales: dM_g = Σ c x xᵀ", fused_scale_flops(B, P, G, d),  # in: d rcq, rc, r_test
                X + B * d + 2 * B * G * P + B * G)
        else:
            add("backward", "scales: dh = h · coef", 0, 2 * H + B * P * G)
            add("backward", "scales: dW_x = Xᵀ dh", 2 * B * P * d * G * N, X + H)
    add("optimiser", "Adam (read p, g, m, v; write p, m, v)", 0, 7 * n_params)
    return [{"phase": k[0], "op": k[1], "flops": v[0], "bytes": v[1], "calls": v[2]} for k, v in ops.items()]


def roofline(ops: list[dict], peak_flops: float, bandwidth: float, rates: dict | None = None) -> dict:
    """Per-op roofline: each op takes at least max(FLOPs / peak + Σ_f calls_f / rate_f, bytes /
    bandwidth) — its arithmetic (the matmul-like FLOPs and the transcendental calls, which share the
    vector units, so their times add) or its memory traffic, whichever is longer; the step's
    roofline is the sum over ops (ops run one after another). `rates`: evaluations per second of
    each transcendental function (`machine.transcendental_rates`); without it the calls are not
    counted (the roofline of FLOPs and bytes alone). Returns roofline_s, the FLOP-only, call-only
    and byte-only totals, and the ops with their roofline time and bound."""
    rows, total, calls_total = [], 0.0, 0.0
    for o in ops:
        tf, tb = o["flops"] / peak_flops, o["bytes"] / bandwidth
        tc = sum(n / rates[fn] for fn, n in o.get("calls", {}).items()) if rates else 0.0
        rows.append(dict(o, roofline_s=max(tf + tc, tb), call_s=tc,
                         bound=("memory" if tb > tf + tc else "transcendentals" if tc > tf else "flops")))
        total += max(tf + tc, tb)
        calls_total += tc
    return {"roofline_s": total, "flop_time_s": sum(o["flops"] for o in ops) / peak_flops,
            "call_time_s": calls_total, "byte_time_s": sum(o["bytes"] for o in ops) / bandwidth, "ops": rows}


__all__ = ["step_ops", "roofline", "F32"]
