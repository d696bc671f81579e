"""ftrt-run's run directories, $TMPDIR/ftrt-run.<uid>/<pid>-<random>: one per run, holding its
temporary files and a lock file flock()ed by ftrt-run and mpirun while they live; swept at
every ftrt-run's start once no process holds the lock."""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import tempfile
import time

from .options import Usage


# A SIGKILLed ftrt-run cannot remove its temporary files, so each run keeps them in a directory
# of its own, $TMPDIR/ftrt-run.<uid>/<pid>-<random>, holding a file `lock` that ftrt-run and
# mpirun hold an flock() on while they live (the kernel drops it when the last of them exits,
# however it ends). Every ftrt-run sweeps, at its start, the run directories whose lock no
# process holds. A lock, not the owner's pid, says whether the owner lives: it survives pid
# reuse, pid namespaces (containers) and a $TMPDIR shared between nodes (Linux's NFS client
# takes an flock() on the server unless mounted with local_lock=flock or all).
RUN_DIR = re.compile(r"\d+-\w+")   # <pid of ftrt-run>-<tempfile's random suffix>
UNLOCKED_AGE_S = 60.0  # a run directory without a lock file this old lost its ftrt-run before
                       # it took the lock (between mkdir and rename: microseconds)


def runs_parent() -> str:
    """$TMPDIR/ftrt-run.<uid> (tempfile's temporary directory): where this user's run
    directories are."""
    return os.path.join(tempfile.gettempdir(), f"ftrt-run.{os.getuid()}")


def make_runs_parent() -> str:
    """runs_parent(), created (mode 0700) unless it exists; raises Usage when it cannot be, or
    when it is not a directory of this user's that only this user can write."""
    parent = runs_parent()
    try:
        os.mkdir(parent, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise Usage(f"cannot create ftrt-run's directory {parent}: {e.strerror} (set TMPDIR)")
    st = os.lstat(parent)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise Usage(f"{parent} is not a directory of this user's that only this user can "
                    f"write: remove it, or set TMPDIR")
    return parent


def take_lock(path: str) -> int | None:
    """A descriptor holding the flock() of the lock file of the run directory at path (the
    caller closes it, which drops the lock), or None when another process holds it (or the
    lock cannot be taken). Raises OSError: FileNotFoundError when there is no lock file."""
    fd = os.open(os.path.join(path, "lock"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None  # held: a live run's
    return fd


def alive(path: str) -> bool:
    """True while a process holds the lock of the run directory at path: its ftrt-run or its
    mpirun lives. False when it has no lock file (gone, or removed by its ftrt-run)."""
    try:
        fd = take_lock(path)
    except OSError:
        return False
    if fd is None:
        return True
    os.close(fd)
    return False


def remove_if_unowned(path: str, now: float) -> bool:
    """Removes the run directory at path when no process holds its lock (its ftrt-run and
    mpirun are gone), or when it has no lock file and is older than UNLOCKED_AGE_S. True when
    it was removed. Safe against another ftrt-run sweeping at the same time."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        fd = take_lock(path)
    except FileNotFoundError:
        try:
            if now - os.lstat(path).st_mtime < UNLOCKED_AGE_S:
                return False  # its ftrt-run may be about to take the lock
        except OSError:
            return False
        shutil.rmtree(path, ignore_errors=True)
        return True
    except OSError:
        return False
    if fd is None:
        return False  # held: a live run's
    try:
        shutil.rmtree(path, ignore_errors=True)
        return True
    finally:
        os.close(fd)


def sweep(parent: str, pid: int | None = None) -> list[str]:
    """Removes the run directories under parent that no live process owns (remove_if_unowned();
    only those of ftrt-run process `pid` when given); returns their names."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    now = time.time()
    return [n for n in names if RUN_DIR.fullmatch(n) and (pid is None or n.startswith(
        f"{pid}-")) and remove_if_unowned(os.path.join(parent, n), now)]


class RunDir:
    """This run's directory (see the module's docstring): `lock`, the flock()ed lock file whose
    descriptor (self.lock) mpirun inherits; `status.json`, the status file when no --status or
    FTRT_STATUS_FILE gives one; `exits/`, the job's FTRT_RUN_EXIT_DIR; for a joinable job,
    `ompi-server.uri` and `join.json` (joinable.py). Creating one sweeps the directories of
    runs that are gone. Raises Usage (make_runs_parent())."""

    def __init__(self) -> None:
        parent = make_runs_parent()
        sweep(parent)
        self.path = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=parent)
        new = os.path.join(self.path, "lock.new")
        self.lock = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.lock, fcntl.LOCK_EX)  # a file no one else has opened: at once
        os.write(self.lock, f"{os.getpid()}\n".encode())
        os.rename(new, os.path.join(self.path, "lock"))  # a sweep sees it locked, or not at all
        self.status = os.path.join(self.path, "status.json")
        self.exits = os.path.join(self.path, "exits")
        os.mkdir(self.exits, 0o700)

    def remove(self) -> None:
        """Removes the directory (ftrt-run's end); the lock goes with ftrt-run's descriptor."""
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self.lock)
