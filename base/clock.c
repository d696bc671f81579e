/* clock.c - the clocks, the random source and the polite polling backoff of libftrt
 * (base/clock.h). */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>

#include "base/clock.h"

double ftrt__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double ftrt__wallclock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ftrt__random(void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

void ftrt__polite(long i, long yields, long sleep_ns)
{
    if (i < yields) {
        sched_yield();
    } else {
        struct timespec ts = {sleep_ns / 1000000000L, sleep_ns % 1000000000L};
        nanosleep(&ts, NULL);
    }
}
