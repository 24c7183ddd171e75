"""A counter-based generator for contexts (issue 35): Philox-4x32-10 (Salmon, Moraes, Dror & Shaw,
"Parallel random numbers: as easy as 1, 2, 3", SC 2011), written here in numpy's uint64.

Every random number of a context is a pure function of where it sits, not of what was drawn
before it: the 32-bit words of one Philox block are

    philox4x32_10(counter = (block, context, purpose | kind << 8, step), key = (seed_lo, seed_hi))

| word | bits | meaning |
|---|---|---|
| key[0], key[1] | 64 | the stream's seed (low, high 32 bits): `seeds.StreamKey.seed` |
| counter[0] | 32 | the block within one (context, purpose): block i carries draws 4i..4i+3 |
| counter[1] | 32 | the context's index in its stream (0, 1, 2, ... across calls) |
| counter[2] | 8 + 8 | the purpose (`HAAR`, `INPUTS`, ...) and the stream's kind (`seeds.TRAIN`, ...); 16 bits zero |
| counter[3] | 32 | the training step (0 for the evaluation, monitor and cluster streams) |

So any thread can make any context, and the numbers cannot depend on the thread count, the batch
split, a pack's composition or the device. Streams of different kinds differ in counter[2] and are
disjoint whatever their seeds; within a kind, streams differ in their key or step.

Transforms (the same in the fused kernel, csrc/sampler.cpp `sampler_draws`):
- uniform words w in [0, 2^32);
- Gaussians: Box-Muller on the lane pairs (0, 1) and (2, 3) of each block,
  r = sqrt(-2 log((w_a + 1) 2^-32)), theta = 2 pi w_b 2^-32, z = (r cos theta, r sin theta), in
  float64 (the law N(0, 1) with |z| <= 6.66: the tail beyond has probability 3e-11); theta is
  reduced exactly with w_b's top three bits (`octant_sincos`), so sin and cos see an angle in
  [0, pi/4]. The fused kernel's own branch-free log, sin and cos agree with numpy's to a few ulp;
- an integer in [0, n): (w_0 + 2^32 w_1) mod n of block 0 (bias below n / 2^64).
"""

from __future__ import annotations

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57  # the round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # the key schedule's increments (golden ratio, sqrt(3) - 1)
ROUNDS = 10
MASK = 0xFFFFFFFF
TWO_PI = 6.283185307179586
TWO_M32 = 2.0 ** -32

# purposes (counter[2]'s low byte): one counter space each, so a draw never shifts another
HAAR, INPUTS, QUERY, TEACHER, NOISE, MATCH, CLASS = 1, 2, 3, 4, 5, 6, 7


def philox4x32_10(c0, c1, c2, c3, k0: int, k1: int) -> tuple[np.ndarray, ...]:
    """The four output words of Philox-4x32-10 for counters (c0, c1, c2, c3) (arrays of 32-bit
    values, broadcast together, any integer dtype) and the key (k0, k1): uint64 arrays of 32-bit
    values."""
    u = np.uint64
    x0, x1, x2, x3 = (np.asarray(c, dtype=u) & u(MASK) for c in np.broadcast_arrays(c0, c1, c2, c3))
    k0, k1, m0, m1, mask, s = u(k0 & MASK), u(k1 & MASK), u(M0), u(M1), u(MASK), u(32)
    for r in range(ROUNDS):
        if r:
            k0, k1 = u((int(k0) + W0) & MASK), u((int(k1) + W1) & MASK)
        p0, p1 = x0 * m0, x2 * m1  # exact: both factors below 2^32
        x0, x1, x2, x3 = (p1 >> s) ^ x1 ^ k0, p1 & mask, (p0 >> s) ^ x3 ^ k1, p0 & mask
    return x0, x1, x2, x3


def counter_word(purpose: int, kind: int) -> int:
    """counter[2]: the purpose in the low byte, the stream's kind in the next."""
    if not (0 <= purpose < 256 and 0 <= kind < 256):
        raise ValueError(f"purpose and kind must be bytes, got {purpose}, {kind}")
    return purpose | kind << 8


def words(seed: int, kind: int, step: int, contexts: np.ndarray, purpose: int, blocks: int) -> np.ndarray:
    """The uint32 words of `blocks` blocks of each context in `contexts` (a 1-d array of indices):
    uint64 array n x (4 blocks), draw 4i + l of a context in column 4i + l."""
    ctx = np.asarray(contexts, dtype=np.uint64).reshape(-1, 1)
    blk = np.arange(blocks, dtype=np.uint64).reshape(1, -1)
    seed, step = int(seed), int(step)
    if not 0 <= seed < 2**64 or not 0 <= step < 2**32:
        raise ValueError(f"seed must be in [0, 2^64) and step in [0, 2^32), got {seed}, {step}")
    if ctx.size and int(ctx.max()) >= 2**32:
        raise ValueError(f"context indices must be below 2^32, got {int(ctx.max())}")
    out = philox4x32_10(blk, ctx, counter_word(purpose, kind), step, seed & MASK, seed >> 32)
    return np.stack(out, axis=-1).reshape(ctx.shape[0], 4 * blocks)


def box_muller(w: np.ndarray) -> np.ndarray:
    """Gaussians from uniform words, lane pairs (0, 1), (2, 3), ... of each row (an even count):
    z_{2m} = r cos theta, z_{2m+1} = r sin theta with r = sqrt(-2 log((a + 1) 2^-32)) from word
    a = 2m and theta = 2 pi b 2^-32 from word b = 2m + 1, reduced exactly: b's top three bits name
    the octant, and sin and cos are taken of an angle in [0, pi/4] (`octant_sincos`)."""
    a, b = w[..., 0::2], w[..., 1::2]
    r = np.sqrt(-2.0 * np.log((a.astype(np.float64) + 1.0) * TWO_M32))
    sn, cs = octant_sincos(b)
    z = np.empty(w.shape, dtype=np.float64)
    z[..., 0::2] = r * cs
    z[..., 1::2] = r * sn
    return z


def octant_sincos(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sin and cos of theta = 2 pi b 2^-32 for 32-bit words b: octant o = b >> 29 and the angle
    within it phi = low 2pi 2^-32 (low = b mod 2^29, or 2^29 - that in an odd octant), so
    theta = (o >> 1) pi/2 + phi (o even) or (o >> 1) pi/2 + pi/2 - phi (o odd); the quadrant's
    rotation is exact."""
    b = b.astype(np.uint32)
    o, low = b >> np.uint32(29), b & np.uint32(0x1FFFFFFF)
    odd = (o & np.uint32(1)).astype(bool)
    phi = np.where(odd, np.uint32(0x20000000) - low, low).astype(np.float64) * (TWO_PI * TWO_M32)
    s, c = np.sin(phi), np.cos(phi)
    s0, c0 = np.where(odd, c, s), np.where(odd, s, c)
    swap = (o & np.uint32(2)).astype(bool)  # quadrant q = o >> 1: q odd turns (s0, c0) into (c0, -s0)
    sign = 1.0 - (o >> np.uint32(2)).astype(np.float64) * 2.0  # q >= 2: both negated (exactly)
    sn = np.where(swap, c0, s0) * sign
    cs = np.where(swap, -s0, c0) * sign
    return sn, cs


def gaussians(seed: int, kind: int, step: int, contexts: np.ndarray, purpose: int, n: int) -> np.ndarray:
    """n standard Gaussians per context (float64, len(contexts) x n): draws 0..n-1 of `purpose`."""
    blocks = (n + 3) // 4
    return box_muller(words(seed, kind, step, contexts, purpose, blocks))[:, :n]


def integers(seed: int, kind: int, step: int, contexts: np.ndarray, purpose: int, n: int) -> np.ndarray:
    """One integer uniform in [0, n) per context (int64): (w_0 + 2^32 w_1) mod n of block 0."""
    if not 1 <= n < 2**32:
        raise ValueError(f"n must be in [1, 2^32), got {n}")
    w = words(seed, kind, step, contexts, purpose, 1)
    return ((w[:, 0] | (w[:, 1] << np.uint64(32))) % np.uint64(n)).astype(np.int64)


__all__ = ["philox4x32_10", "words", "box_muller", "octant_sincos", "gaussians", "integers", "counter_word", "HAAR", "INPUTS",
           "QUERY", "TEACHER", "NOISE", "MATCH", "CLASS"]
