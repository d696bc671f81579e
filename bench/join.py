#!/usr/bin/env python3
"""What a join costs (docs/join.md): examples/train_mlp (4 trainers, 1 spare, no checkpoints)
under tools/ftrt-run --joinable, a second `ftrt-run --join` started mid-run, then two trainers
SIGKILLed; and, in the same round, the same job without a join and one trainer SIGKILLed. Prints,
as medians over the rounds (Open MPI 4.1 only):

  join time       from `ftrt-run --join` to the joiner counted as a hot spare in the status file
                  (ftrt-run's start, mpirun's, MPI_Init, MPI_Open_port, the JOIN round trip)
  step time       trainer 0's, from the status file's steps_done over 2 s before the join, over
                  the join, and over 2 s after it; the ratio join / before
  rebuild         the report's MTTR phase "rebuild" (the epoch's communicator): the joiner
                  promoted (reached by connect/accept), then the world's spare promoted with the
                  joiner a survivor (reached again), and the job without a join (one
                  MPI_Comm_create_group); the ratios to the latter

The status file's steps_done is written at most 4 times a second, so a step-time window is
known to about 0.25 s. Not a test: figures only.

Usage: bench/join.py [--runs N] [--steps S] [--bin build/examples/train_mlp]
"""
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))
import ftrt_harness as h  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import example_args  # noqa: E402  (one-line argument errors, path checks)

ROOT = os.path.join(HERE, "..")


def train_args(steps):
    return ["--steps", str(steps), "--batch", "32", "--hidden", "64", "--seed", "7",
            "--step-sleep-ms", "1", "--ckpt-every", "0"]


def run_dir(job):
    """The job's ftrt-run run directory, once its join.json is there."""
    parent = os.path.join(tempfile.gettempdir(), f"ftrt-run.{os.getuid()}")
    for _ in range(1000):
        for d in os.listdir(parent) if os.path.isdir(parent) else []:
            p = os.path.join(parent, d)
            if d.startswith(f"{job.proc.pid}-") and os.path.exists(os.path.join(p, "join.json")):
                return p
        time.sleep(0.01)
    raise SystemExit("join bench: the job's run directory did not appear")


def sample(job, samples, until, pred=None):
    """Appends (time, trainer 0's steps_done) every 20 ms until `until` (monotonic) or pred(st)."""
    while time.monotonic() < until:
        st = job.status_json()
        t0 = st and h.trainer(st, 0)
        if t0:
            samples.append((time.monotonic(), t0["steps_done"]))
        if st and pred and pred(st):
            return st
        time.sleep(0.02)
    return None


def step_ms(samples, a, b):
    """ms per step of trainer 0 between monotonic times a and b, from the samples."""
    inside = [s for s in samples if a <= s[0] <= b]
    if len(inside) < 2 or inside[-1][1] == inside[0][1]:
        return None
    return (inside[-1][0] - inside[0][0]) / (inside[-1][1] - inside[0][1]) * 1e3


def joined_round(work, i, a):
    """One job with a join and two kills: (join s, before, during, after ms/step, rebuild ms of
    the joiner's promotion, of the world spare's with the joiner a survivor)."""
    job = h.train_job(os.path.join(work, f"run{i}-join"), a.bin, 6, train_args(a.steps),
                      spares=1, run_opts=["--joinable"])
    job.start()
    rundir = run_dir(job)
    job.wait_trainer(0, min_steps=200, timeout=120)
    samples = []
    sample(job, samples, time.monotonic() + 2.0)
    t0 = time.monotonic()
    cmd = [sys.executable, h.FTRT_RUN, "--join", rundir, "--"] + h.mpirun_cmd(
        1, [a.bin] + train_args(a.steps) + ["--ckpt-dir", job.ckpt, "--params-out", job.params,
                                            "--report", job.report])
    joiner = h.Job(os.path.join(work, f"run{i}-joiner"), cmd, h.job_env(), fresh=True,
                   echo=False).start()
    st = sample(job, samples, t0 + 60, lambda s: s.get("joins", 0) >= 1)
    t1 = time.monotonic()
    if not st:
        raise SystemExit(f"join bench: no join within 60 s; see {job.dir}")
    sample(job, samples, t1 + 2.0)
    job.inject(signal.SIGKILL, h.trainer(job.status_json(), 1), "sigkill")
    job.wait_status(lambda s: s["epoch"] >= 1 and s["job"] == "running", timeout=60)
    time.sleep(0.5)
    job.inject(signal.SIGKILL, h.trainer(job.status_json(), 2), "sigkill")
    rc, jrc = job.wait(600), joiner.wait(120)
    rep = job.load_report() if rc == 0 else None
    if not rep or jrc != 0 or len(rep["failures"]) != 2:
        raise SystemExit(f"join bench: the job (exit {rc}) or the joiner (exit {jrc}) failed; "
                         f"see {job.dir}")
    f = rep["failures"]
    by_spare = {x["spare_world_rank"]: x["phases_ms"]["rebuild"] for x in f}
    return (t1 - t0, step_ms(samples, t0 - 2.0, t0), step_ms(samples, t0, t1),
            step_ms(samples, t1, t1 + 2.0), by_spare.get(6), by_spare.get(5))


def plain_round(work, i, a):
    """The same job without a join, one trainer killed: its rebuild ms."""
    job = h.train_job(os.path.join(work, f"run{i}-plain"), a.bin, 6, train_args(a.steps),
                      spares=1)
    job.start()
    job.inject(signal.SIGKILL, job.wait_trainer(1, min_steps=400, timeout=120), "sigkill")
    rc = job.wait(600)
    rep = job.load_report() if rc == 0 else None
    if not rep or len(rep["failures"]) != 1:
        raise SystemExit(f"join bench: the plain job failed (exit {rc}); see {job.dir}")
    return rep["failures"][0]["phases_ms"]["rebuild"]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = example_args.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "examples", "train_mlp"))
    a = ap.parse_args()
    if a.runs < 1 or a.steps < 1000:
        ap.error("--runs must be >= 1 and --steps >= 1000")
    example_args.check_paths(ap, a, inputs=("bin",))
    if h.open_mpi_major() != 4:
        raise SystemExit("join bench: joins need Open MPI 4.1 (ompi-server)")
    work = tempfile.mkdtemp(prefix="ftrt-join-bench-")
    rows, plain = [], []
    for i in range(a.runs):
        rows.append(joined_round(work, i, a))
        plain.append(plain_round(work, i, a))
        r = rows[-1]
        print(f"run {i}: join {r[0]:.2f} s; step {r[1]:.2f} / {r[2]:.2f} / {r[3]:.2f} ms "
              f"(before / join / after); rebuild joiner {r[4]:.1f} ms, spare + joiner "
              f"{r[5]:.1f} ms, no join {plain[-1]:.1f} ms", flush=True)
    cols = list(zip(*rows))
    j, b, d, af, rj, rs = (med(c) for c in cols)
    p = med(plain)
    print(f"join time: median {j:.2f} s (min {min(cols[0]):.2f}, max {max(cols[0]):.2f}) over "
          f"{a.runs} run(s)")
    print(f"trainer 0's step time: {b:.2f} ms before, {d:.2f} ms during the join "
          f"({d / b:.2f}x), {af:.2f} ms after ({af / b:.2f}x)")
    print(f"communicator rebuild: joiner promoted {rj:.1f} ms ({rj / p:.2f}x), world spare with "
          f"the joiner a survivor {rs:.1f} ms ({rs / p:.2f}x), no join {p:.1f} ms")
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
