"""The geometry of the top-k target (SPEC §7): fig8, theory only (one sample at (1, 0))."""

from __future__ import annotations

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.results import Results, Theory
from depthscale.base.formatting import label
from depthscale.config.paper import FIG8_SPECTRUM
from depthscale.config.records import Experiment, TheoryNeed, register


def fig8(res: Results, th: Theory):
    fig, ax = pl.new_figure(2, width=4.2, height=4.0)
    g = th.fig8()
    q, xs, t, tb = (np.asarray(g[k], float) for k in ("q_2d", "x_selected_2d", "t_2d", "t_bar_2d"))

    def arrow(p0, p1, color, ls, name, tip, lw=1.4, mid=False, offset=(4, 4)):
        """An arrow told apart by its line style and the name at its tip, not by colour alone
        (red against green is lost to colour-blind readers); Okabe-Ito colours."""
        ax[0].annotate("", xy=p1, xytext=p0, arrowprops=dict(arrowstyle="->", color=color, lw=lw, ls=ls))
        at = (np.asarray(p0) + np.asarray(p1)) / 2 if mid else p1  # the residual's name at its middle, off t's
        ax[0].annotate(tip, xy=at, xytext=offset, textcoords="offset points", color=color, fontsize=9, va="center")
        ax[0].plot([], [], color=color, ls=ls, label=name)

    qn = q / max(np.linalg.norm(q), 1e-12) * max(np.linalg.norm(t), 1e-12) * 1.5
    arrow((0, 0), qn, "k", "-", "query $q$ (scaled)", "$q$")
    ax[0].scatter(xs[:, 0], xs[:, 1], color="#56B4E9", marker="s", s=25, label="selected $x_i$", zorder=3)
    arrow((0, 0), t, "#D55E00", "-", "target $t$", "$t$")
    arrow((0, 0), tb, "#0072B2", "--", r"$\bar t = c\,\Sigma q$ (dashed)", r"$\bar t$", offset=(4, -8))
    arrow(tb, t, "#009E73", ":", r"residual $t - \bar t$ (dotted)", r"$t - \bar t$", lw=1.2, mid=True, offset=(6, 2))
    pts = np.vstack([xs, t, tb, qn, [0, 0]])
    lim = 1.15 * np.abs(pts).max()
    ax[0].set_xlim(-lim, lim)
    ax[0].set_ylim(-lim, lim)
    ax[0].set_aspect("equal")
    ax[0].set_xlabel("along $q$")
    ax[0].set_ylabel("along $t$, orthogonal to $q$")
    pl.finish_legend(ax[0])
    pl.panel_title(ax[0], "a", f"one top-2 context at {label(*FIG8_SPECTRUM)}, 2-D projection")
    t_full, tb_full = np.asarray(g["t"], float), np.asarray(g["t_bar"], float)
    ax[1].scatter(tb_full, t_full, s=12, color="0.25")
    lo, hi = min(tb_full.min(), t_full.min()), max(tb_full.max(), t_full.max())
    ax[1].plot([lo, hi], [lo, hi], color="0.5", lw=0.8, ls="--")
    ax[1].set_xlabel(r"$\bar t_k$ (predictable part)")
    ax[1].set_ylabel("$t_k$")
    pl.panel_title(ax[1], "b", r"coordinates in the eigenbasis of $\Sigma$")
    return fig


FIG8 = register(Experiment(
    "fig8", "Geometry of the top-k target (theory)", (), "theory", (2,), "(1,0), one sample",
    "query q, selected x's, target t, predictable part t_bar = c Sigma q, residual",
    theory=(TheoryNeed("fig8", *FIG8_SPECTRUM, 2),), figure=fig8))
