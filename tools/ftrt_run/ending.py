"""Ending the job once it is over: mpirun (SIGTERM to it and the daemons this host sees, a
second and, for Open MPI 5, a third SIGTERM, SIGKILL last), then the sweep of whatever the job
left on this host (processes with its marker, orphans re-parented to ftrt-run) and of the Open
MPI session directories and shared-memory files those processes used."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

from .procs import Procs, children, proc_stat


def end_mpirun(mpirun: subprocess.Popen, procs: Procs, term_grace: float,
               major: int | None = None) -> tuple[int | None, str | None]:
    """The job is over (or ftrt-run was told to stop) and mpirun is still there: SIGTERM to
    mpirun makes it order its daemons to exit; the daemons this host can see get it too
    (mpirun waits for them otherwise, about 2 s). A second SIGTERM makes Open MPI 4.1's give up
    waiting for daemons it cannot reach ("forcibly terminate"): it removes its session
    directory and exits. Open MPI 5's (PRRTE, `major` >= 5) does that at the third, which
    follows 0.2 s later (prte.c: abort, then a message, then "surekill"). SIGKILL is the last
    resort. Returns (its status, the last signal sent or None)."""
    t_end, ended = time.monotonic(), None
    second = min(1.0, term_grace / 2)
    plan = [(0.0, signal.SIGTERM, True), (second, signal.SIGTERM, False),
            (term_grace, signal.SIGKILL, False)]
    if major is not None and major >= 5:
        plan.insert(2, (min(second + 0.2, term_grace), signal.SIGTERM, False))
    terms = 0
    for at, sig, daemons in plan:
        try:
            mpirun.wait(max(0.0, t_end + at - time.monotonic()))
            break
        except subprocess.TimeoutExpired:
            pass
        terms += sig == signal.SIGTERM
        ended = sig.name if sig != signal.SIGTERM or terms == 1 else f"SIGTERM x{terms}"
        try:
            mpirun.send_signal(sig)
        except OSError:
            pass
        if daemons:
            for pid in procs.scan() - {mpirun.pid} - {p for p, _ in procs.ranks.values()}:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
    else:
        mpirun.wait()
    return mpirun.poll(), ended


def end_leftovers(procs: Procs) -> set[int]:
    """Ends this job's leftovers on this host (processes with the marker, re-parented
    orphans: SIGTERM, 0.5 s later SIGKILL) and removes the Open MPI session paths they left.
    ftrt-run's own helpers (procs.own: a joinable job's ompi-server) are left to their owner,
    which stops them next. Returns the leftovers' pids."""
    leftovers = set()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = (procs.scan() | children(None)) - {os.getpid()} - procs.own
        if not pids:
            break
        leftovers |= pids
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            children(None)
            if all((s := proc_stat(p)) is None or s[0] == "Z" for p in pids):
                break
            time.sleep(0.02)
    children(None)
    for path in procs.sessions:  # what the job's processes did not remove themselves
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            try:
                os.unlink(path)
            except OSError:
                pass
    return leftovers
