"""ctest unit.strict_deps: the missing-dependency rule (tests/harness/ftrt_harness.py
strict_deps(), need_module(), need_tool(); the pytest plugin tests/harness/ftrt_pytest_deps.py;
case_main()): outside CI a missing package skips, under CI=true or FTRT_STRICT_DEPS=1 it fails
naming the Debian package, and a missing GPU (or a feature of a newer torch than Debian's) skips
in both."""
import os
import subprocess
import sys
import textwrap

import pytest

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness")
sys.path.insert(0, HARNESS)
import ftrt_harness as h  # noqa: E402

NO_DEPS_ENV = {"CI": "", "FTRT_STRICT_DEPS": ""}
# The made-up modules, programs and packages of these tests carry the comment
# "check-python-deps: fixture", which keeps them out of ctest unit.python_deps.


@pytest.mark.parametrize("env,strict", [
    ({}, False), ({"CI": "true"}, True), ({"CI": "1"}, True), ({"CI": "false"}, False),
    ({"FTRT_STRICT_DEPS": "1"}, True), ({"CI": "true", "FTRT_STRICT_DEPS": "0"}, False),
    ({"FTRT_STRICT_DEPS": "0"}, False)])
def test_strict_deps(env, strict):
    assert h.strict_deps(env) is strict


def test_need_module_and_tool(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("FTRT_STRICT_DEPS", raising=False)
    assert h.need_module("json").dumps([]) == "[]"
    assert h.need_module("os.path", load=False) is None
    with pytest.raises(h.MissingDependency, match="apt-get install python3-ftrt-none"):
        h.need_module("ftrt_no_such_module_xyz", "python3-ftrt-none")  # check-python-deps: fixture
    with pytest.raises(h.MissingDependency, match="python3-torch"):
        h.need_module("ftrt_no_such_module_xyz.sub", "python3-torch", load=False)  # check-python-deps: fixture
    with pytest.raises(h.MissingDependency, match="program ftrt-no-such-tool.*apt-get install x"):
        h.need_tool("ftrt-no-such-tool", "x")  # check-python-deps: fixture
    assert h.need_tool("sh")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(h.Fail, match="python3-ftrt-none.*not a skip, under CI"):
        h.need_module("ftrt_no_such_module_xyz", "python3-ftrt-none")  # check-python-deps: fixture
    with pytest.raises(h.Fail, match="openmpi-bin"):
        monkeypatch.setenv("PATH", "/nonexistent")
        h.need_tool("mpirun")


CASE_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {harness!r})
    import ftrt_harness as h
    table = {{}}
    @h.case(table)
    def case_gpu(a):
        raise h.Skip("no GPU")
    @h.case(table)
    def case_mod(a):
        h.need_module("ftrt_no_such_module_xyz", "python3-ftrt-none")  # check-python-deps: fixture
    sys.exit(h.case_main(table, argv=["--bin", "x", "--work", {work!r}, sys.argv[1]]))
""")


@pytest.mark.parametrize("case,env,want", [
    ("gpu", {}, 77), ("gpu", {"CI": "true"}, 77), ("mod", {}, 77), ("mod", {"CI": "true"}, 1),
    ("mod", {"FTRT_STRICT_DEPS": "1"}, 1)])
def test_case_main(tmp_path, case, env, want):
    script = tmp_path / "cases.py"
    script.write_text(CASE_SCRIPT.format(harness=HARNESS, work=str(tmp_path / "w")))
    bindir = tmp_path / "bin"  # a fake mpirun: case_main needs one before any case
    bindir.mkdir()
    (bindir / "mpirun").write_text("#!/bin/sh\nexit 0\n")
    (bindir / "mpirun").chmod(0o755)
    e = dict(os.environ, **NO_DEPS_ENV, PATH=f"{bindir}:{os.environ['PATH']}")
    e.update(env)
    r = subprocess.run([sys.executable, str(script), case], env=e, capture_output=True, text=True)
    assert r.returncode == want, r.stdout + r.stderr
    if case == "mod":
        assert "python3-ftrt-none" in r.stdout


def test_case_main_without_mpirun(tmp_path):
    script = tmp_path / "cases.py"
    script.write_text(CASE_SCRIPT.format(harness=HARNESS, work=str(tmp_path / "w")))
    (tmp_path / "empty").mkdir()
    e = dict(os.environ, **NO_DEPS_ENV, PATH=str(tmp_path / "empty"))  # no mpirun on PATH
    r = subprocess.run([sys.executable, str(script), "gpu"], env=e, capture_output=True, text=True)
    assert r.returncode == 77 and "openmpi-bin" in r.stdout, r.stdout
    e["CI"] = "true"
    r = subprocess.run([sys.executable, str(script), "gpu"], env=e, capture_output=True, text=True)
    assert r.returncode == 1 and "openmpi-bin" in r.stdout, r.stdout


SUITE = textwrap.dedent("""
    import pytest
    def test_importorskip():
        pytest.importorskip("ftrt_no_such_module_xyz")
    @pytest.mark.skipif(True, reason="PyTorch is not installed (Debian: apt-get install "
                        "python3-torch; run /usr/bin/python3)")
    def test_torch():
        pass
    @pytest.mark.skipif(True, reason="mpirun not found")
    def test_mpirun():
        pass
    def test_gpu():
        pytest.skip("no CUDA device")
    def test_newer_torch():
        pytest.skip("FlopCounterMode needs torch >= 2.1 (Debian 12's python3-torch is 1.13)")
    def test_passes():
        pass
""")


def run_suite(tmp_path, env):
    (tmp_path / "test_suite.py").write_text(SUITE)
    e = dict(os.environ, **NO_DEPS_ENV, PYTHONPATH=HARNESS, PYTHONDONTWRITEBYTECODE="1")
    e.update(env)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "ftrt_pytest_deps", "-rA",
                           "-p", "no:cacheprovider", str(tmp_path / "test_suite.py")],
                          env=e, capture_output=True, text=True, cwd=tmp_path)


def test_pytest_plugin_skips_by_hand(tmp_path):
    r = run_suite(tmp_path, {})
    assert r.returncode == 0, r.stdout
    assert "1 passed, 5 skipped" in r.stdout, r.stdout


@pytest.mark.parametrize("env", [{"CI": "true"}, {"FTRT_STRICT_DEPS": "1"}])
def test_pytest_plugin_fails_under_ci(tmp_path, env):
    r = run_suite(tmp_path, env)
    out = r.stdout
    assert r.returncode == 1, out
    assert "1 passed" in out and "2 skipped" in out, out  # the GPU and newer-torch skips stand
    assert "1 failed" in out and "2 error" in out, out            # skipif: errors at setup
    assert "Debian package: python3-torch" in out, out
    assert "Debian package: openmpi-bin" in out, out
    assert "ftrt_no_such_module_xyz" in out and "name its Debian package" in out, out
    assert "missing dependencies FAIL" in out, out
