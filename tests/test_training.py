"""Training: determinism, checkpoint resume, NaN handling, pack parity, convergence rule."""

import json
import math

import pytest
import torch

import forked_cli

from depthscale.config.run import make_config
from depthscale.store.store import Store
from depthscale.train.checkpoint import parse
from depthscale.train.schedule import converged, lr_factor
from depthscale.train.training import run_pack, train_pack


def small(**kw):
    base = dict(max_steps=40, eval_every=10, checkpoint_every=10, eval_contexts=256, monitor_contexts=128,
                batch=32, patience=100)
    base.update(kw)
    return make_config("smoke", **base)


def test_same_seed_same_numbers():
    c = small(L=2)
    r1, r2 = train_pack([c], progress=False)[0], train_pack([c], progress=False)[0]
    assert r1["R"] == r2["R"] and r1["A"] == r2["A"]
    r3 = train_pack([small(L=2, seed=1)], progress=False)[0]
    assert r3["R"] != r1["R"]


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("model", ["nonlinear", "linear"])
def test_resume_from_checkpoint_equals_uninterrupted(tmp_path, model):
    cfgs = [small(model=model, L=L) for L in ((1, 3) if model == "nonlinear" else (2, 2))]
    if model == "linear":
        cfgs = [cfgs[0], small(model=model, L=2, seed=5)]
    ref = Store(tmp_path / "ref")
    run_pack(cfgs, ref)
    store = Store(tmp_path / "killed")
    orig = store.save_checkpoint
    calls = []

    def save_then_die(rid, obj):
        orig(rid, obj)
        calls.append(parse(obj)[0]["step"])
        if calls[-1] == 20 and len(calls) == len(cfgs) * 2:
            raise Interrupt  # killed right after the step-20 checkpoints
    store.save_checkpoint = save_then_die
    with pytest.raises(Interrupt):
        run_pack(cfgs, store)
    assert not any(store.is_done(c.run_id) for c in cfgs)
    store2 = Store(tmp_path / "killed")
    run_pack(cfgs, store2)
    for c in cfgs:
        a, b = ref.load_metrics(c.run_id), store2.load_metrics(c.run_id)
        assert a["R"] == pytest.approx(b["R"], rel=1e-6)
        assert a["steps"] == b["steps"] == 40
        assert ref.load_curves(c.run_id)["R"] == pytest.approx(store2.load_curves(c.run_id)["R"], rel=1e-6)


def test_nan_stops_that_run_only():
    good, bad = small(L=1, lr=1e-2), small(L=1, lr=1e-2, seed=1)
    pack_cfgs = [good, bad]

    res = train_pack(pack_cfgs, progress=False)
    assert all(r["stopped_because"] == "max_steps" for r in res)
    # poison one model: a non-finite parameter makes its loss NaN at the first step
    from depthscale.train import training

    orig = training.build_pack

    def poisoned(cfgs):
        pk = orig(cfgs)
        with torch.no_grad():
            pk.Wy[1].fill_(float("nan"))
        return pk
    training.build_pack = poisoned
    try:
        res2 = train_pack(pack_cfgs, progress=False)
    finally:
        training.build_pack = orig
    assert res2[1]["stopped_because"] == "nan" and res2[1]["steps"] == 1 and math.isnan(res2[1]["R"])
    assert res2[0]["stopped_because"] == "max_steps"
    assert res2[0]["R"] == pytest.approx(res[0]["R"], rel=1e-6)  # the healthy model is untouched


@pytest.mark.parametrize("recipe", [{}, dict(qk_init="spread", lr_depth_exp=-0.5)])
def test_pack_equals_separate_training(recipe):
    # the second recipe is the cpu nonlinear difficult-task recipe: a per-layer init that depends on
    # L and a learning rate per depth, both of which must stay per model inside a pack
    cfgs = [small(L=L, seed=s, **recipe) for L, s in ((1, 0), (2, 0), (4, 1))]
    packed = train_pack(cfgs, progress=False)
    for c, r in zip(cfgs, packed):
        alone = train_pack([c], progress=False)[0]
        assert r["R"] == pytest.approx(alone["R"], rel=1e-5)


def test_linear_pack_of_spectra_and_seeds_equals_separate_training():
    """Linear runs of one depth share a pack whatever their spectrum and seed (pack_key drops a, b);
    each model sees its own data, monitor and evaluation sets, exactly as when trained alone."""
    from depthscale.kinds.lookup import pack_key

    cfgs = [small(model="linear", task="easy", L=3, a=a, b=b, seed=s)
            for a, b, s in ((1.0, 0.5, 0), (0.0, 1.0, 0), (1.0, 0.5, 1))]
    assert len({pack_key(c) for c in cfgs}) == 1
    packed = train_pack(cfgs, progress=False)
    for c, r in zip(cfgs, packed):
        alone = train_pack([c], progress=False)[0]
        assert r["R"] == pytest.approx(alone["R"], rel=1e-5)
        assert r["A"] == pytest.approx(alone["A"], rel=1e-5)
        assert r["var_ystar"] == alone["var_ystar"]  # the spectrum's own evaluation set
    assert packed[0]["var_ystar"] != packed[1]["var_ystar"]


def test_convergence_rule_and_schedule():
    assert not converged([5, 4, 3], patience=3, rel_tol=1e-3)
    assert converged([5, 4, 4, 4, 4], patience=3, rel_tol=1e-3)
    assert not converged([5, 4, 4, 4, 3.9], patience=3, rel_tol=1e-3)
    c = small(warmup=10, max_steps=110)
    assert lr_factor(c, 0) == pytest.approx(0.1) and lr_factor(c, 10) == pytest.approx(1.0)
    assert lr_factor(c, 110) == pytest.approx(0.0, abs=1e-12)
    # a run trains to its cap unless early_stop lets the rule stop it (SPEC §4: the final model is the model)
    r = train_pack([small(L=1, patience=2, rel_tol=0.5, max_steps=200)], progress=False)[0]
    assert r["stopped_because"] == "max_steps" and r["steps"] == 200
    r = train_pack([small(L=1, patience=2, rel_tol=0.5, max_steps=200, early_stop=True)], progress=False)[0]
    assert r["stopped_because"] == "converged" and r["steps"] < 200
    # min_steps: the same run may not stop before step 150 (an early plateau is not convergence)
    r = train_pack([small(L=1, patience=2, rel_tol=0.5, max_steps=200, min_steps=150, early_stop=True)],
                   progress=False)[0]
    assert r["stopped_because"] == "converged" and 150 <= r["steps"] < 200


def test_cli_train_json(tmp_path):
    cmd = ["train", "--model", "nonlinear", "--task", "difficult", "--k", "2",
           "--a", "0", "--b", "0", "--depth", "2", "--preset", "smoke", "--max_steps", "20", "--seed", "3",
           "--store", str(tmp_path / "s"), "--json"]
    out = forked_cli.run(cmd)
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("run_id", "R", "R_se", "A", "C", "steps", "stopped_because"):
        assert key in rec
    assert "loss" not in rec and "loss_se" not in rec  # one name per quantity: R, as in metrics.json
    assert rec["R"] == pytest.approx(rec["C"] + (rec["A"] - rec["C"]) / 2, rel=1e-9)
    assert out.stderr.splitlines()[0] == "depthscale: preset smoke"
    again = forked_cli.run(cmd)  # loaded, not retrained
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1]) == rec


@pytest.mark.parametrize("args,fragment", [
    (["--a", "-1"], "a must be"), (["--k", "99"], "k must be <= P"), (["--model", "mlp"], "invalid choice: 'mlp'"),
])
def test_cli_bad_input_exit_2(tmp_path, args, fragment):
    out = forked_cli.run(["train", "--preset", "smoke", "--store", tmp_path / "s", *args])
    assert out.returncode == 2
    assert fragment in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


def test_batch_order_groups_shared_batches_and_changes_no_number(monkeypatch):
    from depthscale.kinds.ensemble import Nonlinear
    from depthscale.train.trainer import batch_order

    # depth-major, as a sweep lists them: the seeds' models interleave
    cfgs = [small(model="nonlinear", L=L, seed=s, max_steps=20) for L in (1, 2, 3) for s in (0, 1)]
    order = batch_order(cfgs)
    assert order == [0, 2, 4, 1, 3, 5]
    assert batch_order([cfgs[i] for i in order]) == list(range(6))
    # the pack in either order: the same metrics for every run, bit for bit with one forward per
    # seed (slices against gathers), and to float rounding with the seeds' blocks in one forward
    # (ensemble_forward's groups: d M_g's per-thread sums split the contexts differently)
    as_given = train_pack(cfgs, progress=False)
    grouped = train_pack([cfgs[i] for i in order], progress=False)
    with monkeypatch.context() as m:
        m.setattr(Nonlinear, "groups_of", lambda *a, **k: False)
        per_seed = train_pack([cfgs[i] for i in order], progress=False)
    for j, i in enumerate(order):
        for key in ("R", "A", "C", "final_monitor_loss"):
            a, b, c = as_given[i][key], per_seed[j][key], grouped[j][key]
            if math.isnan(a):  # (C of L = 1 is NaN)
                assert math.isnan(b) and math.isnan(c), (i, key)
                continue
            assert a == b, (i, key, a, b)
            assert math.isclose(a, c, rel_tol=1e-5), (i, key, a, c)


def test_the_seeds_batches_drawn_as_one_change_no_number(monkeypatch):
    # step_batches draws the seeds of a pack (same data but the seed, one spectrum each) in one
    # kernel call into one buffer, which the grouped forward takes without a copy: the batches, and a
    # whole training, the same bits as each seed drawn alone
    from depthscale.data import contexts
    from depthscale.train import trainer

    if not contexts.one_pass_available():
        pytest.skip("no C++ compiler: the one-pass kernel is not built")
    cfgs = [small(model="nonlinear", L=L, seed=s, max_steps=12) for s in (0, 1, 2) for L in (1, 2)]
    idx = list(range(len(cfgs)))
    joint = trainer.step_batches(cfgs, idx, 5, "cpu")
    ptrs = {b.X_BxPxd.untyped_storage().data_ptr() for b in joint.values()}
    assert len(joint) == 3 and len(ptrs) == 1  # three seeds, one buffer
    together = train_pack(cfgs, progress=False)
    with monkeypatch.context() as m:
        m.setattr(trainer, "sample_streams", lambda *a, **k: None)
        alone = trainer.step_batches(cfgs, idx, 5, "cpu")
        separately = train_pack(cfgs, progress=False)
    assert joint.keys() == alone.keys()
    for key in joint:
        for f in ("X_BxPxd", "y_BxP", "xq_Bxd", "ystar_B", "sel_Bxk", "t_Bxd", "beta_Bxd", "O_Bxdxd"):
            assert torch.equal(getattr(joint[key], f), getattr(alone[key], f)), (key, f)
    for a, b in zip(together, separately):
        for key in ("R", "A", "final_monitor_loss"):
            assert a[key] == b[key], (key, a[key], b[key])
