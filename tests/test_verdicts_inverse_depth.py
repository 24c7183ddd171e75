"""Claims 5a and 6 (depthscale.experiments.inverse_depth: c5a, _item_5a, power_5a, c6, power_6)
pinned to exact values: the series each claim reads (nonlinear, difficult; 5a: k = 2 at every top-2
spectrum, then k = 16 at Table 4's four, k = 16 left out at smoke; 6: k = 2 at fig6's b = 0
spectra, over the last two depths; decoy runs of the linear model, on the easy task, at the other k
and at the other spectra, each of which would change a verdict if read), 5a's α window [0.8, 1.2],
R² >= 0.99 and |α - α_paper| <= 0.2 at their boundaries (inclusive), 6's relative change < 10% of
C_L and of A_L - C_L (strict), what power_5a / power_6 hand to the power simulation (the law, its
window, the SEs, the seeds) and the power target 0.8 (a FAIL with power below it INCONCLUSIVE), a
missing or degenerate fit (INCONCLUSIVE; FAIL where the depth effect is absent), the certificate
and seeds gate (the real certificates module over CertBackend's made-up per-context losses), the
measured dicts, the missing-run messages and the detail texts.

Inputs are made up (tests/claims_world.py, a TEST FIXTURE). 5a's fits are replaced by chosen
FitResults where a test says (SE 0.0625, R² 0.995), and 5a's law_fit and power report by recorded
stubs (PowerSpy; claim 6 runs the real power simulation unless a test stubs it). Seeds differ by
exact binary offsets, so every seed mean, relative change and boundary below is exact."""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pytest

from claims_world import DEPTHS, CertBackend, World, noise, use_cert_backend
from depthscale.analysis import claims, curves, power
from depthscale.analysis import results as results_mod
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS, MissingRuns
from depthscale.analysis.results import Series
from depthscale.config.paper import FIG14_K16, FIG56_SPECTRA, TOP2_SPECTRA
from depthscale.config.records import variant_fields
from depthscale.experiments import inverse_depth as inv
from depthscale.theory.fits import FitResult

DL = np.asarray(DEPTHS, float)
PAPER16 = {(0.0, 0.25): 0.79, (0.0, 0.5): 0.88, (0.25, 0.25): 0.81, (0.25, 0.5): 0.81}  # Table 4, k = 16
ITEMS = [(2, a, b) for a, b in TOP2_SPECTRA] + [(16, a, b) for a, b in FIG14_K16]  # 5a's items, in order
J2, J16 = (2, 0.0, 0.0), (16, 0.0, 0.25)  # the 5a items the tests move
E = 2.0 ** -8  # 5a: R of seeds 0, 1, 2 is R_L - E, R_L, R_L + E (SE over seeds E/sqrt(3))
CRIT5A = ("criterion: well-posed fits; top-2 (figs 6, 14): α in [0.8, 1.2] and R² >= 0.99; top-16 (Table 4): "
          "|α - α_paper| <= 0.2 and R² >= 0.99; an item reading a depth that fails a certificate (SPEC §4) "
          "INCONCLUSIVE, a FAIL with power < 0.8 INCONCLUSIVE (underpowered)")
CERTIFIED = "certified (doubling, construction); "
POWER_90 = "power 0.90 (400 simulations of the paper's law with these SEs)"
BEYOND = "a fit needs more depths (beyond L=64, where the curve still bends) or a longer budget"
SE_ENDS = "0.003189"  # hypot of the SEs over seeds at L = 1 and 64: E sqrt(2/3)
DOUBLING_64 = "uncertified: doubling fails at L=64"


def lab5a(k, a, b):
    return f"({a:g},{b:g})" if k == 2 else f"k=16 ({a:g},{b:g})"


@functools.lru_cache(maxsize=None)
def base5a() -> World:
    """Every 5a item, seeds 0, 1, 2: k = 2 a noisy 1 + L^-1, k = 16 a noisy 0.2 + L^-α_paper. Decoys,
    each a flat loss (a degenerate fit if read): k = 16 at (0,0), the linear model at k = 2 and the
    nonlinear model on the easy task at (0,0), the spread start at (0,0) (another recipe). Built once."""
    w = World()
    for k, a, b in ITEMS:
        R = (1.0 + DL ** -1.0) if k == 2 else (0.2 + DL ** -PAPER16[(a, b)])
        for sd in (0, 1, 2):
            w.series("nonlinear", "difficult", k, a, b, R * noise(7, 0.01) + E * (sd - 1), seed=sd)
    for sd in (0, 1, 2):
        w.series("nonlinear", "difficult", 16, 0.0, 0.0, 1.0, seed=sd)
    w.series("linear", "difficult", 2, 0.0, 0.0, 1.0)
    w.series("nonlinear", "easy", 1, 0.0, 0.0, 1.0)
    w.series("nonlinear", "difficult", 2, 0.0, 0.0, 1.0, fields=dict(variant_fields("spread", 2)))
    return w


def copy_world(base: World, keep, change) -> World:
    """A World over `base`'s store with the rows `keep(row)` accepts, each as `change(row)` returns it."""
    w = World(base.preset)
    w.store = base.store
    for r in base.rows:
        if keep(r):
            r = change(dict(r))
            w.rows.append(r)
            w.R[r["run_id"]] = r["R"]
    return w


def backend(monkeypatch, w, fail=None):
    cb = CertBackend(w)
    cb.fail.update(fail or {})
    use_cert_backend(monkeypatch, cb)
    return cb


def world5a(monkeypatch, item=J2, R=None, drop=(), fail=None):
    """base5a's results with `item`'s seed means R (over DEPTHS) and its runs (L, seed) in `drop`
    removed; the real certificates over CertBackend, failing where `fail` says."""
    def mine(r):
        return (r["model"], r["task"], r["k"], r["a"], r["b"]) == ("nonlinear", "difficult", *item)

    def change(r):
        if mine(r) and R is not None:
            r.update(R=R[DEPTHS.index(r["L"])] + E * (r["seed"] - 1))
        return r
    w = copy_world(base5a(), lambda r: not (mine(r) and (r["L"], r["seed"]) in drop), change)
    return w.results(), backend(monkeypatch, w, fail)


def fit(alpha, se=0.0625, r2=0.995, reason=""):
    return FitResult(L0=1.0, c=1.0, alpha=alpha, alpha_se=se, r2=r2, status="degenerate" if reason else "ok",
                     reason=reason)


def use_fits(monkeypatch, fits=None, real=False):
    """5a's loss_fit: the real series with fits[(k, a, b)] where given, else the real fit (`real`) or a
    passing fit (α 1 at k = 2, α_paper at k = 16); returns the calls."""
    calls, fits = [], fits or {}

    def loss_fit(res, model, task, k, a, b, floor=None):
        calls.append((model, task, k, a, b))
        if (k, a, b) in fits:
            return res.series(model, task, k, a, b), fits[(k, a, b)]
        if real:
            return curves.loss_fit(res, model, task, k, a, b, floor)
        return res.series(model, task, k, a, b), fit(1.0 if k == 2 else PAPER16[(a, b)])
    monkeypatch.setattr(inv, "loss_fit", loss_fit)
    return calls


class PowerSpy:
    """inverse_depth's law_fit (giving `law`, where given), criterion_5a, criterion_6 and power_report,
    recorded; the report gives power `p` (seeds_for_target `need` below 0.8)."""

    def __init__(self, monkeypatch, p=0.9, need=5, law=(0.5, 2.0)):
        self.p, self.need, self.law, self.laws, self.crit, self.reports = p, need, law, [], [], []
        if law is not None:
            monkeypatch.setattr(inv, "law_fit", self.law_fit)
        monkeypatch.setattr(inv, "criterion_5a", self.criterion_5a)
        monkeypatch.setattr(inv, "criterion_6", self.criterion_6)
        monkeypatch.setattr(inv, "power_report", self.power_report)

    def law_fit(self, L, R, alpha=1.0):
        self.laws.append((np.asarray(L).tolist(), np.asarray(R).tolist(), alpha))
        return self.law

    def criterion_5a(self, L, L0, c, lo=0.8, hi=1.2, r2_min=0.99, alpha=1.0):
        self.crit.append({"L": np.asarray(L).tolist(), "dtype": np.asarray(L).dtype, "L0": L0, "c": c, "lo": lo,
                          "hi": hi, "r2_min": r2_min, "alpha": alpha})
        return ("criterion", len(self.crit) - 1)

    def criterion_6(self, *args, **kwargs):
        self.crit.append({"args": args, "kwargs": kwargs})
        return ("criterion", len(self.crit) - 1)

    def power_report(self, crit, mean, se, n_seeds, *args, **kwargs):
        self.reports.append({"crit": crit, "mean": np.asarray(mean).tolist(), "se": np.asarray(se).tolist(),
                             "n_seeds": n_seeds, "more": (args, kwargs)})
        return self.stub(n_seeds)

    def stub(self, n_seeds):
        return {"power": self.p, "sims": 400, "seed": power.SEED, "n_seeds": n_seeds, "target": 0.8,
                "seeds_for_target": self.need if self.p < 0.8 else n_seeds}

    def pw(self, n_seeds, alpha):
        """What power_5a returns around the stub: the report with the law's L0, c and α."""
        return {**self.stub(n_seeds), "L0": self.law[0], "c": self.law[1], "alpha": alpha}


def ok_item5a(k, a, b, pw=POWER_90):
    """A passing item of use_fits' default fit with the power text `pw`."""
    if k == 2:
        return f"{lab5a(k, a, b)} α=1±0.0625, R²=0.995: α in [0.8, 1.2] ok, R² >= 0.99 ok; {CERTIFIED}{pw} → ok"
    pa = claims.num(PAPER16[(a, b)])
    return (f"{lab5a(k, a, b)} α={pa}±0.0625, R²=0.995: |α - α_paper {pa}| = 0 <= 0.2 ok, R² >= 0.99 ok; "
            f"{CERTIFIED}{pw} → ok")


def detail5a(items=None, extra="", order=ITEMS, pw=POWER_90):
    """Claim 5a's detail: items[(k, a, b)] where given, else a passing item with the power text `pw`."""
    items = items or {}
    return f"{CRIT5A}{extra} | " + "; ".join(items.get(i, ok_item5a(*i, pw)) for i in order)


def meas5a(res, item, alpha, verdict, pw, se=0.0625, r2=0.995, status="ok"):
    """5a's measured dict of one item (a fit's numbers; all None without a fit)."""
    status = None if alpha is None else status
    k, a, b = item
    return {"alpha": alpha, "alpha_se": se, "r2": r2, "paper_alpha": PAPER16[(a, b)] if k == 16 else None,
            "fit_status": status, "verdict": verdict, "power": pw,
            "certificates": claims.certified(res, "nonlinear", "difficult", k, a, b)[0]}


def item2(shown, a_ok="ok", r2_ok="ok", cert=CERTIFIED, pw=POWER_90, end="ok"):
    """Claim 5a's detail part of J2."""
    return f"(0,0) {shown}: α in [0.8, 1.2] {a_ok}, R² >= 0.99 {r2_ok}; {cert}{pw} → {end}"


# ---------------------------------------------------------------- claim 5a


def test_c5a_reads_k2_top2_then_k16_table4_series_with_their_real_fits(monkeypatch):
    res, cb = world5a(monkeypatch)
    calls = use_fits(monkeypatch, real=True)
    spy = PowerSpy(monkeypatch)
    meas, v, detail = inv.c5a(res, None)
    assert v == PASS
    assert calls == [("nonlinear", "difficult", k, a, b) for k, a, b in ITEMS]
    assert list(meas) == [lab5a(*i) for i in ITEMS]
    assert sorted(set(c[:5] for c in cb.calls)) == sorted(("nonlinear", "difficult", *i) for i in ITEMS)
    for i in ITEMS:
        s, f = curves.loss_fit(res, "nonlinear", "difficult", *i)
        alpha = 1.0 if i[0] == 2 else PAPER16[i[1:]]
        assert f.ok and f.r2 >= 0.99 and abs(f.alpha - alpha) < 0.05, (i, f)
        assert len(s.depths) == 7 and s.n.tolist() == [3] * 7
        assert meas[lab5a(*i)] == meas5a(res, i, f.alpha, PASS, spy.pw(3, alpha), f.alpha_se, f.r2)
    assert len(spy.reports) == len(ITEMS) and detail.startswith(CRIT5A + " | (0,0) α=")


def test_c5a_detail_measured_dict_and_power_inputs_of_passing_chosen_fits(monkeypatch):
    """Each item hands the power its own law (α 1, top-16: α_paper) fitted to its seed means, the
    window (top-16: α_paper ± 0.2), every depth's SE over seeds and the fewest seeds of a depth."""
    res, _ = world5a(monkeypatch, item=J16, drop=[(4, 1)])  # J16 at L = 4: seeds 0, 2 (SE E)
    use_fits(monkeypatch)
    spy = PowerSpy(monkeypatch)
    meas, v, detail = inv.c5a(res, None)
    assert v == INCONCLUSIVE and [meas[lab5a(*i)]["verdict"] for i in ITEMS].count(PASS) == 13
    seeds = f"{POWER_90} → INCONCLUSIVE (seeds: 2 < 3 on the envelope at L=4)"
    assert detail == detail5a({J16: ok_item5a(*J16, pw="").replace(f"{CERTIFIED} → ok", seeds)})
    assert len(spy.laws) == len(spy.crit) == len(spy.reports) == 14
    for j, i in enumerate(ITEMS):
        s, alpha = res.series("nonlinear", "difficult", *i), 1.0 if i[0] == 2 else PAPER16[i[1:]]
        n = 2 if i == J16 else 3
        got = meas[lab5a(*i)]
        assert got == meas5a(res, i, alpha, INCONCLUSIVE if i == J16 else PASS, spy.pw(n, alpha))
        assert list(got) == ["alpha", "alpha_se", "r2", "paper_alpha", "fit_status", "verdict", "power", "certificates"]
        assert spy.laws[j] == (DL.tolist(), s.get("R").tolist(), alpha)
        lo, hi = (0.8, 1.2) if i[0] == 2 else (alpha - 0.2, alpha + 0.2)
        assert spy.crit[j] == {"L": DL.tolist(), "dtype": np.float64, "L0": 0.5, "c": 2.0, "lo": lo, "hi": hi,
                               "r2_min": 0.99, "alpha": alpha}
        assert spy.reports[j] == {"crit": ("criterion", j), "mean": (0.5 + 2.0 * DL ** -alpha).tolist(),
                                  "se": claims.series_se(s).tolist(), "n_seeds": n, "more": ((), {})}
    assert spy.reports[10]["se"][2] == pytest.approx(E) and spy.reports[0]["se"][2] == pytest.approx(E / math.sqrt(3))


@pytest.mark.parametrize("alpha, r2, a_ok, r2_ok, v", [
    (0.8, 0.99, "ok", "ok", PASS), (1.2, 0.99, "ok", "ok", PASS),  # both ends and R² 0.99 inclusive
    (math.nextafter(0.8, 0.0), 0.99, "NO", "ok", FAIL), (math.nextafter(1.2, 2.0), 0.99, "NO", "ok", FAIL),
    (1.0, math.nextafter(0.99, 0.0), "ok", "NO", FAIL)])
def test_item_5a_top2_window_and_r2_are_inclusive_and_one_float_beyond_fails(monkeypatch, alpha, r2, a_ok, r2_ok, v):
    res, _ = world5a(monkeypatch)
    use_fits(monkeypatch, {J2: fit(alpha, r2=r2)})
    spy = PowerSpy(monkeypatch)
    got, meas, part = inv._item_5a(res, *J2, None)
    assert got == v and meas == meas5a(res, J2, alpha, v, spy.pw(3, 1.0), r2=r2)
    shown = f"α={claims.num(alpha)}±0.0625, R²={claims.num(r2)}"
    assert part == item2(shown, a_ok, r2_ok, end="ok" if v == PASS else "NO")
    assert [(c["lo"], c["hi"], c["alpha"]) for c in spy.crit] == [(0.8, 1.2, 1.0)]


@pytest.mark.parametrize("pa, alpha, ok, v", [
    (0.25, 0.25 + 0.2, "ok", PASS), (0.5, 0.5 - 0.2, "ok", PASS),  # |α - α_paper| == 0.2 exactly
    (0.25, math.nextafter(0.25 + 0.2, 1.0), "NO", FAIL), (0.5, math.nextafter(0.5 - 0.2, 0.0), "NO", FAIL)])
def test_item_5a_top16_distance_exactly_02_passes_and_one_float_beyond_fails(monkeypatch, pa, alpha, ok, v):
    res, _ = world5a(monkeypatch)
    use_fits(monkeypatch, {J16: fit(alpha)})
    spy = PowerSpy(monkeypatch)
    got, meas, part = inv._item_5a(res, *J16, pa)
    assert got == v and meas == meas5a(res, J16, alpha, v, spy.pw(3, pa)) | {"paper_alpha": pa}
    assert part == (f"k=16 (0,0.25) α={claims.num(alpha)}±0.0625, R²=0.995: |α - α_paper {claims.num(pa)}| = 0.2 "
                    f"<= 0.2 {ok}, R² >= 0.99 ok; {CERTIFIED}{POWER_90} → {'ok' if v == PASS else 'NO'}")
    assert [(c["lo"], c["hi"], c["alpha"]) for c in spy.crit] == [(pa - 0.2, pa + 0.2, pa)]


def test_c5a_top16_items_are_judged_against_their_own_paper_alpha(monkeypatch):
    """α = 1 is 0.21 from (0,0.25)'s 0.79 (a FAIL) and 0.12 from (0,0.5)'s 0.88 (ok)."""
    res, _ = world5a(monkeypatch)
    use_fits(monkeypatch, {J16: fit(1.0), (16, 0.0, 0.5): fit(1.0)})
    PowerSpy(monkeypatch)
    meas, v, detail = inv.c5a(res, None)
    assert v == FAIL
    assert [meas[lab5a(*i)]["paper_alpha"] for i in ITEMS[10:]] == [0.79, 0.88, 0.81, 0.81]
    assert meas["k=16 (0,0.25)"]["verdict"] == FAIL and meas["k=16 (0,0.5)"]["verdict"] == PASS
    assert detail == detail5a({
        J16: f"k=16 (0,0.25) α=1±0.0625, R²=0.995: |α - α_paper 0.79| = 0.21 <= 0.2 NO, R² >= 0.99 ok; "
             f"{CERTIFIED}{POWER_90} → NO",
        (16, 0.0, 0.5): f"k=16 (0,0.5) α=1±0.0625, R²=0.995: |α - α_paper 0.88| = 0.12 <= 0.2 ok, R² >= 0.99 ok; "
                        f"{CERTIFIED}{POWER_90} → ok"})


def test_item_5a_top16_without_a_fit_is_inconclusive_with_none_in_measured(monkeypatch):
    res, _ = world5a(monkeypatch, item=J16, R=1.0 + DL ** -1.0)  # R_1 - R_64 = 0.984375
    use_fits(monkeypatch, {J16: None})
    spy = PowerSpy(monkeypatch)
    v, meas, part = inv._item_5a(res, *J16, 0.79)
    assert v == INCONCLUSIVE and meas["fit_status"] is None
    assert meas == meas5a(res, J16, None, INCONCLUSIVE, spy.pw(3, 0.79), None, None, None)
    assert part == (f"k=16 (0,0.25) α=—±—, R²=—: |α - α_paper 0.79| = — <= 0.2 NO, R² >= 0.99 NO; {CERTIFIED}"
                    f"{POWER_90} → INCONCLUSIVE (no fit; R_1 - R_64 = 0.9844±{SE_ENDS}: {BEYOND})")


def test_item_5a_degenerate_fit_is_inconclusive_while_depth_helps(monkeypatch):
    res, _ = world5a(monkeypatch, R=1.0 + DL ** -1.0)
    use_fits(monkeypatch, {J2: fit(1.0, reason="alpha on its bound")})
    spy = PowerSpy(monkeypatch)
    v, meas, part = inv._item_5a(res, *J2, None)
    assert v == INCONCLUSIVE and meas == meas5a(res, J2, 1.0, INCONCLUSIVE, spy.pw(3, 1.0), status="degenerate")
    assert part == item2("α=1±0.0625, R²=0.995", end=f"INCONCLUSIVE (degenerate fit: alpha on its bound; "
                                                      f"R_1 - R_64 = 0.9844±{SE_ENDS}: {BEYOND})")


def test_item_5a_degenerate_fit_without_a_depth_effect_fails_whatever_the_power(monkeypatch):
    R = np.full(7, 1.0)
    R[-1] = 1.0 - 2.0 ** -9  # R_1 - R_64 = 0.001953, within 2 SE = 0.006379
    res, _ = world5a(monkeypatch, R=R)
    use_fits(monkeypatch, {J2: fit(0.0, math.nan, 0.5, "alpha on its bound")})
    PowerSpy(monkeypatch, p=0.5, need=9)
    v, meas, part = inv._item_5a(res, *J2, None)
    assert v == FAIL and meas["verdict"] == FAIL and meas["fit_status"] == "degenerate"
    low = "power 0.50 (400 simulations of the paper's law with these SEs; 9 seeds would reach 0.8)"
    assert part == item2("α=0±nan, R²=0.5", "NO", "NO", pw=low, end=(
        f"NO (degenerate fit: alpha on its bound; the depth effect is absent: R_1 - R_64 = 0.001953±{SE_ENDS} "
        "within 2 SE)"))


@pytest.mark.parametrize("p, v, shown, end", [
    (0.8, FAIL, "power 0.80 (400 simulations of the paper's law with these SEs)", "NO"),
    (math.nextafter(0.8, 0.0), INCONCLUSIVE,
     "power 0.80 (400 simulations of the paper's law with these SEs; 5 seeds would reach 0.8)",
     "INCONCLUSIVE (underpowered: power 0.80 < 0.8)")])
def test_item_5a_a_fail_with_power_below_08_is_underpowered_and_at_08_stays_fail(monkeypatch, p, v, shown, end):
    res, _ = world5a(monkeypatch)
    use_fits(monkeypatch, {J2: fit(0.75)})
    spy = PowerSpy(monkeypatch, p=p)
    got, meas, part = inv._item_5a(res, *J2, None)
    assert got == v and meas == meas5a(res, J2, 0.75, v, spy.pw(3, 1.0)) and meas["power"]["power"] == p
    assert part == item2("α=0.75±0.0625, R²=0.995", "NO", pw=shown, end=end)


def test_item_5a_failing_certificate_and_too_few_seeds_are_named_with_the_degenerate_fit(monkeypatch):
    res, _ = world5a(monkeypatch, drop=[(64, 1)], fail={("nonlinear", *J2): {"doubling": [64]}})
    use_fits(monkeypatch, {J2: fit(1.0, reason="alpha on its bound")})
    spy = PowerSpy(monkeypatch)
    v, meas, part = inv._item_5a(res, *J2, None)
    assert v == INCONCLUSIVE and meas["certificates"]["failing"]["doubling"] == [64]
    assert meas == meas5a(res, J2, 1.0, INCONCLUSIVE, spy.pw(2, 1.0), status="degenerate")
    problem = f"{DOUBLING_64}; seeds: 2 < 3 on the envelope at L=64"
    assert part == item2("α=1±0.0625, R²=0.995", cert="",
                         end=f"INCONCLUSIVE ({problem}; degenerate fit: alpha on its bound)")


def test_item_5a_failing_certificate_makes_a_passing_top16_item_inconclusive(monkeypatch):
    res, _ = world5a(monkeypatch, fail={("nonlinear", *J16): {"doubling": [64]}})
    use_fits(monkeypatch)
    PowerSpy(monkeypatch)
    v, meas, part = inv._item_5a(res, *J16, 0.79)
    assert v == INCONCLUSIVE and meas["certificates"]["failing"]["doubling"] == [64]
    assert part == (f"k=16 (0,0.25) α=0.79±0.0625, R²=0.995: |α - α_paper 0.79| = 0 <= 0.2 ok, R² >= 0.99 ok; "
                    f"{POWER_90} → INCONCLUSIVE ({DOUBLING_64})")


def hand_series(R, n=3, se=0.01):
    depths = np.array([1, 2, 4, 8, 16, 32, 64][:len(R)])
    return Series(depths, {"R": np.asarray(R, float)}, {"R": np.full(len(R), se)}, np.full(len(R), n), [])


def test_power_5a_defaults_to_alpha_1_and_returns_the_report_with_the_law(monkeypatch):
    spy = PowerSpy(monkeypatch, law=None)  # the real law_fit
    s = hand_series(0.5 + 1.0 / DL[:5], n=4)
    L0, c = power.law_fit(DL[:5], s.get("R"), 1.0)
    assert L0 == pytest.approx(0.5) and c == pytest.approx(1.0)
    assert inv.power_5a(s, 0.8, 1.2) == {**spy.stub(4), "L0": L0, "c": c, "alpha": 1.0}
    assert spy.crit == [{"L": DL[:5].tolist(), "dtype": np.float64, "L0": L0, "c": c, "lo": 0.8, "hi": 1.2,
                         "r2_min": 0.99, "alpha": 1.0}]
    L0, c = power.law_fit(DL[:5], s.get("R"), 0.75)
    assert inv.power_5a(s, 0.5, 1.0, 0.75) == {**spy.stub(4), "L0": L0, "c": c, "alpha": 0.75}
    assert spy.crit[1] == {"L": DL[:5].tolist(), "dtype": np.float64, "L0": L0, "c": c, "lo": 0.5, "hi": 1.0,
                           "r2_min": 0.99, "alpha": 0.75}
    assert spy.reports[1]["mean"] == (L0 + c * DL[:5] ** -0.75).tolist() and spy.reports[1]["se"] == [0.01] * 5


def test_power_5a_without_a_positive_loss_is_unknown_and_says_why(monkeypatch):
    spy = PowerSpy(monkeypatch, law=None)  # the real law_fit
    got = inv.power_5a(hand_series([1.0, 0.5, 0.0]), 0.8, 1.2)
    assert list(got) == ["power", "why"] and math.isnan(got["power"])
    assert got["why"] == "need at least 2 positive losses to fit the law, got [1.0, 0.5, 0.0]"
    assert spy.reports == [] and claims.power_text(got) == f"power unknown ({got['why']})"


def test_c5a_at_smoke_judges_k2_only_and_says_k16_is_left_out(monkeypatch):
    w = World("smoke")
    for a, b in TOP2_SPECTRA:
        for sd in (0, 1, 2):
            w.series("nonlinear", "difficult", 2, a, b, [2.0 + E * (sd - 1), 1.5, 1.25], depths=(1, 2, 4), seed=sd)
    backend(monkeypatch, w)
    use_fits(monkeypatch)
    PowerSpy(monkeypatch)
    meas, v, detail = inv.c5a(w.results(), None)
    assert v == PASS and list(meas) == [lab5a(*i) for i in ITEMS[:10]]
    assert detail == detail5a(extra="; k=16 is not part of the smoke preset: its items are left out", order=ITEMS[:10])


@pytest.mark.parametrize("item, L, cell", [(J2, 64, "k=2 (0,0) L=64"), ((16, 0.25, 0.5), 1, "k=16 (0.25,0.5) L=1")])
def test_c5a_missing_runs_name_the_cell(monkeypatch, item, L, cell):
    res, _ = world5a(monkeypatch, item=item, drop=[(L, sd) for sd in (0, 1, 2)])
    with pytest.raises(MissingRuns) as e:
        inv.c5a(res, None)
    assert str(e.value) == f"missing runs: 1 cell(s): nonlinear/difficult {cell}"


# ---------------------------------------------------------------- claim 6

B0 = [s for s in FIG56_SPECTRA if s[1] == 0]  # (0,0), (0.25,0), (0.5,0), (1,0)
J6 = (0.25, 0.0)  # the spectrum the tests move
D = 2.0 ** -10  # seed offsets: C + D o, gap - 2 D o with o = -1, 0, 1 (seeds 0, 1, 2; 0 for a seed 3)
OFF = (-1, 0, 1, 0)
C6 = [0.5, 0.75, 0.875, 1.0, 1.125, 1.25, 1.265625]  # C_64 / C_32 - 1 = 0.0125
G6 = [4.0, 3.5, 3.0, 2.75, 2.625, 2.5, 2.5625]  # A - C: 0.025 over the last two depths
R6 = [2.0 + 1.0 / L for L in DEPTHS]  # the same in every seed: its SE over seeds is 0
CRIT6 = ("criterion: relative change of C_L and of A_L - C_L over the last two depths < 10%, fig6's b = 0 "
         "spectra; an item whose last two depths fail a certificate (SPEC §4) INCONCLUSIVE, a FAIL with power "
         "< 0.8 INCONCLUSIVE (underpowered) | ")
POWER_1 = "power 1.00 (400 simulations of the paper's law with these SEs)"


def runs6(w, model, k, a, b, C, G, seeds=(0, 1, 2), depths=DEPTHS):
    for sd in seeds:
        c = [x + D * OFF[sd] for x in C]
        w.series(model, "difficult", k, a, b, R6[-len(depths):], depths=depths, seed=sd, C=c,
                 A=[x + g - 2 * D * OFF[sd] for x, g in zip(c, G)])


@functools.lru_cache(maxsize=None)
def base6() -> World:
    """fig6's b = 0 spectra at k = 2 (C6, G6), seeds 0, 1, 2. Decoys with C_64 = 2 C_32 (a FAIL if read):
    the b > 0 spectra of fig6, k = 16 at J6, the linear model at J6."""
    w = World()
    for a, b in B0:
        runs6(w, "nonlinear", 2, a, b, C6, G6)
    jump = C6[:-1] + [2.5]
    for a, b in (s for s in FIG56_SPECTRA if s[1] != 0):
        runs6(w, "nonlinear", 2, a, b, jump, G6)
    runs6(w, "nonlinear", 16, *J6, jump, G6)
    runs6(w, "linear", 2, *J6, jump, G6, seeds=(0,))
    return w


@functools.lru_cache(maxsize=None)
def extra_seed6() -> World:
    """A seed 3 of J6 at L = 32 and 64 (offset 0: the seed means unchanged)."""
    w = World()
    w.store = base6().store
    runs6(w, "nonlinear", 2, *J6, C6[-2:], G6[-2:], seeds=(3,), depths=(32, 64))
    return w


def world6(monkeypatch, C=None, G=None, drop=(), seed3=False, fail=None):
    """base6's results with J6's C[L] and gap G[L] where given (every seed, with its offset), its runs
    (L, seed) in `drop` removed and (seed3) seed 3 at L = 32, 64; certificates failing where `fail` says."""
    C, G = C or {}, G or {}

    def mine(r):
        return (r["model"], r["task"], r["k"], r["a"], r["b"]) == ("nonlinear", "difficult", 2, *J6)

    def change(r):
        if mine(r):
            c = C.get(r["L"], r["C"] - D * OFF[r["seed"]]) + D * OFF[r["seed"]]
            r.update(C=c, A=c + G.get(r["L"], r["A"] - r["C"] + 2 * D * OFF[r["seed"]]) - 2 * D * OFF[r["seed"]])
        return r
    w = copy_world(base6(), lambda r: not (mine(r) and (r["L"], r["seed"]) in drop), change)
    if seed3:
        w.rows += extra_seed6().rows
        w.R.update(extra_seed6().R)
    return w.results(), backend(monkeypatch, w, {("nonlinear", 2, *J6): fail} if fail else None)


def item6(a, b, dC="0.0125", C_ok="ok", dG="0.025", G_ok="ok", cert=CERTIFIED, pw=POWER_1, end="ok", Ls="32→64"):
    return f"({a:g},{b:g}) L={Ls}: ΔC/C={dC} ({C_ok}), Δ(A-C)/(A-C)={dG} ({G_ok}); {cert}{pw} → {end}"


def detail6(item=None):
    return CRIT6 + "; ".join(item if (a, b) == J6 and item else item6(a, b) for a, b in B0)


def test_c6_reads_the_last_two_depths_of_fig6_b0_spectra_with_the_measured_dict(monkeypatch):
    res, cb = world6(monkeypatch)
    meas, v, detail = inv.c6(res, None)
    assert v == PASS
    assert detail == detail6()
    assert list(meas) == ["(0,0)", "(0.25,0)", "(0.5,0)", "(1,0)"]
    assert sorted(set(c[:5] for c in cb.calls)) == sorted(("nonlinear", "difficult", 2, a, b) for a, b in B0)
    pw = {"power": 1.0, "sims": 400, "seed": power.SEED, "n_seeds": 3, "target": 0.8, "seeds_for_target": 3,
          "C": 1.2578125, "A_minus_C": 2.53125}
    for a, b in B0:
        cert = claims.certified(res, "nonlinear", "difficult", 2, a, b, read=[32, 64])[0]
        assert meas[f"({a:g},{b:g})"] == {"C": 0.0125, "A_minus_C": 0.025, "verdict": PASS, "power": pw,
                                          "certificates": cert}
        assert list(meas[f"({a:g},{b:g})"]) == ["C", "A_minus_C", "verdict", "power", "certificates"]


@pytest.mark.parametrize("C, G, dC, C_ok, dG, G_ok, v", [
    ({64: 1.125}, {}, "0.1", "NO", "0.025", "ok", FAIL),  # 0.125 / 1.25 == 0.1
    ({}, {64: 2.25}, "0.0125", "ok", "0.1", "NO", FAIL),  # 0.25 / 2.5 == 0.1
    ({64: 1.125 + 2.0 ** -20}, {64: 2.25 + 2.0 ** -20}, "0.1", "ok", "0.1", "ok", PASS),  # just below 0.1
    ({64: 1.875}, {64: 3.75}, "0.5", "NO", "0.5", "NO", FAIL)])
def test_c6_relative_change_of_c_and_of_the_gap_must_be_strictly_below_10_percent(monkeypatch, C, G, dC, C_ok, dG,
                                                                                    G_ok, v):
    res, _ = world6(monkeypatch, C, G)
    meas, got, detail = inv.c6(res, None)
    assert got == v and meas["(0.25,0)"]["verdict"] == v
    assert meas["(0.25,0)"]["C"] == abs(C.get(64, 1.265625) - 1.25) / 1.25
    assert meas["(0.25,0)"]["A_minus_C"] == abs(G.get(64, 2.5625) - 2.5) / 2.5
    assert detail == detail6(item6(*J6, dC, C_ok, dG, G_ok, end="ok" if v == PASS else "NO"))


@pytest.mark.parametrize("p, v, shown, end", [
    (0.8, FAIL, "power 0.80 (400 simulations of the paper's law with these SEs)", "NO"),
    (math.nextafter(0.8, 0.0), INCONCLUSIVE,
     "power 0.80 (400 simulations of the paper's law with these SEs; 5 seeds would reach 0.8)",
     "INCONCLUSIVE (underpowered: power 0.80 < 0.8)")])
def test_c6_a_fail_with_power_below_08_is_underpowered_and_at_08_stays_fail(monkeypatch, p, v, shown, end):
    res, _ = world6(monkeypatch, G={64: 2.25})
    spy = PowerSpy(monkeypatch, p=p)
    meas, got, detail = inv.c6(res, None)
    assert got == v and meas["(0.25,0)"]["verdict"] == v
    assert meas["(0.25,0)"]["power"] == {**spy.stub(3), "C": 1.2578125, "A_minus_C": 2.375}
    assert detail == CRIT6 + "; ".join(item6(a, b, pw=shown) if (a, b) != J6 else
                                       item6(a, b, dG="0.1", G_ok="NO", pw=shown, end=end) for a, b in B0)


def test_c6_hands_its_own_hypothesis_to_the_power_the_last_two_depths_means_ses_and_seeds(monkeypatch):
    res, _ = world6(monkeypatch, seed3=True)  # 4 seeds at L = 32, 64 (3 at L = 16)
    spy = PowerSpy(monkeypatch)
    meas, v, _ = inv.c6(res, None)
    assert spy.crit == [{"args": (), "kwargs": {}}] * 4
    s = res.series("nonlinear", "difficult", 2, *J6)
    assert s.n.tolist() == [3, 3, 3, 3, 3, 4, 4]
    se = claims.series_se(s, "C")[-2:].tolist() + claims.series_se(s, "gap")[-2:].tolist()
    assert se == pytest.approx([D * math.sqrt(2 / 3) / 2] * 2 + [D * math.sqrt(2 / 3)] * 2)  # 4 seeds, gap offsets 2 D
    assert spy.reports[1] == {"crit": ("criterion", 1), "mean": [1.2578125, 1.2578125, 2.53125, 2.53125],
                              "se": se, "n_seeds": 4, "more": ((), {})}
    assert [r["n_seeds"] for r in spy.reports] == [3, 4, 3, 3]
    assert meas["(0.25,0)"]["power"] == {**spy.stub(4), "C": 1.2578125, "A_minus_C": 2.53125}


def test_c6_failing_certificate_or_too_few_seeds_at_the_last_two_depths_is_inconclusive(monkeypatch):
    res, _ = world6(monkeypatch, drop=[(64, 1)], fail={"doubling": [64]})  # seed 1: offset 0, the means kept
    meas, v, detail = inv.c6(res, None)
    assert v == INCONCLUSIVE and meas["(0.25,0)"]["verdict"] == INCONCLUSIVE
    assert meas["(0.25,0)"]["certificates"]["failing"]["doubling"] == [64]
    problem = f"{DOUBLING_64}; seeds: 2 < 3 on the envelope at L=64"
    pw = "power 1.00 (400 simulations of the paper's law with these SEs)"
    assert detail == detail6(item6(*J6, cert="", pw=pw, end=f"INCONCLUSIVE ({problem})"))


def test_c6_is_not_gated_by_depths_it_does_not_read(monkeypatch):
    res, _ = world6(monkeypatch, drop=[(1, 2), (16, 2)], fail={"construction": [2], "doubling": [16]})
    meas, v, detail = inv.c6(res, None)
    assert v == PASS and detail == detail6()
    cert = meas["(0.25,0)"]["certificates"]
    assert cert == claims.certified(res, "nonlinear", "difficult", 2, *J6, read=[32, 64])[0]
    assert cert["failing"] == {"doubling": [], "construction": [], "budget": []}
    assert claims.certified(res, "nonlinear", "difficult", 2, *J6)[1] == (
        "uncertified: doubling fails at L=16; construction fails at L=2")


def test_c6_on_a_two_depth_set_reads_both_and_gates_them(monkeypatch):
    real = results_mod.model_depths
    monkeypatch.setattr(results_mod, "model_depths", lambda m: (32, 64) if m == "nonlinear" else real(m))
    res, _ = world6(monkeypatch, fail={"doubling": [64]})
    meas, v, detail = inv.c6(res, None)
    assert v == INCONCLUSIVE
    assert meas["(0,0)"]["power"] == {"power": 1.0, "sims": 400, "seed": power.SEED, "n_seeds": 3, "target": 0.8,
                                      "seeds_for_target": 3, "C": 1.2578125, "A_minus_C": 2.53125}
    assert detail == detail6(item6(*J6, cert="", end=f"INCONCLUSIVE ({DOUBLING_64})"))


def test_c6_on_a_one_depth_set_has_no_last_two_depths_to_judge(monkeypatch):
    real = results_mod.model_depths
    monkeypatch.setattr(results_mod, "model_depths", lambda m: (64,) if m == "nonlinear" else real(m))
    res, _ = world6(monkeypatch)
    with pytest.raises(MissingRuns, match=re.escape("(0,0): C_L and A_L - C_L not measured at both of L=64")):
        inv.c6(res, None)
    assert inv.power_6(res.series("nonlinear", "difficult", 2, 0.0, 0.0)) == {"power": math.nan,
                                                                            "why": "fewer than 2 depths"}


def test_c6_with_c_unmeasured_at_the_deepest_depth_is_missing_runs_not_a_change_read_one_depth_back(monkeypatch):
    """C_L and A_L NaN at L = 64 only: rel_change_last_two stepped back to L = 16 -> 32 while the text, the
    certificates (L = 32, 64) and the power read L = 32 -> 64, so a change over a depth failing its doubling
    certificate (L = 16) was judged FAIL. Now the item is not judged: missing runs, INCONCLUSIVE."""
    nan = {64: math.nan}
    res, _ = world6(monkeypatch, C=nan, G=nan, fail={"doubling": [16]})
    with pytest.raises(MissingRuns) as e:
        inv.c6(res, None)
    assert str(e.value) == ("missing runs: nonlinear/difficult k=2 (0.25,0): C_L and A_L - C_L not measured at both "
                            "of L=32, 64")
    assert claims.check(inv.CLAIMS[1], res, None)["verdict"] == INCONCLUSIVE


def test_c6_missing_runs_name_the_cell(monkeypatch):
    res, _ = world6(monkeypatch, drop=[(32, sd) for sd in (0, 1, 2)])
    with pytest.raises(MissingRuns) as e:
        inv.c6(res, None)
    assert str(e.value) == "missing runs: 1 cell(s): nonlinear/difficult k=2 (0.25,0) L=32"


def test_c6_judges_its_two_deepest_depths_whatever_is_unmeasured_before_them(monkeypatch):
    """Only L = 32 and 64 must have C_L and A_L: C unmeasured at L = 4 or 16 leaves claim 6 as it was."""
    for L in (4, 16):
        res, _ = world6(monkeypatch, C={L: math.nan}, G={L: math.nan})
        meas, v, detail = inv.c6(res, None)
        assert detail == detail6() and meas[f"({J6[0]:g},{J6[1]:g})"]["verdict"] == PASS, L
