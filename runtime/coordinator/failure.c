/*
 * failure.c - a rank declared failed (docs/detection-and-recovery.md "Failure detection"): the
 * incident with its detection and best known failure time, the check for a lost host, the
 * fence, and for a trainer the hot spare that takes its logical rank in a new epoch (or in the
 * epoch already announced, so that a lost host takes as many spares as it held trainers in one
 * epoch change).
 */
#include <stdlib.h>
#include <string.h>

#include "base/knobs.h"
#include "base/log.h"
#include "runtime/coordinator/coord.h"

/* Silent data corruption: what sdc_vote.c found (c->sdc_cur) goes into the incident. */
static void incident_sdc(ftrt__coord *c, ftrt__incident *i, int w)
{
    i->sdc_step = c->sdc_cur.sdc_step;
    i->sdc_agreed_step = c->sdc_cur.sdc_agreed_step;
    i->sdc_ckpt = c->sdc_cur.sdc_ckpt;
    i->sdc_majority = c->sdc_cur.sdc_majority;
    i->sdc_uncommitted = c->sdc_cur.sdc_uncommitted;
    i->t_last_heard = w > 0 && c->r[w].sdc_agreed_t > 0 ? c->r[w].sdc_agreed_t
                                                         : c->sdc_cur.t_last_heard;
}

ftrt__incident *ftrt__incident_add(ftrt__coord *c, int w, int kind)
{
    ftrt__incident *n = realloc(c->inc, (size_t)(c->ninc + 1) * sizeof *n);
    if (!n) return NULL;
    c->inc = n;
    ftrt__incident *i = &c->inc[c->ninc++];
    memset(i, 0, sizeof *i);
    i->world_rank = w; /* -1: silent data corruption with no rank named */
    i->logical_rank = w > 0 ? c->r[w].logical : -1;
    i->pid = w > 0 ? c->r[w].pid : -1;
    i->kind = kind;
    i->t_detect = ftrt__now();
    i->t_detect_wall = ftrt__wallclock();
    i->t_last_heard = w > 0 ? c->r[w].last_heard : i->t_detect;
    i->spare_world_rank = i->folded_onto = -1;
    i->resume_step = -1;
    i->sdc_step = i->sdc_agreed_step = i->sdc_ckpt = -1;
    if (kind == FK_SDC) incident_sdc(c, i, w);
    /* The best known failure time: the injection time when a fault injector logged one, the
     * detection itself for a connection loss (the kernel closes a dead process's sockets at
     * once; for a rank that did not come back after its host agent was lost, that loss), else the last message heard (refined for stalls by the caller); for silent data
     * corruption, the arrival of the rank's last fingerprint that agreed. */
    double inj = ftrt__incident_injected_at(c, i);
    double lost = w > 0 && c->r[w].lost_t > 0 ? c->r[w].lost_t : i->t_detect; /* its agent's */
    i->t_fail_wall = inj > 0 ? inj
                     : kind == FK_CONNECTION_LOST ? i->t_detect_wall - (i->t_detect - lost)
                                                  : i->t_detect_wall - (i->t_detect - i->t_last_heard);
    /* The slot's ledger counts the rank as down from its failure; a corrupted rank computed
     * (and was paid for) until it was fenced. */
    if (w > 0) c->r[w].t_fail_wall = kind == FK_SDC ? i->t_detect_wall : i->t_fail_wall;
    i->steps_at_failure = ftrt__steps_most(c); /* (kept up to date: rankidx.c) */
    ftrt__rank_named(c, w);
    return i;
}

/* The hot spare to promote for world rank w, failed: not the standby coordinator while
 * another is left; one on another host where the choice exists (a host that lost a rank may be
 * losing the rest), and among those one on a host that lost none (a failed rank an incident
 * names); ties go to the lowest world rank. -1 when no spare is left. O(spares): the spare list
 * and the hosts' counters are kept up to date (rankidx.c; with the other scans of the world a
 * failure's handling made, they took 0.6 to 2.2 ms of a FAILURE's delay at 16,384 ranks,
 * docs/benchmarks.md "Coordinator at 131,072 simulated ranks"). */
int ftrt__pick_spare(const ftrt__coord *c, int w)
{
    int best = -1, best_score = -1, h = c->r[w].ix_host;
    for (int x = ftrt__spare_first(c); x; x = ftrt__spare_next(c, x)) {
        int score = (c->r[x].ix_host != h) * 2 + !ftrt__host_has_failed(c, x) +
                    (x != c->sb_w) * 4; /* the standby coordinator: only when no other is left */
        if (score > best_score) {
            best = x;
            best_score = score;
        }
    }
    return best;
}

void ftrt__promote_spare(ftrt__coord *c, int l, int spare, int why, ftrt__incident *inc)
{
    if (spare == c->sb_w) ftrt__standby_dismiss(c, "it is the last hot spare, promoted");
    ftrt__member_set(c, l, spare, why);
    ftrt__rank_set_role(c, spare, FTRT__ROLE_TRAINER);
    c->r[spare].logical = l;
    c->r[spare].promoting = 1;
    c->npromoting++;
    if (inc) inc->spare_world_rank = spare;
}

/* After world rank w failed: when every rank on its host has now failed (and the host held
 * two or more, so that a process crash is not mistaken for a host), the host is lost: its
 * ranks' incidents are marked so, and the log says it once. O(incidents): the host's counters
 * are kept up to date (rankidx.c; the coordinator's host is never lost: it never fails). */
static void check_host_lost(ftrt__coord *c, int w)
{
    const char *h = c->r[w].host;
    int n = ftrt__host_all_failed(c, w);
    if (n < 2) return;
    int marked = 0;
    for (int i = 0; i < c->ninc; i++)
        if (c->inc[i].world_rank >= 0 && /* -1: silent data corruption, no rank named */
            !strcmp(c->r[c->inc[i].world_rank].host, h) && !c->inc[i].host_lost) {
            c->inc[i].host_lost = 1;
            marked++;
        }
    if (marked) ftrt_log_warn("host %s lost: all %d of its ranks failed", h, n);
}

/* Whether a trainer's failure can be recovered now; if not, the job ends (or is ending). */
static int recoverable(ftrt__coord *c, int w)
{
    if (c->phase == PH_ABORTING || c->phase == PH_DONE) return 0;
    if (ftrt__job_finishing(c)) {
        ftrt_log_warn("the job is finishing; no recovery for world rank %d", w);
        return 0;
    }
    /* (A promoted joined process lost now, too: its root's probe is gated, comm/join.c, but a
     * survivor that sees the next epoch before this PLAN skips it while the others wait for it
     * in the build, which nothing interrupts on Open MPI 4.1; mpi.joinwindow.) */
    if (c->phase == PH_RESUMING) {
        ftrt__job_abort(c, FTRT_EABORT, "a member failed while the recovery plan was being applied");
        return 0;
    }
    return 1;
}

/* What a silent data corruption vote can still decide once a shrink or fold leaves 2 or 1
 * trainers (ftrt__sdc_vote_kind), said once in the log. Kept here rather than in sdc_vote.c,
 * which depends on this file (ftrt__fail), so that the objects form no cycle. */
static void say_sdc_vote(const ftrt__coord *c)
{
    if (c->a->cfg->sdc_every <= 0 || c->N > 2) return;
    if (c->N == 2)
        ftrt_log_warn("silent data corruption: with 2 trainers a disagreement is detected but "
                      "no majority can name the corrupted one: it rolls every member back to "
                      "the newest verified checkpoint");
    else
        ftrt_log_warn("silent data corruption: with 1 trainer there is nothing to compare: no "
                      "check runs from now on");
}

int ftrt__no_spare_remove(ftrt__coord *c, int w, ftrt__incident *inc)
{
    int policy = c->a->cfg->no_spare;
    if ((policy != FTRT_NO_SPARE_SHRINK && policy != FTRT_NO_SPARE_FOLD) || c->N < 2) return 0;
    int l = c->r[w].logical;
    int to = policy == FTRT_NO_SPARE_FOLD ? ftrt__fold_target(c, l, c->a->cfg->fold_max) : -1;
    if (policy == FTRT_NO_SPARE_FOLD && to < 0) return -1;
    int tw = to >= 0 ? c->members[to] : -1;
    if (inc) inc->shrunk = policy == FTRT_NO_SPARE_SHRINK, inc->folded_onto = tw;
    ftrt__member_remove(c, l, to);
    if (to >= 0)
        ftrt_log_warn("epoch %d: no hot spare is left: logical rank %d's data folds onto world "
                      "rank %d (now logical rank %d); %d trainer(s), the ranks above it move "
                      "down (FTRT_NO_SPARE=fold)", c->renumber_epoch, l, tw, c->r[tw].logical,
                      c->N);
    else
        ftrt_log_warn("epoch %d: no hot spare is left: the job shrinks to %d trainer(s) without "
                      "logical rank %d (FTRT_NO_SPARE=shrink); the ranks above it move down",
                      c->renumber_epoch, c->N, l);
    say_sdc_vote(c);
    return 1;
}

/* Trainer w failed and no hot spare is left: shrink or fold (ftrt__no_spare_remove), else the
 * job ends. Returns 1 when the job goes on. */
static int no_spare(ftrt__coord *c, int w, ftrt__incident *inc)
{
    int rc = ftrt__no_spare_remove(c, w, inc);
    if (rc > 0) return 1;
    ftrt__job_abort(c, FTRT_ENOSPARE,
                    rc < 0      ? "a trainer failed, no hot spare is left, and no survivor has room "
                                  "for its data ranks (FTRT_FOLD_MAX)"
                    : c->N < 2 ? "the last trainer failed (no hot spare left)"
                               : "a trainer failed and no hot spare is left");
    return 0;
}

/* Trainer w failed: a hot spare takes its logical rank (or, with none left, the job shrinks or
 * folds: no_spare()), in the announced epoch or a new one. */
static void replace(ftrt__coord *c, int w, int kind, ftrt__incident *inc)
{
    ftrt__crank *r = &c->r[w];
    int spare = ftrt__pick_spare(c, w);
    if (spare < 0 && !no_spare(c, w, inc)) return;
    int l = r->logical;
    if (spare >= 0) ftrt__promote_spare(c, l, spare, FTRT__MEMBER_FAILURE, inc);
    if (spare < 0 && c->phase == PH_COLLECT) {
        if (c->epoch_soft) c->drain_urgent = 1;
        ftrt__epoch_check_reports(c);
        return;
    }
    if (spare < 0) {
        ftrt__epoch_open(c, !inc ? ftrt__wallclock()
                            : kind == FK_SDC ? inc->t_detect_wall : inc->t_fail_wall);
        return;
    }
    if (c->phase == PH_COLLECT) {
        /* The announced epoch's plan is not out yet: this failure joins it, so that a lost
         * host takes as many spares as it held trainers in one epoch (a drain's epoch that
         * waited for a step boundary is entered at once: drain.c). */
        if (c->epoch_soft) c->drain_urgent = 1;
        ftrt_log_warn("epoch %d: hot spare world rank %d (%s) also takes logical rank %d",
                      c->epoch, spare, c->r[spare].host, l);
        ftrt__epoch_check_reports(c);
        return;
    }
    ftrt_log_warn("epoch %d: hot spare world rank %d (%s) takes logical rank %d", c->epoch + 1,
                  spare, c->r[spare].host, l);
    /* (The trainers learn of silent data corruption at its detection: their ledger's detection
     * wait starts there.) */
    ftrt__epoch_open(c, !inc ? ftrt__wallclock()
                        : kind == FK_SDC ? inc->t_detect_wall : inc->t_fail_wall);
}

/* Hot spare w, promoted in this epoch to take a lost trainer's logical rank, failed before the
 * PLAN went out (a spare of the lost trainer's own host, whose loss the plan waited for): the
 * incident that promoted it takes another spare, or follows the no-spare policy, as if w had
 * never been picked. */
static void promoted_spare_lost(ftrt__coord *c, int w, int kind)
{
    ftrt__incident *p = NULL;
    for (int i = c->ninc - 1; i >= 0 && !p; i--)
        if (c->inc[i].spare_world_rank == w && c->inc[i].world_rank != w) p = &c->inc[i];
    if (p) p->spare_world_rank = -1;
    ftrt_log_warn("epoch %d: hot spare world rank %d failed before taking logical rank %d",
                  c->epoch, w, c->r[w].logical);
    replace(c, w, kind, p);
}

void ftrt__fail(ftrt__coord *c, int w, int kind)
{
    ftrt__crank *r = &c->r[w];
    if (r->role == FTRT__ROLE_FAILED && r->drained) { /* it left, as it was told (drain.c) */
        ftrt__coord_drop(c, w);
        return;
    }
    if (r->role == FTRT__ROLE_FAILED || r->role == FTRT__ROLE_COORD) return;
    int old_role = r->role, promoting = r->promoting;
    if (promoting) r->promoting = 0, c->npromoting--;
    ftrt__rank_set_role(c, w, FTRT__ROLE_FAILED);
    c->nfailed++;
    c->maybe_done = 1;
    if (kind != FK_CONNECTION_LOST) ftrt__job_fence(c, w); /* (before the drop: see there) */
    ftrt__coord_drop(c, w);
    c->status_dirty |= 2; /* membership: write now */
    if (c->phase == PH_INIT) {
        ftrt__job_abort(c, FTRT_EABORT, "a rank failed during initialization");
        return;
    }
    ftrt__incident *inc = ftrt__incident_add(c, w, kind);
    check_host_lost(c, w);
    if (old_role == FTRT__ROLE_SPARE || promoting) {
        if (inc) inc->was_spare = 1;
        ftrt_log_warn("hot spare world rank %d failed (%s) and leaves the pool; %d spare(s) left",
                      w, ftrt__failure_kind_name(kind), ftrt__live_spares(c));
        if (promoting && recoverable(c, w)) promoted_spare_lost(c, w, kind);
        return;
    }
    /* A stalled rank kept sending heartbeats: what is known is when it last made progress. */
    if (inc && kind == FK_PROGRESS_STALL) {
        inc->t_last_heard = r->last_change;
        inc->t_fail_wall = r->t_fail_wall = inc->t_detect_wall - (inc->t_detect - r->last_change);
    }
    ftrt_log_warn("trainer logical rank %d (world rank %d, pid %d) failed: %s", r->logical, w,
                  r->pid, ftrt__failure_kind_name(kind));
    if (recoverable(c, w)) replace(c, w, kind, inc);
}

/* ---- host agents ------------------------------------------------------------------------- */

/* Seconds an orphan (a rank whose host agent was lost) has to come back on its own connection:
 * it sees its agent's socket close at once and reconnects in milliseconds; a rank that does not
 * died with the agent (a lost host). Short, so that a lost host is still detected within its
 * bound (docs/testing.md "Host faults"). */
static double orphan_grace(const ftrt__coord *c)
{
    if (ftrt__knobs.orphan_grace_ms > 0) return ftrt__knobs.orphan_grace_ms / 1000.0; /* test */
    double half = c->a->cfg->heartbeat_timeout_ms / 2000.0;
    return half < 0.25 ? half : 0.25;
}

void ftrt__host_suspect(ftrt__coord *c, int w, double until)
{
    if (until <= 0) until = ftrt__now() + orphan_grace(c);
    c->r[w].suspect_until = until;
    if (until > c->plan_hold_until) c->plan_hold_until = until;
}

/* World rank w, alive as far as is known, lost its way to the coordinator (its host agent):
 * it may come back on its own connection until `until`, and the plan waits for it (epoch.c)
 * back or not. */
static void orphan(ftrt__coord *c, int w, int kind, double until)
{
    ftrt__crank *r = &c->r[w];
    ftrt__host_suspect(c, w, until);
    r->orphan_until = until;
    r->lost_t = until - orphan_grace(c);
    r->orphan_kind = kind;
    c->norphans++;
}

void ftrt__move_cancel(ftrt__coord *c, int w, int kind)
{
    ftrt__crank *r = &c->r[w];
    if (r->move_to < 0) return;
    if (!r->move_sent) { /* it never left its own connection: it stays there */
        c->nmoving--;
        r->move_to = -1;
        ftrt__tx_free(&r->held);
        return;
    }
    /* It may have taken MOVE and be sending through that agent only: its own connection is
     * closed, and it comes back on a new one (agent.c, a move's loss) as after an agent's loss. */
    ftrt_log_warn("world rank %d (%s) lost the host agent it was moving to; it may come back on "
                  "its own connection", w, r->host);
    ftrt__coord_drop(c, w);
    if (c->phase != PH_ABORTING && c->phase != PH_DONE && !r->said_bye)
        orphan(c, w, kind, ftrt__now() + orphan_grace(c));
}

void ftrt__host_lost(ftrt__coord *c, int h, int kind)
{
    ftrt__hlink *l = &c->hl[h];
    if (l->fd < 0) return;
    int aborting = c->phase == PH_ABORTING || c->phase == PH_DONE;
    ftrt__host_drop(c, h);
    ftrt__relay_link_lost(c, h); /* (its group's hosts fall back to direct fan-outs) */
    if (!aborting && l->nranks > 1)
        ftrt_log_warn("host agent of %s (in world rank %d) lost: %s; %d rank(s) of its host may "
                      "come back on their own connection", l->host, l->agent_w,
                      ftrt__failure_kind_name(kind), l->nranks - 1);
    else if (!aborting) /* (the others drained, or gone before it) */
        ftrt_log_warn("host agent of %s (in world rank %d) lost: %s", l->host, l->agent_w,
                      ftrt__failure_kind_name(kind));
    double until = ftrt__now() + orphan_grace(c);
    int agent = 0;
    for (int w = 1; w < c->Wused; w++) {
        ftrt__crank *r = &c->r[w];
        if (r->move_to == h) ftrt__move_cancel(c, w, kind);
        if (r->link != h) continue;
        if (r->said_bye || aborting || r->role == FTRT__ROLE_FAILED) {
            ftrt__coord_drop(c, w);
        } else if (w == l->agent_w) {
            agent = w; /* failed below, once the others are suspects */
        } else {
            l->nranks--;
            r->link = -1;
            orphan(c, w, kind, until);
        }
    }
    if (agent) ftrt__fail(c, agent, kind); /* the process the agent lived in */
}

void ftrt__orphans_expire(ftrt__coord *c, double now)
{
    for (int w = 1; w < c->Wused && c->norphans > 0; w++) {
        ftrt__crank *r = &c->r[w];
        if (r->orphan_until <= 0 || now < r->orphan_until) continue;
        int kind = r->orphan_kind, coord = r->orphan_coord;
        ftrt__coord_drop(c, w); /* (no longer an orphan) */
        if (c->phase == PH_ABORTING || c->phase == PH_DONE || r->said_bye) continue;
        ftrt_log_warn("world rank %d (%s) did not come back after %s", w, r->host,
                      coord ? "the coordinator was lost (it was lost with it)"
                            : "its host agent was lost");
        ftrt__fail(c, w, kind);
    }
}
