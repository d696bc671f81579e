"""A mixed-precision FaultTolerant job for test_mpi_bf16.py (issue 21): an MLP whose body is
bfloat16 (model.to(torch.bfloat16)) and whose head stays float32, run under
torch.autocast("cpu", dtype=torch.bfloat16), so GradAverager makes two bucketers: the body's
gradients are reduced in bfloat16, the head's (float32 parameters: autocast computes in
bfloat16 but the gradients stay float32) in float32.

Usage: bf16_ft_prog.py OUT_DIR --steps S [--sleep-ms MS]. Each trainer writes, per step and in
parameter order, its local gradient (autograd.grad, p.grad untouched) and the averaged p.grad
after ft.step(), as float32 (bfloat16 widens exactly), to OUT_DIR/grads-rank<r>.f32
(r: logical rank; a promoted spare rewrites the steps from its resume step); logical rank 0
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


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(12, 48), torch.nn.GELU(),
                                        torch.nn.Linear(48, 48), torch.nn.GELU())
        self.head = torch.nn.Linear(48, 5)

    def forward(self, x):
        return self.head(self.body(x.to(torch.bfloat16)))


def build():
    torch.manual_seed(11)
    model = Net()
    model.body.to(torch.bfloat16)  # the head stays float32
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, opt


def batch(step, rank):
    g = torch.Generator().manual_seed(7919 * step + rank)
    return torch.randn(16, 12, generator=g), torch.randint(0, 5, (16,), generator=g)


def loss_of(model, x, y):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    return torch.nn.functional.cross_entropy(out.float(), y)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--sleep-ms", type=float, default=0.0)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    model, opt = build()
    params = list(model.parameters())
    ft = ftp.FaultTolerant(model, opt, seed=3, flops_per_step=0, verbose=False)
    dts = [b.dtype for b in ft.averager.bucketers]
    if dts != [ftrt.FLOAT32, ftrt.BFLOAT16]:  # the head's gradients come first in backward
        print(f"bf16_ft_prog: bucketer dtypes {dts}", file=sys.stderr)
        return 1
    n = sum(p.numel() for p in params)
    fd = os.open(os.path.join(a.out, f"grads-rank{ft.rank}.f32"), os.O_WRONLY | os.O_CREAT, 0o644)
    for step in ft.steps(a.steps):
        x, y = batch(step, ft.rank)
        local = torch.autograd.grad(loss_of(model, x, y), params)
        opt.zero_grad(set_to_none=False)
        loss_of(model, x, y).backward()
        if any(p.grad.dtype != p.dtype for p in params):
            print("bf16_ft_prog: a gradient's dtype is not its parameter's", file=sys.stderr)
            return 1
        if not ft.step():
            continue
        avg = [p.grad for p in params]  # the mean (SGD's step leaves p.grad alone)
        flat = torch.cat([t.float().reshape(-1) for t in list(local) + avg])
        os.pwrite(fd, flat.numpy().astype("<f4").tobytes(), step * 2 * n * 4)
        if a.sleep_ms:
            time.sleep(a.sleep_ms / 1e3)
    os.close(fd)
    if ft.rank == 0:
        raw = b"".join(p.detach().contiguous().view(torch.uint8).numpy().tobytes()
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
