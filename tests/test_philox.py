"""The counter-based generator (depthscale.data.philox, issue 35): Philox-4x32-10 against Random123's
published known answers and a second, scalar implementation; the key and counter layout; the
Gaussians' and integers' laws."""

import math

import numpy as np
import pytest
from scipy import stats

from depthscale.base import seeds
from depthscale.data import philox

# Random123's kat_vectors for philox4x32_10: (counter, key, output)
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def scalar_philox(ctr, key):
    """Philox-4x32-10 one block at a time in Python integers (the paper's definition, written again)."""
    c, k = list(ctr), list(key)
    for r in range(10):
        if r > 0:
            k = [(k[0] + 0x9E3779B9) % 2**32, (k[1] + 0xBB67AE85) % 2**32]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 // 2**32) ^ c[1] ^ k[0], p1 % 2**32, (p0 // 2**32) ^ c[3] ^ k[1], p0 % 2**32]
    return tuple(c)


@pytest.mark.parametrize("ctr,key,out", KAT)
def test_known_answers(ctr, key, out):
    assert tuple(int(v) for v in philox.philox4x32_10(*ctr, *key)) == out
    assert scalar_philox(ctr, key) == out


def test_vectorised_equals_scalar_on_random_counters():
    rng = np.random.default_rng(0)
    ctr = rng.integers(0, 2**32, size=(200, 4), dtype=np.uint64)
    key = [int(v) for v in rng.integers(0, 2**32, size=2)]
    got = np.stack(philox.philox4x32_10(*ctr.T, *key), axis=1)
    for row, g in zip(ctr, got):
        assert scalar_philox(tuple(int(v) for v in row), key) == tuple(int(v) for v in g)


def test_words_follow_the_documented_layout():
    seed, step = 0x0123456789ABCDEF, 77
    w = philox.words(seed, seeds.TRAIN, step, np.array([5, 9]), philox.INPUTS, 3)
    assert w.shape == (2, 12)
    for r, ctx in enumerate((5, 9)):
        for blk in range(3):
            ctr = (blk, ctx, philox.INPUTS | seeds.TRAIN << 8, step)
            assert scalar_philox(ctr, (seed & 0xFFFFFFFF, seed >> 32)) == tuple(int(v) for v in w[r, 4 * blk:4 * blk + 4])


def test_bad_fields_are_refused():
    with pytest.raises(ValueError, match="step"):
        philox.words(1, 1, 2**32, np.array([0]), 1, 1)
    with pytest.raises(ValueError, match="context"):
        philox.words(1, 1, 0, np.array([2**32]), 1, 1)
    with pytest.raises(ValueError, match="purpose"):
        philox.counter_word(256, 1)


def test_box_muller_against_its_formula():
    w = np.array([[0, 0, 2**31, 2**30, 2**32 - 1, 123456789]], dtype=np.uint64)
    z = philox.box_muller(w)
    for m in range(3):
        a, b = int(w[0, 2 * m]), int(w[0, 2 * m + 1])
        r = math.sqrt(-2 * math.log((a + 1) / 2**32))
        th = 2 * math.pi * b / 2**32
        assert z[0, 2 * m] == pytest.approx(r * math.cos(th), abs=1e-15)
        assert z[0, 2 * m + 1] == pytest.approx(r * math.sin(th), abs=1e-15)


def test_gaussians_have_the_normal_law():
    n = 200_000
    z = philox.gaussians(7, seeds.EVAL, 0, np.arange(n // 8), philox.INPUTS, 8).ravel()
    se = 1 / math.sqrt(n)
    assert abs(z.mean()) < 5 * se
    assert abs(z.var() - 1) < 5 * math.sqrt(2) * se
    assert abs((z**4).mean() - 3) < 5 * math.sqrt(96) * se  # var(z^4) = 105 - 9
    assert abs(stats.skew(z)) < 5 * math.sqrt(6) * se
    assert stats.kstest(z, "norm").pvalue > 1e-4
    # lanes are independent: the correlation of the cos and sin draws of a pair, and across blocks
    zz = z.reshape(-1, 8)
    for a, b in ((0, 1), (1, 2), (3, 4)):
        assert abs(np.corrcoef(zz[:, a], zz[:, b])[0, 1]) < 5 / math.sqrt(zz.shape[0])


def test_integers_are_uniform_and_streams_disjoint():
    n, P = 64_000, 7
    j = philox.integers(3, seeds.TRAIN, 4, np.arange(n), philox.MATCH, P)
    assert j.min() == 0 and j.max() == P - 1
    assert stats.chisquare(np.bincount(j, minlength=P)).pvalue > 1e-4
    # the same seed in another kind, step, purpose or context gives other words
    base = philox.words(3, seeds.TRAIN, 4, np.arange(8), philox.INPUTS, 2)
    for other in (philox.words(3, seeds.EVAL, 4, np.arange(8), philox.INPUTS, 2),
                  philox.words(3, seeds.TRAIN, 5, np.arange(8), philox.INPUTS, 2),
                  philox.words(3, seeds.TRAIN, 4, np.arange(8), philox.TEACHER, 2),
                  philox.words(3, seeds.TRAIN, 4, np.arange(8, 16), philox.INPUTS, 2),
                  philox.words(4, seeds.TRAIN, 4, np.arange(8), philox.INPUTS, 2)):
        assert not np.isin(other, base).any()
