/*
 * sdc_cost.c - the measuring half of bench/sdc_cost.sh: CRC32C throughput of this machine
 * (ftrt__crc32c, the fingerprint's inner loop) at several sizes, next to the memory read
 * bandwidth (a plain sum over the same buffer), best of several runs each. Prints one line per
 * size: "<bytes> crc32c <GB/s> read <GB/s>".
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/crc32c.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    const size_t sizes[] = {38480, 1u << 20, 16u << 20, 256u << 20};
    unsigned char *buf = malloc(256u << 20);
    if (!buf) return 1;
    for (size_t i = 0; i < (256u << 20); i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
    volatile uint64_t sink = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        int reps = (int)((256u << 20) / n);
        double best_crc = 1e30, best_rd = 1e30;
        for (int round = 0; round < 5; round++) {
            double t0 = now();
            uint32_t c = 0;
            for (int r = 0; r < reps; r++) c ^= ftrt__crc32c(0, buf, n);
            double t1 = now();
            sink += c;
            uint64_t s = 0;
            for (int r = 0; r < reps; r++) {
                const uint64_t *p = (const uint64_t *)buf;
                for (size_t i = 0; i < n / 8; i++) s += p[i];
            }
            double t2 = now();
            sink += s;
            if ((t1 - t0) / reps < best_crc) best_crc = (t1 - t0) / reps;
            if ((t2 - t1) / reps < best_rd) best_rd = (t2 - t1) / reps;
        }
        printf("%zu crc32c %.2f read %.2f\n", n, (double)n / best_crc / 1e9,
               (double)n / best_rd / 1e9);
    }
    free(buf);
    return (int)(sink & 0);
}
