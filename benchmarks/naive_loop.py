"""The baseline alone: the one-model-at-a-time depth sweep of `depthscale.bench.naive` (the reference
`depthscale bench` times the packed engine against), with each model's median step time.

    python benchmarks/naive_loop.py --preset cpu --steps 3
"""

from __future__ import annotations

import argparse

from depthscale.bench.naive import train_naive
from depthscale.config.run import PRESET_DEPTHS, make_config


def main() -> None:
    ap = argparse.ArgumentParser(description="The one-model-at-a-time depth sweep (baseline).")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    total = 0.0
    for L in PRESET_DEPTHS[args.preset]:
        for seed in range(args.seeds):
            cfg = make_config(args.preset, model="nonlinear", task="difficult", k=2, L=L, seed=seed)
            times: list[float] = []
            _, losses = train_naive(cfg, args.steps, args.device, on_step=lambda s, t: times.append(t))
            step_s = sorted(times)[len(times) // 2]
            total += step_s
            print(f"L={L:3d} seed={seed}  {step_s * 1e3:8.1f} ms/step  loss {losses[-1]:.4f}")
    print(f"one sweep step (every model advanced once): {total:.2f} s")


if __name__ == "__main__":
    main()
