"""The model family against literal token-by-token implementations (SPEC §3, paper eqs. 9-10)."""

import pytest
import torch

from depthscale.data.contexts import make_generator, sample_contexts
from depthscale.kinds.attention import AttentionStack
from depthscale.kinds.lookup import AttentionPack

from built_in_kinds import built_in_kinds

d, N, P = 4, 6, 7


@pytest.fixture(autouse=True)
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def ctx_for(seed=0, B=3, task="difficult", k=2, a=0.5, b=0.25):
    return sample_contexts(B, d, P, a, b, task, k, make_generator(seed), dtype=torch.float64)


def pack64(kind, depths, seeds=None, qk_std=0.5):
    pk = AttentionPack(kind, d, N, depths, seeds or list(range(len(depths))), qk_std).double()
    if kind == "context_updates":
        with torch.no_grad():
            pk.m.fill_(-0.7)
    return pk


def rms(h):  # per token (column) RMS norm of an N x T matrix
    return h / torch.sqrt(h.pow(2).mean(0, keepdim=True) + 1e-6)


def masked_softmax_rows(S, allowed):
    """Row softmax over allowed positions only; rows with nothing allowed are zero."""
    S = S.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(S, dim=-1)
    return torch.nan_to_num(out, nan=0.0)


def literal(kind, pk, mi, X, y, xq, ctx_mask_value=None):
    """Layer by layer with full (P+1)x(P+1) matrices, one context at a time."""
    if kind not in LITERALS:
        pytest.fail(f"kind {kind!r} has no literal reference: write one in literal() and add it to LITERALS")
    L = pk.depths[mi]
    Wx, Wy, Wo = pk.Wx[mi], pk.Wy[mi].unsqueeze(1), pk.Wo[mi].unsqueeze(0)
    Wq, Wk = pk.model_slice("Wq", mi), pk.model_slice("Wk", mi)
    Xf = torch.cat([X, xq.unsqueeze(0)], 0).T  # d x (P+1)
    yin = torch.cat([y, torch.zeros(1)])  # (P+1)
    T = P + 1
    test_row = torch.zeros(T, T, dtype=torch.bool)
    test_row[P, :P] = True  # M(0): only the test row, over the context, never itself
    Hx = Wx @ Xf
    if kind == "single_stream":
        H = Hx + Wy @ yin.unsqueeze(0)
        for l in range(L):
            Hn = rms(H)
            Q, K, V = Wq[l] @ Hn, Wk[l] @ Hn, pk.Wv[mi] @ H
            A = masked_softmax_rows(Q.T @ K, test_row)
            H = H + V @ A.T / L
        return (Wo @ H[:, P]).item()
    Hy = Wy @ yin.unsqueeze(0)  # N x (P+1)
    if kind == "linear":
        M = torch.zeros(T, T)
        M[:P, :P] = -1.0
        M[P, :P] = 1.0
        for l in range(L):
            Q, K, V = Wq[l] @ Hx, Wk[l] @ Hx, pk.Wv[mi] @ Hy
            A = M * (Q.T @ K) / (P * N)
            Hy = Hy + V @ A.T / L
        return (Wo @ Hy[:, P]).item()
    Hn = rms(Hx)
    ctx_block = torch.zeros(T, T, dtype=torch.bool)
    ctx_block[:P, :P] = True
    for l in range(L):
        Wv = pk.model_slice("Wv", mi)[l] if kind == "layer_values" else pk.Wv[mi]
        Q, K, V = Wq[l] @ Hn, Wk[l] @ Hn, Wv @ Hy
        S = Q.T @ K
        A = masked_softmax_rows(S, test_row)
        if kind == "context_updates":
            A = A + pk.m[mi] * masked_softmax_rows(S, ctx_block)
        Hy = Hy + V @ A.T / L
        if kind != "context_updates":  # M(0): context states never change
            assert torch.allclose(Hy[:, :P], Wy @ yin[:P].unsqueeze(0))
    return (Wo @ Hy[:, P]).item()


# every built-in controlled kind (AttentionPack builds them) is checked against its literal reference
STACK_KINDS = built_in_kinds(AttentionStack)
LITERALS = ("nonlinear", "layer_values", "linear", "single_stream", "context_updates")  # literal() writes these


@pytest.mark.parametrize("kind", STACK_KINDS)
@pytest.mark.parametrize("L", [1, 3])
def test_matches_literal_layer_by_layer(kind, L):
    ctx = ctx_for(L)
    pk = pack64(kind, [L], [11])
    with torch.no_grad():
        out = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0]
    for bi in range(ctx.B):
        ref = literal(kind, pk, 0, ctx.X_BxPxd[bi], ctx.y_BxP[bi], ctx.xq_Bxd[bi])
        assert out.y_hat_B[bi].item() == pytest.approx(ref, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("kind", STACK_KINDS)
def test_prediction_is_mean_of_parallel_form(kind):
    ctx = ctx_for(1, B=5)
    pk = pack64(kind, [4])
    with torch.no_grad():
        out = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0]
    assert out.f_BxL.shape == (5, 4)
    assert torch.allclose(out.y_hat_B, out.f_BxL.mean(1), rtol=1e-12, atol=1e-12)
    if out.p_BxLxP is not None:
        assert out.p_BxLxP.shape == (5, 4, P)
        assert torch.allclose(out.p_BxLxP.sum(-1), torch.ones(5, 4))


def test_nonlinear_f_is_gain_times_attention_readout():
    ctx = ctx_for(2)
    pk = pack64("nonlinear", [3])
    with torch.no_grad():
        out = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0]
        g = pk.Wo[0] @ pk.Wv[0] @ pk.Wy[0]
    assert torch.allclose(out.f_BxL, g * torch.einsum("blp,bp->bl", out.p_BxLxP, ctx.y_BxP))


def test_linear_token_form_equals_covariance_form():
    """F_0 = W_y beta^T, F_l = F_{l-1} - (1/L) W_v F_{l-1} S B_l, y_hat = W_o (F_0 - F_L) x_test."""
    L = 4
    ctx = ctx_for(3, B=6, a=1.0, b=0.5)
    pk = pack64("linear", [L], qk_std=0.7)
    with torch.no_grad():
        out = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0]
    Wx, Wv, Wo, Wy = pk.Wx[0], pk.Wv[0], pk.Wo[0], pk.Wy[0]
    for bi in range(ctx.B):
        U = ctx.X_BxPxd[bi].T
        S = U @ U.T / P
        F0 = torch.outer(Wy, ctx.beta_Bxd[bi])
        F = F0
        for l in range(L):
            Bl = Wx.T @ pk.Wk[l].T @ pk.Wq[l] @ Wx / N
            F = F - Wv @ F @ S @ Bl / L
        ref = Wo @ (F0 - F) @ ctx.xq_Bxd[bi]
        assert out.y_hat_B[bi].item() == pytest.approx(ref.item(), rel=1e-9, abs=1e-12)


def test_linear_model_never_sees_beta():
    """The forward pass takes (X, y, x_test) only: wiping beta from the batch changes nothing."""
    ctx = ctx_for(4)
    pk = pack64("linear", [2])
    out1 = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0].y_hat_B
    ctx.beta_Bxd.mul_(0)  # the model's inputs do not include beta
    out2 = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0].y_hat_B
    assert torch.equal(out1, out2)


def test_masked_positions_do_not_change_attention():
    """Changing the test token's own input (its score column is masked) leaves p unchanged
    except through its role as the query; changing a context token's label leaves p unchanged."""
    ctx = ctx_for(5)
    pk = pack64("nonlinear", [2])
    with torch.no_grad():
        p1 = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0].p_BxLxP
        p2 = pk(ctx.X_BxPxd, ctx.y_BxP * 3.0, ctx.xq_Bxd)[0].p_BxLxP
    assert torch.equal(p1, p2)  # labels never reach the scores (no leak)
    assert p1.shape[-1] == P  # the test token is not among the attended positions


def test_pack_equals_separate_models():
    ctx = ctx_for(6, B=4)
    depths, seeds = [1, 2, 4, 3], [0, 1, 2, 0]
    big = pack64("nonlinear", depths, seeds)
    with torch.no_grad():
        outs = big(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)
        for mi, (L, s) in enumerate(zip(depths, seeds)):
            one = pack64("nonlinear", [L], [s])
            ref = one(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0]
            assert torch.allclose(outs[mi].f_BxL, ref.f_BxL, rtol=1e-12, atol=1e-14)


def test_linear_pack_of_mixed_spectra_and_seeds_equals_separate_models():
    """linear_forward runs every model of a pack as one computation, each on its own batch; models
    passed the same batch object share its reduction. Each must equal the model alone."""
    ctxs = [ctx_for(s, B=5, task="easy", a=a, b=b) for s, a, b in ((0, 1.0, 0.5), (1, 0.0, 1.0))]
    L, seeds, data_of = 3, [0, 1, 2, 3], [0, 1, 0, 1]
    big = pack64("linear", [L] * 4, seeds)
    with torch.no_grad():
        outs = big(None, None, None, X_of=lambda m: (ctxs[data_of[m]].X_BxPxd, ctxs[data_of[m]].y_BxP,
                                                      ctxs[data_of[m]].xq_Bxd))
        sub = big.linear_forward([2, 1], [(c.X_BxPxd, c.y_BxP, c.xq_Bxd) for c in (ctxs[0], ctxs[1])])
        for mi, s in enumerate(seeds):
            c = ctxs[data_of[mi]]
            ref = pack64("linear", [L], [s])(c.X_BxPxd, c.y_BxP, c.xq_Bxd)[0]
            assert torch.allclose(outs[mi].f_BxL, ref.f_BxL, rtol=1e-12, atol=1e-14)
            assert torch.allclose(outs[mi].y_hat_B, ref.y_hat_B, rtol=1e-12, atol=1e-14)
        assert torch.allclose(sub[0].f_BxL, outs[2].f_BxL, rtol=1e-12, atol=1e-14)
        assert torch.allclose(sub[1].f_BxL, outs[1].f_BxL, rtol=1e-12, atol=1e-14)


def test_linear_gd_start_is_gradient_descent_in_context():
    """qk_init = gd without noise: y_hat = beta^T (I - (I - step S)^L) x_test, the shared-step
    residual polynomial of SPEC §6.2, computed here from beta directly (the model never sees it)."""
    ctx = ctx_for(8, B=6, task="easy", a=1.0, b=0.5)
    for L, step in ((1, 0.3), (5, 0.7)):
        pk = AttentionPack("linear", d, N, [L], [3], qk_std=0.0, qk_init="gd", wx_init="orthogonal",
                           gd_step=step).double()
        with torch.no_grad():
            y_hat = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0].y_hat_B
        S = ctx.X_BxPxd.transpose(1, 2) @ ctx.X_BxPxd / P
        R = torch.linalg.matrix_power(torch.eye(d) - step * S, L)
        ref = torch.einsum("bi,bij,bj->b", ctx.beta_Bxd, torch.eye(d) - R, ctx.xq_Bxd)
        assert torch.allclose(y_hat, ref, rtol=1e-9, atol=1e-12)


def linear_token_form_f(pk, mi, X, y, xq):
    """SPEC §3.2 as written, one context at a time, layer by layer, on the full token states:
    f_l = L (z_l - z_{l-1}) with z_l = W_o h_test^l (z_0 = 0), as a differentiable tensor (L,)."""
    L = pk.depths[mi]
    Wx, Wv, Wo = pk.Wx[mi], pk.Wv[mi], pk.Wo[mi]
    Wq, Wk = pk.model_slice("Wq", mi), pk.model_slice("Wk", mi)
    T = P + 1
    Hx = Wx @ torch.cat([X, xq.unsqueeze(0)], 0).T  # N x (P+1)
    Hy = torch.outer(pk.Wy[mi], torch.cat([y, torch.zeros(1)]))  # the test token's label input is 0
    M = torch.zeros(T, T)
    M[:P, :P] = -1.0  # context rows attend to the context with -1, the test row with +1
    M[P, :P] = 1.0
    z_prev, fs = Wo @ Hy[:, P], []
    for l in range(L):
        A = M * ((Wq[l] @ Hx).T @ (Wk[l] @ Hx)) / (P * N)
        Hy = Hy + (Wv @ Hy) @ A.T / L
        z = Wo @ Hy[:, P]
        fs.append(L * (z - z_prev))
        z_prev = z
    return torch.stack(fs)


@pytest.mark.parametrize("L", [1, 2, 5, 13])
def test_linear_forward_and_gradients_match_token_form(L):
    """linear_forward (the row-vector triangle, a pack of three models on two batches, one batch
    shared) against the token form context by context: every f_l, and the gradient of a random
    weighting of them with respect to every parameter. L = 13 > 3d: deeper, for its d, than any
    preset (L <= 2d there); the triangle is exact at any depth."""
    ctxs = [ctx_for(20 + L, B=3, task="easy", a=1.0, b=0.5), ctx_for(40 + L, B=3, a=0.0, b=1.0)]
    data_of = [0, 1, 0]
    pk = pack64("linear", [L] * 3, [5, 6, 7], qk_std=0.6)
    with torch.no_grad():  # W_v away from the identity, spectral radius above 1
        pk.Wv.add_(0.5 * torch.eye(N))
    wts = torch.randn(3, 3, L, generator=torch.Generator().manual_seed(L))  # model, context, layer
    params = dict(pk.named_parameters())
    outs = pk(None, None, None, X_of=lambda m: (ctxs[data_of[m]].X_BxPxd, ctxs[data_of[m]].y_BxP,
                                                 ctxs[data_of[m]].xq_Bxd))
    f = torch.stack([o.f_BxL for o in outs])
    got = torch.autograd.grad((f * wts).sum(), list(params.values()))
    ref_f = torch.stack([torch.stack([linear_token_form_f(pk, m, c.X_BxPxd[bi], c.y_BxP[bi], c.xq_Bxd[bi])
                                      for bi in range(c.B)]) for m, c in ((m, ctxs[data_of[m]]) for m in range(3))])
    ref = torch.autograd.grad((ref_f * wts).sum(), list(params.values()))
    scale = ref_f.abs().max().item()
    assert torch.allclose(f, ref_f, rtol=1e-10, atol=1e-12 * scale)
    for name, g, r in zip(params, got, ref):
        assert torch.allclose(g, r, rtol=1e-9, atol=1e-11 * r.abs().max().item()), name
    assert all(torch.equal(o.y_hat_B, o.f_BxL.mean(1)) for o in outs)


def test_cascaded_pack_needs_one_depth():
    with pytest.raises(ValueError, match="one depth"):
        AttentionPack("linear", d, N, [1, 2], [0, 1])


def test_near_uniform_attention_at_init():
    ctx = ctx_for(7, B=16)
    pk = AttentionPack("nonlinear", d, N, [4], [0], qk_std=0.02).double()
    with torch.no_grad():
        p = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0].p_BxLxP
    assert (p - 1.0 / P).abs().max() < 0.02 / P * 10


def test_tied_qk_init_starts_psd_and_distinct_per_layer():
    pk = AttentionPack("nonlinear", d, N, [3], [0], qk_std=0.1, qk_init="tied").double()
    M_LxNxN = torch.einsum("lkn,lkj->lnj", pk.Wq, pk.Wk)  # W_q^T W_k per layer
    assert torch.allclose(M_LxNxN, M_LxNxN.transpose(1, 2))
    assert (torch.linalg.eigvalsh(M_LxNxN) > -1e-12).all()
    assert (M_LxNxN[0] - M_LxNxN[1]).abs().max() > 1e-3
    assert pk.Wq.data_ptr() != pk.Wk.data_ptr()  # tied at init only: two parameters


@pytest.mark.parametrize("kind", ["nonlinear", "layer_values", "context_updates"])
def test_positive_gain_init_flips_only_the_readout(kind):
    for seed in range(6):
        a = AttentionPack(kind, d, N, [3], [seed], gain_init="random").double()
        b = AttentionPack(kind, d, N, [3], [seed], gain_init="positive").double()
        gain = lambda p: torch.einsum("n,...nk,k->...", p.Wo[0], p.model_slice("Wv", 0) if kind == "layer_values"  # noqa: E731
                                      else p.Wv[0], p.Wy[0]).mean()
        assert gain(b) > 0
        assert torch.equal(b.Wo, a.Wo) or torch.equal(b.Wo, -a.Wo)
        assert torch.equal(a.Wq, b.Wq) and torch.equal(a.Wx, b.Wx)  # the same draws otherwise


def test_spread_init_starts_each_layer_at_its_temperature():
    from depthscale.config.run import make_config
    from depthscale.kinds.lookup import build_pack

    L, tmin, tmax = 5, 4.0, 64.0
    cfg = make_config("smoke", d=6, N=6, L=L, qk_init="spread", qk_std=0.0, tau_min=tmin, tau_max=tmax,
                      metric_sigma=0.7)
    pk = build_pack([cfg]).double()
    Wx = pk.Wx[0]
    taus = tmin * (tmax / tmin) ** (torch.arange(L, dtype=torch.float64) / (L - 1))
    for l in range(L):
        E = (pk.Wq[l] @ Wx).T @ (pk.Wk[l] @ Wx)
        assert torch.allclose(E, E.T, atol=1e-6)
        ev = torch.linalg.eigvalsh(E.detach())
        assert float(ev.min()) > 0
        assert float(ev.mean() * cfg.N) == pytest.approx(float(taus[l]), rel=1e-5)  # D has mean 1
        assert float(ev.max() / ev.min()) > 1.5  # anisotropic (sigma 0.7)
    # a head of temperature tau on cosines: the score of x with itself, for unit x, is N x^T E x ~ tau
    one = build_pack([cfg.replace(L=1)]).double()
    E1 = (one.Wq[0] @ one.Wx[0]).T @ (one.Wk[0] @ one.Wx[0])
    assert float(torch.linalg.eigvalsh(E1.detach()).mean() * cfg.N) == pytest.approx((tmin * tmax) ** 0.5, rel=1e-5)


def test_segment_mean_is_the_per_segment_mean_and_its_gradient_bit_for_bit():
    # SegmentMean (the per-model means of the layer predictors) against split + mean + stack under
    # autograd: the same values and gradients bit for bit, and a NaN stays in its own segment
    from depthscale.kinds.ops import SegmentMean

    g = torch.Generator().manual_seed(2)
    sizes = [1, 2, 4, 8, 3]
    f = torch.randn(3, 5, sum(sizes), generator=g)
    w = torch.randn(3, 5, len(sizes), generator=g)
    seg = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    a, b = f.clone().requires_grad_(), f.clone().requires_grad_()
    ya = SegmentMean.apply(a, sizes, seg)
    yb = torch.stack([p.mean(-1) for p in b.split(sizes, -1)], -1)
    assert torch.equal(ya, yb)
    (ya * w).sum().backward()
    (yb * w).sum().backward()
    assert torch.equal(a.grad, b.grad)
    w[0, 0, 2] = float("nan")  # segment 2 (positions 3..6) of one row
    c = f.clone().requires_grad_()
    (SegmentMean.apply(c, sizes, seg) * w).sum().backward()
    nan = torch.isnan(c.grad)
    assert nan[0, 0, 3:7].all() and nan.sum() == 4
