"""One short real mpirun job of examples/train_cnn.py (torchvision's resnet18, BatchNorm, on the
digits upscaled to 3 x 32 x 32) under ftrt: 1 coordinator + 4 trainers + 1 hot spare, 8 steps
of 8 images per trainer, with fingerprints compared every step (FTRT_SDC_EVERY=1).

It checks that the example runs as docs/pytorch.md shows it and trains: the job finishes with
every step and no failure; every step's fingerprints agree, so the BatchNorm buffers (which
each trainer's forward pass changes from its own batch) were made identical by the broadcast
of logical rank 0's; the header names resnet18's 11,181,642 parameters; every step's loss is
finite, the first near ln 10 (random weights, 10 classes) and the last below it (seed 1 is
deterministic: 2.18 at step 1, 1.02 at step 8 here); the test accuracy line covers the 359
held-out images. Eight steps are too few for the accuracy to leave chance (the example reaches
over 0.9 in its default 100 steps: docs/pytorch.md), so it is only checked to be a fraction.
Start-up dominates: six processes import torch and build resnet18 on what may be a 2-core
machine (8.3 s at load average 1.3 here, 16.6 s at 6.7, shared with other jobs). Checked to
fail: with --lr 1e-9 the loss does not go down (2.18 at step 1, 2.15 at step 8)."""
import math
import os
import re

import pytest

from conftest import PYTHON, REPO, Job, job_env, needs_mpirun, needs_torch
import ftrt_harness as h

pytestmark = [needs_torch, needs_mpirun]

TRAIN_CNN = os.path.join(REPO, "examples", "train_cnn.py")
N, STEPS, BATCH = 4, 8, 8
RESNET18_PARAMS = 11181642
TEST_IMAGES = 359


def losses(out: str) -> list:
    """Logical rank 0's loss of each step, from the progress lines."""
    return [float(m.group(2)) for m in re.finditer(
        r"^step (\d+)/\d+  loss (\S+) \(logical rank 0\)$", out, re.M)]


@pytest.fixture(scope="module")
def cnn_job(work: str) -> Job:
    """The job, run to its end (a non-zero exit fails here)."""
    pytest.importorskip("torchvision")  # python3-torchvision (scripts/ensure-deps.sh)
    d = os.path.join(work, "cnn")
    os.makedirs(d, exist_ok=True)
    status = os.path.join(d, "status.json")
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(N + 2, [
        PYTHON, TRAIN_CNN, "--steps", str(STEPS), "--batch", str(BATCH), "--seed", "1",
        "--progress-every", "1", "--ckpt-every", "0", "--ckpt-dir", os.path.join(d, "ckpt"),
        "--report", os.path.join(d, "report.json")]), status=status, python=PYTHON)
    job = Job(d, cmd, job_env({"FTRT_SPARES": "1", "FTRT_SDC_EVERY": "1"}), status=status)
    rc = job.run(180)
    assert rc == 0, f"job exited {rc}:\n{job.out[-6000:]}"
    return job


def test_cnn_job_finishes_with_buffers_identical(cnn_job: Job) -> None:
    rep = h.load_json(os.path.join(cnn_job.dir, "report.json"))
    assert rep["status"] == "finished" and rep["steps"] == STEPS and not rep["failures"], rep
    assert rep["trainers"] == N and rep["spares"] == 1
    sdc = rep["sdc"]
    assert sdc["checks"] == STEPS and sdc["last_agreed_step"] == STEPS, sdc
    assert f"resnet18 ({RESNET18_PARAMS} parameters)" in cnn_job.out, cnn_job.out[-3000:]
    assert "(broadcast from rank 0)" in cnn_job.out


def test_cnn_loss_and_accuracy_sensible(cnn_job: Job) -> None:
    got = losses(cnn_job.out)
    assert len(got) == STEPS and all(math.isfinite(x) for x in got), (got, cnn_job.out[-3000:])
    assert 1.5 < got[0] < 4.0, f"first loss {got[0]}: random weights give about ln 10 = 2.30"
    assert got[-1] < got[0] - 0.3, f"the loss did not go down: {got}"
    m = re.search(r"^test accuracy: ([\d.]+) \((\d+)/(\d+), eval mode\)$", cnn_job.out, re.M)
    assert m and int(m.group(3)) == TEST_IMAGES, cnn_job.out[-3000:]
    assert 0.0 <= float(m.group(1)) <= 1.0 and int(m.group(2)) <= TEST_IMAGES
    assert re.search(r"^train_cnn: step_time_ms median=[\d.]+ mean=[\d.]+ steps=\d+$",
                     cnn_job.out, re.M), "the step-time line bench/torch_overhead.py reads"
