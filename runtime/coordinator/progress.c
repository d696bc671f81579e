/*
 * progress.c - the detectors that read the heartbeats' progress (docs/detection-and-recovery.md
 * "Failure detection"): stalled progress (a trainer whose collectives lag behind another's and
 * that moved neither its steps nor its collectives for the progress timeout is declared failed)
 * and stragglers (compute per step well above the median: reported, never declared failed).
 * Both are O(N) and run from the loop's periodic work, at most 10 times a second.
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "runtime/coordinator/coord.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Logical rank l's step time and compute per step over the last window, when it made steps
 * in it (and is not being promoted): returns 1 and sets *step_s and *comp. */
static int window_of(const ftrt__crank *r, double now, double *step_s, double *comp)
{
    int64_t ds = r->steps_done - r->win_steps;
    if (!(r->win_t > 0 && ds > 0 && !r->promoting)) return 0;
    *step_s = (now - r->win_t) / (double)ds;
    *comp = (r->compute_s - r->win_compute) / (double)ds;
    return 1;
}

/* A trainer whose compute per step exceeds straggler_ratio x the median (comp[] holds the nc
 * members with a window, in logical order) is reported once, then whenever it gets worse. */
static void stragglers(ftrt__coord *c, double now, const double *comp, int nc)
{
    double *sorted = c->s.d3;
    memcpy(sorted, comp, (size_t)nc * sizeof *comp);
    qsort(sorted, (size_t)nc, sizeof *sorted, cmp_double);
    double med = sorted[nc / 2], step_s, cps;
    int k = 0;
    for (int l = 0; l < c->N && med > 0; l++) {
        ftrt__crank *r = &c->r[c->members[l]];
        if (!window_of(r, now, &step_s, &cps)) continue;
        double ratio = comp[k++] / med;
        if (ratio > c->a->cfg->straggler_ratio && ratio > r->straggler_max) {
            if (r->straggler_max == 0)
                ftrt_log_warn("straggler: logical rank %d at step %lld computes %.2fx the "
                              "median per step", l, (long long)r->steps_done, ratio);
            r->straggler_max = ratio;
            r->straggler_step = r->steps_done;
        }
    }
}

void ftrt__progress_window(ftrt__coord *c, double now)
{
    double *steps_t = c->s.d1, *comp = c->s.d2;
    int ns = 0;
    for (int l = 0; l < c->N; l++) {
        ftrt__crank *r = &c->r[c->members[l]];
        if (window_of(r, now, &r->step_s, &comp[ns])) steps_t[ns++] = r->step_s;
    }
    if (ns > 0) {
        qsort(steps_t, (size_t)ns, sizeof *steps_t, cmp_double);
        c->median_step_s = steps_t[ns / 2];
    }
    /* (a median needs a few trainers to mean anything; and the first window measured holds
     * the warm-up: first touches, lazy set-up, a machine still busy starting the others) */
    if (ns > 0) c->nwindows++;
    if (ns >= 3 && c->nwindows >= 2) stragglers(c, now, comp, ns);
    for (int l = 0; l < c->N; l++) {
        ftrt__crank *r = &c->r[c->members[l]];
        r->win_t = now;
        r->win_steps = r->steps_done;
        r->win_compute = r->compute_s;
    }
}

void ftrt__progress_check(ftrt__coord *c, double now)
{
    if (c->phase != PH_RUNNING || ftrt__job_finishing(c)) return;
    double limit = ftrt__progress_timeout(c->a->cfg->progress_timeout_ms, c->median_step_s);
    if (limit <= 0) return;
    int64_t most = 0;
    double newest = 0;
    for (int l = 0; l < c->N; l++) {
        const ftrt__crank *r = &c->r[c->members[l]];
        if (r->waits > most) most = r->waits;
        if (r->last_change > newest) newest = r->last_change;
    }
    for (int l = 0; l < c->N && c->phase == PH_RUNNING; l++) {
        int w = c->members[l];
        ftrt__crank *r = &c->r[w];
        if (r->role == FTRT__ROLE_TRAINER && r->waits < most && now - r->last_change > limit) {
            ftrt_log_error("logical rank %d made no progress for %.1f s while others waited in "
                           "a later collective (FTRT_PROGRESS_TIMEOUT_MS)", l, now - r->last_change);
            ftrt__fail(c, w, FK_PROGRESS_STALL);
        }
    }
    if (c->phase == PH_RUNNING && newest > 0 && now - newest > limit && c->stall_reports == 0) {
        c->stall_reports++;
        ftrt_log_warn("no trainer made progress for %.1f s and none is behind: a collective hang "
                      "across the job", now - newest);
    }
}
