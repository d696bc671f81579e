#!/usr/bin/python3
"""ctest python.pip: `pip install` of the Python binding into a virtual environment, and how
the installed package finds libftrt.

Usage: check_pip.py --build BUILD_DIR --source SOURCE_DIR --work SCRATCH --version X.Y.Z

  1. a venv (--system-site-packages, --without-pip: Debian's pip, setuptools and wheel serve it)
     in SCRATCH, and `pip install --no-build-isolation --no-deps --no-index` of a copy of
     bindings/python (a copy, so that the build leaves nothing in the source tree): no network;
  2. with FTRT_LIB unset, from outside the source tree: the installed package is the one
     imported, ftrt.__version__ and its metadata equal CMake's version (--version); then it
     finds libftrt
       a. nowhere (no LD_LIBRARY_PATH, no pkg-config path): OSError listing what was tried
          (where this machine has no libftrt installed system-wide);
       b. through the loader (LD_LIBRARY_PATH=BUILD: libftrt.so.<major>);
       c. through pkg-config (libftrt installed with `cmake --install` into SCRATCH/prefix,
          PKG_CONFIG_PATH pointing at its ftrt.pc, not on the loader's path);
     and from the source tree (bindings/python on sys.path), the build tree's libftrt when
     BUILD is SOURCE/build;
  3. `python -m ftrt.plot --help` and the `ftrt-plot` script; a chart of a small report.
A missing pip / setuptools / wheel / matplotlib skips (77), or fails under CI
(tests/harness/ftrt_harness.py, strict_deps()).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import ftrt_harness as h  # noqa: E402
from ftrt_harness import Fail, check  # noqa: E402

PY = "/usr/bin/python3"


def run(cmd, env=None, cwd=None, ok=True):
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise Fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("FTRT_LIB", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "PYTHONPATH",
                        "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


PROBE = """
import json, os, sys
import ftrt
out = {"file": ftrt.__file__, "version": ftrt.__version__,
       "candidates": ftrt._lib.candidates()}
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
    code = PROBE if not sys_path else f"import sys; sys.path.insert(0, {sys_path!r})\n" + PROBE
    r = run([python, "-c", code], env=env, cwd=cwd)
    return json.loads(r.stdout.strip().splitlines()[-1])


REPORT = {
    "schema": 1, "steps": 10, "failures": [], "ledger": {"goodput": 0.5},
    "timeline": {"t0": 0, "wall_s": 2.0, "kinds": ["startup", "compute", "down"],
                 "ranks": [{"world_rank": 1, "role": "trainer", "logical_rank": 0,
                            "intervals": [[0, 0.0, 0.5], [1, 0.5, 2.0]]},
                           {"world_rank": 2, "role": "trainer", "logical_rank": 1,
                            "intervals": [[0, 0.0, 0.6], [1, 0.6, 1.2], [2, 1.2, 2.0]]}],
                 "events": [{"t": 1.2, "event": "failure", "world_rank": 2,
                             "kind": "connection_lost"}]}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--version", required=True, help="CMake's PROJECT_VERSION")
    a = ap.parse_args()
    build, source, work = (os.path.abspath(x) for x in (a.build, a.source, a.work))
    for mod in ("pip", "setuptools", "wheel"):
        h.need_module(mod, load=False)  # pip's process imports them
    h.need_tool("pkg-config")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    src = os.path.join(work, "src")
    shutil.copytree(os.path.join(source, "bindings", "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.pyc"))
    venv = os.path.join(work, "venv")
    print("1. venv and pip install", flush=True)
    run([PY, "-m", "venv", "--without-pip", "--system-site-packages", venv])
    vpy = os.path.join(venv, "bin", "python")
    r = run([vpy, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
             "--no-cache-dir", "--disable-pip-version-check", src], env=clean_env(), cwd=work)
    check("Successfully installed ftrt" in r.stdout, "pip install bindings/python (offline): "
          + r.stdout.strip().splitlines()[-1])

    print("2. the installed package, FTRT_LIB unset", flush=True)
    cwd = work  # not the source tree: the installed copy must be the one imported
    ld = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    p = probe(vpy, clean_env(), cwd)
    site = os.path.join(venv, "lib")
    check(p["file"].startswith(site), f"ftrt imported from the venv ({p['file']})")
    check(p["version"] == a.version, f"ftrt.__version__ {p['version']} = CMake's {a.version}")
    check(p["metadata"] == a.version, f"pip's metadata version {p['metadata']} = {a.version}")
    check(not any(how == "build tree" for how, _ in p["candidates"]),
          "an installed package does not look for a build tree")
    if "libftrt.so" in ld:
        print("  (a libftrt is installed system-wide here: case 2a not checked)")
    else:
        err = p.get("error", "")
        check("error" in p and "loader:" in err and "FTRT_LIB" in err,
              f"no libftrt reachable: OSError lists what was tried ({err[:300]})")
    major = a.version.split(".")[0]
    p = probe(vpy, clean_env(LD_LIBRARY_PATH=build), cwd)
    want = os.path.join(build, f"libftrt.so.{major}")
    check(p.get("lib") == want and p.get("lib_version") == [int(x) for x in a.version.split(".")],
          f"through the loader (LD_LIBRARY_PATH=build): {p.get('lib') or p.get('error')}")
    prefix = os.path.join(work, "prefix")
    run(["cmake", "--install", build, "--prefix", prefix])
    pcs = [os.path.join(d, "pkgconfig") for d, dirs, _ in os.walk(prefix) if "pkgconfig" in dirs]
    check(len(pcs) == 1, f"cmake --install wrote ftrt.pc ({pcs})")
    p = probe(vpy, clean_env(PKG_CONFIG_PATH=pcs[0]), cwd)
    check((p.get("lib") or "").startswith(prefix + os.sep),
          f"through pkg-config (PKG_CONFIG_PATH={pcs[0]}): {p.get('lib') or p.get('error')}")
    if os.path.realpath(build) == os.path.realpath(os.path.join(source, "build")) and \
            "libftrt.so" not in ld:
        p = probe(PY, clean_env(), cwd, sys_path=os.path.join(source, "bindings", "python"))
        check(p.get("lib") == os.path.join(source, "build", "libftrt.so"),
              f"from the source tree: its build/libftrt.so ({p.get('lib') or p.get('error')})")
    else:
        print(f"  (the source tree's build/ is not {build}, or a libftrt is installed: the "
              f"build-tree case is not checked)")

    print("3. ftrt.plot", flush=True)
    r = run([vpy, "-m", "ftrt.plot", "--help"], env=clean_env(), cwd=cwd)
    check("REPORT" in r.stdout.upper() and "-o OUT" in r.stdout, "python -m ftrt.plot --help")
    r = run([os.path.join(venv, "bin", "ftrt-plot"), "--help"], env=clean_env(), cwd=cwd)
    check("-o OUT" in r.stdout, "the ftrt-plot script")
    h.need_module("matplotlib")
    rep = os.path.join(work, "report.json")
    with open(rep, "w") as f:
        json.dump(REPORT, f)
    r = run([vpy, "-m", "ftrt.plot", rep], env=clean_env(), cwd=cwd)
    png = os.path.join(work, "report.png")
    check(os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n",
          f"python -m ftrt.plot report.json -> report.png ({r.stdout.strip()})")
    r = run([vpy, "-m", "ftrt.plot", rep, "-o", os.path.join(work, "t.svg")], env=clean_env(),
            cwd=cwd)
    check(open(os.path.join(work, "t.svg")).read(200).lstrip().startswith("<?xml"), "-o t.svg")
    print("PASS")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Fail as e:
        print("FAIL:", e, flush=True)
        sys.exit(1)
    except h.MissingDependency as e:
        print(f"{e}: skipping (under CI this fails)", flush=True)
        sys.exit(h.SKIP)
