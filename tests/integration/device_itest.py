#!/usr/bin/env python3
"""MPI integration tests of device regions: real mpirun jobs of examples/train_mlp --device sim
(parameters and momentum in the simulated device's memory, kernels/loc_sim.c, a test
arrangement; every rank runs with FTRT_TEST_SIM_DEVICE=1) or, with --device cuda, of
train_mlp_gpu --device cuda (the state in CUDA memory of a GPU, through libftrt_gpu's CUDA
device backend, checkpoint/ckpt_device.c; every case skips, exit 77, where
`train_mlp_gpu --device cuda --check-device` finds no usable GPU), real processes killed by
signals. Python 3 standard library only.

Usage: device_itest.py [--device sim|cuda] --bin BUILD/examples/train_mlp --work DIR <case>
       device_itest.py --list   (the cases, their ctest timeouts and fixtures: read by CMake)
Cases (each compares the final parameters with a fault-free run's, byte for byte):
  reference   a fault-free --device run (kept as DIR/device.params), byte-identical to the
              same run with the state in host memory; its device regions fingerprinted every
              10 steps (the silent-data-corruption check, CRC32C through the device backend)
  relaunch    no hot spare: a trainer SIGKILLed after a committed checkpoint, the job fails with
              FTRT_ENOSPARE; a relaunch restores the device regions from the checkpoint
              (CRC32C checked on the way in) and finishes
  spare       a trainer SIGKILLed mid-run with a hot spare: the spare takes its place and gets
              the device regions from the survivors (state_from "peers": the recovery's
              chunked, CRC32C-checked transfer staged through host memory), no checkpoint read;
              the first chunk is corrupted on its way in once (FTRT_TEST_XFER_CORRUPT_CHUNK):
              caught by the CRC32C check of the copy into device memory and sent again
  replica     momentum SHARDED in device memory, partner replicas every 5 steps (images in host
              memory, copied through the device backend); logical rank 0 holds at step 67, a
              trainer SIGKILLed there: its shard comes from its partner's memory, resume at
              the last replica (65, not the checkpoint at 60), rework 2 steps (<= K + 1)
  erasure     the same with erasure groups (FTRT_SHARD_REDUNDANCY=erasure: one group of the 3
              trainers, 2 parity) and 2 spares: two trainers SIGKILLed at once at the hold,
              both sharded images rebuilt from the survivor's image and parity (host memory,
              copied from and into device memory through the device backend), resume at 65,
              rework 2 steps, byte-identical
  flip        silent data corruption in device memory: logical rank 1 flips one bit of one
              weight of its device parameters after its update of step 70 (train_mlp
              --flip-rank/--flip-at-step, from inside the process: an injector outside cannot
              reach CUDA memory); fingerprints every 4 steps, checkpoints every 2 (4 kept): the
              majority of 3 names that rank within 4 steps, the spare replaces it, every member
              reloads the newest checkpoint before the last agreement into device memory
(The images are host memory whatever the regions' location, so a corrupted image is refused
before use by the same check as mpi.replica_corrupt's; not repeated here, to keep CI short.)
Exit 0 = pass, 1 = fail, 77 = skipped. Jobs, waits and kills: tests/harness/ftrt_harness.py.
"""
import os
import re
import shutil
import signal
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import ftrt_harness as h  # noqa: E402
from ftrt_harness import check, same_bytes, trainer  # noqa: E402

STEPS = 120
# 3 trainers, a checkpoint every 20 steps, 10 ms per step at least: a few seconds per job.
ARGS = ["--steps", str(STEPS), "--batch", "32", "--hidden", "64", "--seed", "11",
        "--step-sleep-ms", "10", "--ckpt-every", "20"]
# The environment of each device's jobs; the defaults otherwise: fingerprints every 10 steps.
ENV = {"sim": {"FTRT_TEST_SIM_DEVICE": "1"}, "cuda": {}}
CASES = {}


def add_args(ap):
    ap.add_argument("--device", choices=("sim", "cuda"), default="sim",
                    help="where the state lives: the simulated device (train_mlp, default) or "
                         "a GPU's CUDA memory (train_mlp_gpu)")


def need_device(args):
    """--device cuda: Skip unless `BIN --device cuda --check-device` finds a usable GPU (it
    prints which, or why none)."""
    if args.device != "cuda":
        return
    p = subprocess.run([args.bin, "--device", "cuda", "--check-device"], capture_output=True,
                       text=True, timeout=120)
    said = (p.stderr or p.stdout).strip()
    if p.returncode == h.SKIP:
        raise h.Skip(f"no usable CUDA device ({said})")
    check(p.returncode == 0, f"{os.path.basename(args.bin)} --check-device: {said}")


def job_of(args, name, np_=5, spares=1, device=True, fresh=True, extra=None, env=None):
    """args.bin with ARGS (+ --device sim|cuda) in WORK/name, np_ ranks (coordinator and
    spares included)."""
    need_device(args)
    job = h.train_job(os.path.join(args.work, name), args.bin, np_,
                      ARGS + (["--device", args.device] if device else []) + list(extra or []),
                      spares=spares, fresh=fresh)
    job.env.update(ENV[args.device])
    job.env.update(env or {})
    return job


def ref_path(args):
    return os.path.join(args.work, "device.params")


def need_reference(args):
    if not os.path.exists(ref_path(args)):
        case_reference(args)


def expect_identical(job, args):
    check(same_bytes(job.params, ref_path(args)),
          "final parameters are byte-identical to the fault-free run")


@h.case(CASES, fixture="setup", timeout_s=120)
def case_reference(args):
    dev = job_of(args, "reference-device", np_=4, spares=0)
    check(dev.run(90) == 0, f"fault-free --device {args.device} job exits 0")
    rep = dev.load_report()
    check(rep["status"] == "finished" and rep["steps"] == STEPS and not rep["failures"],
          f"report: finished, {STEPS} steps, no failures")
    check(rep["checkpoints"]["committed"] == STEPS // 20, "a checkpoint committed every 20 steps")
    sdc = rep["sdc"]
    check(sdc["checks"] == STEPS // 10 and sdc["last_agreed_step"] == STEPS,
          f"the device regions fingerprinted every 10 steps, all agreeing ({sdc})")
    host = job_of(args, "reference-host", np_=4, spares=0, device=False)
    check(host.run(90) == 0, "the same job with the state in host memory exits 0")
    check(same_bytes(dev.params, host.params),
          "device and host runs end with byte-identical parameters")
    shutil.copyfile(dev.params, ref_path(args))


@h.case(CASES, fixture="required", timeout_s=120)
def case_relaunch(args):
    need_reference(args)
    job = job_of(args, "relaunch", np_=4, spares=0).start()
    st = job.wait_status(lambda s: s["last_committed_step"] >= 40 and trainer(s, 1))
    job.inject(signal.SIGKILL, trainer(st, 1), "sigkill")
    rc = job.wait(60)
    check(rc != 0, f"with no spare the job exits non-zero (got {rc})")
    rep = job.load_report()
    check(rep["status"] == "failed" and rep["error"] == "FTRT_ENOSPARE", "report: FTRT_ENOSPARE")
    committed = rep["checkpoints"]["last_committed_step"]
    check(committed >= 40, f"a committed checkpoint remains (step {committed})")
    job2 = job_of(args, "relaunch", np_=4, spares=0, fresh=False,
                  env={"FTRT_LOG": "info"}).start()
    rc = job2.wait(90)
    check(rc == 0 and f"resumed at step {committed}" in job2.out,
          f"a relaunch restores step {committed} into device memory and finishes")
    check(f"loaded step {committed}" in job2.out, "the restore read the checkpoint")
    expect_identical(job2, args)


@h.case(CASES, fixture="required", timeout_s=120)
def case_spare(args):
    need_reference(args)
    job = job_of(args, "spare", np_=5, spares=1,
                 env={"FTRT_LOG": "info", "FTRT_TEST_XFER_CORRUPT_CHUNK": "1"}).start()
    victim = job.wait_trainer(2, min_steps=50)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(90)
    check(rc == 0, f"job survives the kill and exits 0 (got {rc})")
    rep = job.load_report()
    check(len(rep["failures"]) == 1 and rep["failures"][0]["recovered"], "one failure, recovered")
    f = rep["failures"][0]
    check(f["spare_world_rank"] == 4, "the hot spare took the place")
    check(f["state_from"] == "peers",
          f"state from the survivors in memory (report says {f['state_from']})")
    check(f["rework_steps"] <= 1, f"rework {f['rework_steps']} step(s)")
    # The spare receives the state; so does a survivor that was a step behind the others when
    # the failure came (then 2 receivers, each refusing its corrupted first chunk once).
    got = re.findall(r"state transfer to (\d+) member\(s\)", job.out)
    check(got and got[0] in ("1", "2") and "reload checkpoint" not in job.out,
          f"the log shows the transfer to the spare ({got[:1]} receiver(s)) and no checkpoint "
          f"reload")
    check(f"{got[0]} chunk(s) of region \"params\" failed their CRC32C" in job.out
          and f"{got[0]} chunk(s) retried" in job.out,
          "the corrupted chunk was refused on its way into device memory and sent again")
    expect_identical(job, args)


# Partner replicas: a refresh every K steps; rank 0 holds at HOLD so that the fault lands when
# the last replica is REPLICA_AT and the last committed checkpoint CKPT_AT (every 20 steps).
K, HOLD, REPLICA_AT, CKPT_AT = 5, 67, 65, 60


def replica_job(args, name, env=None, np_=5, spares=1):
    job = job_of(args, name, np_=np_, spares=spares,
                 extra=["--sharded-momentum", "--hold-at-step", str(HOLD), "--hold-ms", "2000"],
                 env=dict({"FTRT_SHARD_REPLICA_EVERY": str(K), "FTRT_LOG": "info"}, **(env or {})))
    return job.start()


def kill_at_hold(job, victims=(2,)):
    """SIGKILLs the trainers of logical ranks `victims` at once when every trainer has done
    HOLD steps; returns the report's failure of the last epoch (checked: one per victim, all
    recovered)."""
    def held(st):
        tr = [r for r in st["ranks"] if r["role"] == "trainer"]
        return st.get("job") == "running" and tr and all(r["steps_done"] >= HOLD for r in tr)
    st = job.wait_status(held, timeout=60)
    for r in [trainer(st, v) for v in victims]:
        job.inject(signal.SIGKILL, r, "sigkill")
    rc = job.wait(90)
    check(rc == 0, f"job survives the kill(s) and exits 0 (got {rc})")
    fs = job.load_report()["failures"]
    check(len(fs) == len(victims) and all(f["recovered"] for f in fs),
          f"{len(victims)} failure(s), recovered")
    return max(fs, key=lambda f: f["epoch"])


@h.case(CASES, fixture="required", timeout_s=120)
def case_replica(args):
    need_reference(args)
    job = replica_job(args, "replica")
    f = kill_at_hold(job)
    check(f["state_from"] == "replica",
          f"state from the partner replicas in memory (report says {f['state_from']})")
    check(f["resume_step"] == REPLICA_AT,
          f"resumed at the last replica, step {REPLICA_AT}, not the checkpoint's {CKPT_AT} "
          f"(got {f['resume_step']})")
    check(f["rework_steps"] == HOLD - REPLICA_AT and f["rework_steps"] <= K + 1,
          f"rework {HOLD - REPLICA_AT} steps <= K + 1 (got {f['rework_steps']})")
    check("from the partner replicas in memory" in job.out and "reload checkpoint" not in job.out,
          "the log shows the in-memory restore and no checkpoint reload")
    expect_identical(job, args)


@h.case(CASES, fixture="required", timeout_s=120)
def case_erasure(args):
    need_reference(args)
    if "libisal" not in subprocess.run(["ldd", args.bin], capture_output=True, text=True).stdout:
        h.missing_dep("ISA-L in libftrt's build", "libisal-dev (scripts/gpu-kit.sh carries it)")
    # (the PLAN held 500 ms: both kills in one epoch)
    job = replica_job(args, "erasure", np_=6, spares=2,
                      env={"FTRT_SHARD_REDUNDANCY": "erasure", "FTRT_TEST_PLAN_DELAY_MS": "500"})
    last = kill_at_hold(job, victims=(1, 2))
    check(last["state_from"] == "erasure" and last["resume_step"] == REPLICA_AT
          and last["rework_steps"] <= K + 1,
          f"both rebuilt from the erasure group at step {REPLICA_AT}, rework <= K + 1 "
          f"({last['state_from']}, {last['resume_step']}, {last['rework_steps']})")
    check("from the erasure groups in memory" in job.out and "reload checkpoint" not in job.out,
          "the log shows the rebuild from memory and no checkpoint reload")
    expect_identical(job, args)


FLIP_RANK, FLIP_AT = 1, 70  # steps done when the flip lands: FLIP_AT + 1


@h.case(CASES, fixture="required", timeout_s=120)
def case_flip(args):
    need_reference(args)
    job = job_of(args, "flip", np_=5, spares=1,
                 extra=["--ckpt-every", "2", "--flip-rank", str(FLIP_RANK), "--flip-at-step",
                        str(FLIP_AT)],
                 env={"FTRT_SDC_EVERY": "4", "FTRT_CKPT_KEEP": "4"}).start()
    rc = job.wait(90)
    check(rc == 0, f"job survives the corruption and exits 0 (got {rc})")
    m = re.search(r"logical rank (\d+) flipped bit 20 of parameter \d+ \((\S+) -> (\S+)\) in its "
                  r"(\w+) memory after step (\d+)", job.out)
    check(m and int(m.group(1)) == FLIP_RANK and m.group(4) == args.device
          and int(m.group(5)) == FLIP_AT,
          f"logical rank {FLIP_RANK} flipped a bit in its {args.device} memory after step "
          f"{FLIP_AT} ({m.group(0) if m else 'no such line'})")
    rep = job.load_report()
    sdc = [f for f in rep["failures"] if f["kind"] == "silent_data_corruption"]
    check(len(rep["failures"]) == 1 and len(sdc) == 1,
          f"one failure, silent data corruption ({[f['kind'] for f in rep['failures']]})")
    f, d = sdc[0], sdc[0]["sdc"]
    check(f["logical_rank"] == FLIP_RANK and d["majority"],
          f"the majority names logical rank {FLIP_RANK} (w{f['world_rank']})")
    late = d["step_detected"] - (FLIP_AT + 1)
    check(0 <= late <= 4, f"detected at step {d['step_detected']}, within FTRT_SDC_EVERY=4 steps "
                          f"of the flip (after {FLIP_AT + 1} steps)")
    check(f["recovered"] and f["spare_world_rank"] == 4 and
          d["rollback_checkpoint_step"] is not None and
          d["rollback_checkpoint_step"] <= d["last_agreed_step"],
          f"fenced and replaced by the spare; every member reloaded checkpoint step "
          f"{d['rollback_checkpoint_step']} (last agreement at step {d['last_agreed_step']})")
    expect_identical(job, args)


if __name__ == "__main__":
    sys.exit(h.case_main(CASES, __doc__, add_args=add_args))
