#!/usr/bin/env python3
"""ctest unit.ftrt_run_join: tools/ftrt-run's two join modes, --joinable (a job that a second
mpirun can join: its ompi-server, join.json, FTRT_JOINABLE and FTRT_JOB_SECRET) and --join
RUNDIR (the joiner: its checks, command and environment). Most cases need no MPI: the options
are parsed in-process, and stand-in launchers (a Python `mpirun` that reports an Open MPI
version and records its arguments and environment, a Python `ompi-server` that writes a URI)
take the place of Open MPI's. One case runs Debian's Open MPI 4.1 (mpirun and ompi-server,
skipped where they are missing): a joinable job, a real joiner pointed at its ompi-server, and
no ompi-server left afterwards. Each case takes at most a few seconds.

Usage: join.py [-v]
Exit 0 = pass, 1 = fail. Python 3 standard library only.
"""
import argparse
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RUN = [sys.executable, os.path.join(REPO, "tools", "ftrt-run")]
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.dont_write_bytecode = True
from ftrt_run import options  # noqa: E402

FAKE_MPIRUN = """#!/usr/bin/python3
# A stand-in mpirun: reports Open MPI VERSION; otherwise records its arguments, its FTRT_*
# variables, the run directory's join.json (mode, contents) and the ompi-server processes
# whose command line names that directory into $FAKE_OUT, then sleeps $FAKE_SLEEP s and exits
# $FAKE_RC.
import json, os, sys, time
if sys.argv[1:2] == ["--version"]:
    print("mpirun (Open MPI) VERSION")
    sys.exit(0)
d = os.path.dirname(os.environ["FTRT_STATUS_FILE"])
rec = {"argv": sys.argv, "env": {k: v for k, v in os.environ.items() if k.startswith("FTRT_")}}
j = os.path.join(d, "join.json")
if os.path.lexists(j):
    rec["join_mode"] = os.lstat(j).st_mode & 0o7777
    with open(j) as f:
        rec["join"] = json.load(f)
with open(os.environ["FAKE_OUT"], "w") as f:
    json.dump(rec, f)
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""

FAKE_SERVER = """#!/usr/bin/python3
# A stand-in ompi-server: appends "pid marker" to $FAKE_SERVER_LOG; $FAKE_SERVER "exit" exits 3
# at once, "deaf" ignores SIGTERM; otherwise writes a URI to --report-uri's file and waits.
import os, signal, sys, time
with open(os.environ["FAKE_SERVER_LOG"], "a") as f:
    f.write(f"{os.getpid()} {os.environ.get('FTRT_RUN_ID', '-')}\\n")
mode = os.environ.get("FAKE_SERVER", "ok")
if mode == "exit":
    sys.exit(3)
if mode == "deaf":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[sys.argv.index("--report-uri") + 1], "w") as f:
    f.write("4242.0;tcp://127.0.0.1:1\\n")
while True:
    time.sleep(1)
"""


def write_exec(path, text):
    """Writes an executable file at path."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path


def run(argv, env, timeout=30):
    """argv run to its end with env over this environment, stdin closed; CompletedProcess."""
    return subprocess.run(argv, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **env),
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def one_line(name, r, code, want):
    """Problems unless r exited `code` with exactly one line on stderr holding every string of
    want, and no traceback."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    missing = [w for w in want if not lines or w not in lines[0]]
    if r.returncode != code or len(lines) != 1 or missing or "Traceback" in r.stderr:
        return [f"{name}: exit {r.returncode} (want {code}), stderr {r.stderr.strip()[-500:]!r}"
                + (f" (does not hold {missing})" if missing else "")]
    return []


def pid_alive(pid):
    """True while process pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(pred, timeout):
    """Polls pred() every 20 ms until it is true (True) or timeout seconds passed (False)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class Env:
    """The stand-ins and a $TMPDIR of the test's own (so ftrt-run's run directories are
    $TMPDIR/ftrt-run.<uid>/...) under the temporary directory d."""

    def __init__(self, d):
        self.d = d
        self.tmp = os.path.join(d, "tmp")
        os.makedirs(self.tmp)
        self.parent = os.path.join(self.tmp, f"ftrt-run.{os.getuid()}")
        os.mkdir(self.parent, 0o700)
        self.mpi4 = write_exec(os.path.join(d, "ompi4", "bin", "mpirun"),
                               FAKE_MPIRUN.replace("VERSION", "4.1.4"))
        write_exec(os.path.join(d, "ompi4", "bin", "ompi-server"), FAKE_SERVER)
        self.mpi4_bare = write_exec(os.path.join(d, "ompi4-no-server", "bin", "mpirun"),
                                    FAKE_MPIRUN.replace("VERSION", "4.1.4"))
        self.mpi5 = write_exec(os.path.join(d, "ompi5", "bin", "mpirun"),
                               FAKE_MPIRUN.replace("VERSION", "5.0.11"))
        self.out = os.path.join(d, "fake-out.json")
        self.log = os.path.join(d, "server.log")
        self.env = {"TMPDIR": self.tmp, "FAKE_OUT": self.out, "FAKE_SERVER_LOG": self.log}

    def record(self):
        """What the stand-in mpirun recorded last (FAKE_MPIRUN), or None."""
        try:
            with open(self.out) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def servers(self):
        """[(pid, marker)] of every stand-in ompi-server started so far."""
        try:
            with open(self.log) as f:
                return [(int(p), m) for p, m in (ln.split() for ln in f if ln.strip())]
        except OSError:
            return []

    def clear(self):
        """Forgets the stand-ins' records."""
        for p in (self.out, self.log):
            if os.path.exists(p):
                os.unlink(p)

    def run_dirs(self):
        """The names in $TMPDIR/ftrt-run.<uid>."""
        return sorted(os.listdir(self.parent))


# ---- options ------------------------------------------------------------------------------

def parsed(argv, env):
    """options.parse_args(argv) with env set over os.environ: the options, or 'Usage: ...'."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        return options.parse_args(argv)
    except options.Usage as e:
        return f"Usage: {e}"
    finally:
        os.environ.clear()
        os.environ.update(saved)


def check_options():
    """--joinable, FTRT_RUN_JOINABLE and --join as parse_args() reads them."""
    cmd = ["--", "mpirun", "x"]
    cases = [  # (argv, environment, key or None for a Usage, want: value or Usage substring)
        (["--joinable"] + cmd, {}, "joinable", True),
        (cmd, {}, "joinable", False),
        (cmd, {"FTRT_RUN_JOINABLE": "1"}, "joinable", True),
        (cmd, {"FTRT_RUN_JOINABLE": "0"}, "joinable", False),
        (cmd, {"FTRT_RUN_JOINABLE": "yes"}, None, "FTRT_RUN_JOINABLE: expected 1 or 0"),
        (["--joinable", "--linger", "2"] + cmd, {}, "linger", 2.0),
        (["--join", "/x/1-a"] + cmd, {}, "join", "/x/1-a"),
        (["--join", "/x/1-a"] + cmd, {"FTRT_RUN_JOINABLE": "1"}, "joinable", False),
        (["--join", "/x/1-a"] + cmd, {"FTRT_RUN_JOINABLE": "bad"}, "join", "/x/1-a"),
        (["--join", "/x/1-a"] + cmd, {"FTRT_RUN_SUMMARY": "/x/s.json"}, "summary", None),
        (cmd, {}, "join", None),
        (["--join"], {}, None, "--join needs a value"),
        (["--join", "/x/1-a", "--joinable"] + cmd, {}, None, "exclude each other"),
        (["--joinable", "--join", "/x/1-a"] + cmd, {}, None, "exclude each other"),
        (["--join", "/x/1-a", "--status", "/x/s"] + cmd, {}, None, "--status"),
        (["--join", "/x/1-a", "--summary", "/x/s"] + cmd, {}, None, "--summary"),
        (["--join", "/x/1-a"], {}, None, "no command"),
    ]
    problems = []
    for argv, env, key, want in cases:
        got = parsed(argv, env)
        ok = isinstance(got, str) and want in got if key is None else \
            isinstance(got, dict) and got.get(key) == want
        if not ok:
            problems.append(f"options {argv} {env}: got {got!r}, want {key}={want!r}")
    return problems


def check_cli_usage(e):
    """The command line's usage errors end with one line and exit 2."""
    return one_line("--join without a value", run(RUN + ["--join"], e.env), 2,
                    ["--join needs a value"]) + \
        one_line("FTRT_RUN_JOINABLE=yes", run(RUN + ["--", "true"], dict(
            e.env, FTRT_RUN_JOINABLE="yes")), 2, ["FTRT_RUN_JOINABLE", "'yes'"])


# ---- the joiner's refusals ----------------------------------------------------------------

def job_dir(e, name, locked=True, join_mode=0o600, join=True, status=None):
    """A stand-in run directory of a joinable job, $TMPDIR/ftrt-run.<uid>/<name>, with its lock
    (held by this process when `locked`: returns the descriptor, else None), ompi-server.uri,
    join.json (mode join_mode, or none) and status.json (`status`, or none). Returns (path,
    lock descriptor or None)."""
    d = os.path.join(e.parent, name)
    os.mkdir(d, 0o700)
    fd = os.open(os.path.join(d, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    if locked:
        fcntl.flock(fd, fcntl.LOCK_EX)
    else:
        os.close(fd)
        fd = None
    uri = os.path.join(d, "ompi-server.uri")
    with open(uri, "w") as f:
        f.write("4242.0;tcp://127.0.0.1:1\n")
    if join:
        info = {"format": 1, "secret": "0123456789abcdef", "ompi_server_uri": uri,
                "status": os.path.join(d, "status.json"), "ompi_major": 4,
                "env": {"FTRT_SPARES": "3", "FTRT_HEARTBEAT_MS": "250"}}
        p = os.path.join(d, "join.json")
        with open(p, "w") as f:
            json.dump(info, f)
        os.chmod(p, join_mode)
    if status is not None:
        with open(os.path.join(d, "status.json"), "w") as f:
            json.dump(status, f)
    return d, fd


RUNNING = {"job": "running", "control_plane": "127.0.0.1:4567",
           "control_plane_addresses": ["127.0.0.1", "10.0.0.2"]}


def check_refusals(e):
    """--join refuses, with one line and exit 1: a missing directory, one not named like a run
    directory, a job that ended (lock free, or its status file says so), join.json missing or
    not mode 0600, a status file without a control plane, a launcher of another Open MPI."""
    fds, problems = [], []
    notes = os.path.join(e.parent, "notes")
    os.mkdir(notes)
    cases = [("a missing run directory (its job ended)", os.path.join(e.parent, "1-none"), {},
              e.mpi4, ["1-none has ended", "run directory is gone"]),
             ("a missing directory", os.path.join(notes, "none"), {}, e.mpi4,
              ["none: no such directory"]),
             ("a directory not named <pid>-<random>", notes, {}, e.mpi4,
              ["not a run directory"]),
             ("an unlocked run directory", {"name": "2-ended", "locked": False}, {}, e.mpi4,
              ["2-ended has ended"]),
             ("join.json mode 0644", {"name": "3-open", "join_mode": 0o644}, {}, e.mpi4,
              ["join.json", "mode 0600", "0644"]),
             ("no join.json", {"name": "4-nojoin", "join": False}, {}, e.mpi4,
              ["no join.json", "--joinable"]),
             ("a status file without control_plane", {"name": "5-nocp", "status": {
                 "job": "running", "control_plane_addresses": ["127.0.0.1"]}}, {}, e.mpi4,
              ["no control plane"]),
             ("a status file that says failed", {"name": "6-failed", "status": dict(
                 RUNNING, job="failed")}, {}, e.mpi4, ["6-failed has ended"]),
             ("a joiner's mpirun of Open MPI 5", {"name": "7-five", "status": RUNNING}, {},
              e.mpi5, ["the job runs Open MPI 4, this mpirun is Open MPI 5"])]
    for name, where, env, mpirun, want in cases:
        if isinstance(where, dict):
            where, fd = job_dir(e, **where)
            fds.append(fd)
        r = run(RUN + ["--join", where, "--", mpirun, "-np", "1", "/bin/true"], dict(
            e.env, **env))
        problems += one_line(f"--join refuses {name}", r, 1, want)
        if e.record() is not None:
            problems.append(f"--join refuses {name}: its mpirun ran all the same")
            e.clear()
    for fd in fds:
        if fd is not None:
            os.close(fd)
    return problems


def check_joiner(e):
    """A joiner of a live joinable job (stand-ins): mpirun gets the ompi-server's options
    after its name, the job's FTRT_* over this environment's, FTRT_JOIN_ADDRS, _PORT and
    _SECRET, no FTRT_JOINABLE or FTRT_JOB_SECRET, the job's status file (written only by a
    joiner that takes over as the job's coordinator) and an exits directory of its own run
    directory; ftrt-run exits with mpirun's status; the job's status file is left as it was;
    the joiner's run directory is removed."""
    d, fd = job_dir(e, "8-live", status=RUNNING)
    status = os.path.join(d, "status.json")
    before = os.stat(status)
    r = run(RUN + ["--join", d, "--", e.mpi4, "-np", "1", "/bin/true", "arg"], dict(
        e.env, FAKE_RC="7", FTRT_SPARES="9", FTRT_JOINABLE="1", FTRT_JOB_SECRET="f" * 16))
    rec, after = e.record(), os.stat(status)
    os.close(fd)
    problems = []
    if r.returncode != 7 or rec is None or r.stderr.strip():
        return [f"joiner: exit {r.returncode} (want 7), recorded {rec!r}, stderr "
                f"{r.stderr.strip()[-400:]!r}"]
    uri = os.path.join(d, "ompi-server.uri")
    want_argv = [e.mpi4, "--ompi-server", f"file:{uri}", "--mca", "pmix_base_exchange_timeout",
                 "3", "-np", "1", "/bin/true", "arg"]
    if rec["argv"] != want_argv:
        problems.append(f"joiner: mpirun's arguments {rec['argv']}, want {want_argv}")
    env = rec["env"]
    want = {"FTRT_JOIN_ADDRS": "127.0.0.1 10.0.0.2", "FTRT_JOIN_PORT": "4567",
            "FTRT_JOIN_SECRET": "0123456789abcdef", "FTRT_SPARES": "3",
            "FTRT_HEARTBEAT_MS": "250"}
    bad = {k: env.get(k) for k, v in want.items() if env.get(k) != v}
    bad.update({k: env[k] for k in ("FTRT_JOINABLE", "FTRT_JOB_SECRET") if k in env})
    own = os.path.dirname(env.get("FTRT_RUN_EXIT_DIR", "/"))
    if env.get("FTRT_STATUS_FILE") != status:
        bad["FTRT_STATUS_FILE"] = env.get("FTRT_STATUS_FILE")
    if bad or own == d or os.path.dirname(own) != e.parent or not re.fullmatch(
            r"[0-9a-f]{16}", env.get("FTRT_RUN_ID", "")) or \
            env.get("FTRT_RUN_EXIT_DIR") != os.path.join(own, "exits"):
        problems.append(f"joiner: environment {env} (wrong or unwanted: {bad})")
    if (before.st_ino, before.st_mtime_ns) != (after.st_ino, after.st_mtime_ns):
        problems.append("joiner: the job's status file was changed")
    if os.path.exists(own):
        problems.append(f"joiner: its run directory {own} is still there")
    e.clear()
    return problems


# ---- the joinable job with stand-ins ------------------------------------------------------

def check_joinable_refusals(e):
    """--joinable refuses (one line, exit 2) an Open MPI 5 launcher, a launcher without an
    ompi-server beside it, and an ompi-server that exits before its URI; mpirun is never run
    and no new run directory is left."""
    before = e.run_dirs()
    want5 = ("ftrt-run: --joinable needs Open MPI 4.1's ompi-server: a second mpirun cannot "
             "join an Open MPI 5 job (docs/join.md)")
    r5 = run(RUN + ["--joinable", "--", e.mpi5, "-np", "2", "/bin/true"], e.env)
    problems = one_line("--joinable with Open MPI 5", r5, 2, [want5])
    if r5.stderr.strip() != want5:
        problems.append(f"--joinable with Open MPI 5: stderr {r5.stderr.strip()!r}, want "
                        f"{want5!r}")
    problems += one_line("--joinable without ompi-server", run(
        RUN + ["--joinable", "--", e.mpi4_bare, "-np", "2", "/bin/true"], e.env), 2,
        ["ompi-server", os.path.dirname(e.mpi4_bare)])
    problems += one_line("--joinable, ompi-server exits", run(
        RUN + ["--joinable", "--", e.mpi4, "-np", "2", "/bin/true"],
        dict(e.env, FAKE_SERVER="exit")), 2, ["ompi-server exited with status 3"])
    if e.record() is not None:
        problems.append("--joinable refusals: mpirun ran all the same")
    if set(e.run_dirs()) - set(before):
        problems.append(f"--joinable refusals: run directories {e.run_dirs()} left (before: "
                        f"{before})")
    e.clear()
    return problems


def check_joinable(e):
    """A joinable job (stand-ins): one line naming the joiner's command; mpirun gets the
    ompi-server's options after its name and FTRT_JOINABLE=8 and FTRT_JOB_SECRET; join.json is
    mode 0600 while the job runs and holds the secret, the URI file, the status file and the
    job's FTRT_* but not its own files' or ftrt-run's; the server has the job's marker and is
    gone at the end, as is the run directory."""
    r = run(RUN + ["--joinable", "--", e.mpi4, "-np", "2", "/bin/true", "a b"], dict(
        e.env, FTRT_SPARES="2", FTRT_JOINABLE="0"))
    rec, servers = e.record(), e.servers()
    if rec is None or len(servers) != 1:
        return [f"joinable: mpirun recorded {rec!r}, servers {servers}, stderr {r.stderr!r}"]
    env, info = rec["env"], rec.get("join") or {}
    d = os.path.dirname(env["FTRT_STATUS_FILE"])
    uri = os.path.join(d, "ompi-server.uri")
    want_line = (f"ftrt-run: this job can be joined: ftrt-run --join {d} -- {e.mpi4} -np 1 "
                 f"/bin/true 'a b'")
    problems = []
    if r.stderr.splitlines()[:1] != [want_line]:
        problems.append(f"joinable: stderr {r.stderr!r}, want first {want_line!r}")
    want_argv = [e.mpi4, "--ompi-server", f"file:{uri}", "--mca", "pmix_base_exchange_timeout",
                 "3", "-np", "2", "/bin/true", "a b"]
    if rec["argv"] != want_argv:
        problems.append(f"joinable: mpirun's arguments {rec['argv']}, want {want_argv}")
    secret = env.get("FTRT_JOB_SECRET", "")
    if env.get("FTRT_JOINABLE") != "8" or not re.fullmatch(r"[0-9a-f]{16}", secret):
        problems.append(f"joinable: FTRT_JOINABLE {env.get('FTRT_JOINABLE')!r}, FTRT_JOB_SECRET "
                        f"{secret!r}")
    # the job's FTRT_*: FTRT_SPARES given here, and any this test inherited (FTRT_STRICT_DEPS
    # under CI), but neither its files', the secret, FTRT_JOINABLE nor ftrt-run's own
    skip = ("FTRT_STATUS_FILE", "FTRT_RUN_EXIT_DIR", "FTRT_JOB_SECRET", "FTRT_JOINABLE")
    want_env = {k: v for k, v in os.environ.items()
                if k.startswith("FTRT_") and k not in skip and not k.startswith("FTRT_RUN_")}
    want_env["FTRT_SPARES"] = "2"
    want_info = {"format": 1, "secret": secret, "ompi_server_uri": uri,
                 "status": env["FTRT_STATUS_FILE"], "ompi_major": 4, "env": want_env}
    if rec.get("join_mode") != 0o600 or info != want_info:
        problems.append(f"joinable: join.json mode {rec.get('join_mode')} {info}, want 0600 "
                        f"{want_info}")
    pid, marker = servers[0]
    if marker != env.get("FTRT_RUN_ID") or pid_alive(pid) or os.path.exists(d):
        problems.append(f"joinable: server marker {marker} (job's {env.get('FTRT_RUN_ID')}), "
                        f"alive {pid_alive(pid)}, run directory left {os.path.exists(d)}")
    e.clear()
    return problems


def check_server_ends(e):
    """The ompi-server is gone in every way a joinable ftrt-run ends: SIGTERMed (exit 143), with
    a server that ignores SIGTERM (SIGKILLed 2 s later), and ftrt-run SIGKILLed (the server's
    parent-death signal)."""
    problems = []
    for how, extra in (("SIGTERM", {}), ("SIGTERM, deaf server", {"FAKE_SERVER": "deaf"}),
                       ("SIGKILL", {})):
        p = subprocess.Popen(RUN + ["--joinable", "--", e.mpi4, "-np", "1", "/bin/true"],
                             env=dict(os.environ, **e.env, **extra, FAKE_SLEEP="30"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        if not wait_for(lambda: e.record() is not None, 10):
            problems.append(f"server ends ({how}): the job did not start")
        p.send_signal(signal.SIGKILL if how == "SIGKILL" else signal.SIGTERM)
        rc = p.wait(10)
        gone = wait_for(lambda: not any(pid_alive(s) for s, _ in e.servers()), 3)
        if not gone or (how != "SIGKILL" and rc != 143):
            problems.append(f"server ends ({how}): ftrt-run exit {rc}, server gone {gone}")
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the stand-in mpirun of the SIGKILLed one
        except ProcessLookupError:
            pass
        for s, _ in e.servers():
            if pid_alive(s):
                os.kill(s, signal.SIGKILL)
        e.clear()
    return problems


# ---- Open MPI 4.1 -------------------------------------------------------------------------

JOB_PROG = """#!/bin/sh
# The job's rank: writes a status file naming a control plane, waits for $1, then says finished.
st='{"job": "%s", "control_plane": "127.0.0.1:4567", "control_plane_addresses": ["127.0.0.1"]}'
printf "$st\\n" running > "$FTRT_STATUS_FILE.tmp" && mv "$FTRT_STATUS_FILE.tmp" "$FTRT_STATUS_FILE"
i=0
while [ ! -e "$1" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
printf "$st\\n" finished > "$FTRT_STATUS_FILE.tmp" && mv "$FTRT_STATUS_FILE.tmp" "$FTRT_STATUS_FILE"
"""


def servers_of(run_dir):
    """Pids of the processes whose command line names run_dir and --report-uri."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if b"--report-uri" in cmd and any(run_dir.encode() in a for a in cmd) and \
                pid_alive(int(name)):
            found.append(int(name))
    return found


def real_ompi41():
    """Why Debian's Open MPI 4.1 cannot be used here, or None."""
    for tool in ("/usr/bin/mpirun", "/usr/bin/ompi-server"):
        if not os.access(tool, os.X_OK):
            return f"{tool} missing"
    r = subprocess.run(["/usr/bin/mpirun", "--version"], capture_output=True, text=True)
    return None if "(Open MPI) 4." in r.stdout else "/usr/bin/mpirun is not Open MPI 4"


def start_real_job(e, go):
    """A joinable job of one JOB_PROG rank under Debian's mpirun; (ftrt-run's process, its run
    directory or None, stderr file)."""
    prog = write_exec(os.path.join(e.d, "job.sh"), JOB_PROG)
    err = open(os.path.join(e.d, "job.err"), "w+")
    env = dict(os.environ, **e.env, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", FTRT_SPARES="2")
    p = subprocess.Popen(RUN + ["--joinable", "--", "/usr/bin/mpirun", "--oversubscribe",
                                "-np", "1", prog, go], env=env, stdout=subprocess.DEVNULL,
                         stderr=err, start_new_session=True)
    found = []

    def ready():
        err.seek(0)
        m = re.search(r"--join (\S+) ", err.read())
        found[:] = [m.group(1)] if m else []
        return bool(found) and os.path.exists(os.path.join(found[0], "status.json"))
    wait_for(ready, 15)
    return p, (found or [None])[0], err


def check_real(e):
    """Debian's Open MPI 4.1: a joinable job runs with its ompi-server (one, naming its run
    directory) and join.json mode 0600; a real joiner's mpirun runs against that server with
    FTRT_JOIN_*; the job ends 0 and leaves no ompi-server and no run directory."""
    go = os.path.join(e.d, "go")
    p, d, err = start_real_job(e, go)
    problems = []
    try:
        if d is None:
            err.seek(0)
            return [f"real 4.1: the job did not start: {err.read()[-600:]!r}"]
        servers = servers_of(d)
        mode = os.stat(os.path.join(d, "join.json")).st_mode & 0o7777
        if len(servers) != 1 or mode != 0o600:
            problems.append(f"real 4.1: ompi-servers {servers}, join.json mode {mode:04o}")
        out = os.path.join(e.d, "joiner.env")
        r = run(RUN + ["--join", d, "--", "/usr/bin/mpirun", "--oversubscribe", "-np", "1",
                       "sh", "-c", f"env > {out}"], dict(
            e.env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"), 60)
        got = open(out).read() if os.path.exists(out) else ""
        for want in ("FTRT_JOIN_PORT=4567\n", "FTRT_JOIN_ADDRS=127.0.0.1\n", "FTRT_SPARES=2\n",
                     f"OMPI_MCA_pmix_server_uri=file:{d}/ompi-server.uri\n"):
            if want not in got:
                problems.append(f"real 4.1: joiner exit {r.returncode}, no {want.strip()!r} in "
                                f"its rank's environment; stderr {r.stderr.strip()[-400:]!r}")
        open(go, "w").close()
        rc = p.wait(30)
        left = servers_of(d)
        if rc != 0 or left or os.path.exists(d):
            err.seek(0)
            problems.append(f"real 4.1: job exit {rc}, ompi-servers left {left}, run directory "
                            f"left {os.path.exists(d)}; stderr {err.read()[-400:]!r}")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        err.close()
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    problems = check_options()
    with tempfile.TemporaryDirectory(prefix="ftrt-join-") as d:
        e = Env(d)
        checks = [("usage", check_cli_usage), ("refusals", check_refusals),
                  ("joiner", check_joiner), ("joinable refusals", check_joinable_refusals),
                  ("joinable", check_joinable), ("server ends", check_server_ends)]
        why = real_ompi41()
        if why is None:
            checks.append(("Open MPI 4.1", check_real))
        for name, check in checks:
            t0 = time.monotonic()
            got = check(e)
            problems += got
            if a.v:
                print(f"  {'ok' if not got else 'FAIL'}: {name} ({time.monotonic() - t0:.1f} s)")
    for p in problems:
        print("FAIL:", p)
    skipped = f"; Open MPI 4.1 skipped: {why}" if why else ""
    print(f"ftrt-run join modes: {'all passed' if not problems else f'{len(problems)} problem(s)'}"
          f"{skipped}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
