"""What every figure is drawn with: the style, axes helpers, the loss panel and the caption.

Input: `results.Results` (the store's finished runs of one preset) and `results.Theory`. Points
are means over seeds, error bars the SE over seeds (none with one seed); fit lines come from
analysis.py and are drawn only for a well-posed fit (fits.FitResult.status "ok"), with α ± SE in
the legend entry of their series; a degenerate fit is drawn as data only.

Rules every figure follows (issue "The researcher's second day"):
- written at `DPI` (200) as PNG and as PDF with TrueType (Type 42) fonts (`STYLE`); matplotlib's
  object API with the Agg canvas (no pyplot, no global backend switch);
- legend text and titles at least 8 pt (`LEGEND_PT`); a panel's legend sits below its axes
  (`finish_legend`), never on the data, and the figure grows to make room for it;
- remarks (a degenerate fit, "missing: ...") are `note`d and written as a caption below the axes
  (`render`), never inside the plotting area; a panel with no data at all says "missing runs" in
  its middle;
- a loss panel's y range is bounded by its data (with error bars) and the reference lines its
  title promises (`bound_y`), not by fit extrapolations or a legend;
- series of spectra are listed in spectrum order (callers pass them sorted).
Labels are mathtext ($R_L$, $C_L$, ...); log axes get enough labelled ticks to be read. The figure
carries no title or provenance: the report's heading and provenance say what and which preset.
"""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from depthscale.analysis.curves import fit_series
from depthscale.analysis.results import Results, Theory
from depthscale.base.atomic import write_atomic
from depthscale.base.formatting import label
from depthscale.config.records import PRESET_KS, depth_set

DPI = 200
LEGEND_PT = 8.0
# rcParams every figure is built and saved under: TrueType (Type 42) fonts in PDF/PS, not Type 3
STYLE = {"pdf.fonttype": 42, "ps.fonttype": 42, "mathtext.fontset": "dejavusans",
         "legend.title_fontsize": LEGEND_PT, "legend.fontsize": LEGEND_PT}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")  # with colour: series apart in greyscale too
# a legend below its axes starts this far below the axes' bottom edge (in units of its font
# size): past the tick labels and the x label
BELOW_PAD = 4.8


def new_figure(ncols: int, nrows: int = 1, width: float = 4.0, height: float = 3.3):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def colors(n: int):
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(x) for x in (np.linspace(0.0, 0.85, n) if n > 1 else [0.0])]


def missing(ax, text: str = "missing runs", blank: bool = False) -> None:
    """An empty panel says why in its middle (there is no data for the text to cover)."""
    if blank:
        ax.set_xticks([])
        ax.set_yticks([])
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="0.4")


def note(target, text: str) -> None:
    """A remark about panel `target` (an Axes) or about the whole figure (a Figure), written in
    the caption below the axes by `render`."""
    notes = getattr(target, "_depthscale_notes", None)
    if notes is None:
        notes = []
        target._depthscale_notes = notes
    if text not in notes:
        notes.append(text)


def remarks(fig) -> list[str]:
    """The figure's remarks as caption lines, each panel's prefixed with its letter '(a)'."""
    out = list(getattr(fig, "_depthscale_notes", []))
    for ax in fig.axes:
        m = re.match(r"\(([a-z])\)", ax.get_title(loc="left"))
        out += [f"({m.group(1)}) {t}" if m else t for t in getattr(ax, "_depthscale_notes", [])]
    return out


def add_caption(fig) -> str:
    """Write the remarks as text below the axes (the saved file's tight bounding box takes it in).
    Idempotent; returns the caption ('' without remarks)."""
    lines = remarks(fig)
    if not lines or getattr(fig, "_depthscale_caption", None) is not None:
        return "\n".join(lines)
    width = max(40, int(fig.get_figwidth() * 72 / (LEGEND_PT * 0.55)))
    text = "\n".join(textwrap.fill(x, width, subsequent_indent="    ") for x in lines)
    fig._depthscale_caption = fig.text(0.01, 0.0, text, ha="left", va="top", fontsize=LEGEND_PT, color="0.25")
    return text


def panel_title(ax, letter: str, text: str) -> None:
    ax.set_title(f"({letter}) {text}", fontsize=9, loc="left")


def prefix_title(ax, prefix: str) -> None:
    """Put `prefix` after the '(letter) ' of a panel_title (a figure with one row of panels per case)."""
    letter, _, text = ax.get_title(loc="left").partition(") ")
    ax.set_title(f"{letter}) {prefix}{text}", fontsize=9, loc="left")


def errorbar(ax, x, y, se, **kw):
    se = np.where(np.isfinite(se), se, 0.0) if se is not None else None
    return ax.errorbar(x, y, yerr=se if se is not None and np.any(se > 0) else None,
                       capsize=2, ms=4, lw=1.1, **kw)


def logx(ax) -> None:
    """Depth axis: log base 2, plain integer labels (no mathtext in ticks: it dominates render time)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([2.0 ** i for i in range(0, 13)]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("depth $L$")


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def log_ticks(lo: float, hi: float) -> list[float]:
    """Major ticks for a log axis spanning [lo, hi]: the sparsest of 1, (1, 3), (1, 2, 5),
    (1, 1.5, 2, 3, 5, 7) and 1..9 per decade that puts at least 3 ticks inside the range and
    leaves neither end of it more than END_GAP of its (log) length without a tick (fig4's
    0.0014-0.0042 had none above 0.003); failing that, evenly spaced round values; over many
    decades every n-th power of ten."""
    if not (lo > 0 and hi > lo and math.isfinite(lo) and math.isfinite(hi)):
        return []
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if e1 - e0 > 7:
        step = math.ceil((e1 - e0) / 6)
        return [10.0 ** e for e in range(e0, e1 + 1) if e % step == 0 and lo <= 10.0 ** e <= hi]
    from matplotlib.ticker import MaxNLocator

    span = math.log(hi / lo)

    def end_gap(ticks):
        return max(math.log(ticks[0] / lo), math.log(hi / ticks[-1])) / span

    candidates = [[m * 10.0 ** e for e in range(e0, e1 + 1) for m in subs if lo <= m * 10.0 ** e <= hi]
                  for subs in ((1,), (1, 3), (1, 2, 5), (1, 1.5, 2, 3, 5, 7), tuple(range(1, 10)))]
    candidates += [[float(t) for t in MaxNLocator(nbins=n, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
                    if lo <= t <= hi and t > 0] for n in (4, 6)]
    candidates = [t for t in candidates if len(t) >= 3 or (len(t) >= 2 and t is candidates[-1])]
    for ticks in candidates:
        if end_gap(ticks) <= END_GAP:
            return ticks
    return min(candidates, key=end_gap) if candidates else []


END_GAP = 0.25  # the most of a log axis's length that may lie beyond its outermost tick


def tick_text(v: float, digits: int = 3) -> str:
    """A tick label: plain below 10^4 and above 10^-3 (to `digits` significant digits), else
    m×10ⁿ with a Unicode superscript (no mathtext: ticks are many)."""
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    if 1e-3 <= abs(v) < 1e4:
        return f"{v:.{digits}g}"
    e = math.floor(math.log10(abs(v)) + 1e-9)
    m = float(f"{v / 10.0 ** e:.{digits}g}")
    power = "10" + str(e).translate(_SUPERSCRIPT)
    return power if m == 1 else f"{m:g}×{power}"


def logy(ax) -> None:
    """Log y axis with readable labels (call after plotting: the ticks follow the range)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ticks = log_ticks(lo, hi)
    if len(ticks) < 2:
        return  # matplotlib's own log ticks
    # the fewest digits that write every tick exactly (2.15 at 2 digits would read "2.2")
    digits = next((n for n in range(2, 7) if len({tick_text(t, n) for t in ticks}) == len(ticks)
                   and all(math.isclose(float(f"{t:.{n}g}"), t, rel_tol=1e-9) for t in ticks)), 6)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v, digits)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def log_axis_ticks(axis, values=None) -> None:
    """Plain labelled ticks on a log axis (100, 300, 1000, ...): at `values` (e.g. the widths
    trained) or at log_ticks over the view."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    lo, hi = axis.get_view_interval()
    ticks = list(values) if values is not None else log_ticks(lo, hi)
    if len(ticks) >= 2:
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}" if 1e-3 <= abs(v) < 1e6 else tick_text(v)))
        axis.set_minor_locator(NullLocator())
        axis.set_minor_formatter(NullFormatter())


def loglog(ax, xlabel: str = "depth $L$", ylabel: str = "loss $R_L$") -> None:
    logx(ax)
    logy(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def bound_y(ax, values, log: bool) -> None:
    """The y range of `ax`: the finite `values` (data with their error bars, promised reference
    lines) and a small margin; nothing else (fit extrapolations, legends) widens it."""
    v = np.asarray([x for x in np.ravel(np.asarray(values, float)) if math.isfinite(x) and (x > 0 or not log)])
    if not v.size:
        return
    lo, hi = float(v.min()), float(v.max())
    if log:
        pad = max((hi / lo) ** 0.06, 1.05)
        ax.set_ylim(lo / pad, hi * pad)
        logy(ax)
    else:
        pad = 0.06 * (hi - lo) if hi > lo else 0.06 * max(abs(hi), 1e-12)
        ax.set_ylim(lo - pad, hi + pad)


def finish_legend(ax, n: int | None = None, title: str | None = None) -> None:
    """The panel's legend, titled `title`, below its axes (never on the data); two columns when
    the entries are many and short."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    longest = max(len(re.sub(r"[$\\{}]|\\[a-z]+", "", x)) for x in labels)
    ncol = 3 if len(handles) > 4 and longest <= 10 else 2 if len(handles) > 3 and longest <= 22 else 1
    leg = ax.legend(fontsize=LEGEND_PT, title=title, title_fontsize=LEGEND_PT, ncol=ncol, loc="upper center",
                    bbox_to_anchor=(0.5, 0.0), borderaxespad=BELOW_PAD, frameon=False, handlelength=1.8,
                    columnspacing=1.0)
    leg._depthscale_below = True  # render() grows the figure by its height


def spectra_title(groups) -> str:
    """Legend title for a list of (k, (a, b)) groups."""
    return "$k$, $(a, b)$" if len({g[0] for g in groups}) > 1 else "$(a, b)$"


def fit_text(f) -> str:
    """α ± SE and R² of a fit for a legend entry (mathtext)."""
    se = f"{f.alpha_se:.2f}" if math.isfinite(f.alpha_se) else "?"
    return rf"$\alpha = {f.alpha:.2f} \pm {se}$, $R^2 = {f.r2:.3f}$"


def degenerate_text(f) -> str:
    """The kind of reason a fit is degenerate (its numbers left out, 'alpha' as α)."""
    return re.sub(r" = -?[0-9.]+(e[-+]?[0-9]+)?", "", f.reason).replace("alpha", "α")


def pairs(k: int, spectra) -> list[tuple[int, tuple]]:
    return [(k, s) for s in spectra]


def has_k(res: Results, k: int) -> bool:
    return k in PRESET_KS[res.preset]


def _span(y, se) -> list[float]:
    se = np.where(np.isfinite(se), se, 0.0)
    return list(y - se) + list(y + se)


def reference_lines(hlines: Callable | None, k: int, a: float, b: float) -> list[tuple[float, str]]:
    """[(value, linestyle)] of `hlines(k, a, b)`: None, one (value, se) drawn dashed, or a list of
    (value, se, linestyle); only finite positive values (a log axis)."""
    h = hlines(k, a, b) if hlines is not None else None
    if h is None:
        return []
    lines = [(h[0], h[1], "--")] if not isinstance(h, list) else h
    return [(float(v), ls) for v, _, ls in lines if v is not None and np.isfinite(v) and v > 0]


def error_bar_remark(ax, points: list[tuple[np.ndarray, np.ndarray]], seeds: int, ms: float = 4.0,
                     what: str | None = None) -> None:
    """Say in the caption when a log-y panel's error bars cannot be seen: with one seed there are
    none (unless `what` names the SE drawn instead); every SE shorter than a marker's radius (`ms`
    points wide) is hidden by its marker (fig6's were, unsaid). `points`: (y, SE) arrays as drawn.
    Call after bound_y."""
    if seeds <= 1 and what is None:
        note(ax, "one seed per depth: no error bars")
        return
    what = what or f"SE over {seeds} seeds"
    lo, hi = ax.get_ylim()
    height_pt = ax.get_position().height * ax.figure.get_figheight() * 72
    half = [math.log1p(e / v) / math.log(hi / lo) * height_pt
            for y, se in points for v, e in zip(np.ravel(y), np.ravel(se)) if v > 0 and np.isfinite(e) and e > 0]
    if half and max(half) <= ms / 2:
        note(ax, f"error bars ({what}) are drawn but smaller than the markers")


def loss_panel(ax, res: Results, model: str, task: str, groups: Sequence[tuple[int, tuple]],
               fit: bool | None = None, metric: str = "R", hlines: Callable | None = None,
               fit_floor: bool | None = None, ylabel: str = "loss $R_L$", r2_min: float | None = None,
               eval_se: str | None = None) -> dict:
    """Seed-mean `metric` vs depth for (k, (a, b)) pairs, with fit lines (fit=True) and optional
    horizontal theory lines `hlines(k, a, b)` (reference_lines). A well-posed fit is drawn as a
    line over the depths it was fitted to (never extrapolated) with α ± SE and R² in the series'
    legend entry — dashed, and named in the caption, where R² < `r2_min` (the claim's threshold:
    the points curve away from it); a degenerate one as data only (joined points), the caption
    naming the reason. With one seed, `eval_se` (a metric, e.g. "R_se") gives the error bars: the
    SE over evaluation contexts, and the caption says so. Returns every fit made, well posed or
    not, by (k, a, b)."""
    cols = colors(len(groups))
    fits, miss, drawn, degenerate, span, poor, bars = {}, [], 0, {}, [], [], []
    for i, ((k, (a, b)), col) in enumerate(zip(groups, cols)):
        s = res.series(model, task, k, a, b)
        lab = label(a, b, k if len({g[0] for g in groups}) > 1 else None)
        for value, ls in reference_lines(hlines, k, a, b):
            ax.axhline(value, color=col, ls=ls, lw=0.8, alpha=0.8)
            span.append(value)
        y = s.get(metric)
        ok = np.isfinite(y) & (y > 0) if s else np.zeros(0, bool)
        if not s or not ok.any():
            miss.append(lab)
            continue
        drawn += 1
        f = fit_series(s, task != "easy" if fit_floor is None else fit_floor, metric) if fit else None
        if f is not None:
            fits[(k, a, b)] = f
        if f is not None and not f.ok:  # grouped by the kind of reason (the values left out)
            degenerate.setdefault(degenerate_text(f), []).append(lab)
        law = f is not None and f.ok
        se = s.get(eval_se) if eval_se and int(s.n.max()) <= 1 else s.se[metric]
        errorbar(ax, s.depths[ok], y[ok], se[ok], marker=MARKERS[i % len(MARKERS)], color=col,
                 label=f"{lab}: {fit_text(f)}" if law else lab, ls="none" if law else "-")
        span += _span(y[ok], se[ok])
        bars.append((y[ok], se[ok], int(s.n.max())))
        if law:
            weak = r2_min is not None and not f.r2 >= r2_min
            poor += [f"{lab} (R²={f.r2:.3f})"] if weak else []
            Lg = np.geomspace(s.depths[ok].min(), s.depths[ok].max(), 100)
            ax.plot(Lg, f.predict(Lg), color=col, lw=0.9, alpha=0.9, ls="--" if weak else "-")
    loglog(ax, ylabel=ylabel)
    bound_y(ax, span, log=True)
    if drawn == 0:
        missing(ax, "missing runs")
    elif miss:
        note(ax, "missing: " + ", ".join(miss))
    if bars:
        seeds = max(n for _, _, n in bars)
        error_bar_remark(ax, [(y, se) for y, se, _ in bars], seeds,
                         what="one seed: the SE over evaluation contexts" if eval_se and seeds <= 1 else None)
    if poor:
        note(ax, f"dashed fit: R² below {r2_min:g}, the claim's threshold (not a law here): " + ", ".join(poor))
    for why, labs in degenerate.items():
        note(ax, f"no law drawn, degenerate fit ({why}): {', '.join(labs)}"
             if len(degenerate) > 1 or len(labs) < drawn else f"no law drawn: degenerate fits ({why})")
    finish_legend(ax, len(groups), spectra_title(groups))
    return fits


def decomp_panel(ax, res: Results, model: str, groups, metric: str, ylabel: str, L0_lines: dict | None = None) -> None:
    """C_L or A_L - C_L (metric 'C' or 'gap') vs depth, L >= 2, on a linear y axis (the same for
    both, so that the two panels read alike); `L0_lines` {(k, a, b): L0} drawn dotted."""
    cols = colors(len(groups))
    drawn, span = 0, []
    for i, ((k, (a, b)), col) in enumerate(zip(groups, cols)):
        s = res.series(model, "difficult", k, a, b)
        if not s:
            continue
        y = s.get(metric)
        ok = np.isfinite(y) & (s.depths > 1)
        if not ok.any():
            continue
        drawn += 1
        errorbar(ax, s.depths[ok], y[ok], s.se[metric][ok], marker=MARKERS[i % len(MARKERS)], color=col,
                 label=label(a, b, k if len({g[0] for g in groups}) > 1 else None))
        span += _span(y[ok], s.se[metric][ok])
        L0 = (L0_lines or {}).get((k, a, b))
        if L0 is not None and math.isfinite(L0):
            ax.axhline(L0, color=col, ls=":", lw=1.0)
            span.append(L0)
    logx(ax)
    ax.set_ylabel(ylabel)
    bound_y(ax, span, log=False)
    if not drawn:
        missing(ax)
    finish_legend(ax, len(groups), spectra_title(groups))


def excess_panel(ax, res: Results, model: str, task: str, groups, fits: dict) -> None:
    """The excess R_L - L0 over each well-posed fit's L0 (`fits` {(k, a, b): FitResult}, from
    loss_panel) on log-log axes, with the fit c L^-α and guide lines of slope -1 (the paper's 1/L)
    and -1/2: on a log axis of the whole loss a 1/L law and a 1/sqrt(L) one look alike, here
    they are lines of different slopes. Error bars are R_L's SE over seeds (L0's uncertainty left
    out); a depth with R_L <= L0 cannot be drawn on a log axis and the caption counts them."""
    cols = colors(len(groups))
    span, nonpos, none, drawn = [], [], [], []
    for i, ((k, (a, b)), col) in enumerate(zip(groups, cols)):
        lab = label(a, b, k if len({g[0] for g in groups}) > 1 else None)
        f, s = fits.get((k, a, b)), res.series(model, task, k, a, b)
        if f is None or not f.ok or not s:
            none.append(lab)
            continue
        y, se = s.get("R") - f.L0, s.se["R"]
        ok = np.isfinite(y) & (y > 0)
        nonpos += [f"{lab} L={int(L)}" for L in s.depths[np.isfinite(y) & (y <= 0)]]
        if not ok.any():
            none.append(lab)
            continue
        errorbar(ax, s.depths[ok], y[ok], se[ok], marker=MARKERS[i % len(MARKERS)], color=col, ls="none",
                 label=rf"{lab}: $\alpha = {f.alpha:.2f}$")
        Lg = np.geomspace(s.depths[ok].min(), s.depths[ok].max(), 50)
        ax.plot(Lg, f.predict(Lg) - f.L0, color=col, lw=0.9)
        span += [v for v in _span(y[ok], se[ok]) if v > 0]
        drawn.append((s.depths[ok], y[ok]))
    if drawn:
        L = np.concatenate([d for d, _ in drawn])
        Lm = math.sqrt(L.min() * L.max())
        ym = float(np.exp(np.mean(np.log(np.concatenate([v for _, v in drawn])))))
        Lg = np.geomspace(L.min(), L.max(), 20)
        ax.plot(Lg, ym * Lm / Lg, color="k", ls=":", lw=1.2, label="slope $-1$ ($1/L$)")
        ax.plot(Lg, ym * np.sqrt(Lm / Lg), color="0.55", ls=(0, (5, 2, 1, 2)), lw=1.0, label=r"slope $-1/2$")
    loglog(ax, ylabel="excess $R_L - L_0$ (log axis)")
    bound_y(ax, span, log=True)
    if not drawn:
        missing(ax, "no well-posed fit: no $L_0$")
    if none and drawn:
        note(ax, "no excess drawn (no well-posed fit or no depth above L0): " + ", ".join(none))
    if nonpos:
        note(ax, "R_L <= L0, not drawn on the log axis: " + ", ".join(nonpos))
    if drawn:
        note(ax, "error bars: the SE of R_L over seeds; the fitted L0's own uncertainty is not in them")
    finish_legend(ax, len(groups) + 2, spectra_title(groups))


# ---------------------------------------------------------------- building and writing

def _room_for_legends(fig) -> None:
    """Grow the figure by the tallest legend below an axes of each row, so that constrained
    layout keeps the axes their size."""
    renderer = fig.canvas.get_renderer()
    rows: dict[int, float] = {}
    for ax in fig.axes:
        leg = ax.get_legend()
        spec = ax.get_subplotspec()
        if leg is None or spec is None or not getattr(leg, "_depthscale_below", False):
            continue
        h = leg.get_window_extent(renderer).height / fig.dpi + BELOW_PAD * LEGEND_PT / 72
        rows[spec.rowspan.start] = max(rows.get(spec.rowspan.start, 0.0), h)
    if rows:
        fig.set_figheight(fig.get_figheight() + sum(rows.values()))


def pin_figure_legends(fig) -> None:
    """Fix each figure-level legend (fig.legend, e.g. fig3's line-style key) where the layout put
    it: its default anchor is the figure's box, which a tight-bbox save widens to take in the
    caption, so the legend would move down onto the caption (fig3's key printed over (b)'s
    remark). Freezes the layout (it is computed once, here)."""
    if not fig.legends:
        return
    fig.canvas.draw()
    fig.set_layout_engine("none")
    for leg in fig.legends:
        bb = leg.get_window_extent().transformed(fig.transFigure.inverted())
        leg.set_bbox_to_anchor((bb.x0, bb.y0, bb.width, bb.height), transform=fig.transFigure)
        leg.set_loc("center")


def render(draw: Callable, res: Results, th: Theory):
    """Build a figure with `draw(res, th)` under STYLE, make room for its legends, pin the
    figure-level ones and write its remarks as the caption."""
    from matplotlib import rc_context

    with rc_context(STYLE):
        fig = draw(res, th)
        _room_for_legends(fig)
        pin_figure_legends(fig)
        add_caption(fig)
    return fig


def write_figure(draw: Callable, name: str, res: Results, th: Theory, out_dir: str | Path) -> list[Path]:
    """Build the figure `draw(res, th)` and write <out_dir>/<name>.png (at DPI) and .pdf."""
    from matplotlib import rc_context

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with rc_context(STYLE):  # no title or preset inside the figure: the report carries both
        fig = render(draw, res, th)
        paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
        # written whole or not at all (a full disk leaves no 0-byte figure): atomic.write_atomic
        write_atomic(paths[0], lambda fh: fig.savefig(fh, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.08))
        fig.set_layout_engine("none")  # keep the constrained layout computed for the PNG
        write_atomic(paths[1], lambda fh: fig.savefig(fh, format="pdf", bbox_inches="tight", pad_inches=0.08))
    return paths


__all__ = ["STYLE", "DPI", "LEGEND_PT", "MARKERS", "new_figure", "colors", "prefix_title", "missing", "note", "remarks", "add_caption",
           "panel_title", "errorbar", "logx", "logy", "loglog", "log_ticks", "tick_text", "log_axis_ticks", "bound_y",
           "finish_legend", "spectra_title", "fit_text", "degenerate_text", "pairs", "has_k", "loss_panel",
           "decomp_panel", "excess_panel", "error_bar_remark", "pin_figure_legends", "render", "write_figure"]
