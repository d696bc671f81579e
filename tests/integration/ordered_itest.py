#!/usr/bin/env python3
"""MPI integration tests of the fixed-order allreduce (ftrt_allreduce_ordered, comm/ordered.c;
issue 35): real mpirun jobs of tests/integration/ordered_job, 4 logical ranks held by 4, 3, 2
and 1 trainer(s).

Usage: ordered_itest.py --bin BUILD/tests/integration/ordered_job --work DIR <case>
       ordered_itest.py --list   (for CMake)
Cases:
  layouts  the same contributions (seed, logical rank) reduced in six layouts: "0|1|2|3"
           (4 trainers), "0|1,2|3" (3, one holding 2), "0,1|2,3" and "0,2|1,3" (2 trainers
           holding 2 each, contiguous and interleaved), "0,1,2,3" (1 trainer), "0,1||2,3" (3,
           one holding none). In every run
           every trainer checks each result byte for byte against the logical-order sum it
           computes itself (every dtype, several counts, in place) and that bad arguments are
           FTRT_EINVAL on every trainer with out unchanged; across the runs the results'
           digests must be equal. How often ftrt_allreduce (MPI_Iallreduce) differs from the
           logical order is printed, not checked.
  kill     4 trainers + 1 hot spare loop over ordered allreduces of 2,000,003 float32 (each
           checked against the logical-order sum); trainer 2 is SIGKILLed meanwhile: every
           survivor's interrupted call returns FTRT_ERECOVER with out unchanged, the spare
           takes logical rank 2, and the job finishes with every result right.
Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import os
import re
import signal
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import ftrt_harness as h  # noqa: E402
from ftrt_harness import check  # noqa: E402

CASES = {}
LAYOUTS = ["0|1|2|3", "0|1,2|3", "0,1|2,3", "0,2|1,3", "0,1,2,3", "0,1||2,3"]


def run_layout(args, layout):
    """ordered_job with `layout` (one trainer per '|' group) + the coordinator, no spare; returns
    the digest lines trainer 0 wrote."""
    name = "P%d-%s" % (layout.count("|") + 1, re.sub(r"[|,]", "_", layout.replace("||", "|x|")))
    d = os.path.join(args.work, name)
    digest = os.path.join(d, "digest.txt")
    cmd = h.mpirun_cmd(layout.count("|") + 2, [args.bin, "--layout", layout, "--digest", digest])
    job = h.Job(d, h.ftrt_run_cmd(cmd), h.job_env({"FTRT_LOG": "error"}, spares=0),
                fresh=True).start()
    rc = job.wait(240)
    for line in job.out.splitlines():
        if "ordered_job" in line:
            print("   ", line, flush=True)
    check(rc == 0, f"layout {layout}: the job exits 0, every check passed (got {rc})")
    with open(digest) as f:
        lines = f.read().splitlines()
    check(len(lines) == 5 * 4 + 1, f"layout {layout}: {len(lines)} results digested")
    return lines


@h.case(CASES, timeout_s=900)
def case_layouts(args):
    first = None
    for layout in LAYOUTS:
        lines = run_layout(args, layout)
        if first is None:
            first = lines
        else:
            check(lines == first, f"layout {layout}: results byte-identical to layout {LAYOUTS[0]}")


LOOP_STEPS = 150


@h.case(CASES, timeout_s=300)
def case_kill(args):
    d = os.path.join(args.work, "kill")
    status, report = os.path.join(d, "status.json"), os.path.join(d, "report.json")
    cmd = h.mpirun_cmd(6, [args.bin, "--layout", "0|1|2|3", "--loop", str(LOOP_STEPS)])
    env = h.job_env({"FTRT_REPORT": report, "FTRT_LOG": "warn",
                     "FTRT_FAULT_LOG": os.path.join(d, "faults.jsonl")}, spares=1)
    job = h.Job(d, h.ftrt_run_cmd(cmd, status=status), env, status=status, fresh=True)
    job.report = report
    job.start()
    victim = job.wait_trainer(2, 20, timeout=120, poll_s=0.01)
    print(f"  logical rank 2 at {victim['steps_done']} steps", flush=True)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(240)
    lines = [ln for ln in job.out.splitlines() if "ordered_job" in ln]
    for line in lines:
        print("   ", line, flush=True)
    check(rc == 0, f"the job survives the kill and exits 0, every result right (got {rc})")
    rep = job.load_report()
    check(len(rep["failures"]) == 1 and rep["failures"][0]["recovered"],
          "one failure, recovered by the hot spare")
    check(rep["steps"] == LOOP_STEPS, f"all {LOOP_STEPS} steps done")
    survivors = [ln for ln in lines if "returned FTRT_ERECOVER" in ln and ": 0 ordered" not in ln]
    check(len(survivors) >= 3 and all(ln.endswith("yes") for ln in survivors),
          "every survivor got FTRT_ERECOVER from an ordered allreduce, out unchanged")


if __name__ == "__main__":
    sys.exit(h.case_main(CASES, __doc__))
