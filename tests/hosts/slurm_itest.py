#!/usr/bin/env python3
"""Slurm integration tests for ftrt: a real Slurm cluster (Debian 12's Slurm 22.05 and munge,
tests/harness/ftrt_slurm.py) on 4 simulated hosts (network namespaces, tests/hosts/ftrt-hosts,
prefix ftrt-s on 10.79.0.0/24): slurmctld and munged on ftrt-s4, one slurmd on each of
ftrt-s1..3, started and stopped by each case. Jobs are submitted as users submit them: sbatch
of examples/train_mlp.sbatch (docs/slurm.md), whose mpirun --enable-recovery starts its daemons
through srun; 2 tasks per node, so world ranks 0-1 run on ftrt-s1, 2-3 on ftrt-s2, 4-5 on
ftrt-s3. Every case checks the job's true exit status in Slurm's accounting (sacct -c: the
job completion log), the end of the job within a bound after its last rank's exit
(tools/ftrt-run's summary), that no process of the ftrt job is left, and, where training
completes, that the final parameters are byte-identical to a one-host run (the references of
hosts_itest.py, fixture ftrt_hosts_reference). Leaving a case stops the cluster and removes its
directory and the hosts, also when the case fails. Python 3 standard library only; root
(namespaces): skipped (77) otherwise; a missing Slurm or munge package fails under CI.

Usage: slurm_itest.py --bin BUILD/examples/train_mlp --work DIR <case>
       slurm_itest.py --list   (the cases, their ctest timeouts and fixtures: read by CMake)
Cases:
  cluster   the cluster itself: nodes named and addressed as their hosts, a batch script's exit
            status in sacct (2: the script refuses a missing program), and nothing left after it
            (also after a failing body); docs/slurm.md shows the batch script as it is
  kill      1 coordinator + 4 trainers + 1 spare; trainer logical rank 2 (world rank 3, on
            ftrt-s2) SIGKILLed: the spare (world rank 5, ftrt-s3) takes its place; sacct 0:0
  hostkill  1 + 3 trainers + 2 spares; every process of ftrt-s2 SIGKILLed (slurmd, slurmstepd,
            orted, both trainers), then the node set DOWN (as slurmctld does after
            SlurmdTimeout): Slurm removes the node from the job and keeps the job and mpirun's
            daemon step running (--no-kill), both spares take the trainers' places
  linkcut   1 + 3 trainers + 2 spares; ftrt-s2's link cut and the node set DOWN: both trainers
            declared failed by heartbeat timeout (1 s) and replaced
  nospare   1 + 4 trainers + 1 spare; ftrt-s2 killed after a committed checkpoint: the job
            fails (FTRT_ENOSPARE or FTRT_EABORT), sacct FAILED 1:0; a second submission with
            --exclude=ftrt-s2 on 2 nodes x 3 tasks resumes from the last committed checkpoint and
            finishes byte-identical, sacct COMPLETED 0:0
  chaos     tools/ftrt-chaos --slurm (it makes the same cluster itself, submits the job with
            sbatch --wait and stops the cluster at its end): 1 + 3 trainers + 2 spares, a
            trainer on another host than the coordinator's SIGKILLed (kill-trainer, target
            remote), then a host whose trainer a spare elsewhere can replace killed whole
            (kill-host, target covered: ftrt-s2), its node set DOWN by ftrt-chaos; its verdict
            passes (both recovered in place, byte-identical to the one-host run, nothing of the
            job left), and Slurm's completion log has the job COMPLETED 0:0
Each case prints "measured:" lines: the end after the last rank's exit, MTTD and MTTR.
Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "harness"))
sys.path.insert(0, HERE)
import ftrt_harness as h  # noqa: E402
import ftrt_slurm as sl  # noqa: E402
from ftrt_harness import check, same_bytes, trainer  # noqa: E402
from hosts_itest import need_reference, print_failures  # noqa: E402

CASES = {}
EXIT_BOUND_S = 5.0     # the job's end after its last rank's exit
HB_TIMEOUT_MS = 1000
LOST = "ftrt-s2"       # the host the faults strike


class Cluster:
    """4 simulated hosts and the Slurm cluster on them, for one case (a `with` block); the
    logs land in DIR/slurm-logs. On leaving: the cluster stopped, its directory, the hosts and
    every process in them gone (checked when the body passed)."""

    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.hosts = h.Hosts(4, 2, env=sl.SLURM_HOSTS_ENV)
        self.slurm = None

    def __enter__(self):
        self.hosts.__enter__()
        try:
            self.slurm = sl.SlurmCluster(self.hosts, keep=self.dir).__enter__()
        except BaseException:
            self.hosts.__exit__(None, None, None)
            raise
        self.sessions = sessions()
        return self

    def __exit__(self, exc_type, *exc):
        cdir, pids = self.slurm.dir, self.slurm.daemon_pids()
        try:
            self.slurm.__exit__(exc_type, *exc)
        finally:
            self.hosts.__exit__(exc_type, *exc)
        if exc_type is None:
            alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
            check(not alive and not os.path.exists(cdir),
                  f"cluster stopped: no daemon left ({alive}), its directory removed")
        return False

    def job(self, name, spares, opts=(), fresh=True):
        job = sl.SlurmJob(self.slurm, os.path.join(self.dir, name), sl.SBATCH_SCRIPT,
                          h.MLP_ARGS, spares=spares, heartbeat_timeout_ms=HB_TIMEOUT_MS,
                          opts=opts, fresh=fresh)
        job.env["APP"] = os.path.abspath(self.bin)
        return job

    def end(self, job, want_rc, state, timeout=120):
        """Waits for the job; checks its exit status, Slurm's record of it, the end bound and
        that nothing of the job is left. Returns the sacct record."""
        rc = job.wait(timeout)
        check(rc == want_rc, f"the job (Slurm job {job.jobid}) ends with exit status {want_rc} "
              f"(got {rc}, {job.elapsed:.1f} s after the submission)")
        acct = self.slurm.sacct(job.jobid)
        check(acct and acct["State"] == state and acct["ExitCode"] == f"{want_rc}:0",
              f"sacct -c: {state}, ExitCode {want_rc}:0 (got {acct})")
        s = job.load_summary()
        check(s["exit_status"] == rc, "ftrt-run's summary agrees with Slurm")
        took = job.t_end - s["t_last_rank_exit"]
        print(f"  measured: the Slurm job ended {took:.2f} s after the last rank's exit "
              f"(ftrt-run {s['t_exit'] - s['t_last_rank_exit']:.2f} s); "
              + (f"mpirun ended by ftrt-run ({s['ended_mpirun']})" if s["ended_mpirun"]
                 else f"mpirun exited by itself ({s['mpirun_status']})"), flush=True)
        check(took <= EXIT_BOUND_S, f"the job ends within {EXIT_BOUND_S} s of the last rank's "
              f"exit ({took:.2f} s)")
        marked = set(sl.job_processes())
        left = [p for n in self.hosts.names for p in self.hosts.pids(n) if p in marked]
        check(not left, f"no process of the ftrt job left in the hosts ({left})")
        new = sessions() - self.sessions
        check(not new, f"no Open MPI session directory left in the hosts ({sorted(new)})")
        return acct


def sessions():
    """Open MPI session directories of the Slurm hosts now."""
    pre = sl.SLURM_HOSTS_ENV["FTRT_HOSTS_PREFIX"]
    return set(glob.glob(os.path.join(tempfile.gettempdir(), f"ompi.{pre}*.*", "*")))


def cluster(args, name):
    c = Cluster(os.path.join(args.work, f"slurm-{name}"))
    c.bin = args.bin
    return c


def recovered_by(rep, spares, n):
    fl = rep["failures"]
    return len(fl) == n and all(f["recovered"] for f in fl) and \
        {f["spare_world_rank"] for f in fl} == set(spares)


def down_and_kept(c, job):
    """Sets the lost host's node DOWN while the job trains; checks that Slurm removed the node
    from the job, kept the job and mpirun's daemon step, and killed that step on the node only."""
    c.slurm.set_down(LOST)
    info, st = c.slurm.job(job.jobid), job.status_json()
    check(info["JobState"] == "RUNNING" and info["NodeList"] == "ftrt-s[1,3]" and
          st["job"] in ("running", "recovering"),
          f"node {LOST} DOWN: Slurm removed it from the job, which runs on "
          f"({info['JobState']} on {info['NodeList']}, ftrt job {st['job']})")
    with open(os.path.join(c.slurm.dir, "log", "slurmctld.log")) as f:
        log = f.read()
    check(re.search(rf"Killing JobId={job.jobid} StepId=0 on failed node {LOST}", log) and
          "StepId=0 due to failed node" not in log,
          "mpirun's daemon step was ended on the failed node only (srun --no-kill)")


@h.case(CASES, timeout_s=120)
def case_cluster(args):
    """The cluster: its nodes, a job's exit status in the accounting, a clean stop; and the
    batch script that docs/slurm.md shows is the one the tests submit."""
    with open(sl.SBATCH_SCRIPT) as f, open(os.path.join(h.REPO, "docs", "slurm.md")) as g:
        check(f"```bash\n{f.read()}```" in g.read(),
              "docs/slurm.md shows examples/train_mlp.sbatch as it is")
    with cluster(args, "cluster") as c:
        st = c.slurm.node_states()
        check(st == {f"ftrt-s{i}": "idle" for i in (1, 2, 3)}, f"three idle nodes ({st})")
        r = c.slurm._run(["srun", "-N3", "-n3", "-l", "sh", "-c",
                          "echo $(hostname) $SLURMD_NODENAME"])
        got = sorted(r.stdout.split("\n")[:-1])
        check(got == [f"{i}: ftrt-s{i + 1} ftrt-s{i + 1}" for i in range(3)],
              f"a task on each node runs in its host, under its name ({got})")
        for i in (1, 2, 3):
            addr = c.slurm.node(f"ftrt-s{i}")["NodeAddr"]
            check(addr == f"10.79.0.{i}", f"ftrt-s{i}: NodeAddr {addr}")
        job = c.job("badapp", spares=1)
        job.env["APP"] = os.path.join(c.dir, "no-such-program")
        rc = job.start().wait(60)
        acct = c.slurm.sacct(job.jobid)
        check(rc == 2 and "is not an executable file" in job.out and
              acct["State"] == "FAILED" and acct["ExitCode"] == "2:0",
              f"the batch script refuses a missing APP, and its exit status 2 is in sacct -c "
              f"({acct}; {job.out.strip()})")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check("ftrt-s" not in netns, "no namespace left")
    try:
        with cluster(args, "cluster-fail") as c:
            cdir, pids = c.slurm.dir, c.slurm.daemon_pids()
            raise RuntimeError("a failing test body")
    except RuntimeError:
        pass
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
    check("ftrt-s" not in netns and not os.path.exists(cdir) and not alive,
          "nothing left after a failing body either")


def end_host_lost(c, job, r3):
    """The end of a job that lost node LOST (trainers world ranks 2 and 3): the node DOWN and
    the job kept, the job COMPLETED, both trainers recovered by the spares on ftrt-s3 and the
    final parameters byte-identical to r3's; returns the report's failures."""
    down_and_kept(c, job)
    c.end(job, 0, "COMPLETED")
    rep = job.load_report()
    print_failures(rep)
    check(recovered_by(rep, [4, 5], 2), "two failures, both recovered by the spares on ftrt-s3")
    check(same_bytes(job.params, r3), "final parameters byte-identical to the one-host run")
    return rep["failures"]


@h.case(CASES, fixture="required", timeout_s=120)
def case_kill(args):
    r4 = need_reference(args, 4)
    with cluster(args, "kill") as c:
        job = c.job("job", spares=1).start()
        victim = job.wait_trainer(2, 40)
        st = job.status_json()
        check(victim["host"] == LOST and [r["host"] for r in st["ranks"]] ==
              ["ftrt-s1", "ftrt-s1", "ftrt-s2", "ftrt-s2", "ftrt-s3", "ftrt-s3"],
              "two ranks on each node; the victim (logical rank 2) on ftrt-s2, the spare on "
              "ftrt-s3")
        job.inject(signal.SIGKILL, victim, "sigkill")
        c.end(job, 0, "COMPLETED")
        rep = job.load_report()
        print_failures(rep)
        check(recovered_by(rep, [5], 1) and rep["failures"][0]["kind"] == "connection_lost",
              "one failure, connection lost, recovered by the spare on ftrt-s3")
        check(same_bytes(job.params, r4), "final parameters byte-identical to the one-host run")


@h.case(CASES, fixture="required", timeout_s=120)
def case_hostkill(args):
    r3 = need_reference(args, 3)
    with cluster(args, "hostkill") as c:
        job = c.job("job", spares=2).start()
        job.wait_trainer(1, 20)
        pids = c.hosts.pids(LOST)
        names = sorted({open(f"/proc/{p}/comm").read().strip() for p in pids})
        ranks = c.hosts.kill_host(LOST, job)
        check(sorted(r["world_rank"] for r in ranks) == [2, 3] and
              {"slurmd", "slurmstepd", "orted"} <= set(names),
              f"{LOST} held trainers world ranks 2 and 3, its slurmd, slurmstepd and orted "
              f"({', '.join(names)})")
        fl = end_host_lost(c, job, r3)
        check(all(f["cause"] == "host_lost" and f["host"] == LOST for f in fl) and
              len({f["epoch"] for f in fl}) == 1,
              f"both failures in one epoch, cause: host {LOST} lost")


@h.case(CASES, fixture="required", timeout_s=120)
def case_linkcut(args):
    r3 = need_reference(args, 3)
    with cluster(args, "linkcut") as c:
        job = c.job("job", spares=2).start()
        job.wait_trainer(1, 20)
        ranks = c.hosts.cut(LOST, job)
        check(sorted(r["world_rank"] for r in ranks) == [2, 3],
              f"{LOST} held trainers world ranks 2 and 3")
        fl = end_host_lost(c, job, r3)
        check(all(f["kind"] == "heartbeat_timeout" for f in fl),
              "both failures detected by heartbeat timeout")
        check(all(0.9 <= f["mttd_s"] < 2.0 for f in fl), "MTTD about the 1 s timeout")


@h.case(CASES, fixture="required", timeout_s=120)
def case_nospare(args):
    r4 = need_reference(args, 4)
    with cluster(args, "nospare") as c:
        job = c.job("job", spares=1).start()
        job.wait_status(lambda s: s["last_committed_step"] >= 50 and trainer(s, 0))
        c.hosts.kill_host(LOST, job)
        # the node DOWN (as slurmctld does SlurmdTimeout after it fell silent) while the job
        # is still failing: Slurm removes it from the job, and so frees the job's CPUs on the
        # other nodes when the job ends instead of after its end message to the lost node
        # timed out
        c.slurm.set_down(LOST)
        c.end(job, 1, "FAILED")
        rep = job.load_report()
        print_failures(rep)
        check(rep["status"] == "failed" and rep["error"] in ("FTRT_ENOSPARE", "FTRT_EABORT"),
              f"the report says the job failed: {rep['error']}")
        committed = rep["checkpoints"]["last_committed_step"]
        check(committed >= 50, f"a committed checkpoint remains (step {committed})")
        job2 = c.job("job", spares=1, fresh=False, opts=[
            f"--exclude={LOST}", "--nodes=2", "--ntasks-per-node=3"]).start()
        acct = c.end(job2, 0, "COMPLETED")
        check(acct["NodeList"] == "ftrt-s[1,3]", f"the second job ran on ftrt-s1 and ftrt-s3 "
              f"({acct['NodeList']})")
        check(f"resumed at step {committed}" in job2.out,
              f"the second job resumed at step {committed}")
        check(same_bytes(job2.params, r4), "final parameters byte-identical to the one-host run")


@h.case(CASES, fixture="required", timeout_s=240)
def case_chaos(args):
    r3 = need_reference(args, 3)
    d = os.path.join(args.work, "slurm-chaos")
    shutil.rmtree(d, ignore_errors=True)  # a checkpoint of an earlier run would be resumed
    os.makedirs(d)
    plan = {"faults": [{"kind": "kill-trainer", "at_step": 30, "target": "remote"},
                       {"kind": "kill-host", "at_step": 100, "target": "covered"}]}
    with open(os.path.join(d, "plan.json"), "w") as f:
        json.dump(plan, f)
    ckpt, params, verdict = (os.path.join(d, x) for x in ("ckpt", "final.params",
                                                          "verdict.json"))
    cmd = [sys.executable, h.FTRT_CHAOS, "--slurm", "--plan", os.path.join(d, "plan.json"),
           "--workdir", d, "--ckpt-dir", ckpt, "--report", os.path.join(d, "report.json"),
           "--reference", r3, "--params", params, "--json", verdict, "--timeout", "150",
           "--", "sbatch", sl.SBATCH_SCRIPT] + h.MLP_ARGS + [
               "--ckpt-dir", ckpt, "--params-out", params]
    print("  $", " ".join(cmd), flush=True)
    env = h.job_env({"APP": os.path.abspath(args.bin)}, spares=2,
                    heartbeat_timeout_ms=HB_TIMEOUT_MS)
    rc = subprocess.call(cmd, env=env)
    check(os.path.exists(verdict), f"ftrt-chaos --slurm ran and gave a verdict (exit {rc})")
    v = json.load(open(verdict))
    rows = {name: res for name, res, _ in v["rows"]}
    kinds = [i["kind"] for i in v["injections"]]
    check(kinds == ["kill-trainer", "kill-host"] and
          v["injections"][1].get("host") == LOST,
          f"both faults injected, the host one on {LOST} ({kinds})")
    check(rc == 0 and v["ok"] and all(r == "PASS" for r in rows.values()),
          f"ftrt-chaos's verdict passes (exit {rc}; rows not passed: "
          f"{[n for n, r in rows.items() if r != 'PASS']})")
    ln = v["launches"]
    acct = ln[0].get("sacct") or {}
    check(len(ln) == 1 and ln[0].get("slurm_job") and acct.get("State") == "COMPLETED" and
          acct.get("ExitCode") == "0:0",
          f"one Slurm job ({ln[0].get('slurm_job')}), in the completion log COMPLETED 0:0 "
          f"({acct})")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check("ftrt-s" not in netns and not sl.job_processes(slurm_only=True),
          "ftrt-chaos stopped the cluster and removed its hosts; nothing of the job is left")


if __name__ == "__main__":
    sys.exit(h.case_main(CASES, __doc__))
