/*
 * cuda_check.h - the one mapping of CUDA runtime errors to ftrt error codes (internal; the GPU
 * sources of libftrt_gpu: kernels/device_snapshot.c, comm/nccl_plane.c, checkpoint/ckpt_device.c).
 *
 * Every CUDA call of the library goes through ftrt__cuda_err, so that an error is reported the
 * same way wherever it happens: no usable device or driver is FTRT_ENODEV (a machine without a
 * GPU is a normal condition, not logged), an allocation failure -ENOMEM, anything else is
 * logged with the failing call's name and is FTRT_ECUDA. Header-only, like the CUDA runtime
 * API it wraps; include it from C sources built against the CUDA toolkit only.
 */
#ifndef FTRT_KERNELS_CUDA_CHECK_H
#define FTRT_KERNELS_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <errno.h>

#include "base/log.h"
#include "ftrt.h"

/* Maps e, the result of the CUDA runtime call named `call` (a static string, for the log), to
 * an ftrt code: 0 for cudaSuccess; FTRT_ENODEV for no device or an insufficient driver;
 * -ENOMEM for cudaErrorMemoryAllocation; otherwise FTRT_ECUDA, logged at error level with the
 * CUDA error's name and description. On any error the calling thread's last CUDA error is
 * cleared (cudaGetLastError), so that a later check does not see it again. Thread-safe. */
static inline int ftrt__cuda_err(cudaError_t e, const char *call)
{
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return FTRT_ENODEV;
    if (e == cudaErrorMemoryAllocation) return -ENOMEM;
    ftrt_log_error("%s failed: %s (%s)", call, cudaGetErrorName(e), cudaGetErrorString(e));
    return FTRT_ECUDA;
}

#endif
