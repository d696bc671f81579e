#!/usr/bin/env bash
# The silent data corruption check's cost, both parts measured in this run: CRC32C throughput
# (bench/sdc_cost.c, next to the memory read bandwidth), and, from the reports of fault-free
# train_mlp jobs (2 trainers, one per core, no step sleep, no checkpoints, FTRT_SDC_EVERY=1: a
# fingerprint every step), the fingerprint's time per check over the mean step time, for the
# default model and a larger one. K(1%) = the smallest FTRT_SDC_EVERY that keeps the fingerprints at or below
# 1% of step time. Usage: bench/sdc_cost.sh [build dir, default build]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -std=c11 -D_GNU_SOURCE -I "$root/include" -I "$root" "$root/bench/sdc_cost.c" \
   "$root/base/crc32c.c" -o "$work/sdc_cost"
echo "bytes      CRC32C GB/s   memory read GB/s"
"$work/sdc_cost" | awk '{printf "%-10s %8s      %8s\n", $1, $3, $5}'
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for hidden in 64 1024; do
  FTRT_SPARES=0 FTRT_SDC_EVERY=1 mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
    -np 3 "$build/examples/train_mlp" --steps 2000 --hidden $hidden --ckpt-every 0 \
    --ckpt-dir "$work/ckpt" --report "$work/r$hidden.json" >/dev/null 2>&1
  /usr/bin/python3 - "$work/r$hidden.json" $hidden <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1])); s = r["sdc"]
step_s = r["kept_step_rank_s"] / (r["steps"] * r["trainers"])
fp_s = s["fingerprint_rank_s"] / s["fingerprints"]
nbytes = 2 * 4 * (75 * int(sys.argv[2]) + 10)
print(f"train_mlp --hidden {sys.argv[2]}: replicated {nbytes / 1024:.1f} KiB, step {step_s * 1e6:.1f} us, "
      f"fingerprint {fp_s * 1e6:.2f} us = {100 * fp_s / step_s:.3f}% of a step "
      f"({nbytes / fp_s / 1e9:.2f} GB/s); K(1%) = {math.ceil(fp_s / (0.01 * step_s))}")
PY
done
