"""Evidence for the per-experiment geometry (docs/geometry.md): the softmax-ensemble floor
(theory.softmax_floor) against the paper's fitted L0 on every top-2 and top-16 spectrum of
Tables 1 and 4, at several (d, P). Writes studies/results/geometry_evidence.json.

    python studies/geometry_evidence.py [--samples 20000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from depthscale.base.atomic import write_json_atomic
from depthscale.config.paper import PAPER
from depthscale.theory.softmax_floor import softmax_floor

OUT = Path(__file__).parent / "results" / "geometry_evidence.json"


def paper_rows() -> list[tuple[int, float, float, float]]:
    t1 = PAPER["table1_L0_difficult_k2"]
    rows = [(2, float(a), float(b), L0) for (a, b), L0 in zip(t1["spectra"], t1["nonlinear"])]
    rows += [(r["k"], float(r["a"]), float(r["b"]), r["L0"]) for r in PAPER["table4_nonlinear_fits"]]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20_000)
    args = ap.parse_args()
    geoms = {2: [(16, 32), (16, 64), (16, 128), (32, 64), (8, 64)], 16: [(16, 64), (16, 128), (16, 256), (32, 128)]}
    out = []
    for k, a, b, L0 in paper_rows():
        for d, P in geoms[k]:
            r = softmax_floor(a, b, k, d, P, samples=args.samples, seed=0, progress=False)
            out.append({"k": k, "a": a, "b": b, "d": d, "P": P, "paper_L0": L0, "floor": r["ensemble_floor"],
                        "se": r["se"], "single_head": r["single_head"], "var_ystar": r["var_ystar"],
                        "paper_over_floor": L0 / r["ensemble_floor"]})
            print(json.dumps(out[-1]), flush=True)
            write_json_atomic(OUT, out)


if __name__ == "__main__":
    main()
