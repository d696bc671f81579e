/* fs.c - file-system helpers shared by the layers above (base/fs.h). */
#include <errno.h>
#include <fcntl.h>
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

FILE *ftrt__atomic_open(const char *path, char *tmp, size_t cap)
{
    struct stat st;
    if (cap > 0 && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* /dev/null, a FIFO, a terminal: written in place; a rename would put a regular file
         * where the device was (as root, /dev/null itself) */
        tmp[0] = '\0';
        return fopen(path, "w");
    }
    if (ftrt__path(tmp, cap, "%s.tmp.%d", path, (int)getpid())) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    return fopen(tmp, "w");
}

int ftrt__atomic_finish(FILE *f, const char *tmp, const char *path, int err)
{
    int e = err;
    if (fflush(f) != 0 && !e) e = -errno;
    if (fclose(f) != 0 && !e) e = -errno;
    if (!tmp[0]) return e; /* (written in place: not a regular file) */
    if (!e && rename(tmp, path) != 0) e = -errno;
    if (e) unlink(tmp);
    return e;
}

int ftrt__write_text_atomic(const char *path, const char *text, size_t len)
{
    char tmp[1200];
    FILE *f = ftrt__atomic_open(path, tmp, sizeof tmp);
    if (!f) return -errno;
    int e = fwrite(text, 1, len, f) == len ? 0 : (errno ? -errno : -EIO);
    return ftrt__atomic_finish(f, tmp, path, e);
}
