"""Claim 3 (depthscale.experiments.nonlinear_easy.c3: nonlinear, easy task, one layer suffices)
pinned to exact values: R_1 / Var(y*) < 1% (strict: exactly 1% FAILs), no paired difference
R_1 - R_L beyond 2 SE (strict: exactly 2 SE is not beyond; a non-finite SE counts as beyond), top-1
mass > 0.95 at every depth (strict), the seeds paired across depths (mean and SE over seeds with
several), the texts of the detail, the keys of the measured dict, the missing-run messages and the
certificate gate's INCONCLUSIVE. Inputs are made up (tests/claims_world.py, a TEST FIXTURE); the
certificates are the real module's on CertBackend's per-context errors. Every number is exactly
representable (Var(y*) 64 at L = 1, 32 deeper; paired SE 0.125), so "exactly 1%" and "exactly
2 SE" are exact. Decoy runs of the same spectra (linear model on the easy task, nonlinear model
on the difficult task) would FAIL every spectrum if they were read."""

from __future__ import annotations

import math
import re

import pytest

from claims_world import DEPTHS, CertBackend, FakePaired, FakeTheory, World, use_cert_backend, use_paired
from depthscale.analysis import claims
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS, MissingRuns
from depthscale.config.paper import FIG4_SPECTRA
from depthscale.experiments import nonlinear_easy

LABELS = ["(0,0)", "(0.25,0)", "(0.5,0)", "(1,0)", "(0,0.25)", "(0,0.5)", "(0,1)"]
R = [0.5, 0.375, 0.375, 0.375, 0.375, 0.375, 0.25]  # R_1 - R_64 = 0.25: exactly 2 SE, not beyond
VAR = [64.0] + [32.0] * 6  # Var(y*) is read at L = 1 only: R_1 / Var(y*) = 0.5 / 64 = 0.0078125
TOP1 = [0.96875, 0.984375, 0.99, 0.99, 0.99, 0.99, 0.99]
SE = 0.125
HEAD = ("criterion: R_1 < 1% of Var(y*); no paired difference R_1 - R_L (shared evaluation contexts; several "
        "seeds: mean and SE over seeds) > 2 SE; top-1 mass > 0.95 at every depth; a spectrum reading a depth that "
        "fails a certificate (SPEC §4) INCONCLUSIVE; seeds per cell: 1 (one seed: the cpu preset's budget) | ")
PAIRED = ("R_1 - R_L: L=2 0.125±0.125, L=4 0.125±0.125, L=8 0.125±0.125, L=16 0.125±0.125, L=32 0.125±0.125, "
          "L=64 0.25±0.125")
PASS_PART = f"R_1/Var(y*)=0.007812 (< 0.01 ok); {PAIRED} (none > 2 SE); top-1 mass min 0.9688 (> 0.95 ok) → ok"


class StoreRecordingPaired(FakePaired):
    """FakePaired that records the store (reader) each paired_difference call is handed."""

    def __init__(self, world, se):
        super().__init__(world, se)
        self.stores: list = []

    def paired_difference(self, store, rid_a, rid_b, device="cpu"):
        self.stores.append(store)
        return super().paired_difference(store, rid_a, rid_b, device)


def build(monkeypatch, se=SE, odd=None, fail=None):
    """Every FIG4 spectrum one seed of (R, VAR, TOP1) over the depths, except `odd`'s spectra
    ({(a, b): {"R": ..., "var_ystar": ..., "top1_mass": ...}}, a callable of the World instead to
    add the spectrum's runs itself); decoys of every spectrum under the linear model (easy) and
    the difficult task (k = 2); certificates broken where `fail` says ({(1, a, b): {name: [L]}})."""
    w = World()
    pm = StoreRecordingPaired(w, se)
    use_paired(monkeypatch, pm)
    backend = CertBackend(w)
    backend.fail = dict(fail or {})
    use_cert_backend(monkeypatch, backend)
    for a, b in FIG4_SPECTRA:
        got = (odd or {}).get((a, b), {})
        if callable(got):
            got(w)
            continue
        w.series("nonlinear", "easy", 1, a, b, got.get("R", R), var_ystar=got.get("var_ystar", VAR),
                 top1_mass=got.get("top1_mass", TOP1))
        w.series("linear", "easy", 1, a, b, 5.0, var_ystar=1.0, top1_mass=0.5)
        w.series("nonlinear", "difficult", 2, a, b, 5.0, seed=0, var_ystar=1.0, top1_mass=0.5)
    return w.results(), pm


def detail_of(parts: dict, head: str = HEAD) -> str:
    """The expected detail: HEAD, then each spectrum's part (PASS_PART unless `parts` says)."""
    return head + "; ".join(f"{lbl} {parts.get(lbl, PASS_PART)}" for lbl in LABELS)


def certificates_of(res, a, b) -> dict:
    stored, _ = claims.gate(res, [("nonlinear", "easy", 1, a, b, None)])
    return stored


def test_c3_passes_with_exactly_2_se_at_l64_and_pins_measured_and_detail(monkeypatch):
    res, pm = build(monkeypatch)
    meas, v, detail = nonlinear_easy.c3(res, FakeTheory())
    assert v == PASS
    assert detail == detail_of({})
    assert list(meas) == LABELS
    paired = {f"L={L}": {"diff": 0.125, "se": SE} for L in DEPTHS[1:-1]}
    paired["L=64"] = {"diff": 0.25, "se": SE}
    assert meas["(0,0)"] == {"R1_over_var": 0.0078125, "top1_min": 0.96875, "verdict": PASS,
                             "certificates": certificates_of(res, 0.0, 0.0), "paired_R1_minus_RL": paired}
    assert list(meas["(0,1)"]["certificates"]) == ["nonlinear/easy (0,1)"]
    assert list(meas["(0,1)"]) == ["R1_over_var", "top1_min", "certificates", "verdict", "paired_R1_minus_RL"]
    assert all(meas[lbl]["verdict"] == PASS for lbl in LABELS)
    assert all(s is res.reader for s in pm.stores) and len(pm.stores) == 7 * 6


def test_c3_r1_exactly_1_percent_of_var_fails_that_spectrum(monkeypatch):
    # 0.64 / 64 is the double nearest 0.01: R_1 / Var(y*) == 0.01, not below it
    res, _ = build(monkeypatch, odd={(0.25, 0.0): {"R": [0.64] * 6 + [0.515]}})
    meas, v, detail = nonlinear_easy.c3(res, FakeTheory())
    assert v == FAIL
    odd = ("R_1/Var(y*)=0.01 (< 0.01 NO); R_1 - R_L: L=2 0±0.125, L=4 0±0.125, L=8 0±0.125, L=16 0±0.125, "
           "L=32 0±0.125, L=64 0.125±0.125 (none > 2 SE); top-1 mass min 0.9688 (> 0.95 ok) → NO")
    assert detail == detail_of({"(0.25,0)": odd})
    assert meas["(0.25,0)"]["R1_over_var"] == 0.01 and meas["(0.25,0)"]["verdict"] == FAIL
    assert meas["(0,0)"]["verdict"] == PASS


def test_c3_top1_mass_exactly_095_at_one_depth_fails(monkeypatch):
    top1 = list(TOP1)
    top1[3] = 0.95
    res, _ = build(monkeypatch, odd={(0.5, 0.0): {"top1_mass": top1}})
    meas, v, detail = nonlinear_easy.c3(res, FakeTheory())
    assert v == FAIL
    odd = f"R_1/Var(y*)=0.007812 (< 0.01 ok); {PAIRED} (none > 2 SE); top-1 mass min 0.95 (> 0.95 NO) → NO"
    assert detail == detail_of({"(0.5,0)": odd})
    assert meas["(0.5,0)"]["top1_min"] == 0.95 and meas["(0.5,0)"]["verdict"] == FAIL


@pytest.mark.parametrize("odd,what", [({"top1_mass": [0.96875] * 3 + [math.nan] + [0.96875] * 3}, "the top-1 mass"),
                                      ({"var_ystar": [math.nan] * 7}, "Var(y*)"),
                                      ({"top1_mass": [math.nan] * 7, "var_ystar": [math.nan] * 7},
                                       "Var(y*) and the top-1 mass")])
def test_c3_an_unmeasured_top1_mass_var_or_r1_is_inconclusive_never_a_no(monkeypatch, odd, what):
    """A run without its top-1 mass or Var(y*) read as "top-1 mass > 0.95 NO" or "R_1/Var NO": the claim
    FAILed on what was not measured (claims.py: never judged on it; a missing measurement is MissingRuns).
    (A non-finite R_1 is a run require() already reports missing.)"""
    res, _ = build(monkeypatch, odd={(0.5, 0.0): odd})
    with pytest.raises(MissingRuns, match=re.escape(f"nonlinear/easy (0.5,0): {what} not measured")):
        nonlinear_easy.c3(res, FakeTheory())
    out = claims.check(nonlinear_easy.CLAIMS[0], res, FakeTheory())
    assert out["verdict"] == INCONCLUSIVE and f"{what} not measured" in out["detail"]


def test_c3_depth_helping_beyond_2_se_at_two_depths_names_both(monkeypatch):
    res, _ = build(monkeypatch, odd={(1.0, 0.0): {"R": [0.5, 0.375, 0.375, 0.375, 0.375, 0.125, 0.125]}})
    meas, v, detail = nonlinear_easy.c3(res, FakeTheory())
    assert v == FAIL
    odd = ("R_1/Var(y*)=0.007812 (< 0.01 ok); R_1 - R_L: L=2 0.125±0.125, L=4 0.125±0.125, L=8 0.125±0.125, "
           "L=16 0.125±0.125, L=32 0.375±0.125, L=64 0.375±0.125 (depth helps at L=32,64); "
           "top-1 mass min 0.9688 (> 0.95 ok) → NO")
    assert detail == detail_of({"(1,0)": odd})
    assert meas["(1,0)"]["paired_R1_minus_RL"]["L=32"] == {"diff": 0.375, "se": SE}


def test_c3_a_non_finite_paired_se_counts_as_depth_helping(monkeypatch):
    res, _ = build(monkeypatch, se=math.nan)
    meas, v, detail = nonlinear_easy.c3(res, FakeTheory())
    assert v == FAIL
    nan_part = ("R_1/Var(y*)=0.007812 (< 0.01 ok); R_1 - R_L: L=2 0.125±nan, L=4 0.125±nan, L=8 0.125±nan, "
                "L=16 0.125±nan, L=32 0.125±nan, L=64 0.25±nan (depth helps at L=2,4,8,16,32,64); "
                "top-1 mass min 0.9688 (> 0.95 ok) → NO")
    assert detail == detail_of(dict.fromkeys(LABELS, nan_part))
    assert all(meas[lbl]["verdict"] == FAIL for lbl in LABELS)


def two_seeds_at_shallow_depths(w):
    """(0,0): seed 0 at every depth, seed 1 at L = 1, 2 only (its gain 0.625 at L = 2)."""
    w.series("nonlinear", "easy", 1, 0.0, 0.0, R, var_ystar=VAR, top1_mass=TOP1)
    w.series("nonlinear", "easy", 1, 0.0, 0.0, [0.75, 0.125], depths=(1, 2), seed=1, var_ystar=64.0,
             top1_mass=0.96875)


def test_c3_pairs_only_seeds_at_both_depths_with_mean_and_se_over_seeds(monkeypatch):
    res, pm = build(monkeypatch, odd={(0.0, 0.0): two_seeds_at_shallow_depths})
    meas, v, detail = nonlinear_easy.c3(res, FakeTheory())
    assert v == PASS
    ids = {(r["seed"], L): r["run_id"] for L in DEPTHS for r in res.runs("nonlinear", "easy", 1, 0.0, 0.0, L)}
    assert pm.calls[:3] == [("paired_difference", ids[0, 1], ids[0, 2]), ("paired_difference", ids[1, 1], ids[1, 2]),
                            ("paired_difference", ids[0, 1], ids[0, 4])]
    assert len(pm.calls) == 7 * 6 + 1
    # L=2: per-seed gains 0.125 and 0.625: mean 0.375, SE over seeds 0.25 (the paired SE 0.125 unused)
    assert meas["(0,0)"]["paired_R1_minus_RL"]["L=2"] == {"diff": 0.375, "se": 0.25}
    assert meas["(0,0)"]["paired_R1_minus_RL"]["L=4"] == {"diff": 0.125, "se": SE}
    assert meas["(0,0)"]["R1_over_var"] == 0.625 / 64
    odd = PASS_PART.replace("0.007812", "0.009766").replace("L=2 0.125±0.125", "L=2 0.375±0.25")
    head = HEAD.replace("seeds per cell: 1 (", "seeds per cell: 1-2 (")
    assert detail == detail_of({"(0,0)": odd}, head)


def test_c3_without_a_seed_at_both_depths_names_the_spectrum_and_depth(monkeypatch):
    def apart(w):  # (0,0.25): seed 0 at L = 1 only, seed 1 at every other depth
        w.series("nonlinear", "easy", 1, 0.0, 0.25, R[:1], depths=(1,), var_ystar=64.0, top1_mass=0.99)
        w.series("nonlinear", "easy", 1, 0.0, 0.25, R[1:], depths=DEPTHS[1:], seed=1, var_ystar=32.0,
                 top1_mass=0.99)

    res, _ = build(monkeypatch, odd={(0.0, 0.25): apart})
    with pytest.raises(MissingRuns) as e:
        nonlinear_easy.c3(res, FakeTheory())
    assert str(e.value) == "missing runs: nonlinear/easy (0,0.25): no seed at both L=1 and L=2"


def test_c3_missing_l1_past_require_names_the_spectrum(monkeypatch):
    """Defence in depth: were `require` to let a series without L = 1 through, c3 still says so."""
    res, _ = build(monkeypatch, odd={(0.0, 0.5): lambda w: w.series("nonlinear", "easy", 1, 0.0, 0.5, R[1:],
                                                                     depths=DEPTHS[1:], var_ystar=32.0)})
    with pytest.raises(MissingRuns) as e:
        nonlinear_easy.c3(res, FakeTheory())
    assert str(e.value).startswith("missing runs: 1 cell(s): nonlinear/easy (0,0.5) L=1")
    monkeypatch.setattr(nonlinear_easy, "require", lambda *a, **k: None)
    with pytest.raises(MissingRuns) as e:
        nonlinear_easy.c3(res, FakeTheory())
    assert str(e.value) == "missing runs: nonlinear/easy (0,0.5) L=1"


def test_c3_a_failing_certificate_makes_that_spectrum_inconclusive_naming_it(monkeypatch):
    res, _ = build(monkeypatch, fail={(1, 0.0, 1.0): {"doubling": [64]}})
    meas, v, detail = nonlinear_easy.c3(res, FakeTheory())
    _, problem = claims.gate(res, [("nonlinear", "easy", 1, 0.0, 1.0, None)])
    assert problem == "nonlinear/easy (0,1) uncertified: doubling fails at L=64"
    assert v == INCONCLUSIVE
    odd = PASS_PART.replace("→ ok", f"→ INCONCLUSIVE ({problem})")
    assert detail == detail_of({"(0,1)": odd})
    assert meas["(0,1)"]["verdict"] == INCONCLUSIVE and meas["(0,0)"]["verdict"] == PASS
    assert meas["(0,1)"]["certificates"] == certificates_of(res, 0.0, 1.0)
    assert meas["(0,1)"]["certificates"]["nonlinear/easy (0,1)"]["failing"]["doubling"] == [64]
