"""The constructive start (qk_init = constructive, SPEC §3.4): each layer of a depth-L model starts as
one head of the best equal-weight stack of L cosine heads fitted on the run's monitor contexts."""

from __future__ import annotations

import pytest
import torch

from depthscale.base import seeds
from depthscale.config.run import ConfigError, make_config
from depthscale.data.measurements import eval_contexts, monitor
from depthscale.kinds.constructive import constructive_stack, monitor_moments
from depthscale.kinds.lookup import build_pack
from depthscale.theory.softmax_floor import best_stack_on, stack_moments

DEPTHS = (1, 2, 4)


def _cfgs(qk_std=0.0, **kw):
    return [make_config("smoke", model="nonlinear", task="difficult", qk_init="constructive", qk_std=qk_std, L=L,
                        monitor_contexts=768, **kw) for L in DEPTHS]


def _monitor_chunks(c):
    return eval_contexts(c, c.monitor_contexts, seeds.monitor_seed(c.eval_seed))


def _stack_loss_direct(chunks, taus, gain):
    """The stack's loss computed from the contexts directly (float64), not from the head moments."""
    err = []
    for ch in chunks:
        x, q, y = ch.X_BxPxd.double(), ch.xq_Bxd.double(), ch.y_BxP.double()
        cos = torch.einsum("bpd,bd->bp", x / x.norm(dim=-1, keepdim=True), q / q.norm(dim=-1, keepdim=True))
        pred = sum((torch.softmax(t * cos, -1) * y).sum(-1) for t in taus) * gain / len(taus)
        err.append((pred - ch.ystar_B.double()) ** 2)
    return torch.cat(err).mean().item()


def test_untrained_constructive_model_has_the_stack_loss_on_the_monitor_contexts():
    cfgs = _cfgs()
    pack = build_pack(cfgs)
    chunks = _monitor_chunks(cfgs[0])
    mon = monitor(pack, list(range(len(cfgs))), lambda m: chunks)
    for i, c in enumerate(cfgs):
        st = constructive_stack(c)
        assert len(st["temperatures"]) == c.L and st["gain"] > 0
        direct = _stack_loss_direct(chunks, st["temperatures"], st["gain"])
        assert st["R"] == pytest.approx(direct, rel=1e-9)  # moments path against the direct sum
        assert mon[i]["R"] == pytest.approx(st["R"], rel=2e-5)  # the model (float32) is the stack
    R = [constructive_stack(c)["R"] for c in cfgs]
    assert R[1] <= R[0] + 1e-12 and R[2] <= R[1] + 1e-12  # a 2L stack can repeat an L stack


def test_the_stack_is_written_as_a_model_setting():
    c = _cfgs()[2]
    pack = build_pack([c])
    st = constructive_stack(c)
    Wq, Wk, Wx = pack.Wq.detach().double(), pack.Wk.detach().double(), pack.Wx[0].detach().double()
    assert torch.allclose(Wx.T @ Wx, torch.eye(c.d, dtype=torch.float64), atol=1e-6)  # orthonormal W_x
    for l, tau in enumerate(st["temperatures"]):
        assert torch.allclose(Wq[l].T @ Wk[l], tau / c.N * torch.eye(c.N, dtype=torch.float64), atol=1e-5)
    g = (pack.Wo[0].double() @ pack.Wv[0].double() @ pack.Wy[0].double()).detach()
    assert float(g) == pytest.approx(st["gain"], rel=1e-5)


def test_L1_stack_is_the_best_single_head_by_brute_force():
    c = _cfgs()[0]
    mom = monitor_moments(c)
    G, h, T = mom["G"], mom["h"], mom["T"]
    best = min(T - max(h[j], 0) ** 2 / G[j, j] for j in range(len(h)))  # optimal gain per head
    assert best_stack_on(mom, 1)["R"] == pytest.approx(best, rel=1e-10)


def test_the_stack_is_fitted_on_the_monitor_set_not_the_evaluation_set():
    c = _cfgs()[1]
    mom = monitor_moments(c)
    cat = lambda ch, n: torch.cat([getattr(x, n) for x in ch])  # noqa: E731
    mc, ec = _monitor_chunks(c), eval_contexts(c, c.monitor_contexts, seeds.eval_stream_seed(c.eval_seed))
    on_mon = stack_moments(*(cat(mc, n) for n in ("X_BxPxd", "xq_Bxd", "y_BxP", "ystar_B")))
    on_eval = stack_moments(*(cat(ec, n) for n in ("X_BxPxd", "xq_Bxd", "y_BxP", "ystar_B")))
    assert mom["T"] == on_mon["T"] and (mom["h"] == on_mon["h"]).all()
    assert mom["T"] != on_eval["T"]


def test_noise_is_added_on_top_of_the_stack_and_bad_uses_are_refused():
    quiet, noisy = build_pack([_cfgs()[2]]), build_pack([_cfgs(qk_std=0.02)[2]])
    dq = (noisy.Wq - quiet.Wq).detach()
    assert dq.std().item() == pytest.approx(0.02, rel=0.1)
    with pytest.raises(ConfigError, match="qk_init"):
        make_config("smoke", model="linear", qk_init="constructive")
    with pytest.raises(ConfigError, match="qk_init"):
        make_config("smoke", model="nonlinear", task="easy", qk_init="constructive")


def test_copies_start_repeats_the_best_single_head_in_every_layer():
    """construct_heads = 1 (issue 48's probe): every layer starts as the best single head, so the
    untrained L-layer model has the single head's loss on the monitor contexts (brute force), not
    the L-stack's; a divisor of L only, and with the constructive start only."""
    one = _cfgs()[0]
    cfgs = [make_config("smoke", model="nonlinear", task="difficult", qk_init="constructive", qk_std=0.0, L=L,
                        monitor_contexts=768, construct_heads=1) for L in (2, 4)]
    single = constructive_stack(one)
    chunks = _monitor_chunks(one)
    mon = monitor(build_pack(cfgs), [0, 1], lambda m: chunks)
    for i, c in enumerate(cfgs):
        st = constructive_stack(c)
        assert st["temperatures"] == single["temperatures"] * c.L and st["gain"] == single["gain"]
        assert mon[i]["R"] == pytest.approx(_stack_loss_direct(chunks, single["temperatures"], single["gain"]), rel=2e-5)
        assert constructive_stack(_cfgs()[i + 1])["R"] < st["R"] - 1e-6  # the L-stack is a different, better start
    assert cfgs[0].run_id != make_config("smoke", model="nonlinear", task="difficult", qk_init="constructive",
                                         qk_std=0.0, L=2, monitor_contexts=768).run_id
    with pytest.raises(ConfigError, match="construct_heads"):
        make_config("smoke", model="nonlinear", task="difficult", qk_init="constructive", L=4, construct_heads=3)
    with pytest.raises(ConfigError, match="construct_heads"):
        make_config("smoke", model="nonlinear", task="difficult", L=2, construct_heads=1)
