#!/usr/bin/env python3
"""MPI integration tests of the no-spare policies FTRT_NO_SPARE=shrink and fold
(docs/detection-and-recovery.md "No spare left"): real mpirun jobs of examples/train_mlp whose
trainers are SIGKILLed with fewer hot spares than kills, checked against their reports; a
shrink against a replay of the same membership history (the same data rank lost at the same
step, forced with train_mlp's --die-rank/--die-at-step knob), a fold byte for byte against a
fault-free run with the same fixed-order reduction (train_mlp --ordered). Python 3 standard
library only.

Usage: nospare_itest.py --bin BUILD/examples/train_mlp --work DIR <case>
       nospare_itest.py --list   (the cases for CMake: ctests mpi.<case>)
Cases:
  shrink          one hot spare, two kills: the first is replaced by the spare, the second
                  shrinks the job to 3 trainers; exit 0, the report and the membership history
                  say so, accuracy above 90%; a replay of the history (a job without a spare
                  whose trainer of that logical rank dies at the shrink's resume step) ends
                  byte-identical, and both differ from the fault-free run
  shrink_first    logical rank 0 (the rank that writes the outputs) lost with no spare: the
                  ranks above it move down, the new rank 0 writes them; a second run of the same
                  history is byte-identical
  shrink_sharded  sharded state (--sharded-momentum) and no spare: the shrink is refused, the
                  job ends as failed with FTRT_ENOSPARE and says why
  fold            FTRT_NO_SPARE=fold, one hot spare, two kills: the first is replaced by the
                  spare, the second's data rank folds onto a survivor (3 trainers, 4 data
                  ranks); exit 0, byte-identical to the fault-free run with --ordered
  fold_twice      no spare, logical rank 1 killed (its data folds onto logical rank 0), then
                  the trainer holding two data ranks killed (both fold onto one survivor):
                  2 trainers, 4 data ranks, byte-identical to the same reference
  fold_sharded    sharded state and no spare: the fold is refused (FTRT_ENOSPARE, said why)
  fold_max        FTRT_FOLD_MAX=2, no spare: logical rank 1's data folds onto logical rank 0;
                  then logical rank 0, holding two, is lost and no survivor has room for both:
                  refused, the job ends with FTRT_ENOSPARE and says why
  fold_long       six trainers and one hot spare, six trainers SIGKILLed in turn: the spare
                  takes the first, the next five fold, one trainer ends holding all six data
                  ranks; exit 0, every incident in the report, byte-identical to the fault-free
                  run of six trainers with --ordered
  drain_fold      no spare, tools/ftrt-ctl drain of logical rank 2: accepted, the rank leaves at
                  the drain's step boundary and its data folds onto a survivor (rework 0, a drain
                  in the report, no failure); byte-identical to the same reference
Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import os
import signal
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "harness"))
sys.path.insert(0, HERE)
import ftrt_harness as h  # noqa: E402
from ftrt_harness import check, same_bytes, trainer  # noqa: E402
from itest import need_reference, ref_path  # noqa: E402

CASES = {}  # name -> ftrt_harness.Case

# train_mlp's --die-rank needs --check-every <= hidden / 8 (64 / 8)
DIE = ["--check-every", "8"]


def shrink_job(args, name, np_, spares, extra=(), policy="shrink"):
    """A train_mlp job under FTRT_NO_SPARE=policy in WORK/name (--ordered under fold)."""
    ordered = ["--ordered"] if policy == "fold" else []
    job = h.train_job(os.path.join(args.work, name), args.bin, np_,
                      h.MLP_ARGS + DIE + ordered + list(extra), spares=spares)
    job.env["FTRT_NO_SPARE"] = policy
    return job


def ordered_reference(args, trainers=4):
    """The fault-free run of `trainers` trainers with --ordered (the fold cases' reference: a
    fold keeps its bytes), made once per work directory; its final parameters' path."""
    path = os.path.join(args.work, f"ordered_reference{trainers}.params")
    if not os.path.exists(path):
        job = shrink_job(args, f"ordered_reference{trainers}", trainers + 1, 0,
                         policy="fold").start()
        rc = job.wait(180)
        check(rc == 0, f"the fault-free run with --ordered exits 0 (got {rc})")
        accuracy(job)
        os.replace(job.params, path)
    return path


def kill_twice(job, first, second):
    """SIGKILL of trainer `first` once it has done 40 steps, then, once the job runs in the
    epoch after it, of the trainer that is logical rank `second` then, once it has done 110."""
    job.inject(signal.SIGKILL, job.wait_trainer(first, min_steps=40), "sigkill")
    st = job.wait_status(lambda s: s["job"] == "running" and s["epoch"] == 1
                         and trainer(s, second) and trainer(s, second)["steps_done"] >= 110)
    job.inject(signal.SIGKILL, trainer(st, second), "sigkill")


def accuracy(job):
    acc = [float(l.split()[2]) for l in job.out.splitlines() if l.startswith("test accuracy:")]
    check(len(acc) == 1 and acc[0] > 0.90, f"test accuracy above 90% ({acc})")


def replay(args, name, logical, step):
    """The history "logical rank `logical` lost at step `step`, nobody in its place", replayed
    in a job of four trainers and no spare: that trainer SIGKILLs itself inside step `step`'s
    forward pass (--die-rank/--die-at-step), so that every survivor resumes at `step`. Returns
    the finished job."""
    job = shrink_job(args, name, 5, 0, ["--die-rank", str(logical), "--die-at-step", str(step)])
    job.start()
    rc = job.wait(180)
    check(rc == 0, f"the replay ({name}) exits 0 (got {rc})")
    f = job.load_report()["failures"]
    check(len(f) == 1 and f[0]["shrunk"] and f[0]["resume_step"] == step
          and f[0]["logical_rank"] == logical,
          f"the replay lost logical rank {logical} and resumed at step {step} "
          f"({[brief(x) for x in f]})")
    return job


def brief(f):
    """A failure of the report, in the fields these tests check."""
    return {k: f.get(k) for k in ("logical_rank", "world_rank", "recovered", "shrunk",
                                  "spare_world_rank", "epoch", "resume_step", "rework_steps")}


def check_shrink_report(rep, n_fail):
    check(rep["status"] == "finished" and rep["trainers"] == 4 and rep["trainers_at_end"] == 3
          and rep["shrinks"] == 1 and rep["folds"] == 0,
          f"report: finished, 4 trainers at the start, 3 at the end, one shrink "
          f"({rep['status']}, {rep['trainers']}, {rep['trainers_at_end']}, {rep['shrinks']})")
    fs = rep["failures"]
    check(len(fs) == n_fail and all(f["recovered"] for f in fs),
          f"{n_fail} failure(s), all recovered ({[brief(f) for f in fs]})")
    s = fs[-1]
    check(s["shrunk"] and s.get("spare_world_rank") is None,
          f"the last one shrank the job, no spare ({brief(s)})")
    m = [x for x in rep["membership"] if x["why"] == "shrink"]
    check(len(m) == 1 and m[0]["to_world_rank"] == -1 and m[0]["logical_rank"] == s["logical_rank"]
          and m[0]["data_rank"] == s["logical_rank"] and m[0]["epoch"] == s["epoch"],
          f"the membership history has the shrink ({rep['membership']})")
    return s


@h.case(CASES, fixture="required")
def case_shrink(args):
    need_reference(args)
    job = shrink_job(args, "shrink", 6, 1).start()
    kill_twice(job, 1, 2)
    rc = job.wait(180)
    check(rc == 0, f"the job survives two kills with one spare and exits 0 (got {rc})")
    rep = job.load_report()
    s = check_shrink_report(rep, 2)
    check(rep["failures"][0]["spare_world_rank"] == 5 and not rep["failures"][0]["shrunk"],
          "the first kill took the hot spare")
    check("mean over 3 trainers x 32, 3 data rank(s)" in job.out,
          "the final loss is averaged over the 3 trainers and data ranks present")
    accuracy(job)
    print(f"  shrank at step {s['resume_step']} (MTTR {s['mttr_s'] * 1e3:.1f} ms, rework "
          f"{s['rework_steps']} steps)", flush=True)
    check(not same_bytes(job.params, ref_path(args)),
          "the parameters differ from the fault-free run's (a data rank was skipped)")
    again = replay(args, "shrink_replay", 2, s["resume_step"])
    check(same_bytes(job.params, again.params),
          "byte-identical to the replay of the same membership history")


@h.case(CASES, fixture="required")
def case_shrink_first(args):
    need_reference(args)
    one = replay(args, "shrink_first", 0, 90)
    check_shrink_report(one.load_report(), 1)
    check("final train loss" in one.out and os.path.exists(one.params),
          "the new logical rank 0 wrote the outputs")
    accuracy(one)
    two = replay(args, "shrink_first2", 0, 90)
    check(same_bytes(one.params, two.params), "two runs of the same history are byte-identical")
    check(not same_bytes(one.params, ref_path(args)),
          "the parameters differ from the fault-free run's")


@h.case(CASES, fixture="required")
def case_shrink_sharded(args):
    job = shrink_job(args, "shrink_sharded", 5, 0, ["--sharded-momentum"]).start()
    victim = job.wait_trainer(1, min_steps=40)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(180)
    check(rc != 0, f"the job ends as failed (exit {rc})")
    check("FTRT_NO_SPARE=shrink is refused with sharded regions" in job.out,
          "the coordinator says why the shrink is refused")
    rep = job.load_report()
    check(rep["status"] == "failed" and rep["error"] == "FTRT_ENOSPARE" and rep["shrinks"] == 1,
          f"report: failed with FTRT_ENOSPARE ({rep['status']}, {rep['error']})")


def check_folds(job, args, n_fail, n_folds, end, trainers=4):
    """The finished fold job: exit 0, n_fail failures (the last n_folds folded), `end` trainers
    and 4 data ranks at the end, the folds in the membership history, byte-identical to the
    ordered reference. Returns the report."""
    rc = job.wait(180)
    check(rc == 0, f"the job goes on after every kill and exits 0 (got {rc})")
    rep = job.load_report()
    fs = rep["failures"]
    check(rep["status"] == "finished" and rep["folds"] == n_folds and rep["shrinks"] == 0
          and rep["trainers_at_end"] == end,
          f"report: finished, {n_folds} fold(s), {end} trainers at the end ({rep['folds']}, "
          f"{rep['trainers_at_end']})")
    check(len(fs) == n_fail and all(f["recovered"] for f in fs)
          and all(f.get("folded_onto_world_rank") is not None and not f["shrunk"]
                  for f in fs[n_fail - n_folds:]),
          f"{n_fail} failure(s), all recovered, the last {n_folds} folded "
          f"({[brief(f) | {'onto': f.get('folded_onto_world_rank')} for f in fs]})")
    m = [x for x in rep["membership"] if x["why"] == "fold"]
    check(len(m) == n_folds and all(x["to_world_rank"] >= 1 for x in m),
          f"the membership history has the fold(s) ({rep['membership']})")
    check(f"mean over {end} trainers x 32, {trainers} data rank(s)" in job.out,
          f"{end} trainer(s) train on the {trainers} data ranks")
    check(same_bytes(job.params, ordered_reference(args, trainers)),
          "byte-identical to the fault-free run with --ordered")
    return rep


@h.case(CASES, fixture="required")
def case_fold(args):
    ordered_reference(args)
    job = shrink_job(args, "fold", 6, 1, policy="fold").start()
    kill_twice(job, 1, 2)
    rep = check_folds(job, args, 2, 1, 3)
    check(rep["failures"][0]["spare_world_rank"] == 5, "the first kill took the hot spare")


@h.case(CASES, fixture="required")
def case_fold_twice(args):
    ordered_reference(args)
    job = shrink_job(args, "fold_twice", 5, 0, policy="fold").start()
    # logical rank 1's data folds onto logical rank 0 (the fewest data ranks, the lowest)
    kill_twice(job, 1, 0)
    rep = check_folds(job, args, 2, 2, 2)
    second = [x for x in rep["membership"] if x["why"] == "fold"][1]
    check(second["data_ranks_held"] == 2, f"the second lost trainer held 2 data ranks ({second})")
    check(rep["sdc"]["vote_at_end"] == "detect_only"
          and "with 2 trainers a disagreement is detected but no majority" in job.out,
          f"the silent data corruption vote of 2 trainers is said to detect only "
          f"({rep['sdc']['vote_at_end']})")


@h.case(CASES, fixture="required")
def case_fold_long(args):
    ordered_reference(args, 6)
    job = shrink_job(args, "fold_long", 8, 1, policy="fold").start()
    # (logical rank, steps it has done) of each kill, taken once the previous recovery is over
    for k, (logical, steps) in enumerate([(1, 25), (0, 50), (2, 75), (1, 100), (0, 125),
                                          (1, 150)]):
        st = job.wait_status(lambda s: s["job"] == "running" and s["epoch"] == k
                             and trainer(s, logical) and trainer(s, logical)["steps_done"] >= steps)
        job.inject(signal.SIGKILL, trainer(st, logical), "sigkill")
    rep = check_folds(job, args, 6, 5, 1, trainers=6)
    check(rep["failures"][0]["spare_world_rank"] == 7, "the first kill took the hot spare")
    check(rep["epoch"] == 6 and len(rep["membership"]) == 6,
          f"six epochs, six membership changes ({rep['epoch']}, {len(rep['membership'])})")


@h.case(CASES, fixture="required")
def case_drain_fold(args):
    ordered_reference(args)
    job = shrink_job(args, "drain_fold", 5, 0, policy="fold").start()
    victim = job.wait_trainer(2, min_steps=60)
    rc, out = job.drain("--rank", str(victim["world_rank"]))
    check(rc == 0 and "its data folds onto world rank" in out and "moved" in out,
          f"ftrt-ctl drain accepted with no spare left, the data folded ({out.strip()})")
    rc = job.wait(180)
    check(rc == 0, f"the job finishes and exits 0 (got {rc})")
    rep = job.load_report()
    d = rep["drains"]
    check(not rep["failures"] and len(d) == 1 and d[0]["moved"] and d[0]["rework_steps"] == 0
          and d[0].get("folded_onto_world_rank") is not None and not d[0]["shrunk"],
          f"one drain, folded, no rework, no failure ({d}, {rep['failures']})")
    check(rep["folds"] == 1 and rep["trainers_at_end"] == 3, "the report counts the fold")
    check("drained (world rank" in job.out, "the drained trainer says it left")
    check(same_bytes(job.params, ordered_reference(args)),
          "byte-identical to the fault-free run with --ordered")


@h.case(CASES, fixture="required")
def case_fold_max(args):
    job = shrink_job(args, "fold_max", 5, 0, policy="fold")
    job.env["FTRT_FOLD_MAX"] = "2"
    job.start()
    kill_twice(job, 1, 0)
    rc = job.wait(180)
    check(rc != 0, f"the job ends as failed (exit {rc})")
    check("no survivor has room for its data ranks (FTRT_FOLD_MAX)" in job.out,
          "the coordinator says why the second fold is refused")
    rep = job.load_report()
    check(rep["status"] == "failed" and rep["error"] == "FTRT_ENOSPARE" and rep["folds"] == 1,
          f"report: failed with FTRT_ENOSPARE after one fold ({rep['status']}, {rep['error']}, "
          f"{rep['folds']} fold(s))")


@h.case(CASES, fixture="required")
def case_fold_sharded(args):
    job = shrink_job(args, "fold_sharded", 5, 0, ["--sharded-momentum"], policy="fold").start()
    job.inject(signal.SIGKILL, job.wait_trainer(1, min_steps=40), "sigkill")
    rc = job.wait(180)
    check(rc != 0, f"the job ends as failed (exit {rc})")
    check("FTRT_NO_SPARE=fold is refused with sharded regions" in job.out,
          "the coordinator says why the fold is refused")
    rep = job.load_report()
    check(rep["status"] == "failed" and rep["error"] == "FTRT_ENOSPARE",
          f"report: failed with FTRT_ENOSPARE ({rep['status']}, {rep['error']})")


if __name__ == "__main__":
    sys.exit(h.case_main(CASES, __doc__))
