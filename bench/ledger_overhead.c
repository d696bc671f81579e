/*
 * ledger_overhead.c - what the goodput ledger costs per training step: the records a trainer
 * makes per step (the wait begins, the wait ends, the step ends: three timeline switches, each
 * a wall-clock read under the ledger mutex) timed over many steps. bench/ledger_overhead.sh
 * divides it by the step time of a real train_mlp run measured in the same run.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/ledger.h"

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long steps = argc > 1 ? atol(argv[1]) : 2000000;
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    ftrt__ledger l;
    if (ftrt__ledger_init(&l, FTRT__IV_COMPUTE, wall(), 200000)) return 1;
    double t0 = wall();
    for (long s = 0; s < steps; s++) {
        pthread_mutex_lock(&m); /* ftrt__wait_begin */
        ftrt__ledger_switch(&l, FTRT__IV_COMM, wall());
        pthread_mutex_unlock(&m);
        pthread_mutex_lock(&m); /* ftrt__wait_end */
        ftrt__ledger_switch(&l, FTRT__IV_COMPUTE, wall());
        pthread_mutex_unlock(&m);
        pthread_mutex_lock(&m); /* ftrt_step_done */
        ftrt__ledger_switch(&l, FTRT__IV_COMPUTE, wall());
        ftrt__ledger_step_end(&l);
        pthread_mutex_unlock(&m);
    }
    double per_step = (wall() - t0) / (double)steps;
    printf("ledger recording: %.1f ns per step (%ld steps, %zu intervals kept, totals exact)\n",
           per_step * 1e9, steps, l.n);
    ftrt__ledger_free(&l);
    return 0;
}
