/*
 * fs.h - file-system helpers: paths, directories, atomic replacement (internal to libftrt;
 * base layer). All thread-safe; none logs.
 */
#ifndef FTRT_BASE_FS_H
#define FTRT_BASE_FS_H

#include <stddef.h>
#include <stdio.h>

/* snprintf into buf[cap]. Returns 0 or -ENAMETOOLONG (buf then holds a truncated string). */
int ftrt__path(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* fsyncs the directory at path. Returns 0 or -errno. */
int ftrt__fsync_dir(const char *path);

/* Creates path and its missing parents (mode 0755). Returns 0 or -errno (-ENOTDIR when a
 * component is not a directory, -ENAMETOOLONG past 4095 bytes, -ENOENT for ""). */
int ftrt__mkdir_p(const char *path);

/* Atomic replacement of a file (status and report files, not checkpoint data: no fsync): the
 * text goes to a temp file "<path>.tmp.<pid>" in the same directory, then a rename. A path that
 * names something other than a regular file (/dev/null, a FIFO, a terminal) is written in
 * place instead, never renamed over: as root, a rename over /dev/null replaced the device with
 * a regular file for every process of the machine. */

/* Opens the temp file for path, writing its name into tmp[cap] (cap >= strlen(path) + 20 is
 * enough; tmp[0] = '\0' when path is not a regular file and is opened itself). Returns the
 * stream, or NULL with errno set (ENAMETOOLONG when tmp cannot hold the name). */
FILE *ftrt__atomic_open(const char *path, char *tmp, size_t cap);

/* Finishes what ftrt__atomic_open began: flushes and closes f (always), then renames tmp over
 * path when err is 0 and the flush and close succeeded; otherwise removes tmp and leaves path
 * as it was. err: 0, or an error the caller met while writing (-errno). Returns 0 or -errno
 * (err itself when nonzero). */
int ftrt__atomic_finish(FILE *f, const char *tmp, const char *path, int err);

/* Writes text[0..len) to path atomically (temp file + rename, as above). Returns 0 or -errno
 * (the temp file is removed). */
int ftrt__write_text_atomic(const char *path, const char *text, size_t len);

#endif
