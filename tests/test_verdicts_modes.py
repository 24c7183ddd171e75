"""Claim 7 (depthscale.experiments.modes: _spread, c7) pinned to exact values: the spread is the
mean over L >= 2 (L = 1 left out, L = 2 kept) of max - min across modes; fewer than 2 modes with a
curve give no spread; the claim reads the nonlinear model on the difficult task at fig7's spectrum
(R_k,inf fitted) and the linear model on the easy task at Fig. 3c's (R_k,inf = 0), the modes of
FIG7_MODES and FIG3C_MODES up to the linear width d; nonlinear < linear strictly (equal spreads
FAIL); a mode without a curve fails the claim, named, except a nonlinear mode whose R_k,inf fit is
degenerate (SPEC §9): FAIL where its depth effect R_k(1) - R_k(Lmax) is within 2 SE (exactly 2 SE
included), FAIL where the comparison already fails on the modes with a curve, else INCONCLUSIVE
naming it with its depth effect and what would make the fit possible; a failing certificate, or
fewer than 3 seeds on the envelope, is INCONCLUSIVE naming it. Inputs are made up (tests/claims_world.py, a TEST
FIXTURE; certificates from the real module through CertBackend). Every linear curve is a power of 2
times an exactly representable shape, so its normalised curve R_k(L) / R_k(1) is exact; the
nonlinear curves are exact laws 0.5 + c L^-alpha, whose fitted R_k,inf is 0.5 (to rounding).
Decoy series (other spectra, k, tasks) hold curves that would change every number if read."""

from __future__ import annotations

import math

import numpy as np
import pytest

from claims_world import DEPTHS, CertBackend, FakeTheory, World, use_cert_backend
from depthscale.analysis import claims
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS, MissingRuns
from depthscale.config.paper import FIG3C_SPECTRUM, FIG7_SPECTRUM
from depthscale.experiments import modes

NL_NAME, LI_NAME = "nonlinear/difficult k=2 (1,0)", "linear/easy (1,2)"
READS = [("nonlinear", "difficult", 2, *FIG7_SPECTRUM, None), ("linear", "easy", 1, *FIG3C_SPECTRUM, None)]
D_NL, D_LI = 16, 32  # the cpu preset's widths (nonlinear, linear)
CRITERION = ("criterion: spread (mean over L >= 2 of max - min across modes of the normalised reducible loss) "
             "of the nonlinear model at fig7's spectrum < that of the linear model on the easy task at Fig. 3c's, "
             "every mode shown with a curve: a mode without one FAILs the claim, except a nonlinear mode whose "
             "R_k,inf fit is degenerate (SPEC §9), which is FAIL where its depth effect R_k(1) - R_k(Lmax) is "
             "within 2 SE (SE over seeds), FAIL too where the comparison already fails on the modes with a curve "
             "(a mode added can only widen max - min), else INCONCLUSIVE; either series reading a depth that "
             "fails a certificate (SPEC §4), or the envelope with fewer than 3 seeds: INCONCLUSIVE | ")
MEASURED_KEYS = ["nonlinear_spread", "linear_easy_spread", "nonlinear_modes", "linear_modes",
                 "modes_without_curve", "degenerate_modes", "certificates"]

# nonlinear R_k(L) = 0.5 + c L^-alpha: normalised 1/L for modes 1, 2, 4 and 1/L² for mode 8
NL_PASS = {1: lambda L: 0.5 + 1.0 / L, 2: lambda L: 0.5 + 0.5 / L, 4: lambda L: 0.5 + 2.0 / L,
           8: lambda L: 0.5 + L ** -2.0}
NL_SAME = {m: (lambda L: 0.5 + 1.0 / L) for m in (1, 2, 4, 8)}  # every mode normalised 1/L: spread 0
# linear R_k(L) = 2^-k g_k(L): normalised L^-2, L^-2, 1 (never learned), 1/L
LI_PASS = {1: lambda L: 0.5 * L ** -2.0, 2: lambda L: 0.25 * L ** -2.0, 4: lambda L: 0.0625, 8: lambda L: 2.0 ** -8 / L}
LI_SAME = {m: (lambda L, m=m: 2.0 ** -m / L) for m in (1, 2, 4, 8)}  # every mode normalised 1/L: spread 0
SPREAD_NL = sum(1 / L - 1 / L ** 2 for L in DEPTHS[1:]) / 6  # 0.1085...
SPREAD_LI = sum(1 - 1 / L ** 2 for L in DEPTHS[1:]) / 6  # 0.9444...


def mode_R(d, shown, other):
    """mode_R(L) of width d: mode k's R_k(L) = shown[k](L), other(k, L) for a mode not shown."""
    return lambda L: [shown[k](L) if k in shown else other(k, L) for k in range(1, d + 1)]


def flat(k, L):  # a mode the claim does not show: no well-posed R_k,inf (and never learned)
    return 1.0


def rising(k, L):  # a linear mode the claim does not show: normalised (1 + L) / 2, beyond every other
    return 2.0 ** -k * (1.0 + L)


def decoys(w):
    """Series the claim must not read: the same curves elsewhere with every mode alike (spread 0)."""
    for k, (a, b) in ((2, (0.0, 0.0)), (16, FIG7_SPECTRUM), (2, FIG3C_SPECTRUM)):
        w.series("nonlinear", "difficult", k, a, b, lambda L: 1.0 + 1.0 / L, spread=0.0,
                 mode_R=mode_R(D_NL, NL_SAME, flat))
    w.series("nonlinear", "easy", 1, *FIG7_SPECTRUM, lambda L: 0.01, mode_R=mode_R(D_NL, NL_SAME, flat))
    w.series("linear", "easy", 1, *FIG7_SPECTRUM, lambda L: 0.5 / L, mode_R=mode_R(D_LI, LI_SAME, rising))
    w.series("linear", "difficult", 2, *FIG7_SPECTRUM, lambda L: 1.0 + 0.5 / L, mode_R=mode_R(D_LI, LI_SAME, rising))
    w.series("linear", "difficult", 2, *FIG3C_SPECTRUM, lambda L: 1.0 + 0.5 / L, mode_R=mode_R(D_LI, LI_SAME, rising))


def world(monkeypatch, nl=NL_PASS, li=LI_PASS, nl_depths=None, li_depths=None, nl_seed=None, fail=None,
          nl_seeds=None):
    """Results with the nonlinear series (three equal seeds, so seed means are exact; or one seed per
    entry of `nl_seeds`, its modes) and the linear one the claim reads, beside the decoys; certificates
    through CertBackend, failing where `fail` says."""
    w = World()
    for sd, shown in enumerate(nl_seeds) if nl_seeds else [(nl_seed, nl)]:
        w.series("nonlinear", "difficult", 2, *FIG7_SPECTRUM, lambda L: 1.0 + 1.0 / L, depths=nl_depths, seed=sd,
                 spread=0.0, mode_R=mode_R(D_NL, shown, flat))
    w.series("linear", "easy", 1, *FIG3C_SPECTRUM, lambda L: 0.5 * L ** -1.5, depths=li_depths,
             mode_R=mode_R(D_LI, li, rising))
    decoys(w)
    cb = CertBackend(w)
    cb.fail.update(fail or {})
    use_cert_backend(monkeypatch, cb)
    return w.results()


def spreads_text(sn, sl, ok="ok", nl_modes="[1, 2, 4, 8]", li_modes="[1, 2, 4, 8]"):
    return (f"nonlinear difficult (1,0): spread {sn} (modes {nl_modes}, R_k,inf from well-posed fits); "
            f"linear easy (1,2) (Fig. 3c): spread {sl} (modes {li_modes}, R_k,inf = 0); {sn} < {sl} {ok}")


# ---------------------------------------------------------------- _spread


def linear_series(shown):
    w = World()
    w.series("linear", "easy", 1, *FIG3C_SPECTRUM, lambda L: 0.5 / L, mode_R=mode_R(D_LI, shown, rising))
    return w.results(store=False).series("linear", "easy", 1, *FIG3C_SPECTRUM)


def test_spread_of_two_modes_is_the_mean_over_depths_2_and_up_of_max_minus_min():
    # normalised: mode 2 flat at 1, mode 5 at 1, 0.25, 0.5, 0.75, 1, 1, 1: differences 0.75, 0.5, 0.25
    # at L = 2, 4, 8 (0 at L = 1, left out): 1.5 / 6 (with L = 1: 1.5 / 7; without L = 2: 0.75 / 5)
    g = dict(zip(DEPTHS, (1.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0)))
    s = linear_series({2: lambda L: 0.25, 5: lambda L: 2.0 ** -5 * g[L]})
    assert modes._spread(s, [5, 2], False) == (0.25, [2, 5], {})


def test_spread_with_one_mode_with_a_curve_is_nan_naming_the_mode_without_one():
    s = linear_series({1: lambda L: 0.5, 2: lambda L: 0.0})  # mode 2: R_k(1) = 0
    sp, kept, why = modes._spread(s, [2, 1, 99], False)
    assert math.isnan(sp) and kept == [1] and why == {2: "R_k(1) not positive", 99: "no mode-wise loss"}


# ---------------------------------------------------------------- c7


def test_c7_passes_on_the_fig7_and_fig3c_series_with_exact_numbers_and_texts(monkeypatch):
    res = world(monkeypatch)
    meas, v, detail = modes.c7(res, FakeTheory())
    assert v == PASS
    assert detail == CRITERION + spreads_text("0.1085", "0.9445")
    assert list(meas) == MEASURED_KEYS
    assert meas["nonlinear_spread"] == pytest.approx(SPREAD_NL, rel=1e-12, abs=0)
    assert meas["linear_easy_spread"] == SPREAD_LI
    assert (meas["nonlinear_modes"], meas["linear_modes"], meas["modes_without_curve"]) == ([1, 2, 4, 8],
                                                                                            [1, 2, 4, 8], {})
    stored, problem = claims.gate(res, READS)
    assert problem == "" and list(stored) == [NL_NAME, LI_NAME] and meas["certificates"] == stored


def test_c7_equal_spreads_fail_the_strict_comparison(monkeypatch):
    meas, v, detail = modes.c7(world(monkeypatch, nl=NL_SAME, li=LI_SAME), FakeTheory())
    assert (meas["nonlinear_spread"], meas["linear_easy_spread"]) == (0.0, 0.0)
    assert v == FAIL
    assert detail == CRITERION + spreads_text("0", "0", ok="NO")


def test_c7_larger_nonlinear_spread_fails(monkeypatch):
    meas, v, detail = modes.c7(world(monkeypatch, li=LI_SAME), FakeTheory())
    assert v == FAIL and meas["linear_easy_spread"] == 0.0
    assert detail == CRITERION + spreads_text("0.1085", "0", ok="NO")


def test_c7_a_mode_without_a_curve_fails_naming_it_though_the_spreads_compare_ok(monkeypatch):
    nl = {**NL_PASS, 4: lambda L: 0.5 + 2.0 / L if L <= 2 else 0.0}  # 2 positive points
    li = {**LI_PASS, 8: lambda L: 0.0 if L == 1 else 1.0}  # R_8(1) = 0
    meas, v, detail = modes.c7(world(monkeypatch, nl=nl, li=li), FakeTheory())
    assert v == FAIL
    spread_li3 = sum(1 - 1 / L ** 2 for L in DEPTHS[1:]) / 6  # modes 1, 2, 4 only: unchanged
    assert meas["linear_easy_spread"] == spread_li3 and meas["linear_modes"] == [1, 2, 4]
    assert meas["nonlinear_modes"] == [1, 2, 8]
    assert meas["modes_without_curve"] == {"nonlinear mode 4": "2 positive points (need 3)",
                                           "linear mode 8": "R_k(1) not positive"}
    assert detail == CRITERION + spreads_text("0.1085", "0.9445", nl_modes="[1, 2, 8]", li_modes="[1, 2, 4]") + (
        "; modes without a normalised reducible curve: nonlinear mode 4 (2 positive points (need 3)), "
        "linear mode 8 (R_k(1) not positive) → NO")


def test_c7_shows_the_linear_modes_up_to_the_linear_width_d(monkeypatch):
    asked = []

    def shape(preset, model):
        asked.append((preset, model))
        return {"linear": (4, 64)}[model]  # a linear width d = 4 below its P = 64

    monkeypatch.setattr(modes, "preset_shape", shape)
    meas, v, detail = modes.c7(world(monkeypatch), FakeTheory())
    assert asked == [("cpu", "linear")]
    assert (v, meas["linear_modes"], meas["linear_easy_spread"]) == (PASS, [1, 2, 4], SPREAD_LI)
    assert detail == CRITERION + spreads_text("0.1085", "0.9445", li_modes="[1, 2, 4]")


def test_c7_with_fewer_than_two_modes_with_a_curve_has_no_spread_and_fails(monkeypatch):
    li = {**LI_PASS, **{m: (lambda L: 0.0) for m in (2, 4, 8)}}  # only mode 1 has R_k(1) > 0
    meas, v, detail = modes.c7(world(monkeypatch, li=li), FakeTheory())
    assert v == FAIL and math.isnan(meas["linear_easy_spread"]) and meas["linear_modes"] == [1]
    assert detail.startswith(CRITERION + spreads_text("0.1085", "nan", ok="NO", li_modes="[1]") + "; ")


def test_c7_missing_nonlinear_depth_names_the_cell(monkeypatch):
    res = world(monkeypatch, nl_depths=DEPTHS[:-1])
    with pytest.raises(MissingRuns) as e:
        modes.c7(res, FakeTheory())
    assert str(e.value) == "missing runs: 1 cell(s): nonlinear/difficult k=2 (1,0) L=64"


def test_c7_missing_linear_depth_names_the_cell(monkeypatch):
    res = world(monkeypatch, li_depths=[L for L in DEPTHS if L != 8])
    with pytest.raises(MissingRuns) as e:
        modes.c7(res, FakeTheory())
    assert str(e.value) == "missing runs: 1 cell(s): linear/easy (1,2) L=8"


@pytest.mark.parametrize("series, L, name", [(("nonlinear", 2, *FIG7_SPECTRUM), 16, NL_NAME),
                                              (("linear", 1, *FIG3C_SPECTRUM), 8, LI_NAME)])
def test_c7_a_failing_certificate_is_inconclusive_naming_the_series_and_depth(monkeypatch, series, L, name):
    res = world(monkeypatch, fail={series: {"doubling": [L]}})
    meas, v, detail = modes.c7(res, FakeTheory())
    stored, problem = claims.gate(res, READS)
    assert problem == f"{name} uncertified: doubling fails at L={L}"
    assert v == INCONCLUSIVE
    assert detail == CRITERION + spreads_text("0.1085", "0.9445") + f"; → INCONCLUSIVE ({problem})"
    assert meas["certificates"] == stored and stored[name]["failing"]["doubling"] == [L]


def test_c7_one_seed_on_the_envelope_is_inconclusive_even_when_failing(monkeypatch):
    meas, v, detail = modes.c7(world(monkeypatch, li=LI_SAME, nl_seed=0), FakeTheory())
    problem = f"{NL_NAME} seeds: 1 < 3 on the envelope at L={', '.join(map(str, DEPTHS))}"
    assert v == INCONCLUSIVE
    assert detail == CRITERION + spreads_text("0.1085", "0", ok="NO") + f"; → INCONCLUSIVE ({problem})"


# ---------------------------------------------------------------- c7: a degenerate R_k,inf fit (SPEC §9)

A = 2.0 ** -6  # the SE over seeds of the spiked modes at L = 1 (zero at every other depth)
DEGENERATE = "degenerate fit: no finite SE of alpha"  # a spike at L = 1 on a flat 1: alpha has no finite SE
NEEDS = "a fit needs more depths (beyond L=64, where the curve still bends) or a longer budget"
NO_RESCUE = "NO (the comparison already fails on the modes with a curve: a mode added can only widen max - min)"


def spiked(nl, modes_, excess):
    """Four seeds of `nl` with each mode of `modes_` flat at 1 after L = 1 and, at L = 1, the seeds
    1 + excess + A * (3, -1, -1, -1): seed mean 1 + excess, SE over seeds A there (0 elsewhere), so
    R_k(1) - R_k(64) = excess ± A exactly; its R_k,inf fit is degenerate."""
    return [{**nl, **{m: (lambda L, d=d: 1.0 + excess + A * d if L == 1 else 1.0) for m in modes_}}
            for d in (3.0, -1.0, -1.0, -1.0)]


def degenerate_part(items, end):
    return "; modes whose R_k,inf fit is degenerate: " + ", ".join(items) + f" → {end}"


def test_mode_depth_effect_is_absent_within_2_se_exactly_and_present_beyond_or_unknown(monkeypatch):
    for excess, present, text in ((2 * A, False, "R_8(1) - R_8(64) = 0.03125±0.01562"),
                                  (3 * A, True, "R_8(1) - R_8(64) = 0.04688±0.01562"),
                                  (-2 * A, False, "R_8(1) - R_8(64) = -0.03125±0.01562")):
        res = world(monkeypatch, nl_seeds=spiked(NL_PASS, [8], excess))
        s = res.series("nonlinear", "difficult", 2, *FIG7_SPECTRUM)
        (r1, se1), (r64, se64) = s.arrays["mode_R"][0], s.arrays["mode_R"][-1]
        assert (r1[7], se1[7], r64[7], se64[7]) == (1.0 + excess, A, 1.0, 0.0)  # exact
        assert modes.mode_depth_effect(s, 8) == (present, text)
    w = World()  # one seed: the SE over seeds is unknown, so the depth effect counts as present
    w.series("nonlinear", "difficult", 2, *FIG7_SPECTRUM, lambda L: 1.0, seed=0, mode_R=mode_R(D_NL, NL_PASS, flat))
    s = w.results(store=False).series("nonlinear", "difficult", 2, *FIG7_SPECTRUM)
    assert modes.mode_depth_effect(s, 16) == (True, "R_16(1) - R_16(64) = 0±nan")
    assert modes.mode_depth_effect(s, 17) == (True, "depth effect of mode 17 unknown (no mode-wise loss at 2 depths)")


def test_c7_a_degenerate_mode_whose_depth_effect_is_exactly_2_se_fails(monkeypatch):
    # branch 2: the comparison holds on modes 1, 2, 4 (all normalised 1/L: spread 0), mode 8 spiked by 2 SE
    meas, v, detail = modes.c7(world(monkeypatch, nl_seeds=spiked(NL_PASS, [8], 2 * A)), FakeTheory())
    why = f"{DEGENERATE}; the depth effect is absent: R_8(1) - R_8(64) = 0.03125±0.01562 within 2 SE"
    assert v == FAIL
    assert (meas["nonlinear_spread"], meas["nonlinear_modes"]) == (0.0, [1, 2, 4])
    assert meas["modes_without_curve"] == {"nonlinear mode 8": DEGENERATE}
    assert meas["degenerate_modes"] == {"nonlinear mode 8": {"depth_effect": False, "why": why}}
    assert detail == CRITERION + spreads_text("0", "0.9445", nl_modes="[1, 2, 4]") + degenerate_part(
        [f"nonlinear mode 8 ({why})"], "NO")


def test_c7_a_flat_degenerate_mode_with_equal_seeds_fails_0_within_0(monkeypatch):
    # three equal seeds: SE 0, mode 8 flat at 1: R_8(1) - R_8(64) = 0, not beyond 2 * 0
    res = world(monkeypatch, nl={**NL_PASS, 8: lambda L: 1.0})
    meas, v, detail = modes.c7(res, FakeTheory())
    why = meas["modes_without_curve"]["nonlinear mode 8"]  # the fit's reason (alpha on its bound, its value)
    assert v == FAIL and why.startswith("degenerate fit: ") and list(meas["degenerate_modes"]) == ["nonlinear mode 8"]
    assert detail.endswith(f"nonlinear mode 8 ({why}; the depth effect is absent: R_8(1) - R_8(64) = 0±0 within 2 SE)"
                           " → NO")


def test_c7_a_degenerate_mode_beyond_2_se_is_inconclusive_with_what_would_make_the_fit_possible(monkeypatch):
    # branch 4: the comparison holds on the modes with a curve, mode 8's depth effect 3 SE
    meas, v, detail = modes.c7(world(monkeypatch, nl_seeds=spiked(NL_PASS, [8], 3 * A)), FakeTheory())
    why = f"{DEGENERATE}; R_8(1) - R_8(64) = 0.04688±0.01562: {NEEDS}"
    assert v == INCONCLUSIVE
    assert meas["degenerate_modes"] == {"nonlinear mode 8": {"depth_effect": True, "why": why}}
    assert detail == CRITERION + spreads_text("0", "0.9445", nl_modes="[1, 2, 4]") + degenerate_part(
        [f"nonlinear mode 8 ({why})"], "INCONCLUSIVE")


def test_c7_a_degenerate_mode_cannot_rescue_a_comparison_that_fails_on_the_modes_with_a_curve(monkeypatch):
    # branch 3: modes 1, 2 normalised 1/L, mode 4 1/L²: spread 0.1085 >= the linear 0 (LI_SAME)
    nl = {1: NL_PASS[1], 2: NL_PASS[2], 4: NL_PASS[8]}
    meas, v, detail = modes.c7(world(monkeypatch, li=LI_SAME, nl_seeds=spiked(nl, [8], 3 * A)), FakeTheory())
    assert v == FAIL and meas["degenerate_modes"]["nonlinear mode 8"]["depth_effect"] is True
    assert meas["nonlinear_spread"] == pytest.approx(SPREAD_NL, rel=1e-12, abs=0)
    assert detail == CRITERION + spreads_text("0.1085", "0", ok="NO", nl_modes="[1, 2, 4]") + degenerate_part(
        [f"nonlinear mode 8 ({DEGENERATE}; R_8(1) - R_8(64) = 0.04688±0.01562: {NEEDS})"], NO_RESCUE)


def test_c7_a_mode_without_a_curve_for_another_reason_fails_beside_an_inconclusive_degenerate_one(monkeypatch):
    # branch 1: mode 4 has 2 positive points (not a degenerate fit), mode 8's depth effect 3 SE
    nl = {**NL_PASS, 4: lambda L: 0.5 + 2.0 / L if L <= 2 else 0.0}
    meas, v, detail = modes.c7(world(monkeypatch, nl_seeds=spiked(nl, [8], 3 * A)), FakeTheory())
    assert v == FAIL
    assert meas["modes_without_curve"] == {"nonlinear mode 4": "2 positive points (need 3)",
                                           "nonlinear mode 8": DEGENERATE}
    assert detail == CRITERION + spreads_text("0", "0.9445", nl_modes="[1, 2]") + (
        "; modes without a normalised reducible curve: nonlinear mode 4 (2 positive points (need 3)) → NO"
    ) + degenerate_part([f"nonlinear mode 8 ({DEGENERATE}; R_8(1) - R_8(64) = 0.04688±0.01562: {NEEDS})"],
                        "INCONCLUSIVE")


def test_c7_degenerate_modes_leaving_one_nonlinear_curve_are_inconclusive_not_a_failed_comparison(monkeypatch):
    # modes 2, 4, 8 degenerate with a depth effect: no nonlinear spread, but their curves could give one
    meas, v, detail = modes.c7(world(monkeypatch, nl_seeds=spiked(NL_PASS, [2, 4, 8], 3 * A)), FakeTheory())
    assert v == INCONCLUSIVE and math.isnan(meas["nonlinear_spread"]) and meas["nonlinear_modes"] == [1]
    assert detail == CRITERION + spreads_text("nan", "0.9445", ok="NO", nl_modes="[1]") + degenerate_part(
        [f"nonlinear mode {m} ({DEGENERATE}; R_{m}(1) - R_{m}(64) = 0.04688±0.01562: {NEEDS})" for m in (2, 4, 8)],
        "INCONCLUSIVE")


def test_c7_a_failing_certificate_makes_a_degenerate_fail_inconclusive(monkeypatch):
    res = world(monkeypatch, nl_seeds=spiked(NL_PASS, [8], 2 * A),
                fail={("nonlinear", 2, *FIG7_SPECTRUM): {"doubling": [16]}})
    meas, v, detail = modes.c7(res, FakeTheory())
    problem = f"{NL_NAME} uncertified: doubling fails at L=16"
    assert claims.gate(res, READS)[1] == problem and v == INCONCLUSIVE
    assert detail.endswith("within 2 SE) → NO" + f"; → INCONCLUSIVE ({problem})")


def test_verdict7_decides_a_failed_comparison_from_two_nonlinear_curves_and_fails_one_that_cannot_compare():
    degen = {"nonlinear mode 8": (True, "degenerate fit: x; ...")}
    decided = "NO (the comparison already fails on the modes with a curve: a mode added can only widen max - min)"
    # two curves whose spread already exceeds the linear one's: a third cannot narrow it (FAIL)
    assert modes.verdict7(0.5, 0.25, 2, {}, degen) == (FAIL, decided)
    assert modes.verdict7(0.25, 0.25, 2, {}, degen) == (FAIL, decided)  # equal spreads: not below
    # one curve: no comparison to have failed; the degenerate mode could give one (INCONCLUSIVE)
    assert modes.verdict7(math.nan, 0.25, 1, {}, degen) == (INCONCLUSIVE, "INCONCLUSIVE")
    assert modes.verdict7(math.nan, math.nan, 1, {}, degen) == (FAIL, decided)  # no linear spread at all
    # nothing degenerate, nothing dropped: PASS only where the spreads compare
    assert modes.verdict7(0.125, 0.25, 4, {}, {}) == (PASS, "INCONCLUSIVE")
    assert modes.verdict7(math.nan, 0.25, 1, {}, {}) == (FAIL, "INCONCLUSIVE")


def test_mode_depth_effect_reads_the_first_and_the_last_depth_of_the_mode_asked_for():
    from types import SimpleNamespace

    mean = [np.array([1.0, 2.0]), np.array([0.75, 1.0]), np.array([0.5, 0.5])]  # over L = 1, 4, 16; modes 1, 2
    se = [np.array([0.375, 0.0]), np.array([0.0, 9.0]), np.array([0.5, 0.25])]
    s = SimpleNamespace(depths=np.array([1, 4, 16]), arrays={"mode_R": list(zip(mean, se))})
    assert modes.mode_depth_effect(s, 1) == (False, "R_1(1) - R_1(16) = 0.5±0.625")  # hypot(0.375, 0.5)
    assert modes.mode_depth_effect(s, 2) == (True, "R_2(1) - R_2(16) = 1.5±0.25")  # 1.5 > 2 * 0.25
    two = SimpleNamespace(depths=np.array([1, 16]), arrays={"mode_R": [(mean[0], se[0]), (mean[2], se[2])]})
    assert modes.mode_depth_effect(two, 1) == (False, "R_1(1) - R_1(16) = 0.5±0.625")  # two depths suffice
    unknown = (True, "depth effect of mode 1 unknown (no mode-wise loss at 2 depths)")
    one = SimpleNamespace(depths=np.array([1]), arrays={"mode_R": [(mean[0], se[0])]})
    assert modes.mode_depth_effect(one, 1) == unknown
    assert modes.mode_depth_effect(SimpleNamespace(depths=np.array([1, 16]), arrays={}), 1) == unknown
    assert modes.mode_depth_effect(None, 1) == unknown
    short = SimpleNamespace(depths=np.array([1, 4, 16]), arrays={"mode_R": [(mean[0], se[0]), None, (mean[2][:1], se[2][:1])]})
    assert modes.mode_depth_effect(short, 2) == (True, "depth effect of mode 2 unknown (no mode-wise loss at 2 depths)")
    assert modes.mode_depth_effect(short, 1) == (False, "R_1(1) - R_1(16) = 0.5±0.625")  # L = 4's None not read
