"""Command-line checks shared by the Python examples (train_torch.py, train_lm.py): argparse
errors on one line, and the paths checked before the job starts, so that a bad one ends every
process at once with one line naming the option (not a traceback, nor the library's message
naming FTRT_CKPT_DIR). Python 3 standard library only."""
import argparse
import os


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are one line: "PROG: message (see PROG --help)",
    exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def not_a_directory(path):
    """The nearest existing path among path and its ancestors when it is not a directory."""
    d = os.path.abspath(path)
    while not os.path.exists(d):
        d = os.path.dirname(d)
    return None if os.path.isdir(d) else d


def check_paths(ap, a, dirs=(), outputs=(), inputs=()):
    """ap.error() (exit 2) naming the first option of a whose path cannot be used: dirs (to be
    made: nothing on the way may be a regular file), outputs (files to be written: not a
    directory, nothing on the way a regular file), inputs (files that must be readable)."""
    def opt(name):
        return "--" + name.replace("_", "-")
    for name in dirs:
        path = getattr(a, name)
        bad = path and not_a_directory(path)
        if bad:
            ap.error(f"{opt(name)} {path}: {bad} is not a directory")
    for name in outputs:
        path = getattr(a, name)
        if path and os.path.isdir(path):
            ap.error(f"{opt(name)} {path}: is a directory")
        bad = path and not_a_directory(os.path.dirname(os.path.abspath(path)))
        if bad:
            ap.error(f"{opt(name)} {path}: {bad} is not a directory")
    for name in inputs:
        path = getattr(a, name)
        if path and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            why = "no such file" if not os.path.exists(path) else "not a readable file"
            ap.error(f"{opt(name)} {path}: {why}")
