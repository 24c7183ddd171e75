"""Claim 5c (depthscale.experiments.nonlinear_floor.c5c) pinned to exact values: the series it reads
(nonlinear, difficult; k = 2 at every top-2 spectrum of Tables 1 and 4, k = 16 at Table 4's four;
decoys of the other k at the same spectra, of k = 16 at (0,0), of a spectrum without a paper L0, of
the linear model and of the easy task), the paper's L0 of each item, the floor it compares with
(paired.floor_on_eval on the config of the deepest run of the lowest seed, through the results'
reader), both 5% checks on each side at their boundary, the strictness of the two-sided checks
written down below, a missing or degenerate fit (INCONCLUSIVE; FAIL where the depth effect is
absent), the certificate and seeds gate (the real certificates module over CertBackend's made-up
per-context losses), the measured dict, the missing-run messages, the geometry and store checks and
the detail text. Inputs are made up (tests/claims_world.py, a TEST FIXTURE); the fits are replaced
by chosen FitResults (`use_fits`) and the floors by FakePaired's.

Strictness: |L0/x - 1| <= 0.05 can never be decided by `<=` against `<`: for 1/2 <= L0/x <= 2 the
subtraction is exact (Sterbenz), so L0/x - 1 is a multiple of 2^-53, and the double 0.05 is an odd
multiple of 2^-56. The boundary tests take the two adjacent doubles around the threshold instead.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from claims_world import DEPTHS, CertBackend, FakePaired, FakeTheory, World, use_cert_backend, use_paired
from depthscale.analysis import claims
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, NEEDS_STORE, PASS, CannotJudge, MissingRuns
from depthscale.analysis.results import Results
from depthscale.config.records import PRESET_KS
from depthscale.experiments import nonlinear_floor
from depthscale.theory.fits import FitResult

LMAX = DEPTHS[-1]
# 5c's items in order: (k, a, b), label, the paper's L0, and as the detail writes, with the default
# world: the fitted L0 (paper × 33/32), its SE (paper / 64), the floor (paper × 63/64) and R_64
ITEMS = (
    ((2, 0.0, 0.0), "(0,0)", 2.007, "2.007", "2.07", "0.03136", "1.976", "2.038"),
    ((2, 0.0, 0.25), "(0,0.25)", 1.268, "1.268", "1.308", "0.01981", "1.248", "1.288"),
    ((2, 0.0, 0.5), "(0,0.5)", 0.836, "0.836", "0.8621", "0.01306", "0.8229", "0.8491"),
    ((2, 0.0, 1.0), "(0,1)", 0.424, "0.424", "0.4372", "0.006625", "0.4174", "0.4306"),
    ((2, 0.25, 0.0), "(0.25,0)", 1.255, "1.255", "1.294", "0.01961", "1.235", "1.275"),
    ((2, 0.5, 0.0), "(0.5,0)", 0.798, "0.798", "0.8229", "0.01247", "0.7855", "0.8105"),
    ((2, 1.0, 0.0), "(1,0)", 0.341, "0.341", "0.3517", "0.005328", "0.3357", "0.3463"),
    ((2, 0.25, 0.25), "(0.25,0.25)", 0.818068, "0.8181", "0.8436", "0.01278", "0.8053", "0.8309"),
    ((2, 0.25, 0.5), "(0.25,0.5)", 0.559694, "0.5597", "0.5772", "0.008745", "0.5509", "0.5684"),
    ((2, 0.5, 0.5), "(0.5,0.5)", 0.382188, "0.3822", "0.3941", "0.005972", "0.3762", "0.3882"),
    ((16, 0.0, 0.25), "k=16 (0,0.25)", 0.173237, "0.1732", "0.1787", "0.002707", "0.1705", "0.1759"),
    ((16, 0.0, 0.5), "k=16 (0,0.5)", 0.114436, "0.1144", "0.118", "0.001788", "0.1126", "0.1162"),
    ((16, 0.25, 0.25), "k=16 (0.25,0.25)", 0.115248, "0.1152", "0.1188", "0.001801", "0.1134", "0.117"),
    ((16, 0.25, 0.5), "k=16 (0.25,0.5)", 0.079785, "0.07978", "0.08228", "0.001247", "0.07854", "0.08103"),
)
PAPER_L0 = {key: p for key, _, p, *_ in ITEMS}
LABEL = {key: lab for key, lab, *_ in ITEMS}
JUDGED = (2, 0.0, 0.0)  # the first item
CRITERION = (
    "criterion: at d=16, P=64: the fitted L0 (well posed; a degenerate fit INCONCLUSIVE, FAIL where R_1 - R_Lmax "
    "is within 2 SE) within 5% of the paper's L0 and within 5% of the softmax-ensemble floor on the run's own "
    "evaluation contexts, every spectrum with a paper L0 (Tables 1, 4); an item reading a depth that fails a "
    "certificate (SPEC §4), or with fewer than 3 seeds on the envelope, INCONCLUSIVE")
BENDS = "a fit needs more depths (beyond L=64, where the curve still bends) or a longer budget"
EFFECT_00 = "R_1 - R_64 = 1.976±0.005198"  # (0,0)'s default R = 2.007 (1 + 1/L), seeds ±0.2%
DEGENERATE = "degenerate fit: L0 on its bound"


class ReaderPaired(FakePaired):
    """FakePaired that also records the reader floor_on_eval is given."""

    def __init__(self, world):
        super().__init__(world)
        self.readers: list = []

    def floor_on_eval(self, cfg, reader=None):
        self.readers.append(reader)
        return super().floor_on_eval(cfg, reader=reader)


def fit(L0, se, reason=""):
    return FitResult(L0=L0, c=1.0, alpha=1.0, alpha_se=0.03125, r2=0.9990234375, L0_se=se,
                     status="degenerate" if reason else "ok", reason=reason)


def default_fit(key):
    """A well-posed fit with L0 = paper × 33/32 (+3.1%), SE paper / 64; L0 99 off the paper's items."""
    p = PAPER_L0.get(key)
    return fit(99.0, 1.0) if p is None else fit(p * 33 / 32, p / 64)


def use_fits(mp, fits):
    """c5c's loss_fit: the series asked for, fits[(k, a, b)] (default_fit) as its fit; returns the calls."""
    calls = []

    def loss_fit(res, model, task, k, a, b, floor=None):
        calls.append((model, task, k, a, b))
        key = (k, a, b) if (model, task) == ("nonlinear", "difficult") else None
        return res.series(model, task, k, a, b), (fits[key] if key in fits else default_fit(key))
    mp.setattr(nonlinear_floor, "loss_fit", loss_fit)
    return calls


def spy_gate(mp):
    """c5c's gate, recording (reads, what it returned)."""
    seen = []

    def gate(res, reads):
        seen.append((reads, claims.gate(res, reads)))
        return seen[-1][1]
    mp.setattr(nonlinear_floor, "gate", gate)
    return seen


def world(mp, fits=None, floors=None, R=None, fail=None, one_seed=(), keys=tuple(PAPER_L0)):
    """Every item of `keys` over the cpu depths: R_L = paper × (1 + 1/L) (3 seeds ±0.2%, one seed for
    the keys in one_seed) or R[key]; floors[key] (default paper × 63/64); fail: CertBackend's. Decoys, never read: the other k
    at each k = 16 spectrum is an item itself; k = 16 at (0,0), k = 2 at (1,1) (no paper L0), the
    linear model and the easy task at (0,0). Returns (results, paired fake, loss_fit calls, run ids)."""
    w, rids = World(), {}
    for key in keys:
        k, a, b = key
        values = (R or {}).get(key, [PAPER_L0[key] * (1 + 1 / L) for L in DEPTHS])
        rids[key] = w.series("nonlinear", "difficult", k, a, b, values, seed=0 if key in one_seed else None)
    w.series("nonlinear", "difficult", 16, 0.0, 0.0, [5.0] * len(DEPTHS))
    w.series("nonlinear", "difficult", 2, 1.0, 1.0, [5.0] * len(DEPTHS))
    w.series("linear", "difficult", 2, 0.0, 0.0, [9.0] * len(DEPTHS))
    w.series("nonlinear", "easy", 1, 0.0, 0.0, [9.0] * len(DEPTHS))
    pm = ReaderPaired(w)
    pm.floor = {(a, b, k): PAPER_L0[(k, a, b)] * 63 / 64 for k, a, b in keys} | {
        (a, b, k): v for (k, a, b), v in (floors or {}).items()}
    pm.floor[(0.0, 0.0, 16)] = pm.floor[(1.0, 1.0, 2)] = 50.0
    use_paired(mp, pm)
    cb = CertBackend(w)
    cb.fail.update(fail or {})
    use_cert_backend(mp, cb)
    return w.results(), pm, use_fits(mp, fits or {}), rids


def judge(**kw) -> SimpleNamespace:
    """c5c on world(**kw), called by the test itself: results, fakes, calls, gates and verdicts."""
    with pytest.MonkeyPatch.context() as mp:
        res, pm, calls, rids = world(mp, **kw)
        gates = spy_gate(mp)
        meas, v, detail = nonlinear_floor.c5c(res, FakeTheory())
    return SimpleNamespace(res=res, pm=pm, calls=calls, rids=rids, gates=gates, meas=meas, v=v, detail=detail)


def row(key):
    return next(r for r in ITEMS if r[0] == key)


def item_text(key, L0, se, rp, ok_p, fl, rf, ok_f, R, end):
    lab, p = LABEL[key], row(key)[3]
    return (f"{lab} L0={L0}±{se} vs paper {p} ({rp}, {ok_p}) and floor on its evaluation contexts {fl} ({rf}, "
            f"{ok_f}); beside: R_64={R} → {end}")


def default_text(key, end="ok"):
    _, _, _, _, L0, se, fl, R = row(key)
    return item_text(key, L0, se, "+3.1%", "ok", fl, "+4.8%", "ok", R, end)


def detail_with(changed=None, keys=tuple(PAPER_L0), extra=""):
    """The detail of the default world, with changed[key] for the items given."""
    return CRITERION + extra + " | " + "; ".join((changed or {}).get(key, default_text(key)) for key in keys)


def deep_R(res, key):
    return float(res.series("nonlinear", "difficult", *key).get("R")[-1])


def stored(out, key):
    """The certificates c5c's gate returned for the item `key` (its reads pinned)."""
    reads, (cert, _) = out.gates[list(out.rids).index(key)]
    assert reads == [("nonlinear", "difficult", *key, None)]
    return cert


def reinstall(mp, base):
    """The default world's fakes again (fresh ones), for another call of c5c on its results."""
    pm = ReaderPaired(base.pm.world)
    pm.floor = dict(base.pm.floor)
    use_paired(mp, pm)
    use_cert_backend(mp, CertBackend(base.pm.world))
    return pm, use_fits(mp, {})


def rerun(mp, base) -> SimpleNamespace:
    """c5c on the default world's results (each test calls c5c itself: mutmut maps tests to the
    functions they call, and a module fixture's call would count for its first test only)."""
    pm, calls = reinstall(mp, base)
    gates = spy_gate(mp)
    meas, v, detail = nonlinear_floor.c5c(base.res, FakeTheory())
    return SimpleNamespace(res=base.res, pm=pm, calls=calls, rids=base.rids, gates=gates, meas=meas, v=v,
                           detail=detail)


# ---------------------------------------------------------------- what 5c reads, measures and says


@pytest.fixture(scope="module")
def base():
    """The default world (built once; c5c is not called here)."""
    with pytest.MonkeyPatch.context() as mp:
        res, pm, _, rids = world(mp)
    return SimpleNamespace(res=res, pm=pm, rids=rids)


def test_c5c_reads_each_items_own_series_and_floor_into_the_measured_dict(monkeypatch, base):
    out = rerun(monkeypatch, base)
    res, meas = out.res, out.meas
    assert out.v == PASS
    assert out.calls == [("nonlinear", "difficult", k, a, b) for k, a, b in PAPER_L0]
    assert [reads for reads, _ in out.gates] == [[("nonlinear", "difficult", *key, None)] for key in PAPER_L0]
    # the floor of each item once, on the config of its run at L=64 of seed 0 (its first seed), through res.reader
    assert out.pm.calls == [("floor_on_eval", out.rids[key][len(DEPTHS) - 1]) for key in PAPER_L0]
    assert len(out.pm.readers) == len(ITEMS) and all(r is res.reader for r in out.pm.readers)
    assert list(meas) == [lab for _, lab, *_ in ITEMS]
    for key, lab, p, *_ in ITEMS:
        L0, fl = p * 33 / 32, p * 63 / 64
        assert deep_R(res, key) == pytest.approx(p * 65 / 64, rel=1e-12)
        assert meas[lab] == {"L0": L0, "L0_se": p / 64, "paper_L0": p, "ensemble_floor_on_eval": fl,
                             "L0_vs_paper": L0 / p - 1, "L0_vs_floor": L0 / fl - 1, "R_Lmax": deep_R(res, key),
                             "fit_status": "ok", "verdict": PASS, "certificates": stored(out, key)}
        assert meas[lab]["L0_vs_paper"] == pytest.approx(1 / 32) and meas[lab]["L0_vs_floor"] == pytest.approx(1 / 21)
    cert = meas["k=16 (0,0.25)"]["certificates"]
    assert list(cert) == ["nonlinear/difficult k=16 (0,0.25)"]
    assert cert["nonlinear/difficult k=16 (0,0.25)"]["computed"] == ["doubling", "construction"]


def test_c5c_detail_states_the_criterion_and_every_item_in_order(monkeypatch, base):
    out = rerun(monkeypatch, base)
    assert out.detail == detail_with()
    assert out.detail.split(" | ")[1].split("; (0,0.25) L0=")[0] == (
        "(0,0) L0=2.07±0.03136 vs paper 2.007 (+3.1%, ok) and floor on its evaluation contexts 1.976 (+4.8%, ok); "
        "beside: R_64=2.038 → ok")


# ---------------------------------------------------------------- one world, one case per item

NOFIT, DEG, FLAT, CERT_DEG = (2, 0.0, 0.0), (2, 0.0, 0.25), (2, 0.0, 0.5), (2, 0.0, 1.0)
CERT, SEEDS, HIGH, FLOOR = (2, 0.25, 0.0), (2, 0.5, 0.0), (2, 1.0, 0.0), (2, 0.25, 0.25)
CASES = (NOFIT, DEG, FLAT, CERT_DEG, CERT, SEEDS, HIGH, FLOOR)


def bent(key, reason="L0 on its bound"):
    """The default fit of `key`, degenerate."""
    f = default_fit(key)
    return fit(f.L0, f.L0_se, reason)


def check_cases_measured(out):
    """The measured items of test_c5c_each_case_sets_its_items_verdict_numbers_and_reason."""
    m = dict(out.meas["(0,0)"])
    assert math.isnan(m.pop("L0_vs_paper")) and math.isnan(m.pop("L0_vs_floor"))
    assert m == {"L0": None, "L0_se": None, "paper_L0": 2.007, "ensemble_floor_on_eval": 2.007 * 63 / 64,
                 "R_Lmax": deep_R(out.res, NOFIT), "fit_status": None, "verdict": INCONCLUSIVE,
                 "certificates": stored(out, NOFIT)}
    m = out.meas["(0,0.25)"]
    assert (m["verdict"], m["fit_status"]) == (INCONCLUSIVE, "degenerate")
    assert (m["L0"], m["L0_se"]) == (1.268 * 33 / 32, 1.268 / 64)
    m = out.meas["(0,0.5)"]
    assert (m["verdict"], m["fit_status"], m["R_Lmax"]) == (FAIL, "degenerate", deep_R(out.res, FLAT))
    assert m["R_Lmax"] == pytest.approx(0.849, rel=1e-12)
    for key in (CERT_DEG, CERT):
        m, name = out.meas[LABEL[key]], f"nonlinear/difficult k=2 {LABEL[key]}"
        assert m["verdict"] == INCONCLUSIVE and list(m["certificates"]) == [name]
        assert m["certificates"][name]["failing"] == {"doubling": [8], "construction": [], "budget": []}
    assert out.meas["(0.5,0)"]["verdict"] == INCONCLUSIVE
    high, floor, L0 = out.meas["(1,0)"], out.meas["(0.25,0.25)"], 0.341 * 1.078125
    assert high["verdict"] == FAIL and high["L0"] == L0 and high["L0_vs_paper"] == L0 / 0.341 - 1
    assert high["L0_vs_floor"] == 0.0 and floor["L0_vs_paper"] == 0.0
    assert floor["verdict"] == FAIL and floor["ensemble_floor_on_eval"] == 0.818068 / 0.9
    assert [out.meas[lab]["verdict"] for key, lab, *_ in ITEMS if key not in CASES] == [PASS] * 6


def test_c5c_each_case_sets_its_items_verdict_numbers_and_reason():
    """One world, one case per item: no fit at (0,0) and degenerate fits at (0,0.25) (depth helps):
    INCONCLUSIVE; a degenerate fit at (0,0.5) without a depth effect (flat R): FAIL; doubling failing
    at L=8 at (0,1) (degenerate fit, named too) and (0.25,0) (good fit), one seed at (0.5,0):
    INCONCLUSIVE; L0 7.8% above the paper's at (1,0), a floor 10% above L0 at (0.25,0.25): FAIL."""
    L0_high = PAPER_L0[HIGH] * 1.078125
    out = judge(fits={NOFIT: None, DEG: bent(DEG), FLAT: bent(FLAT), CERT_DEG: bent(CERT_DEG),
                      HIGH: fit(L0_high, 0.0625), FLOOR: fit(PAPER_L0[FLOOR], 0.0625)},
                R={FLAT: [0.85] * 6 + [0.849]}, floors={HIGH: L0_high, FLOOR: PAPER_L0[FLOOR] / 0.9},
                fail={CERT_DEG: {"doubling": [8]}, CERT: {"doubling": [8]}}, one_seed=(SEEDS,))
    assert out.v == FAIL
    check_cases_measured(out)
    cert = "nonlinear/difficult k=2 {} uncertified: doubling fails at L=8"
    assert out.detail == detail_with({
        NOFIT: item_text(NOFIT, "nan", "—", "+nan%", "NO", "1.976", "+nan%", "NO", "2.038",
                         f"INCONCLUSIVE (no fit; {EFFECT_00}: {BENDS})"),
        DEG: default_text(DEG, f"INCONCLUSIVE ({DEGENERATE}; R_1 - R_64 = 1.248±0.003284: {BENDS})"),
        FLAT: item_text(FLAT, "0.8621", "0.01306", "+3.1%", "ok", "0.8229", "+4.8%", "ok", "0.849",
                        f"NO ({DEGENERATE}; the depth effect is absent: R_1 - R_64 = 0.001±0.001387 within 2 SE)"),
        CERT_DEG: default_text(CERT_DEG, f"INCONCLUSIVE ({cert.format('(0,1)')}; {DEGENERATE})"),
        CERT: default_text(CERT, f"INCONCLUSIVE ({cert.format('(0.25,0)')})"),
        SEEDS: default_text(SEEDS, "INCONCLUSIVE (nonlinear/difficult k=2 (0.5,0) seeds: 1 < 3 on the envelope at "
                                   "L=1, 2, 4, 8, 16, 32, 64)"),
        HIGH: item_text(HIGH, "0.3676", "0.0625", "+7.8%", "NO", "0.3676", "+0.0%", "ok", "0.3463", "NO"),
        FLOOR: item_text(FLOOR, "0.8181", "0.0625", "+0.0%", "ok", "0.909", "-10.0%", "NO", "0.8309", "NO")})


# ---------------------------------------------------------------- the 5% boundaries


def edge(g, x):
    """Adjacent doubles (inside, outside) around |g(x)| <= 0.05, walking from x (g monotone)."""
    step = math.inf if abs(g(math.nextafter(x, math.inf))) > abs(g(x)) else -math.inf
    while abs(g(x)) > 0.05:
        x = math.nextafter(x, -step)
    while abs(g(math.nextafter(x, step))) <= 0.05:
        x = math.nextafter(x, step)
    return x, math.nextafter(x, step)


# each check on each side on its own item: (0,0) L0 5% above the paper's, (0,0.25) 5% below, (0,0.5)
# the floor 5% below L0 (L0 = the paper's), (0,1) 5% above; the other check at 0
MOVED = {(2, 0.0, 0.0): ("paper", +1), (2, 0.0, 0.25): ("paper", -1), (2, 0.0, 0.5): ("floor", +1),
         (2, 0.0, 1.0): ("floor", -1)}


def at_edge(key, outside):
    """(fit, floor) of a MOVED item one double inside (outside=False) or beyond its 5% boundary."""
    (check, side), p = MOVED[key], PAPER_L0[key]
    if check == "paper":  # L0 moves, the floor is L0 itself
        x = edge(lambda L0: L0 / p - 1, p * (1 + side * 0.05))[outside]
        return fit(x, p / 64), x
    x = edge(lambda fl: p / fl - 1, p / (1 + side * 0.05))[outside]  # the floor moves, L0 is the paper's
    return fit(p, p / 64), x


@pytest.mark.parametrize("outside", [False, True], ids=["inside", "outside"])
def test_c5c_each_five_percent_check_passes_inside_and_fails_one_double_beyond_on_each_side(outside):
    chosen = {key: at_edge(key, outside) for key in MOVED}
    out = judge(fits={k: f for k, (f, _) in chosen.items()}, floors={k: fl for k, (_, fl) in chosen.items()})
    want, mark = (FAIL, "NO") if outside else (PASS, "ok")
    assert out.v == want
    texts = {}
    for key, (check, side) in MOVED.items():
        m, (f, fl) = out.meas[LABEL[key]], chosen[key]
        moved = m["L0_vs_paper"] if check == "paper" else m["L0_vs_floor"]
        assert m["verdict"] == want and moved == pytest.approx(side * 0.05, abs=1e-15)
        assert (abs(moved) > 0.05) is outside
        shown = f"{side * 5:+.1f}%"
        rp, rf = (shown, "+0.0%") if check == "paper" else ("+0.0%", shown)
        marks = (mark, "ok") if check == "paper" else ("ok", mark)
        texts[key] = item_text(key, claims.num(f.L0), row(key)[5], rp, marks[0], claims.num(fl), rf, marks[1],
                               row(key)[7], mark)
    assert out.detail == detail_with(texts)


# ---------------------------------------------------------------- what 5c cannot judge


def without(res, model, k, a, b, L):
    """`res` (its store) without the runs of one cell."""
    df = res.df
    cell = (df["model"] == model) & (df["k"] == k) & (df["a"] == a) & (df["b"] == b) & (df["L"] == L)
    assert cell.sum() == 3
    return Results(df[~cell], res.preset, res.reader)


def test_c5c_missing_runs_name_the_k2_cells_before_the_k16_ones(base):
    res = without(base.res, "nonlinear", 16, 0.25, 0.5, 1)
    with pytest.raises(MissingRuns) as e:
        nonlinear_floor.c5c(without(res, "nonlinear", 2, 0.0, 0.0, LMAX), FakeTheory())
    assert str(e.value) == "missing runs: 1 cell(s): nonlinear/difficult k=2 (0,0) L=64"
    with pytest.raises(MissingRuns) as e:
        nonlinear_floor.c5c(res, FakeTheory())
    assert str(e.value) == "missing runs: 1 cell(s): nonlinear/difficult k=16 (0.25,0.5) L=1"


def test_c5c_off_the_papers_geometry_or_without_a_store_cannot_judge(base):
    w = World("smoke")
    for k, a, b in [key for key in PAPER_L0 if key[0] == 2]:
        w.series("nonlinear", "difficult", 2, a, b, [3.0, 2.5, 2.25], depths=(1, 2, 4))
    with pytest.raises(CannotJudge) as e:
        nonlinear_floor.c5c(w.results(), FakeTheory())
    assert str(e.value) == ("not at the paper's nonlinear geometry: the smoke preset's nonlinear runs are d=8, "
                            "P=16, the claim is made at d=16, P=64")
    with pytest.raises(CannotJudge) as e:
        nonlinear_floor.c5c(Results(base.res.df, "cpu", None), FakeTheory())
    assert str(e.value) == f"{NEEDS_STORE} (these results have no store)"


def test_c5c_a_run_without_its_config_cannot_judge_naming_it(monkeypatch, base):
    pm, _ = reinstall(monkeypatch, base)
    rid = base.rids[JUDGED][len(DEPTHS) - 1]
    monkeypatch.delitem(base.res.reader.configs, rid)
    with pytest.raises(CannotJudge) as e:
        nonlinear_floor.c5c(base.res, FakeTheory())
    assert str(e.value) == f"{NEEDS_STORE} (load_config {rid}: KeyError: '{rid}')"
    assert pm.calls == []


def test_c5c_at_a_preset_without_k16_leaves_its_items_out_and_says_so(monkeypatch, base):
    monkeypatch.setitem(PRESET_KS, "cpu", (2,))  # a preset at the paper's geometry without k = 16
    _, calls = reinstall(monkeypatch, base)
    k2 = [key for key in PAPER_L0 if key[0] == 2]
    meas, v, detail = nonlinear_floor.c5c(base.res, FakeTheory())
    assert v == PASS and list(meas) == [LABEL[key] for key in k2] and len(calls) == 10
    assert detail == detail_with(keys=k2, extra="; k=16 is not part of the cpu preset: its items are left out")


@pytest.mark.parametrize("floor", [math.nan, 0.0])
def test_c5c_a_floor_not_computed_is_inconclusive_never_a_mismatch(floor):
    """floor_on_eval answering NaN read '(+nan%, NO)' and FAILed the item on what was not computed; a floor
    of 0 divided by zero ('error while checking'). Both are now INCONCLUSIVE naming it."""
    out = judge(floors={(2, 0.0, 0.0): floor})
    lab = LABEL[(2, 0.0, 0.0)]
    assert out.meas[lab]["verdict"] == INCONCLUSIVE and out.v == INCONCLUSIVE
    assert math.isnan(out.meas[lab]["L0_vs_floor"])
    part = out.detail.split(f"{lab} L0=")[1].split("; (0,0.25)")[0]
    assert part.endswith(f"→ INCONCLUSIVE (the softmax-ensemble floor on its evaluation contexts not computed "
                         f"({claims.num(floor)}))"), part


def test_c5c_a_floor_not_computed_is_named_after_a_certificate_problem():
    out = judge(floors={CERT: math.nan}, fail={CERT: {"doubling": [8]}})
    lab = LABEL[CERT]
    part = out.detail.split(f"{lab} L0=")[1].split("; (0.5,0)")[0]
    assert part.endswith(f"→ INCONCLUSIVE (nonlinear/difficult k=2 {lab} uncertified: doubling fails at L=8; the "
                         "softmax-ensemble floor on its evaluation contexts not computed (nan))"), part
