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

from depthscale import config, figures, plotting
from depthscale import registry as ex
from depthscale.registry import check
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


def test_claims_on_well_posed_fits_pass(deep, monkeypatch):
    """The claims that FAIL at smoke's three depths for a degenerate fit (test_report) pass on
    the same kind of data over five depths: the FAIL was the fit's, not the plumbing's. (The
    fabricated runs have no models: the shape claims' certificates are a fixture's, every depth
    certified, tests/claims_world.FakeCertificates.)"""
    from claims_world import FakeCertificates, use_certificates

    use_certificates(monkeypatch, FakeCertificates())
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
    # the remark goes to the caption below the axes, not into the legend or the plotting area
    assert "no law drawn: degenerate fits (3 points for 3 parameters" in " ".join(plotting.remarks(ax.figure))
    assert "degenerate" not in legend_title(ax) and not ax.texts


def test_error_bars_across_seeds(deep):
    _, th, res = deep
    bars = [c for c in loss_axes(res).containers if type(c).__name__ == "ErrorbarContainer"]
    assert bars and all(c.has_yerr for c in bars)  # two seeds: an SE at every point


def test_labels_are_mathtext_and_legends_titled(deep):
    _, th, res = deep
    fig = figures.FIGURES["fig10"](res, th)  # a loss panel with its fit, and the decomposition
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss $R_L$", "$C_L$, $A_L - C_L$"]
    assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == ["$C_L$", "$A_L - C_L$"]
    assert all(ax.get_xlabel() == "depth $L$" for ax in fig.axes)
    assert all(legend_title(ax) for ax in fig.axes)
    assert fig._suptitle is None  # no title or preset inside the figure
    fig.canvas.draw()  # every mathtext string parses


def test_fig3_theory_curves_match_their_data(deep):
    _, th, res = deep
    fig = figures.FIGURES["fig3"](res, th)
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
        assert png_dpi(png) == pytest.approx((plotting.DPI, plotting.DPI), abs=0.5) == (200, 200)
    assert matplotlib.rcParams["pdf.fonttype"] == before  # the style is local to write_figure


def test_tables_say_whether_a_fit_is_a_law(deep):
    from depthscale import tables

    _, th, res = deep
    t = tables.TABLES["table1"](res, th)
    assert (t["fit_nonlinear"] == "ok").all()
    t = tables.TABLES["table1"](shallow(res), th)
    assert t["fit_nonlinear"].str.startswith("degenerate: 3 points for 3 parameters").all()
    assert np.isfinite(t["L0_nonlinear"]).all()  # the numbers are still shown, flagged


# ---------------------------------------------------------------- the second day's figure faults

def png_dpi(path):
    from PIL import Image

    with Image.open(path) as im:
        return tuple(float(x) for x in im.info["dpi"])


def panel(fig, letter: str):
    """The axes whose title starts with '(letter)'."""
    return next(ax for ax in fig.axes if ax.get_title(loc="left").startswith(f"({letter})"))


def legends(fig):
    return [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)


@pytest.mark.parametrize("fid", ["fig3", "fig6", "fig7", "fig8", "fig10", "fig11", "fig14"])
def test_legend_text_is_at_least_8pt(deep, fid):
    _, th, res = deep
    fig = figures.build(fid, res, th)
    got = [t.get_fontsize() for leg in legends(fig) for t in leg.get_texts() + [leg.get_title()]]
    assert got and min(got) >= 8, (fid, sorted(set(got)))


def test_remarks_go_to_a_caption_below_the_axes(deep):
    """fig6 at three depths: every fit is degenerate. The panels' legends and plotting areas stay
    free of remarks; the caption below the axes names the panel and the reason."""
    _, th, res = deep
    fig = figures.build("fig6", shallow(res), th)
    for ax in fig.axes:
        leg = ax.get_legend()
        inside = [t.get_text() for t in ax.texts] + ([leg.get_title().get_text()] if leg else [])
        assert not any("degenerate" in t or "missing:" in t for t in inside), (ax.get_title(loc="left"), inside)
    caption = [t for t in fig.texts if "degenerate" in t.get_text()]
    assert len(caption) == 1 and "(a) no law drawn" in caption[0].get_text()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    top = caption[0].get_window_extent(renderer).y1
    assert all(top <= ax.get_tightbbox(renderer).y0 + 1 for ax in fig.axes)  # below every panel, legends included


def test_fig6_loss_panels_are_bounded_by_data_and_their_floor_lines(deep):
    _, th, res = deep
    fig = figures.build("fig6", res, th)
    for letter, sel in (("a", lambda s: s[0] == 0), ("b", lambda s: s[1] == 0)):
        ax = panel(fig, letter)
        values = []
        for a, b in (s for s in ex.FIG56_SPECTRA if sel(s)):
            s = res.series("nonlinear", "difficult", 2, a, b)
            values += list(s.get("R") - s.se["R"]) + list(s.get("R") + s.se["R"])
            values.append(th.softmax_floor(a, b, 2)["ensemble_floor"])
        lo, hi = ax.get_ylim()
        assert lo <= min(values) and hi >= max(values)  # every point and promised line in view
        assert lo >= min(values) / 1.5 and hi <= max(values) * 1.5, (letter, lo, hi, min(values), max(values))


@pytest.mark.parametrize("cut", [False, True])
def test_fig6_c_draws_a_dotted_L0_per_fitted_spectrum(deep, cut):
    """Its title promises 'dotted: fitted L0': one dotted line per b = 0 spectrum with a fit, well
    posed (five depths) or degenerate (three: the caption says so)."""
    _, th, res = deep
    fig = figures.build("fig6", shallow(res) if cut else res, th)
    ax = panel(fig, "c")
    assert "dotted" in ax.get_title(loc="left")
    dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert len(dotted) == len([s for s in ex.FIG56_SPECTRA if s[1] == 0]) == 4
    assert ("dotted L0 from a degenerate fit" in " ".join(plotting.remarks(fig))) is cut


def test_fig6_and_fig14_show_C_and_A_minus_C_on_one_scale_and_say_so(deep):
    _, th, res = deep
    for fid in ("fig6", "fig14"):
        fig = figures.build(fid, res, th)
        c, d = panel(fig, "c"), panel(fig, "d")
        assert c.get_yscale() == d.get_yscale() == "linear", fid
        assert "linear axis" in c.get_ylabel() and "linear axis" in d.get_ylabel()


def test_fig3_legends_list_spectra_in_order(deep):
    _, th, res = deep
    fig = figures.build("fig3", res, th)
    for letter, vary in (("a", 1), ("b", 0)):  # (a) a = 2, b varies; (b) b = 2, a varies
        labels = [t.get_text().split(":")[0] for t in panel(fig, letter).get_legend().get_texts()]
        values = [float(x.strip("()").split(",")[vary]) for x in labels]
        assert len(values) == 4 and values == sorted(values), labels
