"""Training curves from a store, one line per run (`depthscale plot curves`).

Each panel draws one metric against the training step: the monitor loss R, the layers'
disagreement A − C (the part of the loss that depth averages away, R = C + (A − C)/L), the top-1
attention mass, or A, C, lr. Curves come from the store as far as they go (`Store.read_curves`:
a finished run's curves.json, a training run's rows so far), so a sweep can be watched while it
runs. Lines are labelled by the config fields that differ between the runs drawn (e.g. L=4), in
one legend beside the panels. Built like depthscale.report.figures' figures: matplotlib's object API on
the Agg canvas, under figures.STYLE (TrueType fonts in PDF); written at 200 dpi, legend text
at least 8 pt. Reads only.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from depthscale.base.errors import InputError
from depthscale.cli.compare import differing_fields, find_run, run_label
from depthscale.store import manifests

# metric -> (y label, how to get it from a curves dict)
METRICS = {
    "R": "monitor loss $R$",
    "gap": "disagreement $A - C$",
    "top1_mass": "top-1 attention mass",
    "A": "mean layer error $A$",
    "C": "cross-layer covariance $C$",
    "lr": "learning rate",
}
DEFAULT_METRICS = ("R", "gap", "top1_mass")
DPI = 200
LEGEND_PT = 8.0
MAX_LEGEND = 30  # more runs than this: no legend (a note says how many lines)


def parse_metrics(text: str | None) -> list[str]:
    """'R,gap,top1_mass' -> ['R', 'gap', 'top1_mass']; an unknown or repeated name is an InputError."""
    if text is None:
        return list(DEFAULT_METRICS)
    names = [t.strip() for t in str(text).split(",")]
    for n in names:
        if n not in METRICS:
            raise InputError(f"--metric {n!r} is not a curve: use a comma list of {', '.join(METRICS)}")
    if len(set(names)) != len(names):
        raise InputError(f"--metric {text!r} names a metric twice")
    return names


def _series(curves: dict, key: str) -> np.ndarray:
    vals = curves.get(key)
    if not isinstance(vals, list):
        return np.full(len(curves.get("step") or []), np.nan)
    return np.array([float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
                     for v in vals], dtype=float)


def metric_values(curves: dict, metric: str) -> np.ndarray:
    """One metric of a curves dict (keys step, R, A, C, top1_mass, lr) as floats, NaN where undefined."""
    if metric == "gap":
        return _series(curves, "A") - _series(curves, "C")
    return _series(curves, metric)


def select_runs(store, sweep: str | None = None, runs: list[str] | None = None) -> list[str]:
    """The runs to draw: `runs` (ids or unique prefixes), else the sweep's, else every run; with
    both, each of `runs` must be in the sweep."""
    in_sweep = manifests.load(store, sweep) if sweep is not None else None  # StoreError names an unknown sweep
    if runs:
        ids = list(dict.fromkeys(find_run(store, r) for r in runs))
        if in_sweep is not None:
            out = [r for r in ids if r not in set(in_sweep)]
            if out:
                raise InputError(f"--run {out[0]!r} is not in sweep {sweep!r}")
        return ids
    return sorted(set(in_sweep)) if in_sweep is not None else store.run_ids()


def load_curves(store, run_ids: list[str]) -> tuple[dict[str, dict], list[str]]:
    """(run id -> curves, the ids left out: no curves yet, or a broken run)."""
    from depthscale.base.errors import StoreError

    got, skipped = {}, []
    for rid in run_ids:
        try:
            cur = store.read_curves(rid)
        except StoreError:
            cur = None
        if isinstance(cur, dict) and isinstance(cur.get("step"), list) and cur["step"]:
            got[rid] = cur
        else:
            skipped.append(rid)
    return got, skipped


def curve_labels(configs: dict[str, dict]) -> tuple[dict[str, str], list[str]]:
    """Each run's legend label (the fields that differ between the runs; the run id where one run
    is drawn) and those fields."""
    fields = differing_fields(list(configs.values()))
    if not fields:
        return {rid: rid[:8] for rid in configs}, []
    return {rid: run_label(cfg, fields) for rid, cfg in configs.items()}, fields


def curves_figure(curves: dict[str, dict], labels: dict[str, str], metrics: list[str], title: str | None = None):
    """A Figure with one panel per metric and one line per run (in the order of `curves`)."""
    from depthscale.analysis.plotting import logy, new_figure

    fig, axes = new_figure(len(metrics), 1, width=3.8, height=3.0)
    n = len(curves)
    colors = _colors(n)
    for ax, metric in zip(axes, metrics):
        finite = []
        for (rid, cur), color in zip(curves.items(), colors):
            y = metric_values(cur, metric)
            x = np.array([float(s) for s in cur["step"]], dtype=float)
            ax.plot(x, y, color=color, lw=1.2, marker="o" if len(x) <= 12 else None, ms=2.5, label=labels[rid])
            finite.append(y[np.isfinite(y)])
        vals = np.concatenate(finite) if finite else np.array([])
        if vals.size == 0:  # e.g. top-1 mass on the difficult task, A - C at L = 1
            ax.set_xticks([])
            ax.set_yticks([])
            ax.text(0.5, 0.5, "not defined\nfor these runs", transform=ax.transAxes, ha="center", va="center",
                    fontsize=9, color="0.4")
        elif metric != "top1_mass" and np.all(vals > 0) and vals.max() / vals.min() > 3:
            logy(ax)  # plotting's log axis: enough labelled ticks to be read
        ax.set_xlabel("training step")
        ax.set_ylabel(METRICS[metric])
        ax.grid(True, lw=0.3, alpha=0.5)
    handles, texts = axes[0].get_legend_handles_labels()
    if 0 < n <= MAX_LEGEND:
        fig.legend(handles, texts, loc="outside right upper", fontsize=LEGEND_PT, title=title,
                   title_fontsize=LEGEND_PT + 0.5, ncol=1 if n <= 15 else 2, frameon=False)
    elif n > MAX_LEGEND:
        fig.text(0.99, 0.99, f"{n} runs (no legend beyond {MAX_LEGEND})", ha="right", va="top", fontsize=LEGEND_PT)
    return fig


def _colors(n: int):
    from matplotlib import colormaps

    if n <= 10:
        cmap = colormaps["tab10"]
        return [cmap(i) for i in range(n)]
    cmap = colormaps["viridis"]
    return [cmap(x) for x in np.linspace(0.0, 0.9, n)]


def save(fig, out: str | Path) -> Path:
    """Write `fig` to `out` (.png or .pdf by suffix) at DPI, under figures.STYLE, whole or not at
    all (atomic.write_atomic: a full disk leaves no 0-byte file)."""
    from matplotlib import rc_context

    from depthscale.base.atomic import write_atomic
    from depthscale.analysis.plotting import STYLE

    out = Path(out)
    fmt = "pdf" if out.suffix.lower() == ".pdf" else "png"
    with rc_context(STYLE):
        write_atomic(out, lambda fh: fig.savefig(fh, format=fmt, dpi=DPI))
    return out


def plot_curves(store, out: str | Path, sweep: str | None = None, runs: list[str] | None = None,
                metrics: list[str] | None = None) -> dict:
    """Draw the curves of the selected runs (select_runs) into `out`; returns what was drawn:
    out, metrics, runs (run id -> label), the label fields, and the runs skipped for want of curves."""
    metrics = list(metrics or DEFAULT_METRICS)
    ids = select_runs(store, sweep, runs)
    curves, skipped = load_curves(store, ids)
    if not curves:
        where = f"sweep {sweep!r}" if sweep is not None else f"store {store.root}"
        raise InputError(f"no training curves to plot in {where}" + (" for these runs" if runs else ""))
    configs = {rid: store.load_config(rid).to_dict() for rid in curves}
    labels, fields = curve_labels(configs)
    # by the differing fields' values (L=2 before L=16, which a sort of the labels would not give)
    order = sorted(curves, key=lambda r: (*(sort_key(configs[r].get(f)) for f in fields), r))
    title = ", ".join(fields) if fields else "run"
    from matplotlib import rc_context

    from depthscale.analysis.plotting import STYLE

    with rc_context(STYLE):
        fig = curves_figure({r: curves[r] for r in order}, labels, metrics, title=title)
    save(fig, out)
    return {"out": str(out), "metrics": metrics, "runs": {r: labels[r] for r in order}, "fields": fields,
            "skipped": skipped}


def sort_key(v):
    """Numbers in order, then anything else by its text (a sort key for config values)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return (0, float(v), "")
    return (1, 0.0, str(v))


__all__ = ["plot_curves", "curves_figure", "curve_labels", "load_curves", "select_runs", "metric_values",
           "parse_metrics", "save", "sort_key", "METRICS", "DEFAULT_METRICS", "DPI", "LEGEND_PT"]
