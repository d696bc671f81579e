"""ftrt-chaos's shared pieces: fault kinds, paths of the tree's tools, small helpers on
processes, JSON files and checkpoint directories."""
import json
import os
import time

KINDS = ["kill-trainer", "kill-spare", "kill-two-trainers", "hang-trainer", "pause-trainer",
         "kill-during-ckpt", "corrupt-shard", "truncate-shard", "enospc", "kill-coordinator",
         "hang-coordinator", "kill-beyond-spares", "flip-bit", "kill-partners", "corrupt-replica"]
SHARDED_KINDS = ["kill-partners", "corrupt-replica"]  # make sense with --sharded
# kinds whose lost trainers are judged by the partner-replica rows under --sharded
TRAINER_LOSS = ["kill-trainer", "hang-trainer", "kill-during-ckpt", "kill-two-trainers",
                "kill-partners", "corrupt-replica"]
HOST_KINDS = ["kill-host", "partition-host"]  # need --hosts or --hosts-made
# planned moves (drain.py), only when --kinds or a plan names them: drain-host needs --hosts or
# --hosts-made; sigterm-rank runs the job with FTRT_SIGTERM=drain
DRAIN_KINDS = ["drain-rank", "sigterm-rank", "drain-host"]
# a new process joining the running job as a hot spare (join.py), only when --kinds or a plan
# names it: the launches then run under ftrt-run --joinable (Open MPI 4.1)
JOIN_KINDS = ["join-spare"]


REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FTRT_RUN = os.path.join(REPO, "tools", "ftrt-run")
FTRT_HOSTS = os.path.join(REPO, "tests", "hosts", "ftrt-hosts")


def now():
    return time.time()


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def committed_steps(ckpt):
    """Committed steps (step dirs with a MANIFEST), newest first."""
    out = []
    try:
        names = os.listdir(ckpt)
    except OSError:
        return out
    for n in names:
        if n.startswith("step-") and n[5:].isdigit() and \
                os.path.exists(os.path.join(ckpt, n, "MANIFEST")):
            out.append(int(n[5:]))
    return sorted(out, reverse=True)


def latest_step(ckpt):
    try:
        with open(os.path.join(ckpt, "LATEST")) as f:
            s = f.read().strip()
        return int(s[5:]) if s.startswith("step-") else None
    except (OSError, ValueError):
        return None


def gone(pid):
    """True when process pid has exited (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def fill(path):
    """Writes zeros to path, 1 MiB at a time, until its file system is full."""
    chunk = b"\0" * (1 << 20)
    with open(path, "wb") as fh:
        try:
            while fh.write(chunk):
                fh.flush()
        except OSError:
            pass
