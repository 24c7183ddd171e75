"""Every figure of the paper rebuilt from stored results (SPEC §7), never retraining.

Input: `results.Results` (the store's finished runs of one preset) and `results.Theory`. Points
are means over seeds, error bars the SE over seeds (none with one seed); fit lines come from
analysis.py and are drawn only for a well-posed fit (fits.FitResult.status "ok"), with α ± SE in
the legend entry of their series; a degenerate fit is drawn as data only and the panel says why.
A panel whose runs are missing says so in the panel. Labels are mathtext ($R_L$, $C_L$, ...);
legends are titled with what they list; log axes get enough labelled ticks to be read. The
figure carries no title or provenance: the report's heading and provenance say what and which
preset. Figures use matplotlib's object API with the Agg canvas (no pyplot, no global backend
switch) and are written as PNG and PDF, the PDF with TrueType (Type 42) fonts (`STYLE`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from depthscale.analysis import (MODE_FLOOR, fit_series, mode_curves, normalised_modes, reducible_modes,
                                 selection_quantiles)
from depthscale.formatting import label
from depthscale.registry import (FIG3_SPECTRA, FIG3C_MODES, FIG3C_SPECTRUM, FIG4_SPECTRA, FIG7_MODES,
                                 FIG7_SPECTRUM, FIG8_SPECTRUM, FIG14_K2, FIG14_K16, FIG56_SPECTRA, ORIGIN, PAPER,
                                 PRESET_KS, depth_set, preset_shape, variant_fields)
from depthscale.results import Results, Theory


# ================================================================ helpers

# rcParams every figure is built and saved under: TrueType (Type 42) fonts in PDF/PS, not Type 3
STYLE = {"pdf.fonttype": 42, "ps.fonttype": 42, "mathtext.fontset": "dejavusans",
         "legend.title_fontsize": 7, "legend.fontsize": 6.5}


def _new_figure(ncols: int, nrows: int = 1, width: float = 4.0, height: float = 3.3):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def _colors(n: int):
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(x) for x in (np.linspace(0.0, 0.85, n) if n > 1 else [0.0])]


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")  # with colour: series apart in greyscale too


def _missing(ax, text: str = "missing runs", blank: bool = False) -> None:
    if blank:
        ax.set_xticks([])
        ax.set_yticks([])
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=9,
            color="0.4")


def _panel_title(ax, letter: str, text: str) -> None:
    ax.set_title(f"({letter}) {text}", fontsize=9, loc="left")


def _errorbar(ax, x, y, se, **kw):
    se = np.where(np.isfinite(se), se, 0.0) if se is not None else None
    return ax.errorbar(x, y, yerr=se if se is not None and np.any(se > 0) else None,
                       capsize=2, ms=4, lw=1.1, **kw)


def _logx(ax) -> None:
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
    (1, 1.5, 2, 3, 5, 7) and 1..9 per decade that puts at least 3 ticks inside the range; over
    many decades every n-th power of ten; on a range too narrow for any of them, 3-5 evenly
    spaced round values (so a panel never shows fewer than 2 labelled ticks)."""
    if not (lo > 0 and hi > lo and math.isfinite(lo) and math.isfinite(hi)):
        return []
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if e1 - e0 > 7:
        step = math.ceil((e1 - e0) / 6)
        return [10.0 ** e for e in range(e0, e1 + 1) if e % step == 0 and lo <= 10.0 ** e <= hi]
    for subs in ((1,), (1, 3), (1, 2, 5), (1, 1.5, 2, 3, 5, 7), tuple(range(1, 10))):
        ticks = [m * 10.0 ** e for e in range(e0, e1 + 1) for m in subs if lo <= m * 10.0 ** e <= hi]
        if len(ticks) >= 3:
            return ticks
    from matplotlib.ticker import MaxNLocator

    return [float(t) for t in MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
            if lo <= t <= hi and t > 0]


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


def _logy(ax) -> None:
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


def _loglog(ax, xlabel: str = "depth $L$", ylabel: str = "loss $R_L$") -> None:
    _logx(ax)
    _logy(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def _finish_legend(ax, n: int, title: str | None = None, room: bool = False) -> None:
    """Legend titled `title`; room=True first raises the top of the y axis so that the legend,
    in the upper right corner, sits above the data instead of on it."""
    handles = ax.get_legend_handles_labels()[0]
    if not handles:
        return
    ncol = 1 if n <= 5 else 2
    loc = "best"
    if room:
        lines = math.ceil(len(handles) / ncol) + (title.count("\n") + 1 if title else 0)
        frac = min(0.6, 0.055 * lines + 0.05)  # share of the axes height the legend needs
        lo, hi = ax.get_ylim()
        if ax.get_yscale() == "log" and lo > 0 and hi > lo:
            ax.set_ylim(lo, hi * (hi / lo) ** (frac / (1 - frac)))
            _logy(ax)
        elif hi > lo:
            ax.set_ylim(lo, hi + (hi - lo) * frac / (1 - frac))
        loc = "upper right"
    ax.legend(fontsize=6.5, ncol=ncol, title=title, loc=loc, frameon=True, framealpha=0.85,
              edgecolor="none", borderpad=0.3)


def _spectra_title(groups) -> str:
    """Legend title for a list of (k, (a, b)) groups."""
    return "$k$, $(a, b)$" if len({g[0] for g in groups}) > 1 else "$(a, b)$"


def _wrap(lines: list[str], width: int = 48) -> str:
    import textwrap

    return "\n".join(textwrap.fill(x, width) for x in lines)


def fit_text(f) -> str:
    """α ± SE of a fit for a legend entry (mathtext)."""
    se = f"{f.alpha_se:.2f}" if math.isfinite(f.alpha_se) else "?"
    return rf"$\alpha = {f.alpha:.2f} \pm {se}$"


def loss_panel(ax, res: Results, model: str, task: str, groups: Sequence[tuple[int, tuple]],
               fit: bool | None = None, metric: str = "R", hlines: Callable | None = None,
               fit_floor: bool | None = None, ylabel: str = "loss $R_L$") -> dict:
    """Seed-mean `metric` vs depth for (k, (a, b)) pairs, with fit lines (fit=True) and optional
    horizontal theory lines `hlines(k, a, b) -> (value, se) | None`. A well-posed fit is drawn as a
    line with α ± SE in the series' legend entry; a degenerate one as data only (joined points),
    the panel naming the reason. Returns the well-posed fits."""
    colors = _colors(len(groups))
    fits, missing, drawn, degenerate = {}, [], 0, {}
    Lmax = depth_set(res.preset, "all")[-1]
    for i, ((k, (a, b)), col) in enumerate(zip(groups, colors)):
        s = res.series(model, task, k, a, b)
        lab = label(a, b, k if len({g[0] for g in groups}) > 1 else None)
        if hlines is not None:
            h = hlines(k, a, b)
            if h is not None and np.isfinite(h[0]) and h[0] > 0:
                ax.axhline(h[0], color=col, ls="--", lw=0.8, alpha=0.8)
        y = s.get(metric)
        ok = np.isfinite(y) & (y > 0) if s else np.zeros(0, bool)
        if not s or not ok.any():
            missing.append(lab)
            continue
        drawn += 1
        f = fit_series(s, task != "easy" if fit_floor is None else fit_floor, metric) if fit else None
        if f is not None and not f.ok:  # grouped by the kind of reason (the values left out)
            why = re.sub(r" = -?[0-9.]+(e[-+]?[0-9]+)?", "", f.reason).replace("alpha", "α")
            degenerate.setdefault(why, []).append(lab)
        law = f is not None and f.ok
        _errorbar(ax, s.depths[ok], y[ok], s.se[metric][ok], marker=MARKERS[i % len(MARKERS)], color=col,
                  label=f"{lab}: {fit_text(f)}" if law else lab, ls="none" if law else "-")
        if law:
            fits[(k, a, b)] = f
            Lg = np.geomspace(1, Lmax, 100)
            ax.plot(Lg, f.predict(Lg), color=col, lw=0.9, alpha=0.9)
    _loglog(ax, ylabel=ylabel)
    if drawn == 0:
        _missing(ax, "missing runs")
    # remarks go under the legend's title, so that the legend's placement keeps them off the data
    notes = ["missing: " + ", ".join(missing)] if drawn and missing else []
    notes += [f"no law drawn, degenerate fit ({why}): {', '.join(labs)}"
              if len(degenerate) > 1 or len(labs) < drawn else f"no law drawn: degenerate fits ({why})"
              for why, labs in degenerate.items()]
    title = _spectra_title(groups) + ("\n" + _wrap(notes) if notes else "")
    _finish_legend(ax, len(groups), title, room=True)
    return fits


def _decomp_panel(ax, res: Results, model: str, groups, metric: str, ylabel: str,
                  L0_lines: dict | None = None) -> None:
    """C_L or A_L - C_L (metric 'C' or 'gap') vs depth, L >= 2."""
    colors = _colors(len(groups))
    drawn = 0
    for i, ((k, (a, b)), col) in enumerate(zip(groups, colors)):
        s = res.series(model, "difficult", k, a, b)
        if not s:
            continue
        y = s.get(metric)
        ok = np.isfinite(y) & (s.depths > 1)
        if metric == "gap":
            ok &= y > 0
        if not ok.any():
            continue
        drawn += 1
        _errorbar(ax, s.depths[ok], y[ok], s.se[metric][ok], marker=MARKERS[i % len(MARKERS)], color=col,
                  label=label(a, b, k if len({g[0] for g in groups}) > 1 else None))
        if L0_lines and (k, a, b) in L0_lines:
            ax.axhline(L0_lines[(k, a, b)], color=col, ls=":", lw=0.8)
    _logx(ax)
    if metric == "gap":
        _logy(ax)
    ax.set_ylabel(ylabel)
    if not drawn:
        _missing(ax)
    _finish_legend(ax, len(groups), _spectra_title(groups), room=True)


def _pairs(k: int, spectra) -> list[tuple[int, tuple]]:
    return [(k, s) for s in spectra]


def _has_k(res: Results, k: int) -> bool:
    return k in PRESET_KS[res.preset]


# ================================================================ figures

def fig1(res: Results, th: Theory):
    fig, ax = _new_figure(2, 2)
    loss_panel(ax[0], res, "linear", "easy", _pairs(1, FIG3_SPECTRA))
    _panel_title(ax[0], "a", "linear, easy")
    loss_panel(ax[1], res, "nonlinear", "easy", _pairs(1, FIG4_SPECTRA))
    _panel_title(ax[1], "b", "nonlinear, easy")
    loss_panel(ax[2], res, "linear", "difficult", _pairs(2, FIG56_SPECTRA))
    _panel_title(ax[2], "c", "linear, difficult ($k=2$)")
    loss_panel(ax[3], res, "nonlinear", "difficult", _pairs(2, FIG56_SPECTRA))
    _panel_title(ax[3], "d", "nonlinear, difficult ($k=2$)")
    return fig


def fig3(res: Results, th: Theory):
    fig, ax = _new_figure(3)
    for i, (sel, name) in enumerate(((lambda s: s[0] == 2.0, "$a=2$, $b$ varies"),
                                     (lambda s: s[1] == 2.0, "$b=2$, $a$ varies"))):
        spectra = [s for s in FIG3_SPECTRA if sel(s)]
        colors = _colors(len(spectra))
        for (a, b), col in zip(spectra, colors):  # finite-size reference curves, same colour
            c = th.curves(a, b)  # at this d and P: what claim 1 judges the measured slope against
            for key, ls in (("finite_P_constrained", ":"), ("finite_P", "--")):
                ref = c.get(key)
                if ref:
                    y = np.asarray(ref["in_sample"], float)
                    ok = y > 0
                    ax[i].plot(np.asarray(ref["depths"], float)[ok], y[ok], ls=ls, color=col, lw=0.9, alpha=0.8)
        loss_panel(ax[i], res, "linear", "easy", _pairs(1, spectra), fit=True)
        data = [res.series("linear", "easy", 1, a, b).get("R") for a, b in spectra]
        data = np.concatenate([x for x in data if len(x)] or [np.zeros(0)])
        data = data[np.isfinite(data) & (data > 0)]
        if data.size:  # theory curves may fall far below the data: keep the data readable
            lo, hi = ax[i].get_ylim()
            ax[i].set_ylim(max(lo, data.min() / 30), min(hi, data.max() * 30))
            _logy(ax[i])
        _panel_title(ax[i], "ab"[i], f"linear, easy, {name}")
    # one key for the line styles, below the panels; the colour of a spectrum is the same for its
    # data, its fit and its two theory curves (panel legends)
    from matplotlib.lines import Line2D

    key = [Line2D([], [], color="0.3", marker="o", ls="none", ms=4, label="trained (seed mean)"),
           Line2D([], [], color="0.3", ls="-", lw=0.9, label=r"fit $c\,L^{-\alpha}$"),
           Line2D([], [], color="0.3", ls="--", lw=0.9, label="theory: best polynomial in $S$ (free)"),
           Line2D([], [], color="0.3", ls=":", lw=0.9, label="theory: best shared GD step (constrained)")]
    fig.legend(handles=key, loc="outside lower center", ncol=4, frameon=False, fontsize=7,
               title="line style (the colour of a spectrum is shared by its data, fit and theory)",
               title_fontsize=7)
    a, b = FIG3C_SPECTRUM
    s = res.series("linear", "easy", 1, a, b)
    d = preset_shape(res.preset, "linear")[0]
    norm = normalised_modes(s, FIG3C_MODES, d, a, b)
    for (m, v), col in zip(norm.items(), _colors(len(norm))):
        ok = np.isfinite(v) & (v > 0)
        ax[2].plot(s.depths[ok], v[ok], "o-", color=col, ms=4, lw=1.1, label=f"$k={m}$")
    ax[2].axhline(MODE_FLOOR, color="k", ls="--", lw=0.8, label="2% (learned)")
    _loglog(ax[2], ylabel=r"$R_k\,/\,(\omega_k \lambda_k)$")
    if not norm:
        _missing(ax[2])
    _finish_legend(ax[2], len(norm) + 1, "mode", room=True)
    _panel_title(ax[2], "c", f"normalised mode-wise loss {label(a, b)}")
    return fig


def fig4(res: Results, th: Theory):
    fig, ax = _new_figure(3)
    loss_panel(ax[0], res, "nonlinear", "easy", _pairs(1, [s for s in FIG4_SPECTRA if s[1] == 0]))
    _panel_title(ax[0], "a", "nonlinear, easy, $b=0$")
    loss_panel(ax[1], res, "nonlinear", "easy", _pairs(1, [s for s in FIG4_SPECTRA if s[0] == 0]))
    _panel_title(ax[1], "b", "nonlinear, easy, $a=0$")
    drawn = 0
    depths = depth_set(res.preset, "all")
    for L, col in zip(depths, _colors(len(depths))):
        runs = res.runs("nonlinear", "easy", 1, 1.0, 0.0, L)
        cur = res.curves(runs[0]["run_id"]) if runs else None
        if not cur or not cur.get("step"):
            continue
        y = np.asarray(cur["top1_mass"], float)
        ax[2].plot(cur["step"], y, color=col, lw=1.1, label=f"{L}")
        drawn += 1
    ax[2].set_xlabel("training step")
    ax[2].set_ylabel("top-1 attention mass")
    ax[2].set_ylim(-0.02, 1.02)
    if not drawn:
        _missing(ax[2], "missing runs or curves")
    _finish_legend(ax[2], drawn, "depth $L$")
    _panel_title(ax[2], "c", "top-1 mass during training at (1,0), seed 0")
    return fig


def fig5(res: Results, th: Theory):
    fig, ax = _new_figure(2)
    floor = lambda k, a, b: (th.floor(a, b, k)["R_irr"], th.floor(a, b, k)["se"])  # noqa: E731
    loss_panel(ax[0], res, "linear", "difficult", _pairs(2, [s for s in FIG56_SPECTRA if s[0] == 0]),
               hlines=floor)
    _panel_title(ax[0], "a", r"linear, difficult, $a=0$ (dashed: $R_{\mathrm{irr}}$)")
    loss_panel(ax[1], res, "linear", "difficult", _pairs(2, [s for s in FIG56_SPECTRA if s[1] == 0]),
               hlines=floor)
    _panel_title(ax[1], "b", r"linear, difficult, $b=0$ (dashed: $R_{\mathrm{irr}}$)")
    return fig


def _softmax_floor_line(th: Theory):
    """hlines for loss_panel: the softmax-ensemble floor of each spectrum (SPEC §3.4)."""
    return lambda k, a, b: (th.softmax_floor(a, b, k)["ensemble_floor"], th.softmax_floor(a, b, k)["se"])


def spread_view(res: Results, k: int = 2) -> Results:
    """The runs of the spread start (registry.variant_fields: never used for the claims)."""
    return res.view(**dict(variant_fields("spread", k)))


def start_panel(ax, res: Results, groups: Sequence[tuple[int, tuple]]) -> None:
    """Faithful start (filled markers, solid) beside the spread variant (open markers, dashed):
    R_L for each (k, (a, b)), the two starts' curves of one spectrum in one colour."""
    colors = _colors(len(groups))
    drawn = 0
    for i, ((k, (a, b)), col) in enumerate(zip(groups, colors)):
        for view, ls, face, name in ((res, "-", col, "faithful"), (spread_view(res, k), "--", "none", "spread")):
            s = view.series("nonlinear", "difficult", k, a, b)
            y = s.get("R") if s else np.zeros(0)
            ok = np.isfinite(y) & (y > 0)
            if not ok.any():
                continue
            drawn += 1
            ax.plot(s.depths[ok], y[ok], ls=ls, marker=MARKERS[i % len(MARKERS)], color=col, mfc=face, ms=4,
                    label=f"{label(a, b, k if len({g[0] for g in groups}) > 1 else None)} {name}")
    _loglog(ax)
    if not drawn:
        _missing(ax)
    _finish_legend(ax, drawn, "start: filled faithful, open spread", room=True)


def fig6(res: Results, th: Theory, compare: bool = True):
    fig, ax = _new_figure(3 if compare else 2, 2)
    ax = ax if compare else [ax[0], ax[1], None, ax[2], ax[3], None]  # the same panel slots
    fl = _softmax_floor_line(th)
    a0 = _pairs(2, [s for s in FIG56_SPECTRA if s[0] == 0])
    loss_panel(ax[0], res, "nonlinear", "difficult", a0, fit=True, hlines=fl)
    _panel_title(ax[0], "a", r"$a=0$, fits $L_0 + c\,L^{-\alpha}$; dashed: ens. floor")
    b0 = _pairs(2, [s for s in FIG56_SPECTRA if s[1] == 0])
    fits = loss_panel(ax[1], res, "nonlinear", "difficult", b0, fit=True, hlines=fl)
    _panel_title(ax[1], "b", "$b=0$; dashed: ensemble floor")
    if compare:
        start_panel(ax[2], res, a0)
        _panel_title(ax[2], "e", "faithful vs spread start, $a=0$")
    _decomp_panel(ax[3], res, "nonlinear", b0, "C", "$C_L$", {k: f.L0 for k, f in fits.items()})
    _panel_title(ax[3], "c", "$C_L$ at $b=0$ (dotted: fitted $L_0$)")
    _decomp_panel(ax[4], res, "nonlinear", b0, "gap", "$A_L - C_L$")
    _panel_title(ax[4], "d", "$A_L - C_L$ at $b=0$")
    if compare:
        start_panel(ax[5], res, b0)
        _panel_title(ax[5], "f", "faithful vs spread start, $b=0$")
    return fig


def fig6_spread(res: Results, th: Theory):
    """fig6 drawn from the spread variant's runs."""
    return fig6(spread_view(res, 2), th, compare=False)


def fig7(res: Results, th: Theory):
    fig, ax = _new_figure(3)
    a, b = FIG7_SPECTRUM
    s_nl = res.series("nonlinear", "difficult", 2, a, b)
    s_li = res.series("linear", "difficult", 2, a, b)
    raw = mode_curves(s_nl, FIG7_MODES)
    for (m, v), col in zip(raw.items(), _colors(len(raw))):
        ok = np.isfinite(v) & (v > 0)
        ax[0].plot(s_nl.depths[ok], v[ok], "o-", color=col, ms=4, lw=1.1, label=f"$k={m}$")
    _loglog(ax[0], ylabel="$R_k$")
    _panel_title(ax[0], "a", f"nonlinear: mode-wise loss {label(a, b)}")
    for i, (s, name) in enumerate(((s_nl, "nonlinear"), (s_li, "linear")), start=1):
        red = reducible_modes(s, FIG7_MODES)
        for (m, v), col in zip(red.items(), _colors(len(red))):
            ax[i].plot(s.depths, v, "o-", color=col, ms=4, lw=1.1, label=f"$k={m}$")
        _logx(ax[i])
        ax[i].set_ylabel(r"$(R_k(L) - R_{k,\infty})\,/\,(R_k(1) - R_{k,\infty})$")
        ax[i].axhline(0, color="0.6", lw=0.6)
        if not red:
            _missing(ax[i], "missing runs, or no well-posed fit of $R_{k,\\infty}$\n"
                            "(degenerate: too few depths, or $R_{k,\\infty}$ on its bound 0)")
        _finish_legend(ax[i], len(red), "mode")
        _panel_title(ax[i], "bc"[i - 1], f"{name}: normalised reducible loss")
    if not raw:
        _missing(ax[0])
    _finish_legend(ax[0], len(raw), "mode", room=True)
    return fig


def fig8(res: Results, th: Theory):
    fig, ax = _new_figure(2, width=4.2, height=4.0)
    g = th.fig8()
    q, xs, t, tb = (np.asarray(g[k], float) for k in ("q_2d", "x_selected_2d", "t_2d", "t_bar_2d"))

    def arrow(p0, p1, color, label, lw=1.4):
        ax[0].annotate("", xy=p1, xytext=p0, arrowprops=dict(arrowstyle="->", color=color, lw=lw))
        ax[0].plot([], [], color=color, label=label)

    qn = q / max(np.linalg.norm(q), 1e-12) * max(np.linalg.norm(t), 1e-12) * 1.5
    arrow((0, 0), qn, "k", "query $q$ (scaled)")
    ax[0].scatter(xs[:, 0], xs[:, 1], color="tab:blue", s=25, label="selected $x_i$", zorder=3)
    arrow((0, 0), t, "tab:red", "target $t$")
    arrow((0, 0), tb, "tab:green", r"$\bar t = c\,\Sigma q$")
    arrow(tb, t, "tab:orange", r"residual $t - \bar t$", lw=1.0)
    pts = np.vstack([xs, t, tb, qn, [0, 0]])
    lim = 1.15 * np.abs(pts).max()
    ax[0].set_xlim(-lim, lim)
    ax[0].set_ylim(-lim, lim)
    ax[0].set_aspect("equal")
    ax[0].set_xlabel("along $q$")
    ax[0].set_ylabel("along $t$, orthogonal to $q$")
    ax[0].legend(fontsize=6.5, frameon=False, loc="lower left")
    _panel_title(ax[0], "a", f"one top-2 context at {label(*FIG8_SPECTRUM)}, 2-D projection")
    t_full, tb_full = np.asarray(g["t"], float), np.asarray(g["t_bar"], float)
    ax[1].scatter(tb_full, t_full, s=12, color="tab:purple")
    lo, hi = min(tb_full.min(), t_full.min()), max(tb_full.max(), t_full.max())
    ax[1].plot([lo, hi], [lo, hi], color="0.5", lw=0.8, ls="--")
    ax[1].set_xlabel(r"$\bar t_k$ (predictable part)")
    ax[1].set_ylabel("$t_k$")
    _panel_title(ax[1], "b", r"coordinates in the eigenbasis of $\Sigma$")
    return fig


def _variant_figure(res: Results, model: str, name: str):
    fig, ax = _new_figure(2)
    loss_panel(ax[0], res, model, "difficult", _pairs(2, ORIGIN), fit=True)
    _panel_title(ax[0], "a", f"{name}: loss, (0,0), $k=2$")
    s = res.series(model, "difficult", 2, 0.0, 0.0)
    drawn = 0
    for metric, col, lab in (("C", "tab:blue", "$C_L$"), ("gap", "tab:orange", "$A_L - C_L$")):
        y = s.get(metric) if s else np.zeros(0)
        ok = np.isfinite(y) & (s.depths > 1) & (y > 0) if s else np.zeros(0, bool)
        if ok.any():
            _errorbar(ax[1], s.depths[ok], y[ok], s.se[metric][ok], marker="o", color=col, label=lab)
            drawn += 1
    _loglog(ax[1], ylabel="$C_L$, $A_L - C_L$")
    if not drawn:
        _missing(ax[1])
    _finish_legend(ax[1], 2, "(0,0), $k=2$", room=True)
    _panel_title(ax[1], "b", f"{name}: decomposition")
    return fig


def fig9(res: Results, th: Theory):
    return _variant_figure(res, "single_stream", "single stream")


def fig10(res: Results, th: Theory):
    return _variant_figure(res, "layer_values", "per-layer values")


def _context_updates_panel(ax, res: Results, metric: str, name: str, refs, ylabel: str, letter: str,
                           title: str, n_legend: int) -> None:
    """`metric` of the context_updates model at (0,0) vs depth for k = 2 and 16 (legend `name`
    with k filled in), with horizontal reference lines `refs` [(value, axhline kwargs)]."""
    drawn = 0
    for k, col in zip((2, 16), _colors(2)):
        s = res.series("context_updates", "difficult", k, 0.0, 0.0)
        y = s.get(metric) if s else np.zeros(0)
        ok = np.isfinite(y) if s else np.zeros(0, bool)
        if ok.any():
            _errorbar(ax, s.depths[ok], y[ok], s.se[metric][ok], marker="o", color=col, label=name.format(k))
            drawn += 1
    for value, kw in refs:
        ax.axhline(value, **kw)
    _logx(ax)
    ax.set_ylabel(ylabel)
    if not drawn:
        _missing(ax)
    _finish_legend(ax, n_legend, "(0,0)")
    _panel_title(ax, letter, title)


def fig11(res: Results, th: Theory):
    fig, ax = _new_figure(2)
    loss_panel(ax[0], res, "context_updates", "difficult", [(k, ORIGIN[0]) for k in (2, 16)], fit=True)
    _panel_title(ax[0], "a", "context updates: loss, (0,0)")
    m16 = PAPER["context_updates"]["m_top16"]
    paper = [(m16, dict(color="0.5", ls="--", lw=0.8, label=f"paper, $k=16$: $m = {m16:g}$"))]
    _context_updates_panel(ax[1], res, "m", "$k={}$", paper, "learned $m$", "b",
                           "learned context-update strength $m$", 3)
    return fig


def fig12(res: Results, th: Theory):
    fig, ax = _new_figure(3, width=3.8, height=3.5)
    for i, k in enumerate((2, 16)):
        s = res.series("context_updates", "difficult", k, 0.0, 0.0)
        arrs = s.arrays.get("A1_mean", []) if s else []
        j = max((j for j, x in enumerate(arrs) if x is not None), default=None)
        if j is None:
            _missing(ax[i], "missing runs" + ("" if _has_k(res, k) else f" (k={k} not in this preset)"),
                     blank=True)
            _panel_title(ax[i], "ab"[i], f"mean $A_1$, $k={k}$")
            continue
        A = arrs[j][0]
        im = ax[i].imshow(A, cmap="magma", interpolation="nearest")
        fig.colorbar(im, ax=ax[i], shrink=0.8)
        rho, r2 = s.get("rho")[j], s.get("rho_r2")[j]
        _panel_title(ax[i], "ab"[i], rf"mean $A_1$, $k={k}$, $L={s.depths[j]}$: $\rho={rho:.3g}$, $R^2={r2:.4g}$")
        ax[i].set_xlabel("context token")
        ax[i].set_ylabel("context token")
    paper = [(PAPER["context_updates"][key], dict(color="0.5", ls="--", lw=0.7)) for key in ("rho_top2", "rho_top16")]
    _context_updates_panel(ax[2], res, "rho", "$k={}$", paper,
                           r"$\rho$ in $A_1 \approx \rho I + (1-\rho)\,\mathbf{1}\mathbf{1}^\top/P$", "c",
                           r"$\rho$ vs depth (dashed: paper)", 2)
    return fig


def fig13(res: Results, th: Theory):
    fig, ax = _new_figure(2)
    sq = selection_quantiles(res)
    if sq is None:
        for i in range(2):
            _missing(ax[i])
    else:
        _errorbar(ax[0], sq["q"], sq["Q1"], sq["Q1_se"], marker="o", color="tab:blue", label=f"{sq['L1']}")
        _errorbar(ax[0], sq["q"], sq["QL"], sq["QL_se"], marker="s", color="tab:red", label=f"{sq['Lmax']}")
        _logy(ax[0])
        _finish_legend(ax[0], 2, "depth $L$")
        _errorbar(ax[1], sq["q"], sq["dQ"], sq["dQ_se"], marker="o", color="tab:purple")
        ax[1].axhline(0, color="0.5", lw=0.8)
    ax[0].set_xlabel("percentile $q$")
    ax[0].set_ylabel(r"$Q_L(q)$ of $E_L = |\bar p - p^*|^2$")
    _panel_title(ax[0], "a", "selection-loss percentiles, (0,0), $k=2$")
    ax[1].set_xlabel("percentile $q$")
    ax[1].set_ylabel(r"$\Delta Q(q) = Q_1(q) - Q_{L_{\max}}(q)$")
    _panel_title(ax[1], "b", "gain from depth per percentile")
    return fig


def fig14(res: Results, th: Theory, res16: Results | None = None, compare: bool = True):
    fig, ax = _new_figure(3 if compare else 2, 2)
    ax = ax if compare else [ax[0], ax[1], None, ax[2], ax[3], None]  # the same panel slots
    res16 = res if res16 is None else res16
    k2 = _pairs(2, FIG14_K2)
    fl = _softmax_floor_line(th)
    loss_panel(ax[0], res, "nonlinear", "difficult", k2, fit=True, hlines=fl)
    _panel_title(ax[0], "a", "$k=2$; dashed: ensemble floor")
    loss_panel(ax[1], res16, "nonlinear", "difficult", _pairs(16, FIG14_K16), fit=True,
               hlines=fl if _has_k(res, 16) else None)
    _panel_title(ax[1], "b", "nonlinear, $k=16$" + ("" if _has_k(res, 16) else " (not in this preset)"))
    if compare:
        start_panel(ax[2], res, k2)
        _panel_title(ax[2], "e", "faithful vs spread start, $k=2$")
    _decomp_panel(ax[3], res, "nonlinear", k2, "C", "$C_L$")
    _panel_title(ax[3], "c", "$C_L$, $k=2$")
    _decomp_panel(ax[4], res, "nonlinear", k2, "gap", "$A_L - C_L$")
    _panel_title(ax[4], "d", "$A_L - C_L$, $k=2$")
    if compare:
        start_panel(ax[5], res, _pairs(16, FIG14_K16))
        _panel_title(ax[5], "f", "faithful vs spread start, $k=16$")
    return fig


def fig14_spread(res: Results, th: Theory):
    """fig14 drawn from the spread variant's runs (k = 16 with its own temperatures)."""
    return fig14(spread_view(res, 2), th, spread_view(res, 16), compare=False)


def _clustered_label(K: int) -> str:
    return "∞ (Haar)" if K == 0 else str(K)


def clustered(res: Results, th: Theory):
    """Beyond the paper, clustered contexts (App. D.2): (a) R_L vs L per number of context classes
    K with fits; (b) the specialisation index vs L per K >= 2, dashed: the same index with the class
    labels permuted (its sampling-noise level); (c) the deepest model's per-layer selection loss per
    class at the largest K, each class divided by its mean over layers (what the index measures)."""
    from depthscale.analysis import clustered_series
    from depthscale.registry import CLUSTERED_KS, CLUSTERED_SPECTRUM

    fig, ax = _new_figure(3, width=4.2, height=3.5)
    Ks = (*CLUSTERED_KS, 0)
    colors = _colors(len(Ks))
    series = {K: clustered_series(res, K) for K in Ks}
    Lmax = max(max(_clustered_depths(res)), 1)
    # (a) loss
    missing, degenerate = [], []
    for i, (K, col) in enumerate(zip(Ks, colors)):
        s = series[K]
        y = s.get("R")
        ok = np.isfinite(y) & (y > 0) if s else np.zeros(0, bool)
        if not s or not ok.any():
            missing.append(_clustered_label(K))
            continue
        f = fit_series(s, True)
        law = f is not None and f.ok
        if f is not None and not f.ok:
            degenerate.append(_clustered_label(K))
        _errorbar(ax[0], s.depths[ok], y[ok], s.se["R"][ok], marker=MARKERS[i % len(MARKERS)], color=col,
                  ls="none" if law else "-",
                  label=f"{_clustered_label(K)}: {fit_text(f)}" if law else _clustered_label(K))
        if law:
            Lg = np.geomspace(1, Lmax, 100)
            ax[0].plot(Lg, f.predict(Lg), color=col, lw=0.9, alpha=0.9)
    if len(missing) == len(Ks):
        _missing(ax[0])
    _loglog(ax[0])
    notes = (["missing: K = " + ", ".join(missing)] if missing and len(missing) < len(Ks) else []) \
        + (["no law drawn, degenerate fit: K = " + ", ".join(degenerate)] if degenerate else [])
    _finish_legend(ax[0], len(Ks), "classes $K$" + ("\n" + _wrap(notes, 40) if notes else ""), room=True)
    _panel_title(ax[0], "a", f"loss, $(a, b) = {label(*CLUSTERED_SPECTRUM)}$, $k=2$")
    # (b) specialisation index
    drawn = 0
    for i, (K, col) in enumerate(zip(Ks, colors)):
        if K < 2:
            continue
        s = series[K]
        y = s.get("specialisation")
        ok = np.isfinite(y) if s else np.zeros(0, bool)
        if not s or not ok.any():
            continue
        drawn += 1
        _errorbar(ax[1], s.depths[ok], y[ok], s.se["specialisation"][ok], marker=MARKERS[i % len(MARKERS)],
                  color=col, label=_clustered_label(K))
        null = s.get("specialisation_null")
        okn = np.isfinite(null)
        ax[1].plot(s.depths[okn], null[okn], color=col, ls="--", lw=0.8, alpha=0.8)
    _logx(ax[1])
    ax[1].set_ylabel("specialisation index $S_L$")
    ax[1].set_ylim(bottom=0)
    if not drawn:
        _missing(ax[1])
    _finish_legend(ax[1], 3, "classes $K$\n(dashed: labels permuted;\n$K=1$ and $L=1$: $S_L=0$)", room=True)
    _panel_title(ax[1], "b", "specialisation index")
    # (c) heat map of the deepest model at the largest K
    Kc = max(CLUSTERED_KS)
    s = series[Kc]
    arr = None
    if s:
        got = s.arrays.get("selection_layer_class", [])
        if got and got[-1] is not None:
            arr = np.asarray(got[-1][0], float)
    if arr is None or arr.ndim != 2:
        _missing(ax[2], "missing runs", blank=True)
        _panel_title(ax[2], "c", f"per-layer, per-class selection loss, $K={Kc}$")
    else:
        rel = arr / arr.mean(0, keepdims=True)  # each class over its mean over layers (its difficulty out) ...
        rel = rel / rel.mean(1, keepdims=True)  # ... then each layer over its own mean: the CVs S_L averages
        best = rel.argmin(1)
        order = np.lexsort((rel[np.arange(len(rel)), best], best))  # layers grouped by their best class
        span = float(np.nanmax(np.abs(rel - 1))) or 1.0
        im = ax[2].imshow(rel[order], aspect="auto", cmap="RdBu_r", vmin=1 - span, vmax=1 + span,
                          interpolation="nearest", extent=(-0.5, rel.shape[1] - 0.5, rel.shape[0] + 0.5, 0.5))
        ax[2].set_xticks(range(rel.shape[1]))
        nL = rel.shape[0]
        step = max(1, 2 ** math.ceil(math.log2(max(1, nL / 8))))  # at most ~8 labelled rows
        ax[2].set_yticks([1] + list(range(step, nL + 1, step)) if step > 1 else list(range(1, nL + 1)))
        ax[2].set_xlabel("context class $c$")
        ax[2].set_ylabel("layers, sorted by their best class")
        cb = fig.colorbar(im, ax=ax[2], shrink=0.9)
        cb.set_label("$E_{\\ell c}/\\bar{E}_c$, each layer over its mean\n(1 = no specialisation)", fontsize=7.5)
        L = int(s.depths[-1])
        _panel_title(ax[2], "c", f"selection loss per layer and class, $L={L}$, $K={Kc}$")
    return fig


def _clustered_depths(res: Results) -> tuple[int, ...]:
    """The clustered experiment's depths at this preset."""
    from depthscale.registry import REGISTRY

    return REGISTRY["clustered"].groups[0].depths_for(res.preset)


FIGURES: dict[str, Callable] = {"fig1": fig1, "fig3": fig3, "fig4": fig4, "fig5": fig5, "fig6": fig6,
                                "fig7": fig7, "fig8": fig8, "fig9": fig9, "fig10": fig10,
                                "fig11": fig11, "fig12": fig12, "fig13": fig13, "fig14": fig14,
                                "fig6-spread": fig6_spread, "fig14-spread": fig14_spread, "clustered": clustered}


# ---------------------------------------------------------------- beyond the paper: scaling

SCALING_TIME_DEPTHS = (1, 4, 16, 64)  # the depths whose training curves panels (c, d) draw


def _log_axis_ticks(axis, values=None) -> None:
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


def _width_panel(ax, res: Results, a: float, b: float, depths, widths) -> None:
    """R vs width N at fixed depths (colour and marker: depth; error bars: the evaluation SE), with
    the fit R_inf + c N^-beta where it is well posed; dotted: the deepest N = d run (what depth buys)."""
    from depthscale.analysis import fit_xy, width_series

    colors = _colors(len(depths))
    drawn, degenerate = 0, []
    for j, (L, col) in enumerate(zip(depths, colors)):
        w = width_series(res, "nonlinear", "difficult", 2, a, b, L, widths)
        if not len(w["N"]):
            continue
        drawn += 1
        f = fit_xy(w["N"], w["R"])
        law = f is not None and f.ok
        if not law:
            degenerate.append(f"{L}")
        _errorbar(ax, w["N"] * (1 + 0.02 * (j - (len(depths) - 1) / 2)), w["R"], w["R_se"],
                  marker=MARKERS[j % len(MARKERS)], color=col, ls="none" if law else "-",
                  label=rf"{L}: $\beta_N = {f.alpha:.2f} \pm {f.alpha_se:.2f}$" if law else f"{L}")
        if law:
            Ng = np.geomspace(w["N"].min(), w["N"].max(), 60)
            ax.plot(Ng, f.predict(Ng), color=col, lw=0.9)
    deep = res.series("nonlinear", "difficult", 2, a, b)
    if deep:
        ax.axhline(float(deep.get("R")[-1]), color="0.4", lw=0.8, ls=":",
                   label=f"$L = {int(deep.depths[-1])}$, $N = {widths[0]}$")
    ax.set_xscale("log", base=2)
    _log_axis_ticks(ax.xaxis, widths)
    ax.set_xlabel("width $N$")
    ax.set_ylabel("loss $R$")
    if not drawn:
        _missing(ax)
    notes = [f"no law drawn for L = {', '.join(degenerate)} (no well-posed fit)"] if degenerate else []
    _finish_legend(ax, drawn + 1, "depth $L$" + ("\n" + _wrap(notes, 40) if notes else ""), room=True)


def _time_panel(ax, res: Results, a: float, b: float, depths) -> None:
    """The monitor loss vs training step after warmup at fixed depths, with the fit
    R_inf + c t^-beta over those steps; shaded: where the cosine rate is below half its peak."""
    from depthscale.analysis import time_curve, time_fit, time_window

    colors = _colors(len(depths))
    drawn, degenerate, cur0 = 0, [], None
    for i, (L, col) in enumerate(zip(depths, colors)):
        cur = time_curve(res, "nonlinear", "difficult", 2, a, b, L)
        if cur is None:
            continue
        cur0 = cur0 or cur
        drawn += 1
        lo, hi = time_window(cur["warmup"], cur["max_steps"], "after_warmup")
        keep = (cur["t"] > lo) & (cur["t"] <= hi)
        f = time_fit(cur, "after_warmup")
        law = f is not None and f.ok
        if not law:
            degenerate.append(f"{L}")
        ax.plot(cur["t"][keep], cur["y"][keep], marker=MARKERS[i % len(MARKERS)], ms=2.5, lw=0.6, color=col,
                alpha=0.8, label=rf"{L}: $\beta_t = {f.alpha:.2f} \pm {f.alpha_se:.2f}$" if law else f"{L}")
        if law:
            tg = np.geomspace(cur["t"][keep].min(), hi, 80)
            ax.plot(tg, f.predict(tg), color=col, lw=1.4)
    ax.set_xscale("log")
    if cur0 is not None and cur0["schedule"] == "cosine":
        half = time_window(cur0["warmup"], cur0["max_steps"], "early")[1]
        ax.axvspan(half, cur0["max_steps"] * 1.05, color="0.9", zorder=0, label="cosine rate < ½ peak")
    _logy(ax)
    _log_axis_ticks(ax.xaxis)
    ax.set_xlabel("training step $t$ (after warmup)")
    ax.set_ylabel("monitor loss $R(t)$")
    if not drawn:
        _missing(ax, "missing runs or curves")
    notes = [f"no law drawn for L = {', '.join(degenerate)} (no well-posed fit)"] if degenerate else []
    _finish_legend(ax, drawn + 1, r"depth $L$; fit $R_\infty + c\,t^{-\beta_t}$"
                   + ("\n" + _wrap(notes, 40) if notes else ""), room=True)


def scaling(res: Results, th: Theory):
    """Beyond the paper: loss vs depth (fig6's runs), width and training step at the same spectra;
    one row per spectrum, so that each panel's axis spans one spectrum's loss."""
    from depthscale.config import geometry
    from depthscale.registry import SCALING_DEPTHS, SCALING_SPECTRA, SCALING_WIDTHS

    spectra = SCALING_SPECTRA[:2]
    fig, ax = _new_figure(3, len(spectra), width=4.0, height=3.4)
    N0 = geometry(res.preset, "nonlinear")["N"]
    all_L = depth_set(res.preset, "all")
    depths = [L for L in SCALING_DEPTHS if L <= all_L[-1]]
    tdepths = [L for L in SCALING_TIME_DEPTHS if L in all_L] or list(all_L)
    letters = "abcdef"
    for r, (a, b) in enumerate(spectra):
        p = ax[3 * r:3 * r + 3]
        loss_panel(p[0], res, "nonlinear", "difficult", [(2, (a, b))], fit=True)
        _panel_title(p[0], letters[3 * r], rf"depth at {label(a, b)}: $N = d = {N0}$")
        _width_panel(p[1], res, a, b, depths, (N0,) + SCALING_WIDTHS)
        _panel_title(p[1], letters[3 * r + 1], f"width at {label(a, b)}: fixed depth")
        _time_panel(p[2], res, a, b, tdepths)
        _panel_title(p[2], letters[3 * r + 2], rf"time at {label(a, b)}: $N = {N0}$, monitor contexts")
    return fig


FIGURES["scaling"] = scaling

def looped(res: Results, th: Theory):
    """Looped stacks (beyond the paper): per cascaded variant (rows), untied and B distinct layers
    repeated L/B times (B = 1, 2, 4): loss, C_L and A_L - C_L vs depth, and loss vs trained parameters.
    A tied curve starts at the untied L = B run: at L = B the looped model is that model."""
    from depthscale import looped as lp

    models = (("single_stream", "single stream"), ("context_updates", "context updates"))
    fig, ax = _new_figure(4, len(models), width=3.4, height=3.0)
    colors = _colors(len(lp.TYINGS))
    letters = iter("abcdefghijklmnop")
    tying_lab = lambda B: "untied" if B == 0 else f"$B={B}$"  # noqa: E731
    for row, (model, name) in enumerate(models):
        axs = ax[4 * row:4 * row + 4]
        curves = {B: lp.curve(res, model, B) for B in lp.TYINGS}
        d, _ = preset_shape(res.preset, model)
        from depthscale.config import geometry

        N = geometry(res.preset, model)["N"]
        drawn = [0, 0, 0, 0]
        for i, B in enumerate(lp.TYINGS):
            rows = curves[B]
            if not rows:
                continue
            kw = dict(marker=MARKERS[i % len(MARKERS)], color=colors[i], ls="-" if B == 0 else "--",
                      label=tying_lab(B))
            L = np.array([r["L"] for r in rows], float)
            for j, key in enumerate(("R", "C", "A_minus_C")):  # one seed: no SE over seeds to draw
                y = np.array([r[key] for r in rows], float)
                ok = np.isfinite(y) & ((L > 1) if j else True) & ((y > 0) if j != 1 else True)
                if ok.any():
                    _errorbar(axs[j], L[ok], y[ok], None, **kw)
                    drawn[j] += 1
            n = np.array([lp.n_params(model, d, N, int(Lr), B) for Lr in L], float)
            y = np.array([r["R"] for r in rows], float)
            ok = np.isfinite(y)
            if ok.any():  # a tied curve is vertical: depth adds no parameters
                axs[3].plot(n[ok], y[ok], **kw, ms=4, lw=1.1)
                drawn[3] += 1
                for Lr, nx, yy in zip(L[ok], n[ok], y[ok]):  # untied: every depth; tied: the deepest
                    if B == 0 or (Lr == L[ok].max() and ok.sum() > 1):
                        axs[3].annotate(f"$L={int(Lr)}$", (nx, yy), textcoords="offset points",
                                        xytext=(4, -3) if B else (-4, 4), ha="left" if B else "right",
                                        fontsize=6.5, color=colors[i])
        _loglog(axs[0])
        _logx(axs[1])
        axs[1].axhline(0.0, color="0.6", lw=0.6)
        axs[1].set_ylabel("$C_L$")
        _loglog(axs[2], ylabel="$A_L - C_L$")
        axs[3].set_xscale("log")
        lo, hi = axs[3].get_xlim()
        axs[3].set_xlim(lo / 1.3, hi * 1.3)  # room for the depth labels
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        counts = sorted({lp.n_params(model, d, N, r["L"], B) for B in lp.TYINGS for r in curves[B]})
        if counts:  # ticks at the parameter counts drawn (one per distinct-layer count), as integers
            axs[3].xaxis.set_major_locator(FixedLocator(counts))
            axs[3].xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
            axs[3].xaxis.set_minor_locator(NullLocator())
        axs[3].set_xlabel("trained parameters")
        axs[3].set_ylabel("loss $R_L$")
        _logy(axs[3])
        titles = (f"{name}: loss", f"{name}: $C_L$", f"{name}: $A_L - C_L$", f"{name}: loss vs parameters")
        for j in range(4):
            if not drawn[j]:
                _missing(axs[j])
            title = "tying, (0,0), $k=2$" + ("\n$B$ layers looped $L/B$ times;\nfrom the untied $L=B$ model" if j == 0 else "")
            _finish_legend(axs[j], len(lp.TYINGS), title, room=j != 1)
            _panel_title(axs[j], next(letters), titles[j])
    return fig


FIGURES["looped"] = looped


def transformer(res: Results, th: Theory):
    """Beyond the paper: a pre-LN Transformer read through the decomposition (0,0), k = 2. (a) R_L
    of the Transformer and of the controlled nonlinear model (fig6's runs, if stored) with their
    fits; (b) the Transformer's A_L, C_L, A_L - C_L (linear y: C_L may be negative); (c) A_L - C_L
    of both models (does it settle, as claim 6 asks, or grow?)."""
    from depthscale.registry import transformer_depths

    fig, ax = _new_figure(3, width=3.9)
    tr = res.series("transformer", "difficult", 2, 0.0, 0.0, transformer_depths(res.preset))
    nl = res.series("nonlinear", "difficult", 2, 0.0, 0.0)
    models = (("pre-LN Transformer", tr, "tab:red", "o"), ("controlled nonlinear (fig6)", nl, "tab:blue", "s"))
    drawn, absent = 0, []
    for name, s, col, mk in models:
        y = s.get("R") if s else np.zeros(0)
        ok = np.isfinite(y) & (y > 0) if s else np.zeros(0, bool)
        if not ok.any():
            absent.append(name)
            continue
        drawn += 1
        f = fit_series(s, True)
        law = f is not None and f.ok
        err = s.se["R"] if np.isfinite(s.se["R"]).any() else s.get("R_se")  # one seed: the evaluation SE
        _errorbar(ax[0], s.depths[ok], y[ok], err[ok], marker=mk, color=col,
                  label=f"{name}: {fit_text(f)}" if law else f"{name}" + ("" if f is None else " (fit degenerate)"),
                  ls="none" if law else "-")
        if law:
            Lg = np.geomspace(1, s.depths[ok][-1], 100)
            ax[0].plot(Lg, f.predict(Lg), color=col, lw=0.9, alpha=0.9)
    _loglog(ax[0])
    if not drawn:
        _missing(ax[0])
    _finish_legend(ax[0], 2, r"(0,0), $k=2$; fits $L_0 + c\,L^{-\alpha}$"
                   + "".join(f"\nnot stored: {n}" for n in absent if drawn), room=True)
    _panel_title(ax[0], "a", "loss vs depth (bars: SE)")
    if tr:
        for metric, col, mk, lab in (("A", "tab:green", "^", "$A_L$"), ("gap", "tab:orange", "D", "$A_L - C_L$"),
                                     ("R", "tab:red", "o", "$R_L$"), ("C", "tab:purple", "s", "$C_L$")):
            y = tr.get(metric)
            ok = np.isfinite(y) & ((tr.depths > 1) if metric in ("C", "gap") else True)
            err = tr.get("R_se") if metric == "R" and not np.isfinite(tr.se["R"]).any() else tr.se[metric]
            _errorbar(ax[1], tr.depths[ok], y[ok], err[ok], marker=mk, color=col, label=lab)
        ax[1].axhline(0.0, color="0.6", lw=0.7)
        v = tr.get("var_ystar")
        if np.isfinite(v).any():
            ax[1].axhline(float(np.nanmean(v)), color="0.4", ls="--", lw=0.8, label=r"Var$(y^*)$")
        _finish_legend(ax[1], 5, "pre-LN Transformer", room=True)
    else:
        _missing(ax[1])
    _logx(ax[1])
    ax[1].set_ylabel("$A_L$, $C_L$, $R_L$")
    _panel_title(ax[1], "b", "Transformer: the decomposition, (0,0), $k=2$")
    drawn = 0
    for name, s, col, mk in models:
        y = s.get("gap") if s else np.zeros(0)
        ok = np.isfinite(y) & (s.depths > 1) & (y > 0) if s else np.zeros(0, bool)
        if ok.any():
            _errorbar(ax[2], s.depths[ok], y[ok], s.se["gap"][ok], marker=mk, color=col, label=name)
            drawn += 1
    _loglog(ax[2], ylabel="$A_L - C_L$")
    if not drawn:
        _missing(ax[2])
    _finish_legend(ax[2], 2, r"(0,0), $k=2$", room=True)
    _panel_title(ax[2], "c", "$A_L - C_L$: settles or grows?")
    return fig


FIGURES["transformer"] = transformer

def write_figure(fig_id: str, res: Results, th: Theory, out_dir: str | Path) -> list[Path]:
    """Build figure `fig_id` and write <out_dir>/<fig_id>.png and .pdf."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    from matplotlib import rc_context

    with rc_context(STYLE):  # no title or preset inside the figure: the report carries both
        fig = FIGURES[fig_id](res, th)
        paths = [out_dir / f"{fig_id}.png", out_dir / f"{fig_id}.pdf"]
        fig.savefig(paths[0], dpi=110)
        fig.set_layout_engine("none")  # keep the constrained layout computed for the PNG
        fig.savefig(paths[1])
    return paths


__all__ = ["FIGURES", "STYLE", "write_figure", "loss_panel", "log_ticks", "tick_text", "fit_text"]
