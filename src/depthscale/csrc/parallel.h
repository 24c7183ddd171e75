// depthscale's kernels: work split across torch's intra-op threads.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace depthscale {

// balanced_for (below) where each thread first makes its worker, make() (a callable taking (i0, i1)
// that holds the thread's scratch), and calls it for every chunk it takes
template <typename Make>
void balanced_for_with(int64_t n, int64_t chunk, const Make& make) {
  if (n <= 0) return;
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  at::parallel_for(0, std::min<int64_t>(at::get_num_threads(), chunks), 1, [&](int64_t, int64_t) {
    auto work = make();
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) work(c * chunk, std::min(n, (c + 1) * chunk));
  });
}

// f(i0, i1) over [0, n) in chunks of `chunk` indices, taken by torch's threads one at a time as each
// is free. at::parallel_for's equal split leaves one thread waiting at the end whenever the other
// runs slower or starts later (in the training step on two cores the second thread's half of the test
// row took ~10% longer, and the first waited at the barrier); here the faster thread takes more
// chunks. Each index is still computed by one thread alone, so where f's outputs for i depend only
// on i the numbers are the same at any thread count and in any order of the chunks. Inside another
// parallel region it runs every chunk on the calling thread (at::parallel_for's rule).
template <typename F>
void balanced_for(int64_t n, int64_t chunk, const F& f) {
  balanced_for_with(n, chunk, [&] { return [&](int64_t i0, int64_t i1) { f(i0, i1); }; });
}

}  // namespace depthscale
