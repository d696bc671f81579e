"""pytest plugin: the missing-dependency rule of ftrt_harness (strict_deps()) for pytest suites.

Loaded with `-p ftrt_pytest_deps` (tests/harness on PYTHONPATH; ctest's python.pytest does
both). Outside CI it changes nothing. Under CI (CI=true, which .ci/run sets) or with
FTRT_STRICT_DEPS=1, every skipped test fails instead -- pytest.importorskip(), a skipif mark
for a missing module or program, pytest.skip() -- with the skip's reason and the Debian package
to install, because scripts/ensure-deps.sh must have installed every dependency. The only skips
kept are those for missing hardware or kernel features, recognised by their reason (a GPU, CUDA,
NCCL, a device; mounting not permitted), and for a feature of a PyTorch newer than Debian 12's
("needs torch >= 2.1"): the suites word such skips that way
(KEPT_SKIP_REASONS), and any other wording fails under CI, so a new skip cannot hide a missing
package there.
"""
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ftrt_harness as h  # noqa: E402

# Skips that stand under CI too: no GPU / CUDA / NCCL device, a kernel feature not permitted,
# or a feature of a newer PyTorch than Debian 12's python3-torch (1.13), which no Debian
# package can supply ("needs torch >= 2.1").
KEPT_SKIP_REASONS = re.compile(
    r"\b(GPU|CUDA|cuda|NCCL|nccl|no usable device|not permitted|cannot mount|mount.*not allowed)\b"
    r"|\bneeds torch >= \d")
# Words of a skip reason -> the Debian package (the module and program tables of the harness,
# and the messages of the suites: "PyTorch is not installed", "mpirun not found", ...).
_PKG_HINTS = [(re.compile(r"\bPyTorch\b|\btorch\b"), "python3-torch"),
              (re.compile(r"\bC compiler\b"), "gcc")]
_PKG_HINTS += [(re.compile(r"\b%s\b" % re.escape(m)), p) for m, p in h.DEBIAN_MODULES.items()]
_PKG_HINTS += [(re.compile(r"(?<![\w-])%s(?![\w-])" % re.escape(t)), p)
               for t, p in h.DEBIAN_TOOLS.items()]


def debian_package_for(reason):
    """The Debian package a skip reason points at, or None."""
    m = re.search(r"apt-get install ([\w.+-]+)", reason)
    if m:
        return m.group(1)
    for rx, pkg in _PKG_HINTS:
        if rx.search(reason):
            return pkg
    return None


def _reason(report):
    lr = report.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2]).removeprefix("Skipped: ")
    return str(lr)


def kept(reason):
    """True when a skip with this reason stands under CI (hardware or kernel feature)."""
    return bool(KEPT_SKIP_REASONS.search(reason))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and h.strict_deps()) or hasattr(report, "wasxfail"):
        return
    reason = _reason(report)
    if kept(reason):
        return
    pkg = debian_package_for(reason)
    report.outcome = "failed"
    report.longrepr = (
        f"skipped for a missing dependency, a failure under CI / FTRT_STRICT_DEPS=1: {reason}\n"
        + (f"Debian package: {pkg} (apt-get install {pkg}); scripts/ensure-deps.sh must install "
           f"it" if pkg else "name its Debian package in the skip reason, and install it in "
           "scripts/ensure-deps.sh; skips that stand under CI are for a GPU or a kernel feature "
           "only (tests/harness/ftrt_pytest_deps.py)"))


def pytest_report_header(config):
    return ("ftrt: missing dependencies " + ("FAIL (CI / FTRT_STRICT_DEPS=1)" if h.strict_deps()
                                             else "skip (set CI=true or FTRT_STRICT_DEPS=1 to fail)"))
