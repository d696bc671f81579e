#!/usr/bin/python3
"""train_lm.py - a small character-level transformer language model, trained data-parallel
and kept alive through rank failures by ftrt's high-level PyTorch API
(ftrt.pytorch.FaultTolerant), or by torch.distributed's DDP (gloo on the CPU, NCCL on CUDA)
for comparison; on the CPU (the default) or on CUDA (--device cuda), in float32 or under
bfloat16 autocast (--amp bf16).

    # ftrt: world rank 0 coordinator, 1..4 trainers, 5 hot spare
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FTRT_LIB=build/libftrt.so
    tools/ftrt-run -- mpirun --enable-recovery --oversubscribe --bind-to none \\
        --mca mpi_yield_when_idle 1 -np 6 /usr/bin/python3 examples/train_lm.py \\
        --ckpt-dir ckpt --report r.json --params-out ftrt.params
    # the same model, data, seed and dropout masks under gloo DDP, 4 processes
    mpirun --oversubscribe --bind-to none -np 4 /usr/bin/python3 examples/train_lm.py \\
        --backend gloo --params-out gloo.params
    # on CUDA under bf16 autocast (FTRT_LIB=build-gpu/libftrt_gpu.so), or torch's NCCL DDP
    ... examples/train_lm.py --device cuda --amp bf16 [--backend nccl]

Text: /usr/share/common-licenses/GPL-3 (Debian's base-files, installed on every Debian
system), read as UTF-8; the vocabulary is its sorted set of characters; the last 10% is held
out for the validation loss.

Model: a GPT-style decoder: token and position embeddings, `layers` pre-LayerNorm blocks of
causal multi-head self-attention and a 4x GELU MLP, dropout on the attention weights and on
each residual branch, a final LayerNorm and an output layer tied to the token embedding.
AdamW (weight decay on every parameter), an LR schedule of linear warm-up then cosine decay to
10% (LambdaLR), gradient clipping by global norm.

Gradient accumulation (--accum K): each step runs K micro-batches of `batch` sequences, the
loss of each divided by K; the first K - 1 backward passes run under no_sync() (DDP's and
FaultTolerant's: gradients accumulate locally), the last one averages the sum over the trainers.

Determinism: logical rank r's micro-batch m of step s is `batch` windows of `context` + 1
characters whose offsets are drawn by a torch.Generator seeded with
step_seed(seed + DATA_SALT, r, s * accum + m); dropout draws from torch's default generator, which
FaultTolerant reseeds with step_seed(seed, r, s) at the start of every step (the gloo path
does the same), so every random number of a step is a function of (seed, logical rank, step).
torch runs with one thread and deterministic algorithms (on CUDA also with
CUBLAS_WORKSPACE_CONFIG=:4096:8 unless set, as PyTorch documents for deterministic cuBLAS);
ftrt's allreduce is bitwise deterministic for a fixed number of trainers. A run with a
killed trainer (a hot spare takes its logical rank, the survivors' state is restored into it)
therefore ends byte-identical to an undisturbed one, which tests/python/test_mpi_lm.py checks.

The replicated Python state: the scheduler (stepped by FaultTolerant.step()), the optimizer's
param_groups (the LR the scheduler set) and extra_state {"tokens": global tokens trained on},
restored on recovery and from checkpoints; the end of the run prints them.

CUDA (--device cuda; ftrt needs libftrt_gpu through FTRT_LIB): each process takes GPU
OMPI_COMM_WORLD_LOCAL_RANK (or LOCAL_RANK) modulo the visible GPUs; the text, the model and
AdamW's state live there (the minibatch offsets are still drawn on the CPU, so the data are
those of a CPU run). The step's losses are read on the host only after ft.step() returned:
between backward() and step() the current stream waits for the NCCL buckets, and only step()
aborts them if a trainer died (ftrt.pytorch.FaultTolerant). Exit 77 when torch has no CUDA
device. --amp bf16: forward and loss under torch.autocast(device, bfloat16); parameters,
gradients and AdamW's state stay float32 (the gradients are averaged in float32).

Sharded optimizer state (--zero 1 or 2): AdamW's state is split over the trainers by
ftrt.pytorch.ZeroOptimizer (ZeRO-1; ZeRO-2 also reduce-scatters the gradient instead of
averaging it whole), each trainer keeping 1/N of it in SHARDED regions that partner replicas
hold in memory (set FTRT_SHARD_REPLICA_EVERY=K to refresh them every K steps; by default
they are refreshed at each checkpoint); with --backend gloo, --zero 1 is torch's
ZeroRedundancyOptimizer over DDP, for comparison. Each trainer prints a "state memory:" line
at the end (also with --zero 0 when --print-memory is given). A killed trainer's shard comes back from its partner's memory, and the run ends
byte-identical to an undisturbed run with the same --zero (tests/python/test_mpi_zero.py).

Test knob: FTRT_TEST_LM_KILL=RANK:STEP makes the trainer of logical rank RANK (of the first
epoch; a spare that takes its place is not armed) SIGKILL itself from a gradient hook of the
first block's MLP weight during the backward pass of step STEP, with the later layers'
gradient buckets already posted (tests/python/gpu_lm_prog.py: a kill mid-backward), after
appending the ground truth to FTRT_FAULT_LOG when that is set (the report's MTTD).
"""
import contextlib
import math
import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python"))
sys.path.insert(1, HERE)  # examples/example_args.py, also when loaded from another directory
import example_args  # noqa: E402

TEXT_DEFAULT = "/usr/share/common-licenses/GPL-3"
DATA_SALT = 0x5EED  # the minibatch generator's seed is step_seed(seed + DATA_SALT, r, s)
VAL_FRACTION = 0.1
M64 = (1 << 64) - 1


def parse_args(argv):
    ap = example_args.Parser(
        description="Data-parallel character-level transformer LM on Debian's GPL-3 text, "
                    "fault tolerant via ftrt (or torch.distributed DDP with --backend gloo "
                    "or nccl).")
    ap.add_argument("--backend", choices=["ftrt", "gloo", "nccl"], default="ftrt",
                    help="ftrt (default), or torch DDP over gloo or NCCL (--device cuda)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cpu (default), "
                    "or cuda: the GPU OMPI_COMM_WORLD_LOCAL_RANK modulo the visible GPUs")
    ap.add_argument("--amp", choices=["off", "bf16"], default="off", help="off (float32, "
                    "default) or bf16: forward and loss under torch.autocast bfloat16")
    ap.add_argument("--steps", type=int, default=200, help="optimizer steps (200)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per trainer per "
                    "micro-batch (8)")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per step: gradient "
                    "accumulation, the gradients averaged over the trainers once per step (1)")
    ap.add_argument("--context", type=int, default=64, help="characters per sequence (64)")
    ap.add_argument("--d-model", type=int, default=64, help="model width (64)")
    ap.add_argument("--layers", type=int, default=2, help="transformer blocks (2)")
    ap.add_argument("--heads", type=int, default=4, help="attention heads (4)")
    ap.add_argument("--dropout", type=float, default=0.1, help="dropout probability (0.1)")
    ap.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (3e-3)")
    ap.add_argument("--warmup", type=int, default=30, help="LR warm-up steps (30)")
    ap.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay (0.1)")
    ap.add_argument("--clip", type=float, default=1.0, help="gradient norm clip, 0 = off (1.0)")
    ap.add_argument("--print-memory", action="store_true", help="each trainer prints the "
                    "bytes of its training state at the end (FaultTolerant.memory(); on by "
                    "default with --zero 1 or 2)")
    ap.add_argument("--memory-out", metavar="DIR", help="each trainer also writes its state "
                    "memory line to DIR/memory-<logical rank>.txt (a file, unlike mpirun's "
                    "merged stdout, cannot lose a line)")
    ap.add_argument("--zero", type=int, choices=[0, 1, 2], default=0, help="AdamW's state "
                    "sharded over the trainers: 0 = replicated (default), 1 = ZeRO-1 "
                    "(ftrt.pytorch.ZeroOptimizer; with --backend gloo/nccl torch's "
                    "ZeroRedundancyOptimizer), 2 = ZeRO-2, also the averaged gradient (ftrt "
                    "only)")
    ap.add_argument("--seed", type=int, default=1, help="weights, minibatches, dropout (1)")
    ap.add_argument("--no-step-rng", action="store_true", help="do not reseed torch's "
                    "generator at each step (dropout then depends on the process's history: "
                    "a run with a failure is no longer byte-identical)")
    ap.add_argument("--ckpt-every", type=int, default=50, help="checkpoint every K steps, "
                    "0 = never (50; ftrt only)")
    ap.add_argument("--ckpt-dir", help="checkpoint directory (ftrt default: FTRT_CKPT_DIR or "
                    "ftrt-ckpt)")
    ap.add_argument("--report", help="JSON report of the job (ftrt; written by the "
                    "coordinator)")
    ap.add_argument("--params-out", help="final parameters, raw little-endian float32 in "
                    "parameter order, written by logical rank 0")
    ap.add_argument("--text", default=TEXT_DEFAULT, help=f"training text ({TEXT_DEFAULT})")
    ap.add_argument("--eval-batches", type=int, default=8, help="validation batches at the "
                    "end (8)")
    ap.add_argument("--step-sleep-ms", type=float, default=0, help="sleep after each step")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="bucket size, MiB (25, "
                    "DDP's bucket_cap_mb; both backends)")
    ap.add_argument("--warmup-steps", type=int, default=5, help="steps left out of the "
                    "step-time figure (5)")
    ap.add_argument("--progress-every", type=int, default=50, help="loss line every K steps")
    ap.add_argument("--master-addr", default=os.environ.get("MASTER_ADDR", "127.0.0.1"),
                    help="DDP rendezvous address (MASTER_ADDR or 127.0.0.1)")
    ap.add_argument("--master-port", type=int, default=int(os.environ.get("MASTER_PORT",
                    "29512")), help="DDP rendezvous port (MASTER_PORT or 29512)")
    a = ap.parse_args(argv)
    for name in ("batch", "accum", "context", "d_model", "layers", "heads", "progress_every"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: must be >= 1")
    if a.steps < 0 or a.warmup < 0 or a.ckpt_every < 0 or a.eval_batches < 0:
        ap.error("--steps, --warmup, --ckpt-every, --eval-batches must be >= 0")
    if a.d_model % a.heads:
        ap.error("--d-model must be a multiple of --heads")
    if a.backend == "nccl" and a.device != "cuda":
        ap.error("--backend nccl needs --device cuda")
    if a.zero == 2 and a.backend != "ftrt":
        ap.error("--zero 2 is ftrt's (torch's ZeroRedundancyOptimizer is ZeRO-1)")
    if not (0 <= a.dropout < 1) or not (a.lr > 0 and math.isfinite(a.lr)) or a.clip < 0 \
            or a.weight_decay < 0 or a.step_sleep_ms < 0 or a.bucket_mb <= 0:
        ap.error("out-of-range --dropout, --lr, --clip, --weight-decay, --step-sleep-ms or "
                 "--bucket-mb")
    example_args.check_paths(ap, a, dirs=("ckpt_dir",), outputs=("report", "params_out"),
                             inputs=("text",))
    return a


# ------------------------------------------------------------------------------------------
# Data, model, schedule (shared by both backends)
# ------------------------------------------------------------------------------------------

def setup_torch(a):
    """torch with one thread and deterministic algorithms; on CUDA, the cuBLAS workspace
    setting those need (set before CUDA starts; a value in the environment is kept)."""
    if a.device == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    return torch


def pick_device(torch, a):
    """The torch.device of --device: on CUDA, GPU local rank modulo the visible GPUs, made
    current. None (after a message) when torch has no CUDA device."""
    if a.device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        print(f"train_lm: --device cuda: torch {torch.__version__} has no CUDA device "
              f"(torch.cuda.is_available() is False)", file=sys.stderr, flush=True)
        return None
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("LOCAL_RANK",
                                                                            "0")))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def autocast(torch, a, dev):
    """The forward pass's context: torch.autocast(bfloat16) with --amp bf16, else none."""
    if a.amp == "bf16":
        return torch.autocast(dev.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class Text:
    """The text as int64 character ids; train / validation split; the minibatch rule."""

    def __init__(self, torch, a, dev):
        with open(a.text, encoding="utf-8") as f:
            text = f.read()
        self.chars = sorted(set(text))
        ids = {c: i for i, c in enumerate(self.chars)}
        data = torch.tensor([ids[c] for c in text], dtype=torch.int64).to(dev)
        n_val = int(len(data) * VAL_FRACTION)
        self.train, self.val = data[:-n_val], data[-n_val:]
        if len(self.val) <= a.context + 1 or len(self.train) <= a.context + 1:
            raise SystemExit(f"train_lm: {a.text} is too short for --context {a.context}")
        self.torch, self.a, self.dev = torch, a, dev
        from ftrt.pytorch import step_seed
        self.step_seed = step_seed

    @property
    def vocab(self):
        return len(self.chars)

    def windows(self, data, offsets):
        T = self.a.context
        offsets = offsets.to(self.dev)  # drawn on the CPU on every device: the same data
        idx = offsets[:, None] + self.torch.arange(T + 1, device=self.dev)[None, :]
        w = data[idx]
        return w[:, :-1], w[:, 1:]

    def batch(self, step, rank, micro=0):
        """Logical rank `rank`'s micro-batch `micro` of step `step`: (inputs, targets)
        [batch, context]."""
        g = self.torch.Generator()
        g.manual_seed(self.step_seed(self.a.seed + DATA_SALT, rank, step * self.a.accum + micro))
        off = self.torch.randint(0, len(self.train) - self.a.context - 1, (self.a.batch,),
                                 generator=g)
        return self.windows(self.train, off)

    def val_batches(self):
        """--eval-batches fixed validation batches (evenly spaced windows)."""
        T, B = self.a.context, self.a.batch
        n = self.a.eval_batches * B
        off = self.torch.linspace(0, len(self.val) - T - 2, max(n, 1)).long()[:n]
        return [self.windows(self.val, off[i:i + B]) for i in range(0, n, B)]


def build(torch, a, vocab, dev):
    """The model (initialized on the CPU from a.seed, then moved to `dev`), AdamW (with
    --zero, sharded: ftrt's ZeroOptimizer or torch's ZeroRedundancyOptimizer) and its LambdaLR
    schedule."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = a.d_model
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.attn_drop, self.drop = nn.Dropout(a.dropout), nn.Dropout(a.dropout)

        def forward(self, x, mask):
            B, T, C = x.shape
            H = a.heads
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(mask[:T, :T], float("-inf"))
            att = self.attn_drop(F.softmax(att, dim=-1))
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + self.drop(self.proj(y))
            return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))

    class CharLM(nn.Module):
        def __init__(self):
            super().__init__()
            d = a.d_model
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(a.context, d)
            self.drop = nn.Dropout(a.dropout)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.tok.weight  # tied
            # not a buffer: constant, nothing to checkpoint
            self.mask = torch.ones(a.context, a.context, dtype=torch.bool,
                                   device=dev).triu(1)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def forward(self, idx):
            T = idx.shape[1]
            x = self.drop(self.tok(idx) + self.pos(torch.arange(T, device=idx.device)))
            for b in self.blocks:
                x = b(x, self.mask)
            return self.head(self.ln(x))

    torch.manual_seed(a.seed)
    model = CharLM().to(dev)
    kw = dict(lr=a.lr, betas=(0.9, 0.99), weight_decay=a.weight_decay)
    if a.zero and a.backend == "ftrt":
        from ftrt.pytorch import ZeroOptimizer
        opt = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=a.zero, **kw)
    elif a.zero:  # torch's, over DDP (a process group exists by now)
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                      **kw)
    else:
        opt = torch.optim.AdamW(model.parameters(), **kw)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(a))
    return model, opt, sched


def lr_lambda(a):
    def f(step):  # the multiplier of the peak LR for step `step` (0-based)
        if step < a.warmup:
            return (step + 1) / a.warmup
        t = (step - a.warmup) / max(1, a.steps - a.warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(t, 1.0)))
    return f


def loss_of(torch, a, model, x, y):
    """The mean cross-entropy of `model` on (x, y), the forward pass under --amp's autocast
    (the loss itself is float32 either way)."""
    with autocast(torch, a, x.device):
        logits = model(x)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1))


def forward_backward(torch, a, model, text, step, rank, no_sync):
    """The step's a.accum micro-batches, forward and backward; every backward but the last
    under no_sync() (local accumulation). Returns (the micro-batches' losses, detached
    tensors: step_loss() reads them, after the step; tokens this trainer trained on)."""
    losses, tokens = [], 0
    for m in range(a.accum):
        x, y = text.batch(step, rank, m)
        last = m == a.accum - 1
        with contextlib.nullcontext() if last else no_sync():
            loss = loss_of(torch, a, model, x, y)
            if a.accum > 1:
                loss = loss / a.accum
            loss.backward()  # the last one: p.grad = the mean over the trainers
        losses.append(loss.detach())
        tokens += x.numel()
    return losses, tokens


def step_loss(losses):
    """The step's loss, a float: the sum of its micro-batches' (divided) losses. On CUDA this
    waits for the stream, so the loop calls it only after the optimizer step."""
    loss_sum = 0.0
    for loss in losses:
        loss_sum += float(loss)
    return loss_sum


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def finish(torch, a, model, text, last_loss, tag):
    """Logical rank 0: validation loss, parameter hash, --params-out."""
    model.eval()
    with torch.no_grad():
        vals = [float(loss_of(torch, a, model, x, y)) for x, y in text.val_batches()]
    model.train()
    if last_loss is not None:
        print(f"final train loss: {last_loss:.4f} (last step, logical rank 0's minibatch)")
    if vals:
        v = statistics.fmean(vals)
        print(f"validation loss: {v:.4f} nats/char ({v / math.log(2):.3f} bits/char) over "
              f"{len(vals)} x {a.batch} held-out windows (uniform over {text.vocab} "
              f"characters: {math.log(text.vocab):.3f} nats)")
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    raw = flat.numpy().astype("<f4").tobytes()
    print(f"params fnv1a64: {fnv1a64(raw):016x}")
    sys.stdout.flush()
    if a.params_out:
        tmp = f"{a.params_out}.tmp.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, a.params_out)
        print(f"{tag}: final parameters written to {a.params_out}")


def report_step_times(times, a, tag):
    kept = times[a.warmup_steps:] if len(times) > a.warmup_steps else times
    if kept:
        print(f"{tag}: step_time_ms median={statistics.median(kept) * 1e3:.3f} "
              f"mean={statistics.fmean(kept) * 1e3:.3f} steps={len(kept)}")


def header(a, backend, world, model, text, dev):
    n = sum(p.numel() for p in model.parameters())
    where = ""  # the CPU in float32 says nothing (the line as it was before --device)
    if dev.type != "cpu" or a.amp != "off":
        where = f" on {dev}" + (f" ({torch_device_name(dev)})" if dev.type == "cuda" else "") \
            + (", bfloat16 autocast" if a.amp == "bf16" else ", float32")
    return (f"train_lm: {backend}{where}, {world} trainers, {a.layers} layers x d_model "
            f"{a.d_model} x {a.heads} heads, context {a.context}, vocab {text.vocab} "
            f"({n} parameters), batch {a.batch} per trainer"
            + (f" x {a.accum} micro-batches" if a.accum > 1 else "")
            + f", {a.steps} steps, AdamW lr {a.lr:g} (warm-up "
            f"{a.warmup}, cosine), dropout {a.dropout:g}, seed {a.seed}; "
            f"{len(text.train)} train / {len(text.val)} validation characters of {a.text}")


def torch_device_name(dev):
    """torch.cuda.get_device_name() of a CUDA torch.device (for the header line)."""
    import torch
    return torch.cuda.get_device_name(dev)


def arm_kill(model, ft, step_box):
    """FTRT_TEST_LM_KILL=RANK:STEP (module docstring): on logical rank RANK of the first epoch,
    a gradient hook that SIGKILLs this process in step STEP's backward pass."""
    knob = os.environ.get("FTRT_TEST_LM_KILL", "")
    if not knob:
        return
    try:
        rank, step = (int(v) for v in knob.split(":"))
    except ValueError:
        raise SystemExit(f"train_lm: FTRT_TEST_LM_KILL={knob!r}: expected RANK:STEP")
    if ft.rank != rank or ft.epoch != 0:
        return

    def die(grad):  # on autograd's thread (CUDA: the device thread), mid-backward
        if step_box[0] == step:
            log = os.environ.get("FTRT_FAULT_LOG")
            if log:  # the ground truth the report's MTTD is measured from
                import json
                with open(log, "a") as f:
                    f.write(json.dumps({"time": time.time(), "kind": "sigkill",
                                        "pid": os.getpid(), "world_rank": int(os.environ.get(
                                            "OMPI_COMM_WORLD_RANK", "-1"))}) + "\n")
            os.kill(os.getpid(), signal.SIGKILL)
    model.blocks[0].fc.weight.register_hook(die)


# ------------------------------------------------------------------------------------------
# ftrt: the high-level API
# ------------------------------------------------------------------------------------------

def main_ftrt(a):
    import ftrt
    import ftrt.pytorch as ftp
    torch = setup_torch(a)
    dev = pick_device(torch, a)
    if dev is None:
        return 77
    text = Text(torch, a, dev)
    model, opt, sched = build(torch, a, text.vocab, dev)
    ft = ftp.FaultTolerant(model, opt, scheduler=sched, extra_state={"tokens": 0},
                           seed=a.seed, rng=not a.no_step_rng, checkpoint_every=a.ckpt_every,
                           checkpoint_dir=a.ckpt_dir, report=a.report,
                           bucket_cap_mb=a.bucket_mb)
    if ft.rank == 0 and ft.epoch == 0:
        print(header(a, "ftrt", ft.world_size, model, text, dev), flush=True)
    last_loss, times, at = None, [], [-1]
    arm_kill(model, ft, at)
    try:
        for step in ft.steps(a.steps):            # resumes where a restore/recovery left off
            at[0] = step
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            losses, tokens = forward_backward(torch, a, model, text, step, ft.data_rank,
                                              ft.no_sync)
            if a.clip and a.zero == 2:            # p.grad is local: clipped on the shards
                opt.clip_grad_norm_(a.clip)
            elif a.clip:                          # p.grad holds the mean over the trainers
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            ft.state["tokens"] += tokens * ft.world_size  # before step(): committed with it
            if not ft.step():                     # AdamW, LambdaLR, bookkeeping, checkpoint
                continue                          # recovered: go on at ft.step_count
            last_loss = step_loss(losses)         # (CUDA: waits for the step's kernels)
            times.append(time.perf_counter() - t0)
            if ft.rank == 0 and ((step + 1) % a.progress_every == 0 or step + 1 == a.steps):
                print(f"step {step + 1}/{a.steps}  loss {last_loss:.4f}  lr "
                      f"{sched.get_last_lr()[0]:.3e} (logical rank 0)", flush=True)
            if step + 1 == a.steps and (a.zero or a.print_memory or a.memory_out):
                print_memory(ft, opt, a)          # before steps() ends the job (finalize)
            if a.step_sleep_ms:
                time.sleep(a.step_sleep_ms / 1e3)
    except ftrt.FtrtError as e:
        print(f"train_lm: {e} (logical rank {ft.rank}, epoch {ft.epoch})", file=sys.stderr,
              flush=True)
        ft.close()
        return 1
    if ft.rank == 0:
        print(f"final state: step_count {ft.step_count}, scheduler last_epoch "
              f"{sched.last_epoch}, lr {opt.param_groups[0]['lr']:.6e}, tokens "
              f"{ft.state['tokens']}, recoveries here {ft.recoveries}")
        report_step_times(times, a, "train_lm")
        finish(torch, a, model, text, last_loss, "train_lm")
    return 0


def print_memory(ft, opt, a):
    """One line per trainer, printed at the last step while the job still runs (one such
    line printed after steps() had finalized went missing from mpirun's output once, in CI):
    the bytes of its training state by kind
    (FaultTolerant.memory(); host and device added up), and with --zero its optimizer shard
    against the unsharded optimizer's state (ZeroOptimizer.memory())."""
    m = ft.memory()
    kinds = ("params", "buffers", "optimizer_state", "python_state", "grads", "replica_images")
    parts = ", ".join(f"{k} {m[k + '_host'] + m[k + '_device']} B" for k in kinds)
    line = (f"state memory: logical rank {ft.rank} of {ft.world_size}, zero {a.zero}: {parts}, "
            f"total {sum(m.values())} B")
    if a.zero:
        z = opt.memory()
        line += (f"; optimizer state {z['optimizer_state']} B of an unsharded "
                 f"{z['optimizer_state_replicated']} B "
                 f"({z['optimizer_state'] / z['optimizer_state_replicated']:.3f}x)")
    print(line, flush=True)
    if a.memory_out:                      # written whole, then renamed: never half a line
        os.makedirs(a.memory_out, exist_ok=True)
        path = os.path.join(a.memory_out, f"memory-{ft.rank}.txt")
        with open(path + ".tmp", "w") as f:
            f.write(line + "\n")
        os.replace(path + ".tmp", path)


# ------------------------------------------------------------------------------------------
# torch.distributed DDP (the comparison; gloo, or NCCL on CUDA): the same model, data,
# schedule, dropout masks
# ------------------------------------------------------------------------------------------

def main_ddp(a):
    import datetime
    torch = setup_torch(a)
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ftrt.pytorch import step_seed
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dev = pick_device(torch, a)
    if dev is None:
        return 77
    text = Text(torch, a, dev)
    dist.init_process_group(a.backend, init_method=f"tcp://{a.master_addr}:{a.master_port}",
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    model, opt, sched = build(torch, a, text.vocab, dev)
    ddp = DDP(model, bucket_cap_mb=a.bucket_mb,
              device_ids=[dev.index] if dev.type == "cuda" else None)
    if rank == 0:
        name = {"gloo": "gloo DDP", "nccl": "NCCL DDP"}[a.backend]
        print(header(a, name, world, model, text, dev), flush=True)
    last_loss, times, tokens = None, [], 0
    for step in range(a.steps):
        t0 = time.perf_counter()
        if not a.no_step_rng:  # as FaultTolerant does
            seed = step_seed(a.seed, rank, step)
            torch.default_generator.manual_seed(seed)
            if dev.type == "cuda":
                torch.cuda.manual_seed_all(seed)
        opt.zero_grad(set_to_none=True)
        # DDP allreduces the buckets during the last backward
        losses, n = forward_backward(torch, a, ddp, text, step, rank, ddp.no_sync)
        if a.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        tokens += n * world
        opt.step()
        sched.step()
        last_loss = step_loss(losses)  # (CUDA: waits for the step's kernels)
        times.append(time.perf_counter() - t0)
        if rank == 0 and ((step + 1) % a.progress_every == 0 or step + 1 == a.steps):
            print(f"step {step + 1}/{a.steps}  loss {last_loss:.4f}  lr "
                  f"{sched.get_last_lr()[0]:.3e} (rank 0)", flush=True)
        if a.step_sleep_ms:
            time.sleep(a.step_sleep_ms / 1e3)
    if rank == 0:
        print(f"final state: step_count {a.steps}, scheduler last_epoch {sched.last_epoch}, "
              f"lr {opt.param_groups[0]['lr']:.6e}, tokens {tokens}")
        report_step_times(times, a, "train_lm")
        finish(torch, a, model, text, last_loss, "train_lm")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv):
    a = parse_args(argv)
    if a.backend in ("gloo", "nccl"):
        return main_ddp(a)
    return main_ftrt(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
