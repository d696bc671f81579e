/*
 * commit.c - the coordinator's commit of a checkpoint (MANIFEST, LATEST, retention), the
 * listing of committed checkpoints.
 *
 * A step directory counts only once it holds MANIFEST, which is written (temp, fsync, rename,
 * fsync the directory) after every shard's header was checked. LATEST is then replaced the
 * same way. Deleting a step directory unlinks MANIFEST first, so a crash half-way through a
 * deletion leaves an uncommitted directory, never a committed one with missing shards.
 *
 * MANIFEST (JSON):
 *   {"format":1,"step":S,"nranks":N,
 *    "shards":[{"rank":r,"file":"rank-r.ftrt","bytes":<file size>,"header_crc32c":<u32>},...]}
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/ckpt.h"
#include "checkpoint/format.h"
#include "ftrt.h"
#include "base/log.h"

/* ---- helpers ----------------------------------------------------------------------------- */

int ftrt__parse_step_name(const char *name, int64_t *step)
{
    if (strncmp(name, "step-", 5) != 0) return 0;
    const char *p = name + 5;
    if (*p < '0' || *p > '9') return 0;
    if (p[0] == '0' && p[1] != '\0') return 0; /* not canonical */
    uint64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        uint64_t d = (uint64_t)(*p - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) return 0; /* before it can wrap (fuzzing) */
        v = v * 10 + d;
    }
    *step = (int64_t)v;
    return 1;
}

/* Writes len bytes of text to <d>/<name> via <d>/<name>.tmp (fsync, rename, fsync d).
 * Returns 0 or -errno; the temp file is removed on failure. */
static int write_atomic(const char *d, const char *name, const char *text, size_t len)
{
    char tmp[4096], fin[4096];
    int rc;
    if ((rc = ftrt__path(tmp, sizeof tmp, "%s/%s.tmp", d, name)) < 0 ||
        (rc = ftrt__path(fin, sizeof fin, "%s/%s", d, name)) < 0)
        return rc;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            break;
        }
        done += (size_t)n;
    }
    if (rc == 0 && fsync(fd) < 0) rc = -errno;
    if (close(fd) < 0 && rc == 0) rc = -errno;
    if (rc == 0 && rename(tmp, fin) < 0) rc = -errno;
    if (rc < 0) {
        unlink(tmp);
        return rc;
    }
    return ftrt__fsync_dir(d);
}

static int is_committed(int dfd, int64_t step)
{
    char rel[64];
    struct stat st;
    snprintf(rel, sizeof rel, "step-%lld/MANIFEST", (long long)step);
    return fstatat(dfd, rel, &st, 0) == 0 && S_ISREG(st.st_mode);
}

/* Scans dir for canonical step directories. *out receives a malloc'd array (caller frees),
 * *committed a parallel malloc'd flag array. Returns the count or -errno. */
static int scan_steps(DIR *d, int64_t **out, unsigned char **committed)
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

/* Unlinks everything in the step directory sfd (consumed) and the directory itself. Failures
 * are logged, not returned: the commit already succeeded. */
static void delete_files(const char *dir, int dfd, int sfd, const char *name, const char *why)
{
    DIR *sd = fdopendir(sfd);
    if (!sd) {
        close(sfd);
        ftrt_log_warn("checkpoint retention: cannot read %s/%s: %s", dir, name, strerror(errno));
        return;
    }
    struct dirent *de;
    while ((de = readdir(sd)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        if (unlinkat(dirfd(sd), de->d_name, 0) < 0 && errno != ENOENT)
            ftrt_log_warn("checkpoint retention: cannot unlink %s/%s/%s: %s", dir, name,
                          de->d_name, strerror(errno));
    }
    closedir(sd);
    if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        ftrt_log_warn("checkpoint retention: cannot remove %s/%s: %s", dir, name, strerror(errno));
    else
        ftrt_log_info("checkpoint retention: removed %s/%s (%s)", dir, name, why);
}

/* ---- background deletion ------------------------------------------------------------------
 * Deleting a shard of a few GiB can take a second or more (file systems mounted with discard
 * trim the blocks synchronously), and the coordinator must not stop answering meanwhile. So
 * the coordinator's commits uncommit old steps at once (MANIFEST unlinked, synchronously) and
 * leave the files to this thread. A step directory without MANIFEST never counts, so a crash
 * before the thread is done leaves nothing but garbage that the next commit removes. */

typedef struct deljob {
    struct deljob *next;
    char *dir, *name, *why;
} deljob;

static pthread_mutex_t del_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t del_cond = PTHREAD_COND_INITIALIZER;
static deljob *del_head, *del_tail;
static int del_started, del_busy;

static void *del_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&del_lock);
    for (;;) {
        while (!del_head) pthread_cond_wait(&del_cond, &del_lock);
        deljob *j = del_head;
        del_head = j->next;
        if (!del_head) del_tail = NULL;
        del_busy = 1;
        pthread_mutex_unlock(&del_lock);
        int dfd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int sfd = dfd < 0 ? -1 : openat(dfd, j->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (sfd >= 0) delete_files(j->dir, dfd, sfd, j->name, j->why);
        if (dfd >= 0) close(dfd);
        free(j->dir);
        free(j->name);
        free(j->why);
        free(j);
        pthread_mutex_lock(&del_lock);
        del_busy = 0;
        pthread_cond_broadcast(&del_cond);
    }
    return NULL;
}

/* Queues <dir>/<name> for deletion. Returns 0, or -errno (the caller deletes it itself). */
static int del_enqueue(const char *dir, const char *name, const char *why)
{
    deljob *j = calloc(1, sizeof *j);
    if (!j || !(j->dir = strdup(dir)) || !(j->name = strdup(name)) || !(j->why = strdup(why))) {
        if (j) free(j->dir), free(j->name), free(j->why);
        free(j);
        return -ENOMEM;
    }
    pthread_mutex_lock(&del_lock);
    if (!del_started) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &a, del_main, NULL);
        pthread_attr_destroy(&a);
        if (rc) {
            pthread_mutex_unlock(&del_lock);
            free(j->dir), free(j->name), free(j->why), free(j);
            return -rc;
        }
        del_started = 1;
    }
    if (del_tail)
        del_tail->next = j;
    else
        del_head = j;
    del_tail = j;
    pthread_cond_broadcast(&del_cond);
    pthread_mutex_unlock(&del_lock);
    return 0;
}

int ftrt__ckpt_retention_flush(double timeout_s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double end = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + timeout_s;
    int left;
    pthread_mutex_lock(&del_lock);
    for (;;) {
        left = del_busy;
        for (deljob *j = del_head; j; j = j->next) left++;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
        if (!left || t >= end) break;
        double w = end - t < 0.05 ? end - t : 0.05;
        ts.tv_nsec += (long)(w * 1e9);
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&del_cond, &del_lock, &ts);
    }
    pthread_mutex_unlock(&del_lock);
    return left;
}

/* Deletes <dir>/step-<step>: MANIFEST first (uncommits it), then the other files, then the
 * directory (in the background when asked). Failures are logged, not returned: the commit
 * already succeeded. */
static void remove_step(const char *dir, int dfd, int64_t step, const char *why, int background)
{
    char name[64];
    snprintf(name, sizeof name, "step-%lld", (long long)step);
    int sfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (sfd < 0) {
        if (errno != ENOENT)
            ftrt_log_warn("checkpoint retention: cannot open %s/%s: %s", dir, name,
                          strerror(errno));
        return;
    }
    if (unlinkat(sfd, "MANIFEST", 0) < 0 && errno != ENOENT)
        ftrt_log_warn("checkpoint retention: cannot unlink %s/%s/MANIFEST: %s", dir, name,
                      strerror(errno));
    if (background && del_enqueue(dir, name, why) == 0) {
        close(sfd);
        return;
    }
    delete_files(dir, dfd, sfd, name, why);
}

/* Keeps `keep` committed steps: `latest` plus the newest others; removes the rest, and the
 * uncommitted step directories older than `latest`. */
static void retain(const char *dir, int64_t latest, int keep, int background)
{
    DIR *d = opendir(dir);
    int64_t *steps = NULL;
    unsigned char *committed = NULL;
    if (!d) {
        ftrt_log_warn("checkpoint retention: cannot read %s: %s", dir, strerror(errno));
        return;
    }
    int n = scan_steps(d, &steps, &committed);
    if (n < 0) {
        ftrt_log_warn("checkpoint retention: cannot read %s: %s", dir, strerror(-n));
        closedir(d);
        return;
    }
    int ncommitted = 0;
    for (int i = 0; i < n; i++) {
        if (committed[i]) steps[ncommitted++] = steps[i];
        else if (steps[i] < latest)
            remove_step(dir, dirfd(d), steps[i], "uncommitted", background);
    }
    if (ncommitted > 1) qsort(steps, (size_t)ncommitted, sizeof *steps, cmp_desc);
    int kept = 1; /* latest */
    for (int i = 0; i < ncommitted; i++) {
        if (steps[i] == latest) continue;
        if (kept < keep) kept++;
        else remove_step(dir, dirfd(d), steps[i], "beyond FTRT_CKPT_KEEP", background);
    }
    free(steps);
    free(committed);
    closedir(d);
    ftrt__fsync_dir(dir);
}

/* ---- commit ------------------------------------------------------------------------------ */

/* Checks that shard r's table agrees with shard 0's (same regions, flags, REPLICATED sizes). */
static int same_table(const ftrt__shard_hdr *h0, const ftrt__shard_ent *e0,
                      const ftrt__shard_hdr *h, const ftrt__shard_ent *e)
{
    if (h->nregions != h0->nregions) return 0;
    for (uint32_t i = 0; i < h->nregions; i++) {
        if (strcmp(e[i].name, e0[i].name) != 0 || e[i].flags != e0[i].flags) return 0;
        if (e[i].flags == FTRT_REGION_REPLICATED && e[i].total_bytes != e0[i].total_bytes)
            return 0;
    }
    return 1;
}

/* Checks every shard of the step and builds the MANIFEST's shard array. */
static int check_shards(const char *sdir, int64_t step, int nranks, json_object *shards)
{
    ftrt__io io;
    ftrt__shard_hdr h0 = {0};
    ftrt__shard_ent *e0 = NULL;
    int rc = 0;
    ftrt__io_init(&io);
    for (int r = 0; r < nranks && rc == 0; r++) {
        char path[4096], file[32];
        ftrt__shard_hdr h;
        ftrt__shard_ent *e = NULL;
        uint64_t size;
        snprintf(file, sizeof file, "rank-%d.ftrt", r);
        if ((rc = ftrt__path(path, sizeof path, "%s/%s", sdir, file)) < 0) break;
        int fd = ftrt__shard_open(&io, path, &size, &h, &e);
        if (fd < 0) {
            rc = fd;
            break;
        }
        close(fd);
        if (h.step != step || h.rank != (uint32_t)r || h.nranks != (uint32_t)nranks) {
            ftrt_log_warn("checkpoint shard %s is corrupt: header says step %lld rank %u of %u, "
                          "expected step %lld rank %d of %d",
                          path, (long long)h.step, h.rank, h.nranks, (long long)step, r, nranks);
            rc = FTRT_ECORRUPT;
        } else if (r > 0 && !same_table(&h0, e0, &h, e)) {
            ftrt_log_warn("checkpoint shard %s: its region table differs from rank 0's (names, "
                          "flags or REPLICATED sizes)",
                          path);
            rc = FTRT_ECORRUPT;
        } else {
            json_object *o = json_object_new_object();
            if (!o || json_object_array_add(shards, o) != 0) {
                json_object_put(o);
                rc = -ENOMEM;
            } else {
                json_object_object_add(o, "rank", json_object_new_int(r));
                json_object_object_add(o, "file", json_object_new_string(file));
                json_object_object_add(o, "bytes", json_object_new_int64((int64_t)size));
                json_object_object_add(o, "header_crc32c", json_object_new_int64(h.header_crc));
            }
        }
        if (r == 0 && rc == 0) {
            h0 = h;
            e0 = e;
        } else {
            free(e);
        }
    }
    free(e0);
    ftrt__io_exit(&io);
    return rc;
}

int ftrt__ckpt_commit(const char *dir, int64_t step, int nranks, int keep)
{
    return ftrt__ckpt_commit_ex(dir, step, nranks, keep, 0);
}

int ftrt__ckpt_commit_ex(const char *dir, int64_t step, int nranks, int keep, int background)
{
    char sdir[4096], latest[64];
    int rc;
    if (!dir || step < 0 || nranks < 1 || nranks > FTRT__MAX_RANKS) return -EINVAL;
    if (keep < 1) keep = 1;
    if ((rc = ftrt__path(sdir, sizeof sdir, "%s/step-%lld", dir, (long long)step)) < 0) return rc;

    json_object *root = json_object_new_object(), *shards = json_object_new_array();
    if (!root || !shards) {
        json_object_put(root);
        json_object_put(shards);
        return -ENOMEM;
    }
    json_object_object_add(root, "format", json_object_new_int(1));
    json_object_object_add(root, "step", json_object_new_int64(step));
    json_object_object_add(root, "nranks", json_object_new_int(nranks));
    json_object_object_add(root, "shards", shards);
    rc = check_shards(sdir, step, nranks, shards);
    if (rc == 0) {
        const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
        char *line = text ? malloc(strlen(text) + 2) : NULL;
        if (!line) {
            rc = -ENOMEM;
        } else {
            size_t n = strlen(text);
            memcpy(line, text, n);
            line[n] = '\n';
            line[n + 1] = '\0';
            rc = write_atomic(sdir, "MANIFEST", line, n + 1);
            free(line);
        }
    }
    json_object_put(root);
    if (rc == 0) rc = ftrt__fsync_dir(dir); /* the step directory's own entry */
    if (rc == 0) {
        int n = snprintf(latest, sizeof latest, "step-%lld\n", (long long)step);
        rc = write_atomic(dir, "LATEST", latest, (size_t)n);
        if (rc < 0) {
            /* Un-commit: the previous LATEST stays the newest committed checkpoint. */
            char man[4096];
            if (ftrt__path(man, sizeof man, "%s/MANIFEST", sdir) == 0) unlink(man);
        }
    }
    if (rc < 0) {
        ftrt_log_warn("checkpoint: commit of %s failed: %s", sdir,
                      rc == FTRT_ECORRUPT ? "a shard is corrupt" : strerror(-rc));
        return rc;
    }
    ftrt_log_info("checkpoint: committed step %lld (%d shards) in %s", (long long)step, nranks,
                  dir);
    retain(dir, step, keep, background);
    return 0;
}

/* ---- list -------------------------------------------------------------------------------- */

int ftrt__latest_parse(const char *buf, size_t len, int64_t *step)
{
    /* "step-<S>" with an optional '\n', nothing else (no NUL bytes, no second line). */
    char name[64];
    if (len > 0 && buf[len - 1] == '\n') len--;
    if (len == 0 || len >= sizeof name || memchr(buf, '\0', len) != NULL) return 0;
    memcpy(name, buf, len);
    name[len] = '\0';
    return ftrt__parse_step_name(name, step);
}

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
    int n = scan_steps(d, &all, &committed);
    closedir(d);
    if (n < 0) return n;
    int nc = 0;
    for (int i = 0; i < n; i++)
        if (committed[i] && !(have_latest && all[i] == latest)) all[nc++] = all[i];
    if (nc > 1) qsort(all, (size_t)nc, sizeof *all, cmp_desc);
    int out = 0;
    if (have_latest && out < max) steps[out++] = latest;
    for (int i = 0; i < nc && out < max; i++) steps[out++] = all[i];
    free(all);
    free(committed);
    return out;
}

/* ---- un-commit (silent data corruption) --------------------------------------------------- */

int ftrt__ckpt_uncommit_from(const char *dir, int64_t from, int64_t *latest)
{
    if (!dir || from < 0 || !latest) return -EINVAL;
    *latest = -1;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -errno;
    int64_t *steps = NULL;
    unsigned char *committed = NULL;
    int n = scan_steps(d, &steps, &committed);
    if (n < 0) {
        closedir(d);
        return n;
    }
    int64_t keep = -1;
    int nsuspect = 0;
    for (int i = 0; i < n; i++) {
        if (!committed[i]) continue;
        if (steps[i] >= from) nsuspect++;
        else if (steps[i] > keep) keep = steps[i];
    }
    int rc = 0;
    if (nsuspect > 0) {
        /* LATEST first: from here on it names a step that stays committed (or is gone). */
        if (keep >= 0) {
            char text[64];
            int len = snprintf(text, sizeof text, "step-%lld\n", (long long)keep);
            rc = write_atomic(dir, "LATEST", text, (size_t)len);
        } else if (unlinkat(dirfd(d), "LATEST", 0) < 0 && errno != ENOENT) {
            rc = -errno;
        }
        for (int i = 0; i < n && rc == 0; i++) {
            if (!committed[i] || steps[i] < from) continue;
            char rel[64];
            snprintf(rel, sizeof rel, "step-%lld/MANIFEST", (long long)steps[i]);
            if (unlinkat(dirfd(d), rel, 0) < 0 && errno != ENOENT) {
                rc = -errno;
                break;
            }
            char sdir[4096];
            if (ftrt__path(sdir, sizeof sdir, "%s/step-%lld", dir, (long long)steps[i]) == 0)
                ftrt__fsync_dir(sdir);
            ftrt_log_warn("checkpoint: step %lld un-committed (taken after the last step whose "
                          "replicas agreed)", (long long)steps[i]);
        }
        if (rc == 0) rc = ftrt__fsync_dir(dir);
    }
    free(steps);
    free(committed);
    closedir(d);
    if (rc < 0) {
        ftrt_log_error("checkpoint: cannot un-commit the steps from %lld in %s: %s",
                       (long long)from, dir, strerror(-rc));
        return rc;
    }
    *latest = keep;
    return nsuspect;
}
