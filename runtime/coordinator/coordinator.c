/*
 * coordinator.c - world rank 0's loop: membership, failure detection, recovery plans,
 * checkpoint commits and the end-of-job report, run as open / iterate / periodic / close.
 *
 * One thread, one epoll loop over every rank's TCP connection, the listener and the commit
 * thread's eventfd (no MPI inside the loop). A rank is declared failed on connection EOF/reset
 * (the process died) or when nothing arrived from it for heartbeat_timeout_ms (frozen process
 * or lost host); a failed rank that may still be alive is fenced with SIGKILL (on this host by
 * this process, on another by the host agent that serves it: job.c) so it can never rejoin a
 * communicator or a checkpoint. A trainer failure starts an epoch change
 * (epoch.c); failures before the PLAN is sent are folded into a newer epoch, later ones abort.
 *
 * At scale (docs/detection-and-recovery.md "Control plane", bench/coord_load.c) the work per
 * message is O(1) (conn.c: epoll, the silence watch, spread PINGs); REPORTs, RESUMEDs and
 * fingerprints are counted and their O(N) checks run once, when the last one arrives;
 * checkpoint commits run on a thread of their own (committer.c); the periodic O(N) work (the
 * progress detector, stragglers) runs at most 10 times a second, and a status file that costs
 * more than 2.5 ms to write is rewritten at most once per 20 times its cost.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "base/log.h"
#include "checkpoint/retention.h"
#include "checkpoint/steps.h"
#include "runtime/coordinator/committer.h"
#include "runtime/coordinator/coord.h"

enum { MAXEV = 512 };
/* At the job's end the send queues are drained while bytes go out, for this many heartbeat
 * timeouts at most (a peer reading one byte a second must not hold the exit for ever). */
enum { DRAIN_TIMEOUTS = 10 };

/* The loop's own timers (monotonic seconds). */
typedef struct loop_timers {
    double init_deadline, next_periodic, last_progress_check;
} loop_timers;

/* Addresses in the space-separated list a (each rank may connect once per address). */
static int count_addrs(const char *a)
{
    int n = 0;
    for (const char *q = a; *q;) {
        size_t l = strcspn(q, " ");
        n += l > 0;
        q += l;
        q += strspn(q, " ");
    }
    return n;
}

static int scratch_alloc(ftrt__coord_scratch *s, size_t n)
{
    s->i = calloc(n, sizeof *s->i);
    s->d1 = calloc(n, sizeof *s->d1);
    s->d2 = calloc(n, sizeof *s->d2);
    s->d3 = calloc(n, sizeof *s->d3);
    s->u64 = calloc(n, sizeof *s->u64);
    s->b = calloc(n, 1);
    s->fan = calloc(n, sizeof *s->fan);
    return s->i && s->d1 && s->d2 && s->d3 && s->u64 && s->b && s->fan ? 0 : -ENOMEM;
}

static void scratch_free(ftrt__coord_scratch *s)
{
    free(s->i);
    free(s->d1);
    free(s->d2);
    free(s->d3);
    free(s->u64);
    free(s->b);
    free(s->fan);
}

/* The commit thread, with its eventfd in the loop; without it commits run inside the loop. */
static void committer_open(ftrt__coord *c)
{
    const ftrt_config *cfg = c->a->cfg;
    int crc = ftrt__committer_start(&c->committer, cfg->ckpt_dir, cfg->ckpt_keep);
    if (crc) {
        ftrt_log_warn("cannot start the commit thread (%s): checkpoints are committed inside the "
                      "coordinator's loop", strerror(-crc));
        c->committer = NULL;
        return;
    }
    struct epoll_event cev = {.events = EPOLLIN, .data.u64 = FTRT__KEY(FTRT__KEY_COMMIT, 0)};
    epoll_ctl(c->ep, EPOLL_CTL_ADD, ftrt__committer_fd(c->committer), &cev);
}

/* The rank table and the host agents' table, with the multicast's scratch. Returns 0 or
 * -ENOMEM. */
static int tables_alloc(ftrt__coord *c)
{
    size_t w = (size_t)c->W;
    c->r = calloc(w, sizeof *c->r);
    c->members = calloc((size_t)(c->N > 0 ? c->N : 1), sizeof *c->members);
    c->holder = calloc((size_t)(c->N > 0 ? c->N : 1), sizeof *c->holder);
    c->hl = calloc(w, sizeof *c->hl);
    c->mc_list = calloc(4 * w, sizeof *c->mc_list);
    c->mc_grp = calloc(w, sizeof *c->mc_grp);
    c->relay_of = calloc(w, sizeof *c->relay_of);
    c->mc_cnt = calloc(w, sizeof *c->mc_cnt);
    c->mc_off = calloc(w, sizeof *c->mc_off);
    for (int x = 0; c->r && x < c->W; x++) {
        c->r[x].fd = -1;
        c->r[x].link = -1;
        c->r[x].move_to = -1;
        c->r[x].logical = -1;
        c->r[x].resumed_epoch = -1;
        c->r[x].reported_epoch = -1;
    }
    c->last_commit.step = -1;
    ftrt__relay_init(c);
    int ixrc = c->r ? ftrt__rankidx_alloc(c) : -ENOMEM;
    return !ixrc && c->r && c->members && c->holder && c->hl && c->mc_list && c->mc_cnt && c->mc_off && c->mc_grp
                   && c->relay_of
               ? 0
               : -ENOMEM;
}

/* Everything the loop needs: the tables, the scratch arrays, epoll, the listener, the newest
 * committed step, the commit thread. Returns 0 or -errno (everything freed by coord_close,
 * listen_fd included). */
static int coord_open(ftrt__coord *c, int listen_fd, uint64_t secret)
{
    const ftrt__coord_args *a = c->a;
    int rc = tables_alloc(c);
    c->secret = secret;
    c->ep = epoll_create1(EPOLL_CLOEXEC);
    if (c->ep < 0) {
        int e = -errno;
        close(listen_fd);
        return e;
    }
    int lrc = ftrt__listener_open(c, listen_fd, count_addrs(a->addr), secret);
    if (lrc) return lrc;
    if (rc || scratch_alloc(&c->s, (size_t)c->W)) return -ENOMEM;
    ftrt__rank_set_role(c, 0, FTRT__ROLE_COORD);
    c->r[0].hello = 1;
    c->r[0].pid = (int)getpid();
    ftrt__rank_set_host(c, 0, a->host);
    int64_t steps[1];
    if (ftrt__ckpt_list(a->cfg->ckpt_dir, steps, 1) > 0) c->last_committed = steps[0];
    committer_open(c);
    return 0;
}

/* Hands one epoll event (`events`: what epoll reported) to its owner: a connection that is
 * writable writes its send queue (conn.c), one with anything else to report is read. */
static void dispatch(ftrt__coord *c, uint64_t key, uint32_t events)
{
    uint32_t kind = (uint32_t)(key >> 32), idx = (uint32_t)key;
    int w, in = (events & ~(uint32_t)EPOLLOUT) != 0;
    if ((events & EPOLLOUT) && (kind == FTRT__KEY_RANK || kind == FTRT__KEY_HOST))
        ftrt__tx_ready(c, kind == FTRT__KEY_RANK ? (int)idx : c->W + (int)idx);
    if (kind == FTRT__KEY_LISTEN) ftrt__listener_accept(c);
    else if (kind == FTRT__KEY_PENDING && (w = ftrt__listener_identify(c, (int)idx)) > 0)
        ftrt__rank_rejoined(c, w);
    else if (kind == FTRT__KEY_PENDING && w < 0)
        ftrt__service_host(c, -w - 1); /* (its ranks' HELLOs came with it) */
    else if (kind == FTRT__KEY_PENDING && c->join_welcome > 0) /* (a JOIN admitted, join.c) */
        ftrt__join_welcome(c, c->join_welcome);
    else if (kind == FTRT__KEY_RANK && in && c->r[idx].fd >= 0) ftrt__service(c, (int)idx);
    else if (kind == FTRT__KEY_HOST && in && c->hl[idx].fd >= 0) ftrt__service_host(c, (int)idx);
    else if (kind == FTRT__KEY_COMMIT) ftrt__commits_take(c);
    c->join_welcome = 0;
}

/* One iteration: wait for events (at most until the next timer), handle them, start the job
 * once every rank said hello, send the PINGs due, check the silence timeouts. Returns 0, or -1
 * when epoll itself failed (the job is aborted). */
static int coord_iterate(ftrt__coord *c, struct epoll_event *evs, const loop_timers *t)
{
    int ne = epoll_wait(c->ep, evs, MAXEV, ftrt__coord_wait_ms(c, ftrt__now()));
    if (ne < 0 && errno != EINTR) {
        ftrt__job_abort(c, -errno, "epoll_wait failed");
        return -1;
    }
    for (int i = 0; i < ne; i++) dispatch(c, evs[i].data.u64, evs[i].events);
    ftrt__epoch_release(c); /* (its standby dismissed: a FAILURE or PLAN waits no more) */
    ftrt__takeover_check(c);
    double now = ftrt__now();
    if (c->phase == PH_INIT) {
        if (c->nhello == c->Wworld - 1) {
            ftrt__job_start(c);
        } else if (now > t->init_deadline) {
            ftrt_log_error("only %d of %d ranks connected within %d ms (FTRT_INIT_TIMEOUT_MS)",
                           c->nhello, c->Wworld - 1, c->a->cfg->init_timeout_ms);
            ftrt__job_abort(c, FTRT_ETIMEDOUT, "ranks missing at start");
        }
    }
    if (ftrt__standby_cut_off(c, now) || ftrt__takeover_cut_off(c, now))
        return 0; /* (before declaring anyone silent or lost) */
    ftrt__ping_due(c, now);
    if (c->phase != PH_INIT && c->phase != PH_ABORTING) {
        ftrt__check_timeouts(c, now);
        ftrt__tx_check(c, now); /* (a peer that does not read: as silent) */
    }
    if (c->catch_up_due) ftrt__links_catch_up(c); /* (a relay lost during this turn) */
    return 0;
}

/* The status file: membership changes at once, progress at most 4 times a second; once a
 * write costs more than 2.5 ms (thousands of ranks), never more often than once per 20 times
 * what the last one cost, so that the loop spends at most 5% of its time on it. (Fault
 * injectors time detections by this file: a small job's membership change is never held back:
 * the rule applies above 1,024 processes only, where a write costs milliseconds by itself;
 * below, a write slowed by a busy machine made chaos.ledger see a recovery end 71 ms late.) */
static void status_due(ftrt__coord *c, double now)
{
    if (c->status_dirty && ftrt__standby_deposed(c)) return; /* (a standby took over) */
    if (c->claim_pending) return; /* (a takeover not sure yet that it is not the one cut off) */
    double gap = c->W > 1024 && c->status_cost > 0.0025 ? 20.0 * c->status_cost : 0;
    if (c->status_dirty && (now - c->status_written >= gap || c->phase == PH_DONE) &&
        ((c->status_dirty & 2) || now - c->status_written > 0.25 || c->phase == PH_DONE)) {
        ftrt__status_write(c);
        double after = ftrt__now();
        c->status_cost = after - now;
        c->status_written = after;
        c->status_dirty = 0;
    }
}

/* The periodic work, at most every 10 ms: stale pending connections, the straggler window
 * (every second), the progress detector (10 times a second), the metrics file and the progress
 * line, the job's end, the status file. */
static void coord_periodic(ftrt__coord *c, loop_timers *t, double now)
{
    if (c->deposed) { /* cut off, or a standby took over: nothing more is decided here */
        c->phase = PH_DONE;
        return;
    }
    if (now < t->next_periodic) return;
    t->next_periodic = now + 0.010;
    for (int k = 0; (k = ftrt__listener_stale(c, now, k)) >= 0; k++) {
        dispatch(c, FTRT__KEY(FTRT__KEY_PENDING, k), EPOLLIN); /* its HELLO may be there, unread */
        ftrt__listener_reject_stale(c, k);
    }
    if (c->norphans > 0) ftrt__orphans_expire(c, now);
    if (c->nmoving > 0) ftrt__moves_due(c);
    if (c->plan_hold_until > 0 && now >= c->plan_hold_until) { /* a held plan may go now */
        c->plan_hold_until = 0;
        ftrt__epoch_check_reports(c);
    }
    if (c->plan_test_until > 0 && now >= c->plan_test_until) { /* FTRT_TEST_PLAN_DELAY_MS */
        c->plan_test_until = 0;
        ftrt__epoch_check_reports(c);
    }
    if (c->phase == PH_RUNNING && now - c->last_window >= 1.0) {
        ftrt__progress_window(c, now);
        c->last_window = now;
    }
    ftrt__drain_periodic(c, now);
    if (now - t->last_progress_check >= 0.1) { /* O(N): ten times a second */
        ftrt__progress_check(c, now);
        t->last_progress_check = now;
    }
    if (c->phase != PH_INIT && now - c->metrics_written >= 2.0) {
        if (c->a->cfg->metrics_file[0] && !c->claim_pending && !ftrt__standby_deposed(c))
            ftrt__metrics_write(c, ftrt__wallclock());
        c->metrics_written = now;
    }
    if (c->phase != PH_INIT && now - c->progress_printed >= 1.0) {
        ftrt__progress_line(c, 0);
        c->progress_printed = now;
    }
    if (ftrt__rankidx_stale(c)) ftrt__steps_most(c); /* (O(W) once after a rollback) */
    if (ftrt__standby_tick(c, now)) ftrt__commits_release(c, 1);
    ftrt__job_check_end(c, now);
    status_due(c, now);
    if (c->deposed) c->phase = PH_DONE;
}

/* The job is over: commits in flight finish, the report, the metrics and the final status file
 * are written, old checkpoints' deletion is waited for (10 s at most). */
static void coord_finish(ftrt__coord *c)
{
    ftrt__commits_drain(c); /* their outcome goes into the report */
    c->t_end = ftrt__now();
    c->phase = PH_DONE;
    if (ftrt__standby_deposed(c)) { /* a standby took over: nothing written here counts */
        c->a->aborted = 1;
        c->a->ranks_lost = 1;
        c->result = FTRT_ECOORD;
        return;
    }
    ftrt__progress_line(c, 1);
    ftrt__status_write(c);
    ftrt__report_write(c);
    if (c->a->cfg->metrics_file[0])
        ftrt__metrics_write(c, c->t_start_wall + (c->t_end - c->t_start));
    c->final_written = 1; /* the launcher may end mpirun once it reads this */
    ftrt__status_write(c);
    if (ftrt__ckpt_retention_flush(10.0) > 0) /* old checkpoints' files, deleted in background */
        ftrt_log_warn("checkpoint retention: old step directories are still being deleted; "
                      "the next commit finishes the job (they are no longer committed)");
    /* Ranks that never joined count as lost too: after an abort at start-up they never reach
     * MPI_Finalize, so the coordinator must not wait for them there. */
    c->a->ranks_lost = c->nfailed + c->njoined; /* (as FAREWELL's value, job.c) */
    c->a->aborted = c->aborted;
    for (int w = 1; w < c->Wused; w++)
        c->a->ranks_lost += !c->r[w].hello && c->r[w].role != FTRT__ROLE_FAILED;
}

/* Closes every connection and frees everything coord_open made (what it got to). */
static void coord_close(ftrt__coord *c)
{
    for (int w = 1; c->r && w < c->Wused; w++) {
        ftrt__coord_drop(c, w);
        free(c->r[w].tl);
    }
    for (int h = 0; h < c->nhl; h++) {
        ftrt__host_drop(c, h);
        free(c->hl[h].relay_at);
    }
    ftrt__listener_close(c);
    if (c->mark_fd >= 0) close(c->mark_fd);
    ftrt__committer_stop(c->committer);
    if (c->ep >= 0) close(c->ep);
    ftrt__track_free(c->ckpt_track);
    free(c->r);
    free(c->members);
    free(c->holder);
    ftrt__membership_free(c);
    free(c->hl);
    free(c->mc_list);
    free(c->mc_cnt);
    free(c->mc_off);
    free(c->mc_grp);
    free(c->relay_of);
    free(c->plan_delta);
    free(c->plan_full);
    free(c->inc);
    scratch_free(&c->s);
    ftrt__rankidx_free(c);
}

/* The coordinator's state before coord_open. */
static ftrt__coord coord_init(ftrt__coord_args *a)
{
    return (ftrt__coord){.a = a, .W = a->world_size + a->cfg->joinable, .Wused = a->world_size,
                         .Wworld = a->world_size, .N = a->ntrainers, .N0 = a->ntrainers,
                         .phase = PH_INIT, .renumber_epoch = -1,
                         .last_committed = -1, .t_start = a->t_start,
                         .t_start_wall = a->t_start_wall, .sdc_agreed_step = -1,
                         .sdc_judged_step = -1, .sdc_rollback = -1, .ep = -1,
                         .commit_submitted = -1, .mark_fd = a->mark_fd, .takeover_inc = -1};
}

/* Opens c (and, for a takeover, restores its state), runs the loop until the job is over,
 * writes the outputs and closes it. Returns the job's result or the opening's error. */
static int coord_main(ftrt__coord *c, int listen_fd, uint64_t secret, const ftrt__takeover_args *t)
{
    struct epoll_event *evs = calloc(MAXEV, sizeof *evs);
    int rc = evs ? coord_open(c, listen_fd, secret) : -ENOMEM;
    if (!evs && listen_fd >= 0) close(listen_fd);
    if (!rc && t) rc = ftrt__takeover_begin(c, t);
    ftrt__msg_set_term(c->term); /* every message of this thread carries it (base/proto.h) */
    if (rc) {
        coord_close(c);
        free(evs);
        return rc;
    }
    loop_timers tm = {.init_deadline = ftrt__now() + c->a->cfg->init_timeout_ms / 1000.0};
    while (c->phase != PH_DONE) {
        if (coord_iterate(c, evs, &tm)) break;
        coord_periodic(c, &tm, ftrt__now());
    }
    if (!c->deposed) { /* the job's end (FAREWELL, SHUTDOWN, ABORT) still queued goes out */
        double t = c->a->cfg->heartbeat_timeout_ms / 1000.0;
        ftrt__tx_drain(c, t, ftrt__now() + DRAIN_TIMEOUTS * t);
    }
    coord_finish(c);
    coord_close(c);
    free(evs);
    return c->result;
}

int ftrt__coordinator_run(ftrt__coord_args *a, int listen_fd, uint64_t secret)
{
    ftrt__coord c = coord_init(a);
    return coord_main(&c, listen_fd, secret, NULL);
}

int ftrt__coordinator_takeover(ftrt__coord_args *a, int listen_fd, uint64_t secret,
                               const ftrt__takeover_args *t)
{
    ftrt__coord c = coord_init(a);
    return coord_main(&c, listen_fd, secret, t);
}
