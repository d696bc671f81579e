#!/bin/sh
# comm_group.sh - MPI_Comm_create_group over the world at several sizes (bench/comm_group.c;
# docs/benchmarks.md "MPI_Comm_create_group at scale"). Every size runs as one mpirun job of
# real processes on this machine (oversubscribed past its cores, yielding when idle), one
# after the other; prints each job's line and then a table.
#
# Usage: bench/comm_group.sh [BUILD_DIR [REPS [SIZE ...]]]   (default: build 50 2 4 8 16 32 64)
set -eu
build=${1:-build}
reps=${2:-50}
[ $# -gt 2 ] && shift 2 || set --
sizes=${*:-2 4 8 16 32 64}
bin=$build/bench/comm_group
[ -x "$bin" ] || { echo "comm_group.sh: $bin not built" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for p in $sizes; do
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun -n "$p" --oversubscribe --mca mpi_yield_when_idle 1 --bind-to none \
        "$bin" "$reps" | tee -a "$out" | grep -v '^RESULT'
done
echo
echo "| processes | create_group median (ms) | max (ms) | barrier (ms) | allreduce (ms) | create / barrier | create / allreduce |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
grep '^RESULT' "$out" | sed 's/[a-z_0-9]*=//g' |
    awk '{printf "| %d | %.3f | %.3f | %.3f | %.3f | %.1f | %.1f |\n", $2, $4, $5, $6, $7, $8, $9}'
