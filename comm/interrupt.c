/*
 * interrupt.c - an engine's reaction to an epoch change, run off the agent thread
 * (comm/interrupt.h has why).
 *
 * The listener (agent thread) and the thread share `lock`: the listener records the newest
 * epoch and fatal code and signals; the thread takes them, calls fn without the lock, and
 * counts the call. Stopping unlistens first (base/watch.c: no listener call is running once
 * that returns), so nothing signals a thread that is gone.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "comm/interrupt.h"

struct ftrt__interrupter {
    ftrt__watch *w;
    ftrt__watch_listener lis;
    ftrt__watch_fn fn;
    void *arg;
    pthread_t thread;
    pthread_mutex_t lock; /* guards what follows */
    pthread_cond_t cond;  /* a change recorded, stop asked, or a call done */
    int pending, epoch, fatal, stop, calls;
};

/* The watch's listener: agent thread, never blocks beyond `lock`. */
static void on_change(void *arg, int epoch, int fatal)
{
    ftrt__interrupter *it = arg;
    pthread_mutex_lock(&it->lock);
    if (epoch > it->epoch) it->epoch = epoch;
    if (fatal) it->fatal = fatal;
    it->pending = 1;
    pthread_cond_broadcast(&it->cond);
    pthread_mutex_unlock(&it->lock);
}

static void *run(void *arg)
{
    ftrt__interrupter *it = arg;
    pthread_mutex_lock(&it->lock);
    for (;;) {
        while (!it->pending && !it->stop) pthread_cond_wait(&it->cond, &it->lock);
        if (it->stop) break;
        int epoch = it->epoch, fatal = it->fatal;
        it->pending = 0;
        pthread_mutex_unlock(&it->lock);
        it->fn(it->arg, epoch, fatal);
        pthread_mutex_lock(&it->lock);
        it->calls++;
        pthread_cond_broadcast(&it->cond);
    }
    pthread_mutex_unlock(&it->lock);
    return NULL;
}

int ftrt__interrupter_start(ftrt__watch *w, ftrt__watch_fn fn, void *arg,
                            ftrt__interrupter **out)
{
    *out = NULL;
    ftrt__interrupter *it = calloc(1, sizeof *it);
    if (!it) return -ENOMEM;
    it->w = w;
    it->fn = fn;
    it->arg = arg;
    pthread_mutex_init(&it->lock, NULL);
    pthread_cond_init(&it->cond, NULL);
    int rc = pthread_create(&it->thread, NULL, run, it);
    if (rc) {
        pthread_cond_destroy(&it->cond);
        pthread_mutex_destroy(&it->lock);
        free(it);
        return -rc;
    }
    it->lis.fn = on_change;
    it->lis.arg = it;
    ftrt__watch_listen(w, &it->lis);
    *out = it;
    return 0;
}

void ftrt__interrupter_stop(ftrt__interrupter *it)
{
    if (!it) return;
    ftrt__watch_unlisten(it->w, &it->lis);
    pthread_mutex_lock(&it->lock);
    it->stop = 1;
    pthread_cond_broadcast(&it->cond);
    pthread_mutex_unlock(&it->lock);
    pthread_join(it->thread, NULL);
    pthread_cond_destroy(&it->cond);
    pthread_mutex_destroy(&it->lock);
    free(it);
}

int ftrt__interrupter_wait(ftrt__interrupter *it, int calls, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&it->lock);
    while (it->calls < calls && pthread_cond_timedwait(&it->cond, &it->lock, &ts) == 0) {}
    int n = it->calls;
    pthread_mutex_unlock(&it->lock);
    return n;
}
