/*
 * Unit tests: comm/interrupt.c, the thread that runs an engine's reaction to an epoch change off
 * the agent thread. A fake engine's reaction blocks until the test releases it: the firing
 * thread (playing the agent) must return at once all the same, the reaction runs once per
 * change on the interrupter's own thread with the newest epoch and the fatal code, changes that
 * arrive during a call are merged into one later call, and stopping joins cleanly (also with a
 * call in progress). Threads meet here: the suite runs it under ThreadSanitizer too.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/clock.h"
#include "comm/interrupt.h"
#include "helpers.h"

typedef struct fake {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int calls, epoch, fatal, released, on_firer;
    pthread_t firer;
} fake;

/* The engine's reaction: records its arguments, then blocks until released. */
static void react(void *arg, int epoch, int fatal)
{
    fake *f = arg;
    pthread_mutex_lock(&f->lock);
    f->calls++;
    f->epoch = epoch;
    f->fatal = fatal;
    f->on_firer |= pthread_equal(pthread_self(), f->firer);
    pthread_cond_broadcast(&f->cond);
    while (!f->released) pthread_cond_wait(&f->cond, &f->lock);
    pthread_mutex_unlock(&f->lock);
}

static void release(fake *f)
{
    pthread_mutex_lock(&f->lock);
    f->released = 1;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

/* Waits (at most 5 s) until the reaction has started `calls` times; returns how many. */
static int started(fake *f, int calls)
{
    double end = ftrt__now() + 5;
    pthread_mutex_lock(&f->lock);
    while (f->calls < calls && ftrt__now() < end) {
        pthread_mutex_unlock(&f->lock);
        ftrt__polite(0, 0, 1000);
        pthread_mutex_lock(&f->lock);
    }
    int n = f->calls;
    pthread_mutex_unlock(&f->lock);
    return n;
}

static void fake_init(fake *f)
{
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->firer = pthread_self();
}

/* Fired while the reaction is blocked: the firing thread returns; changes merge. */
static void fires_off_the_agent_thread(void **state)
{
    (void)state;
    ftrt__watch w;
    t_watch_init(&w);
    fake f = {0};
    fake_init(&f);
    ftrt__interrupter *it;
    assert_int_equal(ftrt__interrupter_start(&w, react, &f, &it), 0);
    ftrt__watch_fire(&w); /* no change yet: nothing */
    t_watch_announce(&w, 1);
    ftrt__watch_fire(&w);
    assert_int_equal(started(&f, 1), 1);
    assert_int_equal(f.epoch, 1);
    assert_int_equal(f.on_firer, 0);
    /* the reaction is blocked: two more changes, and the firer returns each time */
    t_watch_announce(&w, 2);
    ftrt__watch_fire(&w);
    atomic_store(&w.fatal, FTRT_EABORT);
    ftrt__watch_fire(&w);
    ftrt__watch_fire(&w); /* (no change) */
    assert_int_equal(ftrt__interrupter_wait(it, 1, 50), 0); /* still in the first call */
    release(&f);
    assert_int_equal(ftrt__interrupter_wait(it, 2, 5000), 2); /* the two merged into one */
    assert_int_equal(f.calls, 2);
    assert_int_equal(f.epoch, 2);
    assert_int_equal(f.fatal, FTRT_EABORT);
    assert_int_equal(ftrt__interrupter_wait(it, 3, 100), 2); /* and no third */
    ftrt__interrupter_stop(it);
    ftrt__watch_destroy(&w);
}

typedef struct stopper {
    ftrt__interrupter *it;
    atomic_int done;
} stopper;

static void *stop_elsewhere(void *arg)
{
    stopper *s = arg;
    ftrt__interrupter_stop(s->it);
    atomic_store(&s->done, 1);
    return NULL;
}

/* Stopping with a call in progress waits for it; after stop, fires call nothing. */
static void stop_joins(void **state)
{
    (void)state;
    ftrt__watch w;
    t_watch_init(&w);
    fake f = {0};
    fake_init(&f);
    ftrt__interrupter *it;
    assert_int_equal(ftrt__interrupter_start(&w, react, &f, &it), 0);
    t_watch_announce(&w, 1);
    ftrt__watch_fire(&w);
    assert_int_equal(started(&f, 1), 1);
    pthread_t t;
    stopper st = {.it = it};
    assert_int_equal(pthread_create(&t, NULL, stop_elsewhere, &st), 0);
    ftrt__polite(0, 0, 50 * 1000000L);
    assert_int_equal(atomic_load(&st.done), 0); /* the call is blocked: stop waits for it */
    release(&f);
    assert_int_equal(pthread_join(t, NULL), 0);
    t_watch_announce(&w, 2);
    ftrt__watch_fire(&w); /* unlistened: nothing is called */
    assert_int_equal(f.calls, 1);
    ftrt__interrupter_stop(NULL);
    ftrt__watch_destroy(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(fires_off_the_agent_thread),
                                       cmocka_unit_test(stop_joins)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
