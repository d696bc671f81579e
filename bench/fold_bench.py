#!/usr/bin/env python3
"""Step time folded against unfolded (FTRT_NO_SPARE=fold, docs/detection-and-recovery.md "No
spare left"): runs examples/train_mlp (no checkpoints, no sleep) in four shapes, one of each per
round, and prints the median step time of each and their ratios, measured in the same run:

  mpi       4 trainers, ftrt_allreduce (MPI_Iallreduce)
  ordered   4 trainers, --ordered (ftrt_allreduce_ordered, the fixed-order reduction a fold
            needs from step 0)
  folded    4 trainers under fold with --ordered, logical rank 1 SIGKILLed inside step 1
            (--die-rank): 3 trainers from then on, one computing two data ranks' microbatches
  three     3 trainers, --ordered (the same processes as folded, a quarter less data)

The step time is the report's kept_step_rank_s over (steps x trainers at the end): every
trainer waits for the slowest in the reduction, so it is the job's step time. Not a test:
figures only.

Usage: bench/fold_bench.py [--runs N] [--steps S] [--hidden H] [--batch B]
                           [--bin build/examples/train_mlp]
"""
import os
import statistics
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "harness"))
import ftrt_harness as h  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# shape -> (trainers, extra train_mlp arguments, FTRT_NO_SPARE)
SHAPES = {
    "mpi": (4, [], "stop"),
    "ordered": (4, ["--ordered"], "stop"),
    "folded": (4, ["--ordered", "--die-rank", "1", "--die-at-step", "1", "--check-every", "8"],
               "fold"),
    "three": (3, ["--ordered"], "stop"),
}


def one_run(work, i, a, shape):
    """The step time (ms) of one job of `shape`, or None (said why)."""
    trainers, extra, policy = SHAPES[shape]
    args = ["--steps", str(a.steps), "--batch", str(a.batch), "--hidden", str(a.hidden),
            "--seed", "7", "--ckpt-every", "0"] + extra
    job = h.train_job(os.path.join(work, f"run{i}-{shape}"), a.bin, trainers + 1, train_args=args,
                      spares=0)
    job.env["FTRT_NO_SPARE"] = policy
    job.start()
    rc = job.wait(600)
    rep = job.load_report() if rc == 0 else None
    want_folds = 1 if shape == "folded" else 0
    if not rep or rep["folds"] != want_folds or rep["steps"] != a.steps:
        print(f"run {i} {shape}: exit {rc}, not the expected job; see {job.dir}")
        return None
    return rep["kept_step_rank_s"] / (a.steps * rep["trainers_at_end"]) * 1e3


def main():
    ap = example_args.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "examples", "train_mlp"))
    a = ap.parse_args()
    example_args.check_paths(ap, a, inputs=("bin",))
    work = tempfile.mkdtemp(prefix="ftrt-fold-bench-")
    rows = {s: [] for s in SHAPES}
    print(f"{'run':>3} " + " ".join(f"{s + ' ms':>11}" for s in SHAPES))
    for i in range(a.runs):
        for s in SHAPES:
            t = one_run(work, i, a, s)
            if t is None:
                return 1
            rows[s].append(t)
        print(f"{i:>3} " + " ".join(f"{rows[s][-1]:11.3f}" for s in SHAPES), flush=True)
    med = {s: statistics.median(v) for s, v in rows.items()}
    print("median step time: " + ", ".join(f"{s} {med[s]:.3f} ms" for s in SHAPES))
    print(f"ordered / mpi {med['ordered'] / med['mpi']:.3f}x; folded / ordered "
          f"{med['folded'] / med['ordered']:.3f}x; folded / three {med['folded'] / med['three']:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
