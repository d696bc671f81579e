/*
 * test_ckpt_engine.c - the asynchronous checkpoint engine (checkpoint/engine.c, stage.c,
 * persist.c) end to end in one process, through its ports only (base/ports.h): an epoch watch,
 * a fake host that records SHARD_DONE, and a fake coordinator thread that commits each
 * checkpoint with ftrt__ckpt_commit() (N = 1) and hands the decision to the engine's commit
 * callback, as the agent thread does. Covered: snapshot semantics (state modified
 * after wait_snapshot is not in the checkpoint), overlap with a reader, multi-piece regions
 * restored bit-exact, the wait and skip policies with slow writes, abandonment on an epoch
 * change (partial file removed, previous checkpoint stays), write failures reported through
 * the commit, regions added and removed between checkpoints, the synchronous mode below one shard of staging, the buffered fallback, draining at
 * finalize, and freeing the engine with a write in flight. This is where the application,
 * snapshot, persist and commit-callback threads meet: the suite also runs it under ThreadSanitizer.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/fs.h"
#include "base/knobs.h"
#include "base/proto.h"
#include "checkpoint/commit.h"
#include "checkpoint/engine.h"
#include "checkpoint/restore.h"
#include "checkpoint/steps.h"
#include "ftrt.h"
#include "helpers.h"

/* ---- the fixture: the engine with port fakes and a fake coordinator ------------------------ */

typedef struct fixture {
    ftrt__watch w;        /* the epoch watch the agent thread would raise */
    t_host th;            /* the fake host: SHARD_DONE messages land here */
    ftrt__ckpt_opts o;
    struct ftrt__ckpt_engine *e;
    ftrt__region regs[8]; /* the registry the runtime would keep */
    int nregs;
    t_coord coord;        /* the fake coordinator: commits each shard (N = 1), keep 2 */
    char dir[4096];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(t_tmpdir(f->dir, sizeof f->dir, "engine"), 0);
    ftrt_config c;
    ftrt_config_init(&c, sizeof c);
    f->o = (ftrt__ckpt_opts){.qd = c.ckpt_qd, .chunk_kb = 256, .direct = c.ckpt_direct,
                             .staging_mb = c.ckpt_staging_mb, .policy = c.ckpt_policy};
    assert_true(strlen(f->dir) < sizeof f->o.dir);
    memcpy(f->o.dir, f->dir, strlen(f->dir) + 1);
    t_watch_init(&f->w);
    ftrt__host host = t_host_init(&f->th);
    assert_int_equal(ftrt__ckpt_engine_new(&f->o, &f->w, host, &f->e), 0);
    assert_int_equal(t_coord_start(&f->coord, &f->th, f->e, f->dir, 2), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    t_coord_stop(&f->coord); /* the "agent" stops first, as in ftrt_finalize() */
    ftrt__ckpt_engine_free(f->e);
    t_coord_destroy(&f->coord);
    t_host_destroy(&f->th);
    t_rmtree(f->dir);
    free(f);
    ftrt__knobs.ckpt_force_buffered = 0; /* test knobs are process-wide: reset them */
    ftrt__knobs.io_force_sync = 0;
    ftrt__knobs.ckpt_no_fallocate = 0;
    ftrt__knobs.ckpt_write_delay_ms = 0;
    return 0;
}

/* ---- helpers: the runtime's side, reduced to what the engine needs ------------------------ */

#define fill t_fill
#define exists t_exists

/* Applies f->o (changed by a test) to the engine. */
static void set_opts(fixture *f) { ftrt__ckpt_engine_set_opts(f->e, &f->o); }

/* Adds a region to the registry; returns its index. */
static int reg(fixture *f, const char *name, void *ptr, size_t bytes, ftrt__region_kind kind)
{
    assert_true(f->nregs < 8);
    ftrt__region *r = &f->regs[f->nregs];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->ptr = ptr;
    r->bytes = bytes;
    r->kind = kind;
    return f->nregs++;
}

/* Removes a region once no snapshot reads it (what ftrt_unregister does). */
static int unreg(fixture *f, const char *name)
{
    int i = 0;
    while (i < f->nregs && strcmp(f->regs[i].name, name) != 0) i++;
    if (i == f->nregs) return FTRT_EINVAL;
    ftrt__ckpt_finish_snapshot(f->e);
    memmove(&f->regs[i], &f->regs[i + 1], (size_t)(f->nregs - i - 1) * sizeof f->regs[0]);
    f->nregs--;
    return 0;
}

static int start(fixture *f, int64_t step)
{
    return ftrt__ckpt_start(f->e, step, f->regs, f->nregs, 0, 1);
}

/* A blocking checkpoint: start, then help the snapshot to completion. */
static int ckpt(fixture *f, int64_t step)
{
    double t0 = ftrt__now();
    int rc = start(f, step);
    if (rc == 0) ftrt__ckpt_finish_snapshot(f->e);
    ftrt__ckpt_add_stall(f->e, ftrt__now() - t0, 1);
    return rc;
}

static int snap_wait(fixture *f)
{
    ftrt__ckpt_finish_snapshot(f->e);
    return 0;
}

/* Loads `step` into fresh buffers of the given sizes and compares them with want[]. */
static int load_equals(fixture *f, int64_t step, int n, const char **names, const size_t *sizes,
                       const ftrt__region_kind *kinds, void **want)
{
    ftrt__region r[8];
    assert_true(n <= 8);
    for (int i = 0; i < n; i++) {
        memset(&r[i], 0, sizeof r[i]);
        snprintf(r[i].name, sizeof r[i].name, "%s", names[i]);
        r[i].bytes = sizes[i];
        r[i].kind = kinds[i];
        r[i].ptr = calloc(1, sizes[i] ? sizes[i] : 1);
    }
    int rc = ftrt__ckpt_load(f->dir, step, 0, 1, r, n);
    for (int i = 0; i < n && rc == 0; i++)
        if (memcmp(r[i].ptr, want[i], sizes[i]) != 0) rc = 1;
    for (int i = 0; i < n; i++) free(r[i].ptr);
    return rc;
}

static ftrt_ckpt_stats stats(fixture *f)
{
    ftrt_ckpt_stats s;
    ftrt__ckpt_stats(f->e, &s, sizeof s);
    return s;
}

/* Loads `step` and compares its replicated region "w" with want[0..n). */
static int load_w_equals(fixture *f, int64_t step, const void *want, size_t n)
{
    const char *names[1] = {"w"};
    ftrt__region_kind fl[1] = {FTRT__KIND_REPLICATED};
    void *w[1] = {(void *)want};
    return load_equals(f, step, 1, names, &n, fl, w);
}

/* Once the (slow) write of `step` is under way, announces `epoch`: the checkpoint is abandoned,
 * its partial file removed, and nothing published. */
static void abandon_write(fixture *f, int64_t step, int epoch)
{
    for (int i = 0; i < 500 && !t_glob_count("%s/step-%lld/rank-0.ftrt.tmp.*", f->dir,
                                             (long long)step); i++)
        usleep(2000);
    assert_true(t_glob_count("%s/step-%lld/rank-0.ftrt.tmp.*", f->dir, (long long)step));
    t_watch_announce(&f->w, epoch); /* the agent thread got FAILURE(epoch) */
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, step, 20000), FTRT_ERECOVER);
    ftrt__ckpt_quiesce(f->e); /* what ftrt_recover() does */
    ftrt__ckpt_drain(f->e, 1);   /* the persist thread is done with it */
    assert_false(t_glob_count("%s/step-%lld/rank-0.ftrt.tmp.*", f->dir, (long long)step));
    assert_false(exists("%s/step-%lld/rank-0.ftrt", f->dir, (long long)step));
}

/* ---- tests ------------------------------------------------------------------------------- */

/* The checkpoint holds the state at ftrt_checkpoint(), not what the application writes after
 * it returns; a second checkpoint holds the new state; both restore bit-exact. */
static void snapshot_semantics(void **state)
{
    fixture *f = *state;
    size_t sz[2] = {3 * (8u << 20) + 4099, 777}; /* several snapshot pieces, and a small one */
    void *a = malloc(sz[0]), *b = malloc(sz[1]), *a1 = malloc(sz[0]), *b1 = malloc(sz[1]);
    fill(a, sz[0], 1);
    fill(b, sz[1], 2);
    memcpy(a1, a, sz[0]);
    memcpy(b1, b, sz[1]);
    assert_int_equal(reg(f, "params", a, sz[0], FTRT__KIND_REPLICATED), 0);
    assert_int_equal(reg(f, "rng", b, sz[1], FTRT__KIND_SHARDED), 1);
    assert_int_equal(stats(f).staging_slots, 0);
    assert_int_equal(ftrt__ckpt_prepare(f->e, f->regs, f->nregs, 0, 1), 0); /* staging before the first one */
    assert_int_equal(stats(f).staging_slots, 2);
    assert_true(stats(f).staging_bytes >= 2 * (sz[0] + sz[1]));
    assert_int_equal(ckpt(f, 10), 0);
    fill(a, sz[0], 3); /* the "optimizer update" right after the call */
    fill(b, sz[1], 4);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 10, 20000), 0);
    const char *names[2] = {"params", "rng"};
    ftrt__region_kind fl[2] = {FTRT__KIND_REPLICATED, FTRT__KIND_SHARDED};
    void *want1[2] = {a1, b1}, *want2[2] = {a, b};
    assert_int_equal(load_equals(f, 10, 2, names, sz, fl, want1), 0);
    assert_int_equal(ckpt(f, 20), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, -1, 20000), 0);
    assert_int_equal(load_equals(f, 20, 2, names, sz, fl, want2), 0);
    assert_int_equal(load_equals(f, 10, 2, names, sz, fl, want1), 0); /* keep = 2 */
    ftrt_ckpt_stats s = stats(f);
    assert_int_equal(s.started, 2);
    assert_int_equal(s.persisted, 2);
    assert_int_equal(s.committed, 2);
    assert_int_equal(s.last_committed_step, 20);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.staging_slots, 2);
    assert_true(s.last_bytes >= sz[0] + sz[1]);
    assert_true(s.stall_s > 0);
    print_message("snapshot of %.1f MiB: %.2f ms stall; persist %.2f ms (O_DIRECT %s, fixed "
                  "buffers %s)\n", (double)s.last_bytes / 1048576.0, s.last_stall_s * 1e3,
                  s.last_persist_s * 1e3, s.flags & FTRT_CKPT_STAT_DIRECT ? "yes" : "no",
                  s.flags & FTRT_CKPT_STAT_FIXED ? "yes" : "no");
    /* The same step again while committed: refused, nothing rewritten. */
    assert_int_equal(ckpt(f, 20), -EEXIST);
    free(a), free(b), free(a1), free(b1);
}

/* start / read the state / wait_snapshot / modify: the checkpoint is the state at start. */
static void overlap_with_reader(void **state)
{
    fixture *f = *state;
    size_t n = 20u << 20;
    unsigned char *p = malloc(n), *copy = malloc(n);
    fill(p, n, 9);
    memcpy(copy, p, n);
    assert_int_equal(reg(f, "w", p, n, FTRT__KIND_REPLICATED), 0);
    assert_int_equal(start(f, 1), 0);
    volatile uint64_t sum = 0; /* "forward and backward": reads only */
    for (size_t i = 0; i < n; i += 64) sum += p[i];
    assert_int_equal(snap_wait(f), 0);
    memset(p, 0xEE, n);
    assert_int_equal(snap_wait(f), 0); /* nothing running: 0 */
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 1, 20000), 0);
    assert_int_equal(load_w_equals(f, 1, copy, n), 0);
    free(p), free(copy);
}

/* Staging for one shard, slow writes: the next checkpoint waits for the write (policy wait)
 * or is skipped and reported as such (policy skip). */
static void policies(void **state)
{
    fixture *f = *state;
    size_t n = 2u << 20;
    unsigned char *p = malloc(n);
    fill(p, n, 5);
    f->o.staging_mb = 3;
    set_opts(f);             /* one 2 MiB + 4 KiB shard */
    f->o.write_delay_ms = 40;
    set_opts(f);  /* 256 KiB requests: >= 9 x 40 ms */
    assert_int_equal(reg(f, "w", p, n, FTRT__KIND_REPLICATED), 0);
    assert_int_equal(ckpt(f, 1), 0);
    assert_int_equal(stats(f).staging_slots, 1);
    double t0 = ftrt__now();
    assert_int_equal(ckpt(f, 2), 0); /* waits for step 1's write */
    double waited = ftrt__now() - t0;
    assert_true(waited > 0.1);
    f->o.policy = FTRT_CKPT_SKIP;
    set_opts(f);
    assert_int_equal(ckpt(f, 3), FTRT_SKIPPED); /* step 2 still writing */
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 3, 20000), FTRT_SKIPPED);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 2, 20000), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 1, 20000), 0);
    ftrt_ckpt_stats s = stats(f);
    assert_int_equal(s.skipped, 1);
    assert_int_equal(s.committed, 2);
    int skipped_reported = 0;
    for (int i = 0; i < t_coord_ndone(&f->coord); i++) {
        ftrt__ckpt_msg m = t_coord_done(&f->coord, i);
        if (m.step == 3) skipped_reported = m.result == FTRT_SKIPPED;
    }
    assert_true(skipped_reported);
    assert_false(exists("%s/step-3", f->dir));
    print_message("policy wait: blocked %.0f ms for the previous write\n", waited * 1e3);
    free(p);
}

/* An epoch change while a shard is being written abandons it: partial file removed, no
 * SHARD_DONE, FTRT_ERECOVER for the waiter, the previous committed step stays loadable. */
static void epoch_change_abandons(void **state)
{
    fixture *f = *state;
    size_t n = 4u << 20;
    unsigned char *p = malloc(n), *first = malloc(n);
    fill(p, n, 11);
    memcpy(first, p, n);
    assert_int_equal(reg(f, "w", p, n, FTRT__KIND_REPLICATED), 0);
    assert_int_equal(ckpt(f, 5), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 5, 20000), 0);
    f->o.write_delay_ms = 50;
    set_opts(f);
    fill(p, n, 12);
    int before = t_coord_ndone(&f->coord);
    assert_int_equal(ckpt(f, 6), 0);
    abandon_write(f, 6, 1);
    usleep(100000);
    assert_int_equal(t_coord_ndone(&f->coord), before); /* never reported */
    assert_int_equal(stats(f).abandoned, 1);
    int64_t steps[4];
    assert_int_equal(ftrt__ckpt_list(f->dir, steps, 4), 1);
    assert_int_equal(steps[0], 5);
    assert_int_equal(load_w_equals(f, 5, first, n), 0);
    /* The new epoch checkpoints again. */
    f->w.epoch = 1;
    f->o.write_delay_ms = 0;
    set_opts(f);
    assert_int_equal(ckpt(f, 6), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 6, 20000), 0);
    assert_int_equal(start(f, 7), 0);
    /* A failure announced before a checkpoint starts: nothing is taken. */
    t_watch_announce(&f->w, 2);
    for (int i = 0; i < 500 && ftrt__watch_check(&f->w) == 0; i++) usleep(2000);
    assert_int_equal(ckpt(f, 8), FTRT_ERECOVER); /* and step 7's copy is done */
    free(p), free(first);
}

/* A shard that cannot be written fails the checkpoint through the commit; training goes on
 * and the next checkpoint commits. */
static void write_failure_reported(void **state)
{
    fixture *f = *state;
    size_t n = 100000;
    unsigned char *p = malloc(n);
    fill(p, n, 21);
    assert_int_equal(reg(f, "w", p, n, FTRT__KIND_REPLICATED), 0);
    assert_int_equal(ckpt(f, 1), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 1, 20000), 0);
    char blocker[4200];
    snprintf(blocker, sizeof blocker, "%s/step-2", f->dir);
    FILE *fp = fopen(blocker, "w"); /* a file where the step directory must go */
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(ckpt(f, 2), 0); /* the snapshot is fine */
    int rc = ftrt__ckpt_wait_commit(f->e, 2, 20000);
    assert_true(rc < 0 && rc > -4096); /* -ENOTDIR or -EEXIST, from the persist */
    ftrt_ckpt_stats s = stats(f);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.last_committed_step, 1);
    assert_int_equal(ckpt(f, 3), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 3, 20000), 0);
    free(p);
}

/* Regions added and removed between checkpoints (the registry's own checks: test_regions.c). */
static void regions_change(void **state)
{
    fixture *f = *state;
    size_t sz[3] = {5000, 300000, 12345};
    void *m[3];
    for (int i = 0; i < 3; i++) {
        m[i] = malloc(sz[i]);
        fill(m[i], sz[i], 30 + (uint64_t)i);
    }
    assert_int_equal(reg(f, "a", m[0], sz[0], FTRT__KIND_REPLICATED), 0);
    assert_int_equal(reg(f, "b", m[1], sz[1], FTRT__KIND_SHARDED), 1);
    assert_int_equal(ckpt(f, 1), 0);
    assert_int_equal(unreg(f, "b"), 0);
    assert_int_equal(unreg(f, "b"), FTRT_EINVAL);
    assert_int_equal(reg(f, "c", m[2], sz[2], FTRT__KIND_REPLICATED), 1);
    assert_int_equal(ckpt(f, 2), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 2, 20000), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 1, 20000), 0);
    const char *n1[2] = {"a", "b"}, *n2[2] = {"a", "c"};
    size_t s1[2] = {sz[0], sz[1]}, s2[2] = {sz[0], sz[2]};
    ftrt__region_kind f1[2] = {FTRT__KIND_REPLICATED, FTRT__KIND_SHARDED};
    ftrt__region_kind f2[2] = {FTRT__KIND_REPLICATED, FTRT__KIND_REPLICATED};
    void *w1[2] = {m[0], m[1]}, *w2[2] = {m[0], m[2]};
    assert_int_equal(load_equals(f, 1, 2, n1, s1, f1, w1), 0);
    assert_int_equal(load_equals(f, 2, 2, n2, s2, f2, w2), 0);
    assert_int_equal(load_equals(f, 2, 2, n1, s1, f1, w1), FTRT_EMISMATCH); /* no "b" in 2 */
    for (int i = 0; i < 3; i++) free(m[i]);
}

/* Staging smaller than one shard: each checkpoint is written synchronously, and commits. */
static void streaming_below_one_shard(void **state)
{
    fixture *f = *state;
    size_t n = 3u << 20;
    unsigned char *p = malloc(n), *copy = malloc(n);
    fill(p, n, 41);
    memcpy(copy, p, n);
    f->o.staging_mb = 1;
    set_opts(f);
    assert_int_equal(reg(f, "w", p, n, FTRT__KIND_REPLICATED), 0);
    assert_int_equal(ckpt(f, 4), 0);
    memset(p, 0, n);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 4, 20000), 0);
    ftrt_ckpt_stats s = stats(f);
    assert_true(s.flags & FTRT_CKPT_STAT_STREAMING);
    assert_int_equal(s.staging_slots, 0);
    assert_int_equal(load_w_equals(f, 4, copy, n), 0);
    free(p), free(copy);
}

/* Buffered I/O when O_DIRECT is not used; reads back the same bytes. */
static void buffered_fallback(void **state)
{
    fixture *f = *state;
    size_t n = 1u << 20;
    unsigned char *p = malloc(n);
    fill(p, n, 51);
    ftrt__knobs.ckpt_force_buffered = 1;
    assert_int_equal(reg(f, "w", p, n, FTRT__KIND_REPLICATED), 0);
    assert_int_equal(ckpt(f, 9), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 9, 20000), 0);
    assert_false(stats(f).flags & FTRT_CKPT_STAT_DIRECT);
    assert_int_equal(load_w_equals(f, 9, p, n), 0);
    free(p);
}

/* Without io_uring (the persist thread's ring refused): the image is written with pwrite, the
 * slow-write knob and the abandon poll still act between requests, and what is written
 * restores bit-exact. */
static void sync_fallback(void **state)
{
    fixture *f = *state;
    size_t n = 6u << 20;
    unsigned char *p = malloc(n), *first = malloc(n);
    fill(p, n, 61);
    memcpy(first, p, n);
    ftrt__knobs.io_force_sync = 1; /* before the first checkpoint starts the persist thread */
    assert_int_equal(reg(f, "w", p, n, FTRT__KIND_REPLICATED), 0);
    assert_int_equal(ckpt(f, 1), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 1, 20000), 0);
    assert_false(stats(f).flags & FTRT_CKPT_STAT_FIXED); /* no ring, no registered buffers */
    f->o.write_delay_ms = 20; /* 24 requests of 256 KiB: about half a second */
    set_opts(f);
    fill(p, n, 62);
    assert_int_equal(ckpt(f, 2), 0);
    abandon_write(f, 2, 1);
    assert_int_equal(stats(f).abandoned, 1);
    assert_int_equal(load_w_equals(f, 1, first, n), 0);
    free(p), free(first);
}

/* Finalize's drain waits for the write and the commit; freeing the engine with a write in
 * flight abandons it without leaking or hanging. */
static void drain_and_free(void **state)
{
    fixture *f = *state;
    size_t n = 2u << 20;
    unsigned char *p = malloc(n);
    fill(p, n, 61);
    assert_int_equal(reg(f, "w", p, n, FTRT__KIND_REPLICATED), 0);
    f->o.write_delay_ms = 20;
    set_opts(f);
    assert_int_equal(ckpt(f, 1), 0);
    ftrt__ckpt_drain(f->e, 1);
    ftrt_ckpt_stats s = stats(f);
    assert_int_equal(s.committed, 1);
    assert_true(exists("%s/step-1/MANIFEST", f->dir));
    f->o.write_delay_ms = 200;
    set_opts(f);
    assert_int_equal(ckpt(f, 2), 0);
    for (int i = 0; i < 500 && !t_glob_count("%s/step-2/rank-0.ftrt.tmp.*", f->dir); i++) usleep(2000);
    double t0 = ftrt__now();
    ftrt__ckpt_engine_free(f->e);
    f->e = NULL; /* teardown's call is a no-op */
    assert_true(ftrt__now() - t0 < 5.0);
    assert_false(t_glob_count("%s/step-2/rank-0.ftrt.tmp.*", f->dir));
    assert_false(exists("%s/step-2/MANIFEST", f->dir));
    free(p);
}

/* State checks of the engine (the API's argument checks: test_regions.c). */
static void bad_calls(void **state)
{
    fixture *f = *state;
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 99, 10), FTRT_EINVAL);
    /* Empty registry: an empty shard still commits. */
    assert_int_equal(ckpt(f, 1), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 1, 20000), 0);
    /* A second start of an undecided step is refused. */
    t_coord_auto_commit(&f->coord, 0);
    assert_int_equal(ckpt(f, 2), 0);
    assert_int_equal(ckpt(f, 2), FTRT_EINVAL);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 2, 50), FTRT_ETIMEDOUT);
    /* Duplicate names in the table are refused at the start. */
    char x[16] = {0};
    reg(f, "dup", x, sizeof x, FTRT__KIND_REPLICATED);
    reg(f, "dup", x, sizeof x, FTRT__KIND_REPLICATED);
    assert_int_equal(ckpt(f, 3), -EINVAL);
    /* A job that is over interrupts a start. */
    atomic_store(&f->w.fatal, FTRT_EABORT);
    assert_int_equal(ckpt(f, 4), FTRT_EABORT);
    atomic_store(&f->w.fatal, 0);
    /* A smaller struct gets the leading fields. */
    uint32_t small[4] = {0};
    ftrt__ckpt_stats(f->e, (ftrt_ckpt_stats *)(void *)small, 16);
    assert_int_equal(small[0], 16);
}

/* The engine's settings from the environment: defaults, values, and bad values refused by
 * name with the default kept. */
static void settings(void **state)
{
    (void)state;
    static const char *vars[] = {"FTRT_CKPT_QD", "FTRT_CKPT_CHUNK_KB", "FTRT_CKPT_STAGING_MB",
                                 "FTRT_CKPT_POLICY", "FTRT_CKPT_DIRECT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    ftrt_config c;
    assert_int_equal(ftrt_config_init(&c, sizeof c), 0);
    assert_int_equal(c.ckpt_qd, 8);
    assert_int_equal(c.ckpt_chunk_kb, 4096);
    assert_int_equal(c.ckpt_staging_mb, 0);
    assert_int_equal(c.ckpt_policy, FTRT_CKPT_WAIT);
    assert_int_equal(c.ckpt_direct, 1);
    setenv("FTRT_CKPT_QD", "32", 1);
    setenv("FTRT_CKPT_CHUNK_KB", "1024", 1);
    setenv("FTRT_CKPT_STAGING_MB", "512", 1);
    setenv("FTRT_CKPT_POLICY", "SKIP", 1);
    setenv("FTRT_CKPT_DIRECT", "0", 1);
    assert_int_equal(ftrt_config_init(&c, sizeof c), 0);
    assert_int_equal(c.ckpt_qd, 32);
    assert_int_equal(c.ckpt_chunk_kb, 1024);
    assert_int_equal(c.ckpt_staging_mb, 512);
    assert_int_equal(c.ckpt_policy, FTRT_CKPT_SKIP);
    assert_int_equal(c.ckpt_direct, 0);
    static const char *bad[][2] = {{"FTRT_CKPT_CHUNK_KB", "3000"}, {"FTRT_CKPT_CHUNK_KB", "32"},
                                   {"FTRT_CKPT_QD", "0"}, {"FTRT_CKPT_POLICY", "maybe"},
                                   {"FTRT_CKPT_STAGING_MB", "-1"}, {"FTRT_CKPT_DIRECT", "2"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) unsetenv(vars[k]);
        setenv(bad[i][0], bad[i][1], 1);
        assert_int_equal(ftrt_config_init(&c, sizeof c), FTRT_ECONFIG);
        assert_int_equal(c.ckpt_chunk_kb, 4096); /* defaults kept */
        assert_int_equal(c.ckpt_qd, 8);
        assert_int_equal(c.ckpt_policy, FTRT_CKPT_WAIT);
        assert_int_equal(c.ckpt_staging_mb, 0);
        assert_int_equal(c.ckpt_direct, 1);
    }
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

/* ENOSPC on a 1 MiB tmpfs (test program run with --enospc; exit 77 when mounting is not
 * allowed): the checkpoint fails cleanly through the commit, both when the fallocate and when
 * a write runs out of room; the previous committed step stays restorable; training goes on and
 * the next checkpoint that fits commits. */
static int mounted;

static int setup_tmpfs(void **state)
{
    setup(state);
    fixture *f = *state;
    mounted = mount("tmpfs", f->dir, "tmpfs", 0, "size=1m") == 0;
    return 0;
}

static int teardown_tmpfs(void **state)
{
    fixture *f = *state;
    ftrt__ckpt_engine_free(f->e);
    f->e = NULL;
    if (mounted) umount2(f->dir, MNT_DETACH);
    return teardown(state);
}

static void enospc(void **state)
{
    fixture *f = *state;
    assert_true(mounted);
    size_t small = 100000, big = 2u << 20;
    unsigned char *a = malloc(small), *b = malloc(big), *a1 = malloc(small);
    fill(a, small, 71);
    fill(b, big, 72);
    memcpy(a1, a, small);
    assert_int_equal(reg(f, "a", a, small, FTRT__KIND_REPLICATED), 0);
    assert_int_equal(ckpt(f, 1), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 1, 20000), 0);
    fill(a, small, 73);
    assert_int_equal(reg(f, "b", b, big, FTRT__KIND_REPLICATED), 1);
    assert_int_equal(ckpt(f, 2), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 2, 20000), -ENOSPC); /* fallocate */
    ftrt__knobs.ckpt_no_fallocate = 1;
    assert_int_equal(ckpt(f, 3), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 3, 20000), -ENOSPC); /* a write */
    ftrt__knobs.ckpt_no_fallocate = 0;
    assert_false(t_glob_count("%s/step-2/rank-0.ftrt.tmp.*", f->dir));
    assert_false(t_glob_count("%s/step-3/rank-0.ftrt.tmp.*", f->dir));
    assert_false(exists("%s/step-3/rank-0.ftrt", f->dir));
    ftrt_ckpt_stats s = stats(f);
    assert_int_equal(s.failed, 2);
    assert_int_equal(s.last_committed_step, 1);
    int64_t steps[4];
    assert_int_equal(ftrt__ckpt_list(f->dir, steps, 4), 1);
    assert_int_equal(steps[0], 1);
    const char *names[1] = {"a"};
    ftrt__region_kind fl[1] = {FTRT__KIND_REPLICATED};
    void *want[1] = {a1};
    assert_int_equal(load_equals(f, 1, 1, names, &small, fl, want), 0);
    /* Training goes on: without the big region the next checkpoint fits and commits. */
    assert_int_equal(unreg(f, "b"), 0);
    assert_int_equal(ckpt(f, 4), 0);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, 4, 20000), 0);
    want[0] = a;
    assert_int_equal(load_equals(f, 4, 1, names, &small, fl, want), 0);
    free(a), free(b), free(a1);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--enospc") == 0) {
        /* Probe once: without the right to mount, the case is skipped (exit 77). */
        char probe[4096];
        const char *base = getenv("FTRT_TEST_TMP");
        snprintf(probe, sizeof probe, "%s/enospc-probe-XXXXXX", base && *base ? base : "/tmp");
        ftrt__mkdir_p(base && *base ? base : "/tmp");
        if (!mkdtemp(probe)) return 77;
        int ok = mount("tmpfs", probe, "tmpfs", 0, "size=1m") == 0;
        if (ok) umount2(probe, MNT_DETACH);
        rmdir(probe);
        if (!ok) {
            printf("cannot mount a tmpfs here (%s): skipping\n", strerror(errno));
            return 77;
        }
        const struct CMUnitTest t[] = {
            cmocka_unit_test_setup_teardown(enospc, setup_tmpfs, teardown_tmpfs),
        };
        return cmocka_run_group_tests(t, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(snapshot_semantics, setup, teardown),
        cmocka_unit_test_setup_teardown(overlap_with_reader, setup, teardown),
        cmocka_unit_test_setup_teardown(policies, setup, teardown),
        cmocka_unit_test_setup_teardown(epoch_change_abandons, setup, teardown),
        cmocka_unit_test_setup_teardown(write_failure_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(regions_change, setup, teardown),
        cmocka_unit_test_setup_teardown(streaming_below_one_shard, setup, teardown),
        cmocka_unit_test_setup_teardown(buffered_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(sync_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(drain_and_free, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_calls, setup, teardown),
        cmocka_unit_test(settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
