/*
 * job.c - the job's phases as the coordinator sees them: the start (every rank said hello:
 * WELCOME with its role), the end (every member said BYE or failed: spares get SHUTDOWN), and
 * the abort (ABORT to the members, SHUTDOWN to the spares, ranks that do not leave fenced with
 * SIGKILL after a deadline), and fencing itself: by this process for the ranks of its host, by
 * their host agent for the others it serves.
 */
#include <string.h>

#include "base/fence.h"
#include "base/log.h"
#include "runtime/coordinator/coord.h"

/* (The heartbeat period the coordinator asks for depends on how many connections send it
 * heartbeats: each rank's own, and one per host agent.) */
void ftrt__job_start(ftrt__coord *c)
{
    int links = c->nhl + 1;
    for (int w = 1; w < c->Wused; w++) links += c->r[w].fd >= 0;
    c->hb_ms = ftrt__heartbeat_period_ms(c->a->cfg->heartbeat_ms, c->a->cfg->heartbeat_timeout_ms,
                                         links);
    for (int w = 1; w < c->Wused; w++) {
        ftrt__crank *r = &c->r[w];
        ftrt__rank_set_role(c, w, w <= c->N ? FTRT__ROLE_TRAINER : FTRT__ROLE_SPARE);
        r->logical = w <= c->N ? w - 1 : -1;
        ftrt__welcome m = {.role = r->role, .logical_rank = r->logical, .ntrainers = c->N,
                           .heartbeat_ms = c->hb_ms};
        ftrt__coord_send(c, w, FTRT__MSG_WELCOME, &m, sizeof m);
        ftrt__fanout_pump(c, w);
    }
    for (int l = 0; l < c->N; l++) {
        ftrt__member_set(c, l, l + 1, FTRT__MEMBER_START);
        c->r[l + 1].last_change = ftrt__now();
    }
    c->phase = PH_RUNNING;
    c->t_running = ftrt__now();
    c->status_dirty |= 2; /* membership: write now */
    ftrt_log_info("job started: %d trainers, %d spare(s)", c->N, c->Wworld - 1 - c->N);
}

/* The n world ranks in fan, spares sent SHUTDOWN now: each one's teardown starts here (a
 * spare sends no timeline after it: the coordinator stops reading at the job's end). */
static void spares_released(ftrt__coord *c, const int *fan, int n)
{
    double now = c->t_start_wall + (ftrt__now() - c->t_start); /* the window's clock (j1's) */
    for (int i = 0; i < n; i++)
        if (c->r[fan[i]].t_released_wall == 0) c->r[fan[i]].t_released_wall = now;
}

int ftrt__live_spares(const ftrt__coord *c) { return c->ix.nspares; }

void ftrt__job_abort(ftrt__coord *c, int code, const char *why)
{
    if (c->phase == PH_ABORTING || c->phase == PH_DONE) return;
    ftrt_log_error("aborting the job: %s (%s)", why, ftrt_err_name(code));
    c->result = code;
    c->aborted = 1;
    c->phase = PH_ABORTING;
    c->abort_deadline = ftrt__now() + 2.0 + 3.0 * c->a->cfg->heartbeat_timeout_ms / 1000.0;
    ftrt__epoch_msg m = {.epoch = c->epoch, .value = code};
    for (int spare = 0; spare < 2; spare++) {
        int n = 0;
        for (int w = 1; w < c->Wused; w++)
            if ((c->r[w].role == FTRT__ROLE_SPARE) == spare) c->s.fan[n++] = w;
        ftrt__coord_multicast(c, c->s.fan, n, spare ? FTRT__MSG_SHUTDOWN : FTRT__MSG_ABORT, &m,
                              sizeof m);
        if (spare) spares_released(c, c->s.fan, n);
    }
    c->status_dirty |= 2; /* membership: write now */
}

void ftrt__job_fence(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    if (r->pid > 0 && !strcmp(r->host, c->a->host))
        ftrt__fence(w, r->pid, -1, "coordinator");
    else if (ftrt__host_cut(c, w, 1))
        ftrt_log_warn("world rank %d (pid %d, %s): its host agent fences it", w, r->pid, r->host);
}

int ftrt__job_finishing(const ftrt__coord *c) { return c->ix.nbye_members > 0; }

static int all_done(const ftrt__coord *c)
{
    for (int l = 0; l < c->N; l++) {
        const ftrt__crank *r = &c->r[c->members[l]];
        if (!r->said_bye && r->role != FTRT__ROLE_FAILED) return 0;
    }
    return 1;
}

static int any_connected(const ftrt__coord *c)
{
    for (int w = 1; w < c->Wused; w++)
        if (ftrt__rank_connected(c, w) && c->r[w].role != FTRT__ROLE_SPARE) return 1;
    return 0;
}

void ftrt__job_check_end(ftrt__coord *c, double now)
{
    if (c->phase == PH_RUNNING && c->maybe_done) {
        c->maybe_done = 0;
        if (all_done(c)) {
            /* The job's end, to every process at once: the trainers' FAREWELL and the spares'
             * SHUTDOWN say how many processes died or joined (0: all call MPI_Finalize; after
             * a join none does: the job's processes may be connected across two MPI jobs,
             * whose MPI_Finalize could wait on each other, comm/join.c) */
            ftrt__epoch_msg m = {.epoch = c->epoch, .value = c->nfailed + c->njoined};
            for (int farewell = 0; farewell < 2; farewell++) {
                int n = 0;
                for (int w = 1; w < c->Wused; w++)
                    if (farewell ? c->r[w].role == FTRT__ROLE_TRAINER && c->r[w].said_bye
                                 : c->r[w].role == FTRT__ROLE_SPARE)
                        c->s.fan[n++] = w;
                ftrt__coord_multicast(c, c->s.fan, n,
                                      farewell ? FTRT__MSG_FAREWELL : FTRT__MSG_SHUTDOWN, &m,
                                      sizeof m);
                if (!farewell) spares_released(c, c->s.fan, n);
            }
            c->phase = PH_DONE;
            c->result = c->sdc_unresolved ? FTRT_ECORRUPT : FTRT_DONE;
        }
    }
    if (c->phase == PH_ABORTING && (!any_connected(c) || now > c->abort_deadline)) {
        for (int w = 1; w < c->Wused; w++)
            if (ftrt__rank_connected(c, w) && c->r[w].role != FTRT__ROLE_SPARE) {
                ftrt_log_warn("world rank %d did not leave after the abort", w);
                ftrt__job_fence(c, w);
            }
        c->phase = PH_DONE;
    }
}
