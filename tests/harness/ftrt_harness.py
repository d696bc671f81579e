"""ftrt_harness: the one place that knows how to launch, watch, disturb and judge a real ftrt
job under mpirun. Shared by the MPI integration tests (tests/integration/itest.py,
chaos_cases.py, overlap_itest.py), the pytest suite of the Python binding (tests/python) and
the benches (bench/recovery.py, chaos_campaign.py, torch_overhead.py).

A job is 1 coordinator + N trainers + S hot spares started by
`tools/ftrt-run [--status FILE] -- mpirun --enable-recovery <MPIRUN_FLAGS> -np N+S+1 BINARY ...`
in its own session (process group), with its output captured to DIR/job.log. The harness
watches the job's status file (JSON written by the coordinator), kills ranks by signal while
logging the ground truth to the job's FTRT_FAULT_LOG, waits with a timeout and reads the
report JSON. Hosts() makes simulated hosts (network namespaces, tests/hosts/ftrt-hosts) for
multi-host jobs (train_job(..., mpirun_opts=hosts.mpirun_opts())) and kills or cuts them.
Case scripts (`--bin BIN --work DIR <case>`, `--list`) get their command line,
the skip/pass/fail exit codes (77/0/1) and the case table that CMake turns into ctests from
case_main().

Use: put this directory on sys.path relative to your own file, then `import ftrt_harness`:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "harness"))          # from tests/<dir>/
    ... "..", "tests", "harness"))                             # from bench/
Units: every time argument and attribute is in seconds (float) unless its name says
otherwise (_ms). Python 3 standard library only.
"""
import argparse
import glob
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
FTRT_RUN = os.path.join(REPO, "tools", "ftrt-run")      # the job's real outcome -> exit status
FTRT_CHAOS = os.path.join(REPO, "tools", "ftrt-chaos")  # fault plans, relaunches, verdicts
FTRT_CTL = os.path.join(REPO, "tools", "ftrt-ctl")      # drains of a running job
FTRT_HOSTS = os.path.join(REPO, "tests", "hosts", "ftrt-hosts")  # simulated hosts (namespaces)
# Debian's PyTorch runs under /usr/bin/python3 (the first python3 on PATH may lack it).
SYSTEM_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# mpirun options of every job: more ranks than cores, no pinning, ranks that wait for MPI
# yield the CPU (the 2-core test machines run 6-7 ranks). Jobs under ftrt add
# --enable-recovery (ULFM: a dead rank is reported, not fatal).
MPIRUN_FLAGS = ["--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]
# The launcher of the jobs: FTRT_MPIRUN (ctest sets it to the `mpirun` of the Open MPI the
# build was configured with: Debian's 4.1, or an Open MPI 5 for the build-ompi5 tests), else
# `mpirun` on PATH. tools/ftrt-run adds what Open MPI 5 needs (`--with-ft ulfm`).
MPIRUN = os.environ.get("FTRT_MPIRUN") or "mpirun"
# Open MPI refuses to run as root without these.
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

# The train_mlp job of the MPI integration tests and bench/recovery.py: 200 steps of 15 ms at
# least, a checkpoint every 25 steps.
MLP_STEPS = 200
MLP_ARGS = ["--steps", str(MLP_STEPS), "--batch", "32", "--hidden", "64", "--seed", "7",
            "--step-sleep-ms", "15", "--ckpt-every", "25"]

SKIP = 77  # exit status of a skipped case (ctest SKIP_RETURN_CODE)


class Fail(Exception):
    """A check or a wait of a case failed (case_main: exit 1)."""


class Skip(Exception):
    """The case cannot run here for want of hardware or a kernel feature, e.g. no GPU or no
    permission to mount a tmpfs (case_main: exit 77, everywhere). Never for a missing package:
    need_module() / need_tool() (a failure under CI)."""


# ---- missing dependencies: skip by hand, fail under CI ---------------------------------------
#
# The one rule of every test and bench of this tree for a dependency that is not there (a
# Python module, a program): outside CI the test is skipped, with the Debian package to
# install; under CI, or with FTRT_STRICT_DEPS=1, it fails with the same message, because
# scripts/ensure-deps.sh (the README's set-up, run by tests/run.sh) must have installed it.
# Only hardware and kernel features skip everywhere: no GPU, or no permission to mount a
# tmpfs; those raise Skip directly, with the reason printed. tests/harness/ftrt_pytest_deps.py
# applies the same rule to pytest's skips; tools/check-python-deps checks that the packages
# named here (and every third-party import) are installed by scripts/ensure-deps.sh.

# The Debian package of each third-party Python module the tree imports or needs (the fallback
# of tools/check-python-deps where the module is not installed, so dpkg -S cannot say).
DEBIAN_MODULES = {
    "torch": "python3-torch", "numpy": "python3-numpy", "sklearn": "python3-sklearn",
    "pytest": "python3-pytest", "matplotlib": "python3-matplotlib",
    "prometheus_client": "python3-prometheus-client", "pip": "python3-pip",
    "mypy": "python3-mypy", "ensurepip": "python3-venv", "torchvision": "python3-torchvision",
}
# Modules that no Debian 12 package ships and that the tree imports only where they are
# installed (inside try/except ImportError), each with the extra of pyproject.toml that
# `pip install .[extra]` brings it with: tools/check-python-deps accepts them when that extra
# names them, and the tests check the behaviour without them (they never skip for them).
OPTIONAL_PIP_MODULES = {"safetensors": "safetensors"}
# The Debian package of each program the tests and benches run.
DEBIAN_TOOLS = {
    "mpirun": "openmpi-bin", "fio": "fio", "cc": "gcc", "gcc": "gcc", "cmake": "cmake",
    "pkg-config": "pkg-config", "nm": "binutils", "objdump": "binutils", "ldd": "libc-bin",
    "slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client",
    "scontrol": "slurm-client", "sacct": "slurm-client", "sinfo": "slurm-client",
    "munged": "munge", "mungekey": "munge",
}


def strict_deps(environ=None):
    """True when a missing dependency must fail rather than skip: FTRT_STRICT_DEPS=1, or CI set
    to a true value (true/1/yes; .ci/run sets CI=true) unless FTRT_STRICT_DEPS=0."""
    env = os.environ if environ is None else environ
    explicit = env.get("FTRT_STRICT_DEPS", "").strip().lower()
    if explicit:
        return explicit not in ("0", "false", "no", "off")
    return env.get("CI", "").strip().lower() in ("1", "true", "yes", "on")


class MissingDependency(Exception):
    """A dependency is missing and strict_deps() is off (case_main: exit 77)."""


def missing_dep(what, debian_pkg):
    """Ends the current test for a missing dependency: raises Fail under strict_deps(), else
    MissingDependency (a skip). `what`: what is missing ("Python module torch")."""
    msg = (f"{what} is missing (Debian: apt-get install {debian_pkg}; scripts/ensure-deps.sh "
           f"installs it)")
    if strict_deps():
        raise Fail(msg + " -- a failure, not a skip, under CI / FTRT_STRICT_DEPS=1")
    raise MissingDependency(msg)


def need_module(name, debian_pkg=None, load=True):
    """Imports and returns Python module `name` (dotted names too), or missing_dep() with its
    Debian package (default: DEBIAN_MODULES of the top-level name). load=False: only checks
    that this interpreter can find it (for modules that another process imports, such as
    ensurepip), and returns None."""
    import importlib
    import importlib.util
    try:
        if not load:
            if importlib.util.find_spec(name) is None:
                raise ImportError(f"No module named {name!r}")
            return None
        return importlib.import_module(name)
    except ImportError as e:
        top = name.split(".")[0]
        missing_dep(f"Python module {name} ({e})", debian_pkg or DEBIAN_MODULES.get(top, "?"))


def need_tool(name, debian_pkg=None):
    """The path of program `name` on PATH, or missing_dep() with its Debian package (default:
    DEBIAN_TOOLS[name])."""
    path = shutil.which(name)
    if path is None:
        missing_dep(f"program {name}", debian_pkg or DEBIAN_TOOLS.get(name, "?"))
    return path


def check(cond, msg):
    """Raises Fail(msg) unless cond; prints "  ok: msg" otherwise."""
    if not cond:
        raise Fail(msg)
    print("  ok:", msg, flush=True)


# ---- command lines and environments ----------------------------------------------------------

def mpirun_cmd(np_, argv, recovery=True, extra=None):
    """`MPIRUN [extra...] [--enable-recovery] MPIRUN_FLAGS -np np_ argv...` (argv[0]: the
    program; extra: more mpirun options, e.g. Hosts.mpirun_opts() for simulated hosts)."""
    return ([MPIRUN] + list(extra or []) + (["--enable-recovery"] if recovery else [])
            + MPIRUN_FLAGS + ["-np", str(np_)] + list(argv))


def open_mpi_major(launcher=None):
    """Open MPI's major version of launcher (default MPIRUN) from `--version`, or None. 5 and
    later: PRRTE and ULFM (tools/ftrt-run adds --with-ft ulfm)."""
    import re
    try:
        out = subprocess.run([launcher or MPIRUN, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\(Open MPI\) (\d+)\.", out)
    return int(m.group(1)) if m else None


# Several ranks on the one GPU of one host (docs/gpu.md: a test arrangement, not a performance
# figure): NCCL refuses two ranks on one GPU of one host, so each rank claims a host of its own
# (NCCL_HOSTID, set per rank by nccl_hostid_argv) and the ranks talk over sockets on lo.
NCCL_ONE_GPU_ENV = {"NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "lo", "NCCL_P2P_DISABLE": "1",
                    "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1"}


def nccl_hostid_argv(argv, tag="ftrt-test"):
    """argv (a rank's program and arguments, for mpirun) run through `bash -c` with
    NCCL_HOSTID=<tag>-rank<OMPI_COMM_WORLD_RANK> exported: with NCCL_ONE_GPU_ENV, the
    arrangement in which several ranks share the one GPU."""
    return ["bash", "-c", f'export NCCL_HOSTID={tag}-rank$OMPI_COMM_WORLD_RANK; exec "$@"',
            "_"] + list(argv)


def ftrt_run_cmd(cmd, status=None, python=None, summary=None, opts=None):
    """cmd under tools/ftrt-run (run by `python`, default this interpreter), which turns the
    job's real outcome into the exit status and, with status, names the job's status file;
    summary: where ftrt-run writes its JSON summary (timings of the job's end); opts: more of
    ftrt-run's options (e.g. ["--joinable"])."""
    return ([python or sys.executable, FTRT_RUN] + list(opts or [])
            + (["--status", status] if status else [])
            + (["--summary", summary] if summary else []) + ["--"] + list(cmd))


def job_env(extra=None, spares=None, heartbeat_timeout_ms=None):
    """os.environ + ROOT_ENV [+ FTRT_SPARES] [+ FTRT_HEARTBEAT_TIMEOUT_MS] + extra."""
    env = dict(os.environ, **ROOT_ENV)
    if spares is not None:
        env["FTRT_SPARES"] = str(spares)
    if heartbeat_timeout_ms is not None:
        env["FTRT_HEARTBEAT_TIMEOUT_MS"] = str(heartbeat_timeout_ms)
    env.update(extra or {})
    return env


def free_port():
    """A TCP port free on 127.0.0.1 right now (for torch.distributed's MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- status file, report, results --------------------------------------------------------------

def trainer(st, logical):
    """The rank (dict) of a status file that is trainer `logical` now, or None."""
    for r in st["ranks"]:
        if r["role"] == "trainer" and r["logical_rank"] == logical:
            return r
    return None


def load_json(path):
    with open(path) as f:
        return json.load(f)


def same_bytes(a, b):
    """True when files a and b have the same contents (final parameters: byte-identical)."""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


# ---- jobs --------------------------------------------------------------------------------------

class Job:
    """One job (any command; ftrt jobs through ftrt-run + mpirun) in its own session, so that
    the whole process tree can be killed. Its output (stdout and stderr) is kept in self.out
    after wait() and in DIR/job.log.

    Optional paths (None where the job has none): status (the coordinator's status file),
    ckpt, params (final parameters), report (report JSON), fault_log (FTRT_FAULT_LOG of env,
    where inject() logs the ground truth of each injected fault). start() deletes params,
    report and status first, so that a relaunch in the same directory cannot see the previous
    launch's. Failed waits call self.fail(msg), which raises Fail; tests/python overrides it
    with pytest.fail."""

    def __init__(self, directory, cmd, env=None, status=None, fresh=False, echo=True):
        """fresh: delete the directory first. echo: print the command line at start()."""
        self.dir = directory
        if fresh:
            shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory, exist_ok=True)
        self.cmd = list(cmd)
        self.env = dict(os.environ) if env is None else env
        self.status = status
        self.ckpt = self.params = self.report = self.summary = None
        self.fault_log = self.env.get("FTRT_FAULT_LOG")
        self.echo = echo
        self.proc = None
        self.out = ""
        self.t0 = self.elapsed = None  # time.monotonic() at start(); seconds start -> exit

    def fail(self, msg):
        raise Fail(msg)

    def start(self):
        for p in (self.params, self.report, self.status, self.summary):
            if p and os.path.exists(p):
                os.unlink(p)
        if self.echo:
            print("  $", " ".join(self.cmd), flush=True)
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        return self

    def wait(self, timeout):
        """Waits up to timeout seconds for the job to exit and returns its exit status; past
        that, SIGKILLs its process group and fails."""
        try:
            self.out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.out, _ = self.proc.communicate()
            self._write_log()
            self.fail(f"job did not finish within {timeout} s; log in {self.log_path()}:\n"
                      f"{self.out[-4000:]}")
        self.elapsed = time.monotonic() - self.t0
        self._write_log()
        return self.proc.returncode

    def run(self, timeout):
        """start() then wait(timeout): the exit status."""
        return self.start().wait(timeout)

    def log_path(self):
        return os.path.join(self.dir, "job.log")

    def _write_log(self):
        with open(self.log_path(), "w") as f:
            f.write(self.out or "")

    def status_json(self):
        """The status file's contents now, or None (not written yet, or unreadable)."""
        try:
            return load_json(self.status)
        except (OSError, ValueError):
            return None

    def wait_status(self, pred, timeout=60, poll_s=0.02):
        """Polls the status file every poll_s seconds until pred(status) is true and returns
        that status; fails when the job ends first or after timeout seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.wait(10)
                self.fail(f"job ended (exit {self.proc.returncode}) before the expected state "
                          f"was reached:\n{self.out[-4000:]}")
            st = self.status_json()
            if st and pred(st):
                return st
            time.sleep(poll_s)
        self.fail(f"timed out ({timeout} s) waiting for the status file to reach the expected "
                  f"state")

    def wait_trainer(self, logical, min_steps=0, timeout=60, poll_s=0.02):
        """wait_status() until the job is running and trainer `logical` has done min_steps
        steps; returns that rank (dict with pid, world_rank, steps_done, ...)."""
        def ready(st):
            r = trainer(st, logical)
            return st.get("job") == "running" and r is not None and r["steps_done"] >= min_steps
        return trainer(self.wait_status(ready, timeout, poll_s), logical)

    def inject(self, sig, rank, kind):
        """Sends signal sig to rank (a dict from the status file) after logging the ground truth
        (wall-clock time, kind, pid, world rank) to the job's fault log, if it has one."""
        if self.fault_log:
            with open(self.fault_log, "a") as f:
                f.write(json.dumps({"time": time.time(), "kind": kind, "pid": rank["pid"],
                                    "world_rank": rank["world_rank"]}) + "\n")
        os.kill(rank["pid"], sig)
        print(f"  injected {kind} into world rank {rank['world_rank']} (pid {rank['pid']})",
              flush=True)

    def kill_all(self, ranks=None):
        """SIGKILLs the whole job: its process group (ftrt-run, mpirun) and every rank of
        `ranks` (status-file dicts; default: those of the status file now), then collects it,
        and removes the session directory the killed mpirun could not (Open MPI 4.1's
        <tmp>/ompi.<host>.<uid>/pid.<pid>, 5's <tmp>/ompi.<pid>), so that none is left behind
        for a later mpirun given the same pid to be taken for its own, and the killed
        ftrt-run's run directory (<tmp>/ftrt-run.<uid>/<pid>-*, once no process holds its
        lock; else the next ftrt-run's start removes it)."""
        launchers = [self.proc.pid] + children(self.proc.pid)
        os.killpg(self.proc.pid, signal.SIGKILL)
        if ranks is None:
            ranks = (self.status_json() or {"ranks": []})["ranks"]
        for r in ranks:
            try:
                os.kill(r["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        rc = self.wait(60)
        tmp = tempfile.gettempdir()
        for pid in launchers:
            for d in glob.glob(os.path.join(tmp, "ompi.*", f"pid.{pid}")) + \
                    glob.glob(os.path.join(tmp, f"ompi.{pid}")):
                shutil.rmtree(d, ignore_errors=True)
        ftrt_run = ftrt_run_module()
        for pid in launchers:
            ftrt_run.sweep(ftrt_run.runs_parent(), pid)
        return rc

    def drain(self, *target, wait_s=60):
        """tools/ftrt-ctl drain <target> (--rank W or --host H) of this job, then up to wait_s
        seconds for the move (0: the coordinator's answer only). Returns (exit status, its
        output), the output also printed."""
        cmd = [sys.executable, FTRT_CTL, "drain", *target, "--status", self.status]
        r = subprocess.run(cmd + (["--wait", str(wait_s)] if wait_s else []),
                           capture_output=True, text=True, timeout=wait_s + 30)
        print(f"  ftrt-ctl drain {' '.join(target)}: exit {r.returncode}: "
              f"{(r.stdout + r.stderr).strip()}", flush=True)
        return r.returncode, r.stdout + r.stderr

    def load_report(self):
        """The job's report JSON (self.report)."""
        return load_json(self.report)

    def load_summary(self):
        """ftrt-run's summary JSON (self.summary): exit status, how mpirun ended, timings."""
        return load_json(self.summary)


def ftrt_run_module():
    """The run-directory module of tools/ftrt-run (its package tools/ftrt_run: rundir.py, with
    runs_parent() and sweep()), imported once."""
    tools = os.path.join(REPO, "tools")
    if tools not in sys.path:
        sys.path.append(tools)
    return importlib.import_module("ftrt_run.rundir")


def children(pid):
    """The pids of process pid's children now (Linux /proc), [] when it has none or is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


class HugePages:
    """vm.nr_hugepages raised by n for a `with` block and set back after it (ftrt_alloc()'s
    memory files of huge pages, comm/cma.h). Raises Skip when the count cannot be written (not
    root) or the kernel reserves fewer (memory too fragmented); the count is set back then too.
    """
    PATH = "/proc/sys/vm/nr_hugepages"

    def __init__(self, n):
        self.n, self.old = n, None

    def _read(self):
        with open(self.PATH) as f:
            return int(f.read())

    def __enter__(self):
        self.old = self._read()
        try:
            with open(self.PATH, "w") as f:
                f.write(str(self.old + self.n))
        except OSError as e:
            raise Skip(f"{self.n} huge pages cannot be reserved here ({self.PATH}: {e})")
        got = self._read()
        if got < self.old + self.n:
            self.__exit__()
            raise Skip(f"the kernel reserved {got - self.old} of the {self.n} huge pages asked "
                       "for (memory too fragmented?)")
        return self

    def __exit__(self, *exc):
        if self._read() != self.old:
            with open(self.PATH, "w") as f:
                f.write(str(self.old))


def train_job(directory, binary, np_=6, train_args=MLP_ARGS, spares=None,
              heartbeat_timeout_ms=None, status=None, fresh=True, mpirun_opts=None,
              run_opts=None):
    """A job of an ftrt example (train_mlp's command line) laid out in `directory`: ckpt/,
    final.params, report.json, faults.jsonl, ftrt-run's summary.json, the status file in
    ckpt/status.json unless given: ftrt-run --status STATUS --summary ... -- mpirun
    [mpirun_opts] --enable-recovery ... -np np_ binary train_args --ckpt-dir ... --params-out
    ... --report .... np_ counts the coordinator and the spares; spares (FTRT_SPARES) defaults
    to the runtime's own default; mpirun_opts: e.g. Hosts.mpirun_opts() (simulated hosts);
    run_opts: ftrt-run's own (e.g. ["--joinable"])."""
    ckpt = os.path.join(directory, "ckpt")
    params = os.path.join(directory, "final.params")
    report = os.path.join(directory, "report.json")
    summary = os.path.join(directory, "summary.json")
    status = status or os.path.join(ckpt, "status.json")
    fault_log = os.path.join(directory, "faults.jsonl")
    cmd = ftrt_run_cmd(mpirun_cmd(np_, [binary] + list(train_args) + [
        "--ckpt-dir", ckpt, "--params-out", params, "--report", report], extra=mpirun_opts),
        status=status, summary=summary, opts=run_opts)
    job = Job(directory, cmd, job_env({"FTRT_FAULT_LOG": fault_log}, spares=spares,
                                      heartbeat_timeout_ms=heartbeat_timeout_ms),
              status=status, fresh=fresh)
    job.ckpt, job.params, job.report, job.summary = ckpt, params, report, summary
    return job


# ---- simulated hosts (tests/hosts/ftrt-hosts) ----------------------------------------------------

def write_hostfile(path, lines):
    """Writes an Open MPI hostfile at path (its directory made if missing), one line
    "<host> slots=<n>" per (host, n) of `lines`, in order; returns path."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        for name, slots in lines:
            f.write(f"{name} slots={slots}\n")
    return path


class Hosts:
    """N simulated hosts on this machine (network namespaces with their own hostnames on a
    bridge; tests/hosts/ftrt-hosts says how), made on entry and removed on exit, also when the
    body raises:

        with Hosts(3, slots=2) as hosts:          # Skip where namespaces cannot be made
            job = train_job(..., mpirun_opts=hosts.mpirun_opts())
            ...
            hosts.kill_host("ftrt-h2", job)       # every process of the host, its orted too
            hosts.cut("ftrt-h2", job)             # its link down: silence, no connection reset

    Host names are PREFIX1..PREFIXn (default ftrt-h1 ..), addresses NET.1..n (10.77.0.x), the
    head (mpirun, ftrt-run) NET.254. Ranks are placed by slot in host order: with 2 slots,
    world ranks 0-1 on host 1, 2-3 on host 2, ... A lock (DIR.inuse) keeps two users of the
    same prefix apart for the whole `with` block."""

    def __init__(self, n=3, slots=2, env=None):
        self.n, self.slots = n, slots
        self.env = dict(os.environ, **(env or {}))
        self.prefix = self.env.get("FTRT_HOSTS_PREFIX", "ftrt-h")
        self.names = [f"{self.prefix}{i}" for i in range(1, n + 1)]
        self.dir = None
        self._lock = None

    def _run(self, *args, check=True):
        r = subprocess.run([FTRT_HOSTS] + [str(a) for a in args], env=self.env,
                           capture_output=True, text=True)
        if check and r.returncode != 0:
            raise Fail(f"ftrt-hosts {' '.join(map(str, args))}: exit {r.returncode}: "
                       f"{r.stderr.strip()}")
        return r

    def __enter__(self):
        r = self._run("check", check=False)
        if r.returncode == SKIP:
            raise Skip((r.stdout + r.stderr).strip() or "network namespaces unavailable")
        if r.returncode != 0:
            raise Fail(f"ftrt-hosts check: {r.stdout}{r.stderr}")
        import fcntl
        base = self.env.get("FTRT_HOSTS_DIR", f"/run/ftrt-hosts/{self.prefix}")
        os.makedirs(os.path.dirname(base), exist_ok=True)
        self._lock = open(base + ".inuse", "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        try:
            self.dir = self._run("up", self.n, self.slots).stdout.strip().splitlines()[-1]
        except BaseException:
            self._run("down", check=False)
            self._lock.close()
            raise
        return self

    def __exit__(self, *exc):
        self._run("down", check=False)
        self._lock.close()
        return False

    def mpirun_opts(self, hostfile=None, version=None):
        """mpirun options for the hosts (agent, hostfile, TCP on the hosts' subnet); hostfile:
        another hostfile, e.g. from hostfile() with a subset of the hosts; version: Open MPI's
        major version (default: that of FTRT_MPIRUN, else of `mpirun` on PATH)."""
        opts = self._run("mpirun-opts", *([version] if version else [])).stdout.split()
        if hostfile:
            opts[opts.index("--hostfile") + 1] = hostfile
        return opts

    def hostfile(self, path, hosts, slots=None):
        """Writes a hostfile of `hosts` (names) with `slots` each (default self.slots) at path;
        returns path (for mpirun_opts(hostfile=...): a relaunch without a lost host)."""
        return write_hostfile(path, [(name, slots or self.slots) for name in hosts])

    def hostfile_slots(self, path, slots):
        """Writes a hostfile at path that gives every host its own number of slots: slots[i]
        to the i-th host (self.names order), so that ranks are placed unevenly ([2, 3, 1]:
        world ranks 0-1 on host 1, 2-4 on host 2, 5 on host 3). Returns path (for
        mpirun_opts(hostfile=...)). Raises ValueError unless there is one count per host."""
        if len(slots) != self.n:
            raise ValueError(f"hostfile_slots: {len(slots)} slot counts for {self.n} hosts")
        return write_hostfile(path, list(zip(self.names, slots)))

    def pids(self, host):
        """Pids of every process in host now."""
        return [int(x) for x in self._run("pids", host).stdout.split()]

    def ranks_on(self, st, host):
        """The ranks (dicts) of status file st that run on host."""
        return [r for r in st["ranks"] if r["host"] == host]

    def _log_faults(self, job, host, kind):
        st = job.status_json() if job else None
        if not (job and job.fault_log and st):
            return []
        ranks = [r for r in self.ranks_on(st, host) if r["role"] != "failed" and r["pid"] > 0]
        with open(job.fault_log, "a") as f:
            for r in ranks:
                f.write(json.dumps({"time": time.time(), "kind": kind, "pid": r["pid"],
                                    "world_rank": r["world_rank"]}) + "\n")
        return ranks

    def kill_host(self, host, job=None, sig="KILL"):
        """Sends SIGsig to every process in host (its orted, its ranks, anything else), right
        after logging the ground truth for each of job's ranks there to its fault log; returns
        those ranks (status-file dicts)."""
        pids = self.pids(host)
        signum = getattr(signal, "SIG" + sig)
        ranks = self._log_faults(job, host, f"host_{sig.lower()}")
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        print(f"  killed host {host} ({len(pids)} processes, {len(ranks)} ranks) with SIG{sig}",
              flush=True)
        return ranks

    def cut(self, host, job=None):
        """Takes host's link down (both ends of its veth, as `ftrt-hosts cut`): its processes
        live on but hear nothing and are heard by no one; logs the ground truth for job's ranks
        there right before. Returns them."""
        if host not in self.names:
            raise Fail(f"no host {host}")
        ranks = self._log_faults(job, host, "link_cut")
        for cmd in (["ip", "link", "set", host + "v", "down"],       # ftrt-hosts: veth_of
                    ["ip", "-n", host, "link", "set", "eth0", "down"]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise Fail(f"{' '.join(cmd)}: {r.stderr.strip()}")
        print(f"  cut the link of host {host} ({len(ranks)} ranks)", flush=True)
        return ranks

    def mend(self, host):
        self._run("mend", host)

    def leftovers(self):
        """{host: pids} of the hosts that still have processes (none after a clean job end)."""
        left = {}
        for name in self.names:
            p = self.pids(name)
            if p:
                left[name] = p
        return left


# ---- case scripts ------------------------------------------------------------------------------

class Case:
    """One ctest case: fn(args) (args: --bin, --work) returns None or 0 to pass, another exit
    status to end with it; raises Fail (exit 1) or Skip (77). timeout_s: the ctest TIMEOUT.
    fixture: "setup" (makes the reference the others need), "required" or None. listed=False:
    not listed by --list (CMake adds it by hand, e.g. with another binary)."""

    def __init__(self, fn, timeout_s=300, fixture=None, listed=True):
        self.fn, self.timeout_s, self.fixture, self.listed = fn, timeout_s, fixture, listed


def case(table, name=None, **kw):
    """Decorator: registers case_<name>(args) in table (dict) as Case(fn, **kw)."""
    def register(fn):
        table[name or fn.__name__[len("case_"):]] = Case(fn, **kw)
        return fn
    return register


def case_main(cases, description=None, argv=None, add_args=None):
    """The command line of a case script: `--bin BIN --work DIR <case>` runs a case of cases
    (name -> Case) and returns its exit status (0 pass, 1 fail, 77 skipped; a missing mpirun
    or other dependency: 77, or 1 under strict_deps()); `--list` prints "<case> <timeout_s> <setup|required|->" per listed case, which
    tests/integration/CMakeLists.txt turns into ctests. add_args: a function given the
    argparse parser, to add the script's own options (they reach the case in its args)."""
    ap = argparse.ArgumentParser(description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    if add_args:
        add_args(ap)
    ap.add_argument("--bin", help="the job's program")
    ap.add_argument("--work", help="work directory (kept: logs, references)")
    ap.add_argument("--list", action="store_true", help="list the cases for CMake and exit")
    ap.add_argument("case", nargs="?", choices=list(cases))
    a = ap.parse_args(argv)
    if a.list:
        for name, c in cases.items():
            if c.listed:
                print(name, c.timeout_s, c.fixture or "-")
        return 0
    if not (a.bin and a.work and a.case):
        ap.error("--bin, --work and a case are required")
    print(f"case {a.case}:", flush=True)

    def run_case():
        need_tool(MPIRUN, DEBIAN_TOOLS["mpirun"])
        os.makedirs(a.work, exist_ok=True)
        rc = cases[a.case].fn(a)
        if not rc:
            print("PASS", flush=True)
        return rc or 0
    return exit_status(run_case)


def exit_status(fn):
    """Runs fn() and returns the test's exit status: fn's own (None counts as 0), 1 on Fail,
    SKIP (77) on Skip or on a MissingDependency (which strict_deps() has already turned into a
    Fail under CI, see missing_dep()). Prints FAIL or the reason for a skip."""
    try:
        return fn() or 0
    except Fail as e:
        print("FAIL:", e, flush=True)
        return 1
    except MissingDependency as e:
        print(f"{e}: skipping (under CI this fails)", flush=True)
        return SKIP
    except Skip as e:
        print(f"{e}: skipping", flush=True)
        return SKIP
