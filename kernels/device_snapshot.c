/*
 * device_snapshot.c - device regions copied into pinned host staging on a side stream, with an
 * optional device CRC32C (see device_snapshot.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "ftrt.h"
#include "kernels/cuda_check.h"
#include "kernels/device_snapshot.h"
#include "kernels/kernels_gpu.h"

int ftrt__dev_pinned_alloc(void **out, size_t bytes)
{
    *out = NULL;
    return ftrt__cuda_err(cudaHostAlloc(out, bytes ? bytes : 1,
                                        cudaHostAllocPortable | cudaHostAllocMapped),
                          "cudaHostAlloc");
}

void ftrt__dev_pinned_free(void *p)
{
    if (p) cudaFreeHost(p);
}

static void snap_free(ftrt__dev_snap *s)
{
    if (s->done) cudaEventDestroy(s->done);
    if (s->start) cudaEventDestroy(s->start);
    if (s->crcs_dev) cudaFree(s->crcs_dev);
    if (s->crcs_host) cudaFreeHost(s->crcs_host);
    memset(s, 0, sizeof *s);
}

int ftrt__dev_snapshot_start(ftrt__dev_snap *s, void *dst, const void *src, size_t bytes,
                             cudaStream_t side, cudaStream_t after, int want_crc)
{
    if (!s || ((!dst || !src) && bytes)) return FTRT_EINVAL;
    memset(s, 0, sizeof *s);
    s->bytes = bytes;
    s->want_crc = want_crc && bytes > 0;
    s->nchunks = (bytes + FTRT__SNAP_CHUNK - 1) / FTRT__SNAP_CHUNK;
    int rc = ftrt__cuda_err(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming),
                            "cudaEventCreate");
    if (!rc) rc = ftrt__cuda_err(cudaEventCreateWithFlags(&s->start, cudaEventDisableTiming),
                                 "cudaEventCreate");
    if (!rc && s->want_crc) {
        rc = ftrt__cuda_err(cudaMalloc((void **)&s->crcs_dev, s->nchunks * sizeof(uint32_t)),
                            "cudaMalloc");
        if (!rc) rc = ftrt__cuda_err(cudaHostAlloc((void **)&s->crcs_host,
                                                   s->nchunks * sizeof(uint32_t),
                                                   cudaHostAllocDefault), "cudaHostAlloc");
    }
    /* Order: the side stream starts once the compute queued so far on `after` is done. */
    if (!rc && after) rc = ftrt__cuda_err(cudaEventRecord(s->start, after), "cudaEventRecord");
    if (!rc && after)
        rc = ftrt__cuda_err(cudaStreamWaitEvent(side, s->start, 0), "cudaStreamWaitEvent");
    if (!rc && bytes)
        rc = ftrt__cuda_err(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, side),
                            "cudaMemcpyAsync");
    if (!rc && s->want_crc) {
        rc = ftrt__cuda_err(ftrt__kgpu_copy_crc32c_chunks(NULL, src, bytes, FTRT__SNAP_CHUNK,
                                                          s->crcs_dev, side), "crc32c kernel");
        if (!rc) rc = ftrt__cuda_err(cudaMemcpyAsync(s->crcs_host, s->crcs_dev,
                                                     s->nchunks * sizeof(uint32_t),
                                                     cudaMemcpyDeviceToHost, side),
                                     "cudaMemcpyAsync");
    }
    if (!rc) rc = ftrt__cuda_err(cudaEventRecord(s->done, side), "cudaEventRecord");
    if (rc) {
        /* Something may be queued on `side`: let it drain before freeing what it uses. */
        cudaStreamSynchronize(side);
        (void)cudaGetLastError();
        snap_free(s);
        return rc;
    }
    s->started = 1;
    return 0;
}

int ftrt__dev_snapshot_order(ftrt__dev_snap *s, cudaStream_t stream)
{
    if (!s || !s->started) return FTRT_EINVAL;
    return ftrt__cuda_err(cudaStreamWaitEvent(stream, s->done, 0), "cudaStreamWaitEvent");
}

int ftrt__dev_snapshot_test(ftrt__dev_snap *s)
{
    if (!s || !s->started) return FTRT_EINVAL;
    cudaError_t e = cudaEventQuery(s->done);
    if (e == cudaErrorNotReady) return 0;
    int rc = ftrt__cuda_err(e, "cudaEventQuery");
    return rc ? rc : 1;
}

int ftrt__dev_snapshot_wait(ftrt__dev_snap *s, uint32_t *crc)
{
    int rc;
    for (long i = 0; (rc = ftrt__dev_snapshot_test(s)) == 0; i++) {
        ftrt__polite(i, 64, 50 * 1000L);
    }
    if (rc < 0) return rc;
    if (crc) *crc = s->want_crc ? ftrt__k_crc32c_merge(0, s->crcs_host, s->bytes,
                                                       FTRT__SNAP_CHUNK)
                                : 0;
    return 0;
}

void ftrt__dev_snapshot_release(ftrt__dev_snap *s)
{
    if (!s || !s->started) return;
    cudaEventSynchronize(s->done);
    snap_free(s);
}
