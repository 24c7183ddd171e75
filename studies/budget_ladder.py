"""Export the budget ladder's small result files from a store (SPEC §9's study; docs/recipe.md §12).

    python studies/budget_ladder.py --store runs/budget --preset cpu --out studies/results/budget

Writes ladder_runs.csv (one row per finished run), ladder.csv and ladder.md (per start and budget: alpha +- SE over
seeds, R², L0, C_L and A_L - C_L at the deepest depth), decision.json (SPEC §9's rule and its
outcome) and budget.png (the study's figure). Safe to run while the sweep is still training: it
reads only finished runs, and each file is written atomically. The runs themselves come from
`depthscale reproduce budget --preset cpu --store runs/budget --executor process` (resumable).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from depthscale.experiments import budget
from depthscale.results import Results, Theory
from depthscale.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--out", default="studies/results/budget")
    args = ap.parse_args()
    res = Results.from_store(Store(args.store, readonly=True), args.preset)
    paths = budget.export(res, args.out)
    from matplotlib import rc_context

    from depthscale.figures import STYLE

    with rc_context(STYLE):
        fig = budget.figure(res, Theory(args.preset))
        png = Path(args.out) / "budget.png"
        fig.savefig(png, dpi=100)
    from depthscale.formatting import markdown_table

    md = Path(args.out) / "ladder.md"
    md.write_text(markdown_table(budget.table_frame(res, None)) + "\n\n" + "\n\n".join(budget.notes(res)) + "\n")
    for d in budget.decisions(res):
        print(d["text"])
    print("wrote", ", ".join(str(p) for p in paths + [png]))


if __name__ == "__main__":
    main()
