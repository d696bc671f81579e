/*
 * recovery.c - the trainer side of an epoch change (docs/ARCHITECTURE.md "Recovery").
 *
 * ftrt_recover(): report progress for the new epoch, wait for the coordinator's PLAN (re-report
 * if a newer epoch folds in another failure), abandon the old communicator and its buffers,
 * build the new one with MPI_Comm_create_group over the plan's members ordered by logical rank
 * (collective over that group only, so the dead process is never touched), then transfer state:
 * replicated regions (host or device memory) from the up-to-date survivors to the members that
 * need them (comm/transfer.c), or, when sharded regions exist, the partner replicas in memory
 * (runtime/replica.c) where they cover the lost ranks, else a reload of the plan's committed
 * checkpoint. A promoted spare runs the same steps from
 * ftrt_init() (communicator) and ftrt_restore() (state).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/knobs.h"
#include "base/log.h"
#include "comm/join.h"
#include "comm/transfer.h"
#include "comm/ulfm.h"
#include "checkpoint/restore.h"
#include "kernels/location.h"
#include "runtime/internal.h"

/* The data ranks of logical rank `logical` in the holder table the plan carried (cp.holder,
 * kept by the agent with the plan: a shrink, a fold or a promotion), and how many are held at
 * all, into ctx. cp.lock held. Returns 0 or -ENOMEM (nothing changed). */
static int take_data_ranks(ftrt_ctx *ctx, int logical)
{
    int n = ctx->cp.nholder, mine = 0, held = 0;
    int *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    if (!d) return -ENOMEM;
    for (int k = 0; k < n; k++) {
        held += ctx->cp.holder[k] >= 0;
        if (ctx->cp.holder[k] == logical) d[mine++] = k;
    }
    free(ctx->data_ranks);
    ctx->data_ranks = d;
    ctx->ndata = mine; /* (>= 1: the agent checked it, take_holder) */
    ctx->data_size = held;
    return 0;
}

/* The communicator of plan p's members in logical order: over MPI_COMM_WORLD's group, or,
 * with a joined process among them (a slot >= the world's size), through comm/join.c. Returns
 * MPI_SUCCESS, FTRT__JOIN_UNREACHED or an MPI error code. */
static int build_comm(ftrt_ctx *ctx, const ftrt__plan *p, MPI_Comm *comm)
{
    for (int l = 0; l < p->ntrainers; l++)
        if (p->members[l] >= ctx->world_size)
            return ftrt__join_comm_create(p->members, p->ntrainers, ctx->world_size,
                                          p->logical_rank, ctx->join_port, ctx->local_tag,
                                          p->epoch, comm);
    /* (comm/ulfm.h: also after a failure) */
    return ftrt__world_comm_create(p->members, p->ntrainers, p->epoch, comm);
}

int ftrt__apply_plan(ftrt_ctx *ctx)
{
    double t0 = ftrt__now();
    pthread_mutex_lock(&ctx->cp.lock);
    ftrt__plan *p = malloc(ctx->cp.plan_len);
    if (p) memcpy(p, ctx->cp.plan, ctx->cp.plan_len);
    ctx->plan_t = ctx->cp.plan_t;
    int drc = p && p->ndata > 0 ? take_data_ranks(ctx, p->logical_rank) : 0;
    pthread_mutex_unlock(&ctx->cp.lock);
    if (!p || drc) {
        free(p);
        return -ENOMEM;
    }
    free(ctx->plan);
    ctx->plan = p;

    if (ctx->plane.comm != MPI_COMM_NULL && ftrt__plane_abandon(&ctx->plane)) return -ENOMEM;
    MPI_Comm comm = MPI_COMM_NULL;
    int rc = build_comm(ctx, p, &comm);
    if (rc == FTRT__JOIN_UNREACHED) /* a joined member lost: the abort or epoch its loss brings */
        return ftrt__ulfm_await_epoch(&ctx->watch, p->epoch);
    if (rc != MPI_SUCCESS && ftrt__ulfm_is_failure(rc, MPI_COMM_NULL)) /* a member died */
        return ftrt__ulfm_await_epoch(&ctx->watch, p->epoch);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        ftrt_log_error("building the communicator of epoch %d failed: %s", p->epoch, msg);
        return FTRT_EMPI;
    }
    ftrt__plane_set(&ctx->plane, comm);
    ctx->rank = p->logical_rank;
    ctx->size = p->ntrainers;
    ctx->watch.epoch = p->epoch;
    ctx->watch.needs_recover = 0;
    ctx->rebuild_s = ftrt__now() - t0;
    return 0;
}

/* FNV-1a over the region table (names, sizes, kinds, locations): every member must agree on
 * it. */
static uint64_t regions_signature(const ftrt_ctx *ctx, int replicated_only)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < ctx->nregs; i++) {
        const ftrt__region *r = &ctx->regs[i];
        if (replicated_only && r->kind != FTRT__KIND_REPLICATED) continue;
        uint64_t b = r->bytes;
        unsigned char kl[2] = {(unsigned char)r->kind, (unsigned char)r->loc};
        const unsigned char *parts[3] = {(const unsigned char *)r->name,
                                         (const unsigned char *)&b, kl};
        size_t lens[3] = {strlen(r->name), sizeof b, sizeof kl};
        for (int k = 0; k < 3; k++)
            for (size_t j = 0; j < lens[k]; j++) h = (h ^ parts[k][j]) * 1099511628211ull;
    }
    return h;
}

/* The survivors behind the resume step of a peers plan, or with a shard-only image of their own
 * in a memory plan (their replicated regions come from the peers): the PLAN only counts them (base/proto.h,
 * FTRT__PROTO_PLAN) and each knows itself from its REPORT, so every member sets its own bit and
 * one SUM allreduce of ceil(N / 64) words gives all the same set, which fills the plan's roles
 * (ftrt__plan_behind_apply): the roles, hence the transfer's schedule, are those the whole list
 * gave. Collective over the new communicator when p->nbehind > 0, else nothing. Returns 0,
 * FTRT_EPROTO (the set disagrees with the plan: on every member alike), -ENOMEM or the
 * allreduce's code. */
static int learn_behind(ftrt_ctx *ctx)
{
    ftrt__plan *p = ctx->plan;
    if (p->nbehind == 0) return 0;
    size_t words = ftrt__plan_behind_words(p->ntrainers);
    int64_t *bits = calloc(words, sizeof *bits);
    if (!bits) return -ENOMEM;
    if (ftrt__plan_behind_mine(p, ctx->reported_steps, ctx->reported_shard_only))
        bits[p->logical_rank / 64] = (int64_t)((uint64_t)1 << (p->logical_rank % 64));
    int rc = ftrt__plane_allreduce(&ctx->plane, bits, words, FTRT_INT64, FTRT_SUM);
    if (!rc) rc = ftrt__plan_behind_apply(p, ftrt__plan_size(p->ntrainers), bits, words);
    if (rc == FTRT_EPROTO)
        ftrt_log_error("recovery: the survivors behind step %lld do not match the plan's count "
                       "(%d): the members and the coordinator disagree on the steps reported",
                       (long long)p->resume_step, p->nbehind);
    free(bits);
    return rc;
}

/* State transfer of the plan: replicated regions (host and device) from the up-to-date members
 * to those that need them, after the sharded state from the partner replicas; or a reload of
 * the plan's checkpoint. Returns 0 or an error code. */
static int transfer_state(ftrt_ctx *ctx)
{
    const ftrt__plan *p = ctx->plan;
    ftrt__xfer_stat ms = {0};
    if (p->mem_step >= 0) { /* sharded state from the partner replicas in memory */
        int rc = ftrt__replica_restore(ctx, &ms);
        if (rc) {
            ftrt_log_error("recovery: cannot restore step %lld from the partner replicas in "
                           "memory: %s", (long long)p->mem_step, ftrt_strerror(rc));
            return rc;
        }
    } else if (p->ckpt_step >= 0) {
        ftrt__replica_drop(ctx); /* images of steps past the checkpoint: an abandoned timeline */
        int rc = ftrt__ckpt_load(ctx->cfg.ckpt_dir, p->ckpt_step, ctx->rank, ctx->size,
                                 ctx->regs, ctx->nregs);
        if (rc) ftrt_log_error("recovery: cannot reload checkpoint step %lld: %s",
                               (long long)p->ckpt_step, ftrt_strerror(rc));
        return rc;
    }
    /* Who is behind (a peers plan), then agree on the replicated region table: min(sig) ==
     * max(sig) on every member. */
    int rc = learn_behind(ctx);
    if (rc) return rc;
    uint64_t sig = regions_signature(ctx, 1);
    int64_t mm[2] = {(int64_t)sig, (int64_t)~sig};
    rc = ftrt__plane_allreduce(&ctx->plane, mm, 2, FTRT_INT64, FTRT_MIN);
    if (rc) return rc;
    if ((uint64_t)mm[0] != ~(uint64_t)mm[1]) {
        ftrt_log_error("recovery: members registered different replicated regions");
        return FTRT_EMISMATCH;
    }
    /* Then only the members that lack the state receive it, striped over the up-to-date ones,
     * in CRC32C-checked chunks (comm/transfer.h); device regions through the device backend,
     * staged chunk by chunk in host memory. */
    const int32_t *roles = ftrt__plan_roles_c(p);
    ftrt__xfer_region *xr = calloc(ctx->nregs > 0 ? (size_t)ctx->nregs : 1, sizeof *xr);
    if (!xr) return -ENOMEM;
    int n = 0;
    for (int i = 0; i < ctx->nregs; i++) {
        const ftrt__region *r = &ctx->regs[i];
        if (r->kind != FTRT__KIND_REPLICATED) continue;
        const ftrt__loc_ops *loc = r->loc == FTRT__LOC_DEVICE ? ftrt__loc_device() : NULL;
        if (r->loc == FTRT__LOC_DEVICE && !loc) { /* (ftrt_register refuses this) */
            ftrt_log_error("recovery: region \"%s\" is device memory and there is no device "
                           "backend to move it through", r->name);
            free(xr);
            return FTRT_ENOTSUP;
        }
        xr[n++] = (ftrt__xfer_region){r->name, r->ptr, r->bytes, loc};
    }
    ftrt__xfer_stat xs;
    rc = ftrt__xfer_replicated(&ctx->plane, xr, n, roles, FTRT__XFER_CHUNK,
                               ftrt__knobs.xfer_corrupt_chunk - 1,
                               ftrt__knobs.xfer_corrupt_times ? ftrt__knobs.xfer_corrupt_times : 1,
                               &xs);
    free(xr);
    if (!rc && p->mem_step >= 0) {
        if (ftrt__plan_roles_c(p)[ctx->rank] == FTRT__PLAN_NEEDS_STATE)
            ftrt__replica_adopt(ctx, p->mem_step); /* an image of its own, for the next one */
        ftrt_log_info("recovery: state of step %lld from the %s in memory: %d "
                      "sharded image(s), %.1f MiB received here in %.1f ms",
                      (long long)p->mem_step,
                      ctx->cfg.shard_redundancy == FTRT_SHARD_ERASURE ? "erasure groups"
                                                                      : "partner replicas",
                      ms.receivers, (double)ms.bytes_received / 1048576.0,
                      ms.seconds * 1e3);
    }
    if (!rc && xs.receivers > 0)
        ftrt_log_info("recovery: state transfer to %d member(s) from %d source(s)%s: %.1f MiB "
                      "sent, %.1f MiB received here in %.1f ms, %d chunk(s) retried",
                      xs.receivers, xs.sources,
                      xs.mapped         ? ", written by the sources into mapped huge pages"
                      : xs.single_copy ? ", written by the sources" : "",
                      (double)xs.bytes_sent / 1048576.0, (double)xs.bytes_received / 1048576.0,
                      xs.seconds * 1e3, xs.chunks_retried);
    return rc;
}

int ftrt__resume_plan(ftrt_ctx *ctx, int64_t *step)
{
    double t0 = ftrt__now();
    int rc = transfer_state(ctx);
    if (rc) return rc;
    *step = ctx->plan->resume_step;
    ftrt__ledger_resume(ctx, *step);
    double t1 = ftrt__now();
    /* The phases of this member's part (the coordinator's report.c splits MTTR with them). */
    ftrt__resumed_msg m = {.epoch = ctx->watch.epoch, .rebuild_s = ctx->rebuild_s,
                           .transfer_s = t1 - t0, .span_s = t1 - ctx->plan_t};
    ftrt__agent_send(ctx, FTRT__MSG_RESUMED, &m, sizeof m);
    return 0;
}

static int has_sharded(const ftrt_ctx *ctx)
{
    for (int i = 0; i < ctx->nregs; i++)
        if (ctx->regs[i].kind == FTRT__KIND_SHARDED) return 1;
    return 0;
}

/* Reports progress for the announced epoch and waits for its PLAN. */
static int await_plan(ftrt_ctx *ctx)
{
    int reported = -1, rc = 0;
    pthread_mutex_lock(&ctx->cp.lock);
    for (;;) {
        if ((rc = atomic_load(&ctx->watch.fatal)) != 0) break;
        int pending = atomic_load(&ctx->watch.pending_epoch);
        if (ctx->cp.plan && ctx->cp.plan->epoch == pending && pending > ctx->watch.epoch) break;
        if (pending != reported) {
            ftrt__report rep = {.steps_done = atomic_load(&ctx->cp.steps_done),
                                .epoch = pending, .has_sharded = has_sharded(ctx)};
            pthread_mutex_unlock(&ctx->cp.lock);
            ftrt__replica_offer(ctx, &rep.own_step, &rep.held_step, &rep.held_of,
                                &rep.own_shard_only);
            ftrt__ec_offer(ctx, &rep.ec_step, &rep.ec_n, &rep.ec_k);
            rc = ftrt__agent_send(ctx, FTRT__MSG_REPORT, &rep, sizeof rep);
            pthread_mutex_lock(&ctx->cp.lock);
            if (rc) {
                rc = FTRT_ECOORD;
                break;
            }
            ctx->reported_steps = rep.steps_done; /* (learn_behind) */
            ctx->reported_shard_only = rep.own_shard_only;
            reported = pending;
        }
        ftrt__cp_wait(ctx, 10);
    }
    pthread_mutex_unlock(&ctx->cp.lock);
    return rc;
}

static int recover(ftrt_ctx *ctx, int64_t *step)
{
    if (!ctx || !step) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    int rc = atomic_load(&ctx->watch.fatal);
    if (rc) return rc;
    if (atomic_load(&ctx->watch.pending_epoch) == ctx->watch.epoch) return FTRT_ESTATE;
    ctx->watch.needs_recover = 1;
    double t0 = ftrt__now();
    ftrt__ledger_failure(ctx); /* in case the failure surfaced outside a wait */
    ftrt__ledger_mark(ctx, FTRT__IV_RECOVERY);
    ftrt__ckpt_quiesce(ctx->ckpt); /* old-epoch checkpoints abandoned; no snapshot reads state now */
    rc = await_plan(ctx);
    if (rc) return rc;
    if (ftrt__knobs.recovery_delay_ms > 0) { /* test knob: widen the recovery window */
        struct timespec ts = {ftrt__knobs.recovery_delay_ms / 1000,
                              (ftrt__knobs.recovery_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    rc = ftrt__apply_plan(ctx);
    if (rc) return rc;
    rc = ftrt__resume_plan(ctx, step);
    if (rc) return ftrt__plane_recheck(&ctx->plane, rc); /* ULFM: a member died meanwhile */
    ftrt_log_info("recovered into epoch %d as logical rank %d in %.1f ms; resuming at step %lld",
                  ctx->watch.epoch, ctx->rank, (ftrt__now() - t0) * 1e3, (long long)*step);
    return 0;
}

int ftrt_recover(ftrt_ctx *ctx, int64_t *step)
{
    int rc = recover(ctx, step);
    ftrt__note_exit(ctx, rc);
    return rc;
}
