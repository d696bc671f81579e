"""ftrt-chaos --slurm: the job launched through a real Slurm cluster made for the run (Debian's
Slurm 22.05 and munge on 4 simulated hosts: tests/harness/ftrt_slurm.py, the cluster of the
slurm.* tests; docs/slurm.md "The test cluster"), as Slurm users launch it: the command after
`--` is `sbatch SCRIPT ARGS...` (examples/train_mlp.sbatch), submitted with `--wait`, so that
the submission ends with the job and its exit status is the batch script's. The compute nodes
are the run's hosts (ftrt-s1..3; ftrt-s4 holds slurmctld and munged): the host kinds strike
them, and a lost node is set DOWN right after the fault (as slurmctld does after
SlurmdTimeout), which takes it out of the job (--no-kill keeps the job); a relaunch excludes
the lost nodes (`--exclude`, fewer nodes with more tasks each, as a second submission would).
"""
import math
import os
import signal
import subprocess
import sys

from .common import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "harness"))
import ftrt_harness as h  # noqa: E402
import ftrt_slurm as sl  # noqa: E402


class SlurmArrangement:
    """The cluster of one ftrt-chaos run, with the interface of hosts.Arrangement that the
    injector and the verdict use (names, slots, name(), pids(), cut(), mend(), close()) plus
    the Slurm launch: command(), env(), node_lost(), launch_end(), cancel(). Logs of the
    daemons are kept in WORK/slurm-logs."""

    NODES, SLOTS = 4, 2

    def __init__(self, work):
        self.work = work
        self.prefix = sl.SLURM_HOSTS_ENV["FTRT_HOSTS_PREFIX"]
        self.hosts = self.slurm = None
        self.names, self.slots, self.cut_hosts = [], self.SLOTS, set()
        self.jobid = None
        self.ntasks = None  # the first launch's tasks (ranks): kept by the relaunches

    def open(self):
        """Makes the hosts and starts the cluster. Returns None, or (exit status, why): 77
        where namespaces cannot be made here or a Slurm package is missing (1 under CI)."""
        try:
            self.hosts = h.Hosts(self.NODES, self.SLOTS, env=sl.SLURM_HOSTS_ENV).__enter__()
        except h.Skip as e:
            return (77, str(e))
        except h.Fail as e:
            return (1, str(e))
        try:
            self.slurm = sl.SlurmCluster(self.hosts, keep=self.work).__enter__()
        except h.Skip as e:
            self.close()
            return (77, str(e))
        except h.Fail as e:
            self.close()
            return (1, str(e))
        self.names = list(self.slurm.nodes)
        return None

    def close(self):
        if self.slurm:
            self.slurm.__exit__(None, None, None)
            self.slurm = None
        if self.hosts:
            self.hosts.__exit__(None, None, None)
            self.hosts = None

    # ---- the hosts -------------------------------------------------------------------------
    def name(self, spec):
        return f"{self.prefix}{spec}" if spec.isdigit() else spec

    def pids(self, host):
        return self.hosts.pids(host)

    def cut(self, host):
        self.cut_hosts.add(host)
        self.hosts.cut(host)

    def mend(self, host):
        self.hosts.mend(host)
        self.cut_hosts.discard(host)

    def node_lost(self, host):
        """After a host fault: the node DOWN, as slurmctld sets it after SlurmdTimeout."""
        self.slurm.set_down(host, "ftrt-chaos: host fault")

    # ---- launches --------------------------------------------------------------------------
    def command(self, cmd, n, lost, work):
        """Launch n's command (cmd: `sbatch [opts] SCRIPT ARGS...`), its ftrt-run summary file
        and the job's output file: sbatch --wait --parsable, its output and directory in work,
        and for a relaunch after lost hosts the nodes left (--exclude, --nodes,
        --ntasks-per-node for the same number of tasks)."""
        if not cmd or os.path.basename(cmd[0]) != "sbatch":
            raise SystemExit("ftrt-chaos: --slurm: the command must be `sbatch SCRIPT ARGS...`")
        summary = os.path.join(work, f"launch{n}.summary.json")
        out = os.path.join(work, f"launch{n}.slurm.out")
        for p in (summary, out):
            if os.path.exists(p):
                os.unlink(p)
        opts = ["--wait", "--parsable", f"--output={out}", f"--chdir={work}"]
        left = [x for x in self.names if x not in lost]
        if len(left) < len(self.names) and left and self.ntasks:
            opts += [f"--exclude={','.join(sorted(set(lost)))}", f"--nodes={len(left)}",
                     f"--ntasks-per-node={math.ceil(self.ntasks / len(left))}"]
            print(f"ftrt-chaos: launch {n} on {', '.join(left)} (without "
                  f"{', '.join(sorted(set(lost)))})", flush=True)
        self.cur_hosts = left
        return [cmd[0]] + opts + cmd[1:], summary, out

    def env(self, env, summary):
        """The job's environment: the cluster (SLURM_CONF), Open MPI on the hosts' network,
        ftrt's tree for the batch script (FTRT), ftrt-run's summary file."""
        return dict(env, **self.slurm.env, **sl.sim_mca(self.slurm.net), FTRT=REPO,
                    FTRT_RUN_SUMMARY=summary)

    @staticmethod
    def job_id(log_path):
        """The Slurm job id a launch's sbatch --parsable printed first in its log, or None."""
        try:
            with open(log_path, errors="replace") as f:
                first = f.readline().strip().split(";")[0]
        except OSError:
            return None
        return int(first) if first.isdigit() else None

    def launch_end(self, n, work, st):
        """After launch n (files in work; st: its last status file): the Slurm job's id, its
        record in the completion log (waited for up to 10 s), its output appended to the launch
        log, and the processes of the ftrt job left in the hosts (killed; Slurm's daemons are
        not the job's). Returns the launch's extra fields: slurm_job, sacct, leftovers."""
        log_path = os.path.join(work, f"launch{n}.log")
        job_out = os.path.join(work, f"launch{n}.slurm.out")
        self.jobid = self.job_id(log_path)
        if self.ntasks is None and st and st.get("ranks"):
            self.ntasks = len(st["ranks"])
        acct = None
        if self.jobid is not None:
            info = self.slurm.wait_ended(self.jobid, 10)
            acct = self.slurm.sacct(self.jobid) if info else None
        try:
            with open(job_out, errors="replace") as f, open(log_path, "a") as log:
                log.write(f.read())
        except OSError:
            pass
        marked = set(sl.job_processes())
        left = {}
        for host in self.names + [self.slurm.ctl]:
            mine = [p for p in self.pids(host) if p in marked]
            for pid in mine:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if mine:
                left[host] = mine
        return {"slurm_job": self.jobid, "sacct": acct, "leftovers": left}

    def cancel(self, log_path):
        """Cancels the Slurm job of the launch whose log is log_path (past its --timeout)."""
        jobid = self.job_id(log_path)
        if jobid is not None:
            subprocess.run(["scancel", str(jobid)], env=self.slurm.env, capture_output=True)
