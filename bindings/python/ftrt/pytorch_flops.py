"""What eMFU needs from a PyTorch job, found without asking the user: the model FLOPs one
trainer does per step, counted once, and the peak FLOP/s of one rank for the dtype in use.

FLOPs per step (StepFlopCounter): torch's own counter, torch.utils.flop_counter.FlopCounterMode
(torch >= 2.1), where the installed torch has it; an analytic count otherwise (Debian 12's
torch 1.13). Both count the matrix products of one step's forward and backward passes, 2 FLOPs
per multiply-add; element-wise work (activations, norms, the optimizer) is not counted, as in
the model FLOPs of MFU (PaLM, Chowdhery et al. 2022, appendix B).

The analytic count (AnalyticFlopCounter) is a torch.overrides.TorchFunctionMode that sees each
call of these functions during the step and counts from the shapes:
  - F.linear, torch.matmul / @, mm, bmm, addmm, baddbmm, addbmm: 2 x output elements x the
    contracted size (the bias add is not counted);
  - F.conv1d/2d/3d: 2 x output elements x weight[1:] elements; F.conv_transpose*: 2 x input
    elements x weight[1:] elements (FlopCounterMode's formulas);
  - attention: F.multi_head_attention_forward (nn.MultiheadAttention: the q, k, v and output
    projections and the two products QK^T and AV) and F.scaled_dot_product_attention
    (torch >= 2.0: QK^T and AV);
  - torch.einsum with two operands and no ellipsis: 2 x the product of every index's size.
The backward pass of such a product computes one product of the same size per operand that
needs a gradient (dX = dY W, dW = dY^T X), so each call adds its forward FLOPs once more per
operand with requires_grad, when grad mode is on. That is what autograd runs and what
FlopCounterMode counts in backward. Not counted: recurrent layers (nn.RNN/LSTM/GRU run through
torch._VF, which the mode does not see: StepFlopCounter names them), functions other than the
above, and the recomputation of activation checkpointing (model FLOPs leave it out; segments
checkpointed with use_reentrant=True run their forward under no_grad, so their backward is
missed: pass flops_per_step then).

Peak FLOP/s (peak_flops()): FTRT_PEAK_FLOPS when set; on CUDA, the dense peak of the device
model for the dtype from GPU_PEAKS (NVIDIA's datasheets; scaled by the SM count for a MIG
slice); on the CPU an upper bound of the hardware from libftrt's table
(ftrt.cpu_peak_flops(), ftrt_cpu_peak_flops() in C: cores x clock x FLOPs per cycle of the
widest vector or matrix unit /proc/cpuinfo shows for the dtype), split among the ranks that
share the host's cores (FaultTolerant passes ctx.host_trainers(): the trainers on this host,
counted from below). A matrix product measured in this process (measure_cpu_peak()) is kept
beside it as a sanity figure for the log, never as the peak: on shared cores it is a share,
and the BLAS torch was built with may be slower than the kernels of the model (Debian's torch
multiplies matrices with the reference BLAS but runs convolutions with oneDNN). When the
FLOPs come in several dtypes the peak is the time-weighted one, total / sum(flops_d / peak_d).
"""
import math
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["FlopCount", "AnalyticFlopCounter", "StepFlopCounter", "EmfuInputs",
           "have_flop_counter_mode",
           "Peak", "GpuPeak", "GPU_PEAKS", "peak_flops", "cuda_peak", "cpu_peak",
           "measure_cpu_peak", "dtype_key"]

# (forward FLOPs, tensors whose requires_grad each adds a backward product of that size)
_Parts = List[Tuple[float, Sequence[Any]]]


def _numel(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _arg(args: Sequence[Any], kwargs: Mapping[str, Any], i: int, name: str) -> Any:
    return args[i] if len(args) > i else kwargs.get(name)


def _matmul(args: Sequence[Any], kwargs: Mapping[str, Any], out: Any) -> _Parts:
    a, b = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "other")
    if b is None:
        b = kwargs.get("mat2")
    return [(2.0 * out.numel() * a.shape[-1], (a, b))]


def _rmatmul(args: Sequence[Any], kwargs: Mapping[str, Any], out: Any) -> _Parts:
    return _matmul((args[1], args[0]), {}, out)  # x.__rmatmul__(y) is y @ x


def _addmm(args: Sequence[Any], kwargs: Mapping[str, Any], out: Any) -> _Parts:
    m1 = _arg(args, kwargs, 1, "mat1")
    m2 = _arg(args, kwargs, 2, "mat2")
    if m1 is None:  # baddbmm names them batch1, batch2
        m1, m2 = kwargs.get("batch1"), kwargs.get("batch2")
    return [(2.0 * out.numel() * m1.shape[-1], (m1, m2))]


def _addbmm(args: Sequence[Any], kwargs: Mapping[str, Any], out: Any) -> _Parts:
    b1, b2 = _arg(args, kwargs, 1, "batch1"), _arg(args, kwargs, 2, "batch2")
    return [(2.0 * b1.shape[0] * out.numel() * b1.shape[-1], (b1, b2))]


def _linear(args: Sequence[Any], kwargs: Mapping[str, Any], out: Any) -> _Parts:
    x, w = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "weight")
    return [(2.0 * out.numel() * x.shape[-1], (x, w))]


def _conv(args: Sequence[Any], kwargs: Mapping[str, Any], out: Any) -> _Parts:
    x, w = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "weight")
    return [(2.0 * out.numel() * _numel(w.shape[1:]), (x, w))]


def _conv_transpose(args: Sequence[Any], kwargs: Mapping[str, Any], out: Any) -> _Parts:
    x, w = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "weight")
    return [(2.0 * x.numel() * _numel(w.shape[1:]), (x, w))]


def _einsum(args: Sequence[Any], kwargs: Mapping[str, Any], out: Any) -> _Parts:
    eq = args[0]
    ops = list(args[1]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else \
        list(args[1:])
    lhs = eq.replace(" ", "").split("->")[0].split(",")
    if len(ops) != 2 or len(lhs) != 2 or "." in eq:
        raise _NotCounted("einsum other than two operands without '...'")
    sizes: Dict[str, int] = {}
    for sub, t in zip(lhs, ops):
        for letter, n in zip(sub, t.shape):
            sizes[letter] = int(n)
    return [(2.0 * _numel(sizes.values()), tuple(ops))]


def _sdpa(args: Sequence[Any], kwargs: Mapping[str, Any], out: Any) -> _Parts:
    q, k, v = (_arg(args, kwargs, i, n) for i, n in enumerate(("query", "key", "value")))
    rows = _numel(q.shape[:-1]) * k.shape[-2]  # batch x heads x L x S
    scores = _Grad(q.requires_grad or k.requires_grad)
    return [(2.0 * rows * q.shape[-1], (q, k)), (2.0 * rows * v.shape[-1], (scores, v))]


def _mha(args: Sequence[Any], kwargs: Mapping[str, Any], out: Any) -> _Parts:
    """F.multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
    in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight,
    out_proj_bias, training, key_padding_mask, need_weights, attn_mask,
    use_separate_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, static_k, static_v,
    ...): query [L, (N,) E], key and value [S, (N,) Ek / Ev]."""
    names = ("query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight",
             "in_proj_bias", "bias_k", "bias_v", "add_zero_attn", "dropout_p",
             "out_proj_weight", "out_proj_bias", "training", "key_padding_mask",
             "need_weights", "attn_mask", "use_separate_proj_weight", "q_proj_weight",
             "k_proj_weight", "v_proj_weight", "static_k", "static_v")
    a = {n: _arg(args, kwargs, i, n) for i, n in enumerate(names)}
    q, k, v = a["query"], a["key"], a["value"]
    e = q.shape[-1]
    n = _numel(q.shape[1:-1])
    L, S = q.shape[0], k.shape[0]
    if a["bias_k"] is not None:
        S += 1
    if a["add_zero_attn"]:
        S += 1
    w_in = a["in_proj_weight"] if not a["use_separate_proj_weight"] else None
    wq = a["q_proj_weight"] if w_in is None else w_in
    wk = a["k_proj_weight"] if w_in is None else w_in
    wv = a["v_proj_weight"] if w_in is None else w_in
    parts: _Parts = [(2.0 * L * n * e * e, (q, wq))]
    kq = _Grad(q.requires_grad or wq.requires_grad)
    kk = _Grad(k.requires_grad or wk.requires_grad) if a["static_k"] is None else \
        a["static_k"]
    kv = _Grad(v.requires_grad or wv.requires_grad) if a["static_v"] is None else \
        a["static_v"]
    if a["static_k"] is None:
        parts.append((2.0 * k.shape[0] * n * k.shape[-1] * e, (k, wk)))
    if a["static_v"] is None:
        parts.append((2.0 * v.shape[0] * n * v.shape[-1] * e, (v, wv)))
    scores = _Grad(kq.requires_grad or kk.requires_grad)
    parts += [(2.0 * n * L * S * e, (kq, kk)), (2.0 * n * L * S * e, (scores, kv))]
    att = _Grad(scores.requires_grad or kv.requires_grad)
    parts.append((2.0 * L * n * e * e, (att, a["out_proj_weight"])))
    return parts


@dataclass
class _Grad:
    """Stands for an intermediate tensor in a formula: does it need a gradient."""
    requires_grad: bool


class _NotCounted(Exception):
    """A call of a counted function that the formulas do not cover (named in the log)."""


def _handlers() -> Dict[Any, Tuple[str, Callable[..., _Parts]]]:
    T = torch.Tensor
    table: List[Tuple[str, Callable[..., _Parts], Sequence[Any]]] = [
        ("matmul", _matmul, (torch.matmul, T.matmul, T.__matmul__, torch.mm, T.mm, torch.bmm,
                             T.bmm)),
        ("matmul", _rmatmul, (T.__rmatmul__,)),
        ("addmm", _addmm, (torch.addmm, T.addmm, torch.baddbmm, T.baddbmm)),
        ("addbmm", _addbmm, (torch.addbmm, T.addbmm)),
        ("linear", _linear, (F.linear,)),
        ("conv", _conv, (F.conv1d, F.conv2d, F.conv3d)),
        ("conv_transpose", _conv_transpose, (F.conv_transpose1d, F.conv_transpose2d,
                                             F.conv_transpose3d)),
        ("einsum", _einsum, (torch.einsum,)),
        ("attention", _mha, (F.multi_head_attention_forward,)),
        ("attention", _sdpa, tuple(f for f in (getattr(F, "scaled_dot_product_attention",
                                                       None),) if f is not None)),
    ]
    return {f: (name, h) for name, h, funcs in table for f in funcs}


def dtype_key(dtype: torch.dtype) -> str:
    """The name a dtype has in GPU_PEAKS and in FlopCount.by_dtype: "fp64", "fp32", "bf16",
    "fp16", or str(dtype) for others."""
    return {torch.float64: "fp64", torch.float32: "fp32", torch.bfloat16: "bf16",
            torch.float16: "fp16"}.get(dtype, str(dtype).replace("torch.", ""))


def _autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The autocast dtype in force for `device_type` ("cpu", "cuda"), or None."""
    try:
        on = torch.is_autocast_enabled(device_type)  # torch >= 2.4; TypeError before
        return torch.get_autocast_dtype(device_type) if on else None
    except (TypeError, AttributeError, RuntimeError):
        pass
    if device_type == "cuda" and torch.is_autocast_enabled():
        return torch.get_autocast_gpu_dtype()
    if device_type == "cpu" and torch.is_autocast_cpu_enabled():
        return torch.get_autocast_cpu_dtype()
    return None


class AnalyticFlopCounter(TorchFunctionMode):
    """The analytic count (module docstring): while entered (`with counter:`), every call of
    the covered functions adds its forward FLOPs and, in grad mode, one more forward's worth
    per operand that requires a gradient (its backward). Results: flops (total), by_dtype
    ({(device type, dtype_key): FLOPs}, the dtype being autocast's where it is on), by_op
    ({"linear": FLOPs, ...}) and not_counted ({what: calls}). Thread: the thread that entered
    it (torch function modes are thread-local). The functions' results are untouched."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0.0
        self.by_dtype: Dict[Tuple[str, str], float] = {}
        self.by_op: Dict[str, float] = {}
        self.not_counted: Counter[str] = Counter()
        self._handlers = _handlers()

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: Optional[Dict[str, Any]] = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        h = self._handlers.get(func)
        if h is not None:
            try:
                self._add(h[0], h[1](args, kwargs, out[0] if isinstance(out, tuple) else out),
                          args, kwargs)
            except (_NotCounted, AttributeError, IndexError, TypeError, ValueError) as e:
                self.not_counted[f"{h[0]}: {e}" if isinstance(e, _NotCounted) else h[0]] += 1
        return out

    def _add(self, op: str, parts: _Parts, args: Sequence[Any],
             kwargs: Mapping[str, Any]) -> None:
        grad = torch.is_grad_enabled()
        first = next(t for t in list(args) + list(kwargs.values()) if torch.is_tensor(t)) \
            if op != "einsum" else parts[0][1][0]
        dtype = _autocast_dtype(first.device.type) or first.dtype
        key = (first.device.type, dtype_key(dtype))
        total = 0.0
        for fwd, operands in parts:
            total += fwd
            if grad:
                total += fwd * sum(1 for t in operands
                                   if t is not None and getattr(t, "requires_grad", False))
        self.flops += total
        self.by_dtype[key] = self.by_dtype.get(key, 0.0) + total
        self.by_op[op] = self.by_op.get(op, 0.0) + total


def have_flop_counter_mode() -> bool:
    """True when this torch has torch.utils.flop_counter.FlopCounterMode (torch >= 2.1)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode  # noqa: F401
        return True
    except ImportError:
        return False


@dataclass
class FlopCount:
    """One step's model FLOPs: total (the figure used: FlopCounterMode's where the torch has
    it, else the analytic count), method ("FlopCounterMode" or "analytic"), analytic (the
    analytic count, always made: compared in the log), by_dtype (the analytic count per
    (device type, dtype_key)), not_counted (what carries FLOPs but was not counted: calls the
    formulas do not cover, recurrent modules of the model)."""
    total: float
    method: str
    analytic: float
    by_dtype: Dict[Tuple[str, str], float] = field(default_factory=dict)
    not_counted: List[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line: the figure and how it was found."""
        how = ("torch.utils.flop_counter.FlopCounterMode (analytic count "
               f"{self.analytic / 1e9:.4g} GFLOP)" if self.method == "FlopCounterMode" else
               "analytic count of linear/conv/matmul/attention products, forward and backward"
               f" (torch {torch.__version__} has no FlopCounterMode)")
        miss = f"; not counted: {', '.join(self.not_counted)}" if self.not_counted else ""
        return f"{self.total / 1e9:.4g} GFLOP per trainer per step, {how}{miss}"


class StepFlopCounter:
    """Counts the FLOPs of the code run between start() and stop() on this thread (one
    training step): FlopCounterMode where this torch has it (use_torch=True), and the analytic
    count always (FlopCount.method says which figure is the total). model: named in
    not_counted when it holds recurrent layers. Not reentrant; stop() must run on the thread
    that called start(), after the step's backward."""

    def __init__(self, model: Optional[torch.nn.Module] = None, use_torch: bool = True) -> None:
        self.model = model
        self.use_torch = use_torch and have_flop_counter_mode()
        self._analytic: Optional[AnalyticFlopCounter] = None
        self._torch: Any = None

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._analytic is not None

    def start(self) -> None:
        """Starts counting (enters the modes)."""
        self._analytic = AnalyticFlopCounter()
        self._analytic.__enter__()
        if self.use_torch:
            from torch.utils.flop_counter import FlopCounterMode
            self._torch = FlopCounterMode(display=False)
            self._torch.__enter__()

    def stop(self) -> FlopCount:
        """Stops counting (leaves the modes) and returns the count. RuntimeError when not
        started."""
        if self._analytic is None:
            raise RuntimeError("StepFlopCounter.stop() without start()")
        analytic, self._analytic = self._analytic, None
        counted: Optional[float] = None
        if self._torch is not None:
            self._torch.__exit__(None, None, None)
            counted = float(self._torch.get_total_flops())
            self._torch = None
        analytic.__exit__(None, None, None)
        missed = [f"{what} ({n} call(s))" for what, n in sorted(analytic.not_counted.items())]
        if self.model is not None:
            rnn = Counter(type(m).__name__ for m in self.model.modules()
                          if isinstance(m, torch.nn.RNNBase))
            missed += [f"{n} {name} module(s)" for name, n in sorted(rnn.items())
                       if counted is None]
        return FlopCount(total=counted if counted is not None else analytic.flops,
                         method="FlopCounterMode" if counted is not None else "analytic",
                         analytic=analytic.flops, by_dtype=dict(analytic.by_dtype),
                         not_counted=missed)


# ------------------------------------------------------------------------------------------
# Peak FLOP/s
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuPeak:
    """One GPU model of GPU_PEAKS: pattern (a regex searched in
    torch.cuda.get_device_name()), sms (streaming multiprocessors of the full part), peaks
    (dense peak FLOP/s per dtype key; "tf32" is float32 on the tensor cores, "fp64" the FP64
    tensor cores where the part has them), source (the datasheet)."""
    name: str
    pattern: str
    sms: int
    peaks: Mapping[str, float]
    source: str


_T = 1e12
# The Hopper GPU at SXM clocks, 132 SMs: H100 SXM, H200 SXM and the GPU of GH200 share it.
_HOPPER_SXM: Mapping[str, float] = {"fp64": 67 * _T, "fp32": 67 * _T, "tf32": 494.5 * _T,
                                    "bf16": 989.5 * _T, "fp16": 989.5 * _T}
# Dense (no 2:4 sparsity) peak FLOP/s from NVIDIA's datasheets; where a datasheet gives only
# the sparse figure (marked "with sparsity") the dense one is half of it. Checked against the
# SM counts of the full parts (a MIG slice has fewer and is scaled). Order matters: the first
# pattern that matches the device name is used.
GPU_PEAKS: Tuple[GpuPeak, ...] = (
    GpuPeak("NVIDIA GH200", r"\bGH200\b", 132,
            _HOPPER_SXM,
            "NVIDIA GH200 Grace Hopper Superchip datasheet (nvidia.com/en-us/data-center/"
            "grace-hopper-superchip)"),
    GpuPeak("NVIDIA H200 NVL", r"\bH200 NVL\b", 132,
            {"fp64": 60 * _T, "fp32": 60 * _T, "tf32": 417.5 * _T, "bf16": 835.5 * _T,
             "fp16": 835.5 * _T},
            "NVIDIA H200 datasheet, H200 NVL column (nvidia.com/en-us/data-center/h200)"),
    GpuPeak("NVIDIA H200 SXM", r"\bH200\b", 132,
            _HOPPER_SXM,
            "NVIDIA H200 datasheet, H200 SXM column (nvidia.com/en-us/data-center/h200)"),
    GpuPeak("NVIDIA H100 PCIe", r"\bH100 PCIe\b", 114,
            {"fp64": 51 * _T, "fp32": 51 * _T, "tf32": 378 * _T, "bf16": 756.5 * _T,
             "fp16": 756.5 * _T},
            "NVIDIA H100 datasheet, H100 PCIe column (nvidia.com/en-us/data-center/h100)"),
    GpuPeak("NVIDIA H100 SXM", r"\bH100\b.*\b(SXM|HBM3)", 132,
            _HOPPER_SXM,
            "NVIDIA H100 datasheet, H100 SXM column (nvidia.com/en-us/data-center/h100)"),
    GpuPeak("NVIDIA A100", r"\bA100\b", 108,
            {"fp64": 19.5 * _T, "fp32": 19.5 * _T, "tf32": 156 * _T, "bf16": 312 * _T,
             "fp16": 312 * _T},
            "NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100)"),
    GpuPeak("NVIDIA L40S", r"\bL40S\b", 142,
            {"fp32": 91.6 * _T, "tf32": 183 * _T, "bf16": 362.05 * _T, "fp16": 362.05 * _T},
            "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s)"),
    GpuPeak("NVIDIA L4", r"\bL4\b", 58,
            {"fp32": 30.3 * _T, "tf32": 60 * _T, "bf16": 121 * _T, "fp16": 121 * _T},
            "NVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4)"),
    GpuPeak("NVIDIA A10", r"\bA10\b", 72,
            {"fp32": 31.2 * _T, "tf32": 62.5 * _T, "bf16": 125 * _T, "fp16": 125 * _T},
            "NVIDIA A10 datasheet (nvidia.com/en-us/data-center/products/a10-gpu)"),
)


@dataclass
class Peak:
    """Peak FLOP/s of one rank: flops (0 when unknown) and source (how it was found, or why
    it is unknown)."""
    flops: float
    source: str


def _env_peak(env: Mapping[str, str]) -> Optional[float]:
    try:
        v = float(env.get("FTRT_PEAK_FLOPS", "") or 0)
    except ValueError:
        return None  # ftrt_init() refuses a bad value before this runs
    return v if v > 0 else None


def cuda_peak(name: str, sms: int, dtype: str, tf32: bool = False) -> Peak:
    """The dense peak FLOP/s of the CUDA device named `name` (torch.cuda.get_device_name())
    with `sms` streaming multiprocessors (its properties' multi_processor_count), for the dtype
    key `dtype` ("fp32" counts as "tf32" when tf32 is True: torch's allow_tf32), from
    GPU_PEAKS. Peak.flops is 0 when the device is not in the table, has more SMs than its
    model, or the dtype has no entry; source says why."""
    want = "tf32" if dtype == "fp32" and tf32 else dtype
    for g in GPU_PEAKS:
        if not re.search(g.pattern, name):
            continue
        if want not in g.peaks:
            return Peak(0.0, f"{g.name} has no {want} entry in ftrt's table of peaks")
        if sms > g.sms:
            return Peak(0.0, f"{name} has {sms} SMs, more than the {g.sms} of {g.name}: not "
                             f"the model of the table")
        scale = sms / g.sms if sms > 0 else 1.0
        mig = f", scaled to {sms} of its {g.sms} SMs" if scale < 1 else ""
        return Peak(g.peaks[want] * scale, f"{g.name} dense {want} peak, {g.source}{mig}")
    return Peak(0.0, f"{name} is not in ftrt's table of GPU peaks (ftrt.pytorch_flops."
                     f"GPU_PEAKS)")


def measure_cpu_peak(dtype: torch.dtype = torch.float32, n: int = 512,
                     reps: int = 4) -> Peak:
    """A sanity figure, never eMFU's peak (cpu_peak() is): this process's matrix-product rate
    on the CPU, the best of `reps` timings of
    torch.mm of two n x n matrices of `dtype` (each timing as many products as fill 20 ms),
    2 n^3 FLOPs each, per second of the process's CPU time (time.process_time), times
    torch.get_num_threads(): the rate of the process's threads each on a core of its own.
    CPU time, not wall time: on shared cores (ranks beside each other, more ranks than cores)
    a wall-clock rate is the process's share at that moment, which the training that follows
    may exceed (an eMFU above 1). Call it before any other thread of the process is busy (its
    CPU time counts too). Uses no random numbers (the step's generator is untouched). Takes
    about reps x 20 ms of CPU time."""
    a = torch.full((n, n), 0.5, dtype=dtype)
    b = torch.full((n, n), 0.25, dtype=dtype)
    c = torch.empty((n, n), dtype=dtype)
    torch.mm(a, b, out=c)
    t = time.process_time()
    torch.mm(a, b, out=c)
    one = max(time.process_time() - t, 1e-6)
    k = max(1, int(0.02 / one))
    best = math.inf
    for _ in range(reps):
        t = time.process_time()
        for _ in range(k):
            torch.mm(a, b, out=c)
        best = min(best, max(time.process_time() - t, 1e-9) / k)
    threads = torch.get_num_threads()
    rate = 2.0 * n ** 3 / best * threads
    return Peak(rate, f"measured: torch.mm {n}x{n} {dtype_key(dtype)} per CPU-second x "
                      f"{threads} thread(s), best of {reps}")


_TORCH_DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16,
                 "fp16": torch.float16}
_FTRT_DTYPES = {"fp64": 1, "fp32": 0, "bf16": 3, "fp16": 4}  # ftrt_dtype (include/ftrt.h)


def cpu_peak(dtype: str, ranks_sharing: int = 1) -> Peak:
    """The CPU's peak FLOP/s of one of `ranks_sharing` ranks sharing this host's cores for the
    dtype key `dtype` ("fp32", "bf16", ...): libftrt's table (ftrt.cpu_peak_flops()), an
    upper bound of the hardware. Peak.flops is 0 when the table has no row for this CPU or
    dtype, or libftrt cannot be loaded; source says how the figure was made up, or why not."""
    if dtype not in _FTRT_DTYPES:
        return Peak(0.0, f"no CPU peak for {dtype}")
    from . import FtrtError, cpu_peak_flops
    try:
        flops, source = cpu_peak_flops(_FTRT_DTYPES[dtype], max(1, int(ranks_sharing)))
    except (OSError, FtrtError) as e:
        return Peak(0.0, f"no CPU peak: {e}")
    return Peak(flops, source)


def peak_flops(by_dtype: Mapping[Tuple[str, str], float], device: Optional[torch.device] = None,
               env: Optional[Mapping[str, str]] = None, ranks_sharing: int = 1) -> Peak:
    """The peak FLOP/s of one rank for a step whose FLOPs are `by_dtype` ({(device type,
    dtype key): FLOPs}, FlopCount.by_dtype): FTRT_PEAK_FLOPS of `env` (default os.environ)
    when set; else per dtype, from GPU_PEAKS on CUDA (`device`, default the current one) or
    on the CPU from libftrt's table for one of `ranks_sharing` ranks sharing the host's cores
    (cpu_peak()), combined as total / sum(flops_d / peak_d). Peak.flops is 0 (source: why)
    when a dtype has no peak or nothing was counted."""
    v = _env_peak(os.environ if env is None else env)
    if v is not None:
        return Peak(v, "FTRT_PEAK_FLOPS")
    total = sum(by_dtype.values())
    if total <= 0:
        return Peak(0.0, "no FLOPs counted, so no dtype to take a peak for")
    time_at_peak, sources = 0.0, []
    for (dev, key), f in sorted(by_dtype.items(), key=lambda kv: -kv[1]):
        if dev == "cuda":
            d = device if device is not None else torch.device("cuda", torch.cuda.current_device())
            p = cuda_peak(torch.cuda.get_device_name(d),
                          torch.cuda.get_device_properties(d).multi_processor_count, key,
                          tf32=bool(torch.backends.cuda.matmul.allow_tf32))
        elif dev == "cpu":
            p = cpu_peak(key, ranks_sharing)
        else:
            p = Peak(0.0, f"no peak for {key} on {dev}")
        if p.flops <= 0 or len(by_dtype) == 1:
            return p
        time_at_peak += f / p.flops
        sources.append(f"{p.flops / 1e9:.4g} GFLOP/s for {f / total:.0%} of the FLOPs "
                       f"({p.source})")
    return Peak(total / time_at_peak, "; ".join(sources))


class EmfuInputs:
    """FaultTolerant's eMFU inputs, found once per process: start() before the first step's
    body, finish() after its backward (counts it, finds the peak, returns the line to log),
    abandon() when the body ended without finish(). flops_per_step / peak_flops: None to find
    them, a number > 0 as given; flops_per_step=0 turns it all off. config: the job's
    ftrt.Config, whose peak_flops (FTRT_PEAK_FLOPS) wins when set. ranks_sharing: the ranks
    that share this host's CPU cores, which the CPU's peak is split among (FaultTolerant sets
    it from ctx.host_trainers() before the first step; default 1). measured: the sanity
    figure of measure_now() (None until then). Raises ValueError for a negative value."""

    def __init__(self, model: Optional[torch.nn.Module], flops_per_step: Optional[float],
                 peak_flops: Optional[float], config: Any = None) -> None:
        if (flops_per_step is not None and not float(flops_per_step) >= 0) or \
                (peak_flops is not None and not float(peak_flops) > 0):
            raise ValueError("flops_per_step must be >= 0 and peak_flops > 0 (or None)")
        self.model = model
        self.given_flops = None if flops_per_step is None else float(flops_per_step)
        self.given_peak = None if peak_flops is None else float(peak_flops)
        cfg_peak = float(getattr(config, "peak_flops", 0.0) or 0.0) if config is not None \
            else 0.0
        if self.given_peak is None and cfg_peak > 0:
            self.given_peak = cfg_peak
        self.count: Optional[FlopCount] = None
        self.peak: Optional[Peak] = None
        self._counter: Optional[StepFlopCounter] = None
        self._done = self.given_flops == 0.0
        self.ranks_sharing = 1
        self.measured: Optional[Peak] = None

    def measure_now(self) -> None:
        """Measures this process's matrix-product rate for the model's parameter dtype
        (measure_cpu_peak(); CPU parameters, nothing given, FTRT_PEAK_FLOPS unset): a sanity
        figure that finish()'s line prints beside the table's peak, never the peak.
        FaultTolerant calls it before joining the job, when every process starts at once and
        no trainer waits for another."""
        params = list(self.model.parameters()) if self.model is not None else []
        if self._done or self.given_peak is not None or _env_peak(os.environ) is not None \
                or not params or params[0].device.type != "cpu" \
                or params[0].dtype not in _TORCH_DTYPES.values():
            return
        self.measured = measure_cpu_peak(params[0].dtype)

    @property
    def flops_per_step(self) -> float:
        """Model FLOPs per trainer per step: as given, else counted (0 until then)."""
        if self.given_flops is not None:
            return self.given_flops
        return self.count.total if self.count is not None else 0.0

    @property
    def peak_flops(self) -> float:
        """Peak FLOP/s of one rank: found or given (0: unknown, or not yet found)."""
        if self.peak is not None:
            return self.peak.flops
        return self.given_peak or 0.0

    @property
    def counting(self) -> bool:
        """True between start() and finish() / abandon()."""
        return self._counter is not None

    def start(self) -> None:
        """Starts counting, unless done already or counting."""
        if not self._done and self._counter is None:
            self._counter = StepFlopCounter(self.model)
            self._counter.start()

    def abandon(self) -> None:
        """Stops a count that finish() did not end (the next start() counts again)."""
        if self._counter is not None:
            self._counter.stop()
            self._counter = None

    def finish(self) -> str:
        """Ends the count, finds the peak; returns the line that says what was found and how.
        RuntimeError when not counting."""
        if self._counter is None:
            raise RuntimeError("EmfuInputs.finish() without start()")
        count, self._counter, self._done = self._counter.stop(), None, True
        self.count = count
        if self.given_peak is not None:
            self.peak = Peak(self.given_peak, "as given (peak_flops or FTRT_PEAK_FLOPS)")
        else:
            self.peak = peak_flops(count.by_dtype, ranks_sharing=self.ranks_sharing)
        if self.given_flops is not None:
            what = f"{self.given_flops / 1e9:.4g} GFLOP per trainer per step (as given)"
        elif count.total > 0:
            what = count.describe()
        else:
            what = "no FLOPs counted (" + count.describe().split(", ", 1)[1] + ")"
        sanity = "" if self.measured is None else \
            (f"; for comparison, {self.measured.source}: {self.measured.flops / 1e9:.4g} "
             f"GFLOP/s (not the peak)")
        if self.peak.flops > 0 and self.flops_per_step > 0:
            return (f"ftrt: eMFU inputs: {what}; peak {self.peak.flops / 1e9:.4g} GFLOP/s per "
                    f"rank: {self.peak.source}{sanity}")
        return (f"ftrt: eMFU inputs: {what}; peak FLOP/s "
                + (f"{self.peak.flops / 1e9:.4g} GFLOP/s" if self.peak.flops > 0 else
                   f"unknown ({self.peak.source})")
                + ": the report has no eMFU (set FTRT_PEAK_FLOPS, or pass flops_per_step "
                  "and peak_flops)")
