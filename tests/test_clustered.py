"""Clustered contexts (issue 16 item 2, paper App. D.2): K fixed rotations instead of a fresh Haar
one per context, the per-layer per-class selection loss, the specialisation index, and the
`clustered` experiment (registry, figure, table, claims) on a smoke store trained here."""

import math

import numpy as np
import pytest
import torch

from depthscale.config.run import make_config
from depthscale.experiments import registry as ex
from depthscale.base.seeds import step_seed
from depthscale.data.contexts import clear_draw_cache, cluster_rotations, make_generator, sample_contexts, sample_for
from depthscale.data.measurements import (class_means, eval_contexts, layer_selection_loss, selection_loss,
                                     specialisation_index)
from depthscale.runs.per_context import StoredRuns


def _rotations(O_Bxdxd):
    return {tuple(np.round(o.double().numpy().ravel(), 12)) for o in O_Bxdxd}


# ---------------------------------------------------------------- contexts

@pytest.mark.parametrize("K", [1, 2, 4, 8])
def test_clusters_use_exactly_K_fixed_rotations_shared_by_seeds_and_streams(K):
    cfgs = [make_config("smoke", model="nonlinear", task="difficult", a=1.0, b=0.0, clusters=K, seed=s)
            for s in (0, 3)]
    fixed = cluster_rotations(K, cfgs[0].d)
    assert fixed.shape == (K, cfgs[0].d, cfgs[0].d)
    eye = torch.eye(cfgs[0].d)
    assert torch.allclose(fixed.transpose(1, 2) @ fixed, eye.expand(K, -1, -1), atol=1e-5)
    want = _rotations(fixed)
    seen = []
    for c in cfgs:  # training stream (two seeds, two steps), then the evaluation set
        for step in (0, 7):
            ctx = sample_for(c, 400, make_generator(step_seed(c.seed, step)))
            seen.append(ctx)
        seen += eval_contexts(c, 600, c.eval_seed, chunk=300)
    for ctx in seen:
        assert ctx.clusters == K and ctx.cls_B is not None
        assert _rotations(ctx.O_Bxdxd) <= want  # only the K fixed rotations ...
        assert torch.equal(ctx.O_Bxdxd, fixed[ctx.cls_B])  # ... the one of each context's class
    assert _rotations(seen[0].O_Bxdxd) == want  # all K of them used in 400 contexts
    # fixed by (K, d) only: the cache cleared, a fresh draw is the same
    from depthscale.data import contexts
    contexts._cluster_cache.clear()
    assert torch.equal(cluster_rotations(K, cfgs[0].d), fixed)
    assert not torch.equal(cluster_rotations(K + 1, cfgs[0].d)[:1], fixed[:1])


def test_classes_are_uniform():
    K, B = 4, 20_000
    ctx = sample_contexts(B, 4, 8, 1.0, 0.0, "difficult", 2, make_generator(11), clusters=K)
    counts = torch.bincount(ctx.cls_B, minlength=K).double()
    # each count ~ Binomial(B, 1/K): within 5 sd of B/K
    assert torch.all((counts - B / K).abs() < 5 * math.sqrt(B * (1 / K) * (1 - 1 / K)))
    chi2 = float(((counts - B / K) ** 2 / (B / K)).sum())
    assert chi2 < 16.3  # chi-square, 3 dof, p = 0.001


def test_clusters_zero_is_unchanged_bit_for_bit():
    """clusters = 0 draws exactly what sampling drew before clusters existed (test_contexts pins
    those numbers); clusters = K draws the same Gaussians and only swaps the rotation."""
    for task, k in (("difficult", 2), ("easy", 1)):
        clear_draw_cache()
        old = sample_contexts(6, 5, 9, 1.0, 0.5, task, k, make_generator(3))
        clear_draw_cache()
        new = sample_contexts(6, 5, 9, 1.0, 0.5, task, k, make_generator(3), clusters=0)
        cfg = make_config("smoke", model="nonlinear", task=task, k=k, a=1.0, b=0.5, d=5, P=9)
        via_cfg = sample_for(cfg, 6, make_generator(3))
        for f in ("X_BxPxd", "y_BxP", "xq_Bxd", "ystar_B", "sel_Bxk", "t_Bxd", "beta_Bxd", "O_Bxdxd"):
            assert torch.equal(getattr(old, f), getattr(new, f)), f
            assert torch.equal(getattr(old, f), getattr(via_cfg, f)), f
        assert new.cls_B is None and new.clusters == 0 and via_cfg.cls_B is None
        cl = sample_contexts(6, 5, 9, 1.0, 0.5, "difficult", 2, make_generator(3), dtype=torch.float64, clusters=3)
        ref = sample_contexts(6, 5, 9, 1.0, 0.5, "difficult", 2, make_generator(3), dtype=torch.float64)
        # same Gaussians: X_K = O_K O_haar^T X_haar, context by context
        Rm = cl.O_Bxdxd @ ref.O_Bxdxd.transpose(1, 2)
        assert torch.allclose(torch.einsum("bij,bpj->bpi", Rm, ref.X_BxPxd), cl.X_BxPxd, atol=1e-10)
    assert make_config("cpu").run_id == make_config("cpu", clusters=0).run_id
    assert make_config("cpu").run_id != make_config("cpu", clusters=4).run_id


# ---------------------------------------------------------------- measurements

def _synthetic(B=600, L=5, P=7, k=2, K=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(3 * torch.randn(B, L, P, generator=g, dtype=torch.float64), -1)
    sel = torch.stack([torch.randperm(P, generator=g)[:k] for _ in range(B)])
    cls = torch.randint(0, K, (B,), generator=g)
    return p, sel, cls


def test_per_layer_per_class_loss_and_index_against_numpy():
    p, sel, cls = _synthetic()
    B, L, P = p.shape
    K, k = 3, sel.shape[1]
    pn, seln, clsn = p.numpy(), sel.numpy(), cls.numpy()
    # brute force: loop over contexts and layers
    E = np.zeros((B, L))
    for b in range(B):
        pstar = np.zeros(P)
        pstar[seln[b]] = 1.0 / k
        for layer in range(L):
            E[b, layer] = sum((pn[b, layer, j] - pstar[j]) ** 2 for j in range(P))
    got = layer_selection_loss(p, sel).numpy()
    assert np.allclose(got, E, rtol=1e-12, atol=1e-14)
    # at L = 1 it is the selection loss of the mean attention
    assert torch.allclose(layer_selection_loss(p[:, :1], sel)[:, 0], selection_loss(p[:, :1], sel))
    ELK = np.array([[E[clsn == c, layer].mean() for c in range(K)] for layer in range(L)])
    assert np.allclose(class_means(got, clsn, K), ELK)
    # index: per layer the CV over classes (population std / mean), then the mean over layers
    cv_raw = np.mean([np.std(ELK[layer]) / np.mean(ELK[layer]) for layer in range(L)])
    rel = np.array([[ELK[layer, c] / np.mean(ELK[:, c]) for c in range(K)] for layer in range(L)])
    cv_rel = np.mean([np.std(rel[layer]) / np.mean(rel[layer]) for layer in range(L)])
    idx = specialisation_index(ELK)
    assert idx["class_cv"] == pytest.approx(cv_raw, rel=1e-12)
    assert idx["specialisation"] == pytest.approx(cv_rel, rel=1e-12)


def test_specialisation_index_reference_values():
    # no specialisation: every layer has the same profile over classes (classes may differ in difficulty)
    E = np.outer([1.0, 2.0, 0.5], [0.2, 0.4, 0.9, 0.3])  # layer scale x class difficulty
    assert specialisation_index(E)["specialisation"] == pytest.approx(0.0, abs=1e-15)
    assert specialisation_index(E)["class_cv"] > 0.4
    flat = specialisation_index(np.full((4, 3), 0.7))
    assert flat["class_cv"] == pytest.approx(0.0, abs=1e-12) and flat["specialisation"] == pytest.approx(0.0, abs=1e-12)
    assert specialisation_index(np.array([[0.1, 0.5, 0.3]]))["specialisation"] == 0.0  # L = 1
    assert specialisation_index(np.array([[0.1], [0.5]])) == {"class_cv": 0.0, "specialisation": 0.0}  # K = 1
    # full specialisation: layer l solves class l only (loss e on it, 1 elsewhere), K = L = 2
    e = 0.0
    S = specialisation_index(np.array([[e, 1.0], [1.0, e]]))["specialisation"]
    assert S == pytest.approx(1.0)  # CV of (0, 2) = 1
    # a class nobody saw (NaN) is left out
    assert specialisation_index(np.array([[0.1, np.nan], [0.2, np.nan]]))["specialisation"] == 0.0


# ---------------------------------------------------------------- the experiment

def test_registry_expansion_smoke_and_cpu():
    e = ex.REGISTRY["clustered"]
    assert e.part == "beyond" and "clustered" in ex.BEYOND_IDS and "clustered" not in ex.IDS
    for preset, depths in (("smoke", (1, 2, 4)), ("cpu", (1, 2, 4, 8, 16, 64))):
        cfgs = e.configs(preset)
        assert len(cfgs) == 5 * len(depths) + 3 == len({c.run_id for c in cfgs})
        # claim B2a's untrained controls: K = 2, 4, 8 at the deepest depth, measured at step 0
        controls = [c for c in cfgs if c.max_steps == 0]
        assert sorted(c.clusters for c in controls) == [2, 4, 8] and {c.L for c in controls} == {depths[-1]}
        assert sorted({c.clusters for c in cfgs}) == [0, 1, 2, 4, 8]
        assert {(c.a, c.b, c.k, c.task, c.model) for c in cfgs} == {(1.0, 0.0, 2, "difficult", "nonlinear")}
        assert tuple(sorted({c.L for c in cfgs})) == depths
        # K = inf is fig6's runs: the same configs, the same run ids
        fig6 = {c.run_id for c in ex.REGISTRY["fig6"].configs(preset)}
        assert {c.run_id for c in cfgs if c.clusters == 0} <= fig6
        assert not {c.run_id for c in cfgs if c.clusters} & fig6


@pytest.fixture(scope="module")
def smoke_store(tmp_path_factory):
    from depthscale.analysis.results import Results, Theory
    from depthscale.store.store import Store
    from depthscale.runs.sweeps import plan, run_sweep

    root = tmp_path_factory.mktemp("clustered")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        store = Store(root / "store")
        run_sweep(plan(ex.REGISTRY["clustered"].configs("smoke"), store), store)
        yield root, Results.from_store(StoredRuns(store), "smoke"), Theory("smoke", cache=root / "theory.json")
    finally:
        torch.set_num_threads(n)


def test_runs_store_the_class_metrics(smoke_store):
    from depthscale.experiments.clustered import clustered_series

    _, res, _ = smoke_store
    for K in (1, 2, 4, 8):
        s = clustered_series(res, K)
        assert s and not s.missing
        arr = s.arrays["selection_layer_class"]
        for L, a in zip(s.depths, arr):
            assert a[0].shape == (L, K)
            idx = specialisation_index(a[0])
            assert s.get("specialisation")[list(s.depths).index(L)] == pytest.approx(idx["specialisation"])
        assert np.all(s.get("specialisation")[s.depths == 1] == 0)
        assert len(s.arrays["R_class"][0][0]) == K
    s0 = clustered_series(res, 0)
    assert s0 and np.all(np.isnan(s0.get("specialisation")))
    assert all(a is None for a in s0.arrays["selection_layer_class"])


def test_figure_table_and_claims_build_on_smoke(smoke_store):
    from depthscale.experiments.registry import check_claims
    from depthscale.report.figures import FIGURES, write_figure
    from depthscale.report.tables import TABLES, write_table

    root, res, th = smoke_store
    assert "clustered" in FIGURES and "clustered" in TABLES
    paths = write_figure("clustered", res, th, root / "out")
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)
    df, _ = write_table("clustered", res, th, root / "out")
    assert list(df["K"]) == [1, 2, 4, 8, "inf (Haar)"]
    assert np.all(np.isfinite(df["R_Lmax"].astype(float)))
    assert math.isnan(df["specialisation_Lmax"].iloc[-1]) and df["specialisation_Lmax"].iloc[0] == 0
    claims = check_claims(res, th, ["clustered"])
    assert [c["id"] for c in claims] == ["B2a", "B2b", "B2c"]
    for c in claims:  # judged on smoke data (no science): a verdict with its numbers, never an error
        assert "error while checking" not in c["detail"], c["detail"]
    # a store without the clustered runs: every claim FAILs "missing runs"
    from depthscale.analysis.results import Results

    empty = Results(res.df[res.df["clusters"] == 0], "smoke", res.reader)
    for c in check_claims(empty, th, ["clustered"]):
        assert not c["pass"] and c["detail"].startswith("missing runs"), c["detail"]
