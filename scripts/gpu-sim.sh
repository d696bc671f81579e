#!/usr/bin/env bash
# Plays the GPU machine here, as far as a machine without a GPU can, to check the kit of
# scripts/gpu-kit.sh, the prebuilt tree of scripts/gpu-prep.sh and scripts/gpu-run.sh before
# spending device time: copies the working tree (tracked and untracked-not-ignored files, as the
# device tool does), gpukit/ and, where gpu-prep.sh made it, build-gpu/ (as the device call
# carries them) into a scratch folder, and runs `bash scripts/gpu-run.sh` there under `env -i`,
# in a private mount namespace where the system's Open MPI, PMIx, json-c, liburing and cmocka
# are hidden (their programs replaced by one that fails, saying so; their libraries, headers and
# .pc files by empty files), and so is this checkout (an empty folder over it: nothing in the
# copy, the prebuilt tree's paths included, may reach back into it), with a PATH that has
# neither ssh nor pkg-config (the GPU image's likely state). The GPU tests exit 77 and the bench
# finds no device: what this shows is that the kit and the prebuilt tree (moved to the copy's
# path) or a build made in the copy run ftrt.
#
# Usage (root, for unshare -m): scripts/gpu-sim.sh [--wheel-nccl] [--no-prebuilt] [--keep]
#                               [--cmd CMD] [SCRATCH (/tmp/ftrt-gpu-sim)] [-- GPU-RUN-ARGS...]
#   --wheel-nccl: hide the toolkit's nccl.h and give the toolkit's NCCL as a PyTorch-style wheel
#   (site-packages/nvidia/nccl/{include,lib}) on PYTHONPATH, to exercise that search.
#   --no-prebuilt: leave build-gpu/ behind (gpu-run.sh then configures and builds in the copy).
#   --keep: reuse SCRATCH's copy, its build folders and its gpu-state/ (the tree and gpukit/ are
#   copied over it again, build-gpu/ only where the copy has none): a second device call on the
#   warm machine, e.g. `scripts/gpu-sim.sh --keep -- --rest`.
#   --cmd CMD: run `bash -c CMD` in the copy (same environment) instead of gpu-run.sh, e.g. a
#   job under tools/ftrt-run with the kit's mpirun after `. gpukit/env.sh`.
#   GPU-RUN-ARGS: gpu-run.sh's arguments (none: the device's first call, `bash scripts/gpu-run.sh`).
# Output: SCRATCH/console.log and SCRATCH/out (gpu-run.sh's $OUT); exit status: gpu-run.sh's
# (or CMD's).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/gpu-lib.sh
. "$repo/scripts/gpu-lib.sh"
args=("$@")
wheel=0
prebuilt=1
scratch=/tmp/ftrt-gpu-sim
cmd=
keep=0
run_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --wheel-nccl) wheel=1; shift ;;
    --no-prebuilt) prebuilt=0; shift ;;
    --cmd) [ $# -ge 2 ] && [ -n "$2" ] || { echo "gpu-sim: --cmd needs a command" >&2; exit 2; }
           cmd=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; run_args=("$@"); break ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    -*) echo "gpu-sim: unknown option $1 (see scripts/gpu-sim.sh --help)" >&2; exit 2 ;;
    *) scratch=$1; shift ;;
  esac
done
p=$scratch
while [ ! -e "$p" ]; do p=$(dirname "$p"); done
[ -d "$p" ] || { echo "gpu-sim: SCRATCH $scratch: $p is not a directory" >&2; exit 2; }
[ -f "$repo/gpukit/env.sh" ] || { echo "gpu-sim: no gpukit/: run scripts/gpu-kit.sh first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "gpu-sim: needs root (unshare -m)" >&2; exit 1; }
scratch=$(realpath -m "$scratch")
case $scratch/ in "$repo"/*) echo "gpu-sim: SCRATCH $scratch lies in the checkout: choose another" >&2; exit 2 ;; esac

if [ -z "${FTRT_GPU_SIM_INSIDE:-}" ]; then
  if [ $keep = 1 ] && [ -d "$scratch/repo" ]; then
    rm -rf "${scratch:?}/bin" "$scratch/site" "$scratch/out" "$scratch/repo/gpukit"
  else
    rm -rf "$scratch"
  fi
  mkdir -p "$scratch/repo"
  (cd "$repo" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$scratch/repo")
  cp -a "$repo/gpukit" "$scratch/repo/"
  if [ $prebuilt = 1 ] && [ -f "$repo/build-gpu/PREBUILT" ] && [ ! -d "$scratch/repo/build-gpu" ]; then
    cp -a "$repo/build-gpu" "$scratch/repo/"
    echo "gpu-sim: build-gpu/ of gpu-prep.sh copied (carried), from $repo to $scratch/repo"
  fi
  gpu_bare_path "$scratch/bin"   # PATH: /usr/bin less ssh, rsh and pkg-config.
  if [ $wheel = 1 ]; then
    inc=$(ls /usr/local/cuda/include/nccl.h 2>/dev/null || true)
    lib=$(ls /usr/local/cuda/lib*/libnccl.so.2 2>/dev/null | head -1 || true)
    [ -n "$inc" ] && [ -n "$lib" ] || { echo "gpu-sim: --wheel-nccl needs the toolkit's NCCL" >&2; exit 1; }
    mkdir -p "$scratch/site/nvidia/nccl/include" "$scratch/site/nvidia/nccl/lib"
    cp "$inc" "$scratch/site/nvidia/nccl/include/"
    cp -L "$lib" "$scratch/site/nvidia/nccl/lib/"
  fi
  set +e
  FTRT_GPU_SIM_INSIDE=1 unshare -m --propagation private "$0" "${args[@]}" >"$scratch/console.log" 2>&1
  rc=$?
  cat "$scratch/console.log"
  exit $rc
fi

# Inside the private mount namespace.
gpu_hide_system "$wheel"
mount --bind "$(mktemp -d)" "$repo"   # this checkout: the copy alone from here on
cd "$scratch/repo"
run=(bash scripts/gpu-run.sh "${run_args[@]}")
[ -n "$cmd" ] && run=(bash -c "$cmd")
pypath=
[ "$wheel" = 1 ] && pypath=$scratch/site
exec env -i HOME=/root PATH="$scratch/bin" ${pypath:+PYTHONPATH=$pypath} OUT="$scratch/out" \
  "${run[@]}"
