"""The variants of paper Appendix C (SPEC §3.3, §7): fig9 (single stream), fig10 (per-layer
values), fig11 (context updates: loss, learned m) and fig12 (its layer-1 context attention), with
claims 8a, 8b and 9.

Operational choices:
- 8a: loss fit of each variant (single_stream, layer_values, context_updates; k = 2, (0,0)) over its
  own depths: well posed, alpha in [0.6, 1.3], R² >= 0.95.
- 8b: m at L = 1 is left out (at L = 1 the context states are updated after the only read of
  them: m gets no gradient and keeps its initial 0): m < 0 at every L >= 2 and max - min < 0.5.
- 9: rho at every L >= 2 (at L = 1 the context block never reaches the output).
- the unpackable variants (single_stream, context_updates) train depths up to the preset's
  VARIANT_MAX_DEPTH (records.model_depths).
"""

from __future__ import annotations

import math

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.claims import (MissingRuns, combine, fit_problem, fitted, gate, gated, judged, num, outcome, present_ks,
                                        require, shape_verdict, yes)
from depthscale.analysis.curves import loss_fit
from depthscale.analysis.results import Results, Theory
from depthscale.config.paper import ORIGIN, PAPER
from depthscale.config.records import PRESET_KS, Claim, Experiment, RunGroup, register

R2_8A = 0.95  # claim 8a's R² threshold (SPEC §9): a fit below it is drawn dashed

G_CU = (RunGroup("context_updates", "difficult", 2, ORIGIN),
        RunGroup("context_updates", "difficult", 16, ORIGIN))


def controlled_ratio_note(ax, res: Results, model: str, k: int = 2) -> None:
    """A caption line comparing a variant's loss with the controlled nonlinear model's at the same
    spectrum (0,0) and depth (the deepest both have): fig9's single stream sat at 3x."""
    v = res.series(model, "difficult", k, 0.0, 0.0)
    c = res.series("nonlinear", "difficult", k, 0.0, 0.0)
    both = sorted(set(v.depths.tolist()) & set(c.depths.tolist())) if v and c else []
    if not both:
        return
    L = both[-1]
    rv, rc = float(v.get("R")[list(v.depths).index(L)]), float(c.get("R")[list(c.depths).index(L)])
    if math.isfinite(rv) and math.isfinite(rc) and rc > 0:
        pl.note(ax, f"at L={L} the loss is {rv / rc:.2f}x the controlled nonlinear model's ({rv:.3g} vs {rc:.3g}, "
                    f"(0,0), k={k})")


def _variant_figure(res: Results, model: str, name: str):
    fig, ax = pl.new_figure(2)
    pl.loss_panel(ax[0], res, model, "difficult", pl.pairs(2, ORIGIN), fit=True, r2_min=R2_8A)
    controlled_ratio_note(ax[0], res, model)
    pl.panel_title(ax[0], "a", f"{name}: loss, (0,0), $k=2$")
    s = res.series(model, "difficult", 2, 0.0, 0.0)
    series = []
    for metric, col, lab in (("C", "tab:blue", "$C_L$"), ("gap", "tab:orange", "$A_L - C_L$")):
        y = s.get(metric) if s else np.zeros(0)
        ok = np.isfinite(y) & (s.depths > 1) if s else np.zeros(0, bool)
        if ok.any():
            series.append((s.depths[ok], y[ok], s.se[metric][ok], col, lab))
    # a log axis would silently drop a C_L <= 0 (fig10's C_2 was): then the axis is linear, and says so
    log = all(np.all(y > 0) for _, y, _, _, _ in series)
    for x, y, se, col, lab in series:
        pl.errorbar(ax[1], x, y, se, marker="o", color=col, label=lab)
    if log:
        pl.loglog(ax[1], ylabel="$C_L$, $A_L - C_L$")
    else:
        pl.logx(ax[1])
        ax[1].axhline(0.0, color="0.6", lw=0.6)
        ax[1].set_ylabel("$C_L$, $A_L - C_L$ (linear axis: a value is $\\leq 0$)")
    if not series:
        pl.missing(ax[1])
    pl.finish_legend(ax[1], 2, "(0,0), $k=2$")
    pl.panel_title(ax[1], "b", f"{name}: decomposition")
    return fig


def fig9(res: Results, th: Theory):
    return _variant_figure(res, "single_stream", "single stream")


def fig10(res: Results, th: Theory):
    return _variant_figure(res, "layer_values", "per-layer values")


def _context_updates_panel(ax, res: Results, metric: str, name: str, refs, ylabel: str, letter: str,
                           title: str, n_legend: int, min_depth: int = 1) -> None:
    """`metric` of the context_updates model at (0,0) vs depth for k = 2 and 16 (legend `name`
    with k filled in), at depths >= `min_depth`, with horizontal reference lines `refs`
    [(value, axhline kwargs)]."""
    drawn = 0
    for k, col in zip((2, 16), pl.colors(2)):
        s = res.series("context_updates", "difficult", k, 0.0, 0.0)
        y = s.get(metric) if s else np.zeros(0)
        ok = np.isfinite(y) & (s.depths >= min_depth) if s else np.zeros(0, bool)
        if ok.any():
            pl.errorbar(ax, s.depths[ok], y[ok], s.se[metric][ok], marker="o", color=col, label=name.format(k))
            drawn += 1
    for value, kw in refs:
        ax.axhline(value, **kw)
    pl.logx(ax)
    ax.set_ylabel(ylabel)
    if not drawn:
        pl.missing(ax)
    pl.finish_legend(ax, n_legend, "(0,0)")
    pl.panel_title(ax, letter, title)


def fig11(res: Results, th: Theory):
    fig, ax = pl.new_figure(2)
    pl.loss_panel(ax[0], res, "context_updates", "difficult", [(k, ORIGIN[0]) for k in (2, 16)], fit=True, r2_min=R2_8A)
    controlled_ratio_note(ax[0], res, "context_updates")
    s2 = res.series("context_updates", "difficult", 2, 0.0, 0.0)
    R2 = s2.get("R") if s2 else np.zeros(0)
    if len(R2) > 1 and np.all(np.isfinite(R2)) and R2[-1] > R2[0]:
        # depth never hurts a converged stack (SPEC §4, doubling): a rise is the optimiser's
        pl.note(ax[0], f"k=2: the loss rises with depth ({R2[0]:.3g} at L={s2.depths[0]} to {R2[-1]:.3g} at "
                       f"L={s2.depths[-1]}): a sign that the deep runs have not converged, not a law")
    pl.panel_title(ax[0], "a", "context updates: loss, (0,0)")
    m16 = PAPER["context_updates"]["m_top16"]
    paper = [(m16, dict(color="0.5", ls="--", lw=0.8, label=f"paper, $k=16$: $m = {m16:g}$"))]
    _context_updates_panel(ax[1], res, "m", "$k={}$", paper, "learned $m$", "b",
                           "learned context-update strength $m$", 3)
    return fig


def _mean_attention_maps(res: Results) -> dict:
    """{k: (A, series, index)} of the deepest run with a mean A_1 map, for k = 2 and 16."""
    maps = {}
    for k in (2, 16):
        s = res.series("context_updates", "difficult", k, 0.0, 0.0)
        arrs = s.arrays.get("A1_mean", []) if s else []
        j = max((j for j, x in enumerate(arrs) if x is not None), default=None)
        if j is not None:
            maps[k] = (np.asarray(arrs[j][0], float), s, j)
    return maps


def fig12(res: Results, th: Theory):
    """(a, b) the mean A_1 maps on ONE colour scale (a separate scale per map made the k = 16 map,
    rho 0.13, look like the k = 2 one, rho 0.92); (c) rho at L >= 2 (at L = 1 the context block
    never reaches the output, SPEC §9 claim 9)."""
    fig, ax = pl.new_figure(3, width=3.8, height=3.5)
    maps = _mean_attention_maps(res)
    values = np.concatenate([A[np.isfinite(A)] for A, _, _ in maps.values()]) if maps else np.zeros(0)
    lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
    im = None
    for i, k in enumerate((2, 16)):
        if k not in maps:
            pl.missing(ax[i], "missing runs" + ("" if pl.has_k(res, k) else f" (k={k} not in this preset)"),
                       blank=True)
            pl.panel_title(ax[i], "ab"[i], f"mean $A_1$, $k={k}$")
            continue
        A, s, j = maps[k]
        im = ax[i].imshow(A, cmap="magma", interpolation="nearest", vmin=lo, vmax=hi)
        rho, r2 = s.get("rho")[j], s.get("rho_r2")[j]
        pl.panel_title(ax[i], "ab"[i], rf"mean $A_1$, $k={k}$, $L={s.depths[j]}$: $\rho={rho:.3g}$, $R^2={r2:.4g}$")
        ax[i].set_xlabel("context token")
        ax[i].set_ylabel("context token")
    if im is not None:
        fig.colorbar(im, ax=[ax[0], ax[1]], shrink=0.8, label="attention weight")  # one scale for (a) and (b)
    paper = [(PAPER["context_updates"][key], dict(color="0.5", ls="--", lw=0.7)) for key in ("rho_top2", "rho_top16")]
    _context_updates_panel(ax[2], res, "rho", "$k={}$", paper,
                           r"$\rho$ in $A_1 \approx \rho I + (1-\rho)\,\mathbf{1}\mathbf{1}^\top/P$", "c",
                           r"$\rho$ vs depth, $L \geq 2$ (dashed: paper)", 2, min_depth=2)
    return fig


def c8a(res, th):
    items = [("single_stream", 2), ("layer_values", 2), ("context_updates", 2)]
    for model, k in items:
        require(res, model, "difficult", k, ORIGIN)
    meas, parts, verdicts = {}, [], []
    for model, k in items:
        s, f = loss_fit(res, model, "difficult", k, 0.0, 0.0)
        a_ok = f is not None and 0.6 <= f.alpha <= 1.3
        r2_ok = f is not None and f.r2 >= R2_8A
        good = bool(not fit_problem(f) and a_ok and r2_ok)
        cert, problem = gate(res, [(model, "difficult", k, 0.0, 0.0, None)])
        v, why = shape_verdict(good, problem, None, (f,), s)
        verdicts.append(v)
        meas[model] = {"alpha": f.alpha if f else None, "alpha_se": f.alpha_se if f else None,
                       "r2": f.r2 if f else None, "fit_status": f.status if f else None, "verdict": v,
                       "certificates": cert}
        parts.append(f"{model} {fitted(f)}: α in [0.6, 1.3] {yes(a_ok)}, R² >= 0.95 {yes(r2_ok)} → "
                     f"{outcome(v, why, good, f)}")
    return meas, combine(verdicts), judged(
        "well-posed fit with α in [0.6, 1.3] and R² >= 0.95, each variant (k = 2, (0,0), its own depths); a degenerate "
        "fit INCONCLUSIVE (FAIL where R_1 - R_Lmax is within 2 SE); a variant reading a depth that fails a "
        "certificate (SPEC §4) INCONCLUSIVE", parts)


def c8b(res, th):
    present_ks(res, [(16, ORIGIN)])
    require(res, "context_updates", "difficult", 16, ORIGIN)
    s = res.series("context_updates", "difficult", 16, 0.0, 0.0)
    R = dict(zip(s.depths.tolist(), s.get("R")))
    Lmax = int(s.depths[-1])
    if 2 not in R:
        raise MissingRuns("missing runs: context_updates/difficult k=16 (0,0) L=2")
    ratio = float(R[2] / R[Lmax])
    deep = s.depths >= 2
    m = s.get("m")[deep]
    neg = bool(np.all(np.isfinite(m)) and np.all(m < 0))
    spread = float(np.max(m) - np.min(m)) if m.size else math.nan
    flat = bool(spread < 0.5)
    sat = bool(ratio <= 1.1)
    ok = sat and neg and flat
    # the certificates of the depths it reads (R_2, R_Lmax, m at L >= 2): L = 1 decides nothing here
    cert, problem = gate(res, [("context_updates", "difficult", 16, 0.0, 0.0, s.depths[deep].tolist())])
    detail = judged("k = 16: R_2 <= 1.1 · R_Lmax; m < 0 at every L >= 2 and max - min of m over L >= 2 < 0.5; the "
                    "depths it reads (L >= 2) failing a certificate (SPEC §4): INCONCLUSIVE",
                    [f"R_2={num(R[2])}, R_{Lmax}={num(R[Lmax])}: ratio {num(ratio)} {yes(sat)}",
                     "m " + ", ".join(f"L={L}: {num(x)}" for L, x in zip(s.depths[deep].tolist(), m))
                     + f": all < 0 {yes(neg)}, spread {num(spread)} < 0.5 {yes(flat)} "
                     f"(paper m ≈ {PAPER['context_updates']['m_top16']})"]
                    + ([f"→ {outcome(gated(ok, problem), problem, ok)}"] if problem else []))
    return {"R2_over_RLmax": ratio, "m": {f"L={L}": float(x) for L, x in zip(s.depths[deep].tolist(), m)},
            "m_spread": spread, "certificates": cert}, gated(ok, problem), detail


def c9(res, th):
    present_ks(res, [(2, ORIGIN), (16, ORIGIN)])
    meas, parts, verdicts = {}, [], []
    for k, test, name in ((2, lambda r: r > 0.9, "> 0.9"), (16, lambda r: r < 0.3, "< 0.3")):
        if k not in PRESET_KS[res.preset]:
            raise MissingRuns(f"missing runs (k={k} is not part of the {res.preset} preset)")
        require(res, "context_updates", "difficult", k, ORIGIN)
        s = res.series("context_updates", "difficult", k, 0.0, 0.0)
        deep = s.depths >= 2
        if not deep.any():
            raise MissingRuns(f"missing runs: context_updates/difficult k={k} (0,0) at L >= 2")
        Ls, rho, r2 = s.depths[deep].tolist(), s.get("rho")[deep], s.get("rho_r2")[deep]
        good = bool(np.all(np.isfinite(rho)) and all(test(r) for r in rho))
        cert, problem = gate(res, [("context_updates", "difficult", k, 0.0, 0.0, Ls)])
        verdicts.append(gated(good, problem))
        meas[f"rho_{k}"] = {f"L={L}": float(r) for L, r in zip(Ls, rho)}
        meas[f"certificates_{k}"] = cert
        paper = PAPER["context_updates"][f"rho_top{k}"]
        parts.append(f"ρ_{k} " + ", ".join(f"L={L}: {num(r)}" for L, r in zip(Ls, rho))
                     + f" (fit R² {num(np.nanmin(r2))}–{num(np.nanmax(r2))}; paper {paper}) {name} at every L >= 2: "
                     f"{yes(good)}" + (f" → {outcome(verdicts[-1], problem, good)}" if problem else ""))
    return meas, combine(verdicts), judged("ρ_2 > 0.9 and ρ_16 < 0.3 at every L >= 2; depths failing a certificate "
                                           "(SPEC §4): INCONCLUSIVE", parts)


CLAIMS = (
    Claim("8a", "Variants keep an inverse-depth signal",
          "α ∈ [0.6, 1.3], R² >= 0.95, from a non-degenerate fit, for single_stream, layer_values, context_updates "
          "(k = 2)", c8a, ("fig9", "fig10", "fig11"), part="paper"),
    Claim("8b", "Context updates, k = 16: saturates, m negative and nearly constant",
          "R_2 <= 1.1 · R_Lmax; m negative and nearly constant (spread < 0.5) at every L >= 2", c8b, ("fig11",), part="paper"),
    Claim("9", "Context attention: identity-like for k = 2, flat for k = 16",
          "ρ_2 > 0.9 and ρ_16 < 0.3 at every L >= 2", c9, ("fig12",), part="paper"),
)
CLAIM = {c.id: c for c in CLAIMS}


FIG9 = register(Experiment(
    "fig9", "Variant: single stream", ("single_stream",), "difficult", (2,), "(0,0)",
    "loss, C_L, A_L - C_L vs L", (RunGroup("single_stream", "difficult", 2, ORIGIN),), figure=fig9,
    claims=(CLAIM["8a"],)))
FIG10 = register(Experiment(
    "fig10", "Variant: per-layer values", ("layer_values",), "difficult", (2,), "(0,0)",
    "loss, C_L, A_L - C_L vs L", (RunGroup("layer_values", "difficult", 2, ORIGIN),), figure=fig10))
FIG11 = register(Experiment(
    "fig11", "Variant: context updates", ("context_updates",), "difficult", (2, 16),
    "(0,0)", "loss vs L; learned m vs L", G_CU, figure=fig11, claims=(CLAIM["8b"],)))
FIG12 = register(Experiment(
    "fig12", "Context updates: layer-1 context attention", ("context_updates",),
    "difficult", (2, 16), "(0,0)", "mean A_1 heat maps; rho_k and R^2", G_CU,
    reuses=("fig11",), figure=fig12, claims=(CLAIM["9"],)))
