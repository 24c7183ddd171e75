"""The pre-LN Transformer as a registered experiment (`transformer`, beyond the paper): trained by
training.train_pack through the store (metrics, curves, params, resume), its stored R, A, C equal to
depthscale.data.decompose on the stored parameters, the registry's expansion, the figure, the table and
the claims. Smoke-sized: a few dozen steps at d = 8, P = 16."""

import math

import pytest
import torch

from depthscale import load_model
from depthscale.analysis.results import Results, Theory
from depthscale.cli import main as cli
from depthscale.config.run import ConfigError, make_config
from depthscale.data.measurements import eval_contexts
from depthscale.experiments.registry import BEYOND_IDS, IDS, REGISTRY, all_configs
from depthscale.experiments.transformer import TRANSFORMER_DEPTHS, transformer_depths
from depthscale.kinds.transformer import TransformerPack, evaluate
from depthscale.runs.per_context import StoredRuns
from depthscale.runs.sweeps import make_packs, plan, run_sweep
from depthscale.store.store import Store
from depthscale.train import checkpoint
from depthscale.train.training import run_pack, train_pack

# a smoke run, shorter still: the pipeline, not the science
FAST = dict(max_steps=20, eval_every=10, checkpoint_every=10, eval_contexts=256, monitor_contexts=128)


def fast_configs():
    return [c.replace(**FAST) for c in REGISTRY["transformer"].configs("smoke")]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    torch.set_num_threads(1)
    st = Store(tmp_path_factory.mktemp("transformer") / "store")
    counts = run_sweep(plan(fast_configs(), st), st, progress=False)
    assert counts["ran"] == len(transformer_depths("smoke")) == 3  # smoke: depths 1, 2, 4
    return st


def test_registry_expands_the_transformer_experiment():
    e = REGISTRY["transformer"]
    assert e.part == "beyond" and "transformer" in BEYOND_IDS and "transformer" not in IDS
    assert not any(c.model == "transformer" for c in all_configs("all", "cpu"))
    cpu = e.configs("cpu")
    assert [c.L for c in cpu] == list(TRANSFORMER_DEPTHS)
    assert all(c.model == "transformer" and c.N == 32 and c.heads == 4 and c.mlp == 4 and c.d == 16 and c.P == 64
               and c.grad_clip == 1.0 and c.task == "difficult" and c.k == 2 for c in cpu)
    assert [c.L for c in e.configs("smoke")] == list(transformer_depths("smoke")) == [1, 2, 4]
    # one Transformer per pack (seeds are kept apart too)
    assert [len(p) for p in make_packs(cpu, None)] == [1] * len(cpu)
    assert [len(p) for p in make_packs(e.configs("cpu", seeds=2), None)] == [1] * 2 * len(cpu)


def test_bad_heads_is_a_one_line_config_error(tmp_path, capsys):
    with pytest.raises(ConfigError, match="heads must be a divisor of N = 32"):
        make_config("cpu", model="transformer", heads=5)
    with pytest.raises(ConfigError, match="loop"):
        make_config("cpu", model="transformer", L=4, loop=2)
    make_config("cpu", model="nonlinear", heads=5)  # heads means nothing to the other models
    code = cli.main(["train", "--model", "transformer", "--heads", "5", "--preset", "smoke",
                     "--store", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "heads" in err[0], err


def test_stored_metrics_satisfy_the_identity_and_equal_decompose(store):
    for c in fast_configs():
        met = store.load_metrics(c.run_id)
        for key in ("R", "R_se", "A", "var_ystar", "R_rel", "steps", "stopped_because", "identity_residual",
                    "R_model", "n_eval", "best_step", "train_seconds"):
            assert key in met, key
        assert met["steps"] == FAST["max_steps"] and met["stopped_because"] == "max_steps"
        R, A, C, L = met["R"], met["A"], met["C"], c.L
        assert R == pytest.approx(C + (A - C) / L if L > 1 else A, rel=1e-12)
        assert abs(met["identity_residual"]) <= 1e-5 * R
        # the stored parameters, decomposed afresh by depthscale.data.decompose, give the stored numbers
        pack = load_model(store.root, c.run_id)
        assert isinstance(pack, TransformerPack)
        dec = evaluate(pack.model, eval_contexts(c, c.eval_contexts, c.eval_seed))
        assert dec.R == pytest.approx(R, rel=1e-9) and dec.A == pytest.approx(A, rel=1e-9)
        if L > 1:
            assert dec.C == pytest.approx(C, rel=1e-9)
        curves = store.load_curves(c.run_id)
        assert curves["step"] == [10, 20] and all(math.isfinite(x) for x in curves["R"])


def test_a_transformer_run_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    cfg = make_config("smoke", model="transformer", L=2, **FAST)
    whole = train_pack([cfg])[0]
    st = Store(tmp_path / "s")
    real_finish = Store.finish

    def crash(self, *a, **k):
        raise RuntimeError("killed")

    monkeypatch.setattr(Store, "finish", crash)
    with pytest.raises(RuntimeError):
        run_pack([cfg], st)
    assert checkpoint.read(st, cfg.run_id)["step"] == 20  # every result follows a checkpoint at its step
    monkeypatch.setattr(Store, "finish", real_finish)
    run_pack([cfg], st)
    met = st.load_metrics(cfg.run_id)
    assert met["R"] == pytest.approx(whole["R"], rel=1e-5) and met["A"] == pytest.approx(whole["A"], rel=1e-5)
    assert st.load_curves(cfg.run_id)["step"] == [10, 20]


def test_figure_table_and_claims_build(store, tmp_path):
    from depthscale.experiments.registry import check_claims
    from depthscale.report.figures import write_figure
    from depthscale.report.tables import write_table

    res = Results.from_store(StoredRuns(store), "smoke", overrides=FAST)  # read as the recipe they were trained with
    th = Theory("smoke")
    paths = write_figure("transformer", res, th, tmp_path)
    assert all(p.stat().st_size > 0 for p in paths)
    df, _ = write_table("transformer", res, th, tmp_path)
    assert df["L"].tolist() == [1, 2, 4] and df["R"].notna().all()
    assert (df["A_minus_C"].dropna() == (df["A"] - df["C"]).dropna()).all()
    claims = {c["id"]: c for c in check_claims(res, th, ["transformer"])}
    # (the identity R = C + (A - C)/L is test_stored_metrics_satisfy_the_identity_and_equal_decompose, not a claim)
    assert set(claims) == {"B3b", "B3c", "B3d"}
    assert all("missing" not in c["detail"] and "error" not in c["detail"] for c in claims.values())
