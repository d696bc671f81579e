#!/usr/bin/env python3
"""Recovery under Slurm against recovery under mpirun, on the same simulated hosts in the same
run: MTTD and MTTR of a SIGKILLed trainer and of a SIGKILLed host, and the end of the job
(from the last rank's exit to the end of ftrt-run under mpirun, of the Slurm job under Slurm).
Not a test: figures only.

Each round runs, on 3 simulated hosts x 2 ranks (tests/hosts/ftrt-hosts, prefix ftrt-s; a
fourth host holds Slurm's controller), the train_mlp job of the tests (ftrt_harness.MLP_ARGS)
four times: {mpirun through tools/ftrt-run with the hosts' rsh agent, sbatch of
examples/train_mlp.sbatch on a Slurm cluster started for the run (tests/harness/ftrt_slurm.py)}
x {trainer logical rank 2 on ftrt-s2 SIGKILLed at step 40 (1 spare), every process of ftrt-s2
SIGKILLed at step 20 (2 spares; under Slurm the node is then set DOWN, as in ctest
slurm.hostkill)}, in an order that alternates between rounds. It prints each job, then per case
the median [min, max] under each launcher and the ratio of the medians (Slurm / mpirun).

Usage: bench/slurm_recovery.py [--runs N] [--bin build/examples/train_mlp] (root)
"""
import os
import signal
import statistics
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import ftrt_harness as h  # noqa: E402
import ftrt_slurm as sl  # noqa: E402
import example_args  # noqa: E402  (one-line argument errors, path checks)

LOST = "ftrt-s2"
FAULTS = {"trainer": (1, 2, 40), "host": (2, 1, 20)}  # spares, logical rank watched, its step


def strike(fault, job, hosts, slurm):
    """Injects the fault once the watched trainer has done its steps."""
    _, logical, step = FAULTS[fault]
    victim = job.wait_trainer(logical, step, timeout=120)
    if fault == "trainer":
        job.inject(signal.SIGKILL, victim, "sigkill")
    else:
        hosts.kill_host(LOST, job)
        if slurm:
            slurm.set_down(LOST)


def mpirun_job(work, a, hosts, fault, hostfile):
    spares = FAULTS[fault][0]
    job = h.train_job(work, a.bin, 6, spares=spares, heartbeat_timeout_ms=1000,
                      mpirun_opts=hosts.mpirun_opts(hostfile))
    job.echo = False
    job.start()
    strike(fault, job, hosts, None)
    rc = job.wait(180)
    s = job.load_summary()
    return rc, job, s["t_exit"] - s["t_last_rank_exit"]


def slurm_job(work, a, hosts, fault):
    with sl.SlurmCluster(hosts, keep=work) as slurm:
        job = sl.SlurmJob(slurm, work, sl.SBATCH_SCRIPT, h.MLP_ARGS,
                          spares=FAULTS[fault][0], heartbeat_timeout_ms=1000)
        job.env["APP"] = a.bin
        job.echo = False
        job.start()
        strike(fault, job, hosts, slurm)
        rc = job.wait(180)
    return rc, job, job.t_end - job.load_summary()["t_last_rank_exit"]


def one(launcher, fault, work, a, hosts, hostfile):
    """One job: {"mttd": [ms...], "mttr": [ms...], "end": s} or None (failed)."""
    if launcher == "mpirun":
        rc, job, end = mpirun_job(work, a, hosts, fault, hostfile)
    else:
        rc, job, end = slurm_job(work, a, hosts, fault)
    rep = job.load_report()
    fl = rep["failures"]
    if rc != 0 or not fl or not all(f["recovered"] for f in fl):
        print(f"  {launcher} {fault}: no recovery (exit {rc}); see {job.dir}", flush=True)
        return None
    return {"mttd": [f["mttd_s"] * 1e3 for f in fl], "mttr": [f["mttr_s"] * 1e3 for f in fl],
            "end": end}


def summary(rows):
    print(f"\n{'case':>8} {'figure':>26} {'mpirun median [min, max]':>28} "
          f"{'Slurm median [min, max]':>28} {'Slurm / mpirun':>14}")
    for fault in FAULTS:
        for key, unit in (("mttd", "ms"), ("mttr", "ms"), ("end", "s")):
            med = {}
            cells = []
            for launcher in ("mpirun", "slurm"):
                v = [x for r in rows if r[0] == launcher and r[1] == fault
                     for x in (r[2][key] if isinstance(r[2][key], list) else [r[2][key]])]
                med[launcher] = statistics.median(v) if v else None
                cells.append(f"{med[launcher]:.1f} [{min(v):.1f}, {max(v):.1f}] (n={len(v)})"
                             if v else "-")
            ratio = (f"{med['slurm'] / med['mpirun']:.2f}"
                     if med["mpirun"] and med["slurm"] is not None else "-")
            what = {"mttd": "MTTD", "mttr": "MTTR", "end": "end after last rank"}[key]
            print(f"{fault:>8} {what + ' (' + unit + ')':>26} {cells[0]:>28} {cells[1]:>28} "
                  f"{ratio:>14}")


def main():
    ap = example_args.Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="rounds (4 jobs each)")
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "examples", "train_mlp"))
    a = ap.parse_args()
    example_args.check_paths(ap, a, inputs=("bin",))
    if a.runs < 1:
        ap.error(f"--runs: expected a number >= 1, got {a.runs}")
    a.bin = os.path.abspath(a.bin)
    os.environ.update(sl.SLURM_HOSTS_ENV)   # the rsh agent of the mpirun jobs reads them
    work = tempfile.mkdtemp(prefix="ftrt-bench-slurm-")
    rows, n = [], 0
    print(f"work directory {work}; {a.runs} round(s) of 4 jobs", flush=True)
    try:
        with h.Hosts(4, 2, env=sl.SLURM_HOSTS_ENV) as hosts:
            hostfile = hosts.hostfile(os.path.join(work, "hostfile"), hosts.names[:3], 2)
            for i in range(a.runs):
                order = [(la, fa) for la in ("mpirun", "slurm") for fa in FAULTS]
                for launcher, fault in (order if i % 2 == 0 else order[::-1]):
                    n += 1
                    r = one(launcher, fault, os.path.join(work, f"job{n}"), a, hosts, hostfile)
                    if r is None:
                        return 1
                    rows.append((launcher, fault, r))
                    print(f"round {i} {launcher:>6} {fault:>7}: MTTD "
                          f"{', '.join(f'{x:.1f}' for x in r['mttd'])} ms, MTTR "
                          f"{', '.join(f'{x:.1f}' for x in r['mttr'])} ms, end after the last "
                          f"rank's exit {r['end']:.2f} s", flush=True)
    except (h.Fail, h.Skip, h.MissingDependency) as e:
        print(f"slurm_recovery: {e}", flush=True)
        return 77 if isinstance(e, (h.Skip, h.MissingDependency)) else 1
    summary(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
