/*
 * epoch.c - the epoch change after a failure (docs/ARCHITECTURE.md "Recovery"): FAILURE(E+1) to
 * the survivors, their REPORTs, a PLAN with the resume step and each member's state source to
 * every member, RESUMED from every member. The decisions themselves are plan.c's (pure); this
 * file gathers the REPORTs for them, records the outcome in the incidents and sends the PLAN.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/knobs.h"
#include "base/log.h"
#include "runtime/coordinator/coord.h"

void ftrt__epoch_open(ftrt__coord *c, double t_fail_wall)
{
    c->epoch++;
    c->nreports = c->nresumed = 0;
    c->phase = PH_COLLECT;
    c->status_dirty |= 2; /* membership: write now */
    c->epoch_t_fail = t_fail_wall;
    /* the standby acknowledges the epoch before any member learns of it (ftrt__epoch_release) */
    c->failure_seq = ftrt__standby_sync(c);
    c->failure_due = 1;
    ftrt__epoch_release(c);
}

/* The current epoch's FAILURE (boundary: c->epoch_soft, a drain's not yet urgent) to its
 * members that are not promoted spares. Returns how many it went to. */
static int failure_multicast(ftrt__coord *c)
{
    ftrt__failure_msg m = {.epoch = c->epoch, .boundary = c->epoch_soft,
                           .t_fail_wall = c->epoch_t_fail, .boundary_step = c->drain_step};
    int n = 0;
    for (int k = 0; k < c->N; k++)
        if (!c->r[c->members[k]].promoting) c->s.fan[n++] = c->members[k];
    ftrt__coord_multicast(c, c->s.fan, n, FTRT__MSG_FAILURE, &m, sizeof m);
    return n;
}

static void failure_send(ftrt__coord *c)
{
    int n = failure_multicast(c);
    c->failure_sent_epoch = c->epoch;
    c->status_dirty |= 2; /* (fault injectors wait for it: a recovery in flight) */
    if (ftrt__knobs.plan_delay_ms > 0) { /* test knob: the PLAN held (plan_held) */
        c->plan_test_until = ftrt__now() + ftrt__knobs.plan_delay_ms / 1000.0;
        ftrt_log_warn("epoch %d: FAILURE sent to %d survivor(s); the PLAN is held %d ms "
                      "(FTRT_TEST_PLAN_DELAY_MS)", c->epoch, n, (int)ftrt__knobs.plan_delay_ms);
    }
}

void ftrt__epoch_failure_urgent(ftrt__coord *c)
{
    /* (not sent yet: it goes out urgent once acknowledged, epoch_soft being 0 by then) */
    if (c->failure_sent_epoch == c->epoch) failure_multicast(c);
}

/* Whether world rank w gets the whole membership in this epoch's PLAN (addressed to it alone):
 * a promoted spare, which knows none, and every member in an epoch a shrink or fold
 * renumbered. */
static int gets_full_plan(const ftrt__coord *c, int w)
{
    return c->r[w].promoting || c->renumber_epoch == c->epoch;
}

static void plan_out(ftrt__coord *c)
{
    int n = 0;
    for (int l = 0; l < c->N; l++) {
        int w = c->members[l];
        if (gets_full_plan(c, w)) ftrt__epoch_resend_plan(c, w);
        else c->s.fan[n++] = w;
    }
    ftrt__coord_multicast(c, c->s.fan, n, FTRT__MSG_PLAN, c->plan_delta,
                          (uint32_t)c->plan_delta_len);
    c->plan_sent_epoch = c->epoch;
    c->status_dirty |= 2;
}

void ftrt__epoch_release(ftrt__coord *c)
{
    if (c->failure_due && ftrt__standby_acked(c, c->failure_seq)) {
        c->failure_due = 0;
        if (c->phase == PH_COLLECT) failure_send(c);
    }
    if (c->plan_due && ftrt__standby_acked(c, c->plan_seq)) {
        c->plan_due = 0;
        if (c->phase == PH_RESUMING && c->plan_delta) {
            /* (after the standby's acknowledgement; before the fan-out, as a member's own
             * phases start when its PLAN arrives: the report's phases never overlap) */
            c->plan_t_sent = ftrt__now();
            plan_out(c);
        }
    }
}

/* The current epoch's PLANs are kept until every member resumed (a rank that comes back after
 * its host agent was lost gets its own again). */
static void plans_forget(ftrt__coord *c)
{
    free(c->plan_delta);
    free(c->plan_full);
    c->plan_delta = c->plan_full = NULL;
    c->plan_delta_len = c->plan_full_len = 0;
}

void ftrt__epoch_resend_plan(ftrt__coord *c, int w)
{
    const ftrt__crank *r = &c->r[w];
    if (c->plan_due) return; /* it goes to every member once the standby acknowledged it */
    if (gets_full_plan(c, w) && c->plan_full) {
        c->plan_full->logical_rank = r->logical;
        ftrt__coord_send(c, w, FTRT__MSG_PLAN, c->plan_full, (uint32_t)c->plan_full_len);
    } else if (!gets_full_plan(c, w) && c->plan_delta) {
        ftrt__coord_send(c, w, FTRT__MSG_PLAN, c->plan_delta, (uint32_t)c->plan_delta_len);
    }
}

/* What the plan is built from and what it decided. Arrays of N entries (logical ranks). */
typedef struct plan_in {
    int64_t *steps, *own, *held, *ec_step; /* each member's REPORT */
    int32_t *held_of, *ec_n, *ec_k;
    int32_t *shard_src;          /* the memory plan's holder of each replaced rank's image */
    int *shard_only;             /* a survivor's own image holds its sharded regions only */
    int nshard_only;             /* a memory plan: those survivors (behind: replicated state) */
    int *survivor;               /* 0: a promoted spare */
    int sharded;                 /* a survivor registered sharded regions */
    int64_t most;                /* the most steps a survivor reported */
    /* the decision */
    int64_t resume, ckpt, mem_step;
    int source, miss;
    int erasure; /* the sharded state is in erasure groups (a survivor reported their layout) */
} plan_in;

static void plan_in_free(plan_in *in)
{
    free(in->steps);
    free(in->survivor);
    free(in->held_of);
    free(in->ec_n);
    free(in->shard_src);
    free(in->shard_only);
}

/* Fills in from the members' REPORTs. Returns 0 or -ENOMEM. */
static int plan_gather(ftrt__coord *c, plan_in *in)
{
    size_t n = (size_t)(c->N > 0 ? c->N : 1);
    in->steps = calloc(4 * n, sizeof *in->steps);
    in->survivor = calloc(n, sizeof *in->survivor);
    in->held_of = calloc(n, sizeof *in->held_of);
    in->ec_n = calloc(2 * n, sizeof *in->ec_n);
    in->shard_src = calloc(n, sizeof *in->shard_src);
    in->shard_only = calloc(n, sizeof *in->shard_only);
    if (!in->steps || !in->survivor || !in->held_of || !in->ec_n || !in->shard_src ||
        !in->shard_only)
        return -ENOMEM;
    in->own = in->steps + n;
    in->held = in->steps + 2 * n;
    in->ec_step = in->steps + 3 * n;
    in->ec_k = in->ec_n + n;
    for (int l = 0; l < c->N; l++) {
        const ftrt__crank *r = &c->r[c->members[l]];
        in->survivor[l] = !r->promoting;
        in->steps[l] = r->report_steps;
        in->own[l] = r->own_step;
        in->held[l] = r->held_step;
        in->held_of[l] = r->held_of;
        in->ec_step[l] = r->ec_step;
        in->ec_n[l] = r->ec_n;
        in->ec_k[l] = r->ec_k;
        in->erasure |= in->survivor[l] && r->ec_k > 0;
        in->shard_only[l] = in->survivor[l] && r->own_shard_only;
        if (in->survivor[l]) {
            in->sharded |= r->has_sharded;
            if (r->report_steps > in->most) in->most = r->report_steps;
        }
    }
    return 0;
}

/* A memory plan's source of replicated state: a survivor whose own image holds every region
 * (not shard-only; ftrt__replica_adopt), the most advanced such. The others, shard-only, are
 * the plan's survivors behind (their replicated regions from the peers): counted in
 * in->nshard_only. 0 when every survivor's image is shard-only (then no memory plan). */
static int full_image_source(const ftrt__coord *c, plan_in *in)
{
    int src = -1;
    in->nshard_only = 0;
    for (int l = 0; l < c->N; l++) {
        if (!in->survivor[l]) continue;
        if (in->shard_only[l]) in->nshard_only++;
        else if (src < 0 || in->steps[l] > in->steps[src]) src = l;
    }
    if (src < 0) return 0;
    in->source = src;
    return 1;
}

/* Sharded state from memory: the erasure groups when a survivor reported their layout, else
 * the partner replicas (plan.c). 1: a memory plan (in->mem_step, in->shard_src), 0: none
 * (in->miss set for erasure groups). */
static int memory_plan(const ftrt__coord *c, plan_in *in)
{
    if (!in->erasure)
        return ftrt__plan_replica(in->survivor, in->own, in->held, in->held_of, c->N,
                                  c->last_committed, &in->mem_step, in->shard_src);
    ftrt__ec_plan_in e = {.n = c->N, .survivor = in->survivor, .own_step = in->own,
                          .ec_step = in->ec_step, .ec_n = in->ec_n, .ec_k = in->ec_k};
    return ftrt__plan_erasure(&e, c->last_committed, &in->mem_step, in->shard_src, &in->miss);
}

/* Decides the resume step, the source and where sharded state comes from (plan.c). Returns 0
 * or the code to abort with. */
static int plan_decide(ftrt__coord *c, plan_in *in)
{
    int32_t *shard_src = in->shard_src;
    in->mem_step = -1;
    in->miss = FTRT__RMISS_NONE;
    for (int l = 0; l < c->N; l++) shard_src[l] = -1;
    int rc = ftrt__plan_compute(in->steps, in->survivor, c->N, in->sharded, c->last_committed,
                                &in->resume, &in->source, &in->ckpt);
    /* Sharded state: from the partner replicas in memory where they cover every replaced
     * rank at a step no older than the committed checkpoint, else from the checkpoint. */
    if (in->sharded && c->sdc_rollback < 0 && memory_plan(c, in) == 1 &&
        full_image_source(c, in)) {
        rc = 0;
        in->resume = in->mem_step;
        in->ckpt = -1;
    } else if (in->sharded) {
        in->mem_step = -1;
        in->nshard_only = 0;
        for (int l = 0; l < c->N; l++) shard_src[l] = -1;
        in->miss = c->sdc_rollback >= 0 ? FTRT__RMISS_SDC_ROLLBACK
                   : in->erasure       ? (in->miss ? in->miss : FTRT__RMISS_NO_COMMON_IMAGE)
                                       : ftrt__plan_replica_miss(in->survivor, in->own, in->held,
                                                                 in->held_of, c->N,
                                                                 c->last_committed);
        ftrt_log_info("epoch %d: %s not used (%s)", c->epoch,
                      in->erasure ? "erasure groups" : "partner replicas",
                      ftrt__replica_miss_name(in->miss));
    }
    if (rc) return rc;
    if (c->sdc_rollback >= 0) { /* silent data corruption: back to verified state (sdc_vote.c) */
        in->resume = in->ckpt = c->sdc_rollback;
        c->sdc_verified_below = c->sdc_rollback + 1; /* what every member reloads is verified */
        c->sdc_rollback = -1;
    }
    return 0;
}

/* The incidents this plan recovers: resume step, rework, epoch, where the state came from. */
static void plan_record(ftrt__coord *c, const plan_in *in)
{
    for (int i = 0; i < c->ninc; i++) {
        ftrt__incident *x = &c->inc[i];
        if (x->recovered || x->resume_step >= 0 || x->was_spare) continue;
        x->t_plan_wall = ftrt__wallclock();
        x->resume_step = in->resume;
        int64_t before = x->steps_at_failure > in->most ? x->steps_at_failure : in->most;
        x->rework_steps = before > in->resume ? before - in->resume : 0;
        x->epoch = c->epoch;
        x->state_from = in->ckpt >= 0       ? FTRT__FROM_CHECKPOINT
                        : in->mem_step >= 0 ? (in->erasure ? FTRT__FROM_ERASURE
                                                           : FTRT__FROM_REPLICA)
                                            : FTRT__FROM_PEERS;
        x->replica_miss = in->ckpt >= 0 ? in->miss : FTRT__RMISS_NONE;
    }
}

/* The PLAN for the survivors (logical_rank -1, each keeps its own): the replaced ranks with
 * their new world ranks and sharded-image sources, and how many survivors are behind the
 * resume step (a peers plan: each knows it is one from its own REPORT, base/proto.h), built by
 * ftrt__plan_msg_build (plan.c). The caller frees it; NULL without memory. *len receives its
 * size. */
static ftrt__plan_msg *plan_delta(ftrt__coord *c, const plan_in *in, size_t *len)
{
    ftrt__plan_msg head = {.resume_step = in->resume, .ckpt_step = in->ckpt,
                           .mem_step = in->mem_step, .epoch = c->epoch, .ntrainers = c->N,
                           .rework_until = in->most > in->resume ? in->most : in->resume,
                           .source = in->source}; /* the most advanced survivor: up to date in
                                                     every kind of plan */
    ftrt__plan_msg *m = NULL;
    if (ftrt__plan_msg_build(&head, in->survivor, in->steps, c->members, in->shard_src, &m, len))
        return NULL;
    if (in->mem_step >= 0) m->nbehind = in->nshard_only; /* (each knows it from its REPORT) */
    return m;
}

/* The same plan with the whole membership and the holder table (data rank -> logical rank),
 * for the promoted spares (which know neither) and, in an epoch a shrink or fold renumbered,
 * every member; its logical_rank is set per recipient (ftrt__epoch_resend_plan). NULL without
 * memory. */
static ftrt__plan_msg *plan_full(ftrt__coord *c, const ftrt__plan_msg *delta, size_t dlen,
                                 size_t *len)
{
    *len = dlen + ((size_t)c->N + (size_t)c->N0) * sizeof(int32_t);
    ftrt__plan_msg *m = malloc(*len);
    if (!m) return NULL;
    memcpy(m, delta, dlen);
    m->nmembers = c->N;
    m->ndata = c->N0;
    memcpy((char *)m + dlen, c->members, (size_t)c->N * sizeof(int32_t));
    memcpy((char *)m + dlen + (size_t)c->N * sizeof(int32_t), c->holder,
           (size_t)c->N0 * sizeof(int32_t));
    return m;
}

/* Sends the PLAN: the delta to every survivor (one multicast), the whole table to each
 * promoted spare. Returns 0 or -ENOMEM. */
static int plan_send(ftrt__coord *c, const plan_in *in)
{
    size_t dlen, flen = 0;
    ftrt__plan_msg *delta = plan_delta(c, in, &dlen);
    int whole = delta && (delta->nrepl || c->renumber_epoch == c->epoch);
    ftrt__plan_msg *full = whole ? plan_full(c, delta, dlen, &flen) : NULL;
    if (!delta || (whole && !full)) {
        free(delta);
        return -ENOMEM;
    }
    plans_forget(c);
    c->plan_delta = delta;
    c->plan_delta_len = dlen;
    c->plan_full = full;
    c->plan_full_len = flen;
    /* the standby acknowledges the plan before any member gets it (ftrt__epoch_release, once
     * the caller is in PH_RESUMING) */
    c->plan_seq = ftrt__standby_sync(c);
    c->plan_due = 1;
    return 0;
}

static void send_plan(ftrt__coord *c)
{
    double t_ready = ftrt__now();
    plan_in in = {0};
    if (plan_gather(c, &in)) {
        ftrt__job_abort(c, -ENOMEM, "out of memory building the recovery plan");
        goto out;
    }
    if (in.sharded && c->renumber_epoch == c->epoch) {
        ftrt__job_abort(c, FTRT_ENOSPARE,
                        c->a->cfg->no_spare == FTRT_NO_SPARE_FOLD
                            ? "a trainer failed, no hot spare is left, and FTRT_NO_SPARE=fold is "
                              "refused with sharded regions (the lost rank's shard would have "
                              "to be folded onto a survivor too: not built)"
                            : "a trainer failed, no hot spare is left, and FTRT_NO_SPARE=shrink "
                              "is refused with sharded regions (the lost rank's shard would "
                              "have no owner)");
        goto out;
    }
    int rc = plan_decide(c, &in);
    if (rc) {
        ftrt__job_abort(c, rc, rc == FTRT_ENOCKPT ? "sharded state needs a committed checkpoint "
                                                    "(or partner replicas in memory) and none "
                                                    "exists"
                                                  : "no survivor holds the state");
        goto out;
    }
    plan_record(c, &in);
    /* Resuming, with the plan's times, before plan_send's SYNC: a standby that takes over
     * from it goes on with this PLAN (resent to the members not resumed) and these MTTR
     * phases, never plans the epoch again (plan_t_sent is set again at the fan-out). */
    c->phase = PH_RESUMING;
    c->plan_t_ready = t_ready;
    c->plan_t_sent = ftrt__now();
    if (plan_send(c, &in)) {
        ftrt__job_abort(c, -ENOMEM, "out of memory building the recovery plan");
        goto out;
    }
    ftrt_log_info("epoch %d plan: resume at step %lld, state from logical rank %d%s", c->epoch,
                  (long long)in.resume, in.source,
                  in.ckpt >= 0       ? " (checkpoint)"
                  : in.mem_step >= 0 ? (in.erasure ? " (erasure groups in memory)"
                                                   : " (partner replicas in memory)")
                                     : "");
    c->status_dirty |= 2; /* membership: write now */
    ftrt__epoch_release(c);
out:
    plan_in_free(&in);
}

/* 1 while a member whose host agent was lost is within the grace: it came back on its own
 * connection, or has not yet, but its host may be going down process by process (a host whose
 * processes are killed one by one, or die at different moments); once the PLAN is out, its
 * death could only abort the recovery (the members build the new communicator with it), so the
 * plan waits for it to fail and join this epoch, or for the grace to end. A hot spare being
 * promoted counts too: the spare of a lost host's own (the only one left) is one. */
static int plan_held(const ftrt__coord *c)
{
    double now = ftrt__now();
    if (c->plan_test_until > now) return 1; /* FTRT_TEST_PLAN_DELAY_MS (failure_send) */
    if (c->plan_hold_until <= 0) return 0;
    if (now >= c->plan_hold_until) return 0;
    for (int l = 0; l < c->N; l++) {
        const ftrt__crank *r = &c->r[c->members[l]];
        if (r->suspect_until > now) return 1;
    }
    return 0;
}

void ftrt__epoch_check_reports(ftrt__coord *c)
{
    if (c->phase != PH_COLLECT) return;
    for (int l = 0; l < c->N; l++) {
        ftrt__crank *r = &c->r[c->members[l]];
        if (!r->promoting && r->reported_epoch != c->epoch) return;
    }
    int held = plan_held(c);
    if (c->reports_in_epoch != c->epoch) { /* (once per epoch: test harnesses wait for it) */
        c->reports_in_epoch = c->epoch;
        c->status_dirty |= 2;
        if (held && c->plan_test_until <= ftrt__now())
            ftrt_log_warn("epoch %d: every survivor reported; the PLAN waits up to %.0f ms for "
                          "a rank of a host whose agent was lost (the orphan grace)", c->epoch,
                          (c->plan_hold_until - ftrt__now()) * 1e3);
    }
    if (held) return;
    send_plan(c);
}

int ftrt__epoch_check_resumed(ftrt__coord *c)
{
    if (c->phase != PH_RESUMING) return 0;
    for (int l = 0; l < c->N; l++)
        if (c->r[c->members[l]].resumed_epoch != c->epoch) return 0;
    double now = ftrt__now();
    int last = c->members[0]; /* the member that resumed last: the end of the critical path */
    for (int l = 1; l < c->N; l++)
        if (c->r[c->members[l]].resumed_t > c->r[last].resumed_t) last = c->members[l];
    for (int i = 0; i < c->ninc; i++) {
        ftrt__incident *x = &c->inc[i];
        /* (a takeover is recovered when its ranks are back: takeover.c) */
        if (x->recovered || x->resume_step < 0 || x->coord_lost) continue;
        x->recovered = 1;
        x->t_resumed = now;
        x->t_ready = c->plan_t_ready;
        x->t_plan = c->plan_t_sent;
        x->phase = c->r[last].resumed;
        x->phase_w = last;
    }
    c->npromoting = 0;
    for (int l = 0; l < c->N; l++) {
        ftrt__crank *r = &c->r[c->members[l]];
        r->promoting = 0;
        r->waits = 0; /* members count collectives from the start of the epoch */
        r->last_change = now;
        r->win_t = 0;
    }
    c->phase = PH_RUNNING;
    c->status_dirty |= 2; /* membership: write now */
    plans_forget(c);
    ftrt_log_warn("epoch %d: every member is back in the training loop", c->epoch);
    return 1;
}
