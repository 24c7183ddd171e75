"""One row of the nonlinear recipe study (docs/recipe.md): a pack of depths trained at one setting.

    python benchmarks/recipe_study.py NAME --set qk_init=spread max_steps=8000 [--depths 1,2,4] [--seeds 0]

Trains the pack (one core), prints and writes benchmarks/results/recipe/NAME.json with R_L, A_L,
C_L per depth and seed. The base is the cpu preset's nonlinear difficult-task config at the
geometry of SPEC §1 (d = N = 16, P = 64, k = 2, (a, b) = (0, 0)); --set overrides any field.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from depthscale.config import make_config
from depthscale.store import write_json_atomic
from depthscale.training import train_pack

OUT = Path(__file__).parent / "results" / "recipe"


def _value(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("--set", nargs="*", default=[])
    ap.add_argument("--depths", default="1,2,4,8,16,32,64")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    over = dict(model="nonlinear", task="difficult", k=2, a=0.0, b=0.0, d=16, P=64, N=16)
    over.update({kv.split("=", 1)[0]: _value(kv.split("=", 1)[1]) for kv in args.set})
    depths = [int(x) for x in args.depths.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    cfgs = [make_config("cpu", **dict(over, L=L, seed=s)) for s in seeds for L in depths]
    t0 = time.time()
    res = train_pack(cfgs, progress=False)
    rows = [{"L": c.L, "seed": c.seed, **{k: r.get(k) for k in ("R", "R_se", "A", "C", "var_ystar", "steps",
                                                              "stopped_because")}}
            for c, r in zip(cfgs, res)]
    out = {"name": args.name, "overrides": over, "config": cfgs[0].to_dict(), "seconds": time.time() - t0,
           "rows": rows}
    OUT.mkdir(parents=True, exist_ok=True)
    write_json_atomic(OUT / f"{args.name}.json", out)
    for r in rows:
        print(f"L={r['L']:3d} seed={r['seed']} R={r['R']:.4f} A={r['A']:.4f} C={r['C']:.4f} steps={r['steps']}")
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
