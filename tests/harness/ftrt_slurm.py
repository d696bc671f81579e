"""ftrt_slurm: a real Slurm cluster (Debian 12's Slurm 22.05 and munge) on the simulated hosts of
tests/hosts, started and stopped by a test or a bench, and ftrt jobs submitted to it with sbatch.

    with h.Hosts(4, 2, env=SLURM_HOSTS_ENV) as hosts, SlurmCluster(hosts, keep=dir) as slurm:
        job = SlurmJob(slurm, dir, SBATCH_SCRIPT, MLP_ARGS, spares=1).start()
        victim = job.wait_trainer(2, 40)            # the status file, as for mpirun jobs
        job.inject(signal.SIGKILL, victim, "sigkill")
        rc = job.wait(120)                         # the batch script's exit status
        acct = slurm.sacct(job.jobid)              # {"State": "COMPLETED", "ExitCode": "0:0", ...}

The last host runs the controller: slurmctld, and munged with a key made here (one munged
serves every host: its socket is a file, and the hosts share this machine's file system). Each
other host runs one slurmd (NodeName = the host's name, NodeAddr = its address). The
configuration (slurm.conf, cgroup.conf), the key, the state, the spool and temporary
directories, the pid and log files all live in one directory made here (/tmp/ftrt-slurm-*,
short: Slurm and munge put Unix sockets there) and removed at the end, after the logs were
copied to `keep`. Commands (sbatch, scontrol, sacct) run in the root namespace, the login node
at NET.254, with SLURM_CONF pointing at the configuration (SlurmCluster.env).

Settings and why (docs/slurm.md "The test cluster"): proctrack/linuxproc and task/none (no
cgroups: `ip netns exec` gives each host a fresh /sys without the cgroup mounts, and
cgroup.conf's CgroupPlugin=cgroup/v1 only spares slurmd the autodetection that fails there);
TmpFS and SlurmdSpoolDir per node (%n: three slurmd on one file system); accounting without
slurmdbd: JobCompType=jobcomp/filetxt, read by `sacct -c`, which gives a job's state and exit
code; SlurmdParameters=config_overrides: each node has CPUS_PER_NODE CPUs whatever this
machine has (a relaunch on fewer nodes takes more tasks per node, as the mpirun tests
oversubscribe). Python 3 standard library only; root.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import ftrt_harness as h

# The simulated hosts of the Slurm tests: apart from the hosts tests' ftrt-h* (10.77.0.0/24)
# and the chaos campaign's ftrt-c* (10.78.0.0/24).
SLURM_HOSTS_ENV = {"FTRT_HOSTS_PREFIX": "ftrt-s", "FTRT_HOSTS_NET": "10.79.0",
                   "FTRT_HOSTS_BRIDGE": "ftrtbr-s"}
CPUS_PER_NODE = 4
# The batch script of docs/slurm.md, submitted as it is by the tests.
SBATCH_SCRIPT = os.path.join(h.REPO, "examples", "train_mlp.sbatch")
DAEMONS = ("munged", "slurmctld", "slurmscriptd", "slurmd")
# Job states once the batch script is over (COMPLETING: it is, and a node has not confirmed the
# end yet: a lost node holds it there until it is set DOWN).
ENDED = ("COMPLETING", "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT",
         "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")
# The programs a cluster needs (their Debian packages: ftrt_harness.DEBIAN_TOOLS).
TOOLS = ("slurmctld", "slurmd", "sbatch", "scontrol", "sacct", "sinfo", "munged", "mungekey")


def slurm_conf(d, ctl, ctl_addr, nodes, net, slurmd_timeout_s):
    """The text of slurm.conf for cluster directory d: controller ctl at ctl_addr, compute nodes
    `nodes` (names) at NET.<their number>."""
    addrs = ",".join(f"{net}.{n[len(n.rstrip('0123456789')):]}" for n in nodes)
    return f"""# written by tests/harness/ftrt_slurm.py
ClusterName=ftrt
SlurmctldHost={ctl}({ctl_addr})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.sock
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
TmpFS={d}/tmp/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd.%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={d}/jobcomp.txt
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
SlurmdTimeout={slurmd_timeout_s}
MinJobAge=600
KillWait=5
InactiveLimit=0
SlurmdParameters=config_overrides
NodeName={",".join(nodes)} NodeAddr={addrs} CPUs={CPUS_PER_NODE} State=UNKNOWN
PartitionName=ftrt Nodes={",".join(nodes)} Default=YES MaxTime=INFINITE State=UP
"""


def parse_kv(text):
    """{key: value} of Slurm's one-line `Key=Value Key=Value` output (scontrol -o)."""
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", text))


class SlurmCluster:
    """A Slurm cluster on `hosts` (an entered ftrt_harness.Hosts): compute nodes on every host
    but the last, the controller and munged on the last. Entering starts the daemons and waits
    until every node is idle; leaving stops them (SIGTERM, SIGKILL after 3 s), kills whatever
    else runs in the hosts (a job's processes), copies the logs to `keep` (a directory, if
    given) and removes the cluster's directory, also when the body raised. A missing program
    ends the test through ftrt_harness.need_tool (a failure under CI, a skip otherwise); a
    daemon that does not come up raises Fail with the tails of the logs. slurmd_timeout_s: Slurm's SlurmdTimeout (a silent node is set DOWN after it; the tests
    set nodes DOWN themselves with set_down(), as that timeout would)."""

    def __init__(self, hosts, keep=None, slurmd_timeout_s=30):
        self.hosts, self.keep, self.slurmd_timeout_s = hosts, keep, slurmd_timeout_s
        self.ctl, self.nodes = hosts.names[-1], hosts.names[:-1]
        self.net = hosts.env.get("FTRT_HOSTS_NET", "10.77.0")
        self.dir = None
        self.daemons = []   # (name, Popen)
        self.env = None

    # ---- start and stop ----------------------------------------------------------------------
    def __enter__(self):
        for tool in TOOLS:
            h.need_tool(tool)
        self.dir = tempfile.mkdtemp(prefix="ftrt-slurm-")
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self):
        d = self.dir
        os.chmod(d, 0o755)  # munged: its socket's directory must be searchable by all
        for sub in ["munge", "state", "run", "log"] + [f"{s}/{n}" for s in ("spool", "tmp")
                                                       for n in self.nodes]:
            os.makedirs(os.path.join(d, sub))
        os.chmod(os.path.join(d, "munge"), 0o755)
        conf = os.path.join(d, "slurm.conf")
        with open(conf, "w") as f:
            f.write(slurm_conf(d, self.ctl, f"{self.net}.{len(self.hosts.names)}", self.nodes,
                               self.net, self.slurmd_timeout_s))
        with open(os.path.join(d, "cgroup.conf"), "w") as f:
            f.write("# no cgroup is used (task/none, proctrack/linuxproc); this only spares\n"
                    "# slurmd the autodetection, which fails without /sys/fs/cgroup\n"
                    "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        self.env = dict(self.hosts.env, SLURM_CONF=conf)
        key = os.path.join(d, "munge", "munge.key")
        self._run(["mungekey", "--create", "--keyfile", key])
        m = os.path.join(d, "munge")
        self._daemon("munged", self.ctl, ["munged", "--foreground", f"--key-file={key}",
                                          f"--socket={m}/munge.sock", f"--pid-file={m}/munged.pid",
                                          f"--log-file={d}/log/munged.log",
                                          f"--seed-file={m}/munged.seed"])
        self._until(lambda: os.path.exists(f"{m}/munge.sock"), "munged's socket", 10)
        self._daemon("slurmctld", self.ctl, ["slurmctld", "-D", "-c", "-f", conf])
        self._until(lambda: "is UP" in self._run(["scontrol", "ping"], check=False).stdout,
                    "slurmctld", 20)
        for n in self.nodes:
            self._daemon(f"slurmd {n}", n, ["slurmd", "-D", "-N", n, "-f", conf])
        self._until(lambda: all(s == "idle" for s in self.node_states().values()),
                    f"nodes {', '.join(self.nodes)} idle", 30)
        print(f"  slurm: slurmctld and munged on {self.ctl}, slurmd on {', '.join(self.nodes)} "
              f"({CPUS_PER_NODE} CPUs each); SLURM_CONF={conf}", flush=True)

    def _daemon(self, name, host, cmd):
        log = open(os.path.join(self.dir, "log", name.replace(" ", ".") + ".out"), "w")
        p = subprocess.Popen([h.FTRT_HOSTS, "exec", host] + cmd, env=self.env, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.daemons.append((name, p))

    def _until(self, cond, what, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.daemons:
                if p.poll() is not None:
                    raise h.Fail(f"slurm: {name} exited ({p.returncode}) while waiting for "
                                 f"{what}:\n{self.log_tail()}")
            if cond():
                return
            time.sleep(0.1)
        raise h.Fail(f"slurm: {what}: not within {timeout} s:\n{self.log_tail()}")

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self):
        """Stops the daemons and every process in the hosts, removes Open MPI's session
        directories of the hosts (<tmp>/ompi.<host>.*: a job that did not end cleanly leaves
        them), keeps the logs, removes the cluster's directory. Idempotent."""
        for _, p in self.daemons:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 3
        for _, p in self.daemons:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for name in self.hosts.names:  # a job's processes, a slurmstepd that lost its node
            for pid in self.hosts.pids(name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.daemons = []
        for name in self.hosts.names:  # Open MPI session directories a killed job left
            for d in glob.glob(os.path.join(tempfile.gettempdir(), f"ompi.{name}.*")):
                shutil.rmtree(d, ignore_errors=True)
        if self.dir:
            if self.keep:
                dst = os.path.join(self.keep, "slurm-logs")
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(os.path.join(self.dir, "log"), dst)
                if os.path.exists(os.path.join(self.dir, "jobcomp.txt")):
                    shutil.copy(os.path.join(self.dir, "jobcomp.txt"), dst)
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def log_tail(self, n=15):
        """The last n lines of each daemon's log and output (for failure messages)."""
        out = []
        d = os.path.join(self.dir, "log") if self.dir else None
        for f in sorted(os.listdir(d)) if d and os.path.isdir(d) else []:
            with open(os.path.join(d, f), errors="replace") as fh:
                lines = fh.read().splitlines()[-n:]
            if lines:
                out.append(f"--- {f}\n" + "\n".join(lines))
        return "\n".join(out)

    # ---- commands ----------------------------------------------------------------------------
    def _run(self, cmd, check=True, env=None, timeout=30):
        r = subprocess.run(cmd, env=env or self.env, capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise h.Fail(f"{' '.join(cmd)}: exit {r.returncode}: {(r.stdout + r.stderr).strip()}")
        return r

    def node_states(self):
        """{node: state} from sinfo ("idle", "alloc", "down*", ...)."""
        r = self._run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        return dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)

    def node(self, name):
        """scontrol show node: {key: value}."""
        return parse_kv(self._run(["scontrol", "-o", "show", "node", name]).stdout)

    def set_down(self, name, reason="ftrt test: node lost"):
        """Sets node `name` DOWN now, as slurmctld does itself SlurmdTimeout after the node
        fell silent: its running jobs go through the same node-failure path
        (kill_running_job_by_node_name: without --no-kill the job ends)."""
        self._run(["scontrol", "update", f"NodeName={name}", "State=DOWN", f"Reason={reason}"])

    def job(self, jobid):
        """scontrol show job: {key: value}, e.g. JobState, ExitCode, NodeList."""
        return parse_kv(self._run(["scontrol", "-o", "show", "job", str(jobid)]).stdout)

    def sacct(self, jobid):
        """The job's accounting record from the job completion log (sacct -c: jobcomp/filetxt,
        no slurmdbd): {"JobID", "State", "ExitCode", "NodeList"}, or None before the job ended."""
        keys = ["JobID", "State", "ExitCode", "NodeList"]
        r = self._run(["sacct", "-c", "-n", "-P", "-j", str(jobid), "-o", ",".join(keys)],
                      check=False)
        rows = [line.split("|") for line in r.stdout.splitlines() if line.strip()]
        rows = [dict(zip(keys, row)) for row in rows if row[0] == str(jobid)]
        return rows[-1] if rows else None

    def wait_ended(self, jobid, timeout):
        """Waits until job `jobid` has ended (its batch script is over) and its record is in the
        completion log; returns scontrol's view of it ({key: value}: JobState, ExitCode
        "code:signal", NodeList, ...) plus "t_ended" (time.time() when the end was first seen,
        polled every 0.1 s), or None after timeout seconds."""
        deadline, t_ended = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            info = self.job(jobid)
            if info.get("JobState") in ENDED:
                t_ended = t_ended or time.time()
                if self.sacct(jobid) is not None:
                    return dict(info, t_ended=t_ended)
            time.sleep(0.1)
        return None

    def sbatch(self, script, args=(), opts=(), env=None):
        """Submits `script args...` with sbatch options `opts`; returns the job id."""
        r = self._run(["sbatch", "--parsable"] + list(opts) + [script] + list(args), env=env)
        return int(r.stdout.strip().split(";")[0])

    def daemon_pids(self):
        return {p.pid for _, p in self.daemons}


def job_processes(marker=b"FTRT_RUN_ID=", slurm_only=False):
    """Pids of the live processes of ftrt jobs on this machine (tools/ftrt-run's marker in their
    environment): ranks, orted daemons, mpirun; with slurm_only, only those a Slurm job started
    (SLURM_JOB_ID in their environment too), so that an ftrt job run beside the test by hand
    is not taken for one the test left."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in env and state != b"Z" and (not slurm_only or b"SLURM_JOB_ID=" in env):
            found.append(int(name))
    return found


class SlurmJob(h.Job):
    """An ftrt job submitted to a SlurmCluster: `sbatch [opts] script args...` with the
    environment of ftrt_harness.train_job (status file, fault log, spares, heartbeat timeout)
    plus the Open MPI settings of the simulated hosts (TCP on their /24, no binding, ranks that
    yield) and FTRT_RUN_SUMMARY (tools/ftrt-run's summary). The status-file waits and inject()
    of ftrt_harness.Job work as for mpirun jobs; start() submits, wait() waits for the Slurm
    job's end and returns its exit status (the batch script's), its output in self.out."""

    def __init__(self, slurm, directory, script, train_args, spares=None,
                 heartbeat_timeout_ms=None, opts=(), fresh=True):
        ckpt = os.path.join(directory, "ckpt")
        self.slurm = slurm
        env = h.job_env(dict(slurm.env, **sim_mca(slurm.net), FTRT=h.REPO,
                             FTRT_FAULT_LOG=os.path.join(directory, "faults.jsonl"),
                             FTRT_STATUS_FILE=os.path.join(ckpt, "status.json"),
                             FTRT_RUN_SUMMARY=os.path.join(directory, "summary.json")),
                        spares=spares, heartbeat_timeout_ms=heartbeat_timeout_ms)
        super().__init__(directory, [], env=env, status=env["FTRT_STATUS_FILE"], fresh=fresh)
        self.ckpt, self.summary = ckpt, env["FTRT_RUN_SUMMARY"]
        self.params = os.path.join(directory, "final.params")
        self.report = os.path.join(directory, "report.json")
        self.script, self.opts = script, list(opts)
        self.args = list(train_args) + ["--ckpt-dir", ckpt, "--params-out", self.params,
                                        "--report", self.report]
        self.jobid = self.output = None
        self.t_end = None   # time.time() when wait() saw the job end
        self.proc = _JobEnd(self)

    def start(self):
        for p in (self.params, self.report, self.status, self.summary):
            if p and os.path.exists(p):
                os.unlink(p)
        os.makedirs(self.ckpt, exist_ok=True)
        opts = self.opts + [f"--chdir={self.dir}", f"--output={self.dir}/slurm-%j.out"]
        self.t0 = time.monotonic()
        self.jobid = self.slurm.sbatch(self.script, self.args, opts, env=self.env)
        self.output = os.path.join(self.dir, f"slurm-{self.jobid}.out")
        print(f"  $ sbatch {' '.join(opts)} {self.script} {' '.join(self.args)}: job "
              f"{self.jobid}", flush=True)
        return self

    def ended(self):
        """The job's state when it has ended (the batch script is over), else None."""
        st = self.slurm.job(self.jobid).get("JobState", "")
        return st if st in ENDED else None

    def wait(self, timeout):
        """Waits until the Slurm job has ended and its record is in the completion log; returns
        the batch script's exit status (128 + N for signal N). Past timeout, cancels the job
        and fails. While the job trains it reads the status file and asks Slurm once a second
        (scontrol takes CPU that the job's recovery would miss); from the job's final state on,
        every 0.1 s (SlurmCluster.wait_ended)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status_json()
            if (st and st.get("job") in ("finished", "failed")) or self.proc.poll():
                break
            time.sleep(0.05)
        info = self.slurm.wait_ended(self.jobid, max(1.0, deadline - time.monotonic()))
        self.t_end = info["t_ended"] if info else time.time()
        self.elapsed = time.monotonic() - self.t0
        self._read_output()
        if info is None:
            self.slurm._run(["scancel", str(self.jobid)], check=False)
            self.fail(f"Slurm job {self.jobid} did not end within {timeout} s:\n"
                      f"{self.out[-4000:]}")
        code, sig = (int(x) for x in info["ExitCode"].split(":"))
        return 128 + sig if sig else code

    def _read_output(self):
        try:
            with open(self.output, errors="replace") as f:
                self.out = f.read()
        except (OSError, TypeError):
            self.out = ""
        self._write_log()


class _JobEnd:
    """Job.wait_status() asks proc.poll() whether the job is over: for a Slurm job, scontrol
    (asked at most once a second)."""

    def __init__(self, job):
        self.job, self.t, self.state = job, 0.0, None

    def poll(self):
        if self.state is None and time.monotonic() - self.t > 1.0:
            self.t = time.monotonic()
            self.state = self.job.ended()
        return self.state

    @property
    def returncode(self):
        return self.job.slurm.job(self.job.jobid).get("ExitCode")


def sim_mca(net):
    """Open MPI settings for jobs on the simulated hosts (environment): TCP only, on the hosts'
    /24 (MPI and Open MPI's own channel), no binding and ranks that yield (every host shares
    this machine's cores)."""
    return {"OMPI_MCA_btl": "tcp,self", "OMPI_MCA_btl_tcp_if_include": f"{net}.0/24",
            "OMPI_MCA_oob_tcp_if_include": f"{net}.0/24",
            "OMPI_MCA_hwloc_base_binding_policy": "none", "OMPI_MCA_mpi_yield_when_idle": "1"}
