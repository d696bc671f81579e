#!/usr/bin/env bash
# Builds here, on the Debian machine, the tree that scripts/gpu-run.sh runs on the GPU machine,
# so that no device time goes to configuring or compiling: build-gpu/ (git-ignored), configured
# as gpu-run.sh would (CUDA for sm_90, NCCL of the CUDA toolkit here, the kit's mpicc and
# mpirun, RPATHs relative to $ORIGIN) and built inside a private mount namespace where the
# system's Open MPI, PMIx, json-c, liburing and cmocka are hidden, under `env -i` with the kit's
# env.sh sourced (as scripts/gpu-sim.sh plays the GPU machine), so that it links only the kit's
# libraries. Then pruned of what a run does not use (objects, archives, CMakeFiles/, the ninja
# files, and the debug information of every ELF file but those run under compute-sanitizer),
# checked (`ldd -r`: every library and symbol of every program and library resolves), and
# described in build-gpu/PREBUILT (commit, nvcc, NCCL, and the paths its text files hold, which
# gpu-run.sh rewrites wherever the copy lies). Prints the sizes of the kit, the tree and the
# working tree that travel together, and fails if they exceed 64 MiB. The device call then
# carries ["gpukit", "build-gpu"] (docs/gpu.md).
#
# Usage (root, for unshare -m; after scripts/gpu-kit.sh): scripts/gpu-prep.sh [--arch SM (90)]
#   --arch: the GPU's CUDA architecture (90: H100, H200); gpu-run.sh --arch must say the same.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/gpu-lib.sh
. "$repo/scripts/gpu-lib.sh"
kit=$repo/gpukit
build=$repo/build-gpu
arch=90
bad() { echo "gpu-prep: $* (see scripts/gpu-prep.sh --help)" >&2; exit 2; }
fail() { echo "gpu-prep: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
    --arch) [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] ||
              bad "--arch: expected a CUDA architecture (90), got '${2:-}'"
            arch=$2; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) bad "unknown argument $1" ;;
  esac
done
say() { echo "gpu-prep: $*"; }
secs() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

case ${FTRT_GPU_PREP_STAGE:-} in
  '') # Here: checks, the namespace, then the sizes.
    [ -f "$kit/env.sh" ] || fail "no kit at $kit: run scripts/gpu-kit.sh first"
    [ "$(id -u)" = 0 ] || fail "needs root (unshare -m, to hide the system's Open MPI)"
    for t in unshare strip git du; do
      command -v $t >/dev/null || fail "$t is missing"
    done
    nvcc='' cuda_root=''
    gpu_find_cuda
    [ -n "$nvcc" ] || fail "no nvcc (PATH, CUDA_HOME, /usr/local/cuda)"
    t0=$(date +%s.%N)
    FTRT_GPU_PREP_STAGE=ns unshare -m --propagation private bash "$0" --arch "$arch"
    kit_b=$(du -sb "$kit" | cut -f1)
    build_b=$(du -sb "$build" | cut -f1)
    # What travels besides the carried folders: tracked and untracked-not-ignored files, shared/.
    tree_b=$(cd "$repo" && git ls-files -co --exclude-standard -z |
      du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    [ -d "$repo/shared" ] && tree_b=$((tree_b + $(du -sb "$repo/shared" | cut -f1)))
    total=$((kit_b + build_b + tree_b))
    say "sizes: kit $(mib "$kit_b") (gpukit), build $(mib "$build_b") (build-gpu), working tree $(mib "$tree_b"): $(mib "$total") of the 64 MiB that may travel"
    if [ "$total" -gt $((64 * 1024 * 1024)) ]; then
      fail "FAILED: $(mib "$total") is over 64 MiB"
    fi
    say "done in $(secs "$t0") s: carry [\"gpukit\", \"build-gpu\"] (docs/gpu.md)"
    exit 0 ;;
  ns) # In the private mount namespace: the system's libraries hidden, then a bare environment.
    gpu_hide_system 0
    bin=$(mktemp -d)/bin
    gpu_bare_path "$bin"
    exec env -i HOME=/root PATH="$bin" FTRT_GPU_PREP_STAGE=build \
      ${CUDA_HOME:+CUDA_HOME=$CUDA_HOME} ${NCCL_HOME:+NCCL_HOME=$NCCL_HOME} bash "$0" --arch "$arch" ;;
  build) ;;
  *) fail "FTRT_GPU_PREP_STAGE=$FTRT_GPU_PREP_STAGE: not one of this script's stages" ;;
esac

# The build, with the kit's libraries alone.
# shellcheck source=/dev/null
. "$kit/env.sh"
nvcc='' cuda_root='' sanitizer='' nsys=''
gpu_find_cuda
gpu_nccl_candidates "" # $NCCL_HOME or the toolkit's (the PyTorch wheel's is the GPU machine's)
[ ${#nccl_c_lib[@]} -gt 0 ] ||
  fail "no NCCL here (nccl.h and libnccl.so in the CUDA toolkit, or NCCL_HOME): the GPU run needs libftrt_gpu"
inc=${nccl_c_inc[0]} lib=${nccl_c_lib[0]}
nccl_version=$(gpu_nccl_version "$inc")
say "nvcc $nvcc; NCCL $nccl_version from ${nccl_c_from[0]} ($lib); mpicc $(command -v mpicc || echo none)"
case $(command -v mpicc) in "$kit"/*) ;; *) fail "mpicc is not the kit's" ;; esac
logs=$(mktemp -d "${TMPDIR:-/tmp}/ftrt-gpu-prep.XXXXXX")
rm -rf "$build"
gpu_cmake_cfg "$repo" "$build" "$arch" "$nvcc" "$inc" "$lib"
t=$(date +%s.%N)
"${cfg[@]}" >"$logs/configure.log" 2>&1 ||
  { tail -n 30 "$logs/configure.log" >&2; fail "configure failed ($logs/configure.log)"; }
say "configure: $(secs "$t") s; $(grep -E 'ftrt: (CUDA|NCCL)' "$logs/configure.log" | sed 's/^.*ftrt: //' | paste -sd';')"
t=$(date +%s.%N)
cmake --build "$build" -j "$(nproc)" "${keep_going[@]}" >"$logs/build.log" 2>&1 ||
  { grep -E 'error|FAILED' "$logs/build.log" | head -30 >&2; fail "build failed ($logs/build.log)"; }
say "build: $(secs "$t") s ($(nproc) cores)"
for f in libftrt_gpu.so examples/train_mlp_gpu tests/test_kernels_gpu tests/test_nccl; do
  [ -e "$build/$f" ] || fail "the build made no $f"
done
m=$(ldd "$build/libftrt_gpu.so" | grep -E 'libmpi|liburing|libjson' || true)
if grep -v -F "$kit/" <<<"$m" | grep -q .; then
  fail "libftrt_gpu.so links a library outside the kit: $(grep -v -F "$kit/" <<<"$m" | head -1)"
fi
t=$(date +%s.%N)
before=$(du -sb "$build" | cut -f1)
# Debug information kept where compute-sanitizer reports host backtraces (memcheck, memcheck-device).
gpu_prebuilt_prune "$build" 'libftrt_gpu.so*' tests/test_kernels_gpu examples/train_mlp_gpu
say "pruned: $(mib "$before") -> $(mib "$(du -sb "$build" | cut -f1)") in $(secs "$t") s"
dirty=$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null | wc -l)
{
  echo "# Made by scripts/gpu-prep.sh: ftrt built here for the GPU machine, pruned to what a run"
  echo "# uses; scripts/gpu-run.sh runs it without configuring or compiling (docs/gpu.md)."
  echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$([ "$dirty" = 0 ] || echo " with $dirty changed files")"
  echo "arch=$arch"
  echo "nvcc=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')"
  echo "nccl_version=$nccl_version"
  echo "nccl_from=${nccl_c_from[0]} ($lib)"
  echo "kit=$(head -1 "$kit/README")"
  echo "source_dir=$repo"
  echo "build_dir=$build"
  echo "kit_dir=$kit"
  echo "python3=$(sed -n 's/^FTRT_PYTHON3:[A-Z]*=//p' "$build/CMakeCache.txt")"
} >"$build/PREBUILT"
# The self-check: with NCCL's folder first on LD_LIBRARY_PATH, as gpu-run.sh puts it.
problems=$(LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} gpu_prebuilt_problems "$build")
[ -z "$problems" ] || { echo "$problems" | head -20 >&2; fail "the pruned tree does not load"; }
say "$(gpu_elf_files "$build" | wc -l) ELF files, every library and symbol resolved (ldd -r); $build/PREBUILT:"
sed '/^#/d; s/^/  /' "$build/PREBUILT"
rm -rf "$logs"
