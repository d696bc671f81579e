/*
 * nccl_bucketer.c - the GPU bucketer (ftrt_gpu_bucketer_*, include/ftrt_gpu.h; libftrt_gpu
 * only): comm/bucketer.c's buckets with the NCCL plane as their backend. A bucket starts on the
 * communication stream once it has waited for the events recorded on its tensors' producer
 * streams; its consumers wait on the request's `done` event. Posting threads other than the
 * plane's owner (autograd's device threads) start buckets themselves where the epoch's
 * communicator exists, else defer them to the owner (comm/nccl_plane.c's header, "Threads").
 */
#include <errno.h>
#include <stdlib.h>

#include "comm/nccl_plane.h"
#include "kernels/cuda_check.h"

typedef struct gpu_bk {
    ftrt_gpu *g;
    int dtype, n;
    cudaEvent_t *ev; /* per tensor: recorded on its producer at ready */
} gpu_bk;

/* Starts a bucket: the stream waits for its tensors' producer events, then the collective.
 * Any thread (under the bucketer's step lock); off the owner, deferred to it while the epoch
 * has no communicator yet. */
static int bk_submit(void *arg, int bucket, const int *tensors, const ftrt__seg *segs, int n,
                     size_t count, double scale, int in_place, struct ftrt_request **req)
{
    gpu_bk *bk = arg;
    ftrt_gpu *g = bk->g;
    (void)bucket;
    int rc = ftrt__watch_check(g->plane->watch);
    if (rc) return rc;
    pthread_mutex_lock(&g->lock);
    if (!ftrt__gpu_on_owner(g) && !ftrt__gpu_comm_ready(g)) {
        pthread_mutex_unlock(&g->lock);
        return FTRT__BUCKET_DEFER;
    }
    for (int j = 0; !rc && j < n; j++)
        rc = ftrt__cuda_err(cudaStreamWaitEvent(g->stream, bk->ev[tensors[j]], 0),
                            "cudaStreamWaitEvent");
    if (!rc) rc = ftrt__gpu_submit(g, segs, n, count, bk->dtype, FTRT_SUM, scale, in_place,
                                           req);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

static void bk_destroy(void *arg)
{
    gpu_bk *bk = arg;
    for (int i = 0; i < bk->n; i++)
        if (bk->ev[i]) cudaEventDestroy(bk->ev[i]);
    free(bk->ev);
    bk->g->nbucketers--;
    free(bk);
}

/* The consumer stream waits for the request's `done` event (recorded under the plane's lock
 * before the request was published to the bucketer; destroyed only when the bucketer frees
 * the request, under its step lock, which the caller holds). Any thread. */
static int bk_order(void *arg, struct ftrt_request *req, void *consumer)
{
    (void)arg;
    return ftrt_gpu_request_order(req, (cudaStream_t)consumer);
}

static const ftrt__bucket_backend gpu_backend = {bk_submit, ftrt__gpu_wait_raw, bk_destroy, 1,
                                                 bk_order};

int ftrt_gpu_bucketer_create(ftrt_gpu *g, const size_t *counts, int ntensors, ftrt_dtype dtype,
                             const ftrt_bucket_config *cfg, ftrt_bucketer **out)
{
    if (!out) return FTRT_EINVAL;
    *out = NULL;
    if (!g || ntensors < 1) return FTRT_EINVAL;
    int rc = ftrt__gpu_check_dtype_op(dtype, FTRT_SUM);
    if (rc) return rc;
    gpu_bk *bk = calloc(1, sizeof *bk);
    if (!bk) return -ENOMEM;
    bk->g = g;
    bk->dtype = (int)dtype;
    bk->n = ntensors;
    bk->ev = calloc((size_t)ntensors, sizeof *bk->ev);
    rc = bk->ev ? 0 : -ENOMEM;
    for (int i = 0; !rc && i < ntensors; i++)
        rc = ftrt__cuda_err(cudaEventCreateWithFlags(&bk->ev[i], cudaEventDisableTiming),
                            "cudaEventCreate");
    g->nbucketers++;
    ftrt_bucket_config c; /* whole buckets: NCCL pipelines inside a collective */
    if (!rc) rc = ftrt__bucket_config_copy(&c, cfg);
    c.piece_bytes = 0;
    if (!rc) rc = ftrt__bucketer_create_be(g->plane, counts, ntensors, dtype, &c, &gpu_backend, bk,
                                           out);
    if (rc) bk_destroy(bk);
    return rc;
}

int ftrt_gpu_bucketer_ready(ftrt_bucketer *b, int tensor, void *ptr, cudaStream_t producer)
{
    void *arg;
    if (!b || ftrt__bucketer_backend(b, &arg) != &gpu_backend) return FTRT_EINVAL;
    if (ftrt_bucketer_bucket_of(b, tensor) < 0) return FTRT_EINVAL;
    gpu_bk *bk = arg;
    int rc = ftrt__cuda_err(cudaEventRecord(bk->ev[tensor], producer), "cudaEventRecord");
    if (rc) return rc;
    return ftrt_bucketer_ready(b, tensor, ptr);
}

/* Makes the plane's device current on the calling thread; *prev: the thread's own (-1 when
 * unknown). 0 or FTRT_ECUDA. */
static int device_enter(const ftrt_gpu *g, int *prev)
{
    if (cudaGetDevice(prev) != cudaSuccess) *prev = -1;
    if (*prev == g->device) return 0;
    return ftrt__cuda_err(cudaSetDevice(g->device), "cudaSetDevice");
}

/* Gives the calling thread its own current device back (device_enter's prev). */
static void device_leave(const ftrt_gpu *g, int prev)
{
    if (prev >= 0 && prev != g->device) cudaSetDevice(prev);
}

int ftrt_gpu_bucketer_ready_from_any_thread(ftrt_bucketer *b, int tensor, void *ptr,
                                            cudaStream_t producer)
{
    void *arg;
    if (!b || ftrt__bucketer_backend(b, &arg) != &gpu_backend) return FTRT_EINVAL;
    if (ftrt_bucketer_bucket_of(b, tensor) < 0) return FTRT_EINVAL;
    gpu_bk *bk = arg;
    unsigned gen = ftrt__bucketer_gen(b); /* before the step can end under us: see bucketer.h */
    int prev;
    int rc = device_enter(bk->g, &prev);
    if (!rc) rc = ftrt__cuda_err(cudaEventRecord(bk->ev[tensor], producer), "cudaEventRecord");
    if (!rc) rc = ftrt__bucketer_post_direct(b, tensor, ptr, gen);
    device_leave(bk->g, prev);
    return rc;
}

int ftrt_gpu_bucketer_order(ftrt_bucketer *b, cudaStream_t consumer)
{
    if (!b || ftrt__bucketer_backend(b, NULL) != &gpu_backend) return FTRT_EINVAL;
    (void)ftrt_bucketer_drain(b); /* starts what posters deferred; its error is wait_all's */
    return ftrt__bucketer_order(b, consumer, 0);
}

int ftrt_gpu_bucketer_order_from_any_thread(ftrt_bucketer *b, cudaStream_t consumer)
{
    void *arg;
    if (!b || ftrt__bucketer_backend(b, &arg) != &gpu_backend) return FTRT_EINVAL;
    gpu_bk *bk = arg;
    int prev;
    int rc = device_enter(bk->g, &prev);
    if (!rc) rc = ftrt__bucketer_order(b, consumer, 1); /* never starts a piece itself */
    device_leave(bk->g, prev);
    return rc;
}
