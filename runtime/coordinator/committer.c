/*
 * committer.c - the coordinator's commit thread (committer.h).
 *
 * A ring of QMAX jobs under one mutex: the coordinator's thread appends decided commits and
 * takes finished ones; the commit thread runs them in order and signals each result through an
 * eventfd. Nothing here touches the coordinator's state.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "checkpoint/commit.h"
#include "runtime/coordinator/committer.h"

#define QMAX 64

typedef struct job {
    int64_t step;
    int nranks, epoch, result;
} job;

struct ftrt__committer {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* jobs queued, stop, or a job finished (wait_idle) */
    int efd;
    char dir[4096];
    int keep;
    job q[QMAX];
    unsigned head, run, tail; /* [head, run): finished, to take; [run, tail): queued/running */
    int stop;
};

static void *main_fn(void *arg)
{
    struct ftrt__committer *k = arg;
    pthread_mutex_lock(&k->lock);
    for (;;) {
        while (k->run == k->tail && !k->stop) pthread_cond_wait(&k->cond, &k->lock);
        if (k->run == k->tail) break; /* stopped, nothing left */
        job j = k->q[k->run % QMAX];
        pthread_mutex_unlock(&k->lock);
        /* Old steps' files are deleted in the background (the retention thread). */
        int rc = ftrt__ckpt_commit_ex(k->dir, j.step, j.nranks, k->keep, 1);
        pthread_mutex_lock(&k->lock);
        k->q[k->run % QMAX].result = rc;
        k->run++;
        pthread_cond_broadcast(&k->cond);
        uint64_t one = 1;
        if (write(k->efd, &one, sizeof one) < 0) { /* the counter cannot overflow here */ }
    }
    pthread_mutex_unlock(&k->lock);
    return NULL;
}

int ftrt__committer_start(struct ftrt__committer **out, const char *dir, int keep)
{
    struct ftrt__committer *k = calloc(1, sizeof *k);
    if (!k) return -ENOMEM;
    snprintf(k->dir, sizeof k->dir, "%s", dir);
    k->keep = keep;
    k->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (k->efd < 0) {
        int e = -errno;
        free(k);
        return e;
    }
    pthread_mutex_init(&k->lock, NULL);
    pthread_cond_init(&k->cond, NULL);
    int rc = pthread_create(&k->thread, NULL, main_fn, k);
    if (rc) {
        close(k->efd);
        pthread_mutex_destroy(&k->lock);
        pthread_cond_destroy(&k->cond);
        free(k);
        return -rc;
    }
    *out = k;
    return 0;
}

int ftrt__committer_fd(const struct ftrt__committer *k) { return k->efd; }

int ftrt__committer_submit(struct ftrt__committer *k, int64_t step, int nranks, int epoch)
{
    pthread_mutex_lock(&k->lock);
    if (k->tail - k->head >= QMAX) {
        pthread_mutex_unlock(&k->lock);
        return -EAGAIN;
    }
    k->q[k->tail % QMAX] = (job){.step = step, .nranks = nranks, .epoch = epoch};
    k->tail++;
    pthread_cond_broadcast(&k->cond);
    pthread_mutex_unlock(&k->lock);
    return 0;
}

int ftrt__committer_take(struct ftrt__committer *k, int64_t *step, int *epoch, int *result)
{
    uint64_t v;
    if (read(k->efd, &v, sizeof v) < 0) { /* nothing signalled: the ring says what is there */ }
    pthread_mutex_lock(&k->lock);
    int got = k->head != k->run;
    if (got) {
        job j = k->q[k->head % QMAX];
        k->head++;
        *step = j.step;
        *epoch = j.epoch;
        *result = j.result;
        if (k->head != k->run) { /* more to take: keep the eventfd readable */
            uint64_t one = 1;
            if (write(k->efd, &one, sizeof one) < 0) { /* cannot overflow here */ }
        }
    }
    pthread_mutex_unlock(&k->lock);
    return got;
}

int ftrt__committer_busy(const struct ftrt__committer *k)
{
    struct ftrt__committer *m = (struct ftrt__committer *)k;
    pthread_mutex_lock(&m->lock);
    int n = (int)(m->tail - m->head);
    pthread_mutex_unlock(&m->lock);
    return n;
}

void ftrt__committer_wait_idle(struct ftrt__committer *k)
{
    pthread_mutex_lock(&k->lock);
    while (k->run != k->tail) pthread_cond_wait(&k->cond, &k->lock);
    pthread_mutex_unlock(&k->lock);
}

void ftrt__committer_stop(struct ftrt__committer *k)
{
    if (!k) return;
    pthread_mutex_lock(&k->lock);
    k->stop = 1;
    pthread_cond_broadcast(&k->cond);
    pthread_mutex_unlock(&k->lock);
    pthread_join(k->thread, NULL);
    close(k->efd);
    pthread_mutex_destroy(&k->lock);
    pthread_cond_destroy(&k->cond);
    free(k);
}
