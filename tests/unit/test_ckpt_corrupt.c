/*
 * test_ckpt_corrupt.c - damaged checkpoints on a real filesystem: bit flips in a shard's data
 * and header, truncated and missing shards, bad MANIFESTs (and a stale header CRC), garbage in
 * LATEST, falling back to an older checkpoint when the newest is corrupt, and the shard parser
 * against truncation, 20,000 mutated headers and random bytes. Writing, committing and
 * restoring intact checkpoints is test_ckpt.c's; the shared arrangement is ckpt_fixture.h.
 * Scratch directories are created under $FTRT_TEST_TMP (or /tmp).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/crc32c.h"
#include "checkpoint/commit.h"
#include "checkpoint/format.h"
#include "checkpoint/io.h"
#include "checkpoint/restore.h"
#include "checkpoint/shard.h"
#include "checkpoint/steps.h"
#include "ckpt_fixture.h"
#include "ftrt.h"
#include "helpers.h"

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

/* ---- LATEST and the restart's choice of step --------------------------------------------- */

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

/* ---- the shard parser -------------------------------------------------------------------- */

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bitflip_data),
        cmocka_unit_test(test_bitflip_header),
        cmocka_unit_test(test_truncated_shard),
        cmocka_unit_test(test_bad_manifest),
        cmocka_unit_test(test_latest_garbage),
        cmocka_unit_test(test_fallback_to_older),
        cmocka_unit_test(test_parser_robust),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
