"""The packed step op by op: FLOPs, bytes, roofline time (depthscale.bench.roofline.step_ops) and the time
torch.profiler measures for the same op, on the bench's work (the preset's fig6 depth sweep).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/roofline.py --preset cpu --steps 10 \
        --out benchmarks/results/roofline_cpu.json

Measured times are the profiler's self CPU time of the aten ops inside each phase of the step
(depthscale.base.timing phases become profiler ranges), matched to the roofline's ops by name and
shape; what matches no op is listed as "other". Profiling adds overhead (~10%), so the total is
above the unprofiled step time the bench reports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

from depthscale.bench.roofline import SAMPLER_DRAWS, SAMPLER_ONE_PASS, SAMPLER_TRANSFORM


def _shape_key(shapes) -> tuple:
    return tuple(tuple(s) for s in shapes)


def classify(phase: str, name: str, shapes: tuple, dims: dict) -> str:
    """The roofline op (roofline.step_ops names) an aten op of `phase` belongs to, or 'other'."""
    B, P, d, N, G, T = (dims[k] for k in ("B", "P", "d", "N", "G", "T"))
    K = dims.get("K", 1)  # seed groups (ensemble_forward runs equal ones in one call)
    first = shapes[0] if shapes else ()
    if phase == "sampling":  # the fused sampler's kernel calls (csrc/sampler.cpp)
        return {"depthscale_fused::sampler_draws": SAMPLER_DRAWS,
                "depthscale_fused::sampler_transform": SAMPLER_TRANSFORM,
                "depthscale_fused::sampler_contexts_keys": SAMPLER_ONE_PASS}.get(name, "other")
    if phase == "optimiser":
        return "Adam (read p, g, m, v; write p, m, v)"
    if name == "depthscale_fused::test_row_forward":
        return "fused test row: s = r u Xᵀ, softmax, p·y"
    if name == "depthscale_fused::test_row_backward":
        return "fused test row: recompute s, ds, d r_i, du = ds X"
    if name == "depthscale_fused::test_scales_forward":
        return "scales: r = (xᵀM_g x / N + ε)^-½"
    if name == "depthscale_fused::test_scales_backward":
        return "scales: dM_g = Σ c x xᵀ"
    if phase == "forward":
        if name == "aten::mm" and first == (B * P, d):
            return "scales: h = X W_xᵀ"
        if name in ("aten::linalg_vector_norm", "aten::square_", "aten::div_", "aten::add_", "aten::rsqrt",
                    "aten::pow_") and first[:1] == (B * P,):
            return "scales: r = 1/rms(h)"
        if name == "aten::bmm" and first == (B, T, d):
            return "scores s = u Xᵀ"
        if name == "aten::mul_" and len(first) == 3 and first[0] == B and first[2] == P:
            return "s ← r_i s (per model)"
        if name == "aten::_softmax":
            return "softmax"
        if name == "aten::bmm" and first == (B, 1, P):
            return "readout p·y"
        if ((name == "aten::mm" and first == (B, d)) or (name == "aten::mul" and first == (B, T, d))
                or (name == "aten::bmm" and first == (K, B, d))):  # (K, B, d): the seed groups in one call
            return "u = x_test [E_1..E_T] · r_test"
        return "other"
    if phase == "backward":
        if name == "aten::mm" and first == (d, B * P):
            return "scales: dW_x = Xᵀ dh"
        if name in ("aten::mul", "aten::mul_", "aten::pow", "aten::div_") and first[:1] == (B * P,):
            return "scales: dh = h · coef"
        if name == "aten::bmm" and first == (B, T, P):
            return "du = ds X"
        if name in ("aten::sub_", "aten::addcmul") or (name in ("aten::mul", "aten::mul_") and first in
                                                       ((B, 1, P), (B, T, P)) and shapes[1:2] != ((B, T, P),)):
            return "ds = p (y − p·y) dpy"
        if name == "aten::mul" and first == (B, T, P):
            return "d r_i = Σ_l ds s / r"
        if name in ("aten::sum", "aten::stack", "aten::div_") and len(first) == 3 and first[0] == B and first[2] == P:
            return "d r_i = Σ_l ds s / r"
        if name == "aten::mul_" and len(first) == 3 and first[0] == B and first[2] == P:
            return "ds ← r_i ds (per model)"
        if ((name == "aten::mm" and first[:1] == (d,)) or (len(first) == 3 and first[:2] in ((B, T), (K * B, T)))
                or (name == "aten::bmm" and first == (K, d, B))):
            return "dE = x_testᵀ du (and d r_test)"
        return "other"
    return "other"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    from torch.profiler import ProfilerActivity, profile

    from depthscale.bench import speed as bench, machine, roofline
    from depthscale.data import contexts, kernels
    from depthscale.train import memory
    from depthscale.base import timing
    from depthscale.kinds.lookup import build_pack
    from depthscale.train.optim import RowAdam
    from depthscale.train.schedule import base_lrs
    from depthscale.train.trainer import batch_order, train_step

    if args.threads:
        torch.set_num_threads(args.threads)
    memory.tune_allocator()
    cfgs = bench.sweep_configs(args.preset, args.seeds)
    cfgs = [cfgs[i] for i in batch_order(cfgs)]  # as run_pack and the bench build their packs
    c0 = cfgs[0]
    groups = [[cfgs[i].L for i in g] for g in bench.seed_groups(cfgs)]
    dims = {"B": c0.batch, "P": c0.P, "d": c0.d, "N": c0.N, "G": len(groups[0]), "T": sum(groups[0]),
            "K": len(groups)}
    pack = build_pack(cfgs)
    opt, lr0, idx = RowAdam(pack), base_lrs(cfgs), list(range(len(cfgs)))
    peak = machine.matmul_peak("cpu")["flops_per_s"]
    bw = machine.mem_bandwidth("cpu")["bytes_per_s"]
    rates = machine.transcendental_rates("cpu")
    for s in range(3):
        train_step(pack, opt, cfgs, idx, s, lr0, "cpu")
    timing.PROFILE_RANGES = True
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for s in range(3, 3 + args.steps):
            train_step(pack, opt, cfgs, idx, s, lr0, "cpu")
    timing.PROFILE_RANGES = False
    measured: dict[str, float] = defaultdict(float)
    others: dict[tuple, float] = defaultdict(float)
    for ev in prof.events():
        if not ev.name.startswith(("aten::", "_", "depthscale_fused::")):
            continue
        par, ph = ev.cpu_parent, None
        while par is not None:
            if par.name in timing.PHASES:
                ph = par.name
                break
            par = par.cpu_parent
        if ph is None:
            continue
        op = classify(ph, ev.name, _shape_key(ev.input_shapes or ()), dims)
        measured[(ph, op)] += ev.self_cpu_time_total / 1e6 / args.steps
        if op == "other":
            others[(ph, ev.name, str(ev.input_shapes)[:60])] += ev.self_cpu_time_total / 1e6 / args.steps
    n_params = sum(p.numel() for p in pack.parameters())
    fused = kernels.use_fused(torch.zeros(1))
    roof = roofline.roofline(roofline.step_ops(c0.d, c0.N, c0.P, c0.batch, groups, c0.task, n_params, fused=fused,
                                          one_pass=contexts.one_pass_available()),
                          peak, bw, rates)
    rows = []
    for o in roof["ops"]:
        m = measured.get((o["phase"], o["op"]), 0.0)
        rows.append(dict(o, measured_s=m))
    for ph in timing.TRAIN_PHASES:
        if measured.get((ph, "other")):
            rows.append({"phase": ph, "op": "other (small ops)", "flops": 0, "bytes": 0, "roofline_s": 0.0,
                         "bound": "-", "measured_s": measured[(ph, "other")]})
    print(f"preset {args.preset}, {len(cfgs)} models, threads {torch.get_num_threads()}, fused test row {fused}, "
          f"load {os.getloadavg()}, "
          f"peak {peak / 1e9:.1f} GFLOP/s, triad {bw / 1e9:.1f} GB/s")
    print(f"transcendentals per s (G): " + ", ".join(f"{k} {v / 1e9:.2f}" for k, v in rates.items()
                                                  if k not in ("n", "threads")))
    print("| phase | op | MFLOP | M calls | MB | roofline ms | bound | measured ms | measured / roofline |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|")
    for r in rows:
        ratio = f"{r['measured_s'] / r['roofline_s']:.1f}" if r["roofline_s"] else "—"
        calls = sum(r.get("calls", {}).values())
        print(f"| {r['phase']} | {r['op']} | {r['flops'] / 1e6:.0f} | {calls / 1e6:.2f} | {r['bytes'] / 1e6:.1f} | "
              f"{r['roofline_s'] * 1e3:.2f} | {r['bound']} | {r['measured_s'] * 1e3:.2f} | {ratio} |")
    tot_m = sum(r["measured_s"] for r in rows)
    print(f"| **all** | | {sum(r['flops'] for r in rows) / 1e6:.0f} | "
          f"{sum(sum(r.get('calls', {}).values()) for r in rows) / 1e6:.2f} | {sum(r['bytes'] for r in rows) / 1e6:.0f} | "
          f"**{roof['roofline_s'] * 1e3:.1f}** | | **{tot_m * 1e3:.1f}** | **{tot_m / roof['roofline_s']:.1f}** |")
    top = sorted(others.items(), key=lambda kv: -kv[1])[:8]
    print("largest unmatched:", [(k, round(v * 1e3, 2)) for k, v in top], file=sys.stderr)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"preset": args.preset, "threads": torch.get_num_threads(), "load": os.getloadavg(),
                       "peak_flops_per_s": peak, "bandwidth_bytes_per_s": bw, "transcendental_rates": rates, "rows": rows,
                       "roofline_s": roof["roofline_s"], "measured_s": tot_m}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
