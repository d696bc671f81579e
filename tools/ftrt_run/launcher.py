"""The launcher of an ftrt job: the Open MPI launcher (mpirun, mpiexec, ...) of the
installation whose libmpi the job's program links, a refusal of a program that cannot be run,
and Open MPI 5's fault-tolerance flag (--with-ft ulfm)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from .options import Usage


LAUNCHERS = ("mpirun", "mpiexec", "orterun", "prterun")
VERSION = re.compile(r"\(Open MPI\) (\d+)\.")


def linked_libmpi(args: list[str]) -> tuple[str | None, str | None]:
    """(program, the libmpi it links) for the first argument that is an executable file
    linking a libmpi (ldd), or (None, None): Python jobs, scripts, bare names."""
    for a in args:
        if "/" not in a or not os.path.isfile(a) or not os.access(a, os.X_OK):
            continue
        try:
            out = subprocess.run(["ldd", a], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return None, None
        m = re.search(r"^\s*libmpi\.so\S* => (\S+)", out, re.M)
        if m:
            return a, os.path.realpath(m.group(1))
    return None, None


def launcher_of(lib: str, name: str) -> str | None:
    """The launcher `name` of the Open MPI installation that holds library `lib`: bin/<name> in
    the nearest of the library's directory's ancestors that has one (<prefix>/lib ->
    <prefix>/bin; Debian's /usr/lib/x86_64-linux-gnu -> /usr/bin), or None."""
    d = os.path.dirname(lib)
    for _ in range(4):
        d = os.path.dirname(d)
        cand = os.path.join(d, "bin", name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
        if d == "/":
            break
    return None


def open_mpi_major(launcher: str, env: dict) -> int | None:
    """Open MPI's major version from `launcher --version`, or None (not Open MPI)."""
    try:
        out = subprocess.run([launcher, "--version"], capture_output=True, text=True, env=env,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = VERSION.search(out)
    return int(m.group(1)) if m else None


# Options of Open MPI's mpirun (4.1 and 5) that take values, so that their values are not taken
# for the program (an option missing here only makes check_program() look one token further).
VALUE_OPTS = {"-n", "-np", "-c", "--np", "-N", "--npernode", "-npernode", "--npersocket", "-H",
              "-host", "--host", "-hostfile", "--hostfile", "-machinefile", "--machinefile",
              "--default-hostfile", "-x", "--map-by", "-map-by", "--rank-by", "-rank-by",
              "--bind-to", "-bind-to", "--prefix", "-prefix", "-wd", "-wdir", "--wdir",
              "--output-filename", "--output", "--timeout", "--report-bindings-file",
              "--with-ft", "--tune", "--personality", "--preload-files", "--stdin", "-stdin",
              "--cpu-set", "--cpus-per-proc", "--cpus-per-rank", "--path", "--app", "-app",
              "--rankfile", "-rf", "-rankfile", "--ompi-server", "--launch-agent",
              "--forward-signals", "--runtime-options", "--pset", "--display", "--add-host",
              "--add-hostfile", "--dvm", "--stream-buffering", "--xterm", "--report-pid",
              "--report-uri", "--tmpdir", "--max-restarts", "--am"}
TWO_VALUE_OPTS = {"--mca", "-mca", "--gmca", "-gmca", "--omca", "--pmixmca", "--prtemca",
                  "--gpmixmca"}


def runnable(prog: str, env: dict) -> str | None:
    """None when prog can be run (an executable file, or a name on PATH), else why not."""
    if "/" not in prog:
        return None if shutil.which(prog, path=env.get("PATH")) else \
            f"the program {prog} is not on PATH"
    if not os.path.isfile(prog):
        return f"the program {prog} does not exist (or is not a file)"
    if not os.access(prog, os.X_OK):
        return f"the program {prog} is not executable (chmod +x, or run it through its interpreter)"
    return None


def program_index(args: list[str]) -> int:
    """The index in args (a launcher's arguments) of the first one that is neither an option
    nor an option's value (VALUE_OPTS, TWO_VALUE_OPTS): the program, unless an option that
    VALUE_OPTS lacks took a value; len(args) when there is none."""
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return i + 1
        if not a.startswith("-") or a == "-":
            return i
        i += 3 if a in TWO_VALUE_OPTS else 2 if a in VALUE_OPTS and "=" not in a else 1
    return len(args)


def check_program(args: list[str], env: dict) -> None:
    """Refuses (Usage) a launcher command whose program cannot be run: the first argument
    that is neither an option nor an option's value must be an executable file (a path) or a
    name on PATH (or, should that argument be the value of an option VALUE_OPTS lacks, a later
    argument must be). Open MPI 4.1's `mpirun --enable-recovery` waits forever, silently, for a
    program it could not start; without --enable-recovery it says so and fails, but late. A
    command given an application file (--app) is not checked."""
    if any(a in ("--app", "-app") for a in args):
        return
    i = program_index(args)
    if i >= len(args):
        raise Usage("no program to run after the launcher's options")
    why = runnable(args[i], env)
    # An option this list does not know may have taken a value: a runnable argument further
    # on may be the program, so refuse only when there is none.
    if why and not any(not a.startswith("-") and runnable(a, env) is None for a in args[i + 1:]):
        raise Usage(why)


def adapt_launcher(cmd: list[str], env: dict) -> tuple[list[str], str | None, int | None]:
    """The command to run: an Open MPI launcher (mpirun, mpiexec, ...) given by its bare name
    is replaced by the one of the installation whose libmpi the job's program links (Debian's
    Open MPI 4.1 and an Open MPI 5 in a venv both have a libmpi.so.40 and an `mpirun`: the
    wrong one fails in MPI_Init); a launcher given by its path must be that one (else Usage).
    Open MPI 5 (PRRTE) gets `--with-ft ulfm` unless the command sets --with-ft: it makes the
    job recoverable (a dead rank is not fatal), has PRRTE notify the survivors, and enables
    ULFM in the MPI library (mpi_ft_enable), which 4.1's --enable-recovery alone does there.
    Raises Usage when the program cannot be run (check_program()).
    Returns (command, note for stderr or None, Open MPI's major version or None)."""
    name = os.path.basename(cmd[0])
    if name not in LAUNCHERS:
        return cmd, None, None
    check_program(cmd[1:], env)
    cmd, note = list(cmd), None
    prog, lib = linked_libmpi(cmd[1:])
    want = launcher_of(lib, name) if lib else None
    if "/" in cmd[0]:
        if want and os.path.realpath(cmd[0]) != os.path.realpath(want):
            raise Usage(f"{cmd[0]} is not the launcher of the Open MPI that {prog} links "
                        f"({lib}): use {want}")
    else:
        found = shutil.which(cmd[0], path=env.get("PATH"))
        if want and (not found or os.path.realpath(found) != os.path.realpath(want)):
            note = f"ftrt-run: {prog} links {lib}: running {want}"
            cmd[0] = want
    major = open_mpi_major(cmd[0], env)
    if major is not None and major >= 5 and not any(a == "--with-ft" or a.startswith(
            "--with-ft=") for a in cmd):
        cmd[1:1] = ["--with-ft", "ulfm"]
    return cmd, note, major
