#!/bin/sh
# rsag_bench.sh - ftrt_reduce_scatter / ftrt_allgather against Open MPI's
# MPI_Reduce_scatter_block / MPI_Allgather in the same job (bench/rsag_bench.c; docs/
# benchmarks.md "Reduce-scatter and all-gather against Open MPI"): one mpirun job of
# 1 coordinator + RANKS trainers, no spare, oversubscribed and yielding when idle; prints the
# job's lines and then a table.
#
# Usage: bench/rsag_bench.sh [BUILD_DIR [REPS [RANKS [MIB_LIST]]]]   (default: build 7 4 4,16,64,256)
set -eu
build=${1:-build}
reps=${2:-7}
ranks=${3:-4}
mibs=${4:-4,16,64,256}
bin=$build/bench/rsag_bench
[ -x "$bin" ] || { echo "rsag_bench.sh: $bin not built (cmake --build $build --target rsag_bench)" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
FTRT_SPARES=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np $((ranks + 1)) --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
    "$bin" --mib "$mibs" --reps "$reps" | tee "$out" | grep -v '^RESULT' || true
echo
echo "| collective | MiB per rank | ftrt ms | MPI ms | ftrt GB/s | MPI GB/s | ftrt / MPI throughput | ftrt _start+wait ms | _start / MPI |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
grep '^RESULT' "$out" | sed 's/[a-z_]*=//g' |
    awk '{printf "| %s | %s | %.2f | %.2f | %.3f | %.3f | %.3f | %.2f | %.3f |\n", $2, $4, $5, $6, $8, $9, $11, $7, $12}'
