"""The fused CPU test-row kernel (depthscale.data.kernels, csrc/test_row.cpp) against an independent
float64 computation of the same formula and against the torch path it replaces in training."""

import math
import shutil

import pytest
import torch

from depthscale.config.run import make_config
from depthscale.data import kernels
from depthscale.kinds.lookup import build_pack
from depthscale.kinds.ops import RowReadout
from depthscale.train.optim import RowAdam
from depthscale.train.schedule import base_lrs
from depthscale.train.trainer import train_step

needs_kernel = pytest.mark.skipif(not kernels.enabled(), reason="DEPTHSCALE_FUSED=0 turns the kernel off")


def test_kernel_builds_where_a_compiler_is():
    # CI and this machine have g++: the kernel must build there, or training silently runs slower
    if shutil.which("g++") is None or not kernels.enabled():
        pytest.skip("no g++ (or DEPTHSCALE_FUSED=0): the torch path runs, tested elsewhere")
    st = kernels.status()
    assert st["available"], st["error"]


def _inputs(B=5, T=7, d=16, P=64, G=3, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(B, T, d, generator=g) * scale
    X = torch.randn(B, P, d, generator=g)
    rc = torch.rand(B, G, P, generator=g) + 0.5
    y = torch.randn(B, P, generator=g)
    owner = torch.sort(torch.randint(0, G, (T,), generator=g)).values
    return u, X, rc, y, owner


def _reference(u, X, rc, y, owner):
    """py in float64, straight from the definition: s_ti = rc_{owner t, i} u_t . x_i."""
    s = torch.einsum("btd,bpd->btp", u, X) * rc[:, owner]
    return (torch.softmax(s, -1) * y.unsqueeze(1)).sum(-1)


@pytest.fixture(params=[16, 8])
def lanes(request):
    """The test row's vectors of 16 lanes (where the CPU has AVX-512; else 8 anyway) and of 8:
    both forms are checked on every machine that builds both."""
    ops = kernels.fused_ops()
    before = ops.lanes(request.param)
    yield request.param
    ops.lanes(before)


@needs_kernel
# (16, 64) and (8, 16) take the register kernel (rows in pairs: odd T leaves one alone; sorted owners
# give pairs of one model and of two); (16, 128) the compile-time loop kernel; the rest the generic one
@pytest.mark.parametrize("shape", [dict(), dict(B=3, T=5, d=8, P=16, G=2), dict(B=2, T=4, d=16, P=128, G=2),
                                   dict(B=3, T=1, d=5, P=13, G=1), dict(B=2, T=9, d=32, P=100, G=4)])
def test_forward_and_gradients_match_float64(shape, lanes):
    u, X, rc, y, owner = _inputs(**shape)
    leaves32 = [t.clone().requires_grad_() for t in (u, X, rc, y)]
    leaves64 = [t.double().requires_grad_() for t in (u, X, rc, y)]
    py32 = kernels.FusedTestRow.apply(*leaves32, owner)
    py64 = _reference(*leaves64, owner)
    # float32 rounding of P-term sums of O(1) terms: a few ulp of the largest term
    tol = 50 * torch.finfo(torch.float32).eps
    assert torch.allclose(py32.double(), py64, rtol=tol, atol=tol * py64.abs().max().item())
    w = torch.randn(py64.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (py32 * w.float()).sum().backward()
    (py64 * w).sum().backward()
    for a, b, name in zip(leaves32, leaves64, ("u", "X", "rc", "y")):
        err = (a.grad.double() - b.grad).abs().max().item()
        assert err <= 200 * torch.finfo(torch.float32).eps * b.grad.abs().max().item(), (name, err)


@needs_kernel
def test_matches_the_torch_path_and_skips_unneeded_grads():
    u, X, rc, y, owner = _inputs(B=4, T=6, G=2, seed=3)
    bounds = [(int((owner < g).sum()), int((owner <= g).sum())) for g in range(2)]
    a = [u.clone().requires_grad_(), X, rc.clone().requires_grad_(), y]
    b = [u.clone().requires_grad_(), X, rc.clone().requires_grad_(), y]
    py_f = kernels.FusedTestRow.apply(*a, owner)
    py_t, _ = RowReadout.apply(*b, bounds)
    assert torch.allclose(py_f, py_t, rtol=1e-5, atol=1e-6)
    py_f.sum().backward()
    py_t.sum().backward()
    for i in (0, 2):
        assert torch.allclose(a[i].grad, b[i].grad, rtol=1e-4, atol=1e-6)


@needs_kernel
def test_extreme_scores_and_nan():
    # scores of +-1e3 (one weight ~1, the rest underflow): still the float64 answer; a NaN in one
    # context's query stays in that context's rows
    u, X, rc, y, owner = _inputs(B=3, T=4, G=2, seed=5, scale=60.0)
    py = kernels.FusedTestRow.apply(u, X, rc, y, owner)
    ref = _reference(u.double(), X.double(), rc.double(), y.double(), owner)
    # float32 scores carry an absolute error of a few eps |s|; a weight's relative error is that
    s_max = (torch.einsum("btd,bpd->btp", u, X) * rc[:, owner]).abs().max().item()
    assert s_max > 500
    tol = 4 * torch.finfo(torch.float32).eps * s_max * y.abs().max().item()
    assert (py.double() - ref).abs().max().item() <= tol
    u[1, 2, 0] = math.nan
    py = kernels.FusedTestRow.apply(u, X, rc, y, owner)
    assert torch.isnan(py[1, 2]) and torch.isfinite(py[[0, 2]]).all() and torch.isfinite(py[1, [0, 1, 3]]).all()


def _pack(seed_list=(0, 1)):
    cfgs = [make_config("smoke", model="nonlinear", task="difficult", k=2, a=0.0, b=0.5, L=L, seed=s)
            for s in seed_list for L in (1, 3)]
    return cfgs, build_pack(cfgs)


@needs_kernel
def test_training_steps_same_with_and_without_the_kernel(monkeypatch):
    # the engine's losses and parameters after a few steps: fused path against the torch path
    runs = {}
    for fused in (True, False):
        monkeypatch.setattr(kernels, "use_fused", (lambda X: True) if fused else (lambda X: False))
        cfgs, pack = _pack()
        opt = RowAdam(pack)
        lr0 = base_lrs(cfgs)
        idx = list(range(len(cfgs)))
        losses = [train_step(pack, opt, cfgs, idx, step, lr0, "cpu")[0] for step in range(4)]
        runs[fused] = (torch.stack(losses), {k: v.detach().clone() for k, v in pack.state_dict().items()})
    assert torch.allclose(runs[True][0], runs[False][0], rtol=1e-4)
    for k, v in runs[True][1].items():
        assert torch.allclose(v, runs[False][1][k], rtol=1e-3, atol=1e-5), k


def test_off_switch_falls_back(monkeypatch):
    monkeypatch.setenv("DEPTHSCALE_FUSED", "0")
    assert kernels.fused_ops() is None and not kernels.use_fused(torch.zeros(1, 1, 1))
    cfgs, pack = _pack((0,))
    from depthscale.data.contexts import make_generator, sample_for

    ctx = sample_for(cfgs[0], 8, make_generator(0))
    f, p = pack.ensemble_forward(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, [0, 1], need_p=False)
    f2, p2 = pack.ensemble_forward(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, [0, 1])
    assert p is not None and torch.equal(f, f2)  # the torch path: p comes back anyway


@needs_kernel
@pytest.mark.parametrize("d,N,G,P", [(16, 16, 3, 64), (16, 16, 7, 64), (8, 8, 1, 16), (5, 7, 2, 13)])
def test_test_scales_match_float64_and_the_torch_path(d, N, G, P):
    # rcq_bgi = rc_bgi rq_bg with r = 1/rms(W_x^g x) computed as (x^T M_g x / N + eps)^(-1/2),
    # M_g = W_x^gT W_x^g, written B x G x P
    from depthscale.kinds.base import RMS_EPS
    from depthscale.kinds.ops import RmsScale

    g = torch.Generator().manual_seed(7)
    B = 5
    X, xq = torch.randn(B, P, d, generator=g), torch.randn(B, d, generator=g)
    Wx = (torch.randn(G, N, d, generator=g) / math.sqrt(d)).requires_grad_()
    Wx64 = Wx.detach().double().requires_grad_()
    rcq = kernels.FusedTestScales.apply(X, xq, torch.bmm(Wx.transpose(1, 2), Wx), N, RMS_EPS)
    rc64 = torch.rsqrt(torch.einsum("bpd,gnd->bgpn", X.double(), Wx64).pow(2).mean(-1) + RMS_EPS)
    rq64 = torch.rsqrt(torch.einsum("bd,gnd->bgn", xq.double(), Wx64).pow(2).mean(-1) + RMS_EPS)
    rcq64 = rc64 * rq64.unsqueeze(-1)
    WxT = Wx.detach().reshape(G * N, d).T.contiguous()
    rc_t = RmsScale.apply(X.reshape(B * P, d), WxT, N).view(B, P, G).transpose(1, 2)
    rcq_t = rc_t * RmsScale.apply(xq, WxT, N).unsqueeze(-1)
    eps32 = torch.finfo(torch.float32).eps
    assert rcq.shape == (B, G, P)
    assert (rcq.double() - rcq64).abs().max() <= 20 * eps32 * rcq64.abs().max()
    assert torch.allclose(rcq, rcq_t, rtol=1e-5)
    w = torch.randn(rcq.shape, generator=g, dtype=torch.float64)
    (rcq * w.float()).sum().backward()
    (rcq64 * w).sum().backward()
    err = (Wx.grad.double() - Wx64.grad).abs().max()
    assert err <= 200 * eps32 * Wx64.grad.abs().max(), err
    with pytest.raises(RuntimeError, match="no gradient for X"):
        M = torch.bmm(Wx.transpose(1, 2), Wx)
        kernels.FusedTestScales.apply(X.clone().requires_grad_(), xq, M, N, RMS_EPS).sum().backward()


# (the build's lock, taken over from a dead holder at once: tests/test_kernel_build.py)


@needs_kernel
@pytest.mark.parametrize("d", [16, 5, 1])
def test_haar_q_is_the_sign_fixed_qr(d):
    # Q of G = QR with diag(R) > 0: against torch.linalg.qr in float64 with the sign fix
    g = torch.Generator().manual_seed(11)
    G = torch.randn(200, d, d, generator=g)
    Q = kernels.fused_ops().haar_q(G)
    Q64, R64 = torch.linalg.qr(G.double())
    ref = Q64 * torch.sign(torch.diagonal(R64, dim1=-2, dim2=-1)).unsqueeze(-2)
    eps32 = torch.finfo(torch.float32).eps
    assert (Q.double() - ref).abs().max() <= 4 * eps32  # one rounding to float, for every entry
    eye = torch.eye(d, dtype=torch.float64)
    assert (Q.double().transpose(1, 2) @ Q.double() - eye).abs().max() <= 4 * d * eps32
    assert torch.allclose(Q.double() @ (Q.double().transpose(1, 2) @ G.double()), G.double(), atol=1e-5)


@needs_kernel
def test_haar_orthogonal_same_as_the_fused_samplers_rotations():
    from depthscale.base import seeds
    from depthscale.data.contexts import haar_orthogonal, make_generator

    key = seeds.StreamKey(seeds.ADHOC, 3)
    torch_path = haar_orthogonal(64, 16, make_generator(key), dtype=torch.float64)
    fused = kernels.fused_ops().sampler_draws(3, 0, seeds.ADHOC, 0, 0, 64, 16, 1, False, False, 0, 0)[0]
    assert (fused - torch_path).abs().max() <= 1e-13  # Householder in torch's order and the kernel's


def test_run_config_records_whether_the_fused_kernels_trained_it(tmp_path):
    import json

    from depthscale.store.store import Store
    from depthscale.train.training import run_pack

    cfgs = [make_config("smoke", model="nonlinear", task="difficult", k=2, a=0.0, b=0.0, L=1, seed=0, max_steps=3,
                        eval_every=3),
            make_config("smoke", model="linear", task="easy", k=1, a=1.0, b=1.0, L=1, seed=0, max_steps=3,
                        eval_every=3)]
    store = Store(tmp_path / "store")
    for c in cfgs:
        run_pack([c], store, "cpu", progress=False)
    docs = [json.loads((store.run_dir(c.run_id) / "config.json").read_text()) for c in cfgs]
    assert docs[0]["fused_cpu_kernels"] is (kernels.fused_ops() is not None)
    assert "fused_cpu_kernels" not in docs[1]  # the linear model has no fused path


def test_inputs_that_need_gradients_take_the_torch_path():
    # the fused scales give no gradient for X: ensemble_forward must not take them for such inputs
    cfgs, pack = _pack((0,))
    from depthscale.data.contexts import make_generator, sample_for

    ctx = sample_for(cfgs[0], 8, make_generator(0))
    X = ctx.X_BxPxd.clone().requires_grad_()
    f, _ = pack.ensemble_forward(X, ctx.y_BxP, ctx.xq_Bxd, [0, 1], need_p=False)
    f.sum().backward()
    assert X.grad is not None and torch.isfinite(X.grad).all() and X.grad.abs().sum() > 0


@needs_kernel
@pytest.mark.parametrize("N,d,depths", [(16, 16, (1, 2, 4)), (8, 8, (3,)), (7, 5, (2, 1))])
def test_layer_forms_and_gradients_match_float64(N, d, depths):
    g = torch.Generator().manual_seed(11)
    T, G = sum(depths), len(depths)
    Wq, Wk, Wx = torch.randn(T, N, N, generator=g), torch.randn(T, N, N, generator=g), torch.randn(G, N, d, generator=g)
    owner = torch.repeat_interleave(torch.arange(G), torch.tensor(depths))
    leaves32 = [t.clone().requires_grad_() for t in (Wq, Wk, Wx)]
    leaves64 = [t.double().requires_grad_() for t in (Wq, Wk, Wx)]
    E32 = kernels.FusedLayerForms.apply(*leaves32, owner)
    q, k, x = leaves64
    E64 = torch.einsum("tia,tib->tab", q @ x[owner], k @ x[owner])  # (W_q W_x)^T (W_k W_x), straight
    tol = 64 * torch.finfo(torch.float32).eps * E64.abs().max().item()
    assert (E32.double() - E64).abs().max().item() <= tol
    w = torch.randn(E64.shape, generator=g, dtype=torch.float64)
    (E32 * w.float()).sum().backward()
    (E64 * w).sum().backward()
    for a, b, name in zip(leaves32, leaves64, ("Wq", "Wk", "Wx")):
        err = (a.grad.double() - b.grad).abs().max().item()
        assert err <= 256 * torch.finfo(torch.float32).eps * b.grad.abs().max().item(), (name, err)


@needs_kernel
@pytest.mark.parametrize("d,P", [(16, 64), (5, 13)])
def test_strided_contexts_give_the_same_numbers_without_a_copy(d, P):
    # sampling's X and x_test are slices of one B x (P + 1) x d tensor: the kernels read them in
    # place (batch stride (P + 1) d) and give what they give on contiguous copies, bit for bit
    from depthscale.kinds.base import RMS_EPS

    g = torch.Generator().manual_seed(5)
    B, T, G, N = 4, 5, 2, 7
    X_all = torch.randn(B, P + 1, d, generator=g)
    X, xq = X_all[:, :P], X_all[:, P]
    assert not X.is_contiguous() and kernels._rows(X) is X and kernels._rows(xq) is xq
    Wx = torch.randn(G, N, d, generator=g).requires_grad_()
    u = torch.randn(B, T, d, generator=g).requires_grad_()
    y = torch.randn(B, P, generator=g)
    owner = torch.tensor([0, 0, 1, 1, 1])
    outs = []
    for Xi, xqi in ((X, xq), (X.contiguous(), xq.contiguous())):
        Wx.grad = u.grad = None
        rcq = kernels.FusedTestScales.apply(Xi, xqi, torch.bmm(Wx.transpose(1, 2), Wx), N, RMS_EPS)
        py = kernels.FusedTestRow.apply(u, Xi, rcq, y, owner)
        py.pow(2).sum().backward()
        outs.append((py.detach(), Wx.grad.clone(), u.grad.clone()))
    for a, b in zip(*outs):
        assert torch.equal(a, b)


@needs_kernel
@pytest.mark.parametrize("d,P,B", [(16, 64, 6), (5, 13, 3)])
def test_grouped_scales_are_the_blocks_scaled_apart(d, P, B):
    # M as K x G x d x d: block k of the K B contexts is scaled by its own M_k; the scales are
    # those of K separate calls bit for bit, d M_k to float rounding (per-thread partial sums)
    from depthscale.kinds.base import RMS_EPS

    g = torch.Generator().manual_seed(11)
    K, G, N = 3, 2, 7
    X, xq = torch.randn(K * B, P, d, generator=g), torch.randn(K * B, d, generator=g)
    Wx = torch.randn(K, G, N, d, generator=g)
    M = torch.einsum("kgnd,kgne->kgde", Wx, Wx).requires_grad_()
    w = torch.randn(K * B, G, P, generator=g)
    rcq = kernels.FusedTestScales.apply(X, xq, M, N, RMS_EPS)
    (rcq * w).sum().backward()
    assert rcq.shape == (K * B, G, P) and M.grad.shape == M.shape
    for k in range(K):
        Mk = M.detach()[k].clone().requires_grad_()
        part = slice(k * B, (k + 1) * B)
        rk = kernels.FusedTestScales.apply(X[part], xq[part], Mk, N, RMS_EPS)
        (rk * w[part]).sum().backward()
        assert torch.equal(rcq[part], rk)
        assert torch.allclose(M.grad[k], Mk.grad, rtol=1e-6, atol=1e-6 * Mk.grad.abs().max().item())
    with pytest.raises(RuntimeError, match="K equal blocks"):
        kernels.FusedTestScales.apply(X[:-1], xq[:-1], M.detach(), N, RMS_EPS)


@needs_kernel
@pytest.mark.parametrize("model", ["nonlinear", "layer_values"])
def test_seed_groups_in_one_call_change_no_number(model, monkeypatch):
    # pack_losses runs the seeds' equal blocks of models as one ensemble_forward (groups = K);
    # against one call per seed: the same losses bit for bit, the same gradients to float rounding
    # (d M_g sums its contexts in per-thread parts, and the threads split K B contexts, not B)
    from depthscale.train import trainer, training

    cfgs = [make_config("smoke", model=model, task="difficult", k=2, a=0.0, b=0.5, L=L, seed=s)
            for s in (0, 1, 2) for L in (1, 3)]
    pack = build_pack(cfgs)
    idx = list(range(len(cfgs)))
    batches = trainer.step_batches(cfgs, idx, 0, "cpu")
    out = {}
    for merged in (True, False):
        if not merged:
            monkeypatch.setattr(type(pack), "groups_of", lambda *a, **k: False)
        pack.zero_grad(set_to_none=True)
        losses = trainer.pack_losses(pack, cfgs, idx, batches)
        losses.sum().backward()
        out[merged] = (losses.detach(), {n: p.grad.clone() for n, p in pack.named_parameters()})
    assert torch.equal(out[True][0], out[False][0])
    for n, grad in out[True][1].items():
        torch.testing.assert_close(grad, out[False][1][n], rtol=1e-5, atol=1e-6 * grad.abs().max().item(), msg=n)
    monkeypatch.undo()
    ctx = batches[trainer.data_key(cfgs[0])]
    assert pack.groups_of(idx, 3, ctx.X_BxPxd) and not pack.groups_of(idx, 4, ctx.X_BxPxd)
    assert not pack.groups_of([0, 1, 3, 4], 2, ctx.X_BxPxd)  # not consecutive
    with pytest.raises(ValueError, match="groups = 3"):
        pack.ensemble_forward(ctx.X_BxPxd[:5], ctx.y_BxP[:5], ctx.xq_Bxd[:5], idx, need_p=False, groups=3)



@needs_kernel
def test_lanes_takes_8_or_16_and_says_what_it_had():
    ops = kernels.fused_ops()
    now = ops.lanes(0)
    assert now in (8, 16)
    assert ops.lanes(8) == now and ops.lanes(now) == 8
    with pytest.raises(RuntimeError, match="lanes must be 0 .ask., 8 or 16, got 4"):
        ops.lanes(4)


@needs_kernel
def test_scales_same_floats_in_either_vector_width():
    # lane by lane the same operations: the scales at 16 lanes (four models per block: G = 7 goes
    # four, two, one) and at 8 lanes (two per block) agree bit for bit
    from depthscale.kinds.base import RMS_EPS

    g = torch.Generator().manual_seed(3)
    X, xq = torch.randn(6, 64, 16, generator=g), torch.randn(6, 16, generator=g)
    Wx = torch.randn(7, 16, 16, generator=g) / 4
    M = torch.bmm(Wx.transpose(1, 2), Wx)
    ops = kernels.fused_ops()
    out = []
    for n in (16, 8):
        before = ops.lanes(n)
        try:
            out.append(kernels.FusedTestScales.apply(X, xq, M, 16, RMS_EPS))
        finally:
            ops.lanes(before)
    assert torch.equal(out[0], out[1])


def _grad_nodes(root) -> set[str]:
    seen, todo, names = set(), [root], set()
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.add(type(fn).__name__)
        todo.extend(f for f, _ in fn.next_functions)
    return names


@pytest.mark.parametrize("fused", [True, False])
def test_a_whole_pack_takes_its_parameters_without_slicing_and_the_same_gradients(monkeypatch, fused):
    # every model of the pack selected: the parameters themselves, not full slices (whose backward
    # copies each gradient into a zero tensor); the gradients equal a selection by slices bit for bit
    if fused and kernels.fused_ops() is None:
        pytest.skip("no C++ compiler: the fused kernels are not built")
    monkeypatch.setattr(kernels, "use_fused", (lambda X: True) if fused else (lambda X: False))
    from depthscale.data.contexts import make_generator, sample_for

    cfgs, pack = _pack((0, 1, 2))
    ctx = sample_for(cfgs[0], 12, make_generator(0))
    models = list(range(pack.M))
    grads = {}
    for whole in (True, False):
        if not whole:  # the same selection by (full-range) slices, as before the identity
            off = pack.offsets
            monkeypatch.setattr(pack, "_selectors", lambda ms, dev: ((lambda t: t[0:len(ms)]),
                                                                    (lambda t: t[off[0]:off[len(ms)]])))
        f, _ = pack.ensemble_forward(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, models, need_p=not fused)
        nodes = _grad_nodes(f.grad_fn)
        assert ("SliceBackward0" in nodes) == (not whole), nodes
        pack.zero_grad(set_to_none=True)
        f.square().sum().backward()
        grads[whole] = {n: p.grad.clone() for n, p in pack.named_parameters() if p.grad is not None}
    assert grads[True].keys() == grads[False].keys() and grads[True]
    for n, g in grads[True].items():
        assert torch.equal(g, grads[False][n]), n


@needs_kernel
def test_layer_forms_are_the_same_bits_at_any_thread_count():
    # the forms split their layers across threads (forward) and their models in chunks of about
    # equal layer counts (backward: one thread sums a model's dW_x): the same bits at 1, 2 and 3
    g = torch.Generator().manual_seed(3)
    depths = (1, 2, 4, 8, 16, 32, 64, 1, 2, 4, 8, 16, 32, 64)  # 250 layers: past the serial grain
    T, G, N, d = sum(depths), len(depths), 16, 16
    Wq, Wk, Wx = torch.randn(T, N, N, generator=g), torch.randn(T, N, N, generator=g), torch.randn(G, N, d, generator=g)
    owner = torch.repeat_interleave(torch.arange(G), torch.tensor(depths))
    dE = torch.randn(T, d, d, generator=g)
    ops, before, runs = kernels.fused_ops(), torch.get_num_threads(), []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            runs.append([ops.layer_forms_forward(Wq, Wk, Wx, owner), *ops.layer_forms_backward(dE, Wq, Wk, Wx, owner)])
    finally:
        torch.set_num_threads(before)
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b)


@needs_kernel
def test_test_row_and_scales_are_the_same_bits_at_any_thread_count():
    # the test row and the scales hand out chunks of contexts to whichever thread is free
    # (csrc/parallel.h balanced_for): each context computed by one thread alone, so the same bits at
    # 1, 2 and 3 threads whatever order the chunks were taken in
    u, X, rc, y, owner = _inputs(B=70, T=9, G=3)
    g = torch.Generator().manual_seed(4)
    dpy, xq, M = torch.randn(70, 9, generator=g), torch.randn(70, 16, generator=g), torch.randn(3, 16, 16, generator=g)
    M = M @ M.transpose(1, 2)
    ops, before, runs = kernels.fused_ops(), torch.get_num_threads(), []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            py, lse = ops.test_row_forward(u, X, rc, y, owner)
            back = ops.test_row_backward(dpy, u, X, rc, y, owner, py, lse, True, True)
            runs.append([py, lse, *back, *ops.test_scales_forward(X, xq, M, 16, 1e-6)])
    finally:
        torch.set_num_threads(before)
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b)


@needs_kernel
def test_the_monitor_without_attention_rows_gives_the_monitor_with_them(monkeypatch):
    # issue 50: the monitor runs a set's models at once through the kind's joint forward
    # (Nonlinear.measure_forward: the fused kernels, the rows only through their layer mean, and that
    # only where the top-1 mass reads it, k = 1); the same losses to float32 rounding
    from depthscale.base import seeds
    from depthscale.data.measurements import eval_contexts, monitor
    from depthscale.kinds.base import ModelKind
    from depthscale.kinds.ensemble import Nonlinear

    for k in (2, 1):
        for model in ("nonlinear", "layer_values"):
            cfgs = [make_config("smoke", model=model, task="difficult", k=k, L=L, seed=s) for s in (0, 1) for L in (1, 3)]
            pack = build_pack(cfgs)
            ctx = eval_contexts(cfgs[0], 300, seeds.monitor_seed(cfgs[0].eval_seed), chunk=128, hold=True)
            calls = []
            real = Nonlinear.measure_forward
            monkeypatch.setattr(Nonlinear, "measure_forward", lambda self, models, *a, **kw: calls.append(
                (list(models), kw["mean_row"], kw["weights"])) or real(self, models, *a, **kw))
            fast = monitor(pack, [0, 1, 2, 3], lambda m: ctx)
            monkeypatch.setattr(Nonlinear, "measure_forward", ModelKind.measure_forward)  # model by model,
            monkeypatch.setattr(Nonlinear, "monitor_forward", ModelKind.monitor_forward)  # the rows and all
            slow = monitor(pack, [0, 1, 2, 3], lambda m: ctx)
            monkeypatch.undo()
            # one joint forward per slice (128, 128, 44 contexts), all four models, the mean row at k = 1 only
            assert calls == [([0, 1, 2, 3], k == 1, False)] * 3
            for m in range(4):
                for key in ("R", "R_se", "A", "C"):
                    if math.isfinite(slow[m][key]):
                        assert fast[m][key] == pytest.approx(slow[m][key], rel=1e-5), (model, m, k, key)
                assert math.isfinite(fast[m]["top1_mass"]) == (k == 1)
                if k == 1:
                    assert fast[m]["top1_mass"] == pytest.approx(slow[m]["top1_mass"], rel=1e-6)


def test_a_subclass_with_its_own_forward_model_keeps_it_in_the_monitor():
    from depthscale.kinds.ensemble import Nonlinear

    class Doubled(Nonlinear):
        def forward_model(self, m, X, y, xq):
            out = super().forward_model(m, X, y, xq)
            return type(out)(2 * out.y_hat_B, 2 * out.f_BxL, out.p_BxLxP)

    cfg = make_config("smoke", model="nonlinear", task="difficult", k=2, L=2)
    pack = build_pack([cfg])
    pack.__class__ = Doubled
    from depthscale.data.contexts import make_generator, sample_for

    ctx = sample_for(cfg, 8, make_generator(0))
    got = pack.monitor_forward([0], lambda m: (ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd), False)[0]
    want = Nonlinear.forward_model(pack, 0, ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)
    assert torch.allclose(got.y_hat_B, 2 * want.y_hat_B)
    # nor does the evaluation's joint forward replace it: measurements then runs its forward
    assert pack.measure_forward([0], ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, mean_row=True, weights=True) is None
    from depthscale.data.measurements import monitor, slice_outputs

    assert torch.allclose(slice_outputs(pack, [0], ctx, weights=False)[0].y_hat_B, 2 * want.y_hat_B)
    R = monitor(pack, [0], lambda m: [ctx])[0]["R"]
    assert R == pytest.approx((2 * want.y_hat_B - ctx.ystar_B).double().pow(2).mean().item(), rel=1e-6)


# --------------------------------------------------------------------------- the evaluation's row sums (issue 50)

@needs_kernel
@pytest.mark.parametrize("shape", [dict(), dict(B=3, T=5, d=8, P=16, G=2), dict(B=2, T=4, d=16, P=128, G=2),
                                   dict(B=3, T=1, d=5, P=13, G=1), dict(B=2, T=9, d=32, P=100, G=4)])
def test_the_row_sums_are_the_rows_summed_by_model(shape, lanes):
    # S[b, c, g] = sum_{t of model g} coef[c, t] p_bt against the rows in float64; a model without
    # layers (random owners leave some) gets zeros; py is the training forward's, bit for bit
    u, X, rc, y, owner = _inputs(**shape)
    B, T, P, G = u.shape[0], u.shape[1], X.shape[1], rc.shape[1]
    coef = torch.randn(3, T, generator=torch.Generator().manual_seed(7))
    py, S = kernels.test_row_sums(u, X, rc, y, owner, coef)
    assert torch.equal(py, kernels.FusedTestRow.apply(u, X, rc, y, owner))
    p = torch.softmax(torch.einsum("btd,bpd->btp", u.double(), X.double()) * rc.double()[:, owner], -1)
    want = torch.zeros(B, 3, G, P, dtype=torch.float64)
    for t in range(T):
        want[:, :, owner[t]] += coef[:, t].double().view(1, 3, 1) * p[:, t].unsqueeze(1)
    tol = 50 * torch.finfo(torch.float32).eps
    assert S.shape == (B, 3, G, P)
    assert torch.allclose(S.double(), want, rtol=tol, atol=tol * coef.abs().max().item())
    _, none = kernels.test_row_sums(u, X, rc, y, owner, coef[:0])
    assert none.shape == (B, 0, G, P)


def _joint_pack(model: str, loop: int = 0):
    from depthscale.data.contexts import make_generator, sample_for

    cfgs = [make_config("smoke", model=model, task="difficult", k=2, L=L, seed=s, qk_std=0.4, loop=loop)
            for s in (0, 1) for L in (2, 4)]
    pack = build_pack(cfgs)
    with torch.no_grad():  # gains away from their start, so that w is not the mean row times one number
        for prm in pack.parameters():
            prm.add_(0.3 * torch.randn(prm.shape, generator=torch.Generator().manual_seed(prm.numel())))
    return pack, sample_for(cfgs[0], 40, make_generator(0))


@needs_kernel
@pytest.mark.parametrize("model", ["nonlinear", "layer_values"])
def test_the_joint_evaluation_forward_is_each_models_forward(model):
    """Nonlinear.measure_forward (issue 50): f and y_hat those of each model's own fused forward, bit
    for bit; the mean row and the input weights those of the rows (label_weights) and of autograd."""
    pack, ctx = _joint_pack(model)
    X, y, xq = ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd
    models = [0, 2, 3]  # (not consecutive: the selectors' index_select)
    outs = pack.measure_forward(models, X, y, xq, mean_row=True, weights=True)
    for m, o in zip(models, outs):
        alone = pack.forward_model(m, X, y, xq, need_p=False)
        assert torch.equal(o.f_BxL, alone.f_BxL) and torch.equal(o.y_hat_B, alone.y_hat_B) and o.p_BxLxP is None
        rows = pack.forward_model(m, X, y, xq)
        assert torch.allclose(o.p_mean_BxP, rows.p_BxLxP.mean(1), rtol=1e-5, atol=1e-7)
        w_rows = pack.label_weights(m, rows)
        assert torch.allclose(o.w_BxP, w_rows, rtol=1e-5, atol=1e-6 * w_rows.abs().max().item())
        yg = y.clone().requires_grad_(True)
        with torch.enable_grad():
            (dw,) = torch.autograd.grad(pack.forward_model(m, X, yg, xq).y_hat_B.sum(), yg)
        assert torch.allclose(o.w_BxP, dw, rtol=1e-4, atol=1e-6 * dw.abs().max().item())
        # one gain per model (a shared W_v): w = g p_mean; per-layer values weigh each layer's row apart
        proportional = o.p_mean_BxP * (o.w_BxP.sum(1) / o.p_mean_BxP.sum(1)).unsqueeze(1)
        assert torch.allclose(o.w_BxP, proportional, rtol=1e-5, atol=1e-7) == (model == "nonlinear")
    only_w = pack.measure_forward(models, X, y, xq, mean_row=False, weights=True)
    neither = pack.measure_forward(models, X, y, xq, mean_row=False, weights=False)
    for o, a, b in zip(outs, only_w, neither):
        assert a.p_mean_BxP is None and torch.equal(a.w_BxP, o.w_BxP) and torch.equal(a.f_BxL, o.f_BxL)
        assert b.p_mean_BxP is None and b.w_BxP is None and torch.equal(b.f_BxL, o.f_BxL)
    # no joint path: a looped model whose rows are tiled, the torch path
    looped, lctx = _joint_pack(model, loop=2)
    assert looped.measure_forward([0, 1], lctx.X_BxPxd, lctx.y_BxP, lctx.xq_Bxd, mean_row=True, weights=True) is None
    assert pack.measure_forward(models, X.double(), y.double(), xq.double(), mean_row=True, weights=True) is None
