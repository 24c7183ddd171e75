// The test tokens' products with the layers' score forms, both ways (depthscale.kernels.FusedForms):
//
//   forward   u[b, t, j]  = sum_a xq[b, a] E[k, t, a, j]             (u_bt = E_kt^T xq_b)
//   backward  dE[k, t, a, j] = sum_{b in block k} xq[b, a] du[b, t, j]
//
// for K blocks of B / K contexts (the seed groups of a pack: block k's contexts meet only block k's
// layers). Torch made them as two batched matrix products (K batches of B/K x d times d x T d, and
// back), which MKL splits across threads a batch at a time (2 : 1 for K = 3 on two threads) and which
// need E transposed to d x T d and the result transposed back (two copies a step). Here the forward
// is split over contexts, the backward over (block, layer) pairs: every thread has an equal share and
// writes only its own outputs.
//
// The order of every sum is fixed here, and is the order MKL's sgemm used for these products on the
// machine the stored results were made on (so that moving them here moved no number):
// - forward: a = 0, 1, ..., d - 1 by fused multiply-adds from the first rounded product;
// - backward: the block's contexts in runs (`runs` below: one run up to 192 contexts, two equal halves
//   up to 384, else runs of 192 and the rest), each run summed in order by fused multiply-adds from its
//   first rounded product, the runs' sums then added in order.
// Every fused multiply-add is std::fma and contraction is off for the file, so the compiler cannot
// choose another rounding (csrc/sampler.cpp does the same).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "parallel.h"
#include "vec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "exact.h"  // contraction off for the rest of the file

namespace {

// the test tokens x_test, read by both directions
void check_xq(const at::Tensor& xq) {
  TORCH_CHECK(xq.device().is_cpu() && xq.scalar_type() == at::kFloat && xq.dim() == 2 && xq.stride(1) == 1,
              "depthscale forms: xq must be a float32 CPU B x d tensor with contiguous rows");
}

void check_forms(const at::Tensor& xq, const at::Tensor& E) {
  check_xq(xq);
  TORCH_CHECK(E.device().is_cpu() && E.scalar_type() == at::kFloat, "depthscale forms: E must be a float32 CPU tensor");
  TORCH_CHECK(E.dim() == 4 && E.is_contiguous() && E.size(2) == xq.size(1) && E.size(3) == xq.size(1),
              "depthscale forms: E must be a contiguous K x T x d x d tensor, d = xq's");
  TORCH_CHECK(E.size(0) >= 1 && xq.size(0) % E.size(0) == 0,
              "depthscale forms: the B contexts must be K equal blocks, K = E.size(0)");
}

using depthscale::fma_lanes;
using depthscale::splat;
using depthscale::v16;
using depthscale::vload;
using depthscale::vstore;

// out[j] = sum_a x[a] Et[a, j], a = 0 .. D - 1 in order (the first term the rounded product)
inline void form_row(const float* __restrict x, const float* __restrict Et, int64_t D, float* __restrict out) {
  for (int64_t j = 0; j < D; ++j) out[j] = x[0] * Et[j];
  for (int64_t a = 1; a < D; ++a)
    for (int64_t j = 0; j < D; ++j) out[j] = std::fma(x[a], Et[a * D + j], out[j]);
}

// form_row at d = 16 for NB contexts (x[c], rows of ub[c]) and the NT layers t .. t + NT - 1 (Et their
// forms): NB NT independent chains in registers, each row of E loaded once for the NB contexts
template <int NB, int NT>
inline void form_block16(const float* const* x, const float* __restrict Et, float* const* out) {
  v16 acc[NB][NT];
  for (int c = 0; c < NB; ++c) {
    const v16 x0 = splat<v16>(x[c][0]);
    for (int r = 0; r < NT; ++r) acc[c][r] = x0 * vload<v16>(Et + r * 256);
  }
  for (int a = 1; a < 16; ++a) {
    v16 e[NT];
    for (int r = 0; r < NT; ++r) e[r] = vload<v16>(Et + r * 256 + a * 16);
    for (int c = 0; c < NB; ++c) {
      const v16 xa = splat<v16>(x[c][a]);
      for (int r = 0; r < NT; ++r) acc[c][r] = fma_lanes(xa, e[r], acc[c][r]);
    }
  }
  for (int c = 0; c < NB; ++c)
    for (int r = 0; r < NT; ++r) vstore(out[c] + r * 16, acc[c][r]);
}

// the forms of every layer for NB contexts b .. b + NB - 1 of one block (d = 16)
template <int NB>
inline void form_contexts16(const float* X, int64_t xs, const float* Ek, int64_t T, float* U, int64_t b) {
  const float* x[NB];
  float* out[NB];
  for (int c = 0; c < NB; ++c) x[c] = X + (b + c) * xs, out[c] = U + (b + c) * T * 16;
  int64_t t = 0;
  for (; t + 4 <= T; t += 4) {
    form_block16<NB, 4>(x, Ek + t * 256, out);
    for (int c = 0; c < NB; ++c) out[c] += 64;
  }
  for (; t < T; ++t) {
    form_block16<NB, 1>(x, Ek + t * 256, out);
    for (int c = 0; c < NB; ++c) out[c] += 16;
  }
}

at::Tensor forms_forward(const at::Tensor& xq, const at::Tensor& E) {
  check_forms(xq, E);
  const int64_t B = xq.size(0), D = xq.size(1), K = E.size(0), T = E.size(1), Bk = B / K, xs = xq.stride(0);
  at::Tensor u = at::empty({B, T, D}, xq.options());
  const float *X = xq.data_ptr<float>(), *Ep = E.data_ptr<float>();
  float* U = u.data_ptr<float>();
  // whole runs of 4 contexts of one block per thread where the block's size allows
  const int64_t grain = Bk % 4 == 0 ? 4 : 1;
  depthscale::balanced_for(B / grain, 4, [&](int64_t g0, int64_t g1) {
    for (int64_t b = g0 * grain; b < g1 * grain;) {
      const int64_t k = b / Bk;
      const float* Ek = Ep + k * T * D * D;
      if (D == 16 && grain == 4) {
        form_contexts16<4>(X, xs, Ek, T, U, b);
        b += 4;
      } else if (D == 16) {
        form_contexts16<1>(X, xs, Ek, T, U, b);
        b += 1;
      } else {
        for (int64_t t = 0; t < T; ++t) form_row(X + b * xs, Ek + t * D * D, D, U + (b * T + t) * D);
        b += 1;
      }
    }
  });
  return u;
}

// The runs of a block of n contexts whose sums the backward adds (see the top of the file).
std::vector<int64_t> runs(int64_t n) {
  constexpr int64_t kRun = 192;
  if (n <= kRun) return {n};
  if (n <= 2 * kRun) return {(n + 1) / 2, n - (n + 1) / 2};
  std::vector<int64_t> r(n / kRun, kRun);
  if (n % kRun) r.push_back(n % kRun);
  return r;
}

// acc[a, :] (+)= sum over the run's contexts b of x[b, a] du[b, :], D x D, in order of b
template <int DT>
inline void outer_run(const float* __restrict X, int64_t xs, const float* __restrict dU, int64_t us, int64_t n,
                      int64_t D_, float* __restrict part) {
  const int64_t D = DT > 0 ? DT : D_;
  if (n == 0) {  // a block of no contexts: a sum of nothing
    std::fill(part, part + D * D, 0.0f);
    return;
  }
  for (int64_t a = 0; a < D; ++a) {
    const float x0 = X[a];
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) part[a * D + j] = x0 * dU[j];
  }
  for (int64_t b = 1; b < n; ++b) {
    const float* __restrict x = X + b * xs;
    const float* __restrict g = dU + b * us;
    for (int64_t a = 0; a < D; ++a) {
      const float xa = x[a];
#pragma omp simd
      for (int64_t j = 0; j < D; ++j) part[a * D + j] = std::fma(xa, g[j], part[a * D + j]);
    }
  }
}

at::Tensor forms_backward(const at::Tensor& du, const at::Tensor& xq, int64_t K) {
  TORCH_CHECK(du.device().is_cpu() && du.scalar_type() == at::kFloat && du.is_contiguous() && du.dim() == 3 &&
                  du.size(0) == xq.size(0) && du.size(2) == xq.size(1),
              "depthscale forms: du must be a contiguous float32 B x T x d tensor");
  check_xq(xq);
  TORCH_CHECK(K >= 1 && xq.size(0) % K == 0, "depthscale forms: the B contexts must be K equal blocks");
  const int64_t B = du.size(0), T = du.size(1), D = du.size(2), Bk = B / K, xs = xq.stride(0);
  at::Tensor dE = at::empty({K, T, D, D}, du.options());
  const float *X = xq.data_ptr<float>(), *dU = du.data_ptr<float>();
  float* dEp = dE.data_ptr<float>();
  const std::vector<int64_t> lengths = runs(Bk);
  auto run = [&]<int DT>() {
    depthscale::balanced_for(K * T, 8, [&](int64_t w0, int64_t w1) {
      std::vector<float> part(D * D);
      for (int64_t w = w0; w < w1; ++w) {
        const int64_t k = w / T, t = w % T;
        float* out = dEp + w * D * D;
        int64_t b = k * Bk;
        for (size_t r = 0; r < lengths.size(); ++r) {
          float* dst = r == 0 ? out : part.data();
          outer_run<DT>(X + b * xs, xs, dU + (b * T + t) * D, T * D, lengths[r], D, dst);
          if (r > 0) {
#pragma omp simd
            for (int64_t i = 0; i < D * D; ++i) out[i] = out[i] + part[i];
          }
          b += lengths[r];
        }
      }
    });
  };
  if (D == 16) {
    run.template operator()<16>();
  } else {
    run.template operator()<0>();
  }
  return dE;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(depthscale_fused, m) {
  m.def("forms_forward(Tensor xq, Tensor E) -> Tensor", &forms_forward);
  m.def("forms_backward(Tensor du, Tensor xq, int K) -> Tensor", &forms_backward);
}
