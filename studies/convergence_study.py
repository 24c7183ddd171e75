"""Export the convergence study's small result files from a store (SPEC §9; docs/recipe.md §13).

    python studies/convergence_study.py --store runs/convergence --preset cpu --out studies/results/convergence

Writes grid.csv (the whole recipe grid: seed-mean final monitor loss per depth and point, which was
chosen), budgets.csv and budgets.md (per budget: the envelope's and the faithful start's fit, claim
5a, R_1, R_Lmax, C and A - C at the deepest depth), decision.json (the choice per depth, SPEC §9's
rule and its outcome) and convergence.png. Reads only finished runs. The runs come from
`depthscale reproduce convergence --preset cpu --store runs/convergence --executor process`
(resumable; it trains the grid, reads the choice off the store and trains the budgets).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from depthscale.experiments import convergence
from depthscale.results import Results, Theory
from depthscale.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--out", default="studies/results/convergence")
    args = ap.parse_args()
    res = Results.from_store(Store(args.store, readonly=True), args.preset)
    paths = convergence.export(res, args.out)
    from matplotlib import rc_context

    from depthscale.figures import STYLE
    from depthscale.formatting import markdown_table

    with rc_context(STYLE):
        fig = convergence.figure(res, Theory(args.preset))
        png = Path(args.out) / "convergence.png"
        fig.savefig(png, dpi=100)
    md = Path(args.out) / "budgets.md"
    md.write_text(markdown_table(convergence.table_frame(res, None)) + "\n\n" + "\n\n".join(convergence.notes(res)) + "\n")
    print("\n".join(convergence.notes(res)))
    print("wrote", ", ".join(str(p) for p in paths + [png, md]))


if __name__ == "__main__":
    main()
