#!/usr/bin/python3
"""ctest python.lookup: how the Python package finds libftrt, in the order ftrt/_lib.py's
docstring gives, without pip (the real `pip install .` is ctest python.wheel, check_wheel.py).

Usage: check_lookup.py --build BUILD_DIR --source SOURCE_DIR --work SCRATCH --version X.Y.Z

  1. a copy of bindings/python/ftrt in SCRATCH/site (a package outside any source tree, as
     installed, holding no library), imported by /usr/bin/python3 from outside the source tree
     with FTRT_LIB, LD_LIBRARY_PATH, PKG_CONFIG_PATH and PYTHONPATH unset: its version is
     CMake's (--version), importing it imports neither torch nor libftrt; it finds libftrt
       a. nowhere: OSError listing what was tried (where no libftrt is installed system-wide);
       b. through the loader (LD_LIBRARY_PATH=BUILD: libftrt.so.<major>);
       c. through pkg-config (libftrt installed with `cmake --install` into SCRATCH/prefix,
          PKG_CONFIG_PATH pointing at its ftrt.pc, not on the loader's path);
       d. FTRT_LIB: the only candidate when set;
  2. the same copy holding libftrt (ftrt/libftrt.so.<major>, where `pip install .` puts it):
     the packaged library is the first candidate and the one loaded, before the loader's and
     pkg-config's; FTRT_LIB still wins over it;
  3. from the source tree (bindings/python on sys.path), the build tree's libftrt when BUILD is
     SOURCE/build;
  4. `python -m ftrt.analysis.plot` (--help, a chart of a small report) and
     `python -m ftrt.analysis.project --help`.
A missing pkg-config or matplotlib skips (77), or fails under CI (tests/harness/ftrt_harness.py,
strict_deps()).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ftrt_harness as h  # noqa: E402
from ftrt_harness import check  # noqa: E402
from pkgtest import PY, clean_env, probe, run  # noqa: E402

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
    h.need_tool("pkg-config")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    site = os.path.join(work, "site")
    pkg = os.path.join(site, "ftrt")
    shutil.copytree(os.path.join(source, "bindings", "python", "ftrt"), pkg,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "libftrt*.so*"))
    cwd = work  # not the source tree
    major = a.version.split(".")[0]
    soname = f"libftrt.so.{major}"
    system_lib = "libftrt.so" in subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True,
                                                text=True).stdout

    print("1. a package without its library, FTRT_LIB unset", flush=True)
    p = probe(PY, clean_env(), cwd, sys_path=site)
    check(p["file"] == os.path.join(pkg, "__init__.py"), f"ftrt imported from the copy ({p['file']})")
    check(p["version"] == a.version, f"ftrt.__version__ {p['version']} = CMake's {a.version}")
    check(not p["torch_imported"], "import ftrt does not import torch")
    check([how for how, _ in p["candidates"]][:1] == ["loader"],
          f"no library in the package: the loader is the first candidate ({p['candidates']})")
    check(not any(how in ("build tree", "package") for how, _ in p["candidates"]),
          "a package outside a source tree does not look for a build tree")
    if system_lib:
        print("  (a libftrt is installed system-wide here: case 1a not checked)")
    else:
        err = p.get("error", "")
        check("error" in p and "loader:" in err and "FTRT_LIB" in err and "pip install" in err,
              f"a. no libftrt reachable: OSError lists what was tried ({err[:300]})")
    p = probe(PY, clean_env(LD_LIBRARY_PATH=build), cwd, sys_path=site)
    check(p.get("lib") == os.path.join(build, soname) and
          p.get("lib_version") == [int(x) for x in a.version.split(".")],
          f"b. through the loader (LD_LIBRARY_PATH=build): {p.get('lib') or p.get('error')}")
    prefix = os.path.join(work, "prefix")
    run(["cmake", "--install", build, "--prefix", prefix])
    pcs = [os.path.join(d, "pkgconfig") for d, dirs, _ in os.walk(prefix) if "pkgconfig" in dirs]
    check(len(pcs) == 1, f"cmake --install wrote ftrt.pc ({pcs})")
    p = probe(PY, clean_env(PKG_CONFIG_PATH=pcs[0]), cwd, sys_path=site)
    check((p.get("lib") or "").startswith(prefix + os.sep),
          f"c. through pkg-config (PKG_CONFIG_PATH={pcs[0]}): {p.get('lib') or p.get('error')}")
    explicit = os.path.join(build, "libftrt.so")
    p = probe(PY, clean_env(FTRT_LIB=explicit, LD_LIBRARY_PATH=build), cwd, sys_path=site)
    check(p["candidates"] == [["FTRT_LIB", explicit]] and p.get("lib") == explicit,
          f"d. FTRT_LIB is the only candidate: {p['candidates']} -> {p.get('lib')}")

    print("2. the package holding libftrt (as `pip install .` leaves it)", flush=True)
    packaged = os.path.join(pkg, soname)
    shutil.copy(os.path.realpath(os.path.join(build, soname)), packaged)
    p = probe(PY, clean_env(LD_LIBRARY_PATH=build, PKG_CONFIG_PATH=pcs[0]), cwd, sys_path=site)
    check(p["candidates"][0] == ["package", packaged],
          f"the packaged library is the first candidate ({p['candidates'][:2]})")
    check(p.get("lib") == packaged, f"and the one loaded, before the loader's and pkg-config's "
          f"({p.get('lib') or p.get('error')})")
    p = probe(PY, clean_env(FTRT_LIB=explicit), cwd, sys_path=site)
    check(p.get("lib") == explicit, f"FTRT_LIB wins over the packaged library ({p.get('lib')})")
    os.unlink(packaged)

    print("3. from the source tree", flush=True)
    if os.path.realpath(build) == os.path.realpath(os.path.join(source, "build")) and \
            not system_lib:
        p = probe(PY, clean_env(), cwd, sys_path=os.path.join(source, "bindings", "python"))
        check(p.get("lib") == os.path.join(source, "build", "libftrt.so"),
              f"the build tree's build/libftrt.so ({p.get('lib') or p.get('error')})")
    else:
        print(f"  (the source tree's build/ is not {build}, or a libftrt is installed: the "
              f"build-tree case is not checked)")

    print("4. ftrt.analysis", flush=True)
    env = clean_env(PYTHONPATH=site)
    r = run([PY, "-m", "ftrt.analysis.project", "--help"], env=env, cwd=cwd)
    check("ftrt.analysis.project" in r.stdout and "--mttr-s" in r.stdout,
          "python -m ftrt.analysis.project --help")
    r = run([PY, "-m", "ftrt.analysis.plot", "--help"], env=env, cwd=cwd)
    check("REPORT" in r.stdout.upper() and "-o OUT" in r.stdout,
          "python -m ftrt.analysis.plot --help")
    h.need_module("matplotlib")
    rep = os.path.join(work, "report.json")
    with open(rep, "w") as f:
        json.dump(REPORT, f)
    r = run([PY, "-m", "ftrt.analysis.plot", rep], env=env, cwd=cwd)
    png = os.path.join(work, "report.png")
    with open(png, "rb") as f:
        magic = f.read(8)
    check(magic == b"\x89PNG\r\n\x1a\n",
          f"python -m ftrt.analysis.plot report.json -> report.png ({r.stdout.strip()})")
    svg = os.path.join(work, "t.svg")
    run([PY, "-m", "ftrt.analysis.plot", rep, "-o", svg], env=env, cwd=cwd)
    with open(svg) as f:
        check(f.read(200).lstrip().startswith("<?xml"), "-o t.svg")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(h.exit_status(main))
