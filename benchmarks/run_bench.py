"""The naive loop and the packed engine on the same depth sweep, timed side by side in one run.

    python benchmarks/run_bench.py --preset cpu --out benchmarks/results/cpu.json
    python benchmarks/run_bench.py --preset cpu --device cuda --dtype tf32 --out gpu-tf32.json

Prints a table and writes everything `depthscale.bench.speed.bench` measured as JSON. Timings are
medians over steps; on a shared machine run it more than once (--repeat) and compare.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DEVICES = ("cpu", "cuda", "auto")  # as depthscale.bench.speed (torch is imported after the OpenMP setting)
DTYPES = ("float32", "tf32", "bf16")


def _fmt_bytes(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def table(r: dict) -> str:
    w = r["work"]
    depths = ",".join(str(L) for L in w["depths"])
    head = (f"work: {w['preset']} fig6 depth sweep — {w['model']}, {w['task']} k={w['k']}, "
            f"d={w['d']} N={w['N']} P={w['P']} batch {w['batch']}, depths {depths} x {w['seeds']} seeds "
            f"({w['models']} models, {w['layers']} layers)\n"
            f"machine: {r['machine']['device']} {r['machine']['dtype']}, {r['machine']['threads']} threads, "
            f"torch {r['machine']['torch']}, OMP_WAIT_POLICY {r['machine']['omp_wait_policy']}, "
            f"load {r['timing']['loadavg_before']} -> {r['timing']['loadavg_after']}; matmul peak {r['peak_matmul_flops_per_s'] / 1e9:.1f} GFLOP/s "
            f"(n={r['machine']['peak_matmul_n']})\n")
    rows = [("", "naive loop", "packed engine", "engine, 1 model at a time")]
    ns, ps, ss = (r.get("naive_seconds_per_sweep_step"), r["packed_seconds_per_sweep_step"],
                  r.get("single_seconds_per_sweep_step"))
    f = lambda x, fmt: "-" if x is None else fmt.format(x)  # noqa: E731
    rows.append(("seconds per sweep step", f(ns, "{:.3f}"), f(ps, "{:.4f}"), f(ss, "{:.3f}")))
    rows.append(("sweep steps per second", f(r.get("naive_steps_per_s"), "{:.3f}"),
                 f(r["packed_steps_per_s"], "{:.2f}"), f(r.get("single_steps_per_s"), "{:.2f}")))
    rows.append(("speedup over naive", "1", f(r.get("speedup"), "{:.1f}x"),
                 f(None if ss is None or ns is None else ns / ss, "{:.1f}x")))
    nf = r.get("naive_flops_per_step")
    rows.append(("GFLOP per sweep step", f(None if nf is None else nf / 1e9, "{:.1f}"),
                 f(r["flops_per_step"] / 1e9, "{:.2f}"), f(r["flops_per_step"] / 1e9, "{:.2f}")))
    rows.append(("achieved GFLOP/s", f(None if nf is None or ns is None else nf / ns / 1e9, "{:.1f}"),
                 f(r["flops_per_s"] / 1e9, "{:.1f}"),
                 f(None if ss is None else r["flops_per_step"] / ss / 1e9, "{:.1f}")))
    rows.append(("fraction of matmul peak",
                 f(None if nf is None or ns is None else nf / ns / r["peak_matmul_flops_per_s"], "{:.0%}"),
                 f(r["fraction_of_peak"], "{:.0%}"), "-"))
    rows.append(("peak memory", _fmt_bytes(r.get("naive_peak_memory_bytes")), _fmt_bytes(r["peak_memory_bytes"]), "-"))
    d = r["data_seconds_per_sweep_step"]
    rows.append(("of which data sampling (s)", f"{d['naive']:.3f}", f"{d['packed']:.4f}", "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)) for row in rows]
    tail = (f"\npacked FLOP count: matmul FLOPs of forward + backward of the executed algorithm "
            f"(forward {r['flops_forward_per_step'] / 1e9:.2f} GFLOP); naive: torch FlopCounterMode on its step.\n"
            f"fraction of peak without data sampling: {r['fraction_of_peak_excluding_data']:.0%}; "
            f"same work: naive and packed losses agree to {r.get('same_work_loss_max_rel_diff', float('nan')):.1e} (max rel.)")
    if "roofline_s" in r:
        tail += (f"\nroofline: step {r['step_s'] * 1e3:.1f} ms against a per-op roofline of {r['roofline_s'] * 1e3:.1f} ms "
                 f"(ratio {r['roofline_ratio']:.2f}; matmul peak {r['peak_matmul_flops_per_s'] / 1e9:.1f} GFLOP/s, "
                 f"triad bandwidth {r['mem_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s, "
                 f"{r['roofline']['bytes_per_step'] / 1e6:.0f} MB per step)")
    notes = "".join(f"\nnote: {n}" for n in r.get("notes", []))
    return head + "\n".join(lines) + tail + notes


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu", choices=["smoke", "cpu", "paper"])
    ap.add_argument("--device", default="auto", choices=DEVICES)
    ap.add_argument("--dtype", default="float32", choices=DTYPES)
    ap.add_argument("--steps", type=int, default=20, help="timed packed sweep steps")
    ap.add_argument("--naive-steps", type=int, default=2, help="timed steps per model of the naive loop")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--repeat", type=int, default=1, help="run the whole comparison this many times")
    ap.add_argument("--no-single", action="store_true", help="skip the one-model-at-a-time engine")
    ap.add_argument("--omp-wait-policy", choices=["passive", "active"], default=None,
                    help="OpenMP idle threads sleep (passive) or spin (active); passive is far faster "
                         "on a machine whose cores other jobs share. Default: the runtime's")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = ap.parse_args(argv)
    if args.omp_wait_policy:
        if "torch" in sys.modules:
            raise SystemExit("--omp-wait-policy must be set before torch is imported")
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()
    import torch

    from depthscale.bench.speed import bench

    if args.threads:
        torch.set_num_threads(args.threads)
    runs = []
    for i in range(args.repeat):
        r = bench(args.preset, args.device, args.dtype, args.steps, args.naive_steps, args.warmup, args.seeds,
                  single=not args.no_single, progress=True)
        runs.append(r)
        print(("" if i == 0 else "\n") + table(r), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(runs[0] if len(runs) == 1 else runs, indent=1) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
