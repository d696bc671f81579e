/*
 * membership.c - the one owner of the map from logical rank to process (c->members: logical
 * rank -> world rank) and of its history (docs/detection-and-recovery.md "Membership").
 *
 * Membership changes when a trainer fails (failure.c: a hot spare takes its logical rank), when
 * one is drained (drain.c), at the job's start (job.c) and when a standby coordinator takes
 * over (standby.c restores the map it was sent). Every write goes through here: the recovery's
 * plans, the status file and the report read the map, and tools/check-layers fails the build of
 * any other coordinator file that writes it. Each change after the start is kept with its epoch,
 * cause and time, for the report's "membership" (a standby that took over has the history from
 * its takeover on: the SYNC carries the map, not its past).
 */
#include <stdlib.h>
#include <string.h>

#include "base/jsonw.h"
#include "runtime/coordinator/coord.h"

static const char *const why_names[] = {"start", "failure", "drain", "takeover"};

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
    c->mhist[c->nmhist++] = (ftrt__member_change){.epoch = epoch, .logical = l, .from = from,
                                                   .to = to, .why = why,
                                                   .t_wall = ftrt__wallclock()};
}

void ftrt__member_set(ftrt__coord *c, int l, int w, int why)
{
    int from = c->members[l];
    ftrt__crank *old = &c->r[from];
    old->ix_member--;
    c->ix.nbye_members -= old->said_bye != 0;
    c->members[l] = w;
    c->r[w].ix_member++;
    c->ix.nbye_members += c->r[w].said_bye != 0;
    remember(c, l, from, w, why);
}

int ftrt__members_restore(ftrt__coord *c, const unsigned char *p)
{
    for (int l = 0; l < c->N; l++, p += sizeof(int32_t)) {
        int32_t m;
        memcpy(&m, p, sizeof m);
        if (m < 1 || m >= c->W) return FTRT_EPROTO;
        c->members[l] = m; /* (the index is rebuilt after: ftrt__rankidx_rebuild) */
    }
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
        ftrt__jw_string(w, "why", why_names[x->why]);
        ftrt__jw_double(w, "at", x->t_wall);
        ftrt__jw_end(w);
    }
    ftrt__jw_end(w);
}

void ftrt__membership_free(ftrt__coord *c)
{
    free(c->mhist);
    c->mhist = NULL;
    c->nmhist = c->mhist_cap = 0;
}
