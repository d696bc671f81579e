#!/usr/bin/env bash
# Bounded libFuzzer runs of the checkpoint parsers with clang, ASan and UBSan:
#   fuzz_ckpt_shard     shard header + region table (ftrt__shard_peek / ftrt__shard_parse)
#   fuzz_ckpt_manifest  MANIFEST (ftrt__manifest_parse) and LATEST (ftrt__latest_parse)
# Each runs for the given number of seconds from its corpus (tests/corpus/ckpt_shard,
# tests/corpus/ckpt_manifest); new inputs that reach new code are merged back, and the test
# suite replays both corpora (ctest -R fuzz_ckpt). A crash stops the script with the
# reproducer's path. Usage: bench/fuzz_ckpt.sh [seconds per fuzzer, default 60]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
srcs=("$root/checkpoint/shard.c" "$root/checkpoint/crc32c.c" "$root/checkpoint/commit.c"
      "$root/checkpoint/restore.c" "$root/checkpoint/uring.c" "$root/runtime/log.c"
      "$root/runtime/error.c")
for f in shard manifest; do
  clang -g -O1 -std=c11 -D_GNU_SOURCE -DFTRT_BUILDING_LIBRARY -DFTRT_FUZZ_STANDALONE \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I "$root/include" -I "$root" "$root/tests/fuzz/fuzz_ckpt_$f.c" "${srcs[@]}" \
    $(pkg-config --cflags --libs liburing json-c) -lpthread -o "$work/fuzz_ckpt_$f"
  corpus="$root/tests/corpus/ckpt_$f"
  mkdir -p "$work/corpus_$f" "$work/crash_$f"
  cp "$corpus"/* "$work/corpus_$f/"
  echo "== fuzz_ckpt_$f: $secs s"
  FTRT_LOG=error "$work/fuzz_ckpt_$f" -max_total_time="$secs" -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$work/crash_$f/" "$work/corpus_$f" 2>&1 |
    grep -E "^(#[0-9]+ +DONE|Done|stat::number_of_executed_units|stat::peak_rss|==[0-9]+==|SUMMARY)" |
    tail -6 || true
  if ls "$work/crash_$f"/* >/dev/null 2>&1; then
    mkdir -p "$root/tests/corpus/ckpt_${f}_crashes"
    cp "$work/crash_$f"/* "$root/tests/corpus/ckpt_${f}_crashes/"
    echo "fuzz_ckpt_$f: FOUND A CRASH; reproducers in tests/corpus/ckpt_${f}_crashes" >&2
    exit 1
  fi
  before=$(ls "$corpus" | wc -l)
  FTRT_LOG=error "$work/fuzz_ckpt_$f" -merge=1 "$corpus" "$work/corpus_$f" >/dev/null 2>&1
  after=$(ls "$corpus" | wc -l)
  echo "fuzz_ckpt_$f: ${secs} s, corpus $before -> $after inputs (tests/corpus/ckpt_$f)"
done
