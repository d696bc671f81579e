"""ftrt: Python binding of libftrt, the fault-tolerant distributed training runtime.

A ctypes binding (no C extension to build) of include/ftrt.h, plus PyTorch helpers in
``ftrt.pytorch``. The training-loop contract is that of the C API (README, "Using ftrt in a
training job"):

    import ftrt
    cfg = ftrt.Config.from_env()                  # ftrt_config_init(): defaults + FTRT_*
    cfg.set_str("ckpt_dir", "/tmp/ckpt")          # application flags win
    ctx = ftrt.init(cfg)                          # collective over MPI_COMM_WORLD
    if not ctx.is_trainer:                        # coordinator, or a spare never needed
        ctx.finalize(); sys.exit(0)
    ctx.register("params", tensor)                # REPLICATED by default
    restored, step = ctx.restore()
    while step < steps:
        try:
            ...compute gradients...; ctx.allreduce(grad)
            ...update...; ctx.step_done(step); step += 1
            if step % every == 0: ctx.checkpoint(step)
        except ftrt.FtrtRecover:
            step = ctx.recover()                  # state restored in place
    ctx.finalize()

Errors: every negative return code is raised as FtrtError (``.code``, ``.name`` from
ftrt_err_name(), ``.message`` from ftrt_strerror()); FTRT_ERECOVER as its subclass
FtrtRecover, FTRT_ENOSPARE as FtrtNoSpare, and so on (ftrt._lib.ERRORS). -errno codes are
plain FtrtError with ``.errno`` set. Any call that needs libftrt loads it on first use and
raises OSError when it cannot be found (ftrt._lib's docstring: FTRT_LIB, the library inside
this package that ``pip install .`` puts there, then the loader, pkg-config, a source tree's
build/).

Buffers: wherever a function takes memory (`buf`), it accepts a contiguous CPU
torch.Tensor, a C-contiguous writable numpy array, a ctypes array or structure, or an int
address together with `nbytes` (register) or `count` and `dtype` (allreduce). The library
uses the memory directly: it must stay at the same address for as long as the C API says
(registered regions: until unregistered or finalize; allreduce_start: until the request is
final); the wrappers keep a reference to the object for that long.

Threads: one application thread per context (the one that called init()), as in the C API.
The module-level functions (version(), strerror(), ...) may be called from any thread.

Public names: ``__all__``. ``FaultTolerant`` is ``ftrt.pytorch.FaultTolerant``, imported on
first use of ``ftrt.FaultTolerant`` (importing ftrt does not import torch; it is not in
``__all__``, so ``from ftrt import *`` does not need torch either). The ctypes internals
(``lib()``, ``load()``, ``check()``, ``error_for()``, ``buffer_of()``, the prototypes) are in
the private module ``ftrt._lib``. The analysis tools (no libftrt needed) are in
``ftrt.analysis``: ``python3 -m ftrt.analysis.project`` and ``python3 -m ftrt.analysis.plot``
(the ``ftrt-project`` and ``ftrt-plot`` scripts of a pip-installed package).
"""
import ctypes
import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from . import _lib
from ._lib import (
    BucketConfig, CkptStats, Config, FtrtAborted, FtrtConfigError, FtrtCoordLost, FtrtCorrupt,
    FtrtCudaError, FtrtError, FtrtInvalid, FtrtMismatch, FtrtMPIError, FtrtNcclError,
    FtrtNoCheckpoint, FtrtNoDevice, FtrtNoSpare, FtrtNotSupported, FtrtProtocol, FtrtRecover,
    FtrtDrained, FtrtJoinRefused, FtrtState, FtrtTimeout, crc32c, err_name, has_gpu_plane,
    last_error, lib_path, strerror,
    version,
    OK, DONE, SKIP_MPI_FINALIZE, SKIPPED,
    ERECOVER, ENOSPARE, ECOORD, EABORT, ECONFIG, ECORRUPT, ENOCKPT, EMISMATCH, EPROTO, EMPI,
    EINVAL, ESTATE, ETIMEDOUT, ENODEV, ECUDA, ENCCL, ENOTSUP, EDRAINED, EJOIN,
    REGION_REPLICATED, REGION_SHARDED, REGION_DEVICE, FLOAT32, FLOAT64, INT64, BFLOAT16, FLOAT16,
    SUM, MIN, MAX,
    CKPT_WAIT, CKPT_SKIP, CKPT_STAT_DIRECT, CKPT_STAT_FIXED, CKPT_STAT_STREAMING,
    NO_SPARE_STOP, NO_SPARE_SHRINK, NO_SPARE_FOLD, SHARD_REPLICA, SHARD_ERASURE,
)
from ._lib import Buffer
from ._lib import ESIZE as _ESIZE, buffer_of as _buffer_of, check as _check
from ._lib import error_for as _error_for, lib as _clib

# ftrt.__version__: this package's version, "major.minor.patch" -- project(VERSION) of the
# top CMakeLists.txt, the number ftrt.h and libftrt carry too (tools/check-version keeps
# ftrt/_version.py equal to it). Importing ftrt does not load libftrt; ftrt.version() is the
# loaded library's (major, minor, patch), and loading it warns when its major differs.
from ._version import __version__

if TYPE_CHECKING:
    from .pytorch import FaultTolerant

__all__ = [
    "__version__", "init", "Context", "Config", "BucketConfig", "CkptStats", "Bucketer",
    "Request",
    "FtrtError", "FtrtRecover", "FtrtNoSpare", "FtrtCoordLost", "FtrtAborted",
    "FtrtConfigError", "FtrtCorrupt", "FtrtNoCheckpoint", "FtrtMismatch", "FtrtProtocol",
    "FtrtMPIError", "FtrtInvalid", "FtrtState", "FtrtTimeout", "FtrtNoDevice", "FtrtCudaError",
    "FtrtNcclError", "FtrtNotSupported", "FtrtDrained", "FtrtJoinRefused",
    "version", "lib_path", "has_gpu_plane", "strerror", "err_name", "last_error", "crc32c",
    "cpu_peak_flops",
    "OK", "DONE", "SKIP_MPI_FINALIZE", "SKIPPED",
    "ERECOVER", "ENOSPARE", "ECOORD", "EABORT", "ECONFIG", "ECORRUPT", "ENOCKPT", "EMISMATCH",
    "EPROTO", "EMPI", "EINVAL", "ESTATE", "ETIMEDOUT", "ENODEV", "ECUDA", "ENCCL", "ENOTSUP",
    "EDRAINED", "EJOIN", "REGION_REPLICATED", "REGION_SHARDED", "REGION_DEVICE", "FLOAT32", "FLOAT64", "INT64",
    "BFLOAT16", "FLOAT16",
    "SUM", "MIN", "MAX", "CKPT_WAIT", "CKPT_SKIP", "CKPT_STAT_DIRECT", "CKPT_STAT_FIXED",
    "CKPT_STAT_STREAMING", "NO_SPARE_STOP", "NO_SPARE_SHRINK", "NO_SPARE_FOLD",
    "SHARD_REPLICA", "SHARD_ERASURE",
]


if not TYPE_CHECKING:  # a type checker sees the import above, and no catch-all __getattr__
    def __getattr__(name: str) -> Any:
        """ftrt.FaultTolerant: imports ftrt.pytorch (and torch) on first use (PEP 562).
        Raises ImportError when torch is missing, AttributeError for any other unknown
        name."""
        if name == "FaultTolerant":
            from .pytorch import FaultTolerant
            return FaultTolerant
        raise AttributeError(f"module 'ftrt' has no attribute {name!r}")


class Request:
    """One overlapped collective (ftrt_request *), from Context.allreduce_start(),
    broadcast_start(), reduce_scatter_start() or all_gather_start().

    The buffer must not be read or written until test() returns True or wait() returns; the
    request keeps a reference to it until then. free() it (or use it as a context manager)
    before Context.finalize(); finalize() also frees requests still alive, waiting for them
    first. Threads: the context's thread only (the one that called init())."""

    def __init__(self, ctx: "Context", handle: Optional[int], keep: Any) -> None:
        self._ctx, self._h, self._keep = ctx, handle, keep

    def test(self) -> bool:
        """True once complete (the result is in the buffer), False while in flight. Never
        blocks. Raises the request's error (FtrtRecover after an epoch change: the buffer is
        unchanged; FtrtNoSpare, FtrtCoordLost, FtrtAborted, FtrtMPIError), FtrtInvalid after
        free()."""
        return _check(_clib().ftrt_request_test(self._h), "ftrt_request_test") == 1

    def wait(self) -> None:
        """Blocks until the request is final; raises its error (the exceptions of test())."""
        _check(_clib().ftrt_request_wait(self._h), "ftrt_request_wait")

    def free(self) -> None:
        """Releases a final request and drops the buffer's reference (idempotent). Raises
        FtrtState while in flight."""
        if self._h:
            _check(_clib().ftrt_request_free(self._h), "ftrt_request_free")
            self._h, self._keep = None, None

    def __enter__(self) -> "Request":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._h:
            _clib().ftrt_request_wait(self._h)
            self.free()


class Bucketer:
    """Gradient buckets (ftrt_bucketer *) over `ntensors` tensors, from Context.bucketer().

    Per step: ready(i, buf) for every tensor as its gradient becomes available (each bucket's
    allreduce starts when its last tensor is ready and every earlier bucket has started), then
    wait_all(): every tensor then holds the mean (or the sum) over the trainers. After an
    FtrtRecover: reset() (waits for started buckets), Context.recover(), redo the step.
    Attributes: counts (elements per tensor), dtype (FLOAT32, FLOAT64, INT64, BFLOAT16 or
    FLOAT16). Threads: the context's thread only, except ready_from_any_thread() (any thread; the context's thread
    applies those posts in its next ready(), drain() or wait_all())."""

    def __init__(self, ctx: "Context", handle: Optional[int], counts: Sequence[int],
                 dtype: int) -> None:
        self._ctx, self._h = ctx, handle
        self.counts: List[int] = list(counts)
        self.dtype = dtype
        self._keep: List[Any] = [None] * len(self.counts)

    @property
    def handle(self) -> Optional[int]:
        """The raw ftrt_bucketer * (int), for direct ctypes calls in hot loops."""
        return self._h

    def ready(self, tensor: int, buf: Buffer) -> None:
        """Marks tensor `tensor` (0-based, registration order) ready at `buf` (counts[tensor]
        elements of the bucketer's dtype; an int address or an object, as in the module
        docstring, "Buffers"). The memory must stay valid and untouched until
        wait_all()/reset() returns (a reference is kept until then). Raises ValueError (too
        small a buffer, non-contiguous), TypeError (no memory), IndexError (bad index),
        FtrtInvalid (already ready this step) or the step's first error (FtrtRecover, ...)."""
        need = self.counts[tensor] * _ESIZE[self.dtype]
        addr, size, _, _ = _buffer_of(buf, None if not isinstance(buf, int) else need)
        if size < need:
            raise ValueError(f"tensor {tensor}: buffer of {size} bytes, {need} needed")
        self._keep[tensor] = buf
        _check(_clib().ftrt_bucketer_ready(self._h, tensor, addr), "ftrt_bucketer_ready")

    def ready_from_any_thread(self, tensor: int, buf: Buffer) -> None:
        """ready() for a thread other than the context's (ftrt_bucketer_ready_from_any_thread):
        posts tensor `tensor` at `buf` and returns at once; the context's thread marks it (and
        starts the allreduces it completes) in its next ready(), drain() or wait_all(). Every
        post of a step must happen before that thread's wait_all(). Raises IndexError,
        ValueError, TypeError as ready(); FtrtInvalid (already marked this step; not posted);
        or, posted, the step's first error so far (FtrtRecover, ...: the poster may stop, and
        the context's thread gets it from wait_all())."""
        need = self.counts[tensor] * _ESIZE[self.dtype]
        addr, size, _, _ = _buffer_of(buf, None if not isinstance(buf, int) else need)
        if size < need:
            raise ValueError(f"tensor {tensor}: buffer of {size} bytes, {need} needed")
        self._keep[tensor] = buf  # one list slot: atomic under the GIL
        _check(_clib().ftrt_bucketer_ready_from_any_thread(self._h, tensor, addr),
               "ftrt_bucketer_ready_from_any_thread")

    def drain(self) -> int:
        """Marks the tensors other threads posted (ready_from_any_thread) and starts the
        allreduces they complete; returns at once with the number marked. Context's thread.
        Raises the step's first error (FtrtRecover, ...) as ready() does."""
        return _check(_clib().ftrt_bucketer_drain(self._h), "ftrt_bucketer_drain")

    def wait_all(self) -> None:
        """Ends the step: waits for every bucket. Raises FtrtState when a tensor was not marked
        ready, FtrtRecover (some tensors may hold reduced and others local values: recover and
        redo the step), FtrtNoSpare/FtrtCoordLost/FtrtAborted, FtrtMPIError, ..."""
        try:
            _check(_clib().ftrt_bucketer_wait_all(self._h), "ftrt_bucketer_wait_all")
        finally:
            self._keep = [None] * len(self.counts)

    def reset(self) -> None:
        """Abandons this step: waits for started buckets (they fail promptly after an epoch
        change) and clears the readiness. Raises FtrtInvalid after free()."""
        _check(_clib().ftrt_bucketer_reset(self._h), "ftrt_bucketer_reset")
        self._keep = [None] * len(self.counts)

    @property
    def buckets(self) -> int:
        """Number of buckets (>= 1)."""
        return _check(_clib().ftrt_bucketer_buckets(self._h), "ftrt_bucketer_buckets")

    def pieces(self) -> int:
        """Number of pieces: the allreduces of a step (>= the number of buckets; a bucket
        larger than piece_bytes is reduced in several)."""
        return _check(_clib().ftrt_bucketer_pieces(self._h), "ftrt_bucketer_pieces")

    def bucket_of(self, tensor: int) -> int:
        """The bucket of `tensor` (buckets are numbered in the order they start). Raises
        FtrtInvalid for a bad index."""
        return _check(_clib().ftrt_bucketer_bucket_of(self._h, int(tensor)),
                     "ftrt_bucketer_bucket_of")

    def layout(self, tensor: int) -> Tuple[int, int]:
        """(bucket, byte offset) of `tensor` in its bucket (ftrt_bucketer_layout()): tensors
        lie back to back in bucket order, so gradients placed at these offsets of one buffer
        per bucket are reduced in place with BucketConfig.in_place. The same on every
        trainer. Raises FtrtInvalid for a bad index."""
        off = ctypes.c_size_t()
        k = _check(_clib().ftrt_bucketer_layout(self._h, int(tensor), ctypes.byref(off)),
                   "ftrt_bucketer_layout")
        return k, off.value

    def packed_bytes(self) -> int:
        """Bytes sent through a staging copy since creation (ftrt_bucketer_packed_bytes()):
        0 when every piece ran in place."""
        return _check(_clib().ftrt_bucketer_packed_bytes(self._h), "ftrt_bucketer_packed_bytes")

    def free(self) -> None:
        """Frees the bucketer (idempotent); resets an unfinished step first. Raises FtrtError
        from ftrt_bucketer_free()."""
        if self._h:
            _clib().ftrt_bucketer_reset(self._h)
            _check(_clib().ftrt_bucketer_free(self._h), "ftrt_bucketer_free")
            self._h = None


class Context:
    """A process's membership of an ftrt job (ftrt_ctx *), from init().

    is_trainer is True for a trainer (or a promoted hot spare): train as logical rank
    `rank` of `size`. False for the coordinator and for a spare that was never needed, once
    the job ended successfully: call finalize() and exit 0. Methods raise FtrtError
    subclasses for negative codes; see each docstring for the codes ftrt.h documents.
    Attributes: is_trainer, init_code (ftrt_init()'s return: 0 or DONE), thread (the ident of
    the thread that called init(): the only one that may call the methods). A context owns
    the references to the registered objects and to the requests and bucketers it made, until
    finalize()."""

    def __init__(self, handle: Optional[int], rc: int) -> None:
        self._h = handle
        self.init_code = rc
        self.is_trainer = rc == 0
        self.thread = threading.get_ident()
        self._regions: Dict[str, Any] = {}
        self._children: "weakref.WeakSet[Any]" = weakref.WeakSet()

    # -- identity -------------------------------------------------------------------------
    @property
    def handle(self) -> Optional[int]:
        """The raw ftrt_ctx * (int; None after finalize()), for direct ctypes calls."""
        return self._h

    @property
    def rank(self) -> int:
        """Logical rank in [0, size) (raises FtrtState for non-trainers)."""
        return _check(_clib().ftrt_rank(self._h), "ftrt_rank")

    @property
    def size(self) -> int:
        """Number of trainers N (raises FtrtState for non-trainers); one fewer after each
        shrink (FTRT_NO_SPARE=shrink): read it again after every recover()."""
        return _check(_clib().ftrt_size(self._h), "ftrt_size")

    @property
    def data_rank(self) -> int:
        """The lowest data rank this trainer holds (ftrt_data_rank()): a logical rank as
        numbered at the job's start, whose data it trains on; rank until a shrink or fold
        renumbers the ranks above a lost one. Raises FtrtState for non-trainers."""
        return _check(_clib().ftrt_data_rank(self._h), "ftrt_data_rank")

    @property
    def data_ranks(self) -> List[int]:
        """Every data rank this trainer holds, ascending (ftrt_data_ranks()): more than one
        once a lost rank's data was folded onto it (FTRT_NO_SPARE=fold). Choose minibatches
        by these. Raises FtrtState for non-trainers."""
        n = _check(_clib().ftrt_data_ranks(self._h, None, 0), "ftrt_data_ranks")
        buf = (ctypes.c_int * n)()
        _check(_clib().ftrt_data_ranks(self._h, buf, n), "ftrt_data_ranks")
        return list(buf)

    @property
    def data_size(self) -> int:
        """The data ranks held by the trainers now, all together (ftrt_data_size()): divide a
        gradient summed over them by this times the microbatch size. Raises FtrtState for
        non-trainers."""
        return _check(_clib().ftrt_data_size(self._h), "ftrt_data_size")

    @property
    def world_rank(self) -> int:
        """World rank in MPI_COMM_WORLD."""
        return _check(_clib().ftrt_world_rank(self._h), "ftrt_world_rank")

    @property
    def epoch(self) -> int:
        """Current epoch (0 at start, +1 per membership change)."""
        return _check(_clib().ftrt_epoch(self._h), "ftrt_epoch")

    # -- state regions and checkpoints ----------------------------------------------------
    def register(self, name: str, buf: Buffer, nbytes: Optional[int] = None,
                 flags: int = REGION_REPLICATED) -> int:
        """Registers memory as checkpointed and recovered state (ftrt_register()).

        name:   1..63 bytes (UTF-8), unique.  buf: see buffer_of(); a CUDA tensor adds
                REGION_DEVICE to flags (FtrtNotSupported unless libftrt was built with CUDA).
        nbytes: bytes (default: the whole object).  flags: REGION_REPLICATED (default) or
                REGION_SHARDED, optionally | REGION_DEVICE.
        The memory must stay at the same address while registered (a reference to `buf` is
        kept until unregister() or finalize()). Returns the region index. Raises FtrtInvalid
        (bad name, duplicate), FtrtNotSupported, FtrtState (not a trainer), ValueError
        (non-contiguous, bad nbytes, memory on another device type), TypeError (no memory)."""
        addr, size, _, dev = _buffer_of(buf, nbytes)
        if dev == "cuda":
            flags |= REGION_DEVICE
        elif dev != "cpu":
            raise ValueError(f"region {name!r}: memory on device type {dev!r} is not supported")
        bname = name.encode()
        idx = _check(_clib().ftrt_register(self._h, bname, addr, size, flags), "ftrt_register")
        self._regions[name] = buf
        return idx

    def unregister(self, name: str) -> None:
        """Removes region `name` (ftrt_unregister(); waits for a running snapshot) and drops
        the reference to its object. Raises FtrtInvalid (no such region), FtrtState."""
        _check(_clib().ftrt_unregister(self._h, name.encode()), "ftrt_unregister")
        self._regions.pop(name, None)

    def restore(self) -> Tuple[bool, int]:
        """Loads the registered regions at start (ftrt_restore(), collective over trainers).

        Returns (restored, step): restored is True when state came from a checkpoint or, for a
        promoted spare, from a survivor; step is the step to resume at (0 on a fresh start).
        Raises FtrtRecover (call recover()), FtrtNoCheckpoint, FtrtMismatch, FtrtState, ..."""
        step = ctypes.c_int64(0)
        rc = _check(_clib().ftrt_restore(self._h, ctypes.byref(step)), "ftrt_restore")
        return rc == 1, step.value

    def checkpoint(self, step: int) -> int:
        """Checkpoint of the state after `step` steps: returns once the snapshot is taken (the
        state may then be modified; the write and the commit go on in the background).
        Returns 0 or SKIPPED (FTRT_CKPT_POLICY=skip and staging busy). Raises FtrtRecover
        (nothing taken), -errno as FtrtError (this checkpoint failed, training may go on),
        FtrtNoSpare/FtrtCoordLost/FtrtAborted, FtrtInvalid, FtrtState."""
        return _check(_clib().ftrt_checkpoint(self._h, int(step)), "ftrt_checkpoint")

    def checkpoint_start(self, step: int) -> int:
        """Starts the snapshot of checkpoint `step` and returns: the regions may be read but
        not modified until checkpoint_wait_snapshot(). Returns 0 or SKIPPED; raises as
        checkpoint()."""
        return _check(_clib().ftrt_checkpoint_start(self._h, int(step)), "ftrt_checkpoint_start")

    def checkpoint_prepare(self) -> None:
        """Optional, after registering (e.g. after restore()): maps and faults in the staging
        memory for the registered regions and starts the checkpoint engine's threads, so that
        the first checkpoint does not pay for it (ftrt_checkpoint_prepare()). Raises
        FtrtInvalid, FtrtState (not a trainer), -EFBIG / -ENOMEM as FtrtError."""
        _check(_clib().ftrt_checkpoint_prepare(self._h), "ftrt_checkpoint_prepare")

    def checkpoint_wait_snapshot(self) -> None:
        """Returns once the running snapshot is complete (the regions may be modified). Raises
        FtrtRecover, -errno as FtrtError (the snapshot failed), FtrtState."""
        _check(_clib().ftrt_checkpoint_wait_snapshot(self._h), "ftrt_checkpoint_wait_snapshot")

    def checkpoint_wait_commit(self, step: int = -1, timeout_ms: int = -1) -> int:
        """Waits until checkpoint `step` (-1: the newest started here) is decided, at most
        timeout_ms ms (-1: no limit). Returns 0 (committed) or SKIPPED; raises the failure
        (-errno as FtrtError, FtrtCorrupt), FtrtRecover (abandoned), FtrtTimeout, ..."""
        return _check(_clib().ftrt_checkpoint_wait_commit(self._h, int(step), int(timeout_ms)),
                     "ftrt_checkpoint_wait_commit")

    def checkpoint_stats(self) -> CkptStats:
        """This rank's checkpoint statistics (CkptStats, a copy; .as_dict()). Raises
        FtrtState (not a trainer), FtrtInvalid."""
        st = CkptStats()
        _check(_clib().ftrt_checkpoint_stats(self._h, ctypes.byref(st), ctypes.sizeof(st)),
              "ftrt_checkpoint_stats")
        return st

    # -- collectives ------------------------------------------------------------------------
    def _coll_args(self, buf: Buffer, count: Optional[int],
                   dtype: Optional[int]) -> Tuple[int, int, int]:
        if isinstance(buf, int):
            if count is None or dtype is None:
                raise ValueError("an int address needs count and dtype")
            return buf, int(count), dtype
        addr, size, bdtype, dev = _buffer_of(buf)
        if dev != "cpu":
            raise ValueError("ftrt's CPU collectives take host memory only")
        dtype = bdtype if dtype is None else dtype
        if dtype not in _ESIZE:
            raise ValueError("dtype must be FLOAT32, FLOAT64, INT64, BFLOAT16 or FLOAT16")
        n = size // _ESIZE[dtype]
        count = n if count is None else int(count)
        if count > n:
            raise ValueError(f"count {count} exceeds the buffer's {n} elements")
        return addr, count, dtype

    def allreduce(self, buf: Buffer, count: Optional[int] = None, dtype: Optional[int] = None,
                  op: int = SUM) -> None:
        """In-place blocking allreduce over the trainers (ftrt_allreduce()).

        buf: float32/float64/int64/bfloat16/float16 memory (dtype inferred from a tensor or
        array; required with an int address; the 16-bit floats are reduced in their own dtype,
        each pairwise sum rounded to nearest even: include/ftrt.h, ftrt_dtype); count: elements (default: all of buf); op: SUM, MIN or MAX.
        Bitwise deterministic for a fixed number of trainers. Raises FtrtRecover (buf
        unchanged), FtrtNoSpare/FtrtCoordLost/FtrtAborted, FtrtInvalid, FtrtMPIError, ...;
        ValueError (device memory, bad dtype, count beyond the buffer)."""
        addr, count, dtype = self._coll_args(buf, count, dtype)
        _check(_clib().ftrt_allreduce(self._h, addr, count, dtype, op), "ftrt_allreduce")

    def allreduce_ordered(self, contribs: Sequence[Buffer], out: Buffer, held: Sequence[int],
                          nlogical: Optional[int] = None, count: Optional[int] = None,
                          dtype: Optional[int] = None) -> None:
        """Blocking fixed-order allreduce (ftrt_allreduce_ordered()): out receives the SUM over
        the nlogical logical ranks of their contributions, computed elementwise as
        ((c_0 + c_1) + c_2) + ... strictly in logical rank order, so that its bytes do not
        depend on which process holds which logical rank nor on how many processes there are.

        contribs: the contributions of the logical ranks this process holds, one buffer each
        (host memory as allreduce()), in the order of held; held: those logical ranks, strictly
        ascending; over all processes the held lists are a partition of range(nlogical).
        nlogical: default self.size. out: count elements, written only once the reduction
        completed (it may be one of contribs). count: elements (default: out's element count).
        dtype: inferred from out (required with int addresses). Raises FtrtRecover (out
        unchanged), FtrtNoSpare/FtrtCoordLost/FtrtAborted, FtrtInvalid (a bad argument on any
        process: on every process alike), FtrtMPIError, ...; ValueError (device memory, bad
        dtype, a buffer too small for count, len(contribs) != len(held))."""
        if len(contribs) != len(held):
            raise ValueError(f"{len(contribs)} contributions for {len(held)} held ranks")
        o, count, dtype = self._coll_args(out, count, dtype)
        addrs = [self._coll_args(c, count, dtype)[0] for c in contribs]
        n = len(held)
        c_arr = (ctypes.c_void_p * max(n, 1))(*addrs)
        h_arr = (ctypes.c_int * max(n, 1))(*[int(x) for x in held])
        nl = self.size if nlogical is None else int(nlogical)
        _check(_clib().ftrt_allreduce_ordered(self._h, nl, h_arr, n, c_arr, o, count, dtype),
               "ftrt_allreduce_ordered")

    def allreduce_start(self, buf: Buffer, count: Optional[int] = None,
                        dtype: Optional[int] = None, op: int = SUM) -> Request:
        """Starts an in-place allreduce and returns a Request at once (ftrt_allreduce_start());
        arguments as allreduce(); the Request keeps a reference to `buf` until it is freed.
        Raises as allreduce() when nothing could be started."""
        addr, count, dtype = self._coll_args(buf, count, dtype)
        h = ctypes.c_void_p()
        _check(_clib().ftrt_allreduce_start(self._h, addr, count, dtype, op, ctypes.byref(h)),
              "ftrt_allreduce_start")
        req = Request(self, h.value, buf)
        self._children.add(req)
        return req

    def broadcast(self, buf: Buffer, count: Optional[int] = None, dtype: Optional[int] = None,
                  root: int = 0) -> None:
        """Blocking broadcast from the trainer of logical rank `root` to every trainer
        (ftrt_broadcast()): afterwards every trainer's buf holds the root's bytes exactly.

        buf, count, dtype: as allreduce() (host memory; dtype only sets the element size).
        root: a logical rank in [0, size). Every trainer calls it with the same count, dtype
        and root. Raises FtrtRecover (buf unchanged), FtrtNoSpare/FtrtCoordLost/FtrtAborted,
        FtrtInvalid (root outside [0, size)), FtrtMPIError, ...; ValueError (device memory,
        bad dtype, count beyond the buffer)."""
        addr, count, dtype = self._coll_args(buf, count, dtype)
        _check(_clib().ftrt_broadcast(self._h, addr, count, dtype, int(root)), "ftrt_broadcast")

    def broadcast_start(self, buf: Buffer, count: Optional[int] = None,
                        dtype: Optional[int] = None, root: int = 0) -> Request:
        """Starts a broadcast (ftrt_broadcast_start()) and returns a Request at once;
        arguments as broadcast(); buf must not be written until the Request completed (it
        keeps a reference to `buf` until freed). Raises as broadcast() when nothing could be
        started."""
        addr, count, dtype = self._coll_args(buf, count, dtype)
        h = ctypes.c_void_p()
        _check(_clib().ftrt_broadcast_start(self._h, addr, count, dtype, int(root),
                                            ctypes.byref(h)), "ftrt_broadcast_start")
        req = Request(self, h.value, buf)
        self._children.add(req)
        return req

    def _rsag_args(self, send: Buffer, recv: Buffer, count: Optional[int],
                   dtype: Optional[int], rs: bool) -> Tuple[int, int, int, int]:
        """(send address, recv address, count per rank, dtype) of a reduce-scatter (rs) or an
        all-gather, checked: the blocked side holds size * count elements, the other count."""
        sides: List[Tuple[int, Optional[int], Optional[int]]] = []  # address, bytes, dtype
        for b in (send, recv):
            if isinstance(b, int):
                sides.append((b, None, None))
                continue
            addr, nbytes, bdtype, dev = _buffer_of(b)
            if dev != "cpu":
                raise ValueError("ftrt's CPU collectives take host memory only")
            sides.append((addr, nbytes, bdtype))
        known = [d for _, _, d in sides if d is not None]
        if dtype is None:
            if not known:
                raise ValueError("int addresses (or untyped buffers) need count and dtype")
            if any(d != known[0] for d in known):
                raise ValueError("send and recv have different dtypes: pass dtype")
            dtype = known[0]
        if dtype not in _ESIZE:
            raise ValueError("dtype must be FLOAT32, FLOAT64, INT64, BFLOAT16 or FLOAT16")
        es, size = _ESIZE[dtype], self.size
        blocks = (size, 1) if rs else (1, size)  # (send, recv) in units of count
        single = sides[1] if rs else sides[0]    # the one-block side sets the default count
        if count is None:
            if single[1] is None:
                raise ValueError("an int address needs count and dtype")
            count = single[1] // es
        count = int(count)
        if count < 0:
            raise ValueError(f"count {count} is negative")
        for side, k, name in zip(sides, blocks, ("send", "recv")):
            have = side[1]
            if have is not None and have // es < k * count:
                raise ValueError(f"{name} holds {have // es} elements, fewer than the "
                                 f"{k} x {count} the collective needs")
        return sides[0][0], sides[1][0], count, dtype

    def reduce_scatter(self, send: Buffer, recv: Buffer, count: Optional[int] = None,
                       dtype: Optional[int] = None, op: int = SUM) -> None:
        """Blocking reduce-scatter over the trainers (ftrt_reduce_scatter()): the trainer of
        logical rank r receives in recv[0:count] the op-reduction over all trainers of
        send[r*count:(r+1)*count].

        send: size * count elements (size = self.size); recv: count elements; both host
        memory (tensors, numpy arrays, ctypes arrays, or int addresses with count and dtype).
        count: elements per trainer (default: recv's element count). dtype: inferred from the
        buffers (required with int addresses; the 16-bit floats are reduced in their own dtype
        as allreduce()). op: SUM, MIN or MAX. recv may be send's block k (a view of
        send[k*count:(k+1)*count]); another overlap is FtrtInvalid. Bitwise deterministic for a
        fixed number of trainers. Raises FtrtRecover (recv unchanged), FtrtNoSpare/
        FtrtCoordLost/FtrtAborted, FtrtInvalid, FtrtMPIError, ...; ValueError (device memory,
        bad dtype, a buffer too small for count)."""
        s, r, count, dtype = self._rsag_args(send, recv, count, dtype, True)
        _check(_clib().ftrt_reduce_scatter(self._h, s, r, count, dtype, op),
               "ftrt_reduce_scatter")

    def reduce_scatter_start(self, send: Buffer, recv: Buffer, count: Optional[int] = None,
                             dtype: Optional[int] = None, op: int = SUM) -> Request:
        """Starts a reduce-scatter (ftrt_reduce_scatter_start()) and returns a Request at once;
        arguments as reduce_scatter(). send must not be written, nor recv read or written,
        until the Request completed; it keeps references to both until freed. Raises as
        reduce_scatter() when nothing could be started."""
        s, r, count, dtype = self._rsag_args(send, recv, count, dtype, True)
        h = ctypes.c_void_p()
        _check(_clib().ftrt_reduce_scatter_start(self._h, s, r, count, dtype, op,
                                                 ctypes.byref(h)), "ftrt_reduce_scatter_start")
        req = Request(self, h.value, (send, recv))
        self._children.add(req)
        return req

    def all_gather(self, send: Buffer, recv: Buffer, count: Optional[int] = None,
                   dtype: Optional[int] = None) -> None:
        """Blocking all-gather over the trainers (ftrt_allgather()): every trainer receives in
        recv[r*count:(r+1)*count] the count elements of logical rank r's send, for every r.

        send: count elements; recv: size * count elements (size = self.size); host memory as
        reduce_scatter(). count: elements per trainer (default: send's element count). dtype:
        inferred from the buffers (required with int addresses; it only sets the element size).
        send may be recv's block k (a view of recv[k*count:(k+1)*count]); another overlap is
        FtrtInvalid. Raises FtrtRecover (recv unchanged), FtrtNoSpare/FtrtCoordLost/
        FtrtAborted, FtrtInvalid, FtrtMPIError, ...; ValueError (device memory, bad dtype, a
        buffer too small for count)."""
        s, r, count, dtype = self._rsag_args(send, recv, count, dtype, False)
        _check(_clib().ftrt_allgather(self._h, s, r, count, dtype), "ftrt_allgather")

    def all_gather_start(self, send: Buffer, recv: Buffer, count: Optional[int] = None,
                         dtype: Optional[int] = None) -> Request:
        """Starts an all-gather (ftrt_allgather_start()) and returns a Request at once;
        arguments as all_gather(). send must not be written, nor recv read or written, until
        the Request completed; it keeps references to both until freed. Raises as all_gather()
        when nothing could be started."""
        s, r, count, dtype = self._rsag_args(send, recv, count, dtype, False)
        h = ctypes.c_void_p()
        _check(_clib().ftrt_allgather_start(self._h, s, r, count, dtype, ctypes.byref(h)),
               "ftrt_allgather_start")
        req = Request(self, h.value, (send, recv))
        self._children.add(req)
        return req

    def bucketer(self, counts: Sequence[int], dtype: int = FLOAT32,
                 cfg: Optional[BucketConfig] = None) -> Bucketer:
        """A Bucketer for len(counts) tensors of counts[i] elements of `dtype`, in
        registration (forward) order (ftrt_bucketer_create()). cfg: BucketConfig (default
        BucketConfig.defaults(): 25 MiB buckets, first 1 MiB, reverse, average). Raises
        FtrtInvalid, FtrtState (not a trainer)."""
        n = len(counts)
        arr = (ctypes.c_size_t * max(n, 1))(*[int(c) for c in counts])
        h = ctypes.c_void_p()
        cfgp = ctypes.byref(cfg) if cfg is not None else None
        _check(_clib().ftrt_bucketer_create(self._h, arr, n, dtype, cfgp, ctypes.byref(h)),
              "ftrt_bucketer_create")
        b = Bucketer(self, h.value, counts, dtype)
        self._children.add(b)
        return b

    # -- training loop ----------------------------------------------------------------------
    def step_done(self, step: int) -> None:
        """Records that 0-based step `step` is complete (registered state reflects step + 1
        steps done). Cheap. Raises FtrtInvalid (step decreasing)."""
        _check(_clib().ftrt_step_done(self._h, int(step)), "ftrt_step_done")

    def set_job_info(self, total_steps: int = 0, flops_per_step: float = 0.0,
                     peak_flops: float = 0.0) -> None:
        """For the goodput ledger: total steps (0 = unknown), model FLOPs one trainer does per
        step (0 = unknown), peak FLOP/s of one rank (0 = keep FTRT_PEAK_FLOPS). Raises
        FtrtInvalid (negative values), FtrtState."""
        _check(_clib().ftrt_set_job_info(self._h, int(total_steps), float(flops_per_step),
                                      float(peak_flops)), "ftrt_set_job_info")

    def host_trainers(self) -> int:
        """The trainers on this host, counted from below (ftrt_host_trainers()): the
        launcher's processes on this host less the job's processes that are not trainers, at
        least 1; the ranks_sharing of cpu_peak_flops(). Raises FtrtInvalid (finalized)."""
        return _check(_clib().ftrt_host_trainers(self._h), "ftrt_host_trainers")

    def check(self) -> None:
        """Whether the step in progress may go on (ftrt_check()): call it inside a long
        computation to learn of a failure there instead of at the step's next collective. Two
        atomic loads, no I/O. Returns None; raises FtrtRecover (a rank failed: abandon the step,
        call recover()), FtrtNoSpare, FtrtCoordLost, FtrtAborted, FtrtState (not a trainer)."""
        _check(_clib().ftrt_check(self._h), "ftrt_check")

    def recover(self) -> int:
        """After FtrtRecover: ftrt_recover() until the trainers are whole again (it is called
        again while it returns FTRT_ERECOVER, a failure folded into a newer epoch). Registered
        regions hold the resumed state on return. Returns the step to resume at. Raises
        FtrtNoSpare (exit non-zero; a relaunch resumes from the last committed checkpoint),
        FtrtCoordLost, FtrtAborted, FtrtMPIError, FtrtProtocol (no step to resume at)."""
        step = ctypes.c_int64(0)
        while True:
            rc = _clib().ftrt_recover(self._h, ctypes.byref(step))
            if rc != ERECOVER:
                break
        _check(rc, "ftrt_recover")
        if step.value < 0:
            raise _error_for(EPROTO, "ftrt_recover")
        return step.value

    def set_exit_code(self, code: int) -> None:
        """Records the error this trainer leaves the job with (ftrt_set_exit_code(); code is a
        negative -errno or ftrt code): the coordinator then ends the job as failed instead of
        counting this trainer as finished. Call before finalize(). Raises FtrtInvalid
        (code >= 0), FtrtState."""
        _check(_clib().ftrt_set_exit_code(self._h, int(code)), "ftrt_set_exit_code")

    def finalize(self) -> int:
        """Leaves the job (ftrt_finalize()); idempotent. Requests and bucketers still alive are
        waited for and freed first (their errors are dropped), and the references to
        registered objects released. Returns 0, or SKIP_MPI_FINALIZE when the application
        initialized MPI itself and must not call MPI_Finalize. Raises FtrtError from
        ftrt_finalize() (the context is gone either way). The process's exit status after
        this still counts: under tools/ftrt-run a non-zero one is the launch's exit status
        although the job finished (docs/running.md "Exit status"); set_exit_code() first ends
        the job itself as failed."""
        if not self._h:
            return 0
        for child in list(self._children):
            try:
                if isinstance(child, Request) and child._h:
                    _clib().ftrt_request_wait(child._h)
                child.free()
            except FtrtError:
                pass
        h, self._h = self._h, None
        rc = _check(_clib().ftrt_finalize(h), "ftrt_finalize")
        self._regions.clear()
        return rc

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.finalize()


def cpu_peak_flops(dtype: int = FLOAT32, ranks_sharing: int = 1) -> Tuple[float, str]:
    """The peak FLOP/s of one of `ranks_sharing` ranks that share this host's CPU cores, for
    `dtype` (FLOAT32, FLOAT64, BFLOAT16, FLOAT16): an upper bound from libftrt's table of
    vector and matrix units (ftrt_cpu_peak_flops(); docs/goodput-ledger.md "Peak FLOP/s of
    CPUs"). Returns (FLOP/s, how it was made up). Raises FtrtNotSupported (no row of the table
    fits this CPU: not x86, no clock; the message says why), FtrtInvalid (ranks_sharing < 1,
    an integer dtype), FtrtError (-errno: /proc/cpuinfo unreadable). Needs no context;
    thread-safe. FTRT_PEAK_FLOPS is not read here (it is the user's override)."""
    flops = ctypes.c_double()
    src = ctypes.create_string_buffer(1024)
    rc = _clib().ftrt_cpu_peak_flops(int(dtype), int(ranks_sharing), ctypes.byref(flops), src,
                                     len(src))
    if rc < 0:
        why = src.value.decode(errors="replace")
        raise _error_for(rc, "ftrt_cpu_peak_flops" + (f" ({why})" if why else ""))
    return flops.value, src.value.decode(errors="replace")


def init(cfg: Optional[Config] = None) -> Context:
    """Joins the job (ftrt_init(); collective over MPI_COMM_WORLD; initializes MPI at
    MPI_THREAD_MULTIPLE unless the application did). cfg: a Config (default
    Config.from_env()).

    Returns a Context: is_trainer True for a trainer (also a promoted hot spare, which
    returns later in the job), False for the coordinator or an unused spare after a
    successful job (finalize() and exit 0). Raises the job's error (FtrtNoSpare, FtrtAborted,
    the code a trainer left with) on the coordinator or an unused spare of a failed job (the
    context is finalized first; exit non-zero), FtrtConfigError,
    FtrtMPIError, FtrtTimeout, FtrtCoordLost, -errno. Call once per process."""
    if cfg is None:
        cfg = Config.from_env()
    h = ctypes.c_void_p()
    rc = _clib().ftrt_init(ctypes.byref(cfg), ctypes.byref(h))
    if rc < 0:
        err = _error_for(rc, "ftrt_init")
        if h.value:
            _clib().ftrt_finalize(h.value)
        raise err
    return Context(h.value, rc)
