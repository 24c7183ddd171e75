// depthscale's kernels: float vectors as GCC/Clang vector extensions (one AVX register of 8 floats, one
// AVX-512 register of 16 with -march=native; two SSE registers or scalar code elsewhere), and their
// broadcast, load and store; and the lane-wise fused multiply-add, the one piece of arithmetic here (it
// rounds each lane once, whoever writes it): each kernel file says how the rest of its own is rounded.
#pragma once

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include <cmath>
#include <cstdint>

namespace depthscale {

typedef float v8 __attribute__((vector_size(32)));  // 8 floats
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v16 __attribute__((vector_size(64)));  // 16 floats: one AVX-512 register
typedef int32_t v16i __attribute__((vector_size(64)));

// a in every lane of F (F = float, v8 or v16)
template <typename F>
inline F splat(float a) {
  if constexpr (sizeof(F) == sizeof(float)) {
    return a;
  } else if constexpr (sizeof(F) == sizeof(v8)) {
    return F{a, a, a, a, a, a, a, a};
  } else {  // (not F{} + a: 0 + a is no broadcast to the compiler, -0 + 0 being +0)
    return F{a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a};
  }
}

// the vector at p (no alignment assumed) and back
template <typename V = v8>
inline V vload(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <typename V>
inline void vstore(float* p, V v) { __builtin_memcpy(p, &v, sizeof v); }

// a b + c lane by lane, each lane rounded once, for a vector V of floats or doubles (one AVX-512
// instruction where V is a 64-byte register, std::fma lane by lane elsewhere)
template <typename V>
inline V fma_lanes(V a, V b, V c) {
  constexpr int lanes = sizeof(V) / sizeof(a[0]);
#ifdef __AVX512F__
  if constexpr (sizeof(V) == 64 && lanes == 16) return V(_mm512_fmadd_ps(__m512(a), __m512(b), __m512(c)));
  else if constexpr (sizeof(V) == 64 && lanes == 8) return V(_mm512_fmadd_pd(__m512d(a), __m512d(b), __m512d(c)));
  else
#endif
  {
    V r;
    for (int l = 0; l < lanes; ++l) r[l] = std::fma(a[l], b[l], c[l]);
    return r;
  }
}

}  // namespace depthscale
