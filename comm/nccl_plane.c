/*
 * nccl_plane.c - the GPU data plane: NCCL allreduces of buckets (and broadcasts, reduce-scatters
 * and all-gathers) on a dedicated communication stream, failure-aware (ftrt_gpu.h has the
 * model; libftrt_gpu only). A reduce-scatter or all-gather stages both sides in one device
 * buffer (comm/async.h's layout, unchunked): pack the send side, NCCL from it into the receive
 * side, guarded unpack into the application's receive buffer.
 *
 * One collective on the communication stream:
 *   wait for the producer (event) -> pack kernel (tensors -> plane-owned device bucket)
 *   -> ncclAllReduce in place on the bucket -> guarded unpack kernel (bucket -> tensors, times
 *   scale) -> `done` event, which consumers (the optimizer's stream) wait on.
 *   With ftrt_bucket_config.in_place and tensors back to back (gradients as bucket views), the
 *   bucket is the tensors' memory: no pack, the allreduce on it, the guarded unpack kernel
 *   scaling it in place.
 * The host polls `done` together with ncclCommGetAsyncError and the epoch flag. On an epoch
 * change (or an NCCL/CUDA error) the plane first bumps the guard word (mapped pinned memory) so
 * that unpacks still queued write nothing, then revokes and destroys (or aborts) the
 * communicator; every live request fails and its device bucket and descriptor array go to the
 * graveyard (never reused; freed only in ftrt_gpu_free once the stream is idle and NCCL gone).
 * The next collective builds a fresh communicator for the new epoch: that happens at the same
 * point of every member's sequence of collectives (survivors after ftrt_recover(), a promoted
 * spare after ftrt_restore()), which is why it is lazy rather than part of ftrt_recover().
 *
 * Threads: the plane belongs to the thread that created it (`owner`, the application thread),
 * but a GPU bucketer's buckets may start on the threads that post its gradients
 * (ftrt_gpu_bucketer_ready_from_any_thread: autograd's device threads, while the owner is
 * blocked in backward()). So every call that touches the plane's state, its NCCL communicator
 * or its stream (submit, test, free, abandon) holds `lock`: NCCL allows a communicator to be
 * used from several threads as long as one thread at a time does ("Thread Safety" in NCCL's
 * user guide), the CUDA runtime is thread-safe, and the lock also keeps the event waits, pack,
 * ncclAllReduce and unpack of one collective together on the stream. Building the
 * communicator broadcasts its unique id over MPI, so only the owner builds it (ensure_comm);
 * off the owner a bucket of an epoch whose communicator does not exist yet is deferred to the
 * owner (FTRT__BUCKET_DEFER, comm/bucketer.h). Off the owner the plane reads the epoch watch's
 * atomics and its epoch, which only ftrt_recover() changes, with no post in flight.
 *
 * Interrupts from the agent thread: the application may wait on the plane's work outside ftrt
 * (a PyTorch user's loss.item() between backward() and step() synchronizes the host with a
 * stream that waits on `done`). When a trainer dies then, the NCCL kernels wait for it forever
 * and no ftrt call polls the watch. So the plane listens on the watch through an interrupter
 * (comm/interrupt.h): on an epoch change or the end of the job the agent thread wakes the
 * interrupter's thread, which takes `lock` and aborts the communicator of an older epoch
 * (ncclCommAbort "aborts any operations that might still be running on
 * the device" (nccl.h) and may be called from another thread to unblock a hung communicator:
 * "Error handling and communicator abort" in NCCL's user guide,
 * https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/communicators.html). The
 * kernels end, the unpacks are disarmed by the guard, `done` fires, the host sync returns,
 * and the application's next ftrt call sees FTRT_ERECOVER as before. The live requests fail
 * with FTRT_ERECOVER right there; the application's own abandon (recovery) then finds no
 * communicator and retires nothing twice.
 *
 * Requests and their `done` events are pooled (req_get / req_put). The plane's state and the
 * calls shared with the GPU bucketer (comm/nccl_bucketer.c) and the communicator's settings
 * (comm/nccl_config.c) are in comm/nccl_plane.h.
 */
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "comm/async.h"
#include "comm/bucketer.h"
#include "comm/interrupt.h"
#include "comm/plane.h"
#include "comm/nccl_plane.h"
#include "comm/pool.h"
#include "ftrt_gpu.h"
#include "kernels/cuda_check.h"
#include "kernels/kernels_gpu.h"

#define POOL_MAX 32 /* buffers of each kind kept for reuse */
#define REQ_POOL_MAX 64 /* freed requests (each with its `done` event) kept for reuse */

typedef struct gbuf {
    void *p;
    size_t cap;
} gbuf;

typedef struct gpu_req {
    struct ftrt_request base;
    struct ftrt_gpu *g;
    int result; /* 1 in flight, 0 done, < 0 failed */
    cudaEvent_t done;
    gbuf staging; /* device */
    gbuf desc;    /* mapped pinned host, ftrt__kdesc[] */
    struct gpu_req *next; /* in g->live, or in g->free_reqs once freed */
} gpu_req;

static int nccl_err(ncclResult_t r, ncclComm_t comm, const char *call)
{
    if (r == ncclSuccess || r == ncclInProgress) return 0;
    ftrt_log_error("%s failed: %s (%s)", call, ncclGetErrorString(r),
                   comm ? ncclGetLastError(comm) : "no detail");
    return FTRT_ENCCL;
}

/* Between polls that found nothing (NCCL states, CUDA events). */
static void polite(long i) { ftrt__polite(i, 64, 50 * 1000L); }

/* ---- device and pinned buffers: pools and graveyard ---- */

static void dev_free(void *p) { cudaFree(p); }
static void host_free(void *p) { cudaFreeHost(p); }

/* Gives r's buffers back to the pools: nothing queued uses them any more. */
static void release_bufs(ftrt_gpu *g, gpu_req *r)
{
    ftrt__pool_put(&g->dev, r->staging.p, r->staging.cap);
    ftrt__pool_put(&g->host, r->desc.p, r->desc.cap);
    r->staging.p = r->desc.p = NULL;
}

/* Buries r's buffers: work still queued may use them (else leaked, which is just as safe). */
static void bury(ftrt_gpu *g, gpu_req *r)
{
    (void)ftrt__grave_put(&g->grave_dev, r->staging.p);
    (void)ftrt__grave_put(&g->grave_host, r->desc.p);
    r->staging.p = r->desc.p = NULL;
}

static int get_buf(ftrt_gpu *g, int device_mem, size_t bytes, gbuf *out)
{
    if (!bytes) bytes = 1;
    out->p = ftrt__pool_take(device_mem ? &g->dev : &g->host, bytes, &out->cap);
    if (out->p) return 0;
    out->cap = bytes;
    if (device_mem) return ftrt__cuda_err(cudaMalloc(&out->p, bytes), "cudaMalloc");
    return ftrt__cuda_err(cudaHostAlloc(&out->p, bytes, cudaHostAllocMapped), "cudaHostAlloc");
}

/* ---- the communicator ---- */

static void guard_bump(ftrt_gpu *g)
{
    g->gen++;
    *g->guard = g->gen;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* Waits (at most `ms`) for a nonblocking communicator to leave ncclInProgress. Returns its
 * state. */
static ncclResult_t await_state(ncclComm_t comm, int ms)
{
    ncclResult_t st = ncclInProgress;
    double deadline = ftrt__now() + ms / 1e3;
    for (long i = 0; st == ncclInProgress && ftrt__now() < deadline; i++) {
        if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) return ncclInternalError;
        if (st == ncclInProgress) polite(i);
    }
    return st;
}

/* Retires the communicator: unpacks still queued are disarmed first, then in-flight
 * operations are stopped. ncclCommRevoke (where nccl.h has it) stops them and lets the
 * communicator be destroyed once quiescent (when may_revoke); ncclCommAbort is the fallback. */
static void comm_retire(ftrt_gpu *g, int may_revoke)
{
    if (!g->comm) return;
    guard_bump(g);
    ncclComm_t c = g->comm;
    g->comm = NULL;
    g->dead_gen = g->comm_plane_gen; /* not rebuilt before the plane's next generation */
    g->has_dead = 1;
    int destroyed = 0;
    (void)may_revoke;
#if defined(NCCL_REVOKE_DEFAULT) /* ncclCommRevoke: NCCL 2.29 (2.28.3 has ncclCommShrink only) */
    ncclResult_t rv = may_revoke ? ncclCommRevoke(c, NCCL_REVOKE_DEFAULT) : ncclInvalidUsage;
    if (may_revoke && (rv == ncclSuccess || rv == ncclInProgress) &&
        await_state(c, 2000) == ncclSuccess) {
        ncclResult_t dr = ncclCommDestroy(c); /* quiescent: destroying is safe */
        if (dr != ncclSuccess) ftrt_log_warn("ncclCommDestroy: %s", ncclGetErrorString(dr));
        destroyed = 1;
    }
#endif
    if (!destroyed) {
        ncclResult_t r = ncclCommAbort(c);
        if (r != ncclSuccess) ftrt_log_warn("ncclCommAbort: %s", ncclGetErrorString(r));
    }
    ftrt_log_info("NCCL communicator of plane generation %u retired (%s)", g->comm_plane_gen,
                  destroyed ? "revoked and destroyed" : "aborted");
}

/* Fails every live request with rc and retires the communicator. */
static void abandon_all(ftrt_gpu *g, int rc)
{
    comm_retire(g, 1);
    for (gpu_req *r = g->live; r; r = r->next) {
        r->result = rc;
        bury(g, r);
    }
    g->live = NULL;
}

static void hook_abandon(void *arg)
{
    ftrt_gpu *g = arg;
    pthread_mutex_lock(&g->lock);
    abandon_all(g, FTRT_ERECOVER);
    pthread_mutex_unlock(&g->lock);
}

int ftrt__gpu_on_owner(const ftrt_gpu *g) { return pthread_equal(pthread_self(), g->owner); }

/* The interrupter's call (file header "Interrupts"): its own thread, woken by the agent's. A
 * communicator of an older epoch than the announced one (or any, once the job is over) is
 * aborted at once and its live requests fail; ncclCommAbort only (not ncclCommRevoke: abort is
 * what NCCL documents for freeing a hung communicator from another thread). A late call about
 * an epoch whose own communicator was built already (the application recovered first) leaves
 * it alone. */
static void on_interrupt(void *arg, int epoch, int fatal)
{
    ftrt_gpu *g = arg;
    pthread_mutex_lock(&g->lock);
    if (g->comm && (fatal || epoch > g->comm_epoch)) {
        ftrt_log_info("epoch %d announced%s: the interrupt thread aborts the NCCL communicator "
                      "of epoch %d", epoch, fatal ? " (job over)" : "", g->comm_epoch);
        (void)cudaSetDevice(g->device); /* (this thread's own CUDA device) */
        comm_retire(g, 0);
        g->intr_aborts++;
        for (gpu_req *r = g->live; r; r = r->next) {
            r->result = fatal ? fatal : FTRT_ERECOVER;
            bury(g, r);
        }
        g->live = NULL;
    }
    pthread_mutex_unlock(&g->lock);
}

/* 1 when the current plane generation's communicator exists (no MPI needed to use it). */
int ftrt__gpu_comm_ready(const ftrt_gpu *g)
{
    return g->comm && g->comm_plane_gen == g->plane->gen;
}

/* Builds the communicator of the current epoch: a fresh ncclUniqueId from logical rank 0,
 * broadcast over the trainers' MPI communicator; nonblocking init polled with the epoch flag. */
static int comm_build(ftrt_gpu *g)
{
    ftrt__plane *pl = g->plane;
    struct {
        int32_t ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (pl->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&msg.id);
        msg.ok = r == ncclSuccess;
        if (!msg.ok) nccl_err(r, NULL, "ncclGetUniqueId");
    }
    int rc = ftrt__plane_bcast(pl, &msg, sizeof msg, 0);
    if (rc) return rc;
    if (!msg.ok) return FTRT_ENCCL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* init returns at once and can be aborted */
    cfg.commName = "ftrt";
    if ((rc = ftrt__nccl_apply_settings(pl, &cfg)) != 0) return rc;
    ncclComm_t comm = NULL;
    double t0 = ftrt__now();
    ncclResult_t r = ncclCommInitRankConfig(&comm, pl->size, msg.id, pl->rank, &cfg);
    if ((rc = nccl_err(r, comm, "ncclCommInitRankConfig")) != 0) {
        if (comm) ncclCommAbort(comm);
        return rc;
    }
    for (long i = 0;; i++) {
        ncclResult_t st = ncclInProgress;
        r = ncclCommGetAsyncError(comm, &st);
        if (r != ncclSuccess) st = r;
        if (st == ncclSuccess) break;
        if (st != ncclInProgress) rc = nccl_err(st, comm, "ncclCommInitRankConfig (async)");
        else rc = ftrt__watch_check(pl->watch);
        if (rc) {
            ncclCommAbort(comm);
            return rc;
        }
        polite(i);
    }
    g->comm = comm;
    g->comm_plane_gen = pl->gen;
    g->comm_epoch = pl->watch->epoch;
    ftrt_log_info("NCCL communicator for epoch %d: rank %d of %d on device %d in %.1f ms "
                  "(FTRT_NCCL_CTA_POLICY %d, FTRT_NCCL_MIN_CTAS %d, FTRT_NCCL_MAX_CTAS %d; 0 = "
                  "NCCL's own)", pl->watch->epoch, pl->rank, pl->size, g->device,
                  (ftrt__now() - t0) * 1e3, pl->nccl_cta_policy, pl->nccl_min_ctas,
                  pl->nccl_max_ctas);
    return 0;
}

/* The communicator of the plane's current generation, built at its first collective. After
 * an NCCL or CUDA error the generation has none: only the next epoch (whose recovery every
 * member goes through) builds one again, so that all members rebuild at the same point. */
static int ensure_comm(ftrt_gpu *g)
{
    unsigned gen = g->plane->gen;
    if (g->comm && g->comm_plane_gen == gen) return 0;
    if (g->comm) abandon_all(g, FTRT_ERECOVER);
    if (g->has_dead && g->dead_gen == gen) {
        ftrt_log_error("the NCCL communicator of epoch %d failed; the next recovery rebuilds it",
                       g->plane->watch->epoch);
        return FTRT_ENCCL;
    }
    return comm_build(g);
}

/* ---- requests ---- */

static const ftrt__req_ops gpu_req_ops;

/* A request ready for a new collective (in flight, no buffers): one of the pool's, its `done`
 * event reused, else a new one with a new event. Caller holds g->lock. 0, -ENOMEM or
 * FTRT_ECUDA. */
static int req_get(ftrt_gpu *g, gpu_req **out)
{
    gpu_req *r = g->free_reqs;
    if (r) {
        g->free_reqs = r->next;
        g->nfree_reqs--;
    } else {
        if (!(r = calloc(1, sizeof *r))) return -ENOMEM;
        int rc = ftrt__cuda_err(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming),
                                "cudaEventCreate");
        if (rc) {
            free(r);
            return rc;
        }
        g->events_created++;
    }
    cudaEvent_t done = r->done;
    memset(r, 0, sizeof *r);
    r->base.ops = &gpu_req_ops;
    r->g = g;
    r->done = done;
    r->result = 1;
    *out = r;
    return 0;
}

/* Takes back a request nobody refers to any more (its buffers released or buried). Its event
 * is reused only once it has fired: a request abandoned in flight (abandon_all, on_interrupt)
 * may still have its record queued behind aborted work, and re-recording that event would
 * make a later cudaEventQuery see the old work. Such an event is destroyed instead (CUDA
 * releases it once the device completes it: cudaEventDestroy in the CUDA runtime API), as is
 * any past the pool's bound. Caller holds g->lock. */
static void req_put(ftrt_gpu *g, gpu_req *r)
{
    int fired = r->result == 0 || cudaEventQuery(r->done) == cudaSuccess;
    if (!fired || g->nfree_reqs >= REQ_POOL_MAX) {
        cudaEventDestroy(r->done);
        free(r);
        return;
    }
    r->next = g->free_reqs;
    g->free_reqs = r;
    g->nfree_reqs++;
}

/* Destroys the pooled requests and their events (ftrt_gpu_free, stream idle). */
static void req_pool_clear(ftrt_gpu *g)
{
    while (g->free_reqs) {
        gpu_req *r = g->free_reqs;
        g->free_reqs = r->next;
        cudaEventDestroy(r->done);
        free(r);
    }
    g->nfree_reqs = 0;
}

/* ncclBfloat16 arrived in NCCL 2.10 (older ones refuse FTRT_BFLOAT16 in
 * ftrt__gpu_check_dtype_op). */
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
#define HAVE_NCCL_BF16 1
#else
#define HAVE_NCCL_BF16 0
#endif

static ncclDataType_t nccl_type(int t)
{
    switch (t) {
    case FTRT_FLOAT64: return ncclFloat64;
    case FTRT_INT64: return ncclInt64;
    case FTRT_FLOAT16: return ncclFloat16;
#if HAVE_NCCL_BF16
    case FTRT_BFLOAT16: return ncclBfloat16;
#endif
    default: return ncclFloat32;
    }
}

static ncclRedOp_t nccl_op(int op) { return op == FTRT_MIN ? ncclMin : op == FTRT_MAX ? ncclMax : ncclSum; }

/* Calls NCCL's collective coll: in place on the bucket (allreduce, broadcast), or from the
 * bucket into rbuf (reduce-scatter, all-gather: count per rank). */
static ncclResult_t nccl_call(ftrt_gpu *g, ftrt__coll coll, int root, void *bucket, void *rbuf,
                              size_t count, int dtype, int op, const char **name)
{
    ncclDataType_t t = nccl_type(dtype);
    switch (coll) {
    case FTRT__COLL_BCAST:
        *name = "ncclBroadcast";
        return ncclBroadcast(bucket, bucket, count, t, root, g->comm, g->stream);
    case FTRT__COLL_RSCATTER:
        *name = "ncclReduceScatter";
        return ncclReduceScatter(bucket, rbuf, count, t, nccl_op(op), g->comm, g->stream);
    case FTRT__COLL_ALLGATHER:
        *name = "ncclAllGather";
        return ncclAllGather(bucket, rbuf, count, t, g->comm, g->stream);
    default:
        *name = "ncclAllReduce";
        return ncclAllReduce(bucket, bucket, count, t, nccl_op(op), g->comm, g->stream);
    }
}

/* Enqueues collective coll (nccl_call) on the plane's stream; with a nonblocking communicator,
 * waits (polled with the watch) until NCCL accepted it. 0, FTRT_ENCCL or the watch's code. */
static int nccl_enqueue(ftrt_gpu *g, ftrt__coll coll, int root, void *bucket, void *rbuf,
                        size_t count, int dtype, int op)
{
    const char *name = "";
    ncclResult_t nr = nccl_call(g, coll, root, bucket, rbuf, count, dtype, op, &name);
    int rc = nccl_err(nr, g->comm, name);
    for (long i = 0; !rc && nr == ncclInProgress; i++) { /* nonblocking: enqueue pending */
        if (ncclCommGetAsyncError(g->comm, &nr) != ncclSuccess) nr = ncclInternalError;
        rc = nccl_err(nr, g->comm, name);
        if (!rc && nr == ncclInProgress) {
            rc = ftrt__watch_check(g->plane->watch);
            polite(i);
        }
    }
    return rc;
}

/* (comm/nccl_plane.h) */
int ftrt__gpu_submit(ftrt_gpu *g, const ftrt__seg *segs, int n, size_t count, int dtype, int op,
                     double scale, int in_place, ftrt_request **out)
{
    return ftrt__gpu_submit_coll(g, FTRT__COLL_ALLREDUCE, 0, segs, n, NULL, count, dtype, op,
                                 scale, in_place, out);
}

/* (comm/nccl_plane.h) */
int ftrt__gpu_submit_coll(ftrt_gpu *g, ftrt__coll coll, int root, const ftrt__seg *segs, int n,
                          const ftrt__seg *recv, size_t count, int dtype, int op, double scale,
                          int in_place, ftrt_request **out)
{
    ftrt__plane *pl = g->plane;
    *out = NULL;
    if (n < 1 || n > 65535) return FTRT_EINVAL;
    int rc = ftrt__watch_check(pl->watch);
    if (rc) return rc;
    if (ftrt__gpu_on_owner(g) && pl->watch->needs_recover)
        return FTRT_ESTATE; /* (the owner's field) */
    if ((rc = ftrt__cuda_err(cudaSetDevice(g->device), "cudaSetDevice")) != 0) return rc;
    if ((rc = ensure_comm(g)) != 0) return rc;
    gpu_req *r;
    if ((rc = req_get(g, &r)) != 0) return rc;
    size_t bytes = 0, rs_off = 0; /* rs_off: the receive side's place in the bucket */
    for (int i = 0; i < n; i++) bytes += segs[i].bytes;
    if (recv) { /* reduce-scatter / all-gather: both sides staged (comm/async.h's layout) */
        rs_off = coll == FTRT__COLL_RSCATTER ? bytes : segs[0].bytes;
        bytes = segs[0].bytes + recv->bytes;
        in_place = 0;
    }
    /* in place: the bucket is the tensors' own memory, seen as one tensor by the guarded
     * unpack kernel, which then scales it where it lies (bit-identical to the copy path) */
    ftrt__seg whole = {in_place ? segs[0].ptr : NULL, bytes};
    if (in_place) {
        segs = &whole;
        n = 1;
    } else {
        rc = get_buf(g, 1, bytes, &r->staging);
    }
    if (!rc) rc = get_buf(g, 0, (size_t)(n + !!recv) * sizeof(ftrt__kdesc), &r->desc);
    if (rc) goto unqueued;
    void *bucket = in_place ? whole.ptr : r->staging.p;
    size_t max_bytes, recv_max = 0;
    ftrt__kdesc *desc = r->desc.p;
    ftrt__kdesc_fill(desc, segs, n, &max_bytes);
    if (recv) ftrt__kdesc_fill(desc + n, recv, 1, &recv_max); /* the unpack's, from rs_off */
    if (!in_place)
        rc = ftrt__cuda_err(ftrt__kgpu_pack(bucket, r->desc.p, n, max_bytes, g->stream),
                            "pack kernel");
    if (rc) goto queued;
    rc = nccl_enqueue(g, coll, root, bucket, (char *)bucket + rs_off, count, dtype, op);
    if (rc) goto queued;
    if (recv)
        rc = ftrt__cuda_err(ftrt__kgpu_unpack_scale((char *)bucket + rs_off, desc + n, 1,
                                                    recv_max, dtype, 1.0, g->guard, g->gen,
                                                    g->stream),
                            "unpack kernel");
    else if (!in_place || (scale != 1.0 && ftrt__k_scalable(dtype)))
        rc = ftrt__cuda_err(ftrt__kgpu_unpack_scale(bucket, r->desc.p, n, max_bytes, dtype,
                                                    scale, g->guard, g->gen, g->stream),
                            "unpack kernel");
    if (!rc) rc = ftrt__cuda_err(cudaEventRecord(r->done, g->stream), "cudaEventRecord");
    if (rc) goto queued;
    r->next = g->live;
    g->live = r;
    g->nreqs++;
    *out = &r->base;
    return 0;
queued: /* work may be queued that uses the buffers: retire the communicator, keep them */
    abandon_all(g, rc);
    bury(g, r);
unqueued:
    release_bufs(g, r);
    r->result = rc;
    req_put(g, r);
    return rc;
}

static void unlink_live(ftrt_gpu *g, gpu_req *r)
{
    for (gpu_req **pp = &g->live; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            return;
        }
}

/* 1 done, 0 in flight, < 0 failed. Caller holds g->lock (a poster's failing submit may abandon
 * r at any time). Owner. */
static int test_locked(struct ftrt_request *base)
{
    gpu_req *r = (gpu_req *)base;
    ftrt_gpu *g = r->g;
    int rc = ftrt__watch_check(g->plane->watch);
    if (r->result <= 0) { /* (failed by on_interrupt: recovery owed while still stale) */
        if (r->result == FTRT_ERECOVER && rc == FTRT_ERECOVER && ftrt__gpu_on_owner(g))
            g->plane->watch->needs_recover = 1;
        return r->result == 0 ? 1 : r->result;
    }
    if (!rc && g->comm) {
        ncclResult_t st = ncclSuccess;
        if (ncclCommGetAsyncError(g->comm, &st) != ncclSuccess) st = ncclInternalError;
        rc = nccl_err(st, g->comm, "NCCL collective (ncclCommGetAsyncError)");
    }
    if (!rc) {
        cudaError_t e = cudaEventQuery(r->done);
        if (e == cudaErrorNotReady) return 0;
        if (e == cudaSuccess) {
            unlink_live(g, r);
            release_bufs(g, r);
            r->result = 0;
            return 1;
        }
        rc = ftrt__cuda_err(e, "cudaEventQuery");
    }
    if (rc == FTRT_ERECOVER) g->plane->watch->needs_recover = 1;
    abandon_all(g, rc); /* r is live: it fails with rc too */
    return r->result;
}

static int gpu_test(struct ftrt_request *base)
{
    ftrt_gpu *g = ((gpu_req *)base)->g;
    pthread_mutex_lock(&g->lock);
    int rc = test_locked(base);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

int ftrt__gpu_wait_raw(struct ftrt_request *base)
{
    int rc;
    for (long i = 0; (rc = gpu_test(base)) == 0; i++) polite(i);
    return rc == 1 ? 0 : rc;
}

static int gpu_wait(struct ftrt_request *base)
{
    gpu_req *r = (gpu_req *)base;
    ftrt__host_wait_begin(&r->g->plane->host); /* counted even when already final: every trainer alike */
    int rc = ftrt__gpu_wait_raw(base);
    ftrt__host_wait_end(&r->g->plane->host, rc);
    return rc;
}

static int gpu_free_req(struct ftrt_request *base)
{
    gpu_req *r = (gpu_req *)base;
    ftrt_gpu *g = r->g;
    pthread_mutex_lock(&g->lock);
    int rc = r->result > 0 ? FTRT_ESTATE : 0;
    if (!rc) {
        g->nreqs--;
        req_put(g, r);
    }
    pthread_mutex_unlock(&g->lock);
    return rc;
}

static const ftrt__req_ops gpu_req_ops = {gpu_test, gpu_wait, gpu_free_req};

/* ---- public API ---- */

int ftrt__gpu_create(ftrt__plane *plane, int device, ftrt_gpu **out)
{
    if (!out) return FTRT_EINVAL;
    *out = NULL;
    if (!plane || device < 0) return FTRT_EINVAL;
    int ndev = ftrt__kgpu_device_count();
    if (device >= ndev) {
        ftrt_log_error("ftrt_gpu_create: CUDA device %d requested, %d usable", device, ndev);
        return FTRT_ENODEV;
    }
    ftrt_gpu *g = calloc(1, sizeof *g);
    if (!g) return -ENOMEM;
    g->plane = plane;
    g->device = device;
    g->owner = pthread_self();
    ftrt__pool_init(&g->dev, POOL_MAX, 0, dev_free);
    ftrt__pool_init(&g->host, POOL_MAX, 0, host_free);
    int lo, hi;
    int rc = ftrt__cuda_err(cudaSetDevice(device), "cudaSetDevice");
    if (!rc) rc = ftrt__cuda_err(cudaDeviceGetStreamPriorityRange(&lo, &hi),
                                 "cudaDeviceGetStreamPriorityRange");
    if (!rc) rc = ftrt__cuda_err(cudaStreamCreateWithPriority(&g->stream, cudaStreamNonBlocking,
                                                              hi),
                                 "cudaStreamCreateWithPriority");
    if (!rc) rc = ftrt__cuda_err(cudaEventCreateWithFlags(&g->ev_producer, cudaEventDisableTiming),
                                 "cudaEventCreate");
    if (!rc) rc = ftrt__cuda_err(cudaHostAlloc((void **)&g->guard, sizeof *g->guard,
                                               cudaHostAllocMapped), "cudaHostAlloc");
    if (rc) {
        if (g->ev_producer) cudaEventDestroy(g->ev_producer);
        if (g->stream) cudaStreamDestroy(g->stream);
        free(g);
        return rc;
    }
    pthread_mutex_init(&g->lock, NULL);
    if ((rc = ftrt__interrupter_start(plane->watch, on_interrupt, g, &g->intr)) != 0) {
        ftrt_log_error("ftrt_gpu_create: cannot start the interrupt thread: %s", ftrt_strerror(rc));
        pthread_mutex_destroy(&g->lock);
        cudaFreeHost((void *)g->guard);
        cudaEventDestroy(g->ev_producer);
        cudaStreamDestroy(g->stream);
        free(g);
        return rc;
    }
    *g->guard = g->gen;
    g->hook.abandon = hook_abandon;
    g->hook.arg = g;
    ftrt__plane_hook_add(plane, &g->hook);
    *out = g;
    return 0;
}

int ftrt_gpu_free(ftrt_gpu *g)
{
    if (!g) return 0;
    if (g->nreqs || g->nbucketers) return FTRT_ESTATE;
    ftrt__interrupter_stop(g->intr); /* no on_interrupt runs or will (comm/interrupt.h) */
    cudaSetDevice(g->device);
    cudaStreamSynchronize(g->stream);
    if (g->comm) {
        ncclComm_t c = g->comm;
        g->comm = NULL;
        ncclResult_t fr = ncclCommFinalize(c); /* flush, then free once quiescent */
        if ((fr == ncclSuccess || fr == ncclInProgress) && await_state(c, 5000) == ncclSuccess)
            ncclCommDestroy(c);
        else
            ncclCommAbort(c);
    }
    cudaStreamSynchronize(g->stream);
    req_pool_clear(g);
    ftrt__pool_clear(&g->dev);
    ftrt__pool_clear(&g->host);
    ftrt__grave_clear(&g->grave_dev, dev_free); /* NCCL is gone, the stream idle */
    ftrt__grave_clear(&g->grave_host, host_free);
    cudaFreeHost((void *)g->guard);
    cudaEventDestroy(g->ev_producer);
    cudaStreamDestroy(g->stream);
    ftrt__plane_hook_remove(g->plane, &g->hook);
    pthread_mutex_destroy(&g->lock);
    free(g);
    return 0;
}

cudaStream_t ftrt_gpu_stream(const ftrt_gpu *g) { return g ? g->stream : NULL; }

int ftrt__gpu_interrupt_wait(ftrt_gpu *g, int calls, int ms, int *aborts)
{
    int n = ftrt__interrupter_wait(g->intr, calls, ms);
    pthread_mutex_lock(&g->lock);
    *aborts = g->intr_aborts;
    pthread_mutex_unlock(&g->lock);
    return n;
}

long ftrt__gpu_events_created(ftrt_gpu *g)
{
    pthread_mutex_lock(&g->lock);
    long n = g->events_created;
    pthread_mutex_unlock(&g->lock);
    return n;
}

/* 0 when the plane reduces dtype with op; else logs why and returns FTRT_EINVAL (unknown dtype
 * or op) or FTRT_ENOTSUP (FTRT_BFLOAT16 with an NCCL older than 2.10). */
int ftrt__gpu_check_dtype_op(ftrt_dtype dtype, ftrt_op op)
{
    if (op != FTRT_SUM && op != FTRT_MIN && op != FTRT_MAX) {
        ftrt_log_error("NCCL plane: unknown reduction op %d", (int)op);
        return FTRT_EINVAL;
    }
    if (!ftrt__k_esize((int)dtype)) {
        ftrt_log_error("NCCL plane: unknown dtype %d (FTRT_FLOAT32, FTRT_FLOAT64, FTRT_INT64, "
                       "FTRT_BFLOAT16, FTRT_FLOAT16)", (int)dtype);
        return FTRT_EINVAL;
    }
    if (dtype == FTRT_BFLOAT16 && !HAVE_NCCL_BF16) {
        ftrt_log_error("NCCL plane: FTRT_BFLOAT16 needs NCCL 2.10 or later (ncclBfloat16)");
        return FTRT_ENOTSUP;
    }
    return 0;
}

int ftrt_gpu_connect(ftrt_gpu *g)
{
    if (!g || !ftrt__gpu_on_owner(g)) return FTRT_EINVAL;
    int rc = ftrt__watch_check(g->plane->watch);
    if (rc) return rc;
    if (g->plane->watch->needs_recover) return FTRT_ESTATE;
    pthread_mutex_lock(&g->lock);
    rc = ftrt__cuda_err(cudaSetDevice(g->device), "cudaSetDevice");
    if (!rc) rc = ensure_comm(g);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

int ftrt_gpu_request_order(ftrt_request *req, cudaStream_t consumer)
{
    if (!req || req->ops != &gpu_req_ops) return FTRT_EINVAL;
    return ftrt__cuda_err(cudaStreamWaitEvent(consumer, ((gpu_req *)req)->done, 0),
                          "cudaStreamWaitEvent");
}
