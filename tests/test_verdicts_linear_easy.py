"""Claims 1 and 2 (depthscale.experiments.linear_easy: c1, c2) pinned to exact values: the series
each claim reads (linear, easy, k = 1; decoy runs of other models and tasks at the same spectra),
claim 1's R² >= 0.98 and its window [min(ref) - 2 SE, max(ref) + 2 SE] at their boundaries (both
inclusive), a degenerate fit (INCONCLUSIVE; FAIL where the depth effect is absent), claim 2's order
of the crossing depths (ties allowed, at least one rise, 'never' beyond the deepest depth), the
modes judged (modes <= d), the certificate gate, the measured dicts, the missing-run messages and
the detail texts. Inputs are made up (tests/claims_world.py, a TEST FIXTURE); claim 1's fits are
replaced by chosen FitResults where a test says (SE 0.25 and 0.125, R² 0.98: every boundary is exact
in binary), and the reference slopes come from FakeTheory's pure power laws (fitted exactly)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from claims_world import DEPTHS, FakeCertificates, FakeTheory, World, noise, use_certificates
from depthscale.analysis import claims, curves
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS, MissingRuns
from depthscale.config.paper import FIG3_SPECTRA, FIG3C_SPECTRUM
from depthscale.experiments import linear_easy
from depthscale.theory.fits import FitResult

LMAX = DEPTHS[-1]
DL = np.asarray(DEPTHS, float)
JUDGED = (2.0, 1.0)  # claim 1's item the boundary tests move (ζ = 1, 2ζ = 2, paper α = 1.485)
# (a, b) -> (label, ζ, 2ζ, paper α) as claim 1's detail writes them
SHOWN = {(2.0, 0.5): ("(2,0.5)", "0.75", "1.5", "1.121"), (2.0, 1.0): ("(2,1)", "1", "2", "1.485"),
         (2.0, 1.5): ("(2,1.5)", "1.25", "2.5", "1.684"), (2.0, 2.0): ("(2,2)", "1.5", "3", "1.987"),
         (0.5, 2.0): ("(0.5,2)", "3", "6", "3.31"), (1.0, 2.0): ("(1,2)", "2", "4", "2.552"),
         (1.5, 2.0): ("(1.5,2)", "1.667", "3.333", "2.163")}
C1_CRITERION = (
    "criterion: L0 = 0 fit well posed, R² >= 0.98, α within [min, max] of the fitted slopes of the finite-size "
    "constrained and free references (same d, P, depths) ± 2 SE(α); a degenerate fit INCONCLUSIVE (FAIL where "
    "R_1 - R_Lmax is within 2 SE); an item reading a depth that fails a certificate (SPEC §4) INCONCLUSIVE | ")
C2_CRITERION = (
    "criterion: L* = first depth with R_k/(ω_k λ_k) < 2%, at Fig. 3c's (1,2) and modes [1, 2, 4, 8]: never "
    "decreasing in k and increasing at least once; depths failing a certificate (SPEC §4): INCONCLUSIVE | ")
NEVER = " ('never' = not below 2% up to L=64: counted as beyond the deepest depth)"


class SpectrumTheory(FakeTheory):
    """FakeTheory whose reference slopes depend on the spectrum (any other (a, b): KeyError)."""

    def __init__(self, refs=None):
        super().__init__()
        self.refs = {s: (1.0, 2.0) for s in FIG3_SPECTRA} | (refs or {})
        self.asked: list = []

    def curves(self, a, b):
        self.asked.append((a, b))
        self.ref = self.refs[(a, b)]
        return super().curves(a, b)


def fit(alpha, se, r2, reason=""):
    return FitResult(L0=0.0, c=0.5, alpha=alpha, alpha_se=se, r2=r2, floor=False,
                     status="degenerate" if reason else "ok", reason=reason)


def use_fits(monkeypatch, fits):
    """c1's fits: the real series and fit, replaced by fits[(a, b)] where given."""
    def loss_fit(res, model, task, k, a, b, floor=None):
        s, f = curves.loss_fit(res, model, task, k, a, b, floor)
        return s, fits.get((a, b), f)
    monkeypatch.setattr(linear_easy, "loss_fit", loss_fit)


def c1_world(monkeypatch, R=None, fail=None, decoys=False):
    """linear/easy runs of every fig3 spectrum: a noisy 0.5 L^-1.5 unless R[(a, b)] gives the seed
    means (then with evaluation SEs 0.03 at L=1 and 0.04 at Lmax: their combined SE is 0.05).
    Decoys: flat losses of the linear model on the difficult task and of the nonlinear model."""
    w = World()
    for a, b in FIG3_SPECTRA:
        if R and (a, b) in R:
            w.series("linear", "easy", 1, a, b, R[(a, b)], R_se=[0.03, 0, 0, 0, 0, 0, 0.04])
        else:
            w.series("linear", "easy", 1, a, b, 0.5 * DL ** -1.5 * noise(7, 0.05))
        if decoys:
            w.series("linear", "difficult", 2, a, b, 1.0)
            w.series("nonlinear", "easy", 1, a, b, 1.0)
    fc = FakeCertificates()
    if fail:
        fc.fail[(1, *JUDGED)] = fail
    use_certificates(monkeypatch, fc)
    return w.results(), fc


def c1_item(a, b, shown_fit, r2_ok, window, in_range, end):
    lab, z, z2, paper = SHOWN[(a, b)]
    return (f"{lab} {shown_fit} (R² {r2_ok}); α in [1 - 2 SE, 2 + 2 SE] = {window} {in_range} "
            f"(asymptotic ζ={z}, 2ζ={z2}, paper α={paper}) → {end}")


def judged_item(detail):
    """Claim 1's detail item of JUDGED: from its label to the next item's."""
    assert detail.count("; (2,1) α=") == 1 and detail.count("; (2,1.5) α=") == 1
    return "(2,1) α=" + detail.split("; (2,1) α=")[1].split("; (2,1.5) α=")[0]


OTHERS = {s: fit(1.5, 0.125, 0.99) for s in FIG3_SPECTRA if s != JUDGED}


# ---------------------------------------------------------------- claim 1


def test_c1_reads_linear_easy_fits_of_every_fig3_spectrum_into_the_measured_dict(monkeypatch):
    res, fc = c1_world(monkeypatch, decoys=True)
    th = SpectrumTheory({JUDGED: (1.75, 1.25)})  # constrained above free: [min, max] = [1.25, 1.75]
    meas, v, detail = linear_easy.c1(res, th)
    assert v == PASS
    assert th.asked == list(FIG3_SPECTRA)
    assert fc.calls == [("linear", "easy", 1, a, b) for a, b in FIG3_SPECTRA]
    assert list(meas) == [SHOWN[s][0] for s in FIG3_SPECTRA]
    for (a, b), (lab, *_) in SHOWN.items():
        _, f = curves.loss_fit(res, "linear", "easy", 1, a, b)
        assert f.ok and abs(f.alpha - 1.5) < 0.05 and f.r2 > 0.99
        ref = th.refs[(a, b)]
        assert meas[lab] == {
            "verdict": PASS, "certificates": claims.gate(res, [("linear", "easy", 1, a, b, None)])[0],
            "alpha": f.alpha, "alpha_se": f.alpha_se, "r2": f.r2, "alpha_constrained_finite": ref[0],
            "alpha_free_finite": ref[1], "zeta": linear_easy.zeta(a, b), "two_zeta": linear_easy.two_zeta(a, b),
            "paper_alpha": float(SHOWN[(a, b)][3]), "fit_status": "ok"}
    assert meas["(2,1)"]["zeta"] == 1.0 and meas["(2,1)"]["two_zeta"] == 2.0
    assert "α in [1.25 - 2 SE, 1.75 + 2 SE]" in detail


def test_c1_detail_states_the_criterion_and_every_item_in_spectrum_order(monkeypatch):
    res, _ = c1_world(monkeypatch)
    use_fits(monkeypatch, {**OTHERS, JUDGED: fit(1.5, 0.125, 0.99)})
    meas, v, detail = linear_easy.c1(res, SpectrumTheory())
    assert v == PASS
    items = [c1_item(a, b, "α=1.5±0.125, R²=0.99", "ok", "[0.75, 2.25]", "ok", "ok") for a, b in FIG3_SPECTRA]
    assert detail == C1_CRITERION + "; ".join(items)
    assert {k: meas["(2,1)"][k] for k in ("alpha", "alpha_se", "r2", "fit_status")} == {
        "alpha": 1.5, "alpha_se": 0.125, "r2": 0.99, "fit_status": "ok"}


@pytest.mark.parametrize("alpha, window_end", [(0.5, "lower"), (2.5, "upper")])
def test_c1_alpha_exactly_at_either_end_of_the_window_and_r2_exactly_098_pass(monkeypatch, alpha, window_end):
    res, _ = c1_world(monkeypatch)
    use_fits(monkeypatch, {**OTHERS, JUDGED: fit(alpha, 0.25, 0.98)})
    meas, v, detail = linear_easy.c1(res, SpectrumTheory())
    assert v == PASS and meas["(2,1)"]["verdict"] == PASS
    assert judged_item(detail) == c1_item(*JUDGED, f"α={alpha:g}±0.25, R²=0.98", "ok", "[0.5, 2.5]", "ok", "ok")


@pytest.mark.parametrize("alpha", [0.375, 2.625])  # 2.5 SE beyond min(ref) or max(ref)
def test_c1_alpha_beyond_2_se_of_the_references_fails(monkeypatch, alpha):
    res, _ = c1_world(monkeypatch)
    use_fits(monkeypatch, {**OTHERS, JUDGED: fit(alpha, 0.25, 0.99)})
    meas, v, detail = linear_easy.c1(res, SpectrumTheory())
    assert v == FAIL and meas["(2,1)"]["verdict"] == FAIL
    assert [meas[SHOWN[s][0]]["verdict"] for s in OTHERS] == [PASS] * 6
    assert judged_item(detail) == c1_item(*JUDGED, f"α={alpha:g}±0.25, R²=0.99", "ok", "[0.5, 2.5]", "NO", "NO")


def test_c1_r2_just_below_098_fails_with_alpha_in_the_window(monkeypatch):
    res, _ = c1_world(monkeypatch)
    use_fits(monkeypatch, {**OTHERS, JUDGED: fit(1.5, 0.25, 0.9799999999999999)})
    meas, v, detail = linear_easy.c1(res, SpectrumTheory())
    assert v == FAIL and meas["(2,1)"]["verdict"] == FAIL
    assert judged_item(detail) == c1_item(*JUDGED, "α=1.5±0.25, R²=0.98", "NO", "[0.5, 2.5]", "ok", "NO")


def test_c1_without_a_fit_is_inconclusive_with_none_in_measured(monkeypatch):
    # R positive at L = 1 only: no fit (curves.fit_xy needs 2 points), the depth effect 0.5 ± 0.05
    res, _ = c1_world(monkeypatch, R={JUDGED: [0.5, 0, 0, 0, 0, 0, 0]})
    use_fits(monkeypatch, OTHERS)
    assert curves.loss_fit(res, "linear", "easy", 1, *JUDGED)[1] is None
    meas, v, detail = linear_easy.c1(res, SpectrumTheory())
    assert v == INCONCLUSIVE
    item = meas["(2,1)"]
    assert math.isnan(item.pop("alpha_se"))
    stored = claims.gate(res, [("linear", "easy", 1, *JUDGED, None)])[0]
    assert item == {"verdict": INCONCLUSIVE, "certificates": stored, "alpha": None, "r2": None,
                    "alpha_constrained_finite": 1.0, "alpha_free_finite": 2.0, "zeta": 1.0, "two_zeta": 2.0, "paper_alpha": 1.485, "fit_status": None}
    assert judged_item(detail) == c1_item(
        *JUDGED, "α=—±—, R²=—", "NO", "[nan, nan]", "NO",
        "INCONCLUSIVE (no fit; R_1 - R_64 = 0.5±0.05: a fit needs more depths (beyond L=64, where the curve "
        "still bends) or a longer budget)")


def test_c1_degenerate_fit_is_inconclusive_while_depth_helps(monkeypatch):
    res, _ = c1_world(monkeypatch, R={JUDGED: 0.5 * DL ** -1.0})  # R_1 - R_64 = 0.4922 ± 0.05
    use_fits(monkeypatch, {**OTHERS, JUDGED: fit(1.5, 0.25, 0.99, "alpha on its bound")})
    meas, v, detail = linear_easy.c1(res, SpectrumTheory())
    assert v == INCONCLUSIVE and meas["(2,1)"]["fit_status"] == "degenerate"
    assert judged_item(detail) == c1_item(
        *JUDGED, "α=1.5±0.25, R²=0.99", "ok", "[0.5, 2.5]", "ok",
        "INCONCLUSIVE (degenerate fit: alpha on its bound; R_1 - R_64 = 0.4922±0.05: a fit needs more depths "
        "(beyond L=64, where the curve still bends) or a longer budget)")


def test_c1_degenerate_fit_without_a_depth_effect_fails(monkeypatch):
    res, _ = c1_world(monkeypatch, R={JUDGED: [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.45]})  # 0.05 within 2 SE = 0.1
    use_fits(monkeypatch, {**OTHERS, JUDGED: fit(0.0, math.nan, 0.5, "alpha on its bound")})
    meas, v, detail = linear_easy.c1(res, SpectrumTheory())
    assert v == FAIL and meas["(2,1)"]["verdict"] == FAIL
    assert judged_item(detail) == c1_item(
        *JUDGED, "α=0±nan, R²=0.5", "NO", "[nan, nan]", "NO",
        "NO (degenerate fit: alpha on its bound; the depth effect is absent: R_1 - R_64 = 0.05±0.05 within 2 SE)")


def test_c1_failing_certificate_is_inconclusive_naming_it_and_the_degenerate_fit(monkeypatch):
    res, fc = c1_world(monkeypatch, fail={"doubling": [LMAX]})
    use_fits(monkeypatch, {**OTHERS, JUDGED: fit(1.5, 0.25, 0.99, "too few points")})
    meas, v, detail = linear_easy.c1(res, SpectrumTheory())
    stored, problem = claims.gate(res, [("linear", "easy", 1, *JUDGED, None)])
    assert problem == "linear/easy (2,1) uncertified: doubling fails at L=64"
    assert v == INCONCLUSIVE and meas["(2,1)"]["verdict"] == INCONCLUSIVE
    assert meas["(2,1)"]["certificates"] == stored and list(stored) == ["linear/easy (2,1)"]
    assert stored["linear/easy (2,1)"]["failing"]["doubling"] == [LMAX]
    assert judged_item(detail).endswith(f"→ INCONCLUSIVE ({problem}; degenerate fit: too few points)")


def test_c1_failing_certificate_overrides_a_passing_item(monkeypatch):
    res, fc = c1_world(monkeypatch, fail={"doubling": [2, 4]})
    use_fits(monkeypatch, {**OTHERS, JUDGED: fit(1.5, 0.25, 0.99)})
    meas, v, detail = linear_easy.c1(res, SpectrumTheory())
    problem = claims.gate(res, [("linear", "easy", 1, *JUDGED, None)])[1]
    assert v == INCONCLUSIVE and problem == "linear/easy (2,1) uncertified: doubling fails at L=2, 4"
    assert judged_item(detail) == c1_item(*JUDGED, "α=1.5±0.25, R²=0.99", "ok", "[0.5, 2.5]", "ok",
                                          f"INCONCLUSIVE ({problem})")


class NoCurvesTheory(SpectrumTheory):
    """The theory's reference curves not computed for JUDGED (an empty cache entry)."""

    def curves(self, a, b):
        got = super().curves(a, b)
        return {} if (a, b) == JUDGED else got


def test_c1_without_the_references_slopes_is_inconclusive_never_a_no(monkeypatch):
    """Without the finite-size references there is nothing to judge α against: the window read
    "[nan, nan] NO" and the item FAILed on what was not computed."""
    res, _ = c1_world(monkeypatch)
    use_fits(monkeypatch, {**OTHERS, JUDGED: fit(1.5, 0.125, 0.99)})
    meas, v, detail = linear_easy.c1(res, NoCurvesTheory())
    assert v == INCONCLUSIVE and meas["(2,1)"]["verdict"] == INCONCLUSIVE
    assert all(m["verdict"] == PASS for lab, m in meas.items() if lab != "(2,1)")
    assert math.isnan(meas["(2,1)"]["alpha_constrained_finite"]) and math.isnan(meas["(2,1)"]["alpha_free_finite"])
    assert judged_item(detail).endswith("→ INCONCLUSIVE (no finite-size reference slope (the theory's curves not "
                                        "computed, or their fit not well posed))")


def test_c1_missing_runs_name_the_cells():
    w = World()
    for a, b in FIG3_SPECTRA[1:]:
        w.series("linear", "easy", 1, a, b, 0.5 * DL ** -1.5)
    w.series("linear", "easy", 1, 2.0, 0.5, 0.5 * DL[1:] ** -1.5, depths=DEPTHS[1:])
    w.series("linear", "difficult", 2, 2.0, 0.5, 1.0, depths=(1,))  # another task: not read
    with pytest.raises(MissingRuns) as e:
        linear_easy.c1(w.results(), SpectrumTheory())
    assert str(e.value) == "missing runs: 1 cell(s): linear/easy (2,0.5) L=1"


# ---------------------------------------------------------------- claim 2


def modes_at(a, b, lstar, d=32):
    """mode_R(L): mode k at ω_k λ_k (normalised 1) below depth lstar[k], 1% of it from there (learned:
    below 2%); a mode not in lstar is never learned."""
    lw = np.arange(1, d + 1, dtype=float) ** -(a + b)
    return lambda L: [x * (0.01 if L >= lstar.get(k, math.inf) else 1.0) for k, x in enumerate(lw, 1)]


def c2_world(monkeypatch, lstar, fail=None, preset="cpu", d=32, beside=True):
    """Fig. 3c's spectrum with crossings `lstar`; beside it (2,0.5) with L* = 1,2,4,8, (1.5,2) with
    2,4,never,never, (0.5,2) without mode-wise losses; decoys at (1,2) with the modes reversed."""
    w = World(preset)
    a, b = FIG3C_SPECTRUM
    w.series("linear", "easy", 1, a, b, 0.5, mode_R=modes_at(a, b, lstar, d))
    rev = {1: 8, 2: 4, 4: 2, 8: 1}
    w.series("linear", "difficult", 2, a, b, 0.5, mode_R=modes_at(a, b, rev, d))
    w.series("nonlinear", "easy", 1, a, b, 0.5, mode_R=modes_at(a, b, rev, d))
    if beside:
        w.series("linear", "easy", 1, 2.0, 0.5, 0.5, mode_R=modes_at(2.0, 0.5, {1: 1, 2: 2, 4: 4, 8: 8}, d))
        w.series("linear", "easy", 1, 0.5, 2.0, 0.5)
        w.series("linear", "easy", 1, 1.5, 2.0, 0.5, mode_R=modes_at(1.5, 2.0, {1: 2, 2: 4}, d))
    fc = FakeCertificates()
    if fail:
        fc.fail[(1, a, b)] = fail
    use_certificates(monkeypatch, fc)
    return w.results(), fc


BESIDE = "; beside, not judged (other fig3 spectra): (2,0.5) 1,2,4,8, (1.5,2) 2,4,never,never"


def test_c2_ties_and_a_never_learned_mode_pass_with_the_measured_dict(monkeypatch):
    res, fc = c2_world(monkeypatch, {1: 1, 2: 1, 4: 8})
    meas, v, detail = linear_easy.c2(res, FakeTheory())
    stored = claims.gate(res, [("linear", "easy", 1, *FIG3C_SPECTRUM, None)])[0]
    assert v == PASS
    assert fc.calls[0] == ("linear", "easy", 1, *FIG3C_SPECTRUM)
    assert meas == {"mode 1": 1.0, "mode 2": 1.0, "mode 4": 8.0, "mode 8": None, "certificates": stored}
    assert detail == (C2_CRITERION + "(1,2) modes [1, 2, 4, 8]: L* = 1,1,8,never" + NEVER
                      + "; non-decreasing ok, increases at least once ok → ok" + BESIDE)


def test_c2_two_distinct_crossings_with_ties_pass_without_the_never_note(monkeypatch):
    res, _ = c2_world(monkeypatch, {1: 2, 2: 2, 4: 2, 8: 4}, beside=False)
    meas, v, detail = linear_easy.c2(res, FakeTheory())
    assert v == PASS
    assert meas["mode 8"] == 4.0 and [meas[f"mode {m}"] for m in (1, 2, 4)] == [2.0, 2.0, 2.0]
    assert detail == (C2_CRITERION + "(1,2) modes [1, 2, 4, 8]: L* = 2,2,2,4"
                      + "; non-decreasing ok, increases at least once ok → ok")


@pytest.mark.parametrize("lstar, text, ordered, rises", [
    ({1: 1, 2: 2, 4: 8, 8: 4}, "1,2,8,4", "NO", "ok"),
    ({1: 2, 2: 2, 4: 2, 8: 2}, "2,2,2,2", "ok", "NO"),
    ({1: 1, 2: 4, 4: 2}, "1,4,2,never", "NO", "ok")])
def test_c2_a_decreasing_or_a_flat_order_fails(monkeypatch, lstar, text, ordered, rises):
    res, _ = c2_world(monkeypatch, lstar, beside=False)
    meas, v, detail = linear_easy.c2(res, FakeTheory())
    assert v == FAIL
    assert detail == (C2_CRITERION + f"(1,2) modes [1, 2, 4, 8]: L* = {text}" + (NEVER if "never" in text else "")
                      + f"; non-decreasing {ordered}, increases at least once {rises} → NO")


def test_c2_failing_certificate_is_inconclusive_naming_it(monkeypatch):
    res, fc = c2_world(monkeypatch, {1: 1, 2: 2, 4: 4, 8: 8}, fail={"doubling": [LMAX]}, beside=False)
    meas, v, detail = linear_easy.c2(res, FakeTheory())
    stored, problem = claims.gate(res, [("linear", "easy", 1, *FIG3C_SPECTRUM, None)])
    assert problem == "linear/easy (1,2) uncertified: doubling fails at L=64"
    assert v == INCONCLUSIVE and meas["certificates"] == stored
    assert detail.endswith(f"non-decreasing ok, increases at least once ok → INCONCLUSIVE ({problem})")


def test_c2_at_smoke_judges_mode_8_equal_to_d(monkeypatch):
    res, _ = c2_world(monkeypatch, {1: 1, 2: 2, 4: 4, 8: 4}, preset="smoke", d=8, beside=False)
    meas, v, detail = linear_easy.c2(res, FakeTheory())
    assert v == PASS
    assert list(meas) == ["mode 1", "mode 2", "mode 4", "mode 8", "certificates"] and meas["mode 8"] == 4.0
    assert "modes [1, 2, 4, 8]: L* = 1,2,4,4; " in detail


def test_c2_without_mode_wise_losses_or_with_too_few_modes_is_missing_runs(monkeypatch):
    use_certificates(monkeypatch, FakeCertificates())
    a, b = FIG3C_SPECTRUM
    for mode_R in (None, lambda L: [0.5, 0.01, 0.01, 0.01]):  # none, or modes 1-4 only (mode 8 missing)
        w = World()
        w.series("linear", "easy", 1, a, b, 0.5, **({"mode_R": mode_R} if mode_R else {}))
        with pytest.raises(MissingRuns) as e:
            linear_easy.c2(w.results(), FakeTheory())
        assert str(e.value) == "missing runs: no mode-wise losses for linear/easy (1,2)"


def test_c2_missing_runs_name_the_cells():
    w = World()
    w.series("linear", "easy", 1, *FIG3C_SPECTRUM, 0.5, depths=DEPTHS[:-1], mode_R=modes_at(1.0, 2.0, {}))
    with pytest.raises(MissingRuns) as e:
        linear_easy.c2(w.results(), FakeTheory())
    assert str(e.value) == f"missing runs: 1 cell(s): linear/easy (1,2) L={LMAX}"
