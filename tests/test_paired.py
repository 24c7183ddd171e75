"""Statistics paired by context (depthscale.analysis.paired) on stored runs' per-context arrays
(runs.per_context, cached by store.cache), and the softmax floor on given contexts
(softmax_floor.floor_from_contexts). Smoke-sized runs (d = 8, P = 16, 512 evaluation contexts, 60
steps) trained once per module."""

import json
import math
import os

import numpy as np
import pytest
import torch

from depthscale.analysis import paired
from depthscale.base.errors import InputError
from depthscale.cli import main as cli
from depthscale.config.run import make_config
from depthscale.data.measurements import PERCENTILES, eval_contexts
from depthscale.runs import per_context as pc
from depthscale.runs.per_context import StoredRuns
from depthscale.store import cache
from depthscale.store.store import Store
from depthscale.theory import softmax_floor as sf
from depthscale.train.training import run_pack


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("paired") / "store")
    nl = [make_config("smoke", model="nonlinear", L=L) for L in (1, 2, 4)]
    lv = make_config("smoke", model="layer_values", L=2)
    lin = make_config("smoke", model="linear", L=2)
    easy = make_config("smoke", model="nonlinear", task="easy", L=1, max_steps=0)
    other = make_config("smoke", model="nonlinear", L=1, eval_seed=7, max_steps=0)  # another evaluation set
    for pack in (nl, [lv], [lin], [easy], [other]):
        run_pack(pack, store, progress=False)
    paired.clear_cache()
    pc.clear_cache()
    return store, {"nl1": nl[0], "nl2": nl[1], "nl4": nl[2], "lv": lv, "lin": lin, "easy": easy, "other": other}


# --------------------------------------------------------------------------- per_context

def test_per_context_reproduces_the_stored_metrics_for_every_kind(runs):
    store, c = runs
    rd = StoredRuns(store)
    ctx = eval_contexts(c["nl1"], c["nl1"].eval_contexts, c["nl1"].eval_seed)
    ystar = torch.cat([x.ystar_B for x in ctx]).double().numpy()
    for name in ("nl1", "nl2", "lv", "lin"):
        cfg = c[name]
        m, r = store.load_metrics(cfg.run_id), paired.per_context(rd, cfg.run_id)
        assert r["n"] == cfg.eval_contexts == r["sq_err"].size
        # measure() computed R with the gradient-carrying forward (input_weights): float rounding apart
        assert r["sq_err"].mean() == pytest.approx(m["R"], rel=1e-5), name
        assert r["sq_err"].std(ddof=1) / math.sqrt(r["n"]) == pytest.approx(m["R_se"], rel=1e-5)
        np.testing.assert_array_equal(r["ystar"], ystar)  # the contexts training evaluated on
        assert r["key"] == paired.eval_key(c["nl1"])
        if name == "lin":
            assert r["sel_E"] is None  # no attention rows
        else:  # the stored percentiles are those of sel_E (np.percentile of the same float64 numbers)
            np.testing.assert_allclose(np.percentile(r["sel_E"], PERCENTILES), m["selection_percentiles"],
                                       rtol=1e-6, atol=1e-12)
            assert r["sel_E"].mean() == pytest.approx(m["selection_mean"], rel=1e-6)
    # an independent route to the prediction: the model's own readout y_hat (= mean_l f_l for these kinds)
    pack = store.load_model(c["nl2"].run_id)
    with torch.no_grad():
        yhat = torch.cat([pack(x.X_BxPxd, x.y_BxP, x.xq_Bxd)[0].y_hat_B for x in ctx]).double().numpy()
    np.testing.assert_allclose(paired.per_context(rd, c["nl2"].run_id)["sq_err"], (yhat - ystar) ** 2,
                               rtol=1e-4, atol=1e-6)
    assert paired.per_context(rd, c["easy"].run_id)["sel_E"] is None  # easy task: no selection loss


def test_training_caches_each_runs_per_context_arrays_bit_for_bit_as_evaluate_computes_them(runs):
    """Issue 50: the final measurement's per-context arrays are written to the store's cache when a
    run finishes, so the report never evaluates a stored model again; for every kind and task they
    are evaluate()'s on the stored model, bit for bit, and their mean is the stored R."""
    store, c = runs
    for name, cfg in c.items():
        got = cache.read_per_context(store.root, cfg.run_id, pc._signature(store, cfg.run_id), cfg.eval_contexts)
        assert got is not None, name
        again = pc.evaluate(store, cfg.run_id)
        for k in ("sq_err", "ystar", "sel_E"):
            assert (got[k] is None) == (again[k] is None), (name, k)
            if got[k] is not None:
                np.testing.assert_array_equal(got[k], again[k], err_msg=f"{name} {k}")
        assert got["sq_err"].mean() == pytest.approx(store.load_metrics(cfg.run_id)["R"], rel=1e-12)


def test_the_arrays_held_in_process_are_bounded_least_recently_read_first(runs, monkeypatch):
    """per_context holds at most MEMO_BYTES of arrays in the process (the least recently read dropped
    first, the newest always kept); a dropped run is read back from the store's cache, not evaluated."""
    store, c = runs
    rd = StoredRuns(store)
    ids = [c[n].run_id for n in ("nl1", "nl2", "nl4")]
    pc.clear_cache()
    one = pc._nbytes(pc.per_context(store, ids[0]))
    pc.clear_cache()
    monkeypatch.setattr(pc, "MEMO_BYTES", 2 * one)
    first = [paired.per_context(rd, r)["sq_err"] for r in ids[:2]]
    paired.per_context(rd, ids[0])  # read again: now the most recent
    paired.per_context(rd, ids[2])  # over the bound: ids[1], the least recently read, goes
    assert [k[1] for k in pc._memo] == [ids[0], ids[2]]
    monkeypatch.setattr(pc, "evaluate", lambda *a: pytest.fail("evaluated a run whose arrays the store caches"))
    np.testing.assert_array_equal(paired.per_context(rd, ids[1])["sq_err"], first[1])
    monkeypatch.setattr(pc, "MEMO_BYTES", 0)
    paired.per_context(rd, ids[0])
    assert [k[1] for k in pc._memo] == [ids[0]]  # the newest stays, whatever the bound
    pc.clear_cache()
    # arrays no file holds (a read-only store without them cached) stay: dropped, they would be evaluated again
    for r in ids[:2]:
        cache.per_context_path(store.root, r).unlink()
    ro = StoredRuns(Store(store.root, readonly=True))
    monkeypatch.undo()
    monkeypatch.setattr(pc, "MEMO_BYTES", 0)
    paired.per_context(ro, ids[2])
    assert [k[1] for k in pc._memo] == [ids[2]]  # its file exists, but it is the newest
    for r in ids[:2]:
        paired.per_context(ro, r)
    assert [k[1] for k in pc._memo] == ids[:2]  # ids[2], on disk and no longer the newest, went; they stay
    pc.clear_cache()
    for r in ids[:2]:  # the fixture's files back, for the other tests
        pc.per_context(store, r)
    pc.clear_cache()


def test_per_context_caches_in_process_and_in_the_store_and_follows_params(runs, monkeypatch):
    store, c = runs
    rd = StoredRuns(store)
    rid = c["nl4"].run_id
    pc.clear_cache()
    first = paired.per_context(rd, rid)
    path = cache.per_context_path(store.root, rid)
    assert path == store.root / "cache" / "per_context" / f"{rid}.npz"
    assert path.exists() and not first["sq_err"].flags.writeable
    calls = []
    real = pc.evaluate
    monkeypatch.setattr(pc, "evaluate", lambda *a: calls.append(a) or real(*a))
    assert paired.per_context(rd, rid)["sq_err"] is first["sq_err"]  # in process
    pc.clear_cache()
    again = paired.per_context(rd, rid)  # from the file
    assert not calls
    np.testing.assert_array_equal(again["sq_err"], first["sq_err"])
    np.testing.assert_array_equal(again["sel_E"], first["sel_E"])
    params = store.run_path(rid) / "params.pt"
    st = params.stat()
    os.utime(params, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # "new" parameters: both caches stale
    np.testing.assert_array_equal(paired.per_context(rd, rid)["sq_err"], first["sq_err"])
    assert len(calls) == 1
    pc.clear_cache()
    paired.per_context(rd, rid)
    assert len(calls) == 1  # the file was rewritten for the new params.pt
    for bad in (b"not an npz", b"", path.read_bytes()[:100]):  # damaged (a cut zip too): recomputed, replaced
        path.write_bytes(bad)
        pc.clear_cache()
        np.testing.assert_array_equal(paired.per_context(rd, rid)["sq_err"], first["sq_err"])
    assert len(calls) == 4 and cache.read_per_context(store.root, rid, pc._signature(store, rid), 512) is not None
    ro = StoredRuns(Store(store.root, readonly=True))  # a read-only store: computed, never written
    rid2 = c["lv"].run_id
    cache.per_context_path(store.root, rid2).unlink(missing_ok=True)
    pc.clear_cache()
    paired.per_context(ro, rid2)
    assert not cache.per_context_path(store.root, rid2).exists()


def test_per_context_writes_nothing_into_run_directories(tmp_path):
    """Analysis reads runs through the door: the run's files are as training left them, and the
    arrays land in the store's cache (an old per_context.npz in the run directory is ignored)."""
    store = Store(tmp_path / "store")
    cfgs = [make_config("smoke", model="nonlinear", L=L, max_steps=5) for L in (1, 2)]
    run_pack(cfgs, store, progress=False)
    a, b = (cfg.run_id for cfg in cfgs)
    stale = store.run_path(b) / "per_context.npz"  # what earlier versions wrote there: never read
    stale.write_bytes(b"stale")

    def files():
        return {r: sorted((p.relative_to(store.run_path(r)).as_posix(), p.stat().st_mtime_ns, p.stat().st_size)
                          for p in store.run_path(r).rglob("*")) for r in (a, b)}

    before = files()
    pc.clear_cache()
    paired.clear_cache()
    res = paired.paired_difference(StoredRuns(store), a, b)
    assert files() == before
    assert sorted(p.name for p in (store.root / "cache" / "per_context").iterdir()) == sorted([f"{a}.npz", f"{b}.npz"])
    direct = pc.evaluate(store, a)["sq_err"] - pc.evaluate(store, b)["sq_err"]
    assert res["diff"] == float(direct.mean()) and res["n"] == direct.size


def test_the_cache_is_never_written_through_a_link(runs, tmp_path):
    store, c = runs
    rid = c["nl1"].run_id
    arrays = pc.evaluate(store, rid)
    sig = pc._signature(store, rid)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "linked"
    root.mkdir()
    (root / "cache").symlink_to(elsewhere)
    assert not cache.write_per_context(root, rid, sig, arrays) and not any(elsewhere.iterdir())
    assert cache.read_per_context(root, rid, sig, 512) is None
    target = tmp_path / "target.npz"
    (tmp_path / "ok" / "cache" / "per_context").mkdir(parents=True)
    link = cache.per_context_path(tmp_path / "ok", rid)
    link.symlink_to(target)  # a link at the file's name is replaced, not written through
    assert cache.write_per_context(tmp_path / "ok", rid, sig, arrays)
    assert not target.exists() and not link.is_symlink()
    assert cache.per_context_path(tmp_path / "ok", "../escape") is None


class _Reader:
    """Only the RunReader protocol, over arrays held in memory: all paired.py needs."""

    def __init__(self, cfgs: dict, arrays: dict):
        self.cfgs, self.arrays = cfgs, arrays

    def load_config(self, run_id):
        return self.cfgs[run_id]

    def load_curves(self, run_id):
        return {}

    def per_context(self, run_id, device="cpu"):
        return dict(self.arrays[run_id])


def test_paired_statistics_need_only_a_reader():
    rng = np.random.default_rng(1)
    cfgs = {f"r{L}": make_config("smoke", model="nonlinear", L=L) for L in (1, 4)}
    arrays = {r: {"sq_err": rng.random(300), "ystar": rng.standard_normal(300), "sel_E": rng.random(300)} for r in cfgs}
    rd = _Reader(cfgs, arrays)
    assert isinstance(rd, paired.RunReader)
    paired.clear_cache()
    res = paired.paired_difference(rd, "r1", "r4")
    d = arrays["r1"]["sq_err"] - arrays["r4"]["sq_err"]
    assert res["diff"] == pytest.approx(d.mean(), rel=1e-12) and res["se"] == pytest.approx(d.std(ddof=1) / math.sqrt(300))
    boot = paired.bootstrap_dQ(rd, "r1", "r4", n_boot=20, seed=2)
    np.testing.assert_allclose(boot["dQ"], np.percentile(arrays["r1"]["sel_E"], PERCENTILES)
                               - np.percentile(arrays["r4"]["sel_E"], PERCENTILES), rtol=1e-12)
    arrays["r4"]["sel_E"] = arrays["r4"]["sel_E"] * 2  # other numbers: another bootstrap, not the cached one
    assert not np.array_equal(paired.bootstrap_dQ(rd, "r1", "r4", n_boot=20, seed=2)["dQ"], boot["dQ"])
    from depthscale.analysis.results import Results

    with pytest.raises(InputError, match="RunReader"):
        Results(None, "smoke", object())


# --------------------------------------------------------------------------- paired difference

def test_evaluate_reads_the_model_on_another_configs_evaluation_contexts(runs):
    store, c = runs
    rd = StoredRuns(store)
    rid = c["nl2"].run_id
    own = pc.evaluate(store, rid, cfg=store.load_config(rid))
    np.testing.assert_array_equal(own["sq_err"], paired.per_context(rd, rid)["sq_err"])
    fresh_cfg = c["nl2"].replace(eval_seed=c["nl2"].eval_seed + 1)
    fresh = pc.evaluate(store, rid, cfg=fresh_cfg)
    chunks = eval_contexts(fresh_cfg, fresh_cfg.eval_contexts, fresh_cfg.eval_seed)
    np.testing.assert_array_equal(fresh["ystar"], torch.cat([ch.ystar_B for ch in chunks]).double().numpy())
    assert not np.array_equal(fresh["sq_err"], own["sq_err"])  # the same model on other contexts
    with pytest.raises(InputError, match="cfg must be a RunConfig"):
        pc.evaluate(store, rid, cfg={"eval_seed": 1})


def test_paired_difference_is_the_stored_difference_with_a_smaller_paired_se(runs):
    store, c = runs
    rd = StoredRuns(store)
    a, b = c["nl1"].run_id, c["nl4"].run_id
    ma, mb = store.load_metrics(a), store.load_metrics(b)
    res = paired.paired_difference(rd, a, b)
    assert res["n"] == 512
    assert res["diff"] == pytest.approx(ma["R"] - mb["R"], rel=1e-5, abs=1e-6)
    # the SE brute-forced with plain Python sums on the per-context arrays
    da, db = paired.per_context(rd, a)["sq_err"], paired.per_context(rd, b)["sq_err"]
    d = [float(x) - float(y) for x, y in zip(da, db)]
    mean = sum(d) / len(d)
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d))
    assert res["se"] == pytest.approx(se, rel=1e-9)
    unpaired = math.hypot(ma["R_se"], mb["R_se"])
    assert np.corrcoef(da, db)[0, 1] > 0.5  # the two depths err on the same contexts
    assert res["se"] < 0.8 * unpaired, (res["se"], unpaired)
    flipped = paired.paired_difference(rd, b, a)
    assert flipped["diff"] == pytest.approx(-res["diff"], rel=1e-12) and flipped["se"] == pytest.approx(res["se"])


def test_paired_statistics_refuse_runs_on_different_contexts(runs):
    store, c = runs
    rd = StoredRuns(store)
    with pytest.raises(InputError, match="do not share their evaluation contexts") as e:
        paired.paired_difference(rd, c["nl1"].run_id, c["other"].run_id)
    assert "\n" not in str(e.value)
    with pytest.raises(InputError, match="do not share"):
        paired.bootstrap_dQ(rd, c["nl1"].run_id, c["easy"].run_id, n_boot=10)


# --------------------------------------------------------------------------- bootstrap Delta Q

def _naive_bootstrap(E1, EL, q, n_boot, seed):
    """One resample at a time, every index drawn for both runs."""
    rng = np.random.default_rng(seed)
    out = np.empty((n_boot, len(q)))
    for b in range(n_boot):
        idx = rng.integers(0, len(E1), len(E1))
        out[b] = [np.percentile(E1[idx], p) - np.percentile(EL[idx], p) for p in q]
    return out.std(0, ddof=1)


def test_bootstrap_dQ_matches_the_stored_percentiles_and_a_naive_bootstrap(runs):
    store, c = runs
    rd = StoredRuns(store)
    r1, r4 = c["nl1"].run_id, c["nl4"].run_id
    res = paired.bootstrap_dQ(rd, r1, r4, n_boot=1000, seed=3)
    stored = np.subtract(store.load_metrics(r1)["selection_percentiles"], store.load_metrics(r4)["selection_percentiles"])
    assert res["q"] == list(map(float, PERCENTILES)) and res["n"] == 512
    np.testing.assert_allclose(res["dQ"], stored, rtol=1e-6, atol=1e-9)
    paired.clear_cache()  # computed again, not read from the in-process cache
    again = paired.bootstrap_dQ(rd, r1, r4, n_boot=1000, seed=3)
    np.testing.assert_array_equal(again["se"], res["se"])  # deterministic for a seed
    assert not np.array_equal(paired.bootstrap_dQ(rd, r1, r4, n_boot=1000, seed=4)["se"], res["se"])
    E1, E4 = paired.per_context(rd, r1)["sel_E"], paired.per_context(rd, r4)["sel_E"]
    inner = [q for q in PERCENTILES if 10 <= q <= 90]
    naive = _naive_bootstrap(E1, E4, inner, 1000, seed=11)  # an independent stream
    ours = res["se"][[PERCENTILES.index(q) for q in inner]]
    # an SD from B = 1000 resamples has relative sd ~ 1/sqrt(2B) = 2.2% (more for a percentile's
    # lumpy bootstrap law); two independent ones differ by ~3-5%: 20% per q, 8% on the mean ratio
    ratio = ours / naive
    assert np.all(np.abs(ratio - 1) < 0.2), ratio
    assert abs(ratio.mean() - 1) < 0.08, ratio.mean()
    # pairing matters: resampling the two runs independently gives a larger SE at the median
    rng = np.random.default_rng(0)
    unp = np.std([np.median(E1[rng.integers(0, 512, 512)]) - np.median(E4[rng.integers(0, 512, 512)])
                  for _ in range(1000)], ddof=1)
    assert res["se"][PERCENTILES.index(50)] < unp


def test_bootstrap_dQ_rejects_bad_input(runs):
    store, c = runs
    rd = StoredRuns(store)
    r1, r2 = c["nl1"].run_id, c["nl2"].run_id
    with pytest.raises(InputError, match="no selection loss"):
        paired.bootstrap_dQ(rd, r1, c["lin"].run_id, n_boot=10)
    with pytest.raises(InputError, match="percentiles"):
        paired.bootstrap_dQ(rd, r1, r2, percentiles=[50, 101])
    with pytest.raises(InputError, match="n_boot"):
        paired.bootstrap_dQ(rd, r1, r2, n_boot=1)
    res = paired.bootstrap_dQ(rd, r1, r2, percentiles=[50, 90], n_boot=50)
    assert res["q"] == [50.0, 90.0] and res["dQ"].shape == res["se"].shape == (2,)


# --------------------------------------------------------------------------- floor on given contexts

def _numpy_heads(x, q, y, taus):
    """Cosine heads context by context in numpy (independent of softmax_floor's torch code)."""
    H = np.empty((len(x), len(taus)))
    for c in range(len(x)):
        cos = x[c] @ q[c] / np.linalg.norm(x[c], axis=1) / np.linalg.norm(q[c])
        for j, tau in enumerate(taus):
            e = np.exp(tau * cos - np.max(tau * cos))
            H[c, j] = e @ y[c] / e.sum()
    return H


def _mixture_by_generic_solver(H, ys):
    from scipy.optimize import minimize

    G, h = H.T @ H / len(ys), H.T @ ys / len(ys)
    r = minimize(lambda v: v @ G @ v - 2 * h @ v, np.full(H.shape[1], 0.1), jac=lambda v: 2 * (G @ v - h),
                 bounds=[(0, None)] * H.shape[1], method="L-BFGS-B", options=dict(ftol=1e-15, gtol=1e-12))
    return r.x


def test_floor_from_given_contexts_equals_the_monte_carlo_path_on_the_same_contexts():
    args = dict(a=0.5, b=0.25, k=2, d=4, P=8, samples=600, seed=5)
    taus, depths = [0.0, 2.0, 5.0, 12.0, 40.0], (1, 2, 4)
    mc = sf.softmax_floor(**args, temperatures=taus, batches=6, depths=depths, progress=False)
    x, q, y, ys = sf.mc_contexts(**args, batches=6, temperatures=taus)
    given = sf.floor_from_contexts(x, q, y, ys, temperatures=taus, batches=6, depths=depths)
    for key in ("single_head", "single_head_se", "ensemble_floor", "se", "ensemble_minus_single", "var_ystar",
                "single_head_gain"):
        assert given[key] == pytest.approx(mc[key], rel=1e-9), key
    assert given["single_head_temperature"] == mc["single_head_temperature"] and given["n"] == 600
    np.testing.assert_allclose(given["best_stack"]["R"], mc["best_stack"]["R"], rtol=1e-9)
    np.testing.assert_allclose(given["iid_depth"]["R"], mc["iid_depth"]["R"], rtol=1e-9)


def test_floor_from_contexts_against_numpy_heads_and_a_generic_solver():
    rng = np.random.default_rng(0)
    n, P, d, taus = 400, 8, 4, [-2.0, 0.0, 3.0, 8.0, 25.0]
    x, q, beta = rng.standard_normal((n, P, d)), rng.standard_normal((n, d)), rng.standard_normal((n, d))
    y = np.einsum("bpd,bd->bp", x, beta)
    ys = np.array([y[c, np.argsort(-(x[c] @ q[c] / np.linalg.norm(x[c], axis=1)))[:2]].mean() for c in range(n)])
    res = sf.floor_from_contexts(torch.tensor(x), torch.tensor(q), torch.tensor(y), torch.tensor(ys),
                                 temperatures=taus, batches=4)
    H = _numpy_heads(x, q, y, taus)
    # in sample: the best head with its best gain, and the best nonnegative mixture
    single = min(np.mean((max(0.0, H[:, j] @ ys / (H[:, j] @ H[:, j])) * H[:, j] - ys) ** 2) for j in range(len(taus)))
    v = _mixture_by_generic_solver(H, ys)
    assert res["in_sample"]["single_head"] == pytest.approx(single, rel=1e-10)
    assert res["in_sample"]["ensemble_floor"] == pytest.approx(np.mean((H @ v - ys) ** 2), rel=1e-7)
    assert res["in_sample"]["ensemble_floor"] <= res["in_sample"]["single_head"] + 1e-12  # a head is a mixture
    assert res["ensemble_floor"] <= res["single_head"] + 3 * res["ensemble_minus_single_se"]
    # held out: batch 0 (contexts 0..99) scored with the mixture fitted on the other three batches
    v0 = _mixture_by_generic_solver(H[100:], ys[100:])
    np.testing.assert_allclose(res["sq_err_ensemble"][:100], (H[:100] @ v0 - ys[:100]) ** 2, rtol=1e-5, atol=1e-8)
    assert res["sq_err_ensemble"].mean() == pytest.approx(res["ensemble_floor"], rel=1e-12)  # equal batches
    assert res["sq_err_single"].mean() == pytest.approx(res["single_head"], rel=1e-12)
    with pytest.raises(InputError, match="contexts must be"):
        sf.floor_from_contexts(torch.tensor(x), torch.tensor(q), torch.tensor(y[:, :3]), torch.tensor(ys))


def test_floor_on_eval_uses_the_runs_own_evaluation_contexts(runs):
    store, c = runs
    rd = StoredRuns(store)
    cfg = c["nl1"]
    taus = [0.0, 4.0, 10.0, 30.0]
    res = paired.floor_on_eval(cfg, temperatures=taus, depths=(1, 2))
    assert res["n"] == cfg.eval_contexts and res["key"] == paired.per_context(rd, cfg.run_id)["key"]
    chunks = eval_contexts(cfg, cfg.eval_contexts, cfg.eval_seed)
    x, q, y = (torch.cat([getattr(k, f) for k in chunks]).double().numpy() for f in ("X_BxPxd", "xq_Bxd", "y_BxP"))
    ys = paired.per_context(rd, cfg.run_id)["ystar"]  # the targets the run was scored against
    H = _numpy_heads(x, q, y, taus)
    single = min(np.mean((max(0.0, H[:, j] @ ys / (H[:, j] @ H[:, j])) * H[:, j] - ys) ** 2) for j in range(len(taus)))
    assert res["in_sample"]["single_head"] == pytest.approx(single, rel=1e-9)
    assert res["var_ystar"] == pytest.approx(np.mean(ys**2), rel=1e-12)
    assert res["single_tau"] == res["single_head_temperature"] in taus
    assert res["in_sample"]["ensemble_floor"] <= res["in_sample"]["single_head"] + 1e-12
    assert res["best_stack"]["R"][0] == pytest.approx(res["single_head"], rel=1e-12)  # L = 1: one head
    # not a fresh sample: a Monte Carlo floor at the same geometry gives another number
    mc = sf.softmax_floor(cfg.a, cfg.b, cfg.k, cfg.d, cfg.P, samples=cfg.eval_contexts, temperatures=taus,
                          depths=(1,), progress=False)
    assert mc["ensemble_floor"] != pytest.approx(res["ensemble_floor"], rel=1e-6)


def test_best_stack_never_rises_with_depth():
    # at this seed the search from the mixture alone gave 1.0429 at L = 4 and 1.0449 at L = 8
    res = sf.softmax_floor(0, 0, 2, 8, 16, samples=1000, seed=2, batches=5, depths=(1, 2, 4, 8, 16, 32),
                           progress=False)
    R = res["best_stack"]["R"]
    assert all(b <= a for a, b in zip(R, R[1:])), R
    assert R[0] == pytest.approx(res["single_head"], rel=1e-12)
    assert R[-1] >= res["in_sample"]["ensemble_floor"] - 4 * res["se"]  # no stack beats the mixture by much


# --------------------------------------------------------------------------- CLI

def _cli(capsys, *argv):
    code = cli.main(["theory", "softmax-floor", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_softmax_floor_on_a_stored_run(runs, capsys):
    store, c = runs
    rd = StoredRuns(store)
    cfg = c["nl1"]
    code, out, err = _cli(capsys, "--store", str(store.root), "--run", cfg.run_id, "--depths", "1,2",
                          "--temperatures", "0,4,10,30", "--json")
    assert code == 0, err
    rec = json.loads(out)
    ref = paired.floor_on_eval(cfg, temperatures=[0, 4, 10, 30], depths=(1, 2))
    assert rec["ensemble_floor"] == pytest.approx(ref["ensemble_floor"], rel=1e-12)
    assert rec["n"] == 512 and rec["run_id"] == cfg.run_id and "sq_err_ensemble" not in rec
    code, out, _ = _cli(capsys, "--store", str(store.root), "--run", cfg.run_id, "--depths", "1",
                        "--temperatures", "0,4,10,30")
    assert code == 0 and out.startswith(f"on the 512 evaluation contexts of run {cfg.run_id}:")
    for argv, fragment in ((("--store", str(store.root) + "-nope", "--run", cfg.run_id), "does not exist"),
                           (("--store", str(store.root), "--run", "0123456789abcdef"), "no such run"),
                           (("--run", cfg.run_id), "--store and --run go together"),
                           (("--store", str(store.root), "--run", cfg.run_id, "--d", "8"), "--d cannot be given"),
                           (("--b", "0"), "--a is required")):
        code, out, err = _cli(capsys, *argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and fragment in lines[0], (argv, err)


def test_cli_softmax_floor_defaults_to_the_cpu_nonlinear_geometry(capsys):
    code, out, err = _cli(capsys, "--a", "0", "--b", "0", "--samples", "200", "--depths", "1",
                          "--temperatures", "0,10", "--json")
    assert code == 0, err
    rec = json.loads(out)
    assert (rec["d"], rec["P"], rec["k"], rec["samples"], rec["seed"]) == (16, 64, 2, 200, 0)


def test_bootstrap_dQ_is_computed_once_per_runs_and_arguments(runs, monkeypatch):
    """fig13 and claim 10 read the same bootstrap: the second call is the cached result (read-only),
    other arguments compute again."""
    store, c = runs
    rd = StoredRuns(store)
    r1, r4 = c["nl1"].run_id, c["nl4"].run_id
    paired.clear_cache()
    calls = []
    real = paired._bootstrap
    monkeypatch.setattr(paired, "_bootstrap", lambda *a: calls.append(a[3:]) or real(*a))
    first = paired.bootstrap_dQ(rd, r1, r4, n_boot=50, seed=1)
    second = paired.bootstrap_dQ(rd, r1, r4, n_boot=50, seed=1)
    assert len(calls) == 1 and second["q"] == first["q"] and second["q"] is not first["q"]
    np.testing.assert_array_equal(second["se"], first["se"])
    assert not second["se"].flags.writeable
    paired.bootstrap_dQ(rd, r1, r4, n_boot=50, seed=2)
    assert len(calls) == 2
    paired.clear_cache()


def test_the_floor_from_streamed_chunks_equals_the_floor_on_the_whole_set_bit_for_bit():
    """Issue 51 (the report's memory): floor_on_eval streams the evaluation set chunk by chunk
    (floor_from_chunks) instead of holding it whole in float64; chunks of any sizes, across batch and
    moment-slice boundaries, give the same numbers as floor_from_contexts on the concatenation."""
    rng = np.random.default_rng(3)
    n, P, d, taus = 1000, 8, 4, [0.0, 2.0, 6.0, 20.0]
    x, q = torch.tensor(rng.standard_normal((n, P, d)), dtype=torch.float32), torch.tensor(rng.standard_normal((n, d)), dtype=torch.float32)
    y = torch.einsum("bpd,bd->bp", x, torch.tensor(rng.standard_normal((n, d)), dtype=torch.float32))
    ys = y[:, :2].mean(1)
    whole = sf.floor_from_contexts(x, q, y, ys, temperatures=taus, batches=3, depths=(1, 2, 4))
    cuts = [0, 7, 300, 301, 655, 1000]  # uneven chunks: one of 1 context, boundaries inside batches and slices
    chunks = [(x[a:b], q[a:b], y[a:b], ys[a:b]) for a, b in zip(cuts, cuts[1:])]
    streamed = sf.floor_from_chunks(iter(chunks), n, temperatures=taus, batches=3, depths=(1, 2, 4))
    for key in ("single_head", "single_head_se", "ensemble_floor", "se", "var_ystar", "single_head_temperature"):
        assert streamed[key] == whole[key], key
    assert streamed["best_stack"] == whole["best_stack"] and streamed["n"] == n
    for key in ("sq_err_ensemble", "sq_err_single"):
        np.testing.assert_array_equal(streamed[key], whole[key])
    for L in (1, 2, 4):
        np.testing.assert_array_equal(streamed["sq_err_stack"][L], whole["sq_err_stack"][L])
    with pytest.raises(InputError, match="fewer contexts than said"):
        sf.floor_from_chunks(iter(chunks[:-1]), n, temperatures=taus, batches=3)
    with pytest.raises(InputError, match="the chunks hold more than 1000 contexts"):
        sf.floor_from_chunks(iter(chunks + [(x[:1], q[:1], y[:1], ys[:1])]), n, temperatures=taus, batches=3)


def _same_floor(got: dict, want: dict) -> None:
    assert set(got) == set(want), set(got) ^ set(want)
    for k, v in want.items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(got[k], v, err_msg=k)
        elif k == "sq_err_stack":
            assert sorted(got[k]) == sorted(v)
            for L in v:
                np.testing.assert_array_equal(got[k][L], v[L], err_msg=f"{k} {L}")
        else:
            assert got[k] == v, k


def test_floor_on_eval_keeps_its_floor_in_the_store_and_reads_it_back(runs, tmp_path, monkeypatch):
    """Issue 50 item 2: a floor computed once (in the sweep's tail) is kept in the store's cache
    (cache/floors/) and read back with every number, per-context array and type it had; a call
    without depths is served by it (its stacks dropped) with what the call without depths computes;
    its seconds are counted where it is read; a read-only store is never written."""
    from depthscale.base import timing

    store, c = runs
    cfg, taus = c["nl2"], [0.0, 4.0, 10.0, 30.0]
    paired.clear_cache()
    rd = StoredRuns(store)
    first = paired.floor_on_eval(cfg, temperatures=taus, depths=(1, 2, 4), reader=rd)
    name = paired.floor_cache_name(cfg, tuple(taus), (1, 2, 4), 10)
    assert cache.floor_path(store.root, name).is_file()
    paired.clear_cache()
    monkeypatch.setattr(paired, "_compute_floor", lambda *a, **k: pytest.fail("computed again"))
    before = timing.totals().get("figures", 0.0)
    again = paired.floor_on_eval(cfg, temperatures=taus, depths=(1, 2, 4), reader=rd)
    _same_floor(again, first)
    assert timing.totals()["figures"] > before  # the seconds it took where it was computed
    plain = paired.floor_on_eval(cfg, temperatures=taus, reader=rd)  # no depths: from the cached one
    monkeypatch.undo()
    paired.clear_cache()
    _same_floor(plain, paired.floor_on_eval(cfg, temperatures=taus))  # computed without depths
    paired.clear_cache()
    _same_floor(paired.floor_on_eval(cfg, temperatures=taus, reader=rd), plain)  # no depths, from the store
    # another set of depths, temperatures or evaluation set is another floor
    assert paired.floor_cache_name(cfg, tuple(taus), (1, 2), 10) != name
    assert paired.floor_cache_name(cfg, None, (1, 2, 4), 10) != name
    assert paired.floor_cache_name(c["other"], tuple(taus), (1, 2, 4), 10) != name
    assert paired.floor_cache_name(c["nl4"], tuple(taus), (1, 2, 4), 10) == name  # same contexts, any depth of run
    ro = StoredRuns(Store(store.root, readonly=True))
    paired.clear_cache()
    paired.floor_on_eval(cfg, temperatures=taus, depths=(1,), reader=ro)
    assert not cache.floor_path(store.root, paired.floor_cache_name(cfg, tuple(taus), (1,), 10)).exists()
    paired.clear_cache()


def test_a_damaged_or_linked_floor_cache_is_recomputed_never_trusted(runs, tmp_path):
    store, c = runs
    cfg, taus = c["nl1"], [0.0, 10.0]
    rd = StoredRuns(store)
    paired.clear_cache()
    ref = paired.floor_on_eval(cfg, temperatures=taus, depths=(1, 2), reader=rd)
    path = cache.floor_path(store.root, paired.floor_cache_name(cfg, tuple(taus), (1, 2), 10))
    for junk in (b"", b"not a zip", path.read_bytes()[:100]):
        path.write_bytes(junk)
        assert cache.read_floor(store.root, path.stem) is None
        paired.clear_cache()
        _same_floor(paired.floor_on_eval(cfg, temperatures=taus, depths=(1, 2), reader=rd), ref)
    assert cache.read_floor(store.root, path.stem) is not None  # rewritten
    # a cache entry of another version is ignored
    good = cache.read_floor(store.root, path.stem)
    seconds = good.pop("seconds")
    assert seconds > 0
    assert cache.write_floor(store.root, path.stem, dict(good, key=list(good["key"])))
    monkey = cache.CACHE_VERSION
    try:
        cache.CACHE_VERSION = monkey + 1
        assert cache.read_floor(store.root, path.stem) is None
    finally:
        cache.CACHE_VERSION = monkey
    # names floor_cache_name does not give are never paths; a linked floors/ directory is never written through
    assert cache.floor_path(store.root, "../x") is None and cache.floor_path(store.root, path.stem + "x") is None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "linked"
    (root / "cache").mkdir(parents=True)
    (root / "cache" / "floors").symlink_to(elsewhere)
    assert not cache.write_floor(root, path.stem, good)
    assert not list(elsewhere.iterdir())
    paired.clear_cache()
