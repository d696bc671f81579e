"""Real mpirun jobs of 16-bit gradients (issue 21, mixed precision): tests/python/
bf16_ft_prog.py (a bfloat16 body and a float32 head under torch.autocast("cpu", bfloat16),
through FaultTolerant: one bucketer per dtype) with 1 coordinator + 2 trainers + 1 hot spare.

With 2 trainers the mean is exact to predict whatever the allreduce's order: one pairwise sum,
rounded once to the dtype, times 1/2 (exact), as torch computes
((g0.float() + g1.float()).to(dtype).float() * 0.5).to(dtype); so every averaged gradient of
every step on both trainers must equal that, bit for bit, for the bfloat16 and the float32
parameters alike. A SIGKILLed trainer (the spare takes its place) must leave the final
parameters byte-identical to the undisturbed run's. And ftrt_allreduce of bfloat16 and float16
through the Python binding (Context.allreduce on tensors) against torch's own conversions:
2^16 elements per rank, every 16-bit pattern on rank 0 (NaN, infinities, subnormals), random
ones on rank 1 (tests/python/mpi_bf16_prog.py). test_on_cuda: the same jobs on a GPU (skipped
here)."""
import json
import os
import re
import signal
import sys

import numpy as np
import pytest

from conftest import PYTHON, REPO, Job, job_env, needs_mpirun, needs_torch
import ftrt_harness as h

pytestmark = [needs_torch, needs_mpirun]

torch = pytest.importorskip("torch")

PROG = os.path.join(REPO, "tests", "python", "bf16_ft_prog.py")
STEPS = 24
DTYPES = {"torch.bfloat16": torch.bfloat16, "torch.float32": torch.float32}


def bf16_job(d, env=None, sleep_ms=0, extra=()):
    os.makedirs(d, exist_ok=True)
    status = os.path.join(d, "status.json")
    py = sys.executable if "cuda" in extra else PYTHON  # the GPU machine's torch may be elsewhere
    argv = [py, PROG, d, "--steps", str(STEPS), "--sleep-ms", str(sleep_ms)] + list(extra)
    if "cuda" in extra:  # NCCL between processes time-sharing one GPU, as gpu_ft_prog.py
        argv = ["bash", "-c", 'export NCCL_HOSTID=ftrt-bf16-rank$OMPI_COMM_WORLD_RANK; '
                'exec "$@"', "_"] + argv
        env = dict({"NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "lo", "NCCL_P2P_DISABLE": "1",
                    "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1",
                    "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}, **(env or {}))
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(4, argv), status=status, python=PYTHON)
    base = {"FTRT_SPARES": "1", "FTRT_CKPT_DIR": os.path.join(d, "ckpt")}
    return Job(d, cmd, job_env(dict(base, **(env or {}))), status=status)


@pytest.fixture(scope="module")
def bf16_ref(work):
    job = bf16_job(os.path.join(work, "bf16-ref"))
    rc = job.run(180)
    assert rc == 0, f"job exited {rc}:\n{job.out[-6000:]}"
    return job


def split(flat, numels):
    out, off = [], 0
    for n in numels:
        out.append(flat[off:off + n])
        off += n
    return out


def test_bf16_mean_is_exact(bf16_ref):
    check_means(bf16_ref.dir, ["torch.bfloat16", "torch.float32"])


def check_means(d, dtypes):
    """Every averaged gradient of every step on both trainers equals the exact 2-trainer
    mean of the dumped local gradients, in each parameter's dtype (dtypes: those present)."""
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    assert meta["world_size"] == 2
    assert sorted(set(meta["dtypes"])) == sorted(dtypes), meta["dtypes"]
    numels, n = meta["numels"], sum(meta["numels"])
    dumps = []
    for r in range(2):
        a = np.fromfile(os.path.join(d, f"grads-rank{r}.f32"), dtype="<f4")
        assert a.size == STEPS * 2 * n, f"rank {r}: {a.size} floats dumped"
        dumps.append(torch.from_numpy(a.reshape(STEPS, 2, n).copy()))
    nonzero = 0
    for step in range(STEPS):
        g0 = split(dumps[0][step, 0], numels)
        g1 = split(dumps[1][step, 0], numels)
        for r in range(2):
            avg = split(dumps[r][step, 1], numels)
            for k, dt in enumerate(meta["dtypes"]):
                t = DTYPES[dt]
                want = ((g0[k].to(t).float() + g1[k].to(t).float()).to(t).float() * 0.5).to(t)
                got = avg[k].to(t)
                assert torch.equal(got.view(torch.int16) if t == torch.bfloat16 else got,
                                   want.view(torch.int16) if t == torch.bfloat16 else want), \
                    f"step {step}, rank {r}, parameter {k} ({dt}): mean differs"
                nonzero += int((got != 0).sum())
    assert nonzero > STEPS * n // 2, "the gradients are mostly zero: the check proves little"


def test_bf16_kill_is_byte_identical(bf16_ref, work):
    """SIGKILL of trainer logical rank 1 mid-run: the hot spare takes its place and the final
    parameters (bfloat16 and float32 bytes) equal the undisturbed run's."""
    check_kill(os.path.join(work, "bf16-kill"), bf16_ref.dir)


def check_kill(d, ref_dir, extra=()):
    fault_log = os.path.join(d, "faults.jsonl")
    job = bf16_job(d, env={"FTRT_FAULT_LOG": fault_log}, sleep_ms=40, extra=extra)
    job.start()
    victim = job.wait_trainer(1, 6, timeout=120)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(180)
    assert rc == 0, f"job did not survive the kill (exit {rc}):\n{job.out[-6000:]}"
    st = job.status_json()
    dead = [r for r in st["ranks"] if r["pid"] == victim["pid"]][0]
    assert dead["state"] == "dead" and 6 <= dead["steps_done"] < STEPS, dead
    assert re.search(r"resumed at step \d+", job.out), job.out[-4000:]
    assert any(r["role"] == "trainer" and r["logical_rank"] == 1 and r["pid"] != victim["pid"]
               for r in st["ranks"]), "the spare holds logical rank 1"
    with open(os.path.join(d, "final.params"), "rb") as a, \
            open(os.path.join(ref_dir, "final.params"), "rb") as b:
        assert a.read() == b.read(), "final parameters differ from the undisturbed run"


def has_cuda_plane():
    try:
        import ftrt
        return torch.cuda.is_available() and ftrt.has_gpu_plane()
    except OSError:
        return False


@pytest.mark.parametrize("mode", ["bf16", "fp16-scaler"])
def test_on_cuda(mode, work):
    """The same two jobs on CUDA (libftrt_gpu as FTRT_LIB, a GPU): NCCL's ncclBfloat16 and the
    16-bit unpack kernels (bf16), or float16 autocast with torch.cuda.amp.GradScaler and
    scaler.unscale_() before ft.step() (fp16-scaler: float32 gradients, scaled): exact means
    and a byte-identical kill. Skipped without a GPU; not run yet (issue 21)."""
    if not has_cuda_plane():
        if os.environ.get("FTRT_TEST_REQUIRE_GPU") == "1":  # scripts/gpu-run.sh: a failure
            pytest.fail("no CUDA device in torch, or FTRT_LIB is not libftrt_gpu")
        pytest.skip("needs a CUDA device and FTRT_LIB = libftrt_gpu")
    extra = ["--device", "cuda"] + (["--scaler"] if mode == "fp16-scaler" else [])
    ref = bf16_job(os.path.join(work, f"cuda-{mode}-ref"), extra=extra)
    rc = ref.run(240)
    assert rc == 0, f"job exited {rc}:\n{ref.out[-6000:]}"
    check_means(ref.dir, ["torch.float32"] if mode == "fp16-scaler"
                else ["torch.bfloat16", "torch.float32"])
    check_kill(os.path.join(work, f"cuda-{mode}-kill"), ref.dir, extra)


def test_allreduce_16bit_matches_torch(work):
    d = os.path.join(work, "allreduce16")
    os.makedirs(d, exist_ok=True)
    status = os.path.join(d, "status.json")
    argv = [PYTHON, os.path.join(REPO, "tests", "python", "mpi_bf16_prog.py")]
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(3, argv), status=status, python=PYTHON)
    job = Job(d, cmd, job_env({"FTRT_SPARES": "0", "FTRT_CKPT_DIR": os.path.join(d, "ckpt")}),
              status=status)
    rc = job.run(120)
    passed = sorted(re.findall(r"rank (\d+): PASS", job.out))
    assert passed == ["0", "1"], job.out[-6000:]
    assert rc == 0, job.out[-4000:]
