/*
 * config.h - validation of ftrt_config (internal to libftrt; base layer). The defaults and the
 * FTRT_* environment variables are read by ftrt_config_init() (include/ftrt.h).
 */
#ifndef FTRT_BASE_CONFIG_H
#define FTRT_BASE_CONFIG_H

#include "ftrt.h"

/* Validates cfg for a world of `world` processes and resolves the number of spares into
 * *spares_out. Returns 0 or FTRT_ECONFIG (the bad setting is logged by name). */
int ftrt__config_check(const ftrt_config *cfg, int world, int *spares_out);
/* "error"|"warn"|"info"|"debug" -> 0..3, else -1. */
int ftrt__parse_log_level(const char *v);

#endif
