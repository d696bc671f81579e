#!/bin/sh
# ordered_bench.sh - ftrt_allreduce_ordered against MPI_Iallreduce and ftrt_allreduce in the
# same job (bench/ordered_bench.c; docs/benchmarks.md "Fixed-order reduction against
# MPI_Iallreduce"): one mpirun job of 1 coordinator + RANKS trainers, no spare, oversubscribed
# and yielding when idle; prints the job's lines and then a table.
#
# Usage: bench/ordered_bench.sh [BUILD_DIR [REPS [RANKS [KIB_LIST [NLOGICAL]]]]]
#        (default: build 7 4 4,1024,16384,65536 RANKS; NLOGICAL > RANKS: a folded layout)
set -eu
build=${1:-build}
reps=${2:-7}
ranks=${3:-4}
kibs=${4:-4,1024,16384,65536}
nlogical=${5:-$ranks}
bin=$build/bench/ordered_bench
[ -x "$bin" ] || { echo "ordered_bench.sh: $bin not built (cmake --build $build --target ordered_bench)" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
FTRT_SPARES=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np $((ranks + 1)) --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
    "$bin" --kib "$kibs" --reps "$reps" --nlogical "$nlogical" | tee "$out" | grep -v '^RESULT' || true
echo
echo "| KiB | ordered ms | MPI_Iallreduce ms | ftrt_allreduce ms | ordered / MPI_Iallreduce | ordered / ftrt_allreduce |"
echo "|---:|---:|---:|---:|---:|---:|"
grep '^RESULT' "$out" | sed 's/[a-z_]*=//g' |
    awk '{printf "| %s | %.3f | %.3f | %.3f | %.2f | %.2f |\n", $4, $5, $6, $7, $8, $9}'
