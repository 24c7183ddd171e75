"""Claim 5b (depthscale.experiments.nonlinear_floor: c5b, _row_5b, linear_runs_problem,
comparator_problem) pinned to exact values: the series it reads (nonlinear, difficult, k = 2 from
the results; linear, difficult, k = 2 from the view at the nonlinear geometry d = N = 16, P = 64;
decoy runs of the linear model at its own geometry d = 32, at k = 16, and of the nonlinear model at
k = 16), R_irr read as th.floor(a, b, 2, "nonlinear") (decoy floors for the linear model and
elsewhere), the criterion L0_nonlinear <= L0_linear / 2 at its boundary (inclusive), the blown-up
comparator UNSTABLE_FACTOR × R_irr = 5 at its boundary for the fitted L0 and per seed (both strict),
the plateau R_Lmax used where the linear fit is not usable, degenerate or missing nonlinear fits
(INCONCLUSIVE; FAIL where the depth effect is absent), a non-finite R_irr, the certificate gate (the
real certificates module over CertBackend's made-up per-context losses), the measured dicts, the
missing-run messages and the detail texts. Inputs are made up (tests/claims_world.py, a TEST
FIXTURE); the fits are replaced by chosen FitResults where a test says. R_irr = 2.5, so 2 R_irr = 5
and every boundary value (5, the next float above it, 1.25 = 2.5 / 2) is exact in binary. Each
c5b call judges seven rows: a test puts one case in each row, and pins every row."""

from __future__ import annotations

import math

import pytest

from claims_world import DEPTHS, CertBackend, FakeTheory, World, use_cert_backend
from depthscale.analysis import claims, curves
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS, MissingRuns
from depthscale.base.formatting import label
from depthscale.config.paper import FIG56_SPECTRA, PAPER
from depthscale.experiments import nonlinear_floor as nf
from depthscale.theory.fits import FitResult

GEO = {"d": 16, "P": 64, "N": 16}  # the nonlinear geometry at cpu: where 5b's linear comparator is trained
R_IRR = 2.5  # th.floor(a, b, 2, "nonlinear")["R_irr"] of every spectrum: 2 R_irr = 5
ABOVE = math.nextafter(5.0, math.inf)  # the first float above UNSTABLE_FACTOR × R_irr
LABELS = ["(0,0)", "(0,0.25)", "(0,0.5)", "(0,1)", "(0.25,0)", "(0.5,0)", "(1,0)"]
SP = dict(zip(LABELS, FIG56_SPECTRA))
SHOWN_PAPER = dict(zip(LABELS, ["29.8", "18.2", "11.7", "5.9", "18.3", "11.9", "6.2"]))  # pl / pn, .1f
T1 = PAPER["table1_L0_difficult_k2"]
PAPER_RATIO = {lab: pl / pn for lab, pn, pl in zip(LABELS, T1["nonlinear"], T1["linear"])}
CRITERION = (
    "criterion: L0_nonlinear <= L0_linear / 2, both trained at d=16, P=64, N=16; nonlinear L0 from a well-posed "
    "fit (a degenerate one INCONCLUSIVE, FAIL where R_1 - R_Lmax is within 2 SE); linear L0 fitted where well "
    "posed, else its plateau, every Table 1 spectrum; a row whose linear runs diverged or blew up (per seed: "
    "non-finite, or > 2 × R_irr at the same d, P; R_irr not finite) or whose depths fail a certificate (SPEC §4) "
    "INCONCLUSIVE | ")
UNSTABLE = "linear comparator unstable: {} > 2 × R_irr 2.5 at the same d and P (blown up, not a plateau)"
BEYOND = "a fit needs more depths (beyond L=64, where the curve still bends) or a longer budget"
PLATEAU = "plateau R_64: the linear fit is not usable, "
NO_FIT = object()  # a fits entry: loss_fit returns no fit (None)
DROP = object()  # row(): the key is not in the measured dict


def nonlinear_line(L):
    """The nonlinear loss 1 + 1/L: R_1 - R_64 = 0.984375, SE over its three equal seeds 0."""
    return 1.0 + 1.0 / L


def linear_line(L):
    """The comparator's loss at d = 16, P = 64: 3 + 1/L (plateau R_64 = 3.015625, R_32 = 3.03125)."""
    return 3.0 + 1.0 / L


def world(monkeypatch, nonlinear=None, linear=None, floors=None, fail=None):
    """Every Table 1 spectrum: nonlinear/difficult k=2, seeds 0-2 with equal losses, nonlinear_line
    unless nonlinear[label] = (values, depths); the linear model at GEO, linear_line unless
    linear[label] builds it (a callable of the World); R_irr 2.5 unless floors[label]. Decoys never
    read: the linear model at its own geometry (flat 0.5, and a diverged run at (0,0) L=2), at (0,0)
    the linear model at GEO with k = 16 (flat 9) and the nonlinear model at k = 16 (flat 3), the linear
    model's R_irr (0.25) and FakeTheory's default 1.0 elsewhere. CertBackend breaks `fail`."""
    w, th = World(), FakeTheory()
    for lab, (a, b) in SP.items():
        th.floors[(a, b, 2, "nonlinear")] = {"R_irr": (floors or {}).get(lab, R_IRR), "se": 0.01}
        th.floors[(a, b, 2, "linear")] = {"R_irr": 0.25, "se": 0.01}
        values, depths = (nonlinear or {}).get(lab, (nonlinear_line, None))
        w.series("nonlinear", "difficult", 2, a, b, values, depths=depths, spread=0.0)
        if linear and lab in linear:
            linear[lab](w)
        else:
            w.series("linear", "difficult", 2, a, b, linear_line, fields=GEO)
        w.series("linear", "difficult", 2, a, b, 0.5)
    w.series("linear", "difficult", 16, 0.0, 0.0, 9.0, fields=GEO)
    w.series("nonlinear", "difficult", 16, 0.0, 0.0, 3.0)
    w.add("linear", "difficult", 2, 0.0, 0.0, 2, seed=5, R=50.0, state="diverged")
    cb = CertBackend(w)
    cb.fail.update(fail or {})
    use_cert_backend(monkeypatch, cb)
    return w.results(), th


def fit(L0, reason=""):
    return FitResult(L0=L0, c=1.0, alpha=1.0, alpha_se=0.125, r2=0.99, status="degenerate" if reason else "ok",
                     reason=reason)


def use_fits(monkeypatch, fits=None):
    """c5b's loss_fit: the real series of the results asked; on the difficult task at k = 2 the fit
    fits[(model, label)] (NO_FIT: None), by default L0 = 1 (nonlinear) and 2.5 (linear). Returns the
    calls: (model, task, k, a, b, the view's fields)."""
    calls = []

    def loss_fit(res, model, task, k, a, b, floor=None):
        calls.append((model, task, k, a, b, dict(res.overrides)))
        s, f = curves.loss_fit(res, model, task, k, a, b, floor)
        if (task, k) == ("difficult", 2) and model in ("nonlinear", "linear"):
            f = (fits or {}).get((model, label(a, b)), fit(1.0 if model == "nonlinear" else 2.5))
        return s, None if f is NO_FIT else f
    monkeypatch.setattr(nf, "loss_fit", loss_fit)
    return calls


def passing(lab, L0n="1", L0l="2.5", how="fitted L0", ratio="2.5", good="ok"):
    """A row judged on its ratio (sound comparator, well-posed nonlinear fit, certified)."""
    return (f"{lab} L0 nonlinear {L0n} vs linear {L0l} ({how}): ratio {ratio} (>= 2 {good}; paper's Table 1 "
            f"ratio {SHOWN_PAPER[lab]} compares d=16 with d=128) → {good}")


def detail_of(parts=None):
    """5b's detail: parts[label] where given, else a passing row of the default fits."""
    return CRITERION + "; ".join((parts or {}).get(lab, passing(lab)) for lab in LABELS)


def row(lab, verdict=PASS, **over):
    """A row's measured dict less its certificates: the default fits' numbers, `over` replacing them."""
    m = {"L0_nonlinear": 1.0, "paper_ratio_d16_vs_d128": PAPER_RATIO[lab], "fit_status": "ok", "L0_linear": 2.5,
         "linear_L0_from": "fitted L0", "comparator": "ok", "verdict": verdict, "ratio": 2.5}
    m.update(over)
    return {k: v for k, v in m.items() if v is not DROP}


def check_rows(meas, rows, bad_comparator=(), failing=None):
    """Every row's measured dict: rows[label] (else a passing row(label)); its certificates: the
    nonlinear series' (doubling and construction at every depth, failing where failing[(model,
    label)] says) and, unless the row's comparator runs are bad, the comparator's series beside them
    (doubling only: the linear model is not a softmax stack)."""
    assert list(meas) == LABELS
    for lab in LABELS:
        got = meas[lab].pop("certificates")
        names = {"nonlinear": f"nonlinear/difficult k=2 {lab}", "linear": f"linear/difficult k=2 {lab}"}
        models = ["nonlinear"] + ([] if lab in bad_comparator else ["linear"])
        assert list(got) == [names[m] for m in models]
        for m in models:
            assert got[names[m]]["computed"] == (["doubling", "construction"] if m == "nonlinear" else ["doubling"])
            assert [p["L"] for p in got[names[m]]["per_depth"]] == list(DEPTHS)
            assert got[names[m]]["failing"] == {"doubling": [], "construction": [], "budget": [],
                                                **(failing or {}).get((m, lab), {})}
        assert meas[lab] == rows.get(lab, row(lab)), lab


# ---------------------------------------------------------------- what 5b reads; the ratio criterion


def test_c5b_reads_the_nonlinear_series_and_the_linear_one_at_d16_p64_for_every_table1_spectrum(monkeypatch):
    res, th = world(monkeypatch)
    calls = use_fits(monkeypatch)
    meas, v, detail = nf.c5b(res, th)
    assert v == PASS
    assert calls == [c for a, b in FIG56_SPECTRA for c in (("nonlinear", "difficult", 2, a, b, {}),
                                                            ("linear", "difficult", 2, a, b, GEO))]
    check_rows(meas, {})
    assert detail == detail_of()


def test_c5b_with_the_real_fits_compares_the_fitted_floors_of_the_two_trained_series(monkeypatch):
    res, th = world(monkeypatch)
    meas, v, detail = nf.c5b(res, th)
    assert v == PASS
    m = meas["(0,0)"]
    assert m["L0_nonlinear"] == pytest.approx(1.0, abs=1e-9) and m["L0_linear"] == pytest.approx(3.0, abs=1e-9)
    assert m["ratio"] == pytest.approx(3.0, abs=1e-9) and m["linear_L0_from"] == "fitted L0"
    assert detail == detail_of({lab: passing(lab, L0l="3", ratio="3") for lab in LABELS})


def test_c5b_thresholds_at_their_boundaries_half_the_linear_floor_and_twice_r_irr(monkeypatch):
    """L0_nonlinear = L0_linear / 2 exactly passes, the next float fails; a floor <= 0 has ratio inf
    (0.5 does not); a linear L0 of exactly 2 R_irr = 5 is sound, the next float above blown up."""
    res, th = world(monkeypatch)
    nl = {"(0,0)": 1.25, "(0,0.25)": math.nextafter(1.25, 2.0), "(0,0.5)": 0.0, "(0,1)": -0.5, "(0.25,0)": 0.5}
    use_fits(monkeypatch, {**{("nonlinear", lab): fit(L0) for lab, L0 in nl.items()},
                           ("linear", "(0.5,0)"): fit(5.0), ("linear", "(1,0)"): fit(ABOVE)})
    meas, v, detail = nf.c5b(res, th)
    assert v == FAIL
    check_rows(meas, {
        "(0,0)": row("(0,0)", L0_nonlinear=1.25, ratio=2.0),
        "(0,0.25)": row("(0,0.25)", FAIL, L0_nonlinear=nl["(0,0.25)"], ratio=2.5 / nl["(0,0.25)"]),
        "(0,0.5)": row("(0,0.5)", L0_nonlinear=0.0, ratio=math.inf),
        "(0,1)": row("(0,1)", L0_nonlinear=-0.5, ratio=math.inf),
        "(0.25,0)": row("(0.25,0)", L0_nonlinear=0.5, ratio=5.0),
        "(0.5,0)": row("(0.5,0)", L0_linear=5.0, ratio=5.0),
        "(1,0)": row("(1,0)", INCONCLUSIVE, L0_linear=ABOVE, comparator=UNSTABLE.format("5"), ratio=DROP)})
    assert detail == detail_of({
        "(0,0)": passing("(0,0)", L0n="1.25", ratio="2"),
        "(0,0.25)": passing("(0,0.25)", L0n="1.25", ratio="2", good="NO"),
        "(0,0.5)": passing("(0,0.5)", L0n="0", ratio="inf"),
        "(0,1)": passing("(0,1)", L0n="-0.5", ratio="inf"),
        "(0.25,0)": passing("(0.25,0)", L0n="0.5", ratio="5"),
        "(0.5,0)": passing("(0.5,0)", L0l="5", ratio="5"),
        "(1,0)": f"(1,0) nonlinear L0: 1; linear 5 (fitted L0) → INCONCLUSIVE ({UNSTABLE.format('5')})"})


@pytest.mark.parametrize("L0_lin, R_irr, text", [
    (1.0, math.nan, "R_irr at the same d and P is not finite (nan)"),
    (1.0, math.inf, "R_irr at the same d and P is not finite (inf)"),
    (math.nan, 2.5, "no finite linear L0"), (math.inf, 2.5, "no finite linear L0"),
    (5.0, 2.5, ""), (ABOVE, 2.5, UNSTABLE.format("5")),
    (12.5, 6.0, "linear comparator unstable: 12.5 > 2 × R_irr 6 at the same d and P (blown up, not a plateau)")])
def test_comparator_problem_names_why_the_linear_comparator_cannot_be_used(L0_lin, R_irr, text):
    assert nf.comparator_problem(L0_lin, R_irr) == text


# ---------------------------------------------------------------- unusable fits


def test_c5b_unusable_fits_plateau_for_the_linear_inconclusive_or_fail_for_the_nonlinear(monkeypatch):
    """A linear fit degenerate or missing: its plateau R_64 (the seed mean at the deepest depth). A
    nonlinear fit degenerate or missing: INCONCLUSIVE while depth helps (R_1 - R_64 = 0.984 beyond 2
    SE = 0), FAIL where the loss is flat (0 within 2 SE = 0)."""
    res, th = world(monkeypatch, nonlinear={"(0.25,0)": (2.0, None)})
    use_fits(monkeypatch, {("linear", "(0,0)"): fit(2.5, "alpha on its bound"), ("linear", "(0,0.25)"): NO_FIT,
                           ("nonlinear", "(0,0.5)"): fit(1.0, "alpha on its bound"), ("nonlinear", "(0,1)"): NO_FIT,
                           ("nonlinear", "(0.25,0)"): fit(1.0, "c on its bound")})
    meas, v, detail = nf.c5b(res, th)
    assert v == FAIL
    how = {"(0,0)": PLATEAU + "degenerate fit: alpha on its bound", "(0,0.25)": PLATEAU + "no fit"}
    degenerate = {"L0_nonlinear": None, "fit_status": "degenerate", "ratio": DROP}
    check_rows(meas, {
        **{lab: row(lab, L0_linear=3.015625, linear_L0_from=h, ratio=3.015625) for lab, h in how.items()},
        "(0,0.5)": row("(0,0.5)", INCONCLUSIVE, **degenerate),
        "(0,1)": row("(0,1)", INCONCLUSIVE, L0_nonlinear=None, fit_status=None, ratio=DROP),
        "(0.25,0)": row("(0.25,0)", FAIL, **degenerate)})
    assert detail == detail_of({
        **{lab: passing(lab, L0l="3.016", how=h, ratio="3.016") for lab, h in how.items()},
        "(0,0.5)": ("(0,0.5) nonlinear L0: degenerate fit: alpha on its bound; linear 2.5 (fitted L0) → INCONCLUSIVE "
                    f"(degenerate fit: alpha on its bound; R_1 - R_64 = 0.9844±0: {BEYOND})"),
        "(0,1)": ("(0,1) nonlinear L0: no fit; linear 2.5 (fitted L0) → INCONCLUSIVE (no fit; "
                  f"R_1 - R_64 = 0.9844±0: {BEYOND})"),
        "(0.25,0)": ("(0.25,0) nonlinear L0: degenerate fit: c on its bound; linear 2.5 (fitted L0) → NO (degenerate "
                     "fit: c on its bound; the depth effect is absent: R_1 - R_64 = 0±0 within 2 SE)")})


# ---------------------------------------------------------------- the certificate gate


def test_c5b_failing_certificates_make_rows_inconclusive_naming_each_problem(monkeypatch):
    """The nonlinear series failing doubling at L=64: alone, with a blown-up comparator (both named)
    and with a degenerate fit (named after it); the comparator's series failing doubling at L=4."""
    fail = {("nonlinear", 2, *SP[lab]): {"doubling": [64]} for lab in ("(0,0)", "(0,0.25)", "(0,0.5)")}
    res, th = world(monkeypatch, fail={**fail, ("linear", 2, *SP["(0,1)"]): {"doubling": [4]}})
    use_fits(monkeypatch, {("linear", "(0,0.25)"): fit(6.0), ("nonlinear", "(0,0.5)"): fit(1.0, "too few points")})
    meas, v, detail = nf.c5b(res, th)
    assert v == INCONCLUSIVE
    failing = {**{("nonlinear", lab): {"doubling": [64]} for lab in ("(0,0)", "(0,0.25)", "(0,0.5)")},
               ("linear", "(0,1)"): {"doubling": [4]}}
    check_rows(meas, failing=failing, rows={
        "(0,0)": row("(0,0)", INCONCLUSIVE, ratio=DROP),
        "(0,0.25)": row("(0,0.25)", INCONCLUSIVE, L0_linear=6.0, comparator=UNSTABLE.format("6"), ratio=DROP),
        "(0,0.5)": row("(0,0.5)", INCONCLUSIVE, L0_nonlinear=None, fit_status="degenerate", ratio=DROP),
        "(0,1)": row("(0,1)", INCONCLUSIVE, ratio=DROP)})
    nl = "nonlinear/difficult k=2 {} uncertified: doubling fails at L=64"
    assert detail == detail_of({
        "(0,0)": f"(0,0) nonlinear L0: 1; linear 2.5 (fitted L0) → INCONCLUSIVE ({nl.format('(0,0)')})",
        "(0,0.25)": (f"(0,0.25) nonlinear L0: 1; linear 6 (fitted L0) → INCONCLUSIVE ({nl.format('(0,0.25)')}; "
                     f"{UNSTABLE.format('6')})"),
        "(0,0.5)": ("(0,0.5) nonlinear L0: degenerate fit: too few points; linear 2.5 (fitted L0) → INCONCLUSIVE "
                    f"({nl.format('(0,0.5)')}; degenerate fit: too few points)"),
        "(0,1)": ("(0,1) nonlinear L0: 1; linear 2.5 (fitted L0) → INCONCLUSIVE (linear/difficult k=2 (0,1) "
                  "uncertified: doubling fails at L=4)")})


# ---------------------------------------------------------------- the comparator judged per seed


def bad_linear(w):
    """The comparator at (0,0), seed 0 at linear_line except: L=1 at 9 (above 2 R_irr, but L < 2 is
    not the plateau), L=8 NaN (that depth has no finite run: still never "missing runs"), L=16
    diverged, L=32 infinite; at L=4 seed 1 at 5 (= 2 R_irr: sound), seed 2 the next float above."""
    ids = {}
    for L in DEPTHS:
        R = {1: 9.0, 8: math.nan, 32: math.inf}.get(L, linear_line(L))
        ids[(L, 0)] = w.add("linear", "difficult", 2, 0.0, 0.0, L, seed=0, fields=GEO, R=R,
                            **({"state": "diverged"} if L == 16 else {}))
    ids[(4, 1)] = w.add("linear", "difficult", 2, 0.0, 0.0, 4, seed=1, fields=GEO, R=5.0)
    ids[(4, 2)] = w.add("linear", "difficult", 2, 0.0, 0.0, 4, seed=2, fields=GEO, R=ABOVE)
    return ids


def test_c5b_judges_the_comparator_per_seed_and_without_a_finite_r_irr_never_as_missing_runs(monkeypatch):
    ids = {}
    res, th = world(monkeypatch, linear={"(0,0)": lambda w: ids.update(bad_linear(w))},
                    floors={"(0.25,0)": math.nan})
    use_fits(monkeypatch)
    runs = ("linear comparator diverged or blew up (judged per seed): "
            f"{ids[(4, 2)]} (L=4, seed 2: R=5 > 2 × R_irr 2.5); {ids[(8, 0)]} (L=8, seed 0: R not finite); "
            f"{ids[(16, 0)]} (L=16, seed 0: diverged); {ids[(32, 0)]} (L=32, seed 0: R not finite)")
    no_r_irr = "R_irr at the same d and P is not finite (nan): the comparator cannot be judged"
    lin = res.view(**GEO)
    assert nf.linear_runs_problem(lin, 0.0, 0.0, R_IRR) == runs
    assert nf.linear_runs_problem(lin, 0.0, 0.25, R_IRR) == ""
    assert nf.linear_runs_problem(lin, 0.25, 0.0, math.nan) == no_r_irr
    meas, v, detail = nf.c5b(res, th)
    assert v == INCONCLUSIVE
    named = {lab: {"L0_nonlinear": 1.0, "paper_ratio_d16_vs_d128": PAPER_RATIO[lab], "fit_status": "ok",
                   "verdict": INCONCLUSIVE, "comparator": text}
             for lab, text in (("(0,0)", runs), ("(0.25,0)", no_r_irr))}
    check_rows(meas, named, bad_comparator=named)
    assert detail == detail_of({"(0,0)": f"(0,0) → INCONCLUSIVE ({runs})",
                                "(0.25,0)": f"(0.25,0) → INCONCLUSIVE ({no_r_irr})"})


# ---------------------------------------------------------------- missing runs


def test_c5b_missing_nonlinear_runs_name_the_cell(monkeypatch):
    res, th = world(monkeypatch, nonlinear={"(0,0.5)": (nonlinear_line, DEPTHS[:-1])})
    with pytest.raises(MissingRuns) as e:
        nf.c5b(res, th)
    assert str(e.value) == "missing runs: 1 cell(s): nonlinear/difficult k=2 (0,0.5) L=64"


def test_c5b_missing_comparator_runs_name_the_cell_at_the_nonlinear_geometry(monkeypatch):
    """The linear runs at its own geometry (d = 32) are there: not read. A sound comparator (3.03 at
    L=32 under 2 R_irr = 5) with a depth missing is "missing runs"; under R_irr 1 (FakeTheory's
    default) or 0.25 (the linear model's floor) it would be a blown-up row instead."""
    def short(w):
        w.series("linear", "difficult", 2, 0.0, 1.0, linear_line, depths=DEPTHS[:-1], fields=GEO)
    res, th = world(monkeypatch, linear={"(0,1)": short})
    with pytest.raises(MissingRuns) as e:
        nf.c5b(res, th)
    assert str(e.value) == ("missing runs: 1 cell(s): linear (d=16, P=64, N=16)/difficult k=2 (0,1) L=64 (the store "
                            "holds runs of another recipe there: not read)")


def test_c5b_certifies_the_comparators_own_runs_at_d16_p64_not_the_linear_models_geometry(monkeypatch):
    """The gate read `res` for the linear series, i.e. the linear model's own geometry (d = 32 at cpu, flat and
    certified here), not the d = 16, P = 64 runs the row compares: a comparator rising at L = 64 (its doubling
    certificate failing) PASSed. Now the row is INCONCLUSIVE naming the comparator's certificate."""
    def rising(w):  # the comparator at GEO: 2 up to L = 32, 4 at L = 64 (not above 2 R_irr = 5: no blow-up)
        w.series("linear", "difficult", 2, 0.0, 0.0, lambda L: 4.0 if L == 64 else 2.0, fields=GEO)
    res, th = world(monkeypatch, linear={"(0,0)": rising})
    meas, v, detail = nf.c5b(res, th)
    m = meas["(0,0)"]
    assert m["verdict"] == INCONCLUSIVE and v == INCONCLUSIVE
    assert m["certificates"]["linear/difficult k=2 (0,0)"]["failing"]["doubling"] == [64]
    assert "linear/difficult k=2 (0,0) uncertified: doubling fails at L=64" in detail.split("(0,0.25)")[0]
    _, problem = claims.gate(res, [("linear", "difficult", 2, 0.0, 0.0, None)])
    assert problem == ""  # the linear model's own geometry passes: reading it was the bug
    assert all(meas[lab]["verdict"] == PASS for lab in LABELS[1:])
