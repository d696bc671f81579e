/*
 * mlp_cuda.c - train_mlp --device cuda: the parameters and momentum in CUDA memory of a GPU
 * (cudaMalloc), so that ftrt keeps them as FTRT_REGION_DEVICE regions through libftrt_gpu's
 * CUDA device backend (checkpoint/ckpt_device.c: checkpoint, restore, state transfer, partner
 * replicas, fingerprints). Built into train_mlp_gpu only (examples/CMakeLists.txt, with
 * MLP_WITH_CUDA), which links libftrt_gpu; train_mlp refuses --device cuda (mlp_state.c).
 *
 * The GPU: mpirun's local rank (OMPI_COMM_WORLD_LOCAL_RANK, else 0) modulo the visible GPUs,
 * chosen before ftrt_init() in every rank that may train (the coordinator, world rank 0,
 * allocates nothing and never touches CUDA). Several ranks on one GPU time-share it (a test
 * arrangement: docs/gpu.md). The copies are synchronous cudaMemcpy calls: the example computes
 * on host copies (examples/mlp_state.c), as the simulated device does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "ftrt.h"
#include "mlp_state.h"

/* An ftrt code for a CUDA error of `call`, said on stderr (cudaGetLastError clears a sticky
 * error so that the next call is not blamed). */
static int cuda_fail(cudaError_t e, const char *call)
{
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    fprintf(stderr, "train_mlp: --device cuda: %s: %s (%s)\n", call, cudaGetErrorString(e),
            cudaGetErrorName(e));
    if (e == cudaErrorMemoryAllocation) return -ENOMEM;
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return FTRT_ENODEV;
    return FTRT_ECUDA;
}

int mlp_cuda_check(int say, int select)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        if (say)
            fprintf(stderr, "train_mlp: --device cuda: no usable CUDA device (cudaGetDeviceCount: "
                            "%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return FTRT_ENODEV;
    }
    if (!select) return 0;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int dev = (lr ? atoi(lr) : 0) % n;
    if (dev < 0) dev = 0;
    int rc = cuda_fail(cudaSetDevice(dev), "cudaSetDevice");
    struct cudaDeviceProp p;
    if (rc == 0) rc = cuda_fail(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
    if (rc == 0 && say)
        fprintf(stderr, "train_mlp: --device cuda: GPU %d of %d: %s (compute capability %d.%d, "
                        "%.1f GiB)\n", dev, n, p.name, p.major, p.minor,
                (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return rc;
}

static int cuda_alloc(size_t bytes, void **dev)
{
    if (!dev || bytes == 0) return FTRT_EINVAL;
    *dev = NULL;
    int rc = cuda_fail(cudaMalloc(dev, bytes), "cudaMalloc");
    if (rc == 0) rc = cuda_fail(cudaMemset(*dev, 0, bytes), "cudaMemset");
    if (rc != 0 && *dev) {
        (void)cudaFree(*dev);
        *dev = NULL;
    }
    return rc;
}

static int cuda_free(void *dev) { return dev ? cuda_fail(cudaFree(dev), "cudaFree") : 0; }

static int cuda_write(void *dst_dev, const void *src_host, size_t bytes)
{
    return cuda_fail(cudaMemcpy(dst_dev, src_host, bytes, cudaMemcpyHostToDevice),
                     "cudaMemcpy (host to device)");
}

static int cuda_read(void *dst_host, const void *src_dev, size_t bytes)
{
    return cuda_fail(cudaMemcpy(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost),
                     "cudaMemcpy (device to host)");
}

static const mlp_dev_ops cuda_ops = {.name = "cuda",
                                     .alloc = cuda_alloc,
                                     .free = cuda_free,
                                     .write = cuda_write,
                                     .read = cuda_read};

const mlp_dev_ops *mlp_cuda_ops(void) { return &cuda_ops; }
