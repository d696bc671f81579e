"""A mixed-precision FaultTolerant job for test_mpi_bf16.py (issue 21): an MLP whose body is
bfloat16 (model.to(torch.bfloat16)) and whose head stays float32, run under
torch.autocast("cpu", dtype=torch.bfloat16), so GradAverager makes two bucketers: the body's
gradients are reduced in bfloat16, the head's (float32 parameters: autocast computes in
bfloat16 but the gradients stay float32) in float32.

Usage: bf16_ft_prog.py OUT_DIR --steps S [--sleep-ms MS] [--device cuda] [--scaler].
--device cuda: the model on CUDA device 0 with libftrt_gpu (FTRT_LIB; NCCL's ncclBfloat16, the
16-bit unpack kernels), autocast("cuda", bfloat16), deterministic algorithms
(CUBLAS_WORKSPACE_CONFIG as PyTorch documents); exits 77 without a CUDA device or libftrt_gpu.
--scaler: a float32 model (no bfloat16 body) under float16 autocast with
torch.cuda.amp.GradScaler: scaler.scale(loss).backward(), scaler.unscale_(opt) before
ft.step() (FaultTolerant's scaler handling; on the CPU torch 1.13 disables the scaler, which
then passes everything through: a rehearsal only). Each trainer writes, per step and in
parameter order, its local gradient (autograd.grad, p.grad untouched) and the averaged p.grad
after ft.step(), as float32 (bfloat16 widens exactly), to OUT_DIR/grads-rank<r>.f32
(r: logical rank; a promoted spare rewrites the steps from its resume step; the mean is
p.grad as backward() returns: FaultTolerant ends the averaging there); logical rank 0
writes the parameters' final bytes (in their own dtypes) to OUT_DIR/final.params and the
parameters' dtypes and sizes to OUT_DIR/meta.json. Exits 1 on a check that fails here: the
bucketers' dtypes, the gradients' dtypes."""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))

import torch  # noqa: E402

import ftrt  # noqa: E402
import ftrt.pytorch as ftp  # noqa: E402


A = argparse.Namespace(device="cpu", scaler=False)  # set by main()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(12, 48), torch.nn.GELU(),
                                        torch.nn.Linear(48, 48), torch.nn.GELU())
        self.head = torch.nn.Linear(48, 5)

    def forward(self, x):
        return self.head(self.body(x.to(self.body[0].weight.dtype)))


def build():
    torch.manual_seed(11)
    model = Net()
    if not A.scaler:
        model.body.to(torch.bfloat16)  # the head stays float32
    model.to(A.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, opt


def batch(step, rank):
    g = torch.Generator().manual_seed(7919 * step + rank)
    x, y = torch.randn(16, 12, generator=g), torch.randint(0, 5, (16,), generator=g)
    return x.to(A.device), y.to(A.device)


def loss_of(model, x, y, scaler=None):
    kind = "cuda" if A.device == "cuda" else "cpu"
    dt = torch.float16 if A.scaler and kind == "cuda" else torch.bfloat16
    with torch.autocast(kind, dtype=dt):
        out = model(x)
    loss = torch.nn.functional.cross_entropy(out.float(), y)
    return scaler.scale(loss) if scaler is not None else loss


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--sleep-ms", type=float, default=0.0)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--scaler", action="store_true")
    a = ap.parse_args(argv)
    A.device, A.scaler = a.device, a.scaler
    torch.set_num_threads(1)
    if a.device == "cuda":
        if not torch.cuda.is_available() or not ftrt.has_gpu_plane():
            print(f"skipped: torch.cuda.is_available()={torch.cuda.is_available()}, "
                  f"libftrt_gpu loaded={ftrt.has_gpu_plane()}", flush=True)
            return 77
        torch.cuda.set_device(0)
        torch.use_deterministic_algorithms(True)
    model, opt = build()
    params = list(model.parameters())
    scaler = torch.cuda.amp.GradScaler(init_scale=1024.0) if a.scaler else None
    ft = ftp.FaultTolerant(model, opt, seed=3, flops_per_step=0, verbose=False, scaler=scaler)
    dts = [b.dtype for b in ft.averager.bucketers]
    want = [ftrt.FLOAT32] if a.scaler else [ftrt.FLOAT32, ftrt.BFLOAT16]
    if dts != want:  # the head's gradients come first in backward
        print(f"bf16_ft_prog: bucketer dtypes {dts}", file=sys.stderr)
        return 1
    n = sum(p.numel() for p in params)
    fd = os.open(os.path.join(a.out, f"grads-rank{ft.rank}.f32"), os.O_WRONLY | os.O_CREAT, 0o644)
    for step in ft.steps(a.steps):
        x, y = batch(step, ft.rank)
        local = torch.autograd.grad(loss_of(model, x, y, scaler), params)  # scaled, as p.grad
        opt.zero_grad(set_to_none=False)
        loss_of(model, x, y, scaler).backward()
        if any(p.grad.dtype != p.dtype for p in params):
            print("bf16_ft_prog: a gradient's dtype is not its parameter's", file=sys.stderr)
            return 1
        avg = [p.grad.clone() for p in params]  # the mean, as backward() ended it
        synced = ft.averager.synced
        if scaler is not None:
            scaler.unscale_(opt)  # before step(), as for clipping: redone after a recovery
        if not ft.step():
            continue
        if not synced:
            print(f"bf16_ft_prog: step {step}: backward() did not end the averaging",
                  file=sys.stderr)
            return 1
        flat = torch.cat([t.float().reshape(-1) for t in list(local) + avg]).cpu()
        os.pwrite(fd, flat.numpy().astype("<f4").tobytes(), step * 2 * n * 4)
        if a.sleep_ms:
            time.sleep(a.sleep_ms / 1e3)
    os.close(fd)
    if ft.rank == 0:
        raw = b"".join(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
                       for p in params)
        with open(os.path.join(a.out, "final.params"), "wb") as f:
            f.write(raw)
        with open(os.path.join(a.out, "meta.json"), "w") as f:
            json.dump({"dtypes": [str(p.dtype) for p in params],
                       "numels": [p.numel() for p in params],
                       "world_size": ft.world_size}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
