#!/usr/bin/env bash
# Bounded libFuzzer run of the control-plane parser (tests/fuzz/fuzz_proto.c) with clang,
# ASan and UBSan. New inputs that reach new code are merged into tests/corpus/proto, which the
# test suite replays (ctest -R fuzz_proto). Usage: bench/fuzz_proto.sh [seconds, default 60]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I "$root/include" \
  -I "$root" "$root/tests/fuzz/fuzz_proto.c" "$root/runtime/proto.c" "$root/runtime/error.c" \
  -o "$work/fuzz_proto"
mkdir -p "$work/corpus"
cp "$root"/tests/corpus/proto/* "$work/corpus/"
"$work/fuzz_proto" -max_total_time="$secs" -max_len=4096 -print_final_stats=1 "$work/corpus" \
  2>&1 | grep -E "^(#|Done|stat::number_of_executed_units|stat::peak_rss|==|SUMMARY)" | tail -8
before=$(ls "$root/tests/corpus/proto" | wc -l)
"$work/fuzz_proto" -merge=1 "$root/tests/corpus/proto" "$work/corpus" >/dev/null 2>&1
after=$(ls "$root/tests/corpus/proto" | wc -l)
echo "fuzz_proto: ${secs} s, corpus $before -> $after inputs (tests/corpus/proto)"
