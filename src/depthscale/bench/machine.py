"""The machine a benchmark runs on: the device asked for, the arithmetic of the timed steps, and
the rates a roofline divides by — the matmul peak (`matmul_peak`), the memory bandwidth
(`mem_bandwidth`, a triad) and the rate of each transcendental function (`transcendental_rates`).
Measured in torch, at torch's thread count; bench.py and benchmarks/ use them."""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

from depthscale.base import seeds
from depthscale.base.errors import InputError
from depthscale.data import kernels

DTYPES = ("float32", "tf32", "bf16")
DEVICES = ("cpu", "cuda", "auto")
F32 = 4  # bytes per element
# The transcendental functions a roofline counts, each with the range it is timed on (the range
# the step evaluates it on: exponentials of non-positive scores, logarithms of uniforms in (0, 1],
# square roots of positive sums, sines and cosines of angles in [0, 2 pi)).
TRANSCENDENTALS = {"exp": (-10.0, 0.0), "log": (1e-6, 1.0), "sqrt": (1e-3, 4.0), "sin": (0.0, 6.2831853),
                   "cos": (0.0, 6.2831853)}


def mem_bandwidth(device="cpu", n: int | None = None, repeats: int = 7) -> dict:
    """A STREAM-like triad in torch, a = b + s c (`torch.add(b, c, alpha=s, out=a)`, one pass:
    12 bytes per float32 element), on arrays of n elements — by default 2^25 (128 MiB each, four
    times the 32 MiB L3 of this machine; 2^28 on a GPU) — best of `repeats` after a warm-up, at
    torch's thread count. Returns bytes_per_s, n, threads."""
    dev = resolve_device(str(device)) if isinstance(device, str) else device
    n = n or (1 << (28 if dev.type == "cuda" else 25))
    gen = seeds.generator(seeds.BENCH_SEED, dev)
    b = torch.randn(n, generator=gen, device=dev)
    c = torch.randn(n, generator=gen, device=dev)
    a = torch.empty(n, device=dev)
    torch.add(b, c, alpha=3.0, out=a)
    sync_device(dev)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        sync_device(dev)
        best = min(best, time.perf_counter() - t0)
    return {"bytes_per_s": 3 * F32 * n / best, "n": n, "threads": torch.get_num_threads()}


def resolve_device(device: str = "auto") -> torch.device:
    if device not in DEVICES:
        raise InputError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("device 'cuda' asked for, but torch sees no CUDA device")
    return torch.device(device)


def check_dtype(dtype: str, dev: torch.device) -> None:
    if dtype not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype == "tf32" and dev.type != "cuda":
        raise InputError("dtype 'tf32' needs a CUDA device")


def sync_device(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


@contextmanager
def precision(dtype: str, dev: torch.device):
    """float32 matmuls in full precision, or TF32 (CUDA) for the duration."""
    old = torch.get_float32_matmul_precision()
    if dev.type == "cuda":
        torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def autocast_dtype(dtype: str) -> torch.dtype | None:
    return torch.bfloat16 if dtype == "bf16" else None


def matmul_peak(device="cpu", dtype: str = "float32", n: int | None = None, repeats: int = 5) -> dict:
    """Best FLOP/s of a large square torch.mm in `dtype` (float32, tf32: float32 with TF32 on,
    bf16), at torch's current thread count; sizes n (default 2048 on the CPU, 8192 on a GPU)."""
    dev = resolve_device(str(device)) if isinstance(device, str) else device
    check_dtype(dtype, dev)
    sizes = [n] if n else ([1024, 2048] if dev.type == "cpu" else [8192])
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
    best, best_n = 0.0, None
    with precision(dtype, dev):
        for m in sizes:
            gen = seeds.generator(seeds.BENCH_SEED, dev)
            a = torch.randn(m, m, generator=gen, device=dev).to(tdt)
            b = torch.randn(m, m, generator=gen, device=dev).to(tdt)
            c = torch.empty(m, m, device=dev, dtype=tdt)
            torch.mm(a, b, out=c)
            sync_device(dev)
            for _ in range(repeats):
                t0 = time.perf_counter()
                torch.mm(a, b, out=c)
                sync_device(dev)
                rate = 2 * m**3 / (time.perf_counter() - t0)
                if rate > best:
                    best, best_n = rate, m
    return {"flops_per_s": best, "n": best_n, "dtype": dtype, "threads": torch.get_num_threads()}


def transcendental_rates(device="cpu", n: int | None = None, repeats: int = 30) -> dict:
    """Evaluations per second of each function in TRANSCENDENTALS (torch's vectorised kernels, `out=`
    preallocated), on n inputs spread over its range — by default 2^16 (256 KiB: cache-resident, so
    the rate is the arithmetic's, not the memory's, and large enough that torch splits it over its
    threads; 2^24 on a GPU) — best of `repeats` after a warm-up. On the CPU with the fused kernel,
    "exp" is the faster of torch's exp and the test row's own (`exp_rate` of csrc/fused.cpp, one
    core's rate times the thread count; both are kept, "exp_torch" and "exp_fused_kernel").
    Returns {name: per_s, "n": n, "threads": t}."""
    dev = resolve_device(str(device)) if isinstance(device, str) else device
    n = n or (1 << (24 if dev.type == "cuda" else 16))
    out: dict = {"n": n, "threads": torch.get_num_threads()}
    y = torch.empty(n, device=dev)
    for name, (lo, hi) in TRANSCENDENTALS.items():
        x = torch.linspace(lo, hi, n, device=dev)
        fn = getattr(torch, name)
        fn(x, out=y)
        sync_device(dev)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn(x, out=y)
            sync_device(dev)
            best = min(best, time.perf_counter() - t0)
        out[name] = n / best
    out["exp_torch"] = out["exp"]
    ops = kernels.fused_ops() if dev.type == "cpu" else None
    if ops is not None:  # the test row's own exp (one core, scaled by the threads the row runs on)
        out["exp_fused_kernel"] = float(ops.exp_rate(2000)) * torch.get_num_threads()
        out["exp"] = max(out["exp"], out["exp_fused_kernel"])  # the faster: the tighter bound
    return out


__all__ = ["DTYPES", "DEVICES", "TRANSCENDENTALS", "resolve_device", "precision", "matmul_peak", "mem_bandwidth",
           "transcendental_rates"]
