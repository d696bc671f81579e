/*
 * clock.h - clocks and randomness (internal to libftrt; base layer, depends on nothing).
 */
#ifndef FTRT_BASE_CLOCK_H
#define FTRT_BASE_CLOCK_H

#include <stddef.h>

/* CLOCK_MONOTONIC seconds. Thread-safe. */
double ftrt__now(void);
/* CLOCK_REALTIME seconds since the Unix epoch (ledger timestamps, fault logs). Thread-safe. */
double ftrt__wallclock(void);
/* Fills buf with len random bytes (getrandom). Returns 0 or -errno. Thread-safe. */
int ftrt__random(void *buf, size_t len);

#endif
