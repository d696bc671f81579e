#!/usr/bin/env python3
"""Recovery benchmark: runs the train_mlp job N times (1 coordinator + 4 trainers + 1 hot spare),
SIGKILLs (or SIGSTOPs) trainer logical rank 2 at step 60 of each run, and prints MTTD (true, from
the injection time), MTTR and rework per run, then median/min/max. Not a test: figures only.

With --bin-before OLD, the runs alternate between OLD and --bin (OLD first), so that both see
the same machine state, and the summary is given for each.

Usage: bench/recovery.py [--runs N] [--fault sigkill|sigstop] [--bin build/examples/train_mlp]
                         [--bin-before OLD/examples/train_mlp]
"""
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


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ap = example_args.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--fault", choices=["sigkill", "sigstop"], default="sigkill")
    ap.add_argument("--bin", default=os.path.join(root, "build", "examples", "train_mlp"))
    ap.add_argument("--bin-before")
    a = ap.parse_args()
    example_args.check_paths(ap, a, inputs=("bin", "bin_before"))
    bins = [("before", a.bin_before), ("after", a.bin)] if a.bin_before else [("", a.bin)]
    work = tempfile.mkdtemp(prefix="ftrt-bench-")
    sig = signal.SIGKILL if a.fault == "sigkill" else signal.SIGSTOP
    rows = {name: [] for name, _ in bins}
    print(f"{'run':>3} {'bin':>6} {'kind':>18} {'MTTD ms':>9} {'bound ms':>9} {'MTTR ms':>9} "
          f"{'rework':>6} {'goodput':>8}")
    for i in range(a.runs * len(bins)):
        name, binary = bins[i % len(bins)]
        # the train_mlp job of the integration tests (ftrt_harness.MLP_ARGS), 6 ranks
        job = h.train_job(os.path.join(work, f"run{i}"), binary).start()
        job.inject(sig, job.wait_trainer(2, 60), a.fault)
        rc = job.wait(300)
        rep = job.load_report()
        if rc != 0 or len(rep["failures"]) != 1 or not rep["failures"][0]["recovered"]:
            print(f"run {i}: job did not recover (rc {rc}); see {job.dir}")
            return 1
        f = rep["failures"][0]
        r = (f["mttd_s"] * 1e3, f["mttd_bound_s"] * 1e3, f["mttr_s"] * 1e3)
        rows[name].append(r)
        print(f"{i:>3} {name:>6} {f['kind']:>18} {r[0]:9.2f} {r[1]:9.2f} {r[2]:9.2f} "
              f"{f['rework_steps']:6d} {rep['goodput']:8.3f}", flush=True)
    for bname, _ in bins:
        for name, k in (("MTTD", 0), ("MTTD bound", 1), ("MTTR", 2)):
            v = [r[k] for r in rows[bname]]
            print(f"{bname:>6} {name:>10}: median {statistics.median(v):8.2f} ms  min {min(v):8.2f}  "
                  f"max {max(v):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
