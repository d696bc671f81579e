#!/usr/bin/python3
"""train_torch.py - data-parallel PyTorch training on the UCI handwritten digits, kept alive
through rank failures by ftrt (through its high-level PyTorch API, ftrt.pytorch.FaultTolerant),
or with torch.distributed's gloo DDP for comparison.

    # ftrt: world rank 0 coordinator, 1..4 trainers, 5 hot spare
    tools/ftrt-run -- mpirun --enable-recovery --oversubscribe --bind-to none \\
        --mca mpi_yield_when_idle 1 -np 6 /usr/bin/python3 examples/train_torch.py \\
        --ckpt-dir ckpt --report r.json --params-out ftrt.params
    # the same model, data and seed under torch.distributed (gloo DDP), 4 processes
    mpirun --oversubscribe --bind-to none -np 4 /usr/bin/python3 examples/train_torch.py \\
        --backend gloo --params-out gloo.params

Model: an MLP 64 -> H (ReLU) [-> H (ReLU)] x (layers - 1) -> 10, cross-entropy (mean over
the local minibatch; gradients are averaged over the trainers, so the loss is the global mean),
SGD with momentum. Initial weights from torch.manual_seed(seed) (nn.Linear's default init).

Data and determinism: the same train/test split as examples/train_mlp (digits.c: Fisher-Yates
shuffle driven by splitmix64 seeded with a fixed constant, 20% held out) and the same
minibatch rule: logical rank r's minibatch at step s is `batch` indices drawn by a splitmix64
generator seeded with a hash of (seed, s, r). torch runs with one thread and deterministic
algorithms, so a trainer's local gradient is a pure function of (parameters, seed, step,
rank); ftrt's bucketed allreduce is bitwise deterministic for a fixed number of trainers, so a
run that survives a killed trainer ends with byte-identical parameters to an undisturbed one.

Parity instrumentation: --dump-grads DIR writes, for every step, each rank's local gradient
and the averaged gradient the optimizer used (both flattened in parameter order, float32) to
DIR/grads-rank<r>.f32 at offset step * 2 * n * 4 (a redone step overwrites its record).
"""
import gzip
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
sys.path.insert(1, HERE)  # examples/example_args.py, also when loaded from another directory
import example_args  # noqa: E402

DATA_DEFAULT = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
DIGITS_DATA_ENV = "DIGITS_DATA"  # examples/digits.h: the data set's path when --data is not given


def default_data():
    """The --data default, as examples/train_mlp takes it: $DIGITS_DATA when set and not
    empty (the GPU kit's copy, scripts/gpu-kit.sh), else Debian's python3-sklearn file."""
    env = os.environ.get(DIGITS_DATA_ENV)
    return env if env else DATA_DEFAULT
SPLIT_SEED = 0x6469676974735F31  # examples/train_mlp.c: the split never depends on --seed
TEST_FRACTION = 0.2
PROGRESS_EVERY = 100
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


# ------------------------------------------------------------------------------------------
# Data: the digits CSV, the split and the minibatch rule of examples/train_mlp (mlp_model.c)
# ------------------------------------------------------------------------------------------

def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def load_digits(path):
    """Returns (x float32 [n, 64] in [0, 1] = pixel / 16, y int64 [n]) as numpy arrays."""
    import numpy as np
    with gzip.open(path, "rt") as f:
        raw = np.loadtxt(f, delimiter=",", dtype=np.float64)
    if raw.ndim != 2 or raw.shape[1] != 65:
        raise ValueError(f"{path}: expected 65 comma-separated values per line")
    x = (raw[:, :64].astype(np.float32) / np.float32(16.0)).astype(np.float32)
    y = raw[:, 64].astype(np.int64)
    return x, y


def split(x, y):
    """digits_split(): (train_x, train_y, test_x, test_y)."""
    n = len(y)
    perm = list(range(n))
    state = SPLIT_SEED
    for i in range(n - 1, 0, -1):
        state = (state + GOLDEN) & M64
        r = mix64(state) >> 32
        j = (r * (i + 1)) >> 32
        perm[i], perm[j] = perm[j], perm[i]
    n_test = int(TEST_FRACTION * n + 0.5)
    te, tr = perm[:n_test], perm[n_test:]
    return x[tr], y[tr], x[te], y[te]


def minibatch_indices(seed, step, rank, n_train, batch):
    """mlp_model.c's minibatch_indices(): `batch` indices in [0, n_train), with replacement."""
    s = mix64((seed ^ 0x6D696E6962617463) & M64)
    s = mix64(s ^ (step & M64))
    s = mix64((s + GOLDEN * ((rank & 0xFFFFFFFF) + 1)) & M64)
    out = []
    for _ in range(batch):
        s = (s + GOLDEN) & M64
        out.append(((mix64(s) >> 32) * n_train) >> 32)
    return out


# ------------------------------------------------------------------------------------------
# Options
# ------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = example_args.Parser(
        description="Data-parallel PyTorch MLP on the UCI digits, fault tolerant via ftrt "
                    "(or torch.distributed gloo DDP with --backend gloo).")
    ap.add_argument("--backend", choices=["ftrt", "gloo"], default="ftrt")
    ap.add_argument("--steps", type=int, default=300, help="optimizer steps (300)")
    ap.add_argument("--batch", type=int, default=32, help="minibatch per trainer (32)")
    ap.add_argument("--hidden", type=int, default=64, help="hidden units per layer (64)")
    ap.add_argument("--layers", type=int, default=1, help="hidden layers (1)")
    ap.add_argument("--lr", type=float, default=0.05, help="learning rate (0.05)")
    ap.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (0.9)")
    ap.add_argument("--seed", type=int, default=1, help="weights and minibatches (1)")
    ap.add_argument("--ckpt-every", type=int, default=50, help="checkpoint every K steps, "
                    "0 = never (50; ftrt only)")
    ap.add_argument("--ckpt-dir", help="checkpoint directory (ftrt default: FTRT_CKPT_DIR "
                    "or ftrt-ckpt)")
    ap.add_argument("--report", help="JSON report of the job (ftrt; written by the "
                    "coordinator)")
    ap.add_argument("--params-out", help="final parameters, raw little-endian float32 in "
                    "parameter order, written by logical rank 0")
    ap.add_argument("--data", default=default_data(), help="digits CSV (gzip); default "
                    f"${DIGITS_DATA_ENV} if set, else {DATA_DEFAULT}")
    ap.add_argument("--step-sleep-ms", type=float, default=0, help="sleep after each step")
    ap.add_argument("--dump-grads", metavar="DIR", help="per-step local and averaged "
                    "gradients (see the module docstring)")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="bucket size, MiB (25, "
                    "DDP's bucket_cap_mb; both backends)")
    ap.add_argument("--bucket-view", action="store_true", help="gradients as views of their "
                    "buckets (gradient_as_bucket_view, both backends): reduced in place, no "
                    "copies; ftrt's logical rank 0 prints the bytes its bucketer packed")
    ap.add_argument("--warmup-steps", type=int, default=5, help="steps left out of the "
                    "step-time figure (5)")
    ap.add_argument("--master-addr", default=os.environ.get("MASTER_ADDR", "127.0.0.1"),
                    help="gloo rendezvous address (MASTER_ADDR or 127.0.0.1)")
    ap.add_argument("--master-port", type=int, default=int(os.environ.get("MASTER_PORT",
                    "29511")), help="gloo rendezvous port (MASTER_PORT or 29511)")
    a = ap.parse_args(argv)
    for name in ("steps", "batch", "hidden", "layers"):
        if getattr(a, name) < (0 if name == "steps" else 1):
            ap.error(f"--{name.replace('_', '-')}: out of range")
    if not (a.lr > 0 and math.isfinite(a.lr)) or not (0 <= a.momentum < 1):
        ap.error("--lr must be > 0 and --momentum in [0, 1)")
    if a.ckpt_every < 0 or a.step_sleep_ms < 0 or a.bucket_mb <= 0:
        ap.error("--ckpt-every, --step-sleep-ms must be >= 0 and --bucket-mb > 0")
    example_args.check_paths(ap, a, dirs=("ckpt_dir", "dump_grads"),
                             outputs=("report", "params_out"), inputs=("data",))
    return a


# ------------------------------------------------------------------------------------------
# The model and one training step (shared by both backends)
# ------------------------------------------------------------------------------------------

def setup_torch():
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    return torch


def build(torch, a):
    """The model and its optimizer, from a.seed; optimizer state created (zeros)."""
    from ftrt.pytorch import init_optimizer_state
    nn = torch.nn
    torch.manual_seed(a.seed)
    layers, width = [], 64
    for _ in range(a.layers):
        layers += [nn.Linear(width, a.hidden), nn.ReLU()]
        width = a.hidden
    layers.append(nn.Linear(width, 10))
    model = nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    init_optimizer_state(opt)
    return model, opt


class Data:
    def __init__(self, torch, a):
        x, y = load_digits(a.data)
        trx, try_, tex, tey = split(x, y)
        self.train_x, self.train_y = torch.from_numpy(trx), torch.from_numpy(try_)
        self.test_x, self.test_y = torch.from_numpy(tex), torch.from_numpy(tey)
        self.a = a

    def batch(self, torch, step, rank):
        idx = torch.tensor(minibatch_indices(self.a.seed, step, rank, len(self.train_y),
                                             self.a.batch), dtype=torch.int64)
        return self.train_x[idx], self.train_y[idx]


class GradDump:
    """--dump-grads: (local, averaged) gradients per step, in parameter order."""

    def __init__(self, torch, a, rank, params):
        self.torch, self.params = torch, list(params)
        self.n = sum(p.numel() for p in self.params)
        os.makedirs(a.dump_grads, exist_ok=True)
        self.fd = os.open(os.path.join(a.dump_grads, f"grads-rank{rank}.f32"),
                          os.O_WRONLY | os.O_CREAT, 0o644)

    def local(self, module, x, y):
        """The local gradient at the current parameters (autograd.grad: p.grad untouched)."""
        torch = self.torch
        loss = torch.nn.functional.cross_entropy(module(x), y)
        g = torch.autograd.grad(loss, self.params)
        return torch.cat([t.reshape(-1) for t in g])

    def write(self, step, local):
        avg = self.torch.cat([p.grad.reshape(-1) for p in self.params])
        data = local.numpy().astype("<f4").tobytes() + avg.numpy().astype("<f4").tobytes()
        os.pwrite(self.fd, data, step * 2 * self.n * 4)


def flat_params(torch, model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def finish(torch, a, model, data, last_loss, size, tag):
    """Logical rank 0: test accuracy, parameter hash, --params-out."""
    with torch.no_grad():
        pred = model(data.test_x).argmax(dim=1)
    correct = int((pred == data.test_y).sum())
    flat = flat_params(torch, model).numpy().astype("<f4").tobytes()
    if last_loss is None:
        print("final train loss: n/a (no step ran in this process)")
    else:
        print(f"final train loss: {last_loss:.4f} (last step, mean over {size} trainers x "
              f"{a.batch})")
    n = len(data.test_y)
    print(f"test accuracy: {correct / n:.4f} ({correct}/{n})")
    if len(flat) <= 4 << 20:  # a pure-Python hash: about 0.5 s per MiB
        print(f"params fnv1a64: {fnv1a64(flat):016x}")
    sys.stdout.flush()
    if a.params_out:
        tmp = f"{a.params_out}.tmp.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(flat)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, a.params_out)
        print(f"{tag}: final parameters written to {a.params_out}")


def report_step_times(times, a, tag):
    kept = times[a.warmup_steps:] if len(times) > a.warmup_steps else times
    if kept:
        print(f"{tag}: step_time_ms median={statistics.median(kept) * 1e3:.3f} "
              f"mean={statistics.fmean(kept) * 1e3:.3f} steps={len(kept)}")


# ------------------------------------------------------------------------------------------
# ftrt, through the high-level API (ftrt.pytorch.FaultTolerant)
# ------------------------------------------------------------------------------------------

def main_ftrt(a):
    """Every process builds the model and joins: FaultTolerant's constructor is where the
    coordinator and an unused spare exit (status 0), and where a hot spare waits, model
    built, until it takes a dead trainer's place."""
    import ftrt
    import ftrt.pytorch as ftp
    torch = setup_torch()
    F = torch.nn.functional
    data = Data(torch, a)
    model, opt = build(torch, a)
    nparams = sum(p.numel() for p in model.parameters())
    ft = ftp.FaultTolerant(model, opt, checkpoint_every=a.ckpt_every,
                           checkpoint_dir=a.ckpt_dir, report=a.report, seed=a.seed,
                           bucket_cap_mb=a.bucket_mb,  # FLOPs and peak for eMFU: found
                           gradient_as_bucket_view=a.bucket_view)
    if ft.rank == 0 and ft.epoch == 0:
        print(f"train_torch: ftrt, {ft.world_size} trainers, {a.layers} x {a.hidden} hidden "
              f"({nparams} parameters), {ft.averager.buckets} bucket(s), batch {a.batch} per "
              f"trainer, {a.steps} steps, lr {a.lr:g}, momentum {a.momentum:g}, seed {a.seed}, "
              f"{len(data.train_y)} train / {len(data.test_y)} test images", flush=True)
    dump = GradDump(torch, a, ft.rank, model.parameters()) if a.dump_grads else None
    last_loss, times = None, []
    try:
        for step in ft.steps(a.steps):
            t0 = time.perf_counter()
            x, y = data.batch(torch, step, ft.data_rank)  # (a shrink keeps it)
            local = dump.local(model, x, y) if dump else None
            opt.zero_grad(set_to_none=False)
            loss = F.cross_entropy(model(x), y)
            loss.backward()          # buckets' allreduces start from the hooks; p.grad = mean
            if not ft.step():        # SGD step + bookkeeping; False: recovered, step redone
                continue
            if dump:
                dump.write(step, local)
            times.append(time.perf_counter() - t0)
            last_loss = float(loss)  # this rank's; the logged loss is logical rank 0's
            if ft.rank == 0 and ((step + 1) % PROGRESS_EVERY == 0 or step + 1 == a.steps):
                print(f"step {step + 1}/{a.steps}  loss {last_loss:.4f} (logical rank 0)",
                      flush=True)
            if a.step_sleep_ms:
                time.sleep(a.step_sleep_ms / 1e3)
    except ftrt.FtrtError as e:
        print(f"train_torch: {e} (logical rank {ft.rank}, epoch {ft.epoch})", file=sys.stderr,
              flush=True)
        ft.close()
        return 1
    if ft.rank == 0:  # the job is over (ft closed itself after the last step)
        if a.bucket_view:
            print(f"train_torch: bucketer packed {ft.averager.packed_bytes} bytes")
        report_step_times(times, a, "train_torch")
        finish(torch, a, model, data, last_loss, ft.world_size, "train_torch")
    return 0

# ------------------------------------------------------------------------------------------
# torch.distributed gloo DDP (the comparison)
# ------------------------------------------------------------------------------------------

def main_gloo(a):
    import datetime
    torch = setup_torch()
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    F = torch.nn.functional
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    data = Data(torch, a)
    dist.init_process_group("gloo", init_method=f"tcp://{a.master_addr}:{a.master_port}",
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    model, opt = build(torch, a)
    ddp = DDP(model, bucket_cap_mb=a.bucket_mb, gradient_as_bucket_view=a.bucket_view)
    nparams = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"train_torch: gloo DDP, {world} ranks, {a.layers} x {a.hidden} hidden "
              f"({nparams} parameters), batch {a.batch} per rank, {a.steps} steps, lr {a.lr:g}, "
              f"momentum {a.momentum:g}, seed {a.seed}, {len(data.train_y)} train / "
              f"{len(data.test_y)} test images", flush=True)
    dump = GradDump(torch, a, rank, model.parameters()) if a.dump_grads else None
    last_loss, times = None, []
    for step in range(a.steps):
        t0 = time.perf_counter()
        x, y = data.batch(torch, step, rank)
        local = dump.local(model, x, y) if dump else None
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()                  # DDP allreduces the buckets during backward
        if dump:
            dump.write(step, local)
        opt.step()
        times.append(time.perf_counter() - t0)
        last_loss = float(loss)
        if rank == 0 and ((step + 1) % PROGRESS_EVERY == 0 or step + 1 == a.steps):
            print(f"step {step + 1}/{a.steps}  loss {last_loss:.4f} (rank 0)", flush=True)
        if a.step_sleep_ms:
            time.sleep(a.step_sleep_ms / 1e3)
    if rank == 0:
        report_step_times(times, a, "train_torch")
        finish(torch, a, model, data, last_loss, world, "train_torch")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv):
    a = parse_args(argv)
    if a.backend == "gloo":
        return main_gloo(a)
    return main_ftrt(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
