/*
 * commit.c - the coordinator's side of a checkpoint directory (commit.h): the commit of a step
 * (MANIFEST, LATEST, then retention.c) and the un-commit of steps taken after silent data
 * corruption.
 *
 * A step directory counts only once it holds MANIFEST (format.h), which is written (temp,
 * fsync, rename, fsync the directory) after every shard's header was checked. LATEST is then
 * replaced the same way. The N header checks (open, fstat, one pread of the first 4 KiB,
 * parse, close) run on a few threads, each taking blocks of ranks, so that on a cold cache or
 * a parallel file system their latencies overlap; the MANIFEST is built from their results
 * afterwards, in rank order (bench/commit_scale.c measures it, docs/benchmarks.md). Un-committing a step unlinks its MANIFEST after LATEST was pointed
 * away from it, so a crash half-way never leaves LATEST naming an uncommitted step.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fs.h"
#include "base/log.h"
#include "checkpoint/commit.h"
#include "checkpoint/format.h"
#include "checkpoint/io.h"
#include "checkpoint/retention.h"
#include "checkpoint/shard.h"
#include "checkpoint/steps.h"
#include "ftrt.h"

/* ---- helpers ----------------------------------------------------------------------------- */

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

/* ---- commit ------------------------------------------------------------------------------ */

/* Checks that shard r's table agrees with shard 0's (same regions, kinds, REPLICATED sizes). */
static int same_table(const ftrt__shard_hdr *h0, const ftrt__shard_ent *e0,
                      const ftrt__shard_hdr *h, const ftrt__shard_ent *e)
{
    if (h->nregions != h0->nregions) return 0;
    for (uint32_t i = 0; i < h->nregions; i++) {
        if (strcmp(e[i].name, e0[i].name) != 0 || e[i].kind != e0[i].kind) return 0;
        if (e[i].kind == FTRT__KIND_REPLICATED && e[i].total_bytes != e0[i].total_bytes)
            return 0;
    }
    return 1;
}

/* Shard checks per thread: a thread is started for every CHECKS_PER_THREAD shards, at most
 * CHECK_THREADS of them. On a page-cached file system a check is a few microseconds of CPU
 * (open, fstat, one pread, parse, close); on a cold cache or a parallel file system it is the
 * latency of an open and a read, which the threads overlap. */
#define CHECKS_PER_THREAD 256
#define CHECK_THREADS 16
/* Ranks a thread takes at a time. */
#define CHECK_BLOCK 64

/* The header checks of one commit, shared by its threads. */
typedef struct checks {
    const char *sdir;
    int64_t step;
    int nranks;
    ftrt__shard_hdr h0;        /* rank 0's header and table (checked first) */
    ftrt__shard_ent *e0;
    uint64_t *bytes;           /* per rank: file size */
    uint32_t *hcrc;            /* per rank: header CRC */
    atomic_int next;           /* the next rank to hand out */
    atomic_int rc;             /* the first error, or 0 */
} checks;

/* Checks shard r: it exists and has a valid header for (step, r, nranks) whose table agrees
 * with rank 0's (r > 0). Records its size and header CRC; rank 0's header and table are kept.
 * Returns 0, FTRT_ECORRUPT, -ENOENT or -errno (logged). */
static int check_one(checks *x, ftrt__io *io, int r)
{
    char path[4096];
    ftrt__shard_hdr h;
    ftrt__shard_ent *e = NULL;
    uint64_t size;
    int rc = ftrt__path(path, sizeof path, "%s/rank-%d.ftrt", x->sdir, r);
    int fd = rc < 0 ? rc : ftrt__shard_open(io, path, &size, &h, &e);
    if (fd < 0) return fd;
    close(fd);
    if (h.step != x->step || h.rank != (uint32_t)r || h.nranks != (uint32_t)x->nranks) {
        ftrt_log_warn("checkpoint shard %s is corrupt: header says step %lld rank %u of %u, "
                      "expected step %lld rank %d of %d",
                      path, (long long)h.step, h.rank, h.nranks, (long long)x->step, r,
                      x->nranks);
        rc = FTRT_ECORRUPT;
    } else if (r > 0 && !same_table(&x->h0, x->e0, &h, e)) {
        ftrt_log_warn("checkpoint shard %s: its region table differs from rank 0's (names, "
                      "kinds or REPLICATED sizes)",
                      path);
        rc = FTRT_ECORRUPT;
    }
    if (rc == 0) {
        x->bytes[r] = size;
        x->hcrc[r] = h.header_crc;
    }
    if (r == 0 && rc == 0) {
        x->h0 = h;
        x->e0 = e;
    } else {
        free(e);
    }
    return rc;
}

/* A checking thread: blocks of CHECK_BLOCK ranks until none is left or one failed. */
static void *check_main(void *arg)
{
    checks *x = arg;
    ftrt__io io;
    ftrt__io_init(&io, FTRT__IO_ENTRIES);
    for (;;) {
        int r0 = atomic_fetch_add(&x->next, CHECK_BLOCK);
        if (r0 >= x->nranks || atomic_load(&x->rc)) break;
        int r1 = r0 + CHECK_BLOCK < x->nranks ? r0 + CHECK_BLOCK : x->nranks;
        for (int r = r0; r < r1; r++) {
            int rc = check_one(x, &io, r);
            if (rc) {
                int zero = 0;
                atomic_compare_exchange_strong(&x->rc, &zero, rc);
                break;
            }
        }
    }
    ftrt__io_exit(&io);
    return NULL;
}

/* Checks every shard of the step (rank 0 first, then the others on up to `threads` threads;
 * threads <= 0: one per CHECKS_PER_THREAD shards, at most CHECK_THREADS) and fills x->bytes and
 * x->hcrc. Returns 0 or the first error found. *used receives the threads used. */
static int check_shards(checks *x, int threads, int *used)
{
    ftrt__io io;
    ftrt__io_init(&io, FTRT__IO_ENTRIES);
    int rc = check_one(x, &io, 0);
    ftrt__io_exit(&io);
    if (threads <= 0) threads = (x->nranks - 1) / CHECKS_PER_THREAD + 1;
    if (threads > CHECK_THREADS) threads = CHECK_THREADS;
    *used = 1;
    if (rc) return rc;
    atomic_init(&x->next, 1);
    atomic_init(&x->rc, 0);
    pthread_t th[CHECK_THREADS];
    int n = 0;
    while (n < threads - 1 && pthread_create(&th[n], NULL, check_main, x) == 0) n++;
    check_main(x); /* this thread too (alone when no thread could be started) */
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    *used = n + 1;
    return atomic_load(&x->rc);
}

/* The MANIFEST's text (format.h): one line of JSON, malloc'd into *text (*len bytes, the
 * newline included). Printed directly: every value is an integer or a file name of digits, so
 * nothing needs escaping, and json-c's tree of 4N objects took 40 ms at 16,384 shards here.
 * Returns 0 or -ENOMEM. */
static int manifest_text(const checks *x, char **text, size_t *len)
{
    /* {"rank":r,"file":"rank-r.ftrt","bytes":b,"header_crc32c":c}, at most 118 bytes */
    enum { ENTRY_MAX = 128, HEAD_MAX = 96 };
    size_t cap = HEAD_MAX + (size_t)x->nranks * ENTRY_MAX + 8;
    char *t = malloc(cap);
    if (!t) return -ENOMEM;
    size_t n = (size_t)snprintf(t, cap, "{\"format\":1,\"step\":%lld,\"nranks\":%d,\"shards\":[",
                                (long long)x->step, x->nranks);
    for (int r = 0; r < x->nranks; r++)
        n += (size_t)snprintf(t + n, cap - n,
                              "%s{\"rank\":%d,\"file\":\"rank-%d.ftrt\",\"bytes\":%llu,"
                              "\"header_crc32c\":%u}",
                              r ? "," : "", r, r, (unsigned long long)x->bytes[r], x->hcrc[r]);
    n += (size_t)snprintf(t + n, cap - n, "]}\n");
    *text = t;
    *len = n;
    return 0;
}

int ftrt__ckpt_commit(const char *dir, int64_t step, int nranks, int keep)
{
    return ftrt__ckpt_commit_run(dir, step, nranks, keep, 0, 0, NULL);
}

int ftrt__ckpt_commit_ex(const char *dir, int64_t step, int nranks, int keep, int background)
{
    return ftrt__ckpt_commit_run(dir, step, nranks, keep, background, 0, NULL);
}

/* Writes the MANIFEST of the checked step and replaces LATEST (un-committing the step when
 * LATEST cannot be replaced). Returns 0 or -errno / -ENOMEM. */
static int publish(const char *dir, const char *sdir, const checks *x, ftrt__commit_times *t)
{
    char *text = NULL, latest[64];
    size_t len = 0;
    double t0 = ftrt__now();
    int rc = manifest_text(x, &text, &len);
    if (rc == 0) rc = write_atomic(sdir, "MANIFEST", text, len);
    free(text);
    if (rc == 0) rc = ftrt__fsync_dir(dir); /* the step directory's own entry */
    double t1 = ftrt__now();
    if (rc == 0) {
        int n = snprintf(latest, sizeof latest, "step-%lld\n", (long long)x->step);
        rc = write_atomic(dir, "LATEST", latest, (size_t)n);
        if (rc < 0) {
            /* Un-commit: the previous LATEST stays the newest committed checkpoint. */
            char man[4096];
            if (ftrt__path(man, sizeof man, "%s/MANIFEST", sdir) == 0) unlink(man);
        }
    }
    if (t) {
        t->manifest_s = t1 - t0;
        t->latest_s = ftrt__now() - t1;
    }
    return rc;
}

int ftrt__ckpt_commit_run(const char *dir, int64_t step, int nranks, int keep, int background,
                          int threads, ftrt__commit_times *t)
{
    char sdir[4096];
    int rc, used = 0;
    if (!dir || step < 0 || nranks < 1 || nranks > FTRT__MAX_RANKS) return -EINVAL;
    if (keep < 1) keep = 1;
    if ((rc = ftrt__path(sdir, sizeof sdir, "%s/step-%lld", dir, (long long)step)) < 0) return rc;
    checks x = {.sdir = sdir, .step = step, .nranks = nranks,
                .bytes = malloc((size_t)nranks * sizeof(uint64_t)),
                .hcrc = malloc((size_t)nranks * sizeof(uint32_t))};
    double t0 = ftrt__now();
    rc = x.bytes && x.hcrc ? check_shards(&x, threads, &used) : -ENOMEM;
    if (t) *t = (ftrt__commit_times){.check_s = ftrt__now() - t0, .threads = used};
    if (rc == 0) rc = publish(dir, sdir, &x, t);
    free(x.e0);
    free(x.bytes);
    free(x.hcrc);
    if (rc < 0) {
        ftrt_log_warn("checkpoint: commit of %s failed: %s", sdir,
                      rc == FTRT_ECORRUPT ? "a shard is corrupt" : strerror(-rc));
        return rc;
    }
    ftrt_log_info("checkpoint: committed step %lld (%d shards) in %s", (long long)step, nranks,
                  dir);
    ftrt__ckpt_retain(dir, step, keep, background);
    return 0;
}

/* ---- un-commit (silent data corruption) -------------------------------------------------- */

int ftrt__ckpt_uncommit_from(const char *dir, int64_t from, int64_t *latest)
{
    if (!dir || from < 0 || !latest) return -EINVAL;
    *latest = -1;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -errno;
    int64_t *steps = NULL;
    unsigned char *committed = NULL;
    int n = ftrt__ckpt_scan_steps(d, &steps, &committed);
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
