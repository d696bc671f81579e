#!/usr/bin/python3
"""profile_rank.py - runs a Python program in every rank of an mpirun job, and under cProfile
in one of them (the others run it as they would without this wrapper), so that a job's
training loop can be profiled where it runs, among its peers.

    mpirun ... -np 6 /usr/bin/python3 bench/profile_rank.py --rank 1 --out r1.prof -- \\
        examples/train_lm.py --steps 100 ...
    /usr/bin/python3 bench/profile_rank.py --report r1.prof [--steps 100]

--rank W: the world rank to profile (OMPI_COMM_WORLD_RANK; for an ftrt job world rank 1 is
logical rank 0 at the start, world rank 0 being the coordinator). --out FILE: where that rank
writes its profile (pstats format), also when the program exits with SystemExit. --report
FILE: prints the functions of a profile that a training step spends its time in (forward,
backward, the gradient hooks, the averaging's wait, ftrt's step() and its parts, the
optimizer, the reseed), as cumulative ms per call and per step (--steps: the steps the run
took; the first steps' start-up is included, so run enough of them). Python 3 standard
library only.
"""
import cProfile
import os
import pstats
import runpy
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)

def _py(fname, func):
    """Matches a Python function `func` defined in a file whose path ends with `fname`."""
    return lambda f, name: name == func and f.endswith(fname)


def _c(func):
    """Matches a C function or method of that name (pstats names them "<method 'x' ...>",
    "<built-in method x>")."""
    return lambda f, name: f == "~" and (f"'{func}'" in name or name.endswith(f" {func}>"))


def _optimizer_step(f, name):
    return name == "step" and "/torch/optim/" in f and not f.endswith("lr_scheduler.py")


# (what, predicate on (file, function name)): the parts of a step the report shows
PARTS = [
    ("forward (outermost nn.Module calls)", _py("torch/nn/modules/module.py", "_call_impl")),
    ("backward (autograd, hooks and in-backward waits included)", _c("run_backward")),
    ("ftrt: gradient hooks (ftrt_bucketer_ready)", _py("ftrt/pytorch.py", "hook")),
    ("ftrt: averaging ended at backward's end", _py("ftrt/pytorch.py", "_backward_end")),
    ("ftrt: ftrt_bucketer_wait_all", _py("ftrt/__init__.py", "wait_all")),
    ("ftrt: FaultTolerant.step()", _py("ftrt/pytorch.py", "step")),
    ("ftrt: FaultTolerant.steps() (reseed)", _py("ftrt/pytorch.py", "steps")),
    ("ftrt: Python state pickled", _py("ftrt/pytorch.py", "_save_state")),
    ("ftrt: ftrt_step_done (fingerprints every 10)", _py("ftrt/__init__.py", "step_done")),
    ("optimizer step (torch.optim)", _optimizer_step),
    ("torch generator reseed", _c("manual_seed")),
]


def report(path, steps):
    st = pstats.Stats(path)
    rows = []
    for what, match in PARTS:
        calls = cum = 0.0
        for (f, _line, name), (cc, _nc, _tt, ct, _callers) in st.stats.items():
            if match(f, name):  # primitive calls: a nested call's time is in its caller's
                calls += cc
                cum += ct
        if calls:
            rows.append((what, int(calls), cum))
    print(f"{path}: cumulative time per part ({steps or '?'} steps)")
    print(f"{'part':60s} {'calls':>7s} {'ms/call':>9s} {'ms/step':>9s}")
    for what, calls, cum in rows:
        per_step = f"{cum / steps * 1e3:9.3f}" if steps else f"{'':9s}"
        print(f"{what:60s} {calls:7d} {cum / calls * 1e3:9.3f} {per_step}")


def main():
    if "--report" in sys.argv[1:3]:
        ap = example_args.Parser(description="Prints a profile's time per part of a step.")
        ap.add_argument("--report", required=True, help="a profile written with --out")
        ap.add_argument("--steps", type=int, default=0, help="steps the profiled run took")
        a = ap.parse_args()
        example_args.check_paths(ap, a, inputs=("report",))
        report(a.report, a.steps)
        return 0
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = example_args.Parser(description=__doc__.split("\n\n")[0],
                             usage="%(prog)s --rank W --out FILE -- program [args ...]")
    ap.add_argument("--rank", type=int, help="the world rank to profile (required)")
    ap.add_argument("--out", help="its profile, pstats format (required)")
    a, unknown = ap.parse_known_args(argv[:cut])
    if unknown:
        ap.error(f"unrecognized arguments: {' '.join(unknown)}")
    if a.rank is None or a.out is None:
        ap.error("--rank and --out are required")
    if cut + 1 >= len(argv):
        ap.error("no program to run (after --)")
    a.program = argv[cut + 1]
    example_args.check_paths(ap, a, outputs=("out",), inputs=("program",))
    sys.argv = argv[cut + 1:]
    if os.environ.get("OMPI_COMM_WORLD_RANK", "0") != str(a.rank):
        runpy.run_path(a.program, run_name="__main__")
        return 0
    prof = cProfile.Profile()
    try:
        prof.enable()
        runpy.run_path(a.program, run_name="__main__")
    finally:
        prof.disable()
        prof.dump_stats(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
