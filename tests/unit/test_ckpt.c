/*
 * test_ckpt.c - checkpoint shards, commit, list and load on a real filesystem: round trips for
 * several numbers of trainers (io_uring and the synchronous fallback), restoring to another
 * number of trainers (the slice arithmetic of REPLICATED regions included), registered regions
 * that differ from the checkpoint's, uncommitted steps, retention, failing writes, the commit's
 * header checks on several threads, and a region table past 4 KiB. Damaged checkpoints and the
 * parsers are test_ckpt_corrupt.c's; the shared arrangement is ckpt_fixture.h. Scratch
 * directories are created under $FTRT_TEST_TMP (or /tmp).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/knobs.h"
#include "base/log.h"
#include "checkpoint/commit.h"
#include "checkpoint/format.h"
#include "checkpoint/io.h"
#include "checkpoint/restore.h"
#include "checkpoint/shard.h"
#include "checkpoint/steps.h"
#include "ckpt_fixture.h"
#include "ftrt.h"
#include "helpers.h"

/* ---- round trips ------------------------------------------------------------------------- */

static void round_trip(int n)
{
    char dir[4096];
    int64_t steps[8];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 100, n, 1, 2);
    assert_true(path_exists("%s/step-100/MANIFEST", dir));
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 1);
    assert_int_equal(steps[0], 100);
    for (int r = 0; r < n; r++) assert_int_equal(load_and_check(dir, 100, r, n, 1), 0);
    /* The loaded bytes are really the checkpoint's, not a coincidence of the pattern: a
     * different step's expected state must not match. */
    state got, other;
    make_state(&got, 100, 0, 1, 1);
    make_state(&other, 101, 0, 1, 0);
    assert_int_equal(ftrt__ckpt_load(dir, 100, 0, n, got.r, got.n), 0);
    assert_memory_not_equal(got.r[0].ptr, other.r[0].ptr, got.r[0].bytes);
    free_state(&got);
    free_state(&other);
    rm_rf(dir);
}

static void test_round_trip_n1(void **st)
{
    (void)st;
    round_trip(1);
}

static void test_round_trip_n3(void **st)
{
    (void)st;
    round_trip(3);
}

static void test_round_trip_n4(void **st)
{
    (void)st;
    round_trip(4);
}

static void test_round_trip_sync_fallback(void **st)
{
    (void)st;
    ftrt__knobs.io_force_sync = 1;
    round_trip(3);
    ftrt__knobs.io_force_sync = 0;
}

/* A region larger than several staging chunks (8 MiB each), io_uring and fallback. */
static void test_multi_chunk(void **st)
{
    (void)st;
    for (int sync = 0; sync < 2; sync++) {
        char dir[4096];
        size_t big = 3 * (8u << 20) + 12345;
        ftrt__knobs.io_force_sync = sync;
        make_tmpdir(dir, sizeof dir);
        ftrt__region w[2] = {{.name = "big", .bytes = big, .kind = FTRT__KIND_SHARDED},
                             {.name = "tail", .bytes = 5000, .kind = FTRT__KIND_REPLICATED}};
        w[0].ptr = malloc(big);
        w[1].ptr = malloc(5000);
        assert_non_null(w[0].ptr);
        assert_non_null(w[1].ptr);
        t_fill(w[0].ptr, big, 42);
        t_fill(w[1].ptr, 5000, 43);
        assert_int_equal(ftrt__shard_write(dir, 7, 0, 1, w, 2), 0);
        assert_int_equal(ftrt__ckpt_commit(dir, 7, 1, 2), 0);
        ftrt__region g[2] = {w[0], w[1]};
        g[0].ptr = calloc(1, big);
        g[1].ptr = calloc(1, 5000);
        assert_int_equal(ftrt__ckpt_load(dir, 7, 0, 1, g, 2), 0);
        assert_memory_equal(g[0].ptr, w[0].ptr, big);
        assert_memory_equal(g[1].ptr, w[1].ptr, 5000);
        /* Layout: file size is 4 KiB-aligned and holds both regions. */
        struct stat sb;
        char p[4200];
        shard_path(p, sizeof p, dir, 7, 0);
        assert_int_equal(stat(p, &sb), 0);
        assert_int_equal(sb.st_size % 4096, 0);
        assert_true((size_t)sb.st_size >= big + 5000 + 4096);
        for (int i = 0; i < 2; i++) {
            free(w[i].ptr);
            free(g[i].ptr);
        }
        rm_rf(dir);
    }
    ftrt__knobs.io_force_sync = 0;
}

/* REPLICATED regions restore to any number of trainers. */
static void test_replicated_other_nranks(void **st)
{
    (void)st;
    char dir[4096];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 5, 3, 0, 2);
    for (int n = 1; n <= 6; n++)
        for (int r = 0; r < n; r++) assert_int_equal(load_and_check(dir, 5, r, n, 0), 0);
    rm_rf(dir);
}

/* SHARDED regions need the same number of trainers. */
static void test_sharded_other_nranks(void **st)
{
    (void)st;
    char dir[4096];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 5, 3, 1, 2);
    assert_int_equal(load_and_check(dir, 5, 0, 2, 1), FTRT_EMISMATCH);
    assert_int_equal(load_and_check(dir, 5, 3, 4, 1), FTRT_EMISMATCH);
    assert_int_equal(load_and_check(dir, 5, 1, 3, 1), 0);
    /* Without the SHARDED regions, 2 trainers can still load it (the extra checkpoint regions
     * are ignored). */
    assert_int_equal(load_and_check(dir, 5, 1, 2, 0), 0);
    rm_rf(dir);
}

/* ftrt__ckpt_load of s as rank 0 of n with stderr (where warnings go) captured into msg. */
static int load_logged(const char *dir, int64_t step, int n, state *s, char *msg, size_t cap)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/stderr.log", dir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    int level = ftrt__log_level;
    ftrt__log_level = FTRT__LOG_WARN;
    dup2(fd, 2);
    int rc = ftrt__ckpt_load(dir, step, 0, n, s->r, s->n);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ftrt__log_level = level;
    ssize_t got = pread(fd, msg, cap - 1, 0);
    close(fd);
    unlink(path);
    msg[got > 0 ? got : 0] = 0;
    return rc;
}

/* A region registered FTRT_REGION_OPTIONAL that the checkpoint lacks is left as the caller
 * set it and the rest restores; one that the checkpoint has restores as any other. */
static void test_optional_region(void **st)
{
    (void)st;
    char dir[4096];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 9, 2, 1, 2);
    state s;
    make_state(&s, 9, 0, 1, 1);
    add_region(&s, "added-later", 16, FTRT__KIND_REPLICATED);
    memset(s.r[s.n - 1].ptr, 0x5a, 16);
    assert_int_equal(ftrt__ckpt_load(dir, 9, 0, 2, s.r, s.n), FTRT_EMISMATCH);
    s.r[s.n - 1].optional = 1;
    assert_int_equal(ftrt__ckpt_load(dir, 9, 0, 2, s.r, s.n), 0);
    for (int i = 0; i < 16; i++) assert_int_equal(((unsigned char *)s.r[s.n - 1].ptr)[i], 0x5a);
    state ref;
    make_state(&ref, 9, 0, 1, 0);
    assert_memory_equal(s.r[0].ptr, ref.r[0].ptr, ref.r[0].bytes); /* the rest restored */
    free_state(&ref);
    free_state(&s);
    make_state(&s, 9, 0, 1, 1);
    s.r[1].optional = 1; /* present but of another size: left as it is */
    s.r[1].bytes -= 1;
    memset(s.r[1].ptr, 0x33, s.r[1].bytes);
    assert_int_equal(ftrt__ckpt_load(dir, 9, 0, 2, s.r, s.n), 0);
    assert_int_equal(((unsigned char *)s.r[1].ptr)[0], 0x33);
    s.r[1].bytes += 1;
    s.r[1].optional = 0;
    s.r[0].optional = 1; /* present in the checkpoint: restored all the same */
    assert_int_equal(ftrt__ckpt_load(dir, 9, 0, 2, s.r, s.n), 0);
    make_state(&ref, 9, 0, 1, 0);
    assert_memory_equal(s.r[0].ptr, ref.r[0].ptr, ref.r[0].bytes);
    free_state(&ref);
    free_state(&s);
    rm_rf(dir);
}

/* Registered regions must match the checkpoint's by name, size and kind. */
static void test_region_mismatch(void **st)
{
    (void)st;
    char dir[4096];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 9, 2, 1, 2);
    state s;
    make_state(&s, 9, 0, 1, 1);
    add_region(&s, "not-there", 16, FTRT__KIND_REPLICATED);
    assert_int_equal(ftrt__ckpt_load(dir, 9, 0, 2, s.r, s.n), FTRT_EMISMATCH);
    free_state(&s);
    make_state(&s, 9, 0, 1, 1);
    s.r[0].bytes -= 1; /* size differs */
    assert_int_equal(ftrt__ckpt_load(dir, 9, 0, 2, s.r, s.n), FTRT_EMISMATCH);
    s.r[0].bytes += 1;
    s.r[1].kind = FTRT__KIND_SHARDED; /* kind differs: the message names both kinds */
    char msg[4096];
    assert_int_equal(load_logged(dir, 9, 2, &s, msg, sizeof msg), FTRT_EMISMATCH);
    if (!strstr(msg, "region \"opt.m\" is REPLICATED there but registered SHARDED (in host "
                     "memory)"))
        fail_msg("unexpected message: %s", msg);
    s.r[1].kind = FTRT__KIND_REPLICATED;
    s.r[3].kind = FTRT__KIND_REPLICATED; /* "rng", SHARDED in the checkpoint */
    assert_int_equal(load_logged(dir, 9, 2, &s, msg, sizeof msg), FTRT_EMISMATCH);
    if (!strstr(msg, "region \"rng\" is SHARDED there but registered REPLICATED (in host "
                     "memory)"))
        fail_msg("unexpected message: %s", msg);
    s.r[3].kind = FTRT__KIND_SHARDED;
    assert_int_equal(ftrt__ckpt_load(dir, 9, 0, 2, s.r, s.n), 0); /* all agree again */
    /* A device region without a device backend is refused, never skipped (this test installs
     * none; test_loc_sim.c restores device regions through the simulated device). */
    s.r[3].loc = FTRT__LOC_DEVICE;
    assert_int_equal(ftrt__ckpt_load(dir, 9, 0, 2, s.r, s.n), FTRT_ENOTSUP);
    if (!strstr(ftrt_last_error(), "\"rng\"") || !strstr(ftrt_last_error(), "device"))
        fail_msg("unexpected message: %s", ftrt_last_error());
    /* So is the synchronous shard writer's (it reads device regions through the backend). */
    assert_int_equal(ftrt__shard_write(dir, 10, 0, 2, s.r, s.n), FTRT_ENOTSUP);
    assert_non_null(strstr(ftrt_last_error(), "\"rng\""));
    s.r[3].loc = FTRT__LOC_HOST;
    free_state(&s);
    rm_rf(dir);
}

/* ---- commit, list, retention ------------------------------------------------------------- */

static void test_uncommitted_not_listed(void **st)
{
    (void)st;
    char dir[4096];
    int64_t steps[8];
    make_tmpdir(dir, sizeof dir);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 0);
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/does/not/exist", dir);
    assert_int_equal(ftrt__ckpt_list(missing, steps, 8), 0);
    checkpoint_all(dir, 3, 2, 1, 5);
    for (int r = 0; r < 2; r++) { /* step 5 written, never committed */
        state s;
        make_state(&s, 5, r, 1, 0);
        assert_int_equal(ftrt__shard_write(dir, 5, r, 2, s.r, s.n), 0);
        free_state(&s);
    }
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 1);
    assert_int_equal(steps[0], 3);
    assert_int_equal(load_and_check(dir, 5, 0, 2, 1), -ENOENT);
    /* Commit with a missing shard fails and commits nothing. */
    char p[4200];
    shard_path(p, sizeof p, dir, 5, 1);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(ftrt__ckpt_commit(dir, 5, 2, 5), -ENOENT);
    assert_false(path_exists("%s/step-5/MANIFEST", dir));
    /* Commit with the wrong number of trainers fails (header says 2). */
    assert_int_equal(ftrt__ckpt_commit(dir, 3, 1, 5), FTRT_ECORRUPT);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 1);
    assert_int_equal(steps[0], 3);
    /* Names that are not canonical step directories are ignored. */
    char odd[4200];
    snprintf(odd, sizeof odd, "%s/step-007", dir);
    assert_int_equal(mkdir(odd, 0755), 0);
    snprintf(odd, sizeof odd, "%s/step-007/MANIFEST", dir);
    write_text(odd, "{}");
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 1);
    rm_rf(dir);
}

static int count_step_dirs(const char *dir)
{
    int64_t s[64];
    return ftrt__ckpt_list(dir, s, 64);
}

static void test_retention(void **st)
{
    (void)st;
    char dir[4096];
    int64_t steps[8];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 10, 2, 1, 2);
    checkpoint_all(dir, 20, 2, 1, 2);
    /* An uncommitted older step (a failed checkpoint) and a newer one. */
    state s;
    make_state(&s, 25, 0, 1, 0);
    assert_int_equal(ftrt__shard_write(dir, 25, 0, 2, s.r, s.n), 0);
    assert_int_equal(ftrt__shard_write(dir, 50, 0, 2, s.r, s.n), 0);
    free_state(&s);
    checkpoint_all(dir, 30, 2, 1, 2);
    assert_false(path_exists("%s/step-25", dir)); /* uncommitted, older: removed */
    assert_true(path_exists("%s/step-50/rank-0.ftrt", dir)); /* newer: kept */
    checkpoint_all(dir, 40, 2, 1, 2);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 2);
    assert_int_equal(steps[0], 40);
    assert_int_equal(steps[1], 30);
    assert_false(path_exists("%s/step-10", dir));
    assert_false(path_exists("%s/step-20", dir));
    assert_int_equal(load_and_check(dir, 30, 1, 2, 1), 0);
    assert_int_equal(load_and_check(dir, 40, 1, 2, 1), 0);
    /* After a rollback, LATEST names an older step: it is kept, plus the newest other. */
    checkpoint_all(dir, 35, 2, 1, 2);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 2);
    assert_int_equal(steps[0], 35);
    assert_int_equal(steps[1], 40);
    assert_false(path_exists("%s/step-30", dir));
    /* keep = 1: only LATEST's step stays, even though 40 is newer. */
    checkpoint_all(dir, 36, 2, 1, 1);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 1);
    assert_int_equal(steps[0], 36);
    assert_false(path_exists("%s/step-40", dir));
    assert_false(path_exists("%s/step-35", dir));
    assert_int_equal(load_and_check(dir, 36, 0, 2, 1), 0);
    /* keep larger than what exists: nothing removed. */
    checkpoint_all(dir, 37, 2, 1, 3);
    checkpoint_all(dir, 38, 2, 1, 3);
    assert_int_equal(count_step_dirs(dir), 3);
    checkpoint_all(dir, 39, 2, 1, 3);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 3);
    assert_int_equal(steps[0], 39);
    assert_int_equal(steps[1], 38);
    assert_int_equal(steps[2], 37);
    assert_false(path_exists("%s/step-36", dir));
    rm_rf(dir);
}

/* Writes that cannot happen fail with -errno and leave committed checkpoints alone. */
static void test_unwritable(void **st)
{
    (void)st;
    char dir[4096], p[4200], latest_before[64] = {0}, latest_after[64] = {0};
    int64_t steps[8];
    make_tmpdir(dir, sizeof dir);
    state s;
    make_state(&s, 2, 0, 1, 0);
    /* A directory under a regular file cannot be created. */
    snprintf(p, sizeof p, "%s/file", dir);
    write_text(p, "x");
    snprintf(p, sizeof p, "%s/file/ckpt", dir);
    int rc = ftrt__shard_write(p, 1, 0, 1, s.r, s.n);
    assert_true(rc < 0 && rc > -4096);
    assert_int_equal(ftrt__ckpt_commit(p, 1, 1, 2) < 0, 1);
    assert_int_equal(ftrt__ckpt_list(p, steps, 8) < 0 || ftrt__ckpt_list(p, steps, 8) == 0, 1);
    /* A committed checkpoint, then a step directory that is a regular file. */
    checkpoint_all(dir, 1, 1, 1, 2);
    snprintf(p, sizeof p, "%s/LATEST", dir);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(latest_before, sizeof latest_before, f));
    fclose(f);
    snprintf(p, sizeof p, "%s/step-2", dir);
    write_text(p, "in the way");
    rc = ftrt__shard_write(dir, 2, 0, 1, s.r, s.n);
    assert_true(rc < 0 && rc > -4096);
    rc = ftrt__ckpt_commit(dir, 2, 1, 1);
    assert_true(rc < 0);
    snprintf(p, sizeof p, "%s/LATEST", dir);
    f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(latest_after, sizeof latest_after, f));
    fclose(f);
    assert_string_equal(latest_before, latest_after);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 1);
    assert_int_equal(steps[0], 1);
    assert_int_equal(load_and_check(dir, 1, 0, 1, 1), 0);
    free_state(&s);
    rm_rf(dir);
}

/* A write that runs out of room (RLIMIT_FSIZE stands in for ENOSPC) fails with -errno and
 * removes the partial file, with io_uring and with the fallback. */
static void test_write_fails_cleanly(void **st)
{
    (void)st;
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    for (int sync = 0; sync < 2; sync++) {
        char dir[4096];
        int64_t steps[8];
        ftrt__knobs.io_force_sync = sync;
        make_tmpdir(dir, sizeof dir);
        checkpoint_all(dir, 1, 1, 1, 2);
        state s;
        make_state(&s, 2, 0, 1, 0);
        lim = old;
        lim.rlim_cur = 256 * 1024;
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
        int rc = ftrt__shard_write(dir, 2, 0, 1, s.r, s.n);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
        assert_int_equal(rc, -EFBIG);
        assert_false(path_exists("%s/step-2/rank-0.ftrt", dir));
        assert_int_equal(t_glob_count("%s/step-2/rank-0.ftrt.tmp*", dir), 0);
        assert_int_equal(ftrt__ckpt_commit(dir, 2, 1, 1), -ENOENT);
        assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 1);
        assert_int_equal(steps[0], 1);
        assert_int_equal(load_and_check(dir, 1, 0, 1, 1), 0);
        free_state(&s);
        rm_rf(dir);
    }
    signal(SIGXFSZ, oldsig);
    ftrt__knobs.io_force_sync = 0;
}

/* ---- format ------------------------------------------------------------------------------ */

static void test_slice_math(void **st)
{
    (void)st;
    static const uint64_t totals[] = {0, 1, 2, 7, 4096, 1000003, UINT64_MAX / 3, UINT64_MAX - 1,
                                      UINT64_MAX};
    static const uint32_t ns[] = {1, 2, 3, 4, 7, 1000, 1u << 20};
    for (size_t a = 0; a < sizeof totals / sizeof totals[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++) {
            uint64_t next = 0;
            uint32_t n = ns[b];
            for (uint32_t r = 0; r < n; r++) {
                uint64_t off, len;
                ftrt__slice(totals[a], r, n, &off, &len);
                assert_true(off == next);
                assert_true(len == totals[a] / n || len == totals[a] / n + 1);
                next = off + len;
            }
            assert_true(next == totals[a]);
        }
    uint64_t off, len;
    ftrt__slice(10, 1, 3, &off, &len); /* [10/3, 20/3) = [3, 6) */
    assert_int_equal(off, 3);
    assert_int_equal(len, 3);
}

/* ---- the commit on several threads, a large region table --------------------------------- */

/* Reads a whole small file into a malloc'd buffer (*len bytes). */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *b = malloc(1 << 20);
    assert_non_null(b);
    *len = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

/* The commit's header checks on several threads (ftrt__ckpt_commit_run): the MANIFEST has every
 * rank's size and header CRC in rank order, and a bad or missing shard anywhere (a block that
 * another thread checks) fails the commit. */
static void test_commit_threads(void **st)
{
    (void)st;
    enum { N = 200 }; /* blocks of 64: ranks 1-64, 65-128, 129-192, 193-199 */
    char dir[4096], p[4200];
    make_tmpdir(dir, sizeof dir);
    for (int r = 0; r < N; r++) {
        state s;
        make_state(&s, 4, r, 1, 0);
        assert_int_equal(ftrt__shard_write(dir, 4, r, N, s.r, s.n), 0);
        free_state(&s);
    }
    ftrt__commit_times t;
    assert_int_equal(ftrt__ckpt_commit_run(dir, 4, N, 5, 0, 4, &t), 0);
    assert_int_equal(t.threads, 4);
    assert_true(t.check_s >= 0 && t.manifest_s >= 0 && t.latest_s >= 0);
    snprintf(p, sizeof p, "%s/step-4/MANIFEST", dir);
    size_t len;
    char *text = read_all(p, &len);
    ftrt__manifest m;
    const char *why = NULL;
    assert_int_equal(ftrt__manifest_parse(text, len, 4, &m, &why), 0);
    assert_int_equal(m.nranks, N);
    ftrt__io io;
    ftrt__io_init(&io, FTRT__IO_ENTRIES);
    for (int r = 0; r < N; r++) {
        uint64_t size;
        ftrt__shard_hdr h;
        ftrt__shard_ent *e;
        shard_path(p, sizeof p, dir, 4, r);
        int fd = ftrt__shard_open(&io, p, &size, &h, &e);
        assert_true(fd >= 0);
        close(fd);
        free(e);
        assert_int_equal(m.bytes[r], size);
        assert_int_equal(m.hcrc[r], h.header_crc);
    }
    ftrt__io_exit(&io);
    ftrt__manifest_free(&m);
    free(text);
    assert_int_equal(load_and_check(dir, 4, 150, N, 1), 0);
    /* A bad header in the third block, then a missing last shard, then a missing rank 0. */
    shard_path(p, sizeof p, dir, 4, 150);
    flip_byte(p, 20, 0x01);
    assert_int_equal(ftrt__ckpt_commit_run(dir, 4, N, 5, 0, 4, NULL), FTRT_ECORRUPT);
    flip_byte(p, 20, 0x01);
    assert_int_equal(ftrt__ckpt_commit_run(dir, 4, N, 5, 0, 4, NULL), 0);
    shard_path(p, sizeof p, dir, 4, N - 1);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(ftrt__ckpt_commit_run(dir, 4, N, 5, 0, 4, NULL), -ENOENT);
    shard_path(p, sizeof p, dir, 4, 0);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(ftrt__ckpt_commit_run(dir, 4, N, 5, 0, 4, NULL), -ENOENT);
    rm_rf(dir);
}

/* A region table past the first 4 KiB (40 regions: 4,520 bytes) is read whole by
 * ftrt__shard_open and committed and loaded like a small one. */
static void test_large_table(void **st)
{
    (void)st;
    enum { R = 40 };
    char dir[4096];
    static char bytes[R][16];
    ftrt__region regs[R];
    memset(regs, 0, sizeof regs);
    for (int i = 0; i < R; i++) {
        snprintf(regs[i].name, sizeof regs[i].name, "region.%d", i);
        memset(bytes[i], 'a' + i % 26, sizeof bytes[i]);
        regs[i].ptr = bytes[i];
        regs[i].bytes = sizeof bytes[i];
        regs[i].kind = FTRT__KIND_SHARDED;
    }
    make_tmpdir(dir, sizeof dir);
    assert_int_equal(ftrt__shard_write(dir, 2, 0, 1, regs, R), 0);
    assert_int_equal(ftrt__ckpt_commit(dir, 2, 1, 2), 0);
    memset(bytes, 0, sizeof bytes);
    assert_int_equal(ftrt__ckpt_load(dir, 2, 0, 1, regs, R), 0);
    for (int i = 0; i < R; i++) assert_int_equal(bytes[i][15], 'a' + i % 26);
    rm_rf(dir);
}
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_n1),
        cmocka_unit_test(test_round_trip_n3),
        cmocka_unit_test(test_round_trip_n4),
        cmocka_unit_test(test_round_trip_sync_fallback),
        cmocka_unit_test(test_multi_chunk),
        cmocka_unit_test(test_replicated_other_nranks),
        cmocka_unit_test(test_sharded_other_nranks),
        cmocka_unit_test(test_region_mismatch),
        cmocka_unit_test(test_optional_region),
        cmocka_unit_test(test_commit_threads),
        cmocka_unit_test(test_large_table),
        cmocka_unit_test(test_uncommitted_not_listed),
        cmocka_unit_test(test_retention),
        cmocka_unit_test(test_unwritable),
        cmocka_unit_test(test_write_fails_cleanly),
        cmocka_unit_test(test_slice_math),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
