"""The overview (SPEC §7): fig1, loss against depth for both models on both tasks (the runs of
figs 3-6)."""

from __future__ import annotations

from depthscale.analysis import plotting as pl
from depthscale.analysis.results import Results, Theory
from depthscale.config.paper import FIG3_SPECTRA, FIG4_SPECTRA, FIG56_SPECTRA
from depthscale.config.records import Experiment, register
from depthscale.experiments.inverse_depth import FIG6
from depthscale.experiments.linear_difficult import FIG5
from depthscale.experiments.linear_easy import FIG3
from depthscale.experiments.nonlinear_easy import FIG4


def fig1(res: Results, th: Theory):
    fig, ax = pl.new_figure(2, 2)
    pl.loss_panel(ax[0], res, "linear", "easy", pl.pairs(1, sorted(FIG3_SPECTRA)))
    pl.panel_title(ax[0], "a", "linear, easy")
    pl.loss_panel(ax[1], res, "nonlinear", "easy", pl.pairs(1, FIG4_SPECTRA))
    pl.panel_title(ax[1], "b", "nonlinear, easy")
    pl.loss_panel(ax[2], res, "linear", "difficult", pl.pairs(2, FIG56_SPECTRA))
    pl.panel_title(ax[2], "c", "linear, difficult ($k=2$)")
    pl.loss_panel(ax[3], res, "nonlinear", "difficult", pl.pairs(2, FIG56_SPECTRA))
    pl.panel_title(ax[3], "d", "nonlinear, difficult ($k=2$)")
    return fig


FIG1 = register(Experiment(
    "fig1", "Overview: loss vs depth for both models on both tasks",
    ("linear", "nonlinear"), "both", (2,), "those of figs 3-6",
    "2x2 overview, loss vs L, log-log", FIG3.groups + FIG4.groups + FIG5.groups + FIG6.groups,
    reuses=("fig3", "fig4", "fig5", "fig6"), figure=fig1))
