"""The evaluation's joint forward against the forward model by model (issue 50), paired in one process.

    python benchmarks/eval_pass.py [--rounds 2] [--contexts 102400]

One fig6 (0,0) pack of the cpu preset (3 seeds x 7 depths, its parameters moved off their start), one
thread: the monitor call on its 10,240-context monitor set and the final pass (`measure_many`) on the
evaluation set (`--contexts`, SPEC §5's 102,400 by default, held), each as it runs now (the kind's joint
forward, `Nonlinear.measure_forward`: all 21 models per slice through the fused kernels, the attention
rows only as their layer sums) and as it ran before (`ModelKind.measure_forward`: none, so model by model,
the monitor through `monitor_forward` and the final pass through the forward with its B x L x P rows),
alternating. Prints seconds per call and the largest relative difference of each measured number.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from depthscale.base import seeds
from depthscale.config.run import make_config
from depthscale.data.measurements import eval_contexts, measure_many, monitor
from depthscale.kinds.base import ModelKind
from depthscale.kinds.ensemble import Nonlinear
from depthscale.kinds.lookup import build_pack


def _pack():
    cfgs = [make_config("cpu", model="nonlinear", task="difficult", k=2, a=0.0, b=0.0, L=L, seed=s)
            for s in range(3) for L in (1, 2, 4, 8, 16, 32, 64)]
    pack = build_pack(cfgs)
    with torch.no_grad():  # away from the start (sharper rows, gains apart), as after training
        for prm in pack.parameters():
            prm.add_(0.3 * torch.randn(prm.shape, generator=torch.Generator().manual_seed(prm.numel())))
    return cfgs, pack


def _worst(new: dict, old: dict, out: dict, prefix: str) -> None:
    """The largest relative difference of each finite number (lists elementwise) into `out`."""
    for key, v in old.items():
        a, b = np.asarray(new[key], float), np.asarray(v, float)
        if a.dtype.kind != "f" or not np.all(np.isfinite(b)) or a.shape != b.shape:
            continue
        rel = float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300))) if b.size else 0.0
        out[prefix + key] = max(out.get(prefix + key, 0.0), rel)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--contexts", type=int, default=102_400)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfgs, pack = _pack()
    c = cfgs[0]
    mset = eval_contexts(c, c.monitor_contexts, seeds.monitor_seed(c.eval_seed), "cpu", hold=True)
    eset = eval_contexts(c, args.contexts, c.eval_seed, "cpu", hold=True)
    idx = list(range(len(cfgs)))
    joint = Nonlinear.measure_forward
    times = {(w, v): [] for w in ("monitor", "final pass") for v in ("joint", "model by model")}
    res: dict = {}
    for _ in range(args.rounds):
        for variant, fn in (("joint", joint), ("model by model", ModelKind.measure_forward)):
            Nonlinear.measure_forward = fn
            t = time.perf_counter()
            res[("monitor", variant)] = monitor(pack, idx, lambda m: mset)
            times[("monitor", variant)].append(time.perf_counter() - t)
            t = time.perf_counter()
            res[("final pass", variant)] = measure_many(pack, idx, eset, c.task)
            times[("final pass", variant)].append(time.perf_counter() - t)
    Nonlinear.measure_forward = joint
    worst: dict = {}
    for m in idx:
        _worst(res[("monitor", "joint")][m], res[("monitor", "model by model")][m], worst, "monitor ")
        _worst(res[("final pass", "joint")][m], res[("final pass", "model by model")][m], worst, "final ")
    print(f"{len(cfgs)} runs, monitor {c.monitor_contexts} contexts, final pass {args.contexts}, one thread")
    for (what, variant), ts in times.items():
        print(f"{what:10s} {variant:15s}: " + " / ".join(f"{t:.2f}" for t in ts) + " s")
    print("largest relative difference, joint against model by model:")
    for key, v in sorted(worst.items()):
        print(f"  {key}: {v:.1e}" + ("" if math.isfinite(v) else " (not finite)"))


if __name__ == "__main__":
    main()
