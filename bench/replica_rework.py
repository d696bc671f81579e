#!/usr/bin/env python3
"""Rework and MTTR of a recovery with sharded state: partner replicas in memory against the
committed checkpoint, in one run of the same job.

The job: 1 coordinator + 4 trainers + 1 hot spare of train_mlp with its momentum registered
SHARDED (--sharded-momentum: a lost trainer's momentum exists nowhere else) and its parameters
replicated, S MiB of state per trainer, a checkpoint every --ckpt-every steps. Trainer logical
rank 2 is SIGKILLed once it has done --kill-at steps. Three replica settings, alternated run by
run so that all see the same machine:
  off       FTRT_SHARD_REPLICA_EVERY=-1: the lost shard comes from the checkpoint, so every
            member rolls back to the last committed checkpoint;
  ckpt      FTRT_SHARD_REPLICA_EVERY=0 (the default): replicas refreshed at each checkpoint, so
            the rollback goes to the same step, but the state comes from memory;
  every-K   FTRT_SHARD_REPLICA_EVERY=K: the rollback goes to the last multiple of K.
For each: the report's rework (steps redone, rank-seconds of rework), MTTR, where the state came
from, the cost of keeping the replicas (the ledger's checkpoint stall: the refresh is charged
there), and the job's wall time. Medians over --runs.

Usage: bench/replica_rework.py [--size-mib 64] [--runs 3] [--every 5] [--ckpt-every 25]
                               [--kill-at 47] [--steps 60] [--bin build/examples/train_mlp]
                               [--json FILE]
Not a test: figures only.
"""
import json
import os
import signal
import statistics
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "harness"))
import ftrt_harness as h  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)


def hidden_for(mib):
    """train_mlp --hidden H holds 2 x (75 H + 10) float32 (parameters + momentum)."""
    return max(1, int(mib * 1048576 / 600))


def waterfall(rep, cause):
    return sum(w["rank_s"] for w in rep.get("waterfall", []) if w["cause"] == cause)


def one_run(a, mode, every, work):
    args = ["--steps", str(a.steps), "--batch", "4", "--hidden", str(hidden_for(a.size_mib)),
            "--seed", "3", "--ckpt-every", str(a.ckpt_every), "--step-sleep-ms",
            str(a.step_sleep_ms), "--sharded-momentum"]
    job = h.train_job(work, a.bin, 6, args, spares=1)
    job.env["FTRT_SHARD_REPLICA_EVERY"] = str(every)
    job.env["FTRT_PROGRESS_TIMEOUT_MS"] = "120000"
    job.start()
    victim = job.wait_trainer(2, a.kill_at, timeout=900)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(900)
    rep = job.load_report()
    if rc != 0 or len(rep["failures"]) != 1 or not rep["failures"][0]["recovered"]:
        raise SystemExit(f"{mode}: job exit {rc}, failures {rep['failures']}:\n{job.out[-3000:]}")
    f = rep["failures"][0]
    return {"mode": mode, "state_from": f["state_from"], "resume_step": f["resume_step"],
            "rework_steps": f["rework_steps"], "rework_rank_s": rep["rework_rank_s"],
            "mttr_s": f["mttr_s"], "ckpt_stall_rank_s": waterfall(rep, "checkpoint_stall"),
            "wall_s": rep["wall_s"]}


def main():
    ap = example_args.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=float, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--ckpt-every", type=int, default=25)
    ap.add_argument("--kill-at", type=int, default=47)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--step-sleep-ms", type=int, default=40)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "build", "examples", "train_mlp"))
    ap.add_argument("--json")
    a = ap.parse_args()
    example_args.check_paths(ap, a, outputs=("json",), inputs=("bin",))
    modes = [("off", -1), ("ckpt", 0), (f"every-{a.every}", a.every)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="ftrt-replica-") as tmp:
        for r in range(a.runs):
            for mode, every in modes:
                x = one_run(a, mode, every, os.path.join(tmp, f"{mode}-{r}"))
                print(f"  run {r + 1} {mode:>9}: from {x['state_from']:<10} resume {x['resume_step']:>3} "
                      f"rework {x['rework_steps']:>2} steps {x['rework_rank_s']:.2f} rank-s  "
                      f"MTTR {x['mttr_s'] * 1e3:.0f} ms  ckpt stall {x['ckpt_stall_rank_s']:.2f} "
                      f"rank-s  wall {x['wall_s']:.1f} s", flush=True)
                rows.append(x)
    med = lambda m, k: statistics.median(x[k] for x in rows if x["mode"] == m)  # noqa: E731
    print(f"\n{a.size_mib:g} MiB of state per trainer (half of it sharded), 4 trainers + 1 spare, "
          f"checkpoint every {a.ckpt_every} steps, trainer 2 SIGKILLed after {a.kill_at} steps; "
          f"medians of {a.runs}:")
    print("| replicas | state from | resume step | rework steps | rework rank-s | MTTR ms | "
          "checkpoint stall rank-s (incl. refresh) |")
    print("|---|---|---|---|---|---|---|")
    base = med("off", "rework_rank_s")
    for mode, _ in modes:
        src = sorted({x["state_from"] for x in rows if x["mode"] == mode})
        print(f"| {mode} | {'/'.join(src)} | {med(mode, 'resume_step'):.0f} | "
              f"{med(mode, 'rework_steps'):.0f} | {med(mode, 'rework_rank_s'):.2f} | "
              f"{med(mode, 'mttr_s') * 1e3:.0f} | {med(mode, 'ckpt_stall_rank_s'):.2f} |")
    for mode, _ in modes[1:]:
        print(f"rework rank-s {mode} / off: {med(mode, 'rework_rank_s') / base:.2f}; "
              f"MTTR {mode} / off: {med(mode, 'mttr_s') / med('off', 'mttr_s'):.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
