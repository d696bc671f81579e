/*
 * kernels.h - the data-plane kernels of ftrt (internal): bucket pack and unpack, scaling by
 * 1/world, and CRC32C over snapshot copies, as CPU reference implementations.
 *
 * The CPU data plane (comm/async.c, comm/bucketer.c) runs these; the CUDA versions in
 * kernels_gpu.h compute exactly the same bytes and the tests compare the two (tests/unit/
 * test_kernels.c for the references, test_kernels_gpu.c for CUDA vs reference).
 *
 * A bucket (after PyTorch DDP's Reducer) is one contiguous buffer holding several tensors of
 * one element type back to back: tensor k occupies bytes [off_k, off_k + bytes_k), off_0 = 0,
 * off_{k+1} = off_k + bytes_k. A descriptor lists the tensors in bucket order.
 *
 * All functions are thread-safe (no shared state) and never fail on valid arguments.
 */
#ifndef FTRT_KERNELS_H
#define FTRT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor of a bucket: `bytes` bytes at `ptr` (host or device memory, per the function). */
typedef struct ftrt__seg {
    void *ptr;
    size_t bytes;
} ftrt__seg;

/* Element types the kernels scale (values of ftrt_dtype in ftrt.h): bfloat16 and fp16 are the
 * 16-bit formats of kernels/half.h. */
enum { FTRT__K_F32 = 0, FTRT__K_F64 = 1, FTRT__K_I64 = 2, FTRT__K_BF16 = 3, FTRT__K_F16 = 4 };

/* Small helpers shared by host and device code (kernels.cu compiles them for both). */
#ifdef __CUDACC__
#define FTRT__HD __host__ __device__ static inline
#else
#define FTRT__HD static inline
#endif

/* Bytes of an element of dtype (FTRT__K_*), 0 for an unknown one. */
FTRT__HD size_t ftrt__k_esize(int dtype)
{
    return dtype == FTRT__K_F32 ? 4 : dtype == FTRT__K_F64 || dtype == FTRT__K_I64 ? 8
         : dtype == FTRT__K_BF16 || dtype == FTRT__K_F16 ? 2 : 0;
}

/* 1 when dtype is a floating-point type that scaling applies to (not int64). */
FTRT__HD int ftrt__k_scalable(int dtype)
{
    return dtype == FTRT__K_F32 || dtype == FTRT__K_F64 || dtype == FTRT__K_BF16 ||
           dtype == FTRT__K_F16;
}

/* Copies the n tensors segs[0..n) into `bucket` back to back (bucket holds at least the sum of
 * their sizes). Tensors must not overlap the bucket. */
void ftrt__k_pack(void *bucket, const ftrt__seg *segs, int n);

/* The inverse of ftrt__k_pack: copies the bucket's bytes back into the n tensors. */
void ftrt__k_unpack(const void *bucket, const ftrt__seg *segs, int n);

/* ftrt__k_unpack fused with a scaling: every element written is bucket element x times
 * `scale` in the element type (float32: x * (float)scale; float64: x * scale; bfloat16 /
 * fp16: float32(x) * (float)scale narrowed to nearest even, kernels/half.h); int64 and
 * scale == 1.0 copy unchanged. Used to turn a sum into a mean (scale = 1 / world size). */
void ftrt__k_unpack_scale(const void *bucket, const ftrt__seg *segs, int n, int dtype,
                          double scale);

/* The part [off, off + len) of ftrt__k_pack: copies those bytes of the tensors' concatenation
 * to bucket + off. Packing every range of a partition packs the whole bucket. */
void ftrt__k_pack_range(void *bucket, const ftrt__seg *segs, int n, size_t off, size_t len);

/* The part [off, off + len) of ftrt__k_unpack_scale (off and len multiples of the element
 * size): writes those bytes of the tensors' concatenation from bucket + off, scaled. */
void ftrt__k_unpack_scale_range(const void *bucket, const ftrt__seg *segs, int n, size_t off,
                                size_t len, int dtype, double scale);

/* In-place x *= scale over `count` elements of `dtype` (float32 / float64 / bfloat16 / fp16; int64 and
 * scale == 1.0: no-op). Same rounding as ftrt__k_unpack_scale. */
void ftrt__k_scale(void *buf, size_t count, int dtype, double scale);

/* CRC32C of each `chunk`-byte piece of src[0..bytes) (the last one may be shorter), each
 * started from 0 (crcs[i] = ftrt__crc32c(0, src + i*chunk, ...)): what the device CRC kernel
 * computes, one piece per thread. crcs holds ceil(bytes / chunk) entries; chunk > 0. */
void ftrt__k_crc32c_chunks(const void *src, size_t bytes, size_t chunk, uint32_t *crcs);

/* Merges the per-chunk CRCs of ftrt__k_crc32c_chunks into the CRC32C of the whole `bytes`
 * (continued from `crc`, 0 for a fresh CRC): equals ftrt__crc32c(crc, src, bytes). Uses
 * ftrt__crc32c_combine (base/crc32c.c). */
uint32_t ftrt__k_crc32c_merge(uint32_t crc, const uint32_t *crcs, size_t bytes, size_t chunk);

#ifdef __cplusplus
}
#endif
#endif
