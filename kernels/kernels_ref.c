/*
 * kernels_ref.c - CPU reference implementations of the data-plane kernels (kernels.h).
 *
 * These are what the CPU data plane runs, and the ground truth the CUDA kernels are tested
 * against. Scaling multiplies in the element type, element by element, so it is bitwise
 * reproducible and identical on both sides (IEEE 754 multiplication is correctly rounded; the
 * CUDA kernels are compiled without fused multiply-add contraction; the 16-bit formats widen,
 * multiply in float32 and narrow with the shared code of kernels/half.h).
 */
#include <string.h>

#include "base/crc32c.h"
#include "kernels/half.h"
#include "kernels/kernels.h"

void ftrt__k_pack(void *bucket, const ftrt__seg *segs, int n)
{
    char *b = bucket;
    for (int i = 0; i < n; i++) {
        if (segs[i].bytes) memcpy(b, segs[i].ptr, segs[i].bytes);
        b += segs[i].bytes;
    }
}

void ftrt__k_unpack(const void *bucket, const ftrt__seg *segs, int n)
{
    const char *b = bucket;
    for (int i = 0; i < n; i++) {
        if (segs[i].bytes) memcpy(segs[i].ptr, b, segs[i].bytes);
        b += segs[i].bytes;
    }
}

static void scale_copy(void *dst, const void *src, size_t count, int dtype, double scale)
{
    if (dtype == FTRT__K_F32) {
        const float s = (float)scale;
        const float *x = src;
        float *y = dst;
        for (size_t i = 0; i < count; i++) y[i] = x[i] * s;
    } else if (dtype == FTRT__K_F64) {
        const double *x = src;
        double *y = dst;
        for (size_t i = 0; i < count; i++) y[i] = x[i] * scale;
    } else if (dtype == FTRT__K_BF16 || dtype == FTRT__K_F16) {
        const float s = (float)scale; /* float32(x) * s, rounded to float32, then narrowed */
        const uint16_t *x = src;
        uint16_t *y = dst;
        for (size_t i = 0; i < count; i++)
            y[i] = ftrt__f32_to_h16(dtype, ftrt__h16_to_f32(dtype, x[i]) * s);
    }
}

static size_t esize(int dtype) { return ftrt__k_esize(dtype); }

void ftrt__k_unpack_scale(const void *bucket, const ftrt__seg *segs, int n, int dtype,
                          double scale)
{
    if (scale == 1.0 || !ftrt__k_scalable(dtype)) {
        ftrt__k_unpack(bucket, segs, n);
        return;
    }
    const char *b = bucket;
    for (int i = 0; i < n; i++) {
        scale_copy(segs[i].ptr, b, segs[i].bytes / esize(dtype), dtype, scale);
        b += segs[i].bytes;
    }
}

/* Calls fn(tensor piece, bucket piece, bytes) for each piece of [off, off + len) of the
 * concatenation of segs. */
#define FOR_RANGE(segs, n, off, len, BODY)                                                       \
    do {                                                                                       \
        size_t base_ = 0, end_ = (off) + (len);                                                \
        for (int i_ = 0; i_ < (n) && base_ < end_; i_++) {                                     \
            size_t b0_ = base_, b1_ = base_ + (segs)[i_].bytes;                                \
            base_ = b1_;                                                                       \
            size_t lo_ = b0_ > (off) ? b0_ : (off), hi_ = b1_ < end_ ? b1_ : end_;             \
            if (lo_ >= hi_) continue;                                                          \
            char *t_ = (char *)(segs)[i_].ptr + (lo_ - b0_);                                    \
            size_t at_ = lo_, nb_ = hi_ - lo_;                                                 \
            BODY;                                                                              \
        }                                                                                      \
    } while (0)

void ftrt__k_pack_range(void *bucket, const ftrt__seg *segs, int n, size_t off, size_t len)
{
    char *b = bucket;
    FOR_RANGE(segs, n, off, len, memcpy(b + at_, t_, nb_));
}

void ftrt__k_unpack_scale_range(const void *bucket, const ftrt__seg *segs, int n, size_t off,
                                size_t len, int dtype, double scale)
{
    const char *b = bucket;
    if (scale == 1.0 || !ftrt__k_scalable(dtype))
        FOR_RANGE(segs, n, off, len, memcpy(t_, b + at_, nb_));
    else
        FOR_RANGE(segs, n, off, len, scale_copy(t_, b + at_, nb_ / esize(dtype), dtype, scale));
}

void ftrt__k_scale(void *buf, size_t count, int dtype, double scale)
{
    if (scale == 1.0) return;
    scale_copy(buf, buf, count, dtype, scale);
}

void ftrt__k_crc32c_chunks(const void *src, size_t bytes, size_t chunk, uint32_t *crcs)
{
    const char *p = src;
    for (size_t off = 0, i = 0; off < bytes; off += chunk, i++)
        crcs[i] = ftrt__crc32c(0, p + off, bytes - off < chunk ? bytes - off : chunk);
}

uint32_t ftrt__k_crc32c_merge(uint32_t crc, const uint32_t *crcs, size_t bytes, size_t chunk)
{
    for (size_t off = 0, i = 0; off < bytes; off += chunk, i++)
        crc = ftrt__crc32c_combine(crc, crcs[i], bytes - off < chunk ? bytes - off : chunk);
    return crc;
}
