#!/usr/bin/env python3
"""MPI integration tests of joins (docs/join.md "How a join works"): a train_mlp job started by
tools/ftrt-run --joinable, new processes started by a second ftrt-run --join (a second mpirun,
Open MPI 4.1 under ompi-server) that become its hot spares, trainers SIGKILLed; compared byte for
byte with itest.py's fault-free run (mpi.reference, in the same --work directory). Python 3
standard library only.

Usage: join_itest.py --bin BUILD/examples/train_mlp --work DIR <case>
       join_itest.py --list   (the cases for CMake: ctests mpi.<case>)
Cases:
  join          a process joins the running job as a hot spare (the time from its start to
                "hot spare" measured); a trainer SIGKILLed: the joiner or the world's spare
                promoted; a second trainer SIGKILLed: the other one promoted, so one epoch
                builds its communicator with the joined member reached by connect/accept and
                one with the joined member a survivor and a world spare new; the job and the
                joiner exit 0, nothing is left running, the report counts the join and both
                failures, byte-identical
  joinrefused   joins that must be refused with one line, each leaving the job undisturbed: a
                wrong secret, another version (FTRT_TEST_JOIN_VERSION), no join slot left
                (FTRT_JOINABLE=1, a second joiner), a job that was not started --joinable, and
                one that has ended; byte-identical, the refusals counted
  joinidle      a joined hot spare SIGKILLed while idle: it leaves the pool, no epoch change,
                byte-identical
  joinstandby   a job with no spare of its own (FTRT_SPARES=0): the joined process becomes the
                standby coordinator (the status file's "standby"); the coordinator SIGKILLed:
                the joiner takes over in place, writes the job's status file and report, the
                job and the joiner exit 0, byte-identical
  joinlong      1 world spare, FTRT_NO_SPARE=fold, 6 trainer kills in turn (logical ranks 1, 2,
                3, 1, 2, 3: joined members among the later victims), a new process joining
                before each: every loss replaced by the joiner, never a fold; exit 0,
                byte-identical, 6 joins and 6 recovered failures in the report
  joinwindow    the joiner, promoted, is lost just before its accept (FTRT_TEST_JOIN_DIE_BEFORE_
                ACCEPT), inside the recovery: the coordinator aborts the job, as for any member
                lost while a plan is applied; it ends (exit 1, the report says so) within 120 s
                and leaves nothing running
Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import glob
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "harness"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import ftrt_harness as h  # noqa: E402
from ftrt_run.joinable import joinable_dir  # noqa: E402
from ftrt_run.rundir import runs_parent  # noqa: E402
from ftrt_harness import check, trainer  # noqa: E402
from itest import expect_identical, need_reference  # noqa: E402

CASES = {}  # name -> ftrt_harness.Case
STARTED = []  # every Job started here: SIGKILLed (process group) at the end if still there


def started(job):
    """job, remembered for the clean-up at the end (cleanup())."""
    STARTED.append(job)
    return job


def cleanup():
    """A failed case leaves no job or joiner running: each one's process group SIGKILLed."""
    for j in STARTED:
        if j.proc is not None and j.proc.poll() is None:
            try:
                os.killpg(j.proc.pid, signal.SIGKILL)
                j.wait(10)  # (its output kept in its job.log)
            except (OSError, h.Fail):
                pass


def need_ompi4():
    """Joins need Open MPI 4.1's ompi-server (docs/join.md): skipped on another launcher."""
    if h.open_mpi_major() != 4:
        raise h.Skip("joins need Open MPI 4.1 (ompi-server); this mpirun is another")
    h.need_tool("ompi-server", "openmpi-bin")


def joinable_job(args, name, pause, env=None, np_=6):
    """The reference's job (4 trainers, 1 spare; np_ 5 with FTRT_SPARES=0 in env: none) under
    ftrt-run --joinable, logical rank 0 holding at each step's end while `pause` exists
    (hold(): so that joins happen mid-run)."""
    if os.path.exists(pause):
        os.unlink(pause)
    job = h.train_job(os.path.join(args.work, name), args.bin, np_,
                      h.MLP_ARGS + ["--pause-file", pause], run_opts=["--joinable"])
    job.env["FTRT_PROGRESS_TIMEOUT_MS"] = "120000"  # the pause is not a stall
    job.env.update(env or {})
    return started(job)


def hold(job, pause, steps=20):
    """Once trainer 0 did `steps` steps, holds the job at a step's end (creates `pause`)."""
    job.wait_trainer(0, min_steps=steps)
    open(pause, "w").close()


def held_job(args, name, env=None, np_=6):
    """need_ompi4(), the reference, then joinable_job() started and held (hold()): (job, pause
    file, its run directory)."""
    need_ompi4()
    need_reference(args)
    pause = os.path.join(args.work, name + ".pause")
    job = joinable_job(args, name, pause, env, np_).start()
    rundir = run_dir(job)
    hold(job, pause)
    return job, pause, rundir


def run_dir(job):
    """The job's ftrt-run run directory ($TMPDIR/ftrt-run.<uid>/<ftrt-run's pid>-*)."""
    for _ in range(500):
        found = joinable_dir(job.proc.pid)
        if found:
            return found
        time.sleep(0.02)
    job.fail("the job's run directory with its join.json did not appear")


def joiner_argv(args, job):
    """train_mlp with the job's arguments (no pause: a joiner that takes logical rank 0 runs)."""
    return [args.bin] + h.MLP_ARGS + ["--ckpt-dir", job.ckpt, "--params-out", job.params,
                                      "--report", job.report]


def joiner(args, job, name, rundir, env=None):
    """`ftrt-run --join rundir -- mpirun -np 1 train_mlp <the job's arguments>`, started (a Job
    in WORK/name)."""
    cmd = [sys.executable, h.FTRT_RUN, "--join", rundir, "--"] + h.mpirun_cmd(
        1, joiner_argv(args, job))
    return started(h.Job(os.path.join(args.work, name), cmd, h.job_env(env), fresh=True)).start()


def joins(job, n, timeout=60):
    """Waits for the status file to count n joins; returns the status."""
    return job.wait_status(lambda st: st.get("joins", 0) >= n, timeout=timeout)


def refused(j, want, timeout=60):
    """Joiner j exits non-zero with `want` in its output (the one line of the refusal)."""
    rc = j.wait(timeout)
    lines = [l for l in j.out.splitlines() if want in l]
    check(rc != 0 and lines, f"the join is refused ({want!r}; exit {rc}):\n{j.out[-1500:]}")
    print(f"  refused: {lines[0].strip()}", flush=True)


def pids_of(rundir):
    """Processes whose command line names the run directory (its ompi-server)."""
    out = subprocess.run(["pgrep", "-f", rundir], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def finish(job, pause, args, joiners=()):
    """Lets the job run to its end (pause removed): it and every joiner exit 0, byte-identical;
    returns the report."""
    if os.path.exists(pause):
        os.unlink(pause)
    rc = job.wait(180)
    check(rc == 0, f"the job exits 0 (got {rc})")
    for j in joiners:
        jrc = j.wait(60)
        check(jrc == 0, f"the joiner's ftrt-run exits 0 (got {jrc}):\n{j.out[-1500:]}")
    expect_identical(job, args)
    return job.load_report()


@h.case(CASES, fixture="required")
def case_join(args):
    job, pause, rundir = held_job(args, "join")
    t0 = time.monotonic()
    j = joiner(args, job, "join.joiner", rundir)
    st = joins(job, 1)
    ready_s = time.monotonic() - t0
    new = [r for r in st["ranks"] if r["world_rank"] >= 6]
    check(len(new) == 1 and new[0]["role"] == "spare",
          f"the joiner is a hot spare in slot 6, after the world's ranks ({new})")
    print(f"  join: {ready_s:.2f} s from `ftrt-run --join` to a hot spare", flush=True)
    os.unlink(pause)
    job.inject(signal.SIGKILL, job.wait_trainer(1, min_steps=60), "sigkill")
    job.wait_status(lambda s: s["epoch"] >= 1 and trainer(s, 1) is not None
                    and trainer(s, 1)["steps_done"] >= 100, timeout=90)
    job.inject(signal.SIGKILL, trainer(job.status_json(), 2), "sigkill")
    rep = finish(job, pause, args, [j])
    check(len(rep["failures"]) == 2 and all(f["recovered"] for f in rep["failures"]),
          f"two failures, both recovered ({rep['failures']})")
    cp = rep["control_plane"]
    check(cp["joins"] == 1 and cp["join_refused"] == 0, f"one join counted ({cp})")
    spares = sorted(f["spare_world_rank"] for f in rep["failures"])
    check(spares == [5, 6], f"the world's spare (5) and the joiner (6) promoted ({spares})")
    check("joined the job as a hot spare (slot 6" in j.out, "the joiner says where it is")
    wall, alloc, led = rep["wall_s"], rep["allocated_rank_s"], rep["ledger"]["allocated_rank_s"]
    check(5 * wall < alloc < 6 * wall - 0.2 and abs(led - alloc) < 0.05 * wall,
          f"the joined slot allocated from its join, not the job's start: {alloc:.2f} rank-s "
          f"(ledger {led:.2f}) for 5 slots of {wall:.2f} s and the joiner's")
    check(not pids_of(rundir), "nothing of the job's run directory is left running")


@h.case(CASES, fixture="required")
def case_joinrefused(args):
    job, pause, rundir = held_job(args, "joinrefused", {"FTRT_JOINABLE": "1"})
    refused(joiner(args, job, "jr.version", rundir, {"FTRT_TEST_JOIN_VERSION": "99"}),
            "another version of ftrt")
    # a wrong secret: the joiner started by hand, with the job's place and another secret
    st = job.status_json()
    addr, port = st["control_plane"].rsplit(":", 1)
    uri = os.path.join(rundir, "ompi-server.uri")
    bad = h.Job(os.path.join(args.work, "jr.secret"),
                h.mpirun_cmd(1, joiner_argv(args, job), recovery=False,  # (its exit status)
                             extra=["--ompi-server", "file:" + uri]),
                h.job_env({"FTRT_JOIN_ADDRS": addr, "FTRT_JOIN_PORT": port,
                           "FTRT_JOIN_SECRET": "0" * 16}), fresh=True)
    started(bad)
    refused(bad.start(), "wrong job secret")
    j = joiner(args, job, "jr.first", rundir)
    joins(job, 1)
    refused(joiner(args, job, "jr.full", rundir), "all 1 join slots of the job are used")
    st = job.status_json()
    check(st["epoch"] == 0 and st["join_refused"] == 3,
          f"no epoch change, the coordinator's 3 refusals counted (epoch {st['epoch']}, "
          f"{st['join_refused']})")
    rep = finish(job, pause, args, [j])
    check(not rep["failures"] and rep["control_plane"]["join_refused"] == 3
          and rep["control_plane"]["joins"] == 1,
          f"no failure, 1 join and 3 refusals in the report ({rep['control_plane']})")
    ended = joiner(args, job, "jr.ended", rundir)
    refused(ended, "has ended")
    # a job that was not started --joinable: ftrt-run finds no join.json in its run directory
    plain = h.train_job(os.path.join(args.work, "joinrefused.plain"), args.bin, 6,
                        h.MLP_ARGS + ["--pause-file", pause])
    plain.env["FTRT_PROGRESS_TIMEOUT_MS"] = "120000"
    started(plain).start()
    hold(plain, pause)
    prd = glob.glob(os.path.join(runs_parent(), f"{plain.proc.pid}-*"))
    check(len(prd) == 1, f"the plain job's run directory ({prd})")
    refused(joiner(args, plain, "jr.plain", prd[0]), "--joinable")
    os.unlink(pause)
    check(plain.wait(180) == 0, "the plain job exits 0")


@h.case(CASES, fixture="required")
def case_joinidle(args):
    job, pause, rundir = held_job(args, "joinidle")
    j = joiner(args, job, "joinidle.joiner", rundir)
    st = joins(job, 1)
    me = [r for r in st["ranks"] if r["world_rank"] == 6][0]
    job.inject(signal.SIGKILL, me, "sigkill")
    st = job.wait_status(lambda s: [r for r in s["ranks"] if r["world_rank"] == 6][0]["role"]
                         != "spare", timeout=30)
    check(st["epoch"] == 0, f"no epoch change for an idle spare's loss (epoch {st['epoch']})")
    jrc = j.wait(60)
    check(jrc != 0, f"the killed joiner's ftrt-run says it failed (exit {jrc})")
    rep = finish(job, pause, args)
    f = rep["failures"]
    check(len(f) == 1 and f[0]["world_rank"] == 6, f"the joiner's loss is in the report ({f})")


@h.case(CASES, fixture="required")
def case_joinstandby(args):
    job, pause, rundir = held_job(args, "joinstandby", {"FTRT_SPARES": "0"}, np_=5)
    check(job.status_json().get("standby") == -1, "no standby coordinator before the join")
    j = joiner(args, job, "joinstandby.joiner", rundir)
    joins(job, 1)
    st = job.wait_status(lambda s: s.get("standby") == 5, timeout=30)
    print("  the joined process (slot 5) is the standby coordinator", flush=True)
    coord = next(r for r in st["ranks"] if r["role"] == "coordinator")
    os.unlink(pause)
    job.inject(signal.SIGKILL, coord, "sigkill")
    st = job.wait_status(lambda s: s["coordinator"]["world_rank"] == 5, timeout=60)
    check(st["coordinator"]["pid"] != coord["pid"], "the joined standby took over in place")
    rep = finish(job, pause, args, [j])
    f = rep["failures"]
    check(len(f) == 1 and f[0]["role"] == "coordinator" and f[0]["recovered"],
          f"one failure, the coordinator's, recovered by the takeover ({f})")
    check("took over as the coordinator" in j.out, "the joiner says it took over")
    check(not pids_of(rundir), "nothing of the job's run directory is left running")


@h.case(CASES, fixture="required")
def case_joinlong(args):
    job, pause, rundir = held_job(args, "joinlong", {"FTRT_NO_SPARE": "fold"})
    joiners = []
    for k, victim in enumerate([1, 2, 3, 1, 2, 3]):
        open(pause, "w").close()  # held while the next process joins
        joiners.append(joiner(args, job, f"joinlong.joiner{k}", rundir))
        joins(job, k + 1)
        steps = trainer(job.status_json(), 0)["steps_done"]
        os.unlink(pause)
        job.inject(signal.SIGKILL, job.wait_trainer(victim, min_steps=steps + 5), "sigkill")
        job.wait_status(lambda s: s["epoch"] == k + 1 and s["job"] == "running"
                        and trainer(s, victim) is not None
                        and trainer(s, victim)["world_rank"] == 6 + k, timeout=60)
    rep = finish(job, pause, args, joiners[3:])  # (the first three were killed in turn)
    for j in joiners[:3]:
        jrc = j.wait(60)
        check(jrc != 0, f"a killed joiner's ftrt-run says so (exit {jrc})")
    f = rep["failures"]
    check(len(f) == 6 and all(x["recovered"] for x in f) and rep["folds"] == 0,
          f"6 failures, each recovered by a joined spare, no fold ({f}, folds {rep['folds']})")
    check(sorted(x["spare_world_rank"] for x in f) == list(range(6, 12)),
          f"the joiners in slots 6-11 took the lost ranks ({[x['spare_world_rank'] for x in f]})")
    check(rep["control_plane"]["joins"] == 6, f"6 joins counted ({rep['control_plane']})")


@h.case(CASES, fixture="required")
def case_joinwindow(args):
    job, pause, rundir = held_job(args, "joinwindow")
    j = joiner(args, job, "joinwindow.joiner", rundir, {"FTRT_TEST_JOIN_DIE_BEFORE_ACCEPT": "1"})
    joins(job, 1)
    os.unlink(pause)
    job.inject(signal.SIGKILL, job.wait_trainer(1, min_steps=60), "sigkill")
    rc = job.wait(120)
    check(rc == 1, f"the job ends, failed (exit {rc}), within 120 s: no process left waiting")
    rep = job.load_report()
    check(rep["status"] == "failed" and rep["error"] == "FTRT_EABORT",
          f"the report says aborted ({rep['status']}, {rep.get('error')})")
    check("a member failed while the recovery plan was being applied" in job.out,
          "the coordinator says why")
    jrc = j.wait(60)
    check(jrc != 0, f"the lost joiner's ftrt-run says so (exit {jrc})")
    check(not pids_of(rundir), "nothing of the job's run directory is left running")


if __name__ == "__main__":
    try:
        code = h.case_main(CASES, __doc__)
    finally:
        cleanup()
    sys.exit(code)
