"""Figures a paper could print, and fits that are honest about themselves (issue 13, items 2-3).

The fixture is test_report's synthetic store (made-up, paper-shaped metrics: a TEST FIXTURE, not
results of the toolkit), written here over five depths (1..16) and two seeds, so that fits with
a floor have residual degrees of freedom and points have error bars. The smoke preset's own three
depths are restored when the module ends.
"""

import re

import numpy as np
import pytest
import torch

from depthscale import config, figures
from depthscale import registry as ex
from depthscale.claims import check
from depthscale.results import Results, Theory
from depthscale.store import Store

from test_report import fabricate

DEEP = (1, 2, 4, 8, 16)


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    root = tmp_path_factory.mktemp("deep")
    saved = (config.PRESET_DEPTHS["smoke"], ex.VARIANT_MAX_DEPTH["smoke"], ex.PRESET_SEEDS["smoke"],
             ex.FLOOR_SAMPLES["smoke"], ex.SOFTMAX_FLOOR_SAMPLES["smoke"], ex.FINITE_P_SAMPLES["smoke"],
             torch.get_num_threads())
    config.PRESET_DEPTHS["smoke"] = DEEP
    ex.VARIANT_MAX_DEPTH["smoke"] = DEEP[-1]
    ex.PRESET_SEEDS["smoke"] = (0, 1)
    # coarse theory is enough to test the plumbing
    ex.FLOOR_SAMPLES["smoke"] = ex.SOFTMAX_FLOOR_SAMPLES["smoke"] = ex.FINITE_P_SAMPLES["smoke"] = 500
    torch.set_num_threads(1)
    try:
        th = Theory("smoke", cache=root / "theory.json")
        store = Store(root / "store")
        fabricate(store, th, ["fig3", "fig6", "fig7", "fig9", "fig10", "fig11", "fig14", "table1"])
        yield root, th, Results.from_store(store, "smoke")
    finally:
        (config.PRESET_DEPTHS["smoke"], ex.VARIANT_MAX_DEPTH["smoke"], ex.PRESET_SEEDS["smoke"],
         ex.FLOOR_SAMPLES["smoke"], ex.SOFTMAX_FLOOR_SAMPLES["smoke"], ex.FINITE_P_SAMPLES["smoke"], n) = saved
        torch.set_num_threads(n)


def shallow(res: Results) -> Results:
    """The same runs cut to smoke's three depths: every fit with a floor is then degenerate."""
    return Results(res.df[res.df["L"] <= 4], "smoke", res.store)


B0 = [(2, (0.0, 0.0)), (2, (0.25, 0.0)), (2, (0.5, 0.0)), (2, (1.0, 0.0))]  # fig6's b = 0 spectra


def loss_axes(res: Results, groups=B0, fit: bool = True):
    """One loss panel (figures.loss_panel) of the nonlinear difficult runs: fig6 without the
    softmax-ensemble floor lines, whose theory is slow to compute."""
    from matplotlib.figure import Figure

    ax = Figure(layout="constrained").subplots()
    figures.loss_panel(ax, res, "nonlinear", "difficult", groups, fit=fit)
    return ax


def legend_texts(ax) -> list[str]:
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()] if leg else []


def legend_title(ax) -> str:
    leg = ax.get_legend()
    return leg.get_title().get_text() if leg else ""


def test_claims_on_well_posed_fits_pass(deep):
    """The claims that FAIL at smoke's three depths for a degenerate fit (test_report) pass on
    the same kind of data over five depths: the FAIL was the fit's, not the plumbing's."""
    _, th, res = deep
    for cid in ("5a", "5b", "7", "8a", "11"):
        c = check(cid, res, th)
        assert c["pass"], (cid, c["detail"])
        assert "degenerate" not in c["detail"]


def test_fitted_curves_carry_alpha_and_se_and_degenerate_ones_are_data_only(deep):
    _, th, res = deep
    ax = loss_axes(res)
    texts = legend_texts(ax)
    assert texts and all(re.search(r"\\alpha = \d+\.\d\d \\pm \d+\.\d\d", t) for t in texts), texts
    assert legend_title(ax).startswith("$(a, b)$")
    n_fit_lines = sum(len(line.get_xdata()) == 100 for line in ax.get_lines())
    assert n_fit_lines == len(texts)  # one drawn law per series
    ax = loss_axes(shallow(res))
    assert not any("alpha" in t for t in legend_texts(ax))
    assert sum(len(line.get_xdata()) == 100 for line in ax.get_lines()) == 0  # no law drawn
    assert "no law drawn: degenerate fits (3 points for 3 parameters" in legend_title(ax).replace("\n", " ")


def test_error_bars_across_seeds(deep):
    _, th, res = deep
    bars = [c for c in loss_axes(res).containers if type(c).__name__ == "ErrorbarContainer"]
    assert bars and all(c.has_yerr for c in bars)  # two seeds: an SE at every point


def test_labels_are_mathtext_and_legends_titled(deep):
    _, th, res = deep
    fig = figures.fig10(res, th)  # a loss panel with its fit, and the decomposition
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss $R_L$", "$C_L$, $A_L - C_L$"]
    assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == ["$C_L$", "$A_L - C_L$"]
    assert all(ax.get_xlabel() == "depth $L$" for ax in fig.axes)
    assert all(legend_title(ax) for ax in fig.axes)
    assert fig._suptitle is None  # no title or preset inside the figure
    fig.canvas.draw()  # every mathtext string parses


def test_fig3_theory_curves_match_their_data(deep):
    _, th, res = deep
    fig = figures.fig3(res, th)
    for ax in fig.axes[:2]:
        data = [c[0] for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
        assert len(data) == 4
        for line in data:
            col = line.get_color()
            styles = {ln.get_linestyle() for ln in ax.get_lines() if ln.get_color() == col and ln is not line}
            assert {"-", "--", ":"} <= styles, (col, styles)  # fit, free and constrained theory
    key = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("free" in t for t in key) and any("constrained" in t for t in key)


def test_log_ticks_are_readable():
    for lo, hi in ((2.05, 2.2), (0.4, 2.1), (1e-3, 5.0), (1e-9, 10.0), (0.3, 0.31)):
        t = figures.log_ticks(lo, hi)
        assert 2 <= len(t) <= 12 and all(lo <= x <= hi for x in t), (lo, hi, t)
    assert figures.log_ticks(0.4, 2.1) == [0.5, 1.0, 2.0]
    assert figures.tick_text(1e-5) == "10⁻⁵" and figures.tick_text(2e-5) == "2×10⁻⁵"
    assert figures.tick_text(0.25) == "0.25" and figures.tick_text(64.0) == "64"


def test_every_figure_renders_without_title_and_with_truetype_fonts(deep, tmp_path):
    import matplotlib

    _, th, res = deep
    before = matplotlib.rcParams["pdf.fonttype"]
    for fid in ("fig10", "fig8"):
        png, pdf = figures.write_figure(fid, res, th, tmp_path)
        data = pdf.read_bytes()
        assert b"/Type3" not in data  # matplotlib's default Type 3 fonts would be here
        assert b"/FontFile2" in data and b"CIDFontType2" in data  # TrueType (Type 42), embedded
        assert png.stat().st_size > 10_000
    assert matplotlib.rcParams["pdf.fonttype"] == before  # the style is local to write_figure


def test_tables_say_whether_a_fit_is_a_law(deep):
    from depthscale import tables

    _, th, res = deep
    t = tables.table1(res, th)
    assert (t["fit_nonlinear"] == "ok").all()
    t = tables.table1(shallow(res), th)
    assert t["fit_nonlinear"].str.startswith("degenerate: 3 points for 3 parameters").all()
    assert np.isfinite(t["L0_nonlinear"]).all()  # the numbers are still shown, flagged
