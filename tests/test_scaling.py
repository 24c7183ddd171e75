"""Time and width beside depth (the `scaling` experiment, issue 16 item 4; docs/beyond.md).

The store fixture is made up (a TEST FIXTURE, not results of the toolkit): smoke configs of the
registry's `scaling` groups with a known depth law, a small known width effect and training
curves R(t) = R_L (1 + 2 t^-1/2), so the fits have something to recover.
"""

import math

import numpy as np
import pytest

from depthscale.analysis import plotting
from depthscale.analysis.curves import fit_xy, time_curve, time_fit, time_window, width_series
from depthscale.analysis.results import Results, Theory
from depthscale.config import records
from depthscale.config.run import geometry
from depthscale.experiments import registry as ex
from depthscale.experiments import scaling
from depthscale.experiments.registry import check_claim
from depthscale.experiments.scaling import SCALING_TIME_DEPTHS
from depthscale.report import figures, tables
from depthscale.store.store import Store
from depthscale.runs.per_context import StoredRuns


# ---------------------------------------------------------------- registry

@pytest.mark.parametrize("preset", ["smoke", "cpu"])
def test_registry_expands_scaling(preset):
    e = ex.REGISTRY["scaling"]
    assert e.part == "beyond" and "scaling" in ex.BEYOND_IDS and "scaling" not in ex.IDS
    cfgs = e.configs(preset)
    d = geometry(preset, "nonlinear")["d"]
    N0 = geometry(preset, "nonlinear")["N"]
    assert N0 == d
    all_L = records.depth_set(preset, "all")
    width_L = tuple(L for L in scaling.SCALING_DEPTHS if L <= all_L[-1])
    want = {(N0, a, b, L) for a, b in scaling.SCALING_SPECTRA for L in all_L}
    want |= {(N, a, b, L) for N in scaling.SCALING_WIDTHS for a, b in scaling.SCALING_SPECTRA for L in width_L}
    got = {(c.N, c.a, c.b, c.L) for c in cfgs}
    assert got == want and len(cfgs) == len(want)
    assert all(c.model == "nonlinear" and c.task == "difficult" and c.k == 2 and c.d == d for c in cfgs)
    # N = d is fig6's own runs: same configs, same run ids
    fig6 = {c.run_id for c in ex.REGISTRY["fig6"].configs(preset)}
    assert {c.run_id for c in cfgs if c.N == N0} <= fig6
    assert not {c.run_id for c in cfgs if c.N != N0} & fig6
    # a width run differs from fig6's run at its cell in N only
    by_cell = {(c.a, c.b, c.L): c for c in ex.REGISTRY["fig6"].configs(preset, seeds=records.PRESET_SEEDS[preset])
               if c.qk_init == "independent"}  # fig6's faithful start (it also trains the constructive one)
    for c in cfgs:
        if c.N != N0:
            assert c.replace(N=N0) == by_cell[(c.a, c.b, c.L)]
    if preset == "cpu":
        assert width_L == (4, 16) and len(cfgs) == 14 + 16
    else:
        assert width_L == (4,)
    # `all` (the main job) trains none of them
    assert not {c.run_id for c in cfgs if c.N != N0} & {c.run_id for c in ex.all_configs("all", preset)}


# ---------------------------------------------------------------- fits

def _curve(beta: float, R_inf: float = 2.0, c: float = 3.0, noise: float = 0.0, seed: int = 0,
           warmup: int = 100, max_steps: int = 4000, every: int = 100) -> dict:
    t = np.arange(every, max_steps + 1, every, dtype=float)
    rng = np.random.default_rng(seed)
    y = (R_inf + c * t ** -beta) * np.exp(noise * rng.standard_normal(t.size))
    return {"t": t, "y": y, "warmup": warmup, "max_steps": max_steps, "schedule": "cosine"}


def test_time_window_follows_the_cosine_schedule():
    assert time_window(100, 4000, "after_warmup") == (100.0, 4000.0)
    lo, hi = time_window(100, 4000, "early")
    assert lo == 100.0 and hi == pytest.approx(2050.0)
    # at hi the cosine factor of training.lr_factor is exactly one half
    from depthscale.config.run import make_config
    from depthscale.train.schedule import lr_factor

    cfg = make_config("cpu", model="nonlinear", task="difficult")
    assert lr_factor(cfg, int(time_window(cfg.warmup, cfg.max_steps, "early")[1])) == pytest.approx(0.5, abs=1e-3)
    with pytest.raises(ValueError):
        time_window(100, 4000, "late")


def test_time_fit_recovers_a_known_exponent():
    # exact data: the exponent to optimiser precision; the warmup point is not used
    cur = _curve(0.5)
    cur["y"][0] = 50.0  # a warmup transient: outside the window, it must not move the fit
    f = time_fit(cur)
    assert f.ok and f.n == 39
    assert f.alpha == pytest.approx(0.5, rel=1e-6) and f.L0 == pytest.approx(2.0, rel=1e-6)
    # noisy data (0.3% log-normal): within 3 SE of the truth for most seeds, never beyond 5 SE
    z = []
    for seed in range(20):
        f = time_fit(_curve(0.5, noise=0.003, seed=seed))
        assert f is not None and f.ok
        z.append((f.alpha - 0.5) / f.alpha_se)
    z = np.abs(np.array(z))
    assert np.all(z < 5) and np.mean(z < 3) >= 0.85
    # the early window has fewer points and a wider SE, and still covers the truth
    fe = time_fit(_curve(0.5, noise=0.003, seed=1), "early")
    assert fe.ok and fe.n == 19 and abs(fe.alpha - 0.5) < 4 * fe.alpha_se
    assert time_fit(None) is None


def test_fit_xy_is_the_depth_fit_against_any_x():
    N = np.array([16, 24, 32, 48, 64], float)
    f = fit_xy(N, 1.0 + 8.0 / N)
    assert f.ok and f.alpha == pytest.approx(1.0, rel=1e-6) and f.L0 == pytest.approx(1.0, rel=1e-6)
    flat = fit_xy(N, np.full(5, 2.0))  # no effect of width: not a law
    assert flat is not None and not flat.ok
    assert fit_xy([16, 32], [2.0, 1.9]) is None  # too few points for a floor
    assert fit_xy([16, 32, np.nan], [2.0, 1.9, 1.8]) is None


def test_fit_xy_fits_each_set_of_points_once_and_is_the_direct_fit():
    from depthscale.theory.fits import fit_power_law

    N, y = np.array([16, 24, 32, 48, 64], float), 1.0 + 8.0 / np.array([16, 24, 32, 48, 64.0]) ** 0.7
    f = fit_xy(N, y)
    assert f == fit_power_law(N, y)  # the cached fit is the fit itself, field for field
    assert fit_xy(list(N), y.tolist()) is f  # the same points (any container): the same object, not refitted
    assert fit_xy(np.append(N, np.nan), np.append(y, 5.0)) is f  # a dropped point does not change the key
    g = fit_xy(N, y + 1e-12)  # points that differ in the last digits are another fit
    assert g is not f and g == fit_power_law(N, y + 1e-12)
    assert fit_xy(N, y, False) == fit_power_law(N, y, floor=False)


# ---------------------------------------------------------------- figure, table, claims

def _fabricate(store: Store) -> None:
    """TEST FIXTURE: made-up metrics and curves for the smoke configs of `scaling`."""
    steps = list(range(5, 61, 5))
    N0 = geometry("smoke", "nonlinear")["N"]
    for c in ex.REGISTRY["scaling"].configs("smoke"):
        R = (1.0 if c.a == 0 else 0.2) * (1 + 0.5 / c.L) * (1 + 0.01 * (c.N != N0))
        met = {"L": c.L, "R": R, "R_se": 0.01 * R, "A": 1.1 * R, "C": R if c.L > 1 else math.nan,
               "var_ystar": 1.0, "n_eval": c.eval_contexts, "steps": c.max_steps,
               "stopped_because": "max_steps", "train_seconds": 1.0}
        # a power law in t with a small deterministic wiggle (residuals, so the fits have SEs)
        curves = {"step": steps, "R": [R * (1 + 2 * t ** -0.5) * (1 + 0.002 * math.sin(1.7 * t)) for t in steps],
                  "A": [1.1 * R] * len(steps), "C": [R] * len(steps), "lr": [0.0] * len(steps)}
        store.write_config(c)
        store.finish(c.run_id, met, curves)


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    root = tmp_path_factory.mktemp("scaling")
    store = Store(root / "store")
    _fabricate(store)
    return root, Results.from_store(StoredRuns(store), "smoke"), Theory("smoke", cache=root / "theory.json")


def test_width_series_reads_the_width_groups(fake):
    _, res, _ = fake
    widths = (8,) + scaling.SCALING_WIDTHS
    w = width_series(res, "nonlinear", "difficult", 2, 0.0, 0.0, 4, widths)
    assert w["N"].tolist() == list(widths) and not w["missing"]
    assert w["R"][0] == pytest.approx(1.125) and np.allclose(w["R"][1:], 1.125 * 1.01)
    assert np.allclose(w["R_se"], 0.01 * w["R"])  # one seed: the evaluation SE
    # a width without runs is missing, never the N = d runs read again
    w2 = width_series(res, "nonlinear", "difficult", 2, 0.0, 0.0, 4, (8, 40))
    assert w2["N"].tolist() == [8] and w2["missing"] == (40,)


def test_scaling_figure_and_table_build(fake):
    root, res, th = fake
    paths = figures.write_figure("scaling", res, th, root / "out")
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)
    from matplotlib import rc_context

    with rc_context(plotting.STYLE):
        fig = figures.FIGURES["scaling"](res, th)
    axes = fig.axes
    assert len(axes) == 6
    assert [ax.get_title(loc="left")[:3] for ax in axes] == [f"({x})" for x in "abcdef"]
    # (c): the time fits are laws here (the fixture's curves are power laws)
    texts = [t.get_text() for t in axes[2].get_legend().get_texts()]
    drawn = [L for L in SCALING_TIME_DEPTHS if L in records.depth_set("smoke", "all")]
    assert sum("beta_t" in t for t in texts) == len(drawn) == 2
    # (b): every width at L = 4, no law (the fixture's width effect is a step, not a power law)
    xs = sorted({round(float(x)) for line in axes[1].get_lines() for x in line.get_xdata()
                 if line.get_marker() not in (None, "None", "")})
    assert xs == [8, 24, 32, 48, 64] or set(xs) >= {8, 24, 32, 48, 64}
    df = tables.TABLES["scaling"](res, th)
    per_spectrum = 1 + 1 + 2 * len(records.depth_set("smoke", "all"))  # depth, width at L = 4, time x 2 windows
    assert len(df) == 2 * per_spectrum
    assert set(df["axis"]) == {"depth L", "width N", "step t"}
    t = df[(df["axis"] == "step t") & (df["a"] == 0.0) & df["window"].str.startswith("after_warmup")]
    assert (t["fit"] == "ok").all() and np.allclose(t["exponent"], 0.5, atol=0.1)
    paths = tables.write_table("scaling", res, th, root / "out")[1]
    assert "scaling" in paths[1].read_text().splitlines()[0]


def test_scaling_claims(fake):
    _, res, th = fake
    a = check_claim("B4a", res, th)
    # a 1% step against a 1% SE per point: z = 0.01 / sqrt(0.0101^2 + 0.01^2) < 2
    assert a["pass"] and a["uses"] == ["scaling"]
    b = check_claim("B4b", res, th)
    assert b["pass"], b["detail"]
    c = check_claim("B4c", res, th)  # one power law in t: the same beta in both windows
    assert c["pass"], c["detail"]
    empty = Results(res.df.iloc[0:0], "smoke", res.reader)
    for cid in ("B4a", "B4b", "B4c"):
        out = check_claim(cid, empty, th)
        assert not out["pass"] and out["detail"].startswith("missing")


def test_log_tick_labels_write_their_ticks_exactly():
    """The scaling figure's depth panel spans 2.07-2.19: a tick at 2.15 was labelled "2.2"."""
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    ax.plot([1, 64], [2.072, 2.188])
    ax.set_ylim(2.072, 2.188)
    plotting.logy(ax)
    ticks = ax.get_yticks()
    labels = [ax.yaxis.get_major_formatter()(t, i) for i, t in enumerate(ticks)]
    assert len(ticks) >= 2
    for t, s in zip(ticks, labels):
        assert float(s) == pytest.approx(t, rel=1e-9), (t, s)
