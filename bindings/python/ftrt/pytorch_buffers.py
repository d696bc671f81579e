"""Model buffers under ftrt, for ftrt.pytorch.FaultTolerant: BatchNorm's running statistics
and every other registered buffer, which a module changes in its forward pass, differently on
each trainer (each sees its own batch).

Two policies, DDP's `broadcast_buffers` (torch/nn/parallel/distributed.py, `_sync_buffers`):
 - broadcast (the default): after each step's gradient averaging, logical rank 0's buffers are
   broadcast to every trainer (ftrt_broadcast, one collective of all buffers packed), so that
   every trainer's next forward starts from rank 0's buffers, as under DDP, and the buffers
   are identical on every trainer whenever ftrt looks at them (fingerprints, snapshots,
   checkpoints, recoveries): registered REPLICATED and voted on like the parameters.
 - own (broadcast_buffers=False): each trainer keeps its own buffers, registered SHARDED by
   logical rank: checkpointed per rank, restored per rank, brought into a promoted spare from
   the partner replica, never compared between trainers.

Either way a step that a failure abandons has already changed the buffers in its forward
pass, and ftrt_recover() keeps a survivor's registered memory as it is: so the buffers of the
last completed step are kept (a packed copy) and put back before every recovery.

Modules ftrt cannot keep correct are refused before the job is joined (check_modules):
SyncBatchNorm needs a torch.distributed process group, which an ftrt job does not have.

At the first step of a job run every REPLICATED region is compared between the trainers, one
hash per region (region_mismatches), so that state that is not replicated after all is named
(the region, and what to change) instead of ending in an anonymous silent-data-corruption
alarm at the first fingerprint.
"""
import ctypes
import zlib
from typing import List, Sequence, Tuple

import torch

from . import Context, _lib

__all__ = ["check_modules", "BufferSync", "region_mismatches"]


def check_modules(model: torch.nn.Module) -> None:
    """Raises ValueError naming the first module of `model` that ftrt cannot keep correct:
    torch.nn.SyncBatchNorm (its forward all-reduces statistics over a torch.distributed
    process group, which ftrt does not provide and could not recover). The message says what
    to use instead: plain BatchNorm with broadcast_buffers=True (DDP's behaviour without
    SyncBatchNorm: statistics per trainer's batch, rank 0's running statistics kept), or a
    normalisation without batch statistics (GroupNorm, LayerNorm)."""
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.SyncBatchNorm):
            raise ValueError(
                f"module {name or '<root>'!r} is a torch.nn.SyncBatchNorm: it all-reduces its "
                f"statistics over a torch.distributed process group, which ftrt does not "
                f"provide or recover. Use torch.nn.BatchNorm{{1,2,3}}d instead (ftrt then "
                f"broadcasts logical rank 0's running statistics each step: "
                f"FaultTolerant(broadcast_buffers=True), DDP's default), or GroupNorm / "
                f"LayerNorm, which need no batch statistics across trainers")


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """t's storage seen as uint8 (t contiguous)."""
    return t.detach().reshape(-1).view(torch.uint8)


class BufferSync:
    """The buffers of a model (non-empty, in model.named_buffers() order) and their policy.

    ctx: the trainer's Context. model: the module. broadcast: True for DDP's
    broadcast_buffers (above), False for buffers of each trainer's own.
    Attributes: names (the buffers' names), nbytes (their total bytes). All buffers must be
    contiguous and on one device (ValueError otherwise). Application thread only."""

    def __init__(self, model: torch.nn.Module, broadcast: bool = True) -> None:
        self.broadcast = bool(broadcast)
        items = [(n, b) for n, b in model.named_buffers() if b is not None and b.numel() > 0]
        for n, b in items:
            if not b.is_contiguous():
                raise ValueError(f"buffer {n!r} is not contiguous")
        devices = {b.device for _, b in items}
        if len(devices) > 1:
            raise ValueError(f"the model's buffers are on several devices: {sorted(map(str, devices))}")
        self.names: List[str] = [n for n, _ in items]
        self._bufs: List[torch.Tensor] = [b for _, b in items]
        self.nbytes = sum(_nbytes(b) for b in self._bufs)
        padded = (self.nbytes + 7) // 8 * 8  # broadcast as int64 words: bytes travel as they are
        # the packed buffers travel through host memory (the CPU plane): a few KiB to MiB
        self._flat = torch.zeros(padded, dtype=torch.uint8)
        self._saved = torch.zeros(padded, dtype=torch.uint8)
        self._flat_current = False  # _flat holds the buffers as they are (a sync just ran)

    def _pack(self, into: torch.Tensor) -> None:
        off = 0
        for b in self._bufs:
            n = _nbytes(b)
            into[off:off + n].copy_(_flat_bytes(b))
            off += n

    def _unpack(self, src: torch.Tensor) -> None:
        off = 0
        with torch.no_grad():
            for b in self._bufs:
                n = _nbytes(b)
                _flat_bytes(b).copy_(src[off:off + n])
                off += n

    def sync(self, ctx: Context) -> None:
        """The broadcast of this step (broadcast policy; nothing otherwise): logical rank 0's
        buffers into every trainer's. Collective over the trainers. Raises FtrtRecover (the
        buffers are then unchanged: call restore_last() before recovering) and the errors of
        Context.broadcast()."""
        if not self.broadcast or not self._bufs:
            return
        self._flat_current = False
        self._pack(self._flat)
        ctx.broadcast(self._flat, dtype=_lib.INT64, root=0)
        if ctx.rank != 0:
            self._unpack(self._flat)
        self._flat_current = True

    def keep(self) -> None:
        """Keeps the current buffers as those of the last completed step (after
        ftrt_step_done(), ftrt_restore() and ftrt_recover())."""
        self._pack(self._saved)

    def restore_last(self) -> None:
        """Puts back the buffers kept by keep(): before ftrt_recover(), since the abandoned
        step's forward pass has changed them and recovery keeps a survivor's memory."""
        self._flat_current = False
        self._unpack(self._saved)


def _region_hash(t: torch.Tensor) -> int:
    """A CRC32 of t's bytes (a CUDA tensor is copied to the host first)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    return zlib.crc32(ctypes.string_at(t.data_ptr(), _nbytes(t)))


def region_mismatches(ctx: Context, regions: Sequence[Tuple[str, torch.Tensor]]) -> List[str]:
    """The names of the regions whose bytes differ between the trainers: a CRC32 per region,
    its minimum and maximum over the trainers (two allreduces of len(regions) int64).
    Collective over the trainers, same regions in the same order everywhere. Raises
    FtrtRecover and the errors of Context.allreduce()."""
    if not regions:
        return []
    h = torch.tensor([_region_hash(t) for _, t in regions], dtype=torch.int64)
    lo, hi = h.clone(), h.clone()
    ctx.allreduce(lo, op=_lib.MIN)
    ctx.allreduce(hi, op=_lib.MAX)
    return [name for (name, _), a, b in zip(regions, lo.tolist(), hi.tolist()) if a != b]
