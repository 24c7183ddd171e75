"""A referee's check of a built figure (issue 36): what is drawn lies inside the axes' limits.

`check(fig)` returns one line per problem found, e.g. "(b): 2 points outside the y range":

- every finite data point of a line, a scatter or an error bar inside the axes' x and y limits
  (a line drawn in axes coordinates, axhline/axvline, is checked on its data coordinate only);
  an image's extent inside the limits;
- no line whose y data are all NaN (a line that draws nothing, but takes a legend entry);
- every fitted curve labelled with its R²: a line whose legend entry names a fit or an α (and is
  not a degenerate fit, drawn as data only) carries "R^2" or "R²" in that entry.

Panels are named by their letter in reading order ((a), (b), ...), as the captions name them. The
check only reports: `report` prints its lines and records them in the report; it never fails a build.
"""

from __future__ import annotations

import re

import numpy as np

_FIT_WORDS = re.compile(r"\bfit|α|\\alpha", re.IGNORECASE)
_R2 = re.compile(r"R\^2|R²|R\^\{2\}")


def _outside(v: np.ndarray, lim: tuple[float, float], log: bool) -> int:
    """How many finite values of `v` lie outside `lim` (beyond a tolerance of 1e-6 of the range)."""
    v = v[np.isfinite(v)]
    lo, hi = min(lim), max(lim)
    if log:
        v = v[v > 0]  # a log axis cannot draw them at all; not an axis-range problem
        v, lo, hi = np.log10(v), np.log10(lo), np.log10(hi)
    tol = 1e-6 * (hi - lo) if hi > lo else 1e-12
    return int(np.sum((v < lo - tol) | (v > hi + tol)))


def _xy_checked(ax, transform) -> tuple[bool, bool]:
    """Which of x, y of an artist with `transform` are data coordinates of `ax`."""
    if transform == ax.transData:
        return True, True
    if transform == ax.get_yaxis_transform():  # axhline: x in axes coordinates
        return False, True
    if transform == ax.get_xaxis_transform():  # axvline
        return True, False
    return False, False


def _points(ax) -> list[tuple[np.ndarray, np.ndarray, bool, bool]]:
    """(x, y, check x, check y) of every line, scatter and error-bar segment of `ax`."""
    out = []
    for ln in ax.lines:
        if not ln.get_visible():
            continue
        x = np.asarray(ln.get_xdata(), dtype=float).ravel()
        y = np.asarray(ln.get_ydata(), dtype=float).ravel()
        out.append((x, y, *_xy_checked(ax, ln.get_transform())))
    for col in ax.collections:
        if not col.get_visible():
            continue
        cx, cy = _xy_checked(ax, col.get_offset_transform())
        offs = np.asarray(col.get_offsets(), dtype=float).reshape(-1, 2)
        if len(offs) and (cx or cy):
            out.append((offs[:, 0], offs[:, 1], cx, cy))
        segs = col.get_segments() if hasattr(col, "get_segments") else []
        if segs:  # error bars (LineCollection) in data coordinates
            tx, ty = _xy_checked(ax, col.get_transform())
            pts = np.concatenate([np.asarray(s, dtype=float).reshape(-1, 2) for s in segs])
            out.append((pts[:, 0], pts[:, 1], tx, ty))
    return out


def check_axes(ax) -> list[str]:
    """The problems of one axes (without its panel name)."""
    xlog, ylog = ax.get_xscale() == "log", ax.get_yscale() == "log"
    nx = ny = 0
    for x, y, cx, cy in _points(ax):
        ok = np.isfinite(x) & np.isfinite(y) if cx and cy else np.ones(len(x), bool)
        nx += _outside(x[ok], ax.get_xlim(), xlog) if cx else 0
        ny += _outside(y[ok], ax.get_ylim(), ylog) if cy else 0
    for im in ax.images:
        x0, x1, y0, y1 = im.get_extent()
        nx += _outside(np.array([x0, x1], float), ax.get_xlim(), xlog)
        ny += _outside(np.array([y0, y1], float), ax.get_ylim(), ylog)
    out = [f"{n} point{'s' if n != 1 else ''} outside the {a} range" for a, n in (("x", nx), ("y", ny)) if n]
    nan_lines = [ln for ln in ax.lines if ln.get_visible() and len(ln.get_ydata())
                 and not np.isfinite(np.asarray(ln.get_ydata(), dtype=float)).any()]
    if nan_lines:
        out.append(f"{len(nan_lines)} line{'s' if len(nan_lines) != 1 else ''} with only NaN y data")
    for ln in ax.lines:
        label = str(ln.get_label())
        if label.startswith("_") or "degenerate" in label or not _FIT_WORDS.search(label):
            continue
        if not _R2.search(label):
            out.append(f"fitted curve without R² in its label: {label!r}")
    return out


def _panel_axes(fig) -> list:
    """The figure's panels (colour bars left out), in reading order: top to bottom, left to right."""
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.axison
            and not hasattr(ax, "_colorbar") and ax.get_label() != "<colorbar>"]
    pos = [ax.get_position() for ax in axes]
    order = sorted(range(len(axes)), key=lambda i: (-round(pos[i].y1, 2), round(pos[i].x0, 2)))
    return [axes[i] for i in order]


def check(fig) -> list[str]:
    """Every problem of the figure `fig`, one line each, named by panel: ["(b): 2 points outside
    the y range", ...]; [] for a clean figure. A one-panel figure's lines carry no panel name."""
    axes = _panel_axes(fig)
    out = []
    for n, ax in enumerate(axes):
        m = re.match(r"\s*\(([a-z])\)", ax.get_title() or ax.get_title("left"))
        letter = m.group(1) if m else chr(ord("a") + n)  # the panel's own letter where its title has one
        name = f"({letter}): " if len(axes) > 1 else ""
        out += [name + p for p in check_axes(ax)]
    return out


__all__ = ["check", "check_axes"]
