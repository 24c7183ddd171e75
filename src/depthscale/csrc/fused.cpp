// Fused CPU kernels of the ensemble pack's training step (depthscale.kernels, issue 15): the test
// row of every layer, the pre-norm scales, the Haar rotations of context sampling and the layers'
// score forms E_l (in that order).
//
// The test row of every layer, fused.
//
// For context b and layer t of model g = owner[t]:
//   dot_i = u_bt . x_bi,  s_i = rc_bgi dot_i,  p_i = softmax_i(s),  py_bt = sum_i p_i y_bi.
// The torch path (models._TestRowReadout) writes the B x T x P scores and probabilities to memory
// and reads them back in about a dozen passes; here each (b, t) row lives in registers and L1:
// the forward keeps only py and the log-normaliser lse, the backward recomputes the row from them.
// Contexts are split across torch's intra-op threads; every output row of context b is written by
// the thread that owns b, so there are no races and no atomics.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "parallel.h"
#include "vec.h"

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

using depthscale::splat;
using depthscale::v16;
using depthscale::v16i;
using depthscale::v8;
using depthscale::v8i;
using depthscale::vload;
using depthscale::vstore;

template <typename V>
using IntOf = std::conditional_t<sizeof(V) == sizeof(v8), v8i, v16i>;
template <typename V>
constexpr int kLanes = sizeof(V) / sizeof(float);

// exp(x) for x <= 0 (scores minus their max), written so that the compiler vectorises the loops
// that call it: x = n ln2 + r with |r| <= ln2 / 2 (n rounded by the 1.5 * 2^23 shift, whose low
// mantissa bits then hold n; Cody-Waite split of ln2), exp(r) by Cephes' expf polynomial (relative
// error ~1e-7), 2^n through the exponent bits. Below -87 the result is clamped to exp(-87) ~ 1.6e-38
// (a softmax weight that small is zero to float precision; torch gives a denormal or 0). NaN stays NaN.
// F = float or v8 (lane by lane: the same operations, so the same floats); I the matching int32 type
template <typename F, typename I>
inline F exp_nonpos_t(F x) {
  const F lo = splat<F>(-87.0f), shift = splat<F>(12582912.0f);
  x = x < lo ? lo : x;
  const F shifted = x * 1.44269504088896341f + shift;
  const F fx = shifted - shift;
  F r = x - fx * 0.693359375f;
  r = r + fx * 2.12194440e-4f;
  const F z = r * r;
  F q = splat<F>(1.9875691500e-4f);
  q = q * r + 1.3981999507e-3f;
  q = q * r + 8.3334519073e-3f;
  q = q * r + 4.1665795894e-2f;
  q = q * r + 1.6666665459e-1f;
  q = q * r + 5.0000001201e-1f;
  q = q * z + r + 1.0f;
  const I n = __builtin_bit_cast(I, shifted) - 0x4B400000;
  return q * __builtin_bit_cast(F, (n + 127) << 23);
}
inline float exp_nonpos(float x) { return exp_nonpos_t<float, int32_t>(x); }

// X (B x P x d) may be a slice of a larger batch (sampling's x holds the test token after the P
// context tokens): its rows must be contiguous, contexts may be any stride apart.
bool rows_contiguous(const at::Tensor& X) {
  return X.dim() == 3 && X.stride(2) == 1 && (X.size(1) <= 1 || X.stride(1) == X.size(2)) &&
         (X.size(0) <= 1 || X.stride(0) >= X.size(1) * X.size(2));
}

void check_inputs(const at::Tensor& u, const at::Tensor& X, const at::Tensor& rc, const at::Tensor& y,
                  const at::Tensor& owner) {
  for (const at::Tensor* t : {&u, &rc, &y}) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous(),
                "depthscale fused test row: float32 contiguous CPU tensors only");
  }
  TORCH_CHECK(X.device().is_cpu() && X.scalar_type() == at::kFloat && rows_contiguous(X),
              "depthscale fused test row: X must be a float32 CPU B x P x d tensor with contiguous rows");
  TORCH_CHECK(owner.device().is_cpu() && owner.scalar_type() == at::kLong && owner.is_contiguous(),
              "depthscale fused test row: owner must be a contiguous int64 CPU tensor");
  TORCH_CHECK(u.dim() == 3 && X.dim() == 3 && rc.dim() == 3 && y.dim() == 2 && owner.dim() == 1,
              "depthscale fused test row: shapes u BxTxd, X BxPxd, rc BxGxP, y BxP, owner T");
  const int64_t B = u.size(0), T = u.size(1), D = u.size(2), P = X.size(1), G = rc.size(1);
  TORCH_CHECK(X.size(0) == B && X.size(2) == D && rc.size(0) == B && rc.size(2) == P && y.size(0) == B &&
                  y.size(1) == P && owner.size(0) == T,
              "depthscale fused test row: inconsistent shapes");
  if (T > 0) {
    TORCH_CHECK(owner.min().item<int64_t>() >= 0 && owner.max().item<int64_t>() < G,
                "depthscale fused test row: owner out of range");
  }
}

// out = a^T A for A of K rows of n (row-major): n-wide vectors, one broadcast of a_k per row.
__attribute__((always_inline)) inline void vecmat(const float* __restrict a, const float* __restrict A, int64_t K,
                                                  int64_t n, float* __restrict out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[0] * A[i];
  for (int64_t k = 1; k < K; ++k) {
    const float ak = a[k];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] += ak * A[k * n + i];
  }
}

// The checked inputs of the test row kernels: sizes and data pointers.
struct RowInputs {
  int64_t B, T, D, P, G, xs;  // xs: X's stride between contexts
  const float *U, *X, *R, *Y;
  const int64_t* own;
  RowInputs(const at::Tensor& u, const at::Tensor& X_, const at::Tensor& rc, const at::Tensor& y,
            const at::Tensor& owner) {
    check_inputs(u, X_, rc, y, owner);
    B = u.size(0), T = u.size(1), D = u.size(2), P = X_.size(1), G = rc.size(1), xs = X_.stride(0);
    U = u.data_ptr<float>(), X = X_.data_ptr<float>(), R = rc.data_ptr<float>(), Y = y.data_ptr<float>();
    own = owner.data_ptr<int64_t>();
  }
};

// One (context, layer) row, for the shapes VRow (below) does not take: DT, PT > 0 fix d and P at
// compile time (d = 16, P = 128); 0 takes them from D, P at run time, with the caller's scratch of
// P floats.
template <int DT, int PT>
struct Row {
  static constexpr int kLocal = PT > 0 ? PT : 1;

  // dot_i = u_t . x_i from X transposed (XT, d x P): P-wide vectors, no horizontal sums.
  static inline void dots(const float* __restrict ut, const float* __restrict XT, int64_t D_, int64_t P_,
                          float* __restrict dot) {
    vecmat(ut, XT, DT > 0 ? DT : D_, PT > 0 ? PT : P_, dot);
  }

  static inline void forward(const float* __restrict ut, const float* __restrict XT, const float* __restrict rg,
                             const float* __restrict yb, int64_t D_, int64_t P_, float* scratch, float* py,
                             float* lse) {
    const int64_t P = PT > 0 ? PT : P_;
    alignas(64) float local[kLocal];
    float* __restrict s = PT > 0 ? local : scratch;
    dots(ut, XT, D_, P, s);
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < P; ++i) {
      s[i] *= rg[i];
      m = s[i] > m ? s[i] : m;
    }
    float Z = 0.0f, num = 0.0f;
#pragma omp simd reduction(+ : Z, num)
    for (int64_t i = 0; i < P; ++i) {
      const float e = exp_nonpos(s[i] - m);
      Z += e;
      num += e * yb[i];
    }
    *py = num / Z;
    *lse = m + std::log(Z);
  }

  // p_i = exp(s_i - lse), ds_i = g p_i (y_i - py), drc_i += ds_i dot_i, w_i = ds_i rc_i,
  // du = sum_i w_i x_i, dX_i += w_i u_t (dXb may be null), dy_i += g p_i (dyb may be null).
  static inline void backward(const float* __restrict ut, const float* __restrict Xb, const float* __restrict XT,
                              const float* __restrict rg, const float* __restrict yb, float g, float pyt, float l,
                              int64_t D_, int64_t P_, float* scratch, float* __restrict drg, float* __restrict dut,
                              float* __restrict dXb, float* __restrict dyb) {
    const int64_t D = DT > 0 ? DT : D_, P = PT > 0 ? PT : P_;
    alignas(64) float local[2 * kLocal];
    float* __restrict dot = PT > 0 ? local : scratch;
    float* __restrict w = PT > 0 ? local + kLocal : scratch + P;
    dots(ut, XT, D, P, dot);
#pragma omp simd
    for (int64_t i = 0; i < P; ++i) {
      const float p = exp_nonpos(rg[i] * dot[i] - l);
      const float ds = g * p * (yb[i] - pyt);
      drg[i] += ds * dot[i];
      w[i] = ds * rg[i];
      dot[i] = p;  // (the dot is spent: keep p for dy)
    }
    if (dyb) {
#pragma omp simd
      for (int64_t i = 0; i < P; ++i) dyb[i] += g * dot[i];
    }
    // du = sum_i w_i x_i over four interleaved accumulators (a chain of P dependent FMAs otherwise)
    constexpr int kAcc = 4;
    alignas(64) float acc[kAcc][DT > 0 ? DT : 1];
    if constexpr (DT > 0) {
      for (int j = 0; j < kAcc; ++j)
#pragma omp simd
        for (int64_t k = 0; k < D; ++k) acc[j][k] = 0.0f;
      int64_t i = 0;
      for (; i + kAcc <= P; i += kAcc)
        for (int j = 0; j < kAcc; ++j) {
          const float wi = w[i + j];
          const float* __restrict xi = Xb + (i + j) * D;
#pragma omp simd
          for (int64_t k = 0; k < D; ++k) acc[j][k] += wi * xi[k];
        }
      for (; i < P; ++i)
#pragma omp simd
        for (int64_t k = 0; k < D; ++k) acc[0][k] += w[i] * Xb[i * D + k];
#pragma omp simd
      for (int64_t k = 0; k < D; ++k) dut[k] = (acc[0][k] + acc[1][k]) + (acc[2][k] + acc[3][k]);
    } else {
      for (int64_t k = 0; k < D; ++k) {
        float a = 0.0f;
#pragma omp simd reduction(+ : a)
        for (int64_t i = 0; i < P; ++i) a += w[i] * XT[k * P + i];
        dut[k] = a;
      }
    }
    if (dXb) {
      for (int64_t i = 0; i < P; ++i) {
        const float wi = w[i];
        float* __restrict dxi = dXb + i * D;
#pragma omp simd
        for (int64_t k = 0; k < D; ++k) dxi[k] += wi * ut[k];
      }
    }
  }
};

// The same row with the P scores held in NV = P / 8 vector registers (GCC/Clang vector extensions:
// 8 floats, one AVX register with -march=native, two SSE registers or scalar code elsewhere). The
// loop version above leaves the compiler to keep s in registers; it stores and reloads s once per k
// (16 times a row), which made the row about twice its arithmetic. Used where P = 8 NV, NV <= 8.
template <typename V = v8>
inline V vbroadcast(float a) { return splat<V>(a); }
// horizontal sum and max by halving (three shuffles: short dependency chains; 16 lanes: one more)
template <typename V>
inline V vmax(V a, V b) { return a > b ? a : b; }
inline float hsum(v8 v) {
  v = v + __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
  v = v + __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5);
  v = v + __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
  return v[0];
}
inline float hmax(v8 v) {
  v = vmax(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3));
  v = vmax(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5));
  v = vmax(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6));
  return v[0];
}
inline v8 lo_half(v16 v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
inline v8 hi_half(v16 v) { return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15); }
inline float hsum(v16 v) { return hsum(lo_half(v) + hi_half(v)); }
inline float hmax(v16 v) { return hmax(vmax(lo_half(v), hi_half(v))); }

template <typename V>
inline V vexp_nonpos(V x) { return exp_nonpos_t<V, IntOf<V>>(x); }

// NR rows at once (independent instruction streams: one row's max-exp-sum chain runs while the
// other's dots issue); the rows share X but may belong to different models (rg, drg per row).
// V: the vector type holding W = 8 (v8) or 16 (v16) consecutive i of a row; P = W NV.
template <int DT, int NV, typename V>
struct VRow {
  using Vec = V;
  static constexpr int W = kLanes<V>;
  static constexpr int P = W * NV;

  // s[r][j] = u_r . x_i for the W i of vector j, from X transposed (XT, DT x P)
  template <int NR>
  static inline void dots(const float* const* u, const float* __restrict XT, V (&s)[NR][NV]) {
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const V u0 = vbroadcast<V>(u[r][0]);
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) s[r][j] = u0 * vload<V>(XT + W * j);
    }
#pragma GCC unroll 32
    for (int k = 1; k < DT; ++k) {
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) {
        const V x = vload<V>(XT + k * P + W * j);
#pragma GCC unroll 4
        for (int r = 0; r < NR; ++r) s[r][j] += vbroadcast<V>(u[r][k]) * x;
      }
    }
  }

  template <int NR>
  static inline void forward(const float* const* u, const float* __restrict XT, const float* const* rg,
                             const float* __restrict yb, float* py, float* lse) {
    V s[NR][NV];
    dots<NR>(u, XT, s);
    V m[NR], Z[NR], num[NR];
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) s[r][j] *= vload<V>(rg[r] + W * j);
      V mv = s[r][0];
#pragma GCC unroll 16
      for (int j = 1; j < NV; ++j) mv = vmax(mv, s[r][j]);
      m[r] = vbroadcast<V>(hmax(mv));
      Z[r] = vbroadcast<V>(0.0f), num[r] = vbroadcast<V>(0.0f);
    }
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
      const V y = vload<V>(yb + W * j);
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        const V e = vexp_nonpos(s[r][j] - m[r]);
        Z[r] += e;
        num[r] += e * y;
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const float Zs = hsum(Z[r]);
      py[r] = hsum(num[r]) / Zs;
      lse[r] = m[r][0] + std::log(Zs);
    }
  }

  // Row::backward's maths for NR rows; du = sum_i w_i x_i over x_i's DT / 8 vectors (DT a multiple
  // of 8, the rows sharing each load of x_i) or, for other DT, through XT.
  template <int NR>
  static inline void backward(const float* const* u, const float* __restrict Xb, const float* __restrict XT,
                              const float* const* rg, const float* __restrict yb, const float* g, const float* pyt,
                              const float* l, float* const* drg, float* const* du, float* __restrict dXb,
                              float* __restrict dyb) {
    V s[NR][NV];
    dots<NR>(u, XT, s);
    alignas(32) float w[NR][P];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
      const V y = vload<V>(yb + W * j);
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        const V rv = vload<V>(rg[r] + W * j);
        const V p = vexp_nonpos(rv * s[r][j] - l[r]);
        const V ds = g[r] * p * (y - pyt[r]);
        vstore(drg[r] + W * j, vload<V>(drg[r] + W * j) + ds * s[r][j]);
        vstore(w[r] + W * j, ds * rv);
        if (dyb) vstore(dyb + W * j, vload<V>(dyb + W * j) + g[r] * p);
      }
    }
    if constexpr (DT % 8 == 0) {
      // x_i's d entries in vectors DV: 16 lanes where the row's vector has them and 16 divides d
      using DV = std::conditional_t<DT % 16 == 0 && sizeof(V) == sizeof(v16), v16, v8>;
      constexpr int DW = kLanes<DV>, KV = DT / DW, kAcc = 2;
      DV acc[kAcc][NR][KV];
#pragma GCC unroll 4
      for (int a = 0; a < kAcc; ++a)
#pragma GCC unroll 4
        for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
          for (int k = 0; k < KV; ++k) acc[a][r][k] = vbroadcast<DV>(0.0f);
      static_assert(P % kAcc == 0, "P must be even");
#pragma GCC unroll 2
      for (int i = 0; i < P; i += kAcc) {
#pragma GCC unroll 4
        for (int a = 0; a < kAcc; ++a) {
#pragma GCC unroll 8
          for (int k = 0; k < KV; ++k) {
            const DV x = vload<DV>(Xb + (i + a) * DT + DW * k);
#pragma GCC unroll 4
            for (int r = 0; r < NR; ++r) acc[a][r][k] += vbroadcast<DV>(w[r][i + a]) * x;
          }
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r)
#pragma GCC unroll 8
        for (int k = 0; k < KV; ++k) vstore(du[r] + DW * k, acc[0][r][k] + acc[1][r][k]);
    } else {
      for (int r = 0; r < NR; ++r)
        for (int k = 0; k < DT; ++k) {
          V a = vbroadcast<V>(0.0f);
#pragma GCC unroll 16
          for (int j = 0; j < NV; ++j) a += vload<V>(w[r] + W * j) * vload<V>(XT + k * P + W * j);
          du[r][k] = hsum(a);
        }
    }
    if (dXb) {
      for (int r = 0; r < NR; ++r)
        for (int i = 0; i < P; ++i) {
          const float wi = w[r][i];
          float* __restrict dxi = dXb + i * DT;
#pragma omp simd
          for (int k = 0; k < DT; ++k) dxi[k] += wi * u[r][k];
        }
    }
  }
};

inline void transpose(const float* __restrict Xb, int64_t P, int64_t D, float* __restrict XT) {
  for (int64_t i = 0; i < P; ++i)
    for (int64_t k = 0; k < D; ++k) XT[k * P + i] = Xb[i * D + k];
}

// The shapes the register version (VRow) takes: P held in at most 8 vectors of 8.
template <int DT, int PT>
constexpr bool kVector = DT > 0 && PT > 0 && PT % 8 == 0 && PT / 8 <= 8;
// The row's vector: 16 lanes where the CPU has AVX-512 and 16 divides P (fewer instructions and
// loads for the same work; Zen 4 runs them as two 256-bit halves), else 8. lanes(8) makes every row
// take 8 (the tests check both forms on a machine with AVX-512). The scales' forward follows the
// same switch (16 lanes, four models per block: the same floats); their backward stays at 8.
#if defined(__AVX512F__)
constexpr bool kWide = true;
#else
constexpr bool kWide = false;
#endif
int g_lanes = kWide ? 16 : 8;

int64_t lanes(int64_t n) {
  const int64_t before = g_lanes;
  TORCH_CHECK(n == 0 || n == 8 || n == 16, "depthscale fused: lanes must be 0 (ask), 8 or 16, got ", n);
  if (n) g_lanes = kWide ? static_cast<int>(n) : 8;
  return before;
}

// Exponentials per second of the test row's own exp on one core, in the row's vector width
// (`lanes`): an L1-resident array of non-positive arguments, `reps` passes, best pass of 20 rounds
// (bench.py's roofline counts the softmax's exponentials at this rate).
template <typename V>
double exp_rate_of(int64_t reps) {
  constexpr int W = kLanes<V>, n = 2048;  // 8 KB: L1
  alignas(64) static float x[n], y[n];
  for (int i = 0; i < n; ++i) x[i] = -10.0f * i / n;
  double best = 1e30;
  float sink = 0;
  for (int round = 0; round < 20; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t it = 0; it < reps; ++it) {
      for (int i = 0; i < n; i += W) {
        V v;
        std::memcpy(&v, x + i, sizeof v);
        const V e = vexp_nonpos(v);
        std::memcpy(y + i, &e, sizeof e);
      }
      sink += y[it % n];
      x[0] = -sink * 1e-30f;  // a dependency the compiler cannot drop
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, dt);
  }
  return static_cast<double>(reps) * n / best;
}

double exp_rate(int64_t reps) {
  TORCH_CHECK(reps >= 1, "depthscale fused: exp_rate needs reps >= 1, got ", reps);
  if constexpr (kWide) {
    if (g_lanes == 16) return exp_rate_of<v16>(reps);
  }
  return exp_rate_of<v8>(reps);
}

// f.template operator()<VRow<...>>() with the widest vector that P and the CPU allow
template <int DT, int PT, typename F>
inline void with_row(F&& f) {
  if constexpr (kWide && PT % 16 == 0) {
    if (g_lanes == 16) return f.template operator()<VRow<DT, PT / 16, v16>>();
  }
  f.template operator()<VRow<DT, PT / 8, v8>>();
}

// Calls f.template operator()<DT, PT>() with the compile-time shape that matches (d, P), or
// <0, 0>: the geometries of the presets (d = 16, P = 64; smoke d = 8, P = 16) run specialised.
template <typename F>
inline void dispatch(int64_t D, int64_t P, F&& f) {
  if (D == 16 && P == 64) {
    f.template operator()<16, 64>();
  } else if (D == 8 && P == 16) {
    f.template operator()<8, 16>();
  } else if (D == 16 && P == 128) {
    f.template operator()<16, 128>();
  } else {
    f.template operator()<0, 0>();
  }
}

constexpr int64_t kRowChunk = 16;  // contexts a thread takes at a time in the test row

// f.template operator()<2>(t) for t = 0, 2, 4, ... while a pair of rows fits, then
// f.template operator()<1>(t) for the row left (VRow's two-row and one-row forms)
template <typename F>
inline void in_pairs(int64_t T, F&& f) {
  int64_t t = 0;
  for (; t + 2 <= T; t += 2) f.template operator()<2>(t);
  for (; t < T; ++t) f.template operator()<1>(t);
}

std::tuple<at::Tensor, at::Tensor> test_row_forward(const at::Tensor& u, const at::Tensor& X,
                                                    const at::Tensor& rc, const at::Tensor& y,
                                                    const at::Tensor& owner) {
  const RowInputs in(u, X, rc, y, owner);
  const int64_t B = in.B, T = in.T, D = in.D, P = in.P, G = in.G;
  const float *U = in.U, *Xp = in.X, *R = in.R, *Y = in.Y;
  const int64_t* own = in.own;
  at::Tensor py = at::empty({B, T}, u.options());
  at::Tensor lse = at::empty({B, T}, u.options());
  float* PY = py.data_ptr<float>();
  float* LSE = lse.data_ptr<float>();
  dispatch(D, P, [&]<int DT, int PT>() {
    depthscale::balanced_for(B, kRowChunk, [&](int64_t b0, int64_t b1) {
      std::vector<float> XT(D * P), scratch(P);
      for (int64_t b = b0; b < b1; ++b) {
        transpose(Xp + b * in.xs, P, D, XT.data());
        const float* yb = Y + b * P;
        const float* rb = R + b * G * P;
        if constexpr (kVector<DT, PT>) {
          with_row<DT, PT>([&]<typename VR>() {
            in_pairs(T, [&]<int NR>(int64_t t) {
              const float* u[NR];
              const float* rg[NR];
              for (int r = 0; r < NR; ++r) u[r] = U + (b * T + t + r) * D, rg[r] = rb + own[t + r] * P;
              VR::template forward<NR>(u, XT.data(), rg, yb, PY + b * T + t, LSE + b * T + t);
            });
          });
        } else {
          for (int64_t t = 0; t < T; ++t)
            Row<DT, PT>::forward(U + (b * T + t) * D, XT.data(), rb + own[t] * P, yb, D, P, scratch.data(),
                                 PY + b * T + t, LSE + b * T + t);
        }
      }
    });
  });
  return {py, lse};
}

// Gradients of py (upstream dpy) with respect to u, rc and, when asked, X and y (Row::backward).
// Outputs not asked for are returned as empty tensors.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> test_row_backward(
    const at::Tensor& dpy, const at::Tensor& u, const at::Tensor& X, const at::Tensor& rc, const at::Tensor& y,
    const at::Tensor& owner, const at::Tensor& py, const at::Tensor& lse, bool need_dX, bool need_dy) {
  const RowInputs in(u, X, rc, y, owner);
  const int64_t B = in.B, T = in.T, D = in.D, P = in.P, G = in.G;
  const float *U = in.U, *Xp = in.X, *R = in.R, *Y = in.Y;
  const int64_t* own = in.own;
  for (const at::Tensor* t : {&dpy, &py, &lse}) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous() && t->dim() == 2 &&
                    t->size(0) == B && t->size(1) == T,
                "depthscale fused test row: dpy, py and lse must be contiguous float32 B x T");
  }
  at::Tensor du = at::empty({B, T, D}, u.options());
  // the accumulated gradients, zeroed context by context in the loop below by the thread that sums
  // into them (a zeros() here was a serial pass over fresh pages before the parallel one)
  at::Tensor drc = at::empty({B, G, P}, u.options());
  at::Tensor dX = need_dX ? at::empty({B, P, D}, u.options()) : at::empty({0}, u.options());
  at::Tensor dy = need_dy ? at::empty({B, P}, u.options()) : at::empty({0}, u.options());
  const float* DPY = dpy.data_ptr<float>();
  const float* PY = py.data_ptr<float>();
  const float* LSE = lse.data_ptr<float>();
  float* DU = du.data_ptr<float>();
  float* DRC = drc.data_ptr<float>();
  float* DX = need_dX ? dX.data_ptr<float>() : nullptr;
  float* DY = need_dy ? dy.data_ptr<float>() : nullptr;
  dispatch(D, P, [&]<int DT, int PT>() {
    depthscale::balanced_for(B, kRowChunk, [&](int64_t b0, int64_t b1) {
      std::vector<float> XT(D * P), scratch(2 * P);
      for (int64_t b = b0; b < b1; ++b) {
        const float* Xb = Xp + b * in.xs;
        transpose(Xb, P, D, XT.data());
        const float* yb = Y + b * P;
        const float* rb = R + b * G * P;
        float* drb = DRC + b * G * P;
        float* dXb = DX ? DX + b * P * D : nullptr;
        float* dyb = DY ? DY + b * P : nullptr;
        std::fill(drb, drb + G * P, 0.0f);
        if (dXb) std::fill(dXb, dXb + P * D, 0.0f);
        if (dyb) std::fill(dyb, dyb + P, 0.0f);
        if constexpr (kVector<DT, PT>) {
          with_row<DT, PT>([&]<typename VR>() {
            in_pairs(T, [&]<int NR>(int64_t t) {
              const int64_t bt = b * T + t;
              const float* u[NR];
              const float* rg[NR];
              float* drg[NR];
              float* du[NR];
              for (int r = 0; r < NR; ++r) {
                u[r] = U + (bt + r) * D, rg[r] = rb + own[t + r] * P, drg[r] = drb + own[t + r] * P;
                du[r] = DU + (bt + r) * D;
              }
              VR::template backward<NR>(u, Xb, XT.data(), rg, yb, DPY + bt, PY + bt, LSE + bt, drg, du, dXb, dyb);
            });
          });
        } else {
          for (int64_t t = 0; t < T; ++t) {
            const int64_t bt = b * T + t;
            Row<DT, PT>::backward(U + bt * D, Xb, XT.data(), rb + own[t] * P, yb, DPY[bt], PY[bt], LSE[bt], D, P,
                                  scratch.data(), drb + own[t] * P, DU + bt * D, dXb, dyb);
          }
        }
      }
    });
  });
  return {du, dX, drc, dy};
}

// The evaluation's layer sums of the attention rows, without the B x T x P rows in memory (issue 50):
//   out[b, c, owner[t], i] = sum_t coef[c, t] p_bti,  p_bti = exp(rc_{b, owner(t), i} dot_bti - lse_bt),
// lse from `test_row_forward` (the rows recomputed as its backward does). With coef = 1/L of each
// layer's model the layer mean of the rows (the selection loss, the top-1 mass); with g_t / L the
// input weights w = d y_hat / d y of the softmax ensembles. Each context's outputs are written by one
// thread, in the order of t: the same bits at any thread count.
template <typename VR>
inline void weight_row(const float* ut, const float* __restrict XT, const float* __restrict rg, float l,
                       const float* cf, int64_t C, int64_t cstride, float* out, int64_t ostride) {
  using V = typename VR::Vec;
  constexpr int W = VR::W, NV = VR::P / VR::W;
  V s[1][NV];
  const float* u[1] = {ut};
  VR::template dots<1>(u, XT, s);
  const V lv = vbroadcast<V>(l);
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) s[0][j] = vexp_nonpos(vload<V>(rg + W * j) * s[0][j] - lv);
  for (int64_t c = 0; c < C; ++c) {
    const V a = vbroadcast<V>(cf[c * cstride]);
    float* o = out + c * ostride;
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) vstore(o + W * j, vload<V>(o + W * j) + a * s[0][j]);
  }
}

at::Tensor test_row_weights(const at::Tensor& u, const at::Tensor& X, const at::Tensor& rc, const at::Tensor& y,
                            const at::Tensor& owner, const at::Tensor& lse, const at::Tensor& coef) {
  const RowInputs in(u, X, rc, y, owner);
  const int64_t B = in.B, T = in.T, D = in.D, P = in.P, G = in.G;
  TORCH_CHECK(lse.device().is_cpu() && lse.scalar_type() == at::kFloat && lse.is_contiguous() && lse.dim() == 2 &&
                  lse.size(0) == B && lse.size(1) == T,
              "depthscale fused test row weights: lse must be a contiguous float32 B x T tensor");
  TORCH_CHECK(coef.device().is_cpu() && coef.scalar_type() == at::kFloat && coef.is_contiguous() &&
                  coef.dim() == 2 && coef.size(1) == T,
              "depthscale fused test row weights: coef must be a contiguous float32 C x T tensor");
  const int64_t C = coef.size(0);
  const float *U = in.U, *Xp = in.X, *R = in.R, *LSE = lse.data_ptr<float>(), *CF = coef.data_ptr<float>();
  const int64_t* own = in.own;
  at::Tensor out = at::empty({B, C, G, P}, u.options());
  float* O = out.data_ptr<float>();
  dispatch(D, P, [&]<int DT, int PT>() {
    depthscale::balanced_for(B, kRowChunk, [&](int64_t b0, int64_t b1) {
      std::vector<float> XT(D * P), scratch(P);
      for (int64_t b = b0; b < b1; ++b) {
        transpose(Xp + b * in.xs, P, D, XT.data());
        const float* rb = R + b * G * P;
        float* ob = O + b * C * G * P;
        std::fill(ob, ob + C * G * P, 0.0f);
        for (int64_t t = 0; t < T; ++t) {
          const float* ut = U + (b * T + t) * D;
          const float* rg = rb + own[t] * P;
          const float l = LSE[b * T + t];
          float* ot = ob + own[t] * P;
          if constexpr (kVector<DT, PT>) {
            with_row<DT, PT>([&]<typename VR>() { weight_row<VR>(ut, XT.data(), rg, l, CF + t, C, T, ot, G * P); });
          } else {
            float* __restrict p = scratch.data();
            Row<DT, PT>::dots(ut, XT.data(), D, P, p);
#pragma omp simd
            for (int64_t i = 0; i < P; ++i) p[i] = exp_nonpos(rg[i] * p[i] - l);
            for (int64_t c = 0; c < C; ++c) {
              const float a = CF[c * T + t];
              float* __restrict o = ot + c * G * P;
#pragma omp simd
              for (int64_t i = 0; i < P; ++i) o[i] += a * p[i];
            }
          }
        }
      }
    });
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Pre-norm scales of G models at once: r_rg = 1 / sqrt(x_r^T M_g x_r / N + eps) with
// M_g = W_x^g^T W_x^g (d x d), i.e. 1/rms(W_x^g x_r) without the R x G x N projections in memory.
// Backward: d M_g = sum_r c_rg x_r x_r^T with c_rg = -dr_rg r_rg^3 / (2N) (X is data: no dX).
// The test row reads the product of the context and test-token scales, rcq_bgi = rc_bgi rq_bg, in
// its B x G x P layout: `test_scales_forward` writes it there (no transposing copy, no product
// pass), and `test_scales_backward` takes drcq in that layout.

constexpr int kRowBlock = 16;  // rows per vector in the specialised scale kernels

// Where r_rg is stored: row-major R x G (P = 0) or, for the R = B P rows of B contexts, B x G x P.
struct ScaleLayout {
  int64_t G, P;
  inline int64_t at(int64_t r, int64_t g) const { return P > 0 ? ((r / P) * G + g) * P + r % P : r * G + g; }
};

// M'_g, the upper triangle of M_g folded: M'_kl = M_kl + M_lk (k < l), M'_ll = M_ll, so that
// x^T M_g x = sum_{k <= l} M'_kl x_k x_l (136 products at d = 16, not 256). G x d x d, lower part 0.
std::vector<float> fold_upper(const float* M, int64_t G, int64_t D) {
  std::vector<float> Mu(G * D * D, 0.0f);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t k = 0; k < D; ++k)
      for (int64_t l = k; l < D; ++l)
        Mu[(g * D + k) * D + l] = l == k ? M[(g * D + k) * D + l] : M[(g * D + k) * D + l] + M[(g * D + l) * D + k];
  return Mu;
}

template <typename V>
constexpr int kParts = kRowBlock / kLanes<V>;  // vectors per 16 rows (or per d = 16 entries)

// q[m][.] = x^T M_{g+m} x for the 16 rows of xt (one lane per row: kParts<V> vectors per k), NG
// models at once (they share each load of x_k): q = sum_l x_l (sum_{k <= l} M'_kl x_k). Lane by
// lane the same operations whatever V and NG.
template <int DT, int NG, typename V>
inline void quad_block(const V (&xt)[DT][kParts<V>], const float* __restrict Mu, V (&q)[NG][kParts<V>]) {
  constexpr int H = kParts<V>;
#pragma GCC unroll 4
  for (int m = 0; m < NG; ++m)
#pragma GCC unroll 2
    for (int h = 0; h < H; ++h) q[m][h] = vbroadcast<V>(0.0f);
#pragma GCC unroll 16
  for (int l = 0; l < DT; ++l) {
    V a[NG][H];
#pragma GCC unroll 4
    for (int m = 0; m < NG; ++m)
#pragma GCC unroll 2
      for (int h = 0; h < H; ++h) a[m][h] = vbroadcast<V>(0.0f);
#pragma GCC unroll 16
    for (int k = 0; k <= l; ++k) {
#pragma GCC unroll 4
      for (int m = 0; m < NG; ++m) {
        const V c = vbroadcast<V>(Mu[(m * DT + k) * DT + l]);
#pragma GCC unroll 2
        for (int h = 0; h < H; ++h) a[m][h] += c * xt[k][h];
      }
    }
#pragma GCC unroll 4
    for (int m = 0; m < NG; ++m)
#pragma GCC unroll 2
      for (int h = 0; h < H; ++h) q[m][h] += a[m][h] * xt[l][h];
  }
}

// rms_rows' 16-row blocks from r while they fit before r1, NGMAX models at a time (then fewer);
// returns the first row not done
template <int DT, typename V, int NGMAX>
int64_t rms_blocks(const float* __restrict X, int64_t xs, const float* __restrict Mu, int64_t r, int64_t r1,
                   const ScaleLayout& lay, float invN, float eps, float* __restrict out) {
  constexpr int W = kLanes<V>, H = kParts<V>;
  const int64_t G = lay.G;
  alignas(64) V xt[DT][H];
  alignas(64) float o[kRowBlock];
  auto put = [&](const V (&q)[H], int64_t g) {
#pragma omp simd
    for (int j = 0; j < kRowBlock; ++j) o[j] = 1.0f / std::sqrt(q[j / W][j % W] * invN + eps);
    if (lay.P > 0 && r % lay.P + kRowBlock <= lay.P) {  // the 16 rows of one context: one run
      float* __restrict dst = out + lay.at(r, g);
      for (int j = 0; j < kRowBlock; ++j) dst[j] = o[j];
    } else if (lay.P == 0) {
      for (int j = 0; j < kRowBlock; ++j) out[(r + j) * G + g] = o[j];
    } else {
      for (int j = 0; j < kRowBlock; ++j) out[lay.at(r + j, g)] = o[j];
    }
  };
  auto models = [&]<int NG>(int64_t g) {
    V q[NG][H];
    quad_block<DT, NG, V>(xt, Mu + g * DT * DT, q);
    for (int m = 0; m < NG; ++m) put(q[m], g + m);
  };
  for (; r + kRowBlock <= r1; r += kRowBlock) {
    for (int j = 0; j < kRowBlock; ++j)
      for (int k = 0; k < DT; ++k) xt[k][j / W][j % W] = X[(r + j) * xs + k];
    int64_t g = 0;
    if constexpr (NGMAX >= 4)
      for (; g + 4 <= G; g += 4) models.template operator()<4>(g);
    for (; g + 2 <= G; g += 2) models.template operator()<2>(g);
    if (g < G) models.template operator()<1>(g);
  }
  return r;
}

// rows r0..r1 of X, row r at X + r * xs; Mu = fold_upper(M) (used where d is specialised)
template <int DT>
void rms_rows(const float* __restrict X, int64_t xs, const float* __restrict M, const float* __restrict Mu,
              int64_t r0, int64_t r1, int64_t D_, const ScaleLayout& lay, float invN, float eps,
              float* __restrict out) {
  const int64_t D = DT > 0 ? DT : D_, G = lay.G;
  int64_t r = r0;
  if constexpr (DT > 0) {  // 16 rows at a time, one row per lane
    static_assert(kRowBlock == 16, "quad_block takes 16 rows");
    // 16 lanes: four models per block (8 lanes: two; four spill there, 2.4 -> 3.6 ms). The backward
    // stays at 8 lanes: 16 measured slower there (2.4 -> 2.8-3.3 ms)
    r = kWide && g_lanes == 16 ? rms_blocks<DT, v16, 4>(X, xs, Mu, r, r1, lay, invN, eps, out)
                               : rms_blocks<DT, v8, 2>(X, xs, Mu, r, r1, lay, invN, eps, out);
  }
  std::vector<float> v(D);  // the rows left (and every row where d is not specialised)
  for (; r < r1; ++r) {
    const float* __restrict x = X + r * xs;
    for (int64_t g = 0; g < G; ++g) {
      const float* __restrict Mg = M + g * D * D;
      vecmat(x, Mg, D, D, v.data());
      float q = 0.0f;
#pragma omp simd reduction(+ : q)
      for (int64_t l = 0; l < D; ++l) q += v[l] * x[l];
      out[lay.at(r, g)] = 1.0f / std::sqrt(q * invN + eps);
    }
  }
}

// d M_g += sum_r c_rg x_r x_r^T (c row-major R x G), four rows per pass over d M_g's rows (fewer
// loads and stores of d M).
template <int DT>
void rms_rows_backward(const float* __restrict X, int64_t xs, const float* __restrict c, int64_t r0, int64_t r1,
                       int64_t D_, int64_t G, float* __restrict dM) {
  const int64_t D = DT > 0 ? DT : D_;
  int64_t r = r0;
  if constexpr (DT == 16) {
    // eight rows at a time in registers; d M_g is symmetric: rows k < 8 get both halves, rows
    // k >= 8 only their right half, and the caller mirrors the lower-left block from the
    // upper-right when every row is in (mirror_upper_16; 24 of the 32 vector rows)
    for (; r + 8 <= r1; r += 8) {
      v8 xv[8][2];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) xv[i][0] = vload(X + (r + i) * xs), xv[i][1] = vload(X + (r + i) * xs + 8);
      alignas(32) float cx[8][16];  // c_i x_i, read back one entry at a time (a broadcast load)
      for (int64_t g = 0; g < G; ++g) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          const v8 ci = vbroadcast(c[(r + i) * G + g]);
          vstore(cx[i], ci * xv[i][0]);
          vstore(cx[i] + 8, ci * xv[i][1]);
        }
        float* __restrict dMg = dM + g * 256;
#pragma GCC unroll 16
        for (int k = 0; k < 16; ++k) {
          v8 a[8];
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i) a[i] = vbroadcast(cx[i][k]);
#pragma GCC unroll 2
          for (int h = k < 8 ? 0 : 1; h < 2; ++h) {
            v8 acc = (a[0] * xv[0][h] + a[1] * xv[1][h]) + (a[2] * xv[2][h] + a[3] * xv[3][h]);
            acc += (a[4] * xv[4][h] + a[5] * xv[5][h]) + (a[6] * xv[6][h] + a[7] * xv[7][h]);
            vstore(dMg + k * 16 + 8 * h, vload(dMg + k * 16 + 8 * h) + acc);
          }
        }
      }
    }
  }
  for (; r + 4 <= r1; r += 4) {
    const float* __restrict x0 = X + r * xs;
    const float* __restrict x1 = x0 + xs;
    const float* __restrict x2 = x1 + xs;
    const float* __restrict x3 = x2 + xs;
    for (int64_t g = 0; g < G; ++g) {
      const float c0 = c[r * G + g], c1 = c[(r + 1) * G + g], c2 = c[(r + 2) * G + g], c3 = c[(r + 3) * G + g];
      float* __restrict dMg = dM + g * D * D;
      for (int64_t k = 0; k < D; ++k) {
        const float a0 = c0 * x0[k], a1 = c1 * x1[k], a2 = c2 * x2[k], a3 = c3 * x3[k];
#pragma omp simd
        for (int64_t l = 0; l < D; ++l) dMg[k * D + l] += (a0 * x0[l] + a1 * x1[l]) + (a2 * x2[l] + a3 * x3[l]);
      }
    }
  }
  for (; r < r1; ++r) {
    const float* __restrict x = X + r * xs;
    for (int64_t g = 0; g < G; ++g) {
      const float cr = c[r * G + g];
      float* __restrict dMg = dM + g * D * D;
      for (int64_t k = 0; k < D; ++k) {
        const float a = cr * x[k];
#pragma omp simd
        for (int64_t l = 0; l < D; ++l) dMg[k * D + l] += a * x[l];
      }
    }
  }
}

// After rms_rows_backward<16> (every call on this d M done): the lower-left block from the
// upper-right, which has every row's share (the 16-row path writes only the upper one)
inline void mirror_upper_16(float* dM, int64_t G) {
  for (int64_t g = 0; g < G; ++g)
    for (int k = 8; k < 16; ++k)
      for (int l = 0; l < 8; ++l) dM[g * 256 + k * 16 + l] = dM[g * 256 + l * 16 + k];
}

template <typename F>
inline void dispatch_d(int64_t D, F&& f) {
  if (D == 16) {
    f.template operator()<16>();
  } else if (D == 8) {
    f.template operator()<8>();
  } else {
    f.template operator()<0>();
  }
}

void check_scales(const at::Tensor& X, const at::Tensor& xq) {
  TORCH_CHECK(X.device().is_cpu() && X.scalar_type() == at::kFloat && rows_contiguous(X),
              "depthscale fused test scales: X must be a float32 CPU B x P x d tensor with contiguous rows");
  TORCH_CHECK(xq.device().is_cpu() && xq.scalar_type() == at::kFloat && xq.dim() == 2 && xq.stride(1) == 1 &&
                  xq.size(0) == X.size(0) && xq.size(1) == X.size(2),
              "depthscale fused test scales: x_test must be a float32 CPU B x d tensor with contiguous rows");
}

void check_scales(const at::Tensor& X, const at::Tensor& xq, const at::Tensor& M) {
  check_scales(X, xq);
  const int64_t n = M.dim();
  TORCH_CHECK(M.device().is_cpu() && M.scalar_type() == at::kFloat && M.is_contiguous() && (n == 3 || n == 4) &&
                  M.size(n - 2) == X.size(2) && M.size(n - 1) == X.size(2),
              "depthscale fused test scales: M must be a contiguous float32 CPU G x d x d or K x G x d x d tensor");
  TORCH_CHECK(n == 3 || (M.size(0) > 0 && X.size(0) % M.size(0) == 0),
              "depthscale fused test scales: with K x G x d x d forms the B contexts must split into K equal blocks");
}

// The contexts in K equal blocks, block k read by the K x G forms M_k (K = 1: one G x d x d M for all).
struct ScaleBlocks {
  int64_t K, G, Bk;
  ScaleBlocks(int64_t K_, int64_t G_, int64_t B) : K(K_), G(G_), Bk(B / K_) {}
  // calls f(k, b0', b1') for the parts of the context range [b0, b1) that lie in one block each
  template <typename F>
  void split(int64_t b0, int64_t b1, F&& f) const {
    while (b0 < b1) {
      const int64_t k = b0 / Bk, e = std::min(b1, (k + 1) * Bk);
      f(k, b0, e);
      b0 = e;
    }
  }
};

// (rcq, rc, rq): rc B x G x P (contexts), rq B x G (test tokens), rcq = rc rq. M is G x d x d, or
// K x G x d x d for K blocks of B / K contexts (seed groups of one pack, each with its own G models).
std::tuple<at::Tensor, at::Tensor, at::Tensor> test_scales_forward(const at::Tensor& X, const at::Tensor& xq,
                                                                   const at::Tensor& M, int64_t N, double eps) {
  check_scales(X, xq, M);
  const int64_t B = X.size(0), P = X.size(1), D = X.size(2);
  const ScaleBlocks blk(M.dim() == 4 ? M.size(0) : 1, M.size(M.dim() - 3), B);
  const int64_t G = blk.G, GDD = G * D * D;
  at::Tensor rc = at::empty({B, G, P}, X.options()), rq = at::empty({B, G}, X.options());
  at::Tensor rcq = at::empty({B, G, P}, X.options());
  const float *Xp = X.data_ptr<float>(), *Qp = xq.data_ptr<float>(), *Mp = M.data_ptr<float>();
  const int64_t xs = X.stride(0), qs = xq.stride(0);
  float *rcp = rc.data_ptr<float>(), *rqp = rq.data_ptr<float>(), *out = rcq.data_ptr<float>();
  const float invN = 1.0f / static_cast<float>(N), e = static_cast<float>(eps);
  const ScaleLayout ctx{G, P}, tok{G, 0};
  const std::vector<float> Mu = fold_upper(Mp, blk.K * G, D);
  const float* Mup = Mu.data();
  dispatch_d(D, [&]<int DT>() {
    depthscale::balanced_for(B, 16, [&](int64_t b0, int64_t b1) {  // whole contexts per chunk
      blk.split(b0, b1, [&](int64_t k, int64_t c0, int64_t c1) {
        const float *Mk = Mp + k * GDD, *Muk = Mup + k * GDD;
        for (int64_t b = c0; b < c1; ++b)
          rms_rows<DT>(Xp + b * xs, D, Mk, Muk, 0, P, D, ctx, invN, e, rcp + b * G * P);
        rms_rows<DT>(Qp, qs, Mk, Muk, c0, c1, D, tok, invN, e, rqp);
      });
      for (int64_t bg = b0 * G; bg < b1 * G; ++bg) {
        const float q = rqp[bg];
#pragma omp simd
        for (int64_t i = 0; i < P; ++i) out[bg * P + i] = rcp[bg * P + i] * q;
      }
    });
  });
  return {rcq, rc, rq};
}

// d M from drcq (B x G x P): drc = drcq rq, drq = sum_i drcq rc, each through d M_g = sum c x x^T.
// K > 1: d M is K x G x d x d, block k of the contexts adding to d M_k (as test_scales_forward's M).
at::Tensor test_scales_backward(const at::Tensor& drcq, const at::Tensor& X, const at::Tensor& xq,
                                const at::Tensor& rc, const at::Tensor& rq, int64_t N, int64_t K) {
  const int64_t B = X.size(0), P = X.size(1), D = X.size(2), G = rq.size(1);
  check_scales(X, xq);
  TORCH_CHECK(K >= 1 && B % K == 0, "depthscale fused test scales: K must divide the contexts, got K = ", K);
  const ScaleBlocks blk(K, G, B);
  const int64_t GDD = G * D * D;
  for (const at::Tensor* t : {&drcq, &rc})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == at::kFloat && t->dim() == 3 && t->size(0) == B &&
                    t->size(1) == G && t->size(2) == P,
                "depthscale fused test scales: drcq and rc must be contiguous float32 B x G x P");
  TORCH_CHECK(rq.is_contiguous() && rq.scalar_type() == at::kFloat && rq.dim() == 2 && rq.size(0) == B,
              "depthscale fused test scales: rq must be a contiguous float32 B x G");
  // blocks of whole contexts, each with its own d M (no races), summed at the end
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), (B * P + 255) / 256));
  at::Tensor parts = at::zeros({blocks, K * G, D, D}, X.options());
  const float *Xp = X.data_ptr<float>(), *Qp = xq.data_ptr<float>(), *dp = drcq.data_ptr<float>();
  const int64_t xs = X.stride(0), qs = xq.stride(0);
  const float *rcp = rc.data_ptr<float>(), *rqp = rq.data_ptr<float>();
  float* pp = parts.data_ptr<float>();
  const float half_invN = 0.5f / static_cast<float>(N);
  const int64_t per = (B + blocks - 1) / blocks;
  dispatch_d(D, [&]<int DT>() {
    at::parallel_for(0, blocks, 1, [&](int64_t j0, int64_t j1) {
      std::vector<float> cc(per * P * G), cq(per * G);  // coefficients, row-major rows x G
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t b0 = std::min(B, j * per), b1 = std::min(B, (j + 1) * per);
        for (int64_t b = b0; b < b1; ++b)
          for (int64_t g = 0; g < G; ++g) {
            const int64_t bg = b * G + g;
            const float q = rqp[bg];
            float dq = 0.0f;
            for (int64_t i = 0; i < P; ++i) {
              const float d = dp[bg * P + i], r = rcp[bg * P + i];
              dq += d * r;
              cc[((b - b0) * P + i) * G + g] = -half_invN * (d * q) * r * r * r;
            }
            cq[(b - b0) * G + g] = -half_invN * dq * q * q * q;
          }
        float* dM = pp + j * K * GDD;
        for (int64_t b = b0; b < b1; ++b)
          rms_rows_backward<DT>(Xp + b * xs, D, cc.data() + (b - b0) * P * G, 0, P, D, G, dM + (b / blk.Bk) * GDD);
        blk.split(b0, b1, [&](int64_t k, int64_t c0, int64_t c1) {  // the test tokens
          rms_rows_backward<DT>(Qp + c0 * qs, qs, cq.data() + (c0 - b0) * G, 0, c1 - c0, D, G, dM + k * GDD);
        });
        if constexpr (DT == 16) mirror_upper_16(dM, K * G);
      }
    });
  });
  at::Tensor dM = blocks == 1 ? parts[0] : parts.sum(0);
  return K == 1 ? dM : dM.view({K, G, D, D});
}

// ---------------------------------------------------------------------------------------------
// Haar rotations: the Q factor of G = QR with diag(R) > 0 for each of B square matrices (the
// sign-fixed QR of contexts.haar_orthogonal), by classical Gram-Schmidt run twice (CGS2) in double
// precision over G's columns: q_j = normalised (g_j - sum_{i<j} (q_i . g_j) q_i), the projection
// repeated once, so that Q is orthogonal to ~1e-15 before the cast to float. R_jj is the norm, so
// positive: exactly the sign convention, with no sign pass. torch.linalg.qr calls LAPACK once per
// 16 x 16 matrix (~13 us each here); this is one pass over the batch, split across threads.

at::Tensor haar_q(const at::Tensor& G) {
  TORCH_CHECK(G.device().is_cpu() && G.scalar_type() == at::kFloat && G.is_contiguous() && G.dim() == 3 &&
                  G.size(1) == G.size(2),
              "depthscale fused haar_q: G must be a contiguous float32 CPU B x d x d tensor");
  const int64_t B = G.size(0), D = G.size(1);
  at::Tensor Q = at::empty_like(G);
  const float* Gp = G.data_ptr<float>();
  float* Qp = Q.data_ptr<float>();
  dispatch_d(D, [&]<int DT>() {
    const int64_t d = DT > 0 ? DT : D;  // (a compile-time 16 or 8: the loops over i vectorise)
    at::parallel_for(0, B, 16, [&](int64_t b0, int64_t b1) {
      std::vector<double> q(d * d), v(d), c(d);  // q: column j at q[j * d .. j * d + d)
      for (int64_t b = b0; b < b1; ++b) {
        const float* g = Gp + b * d * d;
        for (int64_t j = 0; j < d; ++j) {
          double* __restrict vp = v.data();
          for (int64_t i = 0; i < d; ++i) vp[i] = g[i * d + j];
          for (int pass = 0; pass < 2; ++pass) {
            for (int64_t k = 0; k < j; ++k) {
              const double* __restrict qk = q.data() + k * d;
              double dot = 0.0;
#pragma omp simd reduction(+ : dot)
              for (int64_t i = 0; i < d; ++i) dot += qk[i] * vp[i];
              c[k] = dot;
            }
            for (int64_t k = 0; k < j; ++k) {
              const double* __restrict qk = q.data() + k * d;
              const double ck = c[k];
#pragma omp simd
              for (int64_t i = 0; i < d; ++i) vp[i] -= ck * qk[i];
            }
          }
          double nrm = 0.0;
#pragma omp simd reduction(+ : nrm)
          for (int64_t i = 0; i < d; ++i) nrm += vp[i] * vp[i];
          const double inv = 1.0 / std::sqrt(nrm);
          double* __restrict qj = q.data() + j * d;
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) qj[i] = vp[i] * inv;
        }
        float* out = Qp + b * d * d;
        for (int64_t i = 0; i < d; ++i)
          for (int64_t j = 0; j < d; ++j) out[i * d + j] = static_cast<float>(q[j * d + i]);
      }
    });
  });
  return Q;
}

// ---------------------------------------------------------------------------------------------
// The layers' score forms E_t = (W_q^t W_x^g)^T (W_k^t W_x^g) (d x d, g = owner[t]) and their
// backward. torch does each of the three products as a batched matmul of T tiny matrices (~1.5 us
// of call overhead per matrix, backward twice as many); these are a few thousand FLOPs each.

// mm_acc with K and n fixed at compile time (n a multiple of 8): each row of C in registers
template <int K, int NN>
inline void mm_acc_fixed(const float* __restrict A, int64_t ars, int64_t acs, const float* __restrict Bp,
                         float* __restrict C, int64_t M) {
  constexpr int NV = NN / 8;
  for (int64_t i = 0; i < M; ++i) {
    v8 acc[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[j] = vload(C + i * NN + 8 * j);
#pragma GCC unroll 16
    for (int k = 0; k < K; ++k) {
      const v8 a = vbroadcast(A[i * ars + k * acs]);
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[j] += a * vload(Bp + k * NN + 8 * j);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) vstore(C + i * NN + 8 * j, acc[j]);
  }
}

// C (M x n) += A (M x K, element (i, k) at A[i * ars + k * acs]) times B (K x n, row-major)
inline void mm_acc(const float* __restrict A, int64_t ars, int64_t acs, const float* __restrict Bp,
                   float* __restrict C, int64_t M, int64_t K, int64_t n) {
  if (K == 16 && n == 16) return mm_acc_fixed<16, 16>(A, ars, acs, Bp, C, M);
  if (K == 8 && n == 8) return mm_acc_fixed<8, 8>(A, ars, acs, Bp, C, M);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      const float a = A[i * ars + k * acs];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) C[i * n + j] += a * Bp[k * n + j];
    }
}

// A layer's forms are ~1.5 us of work: split across threads only from this many layers (below it
// the fork and join cost more than the work). (512 before: the bench's 381 layers ran serially,
// 0.46 ms of its backward on one of two threads.)
constexpr int64_t kFormsGrain = 64;

struct FormInputs {
  int64_t T, N, D, G;
  FormInputs(const at::Tensor& Wq, const at::Tensor& Wk, const at::Tensor& Wx, const at::Tensor& owner) {
    for (const at::Tensor* t : {&Wq, &Wk, &Wx})
      TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous() && t->dim() == 3,
                  "depthscale fused layer forms: contiguous float32 CPU tensors of three dimensions only");
    T = Wq.size(0), N = Wq.size(1), D = Wx.size(2), G = Wx.size(0);
    TORCH_CHECK(Wq.size(2) == N && Wk.sizes() == Wq.sizes() && Wx.size(1) == N,
                "depthscale fused layer forms: shapes Wq, Wk T x N x N and Wx G x N x d");
    TORCH_CHECK(owner.device().is_cpu() && owner.scalar_type() == at::kLong && owner.dim() == 1 &&
                    owner.size(0) == T && owner.is_contiguous(),
                "depthscale fused layer forms: owner must be a contiguous int64 CPU tensor of T entries");
    if (T > 0)
      TORCH_CHECK(owner.min().item<int64_t>() >= 0 && owner.max().item<int64_t>() < G,
                  "depthscale fused layer forms: owner out of range");
  }
};

at::Tensor layer_forms_forward(const at::Tensor& Wq, const at::Tensor& Wk, const at::Tensor& Wx,
                               const at::Tensor& owner) {
  const FormInputs in(Wq, Wk, Wx, owner);
  const int64_t N = in.N, D = in.D;
  at::Tensor E = at::zeros({in.T, D, D}, Wq.options());
  const float *q = Wq.data_ptr<float>(), *k = Wk.data_ptr<float>(), *x = Wx.data_ptr<float>();
  const int64_t* own = owner.data_ptr<int64_t>();
  float* e = E.data_ptr<float>();
  at::parallel_for(0, in.T, kFormsGrain, [&](int64_t t0, int64_t t1) {
    std::vector<float> A(N * D), Bm(N * D);
    for (int64_t t = t0; t < t1; ++t) {
      const float* xg = x + own[t] * N * D;
      std::fill(A.begin(), A.end(), 0.0f);
      std::fill(Bm.begin(), Bm.end(), 0.0f);
      mm_acc(q + t * N * N, N, 1, xg, A.data(), N, N, D);        // A = W_q W_x
      mm_acc(k + t * N * N, N, 1, xg, Bm.data(), N, N, D);       // B = W_k W_x
      mm_acc(A.data(), 1, D, Bm.data(), e + t * D * D, D, N, D);  // E = A^T B
    }
  });
  return E;
}

// dW_q^t = dA W_x^T, dW_k^t = dB W_x^T, dW_x^g += W_q^T dA + W_k^T dB with dA = B dE^T, dB = A dE.
// Threads take whole models (every row of dW_x^g is written by one thread).
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_forms_backward(const at::Tensor& dE, const at::Tensor& Wq,
                                                                    const at::Tensor& Wk, const at::Tensor& Wx,
                                                                    const at::Tensor& owner) {
  const FormInputs in(Wq, Wk, Wx, owner);
  const int64_t T = in.T, N = in.N, D = in.D, G = in.G;
  TORCH_CHECK(dE.device().is_cpu() && dE.scalar_type() == at::kFloat && dE.is_contiguous() && dE.dim() == 3 &&
                  dE.size(0) == T && dE.size(1) == D && dE.size(2) == D,
              "depthscale fused layer forms: dE must be a contiguous float32 T x d x d tensor");
  // (zeroed below by the thread that sums into them: layer by layer, model by model)
  at::Tensor dWq = at::empty_like(Wq), dWk = at::empty_like(Wk), dWx = at::empty_like(Wx);
  const float *q = Wq.data_ptr<float>(), *k = Wk.data_ptr<float>(), *x = Wx.data_ptr<float>();
  const float* de = dE.data_ptr<float>();
  float *dq = dWq.data_ptr<float>(), *dk = dWk.data_ptr<float>(), *dx = dWx.data_ptr<float>();
  const int64_t* own = owner.data_ptr<int64_t>();
  // the models cut into chunks of about equal layer counts (depths differ up to 64-fold: an even cut
  // of the models left one thread most of the layers), a chunk per iteration of the parallel loop
  std::vector<int64_t> cut{0};
  if (T >= kFormsGrain) {
    std::vector<int64_t> layers(G, 0);
    for (int64_t t = 0; t < T; ++t) ++layers[own[t]];
    const int64_t chunks = std::min<int64_t>(G, 4 * at::get_num_threads());
    for (int64_t g = 0, sum = 0; g < G; ++g) {
      sum += layers[g];
      if (g + 1 < G && sum * chunks >= T * int64_t(cut.size())) cut.push_back(g + 1);
    }
  }
  cut.push_back(G);
  at::parallel_for(0, int64_t(cut.size()) - 1, 1, [&](int64_t c0, int64_t c1) {
    std::vector<float> A(N * D), Bm(N * D), dA(N * D), dB(N * D), dET(D * D), xT(D * N);
    for (int64_t g = cut[c0]; g < cut[c1]; ++g) {
      const float* xg = x + g * N * D;
      std::fill(dx + g * N * D, dx + (g + 1) * N * D, 0.0f);
      for (int64_t r = 0; r < N; ++r)
        for (int64_t c = 0; c < D; ++c) xT[c * N + r] = xg[r * D + c];
      for (int64_t t = 0; t < T; ++t) {
        if (own[t] != g) continue;
        const float *qt = q + t * N * N, *kt = k + t * N * N, *det = de + t * D * D;
        for (float* v : {A.data(), Bm.data(), dA.data(), dB.data()}) std::fill(v, v + N * D, 0.0f);
        std::fill(dq + t * N * N, dq + (t + 1) * N * N, 0.0f);
        std::fill(dk + t * N * N, dk + (t + 1) * N * N, 0.0f);
        for (int64_t a = 0; a < D; ++a)
          for (int64_t b = 0; b < D; ++b) dET[b * D + a] = det[a * D + b];
        mm_acc(qt, N, 1, xg, A.data(), N, N, D);
        mm_acc(kt, N, 1, xg, Bm.data(), N, N, D);
        mm_acc(Bm.data(), D, 1, dET.data(), dA.data(), N, D, D);  // dA = B dE^T
        mm_acc(A.data(), D, 1, det, dB.data(), N, D, D);          // dB = A dE
        mm_acc(dA.data(), D, 1, xT.data(), dq + t * N * N, N, D, N);
        mm_acc(dB.data(), D, 1, xT.data(), dk + t * N * N, N, D, N);
        mm_acc(qt, 1, N, dA.data(), dx + g * N * D, N, N, D);  // W_q^T dA
        mm_acc(kt, 1, N, dB.data(), dx + g * N * D, N, N, D);  // W_k^T dB
      }
    }
  });
  return {dWq, dWk, dWx};
}

}  // namespace

TORCH_LIBRARY(depthscale_fused, m) {
  m.def("test_row_forward(Tensor u, Tensor X, Tensor rc, Tensor y, Tensor owner) -> (Tensor, Tensor)",
        &test_row_forward);
  m.def("test_row_backward(Tensor dpy, Tensor u, Tensor X, Tensor rc, Tensor y, Tensor owner, Tensor py, "
        "Tensor lse, bool need_dX, bool need_dy) -> (Tensor, Tensor, Tensor, Tensor)",
        &test_row_backward);
  m.def("test_row_weights(Tensor u, Tensor X, Tensor rc, Tensor y, Tensor owner, Tensor lse, Tensor coef) -> Tensor",
        &test_row_weights);
  m.def("test_scales_forward(Tensor X, Tensor xq, Tensor M, int N, float eps) -> (Tensor, Tensor, Tensor)",
        &test_scales_forward);
  m.def("test_scales_backward(Tensor drcq, Tensor X, Tensor xq, Tensor rc, Tensor rq, int N, int K) -> Tensor",
        &test_scales_backward);
  m.def("haar_q(Tensor G) -> Tensor", &haar_q);
  m.def("lanes(int lanes) -> int", &lanes);
  m.def("exp_rate(int reps) -> float", &exp_rate);
  m.def("layer_forms_forward(Tensor Wq, Tensor Wk, Tensor Wx, Tensor owner) -> Tensor", &layer_forms_forward);
  m.def("layer_forms_backward(Tensor dE, Tensor Wq, Tensor Wk, Tensor Wx, Tensor owner) -> (Tensor, Tensor, Tensor)",
        &layer_forms_backward);
}
