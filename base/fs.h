/*
 * fs.h - file-system helpers: paths, directories, atomic replacement (internal to libftrt;
 * base layer). All thread-safe; none logs.
 */
#ifndef FTRT_BASE_FS_H
#define FTRT_BASE_FS_H

#include <stddef.h>

struct json_object;

/* snprintf into buf[cap]. Returns 0 or -ENAMETOOLONG (buf then holds a truncated string). */
int ftrt__path(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* fsyncs the directory at path. Returns 0 or -errno. */
int ftrt__fsync_dir(const char *path);

/* Creates path and its missing parents (mode 0755). Returns 0 or -errno (-ENOTDIR when a
 * component is not a directory, -ENAMETOOLONG past 4095 bytes, -ENOENT for ""). */
int ftrt__mkdir_p(const char *path);

/* Writes o as pretty JSON to path atomically: a temp file "<path>.tmp.<pid>" in the same
 * directory, then rename (no fsync: status and report files, not checkpoint data). Returns 0
 * or -errno (the temp file is removed). */
int ftrt__write_json_atomic(const char *path, struct json_object *o);

/* Writes text[0..len) to path atomically, as ftrt__write_json_atomic does. Returns 0 or -errno
 * (the temp file is removed). */
int ftrt__write_text_atomic(const char *path, const char *text, size_t len);

#endif
