"""The convergence study's decision pieces pinned exactly (SPEC §4 certificates, §9 the study's rule):
`_picked_view` (each depth read at its picked grid point and steps, or at half of them where the
study has that budget), `certify_row` (what it hands certificates.series_certificates and what it
builds from the certificates), `subrow` (a row restricted to some depths: curve, fit, power, drops)
and `law_alpha_range`'s edges (precision of its inputs, an inclusive bound, the binding depth)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from depthscale.analysis import certificates
from depthscale.analysis.results import Results
from depthscale.base.errors import InputError
from depthscale.experiments import convergence as cv

PRESET = "cpu"
DEFAULT = "default-1e-2-flat"
CONSTRUCTIVE = "constructive-3e-3-taper"


def _cfg(L, name, steps, seed=0, k=2):
    fields = cv.study_fields(PRESET, name, steps)
    return cv.make_config(PRESET, **fields, model="nonlinear", task="difficult", k=k, a=0.0, b=0.0, L=L, seed=seed)


def _run(cfg):
    return {"run_id": cfg.run_id, **cfg.to_dict(), "R": 2.0, "R_se": 0.01, "A": 2.2, "C": 1.95,
            "var_ystar": 10.0, "final_monitor_loss": 2.0, "train_seconds": 1.0}


def _key(L, k=2, a=0.0, b=0.0):
    return ("nonlinear", "difficult", k, a, b, L)


def _ids(view, L, k=2):
    return sorted(r["run_id"] for r in view.runs("nonlinear", "difficult", k, 0.0, 0.0, L))


def test_picked_view_reads_each_depths_picked_point_at_its_steps_and_skips_unpicked_depths():
    cfgs = {(L, n, st, s): _cfg(L, n, st, s) for L in (1, 2, 4) for n in (DEFAULT, CONSTRUCTIVE)
            for st in (5000, 20000) for s in (0, 1)}
    res = Results(pd.DataFrame([_run(c) for c in cfgs.values()]), PRESET)
    picks = {1: (DEFAULT, 20000), 2: (None, 5000), 4: (CONSTRUCTIVE, 5000)}
    view = cv._picked_view(res, picks, 0.0, 0.0)  # defaults: the picked steps themselves, top-2
    assert view.cell_recipes == {_key(1): cv.study_fields(PRESET, DEFAULT, 20000),
                                 _key(4): cv.study_fields(PRESET, CONSTRUCTIVE, 5000)}
    assert _ids(view, 1) == sorted(cfgs[(1, DEFAULT, 20000, s)].run_id for s in (0, 1))
    assert _ids(view, 4) == sorted(cfgs[(4, CONSTRUCTIVE, 5000, s)].run_id for s in (0, 1))
    assert res.cell_recipes == {}  # a view: `res` itself is left as it was


def test_picked_view_halved_takes_half_the_steps_only_where_the_study_has_that_budget():
    cfgs = [_cfg(1, DEFAULT, st, 0, k=16) for st in (20000, 10000, 5000)] + [_cfg(4, DEFAULT, 2500, 0, k=16)]
    res = Results(pd.DataFrame([_run(c) for c in cfgs]), PRESET)
    picks = {1: (DEFAULT, 20000), 2: (CONSTRUCTIVE, 10000), 4: (DEFAULT, 5000), 8: (CONSTRUCTIVE, 10001)}
    half = cv._picked_view(res, picks, 0.0, 0.0, True, 16)
    # 20000 -> 10000 and 10000 -> 5000 (budgets); 5000 -> 2500 is none: 0 steps, a cell with no runs;
    # 10001 steps read at 10001 // 2 = 5000, a budget
    assert half.cell_recipes == {_key(1, 16): cv.study_fields(PRESET, DEFAULT, 10000),
                                 _key(2, 16): cv.study_fields(PRESET, CONSTRUCTIVE, 5000),
                                 _key(4, 16): cv.study_fields(PRESET, DEFAULT, 0),
                                 _key(8, 16): cv.study_fields(PRESET, CONSTRUCTIVE, 5000)}
    assert _ids(half, 1, k=16) == [cfgs[1].run_id]
    assert _ids(half, 4, k=16) == []  # the 2,500-step run is no budget of the study: never read
    full = cv._picked_view(res, picks, 0.0, 0.0, False, 16)
    assert [full.cell_recipes[_key(L, 16)]["max_steps"] for L in (1, 2, 4, 8)] == [20000, 10000, 5000, 10001]
    assert _ids(full, 1, k=16) == [cfgs[0].run_id]


def _spy(monkeypatch, cert=None, error=None):
    calls = []

    def fake(res, model, task, k, a, b, depths=None, half=None, device="cpu", construction=True):
        calls.append({"view": res.cell_recipes, "model": model, "task": task, "k": k, "a": a, "b": b,
                      "depths": depths, "half": None if half is None else half.cell_recipes})
        if error is not None:
            raise error
        return cert

    monkeypatch.setattr(certificates, "series_certificates", fake)
    return calls


def _gap(diff, se, ok):
    return {"diff": diff, "se": se, "ok": ok}


CERT = {"depths": [1, 2], "computed": ["doubling", "construction", "budget"],
        "failing": {"doubling": [], "construction": [2], "budget": [1]},
        "per_depth": {1: {"R": 2.1, "B": 2.05, "doubling": None, "construction": _gap(-0.01, 0.02, np.bool_(True)),
                          "budget": _gap(0.05, 0.01, np.bool_(False)), "ok": False},
                      2: {"R": 2.0, "B": 1.9, "doubling": _gap(-0.1, 0.01, True),
                          "construction": _gap(0.3, 0.1, False), "budget": None, "ok": False}}}


def test_certify_row_hands_series_certificates_the_rows_picked_runs_and_their_halves(monkeypatch):
    calls = _spy(monkeypatch, CERT)
    res = Results(pd.DataFrame(), PRESET)
    picks = {1: (DEFAULT, 20000), 2: (CONSTRUCTIVE, 10000)}
    row = {"a": 0.5, "b": -0.25, "k": 16, "depths": [1, 2], "steps_L": [20000, 10000]}
    cv.certify_row(res, row, picks)
    (c,) = calls
    assert (c["model"], c["task"], c["k"], c["a"], c["b"], c["depths"]) == ("nonlinear", "difficult", 16, 0.5, -0.25, [1, 2])
    assert c["view"] == {_key(1, 16, 0.5, -0.25): cv.study_fields(PRESET, DEFAULT, 20000),
                         _key(2, 16, 0.5, -0.25): cv.study_fields(PRESET, CONSTRUCTIVE, 10000)}
    assert c["half"] == {_key(1, 16, 0.5, -0.25): cv.study_fields(PRESET, DEFAULT, 10000),
                         _key(2, 16, 0.5, -0.25): cv.study_fields(PRESET, CONSTRUCTIVE, 5000)}


def test_certify_row_is_top_2_by_default_and_has_a_half_only_where_some_depth_has_one(monkeypatch):
    calls = _spy(monkeypatch, CERT)
    res = Results(pd.DataFrame(), PRESET)
    cv.certify_row(res, {"a": 0.0, "b": 0.0, "depths": [1], "steps_L": [5000]}, {1: (DEFAULT, 5000)})
    assert calls[-1]["k"] == 2 and calls[-1]["half"] is None  # 2,500 steps: no budget of the study
    assert calls[-1]["view"] == {_key(1): cv.study_fields(PRESET, DEFAULT, 5000)}
    # one depth whose half is a budget is enough (10001 // 2 = 5000); the others read no runs there
    picks = {1: (DEFAULT, 5000), 2: (DEFAULT, 10001)}
    cv.certify_row(res, {"a": 0.0, "b": 0.0, "depths": [1, 2], "steps_L": [5000, 10001]}, picks)
    assert calls[-1]["half"] == {_key(1): cv.study_fields(PRESET, DEFAULT, 0),
                                 _key(2): cv.study_fields(PRESET, DEFAULT, 5000)}


def test_certify_row_builds_the_detail_the_text_and_the_passes_from_the_certificates(monkeypatch):
    _spy(monkeypatch, CERT)
    row = {"a": 0.0, "b": 0.0, "depths": [1, 2], "steps_L": [20000, 20000]}
    got = cv.certify_row(Results(pd.DataFrame(), PRESET), row, {1: (DEFAULT, 20000), 2: (DEFAULT, 20000)})
    assert got == {1: {"construction": True, "budget": False}, 2: {"doubling": True, "construction": False}}
    assert all(type(v) is bool for d in got.values() for v in d.values())
    assert row["certificate_detail"] == {
        1: {"B": 2.05, "construction": _gap(-0.01, 0.02, True), "budget": _gap(0.05, 0.01, False)},
        2: {"B": 1.9, "doubling": _gap(-0.1, 0.01, True), "construction": _gap(0.3, 0.1, False)}}
    assert row["certificates_text"] == ("certificates (doubling, construction, budget): L=1 budget +0.05±0.01, "
                                        "L=2 construction +0.3±0.1 > 2 SE")
    assert "certificates_why" not in row


def test_certify_row_says_why_when_the_certificates_cannot_be_computed(monkeypatch):
    _spy(monkeypatch, error=InputError("no runs of nonlinear/difficult to certify"))
    row = {"a": 0.0, "b": 0.0, "depths": [1], "steps_L": [20000]}
    assert cv.certify_row(Results(pd.DataFrame(), PRESET), row, {1: (DEFAULT, 20000)}) is None
    assert row["certificates_why"] == "InputError: no runs of nonlinear/difficult to certify"
    assert "certificates_text" not in row and "certificate_detail" not in row


DEPTHS = [1, 2, 4, 8, 16, 32, 64]
NOISE = (-0.002, 0.0, 0.002)  # each depth's seeds about its mean: SE 0.002 / sqrt(3)


def _study_row(power_of=None):
    R = [2.0 + 0.09 / L for L in DEPTHS]
    row = {"series": cv.BEST, "steps": 20000, "a": 0.0, "b": 0.0, "depths": list(DEPTHS), "R": R,
           "R_seeds": [[r + e for e in NOISE] for r in R], "C": [10.0 + L for L in DEPTHS],
           "gap": [20.0 + L for L in DEPTHS], "n": [3 + L for L in DEPTHS], "recipe": [f"p{L}" for L in DEPTHS],
           "steps_L": [1000 * L for L in DEPTHS], "monitor": [30.0 + L for L in DEPTHS],
           "monitor_seeds": [[30.0 + L, 31.0 + L] for L in DEPTHS], "alpha": -1.0, "status": "stale",
           "power_5a": 0.123, "drops": ["stale"], "complete": True}
    if power_of is not None:
        row["power_of"] = power_of
    return row


def test_subrow_restricts_every_curve_list_and_recomputes_the_fit_the_power_and_the_drops():
    seen = []
    row = _study_row(lambda part: seen.append(part["depths"]) or 0.42)
    part = cv.subrow(row, [16, 4, 2, 8, 64, 99])  # 99: no such depth; the row's order is kept
    keep = [2, 4, 8, 16, 64]
    assert part["depths"] == keep and part["recipe"] == [f"p{L}" for L in keep]
    assert part["C"] == [10.0 + L for L in keep] and part["gap"] == [20.0 + L for L in keep]
    assert part["n"] == [3 + L for L in keep] and part["steps_L"] == [1000 * L for L in keep]
    assert part["monitor"] == [30.0 + L for L in keep] and part["monitor_seeds"] == [[30.0 + L, 31.0 + L] for L in keep]
    assert part["R"] == [2.0 + 0.09 / L for L in keep]
    assert part["R_seeds"] == [[2.0 + 0.09 / L + e for e in NOISE] for L in keep]
    assert part["alpha"] == pytest.approx(1.0, abs=1e-9) and part["L0"] == pytest.approx(2.0, abs=1e-12)
    assert part["status"] == "ok" and part["passes_5a"] is True and part["series"] == cv.BEST
    assert seen == [keep] and part["power_5a"] == 0.42
    se = math.sqrt(2) * 0.002 / math.sqrt(3)
    assert [d["L"] for d in part["drops"]] == [2, 4, 8]  # 16 -> 32 and 32 -> 64: 32 is left out
    assert [d["drop"] for d in part["drops"]] == pytest.approx([0.045 / 2, 0.045 / 4, 0.045 / 8], rel=1e-9)
    assert [d["se"] for d in part["drops"]] == pytest.approx([se] * 3, rel=1e-9)
    assert math.isnan(part["drops"][0]["ratio"]) and [d["ratio"] for d in part["drops"][1:]] == pytest.approx([0.5, 0.5])
    assert row["depths"] == DEPTHS and row["power_5a"] == 0.123 and row["drops"] == ["stale"]  # a copy


def test_subrow_computes_the_power_from_two_depths_on_and_with_power_row_by_default(monkeypatch):
    seen = []
    row = _study_row(lambda part: seen.append(part["depths"]) or 0.7)
    one = cv.subrow(row, [4])
    assert one["power_5a"] is None and seen == [] and one["drops"] == []
    two = cv.subrow(row, [4, 8])
    assert two["power_5a"] == 0.7 and seen == [[4, 8]]
    assert [d["L"] for d in two["drops"]] == [4] and two["drops"][0]["drop"] == pytest.approx(0.09 / 8, rel=1e-9)
    # a row without its own power function: the module's power_row, on the restricted curve
    monkeypatch.setattr(cv, "power_row", lambda part: len(part["depths"]) / 10)
    assert cv.subrow(_study_row(), [1, 2, 64])["power_5a"] == pytest.approx(0.3)


def test_law_alpha_range_reads_its_inputs_in_double_precision():
    """Single-precision values give exactly what the same values in double precision give."""
    R32 = np.array([2.3, 2.1, 2.04, 2.02, 2.01, 2.004, 2.002], np.float32)
    want = cv.law_alpha_range(DEPTHS, [float(x) for x in R32])
    assert cv.law_alpha_range(DEPTHS, R32) == want
    assert want["binding_depth"] == 64 and want["alpha_max"] == pytest.approx(1.6006825, abs=1e-6)


def test_law_alpha_range_bound_is_inclusive_at_zero_tolerance():
    """Every deep R_L equal to R_2: the bound holds with equality as α grows (left side d1 exactly
    once L^-α and 2^-α vanish in double precision), so α up to the search's cap 64 fits."""
    R = [2.09, 2.045] + [2.045] * 5
    got = cv.law_alpha_range(DEPTHS, R, tol=0.0)
    assert got["alpha_max"] == 64.0


def test_law_alpha_range_names_the_binding_shallow_depth_beside_a_nearly_binding_deeper_one():
    """R_1 = 2, R_2 = 1.5: L = 4 binds at α = 1 ((R_1 − R_2)(1 + 2^−α) = 0.75 = R_1 − R_4); L = 8
    would need 0.875 there and needs 0.865, slack 0.01."""
    got = cv.law_alpha_range([1, 2, 4, 8], [2.0, 1.5, 1.25, 1.135])
    assert got["binding_depth"] == 4
    assert got["alpha_max"] == pytest.approx(1.0, abs=1e-7)
    assert got["alpha_min"] == pytest.approx(-math.log2(0.75), abs=1e-12)


def test_budget_moves_tells_a_depth_worse_at_its_budget_from_one_still_improving():
    """SPEC §4 (iii): the budget certificate fails where R at the chosen budget lies above R at half of it by
    more than 2 SE (worse with more steps); a depth below it by more than 2 SE is still improving
    (information). The decision listed the failing depths as "still improving": the inverse."""
    det = {1: {"B": 2.0}, 2: {"budget": {"diff": -0.5, "se": 0.25, "ok": True}},  # exactly -2 SE: not beyond
           4: {"budget": {"diff": -0.625, "se": 0.25, "ok": True}}, 8: {"budget": {"diff": 0.625, "se": 0.25, "ok": False}},
           16: {"budget": {"diff": -1.0, "se": math.nan, "ok": True}}, 64: {"budget": {"diff": -0.75, "se": 0.25, "ok": True}}}
    assert cv.budget_moves({"certificate_detail": det}) == ([8], [4, 64])
    assert cv.budget_moves({"certificate_detail": {}}) == ([], []) == cv.budget_moves({})


def test_the_decision_names_the_depths_worse_at_their_budget_and_those_still_improving():
    from test_convergence import _grid_frame, _inverse, _with_budgets

    ok = {L: {"doubling": True, "construction": True, "budget": L != 64} for L in (1, 2, 4, 8, 16, 32, 64)}
    rows = cv.study_rows(_with_budgets(_grid_frame(), _inverse), certify=lambda r: ok, power=lambda r: 0.9)
    top = next(r for r in rows if r["series"] == cv.BEST)
    top["certificate_detail"] = {2: {"budget": {"diff": -0.01, "se": 0.001, "ok": True}},
                                 64: {"budget": {"diff": 0.0026, "se": 0.001, "ok": False}}}
    dec = cv.decision(rows)
    assert dec["worse_at_budget"] == [64] and dec["still_improving"] == [2]
    assert ("; worse at the chosen budget than at half of it (its budget certificate fails): L=64; still improving "
            "from half the budget beyond 2 SE: L=2") in dec["text"]


def test_drops_ratio_is_of_successive_doublings_only_never_across_a_missing_depth():
    """On depths 1, 2, 4, 16, 32 (8 missing: a certified-depths part) the ratio at L = 16 was Δ_16/Δ_2 (0.125
    under R = 2 + 0.09/L) where Δ_2L/Δ_L is meant (0.5): now NaN there."""
    row = {"depths": [1, 2, 4, 16, 32], "R": [2 + 0.09 / L for L in (1, 2, 4, 16, 32)],
           "R_seeds": [[2 + 0.09 / L + e for e in (-1e-3, 0.0, 1e-3)] for L in (1, 2, 4, 16, 32)]}
    got = cv.drops(row)
    assert [d["L"] for d in got] == [1, 2, 16]
    assert got[1]["ratio"] == pytest.approx(0.5, rel=1e-12) and math.isnan(got[0]["ratio"]) and math.isnan(got[2]["ratio"])


# ---------------------------------------------------------------- _verdict, _part, power_row, decision pinned


def test_verdict_reproduced_on_a_pass_not_reproduced_on_a_fail_with_power_from_0_8_else_undetermined():
    assert cv._verdict({"passes_5a": True}) == "reproduced"  # a pass needs no power
    assert cv._verdict({"passes_5a": True, "power_5a": 0.1}) == "reproduced"
    assert cv._verdict({"passes_5a": False, "power_5a": 0.8}) == "not reproduced"  # exactly POWER_MIN is enough
    assert cv._verdict({"passes_5a": False, "power_5a": 1.0}) == "not reproduced"
    assert cv._verdict({"passes_5a": False, "power_5a": 0.7999}) == "undetermined"  # underpowered
    assert cv._verdict({"passes_5a": False, "power_5a": None}) == "undetermined"
    assert cv._verdict({"passes_5a": False}) == "undetermined"


def _view(**kw):
    return {"alpha": 0.876543, "alpha_se": 0.0456, "r2": 0.98765, "L0": 1.234567, "status": "degenerate: L0 on its bound",
            "depths": [2, 4, 8], "passes_5a": False, **kw}


def test_part_prints_the_fit_the_depths_and_5a_with_its_power_in_fixed_formats():
    view = _view(power_5a=0.456, seeds_for_power=7)
    assert cv._part(view) == {
        "outcome": "undetermined", "alpha": 0.876543, "alpha_se": 0.0456, "r2": 0.98765, "L0": 1.234567,
        "status": "degenerate: L0 on its bound", "power_5a": 0.456, "depths": [2, 4, 8],
        "text": "α 0.88 ± 0.05, R² 0.988, L0 1.2346 (degenerate: L0 on its bound) on L=2, 4, 8; 5a fails, power 0.46 "
                "(7 seeds would reach 0.8)"}
    # at the target: no seeds asked for (whatever seeds_for_power says); a pass reads "passes"
    got = cv._part(_view(power_5a=0.8, seeds_for_power=5))
    assert got["outcome"] == "not reproduced" and got["text"].endswith("on L=2, 4, 8; 5a fails, power 0.80")
    got = cv._part(_view(passes_5a=True, power_5a=0.799, seeds_for_power=9, depths=[16]))
    assert got["outcome"] == "reproduced" and got["text"].endswith("on L=16; 5a passes, power 0.80 (9 seeds would reach 0.8)")
    # below the target with the seeds unknown (None) or absent: the power alone
    assert cv._part(_view(power_5a=0.5, seeds_for_power=None))["text"].endswith("5a fails, power 0.50")
    assert cv._part(_view(power_5a=0.5))["text"].endswith("5a fails, power 0.50")
    got = cv._part(_view(seeds_for_power=7))  # no power: "not computed", never the seeds
    assert got["power_5a"] is None and got["outcome"] == "undetermined"
    assert got["text"].endswith("on L=2, 4, 8; 5a fails, power not computed")


def _power_spy(monkeypatch, rep=None, error=None):
    calls = []

    def crit(L, L0, c, lo, hi, r2):
        calls.append({"crit": (L, L0, c, lo, hi, r2)})
        return "criterion"

    def report(criterion, mean, se, n_seeds):
        calls.append({"criterion": criterion, "mean": mean, "se": se, "n_seeds": n_seeds})
        if error is not None:
            raise error
        return rep

    monkeypatch.setattr(cv.power, "criterion_5a", crit)
    monkeypatch.setattr(cv.power, "power_report", report)
    return calls


def _power_input(depths=(1, 2, 4, 8)):
    seeds = {1: (-0.003, 0.0, 0.003), 2: (-0.002, 0.002), 4: (0.0, 0.001, 0.002, 0.005), 8: (-0.001, 0.0, 0.001)}
    R = [np.float32(2.0 + 0.09 / L) for L in depths]
    return {"depths": list(depths), "R": R, "R_seeds": [[2.0 + 0.09 / L + e for e in seeds[L]] for L in depths],
            "n": [3, 2, 4, 3][:len(depths)]}


def test_power_row_hands_power_report_the_inverse_law_the_seed_ses_and_the_fewest_seeds(monkeypatch):
    fits = []
    real_fit = cv.power.law_fit
    monkeypatch.setattr(cv.power, "law_fit", lambda L, R: fits.append((L, R)) or real_fit(L, R))
    calls = _power_spy(monkeypatch, {"power": np.float64(0.61), "seeds_for_target": 9, "n_seeds": 2})
    row = _power_input()
    got = cv.power_row(row)
    assert got == 0.61 and type(got) is float and row["seeds_for_power"] == 9
    ((L, R),) = fits
    assert L.dtype == np.float64 and R.dtype == np.float64 and L.tolist() == [1.0, 2.0, 4.0, 8.0]
    assert R.tolist() == [float(np.float32(2.0 + 0.09 / L)) for L in (1, 2, 4, 8)]
    crit, rep = calls
    L, L0, c, lo, hi, r2 = crit["crit"]
    assert L.dtype == np.float64 and L.tolist() == [1.0, 2.0, 4.0, 8.0] and (lo, hi, r2) == (0.8, 1.2, 0.99)
    assert (L0, c) == real_fit([1, 2, 4, 8], row["R"]) and L0 == pytest.approx(2.0, abs=1e-6)
    assert rep["criterion"] == "criterion" and rep["n_seeds"] == 2  # min(n), not the seeds counted
    assert rep["mean"].dtype == np.float64 and rep["mean"] == pytest.approx(L0 + c / np.array([1.0, 2, 4, 8]), rel=1e-15)
    want_se = [0.003 / math.sqrt(3), 0.002 * math.sqrt(2) / math.sqrt(2), float(np.std([0, 1, 2, 5], ddof=1)) * 1e-3 / 2,
               0.001 / math.sqrt(3)]
    assert rep["se"] == pytest.approx(want_se, rel=1e-9)


def test_power_row_is_none_with_a_one_seed_depth_or_a_non_finite_se_quietly(monkeypatch):
    calls = _power_spy(monkeypatch, {"power": 0.5, "seeds_for_target": 4})
    row = _power_input()
    row["R_seeds"][2] = [2.1]  # one seed: no SE there
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no std of one value computed (and warned about) on the way
        assert cv.power_row(row) is None
    row = _power_input()
    row["R_seeds"][0] = [2.0, math.nan]
    assert cv.power_row(row) is None
    assert calls == [] and "seeds_for_power" not in row
    # two seeds at every depth are enough
    row = {"depths": [1, 2], "R": [2.09, 2.045], "R_seeds": [[2.08, 2.1], [2.04, 2.05]], "n": [2, 2]}
    assert cv.power_row(row) == 0.5 and calls[-1]["se"] == pytest.approx([0.01, 0.005], rel=1e-9)


def test_power_row_is_none_without_a_law_fit_or_when_a_simulated_fit_is_singular(monkeypatch):
    calls = _power_spy(monkeypatch, error=np.linalg.LinAlgError("Singular matrix"))
    row = _power_input()
    assert cv.power_row(row) is None and len(calls) == 2 and "seeds_for_power" not in row
    calls.clear()
    row = _power_input()
    row["R"][1] = -1.0  # law_fit: InputError (a non-positive loss)
    assert cv.power_row(row) is None and calls == [] and "seeds_for_power" not in row
    _power_spy(monkeypatch, error=ValueError("other"))  # any other error is not swallowed
    with pytest.raises(ValueError):
        cv.power_row(_power_input())


def _inv(L):
    return 2.0 + 0.09 / L


def _flat(L):
    return 2.0 + 0.09 * L ** -0.1


def _top(law=_inv, depths=DEPTHS, cert=None, power_of=lambda part: 0.9, **kw):
    """A monitor-best row as _study_rows builds it: every depth certified unless `cert` says otherwise."""
    R = [law(L) for L in depths]
    row = {"series": cv.BEST, "steps": 20000, "a": 0.0, "b": 0.0, "depths": list(depths), "R": R,
           "R_seeds": [[r + e for e in NOISE] for r in R], "C": [1.0] * len(depths), "gap": [0.5] * len(depths),
           "n": [5] * len(depths), "recipe": [f"p{L}" for L in depths], "steps_L": [1000 * L for L in depths],
           "monitor": [3.0] * len(depths), "monitor_seeds": [[3.0]] * len(depths), "complete": True,
           "power_of": power_of, "certificates": {L: {"doubling": True, "construction": True} for L in depths}}
    if cert is not None:
        row["certificates"] = cert
    row.update(cv.fit_curve(row))
    row["power_5a"] = power_of(row)
    row["drops"] = cv.drops(row)
    row.update(kw)
    return row


INV_FIT = "α 1.00 ± 0.00, R² 1.000, L0 2.0000 (ok)"
INV_DROPS = "0.0450±0.0016, 0.0225±0.0016, 0.0112±0.0016, 0.0056±0.0016, 0.0028±0.0016, 0.0014±0.0016"


def test_decision_reproduced_where_both_parts_pass_the_whole_dict():
    top = _top(alpha=1.23456, alpha_se=0.0789, r2=0.99123, L0=1.98766, status="stale", power_5a=0.456,
               seeds_for_power=11, certificates_text="certificates (doubling, construction): none fails")
    other = {**_top(_flat), "series": "envelope"}  # not the monitor-best row: never read
    dec = cv.decision([other, top])
    assert sorted(dec) == ["all_depths", "budgets", "certified", "certified_depths", "drops", "outcome", "passes_5a",
                           "power_5a", "still_improving", "text", "worse_at_budget"]
    assert dec["outcome"] == "reproduced" and dec["certified"] == DEPTHS
    assert dec["budgets"] == {1: 1000, 2: 2000, 4: 4000, 8: 8000, 16: 16000, 32: 32000, 64: 64000}
    assert dec["still_improving"] == [] and dec["worse_at_budget"] == []
    assert dec["drops"] is top["drops"] and dec["passes_5a"] is True and dec["power_5a"] == 0.456
    part_a = "α 1.23 ± 0.08, R² 0.991, L0 1.9877 (stale) on L=1, 2, 4, 8, 16, 32, 64; 5a passes, power 0.46 (11 seeds would reach 0.8)"
    assert dec["all_depths"] == {"outcome": "reproduced", "text": part_a, "alpha": 1.23456, "alpha_se": 0.0789,
                                 "r2": 0.99123, "L0": 1.98766, "status": "stale", "power_5a": 0.456, "depths": DEPTHS}
    b = dec["certified_depths"]  # recomputed on the certified depths (here all): the fit and power_of's 0.9
    assert b["outcome"] == "reproduced" and b["depths"] == DEPTHS and b["power_5a"] == 0.9 and b["status"] == "ok"
    assert b["alpha"] == pytest.approx(1.0, abs=1e-9) and b["L0"] == pytest.approx(2.0, abs=1e-9)
    assert dec["text"] == (f"(0,0): reproduced — (a) all depths: {part_a}; (b) certified depths: {INV_FIT} on L=1, 2, 4, 8, 16, "
                           f"32, 64; 5a passes, power 0.90; drops per doubling {INV_DROPS}; "
                           "certificates (doubling, construction): none fails")


def test_decision_not_reproduced_where_both_parts_fail_with_power_and_undetermined_where_they_disagree():
    dec = cv.decision([_top(_flat, power_of=lambda part: 0.8)])  # exactly POWER_MIN
    assert dec["outcome"] == "not reproduced" and dec["passes_5a"] is False
    assert dec["all_depths"]["outcome"] == dec["certified_depths"]["outcome"] == "not reproduced"
    assert dec["text"].startswith("(0,0): not reproduced — (a) all depths: α 0.10 ± 0.00, R² 1.000, L0 2.0000 (ok) on L=1, 2, 4, 8, "
                                  "16, 32, 64; 5a fails, power 0.80; (b) certified depths: α 0.10")
    # (a) fails with power, (b) (on 2..32, where the curve is made to follow 1/L) passes: undetermined
    cert = {L: {"doubling": L not in (1, 64), "construction": True} for L in DEPTHS}
    top = _top(_flat, cert=cert, power_of=lambda part: 0.95)
    top["R"] = [_flat(1)] + [_inv(L) for L in DEPTHS[1:-1]] + [_flat(64)]
    top["R_seeds"] = [[r + e for e in NOISE] for r in top["R"]]
    dec = cv.decision([top])
    assert dec["all_depths"]["outcome"] == "not reproduced" and dec["certified_depths"]["outcome"] == "reproduced"
    assert dec["outcome"] == "undetermined" and dec["certified"] == [2, 4, 8, 16, 32]
    assert dec["text"].startswith("(0,0): undetermined — ")
    assert f"; (b) certified depths: {INV_FIT} on L=2, 4, 8, 16, 32; 5a passes, power 0.95; drops" in dec["text"]
    # both undetermined (underpowered fails): undetermined
    dec = cv.decision([_top(_flat, power_of=lambda part: 0.79)])
    assert dec["outcome"] == dec["all_depths"]["outcome"] == dec["certified_depths"]["outcome"] == "undetermined"


def test_decision_part_b_needs_five_certified_depths_spanning_sixteen_times():
    depths = [1, 2, 4, 8, 15, 16]
    exact = {L: {"doubling": L != 15} for L in depths}  # 1, 2, 4, 8, 16: five, exactly 16x
    dec = cv.decision([_top(depths=depths, cert=exact)])
    assert dec["certified"] == [1, 2, 4, 8, 16] and dec["certified_depths"]["depths"] == [1, 2, 4, 8, 16]
    assert dec["outcome"] == "reproduced"
    short = {L: {"doubling": L != 16} for L in depths}  # 1, 2, 4, 8, 15: five but 15x
    dec = cv.decision([_top(depths=depths, cert=short)])
    assert dec["certified"] == [1, 2, 4, 8, 15] and dec["outcome"] == "undetermined"
    assert dec["certified_depths"] == {"outcome": "undetermined",
                                       "why": "5 certified depths (1, 2, 4, 8, 15); the rule needs 5 spanning 16x"}
    assert "; (b) certified depths: 5 certified depths (1, 2, 4, 8, 15); the rule needs 5 spanning 16x; drops per" in dec["text"]
    four = {1: {"doubling": True}, 2: {"doubling": True, "construction": False}, 4: {"doubling": True},
            8: {"construction": False}, 15: {"budget": False}, 16: {"doubling": True, "budget": True}}
    dec = cv.decision([_top(depths=depths, cert=four)])  # 1, 4, 16: three (any failing certificate excludes)
    assert dec["certified"] == [1, 4, 16]
    assert dec["certified_depths"]["why"] == "3 certified depths (1, 4, 16); the rule needs 5 spanning 16x"
    four[8] = {"doubling": True}
    dec = cv.decision([_top(depths=depths, cert=four)])  # 1, 4, 8, 16: four spanning 16x
    assert dec["certified"] == [1, 4, 8, 16] and dec["certified_depths"]["why"].startswith("4 certified depths (1, 4, 8, 16);")
    # a depth the certificates do not name counts as certified (nothing failed there)
    dec = cv.decision([_top(depths=depths, cert={15: {"doubling": False}})])
    assert dec["certified"] == [1, 2, 4, 8, 16] and dec["outcome"] == "reproduced"


def test_decision_without_certificates_or_without_a_complete_monitor_best_row():
    top = _top(certificates_why="InputError: no store")
    top["certificates"] = None
    dec = cv.decision([top])
    assert dec["certified"] == [] and dec["outcome"] == "undetermined"
    assert dec["certified_depths"] == {"outcome": "undetermined",
                                       "why": "0 certified depths (none); the rule needs 5 spanning 16x"}
    assert dec["text"] == (f"(0,0): undetermined — (a) all depths: {INV_FIT} on L=1, 2, 4, 8, 16, 32, 64; 5a passes, "
                           "power 0.90; (b) certified depths: 0 certified depths (none); the rule needs 5 spanning 16x; "
                           f"drops per doubling {INV_DROPS}; not computed: certificates (InputError: no store)")
    assert cv.decision([]) == {"outcome": "undetermined", "text": "(0,0): undetermined — no envelope runs yet"}
    other = [{**_top(), "series": "envelope"}, _top(a=0.5, b=-0.25)]  # another series; another spectrum
    assert cv.decision(other) == {"outcome": "undetermined", "text": "(0,0): undetermined — no envelope runs yet"}
    assert cv.decision(other, 0.5, -0.25)["outcome"] == "reproduced"
    assert cv.decision(other, 0.5, -0.25)["text"].startswith("(0.5,-0.25): reproduced — ")
    lacking = [{**_top(), "series": "envelope", "complete": False}, _top(complete=False), _top()]
    assert cv.decision(lacking) == {"outcome": "undetermined",
                                    "text": "(0,0): undetermined — the monitor-best envelope lacks depths or seeds"}


def test_decision_span_is_a_ratio_from_the_shallowest_certified_depth_and_lists_every_budget_move():
    depths = [2, 4, 8, 16, 31, 32]
    dec = cv.decision([_top(depths=depths, cert={32: {"doubling": False}})])  # 2 .. 31: 15.5x
    assert dec["certified"] == [2, 4, 8, 16, 31] and dec["certified_depths"]["outcome"] == "undetermined"
    assert dec["certified_depths"]["why"] == "5 certified depths (2, 4, 8, 16, 31); the rule needs 5 spanning 16x"
    dec = cv.decision([_top(depths=depths, cert={31: {"doubling": False}})])  # 2 .. 32: exactly 16x
    assert dec["certified_depths"]["depths"] == [2, 4, 8, 16, 32] and dec["outcome"] == "reproduced"
    det = {L: {"budget": {"diff": d, "se": 0.01, "ok": d <= 0.02}} for L, d in ((1, 0.03), (2, -0.03), (4, 0.05), (8, -0.05))}
    det[16] = {"budget": {"diff": -1.0, "ok": True}}  # no SE: never "still improving"
    dec = cv.decision([_top(certificate_detail=det)])
    assert dec["worse_at_budget"] == [1, 4] and dec["still_improving"] == [2, 8]
    assert ("; worse at the chosen budget than at half of it (its budget certificate fails): L=1, 4; still improving "
            "from half the budget beyond 2 SE: L=2, 8") in dec["text"]
    assert cv.budget_moves({"certificate_detail": {16: det[16]}}) == ([], [])


def test_fit_curve_without_a_fit_and_at_the_window_s_ends(monkeypatch):
    from depthscale.theory.fits import FitResult

    nan_keys = ("alpha", "alpha_se", "r2", "L0")
    none = cv.fit_curve({"depths": [1, 2], "R": [2.0, 1.9]})  # two points: no fit with a floor
    assert list(none) == [*nan_keys, "status", "passes_5a"]
    assert all(math.isnan(none[k]) for k in nan_keys) and (none["status"], none["passes_5a"]) == ("no fit", False)
    got = {}

    def fake(x, y, floor=True):
        got["args"] = (x.tolist(), y.tolist(), floor)
        return fit
    monkeypatch.setattr(cv, "fit_xy", fake)
    for alpha, r2, want in ((0.8, 0.99, True), (1.2, 0.99, True), (np.nextafter(0.8, 0), 0.99, False),
                            (np.nextafter(1.2, 2), 0.99, False), (1.0, np.nextafter(0.99, 0), False)):
        fit = FitResult(L0=2.0, c=0.1, alpha=alpha, alpha_se=0.125, r2=r2, L0_se=0.01)
        out = cv.fit_curve({"depths": [1, 2, 4, 8], "R": [2.1, 2.05, 2.025, 2.0125]})
        assert out == {"alpha": alpha, "alpha_se": 0.125, "r2": r2, "L0": 2.0, "status": "ok", "passes_5a": want}
    assert got["args"] == ([1.0, 2.0, 4.0, 8.0], [2.1, 2.05, 2.025, 2.0125], True)
    fit = FitResult(L0=0.0, c=0.1, alpha=1.0, alpha_se=0.125, r2=0.999, status="degenerate", reason="L0 = 0 at its bound 0")
    out = cv.fit_curve({"depths": [1, 2, 4, 8], "R": [2.1, 2.05, 2.025, 2.0125]})
    assert (out["status"], out["passes_5a"]) == ("degenerate: L0 = 0 at its bound 0", False)
