/*
 * retention.c - keeping the newest FTRT_CKPT_KEEP committed checkpoints (retention.h): after
 * each commit, the committed steps beyond the newest `keep` (never the one LATEST names) and
 * the uncommitted step directories older than the new step are removed.
 *
 * A step is removed MANIFEST first, so a crash half-way through a deletion leaves an
 * uncommitted directory (which the next commit removes), never a committed one with missing
 * shards. Deleting a shard of a few GiB can take a second or more (file systems mounted with
 * discard trim the blocks synchronously), and the coordinator must not stop answering
 * meanwhile: with `background`, the MANIFEST is unlinked at once and the files are left to a
 * detached deletion thread, which ftrt__ckpt_retention_flush() waits for (bounded).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/log.h"
#include "checkpoint/steps.h"
#include "checkpoint/retention.h"

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

void ftrt__ckpt_retain(const char *dir, int64_t latest, int keep, int background)
{
    DIR *d = opendir(dir);
    int64_t *steps = NULL;
    unsigned char *committed = NULL;
    if (!d) {
        ftrt_log_warn("checkpoint retention: cannot read %s: %s", dir, strerror(errno));
        return;
    }
    int n = ftrt__ckpt_scan_steps(d, &steps, &committed);
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
    ftrt__ckpt_sort_steps(steps, ncommitted);
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
