"""Convergence certificates (SPEC §4, depthscale.analysis.certificates): the pure functions against direct
computations on made-up per-context losses, the best stack's per-context errors against its mean
and the best single head, and the store reader against paired.paired_difference and
paired.floor_on_eval on smoke runs (d = 8, P = 16, 512 evaluation contexts) trained once."""

from __future__ import annotations

import math
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from depthscale.analysis import certificates as cm
from depthscale.analysis import paired
from depthscale.analysis.results import Results
from depthscale.base.errors import InputError
from depthscale.config.run import make_config
from depthscale.store.store import Store
from depthscale.theory import softmax_floor as sf
from depthscale.train.training import run_pack
from depthscale.runs import per_context as per_context_cache
from depthscale.runs.per_context import StoredRuns


def test_paired_gap_is_the_mean_and_se_of_the_difference():
    rng = np.random.default_rng(0)
    a, b = rng.exponential(2.0, 1000), rng.exponential(2.0, 1000)
    g = cm.paired_gap(a, b)
    d = a - b
    assert g["diff"] == pytest.approx(d.mean(), rel=1e-12)
    assert g["se"] == pytest.approx(math.sqrt(np.sum((d - d.mean()) ** 2) / (d.size - 1) / d.size), rel=1e-12)
    assert g["ok"] == (d.mean() <= 2 * g["se"])
    # at the boundary: a above b by exactly 2 SE passes, by a little more fails
    base = rng.standard_normal(400)
    z = base - base.mean()
    se = z.std(ddof=1) / math.sqrt(z.size)
    assert cm.paired_gap(5.0 + z + 2 * se * (1 - 1e-9), np.full(400, 5.0))["ok"]
    assert not cm.paired_gap(5.0 + z + 2 * se * (1 + 1e-6), np.full(400, 5.0))["ok"]
    with pytest.raises(InputError, match="one length"):
        cm.paired_gap(a, b[:10])


def test_the_se_combines_the_seeds_spread_with_the_contexts():
    """SPEC §4 (2026-12-06): SE² = s²(per-seed differences)/n + SE²(context-paired difference of the
    seed means); a reference without seeds is a constant; one seed: the contexts' SE alone."""
    rng = np.random.default_rng(3)
    a, b = rng.exponential(2.0, 500), rng.exponential(2.0, 500)
    ctx = cm.paired_gap(a, b)["se"]
    sa, sb = {0: 2.01, 1: 2.03, 2: 1.98}, {0: 2.00, 1: 2.00, 2: 2.01}
    d = np.array([0.01, 0.03, -0.03])
    g = cm.paired_gap(a, b, sa, sb)
    assert g["se"] == pytest.approx(math.sqrt(ctx ** 2 + d.var(ddof=1) / 3), rel=1e-12)
    assert g["se_contexts"] == pytest.approx(ctx) and g["seeds"] == 3
    # against a reference without seeds (B_L): the set's own spread
    g = cm.paired_gap(a, b, sa, None)
    assert g["se"] == pytest.approx(math.sqrt(ctx ** 2 + np.var(list(sa.values()), ddof=1) / 3), rel=1e-12)
    # no seed in common: both sets' variances of the mean
    g = cm.paired_gap(a, b, sa, {5: 2.0, 6: 2.1})
    want = np.var(list(sa.values()), ddof=1) / 3 + np.var([2.0, 2.1], ddof=1) / 2
    assert g["se"] == pytest.approx(math.sqrt(ctx ** 2 + want), rel=1e-12)
    assert cm.paired_gap(a, b, {0: 2.0}, {0: 2.1})["se"] == pytest.approx(ctx)  # one seed
    # the measured case that decided it: a budget difference within 2 SE of the seeds' spread
    half = a - 0.0026
    base = cm.paired_gap(a, half)
    assert not base["ok"] or base["se"] * 2 >= 0.0026
    spread = cm.paired_gap(a, half, {s: 2.0 + e for s, e in enumerate([0.001, -0.002, 0.002, -0.001, 0.0])},
                           {s: 2.0 for s in range(5)})
    assert spread["se"] > base["se"]
    # certify hands the seeds to every certificate
    sq = {1: a, 2: b}
    cert = cm.certify(sq, {1: b, 2: b}, {1: b, 2: a}, seeds={1: sa, 2: sb}, half_seeds={1: sb, 2: sa})
    p = cert["per_depth"]
    assert p[2]["doubling"]["se"] == pytest.approx(cm.paired_gap(b, a, sb, sa)["se"])
    assert p[1]["construction"]["se"] == pytest.approx(cm.paired_gap(a, b, sa, None)["se"])
    assert p[1]["budget"]["se"] == pytest.approx(cm.paired_gap(a, b, sa, sb)["se"])


def _made_up():
    rng = np.random.default_rng(1)
    noise = rng.standard_normal((4, 2000)) * 0.05
    sq = {1: 2.20 + noise[0], 2: 2.10 + noise[1], 4: 2.15 + noise[2], 8: 2.05 + noise[3]}  # 4 above 2
    stack = {1: 2.20 + noise[0] + 0.001, 2: 2.05 + noise[1], 4: 2.09 + noise[2], 8: 2.09 + noise[3]}  # 2, 4 above B
    return sq, stack


def test_certify_marks_each_failing_depth():
    sq, stack = _made_up()
    cert = cm.certify(sq, stack)
    assert cert["failing"] == {"doubling": [4], "construction": [2, 4], "budget": []}
    assert cert["computed"] == ["doubling", "construction"]
    p = cert["per_depth"]
    assert p[1]["doubling"] is None and p[1]["budget"] is None and p[1]["ok"]  # nothing below L = 1
    assert p[4]["doubling"]["vs"] == 2 and p[4]["doubling"]["diff"] == pytest.approx(0.05, abs=0.01)
    assert p[8]["ok"] and p[8]["B"] == pytest.approx(np.mean(stack[8]))
    assert cm.failing_text(cert) == "doubling fails at L=4; construction fails at L=2, 4"
    text = cm.summary_text(cert)
    d2, s2 = cert["per_depth"][2]["construction"]["diff"], cert["per_depth"][2]["construction"]["se"]
    assert text.startswith(f"certificates (doubling, construction): L=2 construction {d2:+.4g}±{s2:.2g}, L=4 doubling +")
    assert text.endswith(" > 2 SE") and ", L=4 construction +" in text and text.count("L=") == 3, text
    assert cm.summary_text(cm.certify({1: sq[1], 2: sq[2]})) == "certificates (doubling): all pass"
    assert cm.summary_text({"per_depth": {}, "computed": []}) == "certificates (none computed): all pass"
    rows = cm.curve(cert)
    assert [r["L"] for r in rows] == [1, 2, 4, 8] and [r["ok"] for r in rows] == [True, False, False, True]
    assert rows[3]["construction"] is True and rows[0]["doubling"] is None
    # budget: the largest budget against half of it
    half = {L: v - 0.03 for L, v in sq.items()}
    assert cm.certify(sq, None, half)["failing"]["budget"] == [1, 2, 4, 8]
    assert cm.certify(sq, None, {L: v + 0.03 for L, v in sq.items()})["failing"]["budget"] == []
    assert cm.failing_text(cm.certify({1: sq[1], 2: sq[2]})) == ""


def test_best_stack_errors_per_context():
    args = dict(a=0.0, b=0.0, k=2, d=4, P=8, samples=600, seed=5)
    taus, depths = [0.0, 2.0, 5.0, 12.0, 40.0], (1, 2, 4, 8)
    x, q, y, ys = sf.mc_contexts(**args, batches=6, temperatures=taus)
    r = sf.floor_from_contexts(x, q, y, ys, temperatures=taus, batches=6, depths=depths)
    for L, R in zip(depths, r["best_stack"]["R"]):  # equal batches: the mean over contexts is the mean over batches
        assert r["sq_err_stack"][L].mean() == pytest.approx(R, rel=1e-10), L
    np.testing.assert_allclose(r["sq_err_stack"][1], r["sq_err_single"], rtol=1e-9)  # one head: the best head


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    st = Store(tmp_path_factory.mktemp("certs") / "store")
    run_pack([make_config("smoke", model="nonlinear", L=L) for L in (1, 2, 4)], st, progress=False)
    paired.clear_cache()
    return st


def test_series_certificates_on_stored_runs(store):
    res = Results.from_store(StoredRuns(store), "smoke")
    cert = cm.series_certificates(res, "nonlinear", "difficult", 2, 0.0, 0.0)
    assert cert["depths"] == [1, 2, 4] and cert["computed"] == ["doubling", "construction"]
    rid = {L: res.runs("nonlinear", "difficult", 2, 0.0, 0.0, L)[0]["run_id"] for L in (1, 2, 4)}
    pd_ = paired.paired_difference(StoredRuns(store), rid[2], rid[1])
    assert cert["per_depth"][2]["doubling"]["diff"] == pytest.approx(pd_["diff"], rel=1e-12)
    assert cert["per_depth"][2]["doubling"]["se"] == pytest.approx(pd_["se"], rel=1e-12)
    cfg = store.load_config(rid[1])
    fl = paired.floor_on_eval(cfg, depths=(1, 2, 4))
    # B_L is the mean over contexts of the held-out stack (paired with R_L context by context); best_stack's
    # R weights the 10 batches of 512 contexts (51 or 52 each) equally: the two differ by that alone
    assert [cert["per_depth"][L]["B"] for L in (1, 2, 4)] == pytest.approx(
        [fl["sq_err_stack"][L].mean() for L in (1, 2, 4)], rel=1e-12)
    assert [cert["per_depth"][L]["B"] for L in (1, 2, 4)] == pytest.approx(fl["best_stack"]["R"], rel=3e-3)
    for L in (1, 2, 4):
        assert cert["per_depth"][L]["R"] == pytest.approx(store.load_metrics(rid[L])["R"], rel=1e-5)
    # a model whose settings do not include the cosine stack: doubling only
    assert cm.series_certificates(res, "nonlinear", "difficult", 2, 0.0, 0.0, construction=False)["computed"] == [
        "doubling"]
    # without a store: a named error, never a silent pass
    with pytest.raises(InputError, match=r"^certificates need the store's models \(these results have no store\)$"):
        cm.series_certificates(Results(res.df, "smoke"), "nonlinear", "difficult", 2, 0.0, 0.0)


def test_fig6_panel_draws_B_L_and_marks_failing_depths(store):
    """SPEC §7 / issue 33: beside a loss curve a claim reads, B_L (dash-dot, at the values the
    certificate computed) and a red x on each depth failing a certificate, named in the caption;
    without models, the caption says none could be drawn."""
    from matplotlib.figure import Figure

    from depthscale.analysis import plotting
    from depthscale.experiments.inverse_depth import certificate_marks

    res = Results.from_store(StoredRuns(store), "smoke")
    cert = cm.series_certificates(res, "nonlinear", "difficult", 2, 0.0, 0.0)
    ax = Figure().subplots()
    ax.set_title("(a) x", loc="left")
    certificate_marks(ax, res, [(2, (0.0, 0.0))])
    dashdot = [line for line in ax.get_lines() if line.get_linestyle() == "-."]
    assert len(dashdot) == 1
    np.testing.assert_allclose(dashdot[0].get_ydata(), [cert["per_depth"][L]["B"] for L in (1, 2, 4)])
    crosses = [line for line in ax.get_lines() if line.get_marker() == "x"]
    bad = sorted(L for L, p in cert["per_depth"].items() if p["ok"] is False)
    assert sorted(x for line in crosses for x in line.get_xdata()) == bad
    notes = " ".join(plotting.remarks(ax.figure))
    assert "B_L" in notes and (not bad or "failing a convergence certificate" in notes)
    bare = Figure().subplots()
    certificate_marks(bare, Results(res.df, "smoke"), [(2, (0.0, 0.0))])
    assert not bare.get_lines() and "no B_L or certificates drawn" in " ".join(plotting.remarks(bare.figure))


def test_paired_gap_edges():
    """Mutation testing (issue 47): equal arrays pass (0 <= 2·0); two contexts are enough; a 2-D
    pair of one shape is refused; exactly two seeds give a spread (against a reference without seeds
    and paired)."""
    a = np.array([2.0, 2.5, 1.5])
    g = cm.paired_gap(a, a.copy())
    assert g["diff"] == 0.0 and g["se"] == 0.0 and g["ok"]  # a copy of a stack is never "above" it
    two = cm.paired_gap(np.array([1.0, 3.0]), np.array([0.0, 0.0]))
    assert two["diff"] == 2.0 and two["se"] == pytest.approx(1.0)  # std (ddof 1) √2 / √2
    with pytest.raises(InputError, match="1-D"):
        cm.paired_gap(np.ones((3, 3)), np.ones((3, 3)))
    with pytest.raises(InputError, match="1-D"):
        cm.paired_gap(np.ones(1), np.ones(1))
    assert cm.seed_variance({0: 2.0, 1: 2.2}, None) == (pytest.approx(0.02 / 2), 2)  # s² = 0.02, n = 2
    assert cm.seed_variance({0: 2.0, 1: 2.2}, {0: 1.0, 1: 1.0}) == (pytest.approx(0.02 / 2), 2)
    assert cm.seed_variance({0: 2.0}, None) == (0.0, 1)


def test_doubling_pairs_each_depths_own_seeds():
    """Each doubling certificate reads the seeds of its two depths (2L against L), at every depth."""
    rng = np.random.default_rng(4)
    sq = {L: 2.0 + 0.1 / L + 0.05 * rng.standard_normal(300) for L in (1, 2, 4, 8)}
    seeds = {L: {s: 2.0 + 0.1 / L + 0.01 * (s - 1) * L for s in range(3)} for L in sq}
    dbl = cm.doubling(sq, seeds)
    for L in (2, 4, 8):
        assert dbl[L]["se"] == pytest.approx(cm.paired_gap(sq[L], sq[L // 2], seeds[L], seeds[L // 2])["se"], rel=1e-12)
        assert dbl[L]["vs"] == L // 2


def _two_seed_store(root):
    st = Store(root)
    run_pack([make_config("smoke", model="nonlinear", L=L, seed=s) for L in (1, 2, 4) for s in (3, 5)], st,
             progress=False)
    paired.clear_cache()
    return st


def test_series_certificates_reads_seeds_half_and_passes_device_and_store(tmp_path, monkeypatch):
    """The store reader: per depth the seed-mean per context and the seeds' means (their spread in
    every SE), the budget certificate against `half`, the device and the store's floor cache handed
    on; depths without runs skipped, none at all a named error."""
    st = _two_seed_store(tmp_path / "store")
    res = Results.from_store(StoredRuns(st), "smoke")
    reader = res.reader
    # first, with nothing cached (training keeps each run's per-context arrays): the default device
    # evaluates the models, on the cpu
    shutil.rmtree(st.root / "cache" / "per_context")
    per_context_cache.clear_cache()
    seeds = {}
    sq, cfg = cm.series_contexts(res, "nonlinear", "difficult", 2, 0.0, 0.0, [1, 2, 4], seeds=seeds)
    assert sorted(sq) == [1, 2, 4] and cfg.d == 8 and {L: sorted(v) for L, v in seeds.items()} == {L: [3, 5] for L in sq}
    per = {}
    for L in (1, 2, 4):
        got = [paired.per_context(reader, r["run_id"]) for r in res.runs("nonlinear", "difficult", 2, 0.0, 0.0, L)]
        assert len(got) == 2
        per[L] = (np.mean([g["sq_err"] for g in got], axis=0), {r["seed"]: float(np.mean(g["sq_err"])) for r, g in zip(
            res.runs("nonlinear", "difficult", 2, 0.0, 0.0, L), got)})
    seen = {"ctx": [], "floor": []}
    real_ctx, real_floor = paired.per_context, paired.floor_on_eval
    monkeypatch.setattr(paired, "per_context", lambda rd, rid, device: seen["ctx"].append(device) or real_ctx(rd, rid, device))
    monkeypatch.setattr(paired, "floor_on_eval", lambda cfg, device, depths, reader: seen["floor"].append(
        (device, reader)) or real_floor(cfg, device, depths=depths, reader=reader))
    cert = cm.series_certificates(res, "nonlinear", "difficult", 2, 0.0, 0.0, depths=[1, 3, 2, 4], half=res)
    assert cert["depths"] == [1, 2, 4] and cert["computed"] == ["doubling", "construction", "budget"]
    assert set(seen["ctx"]) == {"cpu"} and len(seen["ctx"]) == 12  # the series and its half, 6 runs each
    assert seen["floor"] == [("cpu", reader)]  # the store's cache of B_L
    p = cert["per_depth"]
    for L in (2, 4):
        want = cm.paired_gap(per[L][0], per[L // 2][0], per[L][1], per[L // 2][1])
        assert p[L]["doubling"]["se"] == pytest.approx(want["se"], rel=1e-12) and p[L]["doubling"]["seeds"] == 2
        assert p[L]["doubling"]["se"] > p[L]["doubling"]["se_contexts"]  # the seeds' spread is in it
    for L in (1, 2, 4):  # against itself: no difference, and no spread of the paired seeds
        assert p[L]["budget"]["diff"] == 0.0 and p[L]["budget"]["se"] == 0.0 and p[L]["budget"]["ok"]
        assert p[L]["R"] == pytest.approx(float(per[L][0].mean()), rel=1e-12)
    seen["ctx"].clear()
    cm.series_certificates(res, "nonlinear", "difficult", 2, 0.0, 0.0, device="meta-not-used", construction=False)
    assert set(seen["ctx"]) == {"meta-not-used"}  # the caller's device reaches the evaluation
    with pytest.raises(InputError, match="no runs of nonlinear/difficult k=2"):
        cm.series_certificates(res, "nonlinear", "difficult", 2, 0.0, 0.0, depths=[3])


def test_a_series_on_two_evaluation_sets_is_refused_naming_the_run(tmp_path):
    st = Store(tmp_path / "store")
    cfgs = [make_config("smoke", model="nonlinear", L=1, seed=0, eval_seed=e) for e in (0, 1)]
    for c in cfgs:  # two packs: a pack shares its evaluation contexts
        run_pack([c], st, progress=False)
    paired.clear_cache()
    rows = [{"run_id": r} for r in sorted(p.name for p in (st.root / "runs").iterdir())]
    assert len(rows) == 2
    # a Results view never mixes evaluation sets: a reader of its own rows does
    res = SimpleNamespace(reader=StoredRuns(st), runs=lambda *key: rows)
    names = "|".join(r["run_id"] for r in rows)
    with pytest.raises(InputError, match=rf"^run ({names}) does not share the series' evaluation contexts$"):
        cm.series_contexts(res, "nonlinear", "difficult", 2, 0.0, 0.0, [1])
