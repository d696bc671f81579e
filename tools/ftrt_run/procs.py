"""ftrt-run's view of the job's processes on this host: each process's state and environment
from /proc, the marker (FTRT_RUN_ID) that tells this job's processes from others, the world
rank of each rank process (with a pidfd to watch it by), the Open MPI session paths they use,
and ftrt-run's own children (it is a child subreaper: the job's orphans are re-parented to it).
Linux only."""
from __future__ import annotations

import ctypes
import os
import re
import select

MARKER = "FTRT_RUN_ID"
SCAN_S = 0.25      # /proc scan for new rank processes of this job, while new ones appear
SESSION_MAX_S = 4.0  # the longest between two reads of a process's session paths


def set_subreaper() -> bool:
    """Orphans of the job (orted daemons that daemonize, ranks of a dead orted) are re-parented
    to ftrt-run instead of init, so that they can be found and reaped."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, starttime) of pid, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[19])


def environ(pid: int) -> list[bytes]:
    """The environment of process pid (NAME=value items), or [] when it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


# Open MPI's session directories and shared-memory files. 4.1: <tmp>/ompi.<host>.<uid>/ then
# pid.<mpirun pid> (mpirun), jf.<job family> (an orted and its ranks) or vader_segment.* files;
# 5.0 (PRRTE): <tmp>/ompi.<pid>, prte.<pid>, prted.<pid> (one per daemon or mpirun).
SESSION = re.compile(r"^(/\S*/ompi\.[^/]+\.\d+/(?:jf\.\d+|pid\.\d+|vader_segment\.[^/]+)"
                     r"|/\S*/(?:ompi|prte|prted)\.\d+)(?:/|$)")


def session_paths(pid: int) -> set[str]:
    """Open MPI session paths that process pid has mapped or open. A PyTorch rank maps some
    2,000 regions, so only the lines of /proc/pid/maps that can match are parsed."""
    found = set()
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            data = f.read()
    except OSError:
        data = b""
    for line in data.splitlines():
        if b"ompi" in line or b"prte" in line:  # every SESSION path holds one of them
            m = SESSION.match(line.split(maxsplit=5)[-1].strip().decode(errors="replace"))
            if m:
                found.add(m.group(1))
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            m = SESSION.match(os.readlink(f"/proc/{pid}/fd/{fd}"))
            if m:
                found.add(m.group(1))
    except OSError:
        pass
    return found


class Procs:
    """This job's processes on this host, found through the marker in their environment."""

    def __init__(self, job_id: str, own: set[int] | frozenset = frozenset()) -> None:
        self.tag = f"{MARKER}={job_id}".encode()
        self.own = set(own)    # pids of ftrt-run's own helpers that carry the marker (the
                               # ompi-server of a joinable job): never taken for the job's
        self.ranks = {}       # world rank -> (pid, starttime): each rank's process, once seen
        self.world_size = None
        self.sessions = set()  # Open MPI session paths this job's processes used
        self.seen = set()      # pids of this job's processes that a scan found
        self.session_due = {}  # pid -> (next read of its session paths, interval): monotonic s
        self.foreign = set()   # pids listed by the last scan that are not this job's
        self.fds = {}          # world rank -> pidfd of its process (where Linux has pidfds)

    def scan(self, now: float | None = None) -> set[int]:
        """Every live process of this job on this host (pids); records ranks not seen before
        (the first process seen with OMPI_COMM_WORLD_RANK=r is rank r's) and the session paths
        of each process: of every one when `now` is None (the job's end), else of those due
        (read_sessions()). A process without the marker is not read again while the listings
        of /proc keep showing its pid (a process carries the marker from its fork on; its pid
        could only be another process's after the pid space wrapped between two scans);
        `now` None reads every process. ftrt-run's own helpers (self.own) are left out."""
        found = set()
        pids = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        self.foreign &= pids
        for pid in pids - self.own:
            if now is not None and pid in self.foreign:
                continue
            env = environ(pid)
            if self.tag not in env:
                self.foreign.add(pid)
                continue
            st = proc_stat(pid)
            if st is None or st[0] == "Z":
                continue
            found.add(pid)
            self.read_sessions(pid, now)
            rank = size = None
            for kv in env:
                if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                    rank = int(kv[21:] or -1)
                elif kv.startswith(b"OMPI_COMM_WORLD_SIZE="):
                    size = int(kv[21:] or 0)
            if rank is not None and rank not in self.ranks:
                self.set_rank(rank, pid, st[2])
                self.world_size = size or self.world_size
        self.seen |= found
        return found

    def set_rank(self, rank: int, pid: int, start: int) -> None:
        """Records pid (started at `start`, clock ticks) as world rank `rank`'s process, with a
        pidfd to watch it by where the kernel has them (Linux 5.3+, Python 3.9+)."""
        self.ranks[rank] = (pid, start)
        old = self.fds.pop(rank, None)
        if old is not None:
            os.close(old)
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            return
        st = proc_stat(pid)
        if st is not None and st[2] == start:  # the fd is that process's, not a successor's
            self.fds[rank] = fd
        else:
            os.close(fd)

    def read_sessions(self, pid: int, now: float | None) -> None:
        """Adds pid's session paths to self.sessions: always when `now` is None, else when due:
        at first sight, then SCAN_S later, the interval doubling after each read that found
        nothing new, up to SESSION_MAX_S (reading a rank's maps is what a scan spends most on;
        a rank's paths appear at its MPI_Init and when it first talks to a peer)."""
        due, every = self.session_due.get(pid, (0.0, SCAN_S / 2))
        if now is not None and now < due:
            return
        paths = session_paths(pid)
        every = min(every * 2, SESSION_MAX_S) if paths <= self.sessions else SCAN_S
        self.sessions |= paths
        if now is not None:
            self.session_due[pid] = (now + every, every)

    def adopt(self, rank: int, pid: int) -> None:
        """The status file names pid as world rank `rank`: that process is the rank's (it may
        be a child of the process Open MPI started) when it carries this job's marker."""
        if pid > 0 and self.ranks.get(rank, (None,))[0] != pid and self.tag in environ(pid):
            st = proc_stat(pid)
            if st is not None and st[0] != "Z":
                self.set_rank(rank, pid, st[2])

    def alive(self, rank: int) -> bool:
        """True while world rank `rank`'s process (pid and start time) lives."""
        pid, start = self.ranks[rank]
        st = proc_stat(pid)
        return st is not None and st[0] != "Z" and st[2] == start

    def live_ranks(self) -> list[int]:
        """The ranks whose process is alive: a pidfd turns readable when its process exits
        (one select() for all), the others are read from /proc/pid/stat."""
        gone = set()
        if self.fds:
            gone = set(select.select(list(self.fds.values()), [], [], 0)[0])
        return [r for r in self.ranks
                if (self.fds[r] not in gone if r in self.fds else self.alive(r))]


def child_pids() -> set[int]:
    """Pids of ftrt-run's children, from /proc/self/task/*/children (Linux 3.5+ with
    CONFIG_PROC_CHILDREN, as Debian's kernels); from a scan of every process's stat where
    that file is missing."""
    pids = set()
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.update(int(x) for x in f.read().split())
        return pids
    except OSError:
        pass
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None and st[1] == me:
                pids.add(int(name))
    return pids


def children(exclude: int | None) -> set[int]:
    """Live children of ftrt-run other than `exclude` (mpirun); reaps the dead ones (orphans
    re-parented to this child subreaper)."""
    live = set()
    for pid in child_pids() - {exclude}:
        st = proc_stat(pid)
        if st is None:
            continue
        if st[0] == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        else:
            live.add(pid)
    return live
