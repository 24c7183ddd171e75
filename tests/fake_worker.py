"""A stand-in for depthscale.train.training.run_pack, to test the sweep machinery without training.

It goes through the store API the way the trainer does (write_config, load/save_checkpoint,
finish or fail) and writes deterministic metrics. Environment knobs:
FAKE_WORKER_LOG: a directory; every start and finish of a run appends "<event> <pid>" to the
file named by the run id there, so double execution is detectable.
FAKE_WORKER_SLEEP: seconds each run takes.
FAKE_WORKER_CKPT=1: load and save a checkpoint in each run (imports torch, which is slow).

Magic configs: noise == 0.5 makes the worker record `store.fail` for that run and go on;
noise == 0.25 makes it raise; lr > 1 gives a NaN run, finished with stopped_because="nan".

Run as a script it executes a small sweep: python tests/fake_worker.py STORE [options].
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

from depthscale.config.run import make_config, run_id


def pack_key(cfg) -> tuple:
    return (cfg.model, cfg.task, cfg.d, cfg.P)


def log_event(rid: str, event: str) -> None:
    logdir = os.environ.get("FAKE_WORKER_LOG")
    if not logdir:
        return
    fd = os.open(Path(logdir) / rid, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{event} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def events(logdir: Path, rid: str) -> list[tuple[str, int]]:
    path = Path(logdir) / rid
    if not path.exists():
        return []
    return [(e, int(p)) for e, p in (line.split() for line in path.read_text().splitlines())]


def expected_R(cfg) -> float:
    return 1.0 + 1.0 / cfg.L + cfg.a + 0.01 * cfg.seed


def run_pack(configs, store, device="cpu", progress=None) -> None:
    sleep = float(os.environ.get("FAKE_WORKER_SLEEP", "0"))
    checkpoints = os.environ.get("FAKE_WORKER_CKPT") == "1"  # off by default: torch imports slowly
    for cfg in configs:
        rid = run_id(cfg)
        store.write_config(cfg, device=device)
        log_event(rid, "start")
        resumed = False
        if checkpoints:
            resumed = store.load_checkpoint(rid) is not None
            store.save_checkpoint(rid, b"step 1")
        time.sleep(sleep)
        if cfg.noise == 0.25:
            raise RuntimeError(f"fake crash in run {rid}")
        if cfg.noise == 0.5:
            store.fail(rid, f"ValueError: fake failure in run {rid}")
            continue
        nan = cfg.lr > 1
        R = math.nan if nan else expected_R(cfg)
        metrics = {"R": R, "R_L": R, "R_L_se": 0.01, "steps": cfg.max_steps,
                   "stopped_because": "nan" if nan else "converged", "resumed": resumed,
                   "threads": _torch_threads(), "omp_threads": os.environ.get("OMP_NUM_THREADS"),
                   "pid": os.getpid(),
                   "A_per_layer": [R] * cfg.L}
        curves = {"step": [0, 10, 20], "monitor_loss": [3.0, 2.0, R]}
        store.finish(rid, metrics, curves)
        log_event(rid, "finish")


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")  # imported by the process executor's initializer
    return None if torch is None else torch.get_num_threads()


def configs(n: int, **overrides) -> list:
    """n distinct smoke configs (depths 1, 2, 4 times seeds)."""
    return [make_config("smoke", L=(1, 2, 4)[i % 3], seed=i // 3, **overrides) for i in range(n)]


def main() -> None:
    from depthscale.store.store import Store
    from depthscale.runs.sweeps import plan, run_sweep

    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--shard", default=None)
    ap.add_argument("--executor", default="inline")
    ap.add_argument("--max-pack", type=int, default=64)
    ap.add_argument("--lease-timeout", type=float, default=600.0)
    args = ap.parse_args()
    store = Store(args.store, lease_timeout=args.lease_timeout)
    sweep = plan(configs(args.n), store, args.shard, executor=args.executor, max_pack=args.max_pack, pack_key=pack_key)
    counts = run_sweep(sweep, store, worker=run_pack, progress=False, name="fake")
    print(counts, flush=True)


if __name__ == "__main__":
    main()
