"""The report's figure check (issue 36): data inside the axes, no all-NaN line, fits labelled with R²."""

import numpy as np

from depthscale.analysis.plotting import new_figure, panel_title
from depthscale.report.figcheck import check


def _clean():
    fig, axes = new_figure(2)
    for ax, letter in zip(axes, "ab"):
        ax.plot([1, 2, 4], [1.0, 0.5, 0.25], "o", label="data")
        ax.plot([1, 4], [1.0, 0.25], "--", label=r"fit: $\alpha = 1.00 \pm 0.01$, $R^2 = 0.999$")
        ax.axhline(0.5, ls=":", label="floor")
        panel_title(ax, letter, "loss")
    return fig, axes


def test_a_clean_figure_passes():
    fig, axes = _clean()
    axes[1].set_yscale("log")
    fig.canvas.draw()
    assert check(fig) == []


def test_a_point_outside_its_ylim_is_flagged():
    fig, axes = _clean()
    axes[1].set_ylim(0.3, 1.2)  # the 0.25 point and the fit's end fall below it
    fig.canvas.draw()
    assert check(fig) == ["(b): 2 points outside the y range"]


def test_a_point_outside_its_xlim_and_the_panel_letter_from_the_title():
    fig, axes = _clean()
    panel_title(axes[0], "c", "renamed")
    axes[0].set_xlim(1.5, 5)
    fig.canvas.draw()
    assert check(fig) == ["(c): 2 points outside the x range"]


def test_nan_line_and_unlabelled_fit_are_flagged_and_nan_points_are_not():
    fig, axes = _clean()
    axes[0].plot([1, 2], [np.nan, np.nan], label="empty")
    axes[1].plot([1, 2, 3], [0.9, np.nan, 1e9], label=r"fit $\alpha = 0.5$")  # 1e9 above the ylim set below
    axes[1].set_ylim(0, 2)
    fig.canvas.draw()
    got = check(fig)
    assert got == ["(a): 1 line with only NaN y data", "(b): 1 point outside the y range",
                   "(b): fitted curve without R² in its label: 'fit $\\\\alpha = 0.5$'"]


def test_error_bars_outside_are_counted():
    fig, axes = new_figure(1)
    axes[0].errorbar([1, 2], [1.0, 1.0], yerr=[0.1, 5.0], capsize=2)
    axes[0].set_ylim(0, 2)
    fig.canvas.draw()
    out = check(fig)
    assert len(out) == 1 and out[0].endswith("outside the y range") and "(a)" not in out[0]


def test_a_figure_legend_stays_clear_of_the_caption_in_the_saved_file():
    """fig3's line-style key (a fig.legend) printed over the caption: a tight-bbox save widens the
    figure's box, the legend's anchor; render pins it where the layout put it."""
    import io

    from matplotlib.lines import Line2D

    from depthscale.analysis.plotting import note, render

    def draw(res, th):
        fig, axes = new_figure(3)
        for ax in axes:
            ax.plot([1, 2], [1, 2])
        fig.legend(handles=[Line2D([], [], color="k", label=f"style {i}") for i in range(4)],
                   loc="outside lower center", ncol=4, title="line style")
        note(fig, "a remark long enough to reach the middle of the figure, where the key is drawn " * 2)
        return fig

    fig = render(draw, None, None)
    seen = {}

    def on_draw(event):
        r = event.renderer
        seen["legend"] = fig.legends[0].get_window_extent(r)
        seen["caption"] = fig._depthscale_caption.get_window_extent(r)

    fig.canvas.mpl_connect("draw_event", on_draw)
    fig.savefig(io.BytesIO(), format="png", dpi=72, bbox_inches="tight")
    assert seen["legend"].y0 > seen["caption"].y1  # the key above the caption, not on it
