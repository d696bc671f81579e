"""The NCCL plane of libftrt_gpu (include/ftrt_gpu.h) for the PyTorch helpers:
GradAverager (ftrt/pytorch.py) averages CUDA gradients through a GPU bucketer made here, and
cuda_device() decides which plane a list of parameters takes. Needs the loaded library to be
libftrt_gpu (FTRT_LIB); nothing here runs without CUDA parameters."""
import ctypes
from typing import Any, List, Optional, Sequence

import torch

from . import Bucketer, Context, _lib
from ._lib import error_for, lib

__all__ = ["GpuPlane", "cuda_device"]


class GpuPlane:
    """An ftrt_gpu * (the NCCL plane, ftrt_gpu.h) on CUDA device `device`, owned by the thread
    that made it (the context's). free() frees the bucketers made on it first; the context
    frees it at finalize() if nobody did."""

    def __init__(self, ctx: Context, device: int) -> None:
        h = ctypes.c_void_p()
        rc = lib().ftrt_gpu_create(ctx.handle, int(device), ctypes.byref(h))
        if rc < 0:
            raise error_for(rc, "ftrt_gpu_create")
        self.handle: Optional[int] = h.value
        self.device = int(device)
        self.bucketers: List[Any] = []
        ctx._children.add(self)

    def bucketer(self, ctx: Context, counts: Sequence[int], dtype: int,
                 cfg: _lib.BucketConfig) -> Bucketer:
        """A GPU bucketer (ftrt_gpu_bucketer_create()) over device tensors of counts[i]
        elements of dtype."""
        arr = (ctypes.c_size_t * len(counts))(*[int(c) for c in counts])
        h = ctypes.c_void_p()
        rc = lib().ftrt_gpu_bucketer_create(self.handle, arr, len(counts), dtype,
                                            ctypes.byref(cfg), ctypes.byref(h))
        if rc < 0:
            raise error_for(rc, "ftrt_gpu_bucketer_create")
        b = Bucketer(ctx, h.value, counts, dtype)
        self.bucketers.append(b)
        return b

    def connect(self) -> None:
        """ftrt_gpu_connect(): builds the current epoch's NCCL communicator now if the plane
        has none (collective over the trainers when it builds). Owning thread. Raises the
        FtrtError of its code (FtrtRecover, FtrtNoSpare, ...)."""
        rc = lib().ftrt_gpu_connect(self.handle)
        if rc < 0:
            raise error_for(rc, "ftrt_gpu_connect")

    def free(self) -> None:
        """Frees the plane's bucketers, then the plane (idempotent)."""
        for b in self.bucketers:
            b.free()
        self.bucketers = []
        if self.handle:
            rc = lib().ftrt_gpu_free(self.handle)
            if rc < 0:
                raise error_for(rc, "ftrt_gpu_free")
            self.handle = None


def cuda_device(params: Sequence[torch.Tensor]) -> Optional[int]:
    """The CUDA device index of params (None when they are all on the CPU). Raises ValueError
    for a mix of devices, NotImplementedError for devices other than CPU and CUDA, and
    FtrtNotSupported for CUDA parameters without libftrt_gpu."""
    devs = {(p.device.type, p.device.index) for p in params}
    if len(devs) != 1:
        raise ValueError(f"parameters must all be on one device (got {sorted(map(str, devs))})")
    kind, index = next(iter(devs))
    if kind == "cpu":
        return None
    if kind != "cuda":
        raise NotImplementedError(f"GradAverager takes CPU or CUDA parameters (got {kind})")
    if not _lib.has_gpu_plane():
        raise _lib.FtrtNotSupported(
            _lib.ENOTSUP, "GradAverager (CUDA parameters need libftrt_gpu: set FTRT_LIB to the "
            "libftrt_gpu.so of a build with CUDA and NCCL)")
    return int(index if index is not None else torch.cuda.current_device())
