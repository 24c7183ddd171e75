"""What the optimum's depth curve can be (issue 48 item 3), from the committed (0,0) study export.

    python studies/optimum_alpha_range.py [--dir studies/results/convergence]

convergence.law_alpha_range on the envelope at 20,000 steps: the exponents α of a law
L0 + c L^−α that passes through R_1 and R_2 (taken as the optima at L = 1, 2) and stays below every
deeper achieved R_L. Beside it, how the range moves if R_2 is not the optimum (the 2-layer optimum
lower by 0.001 … 0.01: issue 48's probe of L = 1, 2, 4 starts is what would measure it) and with the
reference B_2 (the best 2-stack of cosine heads) in R_2's place. Writes DIR/alpha_range.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from convergence_redecide import largest_envelope

from depthscale.experiments import convergence as cv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="studies/results/convergence")
    args = ap.parse_args()
    d = Path(args.dir)
    steps, env = largest_envelope(d)
    depths, R = [int(L) for L in env["L"]], [float(r) for r in env["R"]]
    out = {"steps": steps, "depths": depths, "R": R, "central": cv.law_alpha_range(depths, R), "R2_lower_by": {}}
    for drop in (0.001, 0.002, 0.005, 0.01):
        out["R2_lower_by"][str(drop)] = cv.law_alpha_range(depths, [R[0], R[1] - drop, *R[2:]])
    B = env["B_L"].astype(float).tolist()
    if len(B) > 1 and B[1] == B[1]:
        out["B2_for_R2"] = cv.law_alpha_range(depths, [R[0], B[1], *R[2:]])
    (d / "alpha_range.json").write_text(json.dumps(out, indent=1) + "\n")
    c = out["central"]
    print(f"alpha in [{c['alpha_min']:.3f}, {c['alpha_max']:.3f}] (binding L = {c['binding_depth']}); "
          + "; ".join(f"R_2 - {k}: alpha_max {v['alpha_max']:.3f}" for k, v in out["R2_lower_by"].items()))
    print(f"wrote {d / 'alpha_range.json'}")


if __name__ == "__main__":
    main()
