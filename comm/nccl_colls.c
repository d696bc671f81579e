/*
 * nccl_colls.c - the NCCL plane's collectives of one buffer (libftrt_gpu only):
 * ftrt_gpu_allreduce_start, ftrt_gpu_broadcast_start, ftrt_gpu_reduce_scatter_start and
 * ftrt_gpu_allgather_start (include/ftrt_gpu.h): their argument checks, then the stream
 * ordered after the producer and one submission to the plane (comm/nccl_plane.c
 * ftrt__gpu_submit_coll), under the plane's lock.
 */
#include <stdint.h>

#include "base/log.h"
#include "comm/async.h"
#include "comm/nccl_plane.h"
#include "kernels/cuda_check.h"

/* (comm/nccl_plane.h) */
int ftrt__gpu_after_producer(ftrt_gpu *g, cudaStream_t producer)
{
    int rc = ftrt__cuda_err(cudaEventRecord(g->ev_producer, producer), "cudaEventRecord");
    if (!rc) rc = ftrt__cuda_err(cudaStreamWaitEvent(g->stream, g->ev_producer, 0),
                                 "cudaStreamWaitEvent");
    return rc;
}

/* Checks and starts one collective (coll, with op or root) of buf after `producer`: the
 * returns of ftrt_gpu_allreduce_start / ftrt_gpu_broadcast_start. */
static int start_coll(ftrt_gpu *g, ftrt__coll coll, int root, void *buf, size_t count,
                      ftrt_dtype dtype, ftrt_op op, cudaStream_t producer, ftrt_request **req)
{
    if (!req) return FTRT_EINVAL;
    *req = NULL;
    if (!g || (!buf && count)) return FTRT_EINVAL;
    if (coll == FTRT__COLL_BCAST && (root < 0 || root >= g->plane->size)) return FTRT_EINVAL;
    int rc = ftrt__gpu_check_dtype_op(dtype, op);
    if (rc) return rc;
    rc = ftrt__watch_check(g->plane->watch);
    if (rc) return rc;
    ftrt__seg seg = {buf, count * ftrt__k_esize((int)dtype)};
    pthread_mutex_lock(&g->lock); /* ev_producer and the stream are shared with posting threads */
    if ((rc = ftrt__gpu_after_producer(g, producer)) == 0)
        rc = ftrt__gpu_submit_coll(g, coll, root, &seg, 1, NULL, count, dtype, op, 1.0, 0,
                                   req);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

/* Checks and starts a reduce-scatter or all-gather (coll) from send into recv after
 * `producer`: the returns of ftrt_gpu_reduce_scatter_start / ftrt_gpu_allgather_start. */
static int start_rsag(ftrt_gpu *g, ftrt__coll coll, const void *send, void *recv, size_t count,
                      ftrt_dtype dtype, ftrt_op op, cudaStream_t producer, ftrt_request **req)
{
    if (!req) return FTRT_EINVAL;
    *req = NULL;
    if (!g || ((!send || !recv) && count)) return FTRT_EINVAL;
    int rc = ftrt__gpu_check_dtype_op(dtype, op);
    if (rc) return rc;
    size_t es = ftrt__k_esize((int)dtype), n = (size_t)g->plane->size;
    if (count > SIZE_MAX / es / (n + 1) ||
        !ftrt__rsag_alias_ok(coll, send, recv, count, es, g->plane->size))
        return FTRT_EINVAL;
    if ((rc = ftrt__watch_check(g->plane->watch)) != 0) return rc;
    int rs = coll == FTRT__COLL_RSCATTER;
    ftrt__seg s = {(void *)(uintptr_t)send, (rs ? n : 1) * count * es}; /* only read */
    ftrt__seg d = {recv, (rs ? 1 : n) * count * es};
    pthread_mutex_lock(&g->lock); /* ev_producer and the stream are shared with posting threads */
    if ((rc = ftrt__gpu_after_producer(g, producer)) == 0)
        rc = ftrt__gpu_submit_coll(g, coll, 0, &s, 1, &d, count, dtype, op, 1.0, 0, req);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

int ftrt_gpu_reduce_scatter_start(ftrt_gpu *g, const void *sendbuf, void *recvbuf, size_t count,
                                  ftrt_dtype dtype, ftrt_op op, cudaStream_t producer,
                                  ftrt_request **req)
{
    return start_rsag(g, FTRT__COLL_RSCATTER, sendbuf, recvbuf, count, dtype, op, producer,
                      req);
}

int ftrt_gpu_allgather_start(ftrt_gpu *g, const void *sendbuf, void *recvbuf, size_t count,
                             ftrt_dtype dtype, cudaStream_t producer, ftrt_request **req)
{
    return start_rsag(g, FTRT__COLL_ALLGATHER, sendbuf, recvbuf, count, dtype, FTRT_SUM, producer,
                      req);
}

int ftrt_gpu_allreduce_start(ftrt_gpu *g, void *buf, size_t count, ftrt_dtype dtype, ftrt_op op,
                             cudaStream_t producer, ftrt_request **req)
{
    return start_coll(g, FTRT__COLL_ALLREDUCE, 0, buf, count, dtype, op, producer, req);
}

int ftrt_gpu_broadcast_start(ftrt_gpu *g, void *buf, size_t count, ftrt_dtype dtype, int root,
                             cudaStream_t producer, ftrt_request **req)
{
    return start_coll(g, FTRT__COLL_BCAST, root, buf, count, dtype, FTRT_SUM, producer, req);
}
