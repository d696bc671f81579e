/*
 * commit_scale.c - the checkpoint commit at 16,384+ shards (docs/benchmarks.md "Checkpoint
 * commit at scale"; bench/commit_scale.py runs it with the code before and after).
 *
 * What the coordinator's commit thread (runtime/coordinator/committer.c) does once the last
 * trainer's SHARD_DONE is in: ftrt__ckpt_commit_ex (checkpoint/commit.c) opens and checks the
 * header of each of the N shards, writes and fsyncs the MANIFEST of N entries, and replaces
 * LATEST. This program times exactly that call, from its start to its return (LATEST
 * replaced), on N small shard files (one SHARDED region of 64 bytes: 8 KiB a file) that it
 * writes once per directory and size:
 *
 *   warm: the shards' pages are in the page cache (they were just written or read);
 *   cold: before each commit every shard's pages are dropped (fsync'ed, then
 *         posix_fadvise(POSIX_FADV_DONTNEED)), so the header reads go to the device; the
 *         inodes and directory entries stay cached (dropping those needs the system-wide
 *         drop_caches, which this program does not touch). On tmpfs there is nothing to drop.
 *
 * Built against a tree that has ftrt__ckpt_commit_run (FTRT__CKPT_COMMIT_RUN), it also prints
 * where the time went (header checks, MANIFEST, LATEST) and the commit with the headers checked
 * by one thread. For reference it times the system calls alone of a serial check (open, fstat,
 * pread of 4 KiB, close per shard).
 *
 * Output: human lines, then one "RESULT key=value ..." line per (size, cache state, variant):
 * variant "commit" (ftrt__ckpt_commit_ex as the coordinator calls it), "threads1" (one checking
 * thread), "syscalls"; commit_ms = p50 of --reps commits, check_ms / manifest_ms / latest_ms
 * their parts (p50), threads. Exit status 0, 1 when a commit failed, 2 on a usage or setup error.
 *
 * Usage: commit_scale [--dir DIR] [--reps R] [--cold-only | --warm-only] N [N ...]
 * DIR (default /dev/shm/ftrt-commit-scale) holds one checkpoint directory per size, n<N>/,
 * kept for the next run (remove it yourself).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/crc32c.h"
#include "base/log.h"
#include "checkpoint/commit.h"
#include "checkpoint/shard.h"
#include "ftrt.h"

#define STEP 5

static char opt_dir[512] = "/dev/shm/ftrt-commit-scale";
static int opt_reps = 5, opt_warm = 1, opt_cold = 1;

/* Writes rank r's shard of n (8 KiB) into sdir. Returns 0 or -1. */
static int write_shard(const char *sdir, int r, int n)
{
    static unsigned char img[8192];
    ftrt__region reg = {.name = "w", .bytes = 64, .kind = FTRT__KIND_SHARDED};
    ftrt__shard_ent e[1];
    memset(img, 0, sizeof img);
    memset(e, 0, sizeof e);
    uint64_t size = ftrt__shard_layout(&reg, 1, r, n, e, FTRT__SHARD_HDR_BYTES + FTRT__SHARD_ENT_BYTES);
    if (size > sizeof img) return -1;
    memset(img + e[0].file_offset, 0x5a, 64);
    e[0].data_crc = ftrt__crc32c(0, img + e[0].file_offset, 64);
    ftrt__shard_hdr h = {.version = FTRT__SHARD_VERSION,
                         .table_bytes = FTRT__SHARD_HDR_BYTES + FTRT__SHARD_ENT_BYTES,
                         .step = STEP, .rank = (uint32_t)r, .nranks = (uint32_t)n, .nregions = 1};
    ftrt__shard_encode(img, &h, e);
    char f[1024];
    snprintf(f, sizeof f, "%s/rank-%d.ftrt", sdir, r);
    int fd = open(f, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    int ok = pwrite(fd, img, size, 0) == (ssize_t)size;
    return close(fd) == 0 && ok ? 0 : -1;
}

/* The shards of size n under cdir (written unless the last one is there already). */
static int ensure_shards(const char *cdir, int n)
{
    char sdir[768], last[1024];
    snprintf(sdir, sizeof sdir, "%s/step-%d", cdir, STEP);
    snprintf(last, sizeof last, "%s/rank-%d.ftrt", sdir, n - 1);
    mkdir(opt_dir, 0755);
    mkdir(cdir, 0755);
    mkdir(sdir, 0755);
    if (access(last, F_OK) == 0) return 0;
    double t = ftrt__now();
    for (int r = 0; r < n; r++)
        if (write_shard(sdir, r, n)) {
            fprintf(stderr, "commit_scale: cannot write shard %d in %s: %s\n", r, sdir,
                    strerror(errno));
            return -1;
        }
    sync();
    printf("N=%d: wrote %d shards of 8 KiB in %.1f s (%s)\n", n, n, ftrt__now() - t, sdir);
    return 0;
}

/* Drops the page-cache pages of every shard of size n (cold runs). */
static void drop_pages(const char *cdir, int n)
{
    for (int r = 0; r < n; r++) {
        char f[1024];
        snprintf(f, sizeof f, "%s/step-%d/rank-%d.ftrt", cdir, STEP, r);
        int fd = open(f, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        if (fdatasync(fd) == 0) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

/* The system calls of a serial check alone, seconds. */
static double syscalls_only(const char *cdir, int n)
{
    double t = ftrt__now();
    for (int r = 0; r < n; r++) {
        char f[1024], b[4096];
        struct stat st;
        snprintf(f, sizeof f, "%s/step-%d/rank-%d.ftrt", cdir, STEP, r);
        int fd = open(f, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) || pread(fd, b, sizeof b, 0) < 0) return -1;
        close(fd);
    }
    return ftrt__now() - t;
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double p50(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[(n - 1) / 2];
}

/* One variant: --reps commits (0: ftrt__ckpt_commit_ex; 1: one checking thread; 2: the
 * system calls only), p50s printed. Returns 0 or 1 when a commit failed. */
static int measure(const char *cdir, int n, int cold, int variant)
{
    static const char *names[] = {"commit", "threads1", "syscalls"};
    double tot[64], chk[64], man[64], lat[64];
    int thr = 0, fails = 0, reps = opt_reps > 64 ? 64 : opt_reps;
    for (int i = 0; i < reps; i++) {
        if (cold) drop_pages(cdir, n);
        chk[i] = man[i] = lat[i] = -1;
        double t = ftrt__now();
        int rc = 0;
        if (variant == 2) {
            tot[i] = syscalls_only(cdir, n);
            continue;
        }
#ifdef FTRT__CKPT_COMMIT_RUN
        ftrt__commit_times ct;
        rc = ftrt__ckpt_commit_run(cdir, STEP, n, 2, 0, variant == 1 ? 1 : 0, &ct);
        chk[i] = ct.check_s;
        man[i] = ct.manifest_s;
        lat[i] = ct.latest_s;
        thr = ct.threads;
#else
        if (variant == 1) return 0; /* (an older tree: one variant) */
        rc = ftrt__ckpt_commit_ex(cdir, STEP, n, 2, 0);
#endif
        tot[i] = ftrt__now() - t;
        if (rc) {
            fprintf(stderr, "commit_scale: commit of %d shards failed: %s\n", n,
                    ftrt_strerror(rc));
            fails++;
        }
    }
    double c = p50(tot, reps), k = p50(chk, reps), m = p50(man, reps), l = p50(lat, reps);
    printf("N=%d %s %s: p50 of %d: %.1f ms", n, cold ? "cold" : "warm", names[variant], reps,
           c * 1e3);
    if (k >= 0)
        printf(" (header checks %.1f ms on %d thread(s), MANIFEST %.1f ms, LATEST %.1f ms)",
               k * 1e3, thr, m * 1e3, l * 1e3);
    printf("\nRESULT n=%d cache=%s variant=%s commit_ms=%.3f check_ms=%.3f manifest_ms=%.3f "
           "latest_ms=%.3f threads=%d reps=%d fails=%d\n",
           n, cold ? "cold" : "warm", names[variant], c * 1e3, k * 1e3, m * 1e3, l * 1e3, thr,
           reps, fails);
    fflush(stdout);
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"dir", 1, 0, 'd'},       {"reps", 1, 0, 'r'},
                                       {"cold-only", 0, 0, 'c'}, {"warm-only", 0, 0, 'w'},
                                       {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'd': snprintf(opt_dir, sizeof opt_dir, "%s", optarg); break;
        case 'r': opt_reps = atoi(optarg); break;
        case 'c': opt_warm = 0; break;
        case 'w': opt_cold = 0; break;
        default:
            fprintf(stderr, "usage: commit_scale [--dir DIR] [--reps R] [--cold-only | "
                            "--warm-only] N [N ...]\n");
            return 2;
        }
    }
    if (optind >= argc || opt_reps < 1) {
        fprintf(stderr, "usage: commit_scale [--dir DIR] [--reps R] [--cold-only | "
                        "--warm-only] N [N ...]\n");
        return 2;
    }
    ftrt__log_level = FTRT__LOG_WARN; /* a failed commit says why */
    int rc = 0;
    for (int a = optind; a < argc; a++) {
        int n = atoi(argv[a]);
        char cdir[640];
        if (n < 1) {
            fprintf(stderr, "commit_scale: bad size %s\n", argv[a]);
            return 2;
        }
        snprintf(cdir, sizeof cdir, "%s/n%d", opt_dir, n);
        if (ensure_shards(cdir, n)) return 2;
        for (int cold = 0; cold < 2; cold++) {
            if ((cold && !opt_cold) || (!cold && !opt_warm)) continue;
            for (int v = 0; v < 3; v++) rc |= measure(cdir, n, cold, v);
        }
    }
    return rc;
}
