/*
 * pool.h - the data plane's staging buffers: a pool of free buffers kept for reuse, and a
 * graveyard of abandoned ones (internal to libftrt; comm/).
 *
 * A collective packs the application's tensors into a staging buffer that the plane owns. Once
 * the collective completes, the buffer goes back to a pool, from which the next collective takes
 * the smallest one that is large enough: steady-state steps then never allocate (nor page-fault
 * fresh memory). A collective abandoned after it started (an epoch change, an MPI or NCCL error)
 * may still be written by the transport, so its buffer goes to the graveyard instead: never
 * reused, and freed (if at all) only once the transport is gone (after MPI_Finalize, or once the
 * NCCL communicator is destroyed and the stream idle).
 *
 * Users: the CPU request engine (comm/async.c: host memory, malloc/free), the MPI plane's
 * blocking collectives (comm/mpi_plane.c: its graveyard), and the NCCL plane (comm/nccl_plane.c:
 * device and mapped pinned memory, released with cudaFree/cudaFreeHost).
 *
 * Neither structure locks: the owner serializes every call on one (async.c holds e->lock, the
 * NCCL plane runs on the application thread).
 */
#ifndef FTRT_COMM_POOL_H
#define FTRT_COMM_POOL_H

#include <stddef.h>

#define FTRT__POOL_CAP 64 /* the most buffers a pool can hold */

/* Releases a buffer of a pool (free, cudaFree, cudaFreeHost, ...). */
typedef void (*ftrt__buf_release)(void *p);

typedef struct ftrt__pool {
    struct {
        void *p;
        size_t cap; /* bytes */
    } b[FTRT__POOL_CAP];
    int n;            /* buffers held */
    int max;          /* at most this many, <= FTRT__POOL_CAP */
    int keep_largest; /* full: 1 evicts the smallest for a larger newcomer, 0 drops the newcomer */
    ftrt__buf_release release;
} ftrt__pool;

typedef struct ftrt__grave {
    void **p;
    int n;
} ftrt__grave;

/* Prepares an empty pool of at most `max` buffers (clamped to 1..FTRT__POOL_CAP) released with
 * `release`. When full, a returned buffer is dropped (released), or with keep_largest it
 * replaces the smallest one held if it is larger (host memory: keep the buffers that serve the
 * most requests; device memory is scarcer, so the NCCL plane keeps what it has). Never fails. */
void ftrt__pool_init(ftrt__pool *p, int max, int keep_largest, ftrt__buf_release release);
/* Takes the smallest buffer of at least `bytes` bytes out of the pool, its capacity in *cap;
 * the caller owns it then. NULL (and *cap untouched) when none is large enough. */
void *ftrt__pool_take(ftrt__pool *p, size_t bytes, size_t *cap);
/* Gives buf (`cap` bytes, NULL ignored) to the pool, which owns it from here on and releases it
 * at once when it does not keep it. Never fails. */
void ftrt__pool_put(ftrt__pool *p, void *buf, size_t cap);
/* Releases every buffer held; the pool is empty (and usable) afterwards. */
void ftrt__pool_clear(ftrt__pool *p);

/* Buries buf (NULL ignored): the graveyard holds it until ftrt__grave_clear. Returns 0, or
 * -ENOMEM when the list cannot grow: buf is then not held (the caller may leak it, which is
 * just as safe, or report the error). */
int ftrt__grave_put(ftrt__grave *g, void *buf);
/* Frees the list and, with a non-NULL `release`, every buried buffer (only once nothing can
 * write them any more; NULL leaves them allocated). The graveyard is empty afterwards. */
void ftrt__grave_clear(ftrt__grave *g, ftrt__buf_release release);

#endif
