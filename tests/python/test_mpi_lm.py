"""Real mpirun jobs of examples/train_lm.py (ftrt.pytorch.FaultTolerant: a transformer LM with
AdamW, a LambdaLR schedule, dropout and replicated Python state), 1 coordinator + 4 trainers +
1 hot spare: an undisturbed run, a run with a SIGKILLed trainer and a relaunch from a
checkpoint must end with byte-identical parameters and the same scheduler, LR and token count.
Kept short (60 steps of 8 x 32 characters) for 2-core machines."""
import json
import os
import re
import signal
import time

import pytest

from conftest import PYTHON, REPO, Job, job_env, needs_mpirun, needs_torch
import ftrt_harness as h

pytestmark = [needs_torch, needs_mpirun]

TRAIN_LM = os.path.join(REPO, "examples", "train_lm.py")
STEPS, N, BATCH, CONTEXT = 60, 4, 8, 32
ARGS = ["--steps", str(STEPS), "--batch", str(BATCH), "--context", str(CONTEXT),
        "--warmup", "10", "--ckpt-every", "20", "--progress-every", "20", "--seed", "3"]


def lm_job(directory, extra=(), env=None):
    status = os.path.join(directory, "status.json")
    args = ARGS + ["--ckpt-dir", os.path.join(directory, "ckpt"), "--params-out",
                   os.path.join(directory, "final.params"), "--report",
                   os.path.join(directory, "report.json")] + list(extra)
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(N + 2, [PYTHON, TRAIN_LM] + args), status=status,
                         python=PYTHON)
    return Job(directory, cmd, job_env(env), status=status)


def final_state(out):
    m = re.findall(r"^final state: (step_count \d+, scheduler last_epoch \d+, lr \S+, "
                   r"tokens \d+)", out, re.M)
    assert len(m) == 1, out[-4000:]
    return m[0]


def params(d):
    with open(os.path.join(d, "final.params"), "rb") as f:
        return f.read()


@pytest.fixture(scope="session")
def lm_ref(work):
    job = lm_job(os.path.join(work, "lm-ref"))
    rc = job.run(300)
    assert rc == 0, f"job exited {rc}:\n{job.out[-6000:]}"
    return job


def test_lm_trains(lm_ref):
    st = final_state(lm_ref.out)
    assert st.startswith(f"step_count {STEPS}, scheduler last_epoch {STEPS}, lr 3.000000e-04")
    assert st.endswith(f"tokens {STEPS * N * BATCH * CONTEXT}")
    val = re.search(r"validation loss: ([\d.]+) nats/char .* \(uniform over \d+ characters: "
                    r"([\d.]+) nats\)", lm_ref.out)
    assert val and float(val.group(1)) < float(val.group(2)) - 0.5, "the model must learn"
    rep = h.load_json(os.path.join(lm_ref.dir, "report.json"))
    assert rep["status"] == "finished" and rep["steps"] == STEPS and not rep["failures"]
    assert rep["checkpoints"]["committed"] == STEPS // 20


def test_lm_report_has_emfu(lm_ref):
    """No FLOPs or peak given (and no FTRT_PEAK_FLOPS): FaultTolerant counted the model's
    FLOPs at the first step -- the hand count of train_lm.py's transformer (d 64, 2 layers,
    per block 12 d^2 per token in its linear layers and 2 B T^2 d in each of QK^T and AV, the
    tied output layer d x vocab per token; x3 for forward and backward) -- and took the CPU's
    peak from libftrt's table split among the 4 trainers of this host, so the report has an
    eMFU (at most 1); logical rank 0 said how, with a measured matrix product beside it."""
    rep = h.load_json(os.path.join(lm_ref.dir, "report.json"))
    vocab = int(re.search(r"vocab (\d+) \(", lm_ref.out).group(1))
    d, layers, tok = 64, 2, BATCH * CONTEXT
    fwd = layers * (2 * tok * 12 * d * d + 2 * 2 * BATCH * CONTEXT ** 2 * d) + 2 * tok * d * vocab
    led = rep["ledger"]
    assert led["useful_flops"] == pytest.approx(N * STEPS * 3 * fwd, rel=1e-12), led
    assert led["peak_flops_per_rank"] > 0 and 0 < led["emfu"] < 1, led
    line = re.findall(r"^ftrt: eMFU inputs: .*$", lm_ref.out, re.M)
    assert len(line) == 1 and "FLOP/cycle/core" in line[0] and \
        f"{N} rank(s) sharing" in line[0] and "for comparison, measured: torch.mm" in line[0], line
    assert "eMFU unknown" not in lm_ref.out


def test_lm_kill_is_byte_identical(lm_ref, work):
    """SIGKILL of trainer logical rank 1 once it has done 15 steps: the spare takes over,
    FaultTolerant recovers inside step(), and the run ends byte-identical, with the same
    scheduler state, LR and token count (replicated Python state) as the undisturbed run."""
    d = os.path.join(work, "lm-kill")
    job = lm_job(d, env={"FTRT_FAULT_LOG": os.path.join(d, "faults.jsonl")}).start()
    victim = job.wait_trainer(1, 15, timeout=120)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(300)
    assert rc == 0, f"job did not survive the kill (exit {rc}):\n{job.out[-6000:]}"
    rep = h.load_json(os.path.join(d, "report.json"))
    assert len(rep["failures"]) == 1 and rep["failures"][0]["recovered"], rep["failures"]
    fail = rep["failures"][0]
    assert fail["logical_rank"] == 1 and 15 <= fail["resume_step"] < STEPS, fail
    assert "ftrt: recovered (epoch 1): resuming at step" in job.out
    assert final_state(job.out) == final_state(lm_ref.out)
    assert params(d) == params(lm_ref.dir), "final parameters differ from the undisturbed run"
    print(f"lm kill: logical rank 1 (pid {victim['pid']}), resumed at step "
          f"{fail['resume_step']}, MTTR {fail['mttr_s'] * 1e3:.1f} ms; byte-identical")


def test_lm_relaunch_is_byte_identical(lm_ref, work):
    """The whole job SIGKILLed after a committed checkpoint and relaunched: parameters, AdamW
    state, the scheduler, the LR and extra_state come back from the checkpoint."""
    d = os.path.join(work, "lm-relaunch")
    job = lm_job(d).start()
    st = job.wait_status(lambda s: s["last_committed_step"] >= 20, timeout=120)
    job.kill_all(st["ranks"])
    time.sleep(0.5)
    with open(os.path.join(d, "ckpt", "LATEST")) as fh:
        latest = int(fh.read().strip()[len("step-"):])
    assert 20 <= latest < STEPS, f"LATEST names step {latest}"
    job2 = lm_job(d)
    rc = job2.run(300)
    assert rc == 0, f"relaunch exited {rc}:\n{job2.out[-6000:]}"
    assert f"ftrt: resumed at step {latest} (checkpoint)" in job2.out, job2.out[-4000:]
    assert final_state(job2.out) == final_state(lm_ref.out)
    assert params(d) == params(lm_ref.dir), "final parameters differ from the undisturbed run"
