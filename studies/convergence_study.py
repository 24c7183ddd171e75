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

from study_export import read_args, write_study

from depthscale.experiments import convergence


def main() -> None:
    res, out = read_args(__doc__.splitlines()[0], "studies/results/convergence")
    paths = write_study(convergence, res, out, "convergence.png", "budgets.md")
    print("\n".join(convergence.notes(res)))
    print("wrote", ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
