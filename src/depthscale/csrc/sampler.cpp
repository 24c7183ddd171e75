// The counter-based context sampler, fused (depthscale.contexts, issue 35): the same Philox-4x32-10
// words as depthscale/philox.py bit for bit, the same Box-Muller Gaussians (glibc's log, cos and sin
// against numpy's: equal to an ulp or two), the same Householder Haar rotations and the same
// transforms as the torch path of contexts.py, in float64, one context per iteration of
// at::parallel_for: a context's numbers are computed by one thread in a fixed order, so they do not
// depend on the thread count or on which other contexts share the batch.
//
// Key and counter layout (philox.py): key = the stream's 64-bit seed (low, high words);
// counter = (block, context index, purpose | kind << 8, step).

#include <ATen/ATen.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "parallel.h"
#include "vec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <tuple>
#include <vector>

// The stream's arithmetic is written out in this file, not left to the compiler: every fused
// multiply-add is std::fma (vec.h's fma_lanes for eight lanes), every other product is rounded before it is
// added (contraction off below), and each sum runs in the order written. What GCC 12 had made of
// the plain expressions (-O3 -march=native: contracted across statements; a vectorised sum of
// products rounded for its first 4 floor(n/4) terms, fused for the rest) is what the code now
// says, so that a build with another compiler, without FMA or AVX-512 or without vectorisation
// gives the same numbers (tests/test_sampler_portable.py builds one).
#include "exact.h"  // contraction off for the rest of the file

namespace {

using depthscale::fma_lanes;

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
constexpr double kTwoM32 = 2.3283064365386962890625e-10;  // 2^-32
constexpr double kTwoPi = 6.283185307179586;
constexpr uint32_t kHaar = 1, kInputs = 2, kQuery = 3, kTeacher = 4, kNoise = 5, kMatch = 6, kClass = 7;

struct Stream {
  uint32_t k0, k1, kind, step;
};

// Philox-4x32-10 on the counter c, in place (the key bumped before rounds 2..10)
inline void philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint64_t p0 = uint64_t(kM0) * c[0], p1 = uint64_t(kM1) * c[2];
    const uint32_t x0 = uint32_t(p1 >> 32) ^ c[1] ^ k0, x2 = uint32_t(p0 >> 32) ^ c[3] ^ k1;
    c[0] = x0;
    c[1] = uint32_t(p1);
    c[2] = x2;
    c[3] = uint32_t(p0);
  }
}

// The words of n blocks of one context, block i's counter (bi[i], ctx, c2[i], step), lane l of block
// i in w[l][i]: the loop over blocks is vectorised (the rounds unrolled), each block computed alone
void philox_blocks(const Stream& s, uint32_t ctx, const uint32_t* bi, const uint32_t* c2, int64_t n, uint32_t* w0,
                   uint32_t* w1, uint32_t* w2, uint32_t* w3) {
  int64_t i0 = 0;
#ifdef __AVX512F__
  // eight blocks at a time, a word in each 64-bit lane: the 32 x 32 -> 64 bit products are one
  // vpmuludq each, which reads only the low 32 bits of its lanes. So the words are kept with
  // whatever their lanes' high halves hold (x1, x3: the whole products; x0, x2: xors of them) and
  // cut to their low 32 bits only when stored: no masking in the rounds. The round keys are made
  // once per call.
  const __m512i m0 = _mm512_set1_epi64(kM0), m1 = _mm512_set1_epi64(kM1);
  __m512i rk0[10], rk1[10];
  for (uint32_t r = 0, k0 = s.k0, k1 = s.k1; r < 10; ++r, k0 += kW0, k1 += kW1) {
    rk0[r] = _mm512_set1_epi64(k0);
    rk1[r] = _mm512_set1_epi64(k1);
  }
  for (; i0 + 8 <= n; i0 += 8) {
    __m512i x0 = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bi + i0)));
    __m512i x2 = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c2 + i0)));
    __m512i x1 = _mm512_set1_epi64(ctx), x3 = _mm512_set1_epi64(s.step);
#pragma GCC unroll 10
    for (int r = 0; r < 10; ++r) {
      const __m512i p0 = _mm512_mul_epu32(x0, m0), p1 = _mm512_mul_epu32(x2, m1);
      x0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), x1, rk0[r], 0x96);  // a ^ b ^ c
      x2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), x3, rk1[r], 0x96);
      x1 = p1;
      x3 = p0;
    }
    // vpmovqd keeps each lane's low 32 bits
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w0 + i0), _mm512_cvtepi64_epi32(x0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w1 + i0), _mm512_cvtepi64_epi32(x1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w2 + i0), _mm512_cvtepi64_epi32(x2));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w3 + i0), _mm512_cvtepi64_epi32(x3));
  }
#endif
#pragma omp simd
  for (int64_t i = i0; i < n; ++i) {
    uint32_t x0 = bi[i], x1 = ctx, x2 = c2[i], x3 = s.step, k0 = s.k0, k1 = s.k1;
#pragma GCC unroll 10
    for (int r = 0; r < 10; ++r) {
      const uint64_t p0 = uint64_t(kM0) * x0, p1 = uint64_t(kM1) * x2;
      const uint32_t y0 = uint32_t(p1 >> 32) ^ x1 ^ k0, y2 = uint32_t(p0 >> 32) ^ x3 ^ k1;
      x0 = y0;
      x1 = uint32_t(p1);
      x2 = y2;
      x3 = uint32_t(p0);
      k0 += kW0;
      k1 += kW1;
    }
    w0[i] = x0;
    w1[i] = x1;
    w2[i] = x2;
    w3[i] = x3;
  }
}

// a where the mask is all ones, b where it is zero (bitwise: exact, and no branch)
inline double pick(uint64_t mask, double a, double b) {
  return std::bit_cast<double>((std::bit_cast<uint64_t>(a) & mask) | (std::bit_cast<uint64_t>(b) & ~mask));
}

// log(x 2^shift) for a normal double x > 0 (and x 2^shift normal): x 2^shift = m 2^e with m in
// [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m - 1)/(m + 1), |s| < 0.172, by its series to s^23
// (the next term is below 1e-17 of it); branch-free, so the loops that call it vectorise. Within a
// few ulp of the correctly rounded log. The power of two and the halving of m are exact, so they are
// done on the exponent bits (integer work, off the floating-point pipes): the same numbers as
// multiplying by 2^shift and by 0.5.
inline double log_scaled(double x, int64_t shift) {
  const uint64_t bits = std::bit_cast<uint64_t>(x), mant = bits & 0xFFFFFFFFFFFFFull;
  const double m1 = std::bit_cast<double>(mant | 0x3FF0000000000000ull);  // [1, 2)
  const uint64_t big = uint64_t(0) - uint64_t(m1 > 1.4142135623730951);
  const double m = std::bit_cast<double>(mant | (0x3FF0000000000000ull - (big & 0x0010000000000000ull)));  // m1 / 2
  const int64_t e = int64_t((bits >> 52) & 0x7FF) - 1023 + shift + int64_t(big & 1);
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double p = 1.0 / 23;
  p = std::fma(p, s2, 1.0 / 21);
  p = std::fma(p, s2, 1.0 / 19);
  p = std::fma(p, s2, 1.0 / 17);
  p = std::fma(p, s2, 1.0 / 15);
  p = std::fma(p, s2, 1.0 / 13);
  p = std::fma(p, s2, 1.0 / 11);
  p = std::fma(p, s2, 1.0 / 9);
  p = std::fma(p, s2, 1.0 / 7);
  p = std::fma(p, s2, 1.0 / 5);
  p = std::fma(p, s2, 1.0 / 3);
  const double lm = std::fma(2.0 * s, s2 * p, 2.0 * s);
  const double ed = double(e);
  return std::fma(ed, 6.93147180369123816490e-01, std::fma(ed, 1.90821492927058770002e-10, lm));  // ln 2 = hi + lo
}

// sin and cos of phi in [0, pi/4]: Taylor to phi^17 and phi^16 (the next terms below 1e-17)
inline void sincos_octant(double phi, double& sn, double& cs) {
  const double x2 = phi * phi;
  double ps = -1.0 / 355687428096000.0;  // 1/17!, Horner in x^2 down to 1/3!
  ps = std::fma(ps, x2, 1.0 / 1307674368000.0);
  ps = std::fma(ps, x2, -1.0 / 6227020800.0);
  ps = std::fma(ps, x2, 1.0 / 39916800.0);
  ps = std::fma(ps, x2, -1.0 / 362880.0);
  ps = std::fma(ps, x2, 1.0 / 5040.0);
  ps = std::fma(ps, x2, -1.0 / 120.0);
  ps = std::fma(ps, x2, 1.0 / 6.0);
  sn = std::fma(-phi, x2 * ps, phi);
  double pc = 1.0 / 20922789888000.0;
  pc = std::fma(pc, x2, -1.0 / 87178291200.0);
  pc = std::fma(pc, x2, 1.0 / 479001600.0);
  pc = std::fma(pc, x2, -1.0 / 3628800.0);
  pc = std::fma(pc, x2, 1.0 / 40320.0);
  pc = std::fma(pc, x2, -1.0 / 720.0);
  pc = std::fma(pc, x2, 1.0 / 24.0);
  pc = std::fma(pc, x2, -0.5);
  cs = std::fma(x2, pc, 1.0);
}

// Box-Muller of word pairs (a, b): r = sqrt(-2 log((a + 1) 2^-32)), theta = 2 pi b 2^-32 reduced
// exactly by b's top three bits to an angle in [0, pi/4] (philox.box_muller); zc = r cos, zs = r sin
void box_muller(const uint32_t* a, const uint32_t* b, int64_t n, double* zc, double* zs) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const double r = std::sqrt(-2.0 * log_scaled(double(a[i]) + 1.0, -32));  // log((a + 1) 2^-32)
    const uint32_t oct = b[i] >> 29, low = b[i] & 0x1FFFFFFFu;
    const uint32_t odd32 = 0u - (oct & 1u);
    const uint32_t lowp = low + (odd32 & (0x20000000u - 2u * low));  // odd octant: 2^29 - low
    const double phi = double(lowp) * (kTwoPi * kTwoM32);
    double sn, cs;
    sincos_octant(phi, sn, cs);
    const uint64_t odd = uint64_t(0) - uint64_t(oct & 1u), swap = uint64_t(0) - uint64_t((oct >> 1) & 1u);
    const uint64_t neg = uint64_t((oct >> 2) & 1u) << 63, sgn = uint64_t(1) << 63;
    const double s0 = pick(odd, cs, sn), c0 = pick(odd, sn, cs);
    // quadrant q = oct >> 1: q odd: (sin, cos) -> (c0, -s0); q >= 2: both negated
    const double s1 = pick(swap, c0, s0);
    const double c1 = pick(swap, std::bit_cast<double>(std::bit_cast<uint64_t>(s0) ^ sgn), c0);
    zc[i] = r * std::bit_cast<double>(std::bit_cast<uint64_t>(c1) ^ neg);
    zs[i] = r * std::bit_cast<double>(std::bit_cast<uint64_t>(s1) ^ neg);
  }
}

struct Scratch {
  std::vector<uint32_t> bi, c2, w0, w1, w2, w3;
  std::vector<double> c0, s0, c1, s1;
  void resize(int64_t n) {
    for (auto* v : {&bi, &c2, &w0, &w1, &w2, &w3}) v->resize(n);
    for (auto* v : {&c0, &s0, &c1, &s1}) v->resize(n);
  }
};

// n standard Gaussians of one (context, purpose) into z
struct Draw {
  uint32_t purpose;
  int64_t n;
  double* z;
};

// The Gaussians of several purposes of one context, made together (a purpose's own numbers: draw
// 4i + l of a purpose is Box-Muller of the lane pair (0, 1) (l = 0, 1) or (2, 3) of its block i;
// its blocks are a function of their counters alone). Made together, so that the vector loops run
// over all the blocks at once, padded to a multiple of 16 (the pad blocks are made and not used;
// Box-Muller's vector loop takes 16 pairs a turn): the scalar remainders of a purpose of d draws
// alone had cost as much as its vector part.
void gaussians(const Stream& s, uint32_t ctx, std::initializer_list<Draw> draws, Scratch& t) {
  int64_t blocks = 0;
  for (const Draw& g : draws) blocks += (g.n + 3) / 4;
  const int64_t padded = (blocks + 15) / 16 * 16;
  t.resize(padded);
  int64_t b = 0;
  for (const Draw& g : draws)
    for (int64_t i = 0; i < (g.n + 3) / 4; ++i, ++b) {
      t.bi[b] = uint32_t(i);
      t.c2[b] = g.purpose | (s.kind << 8);
    }
  std::fill(t.bi.begin() + b, t.bi.end(), 0u);
  std::fill(t.c2.begin() + b, t.c2.end(), 0u);
  philox_blocks(s, ctx, t.bi.data(), t.c2.data(), padded, t.w0.data(), t.w1.data(), t.w2.data(), t.w3.data());
  box_muller(t.w0.data(), t.w1.data(), padded, t.c0.data(), t.s0.data());
  box_muller(t.w2.data(), t.w3.data(), padded, t.c1.data(), t.s1.data());
  b = 0;
  for (const Draw& g : draws) {
    const double *c0 = t.c0.data() + b, *s0 = t.s0.data() + b, *c1 = t.c1.data() + b, *s1 = t.s1.data() + b;
    double* z = g.z;
    const int64_t full = g.n / 4;  // draw 4i + l is lane l of block i
    for (int64_t i = 0; i < full; ++i) {
      z[4 * i] = c0[i];
      z[4 * i + 1] = s0[i];
      z[4 * i + 2] = c1[i];
      z[4 * i + 3] = s1[i];
    }
    const double* lanes[4] = {c0, s0, c1, s1};
    for (int64_t m = 4 * full; m < g.n; ++m) z[m] = lanes[m & 3][m >> 2];
    b += (g.n + 3) / 4;
  }
}

// one integer uniform in [0, n): (w0 + 2^32 w1) mod n of block 0
inline int64_t integer(const Stream& s, uint32_t ctx, uint32_t purpose, uint64_t n) {
  uint32_t c[4] = {0u, ctx, purpose | (s.kind << 8), s.step};
  philox(c, s.k0, s.k1);
  return int64_t((uint64_t(c[0]) | (uint64_t(c[1]) << 32)) % n);
}

typedef double v8d __attribute__((vector_size(64)));  // eight doubles (one AVX-512 register)

inline v8d load8(const double* p) {
  v8d v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store8(double* p, v8d v) { std::memcpy(p, &v, sizeof v); }

// x in every lane (exactly: -0 stays -0)
inline v8d splat8(double x) { return v8d{x, x, x, x, x, x, x, x}; }

// How many leading terms of a sum of n products `s += a[i] * b[i]` GCC's vectorised loop rounded
// before adding (4 floor(n/4)); it fused the rest (its scalar remainder). The stream's arithmetic.
constexpr int64_t rounded_terms(int64_t n) { return n / 4 * 4; }

// sum_i a_i b_i in order of i, the first rounded_terms(n) products rounded, then added; the rest fused
inline double dot_in_order(const double* a, const double* b, int64_t n) {
  const int64_t n4 = rounded_terms(n);
  double s = 0.0;
  for (int64_t i = 0; i < n4; ++i) s += a[i] * b[i];
  for (int64_t i = n4; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

// M[0:m, :] -= 2 u (u^T M[0:m, :]) for the m x d rows M (d columns), u[i] at u[i * us], each
// column's sum over i in order; eight columns at a time where d is a multiple of 8 known at compile time
template <int DT>
inline void reflect(const double* u, int64_t us, int64_t m, double* M, int64_t dd) {
  if constexpr (DT > 0 && DT % 8 == 0) {
    constexpr int NV = DT / 8;
    v8d w[NV] = {};
    for (int64_t i = 0; i < m; ++i)
      for (int v = 0; v < NV; ++v) w[v] = fma_lanes(splat8(u[i * us]), load8(M + i * DT + 8 * v), w[v]);
    for (int64_t i = 0; i < m; ++i)
      for (int v = 0; v < NV; ++v)
        store8(M + i * DT + 8 * v, fma_lanes(splat8(-2.0 * u[i * us]), w[v], load8(M + i * DT + 8 * v)));
  } else {
    std::vector<double> w(dd, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t col = 0; col < dd; ++col) w[col] = std::fma(u[i * us], M[i * dd + col], w[col]);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t col = 0; col < dd; ++col) M[i * dd + col] = std::fma(-2.0 * u[i * us], w[col], M[i * dd + col]);
  }
}

// The unit Householder vectors u_k = (x_k - alpha_k e_1)/|x_k - alpha_k e_1| of the vectors x_k in v
// (x_k of length d - k at offset k d - k (k - 1)/2, k = 0..d-1), u_k as column k of the d x d array
// t (zero below its length), all d at once: each step of the d sums |x_k|^2, then |u_k|^2, in order
// of i, is one vector operation over k (a chain per k: latency-bound) -- a zero adds nothing to a
// sum of squares. The arithmetic is the stream's: as GCC 12 (-O3 -march=native) compiled one x_k's
// loop `s += x[i] * x[i]`: the squares of its first 4 floor(m/4) terms rounded and then added (its
// vectorised part), the last m mod 4 added by fused multiply-adds (its scalar remainder) -- now
// written out. nx, nu: d doubles each. Where d is a multiple of 8 known at compile time (DT) the d
// running sums stay in registers (through memory, each step waited on the last one's store).
template <int DT>
void householder_units(const double* v, int64_t dd, double* t, double* nx, double* nu) {
  const int64_t d = DT > 0 ? DT : dd;
  std::fill(t, t + d * d, 0.0);
  for (int64_t k = 0, off = 0; k < d; off += d - k, ++k)
    for (int64_t i = 0; i < d - k; ++i) t[i * d + k] = v[off + i];
  // the sum of squares of column k of t (d - k terms), term i rounded then added where
  // i < rounded_terms(d - k), else fused (both made, one kept: a loop over k without bounds that
  // vary with i vectorises whole)
  auto squares = [&](double* s) {
    if constexpr (DT > 0 && DT % 8 == 0) {
      constexpr int NV = DT / 8;
      v8d acc[NV] = {}, rounded[NV];  // rounded[v][l]: rounded_terms(d - k) for column k = 8 v + l
      for (int v = 0; v < NV; ++v)
        for (int l = 0; l < 8; ++l) rounded[v][l] = double(rounded_terms(DT - (8 * v + l)));
      for (int64_t i = 0; i < DT; ++i)
        for (int v = 0; v < NV; ++v) {
          const v8d x = load8(t + i * DT + 8 * v), plain = acc[v] + x * x, fused = fma_lanes(x, x, acc[v]);
          acc[v] = splat8(double(i)) < rounded[v] ? plain : fused;
        }
      for (int v = 0; v < NV; ++v) store8(s + 8 * v, acc[v]);
      return;
    }
    std::fill(s, s + d, 0.0);
    for (int64_t i = 0; i < d; ++i) {
      const double* x = t + i * d;
      for (int64_t k = 0; k < d; ++k) {
        const double plain = s[k] + x[k] * x[k], fused = std::fma(x[k], x[k], s[k]);
        s[k] = i < rounded_terms(d - k) ? plain : fused;
      }
    }
  };
  squares(nx);
  for (int64_t k = 0; k < d; ++k) t[k] = t[k] + (t[k] >= 0 ? 1.0 : -1.0) * std::sqrt(nx[k]);  // x - alpha e_1
  squares(nu);
  for (int64_t k = 0; k < d; ++k) nu[k] = std::sqrt(nu[k]);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t k = 0; k < d; ++k) t[i * d + k] = nu[k] > 0 ? t[i * d + k] / nu[k] : 0.0;  // x = 0: H = I
}

// O = H_1 ... H_d diag(s) from the Householder vectors v (householder_units), row-major
// (contexts.haar_from_householder); u: d (d + 2) doubles of scratch. The reflections run in sequence,
// each on the last one's rows.
template <int DT>
void haar(const double* v, int64_t dd, double* O, double* u) {
  const int64_t d = DT > 0 ? DT : dd;
  householder_units<DT>(v, d, u, u + d * d, u + d * d + d);
  std::fill(O, O + d * d, 0.0);
  for (int64_t k = 0, off = 0; k < d; off += d - k, ++k) O[k * d + k] = v[off] >= 0 ? -1.0 : 1.0;
  for (int64_t k = d - 1; k >= 0; --k) reflect<DT>(u + k, d, d - k, O + k * d, d);
}

struct Shape {
  int64_t d, P;
  bool query, noisy;
  int64_t match, classes;
};

// the draws of one context (its index ctx in the stream) into O (d x d, unless classes), zX (P x d),
// zq (d, if query), zb (d), zn (P, if noisy), j[0] (if match), cls[0] (if classes); v: d(d+1)/2 and
// u: d(d+2) doubles of scratch. Every number is a function of (s, ctx) alone.
void draw_one(const Stream& s, uint32_t ctx, const Shape& sh, double* O, double* zX, double* zq, double* zb,
              double* zn, int64_t* j, int64_t* cls, double* v, double* u, Scratch& t) {
  const int64_t d = sh.d, P = sh.P;
  gaussians(s, ctx, {{kHaar, sh.classes == 0 ? d * (d + 1) / 2 : 0, v}, {kInputs, P * d, zX},
                     {kQuery, sh.query ? d : 0, zq}, {kTeacher, d, zb}, {kNoise, sh.noisy ? P : 0, zn}}, t);
  if (sh.classes == 0) {
    if (d == 16) haar<16>(v, d, O, u);
    else if (d == 32) haar<32>(v, d, O, u);
    else haar<0>(v, d, O, u);
  }
  if (sh.match > 0) j[0] = integer(s, ctx, kMatch, uint64_t(sh.match));
  if (sh.classes > 0) cls[0] = integer(s, ctx, kClass, uint64_t(sh.classes));
}

// The stream of key words (k0, k1), kind and step, each checked to fit its counter word (`op`: the
// entry point, for the message)
Stream stream_of(int64_t k0, int64_t k1, int64_t kind, int64_t step, const char* op) {
  TORCH_CHECK(k0 >= 0 && k0 < (int64_t(1) << 32) && k1 >= 0 && k1 < (int64_t(1) << 32) && kind >= 0 && kind < 256 &&
                  step >= 0 && step < (int64_t(1) << 32),
              "depthscale ", op, ": a key word, kind or step out of range");
  return Stream{uint32_t(k0), uint32_t(k1), uint32_t(kind), uint32_t(step)};
}

// contexts start..start+B-1 must have 32-bit indices
void check_contexts(int64_t start, int64_t B, const char* op) {
  TORCH_CHECK(start >= 0 && B >= 0 && start + B <= (int64_t(1) << 32), "depthscale ", op,
              ": a context index out of range");
}

at::Tensor f64(std::vector<int64_t> shape) { return at::empty(shape, at::TensorOptions().dtype(at::kDouble)); }
at::Tensor i64(std::vector<int64_t> shape) { return at::empty(shape, at::TensorOptions().dtype(at::kLong)); }

// The spectrum-free draws of contexts start..start+B-1 (contexts.draws_torch): O (B x d x d; empty
// when classes > 0), zX (B x P x d), zq (B x d, if query), zb (B x d), zn (B x P, if noisy),
// j (B, if match > 0: uniform in [0, match)), cls (B, if classes > 0).
std::vector<at::Tensor> sampler_draws(int64_t k0, int64_t k1, int64_t kind, int64_t step, int64_t start, int64_t B,
                                      int64_t d, int64_t P, bool query, bool noisy, int64_t match,
                                      int64_t classes) {
  const Stream s = stream_of(k0, k1, kind, step, "sampler_draws");
  check_contexts(start, B, "sampler_draws");
  const int64_t nh = d * (d + 1) / 2;
  at::Tensor O = f64({classes > 0 ? 0 : B, d, d}), zX = f64({B, P, d}), zq = f64({query ? B : 0, d}),
             zb = f64({B, d}), zn = f64({noisy ? B : 0, P}), j = i64({match > 0 ? B : 0}),
             cls = i64({classes > 0 ? B : 0});
  double *Op = O.data_ptr<double>(), *zXp = zX.data_ptr<double>(), *zqp = zq.data_ptr<double>(),
         *zbp = zb.data_ptr<double>(), *znp = zn.data_ptr<double>();
  int64_t *jp = j.data_ptr<int64_t>(), *cp = cls.data_ptr<int64_t>();
  const Shape sh{d, P, query, noisy, match, classes};
  at::parallel_for(0, B, 8, [&](int64_t b0, int64_t b1) {
    std::vector<double> v(nh), u(d * (d + 2));
    Scratch t;
    for (int64_t b = b0; b < b1; ++b)
      draw_one(s, uint32_t(start + b), sh, Op + b * d * d, zXp + b * P * d, zqp + b * d, zbp + b * d, znp + b * P,
               jp + b, cp + b, v.data(), u.data(), t);
  });
  return {O, zX, zq, zb, zn, j, cls};
}

// the k indices of the largest s[0..P), by score descending (ties: the lower index first): each p in
// turn inserted into the sorted list of the best so far (k is small; the same k indices in the same
// order as any sort by that rule); above 32, std::partial_sort
void top_k(const double* s, int64_t P, int64_t k, int64_t* out, std::vector<int64_t>& idx) {
  if (k > 32) {
    idx.resize(P);
    std::iota(idx.begin(), idx.end(), int64_t(0));
    auto before = [s](int64_t a, int64_t c) { return s[a] > s[c] || (s[a] == s[c] && a < c); };
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
    std::copy(idx.begin(), idx.begin() + k, out);
    return;
  }
  int64_t n = 0;  // out[0..n): the best of s[0..p), sorted (an equal score never passes an earlier index)
  for (int64_t p = 0; p < P; ++p) {
    if (n == k && !(s[p] > s[out[k - 1]])) continue;
    int64_t j = n < k ? n++ : k - 1;
    for (; j > 0 && s[p] > s[out[j - 1]]; --j) out[j] = out[j - 1];
    out[j] = p;
  }
}

struct Draws {
  const double *O, *zX, *zq, *zb, *zn, *sl, *so;
  const int64_t* j;
  int64_t d, P, k;
  double noise;
};

struct Out {
  double *X, *y, *xq, *ys, *t, *beta;
  int64_t* sel;
};

// out[r, i] = sum_c O[i, c] (z[r, c] s[c]) for rows r < n (Ot = O transposed), each sum in order of c:
// eight lanes of i at a time where d is a multiple of 8 known at compile time, and R rows at once so
// that 16 accumulators are in flight (one row's sums alone wait on the FMA latency; the same arithmetic)
template <int DT, int R>
inline void rotate_rows(const double* Ot, const double* z, const double* s, double* out) {
  constexpr int NV = DT / 8;
  double zs[R * DT];  // z[q, c] s[c], all R rows' products at once (vectorised)
  for (int q = 0; q < R; ++q)
    for (int64_t c = 0; c < DT; ++c) zs[q * DT + c] = z[q * DT + c] * s[c];
  v8d acc[R][NV] = {};
  for (int64_t c = 0; c < DT; ++c) {
    v8d o[NV];
    for (int v = 0; v < NV; ++v) o[v] = load8(Ot + c * DT + 8 * v);
    for (int q = 0; q < R; ++q)
      for (int v = 0; v < NV; ++v) acc[q][v] = fma_lanes(splat8(zs[q * DT + c]), o[v], acc[q][v]);
  }
  for (int q = 0; q < R; ++q)
    for (int v = 0; v < NV; ++v) store8(out + q * DT + 8 * v, acc[q][v]);
}

template <int DT>
inline void rotate(const double* Ot, const double* z, const double* s, int64_t n, int64_t dd, double* out) {
  const int64_t d = DT > 0 ? DT : dd;
  if constexpr (DT > 0 && DT % 8 == 0) {
    constexpr int R = DT / 8 >= 16 ? 1 : 128 / DT;
    int64_t r = 0;
    for (; r + R <= n; r += R) rotate_rows<DT, R>(Ot, z + r * DT, s, out + r * DT);
    for (; r < n; ++r) rotate_rows<DT, 1>(Ot, z + r * DT, s, out + r * DT);
  } else {
    for (int64_t r = 0; r < n; ++r) {
      double* o = out + r * d;
      std::fill(o, o + d, 0.0);
      for (int64_t c = 0; c < d; ++c) {
        const double zc = z[r * d + c] * s[c];
        for (int64_t i = 0; i < d; ++i) o[i] = std::fma(zc, Ot[c * d + i], o[i]);
      }
    }
  }
}

// y[p] = sum_i X[p, i] beta[i] (+ noise zn[p]) for p < P, each sum in order of i, four rows at once
// (independent chains; the same arithmetic as one row at a time). The stream's labels are what the
// compiler made of one row's chain `acc += X beta[i]`: fused multiply-adds where d was 8 or 16, a
// product then a sum at other d (GCC 12, -O3 -march=native), the noise added by a fused multiply-add
// at every d -- now written out (FMA: std::fma; else a product, rounded, and a sum).

// a + x b: one rounding (FMA) or two
template <bool FMA>
inline double mac(double x, double b, double a) {
  if constexpr (FMA) return std::fma(x, b, a);
  else return a + x * b;
}

template <int DT, bool FMA>
void labels(const double* X, const double* beta, const double* zn, double noise, int64_t P, int64_t dd, double* y) {
  const int64_t d = DT > 0 ? DT : dd;
  int64_t p = 0;
  for (; p + 4 <= P; p += 4) {
    const double *x0 = X + p * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      const double bi = beta[i];
      a0 = mac<FMA>(x0[i], bi, a0);
      a1 = mac<FMA>(x1[i], bi, a1);
      a2 = mac<FMA>(x2[i], bi, a2);
      a3 = mac<FMA>(x3[i], bi, a3);
    }
    y[p] = a0;
    y[p + 1] = a1;
    y[p + 2] = a2;
    y[p + 3] = a3;
  }
  for (; p < P; ++p) {
    double acc = 0.0;
    for (int64_t i = 0; i < d; ++i) acc = mac<FMA>(X[p * d + i], beta[i], acc);
    y[p] = acc;
  }
  if (zn)
    for (int64_t q = 0; q < P; ++q) y[q] = std::fma(noise, zn[q], y[q]);
}

// x . qh / max(|x|, 1e-8) as torch's cosine computes it (x / |x| first), each sum in a fixed order:
// lane-wise over blocks of eight, then the eight lanes in order, where d is a multiple of 8
template <int DT>
inline double cosine(const double* x, const double* qh, double* xh, int64_t dd) {
  if constexpr (DT > 0 && DT % 8 == 0) {
    constexpr int NV = DT / 8;
    v8d sq = {}, dv = {};
    for (int v = 0; v < NV; ++v) sq = fma_lanes(load8(x + 8 * v), load8(x + 8 * v), sq);
    double xn = 0.0;
    for (int l = 0; l < 8; ++l) xn += sq[l];
    xn = std::max(std::sqrt(xn), 1e-8);
    for (int v = 0; v < NV; ++v) dv = fma_lanes(load8(x + 8 * v) / xn, load8(qh + 8 * v), dv);
    double dot = 0.0;
    for (int l = 0; l < 8; ++l) dot += dv[l];
    return dot;
  } else {
    const double xn = std::max(std::sqrt(dot_in_order(x, x, dd)), 1e-8);
    for (int64_t i = 0; i < dd; ++i) xh[i] = x[i] / xn;
    return dot_in_order(xh, qh, dd);
  }
}

// the 8 x 8 transpose of rows r[0..8): column l of them in out[l]
inline void transpose8(const v8d (&r)[8], v8d (&out)[8]) {
  v8d t[8], u[8];
  for (int q = 0; q < 8; q += 2) {  // pairs of rows interleaved: (r_q[0], r_q+1[0], r_q[2], r_q+1[2], ...)
    t[q] = __builtin_shufflevector(r[q], r[q + 1], 0, 8, 2, 10, 4, 12, 6, 14);
    t[q + 1] = __builtin_shufflevector(r[q], r[q + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  }
  for (int q = 0; q < 8; q += 4)  // then pairs of pairs: u[q + c] holds columns c and c + 4 of rows q..q+3
    for (int c = 0; c < 2; ++c) {
      u[q + c] = __builtin_shufflevector(t[q + c], t[q + c + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[q + c + 2] = __builtin_shufflevector(t[q + c], t[q + c + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int c = 0; c < 4; ++c) {  // then the two halves of the eight rows
    out[c] = __builtin_shufflevector(u[c], u[c + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    out[c + 4] = __builtin_shufflevector(u[c], u[c + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// cosine<DT> of the eight rows x[0..8) (DT a multiple of 8) into out[0..8), each row's numbers as
// cosine<DT> computes them: lane l of a row's sums of its entries l, l + 8, ... becomes row r's lane
// of the vector of the eight rows' lane-l sums (one transpose of each 8 x 8 block), so the sums
// over lanes are additions of vectors instead of a chain of scalars per row.
template <int DT>
inline void cosine8(const double* x, const double* qh, double* out) {
  constexpr int NV = DT / 8;
  v8d c[NV][8];  // c[v][l]: entry 8 v + l of the eight rows
  for (int v = 0; v < NV; ++v) {
    v8d r[8];
    for (int q = 0; q < 8; ++q) r[q] = load8(x + q * DT + 8 * v);
    transpose8(r, c[v]);
  }
  v8d xn = splat8(0.0);
  for (int l = 0; l < 8; ++l) {
    v8d sq = splat8(0.0);
    for (int v = 0; v < NV; ++v) sq = fma_lanes(c[v][l], c[v][l], sq);
    xn = xn + sq;
  }
  for (int q = 0; q < 8; ++q) xn[q] = std::max(std::sqrt(xn[q]), 1e-8);
  v8d dot = splat8(0.0);
  for (int l = 0; l < 8; ++l) {
    v8d dv = splat8(0.0);
    for (int v = 0; v < NV; ++v) dv = fma_lanes(c[v][l] / xn, splat8(qh[8 * v + l]), dv);
    dot = dot + dv;
  }
  store8(out, dot);
}

// one context's X, beta, y, x_test, selection, target input and target (contexts.sample_contexts)
// (DT: d at compile time where it is 8, 16 or 32, so that the short loops over i unroll; 0 otherwise)
template <int DT>
// (the outputs written to o's context 0: a per-thread buffer, cast into the outputs afterwards)
void transform_one(const Draws& in, const Out& o, int64_t b, std::vector<double>& sc, std::vector<int64_t>& idx) {
  const int64_t d = DT > 0 ? DT : in.d, P = in.P, k = in.k;
  const double* O = in.O + b * d * d;
  double *X = o.X, *beta = o.beta, *y = o.y, *xq = o.xq;
  double* Ot = sc.data();  // O transposed: the products below run along rows, each sum in order of c
  for (int64_t i = 0; i < d; ++i)
    for (int64_t c = 0; c < d; ++c) Ot[c * d + i] = O[i * d + c];
  rotate<DT>(Ot, in.zX + b * P * d, in.sl, P, d, X);
  rotate<DT>(Ot, in.zb + b * d, in.so, 1, d, beta);
  const double* zn = in.zn ? in.zn + b * P : nullptr;
  labels<DT, DT == 8 || DT == 16>(X, beta, zn, in.noise, P, d, y);
  int64_t* sel = o.sel;
  if (in.j) {
    sel[0] = in.j[b];
    for (int64_t i = 0; i < d; ++i) xq[i] = X[sel[0] * d + i];
  } else {
    rotate<DT>(Ot, in.zq + b * d, in.sl, 1, d, xq);
    const double qn = std::max(std::sqrt(dot_in_order(xq, xq, d)), 1e-8);
    double* scores = sc.data() + d * d;
    double *qh = scores + P, *xh = qh + d;  // x_test / |x_test|, x_p / |x_p| (torch's cosine, in its order)
    for (int64_t i = 0; i < d; ++i) qh[i] = xq[i] / qn;
    int64_t p = 0;
    if constexpr (DT > 0 && DT % 8 == 0)
      for (; p + 8 <= P; p += 8) cosine8<DT>(X + p * d, qh, scores + p);
    for (; p < P; ++p) scores[p] = cosine<DT>(X + p * d, qh, xh, d);
    top_k(scores, P, k, sel, idx);
  }
  double ys = 0.0;
  for (int64_t r = 0; r < k; ++r) ys += y[sel[r]];
  o.ys[0] = ys / double(k);
  for (int64_t i = 0; i < d; ++i) {
    double acc = 0.0;
    for (int64_t r = 0; r < k; ++r) acc += X[sel[r] * d + i];
    o.t[i] = acc / double(k);
  }
}

at::Tensor c64(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kDouble, "depthscale sampler: float64 CPU tensors only");
  return t.contiguous();
}

// the outputs of the contexts in the run's dtype T (O: the rotations, where the call returns them)
template <typename T>
struct Dest {
  T *X, *y, *xq, *ys, *t, *beta, *O;
  int64_t* sel;
};

// one context's outputs (o: a per-thread float64 buffer) stored as context b of dst, each number cast
template <typename T>
void store_one(const Out& o, const Dest<T>& dst, int64_t b, int64_t d, int64_t P, int64_t k) {
  for (int64_t i = 0; i < P * d; ++i) dst.X[b * P * d + i] = T(o.X[i]);
  for (int64_t i = 0; i < P; ++i) dst.y[b * P + i] = T(o.y[i]);
  for (int64_t i = 0; i < d; ++i) {
    dst.xq[b * d + i] = T(o.xq[i]);
    dst.t[b * d + i] = T(o.t[i]);
    dst.beta[b * d + i] = T(o.beta[i]);
  }
  dst.ys[b] = T(o.ys[0]);
  for (int64_t r = 0; r < k; ++r) dst.sel[b * k + r] = o.sel[r];
}

// per-thread buffers of one context's outputs (transform_one's scratch and result)
struct OneContext {
  std::vector<double> sc, buf;
  std::vector<int64_t> idx, sel;
  Out o;
  OneContext(int64_t d, int64_t P, int64_t k) : sc(d * d + P + 2 * d), buf(P * d + P + 3 * d + 1), sel(k) {
    double* q = buf.data();
    double *qy = q + P * d, *qxq = qy + P, *qys = qxq + d, *qt = qys + 1, *qb = qt + d;  // X, y, xq, y*, t, beta
    o = Out{q, qy, qxq, qys, qt, qb, sel.data()};
  }
};

// the output tensors of B contexts (X, y, x_test, y*, sel, t, beta, and O where with_O) in float32
// where f32, else float64
std::vector<at::Tensor> outputs(int64_t B, int64_t d, int64_t P, int64_t k, bool f32, bool with_O) {
  const auto opt = at::TensorOptions().dtype(f32 ? at::kFloat : at::kDouble);
  return {at::empty({B, P, d}, opt), at::empty({B, P}, opt), at::empty({B, d}, opt), at::empty({B}, opt),
          i64({B, k}),          at::empty({B, d}, opt), at::empty({B, d}, opt), at::empty({with_O ? B : 0, d, d}, opt)};
}

template <typename T>
Dest<T> dest(std::vector<at::Tensor>& out) {
  return Dest<T>{out[0].data_ptr<T>(), out[1].data_ptr<T>(), out[2].data_ptr<T>(), out[3].data_ptr<T>(),
                 out[5].data_ptr<T>(), out[6].data_ptr<T>(), out[7].data_ptr<T>(), out[4].data_ptr<int64_t>()};
}

// fn.template operator()<DT, T>() with DT = d where d is 8, 16 or 32 (else 0) and T the output type
template <typename F>
void dispatch(int64_t d, bool f32, F&& fn) {
  auto typed = [&]<int DT>() {
    if (f32) fn.template operator()<DT, float>();
    else fn.template operator()<DT, double>();
  };
  if (d == 16) typed.template operator()<16>();
  else if (d == 32) typed.template operator()<32>();
  else if (d == 8) typed.template operator()<8>();
  else typed.template operator()<0>();
}

// X, y, x_test, y*, sel, t, beta of the contexts with rotations O and draws zX, zq (empty: the easy
// task, with j), zb, zn (empty: no noise); sl, so: the square roots of the spectra. Computed in
// float64; stored as float32 where f32 (each number the float64 one rounded, as a cast would give).
std::vector<at::Tensor> sampler_transform(const at::Tensor& O_, const at::Tensor& zX_, const at::Tensor& zq_,
                                          const at::Tensor& zb_, const at::Tensor& zn_, const at::Tensor& j_,
                                          const at::Tensor& sl_, const at::Tensor& so_, double noise, int64_t k,
                                          bool f32) {
  at::Tensor O = c64(O_), zX = c64(zX_), zq = c64(zq_), zb = c64(zb_), zn = c64(zn_), sl = c64(sl_), so = c64(so_);
  at::Tensor j = j_.contiguous();
  const int64_t B = zX.size(0), P = zX.size(1), d = zX.size(2);
  const bool easy = zq.numel() == 0;
  TORCH_CHECK(O.sizes() == at::IntArrayRef({B, d, d}) && zb.sizes() == at::IntArrayRef({B, d}) &&
                  (easy ? (j.numel() == B && j.scalar_type() == at::kLong && k == 1)
                        : (zq.sizes() == at::IntArrayRef({B, d}) && k >= 1 && k <= P)) &&
                  (zn.numel() == 0 || zn.sizes() == at::IntArrayRef({B, P})) && sl.numel() == d && so.numel() == d,
              "depthscale sampler_transform: inconsistent shapes");
  std::vector<at::Tensor> out = outputs(B, d, P, k, f32, false);
  const Draws in{O.data_ptr<double>(), zX.data_ptr<double>(), easy ? nullptr : zq.data_ptr<double>(),
                 zb.data_ptr<double>(), zn.numel() ? zn.data_ptr<double>() : nullptr, sl.data_ptr<double>(),
                 so.data_ptr<double>(), easy ? j.data_ptr<int64_t>() : nullptr, d, P, k, noise};
  dispatch(d, f32, [&]<int DT, typename T>() {
    const Dest<T> dst = dest<T>(out);
    at::parallel_for(0, B, 8, [&](int64_t b0, int64_t b1) {
      OneContext one(d, P, k);
      for (int64_t b = b0; b < b1; ++b) {
        transform_one<DT>(in, one.o, b, one.sc, one.idx);
        store_one(one.o, dst, b, d, P, k);
      }
    });
  });
  out.pop_back();
  return out;
}

// sampler_draws and sampler_transform in one pass, context by context (no classes), for contexts
// start..start+B-1 of each stream in `streams`, stream by stream in the outputs (K B contexts): each
// context's draws stay in a per-thread buffer, so no float64 batch is written or read back; the same
// numbers as the two calls. Returns X, y, x_test, y*, sel, t, beta and O, all but sel in float32
// where f32.
std::vector<at::Tensor> one_pass(const std::vector<Stream>& streams, int64_t start, int64_t B, int64_t d, int64_t P,
                                 bool query, bool noisy, int64_t match, const at::Tensor& sl_, const at::Tensor& so_,
                                 double noise, int64_t k, bool f32) {
  check_contexts(start, B, "sampler_contexts_keys");
  at::Tensor sl = c64(sl_), so = c64(so_);
  TORCH_CHECK(sl.numel() == d && so.numel() == d && (query ? (k >= 1 && k <= P && match == 0) : (k == 1 && match > 0)),
              "depthscale sampler_contexts_keys: inconsistent shapes");
  const Shape sh{d, P, query, noisy, match, 0};
  const int64_t n = int64_t(streams.size()) * B;
  std::vector<at::Tensor> out = outputs(n, d, P, k, f32, true);
  dispatch(d, f32, [&]<int DT, typename T>() {
    const Dest<T> dst = dest<T>(out);
    depthscale::balanced_for_with(n, 8, [&] {
      return [&, v = std::vector<double>(d * (d + 1) / 2), u = std::vector<double>(d * (d + 2)),
              O = std::vector<double>(d * d), zX = std::vector<double>(P * d), zq = std::vector<double>(d),
              zb = std::vector<double>(d), zn = std::vector<double>(P), j = int64_t(0), cls = int64_t(0),
              t = Scratch(), one = OneContext(d, P, k)](int64_t i0, int64_t i1) mutable {
        const Draws in{O.data(), zX.data(), query ? zq.data() : nullptr, zb.data(), noisy ? zn.data() : nullptr,
                       sl.data_ptr<double>(), so.data_ptr<double>(), query ? nullptr : &j, d, P, k, noise};
        for (int64_t i = i0; i < i1; ++i) {
          draw_one(streams[i / B], uint32_t(start + i % B), sh, O.data(), zX.data(), zq.data(), zb.data(), zn.data(),
                   &j, &cls, v.data(), u.data(), t);
          transform_one<DT>(in, one.o, 0, one.sc, one.idx);
          store_one(one.o, dst, i, d, P, k);
          for (int64_t e = 0; e < d * d; ++e) dst.O[i * d * d + e] = T(O[e]);
        }
      };
    });
  });
  return out;
}

// The one-pass contexts of K streams of one kind in one call (keys: K x 3 int64, each row k0, k1,
// step): contexts start..start+B-1 of stream 0, then of stream 1, ... (K = 1: one stream's batch; the
// seeds of a pack: one batch, one parallel loop; each context the same numbers as in its own
// stream's call)
std::vector<at::Tensor> sampler_contexts_keys(const at::Tensor& keys_, int64_t kind, int64_t start, int64_t B,
                                              int64_t d, int64_t P, bool query, bool noisy, int64_t match,
                                              const at::Tensor& sl, const at::Tensor& so, double noise, int64_t k,
                                              bool f32) {
  const at::Tensor keys = keys_.to(at::kLong).contiguous();
  TORCH_CHECK(keys.dim() == 2 && keys.size(1) == 3, "depthscale sampler_contexts_keys: keys must be K x 3");
  const int64_t* kp = keys.data_ptr<int64_t>();
  std::vector<Stream> streams;
  for (int64_t r = 0; r < keys.size(0); ++r)
    streams.push_back(stream_of(kp[3 * r], kp[3 * r + 1], kind, kp[3 * r + 2], "sampler_contexts_keys"));
  return one_pass(streams, start, B, d, P, query, noisy, match, sl, so, noise, k, f32);
}

// Philox-4x32-10 of counters ctr (n x 4, int64 holding 32-bit words) under key (k0, k1), for tests
at::Tensor philox4x32_10(const at::Tensor& ctr_, int64_t k0, int64_t k1) {
  at::Tensor ctr = ctr_.to(at::kLong).contiguous();
  TORCH_CHECK(ctr.dim() == 2 && ctr.size(1) == 4, "depthscale philox4x32_10: counters must be n x 4");
  at::Tensor out = at::empty_like(ctr);
  const int64_t* cp = ctr.data_ptr<int64_t>();
  int64_t* op = out.data_ptr<int64_t>();
  for (int64_t r = 0; r < ctr.size(0); ++r) {
    uint32_t c[4];
    for (int l = 0; l < 4; ++l) c[l] = uint32_t(cp[4 * r + l]);
    philox(c, uint32_t(k0), uint32_t(k1));
    for (int l = 0; l < 4; ++l) op[4 * r + l] = int64_t(c[l]);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(depthscale_fused, m) {
  m.def("sampler_draws(int k0, int k1, int kind, int step, int start, int B, int d, int P, bool query, bool noisy, "
        "int match, int classes) -> Tensor[]",
        &sampler_draws);
  m.def("sampler_transform(Tensor O, Tensor zX, Tensor zq, Tensor zb, Tensor zn, Tensor j, Tensor sl, Tensor so, "
        "float noise, int k, bool f32) -> Tensor[]",
        &sampler_transform);
  m.def("sampler_contexts_keys(Tensor keys, int kind, int start, int B, int d, int P, bool query, bool noisy, "
        "int match, Tensor sl, Tensor so, float noise, int k, bool f32) -> Tensor[]",
        &sampler_contexts_keys);
  m.def("philox4x32_10(Tensor ctr, int k0, int k1) -> Tensor", &philox4x32_10);
}
