"""The monitor's forward with and without the attention rows (issue 50), paired in one process.

    python benchmarks/monitor_rows.py [--rounds 3]

One fig6 (0,0) pack of the cpu preset (3 seeds x 7 depths, untrained) on its 10,240-context monitor
set, one thread: `measurements.monitor` as it runs (the kind's `monitor_forward`: the fused test-row
kernel, no B x L x P rows, at k != 1) against the plain forward (rows and all), alternating. Prints
seconds per monitor call and the largest relative difference of R between the two.
"""
from __future__ import annotations

import argparse
import time

import torch

from depthscale.base import seeds
from depthscale.config.run import make_config
from depthscale.data.measurements import eval_contexts, monitor
from depthscale.kinds.base import ModelKind
from depthscale.kinds.lookup import build_pack


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfgs = [make_config("cpu", model="nonlinear", task="difficult", k=2, a=0.0, b=0.0, L=L, seed=s)
            for s in range(3) for L in (1, 2, 4, 8, 16, 32, 64)]
    pack = build_pack(cfgs)
    c = cfgs[0]
    mset = eval_contexts(c, c.monitor_contexts, seeds.monitor_seed(c.eval_seed), "cpu", hold=True)
    idx = list(range(len(cfgs)))
    cls, own = type(pack), type(pack).monitor_forward
    times: dict[str, list[float]] = {"without rows": [], "with rows": []}
    out = {}
    for _ in range(args.rounds):
        for name, fn in (("without rows", own), ("with rows", ModelKind.monitor_forward)):
            cls.monitor_forward = fn
            t = time.perf_counter()
            out[name] = monitor(pack, idx, lambda m: mset)
            times[name].append(time.perf_counter() - t)
    cls.monitor_forward = own
    rel = max(abs(out["without rows"][m]["R"] / out["with rows"][m]["R"] - 1) for m in idx)
    print(f"{len(cfgs)} runs, {c.monitor_contexts} contexts, eval_every {c.eval_every}, max_steps {c.max_steps}")
    for name, ts in times.items():
        print(f"{name}: " + " / ".join(f"{t:.2f}" for t in ts) + " s per monitor call")
    print(f"largest relative difference of R: {rel:.2e}")


if __name__ == "__main__":
    main()
