"""PyTorch for ftrt: the high-level API, FaultTolerant, and the helpers it is built from, all
re-exported here (state registration: ftrt/pytorch_state.py; overlapped gradient averaging and
recovery, GradAverager and recover(): ftrt/pytorch_grad.py; eMFU's inputs:
ftrt/pytorch_flops.py).

High level (docs/pytorch.md; the class docstring):

    ft = ftrt.pytorch.FaultTolerant(model, opt, scheduler=sched)   # joins the job, restores
    for step in ft.steps(total_steps):                  # resumes after restore / recovery
        x, y = get_batch(step, ft.data_rank)
        opt.zero_grad()
        loss_fn(model(x), y).backward()                 # p.grad = the mean over the trainers
        ft.step()                                       # optimizer, scheduler, recovery

Low level:

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
 - Devices: CPU tensors, and CUDA tensors of one device with libftrt_gpu loaded (FTRT_LIB:
   GradAverager raises FtrtNotSupported otherwise). CUDA tensors are registered as device
   regions (REGION_DEVICE). CUDA gradients are averaged by the GPU bucketer (ftrt_gpu.h): each
   hook records an event on the current CUDA stream (autograd's stream for that gradient) and
   the plane's NCCL collectives wait for it on the device, as DDP's reducer does; wait() makes
   the current stream wait for every bucket and then waits on the host. FaultTolerant takes
   CUDA models (one device): see "Threads" for how backward() ends the averaging there, and
   the FaultTolerant docstring for host synchronizations before step().
 - Threads: the data plane belongs to the thread that called ftrt.init() (the C API's rule).
   A hook that runs there marks its gradient with ftrt_bucketer_ready(); one that runs on any
   other thread hands it over. On CPU, autograd runs the hooks on the thread that called
   backward(), so only a backward() run on a worker thread posts, with
   ftrt_bucketer_ready_from_any_thread(): the owning thread applies it (and starts the buckets
   it completes) in its next ready() or in wait(). Autograd runs the hooks of CUDA tensors on
   its own device threads while the owning thread is blocked in backward(), so there the hook
   calls ftrt_gpu_bucketer_ready_from_any_thread(), which starts the buckets it completes on
   that device thread: communication overlaps the backward pass. (In the first step of each
   epoch the NCCL communicator does not exist yet and only the owning thread may build it, so
   that step's buckets start in wait(), unless connect() built it first: FaultTolerant
   connects at start, after each recovery and at each step().) wait() belongs to the owning
   thread, after every backward() of the step returned. With sync_in_backward the end-of-pass
   callback is queued by the first hook of the pass (on CUDA from whichever thread runs it).
   On the owning thread it ends the averaging (wait()). On autograd's device thread (CUDA) it
   marks the parameters without a gradient (zeros) from there and makes the caller's current
   stream wait for every bucket, with ftrt_gpu_bucketer_order_from_any_thread(): autograd runs
   final callbacks under the streams that were current where backward() was called
   (GraphTask::exec_post_processing in torch/csrc/autograd/engine.cpp, since
   pytorch/pytorch#57833, torch 1.10), so what the caller queues next reads the mean in stream
   order; wait() then only waits on the host (ftrt_bucketer_wait_all) and reports the step's
   errors. When it cannot order (FTRT_ESTATE: a bucket left to the owning thread; a failed
   step), wait() ends the averaging, and p.grad is local until then (synced is False).
"""
import atexit
import os
import ctypes
import pickle
import struct
import sys
from typing import Any, Dict, Iterator, Optional, Sequence, Union

import torch

from . import Context, Config, _lib
from . import pytorch_buffers as _buffers
from . import pytorch_flops as _flops
from .pytorch_gpu import cuda_device as _cuda_device
from .pytorch_grad import GradAverager, recover
from .pytorch_state import (StateRegistry, init_optimizer_state, region_name, register_layout,
                            register_state)
from . import pytorch_zero as _zero_mod
from .pytorch_zero import LocalGrads, ZeroOptimizer

__all__ = ["FaultTolerant", "init_process", "step_seed", "PyState",
           "init_optimizer_state", "register_state", "StateRegistry", "GradAverager",
           "recover", "region_name", "ZeroOptimizer"]

# ------------------------------------------------------------------------------------------
# The high-level API: FaultTolerant (model + optimizer + the rest of the training state)
# ------------------------------------------------------------------------------------------

_M64 = (1 << 64) - 1


def _mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _refuse_fold(config: Optional[Config], ctx: Optional[Context]) -> None:
    """NotImplementedError, before the job is joined, under FTRT_NO_SPARE=fold: FaultTolerant
    trains one data rank per process, and a fold gives a survivor two (the C API can:
    ftrt_data_ranks(), ftrt_allreduce_ordered(); examples/train_mlp.c --ordered)."""
    if ctx is not None:
        return  # (the caller's context: its configuration is the caller's)
    cfg = config if config is not None else Config.from_env()
    if cfg.no_spare == _lib.NO_SPARE_FOLD:
        raise NotImplementedError(
            "FaultTolerant trains one data rank per process, and FTRT_NO_SPARE=fold would give "
            "a survivor two: use FTRT_NO_SPARE=shrink or stop (fold needs the application to "
            "compute every data rank it holds: the C API's ftrt_data_ranks() and "
            "ftrt_allreduce_ordered(); docs/detection-and-recovery.md \"No spare left\")")


def step_seed(seed: int, rank: int, step: int) -> int:
    """The seed FaultTolerant(rng=True) gives torch's default generator (and CUDA's) at the
    start of step `step` on data rank `rank` (the logical rank as numbered at the job's start:
    FaultTolerant.data_rank): a splitmix64 hash of (seed, rank, step), 63 bits. A pure
    function, so a redone step, a hot spare that took `rank` over, or a trainer renumbered by a
    shrink draws the same dropout masks and random numbers. Use it to seed other generators
    per step."""
    z = _mix64((int(seed) * 0x9E3779B97F4A7C15 + 0x6674727472) & _M64)
    z = _mix64(z ^ (((int(rank) + 1) * 0xD1B54A32D192ED03) & _M64))
    z = _mix64(z ^ (((int(step) + 1) * 0x8CB92BA72F3D8DD7) & _M64))
    return z & ((1 << 63) - 1)


class PyState:
    """Small Python state in a fixed-capacity uint8 tensor (`tensor`), meant to be registered
    as a REPLICATED region so that it travels with the checkpoints and the in-memory recoveries
    like the parameters. Layout: 8-byte magic b"FTRTPY01", little-endian uint64 length, then
    the pickle (protocol 4). pack() raises ValueError when the pickle does not fit."""

    MAGIC = b"FTRTPY01"
    HEADER = 16

    def __init__(self, capacity: int = 1 << 16) -> None:
        capacity = int(capacity)
        if capacity < 256:
            raise ValueError("state capacity must be at least 256 bytes")
        self.capacity = capacity
        self.tensor = torch.zeros(capacity, dtype=torch.uint8)
        mem = (ctypes.c_char * capacity).from_address(self.tensor.data_ptr())
        self._view = memoryview(mem).cast("B")
        self.used = 0

    def pack(self, obj: Any) -> None:
        data = pickle.dumps(obj, protocol=4)
        n = len(data)
        if self.HEADER + n > self.capacity:
            raise ValueError(f"the Python training state pickles to {n} bytes, more than the "
                             f"{self.capacity - self.HEADER} that fit: pass a larger "
                             f"state_capacity (bytes)")
        self._view[self.HEADER:self.HEADER + n] = data
        struct.pack_into("<8sQ", self._view, 0, self.MAGIC, n)
        self.used = n

    def unpack(self) -> Any:
        """The object last packed (here or, after a restore, by the rank it came from), or
        None when the tensor holds none."""
        magic, n = struct.unpack_from("<8sQ", self._view, 0)
        if magic != self.MAGIC:
            return None
        if n > self.capacity - self.HEADER:
            raise ValueError(f"Python state header names {n} bytes in a {self.capacity}-byte "
                             f"region")
        return pickle.loads(self._view[self.HEADER:self.HEADER + n])


def _stateful(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and \
        callable(getattr(obj, "load_state_dict", None))


def init_process(config: Optional[Config] = None, checkpoint_dir: Optional[str] = None,
                 report: Optional[str] = None) -> Context:
    """Joins the ftrt job (ftrt.init()) and returns the Context of a trainer (or of a hot spare
    once it has been promoted: it waits in here until then). In the coordinator and in a spare
    that was never needed, the job is over when ftrt.init() returns: the context is finalized
    and the process exits (SystemExit: status 0, or 1 with a message when the job failed).
    An init error (FtrtConfigError, FtrtCoordLost, ...) also exits with status 1.
    config: an ftrt.Config (default Config.from_env(), i.e. defaults + FTRT_* environment);
    checkpoint_dir, report: set its ckpt_dir and report_file."""
    from . import init as _ftrt_init
    cfg = config if config is not None else _lib.Config.from_env()
    if checkpoint_dir:
        cfg.set_str("ckpt_dir", str(checkpoint_dir))
    if report:
        cfg.set_str("report_file", str(report))
    try:
        ctx = _ftrt_init(cfg)
    except _lib.FtrtError as e:
        raise SystemExit(f"ftrt: {e}")
    if ctx.is_trainer:
        return ctx
    ctx.finalize()
    raise SystemExit(0)


def _forget_scaler_step(scaler: Any) -> None:
    """Drops what a GradScaler (torch.cuda.amp / torch.amp) noted about the abandoned step:
    its per-optimizer stage (unscale_() already called) and found-inf tensors, which update()
    would otherwise clear (GradScaler keeps them in _per_optimizer_states, a defaultdict that
    refills itself). Other scalers are left alone."""
    states = getattr(scaler, "_per_optimizer_states", None)
    if isinstance(states, dict):
        states.clear()


class FaultTolerant:
    """Makes a single-process PyTorch training loop a fault-tolerant data-parallel one.

        ft = ftrt.pytorch.FaultTolerant(model, optimizer, scheduler=sched)
        for step in ft.steps(total_steps):
            x, y = batch(step, ft.rank, ft.world_size)  # this trainer's minibatch of the step
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()           # p.grad = the mean over the trainers
            ft.step()                                 # optimizer, scheduler(s), bookkeeping

    The constructor joins the job (init_process(): the coordinator and an unused spare exit
    in there; a hot spare waits there, model built, until it takes a dead trainer's place),
    registers the training state with ftrt and restores it: from the newest committed
    checkpoint on a relaunch, from a survivor in a promoted spare. The state is everything
    step() changes: the model's parameters and buffers, the optimizer's state tensors and its
    param_groups' hyperparameters (lr, ... as a scheduler sets them), the schedulers' and the
    scaler's state_dict(), and `extra_state`; all of it is REPLICATED (the same on every
    trainer). steps() yields the step numbers from where the job stands to total_steps;
    step() ends the gradient averaging, steps the optimizer (through the scaler when one is
    given) and the schedulers, records the step (ftrt_step_done), stores the Python state and
    takes the periodic checkpoint. When a trainer fails, step() recovers in place (a hot spare
    takes the dead trainer's logical rank, the state of the most advanced survivor is restored
    into every trainer's tensors and Python objects) and returns False; steps() then goes on
    at the step ftrt resumes at. The loop needs no try/except.

    CUDA (a model on one device, libftrt_gpu loaded): gradients are averaged by the NCCL plane
    while backward() runs, and when backward() returns the current CUDA stream is ordered after
    every bucket, so work queued on it before step() (clip_grad_norm_, scaler.unscale_) reads
    the mean; step() waits on the host for the buckets before the optimizer. The host may wait
    for that stream between backward() and step() (loss.item(), a norm's .item()): were a
    trainer to die then, the NCCL plane aborts its collectives as soon as this rank learns of
    the failure (a thread of the plane, woken by ftrt's agent thread), the wait returns a value
    computed from gradients that are not the mean, and step() recovers and returns False: use
    such a value only once step() returned True.

    Mixed precision: gradients are averaged in their own dtype (float32, float64, bfloat16,
    float16; one bucketer per dtype: GradAverager). Under torch.autocast the parameters, and
    so the gradients, stay float32; a model converted with model.to(torch.bfloat16) has its
    gradients reduced in bfloat16 (docs/pytorch.md, "Mixed precision"). A GradScaler's
    per-step bookkeeping (unscale_() called, inf checks) is dropped when a recovery abandons
    the step, so the redone step may call scaler.unscale_() again.

    Arguments (all after `optimizer` by keyword):
      model, optimizer: a torch.nn.Module whose parameters are all on the CPU, or all on one
        CUDA device with libftrt_gpu loaded (FTRT_LIB; FtrtNotSupported otherwise,
        NotImplementedError for other device types, ValueError for a mix), and its
        torch.optim optimizer (state tensors are created up front: init_optimizer_state()).
        Parameters and optimizer state must be updated in place (torch.optim does). On CUDA
        they are registered as device regions and the gradients averaged by the NCCL plane
        (module docstring, "Devices" and "Threads"). A ZeroOptimizer (ftrt/pytorch_zero.py,
        ZeRO stage 1 or 2) shards the optimizer state over the trainers: it is bound here
        once the logical rank is known (the parameters become views of its flat buffer),
        its state registered SHARDED (partner replicas: FTRT_SHARD_REPLICA_EVERY), its shard
        cut again from the parameters after every restore and recovery; at stage 2 the
        gradients are not averaged in backward() (p.grad stays local) but reduce-scattered
        in step().
      scheduler: an LR scheduler, or a list of them, stepped once per step() after the
        optimizer (do not call their step() yourself). Schedulers stepped otherwise (per
        epoch, ReduceLROnPlateau) go in extra_state, and you step them.
      scaler: a gradient scaler (torch.cuda.amp.GradScaler or anything with step(optimizer),
        update(), state_dict(), load_state_dict()): step() calls scaler.step(optimizer) and
        scaler.update() instead of optimizer.step(). Use scaler.scale(loss).backward().
      extra_state: a dict of small picklable Python values (counters, a data cursor, the
        best validation loss) and of objects with state_dict()/load_state_dict(); also
        `ft.state`. step() stores it with the step: change it before step() (a step that a
        recovery abandons rolls those changes back). Keys must not change type of entry.
      seed, rng: with rng=True (default) torch's default generator (and CUDA's, when
        available) is reseeded at the start of every step with step_seed(seed, rank, step),
        so dropout and other random ops are a function of (seed, logical rank, step).
      checkpoint_every: checkpoint the state after every K steps (0: never; recoveries do
        not need checkpoints, relaunches do). checkpoint_dir, report, config: for
        init_process() (ignored with ctx). ctx: an existing trainer Context (then finalizing
        it is the caller's business).
      bucket_cap_mb: gradient bucket size, MiB (DDP's default 25; the first bucket 1 MiB).
      gradient_as_bucket_view: True makes every p.grad a view into its gradient bucket
        (DDP's option of the same name, default False): buckets are reduced in place, with
        no pack and unpack copies. zero_grad(set_to_none=True) costs one copy per gradient
        per step (it is copied back into its view, as DDP does); set_to_none=False keeps the
        zero-copy path. GradAverager's docstring has the details, recoveries included.
      broadcast_buffers: DDP's option of the same name (BatchNorm's running statistics and
        every other buffer; ftrt/pytorch_buffers.py). True (default): after each step's
        gradient averaging logical rank 0's buffers are broadcast to every trainer
        (Context.broadcast, all buffers packed in one collective through host memory), so
        they are identical everywhere, registered REPLICATED and checked against silent data
        corruption like the parameters. False: each trainer keeps its own, registered
        REPLICATED no more but SHARDED by logical rank (checkpointed per rank; a promoted
        spare gets them from the partner replica, so set FTRT_SHARD_REPLICA_EVERY or
        checkpoint_every, or a kill rolls back to the last checkpoint). Either way the
        buffers of the last completed step are put back before a recovery. Modules that
        need a torch.distributed process group (SyncBatchNorm) raise ValueError here,
        naming the module. At the first step of a job run every replicated region is
        compared between the trainers and RuntimeError names any that differ.
      state_capacity: bytes reserved for the pickled Python state (default 64 KiB).
      flops_per_step, peak_flops: for the report's eMFU. By default (None) both are found
        at this process's first step: its FLOPs are counted (FlopCounterMode where this torch
        has it, an analytic count otherwise) and the peak FLOP/s of one rank is
        FTRT_PEAK_FLOPS (or config's peak_flops), else the datasheet peak of the GPU model
        for the dtype in use, else, on the CPU, the upper bound of libftrt's table
        (ftrt.cpu_peak_flops(): cores x clock x FLOPs per cycle of the widest unit for the
        dtype) split among the trainers of this host (ctx.host_trainers()); logical rank 0
        prints how each was found, with a matrix-product rate measured here before joining
        the job (about 0.1 s) for comparison (ftrt.pytorch_flops). A number > 0 is used as given; flops_per_step=0 turns eMFU off.
      verbose: logical rank 0 prints a line when it resumes or recovers.

    Attributes: rank, world_size, epoch, step_count (steps done: the step to run next),
    restored (state came from a checkpoint or a survivor at start), recoveries, drained (this
    process was drained: step() closed and raised SystemExit(0)), state
    (extra_state), ctx, averager (GradAverager), registry (StateRegistry), buffers
    (pytorch_buffers.BufferSync), flop_count and peak
    (eMFU's inputs and how they were found), cuda_device (the parameters' CUDA device index,
    None on the CPU).
    """

    _STATE_VERSION = 1

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
                 scheduler: Union[Any, Sequence[Any], None] = None, scaler: Any = None,
                 extra_state: Optional[Dict[str, Any]] = None, seed: int = 0, rng: bool = True,
                 checkpoint_every: int = 0, checkpoint_dir: Optional[str] = None,
                 report: Optional[str] = None, config: Optional[Config] = None,
                 ctx: Optional[Context] = None, bucket_cap_mb: float = 25.0,
                 state_capacity: int = 1 << 16, flops_per_step: Optional[float] = None,
                 peak_flops: Optional[float] = None, verbose: bool = True,
                 gradient_as_bucket_view: bool = False, broadcast_buffers: bool = True) -> None:
        if scheduler is None:
            self.schedulers = []
        elif isinstance(scheduler, (list, tuple)):
            self.schedulers = list(scheduler)
        else:
            self.schedulers = [scheduler]
        if extra_state is None:
            extra_state = {}
        if not isinstance(extra_state, dict):
            raise TypeError("extra_state must be a dict")
        if int(checkpoint_every) < 0 or not float(bucket_cap_mb) > 0:
            raise ValueError("checkpoint_every must be >= 0 and bucket_cap_mb > 0")
        # CPU, or one CUDA device with libftrt_gpu loaded: refused here, before the job is
        # joined (ValueError: a mix; NotImplementedError: another device type;
        # FtrtNotSupported: CUDA without libftrt_gpu)
        _buffers.check_modules(model)  # SyncBatchNorm and the like: ValueError naming the module
        trained = [p for p in model.parameters() if p.requires_grad]
        self.cuda_device = _cuda_device(trained) if trained else None
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.state = extra_state
        self.seed, self.rng = int(seed), bool(rng)
        self.checkpoint_every = int(checkpoint_every)
        self.flops_per_step = float(flops_per_step or 0.0)
        self._emfu = _flops.EmfuInputs(model, flops_per_step, peak_flops, config)
        self.verbose = verbose
        self.restored, self.recoveries = False, 0
        self.drained = False  # this process was drained: step() closed and raised SystemExit
        self.total_steps: Optional[int] = None
        self._closed, self._stepped, self._step = False, True, 0
        self._seed_cuda = torch.cuda.is_available()
        # Everything that does not need the job first: a hot spare then waits ready.
        self._zero = optimizer if isinstance(optimizer, ZeroOptimizer) else None
        if self._zero is None:
            init_optimizer_state(optimizer)  # (a ZeroOptimizer's, once its shard is known)
        self._emfu.measure_now()  # a matmul rate beside the CPU's peak in the log (not the peak)
        self._pystate = PyState(state_capacity)
        _refuse_fold(config, ctx)  # before the job is joined
        self._owns_ctx = ctx is None
        self.ctx = init_process(config, checkpoint_dir, report) if ctx is None else ctx
        atexit.register(self._close_at_exit)
        ctx = self.ctx
        self._rank, self._size, self._data = ctx.rank, ctx.size, ctx.data_rank
        self._emfu.ranks_sharing = ctx.host_trainers()  # the CPU's peak is split among them
        if self._zero is not None:  # the parameters become views of the flat partition
            self._zero.bind(ctx)
        self.buffers = _buffers.BufferSync(model, broadcast_buffers)
        self.registry = register_state(
            ctx, model, optimizer if self._zero is None else None,
            buffer_flags=_lib.REGION_REPLICATED if broadcast_buffers else _lib.REGION_SHARDED,
            layout=self._zero is None)
        if self._zero is not None:
            self._zero.register(ctx)  # its state: SHARDED regions "zero:g<group>:<key>"
            names = {id(p): n for n, p in model.named_parameters()}
            register_layout(ctx, self.registry, model, zero=self._zero.layout_part(names))
            if not self.checkpoint_every and \
                    os.environ.get("FTRT_SHARD_REPLICA_EVERY", "0").strip() in ("0", "-1"):
                self._log("ftrt: warning: ZeroOptimizer's state is sharded and neither "
                          "FTRT_SHARD_REPLICA_EVERY nor checkpoint_every is set: a lost "
                          "trainer's shard exists nowhere else, so a failure cannot be "
                          "recovered from (docs/pytorch.md, ZeRO)")
        ctx.register("py:state", self._pystate.tensor)
        self._compared = False  # the replicated regions compared at the first step
        self.averager: Union[GradAverager, LocalGrads]
        if self._zero is not None and self._zero.stage == 2:
            self.averager = LocalGrads()
        else:
            self.averager = GradAverager(ctx, model.parameters(),
                                         bucket_bytes=int(float(bucket_cap_mb) * (1 << 20)),
                                         sync_in_backward=True,
                                         gradient_as_bucket_view=gradient_as_bucket_view)
        if not getattr(self.averager, "sync_in_backward", True):
            # without it p.grad would still be ftrt's between backward() and step()
            raise NotImplementedError("this torch has no autograd queue_callback "
                                      "(torch.autograd.Variable._execution_engine): "
                                      "FaultTolerant cannot end the averaging in backward()")
        self._save_state()  # a valid record before anything can be recovered from here
        try:
            self.restored, self._step = ctx.restore()
        except _lib.FtrtRecover:
            self._recover()
        else:
            if self.restored:
                self.registry.refresh_layout()
                self._load_state()
                self._reshard()
                self._rank, self._size, self._data = ctx.rank, ctx.size, ctx.data_rank
                if ctx.epoch == 0:
                    self._log(f"ftrt: resumed at step {self._step} (checkpoint)")
                else:
                    self._log(f"ftrt: took over logical rank {self._rank} (epoch {ctx.epoch}): "
                              f"resuming at step {self._step}")
            self.buffers.keep()
            self._connect()  # survivors connect right after their ftrt_recover() too
        if self.checkpoint_every:
            try:  # staging memory and threads now, not at the first checkpoint
                ctx.checkpoint_prepare()
            except _lib.FtrtError as e:
                print(f"ftrt: warning: ftrt_checkpoint_prepare: {e}", file=sys.stderr)

    # -- identity -------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        """This trainer's logical rank in [0, world_size) (a promoted spare has the dead
        trainer's)."""
        return self._rank

    @property
    def world_size(self) -> int:
        """Number of trainers: one fewer after each shrink (FTRT_NO_SPARE=shrink; the gradient
        mean is then over the trainers present). It changes only across a recovery."""
        return self._size

    @property
    def data_rank(self) -> int:
        """The logical rank, as numbered at the job's start, whose data this trainer trains on
        (ctx.data_rank): rank until a shrink renumbers the ranks above a lost one. Pick the
        minibatch by it, so that a shrink skips only the lost rank's data
        (docs/detection-and-recovery.md "No spare left"); the step's RNG seed follows it."""
        return self._data

    @property
    def epoch(self) -> int:
        """ftrt's epoch: 0 at start, +1 per membership change (recovery)."""
        return self.ctx.epoch if not self._closed else self._epoch

    @property
    def step_count(self) -> int:
        """Steps done: the number of the step to run next."""
        return self._step

    def step_seed(self, step: Optional[int] = None) -> int:
        """step_seed(seed, rank, step) of this trainer (default: the current step)."""
        return step_seed(self.seed, self._data, self._step if step is None else step)

    # -- the loop -------------------------------------------------------------------------
    def steps(self, total_steps: int) -> Iterator[int]:
        """Yields the step numbers from step_count to total_steps - 1, resuming wherever a
        restore or a recovery put the job; reseeds torch's generators at each (rng=True).
        Each iteration must call step() once. When the last step is done, checks that no
        registered tensor moved and closes (ftrt_finalize(), when init_process() was ours)."""
        total_steps = int(total_steps)
        self.total_steps = total_steps
        self.ctx.set_job_info(total_steps, self.flops_per_step, self._emfu.peak_flops)
        while self._step < total_steps:
            s = self._step
            self._stepped = False
            if self.rng:
                seed = step_seed(self.seed, self._data, s)
                torch.default_generator.manual_seed(seed)
                if self._seed_cuda:
                    torch.cuda.manual_seed_all(seed)
            self._emfu.start()  # the first step in this process: counted
            try:
                yield s
            finally:
                self._emfu.abandon()  # the body raised or skipped step(): no count
            if not self._stepped:
                raise RuntimeError(f"step {s}: the loop body did not call ft.step()")
        self.registry.verify()
        self.close()

    def step(self) -> bool:
        """Ends the step: waits for the gradient averaging (normally done when backward()
        returned), optimizer.step() (or scaler.step(optimizer) and scaler.update()), each
        scheduler's step(), ftrt_step_done(), stores the Python state, and checkpoints every
        checkpoint_every steps. Returns True; False when a trainer failed and this call
        recovered instead (the step's work is abandoned and the state is that of the step
        the job resumes at, step_count). Raises FtrtNoSpare / FtrtCoordLost / FtrtAborted
        when the job cannot go on, and RuntimeError when called twice in one step. A process
        that was drained (tools/ftrt-ctl drain: its logical rank went to a hot spare) leaves
        here: this closes (ftrt_finalize()) and raises SystemExit(0), so that nothing after the
        loop runs in it (another process holds its logical rank now; catch SystemExit to do
        something of this process's own before it exits)."""
        try:
            return self._step_once()
        except _lib.FtrtDrained:
            print(f"ftrt: drained (logical rank {self._rank}) after step {self._step}: leaving "
                  "the job", flush=True)
            self.drained = True
            self.close()
            raise SystemExit(0)

    def _step_once(self) -> bool:
        """step()'s work (FtrtDrained passes through)."""
        if self._closed:
            raise RuntimeError("FaultTolerant is closed")
        if self._stepped and self.total_steps is not None:
            raise RuntimeError(f"step {self._step}: ft.step() called twice in one step")
        self._stepped = True
        s = self._step
        if self._emfu.counting:  # the averaging ended with backward (sync_in_backward)
            self._set_emfu()
        try:
            self.averager.wait()
            self.buffers.sync(self.ctx)  # rank 0's buffers, before anything is updated
        except _lib.FtrtRecover:
            self._recover()
            return False
        try:  # a ZeroOptimizer's step runs collectives
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
        except _lib.FtrtRecover:
            self._recover()
            return False
        for sch in self.schedulers:
            sch.step()
        # the Python state of step s + 1 first: ftrt_step_done() may take the partner
        # replicas' images (FTRT_SHARD_REPLICA_EVERY), py:state among the regions
        self._save_state()
        try:
            self.ctx.step_done(s)
        except _lib.FtrtRecover:  # a trainer failed during the replica refresh
            self._recover()
            return False
        self.buffers.keep()
        self._step = s + 1
        if not self._compared and not self._compare_replicas():
            return False
        if self.checkpoint_every and self._step % self.checkpoint_every == 0:
            try:
                self.ctx.checkpoint(self._step)
            except _lib.FtrtRecover:
                self._recover()
                return False
            except _lib.FtrtError as e:
                if e.errno is None:
                    raise
                print(f"ftrt: warning: logical rank {self._rank}: checkpoint at step "
                      f"{self._step} failed: {e}; training goes on", file=sys.stderr,
                      flush=True)
        return self._connect()  # CUDA: the next backward's buckets start on its threads

    def _compare_replicas(self) -> bool:
        """At the first step of a job run (epoch 0; every trainer at the same step), compares
        every REPLICATED region between the trainers, one hash each, and raises RuntimeError
        naming those that differ: state registered as replicated that is not (a buffer a module
        changes per trainer with broadcast_buffers=False missing, parameters initialized
        differently per trainer). Without this the first silent-data-corruption check would end
        the job with an anonymous "replicas disagree". Returns True; False when a trainer
        failed and this call recovered instead."""
        self._compared = True
        if self.ctx.epoch != 0:
            return True  # a promoted spare joins after the survivors compared (or skipped)
        shared = [(name, t) for name, t, _, _ in self.registry.entries
                  if self.buffers.broadcast or not name.startswith("buffer:")]
        shared.append(("py:state", self._pystate.tensor))
        try:
            bad = _buffers.region_mismatches(self.ctx, shared)
        except _lib.FtrtRecover:
            self._recover()
            return False
        if bad:
            raise RuntimeError(
                f"logical rank {self._rank}: after step {self._step - 1} these regions "
                f"registered as replicated differ between the trainers: {', '.join(bad[:8])}"
                f"{' ...' if len(bad) > 8 else ''}. Replicated state must be identical on "
                f"every trainer: give every trainer the same initial model (seed it the same), "
                f"keep buffers with broadcast_buffers=True (rank 0's each step) or make them "
                f"each trainer's own with broadcast_buffers=False, and keep extra_state the "
                f"same on every trainer")
        return True

    def _connect(self) -> bool:
        """GradAverager.connect() (CUDA: this epoch's NCCL communicator exists before the next
        backward, so its buckets start on autograd's device threads; nothing on the CPU).
        Returns True; False when a trainer failed and this call recovered instead."""
        try:
            self.averager.connect()
            return True
        except _lib.FtrtRecover:
            self._recover()
            return False

    def no_sync(self) -> Any:
        """Context manager for gradient accumulation: backward passes inside it only
        accumulate local gradients; the last backward, outside it, averages the sum."""
        return self.averager.no_sync()

    def memory(self) -> Dict[str, int]:
        """Bytes this trainer holds for its training state, by kind, host and device apart
        (pytorch_zero.state_memory(): parameters, buffers, optimizer state or this trainer's
        shard of it, gradients, the partner replicas' host images when SHARDED regions are
        registered and FTRT_SHARD_REPLICA_EVERY is not -1). Regions registered outside
        FaultTolerant are not counted."""
        sharded = []
        if self._zero is not None:
            inner = self._zero.inner
            sharded = [t for g in self._zero.groups for t in inner.state[g.shard].values()
                       if torch.is_tensor(t)] if inner is not None else []
        shard_buffers = not self.buffers.broadcast
        if shard_buffers:
            sharded += [t for n, t, _, _ in self.registry.entries if n.startswith("buffer:")]
        entries = [e for e in self.registry.entries
                   if not (shard_buffers and e[0].startswith("buffer:"))]
        entries.append(("py:state", self._pystate.tensor, 0, None))
        images = bool(sharded) and os.environ.get("FTRT_SHARD_REPLICA_EVERY", "0").strip() != "-1"
        return _zero_mod.state_memory(entries, sharded, list(self.model.parameters()),
                                      self._zero, images)

    @property
    def flop_count(self) -> Optional[_flops.FlopCount]:
        """The FLOPs counted at this process's first step (None before it, or when not
        counted: flops_per_step=0)."""
        return self._emfu.count

    @property
    def peak(self) -> Optional[_flops.Peak]:
        """The peak FLOP/s of one rank used for eMFU and how it was found (None before the
        first step, or with flops_per_step=0)."""
        return self._emfu.peak

    def _set_emfu(self) -> None:
        line = self._emfu.finish()
        self.flops_per_step = self._emfu.flops_per_step
        self.ctx.set_job_info(self.total_steps or 0, self.flops_per_step, self._emfu.peak_flops)
        self._log(line)

    # -- state ------------------------------------------------------------------------------
    def _state_obj(self) -> Dict[str, Any]:
        return {
            "version": self._STATE_VERSION,
            "param_groups": [{k: v for k, v in g.items() if k != "params"}
                             for g in self.optimizer.param_groups],
            "schedulers": [s.state_dict() for s in self.schedulers],
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "extra": {k: (True, v.state_dict()) if _stateful(v) else (False, v)
                      for k, v in self.state.items()},
        }

    def _save_state(self) -> None:
        self._pystate.pack(self._state_obj())

    def _load_state(self) -> None:
        st = self._pystate.unpack()
        if st is None or st.get("version") != self._STATE_VERSION:
            raise RuntimeError("the restored state holds no Python training state of this "
                               "version")
        groups = self.optimizer.param_groups
        if len(st["param_groups"]) != len(groups) or \
                len(st["schedulers"]) != len(self.schedulers) or \
                (st["scaler"] is None) != (self.scaler is None):
            raise RuntimeError("the restored Python state does not match this job's optimizer "
                               "param_groups, schedulers and scaler")
        for g, saved in zip(groups, st["param_groups"]):
            g.update(saved)
        for sch, sd in zip(self.schedulers, st["schedulers"]):
            sch.load_state_dict(sd)
        if self.scaler is not None:
            self.scaler.load_state_dict(st["scaler"])
        extra = st["extra"]
        for k in [k for k, v in self.state.items() if k not in extra and not _stateful(v)]:
            del self.state[k]
        for k, (is_obj, v) in extra.items():
            cur = self.state.get(k)
            if is_obj:
                if not _stateful(cur):
                    raise RuntimeError(f"extra_state[{k!r}]: the restored state holds an "
                                       f"object's state_dict, this job has {type(cur)}")
                cur.load_state_dict(v)  # type: ignore[union-attr]
            else:
                self.state[k] = v

    def _recover(self) -> None:
        """recover(), the Python state, and connect() in the new epoch (again after a failure
        met while connecting)."""
        while True:
            self.buffers.restore_last()  # the abandoned step's forward changed them
            step = recover(self.ctx, self.averager, self.registry)  # type: ignore[arg-type]
            self._reshard()
            self.buffers.keep()
            self._load_state()
            _forget_scaler_step(self.scaler)
            self._step = step
            self._rank, self._size, self._data = self.ctx.rank, self.ctx.size, self.ctx.data_rank
            self._stepped = True
            self.recoveries += 1
            self._log(f"ftrt: recovered (epoch {self.ctx.epoch}): resuming at step {step}")
            try:
                self.averager.connect()
                return
            except _lib.FtrtRecover:
                continue

    def _reshard(self) -> None:
        """A ZeroOptimizer's shard cut again from the parameters just restored."""
        if self._zero is not None:
            self._zero.reshard()

    def _log(self, msg: str) -> None:
        if self.verbose and self._rank == 0:
            print(msg, flush=True)

    # -- end ------------------------------------------------------------------------------
    def close(self) -> None:
        """Removes the gradient hooks, frees the bucketer and (when the context was made by
        init_process() here) finalizes it. Idempotent; also run at interpreter exit."""
        if self._closed:
            return
        try:
            self._epoch = self.ctx.epoch
        except _lib.FtrtError:
            self._epoch = -1
        self._closed = True
        try:
            avg = getattr(self, "averager", None)
            if avg is not None:
                avg.reset()
                avg.close()
        except _lib.FtrtError as e:
            print(f"ftrt: warning: closing the gradient averager: {e}", file=sys.stderr)
        finally:
            if self._owns_ctx:
                self.ctx.finalize()

    def _close_at_exit(self) -> None:
        try:
            self.close()
        except Exception as e:  # noqa: BLE001 (interpreter exit: report, do not raise)
            print(f"ftrt: warning: at exit: {e}", file=sys.stderr)

    def __enter__(self) -> "FaultTolerant":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
