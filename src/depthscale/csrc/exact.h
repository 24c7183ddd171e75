// depthscale's kernels: included last by a file whose floating-point arithmetic is written out (every
// fused multiply-add an explicit std::fma or FMA intrinsic, every other product rounded before it is
// added): the compiler may not contract a * b + c into one rounding on its own for the rest of the file
// (GCC's optimize pragma, clang's own), so the numbers are the file's, not the compiler's.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
