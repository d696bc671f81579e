"""A torchvision resnet18 trained through ftrt.pytorch.FaultTolerant, for test_mpi_resnet.py:
the user's job of the BatchNorm and eMFU issue in small (32 x 32 random images, 10 classes, a
few steps), with nothing given for eMFU (FaultTolerant counts the first step's FLOPs and takes
the CPU's peak from libftrt's table) and BatchNorm's running statistics kept by FaultTolerant
(broadcast_buffers). Logical rank 0 prints the "ftrt: eMFU inputs:" line and, with
--params-out, writes the final parameters and buffers (model.state_dict() order, raw bytes) and
prints their FNV-1a hash; every trainer writes its own to FILE.<logical rank>.

Test knobs (logical rank 2 / 1, epoch 0 only, so a promoted spare does not repeat them):
  --hold-at S --hold-file F  logical rank 2 creates F right after its forward pass of step S
                             (BatchNorm's statistics already changed, on every trainer) and
                             then sleeps: the test SIGKILLs it there, mid-step.
  --flip-at S                logical rank 1 flips one bit of layer1.0.bn1.running_var after
                             the optimizer of step S (after the buffers' broadcast, before the
                             step's fingerprint): silent data corruption of a buffer.

Usage: resnet_prog.py --steps S --batch B --report FILE [--params-out FILE] [--no-broadcast]
       [knobs]. Each step's batch is drawn from torch's default generator, which
FaultTolerant reseeds per (seed, logical rank, step)."""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))

import torch  # noqa: E402
import torchvision  # noqa: E402

import ftrt.pytorch as ftp  # noqa: E402


def fnv1a(data: bytes, h: int = 0xCBF29CE484222325) -> int:
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def write_state(model: torch.nn.Module, path: str) -> None:
    """Every tensor of model.state_dict() (parameters and buffers), raw bytes, in order."""
    blob = b"".join(t.detach().contiguous().numpy().tobytes()
                    for t in model.state_dict().values())
    with open(path, "wb") as f:
        f.write(blob)
    if not path.endswith(".0"):
        return
    print(f"resnet_prog: state fnv1a64 {fnv1a(blob[::97]):016x} ({len(blob)} bytes)", flush=True)


def flip_on_step(opt: torch.optim.Optimizer, model: torch.nn.Module, ft_ref: list,
                 at: int) -> None:
    """Wraps opt.step so that logical rank 1 flips bit 20 of the first element of
    layer1.0.bn1.running_var after the optimizer of step `at` (epoch 0)."""
    real = opt.step

    def step(*a, **k):  # type: ignore[no-untyped-def]
        out = real(*a, **k)
        if not ft_ref:  # FaultTolerant's own call, creating the optimizer's state
            return out
        ft = ft_ref[0]
        if ft.rank == 1 and ft.epoch == 0 and ft.step_count == at:
            v = model.layer1[0].bn1.running_var
            bits = v[:1].view(torch.int32)
            bits ^= 1 << 20
            print(f"resnet_prog: logical rank 1 flipped a bit of layer1.0.bn1.running_var "
                  f"at step {at}", flush=True)
        return out
    opt.step = step  # type: ignore[method-assign]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--report", required=True)
    ap.add_argument("--params-out")
    ap.add_argument("--no-broadcast", action="store_true",
                    help="broadcast_buffers=False: each trainer's buffers its own (SHARDED)")
    ap.add_argument("--hold-at", type=int, default=-1)
    ap.add_argument("--hold-file")
    ap.add_argument("--flip-at", type=int, default=-1)
    a = ap.parse_args()
    torch.manual_seed(0)  # the same initial parameters on every trainer
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ft_ref: list = []
    if a.flip_at >= 0:
        flip_on_step(opt, model, ft_ref, a.flip_at)
    ft = ftp.FaultTolerant(model, opt, report=a.report,
                           broadcast_buffers=not a.no_broadcast)
    ft_ref.append(ft)
    for s in ft.steps(a.steps):
        x = torch.randn(a.batch, 3, 32, 32)
        y = torch.randint(0, 10, (a.batch,))
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if s == a.hold_at and ft.rank == 2 and ft.epoch == 0 and a.hold_file:
            open(a.hold_file, "w").close()
            time.sleep(120)  # the test kills this trainer here
        loss.backward()
        ft.step()
    if a.params_out:  # every trainer's (its own buffers with --no-broadcast)
        write_state(model, f"{a.params_out}.{ft.rank}")
    if ft.rank == 0:
        print(f"resnet_prog: {a.steps} steps done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
