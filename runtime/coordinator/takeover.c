/*
 * takeover.c - a standby coordinator taking over (docs/detection-and-recovery.md "Standby
 * coordinator"): the state from its newest SYNC, the next term claimed in the term file, the old
 * coordinator recorded as failed with an incident of its own (the takeover: MTTD from the fault
 * log or its last message, MTTR until every rank is back), and every rank expected back on
 * the standby's listener within the heartbeat timeout. A rank that comes back is caught up
 * (ftrt__rank_rejoined) and goes on in the same epoch: the training communicator is untouched;
 * one that does not (it was lost with the coordinator, e.g. on the coordinator's host) is
 * declared failed when its grace ends and, a trainer, replaced through the usual epoch change.
 * On three hosts or more the term is claimed (the term file) only once a rank of a third host
 * is back, so that a standby cut off with its own host gives up instead of deposing the
 * coordinator; nothing is decided or written before.
 */
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "runtime/coordinator/coord.h"

/* The takeover's incident: world rank `old_w` (the old coordinator: 0, or a standby that took
 * over before), detected now by EOF or silence. */
static void takeover_incident(ftrt__coord *c, const ftrt__takeover_args *t, int old_w)
{
    ftrt__crank *old = &c->r[old_w];
    int kind = t->by_silence ? FK_HEARTBEAT_TIMEOUT : FK_CONNECTION_LOST;
    int64_t most = ftrt__steps_most(c);
    ftrt__incident *x = ftrt__incident_add(c, old_w, kind);
    if (!x) return;
    x->pid = old->pid;
    x->logical_rank = -1;
    x->coord_lost = 1;
    x->epoch = c->epoch;
    x->t_last_heard = t->last_heard > 0 ? t->last_heard : x->t_detect;
    double inj = ftrt__incident_injected_at(c, x);
    x->t_fail_wall = inj > 0 ? inj
                     : kind == FK_CONNECTION_LOST ? x->t_detect_wall
                                                  : x->t_detect_wall - (x->t_detect - x->t_last_heard);
    x->resume_step = most; /* in place: nothing is redone (a plan does not claim it) */
    x->steps_at_failure = most;
    c->takeover_inc = c->ninc - 1;
}

/* Every rank but this one is expected back within the heartbeat timeout (they detect the
 * coordinator's loss as the standby does, by EOF or the same silence). */
static void expect_ranks(ftrt__coord *c, double now)
{
    double grace = c->a->cfg->heartbeat_timeout_ms / 1000.0;
    for (int w = 1; w < c->Wused; w++) {
        ftrt__crank *r = &c->r[w];
        if (w == c->self || r->role == FTRT__ROLE_FAILED) continue;
        r->hello = 1;
        r->orphan_until = now + grace;
        r->orphan_kind = FK_CONNECTION_LOST;
        r->orphan_coord = 1;
        r->lost_t = now;
        r->last_change = now;
        c->norphans++;
    }
    c->nhello = c->Wused - 1;
    c->nreports = c->nresumed = c->npromoting = 0;
    for (int l = 0; l < c->N; l++) {
        const ftrt__crank *r = &c->r[c->members[l]];
        c->npromoting += r->promoting;
        c->nreports += !r->promoting && r->reported_epoch == c->epoch;
        c->nresumed += r->resumed_epoch == c->epoch;
    }
}

/* 1 when a rank expected back runs on a third host (neither this one nor the old
 * coordinator's): then one of them must come back before the term is claimed. */
static int third_host_expected(const ftrt__coord *c, int old_w)
{
    for (int w = 1; w < c->Wused; w++) {
        const ftrt__crank *r = &c->r[w];
        if (w == c->self || r->role == FTRT__ROLE_FAILED || r->orphan_until <= 0) continue;
        if (strcmp(r->host, c->a->host) && strcmp(r->host, c->r[old_w].host)) return 1;
    }
    return 0;
}

static void claim(ftrt__coord *c)
{
    c->claim_pending = 0;
    int rc = ftrt__standby_claim(c);
    if (rc) ftrt_log_error("cannot write the term file in %s (%s): an old coordinator that "
                           "comes back is not fenced", c->a->cfg->ckpt_dir, ftrt_strerror(rc));
    ftrt__commits_release(c, 0); /* the commits that waited for the claim */
}

void ftrt__takeover_reached(ftrt__coord *c, int w)
{
    if (!c->claim_pending || !strcmp(c->r[w].host, c->a->host) ||
        !strcmp(c->r[w].host, c->r[c->takeover_old].host))
        return;
    ftrt_log_info("world rank %d (%s) reached this coordinator: the term %d is claimed", w,
                  c->r[w].host, c->term);
    claim(c);
}

int ftrt__takeover_suspect(const ftrt__coord *c, int w)
{
    const char *host = c->r[w].host;
    return !strcmp(host, c->r[c->takeover_old].host) && strcmp(host, c->a->host);
}

int ftrt__takeover_cut_off(ftrt__coord *c, double now)
{
    if (!c->claim_pending || now < c->claim_deadline) return 0;
    ftrt_log_error("no rank of another host than %s and %s came back to this standby "
                   "coordinator within %.0f ms: it is the side cut off, and gives up without "
                   "claiming the term", c->a->host, c->r[c->takeover_old].host,
                   0.9 * c->a->cfg->heartbeat_timeout_ms);
    c->deposed = 1;
    return 1;
}

int ftrt__takeover_begin(ftrt__coord *c, const ftrt__takeover_args *t)
{
    int rc = ftrt__standby_restore(c, t->sync, t->sync_len);
    if (rc) return rc;
    ftrt__crank *me = &c->r[t->self];
    if (me->role != FTRT__ROLE_SPARE) return FTRT_EPROTO; /* promoted since: not the standby */
    int old_w = c->self;
    c->self = t->self;
    ftrt__rank_set_role(c, t->self, FTRT__ROLE_COORD);
    me->hello = 1;
    me->pid = (int)getpid();
    ftrt__rank_set_host(c, t->self, c->a->host);
    /* Its own timeline as a spare: its process holds it (the SYNC has its totals only) */
    if (t->own_tl && ftrt__ledger_take(c, t->self, t->own_tl, t->own_tl_len))
        ftrt_log_warn("standby coordinator: its own timeline could not be taken; the report "
                      "rebuilds it from its totals");
    ftrt__rank_set_role(c, old_w, FTRT__ROLE_FAILED);
    c->r[old_w].hello = 1;
    c->nfailed++;
    c->takeover_old = old_w;
    takeover_incident(c, t, old_w);
    double now = ftrt__now();
    expect_ranks(c, now);
    /* A standby whose own host was cut off loses the coordinator too: it claims the term
     * (which deposes the coordinator) only once a rank of a third host reaches it, where there
     * is one (on two hosts, or one, both sides look the same: at once). */
    if (third_host_expected(c, old_w)) {
        c->claim_pending = 1;
        c->claim_deadline = now + 0.9 * c->a->cfg->heartbeat_timeout_ms / 1000.0;
    } else {
        claim(c);
    }
    c->maybe_done = 1;
    c->status_dirty |= 2;
    ftrt_log_warn("standby world rank %d took over as the coordinator (term %d, epoch %d%s, "
                  "%s): %d rank(s) expected back within %d ms", c->self, c->term, c->epoch,
                  c->phase == PH_COLLECT    ? ", its recovery in flight: REPORTs awaited"
                  : c->phase == PH_RESUMING ? ", its recovery in flight: PLAN out, RESUMEDs awaited"
                                            : "",
                  t->by_silence ? "the coordinator fell silent" : "the coordinator's connection "
                  "closed", c->norphans, c->a->cfg->heartbeat_timeout_ms);
    return 0;
}

void ftrt__takeover_check(ftrt__coord *c)
{
    if (c->takeover_inc < 0 || c->norphans > 0) return;
    ftrt__incident *x = &c->inc[c->takeover_inc];
    c->takeover_inc = -1;
    if (x->recovered) return;
    x->recovered = 1;
    /* MTTR: until the last rank that came back (those lost with the coordinator are failures
     * of their own, detected when their grace ended, and replaced through an epoch change) */
    double now = ftrt__now(), back = c->takeover_back_t;
    x->t_resumed = back > x->t_detect && back < now ? back : now;
    c->status_dirty |= 2;
    ftrt_log_warn("takeover complete: every surviving rank is back with coordinator world rank "
                  "%d (%.1f ms after the detection)", c->self, (x->t_resumed - x->t_detect) * 1e3);
}
