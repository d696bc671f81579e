/*
 * nccl_plane.h - the NCCL plane's state and the calls its files share (internal to libftrt_gpu:
 * comm/nccl_plane.c, the plane, its communicator and requests; comm/nccl_bucketer.c, the GPU
 * bucketer backend; comm/nccl_config.c, the communicator's settings). Threads and locking:
 * comm/nccl_plane.c's header.
 */
#ifndef FTRT_COMM_NCCL_PLANE_H
#define FTRT_COMM_NCCL_PLANE_H

#include <nccl.h>
#include <pthread.h>
#include <stdint.h>

#include "comm/async.h"
#include "comm/bucketer.h"
#include "comm/interrupt.h"
#include "comm/plane.h"
#include "comm/pool.h"
#include "ftrt_gpu.h"

struct gpu_req; /* a collective's request (nccl_plane.c) */

struct ftrt_gpu {
    ftrt__plane *plane; /* the trainers' data plane: watch, host, MPI communicator */
    int device;
    pthread_t owner;      /* the thread that created the plane: the only one that builds comm */
    pthread_mutex_t lock; /* held by every call that touches what follows (nccl_plane.c header) */
    cudaStream_t stream;
    cudaEvent_t ev_producer; /* reusable: waited on right after each record */
    ncclComm_t comm;
    unsigned comm_plane_gen;
    int comm_epoch; /* the watch's epoch when comm was built */
    unsigned dead_gen; /* the generation whose communicator was retired */
    int has_dead;
    volatile uint32_t *guard; /* mapped pinned: unpacks run only while *guard == gen */
    uint32_t gen;
    ftrt__pool dev, host;              /* device staging buckets, pinned descriptor arrays */
    ftrt__grave grave_dev, grave_host; /* their abandoned ones (comm/pool.h) */
    struct gpu_req *live;
    struct gpu_req *free_reqs; /* freed requests whose `done` fired: ftrt__gpu_submit reuses */
    int nfree_reqs;            /* (at most REQ_POOL_MAX of nccl_plane.c) */
    long events_created;       /* `done` events created so far (for tests: pooling bounds it) */
    int nreqs, nbucketers;
    ftrt__plane_hook hook;
    ftrt__interrupter *intr; /* on_interrupt's thread (file header "Interrupts") */
    int intr_aborts;         /* communicators on_interrupt aborted (for tests) */
};

/* 1 when the calling thread is the plane's owner (the thread that created it). */
int ftrt__gpu_on_owner(const struct ftrt_gpu *g);
/* 1 when the current plane generation's communicator exists (no MPI needed to use it). Caller
 * holds g->lock. */
int ftrt__gpu_comm_ready(const struct ftrt_gpu *g);
/* Queues one collective (op over `count` elements of dtype) of the tensors segs[0..n) on the
 * communication stream: pack, ncclAllReduce, unpack times scale, `done` event; *out receives
 * the request (ftrt_request_wait/test/free). in_place: segs are one run of memory (the caller
 * checked): the allreduce runs there, no staging bucket and no pack; the guarded unpack kernel
 * scales that memory in place (skipped when there is nothing to scale), so the bits are those
 * of the copy path. The caller holds g->lock and has ordered the
 * stream after the producers; off the owner, the communicator exists (ftrt__gpu_comm_ready).
 * Returns 0, FTRT_EINVAL (n outside 1..65535), FTRT_ESTATE (recovery owed), the watch's code,
 * FTRT_ENCCL, FTRT_ECUDA, FTRT_ENOTSUP (a setting the build's NCCL lacks), -ENOMEM. */
int ftrt__gpu_submit(struct ftrt_gpu *g, const ftrt__seg *segs, int n, size_t count, int dtype,
                     int op, double scale, int in_place, ftrt_request **out);
/* ftrt__gpu_submit for collective `coll` (comm/async.h): FTRT__COLL_ALLREDUCE as above,
 * FTRT__COLL_BCAST (ncclBroadcast on the bucket from `root`, the plane's logical rank; op and
 * scale are then unused, 0 and 1.0), or with `recv` (NULL for the others; n 1, in_place 0,
 * scale 1.0) FTRT__COLL_RSCATTER / FTRT__COLL_ALLGATHER: segs[0] the send buffer, recv the
 * receive buffer, count elements per rank; both staged in one device bucket (comm/async.h's
 * layout: send side, then receive side), ncclReduceScatter / ncclAllGather between them, the
 * guarded unpack into recv. Same locking and returns. */
int ftrt__gpu_submit_coll(struct ftrt_gpu *g, ftrt__coll coll, int root, const ftrt__seg *segs,
                          int n, const ftrt__seg *recv, size_t count, int dtype, int op,
                          double scale, int in_place, ftrt_request **out);
/* Orders the plane's communication stream after the work queued so far on `producer` (an
 * event recorded there, waited on by the stream). Caller holds g->lock. 0 or FTRT_ECUDA. */
int ftrt__gpu_after_producer(struct ftrt_gpu *g, cudaStream_t producer);
/* Waits for a request of the plane outside the host's wait bracket (the bucketer brackets its
 * own waits). 0, or the request's error. */
int ftrt__gpu_wait_raw(struct ftrt_request *base);
/* 0 when the plane reduces dtype with op; else logs why and returns FTRT_EINVAL (unknown dtype
 * or op) or FTRT_ENOTSUP (FTRT_BFLOAT16 with an NCCL older than 2.10). */
int ftrt__gpu_check_dtype_op(ftrt_dtype dtype, ftrt_op op);
/* Sets the plane's FTRT_NCCL_CTA_POLICY / FTRT_NCCL_MIN_CTAS / FTRT_NCCL_MAX_CTAS
 * (ftrt__plane's nccl_* fields) into cfg, an NCCL_CONFIG_INITIALIZER'd config; unset ones stay
 * NCCL_CONFIG_UNDEF_INT (NCCL's own default). 0, or FTRT_ENOTSUP (logged, naming the setting)
 * when the build's NCCL lacks the field or the policy (comm/nccl_config.c). */
int ftrt__nccl_apply_settings(const ftrt__plane *pl, ncclConfig_t *cfg);

#endif
