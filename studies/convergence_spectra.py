"""Export one spectrum of the convergence study at more spectra from a store (SPEC §9 "More spectra";
docs/recipe.md §16).

    python studies/convergence_spectra.py --store runs/convergence-spectra --spectrum 1,0 \
        --out studies/results/convergence_spectra/1-0

--spectrum: 1,0 | 0,1 | 0.5,0.5 | 0,0.5 (the top-16 spectrum, k = 16), or a tag (1-0, 0-1, 05-05,
top16); --out defaults to studies/results/convergence_spectra/<tag>. Writes the (0, 0) study's files
— grid.csv (here the fixed grid: each depth's (0,0) point and the faithful start at every budget,
seed-mean final monitor loss, which the envelope took), budgets.csv and budgets.md, curves.csv,
decision.json (SPEC §9's rule and outcome, the seeds and the 3-seed power of 5a that set them, γ),
convergence.png — and gap.csv (C_L, A_L − C_L and (A_L − C_L)/L of the monitor-best envelope; γ, the
slope of log(A_L − C_L) against log L, with its SE in decision.json). Reads only finished runs, so a
spectrum can be exported as soon as its own runs are done. The runs come from
`depthscale reproduce convergence-spectra-<tag> --preset cpu --store runs/convergence-spectra
--out report/convergence-spectra --executor process` per spectrum in SPEC §9's order (or `convergence-spectra` for all four at once).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from study_export import write_study

from depthscale.analysis.results import Results
from depthscale.experiments import convergence_spectra as cs
from depthscale.runs.per_context import StoredRuns
from depthscale.store.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--spectrum", required=True, help="1,0 | 0,1 | 0.5,0.5 | 0,0.5 (top-16), or its tag")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    spec = cs.spectrum(args.spectrum)
    out = Path(args.out or f"studies/results/convergence_spectra/{spec.tag}")
    res = Results.from_store(StoredRuns(Store(args.store, readonly=True)), args.preset)
    study = cs.study(spec)
    paths = write_study(study, res, out, "convergence.png", "budgets.md")
    print("\n".join(study.notes(res)))
    print("wrote", ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
