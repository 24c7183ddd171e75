"""The learned metrics of trained stacks beside the best cosine stacks (issue 48 item 4;
depthscale.experiments.learned_metrics).

    python studies/learned_metrics.py --store runs/cpu --spectrum 0,0 [--k 2] [--preset cpu] \
        [--out studies/results/learned_metrics/cpu-0-0]
    python studies/learned_metrics.py --store runs/convergence-spectra --spectrum 1,0 \
        --study studies/results/convergence_spectra/1-0

With --study (an exported spectrum of the convergence study, studies/convergence_spectra.py): per
depth the runs of the study's monitor-best envelope (the point and budget gap.csv names per depth).

For each depth of the nonlinear difficult-task series at the spectrum, the runs of the recipe the
monitor chose (selection.main_envelope, SPEC §4; every seed): each layer's metric sym(N W_xᵀ W_qᵀ
W_k W_x) — its eigenvalues, mean (the temperature it acts at) and spread std/|mean| (0 for a cosine
head) — beside the temperatures of the best equal-weight cosine stack of the same depth on the run's
monitor contexts (kinds.constructive.constructive_stack). Writes layers.csv (one row per layer),
summary.csv (one row per run: learned_metrics.summarise), metrics.json (every eigenvalue) and
metrics.png. Descriptive: nothing here is a claim.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from depthscale.analysis.results import Results
from depthscale.analysis.selection import main_envelope
from depthscale.base.atomic import write_json_atomic, write_text_atomic
from depthscale.experiments import convergence as cv
from depthscale.experiments import learned_metrics as lm
from depthscale.kinds.constructive import constructive_stack
from depthscale.runs.per_context import StoredRuns
from depthscale.store.store import Store


def collect_rows(res: Results, store: Store, k: int, a: float, b: float, picks: dict | None = None) -> list[dict]:
    """Per trained run of the series (every depth and seed the envelope reads; with `picks`,
    {L: (grid point, steps)}, the study's runs at those): its layers' metrics and the cosine stack
    of its depth."""
    rows = []
    depths = sorted(picks) if picks else [int(L) for L in res.series("nonlinear", "difficult", k, a, b).depths]
    for L in depths:
        view = res.view(**cv.study_fields(res.preset, *picks[L])) if picks else res
        for r in view.runs("nonlinear", "difficult", k, a, b, int(L)):
            cfg = store.load_config(r["run_id"])
            rows.append({"run_id": r["run_id"], "L": int(L), "seed": int(r["seed"]), "R": float(r["R"]),
                         "recipe": cfg.qk_init, "steps": int(cfg.max_steps),
                         "layers": lm.layer_metrics(store.load_params(r["run_id"])),
                         "stack_temperatures": constructive_stack(cfg)["temperatures"]})
    return rows


def export(rows: list[dict], out: Path, title: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    layers = [{"run_id": r["run_id"], "L": r["L"], "seed": r["seed"], "layer": i, "mean": x["mean"],
               "std": x["std"], "spread": x["spread"], "min": x["eigenvalues"][0], "max": x["eigenvalues"][-1]}
              for r in rows for i, x in enumerate(r["layers"])]
    summary = [{"run_id": r["run_id"], "seed": r["seed"], "R": r["R"], "recipe": r["recipe"], "steps": r["steps"],
                **{k: v for k, v in lm.summarise(r["layers"], r["stack_temperatures"]).items()
                   if k not in ("layer_means", "stack_temperatures")}} for r in rows]
    paths = [out / "layers.csv", out / "summary.csv", out / "metrics.json", out / "metrics.png"]
    write_text_atomic(paths[0], pd.DataFrame(layers).to_csv(index=False))
    write_text_atomic(paths[1], pd.DataFrame(summary).to_csv(index=False))
    write_json_atomic(paths[2], {"title": title, "runs": rows})
    lm.figure(rows, title).savefig(paths[3], dpi=100, bbox_inches="tight")
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--spectrum", default="0,0", help="a,b")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--study", default=None, help="an exported spectrum of the convergence study (its gap.csv)")
    args = ap.parse_args()
    a, b = (float(v) for v in args.spectrum.split(","))
    store = Store(args.store, readonly=True)
    res = Results.from_store(StoredRuns(store), args.preset)
    picks = None
    if args.study:
        gap = pd.read_csv(Path(args.study) / "gap.csv")
        picks = {int(r.L): (r.recipe, int(r.steps)) for r in gap.itertuples()}
    rows = collect_rows(res if picks else main_envelope(res), store, args.k, a, b, picks)
    if not rows:
        raise SystemExit(f"no finished nonlinear difficult runs at ({a:g}, {b:g}) k={args.k} in {args.store}")
    tag = f"{args.preset}-{a:g}-{b:g}".replace(".", "") + ("-study" if picks else "")
    title = (f"learned metrics, nonlinear difficult ({a:g}, {b:g}) k={args.k}, preset {args.preset}, "
             + (f"the study's monitor-best envelope (steps per depth), {len(rows)} runs" if picks else
                f"{rows[0]['steps']} steps, {len(rows)} runs"))
    paths = export(rows, Path(args.out or f"studies/results/learned_metrics/{tag}"), title)
    print("wrote", ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
