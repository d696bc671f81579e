/*
 * watch.c - the epoch watch's listeners (base/ports.h).
 *
 * Engines poll the watch, which is enough for every wait that ftrt runs. A wait that ftrt does
 * not run is not: a PyTorch user who calls loss.item() between backward() and step() blocks the
 * application thread in a CUDA stream synchronize on work (NCCL kernels) that waits for a
 * trainer that died, and no ftrt code polls anything until it returns. So the agent thread,
 * which raises the watch, also calls the listeners the engines registered, once per change of
 * the watch (the NCCL plane's wakes the thread that aborts its communicator: comm/interrupt.c,
 * comm/nccl_plane.c).
 *
 * Locking: lis_lock guards the list and the last fired state, and is held while a listener
 * runs, so that ftrt__watch_unlisten() returning means the listener is not running (an
 * interrupter frees itself after it). Lock order: lis_lock, then the engine's own locks; nothing
 * takes lis_lock while holding an engine lock.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "base/ports.h"

void ftrt__watch_init(ftrt__watch *w)
{
    atomic_store(&w->pending_epoch, 0);
    atomic_store(&w->fatal, 0);
    w->epoch = 0;
    w->needs_recover = 0;
    pthread_mutex_init(&w->lis_lock, NULL);
    w->listeners = NULL;
    w->fired_epoch = 0;
    w->fired_fatal = 0;
    w->lis_init = 1;
}

void ftrt__watch_destroy(ftrt__watch *w)
{
    if (!w->lis_init) return;
    pthread_mutex_destroy(&w->lis_lock);
    w->lis_init = 0;
}

void ftrt__watch_listen(ftrt__watch *w, ftrt__watch_listener *l)
{
    if (!w->lis_init) return;
    pthread_mutex_lock(&w->lis_lock);
    l->next = w->listeners;
    w->listeners = l;
    pthread_mutex_unlock(&w->lis_lock);
}

void ftrt__watch_unlisten(ftrt__watch *w, ftrt__watch_listener *l)
{
    if (!w->lis_init) return;
    pthread_mutex_lock(&w->lis_lock);
    for (ftrt__watch_listener **pp = &w->listeners; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    pthread_mutex_unlock(&w->lis_lock);
}

void ftrt__watch_fire(ftrt__watch *w)
{
    if (!w->lis_init) return;
    pthread_mutex_lock(&w->lis_lock);
    int fatal = atomic_load(&w->fatal);
    int epoch = atomic_load(&w->pending_epoch);
    if (epoch > w->fired_epoch || fatal != w->fired_fatal) {
        w->fired_epoch = epoch > w->fired_epoch ? epoch : w->fired_epoch;
        w->fired_fatal = fatal;
        for (ftrt__watch_listener *l = w->listeners; l; l = l->next) l->fn(l->arg, epoch, fatal);
    }
    pthread_mutex_unlock(&w->lis_lock);
}
