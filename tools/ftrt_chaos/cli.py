"""ftrt-chaos: inject faults into an ftrt job and check that nothing was lost.

Usage:
  ftrt-chaos [options] -- mpirun --enable-recovery ... ./train ... [--report FILE ...]
  ftrt-chaos -h | --help

It sets FTRT_STATUS_FILE and FTRT_FAULT_LOG for the job, reads the status file to learn roles
and pids, injects faults from a plan or at random, writes the ground truth of every injection
(wall-clock time, kind, target) to the fault log, optionally relaunches the job when it exits
non-zero (a job-level restart from the last committed checkpoint, as a supervisor would), and
prints a verdict table: job finished, final parameters byte-identical to a reference, every
injected fault detected (or correctly not, for short pauses), reported MTTD/MTTR next to the
ground truth, nothing committed lost. Exit status: 0 when every check passed, 1 otherwise,
2 for bad usage (a one-line message naming the option or path).

Plan (JSON): {"faults": [{"kind": K, "at_step": N | "at_s": T, "target": "trainer:2"}, ...]}
  at_step: when some trainer has done N steps (status file); at_s: seconds after the job runs.
  An entry may carry "then": [more entries], injected right after it, each after its optional
  "delay_s" (e.g. corrupt, then kill the coordinator so that the relaunch has to restore)
  and its optional "when", a recovery stage the status file must show first (up to 30 s, else
  skipped): "failure-sent" (the current epoch's FAILURE went out, its PLAN not yet: with
  FTRT_TEST_PLAN_DELAY_MS the coordinator holds the PLAN), "plan-sent" (its PLAN went out, the
  job still recovering: FTRT_DEBUG_RECOVERY_DELAY_MS holds the survivors' RESUMEDs).
Kinds: kill-trainer, kill-spare, kill-two-trainers, hang-trainer (SIGSTOP), pause-trainer
  (SIGSTOP, then SIGCONT after --pause-ms: must NOT be declared failed), kill-during-ckpt,
  corrupt-shard (bit flip in the newest committed shard, once an older committed step exists
  to fall back to), truncate-shard, enospc (fills the
  checkpoint file system; needs --ckpt-tmpfs), kill-coordinator, hang-coordinator (SIGSTOP)
  (with a standby coordinator, a hot spare: it must take over in place, one launch, exit 0,
  MTTR <= 1 s; a frozen one is then resumed and must give up by itself within 5 s, writing
  nothing; without a standby every other rank must leave within --coord-exit-s; then the
  frozen coordinator is killed, as a supervisor would), kill-beyond-spares (SIGKILL of spares + 1 trainers at once), flip-bit
  (silent data corruption: one bit of a live trainer's parameter memory flipped through
  /proc/<pid>/mem while it is stopped for a moment; needs --addr-prefix, where the job's
  trainers publish "<pid> <params address> <bytes> <steps address> [<busy address>]", e.g.
  train_mlp --publish-addr; with a busy address (train_mlp --device sim: the parameters are
  in the simulated device's memory, which /proc/<pid>/mem reaches although it is PROT_NONE)
  the flip waits until the int32 there is 0, i.e. the trainer is not between reading its state
  and writing it back; the verdict wants it detected within FTRT_SDC_EVERY steps as
  silent_data_corruption, the rank fenced and replaced (3+ trainers) or every member rolled
  back (2), and the final parameters byte-identical).
Planned moves (drain.py; only when --kinds or the plan names them): drain-rank (tools/ftrt-ctl
  drain --rank of a trainer), sigterm-rank (SIGTERM to one trainer; the job runs with
  FTRT_SIGTERM=drain), drain-host (ftrt-ctl drain --host; a plan entry may name "host"; needs
  --hosts or --hosts-made). With a hot spare for each trainer the verdict wants each in the
  report's "drains", moved with no rework, in one epoch, not a failure; without, the drain
  refused and nothing changed.
A join (join.py; only when --kinds or the plan names it): join-spare, a new process joining the
  running job as a hot spare through `ftrt-run --join` (docs/join.md; Open MPI 4.1): every
  launch of such a plan runs under `ftrt-run --joinable`; the joiner's command is the job's
  mpirun command with -np 1 (on simulated hosts, on the host the entry's "host" names:
  "coordinator" (default), "host:NAME" or "host:<i>"); the injection waits up to --join-wait-s
  for the status file to list it as a hot spare, so its "then" entries strike a job that holds
  it. Verdict: joined; the report counts the launch's joins; with "promoted": true in the
  entry, the joiner promoted in a recovery of the same launch; the joiner's ftrt-run exits 0
  when the job finished and it was not lost (non-zero otherwise), leaving nothing running.
Random mode: --random --mtbf S --seed N [--kinds k1,k2] [--max-faults N].

Sharded state and partner replicas: --sharded K says that the job registers sharded regions
(train_mlp --sharded-momentum: the caller adds it) and sets FTRT_SHARD_REPLICA_EVERY=K for it
(0: replicas refreshed at each checkpoint). The partner holding logical rank r's replica is
r + s (mod n), s the smallest shift that puts every trainer's partner on another host (the
status file's hosts at the injection), else 1 (runtime/replica.c). For every trainer recovered
in place the verdict then checks where the state came from (report: state_from, replica_miss):
the newest usable state, with no more rework than that state gives.
  - its partner survived: "replica", rework <= K + 1 steps; or "checkpoint" when the committed
    checkpoint is newer than the replicas (older_than_checkpoint: a commit completed after the
    last refresh), rework <= K + 1 too; or "checkpoint" when the failure struck during a
    refresh (the steps done at the failure a multiple of K and replica_miss no_common_image
    or lost_image_not_held: an image in flight is not kept, by design);
  - its partner was lost in the same recovery: "checkpoint" (lost_image_not_held or
    older_than_checkpoint);
  - from the checkpoint, always resumed at a committed step no older than LATEST at the
    injection; kill-during-ckpt records whether the killed trainer's shard of the step in
    flight was in place at its death, and a recovery from that step without it fails.
With --erasure G as well: FTRT_SHARD_REDUNDANCY=erasure, FTRT_EC_GROUP=G (erasure groups
instead of partner replicas); a trainer whose group (logical rank l in group l mod
max(1, n / G)) lost at most 2 in the same recovery: "erasure", rework <= K + 1, or the
checkpoint when newer or struck during a refresh (erasure_fragments_missing, no_common_image);
3 or more: "checkpoint" (erasure_group_lost_more_than_parity). corrupt-replica is skipped.
Kinds for it:
  kill-partners    SIGKILL of a trainer (target) and, at once, of the trainer holding its
                   replica (needs 2 spares to recover in place). Verdict as above: checkpoint.
  corrupt-replica  the job runs with FTRT_TEST_REPLICA_CORRUPT=1 (set by ftrt-chaos for the
                   launches of a plan with this kind: every trainer flips a bit of the replica
                   it holds right after that replica passed its arrival check - a runtime test
                   knob, not an injection from outside), then SIGKILL of the target trainer:
                   the holder's CRC32C check refuses the image, "fails its CRC32C" logged,
                   state from the checkpoint (lost_image_not_held, or older_than_checkpoint
                   when a newer checkpoint was committed). Needs --sharded.

Several hosts (simulated: network namespaces, tests/hosts/ftrt-hosts): --hosts N --slots S
makes N hosts of S slots for the run and removes them at the end; --hosts-made uses the
arrangement the caller made (FTRT_HOSTS_PREFIX etc. as for ftrt-hosts; the caller holds it and
removes it; links this run cut are mended at the end). The command is then run under
tools/ftrt-run (added unless the command starts with it; --summary per launch) with the
arrangement's mpirun options inserted after `mpirun`; world ranks are mapped to hosts by the
status file ("host" per rank); a relaunch leaves out the hosts that were killed or cut, with
ceil(np / hosts left) slots each. Host kinds (target "host:NAME" or "host:<i>", "coordinator"
(its host), "standby" (the standby coordinator's host: that of the highest world rank among
the spares on another host than the coordinator's), "covered" (a host whose trainers the
spares on other hosts can replace), "uncovered" (one they cannot); default: any host with a
trainer but not the coordinator):
  kill-host       SIGKILL of every process of the host, its orted included; the ground truth
                  is logged per rank (pid, world rank). Verdict: each rank detected
                  (connection_lost, cause host_lost), true MTTD <= --kill-mttd-s; covered: the
                  host's trainers replaced by spares on other hosts in one epoch; uncovered: the
                  launch fails cleanly (FTRT_ENOSPARE or FTRT_EABORT, exit non-zero) and the
                  relaunch without the host resumes from the last committed step; the
                  coordinator's host, with a standby coordinator on another host: the standby
                  takes over in place (the takeover's incident, connection_lost, MTTD <=
                  --kill-mttd-s, MTTR <= 1 s) and the host's trainers (detected when they do
                  not come back to it: MTTD <= the heartbeat timeout + --partition-margin-s)
                  are replaced by spares on other hosts, in the same launch, exit 0; without a
                  standby: every other rank leaves within --coord-exit-s and the relaunch
                  without the host resumes.
  partition-host  the host's link cut (its veth down, both ends; logged per rank). Verdict as
                  kill-host but heartbeat_timeout within the heartbeat timeout +
                  --partition-margin-s; and the partitioned side gives up by itself (every rank
                  there exits within the heartbeat timeout + --partition-exit-s, before
                  ftrt-run ends anything) and writes nothing that counts: the files its
                  processes modified after the cut (fanotify: the writer's pid) are no
                  MANIFEST, LATEST, status, report or parameters file and no shard of a step
                  committed after the cut, and only the coordinator wrote the status file and
                  the report meanwhile.
  kill-trainer    target "remote": a trainer on another host than the coordinator's.

Slurm (--slurm): the job is launched as Slurm users launch it, through a real Slurm cluster
that ftrt-chaos makes for the run and stops at its end (Debian's Slurm 22.05 and munge,
tests/harness/ftrt_slurm.py: slurmctld and munged on ftrt-s4, a slurmd on each of ftrt-s1..3,
simulated hosts as above). The command is `sbatch SCRIPT ARGS...` (examples/train_mlp.sbatch,
which runs ftrt-run and mpirun in the allocation: docs/slurm.md), submitted with --wait, so that
a launch ends with the Slurm job and exits with its status; the job gets the cluster's
SLURM_CONF, Open MPI's settings for the hosts, FTRT (this tree) and FTRT_RUN_SUMMARY. The host
kinds strike the compute nodes, and set the node DOWN right after (as slurmctld does after
SlurmdTimeout); a relaunch excludes the lost nodes (--exclude, the same number of tasks on the
nodes left). Each launch's Slurm job id and its record in Slurm's completion log (sacct -c:
State, ExitCode) go into --json; "nothing left in the hosts" counts the job's processes only.
A host entry with "in_ckpt": true waits (up to 30 s after its trigger) for a checkpoint write in
flight (a step directory with files and no MANIFEST) and strikes then.
Every launch also gets the rows "exit within --exit-bound-s of the last rank's exit"
(ftrt-run's summary) and "nothing left in the hosts".

Python 3 standard library only. Runs as root where --ckpt-tmpfs mounts a tmpfs, and for the
hosts (namespaces; fanotify for the partition's write check). Exit 77 when the hosts cannot be
made here.
"""
import argparse
import os
import sys

from . import plan
from .chaos import Chaos
from .common import DRAIN_KINDS, HOST_KINDS, JOIN_KINDS, KINDS


class Usage(Exception):
    """Bad usage: its one-line message, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Usage(message)


def parser():
    """The options before `--` (see the usage above)."""
    ap = Parser(prog="ftrt-chaos", add_help=False)
    ap.add_argument("--plan")
    ap.add_argument("--random", action="store_true")
    ap.add_argument("--mtbf", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds")
    ap.add_argument("--max-faults", type=int, default=1)
    ap.add_argument("--workdir", default="ftrt-chaos-run")
    ap.add_argument("--status")
    ap.add_argument("--fault-log")
    ap.add_argument("--report", help="the job's JSON report path (exported as FTRT_REPORT)")
    ap.add_argument("--ckpt-dir")
    ap.add_argument("--ckpt-tmpfs", help="mount a tmpfs of this size (e.g. 64m) on --ckpt-dir")
    ap.add_argument("--relaunch", type=int, default=0)
    ap.add_argument("--reference")
    ap.add_argument("--params")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds per launch, injections included; past them the launch is "
                         "killed (exit 124)")
    ap.add_argument("--pause-ms", type=int, default=400)
    ap.add_argument("--enospc-hold-s", type=float, default=0.6)
    ap.add_argument("--coord-exit-s", type=float, default=5.0,
                    help="a coordinator kill must end the launch within this many seconds")
    ap.add_argument("--addr-prefix",
                    help="flip-bit: where trainers publish their addresses (<prefix>.w<rank>)")
    ap.add_argument("--flip-bits", default="16-22",
                    help="flip-bit: the bits of a float32 to choose from, LO-HI (0 = lowest)")
    ap.add_argument("--flip-min-abs", type=float, default=1e-3,
                    help="flip-bit: only weights at least this large (in magnitude)")
    ap.add_argument("--json")
    ap.add_argument("--join-wait-s", type=float, default=60.0,
                    help="join-spare: the longest a joiner may take to show as a hot spare")
    ap.add_argument("--sharded", type=int, metavar="K",
                    help="the job has sharded state (e.g. train_mlp --sharded-momentum): sets "
                         "FTRT_SHARD_REPLICA_EVERY=K (0: at each checkpoint) and checks where "
                         "each recovery took the state from (partner replica or checkpoint)")
    ap.add_argument("--erasure", type=int, metavar="G",
                    help="with --sharded: erasure groups instead of partner replicas "
                         "(FTRT_SHARD_REDUNDANCY=erasure, FTRT_EC_GROUP=G); a recovered "
                         "trainer's state is judged by the losses in its group")
    ap.add_argument("--hosts", type=int, help="make N simulated hosts for the run")
    ap.add_argument("--slots", type=int, default=2, help="slots per host (with --hosts)")
    ap.add_argument("--hosts-made", action="store_true",
                    help="run on the simulated hosts the caller made (tests/hosts/ftrt-hosts)")
    ap.add_argument("--slurm", action="store_true",
                    help="launch through a Slurm cluster made for the run (sbatch --wait)")
    ap.add_argument("--exit-bound-s", type=float, default=5.0,
                    help="hosts: ftrt-run must exit within this of the last rank's exit")
    ap.add_argument("--kill-mttd-s", type=float, default=0.5,
                    help="kill-host: bound on the true MTTD")
    ap.add_argument("--partition-margin-s", type=float, default=0.5,
                    help="partition-host: MTTD bound = heartbeat timeout + this")
    ap.add_argument("--partition-exit-s", type=float, default=3.0,
                    help="partition-host: the partitioned ranks leave within the heartbeat "
                         "timeout + this")
    return ap


def bad_dir(path):
    """Why a directory cannot be made at path (an existing ancestor, or path itself, is not a
    directory), or None."""
    d = os.path.abspath(path)
    while not os.path.exists(d):
        d = os.path.dirname(d)
    if os.path.isdir(d):
        return None
    return "is not a directory" if d == os.path.abspath(path) else f"{d} is not a directory"


def check_paths(a):
    """Raises Usage naming the option and the path that cannot be used."""
    for opt in ("workdir", "ckpt_dir"):
        why = getattr(a, opt) and bad_dir(getattr(a, opt))
        if why:
            raise Usage(f"--{opt.replace('_', '-')} {getattr(a, opt)}: {why}")
    for opt in ("status", "fault_log", "report", "params", "json", "addr_prefix"):
        path = getattr(a, opt)
        if path and os.path.isdir(path):
            raise Usage(f"--{opt.replace('_', '-')} {path}: is a directory")
        why = path and bad_dir(os.path.dirname(os.path.abspath(path)))
        if why:
            raise Usage(f"--{opt.replace('_', '-')} {path}: {why}")
    if a.reference and not os.path.isfile(a.reference):
        raise Usage(f"--reference {a.reference}: no such file")


def check_values(a):
    """Raises Usage naming the option whose value cannot be used."""
    if a.sharded is not None and a.sharded < 0:
        raise Usage("--sharded K needs K >= 0")
    if a.erasure is not None and (a.sharded is None or a.erasure < 3 or a.erasure > 32):
        raise Usage("--erasure G needs --sharded and 3 <= G <= 32")
    if a.ckpt_tmpfs and not a.ckpt_dir:
        raise Usage("--ckpt-tmpfs needs --ckpt-dir")
    if a.hosts is not None and (a.hosts_made or a.hosts < 1 or a.slots < 1):
        raise Usage("--hosts N (N >= 1) or --hosts-made, not both")
    if a.slurm and (a.hosts is not None or a.hosts_made):
        raise Usage("--slurm makes its own hosts: not with --hosts or --hosts-made")
    known = KINDS + HOST_KINDS + DRAIN_KINDS + JOIN_KINDS
    unknown = [k for k in (a.kinds or "").split(",") if a.kinds and k not in known]
    if unknown:
        raise Usage(f"--kinds: unknown fault kind(s) {unknown}; known: {', '.join(known)}")
    lo_hi = a.flip_bits.split("-")
    if len(lo_hi) != 2 or not all(x.isdigit() and int(x) < 32 for x in lo_hi) or \
            int(lo_hi[0]) > int(lo_hi[1]):
        raise Usage(f"--flip-bits: expected LO-HI (0 <= LO <= HI <= 31), got {a.flip_bits!r}")
    for opt in ("mtbf", "timeout", "join_wait_s"):
        if not getattr(a, opt) > 0:
            raise Usage(f"--{opt.replace('_', '-')}: expected a number > 0, "
                        f"got {getattr(a, opt)}")
    if a.max_faults < 0:
        raise Usage(f"--max-faults: expected a number >= 0, got {a.max_faults}")


def parse(argv):
    """(options, command) from the command line, paths made absolute; None for --help.
    Raises Usage."""
    head = argv[:argv.index("--")] if "--" in argv else argv
    if "-h" in head or "--help" in head:
        return None
    if "--" not in argv:
        raise Usage("no command: ftrt-chaos [options] -- mpirun ... (see ftrt-chaos --help)")
    i = argv.index("--")
    a = parser().parse_args(argv[:i])
    cmd = argv[i + 1:]
    if not cmd:
        raise Usage("no command after --")
    check_values(a)
    check_paths(a)
    for k in ("ckpt_dir", "addr_prefix", "report", "params", "reference", "status",
              "fault_log", "workdir"):
        if getattr(a, k):
            setattr(a, k, os.path.abspath(getattr(a, k)))
    return a, cmd


def main(argv):
    try:
        parsed = parse(argv)
        if parsed is None:
            print(__doc__)
            return 0
        a, cmd = parsed
        faults = plan.load(a.plan) if a.plan else []
        c = Chaos(a, cmd)
        if a.random and not a.plan:
            faults = plan.random_plan(a, c.rng)
    except (Usage, plan.PlanError) as e:
        print(f"ftrt-chaos: {e}", file=sys.stderr)
        return 2
    return c.run(faults)
