"""The packed step's phases timed without a profiler, and a paired comparison of two source trees.

    python benchmarks/step_phases.py --steps 80                      # this tree: one JSON line
    python benchmarks/step_phases.py --ab /path/to/other/src --rounds 6 --out ab.json
    python benchmarks/step_phases.py --sampler [--ab SRC]              # the step's sampling alone

One line: the median over `--steps` steps (after 3 warm-up steps) of the bench's work (the cpu fig6
sweep of `depthscale.bench.speed`: 21 models, depths 1-64 x 3 seeds) in milliseconds: the whole step,
its sampling, forward, backward and optimiser as `trainer.train_step` counts them (its
`depthscale.base.timing` phases: `time.perf_counter` around each), and what no phase covered (the
graph and the batch freed as the step returns). torch.profiler adds its own cost per op and records
each tensor of a `torch._foreach_*` call as an op. `--ab SRC`: `--rounds` rounds, each running this
tree and then the tree whose `src` directory is SRC (PYTHONPATH) in fresh processes, so that the two
see the same machine state round by round; prints each round and the medians, and the per-round
differences (this - other).
`--sampler`: only the sampling of the step's batches (`trainer.step_batches`: the 3 seeds' 768
contexts, d = 16, P = 64, the difficult task with k = 2, in one fused-sampler call), the median over
`--steps` calls and the microseconds per context per thread.
On a shared VM a single run moves by +-1 ms; a difference is only read from paired rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PHASES = ("step", "sampling", "forward", "backward", "optimiser", "unattributed")  # (the last: step - phases)


def measure(steps: int, threads: int) -> dict:
    import torch

    from depthscale.base.timing import record
    from depthscale.bench.speed import sweep_configs
    from depthscale.kinds.lookup import build_pack
    from depthscale.train.memory import tune_allocator
    from depthscale.train.optim import RowAdam
    from depthscale.train.schedule import base_lrs
    from depthscale.train.trainer import batch_order, train_step

    tune_allocator()
    torch.set_num_threads(threads)
    cfgs = sweep_configs("cpu", 3)
    sub = [cfgs[j] for j in batch_order(cfgs)]
    pack, idx = build_pack(sub), list(range(len(sub)))
    opt, lr0 = RowAdam(pack), base_lrs(sub)
    times = {p: [] for p in PHASES}
    for step in range(3 + steps):
        with record() as rec:  # the trainer's own phases (depthscale.base.timing)
            train_step(pack, opt, sub, idx, step, lr0, "cpu")
        if step >= 3:
            times["step"].append(rec.wall_seconds * 1e3)
            for p in PHASES[1:-1]:
                times[p].append(rec.phases.get(p, 0.0) * 1e3)
            times["unattributed"].append(rec.unattributed_seconds * 1e3)
    return {p: round(statistics.median(v), 3) for p, v in times.items()}


def measure_sampler(steps: int, threads: int) -> dict:
    import torch

    from depthscale.bench.speed import sweep_configs
    from depthscale.train.memory import tune_allocator
    from depthscale.train.trainer import step_batches

    tune_allocator()
    torch.set_num_threads(threads)
    cfgs = sweep_configs("cpu", 3)
    idx = list(range(len(cfgs)))
    n = len({c.seed for c in cfgs}) * cfgs[0].batch  # the contexts of one step
    times = []
    for step in range(3 + steps):
        t0 = time.perf_counter()
        step_batches(cfgs, idx, step, "cpu")
        if step >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    return {"sampling": round(ms, 3), "us_per_context_thread": round(ms * 1e3 * threads / n, 3)}


def _child(src: str | None, steps: int, threads: int, sampler: bool = False) -> dict:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    args = ["--steps", str(steps), "--threads", str(threads)] + (["--sampler"] if sampler else [])
    out = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def paired(other: str, rounds: int, steps: int, threads: int, sampler: bool = False) -> dict:
    here = str(Path(__file__).resolve().parents[1] / "src")
    runs = []
    for r in range(rounds):
        a, b = _child(here, steps, threads, sampler), _child(other, steps, threads, sampler)
        runs.append({"this": a, "other": b})
        first = next(iter(a))
        print(f"round {r + 1}: this {a[first]:.2f} ms, other {b[first]:.2f} ms", file=sys.stderr)
    keys = list(runs[0]["this"])
    med = {w: {p: round(statistics.median(x[w][p] for x in runs), 3) for p in keys} for w in ("this", "other")}
    diff = {p: sorted(round(x["this"][p] - x["other"][p], 3) for x in runs) for p in keys}
    return {"rounds": runs, "median": med, "differences_this_minus_other": diff, "other_src": other,
            "steps": steps, "threads": threads, "sampler": sampler}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ab", metavar="SRC", help="the other tree's src directory, for a paired comparison")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--sampler", action="store_true", help="time only the sampling of the step's batches")
    a = ap.parse_args(argv)
    if a.steps < 1 or a.threads < 1 or a.rounds < 1:
        print(f"step_phases: --steps, --threads and --rounds must be >= 1, got {a.steps}, {a.threads}, {a.rounds}",
              file=sys.stderr)
        return 2
    if a.ab and not (Path(a.ab) / "depthscale").is_dir():
        print(f"step_phases: --ab {a.ab!r} has no depthscale package (give the other tree's src directory)",
              file=sys.stderr)
        return 2
    if a.ab:
        result = paired(a.ab, a.rounds, a.steps, a.threads, a.sampler)
    else:
        result = (measure_sampler if a.sampler else measure)(a.steps, a.threads)
    text = json.dumps(result, indent=None if not a.ab else 1)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
