"""The end of an ftrt-run: its exit status from the job's outcome (mpirun's status, the status
file's final state, the exit statuses ranks recorded after ftrt_finalize()), the messages that
name the cause, and the --summary JSON."""
from __future__ import annotations

import json
import os
import re
import sys
import time

from .watch import Watch


def rank_exits(path: str) -> dict[int, int]:
    """{world rank: exit status} that libftrt recorded in the directory at path (FTRT_RUN_EXIT_DIR:
    a file rank.<world rank> holding "<status>\n" per rank process that exited non-zero after
    its ftrt_finalize())."""
    found = {}
    try:
        names = os.listdir(path)
    except OSError:
        return found
    for name in names:
        m = re.fullmatch(r"rank\.(\d+)", name)
        try:
            with open(os.path.join(path, name)) as f:
                status = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if m and 0 < status < 256:
            found[int(m.group(1))] = status
    return found


def exit_code(r: dict) -> int:
    """ftrt-run's exit status from the run's outcome (see ftrt-run --help), with its message."""
    own = r["mpirun_status"]
    if r["stop"]:
        return 128 + r["stop"][0]
    if own is not None and own != 0:
        return own if own > 0 else 128 - own
    if r["job"] == "finished" and r["rank_exits"]:
        rank = min(r["rank_exits"])
        code = r["rank_exits"][rank]
        others = len(r["rank_exits"]) - 1
        print(f"ftrt-run: the ftrt job finished, but world rank {rank}'s process exited with "
              f"status {code} after its ftrt_finalize()" +
              (f" ({others} other rank(s) non-zero too)" if others else "") +
              f"; exiting {code}", file=sys.stderr)
        return code
    if r["job"] == "finished":
        return 0
    if r["first_error"]:
        cause = f": {r['first_error']}"
    elif r["last_line"]:
        cause = f"; its last message: {r['last_line']}"
    else:
        cause = ""
    if r["job"]:
        print(f"ftrt-run: the ftrt job {r['job']}{cause}; exiting 1", file=sys.stderr)
    else:
        where = f" ({r['status_from']} {r['status']})" if r["status_from"] else ""
        print(f"ftrt-run: the ftrt job ended without a final state in its status file{where}"
              f"{cause}; exiting 1", file=sys.stderr)
    return 1


def report_end(r: dict, leftovers: set[int], ended: str | None) -> None:
    """One line on stderr when ftrt-run ended mpirun (`ended`: the last signal) or leftovers."""
    if leftovers or ended:
        print(f"ftrt-run: {'the job is over' if not r['stop'] else 'stopped'} (job state "
              f"{r['job'] or 'unknown'}); mpirun " + (f"ended with {ended}" if ended else
              f"exited {r['rc']}") + f", {len(leftovers)} leftover process(es) of this job "
              f"ended", file=sys.stderr)


def write_summary(path: str, r: dict, w: Watch, leftovers: set[int], ended: str | None,
                  code: int) -> None:
    """Writes the --summary JSON (see ftrt-run --help) to path."""
    summary = {"exit_status": code, "mpirun_status": r["mpirun_status"], "job": r["job"],
               "rank_exit_statuses": {str(k): v for k, v in sorted(r["rank_exits"].items())},
               "ended_mpirun": ended, "leftovers_killed": len(leftovers),
               "ranks_seen": sorted(w.procs.ranks), "mpirun_pid": w.mpirun.pid,
               "t_start": r["t_start"], "t_job_end": w.t_job_end,
               "t_last_rank_exit": w.t_last_exit, "t_mpirun_exit": r["t_mpirun_exit"],
               "t_exit": time.time()}
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
