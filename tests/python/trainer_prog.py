"""The frame of the MPI test programs that check the binding from inside a real ftrt job
(mpi_binding_prog.py, mpi_bf16_prog.py: run under mpirun by test_mpi_torch.py and
test_mpi_bf16.py): join the job, run the checks on every trainer, say "rank R: PASS" or
"rank R: FAIL: ..." and leave the job cleanly either way. Importing it puts the in-tree
binding (bindings/python) first on sys.path."""
import os
import sys
import traceback
from typing import Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))

import ftrt  # noqa: E402


def run_trainers(checks: Callable[["ftrt.Context"], None],
                 cfg: Optional["ftrt.Config"] = None) -> int:
    """Joins the job (ftrt.init(cfg), default ftrt.Config.from_env()) and calls checks(ctx) on a
    trainer (the coordinator only takes part). A check that raises is printed with its
    traceback and a line "rank R: FAIL: <error>" (R "-" on a non-trainer); otherwise each
    trainer prints "rank R: PASS". The context is finalized in every case. Returns the
    process's exit status: 0, or 1 after a failed check (tools/ftrt-run then exits 1 too:
    docs/running.md "Exit status")."""
    ctx = ftrt.init(cfg or ftrt.Config.from_env())
    code = 0
    try:
        if ctx.is_trainer:
            checks(ctx)
            print(f"rank {ctx.rank}: PASS", flush=True)
    except Exception as e:  # report, then leave the job cleanly
        traceback.print_exc()
        print(f"rank {ctx.rank if ctx.is_trainer else '-'}: FAIL: {e}", flush=True)
        code = 1
    finally:
        ctx.finalize()
    return code
