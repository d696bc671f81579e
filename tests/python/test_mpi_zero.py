"""Real mpirun jobs of examples/train_lm.py with AdamW's state sharded over the trainers by
ftrt.pytorch.ZeroOptimizer (ZeRO-1 and ZeRO-2), 1 coordinator + 4 trainers + hot spares, the
shards' partner replicas refreshed every 2 steps (FTRT_SHARD_REPLICA_EVERY=2):
 - ZeRO-1 ends bitwise where the replicated AdamW ends (AdamW is element-wise: a slice of
   the update is the update of the slice), holding 1/4 of the optimizer state per trainer;
 - a SIGKILLed trainer's shard comes back from its partner's memory (state_from "replica",
   rework within the refresh interval) and the run ends byte-identical (ZeRO-1 and ZeRO-2);
 - a trainer and its partner SIGKILLed together: the shard is nowhere in memory, every
   trainer goes back to the committed checkpoint, the report says so, byte-identical still;
 - a drained trainer (ZeRO-2): the shard moves from memory at the drain's step boundary, no
   rework, byte-identical.
Kept short (24 steps of 8 x 32 characters) for 2-core machines. A ctest of its own
(python.zero) beside python.pytest."""
import os
import re
import shutil
import signal

import pytest

from conftest import PYTHON, REPO, Job, job_env, needs_mpirun, needs_torch
import ftrt_harness as h

pytestmark = [needs_torch, needs_mpirun]

TRAIN_LM = os.path.join(REPO, "examples", "train_lm.py")
STEPS, N, BATCH, CONTEXT, REPLICA_EVERY = 24, 4, 8, 32, 2
ARGS = ["--steps", str(STEPS), "--batch", str(BATCH), "--context", str(CONTEXT),
        "--warmup", "6", "--ckpt-every", "8", "--progress-every", "8", "--seed", "4",
        "--print-memory"]


def lm_job(directory, zero, spares=1, env=None):
    status = os.path.join(directory, "status.json")
    shutil.rmtree(os.path.join(directory, "memory"), ignore_errors=True)  # no earlier run's
    args = ARGS + ["--zero", str(zero), "--ckpt-dir", os.path.join(directory, "ckpt"),
                   "--params-out", os.path.join(directory, "final.params"),
                   "--report", os.path.join(directory, "report.json"),
                   "--memory-out", os.path.join(directory, "memory")]
    e = {"FTRT_SHARD_REPLICA_EVERY": str(REPLICA_EVERY),
         "FTRT_FAULT_LOG": os.path.join(directory, "faults.jsonl"), "FTRT_SPARES": str(spares)}
    e.update(env or {})
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(N + 1 + spares, [PYTHON, TRAIN_LM] + args),
                         status=status, python=PYTHON)
    return Job(directory, cmd, job_env(e), status=status)


def final_state(out):
    # (not anchored: mpirun merges the trainers' stdout, and another trainer's "state
    # memory:" line may land in front of it)
    m = re.findall(r"final state: (step_count \d+, scheduler last_epoch \d+, lr \S+, "
                   r"tokens \d+)", out)
    assert len(m) == 1, out[-4000:]
    return m[0]


def params(d):
    with open(os.path.join(d, "final.params"), "rb") as f:
        return f.read()


def run_ref(work, name, zero):
    job = lm_job(os.path.join(work, name), zero)
    rc = job.run(300)
    assert rc == 0, f"job exited {rc}:\n{job.out[-6000:]}"
    return job


@pytest.fixture(scope="module")
def ref0(work):
    return run_ref(work, "zero-ref0", 0)


@pytest.fixture(scope="module")
def ref1(work):
    return run_ref(work, "zero-ref1", 1)


@pytest.fixture(scope="module")
def ref2(work):
    return run_ref(work, "zero-ref2", 2)


def state_memory(job, zero):
    """{logical rank: {kind: bytes}} from the trainers' "state memory:" lines, read from the
    files train_lm --memory-out wrote (mpirun's merged stdout lost such a line in CI)."""
    found = {}
    d = os.path.join(job.dir, "memory")
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        with open(os.path.join(d, name)) as f:
            text = f.read()
        m = re.match(r"state memory: logical rank (\d+) of (\d+), zero (\d): ([^;\n]*)", text)
        assert m, f"{name}: {text!r}"
        if int(m.group(2)) == N and int(m.group(3)) == zero:
            found[int(m.group(1))] = {k: int(v) for k, v in
                                      re.findall(r"(\w+) (\d+) B", m.group(4))}
    return found


def test_zero1_is_bitwise_the_replicated_optimizer(ref0, ref1):
    """Same job, AdamW replicated or sharded: the same bytes at the end, the same Python
    state; each of the 4 trainers held a quarter of the optimizer state (plus Adam's step
    and the padding of the last slice)."""
    assert params(ref1.dir) == params(ref0.dir)
    assert final_state(ref1.out) == final_state(ref0.out)
    mem0, mem1 = state_memory(ref0, 0), state_memory(ref1, 1)
    assert sorted(mem1) == list(range(N)) and sorted(mem0) == list(range(N)), \
        f"memory files: ZeRO-0 {sorted(mem0)}, ZeRO-1 {sorted(mem1)} (in {ref0.dir}, {ref1.dir})"
    for r in range(N):
        full, shard = mem0[r]["optimizer_state"], mem1[r]["optimizer_state"]
        # a quarter, give or take Adam's step counters (one per parameter replicated, one
        # per shard) and the padding of the last slice
        assert abs(shard - full / N) < 256, (r, shard, full)
        assert mem1[r]["params"] == mem0[r]["params"]
        # the own image (every region) and the partner's shard; none without SHARDED regions
        assert mem1[r]["replica_images"] == mem1[r]["params"] + 2 * shard + \
            mem1[r]["buffers"] + mem1[r]["python_state"], mem1[r]
        assert mem0[r]["replica_images"] == 0
    rep = h.load_json(os.path.join(ref1.dir, "report.json"))
    assert rep["status"] == "finished" and rep["steps"] == STEPS and not rep["failures"]


def kill_one(work, name, zero, at_step=11):
    d = os.path.join(work, name)
    job = lm_job(d, zero).start()
    victim = job.wait_trainer(1, at_step, timeout=120)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(300)
    assert rc == 0, f"job did not survive the kill (exit {rc}):\n{job.out[-6000:]}"
    rep = h.load_json(os.path.join(d, "report.json"))
    assert len(rep["failures"]) == 1, rep["failures"]
    return job, rep["failures"][0]


@pytest.mark.parametrize("zero", [1, 2])
def test_zero_kill_recovers_the_shard_from_memory(work, ref1, ref2, zero):
    """Logical rank 1 SIGKILLed once it has done 11 steps: the spare takes its place, its
    AdamW shard from rank 2's memory (the partner replica), every trainer back at the
    replica's step (at most REPLICA_EVERY steps redone), and the run ends byte-identical to
    the undisturbed run of the same stage."""
    ref = ref1 if zero == 1 else ref2
    job, fail = kill_one(work, f"zero{zero}-kill", zero)
    assert fail["recovered"] and fail["logical_rank"] == 1, fail
    # A kill during a replica refresh (one generation: the images are invalid while being
    # refreshed; the partner's copy of the victim's image incomplete: lost_image_not_held)
    # falls back to the checkpoint by design; nothing here forces the kill between
    # two refreshes, so that case is accepted, with its reason, and byte-identity still holds.
    if fail["state_from"] != "replica":
        assert fail["state_from"] == "checkpoint" and \
            fail["replica_miss"] in ("no_common_image", "lost_image_not_held"), fail
    else:
        assert fail["rework_steps"] <= REPLICA_EVERY + 1, fail
    assert params(job.dir) == params(ref.dir), "final parameters differ from the undisturbed run"
    assert final_state(job.out) == final_state(ref.out)
    print(f"zero-{zero} kill: resumed at step {fail['resume_step']} from the replica, "
          f"rework {fail['rework_steps']} steps, MTTR {fail['mttr_s'] * 1e3:.1f} ms")


def test_zero_drain_moves_the_shard_with_no_rework(work, ref2):
    """ZeRO-2: logical rank 1 drained (tools/ftrt-ctl) once it has done 6 steps: every trainer
    refreshes the partner replicas at the drain's step boundary (the same step for all), the
    spare takes the shard from memory there, nothing is redone, the drained process leaves
    through FaultTolerant.step() (exit 0), and the run ends byte-identical."""
    d = os.path.join(work, "zero2-drain")
    job = lm_job(d, 2).start()
    # (early: the request waits for the coordinator's 1 s poll of the control directory, and
    # the boundary is a few steps ahead of the trainers)
    victim = job.wait_trainer(1, 6, timeout=120)
    rc, out = job.drain("--rank", str(victim["world_rank"]), wait_s=120)
    if rc != 0 or "moved" not in out:
        job.wait(300)
        pytest.fail(f"{out}\njob's output:\n{job.out[-8000:]}")
    rc = job.wait(300)
    assert rc == 0, f"job did not survive the drain (exit {rc}):\n{job.out[-6000:]}"
    rep = h.load_json(os.path.join(d, "report.json"))
    assert not rep["failures"] and len(rep["drains"]) == 1, (rep["failures"], rep["drains"])
    dr = rep["drains"][0]
    assert dr["moved"] and dr["rework_steps"] == 0 and dr["state_from"] == "replica", dr
    assert params(job.dir) == params(ref2.dir), "final parameters differ from the undisturbed run"
    assert final_state(job.out) == final_state(ref2.out)
    print(f"zero-2 drain: resumed at step {dr['resume_step']} from the replicas, no rework, "
          f"time to move {dr['time_to_move_s'] * 1e3:.1f} ms")


def test_zero_partners_killed_fall_back_to_the_checkpoint(work, ref1):
    """Logical ranks 1 and 2 (2 holds 1's replica on one host) SIGKILLed together: the lost
    shard exists only on disk, so every trainer reloads the committed checkpoint; the report
    says state_from "checkpoint" and why not the replica; byte-identical still."""
    d = os.path.join(work, "zero1-pair")
    job = lm_job(d, 1, spares=2).start()
    v1 = job.wait_trainer(1, 11, timeout=120)
    v2 = job.wait_trainer(2, 0, timeout=10)
    job.inject(signal.SIGKILL, v1, "sigkill")
    job.inject(signal.SIGKILL, v2, "sigkill")
    rc = job.wait(300)
    assert rc == 0, f"job did not survive the kills (exit {rc}):\n{job.out[-6000:]}"
    rep = h.load_json(os.path.join(d, "report.json"))
    fails = rep["failures"]
    assert sorted(f["logical_rank"] for f in fails) == [1, 2], fails
    assert all(f["recovered"] for f in fails), fails
    last = max(fails, key=lambda f: f["epoch"])
    assert last["state_from"] == "checkpoint", fails
    assert last["replica_miss"], fails
    assert last["resume_step"] % 8 == 0, fails  # a committed checkpoint's step
    assert params(d) == params(ref1.dir), "final parameters differ from the undisturbed run"
    assert final_state(job.out) == final_state(ref1.out)


def export(job, name):
    """The newest committed step of job's checkpoint exported (tools/ftrt-ckpt export)."""
    import subprocess
    import torch
    out = os.path.join(job.dir, f"{name}.pt")
    p = subprocess.run([PYTHON, os.path.join(REPO, "tools", "ftrt-ckpt"), "export",
                        os.path.join(job.dir, "ckpt"), "--out", out, "--no-safetensors"],
                       capture_output=True, text=True, env=job_env({}))
    assert p.returncode == 0, p.stdout + p.stderr
    return torch.load(out), p.stdout


def test_zero_checkpoint_exports_as_the_unsharded_optimizer(ref0, ref1):
    """`ftrt-ckpt export` of the ZeRO-1 job gathers every rank's AdamW shard and cuts each
    parameter's state out of it: the exported model and optimizer state_dict equal, tensor
    for tensor and bitwise, the export of the replicated job at the same step."""
    import torch
    a, _ = export(ref0, "replicated")
    b, out = export(ref1, "zero")
    assert "gathered from 4 ranks" in out or "gathered from 4 ranks" in str(b["ftrt"]), out
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys() and len(sa) > 0
    for i in sa:
        assert sa[i].keys() == sb[i].keys(), i
        for key in sa[i]:
            assert torch.equal(sa[i][key], sb[i][key]), (i, key)
    ga, gb = a["optimizer"]["param_groups"], b["optimizer"]["param_groups"]
    assert [g["params"] for g in ga] == [g["params"] for g in gb]
    assert ga[0]["lr"] == gb[0]["lr"] and ga[0]["betas"] == gb[0]["betas"]
