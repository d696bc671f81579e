#!/usr/bin/python3
"""zero_memory.py - bytes of training state per trainer with AdamW's state replicated (--zero
0), sharded (ZeRO-1) and sharded with the averaged gradient (ZeRO-2), for N = 2 and 4 trainers,
from real ftrt jobs of examples/train_lm.py (each trainer prints FaultTolerant.memory() at the
end: parameters, buffers, optimizer state, Python state, gradients, partner-replica images;
host and device added up, everything is host memory on the CPU).

    bench/zero_memory.py [--lib build/libftrt.so] [--trainers 2,4] [--d-model 256 --layers 4]

Each job runs a few steps (--steps) with FTRT_SHARD_REPLICA_EVERY=2, so the partner replicas
exist wherever SHARDED regions do. Prints one row per (N, zero) with logical rank 0's figures
and, per N, each row's ratios to the replicated one: optimizer state, total, and total without
the partner replicas' images (host memory whatever the device: on a GPU the rest is what
device memory holds). Python 3 standard library only;
command lines from tests/harness/ftrt_harness.py.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))
import ftrt_harness  # noqa: E402

KINDS = ("params", "optimizer_state", "grads", "replica_images", "total")


def run_job(a, n, zero, work):
    d = os.path.join(work, f"n{n}-z{zero}")
    os.makedirs(d, exist_ok=True)
    mem = os.path.join(d, "memory", "memory-0.txt")  # a file: mpirun's stdout can lose a line
    if os.path.exists(mem):
        os.remove(mem)                                 # not an earlier run's
    argv = [a.python, os.path.join(REPO, "examples", "train_lm.py"), "--steps", str(a.steps),
            "--d-model", str(a.d_model), "--layers", str(a.layers), "--heads", "4",
            "--batch", "4", "--context", "64", "--warmup", "1", "--ckpt-every", "0",
            "--ckpt-dir", os.path.join(d, "ckpt"), "--zero", str(zero),
            "--eval-batches", "0", "--progress-every", "1000", "--print-memory",
            "--memory-out", os.path.join(d, "memory")]
    cmd = [a.python, os.path.join(REPO, "tools", "ftrt-run"), "--"] + \
        ftrt_harness.mpirun_cmd(n + 2, argv)
    env = dict(os.environ, FTRT_LIB=a.lib, FTRT_SHARD_REPLICA_EVERY="2", FTRT_SPARES="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    text = open(mem).read() if os.path.exists(mem) else ""
    m = re.search(r"^state memory: logical rank 0 of (\d+), zero (\d): (.*)$", text, re.M)
    if p.returncode or not m:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit(f"zero_memory: job N={n} zero={zero} failed (exit {p.returncode})")
    figs = {k: int(v) for k, v in re.findall(r"(\w+) (\d+) B", m.group(3))}
    nparams = int(re.search(r"\((\d+) parameters\)", p.stdout).group(1))
    return figs, nparams


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=os.path.join(REPO, "build", "libftrt.so"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--trainers", default="2,4")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ftrt-zero-mem-") as work:
        for n in [int(x) for x in a.trainers.split(",")]:
            base = None
            for zero in (0, 1, 2):
                figs, nparams = run_job(a, n, zero, work)
                if zero == 0:
                    base = figs
                rows.append((n, zero, figs, base, nparams))
    print(f"train_lm.py d_model {a.d_model} x {a.layers} layers ({rows[0][4]} parameters, "
          f"float32), AdamW; bytes per trainer (logical rank 0), MiB:")
    print(f"{'N':>2} {'zero':>4} " + " ".join(f"{k:>15}" for k in KINDS) +
          "   against the replicated row: optimizer state, total, total without the images")
    for n, zero, f, base, _ in rows:
        bare = f["total"] - f["replica_images"]
        print(f"{n:>2} {zero:>4} " + " ".join(f"{f[k] / 2**20:15.3f}" for k in KINDS) +
              f"   {f['optimizer_state'] / base['optimizer_state']:.3f}x, "
              f"{f['total'] / base['total']:.3f}x, "
              f"{bare / (base['total'] - base['replica_images']):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
