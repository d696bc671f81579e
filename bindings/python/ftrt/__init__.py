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
plain FtrtError with ``.errno`` set.

Buffers: wherever a function takes memory (`buf`), it accepts a contiguous CPU
torch.Tensor, a C-contiguous writable numpy array, a ctypes array or structure, or an int
address together with `nbytes` (register) or `count` and `dtype` (allreduce). The library
uses the memory directly: it must stay at the same address for as long as the C API says
(registered regions: until unregistered or finalize; allreduce_start: until the request is
final); the wrappers keep a reference to the object for that long.

Threads: one application thread per context (the one that called init()), as in the C API.
"""
import ctypes
import threading
import weakref

from . import _lib
from ._lib import (  # noqa: F401  (re-exported)
    BucketConfig, CkptStats, Config, FtrtAborted, FtrtConfigError, FtrtCoordLost, FtrtCorrupt,
    FtrtCudaError, FtrtError, FtrtInvalid, FtrtMismatch, FtrtMPIError, FtrtNcclError,
    FtrtNoCheckpoint, FtrtNoDevice, FtrtNoSpare, FtrtNotSupported, FtrtProtocol, FtrtRecover,
    FtrtState, FtrtTimeout, check, err_name, error_for, has_gpu_plane, last_error, lib,
    lib_path, load, strerror, version,
    OK, DONE, SKIP_MPI_FINALIZE, SKIPPED,
    ERECOVER, ENOSPARE, ECOORD, EABORT, ECONFIG, ECORRUPT, ENOCKPT, EMISMATCH, EPROTO, EMPI,
    EINVAL, ESTATE, ETIMEDOUT, ENODEV, ECUDA, ENCCL, ENOTSUP,
    REGION_REPLICATED, REGION_SHARDED, REGION_DEVICE, FLOAT32, FLOAT64, INT64, SUM, MIN, MAX,
    CKPT_WAIT, CKPT_SKIP, CKPT_STAT_DIRECT, CKPT_STAT_FIXED, CKPT_STAT_STREAMING,
)


# ftrt.__version__: this package's version, "major.minor.patch" -- project(VERSION) of the
# top CMakeLists.txt, the number ftrt.h and libftrt carry too (tools/check-version keeps
# ftrt/_version.py equal to it). Importing ftrt does not load libftrt; ftrt.version() is the
# loaded library's (major, minor, patch), and load() warns when its major differs.
from ._version import __version__  # noqa: E402,F401


_ESIZE = {FLOAT32: 4, FLOAT64: 8, INT64: 8}
_DTYPE_NAMES = {"float32": FLOAT32, "float64": FLOAT64, "int64": INT64,
                "torch.float32": FLOAT32, "torch.float64": FLOAT64, "torch.int64": INT64}


def _is_tensor(obj):
    return hasattr(obj, "data_ptr") and hasattr(obj, "element_size") and hasattr(obj, "device")


def buffer_of(buf, nbytes=None):
    """Resolves `buf` to (address, nbytes, ftrt dtype or None, device type str).

    buf: a contiguous torch.Tensor (any device; the caller checks), a C-contiguous writable
    numpy array, a ctypes array/structure, or an int address (then `nbytes` is required).
    `nbytes`, when given for an object, may not exceed its size. Raises ValueError/TypeError."""
    if isinstance(buf, int):
        if nbytes is None or nbytes < 0:
            raise ValueError("an int address needs nbytes >= 0")
        return buf, int(nbytes), None, "cpu"
    if _is_tensor(buf):
        if not buf.is_contiguous():
            raise ValueError("tensor is not contiguous: its memory is not one block")
        size = buf.numel() * buf.element_size()
        dtype = _DTYPE_NAMES.get(str(buf.dtype))
        addr, dev = buf.data_ptr(), buf.device.type
    elif hasattr(buf, "__array_interface__") and hasattr(buf, "ctypes"):
        if not buf.flags["C_CONTIGUOUS"] or not buf.flags["WRITEABLE"]:
            raise ValueError("numpy array must be C-contiguous and writable")
        size, dtype = buf.nbytes, _DTYPE_NAMES.get(str(buf.dtype))
        addr, dev = buf.ctypes.data, "cpu"
    elif isinstance(buf, (ctypes.Array, ctypes.Structure, ctypes.Union)):
        size, dtype = ctypes.sizeof(buf), None
        addr, dev = ctypes.addressof(buf), "cpu"
        if isinstance(buf, ctypes.Array):
            dtype = {ctypes.c_float: FLOAT32, ctypes.c_double: FLOAT64,
                     ctypes.c_int64: INT64}.get(buf._type_)
    else:
        raise TypeError(f"cannot take the memory of a {type(buf).__name__}: pass a tensor, a "
                        f"numpy array, a ctypes object or an int address with nbytes")
    if nbytes is not None:
        if nbytes < 0 or nbytes > size:
            raise ValueError(f"nbytes {nbytes} outside the object's {size} bytes")
        size = int(nbytes)
    return addr, size, dtype, dev


class Request:
    """One overlapped collective (ftrt_request *), from Context.allreduce_start().

    The buffer must not be read or written until test() returns True or wait() returns.
    free() it (or use it as a context manager) before Context.finalize(); finalize() also
    frees requests still alive, waiting for them first."""

    def __init__(self, ctx, handle, keep):
        self._ctx, self._h, self._keep = ctx, handle, keep

    def test(self):
        """True once complete (the result is in the buffer), False while in flight. Never
        blocks. Raises the request's error (FtrtRecover after an epoch change: the buffer is
        unchanged)."""
        return check(lib().ftrt_request_test(self._h), "ftrt_request_test") == 1

    def wait(self):
        """Blocks until the request is final; raises its error (codes of test())."""
        check(lib().ftrt_request_wait(self._h), "ftrt_request_wait")

    def free(self):
        """Releases a final request (idempotent). Raises FtrtState while in flight."""
        if self._h:
            check(lib().ftrt_request_free(self._h), "ftrt_request_free")
            self._h, self._keep = None, None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._h:
            lib().ftrt_request_wait(self._h)
            self.free()


class Bucketer:
    """Gradient buckets (ftrt_bucketer *) over `ntensors` tensors, from Context.bucketer().

    Per step: ready(i, buf) for every tensor as its gradient becomes available (each bucket's
    allreduce starts when its last tensor is ready and every earlier bucket has started), then
    wait_all(): every tensor then holds the mean (or the sum) over the trainers. After an
    FtrtRecover: reset() (waits for started buckets), Context.recover(), redo the step."""

    def __init__(self, ctx, handle, counts, dtype):
        self._ctx, self._h = ctx, handle
        self.counts = list(counts)
        self.dtype = dtype
        self._keep = [None] * len(self.counts)

    @property
    def handle(self):
        """The raw ftrt_bucketer * (int), for direct ctypes calls in hot loops."""
        return self._h

    def ready(self, tensor, buf):
        """Marks tensor `tensor` (0-based, registration order) ready at `buf` (counts[tensor]
        elements of the bucketer's dtype; int address or an object as in buffer_of()). The
        memory must stay valid and untouched until wait_all()/reset() returns. Raises
        FtrtInvalid (bad index, already ready this step, too small a buffer) or the step's
        first error (FtrtRecover, ...)."""
        need = self.counts[tensor] * _ESIZE[self.dtype]
        addr, size, _, _ = buffer_of(buf, None if not isinstance(buf, int) else need)
        if size < need:
            raise ValueError(f"tensor {tensor}: buffer of {size} bytes, {need} needed")
        self._keep[tensor] = buf
        check(lib().ftrt_bucketer_ready(self._h, tensor, addr), "ftrt_bucketer_ready")

    def wait_all(self):
        """Ends the step: waits for every bucket. Raises FtrtState when a tensor was not marked
        ready, FtrtRecover (some tensors may hold reduced and others local values: recover and
        redo the step), FtrtNoSpare/FtrtCoordLost/FtrtAborted, FtrtMPIError, ..."""
        try:
            check(lib().ftrt_bucketer_wait_all(self._h), "ftrt_bucketer_wait_all")
        finally:
            self._keep = [None] * len(self.counts)

    def reset(self):
        """Abandons this step: waits for started buckets (they fail promptly after an epoch
        change) and clears the readiness."""
        check(lib().ftrt_bucketer_reset(self._h), "ftrt_bucketer_reset")
        self._keep = [None] * len(self.counts)

    @property
    def buckets(self):
        """Number of buckets (>= 1)."""
        return check(lib().ftrt_bucketer_buckets(self._h), "ftrt_bucketer_buckets")

    def pieces(self):
        """Number of pieces: the allreduces of a step (>= the number of buckets; a bucket
        larger than piece_bytes is reduced in several)."""
        return check(lib().ftrt_bucketer_pieces(self._h), "ftrt_bucketer_pieces")

    def bucket_of(self, tensor):
        """The bucket of `tensor` (buckets are numbered in the order they start)."""
        return check(lib().ftrt_bucketer_bucket_of(self._h, int(tensor)),
                     "ftrt_bucketer_bucket_of")

    def free(self):
        """Frees the bucketer (idempotent); resets an unfinished step first."""
        if self._h:
            lib().ftrt_bucketer_reset(self._h)
            check(lib().ftrt_bucketer_free(self._h), "ftrt_bucketer_free")
            self._h = None


class Context:
    """A process's membership of an ftrt job (ftrt_ctx *), from init().

    is_trainer is True for a trainer (or a promoted hot spare): train as logical rank
    `rank` of `size`. False for the coordinator and for a spare that was never needed, once
    the job ended successfully: call finalize() and exit 0. Methods raise FtrtError
    subclasses for negative codes; see each docstring for the codes ftrt.h documents."""

    def __init__(self, handle, rc):
        self._h = handle
        self.init_code = rc
        self.is_trainer = rc == 0
        self.thread = threading.get_ident()
        self._regions = {}
        self._children = weakref.WeakSet()

    # -- identity -------------------------------------------------------------------------
    @property
    def handle(self):
        """The raw ftrt_ctx * (int), for direct ctypes calls."""
        return self._h

    @property
    def rank(self):
        """Logical rank in [0, size) (raises FtrtState for non-trainers)."""
        return check(lib().ftrt_rank(self._h), "ftrt_rank")

    @property
    def size(self):
        """Number of trainers N."""
        return check(lib().ftrt_size(self._h), "ftrt_size")

    @property
    def world_rank(self):
        """World rank in MPI_COMM_WORLD."""
        return check(lib().ftrt_world_rank(self._h), "ftrt_world_rank")

    @property
    def epoch(self):
        """Current epoch (0 at start, +1 per membership change)."""
        return check(lib().ftrt_epoch(self._h), "ftrt_epoch")

    # -- state regions and checkpoints ----------------------------------------------------
    def register(self, name, buf, nbytes=None, flags=REGION_REPLICATED):
        """Registers memory as checkpointed and recovered state (ftrt_register()).

        name:   1..63 bytes (UTF-8), unique.  buf: see buffer_of(); a CUDA tensor adds
                REGION_DEVICE to flags (FtrtNotSupported unless libftrt was built with CUDA).
        nbytes: bytes (default: the whole object).  flags: REGION_REPLICATED (default) or
                REGION_SHARDED, optionally | REGION_DEVICE.
        The memory must stay at the same address while registered (a reference to `buf` is
        kept). Returns the region index. Raises FtrtInvalid (bad name, duplicate),
        FtrtNotSupported, FtrtState (not a trainer)."""
        addr, size, _, dev = buffer_of(buf, nbytes)
        if dev == "cuda":
            flags |= REGION_DEVICE
        elif dev != "cpu":
            raise ValueError(f"region {name!r}: memory on device type {dev!r} is not supported")
        bname = name.encode()
        idx = check(lib().ftrt_register(self._h, bname, addr, size, flags), "ftrt_register")
        self._regions[name] = buf
        return idx

    def unregister(self, name):
        """Removes region `name` (ftrt_unregister(); waits for a running snapshot)."""
        check(lib().ftrt_unregister(self._h, name.encode()), "ftrt_unregister")
        self._regions.pop(name, None)

    def restore(self):
        """Loads the registered regions at start (ftrt_restore(), collective over trainers).

        Returns (restored, step): restored is True when state came from a checkpoint or, for a
        promoted spare, from a survivor; step is the step to resume at (0 on a fresh start).
        Raises FtrtRecover (call recover()), FtrtNoCheckpoint, FtrtMismatch, FtrtState, ..."""
        step = ctypes.c_int64(0)
        rc = check(lib().ftrt_restore(self._h, ctypes.byref(step)), "ftrt_restore")
        return rc == 1, step.value

    def checkpoint(self, step):
        """Checkpoint of the state after `step` steps: returns once the snapshot is taken (the
        state may then be modified; the write and the commit go on in the background).
        Returns 0 or SKIPPED (FTRT_CKPT_POLICY=skip and staging busy). Raises FtrtRecover
        (nothing taken), -errno as FtrtError (this checkpoint failed, training may go on),
        FtrtNoSpare/FtrtCoordLost/FtrtAborted, FtrtInvalid, FtrtState."""
        return check(lib().ftrt_checkpoint(self._h, int(step)), "ftrt_checkpoint")

    def checkpoint_start(self, step):
        """Starts the snapshot of checkpoint `step` and returns: the regions may be read but
        not modified until checkpoint_wait_snapshot(). Returns 0 or SKIPPED; raises as
        checkpoint()."""
        return check(lib().ftrt_checkpoint_start(self._h, int(step)), "ftrt_checkpoint_start")

    def checkpoint_prepare(self):
        """Optional, after registering (e.g. after restore()): maps and faults in the staging
        memory for the registered regions and starts the checkpoint engine's threads, so that
        the first checkpoint does not pay for it (ftrt_checkpoint_prepare()). Raises
        FtrtInvalid, FtrtState (not a trainer), -EFBIG / -ENOMEM as FtrtError."""
        check(lib().ftrt_checkpoint_prepare(self._h), "ftrt_checkpoint_prepare")

    def checkpoint_wait_snapshot(self):
        """Returns once the running snapshot is complete (the regions may be modified)."""
        check(lib().ftrt_checkpoint_wait_snapshot(self._h), "ftrt_checkpoint_wait_snapshot")

    def checkpoint_wait_commit(self, step=-1, timeout_ms=-1):
        """Waits until checkpoint `step` (-1: the newest started here) is decided, at most
        timeout_ms ms (-1: no limit). Returns 0 (committed) or SKIPPED; raises the failure
        (-errno as FtrtError, FtrtCorrupt), FtrtRecover (abandoned), FtrtTimeout, ..."""
        return check(lib().ftrt_checkpoint_wait_commit(self._h, int(step), int(timeout_ms)),
                     "ftrt_checkpoint_wait_commit")

    def checkpoint_stats(self):
        """This rank's checkpoint statistics (CkptStats; .as_dict())."""
        st = CkptStats()
        check(lib().ftrt_checkpoint_stats(self._h, ctypes.byref(st), ctypes.sizeof(st)),
              "ftrt_checkpoint_stats")
        return st

    # -- collectives ------------------------------------------------------------------------
    def _coll_args(self, buf, count, dtype):
        if isinstance(buf, int):
            if count is None or dtype is None:
                raise ValueError("an int address needs count and dtype")
            return buf, int(count), dtype
        addr, size, bdtype, dev = buffer_of(buf)
        if dev != "cpu":
            raise ValueError("ftrt's CPU collectives take host memory only")
        dtype = bdtype if dtype is None else dtype
        if dtype not in _ESIZE:
            raise ValueError("dtype must be FLOAT32, FLOAT64 or INT64")
        n = size // _ESIZE[dtype]
        count = n if count is None else int(count)
        if count > n:
            raise ValueError(f"count {count} exceeds the buffer's {n} elements")
        return addr, count, dtype

    def allreduce(self, buf, count=None, dtype=None, op=SUM):
        """In-place blocking allreduce over the trainers (ftrt_allreduce()).

        buf: float32/float64/int64 memory (dtype inferred from a tensor or array; required
        with an int address); count: elements (default: all of buf); op: SUM, MIN or MAX.
        Bitwise deterministic for a fixed number of trainers. Raises FtrtRecover (buf
        unchanged), FtrtNoSpare/FtrtCoordLost/FtrtAborted, FtrtInvalid, FtrtMPIError, ..."""
        addr, count, dtype = self._coll_args(buf, count, dtype)
        check(lib().ftrt_allreduce(self._h, addr, count, dtype, op), "ftrt_allreduce")

    def allreduce_start(self, buf, count=None, dtype=None, op=SUM):
        """Starts an in-place allreduce and returns a Request at once (ftrt_allreduce_start());
        arguments as allreduce(). Raises FtrtRecover etc. when nothing could be started."""
        addr, count, dtype = self._coll_args(buf, count, dtype)
        h = ctypes.c_void_p()
        check(lib().ftrt_allreduce_start(self._h, addr, count, dtype, op, ctypes.byref(h)),
              "ftrt_allreduce_start")
        req = Request(self, h.value, buf)
        self._children.add(req)
        return req

    def bucketer(self, counts, dtype=FLOAT32, cfg=None):
        """A Bucketer for len(counts) tensors of counts[i] elements of `dtype`, in
        registration (forward) order (ftrt_bucketer_create()). cfg: BucketConfig (default
        BucketConfig.defaults(): 25 MiB buckets, first 1 MiB, reverse, average). Raises
        FtrtInvalid, FtrtState (not a trainer)."""
        n = len(counts)
        arr = (ctypes.c_size_t * max(n, 1))(*[int(c) for c in counts])
        h = ctypes.c_void_p()
        cfgp = ctypes.byref(cfg) if cfg is not None else None
        check(lib().ftrt_bucketer_create(self._h, arr, n, dtype, cfgp, ctypes.byref(h)),
              "ftrt_bucketer_create")
        b = Bucketer(self, h.value, counts, dtype)
        self._children.add(b)
        return b

    # -- training loop ----------------------------------------------------------------------
    def step_done(self, step):
        """Records that 0-based step `step` is complete (registered state reflects step + 1
        steps done). Cheap. Raises FtrtInvalid (step decreasing)."""
        check(lib().ftrt_step_done(self._h, int(step)), "ftrt_step_done")

    def set_job_info(self, total_steps=0, flops_per_step=0.0, peak_flops=0.0):
        """For the goodput ledger: total steps (0 = unknown), model FLOPs one trainer does per
        step (0 = unknown), peak FLOP/s of one rank (0 = keep FTRT_PEAK_FLOPS)."""
        check(lib().ftrt_set_job_info(self._h, int(total_steps), float(flops_per_step),
                                      float(peak_flops)), "ftrt_set_job_info")

    def recover(self):
        """After FtrtRecover: ftrt_recover() until the trainers are whole again (it is called
        again while it returns FTRT_ERECOVER, a failure folded into a newer epoch). Registered
        regions hold the resumed state on return. Returns the step to resume at. Raises
        FtrtNoSpare (exit non-zero; a relaunch resumes from the last committed checkpoint),
        FtrtCoordLost, FtrtAborted, FtrtMPIError."""
        step = ctypes.c_int64(0)
        while True:
            rc = lib().ftrt_recover(self._h, ctypes.byref(step))
            if rc != ERECOVER:
                break
        check(rc, "ftrt_recover")
        if step.value < 0:
            raise error_for(EPROTO, "ftrt_recover")
        return step.value

    def set_exit_code(self, code):
        """Records the error this trainer leaves the job with (ftrt_set_exit_code(); code is a
        negative -errno or ftrt code): the coordinator then ends the job as failed instead of
        counting this trainer as finished. Call before finalize()."""
        check(lib().ftrt_set_exit_code(self._h, int(code)), "ftrt_set_exit_code")

    def finalize(self):
        """Leaves the job (ftrt_finalize()); idempotent. Requests and bucketers still alive are
        waited for and freed first. Returns 0, or SKIP_MPI_FINALIZE when the application
        initialized MPI itself and must not call MPI_Finalize."""
        if not self._h:
            return 0
        for child in list(self._children):
            try:
                if isinstance(child, Request) and child._h:
                    lib().ftrt_request_wait(child._h)
                child.free()
            except FtrtError:
                pass
        h, self._h = self._h, None
        rc = check(lib().ftrt_finalize(h), "ftrt_finalize")
        self._regions.clear()
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.finalize()


def init(cfg=None):
    """Joins the job (ftrt_init(); collective over MPI_COMM_WORLD; initializes MPI at
    MPI_THREAD_MULTIPLE unless the application did). cfg: a Config (default
    Config.from_env()).

    Returns a Context: is_trainer True for a trainer (also a promoted hot spare, which
    returns later in the job), False for the coordinator or an unused spare after a
    successful job (finalize() and exit 0). Raises FtrtNoSpare/FtrtAborted on the coordinator
    of a failed job (the context is finalized first; exit non-zero), FtrtConfigError,
    FtrtMPIError, FtrtTimeout, FtrtCoordLost, -errno. Call once per process."""
    if cfg is None:
        cfg = Config.from_env()
    h = ctypes.c_void_p()
    rc = lib().ftrt_init(ctypes.byref(cfg), ctypes.byref(h))
    if rc < 0:
        err = error_for(rc, "ftrt_init")
        if h.value:
            lib().ftrt_finalize(h.value)
        raise err
    return Context(h.value, rc)
