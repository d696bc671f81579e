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

int ftrt__secret_parse(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    int n = 0;
    for (; s && s[n]; n++) {
        char ch = s[n];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0 || n >= 16) return -EINVAL;
        v = v << 4 | (uint64_t)d;
    }
    if (n != 16) return -EINVAL;
    *out = v;
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
