"""Tests for depthscale.theory.fits: power-law fits in log space (SPEC §6.1)."""

import math

import numpy as np
import pytest
from scipy import stats

from depthscale.theory.fits import FitResult, fit_dict, fit_gap, fit_power_law

DEPTHS = 2.0 ** np.arange(9)  # 1, 2, ..., 256
DENSE_DEPTHS = 2.0 ** np.arange(0, 8.25, 0.5)  # 17 depths, 14 residual dof with a floor


def noisy(R, sigma, rng):
    """Multiplicative log-normal noise: log R + N(0, sigma^2)."""
    return R * np.exp(sigma * rng.standard_normal(np.shape(R)))


@pytest.mark.parametrize("L0, c, alpha", [(2.0, 5.0, 1.0), (0.3, 2.0, 0.5), (0.05, 1.0, 2.0)])
def test_recovers_parameters(L0, c, alpha):
    rng = np.random.default_rng(1)
    R = noisy(L0 + c * DENSE_DEPTHS**-alpha, 0.01, rng)
    f = fit_power_law(DENSE_DEPTHS, R)
    assert isinstance(f, FitResult) and f.success and f.floor
    assert abs(f.alpha - alpha) < 4 * f.alpha_se
    assert abs(f.L0 - L0) < 4 * f.L0_se
    assert abs(f.c - c) < 4 * f.c_se
    assert 0.99 < f.r2 <= 1.0
    assert f.n == DENSE_DEPTHS.size and f.dof == DENSE_DEPTHS.size - 3
    np.testing.assert_allclose(f.predict(DENSE_DEPTHS), L0 + c * DENSE_DEPTHS**-alpha, rtol=0.03)


def test_noise_free_exact():
    f = fit_power_law(DEPTHS, 1.5 + 4.0 * DEPTHS**-0.8)
    np.testing.assert_allclose([f.L0, f.c, f.alpha], [1.5, 4.0, 0.8], rtol=1e-7)
    assert f.alpha_se < 1e-6


def test_se_calibration():
    # over 200 noisy trials the truth lies within 2 Gauss-Newton SE in >= 90% of them
    # (expected ~93.5% for a t distribution with 14 dof); and the SE is not grossly inflated
    rng = np.random.default_rng(20240611)
    L0, c, alpha = 1.0, 3.0, 1.0
    truth = L0 + c * DENSE_DEPTHS**-alpha
    z = []
    for _ in range(200):
        f = fit_power_law(DENSE_DEPTHS, noisy(truth, 0.02, rng), n_starts=1)
        z.append((f.alpha - alpha) / f.alpha_se)
    z = np.abs(np.array(z))
    assert np.mean(z < 2) >= 0.90
    assert np.mean(z < 1) <= 0.80  # a 5x inflated SE would put ~100% within 1 SE


def test_no_floor_matches_polyfit():
    rng = np.random.default_rng(2)
    R = noisy(3.0 * DEPTHS**-1.3, 0.05, rng)
    f = fit_power_law(DEPTHS, R, floor=False)
    slope, intercept = np.polyfit(np.log(DEPTHS), np.log(R), 1)
    np.testing.assert_allclose(f.alpha, -slope, rtol=1e-8)
    np.testing.assert_allclose(f.c, math.exp(intercept), rtol=1e-8)
    lr = stats.linregress(np.log(DEPTHS), np.log(R))
    np.testing.assert_allclose(f.alpha_se, lr.stderr, rtol=1e-6)
    np.testing.assert_allclose(f.r2, lr.rvalue**2, rtol=1e-8)
    assert f.L0 == 0.0 and math.isnan(f.L0_se) and not f.floor


def test_weights():
    rng = np.random.default_rng(3)
    R = noisy(0.5 + 2.0 * DEPTHS**-1.0, 0.02, rng)
    plain = fit_power_law(DEPTHS, R)
    scaled = fit_power_law(DEPTHS, R, weights=np.full(DEPTHS.size, 7.0))
    np.testing.assert_allclose([scaled.alpha, scaled.alpha_se, scaled.r2],
                               [plain.alpha, plain.alpha_se, plain.r2], rtol=1e-6)
    # a weight on one point equals repeating that point (same estimate)
    w = np.ones(DEPTHS.size)
    w[0] = 3.0
    L_rep = np.concatenate([DEPTHS, DEPTHS[:1], DEPTHS[:1]])
    R_rep = np.concatenate([R, R[:1], R[:1]])
    np.testing.assert_allclose(fit_power_law(DEPTHS, R, weights=w).alpha,
                               fit_power_law(L_rep, R_rep).alpha, rtol=1e-6)


def test_floor_on_its_bound_equals_no_floor_fit():
    rng = np.random.default_rng(0)
    R = noisy(3.0 * DEPTHS**-1.0, 0.05, rng)  # a pure power law: the best L0 is the bound 0
    f, g = fit_power_law(DEPTHS, R), fit_power_law(DEPTHS, R, floor=False)
    assert f.L0 == 0.0 and math.isnan(f.L0_se) and f.dof == DEPTHS.size - 2
    np.testing.assert_allclose([f.alpha, f.alpha_se, f.c], [g.alpha, g.alpha_se, g.c], rtol=1e-7)


def test_too_few_points_gives_nan_se():
    f = fit_power_law(DEPTHS[:3], 1.0 + DEPTHS[:3] ** -1.0)  # n = p = 3
    assert f.dof <= 0 and math.isnan(f.alpha_se) and math.isfinite(f.alpha)
    g = fit_power_law(DEPTHS[:2], [2.0, 1.0], floor=False)  # exact line through 2 points
    assert math.isnan(g.alpha_se) and g.r2 == pytest.approx(1.0)
    np.testing.assert_allclose(g.alpha, 1.0, rtol=1e-8)


def test_gap_fit():
    rng = np.random.default_rng(4)
    L0, c, alpha = 2.0, 1.5, 0.98
    gap = noisy(c * DENSE_DEPTHS**-alpha, 0.01, rng)
    f = fit_gap(DENSE_DEPTHS, L0 - gap, L0)
    assert f.L0 == L0 and f.n_dropped == 0 and f.note == ""
    assert abs(f.alpha - alpha) < 4 * f.alpha_se
    # the same as fitting the gap with L0 = 0
    g = fit_power_law(DENSE_DEPTHS, L0 - (L0 - gap), floor=False)
    np.testing.assert_allclose([f.alpha, f.c, f.alpha_se], [g.alpha, g.c, g.alpha_se], rtol=1e-8)


def test_gap_fit_drops_nonpositive():
    C = 2.0 - DEPTHS**-1.0
    C[-2:] = [2.0, 2.1]  # L0 - C_L = 0 and < 0
    f = fit_gap(DEPTHS, C, 2.0)
    assert f.n_dropped == 2 and f.n == DEPTHS.size - 2
    assert "dropped 2" in f.note
    np.testing.assert_allclose(f.alpha, 1.0, rtol=1e-8)
    with pytest.raises(ValueError, match="L0 - C_L > 0"):
        fit_gap(DEPTHS, np.full(DEPTHS.size, 3.0), 2.0)


def test_bad_inputs():
    with pytest.raises(ValueError, match="same length"):
        fit_power_law(DEPTHS, np.ones(DEPTHS.size - 1))
    with pytest.raises(ValueError, match="R must be finite and > 0, got -1.0"):
        fit_power_law(DEPTHS[:3], [1.0, -1.0, 0.5])
    with pytest.raises(ValueError, match="R must be finite and > 0"):
        fit_power_law(DEPTHS[:3], [1.0, 0.0, 0.5])
    with pytest.raises(ValueError, match="R must be finite"):
        fit_power_law(DEPTHS[:3], [1.0, np.nan, 0.5])
    with pytest.raises(ValueError, match="L must be finite and > 0"):
        fit_power_law([0.0, 1.0, 2.0], [1.0, 0.5, 0.3])
    with pytest.raises(ValueError, match="at least 2"):
        fit_power_law([1.0], [1.0])
    with pytest.raises(ValueError, match="weights"):
        fit_power_law(DEPTHS, np.ones(DEPTHS.size), weights=np.ones(3))
    with pytest.raises(ValueError, match="same length"):
        fit_gap(DEPTHS, np.ones(3), 2.0)
    with pytest.raises(ValueError, match="L0 must be a finite number"):
        fit_gap(DEPTHS, np.ones(DEPTHS.size), math.inf)


def test_fit_dict():
    out = fit_dict(DEPTHS.tolist(), (1.0 + 2.0 * DEPTHS**-1.0).tolist())
    assert set(out) == {"L0", "c", "alpha", "alpha_se", "r2", "n", "status", "reason"}
    assert all(isinstance(out[k], float) for k in ("L0", "c", "alpha", "alpha_se", "r2"))
    assert out["n"] == DEPTHS.size and out["status"] == "ok" and out["reason"] == ""
    np.testing.assert_allclose([out["L0"], out["c"], out["alpha"]], [1.0, 2.0, 1.0], rtol=1e-7)
    assert fit_dict(DEPTHS, 2.0 * DEPTHS**-1.0, floor=False)["L0"] == 0.0


def test_a_well_posed_fit_is_ok():
    rng = np.random.default_rng(5)
    f = fit_power_law(DENSE_DEPTHS, noisy(1.0 + 3.0 * DENSE_DEPTHS**-1.0, 0.01, rng))
    assert f.status == "ok" and f.ok and f.reason == ""
    g = fit_power_law(DEPTHS[:3], 3.0 * DEPTHS[:3] ** -1.0 * [1.0, 1.01, 0.99], floor=False)
    assert g.status == "ok", g.reason  # 3 points, 2 parameters: one residual degree of freedom


@pytest.mark.parametrize("L, R, floor, why", [
    # the example: 3 points for 3 parameters, and the loss rises at L = 4
    ([1, 2, 4], [3.62, 3.18, 3.28], True, "3 points for 3 parameters (need at least 4)"),
    ([1, 2], [2.0, 1.0], False, "2 points for 2 parameters (need at least 3)"),
    # a pure power law: the best floor is its bound 0
    (DEPTHS, 3.0 * DEPTHS**-1.0 * (1 + 0.01 * np.sin(DEPTHS)), True, "L0 = 0 at its bound 0"),
    # the loss rises with depth: alpha sits on its lower bound
    (DEPTHS, 1.0 + 0.1 * np.log(DEPTHS), True, "at its bound [0, 100]"),
    (DEPTHS, 1.0 + 0.1 * np.log(DEPTHS), False, "at its bound [0, 100]"),
])
def test_degenerate_fits_say_why(L, R, floor, why):
    f = fit_power_law(L, R, floor=floor)
    assert f.status == "degenerate" and not f.ok
    assert why in f.reason, f.reason
    d = fit_dict(L, R, floor=floor)
    assert d["status"] == "degenerate" and why in d["reason"]


def test_degeneracy_rules():
    from depthscale.theory.fits import degeneracy

    assert degeneracy(9, True, 1.0, 0.1, 2.0, 0.1, 0.99) == ""
    assert "no finite SE of alpha" in degeneracy(9, True, 1.0, math.nan, 2.0, 0.1, 0.99)
    assert "no finite SE of L0" in degeneracy(9, True, 1.0, 0.1, 2.0, math.nan, 0.99)
    assert "R^2 undefined" in degeneracy(9, False, 1.0, 0.1, 0.0, math.nan, math.nan)
    assert "did not converge" in degeneracy(9, False, 1.0, 0.1, 0.0, math.nan, 0.9, success=False)
    assert "alpha = 100" in degeneracy(9, False, 100.0, 0.1, 0.0, math.nan, 0.9)
    # several reasons are all given
    assert degeneracy(3, True, 1.0, math.nan, 2.0, math.nan, 0.9).count(";") == 1


def test_gap_fit_carries_the_status():
    f = fit_gap(DEPTHS[1:3], 2.0 - DEPTHS[1:3] ** -1.0, 2.0)  # 2 points for c and alpha
    assert f.status == "degenerate" and "2 points for 2 parameters" in f.reason


def test_cli_fit_flags_the_degenerate_fit(capsys):
    """`depthscale fit --depths 1,2,4 --losses 3.62,3.18,3.28 --json` (the issue's example)."""
    import json

    from depthscale.cli import main as cli

    assert cli.main(["fit", "--depths", "1,2,4", "--losses", "3.62,3.18,3.28", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "degenerate" and "3 points for 3 parameters" in out["reason"]
    assert out["alpha_se"] is None  # no SE: null in strict JSON
    assert cli.main(["fit", "--depths", "1,2,4,8,16", "--losses", "10,6,4.1,3.4,3.2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "ok"


def test_exact_texts_and_edges_of_the_checks_and_the_degeneracy_rules():
    """What a first mutation run of fits.py (issue 47) found no test of: every input check's exact text
    (the name of the bad argument), the weights of fit_gap, and each degeneracy rule at its edge."""
    from depthscale.theory.fits import degeneracy

    def raises(text, fn, *args, **kw):
        with pytest.raises(ValueError, match="^" + text.replace("(", r"\(").replace(")", r"\)") + "$"):
            fn(*args, **kw)

    raises("L must be 1-D, got shape (1, 3)", fit_power_law, [[1.0, 2.0, 4.0]], [1.0, 0.5, 0.3])
    raises("C must be finite, got nan", fit_gap, DEPTHS[:3], [1.0, np.nan, 0.5], 2.0)  # C may be any sign
    raises("L must be finite and > 0, got -1.0", fit_gap, [1.0, -1.0, 4.0], [1.0, 1.5, 1.8], 2.0)
    raises("weights must be finite and > 0, got 0.0", fit_power_law, DEPTHS[:3], [1.0, 0.5, 0.3], weights=[1, 0, 1])
    raises("weights must have length 9, got 3", fit_gap, DEPTHS, 2.0 - DEPTHS ** -1.0, 2.0, weights=np.ones(3))
    raises("n_starts must be an integer >= 1, got 0", fit_power_law, DEPTHS, 1.0 + DEPTHS ** -1.0, n_starts=0)
    raises("n_starts must be an integer >= 1, got 1.5", fit_power_law, DEPTHS, 1.0 + DEPTHS ** -1.0, n_starts=1.5)
    C = 2.0 - DEPTHS ** -1.0
    C[[1, -1]] = [2.0, 2.5]  # L0 - C_L <= 0 at L = 2 and 256: named
    f = fit_gap(DEPTHS, C, 2.0, n_starts=1)
    assert f.note == "dropped 2 point(s) with L0 - C_L <= 0 at L = [2.0, 256.0]" and not f.floor and f.L0 == 2.0
    # fit_gap's weights reach the fit: equal to fit_power_law's weighted fit of the gap
    rng = np.random.default_rng(7)
    gap, w = noisy(1.5 * DEPTHS ** -0.9, 0.05, rng), rng.uniform(0.2, 5.0, DEPTHS.size)
    g, h = fit_gap(DEPTHS, 2.0 - gap, 2.0, weights=w), fit_power_law(DEPTHS, gap, floor=False, weights=w)
    np.testing.assert_allclose([g.alpha, g.c, g.alpha_se], [h.alpha, h.c, h.alpha_se], rtol=1e-8)
    assert abs(g.alpha - fit_gap(DEPTHS, 2.0 - gap, 2.0).alpha) > 1e-6  # and they change it
    # the rules at their edges, and the exact texts joined by "; "
    assert degeneracy(9, True, 0.0, 0.1, 2.0, 0.1, 0.99) == "alpha = 0 at its bound [0, 100]"
    assert degeneracy(9, True, 1.0, 0.1, 0.0, 0.1, 0.99) == "L0 = 0 at its bound 0"
    assert degeneracy(9, True, 1.0, 0.1, 2.0, 0.1, 0.99, L0_at_bound=True) == "L0 = 2 at its bound 0"
    assert degeneracy(9, True, 1.0, 0.1, 0.5, math.nan, 0.99) == "no finite SE of L0"  # L0 in (0, 1): still judged
    assert degeneracy(9, True, 1.0, 0.1, 2.0, math.nan, 0.99, L0_at_bound=True) == "L0 = 2 at its bound 0"
    assert degeneracy(3, True, 1.0, math.nan, 2.0, math.nan, math.nan, success=False) == (
        "3 points for 3 parameters (need at least 4); no finite SE of alpha; R^2 undefined; the optimiser did not converge")
    # a flat series: R^2 undefined (no variance to explain), never 1
    flat = fit_power_law(DEPTHS, np.full(DEPTHS.size, 2.0), floor=False)
    assert math.isnan(flat.r2) and "R^2 undefined" in flat.reason
    ex = fit_power_law(DENSE_DEPTHS, noisy(1.0 + 2.0 * DENSE_DEPTHS ** -1.0, 0.01, np.random.default_rng(2)))
    assert ex.predict(np.array([1, 2])) == pytest.approx(ex.L0 + ex.c * np.array([1.0, 2.0]) ** -ex.alpha)


# ---- from the mutation run of fits.py (issue 47): each condition a survivor showed untested ----

from depthscale.base.errors import InputError  # noqa: E402
from depthscale.theory import fits as fits_module  # noqa: E402


def _gauss_newton_se(fit, L, R, w):
    """SEs of (log c, alpha, L0) from a central-difference Jacobian of the weighted log residuals at
    the fit's parameters (a second implementation of fit_power_law's analytic Jacobian)."""
    theta = np.array([math.log(fit.c), fit.alpha, fit.L0])

    def resid(t):
        return np.sqrt(w) * (np.log(R) - np.log(t[2] + np.exp(t[0] - t[1] * np.log(L))))

    J = np.empty((L.size, 3))
    for j in range(3):
        h = 1e-6 * max(1.0, abs(theta[j]))
        e = np.zeros(3)
        e[j] = h
        J[:, j] = (resid(theta + e) - resid(theta - e)) / (2 * h)
    r = resid(theta)
    cov = float(r @ r) / (L.size - 3) * np.linalg.inv(J.T @ J)
    return np.sqrt(np.diag(cov)), float(r @ r)


def test_every_se_and_the_rss_against_a_finite_difference_jacobian():
    rng = np.random.default_rng(11)
    L = DENSE_DEPTHS
    w = rng.uniform(0.5, 2.0, L.size)
    R = noisy(1.5 + 2.0 * L ** -0.7, 0.02, rng)
    fit = fit_power_law(L, R, weights=w)
    assert fit.ok and fit.success
    se, rss = _gauss_newton_se(fit, L, R, w)
    assert fit.rss == pytest.approx(rss, rel=1e-9)
    assert fit.c_se == pytest.approx(fit.c * se[0], rel=1e-4)  # delta method: c · SE(log c)
    assert fit.alpha_se == pytest.approx(se[1], rel=1e-4)
    assert fit.L0_se == pytest.approx(se[2], rel=1e-4)
    # R² of log R, weighted: 1 - rss / Σ w (log R - weighted mean)²
    logR = np.log(R)
    tss = np.sum(w * (logR - np.sum(w * logR) / np.sum(w)) ** 2)
    assert fit.r2 == pytest.approx(1 - rss / tss, rel=1e-9)


def test_one_free_parameter_still_has_its_se():
    """No floor and R rising with L: alpha on its bound 0, log c alone free: SE(log c)² = rss/(n-1)/n."""
    L = DEPTHS[:5]
    R = np.array([1.0, 1.1, 1.05, 1.2, 1.15])
    fit = fit_power_law(L, R, floor=False)
    assert fit.alpha < 1e-8 and math.isnan(fit.alpha_se) and fit.dof == 4
    logc = np.log(R).mean()
    rss = float(np.sum((np.log(R) - logc) ** 2))
    assert fit.c == pytest.approx(math.exp(logc), rel=1e-9)
    assert fit.c_se == pytest.approx(fit.c * math.sqrt(rss / 4 / 5), rel=1e-6)


def test_the_starting_points():
    """The first start is the weighted log-log line (alpha clipped to [1e-3, ALPHA_MAX]), then a grid
    of (alpha, L0 / min R) whose first three starts already spread alpha over 0.3, 1, 3; log c of
    each start is the weighted mean of log(R - L0) + alpha log L; n_starts cuts the list."""
    rng = np.random.default_rng(2)
    L = DEPTHS[:6]
    R = 0.5 + 3.0 * L ** -0.8 * np.exp(0.05 * rng.standard_normal(6))
    w = rng.uniform(0.5, 2.0, 6)
    logL, logR = np.log(L), np.log(R)
    starts = fits_module._starts(logL, logR, R, w, True, 11)
    slope, icpt = np.polyfit(logL, logR, 1, w=np.sqrt(w))
    assert starts[0][1] == pytest.approx(-slope, rel=1e-9)
    assert starts[0][0] == pytest.approx(np.average(logR - slope * logL, weights=w), rel=1e-9)
    assert starts[0][2] == 0.0
    grid = [(s[1], s[2] / R.min()) for s in starts[1:]]
    assert sorted((round(a, 12), round(f, 12)) for a, f in grid) == sorted(
        [(a, f) for a in (0.3, 1.0, 3.0) for f in (0.0, 0.5, 0.9)] + [(1.0, 0.99)])
    assert sorted(a for a, _ in grid[:3]) == [0.3, 1.0, 3.0]
    for s in starts[1:]:
        assert s[0] == pytest.approx(np.average(np.log(R - s[2]) + s[1] * logL, weights=w), rel=1e-12)
    assert len(fits_module._starts(logL, logR, R, w, True, 1)) == 1
    no_floor = fits_module._starts(logL, logR, R, w, False, 11)
    assert [s.size for s in no_floor] == [2] * 4 and sorted(s[1] for s in no_floor[1:]) == [0.3, 1.0, 3.0]
    rising = fits_module._starts(logL, -logR, R, w, False, 1)
    assert rising[0][1] == 1e-3  # a rising curve: the line's alpha clipped at 1e-3
    steep = fits_module._starts(logL, -200 * logL, R, w, False, 1)
    assert steep[0][1] == fits_module.ALPHA_MAX


def test_a_fit_whose_optimiser_did_not_converge_says_so(monkeypatch):
    real = fits_module.least_squares

    def unconverged(*args, **kw):
        res = real(*args, **kw)
        res.success = False
        return res

    monkeypatch.setattr(fits_module, "least_squares", unconverged)
    fit = fit_power_law(DEPTHS, 1.0 + 2.0 * DEPTHS ** -1.0)
    assert not fit.success and fit.status == "degenerate" and "the optimiser did not converge" in fit.reason


def test_degeneracy_at_a_floor_of_exactly_zero_names_the_bound_alone():
    why = fits_module.degeneracy(9, True, 0.5, 0.1, 0.0, math.nan, 0.99)
    assert why == "L0 = 0 at its bound 0"


def test_gap_fit_inputs():
    """L must be positive, C need not be (a gap L0 - C_L is what must be); n_starts is handed on."""
    L = np.array([1.0, 2.0, 4.0, 8.0])
    with pytest.raises(InputError, match=r"^L must be finite and > 0, got 0\.0$"):
        fit_gap(np.array([0.0, 2.0, 4.0, 8.0]), np.array([0.1, 0.2, 0.3, 0.35]), 1.0)
    fit = fit_gap(L, np.array([0.0, 0.5, 0.75, 0.875]), 1.0)  # C = 1 - 1/L: gap = 1/L
    assert fit.alpha == pytest.approx(1.0, abs=1e-6) and fit.c == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(InputError, match="n_starts"):
        fit_gap(L, np.array([0.0, 0.5, 0.75, 0.875]), 1.0, n_starts=0)
