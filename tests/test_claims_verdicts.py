"""Three-valued verdicts (SPEC §9), counting, and claims that cannot be judged on the wrong runs
(issue 33 item 8): a cell without runs of the current recipe is missing, never read from another
recipe; table1's ratio is blank beside a degenerate L0. Inputs are made up (tests/claims_world.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from claims_world import DEPTHS, FakeTheory, World
from depthscale.analysis import claims
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS
from depthscale.config.paper import FIG14_K16, FIG56_SPECTRA, TOP2_SPECTRA
from depthscale.config.records import Claim, variant_fields
from depthscale.experiments.nonlinear_floor import table1
from depthscale.experiments.registry import check_claim


def test_as_verdict_and_combine():
    assert [claims.as_verdict(x) for x in (True, False, None, "INCONCLUSIVE")] == [PASS, FAIL, INCONCLUSIVE, INCONCLUSIVE]
    with pytest.raises(ValueError, match="maybe"):
        claims.as_verdict("maybe")
    assert claims.combine([PASS, INCONCLUSIVE, FAIL]) == FAIL
    assert claims.combine([PASS, INCONCLUSIVE]) == INCONCLUSIVE
    assert claims.combine([True, True]) == PASS
    assert claims.combine([]) == FAIL  # no items: never a vacuous PASS


@pytest.mark.parametrize("ok,want", [(True, PASS), (False, FAIL), (None, INCONCLUSIVE), ("bogus", FAIL)])
def test_check_writes_verdict_and_pass(ok, want):
    c = Claim("X1", "made up", "criterion", lambda res, th: ({"x": 1}, ok, "criterion: made up | item"), ("fig6",),
              "paper")
    out = claims.check(c, World().results(), FakeTheory())
    assert out["verdict"] == want and out["pass"] is (want == PASS)
    if ok == "bogus":
        assert "error while checking" in out["detail"]


def test_counts_keep_the_three_apart():
    cl = [{"verdict": PASS, "pass": True}, {"verdict": INCONCLUSIVE, "pass": False},
          {"verdict": FAIL, "pass": False}, {"pass": True}]  # the last: an old claims.json row
    assert claims.count(cl) == {PASS: 2, FAIL: 1, INCONCLUSIVE: 1}
    assert claims.count_text(cl) == "2 PASS, 1 FAIL, 1 INCONCLUSIVE of 4"


def _spread_only_world():
    w = World()
    for k, spectra in ((2, TOP2_SPECTRA), (16, FIG14_K16)):
        for a, b in spectra:
            Ls = np.asarray(DEPTHS, float)
            w.series("nonlinear", "difficult", k, a, b, 1.0 + 1.0 / Ls, fields=dict(variant_fields("spread", k)))
    return w


def test_a_claim_never_reads_another_recipes_runs():
    """Issue 33: with only spread runs in the store, 5a passed on them."""
    w = _spread_only_world()
    res = w.results()
    out = check_claim("5a", res, FakeTheory())
    assert out["verdict"] == INCONCLUSIVE and out["measured"] is None, out["detail"]  # missing: never judged
    assert "missing runs" in out["detail"] and "another recipe" in out["detail"], out["detail"]
    assert res.other_recipe
    # the same runs, read as the spread variant they are, are found
    assert res.view(**dict(variant_fields("spread", 2))).series("nonlinear", "difficult", 2, 0.0, 0.0)


def test_table1_ratio_is_blank_beside_a_degenerate_L0():
    w, th = World(), FakeTheory()
    geo = {"d": 16, "P": 64, "N": 16}
    Ls = np.asarray(DEPTHS, float)
    for i, (a, b) in enumerate(FIG56_SPECTRA):
        th.floors[(float(a), float(b), 2, "nonlinear")] = {"R_irr": 2.4, "se": 0.01}
        nl = 2.0 * Ls ** -0.05 if i == 0 else 1.0 + 1.0 / Ls  # (0,0): no floor, L0 on its bound
        w.series("nonlinear", "difficult", 2, a, b, nl)
        w.series("linear", "difficult", 2, a, b, 113.0 if i == 1 else 2.5, fields=geo)
    df = table1(w.results(), th)
    r0, r1, r2 = df.iloc[0], df.iloc[1], df.iloc[2]
    assert math.isnan(r0["ratio_same_geometry_trained"]) and "degenerate" in r0["ratio_note"]
    assert "unstable" in r1["ratio_note"] and "113" in r1["ratio_note"]
    assert r2["ratio_same_geometry_trained"] == pytest.approx(2.5 / r2["L0_nonlinear"]) and r2["ratio_note"].startswith("stands")


def test_shape_verdict_rules():
    """SPEC §9: uncertified -> INCONCLUSIVE naming why (even if the criterion holds); a PASS; a FAIL with
    power < 0.8 -> INCONCLUSIVE underpowered; a FAIL with power >= 0.8 or unknown stays FAIL."""
    low, high = {"power": 0.79, "target": 0.8}, {"power": 0.8, "target": 0.8}
    assert claims.shape_verdict(True, "uncertified: doubling fails at L=8", high) == (
        INCONCLUSIVE, "uncertified: doubling fails at L=8")
    assert claims.shape_verdict(False, "uncertified: x", low)[0] == INCONCLUSIVE
    assert claims.shape_verdict(True, "", low) == (PASS, "")
    assert claims.shape_verdict(False, "", low) == (INCONCLUSIVE, "underpowered: power 0.79 < 0.8")
    assert claims.shape_verdict(False, "", high) == (FAIL, "")
    assert claims.shape_verdict(False, "", {"power": math.nan}) == (FAIL, "")
    assert claims.shape_verdict(False, "", None) == (FAIL, "")


def test_outcome_and_power_texts():
    assert claims.outcome(PASS, "", True) == "ok"
    assert claims.outcome(FAIL, "", False) == "NO"
    assert claims.outcome(INCONCLUSIVE, "underpowered: power 0.1 < 0.8", False) == \
        "INCONCLUSIVE (underpowered: power 0.1 < 0.8)"
    pw = {"power": 0.35, "sims": 400, "target": 0.8, "seeds_for_target": 9}
    assert claims.power_text(pw) == "power 0.35 (400 simulations of the paper's law with these SEs; 9 seeds would reach 0.8)"
    assert "no seed count up to 1024" in claims.power_text(dict(pw, seeds_for_target=None))
    assert claims.power_text(dict(pw, power=0.9)) == "power 0.90 (400 simulations of the paper's law with these SEs)"
    assert claims.power_text(dict(pw, power=0.8)) == "power 0.80 (400 simulations of the paper's law with these SEs)"
    assert claims.power_text({"power": math.nan, "why": "no law fit"}) == "power unknown (no law fit)"
    assert claims.power_text(None) == "power unknown (no finite seed SE)"
    cert = {"computed": ["doubling", "construction"]}
    assert claims.cert_text(cert, "") == "certified (doubling, construction); "
    assert claims.cert_text(cert, "uncertified: x") == "" and claims.cert_text(None, "") == ""


def test_small_texts_of_the_detail():
    """Texts a claim's detail is made of (killing mutmut's survivors in claims.py)."""
    assert [claims.mark(x) for x in (True, False, None)] == ["ok", "NO", "INCONCLUSIVE"]
    assert claims.cells_text(["a", "b"]) == "missing runs: 2 cell(s): a; b"
    assert claims.cells_text(list("abcdef")) == "missing runs: 6 cell(s): a; b; c; d (+2 more)"
    assert claims.cells_text(list("abcd")) == "missing runs: 4 cell(s): a; b; c; d"


def test_engine_texts_and_order():
    """The engine's helpers, each against its exact text (mutmut's survivors in claims.py were
    texts no claim test looked at)."""
    from types import SimpleNamespace as NS

    good, bad = NS(ok=True, reason=""), NS(ok=False, reason="L0 = 0 at its bound 0")
    assert claims.verdict(True, good) == "ok" and claims.verdict(False, good) == "NO"
    assert claims.verdict(False, bad) == "NO (degenerate fit: L0 = 0 at its bound 0)"
    assert claims.verdict(False, None) == "NO (no fit)" and claims.fit_problem(good) == ""
    assert claims.yes(True) == "ok" and claims.yes(False) == "NO"
    res = World().results()  # cpu preset
    assert claims.seeds_text(res, []) == "seeds per cell: none"
    assert claims.seeds_text(res, [1, 1]) == "seeds per cell: 1 (one seed: the cpu preset's budget)"
    assert claims.seeds_text(res, [2, 3]) == "seeds per cell: 2-3 (fewer than 3: the cpu preset's budget)"
    assert claims.seeds_text(res, [3, 3]) == "seeds per cell: 3"
    assert claims.item_label(0.0, 0.25, 2) == "(0,0.25)" and claims.item_label(0.0, 0.25, 16) == "k=16 (0,0.25)"
    ids = ["B2a", "11", "4b", "1", "B1b", "4a", "10", "5c", "B10a", "2"]
    assert sorted(ids, key=claims.claim_order) == ["1", "2", "4a", "4b", "5c", "10", "11", "B1b", "B2a", "B10a"]
    assert claims.claim_order("x") == ("~", 0, "x")
    smoke = World("smoke").results()
    with pytest.raises(claims.MissingRuns, match=r"^missing runs \(k=16,32 is not part of the smoke preset\)$"):
        claims.present_ks(smoke, [(16, ()), (32, ())])
    assert claims.present_ks(smoke, [(2, "x"), (16, "y")]) == [(2, "x")]
    assert claims.left_out(smoke, (16,)) == "; k=16 is not part of the smoke preset: its items are left out"
    assert claims.left_out(res, (16,)) == ""


def test_finite_runs_skips_each_unreadable_R():
    w = World()
    for seed, R in ((0, 1.0), (1, float("nan")), (2, 1.5), (3, 2.5)):
        w.add("nonlinear", "difficult", 2, 0.0, 0.0, 4, seed=seed, R=R, R_se=0.01)
    w.rows[0]["R"] = "bad"  # unreadable: skipped, and the runs after it still read
    got = claims.finite_runs(w.results(), "nonlinear", "difficult", 2, 0.0, 0.0, 4)
    assert sorted(got) == [2, 3] and got[3]["R"] == 2.5


def test_certificates_not_computed_names_the_error(monkeypatch):
    from claims_world import use_certificates

    class Broken:
        def series_certificates(self, *a, **k):
            raise ValueError("no params.pt")
    use_certificates(monkeypatch, Broken())
    cert, why = claims.certified(World().results(), "nonlinear", "difficult", 2, 0.0, 0.0)
    assert cert is None and why == "certificates not computed (ValueError: no params.pt)"
    use_certificates(monkeypatch, None)
    assert claims.certified(World().results(), "nonlinear", "difficult", 2, 0.0, 0.0) == (
        None, "certificates not computed (depthscale.analysis.certificates is not available)")


def test_check_output_and_check_all_order():
    c = Claim("X2", "made up", "criterion", lambda res, th: ({"x": 1}, True, "criterion: made up | item"), ("fig6",),
              "paper")
    d = Claim("X1", "other", "criterion", lambda res, th: (None, False, "criterion: other | item"), ("fig3",), "paper")
    e = Claim("1", "ours", "criterion", lambda res, th: (None, False, "criterion: ours | item"), ("fig3",), "beyond")
    out = claims.check(c, World().results(), FakeTheory())
    assert out == {"id": "X2", "claim": "made up", "preset": "cpu", "expected": "criterion", "uses": ["fig6"],
                   "measured": {"x": 1}, "detail": "criterion: made up | item", "verdict": PASS, "pass": True}
    got = claims.check_all(World().results(), FakeTheory(), [e, c, d])
    assert [g["id"] for g in got] == ["X1", "X2", "1"]  # the paper's claims first, whatever the ids (Claim.part)
    assert [g["id"] for g in claims.check_all(World().results(), FakeTheory(), [c, d], uses=["fig6"])] == ["X2"]
    th, seen = FakeTheory(), []  # each claim is handed the theory it was given (a claim reads its curves from it)
    f = Claim("X3", "theory", "criterion", lambda res, t: seen.append(t) or (None, True, "criterion: t | item"),
              ("fig6",), "paper")
    assert [g["verdict"] for g in claims.check_all(World().results(), th, [f])] == [PASS] and seen == [th]


def test_require_names_every_missing_cell():
    w = World()
    w.series("nonlinear", "difficult", 2, 0.5, 0.0, 1.0)  # complete; (0,0) has no runs at all
    res = w.results()
    with pytest.raises(claims.MissingRuns) as e:
        claims.require(res, "nonlinear", "difficult", 2, [(0.0, 0.0), (0.5, 0.0)], depths=(1, 2))
    assert str(e.value) == "missing runs: 2 cell(s): nonlinear/difficult k=2 (0,0) L=1; nonlinear/difficult k=2 (0,0) L=2"
    with pytest.raises(claims.MissingRuns, match=r"^missing runs: 1 cell\(s\): linear \(d=16\)/easy \(2,1\) L=1$"):
        claims.require(res, "linear", "easy", 1, [(2.0, 1.0)], depths=(1,), what=" (d=16)")
    claims.require(res, "nonlinear", "difficult", 2, [(0.5, 0.0)])  # nothing missing: no exception


def test_an_inconclusive_outcome_keeps_the_fits_reason():
    from types import SimpleNamespace as NS

    bad = NS(ok=False, reason="L0 = 0 at its bound 0")
    assert claims.outcome(INCONCLUSIVE, "underpowered: power 0.1 < 0.8", False, bad) == \
        "INCONCLUSIVE (underpowered: power 0.1 < 0.8; degenerate fit: L0 = 0 at its bound 0)"
    assert claims.outcome(FAIL, "", False, bad) == "NO (degenerate fit: L0 = 0 at its bound 0)"


# ---- from claims.py's mutation run (eighteenth session): each condition a survivor showed untested ----

from depthscale.analysis import certificates as real_certificates  # noqa: E402
from depthscale.analysis.results import Series  # noqa: E402
from depthscale.base.formatting import label  # noqa: E402
from depthscale.theory.fits import FitResult  # noqa: E402


def _series(R, n, se=None, ev_se=None, depths=(1, 2, 4, 8)):
    R = np.asarray(R, dtype=float)
    mean = {"R": R} if ev_se is None else {"R": R, "R_se": np.asarray(ev_se, dtype=float)}
    se = np.full(R.size, np.nan) if se is None else np.asarray(se, dtype=float)
    return Series(np.asarray(depths[:R.size], dtype=float), mean, {"R": se}, np.asarray(n), [[] for _ in R])


def test_point_se_over_seeds_or_the_evaluation():
    s = _series([2.0, 1.9, 1.8], [2, 1, 1], se=[0.05, np.nan, np.nan], ev_se=[0.01, 0.02])
    assert claims.point_se(s, 0) == (0.05, "SE over 2 seeds")  # two seeds are enough for a spread
    assert claims.point_se(s, 1) == (0.02, "evaluation SE (one seed)")
    se, why = claims.point_se(s, 2)  # the evaluation SEs stop before this depth
    assert math.isnan(se) and why == "evaluation SE (one seed)"
    se, _ = claims.point_se(_series([2.0], [1]), 0)  # no evaluation SE at all
    assert math.isnan(se)
    assert claims.series_se(s).dtype == np.float64 and claims.series_se(s)[:2].tolist() == [0.05, 0.02]


def test_depth_effect_reads_the_first_and_last_depth():
    assert claims.depth_effect(None) == (True, "depth effect unknown (fewer than 2 depths)")
    assert claims.depth_effect(_series([2.0], [3], se=[0.1])) == (True, "depth effect unknown (fewer than 2 depths)")
    two = _series([2.0, 1.9], [3, 3], se=[0.01, 0.02])
    assert claims.depth_effect(two) == (True, f"R_1 - R_2 = {claims.num(2.0 - 1.9)}±{claims.num(math.hypot(0.01, 0.02))}")
    # four depths: the middle ones (large SEs, other values) are not read
    four = _series([20.0, 1.0, 1.0, 10.0], [3] * 4, se=[3.0, 50.0, 50.0, 4.0])
    assert claims.depth_effect(four) == (False, "R_1 - R_8 = 10±5")  # exactly 2 SE: within
    assert claims.depth_effect(_series([22.0, 1.0, 1.0, 10.0], [3] * 4, se=[3.0, 50.0, 50.0, 4.0]))[0]  # 12 > 10
    assert claims.depth_effect(_series([2.0, 2.0], [3, 3]))[0]  # no SE: counted as present


def _fit(ok=True, reason=""):
    return FitResult(L0=1.0, c=1.0, alpha=1.0, alpha_se=0.1, r2=0.99, status="ok" if ok else "degenerate",
                     reason=reason)


def test_degenerate_names_the_first_degenerate_fit_and_what_would_help():
    s = _series([2.2, 2.1, 2.05, 2.0], [3] * 4, se=[0.01] * 4)
    assert claims.degenerate([_fit(), _fit()], s) == ("", "")
    bad = _fit(False, "L0 = 0 at its bound 0")
    eff = claims.depth_effect(s)[1]
    assert claims.degenerate([_fit(), bad], s) == (
        INCONCLUSIVE, f"degenerate fit: L0 = 0 at its bound 0; {eff}: a fit needs more depths (beyond L=8, "
                      "where the curve still bends) or a longer budget")
    assert claims.degenerate([bad], None)[1].endswith("(beyond L=Lmax, where the curve still bends) or a longer budget")
    flat = _series([2.0, 2.1, 2.05, 2.0], [3] * 4, se=[0.01] * 4)
    assert claims.degenerate([bad, None], flat) == (
        FAIL, f"degenerate fit: L0 = 0 at its bound 0; the depth effect is absent: {claims.depth_effect(flat)[1]} within 2 SE")


def test_series_name_and_small_texts():
    assert claims.series_name("linear", "easy", 2, 2.0, 1.0) == f"linear/easy {label(2.0, 1.0)}"
    assert claims.series_name("nonlinear", "difficult", 16, 0.0, 0.5) == f"nonlinear/difficult k=16 {label(0.0, 0.5)}"
    assert claims.fitted(_fit()) == "α=1±0.1, R²=0.99" and claims.fitted(None) == "α=—±—, R²=—"
    assert claims.cells_text(list("abcde")) == "missing runs: 5 cell(s): a; b; c; d (+1 more)"
    assert claims.cert_text({"computed": []}, "") == "certified (none applies); "
    assert claims.power_text({"why": "no law fit"}) == "power unknown (no law fit)"


def test_left_out_names_each_missing_k():
    res = World("smoke").results()
    assert claims.left_out(res, (2, 16)) == "; k=16 is not part of the smoke preset: its items are left out"
    assert claims.left_out(res, (16, 16)) == "; k=16 is not part of the smoke preset: its items are left out" * 2


def test_call_paired_passes_keywords_and_names_the_error():
    assert claims.call_paired(lambda x, y=0: x + y, 1, y=2) == 3

    def broken(run):
        raise KeyError(run)
    with pytest.raises(claims.CannotJudge, match=r"\(broken: KeyError: 'r1'\)$"):
        claims.call_paired(broken, "r1")


class _Certs:
    """certificates with made-up per-context losses: at (0,0) L = 8 fails its doubling certificate."""

    def __init__(self):
        self.calls = []

    def series_certificates(self, res, model, task, k, a, b, construction=True):
        self.calls.append((model, task, k, a, b, construction))
        rng = np.random.default_rng(0)
        sq = {L: 2.0 + 0.01 * rng.standard_normal(500) for L in (1, 2, 4)}
        sq[8] = sq[4] + 0.5
        return real_certificates.certify(sq)

    failing_text = staticmethod(real_certificates.failing_text)
    curve = staticmethod(real_certificates.curve)


def test_gate_reads_only_the_depths_an_item_reads(monkeypatch):
    from claims_world import use_certificates

    fake = _Certs()
    use_certificates(monkeypatch, fake)
    w = World()
    w.series("nonlinear", "difficult", 2, 0.0, 0.0, lambda L: 2.0 + 1.0 / L)
    res = w.results()
    name = "nonlinear/difficult k=2 " + label(0.0, 0.0)
    stored, problem = claims.gate(res, [("nonlinear", "difficult", 2, 0.0, 0.0, None)])
    assert problem == f"{name} uncertified: doubling fails at L=8" and list(stored) == [name]
    assert stored[name]["failing"]["doubling"] == [8]
    stored, problem = claims.gate(res, [("nonlinear", "difficult", 2, 0.0, 0.0, (1, 2, 4))])
    assert problem == "" and stored[name]["failing"]["doubling"] == []  # L = 8 is not read
    assert fake.calls[-1] == ("nonlinear", "difficult", 2, 0.0, 0.0, True)
    # seeds on the envelope: fewer than 3 at a depth the item reads, and only there
    w2 = World()
    w2.series("nonlinear", "difficult", 2, 0.0, 0.0, lambda L: 2.0 + 1.0 / L, depths=(1, 2, 4))
    w2.add("nonlinear", "difficult", 2, 0.0, 0.0, 8, seed=0, R=2.1)
    res2 = w2.results()
    _, problem = claims.gate(res2, [("nonlinear", "difficult", 2, 0.0, 0.0, (1, 2, 4))])
    assert problem == ""
    _, problem = claims.gate(res2, [("nonlinear", "difficult", 2, 0.0, 0.0, None)])
    assert problem == (f"{name} uncertified: doubling fails at L=8; "
                       f"{name} seeds: 1 < 3 on the envelope at L=8")


def test_an_inconclusive_outcome_names_a_fits_problem_once():
    bad = _fit(False, "L0 = 0 at its bound 0")
    why = "degenerate fit: L0 = 0 at its bound 0; more depths needed"
    assert claims.outcome(INCONCLUSIVE, why, False, bad) == f"INCONCLUSIVE ({why})"
    assert claims.outcome(INCONCLUSIVE, "underpowered", False, _fit()) == "INCONCLUSIVE (underpowered)"


def test_a_claim_that_raises_is_a_fail_naming_the_error_and_texts_of_the_engine():
    def broken(res, th):
        raise ZeroDivisionError("no depths")
    c = Claim("X9", "made up", "criterion x", broken, ("fig6",), "paper")
    out = claims.check(c, World().results(), None)
    assert out["verdict"] == FAIL and out["pass"] is False and out["measured"] is None
    assert out["detail"] == "error while checking: ZeroDivisionError: no depths (criterion: criterion x)"
    assert claims.num(math.nan) == "nan" and claims.num(1234567.0) == "1.235e+06"  # a detail's number, not a cell's
    assert claims.judged("c", ["a", "b"], " (k=2)") == "criterion: c (k=2) | a; b"
    with pytest.raises(ValueError, match=r"^unknown verdict 'maybe' \(one of PASS, FAIL, INCONCLUSIVE\)$"):
        claims.as_verdict("maybe")
