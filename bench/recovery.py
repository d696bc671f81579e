#!/usr/bin/env python3
"""Recovery benchmark: runs the train_mlp job N times (1 coordinator + 4 trainers + 1 hot spare),
SIGKILLs (or SIGSTOPs, or drains with tools/ftrt-ctl) trainer logical rank 2 at step 60 of each
run, and prints MTTD (true, from the injection time), MTTR and rework per run, then
median/min/max. Not a test: figures only.

With --bin-before OLD, the runs alternate between OLD and --bin (OLD first), so that both see
the same machine state, and the summary is given for each. With --fault kill-and-drain the runs
alternate a SIGKILL and a drain (same binary), and the summary compares the drain's time to
move (request to every member back in the loop: nothing to detect) with the kill's MTTD + MTTR,
and their rework, measured in the same run.

With --fault kill-and-shrink the runs alternate a SIGKILL replaced by the hot spare and a
SIGKILL with no spare under FTRT_NO_SPARE=shrink (1 coordinator + 4 trainers, no spare: the job
goes on with 3), and the summary compares their MTTD + MTTR and rework, measured in the same
run.

With --sharded K the momentum is sharded (partner replicas every K steps): a kill then resumes
from the replicas or the checkpoint and redoes steps, a drain from the replicas refreshed at its
step boundary.

Usage: bench/recovery.py [--runs N] [--fault sigkill|sigstop|drain|kill-and-drain|kill-and-shrink]
                         [--sharded K]
                         [--bin build/examples/train_mlp] [--bin-before OLD/examples/train_mlp]
"""
import os
import signal
import statistics
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "harness"))
import ftrt_harness as h  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SIGNALS = {"sigkill": signal.SIGKILL, "sigstop": signal.SIGSTOP}


def inject(job, fault):
    """The fault into trainer logical rank 2 once it has done 60 steps; the injection time."""
    victim = job.wait_trainer(2, 60)
    t = time.time()
    if fault == "drain":
        rc, out = job.drain("--rank", str(victim["world_rank"]), wait_s=0)
        if rc != 0:
            raise RuntimeError(f"ftrt-ctl drain: {out}")
    else:
        job.inject(SIGNALS[fault], victim, fault)
    return t


def one_run(work, i, binary, fault, sharded):
    """(MTTD ms, bound ms, MTTR ms, rework, goodput, kind) of one job, or None. Fault "shrink":
    a SIGKILL in a job of 4 trainers and no spare under FTRT_NO_SPARE=shrink."""
    args = h.MLP_ARGS + (["--sharded-momentum"] if sharded is not None else [])
    shrink = fault == "shrink"
    job = h.train_job(os.path.join(work, f"run{i}"), binary, 5 if shrink else 6, train_args=args,
                      spares=0 if shrink else None)
    if shrink:
        job.env["FTRT_NO_SPARE"] = "shrink"
        fault = "sigkill"
    if sharded is not None:
        job.env["FTRT_SHARD_REPLICA_EVERY"] = str(sharded)
    job.start()
    inject(job, fault)
    rc = job.wait(300)
    rep = job.load_report()
    if fault == "drain":
        d = rep["drains"][0] if rc == 0 and len(rep["drains"]) == 1 else None
        if not d or not d["moved"] or rep["failures"]:
            print(f"run {i}: the drain did not complete (rc {rc}); see {job.dir}")
            return None
        return (0.0, 0.0, d["time_to_move_s"] * 1e3, d["rework_steps"], rep["goodput"], "drain")
    if rc != 0 or len(rep["failures"]) != 1 or not rep["failures"][0]["recovered"]:
        print(f"run {i}: job did not recover (rc {rc}); see {job.dir}")
        return None
    f = rep["failures"][0]
    return (f["mttd_s"] * 1e3, f["mttd_bound_s"] * 1e3, f["mttr_s"] * 1e3, f["rework_steps"],
            rep["goodput"], f["kind"])


def summary(rows):
    for bname, rs in rows.items():
        for name, k in (("MTTD", 0), ("MTTD bound", 1), ("MTTR", 2)):
            v = [r[k] for r in rs]
            print(f"{bname:>6} {name:>10}: median {statistics.median(v):8.2f} ms  "
                  f"min {min(v):8.2f}  max {max(v):8.2f}")
    if set(rows) == {"kill", "shrink"}:
        kill = statistics.median(r[0] + r[2] for r in rows["kill"])
        shrink = statistics.median(r[0] + r[2] for r in rows["shrink"])
        print(f"shrink MTTD + MTTR {shrink:.2f} ms vs kill replaced by the spare {kill:.2f} ms: "
              f"{shrink / kill:.3f}x; rework (steps, each run): shrink "
              f"{[r[3] for r in rows['shrink']]}, kill {[r[3] for r in rows['kill']]}")
    if set(rows) == {"kill", "drain"}:
        kill = statistics.median(r[0] + r[2] for r in rows["kill"])
        drain = statistics.median(r[2] for r in rows["drain"])
        print(f"drain time to move {drain:.2f} ms vs kill MTTD + MTTR {kill:.2f} ms: "
              f"{drain / kill:.3f}x; rework (steps, each run): drain "
              f"{[r[3] for r in rows['drain']]}, kill {[r[3] for r in rows['kill']]}")


def main():
    ap = example_args.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--fault", choices=["sigkill", "sigstop", "drain", "kill-and-drain",
                                        "kill-and-shrink"],
                    default="sigkill")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "examples", "train_mlp"))
    ap.add_argument("--bin-before")
    ap.add_argument("--sharded", type=int, metavar="K",
                    help="momentum sharded (train_mlp --sharded-momentum), partner replicas "
                         "every K steps (FTRT_SHARD_REPLICA_EVERY)")
    a = ap.parse_args()
    example_args.check_paths(ap, a, inputs=("bin", "bin_before"))
    if a.fault == "kill-and-drain":
        plan = [("kill", a.bin, "sigkill"), ("drain", a.bin, "drain")]
    elif a.fault == "kill-and-shrink":
        plan = [("kill", a.bin, "sigkill"), ("shrink", a.bin, "shrink")]
    elif a.bin_before:
        plan = [("before", a.bin_before, a.fault), ("after", a.bin, a.fault)]
    else:
        plan = [("", a.bin, a.fault)]
    work = tempfile.mkdtemp(prefix="ftrt-bench-")
    rows = {name: [] for name, _, _ in plan}
    print(f"{'run':>3} {'bin':>6} {'kind':>18} {'MTTD ms':>9} {'bound ms':>9} {'MTTR ms':>9} "
          f"{'rework':>6} {'goodput':>8}")
    for i in range(a.runs * len(plan)):
        name, binary, fault = plan[i % len(plan)]
        r = one_run(work, i, binary, fault, a.sharded)
        if r is None:
            return 1
        rows[name].append(r)
        print(f"{i:>3} {name:>6} {r[5]:>18} {r[0]:9.2f} {r[1]:9.2f} {r[2]:9.2f} "
              f"{r[3]:6d} {r[4]:8.3f}", flush=True)
    summary(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
