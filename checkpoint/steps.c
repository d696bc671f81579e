/*
 * steps.c - the step directories of a checkpoint directory (steps.h): which exist and which are
 * committed (have a MANIFEST, format.h), the step LATEST names, and the listing of committed
 * steps newest first. Read-only; commit.c and retention.c build on the scan.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "checkpoint/format.h"
#include "checkpoint/steps.h"

/* ---- scan -------------------------------------------------------------------------------- */

static int is_committed(int dfd, int64_t step)
{
    char rel[64];
    struct stat st;
    snprintf(rel, sizeof rel, "step-%lld/MANIFEST", (long long)step);
    return fstatat(dfd, rel, &st, 0) == 0 && S_ISREG(st.st_mode);
}

int ftrt__ckpt_scan_steps(DIR *d, int64_t **out, unsigned char **committed)
{
    int n = 0, cap = 0;
    int64_t *v = NULL;
    unsigned char *c = NULL;
    struct dirent *de;
    rewinddir(d);
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        int64_t s;
        struct stat st;
        if (!ftrt__parse_step_name(de->d_name, &s)) continue;
        if (de->d_type == DT_UNKNOWN) {
            if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
                continue;
        } else if (de->d_type != DT_DIR) {
            continue;
        }
        if (n == cap) {
            int nc = cap ? 2 * cap : 16;
            int64_t *nv = realloc(v, (size_t)nc * sizeof *nv);
            if (!nv) goto nomem;
            v = nv;
            unsigned char *ncm = realloc(c, (size_t)nc);
            if (!ncm) goto nomem;
            c = ncm;
            cap = nc;
        }
        v[n] = s;
        c[n] = (unsigned char)is_committed(dirfd(d), s);
        n++;
        errno = 0;
    }
    if (errno != 0) {
        int e = errno;
        free(v);
        free(c);
        return -e;
    }
    *out = v;
    *committed = c;
    return n;
nomem:
    free(v);
    free(c);
    return -ENOMEM;
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

void ftrt__ckpt_sort_steps(int64_t *steps, int n)
{
    if (n > 1) qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
}

/* ---- list -------------------------------------------------------------------------------- */

/* Reads <dir>/LATEST. Returns 1 with *step set when it names a committed step, else 0 (a bad
 * or dangling LATEST is logged at warn; a missing one silently). */
static int read_latest(const char *dir, int dfd, int64_t *step)
{
    char buf[64];
    int fd = openat(dfd, "LATEST", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            ftrt_log_warn("checkpoint: cannot open %s/LATEST: %s: ignored", dir, strerror(errno));
        return 0;
    }
    ssize_t n;
    do n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n < 0) {
        ftrt_log_warn("checkpoint: cannot read %s/LATEST: %s: ignored", dir, strerror(errno));
        return 0;
    }
    if (n == (ssize_t)sizeof buf - 1 || !ftrt__latest_parse(buf, (size_t)n, step)) {
        ftrt_log_warn("checkpoint: %s/LATEST is garbage: ignored", dir);
        return 0;
    }
    if (!is_committed(dfd, *step)) {
        ftrt_log_warn("checkpoint: %s/LATEST points to step-%lld, which has no MANIFEST: "
                      "ignored", dir, (long long)*step);
        return 0;
    }
    return 1;
}

int ftrt__ckpt_list(const char *dir, int64_t *steps, int max)
{
    if (!dir || max < 0 || (max > 0 && !steps)) return -EINVAL;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -errno;
    int64_t latest = -1, *all = NULL;
    unsigned char *committed = NULL;
    int have_latest = read_latest(dir, dirfd(d), &latest);
    int n = ftrt__ckpt_scan_steps(d, &all, &committed);
    closedir(d);
    if (n < 0) return n;
    int nc = 0;
    for (int i = 0; i < n; i++)
        if (committed[i] && !(have_latest && all[i] == latest)) all[nc++] = all[i];
    ftrt__ckpt_sort_steps(all, nc);
    int out = 0;
    if (have_latest && out < max) steps[out++] = latest;
    for (int i = 0; i < nc && out < max; i++) steps[out++] = all[i];
    free(all);
    free(committed);
    return out;
}
