/*
 * kernels.cu - CUDA kernels of the data plane: bucket pack / unpack (+ scaling and an abort
 * guard), scaling, and per-chunk CRC32C fused with a copy. CPU references: kernels_ref.c.
 *
 * Compiled with --fmad=false: a scaled element is x * s rounded once, as on the CPU, so the
 * device and host results are bitwise equal. bfloat16 / fp16 elements are widened, multiplied
 * in float32 (__fmul_rn) and narrowed with the host's own code (kernels/half.h, compiled here
 * as __host__ __device__).
 */
#include <stdint.h>

#include "kernels/half.h"
#include "kernels/kernels_gpu.h"

#define THREADS 256
#define MAX_BLOCKS_X 1024

/* Copies n bytes with the widest aligned access the pointers allow; the calling thread handles
 * elements tid, tid + stride, ... */
__device__ static void copy_bytes(char *dst, const char *src, size_t n, size_t tid, size_t stride)
{
    uintptr_t a = (uintptr_t)dst | (uintptr_t)src;
    size_t done = 0;
    if ((a & 15) == 0) {
        size_t nv = n / 16;
        for (size_t i = tid; i < nv; i += stride) ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
        done = nv * 16;
    } else if ((a & 3) == 0) {
        size_t nv = n / 4;
        for (size_t i = tid; i < nv; i += stride)
            ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i];
        done = nv * 4;
    }
    for (size_t i = done + tid; i < n; i += stride) dst[i] = src[i];
}

/* y[i] = narrow(widen(x[i]) * s) for the calling thread's elements (y may be x). */
__device__ static void scale_h16(uint16_t *y, const uint16_t *x, size_t count, int dtype, float s,
                                 size_t tid, size_t stride)
{
    for (size_t i = tid; i < count; i += stride)
        y[i] = ftrt__f32_to_h16(dtype, __fmul_rn(ftrt__h16_to_f32(dtype, x[i]), s));
}

__global__ void pack_kernel(char *bucket, const ftrt__kdesc *desc)
{
    ftrt__kdesc d = desc[blockIdx.y];
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    copy_bytes(bucket + d.off, (const char *)d.ptr, d.bytes, tid, stride);
}

__global__ void unpack_kernel(const char *bucket, const ftrt__kdesc *desc, int dtype, double scale,
                              const volatile uint32_t *guard, uint32_t gen)
{
    __shared__ int go;
    if (threadIdx.x == 0) go = guard ? (*guard == gen) : 1; /* one read of host memory a block */
    __syncthreads();
    if (!go) return;
    ftrt__kdesc d = desc[blockIdx.y];
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    const char *src = bucket + d.off;
    if (scale == 1.0 || !ftrt__k_scalable(dtype)) {
        copy_bytes((char *)d.ptr, src, d.bytes, tid, stride);
    } else if (dtype == FTRT__K_BF16 || dtype == FTRT__K_F16) {
        scale_h16((uint16_t *)d.ptr, (const uint16_t *)src, d.bytes / 2, dtype, (float)scale,
                  tid, stride);
    } else if (dtype == FTRT__K_F32) {
        const float s = (float)scale;
        const float *x = (const float *)src;
        float *y = (float *)d.ptr;
        for (size_t i = tid; i < d.bytes / 4; i += stride) y[i] = __fmul_rn(x[i], s);
    } else {
        const double *x = (const double *)src;
        double *y = (double *)d.ptr;
        for (size_t i = tid; i < d.bytes / 8; i += stride) y[i] = __dmul_rn(x[i], scale);
    }
}

__global__ void scale_kernel(char *buf, size_t count, int dtype, double scale)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    if (dtype == FTRT__K_F32) {
        const float s = (float)scale;
        float *x = (float *)buf;
        for (size_t i = tid; i < count; i += stride) x[i] = __fmul_rn(x[i], s);
    } else if (dtype == FTRT__K_F64) {
        double *x = (double *)buf;
        for (size_t i = tid; i < count; i += stride) x[i] = __dmul_rn(x[i], scale);
    } else if (dtype == FTRT__K_BF16 || dtype == FTRT__K_F16) {
        scale_h16((uint16_t *)buf, (const uint16_t *)buf, count, dtype, (float)scale, tid, stride);
    }
}

/* CRC32C, reflected polynomial 0x82F63B78, slicing by 4 with the tables in shared memory.
 * Thread i handles chunk i: crcs[i] = CRC32C(0, piece i), optionally copying it to dst. */
__global__ void crc_kernel(char *dst, const char *src, size_t bytes, size_t chunk, uint32_t *crcs,
                           size_t nchunks)
{
    __shared__ uint32_t t[4][256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        uint32_t c = (uint32_t)i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        t[0][i] = c;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        uint32_t c = t[0][i];
        for (int k = 1; k < 4; k++) {
            c = (c >> 8) ^ t[0][c & 0xff];
            t[k][i] = c;
        }
    }
    __syncthreads();
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= nchunks) return;
    size_t off = id * chunk, len = bytes - off < chunk ? bytes - off : chunk;
    const char *p = src + off;
    char *q = dst ? dst + off : NULL;
    uint32_t c = 0xffffffffu;
    size_t i = 0;
    if ((((uintptr_t)p | (q ? (uintptr_t)q : 0)) & 3) == 0) {
        for (; i + 4 <= len; i += 4) {
            uint32_t w = *(const uint32_t *)(p + i);
            if (q) *(uint32_t *)(q + i) = w;
            c ^= w; /* little-endian: byte 0 is the low byte */
            c = t[3][c & 0xff] ^ t[2][(c >> 8) & 0xff] ^ t[1][(c >> 16) & 0xff] ^ t[0][c >> 24];
        }
    }
    for (; i < len; i++) {
        unsigned char b = (unsigned char)p[i];
        if (q) q[i] = (char)b;
        c = (c >> 8) ^ t[0][(c ^ b) & 0xff];
    }
    crcs[id] = ~c;
}

__device__ unsigned long long busy_sink;

__global__ void busy_kernel(long long cycles)
{
    long long t0 = clock64();
    unsigned long long x = threadIdx.x;
    while (clock64() - t0 < cycles) x = x * 6364136223846793005ull + 1442695040888963407ull;
    if (x == 42) busy_sink = x; /* keeps the loop from being optimized away */
}

static unsigned blocks_for(size_t units)
{
    size_t b = (units + THREADS - 1) / THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b > MAX_BLOCKS_X ? MAX_BLOCKS_X : b);
}

extern "C" {

size_t ftrt__kdesc_fill(ftrt__kdesc *d, const ftrt__seg *segs, int n, size_t *max_bytes)
{
    size_t off = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        d[i].ptr = segs[i].ptr;
        d[i].off = off;
        d[i].bytes = segs[i].bytes;
        off += segs[i].bytes;
        if (segs[i].bytes > mx) mx = segs[i].bytes;
    }
    if (max_bytes) *max_bytes = mx;
    return off;
}

cudaError_t ftrt__kgpu_pack(void *bucket, const ftrt__kdesc *desc, int n, size_t max_bytes,
                            cudaStream_t stream)
{
    if (n < 1 || n > 65535) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
    dim3 grid(blocks_for(max_bytes / 16 + 1), (unsigned)n);
    pack_kernel<<<grid, THREADS, 0, stream>>>((char *)bucket, desc);
    return cudaGetLastError();
}

cudaError_t ftrt__kgpu_unpack_scale(const void *bucket, const ftrt__kdesc *desc, int n,
                                    size_t max_bytes, int dtype, double scale,
                                    const volatile uint32_t *guard, uint32_t gen,
                                    cudaStream_t stream)
{
    if (n < 1 || n > 65535) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
    dim3 grid(blocks_for(max_bytes / 4 + 1), (unsigned)n);
    unpack_kernel<<<grid, THREADS, 0, stream>>>((const char *)bucket, desc, dtype, scale, guard,
                                                gen);
    return cudaGetLastError();
}

cudaError_t ftrt__kgpu_scale(void *buf, size_t count, int dtype, double scale,
                             cudaStream_t stream)
{
    if (count == 0 || scale == 1.0) return cudaSuccess;
    scale_kernel<<<blocks_for(count), THREADS, 0, stream>>>((char *)buf, count, dtype, scale);
    return cudaGetLastError();
}

cudaError_t ftrt__kgpu_copy_crc32c_chunks(void *dst, const void *src, size_t bytes, size_t chunk,
                                          uint32_t *crcs, cudaStream_t stream)
{
    if (bytes == 0) return cudaSuccess;
    if (chunk < 64 || chunk % 4) return cudaErrorInvalidValue;
    size_t nchunks = (bytes + chunk - 1) / chunk;
    size_t blocks = (nchunks + THREADS - 1) / THREADS;
    crc_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>((char *)dst, (const char *)src, bytes,
                                                         chunk, crcs, nchunks);
    return cudaGetLastError();
}

cudaError_t ftrt__kgpu_busy(long long cycles, int blocks, cudaStream_t stream)
{
    if (cycles <= 0 || blocks <= 0) return cudaSuccess;
    busy_kernel<<<(unsigned)blocks, 32, 0, stream>>>(cycles);
    return cudaGetLastError();
}

int ftrt__kgpu_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free error state */
        return 0;
    }
    return n;
}

} /* extern "C" */
