#!/usr/bin/env python3
"""MPI integration tests of the overlapped data plane: real mpirun jobs of
tests/integration/overlap_job (bucketed allreduces in flight while the "backward pass" runs,
plus raw ftrt_allreduce_start requests), real processes killed by signals.

Usage: overlap_itest.py --bin BUILD/tests/integration/overlap_job --work DIR <case>
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
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FTRT_RUN = os.path.join(HERE, "..", "..", "tools", "ftrt-run")
STEPS = 80
JOB_ARGS = ["--steps", str(STEPS), "--step-sleep-ms", "25", "--ckpt-every", "20"]


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)
    print("  ok:", msg, flush=True)


class Job:
    def __init__(self, args, name, env=None):
        self.dir = os.path.join(args.work, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.ckpt = os.path.join(self.dir, "ckpt")
        self.params = os.path.join(self.dir, "final.params")
        self.status = os.path.join(self.dir, "status.json")
        self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        FTRT_SPARES="1", FTRT_REPORT=os.path.join(self.dir, "report.json"),
                        FTRT_FAULT_LOG=os.path.join(self.dir, "faults.jsonl"))
        self.env.update(env or {})
        self.cmd = [sys.executable, FTRT_RUN, "--status", self.status, "--", "mpirun",
                    "--enable-recovery", "--oversubscribe", "--bind-to", "none", "--mca",
                    "mpi_yield_when_idle", "1", "-np", "6", args.bin, "--ckpt-dir", self.ckpt,
                    "--params-out", self.params] + JOB_ARGS

    def start(self):
        print("  $", " ".join(self.cmd), flush=True)
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        return self

    def wait(self, timeout=240):
        try:
            self.out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.out, _ = self.proc.communicate()
            raise Fail(f"job did not finish within {timeout} s")
        finally:
            with open(os.path.join(self.dir, "job.log"), "w") as f:
                f.write(self.out or "")
        return self.proc.returncode

    def report(self):
        with open(os.path.join(self.dir, "report.json")) as f:
            return json.load(f)

    def trainer(self, logical, min_steps, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Fail("job ended before the trainer reached the step")
            try:
                with open(self.status) as f:
                    st = json.load(f)
                for r in st["ranks"]:
                    if (r["role"] == "trainer" and r["logical_rank"] == logical
                            and r["steps_done"] >= min_steps and st["job"] == "running"):
                        return r
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.01)
        raise Fail("timed out waiting for the status file")


def ref_path(args):
    return os.path.join(args.work, "overlap.params")


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def run_clean(args, name, env=None):
    job = Job(args, name, env).start()
    rc = job.wait()
    check(rc == 0, f"job exits 0 (got {rc})")
    check("params fnv1a64" in job.out, "the job reports its final parameters")
    rep = job.report()
    check(rep["status"] == "finished" and rep["steps"] == STEPS and not rep["failures"],
          f"report: finished, {STEPS} steps, no failures")
    return job


def case_reference(args):
    job = run_clean(args, "reference")
    check(os.path.getsize(job.params) > 0, "final parameters written")
    shutil.copyfile(job.params, ref_path(args))


def need_reference(args):
    if not os.path.exists(ref_path(args)):
        case_reference(args)


def case_inline(args):
    need_reference(args)
    job = run_clean(args, "inline", {"FTRT_ASYNC_PROGRESS": "0"})
    check(same_bytes(job.params, ref_path(args)),
          "final parameters byte-identical to the progress-thread run")


def kill_case(args, logical):
    need_reference(args)
    job = Job(args, f"kill{logical}").start()
    victim = job.trainer(logical, 30)
    with open(job.env["FTRT_FAULT_LOG"], "a") as f:
        f.write(json.dumps({"time": time.time(), "kind": "sigkill", "pid": victim["pid"],
                            "world_rank": victim["world_rank"]}) + "\n")
    os.kill(victim["pid"], signal.SIGKILL)
    print(f"  SIGKILL -> logical rank {logical} (pid {victim['pid']}) at "
          f"{victim['steps_done']} steps", flush=True)
    rc = job.wait()
    check(rc == 0, f"job survives the kill and exits 0 (got {rc})")
    rep = job.report()
    check(len(rep["failures"]) == 1 and rep["failures"][0]["recovered"],
          "one failure, recovered by the hot spare")
    check(rep["steps"] == STEPS, f"all {STEPS} steps done")
    check(same_bytes(job.params, ref_path(args)),
          "final parameters byte-identical to the fault-free run")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("case", choices=["reference", "inline", "funneled", "kill", "kill0",
                                     "gpulib"])
    args = ap.parse_args()
    if shutil.which("mpirun") is None:
        print("mpirun not found: skipping")
        return 77
    os.makedirs(args.work, exist_ok=True)
    print(f"case {args.case}:", flush=True)
    try:
        if args.case == "reference":
            case_reference(args)
        elif args.case == "inline":
            case_inline(args)
        elif args.case == "funneled":
            need_reference(args)
            job = Job(args, "funneled")
            job.cmd.append("--mpi-funneled")
            job.start()
            rc = job.wait()
            check(rc == 0, f"job exits 0 (got {rc})")
            check("below MPI_THREAD_MULTIPLE" in job.out, "a warning names the fallback")
            check(same_bytes(job.params, ref_path(args)),
                  "final parameters byte-identical to the progress-thread run")
        elif args.case == "gpulib":
            job = run_clean(args, "gpulib")
            check(same_bytes(job.params, ref_path(args)),
                  "libftrt_gpu build: final parameters byte-identical to the reference")
        else:
            kill_case(args, 0 if args.case == "kill0" else 2)
    except Fail as e:
        print("FAIL:", e, flush=True)
        return 1
    print("PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
