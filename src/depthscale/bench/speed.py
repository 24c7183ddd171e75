"""Speed: the packed engine against the one-model-at-a-time loop, on the same work (issue 5).

The work is one preset's fig6 depth sweep (nonlinear model, difficult task k=2, a = b = 0, the
preset's depths, seeds 0..seeds-1). One *sweep step* advances every model of the sweep by one
optimiser step on fresh contexts (sampling included). Three ways of doing it are timed in one run:

- naive: `naive.train_naive`, a research script's loop — one model at a time, the paper's
  (P+1)x(P+1) masked attention layer by layer, `torch.optim.Adam` per model;
- packed: depthscale's engine (`training.train_step`, what `train_pack` runs every step): all
  models in one pack, the models that share a seed's batch as one computation;
- single (detail): the same engine with a pack of one model, models one at a time — it separates
  what packing buys from what the parallel-ensemble algebra buys.

FLOPs are counted analytically for the algorithm the packed engine executes (matmul FLOPs of
forward and backward, `flops_per_step`; a test checks the count against torch's FlopCounterMode),
and compared with the machine's measured matmul peak in the same dtype (`matmul_peak`).
Timings are medians over steps; on a shared machine, repeat and compare.
"""

from __future__ import annotations

import gc
import os
import platform
import sys
import time
from contextlib import nullcontext
from typing import Callable

import torch

from depthscale.base import seeds
from depthscale.base.errors import InputError
from depthscale.bench.naive import train_naive
from depthscale.config.paper import FIG3_SPECTRA
from depthscale.config.run import PRESET_DEPTHS, RunConfig, make_config
from depthscale.data import kernels
from depthscale.data.contexts import one_pass_available
from depthscale.kinds.lookup import build_pack, model_class
from depthscale.train.memory import PeakMemory, rss_bytes, tune_allocator
from depthscale.train.prefetch import Prefetcher
from depthscale.bench.machine import (TRANSCENDENTALS, autocast_dtype, check_dtype, matmul_peak, mem_bandwidth, precision,
                                resolve_device, sync_device, transcendental_rates)
from depthscale.bench.roofline import roofline, step_ops
from depthscale.train.optim import RowAdam
from depthscale.train.schedule import base_lrs
from depthscale.train.trainer import batch_order, step_batches, train_step


# ---------------------------------------------------------------- work ----

def sweep_configs(preset: str = "cpu", seeds: int = 3) -> list[RunConfig]:
    """The fig6 depth sweep of a preset: nonlinear, difficult k=2, (a, b) = (0, 0)."""
    return [make_config(preset, model="nonlinear", task="difficult", k=2, a=0.0, b=0.0, L=L, seed=s)
            for L in PRESET_DEPTHS[preset] for s in range(seeds)]


def seed_groups(cfgs: list[RunConfig]) -> list[list[int]]:
    """Models that share a training batch (one seed) — the packed engine's unit of computation."""
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(cfgs):
        groups.setdefault(c.seed, []).append(i)
    return list(groups.values())


def flops_per_step(kind: str, d: int, N: int, P: int, B: int, groups: list[list[int]], fused: bool = False) -> dict:
    """Matmul FLOPs of one packed training step (forward and backward) of model kind `kind`, counted
    for the algorithm it executes (its class's `flops_per_step`: the ensemble kinds,
    `kinds.ensemble.Nonlinear.flops_per_step`); `groups` lists the depths of the models that share
    one batch."""
    return model_class(kind).flops_per_step(d, N, P, B, groups, fused)


def sweep_flops(cfgs: list[RunConfig], fused: bool = False) -> dict:
    c0 = cfgs[0]
    groups = [[cfgs[i].L for i in g] for g in seed_groups(cfgs)]
    return flops_per_step(c0.model, c0.d, c0.N, c0.P, c0.batch, groups, fused)


def child_peak_rss(engine: str, preset: str, seeds: int, steps: int, threads: int) -> int:
    """(Run in a fresh process.) Peak resident memory above the level before the engine started
    (after a smoke-preset warm-up has loaded the kernels): `steps` packed sweep steps, or `steps`
    naive steps of the deepest model (the naive loop holds one model at a time, and the deepest
    holds the most)."""
    import resource

    torch.set_num_threads(threads)

    def run(p: str, **over) -> None:
        cfgs = [c.replace(**over) for c in sweep_configs(p, seeds)]
        if engine == "packed":
            run_packed(cfgs, steps, 0, torch.device("cpu"))
        else:
            train_naive(max(cfgs, key=lambda c: c.L), steps)

    run("smoke", batch=2)  # loads the kernels' code and data, so the baseline below includes them
    gc.collect()
    base = rss_bytes()
    run(preset)
    return max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base)


def cpu_peak_memory(engine: str, preset: str, seeds: int, steps: int = 2) -> int:
    """Peak memory of an engine on the CPU, measured in a fresh Python process (the resident-set
    high-water mark above its level before the engine started), so that neither the allocator's
    state nor the other engine's memory in this process can hide or inflate it."""
    import json
    import subprocess

    code = ("import json, sys; from depthscale.bench.speed import child_peak_rss; "
            "print(child_peak_rss(**json.loads(sys.argv[1])))")
    args = json.dumps({"engine": engine, "preset": preset, "seeds": seeds, "steps": steps,
                       "threads": torch.get_num_threads()})
    out = subprocess.run([sys.executable, "-c", code, args], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------- engines ----

def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def run_packed(cfgs: list[RunConfig], steps: int, warmup: int, dev: torch.device, dtype: str = "float32",
               models: list[int] | None = None, track_memory: bool | None = None) -> dict:
    """Time the packed engine: `warmup` + `steps` sweep steps of the models `models` (default
    all) from their initialisation. Returns per-step seconds (timed steps), losses (all steps,
    steps x models) and peak memory (`PeakMemory`; by default only on a GPU, where it is free —
    on the CPU its sampling thread would share the cores being timed; None when not tracked). Off
    the CPU the batches are prefetched as in training (`prefetch.Prefetcher`): data_seconds is then
    the wait for them, not their drawing."""
    track = dev.type == "cuda" if track_memory is None else track_memory
    models = list(range(len(cfgs))) if models is None else models
    order = batch_order([cfgs[i] for i in models])  # as run_pack builds its packs
    sub = [cfgs[models[j]] for j in order]
    back = torch.argsort(torch.tensor(order))  # losses in the order of `models`
    secs, cpu, data, losses = [], [], [], []
    with precision(dtype, dev), (PeakMemory(dev) if track else nullcontext()) as mem:
        pack = build_pack(sub).to(dev)
        opt = RowAdam(pack)
        lr0_M = base_lrs(sub)
        idx = list(range(len(sub)))
        # as the trainer does: off the CPU, the next step's batches are drawn while this one trains
        ahead = Prefetcher(lambda ids, k: step_batches(sub, ids, k, "cpu"), dev)
        for step in range(warmup + steps):
            sync_device(dev)
            t0, c0 = time.perf_counter(), time.process_time()
            batches = ahead.get(idx, step) or step_batches(sub, idx, step, dev)  # timed apart: data_seconds
            sync_device(dev)
            t1 = time.perf_counter()
            loss, _ = train_step(pack, opt, sub, idx, step, lr0_M, dev, autocast=autocast_dtype(dtype), batches=batches)
            sync_device(dev)
            if step >= warmup:
                secs.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                data.append(t1 - t0)
            losses.append(loss.float().cpu()[back])
    ahead.close()
    return {"seconds": secs, "cpu_seconds": cpu, "data_seconds": data, "losses": torch.stack(losses),
            "peak_memory_bytes": mem.peak_bytes if track else None, "prefetch": ahead.enabled}


def run_naive(cfgs: list[RunConfig], steps: int, warmup: int, dev: torch.device, dtype: str = "float32",
              count_flops: bool = True, track_memory: bool | None = None) -> dict:
    """Time the baseline: every model trained alone for `warmup` + `steps` steps. A sweep step
    costs the sum over models of each model's median step time. FLOPs are measured with
    torch's FlopCounterMode on each model's first step (not timed) when `count_flops`. Peak
    memory as in `run_packed`."""
    track = dev.type == "cuda" if track_memory is None else track_memory
    per_model, per_model_cpu, losses, peaks, flops = [], [], [], [], 0
    with precision(dtype, dev):
        for cfg in cfgs:
            times: list[float] = []
            cpu: list[float] = []
            last = [time.process_time()]
            counter = None

            def on_step(step, secs):
                now = time.process_time()
                if step >= warmup:
                    times.append(secs)
                    cpu.append(now - last[0])  # process time since the previous step ended
                last[0] = now

            if count_flops:
                from torch.utils.flop_counter import FlopCounterMode

                counter = FlopCounterMode(display=False)
                with counter:
                    train_naive(cfg, 1, dev, amp_dtype=autocast_dtype(dtype))
                flops += counter.get_total_flops()
            with (PeakMemory(dev) if track else nullcontext()) as mem:
                _, ls = train_naive(cfg, warmup + steps, dev, on_step=on_step, amp_dtype=autocast_dtype(dtype))
            per_model.append(_median(times))
            per_model_cpu.append(_median(cpu))
            losses.append(torch.tensor(ls))
            peaks.append(mem.peak_bytes if track else 0)
    return {"model_seconds": per_model, "sweep_step_seconds": sum(per_model),
            "sweep_step_cpu_seconds": sum(per_model_cpu), "losses": torch.stack(losses, 1),
            "peak_memory_bytes": max(peaks) if track else None, "flops_per_step": flops if count_flops else None}


def run_single(cfgs: list[RunConfig], steps: int, warmup: int, dev: torch.device, dtype: str = "float32") -> dict:
    """The packed engine with a pack of one, models one at a time (isolates packing)."""
    per_model = []
    for i in range(len(cfgs)):
        per_model.append(_median(run_packed(cfgs, steps, warmup, dev, dtype, models=[i])["seconds"]))
    return {"model_seconds": per_model, "sweep_step_seconds": sum(per_model)}


def linear_configs(preset: str = "cpu", L: int | None = None, seeds: int = 1) -> list[RunConfig]:
    """The fig3 runs of one depth (default the preset's deepest): the linear model on the easy task,
    every Table 2 spectrum x `seeds` seeds, one pack (linear packs mix spectra and seeds)."""
    L = max(PRESET_DEPTHS[preset]) if L is None else int(L)
    return [make_config(preset, model="linear", task="easy", a=a, b=b, L=L, seed=s)
            for s in range(seeds) for a, b in FIG3_SPECTRA]


def bench_linear(preset: str = "cpu", device: str = "auto", dtype: str = "float32", steps: int = 5,
                 warmup: int = 1, L: int | None = None, seeds: int = 1) -> dict:
    """The linear model's batched pack (every spectrum and seed of one depth as one computation,
    `Linear.linear_forward`) against the same runs one at a time, same steps, same losses."""
    dev = resolve_device(device)
    check_dtype(dtype, dev)
    cfgs = linear_configs(preset, L, seeds)
    packed = run_packed(cfgs, steps, warmup, dev, dtype)
    sg = run_single(cfgs, steps, warmup, dev, dtype)
    batched_s = _median(packed["seconds"])
    c0 = cfgs[0]
    return {"models": len(cfgs), "L": c0.L, "d": c0.d, "P": c0.P, "N": c0.N, "batch": c0.batch,
            "batched_seconds_per_step": batched_s, "one_at_a_time_seconds_per_step": sg["sweep_step_seconds"],
            "speedup": sg["sweep_step_seconds"] / batched_s,
            "step": "every run of the pack advanced by one optimiser step on fresh contexts"}


# --------------------------------------------------------------- bench ----

def bench(preset: str = "cpu", device: str = "auto", dtype: str = "float32", steps: int | None = None,
          naive_steps: int = 2, warmup: int = 2, seeds: int = 3, naive: bool = True, single: bool = True,
          progress: bool = False, peak_size: int | None = None, tune_malloc: bool = True,
          memory: bool = True, linear: bool = True, bandwidth_size: int | None = None) -> dict:
    """Time the naive loop and the packed engine on the preset's fig6 depth sweep, side by side.

    `steps`: timed packed sweep steps (default 20); `naive_steps`: timed steps per naive model.
    Returns naive_steps_per_s, packed_steps_per_s (sweep steps per second), speedup,
    flops_per_s (packed), peak_matmul_flops_per_s, fraction_of_peak, and details: FLOPs per sweep
    step (packed count; the naive loop's measured count), peak memory of each, seconds per sweep
    step, the data-sampling share, the one-model-at-a-time engine, and a check that the naive and
    packed runs produced the same losses (same work); for tf32 / bf16, the largest relative
    deviation of the packed losses from a float32 run of the same steps. `peak_size`: side of the
    peak matmul.
    `bandwidth_size`: elements per array of the triad (`mem_bandwidth`).
    Roofline (issues 15, 29): `step_s` (the median sweep step, sampling included), `roofline_s` (the
    per-op roofline of the same step, `step_ops` / `roofline`, with the transcendental calls —
    the softmax's exponentials, Box-Muller's logs, sines and cosines — counted at their measured
    rates, `transcendental_rates_per_s`), `roofline_ratio` = step_s / roofline_s,
    `roofline_ratio_without_transcendentals` (FLOPs and bytes only, as issue 15 defined it) and
    `mem_bandwidth_bytes_per_s`; `roofline["ops"]` has each op's numbers.
    `tune_malloc`: call `tune_allocator` before timing (on the CPU; it applies to both engines).
    `memory`: on the CPU, measure peak memory in fresh processes (`cpu_peak_memory`); on a GPU
    it is the allocator's peak during the timed runs. `linear`: add `bench_linear` at the
    shallowest and deepest depth of the preset (batched linear packs against one run at a time)."""
    steps = 20 if steps is None else int(steps)
    if steps < 1:
        raise InputError(f"steps must be >= 1, got {steps}")
    dev = resolve_device(device)
    check_dtype(dtype, dev)
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else (lambda msg: None)
    cfgs = sweep_configs(preset, seeds)
    fused = dtype == "float32" and kernels.use_fused(torch.zeros(1, device=dev))  # the packed engine's test row
    fl = sweep_flops(cfgs, fused)
    say(f"bench: {len(cfgs)} models, depths {PRESET_DEPTHS[preset]} x {seeds} seeds on {dev} ({dtype})")
    peak, bw, rates = _machine_rates(dev, dtype, peak_size, bandwidth_size, say)
    mem = {}
    if dev.type == "cpu" and memory:  # before tune_allocator, in fresh processes
        mem = {e: cpu_peak_memory(e, preset, seeds) for e in (("packed", "naive") if naive else ("packed",))}
        say(f"  peak memory {', '.join(f'{k} {v / 2**20:.0f} MiB' for k, v in mem.items())}")
    malloc_tuned = tune_allocator() if tune_malloc and dev.type == "cpu" else False
    load_before = _loadavg()
    half = (steps + 1) // 2 if naive else steps
    packed, nv = _time_engines(cfgs, steps, half, naive_steps, warmup, dev, dtype, naive, say)
    out: dict = {}
    if naive:
        out.update(naive_steps_per_s=1.0 / nv["sweep_step_seconds"])
    packed_s = _median(packed["seconds"])
    roof = _roofline_entries(cfgs, fused, packed_s, peak, bw, rates)
    if dtype != "float32":  # is the lower precision within tolerance? the same steps in float32
        out.update(dtype_loss_max_rel_diff_vs_float32=_float32_deviation(cfgs, half, warmup, dev, packed["losses"]))
    if single:
        sg = run_single(cfgs, min(steps, 5), 1, dev, dtype)
        say(f"  single {sg['sweep_step_seconds'] * 1e3:.1f} ms per sweep step")
    out.update(packed_steps_per_s=1.0 / packed_s)
    if naive:
        out.update(speedup=out["packed_steps_per_s"] / out["naive_steps_per_s"])
    out.update(
        **_packed_entries(cfgs, fl, packed, peak, mem),
        **roof,
        work=_work(preset, cfgs, seeds),
        timing={"steps": steps, "warmup": warmup, "naive_steps": naive_steps, "statistic": "median",
                "packed": "half the steps before the naive loop, half after",
                "loadavg_before": load_before, "loadavg_after": _loadavg()},
        machine=_machine(dev, dtype, peak, malloc_tuned),
    )
    if naive:
        out.update(_naive_entries(cfgs, nv, packed, mem))
    if torch.get_num_threads() == 1:  # one thread: process time is the time on a core of one's own
        out["fraction_of_peak_cpu_seconds"] = fl["total"] / _median(packed["cpu_seconds"]) / peak["flops_per_s"]
        out["roofline_ratio_cpu_seconds"] = _median(packed["cpu_seconds"]) / roof["roofline_s"]
    out["notes"] = _busy_notes(dev, load_before)
    if single:
        out.update(single_steps_per_s=1.0 / sg["sweep_step_seconds"],
                   single_seconds_per_sweep_step=sg["sweep_step_seconds"])
    if linear:
        out["linear"] = _linear_depths(preset, dev, dtype, min(steps, 5), say)
    return out


def _machine_rates(dev: torch.device, dtype: str, peak_size: int | None, bandwidth_size: int | None,
                   say: Callable[[str], None]) -> tuple[dict, dict, dict]:
    """(peak, bw, rates): the machine's ceilings the timings are held against, measured now — its
    matmul peak in `dtype` (`matmul_peak`), its memory bandwidth (the triad, `mem_bandwidth`) and
    its transcendental rates (`transcendental_rates`)."""
    peak = matmul_peak(dev, dtype, n=peak_size)
    say(f"  matmul peak {peak['flops_per_s'] / 1e9:.1f} GFLOP/s")
    bw = mem_bandwidth(dev, n=bandwidth_size)
    say(f"  memory bandwidth (triad) {bw['bytes_per_s'] / 1e9:.1f} GB/s")
    rates = transcendental_rates(dev)
    say(f"  exponentials {rates['exp'] / 1e9:.2f} G/s")
    return peak, bw, rates


def _time_engines(cfgs: list[RunConfig], steps: int, half: int, naive_steps: int, warmup: int, dev: torch.device,
                  dtype: str, naive: bool, say: Callable[[str], None]) -> tuple[dict, dict | None]:
    """(packed, naive): the packed engine timed for `half` of the `steps` sweep steps, then (with
    `naive`) the naive loop, then the packed engine for the other steps, so that both engines' times
    see the same machine (`run_packed`, `run_naive`; naive is None without `naive`). The packed
    seconds of both halves are joined; its losses are the first half's."""
    packed = run_packed(cfgs, half, warmup, dev, dtype)
    say(f"  packed {_median(packed['seconds']) * 1e3:.1f} ms per sweep step")
    if not naive:
        return packed, None
    nv = run_naive(cfgs, naive_steps, 1 if warmup else 0, dev, dtype)
    say(f"  naive  {nv['sweep_step_seconds']:.2f} s per sweep step")
    if steps - half > 0:  # the packed engine timed again after the naive loop: both halves
        again = run_packed(cfgs, steps - half, warmup, dev, dtype)  # see the same machine
        packed["seconds"] += again["seconds"]
        packed["cpu_seconds"] += again["cpu_seconds"]
        packed["data_seconds"] += again["data_seconds"]
        say(f"  packed {_median(again['seconds']) * 1e3:.1f} ms per sweep step (after naive)")
    return packed, nv


def _float32_deviation(cfgs: list[RunConfig], steps: int, warmup: int, dev: torch.device,
                       losses: torch.Tensor) -> float:
    """The largest relative deviation of `losses` (a lower precision's packed run: steps x models)
    from the packed engine's losses in float32 on the same `warmup` + `steps` steps."""
    ref = run_packed(cfgs, steps, warmup, dev, "float32")["losses"].double()
    n = min(ref.shape[0], losses.shape[0])
    return float(((losses[:n].double() - ref[:n]).abs() / ref[:n].abs()).max())


def _roofline_entries(cfgs: list[RunConfig], fused: bool, packed_s: float, peak: dict, bw: dict,
                      rates: dict) -> dict:
    """bench's roofline entries (issues 15, 29): the per-op roofline of one packed sweep step
    (`step_ops`, `roofline`; with and without the transcendental calls) against the measured
    median step `packed_s`, the machine's bandwidth and rates, and each op's numbers."""
    c0 = cfgs[0]
    n_params = sum(p.numel() for p in build_pack(cfgs).parameters())
    ops = step_ops(c0.d, c0.N, c0.P, c0.batch, [[cfgs[i].L for i in g] for g in seed_groups(cfgs)], c0.task,
                   n_params, fused=fused, one_pass=one_pass_available())  # (one spectrum per seed)
    roof = roofline(ops, peak["flops_per_s"], bw["bytes_per_s"], rates)
    roof_no_calls = roofline(ops, peak["flops_per_s"], bw["bytes_per_s"])
    return dict(
        step_s=packed_s,
        roofline_s=roof["roofline_s"],
        roofline_ratio=packed_s / roof["roofline_s"],
        roofline_ratio_without_transcendentals=packed_s / roof_no_calls["roofline_s"],
        mem_bandwidth_bytes_per_s=bw["bytes_per_s"],
        transcendental_rates_per_s={k: v for k, v in rates.items() if k not in ("n", "threads")},
        roofline={"flop_time_s": roof["flop_time_s"], "byte_time_s": roof["byte_time_s"],
                  "call_time_s": roof["call_time_s"], "calls_per_step": {
                      fn: sum(o["calls"].get(fn, 0.0) for o in ops) for fn in TRANSCENDENTALS},
                  "roofline_s_without_transcendentals": roof_no_calls["roofline_s"],
                  "bytes_per_step": sum(o["bytes"] for o in roof["ops"]),
                  "flops_per_step_all_ops": sum(o["flops"] for o in roof["ops"]),
                  "triad_elements": bw["n"], "ops": roof["ops"],
                  "definition": "sum over the step's major ops of max(FLOPs / matmul peak + transcendental "
                                "calls / their measured rates, bytes / triad bandwidth); bytes = inputs read "
                                "once + outputs written once",
                  "fused_test_row": fused},
    )


def _packed_entries(cfgs: list[RunConfig], fl: dict, packed: dict, peak: dict, mem: dict) -> dict:
    """bench's entries of the packed engine (`run_packed`'s `packed`): FLOP rate against the matmul
    `peak` (with and without the sampling's share), FLOPs per sweep step (`fl`, `sweep_flops`), peak
    memory (`mem`'s fresh-process peak on the CPU), seconds per sweep step, and the seconds spent
    sampling contexts (the naive loop samples once per model, the packed engine once per seed)."""
    packed_s = _median(packed["seconds"])
    flops_per_s = fl["total"] / packed_s
    data_s = _median(packed["data_seconds"])  # contexts sampled inside the packed sweep steps
    model_s = _median([a - b for a, b in zip(packed["seconds"], packed["data_seconds"])])
    data = {"packed": data_s, "naive": data_s / len(seed_groups(cfgs)) * len(cfgs)}  # once per model
    return dict(
        flops_per_s=flops_per_s,
        peak_matmul_flops_per_s=peak["flops_per_s"],
        fraction_of_peak=flops_per_s / peak["flops_per_s"],
        flops_per_step=fl["total"],
        flops_forward_per_step=fl["forward"],
        peak_memory_bytes=mem.get("packed", packed["peak_memory_bytes"]),
        packed_seconds_per_sweep_step=packed_s,
        packed_cpu_seconds_per_sweep_step=_median(packed["cpu_seconds"]),
        packed_seconds_best=min(packed["seconds"]),
        packed_step_seconds=packed["seconds"],
        data_seconds_per_sweep_step={"packed": data["packed"], "naive": data["naive"]},
        fraction_of_peak_excluding_data=fl["total"] / model_s / peak["flops_per_s"],
    )


def _work(preset: str, cfgs: list[RunConfig], seeds: int) -> dict:
    """What bench timed: the preset's fig6 sweep (its model, task, spectrum, sizes, depths, seeds)."""
    c0 = cfgs[0]
    return {"preset": preset, "model": c0.model, "task": c0.task, "k": c0.k, "a": c0.a, "b": c0.b,
            "d": c0.d, "N": c0.N, "P": c0.P, "batch": c0.batch, "depths": list(PRESET_DEPTHS[preset]),
            "seeds": seeds, "models": len(cfgs), "layers": sum(c.L for c in cfgs),
            "sweep_step": "every model advanced by one optimiser step on fresh contexts"}


def _machine(dev: torch.device, dtype: str, peak: dict, malloc_tuned: bool) -> dict:
    """Where bench ran: device, dtype, threads, versions, processor, the allocator and OpenMP
    settings, how memory was measured, the GPU's name or the fused CPU kernels' status."""
    return {"device": str(dev), "dtype": dtype, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "peak_matmul_n": peak["n"], "malloc_tuned": malloc_tuned,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(runtime default)"),
            "memory_method": ("peak RSS above the start, fresh process (CPU)" if dev.type == "cpu"
                              else "torch.cuda.max_memory_allocated above the start"),
            "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
            "fused_kernel": kernels.status() if dev.type == "cpu" else None}


def _naive_entries(cfgs: list[RunConfig], nv: dict, packed: dict, mem: dict) -> dict:
    """bench's entries of the naive loop (`run_naive`'s `nv`): its times per sweep step and per
    model, FLOPs, peak memory (`mem`'s fresh-process peak on the CPU), its speed against the
    packed engine's process time, and the largest relative difference of its losses from the
    packed engine's on the same steps (the same work)."""
    n = min(nv["losses"].shape[0], packed["losses"].shape[0])
    a, b = nv["losses"][:n].double(), packed["losses"][:n].double()
    return dict(
        naive_seconds_per_sweep_step=nv["sweep_step_seconds"],
        naive_cpu_seconds_per_sweep_step=nv["sweep_step_cpu_seconds"],
        speedup_cpu_seconds=nv["sweep_step_cpu_seconds"] / _median(packed["cpu_seconds"]),
        naive_model_seconds={f"L={c.L},seed={c.seed}": s for c, s in zip(cfgs, nv["model_seconds"])},
        naive_flops_per_step=nv["flops_per_step"],
        naive_peak_memory_bytes=mem.get("naive", nv["peak_memory_bytes"]),
        same_work_loss_max_rel_diff=float(((a - b).abs() / b.abs()).max()),
    )


def _busy_notes(dev: torch.device, load_before: list[float] | None) -> list[str]:
    """Notes on timings taken on a busy CPU (1-minute load above 3/4 of the cores, before or now):
    they are lower bounds, and spinning OpenMP threads stall small kernels."""
    notes = []
    loads = [x for x in (load_before or [])[:1] + (_loadavg() or [])[:1]]
    busy = dev.type == "cpu" and loads and max(loads) > 0.75 * (os.cpu_count() or 1)
    if busy:
        notes.append(f"the machine was busy (1-min load {max(loads):.1f} on {os.cpu_count()} cores): "
                     "the engines shared the cores with other work, timings are lower bounds")
        if torch.get_num_threads() > 1 and os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
            notes.append("with busy cores, spinning OpenMP threads stall small kernels: rerun with "
                         "OMP_WAIT_POLICY=PASSIVE set before Python starts, or with one thread")
    return notes


def _linear_depths(preset: str, dev: torch.device, dtype: str, steps: int, say: Callable[[str], None]) -> dict:
    """`bench_linear` at the preset's shallowest and deepest depth: "L=<depth>" -> its result."""
    out = {}
    for L in (PRESET_DEPTHS[preset][0], PRESET_DEPTHS[preset][-1]):
        out[f"L={L}"] = bench_linear(preset, str(dev), dtype, steps=steps, L=L)
        say(f"  linear L={L}: batched {out[f'L={L}']['batched_seconds_per_step'] * 1e3:.1f} ms, "
            f"one at a time {out[f'L={L}']['one_at_a_time_seconds_per_step'] * 1e3:.1f} ms")
    return out


__all__ = ["bench", "bench_linear", "linear_configs", "flops_per_step", "sweep_flops", "sweep_configs", "seed_groups",
           "run_packed", "run_naive", "run_single", "cpu_peak_memory", "child_peak_rss"]
