"""The budget ladder's paper-preset runs on one GPU: a slice of registry.REGISTRY["budget"] at the
paper preset (depths 1-256), trained with the toolkit's own run_pack into a store, one process per
pack so that several packs share the device.

    PYTHONPATH=src python studies/budget_gpu.py --store "$OUT/store" --steps 20000 --seeds 0 --spectra 0,0

Every run is the registry's config (its run id is the one `depthscale sweep --experiment budget
--preset paper` would train), so the store merges with any other store of the study.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

from depthscale.experiments.registry import REGISTRY
from depthscale.kinds.lookup import pack_key
from depthscale.store.store import Store
from depthscale.train.training import run_pack


def _run(cfgs, store_dir, device):
    run_pack(cfgs, Store(store_dir), device, progress=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--steps", default="20000", help="comma list of budgets (max_steps)")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--spectra", default="0,0", help="a,b;a,b;...")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    steps = {int(s) for s in args.steps.split(",")}
    seeds = {int(s) for s in args.seeds.split(",")}
    spectra = {tuple(float(x) for x in p.split(",")) for p in args.spectra.split(";")}
    cfgs = [c for c in REGISTRY["budget"].configs("paper")
            if c.max_steps in steps and c.seed in seeds and (c.a, c.b) in spectra]
    packs: dict = {}
    for c in cfgs:
        packs.setdefault(pack_key(c), []).append(c)
    print(f"{len(cfgs)} runs in {len(packs)} packs", flush=True)
    t0 = time.time()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_run, args=(p, args.store, args.device)) for p in packs.values()]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print(f"done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
