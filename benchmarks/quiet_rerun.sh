#!/usr/bin/env bash
# Issue 15's measurements, in one command, for a quiet machine (nothing else running):
#   1. `depthscale bench --preset cpu --json` at 2 threads and at 1 thread (speedup, step_s,
#      roofline_s, roofline_ratio, mem_bandwidth_bytes_per_s; at 1 thread also
#      roofline_ratio_cpu_seconds), load average recorded inside the JSON;
#   2. the per-op roofline table with profiled times (benchmarks/roofline.py, 1 thread);
#   3. the cpu main job, end to end, timed (/usr/bin/time), into a fresh store and report: its
#      per-phase table is in the report's provenance ("Where the time went").
# Results go to benchmarks/results/quiet_<date>/. Skip the main job with MAIN_JOB=0, the benchmarks
# (1 and 2) with BENCH=0.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenMP's default wait policy (threads spin briefly between parallel regions): on a quiet machine
# PASSIVE (threads sleep) made the 2-thread packed step slower than the 1-thread one (77 vs 60 ms)
. .venv/bin/activate
OUT=benchmarks/results/quiet_$(date -u +%Y%m%dT%H%M)
mkdir -p "$OUT"
uptime | tee "$OUT/uptime_start.txt"
if [ "${BENCH:-1}" != "0" ]; then
depthscale bench --preset cpu --json > "$OUT/bench_2threads.json"
OMP_NUM_THREADS=1 python -c "import torch, json, sys; torch.set_num_threads(1); from depthscale.bench.speed import bench; \
json.dump(bench('cpu', 'cpu'), sys.stdout, indent=1)" > "$OUT/bench_1thread.json"
python benchmarks/roofline.py --preset cpu --threads 1 --steps 20 --out "$OUT/roofline_1thread.json" | tee "$OUT/roofline_1thread.md"
python - "$OUT" <<'EOF'
import json, sys
for name in ("bench_2threads", "bench_1thread"):
    r = json.load(open(f"{sys.argv[1]}/{name}.json"))
    keys = ("speedup", "step_s", "roofline_s", "roofline_ratio", "roofline_ratio_cpu_seconds",
            "mem_bandwidth_bytes_per_s", "peak_matmul_flops_per_s")
    print(name, {k: r.get(k) for k in keys}, "load", r["timing"]["loadavg_before"], "->", r["timing"]["loadavg_after"])
EOF
fi
if [ "${MAIN_JOB:-1}" != "0" ]; then
  STORE="runs/$(basename "$OUT")" REPORT="$OUT/report"  # the store (GBs) under the ignored runs/
  /usr/bin/time -v depthscale reproduce all --preset cpu --store "$STORE" --out "$REPORT" --executor process \
    2> "$OUT/main_job_time.txt"
  grep -E "Elapsed|Maximum resident|User time|System time" "$OUT/main_job_time.txt"
  sed -n '/Where the time went/,/^### Claims/p' "$REPORT/report.md"
fi
uptime | tee "$OUT/uptime_end.txt"
