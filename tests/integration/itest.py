#!/usr/bin/env python3
"""MPI integration tests for ftrt: real mpirun jobs of examples/train_mlp with real processes
killed by signals. Python 3 standard library only.

Usage: itest.py --bin BUILD/examples/train_mlp --work DIR <case>
       itest.py --list   (the cases, their ctest timeouts and fixtures: read by CMake)
The jobs, waits and kills are tests/harness/ftrt_harness.py's.
Cases:
  reference   fault-free run; keeps DIR/reference.params for the other cases
  kill        SIGKILL a trainer mid-run: the hot spare takes its place, the job finishes and the
              final parameters are byte-identical to the reference; the report's MTTR phases
              are there, none negative, and add up to MTTR (check_phases); Open MPI's PMIx notice
              after the kill does not reach the output (tools/ftrt-run leaves it out)
  kill2       two trainers SIGKILLed one after the other (logical ranks 0 and 3) with two
              spares: both replaced, result byte-identical
  latekill    as kill, but the ranks take the coordinator's announcement 300 ms late
              (FTRT_TEST_EPOCH_DELAY_MS): under Open MPI 5 with ULFM the survivors' collectives
              fail first (MPIX_ERR_PROC_FAILED), which must wait for the epoch change, not end
              the job with FTRT_EMPI; under 4.1 they wait in the collective; byte-identical;
              the survivors also wait 300 ms after the PLAN (FTRT_DEBUG_RECOVERY_DELAY_MS):
              the report's MTTR phases put each wait in its place and add up to MTTR
  midstep     a trainer SIGKILLs itself inside its forward pass while the others are in
              theirs (train_mlp --die-rank/--die-at-step, --check-every 1): each survivor stops
              mid-pass at its next ftrt_check; MTTR phases add up; byte-identical
  hang        SIGSTOP a trainer: declared failed by heartbeat timeout, fenced, replaced; result
              byte-identical
  relaunch    kill the whole job after a committed checkpoint (kill_all removes the killed
              ftrt-run's run directory), relaunch: it resumes from the checkpoint and ends
              byte-identical
  stall       a trainer stuck in its own code: progress detector, fenced, replaced
  straggler   a slow trainer is reported as a straggler, never declared failed
  intruder    bad-secret, garbage, oversized and silent connections are rejected and counted
  nospare     a trainer dies with no spare left: prompt non-zero exit with a clear error and a
              committed checkpoint that a relaunch resumes from
  ckptkill    a trainer SIGKILLed mid-write: the previous checkpoint stays committed
  ckptskip    FTRT_CKPT_POLICY=skip: checkpoints requested faster than written are skipped
  ckptenospc  the checkpoint file system fills up: those checkpoints fail, training goes on
  apperror    a trainer stops with an application error (ftrt_set_exit_code): the job ends
              promptly as failed, with that error, and no spare is spent on it
  nockpt      the only committed checkpoint damaged (a bit flipped in a shard), then a
              relaunch under plain mpirun: restore fails with FTRT_ENOCKPT on every trainer; the
              launch ends by itself within seconds, every process exits non-zero and none
              calls MPI_Finalize (some calling it while others exit without it could hang
              forever), an error names the directory; through ftrt-run: exit 1, last line
              names the cause
  lateerror   logical rank 0 fails after its last step (--params-out not writable) while the
              other trainer finished, under plain mpirun: the job ends failed (EIO) within
              seconds, and no process calls MPI_Finalize
  ckptnotdir  the checkpoint directory cannot be created (a regular file in its place): with
              train_mlp --ckpt-dir, train_mlp stops before joining the job with a line naming
              the option; with FTRT_CKPT_DIR, every rank stops at ftrt_init with an error
              naming it; the job exits non-zero and ftrt-run's last line names the cause
  exitstatus  a process returns 3 from main() after its ftrt_finalize() (train_mlp --exit-rank,
              --exit-status; no ftrt_set_exit_code): a trainer, the coordinator, an unused
              spare, each in a short job of its own. The job finished (report, status file),
              yet ftrt-run exits 3 (mpirun --enable-recovery exits 0), names the rank on its
              last line and its summary records that rank's status alone
Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import ftrt_harness as h  # noqa: E402
from ftrt_harness import Fail, Skip, check, same_bytes, trainer  # noqa: E402

STEPS = h.MLP_STEPS
CASES = {}  # name -> ftrt_harness.Case; `itest.py --list` gives CMake the ctests


def mlp_job(args, name, np_=6, spares=None, timeout_ms=None, fresh=True):
    """The train_mlp job (ftrt_harness.MLP_ARGS) in WORK/name."""
    return h.train_job(os.path.join(args.work, name), args.bin, np_, h.MLP_ARGS, spares=spares,
                       heartbeat_timeout_ms=timeout_ms, fresh=fresh)


def ref_path(args):
    return os.path.join(args.work, "reference.params")


def need_reference(args):
    if not os.path.exists(ref_path(args)):
        case_reference(args)


@h.case(CASES, fixture="setup")
def case_reference(args):
    job = mlp_job(args, "reference").start()
    rc = job.wait(180)
    check(rc == 0, f"fault-free job exits 0 (got {rc})")
    acc = [float(l.split()[2]) for l in job.out.splitlines() if l.startswith("test accuracy:")]
    check(len(acc) == 1 and acc[0] > 0.90, f"test accuracy above 90% ({acc})")
    rep = job.load_report()
    check(rep["status"] == "finished" and rep["steps"] == STEPS and not rep["failures"],
          f"report: finished, {STEPS} steps, no failures")
    check(rep["checkpoints"]["committed"] == STEPS // 25, "a checkpoint committed every 25 steps")
    check(os.path.getsize(job.params) > 0, "final parameters written")
    check_spare_timeline(rep, 5, ["startup", "spare_idle", "teardown"])  # its 1 spare, not needed
    shutil.copyfile(job.params, ref_path(args))


def check_spare_timeline(rep, w, expect):
    """World rank w, a hot spare: its timeline in the report is `expect`, the kinds in order
    (consecutive intervals of one kind as one), its start-up and spare idle each there for a
    while (> 1 ms; what follows may be shorter: its teardown from its SHUTDOWN to the job's end,
    its recovery from its promotion to its part of the PLAN applied), and the ledger's
    spare-idle rank-seconds are its own (the job's only spare not promoted) or include it
    (promoted)."""
    tl = rep["timeline"]
    iv = [r for r in tl["ranks"] if r["world_rank"] == w][0]["intervals"]
    seq, took = [], {}
    for k, t0, t1 in iv:
        name = tl["kinds"][k]
        if not seq or seq[-1] != name:
            seq.append(name)
        took[name] = took.get(name, 0) + t1 - t0
    head = seq[:len(expect) + 1]
    print(f"  world rank {w}'s timeline ({len(iv)} intervals) begins with "
          + ", ".join(head) + " (in all: " + ", ".join(f"{k} {took[k]:.3f} s" for k in head) + ")")
    check(head[:len(expect)] == expect and (len(seq) == len(expect) or "teardown" not in expect)
          and took["startup"] > 0.001 and took["spare_idle"] > 0.001,
          f"the spare's timeline is {', '.join(expect)}" + ("" if "teardown" in expect else
                                                             ", ...") + f" ({head})")
    idle = rep["ledger"]["rank_s_by_kind"]["spare_idle"]
    mine = "teardown" in expect
    check(abs(idle - took["spare_idle"]) < 1e-3 if mine else idle >= took["spare_idle"] - 1e-3,
          f"the ledger's spare idle, {idle:.3f} rank-s, "
          + ("is" if mine else "includes") + f" its {took['spare_idle']:.3f} s")


# MTTR's phases (docs/report-schema.md "phases_ms") add up to MTTR but for what no clock of one
# process can see: the PLAN and the last RESUMED in flight and the wake-ups of the agent thread
# and of the coordinator's loop for them (well under 1 ms each on an idle machine). 150 ms is
# four waits for a CPU on a loaded 2-core CI machine (the -Werror, ASan and TSan suites beside
# other jobs, load up to ~9), and still far below the 300 ms that latekill's knobs put into
# the phases, which a phase left out of the sum would leave unaccounted.
PHASES = ("reach", "plan", "rebuild", "transfer", "resume")
PHASES_SLACK_S = 0.150


def check_phases(f):
    """The recovered failure f's MTTR phases: all there, none negative, their sum within
    PHASES_SLACK_S below MTTR (never above it, but for rounding). Returns them, in seconds."""
    ph = f.get("phases_ms")
    check(isinstance(ph, dict) and set(ph) == set(PHASES),
          f"the report splits MTTR into {', '.join(PHASES)} ({ph})")
    check(all(ph[k] >= 0 for k in PHASES), f"no phase is negative ({ph})")
    total = sum(ph[k] for k in PHASES) / 1e3
    gap = f["mttr_s"] - total
    check(-1e-6 <= gap <= PHASES_SLACK_S and abs(gap - f["phases_unaccounted_ms"] / 1e3) < 1e-6,
          f"the phases add up to {total * 1e3:.1f} ms of MTTR {f['mttr_s'] * 1e3:.1f} ms "
          f"(unaccounted {gap * 1e3:.1f} ms, at most {PHASES_SLACK_S * 1e3:.0f})")
    return {k: ph[k] / 1e3 for k in PHASES}


def expect_identical(job, args):
    check(same_bytes(job.params, ref_path(args)),
          "final parameters are byte-identical to the fault-free run")


@h.case(CASES, fixture="required")
def case_kill(args):
    need_reference(args)
    job = mlp_job(args, "kill").start()
    victim = job.wait_trainer(2, 60)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(180)
    check(rc == 0, f"job survives the kill and exits 0 (got {rc})")
    check("PMIX ERROR: BAD-PARAM" not in job.out,
          "Open MPI's harmless PMIx notice after the kill is left out of ftrt-run's output")
    rep = job.load_report()
    check(len(rep["failures"]) == 1, "one failure reported")
    f = rep["failures"][0]
    check(f["kind"] == "connection_lost" and f["recovered"], "detected by connection loss, recovered")
    check(f["mttd_source"] == "fault_log" and 0 <= f["mttd_s"] < 1.0,
          f"MTTD from the fault log, under 1 s ({f['mttd_s'] * 1e3:.1f} ms)")
    check(f["mttr_s"] is not None and f["mttr_s"] < 10, f"MTTR {f['mttr_s'] * 1e3:.1f} ms")
    check_phases(f)
    check_spare_timeline(rep, f["spare_world_rank"], ["startup", "spare_idle", "recovery"])
    st = job.status_json()
    spare = [r for r in st["ranks"] if r["world_rank"] == f["spare_world_rank"]][0]
    check(spare["role"] == "trainer" and spare["logical_rank"] == 2,
          "the hot spare now holds logical rank 2")
    check([r for r in st["ranks"] if r["pid"] == victim["pid"]][0]["role"] == "failed",
          "the killed rank is marked failed")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_killhuge(args):
    """The kill of case_kill with train_mlp's state in ftrt_alloc() memory of huge pages (64
    reserved for the case: 5 trainers' parameters and momentum take 10): the sources map the
    promoted spare's memory file and write it themselves (the INFO line says so), the result
    byte-identical."""
    need_reference(args)
    with h.HugePages(64):
        job = h.train_job(os.path.join(args.work, "killhuge"), args.bin, 6,
                          h.MLP_ARGS + ["--ftrt-alloc"])
        job.env["FTRT_LOG"] = "info"
        job.start()
        victim = job.wait_trainer(2, 60)
        job.inject(signal.SIGKILL, victim, "sigkill")
        rc = job.wait(180)
    check(rc == 0, f"job survives the kill and exits 0 (got {rc})")
    f = job.load_report()["failures"]
    check(len(f) == 1 and f[0]["recovered"], "one failure, recovered")
    check("written by the sources into mapped huge pages" in job.out,
          "the sources wrote the spare's state through its mapped memory file")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_latekill(args):
    need_reference(args)
    delay_ms = 300
    job = mlp_job(args, "latekill")
    # (and the survivors wait as long again after the PLAN: that time is in the later phases)
    job.env.update(FTRT_TEST_EPOCH_DELAY_MS=str(delay_ms), FTRT_LOG="info",
                   FTRT_DEBUG_RECOVERY_DELAY_MS=str(delay_ms))
    job.start()
    victim = job.wait_trainer(2, 60)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(180)
    check(rc == 0, f"job survives the kill and exits 0 (got {rc})")
    check("FTRT_EMPI" not in job.out, "no rank left with FTRT_EMPI")
    ulfm = (h.open_mpi_major() or 0) >= 5
    seen = job.out.count("MPI reports a process failure")
    if ulfm:
        check(seen >= 1, f"Open MPI 5 (ULFM): survivors saw the failure in MPI first and waited "
              f"for the epoch change ({seen} log lines)")
    else:
        check(seen == 0, "Open MPI 4.1 (no ULFM): no MPI-reported failure")
    rep = job.load_report()
    check(len(rep["failures"]) == 1 and rep["failures"][0]["recovered"],
          "one failure, recovered")
    mttr = rep["failures"][0]["mttr_s"]
    check(mttr is not None and mttr >= 2 * delay_ms / 1e3,
          f"MTTR {mttr * 1e3:.0f} ms includes the {delay_ms} ms the ranks took the announcement "
          f"late and the {delay_ms} ms they waited after the PLAN")
    ph = check_phases(rep["failures"][0])
    check(ph["reach"] >= delay_ms / 1e3,
          f"the late announcement is in the survivors' reaching the recovery point "
          f"({ph['reach'] * 1e3:.0f} ms)")
    after = ph["rebuild"] + ph["transfer"] + ph["resume"]
    check(after >= delay_ms / 1e3,
          f"the wait after the PLAN is in the members' phases ({after * 1e3:.0f} ms)")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_midstep(args):
    """A trainer dies inside its forward pass (train_mlp --die-rank 2 --die-at-step 60: at its
    8th ftrt_check of step 60) while the others are in theirs (their checks of that step sleep
    2 ms each, 64 hidden units x 2 passes: ~250 ms of pass left): each survivor stops its step
    mid-pass at its next check (--check-every 1), not at the step's allreduce; the phases add
    up, and the result is byte-identical."""
    need_reference(args)
    targs = h.MLP_ARGS + ["--check-every", "1", "--die-rank", "2", "--die-at-step", "60"]
    job = h.train_job(os.path.join(args.work, "midstep"), args.bin, 6, targs).start()
    rc = job.wait(180)
    check(rc == 0, f"job survives the death mid-pass and exits 0 (got {rc})")
    stopped = job.out.count("stopped step 60 mid-pass (ftrt_check: a rank failed)")
    check(stopped == 3, f"each of the 3 survivors stopped step 60 mid-pass ({stopped})")
    rep = job.load_report()
    f = rep["failures"]
    check(len(f) == 1 and f[0]["kind"] == "connection_lost" and f[0]["recovered"] and
          f[0]["logical_rank"] == 2 and f[0]["resume_step"] == 60,
          "one failure (logical rank 2, connection lost), recovered, resumed at step 60")
    ph = check_phases(f[0])
    print(f"  measured: survivors at the recovery point {ph['reach'] * 1e3:.1f} ms after the "
          f"detection, MTTR {f[0]['mttr_s'] * 1e3:.1f} ms", flush=True)
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_behind(args):
    """A survivor a step behind the others when the failure comes (train_mlp --lag-rank 0
    --lag-at-step 59: logical rank 0 stops after step 59's allreduce, before its update, until
    a failure is announced; logical rank 2 dies in step 60's forward pass, the others stop
    there): a peers plan resuming at step 60 whose PLAN counts the survivor behind without
    listing it (base/proto.h FTRT__PROTO_PLAN); the members learn which it is on the data plane
    and it receives step 60's state with the spare: 2 receivers. Rank 0 skipped its update of
    step 59, so a transfer that missed it would leave its parameters apart: every trainer ends
    with the same parameters, byte-identical to the fault-free run."""
    need_reference(args)
    targs = h.MLP_ARGS + ["--check-every", "1", "--die-rank", "2", "--die-at-step", "60",
                          "--lag-rank", "0", "--lag-at-step", "59"]
    job = h.train_job(os.path.join(args.work, "behind"), args.bin, 6, targs)
    job.env.update(FTRT_LOG="info")
    job.start()
    rc = job.wait(180)
    check(rc == 0, f"job survives the death with a survivor behind and exits 0 (got {rc})")
    check("logical rank 0 abandoned step 59 after its allreduce" in job.out,
          "logical rank 0 abandoned step 59 after its allreduce: a step behind")
    rep = job.load_report()
    f = rep["failures"]
    check(len(f) == 1 and f[0]["recovered"] and f[0]["resume_step"] == 60 and
          f[0]["state_from"] == "peers",
          "one failure, recovered from the survivors' state (peers), resumed at step 60")
    got = re.findall(r"state transfer to (\d+) member\(s\)", job.out)
    check(got and set(got) == {"2"},
          f"the state went to 2 members, the spare and the survivor behind ({got})")
    fps = set(re.findall(r"params fnv1a64: ([0-9a-f]+)", job.out))
    check(len(fps) == 1, f"every trainer ends with the same parameters ({sorted(fps)})")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_hang(args):
    need_reference(args)
    job = mlp_job(args, "hang", timeout_ms=1000).start()
    victim = job.wait_trainer(1, 60)
    job.inject(signal.SIGSTOP, victim, "sigstop")
    rc = job.wait(180)
    check(rc == 0, f"job survives the frozen trainer and exits 0 (got {rc})")
    rep = job.load_report()
    check(len(rep["failures"]) == 1, "one failure reported")
    f = rep["failures"][0]
    check(f["kind"] == "heartbeat_timeout" and f["recovered"], "detected by heartbeat timeout")
    check(0.9 <= f["mttd_s"] < 3.0, f"MTTD {f['mttd_s']:.3f} s is about the 1 s timeout")
    try:
        os.kill(victim["pid"], 0)
        alive = True
    except ProcessLookupError:
        alive = False
    check(not alive, "the frozen rank was fenced (killed)")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_kill2(args):
    """Two failures in sequence with two hot spares: logical rank 0 (the rank that writes the
    output), then logical rank 3. Both are replaced; the result is byte-identical."""
    need_reference(args)
    job = mlp_job(args, "kill2", np_=7, spares=2).start()
    first = job.wait_trainer(0, 50)
    job.inject(signal.SIGKILL, first, "sigkill")
    st = job.wait_status(lambda s: s["job"] == "running" and s["epoch"] == 1 and trainer(s, 3)
                         and trainer(s, 3)["steps_done"] >= 120)
    job.inject(signal.SIGKILL, trainer(st, 3), "sigkill")
    rc = job.wait(180)
    check(rc == 0, f"job survives two kills and exits 0 (got {rc})")
    rep = job.load_report()
    check(len(rep["failures"]) == 2 and all(f["recovered"] for f in rep["failures"]),
          "two failures reported, both recovered")
    check(rep["epoch"] == 2, "two epoch changes")
    spares = {f["spare_world_rank"] for f in rep["failures"]}
    check(spares == {5, 6}, f"each failure took a different hot spare ({sorted(spares)})")
    check(all(f["mttd_source"] == "fault_log" and f["mttd_s"] < 1.0 for f in rep["failures"]),
          "both detected within 1 s of the injection")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_stall(args):
    """A trainer stuck in its own code (heartbeats still flowing) is declared failed by the
    progress detector, fenced and replaced; the result is byte-identical."""
    need_reference(args)
    job = mlp_job(args, "stall", timeout_ms=1000)
    job.cmd += ["--hang-rank", "1", "--hang-at-step", "60"]
    job.env["FTRT_PROGRESS_TIMEOUT_MS"] = "2000"
    job.start()
    rc = job.wait(180)
    check(rc == 0, f"job survives the stalled trainer and exits 0 (got {rc})")
    rep = job.load_report()
    check(len(rep["failures"]) == 1, "one failure reported")
    f = rep["failures"][0]
    check(f["kind"] == "progress_stall" and f["recovered"] and f["logical_rank"] == 1,
          "logical rank 1 declared failed for stalled progress, and recovered")
    check(1.9 <= f["mttd_bound_s"] < 6.0,
          f"detected {f['mttd_bound_s']:.2f} s after its last progress (timeout 2 s)")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_straggler(args):
    """A slow trainer is reported as a straggler and never declared failed."""
    need_reference(args)
    job = mlp_job(args, "straggler")
    job.cmd += ["--slow-rank", "2", "--slow-ms", "30"]
    job.start()
    rc = job.wait(180)
    check(rc == 0, f"job exits 0 (got {rc})")
    rep = job.load_report()
    check(not rep["failures"], "nobody declared failed")
    s = [x for x in rep["stragglers"] if x["logical_rank"] == 2]
    check(len(s) == 1 and s[0]["ratio_to_median"] > 1.5,
          f"logical rank 2 reported as a straggler ({rep['stragglers']})")
    # A healthy trainer slowed for a moment by the machine (2 shared cores; seen once under
    # ASan with a ratio of 1.88 at step 9) may be reported too; the slowed one must stand out.
    others = [x for x in rep["stragglers"] if x["logical_rank"] != 2]
    check(len(s) == 1 and all(x["ratio_to_median"] < s[0]["ratio_to_median"] for x in others),
          f"no other trainer as slow as logical rank 2 ({others})")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_intruder(args):
    """Connections without the job secret, garbage and oversized messages are dropped and
    counted and never change membership."""
    import socket
    import struct
    need_reference(args)
    job = mlp_job(args, "intruder")
    job.cmd += ["--step-sleep-ms", "40"]  # long enough for the silent connection to time out
    job.start()
    st = job.wait_status(lambda s: s["job"] == "running" and trainer(s, 0)
                         and trainer(s, 0)["steps_done"] >= 30)
    host, port = st["control_plane"].rsplit(":", 1)
    magic = 0x46545254
    hello = struct.pack("<Qii64s", 12345, 1, os.getpid(), b"intruder")   # wrong secret
    attempts = [
        struct.pack("<IIIi", magic, 1, len(hello), 0) + hello,            # bad secret, rank 1
        b"GET / HTTP/1.0\r\n\r\n",                                     # garbage
        struct.pack("<IIIi", magic, 3, 1 << 30, 0),                        # oversized heartbeat
        b"",                                                                # silent connection
    ]
    socks = []
    for payload in attempts:
        s = socket.create_connection((host, int(port)), timeout=5)
        if payload:
            s.sendall(payload)
        socks.append(s)
    rc = job.wait(180)
    for s in socks:
        s.close()
    check(rc == 0, f"job finishes undisturbed (got {rc})")
    rep = job.load_report()
    check(not rep["failures"] and rep["epoch"] == 0, "membership never changed")
    n = rep["control_plane"]["rejected_connections"]
    check(n >= 4, f"all four bad connections rejected and counted ({n})")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_relaunch(args):
    need_reference(args)
    job = mlp_job(args, "relaunch").start()
    job.wait_status(lambda s: s["last_committed_step"] >= 75)
    job.kill_all()  # the whole job, mpirun included
    run_dirs = glob.glob(os.path.join(h.ftrt_run_module().runs_parent(), f"{job.proc.pid}-*"))
    check(not run_dirs, f"kill_all removed the killed ftrt-run's run directory ({run_dirs})")
    time.sleep(0.5)
    with open(os.path.join(job.ckpt, "LATEST")) as f:
        latest = f.read().strip()
    check(latest.startswith("step-") and int(latest[5:]) >= 75, f"LATEST names {latest}")
    job2 = mlp_job(args, "relaunch", fresh=False).start()
    rc = job2.wait(180)
    check(rc == 0, f"relaunched job exits 0 (got {rc})")
    check(f"resumed at step {int(latest[5:])}" in job2.out or "resumed at step" in job2.out,
          "the relaunched job resumed from the checkpoint")
    expect_identical(job2, args)


@h.case(CASES, fixture="required")
def case_nospare(args):
    need_reference(args)
    job = mlp_job(args, "nospare", np_=5, spares=0).start()
    st = job.wait_status(lambda s: s["last_committed_step"] >= 50 and trainer(s, 0))
    victim = trainer(st, 0)
    t_kill = time.monotonic()
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(60)
    took = time.monotonic() - t_kill
    check(rc != 0, f"job exits non-zero (got {rc})")
    check(took < 15, f"job exited promptly ({took:.1f} s after the kill)")
    check("no hot spare is left" in job.out, "a clear error names the cause")
    rep = job.load_report()
    check(rep["status"] == "failed" and rep["error"] == "FTRT_ENOSPARE", "report says FTRT_ENOSPARE")
    committed = rep["checkpoints"]["last_committed_step"]
    check(committed >= 50, f"a committed checkpoint remains (step {committed})")
    job2 = mlp_job(args, "nospare", np_=5, spares=0, fresh=False).start()
    rc = job2.wait(180)
    check(rc == 0 and "resumed at step" in job2.out, "a relaunch resumes from it and finishes")
    expect_identical(job2, args)


@h.case(CASES)
def case_apperror(args):
    job = mlp_job(args, "apperror", np_=6, spares=1)
    i = job.cmd.index("--ckpt-dir")
    job.cmd[i:i] = ["--error-rank", "1", "--error-at-step", "40", "--step-sleep-ms", "10"]
    t0 = time.monotonic()
    rc = job.start().wait(120)
    took = time.monotonic() - t0
    check(rc != 0, f"job exits non-zero (got {rc})")
    check("stops at step 40 with an application error" in job.out, "the trainer said why")
    rep = job.load_report()
    check(rep["status"] == "failed", f"report status failed (got {rep['status']})")
    check(rep["error"] == "EIO", f"report error is the trainer's EIO (got {rep['error']})")
    check(not rep["failures"], "no failure recovered with a spare: the error is the job's end")
    st = h.load_json(job.status)
    check(st["job"] == "failed", f"status file says failed (got {st['job']})")
    check(took < 60, f"bounded exit ({took:.1f} s)")
    print(f"apperror: exit {rc} after {took:.1f} s; report {rep['status']} {rep['error']}")


@h.case(CASES)
def case_ckptnotdir(args):
    d = os.path.join(args.work, "ckptnotdir")
    job = h.train_job(d, args.bin, 5, h.MLP_ARGS, spares=0,
                      status=os.path.join(d, "status.json"))
    with open(job.ckpt, "w") as f:  # a regular file where the checkpoint directory must go
        f.write("not a directory\n")
    sub = os.path.join(job.ckpt, "sub")
    # train_mlp --ckpt-dir under that file: train_mlp names its option before joining the job
    i = job.cmd.index("--ckpt-dir")
    job.cmd[i + 1] = sub
    rc = job.start().wait(120)
    check(rc != 0, f"--ckpt-dir: job exits non-zero (got {rc})")
    check(f"train_mlp: --ckpt-dir {sub}: {job.ckpt} is not a directory" in job.out,
          "train_mlp's error names --ckpt-dir, the path and the regular file")
    check(job.out.rstrip().splitlines()[-1].startswith("ftrt-run: ") and "--ckpt-dir" in
          job.out.rstrip().splitlines()[-1], "ftrt-run's last line names the cause")
    # FTRT_CKPT_DIR: the library's own check at ftrt_init
    del job.cmd[i:i + 2]
    job.env["FTRT_CKPT_DIR"] = job.ckpt
    t0 = time.monotonic()
    rc = job.start().wait(120)
    took = time.monotonic() - t0
    check(rc != 0, f"FTRT_CKPT_DIR: job exits non-zero (got {rc})")
    check("cannot create the checkpoint directory" in job.out and job.ckpt in job.out,
          "the error names the directory")
    check("Not a directory" in job.out, "and the reason")
    last = job.out.rstrip().splitlines()[-1]
    check(last.startswith("ftrt-run: ") and "cannot create the checkpoint directory" in last,
          f"ftrt-run's last line names the cause ({last})")
    check(took < 60, f"bounded exit ({took:.1f} s)")
    print(f"ckptnotdir: exit {rc} after {took:.1f} s")


# exitstatus: 20 steps, no checkpoint, no sleep (about 1 s per job); (world rank, world size,
# spares): the trainer of logical rank 1, the coordinator, the unused hot spare
EXIT_ARGS = ["--steps", "20", "--batch", "32", "--hidden", "64", "--seed", "7",
             "--ckpt-every", "0"]
EXIT_JOBS = ((2, 4, 0), (0, 4, 0), (4, 5, 1))


@h.case(CASES, timeout_s=90)
def case_exitstatus(args):
    for rank, np_, spares in EXIT_JOBS:
        job = h.train_job(os.path.join(args.work, f"exitstatus{rank}"), args.bin, np_=np_,
                          spares=spares, train_args=EXIT_ARGS + ["--exit-rank", str(rank),
                                                                 "--exit-status", "3"])
        rc = job.run(60)
        rep, st, summ = job.load_report(), h.load_json(job.status), job.load_summary()
        check(rep["status"] == st["job"] == summ["job"] == "finished",
              f"world rank {rank}: the job itself finished (report {rep['status']}, status "
              f"file {st['job']})")
        check(rc == 3, f"world rank {rank} exited 3 after ftrt_finalize: ftrt-run exits 3 "
              f"(got {rc}; mpirun's own status {summ['mpirun_status']})")
        check(summ["exit_status"] == 3 and summ["rank_exit_statuses"] == {str(rank): 3},
              f"the summary records world rank {rank}'s status alone ({summ})")
        last = job.out.rstrip().splitlines()[-1]
        check(last.startswith("ftrt-run: ") and f"world rank {rank}'s process exited with "
              "status 3" in last, f"ftrt-run's last line names the rank ({last})")
        print(f"exitstatus: world rank {rank} of {np_}: ftrt-run exit {rc} after "
              f"{job.elapsed:.1f} s (mpirun {summ['mpirun_status']})", flush=True)


# Jobs that end failed without a dead process, launched the way tools/ftrt-chaos launches
# one-host jobs: under plain mpirun (no tools/ftrt-run to clean up after a hang). Open MPI
# 4.1's MPI_Finalize can hang in its PMIx fence when some processes of the world call it and
# others exit without it, so every process must take the same decision; FTRT_LOG=info makes
# each one log it. Small jobs: 1 coordinator + 2 trainers + 1 spare, 20 steps of a tiny MLP.
# A launch that hangs never ends: END_BOUND_S leaves room for a loaded machine under ASan.
END_ARGS = ["--steps", "20", "--batch", "8", "--hidden", "16", "--seed", "7", "--ckpt-every",
            "20"]
END_NP, END_SPARES = 4, 1
END_BOUND_S = 20


def plain_mpirun_job(d, binary, train_args, ckpt, params=None):
    """train_mlp under plain `mpirun --enable-recovery` in d, each rank wrapped by sh so that
    its own exit status lands in d/exit.<world rank>; FTRT_LOG=info, the status file in ckpt."""
    wrapper = ['sh', '-c', '"$@"; echo $? > "$FTRT_ITEST_EXIT.$OMPI_COMM_WORLD_RANK"', 'sh']
    argv = [binary] + train_args + ["--ckpt-dir", ckpt, "--report", os.path.join(d, "report.json")]
    if params:
        argv += ["--params-out", params]
    env = h.job_env({"FTRT_LOG": "info", "FTRT_ITEST_EXIT": os.path.join(d, "exit"),
                     # no matmul measurement (slow under ASan); an upper bound, so eMFU <= 1
                     "FTRT_PEAK_FLOPS": "1e15"},
                    spares=END_SPARES)
    job = h.Job(d, h.mpirun_cmd(END_NP, wrapper + argv), env, status=os.path.join(ckpt, "status.json"))
    job.ckpt, job.report = ckpt, os.path.join(d, "report.json")
    for w in range(END_NP):
        if os.path.exists(os.path.join(d, f"exit.{w}")):
            os.unlink(os.path.join(d, f"exit.{w}"))
    return job


def rank_exits(job):
    """{world rank: exit status} from the sh wrappers' files (a rank missing: not exited)."""
    out = {}
    for w in range(END_NP):
        try:
            with open(os.path.join(job.dir, f"exit.{w}")) as f:
                out[w] = int(f.read().strip())
        except (OSError, ValueError):
            pass
    return out


def check_finalize_skipped(job):
    """Every world rank logged that it does not call MPI_Finalize (an aborted job: none does)."""
    skipped = sorted(w for w in range(END_NP)
                     if any(l.startswith(f"ftrt[w{w}] ") and "not calling MPI_Finalize" in l
                            for l in job.out.splitlines()))
    check(skipped == list(range(END_NP)),
          f"every process of the aborted job skips MPI_Finalize (those that said so: {skipped})")


def flip_data_bit(path):
    """Flips one bit in the middle of the first region's data of a checkpoint shard (its region
    table, checkpoint/format.h: u32 nregions at byte 32, 112-byte entries from byte 40 with u64
    slice_bytes at +88 and u64 file_offset at +96). Returns the offset."""
    import struct
    with open(path, "r+b") as f:
        head = f.read(4096)
        (nreg,) = struct.unpack_from("<I", head, 32)
        nbytes, foff = struct.unpack_from("<QQ", head, 40 + 88)
        if nreg < 1 or nbytes < 1:
            raise Fail(f"{path}: no region data to damage")
        off = foff + nbytes // 2
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x10]))
    return off


@h.case(CASES, timeout_s=120)
def case_nockpt(args):
    d = os.path.join(args.work, "nockpt")
    first = h.train_job(d, args.bin, END_NP, END_ARGS, spares=END_SPARES)
    first.env["FTRT_PEAK_FLOPS"] = "1e15"  # an upper bound: no eMFU above 1 (and warning)
    rc = first.run(60)
    check(rc == 0, f"the first launch finishes (got {rc})")
    with open(os.path.join(first.ckpt, "LATEST")) as f:
        latest = f.read().strip()
    steps = sorted(e for e in os.listdir(first.ckpt) if e.startswith("step-"))
    check(latest == "step-20" and steps == ["step-20"], f"one committed step ({steps}, LATEST "
          f"{latest})")
    shard = os.path.join(first.ckpt, "step-20", "rank-0.ftrt")
    print(f"  flipped a bit of {shard} at byte {flip_data_bit(shard)}", flush=True)
    args40 = END_ARGS[:]
    args40[1] = "40"
    # The relaunch under plain mpirun: it must end by itself, every process with a non-zero
    # status, none calling MPI_Finalize (before the fix, the coordinator and the spare called
    # it while the trainers exited without: they could hang there forever).
    job = plain_mpirun_job(os.path.join(d, "plain"), args.bin, args40, first.ckpt)
    rc = job.run(60)
    print(f"  plain mpirun exited {rc} after {job.elapsed:.1f} s (Open MPI 4.1's mpirun "
          f"--enable-recovery exits 0 whatever its ranks' statuses)", flush=True)
    check(job.elapsed < END_BOUND_S, f"the launch ends by itself ({job.elapsed:.1f} s)")
    check(f"no usable checkpoint in {first.ckpt}" in job.out, "an error names the cause and the "
          "directory")
    check_finalize_skipped(job)
    exits = rank_exits(job)
    check(len(exits) == END_NP and all(v != 0 for v in exits.values()),
          f"every process of the failed job exits non-zero (world rank: status {exits})")
    rep = job.load_report()
    check(rep["status"] == "failed" and rep["error"] == "FTRT_ENOCKPT",
          f"report: failed, FTRT_ENOCKPT (got {rep['status']}, {rep['error']})")
    st = h.load_json(job.status)
    check(st["job"] == "failed", f"status file says failed (got {st['job']})")
    with open(os.path.join(first.ckpt, "LATEST")) as f:
        check(f.read().strip() == "step-20", "the committed checkpoint is left as it was")
    # Through tools/ftrt-run, the supported launcher: exit 1, its last line names the cause.
    again = h.train_job(d, args.bin, END_NP, args40, spares=END_SPARES, fresh=False)
    rc = again.run(60)
    last = again.out.rstrip().splitlines()[-1]
    check(rc == 1, f"ftrt-run exits 1 (got {rc})")
    # ftrt-run names the job's first ERROR line, and which process's line reaches mpirun first
    # is a race: the trainer's ("no usable checkpoint in <dir>") or the coordinator's abort
    # ("... no usable committed checkpoint was found (FTRT_ENOCKPT)"). Either names the cause.
    check(last.startswith("ftrt-run: ") and ("no usable checkpoint in" in last
                                             or "(FTRT_ENOCKPT)" in last),
          f"ftrt-run's last line names the cause ({last})")
    print(f"nockpt: plain mpirun {job.elapsed:.1f} s, rank exits {exits}; ftrt-run exit {rc}")


@h.case(CASES, timeout_s=120)
def case_lateerror(args):
    d = os.path.join(args.work, "lateerror")
    ckpt = os.path.join(d, "ckpt")
    shutil.rmtree(d, ignore_errors=True)
    # Logical rank 0 finishes its steps, then cannot write --params-out (a missing directory):
    # its goodbye carries -EIO after the other trainer may have said goodbye already.
    job = plain_mpirun_job(d, args.bin, END_ARGS, ckpt,
                           params=os.path.join(d, "no-such-dir", "final.params"))
    rc = job.run(60)
    print(f"  plain mpirun exited {rc} after {job.elapsed:.1f} s", flush=True)
    check(job.elapsed < END_BOUND_S, f"the launch ends by itself ({job.elapsed:.1f} s)")
    check("cannot create" in job.out and "no-such-dir" in job.out, "train_mlp said why")
    rep = job.load_report()
    check(rep["status"] == "failed" and rep["error"] == "EIO",
          f"report: failed, EIO (got {rep['status']}, {rep['error']})")
    check_finalize_skipped(job)
    exits = rank_exits(job)
    check(len(exits) == END_NP and exits.get(0) and exits.get(END_NP - 1),
          f"every process exited, the coordinator and the unused spare non-zero ({exits})")
    print(f"lateerror: plain mpirun {job.elapsed:.1f} s, rank exits {exits}")


# Checkpoint engine cases. A bigger model (12 MB of state, 3 MB shards) written slowly
# (256 KiB requests, 100 ms after each: >= 1.2 s per shard) so that a kill lands mid-write.
CKPT_ARGS = ["--steps", "60", "--batch", "8", "--hidden", "20000", "--ckpt-every", "20",
             "--step-sleep-ms", "5"]
CKPT_ENV = {"FTRT_CKPT_CHUNK_KB": "256", "FTRT_DEBUG_CKPT_WRITE_DELAY_MS": "100"}


# Partner replicas of sharded state: the momentum registered SHARDED, replicas refreshed every
# 5 steps, a checkpoint every 25. Rank 0 holds at step HOLD (all trainers have done HOLD steps
# and wait in its allreduce) so that every fault lands at a known step: the last replica is then
# REPLICA_AT, the last committed checkpoint CKPT_AT.
HOLD, REPLICA_AT, CKPT_AT = 62, 60, 50


def replica_job(args, name, np_=6, spares=None, env=None):
    job = mlp_job(args, name, np_=np_, spares=spares)
    job.cmd += ["--sharded-momentum", "--hold-at-step", str(HOLD), "--hold-ms", "4000"]
    job.env.update({"FTRT_SHARD_REPLICA_EVERY": "5", "FTRT_LOG": "info"})
    job.env.update(env or {})
    return job


def wait_hold(job):
    """The status file once every trainer has done HOLD steps (logical rank 0 holds there)."""
    def held(st):
        tr = [r for r in st["ranks"] if r["role"] == "trainer"]
        return st.get("job") == "running" and tr and all(r["steps_done"] >= HOLD for r in tr)
    return job.wait_status(held, timeout=90)


@h.case(CASES, fixture="required")
def case_replica(args):
    """A trainer SIGKILLed with sharded state: its shard comes from its partner's memory, every
    member resumes at the last replica (step 60) instead of the last checkpoint (step 50), the
    disk is not read, and the result is byte-identical to the fault-free run."""
    need_reference(args)
    job = replica_job(args, "replica").start()
    st = wait_hold(job)
    job.inject(signal.SIGKILL, trainer(st, 2), "sigkill")
    rc = job.wait(180)
    check(rc == 0, f"job survives the kill and exits 0 (got {rc})")
    rep = job.load_report()
    check(len(rep["failures"]) == 1 and rep["failures"][0]["recovered"], "one failure, recovered")
    f = rep["failures"][0]
    check(f["state_from"] == "replica",
          f"state from the partner replicas in memory (report says {f['state_from']})")
    check(f["resume_step"] == REPLICA_AT,
          f"resumed at the last replica, step {REPLICA_AT} (got {f['resume_step']})")
    check(f["rework_steps"] == HOLD - REPLICA_AT,
          f"rework {HOLD - REPLICA_AT} steps, not {HOLD - CKPT_AT} (got {f['rework_steps']})")
    check("from the partner replicas in memory" in job.out and "reload checkpoint" not in job.out,
          "the log shows the in-memory restore and no checkpoint reload")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_replica_pair(args):
    """A trainer and the partner holding its replica SIGKILLed together (logical ranks 1 and 2:
    on one host the partner of rank r is r + 1): nobody holds rank 1's shard, so the job falls
    back to the committed checkpoint (step 50), and the result is still byte-identical."""
    need_reference(args)
    job = replica_job(args, "replica-pair", np_=7, spares=2).start()
    st = wait_hold(job)
    a, b = trainer(st, 1), trainer(st, 2)
    job.inject(signal.SIGKILL, a, "sigkill")
    job.inject(signal.SIGKILL, b, "sigkill")
    rc = job.wait(180)
    check(rc == 0, f"job survives losing a rank and its partner, exits 0 (got {rc})")
    rep = job.load_report()
    fs = rep["failures"]
    check(len(fs) == 2 and all(f["recovered"] for f in fs), "two failures, both recovered")
    last = max(fs, key=lambda f: f["epoch"])
    check(last["state_from"] == "checkpoint" and last["resume_step"] == CKPT_AT,
          f"the last recovery reloads checkpoint step {CKPT_AT} ({last['state_from']}, "
          f"{last['resume_step']})")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_replica_twice(args):
    """Two trainers SIGKILLed one after the other, the second before the replicas' next refresh
    (two spares; logical rank 0 also holds at step HOLD + 1, which it reaches once more only
    after the first recovery): the first promoted spare keeps the sharded image it received as
    its own image, shard-only, so the second recovery resumes from memory again (step 60) with
    that spare a survivor behind, receiving the replicated regions with the second spare (the
    state transfer goes to 2 members), byte-identical."""
    need_reference(args)
    job = replica_job(args, "replica-twice", np_=7, spares=2)
    job.cmd += ["--hold-at-step", str(HOLD + 1)]
    job.start()
    st = wait_hold(job)
    job.inject(signal.SIGKILL, trainer(st, 2), "sigkill")

    def held_again(st):
        tr = [r for r in st["ranks"] if r["role"] == "trainer"]
        return (st.get("job") == "running" and st.get("epoch", 0) >= 1 and tr
                and all(r["steps_done"] >= HOLD + 1 for r in tr))
    st = job.wait_status(held_again, timeout=90)
    # logical rank 3's sharded image is held by logical rank 0 (partner r + 1), not by the
    # promoted spare (it holds none before the next refresh)
    job.inject(signal.SIGKILL, trainer(st, 3), "sigkill")
    rc = job.wait(180)
    check(rc == 0, f"job survives both kills and exits 0 (got {rc})")
    fs = sorted(job.load_report()["failures"], key=lambda f: f["epoch"])
    check(len(fs) == 2 and all(f["recovered"] and f["state_from"] == "replica"
                               and f["resume_step"] == REPLICA_AT for f in fs),
          f"two failures, both resumed from the partner replicas at step {REPLICA_AT} "
          f"({[(f['state_from'], f['resume_step']) for f in fs]})")
    check(fs[1]["rework_steps"] == HOLD + 1 - REPLICA_AT,
          f"the second redid {HOLD + 1 - REPLICA_AT} steps (got {fs[1]['rework_steps']})")
    check("state transfer to 2 member(s)" in job.out,
          "the second recovery sends the replicated regions to the new spare and to the first "
          "one (a survivor behind: its own image is shard-only)")
    check("reload checkpoint" not in job.out, "no checkpoint reload")
    expect_identical(job, args)


@h.case(CASES, fixture="required")
def case_replica_corrupt(args):
    """Every held replica corrupted in memory after its check on arrival
    (FTRT_TEST_REPLICA_CORRUPT=1): the holder's CRC32C check before the recovery refuses it, the
    job falls back to the checkpoint, and the result is byte-identical."""
    need_reference(args)
    job = replica_job(args, "replica-corrupt", env={"FTRT_TEST_REPLICA_CORRUPT": "1"}).start()
    st = wait_hold(job)
    job.inject(signal.SIGKILL, trainer(st, 2), "sigkill")
    rc = job.wait(180)
    check(rc == 0, f"job survives the kill and exits 0 (got {rc})")
    f = job.load_report()["failures"][0]
    check(f["state_from"] == "checkpoint" and f["resume_step"] == CKPT_AT,
          f"the corrupted replica is not used: checkpoint step {CKPT_AT} ({f['state_from']}, "
          f"{f['resume_step']})")
    check("fails its CRC32C" in job.out, "the corruption is logged")
    expect_identical(job, args)


def ckpt_job(args, name, np_=5, spares=0, fresh=True):
    job = mlp_job(args, name, np_=np_, spares=spares, fresh=fresh)
    job.cmd += CKPT_ARGS
    job.env.update(CKPT_ENV)
    return job


def ckpt_reference(args):
    """Final parameters of a fault-free run with CKPT_ARGS (cached)."""
    path = os.path.join(args.work, "ckpt-reference.params")
    if not os.path.exists(path):
        job = ckpt_job(args, "ckpt-reference").start()
        rc = job.wait(240)
        check(rc == 0, f"fault-free run of the bigger model exits 0 (got {rc})")
        rep = job.load_report()
        check(rep["checkpoints"]["committed"] == 3, "its 3 checkpoints committed")
        shutil.copyfile(job.params, path)
    return path


def read_latest(job):
    try:
        with open(os.path.join(job.ckpt, "LATEST")) as f:
            return f.read().strip()
    except OSError:
        return None


@h.case(CASES, timeout_s=600)
def case_ckptkill(args):
    """A trainer SIGKILLed while its shard is being written (no spare: the job fails) leaves
    the previous checkpoint committed: LATEST still names it, the step being written has no
    MANIFEST, and a relaunch resumes from it and ends byte-identical to a fault-free run."""
    ref = ckpt_reference(args)
    job = ckpt_job(args, "ckptkill").start()
    deadline = time.monotonic() + 120
    while read_latest(job) != "step-20":
        if time.monotonic() > deadline or job.proc.poll() is not None:
            raise Fail("step 20 was never committed")
        time.sleep(0.01)
    step40 = os.path.join(job.ckpt, "step-40")
    while not (os.path.isdir(step40) and
               any(".ftrt.tmp" in n for n in os.listdir(step40))):
        if time.monotonic() > deadline or job.proc.poll() is not None:
            raise Fail("the write of step 40 was never seen in flight")
        time.sleep(0.005)
    st = job.status_json()
    victim = trainer(st, 1)
    job.inject(signal.SIGKILL, victim, "sigkill-during-write")
    partial = sorted(os.listdir(step40))
    check(not os.path.exists(os.path.join(step40, "MANIFEST")),
          f"the kill landed during the write of step 40 (files then: {partial})")
    rc = job.wait(60)
    check(rc != 0, f"the job (no spare) exits non-zero (got {rc})")
    check(read_latest(job) == "step-20", f"LATEST still names step-20 ({read_latest(job)})")
    check(not os.path.exists(os.path.join(step40, "MANIFEST")), "step 40 was never committed")
    rep = job.load_report()
    check(rep["checkpoints"]["last_committed_step"] == 20, "the report's last committed step is 20")
    job2 = ckpt_job(args, "ckptkill", fresh=False).start()
    rc = job2.wait(240)
    check(rc == 0 and "resumed at step 20" in job2.out,
          "a relaunch restores step 20 (every CRC verified) and finishes")
    check(same_bytes(job2.params, ref), "final parameters are byte-identical to the fault-free run")


@h.case(CASES, timeout_s=600)
def case_ckptskip(args):
    """FTRT_CKPT_POLICY=skip with checkpoints requested faster than they are written: the ones
    that find both staging buffers busy are skipped, the report counts them, the others commit,
    and training is not slowed down or changed."""
    ref = ckpt_reference(args)
    job = ckpt_job(args, "ckptskip", np_=6, spares=1)
    job.cmd += ["--ckpt-every", "4"]
    job.env["FTRT_CKPT_POLICY"] = "skip"
    # The first write waits until 2 more checkpoints were requested: the second takes the other
    # staging buffer and the third finds both busy, whatever the machine's speed (under ASan on
    # a busy machine the writes used to keep up, and nothing was skipped).
    job.env["FTRT_DEBUG_CKPT_HOLD_FIRST"] = "2"
    job.start()
    rc = job.wait(240)
    check(rc == 0, f"job exits 0 (got {rc})")
    ck = job.load_report()["checkpoints"]
    check(ck["skipped"] >= 1, f"skipped checkpoints are counted ({ck})")
    check(ck["committed"] >= 1 and ck["committed"] + ck["skipped"] + ck["failed"] == 60 // 4,
          "every requested checkpoint is committed, skipped or failed")
    check(ck["failed"] == 0, "none failed")
    check(same_bytes(job.params, ref), "final parameters are byte-identical to the fault-free run")


@h.case(CASES, timeout_s=600, fixture="required")
def case_ckptenospc(args):
    """The checkpoint file system fills up (a tmpfs filled by a filler file for 1.5 s): the
    checkpoints of that time fail cleanly, training goes on, later checkpoints commit, the
    report counts the failures, and the last checkpoint restores."""
    need_reference(args)
    job = h.train_job(os.path.join(args.work, "ckptenospc"), args.bin,
                      status=os.path.join(args.work, "ckptenospc", "status.json"))
    os.makedirs(job.ckpt, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", job.ckpt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise Skip(f"cannot mount a tmpfs ({r.stderr.strip()})")
    try:
        # the status file is not on the full file system (DIR/status.json, see above)
        job.env["FTRT_STATUS_FILE"] = job.status
        job.start()
        job.wait_status(lambda s: s["last_committed_step"] >= 25)
        filler = os.path.join(job.ckpt, "filler")
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            except OSError:
                pass
        print("  the checkpoint file system is full", flush=True)
        time.sleep(1.5)
        os.unlink(filler)
        rc = job.wait(180)
        check(rc == 0, f"training went on and the job finished (got {rc})")
        rep = job.load_report()
        ck = rep["checkpoints"]
        check(ck["failed"] >= 1, f"the report counts the failed checkpoint(s) ({ck})")
        check(ck["committed"] >= 2 and ck["last_committed_step"] == STEPS,
              "later checkpoints committed, the last at the final step")
        check("No space left on device" in job.out, "the failure names ENOSPC")
        expect_identical(job, args)
        job2 = h.train_job(job.dir, args.bin, status=job.status, fresh=False)
        job2.env["FTRT_STATUS_FILE"] = job.status
        job2.start()
        rc = job2.wait(120)
        check(rc == 0 and f"resumed at step {STEPS}" in job2.out,
              "a relaunch restores the last committed checkpoint")
    finally:
        subprocess.run(["umount", "-l", job.ckpt])


if __name__ == "__main__":
    sys.exit(h.case_main(CASES, __doc__))
