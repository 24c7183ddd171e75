"""Claims 4a, 4b and 4c (depthscale.experiments.linear_difficult: c4a, c4b, c4c, _plateaus) pinned
to exact values: the series each claim reads (linear, difficult, k = 2 at the fig5 spectra for 4a;
every Table 3 row at k = 2 and 16 at Lmax for 4b and 4c; decoy runs of the nonlinear model, of
k = 16 at fig5's spectra and at L = 1, 2 and 32, and decoy floors of other k and models), the
thresholds at their boundaries (R_2 = 1.1 R_Lmax, |plateau - R_irr| = 5% on either side, plateau =
1.05 finite-P floor, plateau = floor - 2 SE: all inclusive), P/d >= 8, the depths the certificate
gate reads, the measured dicts, the missing-run messages and the detail texts. Inputs are made up
(tests/claims_world.py, a TEST FIXTURE); every number is exact in binary (floors 0.625 and 1.25,
SEs 3/64 and 4/64 whose combined SE is 5/64), so each boundary is met exactly."""

from __future__ import annotations

import math

import pytest

from claims_world import DEPTHS, FakeCertificates, FakeTheory, World, use_certificates
from depthscale.analysis import claims
from depthscale.analysis import results as results_module
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS, MissingRuns
from depthscale.config.paper import FIG56_SPECTRA, TABLE3_K16, TABLE3_K2
from depthscale.experiments import linear_difficult as ld

LMAX = DEPTHS[-1]  # 64 at the cpu preset
FIG5_LABELS = ["(0,0)", "(0,0.25)", "(0,0.5)", "(0,1)", "(0.25,0)", "(0.5,0)", "(1,0)"]
ROWS = [(2, a, b) for a, b in TABLE3_K2] + [(16, a, b) for a, b in TABLE3_K16]
ROW_LABELS = ["k=2 (0,0)", "k=2 (0.25,0.25)", "k=2 (0.5,0.5)", "k=2 (1,0.25)", "k=2 (1,1)",
              "k=16 (0.5,0.5)", "k=16 (1,0)", "k=16 (1,0.25)", "k=16 (1.25,0)"]
UPPER, LOWER, WIDE = (2, 0.0, 0.0), (16, 1.25, 0.0), (16, 0.5, 0.5)  # the rows the tests move
FLOOR = {"R_irr": 0.625, "se": 0.03125, "finite_P": 0.625, "finite_P_se": 0.0625}
# k=16 (0.5,0.5): its own floor, twice the others (k=2 (0.5,0.5) reads 0.625: the k is read)
WIDE_FLOOR = {"R_irr": 1.25, "se": 0.0625, "finite_P": 1.25, "finite_P_se": 0.0625}
C4A_CRITERION = ("criterion: R_2 <= 1.1 · R_Lmax (seed means), every fig5 spectrum; an item reading a depth that "
                 "fails a certificate (SPEC §4) INCONCLUSIVE | ")
C4B_CRITERION = ("criterion: |plateau - R_irr| <= 5% of R_irr (plateau: seed-mean R at Lmax; R_irr at the runs' d "
                 "and P) with P/d >= 8, every Table 3 row")
C4C_CRITERION = ("criterion: plateau <= 1.05 · finite-P floor (R_irr with each context's S) and plateau >= floor "
                 "- 2 sqrt(SE_plateau² + SE_floor²), every Table 3 row; ")
CPU_GEO = "; the linear runs' d=32, P=256: P/d=8 (>= 8 ok) | "


def certs(monkeypatch, fail=None):
    """FakeCertificates installed for the claims, failing at (k, a, b) where `fail` says."""
    fc = FakeCertificates()
    fc.fail.update(fail or {})
    use_certificates(monkeypatch, fc)
    return fc


def stored(res, k, a, b, read):
    """The gate's stored certificates of linear/difficult (k, a, b) read at `read`."""
    return claims.gate(res, [("linear", "difficult", k, a, b, read)])[0]


# ---------------------------------------------------------------- claim 4a


def fig5_world(R2=None, skip=None):
    """linear/difficult k=2 runs of every fig5 spectrum at every depth: R_1 = 3, R_2 = 2.2 (or
    R2[spectrum]), R_32 = 2.5 (a decoy for Lmax), else 2 (R_64 = 2: ratio 1.1 exactly); `skip`
    leaves L = 2 out of that spectrum. Decoys: k = 16 and the nonlinear model at L = 2, 32 and
    Lmax, R_2 = 9."""
    w = World()
    for a, b in FIG56_SPECTRA:
        r2 = (R2 or {}).get((a, b), 2.2)
        depths = [L for L in DEPTHS if not ((a, b) == skip and L == 2)]
        w.series("linear", "difficult", 2, a, b, lambda L, r2=r2: {1: 3.0, 2: r2, 32: 2.5}.get(L, 2.0), depths=depths)
        for model, k in (("linear", 16), ("nonlinear", 2)):
            w.series(model, "difficult", k, a, b, [9.0, 1.0, 1.0], depths=(2, 32, LMAX), seed=0)
    return w.results()


def c4a_item(lab, R2="2.2", ratio="1.1", mark="ok"):
    return f"{lab} R_2={R2}, R_64=2, ratio {ratio} {mark}"


def test_c4a_ratio_exactly_1_1_passes_reading_k2_linear_l2_and_lmax(monkeypatch):
    fc = certs(monkeypatch)
    res = fig5_world()
    meas, v, detail = ld.c4a(res, FakeTheory())
    assert v == PASS
    assert meas == dict.fromkeys(FIG5_LABELS, 1.1)
    assert detail == C4A_CRITERION + "; ".join(c4a_item(lab) for lab in FIG5_LABELS)
    assert fc.calls == [("linear", "difficult", 2, a, b) for a, b in FIG56_SPECTRA]


def test_c4a_ratio_is_r2_over_rlmax_and_just_above_1_1_fails(monkeypatch):
    certs(monkeypatch)
    # (0,0.5): 2.25 / 2 = 1.125 > 1.1; (1,0): R_2 = 1, ratio 0.5 (a product would read 2)
    res = fig5_world({(0.0, 0.5): 2.25, (1.0, 0.0): 1.0})
    meas, v, detail = ld.c4a(res, FakeTheory())
    assert v == FAIL
    assert meas == {**dict.fromkeys(FIG5_LABELS, 1.1), "(0,0.5)": 1.125, "(1,0)": 0.5}
    items = [c4a_item(lab) for lab in FIG5_LABELS]
    items[2], items[6] = c4a_item("(0,0.5)", "2.25", "1.125", "NO"), c4a_item("(1,0)", "1", "0.5")
    assert detail == C4A_CRITERION + "; ".join(items)


def test_c4a_gate_reads_l2_and_lmax_only(monkeypatch):
    """A failing certificate at L = 4 or 32 leaves the item judged; at L = 64 (or 2) it is
    INCONCLUSIVE, PASS or FAIL alike, and the measured dict keeps the gate's certificates."""
    certs(monkeypatch, {(2, 0.0, 0.0): {"doubling": [4, 32]}})
    meas, v, detail = ld.c4a(fig5_world(), FakeTheory())
    assert v == PASS and list(meas) == FIG5_LABELS
    assert detail == C4A_CRITERION + "; ".join(c4a_item(lab) for lab in FIG5_LABELS)

    certs(monkeypatch, {(2, 0.0, 0.0): {"doubling": [LMAX]}, (2, 1.0, 0.0): {"doubling": [2, 32]}})
    res = fig5_world({(1.0, 0.0): 2.25})
    meas, v, detail = ld.c4a(res, FakeTheory())
    assert v == INCONCLUSIVE
    assert list(meas) == ["(0,0)", "(0,0) certificates", *FIG5_LABELS[1:], "(1,0) certificates"]
    assert meas["(0,0)"] == 1.1 and meas["(1,0)"] == 1.125
    assert meas["(0,0) certificates"] == stored(res, 2, 0.0, 0.0, (2, LMAX))
    assert meas["(1,0) certificates"] == stored(res, 2, 1.0, 0.0, (2, LMAX))
    assert meas["(1,0) certificates"]["linear/difficult k=2 (1,0)"]["failing"] == {"doubling": [2], "construction": [],
                                                                                  "budget": []}
    items = [c4a_item(lab) for lab in FIG5_LABELS]
    items[0] += " → INCONCLUSIVE (linear/difficult k=2 (0,0) uncertified: doubling fails at L=64)"
    items[6] = c4a_item("(1,0)", "2.25", "1.125", "NO") + (
        " → INCONCLUSIVE (linear/difficult k=2 (1,0) uncertified: doubling fails at L=2)")
    assert detail == C4A_CRITERION + "; ".join(items)


def test_c4a_missing_l2_run_is_named_by_require(monkeypatch):
    certs(monkeypatch)
    with pytest.raises(MissingRuns) as e:
        ld.c4a(fig5_world(skip=(0.5, 0.0)), FakeTheory())
    assert str(e.value) == "missing runs: 1 cell(s): linear/difficult k=2 (0.5,0) L=2"


def test_c4a_depth_set_without_l2_names_the_missing_cell(monkeypatch):
    """A depth set that skips L = 2 (require then expects no run there): c4a names the cell."""
    certs(monkeypatch)
    res = fig5_world()
    monkeypatch.setattr(results_module, "model_depths", lambda model: (1, 4, LMAX))
    with pytest.raises(MissingRuns) as e:
        ld.c4a(res, FakeTheory())
    assert str(e.value) == "missing runs: linear/difficult k=2 (0,0) L=2"


# ---------------------------------------------------------------- Table 3 rows: 4b and 4c


def table3_theory():
    """Floors of every Table 3 row (linear model); decoys for the nonlinear model."""
    th = FakeTheory()
    for k, a, b in ROWS:
        th.floors[(a, b, k, "linear")] = WIDE_FLOOR if (k, a, b) == WIDE else FLOOR
        th.floors[(a, b, k, "nonlinear")] = {"R_irr": 9.0, "se": 9.0, "finite_P": 9.0, "finite_P_se": 9.0}
    return th


def table3_world(plateau=None, preset="cpu", R_se=0.046875, seeds=None):
    """linear/difficult runs of every Table 3 row at L = 1, 2 (decoys 5 and 4) and Lmax: the
    row's floor (1.25 for k=16 (0.5,0.5), else 0.625) or plateau[row], evaluation SE R_se (3/64);
    seeds[row]: those seed values at Lmax instead (one run each). Decoys: the nonlinear model at
    Lmax, and L = 32 of the linear runs."""
    w = World(preset)
    Lmax = DEPTHS[-1] if preset == "cpu" else 4
    for k, a, b in ROWS:
        if preset != "cpu" and k == 16:
            continue
        m = (plateau or {}).get((k, a, b), 1.25 if (k, a, b) == WIDE else 0.625)
        for seed, val in enumerate((seeds or {}).get((k, a, b), [m])):
            w.series("linear", "difficult", k, a, b, [5.0, 4.0, val], depths=(1, 2, Lmax), seed=seed,
                     R_se=[0.5, 0.5, R_se])
        w.series("nonlinear", "difficult", k, a, b, [9.0], depths=(Lmax,))
        if preset == "cpu":
            w.series("linear", "difficult", k, a, b, [7.0], depths=(32,), seed=5)
    return w.results()


def c4b_item(lab, m, r_irr="0.625", se="0.03125", pct="+0.0", mark="ok", L=LMAX):
    return f"{lab} R_{L}={m} vs R_irr={r_irr}±{se}: {pct}% {mark}"


def c4b_items(**moved):
    """Every row's 4b detail item at its floor, `moved` (label -> item) replacing some."""
    items = {lab: c4b_item(lab, "0.625") for lab in ROW_LABELS}
    items["k=16 (0.5,0.5)"] = c4b_item("k=16 (0.5,0.5)", "1.25", "1.25", "0.0625")
    items.update(moved)
    return "; ".join(items.values())


def test_c4b_exactly_5_percent_either_side_passes_with_the_measured_dict(monkeypatch):
    fc = certs(monkeypatch)
    res = table3_world({UPPER: 0.65625, LOWER: 0.59375})  # (m - 0.625) / 0.625 = ±1/20 exactly
    meas, v, detail = ld.c4b(res, table3_theory())
    assert fc.calls == [("linear", "difficult", k, a, b) for k, a, b in ROWS]
    assert v == PASS
    assert list(meas) == [*ROW_LABELS, "P_over_d"] and meas["P_over_d"] == 8.0
    for (k, a, b), lab in zip(ROWS, ROW_LABELS):
        m, fl = {UPPER: 0.65625, LOWER: 0.59375, WIDE: 1.25}.get((k, a, b), 0.625), table3_theory().floor(a, b, k)
        rel = {UPPER: 0.05, LOWER: -0.05}.get((k, a, b), 0.0)
        assert meas[lab] == {"plateau": m, "R_irr": fl["R_irr"], "R_irr_se": fl["se"], "rel_diff": rel,
                             "certificates": stored(res, k, a, b, (LMAX,)), "verdict": PASS}, lab
    assert meas["k=16 (0.5,0.5)"]["R_irr"] == 1.25 and meas["k=2 (0.5,0.5)"]["R_irr"] == 0.625
    assert detail == C4B_CRITERION + CPU_GEO + c4b_items(**{
        "k=2 (0,0)": c4b_item("k=2 (0,0)", "0.6562", pct="+5.0"),
        "k=16 (1.25,0)": c4b_item("k=16 (1.25,0)", "0.5938", pct="-5.0")})


@pytest.mark.parametrize("row, m, pct", [(UPPER, 0.6572265625, "+5.2"), (LOWER, 0.5927734375, "-5.2")])
def test_c4b_just_beyond_5_percent_fails(monkeypatch, row, m, pct):
    certs(monkeypatch)
    meas, v, detail = ld.c4b(table3_world({row: m}), table3_theory())
    lab = ROW_LABELS[ROWS.index(row)]
    assert v == FAIL and meas[lab]["verdict"] == FAIL and meas[lab]["rel_diff"] == (m - 0.625) / 0.625
    assert [meas[x]["verdict"] for x in ROW_LABELS if x != lab] == [PASS] * 8
    assert detail == C4B_CRITERION + CPU_GEO + c4b_items(**{lab: c4b_item(lab, f"{m:.4g}", pct=pct, mark="NO")})


def test_c4b_below_p_over_d_8_fails_every_row_at_smoke(monkeypatch):
    certs(monkeypatch)
    meas, v, detail = ld.c4b(table3_world(preset="smoke"), table3_theory())
    assert v == FAIL and meas["P_over_d"] == 2.0
    assert list(meas) == [*ROW_LABELS[:5], "P_over_d"] and all(meas[x]["verdict"] == FAIL for x in ROW_LABELS[:5])
    assert meas["k=2 (0,0)"]["rel_diff"] == 0.0
    assert detail == (C4B_CRITERION + "; the linear runs' d=8, P=16: P/d=2 (>= 8 NO); k=16 is not part of the "
                      "smoke preset: its items are left out | "
                      + "; ".join(c4b_item(lab, "0.625", L=4) for lab in ROW_LABELS[:5]))


def test_c4b_gate_reads_lmax_only_and_an_uncertified_fail_is_inconclusive(monkeypatch):
    certs(monkeypatch, {(2, 0.0, 0.0): {"doubling": [1, 2]}})
    meas, v, _ = ld.c4b(table3_world(), table3_theory())
    assert v == PASS and meas["k=2 (0,0)"]["certificates"]["linear/difficult k=2 (0,0)"]["failing"] == {
        "doubling": [], "construction": [], "budget": []}

    certs(monkeypatch, {(2, 0.0, 0.0): {"doubling": [LMAX]}, (16, 1.25, 0.0): {"doubling": [2, LMAX]}})
    res = table3_world({LOWER: 0.5})
    meas, v, detail = ld.c4b(res, table3_theory())
    assert v == INCONCLUSIVE
    assert meas["k=2 (0,0)"]["verdict"] == INCONCLUSIVE and meas["k=16 (1.25,0)"]["verdict"] == INCONCLUSIVE
    assert meas["k=16 (1.25,0)"]["certificates"] == stored(res, 16, 1.25, 0.0, (LMAX,))
    assert detail == C4B_CRITERION + CPU_GEO + c4b_items(**{
        "k=2 (0,0)": c4b_item("k=2 (0,0)", "0.625")
        + " → INCONCLUSIVE (linear/difficult k=2 (0,0) uncertified: doubling fails at L=64)",
        "k=16 (1.25,0)": c4b_item("k=16 (1.25,0)", "0.5", pct="-20.0", mark="NO")
        + " → INCONCLUSIVE (linear/difficult k=16 (1.25,0) uncertified: doubling fails at L=64)"})


def test_table3_claims_name_a_missing_lmax_run(monkeypatch):
    certs(monkeypatch)
    w = World()
    for k, a, b in ROWS:
        if (k, a, b) != (16, 1.0, 0.25):
            w.series("linear", "difficult", k, a, b, [0.625], depths=(LMAX,))
    w.series("linear", "difficult", 16, 1.0, 0.25, [0.625, 0.625], depths=(1, 2))
    for claim in (ld.c4b, ld.c4c):
        with pytest.raises(MissingRuns) as e:
            claim(w.results(), table3_theory())
        assert str(e.value) == "missing runs: 1 cell(s): linear/difficult k=16 (1,0.25) L=64"


# ---------------------------------------------------------------- claim 4c


def c4c_item(lab, m, se="0.04688", kind="evaluation SE (one seed)", fp="0.625", fse="0.0625", pct="+0.0",
             above="ok", below_by="0", tol="0.1562", below="ok", end="ok"):
    return (f"{lab} R_64={m}±{se} ({kind}) vs finite-P floor {fp}±{fse}: {pct}% (<= +5% {above}), "
            f"below by {below_by} vs 2 SE {tol} ({below}) → {end}")


def c4c_items(**moved):
    """Every row's 4c detail item at its floor (k=2 (0.5,0.5): two seeds, SE 0.0625), `moved` replacing some."""
    items = {lab: c4c_item(lab, "0.625") for lab in ROW_LABELS}
    items["k=2 (0.5,0.5)"] = c4c_item("k=2 (0.5,0.5)", "0.625", "0.0625", "SE over 2 seeds", tol="0.1768")
    items["k=16 (0.5,0.5)"] = c4c_item("k=16 (0.5,0.5)", "1.25", fp="1.25")
    items.update(moved)
    return "; ".join(items.values())


TWO_SEEDS = {(2, 0.5, 0.5): [0.5625, 0.6875]}  # mean 0.625, SE over seeds 0.0625


def test_c4c_both_boundaries_exact_pass_with_the_measured_dict(monkeypatch):
    certs(monkeypatch)
    # UPPER: 0.65625 = 1.05 · 0.625; LOWER: 0.46875 = 0.625 - 2 hypot(3/64, 4/64) = 0.625 - 5/32
    res = table3_world({UPPER: 0.65625, LOWER: 0.46875}, seeds=TWO_SEEDS)
    meas, v, detail = ld.c4c(res, table3_theory())
    assert v == PASS and list(meas) == ROW_LABELS
    assert meas["k=2 (0,0)"] == {"plateau": 0.65625, "plateau_se": 0.046875, "finite_P_floor": 0.625,
                                 "finite_P_floor_se": 0.0625, "rel_above": 0.05, "two_se": 0.15625,
                                 "certificates": stored(res, 2, 0.0, 0.0, (LMAX,)), "verdict": PASS}
    assert meas["k=16 (1.25,0)"] == {"plateau": 0.46875, "plateau_se": 0.046875, "finite_P_floor": 0.625,
                                     "finite_P_floor_se": 0.0625, "rel_above": -0.25, "two_se": 0.15625,
                                     "certificates": stored(res, 16, 1.25, 0.0, (LMAX,)), "verdict": PASS}
    assert {x: meas["k=2 (0.5,0.5)"][x] for x in ("plateau", "plateau_se", "finite_P_floor_se")} == {
        "plateau": 0.625, "plateau_se": 0.0625, "finite_P_floor_se": 0.0625}
    assert (meas["k=16 (0.5,0.5)"]["finite_P_floor"], meas["k=16 (0.5,0.5)"]["finite_P_floor_se"]) == (1.25, 0.0625)
    assert detail == C4C_CRITERION + "seeds per cell: 1-2 (one seed: the cpu preset's budget) | " + c4c_items(**{
        "k=2 (0,0)": c4c_item("k=2 (0,0)", "0.6562", pct="+5.0"),
        "k=16 (1.25,0)": c4c_item("k=16 (1.25,0)", "0.4688", pct="-25.0", below_by="0.1562")})


@pytest.mark.parametrize("row, m, lab, moved", [
    (UPPER, 0.6572265625, "k=2 (0,0)", dict(m="0.6572", pct="+5.2", above="NO")),
    (LOWER, 0.4677734375, "k=16 (1.25,0)", dict(m="0.4678", pct="-25.2", below_by="0.1572", below="NO"))])
def test_c4c_just_beyond_either_boundary_fails(monkeypatch, row, m, lab, moved):
    certs(monkeypatch)
    meas, v, detail = ld.c4c(table3_world({row: m}, seeds=TWO_SEEDS), table3_theory())
    assert v == FAIL and meas[lab]["verdict"] == FAIL and meas[lab]["rel_above"] == (m - 0.625) / 0.625
    assert [meas[x]["verdict"] for x in ROW_LABELS if x != lab] == [PASS] * 8
    assert detail == C4C_CRITERION + "seeds per cell: 1-2 (one seed: the cpu preset's budget) | " + c4c_items(
        **{lab: c4c_item(lab, **moved, end="NO")})


def test_c4c_gate_reads_lmax_only_and_names_the_certificate(monkeypatch):
    certs(monkeypatch, {(16, 1.25, 0.0): {"doubling": [1, 2]}})
    meas, v, _ = ld.c4c(table3_world(), table3_theory())
    assert v == PASS and meas["k=16 (1.25,0)"]["verdict"] == PASS

    certs(monkeypatch, {(16, 1.25, 0.0): {"doubling": [LMAX]}})
    res = table3_world()
    meas, v, detail = ld.c4c(res, table3_theory())
    assert v == INCONCLUSIVE and meas["k=16 (1.25,0)"]["verdict"] == INCONCLUSIVE
    assert meas["k=16 (1.25,0)"]["certificates"] == stored(res, 16, 1.25, 0.0, (LMAX,))
    assert detail == C4C_CRITERION + "seeds per cell: 1 (one seed: the cpu preset's budget) | " + c4c_items(**{
        "k=2 (0.5,0.5)": c4c_item("k=2 (0.5,0.5)", "0.625"),
        "k=16 (1.25,0)": c4c_item("k=16 (1.25,0)", "0.625", end="INCONCLUSIVE (linear/difficult k=16 (1.25,0) "
                                  "uncertified: doubling fails at L=64)")})


def test_c4c_at_smoke_judges_k2_rows_at_l4_and_says_k16_is_left_out(monkeypatch):
    certs(monkeypatch)
    meas, v, detail = ld.c4c(table3_world(preset="smoke"), table3_theory())
    assert v == PASS and list(meas) == ROW_LABELS[:5]
    assert detail == (C4C_CRITERION + "seeds per cell: 1 (one seed: the smoke preset's budget); k=16 is not part of "
                      "the smoke preset: its items are left out | "
                      + "; ".join(c4c_item(lab, "0.625").replace("R_64", "R_4") for lab in ROW_LABELS[:5]))


def test_plateaus_reads_the_seed_mean_at_lmax_with_its_se_kind_and_seeds(monkeypatch):
    res = table3_world({LOWER: 0.5}, seeds=TWO_SEEDS)
    out = ld._plateaus(res)
    assert [row[:3] for row in out] == ROWS
    assert out[2] == (2, 0.5, 0.5, 0.625, 0.0625, "SE over 2 seeds", LMAX, 2)
    assert out[8] == (16, 1.25, 0.0, 0.5, 0.046875, "evaluation SE (one seed)", LMAX, 1)
    assert out[5][3] == 1.25


def test_c4c_an_unknown_se_leaves_the_lower_side_unjudged_inconclusive_unless_the_plateau_is_above(monkeypatch):
    """One seed without an evaluation SE: 2 SE is NaN, so 'plateau >= floor - 2 SE' cannot be read; the
    row read FAIL ('NO') on what was not measured. A plateau more than 5% above the floor still FAILs:
    that side needs no SE."""
    certs(monkeypatch)
    res = table3_world({UPPER: 0.7}, R_se=math.nan)
    meas, v, detail = ld.c4c(res, table3_theory())
    assert math.isnan(meas["k=2 (0.25,0.25)"]["two_se"]) and meas["k=2 (0.25,0.25)"]["verdict"] == INCONCLUSIVE
    assert meas["k=2 (0,0)"]["verdict"] == FAIL and v == FAIL  # above by 12%: decided without an SE
    assert ("→ INCONCLUSIVE (no finite SE of the plateau or the floor: the lower side cannot be judged)"
            in detail.split("k=2 (0.25,0.25) ")[1].split("; k=2 (0.5,0.5)")[0])
    meas, v, _ = ld.c4c(table3_world(R_se=math.nan), table3_theory())
    assert v == INCONCLUSIVE and {m["verdict"] for m in meas.values()} == {INCONCLUSIVE}
