"""What the study export scripts share (studies/budget_ladder.py, studies/convergence_study.py):
the command line, reading a store's finished runs, and writing a study's result files — its
module's own export, its figure as a PNG and its table with its notes as Markdown."""

from __future__ import annotations

import argparse
from pathlib import Path

from depthscale.analysis.results import Results, Theory
from depthscale.runs.per_context import StoredRuns
from depthscale.store.store import Store


def read_args(description: str, default_out: str) -> tuple[Results, Path]:
    """(the finished runs of --store at --preset, the --out folder) from the command line."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--store", required=True)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--out", default=default_out)
    args = ap.parse_args()
    return Results.from_store(StoredRuns(Store(args.store, readonly=True)), args.preset), Path(args.out)


def write_study(study, res: Results, out: Path, png_name: str, md_name: str) -> list[Path]:
    """study.export's files, then study.figure as `png_name` (100 dpi, the report's style) and
    study.table_frame with study.notes as `md_name`, all under `out`; the paths written."""
    from matplotlib import rc_context

    from depthscale.analysis.plotting import STYLE, render
    from depthscale.base.formatting import markdown_table

    paths = study.export(res, out)
    png = out / png_name
    with rc_context(STYLE):  # render: the figure with its caption (the remarks its panels made)
        render(study.figure, res, Theory(res.preset)).savefig(png, dpi=100, bbox_inches="tight")
    md = out / md_name
    md.write_text(markdown_table(study.table_frame(res, None)) + "\n\n" + "\n\n".join(study.notes(res)) + "\n")
    return list(paths) + [png, md]
