#!/usr/bin/python3
"""allreduce_dtypes.py - time of ftrt_allreduce on the CPU plane for float32, bfloat16 and
float16 buffers of the same number of elements, in one job (issue 21: the 16-bit types move
half the bytes but are reduced by ftrt's own MPI operations, kernels/half.h, instead of Open
MPI's vectorized float sum).

    bench/allreduce_dtypes.py [--lib build/libftrt.so] [--trainers 2,4] [--elements 4194304]
                              [--reps 7]

For each number of trainers T the bench runs one job (tools/ftrt-run + mpirun --enable-recovery
-np T+1: a coordinator and T trainers, no spare); every trainer allreduces (SUM, in place) a
buffer of random values of each dtype once to warm up, then --reps times, timing each call;
logical rank 0 prints the median time per dtype and the ratios bfloat16 / float32 and float16 /
float32 of the medians, measured in the same job. Needs /usr/bin/python3 with torch (the buffers
are tensors). Command lines: tests/harness/ftrt_harness.py."""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))
sys.path.insert(0, os.path.join(REPO, "bindings", "python"))


def job(elements: int, reps: int) -> int:
    """One trainer's part (run under mpirun, FTRT_BENCH_JOB=1)."""
    import torch
    import ftrt
    ctx = ftrt.init(ftrt.Config.from_env())
    try:
        if not ctx.is_trainer:
            return 0
        torch.manual_seed(ctx.rank)
        res = {}
        for name, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16),
                         ("float16", torch.float16)):
            x = torch.randn(elements).to(dt)
            ctx.allreduce(x.clone())
            times = []
            for _ in range(reps):
                y = x.clone()
                t0 = time.perf_counter()
                ctx.allreduce(y)
                times.append(time.perf_counter() - t0)
            res[name] = statistics.median(times)
        if ctx.rank == 0:
            print(f"trainers {ctx.size}, {elements} elements: median ftrt_allreduce "
                  + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in res.items())
                  + f"; bfloat16/float32 {res['bfloat16'] / res['float32']:.2f}, "
                  f"float16/float32 {res['float16'] / res['float32']:.2f}", flush=True)
    finally:
        ctx.finalize()
    return 0


def main() -> int:
    if os.environ.get("FTRT_BENCH_JOB") == "1":
        return job(int(sys.argv[1]), int(sys.argv[2]))
    import ftrt_harness as h
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=os.path.join(REPO, "build", "libftrt.so"))
    ap.add_argument("--trainers", default="2,4")
    ap.add_argument("--elements", type=int, default=1 << 22)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    rc = 0
    for t in [int(x) for x in a.trainers.split(",")]:
        load = os.getloadavg()[0]
        ckpt = f"/tmp/ftrt-bench-ar16-{os.getpid()}"  # unused (no checkpoint), removed after
        env = h.job_env({"FTRT_LIB": os.path.abspath(a.lib), "FTRT_SPARES": "0",
                         "FTRT_BENCH_JOB": "1", "FTRT_CKPT_DIR": ckpt})
        cmd = h.ftrt_run_cmd(h.mpirun_cmd(t + 1, [h.SYSTEM_PYTHON, os.path.abspath(__file__),
                                                  str(a.elements), str(a.reps)]),
                             python=h.SYSTEM_PYTHON)
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=600)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("trainers ")]
        print(f"(load average {load:.1f}) " + (lines[0] if lines else p.stdout[-3000:]),
              flush=True)
        shutil.rmtree(ckpt, ignore_errors=True)
        rc = rc or p.returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
