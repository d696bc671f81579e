#!/usr/bin/python3
"""ctest python.wheel: `pip install .` of the repository root in a fresh venv builds libftrt
and puts it inside the package; a PyTorch job with a killed trainer runs on it; uninstall.

Usage: check_wheel.py --source SOURCE_DIR --work SCRATCH --version X.Y.Z [--steps N]

  1. a copy of the source tree in SCRATCH/src (without build trees, .git and caches: the
     build leaves nothing in the real tree) and the documented install, from SCRATCH:
       /usr/bin/python3 -m venv --system-site-packages SCRATCH/venv
       SCRATCH/venv/bin/pip install SCRATCH/src
     (scikit-build-core from PyPI, in pip's isolated build environment; the system's cmake
     and ninja; CMAKE_BUILD_PARALLEL_LEVEL=2);
  2. with FTRT_LIB, LD_LIBRARY_PATH, PKG_CONFIG_PATH and PYTHONPATH unset and the current
     directory outside the tree: `import ftrt` is the venv's, its first library candidate is
     the packaged ftrt/libftrt.so.<major> and that is the library loaded, of CMake's version
     (--version, also pip's metadata); py.typed is installed; the ftrt-plot and ftrt-project
     scripts run;
  3. examples/train_torch.py (copied out of the tree, so that it cannot find bindings/python)
     under the venv's python, 1 coordinator + 2 trainers + 1 hot spare under tools/ftrt-run
     and mpirun --enable-recovery; trainer 1 is SIGKILLed (pid from the status file) once it
     has done a quarter of the steps: the spare takes its place, the job exits 0 and its
     report holds exactly one failure, recovered;
  4. `pip uninstall -y ftrt`: the venv no longer has the package, its library or its scripts.
Skips (77) where PyPI cannot be reached, python3-venv (ensurepip), torch or mpirun is
missing; under CI (tests/harness/ftrt_harness.py, strict_deps()) each of those fails instead.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ftrt_harness as h  # noqa: E402
from ftrt_harness import Fail, check  # noqa: E402
from pkgtest import PY, clean_env, probe, run  # noqa: E402

BACKEND = "scikit-build-core>=0.10"   # pyproject.toml's [build-system] requires
TOP_LEVEL_SKIP = (".git", "demo-run", "Testing", "gpukit", "gpu-out", ".venv", "venv")


def copy_tree(source, dest):
    """The source tree without build trees (build*/ at the top), .git, caches and outputs."""
    def ignore(d, names):
        out = {n for n in names if n in ("__pycache__", ".mypy_cache", ".pytest_cache")
               or n.endswith((".pyc", ".egg-info"))}
        if os.path.realpath(d) == os.path.realpath(source):
            out |= {n for n in names if n.startswith("build") or n in TOP_LEVEL_SKIP}
        return out
    shutil.copytree(source, dest, ignore=ignore, symlinks=True)


def unreachable(msg):
    """PyPI (or its mirror) cannot be reached: a failure under CI, else a skip."""
    if h.strict_deps():
        raise Fail(msg + " -- a failure, not a skip, under CI / FTRT_STRICT_DEPS=1")
    raise h.MissingDependency(msg)


def site_packages(venv):
    found = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    if len(found) != 1:
        raise Fail(f"the venv's site-packages: {found}")
    return found[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--version", required=True, help="CMake's PROJECT_VERSION")
    ap.add_argument("--steps", type=int, default=160, help="steps of the PyTorch job")
    a = ap.parse_args()
    source, work = os.path.abspath(a.source), os.path.abspath(a.work)
    t_start = time.monotonic()
    h.need_module("ensurepip", "python3-venv", load=False)
    h.need_module("torch")
    h.need_tool("mpirun")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    src = os.path.join(work, "src")
    copy_tree(source, src)
    check(os.path.exists(os.path.join(src, "pyproject.toml")) and
          not os.path.exists(os.path.join(src, "build")), "a copy of the source tree, no build/")

    print("1. venv, pip install", flush=True)
    venv = os.path.join(work, "venv")
    run([PY, "-m", "venv", "--system-site-packages", venv], env=clean_env(), cwd=work)
    vpy, vpip = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "pip")
    r = run([vpip, "download", "--no-deps", "--retries", "1", "--timeout", "30", "--dest",
             os.path.join(work, "dl"), BACKEND], env=clean_env(), cwd=work, ok=False,
            timeout=300)
    if r.returncode != 0:
        unreachable(f"PyPI cannot be reached for the build backend ({BACKEND}): "
                    f"{(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    t0 = time.monotonic()
    r = run([vpip, "install", src], env=clean_env(CMAKE_BUILD_PARALLEL_LEVEL="2"), cwd=work,
            timeout=900)
    check("Building wheel for ftrt (pyproject.toml)" in r.stdout and
          f"Successfully installed ftrt-{a.version}" in r.stdout,
          f"pip install . built and installed ftrt {a.version} in "
          f"{time.monotonic() - t0:.0f} s")

    print("2. the installed package finds its own library", flush=True)
    site = site_packages(venv)
    pkg = os.path.join(site, "ftrt")
    packaged = os.path.join(pkg, f"libftrt.so.{a.version.split('.')[0]}")
    env = clean_env()
    p = probe(vpy, env, work)
    check(p["file"] == os.path.join(pkg, "__init__.py"), f"ftrt imported from the venv ({p['file']})")
    check(p["candidates"][0] == ["package", packaged],
          f"the first candidate is the packaged library ({p['candidates'][0]})")
    check(p.get("lib") == packaged, f"and it is loaded ({p.get('lib') or p.get('error')})")
    check(p.get("lib_version") == [int(x) for x in a.version.split(".")] and
          p["version"] == a.version and p["metadata"] == a.version,
          f"library {p.get('lib_version')}, package {p['version']}, metadata {p['metadata']} "
          f"= CMake's {a.version}")
    check(not p["torch_imported"], "import ftrt does not import torch")
    check(os.path.exists(os.path.join(pkg, "py.typed")), "py.typed is installed")
    libs = sorted(os.path.basename(f) for f in glob.glob(os.path.join(pkg, "libftrt*")))
    check(libs == [os.path.basename(packaged)], f"one library file in the package ({libs})")
    for script, want in (("ftrt-plot", "-o OUT"), ("ftrt-project", "--mttr-s")):
        r = run([os.path.join(venv, "bin", script), "--help"], env=env, cwd=work)
        check(want in r.stdout, f"the {script} script")

    print("3. a PyTorch job on the installed package, a trainer killed", flush=True)
    jobdir = os.path.join(work, "job")
    os.makedirs(jobdir)
    script = os.path.join(jobdir, "train_torch.py")
    for name in ("train_torch.py", "example_args.py"):  # the example and its argument helper
        shutil.copy(os.path.join(source, "examples", name), os.path.join(jobdir, name))
    status = os.path.join(jobdir, "status.json")
    report = os.path.join(jobdir, "report.json")
    args = ["--steps", str(a.steps), "--batch", "32", "--hidden", "64", "--seed", "7",
            "--ckpt-every", "40", "--step-sleep-ms", "20", "--ckpt-dir",
            os.path.join(jobdir, "ckpt"), "--report", report]
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(4, [vpy, script] + args), status=status, python=PY)
    job_env = dict(env, **h.ROOT_ENV, FTRT_SPARES="1",
                   FTRT_FAULT_LOG=os.path.join(jobdir, "faults.jsonl"))
    job = h.Job(jobdir, cmd, job_env, status=status)
    job.report = report
    job.start()
    victim = job.wait_trainer(1, a.steps // 4, timeout=120)
    job.inject(signal.SIGKILL, victim, "sigkill")
    rc = job.wait(240)
    check(rc == 0, f"the job survived the kill and exited 0 (exit {rc}; log {job.log_path()})"
          + ("" if rc == 0 else ":\n" + job.out[-4000:]))
    rep = job.load_report()
    fails = rep.get("failures", [])
    check(len(fails) == 1 and fails[0]["kind"] == "connection_lost" and fails[0]["recovered"]
          and fails[0]["logical_rank"] == 1,
          f"the report: one failure, trainer 1, recovered ({json.dumps(fails)[:400]})")
    check(rep["status"] == "finished" and rep["steps"] == a.steps and rep["trainers"] == 2,
          f"the job finished its {a.steps} steps ({rep['status']}, {rep['steps']})")
    check("recovered (epoch 1): resuming at step" in job.out, "the trainers resumed in place")

    print("4. pip uninstall", flush=True)
    r = run([vpip, "uninstall", "-y", "ftrt"], env=env, cwd=work)
    check(f"Successfully uninstalled ftrt-{a.version}" in r.stdout, "pip uninstall -y ftrt")
    r = run([vpy, "-c", "import importlib.util as u; s = u.find_spec('ftrt'); "
             "print(s.origin if s else None)"], env=env, cwd=work)
    where = r.stdout.strip()
    check(where == "None" or not where.startswith(venv + os.sep),
          f"import ftrt no longer finds the venv's package (finds: {where})")
    left = [x for x in (pkg, os.path.join(venv, "bin", "ftrt-plot"),
                        os.path.join(venv, "bin", "ftrt-project")) if os.path.exists(x)]
    check(not left, f"nothing of it is left in the venv ({left})")
    print(f"PASS ({time.monotonic() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(h.exit_status(main))
