/*
 * plane.h - the data plane: the training communicator and its failure-aware collectives
 * (internal to libftrt; comm/ and the runtime above it).
 *
 * The runtime owns one ftrt__plane per trainer and gives it, at ftrt__plane_init(), its epoch
 * watch and host interface (base/ports.h): every collective is polled against the watch, and
 * every wait of the application thread is bracketed by the host's wait_begin/wait_end. The
 * plane never sees the runtime's context. Application thread only, except where a function
 * says otherwise (comm/async.c runs a progress thread of its own).
 */
#ifndef FTRT_COMM_PLANE_H
#define FTRT_COMM_PLANE_H

#include <mpi.h>
#include <stddef.h>

#include "base/ports.h"
#include "comm/pool.h"
#include "ftrt.h"

typedef struct ftrt__plane {
    MPI_Comm comm;    /* MPI_COMM_NULL when none */
    int rank, size;   /* this process's rank in comm and comm's size (logical rank order) */
    void *buf;        /* staging buffer for collectives (never reused once abandoned) */
    size_t buf_cap;
    ftrt__grave graveyard; /* buffers of abandoned collectives, freed after MPI_Finalize */
    unsigned gen;     /* +1 per communicator adopted (comm/async.c dups each one once) */
    struct ftrt__engine *async;     /* overlapped collectives (comm/async.h); NULL until used */
    struct ftrt__plane_hook *hooks; /* abandon listeners (the NCCL plane, comm/async.h) */
    ftrt__watch *watch; /* the runtime's epoch watch (not owned) */
    ftrt__host host;    /* the runtime's host interface */
    int async_progress; /* FTRT_ASYNC_PROGRESS: a progress thread for overlapped collectives */
    int progress_poll_us; /* its polling period while a collective is in flight, us */
    /* The NCCL plane's communicator settings (ncclConfig_t; comm/nccl_plane.c comm_build):
     * FTRT_NCCL_CTA_POLICY (FTRT_NCCL_CTA_* of ftrt.h) and FTRT_NCCL_MIN_CTAS /
     * FTRT_NCCL_MAX_CTAS; 0 = unset, NCCL's own default (and its NCCL_* variables) apply.
     * ftrt__plane_init sets them to 0; the runtime copies its settings in before
     * ftrt__gpu_create. */
    int nccl_cta_policy, nccl_min_ctas, nccl_max_ctas;
    /* The fixed-order allreduce's layout kept from its last call (comm/ordered.c, one
     * malloc'd block; NULL when none), freed by ftrt__plane_free. */
    void *ordered;
} ftrt__plane;

/* The MPI datatype and reduction of `op` over elements of `dtype`, and the element size in
 * *esize. float32 / float64 / int64 use MPI's predefined types and operations; bfloat16 and
 * fp16 travel as MPI_UINT16_T and are reduced by ftrt's own commutative operations
 * (MPI_Op_create, made once per process on first use, any thread; kernels/half.h has their
 * arithmetic). Returns 0; FTRT_EINVAL (unknown dtype or op, logged, *t and *o null); FTRT_EMPI
 * (MPI_Op_create failed). Needs MPI initialized for the 16-bit types. */
int ftrt__mpi_reduction(int dtype, int op, MPI_Datatype *t, MPI_Op *o, size_t *esize);

/* ftrt's MPI reduction function (MPI_User_function) for 16-bit dtype and op, applied without
 * MPI: inout[i] = in[i] op inout[i] over len elements (exposed for the unit tests). */
void ftrt__h16_reduce(int dtype, int op, const void *in, void *inout, int len);

/* Prepares p with no communicator. w must outlive p; host is copied. async_progress and
 * progress_poll_us are the validated settings of the same names (ftrt_config). */
void ftrt__plane_init(ftrt__plane *p, ftrt__watch *w, ftrt__host host, int async_progress,
                      int progress_poll_us);
/* Adopts comm (errors set to return; rank and size cached). */
void ftrt__plane_set(ftrt__plane *p, MPI_Comm comm);
/* Abandons the current communicator and staging buffer (a collective may still be in flight on
 * them after a failure): neither is touched again. Returns 0 or -ENOMEM. */
int ftrt__plane_abandon(ftrt__plane *p);
/* Hands buf (malloc'd; NULL is ignored), the target of a request that was abandoned, to the
 * graveyard: freed by ftrt__plane_free() after MPI_Finalize, never reused before (MPI may still
 * write into it). On -ENOMEM for the graveyard itself the buffer is leaked, never freed. */
void ftrt__plane_bury(ftrt__plane *p, void *buf);
/* Frees staging and graveyard buffers; call only after MPI_Finalize or when no collective was
 * ever abandoned. */
void ftrt__plane_free(ftrt__plane *p);
/* Stops the data plane's progress thread (comm/async.c), if any; call before MPI_Finalize.
 * Idempotent. */
void ftrt__plane_stop(ftrt__plane *p);

/* Waits for MPI request *req, polling it with the watch and yielding the CPU politely, inside
 * the host's wait bracket. Returns 0 when complete, else FTRT_EMPI or the watch's code (the
 * request is then abandoned). In these waits and in the collectives below, an MPI error that
 * ULFM reports as a process failure is not FTRT_EMPI: the call returns when the coordinator's
 * epoch change arrives, with the watch's code (comm/ulfm.h). */
int ftrt__plane_wait(ftrt__plane *p, MPI_Request *req);
/* Waits for reqs[0..n), polling them with the watch like ftrt__plane_wait but outside the
 * host's wait bracket (waits that are part of a recovery, not of training). Returns 0, FTRT_EMPI
 * or the watch's code (the requests are then abandoned). */
int ftrt__plane_waitall(ftrt__plane *p, int n, MPI_Request *reqs);
/* The checks every collective of the plane makes before it starts: buf and count (FTRT_EINVAL),
 * dtype and op (*t, *o and *es as ftrt__mpi_reduction), a communicator and no recovery owed
 * (FTRT_ESTATE), the watch (FTRT_ERECOVER or a fatal code). Returns 0 or that code. */
int ftrt__plane_coll_check(ftrt__plane *p, const void *buf, size_t count, ftrt_dtype dtype,
                           ftrt_op op, MPI_Datatype *t, MPI_Op *o, size_t *es);
/* Blocking allreduce (op over count elements of dtype at buf, in place) over the plane, polled.
 * Returns 0, FTRT_EINVAL (bad dtype/op/buffer), FTRT_ESTATE (no communicator, or recovery
 * owed), FTRT_ERECOVER (sets watch->needs_recover), a fatal code, FTRT_EMPI, -ENOMEM. On an
 * error buf is unchanged. */
int ftrt__plane_allreduce(ftrt__plane *p, void *buf, size_t count, ftrt_dtype dtype, ftrt_op op);
/* Blocking broadcast of count elements of dtype at buf from logical rank `root` (staged like
 * ftrt__plane_allreduce: on an error buf is unchanged). Same returns as ftrt__plane_allreduce,
 * FTRT_EINVAL also for root outside [0, size). */
int ftrt__plane_broadcast(ftrt__plane *p, void *buf, size_t count, ftrt_dtype dtype, int root);
/* Blocking reduce-scatter (op over the members' send, nranks * count elements of dtype each;
 * logical rank r receives in recv[0, count) the reduction of their elements [r * count,
 * (r + 1) * count)) and all-gather (every member receives in recv[r * count, (r + 1) * count)
 * the count elements of rank r's send). Both sides staged (comm/async.h's layout): on an error
 * recv is unchanged. recv may overlap send only at a whole block (reduce-scatter: recv == send
 * + k * count elements; all-gather: send == recv + k * count; 0 <= k < size). Returns those of
 * ftrt__plane_allreduce; FTRT_EINVAL also for a NULL buffer with count > 0, another overlap,
 * or a count whose (size + 1) * count elements overflow. */
int ftrt__plane_reduce_scatter(ftrt__plane *p, const void *send, void *recv, size_t count,
                               ftrt_dtype dtype, ftrt_op op);
int ftrt__plane_allgather(ftrt__plane *p, const void *send, void *recv, size_t count,
                          ftrt_dtype dtype);
/* Blocking fixed-order allreduce (comm/ordered.c; ftrt_allreduce_ordered() of include/ftrt.h
 * without the role check): out = the SUM of the nlogical logical ranks' contributions, in
 * logical rank order, this process holding held[0..nheld) (ascending) with contrib[i] the
 * count elements of held[i]. Runs on the plane's communicator, polled with the watch, inside
 * the host's wait bracket; out is written only once everything completed. Returns 0,
 * FTRT_EINVAL (a bad argument on any process, or held lists that are not a partition of
 * [0, nlogical): on every process alike), FTRT_ESTATE, FTRT_ERECOVER, a fatal code, FTRT_EMPI,
 * -ENOMEM. */
int ftrt__plane_allreduce_ordered(ftrt__plane *p, int nlogical, const int *held, int nheld,
                                  void *const *contrib, void *out, size_t count,
                                  ftrt_dtype dtype);
/* Polled broadcast of `bytes` at buf from `root` over the plane, in place (recovery's state
 * transfer: no staging); returns 0, FTRT_ERECOVER or a
 * fatal code, FTRT_EMPI. */
int ftrt__plane_bcast(ftrt__plane *p, void *buf, size_t bytes, int root);
/* Starts an overlapped allreduce of buf on the request engine (comm/async.c). Same arguments
 * and checks as ftrt__plane_allreduce; *req receives the request (ftrt_request_wait/test/free). */
int ftrt__plane_allreduce_start(ftrt__plane *p, void *buf, size_t count, ftrt_dtype dtype,
                                ftrt_op op, ftrt_request **req);
/* Starts an overlapped broadcast of buf from logical rank root (comm/async.c). The checks of
 * ftrt__plane_broadcast; *req receives the request. */
int ftrt__plane_broadcast_start(ftrt__plane *p, void *buf, size_t count, ftrt_dtype dtype,
                                int root, ftrt_request **req);
/* Start an overlapped reduce-scatter / all-gather (comm/async.c): the arguments and checks of
 * the blocking forms; *req receives the request. */
int ftrt__plane_reduce_scatter_start(ftrt__plane *p, const void *send, void *recv, size_t count,
                                     ftrt_dtype dtype, ftrt_op op, ftrt_request **req);
int ftrt__plane_allgather_start(ftrt__plane *p, const void *send, void *recv, size_t count,
                                ftrt_dtype dtype, ftrt_request **req);

/* The NCCL plane over p (comm/nccl_plane.c, libftrt_gpu only): ftrt_gpu_create() of
 * include/ftrt_gpu.h without the role check, which the runtime makes. Same returns. */
struct ftrt_gpu;
int ftrt__gpu_create(ftrt__plane *p, int device, struct ftrt_gpu **out);
/* For tests: waits at most ms milliseconds until the NCCL plane's interrupt thread (comm/
 * nccl_plane.c "Interrupts") has handled `calls` epoch changes in all; returns how many it has,
 * and in *aborts how many communicators it aborted. Any thread. */
int ftrt__gpu_interrupt_wait(struct ftrt_gpu *g, int calls, int ms, int *aborts);
/* For tests: how many `done` events the NCCL plane g has created since ftrt__gpu_create.
 * Requests and their events are pooled (comm/nccl_plane.c req_get / req_put): sequential
 * collectives, each freed before the next starts, create one in all. Any thread. */
long ftrt__gpu_events_created(struct ftrt_gpu *g);

#endif
