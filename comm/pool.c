/*
 * pool.c - the data plane's staging buffers: the free pool (best-fit reuse) and the graveyard
 * of abandoned buffers (see pool.h), shared by the CPU engine, the MPI plane and the NCCL plane.
 */
#include <errno.h>
#include <stdlib.h>

#include "comm/pool.h"

void ftrt__pool_init(ftrt__pool *p, int max, int keep_largest, ftrt__buf_release release)
{
    p->n = 0;
    p->max = max < 1 ? 1 : max > FTRT__POOL_CAP ? FTRT__POOL_CAP : max;
    p->keep_largest = keep_largest;
    p->release = release;
}

void *ftrt__pool_take(ftrt__pool *p, size_t bytes, size_t *cap)
{
    int best = -1;
    for (int i = 0; i < p->n; i++)
        if (p->b[i].cap >= bytes && (best < 0 || p->b[i].cap < p->b[best].cap)) best = i;
    if (best < 0) return NULL;
    void *r = p->b[best].p;
    *cap = p->b[best].cap;
    p->b[best] = p->b[--p->n];
    return r;
}

void ftrt__pool_put(ftrt__pool *p, void *buf, size_t cap)
{
    if (!buf) return;
    if (p->n < p->max) {
        p->b[p->n].p = buf;
        p->b[p->n++].cap = cap;
        return;
    }
    int s = 0; /* full: the newcomer goes, or replaces the smallest */
    if (p->keep_largest)
        for (int i = 1; i < p->n; i++)
            if (p->b[i].cap < p->b[s].cap) s = i;
    if (!p->keep_largest || p->b[s].cap >= cap) {
        p->release(buf);
        return;
    }
    p->release(p->b[s].p);
    p->b[s].p = buf;
    p->b[s].cap = cap;
}

void ftrt__pool_clear(ftrt__pool *p)
{
    for (int i = 0; i < p->n; i++) p->release(p->b[i].p);
    p->n = 0;
}

int ftrt__grave_put(ftrt__grave *g, void *buf)
{
    if (!buf) return 0;
    void **ng = realloc(g->p, (size_t)(g->n + 1) * sizeof *ng);
    if (!ng) return -ENOMEM;
    g->p = ng;
    ng[g->n++] = buf;
    return 0;
}

void ftrt__grave_clear(ftrt__grave *g, ftrt__buf_release release)
{
    if (release)
        for (int i = 0; i < g->n; i++) release(g->p[i]);
    free(g->p);
    g->p = NULL;
    g->n = 0;
}
