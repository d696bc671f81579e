#!/usr/bin/python3
"""torch_overhead.py - step time of examples/train_torch.py (MLPs) and examples/train_lm.py (a
transformer LM) under ftrt vs torch.distributed gloo DDP, same model, data, seed and number of
trainers, in one run.

    bench/torch_overhead.py [--configs example,mlp512,lm,lm-accum] [--reps 5]
                            [--lib build/libftrt.so]

For each model configuration (CONFIGS below), each repetition runs the gloo job (mpirun -np
T) and the ftrt job (mpirun --enable-recovery -np T+2: coordinator, T trainers, one hot
spare, checkpoints off as gloo has none), back to back in alternating order. A job's figure
is logical rank 0's median step time (forward, backward with the gradient averaging,
optimizer step, and for the LM gradient clipping and the LR schedule; under ftrt through
ftrt.pytorch.FaultTolerant, so its step() bookkeeping is included; the first --warmup-steps
steps left out). The ftrt job runs as users run it, under tools/ftrt-run, whose CPU time counts
with the job's. The bench prints every repetition with the 1-minute load average before it and
the CPU seconds of the whole job (every process of it, start-up included: getrusage of the
waited-for children), the median over repetitions, the ratio ftrt / gloo of those medians
(target <= TARGET, 1.02) and the median of the per-repetition ratios. Both use DDP's
bucketing (25 MiB buckets, the first 1 MiB) and one torch thread per process. Python 3
standard library only; runs the example with /usr/bin/python3. Command lines:
tests/harness/ftrt_harness.py.
"""
import os
import re
import resource
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))
import ftrt_harness  # noqa: E402

REPO = ftrt_harness.REPO
EXAMPLE = os.path.join(REPO, "examples", "train_torch.py")
EXAMPLE_LM = os.path.join(REPO, "examples", "train_lm.py")
PY = "/usr/bin/python3"
TARGET = 1.02  # ftrt / gloo, ratio of the median step times


def children_cpu_s():
    """CPU seconds (user + system) of every waited-for descendant of this process so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd, env, timeout=600):
    """Runs one job; returns (median step ms, mean step ms, parameters, CPU s of the job)."""
    cpu0 = children_cpu_s()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    cpu = children_cpu_s() - cpu0
    m = re.search(r"step_time_ms median=([\d.]+) mean=([\d.]+) steps=(\d+)", p.stdout)
    n = re.search(r"\((\d+) parameters\)", p.stdout)
    if p.returncode != 0 or not m or not n:
        sys.stderr.write(p.stdout[-4000:])
        raise SystemExit(f"torch_overhead: job failed (exit {p.returncode}): {' '.join(cmd)}")
    return float(m.group(1)), float(m.group(2)), int(n.group(1)), cpu


CONFIGS = {
    # the example's model and job shape (as in tests/python): 4 trainers on this machine's
    # cores, a 4,810-parameter MLP: communication and per-step overheads dominate
    "example": dict(script=EXAMPLE, trainers=4, steps=300, what="MLP 64 -> 1 x 64 -> 10",
                    args=["--hidden", "64", "--layers", "1", "--batch", "32"]),
    # a larger MLP, one trainer per core: 301,066 parameters (1.1 MiB of gradients)
    "mlp512": dict(script=EXAMPLE, trainers=2, steps=100, what="MLP 64 -> 2 x 512 -> 10",
                   args=["--hidden", "512", "--layers", "2", "--batch", "64"]),
    # examples/train_lm.py: char-level transformer, 2 layers, d_model 64, context 64, AdamW,
    # warm-up + cosine LR, dropout 0.1, gradient clipping; 4 trainers, 8 sequences each
    "lm": dict(script=EXAMPLE_LM, trainers=4, steps=50, what="transformer LM 2 x d64, ctx 64",
               args=["--batch", "8", "--context", "64", "--warmup", "10",
                     "--progress-every", "1000"]),
    # the same with gradient accumulation: 2 micro-batches of 4 sequences per step, the first
    # backward under no_sync(); tied embeddings and zero_grad(set_to_none=True) as in "lm"
    "lm-accum": dict(script=EXAMPLE_LM, trainers=4, steps=50,
                     what="transformer LM 2 x d64, ctx 64, 2 micro-batches",
                     args=["--batch", "4", "--accum", "2", "--context", "64", "--warmup", "10",
                           "--progress-every", "1000"]),
}


def bench(name, c, a, env):
    train = ["--steps", str(c["steps"]), "--seed", "1", "--warmup-steps",
             str(a.warmup_steps)] + c["args"]
    script = c["script"]
    print(f"{name}: {c['trainers']} trainers, {c['what']}, {' '.join(c['args'])}, "
          f"{c['steps']} steps ({a.warmup_steps} warm-up)", flush=True)
    nparams = None
    res = {"gloo": [], "ftrt": []}
    cpu = {"gloo": [], "ftrt": []}
    loads = []
    for rep in range(a.reps):
        order = ["gloo", "ftrt"] if rep % 2 == 0 else ["ftrt", "gloo"]
        for backend in order:
            load = os.getloadavg()[0]
            loads.append(load)
            if backend == "gloo":
                cmd = ftrt_harness.mpirun_cmd(
                    c["trainers"], [PY, script, "--backend", "gloo", "--master-port",
                                    str(ftrt_harness.free_port())] + train, recovery=False)
            else:
                ck = os.path.join(a.work, f"ckpt-{name}-{rep}")
                cmd = ftrt_harness.ftrt_run_cmd(ftrt_harness.mpirun_cmd(c["trainers"] + 2, [
                    PY, script, "--ckpt-every", "0", "--ckpt-dir", ck] + train), python=PY)
            med, mean, nparams, cpu_s = run(cmd, dict(env, FTRT_SPARES="1"))
            res[backend].append(med)
            cpu[backend].append(cpu_s)
            print(f"  rep {rep + 1} {backend:4s}: median step {med:8.3f} ms (mean {mean:.3f} "
                  f"ms), job CPU {cpu_s:6.2f} s, load average {load:.2f} before", flush=True)
    g, f = statistics.median(res["gloo"]), statistics.median(res["ftrt"])
    # ratios of the two runs of each repetition (back to back, so under the same background
    # load): their median is less sensitive to load that drifts over the bench
    pair = statistics.median(x / y for x, y in zip(res["ftrt"], res["gloo"]))
    return dict(name=name, nparams=nparams, gloo=g, ftrt=f, ratio=f / g, pair=pair,
                trainers=c["trainers"], res=res, cpu_gloo=statistics.median(cpu["gloo"]),
                cpu_ftrt=statistics.median(cpu["ftrt"]), load=(min(loads), max(loads)))


def main():
    ap = example_args.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="example,mlp512,lm,lm-accum",
                    help=f"comma-separated, of {sorted(CONFIGS)}")
    ap.add_argument("--steps", type=int, help="override the configs' step counts")
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--lib", default=os.environ.get("FTRT_LIB",
                                                    os.path.join(REPO, "build", "libftrt.so")))
    ap.add_argument("--work", default="/tmp/ftrt-torch-overhead")
    a = ap.parse_args()
    example_args.check_paths(ap, a, dirs=("work",), inputs=("lib",))
    unknown = [n for n in a.configs.split(",") if n not in CONFIGS]
    if unknown or a.reps < 1:
        ap.error(f"--configs: unknown {unknown}, of {sorted(CONFIGS)}" if unknown else
                 "--reps: must be >= 1")
    os.makedirs(a.work, exist_ok=True)
    env = ftrt_harness.job_env({"FTRT_LIB": os.path.abspath(a.lib),
                                "PYTHONDONTWRITEBYTECODE": "1"})
    print(f"torch_overhead: {a.reps} alternating repetitions per config, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at start; libftrt {a.lib}", flush=True)
    out = []
    for name in a.configs.split(","):
        c = dict(CONFIGS[name])
        if a.steps:
            c["steps"] = a.steps
        out.append(bench(name, c, a, env))
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    print("\n| model | trainers | gloo DDP step (ms) | ftrt step (ms) | ftrt / gloo | median of "
          "per-repetition ratios | job CPU s gloo / ftrt (medians) | load average |")
    print("|---|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['name']} ({r['nparams']} params) | {r['trainers']} | {r['gloo']:.3f} | "
              f"{r['ftrt']:.3f} | {r['ratio']:.3f} | {r['pair']:.3f} | {r['cpu_gloo']:.1f} / "
              f"{r['cpu_ftrt']:.1f} | {r['load'][0]:.1f} to {r['load'][1]:.1f} |")
    for r in out:
        verdict = "meets" if r["ratio"] <= TARGET else "misses"
        print(f"{r['name']}: ratio ftrt / gloo = {r['ratio']:.3f} ({verdict} the target <= "
              f"{TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
