"""Real mpirun jobs of torchvision's resnet18 through FaultTolerant (tests/python/
resnet_prog.py), 1 coordinator + 4 trainers + 1 hot spare, 6 processes on what may be a 2-core
machine: the BatchNorm and eMFU issue's user job. Before that work this job ended at its first
silent-data-corruption check ("the 4 replicas disagree": each trainer's BatchNorm running
statistics are its own) and reported eMFU 2.1667 (a matrix product measured by each rank as
the CPU's peak).

 - undisturbed, SDC checks every step (FTRT_SDC_EVERY=1): no SDC raised, eMFU in (0, 1] with
   the table's peak (ftrt_cpu_peak_flops) split among the host's 4 trainers, no eMFU warning;
 - a trainer SIGKILLed mid-step (held by the program's knob right after its forward pass, so
   every trainer's BatchNorm statistics have already changed in the abandoned step): the hot
   spare takes over and the final parameters and buffers are byte-identical to the undisturbed
   run's, no SDC raised, eMFU in (0, 1];
 - broadcast_buffers=False (each trainer's buffers its own, SHARDED) with partner replicas
   every 2 steps: a trainer SIGKILLed mid-step, its buffers come back into the spare from the
   partner replica, every trainer's final parameters and buffers byte-identical to the
   undisturbed run's with the same setting;
 - one bit of a BatchNorm buffer flipped on logical rank 1 after the broadcast: caught at that
   step's check, the majority names logical rank 1, which is replaced, and the job finishes.
Short: 8 steps of 8 images of 32 x 32 (about 15 s a job here)."""
import os
import re
import signal
import time

import pytest

from conftest import PYTHON, REPO, Job, job_env, needs_mpirun, needs_torch
import ftrt_harness as h

pytestmark = [needs_torch, needs_mpirun]

PROG = os.path.join(REPO, "tests", "python", "resnet_prog.py")
N, STEPS = 4, 8


def resnet_job(work, name, args=(), env=None):
    """A resnet_prog job in WORK/name with SDC checks every step; returns (job, dir)."""
    pytest.importorskip("torchvision")  # python3-torchvision (scripts/ensure-deps.sh)
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    status, report = os.path.join(d, "status.json"), os.path.join(d, "report.json")
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(N + 2, [PYTHON, PROG, "--steps", str(STEPS), "--batch",
                                              "8", "--report", report, "--params-out",
                                              os.path.join(d, "final.state")] + list(args)),
                         status=status, python=PYTHON)
    e = {"FTRT_SPARES": "1", "FTRT_CKPT_DIR": os.path.join(d, "ckpt"), "FTRT_SDC_EVERY": "1",
         "FTRT_FAULT_LOG": os.path.join(d, "faults.jsonl")}
    e.update(env or {})
    job = Job(d, cmd, job_env(e), status=status)
    job.env.pop("FTRT_PEAK_FLOPS", None)  # the table's peak, not an override
    return job, d


def check_emfu(job, d):
    """The report's eMFU lies in (0, 1] with the table's peak; returns the ledger."""
    led = h.load_json(os.path.join(d, "report.json"))["ledger"]
    line = re.findall(r"^ftrt: eMFU inputs: .*$", job.out, re.M)
    assert len(line) >= 1, job.out[-6000:]
    print(f"eMFU {led['emfu']}, peak {led['peak_flops_per_rank']} FLOP/s per rank; {line[0]}")
    assert led["emfu"] is not None and 0 < led["emfu"] <= 1, (led, line[0])
    assert "FLOP/cycle/core" in line[0] and f"{N} rank(s) sharing" in line[0], line[0]
    assert "is above 1" not in job.out
    return led


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def resnet_ref(work):
    job, d = resnet_job(work, "resnet18")
    rc = job.run(240)
    assert rc == 0, f"job exited {rc}:\n{job.out[-6000:]}"
    return job, d


def test_resnet18_no_false_sdc_and_emfu_at_most_one(resnet_ref):
    job, d = resnet_ref
    rep = h.load_json(os.path.join(d, "report.json"))
    assert rep["failures"] == [], rep["failures"]
    assert rep["sdc"]["checks"] >= STEPS - 1, rep["sdc"]
    assert "silent data corruption at step" not in job.out
    assert "for comparison, measured: torch.mm" in job.out
    check_emfu(job, d)


def kill_mid_step(work, name, hold, args=(), env=None):
    """A resnet_prog job whose logical rank 2 is held after its forward pass of step `hold`
    and SIGKILLed there; returns (job, dir, the report's one failure) once it finished."""
    held = os.path.join(work, name, "HELD")
    job, d = resnet_job(work, name, ["--hold-at", str(hold), "--hold-file", held] + list(args),
                        env)
    job.start()
    t0 = time.time()
    while not os.path.exists(held):
        assert time.time() - t0 < 180 and job.proc.poll() is None, job.out[-4000:]
        time.sleep(0.05)
    victim = job.wait_trainer(2, hold)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(240)
    assert rc == 0, f"job did not survive the kill (exit {rc}):\n{job.out[-6000:]}"
    rep = h.load_json(os.path.join(d, "report.json"))
    assert len(rep["failures"]) == 1, rep["failures"]
    f = rep["failures"][0]
    assert f["kind"] == "connection_lost" and f["recovered"] and f["logical_rank"] == 2, f
    assert "silent data corruption at step" not in job.out
    return job, d, f


def same_states(d, ref_dir):
    for r in range(N):
        assert read(os.path.join(d, f"final.state.{r}")) == \
            read(os.path.join(ref_dir, f"final.state.{r}")), \
            f"logical rank {r}: final parameters and buffers differ from the undisturbed run"


def test_resnet18_kill_mid_step_is_byte_identical(resnet_ref, work):
    _, ref_dir = resnet_ref
    hold = 4
    job, d, f = kill_mid_step(work, "resnet18-kill", hold)
    assert f["resume_step"] == hold and f["state_from"] == "peers", f  # nothing after it done
    same_states(d, ref_dir)
    check_emfu(job, d)


def test_resnet18_own_buffers_come_back_from_the_partner_replica(work):
    own = ["--no-broadcast"]
    env = {"FTRT_SHARD_REPLICA_EVERY": "2"}
    ref, ref_dir = resnet_job(work, "resnet18-own", own, env)
    rc = ref.run(240)
    assert rc == 0, f"job exited {rc}:\n{ref.out[-6000:]}"
    bufs = [read(os.path.join(ref_dir, f"final.state.{r}")) for r in range(N)]
    assert len(set(bufs)) == N, "each trainer's buffers are its own"
    hold = 5
    job, d, f = kill_mid_step(work, "resnet18-own-kill", hold, own, env)
    assert f["state_from"] == "replica" and f["resume_step"] == 4, f  # the replica of step 4
    same_states(d, ref_dir)


def test_resnet18_flipped_buffer_bit_is_caught(work):
    flip = 3
    job, d = resnet_job(work, "resnet18-flip", ["--flip-at", str(flip)])
    rc = job.run(240)
    assert rc == 0, f"job exited {rc}:\n{job.out[-6000:]}"
    assert "flipped a bit of layer1.0.bn1.running_var" in job.out, job.out[-4000:]
    rep = h.load_json(os.path.join(d, "report.json"))
    sdc = [f for f in rep["failures"] if f["kind"] == "silent_data_corruption"]
    assert len(sdc) == 1, rep["failures"]
    # flipped in step `flip`, caught by that step's fingerprint: of the state after flip + 1
    # steps, the step number the report gives
    assert sdc[0]["logical_rank"] == 1 and sdc[0]["sdc"]["step_detected"] == flip + 1, sdc[0]
    assert sdc[0]["recovered"], sdc[0]
