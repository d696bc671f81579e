/*
 * device_snapshot.h - the GPU checkpoint path (internal; libftrt_gpu only): a device region is
 * copied into a pinned host staging buffer with cudaMemcpyAsync on a side stream, ordered after
 * the compute already queued (so it sees the state at the step boundary) and overlapping the
 * compute queued afterwards; optionally a CRC32C of the bytes is computed on the device on the
 * same side stream (per-chunk kernel + host merge, identical to ftrt__crc32c of the bytes).
 *
 * The checkpoint engine (checkpoint/, issue 3) owns when snapshots are taken and where the
 * staging goes; these functions are its device hook. Usage:
 *     ftrt__dev_snap s;
 *     ftrt__dev_snapshot_start(&s, staging, dev_ptr, bytes, side, compute, 1);
 *     ftrt__dev_snapshot_order(&s, compute);  // before the next kernel that modifies dev_ptr
 *     ... ftrt__dev_snapshot_wait(&s, &crc);  // staging holds the bytes, crc their CRC32C
 *     ftrt__dev_snapshot_release(&s);
 * A snapshot is used by one thread at a time.
 */
#ifndef FTRT_DEVICE_SNAPSHOT_H
#define FTRT_DEVICE_SNAPSHOT_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FTRT__SNAP_CHUNK 4096 /* bytes per CRC piece (one device thread each) */

typedef struct ftrt__dev_snap {
    cudaEvent_t done;    /* recorded on the side stream after the copy (and the CRC) */
    cudaEvent_t start;   /* recorded on the `after` stream at start */
    uint32_t *crcs_dev;  /* per-chunk CRCs on the device */
    uint32_t *crcs_host; /* and their pinned host copy */
    size_t bytes, nchunks;
    int want_crc;
    int started;
} ftrt__dev_snap;

/* Allocates / frees page-locked host memory for staging (cudaHostAlloc, portable + mapped).
 * Returns 0, FTRT_ENODEV (no device or driver), -ENOMEM, or FTRT_ECUDA. */
int ftrt__dev_pinned_alloc(void **out, size_t bytes);
void ftrt__dev_pinned_free(void *p);

/*
 * Starts the snapshot of `bytes` bytes at device pointer src into pinned host memory dst:
 * side waits for the work already queued on `after` (NULL: none), then copies (DMA) and, when
 * want_crc, computes the CRC32C on the device. Returns at once.
 * Returns 0, FTRT_EINVAL (NULL s/dst/src with bytes > 0), FTRT_ENODEV, FTRT_ECUDA, -ENOMEM;
 * on error nothing is left queued that refers to s and s needs no release.
 */
int ftrt__dev_snapshot_start(ftrt__dev_snap *s, void *dst, const void *src, size_t bytes,
                             cudaStream_t side, cudaStream_t after, int want_crc);
/* Makes `stream` wait (on the device) until the snapshot has read the region: call before
 * queueing work that modifies it. Returns 0 or FTRT_ECUDA. */
int ftrt__dev_snapshot_order(ftrt__dev_snap *s, cudaStream_t stream);
/* 1 when the snapshot is complete, 0 while in flight, FTRT_ECUDA on a device error. */
int ftrt__dev_snapshot_test(ftrt__dev_snap *s);
/* Blocks until complete (polling politely); *crc (may be NULL) receives the CRC32C of the
 * bytes when want_crc was set. Returns 0 or FTRT_ECUDA. */
int ftrt__dev_snapshot_wait(ftrt__dev_snap *s, uint32_t *crc);
/* Frees the snapshot's events and CRC buffers (waits for it first). */
void ftrt__dev_snapshot_release(ftrt__dev_snap *s);

#ifdef __cplusplus
}
#endif
#endif
