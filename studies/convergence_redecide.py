"""SPEC §9's refined decision rule, applied to the committed convergence export (no store needed).

    python studies/convergence_redecide.py [--dir studies/results/convergence]

The (0,0) study's store is not kept; its export (curves.csv) holds every depth's per-seed R_L and
each certificate's verdict at every budget, but not the final monitor losses that choose a budget
per depth (exports since this script do). So the envelope is read at the largest budget, 20,000
steps, at every depth — what the monitor-best budget would have to beat — and the rule's two parts
are computed on it: (a) all depths, (b) the certified depths alone (>= 5 spanning >= 16x), each with
5a's power, plus the drops per doubling; and the mechanism (issue 48 item 4), as for the other spectra:
C_L, A_L − C_L and (A_L − C_L)/L per depth and γ, the slope of log(A_L − C_L) against log L
(convergence_spectra.gamma_fit). Writes DIR/decision_refined.json and DIR/gap.csv and prints both, and redraws DIR/convergence.png
(convergence.figure_rows) from the export.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from depthscale.experiments import convergence as cv
from depthscale.experiments.convergence_spectra import best_gap_rows, gamma_fit


def export_rows(d: Path) -> list[dict]:
    """The study's rows (convergence.study_rows' form) rebuilt from curves.csv: every series and budget,
    and the monitor-best row read at the largest budget (envelope_row); B_L from the B_L column."""
    curves = pd.read_csv(d / "curves.csv")
    rows = []
    for (series, steps), part in curves.groupby(["series", "steps"], sort=True):
        row = envelope_row(part.sort_values("L"), int(steps))
        row["series"] = series
        row["certificate_detail"] = {int(L): {"B": float(B)} for L, B in zip(part["L"], part["B_L"]) if pd.notna(B)}
        rows.append(row)
    top = max((r for r in rows if r["series"] == "envelope"), key=lambda r: r["steps"])
    best = curves[(curves["series"] == "envelope") & (curves["steps"] == top["steps"])]
    # the same curve, its fit and power; its budget certificate's numbers (convergence.budget_moves), no B_L again
    rows.append({**top, "series": cv.BEST, "certificate_detail": budget_detail(best)})
    return rows


def budget_detail(env: pd.DataFrame) -> dict:
    """{L: {"budget": {diff, se, ok}}} of curves.csv's rows `env` where the budget certificate was computed."""
    return {int(r["L"]): {"budget": {"diff": float(r["budget_diff"]), "se": float(r["budget_se"]),
                                     "ok": str(r["budget_ok"]) == "True"}}
            for _, r in env.iterrows() if str(r["budget_ok"]) in ("True", "False")}


def write_figure(d: Path, rows: list[dict], preset: str = "cpu") -> Path:
    """The study's figure (convergence.figure_rows, the report's style and caption) from its rows
    (export_rows), written to `d`."""
    from depthscale.analysis.plotting import note, render

    def draw(res, th):
        fig = cv.figure_rows(rows, preset)
        note(fig, f"the monitor-best row is the envelope at {rows[-1]['steps']:,} steps at every depth: this export "
                  "lacks the final monitor losses that choose the budget per depth (decision_refined.json)")
        return fig

    png = d / "convergence.png"
    render(draw, None, None).savefig(png, dpi=100, bbox_inches="tight")
    return png


def largest_envelope(d: Path) -> tuple[int, pd.DataFrame]:
    """(the largest budget, curves.csv's envelope rows at it, by depth) of the export in `d`."""
    curves = pd.read_csv(d / "curves.csv")
    steps = int(curves[curves["series"] == "envelope"]["steps"].max())
    return steps, curves[(curves["series"] == "envelope") & (curves["steps"] == steps)].sort_values("L")


def envelope_row(env: pd.DataFrame, steps: int) -> dict:
    """The envelope's study row at `steps` rebuilt from its curves.csv rows (largest_envelope;
    certificates from the *_ok columns)."""
    seeds = [[float(x) for x in s.split()] for s in env["R_seeds"]]
    depths = [int(L) for L in env["L"]]
    row = {"series": cv.BEST, "steps": steps, "a": float(env["a"].iloc[0]), "b": float(env["b"].iloc[0]),
           "depths": depths, "R": [float(x) for x in env["R"]], "R_seeds": seeds, "C": list(env["C"]),
           "gap": list(env["A_minus_C"]), "n": [len(s) for s in seeds], "recipe": list(env["recipe"]),
           "steps_L": [steps] * len(depths), "monitor": [float("nan")] * len(depths),
           "monitor_seeds": [[] for _ in depths]}
    row.update(cv.fit_curve(row))
    row["complete"] = min(row["n"]) >= len(cv.BUDGET_SEEDS) and len(depths) == 7
    row["certificates"] = {L: {n: str(r[f"{n}_ok"]) == "True" for n in cv.certificates.NAMES
                               if str(r[f"{n}_ok"]) in ("True", "False")} for L, (_, r) in zip(depths, env.iterrows())}
    row["power_of"] = cv.power_row
    row["power_5a"] = cv.power_row(row)
    row["drops"] = cv.drops(row)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="studies/results/convergence")
    args = ap.parse_args()
    d = Path(args.dir)
    rows = export_rows(d)
    row, steps = rows[-1], rows[-1]["steps"]  # the monitor-best row: the envelope at the largest budget
    dec = cv.decision([row], row["a"], row["b"])
    dec["budget_note"] = (f"every depth read at {steps:,} steps: the committed export lacks the final monitor "
                          "losses that choose the budget per depth (SPEC §4); rerunning the study's export from "
                          "its store records them")
    dec = {k: v for k, v in dec.items() if k != "budgets"} | {"budget": steps}
    gamma = gamma_fit(row["depths"], row["gap"])
    (d / "decision_refined.json").write_text(json.dumps({"rule": cv.RULE, "decision": dec, "gamma": gamma}, indent=1,
                                                        default=float) + "\n")
    pd.DataFrame(best_gap_rows(row)).to_csv(d / "gap.csv", index=False)
    print(dec["text"])
    print(gamma["text"])
    print(f"wrote {write_figure(d, rows)}")
    print(f"wrote {d / 'decision_refined.json'}")


if __name__ == "__main__":
    main()
