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
