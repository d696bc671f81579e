/*
 * clock.h - clocks, randomness and the polite wait between polls (internal to libftrt; base
 * layer, depends on nothing).
 */
#ifndef FTRT_BASE_CLOCK_H
#define FTRT_BASE_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC seconds. Thread-safe. */
double ftrt__now(void);
/* CLOCK_REALTIME seconds since the Unix epoch (ledger timestamps, fault logs). Thread-safe. */
double ftrt__wallclock(void);
/* Fills buf with len random bytes (getrandom). Returns 0 or -errno. Thread-safe. */
int ftrt__random(void *buf, size_t len);
/* A job secret as text: s must be exactly 16 hexadecimal digits (no sign, no space), stored in
 * *out. Returns 0 or -EINVAL (*out untouched). Thread-safe. */
int ftrt__secret_parse(const char *s, uint64_t *out);
/* The backoff of a polling loop, called between polls that found nothing; `i` counts them from
 * 0. Polls below `yields` give the CPU up with sched_yield (low latency while peers are about to
 * answer); later ones sleep `sleep_ns` nanoseconds, so that oversubscribed ranks and threads
 * leave the CPU to those they wait on. Thread-safe; nothing to fail. */
void ftrt__polite(long i, long yields, long sleep_ns);

#endif
