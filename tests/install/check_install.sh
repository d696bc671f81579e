#!/usr/bin/env bash
# Installs ftrt from the build tree into a scratch prefix, then builds and runs a consumer
# twice: with CMake's find_package(ftrt) (ftrt::ftrt) and with pkg-config (ftrt.pc).
# Usage: check_install.sh BUILD_DIR SOURCE_DIR SCRATCH_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/ftrt-run"
# the installed script finds its package (share/ftrt/python/ftrt_run) and runs
help=$("$work/prefix/bin/ftrt-run" --help)
grep -q "^Usage: ftrt-run" <<<"$help"
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/consumer/consumer"
pc=$(find "$work/prefix" -name ftrt.pc -print -quit)
export PKG_CONFIG_PATH=$(dirname "$pc")
cc -std=c11 $(pkg-config --cflags ftrt) "$src/tests/install/consumer/consumer.c" \
   $(pkg-config --libs ftrt) -o "$work/consumer_pc"
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/consumer_pc"
echo "install: find_package(ftrt) and pkg-config ftrt both work"
