"""The speed work is correct: same work as the naive loop, FLOP count, pack == alone (no timings)."""

import math
import pytest
import torch

from depthscale.bench import naive
from depthscale.bench.machine import matmul_peak
from depthscale.bench.speed import bench, cpu_peak_memory, flops_per_step, run_packed, seed_groups, sweep_configs, sweep_flops
from depthscale.config.run import make_config
from depthscale.base.seeds import step_seed
from depthscale.data.contexts import make_generator, sample_contexts, sample_for
from depthscale.kinds.lookup import AttentionPack, build_pack
from depthscale.kinds.ops import RmsScale, RowReadout
from depthscale.train import checkpoint
from depthscale.train.memory import PeakMemory
from depthscale.train.optim import RowAdam
from depthscale.train.trainer import data_key, pack_losses, train_step
from depthscale.train.training import train_pack

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one thread is faster, and immune to a busy machine's thread contention."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def smoke_sweep(seeds=2, **over):
    return [make_config("smoke", model="nonlinear", task="difficult", k=2, L=L, seed=s, **over)
            for L in (1, 2, 4) for s in range(seeds)]


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_naive_loop_and_packed_engine_do_the_same_work(clip):
    """Same seed, same init, same contexts: the literal per-model loop with torch.optim.Adam and
    the packed engine give the same loss trajectory and the same parameters."""
    cfgs = smoke_sweep(grad_clip=clip)
    steps = 6
    packed = run_packed(cfgs, steps, 0, CPU)
    for i, cfg in enumerate(cfgs):
        model, losses = naive.train_naive(cfg, steps)
        assert torch.allclose(torch.tensor(losses), packed["losses"][:, i], rtol=2e-5, atol=1e-6)
    # parameters, for the last model (its pack rebuilt and retrained)
    pack = build_pack(cfgs)
    opt = RowAdam(pack)
    lr0 = torch.tensor([c.lr for c in cfgs])
    for step in range(steps):
        train_step(pack, opt, cfgs, list(range(len(cfgs))), step, lr0, "cpu")
    m = len(cfgs) - 1
    assert torch.allclose(model.Wx.detach(), pack.Wx[m].detach(), rtol=1e-4, atol=1e-6)
    assert torch.allclose(torch.stack(list(model.Wq)).detach(), pack.model_slice("Wq", m).detach(),
                          rtol=1e-4, atol=1e-6)


class FakeStore:
    def __init__(self):
        self.checkpoints, self.finished = {}, {}

    def save_checkpoint(self, run_id, data):
        self.checkpoints[run_id] = checkpoint.parse(data)[0]  # bytes: their format is train/checkpoint.py's

    def finish(self, run_id, metrics, curves, params=None):
        self.finished[run_id] = (metrics, curves)

    def start_curves(self, run_id, curves):  # the live curves (train_pack appends at each evaluation)
        pass

    def append_curves(self, run_id, rows):
        pass


def test_model_trained_in_a_pack_equals_model_trained_alone():
    cfgs = smoke_sweep(max_steps=24, checkpoint_every=20, eval_every=8, eval_contexts=256)
    packed = FakeStore()
    res_pack = train_pack(cfgs, store=packed, progress=False)
    for i, cfg in enumerate(cfgs):
        alone = FakeStore()
        res = train_pack([cfg], store=alone, progress=False)[0]
        assert res["R"] == pytest.approx(res_pack[i]["R"], rel=1e-4)
        assert alone.finished[cfg.run_id][1]["R"] == pytest.approx(packed.finished[cfg.run_id][1]["R"], rel=1e-4)
        pa, pb = alone.checkpoints[cfg.run_id]["params"], packed.checkpoints[cfg.run_id]["params"]
        for name in pa:
            assert torch.allclose(pa[name], pb[name], rtol=1e-4, atol=1e-6), name


@pytest.mark.parametrize("kind", ["nonlinear", "layer_values"])
def test_ensemble_forward_of_a_group_equals_each_model_alone(kind):
    ctx = sample_contexts(5, 4, 7, 0.5, 0.25, "difficult", 2, make_generator(0), dtype=torch.float64)
    pk = AttentionPack(kind, 4, 6, [3, 1, 2, 4], [0, 1, 2, 3], qk_std=0.5).double()
    models = [3, 0, 2]  # not contiguous, not in pack order
    f, p = pk.ensemble_forward(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, models)
    r0 = 0
    for m in models:
        out = pk(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, models=[m])[0]
        L = pk.depths[m]
        assert torch.allclose(f[:, r0:r0 + L], out.f_BxL, rtol=1e-12, atol=1e-12)
        assert torch.allclose(p[:, r0:r0 + L], out.p_BxLxP, rtol=1e-12, atol=1e-12)
        r0 += L


def test_hand_written_backwards_pass_gradcheck():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    X, W = r(10, 4).requires_grad_(), r(4, 15).requires_grad_()
    assert torch.autograd.gradcheck(lambda X, W: RmsScale.apply(X, W, 5), (X, W))
    u, Xc, y = r(2, 5, 3).requires_grad_(), r(2, 6, 3).requires_grad_(), r(2, 6).requires_grad_()
    rc = (torch.rand(2, 2, 6, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    bounds = [(0, 2), (2, 5)]
    f = lambda *a: RowReadout.apply(*a, bounds)  # noqa: E731
    assert torch.autograd.gradcheck(f, (u, Xc, rc, y))  # both outputs used
    assert torch.autograd.gradcheck(lambda *a: f(*a)[0], (u, Xc, rc, y))  # readout only (training)


def test_flop_count_matches_torch_counter_and_hand_count(monkeypatch):
    from torch.utils.flop_counter import FlopCounterMode

    from depthscale.data import kernels

    # torch's counter sees the torch path's matmuls (the fused kernel is opaque to it)
    monkeypatch.setattr(kernels, "use_fused", lambda X: False)
    cfgs = smoke_sweep()
    pack = build_pack(cfgs)
    batches = {data_key(c): sample_for(c, c.batch, make_generator(step_seed(c.seed, 0))) for c in cfgs}
    counter = FlopCounterMode(display=False)
    with counter:
        pack_losses(pack, cfgs, list(range(len(cfgs))), batches).sum().backward()
    assert counter.get_total_flops() == sweep_flops(cfgs)["total"]
    # hand count: one model, L = 1, d = N = 2, P = 3, B = 1
    # forward: scales 2*3*2*2 + 2*2*2 = 32; E 4*8 + 2*8 = 48; u 8, scores 12; readout 6;
    # gains 2*4 + 2*2 = 12  -> 118.  backward: 32 + 96 + 8 + 12 + 24 = 172
    assert flops_per_step("nonlinear", 2, 2, 3, 1, [[1]]) == {"forward": 118, "backward": 172, "total": 290}
    # fused: the test row's backward recomputes the scores (2BTdP = 12 more); the scales are
    # x^T M x from M's folded upper triangle for P + 1 = 4 tokens (2*4*(3 + 2) = 40, not the 32 of
    # X W_x^T) plus M = W_x^T W_x (2*2*4 = 16; backward 32)
    assert flops_per_step("nonlinear", 2, 2, 3, 1, [[1]], fused=True) == {"forward": 118 + 8 + 16,
                                                                          "backward": 172 + 12 + 8 + 32,
                                                                          "total": 366}


def test_a_nan_model_does_not_touch_the_others_in_its_group():
    """Models that share a batch run as one computation; a NaN in one must stay in its rows."""
    cfgs = smoke_sweep(seeds=1)  # one seed: one group
    runs = {}
    for poison in (False, True):
        pack = build_pack(cfgs)
        if poison:
            with torch.no_grad():
                pack.Wq[pack.offsets[1]].fill_(float("nan"))
        opt = RowAdam(pack)
        lr0 = torch.tensor([c.lr for c in cfgs])
        for step in range(3):
            losses, finite = train_step(pack, opt, cfgs, list(range(len(cfgs))), step, lr0, "cpu")
        runs[poison] = (pack, finite)
    assert runs[True][1].tolist() == [True, False, True]
    for m in (0, 2):
        for name in ("Wx", "Wq", "Wk", "Wv"):
            a, b = runs[True][0].model_slice(name, m).detach(), runs[False][0].model_slice(name, m).detach()
            assert torch.isfinite(a).all() and torch.allclose(a, b, rtol=1e-5, atol=1e-7), name


def test_sweep_work_is_the_fig6_depth_sweep():
    cfgs = sweep_configs("cpu")
    assert [c.L for c in cfgs[::3]] == [1, 2, 4, 8, 16, 32, 64]
    assert {(c.model, c.task, c.k, c.a, c.b, c.d, c.N, c.P, c.batch) for c in cfgs} == {
        ("nonlinear", "difficult", 2, 0.0, 0.0, 16, 16, 64, 256)}  # SPEC §1: the nonlinear geometry
    assert [len(g) for g in seed_groups(cfgs)] == [7, 7, 7]


def test_bf16_autocast_stays_within_tolerance_of_float32():
    cfgs = smoke_sweep(seeds=1)
    f32 = run_packed(cfgs, 6, 0, CPU, "float32")["losses"]
    bf16 = run_packed(cfgs, 6, 0, CPU, "bf16")["losses"]
    assert ((bf16 - f32).abs() / f32).max() < 0.03


def test_peak_memory_and_matmul_peak_report_sane_numbers():
    with PeakMemory(CPU) as mem:
        x = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
        torch.cuda.synchronize() if torch.cuda.is_available() else None
        import time

        time.sleep(0.05)
        del x
    assert mem.peak_bytes > 32 * 2**20
    pk = matmul_peak("cpu", n=128, repeats=2)
    assert pk["flops_per_s"] > 0 and pk["n"] == 128
    with pytest.raises(ValueError, match="tf32"):
        matmul_peak("cpu", "tf32", n=64)
    assert cpu_peak_memory("packed", "smoke", 1, steps=1) >= 0  # in a fresh process


def test_bench_reports_every_key_on_the_smoke_preset():
    out = bench("smoke", "cpu", steps=1, naive_steps=1, warmup=0, seeds=1, single=False, peak_size=256,
                memory=False, bandwidth_size=1 << 16)
    for key in ("step_s", "roofline_s", "roofline_ratio", "mem_bandwidth_bytes_per_s"):
        assert out[key] > 0
    assert out["roofline_ratio"] == pytest.approx(out["step_s"] / out["roofline_s"])
    assert out["step_s"] == out["packed_seconds_per_sweep_step"]
    for key in ("naive_steps_per_s", "packed_steps_per_s", "speedup", "flops_per_s",
                "peak_matmul_flops_per_s", "fraction_of_peak", "flops_per_step", "peak_memory_bytes",
                "naive_seconds_per_sweep_step", "packed_seconds_per_sweep_step", "work"):
        assert key in out
    assert out["speedup"] == pytest.approx(out["packed_steps_per_s"] / out["naive_steps_per_s"])
    assert out["same_work_loss_max_rel_diff"] < 1e-5
    assert out["naive_flops_per_step"] > out["flops_per_step"]
    lin = out["linear"]["L=4"]
    assert lin["models"] == 7 and lin["L"] == 4
    assert lin["speedup"] == pytest.approx(lin["one_at_a_time_seconds_per_step"] / lin["batched_seconds_per_step"])


def test_batched_linear_pack_does_the_same_work_as_one_at_a_time():
    """bench_linear times the same runs both ways: same losses step by step."""
    from depthscale.bench.speed import linear_configs, run_packed

    cfgs = linear_configs("smoke", L=2)
    dev = torch.device("cpu")
    together = run_packed(cfgs, 3, 0, dev)["losses"]
    for i in range(len(cfgs)):
        alone = run_packed(cfgs, 3, 0, dev, models=[i])["losses"][:, 0]
        assert torch.allclose(together[:, i], alone, rtol=1e-5)


def test_roofline_ops_count_the_flops_of_the_flop_formula_and_every_big_pass():
    """step_ops' matmul FLOPs of forward and backward equal flops_per_step's (less the tiny E_l and
    gains terms it leaves out); its bytes are at least the passes over the B x T x P scores; the
    roofline of each op is the larger of its two times."""
    from depthscale.bench.speed import flops_per_step
    from depthscale.bench.machine import mem_bandwidth
    from depthscale.bench.roofline import roofline, step_ops

    d, N, P, B, groups = 16, 16, 64, 256, [[1, 2, 4], [1, 2, 4]]
    ops = step_ops(d, N, P, B, groups, "difficult", n_params=1000)
    fl = flops_per_step("nonlinear", d, N, P, B, groups)
    T, G = 7, 3
    # left out: E_l and the gains (forward, and twice that backward), and the x_test scales
    small = len(groups) * (3 * (4 * T * N * N * d + 2 * T * d * d * N) + 3 * (2 * G * N * N + 2 * G * N)
                           + 2 * 2 * B * d * G * N)
    model = sum(o["flops"] for o in ops if o["phase"] in ("forward", "backward"))
    assert model == pytest.approx(fl["total"] - small, rel=1e-12)
    S = B * T * P * 4 * len(groups)
    assert sum(o["bytes"] for o in ops if o["phase"] != "sampling") > 10 * S
    r = roofline(ops, peak_flops=1e11, bandwidth=1e10)
    for o in r["ops"]:
        assert o["roofline_s"] == pytest.approx(max(o["flops"] / 1e11, o["bytes"] / 1e10))
    assert r["roofline_s"] >= max(r["flop_time_s"], r["byte_time_s"]) - 1e-15
    bw = mem_bandwidth("cpu", n=1 << 16, repeats=2)
    assert bw["bytes_per_s"] > 1e8 and bw["n"] == 1 << 16


def test_the_one_pass_sampler_row_is_the_two_calls_work_moving_only_its_outputs():
    """step_ops(one_pass=True): one sampling row with the FLOPs and transcendental calls of the draws'
    and the transform's rows together, and bytes of the float32 contexts it writes (X, y, x_test, t,
    β, y*, O), no float64 draws."""
    from depthscale.bench.roofline import SAMPLER_DRAWS, SAMPLER_ONE_PASS, SAMPLER_TRANSFORM, step_ops

    d, N, P, B, groups = 16, 16, 64, 32, [[1, 2], [4]]
    two = {o["op"]: o for o in step_ops(d, N, P, B, groups, "difficult", n_params=10)}
    one = {o["op"]: o for o in step_ops(d, N, P, B, groups, "difficult", n_params=10, one_pass=True)}
    assert SAMPLER_DRAWS not in one and SAMPLER_TRANSFORM not in one
    row, dr, tr = one[SAMPLER_ONE_PASS], two[SAMPLER_DRAWS], two[SAMPLER_TRANSFORM]
    assert row["flops"] == pytest.approx(dr["flops"] + tr["flops"])
    assert row["calls"] == pytest.approx({f: dr["calls"].get(f, 0) + tr["calls"].get(f, 0)
                                          for f in set(dr["calls"]) | set(tr["calls"])})
    out = len(groups) * (B * P * d + B * P + 3 * B * d + B + B * d * d)  # float32 elements written
    assert row["bytes"] == pytest.approx(4 * out)
    assert {k: v for k, v in one.items() if k != SAMPLER_ONE_PASS} == \
        {k: v for k, v in two.items() if k not in (SAMPLER_DRAWS, SAMPLER_TRANSFORM)}


@pytest.mark.parametrize("fused", [False, True])
def test_roofline_counts_each_transcendental_call_at_its_rate(fused):
    """Issue 29: the softmax's exponentials (forward, and again in the fused backward that recomputes
    the row) and Box-Muller's log/sqrt/sin/cos per pair of Gaussians are counted, and each op's time is
    max(FLOPs / peak + Σ calls / rate, bytes / bandwidth) — checked against a hand count."""
    from depthscale.bench.roofline import PHILOX_OPS_PER_WORD, SAMPLER_DRAWS, roofline, step_ops

    d, N, P, B, groups = 16, 16, 64, 32, [[1, 2, 4], [1, 8]]
    ops = step_ops(d, N, P, B, groups, "difficult", n_params=10, fused=fused)
    exps = sum(o["calls"].get("exp", 0) for o in ops)
    scores = sum(B * sum(g) * P for g in groups)  # one score per (context, layer, token)
    assert exps == (2 if fused else 1) * scores
    # the fused sampler's Gaussians: the Householder vectors (lengths d .. 1), the inputs and x_test, the teacher
    gauss = len(groups) * (B * sum(range(1, d + 1)) + B * (P + 1) * d + B * d)
    g_op = next(o for o in ops if o["op"] == SAMPLER_DRAWS)
    assert g_op["calls"] == {"log": gauss / 2, "sqrt": gauss / 2 + len(groups) * B * d, "sin": gauss / 2, "cos": gauss / 2}
    # the draws' FLOPs: O = H_1 ... H_d (reflection k, a vector of length d - k + 1, applied to d rows
    # costs 4 d (d - k + 1)) and Philox's integer work per word
    haar = len(groups) * B * sum(4 * d * (d - k + 1) for k in range(1, d + 1))
    assert g_op["flops"] == pytest.approx(haar + PHILOX_OPS_PER_WORD * gauss)
    rates = {"exp": 2e9, "log": 1e9, "sqrt": 4e9, "sin": 5e8, "cos": 5e8}
    r = roofline(ops, peak_flops=1e11, bandwidth=1e10, rates=rates)
    plain = roofline(ops, peak_flops=1e11, bandwidth=1e10)
    for o, q in zip(r["ops"], plain["ops"]):
        calls = sum(n / rates[f] for f, n in o["calls"].items())
        assert o["roofline_s"] == pytest.approx(max(o["flops"] / 1e11 + calls, o["bytes"] / 1e10))
        assert q["roofline_s"] == pytest.approx(max(o["flops"] / 1e11, o["bytes"] / 1e10))
    assert r["call_time_s"] == pytest.approx(sum(n / rates[f] for o in ops for f, n in o["calls"].items()))
    assert r["roofline_s"] > plain["roofline_s"]
    row = next(o for o in r["ops"] if "test row" in o["op"] or o["op"] == "softmax")
    assert row["call_s"] >= scores / 2e9 * (1 - 1e-12)


def test_transcendental_rates_are_measured_for_every_function():
    from depthscale.bench.machine import TRANSCENDENTALS, transcendental_rates

    r = transcendental_rates("cpu", n=4096, repeats=3)
    for fn in TRANSCENDENTALS:
        assert math.isfinite(r[fn]) and r[fn] > 1e6, (fn, r[fn])
    assert r["exp"] >= r["exp_torch"]


def test_run_packed_prefetching_changes_no_number(monkeypatch):
    """Off the CPU the bench prefetches the batches as training does; forced on here, the losses are
    those drawn on the spot, bit for bit (only when the drawing happens changes)."""
    cfgs = sweep_configs("smoke", 2)
    monkeypatch.setenv("DEPTHSCALE_PREFETCH", "1")
    ahead = run_packed(cfgs, 3, 1, torch.device("cpu"))
    monkeypatch.setenv("DEPTHSCALE_PREFETCH", "0")
    spot = run_packed(cfgs, 3, 1, torch.device("cpu"))
    assert ahead["prefetch"] and not spot["prefetch"]
    assert torch.equal(ahead["losses"], spot["losses"])


def _step_phases():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "step_phases.py"
    spec = importlib.util.spec_from_file_location("step_phases", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_step_phases_partition_the_step_and_refuse_bad_input(tmp_path, capsys):
    # benchmarks/step_phases.py: the trainer's four phases and what none covered make up the step (one
    # step: their sum is the step to rounding); a bad count or a tree without the package: exit 2
    sp = _step_phases()
    one = sp.measure(steps=1, threads=1)
    assert set(one) == set(sp.PHASES) and all(one[p] > 0 for p in sp.PHASES[:-1]) and one["unattributed"] >= 0
    assert math.isclose(one["step"], sum(one[p] for p in sp.PHASES[1:]), abs_tol=0.01)
    assert sp.main(["--steps", "0"]) == 2
    assert sp.main(["--ab", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--steps" in err[0] and str(tmp_path) in err[1]


def test_step_phases_times_the_sampling_alone(capsys):
    # --sampler: the step's batches alone (trainer.step_batches), and per context and thread
    sp = _step_phases()
    one = sp.measure_sampler(steps=2, threads=1)
    assert set(one) == {"sampling", "us_per_context_thread"} and one["sampling"] > 0
    assert math.isclose(one["us_per_context_thread"], one["sampling"] * 1e3 / 768, rel_tol=0.01)
    assert sp.main(["--sampler", "--steps", "1", "--threads", "1"]) == 0
    assert "us_per_context_thread" in capsys.readouterr().out
