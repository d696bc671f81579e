#!/usr/bin/env python3
"""MPI integration tests of erasure groups (FTRT_SHARD_REDUNDANCY=erasure,
docs/detection-and-recovery.md "Erasure groups"): real mpirun jobs of examples/train_mlp with
sharded momentum whose trainers are SIGKILLed, compared byte for byte with itest.py's fault-free
run (mpi.reference, in the same --work directory). 4 trainers form one group of 4 (2 data and 2
parity positions per stripe); the parity is refreshed every 5 steps (FTRT_SHARD_REPLICA_EVERY),
the checkpoint every 50 (train_mlp's default), logical rank 0 holds at step 62 so that every
kill lands after the refresh of step 60. Python 3 standard library only.

Usage: erasure_itest.py --bin BUILD/examples/train_mlp --work DIR <case>
       erasure_itest.py --list   (the cases for CMake: ctests mpi.<case>)
Cases:
  erasure_pair     two trainers of one group SIGKILLed at once (logical ranks 1 and 2: with
                   partner replicas a rank and its partner, which falls back to the checkpoint):
                   both rebuilt from the group's survivors, resumed at step 60 (rework 2, not
                   12), the disk not read, byte-identical
  erasure_groups   6 trainers in 2 groups of 3 (FTRT_EC_GROUP=3), two of one group and one of the
                   other SIGKILLed at once: each group rebuilds its own, byte-identical to a
                   fault-free run of 6 trainers
  erasure_three    three trainers of the group SIGKILLed at once: more losses than parity, the
                   job falls back to the checkpoint (step 50) and the report says why
                   (replica_miss "erasure_group_lost_more_than_parity"), byte-identical
  erasure_corrupt  a survivor's parity corrupted in memory after the refresh
                   (FTRT_TEST_EC_CORRUPT): its CRC32C check before the REPORT refuses it; with
                   two losses the stripes lack fragments, checkpoint (reason
                   "erasure_fragments_missing"), byte-identical; with one loss the other
                   parity still rebuilds it from memory
  erasure_refresh  a trainer SIGKILLed in the middle of the refresh of step 60
                   (FTRT_TEST_EC_DIE_RANK): one generation, so the checkpoint (step 50),
                   byte-identical
Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import os
import shutil
import signal
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "harness"))
sys.path.insert(0, HERE)
import ftrt_harness as h  # noqa: E402
from ftrt_harness import check, trainer  # noqa: E402
from itest import (CKPT_AT, HOLD, REPLICA_AT, expect_identical, need_reference,  # noqa: E402
                   replica_job, wait_hold)

CASES = {}  # name -> ftrt_harness.Case


def erasure_job(args, name, spares, env=None, trainers=4):
    """itest.py's replica job (sharded momentum, refresh every 5 steps, hold at step 62) with
    erasure groups: 1 coordinator + 4 trainers + `spares` hot spares. The coordinator holds
    each PLAN 500 ms after its FAILURE (FTRT_TEST_PLAN_DELAY_MS), so that trainers killed at
    once are lost in one epoch: without it the first kill's recovery may complete before the
    next kill is detected, and each loss alone is rebuilt from memory."""
    e = {"FTRT_SHARD_REDUNDANCY": "erasure", "FTRT_EC_GROUP": "4",
         "FTRT_TEST_PLAN_DELAY_MS": "500"}
    e.update(env or {})
    return replica_job(args, name, np_=1 + trainers + spares, spares=spares, env=e)


def kill_at_once(job, st, ranks):
    for r in [trainer(st, l) for l in ranks]:
        job.inject(signal.SIGKILL, r, "sigkill")


def failures(job, n):
    rc = job.wait(180)
    check(rc == 0, f"the job survives and exits 0 (got {rc})")
    fs = job.load_report()["failures"]
    check(len(fs) == n and all(f["recovered"] for f in fs),
          f"{n} failure(s), all recovered ({[(f['logical_rank'], f['recovered']) for f in fs]})")
    return fs


def expect_checkpoint(f, miss, what):
    """The last recovery reloaded the committed checkpoint (step CKPT_AT) for the reason
    `miss` (the report's replica_miss)."""
    check(f["state_from"] == "checkpoint" and f["resume_step"] == CKPT_AT
          and f["replica_miss"] == miss,
          f"{what}: checkpoint step {CKPT_AT}, {miss} "
          f"({f['state_from']}, {f['resume_step']}, {f['replica_miss']})")


@h.case(CASES, fixture="required")
def case_erasure_pair(args):
    need_reference(args)
    job = erasure_job(args, "erasure-pair", spares=2).start()
    kill_at_once(job, wait_hold(job), [1, 2])
    fs = failures(job, 2)
    last = max(fs, key=lambda f: f["epoch"])
    check(all(f["epoch"] == last["epoch"] for f in fs), "the two lost in one epoch")
    check(all(f["state_from"] == "erasure" for f in fs)
          and last["resume_step"] == REPLICA_AT,
          f"rebuilt from the erasure group, resumed at step {REPLICA_AT} "
          f"({[(f['state_from'], f['resume_step']) for f in fs]})")
    check(last["rework_steps"] <= HOLD - REPLICA_AT,
          f"rework at most {HOLD - REPLICA_AT} steps, not {HOLD - CKPT_AT} "
          f"(got {last['rework_steps']})")
    check("from the erasure groups in memory" in job.out and "reload checkpoint" not in job.out,
          "the log shows the rebuild from memory and no checkpoint reload")
    expect_identical(job, args)


@h.case(CASES, fixture="required", timeout_s=300)
def case_erasure_groups(args):
    """6 trainers in 2 groups of 3 (FTRT_EC_GROUP=3: logical ranks {0, 2, 4} and {1, 3, 5}), 3
    spares: logical ranks 0 and 2 (two of group 0) and 1 (one of group 1) SIGKILLed at once:
    every group rebuilds its own from memory, byte-identical to a fault-free run with the same
    6 trainers."""
    ref = os.path.join(args.work, "erasure-groups-reference.params")
    if not os.path.exists(ref):
        job = erasure_job(args, "erasure-groups-ref", spares=0, trainers=6).start()
        check(job.wait(240) == 0, "the fault-free run of 6 trainers exits 0")
        shutil.copyfile(job.params, ref)
    job = erasure_job(args, "erasure-groups", spares=3, trainers=6,
                      env={"FTRT_EC_GROUP": "3"}).start()
    kill_at_once(job, wait_hold(job), [0, 1, 2])
    fs = failures(job, 3)
    check(len({f["epoch"] for f in fs}) == 1, "the three lost in one epoch")
    check(all(f["state_from"] == "erasure" and f["resume_step"] == REPLICA_AT for f in fs),
          f"each rebuilt from its group at step {REPLICA_AT} "
          f"({[(f['logical_rank'], f['state_from'], f['resume_step']) for f in fs]})")
    check(h.same_bytes(job.params, ref), "final parameters byte-identical to the fault-free run")


@h.case(CASES, fixture="required")
def case_erasure_three(args):
    need_reference(args)
    job = erasure_job(args, "erasure-three", spares=3).start()
    kill_at_once(job, wait_hold(job), [0, 1, 2])
    fs = failures(job, 3)
    last = max(fs, key=lambda f: f["epoch"])
    check(all(f["epoch"] == last["epoch"] for f in fs), "the three lost in one epoch")
    expect_checkpoint(last, "erasure_group_lost_more_than_parity",
                      "three losses in a group of 4")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_erasure_corrupt(args):
    need_reference(args)
    # logical rank 3's parity is corrupted after every refresh
    job = erasure_job(args, "erasure-corrupt", spares=2,
                      env={"FTRT_TEST_EC_CORRUPT": "4"}).start()
    kill_at_once(job, wait_hold(job), [1, 2])
    fs = failures(job, 2)
    last = max(fs, key=lambda f: f["epoch"])
    check(all(f["epoch"] == last["epoch"] for f in fs), "the two lost in one epoch")
    expect_checkpoint(last, "erasure_fragments_missing", "a corrupted parity and two losses")
    check("parity of step" in job.out and "fails its CRC32C" in job.out,
          "the corruption is logged")
    expect_identical(job, args)
    # one loss: the other parity position of each stripe is enough
    job = erasure_job(args, "erasure-corrupt-one", spares=1,
                      env={"FTRT_TEST_EC_CORRUPT": "4"}).start()
    kill_at_once(job, wait_hold(job), [1])
    f = failures(job, 1)[0]
    check(f["state_from"] == "erasure" and f["resume_step"] == REPLICA_AT,
          f"one loss with a corrupted parity: still from memory at step {REPLICA_AT} "
          f"({f['state_from']}, {f['resume_step']})")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_erasure_refresh(args):
    need_reference(args)
    job = erasure_job(args, "erasure-refresh", spares=1,
                      env={"FTRT_TEST_EC_DIE_RANK": "3", "FTRT_TEST_EC_DIE_STEP":
                           str(REPLICA_AT)}).start()
    f = failures(job, 1)[0]
    check(f["logical_rank"] == 2, f"logical rank 2 died (got {f['logical_rank']})")
    expect_checkpoint(f, "erasure_fragments_missing", "a loss mid-refresh (one generation)")
    check("dying in the refresh of step" in job.out, "the knob fired mid-refresh")
    expect_identical(job, args)


if __name__ == "__main__":
    sys.exit(h.case_main(CASES, __doc__))
