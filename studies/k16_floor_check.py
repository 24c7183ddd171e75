"""fig14 (b): do the trained top-16 models sit below the cosine-head "ensemble floor" because of a
leak, or because learned metrics beat the cosine family? (issue 36; SPEC §3.4: look for a leak
first.) For every k = 16 run of a store (the cpu main job's fig14 runs), on its own evaluation
contexts and on a *fresh* evaluation set (another eval seed, never seen by the run or its monitor):

- R of the stored final model,
- the best single cosine head and the best nonnegative mixture of cosine heads with one gain
  (paired.floor_on_eval: cross-fitted on exactly those contexts),
- the paired difference R - floor with its SE (per-context squared errors, same contexts).

A leak of the evaluation contexts into the model shows as R far lower on its own set than on the
fresh one; a label leak as R below the Bayes-reachable level on both. Writes
studies/results/k16_floor_check.json.

    python studies/k16_floor_check.py --store runs/cpu [--fresh-seed-offset 7919] [--depths 1,64] [--seeds 0]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from depthscale.analysis.paired import floor_on_eval
from depthscale.runs.per_context import evaluate, per_context
from depthscale.base.atomic import write_json_atomic
from depthscale.store import collect
from depthscale.store.store import Store

OUT = Path(__file__).parent / "results" / "k16_floor_check.json"


def compare(sq: np.ndarray, floor: dict) -> dict:
    """R, the floors, and the paired differences R - floor (mean and SE) on one set of contexts."""
    out = {"R": float(sq.mean()), "R_se": float(sq.std(ddof=1) / math.sqrt(sq.size)), "n": int(sq.size)}
    for name, key in (("ensemble", "sq_err_ensemble"), ("single", "sq_err_single")):
        diff = sq - floor[key]
        out[f"{name}_floor"] = float(floor[key].mean())
        out[f"R_minus_{name}"] = float(diff.mean())
        out[f"R_minus_{name}_se"] = float(diff.std(ddof=1) / math.sqrt(diff.size))
    return out


def check_run(store: Store, rid: str, offset: int) -> dict:
    cfg = store.load_config(rid)
    own = compare(per_context(store, rid)["sq_err"], floor_on_eval(cfg))
    fresh_cfg = cfg.replace(eval_seed=cfg.eval_seed + offset)
    fresh = compare(evaluate(store, rid, cfg=fresh_cfg)["sq_err"], floor_on_eval(fresh_cfg))
    return {"run_id": rid, "a": cfg.a, "b": cfg.b, "k": cfg.k, "L": cfg.L, "seed": cfg.seed, "qk_init": cfg.qk_init,
            "eval_seed": cfg.eval_seed, "fresh_eval_seed": fresh_cfg.eval_seed, "own": own, "fresh": fresh}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--fresh-seed-offset", type=int, default=7919)
    ap.add_argument("--depths", default="1,64")
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    depths = {int(x) for x in args.depths.split(",")}
    seeds = {int(x) for x in args.seeds.split(",")}
    store = Store(args.store)
    df = collect.collect(store)
    rows = df[(df["model"] == "nonlinear") & (df["k"] == args.k) & (df["L"].isin(depths)) & (df["seed"].isin(seeds)) & (df["state"] == "done")]
    out = []
    for rid in sorted(rows["run_id"]):
        out.append(check_run(store, rid, args.fresh_seed_offset))
        r = out[-1]
        print(f"{r['run_id']} (a,b)=({r['a']:g},{r['b']:g}) L={r['L']} seed={r['seed']} {r['qk_init']}: "
              f"own R {r['own']['R']:.4f}, R - ensemble floor {r['own']['R_minus_ensemble']:+.4f} "
              f"± {r['own']['R_minus_ensemble_se']:.4f}; fresh R {r['fresh']['R']:.4f}, R - floor "
              f"{r['fresh']['R_minus_ensemble']:+.4f} ± {r['fresh']['R_minus_ensemble_se']:.4f}", flush=True)
    write_json_atomic(Path(args.out), {"store": str(args.store), "fresh_seed_offset": args.fresh_seed_offset, "runs": out})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
