"""`python3 -m ftrt.ckpt` (tools/ftrt-ckpt) on the checkpoints of real jobs: a PyTorch
FaultTolerant job (ckpt_prog.py: BatchNorm, a non-persistent and an empty buffer, Adam with
two param groups, StepLR; 1 coordinator + 2 trainers) and train_mlp (raw C regions).

ls lists the steps; verify passes, and after one flipped byte in a shard fails naming the
file and the region; export of a damaged step fails and writes nothing; the exported model
loads with load_state_dict(strict=True) into a fresh model and gives the job's outputs; the
optimizer and scheduler resume from the export and take the same next step as the job's own
saved state; an uncommitted step is refused unless --uncommitted; safetensors (where the
package imports) holds the model's tensors; train_mlp's regions export raw, byte for byte.
"""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import PYTHON, REPO, Job, job_env, needs_mpirun, needs_torch
import ftrt_harness as h

pytestmark = [needs_torch, needs_mpirun]

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "ckpt_prog.py")
TOOL = os.path.join(REPO, "tools", "ftrt-ckpt")
STEPS, EVERY = 20, 10
MLP_STEPS = 50


def tool(*args):
    """Runs tools/ftrt-ckpt with args under this interpreter (the one whose safetensors
    test_safetensors_where_the_package_imports looks for); returns the CompletedProcess."""
    return subprocess.run([sys.executable, TOOL] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=120, env=job_env())


def load_prog():
    sys.path.insert(0, HERE)
    import ckpt_prog
    return ckpt_prog


@pytest.fixture(scope="module")
def torch_job(work):
    """The PyTorch job's directory: ckpt/ (steps 10 and 20 committed) and final.pt."""
    d = os.path.join(work, "ckpt-torch")
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(3, [PYTHON, PROG, "--steps", STEPS, "--ckpt-every",
                                          EVERY, "--ckpt-dir", os.path.join(d, "ckpt"),
                                          "--final", os.path.join(d, "final.pt")]),
                         python=PYTHON)
    job = Job(d, [str(c) for c in cmd], job_env({"FTRT_SPARES": "0"}))
    rc = job.run(180)
    assert rc == 0, f"job exited {rc}:\n{job.out[-4000:]}"
    return d


@pytest.fixture(scope="module")
def exported(torch_job):
    """(export file, tool output) of the job's newest step."""
    out = os.path.join(torch_job, "model.pt")
    r = tool("export", os.path.join(torch_job, "ckpt"), "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r.stdout


def damaged_copy(src, dst, rank, region):
    """A copy of checkpoint src at dst with one byte of `region` flipped in rank's shard of
    the newest step; returns the shard's path."""
    sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
    from ftrt import ckpt_format
    shutil.copytree(src, dst)
    shard = os.path.join(dst, f"step-{STEPS}", f"rank-{rank}.ftrt")
    e = next(e for e in ckpt_format.read_table(shard).entries if e.name == region)
    with open(shard, "r+b") as f:
        f.seek(e.file_offset + e.slice_bytes // 2)
        b = f.read(1)
        f.seek(e.file_offset + e.slice_bytes // 2)
        f.write(bytes([b[0] ^ 0x10]))
    return shard


def test_ls_shows_steps(torch_job):
    r = tool("ls", os.path.join(torch_job, "ckpt"))
    assert r.returncode == 0, r.stderr
    lines = [ln.split() for ln in r.stdout.splitlines()[2:]]
    assert [ln[0] for ln in lines] == ["10", "20"], r.stdout
    assert "LATEST" in r.stdout.splitlines()[-1] and "committed" in r.stdout
    assert all(ln[-4] == "2" for ln in lines), r.stdout  # trainers
    r = tool("ls", os.path.join(torch_job, "ckpt"), "--step", STEPS)
    assert r.returncode == 0 and "py:layout" in r.stdout and "param:fc1.weight" in r.stdout
    env = job_env()
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "bindings", "python"),
                                         env.get("PYTHONPATH", "")])
    m = subprocess.run([sys.executable, "-m", "ftrt.ckpt", "ls", os.path.join(torch_job, "ckpt")],
                       capture_output=True, text=True, timeout=60, env=env)
    assert m.returncode == 0 and m.stdout == tool("ls", os.path.join(torch_job, "ckpt")).stdout


def test_verify_passes(torch_job):
    r = tool("verify", os.path.join(torch_job, "ckpt"), "--all")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": OK") == 2


def test_damaged_shard_named_and_nothing_written(torch_job, tmp_path):
    bad = str(tmp_path / "bad")
    shard = damaged_copy(os.path.join(torch_job, "ckpt"), bad, 1, "param:fc1.weight")
    r = tool("verify", bad)
    assert r.returncode == 1, r.stdout + r.stderr
    assert shard in r.stdout and '"param:fc1.weight"' in r.stdout and "DAMAGED" in r.stdout
    out = tmp_path / "x.pt"
    r = tool("export", bad, "--out", out)
    assert r.returncode == 1, r.stdout + r.stderr
    assert shard in r.stderr and '"param:fc1.weight"' in r.stderr and "nothing written" in \
        r.stderr
    assert sorted(os.listdir(tmp_path)) == ["bad"], "export left a file behind"


def test_model_loads_strict_with_the_jobs_outputs(torch_job, exported):
    import torch
    prog = load_prog()
    sd = torch.load(exported[0])
    final = torch.load(os.path.join(torch_job, "final.pt"))
    assert sd["ftrt"]["step"] == STEPS and sd["ftrt"]["committed"] and sd["ftrt"]["nranks"] == 2
    assert sd["ftrt"]["unmapped"] == [], sd["ftrt"]["unmapped"]
    model, _, _ = prog.build(seed=99)  # other initial weights: all must come from the export
    model.load_state_dict(sd["model"], strict=True)
    job_model, _, _ = prog.build(seed=98)
    job_model.load_state_dict(final["model"], strict=True)
    for k, v in final["model"].items():
        assert torch.equal(sd["model"][k], v), k
    x, _ = prog.batch(12345, 0)
    model.eval(), job_model.eval()
    assert torch.equal(model(x), job_model(x))


def test_optimizer_and_scheduler_resume_with_the_same_step(torch_job, exported):
    import torch
    prog = load_prog()
    sd = torch.load(exported[0])
    final = torch.load(os.path.join(torch_job, "final.pt"))
    runs = []
    for src in (sd, final):
        model, opt, sched = prog.build(seed=97)
        model.load_state_dict(src["model"])
        opt.load_state_dict(src["optimizer"])
        sched.load_state_dict(src["scheduler"])
        x, y = prog.batch(STEPS, 0)
        opt.zero_grad()
        prog.train_step(model, x, y)
        opt.step()
        sched.step()
        runs.append((model, opt, sched))
    (m1, o1, s1), (m2, o2, s2) = runs
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), k
    st1, st2 = o1.state_dict(), o2.state_dict()
    assert st1["param_groups"] == st2["param_groups"]
    for i in st2["state"]:
        for key, v in st2["state"][i].items():
            assert torch.equal(st1["state"][i][key], v), (i, key)
    assert s1.state_dict() == s2.state_dict()
    assert sd["extra_state"] == {"note": "ckpt"}


def test_uncommitted_step_refused_unless_asked(torch_job, tmp_path):
    d = str(tmp_path / "uncommitted")
    shutil.copytree(os.path.join(torch_job, "ckpt"), d)
    os.unlink(os.path.join(d, f"step-{STEPS}", "MANIFEST"))
    r = tool("ls", d)
    assert "UNCOMMITTED" in r.stdout.splitlines()[-1], r.stdout
    out = tmp_path / "u.pt"
    r = tool("export", d, "--step", STEPS, "--out", out)
    assert r.returncode == 2 and "not committed" in r.stderr and not out.exists()
    r = tool("export", d, "--step", STEPS, "--out", out, "--uncommitted", "--no-safetensors")
    assert r.returncode == 0 and out.exists(), r.stdout + r.stderr
    r = tool("export", d, "--out", tmp_path / "default.pt", "--no-safetensors")
    assert r.returncode == 0 and f"step-{EVERY} (committed" in r.stdout, r.stdout + r.stderr
    missing = os.path.join(d, f"step-{STEPS}", "rank-1.ftrt")
    os.unlink(missing)
    r = tool("verify", d, "--step", STEPS)
    assert r.returncode == 1 and missing in r.stdout and "missing" in r.stdout, r.stdout


def test_safetensors_where_the_package_imports(torch_job, exported):
    import torch
    from ftrt.ckpt_export import safetensors_available
    st = os.path.splitext(exported[0])[0] + ".safetensors"
    if not safetensors_available():  # optional: the export says so and writes no file
        assert "safetensors package is not installed" in exported[1]
        assert not os.path.exists(st)
        return
    from safetensors.torch import load_file
    tensors = load_file(st)
    sd = torch.load(exported[0])["model"]
    assert sorted(tensors) == sorted(sd)
    for k, v in sd.items():
        assert torch.equal(tensors[k], v), k


def test_train_mlp_regions_export_raw(work):
    import torch
    binary = os.path.join(os.path.dirname(os.environ.get("FTRT_LIB", "")) or
                          os.path.join(REPO, "build"), "examples", "train_mlp")
    if not os.path.exists(binary):
        pytest.fail(f"{binary} not built (FTRT_LIB's build tree)")
    d = os.path.join(work, "ckpt-mlp")
    job = h.train_job(d, binary, np_=3, spares=0,
                      train_args=["--steps", str(MLP_STEPS), "--ckpt-every", "25", "--seed", "7"])
    rc = job.run(120)
    assert rc == 0, job.out[-4000:]
    out = os.path.join(d, "mlp.pt")
    r = tool("export", job.ckpt, "--out", out, "--no-safetensors")
    assert r.returncode == 0 and "exported raw" in r.stdout, r.stdout + r.stderr
    regions = torch.load(out)["regions"]
    assert sorted(regions) == ["momentum", "params"]
    with open(job.params, "rb") as f:
        assert regions["params"].numpy().tobytes() == f.read()
    from ftrt import ckpt_format
    got, _ = ckpt_format.read_step(job.ckpt, MLP_STEPS)
    for name, t in regions.items():
        assert t.dtype == torch.uint8 and t.numpy().tobytes() == got.replicated[name], name
