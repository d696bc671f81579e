"""Gradient averaging for ftrt.pytorch: GradAverager (autograd hooks handing each gradient to an
ftrt bucketer, PyTorch DDP's approach; the CPU bucketer, or the NCCL plane's GPU bucketer for
CUDA parameters through ftrt/pytorch_gpu.py) and recover(). The design notes (hooks, overlap,
devices, threads) are ftrt/pytorch.py's module docstring; ftrt.pytorch re-exports both names."""
import threading
from typing import Any, Callable, Iterable, List, Optional

import torch

from . import Context, _lib
from ._lib import BFLOAT16, FLOAT16, FLOAT32, FLOAT64, error_for, lib
from .pytorch_gpu import GpuPlane as _GpuPlane, cuda_device as _cuda_device
from .pytorch_state import StateRegistry

__all__ = ["GradAverager", "recover"]

# Bucket buffers of abandoned steps (gradient_as_bucket_view on the CPU plane): never freed,
# because MPI may still write them (comm/async.h, the graveyard).
_BURIED: List[torch.Tensor] = []

# the ftrt dtype gradients of each torch dtype are reduced in (their own)
_FTRT_DTYPE = {torch.float32: FLOAT32, torch.float64: FLOAT64, torch.bfloat16: BFLOAT16,
               torch.float16: FLOAT16}


def _queue_callback() -> Optional[Callable[[Callable[[], None]], None]]:
    """autograd's queue_callback (runs a function when the current backward pass ends), or
    None when this torch lacks it. DDP uses the same entry point."""
    try:
        from torch.autograd import Variable
        return Variable._execution_engine.queue_callback
    except (ImportError, AttributeError):
        return None


class GradAverager:
    """Averages gradients over the trainers through ftrt's bucketed, overlapped allreduce,
    started from autograd hooks as gradients become ready (PyTorch DDP's approach).

    params: the parameters whose .grad to average (those with requires_grad; all on the CPU
    or all on one CUDA device (libftrt_gpu; see the module docstring, "Devices"), float32,
    float64, bfloat16 or float16, contiguous); every trainer must pass the same parameters in
    the same order.

    Dtypes: gradients are reduced in their own dtype (a bfloat16 gradient travels and is summed
    as bfloat16, each pairwise sum rounded to nearest even: ftrt_dtype in include/ftrt.h; the
    mean is that sum times 1/N rounded to the dtype, as DDP's division). Parameters of several
    dtypes get one bucketer per dtype (DDP also buckets by dtype). So that every trainer starts
    the same collectives in the same order whatever order its hooks run in, the bucketers are
    fed one after the other: first the dtype of the last parameter (whose gradient backward
    produces first), then the next dtype met walking back from there, and so on; a gradient of
    a later dtype that is ready early is held (in Python) until every gradient of the earlier
    dtypes has been handed over, so the later dtypes overlap less with the backward pass. One
    dtype (the usual case) behaves exactly as one bucketer. `bucketer` is the first one,
    `bucketers` all of them. On CUDA a held gradient's producer event is recorded when it is
    handed over, on the stream current on the thread that hands it over (autograd's device
    stream, or the caller's stream at the end of backward(), which autograd has ordered after
    the whole pass).
    bucket_bytes / first_bucket_bytes: bucket limits in bytes (default DDP's 25 MiB / 1 MiB).
    average: True (mean, default) or False (sum).

    Per step: backward() marks each p.grad ready from its AccumulateGrad post-hook; wait()
    marks parameters that received no gradient (unused in this forward) ready with zero
    gradients, like DDP's find_unused_parameters, then waits for every bucket: p.grad holds the
    mean over the trainers. Inside no_sync() hooks do nothing (gradient accumulation over
    micro-batches; the last backward outside it averages the total).

    Memory: from its hook until wait() returns, p.grad's memory belongs to ftrt (the result is
    written into it by the progress thread): do not read or modify grads before wait().

    gradient_as_bucket_view: True makes each p.grad a view into one flat buffer per bucket,
    laid out in the bucketer's bucket order (Bucketer.layout(), ftrt_bucketer_layout()), set
    before the first backward (a gradient already there is copied in), so autograd
    accumulates into the bucket and every bucket is reduced in place: no pack and unpack
    copies, and no second copy of the gradients in memory (PyTorch DDP's option of the same
    name, default False as there). As in DDP: a gradient that is not the view when its hook
    runs (zero_grad(set_to_none=True) dropped it, or user code replaced it) is copied into the
    view and p.grad set back to the view, at the cost of that copy (optimizer.zero_grad(
    set_to_none=False) keeps the views and the zero-copy path); detach_() cannot be called on
    a view; no_sync() accumulates into the views. On the CPU plane an allreduce abandoned by a
    failure may still write its bucket after recovery (include/ftrt.h, ftrt_bucket_config.
    in_place): reset(), which recover() calls, therefore moves p.grad to fresh buffers (their
    contents copied over) and keeps the old ones allocated for the life of the process
    (`buried`), one set of gradients' bytes per recovery. The layout depends only on the
    parameters and bucket limits, so a promoted hot spare builds the same one.

    sync_in_backward: True makes backward() itself end the averaging, as DDP does: the first
    hook of a backward pass queues an autograd callback that runs wait() when the pass ends,
    so p.grad holds the mean when backward() returns (gradient clipping and other code that
    reads p.grad can run between backward() and the optimizer step). An FtrtError met there
    does not escape backward(): it is kept and raised by the next wait(). Needs
    torch.autograd.Variable._execution_engine.queue_callback (torch 1.x and 2.x); without it,
    or when False (default), the averaging ends in wait(). A backward() run on another thread
    than the one that created the averager is averaged too (its hooks hand the gradients over
    to this thread: see the module docstring, "Threads"), but never ends the averaging itself:
    wait() does, on the creating thread.
    """

    def __init__(self, ctx: Context, params: Iterable[torch.Tensor],
                 bucket_bytes: Optional[int] = None, first_bucket_bytes: Optional[int] = None,
                 average: bool = True, sync_in_backward: bool = False,
                 gradient_as_bucket_view: bool = False) -> None:
        self.ctx = ctx
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("no parameter requires a gradient")
        self._group_params()
        for p in self.params:
            if not p.is_contiguous():
                raise ValueError("parameters must be contiguous")
        self.cuda_device = _cuda_device(self.params)  # None: CPU
        cfg = _lib.BucketConfig.defaults()
        if bucket_bytes is not None:
            cfg.bucket_bytes = int(bucket_bytes)
        if first_bucket_bytes is not None:
            cfg.first_bucket_bytes = int(first_bucket_bytes)
        cfg.average = 1 if average else 0
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        cfg.in_place = 1 if self.gradient_as_bucket_view else 0
        self._plane: Optional[_GpuPlane] = None
        if self.cuda_device is not None:
            self._plane = _GpuPlane(ctx, self.cuda_device)
        self.bucketers: List[Any] = []
        try:
            for members in self._members:
                counts = [self.params[i].numel() for i in members]
                dt = _FTRT_DTYPE[self.params[members[0]].dtype]
                if self._plane is None:
                    self.bucketers.append(ctx.bucketer(counts, dt, cfg))
                else:
                    self.bucketers.append(self._plane.bucketer(ctx, counts, dt, cfg))
        except BaseException:
            for b in self.bucketers:
                b.free()
            if self._plane is not None:
                self._plane.free()
            raise
        self.bucketer = self.bucketers[0]
        self.dtype = _FTRT_DTYPE[self.params[self._members[0][0]].dtype]  # the first bucketer's
        n = len(self.params)
        self._ready = [False] * n
        self._keep: List[Optional[torch.Tensor]] = [None] * n
        self._err: Optional[int] = None
        self._enabled = True
        self._thread = threading.get_ident()
        self._queue_callback = _queue_callback() if sync_in_backward else None
        self.sync_in_backward = self._queue_callback is not None
        self._queued = False      # a backward-end callback is queued for this pass
        self._queue_lock = threading.Lock()  # hooks of several threads may try to queue it
        self._synced = False      # the callback ended this step's averaging
        self._ordered = False     # the callback ordered the current stream after every bucket
        self._gpu = self._plane is not None  # CUDA: the callback may run off the owning thread
        self._pending: Optional[_lib.FtrtError] = None  # what the callback met, for wait()
        self._hand_lock = threading.Lock()  # the feeding order of several bucketers
        self._held: List[List[Any]] = [[] for _ in self.bucketers]  # (i, ptr) held per group
        self._left = [len(m) for m in self._members]  # per group: not yet handed this step
        self._open = 0  # the group being fed; earlier groups are complete this step
        self._views: List[Optional[torch.Tensor]] = [None] * n  # p.grad's view, per param
        self.buried: List[torch.Tensor] = []  # CPU buckets of abandoned steps (class doc)
        self._flats: List[torch.Tensor] = []  # the bucket buffers of the views
        self._packed_at_close: Optional[int] = None
        self._dirty = False  # gradients handed over since the last successful wait()
        if self.gradient_as_bucket_view:
            self._make_views()
        self._accs: List[Any] = []
        self._handles: List[Any] = []
        for i, p in enumerate(self.params):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self._handles.append(acc.register_hook(self._make_hook(i, p)))
            self._accs.append(acc)

    def _group_params(self) -> None:
        """Sorts the parameters into dtype groups (_members: parameter indices per group, in
        feeding order; _where[i]: (group, index in the group's bucketer)). Raises ValueError
        for a dtype ftrt does not reduce."""
        order: List[torch.dtype] = []
        for p in reversed(self.params):  # backward produces the last parameters first
            if p.dtype not in _FTRT_DTYPE:
                raise ValueError(f"parameter dtype {p.dtype} is not supported (float32, "
                                 f"float64, bfloat16, float16)")
            if p.dtype not in order:
                order.append(p.dtype)
        self._members: List[List[int]] = [[] for _ in order]
        self._where: List[Any] = []
        for i, p in enumerate(self.params):
            g = order.index(p.dtype)
            self._where.append((g, len(self._members[g])))
            self._members[g].append(i)

    def _make_views(self) -> None:
        """gradient_as_bucket_view: allocates one flat buffer per bucket (zeros, the
        parameters' dtype and device; sizes and offsets from Bucketer.layout()) and points
        each p.grad at its place in it, copying a gradient already there."""
        flats: List[torch.Tensor] = []
        with torch.no_grad():
            for g, members in enumerate(self._members):
                b, first = self.bucketers[g], self.params[members[0]]
                esize = first.element_size()
                lay = [b.layout(j) for j in range(len(members))]
                ends = [0] * b.buckets
                for (k, off), i in zip(lay, members):
                    ends[k] = max(ends[k], off // esize + self.params[i].numel())
                group = [torch.zeros(e, dtype=first.dtype, device=first.device) for e in ends]
                flats.extend(group)
                for (k, off), i in zip(lay, members):
                    p = self.params[i]
                    v = group[k].narrow(0, off // esize, p.numel()).view_as(p)
                    if p.grad is not None:
                        v.copy_(p.grad)
                    p.grad = v
                    self._views[i] = v
        self._flats = flats

    def _to_view(self, i: int, p: torch.Tensor) -> Optional[torch.Tensor]:
        """gradient_as_bucket_view: makes p.grad the view again (DDP's reducer does the same
        when autograd left another tensor there): copies the gradient in, or zeros the view
        for a parameter without one. Returns p.grad (the view), or None without views."""
        v = self._views[i]
        if v is None:
            return None
        g = p.grad
        if g is None or g.data_ptr() != v.data_ptr():
            with torch.no_grad():
                if g is None:
                    v.zero_()
                else:
                    v.copy_(g)
            p.grad = v
        return v

    @property
    def packed_bytes(self) -> int:
        """Bytes the bucketers sent through a staging copy since creation
        (ftrt_bucketer_packed_bytes(), summed): stays 0 with gradient_as_bucket_view while
        every gradient is its view. After close(): the count it had then."""
        if self._packed_at_close is not None:
            return self._packed_at_close
        return sum(b.packed_bytes() for b in self.bucketers)

    @property
    def buckets(self) -> int:
        """Number of buckets the parameters were assigned to (over all dtypes)."""
        return sum(b.buckets for b in self.bucketers)

    def _hand(self, i: int, ptr: int, fn: Callable[[Any, int, int], int]) -> int:
        """Hands gradient i (at ptr) to its bucketer with fn(handle, index, ptr), in the
        bucketers' feeding order (class docstring, "Dtypes"): held while an earlier dtype
        still has gradients to come; handing the last of a dtype hands what the next one
        held. Returns 0 or the first negative rc."""
        g, j = self._where[i]
        self._dirty = True  # a step has handed gradients over: until its wait() succeeds
        if len(self.bucketers) == 1:
            return fn(self.bucketer.handle, j, ptr)
        with self._hand_lock:
            if g > self._open:
                self._held[g].append((j, ptr))
                return 0
            rc = fn(self.bucketers[g].handle, j, ptr)
            self._left[g] -= 1
            while rc >= 0 and self._open < len(self.bucketers) and self._left[self._open] == 0:
                self._open += 1
                if self._open < len(self.bucketers):
                    held, self._held[self._open] = self._held[self._open], []
                    for hj, hptr in held:
                        r = fn(self.bucketers[self._open].handle, hj, hptr)
                        self._left[self._open] -= 1
                        rc = r if r < 0 and rc >= 0 else rc
            return rc

    def _stream(self) -> Optional[int]:
        """The calling thread's current CUDA stream of the parameters' device (a
        cudaStream_t as int), or None on the CPU."""
        if self.cuda_device is None:
            return None
        return torch.cuda.current_stream(self.cuda_device).cuda_stream

    def _order_fns(self) -> Any:
        """(owner's order, any thread's order): each f(handle, consumer stream) -> rc, the GPU
        bucketer's ftrt_gpu_bucketer_order() and ftrt_gpu_bucketer_order_from_any_thread()."""
        return lib().ftrt_gpu_bucketer_order, lib().ftrt_gpu_bucketer_order_from_any_thread

    def connect(self) -> None:
        """CUDA: builds the current epoch's NCCL communicator now, if the plane has none
        (ftrt_gpu_connect(): collective over the trainers when it builds, so every trainer calls
        it at the same point, e.g. after init and after each recovery), so that the next
        backward's buckets start on autograd's device threads; nothing on the CPU. Owning
        thread. Raises FtrtRecover (recover, then connect again), FtrtNoSpare / FtrtCoordLost /
        FtrtAborted, FtrtError (FTRT_ENCCL: this epoch's communicator failed)."""
        if self._plane is not None:
            self._plane.connect()

    def _ready_fns(self) -> Any:
        """(ready on the owning thread, post from another thread): each f(handle, i, ptr)."""
        if self.cuda_device is None:
            return lib().ftrt_bucketer_ready, lib().ftrt_bucketer_ready_from_any_thread
        gready = lib().ftrt_gpu_bucketer_ready
        gpost = lib().ftrt_gpu_bucketer_ready_from_any_thread
        stream = self._stream
        return ((lambda h, i, ptr: gready(h, i, ptr, stream())),
                (lambda h, i, ptr: gpost(h, i, ptr, stream())))

    def _make_hook(self, i: int, p: torch.Tensor) -> Callable[..., None]:
        ready, post = self._ready_fns()
        get_ident = threading.get_ident

        def hook(*_: Any) -> None:
            if not self._enabled or self._err is not None or self._ready[i]:
                return
            owner = get_ident() == self._thread
            if (owner or self._gpu) and self._queue_callback is not None and not self._queued:
                self._queue_end()
            g = p.grad if self._views[i] is None else self._to_view(i, p)
            if g is None or not g.is_contiguous():
                return  # handled in wait()
            self._ready[i] = True
            self._keep[i] = g
            # another thread posts: a backward() run elsewhere on CPU tensors (the owning
            # thread applies it in its next ready() or wait()), or autograd's device thread of
            # CUDA tensors (the GPU bucketer starts the buckets it completes right here)
            rc = self._hand(i, g.data_ptr(), ready if owner else post)
            if rc < 0:
                self._err = rc  # the backward pass goes on; wait() raises it
        return hook

    def _queue_end(self) -> None:
        """Queues _backward_end for the end of the running backward pass (once per pass; a
        CUDA pass's hooks run on autograd's device threads, and queue_callback works there:
        DDP's reducer queues its own from the same hooks)."""
        queue = self._queue_callback
        if queue is None:
            return
        with self._queue_lock:
            if self._queued:
                return
            self._queued = True
            self._synced = self._ordered = False
        queue(self._backward_end)

    class _NoSync:
        def __init__(self, avg: "GradAverager") -> None:
            self.avg = avg

        def __enter__(self) -> None:
            self.avg._enabled = False

        def __exit__(self, *exc: Any) -> None:
            self.avg._enabled = True

    def no_sync(self) -> "GradAverager._NoSync":
        """Context manager: backward passes inside it only accumulate local gradients."""
        return self._NoSync(self)

    def _backward_end(self) -> None:
        """The autograd callback of sync_in_backward: ends the averaging as backward() ends.
        On the owning thread it waits (_wait()). Elsewhere, on CUDA (autograd ran it on its
        device thread), it orders the caller's current stream after every bucket
        (_order_in_stream()); on the CPU (a backward() run on another thread) wait() ends it."""
        self._queued = False
        if threading.get_ident() != self._thread:
            if self._gpu:
                self._order_in_stream()
            return
        try:
            self._wait()
            self._synced = True
        except _lib.FtrtError as e:  # kept for wait(); the backward pass must not fail
            self._pending = e

    def _order_in_stream(self) -> None:
        """_backward_end off the owning thread on CUDA. autograd runs final callbacks under a
        MultiStreamGuard of the streams that were current on the thread that called
        backward(), after making them wait for the leaf streams (torch/csrc/autograd/
        engine.cpp, GraphTask::exec_post_processing, since pytorch/pytorch#57833, torch 1.10;
        the same in 2.x): torch.cuda.current_stream() here is the stream the caller's next ops
        run on, whichever thread runs this. So: the parameters without a gradient in this pass
        get zeros, posted from here (ftrt_gpu_bucketer_ready_from_any_thread starts the last
        buckets on this thread), then ftrt_gpu_bucketer_order_from_any_thread makes that
        stream wait for every bucket: what the caller queues next (clip_grad_norm_,
        GradScaler.unscale_, the optimizer) reads the mean, in stream order, without a host
        wait. When it cannot (FTRT_ESTATE: a bucket left to the owning thread, e.g. the
        epoch's NCCL communicator was not built with connect(); or the step met an error),
        nothing is ordered and wait() ends the averaging on the owning thread; until then
        p.grad holds local gradients (synced is False). wait() always ends the step with the
        owner's ftrt_bucketer_wait_all(), which reports the step's errors."""
        if self._err is None and self._mark_missing(self._ready_fns()[1]) < 0:
            return  # wait() raises it
        if self._err is None:
            rc = 0
            for b in self.bucketers:
                rc = rc or self._order_fns()[1](b.handle, self._stream())
            self._ordered = rc == 0

    def wait(self) -> None:
        """Ends the step's gradient averaging (see the class docstring). Raises FtrtRecover
        (grads are partly reduced: call recover() and redo the step), FtrtNoSpare /
        FtrtCoordLost / FtrtAborted, other FtrtError. With sync_in_backward, after a backward
        pass that already ended the averaging it returns at once (or raises what that pass
        met). Call it on the thread that created the averager, once every backward() of the
        step has returned (also one run on another thread)."""
        if self._pending is not None:
            err, self._pending = self._pending, None
            self._synced = False
            raise err
        if self._synced:
            self._synced = False
            return
        self._wait()

    @property
    def synced(self) -> bool:
        """True when a backward pass ended this step's averaging (sync_in_backward) and
        wait() has not been called since: p.grad holds the mean (on CUDA: in the order of
        the stream that was current when backward() was called; wait() still owes the
        host's check of the step, ftrt_bucketer_wait_all())."""
        return self._synced or self._ordered

    def _mark_missing(self, mark: Callable[[Any, int, int], int]) -> int:
        """Marks the parameters not yet ready with mark(handle, i, ptr): zeros for those
        without a gradient, a contiguous copy for a non-contiguous one. Returns 0, or the
        first error (kept in _err)."""
        for i in (i for m in self._members for i in m):  # in feeding order
            if self._ready[i]:
                continue
            p = self.params[i]
            if self._views[i] is not None:
                self._to_view(i, p)
            elif p.grad is None:
                p.grad = torch.zeros_like(p)
            elif not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            self._ready[i] = True
            self._keep[i] = p.grad
            rc = self._hand(i, p.grad.data_ptr(), mark)
            if rc < 0:
                self._err = rc
                return rc
        return 0

    def _wait(self) -> None:
        if self._err is None and not self._ordered:
            self._mark_missing(self._ready_fns()[0])
        if self._err is not None:
            err = self._err
            self.reset()
            raise error_for(err, "ftrt_bucketer_ready")
        try:
            if self._gpu and not self._ordered:  # the current stream waits for every bucket
                for b in self.bucketers:
                    rc = self._order_fns()[0](b.handle, self._stream())
                    if rc < 0 and rc != _lib.ESTATE:  # ESTATE: a failed step; wait_all says why
                        raise error_for(rc, "ftrt_gpu_bucketer_order")
            first: Optional[BaseException] = None
            for b in self.bucketers:  # also after the callback's order: the step's errors
                try:
                    b.wait_all()
                except _lib.FtrtError as e:  # the others' buckets still end before we raise
                    first = first or e
            if first is not None:
                raise first
            self._dirty = False
        finally:
            self._clear()

    def _clear(self) -> None:
        n = len(self.params)
        self._ready = [False] * n
        self._keep = [None] * n
        self._err = None
        self._ordered = False
        self._held = [[] for _ in self.bucketers]
        self._left = [len(m) for m in self._members]
        self._open = 0

    def reset(self) -> None:
        """Abandons this step's averaging (waits for the buckets already started) so that the
        step can be redone; recover() calls it."""
        for b in self.bucketers:
            b.reset()
        if self.gradient_as_bucket_view and self._plane is None and self._dirty:
            self._rebury()  # a bucket may have started: its MPI allreduce may still write
        self._dirty = False
        self._clear()
        self._pending = None
        self._synced = self._ordered = False
        self._queued = False

    def _rebury(self) -> None:
        """CPU views after an abandoned step: keeps the old buckets allocated (an abandoned
        MPI allreduce may still write them) and moves every p.grad to a fresh view, its
        values copied over (class docstring, gradient_as_bucket_view)."""
        self.buried.extend(self._flats)
        _BURIED.extend(self._flats)  # also past close(), until the process exits
        self._make_views()

    def close(self) -> None:
        """Removes the hooks and frees the bucketer (before ctx.finalize())."""
        for h in self._handles:
            h.remove()
        self._handles, self._accs = [], []
        if self._packed_at_close is None:
            self._packed_at_close = self.packed_bytes
        for b in self.bucketers:
            b.free()
        if self._plane is not None:
            self._plane.free()


def recover(ctx: Context, averager: Optional["GradAverager"] = None,
            registry: Optional[StateRegistry] = None) -> int:
    """After FtrtRecover: abandons the averager's step (reset()), calls ftrt_recover() until
    the trainers are whole again (Context.recover()), which writes the resumed state straight
    into the registered tensors, checks that none of them moved (registry.verify()), and
    returns the step to resume at. Raises FtrtNoSpare / FtrtCoordLost / FtrtAborted /
    FtrtMPIError when the job cannot go on."""
    if averager is not None:
        averager.reset()
    step = ctx.recover()
    if registry is not None:
        registry.verify()
    return step
