#!/usr/bin/env bash
# The ftrt demo: data-parallel MLP training on the UCI digits with 1 coordinator + 4 trainers
# + 1 hot spare under `mpirun --enable-recovery`. Partway through, one trainer is killed with
# SIGKILL (chosen from the status file); the spare takes its place in place, the job finishes,
# and the coordinator prints its report (MTTD, MTTR, rework, goodput) and rank 0 the accuracy.
# Installs missing Debian packages and builds ftrt first. Usage: examples/demo.sh [train_mlp flags]
# (`build/examples/train_mlp --help` lists them; later flags override the demo's). The run's
# files go to FTRT_DEMO_DIR (default demo-run/ at the repository root), emptied first.
set -euo pipefail
for a in "$@"; do
  case $a in -h|--help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
run=${FTRT_DEMO_DIR:-$root/demo-run}
bad=$run
while [ ! -e "$bad" ]; do bad=$(dirname "$bad"); done
[ -d "$bad" ] || { echo "demo: FTRT_DEMO_DIR $run: $bad is not a directory" >&2; exit 2; }
bash scripts/ensure-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target train_mlp >/dev/null
# the flags, checked before the job starts (train_mlp prints one line naming a bad one)
build/examples/train_mlp "$@" --help >/dev/null || exit 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

rm -rf "$run" && mkdir -p "$run"
export FTRT_FAULT_LOG=$run/faults.jsonl   # ground truth for the report's MTTD
status=$run/ckpt/status.json
steps=300 victim=2 kill_at=120

echo "ftrt demo: 1 coordinator + 4 trainers + 1 hot spare, $steps steps; trainer $victim is killed once the status file shows $kill_at steps done"
tools/ftrt-run --status "$status" -- mpirun --enable-recovery --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 6 \
  build/examples/train_mlp --steps $steps --step-sleep-ms 10 --ckpt-every 50 \
  --ckpt-dir "$run/ckpt" --report "$run/report.json" --params-out "$run/final.params" "$@" &
job=$!

# Wait until the victim has done kill_at steps, then SIGKILL it and log the injection.
/usr/bin/python3 - "$status" "$victim" "$kill_at" "$FTRT_FAULT_LOG" "$job" <<'PY'
import json, os, signal, sys, time
status, victim, kill_at, log, job = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
deadline = time.time() + 120
while time.time() < deadline:
    try:
        os.kill(job, 0)
    except ProcessLookupError:
        sys.exit("demo: the job ended before the fault could be injected")
    try:
        st = json.load(open(status))
    except (OSError, ValueError):
        time.sleep(0.02); continue
    for r in st["ranks"]:
        if r["role"] == "trainer" and r["logical_rank"] == victim and r["steps_done"] >= kill_at:
            with open(log, "a") as f:
                f.write(json.dumps({"time": time.time(), "kind": "sigkill", "pid": r["pid"],
                                    "world_rank": r["world_rank"]}) + "\n")
            os.kill(r["pid"], signal.SIGKILL)
            print(f"demo: SIGKILL -> trainer logical rank {victim} (world rank {r['world_rank']}, pid {r['pid']}) (the status file, refreshed every 0.25 s, showed {r['steps_done']} steps done)", flush=True)
            sys.exit(0)
    time.sleep(0.02)
sys.exit("demo: timed out waiting for the victim to reach the kill step")
PY
rc=0
wait $job || rc=$?
echo "demo: job exited with code $rc; JSON report: $run/report.json"
exit $rc
