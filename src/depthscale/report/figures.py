"""Every figure, by experiment id (SPEC §7), rebuilt from stored results, never retraining.

A figure is drawn by its experiment's record (`Experiment.figure`, depthscale/experiments/*.py)
with the helpers of `depthscale.analysis.plotting` (style, axes, loss panel, caption); this module is the
lookup by id and the writer: `FIGURES[id](res, th)` and `write_figure(id, res, th, out_dir)`
(PNG at plotting.DPI and PDF with TrueType fonts). The plotting helpers are imported from
`depthscale.analysis.plotting`, which loads no experiment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from depthscale.analysis import plotting
from depthscale.analysis.plotting import logx, logy, render
from depthscale.analysis.results import Results, Theory
from depthscale.experiments.registry import REGISTRY

FIGURES: dict[str, Callable] = {i: e.figure for i, e in REGISTRY.items() if e.figure is not None}


def write_figure(fig_id: str, res: Results, th: Theory, out_dir: str | Path) -> list[Path]:
    """Build figure `fig_id` and write <out_dir>/<fig_id>.png and .pdf."""
    return plotting.write_figure(FIGURES[fig_id], fig_id, res, th, out_dir)


def build(fig_id: str, res: Results, th: Theory):
    """Figure `fig_id` as it is written: under STYLE, with room for its legends and its caption."""
    return render(FIGURES[fig_id], res, th)


__all__ = ["FIGURES", "write_figure", "build"]
