"""A joinable job (ftrt-run --joinable): Open MPI 4.1's rendezvous server, `ompi-server`,
started beside the job for as long as it runs, the options that point an mpirun at it, the job's
secret, and the file join.json in the run directory that tells a joiner (ftrt-run --join,
join.py) how to meet the job. A second mpirun can reach a running job only through such a
server started before the job (docs/join.md, "What a design must meet", point 5); Open MPI 5
has none, so --joinable is for Open MPI 4 only."""
from __future__ import annotations

import ctypes
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import time
from typing import Callable

from .launcher import program_index
from .options import Usage
from .rundir import runs_parent

JOIN_FILE = "join.json"      # in the job's run directory, mode 0600
URI_FILE = "ompi-server.uri"  # ompi-server --report-uri, in the job's run directory
JOIN_FORMAT = 1
JOIN_MAJOR = 4               # the only Open MPI whose mpiruns can meet (docs/join.md)
URI_WAIT_S = 10.0            # the longest ompi-server may take to report its URI
STOP_WAIT_S = 2.0            # SIGTERM to ompi-server, then SIGKILL after this
DEFAULT_JOINS = 8  # FTRT_JOINABLE that --joinable gives unless the environment gives a count
# The job's variables a joiner must not take over: its own files, the secret (a joiner gets it
# as FTRT_JOIN_SECRET) and ftrt-run's settings (FTRT_RUN_*: the marker among them).
NOT_FOR_JOINERS = ("FTRT_STATUS_FILE", "FTRT_RUN_EXIT_DIR", "FTRT_JOB_SECRET", "FTRT_JOINABLE")


def joinable_dir(pid: int) -> str | None:
    """The run directory of the ftrt-run whose pid is `pid`, once its join.json is there (the
    path `ftrt-run --join` takes), or None: one look, no wait (the tests and ftrt-chaos poll)."""
    parent = runs_parent()
    try:
        names = os.listdir(parent)
    except OSError:
        return None
    for n in names:
        if n.startswith(f"{pid}-") and os.path.exists(os.path.join(parent, n, JOIN_FILE)):
            return os.path.join(parent, n)
    return None


def rendezvous_opts(uri: str) -> list[str]:
    """mpirun's options that make it use the ompi-server whose URI file is at path `uri`, with
    PMIx's exchange bounded to 3 s (Open MPI 4.1's `pmix_base_exchange_timeout`: a joiner lost
    inside the meeting costs one member a 2 s error, docs/join.md e8)."""
    return ["--ompi-server", f"file:{uri}", "--mca", "pmix_base_exchange_timeout", "3"]


def find_ompi_server(launcher: str, env: dict) -> str:
    """The `ompi-server` beside `launcher` (a path or a name on env's PATH): in the launcher's
    directory, or in that of the file its symbolic links lead to (Debian's /usr/bin/mpirun ->
    /etc/alternatives/mpirun -> /usr/bin/mpirun.openmpi). Raises Usage when there is none."""
    found = launcher if "/" in launcher else shutil.which(launcher, path=env.get("PATH"))
    dirs = [os.path.dirname(os.path.abspath(found)),
            os.path.dirname(os.path.realpath(found))] if found else []
    for d in dirs:
        cand = os.path.join(d, "ompi-server")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise Usage(f"--joinable needs Open MPI 4.1's ompi-server: there is none beside {launcher}"
                f" ({' or '.join(dict.fromkeys(dirs)) or 'not found'})")


def check_joinable(cmd: list[str], major: int | None, env: dict) -> str:
    """The ompi-server for a joinable job whose command (after adapt_launcher()) is cmd and
    whose Open MPI is `major`; Usage unless that is Open MPI 4 with an ompi-server."""
    if major is None:
        raise Usage(f"--joinable needs Open MPI 4.1's ompi-server: {cmd[0]} is not an Open MPI"
                    f" launcher (mpirun ...)")
    if major != JOIN_MAJOR:
        raise Usage(f"--joinable needs Open MPI 4.1's ompi-server: a second mpirun cannot join "
                    f"an Open MPI {major} job (docs/join.md)")
    return find_ompi_server(cmd[0], env)


def die_with_parent() -> Callable[[], None]:
    """A preexec_fn that has the child SIGTERMed when ftrt-run dies (PR_SET_PDEATHSIG: even a
    SIGKILLed ftrt-run leaves no ompi-server behind). Call it before any thread starts."""
    libc, parent = ctypes.CDLL(None, use_errno=True), os.getpid()

    def child() -> None:
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # ftrt-run died before the prctl
            os.kill(os.getpid(), signal.SIGTERM)
    return child


class OmpiServer:
    """The job's ompi-server (`ompi-server --no-daemonize --report-uri URI`), a child of
    ftrt-run with the job's environment (its marker included: the job's clean-up and the test
    harness's find it as the job's), stopped by stop() at the end of the run: call stop() in
    every path once start() was called."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None  # once started

    def start(self, binary: str, uri: str, env: dict) -> None:
        """Starts `binary` writing its URI to the file at `uri`, and waits for it (URI_WAIT_S
        at most). Its standard output goes to ftrt-run's standard error (the job's output stays
        the job's). Raises Usage when it cannot be run, exits, or reports nothing in time."""
        try:
            self.proc = subprocess.Popen(
                [binary, "--no-daemonize", "--report-uri", uri], env=env,
                stdin=subprocess.DEVNULL, stdout=2, preexec_fn=die_with_parent())
        except OSError as e:
            raise Usage(f"cannot run {binary}: {e.strerror}")
        self.wait_uri(self.proc, binary, uri)

    @staticmethod
    def wait_uri(proc: subprocess.Popen, binary: str, uri: str) -> None:
        """Waits until the URI file at `uri` holds a whole line (polled every 10 ms, then up to
        every 100 ms; URI_WAIT_S at most). Raises Usage when the server (proc) exited or was
        late."""
        deadline, pause = time.monotonic() + URI_WAIT_S, 0.01
        while True:
            try:
                with open(uri, "rb") as f:
                    if f.read().endswith(b"\n"):
                        return
            except FileNotFoundError:
                pass
            rc = proc.poll()
            if rc is not None:
                raise Usage(f"{binary} exited with status {rc} before it reported its URI")
            if time.monotonic() > deadline:
                raise Usage(f"{binary} did not write its URI to {uri} within {URI_WAIT_S:g} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    @property
    def pid(self) -> int | None:
        """The server's pid, or None before start()."""
        return self.proc.pid if self.proc is not None else None

    def stop(self) -> None:
        """Ends the server, if started and still there: SIGTERM, SIGKILL STOP_WAIT_S later,
        reaped. Safe to call more than once."""
        p = self.proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def joiners_env(env: dict) -> dict:
    """The job's FTRT_* variables that a joiner takes over (the same configuration as the
    job's): every one but NOT_FOR_JOINERS and FTRT_RUN_*."""
    return {k: v for k, v in env.items() if k.startswith("FTRT_") and
            k not in NOT_FOR_JOINERS and not k.startswith("FTRT_RUN_")}


def write_join_file(path: str, record: dict) -> None:
    """Writes record as JSON to a new file at path, mode 0600 whatever the umask (O_EXCL: an
    existing file, or a link, is an error). Raises OSError."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o600)
        json.dump(record, f, indent=1)
        f.write("\n")


def join_hint(run_dir: str, user_cmd: list[str]) -> str:
    """The line ftrt-run prints at the start of a joinable job: the command that joins it
    (`ftrt-run --join RUNDIR -- mpirun -np 1 PROGRAM ARGS`; `...` for the program when the
    job's command names none simply, e.g. an --app file)."""
    args = user_cmd[1:]
    i = program_index(args)
    prog = "..." if any(a in ("--app", "-app") for a in args) or i >= len(args) else \
        shlex.join(args[i:])
    return (f"ftrt-run: this job can be joined: ftrt-run --join {shlex.quote(run_dir)} -- "
            f"{shlex.quote(user_cmd[0])} -np 1 {prog}")


def make_joinable(cmd: list[str], env: dict, run_dir: str, status: str, binary: str,
                  server: OmpiServer) -> None:
    """Makes the job joinable: starts `binary` (check_joinable()) as `server`, with its URI file
    in the run directory `run_dir`; inserts rendezvous_opts() after cmd[0]; sets FTRT_JOINABLE
    (DEFAULT_JOINS, or the count the environment already gives) and FTRT_JOB_SECRET (16 hexadecimal
    digits) in env; writes join.json (format 1: the secret, the URI file, the status file
    `status`, the Open MPI major, joiners_env()). cmd and env are changed in place. Raises
    Usage."""
    uri = os.path.join(run_dir, URI_FILE)
    server.start(binary, uri, env)
    cmd[1:1] = rendezvous_opts(uri)
    if not env.get("FTRT_JOINABLE", "").isdigit() or int(env["FTRT_JOINABLE"]) < 1:
        env["FTRT_JOINABLE"] = str(DEFAULT_JOINS)
    env["FTRT_JOB_SECRET"] = secrets.token_hex(8)
    record = {"format": JOIN_FORMAT, "secret": env["FTRT_JOB_SECRET"], "ompi_server_uri": uri,
              "status": os.path.abspath(status), "ompi_major": JOIN_MAJOR,
              "env": joiners_env(env)}
    try:
        write_join_file(os.path.join(run_dir, JOIN_FILE), record)
    except OSError as e:
        raise Usage(f"cannot write {os.path.join(run_dir, JOIN_FILE)}: {e.strerror}")
