"""The PyTorch job of test_ckpt_tool.py: a small FaultTolerant job whose checkpoints
`python3 -m ftrt.ckpt` lists, verifies and exports, and which saves its own final state for
comparison.

Model (build()): Linear -> BatchNorm1d (running statistics, num_batches_tracked) -> ReLU ->
Linear, plus a non-persistent buffer (registered with ftrt, absent from state_dict()) and an
empty buffer (in state_dict(), not registered: nothing to store). Optimizer: Adam with two
param groups (weights with weight decay, the rest without), so the export's param_groups
and its state tensors (step, exp_avg, exp_avg_sq) are checked. Scheduler: StepLR. Every
trainer draws its minibatch from a generator seeded with (step, rank).

    mpirun ... python3 ckpt_prog.py --steps 20 --ckpt-every 10 --ckpt-dir D --final F

--final F: logical rank 0 writes torch.save({"model", "optimizer", "scheduler", "step"}) of
the job's state after the last step to F (the checkpoint of that step holds the same).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))

import torch  # noqa: E402

IN, HIDDEN, OUT, BATCH = 8, 16, 4, 16


class Net(torch.nn.Module):
    """The job's model (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(IN, HIDDEN)
        self.bn = torch.nn.BatchNorm1d(HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, OUT)
        self.register_buffer("scale", torch.full((OUT,), 0.5), persistent=False)
        self.register_buffer("empty", torch.zeros(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x)))) * self.scale


def build(seed: int = 3):
    """(model, optimizer, scheduler), the same in every process and in the test."""
    torch.manual_seed(seed)
    model = Net()
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in model.named_parameters() if not n.endswith("weight")]
    opt = torch.optim.Adam([{"params": decay, "weight_decay": 0.01}, {"params": rest}],
                           lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    return model, opt, sched


def batch(step: int, rank: int):
    """(x, y) of logical rank `rank` at step `step`."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(BATCH, IN, generator=g), torch.randint(0, OUT, (BATCH,), generator=g)


def train_step(model, x, y) -> None:
    """forward and backward of one minibatch (the optimizer steps elsewhere)."""
    torch.nn.functional.cross_entropy(model(x), y).backward()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--final", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    import ftrt.pytorch
    model, opt, sched = build()
    ft = ftrt.pytorch.FaultTolerant(model, opt, scheduler=sched, checkpoint_every=a.ckpt_every,
                                    checkpoint_dir=a.ckpt_dir, extra_state={"note": "ckpt"},
                                    flops_per_step=0, verbose=False)
    rank = ft.rank
    for step in ft.steps(a.steps):
        x, y = batch(step, rank)
        opt.zero_grad()
        train_step(model, x, y)
        ft.step()
    if rank == 0:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(), "step": a.steps}, a.final)
    return 0


if __name__ == "__main__":
    sys.exit(main())
