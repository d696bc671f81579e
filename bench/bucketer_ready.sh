#!/usr/bin/env bash
# The single-thread cost of ftrt_bucketer_ready() before and after the hand-over between
# threads (ftrt_bucketer_ready_from_any_thread), in the same run: bench/bucketer_ready.c linked
# with this tree's comm/bucketer.c ("new") and with the one of commit BASE ("old", default
# cf9ab20, the commit before the hand-over), run alternately ROUNDS times; prints each run, the
# medians, the best runs and new/old (target: 1.00 within noise), and the hand-over's own costs. Where
# valgrind is installed it also counts the instructions per gradient of `ready` for both
# (cachegrind, the difference of a 1,000- and a 3,000-step run: setup cancels), a figure the
# machine's noise does not move.
# Usage: bench/bucketer_ready.sh [build dir, default build] [BASE] [ROUNDS, default 5]
# Needs a configured, built tree (libftrt_internal.a) and mpicc.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
base=${2:-cf9ab20}
rounds=${3:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
libs="$build/libftrt_internal.a $(pkg-config --libs liburing json-c) -lpthread -lm"
cflags="-O2 -std=c11 -D_GNU_SOURCE -DFTRT_BUILDING_LIBRARY -I $root/include -I $root -I $build -I $build/include"
# Both bucketers compiled here with the same flags, linked ahead of the archive (whose own
# bucketer object is then not pulled in).
git -C "$root" show "$base:comm/bucketer.c" >"$work/bucketer_old.c"
# shellcheck disable=SC2086
mpicc $cflags -c "$work/bucketer_old.c" -o "$work/bucketer_old.o"
# shellcheck disable=SC2086
mpicc $cflags -c "$root/comm/bucketer.c" -o "$work/bucketer_new.o"
# shellcheck disable=SC2086
mpicc $cflags -DREADY_ONLY "$root/bench/bucketer_ready.c" "$work/bucketer_old.o" $libs \
  -o "$work/old"
# shellcheck disable=SC2086
mpicc $cflags "$root/bench/bucketer_ready.c" "$work/bucketer_new.o" $libs -o "$work/new"
# shellcheck disable=SC2086
mpicc $cflags -DREADY_ONLY "$root/bench/bucketer_ready.c" "$work/bucketer_new.o" $libs \
  -o "$work/new_ready"
if command -v valgrind >/dev/null; then
  for v in old new_ready; do
    for steps in 1000 3000; do
      valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
        "$work/$v" "$steps" 2>&1 >/dev/null | awk -v v="$v" -v s="$steps" \
        '/I *refs:/ {gsub(",", "", $4); print v, s, $4}'
    done
  done >"$work/ir"
  awk '{ir[$1 "," $2] = $3} END {
    for (i = 1; i <= 2; i++) { v = i == 1 ? "old" : "new_ready";
      per[v] = (ir[v ",3000"] - ir[v ",1000"]) / (2000 * 1.1 * 256);
      printf "ready, instructions per gradient (cachegrind): %s %.1f\n", v, per[v] }
    printf "ready, instructions new/old: %.3f\n", per["new_ready"] / per["old"] }' "$work/ir"
fi
for i in $(seq "$rounds"); do
  "$work/old" | sed 's/^/old /'
  "$work/new" | sed 's/^/new /'
done | tee "$work/out"
/usr/bin/python3 - "$work/out" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    who, what = line.split(" ", 1)
    key = what.split(":")[0]
    runs.setdefault((who, key), []).append(float(what.split(":")[1].split()[0]))
med = {k: statistics.median(v) for k, v in runs.items()}
best = {k: min(v) for k, v in runs.items()}  # the run least disturbed by other processes
for name, f in (("median", med), ("best", best)):
    print(f"ready, {name} of {len(runs[('old', 'ready')])}: old {f[('old', 'ready')]:.1f} ns, "
          f"new {f[('new', 'ready')]:.1f} ns per gradient; new/old "
          f"{f[('new', 'ready')] / f[('old', 'ready')]:.3f}")
print(f"post+drain (same thread) / ready: "
      f"{med[('new', 'post+drain')] / med[('new', 'ready')]:.2f}; 4 posters / ready: "
      f"{med[('new', '4 posters')] / med[('new', 'ready')]:.2f}")
PY
