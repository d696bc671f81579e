/*
 * commit.c - the coordinator's side of a checkpoint directory (commit.h): the commit of a step
 * (MANIFEST, LATEST, then retention.c) and the un-commit of steps taken after silent data
 * corruption.
 *
 * A step directory counts only once it holds MANIFEST (format.h), which is written (temp,
 * fsync, rename, fsync the directory) after every shard's header was checked. LATEST is then
 * replaced the same way. Un-committing a step unlinks its MANIFEST after LATEST was pointed
 * away from it, so a crash half-way never leaves LATEST naming an uncommitted step.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Checks every shard of the step and builds the MANIFEST's shard array. */
static int check_shards(const char *sdir, int64_t step, int nranks, json_object *shards)
{
    ftrt__io io;
    ftrt__shard_hdr h0 = {0};
    ftrt__shard_ent *e0 = NULL;
    int rc = 0;
    ftrt__io_init(&io, FTRT__IO_ENTRIES);
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
                          "kinds or REPLICATED sizes)",
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
