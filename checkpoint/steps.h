/*
 * steps.h - the step directories of a checkpoint directory (steps.c): scanning them, and the
 * listing of committed steps. Internal to libftrt.
 */
#ifndef FTRT_CKPT_STEPS_H
#define FTRT_CKPT_STEPS_H

#include <dirent.h>
#include <stdint.h>

/* Lists committed steps (those with a MANIFEST) newest first into steps[0..max), with the step
 * LATEST names first when LATEST is valid (a garbage LATEST is logged and ignored).
 * Returns the count (0 when none), or -errno when dir exists but cannot be read. */
int ftrt__ckpt_list(const char *dir, int64_t *steps, int max);

/* Scans the open checkpoint directory d for canonical step directories. *out receives a
 * malloc'd array of their steps (caller frees), *committed a parallel malloc'd array of flags
 * (1: the step has a MANIFEST). Returns the count, -ENOMEM or -errno. */
int ftrt__ckpt_scan_steps(DIR *d, int64_t **out, unsigned char **committed);
/* Sorts steps[0..n) newest first. */
void ftrt__ckpt_sort_steps(int64_t *steps, int n);

#endif
