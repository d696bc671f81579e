#!/usr/bin/env bash
# Proves that ftrt builds and works without CUDA: configures the tree with a CUDA compiler that
# does not exist (as on a machine without the toolkit), builds the CPU runtime and the tests of
# the overlapped data plane, checks that no GPU library was produced and that libftrt does not
# link the CUDA runtime, and runs the CPU reference kernel, engine and bucket tests.
# Usage: check_nocuda.sh SOURCE_DIR SCRATCH_BUILD_DIR
set -euo pipefail
src=$1 build=$2
cmake -S "$src" -B "$build" -DFTRT_WERROR=ON -DCMAKE_CUDA_COMPILER=/nonexistent >"$build.log" 2>&1 ||
  { cat "$build.log"; exit 1; }
grep -q "building the CPU runtime only" "$build.log"
cmake --build "$build" -j"$(nproc)" --target ftrt test_kernels test_async test_bucket overlap_job \
  >>"$build.log" 2>&1 || { tail -50 "$build.log"; exit 1; }
if [ -n "$(find "$build" -name 'libftrt_gpu*' -print -quit)" ]; then
  echo "libftrt_gpu built without CUDA"; exit 1
fi
if ldd "$build"/libftrt.so | grep -Eq 'cudart|nccl'; then echo "libftrt links CUDA"; exit 1; fi
for t in kernels async bucket; do "$build/tests/test_$t" >/dev/null; done
echo "CPU-only build: OK"
