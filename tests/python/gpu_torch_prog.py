"""A GPU program for scripts/gpu-run.sh (step torch-gpu): ftrt.pytorch.GradAverager on a CUDA
model, inside a real ftrt job (mpirun: 1 coordinator + N trainers, no spare; N <= 2, the two
trainers time-sharing one GPU over NCCL's sockets as gpu-run.sh arranges), with libftrt_gpu
loaded through FTRT_LIB.

Autograd runs the hooks of CUDA parameters on its device thread while this thread is blocked in
backward(), so the gradients reach the GPU bucketer through
ftrt_gpu_bucketer_ready_from_any_thread() (issue 21). Every trainer checks, for several steps:
  - that hooks ran off the context's thread (else the any-thread path was not exercised);
  - p.grad after wait() against the mean of every rank's local gradient, computed here on a
    copy of the model with each rank's batch: bit for bit (with N <= 2 the sum of an NCCL
    allreduce is a + b in any order, and the mean is that times 0.5, as the plane's unpack
    scales);
and prints "rank R: PASS"; a failed check raises and the process exits 1. Exits 77 when torch
has no CUDA device or the loaded library is not libftrt_gpu."""
import copy
import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))

import ftrt  # noqa: E402

STEPS = 6
WIDTH = 512
LAYERS = 6


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def batch(torch, step, rank, dev):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(64, WIDTH, generator=g).to(dev)
    y = torch.randint(0, 10, (64,), generator=g).to(dev)
    return x, y


def model_of(torch, dev):
    torch.manual_seed(7)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(WIDTH, 10))
    return torch.nn.Sequential(*layers).to(dev)


def local_grads(torch, model, step, rank, dev):
    """The local gradients of `rank` at `step` on a copy of model (no hooks)."""
    m = copy.deepcopy(model)
    x, y = batch(torch, step, rank, dev)
    torch.nn.functional.cross_entropy(m(x), y).backward()
    return [p.grad.detach().clone() for p in m.parameters()]


def main():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    import torch
    import ftrt.pytorch as ftp
    torch.use_deterministic_algorithms(True, warn_only=True)  # torch.equal below is the check
    if not torch.cuda.is_available() or not ftrt.has_gpu_plane():
        print(f"skipped: torch.cuda.is_available()={torch.cuda.is_available()}, "
              f"libftrt_gpu loaded={ftrt.has_gpu_plane()} ({ftrt.lib_path()})")
        return 77
    ctx = ftp.init_process()
    rank, n = ctx.rank, ctx.size
    check(n <= 2, f"{n} trainers: the exact check needs at most 2")
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    model = model_of(torch, dev)
    owner = threading.get_ident()
    threads = set()
    accs = []  # a leaf holds its AccumulateGrad only weakly: kept here (not on the parameter,
    for p in model.parameters():  # which local_grads deep-copies); who runs the hooks
        acc = p.expand_as(p).grad_fn.next_functions[0][0]
        acc.register_hook(lambda *_: threads.add(threading.get_ident()))
        accs.append(acc)
    avg = ftp.GradAverager(ctx, model.parameters(), bucket_bytes=256 << 10,
                           first_bucket_bytes=64 << 10)
    check(avg.cuda_device == 0, "the averager took the CUDA path")
    check(avg.buckets >= 4, f"{avg.buckets} buckets")
    for step in range(STEPS):
        want = [local_grads(torch, model, step, r, dev) for r in range(n)]
        model.zero_grad(set_to_none=True)
        x, y = batch(torch, step, rank, dev)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        avg.wait()
        for i, p in enumerate(model.parameters()):
            mean = want[0][i] if n == 1 else (want[0][i] + want[1][i]) * 0.5
            check(torch.equal(p.grad, mean), f"step {step}: parameter {i} is not the mean")
        with torch.no_grad():  # a plain SGD step, the same on every trainer
            for p in model.parameters():
                p -= 0.01 * p.grad
        ctx.step_done(step)
    off = len(threads - {owner})
    check(off > 0, "every hook ran on the context's thread: the any-thread path was not used")
    print(f"rank {rank}: {STEPS} steps, {avg.buckets} buckets, hooks on {off} thread(s) other "
          f"than the context's; p.grad bit for bit the mean of {n} trainer(s)")
    avg.close()
    ctx.finalize()
    print(f"rank {rank}: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
