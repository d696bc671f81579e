"""A real mpirun job of torchvision's resnet18 through FaultTolerant (tests/python/
resnet_prog.py), 1 coordinator + 4 trainers + 1 hot spare, 6 processes on what may be a
2-core machine (the eMFU issue: this job reported eMFU 2.1667 when the CPU's peak was a
matrix product measured by each rank): the report's eMFU must lie in (0, 1], its peak must
be the table's (ftrt_cpu_peak_flops) split among the 4 trainers of this host, and the
coordinator must not have warned of an eMFU above 1. Short: 6 steps of 8 images of 32 x 32."""
import os
import re

import pytest

from conftest import PYTHON, REPO, Job, job_env, needs_mpirun, needs_torch
import ftrt_harness as h

pytestmark = [needs_torch, needs_mpirun]

PROG = os.path.join(REPO, "tests", "python", "resnet_prog.py")
N, STEPS = 4, 6


def test_resnet18_emfu_at_most_one(work):
    pytest.importorskip("torchvision")  # python3-torchvision (scripts/ensure-deps.sh)
    d = os.path.join(work, "resnet18")
    os.makedirs(d, exist_ok=True)
    status, report = os.path.join(d, "status.json"), os.path.join(d, "report.json")
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(N + 2, [PYTHON, PROG, "--steps", str(STEPS), "--batch",
                                              "8", "--report", report]),
                         status=status, python=PYTHON)
    # FTRT_SDC_EVERY=0: each trainer's BatchNorm running statistics differ (its own batches),
    # which the replicas' fingerprints would call silent data corruption; the BatchNorm work
    # (buffers broadcast by FaultTolerant) removes the need for this setting.
    env = {"FTRT_SPARES": "1", "FTRT_CKPT_DIR": os.path.join(d, "ckpt"), "FTRT_SDC_EVERY": "0"}
    job = Job(d, cmd, job_env(env), status=status)
    job.env.pop("FTRT_PEAK_FLOPS", None)  # the table's peak, not an override
    rc = job.run(240)
    assert rc == 0, f"job exited {rc}:\n{job.out[-6000:]}"
    led = h.load_json(report)["ledger"]
    line = re.findall(r"^ftrt: eMFU inputs: .*$", job.out, re.M)
    assert len(line) == 1, job.out[-6000:]
    print(f"eMFU {led['emfu']}, peak {led['peak_flops_per_rank']} FLOP/s per rank; {line[0]}")
    assert led["emfu"] is not None and 0 < led["emfu"] <= 1, (led, line[0])
    assert "FLOP/cycle/core" in line[0] and f"{N} rank(s) sharing" in line[0], line[0]
    assert "for comparison, measured: torch.mm" in line[0], line[0]
    assert "is above 1" not in job.out
