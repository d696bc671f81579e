/*
 * config.h - validation of ftrt_config (internal to libftrt; base layer). The defaults and the
 * FTRT_* environment variables are read by ftrt_config_init() (include/ftrt.h).
 */
#ifndef FTRT_BASE_CONFIG_H
#define FTRT_BASE_CONFIG_H

#include "ftrt.h"

#include <stddef.h>

/* Validates cfg for a world of `world` processes (its size and version, every setting's range,
 * the spares and the heartbeat timeout against the world and the period) and resolves the
 * number of spares into *spares_out. Returns 0 or FTRT_ECONFIG (the bad setting is logged by
 * name). */
int ftrt__config_check(const ftrt_config *cfg, int world, int *spares_out);
/* Copies the caller's config into dst (a full-size struct): the first src->size bytes as they
 * are, the settings past them (a caller built against an older, smaller ftrt_config) from their
 * defaults and environment variables. A src->size outside [8, sizeof(ftrt_config)] copies only
 * size and version (every setting from its default), for ftrt__config_check() to refuse. */
void ftrt__config_adopt(ftrt_config *dst, const ftrt_config *src);

/* One setting of ftrt_config as the table in config.c describes it (see there). */
enum { FTRT__SET_INT, FTRT__SET_POW2, FTRT__SET_DBL, FTRT__SET_ENUM, FTRT__SET_STR };
typedef struct ftrt__setting {
    const char *field;   /* the ftrt_config field */
    const char *env;     /* its FTRT_* environment variable */
    int kind;            /* FTRT__SET_*: int (INT, POW2, ENUM), double (DBL) or char[] (STR) */
    size_t offset, size; /* of the field in ftrt_config, bytes */
    double def;          /* the default (numeric kinds) */
    const char *def_str; /* the default (STR) */
    double lo, hi;       /* the range (STR: lo = minimum length) */
    const char *names;   /* ENUM: the environment's names, "a|b|c", index = value; else NULL */
    const char *doc;     /* one line for README.md's table */
} ftrt__setting;
/* The settings in struct order; *n receives their number. Static, thread-safe. */
const ftrt__setting *ftrt__settings(int *n);

#endif
