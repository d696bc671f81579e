"""Starting mpirun, for a job (cli.py) or a joiner (join.py): its standard error filtered
(stderr_filter.py), the run directory's lock inherited so that the directory outlives a
SIGKILLed ftrt-run while mpirun runs, and ftrt-run's SIGINT and SIGTERM passed on to it."""
from __future__ import annotations

import signal
import subprocess

from .stderr_filter import StderrFilter


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
