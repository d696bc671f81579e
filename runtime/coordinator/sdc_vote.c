/*
 * sdc_vote.c - silent data corruption (docs/detection-and-recovery.md "Silent data
 * corruption"): the coordinator keeps each member's last fingerprints (FINGERPRINT messages),
 * compares a step once every member of the epoch sent it (the verdict is plan.c's
 * ftrt__sdc_judge), and acts on a disagreement: a majority names the bad replicas, which are
 * fenced and replaced; without a majority every member rolls back. Either way the checkpoints
 * that cannot be trusted are un-committed first and the plan reloads a verified one.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "checkpoint/commit.h"
#include "runtime/coordinator/coord.h"

/* World rank w's fingerprint of `step` in the current epoch, or NULL. */
static const ftrt__sdc_fp *sdc_find(const ftrt__coord *c, int w, int64_t step)
{
    const ftrt__crank *r = &c->r[w];
    for (int k = 0; k < FTRT__SDC_KEEP; k++)
        if (r->sdc[k].step == step && r->sdc[k].epoch == c->epoch) return &r->sdc[k];
    return NULL;
}

/* Un-commits the checkpoints that cannot be trusted and returns the newest committed step
 * left, which holds verified state, or -1 when none is left; -2 when the un-commit failed
 * (logged). A checkpoint is trusted when its step is below the last step at which every
 * replica's fingerprint agreed (sdc_verified_below): the snapshot of step S is copied after
 * step S's fingerprint was taken, so only a later agreement proves it clean; one taken since
 * may hold the corruption (in the bad rank's slice of a replicated region). */
static int64_t sdc_distrust(ftrt__coord *c)
{
    int64_t latest = -1;
    ftrt__commits_drain(c); /* no commit may run while checkpoints are un-committed */
    int n = ftrt__ckpt_uncommit_from(c->a->cfg->ckpt_dir, c->sdc_verified_below, &latest);
    if (n < 0) return -2;
    c->sdc_uncommitted = n;
    c->last_committed = latest;
    c->status_dirty |= 1;
    return latest;
}

/* Fills sdc_cur, what ftrt__incident_add() records of the corruption found at `step`. */
static void sdc_describe(ftrt__coord *c, int64_t step, int64_t ckpt, int majority)
{
    memset(&c->sdc_cur, 0, sizeof c->sdc_cur);
    c->sdc_cur.sdc_step = step;
    c->sdc_cur.sdc_agreed_step = c->sdc_agreed_step;
    c->sdc_cur.sdc_ckpt = ckpt;
    c->sdc_cur.sdc_majority = majority;
    c->sdc_cur.sdc_uncommitted = c->sdc_uncommitted;
    c->sdc_cur.t_last_heard = c->sdc_agreed_t > 0 ? c->sdc_agreed_t : c->t_start;
}

/* Into c->s.i the world ranks of the members with bad[l] = 1 (returns how many), and into
 * who[cap] their names for the log. */
static int sdc_bad_ranks(ftrt__coord *c, const unsigned char *bad, char *who, size_t cap)
{
    int nbad = 0;
    size_t used = 0;
    who[0] = 0;
    for (int l = 0; l < c->N; l++)
        if (bad[l]) {
            c->s.i[nbad++] = c->members[l];
            if (used < cap)
                used += (size_t)snprintf(who + used, cap - used, "%slogical rank %d (world rank "
                                         "%d)", nbad > 1 ? ", " : "", l, c->members[l]);
        }
    return nbad;
}

/* A majority of the replicas agreed at `step` and the members with bad[l] = 1 did not: each is
 * declared failed (FK_SDC), fenced and replaced by a spare through ftrt__fail(). The state every
 * member continues from is the newest verified checkpoint, reloaded by all: the majority's
 * memory is not clean any more, since the corrupted rank's gradients went into the average of
 * every step since the corruption. Only when no verified checkpoint is left does the majority's
 * state in memory go on (the usual state transfer), and the log says that results then differ
 * from a fault-free run. While the job is finishing nothing can be recovered: the corruption is
 * recorded and the job fails with FTRT_ECORRUPT. */
static void sdc_majority(ftrt__coord *c, int64_t step, const unsigned char *bad)
{
    char who[512];
    int nbad = sdc_bad_ranks(c, bad, who, sizeof who);
    const int *wbad = c->s.i;
    ftrt_log_error("silent data corruption at step %lld: %s disagree%s with the majority of %d "
                   "replicas (last agreement at step %lld)", (long long)step, who,
                   nbad > 1 ? "" : "s", c->N, (long long)c->sdc_agreed_step);
    int finishing = ftrt__job_finishing(c);
    c->sdc_uncommitted = 0;
    int64_t ck = finishing ? -1 : sdc_distrust(c);
    sdc_describe(c, step, ck < 0 ? -1 : ck, 1);
    if (ck == -2 || finishing) {
        for (int i = 0; i < nbad; i++) ftrt__incident_add(c, wbad[i], FK_SDC);
        if (finishing) {
            c->sdc_unresolved = 1;
            ftrt_log_error("the job is finishing: nothing can be recovered; it ends as failed "
                           "(FTRT_ECORRUPT)");
        } else {
            ftrt__job_abort(c, FTRT_ECORRUPT, "silent data corruption, and the checkpoints taken "
                                              "since the last agreement cannot be un-committed");
        }
        return;
    }
    if (ck >= 0)
        ftrt_log_warn("silent data corruption: fencing and replacing %s; every member reloads "
                      "checkpoint step %lld (the newest taken before the last agreement)", who,
                      (long long)ck);
    else
        ftrt_log_warn("silent data corruption: fencing and replacing %s; no verified checkpoint "
                      "is left (FTRT_CKPT_KEEP, checkpoint interval vs FTRT_SDC_EVERY), so the "
                      "majority's state in memory goes on: it took in the corrupted rank's "
                      "gradients, and results will differ from a fault-free run", who);
    c->sdc_rollback = ck;
    for (int i = 0; i < nbad; i++) ftrt__fail(c, wbad[i], FK_SDC);
}

/* The replicas disagreed at `step` and no value holds a majority (two replicas, a 2-2 split):
 * no rank can be blamed, so none is fenced. Every member rolls back to the newest verified
 * checkpoint in a new epoch without replacement (FAILURE to all, REPORT, PLAN reloading it);
 * with none left the job fails with FTRT_ECORRUPT. The incident names world rank -1. */
static void sdc_split(ftrt__coord *c, int64_t step)
{
    ftrt_log_error("silent data corruption at step %lld: the %d replicas disagree and no "
                   "majority names a bad one (last agreement at step %lld)", (long long)step,
                   c->N, (long long)c->sdc_agreed_step);
    int finishing = ftrt__job_finishing(c);
    c->sdc_uncommitted = 0;
    int64_t ck = finishing ? -1 : sdc_distrust(c);
    sdc_describe(c, step, ck < 0 ? -1 : ck, 0);
    ftrt__incident *inc = ftrt__incident_add(c, -1, FK_SDC);
    if (finishing) {
        c->sdc_unresolved = 1;
        ftrt_log_error("the job is finishing: nothing can be recovered; it ends as failed "
                       "(FTRT_ECORRUPT)");
        return;
    }
    if (ck < 0) {
        ftrt__job_abort(c, FTRT_ECORRUPT, ck == -2 ? "silent data corruption, and the checkpoints "
                                                     "taken since the last agreement cannot be "
                                                     "un-committed"
                                                   : "silent data corruption with no majority, "
                                                     "and no verified checkpoint to roll back to");
        return;
    }
    ftrt_log_warn("epoch %d: every member rolls back to checkpoint step %lld (the newest taken "
                  "before the last agreement); no rank is fenced", c->epoch + 1, (long long)ck);
    c->sdc_rollback = ck;
    ftrt__epoch_open(c, inc ? inc->t_detect_wall : ftrt__wallclock());
}

/* Compares the members' fingerprints of `step` once every member of the epoch sent one (and
 * the job runs; each step once per epoch). */
static void sdc_try(ftrt__coord *c, int64_t step)
{
    if (c->phase != PH_RUNNING || c->N < 2) return;
    if (c->sdc_judged_epoch == c->epoch && step <= c->sdc_judged_step) return;
    uint64_t *fp = c->s.u64;
    unsigned char *bad = c->s.b;
    double first = 0;
    for (int l = 0; l < c->N; l++) {
        const ftrt__sdc_fp *f = sdc_find(c, c->members[l], step);
        if (!f) return;
        fp[l] = f->fp;
        if (first == 0 || f->t < first) first = f->t;
    }
    c->sdc_judged_epoch = c->epoch;
    c->sdc_judged_step = step;
    c->sdc_checks++;
    int v = ftrt__sdc_judge(fp, c->N, bad);
    if (v == FTRT__SDC_AGREE) {
        c->sdc_agreed_step = step;
        c->sdc_agreed_t = first;
        if (step > c->sdc_verified_below) c->sdc_verified_below = step;
        for (int l = 0; l < c->N; l++)
            c->r[c->members[l]].sdc_agreed_t = sdc_find(c, c->members[l], step)->t;
    } else if (v == FTRT__SDC_MAJORITY) {
        sdc_majority(c, step, bad);
    } else if (v == FTRT__SDC_SPLIT) {
        sdc_split(c, step);
    }
}

void ftrt__sdc_vote_all(ftrt__coord *c)
{
    if (c->N < 1) return;
    const ftrt__crank *r0 = &c->r[c->members[0]];
    int64_t done = -1;
    for (;;) { /* ascending over logical rank 0's fingerprints of this epoch */
        int64_t next = -1;
        for (int k = 0; k < FTRT__SDC_KEEP; k++)
            if (r0->sdc[k].epoch == c->epoch && r0->sdc[k].step > done &&
                (next < 0 || r0->sdc[k].step < next))
                next = r0->sdc[k].step;
        if (next <= 0 || c->phase != PH_RUNNING) return;
        sdc_try(c, next);
        done = next;
    }
}

/* Which counting slot ftrt__sdc_vote_take() reuses first: an empty one or one of another
 * epoch, then the oldest step. */
static int64_t sdc_reuse_rank(const ftrt__sdc_count *x, int epoch)
{
    return x->count == 0 || x->epoch != epoch ? INT64_MIN : x->step;
}

/* (Kept for the current epoch's members only: a fenced rank's or an older epoch's are
 * stale. A repeat of a step this rank's fingerprint is kept for, which a rank sends again after
 * losing its host agent (agent.c, reconnect), is ignored: its vote counts once.) */
void ftrt__sdc_vote_take(ftrt__coord *c, int w, const ftrt__fingerprint_msg *m)
{
    ftrt__crank *r = &c->r[w];
    if (m->step <= 0 || m->epoch != c->epoch || r->role != FTRT__ROLE_TRAINER ||
        r->logical < 0 || r->logical >= c->N || c->members[r->logical] != w)
        return;
    if (sdc_find(c, w, m->step)) return; /* (a repeat) */
    if (isfinite(m->seconds) && m->seconds >= 0) c->sdc_fp_s += m->seconds;
    c->sdc_nfp++;
    r->sdc[r->sdc_n++ % FTRT__SDC_KEEP] =
        (ftrt__sdc_fp){.step = m->step, .fp = m->fp, .epoch = m->epoch, .t = ftrt__now()};
    /* Count the step's fingerprints: the O(N) comparison runs once, when the last member's
     * arrives. A slot of another epoch (or an empty one) is reused first, else the oldest step. */
    ftrt__sdc_count *slot = NULL, *reuse = &c->sdc_count[0];
    for (int k = 0; k < 2 * FTRT__SDC_KEEP && !slot; k++) {
        ftrt__sdc_count *x = &c->sdc_count[k];
        if (x->count > 0 && x->epoch == m->epoch && x->step == m->step) slot = x;
        else if (sdc_reuse_rank(x, m->epoch) < sdc_reuse_rank(reuse, m->epoch)) reuse = x;
    }
    if (!slot) {
        slot = reuse;
        *slot = (ftrt__sdc_count){.step = m->step, .epoch = m->epoch, .count = 0};
    }
    slot->count++;
    if (slot->count >= c->N) sdc_try(c, m->step);
}

const char *ftrt__sdc_vote_kind(const ftrt__coord *c)
{
    if (c->a->cfg->sdc_every <= 0 || c->N < 2) return "none";
    return c->N == 2 ? "detect_only" : "majority";
}
