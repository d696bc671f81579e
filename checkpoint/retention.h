/*
 * retention.h - keeping the newest FTRT_CKPT_KEEP committed checkpoints of a directory and
 * removing the rest (retention.c), after each commit; the files of large steps can be deleted
 * by a background thread. Internal to libftrt.
 */
#ifndef FTRT_CKPT_RETENTION_H
#define FTRT_CKPT_RETENTION_H

#include <stdint.h>

/* Keeps `keep` committed steps of dir: `latest` plus the newest others; removes the rest, and
 * the uncommitted step directories older than `latest`. A step is un-committed (its MANIFEST
 * unlinked) before this returns; with background != 0 its files are then deleted by a
 * background thread. Failures are logged, not returned: the commit already succeeded. */
void ftrt__ckpt_retain(const char *dir, int64_t latest, int keep, int background);

/* Waits at most timeout_s seconds for the background deletions to finish. Returns how many are
 * still pending. Thread-safe. */
int ftrt__ckpt_retention_flush(double timeout_s);

#endif
