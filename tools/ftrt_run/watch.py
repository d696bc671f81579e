"""Watching an ftrt job until it is over: the coordinator's status file (parsed again only
when it changed) and the job's rank processes on this host, polled until every rank is
accounted for (see ftrt-run --help: "The job is over when ...")."""
from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

from .procs import SCAN_S, Procs, children

POLL_S = 0.05      # status file and known rank processes
SCAN_MAX_S = 1.0   # the /proc scan's interval doubles per scan that finds none, up to this
STATUS_MAX_S = 0.25  # the status file is parsed again when it changed, or after this
FAILED_GRACE_S = 1.0  # a failed job's ranks still alive then are stuck (see ftrt-run --help)
FINAL = ("finished", "failed")


def read_status(path: str) -> Any:
    """The status file at path, parsed (JSON), or None when it cannot be read or parsed."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class StatusReader:
    """The status file, parsed again when it was replaced or changed (inode, mtime, size) and
    at least every STATUS_MAX_S (should two writes look alike): the coordinator writes it at
    most 4 times a second while the job runs, ftrt-run looks 20 times."""

    def __init__(self, path: str) -> None:
        self.path, self.key, self.st, self.t = path, None, None, 0.0

    def read(self, now: float) -> Any:
        """The status file as last parsed, parsed again when due (monotonic s `now`)."""
        try:
            s = os.stat(self.path)
            key = (s.st_ino, s.st_mtime_ns, s.st_size)
        except OSError:
            key = None
        if key is None or key != self.key or now - self.t >= STATUS_MAX_S:
            self.st, self.t = read_status(self.path), now
            self.key = key if self.st is not None else None
        return self.st


class Watch:
    """The job's end as seen from this host (see ftrt-run --help): the status file, the rank
    processes, and when the job is over."""

    def __init__(self, mpirun: subprocess.Popen, status: str, opts: dict, stop: list[int],
                 job_id: str, own: set[int] | frozenset = frozenset()) -> None:
        """mpirun's process; the status file's path; the options; the signals ftrt-run got
        (forward_signals()); the marker's value; pids of ftrt-run's own helpers that carry the
        marker (not the job's: Procs.own)."""
        self.mpirun, self.status, self.opts, self.stop = mpirun, status, opts, stop
        self.status_file = StatusReader(status)
        self.procs = Procs(job_id, own)
        self.job = self.t_job_end = self.t_last_exit = self.t_over = self.t_stop = None
        self.next_scan, self.scan_every = 0.0, SCAN_S

    def run(self) -> int | None:
        """Polls until mpirun exits (its status) or the job is over (None)."""
        while True:
            rc = self.mpirun.poll()
            if rc is not None or self.poll(time.monotonic()):
                return rc
            time.sleep(POLL_S)

    def poll(self, now: float) -> bool:
        """One look; True when ftrt-run stops waiting for mpirun."""
        st = self.status_file.read(now)
        ranks = st.get("ranks") if isinstance(st, dict) else None
        self.look(now, st, ranks or [])
        live = self.procs.live_ranks()
        if live:
            self.t_last_exit = None
        elif self.procs.ranks and self.t_last_exit is None:
            self.t_last_exit = time.time()
        # the coordinator: world rank 0, or the standby that took over (the status file names
        # it); a coordinator lost to a takeover is not the job's end, so this is looked at
        # again on every poll
        coord = next((r["world_rank"] for r in ranks or [] if r.get("role") == "coordinator"), 0)
        coord_gone = coord in self.procs.ranks and coord not in live
        if self.job in FINAL or coord_gone:
            self.t_job_end = self.t_job_end or time.time()
        else:
            self.t_job_end = None
        if self.stop:
            self.t_stop = self.t_stop or now
            return now - self.t_stop > self.opts["term_grace"]
        if self.t_over is None and self.over(ranks, live):
            self.t_over = now
        return self.t_over is not None and now - self.t_over >= self.opts["linger"]

    def look(self, now: float, st: Any, ranks: list[dict]) -> None:
        """Takes in the status file (`st`, its `ranks`) and, when due, a scan for the job's
        processes; records a final state."""
        for r in ranks:
            self.procs.adopt(r["world_rank"], r["pid"])
        if now >= self.next_scan:
            known = len(self.procs.seen)
            self.procs.scan(now)
            children(self.mpirun.pid)
            self.scan_every = SCAN_S if len(self.procs.seen) > known else \
                min(2 * self.scan_every, SCAN_MAX_S)
            self.next_scan = now + self.scan_every
        if st and st.get("job") in FINAL:
            self.job = st["job"]

    def over(self, ranks: list[dict] | None, live: list[int]) -> bool:
        """Every rank accounted for (see ftrt-run --help)."""
        # ranks this host cannot see: never seen here though the world has them
        size = self.procs.world_size or (len(ranks) if ranks else None)
        unseen = [w for w in range(size) if w not in self.procs.ranks] if size else \
            [r["world_rank"] for r in ranks or [] if r["world_rank"] not in self.procs.ranks]
        everyone_gone = bool(size) and not unseen and not live
        grace = self.opts["exit_grace"]
        if self.job == "failed":
            grace = min(grace, FAILED_GRACE_S)
        graced = self.t_job_end is not None and time.time() - self.t_job_end >= grace
        return (self.t_job_end is not None and not live and not unseen) or everyone_gone or graced
