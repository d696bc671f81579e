"""Real mpirun jobs of examples/train_torch.py: ftrt (1 coordinator + 4 trainers + 1 hot
spare) against torch.distributed gloo DDP (4 ranks), and ftrt with a SIGKILLed trainer.

Tolerances (docs/pytorch.md, "Parity with torch.distributed, and the tolerance"): with u = 2^-24 (float32 unit roundoff) and
gamma(k) = k u / (1 - k u), an averaged gradient is fl(sum of N float32 gradients, in the
order the allreduce chooses) times (float)(1/N), so it differs from the exact mean by at most
gamma(N + 1) * mean_i |g_i| per element, whatever the summation order; two allreduces that add
in different orders (MPI's vs gloo's ring) differ by at most twice that. These bounds are
checked where they apply exactly: within each run at every step, and between the runs at step
0, where both start from identical parameters and local gradients. After that the runs'
parameters differ by those roundings and their gradients are taken at slightly different
points, so the final parameters are compared with an empirical tolerance (PARAM_ATOL)."""
import importlib.util
import json
import os
import re
import signal
import time

import numpy as np
import pytest

from conftest import (PYTHON, REPO, TRAIN_TORCH, Job, ftrt_job, gloo_job, job_env,
                      needs_mpirun, needs_torch)
import ftrt_harness as h

pytestmark = [needs_torch, needs_mpirun]

STEPS = 150
N = 4
COMMON = ["--steps", str(STEPS), "--batch", "32", "--hidden", "64", "--seed", "7"]
FTRT_ARGS = COMMON + ["--ckpt-every", "25", "--step-sleep-ms", "10"]
U = 2.0 ** -24
# Final parameters, ftrt vs gloo after STEPS steps: observed max |diff| about 2e-7 (values up
# to ~0.6); 1e-5 leaves 50x headroom and is still 1000x below how far training moves them.
PARAM_ATOL = 1e-5


def gamma(k):
    return k * U / (1 - k * U)


def load_example():
    spec = importlib.util.spec_from_file_location("train_torch", TRAIN_TORCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_params(path):
    return np.fromfile(path, dtype="<f4")


def read_grads(run_dir, rank, nparams):
    """(local [STEPS, n], averaged [STEPS, n]) of one rank from --dump-grads."""
    a = np.fromfile(os.path.join(run_dir, "grads", f"grads-rank{rank}.f32"), dtype="<f4")
    assert a.size == STEPS * 2 * nparams, f"rank {rank}: {a.size} floats dumped"
    a = a.reshape(STEPS, 2, nparams)
    return a[:, 0, :], a[:, 1, :]


def run_ok(job, timeout=240):
    rc = job.run(timeout)
    assert rc == 0, f"job exited {rc}:\n{job.out[-6000:]}"
    return job


@pytest.fixture(scope="session")
def ftrt_ref(work):
    d = os.path.join(work, "ftrt-ref")
    job = ftrt_job(d, 6, FTRT_ARGS + ["--ckpt-dir", os.path.join(d, "ckpt"), "--report",
                                      os.path.join(d, "report.json"), "--params-out",
                                      os.path.join(d, "final.params"), "--dump-grads",
                                      os.path.join(d, "grads")])
    return run_ok(job)


@pytest.fixture(scope="session")
def gloo_ref(work):
    d = os.path.join(work, "gloo-ref")
    job = gloo_job(d, N, COMMON + ["--params-out", os.path.join(d, "final.params"),
                                   "--dump-grads", os.path.join(d, "grads")])
    return run_ok(job)


def test_binding_in_a_job(work):
    """Collectives, bucketer, checkpoints and GradAverager (against a manual mean of every
    rank's local gradient) inside a real job: 1 coordinator + 3 trainers."""
    d = os.path.join(work, "binding")
    status = os.path.join(d, "status.json")
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(4, [PYTHON, os.path.join(REPO, "tests", "python",
                                                                "mpi_binding_prog.py"),
                                          os.path.join(d, "ckpt")]), status=status, python=PYTHON)
    job = Job(d, cmd, job_env({"FTRT_SPARES": "0"}), status=status)
    rc = job.run(120)
    passed = sorted(re.findall(r"rank (\d+): PASS", job.out))  # lines may interleave
    assert passed == ["0", "1", "2"], job.out[-6000:]
    assert rc == 0, job.out[-4000:]


def test_ftrt_example_trains(ftrt_ref):
    out = ftrt_ref.out
    acc = [float(l.split()[2]) for l in out.splitlines() if l.startswith("test accuracy:")]
    assert len(acc) == 1 and acc[0] > 0.90, f"test accuracy {acc}"
    with open(os.path.join(ftrt_ref.dir, "report.json")) as f:
        rep = json.load(f)
    assert rep["status"] == "finished" and rep["steps"] == STEPS and not rep["failures"]
    assert rep["trainers"] == N and rep["spares"] == 1
    assert rep["checkpoints"]["committed"] == STEPS // 25
    assert os.path.getsize(os.path.join(ftrt_ref.dir, "final.params")) > 0


@pytest.mark.parametrize("which", ["ftrt", "gloo"])
def test_averaged_gradients_are_the_mean(which, request):
    """Every step, every element: the gradient the optimizer used is the mean of the ranks'
    local gradients within gamma(N + 1) * mean|g|, and bitwise the same on every rank."""
    job = request.getfixturevalue(f"{which}_ref")
    n = read_params(os.path.join(job.dir, "final.params")).size
    locs, avgs = zip(*[read_grads(job.dir, r, n) for r in range(N)])
    loc = np.stack(locs).astype(np.float64)          # [rank, step, n]
    for r in range(1, N):
        assert np.array_equal(avgs[0], avgs[r]), f"{which}: rank {r}'s averaged gradient differs"
    exact = loc.mean(axis=0)
    bound = gamma(N + 1) * np.abs(loc).mean(axis=0) + 2.0 ** -149
    err = np.abs(avgs[0].astype(np.float64) - exact)
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert np.all(err <= bound), (f"{which}: step {worst[0]} element {worst[1]}: |avg - mean| "
                                  f"{err[worst]:.3g} > {bound[worst]:.3g}")
    assert np.abs(loc[0] - loc[1]).max() > 0, "ranks must see different minibatches"


def test_parity_with_gloo(ftrt_ref, gloo_ref, work):
    """ftrt's averaged gradients and final parameters against torch.distributed gloo DDP."""
    fp = read_params(os.path.join(ftrt_ref.dir, "final.params"))
    gp = read_params(os.path.join(gloo_ref.dir, "final.params"))
    assert fp.size == gp.size
    n = fp.size
    f = [read_grads(ftrt_ref.dir, r, n) for r in range(N)]
    g = [read_grads(gloo_ref.dir, r, n) for r in range(N)]
    # Step 0: same initial parameters, same minibatches -> bitwise the same local gradients;
    # the averages differ only by the summation order of the allreduce.
    for r in range(N):
        assert np.array_equal(f[r][0][0], g[r][0][0]), f"rank {r}: step-0 local gradients differ"
    loc0 = np.stack([f[r][0][0] for r in range(N)]).astype(np.float64)
    bound0 = 2 * gamma(N + 1) * np.abs(loc0).mean(axis=0) + 2.0 ** -149
    d0 = np.abs(f[0][1][0].astype(np.float64) - g[0][1][0])
    assert np.all(d0 <= bound0), f"step 0: averaged gradients differ by {d0.max():.3g}"
    # All steps: report the drift of the averaged gradients.
    fa, ga = f[0][1].astype(np.float64), g[0][1].astype(np.float64)
    gdiff = np.abs(fa - ga)
    grel = gdiff / np.maximum(np.abs(ga), 1e-12)
    # Final parameters.
    pd = np.abs(fp.astype(np.float64) - gp)
    prel = pd / np.maximum(np.abs(gp.astype(np.float64)), 1e-12)
    mod = load_example()
    torch = mod.setup_torch()
    args = mod.parse_args(COMMON)
    init = mod.flat_params(torch, mod.build(torch, args)[0]).numpy().astype(np.float64)
    moved = np.abs(gp - init).max()
    figures = {
        "steps": STEPS, "trainers": N, "parameters": int(n),
        "step0_grad_max_abs_diff": float(d0.max()),
        "step0_grad_bound_max": float(bound0.max()),
        "step0_grad_bitwise_equal_fraction": float(np.mean(d0 == 0)),
        "grad_max_abs_diff_all_steps": float(gdiff.max()),
        "grad_max_rel_diff_all_steps (|g|>1e-6)": float(grel[np.abs(ga) > 1e-6].max()),
        "grad_max_diff_over_step_max_abs_grad": float((gdiff.max(axis=1)
                                                        / np.abs(ga).max(axis=1)).max()),
        "param_max_abs_diff": float(pd.max()),
        "param_max_rel_diff (|p|>1e-3)": float(prel[np.abs(gp) > 1e-3].max()),
        "param_bitwise_equal_fraction": float(np.mean(pd == 0)),
        "param_max_abs_move_from_init": float(moved),
        "param_atol": PARAM_ATOL,
    }
    with open(os.path.join(work, "parity.json"), "w") as fh:
        json.dump(figures, fh, indent=1)
    print("parity figures:", json.dumps(figures, indent=1))
    assert pd.max() <= PARAM_ATOL, f"final parameters differ by {pd.max():.3g} > {PARAM_ATOL}"
    assert moved > 1000 * PARAM_ATOL, "training must move the parameters far beyond the tolerance"


def test_digits_data_env(monkeypatch, tmp_path):
    """--data defaults to $DIGITS_DATA as examples/train_mlp's does (the GPU kit carries the
    data set there): set and not empty it wins over Debian's file, --data over both, and a
    DIGITS_DATA naming no file is refused by name."""
    mod = load_example()
    copy = tmp_path / "digits-copy.csv.gz"
    copy.write_bytes(open(mod.DATA_DEFAULT, "rb").read())
    monkeypatch.setenv("DIGITS_DATA", str(copy))
    a = mod.parse_args(COMMON)
    assert a.data == str(copy)
    x, y = mod.load_digits(a.data)
    assert x.shape == (1797, 64) and y.shape == (1797,)
    assert mod.parse_args(COMMON + ["--data", mod.DATA_DEFAULT]).data == mod.DATA_DEFAULT
    monkeypatch.setenv("DIGITS_DATA", "")
    assert mod.parse_args(COMMON).data == mod.DATA_DEFAULT
    monkeypatch.delenv("DIGITS_DATA")
    assert mod.parse_args(COMMON).data == mod.DATA_DEFAULT
    monkeypatch.setenv("DIGITS_DATA", str(tmp_path / "absent.csv.gz"))
    with pytest.raises(SystemExit):
        mod.parse_args(COMMON)


def test_kill_is_byte_identical(ftrt_ref, work):
    """SIGKILL of trainer logical rank 2 (pid from the status file): the hot spare takes its
    place, the job finishes, and the final parameters are byte-identical to the undisturbed
    run's."""
    d = os.path.join(work, "ftrt-kill")
    fault_log = os.path.join(d, "faults.jsonl")
    job = ftrt_job(d, 6, FTRT_ARGS + ["--ckpt-dir", os.path.join(d, "ckpt"), "--report",
                                      os.path.join(d, "report.json"), "--params-out",
                                      os.path.join(d, "final.params"), "--dump-grads",
                                      os.path.join(d, "grads")],
                   env={"FTRT_FAULT_LOG": fault_log})
    job.start()
    victim = job.wait_trainer(2, 40)
    job.inject(signal.SIGKILL, victim, "sigkill")  # logged to the job's FTRT_FAULT_LOG
    rc = job.wait(240)
    assert rc == 0, f"job did not survive the kill (exit {rc}):\n{job.out[-6000:]}"
    with open(os.path.join(d, "report.json")) as fh:
        rep = json.load(fh)
    assert len(rep["failures"]) == 1, rep["failures"]
    fail = rep["failures"][0]
    assert fail["kind"] == "connection_lost" and fail["recovered"] and fail["logical_rank"] == 2
    assert fail["mttd_source"] == "fault_log" and fail["mttd_s"] < 1.0
    st = job.status_json()
    spare = [r for r in st["ranks"] if r["world_rank"] == fail["spare_world_rank"]][0]
    assert spare["role"] == "trainer" and spare["logical_rank"] == 2, "spare holds rank 2"
    assert "recovered (epoch 1): resuming at step" in job.out
    resumed = fail["resume_step"]
    assert 40 <= resumed < STEPS, f"the kill landed mid-run (resumed at {resumed})"
    with open(os.path.join(d, "final.params"), "rb") as a, \
            open(os.path.join(ftrt_ref.dir, "final.params"), "rb") as b:
        assert a.read() == b.read(), "final parameters differ from the undisturbed run"
    print(f"kill: logical rank 2 (pid {victim['pid']}) at >= 40 steps done, resumed at step "
          f"{resumed}, MTTD {fail['mttd_s'] * 1e3:.1f} ms, MTTR {fail['mttr_s'] * 1e3:.1f} ms; "
          f"final parameters byte-identical")


def test_shrink_goes_on_with_three(ftrt_ref, work):
    """FTRT_NO_SPARE=shrink, no hot spare: SIGKILL of trainer logical rank 1; the job goes on
    with 3 trainers in the same launch (the rank above moves down, its data rank stays), exits
    0 with a test accuracy above 90 %, the report says one shrink, and the parameters differ
    from the undisturbed run's (logical rank 1's data was skipped from then on)."""
    d = os.path.join(work, "ftrt-shrink")
    job = ftrt_job(d, 5, FTRT_ARGS + ["--ckpt-dir", os.path.join(d, "ckpt"), "--report",
                                      os.path.join(d, "report.json"), "--params-out",
                                      os.path.join(d, "final.params")],
                   env={"FTRT_SPARES": "0", "FTRT_NO_SPARE": "shrink"})
    job.start()
    job.inject(signal.SIGKILL, job.wait_trainer(1, 40), "sigkill")
    rc = job.wait(240)
    assert rc == 0, f"job did not go on after the kill (exit {rc}):\n{job.out[-6000:]}"
    with open(os.path.join(d, "report.json")) as fh:
        rep = json.load(fh)
    assert rep["shrinks"] == 1 and rep["trainers_at_end"] == 3, rep
    fail = rep["failures"][0]
    assert fail["recovered"] and fail["shrunk"] and fail["logical_rank"] == 1, fail
    assert "mean over 3 trainers" in job.out, job.out[-3000:]
    acc = [float(m) for m in re.findall(r"test accuracy: ([0-9.]+)", job.out)]
    assert len(acc) == 1 and acc[0] > 0.90, acc
    with open(os.path.join(d, "final.params"), "rb") as a, \
            open(os.path.join(ftrt_ref.dir, "final.params"), "rb") as b:
        assert a.read() != b.read(), "a shrink must change the training (data skipped)"
    print(f"shrink: resumed at step {fail['resume_step']} with 3 trainers, MTTR "
          f"{fail['mttr_s'] * 1e3:.1f} ms, test accuracy {acc[0]:.4f}")


def test_drain_is_byte_identical(ftrt_ref, work):
    """tools/ftrt-ctl drain of trainer logical rank 2: its rank goes to the hot spare at the next
    step boundary, the drained process leaves through FaultTolerant.step() (SystemExit(0),
    ftrt_finalize done), the job finishes with no failure and no rework, byte-identical."""
    d = os.path.join(work, "ftrt-drain")
    job = ftrt_job(d, 6, FTRT_ARGS + ["--ckpt-dir", os.path.join(d, "ckpt"), "--report",
                                      os.path.join(d, "report.json"), "--params-out",
                                      os.path.join(d, "final.params")])
    job.start()
    victim = job.wait_trainer(2, 40)
    rc, out = job.drain("--rank", str(victim["world_rank"]))
    assert rc == 0 and "moved" in out, out
    rc = job.wait(240)
    assert rc == 0, f"job did not survive the drain (exit {rc}):\n{job.out[-6000:]}"
    with open(os.path.join(d, "report.json")) as fh:
        rep = json.load(fh)
    assert not rep["failures"] and len(rep["drains"]) == 1, (rep["failures"], rep["drains"])
    dr = rep["drains"][0]
    assert dr["moved"] and dr["rework_steps"] == 0 and dr["logical_rank"] == 2, dr
    assert "ftrt: drained (logical rank 2)" in job.out
    with open(os.path.join(d, "final.params"), "rb") as a, \
            open(os.path.join(ftrt_ref.dir, "final.params"), "rb") as b:
        assert a.read() == b.read(), "final parameters differ from the undisturbed run"
    print(f"drain: logical rank 2 moved in {dr['time_to_move_s'] * 1e3:.1f} ms, resumed at step "
          f"{dr['resume_step']}, no rework; final parameters byte-identical")


@pytest.fixture(scope="session")
def ftrt_view(work):
    d = os.path.join(work, "ftrt-view")
    job = ftrt_job(d, 6, FTRT_ARGS + ["--bucket-view", "--ckpt-dir", os.path.join(d, "ckpt"),
                                      "--params-out", os.path.join(d, "final.params"),
                                      "--dump-grads", os.path.join(d, "grads")])
    return run_ok(job)


def test_bucket_views_match_copies(ftrt_ref, ftrt_view):
    """--bucket-view (gradient_as_bucket_view): every rank's averaged gradient at every step
    and the final parameters bitwise those of the run without views, and nothing packed."""
    n = read_params(os.path.join(ftrt_ref.dir, "final.params")).size
    for r in range(N):
        _, ref = read_grads(ftrt_ref.dir, r, n)
        _, got = read_grads(ftrt_view.dir, r, n)
        assert np.array_equal(ref, got), f"rank {r}: averaged gradients differ with views"
    with open(os.path.join(ftrt_view.dir, "final.params"), "rb") as a, \
            open(os.path.join(ftrt_ref.dir, "final.params"), "rb") as b:
        assert a.read() == b.read(), "final parameters differ with views"
    assert "train_torch: bucketer packed 0 bytes" in ftrt_view.out, ftrt_view.out[-3000:]


def test_kill_with_bucket_views_is_byte_identical(ftrt_ref, work):
    """A SIGKILLed trainer under --bucket-view: the spare builds the same bucket layout, the
    survivors move their gradients to fresh buckets, and the final parameters are
    byte-identical to the undisturbed run's (without views)."""
    d = os.path.join(work, "ftrt-view-kill")
    job = ftrt_job(d, 6, FTRT_ARGS + ["--bucket-view", "--ckpt-dir", os.path.join(d, "ckpt"),
                                      "--report", os.path.join(d, "report.json"),
                                      "--params-out", os.path.join(d, "final.params")])
    job.start()
    victim = job.wait_trainer(2, 40)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(240)
    assert rc == 0, f"job did not survive the kill (exit {rc}):\n{job.out[-6000:]}"
    with open(os.path.join(d, "report.json")) as fh:
        rep = json.load(fh)
    assert len(rep["failures"]) == 1 and rep["failures"][0]["recovered"], rep["failures"]
    assert 40 <= rep["failures"][0]["resume_step"] < STEPS
    with open(os.path.join(d, "final.params"), "rb") as a, \
            open(os.path.join(ftrt_ref.dir, "final.params"), "rb") as b:
        assert a.read() == b.read(), "final parameters differ from the undisturbed run"


def test_relaunch_resumes_byte_identical(ftrt_ref, work):
    """The whole job SIGKILLed after a committed checkpoint, then relaunched: the tensors are
    restored in place from the checkpoint and the result is byte-identical."""
    d = os.path.join(work, "ftrt-relaunch")
    args = FTRT_ARGS + ["--ckpt-dir", os.path.join(d, "ckpt"), "--params-out",
                        os.path.join(d, "final.params")]
    job = ftrt_job(d, 6, args).start()
    st = job.wait_status(lambda s: s["last_committed_step"] >= 50)
    job.kill_all(st["ranks"])  # ftrt-run, mpirun and every rank
    time.sleep(0.5)
    with open(os.path.join(d, "ckpt", "LATEST")) as fh:
        latest = int(fh.read().strip()[len("step-"):])
    assert 50 <= latest < STEPS, f"LATEST names step {latest}"
    job2 = ftrt_job(d, 6, args)
    run_ok(job2)
    assert f"resumed at step {latest}" in job2.out, job2.out[-4000:]
    with open(os.path.join(d, "final.params"), "rb") as a, \
            open(os.path.join(ftrt_ref.dir, "final.params"), "rb") as b:
        assert a.read() == b.read(), "final parameters differ from the undisturbed run"
