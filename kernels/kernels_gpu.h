/*
 * kernels_gpu.h - CUDA versions of the data-plane kernels (internal; libftrt_gpu only).
 *
 * Each computes the same bytes as its CPU reference in kernels.h (tests/unit/
 * test_kernels_gpu.c compares them on a GPU). Every launch goes on the caller's stream and
 * returns at once; results are visible to work ordered after it on that stream. Functions
 * return cudaSuccess or the launch error (cudaGetLastError), never block, and are thread-safe.
 * Pointers are device pointers unless said otherwise; "mapped" host memory (cudaHostAlloc with
 * cudaHostAllocMapped, or any pinned memory under unified addressing) is accepted wherever the
 * device may read or write host memory.
 */
#ifndef FTRT_KERNELS_GPU_H
#define FTRT_KERNELS_GPU_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor of a bucket as the kernels read it: `bytes` bytes at `ptr`, at byte `off` of the
 * bucket. Arrays of these live in device or mapped pinned host memory. */
typedef struct ftrt__kdesc {
    void *ptr;
    size_t off;
    size_t bytes;
} ftrt__kdesc;

/* Fills d[0..n) from segs (offsets back to back, as ftrt__k_pack lays them out). Host code.
 * Returns the bucket's size in bytes and, in *max_bytes, the largest tensor's. */
size_t ftrt__kdesc_fill(ftrt__kdesc *d, const ftrt__seg *segs, int n, size_t *max_bytes);

/* Packs the n tensors of desc (device-readable) into `bucket`: the device version of
 * ftrt__k_pack. max_bytes: the largest tensor (sizes the grid). n <= 65535. */
cudaError_t ftrt__kgpu_pack(void *bucket, const ftrt__kdesc *desc, int n, size_t max_bytes,
                            cudaStream_t stream);

/* Unpacks `bucket` into the n tensors of desc, multiplying by `scale` (ftrt__k_unpack_scale).
 * guard: NULL, or a word in mapped pinned host memory: the kernel writes nothing unless
 * *guard == gen when it runs. The NCCL plane bumps the word before it revokes a communicator,
 * so an unpack queued behind an aborted allreduce leaves the application's tensors alone. */
cudaError_t ftrt__kgpu_unpack_scale(const void *bucket, const ftrt__kdesc *desc, int n,
                                    size_t max_bytes, int dtype, double scale,
                                    const volatile uint32_t *guard, uint32_t gen,
                                    cudaStream_t stream);

/* In place x *= scale over count elements of dtype (ftrt__k_scale). */
cudaError_t ftrt__kgpu_scale(void *buf, size_t count, int dtype, double scale,
                             cudaStream_t stream);

/* CRC32C of each `chunk`-byte piece of src[0..bytes) into crcs[0..ceil(bytes/chunk)) (device
 * or mapped memory), one piece per thread, exactly as ftrt__k_crc32c_chunks; fused with a copy
 * to dst when dst is not NULL (dst may be mapped pinned host memory). Merge the pieces on the
 * host with ftrt__k_crc32c_merge. chunk: a multiple of 4, at least 64. */
cudaError_t ftrt__kgpu_copy_crc32c_chunks(void *dst, const void *src, size_t bytes, size_t chunk,
                                          uint32_t *crcs, cudaStream_t stream);

/* Synthetic compute for benchmarks: `blocks` blocks of one warp each spin for `cycles` SM clock
 * cycles (clock64), leaving the rest of each SM free (bench/overlap_gpu_bench.c). */
cudaError_t ftrt__kgpu_busy(long long cycles, int blocks, cudaStream_t stream);

/* Number of usable CUDA devices: 0 without a GPU or without a driver (the CUDA runtime then
 * reports cudaErrorNoDevice / cudaErrorInsufficientDriver, which is cleared here). */
int ftrt__kgpu_device_count(void);

#ifdef __cplusplus
}
#endif
#endif
