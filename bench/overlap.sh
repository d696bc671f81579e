#!/usr/bin/env bash
# Runs bench/overlap_bench over a matrix of configurations, each --reps times, and prints one
# table row per configuration with the median exposed/communication ratio (and its range).
# Usage: bench/overlap.sh [BUILD_DIR (default build)] [--reps N (3)] [--quick]
#   --quick: the two headline configurations only (the library's defaults: 25 MiB buckets with a
#   1 MiB first bucket, reduced in 4 MiB pieces; compute as long as the communication).
# Each configuration is one mpirun job: 1 coordinator + N trainers, no spare, on this machine.
set -euo pipefail
build=build
reps=3
quick=0
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    *) build=$1; shift ;;
  esac
done
bin=$build/bench/overlap_bench
[ -x "$bin" ] || { echo "build $bin first (cmake --build $build --target overlap_bench)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FTRT_SPARES=0

# name | trainers | env | overlap_bench flags
configs=(
  "sleep, 400 MiB, 25 MiB buckets, 4 MiB pieces|2||--grad-mib 400 --tensors 100 --compute sleep --compute-ratio 1.0"
  "sleep, 100 MiB, 25 MiB buckets, 4 MiB pieces|2||--grad-mib 100 --tensors 50 --compute sleep --compute-ratio 1.0"
)
if [ "$quick" = 0 ]; then
  configs+=(
    "sleep, 400 MiB, 25 MiB buckets, whole buckets (DDP)|2||--grad-mib 400 --tensors 100 --piece-mib 0 --compute sleep --compute-ratio 1.0"
    "sleep, 100 MiB, 25 MiB buckets, whole buckets (DDP)|2||--grad-mib 100 --tensors 50 --piece-mib 0 --compute sleep --compute-ratio 1.0"
    "sleep, 100 MiB, 5 MiB buckets, whole buckets (DDP)|2||--grad-mib 100 --tensors 50 --bucket-mib 5 --piece-mib 0 --compute sleep --compute-ratio 1.0"
    "sleep, 400 MiB, 4 MiB pieces, compute 2x|2||--grad-mib 400 --tensors 100 --compute sleep --compute-ratio 2.0"
    "sleep, 400 MiB, 4 MiB pieces, 4 trainers|4||--grad-mib 400 --tensors 100 --compute sleep --compute-ratio 1.0"
    "sleep, 400 MiB, 4 MiB pieces, no progress thread|2|FTRT_ASYNC_PROGRESS=0|--grad-mib 400 --tensors 100 --compute sleep --compute-ratio 1.0"
    "spin, 400 MiB, 4 MiB pieces|2||--grad-mib 400 --tensors 100 --compute spin --compute-ratio 1.0"
    "spin, 400 MiB, 4 MiB pieces, compute 2x|2||--grad-mib 400 --tensors 100 --compute spin --compute-ratio 2.0"
    "spin, 400 MiB, 4 MiB pieces, 4 trainers|4||--grad-mib 400 --tensors 100 --compute spin --compute-ratio 1.0"
  )
fi

printf '| configuration | trainers | compute ms | comm alone ms (CPU %%) | comm after compute ms | exposed ms | of which in wait_all ms | exposed/comm (median, min-max of %d) |\n' "$reps"
printf '|---|---|---|---|---|---|---|---|\n'
for c in "${configs[@]}"; do
  IFS='|' read -r name n envs flags <<<"$c"
  rows=()
  for ((i = 0; i < reps; i++)); do
    # shellcheck disable=SC2086
    line=$(env $envs mpirun --oversubscribe --bind-to none -np $((n + 1)) "$bin" $flags --steps 12 \
             2>/dev/null | grep '^RESULT' || true)
    [ -n "$line" ] && rows+=("$line")
  done
  if [ ${#rows[@]} -eq 0 ]; then
    printf '| %s | %s | failed | | | | | |\n' "$name" "$n"
    continue
  fi
  printf '%s\n' "${rows[@]}" | python3 -c '
import sys, statistics
rows = [dict(kv.split("=") for kv in l.split()[1:]) for l in sys.stdin if l.strip()]
r = sorted(float(x["ratio"]) for x in rows)
med = lambda k: statistics.median(float(x[k]) for x in rows)
print("| %s | %s | %.1f | %.1f (%.0f%%) | %.1f | %.2f | %.2f | %.3f (%.3f-%.3f) |" % (sys.argv[1],
      sys.argv[2], med("compute_ms"), med("comm_ms"), 100 * med("comm_cpu_ms") / med("comm_ms"),
      med("after_ms"), med("exposed_ms"), med("wait_ms"), statistics.median(r), r[0], r[-1]))
' "$name" "$n"
done
