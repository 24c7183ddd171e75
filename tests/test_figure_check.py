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
