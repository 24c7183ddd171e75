"""The learned metrics of a stack's layers (issue 48 item 4; experiments.learned_metrics): a model at
the constructive start is a cosine stack, so each layer's metric sym(N W_xᵀ W_qᵀ W_k W_x) is τ_l I —
every eigenvalue its head's temperature, spread 0 — and a hand-made anisotropic metric gives the
eigenvalues put into it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from depthscale.config.run import make_config
from depthscale.experiments import learned_metrics as lm
from depthscale.kinds.constructive import constructive_stack
from depthscale.kinds.lookup import build_pack


def test_a_constructive_model_has_its_stacks_temperatures_as_eigenvalues():
    c = make_config("smoke", model="nonlinear", task="difficult", qk_init="constructive", qk_std=0.0, L=4,
                    monitor_contexts=768)
    pack = build_pack([c])
    params = {k: getattr(pack, k).detach() for k in ("Wq", "Wk", "Wx")}
    layers = lm.layer_metrics(params)
    taus = constructive_stack(c)["temperatures"]
    assert len(layers) == c.L == len(taus)
    for x, tau in zip(layers, taus):
        assert len(x["eigenvalues"]) == c.d
        np.testing.assert_allclose(x["eigenvalues"], tau, rtol=1e-4, atol=1e-4)
        assert x["mean"] == pytest.approx(tau, rel=1e-4) and x["std"] < 1e-3 * max(1.0, abs(tau))
    s = lm.summarise(layers, taus)
    np.testing.assert_allclose(s["layer_means"], sorted(taus), rtol=1e-4, atol=1e-4)
    assert s["stack_std"] == pytest.approx(float(np.std(taus)))
    assert s["layers_std"] == pytest.approx(s["stack_std"], rel=1e-3, abs=1e-3)
    assert s["stack_distinct"] == len(set(taus)) and s["within_spread_median"] < 1e-3


def test_an_anisotropic_metric_gives_its_eigenvalues():
    rng = np.random.default_rng(0)
    N, d = 6, 4
    Wx, _ = np.linalg.qr(rng.standard_normal((N, d)))  # orthonormal columns
    want = np.array([-1.0, 2.0, 3.0, 10.0])
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    S = U @ np.diag(want) @ U.T  # d x d metric in x-space
    A = Wx @ S @ Wx.T / N  # N x N with Wxᵀ A Wx N = S
    skew = rng.standard_normal((N, N))
    Wq, Wk = np.eye(N), A + Wx @ (skew - skew.T)[:d, :d] @ Wx.T  # a skew part leaves the symmetric one
    x = lm.layer_metrics({"Wq": Wq[None], "Wk": Wk[None], "Wx": Wx[None]})[0]
    np.testing.assert_allclose(x["eigenvalues"], want, atol=1e-10)
    assert x["mean"] == pytest.approx(want.mean()) and x["std"] == pytest.approx(want.std())
    assert x["spread"] == pytest.approx(want.std() / abs(want.mean()))
    zero = lm.layer_metrics({"Wq": np.zeros((1, N, N)), "Wk": np.eye(N)[None], "Wx": Wx})[0]
    assert zero["mean"] == 0 and math.isnan(zero["spread"])
    with pytest.raises(ValueError, match="no Wx"):
        lm.layer_metrics({"Wq": Wq, "Wk": Wk})
    with pytest.raises(ValueError, match="2 layers beside a stack of 3 heads"):
        lm.summarise([x, x], [1.0, 2.0, 3.0])


def test_the_figure_draws_every_layer():
    layers = [{"mean": m, "spread": 0.1 * i, "eigenvalues": [m], "std": 0.0} for i, m in enumerate((3.0, 5.0))]
    rows = [{"L": 2, "seed": s, "layers": layers, "stack_temperatures": [4.0, 4.0]} for s in (0, 1)]
    fig = lm.figure(rows, "t")
    ax, bx = fig.axes[:2]
    assert sum(len(line.get_xdata()) for line in ax.lines) == 8 and sum(len(line.get_xdata()) for line in bx.lines) == 4


def test_the_study_script_on_a_smoke_store(tmp_path):
    """studies/learned_metrics.py on fig6's smoke runs at (0,0): one row per layer of every run the
    envelope reads, each beside the cosine stack of its depth; a spectrum without runs is one line, exit 1."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd

    from depthscale.experiments.registry import REGISTRY
    from depthscale.store.store import Store
    from depthscale.train.training import run_pack

    root = Path(__file__).resolve().parents[1]
    cfgs = [c for c in REGISTRY["fig6"].configs("smoke", 1) if (c.a, c.b) == (0.0, 0.0) and c.model == "nonlinear"]
    assert cfgs
    from depthscale.kinds.lookup import pack_key

    packs: dict = {}
    for c in cfgs:  # (the grid's two recipes are two packs)
        packs.setdefault(pack_key(c), []).append(c)
    for pack in packs.values():
        run_pack(pack, Store(tmp_path / "s"), progress=False)
    cmd = [sys.executable, str(root / "studies" / "learned_metrics.py"), "--store", str(tmp_path / "s"),
           "--preset", "smoke", "--spectrum", "0,0", "--out", str(tmp_path / "x")]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr
    layers, summary = pd.read_csv(tmp_path / "x" / "layers.csv"), pd.read_csv(tmp_path / "x" / "summary.csv")
    assert len(summary) >= len({c.L for c in cfgs}) and set(summary["L"]) == {c.L for c in cfgs}
    assert len(layers) == int(summary["L"].sum())  # every layer of every run read
    runs = json.loads((tmp_path / "x" / "metrics.json").read_text())["runs"]
    assert all(len(r["stack_temperatures"]) == r["L"] == len(r["layers"]) for r in runs)
    assert (tmp_path / "x" / "metrics.png").stat().st_size > 10_000
    bad = subprocess.run(cmd[:-4] + ["--spectrum", "9,9", "--out", str(tmp_path / "y")], capture_output=True,
                         text=True, cwd=root)
    assert bad.returncode == 1 and "no finished nonlinear difficult runs at (9, 9)" in bad.stderr
