/*
 * ckpt_fixture.h - the checkpoint tests' shared arrangement (test_ckpt.c, test_ckpt_corrupt.c):
 * scratch directories, a model state of REPLICATED and SHARDED regions whose contents depend on
 * (step, rank, region) only, writing and committing every rank's shard of a step, and loading
 * one rank's with a byte-for-byte comparison against the expected state. Private to those
 * tests; the functions are static inline so that a program using only some of them is not
 * warned about the others. Include after <cmocka.h>.
 */
#ifndef FTRT_TEST_CKPT_FIXTURE_H
#define FTRT_TEST_CKPT_FIXTURE_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "checkpoint/commit.h"
#include "checkpoint/restore.h"
#include "checkpoint/shard.h"
#include "helpers.h"

/* ---- scratch directories (helpers.h) ----------------------------------------------------- */

static inline void make_tmpdir(char *buf, size_t cap)
{
    assert_int_equal(t_tmpdir(buf, cap, "ckpt"), 0);
}
#define rm_rf(path) t_rmtree(path)
#define path_exists t_exists

static inline void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* XORs mask into the byte at off of a file. */
static inline void flip_byte(const char *path, off_t off, unsigned char mask)
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

static inline void add_region(state *s, const char *name, size_t bytes, ftrt__region_kind kind)
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
static inline void make_state(state *s, int64_t step, int rank, int with_sharded, int blank)
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
        else t_fill(s->r[i].ptr, s->r[i].bytes, seed);
    }
}

static inline void free_state(state *s)
{
    for (int i = 0; i < s->n; i++) free(s->r[i].ptr);
    s->n = 0;
}

static inline void assert_state_equal(const state *a, const state *b)
{
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        assert_int_equal(a->r[i].bytes, b->r[i].bytes);
        if (a->r[i].bytes) assert_memory_equal(a->r[i].ptr, b->r[i].ptr, a->r[i].bytes);
    }
}

/* Writes every rank's shard of `step` and commits it. */
static inline void checkpoint_all(const char *dir, int64_t step, int n, int with_sharded, int keep)
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
static inline int load_and_check(const char *dir, int64_t step, int rank, int n, int with_sharded)
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

static inline void shard_path(char *buf, size_t cap, const char *dir, int64_t step, int rank)
{
    snprintf(buf, cap, "%s/step-%lld/rank-%d.ftrt", dir, (long long)step, rank);
}

#endif
