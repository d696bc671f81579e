/*
 * membership.c - the one owner of the map from logical rank to process (c->members: logical
 * rank -> world rank) and of its history (docs/detection-and-recovery.md "Membership").
 *
 * Membership changes when a trainer fails (failure.c: a hot spare takes its logical rank), when
 * one is drained (drain.c), at the job's start (job.c) and when a standby coordinator takes
 * over (standby.c restores the map it was sent); with no hot spare left (FTRT_NO_SPARE, failure.c)
 * a logical rank is removed and the ones above it renumbered, its data ranks skipped (shrink)
 * or given to a survivor (fold); a drain withdrawn (the job's loop ended before its step
 * boundary) puts back the map saved before its epoch. The second map, c->holder (data rank -> logical rank: whose
 * data each trains on), changes with them. Every write of either goes through here: the
 * recovery's plans, the status file and the report read them, and tools/check-layers fails the
 * build of any other coordinator file that writes them. Each change after the start is kept with its epoch,
 * cause and time, for the report's "membership" (a standby that took over has the history from
 * its takeover on: the SYNC carries the map, not its past).
 */
#include <stdlib.h>
#include <string.h>

#include "base/jsonw.h"
#include "runtime/coordinator/coord.h"

static const char *const why_names[] = {"start",    "failure", "drain",
                                        "takeover", "shrink",  "fold"};

/* The lowest data rank logical rank l holds (-1: none), and how many in *n. O(N0). */
static int data_of(const ftrt__coord *c, int l, int *n)
{
    int first = -1;
    *n = 0;
    for (int d = 0; d < c->N0; d++)
        if (c->holder[d] == l) {
            if (first < 0) first = d;
            ++*n;
        }
    return first;
}

/* Keeps one change in the history (best effort: without memory it is not kept). */
static void remember(ftrt__coord *c, int l, int from, int to, int why)
{
    if (why == FTRT__MEMBER_START || why == FTRT__MEMBER_TAKEOVER) return;
    if (c->nmhist == c->mhist_cap) {
        int cap = c->mhist_cap ? 2 * c->mhist_cap : 16;
        ftrt__member_change *n = realloc(c->mhist, (size_t)cap * sizeof *n);
        if (!n) return;
        c->mhist = n;
        c->mhist_cap = cap;
    }
    /* (called while running, before the epoch of the change is opened; while its epoch
     * collects REPORTs, when a failure or drain joins it) */
    int epoch = c->phase == PH_RUNNING ? c->epoch + 1 : c->epoch;
    int nd, d = data_of(c, l, &nd);
    c->mhist[c->nmhist++] = (ftrt__member_change){.epoch = epoch, .logical = l, .from = from,
                                                   .to = to, .why = why, .data_rank = d,
                                                   .ndata = nd, .t_wall = ftrt__wallclock()};
}

void ftrt__member_set(ftrt__coord *c, int l, int w, int why)
{
    int from = c->members[l];
    ftrt__crank *old = &c->r[from];
    old->ix_member--;
    c->ix.nbye_members -= old->said_bye != 0;
    c->members[l] = w;
    if (why == FTRT__MEMBER_START) c->holder[l] = l;
    c->r[w].ix_member++;
    c->ix.nbye_members += c->r[w].said_bye != 0;
    remember(c, l, from, w, why);
}

int ftrt__fold_target(const ftrt__coord *c, int l, int max)
{
    int best = -1, best_n = 0, lost;
    data_of(c, l, &lost);
    for (int k = 0; k < c->N; k++) {
        if (k == l) continue;
        int n;
        data_of(c, k, &n);
        if (max > 0 && n + lost > max) continue; /* no room (FTRT_FOLD_MAX) */
        if (best < 0 || n < best_n) {
            best = k;
            best_n = n;
        }
    }
    return best;
}

void ftrt__member_remove(ftrt__coord *c, int l, int to)
{
    int from = c->members[l];
    ftrt__crank *old = &c->r[from];
    old->ix_member--;
    c->ix.nbye_members -= old->said_bye != 0;
    remember(c, l, from, to >= 0 ? c->members[to] : -1,
             to >= 0 ? FTRT__MEMBER_FOLD : FTRT__MEMBER_SHRINK);
    for (int d = 0; d < c->N0; d++) {
        if (c->holder[d] == l) c->holder[d] = to;
        if (c->holder[d] > l) c->holder[d]--;
    }
    for (int k = l; k + 1 < c->N; k++) {
        c->members[k] = c->members[k + 1];
        c->r[c->members[k]].logical = k;
    }
    c->N--;
    if (to >= 0) c->nfolds++;
    else c->nshrinks++;
    c->renumber_epoch = c->phase == PH_RUNNING ? c->epoch + 1 : c->epoch;
}

int ftrt__members_restore(ftrt__coord *c, const unsigned char *p, int n)
{
    if (n < 1 || n > c->N0) return FTRT_EPROTO;
    for (int l = 0; l < n; l++) {
        int32_t m;
        memcpy(&m, p + (size_t)l * sizeof m, sizeof m);
        if (m < 1 || m >= c->Wused) return FTRT_EPROTO;
        c->members[l] = m; /* (the index is rebuilt after: ftrt__rankidx_rebuild) */
    }
    for (int d = 0; d < c->N0; d++) {
        int32_t h;
        memcpy(&h, p + (size_t)(n + d) * sizeof h, sizeof h);
        if (h < -1 || h >= n) return FTRT_EPROTO;
        c->holder[d] = h;
    }
    c->N = n;
    return 0;
}

void ftrt__members_save(ftrt__coord *c, int epoch)
{
    size_t n = (size_t)(c->N0 > 0 ? c->N0 : 1);
    if (!c->saved_members) c->saved_members = malloc(n * sizeof *c->saved_members);
    if (!c->saved_holder) c->saved_holder = malloc(n * sizeof *c->saved_holder);
    c->saved_epoch = 0;
    if (!c->saved_members || !c->saved_holder) return; /* (no withdraw without memory) */
    memcpy(c->saved_members, c->members, (size_t)c->N * sizeof *c->members);
    memcpy(c->saved_holder, c->holder, (size_t)c->N0 * sizeof *c->holder);
    c->saved_N = c->N;
    c->saved_nshrinks = c->nshrinks;
    c->saved_nfolds = c->nfolds;
    c->saved_renumber = c->renumber_epoch;
    c->saved_nmhist = c->nmhist;
    c->saved_epoch = epoch;
}

int ftrt__members_withdraw(ftrt__coord *c)
{
    if (!c->saved_epoch || c->saved_epoch != c->epoch) return -1;
    c->N = c->saved_N;
    memcpy(c->members, c->saved_members, (size_t)c->N * sizeof *c->members);
    memcpy(c->holder, c->saved_holder, (size_t)c->N0 * sizeof *c->holder);
    for (int l = 0; l < c->N; l++) c->r[c->members[l]].logical = l;
    c->nshrinks = c->saved_nshrinks;
    c->nfolds = c->saved_nfolds;
    c->renumber_epoch = c->saved_renumber;
    if (c->saved_nmhist <= c->nmhist) c->nmhist = c->saved_nmhist;
    c->saved_epoch = 0;
    return 0;
}

void ftrt__membership_json(struct ftrt__jw *w, const ftrt__coord *c)
{
    ftrt__jw_array(w, "membership");
    for (int i = 0; i < c->nmhist; i++) {
        const ftrt__member_change *x = &c->mhist[i];
        ftrt__jw_object(w, NULL);
        ftrt__jw_int(w, "epoch", x->epoch);
        ftrt__jw_int(w, "logical_rank", x->logical);
        ftrt__jw_int(w, "from_world_rank", x->from);
        ftrt__jw_int(w, "to_world_rank", x->to);
        ftrt__jw_int(w, "data_rank", x->data_rank);
        ftrt__jw_int(w, "data_ranks_held", x->ndata);
        ftrt__jw_string(w, "why", why_names[x->why]);
        ftrt__jw_double(w, "at", x->t_wall);
        ftrt__jw_end(w);
    }
    ftrt__jw_end(w);
}

void ftrt__membership_free(ftrt__coord *c)
{
    free(c->mhist);
    free(c->saved_members);
    free(c->saved_holder);
    c->saved_members = c->saved_holder = NULL;
    c->mhist = NULL;
    c->nmhist = c->mhist_cap = 0;
}
