#!/usr/bin/env bash
# Profiles one rank of an mpirun job with Nsight Systems and prints nsys's summaries of it (the
# gpu-run.sh step nsys-overlap, issue 21: where the NCCL plane's allreduce time goes before
# anything is changed). The rank whose OMPI_COMM_WORLD_RANK is TRAINER_RANK runs under
# `nsys profile --trace cuda,nvtx,osrt`; the others run as they are. Then `nsys stats` prints
# the kernel, CUDA API and memory-operation summaries (cuda_gpu_kern_sum, cuda_api_sum,
# cuda_gpu_mem_time_sum) to stdout. The report (.nsys-rep, large) lives in a temporary
# directory that is removed at the end: only the summaries are kept, in the caller's log.
#
# Usage: scripts/nsys-trainer.sh NSYS TRAINER_RANK MPIRUN_ARGS... -- PROGRAM ARGS...
#   e.g. scripts/nsys-trainer.sh /usr/local/cuda/bin/nsys 1 --oversubscribe -np 2 -- \
#        build-gpu/bench/overlap_gpu_bench --grad-mib 400 --steps 20
# Exit status: the job's (mpirun's) when it failed, else nsys stats'.
set -uo pipefail
if [ $# -lt 4 ]; then
  sed -n '10,13p' "$0" >&2
  exit 2
fi
nsys=$1 rank=$2
shift 2
margs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do margs+=("$1"); shift; done
[ "${1:-}" = -- ] || { echo "nsys-trainer: no -- before the program" >&2; exit 2; }
shift
dir=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-nsys.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
rep=$dir/trainer
echo "nsys: $("$nsys" --version 2>&1 | head -1)"
mpirun "${margs[@]}" bash -c '
  nsys=$1 rank=$2 rep=$3; shift 3
  if [ "${OMPI_COMM_WORLD_RANK:-}" = "$rank" ]; then
    exec "$nsys" profile --trace cuda,nvtx,osrt --sample none --cpuctxsw none \
      --force-overwrite true --output "$rep" "$@"
  fi
  exec "$@"' _ "$nsys" "$rank" "$rep" "$@"
rc=$?
if [ ! -f "$rep.nsys-rep" ]; then
  echo "nsys-trainer: no report $rep.nsys-rep (job exit $rc)" >&2
  exit $((rc ? rc : 1))
fi
"$nsys" stats --force-export true --format column \
  --report cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum "$rep.nsys-rep"
src=$?
exit $((rc ? rc : src))
