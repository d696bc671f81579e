"""Helpers shared by the packaging tests (check_lookup.py, check_wheel.py): running commands,
a clean environment, and a probe of what `import ftrt` finds in another interpreter."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from ftrt_harness import Fail  # noqa: E402

PY = "/usr/bin/python3"   # Debian's interpreter (torch, numpy, matplotlib)

# Variables that would let `import ftrt` find something else than what a test means to test.
UNSET = ("FTRT_LIB", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "PYTHONPATH", "PYTHONHOME",
         "VIRTUAL_ENV", "PYTHONSTARTUP")


def run(cmd, env=None, cwd=None, ok=True, timeout=600):
    """subprocess.run with captured text output; raises Fail (with the output's tail) when `ok`
    and the command exits non-zero or runs past `timeout` seconds."""
    try:
        r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise Fail(f"{' '.join(cmd)}: still running after {timeout} s:\n{e.stdout or ''}")
    if ok and r.returncode != 0:
        raise Fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r


def clean_env(**extra):
    """os.environ without UNSET, without .pyc files, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


PROBE = """
import json, os, sys
import ftrt
from ftrt import _lib
out = {"file": ftrt.__file__, "version": ftrt.__version__, "candidates": _lib.candidates(),
       "torch_imported": "torch" in sys.modules}
try:
    from importlib.metadata import version
    out["metadata"] = version("ftrt")
except Exception as e:
    out["metadata"] = None
try:
    out["lib"] = ftrt.lib_path()
    out["lib_version"] = list(ftrt.version())
except OSError as e:
    out["error"] = str(e)
print(json.dumps(out))
"""


def probe(python, env, cwd, sys_path=None):
    """What `import ftrt` gives `python` (run in `cwd` with `env`; `sys_path` first on
    sys.path): {"file", "version", "metadata", "candidates", "torch_imported", and "lib" +
    "lib_version" or "error"} (see PROBE)."""
    code = PROBE if not sys_path else f"import sys; sys.path.insert(0, {sys_path!r})\n" + PROBE
    r = run([python, "-c", code], env=env, cwd=cwd)
    return json.loads(r.stdout.strip().splitlines()[-1])
