"""How fast the fused test row's exponential runs, and what the packed step's exponentials cost.

    python benchmarks/exp_rate.py --preset cpu          # needs g++; one core

The roofline of `depthscale bench` counts matmul FLOPs and bytes; the test row's softmax also
evaluates one exponential per (context, layer, token), forward and again in the backward (which
recomputes the row). This compiles the kernel's own `exp_nonpos_t` (cut out of csrc/fused.cpp at
build time, not copied), times it on an L1-resident array in 8- and 16-lane vectors (best of 20),
and prints the step's exponential count and their time at that rate beside the bench's roofline
terms: the floor the FLOP count leaves out.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "depthscale" / "csrc" / "fused.cpp"

MAIN = r"""
#include <chrono>
#include <cstdio>
template <typename V, typename I>
double rate() {
  constexpr int W = sizeof(V) / sizeof(float), n = 2048;  // 8 KB: L1
  alignas(64) static float x[n], y[n];
  for (int i = 0; i < n; ++i) x[i] = -10.0f * i / n;
  double best = 1e9;
  float sink = 0;
  for (int rep = 0; rep < 20; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < 2000; ++it) {
      for (int i = 0; i < n; i += W) {
        V v;
        __builtin_memcpy(&v, x + i, sizeof v);
        V e = exp_nonpos_t<V, I>(v);
        __builtin_memcpy(y + i, &e, sizeof e);
      }
      sink += y[it % n];
      x[0] = -sink * 1e-30f;  // a dependency the compiler cannot drop
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt < best) best = dt;
  }
  return 2000.0 * n / best;
}
int main() { std::printf("{\"v8\": %.6g, \"v16\": %.6g}\n", rate<v8, v8i>(), rate<v16, v16i>()); }
"""


def kernel_exp_source(text: str) -> str:
    """The vector typedefs, splat and exp_nonpos_t of fused.cpp (from its first typedef to the
    scalar exp_nonpos), with the headers they need."""
    start = text.index("typedef float v8 ")
    end = text.index("inline float exp_nonpos(float x)")
    return "#include <cstdint>\n#include <type_traits>\n" + text[start:end]


def measure_rate() -> dict:
    if shutil.which("g++") is None:
        raise SystemExit("exp_rate: needs g++")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "exp_rate.cpp", Path(tmp) / "exp_rate"
        src.write_text(kernel_exp_source(SOURCE.read_text()) + MAIN)
        subprocess.run(["g++", "-O3", "-march=native", "-std=c++20", str(src), "-o", str(exe)], check=True)
        return json.loads(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)


def step_exps(preset: str, seeds: int) -> int:
    """Exponentials per packed sweep step: every (context, layer) row has P, forward and backward."""
    from depthscale.bench import speed as bench

    cfgs = bench.sweep_configs(preset, seeds)
    rows = sum(c.batch * c.L for c in cfgs)
    return 2 * rows * cfgs[0].P


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    rates = measure_rate()
    n = step_exps(args.preset, args.seeds)
    best = max(rates.values())
    out = {"exp_per_s": rates, "exps_per_step": n, "exp_seconds_per_step": n / best}
    print(json.dumps(out, indent=1))
    print(f"{n / 1e6:.1f} M exponentials per sweep step: {1e3 * n / best:.2f} ms at {best / 1e9:.2f} G/s "
          f"(one thread), not in the bench's roofline_s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
