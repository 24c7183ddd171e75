"""Looped stacks (beyond the paper, issue 16 item 1): weights tied across depth (RunConfig.loop).

A looped model (loop = B) owns B rows of the per-layer parameters and layer l uses row l % B. The
oracle is the straightforward construction: an untied L-layer model whose layer l holds a copy of
row l % B; its forward must agree, and its gradients summed over the copies of each row must equal
the looped model's.
"""

import math

import pytest
import torch

from depthscale.config.run import ConfigError, make_config
from depthscale.data.contexts import make_generator, sample_contexts
from depthscale.experiments import looped_runs as lp
from depthscale.experiments import registry as ex
from depthscale.kinds.lookup import AttentionPack, build_pack
from depthscale.kinds.lookup import pack_key
from depthscale.train.schedule import base_lr
from depthscale.train.training import train_one
from depthscale.runs.per_context import StoredRuns

d, N, P = 4, 6, 7
KINDS = ("single_stream", "context_updates", "nonlinear", "layer_values")


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def copied_untied(looped: AttentionPack) -> AttentionPack:
    """The untied model whose layer l is a copy of the looped model's row l % B (one model)."""
    L, B = looped.depths[0], looped.loop
    up = AttentionPack(looped.kind, d, N, [L], [0], 0.5).double()
    with torch.no_grad():
        for n, p in looped.named_parameters():
            getattr(up, n).copy_(p[torch.arange(L) % B] if n in looped.layer_params else p)
    return up


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("L,B", [(4, 1), (4, 2), (6, 3), (8, 4), (3, 3)])
def test_looped_forward_and_gradients_match_copies(float64, kind, L, B):
    ctx = sample_contexts(3, d, P, 0.5, 0.25, "difficult", 2, make_generator(L + B), dtype=torch.float64)
    lpk = AttentionPack(kind, d, N, [L], [5], 0.5, loop=B).double()
    if kind == "context_updates":
        with torch.no_grad():
            lpk.m.fill_(-0.7)  # away from 0: the context updates reach the output
    up = copied_untied(lpk)
    assert lpk.Wq.shape[0] == B and up.Wq.shape[0] == L
    o1 = lpk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0]
    o2 = up(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0]
    assert o1.f_BxL.shape == (3, L) and o1.p_BxLxP.shape == (3, L, P)
    assert torch.allclose(o1.f_BxL, o2.f_BxL, rtol=1e-12, atol=1e-12)
    assert torch.allclose(o1.y_hat_B, o2.y_hat_B, rtol=1e-12, atol=1e-12)
    assert torch.allclose(o1.p_BxLxP, o2.p_BxLxP, rtol=1e-12, atol=1e-14)
    w = torch.randn(3, L, generator=torch.Generator().manual_seed(L))
    g1 = torch.autograd.grad((o1.f_BxL * w).sum(), list(lpk.parameters()))
    g2 = torch.autograd.grad((o2.f_BxL * w).sum(), list(up.parameters()))
    for (name, _), a, b in zip(lpk.named_parameters(), g1, g2):
        if name in lpk.layer_params:  # the copies' gradients summed onto their row
            b = torch.stack([b[torch.arange(L) % B == r].sum(0) for r in range(B)])
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12 * max(1.0, b.abs().max().item())), name


def test_looped_ensemble_pack_mixes_depths_and_optimiser_rows(float64):
    """A nonlinear pack of loop = 2 at depths 2, 4, 8: each model owns 2 rows (row_owner and
    model_slice follow), and the packed forward of models 0 and 2 equals each model alone."""
    ctx = sample_contexts(3, d, P, 0.0, 0.0, "difficult", 2, make_generator(1), dtype=torch.float64)
    pk = AttentionPack("nonlinear", d, N, [2, 4, 8], [0, 1, 2], 0.5, loop=2).double()
    assert pk.Wq.shape[0] == 6 and pk.row_owner("Wq").tolist() == [0, 0, 1, 1, 2, 2]
    assert pk.model_slice("Wk", 2).shape == (2, N, N)
    f, p = pk.ensemble_forward(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, [0, 2])
    assert f.shape == (3, 10) and p.shape == (3, 10, P)
    for m, (t0, t1) in ((0, (0, 2)), (2, (2, 10))):
        alone = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, models=[m])[0]
        assert torch.allclose(f[:, t0:t1], alone.f_BxL)


def test_loop_B_at_depth_B_is_the_untied_B_layer_model():
    """Same init (the B distinct layers are drawn as the B-layer model's) and the same rate."""
    for kind, B in (("single_stream", 2), ("context_updates", 4), ("nonlinear", 1)):
        c0 = make_config("smoke", model=kind, L=B, seed=3)
        c1 = c0.replace(loop=B)
        s0, s1 = build_pack([c0]).state_of(0), build_pack([c1]).state_of(0)
        assert all(torch.equal(s0[n], s1[n]) for n in s0)
        assert base_lr(c1) == base_lr(c0)
        c4 = make_config("cpu", model=kind, L=4 * B, loop=B)  # a looped model's rate is its B layers'
        assert base_lr(c4) == base_lr(make_config("cpu", model=kind, L=B))


def test_one_tied_nonlinear_layer_is_one_head():
    """Trained at smoke: loop = 1 at L = 4 gives A = C exactly (to float tolerance) and the R of
    the L = 1 model: the controlled nonlinear model has no gain from repeating a layer."""
    c1 = make_config("smoke", model="nonlinear", L=1)
    c4 = c1.replace(L=4, loop=1)
    m1, m4 = train_one(c1), train_one(c4)
    assert abs(m4["A"] - m4["C"]) <= 1e-9 * m4["A"]
    assert m4["R"] == pytest.approx(m1["R"], rel=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_parameter_counts(kind):
    for L, B in ((1, 0), (4, 0), (8, 0), (4, 1), (8, 2), (8, 4), (16, 1)):
        pk = AttentionPack(kind, d, N, [L], [0], loop=B)
        assert pk.n_params() == lp.n_params(kind, d, N, L, B) == sum(p.numel() for p in pk.parameters())
    # the cpu geometry (d = N = 16): 544 + 512 per distinct layer (+1: context_updates' m)
    assert lp.n_params("single_stream", 16, 16, 16) == 544 + 16 * 512
    assert lp.n_params("single_stream", 16, 16, 16, 1) == lp.n_params("single_stream", 16, 16, 1) == 1056
    assert lp.n_params("context_updates", 16, 16, 8, 2) == 544 + 2 * 512 + 1


def test_config_loop_is_validated_and_keys_runs():
    with pytest.raises(ConfigError, match="loop must be 0 for model = linear"):
        make_config("smoke", model="linear", L=4, loop=1)
    with pytest.raises(ConfigError, match="loop must be a divisor of L = 6"):
        make_config("smoke", model="single_stream", L=6, loop=4)
    c0 = make_config("cpu", model="single_stream", L=8)
    assert c0.replace(loop=0).run_id == c0.run_id  # the default stays out of the id
    keys = {pack_key(c0.replace(loop=B)) for B in (0, 1, 2, 4)}
    assert len(keys) == 4
    n1, n2 = make_config("cpu", model="nonlinear", L=4, loop=1), make_config("cpu", model="nonlinear", L=8, loop=1)
    assert pack_key(n1) == pack_key(n2) != pack_key(n1.replace(loop=2))  # packable across depth


@pytest.mark.parametrize("preset,want", [
    ("smoke", {("nonlinear", 0): (1,), ("nonlinear", 1): (4,),
               ("single_stream", 0): (1, 2, 4), ("single_stream", 1): (2, 4), ("single_stream", 2): (4,),
               ("context_updates", 0): (1, 2, 4), ("context_updates", 1): (2, 4), ("context_updates", 2): (4,)}),
    ("cpu", {("nonlinear", 0): (1,), ("nonlinear", 1): (4,),
             ("single_stream", 0): (1, 2, 4, 8), ("single_stream", 1): (2, 4, 8),
             ("single_stream", 2): (4, 8), ("single_stream", 4): (8,),
             ("context_updates", 0): (1, 2, 4, 8), ("context_updates", 1): (2, 4, 8),
             ("context_updates", 2): (4, 8), ("context_updates", 4): (8,)}),
])
def test_registry_expands_looped(preset, want):
    cfgs = ex.REGISTRY["looped"].configs(preset)
    got: dict = {}
    for c in cfgs:
        assert (c.task, c.k, c.a, c.b, c.seed) == ("difficult", 2, 0.0, 0.0, 0)
        got.setdefault((c.model, c.loop), []).append(c.L)
    assert {k: tuple(v) for k, v in got.items()} == want
    # the untied runs are the paper's own (fig6, fig9, fig11): same configs, same ids
    paper = {c.run_id for c in ex.all_configs(("fig6", "fig9", "fig11"), preset)}
    assert {c.run_id for c in cfgs if c.loop == 0} <= paper
    assert not {c.run_id for c in cfgs if c.loop} & paper
    assert "looped" in ex.BEYOND_IDS and "looped" not in ex.IDS


def test_figure_table_and_claims_build(tmp_path):
    """On made-up, paper-shaped metrics (test_report.fabricate): the figure and table build, every
    trained run is one table row; without the looped runs the claims FAIL naming missing runs."""
    from depthscale.report import figures, tables
    from depthscale.experiments.registry import check_claim
    from depthscale.analysis.results import Results, Theory
    from depthscale.store.store import Store

    from test_report import fabricate

    th = Theory("smoke", cache=tmp_path / "theory.json")
    store = Store(tmp_path / "store")
    fabricate(store, th, ["looped"], skip=lambda c: c.loop == 2)
    res = Results.from_store(StoredRuns(store), "smoke")
    paths = figures.write_figure("looped", res, th, tmp_path / "out")
    assert all(p.stat().st_size > 0 for p in paths)
    df, _ = tables.write_table("looped", res, th, tmp_path / "out")
    assert list(df.columns) == list(lp.COLUMNS)
    assert len(df) == len(ex.REGISTRY["looped"].configs("smoke")) - 2  # (the loop = 2 runs are missing)
    one = df[(df.model == "single_stream") & (df.tying == "untied") & (df.L == 1)].iloc[0]
    assert math.isnan(one.gain_per_kparam) and one.gain == 0
    tied = df[(df.model == "single_stream") & (df.tying == "B=1") & (df.L == 4)].iloc[0]
    assert tied.params == lp.n_params("single_stream", 8, 8, 1)
    r = check_claim("B1d", res, th)
    assert not r["pass"] and r["detail"].startswith("missing runs") and "B=2 L=4" in r["detail"]
    fabricate(store, th, ["looped"], skip=lambda c: c.loop != 2)
    res = Results.from_store(StoredRuns(store), "smoke")
    assert not lp.missing(res)
    for cid in ("B1b", "B1c", "B1d"):  # (B1a, an identity, is test_one_tied_nonlinear_layer_is_one_head)
        r = check_claim(cid, res, th)
        assert r["measured"] is not None, (cid, r["detail"])


def test_looped_run_stores_and_loads(tmp_path):
    """A looped run goes through the store: its params.pt holds B rows and load_model rebuilds the
    looped model (smoke, single_stream, B = 1 at L = 2)."""
    from depthscale import load_model
    from depthscale.store.store import Store

    store = Store(tmp_path / "store")
    cfg = make_config("smoke", model="single_stream", L=2, loop=1, max_steps=20)
    met = train_one(cfg, store)
    pk = load_model(store, cfg.run_id)
    assert pk.loop == 1 and pk.depths == [2] and pk.Wq.shape[0] == 1
    ctx = sample_contexts(4, cfg.d, cfg.P, 0.0, 0.0, "difficult", 2, make_generator(0))
    out = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0]
    assert out.f_BxL.shape == (4, 2) and torch.isfinite(out.y_hat_B).all() and math.isfinite(met["R"])
