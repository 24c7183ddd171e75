"""Sampling off the accelerator's critical path (issue 29 item 2): the next step's training batches
are drawn on the CPU in a background thread while the device trains the current step.

The contexts are those of `trainer.step_batches` bit for bit (they are drawn on the CPU in any case,
SPEC §2): the prefetcher only changes *when* they are drawn. On the CPU it is off (the sampling
would compete with the step for the same cores); `DEPTHSCALE_PREFETCH=0|1` overrides that choice.
Batches for a set of models other than the one prefetched (a run stopped in between) are drawn on
the spot, so the numbers never depend on timing.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import torch


def prefetch_enabled(device) -> bool:
    """Whether training on `device` samples ahead (default: on every device but the CPU)."""
    env = os.environ.get("DEPTHSCALE_PREFETCH")
    if env in ("0", "1"):
        return env == "1"
    return torch.device(device).type != "cpu"


class Prefetcher:
    """`get(idx, step)` returns the batches of `step` for the models `idx` on `device` and starts
    drawing those of `step + 1` for the same models. `sample(idx, step)` must return CPU batches
    (trainer.step_batches on the CPU)."""

    def __init__(self, sample, device, enabled: bool | None = None):
        self.sample, self.device = sample, torch.device(device)
        self.enabled = prefetch_enabled(device) if enabled is None else enabled
        self.pin = self.enabled and self.device.type == "cuda"
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="depthscale-prefetch") if self.enabled else None
        self._pending: tuple[int, tuple, Future] | None = None
        self.hits = self.misses = 0

    def _draw(self, idx: tuple, step: int) -> dict:
        batches = self.sample(list(idx), step)
        return {k: ctx.pin_memory() for k, ctx in batches.items()} if self.pin else batches

    def get(self, idx: list[int], step: int) -> dict | None:
        """The batches of `step` on the device (None when prefetching is off: the caller samples)."""
        if not self.enabled:
            return None
        key = tuple(idx)
        pend, self._pending = self._pending, None
        if pend is not None and pend[0] == step and pend[1] == key:
            batches = pend[2].result()
            self.hits += 1
        else:
            if pend is not None:
                pend[2].result()  # let a stale draw finish (its thread holds no lock we need)
            batches = self._draw(key, step)
            self.misses += 1
        self._pending = (step + 1, key, self._pool.submit(self._draw, key, step + 1))
        return {k: ctx.to(self.device, non_blocking=self.pin) for k, ctx in batches.items()}

    def close(self) -> None:
        if self._pool is not None:
            if self._pending is not None:
                self._pending[2].cancel()
            self._pool.shutdown(wait=True)
            self._pool = None
            self._pending = None


__all__ = ["Prefetcher", "prefetch_enabled"]
