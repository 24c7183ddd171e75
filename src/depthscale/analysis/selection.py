"""Recipe selection by the monitor (SPEC §3.4, §4, §9): per depth and spectrum, the point of the
recipe grid (config.grid_names: start x rate x taper, fixed in advance) with the lowest seed-mean
*final monitor loss*, and the whole grid's table beside it.

The choice reads only the monitor: every run row is cut down to its seed and its final monitor loss
(`MONITOR_KEY`, the trainer's last evaluation on the fixed monitor contexts, disjoint from the
evaluation set) before anything is compared, so no evaluation loss, certificate or claim statistic
can enter it (tests/test_selection.py hands it rows whose evaluation numbers cannot be read).
The chosen recipes' runs are the *converged envelope* the nonlinear difficult-task claims read
(`envelope`); certificates and power are computed on those runs elsewhere.

Rules where SPEC is silent (docs/recipe.md, "The recipe grid"):
- a grid point is eligible at a cell only with every seed the cell's best-covered point has (a run
  that diverged is no result, so a point that lost a seed to divergence cannot win) and at least
  `min_seeds` of them, all with a finite final monitor loss;
- ties go to the earlier point of the grid's fixed order (faithful first).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import numpy as np

from depthscale.base.errors import InputError
from depthscale.config.run import grid_names, grid_variant, main_grid, make_config

MONITOR_KEY = "final_monitor_loss"  # the trainer's metric: the monitor loss at the run's last step
RULE = ("per depth and spectrum, the grid point with the lowest seed-mean final monitor loss "
        "(monitor contexts disjoint from the evaluation set), among points with every seed of the cell")

Cell = tuple  # (a, b, k, L)


def monitor_only(row: Mapping) -> tuple[int, float]:
    """(seed, final monitor loss) of one run row: the only numbers the selection may read."""
    v = row[MONITOR_KEY] if MONITOR_KEY in row else math.nan
    v = float(v) if v is not None else math.nan
    return int(row["seed"]), v


def _stats(points: list[tuple[int, float]]) -> dict:
    vals = np.array([v for _, v in points], dtype=np.float64)
    finite = bool(vals.size) and bool(np.all(np.isfinite(vals)))
    se = float(vals.std(ddof=1) / math.sqrt(vals.size)) if finite and vals.size > 1 else math.nan
    return {"seeds": sorted(s for s, _ in points), "n_seeds": int(vals.size),
            "monitor_mean": float(vals.mean()) if finite else math.nan, "monitor_se": se,
            "monitor_per_seed": {int(s): float(v) for s, v in sorted(points)}, "finite": finite}


def select(cells: Mapping[Cell, Mapping[str, Iterable[Mapping]]], min_seeds: int = 1,
           order: tuple[str, ...] | None = None) -> dict:
    """The choice at every cell: `cells` maps (a, b, k, L) to {grid point name: its run rows}.
    Returns {"rule", "monitor_key", "table": one row per (cell, point), "chosen": one row per cell}
    (JSON-friendly); a cell where no point is eligible is chosen as None with the reason."""
    if not isinstance(min_seeds, int) or min_seeds < 1:
        raise InputError(f"min_seeds must be an integer >= 1, got {min_seeds!r}")
    order = tuple(order or grid_names())
    table, chosen = [], []
    for cell in sorted(cells):
        a, b, k, L = cell
        stats = {name: _stats([monitor_only(r) for r in rows]) for name, rows in cells[cell].items()}
        unknown = sorted(set(stats) - set(order))
        if unknown:
            raise InputError(f"recipe {unknown[0]!r} is not a point of the grid")
        want = max((set(s["seeds"]) for s in stats.values()), key=len, default=set())
        for name in order:
            if name not in stats:
                continue
            s = stats[name]
            s["eligible"] = s["finite"] and set(s["seeds"]) >= want and s["n_seeds"] >= min_seeds
            table.append({"a": a, "b": b, "k": k, "L": L, "recipe": name, **s})
        ok = [n for n in order if n in stats and stats[n]["eligible"]]
        if not ok:
            chosen.append({"a": a, "b": b, "k": k, "L": L, "recipe": None,
                           "reason": f"no grid point with >= {min_seeds} seeds, all finite, of {len(want)} in the cell"})
            continue
        best = min(ok, key=lambda n: (stats[n]["monitor_mean"], order.index(n)))
        rest = sorted(stats[n]["monitor_mean"] for n in ok if n != best)
        chosen.append({"a": a, "b": b, "k": k, "L": L, "recipe": best, "monitor_mean": stats[best]["monitor_mean"],
                       "monitor_se": stats[best]["monitor_se"], "n_seeds": stats[best]["n_seeds"],
                       "margin_to_next": (rest[0] - stats[best]["monitor_mean"]) if rest else math.nan})
    for row in table:
        row["chosen"] = any(c["recipe"] == row["recipe"] and (c["a"], c["b"], c["k"], c["L"]) ==
                            (row["a"], row["b"], row["k"], row["L"]) for c in chosen)
    return {"rule": RULE, "monitor_key": MONITOR_KEY, "min_seeds": min_seeds, "table": table, "chosen": chosen}


def envelope(cells: Mapping[Cell, Mapping[str, list]], selection: dict) -> dict[Cell, list]:
    """The runs of each cell's chosen point (what the claims read), {cell: rows}; cells without a
    choice are left out (a claim reading them reports the missing depth)."""
    out = {}
    for c in selection["chosen"]:
        cell = (c["a"], c["b"], c["k"], c["L"])
        if c["recipe"] is not None and cell in cells:
            out[cell] = list(cells[cell][c["recipe"]])
    return out


def cells_from_results(res, spectra, depths, k: int = 2, recipes: Iterable[str] | None = None,
                       model: str = "nonlinear", task: str = "difficult", seeds: Iterable[int] | None = None,
                       **fields) -> dict:
    """{(a, b, k, L): {point: run rows}} from a Results (strict views: a point's runs only), each
    point's fields at the preset's width plus `fields` (e.g. a study's batch and budget). `seeds`:
    only these seeds' runs (a study's grid seeds: runs a later phase adds to the same config must
    not change the choice that called for them)."""
    keep = None if seeds is None else {int(s) for s in seeds}
    N = make_config(res.preset, model=model, task=task).N
    out: dict = {}
    for name in (recipes or grid_names()):
        view = res.view(**grid_variant(name, N), **fields)
        for a, b in spectra:
            for L in depths:
                rows = [r for r in view.runs(model, task, k, a, b, L) if keep is None or int(r["seed"]) in keep]
                if rows:
                    out.setdefault((float(a), float(b), int(k), int(L)), {})[name] = rows
    return out


def main_envelope(res, model: str = "nonlinear", task: str = "difficult"):
    """`res` read with the monitor-chosen recipe of config.main_grid at every cell of `model` and
    `task` that holds runs of the grid's points (the main job's fig6 and fig14 runs: the faithful
    and the constructive start), and the selection (`select`, with its whole table) — what the
    report's claims, figures and tables read (SPEC §4). The returned view carries the selection as
    `.selection` (None where no cell has runs of two points: the store holds one recipe, nothing
    was chosen). A cell without an eligible point reads no runs (the claims report it missing, never
    another point's runs in its place) and is named in the selection's `chosen` rows with its reason."""
    names = main_grid(res.preset)
    df = res.df
    if not len(df) or "model" not in df.columns:
        return res
    rows = df[(df["model"] == model) & (df["task"] == task)]
    cells: dict = {}
    for k in sorted({int(v) for v in rows["k"]}):
        sub = rows[rows["k"] == k]
        spectra = sorted({(float(a), float(b)) for a, b in zip(sub["a"], sub["b"])})
        depths = sorted({int(L) for L in sub["L"]})
        cells.update(cells_from_results(res, spectra, depths, k, recipes=names, model=model, task=task))
    cells = {c: pts for c, pts in cells.items() if len(pts) > 1}
    if not cells:
        return res
    sel = select(cells, order=names)
    N = make_config(res.preset, model=model, task=task).N
    out = res.with_recipes({(model, task, c["k"], c["a"], c["b"], c["L"]):
                            None if c["recipe"] is None else grid_variant(c["recipe"], N) for c in sel["chosen"]})
    sel["grid"] = list(names)
    out.selection = sel
    return out


__all__ = ["select", "envelope", "cells_from_results", "main_envelope", "monitor_only", "MONITOR_KEY", "RULE"]
