"""Claim 11 (depthscale.experiments.nonlinear_floor: c11, _item_11, gap_points, power_11) pinned to
exact values: the series it reads (nonlinear, difficult, k = 2, every fig6 spectrum, 3 seeds; decoy
runs at k = 16, of the linear model and on the easy task, and a finite C at L = 1, all of which would
FAIL the claim if read), which points enter the fit of L0 - C_L (L >= 2 with a finite C; SPEC §9's
rule: below -2 SE FAIL, <= 0 within 2 SE left out and named, fewer than 4 left INCONCLUSIVE), the
α window [0.8, 1.2] and R² >= 0.99 at their boundaries (inclusive), the power target 0.8 (a FAIL
with power below it INCONCLUSIVE), what power_11 hands to the power simulation, degenerate fits
(INCONCLUSIVE; FAIL where the depth effect is absent), the certificate and seeds gate (the real
certificates module over CertBackend's made-up per-context losses), the measured dicts, the
missing-run message and the detail texts.

Inputs are made up (tests/claims_world.py, a TEST FIXTURE). The loss fit is replaced by a chosen
FitResult (L0 = 1, SE of L0 = 2^-10); every seed of a cell has the same C, so C's SE over seeds is 0
and each depth's SE is exactly 2^-10. C_L = 1 - 0.5/L: L0 - C_L = 0.5/L is an exact power law (the
real fit_gap gives α = 1, R² = 1) and every gap and boundary below is exact in binary."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from claims_world import DEPTHS, CertBackend, World, use_cert_backend
from depthscale.analysis import claims, power
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS, MissingRuns
from depthscale.analysis.results import Series
from depthscale.config.paper import FIG56_SPECTRA
from depthscale.experiments import nonlinear_floor as nf
from depthscale.theory.fits import FitResult, fit_gap

JUDGED = FIG56_SPECTRA[2]  # (0,0.5): the item the tests move
LAB = "(0,0.5)"
SE = 2.0 ** -10  # the loss fit's SE of L0: every depth's SE (C's SE over seeds is 0)
DEEP = [2, 4, 8, 16, 32, 64]  # the depths claim 11 fits (L >= 2)
FIT = FitResult(L0=1.0, c=1.5, alpha=1.0, alpha_se=0.0625, r2=0.999, L0_se=SE)
CRITERION = (
    "criterion: fit of L0 - C_L = c L^-α (L >= 2; L0 from a well-posed loss fit): well posed, α in [0.8, 1.2] "
    "and R² >= 0.99, every fig6 spectrum; a depth with L0 - C_L <= 0 beyond 2 SE FAIL, within 2 SE left out and "
    "named, fewer than 4 depths left INCONCLUSIVE; a degenerate fit INCONCLUSIVE (FAIL where R_1 - R_Lmax is "
    "within 2 SE); an item reading a depth that fails a certificate (SPEC §4), or with fewer than 3 seeds on the "
    "envelope, INCONCLUSIVE; a FAIL with power < 0.8 INCONCLUSIVE (underpowered) | ")
POWER_1 = "power 1.00 (400 simulations of the paper's law with these SEs)"
CERTIFIED = "certified (doubling, construction); "
UNCERT = "uncertified: doubling fails at L=16"
BEYOND = "a fit needs more depths (beyond L=64, where the curve still bends) or a longer budget"
DOUBLING_16 = {("nonlinear", 2, *JUDGED): {"doubling": [16]}}


def lab(a, b):
    return f"({a:g},{b:g})"


def ok_item(a, b):
    """A spectrum whose gap is the exact law 0.5/L: the real fit_gap's α = 1, R² = 1."""
    return f"{lab(a, b)} α=1±0, R²=1: α in [0.8, 1.2] ok, R² >= 0.99 ok; {CERTIFIED}{POWER_1} → ok"


def detail(item):
    """Claim 11's detail with `item` for JUDGED and a passing item for every other spectrum."""
    return CRITERION + "; ".join(item if (a, b) == JUDGED else ok_item(a, b) for a, b in FIG56_SPECTRA)


@functools.lru_cache(maxsize=None)
def base_world() -> World:
    """nonlinear/difficult k=2 at every fig6 spectrum, seeds 0, 1, 2 with equal values: R = 1 + 1.5/L,
    C_L = 1 - 0.5/L at L >= 2 and C_1 = 2 (L0 - C_1 = -1, an overshoot if L = 1 were read). Decoys
    with C = 2 everywhere: one seed at k = 16, the linear model at k = 2 and the nonlinear model on
    the easy task, at JUDGED. Built once (configs are slow to make); `world` copies its rows."""
    w = World()
    R = [1.0 + 1.5 / L for L in DEPTHS]
    for a, b in FIG56_SPECTRA:
        for sd in (0, 1, 2):
            C = [2.0 if L == 1 else 1.0 - 0.5 / L for L in DEPTHS]
            w.series("nonlinear", "difficult", 2, a, b, R, seed=sd, C=C)
    w.series("nonlinear", "difficult", 16, *JUDGED, R, seed=0, C=2.0)
    w.series("linear", "difficult", 2, *JUDGED, R, C=2.0)
    w.series("nonlinear", "easy", 1, *JUDGED, R, C=2.0)
    return w


def world(monkeypatch, C=None, R=None, fail=None, drop=()):
    """base_world's results with JUDGED's C[L] and R[L] where given and its runs (L, seed) in `drop`
    removed; the real certificates over CertBackend, failing where `fail` says."""
    w, res = _changed(tuple(sorted((C or {}).items())), tuple(sorted((R or {}).items())), tuple(drop))
    cb = CertBackend(w)
    cb.fail.update(fail or {})
    use_cert_backend(monkeypatch, cb)
    return res, cb


@functools.lru_cache(maxsize=None)
def _changed(C, R, drop):
    """(world, results) of `world`'s changes (cached: results are read, never written, by claim 11)."""
    C, R, base, w = dict(C), dict(R), base_world(), World()
    w.store = base.store
    for r in base.rows:
        judged = (r["model"], r["task"], r["k"], r["a"], r["b"]) == ("nonlinear", "difficult", 2, *JUDGED)
        if judged and (r["L"], r["seed"]) in drop:
            continue
        r = dict(r)
        if judged and r["L"] in R:
            r.update(R=R[r["L"]], R_se=0.01 * R[r["L"]])
        if judged and r["L"] in C:
            r["C"] = C[r["L"]]
        w.rows.append(r)
        w.R[r["run_id"]] = r["R"]
    return w, w.results()


class Stubs:
    """Claim 11's collaborators in nonlinear_floor, recorded, per spectrum (the one loss_fit was last
    asked for): loss_fit gives the real series with fits[(a, b)] (default FIT), fit_gap gaps[(a, b)]
    (default the real fit), power_report powers[(a, b)] (default the real report)."""

    def __init__(self, monkeypatch, fits=None, gaps=None, powers=None):
        self.fits, self.gaps, self.powers = fits or {}, gaps or {}, powers or {}
        self.at, self.loss_calls, self.gap_calls, self.power_calls = None, [], [], []
        monkeypatch.setattr(nf, "loss_fit", self.loss_fit)
        monkeypatch.setattr(nf, "fit_gap", self.fit_gap)
        monkeypatch.setattr(nf, "power_report", self.power_report)

    def loss_fit(self, res, model, task, k, a, b, floor=None):
        self.at = (a, b)
        self.loss_calls.append((model, task, k, a, b))
        return res.series(model, task, k, a, b), self.fits.get((a, b), FIT)

    def fit_gap(self, L, C, L0):
        self.gap_calls.append((self.at, L.tolist(), C.tolist(), L0))
        return self.gaps[self.at] if self.at in self.gaps else fit_gap(L, C, L0)

    def power_report(self, crit, mean, se, n):
        self.power_calls.append((self.at, np.asarray(mean).tolist(), np.asarray(se).tolist(), n))
        return dict(self.powers[self.at]) if self.at in self.powers else power.power_report(crit, mean, se, n)


def report(L, C_law, n=3, se=SE, L0=1.0):
    """The power report claim 11 should make: L0 - C_L = c/L at `L`, each depth's SE `se`."""
    L = np.asarray(L, float)
    se = np.full(L.size, se)
    return power.power_report(power.criterion_11(L, L0, se=se), L0 - C_law / L, se, n)


def cert_of(res):
    return claims.certified(res, "nonlinear", "difficult", 2, *JUDGED)[0]


def gfit(alpha=1.0, r2=0.99, reason=""):
    return FitResult(L0=1.0, c=0.5, alpha=alpha, alpha_se=0.03125, r2=r2, floor=False,
                     status="degenerate" if reason else "ok", reason=reason)


# ---------------------------------------------------------------- what claim 11 reads


def test_c11_reads_nonlinear_difficult_k2_at_every_fig6_spectrum_and_fits_l_ge_2(monkeypatch):
    res, cb = world(monkeypatch)
    st = Stubs(monkeypatch)
    meas, v, text = nf.c11(res, None)
    assert v == PASS
    assert st.loss_calls == [("nonlinear", "difficult", 2, a, b) for a, b in FIG56_SPECTRA]
    assert st.gap_calls == [((a, b), DEEP, [1.0 - 0.5 / L for L in DEEP], 1.0) for a, b in FIG56_SPECTRA]
    assert sorted(set(cb.calls)) == sorted({("nonlinear", "difficult", 2, a, b, L) for a, b in FIG56_SPECTRA
                                            for L in DEPTHS})
    assert st.power_calls[2] == (JUDGED, [1.0 - 0.5 / L for L in DEEP], [SE] * 6, 3)
    assert text == detail(ok_item(*JUDGED))
    assert list(meas) == [lab(a, b) for a, b in FIG56_SPECTRA]
    for a, b in FIG56_SPECTRA:
        m = meas[lab(a, b)]
        assert m == {"certificates": claims.certified(res, "nonlinear", "difficult", 2, a, b)[0], "L0": 1.0,
                     "loss_fit_status": "ok", "power": dict(report(DEEP, 0.5), L0=1.0, c=0.5), "left_out": [],
                     "alpha": 1.0, "alpha_se": 0.0, "r2": 1.0, "fit_status": "ok", "verdict": PASS}
        assert list(m) == ["certificates", "L0", "loss_fit_status", "power", "left_out", "alpha", "alpha_se", "r2",
                           "fit_status", "verdict"]
    assert meas[LAB]["power"]["power"] == 1.0 and meas[LAB]["certificates"]["computed"] == ["doubling", "construction"]


def test_c11_missing_runs_name_the_cell_of_the_judged_series():
    w = World()
    for a, b in FIG56_SPECTRA:
        w.series("nonlinear", "difficult", 2, a, b, 1.0, depths=[L for L in DEPTHS if (a, b) != JUDGED or L != 32])
    w.series("nonlinear", "difficult", 16, *JUDGED, 1.0, depths=(32,))  # another k: not read
    with pytest.raises(MissingRuns) as e:
        nf.c11(w.results(), None)
    assert str(e.value) == "missing runs: 1 cell(s): nonlinear/difficult k=2 (0,0.5) L=32"


# ---------------------------------------------------------------- gap_points and power_11 on their own


def series(C, se_C, depths=tuple(DEPTHS), n=3):
    return Series(np.asarray(depths), {"C": np.asarray(C, float)}, {"C": np.asarray(se_C, float)},
                  np.asarray([n] * len(depths) if np.isscalar(n) else n), [[]] * len(depths))


def test_gap_points_keeps_l_ge_2_with_a_finite_c_and_combines_the_ses():
    C = [0.0, 0.75, 0.875, math.nan, 0.9375, 0.96875, 0.984375]  # L = 1 finite (a decoy), L = 8 not finite
    t = 2.0 ** -6
    s = series(C, [9.0] + [0.375 * t] * 6, n=[3, 3, 4, 3, 5, 3, 6])
    pts = nf.gap_points(s, FitResult(L0=1.0, c=1.0, alpha=1.0, alpha_se=0.1, r2=1.0, L0_se=0.5 * t))
    assert list(pts) == ["L", "C", "se", "gap", "over", "left_out", "unknown", "kept", "n"]
    assert pts["L"].tolist() == [2.0, 4.0, 16.0, 32.0, 64.0] and pts["L"].dtype == np.float64
    assert pts["C"].tolist() == [0.75, 0.875, 0.9375, 0.96875, 0.984375]
    assert pts["gap"].tolist() == [0.25, 0.125, 0.0625, 0.03125, 0.015625]
    assert pts["se"].tolist() == [0.625 * t] * 5  # hypot(0.375 t, 0.5 t), exact
    assert pts["n"].tolist() == [3, 4, 5, 3, 6]
    assert pts["kept"].all() and not pts["over"].any() and not pts["left_out"].any() and not pts["unknown"].any()


@pytest.mark.parametrize("L0_se", [math.nan, None, math.inf])
def test_gap_points_without_a_finite_se_of_l0_uses_c_alone(L0_se):
    s = series([2.0, 0.75, 1.25], [1.0, 0.0625, 0.0625], depths=(1, 2, 4))
    pts = nf.gap_points(s, FitResult(L0=1.0, c=1.0, alpha=1.0, alpha_se=0.1, r2=1.0, L0_se=L0_se))
    assert pts["se"].tolist() == [0.0625, 0.0625]
    assert pts["gap"].tolist() == [0.25, -0.25]
    assert pts["over"].tolist() == [False, True]


def test_gap_points_rule_at_its_boundaries():
    """L0 = 1, SE 2^-10: gap 0.25 kept; exactly 0 left out; exactly -2 SE left out; one float below
    -2 SE over; -2.5 SE over; a tiny positive gap kept."""
    two_se = 2.0 ** -9
    C = [0.75, 1.0, 1.0 + two_se, math.nextafter(1.0 + two_se, 2.0), 1.0 + 5 * 2.0 ** -11, 1.0 - 2.0 ** -52]
    pts = nf.gap_points(series(C, [0.0] * 6, depths=DEEP), FIT)
    assert pts["gap"].tolist() == [0.25, 0.0, -two_se, -(two_se + 2.0 ** -52), -2.5 * SE, 2.0 ** -52]
    assert pts["se"].tolist() == [SE] * 6
    assert pts["over"].tolist() == [False, False, False, True, True, False]
    assert pts["left_out"].tolist() == [False, True, True, False, False, False]
    assert pts["kept"].tolist() == [True, False, False, False, False, True]


def test_gap_points_never_leaves_out_a_non_positive_gap_whose_se_is_unknown():
    """C_L from one seed at a depth: SE over seeds NaN. hypot(NaN, SE(L0)) is NaN, '< -2 SE' is False, and the
    depth was "left out (within 2 SE)" however far below 0 its gap lay (the claim could PASS); now 'unknown'."""
    C = [0.75, 1.5, 1.0, 0.875]
    pts = nf.gap_points(series(C, [0.0, math.nan, math.nan, math.nan], depths=(2, 4, 8, 16)), FIT)
    assert pts["gap"].tolist() == [0.25, -0.5, 0.0, 0.125]
    assert pts["unknown"].tolist() == [False, True, True, False]  # a positive gap with no SE is still kept
    assert pts["left_out"].tolist() == [False] * 4 and pts["over"].tolist() == [False] * 4
    assert pts["kept"].tolist() == [True, False, False, True]


def spy_criterion(monkeypatch):
    calls = []

    def crit(L, L0, **kw):
        calls.append((np.asarray(L).tolist(), L0, kw))
        return power.criterion_11(L, L0, **kw)
    monkeypatch.setattr(nf, "criterion_11", crit)
    return calls


@pytest.mark.parametrize("C", [[1.0, 1.0, 1.0, 1.0], [0.875, 1.0, 1.0, 1.0]])
def test_power_11_with_fewer_than_2_kept_depths_is_unknown(monkeypatch, C):
    calls = spy_criterion(monkeypatch)
    pts = nf.gap_points(series(C, [0.0] * 4, depths=(2, 4, 8, 16)), FIT)
    pw = nf.power_11(None, FIT, pts)
    assert list(pw) == ["power", "why"] and math.isnan(pw["power"])
    assert pw["why"] == "fewer than 2 depths with L0 - C_L > 0"
    assert calls == []


def test_power_11_hands_the_simulation_the_alpha_1_law_of_the_kept_depths(monkeypatch):
    """Two kept depths (L = 2, 4: gap × L = 0.5 and 2, so c' = 1 exactly) are enough; the law and SEs
    cover every depth L >= 2, the left-out ones included, and the smallest seed count."""
    calls = spy_criterion(monkeypatch)
    got = []
    monkeypatch.setattr(nf, "power_report", lambda *a: got.append(a) or power.power_report(*a))
    s = series([0.75, 0.5, 1.0, 1.0 + 2.0 ** -9], [0.0] * 4, depths=(2, 4, 8, 16), n=[3, 4, 3, 5])
    pts = nf.gap_points(s, FIT)
    assert pts["kept"].tolist() == [True, True, False, False]
    pw = nf.power_11(s, FIT, pts)
    L = [2.0, 4.0, 8.0, 16.0]
    assert calls == [(L, 1.0, {"se": pts["se"]})] and calls[0][2]["se"] is pts["se"]
    (crit, mean, se, n), = got
    assert mean.tolist() == [0.5, 0.75, 0.875, 0.9375] and se is pts["se"] and n == 3 and type(n) is int
    assert pw == dict(power.power_report(power.criterion_11(L, 1.0, se=pts["se"]), mean, se, 3), L0=1.0, c=1.0)
    assert list(pw)[-2:] == ["L0", "c"]


# ---------------------------------------------------------------- the fit of L0 - C_L and its thresholds


@pytest.mark.parametrize("alpha, r2, a_ok, r2_ok, want", [
    (0.8, 0.99, "ok", "ok", PASS), (1.2, 0.99, "ok", "ok", PASS),
    (math.nextafter(0.8, 0.0), 0.99, "NO", "ok", FAIL), (math.nextafter(1.2, 2.0), 0.99, "NO", "ok", FAIL),
    (1.0, math.nextafter(0.99, 0.0), "ok", "NO", FAIL)])
def test_c11_alpha_window_and_r2_are_inclusive_at_their_boundaries(monkeypatch, alpha, r2, a_ok, r2_ok, want):
    res, _ = world(monkeypatch)
    Stubs(monkeypatch, gaps={JUDGED: gfit(alpha, r2)})
    meas, v, text = nf.c11(res, None)
    assert v == want
    assert {k: meas[LAB][k] for k in ("alpha", "alpha_se", "r2", "fit_status", "verdict")} == {
        "alpha": alpha, "alpha_se": 0.03125, "r2": r2, "fit_status": "ok", "verdict": want}
    shown = f"α={claims.num(alpha)}±0.03125, R²={claims.num(r2)}"
    assert text == detail(f"{LAB} {shown}: α in [0.8, 1.2] {a_ok}, R² >= 0.99 {r2_ok}; {CERTIFIED}{POWER_1} → "
                          f"{'ok' if want == PASS else 'NO'}")


@pytest.mark.parametrize("p, need, want, end", [
    (0.8, 3, FAIL, "(400 simulations of the paper's law with these SEs) → NO"),
    (math.nextafter(0.8, 0.0), 4, INCONCLUSIVE, "(400 simulations of the paper's law with these SEs; 4 seeds would "
                                                "reach 0.8) → INCONCLUSIVE (underpowered: power 0.80 < 0.8)")])
def test_c11_a_fail_with_power_below_0_8_is_inconclusive_and_at_0_8_stays_a_fail(monkeypatch, p, need, want, end):
    res, _ = world(monkeypatch)
    pw = {"power": p, "sims": 400, "seed": 7, "n_seeds": 3, "target": 0.8, "seeds_for_target": need}
    st = Stubs(monkeypatch, gaps={JUDGED: gfit(0.5, 0.999)}, powers={JUDGED: pw})
    meas, v, text = nf.c11(res, None)
    assert v == want and meas[LAB]["verdict"] == want
    assert meas[LAB]["power"] == dict(pw, L0=1.0, c=0.5)
    assert st.power_calls[2] == (JUDGED, [1.0 - 0.5 / L for L in DEEP], [SE] * 6, 3)
    assert text == detail(f"{LAB} α=0.5±0.03125, R²=0.999: α in [0.8, 1.2] NO, R² >= 0.99 ok; {CERTIFIED}"
                          f"power 0.80 {end}")


@pytest.mark.parametrize("R, fail, want, end", [
    (None, None, INCONCLUSIVE, f"INCONCLUSIVE (degenerate fit: alpha on its bound; R_1 - R_64 = 1.477±0: {BEYOND})"),
    ({L: 1.0 for L in DEPTHS}, None, FAIL,
     "NO (degenerate fit: alpha on its bound; the depth effect is absent: R_1 - R_64 = 0±0 within 2 SE)"),
    ({L: 1.0 for L in DEPTHS}, DOUBLING_16, INCONCLUSIVE,
     f"INCONCLUSIVE ({UNCERT}; degenerate fit: alpha on its bound)")])
def test_c11_degenerate_gap_fit(monkeypatch, R, fail, want, end):
    """A degenerate fit of L0 - C_L: INCONCLUSIVE while depth helps (R_1 - R_64 = 1.4766 ± 0), FAIL
    where R is flat, INCONCLUSIVE naming the certificate (and the fit) where a depth fails one."""
    res, _ = world(monkeypatch, R=R, fail=fail)
    Stubs(monkeypatch, gaps={JUDGED: gfit(reason="alpha on its bound")})
    meas, v, text = nf.c11(res, None)
    assert v == want
    assert meas[LAB] == {"certificates": cert_of(res), "L0": 1.0, "loss_fit_status": "ok",
                         "power": dict(report(DEEP, 0.5), L0=1.0, c=0.5), "left_out": [], "alpha": 1.0,
                         "alpha_se": 0.03125, "r2": 0.99, "fit_status": "degenerate", "verdict": want}
    cert = "" if fail else CERTIFIED
    assert text == detail(f"{LAB} α=1±0.03125, R²=0.99: α in [0.8, 1.2] ok, R² >= 0.99 ok; {cert}{POWER_1} → "
                          f"{end}")


def test_c11_certificate_and_seeds_problems_are_both_named(monkeypatch):
    res, _ = world(monkeypatch, fail=DOUBLING_16, drop=[(8, 2)])
    st = Stubs(monkeypatch)
    meas, v, text = nf.c11(res, None)
    assert v == INCONCLUSIVE and meas[LAB]["verdict"] == INCONCLUSIVE
    assert meas[LAB]["certificates"] == cert_of(res) and cert_of(res)["failing"]["doubling"] == [16]
    assert st.power_calls[2][3] == 2 and meas[LAB]["power"] == dict(report(DEEP, 0.5, n=2), L0=1.0, c=0.5)
    assert text == detail(f"{LAB} α=1±0, R²=1: α in [0.8, 1.2] ok, R² >= 0.99 ok; {POWER_1} → INCONCLUSIVE "
                          f"({UNCERT}; seeds: 2 < 3 on the envelope at L=8)")


# ---------------------------------------------------------------- depths with L0 - C_L <= 0


@pytest.mark.parametrize("C, fail, want, at, named, end", [
    ({64: 1.0 + 2.0 ** -8}, None, FAIL, "L=64 -0.003906±0.0009766", [], "NO"),
    ({16: 1.0, 32: 1.0 + 2.0 ** -8, 64: 1.0 + 2.0 ** -8}, None, FAIL,
     "L=32 -0.003906±0.0009766, L=64 -0.003906±0.0009766", [16], "NO"),
    ({16: 1.0, 32: 1.0 + 2.0 ** -8, 64: 1.0 + 2.0 ** -8}, DOUBLING_16, INCONCLUSIVE,
     "L=32 -0.003906±0.0009766, L=64 -0.003906±0.0009766", [16], f"INCONCLUSIVE ({UNCERT})")])
def test_c11_a_depth_below_minus_2_se_fails_naming_it(monkeypatch, C, fail, want, at, named, end):
    res, _ = world(monkeypatch, C=C, fail=fail)
    st = Stubs(monkeypatch)
    meas, v, text = nf.c11(res, None)
    assert v == want and st.gap_calls == [(s, DEEP, [1.0 - 0.5 / L for L in DEEP], 1.0) for s in FIG56_SPECTRA
                                          if s != JUDGED]
    m = meas[LAB]
    assert m["power"]["c"] == pytest.approx(0.5, abs=1e-15)
    assert m == {"certificates": cert_of(res), "L0": 1.0, "loss_fit_status": "ok",
                 "power": dict(report(DEEP, m["power"]["c"]), L0=1.0, c=m["power"]["c"]), "left_out": named,
                 "verdict": want}
    left = f"; left out (L0 - C_L <= 0 within 2 SE): L={', '.join(map(str, named))}" if named else ""
    assert text == detail(f"{LAB} L0 - C_L below -2 SE at {at}{left} → {end}")


@pytest.mark.parametrize("fail, end", [(None, ""), (DOUBLING_16, f"; {UNCERT}")])
def test_c11_fewer_than_4_depths_left_is_inconclusive_naming_those_left_out(monkeypatch, fail, end):
    """L0 - C_L exactly 0 at L = 16, 32 and exactly -2 SE at L = 64: left out, not over; 3 depths left."""
    res, _ = world(monkeypatch, C={16: 1.0, 32: 1.0, 64: 1.0 + 2.0 ** -9}, fail=fail)
    st = Stubs(monkeypatch)
    meas, v, text = nf.c11(res, None)
    assert v == INCONCLUSIVE and [c[0] for c in st.gap_calls] == [s for s in FIG56_SPECTRA if s != JUDGED]
    m = meas[LAB]
    assert m == {"certificates": cert_of(res), "L0": 1.0, "loss_fit_status": "ok",
                 "power": dict(report(DEEP, 0.5), L0=1.0, c=0.5), "left_out": [16, 32, 64], "verdict": INCONCLUSIVE}
    assert all(type(L) is int for L in m["left_out"])
    assert text == detail(f"{LAB} 3 depth(s) with L0 - C_L > 0; left out (L0 - C_L <= 0 within 2 SE): L=16, 32, 64 → "
                          f"INCONCLUSIVE (fewer than 4 depths left{end})")


def test_c11_exactly_4_depths_left_are_fitted_with_the_others_named(monkeypatch):
    res, _ = world(monkeypatch, C={32: 1.0, 64: 1.0})
    st = Stubs(monkeypatch)
    meas, v, text = nf.c11(res, None)
    assert v == PASS
    assert st.gap_calls[2] == (JUDGED, [2.0, 4.0, 8.0, 16.0], [0.75, 0.875, 0.9375, 0.96875], 1.0)
    pw = dict(report(DEEP, 0.5), L0=1.0, c=0.5)
    assert meas[LAB]["left_out"] == [32, 64] and meas[LAB]["power"] == pw and meas[LAB]["verdict"] == PASS
    assert text == detail(f"{LAB} α=1±0, R²=1: α in [0.8, 1.2] ok, R² >= 0.99 ok; left out (L0 - C_L <= 0 within "
                          f"2 SE): L=32, 64; {CERTIFIED}{claims.power_text(pw)} → ok")


# ---------------------------------------------------------------- a missing or degenerate loss fit


DEG = FitResult(L0=0.0, c=1.5, alpha=1.0, alpha_se=0.0625, r2=0.999, status="degenerate", reason="L0 on its bound")


@pytest.mark.parametrize("f, R, fail, want, end", [
    (None, None, None, INCONCLUSIVE, f"no fit → INCONCLUSIVE (no fit; R_1 - R_64 = 1.477±0: {BEYOND})"),
    (DEG, None, None, INCONCLUSIVE, "degenerate fit: L0 on its bound → INCONCLUSIVE (degenerate fit: L0 on its "
                                    f"bound; R_1 - R_64 = 1.477±0: {BEYOND})"),
    (DEG, {L: 1.0 for L in DEPTHS}, None, FAIL, "degenerate fit: L0 on its bound → NO (degenerate fit: L0 on its "
                                                "bound; the depth effect is absent: R_1 - R_64 = 0±0 within 2 SE)"),
    (DEG, {L: 1.0 for L in DEPTHS}, DOUBLING_16, INCONCLUSIVE,
     f"degenerate fit: L0 on its bound → INCONCLUSIVE ({UNCERT}; degenerate fit: L0 on its bound)")])
def test_c11_without_a_well_posed_loss_fit(monkeypatch, f, R, fail, want, end):
    res, _ = world(monkeypatch, R=R, fail=fail)
    st = Stubs(monkeypatch, fits={JUDGED: f})
    meas, v, text = nf.c11(res, None)
    assert v == want and len(st.gap_calls) == 6 and len(st.power_calls) == 6
    assert meas[LAB] == {"certificates": cert_of(res), "L0": None if f is None else 0.0,
                         "loss_fit_status": None if f is None else "degenerate", "verdict": want, "power": None}
    assert list(meas[LAB]) == ["certificates", "L0", "loss_fit_status", "verdict", "power"]
    assert text == detail(f"{LAB} L0 from the loss fit: {end}")


def test_c11_a_non_positive_gap_whose_se_is_unknown_is_inconclusive_not_left_out(monkeypatch):
    """C_64 measured in seed 0 only (1.5: L0 - C_64 = -0.5, ~500 SE(L0) below 0): it PASSed, the depth
    'left out (within 2 SE)'. Now the item says what cannot be told and is INCONCLUSIVE."""
    base, w = base_world(), World()
    w.store = base.store
    for r in base.rows:
        r = dict(r)
        if (r["model"], r["task"], r["k"], r["a"], r["b"], r["L"]) == ("nonlinear", "difficult", 2, *JUDGED, 64):
            r["C"] = 1.5 if r["seed"] == 0 else math.nan
        w.rows.append(r)
        w.R[r["run_id"]] = r["R"]
    use_cert_backend(monkeypatch, CertBackend(w))
    meas, v, text = nf.c11(w.results(), None)
    assert v == INCONCLUSIVE and meas[LAB]["verdict"] == INCONCLUSIVE and meas[LAB]["left_out"] == []
    assert f"{LAB} L0 - C_L <= 0 with no finite SE at L=64 -0.5 → INCONCLUSIVE (within 2 SE or below cannot be told)" in text


def test_c11_unknown_ses_at_two_depths_are_named_together_with_a_certificate_problem(monkeypatch):
    base, w = base_world(), World()
    w.store = base.store
    for r in base.rows:
        r = dict(r)
        if (r["model"], r["task"], r["k"], r["a"], r["b"]) == ("nonlinear", "difficult", 2, *JUDGED) and r["L"] in (32, 64):
            r["C"] = 1.5 if r["seed"] == 0 else math.nan
        w.rows.append(r)
        w.R[r["run_id"]] = r["R"]
    cb = CertBackend(w)
    cb.fail.update(DOUBLING_16)
    use_cert_backend(monkeypatch, cb)
    meas, v, text = nf.c11(w.results(), None)
    assert meas[LAB]["verdict"] == INCONCLUSIVE
    assert (f"{LAB} L0 - C_L <= 0 with no finite SE at L=32 -0.5, L=64 -0.5 → INCONCLUSIVE (within 2 SE or below "
            f"cannot be told; {UNCERT})") in text
