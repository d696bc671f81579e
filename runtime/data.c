/*
 * data.c - the data-plane entry points of the API: role checks, then the trainer's plane
 * (comm/plane.h), which knows nothing of roles; and ftrt_check(), a collective's answer about
 * the epoch without the collective.
 */
#include "runtime/internal.h"
#include "comm/bucketer.h"

int ftrt_allreduce(ftrt_ctx *ctx, void *buf, size_t count, ftrt_dtype dtype, ftrt_op op)
{
    if (!ctx) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    return ftrt__plane_allreduce(&ctx->plane, buf, count, dtype, op);
}

int ftrt_broadcast(ftrt_ctx *ctx, void *buf, size_t count, ftrt_dtype dtype, int root)
{
    if (!ctx) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    return ftrt__plane_broadcast(&ctx->plane, buf, count, dtype, root);
}

int ftrt_reduce_scatter(ftrt_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                        ftrt_dtype dtype, ftrt_op op)
{
    if (!ctx) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    return ftrt__plane_reduce_scatter(&ctx->plane, sendbuf, recvbuf, count, dtype, op);
}

int ftrt_allgather(ftrt_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                   ftrt_dtype dtype)
{
    if (!ctx) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    return ftrt__plane_allgather(&ctx->plane, sendbuf, recvbuf, count, dtype);
}

int ftrt_allreduce_ordered(ftrt_ctx *ctx, int nlogical, const int *held, int nheld,
                           void *const *contrib, void *out, size_t count, ftrt_dtype dtype)
{
    if (!ctx) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    return ftrt__plane_allreduce_ordered(&ctx->plane, nlogical, held, nheld, contrib, out, count,
                                         dtype);
}

int ftrt_check(ftrt_ctx *ctx)
{
    if (!ctx) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    int rc = ftrt__watch_check(&ctx->watch);
    if (!rc && ctx->watch.needs_recover) rc = FTRT_ERECOVER; /* (still owed) */
    return ftrt__watch_note(&ctx->watch, rc);
}

int ftrt_allreduce_start(ftrt_ctx *ctx, void *buf, size_t count, ftrt_dtype dtype, ftrt_op op,
                         ftrt_request **req)
{
    if (req) *req = NULL;
    if (!ctx || !req) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    return ftrt__plane_allreduce_start(&ctx->plane, buf, count, dtype, op, req);
}

int ftrt_broadcast_start(ftrt_ctx *ctx, void *buf, size_t count, ftrt_dtype dtype, int root,
                         ftrt_request **req)
{
    if (req) *req = NULL;
    if (!ctx || !req) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    return ftrt__plane_broadcast_start(&ctx->plane, buf, count, dtype, root, req);
}

int ftrt_reduce_scatter_start(ftrt_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                              ftrt_dtype dtype, ftrt_op op, ftrt_request **req)
{
    if (req) *req = NULL;
    if (!ctx || !req) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    return ftrt__plane_reduce_scatter_start(&ctx->plane, sendbuf, recvbuf, count, dtype, op,
                                            req);
}

int ftrt_allgather_start(ftrt_ctx *ctx, const void *sendbuf, void *recvbuf, size_t count,
                         ftrt_dtype dtype, ftrt_request **req)
{
    if (req) *req = NULL;
    if (!ctx || !req) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    return ftrt__plane_allgather_start(&ctx->plane, sendbuf, recvbuf, count, dtype, req);
}

int ftrt_bucketer_create(ftrt_ctx *ctx, const size_t *counts, int ntensors, ftrt_dtype dtype,
                         const ftrt_bucket_config *cfg, ftrt_bucketer **out)
{
    if (out) *out = NULL;
    if (!ctx || !out) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    return ftrt__bucketer_create(&ctx->plane, counts, ntensors, dtype, cfg, out);
}
