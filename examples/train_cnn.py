#!/usr/bin/python3
"""train_cnn.py - a CNN with BatchNorm, torchvision's resnet18, trained data-parallel on the UCI
handwritten digits upscaled to 3 x 32 x 32, kept alive through rank failures by ftrt (through
ftrt.pytorch.FaultTolerant, whose broadcast_buffers keeps BatchNorm's running statistics as
DDP does), or with torch.distributed's gloo DDP (broadcast_buffers=True) for comparison.

    # ftrt: world rank 0 coordinator, 1..4 trainers, 5 hot spare
    tools/ftrt-run -- mpirun --enable-recovery --oversubscribe --bind-to none \\
        --mca mpi_yield_when_idle 1 -np 6 /usr/bin/python3 examples/train_cnn.py \\
        --ckpt-dir ckpt --report r.json --params-out ftrt.state
    # the same model, data and seed under torch.distributed (gloo DDP), 4 processes
    mpirun --oversubscribe --bind-to none -np 4 /usr/bin/python3 examples/train_cnn.py \\
        --backend gloo --params-out gloo.state

Model: torchvision.models.resnet18(num_classes=10) (11,181,642 parameters; 20 BatchNorm
layers, whose running means, variances and batch counters are the model's buffers), initial
weights from torch.manual_seed(seed); cross-entropy, SGD with momentum and weight decay.

Data: examples/train_torch.py's digits, split and minibatch rule (logical rank r's minibatch
at step s is a pure function of (seed, s, r)); each 8 x 8 image (pixel / 16) is upscaled to
32 x 32 (bilinear, F.interpolate) and repeated over 3 channels. torch runs with one thread
and deterministic algorithms, as in train_torch.py.

Buffers: under ftrt, FaultTolerant(broadcast_buffers=True) broadcasts logical rank 0's
buffers to every trainer after each step's gradient averaging; gloo DDP(broadcast_buffers=
True) broadcasts rank 0's before each forward pass. Either way each forward pass starts from
rank 0's buffers, and rank 0's own evolve from its own batches only. --no-broadcast-buffers
keeps each trainer's own (broadcast_buffers=False in both). The test accuracy is logical rank
0's model in eval mode (its running statistics) on the 359 held-out images.

--params-out FILE: logical rank 0's final parameters and buffers, model.state_dict() order,
each tensor's raw little-endian bytes (float32; num_batches_tracked int64); the sha256 of the
same bytes is printed as "state sha256".
"""
import argparse
import hashlib
import math
import os
import sys
import time
from typing import Any, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
sys.path.insert(1, HERE)  # example_args.py and train_torch.py, also from another directory
import example_args  # noqa: E402
import train_torch as digits  # noqa: E402  (the data set, the split, the minibatch rule)

SIDE = 32       # the upscaled images: CHANNELS x SIDE x SIDE
CHANNELS = 3
EVAL_CHUNK = 128  # test images per forward pass at the end


# ------------------------------------------------------------------------------------------
# Options
# ------------------------------------------------------------------------------------------

def add_options(ap: argparse.ArgumentParser) -> None:
    """The command line (see --help)."""
    ap.add_argument("--backend", choices=["ftrt", "gloo"], default="ftrt")
    ap.add_argument("--steps", type=int, default=100, help="optimizer steps (100)")
    ap.add_argument("--batch", type=int, default=8, help="minibatch per trainer (8)")
    ap.add_argument("--lr", type=float, default=0.01, help="learning rate (0.01)")
    ap.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (0.9)")
    ap.add_argument("--weight-decay", type=float, default=5e-4, help="SGD weight decay (5e-4)")
    ap.add_argument("--seed", type=int, default=1, help="weights and minibatches (1)")
    ap.add_argument("--no-broadcast-buffers", action="store_true", help="each trainer keeps "
                    "its own BatchNorm statistics (broadcast_buffers=False, both backends)")
    ap.add_argument("--ckpt-every", type=int, default=50, help="checkpoint every K steps, "
                    "0 = never (50; ftrt only)")
    ap.add_argument("--ckpt-dir", help="checkpoint directory (ftrt default: FTRT_CKPT_DIR "
                    "or ftrt-ckpt)")
    ap.add_argument("--report", help="JSON report of the job (ftrt; written by the "
                    "coordinator)")
    ap.add_argument("--params-out", help="final parameters and buffers (state_dict order, "
                    "raw bytes), written by logical rank 0")
    ap.add_argument("--data", default=digits.default_data(), help="digits CSV (gzip); "
                    f"default ${digits.DIGITS_DATA_ENV} if set, else {digits.DATA_DEFAULT}")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="bucket size, MiB (25, "
                    "DDP's bucket_cap_mb; both backends)")
    ap.add_argument("--bucket-view", action="store_true", help="gradients as views of their "
                    "buckets (gradient_as_bucket_view, both backends)")
    ap.add_argument("--warmup-steps", type=int, default=5, help="steps left out of the "
                    "step-time figure (5)")
    ap.add_argument("--progress-every", type=int, default=25, help="print the loss every K "
                    "steps, and at the first and the last (25)")
    ap.add_argument("--master-addr", default=os.environ.get("MASTER_ADDR", "127.0.0.1"),
                    help="gloo rendezvous address (MASTER_ADDR or 127.0.0.1)")
    ap.add_argument("--master-port", type=int, default=int(os.environ.get("MASTER_PORT",
                    "29512")), help="gloo rendezvous port (MASTER_PORT or 29512)")


def parse_args(argv: List[str]) -> argparse.Namespace:
    """The options, checked: a bad one ends the process with one line (exit 2)."""
    ap = example_args.Parser(
        description="Data-parallel resnet18 (BatchNorm) on the UCI digits upscaled to 3 x 32 x "
                    "32, fault tolerant via ftrt (or torch.distributed gloo DDP with --backend "
                    "gloo).")
    add_options(ap)
    a = ap.parse_args(argv)
    if a.steps < 0 or a.batch < 1 or a.progress_every < 1 or a.warmup_steps < 0:
        ap.error("--steps, --warmup-steps must be >= 0 and --batch, --progress-every >= 1")
    if not (a.lr > 0 and math.isfinite(a.lr)) or not (0 <= a.momentum < 1) or \
            not (0 <= a.weight_decay < 1):
        ap.error("--lr must be > 0, --momentum and --weight-decay in [0, 1)")
    if a.ckpt_every < 0 or not a.bucket_mb > 0:
        ap.error("--ckpt-every must be >= 0 and --bucket-mb > 0")
    example_args.check_paths(ap, a, dirs=("ckpt_dir",), outputs=("report", "params_out"),
                             inputs=("data",))
    return a


# ------------------------------------------------------------------------------------------
# Data and model (shared by both backends)
# ------------------------------------------------------------------------------------------

class Data:
    """The digits as 1 x SIDE x SIDE images (train and test); batches of CHANNELS channels."""

    def __init__(self, torch: Any, a: argparse.Namespace) -> None:
        x, y = digits.load_digits(a.data)
        trx, try_, tex, tey = digits.split(x, y)
        self.torch, self.a = torch, a
        self.train_x, self.train_y = upscale(torch, trx), torch.from_numpy(try_)
        self.test_x, self.test_y = upscale(torch, tex), torch.from_numpy(tey)

    def batch(self, step: int, rank: int) -> Tuple[Any, Any]:
        """Logical rank `rank`'s minibatch of step `step`: (images [B, 3, 32, 32], labels)."""
        idx = self.torch.tensor(digits.minibatch_indices(self.a.seed, step, rank,
                                                         len(self.train_y), self.a.batch),
                                dtype=self.torch.int64)
        return self.train_x[idx].repeat(1, CHANNELS, 1, 1), self.train_y[idx]


def upscale(torch: Any, x: Any) -> Any:
    """[n, 64] float32 in [0, 1] -> [n, 1, SIDE, SIDE], bilinear."""
    img = torch.from_numpy(x).reshape(-1, 1, 8, 8)
    return torch.nn.functional.interpolate(img, size=(SIDE, SIDE), mode="bilinear",
                                           align_corners=False).contiguous()


def build(torch: Any, a: argparse.Namespace) -> Tuple[Any, Any]:
    """resnet18 and its optimizer, from a.seed; the optimizer's state created (zeros)."""
    import torchvision
    from ftrt.pytorch import init_optimizer_state
    torch.manual_seed(a.seed)
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum,
                          weight_decay=a.weight_decay)
    init_optimizer_state(opt)
    return model, opt


def describe(model: Any, a: argparse.Namespace, data: Data) -> str:
    """The header's model and run part (bench/torch_overhead.py reads "(N parameters)")."""
    nparams = sum(p.numel() for p in model.parameters())
    nbuf = sum(b.numel() * b.element_size() for b in model.buffers())
    policy = "each trainer's own" if a.no_broadcast_buffers else "broadcast from rank 0"
    return (f"resnet18 ({nparams} parameters), BatchNorm buffers {nbuf} bytes ({policy}), "
            f"batch {a.batch} x {CHANNELS} x {SIDE} x {SIDE} per trainer, {a.steps} steps, "
            f"SGD lr {a.lr:g} momentum {a.momentum:g} weight decay {a.weight_decay:g}, seed "
            f"{a.seed}, {len(data.train_y)} train / {len(data.test_y)} test images")


def progress(step: int, a: argparse.Namespace, loss: float, who: str) -> None:
    """The loss line at the first step, every --progress-every steps and the last."""
    done = step + 1
    if done == 1 or done % a.progress_every == 0 or done == a.steps:
        print(f"step {done}/{a.steps}  loss {loss:.4f} ({who})", flush=True)


# ------------------------------------------------------------------------------------------
# The end of the job (logical rank 0)
# ------------------------------------------------------------------------------------------

def accuracy(torch: Any, model: Any, data: Data) -> Tuple[int, int]:
    """(correct, total) of the model in eval mode (running statistics) on the test images."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(data.test_y), EVAL_CHUNK):
            x = data.test_x[i:i + EVAL_CHUNK].repeat(1, CHANNELS, 1, 1)
            correct += int((model(x).argmax(dim=1) == data.test_y[i:i + EVAL_CHUNK]).sum())
    return correct, len(data.test_y)


def state_bytes(model: Any) -> bytes:
    """model.state_dict()'s tensors, raw bytes, in order (parameters and buffers)."""
    return b"".join(t.detach().contiguous().numpy().tobytes()
                    for t in model.state_dict().values())


def write_atomically(path: str, blob: bytes) -> None:
    """path holds blob, or what it held before (a temporary file renamed over it)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def finish(torch: Any, a: argparse.Namespace, model: Any, data: Data,
           last_loss: Optional[float], times: List[float]) -> None:
    """Logical rank 0: step times, last loss, test accuracy, state hash, --params-out."""
    digits.report_step_times(times, a, "train_cnn")
    if last_loss is None:
        print("final train loss: n/a (no step ran in this process)")
    else:
        print(f"final train loss: {last_loss:.4f} (last step, logical rank 0's {a.batch} "
              f"images)")
    correct, n = accuracy(torch, model, data)
    print(f"test accuracy: {correct / n:.4f} ({correct}/{n}, eval mode)")
    blob = state_bytes(model)
    print(f"state sha256: {hashlib.sha256(blob).hexdigest()[:32]} ({len(blob)} bytes)",
          flush=True)
    if a.params_out:
        write_atomically(a.params_out, blob)
        print(f"train_cnn: final parameters and buffers written to {a.params_out}")


# ------------------------------------------------------------------------------------------
# ftrt, through the high-level API (ftrt.pytorch.FaultTolerant)
# ------------------------------------------------------------------------------------------

def train_step(torch: Any, model: Any, opt: Any, x: Any, y: Any) -> Any:
    """Forward and backward of one minibatch (gradients averaged by the backend's hooks)."""
    opt.zero_grad(set_to_none=False)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss


def ftrt_loop(torch: Any, ft: Any, a: argparse.Namespace, data: Data) -> Tuple[Optional[float],
                                                                                List[float]]:
    """The training loop; returns (logical rank's last loss, step times in seconds)."""
    last_loss, times = None, []
    for step in ft.steps(a.steps):
        t0 = time.perf_counter()
        x, y = data.batch(step, ft.data_rank)  # (a shrink keeps it)
        loss = train_step(torch, ft.model, ft.optimizer, x, y)
        if not ft.step():  # SGD step, buffers broadcast, bookkeeping; False: step redone
            continue
        times.append(time.perf_counter() - t0)
        last_loss = float(loss)
        if ft.rank == 0:
            progress(step, a, last_loss, "logical rank 0")
    return last_loss, times


def main_ftrt(a: argparse.Namespace) -> int:
    """Every process builds the model and joins: the coordinator and an unused spare leave in
    FaultTolerant's constructor (status 0); a hot spare waits there until promoted."""
    import ftrt
    import ftrt.pytorch as ftp
    torch = digits.setup_torch()
    data = Data(torch, a)
    model, opt = build(torch, a)
    ft = ftp.FaultTolerant(model, opt, checkpoint_every=a.ckpt_every,
                           checkpoint_dir=a.ckpt_dir, report=a.report, seed=a.seed,
                           bucket_cap_mb=a.bucket_mb, gradient_as_bucket_view=a.bucket_view,
                           broadcast_buffers=not a.no_broadcast_buffers)
    if ft.rank == 0 and ft.epoch == 0:
        print(f"train_cnn: ftrt, {ft.world_size} trainers, {describe(model, a, data)}, "
              f"{ft.averager.buckets} bucket(s)", flush=True)
    try:
        last_loss, times = ftrt_loop(torch, ft, a, data)
    except ftrt.FtrtError as e:
        print(f"train_cnn: {e} (logical rank {ft.rank}, epoch {ft.epoch})", file=sys.stderr,
              flush=True)
        ft.close()
        return 1
    if ft.rank == 0:  # the job is over (ft closed itself after the last step)
        finish(torch, a, model, data, last_loss, times)
    return 0


# ------------------------------------------------------------------------------------------
# torch.distributed gloo DDP (the comparison)
# ------------------------------------------------------------------------------------------

def gloo_init(a: argparse.Namespace) -> Tuple[int, int]:
    """torch.distributed over gloo; (rank, world size) from Open MPI's environment."""
    import datetime
    import torch.distributed as dist
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://{a.master_addr}:{a.master_port}",
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    return rank, world


def main_gloo(a: argparse.Namespace) -> int:
    """The same model, data and seed under DistributedDataParallel over gloo."""
    torch = digits.setup_torch()
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    data = Data(torch, a)
    rank, world = gloo_init(a)
    model, opt = build(torch, a)
    ddp = DDP(model, bucket_cap_mb=a.bucket_mb, gradient_as_bucket_view=a.bucket_view,
              broadcast_buffers=not a.no_broadcast_buffers)
    if rank == 0:
        print(f"train_cnn: gloo DDP, {world} ranks, {describe(model, a, data)}", flush=True)
    last_loss, times = None, []
    for step in range(a.steps):
        t0 = time.perf_counter()
        x, y = data.batch(step, rank)
        loss = train_step(torch, ddp, opt, x, y)  # DDP allreduces the buckets in backward
        opt.step()
        times.append(time.perf_counter() - t0)
        last_loss = float(loss)
        if rank == 0:
            progress(step, a, last_loss, "rank 0")
    if rank == 0:
        finish(torch, a, model, data, last_loss, times)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv: List[str]) -> int:
    """Runs the job of this process under --backend."""
    a = parse_args(argv)
    return main_gloo(a) if a.backend == "gloo" else main_ftrt(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
