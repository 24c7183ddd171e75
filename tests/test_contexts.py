"""Contexts and tasks against independent computations (SPEC §2)."""

import math

import numpy as np
import pytest
import torch

from depthscale.data.contexts import haar_orthogonal, make_generator, sample_contexts, spectrum, top_k_by_cosine


@pytest.mark.parametrize("a,b", [(0.0, 0.0), (1.0, 0.5)])
def test_input_and_teacher_covariance(a, b):
    d, P, B = 6, 8, 20000
    ctx = sample_contexts(B, d, P, a, b, "difficult", 2, make_generator(0), dtype=torch.float64)
    lam, om = spectrum(d, a, torch.float64), spectrum(d, b, torch.float64)
    Sig = ctx.O_Bxdxd @ torch.diag(lam) @ ctx.O_Bxdxd.transpose(1, 2)
    Om = ctx.O_Bxdxd @ torch.diag(om) @ ctx.O_Bxdxd.transpose(1, 2)
    # in each context's own frame the inputs have covariance Sigma: whiten by it and compare with I
    # pooled over contexts; every entry of x x^T has SE from its sample std.
    xx = torch.einsum("bpi,bpj->bpij", ctx.X_BxPxd, ctx.X_BxPxd)
    dev = (xx - Sig.unsqueeze(1)).reshape(-1, d, d)
    mean, se = dev.mean(0), dev.std(0) / math.sqrt(dev.shape[0])
    assert (mean.abs() < 4 * se).all()
    bb = torch.einsum("bi,bj->bij", ctx.beta_Bxd, ctx.beta_Bxd) - Om
    assert (bb.mean(0).abs() < 4 * bb.std(0) / math.sqrt(B)).all()
    # in the eigenbasis the variances are lambda_k and omega_k
    v = torch.einsum("bij,bpi->bpj", ctx.O_Bxdxd, ctx.X_BxPxd).reshape(-1, d)
    assert torch.allclose(v.pow(2).mean(0), lam, rtol=0.02)
    w = torch.einsum("bij,bi->bj", ctx.O_Bxdxd, ctx.beta_Bxd)
    se_w = w.pow(2).std(0) / math.sqrt(B)
    assert ((w.pow(2).mean(0) - om).abs() < 4 * se_w).all()


def test_rotations_orthogonal_and_distinct():
    O = haar_orthogonal(50, 7, make_generator(1), dtype=torch.float64)
    eye = torch.eye(7, dtype=torch.float64)
    assert torch.allclose(O @ O.transpose(1, 2), eye.expand(50, 7, 7), atol=1e-12)
    diffs = (O[1:] - O[:-1]).abs().amax((1, 2))
    assert (diffs > 0.1).all()
    # Haar: E[O_11^2] = 1/d; entries of the first row have mean 0
    O = haar_orthogonal(20000, 4, make_generator(2), dtype=torch.float64)
    x = O[:, 0, 0].pow(2)
    assert abs(x.mean().item() - 0.25) < 4 * x.std().item() / math.sqrt(len(x))


def test_reproducible_from_seed():
    c1 = sample_contexts(4, 5, 9, 0.5, 0.5, "difficult", 2, make_generator(7))
    c2 = sample_contexts(4, 5, 9, 0.5, 0.5, "difficult", 2, make_generator(7))
    c3 = sample_contexts(4, 5, 9, 0.5, 0.5, "difficult", 2, make_generator(8))
    assert torch.equal(c1.X_BxPxd, c2.X_BxPxd) and torch.equal(c1.ystar_B, c2.ystar_B)
    assert not torch.equal(c1.X_BxPxd, c3.X_BxPxd)


def test_labels_are_teacher_projections():
    c = sample_contexts(8, 5, 9, 0.0, 1.0, "difficult", 3, make_generator(3), dtype=torch.float64)
    assert torch.allclose(c.y_BxP, torch.einsum("bpd,bd->bp", c.X_BxPxd, c.beta_Bxd))
    assert torch.allclose(c.ystar_B, torch.einsum("bd,bd->b", c.t_Bxd, c.beta_Bxd))


def test_topk_and_target_equal_brute_force():
    k = 3
    c = sample_contexts(30, 6, 20, 0.5, 0.0, "difficult", k, make_generator(4), dtype=torch.float64)
    X, xq, y = c.X_BxPxd.numpy(), c.xq_Bxd.numpy(), c.y_BxP.numpy()
    for bi in range(c.B):
        cos = [float(X[bi, i] @ xq[bi] / (np.linalg.norm(X[bi, i]) * np.linalg.norm(xq[bi])))
               for i in range(X.shape[1])]
        order = sorted(range(len(cos)), key=lambda i: -cos[i])[:k]
        assert list(c.sel_Bxk[bi].numpy()) == order
        assert c.ystar_B[bi].item() == pytest.approx(np.mean([y[bi, i] for i in order]), rel=1e-12)


def test_easy_target_is_matched_label():
    c = sample_contexts(40, 5, 12, 1.0, 0.0, "easy", 1, make_generator(5))
    j = c.sel_Bxk[:, 0]
    rows = torch.arange(c.B)
    assert torch.equal(c.xq_Bxd, c.X_BxPxd[rows, j])
    assert torch.equal(c.ystar_B, c.y_BxP[rows, j])
    assert len(set(j.tolist())) > 5  # j is uniform, not fixed


@pytest.mark.parametrize("task,k,noise", [("easy", 1, 0.0), ("difficult", 2, 0.0), ("difficult", 3, 0.1)])
def test_shared_draws_give_the_same_numbers_bit_for_bit(task, k, noise):
    """Runs of one seed and different spectra share their random draws (contexts._raw_draws):
    every tensor, and the stream's position afterwards, equals a fresh draw, bit for bit — for one
    stream per spectrum (training batches) and for chunks drawn in turn from one stream
    (evaluation sets)."""
    from depthscale.data.contexts import clear_draw_cache

    spectra = [(0.0, 0.0), (0.5, 2.0), (2.0, 0.5)]

    def draw(a, b, fresh):
        out, gen = [], make_generator(7)
        for _ in range(3):
            if fresh:
                clear_draw_cache()
            out.append(sample_contexts(5, 4, 9, a, b, task, k, gen, noise))
        return out, gen.next

    for a, b in spectra:  # the first spectrum fills the cache, the others read it
        shared, st_shared = draw(a, b, fresh=False)
        alone, st_alone = draw(a, b, fresh=True)
        assert st_shared == st_alone == 15
        for c1, c2 in zip(shared, alone):
            for f in ("X_BxPxd", "y_BxP", "xq_Bxd", "ystar_B", "sel_Bxk", "t_Bxd", "beta_Bxd", "O_Bxdxd"):
                assert torch.equal(getattr(c1, f), getattr(c2, f)), f
    # the draws differ between chunks and spectra scale them differently
    c_a, _ = draw(0.0, 0.0, False)
    c_b, _ = draw(2.0, 0.5, False)
    assert not torch.equal(c_a[0].X_BxPxd, c_a[1].X_BxPxd)
    assert not torch.equal(c_a[0].X_BxPxd, c_b[0].X_BxPxd)
    assert torch.equal(c_a[0].O_Bxdxd, c_b[0].O_Bxdxd)


def test_cached_draws_are_not_changed_by_callers():
    from depthscale.data.contexts import clear_draw_cache

    clear_draw_cache()
    for task in ("difficult", "easy"):
        c1 = sample_contexts(4, 3, 5, 0.0, 0.0, task, 2, make_generator(3))
        for f in ("O_Bxdxd", "X_BxPxd", "sel_Bxk", "beta_Bxd"):
            getattr(c1, f).zero_()
        c2 = sample_contexts(4, 3, 5, 0.0, 0.0, task, 2, make_generator(3))
        clear_draw_cache()
        c3 = sample_contexts(4, 3, 5, 0.0, 0.0, task, 2, make_generator(3))
        for f in ("O_Bxdxd", "X_BxPxd", "sel_Bxk", "beta_Bxd"):
            assert torch.equal(getattr(c2, f), getattr(c3, f)), f


def test_top_k_by_cosine_scores_equal_torch_cosine_similarity_bit_for_bit():
    """top_k_by_cosine computes torch's cosine similarity without expanding x_test: same numbers."""
    g = torch.Generator().manual_seed(5)
    for B, P, d in [(256, 64, 16), (64, 256, 32), (3, 5, 2)]:
        X = torch.randn(B, P, d, generator=g) * torch.rand(d, generator=g)
        xq = torch.randn(B, d, generator=g)
        ref = torch.nn.functional.cosine_similarity(X, xq.unsqueeze(1), dim=-1)
        k = min(4, P)
        assert torch.equal(top_k_by_cosine(X, xq, k), torch.topk(ref, k, dim=-1, sorted=True).indices)
        xn = torch.linalg.vector_norm(X, 2, dim=-1, keepdim=True).clamp_min(1e-8)
        qn = torch.linalg.vector_norm(xq, 2, dim=-1, keepdim=True).clamp_min(1e-8)
        assert torch.equal(((X / xn) * (xq / qn).unsqueeze(1)).sum(-1), ref)


def test_the_stream_is_drawn_on_the_cpu_whatever_the_device():
    """SPEC §2: same seed, same contexts on every device. A data stream is made on the CPU for any
    device, and contexts asked for another device are the CPU contexts moved: the
    'meta' device (no data, but a real second device) shows they are moved, not drawn there; the
    GPU check itself is benchmarks/device_stream.py (the numbers compared bit for bit on a CUDA machine)."""
    from depthscale.config.run import make_config
    from depthscale.data.contexts import make_generator, sample_for

    cfg = make_config("smoke", model="nonlinear", task="difficult")
    assert make_generator(5, "cuda").key == make_generator(5, "cpu").key
    g_cpu, g_meta = make_generator(5, "cpu"), make_generator(5, "meta")
    on_cpu = sample_for(cfg, 8, g_cpu, "cpu")
    on_meta = sample_for(cfg, 8, g_meta, "meta")
    assert on_meta.X_BxPxd.device.type == "meta" and on_meta.sel_Bxk.device.type == "meta"
    assert on_meta.X_BxPxd.shape == on_cpu.X_BxPxd.shape and on_meta.sel_Bxk.dtype == on_cpu.sel_Bxk.dtype
    # both streams advanced by the same contexts: the next batch is the same bits
    assert torch.equal(sample_for(cfg, 8, g_cpu, "cpu").X_BxPxd, sample_for(cfg, 8, g_meta, "cpu").X_BxPxd)
    # moving is exact
    back = on_cpu.to("cpu")
    assert all(torch.equal(getattr(back, f), getattr(on_cpu, f)) for f in ("X_BxPxd", "y_BxP", "ystar_B", "sel_Bxk"))
