"""Device check (issue 29): one data stream on every device, the model's numbers across devices, and
step times on the accelerator. Prepared to run as one short script on a CUDA machine:

    PYTHONPATH=src python benchmarks/device_stream.py --out "$OUT" [--device cuda]

1. stream: contexts sampled for the same (seed, step) on the CPU and on the device are compared
   tensor by tensor, bit for bit (training batches of four configurations at three steps, and an
   evaluation set);
2. models: the same smoke packs (nonlinear depths 1, 2, 4; linear; layer_values) trained 40 steps on
   the CPU and on the device; R, A, C compared (same data, so only float rounding may differ);
3. speed: the paper preset's fig6 pack (d = N = 16, P = 64, depths 1-256, one seed, batch 512) and
   the cpu bench's sweep (depths 1-64 x 3 seeds, batch 256) timed on the device (`bench.run_packed`:
   the median step and its data-sampling part), and one paper-preset linear step at L = 1, 4.
Writes device_stream.json under --out, and prints one summary line per part.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch

from depthscale.bench.speed import run_packed, sweep_configs
from depthscale.base.seeds import step_seed
from depthscale.config.run import PRESET_DEPTHS, make_config
from depthscale.data.contexts import make_generator, sample_for
from depthscale.data.measurements import eval_contexts
from depthscale.train.training import train_pack

FIELDS = ("X_BxPxd", "y_BxP", "xq_Bxd", "ystar_B", "sel_Bxk", "t_Bxd", "beta_Bxd", "O_Bxdxd")


def _same(a, b) -> bool:
    return all(torch.equal(getattr(a, f).cpu(), getattr(b, f).cpu()) for f in FIELDS)


def stream(device: str) -> dict:
    cfgs = {"smoke nonlinear difficult": make_config("smoke", model="nonlinear", task="difficult"),
            "cpu nonlinear (0.5,0.5)": make_config("cpu", model="nonlinear", task="difficult", a=0.5, b=0.5),
            "smoke linear easy": make_config("smoke", model="linear", task="easy"),
            "cpu clustered K=4 (1,0)": make_config("cpu", model="nonlinear", task="difficult", a=1.0, clusters=4)}
    out = {}
    for name, cfg in cfgs.items():
        ok = []
        for step in (0, 1, 1000):
            a = sample_for(cfg, 64, make_generator(step_seed(cfg.seed, step), "cpu"), "cpu")
            b = sample_for(cfg, 64, make_generator(step_seed(cfg.seed, step), device), device)
            ok.append(_same(a, b) and b.X_BxPxd.device.type == torch.device(device).type)
        ea = eval_contexts(cfg, 512, cfg.eval_seed, "cpu")
        eb = eval_contexts(cfg, 512, cfg.eval_seed, device)
        ok.append(all(_same(x, y) for x, y in zip(ea, eb)))
        out[name] = all(ok)
    return out


def models(device: str, steps: int = 40) -> dict:
    def cfgs():
        common = dict(max_steps=steps, eval_contexts=1024, monitor_contexts=128, eval_every=20)
        return {"nonlinear L=1,2,4": [make_config("smoke", model="nonlinear", task="difficult", L=L, **common)
                                      for L in (1, 2, 4)],
                "layer_values L=2": [make_config("smoke", model="layer_values", task="difficult", L=2, **common)],
                "linear L=4": [make_config("smoke", model="linear", task="difficult", L=4, **common)]}
    out = {}
    for name, group in cfgs().items():
        rc = train_pack(group, "cpu", progress=False)
        rd = train_pack(group, device, progress=False)
        worst = max(abs(x[m] - y[m]) / max(abs(x[m]), 1e-12) for x, y in zip(rc, rd) for m in ("R", "A", "C"))
        out[name] = {"R_cpu": [x["R"] for x in rc], "R_device": [y["R"] for y in rd], "max_rel_diff": worst}
    return out


def speed(device: str, steps: int) -> dict:
    dev = torch.device(device)
    out = {}
    paper = [make_config("paper", model="nonlinear", task="difficult", L=L, seed=0) for L in PRESET_DEPTHS["paper"]]
    for name, cfgs in (("paper fig6 pack (depths 1-256, 1 seed, batch 512)", paper),
                       ("cpu bench sweep (depths 1-64 x 3 seeds, batch 256)", sweep_configs("cpu", 3))):
        r = run_packed(cfgs, steps, 3, dev)
        s = sorted(r["seconds"])
        d = sorted(r["data_seconds"])
        out[name] = {"median_step_ms": 1e3 * s[len(s) // 2], "min_step_ms": 1e3 * s[0],
                     "median_data_ms": 1e3 * d[len(d) // 2], "steps": steps,
                     "peak_memory_bytes": r["peak_memory_bytes"]}
    for L in (1, 4):
        cfg = make_config("paper", model="linear", task="easy", a=2.0, b=1.0, L=L)
        r = run_packed([cfg], max(2, steps // 10), 1, dev)
        s = sorted(r["seconds"])
        out[f"paper linear L={L} (d=128, P=1024, batch 512)"] = {
            "median_step_ms": 1e3 * s[len(s) // 2], "median_data_ms": 1e3 * sorted(r["data_seconds"])[len(s) // 2]}
    return out


def trainer_speed(device: str, steps: int = 150) -> dict:
    """The training loop itself (trainer.Trainer through train_pack) on the paper fig6 pack, with the
    prefetcher off and on: wall seconds per step over `steps` steps (one final evaluation of 256
    contexts per run included, amortised)."""
    out = {}
    cfgs = [make_config("paper", model="nonlinear", task="difficult", L=L, seed=0, max_steps=steps, eval_every=10**6,
                        eval_contexts=256, monitor_contexts=64, checkpoint_every=10**6) for L in PRESET_DEPTHS["paper"]]
    for pf in ("0", "1", "0", "1"):
        os.environ["DEPTHSCALE_PREFETCH"] = pf
        torch.cuda.synchronize() if device.startswith("cuda") else None
        t = time.perf_counter()
        train_pack(cfgs, device, progress=False)
        torch.cuda.synchronize() if device.startswith("cuda") else None
        out.setdefault(f"prefetch={pf}", []).append(1e3 * (time.perf_counter() - t) / steps)
    os.environ.pop("DEPTHSCALE_PREFETCH", None)
    return {k: {"ms_per_step": v} for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--trainer", action="store_true", help="also time the training loop with the prefetcher off and on")
    args = ap.parse_args()
    t0 = time.time()
    res = {"device": args.device, "torch": torch.__version__,
           "name": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
           "cpu_threads": torch.get_num_threads()}
    path = Path(args.out) / "device_stream.json"
    path.parent.mkdir(parents=True, exist_ok=True)

    def save():
        res["seconds"] = time.time() - t0
        path.write_text(json.dumps(res, indent=1))

    res["stream_bit_for_bit"] = stream(args.device)
    save()
    print("stream:", res["stream_bit_for_bit"], flush=True)
    res["models"] = models(args.device)
    save()
    print("models:", {k: v["max_rel_diff"] for k, v in res["models"].items()}, flush=True)
    if args.trainer:
        res["trainer"] = trainer_speed(args.device)
        save()
        print("trainer (paper fig6 pack, ms/step):", res["trainer"], flush=True)
    if not args.skip_speed:
        res["speed"] = speed(args.device, args.steps)
        save()
        for k, v in res["speed"].items():
            print(f"speed: {k}: {v['median_step_ms']:.1f} ms/step (data {v['median_data_ms']:.1f} ms)", flush=True)
    print(f"done in {time.time() - t0:.0f} s -> {path}")


if __name__ == "__main__":
    main()
