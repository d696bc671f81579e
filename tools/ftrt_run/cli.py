"""ftrt-run's main: parses the command line, makes the run directory, starts mpirun with its
standard error filtered, watches the job, ends mpirun and the leftovers, and returns the job's
true exit status (see ftrt-run --help, the package's docstring)."""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time

from . import __doc__ as HELP  # the package's docstring: ftrt-run --help
from .ending import end_leftovers, end_mpirun
from .launcher import adapt_launcher
from .options import Usage, check_file_path, parse_args, status_file
from .outcome import exit_code, rank_exits, report_end, write_summary
from .procs import MARKER, set_subreaper
from .rundir import RunDir
from .stderr_filter import StderrFilter
from .watch import Watch, read_status


def start(cmd: list[str], env: dict, lock: int) -> tuple[subprocess.Popen, StderrFilter]:
    """mpirun (cmd) with its standard error filtered, holding the run directory's lock (file
    descriptor `lock`) too: the directory outlives a SIGKILLed ftrt-run while mpirun runs;
    (process, StderrFilter). Raises OSError."""
    mpirun = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, pass_fds=(lock,))
    return mpirun, StderrFilter(mpirun.stderr)


def forward_signals(mpirun: subprocess.Popen) -> list[int]:
    """SIGINT and SIGTERM to ftrt-run are passed on to mpirun; returns the list they are
    recorded in."""
    stop = []

    def on_signal(sig, _frame):
        stop.append(sig)
        try:
            mpirun.send_signal(sig)
        except OSError:
            pass
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop


def run(opts: dict) -> int:
    """Runs the job (see ftrt-run --help) in a run directory of its own, removed at the end;
    ftrt-run's exit status."""
    rundir = RunDir()
    try:
        return run_job(opts, rundir)
    finally:
        rundir.remove()


def prepare(opts: dict, rundir: RunDir) -> tuple[list[str], dict, str | None, int | None, dict]:
    """The job's command (adapt_launcher()) and environment: FTRT_STATUS_FILE (status_file(),
    else the run directory's), FTRT_RUN_EXIT_DIR and the marker. Returns (command, environment,
    note for stderr or None, Open MPI's major version or None, the run's record: status file
    and where it came from). Raises Usage."""
    env = dict(os.environ)
    cmd, note, major = adapt_launcher(opts["cmd"], env)
    status, status_from = status_file(opts, env)
    status = status or rundir.status
    env["FTRT_STATUS_FILE"] = status
    env["FTRT_RUN_EXIT_DIR"] = rundir.exits
    env[MARKER] = secrets.token_hex(8)
    return cmd, env, note, major, {"status": status, "status_from": status_from}


def end_job(w: Watch, err: StderrFilter, opts: dict, major: int | None, r: dict,
            exit_dir: str) -> tuple[set[int], str | None]:
    """Waits for the job's end (w), ends mpirun if it is still there and then the job's
    leftovers; records the outcome in r. Returns (the leftovers' pids, the last signal sent
    to mpirun or None)."""
    mpirun = w.mpirun
    rc, ended = w.run(), None
    if rc is None:
        rc, ended = end_mpirun(mpirun, w.procs, opts["term_grace"], major)
    r["t_mpirun_exit"] = time.time()
    if w.t_last_exit is None and w.procs.ranks and not w.procs.live_ranks():
        w.t_last_exit = r["t_mpirun_exit"]
    leftovers = end_leftovers(w.procs)
    if w.t_last_exit is None and w.procs.ranks:  # ranks outlived mpirun (Open MPI 5 after a
        w.t_last_exit = time.time()               # lost daemon): gone now, ended as leftovers
    err.close()
    st = read_status(r["status"])
    r.update(rc=rc, stop=w.stop, first_error=err.first_error, last_line=err.last_line,
             mpirun_status=rc if ended is None else None,
             job=st["job"] if st and st.get("job") else w.job, rank_exits=rank_exits(exit_dir))
    return leftovers, ended


def run_job(opts: dict, rundir: RunDir) -> int:
    """Runs the job with its temporary files in rundir (a RunDir); ftrt-run's exit status."""
    cmd, env, note, major, r = prepare(opts, rundir)
    set_subreaper()
    r["t_start"] = time.time()
    if note:
        print(note, file=sys.stderr, flush=True)
    try:
        mpirun, err = start(cmd, env, rundir.lock)
    except OSError as e:
        print(f"ftrt-run: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127
    w = Watch(mpirun, r["status"], opts, forward_signals(mpirun), env[MARKER])
    leftovers, ended = end_job(w, err, opts, major, r, rundir.exits)
    report_end(r, leftovers, ended)
    code = exit_code(r)
    if opts["summary"]:
        write_summary(opts["summary"], r, w, leftovers, ended, code)
    return code


def main(argv: list[str]) -> int:
    """ftrt-run with arguments argv (sys.argv[1:]); its exit status (see ftrt-run --help)."""
    try:
        opts = parse_args(argv)
        if opts is None:
            print(HELP)
            return 0
        if opts["summary"]:
            check_file_path(opts["summary_from"], opts["summary"], parent_must_exist=True)
        return run(opts)
    except Usage as e:
        print(f"ftrt-run: {e}", file=sys.stderr)
        return 2
