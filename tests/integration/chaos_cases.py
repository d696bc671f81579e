#!/usr/bin/env python3
"""ctest cases: every fault kind of tools/ftrt-chaos against examples/train_mlp under mpirun.

Usage: chaos_cases.py [--device sim|cuda] --bin BUILD/examples/train_mlp --work DIR <case>
       chaos_cases.py [--device cuda] --list   (the cases of CASES for CMake: one ctest
                      chaos.<case> each; with --device cuda those of CUDA_CASES, run with
                      --bin train_mlp_gpu: --device sim becomes cuda, skipped (77) where
                      `train_mlp_gpu --device cuda --check-device` finds no usable GPU)
Each case writes a plan, runs ftrt-chaos (which injects the faults, relaunches when the job
fails and prints its verdict) and passes when the verdict passes; where the case promises more
(a failure mid-recovery aborts promptly, ...) it checks that too. A fault-free reference run of
the same configuration is made once and cached, so "byte-identical" is always checked.
The host cases (kill-host, partition-host) run on simulated hosts that ftrt-chaos makes
(--hosts 3 --slots 2; root and network namespaces: skipped where they cannot be made).
Exit 0 = pass, 1 = fail, 77 = skipped. Python 3 standard library only (the ledger case:
prometheus_client). Command lines and the reference job: tests/harness/ftrt_harness.py.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import ftrt_harness as h  # noqa: E402
from ftrt_harness import Fail  # noqa: E402

BASE = ["--steps", "200", "--batch", "32", "--seed", "7", "--step-sleep-ms", "15",
        "--ckpt-every", "25"]

# train_mlp args of the sharded cases: momentum registered SHARDED, logical rank 0 holding 4 s
# at step 62 (see the cases)
SHARDED = ["--sharded-momentum", "--hold-at-step", "62", "--hold-ms", "4000"]

# case: (np, spares, extra train args, plan, chaos options, extra env)
CASES = {
    "kill-trainer": (6, 1, [], [{"kind": "kill-trainer", "at_step": 60, "target": "trainer:2"}],
                     [], {}),
    "kill-spare": (6, 1, [], [{"kind": "kill-spare", "at_step": 40},
                              {"kind": "kill-trainer", "at_step": 90, "target": "trainer:1"}],
                   ["--relaunch", "1"], {}),
    "kill-two-trainers": (7, 2, [], [{"kind": "kill-two-trainers", "at_step": 60}], [], {}),
    "hang-trainer": (6, 1, [], [{"kind": "hang-trainer", "at_step": 60, "target": "trainer:3"}],
                     [], {}),
    "pause-trainer": (6, 1, [], [{"kind": "pause-trainer", "at_step": 60, "target": "trainer:0"}],
                      ["--pause-ms", "400"], {"FTRT_HEARTBEAT_TIMEOUT_MS": "1500"}),
    "kill-during-ckpt": (6, 1, ["--hidden", "8192"],
                         [{"kind": "kill-during-ckpt", "at_step": 60}], [], {}),
    "corrupt-shard": (6, 1, [], [{"kind": "corrupt-shard", "at_step": 110,
                                  "then": [{"kind": "kill-coordinator"}]}],
                      ["--relaunch", "1"], {}),
    "truncate-shard": (6, 1, [], [{"kind": "truncate-shard", "at_step": 110,
                                   "then": [{"kind": "kill-coordinator"}]}],
                       ["--relaunch", "1"], {}),
    "enospc": (6, 1, [], [{"kind": "enospc", "at_step": 60}],
               ["--ckpt-tmpfs", "2m", "--enospc-hold-s", "0.8"], {}),
    # The coordinator SIGKILLed: the standby coordinator (a hot spare) takes over in place, the
    # job trains on (no relaunch), byte-identical; the takeover in the report with its MTTD
    # and MTTR (docs/detection-and-recovery.md "Standby coordinator").
    "kill-coordinator": (7, 2, [], [{"kind": "kill-coordinator", "at_step": 80}], [], {}),
    # The coordinator SIGSTOPped: detected by silence, the same takeover; the frozen one,
    # resumed (SIGCONT) after it, finds the later term and gives up without writing.
    "hang-coordinator": (7, 2, [], [{"kind": "hang-coordinator", "at_step": 80}], [], {}),
    # The standby (the only hot spare) SIGKILLed, then the coordinator: no standby left, every
    # rank leaves and the relaunch resumes from the last committed checkpoint (the old path).
    "kill-coordinator-no-standby": (6, 1, [], [{"kind": "kill-spare", "at_step": 40},
                                               {"kind": "kill-coordinator", "at_step": 80}],
                                    ["--relaunch", "1"], {}),
    # FTRT_STANDBY=0: no standby although 2 spares are there: the coordinator SIGKILLed, every
    # rank leaves and the relaunch resumes from the last committed checkpoint (the old path).
    "kill-coordinator-standby-off": (7, 2, [], [{"kind": "kill-coordinator", "at_step": 80}],
                                     ["--relaunch", "1"], {"FTRT_STANDBY": "0"}),
    # The coordinator SIGKILLed with a recovery in flight: trainer logical rank 2 SIGKILLed,
    # then the coordinator once the status file shows the epoch's FAILURE out and its PLAN not
    # (the coordinator holds the PLAN 3 s after the FAILURE, FTRT_TEST_PLAN_DELAY_MS). The
    # standby (world rank 6), which acknowledged the epoch before the FAILURE went out, takes
    # over in PH_COLLECT: the survivors' REPORTs come again, it sends the PLAN, the other spare
    # (world rank 5) replaces the trainer; one launch, exit 0, byte-identical (MID_RECOVERY).
    # No host agent was lost: the survivors coming back to the standby are no suspects of a
    # host's loss, and the PLAN does not wait the orphan grace for them (made 10 s here,
    # FTRT_TEST_ORPHAN_GRACE_MS, which the recovery's reach phase would then exceed).
    "kill-coordinator-after-failure": (7, 2, [], [{"kind": "kill-trainer", "at_step": 80,
                                                   "target": "trainer:2",
                                                   "then": [{"kind": "kill-coordinator",
                                                             "when": "failure-sent"}]}],
                                       [], {"FTRT_TEST_PLAN_DELAY_MS": "3000",
                                            "FTRT_TEST_ORPHAN_GRACE_MS": "10000"}),
    # The same with the coordinator SIGKILLed once its PLAN went out, before every RESUMED (the
    # survivors wait 3 s after the PLAN, FTRT_DEBUG_RECOVERY_DELAY_MS): the standby takes over
    # in PH_RESUMING with the PLAN of its SYNC, the RESUMEDs come to it.
    "kill-coordinator-after-plan": (7, 2, [], [{"kind": "kill-trainer", "at_step": 80,
                                                "target": "trainer:2",
                                                "then": [{"kind": "kill-coordinator",
                                                          "when": "plan-sent"}]}],
                                    [], {"FTRT_DEBUG_RECOVERY_DELAY_MS": "3000"}),
    "kill-beyond-spares": (6, 1, [], [{"kind": "kill-beyond-spares", "at_step": 80}],
                           ["--relaunch", "1"], {}),
    # The same under each no-spare policy that goes on in place (docs/detection-and-recovery.md
    # "No spare left"): two trainers lost at once with one spare, one replaced and one shrunk
    # (the bytes differ from the reference: data skipped) or folded (byte-identical with
    # --ordered, in the reference too), in one launch.
    "kill-beyond-spares-shrink": (6, 1, [], [{"kind": "kill-beyond-spares", "at_step": 80}],
                                  [], {"FTRT_NO_SPARE": "shrink"}),
    "kill-beyond-spares-fold": (6, 1, ["--ordered"],
                                [{"kind": "kill-beyond-spares", "at_step": 80}], [],
                                {"FTRT_NO_SPARE": "fold"}),
    # Planned moves (docs/detection-and-recovery.md "Drain"): tools/ftrt-ctl drain of trainer
    # logical rank 2, its rank to the spare at the drain's step boundary, no rework, no failure;
    # then (drain-beyond-spares) a second drain with no spare left is refused and the job
    # finishes in the same launch; sigterm-rank: SIGTERM to one trainer under
    # FTRT_SIGTERM=drain; drain-host: every rank of ftrt-h2 (2 trainers) to the 2 spares of
    # ftrt-h3 in one epoch. Each byte-identical.
    "drain-rank": (6, 1, [], [{"kind": "drain-rank", "at_step": 60, "target": "trainer:2"}],
                   [], {}),
    "drain-beyond-spares": (6, 1, [], [{"kind": "drain-rank", "at_step": 50,
                                        "target": "trainer:2"},
                                       {"kind": "drain-rank", "at_step": 100,
                                        "target": "trainer:0"}], [], {}),
    "sigterm-rank": (6, 1, [], [{"kind": "sigterm-rank", "at_step": 60, "target": "trainer:1"}],
                     [], {}),
    "drain-host": (6, 2, [], [{"kind": "drain-host", "at_step": 60, "host": "ftrt-h2"}],
                   ["--hosts", "3", "--slots", "2"], {}),
    # On the simulated hosts, the drained trainer (logical rank 1, world rank 2) is the process
    # of ftrt-h2's host agent: world rank 3 of that host stays and goes on through a new one.
    "drain-agent": (6, 2, [], [{"kind": "drain-rank", "at_step": 60, "target": "trainer:1"}],
                    ["--hosts", "3", "--slots", "2"], {}),
    # Joins (docs/join.md; Open MPI 4.1 only, skipped on another): the job under ftrt-run
    # --joinable with 1 spare (the standby coordinator), a new process joins (ftrt-run --join)
    # as a hot spare, then two trainers are SIGKILLed at once: the joiner and the spare take
    # their logical ranks in one epoch (the joiner must be promoted), byte-identical, the
    # joiner's ftrt-run exits 0.
    "join-spare": (6, 1, [], [{"kind": "join-spare", "at_step": 60, "promoted": True,
                               "then": [{"kind": "kill-two-trainers"}]}], [], {}),
    # On 3 simulated hosts a join is refused in one line, the job undisturbed (Open MPI 4.1
    # crashes a daemon that reads the job data of another mpirun spanning several nodes:
    # docs/join.md "Limits"): by the coordinator for a joiner beside the hosts' mpirun, and
    # by the joiner itself on the coordinator's host, where it runs under an orted.
    "join-refused-hosts": (6, 1, [], [{"kind": "join-spare", "at_step": 60, "host": "head",
                                       "refused": "the job runs on 3 hosts",
                                       "then": [{"kind": "join-spare", "host": "coordinator",
                                                 "refused": "this process runs under an Open "
                                                            "MPI daemon",
                                                 "refusal_counted": False}]}],
                           ["--hosts", "3", "--slots", "2"], {}),
    # A second failure while the first recovery's plan is being applied: the job must end
    # promptly and cleanly (spares left or not), and the relaunch must finish the job.
    # Two failures (a crash, then a hang) with sharded state, so that each recovery reloads the
    # last committed checkpoint and redoes steps: the goodput ledger is checked against ground
    # truth observed outside the runtime (status file, the example's step log).
    # Logical rank 0 holds 0.5 s at steps 62 and 137 (--hold-at-step), so that each fault, seen
    # at step >= 60 / 135, lands between checkpoints (every 25) and steps are really redone.
    "ledger": (7, 2, ["--sharded-momentum", "--hold-at-step", "62", "--hold-at-step", "137",
                      "--hold-ms", "500"],
               [{"kind": "kill-trainer", "at_step": 60, "target": "trainer:1"},
                {"kind": "hang-trainer", "at_step": 135, "target": "trainer:3"}], [], {}),
    # The same with the coordinator holding whole timelines for world ranks 1..2 and the spares
    # only, each up to 60 intervals (docs/goodput-ledger.md "Timelines at scale"): the killed
    # trainer (world rank 2) held, the survivor world rank 1 cut short, the hung one (world
    # rank 4) left out; the
    # ledger must match the ground truth as in "ledger", every left-out rank's rank-seconds
    # cover the job, and the ranks past their share send only their ends (a malformed LEDGER
    # would fail the job).
    "ledger-sampled": (7, 2, ["--sharded-momentum", "--hold-at-step", "62", "--hold-at-step",
                              "137", "--hold-ms", "500"],
                       [{"kind": "kill-trainer", "at_step": 60, "target": "trainer:1"},
                        {"kind": "hang-trainer", "at_step": 135, "target": "trainer:3"}], [],
                       {"FTRT_TIMELINE_RANKS": "2", "FTRT_TIMELINE_MAX": "60"}),
    # Silent data corruption: a bit flipped in trainer 2's parameters (through /proc/<pid>/mem,
    # outside ftrt). Fingerprints every 4 steps, checkpoints every 2 (4 kept): the majority of 4
    # names the rank, a spare replaces it, the checkpoints taken since the last agreement are
    # un-committed and every member reloads the newest one before it, so the final parameters
    # are those of a fault-free run.
    "flip-bit": (6, 1, ["--ckpt-every", "2"],
                 [{"kind": "flip-bit", "at_step": 60, "target": "trainer:2"}], [],
                 {"FTRT_SDC_EVERY": "4", "FTRT_CKPT_KEEP": "4"}),
    # The same with two trainers and no spare: no majority, so no rank is fenced and both roll
    # back to the verified checkpoint (compared with a fault-free run of two trainers).
    # FTRT_COORD_ADDR: one address to connect to. With every address of a multi-homed host,
    # each rank opens one connection per address at once and the coordinator of a 3-process
    # world has only 3 pending-connection slots: 1 start in 16 lost a rank's winning
    # connection (ftrt_init: FTRT_ECOORD), a start-up problem of small worlds, not of this case.
    "flip-bit-2": (3, 0, ["--ckpt-every", "10"],
                   [{"kind": "flip-bit", "at_step": 60, "target": "trainer:1"}], [],
                   {"FTRT_SDC_EVERY": "2", "FTRT_COORD_ADDR": "127.0.0.1"}),
    # The same as flip-bit with the parameters and momentum in the simulated device's memory
    # (train_mlp --device sim, FTRT_TEST_SIM_DEVICE=1: a test arrangement, no GPU): the bit is
    # flipped in the device arena (PROT_NONE, which /proc/<pid>/mem still writes), the
    # fingerprints are CRC32Cs taken through the device backend; detected, the rank fenced and
    # replaced, byte-identical.
    "flip-bit-device": (6, 1, ["--ckpt-every", "2", "--device", "sim"],
                        [{"kind": "flip-bit", "at_step": 60, "target": "trainer:2"}], [],
                        {"FTRT_SDC_EVERY": "4", "FTRT_CKPT_KEEP": "4",
                         "FTRT_TEST_SIM_DEVICE": "1"}),
    # A trainer SIGKILLed with parameters and momentum in device memory (train_mlp --device
    # sim here; with --device cuda, chaos_cuda.kill-trainer-device, train_mlp_gpu on a GPU: 4
    # trainers and the spare time-sharing it): the spare gets the device regions from the
    # survivors through the device backend, byte-identical.
    "kill-trainer-device": (6, 1, ["--device", "sim"],
                            [{"kind": "kill-trainer", "at_step": 60, "target": "trainer:2"}], [],
                            {"FTRT_TEST_SIM_DEVICE": "1"}),
    "fail-during-recovery": (7, 2, [], [{"kind": "kill-trainer", "at_step": 60,
                                         "target": "trainer:1",
                                         "then": [{"kind": "kill-trainer", "delay_s": 0.4,
                                                   "target": "trainer:3"}]}],
                             ["--relaunch", "1"], {"FTRT_DEBUG_RECOVERY_DELAY_MS": "1500"}),
    # Sharded state with partner replicas (train_mlp --sharded-momentum, ftrt-chaos --sharded 5:
    # FTRT_SHARD_REPLICA_EVERY=5, checkpoints every 25). Logical rank 0 holds 4 s at step 62
    # (--hold-at-step), so that the fault, injected once a trainer has done 62 steps, lands
    # while every trainer has done 62 (the last replica: step 60, the last checkpoint: step 50)
    # and none can go on: the outcome is known, not hoped for.
    # A trainer SIGKILLed: its shard from its partner's memory, resume at step 60, rework 2.
    "sharded-kill-trainer": (6, 1, SHARDED, [{"kind": "kill-trainer", "at_step": 62,
                                              "target": "trainer:2"}], ["--sharded", "5"], {}),
    # A trainer SIGSTOPped (heartbeat timeout): the same.
    "sharded-hang-trainer": (6, 1, SHARDED, [{"kind": "hang-trainer", "at_step": 62,
                                              "target": "trainer:3"}], ["--sharded", "5"], {}),
    # Logical rank 1 and the trainer holding its replica (logical rank 2 on one host) SIGKILLed
    # at once: nobody holds rank 1's shard, so every member reloads checkpoint step 50.
    "kill-partners": (7, 2, SHARDED, [{"kind": "kill-partners", "at_step": 62,
                                       "target": "trainer:1"}], ["--sharded", "5"], {}),
    # Every held replica corrupted right after its arrival check (FTRT_TEST_REPLICA_CORRUPT=1),
    # trainer 2 SIGKILLed: its holder's CRC32C check refuses the image, checkpoint step 50.
    "corrupt-replica": (6, 1, SHARDED, [{"kind": "corrupt-replica", "at_step": 62,
                                         "target": "trainer:2"}], ["--sharded", "5"], {}),
    # Host faults on 3 simulated hosts x 2 slots (ftrt-chaos --hosts: network namespaces,
    # tests/hosts; skipped, 77, where they cannot be made): 1 coordinator + 3 trainers + 2
    # spares, world ranks 0-1 on ftrt-h1, 2-3 (trainers) on ftrt-h2, 4-5 (spares) on ftrt-h3.
    # Every process of ftrt-h2 killed, its orted included: both trainers detected by connection
    # loss, cause host_lost, replaced by the spares of ftrt-h3 in one epoch, byte-identical.
    "kill-host": (6, 2, [], [{"kind": "kill-host", "at_step": 60, "target": "covered"}],
                  ["--hosts", "3", "--slots", "2"], {"FTRT_HEARTBEAT_TIMEOUT_MS": "1000"}),
    # Every process of ftrt-h1 killed: the coordinator (world rank 0) and trainer logical rank
    # 0 (world rank 1) at once. The standby coordinator (spare world rank 5, ftrt-h3; the ranks
    # of ftrt-h2 and ftrt-h3 learn the loss from their host agents' COORD_LOST) takes over in
    # place, and the lost trainer is replaced by the other spare (world rank 4) in the same
    # job: no relaunch, byte-identical. Then ftrt-h2's ranks elect a new host agent (200 ms
    # after their move to the standby, FTRT_TEST_REELECT_MS) and move to it; ftrt-h3's (the
    # new coordinator's host) stay on their own connections (check_agents_after_takeover).
    "kill-coordinator-host": (6, 2, [], [{"kind": "kill-host", "at_step": 60,
                                          "target": "coordinator"}],
                              ["--hosts", "3", "--slots", "2"],
                              {"FTRT_HEARTBEAT_TIMEOUT_MS": "1000",
                               "FTRT_TEST_REELECT_MS": "200"}),
    # The coordinator (ftrt-h1) SIGSTOPped on 3 simulated hosts: the host agents of ftrt-h2 and
    # ftrt-h3 hear nothing for the heartbeat timeout and send their ranks COORD_LOST, trainer
    # logical rank 0 (ftrt-h1, connected to the coordinator directly) times out itself; all
    # go to the standby (ftrt-h3), which takes over in place: no trainer lost, no relaunch,
    # byte-identical; the frozen coordinator, resumed, gives up and writes nothing. Then new
    # host agents, as in kill-coordinator-host.
    "hang-coordinator-hosts": (6, 2, [], [{"kind": "hang-coordinator", "at_step": 60}],
                               ["--hosts", "3", "--slots", "2"],
                               {"FTRT_HEARTBEAT_TIMEOUT_MS": "1000",
                                "FTRT_TEST_REELECT_MS": "200"}),
    # ftrt-h2's link cut while a checkpoint is being written (each write request held 100 ms):
    # heartbeat timeouts (cause host_lost) within 1 s + 0.5 s, replaced in one epoch; the
    # partitioned ranks leave by themselves and write nothing that counts (the shards they may
    # still write after the cut belong to a step that is never committed).
    "partition-host": (6, 2, [], [{"kind": "partition-host", "at_step": 60,
                                   "target": "covered", "in_ckpt": True}],
                       ["--hosts", "3", "--slots", "2"],
                       {"FTRT_HEARTBEAT_TIMEOUT_MS": "1000",
                        "FTRT_DEBUG_CKPT_WRITE_DELAY_MS": "100"}),
    # The host holding the last hot spare killed with a trainer of its own (ftrt-h3: trainer
    # world rank 4, spare world rank 5, the standby coordinator), FTRT_NO_SPARE=fold, the host
    # agent in the trainer's process (FTRT_TEST_AGENT_LATE_RANKS: not in world rank 5's): the
    # trainer is lost with the agent, the spare picked for it is a suspect of the same host's
    # loss (it may come back on its own connection), so the PLAN waits the
    # orphan grace for it; it does not come back, the trainer's data rank folds onto a survivor
    # in the same epoch, one launch, byte-identical (--ordered). Before, the PLAN went out
    # with the dead spare in it and the job aborted (FTRT_EABORT, seen in a hosts campaign).
    "kill-spare-host-fold": (6, 1, ["--ordered"], [{"kind": "kill-host", "at_step": 60,
                                                    "target": "host:3"}],
                             ["--hosts", "3", "--slots", "2"],
                             {"FTRT_NO_SPARE": "fold", "FTRT_TEST_AGENT_LATE_RANKS": str(1 << 5)}),
    # ftrt-h1's link cut (the coordinator's host, with trainer logical rank 0) while a
    # checkpoint is being written: the standby coordinator (ftrt-h3) takes over by silence,
    # the trainer is replaced, the job trains on in the same launch; the cut-off coordinator,
    # hearing nobody off its host, gives up by itself without committing, planning or writing
    # the status file or the report (fanotify), and the cut-off trainer leaves with it.
    "partition-coordinator-host": (6, 2, [], [{"kind": "partition-host", "at_step": 60,
                                               "target": "coordinator", "in_ckpt": True}],
                                   ["--hosts", "3", "--slots", "2"],
                                   {"FTRT_HEARTBEAT_TIMEOUT_MS": "1000",
                                    "FTRT_DEBUG_CKPT_WRITE_DELAY_MS": "100"}),
    # ftrt-h3's link cut: the spares' host, the standby coordinator's (world rank 5). The
    # standby, hearing nothing from the coordinator, takes over on its side but claims the term
    # (the term file, which would depose the coordinator) only once a rank of a third host
    # (ftrt-h2) reaches it: none does, so it gives up without claiming; the coordinator
    # declares ftrt-h3's spares lost and the job finishes in the same launch, byte-identical;
    # fanotify: the cut side wrote no term file, status file or report.
    "partition-standby-host": (6, 2, [], [{"kind": "partition-host", "at_step": 60,
                                           "target": "standby"}],
                               ["--hosts", "3", "--slots", "2"],
                               {"FTRT_HEARTBEAT_TIMEOUT_MS": "1000"}),
}


# sharded cases: (state_from, resume step) of every lost trainer (the hold at step 62: the last
# replica is step 60, the last committed checkpoint step 50)
STATE_EXPECT = {"sharded-kill-trainer": ("replica", 60), "sharded-hang-trainer": ("replica", 60),
                "kill-partners": ("checkpoint", 50), "corrupt-replica": ("checkpoint", 50)}


# the coordinator killed with a recovery in flight: the stage the kill waited for, and the
# standby's takeover line for the phase it restored (runtime/coordinator/takeover.c)
MID_RECOVERY = {"kill-coordinator-after-failure": ("failure-sent", "REPORTs awaited"),
                "kill-coordinator-after-plan": ("plan-sent", "PLAN out, RESUMEDs awaited")}


def check_mid_recovery(name, v):
    """A MID_RECOVERY case: the coordinator was killed in the stage it waited for, the standby
    took over that recovery (its log line) and finished it: the trainer's failure recovered by
    a spare, in the same launch. Raises Fail."""
    when, phase = MID_RECOVERY[name]
    kill = [i for i in v["injections"] if i["kind"] == "kill-coordinator"]
    trainer = [m for i in v["injections"] if i["kind"] == "kill-trainer"
               for m in i.get("measured", [])]
    st = kill[0].get("status_at") if kill else None
    print(f"status file at the coordinator's kill: {st}")
    if not st or kill[0].get("when") != when:
        raise Fail(f"the coordinator was not killed at {when!r}")
    log = open(v["launches"][0]["log"], errors="replace").read()
    took = [ln for ln in log.splitlines() if "took over as the coordinator" in ln]
    print("\n".join(took))
    if not any(phase in ln for ln in took):
        raise Fail(f"no standby took over with the recovery in flight ({phase!r})")
    rep = json.load(open(v["launches"][0]["report"]))
    roles = [(f.get("role"), f.get("world_rank"), f.get("recovered"), f.get("spare_world_rank"),
              f.get("epoch")) for f in rep["failures"]]
    print(f"report failures (role, world rank, recovered, spare, epoch): {roles}")
    tr = [f for f in rep["failures"] if f.get("role") == "trainer"]
    co = [f for f in rep["failures"] if f.get("role") == "coordinator"]
    if len(v["launches"]) != 1 or len(trainer) != 1 or len(tr) != 1 or len(co) != 1 or \
            not tr[0].get("recovered") or tr[0].get("spare_world_rank", -1) < 0:
        raise Fail("expected one launch, the trainer's failure recovered by a spare and the "
                   "coordinator's takeover in its report")
    # the recovery's MTTR phases span both coordinators (the old one's PLAN time from the
    # SYNC): none negative, adding up to MTTR but for the messages in flight (at most 150 ms,
    # as itest.py's PHASES_SLACK_S); a takeover has no phases (no PLAN)
    ph, gap = tr[0].get("phases_ms") or {}, tr[0].get("phases_unaccounted_ms")
    print(f"trainer's MTTR {tr[0]['mttr_s'] * 1e3:.1f} ms, phases {ph}, unaccounted {gap} ms")
    if len(ph) != 5 or min(ph.values()) < 0 or gap is None or not -1e-3 <= gap <= 150 or \
            co[0].get("phases_ms") is not None:
        raise Fail("the MTTR phases of the recovery (or of the takeover) are wrong")
    # a PLAN that waited the orphan grace for the ranks back after the takeover went out at
    # least the grace after the last one's return, itself after the detection: reach >= grace
    # (forced by the knob, 10 s; without the wait reach is the kill, the takeover and the
    # REPORTs, well under the 3 s the old coordinator held the PLAN)
    grace = float(CASES[name][5].get("FTRT_TEST_ORPHAN_GRACE_MS", "inf"))
    if ph["reach"] >= grace:
        raise Fail(f"the recovery's reach phase ({ph['reach']:.1f} ms) is at least the orphan "
                   f"grace ({grace:.0f} ms): the PLAN waited for ranks that only came back to "
                   "the standby (no host agent was lost)")


# the standby's takeover on 3 hosts: ftrt-h2's trainers (world ranks 2 and 3) move to a new
# host agent served by the new coordinator (world rank 5, ftrt-h3), whose host has none
TAKEOVER_AGENTS = ("kill-coordinator-host", "hang-coordinator-hosts")


def check_timeline_after_takeover(v):
    """kill-coordinator: every rank back with the standby sent its whole timeline again, and
    the standby handed its own (from its time as a spare) to its coordinator side: the report
    holds every timeline whole (none cut short, timeline.not_resent_ranks 0), the standby's
    included. Raises Fail."""
    log = open(v["launches"][0]["log"], errors="replace").read()
    took = re.findall(r"standby world rank (\d+) took over as the coordinator", log)
    tl = json.load(open(v["launches"][0]["report"]))["timeline"]
    cut = [r["world_rank"] for r in tl["ranks"] if r["truncated"]]
    print(f"takeover by world rank(s) {took}; timelines cut short: {cut}; not resent: "
          f"{tl.get('not_resent_ranks')} of {len(tl['ranks'])} held")
    held = [r["world_rank"] for r in tl["ranks"]]
    if len(took) != 1 or cut or tl.get("not_resent_ranks") != 0 or len(tl["ranks"]) < 6 or \
            int(took[0]) not in held:
        raise Fail("after the takeover, every timeline (the standby's own included) must be "
                   "held whole")


def check_agents_after_takeover(d, v):
    """A TAKEOVER_AGENTS case: the new coordinator's log has both ftrt-h2 trainers moving to
    the same new host agent (one of them), and its last status file has every rank of ftrt-h3
    on a connection of its own. Raises Fail."""
    log = open(v["launches"][0]["log"], errors="replace").read()
    moved = {int(m.group(1)): int(m.group(2)) for m in re.finditer(
        r"world rank ([23]) \(ftrt-h2\) moved to the host agent in world rank ([0-9]+)", log)}
    print(f"ftrt-h2's moves after the takeover (world rank: its new agent's): {moved}")
    if sorted(moved) != [2, 3] or len(set(moved.values())) != 1 or moved[2] not in (2, 3):
        raise Fail("ftrt-h2's trainers did not both move to a new host agent of ftrt-h2 after "
                   "the takeover")
    st = json.load(open(os.path.join(d, "status.json")))
    h3 = [(r["world_rank"], r["host_agent"]) for r in st["ranks"] if r["host"] == "ftrt-h3"]
    print(f"ftrt-h3's ranks (world rank, host agent): {h3}")
    if any(a is not None for _, a in h3):
        raise Fail("a rank of the new coordinator's host is served by a host agent")


def job_cmd(binary, np_, args):
    """mpirun of train_mlp with BASE + args (np_ ranks, coordinator and spares included)."""
    return h.mpirun_cmd(np_, [binary] + BASE + args)


def reference(a, args, trainers=4):
    """Params of a fault-free one-host run with these training args and this many trainers
    (no spare), cached. With --device sim, the job runs with FTRT_TEST_SIM_DEVICE=1."""
    key = hashlib.sha1(" ".join(args).encode()).hexdigest()[:12] + \
        (f"-{trainers}t" if trainers != 4 else "")
    path = os.path.join(a.work, f"reference-{key}.params")
    if os.path.exists(path):
        return path
    d = os.path.join(a.work, f"reference-{key}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cmd = job_cmd(a.bin, trainers + 1, args + ["--ckpt-dir", os.path.join(d, "ckpt"),
                                               "--params-out", path + ".tmp"])
    sim = {"FTRT_TEST_SIM_DEVICE": "1"} if "sim" in args else {}
    job = h.Job(d, cmd, h.job_env(sim, spares=0), echo=False)
    rc = job.run(300)
    if rc != 0 or not os.path.exists(path + ".tmp"):
        print(job.out[-6000:])
        raise Fail(f"reference run failed (exit {rc}); log in {job.log_path()}")
    os.rename(path + ".tmp", path)
    return path


# the wall clock (status file "updated", detected_at) against the monotonic one (MTTR): rounding
# and an NTP slew (0.5 ms a second at most) between them
SLACK_S = 0.002


def check_ledger(d, v, live, steplog, metrics, sampled=False):
    """The goodput ledger against ground truth; every check is run and printed (sampled: also
    which ranks' timelines the report holds, case "ledger-sampled"). True if all passed."""
    ok = True

    def check(cond, msg):
        nonlocal ok
        ok = ok and bool(cond)
        print(("  ok: " if cond else "  FAIL: ") + msg, flush=True)
    rep = json.load(open(os.path.join(d, "report.json")))
    # 1. MTTD and MTTR against what was seen from outside: the detection and the recovery's
    # end each lie between the write times of the last status file read without them and of
    # the first read with them (ftrt-chaos's observe(): exact on any machine, however late this
    # process polled; the polled times, late by the poll and the load, are printed only)
    meas = [m for i in v["injections"] for m in i.get("measured", [])]
    check(len(meas) == 2, f"two failures measured ({len(meas)})")
    for m in meas:
        det, inj = m["detected_at"], m["injected_at"]
        end = det + (m["mttr_s"] or 0)
        for what, at, br in (("detection", det, m.get("failed_written")),
                             ("recovery's end", end, m.get("resumed_written"))):
            lo, hi = (br or [None, None])
            lo = inj if lo is None or lo < inj else lo
            check(hi is not None and lo - SLACK_S < at <= hi + SLACK_S,
                  f"{m['detect_kind']} {what}: reported at +{(at - inj) * 1e3:.1f} ms, status "
                  f"file written without it at +{(lo - inj) * 1e3:.1f} ms and with it at "
                  + (f"+{(hi - inj) * 1e3:.1f} ms" if hi is not None else "- (never seen)"))
        print(f"  (polled: MTTD {(m['observed_mttd_s'] or 0) * 1e3:.1f} ms, MTTR "
              f"{(m['observed_mttr_s'] or 0) * 1e3:.1f} ms; reported {m['mttd_s'] * 1e3:.1f}, "
              f"{(m['mttr_s'] or 0) * 1e3:.1f} ms)", flush=True)
    # 2. rework steps: steps completed in more than one epoch, from the example's step log
    epochs = {}
    for line in open(steplog):
        _rank, step, epoch = (int(x) for x in line.split())
        epochs.setdefault(step, set()).add(epoch)
    truth = sum(len(e) - 1 for e in epochs.values())
    check(truth > 0 and rep["rework_steps"] == truth,
          f"rework steps: reported {rep['rework_steps']}, step log {truth}")
    # 3. the ledger adds up
    led = rep["ledger"]
    alloc = led["allocated_rank_s"]
    total = sum(led["rank_s_by_kind"].values())
    check(abs(total - alloc) <= 0.005 * alloc, f"ledger kinds sum to allocated ({total:.3f} vs "
                                               f"{alloc:.3f} rank-s)")
    wf = sum(x["rank_s"] for x in rep["waterfall"]) + led["useful_compute_rank_s"]
    check(abs(wf - alloc) <= 0.005 * alloc, f"waterfall losses + useful = allocated ({wf:.3f})")
    check(led["emfu"] is not None and abs(led["gau"] * led["ectr"] * led["emfu"] -
                                          led["effective_utilization"]) < 1e-9,
          f"GAU {led['gau']:.3f} x ECTR {led['ectr']:.3f} x eMFU {led['emfu']:.4f} = effective "
          f"{led['effective_utilization']:.4f}")
    check(abs(led["goodput"] - rep["kept_step_rank_s"] / alloc) < 1e-6, "goodput = kept / allocated")
    wall = rep["timeline"]["wall_s"]
    for r in rep["timeline"]["ranks"]:
        iv = r["intervals"]
        cont = iv and abs(iv[0][1]) < 1e-6 and abs(iv[-1][2] - wall) < 1e-6 and all(
            abs(x[2] - y[1]) < 1e-6 for x, y in zip(iv, iv[1:]))
        check(cont, f"timeline of world rank {r['world_rank']} covers the job without gaps")
    for r in rep["timeline"].get("left_out", []):
        check(abs(sum(r["rank_s"]) - wall) < 1e-4, f"world rank {r['world_rank']} (left out): its "
              f"rank-seconds {sum(r['rank_s']):.6f} cover the job ({wall:.6f} s)")
    if sampled:
        tl = rep["timeline"]
        held = sorted(r["world_rank"] for r in tl["ranks"])
        out = sorted(r["world_rank"] for r in tl["left_out"])
        check(held == [1, 2, 5, 6] and out == [3, 4] and tl["held_ranks"] == 4 and
              tl["left_out_ranks"] == 2, f"timelines held for world ranks {held}, left out {out}")
        # (world rank 2, killed at step 60, is cut short only when more than 60 intervals
        # reached the coordinator before its death: they go once a second, so that depends on
        # the machine's speed: 53 arrived in one CI run under ASan)
        cut = {r["world_rank"]: r["truncated"] for r in tl["ranks"]}
        check(cut.get(1) is True, f"world rank 1 (200 steps) cut short at FTRT_TIMELINE_MAX "
              f"(world rank 2, killed at step 60: cut short {cut.get(2)})")
    # 4. OpenMetrics: parseable live and at the end, and consistent with the report
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    check(len(live) > 0, f"metrics file scraped {len(live)} time(s) while the job ran")
    for text in live[:1] + [open(metrics).read()]:
        fams = {f.name: f for f in text_string_to_metric_families(text)}
    fails = sum(s.value for s in fams["ftrt_failures"].samples if s.name == "ftrt_failures_total")
    check(fails == 2, f"ftrt_failures_total sums to {fails}")
    gp = fams["ftrt_goodput_ratio"].samples[0].value
    check(abs(gp - led["goodput"]) < 1e-3, f"ftrt_goodput_ratio {gp:.4f} = report {led['goodput']:.4f}")
    return ok


# The cases that run with --device cuda (chaos_cuda.<case>: train_mlp_gpu, the state in CUDA
# memory). Not flip-bit-device: its injector flips the bit from outside the process, through
# /proc/<pid>/mem, which cannot reach CUDA memory (train_mlp refuses --publish-addr there).
CUDA_CASES = ("kill-trainer-device",)


def on_device(a, targs, extra):
    """--device cuda: the case's --device sim becomes cuda and FTRT_TEST_SIM_DEVICE goes, after
    a Skip unless `BIN --device cuda --check-device` finds a usable GPU. Returns (targs,
    extra)."""
    if a.device != "cuda":
        return targs, extra
    p = subprocess.run([a.bin, "--device", "cuda", "--check-device"], capture_output=True,
                       text=True, timeout=120)
    said = (p.stderr or p.stdout).strip()
    if p.returncode == h.SKIP:
        raise h.Skip(f"no usable CUDA device ({said})")
    if p.returncode != 0:
        raise Fail(f"{os.path.basename(a.bin)} --check-device: {said}")
    print(f"  {said}", flush=True)
    return (["cuda" if x == "sim" else x for x in targs],
            {k: v for k, v in extra.items() if k != "FTRT_TEST_SIM_DEVICE"})


def run_case(name, a):
    """Runs ftrt-chaos on case `name`; None when it passed, else its exit status or Fail."""
    np_, spares, targs, plan, opts, extra = CASES[name]
    targs, extra = on_device(a, targs, extra)
    if name.startswith("ledger"):  # before the job: a skip, or under CI a failure, naming it
        h.need_module("prometheus_client.openmetrics.parser", "python3-prometheus-client")
    if name.startswith("join") and h.open_mpi_major() != 4:
        raise h.Skip("joins need Open MPI 4.1 (ompi-server); this mpirun is another")
    ref = reference(a, targs, np_ - 1 - spares)
    d = os.path.join(a.work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ckpt = os.path.join(d, "ckpt")
    params = os.path.join(d, "final.params")
    with open(os.path.join(d, "plan.json"), "w") as f:
        json.dump({"faults": plan}, f)
    cmd = [sys.executable, h.FTRT_CHAOS, "--plan", os.path.join(d, "plan.json"), "--workdir", d,
           "--ckpt-dir", ckpt, "--report", os.path.join(d, "report.json"), "--reference", ref,
           "--params", params, "--json", os.path.join(d, "verdict.json"),
           # a launch's bound: kill-during-ckpt (hidden 8192, 200 steps) took about 150 s under
           # ASan on the 2-core VM; since ftrt-chaos's timeout also bounds a launch whose
           # injector still watches, 120 s ended it while it trained. Below the ctest TIMEOUT.
           "--timeout", "300"]
    steplog = os.path.join(d, "steps.log")
    metrics = os.path.join(d, "metrics.prom")
    if any(f["kind"] == "flip-bit" for f in plan):  # trainers publish where their params are
        pub = os.path.join(d, "addr")
        opts = opts + ["--addr-prefix", pub]
        targs = targs + ["--publish-addr", pub]
    cmd += opts + ["--"] + job_cmd(a.bin, np_, targs + ["--ckpt-dir", ckpt, "--params-out",
                                                        params, "--step-log", steplog])
    extra = dict(extra, FTRT_METRICS_FILE=metrics)
    print("$", " ".join(cmd), flush=True)
    live = []
    stop = threading.Event()

    def poll_metrics():  # the metrics file must be scrapeable while the job runs
        while not stop.wait(0.5):
            try:
                with open(metrics) as f:
                    text = f.read()
                if "ftrt_job_running 1" in text:
                    live.append(text)
            except OSError:
                pass
    th = threading.Thread(target=poll_metrics, daemon=True)
    th.start()
    rc = subprocess.call(cmd, env=h.job_env(extra, spares=spares))
    stop.set()
    th.join()
    if rc != 0:
        return rc
    v = json.load(open(os.path.join(d, "verdict.json")))
    if name.startswith("ledger") and not check_ledger(d, v, live, steplog, metrics,
                                                      sampled=name == "ledger-sampled"):
        raise Fail("the goodput ledger does not match the ground truth")
    if name in STATE_EXPECT:  # the sharded cases: the timing is forced, so is the outcome
        frm, resume = STATE_EXPECT[name]
        got = [(m.get("state_from"), m.get("resume_step")) for i in v["injections"]
               for m in i.get("measured", [])]
        print(f"state_from / resume step of the lost trainer(s): {got} (expected {frm} at step "
              f"{resume})")
        if not got or any(g != (frm, resume) for g in got):
            raise Fail(f"expected every lost trainer's state from the {frm} of step {resume}")
    if name == "kill-trainer-device":  # the spare's device regions come from the survivors
        got = [m.get("state_from") for i in v["injections"] for m in i.get("measured", [])]
        print(f"state_from of the lost trainer: {got} (expected peers)")
        if got != ["peers"]:
            raise Fail("expected the lost trainer's device state from the survivors (peers)")
    if name in MID_RECOVERY:
        check_mid_recovery(name, v)
    if name in TAKEOVER_AGENTS:
        check_agents_after_takeover(d, v)
    if name == "kill-coordinator":
        check_timeline_after_takeover(v)
    if name == "fail-during-recovery":
        first = v["launches"][0]
        kill2 = [i for i in v["injections"] if i["launch"] == 0][-1]["time"]
        took = first["t_end"] - kill2
        print(f"first launch ended {took:.2f} s after the second kill (exit {first['rc']})")
        if first["rc"] == 0 or took > 15:
            raise Fail("a failure during recovery must end the launch promptly and non-zero")
    return None


def add_args(ap):
    ap.add_argument("--device", choices=("sim", "cuda"), default="sim",
                    help="cuda: only the cases of CUDA_CASES, their state in a GPU's memory "
                         "(--bin train_mlp_gpu)")


# ctest cases (chaos.<case>, or with --device cuda chaos_cuda.<case> of CUDA_CASES), in CASES'
# order: 400 s each, no fixture (each caches its own reference run).
_dev = argparse.ArgumentParser(add_help=False)
add_args(_dev)
DEVICE = _dev.parse_known_args()[0].device
TABLE = {name: h.Case(lambda a, name=name: run_case(name, a), timeout_s=400) for name in CASES
         if DEVICE != "cuda" or name in CUDA_CASES}

if __name__ == "__main__":
    sys.exit(h.case_main(TABLE, __doc__, add_args=add_args))
