"""Resident memory of a pack's final pass over its evaluation set (issue 51): the 21 runs of the cpu
fig6 (0,0) pack (depths 1-64 x 3 seeds, random initial parameters: memory does not depend on them)
measured together (`measure_many`) on the streamed set of N contexts, under the worker's allocator
settings (`tune_allocator`, the trainer's `returning_memory` around the pass), in this process.

    python benchmarks/final_pass_memory.py [N] [--history K]

Prints the resident set before the pass, its peak during (memory.PeakMemory) and after, and the
part of the pack's memory estimate that counts the pass (`memory.pack_bytes`' final-pass term:
N x (layers + 9 x models) float32). `--history K` first runs K forward and backward passes of a
256-context batch, as training leaves the heap. Run it with PYTHONPATH=<another checkout>/src to
measure another version of the measurement.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from depthscale.config.run import make_config
from depthscale.data.measurements import eval_contexts, measure_many
from depthscale.kinds.lookup import build_pack
from depthscale.train import memory


def rss_mib() -> float:
    return memory.rss_bytes() / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=102400, help="evaluation contexts (the cpu preset's: 102,400)")
    ap.add_argument("--history", type=int, default=0, help="training-like forward/backward passes before the pass")
    args = ap.parse_args()
    torch.set_num_threads(1)
    memory.tune_allocator()
    cfgs = [make_config("cpu", model="nonlinear", task="difficult", k=2, a=0.0, b=0.0, L=L, seed=s)
            for L in (1, 2, 4, 8, 16, 32, 64) for s in range(3)]
    pack = build_pack(cfgs)
    if args.history:
        ctx = eval_contexts(cfgs[0], 256, 99)[0]
        for _ in range(args.history):
            outs = pack(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd)
            sum(o.y_hat_B.pow(2).mean() for o in outs).backward()
        pack.zero_grad(set_to_none=True)
    before = rss_mib()
    t0 = time.perf_counter()
    with memory.PeakMemory(torch.device("cpu"), interval=0.2) as peak, memory.returning_memory():
        chunks = eval_contexts(cfgs[0], args.n, cfgs[0].eval_seed, hold=False)
        mets = measure_many(pack, list(range(len(cfgs))), chunks, "difficult", [{} for _ in cfgs])
    seconds = time.perf_counter() - t0
    layers = sum(c.L for c in cfgs)
    estimate = memory.FLOAT * args.n * (layers + 9 * len(cfgs)) / 2**20  # pack_bytes' finals term
    above = peak.peak_bytes / 2**20
    print(json.dumps({"n": args.n, "history": args.history, "before_mib": round(before), "peak_mib": round(before + above),
                      "peak_above_mib": round(above), "after_above_mib": round(rss_mib() - before),
                      "estimate_final_pass_mib": round(estimate), "seconds": round(seconds, 1),
                      "R_first_last": [mets[0]["R"], mets[-1]["R"]]}))


if __name__ == "__main__":
    main()
