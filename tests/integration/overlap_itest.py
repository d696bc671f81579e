#!/usr/bin/env python3
"""MPI integration tests of the overlapped data plane: real mpirun jobs of
tests/integration/overlap_job (bucketed allreduces in flight while the "backward pass" runs,
plus raw ftrt_allreduce_start requests), real processes killed by signals.

Usage: overlap_itest.py --bin BUILD/tests/integration/overlap_job --work DIR <case>
       overlap_itest.py --list   (the cases but gpulib, for CMake; jobs: ftrt_harness.py)
Cases:
  reference  fault-free, 4 trainers + 1 hot spare, progress thread; keeps DIR/overlap.params
  inline     the same with FTRT_ASYNC_PROGRESS=0 (progress inside ftrt calls only): the final
             parameters are byte-identical to the reference
  funneled   the job initializes MPI itself at MPI_THREAD_FUNNELED: ftrt warns and falls back to
             progress inside ftrt calls; byte-identical to the reference
  kill       SIGKILL of logical rank 2 while buckets are in flight: the spare takes over, the job
             finishes, the final parameters are byte-identical to the reference
  kill0      the same for logical rank 0 (the rank that writes the output)
  gpulib     --bin linked with libftrt_gpu (CUDA runtime and NCCL inside): loads and trains on
             the CPU plane, byte-identical to the reference (run where there is no GPU driver
             it shows the GPU library does not need one)
Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import os
import shutil
import signal
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import ftrt_harness as h  # noqa: E402
from ftrt_harness import check, same_bytes  # noqa: E402

STEPS = 80
JOB_ARGS = ["--steps", str(STEPS), "--step-sleep-ms", "25", "--ckpt-every", "20"]
CASES = {}  # name -> ftrt_harness.Case; `overlap_itest.py --list` gives CMake the ctests


def overlap_job(args, name, env=None):
    """overlap_job in a fresh WORK/name: 1 coordinator + 4 trainers + 1 hot spare, the report
    and the fault log named by the environment, the status file in WORK/name/status.json."""
    d = os.path.join(args.work, name)
    ckpt, params = os.path.join(d, "ckpt"), os.path.join(d, "final.params")
    status, report = os.path.join(d, "status.json"), os.path.join(d, "report.json")
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(6, [args.bin, "--ckpt-dir", ckpt, "--params-out",
                                          params] + JOB_ARGS), status=status)
    job = h.Job(d, cmd, h.job_env(dict({"FTRT_SPARES": "1", "FTRT_REPORT": report,
                                        "FTRT_FAULT_LOG": os.path.join(d, "faults.jsonl")},
                                       **(env or {}))), status=status, fresh=True)
    job.ckpt, job.params, job.report = ckpt, params, report
    return job


def ref_path(args):
    return os.path.join(args.work, "overlap.params")


def run_clean(args, name, env=None):
    job = overlap_job(args, name, env).start()
    rc = job.wait(240)
    check(rc == 0, f"job exits 0 (got {rc})")
    check("params fnv1a64" in job.out, "the job reports its final parameters")
    rep = job.load_report()
    check(rep["status"] == "finished" and rep["steps"] == STEPS and not rep["failures"],
          f"report: finished, {STEPS} steps, no failures")
    return job


@h.case(CASES, fixture="setup")
def case_reference(args):
    job = run_clean(args, "reference")
    check(os.path.getsize(job.params) > 0, "final parameters written")
    shutil.copyfile(job.params, ref_path(args))


def need_reference(args):
    if not os.path.exists(ref_path(args)):
        case_reference(args)


@h.case(CASES, fixture="required")
def case_inline(args):
    need_reference(args)
    job = run_clean(args, "inline", {"FTRT_ASYNC_PROGRESS": "0"})
    check(same_bytes(job.params, ref_path(args)),
          "final parameters byte-identical to the progress-thread run")


def kill_case(args, logical):
    need_reference(args)
    job = overlap_job(args, f"kill{logical}").start()
    victim = job.wait_trainer(logical, 30, timeout=120, poll_s=0.01)
    print(f"  logical rank {logical} at {victim['steps_done']} steps", flush=True)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(240)
    check(rc == 0, f"job survives the kill and exits 0 (got {rc})")
    rep = job.load_report()
    check(len(rep["failures"]) == 1 and rep["failures"][0]["recovered"],
          "one failure, recovered by the hot spare")
    check(rep["steps"] == STEPS, f"all {STEPS} steps done")
    check(same_bytes(job.params, ref_path(args)),
          "final parameters byte-identical to the fault-free run")


@h.case(CASES, fixture="required")
def case_funneled(args):
    need_reference(args)
    job = overlap_job(args, "funneled")
    job.cmd.append("--mpi-funneled")
    job.start()
    rc = job.wait(240)
    check(rc == 0, f"job exits 0 (got {rc})")
    check("below MPI_THREAD_MULTIPLE" in job.out, "a warning names the fallback")
    check(same_bytes(job.params, ref_path(args)),
          "final parameters byte-identical to the progress-thread run")


@h.case(CASES, fixture="required")
def case_kill(args):
    kill_case(args, 2)


@h.case(CASES, fixture="required")
def case_kill0(args):
    kill_case(args, 0)


# Not listed: overlap.cmake adds it with the job linked against libftrt_gpu.
@h.case(CASES, fixture="required", listed=False)
def case_gpulib(args):
    job = run_clean(args, "gpulib")
    check(same_bytes(job.params, ref_path(args)),
          "libftrt_gpu build: final parameters byte-identical to the reference")


if __name__ == "__main__":
    sys.exit(h.case_main(CASES, __doc__))
