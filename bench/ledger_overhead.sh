#!/usr/bin/env bash
# The goodput ledger's cost as a fraction of step time, both measured in this run: the
# recording micro-benchmark (bench/ledger_overhead.c) and the mean step time of a fault-free
# train_mlp job (4 trainers, default model, no step sleep), from its report.
# Usage: bench/ledger_overhead.sh [build dir, default build]   (target: < 1% of step time)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -std=c11 -D_GNU_SOURCE -I "$root/include" -I "$root" "$root/bench/ledger_overhead.c" \
   "$root/base/ledger.c" -lm -lpthread -o "$work/ledger_overhead"
rec=$("$work/ledger_overhead" | tee /dev/stderr | awk '{print $3}')
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 5 "$build/examples/train_mlp" \
  --steps 2000 --ckpt-every 0 --ckpt-dir "$work/ckpt" --report "$work/r.json" >/dev/null 2>&1
/usr/bin/python3 - "$work/r.json" "$rec" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); rec_ns = float(sys.argv[2])
step_s = r["kept_step_rank_s"] / (r["steps"] * r["trainers"])
print(f"train_mlp step time: {step_s * 1e6:.1f} us (mean over {r['steps']} steps x {r['trainers']} trainers)")
print(f"ledger cost / step time: {rec_ns * 1e-9 / step_s * 100:.3f}%  (target < 1%)")
PY
