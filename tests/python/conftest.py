"""pytest fixtures and helpers for the Python binding's tests (run by ctest as python.pytest,
with FTRT_LIB pointing at the libftrt of the build being tested; by hand:
FTRT_LIB=build/libftrt.so /usr/bin/python3 -m pytest -q tests/python)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
FTRT_RUN = os.path.join(REPO, "tools", "ftrt-run")
TRAIN_TORCH = os.path.join(REPO, "examples", "train_torch.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
MPIRUN_FLAGS = ["--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]


def have_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


needs_torch = pytest.mark.skipif(not have_torch(), reason="PyTorch is not installed "
                                 "(Debian: apt-get install python3-torch; run /usr/bin/python3)")
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not found")


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    """A scratch directory for the session's jobs (FTRT_TEST_WORK keeps it at a fixed path)."""
    fixed = os.environ.get("FTRT_TEST_WORK")
    if fixed:
        shutil.rmtree(fixed, ignore_errors=True)
        os.makedirs(fixed)
        return fixed
    return str(tmp_path_factory.mktemp("ftrt-py"))


def job_env(extra=None):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    env.update(extra or {})
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """One mpirun job (through tools/ftrt-run for ftrt jobs), output captured to job.log."""

    def __init__(self, directory, cmd, env):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.cmd, self.env = cmd, env
        self.status = os.path.join(directory, "status.json")
        self.out = ""

    def start(self):
        self.logf = open(os.path.join(self.dir, "job.log"), "w")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        return self

    def wait(self, timeout):
        try:
            self.out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.out, _ = self.proc.communicate()
            self.logf.write(self.out)
            self.logf.close()
            pytest.fail(f"job did not finish within {timeout} s:\n{self.out[-4000:]}")
        self.elapsed = time.monotonic() - self.t0
        self.logf.write(self.out)
        self.logf.close()
        return self.proc.returncode

    def status_json(self):
        try:
            with open(self.status) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def wait_status(self, pred, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.wait(10)
                pytest.fail(f"job ended before the expected state:\n{self.out[-4000:]}")
            st = self.status_json()
            if st and pred(st):
                return st
            time.sleep(0.02)
        pytest.fail("timed out waiting for the status file to reach the expected state")

    def run(self, timeout):
        return self.start().wait(timeout)


def ftrt_job(directory, np_, args, env=None):
    """train_torch.py under ftrt: ftrt-run + mpirun --enable-recovery."""
    status = os.path.join(directory, "status.json")
    cmd = ([PYTHON, FTRT_RUN, "--status", status, "--", "mpirun", "--enable-recovery"]
           + MPIRUN_FLAGS + ["-np", str(np_), PYTHON, TRAIN_TORCH] + args)
    return Job(directory, cmd, job_env(env))


def gloo_job(directory, np_, args, env=None):
    """train_torch.py --backend gloo: torch.distributed DDP, launched by mpirun."""
    extra = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    extra.update(env or {})
    cmd = (["mpirun"] + MPIRUN_FLAGS + ["-np", str(np_), PYTHON, TRAIN_TORCH,
                                        "--backend", "gloo"] + args)
    return Job(directory, cmd, job_env(extra))


def trainer(st, logical):
    for r in st["ranks"]:
        if r["role"] == "trainer" and r["logical_rank"] == logical:
            return r
    return None
