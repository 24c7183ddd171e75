"""Measurements (SPEC §5) against independent computations."""

import math

import numpy as np
import pytest
import torch

from depthscale.config.run import make_config
from depthscale.data.contexts import make_generator, sample_contexts
from depthscale.data.measurements import (decomposition, eval_contexts, measure, measure_many, monitor, rho_fit,
                                          selection_loss)
from depthscale.kinds.lookup import AttentionPack, build_pack, model_class

from built_in_kinds import built_in_kinds


def test_decomposition_identity_on_sample_means():
    g = torch.Generator().manual_seed(0)
    for L in (2, 3, 17):
        f = torch.randn(500, L, generator=g, dtype=torch.float64) + torch.randn(500, 1, generator=g, dtype=torch.float64)
        ys = torch.randn(500, generator=g, dtype=torch.float64)
        r = decomposition(f, ys)
        assert r["R"] == pytest.approx(r["C"] + (r["A"] - r["C"]) / L, rel=1e-12)
        # brute-force double loop for C
        e = (f - ys[:, None]).numpy()
        C = np.mean([np.mean(e[:, i] * e[:, j]) for i in range(L) for j in range(L) if i != j])
        assert r["C"] == pytest.approx(C, rel=1e-10)
        assert r["R_se"] == pytest.approx(np.std((e.mean(1)) ** 2, ddof=1) / math.sqrt(500), rel=1e-10)


@pytest.mark.parametrize("kind", built_in_kinds())
def test_identity_and_modes_for_every_model(kind):
    cfg = make_config("smoke", model=kind, L=3, a=0.5, b=0.5, qk_std=0.3)
    pack = build_pack([cfg])
    chunks = eval_contexts(cfg, 600, 3, chunk=300)
    r = measure(pack, 0, chunks, cfg.task)
    assert r["R"] == pytest.approx(r["C"] + (r["A"] - r["C"]) / 3, rel=1e-9)
    if model_class(kind).label_linear:
        # sum of mode losses = the beta-averaged loss; the sampled R agrees within its SE
        assert abs(r["mode_R_sum"] - r["R"]) < 4 * r["R_se"] + 1e-3 * r["R"]


def test_mode_sum_equals_beta_averaged_loss_exactly():
    cfg = make_config("smoke", model="nonlinear", L=2, a=1.0, b=0.5, qk_std=0.3)
    pack = build_pack([cfg]).double()
    ctx = sample_contexts(200, cfg.d, cfg.P, 1.0, 0.5, "difficult", 2, make_generator(1), dtype=torch.float64)
    r = measure(pack, 0, [ctx], "difficult")
    with torch.no_grad():
        out = pack(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)[0]
        g = pack.Wo[0] @ pack.Wv[0] @ pack.Wy[0]
        u = g * torch.einsum("blp,bpd->bd", out.p_BxLxP, ctx.X_BxPxd) / 2
        diff = u - ctx.t_Bxd
        Om = ctx.O_Bxdxd @ torch.diag(ctx.omega_d) @ ctx.O_Bxdxd.transpose(1, 2)
        exact = torch.einsum("bi,bij,bj->b", diff, Om, diff).mean().item()
    assert r["mode_R_sum"] == pytest.approx(exact, rel=1e-10)


def test_selection_loss_brute_force():
    g = torch.Generator().manual_seed(2)
    p = torch.softmax(torch.randn(5, 3, 9, generator=g), -1)
    sel = torch.stack([torch.randperm(9, generator=g)[:2] for _ in range(5)])
    E = selection_loss(p, sel)
    for b in range(5):
        pbar = p[b].mean(0).numpy()
        pstar = np.zeros(9)
        pstar[sel[b].numpy()] = 0.5
        assert E[b].item() == pytest.approx(float(((pbar - pstar) ** 2).sum()), rel=1e-5)


def test_rho_fit_recovers_construction():
    P = 10
    for rho in (0.0, 0.3, 0.9999):
        A = rho * np.eye(P) + (1 - rho) * np.full((P, P), 1 / P)
        r = rho_fit(A)
        assert r["rho"] == pytest.approx(rho, abs=1e-12)
        assert r["rho_r2"] == pytest.approx(1.0) or rho == 0.0


def test_top1_mass_and_context_updates_fields():
    cfg = make_config("smoke", model="context_updates", task="easy", k=1, L=2)
    pack = build_pack([cfg])
    r = measure(pack, 0, eval_contexts(cfg, 128, 5), "easy")
    assert 0 < r["top1_mass"] < 1 and r["m"] == 0.0 and "rho" in r
    assert np.allclose(np.array(r["A1_mean"]).sum(1), 1.0, atol=1e-5)


def _same(a, b, rel):
    """Two measure()/monitor results equal key by key (numbers to `rel`, lists entrywise)."""
    assert set(a) == set(b)
    for k in a:
        x, y = np.asarray(a[k], dtype=float), np.asarray(b[k], dtype=float)
        assert np.allclose(x, y, rtol=rel, atol=0, equal_nan=True), (k, a[k], b[k])


@pytest.mark.parametrize("kind,task", [("linear", "easy"), ("linear", "difficult"), ("nonlinear", "difficult"),
                                       ("context_updates", "difficult")])
def test_sliced_evaluation_equals_whole_chunks(kind, task, monkeypatch):
    """Issue 15: on the CPU, measure() and the training monitor evaluate the 1,024-context chunks in
    slices of eval_batch contexts (the monitor also model by model). Every number equals the
    whole-chunk, all-models-at-once computation to float tolerance."""
    import depthscale.data.measurements as meas
    from depthscale.base import seeds
    from depthscale.train.trainer import spectrum_key

    cfgs = [make_config("smoke", model=kind, task=task, k=2 if task == "difficult" else 1, L=4, a=a, b=b,
                        seed=s, qk_std=0.3) for (a, b), s in (((0.5, 0.5), 0), ((1.0, 0.0), 0), ((0.5, 0.5), 1))]
    if kind != "linear":  # one spectrum per pack for the other kinds
        cfgs = [c for c in cfgs if (c.a, c.b) == (0.5, 0.5)]
    pack = build_pack(cfgs)
    sets = {spectrum_key(c): eval_contexts(c, 700, seeds.monitor_seed(c.eval_seed), chunk=300) for c in cfgs}
    chunks_of = lambda m: sets[spectrum_key(cfgs[m])]  # noqa: E731
    models = list(range(len(cfgs)))
    assert meas.eval_batch("cpu") == meas.CPU_EVAL_BATCH and meas.eval_batch("meta") is None
    monkeypatch.setattr(meas, "CPU_EVAL_BATCH", 128)  # 300 = 128 + 128 + 44: uneven slices too
    sliced = monitor(pack, models, chunks_of)
    measured = [measure(pack, m, chunks_of(m), task) for m in models]
    parts = meas.split_contexts(chunks_of(0)[0], 128)
    assert [p.B for p in parts] == [128, 128, 44]
    assert torch.equal(torch.cat([p.X_BxPxd for p in parts]), chunks_of(0)[0].X_BxPxd)
    assert torch.equal(torch.cat([p.sel_Bxk for p in parts]), chunks_of(0)[0].sel_Bxk)
    assert parts[1].lam_d is chunks_of(0)[0].lam_d  # per-set fields are shared, not sliced
    monkeypatch.setattr(meas, "CPU_EVAL_BATCH", None)  # the computation before issue 15
    whole = monitor(pack, models, chunks_of)
    for m in models:
        _same(sliced[m], whole[m], 1e-5)
        _same(measured[m], measure(pack, m, chunks_of(m), task), 1e-5)


@pytest.mark.parametrize("kind", ["nonlinear", "layer_values"])
def test_exact_label_weights_equal_the_differentiated_forward(kind, monkeypatch):
    """Issue 50 item 1: the softmax ensembles read the input weights w = d y_hat / d y_in off a forward
    without gradients (w = (1/L) sum_l g_l p_l, ModelKind.label_weights) instead of a backward pass.
    They equal autograd's w to float32 rounding, and every measurement equals the differentiated one's:
    R, A, C bit for bit (the same forward), the mode-wise losses to float rounding."""
    import depthscale.data.measurements as meas

    cfgs = [make_config("smoke", model=kind, task="difficult", k=2, L=L, seed=s, qk_std=0.5)
            for L, s in ((1, 0), (4, 0), (4, 1))]
    pack = build_pack(cfgs)
    with torch.no_grad():  # gains away from 1, so that a missing g shows
        pack.Wo.mul_(1.7)
    assert pack.exact_label_weights
    chunks = eval_contexts(cfgs[0], 600, 5, chunk=300)
    exact = [measure(pack, m, chunks, "difficult") for m in range(len(cfgs))]
    for m in range(len(cfgs)):
        for ctx in chunks:
            w, out = meas.input_weights(pack, m, ctx)
            y = ctx.y_BxP.detach().clone().requires_grad_(True)
            with torch.enable_grad():
                (w_ref,) = torch.autograd.grad(pack(ctx.X_BxPxd, y, ctx.xq_Bxd, models=[m])[0].y_hat_B.sum(), y)
            torch.testing.assert_close(w, w_ref, rtol=1e-5, atol=1e-7)
            assert not w.requires_grad and not out.f_BxL.requires_grad
    monkeypatch.setattr(type(pack), "exact_label_weights", False)  # the backward pass, as before
    for m in range(len(cfgs)):
        ref = measure(pack, m, chunks, "difficult")
        for key in ("R", "A", "C", "R_se", "selection_mean"):  # (C is nan at L = 1)
            np.testing.assert_array_equal(exact[m][key], ref[key], err_msg=key)
        np.testing.assert_allclose(exact[m]["mode_R"], ref["mode_R"], rtol=1e-5)
        assert exact[m]["mode_R_sum"] == pytest.approx(ref["mode_R_sum"], rel=1e-5)


def test_measure_many_reads_a_streamed_set_once_with_the_numbers_of_measure(monkeypatch):
    """Issue 50/51: the runs of a pack that stop together are measured in one pass over their
    evaluation set (measure_many), so a streamed set (never held whole) is drawn once, not once per
    model, with the numbers `measure` gives model by model, bit for bit."""
    from depthscale.data.context_sets import ContextSet

    cfgs = [make_config("smoke", model="nonlinear", task="difficult", k=2, L=L, qk_std=0.4) for L in (1, 2, 4)]
    pack = build_pack(cfgs)
    draws = []
    real = ContextSet._draw
    monkeypatch.setattr(ContextSet, "_draw", lambda self, i: draws.append(i) or real(self, i))
    streamed = eval_contexts(cfgs[0], 700, 11, chunk=300, hold=False)
    keeps = [{}, {}, {}]
    many = measure_many(pack, [0, 1, 2], streamed, "difficult", keeps)
    assert draws == [0, 1, 2]  # each chunk drawn once for the three models
    held = eval_contexts(cfgs[0], 700, 11, chunk=300)
    for m in range(3):
        keep = {}
        one = measure(pack, m, held, "difficult", keep=keep)
        assert set(one) == set(many[m])
        for key, v in one.items():
            np.testing.assert_array_equal(np.asarray(many[m][key], dtype=float), np.asarray(v, dtype=float), err_msg=key)
        for key in ("sq_err", "ystar", "sel_E"):
            np.testing.assert_array_equal(keeps[m][key], keep[key])


def test_decomposition_in_blocks_of_rows_against_the_whole_array(monkeypatch):
    """Issue 51: the decomposition turns f into float64 errors DECOMPOSITION_ROWS contexts at a
    time (its temporaries were four n x L float64 arrays per model). Against the formula on the
    whole array: R, its SE and the per-context squared errors the same bits, A and C to float64
    rounding, with blocks that do not divide n (7 rows, 100 contexts) and one block (n < rows)."""
    from depthscale.data import measurements as meas

    g = torch.Generator().manual_seed(5)
    f = torch.randn(100, 6, generator=g) + torch.randn(100, 1, generator=g)  # float32, as the models give
    ys = torch.randn(100, generator=g)
    e = (f - ys.unsqueeze(1)).double()
    sq = e.mean(1) ** 2
    want = {"R": sq.mean().item(), "R_se": sq.std(unbiased=True).item() / 10.0, "A": e.pow(2).mean().item(),
            "C": ((e.sum(1) ** 2 - e.pow(2).sum(1)).mean() / 30).item()}
    for rows in (7, 100, 4096):
        monkeypatch.setattr(meas, "DECOMPOSITION_ROWS", rows)
        got = meas.decomposition(f, ys)
        assert (got["R"], got["R_se"]) == (want["R"], want["R_se"]), rows
        assert got["A"] == pytest.approx(want["A"], rel=1e-14) and got["C"] == pytest.approx(want["C"], rel=1e-13)
        np.testing.assert_array_equal(meas.squared_errors(f, ys).numpy(), sq.numpy())
        assert meas.decomposition(f[:, :1], ys)["C"] != meas.decomposition(f[:, :1], ys)["C"]  # NaN at L = 1


def test_a_measurement_keeps_each_per_context_value_in_one_array_made_up_front():
    """Issue 51: a model's per-context values (f_l, y*, ŷ, selection loss) go into one array of n
    rows each, filled slice by slice, not lists of slices joined at the end (those small slices,
    kept between each forward's temporaries, fragmented a worker's heap: +700 MiB in the main job's
    final pass; benchmarks/final_pass_memory.py)."""
    from depthscale.data import measurements as meas

    cfgs = [make_config("smoke", model="nonlinear", task="difficult", k=2, L=L, qk_std=0.4) for L in (1, 3)]
    pack = build_pack(cfgs)
    chunks = eval_contexts(cfgs[0], 700, 11, chunk=300)
    part = meas._Measurement(pack, 1, "difficult", 700)
    for chunk in chunks:
        for ctx in meas.split_contexts(chunk, 256):
            outs = meas.slice_outputs(pack, [1], ctx, pack.label_linear)
            part.add(ctx, outs[0], meas.mode_sums(outs, ctx)[0])
            assert all(col.shape[0] == 700 for col in part.cols.values())
    assert part.pos == 700 and set(part.cols) == {"f", "yhat", "ystar", "sel"}
    assert part.cols["f"].shape == (700, 3)
    assert not [v for v in vars(part).values() if isinstance(v, list) and len(v) > 0 and v is not part.mode_all]
    assert part.result()["R"] == measure(pack, 1, chunks, "difficult")["R"]


def test_the_runs_that_stop_together_are_measured_in_one_pass_with_the_numbers_run_by_run(tmp_path):
    """Trainer.final_measurements (the pack's last step) against final_measurement run by run: the
    same metrics and per-context arrays, and no evaluation set left held."""
    from depthscale.train.trainer import Trainer

    cfgs = [make_config("smoke", model="nonlinear", task="difficult", k=2, L=L, max_steps=5, eval_contexts=600)
            for L in (1, 2)]
    tr = Trainer(cfgs, build_pack(cfgs))
    tr.run(progress=False)
    together = tr.final_measurements([0, 1])
    assert not tr.eval_sets  # streamed for them: nothing held
    for i in (0, 1):
        keep: dict = {}
        alone = tr.final_measurement(i, keep)
        met, arrays = together[i]
        for key, v in alone.items():
            np.testing.assert_array_equal(np.asarray(met[key], dtype=float), np.asarray(v, dtype=float), err_msg=key)
        np.testing.assert_array_equal(arrays["sq_err"], keep["sq_err"])


@pytest.mark.skipif(not __import__("depthscale.data.kernels", fromlist=["x"]).use_fused(torch.zeros(1)),
                    reason="the fused kernels are off or not built: the joint forward does not run")
@pytest.mark.parametrize("model,task,k", [("nonlinear", "difficult", 2), ("nonlinear", "easy", 1),
                                          ("layer_values", "difficult", 3)])
def test_the_final_pass_through_the_joint_forward_gives_the_numbers_model_by_model(model, task, k, monkeypatch):
    """Issue 50: measure_many runs a slice's models at once through the kind's joint forward (the
    rows only as their layer sums). Every number agrees with the forward model by model, rows and
    all, to float32 rounding; the per-context arrays to float32 rounding of their terms."""
    from depthscale.kinds.base import ModelKind
    from depthscale.kinds.ensemble import Nonlinear

    cfgs = [make_config("smoke", model=model, task=task, k=k, L=L, seed=s, qk_std=0.4) for s in (0, 1) for L in (1, 3)]
    pack = build_pack(cfgs)
    with torch.no_grad():
        for prm in pack.parameters():
            prm.add_(0.3 * torch.randn(prm.shape, generator=torch.Generator().manual_seed(prm.numel())))
    chunks = eval_contexts(cfgs[0], 700, 11, chunk=300)
    calls = []
    real = Nonlinear.measure_forward
    monkeypatch.setattr(Nonlinear, "measure_forward", lambda self, ms, *a, **kw: calls.append(list(ms)) or real(
        self, ms, *a, **kw))
    keeps = [{} for _ in cfgs]
    joint = measure_many(pack, [0, 1, 2, 3], chunks, task, keeps)
    assert calls == [[0, 1, 2, 3]] * 5  # chunks of 300, 300, 100: slices of 256, 44, 256, 44, 100, one forward each
    monkeypatch.setattr(Nonlinear, "measure_forward", ModelKind.measure_forward)
    one_keeps = [{} for _ in cfgs]
    alone = measure_many(pack, [0, 1, 2, 3], chunks, task, one_keeps)
    for got, want, kg, kw in zip(joint, alone, keeps, one_keeps):
        assert set(got) == set(want)
        for key, v in want.items():
            if isinstance(v, float) and math.isfinite(v):
                assert got[key] == pytest.approx(v, rel=2e-5, abs=1e-12), key
            elif isinstance(v, list):
                np.testing.assert_allclose(got[key], v, rtol=2e-5, atol=1e-9, err_msg=key)
        assert ("top1_mass" in got) == (task == "easy") and ("selection_mean" in got) == (task == "difficult")
        np.testing.assert_array_equal(kg["ystar"], kw["ystar"])
        for key in ("sq_err", "sel_E"):
            if kw[key] is not None:
                np.testing.assert_allclose(kg[key], kw[key], rtol=1e-4, atol=1e-6 * np.abs(kw[key]).max(), err_msg=key)


def test_the_mode_sums_of_several_models_at_once_are_modewise_model_by_model():
    """mode_sums (issue 50: one batched product for a slice's models) against `modewise` of each w, and
    None for an output without input weights."""
    from depthscale.data import measurements as meas
    from depthscale.kinds.base import ModelOutput

    cfg = make_config("smoke", model="nonlinear", task="difficult", k=2, L=2, a=0.5, b=1.0)
    ctx = sample_contexts(64, cfg.d, cfg.P, cfg.a, cfg.b, cfg.task, cfg.k, make_generator(3))
    g = torch.Generator().manual_seed(4)
    outs = [ModelOutput(ctx.ystar_B, None, None, w_BxP=torch.rand(64, cfg.P, generator=g)) for _ in range(3)]
    got = meas.mode_sums(outs, ctx)
    for o, s in zip(outs, got):
        want = meas.modewise(torch.einsum("bp,bpd->bd", o.w_BxP, ctx.X_BxPxd), ctx).double().sum(0)
        assert s.dtype == torch.float64 and s.shape == (cfg.d,)
        torch.testing.assert_close(s, want, rtol=1e-5, atol=1e-9)
    assert len(set(float(s.sum()) for s in got)) == 3  # three different models' losses
    mixed = meas.mode_sums([outs[0], ModelOutput(ctx.ystar_B, None, None)], ctx)
    assert mixed[1] is None and torch.equal(mixed[0], meas.modewise(
        torch.einsum("bp,bpd->bd", outs[0].w_BxP, ctx.X_BxPxd), ctx).double().sum(0))


def test_the_top1_mass_of_the_mean_row_is_the_mean_rows_weight_on_the_first_selected_token():
    """top1_of_mean (the joint forward's top-1 mass) against top1_mass on the rows, with k = 2: the first
    selected token, never another."""
    from depthscale.data import measurements as meas

    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(6, 3, 9, generator=g), -1)
    sel = torch.stack([torch.randperm(9, generator=g)[:2] for _ in range(6)])
    got = meas.top1_of_mean(p.mean(1), sel)
    torch.testing.assert_close(got, meas.top1_mass(p, sel))
    torch.testing.assert_close(got, p.mean(1)[torch.arange(6), sel[:, 0]])
    assert not torch.allclose(got, p.mean(1)[torch.arange(6), sel[:, 1]])


def test_clustered_contexts_take_each_models_forward_with_its_rows(monkeypatch):
    """Clustered contexts read each layer's own row (the per-layer selection loss by class), which the
    joint forward does not keep: measure_many runs the forward model by model there."""
    from depthscale.kinds.ensemble import Nonlinear

    cfgs = [make_config("smoke", model="nonlinear", task="difficult", k=2, a=1.0, b=0.0, clusters=3, L=L)
            for L in (1, 3)]
    pack = build_pack(cfgs)
    calls = []
    real = Nonlinear.measure_forward
    monkeypatch.setattr(Nonlinear, "measure_forward", lambda self, *a, **kw: calls.append(1) or real(self, *a, **kw))
    res = measure_many(pack, [0, 1], eval_contexts(cfgs[0], 300, 11, chunk=300), "difficult")
    assert calls == []
    for r, L in zip(res, (1, 3)):
        assert np.asarray(r["selection_layer_class"]).shape == (L, 3) and math.isfinite(r["specialisation"])
