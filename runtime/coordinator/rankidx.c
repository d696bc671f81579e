/*
 * rankidx.c - state the coordinator keeps up to date as ranks say HELLO, change role, send
 * heartbeats and say BYE, so that a failure's handling (failure.c) reads it in O(1) or
 * O(spares) instead of scanning the world (docs/detection-and-recovery.md "Failure
 * detection"; the four scans it replaced before the first FAILURE are measured in
 * docs/benchmarks.md "Coordinator at 131,072 simulated ranks"):
 *
 *  - the hosts: every distinct host name (an open-addressing hash table), with per host the
 *    ranks on it, those of them failed, and those failed and named by an incident;
 *  - the hot spares: a list of the world ranks >= 1 whose role is spare, in ascending order;
 *  - the most steps any rank >= 1 reported: a running maximum with the count of ranks at it,
 *    marked stale when the last of them goes below it (a rollback) and then recomputed once
 *    (O(W)), by the periodic work or by the next incident;
 *  - the members (logical ranks) whose world rank said BYE: the job is finishing.
 *
 * Whoever writes a rank's host, role, steps, BYE or a logical rank's member does it through
 * these functions; a bulk change (the state a standby restores) calls ftrt__rankidx_rebuild.
 * Only the coordinator's thread.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/coordinator/coord.h"

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

int ftrt__rankidx_alloc(ftrt__coord *c)
{
    ftrt__rankidx *x = &c->ix;
    x->cap = c->W + 1; /* every rank on its own host, and one more (a rebuild frees the rest) */
    x->nslot = 16;
    while (x->nslot < 2 * x->cap) x->nslot *= 2;
    x->hosts = calloc((size_t)x->cap, sizeof *x->hosts);
    x->slot = malloc((size_t)x->nslot * sizeof *x->slot);
    if (!x->hosts || !x->slot) return -ENOMEM;
    ftrt__rankidx_rebuild(c);
    return 0;
}

void ftrt__rankidx_free(ftrt__coord *c)
{
    free(c->ix.hosts);
    free(c->ix.slot);
    c->ix.hosts = NULL;
    c->ix.slot = NULL;
}

/* The id of host `name`, added when new; -1 when the table is full. */
static int host_id(ftrt__rankidx *x, const char *name)
{
    uint32_t m = (uint32_t)x->nslot - 1, i = name_hash(name) & m;
    for (; x->slot[i] >= 0; i = (i + 1) & m)
        if (!strcmp(x->hosts[x->slot[i]].name, name)) return x->slot[i];
    if (x->nhosts == x->cap) return -1;
    int h = x->nhosts++;
    memset(&x->hosts[h], 0, sizeof x->hosts[h]);
    memcpy(x->hosts[h].name, name, strnlen(name, FTRT__HOST_MAX - 1));
    x->slot[i] = h;
    return h;
}

/* Unlinks / links world rank w from / into the spare list (ascending world ranks). */
static void spare_out(ftrt__rankidx *x, ftrt__crank *r0, int w)
{
    ftrt__crank *r = &r0[w];
    if (r->ix_prev) r0[r->ix_prev].ix_next = r->ix_next;
    else x->spare_head = r->ix_next;
    if (r->ix_next) r0[r->ix_next].ix_prev = r->ix_prev;
    else x->spare_tail = r->ix_prev;
    r->ix_prev = r->ix_next = 0;
    x->nspares--;
}

static void spare_in(ftrt__rankidx *x, ftrt__crank *r0, int w)
{
    int after = x->spare_tail; /* (ranks join in ascending order: O(1) then) */
    while (after > w) after = r0[after].ix_prev;
    int before = after ? r0[after].ix_next : x->spare_head;
    r0[w].ix_prev = after;
    r0[w].ix_next = before;
    if (after) r0[after].ix_next = w;
    else x->spare_head = w;
    if (before) r0[before].ix_prev = w;
    else x->spare_tail = w;
    x->nspares++;
}

/* Brings world rank w's share of its host's counters and its place in the spare list in line
 * with its role and whether an incident names it. */
static void rank_sync(ftrt__coord *c, int w)
{
    ftrt__rankidx *x = &c->ix;
    ftrt__crank *r = &c->r[w];
    int failed = r->role == FTRT__ROLE_FAILED;
    int named = w >= 1 && failed && r->ix_named;
    int spare = w >= 1 && r->role == FTRT__ROLE_SPARE;
    if (r->ix_host >= 0) {
        x->hosts[r->ix_host].nfailed += failed - r->ix_failed;
        x->hosts[r->ix_host].nnamed += named - r->ix_cnamed;
    }
    r->ix_failed = (unsigned char)failed;
    r->ix_cnamed = (unsigned char)named;
    if (spare && !r->ix_spare) spare_in(x, c->r, w);
    else if (!spare && r->ix_spare) spare_out(x, c->r, w);
    r->ix_spare = (unsigned char)spare;
}

/* Puts world rank w (its host name already in r[w].host) on its host. 0, or -1: table full. */
static int host_join(ftrt__coord *c, int w)
{
    ftrt__crank *r = &c->r[w];
    int h = host_id(&c->ix, r->host);
    if (h < 0) return -1;
    r->ix_host = h;
    c->ix.hosts[h].nranks++;
    r->ix_failed = r->ix_cnamed = 0;
    rank_sync(c, w);
    return 0;
}

void ftrt__rankidx_rebuild(ftrt__coord *c)
{
    ftrt__rankidx *x = &c->ix;
    memset(x->slot, 0xff, (size_t)x->nslot * sizeof *x->slot); /* -1: empty */
    x->nhosts = x->nspares = x->spare_head = x->spare_tail = 0;
    x->steps_ok = 0;
    for (int w = 0; w < c->Wused; w++) {
        ftrt__crank *r = &c->r[w];
        r->ix_prev = r->ix_next = 0;
        r->ix_spare = r->ix_named = 0;
        r->ix_host = -1;
    }
    for (int i = 0; i < c->ninc; i++)
        if (c->inc[i].world_rank >= 1 && c->inc[i].world_rank < c->Wused)
            c->r[c->inc[i].world_rank].ix_named = 1;
    for (int w = 0; w < c->Wused; w++) c->r[w].ix_member = 0;
    x->nbye_members = 0;
    for (int l = 0; c->members && l < c->N; l++) {
        c->r[c->members[l]].ix_member++;
        x->nbye_members += c->r[c->members[l]].said_bye != 0;
    }
    for (int w = 0; w < c->Wused; w++) host_join(c, w); /* (W + 1 places: never full here) */
}

void ftrt__rank_set_host(ftrt__coord *c, int w, const char *host)
{
    ftrt__crank *r = &c->r[w];
    size_t n = strnlen(host, FTRT__HOST_MAX - 1);
    if (r->ix_host >= 0 && strlen(r->host) == n && !memcmp(r->host, host, n)) return; /* same */
    if (r->ix_host >= 0) { /* off its old host */
        ftrt__rankidx_host *o = &c->ix.hosts[r->ix_host];
        o->nranks--;
        o->nfailed -= r->ix_failed;
        o->nnamed -= r->ix_cnamed;
        r->ix_host = -1;
    }
    memmove(r->host, host, n);
    r->host[n] = 0;
    if (host_join(c, w)) ftrt__rankidx_rebuild(c); /* full of hosts left empty: start over */
}

void ftrt__rank_set_role(ftrt__coord *c, int w, int role)
{
    c->r[w].role = role;
    rank_sync(c, w);
}

void ftrt__rank_named(ftrt__coord *c, int w)
{
    if (w < 1 || w >= c->Wused) return;
    c->r[w].ix_named = 1;
    rank_sync(c, w);
}

int ftrt__host_has_failed(const ftrt__coord *c, int w)
{
    int h = c->r[w].ix_host;
    return h >= 0 && c->ix.hosts[h].nnamed > 0;
}

int ftrt__host_all_failed(const ftrt__coord *c, int w)
{
    int h = c->r[w].ix_host;
    if (h < 0) return 0;
    const ftrt__rankidx_host *o = &c->ix.hosts[h];
    return o->nfailed == o->nranks ? o->nranks : 0;
}

int ftrt__spare_first(const ftrt__coord *c) { return c->ix.spare_head; }

int ftrt__spare_next(const ftrt__coord *c, int w) { return c->r[w].ix_next; }

void ftrt__rank_set_steps(ftrt__coord *c, int w, int64_t steps)
{
    ftrt__rankidx *x = &c->ix;
    int64_t old = c->r[w].steps_done;
    c->r[w].steps_done = steps;
    if (w < 1 || !x->steps_ok || steps == old) return;
    if (steps > x->steps_most) {
        x->steps_most = steps;
        x->steps_at_most = 1;
    } else if (steps == x->steps_most) {
        x->steps_at_most++;
    } else if (old == x->steps_most && --x->steps_at_most == 0) {
        x->steps_ok = 0; /* the last rank at the maximum went back: recomputed when asked */
    }
}

int64_t ftrt__steps_most(ftrt__coord *c)
{
    ftrt__rankidx *x = &c->ix;
    if (!x->steps_ok) {
        int64_t most = INT64_MIN;
        int n = 0;
        for (int w = 1; w < c->Wused; w++) {
            int64_t s = c->r[w].steps_done;
            if (s > most) most = s, n = 0;
            n += s == most;
        }
        x->steps_most = most;
        x->steps_at_most = n;
        x->steps_ok = 1;
    }
    return x->steps_most > 0 ? x->steps_most : 0; /* (0 with no rank, as the scan gave) */
}

int ftrt__rankidx_stale(const ftrt__coord *c) { return !c->ix.steps_ok; }

void ftrt__rank_said_bye(ftrt__coord *c, int w)
{
    if (!c->r[w].said_bye) c->ix.nbye_members += c->r[w].ix_member;
    c->r[w].said_bye = 1;
}
