"""The real CUDA example's kill test (scripts/gpu-run.sh step torch-lm-gpu; issue 21):
examples/train_lm.py --device cuda --amp bf16 (a GPT-style character LM, AdamW, LambdaLR,
dropout, gradient clipping, bfloat16 autocast) through ftrt.pytorch.FaultTolerant, run twice as
real ftrt jobs: mpirun, 1 coordinator + 2 trainers + 1 hot spare, all on the one GPU (NCCL over
sockets, a NCCL_HOSTID per rank: docs/gpu.md's test arrangement, not a performance figure),
libftrt_gpu loaded through FTRT_LIB:

  - an undisturbed run;
  - a run in which logical rank 1 SIGKILLs itself from a gradient hook during the backward pass
    of step KILL_AT (train_lm.py's FTRT_TEST_LM_KILL knob; the later layers' buckets are in
    flight), with the ground truth in FTRT_FAULT_LOG: the spare takes its logical rank with the
    device state from the survivor, FaultTolerant recovers inside step(), the run goes on.

Checks: both reports "finished" after every step, the kill run's one recovered failure of
logical rank 1 (MTTD from the fault log, MTTR), the same `final state` line (step count,
scheduler, LR, tokens), final parameters byte-identical (deterministic algorithms and
CUBLAS_WORKSPACE_CONFIG, as train_lm.py sets them), and an eMFU in both reports, from the
datasheet's dense bf16 peak of the GPU (ftrt.pytorch_flops.GPU_PEAKS). Prints a RESULT line
(scripts/gpu-run.sh puts it in summary.json) and "PASS"; exits 1 on a failed check, 77 when
torch has no CUDA device or the library is not libftrt_gpu.

--device cpu: the same jobs and checks on the CPU with libftrt and a tiny model (the eMFU's peak
then libftrt's CPU table's), a rehearsal of this program on a machine without a GPU
(tests/python/test_gpu_ft_rehearsal.py), which says nothing about CUDA."""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_ft_prog import check, one_gpu_job  # noqa: E402  (also puts bindings/python on the path)

TRAIN_LM = os.path.join(HERE, "..", "..", "examples", "train_lm.py")
# Per device: steps, the step whose backward pass logical rank 1 dies in, the model and batch.
# CUDA: 6 layers x d_model 384, context 256, 16 sequences per trainer (about 10.7 M parameters):
# big enough for the tensor cores to matter, small enough that a job is its start-up.
CONFIGS = {
    "cuda": dict(steps=40, kill_at=20, args=["--d-model", "384", "--layers", "6", "--heads",
                                             "6", "--context", "256", "--batch", "16"]),
    "cpu": dict(steps=10, kill_at=5, args=["--d-model", "32", "--layers", "1", "--heads", "2",
                                           "--context", "16", "--batch", "4"]),
}


def lm_argv(py, a, c, d):
    return [py, os.path.abspath(TRAIN_LM), "--device", a.device, "--amp", a.amp,
            "--steps", str(c["steps"]), "--warmup", "5", "--warmup-steps", "3", "--seed", "5",
            "--ckpt-every", "0", "--ckpt-dir", os.path.join(d, "ckpt"), "--eval-batches", "2",
            "--progress-every", "10", "--report", os.path.join(d, "report.json"),
            "--params-out", os.path.join(d, "final.params")] + c["args"]


def cuda_ready():
    """None when torch sees a CUDA device and ftrt loaded libftrt_gpu, else why not."""
    import torch
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    import ftrt
    if not ftrt.has_gpu_plane():
        return "FTRT_LIB is not libftrt_gpu (ftrt.has_gpu_plane() is False)"
    return None


def run_pair(a, c, work):
    """The undisturbed job and the kill job; {name: (directory, rc, output, report)}, or 77."""
    res = {}
    for name in ("ref", "kill"):
        d = os.path.join(work, name)
        os.makedirs(d)
        env = {"FTRT_FAULT_LOG": os.path.join(d, "faults.jsonl")}
        if name == "kill":
            env["FTRT_TEST_LM_KILL"] = f"1:{c['kill_at']}"
        rc, out = one_gpu_job(lm_argv(sys.executable, a, c, d), d, env=env,
                              timeout=a.job_timeout, tag="ftrt-gpu-lm")
        if rc == 77 or "has no CUDA device" in out:  # mpirun --enable-recovery may exit 0
            print(out[-2000:])
            return 77
        check(os.path.exists(os.path.join(d, "report.json")), f"{name}: no report (exit {rc})",
              out)
        rep = json.load(open(os.path.join(d, "report.json")))
        # mpirun reports the victim's SIGKILL in its own exit status; the job's outcome is the
        # report's
        check(rc == 0 or (name == "kill" and "exited on signal 9" in out),
              f"{name}: mpirun exited {rc}", out)
        check(rep.get("status") == "finished" and rep.get("steps") == c["steps"],
              f"{name}: report status {rep.get('status')}, steps {rep.get('steps')}", out)
        res[name] = (d, out, rep)
    return res


def final_state(out):
    m = re.findall(r"^final state: (step_count \d+, scheduler last_epoch \d+, lr \S+, "
                   r"tokens \d+)", out, re.M)
    return m[0] if len(m) == 1 else None


def emfu_of(name, out, rep, a):
    """The report's eMFU (checked > 0) and the peak's source line of logical rank 0."""
    led = rep.get("ledger") or {}
    line = re.findall(r"^ftrt: eMFU inputs: .*$", out, re.M)
    check(len(line) == 1 and 0 < (led.get("emfu") or 0) < 1,
          f"{name}: eMFU {led.get('emfu')}, inputs line {line}", out)
    if a.device == "cuda" and a.amp == "bf16":
        check("dense bf16 peak" in line[0] and "datasheet" in line[0],
              f"{name}: eMFU not from the GPU's datasheet bf16 peak: {line[0]}", out)
    return led["emfu"], line[0]


def driver(a):
    c = CONFIGS[a.device]
    if a.device == "cuda":
        why = cuda_ready()
        if why:
            print(f"skipped: {why}")
            return 77
    work = tempfile.mkdtemp(prefix="ftrt-gpu-lm.")
    res = run_pair(a, c, work)
    if res == 77:
        return 77
    (d_ref, out_ref, rep_ref), (d_kill, out_kill, rep_kill) = res["ref"], res["kill"]
    check(not rep_ref.get("failures"), f"ref: failures {rep_ref.get('failures')}", out_ref)
    f = rep_kill.get("failures") or []
    check(len(f) == 1 and f[0].get("recovered") and f[0].get("logical_rank") == 1
          and f[0].get("mttd_source") == "fault_log",
          f"kill: report failures {f}", out_kill)
    check("ftrt: recovered (epoch 1)" in out_kill, "kill: no recovery logged", out_kill)
    st = final_state(out_ref)
    check(st is not None and final_state(out_kill) == st,
          f"final state lines differ: {st} / {final_state(out_kill)}", out_kill)
    p_ref = open(os.path.join(d_ref, "final.params"), "rb").read()
    p_kill = open(os.path.join(d_kill, "final.params"), "rb").read()
    check(len(p_ref) > 0 and p_ref == p_kill, "final parameters differ from the undisturbed run",
          out_kill)
    e_ref, src = emfu_of("ref", out_ref, rep_ref, a)
    e_kill, _ = emfu_of("kill", out_kill, rep_kill, a)
    head = re.search(r"^train_lm: ftrt.*$", out_ref, re.M)
    print(head.group(0) if head else "(no header line)")
    print(src)
    print(f"gpu lm kill ({a.device}, amp {a.amp}): {c['steps']} steps, logical rank 1 "
          f"SIGKILLed mid-backward at step {c['kill_at']}; resumed at step "
          f"{f[0].get('resume_step')}, MTTD {f[0]['mttd_s'] * 1e3:.1f} ms (from the fault "
          f"log), MTTR {f[0]['mttr_s'] * 1e3:.1f} ms; "
          f"eMFU {e_ref:.4g} (undisturbed) / {e_kill:.4g} (kill); final parameters "
          f"byte-identical ({len(p_ref)} bytes), {st}")
    print(f"RESULT bench=gpu_lm device={a.device} amp={a.amp} steps={c['steps']} "
          f"kill_at={c['kill_at']} resume_step={f[0].get('resume_step')} "
          f"mttd_s={f[0]['mttd_s']:.6g} mttr_s={f[0]['mttr_s']:.6g} emfu_ref={e_ref:.6g} "
          f"emfu_kill={e_kill:.6g} params_bytes={len(p_ref)} byte_identical=1")
    shutil.rmtree(work, ignore_errors=True)
    print("PASS")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--driver", action="store_true", help="run both jobs and compare (the "
                    "only mode; kept for the same command line as gpu_ft_prog.py)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--amp", choices=["bf16", "off"], default="bf16")
    ap.add_argument("--job-timeout", type=float, default=100, help="seconds per job (100)")
    a = ap.parse_args()
    return driver(a)


if __name__ == "__main__":
    sys.exit(main())
