// depthscale's kernels: float vectors as GCC/Clang vector extensions (one AVX register of 8 floats, one
// AVX-512 register of 16 with -march=native; two SSE registers or scalar code elsewhere), and their
// broadcast, load and store. No arithmetic here: each kernel file says how its own is rounded.
#pragma once

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

}  // namespace depthscale
