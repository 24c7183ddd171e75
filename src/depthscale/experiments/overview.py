"""The overview (SPEC §7): fig1, loss against depth for both models on both tasks (the runs of
figs 3-6)."""

from __future__ import annotations

from depthscale.analysis import plotting as pl
from depthscale.analysis.results import Results, Theory
from depthscale.config.paper import FIG3_SPECTRA, FIG4_SPECTRA, FIG56_SPECTRA
from depthscale.config.records import Experiment, preset_shape, register
from depthscale.experiments.inverse_depth import FIG6
from depthscale.experiments.linear_difficult import FIG5
from depthscale.experiments.linear_easy import FIG3
from depthscale.experiments.nonlinear_easy import FIG4


def fig1(res: Results, th: Theory):
    """The four panels each name their geometry: the linear and softmax models train at different
    d and P (the cpu preset: (c) d = 32, (d) d = 16), so their losses are not on one scale."""
    fig, ax = pl.new_figure(2, 2)
    cells = (("linear", "easy", pl.pairs(1, sorted(FIG3_SPECTRA)), "linear, easy"),
             ("nonlinear", "easy", pl.pairs(1, FIG4_SPECTRA), "nonlinear, easy"),
             ("linear", "difficult", pl.pairs(2, FIG56_SPECTRA), "linear, difficult ($k=2$)"),
             ("nonlinear", "difficult", pl.pairs(2, FIG56_SPECTRA), "nonlinear, difficult ($k=2$)"))
    for i, (model, task, groups, name) in enumerate(cells):
        pl.loss_panel(ax[i], res, model, task, groups)
        d, P = preset_shape(res.preset, model)
        pl.panel_title(ax[i], "abcd"[i], f"{name}, $d={d}$, $P={P}$")
    return fig


FIG1 = register(Experiment(
    "fig1", "Overview: loss vs depth for both models on both tasks",
    ("linear", "nonlinear"), "both", (2,), "those of figs 3-6",
    "2x2 overview, loss vs L, log-log", FIG3.groups + FIG4.groups + FIG5.groups + FIG6.groups,
    reuses=("fig3", "fig4", "fig5", "fig6"), figure=fig1))
