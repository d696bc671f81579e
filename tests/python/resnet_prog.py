"""A torchvision resnet18 trained through ftrt.pytorch.FaultTolerant, for test_mpi_resnet.py:
the user's job of the eMFU issue in small (32 x 32 random images, 10 classes, a few steps),
with nothing given for eMFU: FaultTolerant counts the FLOPs of the first step and takes the
CPU's peak from libftrt's table split among the trainers of the host; logical rank 0 prints
the "ftrt: eMFU inputs:" line, the coordinator writes the report (--report).

Usage: resnet_prog.py --steps S --batch B --report FILE. Each step's batch is drawn from
torch's default generator, which FaultTolerant reseeds per (seed, logical rank, step)."""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))

import torch  # noqa: E402
import torchvision  # noqa: E402

import ftrt.pytorch as ftp  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--report", required=True)
    a = ap.parse_args()
    torch.manual_seed(0)  # the same initial parameters on every trainer
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ft = ftp.FaultTolerant(model, opt, report=a.report)
    for _ in ft.steps(a.steps):
        x = torch.randn(a.batch, 3, 32, 32)
        y = torch.randint(0, 10, (a.batch,))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        ft.step()
    if ft.rank == 0:
        print(f"resnet_prog: {a.steps} steps done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
