/*
 * gpu.c - the NCCL plane's entry point of the API (libftrt_gpu only): the role check, then
 * the trainer's plane (comm/nccl_plane.c), which knows nothing of roles.
 */
#include "ftrt_gpu.h"
#include "runtime/internal.h"

int ftrt_gpu_create(ftrt_ctx *ctx, int device, ftrt_gpu **out)
{
    if (out) *out = NULL;
    if (!ctx || !out || device < 0) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    ctx->plane.nccl_cta_policy = ctx->cfg.nccl_cta_policy; /* (ftrt_init checked their ranges) */
    ctx->plane.nccl_min_ctas = ctx->cfg.nccl_min_ctas;
    ctx->plane.nccl_max_ctas = ctx->cfg.nccl_max_ctas;
    return ftrt__gpu_create(&ctx->plane, device, out);
}
