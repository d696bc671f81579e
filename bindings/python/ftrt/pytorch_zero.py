"""ZeRO stages 1 and 2 for ftrt.pytorch: an optimizer whose state is sharded over the trainers
(each keeps and updates 1/N of it), its shards registered as SHARDED regions so that they are
checkpointed per rank and held in memory by partner replicas, and FaultTolerant's driver for it.

The shape follows what users already know. torch's ZeroRedundancyOptimizer
(torch/distributed/optim/zero_redundancy_optimizer.py) wraps an optimizer class:
`ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.Adam, lr=...)`, so does
`ZeroOptimizer(params, optimizer_class=torch.optim.AdamW, stage=1, lr=...)`, and the result
is a torch.optim.Optimizer that LR schedulers and GradScaler take as they are. The partition
is DeepSpeed's (deepspeed/runtime/zero/stage_1_and_2.py), not torch's: the parameters of each
param group are laid end to end in one flat buffer (the model's parameters become views of
it), padded to a multiple of the world size N, and logical rank r owns the r-th contiguous
1/N of it. torch's ZeRO gives whole parameters to ranks (balanced by size, never better than
the largest parameter) and broadcasts each rank's parameters after the step; a flat partition
is balanced to the element and puts the updated parameters back with one all-gather of equal
pieces (ftrt's Context.all_gather), which is what makes its memory exactly 1/N.

Stages (DeepSpeed's numbering):
 - stage=1: gradients are averaged whole as with any optimizer (FaultTolerant's
   GradAverager, allreduce overlapped with backward), so p.grad holds the mean after
   backward() and clip_grad_norm_ works as usual; each trainer copies its slice of the mean
   into its shard's gradient, steps the inner optimizer on the shard, and the shards are
   all-gathered into the parameters. The same as torch's ZeroRedundancyOptimizer over DDP.
 - stage=2: gradients are not averaged in backward(); step() reduce-scatters the flat local
   gradient (Context.reduce_scatter) so that each trainer receives only the mean of its own
   slice (1/N of the averaged-gradient memory), then as stage 1. p.grad stays this
   trainer's local gradient: clip with ZeroOptimizer.clip_grad_norm_(), which clips the mean
   by its global norm (one float64 allreduce of the shards' squared norms) inside step().
   The reduce-scatter runs in step(), after backward() (not overlapped with it).

Element-wise optimizers only (SGD, Adam, AdamW, Adagrad, RMSprop, Adamax, NAdam, RAdam,
ASGD, Adadelta...): an update of one element that reads only that element's gradient and
state is the same on a slice as on the whole. LBFGS (global line search, closures over all
parameters) and SparseAdam (sparse gradients) are refused. Parameters in the flat partition
that have no gradient in a step are updated with a zero gradient (DeepSpeed's flat partitions
do the same; torch.optim would skip them).

Fault tolerance: the parameters stay REPLICATED regions (identical on every trainer after the
all-gather, checked by the first-step comparison and by silent-data-corruption votes); the
inner optimizer's state tensors are SHARDED regions "zero:g<group>:<key>", checkpointed per
rank and copied to the partner replica (FTRT_SHARD_REPLICA_EVERY). The shard of parameters the
inner optimizer steps is not registered: after a restore or a recovery it is cut again from
the restored parameters (reshard()). Silent data corruption: a flip in an owner's optimizer
state or shard is applied by its owner only and then gathered identically everywhere, so the
replica vote cannot see it (docs/pytorch.md, "ZeRO").
"""
import math
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Type

import torch

from . import Context
from ._lib import REGION_SHARDED
from .pytorch_state import init_optimizer_state, region_name

__all__ = ["ZeroOptimizer", "LocalGrads", "REFUSED_OPTIMIZERS", "state_memory"]

REFUSED_OPTIMIZERS = ("LBFGS", "SparseAdam")


class _Group:
    """One param group's flat partition: `flat` [size * per_rank] holds its parameters end
    to end (they are views of it) and zero padding; `shard` [per_rank] is this trainer's
    slice, a leaf tensor the inner optimizer steps; `grad_flat` the stage-2 packing buffer
    (size * chunk elements, chunk <= per_rank: the reduce-scatter runs in pieces)."""

    def __init__(self, params: List[torch.Tensor], rank: int, size: int) -> None:
        dtypes = {p.dtype for p in params}
        devices = {p.device for p in params}
        if len(dtypes) != 1 or len(devices) != 1 or not params[0].is_floating_point():
            raise ValueError(f"ZeroOptimizer: the parameters of one param group must share "
                             f"one floating-point dtype and one device (got {sorted(map(str, dtypes))} on "
                             f"{sorted(map(str, devices))}); put them in separate param groups")
        self.params = params
        self.numel = sum(p.numel() for p in params)
        self.per_rank = max(1, -(-self.numel // size))
        self.lo = rank * self.per_rank
        dt, dev = params[0].dtype, params[0].device
        self.flat = torch.zeros(size * self.per_rank, dtype=dt, device=dev)
        self.offsets: List[int] = []
        off = 0
        with torch.no_grad():
            for p in params:
                self.offsets.append(off)
                view = self.flat[off:off + p.numel()].view_as(p)
                view.copy_(p)
                p.data = view  # the parameter's storage is now the flat buffer
                off += p.numel()
        self.shard = self.flat[self.lo:self.lo + self.per_rank].clone()
        self.shard.grad = torch.zeros_like(self.shard)
        self.grad_flat: Optional[torch.Tensor] = None

    def pieces(self) -> Iterator[Tuple[torch.Tensor, int, int, int]]:
        """(parameter, start in it, start in the shard, length) of every parameter piece that
        falls in this trainer's slice [lo, lo + per_rank)."""
        hi = self.lo + self.per_rank
        for p, off in zip(self.params, self.offsets):
            a, b = max(off, self.lo), min(off + p.numel(), hi)
            if a < b:
                yield p, a - off, a - self.lo, b - a

    def grad_from_mean(self) -> None:
        """Stage 1: the shard's gradient is this trainer's slice of the averaged p.grad."""
        g = self.shard.grad
        g.zero_()
        for p, pa, sa, n in self.pieces():
            if p.grad is not None:
                g[sa:sa + n].copy_(p.grad.reshape(-1)[pa:pa + n])

    def grad_range(self, dst: torch.Tensor, a: int) -> None:
        """Copies the local gradient of flat elements [a, a + len(dst)) into dst (zeros where
        a parameter has no gradient and in the padding)."""
        b = a + dst.numel()
        dst.zero_()
        for p, off in zip(self.params, self.offsets):
            lo, hi = max(off, a), min(off + p.numel(), b)
            if lo < hi and p.grad is not None:
                dst[lo - a:hi - a].copy_(p.grad.reshape(-1)[lo - off:hi - off])

    def pack_local_grads(self, o: int, n: int, size: int) -> torch.Tensor:
        """Stage 2: elements [o, o + n) of every rank's block of the local gradient, block r
        at [r * n, (r + 1) * n) of the packing buffer (the send buffer of a reduce-scatter of
        n elements per rank)."""
        if self.grad_flat is None:
            self.grad_flat = torch.zeros(size * min(self.per_rank, _RS_CHUNK),
                                         dtype=self.flat.dtype)
        gf = self.grad_flat[:size * n]
        for r in range(size):
            self.grad_range(gf[r * n:(r + 1) * n], r * self.per_rank + o)
        return gf

    def reshard(self) -> None:
        with torch.no_grad():
            self.shard.copy_(self.flat[self.lo:self.lo + self.per_rank])


_RS_CHUNK = 1 << 18  # stage 2: elements per rank of one reduce-scatter (1 MiB in float32)


def _host(t: torch.Tensor) -> torch.Tensor:
    return t if t.device.type == "cpu" else t.cpu()


class ZeroOptimizer(torch.optim.Optimizer):
    """An optimizer with its state sharded over ftrt's trainers (ZeRO stage 1, or 2).

        opt = ftrt.pytorch.ZeroOptimizer(model.parameters(), torch.optim.AdamW, lr=3e-3,
                                         weight_decay=0.1)          # stage=1 by default
        sched = torch.optim.lr_scheduler.LambdaLR(opt, f)         # schedulers as usual
        ft = ftrt.pytorch.FaultTolerant(model, opt, scheduler=sched)

    params: parameters or param-group dicts, as for any torch.optim optimizer (each group's
    parameters: one floating-point dtype, one device; the groups' hyperparameters are those
    of optimizer_class with **defaults). optimizer_class: an element-wise torch.optim class
    (module docstring); LBFGS and SparseAdam raise ValueError. stage: 1 (optimizer state
    sharded; gradients averaged whole in backward) or 2 (also the averaged gradient: each
    trainer receives only its slice, by reduce-scatter in step()).

    Nothing is partitioned until bind(ctx), which FaultTolerant calls once the trainer knows
    its logical rank (a hot spare only once promoted): the parameters then become views of one
    flat buffer per group (so they must not be replaced afterwards), and the inner optimizer
    is built on this trainer's slice with its state created (init_optimizer_state). step()
    before bind() raises RuntimeError. param_groups are the outer, full groups: schedulers
    and users change hyperparameters there, and step() copies them to the inner optimizer.

    state_dict() raises NotImplementedError: the state is ftrt's to checkpoint (per rank);
    shard_state_dict() gives this trainer's shard. Thread-safety: the thread that owns ctx.
    """

    def __init__(self, params: Iterable[Any], optimizer_class: Type[torch.optim.Optimizer],
                 *, stage: int = 1, **defaults: Any) -> None:
        if not (isinstance(optimizer_class, type) and
                issubclass(optimizer_class, torch.optim.Optimizer)):
            raise TypeError("optimizer_class must be a torch.optim.Optimizer subclass")
        if optimizer_class.__name__ in REFUSED_OPTIMIZERS:
            raise ValueError(f"ZeroOptimizer: {optimizer_class.__name__} is not element-wise "
                             f"(LBFGS searches over all parameters at once, SparseAdam takes "
                             f"sparse gradients): it cannot run on a slice of the parameters. "
                             f"Use it with FaultTolerant without ZeRO")
        if stage not in (1, 2):
            raise ValueError(f"ZeroOptimizer: stage must be 1 or 2, not {stage!r}")
        probe = optimizer_class([torch.zeros(1, requires_grad=True)], **defaults)
        super().__init__(params, dict(probe.defaults))  # every hyperparameter, in each group
        self.optimizer_class, self.stage = optimizer_class, stage
        self.inner: Optional[torch.optim.Optimizer] = None
        self.ctx: Optional[Context] = None
        self.groups: List[_Group] = []
        self._clip: Optional[float] = None
        self.last_grad_norm: Optional[float] = None

    # -- partition ----------------------------------------------------------------------
    def bind(self, ctx: Context) -> None:
        """Partitions the parameters over ctx's trainers (ctx.rank of ctx.size) and builds the
        inner optimizer on this trainer's slice, its state created. Once only (RuntimeError
        again). Raises ValueError for a group with mixed dtypes or devices."""
        if self.ctx is not None:
            raise RuntimeError("ZeroOptimizer.bind(): already bound")
        rank, size = ctx.rank, ctx.size
        self.groups = [_Group([p for p in g["params"]], rank, size) for g in self.param_groups]
        self.inner = self.optimizer_class(
            [dict(self._hyper(g), params=[grp.shard])
             for g, grp in zip(self.param_groups, self.groups)])
        init_optimizer_state(self.inner)
        self.ctx = ctx

    @staticmethod
    def _hyper(group: Dict[str, Any]) -> Dict[str, Any]:
        return {k: v for k, v in group.items() if k != "params"}

    def register(self, ctx: Context) -> List[str]:
        """Registers every inner optimizer state tensor as a SHARDED region
        "zero:g<group>:<key>" (the same names on every trainer, each its own bytes). Returns
        the names. Raises FtrtError from ftrt_register()."""
        names = []
        for gi, grp in enumerate(self.groups):
            st = self._inner().state[grp.shard]
            for key in sorted(st, key=str):
                t = st[key]
                name = region_name("zero", f"g{gi}", key)
                ctx.register(name, t, flags=REGION_SHARDED)
                names.append(name)
        return names

    def layout_part(self, param_name: Dict[int, str]) -> Dict[str, Any]:
        """This optimizer's part of the checkpoint's layout record (ftrt/pytorch_layout.py,
        "sharded"): {"optimizer": the inner class, its param_groups numbered over this
        optimizer's (names from param_name, id(param) -> name), "state": {}}, "sharded": per
        SHARDED region, how its rank slices make the group's flat state and which elements
        are whose}. The same on every trainer. After bind()."""
        inner = self._inner()
        groups, sharded, index = [], {}, 0
        for gi, grp in enumerate(self.groups):
            ids = list(range(index, index + len(grp.params)))
            index += len(grp.params)
            groups.append({"params": ids,
                           "names": [param_name.get(id(p), f"#{i}")
                                     for i, p in zip(ids, grp.params)]})
            placed = [[i, off, list(p.shape)] for i, p, off in zip(ids, grp.params, grp.offsets)]
            for key, t in sorted(inner.state[grp.shard].items(), key=lambda kv: str(kv[0])):
                sharded[region_name("zero", f"g{gi}", key)] = {
                    "group": gi, "key": str(key), "dtype": str(t.dtype).replace("torch.", ""),
                    "per_rank": grp.per_rank, "scalar": t.numel() != grp.per_rank,
                    "shape": list(t.shape), "params": placed}
        cls = self.optimizer_class
        return {"optimizer": {"class": f"{cls.__module__}.{cls.__qualname__}",
                              "param_groups": groups, "state": {}},
                "sharded": sharded}

    def reshard(self) -> None:
        """Cuts this trainer's shard again from the parameters (after a restore or a recovery
        wrote them)."""
        for grp in self.groups:
            grp.reshard()

    def _inner(self) -> torch.optim.Optimizer:
        if self.inner is None:
            raise RuntimeError("ZeroOptimizer is not bound to a trainer yet: pass it to "
                               "ftrt.pytorch.FaultTolerant (or call bind(ctx))")
        return self.inner

    # -- the step -----------------------------------------------------------------------
    def clip_grad_norm_(self, max_norm: float) -> None:
        """Stage 2 (p.grad is local there): asks the next step() to scale the averaged
        gradient by min(1, max_norm / (norm + 1e-6)), norm its global L2 norm over the
        trainers (float64, one allreduce), as torch.nn.utils.clip_grad_norm_ does on whole
        gradients. Stage 1: p.grad holds the mean; use torch's clip_grad_norm_ instead
        (RuntimeError here)."""
        if self.stage != 2:
            raise RuntimeError("ZeroOptimizer.clip_grad_norm_ is for stage 2: at stage 1 "
                               "p.grad holds the mean, use torch.nn.utils.clip_grad_norm_")
        if not max_norm > 0:
            raise ValueError("max_norm must be > 0")
        self._clip = float(max_norm)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One optimizer step on this trainer's shard, then the shards all-gathered into the
        parameters (every trainer's parameters identical afterwards). Collective: every
        trainer calls it at the same step. Raises FtrtRecover when a trainer failed during
        its collectives (FaultTolerant recovers; the registered state is rewritten whole)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        inner, ctx = self._inner(), self.ctx
        assert ctx is not None
        for g, ig in zip(self.param_groups, inner.param_groups):
            ig.update(self._hyper(g))
        for grp in self.groups:
            if self.stage == 1:
                grp.grad_from_mean()
            else:
                self._reduce_scatter(ctx, grp)
        if self.stage == 2 and self._clip is not None:
            self._apply_clip(ctx)
        inner.step()
        for grp in self.groups:
            self._all_gather(ctx, grp)
        return loss

    def _reduce_scatter(self, ctx: Context, grp: _Group) -> None:
        """Stage 2: the mean of this trainer's slice of the gradient into its shard's
        gradient, in reduce-scatters of at most _RS_CHUNK elements per rank (the packing
        buffer stays small); then every p.grad of the group is released (None): only the
        shard's gradient is kept between steps."""
        g = grp.shard.grad
        for o in range(0, grp.per_rank, _RS_CHUNK):
            n = min(_RS_CHUNK, grp.per_rank - o)
            send = grp.pack_local_grads(o, n, ctx.size)  # host memory
            recv = g[o:o + n] if g.device.type == "cpu" else torch.empty(n, dtype=g.dtype)
            ctx.reduce_scatter(send, recv)
            recv.mul_(1.0 / ctx.size)  # the mean, rounded as the averager rounds it
            if recv.data_ptr() != g[o:].data_ptr():
                g[o:o + n].copy_(recv)
        for p in grp.params:
            p.grad = None

    def _apply_clip(self, ctx: Context) -> None:
        sq = torch.zeros(1, dtype=torch.float64)
        for grp in self.groups:
            sq += _host(grp.shard.grad.double().pow(2).sum()).reshape(1)
        ctx.allreduce(sq)
        norm = math.sqrt(float(sq[0]))
        self.last_grad_norm = norm
        coef = self._clip / (norm + 1e-6)  # type: ignore[operator]
        if coef < 1.0:
            for grp in self.groups:
                grp.shard.grad.mul_(coef)

    def _all_gather(self, ctx: Context, grp: _Group) -> None:
        if grp.flat.device.type == "cpu":
            ctx.all_gather(grp.shard, grp.flat)
            return
        host = torch.empty(grp.flat.numel(), dtype=grp.flat.dtype)
        ctx.all_gather(grp.shard.cpu(), host)
        grp.flat.copy_(host)

    # -- state and memory ---------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        raise NotImplementedError("ZeroOptimizer's state is sharded over the trainers and "
                                  "checkpointed by ftrt per rank; shard_state_dict() gives "
                                  "this trainer's shard")

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        raise NotImplementedError("ZeroOptimizer's state comes back from ftrt's checkpoints "
                                  "and replicas, not from a state_dict")

    def shard_state_dict(self) -> Dict[str, Any]:
        """This trainer's shard: {"rank", "size", "groups": [(numel, per_rank, lo)],
        "inner": the inner optimizer's state_dict()} (tensors are the live ones)."""
        return {"rank": self.ctx.rank if self.ctx else None,
                "size": self.ctx.size if self.ctx else None,
                "groups": [(g.numel, g.per_rank, g.lo) for g in self.groups],
                "inner": self._inner().state_dict()}

    def memory(self) -> Dict[str, int]:
        """Bytes this trainer holds, by kind: "params" (the flat buffers, padding included),
        "shard" (the slice the inner optimizer steps, and its gradient), "optimizer_state"
        (the inner optimizer's state tensors), "optimizer_state_replicated" (what the same
        optimizer would hold unsharded: per-element state bytes x every parameter),
        "grad_flat" (stage 2's packing buffer, N x min(1/N of the group, 2^18) elements),
        "sharded_regions" (bytes registered
        SHARDED: the optimizer state; the partner replica holds as much for its partner)."""
        inner = self._inner()
        st = sum(t.numel() * t.element_size() for grp in self.groups
                 for t in inner.state[grp.shard].values() if torch.is_tensor(t))
        per_elem = sum(t.element_size() for grp in self.groups[:1]
                       for t in inner.state[grp.shard].values()
                       if torch.is_tensor(t) and t.numel() == grp.per_rank)
        scalars = sum(t.numel() * t.element_size() for grp in self.groups
                      for t in inner.state[grp.shard].values()
                      if torch.is_tensor(t) and t.numel() != grp.per_rank)
        esz = lambda t: t.numel() * t.element_size()  # noqa: E731
        return {
            "params": sum(esz(g.flat) for g in self.groups),
            "shard": sum(2 * esz(g.shard) for g in self.groups),
            "optimizer_state": st,
            "optimizer_state_replicated": per_elem * sum(g.numel for g in self.groups) + scalars,
            "grad_flat": sum(esz(g.grad_flat) for g in self.groups if g.grad_flat is not None),
            "sharded_regions": st,
        }


def state_memory(registry_entries: List[Any], sharded: List[torch.Tensor],
                 params: List[torch.Tensor], zero: Optional[ZeroOptimizer],
                 images: bool) -> Dict[str, int]:
    """Bytes one trainer holds for its training state, by kind, host and device apart (what
    FaultTolerant.memory() returns). registry_entries: StateRegistry.entries (the regions
    registered from the model and, without ZeRO, the optimizer); sharded: the tensors of the
    SHARDED regions outside the registry (a ZeroOptimizer's state); params: the model's
    parameters (their .grad counted as gradients); images: partner replicas are refreshed
    (SHARDED regions exist and FTRT_SHARD_REPLICA_EVERY is not -1). Keys, each with
    "_host" and "_device": "params", "buffers", "optimizer_state" (ZeRO: this trainer's
    shard of it), "python_state" (FaultTolerant's pickled state), "other" (regions of other
    names), "grads" (p.grad, plus ZeRO's shard gradient and stage-2 buffer),
    "replica_images" (host memory, whatever the region's device: runtime/replica.c copies
    every region of the trainer into an image of its own, plus the partner's sharded image it
    keeps, as large as its own sharded part)."""
    out: Dict[str, int] = {}

    def add(kind: str, t: Optional[torch.Tensor]) -> None:
        if t is None:
            return
        where = "device" if t.device.type != "cpu" else "host"
        key = f"{kind}_{where}"
        out[key] = out.get(key, 0) + t.numel() * t.element_size()

    kind_of = {"param": "params", "buffer": "buffers", "optim": "optimizer_state",
               "py": "python_state"}
    for name, t, _, _ in registry_entries:
        add(kind_of.get(name.split(":", 1)[0], "other"), t)
    for t in sharded:
        add("optimizer_state", t)
    for p in params:
        add("grads", p.grad)
    if zero is not None:
        for grp in zero.groups:
            add("grads", grp.shard.grad)
            add("grads", grp.grad_flat)
    if images:
        total = sum(t.numel() * t.element_size() for _, t, _, _ in registry_entries) + \
            sum(t.numel() * t.element_size() for t in sharded)
        shard_bytes = sum(t.numel() * t.element_size() for t in sharded)
        out["replica_images_host"] = total + shard_bytes
    for kind in ("params", "buffers", "optimizer_state", "python_state", "other", "grads",
                 "replica_images"):
        for where in ("host", "device"):
            out.setdefault(f"{kind}_{where}", 0)
    return out


class LocalGrads:
    """FaultTolerant's gradient driver for ZeRO stage 2, in GradAverager's place: backward()
    leaves each trainer's local gradient in p.grad (ZeroOptimizer.step() reduce-scatters it),
    so there is nothing to wait for, connect or reset. no_sync() is a no-op context (gradients
    accumulate locally anyway)."""

    sync_in_backward = True

    def wait(self) -> None:
        pass

    def connect(self) -> None:
        pass

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass

    class _Nothing:
        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: Any) -> None:
            return None

    def no_sync(self) -> "LocalGrads._Nothing":
        return LocalGrads._Nothing()
