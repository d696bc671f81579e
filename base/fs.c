/* fs.c - file-system helpers shared by the layers above (base/fs.h). */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"

int ftrt__path(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return (n < 0 || (size_t)n >= cap) ? -ENAMETOOLONG : 0;
}

int ftrt__fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

static int mkdir_one(const char *path)
{
    struct stat st;
    if (mkdir(path, 0755) == 0) return 0;
    int e = errno;
    if (e != EEXIST) return -e;
    if (stat(path, &st) < 0) return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int ftrt__mkdir_p(const char *path)
{
    char buf[4096];
    int rc = ftrt__path(buf, sizeof buf, "%s", path);
    if (rc < 0) return rc;
    if (buf[0] == '\0') return -ENOENT;
    if (mkdir_one(buf) == 0) return 0; /* common case: parent exists */
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        rc = (p[-1] == '/') ? 0 : mkdir_one(buf);
        *p = '/';
        if (rc < 0) return rc;
    }
    return mkdir_one(buf);
}

/* Writes a[0..alen) then b[0..blen) to path through "<path>.tmp.<pid>" and a rename. */
static int write2_atomic(const char *path, const char *a, size_t alen, const char *b,
                         size_t blen)
{
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return -errno;
    int ok = fwrite(a, 1, alen, f) == alen && fwrite(b, 1, blen, f) == blen;
    ok = (fflush(f) == 0) && ok;
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok || rename(tmp, path) != 0) {
        if (ok) e = errno;
        unlink(tmp);
        return -e;
    }
    return 0;
}

int ftrt__write_text_atomic(const char *path, const char *text, size_t len)
{
    return write2_atomic(path, text, len, "", 0);
}

int ftrt__write_json_atomic(const char *path, json_object *o)
{
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY);
    return s ? write2_atomic(path, s, strlen(s), "\n", 1) : -ENOMEM;
}
