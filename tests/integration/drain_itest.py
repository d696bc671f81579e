#!/usr/bin/env python3
"""MPI integration tests of drains (docs/detection-and-recovery.md "Drain"): real mpirun jobs
of examples/train_mlp whose trainers are moved out with tools/ftrt-ctl or a SIGTERM, compared
byte for byte with itest.py's fault-free run (mpi.reference, in the same --work directory).
Python 3 standard library only.

Usage: drain_itest.py --bin BUILD/examples/train_mlp --work DIR <case>
       drain_itest.py --list   (the cases for CMake: ctests mpi.<case>)
Cases:
  drain       tools/ftrt-ctl drain --rank of trainer logical rank 2 mid-run: accepted, its
              logical rank goes to the hot spare at the drain's step boundary; a second drain
              of it is refused; the job exits 0, the report has one drain (no failure, rework 0,
              state from the peers, time to move), byte-identical; a drain with no spare left
              is refused
  drain_spare the standby coordinator (a hot spare) drained: it leaves the pool, a later kill is
              recovered on the other spare, byte-identical
  sigterm     FTRT_SIGTERM=drain: SIGTERM to one trainer drains it (exit 0, byte-identical, a
              drain in the report); SIGTERM to the coordinator ends the whole job (aborted)
  drain_late  two trainers (the drained one among them) miss the drain's step boundary
              (FTRT_TEST_DRAIN_LATE_RANKS): the epoch is made urgent, no rework, byte-identical
  drain_sharded  the same with sharded state (partner replicas): resumed from memory at the
              drain's step boundary, no rework, byte-identical
  drain_sharded_early  the same in the job's first second (no median step time measured yet),
              by SIGTERM, the announcement 40 ms late (FTRT_TEST_EPOCH_DELAY_MS): no rework
  drain_last  the drain's step boundary at the job's last step (FTRT_TEST_DRAIN_STEP): the
              promoted spare ends its loop at once, the job exits 0, byte-identical
  drain_end   a job without its total steps whose drain's step boundary lies past its end: the
              trainers end their loops first, the drain is withdrawn (the rank stays), the job
              exits 0, every process finalizes, byte-identical; again with no spare under
              FTRT_NO_SPARE=fold (the fold undone)
Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import os
import signal
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "harness"))
sys.path.insert(0, HERE)
import ftrt_harness as h  # noqa: E402
from ftrt_harness import check, trainer  # noqa: E402
from itest import expect_identical, mlp_job, need_reference  # noqa: E402

CASES = {}  # name -> ftrt_harness.Case


@h.case(CASES, fixture="required")
def case_drain(args):
    need_reference(args)
    # Logical rank 0 waits at each step's end while `pause` exists (--pause-file), so that the
    # job cannot run out of steps while the refused requests are made (each waits for the
    # coordinator's 1 s poll of the control directory).
    pause = os.path.join(args.work, "drain.pause")
    if os.path.exists(pause):
        os.unlink(pause)
    job = h.train_job(os.path.join(args.work, "drain"), args.bin, 6,
                      h.MLP_ARGS + ["--pause-file", pause])
    job.env["FTRT_PROGRESS_TIMEOUT_MS"] = "120000"  # the pause is not a stall
    job.start()
    victim = job.wait_trainer(2, min_steps=40)
    rc, out = job.drain("--rank", str(victim["world_rank"]))
    check(rc == 0 and out.startswith("accepted") and "moved" in out,
          f"ftrt-ctl drain accepted and saw the move ({out.strip()})")
    open(pause, "w").close()
    st = job.status_json()
    me = [r for r in st["ranks"] if r["world_rank"] == victim["world_rank"]][0]
    check(me["role"] == "drained" and me["state"] == "left", f"the rank is drained and left ({me})")
    rc, out = job.drain("--rank", str(victim["world_rank"]))
    check(rc == 1 and "already been drained" in out, "a second drain of it is refused")
    other = trainer(job.status_json(), 0)
    rc, out = job.drain("--rank", str(other["world_rank"]))
    check(rc == 1 and "no hot spare is left" in out,
          "with no spare left a drain is refused and the rank keeps training")
    still = trainer(job.status_json(), 0)
    check(still and still["world_rank"] == other["world_rank"],
          f"logical rank 0 is still a trainer on world rank {other['world_rank']} ({still})")
    os.unlink(pause)
    rc = job.wait(180)
    check(rc == 0, f"the job finishes and exits 0 (got {rc})")
    rep = job.load_report()
    check(not rep["failures"], f"no failure in the report ({rep['failures']})")
    check(len(rep["drains"]) == 1, f"one drain in the report ({rep.get('drains')})")
    d = rep["drains"][0]
    check(d["moved"] and d["rework_steps"] == 0 and d["state_from"] == "peers"
          and d["logical_rank"] == 2 and d["world_rank"] == victim["world_rank"],
          f"the drain moved logical rank 2 with no rework, state from the peers ({d})")
    check(d["time_to_move_s"] < 5, f"time to move {d['time_to_move_s'] * 1e3:.1f} ms")
    m = rep["membership"]
    check(len(m) == 1 and m[0]["why"] == "drain" and m[0]["logical_rank"] == 2
          and m[0]["from_world_rank"] == victim["world_rank"]
          and m[0]["to_world_rank"] == d["spare_world_rank"] and m[0]["epoch"] == d["epoch"],
          f"the membership history has the move ({m})")
    print(f"  time to move: {d['time_to_move_s'] * 1e3:.1f} ms, resumed at step "
          f"{d['resume_step']}", flush=True)
    check(rep["advice"]["mtbf_source"] == "none",
          f"the MTBF counts no failure ({rep['advice']['mtbf_source']})")
    check(any(e["event"] == "drain" for e in rep["timeline"]["events"])
          and not any(e["event"] == "failure" for e in rep["timeline"]["events"]),
          "the timeline shows a drain, no failure")
    check("drained (world rank" in job.out, "the drained trainer says it left")
    summ = job.load_summary()
    check(summ["exit_status"] == 0, f"ftrt-run's summary: exit 0 ({summ.get('exit_status')})")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_drain_spare(args):
    """Two hot spares; the standby coordinator among them (the highest world rank, 6) drained:
    it leaves the pool (the standby dismissed first), then a SIGKILLed trainer is replaced by
    the other spare; exit 0, byte-identical, one drain (a spare) and one failure."""
    need_reference(args)
    job = mlp_job(args, "drain_spare", np_=7, spares=2).start()
    job.wait_trainer(1, min_steps=30)
    rc, out = job.drain("--rank", "6")
    check(rc == 0 and "hot spare world rank 6 leaves the pool; 1 spare(s) left" in out,
          f"the spare's drain accepted ({out.strip()})")
    job.wait_status(lambda st: [r for r in st["ranks"] if r["world_rank"] == 6][0]["state"]
                    == "left", timeout=30)
    victim = job.wait_trainer(2, min_steps=60)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(180)
    check(rc == 0, f"the job survives the kill with the spare left and exits 0 (got {rc})")
    rep = job.load_report()
    check(len(rep["drains"]) == 1 and rep["drains"][0]["role"] == "spare"
          and rep["drains"][0]["world_rank"] == 6, f"one drain, of the spare ({rep['drains']})")
    check(len(rep["failures"]) == 1 and rep["failures"][0]["recovered"]
          and rep["failures"][0]["spare_world_rank"] == 5,
          f"the kill recovered on the other spare ({rep['failures']})")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_sigterm(args):
    """FTRT_SIGTERM=drain: SIGTERM to trainer logical rank 2 alone (a scheduler's warning to
    one node) drains it: the hot spare takes its rank at the drain's step boundary, the job
    goes on and exits 0, byte-identical, one drain and no failure in the report. Then SIGTERM to the
    coordinator (as a launcher's to the whole job) ends the job promptly as aborted."""
    need_reference(args)
    job = mlp_job(args, "sigterm")
    job.env.update({"FTRT_SIGTERM": "drain"})
    job.start()
    victim = job.wait_trainer(2, min_steps=40)
    job.inject(signal.SIGTERM, victim, "sigterm")
    job.wait_status(lambda st: [r for r in st["ranks"] if r["world_rank"] == victim["world_rank"]]
                    [0]["state"] == "left" and st["job"] == "running", timeout=30)
    rc = job.wait(180)
    check(rc == 0, f"the job goes on after the SIGTERM and exits 0 (got {rc})")
    rep = job.load_report()
    check(not rep["failures"] and len(rep["drains"]) == 1 and rep["drains"][0]["rework_steps"] == 0
          and rep["drains"][0]["world_rank"] == victim["world_rank"],
          f"one drain of that rank, no rework, no failure ({rep['drains']}, {rep['failures']})")
    expect_identical(job, args)

    job = mlp_job(args, "sigterm_job")
    job.env.update({"FTRT_SIGTERM": "drain"})
    job.start()
    st = job.wait_status(lambda st: st.get("job") == "running" and trainer(st, 0)["steps_done"] >= 20)
    coord = [r for r in st["ranks"] if r["world_rank"] == 0][0]
    t0 = time.monotonic()
    job.inject(signal.SIGTERM, coord, "sigterm")
    rc = job.wait(60)
    took = time.monotonic() - t0
    check(rc != 0 and took < 20, f"SIGTERM to the coordinator ends the job, non-zero, in "
          f"{took:.1f} s (exit {rc})")
    check("received SIGTERM (FTRT_SIGTERM=drain): the whole job stops" in job.out,
          "the coordinator says why the job stops")


@h.case(CASES, fixture="required")
def case_drain_late(args):
    """A drain whose step boundary two trainers miss (FTRT_TEST_DRAIN_LATE_RANKS: world rank 1,
    which stays, and world rank 3, the one drained, ignore the announcement and go on into the
    next step): the coordinator makes the drain's epoch urgent once the others stopped, the
    late ones abandon their partial step, nothing completed is redone, byte-identical."""
    need_reference(args)
    job = mlp_job(args, "drain_late")
    job.env.update({"FTRT_TEST_DRAIN_LATE_RANKS": str((1 << 1) | (1 << 3)), "FTRT_LOG": "info"})
    job.start()
    victim = job.wait_trainer(2, min_steps=40)
    check(victim["world_rank"] == 3, f"logical rank 2 is world rank 3 ({victim})")
    rc, out = job.drain("--rank", "3")
    check(rc == 0 and "moved" in out, f"ftrt-ctl drain accepted and saw the move ({out.strip()})")
    rc = job.wait(180)
    check(rc == 0, f"the job finishes and exits 0 (got {rc})")
    check(job.out.count("step-boundary announcement ignored") == 2,
          "both late ranks ignored the step-boundary announcement")
    check("entered now (a trainer is already in the next step)" in job.out,
          "the coordinator made the drain's epoch urgent: a trainer was in the next step")
    rep = job.load_report()
    d = rep["drains"][0] if len(rep["drains"]) == 1 else {}
    check(not rep["failures"] and d.get("moved") and d.get("rework_steps") == 0,
          f"one drain, moved, no rework, no failure ({rep['drains']}, {rep['failures']})")
    print(f"  time to move {d['time_to_move_s'] * 1e3:.1f} ms (with the 0.25 s wait before the "
          "urgent epoch)", flush=True)
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_drain_sharded(args):
    """A trainer drained with sharded state (--sharded-momentum, partner replicas every 5 steps):
    every trainer refreshes the replicas at the drain's step boundary, so the recovery resumes
    there from memory: no rework, no checkpoint read, byte-identical."""
    need_reference(args)
    job = mlp_job(args, "drain_sharded")
    job.cmd += ["--sharded-momentum"]
    job.env.update({"FTRT_SHARD_REPLICA_EVERY": "5", "FTRT_LOG": "info"})
    job.start()
    victim = job.wait_trainer(1, min_steps=42)
    rc, out = job.drain("--rank", str(victim["world_rank"]))
    check(rc == 0 and "moved" in out, f"ftrt-ctl drain accepted and saw the move ({out.strip()})")
    rc = job.wait(180)
    check(rc == 0, f"the job finishes and exits 0 (got {rc})")
    rep = job.load_report()
    check(not rep["failures"] and len(rep["drains"]) == 1, "one drain, no failure")
    d = rep["drains"][0]
    print(f"  resumed at step {d['resume_step']}, state from {d['state_from']}, time to move "
          f"{d['time_to_move_s'] * 1e3:.1f} ms", flush=True)
    check(d["state_from"] == "replica" and d["rework_steps"] == 0,
          f"state from the partner replicas at the boundary, no rework ({d})")
    check("reload checkpoint" not in job.out, "no checkpoint reload")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_drain_sharded_early(args):
    """drain_sharded in the job's first second, before the coordinator has measured a median
    step time (its progress window needs two passes, 1 s apart), asked by a SIGTERM to the
    trainer (FTRT_SIGTERM=drain: at once, where ftrt-ctl's request waits for the control
    directory's poll), with the announcement reaching the members 40 ms late
    (FTRT_TEST_EPOCH_DELAY_MS): the boundary's margin must still cover it (a margin of 2 steps
    let every trainer pass the boundary, each stopped at its own next step, the replicas'
    refresh there could not match, and the drain fell back to the checkpoint)."""
    need_reference(args)
    job = mlp_job(args, "drain_sharded_early")
    job.cmd += ["--sharded-momentum"]
    job.env.update({"FTRT_SHARD_REPLICA_EVERY": "5", "FTRT_LOG": "info", "FTRT_SIGTERM": "drain",
                    "FTRT_TEST_EPOCH_DELAY_MS": "40"})
    job.start()
    job.inject(signal.SIGTERM, job.wait_trainer(1, min_steps=12), "sigterm")
    rc = job.wait(180)
    check(rc == 0, f"the job finishes and exits 0 (got {rc})")
    rep = job.load_report()
    d = rep["drains"][0] if len(rep["drains"]) == 1 else {}
    check(not rep["failures"] and d.get("state_from") == "replica" and d.get("rework_steps") == 0,
          f"one drain, state from the partner replicas at the boundary, no rework ({d})")
    # (what the case is for; a machine loaded enough to make 12 steps take 2 s has measured a
    # median by then, and the case then checks the usual margin)
    print("  the margin was sized " + ("before a median existed" if "may take as little as"
                                       in job.out else "with a measured median"), flush=True)
    check("no step boundary in time" not in job.out,
          "every trainer stopped at the boundary (the drain's epoch was not made urgent)")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_drain_last(args):
    """A drain whose step boundary is the job's last step (FTRT_TEST_DRAIN_STEP: what a request
    that comes late in the run gets): the recovery resumes at the last step, so the promoted
    spare has nothing left to do and ends its loop while the others may still be resuming; that
    is the job's end, not a trainer leaving mid-recovery (which would abort it): exit 0, one
    drain, no rework, byte-identical."""
    need_reference(args)
    job = mlp_job(args, "drain_last")
    job.env.update({"FTRT_TEST_DRAIN_STEP": str(h.MLP_STEPS), "FTRT_LOG": "info"})
    job.start()
    victim = job.wait_trainer(1, min_steps=120)
    rc, out = job.drain("--rank", str(victim["world_rank"]), wait_s=0)
    check(rc == 0 and out.startswith("accepted"), f"ftrt-ctl drain accepted ({out.strip()})")
    rc = job.wait(180)
    check(rc == 0, f"the job finishes and exits 0 (got {rc}):\n{job.out[-3000:]}")
    check(f"step boundary after {h.MLP_STEPS} steps (FTRT_TEST_DRAIN_STEP)" in job.out,
          "the drain's boundary is the job's last step")
    rep = job.load_report()
    d = rep["drains"][0] if len(rep["drains"]) == 1 else {}
    check(not rep["failures"] and d.get("moved") and d.get("rework_steps") == 0
          and d.get("resume_step") == h.MLP_STEPS,
          f"one drain, moved, resumed at the last step, no rework ({rep['drains']}, "
          f"{rep['failures']})")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_drain_end(args):
    """A job that does not give ftrt its total steps (--no-total-steps) and whose drain's step
    boundary lies past its end (FTRT_TEST_DRAIN_STEP: what a request in the last steps of such a
    job gets): the trainers end their loops before the boundary, so the drain is withdrawn, not
    taken for trainers leaving mid-recovery. Twice: with a hot spare (the drained trainer stays
    a member, the spare goes back to the pool) and with none under FTRT_NO_SPARE=fold (the fold
    undone). Each: exit 0, every process calls MPI_Finalize, the report's drain withdrawn and
    not moved, no failure, no membership change, the checkpoints written meanwhile committed,
    byte-identical. Logical rank 0 is held (--pause-file) while the request is taken, so that
    the job cannot end first."""
    need_reference(args)
    for name, np_, spares, policy in (("drain_end", 6, None, None),
                                      ("drain_end_fold", 5, 0, "fold")):
        drain_end_job(args, name, np_, spares, policy)


def drain_end_job(args, name, np_, spares, policy):
    """One job of case_drain_end (policy: FTRT_NO_SPARE, None for the default)."""
    print(f" {name}:", flush=True)
    pause = os.path.join(args.work, name + ".pause")
    if os.path.exists(pause):
        os.unlink(pause)
    job = h.train_job(os.path.join(args.work, name), args.bin, np_,
                      h.MLP_ARGS + ["--no-total-steps", "--pause-file", pause], spares=spares)
    job.env.update({"FTRT_TEST_DRAIN_STEP": str(h.MLP_STEPS + 1000), "FTRT_LOG": "info",
                    "FTRT_PROGRESS_TIMEOUT_MS": "120000"})  # the pause is not a stall
    if policy:
        job.env["FTRT_NO_SPARE"] = policy
    job.start()
    victim = job.wait_trainer(1, min_steps=150)
    open(pause, "w").close()
    rc, out = job.drain("--rank", str(victim["world_rank"]), wait_s=0)
    os.unlink(pause)
    check(rc == 0 and out.startswith("accepted") and ("folds onto" in out) == bool(policy),
          f"ftrt-ctl drain accepted ({out.strip()})")
    rc = job.wait(180)
    check(rc == 0, f"the job finishes and exits 0 (got {rc}):\n{job.out[-3000:]}")
    check("drain(s) withdrawn" in job.out, "the coordinator says the drain was withdrawn")
    check("not calling MPI_Finalize" not in job.out, "every process calls MPI_Finalize")
    rep = job.load_report()
    d = rep["drains"][0] if len(rep["drains"]) == 1 else {}
    check(not rep["failures"] and d.get("withdrawn") is True and d.get("moved") is False
          and d.get("world_rank") == victim["world_rank"],
          f"one drain, withdrawn, not moved, no failure ({rep['drains']}, {rep['failures']})")
    check(not rep["membership"] and "no spare left: " not in job.out
          and d.get("spare_world_rank") is None and d.get("folded_onto_world_rank") is None,
          f"no membership change, no spare taken, nothing folded ({rep['membership']})")
    check(rep["checkpoints"]["last_committed_step"] == h.MLP_STEPS,
          f"the checkpoints written meanwhile are committed, the last at step {h.MLP_STEPS} "
          f"({rep['checkpoints']})")
    st = job.status_json()
    me = [r for r in st["ranks"] if r["world_rank"] == victim["world_rank"]][0]
    check(me["role"] == "trainer" and st["job"] == "finished",
          f"the rank ended as a trainer of the finished job ({me}, {st['job']})")
    summ = job.load_summary()
    check(summ["exit_status"] == 0, f"ftrt-run's summary: exit 0 ({summ.get('exit_status')})")
    expect_identical(job, args)

if __name__ == "__main__":
    sys.exit(h.case_main(CASES, __doc__))
