"""Export the budget ladder's small result files from a store (SPEC §9's study; docs/recipe.md §12).

    python studies/budget_ladder.py --store runs/budget --preset cpu --out studies/results/budget

Writes ladder_runs.csv (one row per finished run), ladder.csv and ladder.md (per start and budget: alpha +- SE over
seeds, R², L0, C_L and A_L - C_L at the deepest depth), decision.json (SPEC §9's rule and its
outcome) and budget.png (the study's figure). Safe to run while the sweep is still training: it
reads only finished runs, and each file is written atomically. The runs themselves come from
`depthscale reproduce budget --preset cpu --store runs/budget --executor process` (resumable).
"""

from __future__ import annotations

from study_export import read_args, write_study

from depthscale.experiments import budget


def main() -> None:
    res, out = read_args(__doc__.splitlines()[0], "studies/results/budget")
    paths = write_study(budget, res, out, "budget.png", "ladder.md")
    for d in budget.decisions(res):
        print(d["text"])
    print("wrote", ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
