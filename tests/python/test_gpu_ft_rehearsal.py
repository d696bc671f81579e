"""tests/python/gpu_ft_prog.py (scripts/gpu-run.sh step torch-ft-gpu: FaultTolerant on a CUDA
model, a trainer SIGKILLed mid-backward, byte-identical) rehearsed on the CPU with libftrt
(FTRT_TEST_GPU_FT_CPU=1): the same driver, jobs (1 coordinator + 2 trainers + 1 spare, the
kill from an autograd hook) and checks, so that the program itself is known to work before it
spends device time. It says nothing about CUDA: the hooks run on the owning thread here, and
with --host-sync (step torch-ft-sync-gpu) the CPU plane's .item() never waits on a collective;
with --join (step torch-ft-join-gpu) the spare is a process that joined the running job
(`ftrt-run --join`), promoted through the MPI plane here, not NCCL.
About 10 s a case on a 2-core VM. The same for tests/python/gpu_lm_prog.py (step torch-lm-gpu:
examples/train_lm.py through FaultTolerant, a trainer SIGKILLed mid-backward) with
--device cpu: a tiny model under CPU bfloat16 autocast (train_lm.py --amp bf16), the kill from
train_lm.py's FTRT_TEST_LM_KILL knob, MTTD from the fault log, eMFU in both reports, final
parameters byte-identical; about 10 s."""
import os
import subprocess

from conftest import PYTHON, REPO, job_env, needs_mpirun, needs_torch

import pytest

pytestmark = [needs_torch, needs_mpirun]


@pytest.mark.parametrize("extra", [[], ["--host-sync"], ["--join"]],
                         ids=["plain", "host-sync", "join"])
def test_gpu_ft_prog_rehearsed_on_the_cpu(extra):
    if not os.environ.get("FTRT_LIB"):
        pytest.skip("FTRT_LIB (libftrt) not set")
    env = job_env({"FTRT_TEST_GPU_FT_CPU": "1"})
    p = subprocess.run([PYTHON, os.path.join(REPO, "tests", "python", "gpu_ft_prog.py"),
                        "--driver"] + extra, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=280)
    assert p.returncode == 0, p.stdout[-6000:]
    assert "final parameters byte-identical" in p.stdout and p.stdout.rstrip().endswith("PASS")


def test_gpu_lm_prog_rehearsed_on_the_cpu():
    if not os.environ.get("FTRT_LIB"):
        pytest.skip("FTRT_LIB (libftrt) not set")
    p = subprocess.run([PYTHON, os.path.join(REPO, "tests", "python", "gpu_lm_prog.py"),
                        "--driver", "--device", "cpu", "--amp", "bf16"], env=job_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=200)
    assert p.returncode == 0, p.stdout[-6000:]
    assert "train_lm: ftrt on cpu, bfloat16 autocast, 2 trainers" in p.stdout, p.stdout[-3000:]
    assert "final parameters byte-identical" in p.stdout and p.stdout.rstrip().endswith("PASS")
    assert "RESULT bench=gpu_lm device=cpu amp=bf16 " in p.stdout
