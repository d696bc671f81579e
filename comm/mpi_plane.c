/*
 * mpi_plane.c - the CPU data plane on Open MPI: failure-aware, polled collectives.
 *
 * Blocking MPI calls on a communicator that may hold a dead process would hang forever, so
 * every collective is nonblocking (MPI_Iallreduce, MPI_Ibcast) and polled with MPI_Test
 * together with the epoch flag that the agent thread raises. When the epoch changes the request
 * is abandoned together with its communicator and staging buffer, which go to a graveyard and
 * are never reused: a late write from the dead epoch cannot land in live state.
 *
 * Determinism: the reduction runs on a communicator whose rank order is the logical rank
 * order, with the same count and datatype, so Open MPI's algorithm choice and summation order
 * are the same whichever process holds a logical rank; the sums are bitwise those a fault-free
 * run computes.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/async.h"
#include "runtime/internal.h"
#include "runtime/log.h"

void ftrt__plane_set(ftrt__plane *p, MPI_Comm comm)
{
    p->comm = comm;
    p->gen++; /* overlapped collectives duplicate each new communicator once (comm/async.c) */
    if (comm != MPI_COMM_NULL) MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
}

int ftrt__plane_abandon(ftrt__plane *p)
{
    /* Overlapped collectives of the old epoch fail promptly now; once every one is final
     * (their started staging buffers in the engine's graveyard), nothing of the old epoch can
     * write application memory. Then the listeners (the NCCL plane) retire theirs. */
    ftrt__engine_quiesce(p->async);
    for (ftrt__plane_hook *h = p->hooks; h; h = h->next) h->abandon(h->arg);
    if (p->buf) {
        void **g = realloc(p->graveyard, (size_t)(p->ngraveyard + 1) * sizeof *g);
        if (!g) return -ENOMEM;
        p->graveyard = g;
        g[p->ngraveyard++] = p->buf;
    }
    p->buf = NULL;
    p->buf_cap = 0;
    p->comm = MPI_COMM_NULL; /* never freed: MPI_Comm_free could wait on the dead rank */
    return 0;
}

void ftrt__plane_stop(ftrt__plane *p) { ftrt__engine_stop(p->async); }

void ftrt__plane_free(ftrt__plane *p)
{
    /* Buffers of abandoned overlapped collectives are freed only once MPI is finalized. */
    int finalized = 0;
    MPI_Finalized(&finalized);
    ftrt__engine_free(p->async, finalized);
    for (int i = 0; i < p->ngraveyard; i++) free(p->graveyard[i]);
    free(p->graveyard);
    free(p->buf);
    memset(p, 0, sizeof *p);
    p->comm = MPI_COMM_NULL;
}

static int wait_polled(struct ftrt_ctx *ctx, MPI_Request *req);

int ftrt__wait(struct ftrt_ctx *ctx, MPI_Request *req)
{
    ftrt__wait_begin(ctx);
    int rc = wait_polled(ctx, req);
    ftrt__wait_end(ctx, rc);
    return rc;
}

static int wait_polled(struct ftrt_ctx *ctx, MPI_Request *req)
{
    /* Spin briefly (low latency when peers are ready), then yield, then sleep 50 us per poll
     * so oversubscribed ranks leave the CPU to the peers they wait on. */
    for (long i = 0;; i++) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return FTRT_EMPI;
        if (done) return 0;
        int rc = ftrt__interrupted(ctx);
        if (rc) return rc;
        if (i < 64) continue;
        if (i < 1024) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

static MPI_Datatype mpi_type(ftrt_dtype t, size_t *esize)
{
    switch (t) {
    case FTRT_FLOAT32: *esize = 4; return MPI_FLOAT;
    case FTRT_FLOAT64: *esize = 8; return MPI_DOUBLE;
    case FTRT_INT64: *esize = 8; return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(ftrt_op op)
{
    switch (op) {
    case FTRT_SUM: return MPI_SUM;
    case FTRT_MIN: return MPI_MIN;
    case FTRT_MAX: return MPI_MAX;
    default: return MPI_OP_NULL;
    }
}

int ftrt_allreduce(ftrt_ctx *ctx, void *buf, size_t count, ftrt_dtype dtype, ftrt_op op)
{
    size_t es = 0;
    MPI_Datatype t = ctx ? mpi_type(dtype, &es) : MPI_DATATYPE_NULL;
    MPI_Op o = mpi_op(op);
    if (!ctx || (!buf && count) || t == MPI_DATATYPE_NULL || o == MPI_OP_NULL) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER || ctx->plane.comm == MPI_COMM_NULL) return FTRT_ESTATE;
    int rc = ftrt__interrupted(ctx);
    if (rc) return rc;
    if (ctx->needs_recover) return FTRT_ESTATE;
    size_t bytes = count * es;
    if (bytes > ctx->plane.buf_cap) {
        void *n = realloc(ctx->plane.buf, bytes);
        if (!n) return -ENOMEM;
        ctx->plane.buf = n;
        ctx->plane.buf_cap = bytes;
    }
    if (bytes) memcpy(ctx->plane.buf, buf, bytes);
    const size_t chunk = (size_t)1 << 28; /* elements per MPI call: stays below INT_MAX */
    for (size_t off = 0; off < count; off += chunk) {
        size_t n = count - off < chunk ? count - off : chunk;
        MPI_Request req;
        if (MPI_Iallreduce(MPI_IN_PLACE, (char *)ctx->plane.buf + off * es, (int)n, t, o,
                           ctx->plane.comm, &req) != MPI_SUCCESS)
            return FTRT_EMPI;
        rc = ftrt__wait(ctx, &req);
        if (rc) {
            if (rc == FTRT_ERECOVER) ctx->needs_recover = 1;
            return rc;
        }
    }
    if (bytes) memcpy(buf, ctx->plane.buf, bytes);
    return 0;
}

int ftrt__plane_bcast(struct ftrt_ctx *ctx, void *buf, size_t bytes, int root)
{
    const size_t chunk = (size_t)1 << 30;
    for (size_t off = 0; off < bytes; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        MPI_Request req;
        if (MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, root, ctx->plane.comm, &req) !=
            MPI_SUCCESS)
            return FTRT_EMPI;
        int rc = ftrt__wait(ctx, &req);
        if (rc) return rc;
    }
    return 0;
}
