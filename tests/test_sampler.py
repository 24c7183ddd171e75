"""The counter-based context sampler (issue 35): the same bits in any batch split and at any thread
count; exact Haar rotations without LAPACK; the laws of the rotations and the Gaussians; the top-k
target against a sort-based reference."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from depthscale.base import seeds
from depthscale.data import contexts, kernels, philox
from depthscale.data.contexts import (clear_draw_cache, draws_torch, haar_from_householder, haar_orthogonal,
                                 make_generator, sample_contexts, spectrum)

HAVE_KERNEL = kernels.fused_ops() is not None
PATHS = ["torch"] + (["fused"] if HAVE_KERNEL else [])
needs_kernel = pytest.mark.skipif(not HAVE_KERNEL, reason="the fused kernel is not available here")


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """Each test once with the torch path (philox.py and torch) and once with csrc/sampler.cpp."""
    if request.param == "torch":
        monkeypatch.setattr(contexts, "_sampler_ops", lambda: None)
    clear_draw_cache()
    yield request.param
    clear_draw_cache()

FIELDS = ("X_BxPxd", "y_BxP", "xq_Bxd", "ystar_B", "sel_Bxk", "t_Bxd", "beta_Bxd", "O_Bxdxd")
CASES = [("difficult", 4, 0.0, 0), ("difficult", 3, 0.1, 0), ("easy", 1, 0.0, 0), ("difficult", 2, 0.0, 3)]


def _equal(c1, c2):
    for f in FIELDS + ("cls_B",):
        a, b = getattr(c1, f), getattr(c2, f)
        assert (a is None and b is None) or torch.equal(a, b), f


def _cat(c1, c2):
    return {f: torch.cat([getattr(c1, f), getattr(c2, f)]) for f in FIELDS}


@pytest.mark.parametrize("task,k,noise,clusters", CASES)
def test_one_call_equals_two_halves(task, k, noise, clusters, path):
    B, d, P = 64, 16, 64
    clear_draw_cache()
    whole = sample_contexts(B, d, P, 1.0, 0.5, task, k, make_generator(seeds.step_seed(4, 9)), noise,
                            clusters=clusters)
    s = make_generator(seeds.step_seed(4, 9))
    h1 = sample_contexts(B // 2, d, P, 1.0, 0.5, task, k, s, noise, clusters=clusters)
    h2 = sample_contexts(B - B // 2, d, P, 1.0, 0.5, task, k, s, noise, clusters=clusters)
    for f, v in _cat(h1, h2).items():
        assert torch.equal(getattr(whole, f), v), f
    # and any other cut, e.g. three uneven chunks of an evaluation stream
    s = make_generator(5)
    parts = [sample_contexts(n, d, P, 1.0, 0.5, task, k, s, noise, clusters=clusters) for n in (7, 40, 17)]
    one = sample_contexts(B, d, P, 1.0, 0.5, task, k, make_generator(5), noise, clusters=clusters)
    assert torch.equal(one.X_BxPxd, torch.cat([p.X_BxPxd for p in parts]))
    assert torch.equal(one.sel_Bxk, torch.cat([p.sel_Bxk for p in parts]))


@pytest.mark.parametrize("task,k,noise,clusters", CASES)
def test_same_bits_at_one_two_three_and_sixteen_threads(task, k, noise, clusters, path):
    before = torch.get_num_threads()
    out = []
    try:
        for n in (1, 2, 3, 16):  # (3: a split of 512 contexts that is not a power of two; 16: the GPU machine's cores)
            torch.set_num_threads(n)
            clear_draw_cache()
            out.append(sample_contexts(512, 16, 64, 1.0, 0.5, task, k, make_generator(seeds.step_seed(1, 3)),
                                       noise, dtype=torch.float64, clusters=clusters))
    finally:
        torch.set_num_threads(before)
    for other in out[1:]:
        _equal(out[0], other)


def test_streams_of_different_kinds_differ():
    Xs = [sample_contexts(4, 5, 6, 0.0, 0.0, "difficult", 2, make_generator(key)).X_BxPxd
          for key in (seeds.step_seed(3, 0), seeds.eval_stream_seed(3), seeds.monitor_seed(3), seeds.step_seed(3, 1))]
    for i in range(len(Xs)):
        for j in range(i):
            assert not torch.isin(Xs[i], Xs[j]).any()
    assert torch.equal(Xs[1], sample_contexts(4, 5, 6, 0.0, 0.0, "difficult", 2, make_generator(3)).X_BxPxd)


def test_a_torch_generator_keys_an_adhoc_stream():
    a = sample_contexts(3, 4, 5, 0.0, 0.0, "difficult", 2, seeds.generator(11))
    b = sample_contexts(3, 4, 5, 0.0, 0.0, "difficult", 2, seeds.generator(11))
    g = seeds.generator(11)
    sample_contexts(3, 4, 5, 0.0, 0.0, "difficult", 2, g)
    c = sample_contexts(3, 4, 5, 0.0, 0.0, "difficult", 2, g)
    assert torch.equal(a.X_BxPxd, b.X_BxPxd) and not torch.equal(a.X_BxPxd, c.X_BxPxd)


@pytest.mark.parametrize("d", [1, 2, 5, 16])
def test_householder_rotations_are_lapacks_sign_fixed_qr(d):
    """Fed the Householder vectors of a Gaussian G's reduction (computed here step by step), the
    rotation is LAPACK's Q of G = QR with diag R > 0 (Mezzadri's sign fix)."""
    g = torch.Generator().manual_seed(d)
    G = torch.randn(40, d, d, generator=g, dtype=torch.float64)
    A, vs = G.clone(), []
    for k in range(d):
        x = A[:, k:, k].clone()
        vs.append(x)
        alpha = -torch.where(x[:, :1] >= 0, 1.0, -1.0) * x.norm(dim=1, keepdim=True)
        v = x.clone()
        v[:, :1] -= alpha
        H = torch.eye(d - k, dtype=torch.float64) - 2 * torch.einsum("bi,bj->bij", v, v) / (v * v).sum(1)[:, None, None]
        A[:, k:, :] = H @ A[:, k:, :]
    O = haar_from_householder(torch.cat(vs, 1), d)
    Q, R = torch.linalg.qr(G)
    ref = Q * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1)).unsqueeze(-2)
    assert torch.allclose(O, ref, atol=1e-12, rtol=0)


def test_zero_vectors_give_a_rotation_not_nan():
    O = haar_from_householder(torch.zeros(2, 10, dtype=torch.float64), 4)
    assert torch.isfinite(O).all()
    assert torch.allclose(O @ O.transpose(1, 2), torch.eye(4, dtype=torch.float64).expand(2, 4, 4), atol=1e-15)


def test_haar_orthogonal_to_1e_12_and_its_moments(path):
    d, n = 6, 40_000
    O = haar_orthogonal(n, d, make_generator(seeds.StreamKey(seeds.ADHOC, 17)), dtype=torch.float64)
    assert (O @ O.transpose(1, 2) - torch.eye(d, dtype=torch.float64)).abs().max() < 1e-12
    assert (O.transpose(1, 2) @ O - torch.eye(d, dtype=torch.float64)).abs().max() < 1e-12
    # every entry: E O_ij = 0, E O_ij^2 = 1/d, E O_ij^4 = 3/(d(d+2)); tolerance 5 SE of each mean
    E = {1: 0.0, 2: 1 / d, 4: 3 / (d * (d + 2))}
    for p, want in E.items():
        v = O.pow(p)
        mean, se = v.mean(0), v.std(0) / math.sqrt(n)
        assert ((mean - want).abs() < 5 * se).all(), (p, mean, want)
    # rows are unit vectors on the sphere: O_ij^2 ~ Beta(1/2, (d-1)/2) for every (i, j); KS on a few
    for i, j in ((0, 0), (d - 1, d - 1), (2, 4), (d - 1, 0)):
        assert stats.kstest(O[:, i, j].pow(2).numpy(), stats.beta(0.5, (d - 1) / 2).cdf).pvalue > 1e-4, (i, j)
    # and the sign of an entry is a fair coin independent of the others' magnitudes
    assert abs((O[:, d - 1, d - 1] > 0).double().mean().item() - 0.5) < 5 * 0.5 / math.sqrt(n)


def test_inputs_are_gaussian_in_each_contexts_frame(path):
    """O^T x / sqrt(lambda) ~ N(0, I): moments (5 SE) and a KS test."""
    d, P, B = 8, 16, 4000
    ctx = sample_contexts(B, d, P, 1.0, 0.5, "difficult", 2, make_generator(21), dtype=torch.float64)
    lam = spectrum(d, 1.0, torch.float64)
    z = (torch.einsum("bij,bpi->bpj", ctx.O_Bxdxd, ctx.X_BxPxd) / lam.sqrt()).reshape(-1, d)
    n = z.shape[0]
    assert (z.mean(0).abs() < 5 / math.sqrt(n)).all()
    assert ((z.var(0) - 1).abs() < 5 * math.sqrt(2 / n)).all()
    assert ((z.pow(4).mean(0) - 3).abs() < 5 * math.sqrt(96 / n)).all()
    assert stats.kstest(z[:, 3].numpy(), "norm").pvalue > 1e-4
    zb = torch.einsum("bij,bi->bj", ctx.O_Bxdxd, ctx.beta_Bxd) / spectrum(d, 0.5, torch.float64).sqrt()
    assert stats.kstest(zb.reshape(-1).numpy(), "norm").pvalue > 1e-4


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_top_k_target_equals_a_sort_based_reference(dtype, path):
    B, d, P, k = 3000, 6, 20, 5
    c = sample_contexts(B, d, P, 0.5, 1.0, "difficult", k, make_generator(8), dtype=torch.float64)
    s = torch.einsum("bpd,bd->bp", c.X_BxPxd, c.xq_Bxd) / (c.X_BxPxd.norm(dim=-1) * c.xq_Bxd.norm(dim=-1)[:, None])
    ref = torch.argsort(s, dim=1, descending=True)[:, :k]
    assert torch.equal(c.sel_Bxk, ref)
    assert torch.allclose(c.ystar_B, torch.gather(c.y_BxP, 1, ref).mean(1), rtol=1e-12, atol=1e-12)
    assert torch.allclose(c.t_Bxd, torch.gather(c.X_BxPxd, 1, ref[..., None].expand(-1, -1, d)).mean(1), atol=1e-12)
    # the float32 contexts are the float64 ones rounded, with the same selection
    c32 = sample_contexts(B, d, P, 0.5, 1.0, "difficult", k, make_generator(8), dtype=dtype)
    assert torch.equal(c32.sel_Bxk, c.sel_Bxk) and torch.equal(c32.X_BxPxd, c.X_BxPxd.to(dtype))


def test_easy_index_is_uniform_and_the_query_is_the_matched_input(path):
    B, P = 20_000, 9
    c = sample_contexts(B, 3, P, 0.0, 0.0, "easy", 1, make_generator(2), dtype=torch.float64)
    assert torch.equal(c.xq_Bxd, c.X_BxPxd[torch.arange(B), c.sel_Bxk[:, 0]])
    assert stats.chisquare(np.bincount(c.sel_Bxk[:, 0].numpy(), minlength=P)).pvalue > 1e-4


def test_draws_are_a_function_of_the_context_index():
    key = seeds.step_seed(2, 2)
    a = draws_torch(key, 0, 10, 4, 5, "difficult", True)
    b = draws_torch(key, 6, 4, 4, 5, "difficult", True)
    for x, y in zip(a, b):
        if x is not None:
            assert torch.equal(x[6:], y)
    g = philox.gaussians(key.seed, key.kind, key.step, np.arange(6, 10), philox.TEACHER, 4)
    assert torch.equal(a[3][6:], torch.from_numpy(g))


# ---- the fused sampler (csrc/sampler.cpp) against the torch path ----

@needs_kernel
def test_fused_philox_known_answers_and_words():
    from test_philox import KAT

    ops = kernels.fused_ops()
    for ctr, key, out in KAT:
        assert tuple(ops.philox4x32_10(torch.tensor([ctr]), *key)[0].tolist()) == out
    rng = np.random.default_rng(1)
    ctr = rng.integers(0, 2**32, size=(5000, 4), dtype=np.uint64)
    ref = np.stack(philox.philox4x32_10(*ctr.T, 0x12345678, 0x9ABCDEF0), axis=1).astype(np.int64)
    got = ops.philox4x32_10(torch.from_numpy(ctr.astype(np.int64)), 0x12345678, 0x9ABCDEF0)
    assert torch.equal(got, torch.from_numpy(ref))


def _close(a, b, rel=1e-12):
    """Equal to rel of the tensor's scale (entries near zero compared on that scale)."""
    scale = a.abs().max().item() or 1.0
    return (a - b).abs().max().item() <= rel * scale


@needs_kernel
@pytest.mark.parametrize("d,task,noisy,clusters", [(16, "difficult", False, 0), (5, "easy", True, 0),
                                                    (8, "difficult", True, 4), (32, "easy", False, 0)])
def test_fused_draws_equal_the_torch_draws(d, task, noisy, clusters):
    key, P, B = seeds.step_seed(12, 34), 24, 40
    ref = draws_torch(key, 100, B, d, P, task, noisy, clusters)
    got = kernels.fused_ops().sampler_draws(key.seed & 0xFFFFFFFF, key.seed >> 32, key.kind, key.step, 100, B, d, P,
                                            task == "difficult", noisy, P if task == "easy" else 0, clusters)
    for name, r, g in zip(("O", "zX", "zq", "zb", "zn", "j", "cls"), ref, got):
        if r is None:
            assert g.numel() == 0, name
        elif r.dtype == torch.int64:
            assert torch.equal(r, g), name  # the integers bit for bit
        else:
            assert g.shape == r.shape and _close(r, g), name


@needs_kernel
@pytest.mark.parametrize("task,k,noise,clusters", CASES)
def test_fused_contexts_equal_the_torch_contexts(task, k, noise, clusters, monkeypatch):
    args = (300, 16, 64, 1.0, 0.5, task, k)
    clear_draw_cache()
    fused = sample_contexts(*args, make_generator(seeds.step_seed(5, 6)), noise, torch.float64, clusters=clusters)
    monkeypatch.setattr(contexts, "_sampler_ops", lambda: None)
    clear_draw_cache()
    ref = sample_contexts(*args, make_generator(seeds.step_seed(5, 6)), noise, torch.float64, clusters=clusters)
    clear_draw_cache()
    assert torch.equal(fused.sel_Bxk, ref.sel_Bxk)
    for f in FIELDS:
        if f != "sel_Bxk":
            assert _close(getattr(ref, f), getattr(fused, f)), f


@needs_kernel
@pytest.mark.parametrize("d,P,task,k,noise,dtype", [(16, 64, "difficult", 2, 0.0, torch.float32),
                                                    (12, 20, "difficult", 3, 0.1, torch.float64),
                                                    (16, 30, "easy", 1, 0.0, torch.float32),
                                                    (32, 40, "difficult", 16, 0.0, torch.float64),
                                                    (8, 9, "easy", 1, 0.2, torch.float64)])
def test_the_one_pass_kernel_gives_the_two_calls_bits(d, P, task, k, noise, dtype):
    # sampler_contexts_keys (draws and transform per context, nothing cached) against sampler_draws then
    # sampler_transform: the same bits in every field and dtype, at one and at two threads
    before = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            out = []
            for cache in (True, False):
                clear_draw_cache()
                out.append(sample_contexts(37, d, P, 0.5, 1.0, task, k, make_generator(seeds.step_seed(3, 17)), noise,
                                           dtype, cache_draws=cache))
            _equal(*out)
            assert all(getattr(out[1], f).dtype == getattr(out[0], f).dtype for f in FIELDS)
    finally:
        torch.set_num_threads(before)
        clear_draw_cache()


def test_a_training_batch_of_one_spectrum_per_seed_is_not_cached(monkeypatch):
    # step_batches: a seed whose draws serve two spectra caches them; a seed with one spectrum does not
    from depthscale.train import trainer
    from depthscale.config.run import make_config

    calls = []
    monkeypatch.setattr(trainer, "sample_for", lambda c, B, g, dev, cache_draws: calls.append((c.seed, cache_draws)))
    cfgs = [make_config("smoke", model="nonlinear", seed=s, a=a) for s, a in ((0, 0.0), (0, 1.0), (1, 0.0))]
    trainer.step_batches(cfgs, [0, 1, 2], 5, "cpu")
    assert sorted(calls) == [(0, True), (0, True), (1, False)]


# Statistics of the difficult task at d = 16, P = 64, k = 4, a = 1, b = 0.5 on the OLD stream
# (torch.Generator + LAPACK QR, the sampler before issue 35; 40,000 evaluation contexts of seed
# 123457, measured once with that code): mean and its SE. The floors (linear_floor, softmax_floor,
# theory) draw their own Monte Carlo in the eigenbasis and cannot read the context stream (they sit
# below contexts in the layer contract), so their numbers are unchanged bit for bit; these are the
# numbers a floor is a function of, on the stream itself.
OLD_STREAM = {"ystar2": (1.759717, 0.015409), "cos1": (0.656151, 0.000527), "resid": (0.750755, 0.006578),
              "t2": (2.255553, 0.004971)}


def test_task_statistics_match_the_old_stream_within_their_se():
    n, chunk = 20_000, 2_000
    acc = {k: [] for k in OLD_STREAM}
    gen = make_generator(123457)
    for _ in range(n // chunk):
        c = sample_contexts(chunk, 16, 64, 1.0, 0.5, "difficult", 4, gen, dtype=torch.float64)
        q = c.xq_Bxd / c.xq_Bxd.norm(dim=-1, keepdim=True)
        xs = c.X_BxPxd / c.X_BxPxd.norm(dim=-1, keepdim=True)
        acc["cos1"].append(torch.einsum("bpd,bd->bp", xs, q).max(1).values)
        acc["ystar2"].append(c.ystar_B ** 2)
        acc["resid"].append((c.ystar_B - (c.beta_Bxd * c.xq_Bxd).sum(-1)) ** 2)  # what x_test alone misses
        acc["t2"].append(c.t_Bxd.pow(2).sum(-1))
    for k, (old, old_se) in OLD_STREAM.items():
        v = torch.cat(acc[k])
        se = v.std().item() / math.sqrt(len(v))
        assert abs(v.mean().item() - old) < 4 * math.hypot(se, old_se), (k, v.mean().item(), old)


def _fma(a: float, b: float, c: float) -> float:
    """a b + c rounded once (exact rationals; int / int is correctly rounded)."""
    from fractions import Fraction
    return float(Fraction(a) * Fraction(b) + Fraction(c))


@needs_kernel
@pytest.mark.parametrize("d", [8, 12, 16, 32])
def test_the_kernels_labels_are_the_streams_chain_of_products(d):
    # y_p = sum_i X_pi beta_i in order of i, then + noise zn_p: the kernel's labels are fused
    # multiply-adds at d = 8 and 16 and a rounded product then a rounded sum at other d (what the
    # compiler made of the first kernel, now written out), the noise a fused multiply-add at every d
    # -- computed here exactly, element by element, so that an optimisation changing them fails
    ops = kernels.fused_ops()
    B, P, noise = 3, 9, 0.3
    O, zX, zq, zb, zn, j, _ = ops.sampler_draws(3, 5, 1, 7, 0, B, d, P, True, True, 0, 0)
    sl, so = spectrum(d, 1.0, torch.float64).sqrt(), spectrum(d, 0.5, torch.float64).sqrt()
    X, y, _, _, _, _, beta = ops.sampler_transform(O, zX, zq, zb, zn, j, sl, so, noise, 2, False)
    fused = d in (8, 16)
    for b in range(B):
        for p in range(P):
            acc = 0.0
            for i in range(d):
                x, w = float(X[b, p, i]), float(beta[b, i])
                acc = _fma(x, w, acc) if fused else acc + x * w
            assert float(y[b, p]) == _fma(noise, float(zn[b, p]), acc), (b, p)


@needs_kernel
@pytest.mark.parametrize("task,k,noise,dtype", [("difficult", 2, 0.0, torch.float32), ("easy", 1, 0.1, torch.float32),
                                               ("difficult", 3, 0.0, torch.float64)])
def test_streams_drawn_in_one_call_are_each_streams_own_contexts(task, k, noise, dtype):
    from depthscale.config.run import make_config
    from depthscale.data.contexts import joined, sample_for, sample_streams

    cfg = make_config("smoke", model="nonlinear", task=task, k=k, noise=noise, a=1.0, b=0.5)
    keys = [seeds.step_seed(s, 7) for s in (0, 3, 11)]
    together = sample_streams(cfg, keys, 24, dtype)
    for key, ctx in zip(keys, together):
        clear_draw_cache()
        alone = sample_for(cfg, 24, make_generator(key), dtype=dtype, cache_draws=False)
        _equal(ctx, alone)
    X = joined([c.X_BxPxd for c in together])  # the whole batch, a view of the kernel's one buffer
    assert X.data_ptr() == together[0].X_BxPxd.data_ptr()
    assert torch.equal(X, torch.cat([c.X_BxPxd for c in together]))
    swapped = joined([together[1].X_BxPxd, together[0].X_BxPxd])  # not in buffer order: a copy
    assert swapped.data_ptr() != together[1].X_BxPxd.data_ptr()
    assert torch.equal(swapped, torch.cat([together[1].X_BxPxd, together[0].X_BxPxd]))
    assert sample_streams(cfg, [keys[0], seeds.StreamKey(seeds.EVAL, 5)], 4) is None  # two kinds: not one call
