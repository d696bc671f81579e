#!/usr/bin/env python3
"""Erasure groups against partner replicas: the refresh's cost and the MTTR of single and double
kills, in one run (docs/benchmarks.md "Erasure groups: refresh and recovery").

train_mlp with --sharded-momentum (its momentum, half of the state, is SHARDED: each trainer's
sharded image is S/2 MiB) at S MiB of state per trainer (--size, default 256), 1 coordinator +
4 trainers + 2 hot spares, FTRT_SHARD_REPLICA_EVERY=2 (a refresh every 2 steps), no
checkpoints. The variants, alternated run by run so that all see the same machine:

  replica 1 kill    FTRT_SHARD_REDUNDANCY=replica, trainer logical rank 2 SIGKILLed: its shard
                    from its partner's memory (one image moved);
  erasure 1 kill    FTRT_SHARD_REDUNDANCY=erasure (one group of 4, 2 parity): the same kill, the
                    shard rebuilt from the group's survivors (k - 2 = 2 fragments per chunk: a
                    rebuild moves (k - 2) images' worth of bytes per lost member);
  erasure 2 kills   logical ranks 1 and 2 SIGKILLed at once (with partner replicas: a rank and
                    its partner, which only the checkpoint recovers): both rebuilt from memory.

A kill that lands inside a refresh finds no complete generation (and no checkpoint here): the
job cannot recover and that run is drawn again (counted in "redrawn"). Per variant: the
median MTTR and its state-transfer phase (the report's phases_ms), and from fault-free runs of
the same jobs (--steps 12, plus one with the refresh off) the refresh's wall time per trainer
(the ledger's checkpoint_stall, which a refresh is charged to, over trainers x refreshes) and
the job's wall time. Not a test: figures only.

Usage: bench/erasure_recovery.py [--size 256] [--runs 3] [--bin build/examples/train_mlp]
                                 [--json FILE]
"""
import json
import os
import signal
import statistics
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)
import ftrt_harness as h  # noqa: E402
import example_args  # noqa: E402
from mttr_size import hidden_for  # noqa: E402

STEPS, EVERY = 12, 2
VARIANTS = [("replica 1 kill", "replica", [2]), ("erasure 1 kill", "erasure", [2]),
            ("erasure 2 kills", "erasure", [1, 2])]


def job_for(binary, mib, work, redundancy, every=EVERY):
    args = ["--steps", str(STEPS), "--batch", "1", "--hidden", str(hidden_for(mib)), "--seed",
            "3", "--ckpt-every", "0", "--step-sleep-ms", "20", "--sharded-momentum"]
    job = h.train_job(work, binary, 7, args, spares=2)
    job.env.update({"FTRT_PROGRESS_TIMEOUT_MS": "120000", "FTRT_HEARTBEAT_TIMEOUT_MS": "10000",
                    "FTRT_SHARD_REPLICA_EVERY": str(every),
                    "FTRT_SHARD_REDUNDANCY": redundancy, "FTRT_EC_GROUP": "4"})
    return job


def one_kill(binary, mib, work, redundancy, victims):
    """One job with `victims` SIGKILLed at once after 3 steps: the last recovery's report entry,
    or None when the job could not recover (a kill inside a refresh)."""
    job = job_for(binary, mib, work, redundancy).start()
    st = job.wait_status(lambda s: s.get("job") == "running" and all(
        (h.trainer(s, l) or {}).get("steps_done", 0) >= 3 for l in range(4)), timeout=900)
    for r in [h.trainer(st, l) for l in victims]:
        job.inject(signal.SIGKILL, r, "sigkill")
    rc = job.wait(900)
    fs = job.load_report().get("failures", [])
    if rc != 0 or len(fs) != len(victims) or not all(f["recovered"] for f in fs):
        return None
    last = max(fs, key=lambda f: f["epoch"])
    want = "replica" if redundancy == "replica" else "erasure"
    return last if last["state_from"] == want else None


def fault_free(binary, mib, work, redundancy, every):
    job = job_for(binary, mib, work, redundancy, every).start()
    rc = job.wait(900)
    rep = job.load_report()
    if rc != 0:
        raise SystemExit(f"fault-free {redundancy} run failed (rc {rc}); see {work}")
    stall = rep["ledger"]["rank_s_by_kind"].get("checkpoint_stall", 0.0)
    refreshes = STEPS // every if every > 0 else 0
    return {"wall_s": rep["wall_s"],
            "refresh_s": stall / (4 * refreshes) if refreshes else 0.0}


def main():
    root = os.path.join(HERE, "..")
    ap = example_args.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=float, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(root, "build", "examples", "train_mlp"))
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    example_args.check_paths(ap, a, outputs=("json",), inputs=("bin",))
    work = tempfile.mkdtemp(prefix="ftrt-erasure-")
    got = {n: [] for n, _, _ in VARIANTS}
    redrawn = {n: 0 for n, _, _ in VARIANTS}
    free = {n: [] for n in ("off", "replica", "erasure")}
    for i in range(a.runs):
        for n, red, victims in VARIANTS:
            for t in range(4):
                f = one_kill(a.bin, a.size, os.path.join(work, f"{red}-{len(victims)}-{i}-{t}"),
                             red, victims)
                if f:
                    got[n].append(f)
                    break
                redrawn[n] += 1
            else:
                raise SystemExit(f"{n}: 4 draws in a row did not recover from memory; see {work}")
        for n in free:
            free[n].append(fault_free(a.bin, a.size, os.path.join(work, f"free-{n}-{i}"),
                                      "replica" if n == "off" else n, -1 if n == "off" else EVERY))
    print(f"state {a.size:g} MiB per trainer (sharded image {a.size / 2:g} MiB), 4 trainers, "
          f"{a.runs} runs per variant", flush=True)
    print(f"{'variant':<16} {'MTTR ms':>8} {'transfer ms':>11} {'rework':>6} {'redrawn':>7}")
    out = {"size_mib": a.size, "runs": a.runs, "kills": {}, "fault_free": {}}
    for n, _, _ in VARIANTS:
        m = statistics.median(f["mttr_s"] for f in got[n]) * 1e3
        x = statistics.median(f["phases_ms"]["transfer"] for f in got[n])
        rw = max(f["rework_steps"] for f in got[n])
        print(f"{n:<16} {m:8.1f} {x:11.1f} {rw:6d} {redrawn[n]:7d}")
        out["kills"][n] = {"mttr_ms": [f["mttr_s"] * 1e3 for f in got[n]],
                           "transfer_ms": [f["phases_ms"]["transfer"] for f in got[n]],
                           "phases_ms": [f["phases_ms"] for f in got[n]],
                           "rework_steps": [f["rework_steps"] for f in got[n]],
                           "redrawn": redrawn[n]}
    base = statistics.median(r["wall_s"] for r in free["off"])
    print(f"fault-free, {STEPS} steps, refresh every {EVERY}: wall (median) and refresh per "
          f"trainer (checkpoint_stall / trainers / refreshes)")
    for n, rs in free.items():
        w = statistics.median(r["wall_s"] for r in rs)
        rf = statistics.median(r["refresh_s"] for r in rs) * 1e3
        print(f"  {n:<8} wall {w:7.3f} s ({w / base:5.2f}x off)  refresh {rf:7.1f} ms")
        out["fault_free"][n] = {"wall_s": [r["wall_s"] for r in rs],
                                "refresh_ms": [r["refresh_s"] * 1e3 for r in rs]}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
