"""ftrt-run's command line and settings: options, FTRT_RUN_* variables, and checks of the
paths it or the job will write (the status file, the summary). A bad one raises Usage: a
one-line message, exit status 2."""
from __future__ import annotations

import os


class Usage(Exception):
    """A bad argument or path: its one-line message, exit status 2."""


SETTINGS = {"--exit-grace": ("FTRT_RUN_EXIT_GRACE_S", 10.0), "--linger": ("FTRT_RUN_LINGER_S", 1.0),
            "--term-grace": ("FTRT_RUN_TERM_GRACE_S", 3.0)}
PATHS = ("--status", "--summary", "--join")
FLAGS = {"--joinable": "FTRT_RUN_JOINABLE"}  # options without a value, and their variable


def seconds(what: str, text: str) -> float:
    """text as seconds >= 0, or Usage naming `what` (an option or a variable)."""
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v >= 0 or v == float("inf"):
        raise Usage(f"{what}: expected a number of seconds >= 0, got {text!r}")
    return v


def flag(var: str, text: str) -> bool:
    """A flag's variable (FTRT_RUN_JOINABLE): "1" is True, "0" or "" False, else Usage."""
    if text in ("", "0", "1"):
        return text == "1"
    raise Usage(f"{var}: expected 1 or 0, got {text!r}")


def split_args(argv: list[str]) -> tuple[dict, list[str]] | None:
    """({option: its value, or True for a flag}, the command after the options and `--`) from
    the command line; None for --help. Raises Usage (an unknown option, a missing value)."""
    given: dict[str, str | bool] = {}
    while argv and argv[0] != "--" and argv[0].startswith("-"):
        opt = argv[0]
        if opt in ("-h", "--help"):
            return None
        if opt in FLAGS:
            given[opt], argv = True, argv[1:]
            continue
        if opt not in SETTINGS and opt not in PATHS:
            raise Usage(f"unknown option {opt!r} (see ftrt-run --help)")
        if len(argv) < 2 or argv[1] == "":
            raise Usage(f"{opt} needs a value")
        given[opt] = argv[1]
        argv = argv[2:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    return given, argv


def check_modes(opts: dict, given: dict) -> None:
    """--join (run a joiner) goes with neither --joinable nor the job's own files (--status,
    --summary: a joiner has no status file of its own to watch); else Usage. FTRT_RUN_JOINABLE
    and FTRT_RUN_SUMMARY, which a batch script may set for every ftrt-run, are ignored with
    --join."""
    if opts["join"] is None:
        return
    for opt in ("--joinable", "--status", "--summary"):
        if opt in given:
            raise Usage(f"--join and {opt} exclude each other (see ftrt-run --help)")
    opts["joinable"], opts["summary"] = False, None


def parse_args(argv: list[str]) -> dict | None:
    """{"status", "summary", "exit_grace", "linger", "term_grace", "joinable", "join", "cmd"}
    from the command line (and FTRT_RUN_* for the settings not given); None for --help.
    "joinable": bool (--joinable, FTRT_RUN_JOINABLE=1); "join": the run directory of the job to
    join, or None. Raises Usage."""
    split = split_args(argv)
    if split is None:
        return None
    given, argv = split
    opts = {"status": given.get("--status"), "summary": given.get("--summary"), "cmd": argv,
            "summary_from": "--summary", "join": given.get("--join")}
    if opts["summary"] is None and os.environ.get("FTRT_RUN_SUMMARY"):
        opts["summary"], opts["summary_from"] = os.environ["FTRT_RUN_SUMMARY"], "FTRT_RUN_SUMMARY"
    for opt, (var, default) in SETTINGS.items():
        key = opt[2:].replace("-", "_")
        if opt in given:
            opts[key] = seconds(opt, given[opt])
        else:
            opts[key] = seconds(var, os.environ[var]) if var in os.environ else default
    for opt, var in FLAGS.items():  # a joiner ignores the variable (check_modes())
        from_env = opts["join"] is None and flag(var, os.environ.get(var, ""))
        opts[opt[2:]] = opt in given or from_env
    check_modes(opts, given)
    if not argv:
        raise Usage("no command to run: ftrt-run [options] -- mpirun ... (see ftrt-run --help)")
    return opts


def not_a_directory(path: str) -> str | None:
    """The nearest existing ancestor of path when it is not a directory, else None."""
    d = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(d):
        d = os.path.dirname(d)
    return None if os.path.isdir(d) else d


def check_file_path(what: str, path: str, parent_must_exist: bool = False) -> None:
    """A file ftrt-run or the job will write at path can be written there; else Usage naming
    `what` (an option or a variable) and the path."""
    if os.path.isdir(path):
        raise Usage(f"{what} {path}: is a directory")
    bad = not_a_directory(path)
    if bad:
        raise Usage(f"{what} {path}: {bad} is not a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if parent_must_exist and not os.path.isdir(parent):
        raise Usage(f"{what} {path}: directory {parent} does not exist")


def status_file(opts: dict, env: dict) -> tuple[str | None, str | None]:
    """(status file path, where it came from: an option or a variable), or (None, None) when
    neither gives one (ftrt-run's run directory then holds it); the path checked, an old file
    removed."""
    status, given = opts["status"], "--status"
    if status is None and env.get("FTRT_STATUS_FILE"):
        status, given = env["FTRT_STATUS_FILE"], "FTRT_STATUS_FILE"
    if status is None:
        return None, None
    check_file_path(given, status)
    try:
        os.unlink(status)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise Usage(f"{given} {status}: cannot remove the previous status file: {e.strerror}")
    return status, given
