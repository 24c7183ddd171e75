"""Memory a training pack needs, estimated before anything is allocated, and what is available.

`pack_bytes(cfgs)` is a deliberately simple model of the peak of `training.train_pack` (float32
throughout): the training contexts of one step, the activations autograd keeps for its backward
pass, the parameters with their gradients and Adam moments, and the evaluation and monitor sets
held for the whole run with one chunk's forward on them. It is between 0.8 and 1.7 times the
measured peak (resident memory above the imports) on the configurations it was checked on and only
decides whether to refuse a run that cannot fit (it errs on the large side): `check_packs` raises MemoryRefused, a one-line
user error naming the estimate and the available memory, unless told to allow it.

Available memory: the device's free memory for CUDA; on the CPU, /proc/meminfo's MemAvailable,
lowered to the cgroup's limit (memory.max - memory.current) inside a container.

Measured memory (what the estimate was checked against; bench.py reports it): `PeakMemory`, the
peak of a block above its start, and `rss_bytes`, this process's resident set.

The allocator: `tune_allocator` keeps freed memory in the process (glibc), so a training step's
temporaries are reused; the bench and the sweep workers call it.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from typing import Sequence

from depthscale.config.run import ConfigError, RunConfig
from depthscale.data.context_sets import CHUNK, set_bytes, stored_floats
from depthscale.theory.linear import curve_chunk
from depthscale.theory.linear_floor import floor_batch
from depthscale.theory.softmax_floor import context_chunk

FLOAT = 4  # bytes: every tensor of a training step is float32
EVAL_CHUNK = 1024  # measurements.eval_contexts' chunk: one chunk's forward is alive at a time
HEADROOM = 1.0  # refuse when the estimate exceeds this fraction of the available memory


class MemoryRefused(ConfigError):
    """A run or pack that would not fit in memory; the message is one line with both numbers."""



# --- the worker's budget ------------------------------------------------------------------------
# A worker (a process of the process executor, or the sweep's own process inline) declares how many
# bytes it may hold; a pack's trainer then holds its monitor sets while they fit HELD_SHARE of it
# and its evaluation set if it fits EVAL_SHARE, and streams the rest (context_sets: the same bits,
# drawn again at each reading). Without a declared budget everything is held (as a lone run does).
WORKER_CAP = 3 << 29  # 1.5 GiB: the default budget of a CPU worker (resident, imports included), at most;
# two such workers and the sweep's process (~0.33 GiB) stay under 4 GB (1.75 GiB workers reached 3,847 MiB)
WORKER_SHARE = 0.6  # ... and at most this share of the memory available at the start, split over the workers
WORKER_BASE = 256 << 20  # a worker's resident memory before its first pack (Python, torch, the kernels: 250 MiB)
HELD_SHARE = 0.5  # of the pack budget: the monitor sets held (the rest streamed)
EVAL_SHARE = 0.5  # of the pack budget: the largest evaluation set held (larger ones are streamed)
_budget: list[int | None] = [None]  # the pack budget in force in this process (bytes), None: none declared


def default_worker_budget(device: str = "cpu", workers: int = 1) -> int | None:
    """Resident bytes one of `workers` CPU workers may use by default: WORKER_SHARE of the memory
    available now, split over them, and at most WORKER_CAP (a laptop keeps room for the rest of
    its work; the packed engine gains little from packs larger than that). None off the CPU (a
    GPU's memory is the device's) or where the available memory cannot be told."""
    if not str(device).startswith("cpu"):
        return None
    avail = available_bytes(device)
    if avail is None:
        return None
    return int(min(WORKER_CAP, WORKER_SHARE * avail / max(1, int(workers))))


def pack_budget(worker_bytes: int | None) -> int | None:
    """Bytes a pack's estimate (pack_bytes: above the imports) may reach in a worker of `worker_bytes`."""
    return None if worker_bytes is None else max(1 << 20, int(worker_bytes) - WORKER_BASE)


@contextlib.contextmanager
def budget(nbytes: int | None):
    """Declare the pack budget (bytes) for the block: the trainer's held sets follow it."""
    before, _budget[0] = _budget[0], nbytes
    try:
        yield
    finally:
        _budget[0] = before


def current_budget() -> int | None:
    return _budget[0]


def held_sets(sizes: Sequence[int], nbytes: int | None = None) -> list[bool]:
    """Which of the monitor sets of `sizes` bytes (in order) are held under the pack budget
    `nbytes` (default: the one in force): while their total fits HELD_SHARE of it."""
    limit = current_budget() if nbytes is None else nbytes
    out, total = [], 0
    for size in sizes:
        keep = limit is None or total + size <= HELD_SHARE * limit
        total += size if keep else 0
        out.append(keep)
    return out


def hold_eval(size: int, nbytes: int | None = None) -> bool:
    """Whether an evaluation set of `size` bytes is held under the pack budget (else streamed)."""
    limit = current_budget() if nbytes is None else nbytes
    return limit is None or size <= EVAL_SHARE * limit


def _per_context(cfg: RunConfig) -> int:
    """Floats of one context while it is sampled (the stored one and its temporaries)."""
    P, d = cfg.P, cfg.d
    return 5 * (P + 1) * d + 2 * d * d + 3 * P + 5 * d + 2 * cfg.k


def _held_contexts(c0: RunConfig, spectra: int, nbytes: int | None, early: bool = True) -> int:
    """Contexts a pack's evaluation and monitor sets hold at once under the pack budget `nbytes`
    (None: every set held): held sets whole, streamed ones a chunk each. The evaluation set is held
    only for a run measured alone, i.e. one that stops before the pack's last step (`early`: the
    pack has early stopping); the runs that stop together stream it (Trainer.final_measurements)."""
    if nbytes is None:
        return (c0.eval_contexts if early else min(c0.eval_contexts, CHUNK)) + spectra * c0.monitor_contexts
    kept = sum(held_sets([set_bytes(c0, c0.monitor_contexts)] * spectra, nbytes))
    monitor = kept * c0.monitor_contexts + (spectra - kept) * min(c0.monitor_contexts, CHUNK)
    held_eval = early and hold_eval(set_bytes(c0, c0.eval_contexts), nbytes)
    return monitor + (c0.eval_contexts if held_eval else min(c0.eval_contexts, CHUNK))


def pack_bytes(cfgs: Sequence[RunConfig], nbytes: int | None = None) -> int:
    """Estimated peak bytes of training `cfgs` as one pack (they share a pack key), with every
    evaluation and monitor set held, or (`nbytes`: a pack budget) held or streamed as the trainer
    does under that budget (held_sets, hold_eval)."""
    cfgs = list(cfgs)
    if not cfgs:
        return 0
    from depthscale.data import kernels
    from depthscale.data.contexts import spectra_per_seed
    from depthscale.kinds.lookup import model_class

    c0 = cfgs[0]
    kind = model_class(c0.model)
    B, d, N = c0.batch, c0.d, c0.N
    T = sum(c.L for c in cfgs)  # layers of the whole pack
    M = len(cfgs)
    spectra = len({(c.a, c.b) for c in cfgs})  # distinct evaluation and monitor sets
    # floats one context keeps for the backward pass, per layer of one model and per model
    per_layer, per_model = kind.activation_floats(c0)
    params = T * kind.layer_matrices(c0) * N * N + M * (N * d + N * N + 3 * N)
    # the trainer's sampling rule (contexts.spectra_per_seed): a seed with one spectrum draws in one pass
    # (no float64 draws held) where the fused kernels run; a seed's draws serving several are cached
    seeds = spectra_per_seed(cfgs)
    one_pass = kernels.expected() and not c0.clusters  # (no build started to estimate)
    batch = sum((stored_floats(c0) if one_pass and n == 1 else _per_context(c0)) * n for n in seeds.values())
    train = B * batch + B * (T * per_layer + M * per_model)
    # one evaluation set at a time (training.train_pack), a monitor set per spectrum (3/2: measured),
    # those over the budget streamed (a chunk at a time)
    contexts = _held_contexts(c0, spectra, nbytes, early=any(c.early_stop for c in cfgs))
    held = contexts * stored_floats(c0) * 3 // 2 + min(c0.eval_contexts, EVAL_CHUNK) * _per_context(c0)
    Lmax = max(c.L for c in cfgs)
    evaluate = min(c0.eval_contexts, EVAL_CHUNK) * (Lmax * per_layer + per_model)  # with grads
    # the final pass over the set for the runs that stop together (measure_many): every layer's f_l per
    # context (float32) and nine float32 words of per-context numbers per model (y*, ŷ and the selection
    # loss, and the float64 per-context arrays kept for the store: squared error, y*, selection loss).
    # For the 21 cpu fig6 runs this term is 223 MiB; the pass (arrays made up front, decomposed in blocks
    # of rows) measured 166 MiB above its start after a training-like history and 332-340 MiB (once 614)
    # in a fresh process (benchmarks/final_pass_memory.py)
    finals = c0.eval_contexts * (T + 9 * M)
    monitor = min(c0.monitor_contexts, EVAL_CHUNK) * (T * per_layer + M * per_model) // 2  # no grad
    return FLOAT * (4 * params + train + held + max(evaluate + finals, monitor)) + cluster_bytes(c0.clusters, d)


def cluster_bytes(K: int, d: int) -> int:
    """Peak bytes of clustered contexts' K fixed rotations (contexts.cluster_rotations): the float64
    Gaussians, their QR (Q, R) and the sign-fixed Q, then the cached float64 rotations and their
    float32 copy: about 4.5 float64 K x d x d arrays (0 for clusters = 0)."""
    return 36 * K * d * d if K else 0


# Theory (commands/theory.py): the float64 arrays each computation holds at its peak, in bytes.
DF = 8  # bytes of a float64
CURVE_GRID = 257  # theory.constrained_curve's grid of steps
BASIS_CONTEXTS = 256  # theory.poly_basis's sample S's (finite P)


def theory_bytes(what: str, d: int, P: int = 1, k: int = 1, samples: int = 0, temperatures: int = 101,
                 max_depth: int = 64, finite_P: bool = False) -> int:
    """Estimated peak bytes of `depthscale theory WHAT` (curve, floor, softmax-floor; 0 for exponents):
    the spectra (3 d), the arrays of the chunk of contexts computed at once (each chunk is at least
    one context of P x d, so P and d alone can make it huge), and the per-sample terms measured
    before (floor: 8 float64 per input dimension; softmax-floor: 8 per temperature; the finite-P
    curve: 2 per entry of a d x d matrix)."""
    spectra = 3 * DF * d
    if what == "curve":
        L = min(max_depth, d) + 1
        need = spectra + DF * d * (2 * CURVE_GRID + L)  # constrained curve's d x grid arrays, the Lanczos basis
        if finite_P:
            c = min(samples, curve_chunk(P, d))  # contexts per chunk (theory.linear._poly_features)
            L = min(max_depth, BASIS_CONTEXTS * d) + 1  # the basis is Lanczos on the sample S's eigenvalues
            need += DF * BASIS_CONTEXTS * (2 * P * d + 3 * d * d)  # the basis' sample S's and their eigh
            need += DF * BASIS_CONTEXTS * d * L  # its Lanczos vectors
            need += DF * c * (2 * P * d + d * d + L * d)  # a chunk's inputs, S and the basis images
            need += DF * 2 * samples * L + 16 * d * d * samples
        return need
    if what == "floor":
        m = min(128, P)  # queries per context
        c = floor_batch(P, d)  # contexts per batch
        return spectra + DF * c * (3 * P * d + 2 * m * P + m * (k + 2) * d) + 64 * d * samples
    if what == "softmax-floor":
        c = min(samples, context_chunk(temperatures, P))
        return spectra + DF * c * (3 * P * d + 2 * temperatures * P + 3 * d) + 64 * temperatures * samples
    return 0


def available_bytes(device: str = "cpu") -> int | None:
    """Free memory of `device` in bytes; None where it cannot be told."""
    if str(device).startswith("cuda"):
        try:
            import torch

            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        except Exception:  # noqa: BLE001 - no CUDA here: the device check reports that
            return None
    avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    limit = _cgroup_free()
    if limit is not None:
        avail = limit if avail is None else min(avail, limit)
    return avail


def _cgroup_free() -> int | None:
    """memory.max - memory.current of this process's cgroup (v2), None without a limit."""
    try:
        with open("/proc/self/cgroup") as fh:
            rel = next((ln.split(":", 2)[2].strip() for ln in fh if ln.startswith("0::")), None)
        if rel is None:
            return None
        base = "/sys/fs/cgroup" + rel.rstrip("/")
        with open(base + "/memory.max") as fh:
            mx = fh.read().strip()
        if mx == "max":
            return None
        with open(base + "/memory.current") as fh:
            cur = int(fh.read().strip())
        return max(0, int(mx) - cur)
    except (OSError, ValueError, StopIteration):
        return None


def rss_bytes() -> int:
    """Resident memory of this process now (Linux); elsewhere its high-water mark."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # not Linux: high-water mark only
        import resource

        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


class PeakMemory:
    """Peak memory of a block above its start: CUDA's allocator peak on a GPU; on the CPU, the
    process's resident set sampled every `interval` s by a background thread."""

    def __init__(self, dev, interval: float = 0.002):
        self.dev, self.interval, self.peak_bytes = dev, interval, 0

    def __enter__(self):
        gc.collect()
        if self.dev.type == "cuda":
            import torch

            torch.cuda.synchronize(self.dev)
            torch.cuda.reset_peak_memory_stats(self.dev)
            self._base = torch.cuda.memory_allocated(self.dev)
        else:
            self._base = self._max = rss_bytes()
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def _poll(self):
        while not self._stop.wait(self.interval):
            self._max = max(self._max, rss_bytes())

    def __exit__(self, *exc):
        if self.dev.type == "cuda":
            import torch

            torch.cuda.synchronize(self.dev)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.dev) - self._base
        else:
            self._stop.set()
            self._thread.join()
            self.peak_bytes = max(self._max, rss_bytes()) - self._base
        return False


def tune_allocator(threshold: int = 1 << 30) -> bool:
    """Keep freed memory in the process (glibc malloc: mmap and trim thresholds raised to
    `threshold`), so that the large temporaries of every training step are not handed back to the
    OS and page-faulted in again at the next step. A standard CPU tuning step (PyTorch's own guide
    suggests jemalloc or tcmalloc for the same reason); it speeds up every engine, the naive loop
    included, and costs resident memory that is not returned. Returns whether it applied."""
    applied = _set_thresholds(threshold)
    if applied:
        _tuned[0] = int(threshold)
    return applied


RETURN_THRESHOLD = 4 << 20  # returning_memory's: blocks above it mmapped, free heap above it trimmed
_tuned: list[int | None] = [None]  # the threshold tune_allocator set in this process (None: glibc's own)


@contextlib.contextmanager
def returning_memory(threshold: int = RETURN_THRESHOLD):
    """For a block whose large temporaries come once, not every step (a run's final measurement, a
    theory job): what the process holds free is trimmed first, and glibc hands back every block
    over `threshold` as it is freed; tune_allocator's thresholds again after the block (where it
    ran in this process). Under tune_allocator's 1 GiB a cpu fig6 pack's final measurements held
    1,670 MiB, 1,203 MiB this way (issue 51)."""
    if not _set_thresholds(threshold):
        yield
        return
    try:
        _trim()
        yield
    finally:
        if _tuned[0] is not None:
            _set_thresholds(_tuned[0])


def _set_thresholds(threshold: int) -> bool:
    """glibc's mmap and trim thresholds (a fixed mmap threshold: no dynamic raising); False where not glibc."""
    if sys.platform != "linux":
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        return bool(libc.mallopt(M_MMAP_THRESHOLD, int(threshold))) and bool(libc.mallopt(M_TRIM_THRESHOLD, int(threshold)))
    except (OSError, AttributeError):  # not glibc
        return False


def _trim() -> None:
    """glibc's malloc_trim(0): the free pages of the heap back to the OS."""
    if sys.platform == "linux":
        try:
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass


COLLECT_GROWTH = 64 << 20  # release_memory's full collection: once the resident set grew this much since the last


_COLLECTED = {"rss": -1}  # the resident set after release_memory's last full collection (-1: none yet)


def release_memory() -> int:
    """Hand what a finished pack left behind back to the OS, and return the resident set after:
    the garbage collector first (a Trainer, its hooks and its context sets form reference cycles
    that plain reference counting never frees: 2.4 of 3.3 GB after a pack of 7 linear d = 32 runs),
    then glibc's malloc_trim(0), which returns the free pages that `tune_allocator` keeps (0.6 GB
    more there). Between packs, so the next pack starts from the imports, not from the last peak.
    The full collection walks every object of the process (185 ms in a test process's heap, where
    smoke packs leave a few MB): it runs once the resident set has grown COLLECT_GROWTH since the
    last one, so small packs' cycles wait for a few more packs (or Python's own collector), never
    more than COLLECT_GROWTH of them; every pack of the main job's size is collected at once."""
    collect = _COLLECTED["rss"] < 0 or rss_bytes() > _COLLECTED["rss"] + COLLECT_GROWTH
    if collect:
        gc.collect()
    _trim()
    rss = rss_bytes()
    if collect:
        _COLLECTED["rss"] = rss
    return rss


def fmt_bytes(n: float) -> str:
    if n >= 2**40 * 10**15:  # (an integer that large would overflow a float below)
        return f"more than 10^15 TiB ({len(str(int(n)))}-digit bytes)"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def describe(cfgs: Sequence[RunConfig]) -> str:
    c0 = cfgs[0]
    if len(cfgs) == 1:
        return f"run {c0.run_id} ({c0.model}, L = {c0.L}, batch {c0.batch}, P = {c0.P}, d = {c0.d}, N = {c0.N})"
    depths = sorted({c.L for c in cfgs})
    span = f"L = {depths[0]}" if len(depths) == 1 else f"L = {depths[0]}..{depths[-1]}"
    return f"a pack of {len(cfgs)} {c0.model} runs ({span}, batch {c0.batch}, P = {c0.P}, d = {c0.d}, N = {c0.N})"


def check_packs(packs: Sequence[Sequence[RunConfig]], device: str = "cpu", concurrent: int = 1,
                allow: bool = False, flag: str = "--allow-memory", nbytes: int | None = None) -> int:
    """Refuse (MemoryRefused) packs whose estimated peak, for the `concurrent` largest running at
    once, exceeds HEADROOM of the available memory (each estimated under the pack budget `nbytes`,
    whose sets over it stream). Returns the estimate in bytes."""
    sizes = sorted(((pack_bytes(p, nbytes), i) for i, p in enumerate(packs) if p), reverse=True)
    if not sizes:
        return 0
    top = sizes[:max(1, concurrent)]
    need = sum(s for s, _ in top)
    avail = available_bytes(device)
    if allow or avail is None or need <= HEADROOM * avail:
        return need
    what = describe(packs[top[0][1]])
    if len(top) > 1:
        what += f" and {len(top) - 1} more pack(s) at once"
    raise MemoryRefused(f"{what} needs about {fmt_bytes(need)} of memory (estimate); "
                        f"{fmt_bytes(avail)} is available on {device}: make it smaller, or pass {flag} to try anyway")


__all__ = ["tune_allocator", "returning_memory", "RETURN_THRESHOLD", "release_memory", "default_worker_budget", "pack_budget", "budget", "current_budget",
           "held_sets", "hold_eval", "WORKER_CAP", "WORKER_BASE", "cluster_bytes", "theory_bytes",
           "pack_bytes", "available_bytes", "check_packs", "MemoryRefused", "fmt_bytes", "HEADROOM", "PeakMemory",
           "rss_bytes"]
