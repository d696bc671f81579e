"""PyTorch helpers for ftrt: state registration, overlapped gradient averaging, recovery.

    import ftrt, ftrt.pytorch as ftp
    ctx = ftrt.init(cfg)                                # trainer (see ftrt's docstring)
    model = Net(); opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ftp.init_optimizer_state(opt)                       # momentum buffers exist before...
    state = ftp.register_state(ctx, model, opt)         # ...they are registered
    avg = ftp.GradAverager(ctx, model.parameters())    # hooks + ftrt bucketer
    restored, step = ctx.restore()
    while step < steps:
        try:
            opt.zero_grad()
            loss_fn(model(x), y).backward()            # buckets' allreduces start in here
            avg.wait()                                  # grads now hold the mean
            opt.step()
            ctx.step_done(step); step += 1
        except ftrt.FtrtRecover:
            step = ftp.recover(ctx, avg, state)         # params/optimizer state restored

Design notes.
 - Regions are the tensors' own storage (data_ptr, numel * element_size): the runtime reads
   them in checkpoints and writes them in ftrt_restore()/ftrt_recover() directly, so those
   tensors must never be reallocated. Model parameters and buffers are updated in place by
   torch.optim and by modules; optimizer state is created lazily by torch.optim at the first
   step(), so init_optimizer_state() creates it first (zeros, i.e. the state before any step)
   and StateRegistry.verify() checks that no registered tensor moved.
 - Gradient hooks: DDP's approach (torch/csrc/distributed/c10d/reducer.cpp) of a post-hook on
   each parameter's AccumulateGrad node (p.expand_as(p).grad_fn.next_functions[0][0]), which
   runs after the gradient has been accumulated into p.grad, so p.grad holds the step's full
   local gradient when the hook hands its memory to ftrt_bucketer_ready(). A hook on the
   tensor itself (p.register_hook) would see the incoming gradient before accumulation, not
   p.grad, and would hand over memory that autograd still has to add into p.grad. The node
   objects are kept alive here (a leaf holds its AccumulateGrad only weakly).
 - Overlap: ftrt_bucketer_ready() starts a bucket's allreduce as soon as its last gradient is
   ready, on libftrt's progress thread, while autograd computes the rest of the backward pass;
   wait() blocks for the rest. The result is written into p.grad in place (the mean: sum times
   1/N in the tensor's dtype, as DDP averages).
 - Devices: CPU tensors. CUDA tensors are registered as device regions (REGION_DEVICE; needs a
   libftrt built with CUDA, else FtrtNotSupported), but GradAverager takes CPU parameters only:
   the GPU bucketer (ftrt_gpu.h) needs libftrt_gpu and per-stream ordering and is not wired in
   here yet.
 - Threads: on CPU, autograd runs the hooks on the thread that called backward(); they must be
   the thread that called ftrt.init() (the C API's rule), which wait() checks.
"""
import hashlib
import threading

import torch

from . import _lib
from ._lib import FLOAT32, FLOAT64, REGION_REPLICATED, error_for, lib

__all__ = ["init_optimizer_state", "register_state", "StateRegistry", "GradAverager",
           "recover", "region_name"]

_NAME_MAX = 63  # bytes of a region name (ftrt_register)


def region_name(*parts):
    """A region name of at most 63 bytes from `parts` joined with ':'; longer names keep their
    first 46 bytes and get a 16-hex-digit hash of the whole name, so they stay unique."""
    name = ":".join(str(p) for p in parts)
    raw = name.encode()
    if len(raw) <= _NAME_MAX:
        return name
    digest = hashlib.sha1(raw).hexdigest()[:16]
    return raw[:46].decode(errors="ignore") + "~" + digest


def init_optimizer_state(optimizer):
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
    data_ptr at registration, optimizer state owner (param, key) or None)."""

    def __init__(self, optimizer=None):
        self.entries = []
        self.optimizer = optimizer

    @property
    def nbytes(self):
        """Total registered bytes."""
        return sum(t.numel() * t.element_size() for _, t, _, _ in self.entries)

    def verify(self):
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


def register_state(ctx, model, optimizer=None, flags=REGION_REPLICATED, buffers=True):
    """Registers a model's parameters (and buffers) and an optimizer's state tensors with
    ftrt, as regions of their own storage.

    ctx: a trainer's ftrt.Context.  model: torch.nn.Module.  optimizer: a torch.optim
    optimizer whose state exists (init_optimizer_state()), or None.
    flags: REGION_REPLICATED (default: identical on every trainer, as in data parallelism) or
    REGION_SHARDED; REGION_DEVICE is added for CUDA tensors.
    Regions, in this order (every trainer registers the same): "param:<name>" per
    model.named_parameters(), "buffer:<name>" per floating-point/integer buffer when `buffers`,
    then "optim:<param name>:<state key>" per optimizer parameter and state key (sorted).
    Every tensor must be contiguous. Returns a StateRegistry. Raises FtrtError from
    ftrt_register() (FtrtInvalid: duplicate name; FtrtNotSupported: CUDA without a CUDA
    libftrt; FtrtState: not a trainer), ValueError (non-contiguous tensor)."""
    reg = StateRegistry(optimizer)
    names = {}

    def add(name, t, owner=None):
        if not t.is_contiguous():
            raise ValueError(f"{name}: tensor is not contiguous")
        ctx.register(name, t, flags=flags)
        reg.entries.append((name, t, t.data_ptr(), owner))

    for pname, p in model.named_parameters():
        names[p] = pname
        add(region_name("param", pname), p)
    if buffers:
        for bname, b in model.named_buffers():
            if b is not None and b.numel() > 0:
                add(region_name("buffer", bname), b)
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
    return reg


class GradAverager:
    """Averages gradients over the trainers through ftrt's bucketed, overlapped allreduce,
    started from autograd hooks as gradients become ready (PyTorch DDP's approach).

    params: the parameters whose .grad to average (those with requires_grad; CPU, all float32
    or all float64, contiguous); every trainer must pass the same parameters in the same order.
    bucket_bytes / first_bucket_bytes: bucket limits in bytes (default DDP's 25 MiB / 1 MiB).
    average: True (mean, default) or False (sum).

    Per step: backward() marks each p.grad ready from its AccumulateGrad post-hook; wait()
    marks parameters that received no gradient (unused in this forward) ready with zero
    gradients, like DDP's find_unused_parameters, then waits for every bucket: p.grad holds the
    mean over the trainers. Inside no_sync() hooks do nothing (gradient accumulation over
    micro-batches; the last backward outside it averages the total).

    Memory: from its hook until wait() returns, p.grad's memory belongs to ftrt (the result is
    written into it by the progress thread): do not read or modify grads before wait().
    """

    def __init__(self, ctx, params, bucket_bytes=None, first_bucket_bytes=None, average=True):
        self.ctx = ctx
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("no parameter requires a gradient")
        dtypes = {p.dtype for p in self.params}
        if len(dtypes) != 1 or next(iter(dtypes)) not in (torch.float32, torch.float64):
            raise ValueError(f"parameters must all be float32 or all float64 (got {dtypes})")
        self.dtype = FLOAT32 if self.params[0].dtype == torch.float32 else FLOAT64
        for p in self.params:
            if p.device.type != "cpu":
                raise NotImplementedError(
                    "GradAverager takes CPU parameters; the GPU bucketer (ftrt_gpu.h, "
                    "libftrt_gpu) is not wired into the PyTorch helpers yet")
            if not p.is_contiguous():
                raise ValueError("parameters must be contiguous")
        cfg = _lib.BucketConfig.defaults()
        if bucket_bytes is not None:
            cfg.bucket_bytes = int(bucket_bytes)
        if first_bucket_bytes is not None:
            cfg.first_bucket_bytes = int(first_bucket_bytes)
        cfg.average = 1 if average else 0
        self.bucketer = ctx.bucketer([p.numel() for p in self.params], self.dtype, cfg)
        n = len(self.params)
        self._ready = [False] * n
        self._keep = [None] * n
        self._err = None
        self._enabled = True
        self._thread = threading.get_ident()
        self._bad_thread = False
        self._accs, self._handles = [], []
        for i, p in enumerate(self.params):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self._handles.append(acc.register_hook(self._make_hook(i, p)))
            self._accs.append(acc)

    @property
    def buckets(self):
        """Number of buckets the parameters were assigned to."""
        return self.bucketer.buckets

    def _make_hook(self, i, p):
        ready = lib().ftrt_bucketer_ready
        get_ident = threading.get_ident

        def hook(*_):
            if not self._enabled or self._err is not None or self._ready[i]:
                return
            if get_ident() != self._thread:
                self._bad_thread = True
                return
            g = p.grad
            if g is None or not g.is_contiguous():
                return  # handled in wait()
            self._ready[i] = True
            self._keep[i] = g
            rc = ready(self.bucketer.handle, i, g.data_ptr())
            if rc < 0:
                self._err = rc  # the backward pass goes on; wait() raises it
        return hook

    class _NoSync:
        def __init__(self, avg):
            self.avg = avg

        def __enter__(self):
            self.avg._enabled = False

        def __exit__(self, *exc):
            self.avg._enabled = True

    def no_sync(self):
        """Context manager: backward passes inside it only accumulate local gradients."""
        return self._NoSync(self)

    def wait(self):
        """Ends the step's gradient averaging (see the class docstring). Raises FtrtRecover
        (grads are partly reduced: call recover() and redo the step), FtrtNoSpare /
        FtrtCoordLost / FtrtAborted, other FtrtError; RuntimeError when the hooks ran on
        another thread than the one that created this averager."""
        if self._bad_thread:
            self.reset()
            raise RuntimeError("autograd ran the gradient hooks on another thread than the one "
                               "that called ftrt.init() (CPU tensors only are supported)")
        ready = lib().ftrt_bucketer_ready
        if self._err is None:
            for i, done in enumerate(self._ready):
                if done:
                    continue
                p = self.params[i]
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                elif not p.grad.is_contiguous():
                    p.grad = p.grad.contiguous()
                self._ready[i] = True
                self._keep[i] = p.grad
                rc = ready(self.bucketer.handle, i, p.grad.data_ptr())
                if rc < 0:
                    self._err = rc
                    break
        if self._err is not None:
            err = self._err
            self.reset()
            raise error_for(err, "ftrt_bucketer_ready")
        try:
            self.bucketer.wait_all()
        finally:
            self._clear()

    def _clear(self):
        n = len(self.params)
        self._ready = [False] * n
        self._keep = [None] * n
        self._err = None
        self._bad_thread = False

    def reset(self):
        """Abandons this step's averaging (waits for the buckets already started) so that the
        step can be redone; recover() calls it."""
        self.bucketer.reset()
        self._clear()

    def close(self):
        """Removes the hooks and frees the bucketer (before ctx.finalize())."""
        for h in self._handles:
            h.remove()
        self._handles, self._accs = [], []
        self.bucketer.free()


def recover(ctx, averager=None, registry=None):
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
