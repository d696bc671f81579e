/*
 * test_ckpt.c - checkpoint shards, commit, list and load on a real filesystem: round trips for
 * several numbers of trainers (io_uring and the synchronous fallback), restoring to another
 * number of trainers, corruption of data / header / MANIFEST / LATEST, truncation, retention,
 * failing writes, the commit's header checks on several threads, a region table past 4 KiB,
 * falling back to an older checkpoint, and the shard parser against random
 * bytes. Scratch directories are created under $FTRT_TEST_TMP (or /tmp).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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

#include "base/crc32c.h"
#include "base/knobs.h"
#include "base/log.h"
#include "checkpoint/commit.h"
#include "checkpoint/format.h"
#include "checkpoint/io.h"
#include "checkpoint/restore.h"
#include "checkpoint/shard.h"
#include "checkpoint/steps.h"
#include "ftrt.h"
#include "helpers.h"

/* ---- scratch directories (helpers.h) ----------------------------------------------------- */

static void make_tmpdir(char *buf, size_t cap) { assert_int_equal(t_tmpdir(buf, cap, "ckpt"), 0); }
#define rm_rf(path) t_rmtree(path)
#define path_exists t_exists

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* XORs mask into the byte at off of a file. */
static void flip_byte(const char *path, off_t off, unsigned char mask)
{
    unsigned char b;
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= mask;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

/* ---- model state ------------------------------------------------------------------------- */

/* Region set of one trainer: REPLICATED regions identical on all ranks, SHARDED per rank.
 * Contents depend on (step, rank for SHARDED, region index) only. */
enum { NREG = 8 };
typedef struct state {
    ftrt__region r[NREG];
    int n;
} state;

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        p[i] = (unsigned char)((x * 0x2545F4914F6CDD1Dull) >> 56);
    }
}

static void add_region(state *s, const char *name, size_t bytes, ftrt__region_kind kind)
{
    assert_true(s->n < NREG);
    ftrt__region *g = &s->r[s->n++];
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", name);
    g->bytes = bytes;
    g->kind = kind;
    g->ptr = bytes ? malloc(bytes) : NULL;
    if (bytes) assert_non_null(g->ptr);
}

/* Builds the state of `rank` at `step`; with_sharded = 0 leaves SHARDED regions out. When
 * blank, the memory is zeroed instead of filled with the expected contents. */
static void make_state(state *s, int64_t step, int rank, int with_sharded, int blank)
{
    memset(s, 0, sizeof *s);
    add_region(s, "params", (1u << 20) + 13, FTRT__KIND_REPLICATED);
    add_region(s, "opt.m", 7, FTRT__KIND_REPLICATED); /* fewer bytes than some nranks */
    add_region(s, "empty", 0, FTRT__KIND_REPLICATED);
    if (with_sharded) {
        add_region(s, "rng", 100 + 37 * (size_t)rank, FTRT__KIND_SHARDED);
        add_region(s, "data.cursor", 4096, FTRT__KIND_SHARDED);
    }
    for (int i = 0; i < s->n; i++) {
        uint64_t seed = (uint64_t)step * 1000 + (uint64_t)i * 10 +
                        (s->r[i].kind == FTRT__KIND_SHARDED ? (uint64_t)rank * 100000 + 7 : 0);
        if (s->r[i].bytes == 0) continue;
        if (blank) memset(s->r[i].ptr, 0, s->r[i].bytes);
        else fill(s->r[i].ptr, s->r[i].bytes, seed);
    }
}

static void free_state(state *s)
{
    for (int i = 0; i < s->n; i++) free(s->r[i].ptr);
    s->n = 0;
}

static void assert_state_equal(const state *a, const state *b)
{
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        assert_int_equal(a->r[i].bytes, b->r[i].bytes);
        if (a->r[i].bytes) assert_memory_equal(a->r[i].ptr, b->r[i].ptr, a->r[i].bytes);
    }
}

/* Writes every rank's shard of `step` and commits it. */
static void checkpoint_all(const char *dir, int64_t step, int n, int with_sharded, int keep)
{
    for (int r = 0; r < n; r++) {
        state s;
        make_state(&s, step, r, with_sharded, 0);
        assert_int_equal(ftrt__shard_write(dir, step, r, n, s.r, s.n), 0);
        free_state(&s);
    }
    assert_int_equal(ftrt__ckpt_commit(dir, step, n, keep), 0);
}

/* Loads `step` as rank of n and returns the result; on success compares with the expected
 * state of the same step. */
static int load_and_check(const char *dir, int64_t step, int rank, int n, int with_sharded)
{
    state got, want;
    make_state(&got, step, rank, with_sharded, 1);
    make_state(&want, step, rank, with_sharded, 0);
    int rc = ftrt__ckpt_load(dir, step, rank, n, got.r, got.n);
    if (rc == 0) assert_state_equal(&got, &want);
    free_state(&got);
    free_state(&want);
    return rc;
}

static void shard_path(char *buf, size_t cap, const char *dir, int64_t step, int rank)
{
    snprintf(buf, cap, "%s/step-%lld/rank-%d.ftrt", dir, (long long)step, rank);
}

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
        fill(w[0].ptr, big, 42);
        fill(w[1].ptr, 5000, 43);
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

/* ---- corruption -------------------------------------------------------------------------- */

static void test_bitflip_data(void **st)
{
    (void)st;
    char dir[4096], p[4200];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 3, 3, 1, 2);
    /* Rank 1's first region ("params" slice) starts at 4096. */
    shard_path(p, sizeof p, dir, 3, 1);
    flip_byte(p, 4096 + 777, 0x04);
    /* Every rank needs rank 1's REPLICATED slice. */
    for (int r = 0; r < 3; r++) assert_int_equal(load_and_check(dir, 3, r, 3, 1), FTRT_ECORRUPT);
    /* Undo: loads again. */
    flip_byte(p, 4096 + 777, 0x04);
    assert_int_equal(load_and_check(dir, 3, 0, 3, 1), 0);
    /* A SHARDED region's corruption hits its own rank only. Find rank 2's "rng" by parsing. */
    shard_path(p, sizeof p, dir, 3, 2);
    ftrt__io io;
    ftrt__shard_hdr h;
    ftrt__shard_ent *e;
    uint64_t size;
    ftrt__io_init(&io, FTRT__IO_ENTRIES);
    int fd = ftrt__shard_open(&io, p, &size, &h, &e);
    ftrt__io_exit(&io);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(h.nregions, 5);
    assert_string_equal(e[3].name, "rng");
    assert_int_equal(e[3].slice_bytes, 100 + 37 * 2);
    flip_byte(p, (off_t)e[3].file_offset + 5, 0x80);
    free(e);
    assert_int_equal(load_and_check(dir, 3, 2, 3, 1), FTRT_ECORRUPT);
    assert_int_equal(load_and_check(dir, 3, 0, 3, 1), 0);
    rm_rf(dir);
}

static void test_bitflip_header(void **st)
{
    (void)st;
    static const off_t offs[] = {0, 9, 13, 17, 25, 29, 33, 37, 40 + 3, 40 + 70, 40 + 112 + 90,
                                 40 + 112 * 2 + 105};
    char dir[4096], p[4200];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 3, 2, 1, 2);
    shard_path(p, sizeof p, dir, 3, 0);
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        flip_byte(p, offs[i], 0x01);
        assert_int_equal(load_and_check(dir, 3, 0, 2, 1), FTRT_ECORRUPT);
        assert_int_equal(load_and_check(dir, 3, 1, 2, 1), FTRT_ECORRUPT);
        flip_byte(p, offs[i], 0x01);
    }
    assert_int_equal(load_and_check(dir, 3, 0, 2, 1), 0);
    /* A bad header also stops a commit. */
    flip_byte(p, 20, 0x01);
    assert_int_equal(ftrt__ckpt_commit(dir, 3, 2, 2), FTRT_ECORRUPT);
    rm_rf(dir);
}

static void test_truncated_shard(void **st)
{
    (void)st;
    static const off_t lens[] = {0, 10, 39, 100, 4096, 4096 + 100};
    char dir[4096], p[4200];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 8, 2, 1, 2);
    shard_path(p, sizeof p, dir, 8, 1);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    /* A size change that leaves every region inside the file (bytes appended, or cut from
     * padding) is caught by the MANIFEST's size alone. */
    assert_int_equal(truncate(p, sb.st_size + 4096), 0);
    assert_int_equal(load_and_check(dir, 8, 0, 2, 1), FTRT_ECORRUPT);
    assert_int_equal(truncate(p, sb.st_size), 0);
    assert_int_equal(load_and_check(dir, 8, 0, 2, 1), 0);
    assert_int_equal(truncate(p, sb.st_size - 1), 0);
    assert_int_equal(load_and_check(dir, 8, 0, 2, 1), FTRT_ECORRUPT);
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        assert_int_equal(truncate(p, lens[i]), 0);
        int rc = load_and_check(dir, 8, 0, 2, 1);
        assert_true(rc == FTRT_ECORRUPT || rc == -ENOENT);
    }
    assert_int_equal(unlink(p), 0);
    assert_int_equal(load_and_check(dir, 8, 0, 2, 1), -ENOENT);
    rm_rf(dir);
}

static void test_bad_manifest(void **st)
{
    (void)st;
    static const char *bad[] = {
        "",
        "garbage",
        "{\"format\":2,\"step\":4,\"nranks\":1,\"shards\":[]}",
        "{\"format\":1,\"step\":5,\"nranks\":1,\"shards\":[{\"rank\":0,\"file\":\"rank-0.ftrt\","
        "\"bytes\":8192,\"header_crc32c\":1}]}",
        "{\"format\":1,\"step\":4,\"nranks\":2,\"shards\":[{\"rank\":0,\"file\":\"rank-0.ftrt\","
        "\"bytes\":8192,\"header_crc32c\":1}]}",
        "{\"format\":1,\"step\":4,\"nranks\":1,\"shards\":[{\"rank\":0,\"file\":\"../x\","
        "\"bytes\":8192,\"header_crc32c\":1}]}",
        "{\"format\":1,\"step\":4,\"nranks\":1,\"shards\":[{\"rank\":0,\"file\":\"rank-0.ftrt\","
        "\"bytes\":-1,\"header_crc32c\":1}]}",
        "{\"format\":1,\"step\":4,\"nranks\":1} trailing",
    };
    char dir[4096], m[4200];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 4, 1, 1, 2);
    snprintf(m, sizeof m, "%s/step-4/MANIFEST", dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(m, bad[i]);
        assert_int_equal(load_and_check(dir, 4, 0, 1, 1), FTRT_ECORRUPT);
    }
    /* The right structure but a stale header CRC (shard replaced after the commit). */
    checkpoint_all(dir, 4, 1, 1, 2);
    assert_int_equal(load_and_check(dir, 4, 0, 1, 1), 0);
    state s;
    make_state(&s, 4, 0, 1, 0);
    ((unsigned char *)s.r[0].ptr)[0] ^= 1;
    assert_int_equal(ftrt__shard_write(dir, 4, 0, 1, s.r, s.n), 0);
    free_state(&s);
    assert_int_equal(load_and_check(dir, 4, 0, 1, 1), FTRT_ECORRUPT);
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

static void test_latest_garbage(void **st)
{
    (void)st;
    char dir[4096], latest[4200];
    int64_t steps[8];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 1, 1, 1, 5);
    checkpoint_all(dir, 2, 1, 1, 5);
    checkpoint_all(dir, 10, 1, 1, 5);
    snprintf(latest, sizeof latest, "%s/LATEST", dir);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 3);
    assert_int_equal(steps[0], 10);
    assert_int_equal(steps[1], 2);
    assert_int_equal(steps[2], 1);
    static const char *garbage[] = {"garbage", "", "step-", "step-x\n", "step-2\nstep-1\n",
                                    "step-02\n", "step-99\n", "step-99999999999999999999\n",
                                    "step-39999999999999999999\n" /* wraps 2^64 to 3.1e18 */,
                                    "\x01\x02\x03"};
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        write_text(latest, garbage[i]);
        assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 3);
        assert_int_equal(steps[0], 10);
        assert_int_equal(steps[1], 2);
        assert_int_equal(steps[2], 1);
    }
    /* A valid LATEST naming an older step comes first, without duplicates. */
    write_text(latest, "step-2\n");
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 3);
    assert_int_equal(steps[0], 2);
    assert_int_equal(steps[1], 10);
    assert_int_equal(steps[2], 1);
    write_text(latest, "step-1"); /* no newline: still fine */
    assert_int_equal(ftrt__ckpt_list(dir, steps, 2), 2);
    assert_int_equal(steps[0], 1);
    assert_int_equal(steps[1], 10);
    unlink(latest);
    assert_int_equal(ftrt__ckpt_list(dir, steps, 8), 3);
    assert_int_equal(steps[0], 10);
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

/* Restart logic: the newest checkpoint is corrupt, the next one in the list loads. */
static void test_fallback_to_older(void **st)
{
    (void)st;
    char dir[4096], p[4200];
    int64_t steps[8];
    make_tmpdir(dir, sizeof dir);
    checkpoint_all(dir, 100, 3, 1, 2);
    checkpoint_all(dir, 200, 3, 1, 2);
    shard_path(p, sizeof p, dir, 200, 2);
    flip_byte(p, 4096 + 3, 0xFF);
    int n = ftrt__ckpt_list(dir, steps, 8);
    assert_int_equal(n, 2);
    assert_int_equal(steps[0], 200);
    int loaded = -1;
    for (int i = 0; i < n && loaded < 0; i++) {
        int rc = load_and_check(dir, steps[i], 1, 3, 1);
        if (i == 0) assert_int_equal(rc, FTRT_ECORRUPT);
        if (rc == 0) loaded = i;
    }
    assert_int_equal(loaded, 1);
    assert_int_equal(steps[loaded], 100);
    rm_rf(dir);
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

/* The first tb bytes of rank 1's shard of step 6 (nranks 2, 5 regions) written in dir, parsed
 * once as they are; *size gets the file's size. The caller frees the bytes. */
static unsigned char *valid_shard_head(const char *dir, uint32_t tb, uint64_t *size)
{
    char p[4200];
    checkpoint_all(dir, 6, 2, 1, 2);
    shard_path(p, sizeof p, dir, 6, 1);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    *size = (uint64_t)sb.st_size;
    unsigned char *orig = malloc(tb);
    assert_non_null(orig);
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, orig, tb, 0), (ssize_t)tb);
    close(fd);
    ftrt__shard_hdr h;
    ftrt__shard_ent *e;
    const char *why = NULL;
    assert_int_equal(ftrt__shard_parse(orig, tb, *size, &h, &e, &why), 0);
    assert_int_equal(h.step, 6);
    assert_int_equal(h.rank, 1);
    assert_int_equal(h.nranks, 2);
    assert_int_equal(h.nregions, 5);
    free(e);
    return orig;
}

/* Truncated buffer or file size: FTRT_ECORRUPT, no entries. */
static void parse_truncated(const unsigned char *orig, uint32_t tb, uint64_t size)
{
    ftrt__shard_hdr h;
    ftrt__shard_ent *e;
    const char *why = NULL;
    for (size_t len = 0; len < tb; len += 7) {
        unsigned char *cut = malloc(len ? len : 1);
        memcpy(cut, orig, len);
        assert_int_equal(ftrt__shard_parse(cut, len, size, &h, &e, &why), FTRT_ECORRUPT);
        assert_null(e);
        free(cut);
    }
    assert_int_equal(ftrt__shard_parse(orig, tb, size - 4096, &h, &e, &why), FTRT_ECORRUPT);
}

/* 20,000 random mutations of orig (the generator state *x); the CRC re-encoded half of the
 * time so later checks are reached. Returns how many the parser accepted. */
static int parse_mutated(const unsigned char *orig, uint32_t tb, uint64_t size, uint64_t *x)
{
    ftrt__shard_hdr h;
    ftrt__shard_ent *e;
    const char *why = NULL;
    unsigned char *buf = malloc(tb);
    int accepted = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, orig, tb);
        int nm = 1 + (int)(*x % 4);
        for (int k = 0; k < nm; k++) {
            *x = *x * 6364136223846793005ull + 1442695040888963407ull;
            buf[(*x >> 33) % tb] ^= (unsigned char)(1u << ((*x >> 20) % 8));
        }
        if (it & 1) {
            /* Recompute the header CRC as a writer would, so field checks are exercised. */
            memset(buf + 36, 0, 4);
            uint32_t c = ftrt__crc32c(0, buf, tb);
            for (int i = 0; i < 4; i++) buf[36 + i] = (unsigned char)(c >> (8 * i));
        }
        size_t len = (it % 5 == 0) ? (size_t)((*x >> 40) % (tb + 1)) : tb;
        int rc = ftrt__shard_parse(buf, len, size, &h, &e, &why);
        assert_true(rc == 0 || rc == FTRT_ECORRUPT);
        if (rc == 0) {
            accepted++;
            for (uint32_t i = 0; i < h.nregions; i++) {
                assert_true(e[i].file_offset + e[i].slice_bytes <= size);
                assert_true(e[i].file_offset % 4096 == 0);
            }
            free(e);
        } else {
            assert_non_null(why);
        }
    }
    free(buf);
    return accepted;
}

/* 5,000 buffers of tb plain random bytes (generator state *x) with a valid magic and version. */
static void parse_random(uint32_t tb, uint64_t *x)
{
    ftrt__shard_hdr h;
    ftrt__shard_ent *e;
    const char *why = NULL;
    unsigned char *buf = malloc(tb);
    for (int it = 0; it < 5000; it++) {
        for (uint32_t i = 0; i < tb; i++) {
            *x = *x * 6364136223846793005ull + 1442695040888963407ull;
            buf[i] = (unsigned char)(*x >> 56);
        }
        memcpy(buf, "FTRTSHRD\x01\0\0\0", 12);
        int rc = ftrt__shard_parse(buf, tb, UINT64_MAX, &h, &e, &why);
        assert_true(rc == 0 || rc == FTRT_ECORRUPT);
        if (rc == 0) free(e);
    }
    free(buf);
}

/* The parser survives arbitrary bytes and mutations of a valid header (no crash, no read
 * outside the buffer under ASan; a result of 0 or FTRT_ECORRUPT only). */
static void test_parser_robust(void **st)
{
    (void)st;
    char dir[4096];
    make_tmpdir(dir, sizeof dir);
    uint32_t tb = FTRT__SHARD_HDR_BYTES + 5 * FTRT__SHARD_ENT_BYTES;
    uint64_t size;
    unsigned char *orig = valid_shard_head(dir, tb, &size);
    parse_truncated(orig, tb, size);
    uint64_t x = 12345; /* one generator through both loops */
    int accepted = parse_mutated(orig, tb, size, &x);
    parse_random(tb, &x);
    print_message("parser: %d of 20000 mutated headers accepted (mutations in data CRCs, names "
                  "or padding-free fields)\n",
                  accepted);
    free(orig);
    rm_rf(dir);
}

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
        cmocka_unit_test(test_bitflip_data),
        cmocka_unit_test(test_bitflip_header),
        cmocka_unit_test(test_commit_threads),
        cmocka_unit_test(test_large_table),
        cmocka_unit_test(test_truncated_shard),
        cmocka_unit_test(test_bad_manifest),
        cmocka_unit_test(test_uncommitted_not_listed),
        cmocka_unit_test(test_latest_garbage),
        cmocka_unit_test(test_retention),
        cmocka_unit_test(test_unwritable),
        cmocka_unit_test(test_write_fails_cleanly),
        cmocka_unit_test(test_fallback_to_older),
        cmocka_unit_test(test_slice_math),
        cmocka_unit_test(test_parser_robust),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
