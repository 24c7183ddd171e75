"""Every table, by experiment id (SPEC §7, §8), rebuilt from stored results, never retraining.

A table is built by its experiment's record (`Experiment.table`, depthscale/experiments/*.py): a
pandas DataFrame with the paper's values beside ours (columns `paper_*`); a missing cell is NaN
('—' in Markdown), and every fitted number comes with the fit's status beside it (column `fit*`:
"ok", "degenerate: <reason>" or "no fit"; a degenerate fit's numbers are shown, never as a law).
This module is the lookup by id and the writer (CSV and Markdown).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from depthscale.analysis.results import Results, Theory
from depthscale.base.atomic import write_atomic, write_text_atomic
from depthscale.base.formatting import markdown_table
from depthscale.experiments.registry import REGISTRY

TABLES: dict[str, Callable] = {i: e.table for i, e in REGISTRY.items() if e.table is not None}


def write_table(table_id: str, res: Results, th: Theory, out_dir: str | Path):
    """Build table `table_id` and write <out_dir>/<table_id>.csv and .md. Returns (frame, paths)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = TABLES[table_id](res, th)
    paths = [out_dir / f"{table_id}.csv", out_dir / f"{table_id}.md"]
    csv = df.to_csv(index=False).encode()  # each file whole or not at all (a full disk)
    write_atomic(paths[0], lambda fh: fh.write(csv))
    e = REGISTRY[table_id]
    write_text_atomic(paths[1], f"### {table_id}: {e.title} [preset {res.preset}]\n\n" + markdown_table(df))
    return df, paths


__all__ = ["TABLES", "write_table"]
