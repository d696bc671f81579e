#!/usr/bin/python3
"""ctest unit.python_types: the type checker on the Python package.

Usage: check_types.py --source SOURCE_DIR --work SCRATCH

  1. mypy (Debian 12's 1.0.1, `python3 -m mypy`) with the [tool.mypy] settings of the root
     pyproject.toml on bindings/python/ftrt: no error (every function annotated:
     disallow_untyped_defs; torch, numpy and matplotlib are not analysed);
  2. a small user program that misuses the public API (an int taken as a str, a str for an
     int, an internal name that is no longer top-level) and uses ftrt.FaultTolerant (imported
     lazily at run time): mypy reports each misuse and no other line, so the annotations are
     what a user's checker sees.
mypy's cache goes to SCRATCH. A missing mypy skips (77), or fails under CI
(tests/harness/ftrt_harness.py, strict_deps()).
"""
import argparse
import os
import re
import shutil
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ftrt_harness as h  # noqa: E402
from ftrt_harness import check  # noqa: E402
from pkgtest import PY, clean_env, run  # noqa: E402

# A user's program: each line marked "# error" must be reported, and only those.
USER = '''\
import ftrt


def train(cfg: ftrt.Config) -> int:
    ctx = ftrt.init(cfg)
    n: str = ctx.size  # error: int, not str
    ctx.allreduce(b"", count="3")  # error: count is an int
    restored, step = ctx.restore()
    ctx.step_done(step)
    ftrt.lib()  # error: internal, ftrt._lib.lib() only
    return ctx.finalize()


def resumed_at(ft: ftrt.FaultTolerant) -> int:  # the lazy re-export is visible to the checker
    return ft.step_count
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    source, work = os.path.abspath(a.source), os.path.abspath(a.work)
    h.need_module("mypy", load=False)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    config = os.path.join(source, "pyproject.toml")
    mypy = [PY, "-m", "mypy", "--config-file", config, "--cache-dir", os.path.join(work, "cache")]
    version = run([PY, "-m", "mypy", "--version"], env=clean_env()).stdout.strip()

    print(f"1. {version} on bindings/python/ftrt", flush=True)
    r = run(mypy + [os.path.join("bindings", "python", "ftrt")], env=clean_env(), cwd=source,
            ok=False)
    check(r.returncode == 0 and "Success: no issues found" in r.stdout,
          f"no type error in the package: {r.stdout.strip().splitlines()[-1:]}"
          + ("" if r.returncode == 0 else "\n" + r.stdout[-4000:] + r.stderr[-2000:]))

    print("2. a user's program that misuses the API", flush=True)
    user = os.path.join(work, "user.py")
    with open(user, "w") as f:
        f.write(USER)
    want = {i + 1 for i, line in enumerate(USER.splitlines()) if "# error" in line}
    env = clean_env(MYPYPATH=os.path.join(source, "bindings", "python"))
    r = run(mypy + ["--no-error-summary", user], env=env, cwd=work, ok=False)
    got = {int(m.group(1)) for m in re.finditer(r"^.*user\.py:(\d+): error:", r.stdout, re.M)}
    check(r.returncode == 1 and got == want,
          f"mypy reports lines {sorted(got)} of the user's program, the misuses are "
          f"{sorted(want)}" + ("" if got == want else ":\n" + r.stdout[-3000:] + r.stderr[-1000:]))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(h.exit_status(main))
