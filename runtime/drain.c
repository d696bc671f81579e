/*
 * drain.c - the trainer side of a drain (docs/detection-and-recovery.md "Drain"): a planned
 * move of a logical rank to a hot spare, which is not a failure. The coordinator announces the
 * drain's epoch for a step boundary it picks ahead of every trainer, "after S steps done" (a
 * FAILURE with boundary set and boundary_step S) to the members that stay, and DRAIN to the
 * trainer that leaves; the agent thread records both (agent.c), and ftrt_step_done() at S steps
 * done (a step boundary: the state reflects a whole step) makes them take effect: the members
 * that stay owe ftrt_recover() (FTRT_ERECOVER), the drained trainer leaves (FTRT_EDRAINED).
 * Every trainer thus stops after the same step, the drained one included (a refresh of the
 * partner replicas there is a collective they all enter), and the recovery resumes where they
 * all stopped: nothing is redone. A trainer already past S when the announcement came (it was
 * late, or ignored it: FTRT_TEST_DRAIN_LATE_RANKS) takes it at its next step boundary; it
 * waits in that step's collective for the others until the coordinator makes the epoch urgent
 * (a plain FAILURE: its collective returns FTRT_ERECOVER and that partial step is abandoned,
 * not a completed one). A loop that ends before S (a job that did not give its total steps)
 * says BYE without waiting for its last checkpoints' commits: the coordinator withdraws the
 * drain on it and decides them then.
 */
#include <stdatomic.h>

#include "base/log.h"
#include "runtime/internal.h"

/* Raises the watch's pending epoch to `epoch` (never lowers it: the agent thread raises it
 * too) and tells the engines' listeners. */
static void raise_pending(ftrt_ctx *ctx, int epoch)
{
    int cur = atomic_load(&ctx->watch.pending_epoch);
    while (cur < epoch &&
           !atomic_compare_exchange_weak(&ctx->watch.pending_epoch, &cur, epoch)) {
    }
    ftrt__watch_fire(&ctx->watch);
}

/* With sharded regions, the state handed over is the partner replicas' (runtime/replica.c):
 * every trainer refreshes them at this boundary (collective over the epoch's trainers, the
 * drained one included), so that the recovery finds every image at this step and resumes here
 * from memory. A refresh that fails (a trainer was already in the next step) leaves the
 * recovery to find older images or the committed checkpoint: logged. */
static void refresh_at_boundary(ftrt_ctx *ctx)
{
    if (!ftrt__replica_enabled(ctx)) return;
    int64_t step = atomic_load(&ctx->cp.steps_done);
    int rc = ftrt__replica_refresh(ctx, step);
    if (rc) ftrt_log_warn("drain: the partner replicas were not refreshed at step %lld (%s)",
                          (long long)step, ftrt_err_name(rc));
    ctx->watch.needs_recover = 0; /* (what this returns says what is owed) */
}

int ftrt__drain_pending(const ftrt_ctx *ctx)
{
    return atomic_load(&ctx->cp.drained) ||
           atomic_load(&ctx->cp.boundary_epoch) > ctx->watch.epoch;
}

int ftrt__drain_boundary(ftrt_ctx *ctx)
{
    if (!ftrt__drain_pending(ctx)) return 0;
    int drained = atomic_load(&ctx->cp.drained);
    int be = atomic_load(&ctx->cp.boundary_epoch);
    /* (every trainer at the same count: a collective refresh below finds them all in it) */
    if (atomic_load(&ctx->cp.steps_done) < atomic_load(&ctx->cp.boundary_step)) return 0;
    if (!atomic_load(&ctx->watch.fatal)) refresh_at_boundary(ctx);
    if (drained) {
        int zero = 0;
        atomic_compare_exchange_strong(&ctx->watch.fatal, &zero, FTRT_EDRAINED);
        ftrt__watch_fire(&ctx->watch);
        ftrt_log_info("drained at a step boundary: leaving the job");
        return atomic_load(&ctx->watch.fatal);
    }
    raise_pending(ctx, be);
    return ftrt__watch_note(&ctx->watch, FTRT_ERECOVER);
}
