#!/usr/bin/python3
"""torch_overhead.py - step time of examples/train_torch.py under ftrt vs torch.distributed
gloo DDP, same model, data, seed and number of trainers, in one run.

    bench/torch_overhead.py [--trainers 2] [--hidden 1024] [--layers 3] [--batch 64]
                            [--steps 80] [--reps 3] [--lib build/libftrt.so]

Each repetition runs the gloo job (mpirun -np T) and the ftrt job (mpirun --enable-recovery
-np T+2: coordinator, T trainers, one hot spare, checkpoints off as gloo has none), in
alternating order. A job's figure is logical rank 0's median step time (forward, backward
with the gradient averaging, optimizer step; the first --warmup-steps steps left out); the
bench reports every repetition and the median over repetitions, and the ratio ftrt / gloo
(target <= 1.05). Both use DDP's bucketing (25 MiB buckets, the first 1 MiB) and one torch
thread per process. Python 3 standard library only; runs the example with /usr/bin/python3.
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))
EXAMPLE = os.path.join(REPO, "examples", "train_torch.py")
FTRT_RUN = os.path.join(REPO, "tools", "ftrt-run")
PY = "/usr/bin/python3"
MPI = ["--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, env, timeout=600):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    m = re.search(r"step_time_ms median=([\d.]+) mean=([\d.]+) steps=(\d+)", p.stdout)
    acc = re.search(r"test accuracy: ([\d.]+)", p.stdout)
    if p.returncode != 0 or not m:
        sys.stderr.write(p.stdout[-4000:])
        raise SystemExit(f"torch_overhead: job failed (exit {p.returncode}): {' '.join(cmd)}")
    return float(m.group(1)), float(m.group(2)), float(acc.group(1)) if acc else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--lib", default=os.environ.get("FTRT_LIB",
                                                    os.path.join(REPO, "build", "libftrt.so")))
    ap.add_argument("--work", default="/tmp/ftrt-torch-overhead")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               FTRT_LIB=os.path.abspath(a.lib), PYTHONDONTWRITEBYTECODE="1")
    train = ["--steps", str(a.steps), "--batch", str(a.batch), "--hidden", str(a.hidden),
             "--layers", str(a.layers), "--seed", "1", "--warmup-steps", str(a.warmup_steps)]
    nparams = 64 * a.hidden + a.hidden + (a.layers - 1) * (a.hidden * a.hidden + a.hidden) \
        + a.hidden * 10 + 10
    print(f"torch_overhead: {a.trainers} trainers, MLP 64 -> {a.layers} x {a.hidden} -> 10 "
          f"({nparams} parameters, {nparams * 4 / 2**20:.1f} MiB of gradients), batch "
          f"{a.batch} per trainer, {a.steps} steps ({a.warmup_steps} warm-up), {a.reps} "
          f"repetitions, {os.cpu_count()} CPUs; libftrt {a.lib}", flush=True)
    res = {"gloo": [], "ftrt": []}
    for rep in range(a.reps):
        order = ["gloo", "ftrt"] if rep % 2 == 0 else ["ftrt", "gloo"]
        for backend in order:
            if backend == "gloo":
                cmd = (["mpirun"] + MPI + ["-np", str(a.trainers), PY, EXAMPLE, "--backend",
                                           "gloo", "--master-port", str(free_port())] + train)
            else:
                ck = os.path.join(a.work, f"ckpt-{rep}")
                cmd = ([PY, FTRT_RUN, "--", "mpirun", "--enable-recovery"] + MPI
                       + ["-np", str(a.trainers + 2), PY, EXAMPLE, "--ckpt-every", "0",
                          "--ckpt-dir", ck] + train)
            med, mean, acc = run(cmd, dict(env, FTRT_SPARES="1"))
            res[backend].append(med)
            print(f"  rep {rep + 1} {backend:4s}: median step {med:8.3f} ms (mean {mean:.3f} "
                  f"ms)", flush=True)
    g, f = statistics.median(res["gloo"]), statistics.median(res["ftrt"])
    print()
    print("| backend | step time, median over reps (ms) | per rep (ms) |")
    print("|---|---|---|")
    print(f"| torch.distributed gloo DDP | {g:.3f} | {', '.join(f'{x:.3f}' for x in res['gloo'])} |")
    print(f"| ftrt (bucketer, autograd hooks) | {f:.3f} | "
          f"{', '.join(f'{x:.3f}' for x in res['ftrt'])} |")
    verdict = "meets" if f <= 1.05 * g else "misses"
    print(f"\nratio ftrt / gloo = {f / g:.3f} ({verdict} the target <= 1.05)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
