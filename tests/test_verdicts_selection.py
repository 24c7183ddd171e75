"""Claim 10 (depthscale.experiments.selection: delta_q, judged_tail, c10) pinned to exact values:
the q >= 50 boundary, the 2 SE threshold (a value exactly at 2 SE is not beyond it), the seeds paired
across the two depths, the texts of the detail and the keys of the measured dict. Inputs are made up
(tests/claims_world.py, a TEST FIXTURE); every number is exactly representable (SEs 0.25 and 0.5),
so "exactly 2 SE" is exact."""

from __future__ import annotations

import math

import numpy as np
import pytest

from claims_world import DEPTHS, FakeCertificates, FakePaired, FakeTheory, World, use_certificates, use_paired
from depthscale.analysis import claims
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS, MissingRuns
from depthscale.experiments import selection

LMAX = DEPTHS[-1]
SERIES = "nonlinear/difficult k=2 (0,0)"
READS = [("nonlinear", "difficult", 2, 0.0, 0.0, (1, LMAX))]
Q = np.array([0.0, 10.0, 50.0, 75.0, 100.0])
BOOT_SHARE = (2.0, 2.0, 1.0)  # per-seed bootstrap SE / target: sqrt(4 + 4 + 1) / 3 = 1, exactly


class ReaderCheckingPaired(FakePaired):
    """FakePaired that records the reader (store) each bootstrap_dQ call is handed."""

    def __init__(self, world):
        super().__init__(world)
        self.readers: list = []

    def bootstrap_dQ(self, store, rid_1, rid_L, percentiles=None, n_boot=1000, seed=0):
        self.readers.append(store)
        return super().bootstrap_dQ(store, rid_1, rid_L, percentiles, n_boot, seed)


def pair(w, pm, seed, dQ, se, q=Q, depths=(1, LMAX)):
    """One seed's runs at L = 1 and Lmax with the paired bootstrap's answer for them."""
    ids = w.series("nonlinear", "difficult", 2, 0.0, 0.0, [2.1, 2.0][:len(depths)], depths=depths, seed=seed)
    if len(ids) == 2:
        pm.dQ[tuple(ids)] = {"q": q, "dQ": dQ, "se": se}
    return ids


def envelope(monkeypatch, mean, se, fail=None):
    """Three seeds of the same ΔQ over Q whose bootstrap SEs make the claim's SE exactly `se`
    (SE over seeds 0); certificates from FakeCertificates, failing where `fail` says."""
    w = World()
    pm = ReaderCheckingPaired(w)
    use_paired(monkeypatch, pm)
    fc = FakeCertificates()
    if fail:
        fc.fail[(2, 0.0, 0.0)] = fail
    use_certificates(monkeypatch, fc)
    for seed, share in enumerate(BOOT_SHARE):
        pair(w, pm, seed, np.array(mean, float), share * np.array(se, float))
    return w.results()


def criterion(how):
    return (f"criterion: ΔQ(q) = Q_1(q) - Q_{LMAX}(q) > 2 SE for every q >= 50; SE: {how}; L=1 or L={LMAX} "
            "failing a certificate (SPEC §4), or fewer than 3 seeds on the envelope: INCONCLUSIVE | ")


THREE = "the larger of the SE over 3 seeds and the bootstrap SE of their mean"


# ---------------------------------------------------------------- judged_tail


def test_judged_tail_counts_from_q50_skips_zero_and_nonfinite_se_and_z_above_2_strictly():
    q = np.array([0.0, 25.0, 50.0, 60.0, 70.0, 80.0, 90.0])
    mean = np.array([-5.0, -5.0, 0.625, 0.5, -1.0, -1.0, 0.125])
    se = np.array([0.25, 0.25, 0.25, 0.25, 0.0, math.nan, 0.25])
    # judged: q = 50, 60, 90 with z = 2.5, 2 (not beyond), 0.5 (the smallest, last of them)
    assert selection.judged_tail(q, mean, se) == {"min_dQ_over_se": 0.5, "at_q": 90.0, "n_beyond_2se": 1, "n": 5}


def test_judged_tail_reports_q50_when_it_is_the_smallest():
    q = np.array([0.0, 50.0, 60.0])
    mean = np.array([-1.0, 0.125, 1.0])
    se = np.array([0.25, 0.25, 0.25])
    assert selection.judged_tail(q, mean, se) == {"min_dQ_over_se": 0.5, "at_q": 50.0, "n_beyond_2se": 1, "n": 2}


def test_judged_tail_without_a_usable_se_above_q50_counts_only():
    q = np.array([0.0, 50.0, 60.0])
    mean = np.array([1.0, 1.0, 1.0])
    se = np.array([0.25, 0.0, math.nan])
    assert selection.judged_tail(q, mean, se) == {"n_beyond_2se": 0, "n": 2}


# ---------------------------------------------------------------- delta_q


def test_delta_q_pairs_only_seeds_at_both_depths_through_the_results_reader(monkeypatch):
    w = World()
    pm = ReaderCheckingPaired(w)
    use_paired(monkeypatch, pm)
    a = pair(w, pm, 0, np.array([0.25, 0.5]), np.array([0.25, 0.25]), q=np.array([0.0, 50.0]))
    b = pair(w, pm, 1, np.array([0.75, 1.0]), np.array([0.25, 0.25]), q=np.array([0.0, 50.0]))
    pair(w, pm, 2, None, None, depths=(1,))  # seed 2 at L = 1 only: not used
    res = w.results()
    q, mean, se, how = selection.delta_q(res)
    assert pm.calls == [("bootstrap_dQ", *a), ("bootstrap_dQ", *b)]
    assert len(pm.readers) == 2 and all(r is res.reader for r in pm.readers)
    assert q.tolist() == [0.0, 50.0] and mean.tolist() == [0.5, 0.75]
    assert how == "the larger of the SE over 2 seeds and the bootstrap SE of their mean"


def test_delta_q_without_a_common_seed_names_both_depths(monkeypatch):
    w = World()
    pm = FakePaired(w)
    use_paired(monkeypatch, pm)
    pair(w, pm, 0, None, None, depths=(1,))
    w.series("nonlinear", "difficult", 2, 0.0, 0.0, [2.0], depths=(LMAX,), seed=1)
    with pytest.raises(MissingRuns) as e:
        selection.delta_q(w.results())
    assert str(e.value) == f"missing runs: no seed at both L=1 and L={LMAX}"
    assert pm.calls == []


def test_delta_q_one_seed_converts_to_float64_and_says_bootstrap_se(monkeypatch):
    w = World()
    pm = FakePaired(w)
    use_paired(monkeypatch, pm)
    # a bootstrap answering integer percentiles and float32 arrays (as one computed on a device)
    pair(w, pm, 0, np.array([0.5, 0.75], np.float32), np.array([0.25, 0.5], np.float32), q=[0, 50])
    q, mean, se, how = selection.delta_q(w.results())
    assert (q.dtype, mean.dtype, se.dtype) == (np.float64, np.float64, np.float64)
    assert (q.tolist(), mean.tolist(), se.tolist()) == ([0.0, 50.0], [0.5, 0.75], [0.25, 0.5])
    assert how == "bootstrap SE over evaluation contexts (one seed)"


# ---------------------------------------------------------------- c10


def test_c10_exactly_2_se_is_not_beyond_and_the_detail_says_so(monkeypatch):
    res = envelope(monkeypatch, [-0.75, -0.5, 0.5, 0.625, 0.625], [0.5, 0.25, 0.25, 0.25, 0.25])
    meas, v, detail = selection.c10(res, FakeTheory())
    assert v == FAIL
    assert detail == criterion(THREE) + ("q=50: 0.5±0.25 NO; q=75: 0.625±0.25 ok; q=100: 0.625±0.25 ok; "
                                         "beside: lowest q=0: -0.75±0.5")
    assert meas["q>=50 (judged)"] == {"min_dQ_over_se": 2.0, "at_q": 50.0, "n_beyond_2se": 2, "n": 3}


def test_c10_passes_at_2_5_se_with_the_judged_qs_first_in_measured(monkeypatch):
    res = envelope(monkeypatch, [-0.75, -0.5, 0.625, 0.625, 0.625], [0.5, 0.25, 0.25, 0.25, 0.25])
    meas, v, detail = selection.c10(res, FakeTheory())
    assert v == PASS
    assert detail == criterion(THREE) + ("q=50: 0.625±0.25 ok; q=75: 0.625±0.25 ok; q=100: 0.625±0.25 ok; "
                                         "beside: lowest q=0: -0.75±0.5")
    assert list(meas) == ["q>=50 (judged)", "q50", "q75", "q100", "q0", "q10", "certificates"]
    assert meas["q>=50 (judged)"] == {"min_dQ_over_se": 2.5, "at_q": 50.0, "n_beyond_2se": 3, "n": 3}
    assert {k: meas[k] for k in ("q50", "q0", "q10")} == {"q50": {"dQ": 0.625, "se": 0.25},
                                                          "q0": {"dQ": -0.75, "se": 0.5},
                                                          "q10": {"dQ": -0.5, "se": 0.25}}
    stored, problem = claims.gate(res, READS)
    assert problem == "" and list(stored) == [SERIES] and meas["certificates"] == stored


def test_c10_with_a_failing_certificate_is_inconclusive_naming_it(monkeypatch):
    res = envelope(monkeypatch, [-0.75, -0.5, 0.625, 0.625, 0.625], [0.5, 0.25, 0.25, 0.25, 0.25],
                   fail={"doubling": [LMAX]})
    meas, v, detail = selection.c10(res, FakeTheory())
    stored, problem = claims.gate(res, READS)
    assert v == INCONCLUSIVE and problem.startswith(f"{SERIES} uncertified: ") and f"L={LMAX}" in problem
    assert detail.endswith(f"beside: lowest q=0: -0.75±0.5; → INCONCLUSIVE ({problem})")
    assert meas["certificates"] == stored and meas["certificates"][SERIES]["failing"]["doubling"] == [LMAX]
