"""A GPU program for scripts/gpu-run.sh (step torch-ft-gpu): ftrt.pytorch.FaultTolerant on a
CUDA model, run twice by its driver mode (--driver, what gpu-run.sh calls) as real ftrt jobs:
mpirun, 1 coordinator + 2 trainers + 1 hot spare, the trainers (and the spare) time-sharing the
one GPU, NCCL over sockets with a host id per rank (docs/gpu.md: a test arrangement, not a
performance figure), libftrt_gpu loaded through FTRT_LIB.

  - an undisturbed run;
  - a run in which logical rank 1 SIGKILLs itself from an autograd hook on the device thread,
    in the backward pass of step KILL_AT (buckets of that step are in flight): the spare takes
    its logical rank with the device state from the survivor, FaultTolerant recovers inside
    step(), and the run goes on.

Trainer checks (each run): every step, the gradient norm computed between backward() and step()
(torch.nn.utils.clip_grad_norm_, on the current stream; read on the host only after step()
returned True) is printed per logical rank; the driver
requires both ranks' norms to be equal at every step, which holds only if p.grad already held
the mean over the trainers when backward() returned (local gradients differ between the
ranks): the end-of-backward callback ordered the current stream after the NCCL buckets
(ftrt_gpu_bucketer_order_from_any_thread; FaultTolerant's averager reports `synced`, counted
and required at every step of the undisturbed run). Driver checks: the kill run's report has
one recovered failure of logical rank 1 with its MTTD and MTTR; the final parameters (raw
float32, written by logical rank 0) are byte-identical between the two runs
(torch.use_deterministic_algorithms, CUBLAS_WORKSPACE_CONFIG as PyTorch documents). Prints
"PASS"; exits 1 on a failed check and 77 when torch has no CUDA device or the library is not
libftrt_gpu.

--host-sync (the GPU step torch-ft-sync-gpu): the trainers synchronize the host with the current
stream between backward() and step(), as a user's loss.item() or norm.item() does: they read
the gradient norm (computed from the averaged gradients) with .item() before step(). In the
kill run the survivor's .item() then waits on NCCL collectives that wait for the dead trainer:
only the agent thread's abort of the communicator (comm/nccl_plane.c, "Interrupts") frees it.
Each trainer prints an "hsync" line (with the time .item() took) once its .item() returned; the
driver requires logical rank 0's line for the kill step of epoch 0 (the sync inside the failure
returned, and the job did not hang: a job past its timeout fails as "hung"), besides every check
above. The ranks' agents take the coordinator's failure announcement 1 s late in that mode
(FTRT_TEST_EPOCH_DELAY_MS), so that the survivor has certainly queued its buckets and blocked in
.item() before its agent learns of the failure.

--join (the GPU step torch-ft-join-gpu): the kill run is a job with no spare of its own (1
coordinator + 2 trainers) under `tools/ftrt-run --joinable`, held at the start of step KILL_AT
(--hold-file) until a new process has joined it as a hot spare (`ftrt-run --join`, a second
mpirun of one process on the same GPU); the victim dies as above and the joiner takes its logical
rank: its first NCCL communicator is the one the recovery builds, with the unique id broadcast
over the MPI communicator that connect/accept made (comm/join.c). Besides the checks above: the
report's failure replaced by the joined slot (world rank 3), one join counted, both ftrt-runs
exit 0.

FTRT_TEST_GPU_FT_CPU=1 runs the same jobs on the CPU with libftrt (the hooks then
run on the owning thread, which may kill itself there): a rehearsal of this program on a
machine without a GPU, which checks nothing about CUDA."""
import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))
sys.path.insert(1, os.path.join(HERE, "..", "harness"))
sys.path.insert(2, os.path.join(HERE, "..", "..", "tools"))
import ftrt_harness  # noqa: E402  (the one-GPU NCCL arrangement)
from ftrt_run.joinable import joinable_dir  # noqa: E402

STEPS, KILL_AT, WIDTH, LAYERS, BATCH = 24, 10, 256, 4, 32


def batch(torch, step, rank, dev):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(BATCH, WIDTH, generator=g).to(dev)
    y = torch.randint(0, 10, (BATCH,), generator=g).to(dev)
    return x, y


def trainer(a):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    import torch
    import ftrt
    import ftrt.pytorch as ftp
    torch.use_deterministic_algorithms(True)
    rehearse = os.environ.get("FTRT_TEST_GPU_FT_CPU") == "1"
    if rehearse:  # the same jobs on the CPU (libftrt): a rehearsal of this program, not a test
        dev = torch.device("cpu")
    elif not torch.cuda.is_available() or not ftrt.has_gpu_plane():
        print(f"skipped: torch.cuda.is_available()={torch.cuda.is_available()}, "
              f"libftrt_gpu loaded={ftrt.has_gpu_plane()}")
        return 77
    else:
        dev = torch.device("cuda", 0)
        torch.cuda.set_device(dev)
    torch.manual_seed(7)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.Dropout(0.1), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    ft = ftp.FaultTolerant(model, opt, report=a.report, bucket_cap_mb=0.25, seed=3)
    params = list(model.parameters())
    victim = {"armed": a.kill_at >= 0 and ft.rank == 1 and ft.epoch == 0, "step": -1}
    owner = threading.get_ident()

    def die(*_):  # on autograd's device thread, mid-backward, once
        if victim["armed"] and victim["step"] == a.kill_at and \
                (threading.get_ident() != owner or rehearse):
            os.kill(os.getpid(), signal.SIGKILL)
    acc = params[LAYERS].expand_as(params[LAYERS]).grad_fn.next_functions[0][0]
    acc.register_hook(die)
    synced = 0
    for step in ft.steps(STEPS):
        victim["step"] = step
        while a.hold_file and step == a.kill_at and ft.epoch == 0 and \
                os.path.exists(a.hold_file):  # (--join: until the joiner is a hot spare)
            time.sleep(0.05)
        x, y = batch(torch, step, ft.rank, dev)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        synced += ft.averager.synced
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)  # reads p.grad: the mean?
        if a.host_sync:  # the host waits for the NCCL buckets here, outside any ftrt call
            t0 = time.monotonic()
            norm.item()
            print(f"hsync rank {ft.rank} epoch {ft.epoch} step {step} "
                  f"{(time.monotonic() - t0) * 1e3:.1f} ms", flush=True)
        # Without --host-sync no host synchronization before step(): the current stream waits
        # for the NCCL buckets, and step()'s wait sees a failure itself.
        if ft.step():
            print(f"gnorm rank {ft.rank} epoch {ft.epoch} step {step} {norm.item():.9e}",
                  flush=True)
    print(f"rank {ft.rank}: synced in backward at {synced} of the steps run here", flush=True)
    if ft.rank == 0 and a.params_out:
        flat = torch.cat([p.detach().flatten() for p in params]).cpu().contiguous()
        with open(a.params_out, "wb") as f:
            f.write(ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size()))
    return 0


def one_gpu_job(argv, d, np_=4, env=None, timeout=110, tag="ftrt-gpu-ft"):
    """One ftrt job of np_ ranks (1 coordinator + 2 trainers + 1 spare by default) running
    argv (program and arguments) on the one GPU in the test arrangement
    (ftrt_harness.NCCL_ONE_GPU_ENV, a NCCL_HOSTID per rank), checkpoints under d/ckpt, with
    FTRT_SPARES=1 and `env` added, under `mpirun --enable-recovery` (without it mpirun tears
    the job down soon after a kill, and only a job that ended first passed); a job still
    running after `timeout` s fails the check as hung. Returns (rc, output)."""
    env = dict(os.environ, FTRT_SPARES="1", FTRT_CKPT_DIR=os.path.join(d, "ckpt"),
               **ftrt_harness.NCCL_ONE_GPU_ENV) | dict(env or {})
    cmd = ["mpirun", "--enable-recovery", "--oversubscribe", "--bind-to", "none", "-np",
           str(np_)] + ftrt_harness.nccl_hostid_argv(argv, tag)
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        check(False, f"the job hung: no end within {e.timeout} s", out or "")
    return p.returncode, p.stdout


def job(py, d, kill_at, host_sync):
    """One job of 1 coordinator + 2 trainers + 1 spare; returns (rc, output)."""
    env = {}
    if host_sync:  # the survivor's agent takes the failure 1 s late: by then it has certainly
        # queued its buckets (which wait for the dead trainer) and blocked in .item(); the
        # heartbeat timeout covers the agent's delay (the kill itself is seen at once)
        env.update(FTRT_TEST_EPOCH_DELAY_MS="1000", FTRT_HEARTBEAT_TIMEOUT_MS="5000")
    argv = [py, os.path.abspath(__file__), "--report", os.path.join(d, "report.json"),
            "--params-out", os.path.join(d, "final.params"), "--kill-at", str(kill_at)]
    return one_gpu_job(argv + (["--host-sync"] if host_sync else []), d, env=env)


def read(path):
    """The JSON file at path, or {} (not there yet, or being replaced)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def join_job(py, d, kill_at, timeout=150):
    """--join's kill run: 1 coordinator + 2 trainers under ftrt-run --joinable, held at step
    kill_at until a process joined through ftrt-run --join (a second mpirun on the same GPU,
    its own NCCL host id); returns (the job's ftrt-run exit status, its output, the joiner's
    exit status, its output)."""
    hold, status = os.path.join(d, "hold"), os.path.join(d, "status.json")
    open(hold, "w").close()
    argv = [py, os.path.abspath(__file__), "--report", os.path.join(d, "report.json"),
            "--params-out", os.path.join(d, "final.params"), "--kill-at", str(kill_at),
            "--hold-file", hold]
    env = dict(os.environ, FTRT_SPARES="0", FTRT_CKPT_DIR=os.path.join(d, "ckpt"),
               **ftrt_harness.NCCL_ONE_GPU_ENV)
    mpi = ["mpirun", "--enable-recovery", "--oversubscribe", "--bind-to", "none"]
    run = [py, ftrt_harness.FTRT_RUN]
    jlog, klog = open(os.path.join(d, "job.log"), "w+"), open(os.path.join(d, "joiner.log"), "w+")
    job_p = subprocess.Popen(run + ["--joinable", "--status", status, "--"] + mpi + ["-np", "3"]
                             + ftrt_harness.nccl_hostid_argv(argv, "ftrt-gpu-ft"), env=env,
                             stdout=jlog, stderr=subprocess.STDOUT)
    rundir, t_end = None, time.monotonic() + 60
    while rundir is None and time.monotonic() < t_end and job_p.poll() is None:
        rundir = joinable_dir(job_p.pid)
        time.sleep(0.05)
    check(rundir is not None, "join: the job's run directory with its join.json never came")
    while time.monotonic() < t_end and job_p.poll() is None and read(status).get("job") != \
            "running":  # (ftrt-run --join reads the coordinator's address there)
        time.sleep(0.05)
    join_p = subprocess.Popen(run + ["--join", rundir, "--"] + mpi + ["-np", "1"] +
                              ftrt_harness.nccl_hostid_argv(argv, "ftrt-gpu-ft-joiner"),
                              env=env, stdout=klog, stderr=subprocess.STDOUT)
    while time.monotonic() < t_end and job_p.poll() is None and join_p.poll() is None:
        st = read(status)
        if st.get("joins", 0) >= 1 and any(r["world_rank"] == 3 and r["role"] == "spare"
                                           for r in st.get("ranks", [])):
            break
        time.sleep(0.05)
    os.unlink(hold)
    try:
        rc, jrc = job_p.wait(timeout=timeout), join_p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        for p in (job_p, join_p):
            p.kill()
        rc = jrc = None
    outs = []
    for f in (jlog, klog):
        f.seek(0)
        outs.append(f.read())
        f.close()
    check(rc is not None, "join: the job or the joiner hung", "\n".join(outs))
    return rc, outs[0], jrc, outs[1]


def norms(out):
    """{(epoch, step): {rank: norm}} from the trainers' gnorm lines."""
    got = {}
    for r, e, s, v in re.findall(r"^gnorm rank (\d) epoch (\d+) step (\d+) (\S+)$", out, re.M):
        got.setdefault((int(e), int(s)), {})[int(r)] = v
    return got


def check(cond, what, out=""):
    if not cond:
        print(out[-6000:])
        raise SystemExit(f"FAIL: {what}")


def driver(host_sync, join=False):
    py = sys.executable
    work = tempfile.mkdtemp(prefix="ftrt-gpu-ft.")
    res = {}
    for name, kill_at in (("ref", -1), ("kill", KILL_AT)):
        d = os.path.join(work, name)
        os.makedirs(d)
        if join and kill_at >= 0:
            rc, out, jrc, jout = join_job(py, d, kill_at)
            check(rc == 0 and jrc == 0, f"join: the job's ftrt-run exited {rc}, the joiner's "
                  f"{jrc}", out + "\n--- joiner ---\n" + jout)
            out += jout  # (the joiner's gnorm lines: it is logical rank 1 after the recovery)
        else:
            rc, out = job(py, d, kill_at, host_sync)
        if rc == 77 or "skipped:" in out:  # mpirun --enable-recovery may exit 0
            print(out[-2000:])
            return 77
        # mpirun reports the victim's SIGKILL in its own exit status (the kill run); the job's
        # outcome is the report's (ftrt-run would say the same; it is not used here)
        rep = json.load(open(os.path.join(d, "report.json")))
        check(rc == 0 or (kill_at >= 0 and "exited on signal 9" in out),
              f"{name}: mpirun exited {rc}", out)
        check(rep.get("status") == "finished" and rep.get("steps") == STEPS,
              f"{name}: report status {rep.get('status')}, steps {rep.get('steps')}", out)
        res[name] = (d, out)
    d_ref, out_ref = res["ref"]
    d_kill, out_kill = res["kill"]
    for name, (_, out) in res.items():
        by = norms(out)
        for key, v in sorted(by.items()):
            check(len(set(v.values())) == 1, f"{name}: epoch/step {key}: gradient norms "
                  f"differ between the trainers ({v}): p.grad was not the mean after "
                  f"backward()", out)
    for r in (0, 1):
        check(f"rank {r}: synced in backward at {STEPS} of the steps run here" in out_ref,
              f"ref: rank {r} did not see p.grad averaged at every backward()", out_ref)
    rep = json.load(open(os.path.join(d_kill, "report.json")))
    f = rep.get("failures") or []
    check(len(f) == 1 and f[0].get("recovered") and f[0].get("logical_rank") == 1,
          f"kill: report failures {f}", out_kill)
    check("ftrt: recovered (epoch 1)" in out_kill, "kill: no recovery logged", out_kill)
    if join:
        check(f[0].get("spare_world_rank") == 3 and
              rep.get("control_plane", {}).get("joins") == 1,
              f"join: the joined process (slot 3) took logical rank 1 "
              f"(spare {f[0].get('spare_world_rank')}, control plane "
              f"{rep.get('control_plane')})", out_kill)
    hs = ""
    if host_sync:
        m = re.search(rf"^hsync rank 0 epoch 0 step {KILL_AT} (\S+) ms$", out_kill, re.M)
        check(m, f"kill: the survivor's host sync (.item()) of step {KILL_AT} did not return",
              out_kill)
        check(f"hsync rank 0 epoch 0 step {STEPS - 1} " in out_ref, "ref: no host sync", out_ref)
        hs = f"; the survivor's .item() in the failed step returned after {m.group(1)} ms"
    a = open(os.path.join(d_ref, "final.params"), "rb").read()
    b = open(os.path.join(d_kill, "final.params"), "rb").read()
    check(len(a) > 0 and a == b, "final parameters differ from the undisturbed run", out_kill)
    how = " (host sync before step())" if host_sync else \
        " (the spare a process that joined the running job)" if join else ""
    print(f"gpu ft kill{how}: {STEPS} steps, logical rank 1 SIGKILLed mid-backward at step "
          f"{KILL_AT}; resumed at step {f[0].get('resume_step')}, MTTD "
          f"{f[0].get('mttd_s')} s, MTTR {f[0].get('mttr_s')} s; final parameters "
          f"byte-identical ({len(a)} bytes); gradient norms equal across trainers at every "
          f"step{hs}")
    shutil.rmtree(work, ignore_errors=True)
    print("PASS")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--driver", action="store_true", help="run both jobs and compare")
    ap.add_argument("--report")
    ap.add_argument("--params-out")
    ap.add_argument("--kill-at", type=int, default=-1)
    ap.add_argument("--host-sync", action="store_true",
                    help="read the gradient norm with .item() between backward() and step()")
    ap.add_argument("--join", action="store_true",
                    help="driver: the kill run's spare is a process that joins the running job")
    ap.add_argument("--hold-file",
                    help="trainer: wait at the start of step --kill-at while this file exists")
    a = ap.parse_args()
    if a.driver:
        return driver(a.host_sync, a.join)
    return trainer(a)


if __name__ == "__main__":
    sys.exit(main())
