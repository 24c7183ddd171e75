"""The decomposition of any residual model (depthscale.data.decompose) and the pre-LN Transformer
(depthscale.transformer): the identity R = C + (A - C)/L to float precision, f_l against a direct
computation, agreement with measurements.py on the package's own models, and the contract."""

import math

import pytest
import torch
from torch import nn

from depthscale.base.errors import InputError, UserError
from depthscale.config.run import make_config
from depthscale.data.contexts import make_generator, sample_contexts
from depthscale.data.decompose import ContractError, decompose, decomposition_stats, per_layer_predictors
from depthscale.data.measurements import decomposition, eval_contexts, measure
from depthscale.kinds.base import rms_norm
from depthscale.kinds.lookup import build_pack
from depthscale.kinds.transformer import Transformer, evaluate, label_scale
from depthscale.store.store import Store
from depthscale.train.training import run_pack

IDENTITY_RTOL = 1e-9


def assert_identity(dec):
    L = dec.L
    assert dec.R == pytest.approx(dec.C + (dec.A - dec.C) / L if L > 1 else dec.A, rel=IDENTITY_RTOL)
    assert abs(dec.identity_residual) <= IDENTITY_RTOL * dec.R
    assert torch.allclose(dec.f_BxL.mean(1), dec.y_hat_B, rtol=1e-12, atol=1e-12 * dec.y_hat_B.abs().max().item())


# ---------- a model defined only here: a residual MLP stack ----------

class Residual(nn.Module):
    def __init__(self, D, g):
        super().__init__()
        self.branch = nn.Sequential(nn.LayerNorm(D), nn.Linear(D, 2 * D), nn.Tanh(), nn.Linear(2 * D, D))
        for p in self.branch.parameters():
            nn.init.normal_(p, 0.0, 0.5, generator=g)

    def forward(self, h):
        return h + self.branch(h)


class ResidualMLP(nn.Module):
    def __init__(self, d_in=5, D=7, L=4, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = nn.Linear(d_in, D)
        self.blocks = nn.ModuleList(Residual(D, g) for _ in range(L))
        self.readout = nn.Linear(D, 1)
        for p in list(self.embed.parameters()) + list(self.readout.parameters()):
            nn.init.normal_(p, 0.0, 1.0, generator=g)

    def forward(self, x):
        h = self.embed(x)
        for blk in self.blocks:
            h = blk(h)
        return self.readout(h)


def _data(n=300, d_in=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d_in, generator=g), torch.randn(n, generator=g)


@pytest.mark.parametrize("L", [1, 2, 5])
def test_identity_on_a_residual_mlp_defined_here(L):
    model = ResidualMLP(L=L)
    x, ystar = _data()
    dec = decompose(model, x, ystar)
    assert dec.L == L and dec.f_BxL.shape == (300, L)
    assert_identity(dec)
    assert dec.R == pytest.approx((model(x).squeeze(1).double() - ystar.double()).pow(2).mean().item(), rel=1e-12)
    assert len(dec.A_l) == L and sum(dec.A_l) / L == pytest.approx(dec.A, rel=1e-12)
    if L == 1:
        assert math.isnan(dec.C) and dec.A == pytest.approx(dec.R, rel=1e-12)


def test_f_is_z0_plus_L_times_the_branch_readout():
    """f_l = z_0 + L w . branch_l(h_{l-1}): the increments, computed by hand."""
    model = ResidualMLP(L=3).double()
    x, ystar = _data()
    x = x.double()
    f, z0, y_hat = per_layer_predictors(model, x)
    with torch.no_grad():
        h = model.embed(x)
        want_z0 = model.readout(h).squeeze(1)
        w = model.readout.weight[0]
        want = []
        for blk in model.blocks:
            want.append(want_z0 + 3 * blk.branch(h) @ w)
            h = blk(h)
    assert torch.allclose(z0, want_z0, rtol=1e-12, atol=1e-12)
    assert torch.allclose(f, torch.stack(want, 1), rtol=1e-10, atol=1e-10)
    assert torch.allclose(f.mean(1), y_hat, rtol=1e-12, atol=1e-12)


def test_blocks_may_return_a_tuple_and_names_may_be_given():
    class TupleBlock(nn.Module):
        def __init__(self, blk):
            super().__init__()
            self.blk = blk

        def forward(self, h, scale=1.0):
            return (self.blk(h) * scale, "extra")

    class Wrapped(nn.Module):  # HF-style: blocks return tuples, other attribute names
        def __init__(self):
            super().__init__()
            inner = ResidualMLP(L=3)
            self.emb, self.head = inner.embed, inner.readout
            self.layers = nn.ModuleList(TupleBlock(b) for b in inner.blocks)

        def forward(self, x):
            h = self.emb(x)
            for blk in self.layers:
                h = blk(h, scale=1.0)[0]
            return self.head(h)

    model = Wrapped()
    x, ystar = _data()
    assert_identity(decompose(model, x, ystar, blocks=model.layers, readout=model.head))
    ref = decompose(ResidualMLP(L=3), x, ystar)
    assert decompose(model, x, ystar, blocks=model.layers, readout=model.head).A == pytest.approx(ref.A, rel=1e-12)


def test_sequential_blocks_called_as_one_module():
    class Seq(nn.Module):
        def __init__(self):
            super().__init__()
            inner = ResidualMLP(L=3)
            self.embed, self.readout = inner.embed, inner.readout
            self.blocks = nn.Sequential(*inner.blocks)

        def forward(self, x):
            return self.readout(self.blocks(self.embed(x)))

    x, ystar = _data()
    dec = decompose(Seq(), x, ystar)
    assert dec.A == pytest.approx(decompose(ResidualMLP(L=3), x, ystar).A, rel=1e-12)
    assert_identity(dec)


def test_chunks_concatenate():
    model = ResidualMLP(L=3)
    x, ystar = _data(400)
    whole = decompose(model, x, ystar)
    parts = [per_layer_predictors(model, x[i:i + 100]) for i in range(0, 400, 100)]
    dec = decomposition_stats(torch.cat([p[0] for p in parts]), torch.cat([p[2] for p in parts]), ystar)
    assert (dec.R, dec.A, dec.C) == pytest.approx((whole.R, whole.A, whole.C), rel=1e-6)
    assert_identity(dec)


# ---------- the Transformer ----------

def _transformer_batch(B=96, d=6, P=12, seed=3):
    ctx = sample_contexts(B, d, P, 0.5, 0.25, "difficult", 2, make_generator(seed))
    return ctx


@pytest.mark.parametrize("L", [1, 3])
def test_identity_on_the_transformer(L):
    ctx = _transformer_batch()
    model = Transformer(6, D=8, H=2, L=L, y_scale=label_scale(6, 0.5, 0.25), seed=L)
    dec = decompose(model, (ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd), ctx.ystar_B)
    assert_identity(dec)
    with torch.no_grad():
        y_hat = model(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)
    assert torch.equal(dec.y_hat_B, y_hat.double())


def test_transformer_f_reads_each_blocks_contribution_at_the_test_token():
    ctx = _transformer_batch()
    model = Transformer(6, D=8, H=2, L=3, y_scale=2.0, seed=0).double()
    batch = (ctx.X_BxPxd.double(), ctx.y_BxP.double(), ctx.xq_Bxd.double())
    f, z0, _ = per_layer_predictors(model, batch)
    w, bias = model.readout.head.weight[0], model.readout.head.bias[0]
    with torch.no_grad():
        h = model.embed(*batch)
        assert torch.allclose(z0, 2.0 * (h[:, -1] @ w + bias), rtol=1e-12, atol=1e-12)
        for l, blk in enumerate(model.blocks):
            h_new = blk(h)
            assert torch.allclose(f[:, l], z0 + 3 * 2.0 * (h_new - h)[:, -1] @ w, rtol=1e-10, atol=1e-10)
            h = h_new


def test_a_final_layernorm_breaks_the_contract_but_the_sum_still_telescopes():
    ctx = _transformer_batch()
    model = Transformer(6, D=8, H=2, L=3, seed=1)
    head = model.readout
    model.readout = nn.Sequential(nn.LayerNorm(8), head)
    batch = (ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)
    with pytest.raises(ContractError, match="not affine"):
        decompose(model, batch, ctx.ystar_B)
    assert_identity(decompose(model, batch, ctx.ystar_B, check_readout=False))


def test_train_transformer_smoke(tmp_path):
    """A Transformer run is a RunConfig (N the stream width, heads, mlp) trained by the trainer like
    every other model kind; its stored numbers are the decomposition of the trained network."""
    cfg = make_config("smoke", model="transformer", d=4, P=8, N=8, heads=2, L=2, batch=16, max_steps=6, warmup=2,
                      eval_every=3, eval_contexts=64, monitor_contexts=32)
    store = Store(tmp_path / "s")
    run_pack([cfg], store)
    met = store.load_metrics(cfg.run_id)
    assert met["stopped_because"] == "max_steps" and met["steps"] == 6
    assert math.isfinite(met["R"]) and abs(met["identity_residual"]) <= IDENTITY_RTOL * met["R"]
    pack = store.load_model(cfg.run_id)
    model = pack.model
    assert store.load_curves(cfg.run_id)["step"] == [3, 6] and pack.n_params() == sum(p.numel() for p in model.parameters())
    chunks = eval_contexts(cfg, 64, cfg.eval_seed, chunk=512)
    assert evaluate(model, chunks).R == pytest.approx(met["R"], rel=1e-12)  # the same evaluation set
    # the init is a function of the seed alone
    assert torch.equal(Transformer.from_config(cfg).blocks[0].qkv.weight,
                       Transformer.from_config(cfg).blocks[0].qkv.weight)


@pytest.mark.parametrize("bad", [dict(N=10, heads=4), dict(L=0), dict(task="hard"), dict(k=9, P=8), dict(lr=0.0),
                                 dict(a=-1.0), dict(schedule="step")])
def test_transformer_config_rejects_bad_values(bad):
    with pytest.raises(InputError):
        make_config("smoke", model="transformer", **bad)


# ---------- agreement with measurements.py on the package's own models ----------

class _NonlinearLayer(nn.Module):
    """Layer l of SPEC §3.1 in token form: the stream is the test token's label state h (B x N);
    h <- h + (1/L) sum_i p_i W_v W_y y_i with p = softmax_i((W_q h_hat_test) . (W_k h_hat_i))."""

    def __init__(self, Wq, Wk, L):
        super().__init__()
        self.Wq, self.Wk, self.L = Wq, Wk, L

    def forward(self, h_BxN, Hc_hat_BxPxN, hq_hat_BxN, V_BxPxN):
        q = hq_hat_BxN @ self.Wq.T
        p = torch.softmax(torch.einsum("bpn,bn->bp", Hc_hat_BxPxN @ self.Wk.T, q), -1)
        return h_BxN + torch.einsum("bp,bpn->bn", p, V_BxPxN) / self.L


class _SingleStreamLayer(nn.Module):
    """Layer l of SPEC §3.3's single_stream: the test token's state is cascaded."""

    def __init__(self, Wq, Wk, L):
        super().__init__()
        self.Wq, self.Wk, self.L = Wq, Wk, L

    def forward(self, h_BxN, Hc_hat_BxPxN, hq_hat_BxN, V_BxPxN):
        q = rms_norm(h_BxN) @ self.Wq.T
        p = torch.softmax(torch.einsum("bpn,bn->bp", Hc_hat_BxPxN @ self.Wk.T, q), -1)
        return h_BxN + torch.einsum("bp,bpn->bn", p, V_BxPxN) / self.L


class _Linear(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = w

    def forward(self, h):
        return h @ self.w


class PackAsResidual(nn.Module):
    """Model 0 of an AttentionPack (nonlinear or single_stream) rewritten to meet the contract,
    from its parameters only: an independent second computation of f_l."""

    def __init__(self, pack):
        super().__init__()
        self.pack, self.kind = pack, pack.kind
        L = pack.depths[0]
        Wq, Wk = pack.model_slice("Wq", 0).detach(), pack.model_slice("Wk", 0).detach()
        layer = _NonlinearLayer if pack.kind == "nonlinear" else _SingleStreamLayer
        self.blocks = nn.ModuleList(layer(Wq[l], Wk[l], L) for l in range(L))
        self.readout = _Linear(pack.Wo[0].detach())

    def forward(self, X, y, xq):
        p = self.pack
        Wx, Wy, Wv = p.Wx[0].detach(), p.Wy[0].detach(), p.Wv[0].detach()
        if self.kind == "nonlinear":  # two streams: x fixed, label states; context label states fixed
            Hc = X @ Wx.T
            V = (y.unsqueeze(-1) * Wy) @ Wv.T
            h = torch.zeros(X.shape[0], Wx.shape[0], dtype=X.dtype)  # the test token's label input is 0
        else:  # one stream H = W_x X + W_y y_in
            Hc = X @ Wx.T + y.unsqueeze(-1) * Wy
            V = Hc @ Wv.T
            h = xq @ Wx.T
        Hc_hat, hq_hat = rms_norm(Hc), rms_norm(xq @ Wx.T)
        for blk in self.blocks:
            h = blk(h, Hc_hat, hq_hat, V)
        return self.readout(h)


@pytest.mark.parametrize("kind", ["nonlinear", "single_stream"])
def test_agrees_with_measurements_on_the_packages_own_models(kind):
    cfg = make_config("smoke", model=kind, L=4, a=0.5, b=0.25)
    pack = build_pack([cfg]).double()
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():  # sharp, layer-specific attention: the layers must differ for the test to bite
        for W in (pack.Wq, pack.Wk):
            W.add_(0.7 * torch.randn(W.shape, generator=g, dtype=W.dtype))
    ctx = sample_contexts(256, cfg.d, cfg.P, cfg.a, cfg.b, cfg.task, cfg.k, make_generator(5), dtype=torch.float64)
    batch = (ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)
    dec = decompose(PackAsResidual(pack), batch, ctx.ystar_B)
    with torch.no_grad():
        out = pack(*batch)[0]
    assert torch.allclose(dec.f_BxL, out.f_BxL, rtol=1e-9, atol=1e-9)
    assert torch.allclose(dec.y_hat_B, out.y_hat_B, rtol=1e-9, atol=1e-9)
    ref = measure(pack, 0, [ctx], cfg.task)
    assert (dec.R, dec.A, dec.C) == pytest.approx((ref["R"], ref["A"], ref["C"]), rel=1e-9)
    assert_identity(dec)
    if kind == "nonlinear":
        assert dec.z0_B.abs().max().item() == 0.0  # f_l = g p_l . y: no z_0 term (SPEC §3.1)


# ---------- the contract: bad models get a UserError ----------

class _Chain(ResidualMLP):
    """ResidualMLP whose forward is replaced by `run(self, x)`."""

    def __init__(self, run, **kw):
        super().__init__(**kw)
        self.run = run

    def forward(self, x):
        return self.run(self, x)


def _skip(m, x):
    h = m.embed(x)
    for blk in list(m.blocks)[:-1]:
        h = blk(h)
    return m.readout(h)


def _reorder(m, x):
    h = m.embed(x)
    for blk in reversed(m.blocks):
        h = blk(h)
    return m.readout(h)


def _between(m, x):
    h = m.embed(x)
    for blk in m.blocks:
        h = 2 * blk(h)
    return m.readout(h)


def _twice(m, x):
    h = m.embed(x)
    for blk in m.blocks:
        h = blk(h)
    return m.readout(h) + m.readout(h)


def _no_readout(m, x):
    h = m.embed(x)
    for blk in m.blocks:
        h = blk(h)
    return h @ m.readout.weight[0] + m.readout.bias


def _other_output(m, x):
    h = m.embed(x)
    for blk in m.blocks:
        h = blk(h)
    return m.readout(h) + 1.0


def _keyword_stream(m, x):
    h = m.embed(x)
    for blk in m.blocks:
        h = blk(h=h)
    return m.readout(h)


class _Grow(nn.Module):
    def forward(self, h):
        return torch.cat([h, h], -1)


class _Head2(nn.Module):
    def forward(self, h):
        return h[:, :2]


def _modify(model, what):
    if what == "no blocks":
        del model.blocks
    elif what == "no readout":
        del model.readout
    elif what == "empty blocks":
        model.blocks = nn.ModuleList()
    elif what == "one module":
        model.blocks = nn.Linear(7, 7)
    elif what == "not a module":
        first = model.blocks[0]
        del model.blocks
        model.blocks = [first, lambda h: h]
    elif what == "looped":
        model.blocks = nn.ModuleList([model.blocks[0], model.blocks[0]])
    elif what == "readout not a module":
        del model.readout
        model.readout = lambda h: h.sum(-1)
    elif what == "shape":
        model.blocks = nn.ModuleList([_Grow()])
    elif what == "vector output":
        model.readout = _Head2()
    return model


@pytest.mark.parametrize("what", ["no blocks", "no readout", "empty blocks", "one module", "not a module",
                                  "looped", "readout not a module", "shape", "vector output"])
def test_models_that_break_the_contract(what):
    model = _modify(ResidualMLP(L=3), what)
    x, ystar = _data(20)
    with pytest.raises(UserError):
        decompose(model, x, ystar)


@pytest.mark.parametrize("run,match", [(_skip, "2 of the 3 blocks|after 2 of 3"), (_reorder, "was called when"),
                                       (_between, "did not receive"), (_twice, "more than once"),
                                       (_no_readout, "never called readout"), (_other_output, "not its readout"),
                                       (_keyword_stream, "first positional")])
def test_forwards_that_break_the_contract(run, match):
    model = _Chain(run, L=3)
    x, ystar = _data(20)
    with pytest.raises(ContractError, match=match):
        decompose(model, x, ystar)
    # the hooks are gone: the model runs as before
    for blk in model.blocks:
        assert not blk._forward_hooks and not blk._forward_pre_hooks
    assert not model.readout._forward_hooks


def test_bad_targets_and_models():
    model = ResidualMLP(L=2)
    x, ystar = _data(20)
    with pytest.raises(UserError, match="one value per example"):
        decompose(model, x, ystar[:10])
    with pytest.raises(UserError, match="tensor"):
        decompose(model, x, ystar.tolist())
    with pytest.raises(UserError, match="nn.Module"):
        decompose(lambda x: x, x, ystar)
    assert issubclass(ContractError, UserError)


def test_decomposition_stats_matches_measurements_decomposition():
    g = torch.Generator().manual_seed(0)
    f = torch.randn(200, 6, generator=g, dtype=torch.float64)
    ys = torch.randn(200, generator=g, dtype=torch.float64)
    dec = decomposition_stats(f, f.mean(1), ys)
    ref = decomposition(f, ys)
    assert (dec.R, dec.R_se, dec.A, dec.C) == pytest.approx((ref["R"], ref["R_se"], ref["A"], ref["C"]), rel=1e-12)
