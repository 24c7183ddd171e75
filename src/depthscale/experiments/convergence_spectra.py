"""The convergence study at four more spectra (SPEC §9, "More spectra"; issue 48 items 1, 4, 5): is
the depth shape that (0, 0) measured (not reproduced, depthscale.experiments.convergence) the same
where the spectrum changes?

Fixed in advance by SPEC §9 from (0, 0)'s outcome, never chosen by the claim's statistic:
- the spectra, in this order: (1,0), (0,1), (0.5,0.5) at k = 2 and the top-16 (0,0.5) at k = 16,
  depths 1 … 64 (1 … 128 for the top-16 spectrum; the smoke preset keeps its own depths, and has
  no k = 16);
- per depth two points, {the point that depth chose at (0, 0), faithful-3e-3-flat}: the (0, 0)
  choice is the table CHOSEN_00 (the committed studies/results/convergence/decision.json's
  "chosen"; L = 128 takes L = 64's point), so every run is known before any is trained;
- budgets convergence.BUDGETS (5,000 / 10,000 / 20,000 at cpu) at the study's batch, seeds SEEDS
  (0, 1, 2); `followup` adds MORE_SEEDS (3, 4) to every run of a spectrum where claim 5a's power on
  its 3-seed monitor-best envelope is below 0.8 (or cannot be computed: the safe side).
Read per spectrum (`spectrum_rows`, the (0, 0) study's functions reused: convergence._curve, _fit,
certify_row, power_row, drops, decision): per budget the envelope (per depth the point with the
lowest seed-mean final monitor loss at that budget) and the faithful start; the monitor-best
envelope over points and budgets (SPEC §4), on which convergence.decision applies SPEC §9's rule;
and (issue 48 item 4) C_L and A_L − C_L of that envelope with the slope γ of log(A_L − C_L) against
log L (`gamma_fit`): R_L = C_L + (A_L − C_L)/L, so the part of R_L that falls with depth goes as
L^(γ−1) — the paper's 1/L needs γ = 0 (the layers' disagreement settling).

Each spectrum is its own experiment (`convergence-spectra-<tag>`, trained and exported alone, so the
first spectra finish first when run in order); `convergence-spectra` trains all four at once.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from depthscale.analysis import plotting as pl
from depthscale.analysis.results import Results, Theory
from depthscale.base.errors import InputError
from depthscale.base.formatting import label
from depthscale.config.records import PRESET_DEPTHS, PRESET_KS, Experiment, RunGroup, register
from depthscale.experiments import convergence as cv


class Spectrum(NamedTuple):
    a: float
    b: float
    k: int
    tag: str  # the experiment id's suffix and the export folder's name


SPECTRA = (Spectrum(1.0, 0.0, 2, "1-0"), Spectrum(0.0, 1.0, 2, "0-1"), Spectrum(0.5, 0.5, 2, "05-05"),
           Spectrum(0.0, 0.5, 16, "top16"))  # SPEC §9's order
# the point each depth chose at (0, 0) (studies/results/convergence/decision.json, "chosen")
CHOSEN_00 = {1: "constructive-1e-3-flat", 2: "constructive-1e-3-taper", 4: "constructive-1e-3-taper",
             8: "constructive-3e-3-taper", 16: "constructive-3e-3-flat", 32: "constructive-3e-3-flat",
             64: "constructive-3e-3-flat"}
DEPTHS = {2: (1, 2, 4, 8, 16, 32, 64), 16: (1, 2, 4, 8, 16, 32, 64, 128)}  # per k (cpu and paper)
SEEDS = (0, 1, 2)
MORE_SEEDS = (3, 4)  # where 5a's power at SEEDS is below convergence.POWER_MIN
ID = "convergence-spectra"
RULE = ("SPEC §9 (more spectra): per depth the grid {the point chosen at (0,0), faithful-3e-3-flat} x the "
        f"budgets, seeds 0-2 (0-4 where 5a's power at 3 seeds is below {cv.POWER_MIN:g}); the envelope takes per "
        "depth the point and budget with the lowest seed-mean final monitor loss; then the (0,0) study's rule: "
        + cv.RULE)


def rule(preset: str) -> str:
    """RULE with the preset's budgets."""
    return RULE.replace("the budgets", "budgets " + " / ".join(f"{s:,}" for s in cv.BUDGETS[preset]), 1)


def spectrum(text: str) -> Spectrum:
    """The spectrum named 'a,b' (e.g. '1,0', '0.5,0.5', '0,0.5' for the top-16) or by its tag."""
    for s in SPECTRA:
        if text == s.tag:
            return s
    try:
        a, b = (float(v) for v in text.split(","))
    except ValueError:
        a = b = math.nan
    found = [s for s in SPECTRA if (s.a, s.b) == (a, b)]
    if not found:
        raise InputError(f"spectrum must be one of {', '.join(f'{s.a:g},{s.b:g}' for s in SPECTRA)}, got {text!r}")
    return found[0]


def spectrum_depths(preset: str, spec: Spectrum) -> tuple[int, ...]:
    """The spectrum's depths: DEPTHS[k] (beyond the cpu preset's 64 for the top-16), the smoke
    preset's own below them."""
    if preset == "smoke":
        return tuple(L for L in DEPTHS[spec.k] if L <= max(PRESET_DEPTHS[preset]))
    return DEPTHS[spec.k]


def points(L: int) -> tuple[str, ...]:
    """The grid at depth L: the point L chose at (0, 0) (deeper than the table: its deepest's), then
    the faithful start as trained."""
    chosen = CHOSEN_00[L] if L in CHOSEN_00 else CHOSEN_00[max(CHOSEN_00)]
    return tuple(dict.fromkeys((chosen, cv.FAITHFUL)))


class _Depths(RunGroup):
    """A group trained at exactly its depths (RunGroup caps explicit depths at the preset's deepest:
    the top-16 spectrum goes to 128 at cpu)."""

    def depths_for(self, preset: str) -> tuple[int, ...]:
        return tuple(self.depths)


def spectrum_groups(spec: Spectrum) -> tuple[RunGroup, ...]:
    """Every run of one spectrum at every preset that has its k: per budget and point, the depths
    that read that point."""
    out = []
    for p in cv.STUDY_BATCH:
        if spec.k not in PRESET_KS[p]:
            continue
        for steps in cv.BUDGETS[p]:
            by_point: dict[str, list[int]] = {}
            for L in spectrum_depths(p, spec):
                for name in points(L):
                    by_point.setdefault(name, []).append(L)
            out += [_Depths("nonlinear", "difficult", spec.k, ((spec.a, spec.b),), tuple(Ls),
                            tuple(sorted(cv.study_fields(p, name, steps).items())), (p,))
                    for name, Ls in by_point.items()]
    return tuple(out)


def _finished(res: Results, spec: Spectrum, name: str, steps: int, L: int) -> list[dict]:
    return [r for r in res.view(**cv.study_fields(res.preset, name, steps)).runs(
                "nonlinear", "difficult", spec.k, spec.a, spec.b, L)
            if math.isfinite(r.get("final_monitor_loss", math.nan)) and math.isfinite(r.get("R", math.nan))]


def monitor_table(res: Results, spec: Spectrum, seeds=SEEDS) -> list[dict]:
    """Per depth, point and budget: the seed-mean final monitor loss over `seeds` (None unless every
    one of them is finished) and how many are."""
    out = []
    for L in spectrum_depths(res.preset, spec):
        for steps in cv.BUDGETS[res.preset]:
            for name in points(L):
                rows = [r for r in _finished(res, spec, name, steps, L) if int(r["seed"]) in set(seeds)]
                full = len(rows) >= len(seeds)
                out.append({"L": L, "recipe": name, "steps": steps, "seeds": len(rows),
                            "monitor": float(np.mean([r["final_monitor_loss"] for r in rows])) if full else None})
    return out


def envelope_picks(res: Results, spec: Spectrum, seeds=SEEDS, budgets=None) -> dict:
    """{L: (point, steps)}: per depth the point and budget (among `budgets`, default all) with the
    lowest seed-mean final monitor loss, every one of `seeds` finished (SPEC §4; never R_L)."""
    budgets = set(cv.BUDGETS[res.preset] if budgets is None else budgets)
    best: dict[int, tuple] = {}
    for r in monitor_table(res, spec, seeds):
        if r["steps"] in budgets and r["monitor"] is not None and (r["L"] not in best or r["monitor"] < best[r["L"]][0]):
            best[r["L"]] = (r["monitor"], r["recipe"], r["steps"])
    return {L: (name, steps) for L, (_, name, steps) in best.items()}


def _only(res: Results, seeds) -> Results:
    df = res.df
    if len(df) and "seed" in df.columns:
        df = df[df["seed"].isin(list(seeds))]
    return Results(df, res.preset, res.reader, res.overrides, res.diverged_df)


def three_seed_power(res: Results, spec: Spectrum) -> tuple[bool, float | None]:
    """(whether the SEEDS monitor-best envelope is complete, claim 5a's power on it): what decides
    whether the spectrum takes MORE_SEEDS (read on SEEDS alone, so that adding them changes nothing).
    Computed once per Results and spectrum (the power's simulation is the slow part)."""
    cache = res.__dict__.setdefault("_three_seed_power", {})
    if spec not in cache:
        cache[spec] = _three_seed_power(res, spec)
    return cache[spec]


def _three_seed_power(res: Results, spec: Spectrum) -> tuple[bool, float | None]:
    three = _only(res, SEEDS)
    picks = envelope_picks(three, spec, SEEDS)
    curve = cv.study_curve(three, picks, spec.a, spec.b, spec.k, spectrum_depths(res.preset, spec))
    if len(curve["depths"]) < len(spectrum_depths(res.preset, spec)):
        return False, None
    return True, cv.power_row({**curve, **cv.fit_curve(curve)})


def spectrum_seeds(res: Results, spec: Spectrum) -> tuple[int, ...]:
    """The seeds a spectrum reads: SEEDS, or SEEDS + MORE_SEEDS where 5a's power on the complete
    3-seed envelope is below POWER_MIN or cannot be computed."""
    complete, pw = three_seed_power(res, spec)
    return SEEDS + MORE_SEEDS if complete and (pw is None or pw < cv.POWER_MIN) else SEEDS


def followup(res: Results, specs=SPECTRA) -> list:
    """MORE_SEEDS for every run of each spectrum in `specs` whose 3-seed power is below POWER_MIN;
    nothing for a spectrum whose 3-seed runs are not all finished yet (a later reproduce decides)."""
    out = []
    for spec in specs:
        if spectrum_seeds(res, spec) != SEEDS:
            out += _experiment_of((spec,)).configs(res.preset, seeds=MORE_SEEDS, **res.overrides)
    return out


def spectrum_rows(res: Results, spec: Spectrum, certify=None, power=None) -> list[dict]:
    """One row per (budget, series: envelope | faithful) and the monitor-best envelope (series
    convergence.BEST), as convergence.study_rows: curve, fit and 5a, certificates (`certify(row)`,
    default convergence.certify_row), power (`power(row)`, default convergence.power_row), drops;
    the monitor-best row adds `gamma` (gamma_fit). With the defaults computed once per Results."""
    if certify is not None or power is not None:
        return _rows(res, spec, certify, power)
    cache = res.__dict__.setdefault("_spectra_rows", {})
    if spec not in cache:
        cache[spec] = _rows(res, spec, None, None)
    return cache[spec]


def _rows(res: Results, spec: Spectrum, certify, power) -> list[dict]:
    seeds, budgets = spectrum_seeds(res, spec), cv.BUDGETS[res.preset]
    depths = spectrum_depths(res.preset, spec)
    series = [(name, steps, picks) for steps in budgets
              for name, picks in (("envelope", envelope_picks(res, spec, seeds, (steps,))),
                                  ("faithful", {L: (cv.FAITHFUL, steps) for L in depths}))]
    series.append((cv.BEST, max(budgets), envelope_picks(res, spec, seeds)))
    rows = []
    for name, steps, picks in series:
        curve = cv.study_curve(res, picks, spec.a, spec.b, spec.k, depths)
        if not curve["depths"]:
            continue
        row = {"series": name, "steps": steps, "a": spec.a, "b": spec.b, "k": spec.k, **curve, **cv.fit_curve(curve),
               "complete": len(curve["depths"]) == len(depths) and min(curve["n"]) >= len(seeds),
               "seeds_read": list(seeds)}
        row["certificates"] = certify(row) if certify is not None else cv.certify_row(res, row, picks)
        row["power_of"] = power or cv.power_row
        row["power_5a"] = row["power_of"](row)
        row["drops"] = cv.drops(row)
        if name == cv.BEST:
            row["gamma"] = gamma_fit(row["depths"], row["gap"])
        rows.append(row)
    return rows


def gamma_fit(depths, gap) -> dict:
    """The least-squares slope γ of log(A_L − C_L) against log L over the depths where A_L − C_L is
    finite and > 0 (L = 1 has no C_L), with its SE (residual variance over n − 2; NaN for two
    depths) and the line's R², and what it implies: (A_L − C_L)/L ∝ L^(γ−1)."""
    L, g = np.asarray(depths, float), np.asarray(gap, float)
    ok = np.isfinite(g) & (g > 0) & (L > 0)
    x, y = np.log(L[ok]), np.log(g[ok])
    out = {"gamma": math.nan, "gamma_se": math.nan, "log_c": math.nan, "r2": math.nan, "depths": [int(v) for v in L[ok]]}
    if len(x) < 2 or np.ptp(x) == 0:
        return {**out, "text": f"γ not computed: A_L − C_L > 0 at {len(x)} depths"}
    xc = x - x.mean()
    gamma = float(xc @ (y - y.mean()) / (xc @ xc))
    resid = y - y.mean() - gamma * xc
    se = math.sqrt(float(resid @ resid) / (len(x) - 2) / float(xc @ xc)) if len(x) > 2 else math.nan
    tss = float((y - y.mean()) @ (y - y.mean()))
    out.update(gamma=gamma, gamma_se=se, log_c=float(y.mean() - gamma * x.mean()),
               r2=1.0 - float(resid @ resid) / tss if tss > 0 else math.nan)
    out["text"] = (f"A_L − C_L ∝ L^γ, γ = {gamma:.3f} ± {se:.3f} on L={', '.join(map(str, out['depths']))}; "
                   f"so (A_L − C_L)/L, the part of R_L = C_L + (A_L − C_L)/L that falls with depth, goes as "
                   f"L^(γ−1) = L^({gamma - 1:.3f} ± {se:.3f}) (the paper's 1/L needs γ = 0: "
                   + ("consistent" if math.isfinite(se) and abs(gamma) <= 2 * se else "not within 2 SE" if math.isfinite(se)
                      else "no SE with two depths") + ")")
    return out


def _best(res: Results, spec: Spectrum) -> dict | None:
    return next((r for r in spectrum_rows(res, spec) if r["series"] == cv.BEST), None)


def table(res: Results, specs=SPECTRA) -> list[dict]:
    """One row per spectrum and (series, budget): convergence.table's columns, and k."""
    out = []
    for spec in specs:
        for r in spectrum_rows(res, spec):
            out.append({"series": r["series"], "steps": cv.steps_text(r), "spectrum": label(r["a"], r["b"]),
                        "k": r["k"], "seeds": min(r["n"]), "alpha": r["alpha"], "alpha SE": r["alpha_se"], "R2": r["r2"],
                        "L0": r["L0"], "fit": r["status"], "5a": "pass" if r["passes_5a"] else "fail", "R_1": r["R"][0],
                        "R_Lmax": r["R"][-1], "C_Lmax": r["C"][-1], "A-C_Lmax": r["gap"][-1],
                        "recipes": " ".join(dict.fromkeys(r["recipe"]))})
    return out


def table_frame(res: Results, th: Theory | None = None, specs=SPECTRA):
    import pandas as pd

    return pd.DataFrame(table(res, specs))


def notes(res: Results, specs=SPECTRA) -> list[str]:
    """The rule, and per spectrum its seeds (with the 3-seed power that set them), its outcome and γ."""
    out = [f"Decision rule — {rule(res.preset)}"]
    for spec in specs:
        complete, pw = three_seed_power(res, spec)
        seeds = spectrum_seeds(res, spec)
        why = ("3-seed runs not all finished" if not complete else
               f"5a's power at 3 seeds {pw:.2f}" if pw is not None else "5a's power at 3 seeds not computed")
        best = _best(res, spec)
        out.append(f"{label(spec.a, spec.b, spec.k)}: seeds {seeds[0]}–{seeds[-1]} ({why}); outcome — "
                   f"{cv.decision(spectrum_rows(res, spec), spec.a, spec.b)['text']}; "
                   + (best["gamma"]["text"] if best else "γ: no envelope runs yet"))
    return out


def figure(res: Results, th: Theory, specs=SPECTRA):
    """Per spectrum two rows, the (0, 0) study's panels (convergence.study_panels): (a) the envelope's
    R_L per budget, the monitor-best envelope (dashed) and B_L; (b) the faithful start as trained;
    (c) the excess R_L − L0 of the monitor-best envelope on log-log axes with slope −1; (d) its drops
    per doubling of depth; (e) α per budget; then (f) A_L − C_L of the monitor-best envelope with
    the fitted L^γ. Each title names the spectrum."""
    fig, ax = pl.new_figure(3, 2 * len(specs), width=4.4, height=3.5)
    for i, spec in enumerate(specs):
        rows, a = spectrum_rows(res, spec), ax[6 * i:6 * i + 6]
        cv.study_panels(a[:5], rows, res.preset)
        _gap_panel(a[5], next((r for r in rows if r["series"] == cv.BEST), None), spec)
        for panel in a[:5]:
            pl.prefix_title(panel, f"{label(spec.a, spec.b, spec.k)}: ")
    return fig


def _gap_panel(ax, row: dict | None, spec: Spectrum) -> None:
    pl.panel_title(ax, "f", f"{label(spec.a, spec.b, spec.k)}: $A_L - C_L$, monitor-best envelope")
    g = row["gamma"] if row is not None else None
    if g is None or not g["depths"]:
        pl.missing(ax, "missing runs" if row is None else "no depth with A_L - C_L > 0")
        return
    L = np.array(g["depths"], float)
    gap = dict(zip(row["depths"], row["gap"]))
    ax.plot(L, [gap[int(v)] for v in L], marker="o", color="k", ls="none", label="seed mean")
    if math.isfinite(g["gamma"]):
        ax.plot(L, np.exp(g["log_c"]) * L ** g["gamma"], ls=":", color="tab:red",
                label=f"fit $L^{{\\gamma}}$, γ = {g['gamma']:.2f} ± {g['gamma_se']:.2f}, R² = {g['r2']:.3f}")
    pl.loglog(ax, ylabel="$A_L - C_L$")
    pl.finish_legend(ax)


def gap_rows(res: Results, spec: Spectrum) -> list[dict]:
    """Per depth of the monitor-best envelope: C_L, A_L − C_L and (A_L − C_L)/L (seed means)."""
    return best_gap_rows(_best(res, spec))


def best_gap_rows(best: dict | None) -> list[dict]:
    """gap.csv's rows of a monitor-best study row (convergence.study_rows' form; the (0,0) study's from
    its export, studies/convergence_redecide.py)."""
    return [] if best is None else [
        {"L": L, "recipe": name, "steps": st, "seeds": n, "R": R, "C": C, "A_minus_C": g, "A_minus_C_over_L": g / L}
        for L, name, st, n, R, C, g in zip(best["depths"], best["recipe"], best["steps_L"], best["n"], best["R"],
                                            best["C"], best["gap"])]


def export(res: Results, out_dir: str | Path, spec: Spectrum) -> list[Path]:
    """One spectrum's small result files, as the (0, 0) study's: grid.csv (every point and budget's
    seed-mean final monitor loss per depth, and which the monitor-best envelope took), budgets.csv,
    curves.csv (convergence.curve_rows, with k), gap.csv (C_L, A_L − C_L and (A_L − C_L)/L of the
    monitor-best envelope) and decision.json (rule, the fixed grid, the seeds and the 3-seed power
    that set them, convergence.decision, γ)."""
    import pandas as pd

    from depthscale.base.atomic import write_json_atomic, write_text_atomic

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    seeds, rows = spectrum_seeds(res, spec), spectrum_rows(res, spec)
    best = _best(res, spec)
    picked = dict(zip(best["depths"], zip(best["recipe"], best["steps_L"]))) if best else {}
    grid = [{**r, "picked": picked.get(r["L"]) == (r["recipe"], r["steps"])} for r in monitor_table(res, spec, seeds)]
    frames = {"grid.csv": grid, "budgets.csv": table(res, (spec,)),
              "curves.csv": [{"k": spec.k, **r} for r in cv.curve_rows(rows)], "gap.csv": gap_rows(res, spec)}
    paths = []
    for name, data in frames.items():
        paths.append(out_dir / name)
        write_text_atomic(paths[-1], pd.DataFrame(data).to_csv(index=False) if data else "")
    complete, pw = three_seed_power(res, spec)
    paths.append(out_dir / "decision.json")
    write_json_atomic(paths[-1], {
        "rule": rule(res.preset), "preset": res.preset,
        "spectrum": label(spec.a, spec.b), "a": spec.a, "b": spec.b, "k": spec.k,
        "grid": {L: list(points(L)) for L in spectrum_depths(res.preset, spec)}, "budgets": list(cv.BUDGETS[res.preset]),
        "seeds": list(seeds), "three_seeds_complete": complete, "power_5a_three_seeds": pw,
        "decisions": [cv.decision(rows, spec.a, spec.b)],
        "gamma": {k: v for k, v in (best["gamma"] if best else gamma_fit([], [])).items()}})
    return paths


def study(spec: Spectrum) -> SimpleNamespace:
    """One spectrum as a study module (studies/study_export.write_study): export, figure, table_frame, notes."""
    return SimpleNamespace(export=functools.partial(export, spec=spec), figure=functools.partial(figure, specs=(spec,)),
                           table_frame=functools.partial(table_frame, specs=(spec,)),
                           notes=functools.partial(notes, specs=(spec,)))


def _experiment_of(specs) -> Experiment:
    """The record of the spectra `specs`: ID with one spectrum's tag, or ID for all of SPECTRA."""
    one = len(specs) == 1
    return Experiment(
        f"{ID}-{specs[0].tag}" if one else ID,
        "Study: convergence at " + (label(specs[0].a, specs[0].b, specs[0].k) if one else "four more spectra")
        + " — the (0,0) choice and the faithful start over budgets, chosen by the monitor",
        ("nonlinear",), "difficult", tuple(sorted({s.k for s in specs})), ", ".join(label(s.a, s.b, s.k) for s in specs),
        "R_L of the monitor-chosen envelope (points and budgets) and of the faithful start per budget, alpha ± SE, "
        "R², L0, C_L, A_L - C_L and its slope γ, the certificates, the power of 5a; SPEC §9's decision rule",
        tuple(g for s in specs for g in spectrum_groups(s)), part="study", seeds=SEEDS,
        figure=functools.partial(figure, specs=specs), table=functools.partial(table_frame, specs=specs),
        notes=functools.partial(notes, specs=specs), followup=functools.partial(followup, specs=specs))


CONVERGENCE_SPECTRA = register(_experiment_of(SPECTRA))
PER_SPECTRUM = {s: register(_experiment_of((s,))) for s in SPECTRA}


__all__ = ["SPECTRA", "Spectrum", "CHOSEN_00", "DEPTHS", "SEEDS", "MORE_SEEDS", "ID", "RULE", "rule", "spectrum",
           "spectrum_depths", "points", "spectrum_groups", "monitor_table", "envelope_picks", "three_seed_power",
           "spectrum_seeds", "followup", "spectrum_rows", "gamma_fit", "table", "table_frame", "notes", "figure",
           "gap_rows", "best_gap_rows", "export", "study", "CONVERGENCE_SPECTRA", "PER_SPECTRUM"]
