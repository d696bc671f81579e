#!/usr/bin/python3
"""torch_overhead.py - step time of examples/train_torch.py (MLPs), examples/train_lm.py (a
transformer LM) and examples/train_cnn.py (resnet18 with BatchNorm) under ftrt vs
torch.distributed gloo DDP, same model, data, seed and number of trainers, in one run; with
--device cuda, train_lm.py on the GPU against torch's NCCL DDP.

    bench/torch_overhead.py [--configs example,mlp512,lm,lm-accum,lm-zero,cnn] [--reps 5]
                            [--lib build/libftrt.so]
    bench/torch_overhead.py --device cuda --amp bf16 --lib build-gpu/libftrt_gpu.so \\
                            [--configs lm-gpu,lm-gpu-1] [--reps 3] [--python python3]

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
bucketing (25 MiB buckets, the first 1 MiB) and one torch thread per process; the cnn config
(not in the default set: about 18 s a job here) keeps BatchNorm's buffers the same way in both,
rank 0's broadcast every step (FaultTolerant's and DDP's broadcast_buffers=True). Python 3
standard library only; runs the example with /usr/bin/python3. Command lines:
tests/harness/ftrt_harness.py.

--per-process: where the CPU goes while the job trains. Every 0.25 s the bench reads the CPU
time of every thread of every process of the job (/proc/PID/task/TID/stat) and prints, for
the part of the job between 35% and 85% of its duration (past the start-up, before the end),
the cores each kind of process used: the trainers' main threads (mean of one), the trainers'
other threads (ftrt's progress and agent threads, gloo's; mean of one trainer), the
coordinator (world rank 0), the hot spare (the last world rank), the launcher wrapper
(tools/ftrt-run) and mpirun. --ftrt-run FILE runs the ftrt jobs under another launcher wrapper
(an older tools/ftrt-run, to compare).

--bucket-view: the ftrt jobs run train_torch.py or train_cnn.py --bucket-view (FaultTolerant's
gradient_as_bucket_view: every bucket reduced in place, no pack or unpack copies); the DDP jobs
keep DDP's default. MLP and CNN configs only. Compare with a run without it by alternating the
two in one sitting; two separate invocations are indicative only.

--device cuda (scripts/gpu-run.sh step torch-lm-ratio; issue 21): the CUDA configs (lm-gpu:
train_lm.py --device cuda, 2 trainers; lm-gpu-1: the same with one trainer) against NCCL DDP,
every rank on the one GPU (GPU local rank modulo 1), NCCL over sockets with a NCCL_HOSTID per
rank (ftrt_harness.NCCL_ONE_GPU_ENV; docs/gpu.md). Two trainers time-sharing one GPU is a test
arrangement: their ratio is labelled "time-shared test arrangement, not a performance figure".
The one-trainer pair is the overlap comparison: neither backend has a peer to wait for, so the
ratio is what each adds around the same backward pass on the GPU. --amp bf16 runs both under
bfloat16 autocast. RESULT lines (one per config) carry the figures for scripts/gpu-run.sh's
summary.json. Exit 77 when torch (--python) has no CUDA device. Step times are host times of
whole steps: train_lm.py reads the step's loss after the optimizer step, which waits for the
GPU.
"""
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))
import ftrt_harness  # noqa: E402

REPO = ftrt_harness.REPO
EXAMPLE = os.path.join(REPO, "examples", "train_torch.py")
EXAMPLE_LM = os.path.join(REPO, "examples", "train_lm.py")
EXAMPLE_CNN = os.path.join(REPO, "examples", "train_cnn.py")
PY = "/usr/bin/python3"
TARGET = 1.02  # ftrt / gloo, ratio of the median step times


def children_cpu_s():
    """CPU seconds (user + system) of every waited-for descendant of this process so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class ProcessCpu:
    """Samples the CPU time of every thread of a process tree (see --per-process)."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, root):
        self.root, self.samples, self.kinds = root, [], {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _tree(self):
        pids, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/children") as f:
                        todo += [int(x) for x in f.read().split()]
            except OSError:
                pass
        return pids

    def _kind(self, pid):
        """trainer / coordinator / spare (by OMPI_COMM_WORLD_RANK), ftrt-run, mpirun, other."""
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            return None
        if b"OMPI_COMM_WORLD_RANK" in env and any(a.endswith(b".py") for a in argv[1:2]):
            w, n = int(env[b"OMPI_COMM_WORLD_RANK"]), int(env[b"OMPI_COMM_WORLD_SIZE"])
            if self.ftrt and w == 0:
                return "coordinator"
            return "spare" if self.ftrt and w == n - 1 else "trainer"
        if any(a.endswith(b"ftrt-run") for a in argv[:2]):
            return "ftrt-run"
        return "mpirun" if os.path.basename(argv[0]) == b"mpirun" else "other"

    def _loop(self):
        while not self.stop.is_set():
            snap = {}
            for pid in self._tree():
                kind = self._kind(pid)  # again each time: a fork may not have exec'd yet
                if kind is not None:
                    self.kinds[pid] = kind
                try:
                    for tid in os.listdir(f"/proc/{pid}/task"):
                        with open(f"/proc/{pid}/task/{tid}/stat") as f:
                            st = f.read()
                        fields = st[st.rindex(")") + 2:].split()
                        snap[(pid, int(tid))] = (int(fields[11]) + int(fields[12])) / self.TICK
                except (OSError, ValueError):
                    pass
            self.samples.append((time.monotonic(), snap))
            self.stop.wait(0.25)

    def window(self, a=0.35, b=0.85):
        """{kind: cores} between fractions a and b of the sampled time; trainers' main threads
        and other threads as "trainer" and "trainer (other threads)", the mean of one
        trainer. A thread that ends inside the window counts up to its last sample."""
        self.stop.set()
        self.thread.join()
        t0, t1 = self.samples[0][0], self.samples[-1][0]
        ta, tb = t0 + a * (t1 - t0), t0 + b * (t1 - t0)
        inside = [s for s in self.samples if ta <= s[0] <= tb]
        if len(inside) < 2:
            return {}
        dt = inside[-1][0] - inside[0][0]
        first, last = {}, {}
        for _, snap in inside:
            for key, c in snap.items():
                first.setdefault(key, c)
                last[key] = c
        cores, trainers = {}, set()
        for (pid, tid), c in last.items():
            kind = self.kinds.get(pid) or "other"
            if kind == "trainer":
                trainers.add(pid)
                kind = "trainer" if tid == pid else "trainer (other threads)"
            cores[kind] = cores.get(kind, 0.0) + (c - first[(pid, tid)]) / dt
        for k in ("trainer", "trainer (other threads)"):
            if k in cores:
                cores[k] /= max(1, len(trainers))
        return cores


def run(cmd, env, timeout=600, per_process=False, ftrt=False):
    """Runs one job; returns (median step ms, mean step ms, parameters, CPU s of the job,
    {kind: cores} with per_process else None)."""
    cpu0 = children_cpu_s()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    prof = ProcessCpu(p.pid) if per_process else None
    if prof is not None:
        prof.ftrt = ftrt
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    cpu = children_cpu_s() - cpu0
    cores = prof.window() if prof is not None else None
    m = re.search(r"step_time_ms median=([\d.]+) mean=([\d.]+) steps=(\d+)", out)
    n = re.search(r"\((\d+) parameters\)", out)
    if p.returncode != 0 or not m or not n:
        sys.stderr.write(out[-4000:])
        raise SystemExit(f"torch_overhead: job failed (exit {p.returncode}): {' '.join(cmd)}")
    return float(m.group(1)), float(m.group(2)), int(n.group(1)), cpu, cores


KINDS = ("trainer", "trainer (other threads)", "coordinator", "spare", "ftrt-run", "mpirun")


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
    # the "lm" job with AdamW's state sharded over the 4 trainers (ZeRO-1): ftrt's
    # ZeroOptimizer against torch's ZeroRedundancyOptimizer over gloo DDP (train_lm.py --zero 1)
    "lm-zero": dict(script=EXAMPLE_LM, trainers=4, steps=50,
                    what="transformer LM 2 x d64, ctx 64, AdamW state sharded (ZeRO-1)",
                    args=["--batch", "8", "--context", "64", "--warmup", "10",
                          "--progress-every", "1000", "--zero", "1"]),
    # examples/train_cnn.py: torchvision's resnet18 (11,181,642 parameters, 44.7 MB of
    # gradients in 3 buckets; 20 BatchNorm layers, 38,560 bytes of buffers broadcast from rank
    # 0 every step), 4 trainers, 8 digits at 3 x 32 x 32 each: compute-bound
    "cnn": dict(script=EXAMPLE_CNN, trainers=4, steps=40,
                what="resnet18 (BatchNorm), digits at 3 x 32 x 32",
                args=["--batch", "8", "--progress-every", "1000"]),
    # --device cuda: train_lm.py on the GPU, 6 layers x d_model 384, context 256, 16 sequences
    # per trainer (about 10.7 M parameters, as tests/python/gpu_lm_prog.py); 2 trainers
    # time-sharing the one GPU (a test arrangement), and 1 trainer (the overlap comparison)
    "lm-gpu": dict(script=EXAMPLE_LM, trainers=2, steps=40, cuda=True,
                   what="transformer LM 6 x d384, ctx 256, on the GPU",
                   args=["--batch", "16", "--context", "256", "--d-model", "384", "--layers",
                         "6", "--heads", "6", "--warmup", "10", "--progress-every", "1000"]),
    "lm-gpu-1": dict(script=EXAMPLE_LM, trainers=1, steps=40, cuda=True,
                     what="transformer LM 6 x d384, ctx 256, on the GPU, one trainer",
                     args=["--batch", "16", "--context", "256", "--d-model", "384", "--layers",
                           "6", "--heads", "6", "--warmup", "10", "--progress-every", "1000"]),
}
DEFAULT_CONFIGS = {"cpu": "example,mlp512,lm,lm-accum", "cuda": "lm-gpu,lm-gpu-1"}
TIME_SHARED = "time-shared test arrangement, not a performance figure"


def job_cmds(name, c, a, rep, train):
    """{backend: command} of one repetition: the DDP job (gloo, or NCCL with --device cuda)
    and the ftrt job (under --ftrt-run); on CUDA every rank through
    ftrt_harness.nccl_hostid_argv (the one-GPU arrangement)."""
    wrap = (lambda argv: ftrt_harness.nccl_hostid_argv(argv, "ftrt-bench-lm")) \
        if a.device == "cuda" else list
    ddp = wrap([a.python, c["script"], "--backend", a.ddp, "--master-port",
                str(ftrt_harness.free_port())] + train)
    ck = os.path.join(a.work, f"ckpt-{name}-{rep}")
    views = ["--bucket-view"] if a.bucket_view else []
    ftrt = wrap([a.python, c["script"], "--ckpt-every", "0", "--ckpt-dir", ck] + views + train)
    return {a.ddp: ftrt_harness.mpirun_cmd(c["trainers"], ddp, recovery=False),
            "ftrt": [a.python, a.ftrt_run, "--"] + ftrt_harness.mpirun_cmd(c["trainers"] + 2,
                                                                           ftrt)}


def bench(name, c, a, env, budget_s=0.0):
    """Runs config `name` (c: its CONFIGS entry) a.reps times, both backends back to back in
    alternating order; with budget_s > 0, starts no repetition past the first that the
    slowest repetition so far would take past budget_s seconds (the table then says how many
    ran). Returns the figures (medians, ratios, CPU seconds, load averages)."""
    train = ["--steps", str(c["steps"]), "--seed", "1", "--warmup-steps",
             str(a.warmup_steps)] + c["args"]
    if a.device == "cuda":
        train += ["--device", "cuda"]
    if a.amp != "off":
        train += ["--amp", a.amp]
    print(f"{name}: {c['trainers']} trainers, {c['what']}, {' '.join(c['args'])}, "
          f"{c['steps']} steps ({a.warmup_steps} warm-up)", flush=True)
    nparams = None
    res = {a.ddp: [], "ftrt": []}
    cpu = {a.ddp: [], "ftrt": []}
    loads, t0, slowest = [], time.monotonic(), 0.0
    for rep in range(a.reps):
        if rep and budget_s and time.monotonic() - t0 + slowest > budget_s:
            print(f"  stopped after {rep} repetition(s): --max-seconds leaves this config "
                  f"{budget_s:.0f} s", flush=True)
            break
        t_rep = time.monotonic()
        order = [a.ddp, "ftrt"] if rep % 2 == 0 else ["ftrt", a.ddp]
        cmds = job_cmds(name, c, a, rep, train)
        for backend in order:
            load = os.getloadavg()[0]
            loads.append(load)
            cmd = cmds[backend]
            med, mean, nparams, cpu_s, cores = run(cmd, dict(env, FTRT_SPARES="1"),
                                                   per_process=a.per_process,
                                                   ftrt=backend == "ftrt")
            res[backend].append(med)
            cpu[backend].append(cpu_s)
            print(f"  rep {rep + 1} {backend:4s}: median step {med:8.3f} ms (mean {mean:.3f} "
                  f"ms), job CPU {cpu_s:6.2f} s, load average {load:.2f} before", flush=True)
            if cores is not None:
                print("    cores while training: " + ", ".join(
                    f"{k} {cores[k]:.3f}" for k in KINDS if k in cores), flush=True)
        slowest = max(slowest, time.monotonic() - t_rep)
    g, f = statistics.median(res[a.ddp]), statistics.median(res["ftrt"])
    # ratios of the two runs of each repetition (back to back, so under the same background
    # load): their median is less sensitive to load that drifts over the bench
    pair = statistics.median(x / y for x, y in zip(res["ftrt"], res[a.ddp]))
    return dict(name=name, nparams=nparams, gloo=g, ftrt=f, ratio=f / g, pair=pair,
                trainers=c["trainers"], res=res, cpu_gloo=statistics.median(cpu[a.ddp]),
                cpu_ftrt=statistics.median(cpu["ftrt"]), load=(min(loads), max(loads)),
                reps=len(res["ftrt"]))


def cuda_ready(a):
    """None when --python's torch sees a CUDA device, else why not."""
    p = subprocess.run([a.python, "-c", "import torch, sys; sys.exit(0 if "
                        "torch.cuda.is_available() else 77)"], capture_output=True, text=True)
    if p.returncode == 0:
        return None
    return f"{a.python}: torch sees no CUDA device (exit {p.returncode}) {p.stderr[-300:]}"


def print_cuda(out, a):
    """What the CUDA rows are, and one RESULT line per config (gpu-run.sh's summary.json)."""
    for r in out:
        what = TIME_SHARED if r["trainers"] > 1 else \
            "one trainer on the GPU: the overlap comparison"
        print(f"{r['name']}: ratio ftrt / {a.ddp} DDP = {r['ratio']:.3f}, {r['trainers']} "
              f"trainer(s) on the one GPU ({what})")
        print(f"RESULT bench=torch_overhead device=cuda amp={a.amp} config={r['name']} "
              f"trainers={r['trainers']} params={r['nparams']} ddp={a.ddp} "
              f"ddp_step_ms={r['gloo']:.3f} ftrt_step_ms={r['ftrt']:.3f} ratio={r['ratio']:.4f} "
              f"pair_ratio={r['pair']:.4f} reps={r['reps']} arrangement="
              + ("time-shared-test-arrangement-not-a-performance-figure" if r["trainers"] > 1
                 else "one-trainer-overlap-comparison"))


def main():
    ap = example_args.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", help=f"comma-separated, of {sorted(CONFIGS)} (default "
                    f"{DEFAULT_CONFIGS['cpu']}; with --device cuda {DEFAULT_CONFIGS['cuda']})")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cpu (against gloo DDP) or cuda (against NCCL DDP, on the one GPU)")
    ap.add_argument("--amp", choices=["off", "bf16"], default="off",
                    help="train_lm.py's --amp: bf16 autocast in both backends (off)")
    ap.add_argument("--python", default=PY, help=f"the jobs' Python, with torch ({PY})")
    ap.add_argument("--max-seconds", type=float, default=0, help="a time budget, shared "
                    "equally by the configs: a config starts no repetition that would end past "
                    "its share (its first always runs); 0 = none (0)")
    ap.add_argument("--steps", type=int, help="override the configs' step counts")
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--lib", default=os.environ.get("FTRT_LIB",
                                                    os.path.join(REPO, "build", "libftrt.so")))
    ap.add_argument("--work", default="/tmp/ftrt-torch-overhead")
    ap.add_argument("--per-process", action="store_true",
                    help="print the cores each kind of process used while training")
    ap.add_argument("--bucket-view", action="store_true",
                    help="the ftrt jobs with gradients as bucket views (train_torch.py, "
                         "train_cnn.py --bucket-view: reduced in place, no pack or unpack "
                         "copies); the DDP jobs keep DDP's default (copies). MLP and CNN "
                         "configs only")
    ap.add_argument("--ftrt-run", default=ftrt_harness.FTRT_RUN,
                    help="the launcher wrapper of the ftrt jobs (default tools/ftrt-run)")
    a = ap.parse_args()
    example_args.check_paths(ap, a, dirs=("work",), inputs=("lib", "ftrt_run"))
    a.configs = a.configs or DEFAULT_CONFIGS[a.device]
    a.ddp = "nccl" if a.device == "cuda" else "gloo"
    unknown = [n for n in a.configs.split(",") if n not in CONFIGS]
    if unknown or a.reps < 1:
        ap.error(f"--configs: unknown {unknown}, of {sorted(CONFIGS)}" if unknown else
                 "--reps: must be >= 1")
    wrong = [n for n in a.configs.split(",") if CONFIGS[n].get("cuda", False) !=
             (a.device == "cuda")]
    if wrong:
        ap.error(f"--configs: {wrong} are not for --device {a.device}")
    no_view = [n for n in a.configs.split(",") if CONFIGS[n]["script"] == EXAMPLE_LM]
    if a.bucket_view and no_view:
        ap.error(f"--bucket-view: {no_view} run train_lm.py, which has no such option")
    if a.device == "cuda":
        why = cuda_ready(a)
        if why:
            print(f"torch_overhead: skipped: {why}")
            return 77
    os.makedirs(a.work, exist_ok=True)
    env = ftrt_harness.job_env({"FTRT_LIB": os.path.abspath(a.lib),
                                "PYTHONDONTWRITEBYTECODE": "1"})
    if a.device == "cuda":
        env.update(ftrt_harness.NCCL_ONE_GPU_ENV)
    print(f"torch_overhead: {a.reps} alternating repetitions per config, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at start; libftrt {a.lib}"
          f"{'; ftrt with gradients as bucket views' if a.bucket_view else ''}", flush=True)
    out, names = [], a.configs.split(",")
    for name in names:
        c = dict(CONFIGS[name])
        if a.steps:
            c["steps"] = a.steps
        out.append(bench(name, c, a, env, a.max_seconds / len(names)))
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    print(f"\n| model | trainers | {a.ddp} DDP step (ms) | ftrt step (ms) | ftrt / {a.ddp} | "
          f"median of per-repetition ratios | job CPU s {a.ddp} / ftrt (medians) | "
          f"load average |")
    print("|---|---|---|---|---|---|---|---|")
    for r in out:
        print(f"| {r['name']} ({r['nparams']} params) | {r['trainers']} | {r['gloo']:.3f} | "
              f"{r['ftrt']:.3f} | {r['ratio']:.3f} | {r['pair']:.3f} | {r['cpu_gloo']:.1f} / "
              f"{r['cpu_ftrt']:.1f} | {r['load'][0]:.1f} to {r['load'][1]:.1f} |")
    if a.device == "cuda":
        print_cuda(out, a)
        return 0
    for r in out:
        verdict = "meets" if r["ratio"] <= TARGET else "misses"
        print(f"{r['name']}: ratio ftrt / gloo = {r['ratio']:.3f} ({verdict} the target <= "
              f"{TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
