"""Fixed sets of contexts (the evaluation and monitor sets), held in memory or streamed.

A set is n contexts of one data config from one stream, in chunks of `chunk` contexts. Held, its
chunks are drawn once and kept; streamed, only the chunk being read exists, and each reading draws
it again. The stream is counter-based (contexts.py): chunk i is contexts i*chunk .. of the stream,
a pure function of the stream's key and those indices, so a streamed set gives the same bits as a
held one at every reading, in any order. Streaming trades memory for sampling time: a 10,240-context
set at d = 32, P = 256 holds 395 MB and takes 3 s to draw on one core; at d = 16, P = 64, 59 MB
and 0.3 s.
"""

from __future__ import annotations

from collections.abc import Sequence

from depthscale.base import seeds
from depthscale.data.contexts import ContextStream, Contexts, sample_for

CHUNK = 1024  # contexts per chunk (one evaluation forward's unit; measurements.eval_batch slices it)
FLOAT = 4  # bytes of a stored float (float32)


def stored_floats(cfg) -> int:
    """Floats one stored context holds (inputs, labels, rotation, targets and selections)."""
    P, d = cfg.P, cfg.d
    return P * d + d * d + P + 5 * d + 2 * cfg.k


def set_bytes(cfg, n: int) -> int:
    """Bytes of n contexts of `cfg` held as float32."""
    return FLOAT * stored_floats(cfg) * int(n)


class ContextSet(Sequence):
    """n contexts of data config `cfg` from the stream `seed` (seeds.stream_key), as a sequence of
    chunks: `hold` keeps them once drawn, else each access draws its chunk again (the same bits)."""

    def __init__(self, cfg, n: int, seed, device="cpu", chunk: int = CHUNK, hold: bool = True):
        self.cfg, self.n, self.key, self.device = cfg, int(n), seeds.stream_key(seed), device
        self.chunk, self.hold = int(chunk), bool(hold)
        self._held: list[Contexts] | None = None
        if self.hold:
            self._held = [self._draw(i) for i in range(len(self))]

    def __len__(self) -> int:
        return -(-self.n // self.chunk) if self.n > 0 else 0

    def _draw(self, i: int) -> Contexts:
        start = i * self.chunk
        size = min(self.chunk, self.n - start)
        # one stream's contexts, read once: the fused kernel makes them in one pass (the same bits)
        return sample_for(self.cfg, size, ContextStream(self.key, start), self.device, cache_draws=False)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"chunk {i} of a set of {len(self)}")
        return self._held[i] if self._held is not None else self._draw(i)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    @property
    def nbytes(self) -> int:
        """Bytes this set holds (one chunk's worth while it is read, if streamed)."""
        return set_bytes(self.cfg, self.n if self.hold else min(self.n, self.chunk))


__all__ = ["ContextSet", "CHUNK", "set_bytes", "stored_floats"]
