"""ftrt-ckpt: list, verify and export the steps of an ftrt checkpoint directory, so that a
model trained under ftrt can be evaluated, fine-tuned or served by any PyTorch program.

    python3 -m ftrt.ckpt ls DIR [--step N]           # steps (or one step's regions)
    python3 -m ftrt.ckpt verify DIR [--step N|--all] # every CRC32C of a step
    python3 -m ftrt.ckpt export DIR [--step N] --out FILE [--uncommitted] [--raw]
                                [--safetensors PATH|--no-safetensors] [--trust-pickle]

(tools/ftrt-ckpt runs the same; docs/checkpoint.md "Taking a model out of ftrt".) The step
by default is the one a relaunch restores: the one LATEST names, else the newest committed.
export writes a torch.save() file: {"model": state_dict, "optimizer": state_dict,
"scheduler", "schedulers", "scaler", "extra_state", "ftrt": {step, ..., "unmapped"}} for a
PyTorch job (ftrt/ckpt_export.py), every region raw for a C job; and the model's tensors to
safetensors beside it when the package imports.

Exit status: 0 done (verify: no damage); 1 the checkpoint is damaged (verify found a problem;
export refused to read a damaged step: nothing written); 2 not done for another reason (bad
arguments, no such directory or step, an uncommitted step without --uncommitted, torch
missing, a write error).
"""
import argparse
import os
import sys
from typing import TYPE_CHECKING, List, NoReturn, Optional

from . import ckpt_format as fmt

if TYPE_CHECKING:
    from .ckpt_export import Export

__all__ = ["main", "EXIT_OK", "EXIT_DAMAGED", "EXIT_FAILED"]

EXIT_OK, EXIT_DAMAGED, EXIT_FAILED = 0, 1, 2


class _Fail(Exception):
    """Ends the command with `code` after printing the message."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def _size(n: int) -> str:
    """n bytes for people: "812 bytes", "196.0 KiB", "1.5 GiB"."""
    if n < 1024:
        return f"{n} bytes"
    x = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        x /= 1024
        if x < 1024 or unit == "GiB":
            break
    return f"{x:.1f} {unit}"


def _state(s: fmt.StepInfo) -> str:
    return ("committed" if s.committed else "UNCOMMITTED") + (", LATEST" if s.latest else "")


def _default_step(directory: str) -> int:
    """The step a relaunch restores: LATEST's when committed, else the newest committed."""
    steps = fmt.list_steps(directory)
    committed = [s.step for s in steps if s.committed]
    latest = fmt.latest_step(directory)
    if latest is not None and latest in committed:
        return latest
    if committed:
        return committed[-1]
    raise _Fail(f"{directory}: no committed step" + (f" (uncommitted: "
                f"{', '.join(str(s.step) for s in steps)}; name one with --step)"
                if steps else ""))


def cmd_ls(a: argparse.Namespace) -> int:
    """Prints the steps of a.dir (or a.step's regions)."""
    if a.step is not None:
        return _ls_step(a.dir, a.step)
    steps = fmt.list_steps(a.dir)
    latest = fmt.latest_step(a.dir)
    print(f"{a.dir}: {len(steps)} step(s), LATEST "
          f"{'step-' + str(latest) if latest is not None else 'none'}")
    if steps:
        print(f"{'step':>10}  {'state':<22} {'trainers':>8} {'regions':>8} {'size':>12}")
    for s in steps:
        print(f"{s.step:>10}  {_state(s):<22} {s.nranks or '?':>8} {len(s.regions):>8} "
              f"{_size(s.nbytes):>12}")
    return EXIT_OK


def _ls_step(directory: str, step: int) -> int:
    if not os.path.isdir(os.path.join(directory, f"step-{step}")):
        raise _Fail(f"{directory}: no step {step}")
    s = fmt.step_info(directory, step, fmt.latest_step(directory))
    print(f"step-{step}: {_state(s)}, {s.nranks or '?'} trainer(s), {len(s.files)} shard "
          f"file(s), {_size(s.nbytes)}")
    width = max([len(n) for n, _, _ in s.regions] + [6])
    print(f"  {'region':<{width}}  {'kind':<10} {'bytes':>14}")
    for name, kind, total in s.regions:
        print(f"  {name:<{width}}  {fmt.KIND_NAMES[kind]:<10} {total:>14,}"
              f"{'  (per trainer, rank 0)' if kind == fmt.KIND_SHARDED else ''}")
    return EXIT_OK


def _verify_one(directory: str, step: int) -> bool:
    problems, _, committed = fmt.scan_step(directory, step)
    if problems:
        print(f"step-{step}: DAMAGED ({len(problems)} problem(s))")
        for p in problems:
            print(f"  {p}")
        return False
    s = fmt.step_info(directory, step)
    slices = sum(len(fmt.read_table(f).entries) for f in s.files)
    print(f"step-{step}: OK ({'committed' if committed else 'UNCOMMITTED'}): {len(s.files)} "
          f"shard(s), {len(s.regions)} region(s), {slices} slice CRC32Cs and {len(s.files)} "
          f"header CRC32Cs checked, {_size(s.nbytes)}")
    return True


def cmd_verify(a: argparse.Namespace) -> int:
    """Checks every CRC32C of a.step (default: the one a relaunch restores; --all: every
    step). Exit 1 when any is damaged."""
    if a.all:
        steps = [s.step for s in fmt.list_steps(a.dir)]
        if not steps:
            raise _Fail(f"{a.dir}: no step")
    else:
        steps = [a.step if a.step is not None else _default_step(a.dir)]
    ok = [_verify_one(a.dir, s) for s in steps]
    return EXIT_OK if all(ok) else EXIT_DAMAGED


def _safetensors_path(a: argparse.Namespace) -> Optional[str]:
    if a.no_safetensors:
        return None
    if a.safetensors:
        return str(a.safetensors)
    stem, _ = os.path.splitext(a.out)
    return stem + ".safetensors"


def cmd_export(a: argparse.Namespace) -> int:
    """Exports a.step (default: the one a relaunch restores) to a.out (and safetensors)."""
    try:
        from . import ckpt_export as ex_mod
    except ImportError as e:
        raise _Fail(f"export needs PyTorch ({e}); Debian: apt-get install python3-torch")
    step = a.step if a.step is not None else _default_step(a.dir)
    info = fmt.step_info(a.dir, step) if os.path.isdir(
        os.path.join(a.dir, f"step-{step}")) else None
    if info is None:
        raise _Fail(f"{a.dir}: no step {step}")
    if not info.committed and not a.uncommitted:
        raise _Fail(f"step-{step} is not committed (no MANIFEST: not every shard was "
                    f"durable, or the commit did not happen): a relaunch would not restore "
                    f"it; --uncommitted exports it anyway")
    try:
        regions, committed = fmt.read_step(a.dir, step)
    except fmt.CkptError as e:
        where = (e.file or "") + (f": region \"{e.region}\"" if e.region else "")
        raise _Fail(f"step-{step} is damaged, nothing written: {where}: {e}", EXIT_DAMAGED)
    ex = ex_mod.build_export(regions, step, committed, a.dir, raw=a.raw,
                             trust_pickle=a.trust_pickle)
    st = _safetensors_path(a)
    if st and not ex_mod.safetensors_available():
        ex.notes.append(f"{st} not written: the safetensors package is not installed "
                        f"(pip install safetensors, or pip install .[safetensors])")
        st = None
    try:
        written = ex_mod.write_outputs(ex, a.out, st)
    except (OSError, RuntimeError) as e:
        raise _Fail(f"writing the export failed, nothing written: {e}")
    _report_export(ex, step, regions.nranks, committed, written)
    return EXIT_OK


def _report_export(ex: "Export", step: int, nranks: int, committed: bool,
                   written: List[str]) -> None:
    obj = ex.obj
    print(f"step-{step} ({'committed' if committed else 'UNCOMMITTED'}, {nranks} trainer(s))"
          f" -> {', '.join(written)}")
    if ex.raw:
        print(f"  raw: {len(obj['regions'])} region tensor(s) (uint8)")
    else:
        opt = obj["optimizer"]
        print(f"  model: {len(obj['model'])} tensor(s), "
              f"{sum(t.numel() for t in obj['model'].values()):,} elements")
        if opt is not None:
            print(f"  optimizer: {sum(len(v) for v in opt['state'].values())} state tensor(s),"
                  f" {len(opt['param_groups'])} param group(s)")
        print(f"  schedulers: {len(obj['schedulers'])}, scaler: "
              f"{'yes' if obj['scaler'] is not None else 'no'}, extra_state: "
              f"{len(obj['extra_state'])} key(s)")
    for n in ex.notes:
        print(f"  note: {n}")
    for u in ex.unmapped:
        print(f"  not mapped: {u}")


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, "PROG: message (see PROG --help)", status 2."""

    def error(self, message: str) -> "NoReturn":
        self.exit(EXIT_FAILED, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="ftrt-ckpt", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{ls,verify,export}")
    p = sub.add_parser("ls", help="the steps of DIR (with --step: that step's regions)")
    p.add_argument("dir")
    p.add_argument("--step", type=int, help="list this step's regions")
    p = sub.add_parser("verify", help="check every CRC32C of a step (exit 1: damaged)")
    p.add_argument("dir")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--step", type=int, help="default: the step a relaunch restores")
    g.add_argument("--all", action="store_true", help="every step of DIR")
    p = sub.add_parser("export", help="a step to a torch.save() state_dict (and safetensors)")
    p.add_argument("dir")
    p.add_argument("--step", type=int, help="default: the step a relaunch restores")
    p.add_argument("--out", required=True, help="the torch.save() file to write")
    p.add_argument("--uncommitted", action="store_true", help="export a step without MANIFEST")
    p.add_argument("--raw", action="store_true", help="every region as a uint8 tensor, even "
                   "with a layout record")
    p.add_argument("--safetensors", help="the model's safetensors file (default: --out with "
                   "the suffix .safetensors)")
    p.add_argument("--no-safetensors", action="store_true", help="no safetensors file")
    p.add_argument("--trust-pickle", action="store_true", help="unpickle FaultTolerant's "
                   "Python state whatever it holds (default: plain Python types only)")
    return ap


COMMANDS = {"ls": cmd_ls, "verify": cmd_verify, "export": cmd_export}


def main(argv: Optional[List[str]] = None) -> int:
    """Runs one command; returns the exit status (EXIT_OK, EXIT_DAMAGED, EXIT_FAILED)."""
    a = _parser().parse_args(argv)
    if not os.path.isdir(a.dir):
        print(f"ftrt-ckpt: {a.dir}: not a directory", file=sys.stderr)
        return EXIT_FAILED
    try:
        return COMMANDS[a.cmd](a)
    except _Fail as e:
        print(f"ftrt-ckpt: {e}", file=sys.stderr)
        return e.code
    except fmt.CkptError as e:
        print(f"ftrt-ckpt: {e.file or a.dir}: {e}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:  # libftrt not found (its CRC32C), or a file that vanished
        print(f"ftrt-ckpt: {e}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
