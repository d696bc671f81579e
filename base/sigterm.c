/*
 * sigterm.c - the SIGTERM handler of FTRT_SIGTERM=drain (base/sigterm.h).
 */
#include "base/sigterm.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

static _Atomic int received;
static struct sigaction previous;
static int installed;
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;

/* (async-signal-safe: an atomic add, sigaction, raise) */
static void on_sigterm(int sig)
{
    if (atomic_fetch_add(&received, 1) == 0) return; /* the first: a request */
    sigaction(SIGTERM, &previous, NULL);
    raise(sig);
}

int ftrt__sigterm_install(void)
{
    pthread_mutex_lock(&install_lock);
    int rc = 0;
    if (!installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigterm;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        if (sigaction(SIGTERM, &sa, &previous) == 0) installed = 1;
        else rc = -errno;
    }
    pthread_mutex_unlock(&install_lock);
    return rc;
}

void ftrt__sigterm_restore(void)
{
    pthread_mutex_lock(&install_lock);
    if (installed) sigaction(SIGTERM, &previous, NULL);
    installed = 0;
    pthread_mutex_unlock(&install_lock);
}

int ftrt__sigterm_count(void) { return atomic_load(&received); }
