#!/usr/bin/env bash
# Plays the GPU machine here, as far as a machine without a GPU can, to check the kit of
# scripts/gpu-kit.sh and scripts/gpu-run.sh before spending device time: copies the working tree
# (tracked and untracked-not-ignored files, as the device tool does) and gpukit/ into a scratch
# folder, and runs `bash scripts/gpu-run.sh` there under `env -i`, in a private mount namespace
# where the system's Open MPI, PMIx, json-c, liburing and cmocka are hidden (their programs
# replaced by one that fails, saying so; their libraries, headers and .pc files by empty files),
# with a PATH that has neither ssh nor pkg-config (the GPU image's likely state). The GPU tests
# exit 77 and the bench finds no device: what this shows is that the kit builds and runs ftrt.
#
# Usage (root, for unshare -m): scripts/gpu-sim.sh [--wheel-nccl] [--cmd CMD [--keep]]
#                                                  [SCRATCH (/tmp/ftrt-gpu-sim)]
#   --wheel-nccl: hide the toolkit's nccl.h and give the toolkit's NCCL as a PyTorch-style wheel
#   (site-packages/nvidia/nccl/{include,lib}) on PYTHONPATH, to exercise that search.
#   --cmd CMD: run `bash -c CMD` in the copy (same environment) instead of gpu-run.sh, e.g. a
#   job under tools/ftrt-run with the kit's mpirun after `. gpukit/env.sh`;
#   --keep: reuse SCRATCH's copy and its build folders (the tree is copied over it again).
# Output: SCRATCH/console.log and SCRATCH/out (gpu-run.sh's $OUT); exit status: gpu-run.sh's
# (or CMD's).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
wheel=0
scratch=/tmp/ftrt-gpu-sim
cmd=
keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --wheel-nccl) wheel=1; shift ;;
    --cmd) [ $# -ge 2 ] && [ -n "$2" ] || { echo "gpu-sim: --cmd needs a command" >&2; exit 2; }
           cmd=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    -*) echo "gpu-sim: unknown option $1 (see scripts/gpu-sim.sh --help)" >&2; exit 2 ;;
    *) scratch=$1; shift ;;
  esac
done
p=$scratch
while [ ! -e "$p" ]; do p=$(dirname "$p"); done
[ -d "$p" ] || { echo "gpu-sim: SCRATCH $scratch: $p is not a directory" >&2; exit 2; }
[ -f "$repo/gpukit/env.sh" ] || { echo "gpu-sim: no gpukit/: run scripts/gpu-kit.sh first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "gpu-sim: needs root (unshare -m)" >&2; exit 1; }

if [ -z "${FTRT_GPU_SIM_INSIDE:-}" ]; then
  if [ $keep = 1 ] && [ -d "$scratch/repo" ]; then
    rm -rf "$scratch/bin" "$scratch/site" "$scratch/out" "$scratch/repo/gpukit"
  else
    rm -rf "$scratch"
  fi
  mkdir -p "$scratch/repo" "$scratch/bin"
  (cd "$repo" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$scratch/repo")
  cp -a "$repo/gpukit" "$scratch/repo/"
  # PATH: /usr/bin less ssh, rsh and pkg-config.
  for f in /usr/bin/*; do
    case ${f##*/} in ssh|rsh|slogin|pkg-config|pkgconf|*-pkg-config|*-pkgconf) continue ;; esac
    ln -s "$f" "$scratch/bin/"
  done
  pypath=
  if [ $wheel = 1 ]; then
    inc=$(ls /usr/local/cuda/include/nccl.h 2>/dev/null || true)
    lib=$(ls /usr/local/cuda/lib*/libnccl.so.2 2>/dev/null | head -1 || true)
    [ -n "$inc" ] && [ -n "$lib" ] || { echo "gpu-sim: --wheel-nccl needs the toolkit's NCCL" >&2; exit 1; }
    mkdir -p "$scratch/site/nvidia/nccl/include" "$scratch/site/nvidia/nccl/lib"
    cp "$inc" "$scratch/site/nvidia/nccl/include/"
    cp -L "$lib" "$scratch/site/nvidia/nccl/lib/"
    pypath=$scratch/site
  fi
  set +e
  FTRT_GPU_SIM_INSIDE=1 unshare -m --propagation private "$0" "$scratch" \
    >"$scratch/console.log" 2>&1 <<<"$wheel $pypath
$cmd"
  rc=$?
  cat "$scratch/console.log"
  exit $rc
fi

# Inside the private mount namespace.
read -r wheel pypath
cmd=$(cat)
ma=x86_64-linux-gnu
empty=$(mktemp -d)
fail=$(mktemp)
printf '#!/bin/sh\necho "gpu-sim: the SYSTEM Open MPI was used: $0" >&2\nexit 97\n' >"$fail"
chmod +x "$fail"
# Debian's scikit-learn too: its digits data set is examples/train_mlp's default --data.
for d in /usr/lib/$ma/openmpi /usr/lib/$ma/pmix2 /etc/openmpi /usr/share/openmpi \
         /usr/include/json-c /usr/include/liburing /usr/lib/$ma/ucx \
         /usr/lib/python3/dist-packages/sklearn; do
  [ -d "$d" ] && mount --bind "$empty" "$d"
done
for f in /usr/bin/opal_wrapper /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info; do
  [ -e "$f" ] && mount --bind "$fail" "$f"
done
for f in /usr/lib/$ma/libmpi.so.40.* /usr/lib/$ma/libopen-pal.so.40.* /usr/lib/$ma/libopen-rte.so.40.* \
         /usr/lib/$ma/libpmix.so.2.* /usr/lib/$ma/libjson-c.so.5.* /usr/lib/$ma/liburing.so.2.* \
         /usr/lib/$ma/libcmocka.so.0.* /usr/lib/$ma/libhwloc.so.15.* /usr/lib/$ma/libevent_core-2.1.so.7.* \
         /usr/lib/$ma/pkgconfig/json-c.pc /usr/lib/$ma/pkgconfig/liburing.pc /usr/lib/$ma/pkgconfig/cmocka.pc \
         /usr/lib/$ma/pkgconfig/ompi.pc /usr/lib/$ma/pkgconfig/ompi-c.pc /usr/include/liburing.h /usr/include/cmocka.h; do
  [ -e "$f" ] && mount --bind /dev/null "$f"
done
if [ "$wheel" = 1 ]; then
  for f in /usr/local/cuda/include/nccl.h /usr/local/include/nccl.h; do
    [ -e "$f" ] && mount --bind /dev/null "$f"
  done
fi
cd "$scratch/repo"
run=(bash scripts/gpu-run.sh --budget 1800)
[ -n "$cmd" ] && run=(bash -c "$cmd")
exec env -i HOME=/root PATH="$scratch/bin" ${pypath:+PYTHONPATH=$pypath} OUT="$scratch/out" \
  "${run[@]}"
