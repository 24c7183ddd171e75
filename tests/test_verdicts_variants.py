"""Claims 8a, 8b and 9 (depthscale.experiments.variants: c8a, c8b, c9) pinned to exact values: the
series each claim reads (k = 2 or 16, spectrum (0,0), each variant's own depths: single_stream and
context_updates up to VARIANT_MAX_DEPTH = 16 at cpu, layer_values up to 64; decoy runs at the other
k, at (1,0), of other models and beyond the depth set), 8a's α window [0.6, 1.3] and R² >= 0.95 at
their boundaries (inclusive), 8b's R_2 <= 1.1 · R_Lmax (inclusive), m < 0 and spread < 0.5 (both
strict) over L >= 2 only, 9's ρ_2 > 0.9 and ρ_16 < 0.3 (both strict) over L >= 2 only, a missing or
degenerate fit (INCONCLUSIVE; FAIL where the depth effect is absent), the certificate gate (the real
certificates module over CertBackend's made-up per-context losses), the measured dicts, the
missing-run messages and the detail texts. Inputs are made up (tests/claims_world.py, a TEST
FIXTURE); 8a's fits are replaced by chosen FitResults where a test says. A boundary value is the
threshold's own float, or the next float beyond it, and every other number is exact in binary
(1.1 = 0.55 / 0.5 exactly), so each boundary test is exact."""

from __future__ import annotations

import math

import pytest

from claims_world import DEPTHS, CertBackend, FakeTheory, World, depths_of, noise, use_cert_backend
from depthscale.analysis import claims, curves
from depthscale.analysis import results as results_mod
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS, MissingRuns
from depthscale.config.records import PRESET_KS
from depthscale.experiments import variants
from depthscale.theory.fits import FitResult

MODELS = ("single_stream", "layer_values", "context_updates")  # claim 8a's items, in this order
VD = (1, 2, 4, 8, 16)  # the depths of single_stream and context_updates at cpu (VARIANT_MAX_DEPTH)
LMAX = DEPTHS[-1]  # layer_values reads every depth, 1 .. 64
C8A = ("criterion: well-posed fit with α in [0.6, 1.3] and R² >= 0.95, each variant (k = 2, (0,0), its own "
       "depths); a degenerate fit INCONCLUSIVE (FAIL where R_1 - R_Lmax is within 2 SE); a variant reading a "
       "depth that fails a certificate (SPEC §4) INCONCLUSIVE | ")
C8B = ("criterion: k = 16: R_2 <= 1.1 · R_Lmax; m < 0 at every L >= 2 and max - min of m over L >= 2 < 0.5; "
       "the depths it reads (L >= 2) failing a certificate (SPEC §4): INCONCLUSIVE | ")
DEEP8B = [2, 4, 8, 16]  # the depths claim 8b reads (R_2, R_Lmax, m at L >= 2)
C9 = "criterion: ρ_2 > 0.9 and ρ_16 < 0.3 at every L >= 2; depths failing a certificate (SPEC §4): INCONCLUSIVE | "
BEYOND = "a fit needs more depths (beyond L={}, where the curve still bends) or a longer budget"


def series_name(model, k=2):
    return f"{model}/difficult k={k} (0,0)"


def ends_se(depths):
    """R_se per depth: 0.03 at the first and 0.04 at the last (their combined SE is 0.05), 0 between."""
    return [0.03] + [0.0] * (len(depths) - 2) + [0.04]


def backend(monkeypatch, w, fail=None):
    """The real certificates module over CertBackend's per-context losses, broken where `fail` says."""
    cb = CertBackend(w)
    cb.fail.update(fail or {})
    use_cert_backend(monkeypatch, cb)
    return cb


def stored(res, model, k=2, read=None):
    return claims.gate(res, [(model, "difficult", k, 0.0, 0.0, read)])[0]


# ---------------------------------------------------------------- claim 8a


def c8a_world(monkeypatch, R=None, fail=None):
    """The three variants at k = 2, (0,0) over their own depths: R_L = 1 + L^-0.9 with 1% noise, or
    R[model] (with ends_se). Decoys, never read: flat losses (a degenerate fit) of each variant at
    k = 16 and at (1,0), of the nonlinear model, and of context_updates beyond its depth set."""
    w = World()
    for model in MODELS:
        Ls = depths_of(model)
        if R and model in R:
            w.series(model, "difficult", 2, 0.0, 0.0, R[model], R_se=ends_se(Ls))
        else:
            w.series(model, "difficult", 2, 0.0, 0.0, [(1 + L ** -0.9) * z for L, z in zip(Ls, noise(len(Ls), 0.01))])
        w.series(model, "difficult", 16, 0.0, 0.0, 2.0)
        w.series(model, "difficult", 2, 1.0, 0.0, 2.0)
    w.series("context_updates", "difficult", 2, 0.0, 0.0, [0.5, 0.25], depths=(32, 64))
    w.series("nonlinear", "difficult", 2, 0.0, 0.0, 2.0)
    cb = backend(monkeypatch, w, fail)
    return w.results(), cb


def fit(alpha=0.75, se=0.125, r2=0.96875, reason=""):
    return FitResult(L0=1.0, c=1.0, alpha=alpha, alpha_se=se, r2=r2, status="degenerate" if reason else "ok",
                     reason=reason)


GOOD = "α=0.75±0.125, R²=0.9688"  # fit()'s numbers as the detail writes them


def use_fits(monkeypatch, fits):
    """c8a's loss_fit: the series asked for, with fits[model] (default fit()) as its fit; returns the calls."""
    calls = []

    def loss_fit(res, model, task, k, a, b, floor=None):
        calls.append((model, task, k, a, b))
        return res.series(model, task, k, a, b), (fits[model] if model in fits else fit())
    monkeypatch.setattr(variants, "loss_fit", loss_fit)
    return calls


def item8a(model, shown=GOOD, a_ok="ok", r2_ok="ok", end="ok"):
    return f"{model} {shown}: α in [0.6, 1.3] {a_ok}, R² >= 0.95 {r2_ok} → {end}"


def detail8a(**items):
    """Claim 8a's detail: items[model] where given, else a passing item of fit()."""
    return C8A + "; ".join(items.get(m, item8a(m)) for m in MODELS)


def meas8a(res, model, verdict, alpha=0.75, se=0.125, r2=0.96875, status="ok"):
    return {"alpha": alpha, "alpha_se": se, "r2": r2, "fit_status": status, "verdict": verdict,
            "certificates": stored(res, model)}


def test_c8a_fits_each_variant_at_k2_origin_over_its_own_depths(monkeypatch):
    res, cb = c8a_world(monkeypatch)
    meas, v, detail = variants.c8a(res, FakeTheory())
    assert v == PASS
    # the gate read every run of the three series, at their own depths, and nothing else
    assert cb.calls == [(m, "difficult", 2, 0.0, 0.0, L) for m in MODELS for L in depths_of(m)]
    assert list(meas) == list(MODELS)
    parts = []
    for model in MODELS:
        s, f = curves.loss_fit(res, model, "difficult", 2, 0.0, 0.0)
        assert s.depths.tolist() == list(VD if model != "layer_values" else DEPTHS)
        assert f.ok and abs(f.alpha - 0.9) < 0.05 and f.r2 > 0.99, f
        assert meas[model] == meas8a(res, model, PASS, f.alpha, f.alpha_se, f.r2)
        parts.append(item8a(model, claims.fitted(f)))
    assert detail == C8A + "; ".join(parts)
    assert [stored(res, m)[series_name(m)]["computed"] for m in MODELS] == [
        ["doubling"], ["doubling", "construction"], ["doubling", "construction"]]


def test_c8a_detail_and_measured_dict_of_three_passing_fits(monkeypatch):
    res, _ = c8a_world(monkeypatch)
    calls = use_fits(monkeypatch, {})
    meas, v, detail = variants.c8a(res, FakeTheory())
    assert v == PASS
    assert calls == [(m, "difficult", 2, 0.0, 0.0) for m in MODELS]
    assert detail == detail8a()
    assert meas == {m: meas8a(res, m, PASS) for m in MODELS}
    assert list(meas["layer_values"]) == ["alpha", "alpha_se", "r2", "fit_status", "verdict", "certificates"]


@pytest.mark.parametrize("alpha, r2, shown", [(0.6, 0.95, "α=0.6±0.125, R²=0.95"),
                                              (1.3, 0.95, "α=1.3±0.125, R²=0.95")])
def test_c8a_alpha_at_either_end_of_the_window_and_r2_exactly_095_pass(monkeypatch, alpha, r2, shown):
    res, _ = c8a_world(monkeypatch)
    use_fits(monkeypatch, {"layer_values": fit(alpha, 0.125, r2)})
    meas, v, detail = variants.c8a(res, FakeTheory())
    assert v == PASS and meas["layer_values"] == meas8a(res, "layer_values", PASS, alpha, 0.125, r2)
    assert detail == detail8a(layer_values=item8a("layer_values", shown))


@pytest.mark.parametrize("alpha, r2, a_ok, r2_ok", [
    (math.nextafter(0.6, 0.0), 0.95, "NO", "ok"), (math.nextafter(1.3, 2.0), 0.95, "NO", "ok"),
    (0.75, math.nextafter(0.95, 0.0), "ok", "NO")])
def test_c8a_alpha_or_r2_one_float_beyond_its_threshold_fails(monkeypatch, alpha, r2, a_ok, r2_ok):
    res, _ = c8a_world(monkeypatch)
    use_fits(monkeypatch, {"layer_values": fit(alpha, 0.125, r2)})
    meas, v, detail = variants.c8a(res, FakeTheory())
    assert v == FAIL and meas["layer_values"] == meas8a(res, "layer_values", FAIL, alpha, 0.125, r2)
    assert [meas[m]["verdict"] for m in MODELS] == [PASS, FAIL, PASS]
    shown = f"α={claims.num(alpha)}±0.125, R²={claims.num(r2)}"
    assert detail == detail8a(layer_values=item8a("layer_values", shown, a_ok, r2_ok, "NO"))


def test_c8a_without_a_fit_is_inconclusive_with_none_in_measured(monkeypatch):
    res, _ = c8a_world(monkeypatch, R={"layer_values": [1 + 1 / L for L in DEPTHS]})  # R_1 - R_64 = 0.9844
    use_fits(monkeypatch, {"layer_values": None})
    meas, v, detail = variants.c8a(res, FakeTheory())
    assert v == INCONCLUSIVE
    assert meas["layer_values"] == {"alpha": None, "alpha_se": None, "r2": None, "fit_status": None,
                                    "verdict": INCONCLUSIVE, "certificates": stored(res, "layer_values")}
    end = f"INCONCLUSIVE (no fit; R_1 - R_64 = 0.9844±0.05: {BEYOND.format(LMAX)})"
    assert detail == detail8a(layer_values=item8a("layer_values", "α=—±—, R²=—", "NO", "NO", end))


def test_c8a_degenerate_fit_is_inconclusive_while_depth_helps(monkeypatch):
    res, _ = c8a_world(monkeypatch, R={"context_updates": [1 + 1 / L for L in VD]})  # R_1 - R_16 = 0.9375
    use_fits(monkeypatch, {"context_updates": fit(reason="alpha on its bound")})
    meas, v, detail = variants.c8a(res, FakeTheory())
    assert v == INCONCLUSIVE
    assert meas["context_updates"] == meas8a(res, "context_updates", INCONCLUSIVE, status="degenerate")
    end = f"INCONCLUSIVE (degenerate fit: alpha on its bound; R_1 - R_16 = 0.9375±0.05: {BEYOND.format(16)})"
    assert detail == detail8a(context_updates=item8a("context_updates", end=end))


def test_c8a_degenerate_fit_without_a_depth_effect_fails(monkeypatch):
    res, _ = c8a_world(monkeypatch, R={"single_stream": [1.0, 0.99, 0.98, 0.96, 0.95]})  # 0.05, within 2 SE
    use_fits(monkeypatch, {"single_stream": fit(0.0, math.nan, 0.5, "alpha on its bound")})
    meas, v, detail = variants.c8a(res, FakeTheory())
    assert v == FAIL
    assert math.isnan(meas["single_stream"]["alpha_se"])
    assert meas["single_stream"] == meas8a(res, "single_stream", FAIL, 0.0, meas["single_stream"]["alpha_se"], 0.5,
                                           "degenerate")
    end = "NO (degenerate fit: alpha on its bound; the depth effect is absent: R_1 - R_16 = 0.05±0.05 within 2 SE)"
    assert detail == detail8a(single_stream=item8a("single_stream", "α=0±nan, R²=0.5", "NO", "NO", end))


def test_c8a_failing_certificates_make_their_variants_inconclusive_naming_them(monkeypatch):
    fail = {("single_stream", 2, 0.0, 0.0): {"doubling": [16]}, ("layer_values", 2, 0.0, 0.0): {"construction": [4]}}
    res, _ = c8a_world(monkeypatch, fail=fail)
    use_fits(monkeypatch, {"layer_values": fit(reason="too few points")})
    meas, v, detail = variants.c8a(res, FakeTheory())
    assert v == INCONCLUSIVE
    assert [meas[m]["verdict"] for m in MODELS] == [INCONCLUSIVE, INCONCLUSIVE, PASS]
    assert claims.gate(res, [("single_stream", "difficult", 2, 0.0, 0.0, None)])[1] == (
        "single_stream/difficult k=2 (0,0) uncertified: doubling fails at L=16")
    assert meas["single_stream"]["certificates"][series_name("single_stream")]["failing"]["doubling"] == [16]
    assert meas["layer_values"]["certificates"] == stored(res, "layer_values")
    assert detail == detail8a(
        single_stream=item8a("single_stream", end="INCONCLUSIVE (single_stream/difficult k=2 (0,0) uncertified: "
                                                  "doubling fails at L=16)"),
        layer_values=item8a("layer_values", end="INCONCLUSIVE (layer_values/difficult k=2 (0,0) uncertified: "
                                                "construction fails at L=4; degenerate fit: too few points)"))


def test_c8a_missing_runs_name_the_cell():
    w = World()
    w.series("single_stream", "difficult", 2, 0.0, 0.0, 1.0, depths=(1, 2, 4, 16))
    w.series("single_stream", "difficult", 16, 0.0, 0.0, 1.0, depths=(8,))  # another k: not read
    for model in MODELS[1:]:
        w.series(model, "difficult", 2, 0.0, 0.0, 1.0)
    with pytest.raises(MissingRuns) as e:
        variants.c8a(w.results(), FakeTheory())
    assert str(e.value) == "missing runs: 1 cell(s): single_stream/difficult k=2 (0,0) L=8"


# ---------------------------------------------------------------- claim 8b

R8B = [1.0, 0.53125, 0.515625, 0.5078125, 0.5]  # over VD: R_2 / R_16 = 1.0625 (and R_2 · R_16 = 0.2656)
M8B = [1.0, -2.25, -2.375, -2.25, -2.0]  # m at L = 1 positive (a decoy: left out); spread 0.375 over L >= 2


def c8b_world(monkeypatch, R=R8B, m=M8B, depths=VD, fail=None):
    """context_updates, k = 16, (0,0) over `depths`; decoys with ratio 4, m 0.5: the k = 2 series,
    (1,0), layer_values at k = 16, and context_updates k = 16 beyond its depth set (L = 32, 64)."""
    w = World()
    w.series("context_updates", "difficult", 16, 0.0, 0.0, R, depths=depths, m=m)
    for model, k, a in (("context_updates", 2, 0.0), ("context_updates", 16, 1.0), ("layer_values", 16, 0.0)):
        w.series(model, "difficult", k, a, 0.0, lambda L: 4.0 if L == 2 else 1.0, m=0.5)
    w.series("context_updates", "difficult", 16, 0.0, 0.0, [0.25, 0.125], depths=(32, 64), m=0.5)
    backend(monkeypatch, w, fail)
    return w.results()


def detail8b(R2="0.5312", ratio="1.062", sat="ok", ms="-2.25, L=4: -2.375, L=8: -2.25, L=16: -2", neg="ok",
             spread="0.375", flat="ok", end=""):
    return (C8B + f"R_2={R2}, R_16=0.5: ratio {ratio} {sat}; m L=2: {ms}: all < 0 {neg}, spread {spread} < 0.5 "
            f"{flat} (paper m ≈ -2.3)" + end)


def test_c8b_reads_k16_origin_at_l_ge_2_with_the_measured_dict(monkeypatch):
    res = c8b_world(monkeypatch)
    meas, v, detail = variants.c8b(res, FakeTheory())
    assert v == PASS
    assert meas == {"R2_over_RLmax": 1.0625, "m": {"L=2": -2.25, "L=4": -2.375, "L=8": -2.25, "L=16": -2.0},
                    "m_spread": 0.375, "certificates": stored(res, "context_updates", 16, DEEP8B)}
    assert list(meas) == ["R2_over_RLmax", "m", "m_spread", "certificates"]
    assert detail == detail8b()


@pytest.mark.parametrize("R2, v, ratio, sat", [(0.55, PASS, "1.1", "ok"),  # 0.55 / 0.5 == 1.1 exactly
                                               (math.nextafter(0.55, 1.0), FAIL, "1.1", "NO")])
def test_c8b_ratio_exactly_1_1_passes_and_one_float_above_fails(monkeypatch, R2, v, ratio, sat):
    res = c8b_world(monkeypatch, R=[1.0, R2, 0.515625, 0.5078125, 0.5])
    meas, got, detail = variants.c8b(res, FakeTheory())
    assert got == v and meas["R2_over_RLmax"] == R2 / 0.5
    assert detail == detail8b(R2=claims.num(R2), ratio=ratio, sat=sat)


@pytest.mark.parametrize("m, ms, neg, spread, flat", [
    ([1.0, -2.25, -2.5, -2.25, -2.0], "-2.25, L=4: -2.5, L=8: -2.25, L=16: -2", "ok", "0.5", "NO"),  # spread 0.5
    ([1.0, -0.25, 0.0, -0.25, -0.125], "-0.25, L=4: 0, L=8: -0.25, L=16: -0.125", "NO", "0.25", "ok"),  # m = 0
    ([1.0, 0.25, -0.25, -0.25, -0.125], "0.25, L=4: -0.25, L=8: -0.25, L=16: -0.125", "NO", "0.5", "NO"),  # L=2
    ([1.0, -2.25, math.nan, -2.25, -2.0], "-2.25, L=4: nan, L=8: -2.25, L=16: -2", "NO", "nan", "NO")])
def test_c8b_m_zero_or_spread_exactly_0_5_or_nan_or_positive_at_l2_fails(monkeypatch, m, ms, neg, spread, flat):
    res = c8b_world(monkeypatch, m=m)
    meas, v, detail = variants.c8b(res, FakeTheory())
    assert v == FAIL
    assert list(meas["m"]) == ["L=2", "L=4", "L=8", "L=16"] and meas["m"]["L=2"] == m[1]
    assert meas["m_spread"] == float(spread) or (spread == "nan" and math.isnan(meas["m_spread"]))
    assert detail == detail8b(ms=ms, neg=neg, spread=spread, flat=flat)


def test_c8b_failing_certificate_is_inconclusive_naming_it(monkeypatch):
    res = c8b_world(monkeypatch, fail={("context_updates", 16, 0.0, 0.0): {"construction": [4]}})
    meas, v, detail = variants.c8b(res, FakeTheory())
    problem = "context_updates/difficult k=16 (0,0) uncertified: construction fails at L=4"
    assert v == INCONCLUSIVE and claims.gate(res, [("context_updates", "difficult", 16, 0.0, 0.0, DEEP8B)])[1] == problem
    assert meas["certificates"] == stored(res, "context_updates", 16, DEEP8B)
    assert meas["certificates"][series_name("context_updates", 16)]["failing"]["construction"] == [4]
    assert detail == detail8b(end=f"; → INCONCLUSIVE ({problem})")


def test_c8b_is_not_gated_by_l1_which_it_does_not_read(monkeypatch):
    """8b reads R_2, R_Lmax and m at L >= 2: a certificate failing at L = 1 alone decided the committed cpu
    report's 8b INCONCLUSIVE (construction fails at L=1) where its m > 0 at every L >= 2 is a FAIL."""
    res = c8b_world(monkeypatch, fail={("context_updates", 16, 0.0, 0.0): {"construction": [1]}})
    meas, v, detail = variants.c8b(res, FakeTheory())
    assert v == PASS and detail == detail8b()
    assert claims.gate(res, [("context_updates", "difficult", 16, 0.0, 0.0, None)])[1]  # all depths: L=1 fails
    res = c8b_world(monkeypatch, m=[1.0, 0.25, 0.5, 0.5, 0.5], fail={("context_updates", 16, 0.0, 0.0): {"construction": [1]}})
    assert variants.c8b(res, FakeTheory())[1] == FAIL


def test_c8b_missing_runs_name_the_cell_or_l2(monkeypatch):
    res = c8b_world(monkeypatch, R=[1.0, 0.55, 0.5, 0.5], m=[0.0, -2.0, -2.0, -2.0], depths=(1, 2, 8, 16))
    with pytest.raises(MissingRuns) as e:
        variants.c8b(res, FakeTheory())
    assert str(e.value) == "missing runs: 1 cell(s): context_updates/difficult k=16 (0,0) L=4"
    # a depth set without L = 2 (a kind registered so): R_2 cannot be read
    real = results_mod.model_depths
    monkeypatch.setattr(results_mod, "model_depths", lambda m: (1, 4, 8, 16) if m == "context_updates" else real(m))
    res = c8b_world(monkeypatch, R=[1.0, 0.5, 0.5, 0.5], m=[0.0, -2.0, -2.0, -2.0], depths=(1, 4, 8, 16))
    with pytest.raises(MissingRuns) as e:
        variants.c8b(res, FakeTheory())
    assert str(e.value) == "missing runs: context_updates/difficult k=16 (0,0) L=2"


# ---------------------------------------------------------------- claim 9

RHO = {2: [0.5, 0.9375, 0.96875, 0.984375, 0.99609375], 16: [0.5, 0.125, 0.25, 0.0625, 0.1875]}  # L = 1: a decoy
RHO_R2 = {2: [0.125, 0.75, 0.875, math.nan, 0.9375], 16: [0.125, 0.96875, 0.5, 0.984375, 0.9375]}
SHOWN = {2: "L=2: 0.9375, L=4: 0.9688, L=8: 0.9844, L=16: 0.9961", 16: "L=2: 0.125, L=4: 0.25, L=8: 0.0625, L=16: 0.1875"}


def c9_world(monkeypatch, rho=None, preset="cpu", depths=None, fail=None):
    """context_updates, (0,0), the preset's k (2 and 16 at cpu) with ρ RHO (rho[k] where given) and fit R² RHO_R2;
    decoys with ρ 0.5: (1,0), layer_values, context_updates beyond its depth set (L = 32, 64)."""
    w = World(preset)
    Ls = depths or depths_of("context_updates", preset)
    for k in PRESET_KS[preset]:
        r = (rho or {}).get(k, RHO[k])
        w.series("context_updates", "difficult", k, 0.0, 0.0, 1.0, depths=Ls, rho=r[:len(Ls)],
                 rho_r2=RHO_R2[k][:len(Ls)])
        if preset == "cpu":
            w.series("context_updates", "difficult", k, 1.0, 0.0, 1.0, rho=0.5, rho_r2=0.0625)
            w.series("layer_values", "difficult", k, 0.0, 0.0, 1.0, rho=0.5, rho_r2=0.0625)
            w.series("context_updates", "difficult", k, 0.0, 0.0, 1.0, depths=(32, 64), rho=0.5, rho_r2=0.0625)
    backend(monkeypatch, w, fail)
    return w.results()


def item9(k, shown=None, ok="ok", end=""):
    r2, paper, test = {2: ("0.75–0.9375", 0.9999, "> 0.9"), 16: ("0.5–0.9844", 0.0989, "< 0.3")}[k]
    return f"ρ_{k} {shown or SHOWN[k]} (fit R² {r2}; paper {paper}) {test} at every L >= 2: {ok}{end}"


def test_c9_reads_rho_of_k2_and_k16_at_l_ge_2_with_the_measured_dict(monkeypatch):
    res = c9_world(monkeypatch)
    meas, v, detail = variants.c9(res, FakeTheory())
    assert v == PASS
    assert list(meas) == ["rho_2", "certificates_2", "rho_16", "certificates_16"]
    assert meas == {"rho_2": {"L=2": 0.9375, "L=4": 0.96875, "L=8": 0.984375, "L=16": 0.99609375},
                    "certificates_2": stored(res, "context_updates", 2, (2, 4, 8, 16)),
                    "rho_16": {"L=2": 0.125, "L=4": 0.25, "L=8": 0.0625, "L=16": 0.1875},
                    "certificates_16": stored(res, "context_updates", 16, (2, 4, 8, 16))}
    assert detail == C9 + item9(2) + "; " + item9(16)


@pytest.mark.parametrize("k, j, value, shown, v", [
    (2, 3, 0.9, "L=8: 0.9", FAIL), (2, 3, math.nextafter(0.9, 1.0), "L=8: 0.9", PASS),
    (16, 2, 0.3, "L=4: 0.3", FAIL), (16, 2, math.nextafter(0.3, 0.0), "L=4: 0.3", PASS),
    (2, 1, math.nan, "L=2: nan", FAIL), (16, 1, 0.5, "L=2: 0.5", FAIL)])
def test_c9_thresholds_are_strict_and_l2_is_judged(monkeypatch, k, j, value, shown, v):
    rho = list(RHO[k])
    rho[j] = value
    res = c9_world(monkeypatch, rho={k: rho})
    meas, got, detail = variants.c9(res, FakeTheory())
    assert got == v
    assert list(meas[f"rho_{k}"]) == ["L=2", "L=4", "L=8", "L=16"]
    got_rho = meas[f"rho_{k}"][f"L={VD[j]}"]
    assert got_rho == value or (math.isnan(value) and math.isnan(got_rho))
    was = SHOWN[k].split(", ")[j - 1]
    items = {2: item9(2), 16: item9(16)}
    items[k] = item9(k, SHOWN[k].replace(was, shown), "ok" if v == PASS else "NO")
    assert detail == C9 + items[2] + "; " + items[16]


def test_c9_certificates_gate_only_the_depths_judged(monkeypatch):
    fail = {("context_updates", 2, 0.0, 0.0): {"construction": [1]},  # L = 1 is not read: still judged
            ("context_updates", 16, 0.0, 0.0): {"construction": [4]}}
    res = c9_world(monkeypatch, fail=fail)
    meas, v, detail = variants.c9(res, FakeTheory())
    assert v == INCONCLUSIVE
    assert meas["certificates_2"][series_name("context_updates")]["failing"] == {
        "doubling": [], "construction": [], "budget": []}
    assert meas["certificates_16"] == stored(res, "context_updates", 16, (2, 4, 8, 16))
    problem = "context_updates/difficult k=16 (0,0) uncertified: construction fails at L=4"
    assert detail == C9 + item9(2) + "; " + item9(16, end=f" → INCONCLUSIVE ({problem})")


def test_c9_missing_runs_name_the_cell_the_preset_or_l_ge_2(monkeypatch):
    res = c9_world(monkeypatch, preset="smoke")
    for check in (variants.c9, variants.c8b):  # k = 16 is not part of the smoke preset
        with pytest.raises(MissingRuns) as e:
            check(res, FakeTheory())
        assert str(e.value) == "missing runs (k=16 is not part of the smoke preset)"
    w = World()
    w.series("context_updates", "difficult", 2, 0.0, 0.0, 1.0, rho=0.95, rho_r2=0.5)
    w.series("context_updates", "difficult", 16, 0.0, 0.0, 1.0, depths=(1, 2, 4, 16), rho=0.125, rho_r2=0.5)
    backend(monkeypatch, w)
    with pytest.raises(MissingRuns) as e:
        variants.c9(w.results(), FakeTheory())
    assert str(e.value) == "missing runs: 1 cell(s): context_updates/difficult k=16 (0,0) L=8"
    # a depth set without L >= 2 (a kind registered so): nothing to judge
    real = results_mod.model_depths
    monkeypatch.setattr(results_mod, "model_depths", lambda m: (1,) if m == "context_updates" else real(m))
    with pytest.raises(MissingRuns) as e:
        variants.c9(c9_world(monkeypatch, depths=(1,)), FakeTheory())
    assert str(e.value) == "missing runs: context_updates/difficult k=2 (0,0) at L >= 2"
