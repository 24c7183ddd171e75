"""One row of the nonlinear recipe study (docs/recipe.md): a pack of depths trained at one setting.

    python studies/recipe_study.py NAME --set qk_init=spread max_steps=8000 [--depths 1,2,4] [--seeds 0]
    python studies/recipe_study.py --summary      # every stored row as a Markdown table, with fits

Trains the pack (one core), prints and writes studies/results/recipe/NAME.json with R_L, A_L,
C_L per depth and seed. The base is the cpu preset's nonlinear difficult-task config at the
geometry of SPEC §1 (d = N = 16, P = 64, k = 2, (a, b) = (0, 0)); --set overrides any field.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from depthscale.base.atomic import write_json_atomic
from depthscale.config.run import make_config
from depthscale.train.training import train_pack

OUT = Path(__file__).parent / "results" / "recipe"


def _value(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def summary() -> str:
    """One Markdown row per stored study: R_L, the fit R = L0 + c L^-alpha, A_L - C_L, time."""
    import numpy as np

    from depthscale.theory.fits import fit_power_law

    lines = []
    for f in sorted(OUT.glob("*.json"), key=lambda p: p.stat().st_mtime):
        r = json.loads(f.read_text())
        for seed in sorted({x["seed"] for x in r["rows"]}):
            rows = sorted((x for x in r["rows"] if x["seed"] == seed), key=lambda x: x["L"])
            L = np.array([x["L"] for x in rows], float)
            R = np.array([x["R"] for x in rows])
            try:
                ft = fit_power_law(L, R, floor=True)
                fit = f"{ft.L0:.3f} | {ft.alpha:.2f} ± {ft.alpha_se:.2f} | {ft.r2:.3f}"
            except Exception as e:  # noqa: BLE001 - a failed fit is a row, not a crash
                fit = f"no fit ({type(e).__name__}) | | "
            lines.append(f"| {r['name']} (seed {seed}) | " + ", ".join(f"{x['L']}: {x['R']:.3f}" for x in rows)
                         + f" | {fit} | " + ", ".join(f"{x['A'] - x['C']:.2f}" for x in rows if x["L"] > 1)
                         + f" | {r['seconds'] / 60:.1f} |")
    head = ("| setting | R_L (L: R) | L0 | α ± SE | R² | A_L − C_L (L ≥ 2) | min |\n"
            "|---|---|---|---|---|---|---|")
    return head + "\n" + "\n".join(lines)


def main() -> None:
    if "--summary" in sys.argv[1:]:
        print(summary())
        return
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
