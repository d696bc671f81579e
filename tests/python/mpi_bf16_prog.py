"""An MPI program for test_mpi_bf16.py::test_allreduce_16bit_matches_torch (1 coordinator + 2
trainers, no spare): ftrt's 16-bit reductions against PyTorch's own arithmetic and conversions.

Each trainer knows both ranks' data: rank 0 holds all 65,536 bit patterns of the dtype (NaNs,
infinities, subnormals, signed zeros), rank 1 a random permutation-like mix. The blocking
ftrt_allreduce (SUM, MIN, MAX), the overlapped ftrt_allreduce_start (SUM) and a bucketer with
the mean must give, element by element: SUM (a.float() + b.float()).to(dtype), torch's
rounding of the float32 sum (bit for bit; a NaN anywhere as a NaN); MIN / MAX the value of
torch.minimum / torch.maximum (NaN where either is NaN); the mean (sum.float() * 0.5).to(dtype).
Prints "rank R: PASS"; a failed check raises and the process exits 1 (trainer_prog.py)."""
import sys

import torch

from trainer_prog import ftrt, run_trainers

N = 1 << 16


def data(rank, dt):
    bits = torch.arange(N, dtype=torch.int32).to(torch.int16)
    if rank == 1:
        g = torch.Generator().manual_seed(5)
        bits = torch.randint(-32768, 32768, (N,), generator=g, dtype=torch.int32).to(torch.int16)
    return bits.view(dt).clone()


def same(got, want, what):
    """Bitwise equal where want is not NaN; NaN exactly where want is NaN."""
    nan = torch.isnan(want)
    if not torch.equal(torch.isnan(got), nan):
        raise AssertionError(f"{what}: NaNs differ")
    g, w = got[~nan].view(torch.int16), want[~nan].view(torch.int16)
    if not torch.equal(g, w):
        bad = int((g != w).nonzero()[0])
        raise AssertionError(f"{what}: element {bad}: {int(g[bad]) & 0xFFFF:#06x} != "
                             f"{int(w[bad]) & 0xFFFF:#06x}")


def same_value(got, want, what):
    nan = torch.isnan(want)
    if not torch.equal(torch.isnan(got), nan) or not torch.equal(got[~nan], want[~nan]):
        raise AssertionError(f"{what}: values differ")


def check_dtype(ctx, dt, code):
    a, b = data(0, dt), data(1, dt)
    mine = a if ctx.rank == 0 else b
    want = (a.float() + b.float()).to(dt)
    x = mine.clone()
    ctx.allreduce(x)
    same(x, want, f"{dt} allreduce SUM")
    x = mine.clone()
    with ctx.allreduce_start(x) as req:
        req.wait()
    same(x, want, f"{dt} allreduce_start SUM")
    for op, fn in ((ftrt.MIN, torch.minimum), (ftrt.MAX, torch.maximum)):
        x = mine.clone()
        ctx.allreduce(x, op=op)
        same_value(x, fn(a.float(), b.float()).to(dt), f"{dt} allreduce op {op}")
    cfg = ftrt.BucketConfig.defaults()
    cfg.first_bucket_bytes, cfg.bucket_bytes, cfg.piece_bytes = 1000, 40000, 30000
    counts = [1000, 7, N - 1007]
    bk = ctx.bucketer(counts, code, cfg)
    x = mine.clone()
    parts = [x[0:1000], x[1000:1007], x[1007:]]
    for i in (2, 1, 0):
        bk.ready(i, parts[i])
    bk.wait_all()
    bk.free()
    same(x, (want.float() * 0.5).to(dt), f"{dt} bucketer mean")


def checks(ctx):
    if ctx.size != 2:
        raise AssertionError(f"2 trainers expected, got {ctx.size}")
    check_dtype(ctx, torch.bfloat16, ftrt.BFLOAT16)
    check_dtype(ctx, torch.float16, ftrt.FLOAT16)


if __name__ == "__main__":
    sys.exit(run_trainers(checks))
