"""pytest fixtures and helpers for the Python binding's tests (run by ctest as python.pytest,
with FTRT_LIB pointing at the libftrt of the build being tested; by hand:
FTRT_LIB=build/libftrt.so /usr/bin/python3 -m pytest -q tests/python)."""
import os
import shutil
import sys

import pytest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import ftrt_harness as h  # noqa: E402

REPO = h.REPO
sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
TRAIN_TORCH = os.path.join(REPO, "examples", "train_torch.py")
PYTHON = h.SYSTEM_PYTHON


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
    """ftrt_harness.job_env(extra), without .pyc files from the job's Python processes."""
    env = h.job_env()
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    env.update(extra or {})
    return env


class Job(h.Job):
    """ftrt_harness.Job whose failed waits fail the test (pytest.fail)."""

    def fail(self, msg):
        pytest.fail(msg)


def ftrt_job(directory, np_, args, env=None):
    """train_torch.py under ftrt: ftrt-run + mpirun --enable-recovery."""
    status = os.path.join(directory, "status.json")
    cmd = h.ftrt_run_cmd(h.mpirun_cmd(np_, [PYTHON, TRAIN_TORCH] + args), status=status,
                         python=PYTHON)
    return Job(directory, cmd, job_env(env), status=status)


def gloo_job(directory, np_, args, env=None):
    """train_torch.py --backend gloo: torch.distributed DDP, launched by mpirun."""
    extra = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(h.free_port())}
    extra.update(env or {})
    cmd = h.mpirun_cmd(np_, [PYTHON, TRAIN_TORCH, "--backend", "gloo"] + args, recovery=False)
    return Job(directory, cmd, job_env(extra), status=os.path.join(directory, "status.json"))
