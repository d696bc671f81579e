/*
 * regions.c - the region registry and the checkpoint and restore entry points of the API
 * (docs/ARCHITECTURE.md "Checkpoints").
 *
 * The application registers its state as regions; ftrt_checkpoint*() hand the registry to the
 * checkpoint engine (checkpoint/engine.h) and book the time in the ledger; ftrt_restore()
 * loads the newest committed checkpoint every trainer can load, or, on a promoted spare, takes
 * the state the recovery plan names (recovery.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/knobs.h"
#include "base/log.h"
#include "checkpoint/commit.h"
#include "checkpoint/restore.h"
#include "checkpoint/steps.h"
#include "comm/ulfm.h"
#include "kernels/location.h"
#include "runtime/internal.h"

void ftrt__ckpt_opts_from(const ftrt_config *cfg, ftrt__ckpt_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->dir, sizeof o->dir, "%s", cfg->ckpt_dir);
    o->qd = cfg->ckpt_qd;
    o->chunk_kb = cfg->ckpt_chunk_kb;
    o->direct = cfg->ckpt_direct;
    o->staging_mb = cfg->ckpt_staging_mb;
    o->policy = cfg->ckpt_policy;
    o->write_delay_ms = ftrt__knobs.ckpt_write_delay_ms; /* test knobs */
    o->hold_first = ftrt__knobs.ckpt_hold_first;
}

/* ---- checkpoints ------------------------------------------------------------------------- */

int ftrt_checkpoint_prepare(ftrt_ctx *ctx)
{
    if (!ctx) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    if (!ctx->ckpt) return -ENOMEM;
    return ftrt__ckpt_prepare(ctx->ckpt, ctx->regs, ctx->nregs, ctx->rank, ctx->size);
}

int ftrt_checkpoint_start(ftrt_ctx *ctx, int64_t step)
{
    if (!ctx || step < 0) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER || ctx->watch.needs_recover) return FTRT_ESTATE;
    if (!ctx->ckpt) return -ENOMEM;
    double t0 = ftrt__now();
    int rc = ftrt__interrupted(ctx);
    if (rc) {
        ftrt__ckpt_finish_snapshot(ctx->ckpt); /* as promised: no earlier snapshot left running */
        return rc;
    }
    ftrt__ledger_mark(ctx, FTRT__IV_CKPT);
    /* Partner replicas of sharded state refreshed at each checkpoint (FTRT_SHARD_REPLICA_EVERY
     * = 0): collective, before the snapshot, which then runs as always. */
    if (ctx->cfg.shard_replica_every == 0) /* ULFM: a dead partner is an epoch change */
        rc = ftrt__plane_recheck(&ctx->plane, ftrt__replica_refresh(ctx, step));
    if (!rc) rc = ftrt__ckpt_start(ctx->ckpt, step, ctx->regs, ctx->nregs, ctx->rank, ctx->size);
    if (rc == FTRT_ERECOVER)
        ftrt__ledger_failure(ctx);
    else
        ftrt__ledger_mark(ctx, ftrt__compute_kind(ctx));
    ftrt__ckpt_add_stall(ctx->ckpt, ftrt__now() - t0, 1);
    return rc;
}

int ftrt_checkpoint_wait_snapshot(ftrt_ctx *ctx)
{
    if (!ctx) return FTRT_EINVAL;
    if (!ftrt__ckpt_snapshot_busy(ctx->ckpt)) return 0;
    double t0 = ftrt__now();
    ftrt__ledger_mark(ctx, FTRT__IV_CKPT);
    ftrt__ckpt_finish_snapshot(ctx->ckpt);
    ftrt__ledger_mark(ctx, ftrt__compute_kind(ctx));
    ftrt__ckpt_add_stall(ctx->ckpt, ftrt__now() - t0, 0);
    return 0;
}

int ftrt_checkpoint(ftrt_ctx *ctx, int64_t step)
{
    double t0 = ftrt__now();
    int rc = ftrt_checkpoint_start(ctx, step);
    if (rc != 0) return rc;
    ftrt_checkpoint_wait_snapshot(ctx);
    ftrt__ckpt_set_last_stall(ctx->ckpt, ftrt__now() - t0);
    return 0;
}

int ftrt_checkpoint_wait_commit(ftrt_ctx *ctx, int64_t step, int timeout_ms)
{
    if (!ctx) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    if (!ctx->ckpt) return FTRT_EINVAL;
    return ftrt__ckpt_wait_commit(ctx->ckpt, step, timeout_ms);
}

int ftrt_checkpoint_stats(const ftrt_ctx *ctx, ftrt_ckpt_stats *out, size_t size)
{
    if (!ctx || !out || size < sizeof(uint32_t)) return FTRT_EINVAL;
    ftrt__ckpt_stats(ctx->ckpt, out, size);
    return 0;
}

/* ---- the region registry ---------------------------------------------------------------- */

/* The public flags split once into kind and location (region.h), whose values they share. */
_Static_assert(FTRT__KIND_REPLICATED == FTRT_REGION_REPLICATED &&
                   FTRT__KIND_SHARDED == FTRT_REGION_SHARDED,
               "a region's kind is stored in shards as its FTRT_REGION_* value");

/* Device memory is read by the checkpoint engine's snapshot and written by the restore from
 * a checkpoint, moved by the recovery's state transfer, copied into and out of the partner
 * replicas' images and fingerprinted by the silent-data-corruption check, all through the
 * device backend (kernels/location.h). A device region is refused here (FTRT_ENOTSUP, the
 * message naming it) when there is no device backend, so that the job learns it at
 * registration and not in a recovery; every path refuses it too. */
static int device_refused(const char *name, ftrt__region_loc loc)
{
    if (loc != FTRT__LOC_DEVICE) return 0;
    if (!ftrt__loc_device()) {
        ftrt_log_error("ftrt_register: region \"%s\" is device memory, but this libftrt has no "
                       "device backend (build it with the CUDA toolkit, or set the test knob "
                       "FTRT_TEST_SIM_DEVICE=1 for the simulated device)",
                       name);
        return FTRT_ENOTSUP;
    }
    return 0;
}

int ftrt_register(ftrt_ctx *ctx, const char *name, void *ptr, size_t bytes, unsigned flags)
{
    const unsigned known = FTRT_REGION_SHARDED | FTRT_REGION_DEVICE | FTRT_REGION_OPTIONAL;
    if (!ctx || !name || !*name || strlen(name) >= FTRT__NAME_MAX || (!ptr && bytes) ||
        (flags & ~known)) {
        ftrt_log_error("ftrt_register: bad argument (name \"%s\", ptr %p, flags %#x%s)",
                       name ? name : "(null)", ptr, flags,
                       flags & ~known ? ": unknown flag bits" : "");
        return FTRT_EINVAL;
    }
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    ftrt__region_kind kind =
        flags & FTRT_REGION_SHARDED ? FTRT__KIND_SHARDED : FTRT__KIND_REPLICATED;
    ftrt__region_loc loc = flags & FTRT_REGION_DEVICE ? FTRT__LOC_DEVICE : FTRT__LOC_HOST;
    int rc = device_refused(name, loc);
    if (rc) return rc;
    for (int i = 0; i < ctx->nregs; i++)
        if (!strcmp(ctx->regs[i].name, name)) {
            ftrt_log_error("ftrt_register: region \"%s\" is already registered", name);
            return FTRT_EINVAL;
        }
    if (ctx->nregs == ctx->regs_cap) {
        int ncap = ctx->regs_cap ? 2 * ctx->regs_cap : 8;
        ftrt__region *n = realloc(ctx->regs, (size_t)ncap * sizeof *n);
        if (!n) return -ENOMEM;
        ctx->regs = n;
        ctx->regs_cap = ncap;
    }
    ftrt__region *r = &ctx->regs[ctx->nregs];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->ptr = ptr;
    r->bytes = bytes;
    r->kind = kind;
    r->loc = loc;
    r->optional = (flags & FTRT_REGION_OPTIONAL) != 0;
    return ctx->nregs++;
}

int ftrt_unregister(ftrt_ctx *ctx, const char *name)
{
    if (!ctx || !name) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    int i = 0;
    while (i < ctx->nregs && strcmp(ctx->regs[i].name, name) != 0) i++;
    if (i == ctx->nregs) {
        ftrt_log_error("ftrt_unregister: no region \"%s\" is registered", name);
        return FTRT_EINVAL;
    }
    if (ctx->ckpt) ftrt__ckpt_finish_snapshot(ctx->ckpt); /* it may be reading the region */
    memmove(&ctx->regs[i], &ctx->regs[i + 1], (size_t)(ctx->nregs - i - 1) * sizeof *ctx->regs);
    ctx->nregs--;
    return 0;
}

/* ---- restore ----------------------------------------------------------------------------- */

/* Loads the newest committed checkpoint that every trainer can load. */
static int restore_from_disk(ftrt_ctx *ctx, int64_t *step)
{
    int64_t cand[64];
    int n = ftrt__ckpt_list(ctx->cfg.ckpt_dir, cand, 64);
    if (n < 0) {
        ftrt_log_error("cannot list checkpoints in %s: %s", ctx->cfg.ckpt_dir, ftrt_strerror(n));
        return n;
    }
    /* Agree on the candidate list: every trainer must see the same newest step. */
    int64_t probe[2] = {n ? cand[0] : -1, n ? -cand[0] : 1};
    int rc = ftrt__plane_allreduce(&ctx->plane, probe, 2, FTRT_INT64, FTRT_MIN);
    if (rc) return rc;
    if (probe[0] != -probe[1]) {
        ftrt_log_error("trainers see different newest checkpoints (%lld vs %lld): is %s shared?",
                       (long long)probe[0], (long long)-probe[1], ctx->cfg.ckpt_dir);
        return FTRT_EMISMATCH;
    }
    if (n == 0) {
        *step = 0;
        return 0;
    }
    int last_err = FTRT_ENOCKPT;
    ftrt__load_opts o = {.qd = (unsigned)ctx->cfg.ckpt_qd,
                         .chunk = (size_t)ctx->cfg.ckpt_chunk_kb << 10,
                         .direct = ctx->cfg.ckpt_direct};
    for (int i = 0; i < n; i++) {
        ftrt__load_stat ls = {0};
        int lr = ftrt__ckpt_load_ex(ctx->cfg.ckpt_dir, cand[i], ctx->rank, ctx->size, ctx->regs,
                                    ctx->nregs, &o, &ls);
        int64_t ok[1] = {lr == 0 ? 1 : (lr == FTRT_EMISMATCH ? -1 : 0)};
        rc = ftrt__plane_allreduce(&ctx->plane, ok, 1, FTRT_INT64, FTRT_MIN);
        if (rc) return rc;
        if (ok[0] == 1) {
            *step = cand[i];
            ftrt__ckpt_note_restore(ctx->ckpt, ls.seconds, ls.bytes);
            ftrt_log_info("restored checkpoint step %lld", (long long)cand[i]);
            return 1;
        }
        last_err = ok[0] < 0 ? FTRT_EMISMATCH : FTRT_ENOCKPT;
        ftrt_log_warn("checkpoint step %lld is not usable on every trainer (%s here); %s",
                      (long long)cand[i], lr ? ftrt_strerror(lr) : "fine",
                      i + 1 < n ? "falling back to the next older one" : "none left");
    }
    if (last_err == FTRT_ENOCKPT)
        ftrt_log_error("no usable checkpoint in %s: all %d committed one(s) failed to load (see "
                       "the warnings above); move the directory away to start fresh",
                       ctx->cfg.ckpt_dir, n);
    return last_err;
}

static int restore(ftrt_ctx *ctx, int64_t *step)
{
    if (!ctx || !step) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    int rc;
    ftrt__ckpt_quiesce(ctx->ckpt); /* a snapshot must not read what is being overwritten */
    if (ctx->promoted) { /* a promoted spare: the state comes from the plan, as in recovery */
        rc = ftrt__resume_plan(ctx, step);
        if (rc) return rc;
        ctx->promoted = 0;
        return 1;
    }
    rc = restore_from_disk(ctx, step);
    if (rc >= 0) {
        ctx->t_mark = ftrt__now();
        atomic_store(&ctx->cp.steps_done, *step);
        ftrt__ledger_mark(ctx, ftrt__compute_kind(ctx)); /* start-up ends here */
    }
    return rc;
}

int ftrt_restore(ftrt_ctx *ctx, int64_t *step)
{
    int rc = restore(ctx, step);
    ftrt__note_exit(ctx, rc);
    return rc;
}
