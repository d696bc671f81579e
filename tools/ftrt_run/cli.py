"""ftrt-run's main: parses the command line, makes the run directory, starts mpirun with its
standard error filtered, watches the job, ends mpirun and the leftovers, and returns the job's
true exit status (see ftrt-run --help, the package's docstring). A joinable job (--joinable)
gets an ompi-server for its life (joinable.py); a joiner (--join) runs in join.py."""
from __future__ import annotations

import os
import secrets
import sys
import time

from . import __doc__ as HELP  # the package's docstring: ftrt-run --help
from .ending import end_leftovers, end_mpirun
from .join import Refused, run_join
from .joinable import OmpiServer, check_joinable, join_hint, make_joinable
from .launcher import adapt_launcher
from .mpirun import forward_signals, start
from .options import Usage, check_file_path, parse_args, status_file
from .outcome import exit_code, rank_exits, report_end, write_summary
from .procs import MARKER, set_subreaper
from .rundir import RunDir
from .stderr_filter import StderrFilter
from .watch import Watch, read_status


def run(opts: dict) -> int:
    """Runs the job (see ftrt-run --help) in a run directory of its own, removed at the end,
    after the ompi-server of a joinable job is stopped (whatever happened: an error, a
    KeyboardInterrupt); ftrt-run's exit status."""
    rundir, server = RunDir(), OmpiServer()
    try:
        return run_job(opts, rundir, server)
    finally:
        server.stop()
        rundir.remove()


def prepare(opts: dict, rundir: RunDir,
            server: OmpiServer) -> tuple[list[str], dict, list[str], int | None, dict]:
    """The job's command (adapt_launcher()) and environment: FTRT_STATUS_FILE (status_file(),
    else the run directory's), FTRT_RUN_EXIT_DIR and the marker; for a joinable job, the
    ompi-server started (`server`), its options and FTRT_JOINABLE, FTRT_JOB_SECRET, join.json
    (make_joinable()). Returns (command, environment, lines for stderr, Open MPI's major
    version or None, the run's record: status file and where it came from). Raises Usage."""
    env = dict(os.environ)
    cmd, note, major = adapt_launcher(opts["cmd"], env)
    binary = check_joinable(cmd, major, env) if opts["joinable"] else None
    status, status_from = status_file(opts, env)
    status = status or rundir.status
    env["FTRT_STATUS_FILE"] = status
    env["FTRT_RUN_EXIT_DIR"] = rundir.exits
    env[MARKER] = secrets.token_hex(8)
    notes = [note] if note else []
    if binary:
        make_joinable(cmd, env, rundir.path, status, binary, server)
        notes.append(join_hint(rundir.path, opts["cmd"]))
    return cmd, env, notes, major, {"status": status, "status_from": status_from}


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


def run_job(opts: dict, rundir: RunDir, server: OmpiServer) -> int:
    """Runs the job with its temporary files in rundir (a RunDir) and, when it is joinable,
    its ompi-server (`server`, which the caller stops); ftrt-run's exit status."""
    cmd, env, notes, major, r = prepare(opts, rundir, server)
    set_subreaper()
    r["t_start"] = time.time()
    for note in notes:
        print(note, file=sys.stderr, flush=True)
    try:
        mpirun, err = start(cmd, env, rundir.lock)
    except OSError as e:
        print(f"ftrt-run: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127
    own = {server.pid} if server.pid else set()
    w = Watch(mpirun, r["status"], opts, forward_signals(mpirun), env[MARKER], own)
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
        return run_join(opts) if opts["join"] else run(opts)
    except Usage as e:
        print(f"ftrt-run: {e}", file=sys.stderr)
        return 2
    except Refused as e:
        print(f"ftrt-run: {e}", file=sys.stderr)
        return 1
