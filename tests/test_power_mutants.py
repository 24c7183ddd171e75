"""depthscale.analysis.power, the conditions mutation testing found unchecked (issue 47, s19): the
vectorised fit (batch_fit, _lm, _model, _judge_fit) against fits.fit_power_law element by element,
from far starts, in other units and at the degeneracy rules' exact thresholds; criterion 11's rule
at its exact edges; how simulate, seeds_for, power_report and law_fit read what they are given.

Inputs here are chosen so that one condition decides: _judge_fit and _lm are also called directly,
with a Jacobian or a start picked so that a threshold, a rank or a step count is met exactly."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from depthscale.analysis import power
from depthscale.base.errors import InputError
from depthscale.theory.fits import ALPHA_MAX, fit_power_law

L = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)
LOGL = np.log(L)[None, :]
RAISE = {"over": "raise", "divide": "raise", "invalid": "raise"}  # np.errstate; underflow stays ignored


def z_test(threshold):
    return lambda Y: Y[:, 0] < threshold


def law(L0, c, alpha, depths=L):
    return L0 + c * np.asarray(depths, dtype=float) ** -alpha


# ---------------------------------------------------------------- batch_fit against fit_power_law

def test_batch_fit_agrees_with_fit_power_law_on_every_output_of_every_row():
    """Rows of different shapes and scales in one batch (a mutant mixing rows, or reading the
    wrong column or key, shows), one with no floor and one rising (alpha on its bound)."""
    rng = np.random.default_rng(12)
    shapes = [(2.0, 0.5, 0.9, 0.003), (1.0, 0.3, 1.4, 0.005), (0.2, 2.0, 0.5, 0.002), (2.075, 0.09, 1.0, 0.001),
              (0.01, 0.02, 1.2, 0.004), (40.0, 25.0, 0.8, 0.002), (1.0, 1.0, 0.7, 0.01)]
    rows = [law(a, b, g) * np.exp(s * rng.standard_normal(L.size)) for a, b, g, s in shapes]
    rows += [2.0 * L ** -0.3 * np.exp(0.002 * rng.standard_normal(L.size)), 2.0 + 0.01 * L / 64]
    R = np.array(rows)
    f = power.batch_fit(L, R, 1.0, 0.5)
    assert set(f) == {"L0", "c", "alpha", "alpha_se", "r2", "ok"}
    for i, row in enumerate(R):
        g = fit_power_law(L, row)
        assert bool(f["ok"][i]) == g.ok, (i, g.reason)
        if not g.ok:
            continue
        assert f["alpha"][i] == pytest.approx(g.alpha, rel=1e-7), i
        assert f["L0"][i] == pytest.approx(g.L0, rel=1e-7), i
        assert f["c"][i] == pytest.approx(g.c, rel=1e-7), i
        assert f["alpha_se"][i] == pytest.approx(g.alpha_se, rel=1e-6), i
        assert f["r2"][i] == pytest.approx(g.r2, abs=1e-12), i
    assert f["ok"].tolist() == [True] * 8 + [False]


def test_batch_fit_needs_four_depths_and_scales_its_se_by_the_one_dof_left():
    rng = np.random.default_rng(8)
    L4 = np.array([1.0, 4.0, 16.0, 64.0])
    R4 = law(1.0, 0.6, 1.1, L4) * np.exp(0.01 * rng.standard_normal((3, 4)))
    f = power.batch_fit(L4, R4, 1.0, 0.6)
    for i, row in enumerate(R4):
        g = fit_power_law(L4, row)
        assert g.ok and g.dof == 1 and bool(f["ok"][i])
        assert f["alpha_se"][i] == pytest.approx(g.alpha_se, rel=1e-6)
    L3 = np.array([1.0, 8.0, 64.0])  # three points for three parameters: exact, but not a fit
    R3 = law(1.0, 0.6, 1.1, L3) * np.exp(0.01 * rng.standard_normal((2, 3)))
    assert not power.batch_fit(L3, R3, 1.0, 0.6)["ok"].any()
    assert not fit_power_law(L3, R3[0]).ok


def test_batch_fit_started_at_an_exact_law_is_done_after_one_step():
    """The default start is the law at alpha = 1 (L0 and c as given, both below 1 here): on an exact
    law it has nothing to do, so one step converges; the other row (noisy) is still moving."""
    exact = law(0.6, 0.5, 1.0)
    noisy = law(0.6, 0.5, 1.0) * np.exp(0.01 * np.random.default_rng(2).standard_normal(L.size))
    f = power.batch_fit(L, np.stack([exact, noisy]), 0.6, 0.5, iters=1)
    assert f["ok"].tolist() == [True, False]
    assert f["alpha"][0] == pytest.approx(1.0, abs=1e-12)
    assert f["L0"][0] == pytest.approx(0.6, abs=1e-12) and f["c"][0] == pytest.approx(0.5, rel=1e-12)
    assert f["r2"][0] == pytest.approx(1.0, abs=1e-15)


def test_batch_fit_keeps_the_law_start_when_another_start_only_ties_it():
    """2 + 0.5/L started at itself: its cost is 0 and the row's own starts reach cost 0 as well, a
    hair away (1 ulp in c and alpha). Only a strictly lower cost replaces an earlier start."""
    f = power.batch_fit(L, law(2.0, 0.5, 1.0)[None, :], 2.0, 0.5)
    assert (f["L0"][0], f["c"][0], f["alpha"][0]) == (2.0, 0.5, 1.0)
    assert f["ok"].tolist() == [True]


def test_batch_fit_falls_back_on_its_own_start_when_the_law_is_far():
    """1 + 64/L: its own second start (L0 = min R / 2 = 1, log c = mean(log(R - L0) + log L) = log 64,
    alpha = 1) is the answer itself, so one step suffices even from a law start far off."""
    R = law(1.0, 64.0, 1.0)[None, :]
    f = power.batch_fit(L, R, 5.0, 1e-3, iters=1)
    assert f["ok"].tolist() == [True]
    assert f["L0"][0] == pytest.approx(1.0, rel=1e-12) and f["c"][0] == pytest.approx(64.0, rel=1e-12)
    assert f["alpha"][0] == pytest.approx(1.0, rel=1e-12)


def test_batch_fit_rows_with_a_bad_value_are_not_ok_and_leave_the_others_alone():
    """A zero, a negative, a NaN, an infinity or a missing value (None) in a row makes that row alone
    not ok, without a floating-point exception (iters=20 here; the default 80, which raised LinAlgError
    before the pseudo-inverse fallback, is tested below)."""
    good = law(0.6, 0.5, 1.0)
    rows = [list(good)]
    for bad in (0.0, -0.1, math.nan, math.inf, None):
        row = list(good)
        row[3] = bad
        rows.append(row)
    with np.errstate(**RAISE):
        f = power.batch_fit(L, rows, 0.6, 0.5, iters=20)
    assert f["ok"].tolist() == [True, False, False, False, False, False]
    assert f["alpha"][0] == pytest.approx(1.0, abs=1e-12) and f["L0"][0] == pytest.approx(0.6, abs=1e-12)
    assert np.isnan(f["r2"][1:]).all()  # a bad row's log R is a constant placeholder: R² undefined


def test_batch_fit_is_the_same_in_any_unit_of_loss():
    """R -> s R (L0, c -> s L0, s c) leaves alpha and the verdicts unchanged, as fit_power_law's;
    at s = 1e6 and 1e8 the L0 column of the Jacobian is tiny, where LM's damping must still work."""
    rng = np.random.default_rng(11)
    shapes = [(2.0, 0.5, 0.9), (1.0, 0.3, 1.4), (0.2, 2.0, 0.5), (2.075, 0.09, 1.0), (1.0, 1.0, 0.7)]
    R = np.array([law(a, b, g) * np.exp(0.003 * rng.standard_normal(L.size)) for a, b, g in shapes])
    for s in (1e-6, 1e6, 1e8):
        f = power.batch_fit(L, s * R, s * 2.0, s * 0.5)
        for i, row in enumerate(s * R):
            g = fit_power_law(L, row)
            assert bool(f["ok"][i]) == g.ok, (s, i, g.reason)
            assert f["alpha"][i] == pytest.approx(g.alpha, rel=1e-6), (s, i)


# ---------------------------------------------------------------- _model and _lm

def test_model_is_silent_where_the_power_overflows_or_vanishes():
    """A trial step may overflow c L^-alpha (row 0) or make it 0 with L0 = 0 (row 1): the model is
    inf / -inf there, with no floating-point exception whatever the caller's np.errstate."""
    theta = np.array([[800.0, 1.0, 0.0], [-800.0, 1.0, 0.0], [math.log(0.5), 1.0, 2.0]])
    with np.errstate(**RAISE):
        logm, J = power._model(theta, LOGL)
    assert np.all(logm[0] == np.inf) and np.all(logm[1] == -np.inf)
    assert np.isnan(J[0, :, 0]).all() and np.all(J[1, :, 2] == -np.inf)
    assert logm[2] == pytest.approx(np.log(law(2.0, 0.5, 1.0)), abs=1e-15)
    assert J.shape == (3, L.size, 3)


def test_lm_without_steps_returns_each_start_with_its_own_cost():
    """iters=0: every row keeps its start and its own residual sum of squares (not another row's,
    not a sum over rows); a start whose model is not finite costs inf and does not spoil the rest."""
    R = np.stack([law(2.0, 0.5, 1.0), law(1.0, 0.3, 1.4), law(1.0, 0.3, 1.4)])
    theta = np.array([[math.log(0.4), 1.1, 2.1], [math.log(0.3), 1.0, 1.0], [-2000.0, 1.0, 0.0]])
    logR = np.log(R)
    th, J, cost, conv = power._lm(theta.copy(), LOGL, logR, 0)
    assert np.array_equal(th, theta) and J.shape == (3, L.size, 3)
    own = [np.sum((logR[i] - np.log(law(theta[i, 2], math.exp(theta[i, 0]), theta[i, 1]))) ** 2) for i in (0, 1)]
    assert cost[:2] == pytest.approx(own, rel=1e-12) and cost[2] == np.inf
    assert conv[:2].tolist() == [False, False]


def _lm_far_rows():
    """(curve, start) pairs from which LM's damping (lam / 3 on success, x 4 on failure, the diagonal
    scaling D + 1e-12) and its gain rule converge in at most 13 steps; rows 1-4 carry fixed noise."""
    noise = np.exp(0.003 * np.random.default_rng(1).standard_normal(L.size))
    pairs = [((2.0, 0.5, 0.5), (0.01, 0.3, 0.0), False), ((1.0, 0.1, 1.5), (1.0, 0.3, 3.0), True),
             ((0.5, 0.1, 1.5), (10.0, 3.0, 1.0), True), ((0.5, 2.0, 1.0), (10.0, 0.3, 0.0), True),
             ((1.0, 2.0, 0.5), (10.0, 0.3, 3.0), True)]  # ((L0, c, alpha) of the curve, (c, alpha, L0) of the start)
    R = np.array([law(*t) * (noise if noisy else 1.0) for t, s, noisy in pairs])
    theta = np.array([[math.log(s[0]), s[1], s[2]] for t, s, noisy in pairs])
    return R, theta, [t for t, s, noisy in pairs]


def test_lm_reaches_the_optimum_from_far_starts_within_fifteen_steps():
    R, theta, truths = _lm_far_rows()
    th, J, cost, conv = power._lm(theta.copy(), LOGL, np.log(R), 15)
    assert conv.all()
    a, b, g = truths[0]  # exact data: the truth itself
    assert th[0] == pytest.approx([math.log(b), g, a], abs=1e-12)
    for i in range(1, len(R)):
        ref = fit_power_law(L, R[i])
        assert ref.ok and th[i, 1] == pytest.approx(ref.alpha, rel=1e-6), i
        assert th[i, 2] == pytest.approx(ref.L0, rel=1e-6) and cost[i] == pytest.approx(ref.rss, rel=1e-9), i


def test_lm_pressed_against_alpha_zero_stops_once_fifteen_steps_failed():
    """A rising curve started at alpha = 0 (its bound) cannot improve: the damping grows x 4 per
    refused step and the row stops once it passes 1e6, at the 16th step."""
    rows, starts = [], []
    for slope in (0.01, 0.5):
        R = 2 + slope * L / 64
        gm = math.exp(np.mean(np.log(R)))
        for split in (0.0, 0.5):
            rows.append(R)
            starts.append([math.log(gm * (1 - split)), 0.0, gm * split])
    theta = np.array(starts)
    th, J, cost, conv = power._lm(theta.copy(), LOGL, np.log(np.array(rows)), 17)
    assert conv.all()
    assert np.all(th[:, 1] == 0.0)


# ---------------------------------------------------------------- _judge_fit at chosen inputs

def _judge(theta, J, rss, logR):
    """_judge_fit with every warning an error (a numpy deprecation included)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(**RAISE):
            return power._judge_fit(np.asarray(theta, float), J, np.asarray(rss, float), logR, L.size,
                                    np.ones(len(theta), dtype=bool))


def test_judge_fit_bounds_at_their_exact_thresholds():
    """A well-conditioned Jacobian for every row, so that only the bounds decide: L0 <= 1e-8 min R
    (relative to each row's own min R), alpha <= 1e-8, alpha >= ALPHA_MAX (1 - 1e-8), each alone."""
    J = np.repeat(power._model(np.array([[math.log(0.5), 1.0, 2.0]]), LOGL)[1], 11, axis=0)
    small, large = 1e-3 * (1 + 1 / L), 100.0 * (1 + 1 / L)
    logR = np.log(np.array([small] * 2 + [large] * 9))
    t_small, t_large = 1e-8 * np.exp(logR[0].min()), 1e-8 * np.exp(logR[2].min())
    rows = [(t_small, 1.0),                      # L0 exactly on its threshold: on the bound
            (2 * t_small, 1.0),                  # twice it: free
            (0.1 * t_large, 1.0),                # L0 = 1e-7 against min R = 100: on the bound
            (1.0, 1e-8), (1.0, 2e-8),            # alpha on / off its lower threshold
            (1.0, 0.0), (0.0, 1.0),              # each bound alone
            (1.0, ALPHA_MAX * (1 - 1e-8)), (1.0, ALPHA_MAX), (1.0, ALPHA_MAX * (1 - 2e-8)),
            (1.0, 1.0)]
    theta = [[math.log(0.5), a, L0] for L0, a in rows]
    f = _judge(theta, J, np.full(len(rows), 1e-4), logR)
    assert f["ok"].tolist() == [False, True, False, False, True, False, False, False, False, True, True]


def test_judge_fit_uses_numpys_matrix_rank_rule_and_needs_a_finite_se_of_alpha():
    """A = J^T J = diag(1, a, b) by construction: full rank iff its least singular value exceeds
    3 eps times its largest (numpy's matrix_rank for 3 x 3). The last row: alpha's variance
    overflows (rss 1e300 over a = 1e-10) while L0's stays finite: not ok."""
    diags = [(1.0, 1.0, 0.0), (0.0, 0.0, 0.0), (1.0, 1.0, 1e-16), (1.0, 1.0, 7.7e-16), (1.0, 0.1, 1e-16),
             (1.0, 1e-10, 1.0), (1.0, 1.0, 1.0)]
    J = np.zeros((len(diags), L.size, 3))
    for s, d in enumerate(diags):
        J[s, [0, 1, 2], [0, 1, 2]] = np.sqrt(d)
    rss = np.array([1e-4] * 5 + [1e300, 1e-4])
    logR = np.log(np.repeat(law(2.0, 0.5, 1.0)[None, :], len(diags), axis=0))
    f = _judge([[math.log(0.5), 1.0, 2.0]] * len(diags), J, rss, logR)
    assert f["ok"].tolist() == [False, False, False, True, False, False, True]
    assert np.isinf(f["alpha_se"][5]) and np.isnan(f["alpha_se"][:3]).all()


def test_judge_fit_r2_is_undefined_where_log_r_is_constant():
    J = np.repeat(power._model(np.array([[math.log(0.5), 1.0, 2.0]]), LOGL)[1], 3, axis=0)
    logR = np.array([np.zeros(L.size), np.zeros(L.size), np.log(law(2.0, 0.5, 1.0))])
    f = _judge([[math.log(0.5), 1.0, 2.0]] * 3, J, np.array([0.1, 0.0, 1e-4]), logR)
    assert np.isnan(f["r2"][:2]).all() and f["ok"].tolist() == [False, False, True]


# ---------------------------------------------------------------- criterion 11 at its edges

def test_criterion_11_window_and_r2_are_closed_at_exact_values():
    """L0 - C_L = 1/L on powers of two: alpha = 1 and R² = 1 exactly (log(1/L) = -log L in floats)."""
    Ls = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    C = (1.0 - 1.0 / Ls)[None, :]
    assert power.criterion_11(Ls, 1.0)(C).tolist() == [True]
    assert power.criterion_11(Ls, 1.0, lo=1.0)(C).tolist() == [True]
    assert power.criterion_11(Ls, 1.0, hi=1.0)(C).tolist() == [True]
    assert power.criterion_11(Ls, 1.0, r2_min=1.0)(C).tolist() == [True]
    steep = (1.0 - Ls ** -1.5)[None, :]  # alpha = 1.5: outside the default window [0.8, 1.2]
    assert power.criterion_11(Ls, 1.0)(steep).tolist() == [False]
    assert power.criterion_11(Ls, 1.0, hi=2.0)(steep).tolist() == [True]


def test_criterion_11_leaves_out_a_gap_of_zero_and_one_of_exactly_minus_two_se():
    Ls = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    clean = 1.0 - 1.0 / Ls
    at_zero, at_two_se, beyond = clean.copy(), clean.copy(), clean.copy()
    at_zero[2] = 1.0         # L0 - C = 0: left out, the other four decide
    at_two_se[4] = 1.5       # L0 - C = -0.5 = -2 SE exactly: not below -2 SE, left out
    beyond[4] = 1.5000001    # just below -2 SE: the row fails
    crit = power.criterion_11(Ls, 1.0, se=np.full(5, 0.25))
    assert crit(np.stack([clean, at_zero, at_two_se, beyond])).tolist() == [True, True, True, False]


def test_criterion_11_with_depths_close_together():
    """Depths 2..5: log(L0 - C) varies by less than 1 in all (its sum of squares is 0.47)."""
    Ls = np.array([2.0, 3.0, 4.0, 5.0])
    assert power.criterion_11(Ls, 1.0)((1.0 - 1.0 / Ls)[None, :]).tolist() == [True]


def test_criterion_11_rows_with_nothing_to_fit_fail_without_exceptions():
    Ls = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    rows = np.stack([np.full(5, 1.2),            # every point above L0: nothing left
                     np.full(5, 0.5),            # a constant gap: no slope, R² undefined
                     np.r_[0.5, np.full(4, 1.2)],  # one point left
                     1.0 - 1.0 / Ls])
    with np.errstate(**RAISE):
        got = power.criterion_11(Ls, 1.0, lo=0.0, hi=100.0, r2_min=0.0, min_points=0)(rows)
    assert got.tolist() == [False, False, False, True]


def test_criterion_11_a_gap_with_no_trend_fails_even_in_an_open_window():
    """Depths 2, 8, 16, 64 and gaps 1, 2, 2, 1: the slope is exactly 0 (alpha = -0.0), which is
    not a decrease (fit_gap: alpha on its bound), with lo = 0 and R² >= 0 as well."""
    Ls = np.array([2.0, 8.0, 16.0, 64.0])
    C = (1.0 - np.array([1.0, 2.0, 2.0, 1.0]))[None, :]
    assert power.criterion_11(Ls, 1.0, lo=0.0, hi=2.0, r2_min=0.0)(C).tolist() == [False]


def test_criterion_11_an_unknown_se_never_flags_an_overshoot():
    """SEs are read as floats: None is nan, and gap < -2 nan is False, so that depth is only left out."""
    Ls = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    C = 1.0 - 1.0 / Ls
    C[1] = 3.0  # far above L0
    crit = power.criterion_11(Ls, 1.0, se=[0.01, None, 0.01, 0.01, 0.01])
    assert crit(C[None, :]).tolist() == [True]
    assert power.criterion_11(Ls, 1.0, se=np.full(5, 0.01))(C[None, :]).tolist() == [False]


# ---------------------------------------------------------------- simulate, seeds_for, power_report, 5a, law_fit

def test_missing_values_are_unknown_noise_or_means():
    assert math.isnan(power.simulate(z_test(1.0), [0.0, None], [1.0, 1.0]))
    assert math.isnan(power.simulate(z_test(1.0), [0.0, 1.0], [1.0, None]))
    assert power.seeds_for(z_test(1.0), [0.0], [None], 3) is None


def test_simulate_counts_truthy_criterion_values_as_passes():
    """A criterion may return counts (here: how many coordinates are below 0.5): nonzero passes."""
    def below(Y):
        return np.count_nonzero(Y < 0.5, axis=1)

    Z = np.random.default_rng(9).standard_normal((200, 2))
    expected = np.mean(np.any(Z < 0.5, axis=1))
    assert power.simulate(below, [0.0, 0.0], [1.0, 1.0], n_sims=200, seed=9) == pytest.approx(expected)
    assert expected < 1.0


def test_seeds_for_ends_at_max_seeds_whatever_the_criterion_returns():
    """A criterion that passes its first call only: powered at MAX_SEEDS once, never after. The
    search must stop at MAX_SEEDS (None) instead of asking again for ever."""
    calls = []

    def once(Y):
        calls.append(len(Y))
        if len(calls) > 100:
            raise RuntimeError("seeds_for keeps searching")
        return np.full(len(Y), len(calls) == 1)

    assert power.seeds_for(once, [0.0], [1.0], 3, n_sims=10) is None
    assert len(calls) <= 12


def test_power_report_does_not_search_when_the_power_is_unknown(monkeypatch):
    def no_search(*args, **kwargs):
        raise AssertionError("seeds_for called with an unknown power")

    monkeypatch.setattr(power, "seeds_for", no_search)
    r = power.power_report(z_test(1.0), [math.nan], [1.0], 3)
    assert math.isnan(r["power"]) and r["seeds_for_target"] is None


def test_criterion_5a_starts_the_fit_at_the_law_with_alpha_one_by_default(monkeypatch):
    seen = {}

    def fake_fit(L_, R, L0, c, alpha):
        seen["alpha"] = alpha
        return {"ok": np.ones(len(R), bool), "alpha": np.ones(len(R)), "r2": np.ones(len(R))}

    monkeypatch.setattr(power, "batch_fit", fake_fit)
    assert power.criterion_5a(L, 2.0, 0.09)(np.ones((2, L.size))).tolist() == [True, True]
    assert seen["alpha"] == 1.0


def _law_reference(R):
    """(L0, c) of log R = log(L0 + c/L) by Gauss-Newton from the linear fit of R on 1/L."""
    x, logR = 1.0 / L, np.log(R)
    L0, c = np.linalg.lstsq(np.stack([np.ones_like(x), x], axis=1), R, rcond=None)[0]
    t = np.array([math.log(c), L0])
    for _ in range(30):
        m = t[1] + np.exp(t[0]) * x
        Jt = np.stack([np.exp(t[0]) * x / m, 1.0 / m], axis=1)
        t = t + np.linalg.lstsq(Jt, logR - np.log(m), rcond=None)[0]
    return t[1], math.exp(t[0])


def test_law_fit_reaches_the_optimum_off_the_law_and_refuses_missing_losses():
    R = 3.0 * L ** -0.3  # not of the form L0 + c/L: the optimum is a compromise
    L0, c = power.law_fit(L, R)
    ref = _law_reference(R)
    assert L0 == pytest.approx(ref[0], rel=1e-7) and c == pytest.approx(ref[1], rel=1e-7)
    with pytest.raises(InputError, match="need at least 2 positive losses"):
        power.law_fit(L[:3], [1.0, None, 2.0])


def test_batch_fit_marks_bad_and_flat_rows_not_ok_at_its_default_iterations_instead_of_raising():
    """A row with NaN, 0 or a negative loss (a placeholder the fit slides to α = 0), or an exactly flat row,
    made the LM step matrix singular once λ had shrunk (iters >= 30): LinAlgError from the whole batch, so a
    power simulation raised as soon as one draw was <= 0 instead of counting that draw as a failure."""
    L = np.array([1, 2, 4, 8, 16, 32, 64.0])
    R = 0.6 + 0.5 / L
    rows = np.stack([R, np.where(L == 8, np.nan, R), np.where(L == 4, 0.0, R), np.where(L == 2, -0.1, R)])
    out = power.batch_fit(L, rows, 0.6, 0.5)
    assert np.asarray(out["ok"]).tolist() == [True, False, False, False]
    assert abs(float(np.asarray(out["alpha"])[0]) - 1.0) < 1e-9  # the regular row as before
    assert np.asarray(power.batch_fit(L, np.full((1, 7), 2.0), 1.0, 0.5)["ok"]).tolist() == [False]
    # draws <= 0 are failures of 5a, not an error (L0 0.05, SE 0.05: many draws below 0)
    assert power.simulate(power.criterion_5a(L, 0.05, 0.09), 0.05 + 0.09 / L, np.full(7, 0.05)) == 0.0
