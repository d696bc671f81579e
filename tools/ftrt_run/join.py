"""A joiner (ftrt-run --join RUNDIR -- mpirun -np 1 PROGRAM ...): a new process that asks a
running joinable job (ftrt-run --joinable, joinable.py) to take it in as a hot spare. The
checks that the job is this user's, alive and joinable from this mpirun, each failing with one
line and exit 1 (Refused); then the joiner's mpirun, run in a run directory of its own, pointed
at the job's ompi-server, with the job's configuration and FTRT_JOIN_ADDRS, FTRT_JOIN_PORT and
FTRT_JOIN_SECRET; its exit status is ftrt-run's. Open MPI 4.1 only (docs/join.md)."""
from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import stat
import sys
import time

from .ending import end_leftovers, end_mpirun
from .joinable import JOIN_FILE, JOIN_FORMAT, JOIN_MAJOR, NOT_FOR_JOINERS, rendezvous_opts
from .launcher import adapt_launcher
from .mpirun import forward_signals, start
from .procs import MARKER, Procs, set_subreaper
from .rundir import RUN_DIR, RunDir, alive
from .watch import read_status

ENDED = ("finished", "failed", "failing")  # status file "job" states of a job that is ending
POLL_S = 0.05    # the joiner's mpirun
LOOK_S = 0.5     # the job's lock, while the joiner runs


class Refused(Exception):
    """A join that cannot be: its one-line message, exit status 1."""


def check_run_dir(given: str) -> str:
    """The real path of the job's run directory given as --join's value: a directory named
    <pid>-<random> (rundir.RUN_DIR) of this user's, in a directory ftrt-run.<uid> of this
    user's that no one else can write, whose lock a process holds (the job lives). Raises
    Refused."""
    d, uid = os.path.realpath(given), os.getuid()
    try:
        st, pst = os.stat(d), os.stat(os.path.dirname(d))
    except FileNotFoundError:
        if RUN_DIR.fullmatch(os.path.basename(d)) and \
                os.path.basename(os.path.dirname(d)) == f"ftrt-run.{uid}":
            raise Refused(f"the job of {given} has ended (its run directory is gone)")
        raise Refused(f"--join {given}: no such directory")
    except OSError as e:
        raise Refused(f"--join {given}: {e.strerror}")
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(f"--join {given}: not a directory")
    if not RUN_DIR.fullmatch(os.path.basename(d)) or \
            os.path.basename(os.path.dirname(d)) != f"ftrt-run.{uid}":
        raise Refused(f"--join {given}: not a run directory of ftrt-run "
                      f"($TMPDIR/ftrt-run.{uid}/<pid>-<random>)")
    if st.st_uid != uid or pst.st_uid != uid or pst.st_mode & 0o022:
        raise Refused(f"--join {given}: not a run directory of this user's own")
    if not alive(d):
        raise Refused(f"the job of {given} has ended")
    return d


def open_join_file(path: str, given: str) -> dict:
    """join.json at path, parsed: a regular file of this user's, mode 0600. Raises Refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Refused(f"{given} has no {JOIN_FILE}: its job was not started with "
                      f"ftrt-run --joinable")
    except OSError as e:  # ELOOP: a symbolic link
        raise Refused(f"{path} must be a regular file of this user's with mode 0600 "
                      f"({e.strerror})")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or \
                stat.S_IMODE(st.st_mode) != 0o600:
            raise Refused(f"{path} must be a regular file of this user's with mode 0600 (it has "
                          f"mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid})")
        try:
            return json.loads(f.read())
        except ValueError:
            raise Refused(f"{path}: not JSON")


def read_join_file(run_dir: str, given: str) -> dict:
    """The job's join.json (joinable.make_joinable() wrote it), checked: format 1, a secret of
    16 lowercase hexadecimal digits, the ompi-server's URI file (non-empty), the status file's
    path, Open MPI's major version, the job's FTRT_* variables. Raises Refused."""
    path = os.path.join(run_dir, JOIN_FILE)
    info = open_join_file(path, given)
    ok = isinstance(info, dict) and info.get("format") == JOIN_FORMAT and \
        re.fullmatch(r"[0-9a-f]{16}", str(info.get("secret"))) and \
        all(isinstance(info.get(k), str) for k in ("ompi_server_uri", "status")) and \
        isinstance(info.get("ompi_major"), int) and isinstance(info.get("env"), dict)
    if not ok:
        raise Refused(f"{path}: not a join file of format {JOIN_FORMAT} (another ftrt-run "
                      f"version?)")
    try:
        if os.path.getsize(info["ompi_server_uri"]) == 0:
            raise OSError
    except OSError:
        raise Refused(f"the job's ompi-server has not reported its URI "
                      f"({info['ompi_server_uri']} is missing or empty)")
    return info


def control_plane(status: str, given: str) -> tuple[list[str], int]:
    """(the coordinator's IPv4 addresses, its port) from the job's status file at path
    `status` ("control_plane": "addr:port", "control_plane_addresses": [...]); only read, never
    written or removed. Raises Refused: unreadable, the job ending or ended, no control plane
    yet."""
    st = read_status(status)
    if not isinstance(st, dict):
        raise Refused(f"the job's status file {status} cannot be read (has its coordinator "
                      f"started?)")
    if st.get("job") in ENDED:
        raise Refused(f"the job of {given} has ended (its status file says "
                      f"\"{st['job']}\")")
    try:
        port = int(st["control_plane"].rsplit(":", 1)[1])
        addrs = [str(ipaddress.IPv4Address(a)) for a in st["control_plane_addresses"]
                 if isinstance(a, str)]
        if not addrs or not 0 < port < 65536:
            raise ValueError
    except (KeyError, AttributeError, IndexError, TypeError, ValueError):
        raise Refused(f"the job's status file {status} names no control plane "
                      f"(\"control_plane\": \"addr:port\", \"control_plane_addresses\": "
                      f"[IPv4 addresses])")
    return addrs, port


def base_env(info: dict) -> dict:
    """This environment with the job's FTRT_* variables of join.json over it (the job's
    configuration), less the job's own (joinable.NOT_FOR_JOINERS, FTRT_RUN_*)."""
    env = dict(os.environ)
    env.update({k: v for k, v in info["env"].items() if isinstance(v, str) and
                k.startswith("FTRT_") and k not in NOT_FOR_JOINERS and
                not k.startswith("FTRT_RUN_")})
    for k in ("FTRT_JOINABLE", "FTRT_JOB_SECRET"):
        env.pop(k, None)
    return env


def check_major(cmd: list[str], env: dict, info: dict) -> tuple[list[str], str | None]:
    """The joiner's command and adapt_launcher()'s note (its launcher; Usage when its program
    cannot be run), refused (Refused) unless its Open MPI is the job's (join.json
    "ompi_major")."""
    cmd, note, major = adapt_launcher(cmd, env)
    if major != info["ompi_major"]:
        mine = f"Open MPI {major}" if major is not None else "not an Open MPI launcher"
        raise Refused(f"the job runs Open MPI {info['ompi_major']}, this "
                      f"{os.path.basename(cmd[0])} is {mine}")
    return cmd, note


def prepare_join(opts: dict) -> tuple[str, list[str], dict, str | None]:
    """The checks (in this order: the run directory, the job alive, join.json, the launcher's
    Open MPI, the status file's control plane) and the joiner's command and environment
    without its run directory's variables. Returns (the job's run directory, command,
    environment, note for stderr or None). Raises Refused, Usage."""
    given = opts["join"]
    job_dir = check_run_dir(given)
    info = read_join_file(job_dir, given)
    env = base_env(info)
    cmd, note = check_major(opts["cmd"], env, info)
    addrs, port = control_plane(info["status"], given)
    cmd[1:1] = rendezvous_opts(info["ompi_server_uri"])
    # the job's status file: the joiner writes it only as the job's coordinator, after a
    # takeover as its standby (docs/join.md "Limits")
    env.update(FTRT_JOIN_ADDRS=" ".join(addrs), FTRT_JOIN_PORT=str(port),
               FTRT_JOIN_SECRET=info["secret"], FTRT_STATUS_FILE=info["status"])
    return job_dir, cmd, env, note


def wait_joiner(mpirun, stop: list[int], job_dir: str, opts: dict) -> tuple[int | None, bool]:
    """Polls until the joiner's mpirun exits (its status, False), until --term-grace seconds
    after a SIGINT or SIGTERM, or until --exit-grace seconds after the job's end (its run
    directory's lock free: a joiner can be stuck in an MPI call that nothing interrupts,
    docs/join.md e4). Returns (mpirun's status or None, True when the job's end was why)."""
    t_stop = t_gone = None
    next_look = 0.0
    while (rc := mpirun.poll()) is None:
        now = time.monotonic()
        if stop:
            t_stop = t_stop or now
            if now - t_stop > opts["term_grace"]:
                return None, False
        if t_gone is None and now >= next_look:
            next_look = now + LOOK_S
            t_gone = None if alive(job_dir) else now
        if t_gone is not None and now - t_gone >= opts["exit_grace"]:
            return None, True
        time.sleep(POLL_S)
    return rc, False


def joiner_exits(path: str) -> list[int]:
    """The exit statuses the joining process recorded in FTRT_RUN_EXIT_DIR (path): libftrt
    writes a joiner's every status, 0 included, from its ftrt_init() on (runtime/context.c
    record_exit), so none means it was killed (by a signal, or fenced)."""
    found = []
    try:
        names = os.listdir(path)
    except OSError:
        return found
    for name in names:
        try:
            with open(os.path.join(path, name)) as f:
                found.append(int(f.read().strip()))
        except (OSError, ValueError):
            continue
    return found


def join_status(rc: int | None, stop: list[int], job_gone: bool, exits: list[int],
                given: str) -> int:
    """ftrt-run's exit status for a joiner: 128 + signal when told to stop; 1 when the job
    ended and the joiner was ended; mpirun's own status (128 + signal for one killed by a
    signal) when not 0; else (Open MPI 4.1's mpirun --enable-recovery exits 0 whatever its rank
    did) the status the joiner recorded, or 1 when it recorded none (it was killed)."""
    if stop:
        return 128 + stop[0]
    if job_gone:
        print(f"ftrt-run: the job of {given} ended and the joiner was still there after "
              f"--exit-grace: ended it; exiting 1", file=sys.stderr)
        return 1
    if rc is None:
        return 1
    if rc == 0 and not exits:
        print("ftrt-run: the joining process ended without recording its exit status (killed "
              "by a signal, or fenced by the job): exiting 1", file=sys.stderr)
        return 1
    if rc == 0:
        return max(exits)
    return rc if rc >= 0 else 128 - rc


def run_join(opts: dict) -> int:
    """Runs the joiner (see ftrt-run --help) in a run directory of its own, removed at the end;
    ftrt-run's exit status. Raises Refused, Usage."""
    job_dir, cmd, env, note = prepare_join(opts)
    if note:
        print(note, file=sys.stderr, flush=True)
    rundir = RunDir()
    try:
        env.update({"FTRT_RUN_EXIT_DIR": rundir.exits, MARKER: secrets.token_hex(8)})
        return join_job(opts, job_dir, cmd, env, rundir)
    finally:
        rundir.remove()


def join_job(opts: dict, job_dir: str, cmd: list[str], env: dict, rundir: RunDir) -> int:
    """Runs the joiner's mpirun (cmd, env) holding rundir's lock, waits for it (wait_joiner()),
    ends it if need be and then its leftovers; ftrt-run's exit status."""
    set_subreaper()
    try:
        mpirun, err = start(cmd, env, rundir.lock)
    except OSError as e:
        print(f"ftrt-run: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127
    stop = forward_signals(mpirun)
    procs = Procs(env[MARKER])
    rc, job_gone = wait_joiner(mpirun, stop, job_dir, opts)
    if rc is None:
        end_mpirun(mpirun, procs, opts["term_grace"], JOIN_MAJOR)
    end_leftovers(procs)
    err.close()
    return join_status(rc, stop, job_gone, joiner_exits(rundir.exits), opts["join"])
