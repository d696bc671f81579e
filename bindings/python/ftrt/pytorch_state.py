"""Registering a PyTorch training state with ftrt, for ftrt.pytorch (which re-exports every
name here): region names, the optimizer's state created before the first step, the
registration of parameters, buffers and optimizer state as regions of their own storage, and
the check that none of them moved.

Regions are the tensors' own storage (data_ptr, numel * element_size): the runtime reads them
in checkpoints and writes them in ftrt_restore()/ftrt_recover() directly, so those tensors
must never be reallocated. Model parameters and buffers are updated in place by torch.optim
and by modules; optimizer state is created lazily by torch.optim at the first step(), so
init_optimizer_state() creates it first (zeros, i.e. the state before any step) and
StateRegistry.verify() checks that no registered tensor moved.
"""
import hashlib
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import Context
from ._lib import REGION_OPTIONAL, REGION_REPLICATED
from .pytorch_layout import LAYOUT_REGION, build_layout, layout_tensor

__all__ = ["region_name", "init_optimizer_state", "StateRegistry", "register_state",
           "register_layout"]

_NAME_MAX = 63  # bytes of a region name (ftrt_register)


def region_name(*parts: Any) -> str:
    """A region name of at most 63 bytes from `parts` joined with ':'; longer names keep their
    first 46 bytes and get a 16-hex-digit hash of the whole name, so they stay unique."""
    name = ":".join(str(p) for p in parts)
    raw = name.encode()
    if len(raw) <= _NAME_MAX:
        return name
    digest = hashlib.sha1(raw).hexdigest()[:16]
    return raw[:46].decode(errors="ignore") + "~" + digest


def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Creates every state tensor of `optimizer` now, with the values it has before the first
    step (zeros: SGD's momentum_buffer, Adam's exp_avg/exp_avg_sq/step, ...), so that they can
    be registered before training. Parameters and their .grad are left exactly as they were.

    How: one optimizer.step() with zero gradients on the parameters that have no state yet
    (the others' gradients are hidden for that call), then the parameters are copied back and
    every state tensor zeroed. Equivalent to torch.optim's lazy initialization for SGD (with
    dampening 0: its first step copies the gradient into the buffer, here 0 * momentum + g),
    Adam, AdamW, RMSprop and Adagrad (state created in its constructor). Raises ValueError when
    the optimizer keeps non-tensor state (it could not be registered)."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    fresh = [p for p in params if len(optimizer.state.get(p, {})) == 0]
    if fresh:
        saved = [(p, p.grad) for p in params]
        data = {p: p.detach().clone() for p in fresh}
        with torch.no_grad():
            for p in params:
                p.grad = torch.zeros_like(p) if p in data else None
            optimizer.step()
            for p, grad in saved:
                if p in data:
                    p.copy_(data[p])
                p.grad = grad
            for p in fresh:
                for v in optimizer.state[p].values():
                    if torch.is_tensor(v):
                        v.zero_()
    bad = sorted({k for p in params for k, v in optimizer.state.get(p, {}).items()
                  if not torch.is_tensor(v)})
    if bad:
        raise ValueError(f"optimizer state {bad} is not held in tensors: it cannot be "
                         f"registered with ftrt (use a torch.optim version that keeps it in "
                         f"tensors, e.g. Adam's tensor 'step' of torch >= 1.12)")


class StateRegistry:
    """The tensors registered by register_state(): entries is a list of (region name, tensor,
    data_ptr at registration, optimizer state owner (param, key) or None); layout_doc is the
    layout record registered as region "py:layout" (ftrt/pytorch_layout.py), b"" without."""

    def __init__(self, optimizer: Optional[torch.optim.Optimizer] = None) -> None:
        self.entries: List[Tuple[str, torch.Tensor, int, Optional[Tuple[torch.Tensor, str]]]] = []
        self.optimizer = optimizer
        self.layout_doc = b""

    def refresh_layout(self) -> None:
        """Writes this job's layout record back into its region after a restore or a recovery
        (which copied the checkpoint's or a survivor's there: of the same size, but it could
        describe other shapes of the same bytes), so the next checkpoint describes this job."""
        for name, t, _, _ in self.entries:
            if name == LAYOUT_REGION and self.layout_doc:
                t.copy_(layout_tensor(self.layout_doc))

    @property
    def nbytes(self) -> int:
        """Total registered bytes."""
        return sum(t.numel() * t.element_size() for _, t, _, _ in self.entries)

    def verify(self) -> None:
        """Raises RuntimeError when a registered tensor's storage moved or an optimizer state
        tensor was replaced by another object: the runtime would then checkpoint and restore
        memory the model no longer uses. Cheap (a pointer compare per region); call it after
        each optimizer step while developing, and after each recovery."""
        for name, t, ptr, owner in self.entries:
            if owner is not None and self.optimizer is not None:
                p, key = owner
                if self.optimizer.state[p].get(key) is not t:
                    raise RuntimeError(f"region {name}: optimizer state {key!r} was replaced "
                                       f"by a new tensor; ftrt still holds the old one")
            if t.data_ptr() != ptr:
                raise RuntimeError(f"region {name}: tensor storage moved from {ptr:#x} to "
                                   f"{t.data_ptr():#x}; registered memory must stay in place")


def register_state(ctx: Context, model: torch.nn.Module,
                   optimizer: Optional[torch.optim.Optimizer] = None,
                   flags: int = REGION_REPLICATED, buffers: bool = True,
                   buffer_flags: Optional[int] = None, layout: bool = True) -> StateRegistry:
    """Registers a model's parameters (and buffers) and an optimizer's state tensors with
    ftrt, as regions of their own storage.

    ctx: a trainer's ftrt.Context.  model: torch.nn.Module.  optimizer: a torch.optim
    optimizer whose state exists (init_optimizer_state()), or None.
    flags: REGION_REPLICATED (default: identical on every trainer, as in data parallelism) or
    REGION_SHARDED; REGION_DEVICE is added for CUDA tensors. buffer_flags: the buffers' flags
    (default: flags); FaultTolerant(broadcast_buffers=False) registers them REGION_SHARDED,
    each trainer's own.
    Regions, in this order (every trainer registers the same): "param:<name>" per
    model.named_parameters(), "buffer:<name>" per floating-point/integer buffer when `buffers`,
    then "optim:<param name>:<state key>" per optimizer parameter and state key (sorted), and
    with `layout` (default) "py:layout", REPLICATED and OPTIONAL: the layout record that lets
    `python3 -m ftrt.ckpt export` name the checkpoint's tensors (ftrt/pytorch_layout.py;
    register_layout(); a checkpoint written before the record existed still restores). Every tensor must be contiguous. Returns a StateRegistry. Raises FtrtError from
    ftrt_register() (FtrtInvalid: duplicate name; FtrtNotSupported: CUDA without a CUDA
    libftrt; FtrtState: not a trainer), ValueError (non-contiguous tensor)."""
    reg = StateRegistry(optimizer)
    names: Dict[torch.Tensor, str] = {}

    def add(name: str, t: torch.Tensor, owner: Optional[Tuple[torch.Tensor, str]] = None,
            fl: int = flags) -> None:
        if not t.is_contiguous():
            raise ValueError(f"{name}: tensor is not contiguous")
        ctx.register(name, t, flags=fl)
        reg.entries.append((name, t, t.data_ptr(), owner))

    for pname, p in model.named_parameters():
        names[p] = pname
        add(region_name("param", pname), p)
    if buffers:
        for bname, b in model.named_buffers():
            if b is not None and b.numel() > 0:
                add(region_name("buffer", bname), b,
                    fl=flags if buffer_flags is None else buffer_flags)
    if optimizer is not None:
        for gi, g in enumerate(optimizer.param_groups):
            for pi, p in enumerate(g["params"]):
                st = optimizer.state.get(p, {})
                for key in sorted(st, key=str):
                    v = st[key]
                    if not torch.is_tensor(v):
                        raise ValueError(f"optimizer state {key!r} is not a tensor "
                                         f"(see init_optimizer_state)")
                    pname = names.get(p, f"g{gi}.{pi}")
                    add(region_name("optim", pname, key), v, (p, key))
    if layout:
        register_layout(ctx, reg, model, optimizer)
    return reg


def register_layout(ctx: Context, reg: StateRegistry, model: torch.nn.Module,
                    optimizer: Optional[torch.optim.Optimizer] = None,
                    zero: Optional[Dict[str, Any]] = None) -> None:
    """Registers the layout record of reg's regions (ftrt/pytorch_layout.py) as region
    "py:layout", REPLICATED and OPTIONAL (FTRT_REGION_OPTIONAL: a checkpoint written before
    the record existed still restores, the record then left as built here), and appends it to
    reg. zero: a ZeroOptimizer's part of the record (ZeroOptimizer.layout_part()), in place of
    `optimizer`'s. Raises FtrtError from ftrt_register()."""
    reg.layout_doc = build_layout(model, optimizer, reg.entries, zero)
    t = layout_tensor(reg.layout_doc)
    ctx.register(LAYOUT_REGION, t, flags=REGION_REPLICATED | REGION_OPTIONAL)
    reg.entries.append((LAYOUT_REGION, t, t.data_ptr(), None))
