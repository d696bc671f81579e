/*
 * timeline.c - this rank's side of the goodput ledger: marks on the timeline, step and rework
 * bookkeeping, the periodic send to the coordinator, and the host interface (base/ports.h) the
 * runtime hands to the checkpoint engine and the data plane.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "runtime/internal.h"

void ftrt__ledger_mark(ftrt_ctx *ctx, int kind)
{
    pthread_mutex_lock(&ctx->ledger_lock);
    ftrt__ledger_switch(&ctx->ledger, kind, ftrt__wallclock());
    pthread_mutex_unlock(&ctx->ledger_lock);
}

void ftrt__ledger_spare_mark(ftrt_ctx *ctx, int kind)
{
    pthread_mutex_lock(&ctx->ledger_lock);
    ftrt__ledger_switch(&ctx->ledger, kind, ftrt__wallclock());
    ftrt__ledger_step_end(&ctx->ledger);
    pthread_mutex_unlock(&ctx->ledger_lock);
    if (ftrt__ledger_send(ctx, 0))
        ftrt_log_debug("hot spare: its timeline's update did not go out");
}

int ftrt__compute_kind(const ftrt_ctx *ctx)
{
    return atomic_load(&ctx->cp.steps_done) < ctx->ledger.rework_until ? FTRT__IV_REWORK
                                                                         : FTRT__IV_COMPUTE;
}

void ftrt__ledger_failure(ftrt_ctx *ctx)
{
    pthread_mutex_lock(&ctx->ledger_lock);
    ftrt__ledger *l = &ctx->ledger;
    if (l->kind != FTRT__IV_DETECT && l->kind != FTRT__IV_RECOVERY) {
        ftrt__ledger_reclass_since_step(l, FTRT__IV_REWORK);
        double now = ftrt__wallclock(), tf = atomic_load(&ctx->cp.t_fail_wall);
        ftrt__ledger_split_open(l, tf > 0 && tf < now ? tf : now, FTRT__IV_DETECT);
    }
    pthread_mutex_unlock(&ctx->ledger_lock);
}

/* A LEDGER's head: the totals, the open interval and the eMFU inputs (ledger_lock held). */
static void ledger_head(const ftrt_ctx *ctx, ftrt__ledger_msg *m)
{
    const ftrt__ledger *l = &ctx->ledger;
    m->t_open = l->t_open;
    memcpy(m->totals, l->totals, sizeof m->totals);
    m->flops_per_step = ctx->flops_per_step;
    m->peak_flops = ctx->peak_flops;
    m->total_steps = ctx->total_steps;
    m->kept_steps = ctx->kept_steps;
    m->kind_open = l->kind;
}

/* Past this rank's share of the coordinator's timeline budget (or left out; or past its own
 * FTRT_TIMELINE_MAX), only the first and the newest of the intervals [ctx->ledger_sent, upto)
 * go (the coordinator would drop the rest; the two bound the timeline its totals rebuild):
 * puts them in m. Returns how many. */
static int32_t ledger_ends(ftrt_ctx *ctx, size_t upto, ftrt__ledger_msg *m)
{
    const ftrt__ledger *l = &ctx->ledger;
    int32_t n = 0;
    if (ctx->ledger_sent == 0 && upto > 0) m->iv[n++] = l->iv[0];
    if (upto > ctx->ledger_sent && upto > 1) m->iv[n++] = l->iv[upto - 1];
    ctx->ledger_sent = upto;
    m->sparse = 1;
    return n;
}

int ftrt__ledger_send(ftrt_ctx *ctx, int final)
{
    enum { CHUNK = 512 };
    size_t share = ftrt__timeline_share(ctx->world_rank, ctx->world_size, ctx->nspares,
                                        ctx->cfg.timeline_ranks, ctx->cfg.timeline_budget_mb,
                                        ctx->cfg.timeline_max);
    ftrt__ledger_msg *m = malloc(ftrt__ledger_msg_size(CHUNK));
    if (!m) return -ENOMEM;
    int rc = 0;
    do {
        pthread_mutex_lock(&ctx->ledger_lock);
        const ftrt__ledger *l = &ctx->ledger;
        /* Only finished steps' intervals are final (a failure may still turn the step in
         * flight into rework), except on the last message. */
        size_t upto = final ? l->n : (l->step_mark < l->n ? l->step_mark : l->n);
        size_t n = upto > ctx->ledger_sent ? upto - ctx->ledger_sent : 0;
        if (n > CHUNK) n = CHUNK;
        memset(m, 0, sizeof *m);
        ledger_head(ctx, m);
        if (ctx->ledger_sent >= share || (l->truncated && ctx->ledger_sent >= l->n)) {
            m->n = ledger_ends(ctx, upto, m);
        } else {
            if (n > share - ctx->ledger_sent) n = share - ctx->ledger_sent;
            m->n = (int32_t)n;
            if (n > 0) memcpy(m->iv, l->iv + ctx->ledger_sent, n * sizeof *m->iv);
            ctx->ledger_sent += n;
            if (l->truncated && ctx->ledger_sent >= l->n) m->sparse = 2; /* no more to come */
        }
        m->final = final && ctx->ledger_sent >= l->n;
        pthread_mutex_unlock(&ctx->ledger_lock);
        rc = ftrt__agent_send(ctx, FTRT__MSG_LEDGER, m, (uint32_t)ftrt__ledger_msg_size(m->n));
        if (rc || !final || m->final) break;
    } while (1);
    free(m);
    return rc;
}

ftrt__ledger_msg *ftrt__ledger_whole(ftrt_ctx *ctx, size_t *len)
{
    size_t share = ftrt__timeline_share(ctx->world_rank, ctx->world_size, ctx->nspares,
                                        ctx->cfg.timeline_ranks, ctx->cfg.timeline_budget_mb,
                                        ctx->cfg.timeline_max);
    pthread_mutex_lock(&ctx->ledger_lock);
    const ftrt__ledger *l = &ctx->ledger;
    size_t n = l->n < share ? l->n : share;
    ftrt__ledger_msg *m = calloc(1, ftrt__ledger_msg_size((int)n));
    if (m) {
        ledger_head(ctx, m);
        m->n = (int32_t)n;
        if (n > 0) memcpy(m->iv, l->iv, n * sizeof *m->iv);
        m->sparse = l->truncated || n < l->n ? 2 : 0; /* (these, then no more) */
        *len = ftrt__ledger_msg_size((int)n);
    }
    pthread_mutex_unlock(&ctx->ledger_lock);
    return m;
}

int ftrt__timeline_step_done(ftrt_ctx *ctx, int64_t step)
{
    if (step >= ctx->step_cap) {
        int64_t ncap = ctx->step_cap ? ctx->step_cap : 1024;
        while (ncap <= step) ncap *= 2;
        double *n = realloc(ctx->step_s, (size_t)ncap * sizeof *n);
        if (!n) return -ENOMEM;
        memset(n + ctx->step_cap, 0, (size_t)(ncap - ctx->step_cap) * sizeof *n);
        ctx->step_s = n;
        ctx->step_cap = ncap;
    }
    double now = ftrt__now();
    double d = now - ctx->t_mark;
    ctx->t_mark = now;
    ctx->kept_s += d - ctx->step_s[step];
    if (ctx->step_s[step] == 0) ctx->kept_steps++;
    ctx->step_s[step] = d;
    pthread_mutex_lock(&ctx->ledger_lock);
    ftrt__ledger_switch(&ctx->ledger, ftrt__compute_kind(ctx), ftrt__wallclock());
    ftrt__ledger_step_end(&ctx->ledger);
    pthread_mutex_unlock(&ctx->ledger_lock);
    atomic_store(&ctx->cp.steps_done, step + 1);
    atomic_store(&ctx->cp.kept_s, ctx->kept_s);
    return 0;
}

void ftrt__ledger_resume(ftrt_ctx *ctx, int64_t resume_step)
{
    int64_t done = atomic_load(&ctx->cp.steps_done);
    double now = ftrt__now();
    for (int64_t s = resume_step; s < done && s < ctx->step_cap; s++)
        if (ctx->step_s[s] > 0) {
            ctx->rework_s += ctx->step_s[s];
            ctx->kept_s -= ctx->step_s[s];
            ctx->step_s[s] = 0;
            ctx->rework_steps++;
            ctx->kept_steps--;
        }
    pthread_mutex_lock(&ctx->ledger_lock);
    int64_t redo = ctx->plan && ctx->plan->rework_until > done ? ctx->plan->rework_until : done;
    if (redo > resume_step) ctx->ledger.rework_until = redo; /* steps redone are rework */
    ftrt__ledger_step_end(&ctx->ledger);
    pthread_mutex_unlock(&ctx->ledger_lock);
    if (ctx->t_mark > 0) ctx->lost_s += now - ctx->t_mark;
    ctx->t_mark = now;
    atomic_store(&ctx->cp.waits, 0); /* the progress detector counts collectives per epoch */
    atomic_store(&ctx->cp.steps_done, resume_step);
    atomic_store(&ctx->cp.kept_s, ctx->kept_s);
    ftrt__ledger_mark(ctx, ftrt__compute_kind(ctx));
}


void ftrt__ledger_tick(ftrt_ctx *ctx) { ftrt__ledger_send(ctx, 0); }

/* ---- the host interface ---- */

static int host_send(void *arg, uint32_t type, const void *payload, uint32_t len)
{
    return ftrt__agent_send(arg, type, payload, len);
}

static void host_mark(void *arg, int kind)
{
    ftrt_ctx *ctx = arg;
    ftrt__ledger_mark(ctx, kind == FTRT__HOST_APP ? ftrt__compute_kind(ctx) : kind);
}

/* Progress bookkeeping around every data-plane wait of the application thread: counts the
 * waits (the coordinator's progress detector compares the counts of the trainers),
 * accumulates the time spent outside them (straggler detection) and records the wait in the
 * ledger as exposed communication. */
static void host_wait_begin(void *arg)
{
    ftrt_ctx *ctx = arg;
    double now = ftrt__now();
    if (ctx->t_wait_end > 0)
        atomic_store(&ctx->cp.compute_s, atomic_load(&ctx->cp.compute_s) + (now - ctx->t_wait_end));
    atomic_fetch_add(&ctx->cp.waits, 1);
    ftrt__ledger_mark(ctx, FTRT__IV_COMM);
}

static void host_wait_end(void *arg, int rc)
{
    ftrt_ctx *ctx = arg;
    ctx->t_wait_end = ftrt__now();
    if (rc == FTRT_ERECOVER)
        ftrt__ledger_failure(ctx);
    else
        ftrt__ledger_mark(ctx, ftrt__compute_kind(ctx));
}

static const ftrt__host_ops host_ops = {host_send, host_mark, host_wait_begin, host_wait_end};

ftrt__host ftrt__host_of(ftrt_ctx *ctx) { return (ftrt__host){&host_ops, ctx}; }
