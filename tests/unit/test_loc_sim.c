/*
 * test_loc_sim.c - the location interface (kernels/location.h) and the simulated device
 * (kernels/loc_sim.c, a test arrangement), and device regions checkpointed and restored on it:
 *  - the simulated device's memory is PROT_NONE outside the backend's calls: a child process
 *    that dereferences it dies of SIGSEGV, one that goes through the backend does not;
 *  - to_host / from_host / crc / d2d round-trip on the host and the simulated backends, a
 *    CRC32C mismatch is refused (FTRT_ECORRUPT), pointers outside the arena (FTRT_EINVAL);
 *  - a checkpoint of SHARDED and REPLICATED device regions (with a host one) through the
 *    asynchronous engine, restored into device memory byte-identical (read back through the
 *    backend); a bit flipped in the newest shard makes its load fail with FTRT_ECORRUPT while
 *    the previous checkpoint (the one ftrt_restore falls back to) still loads intact; without a
 *    device backend the load refuses device regions (FTRT_ENOTSUP);
 *  - the same through the synchronous path (staging below one shard: the streaming writer
 *    reads device regions through the backend), and its refusal without a backend.
 * The engine runs with port fakes and a fake coordinator thread, as in test_ckpt_engine.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/crc32c.h"
#include "base/proto.h"
#include "checkpoint/commit.h"
#include "checkpoint/engine.h"
#include "checkpoint/restore.h"
#include "checkpoint/shard.h"
#include "ftrt.h"
#include "helpers.h"
#include "kernels/location.h"

/* ---- the simulated device on its own ------------------------------------------------------ */

/* Runs fn(p) in a child process; returns its wait status. */
static int in_child(void (*fn)(void *), void *p)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa; /* the default action, even under a sanitizer's handler */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGSEGV, &sa, NULL);
        fn(p);
        _exit(0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return st;
}

static void touch_read(void *p) { _exit(((volatile unsigned char *)p)[7] == 0x5a ? 3 : 4); }
static void touch_write(void *p) { ((volatile unsigned char *)p)[100] = 1; }
static void through_backend(void *p)
{
    unsigned char b[16];
    _exit(ftrt__sim_read(b, (unsigned char *)p + 7, 1) == 0 && b[0] == 0x5a ? 0 : 5);
}

static int died_of_segv(int st) { return WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV; }

/* The arena is PROT_NONE outside the backend's calls, also right after one. */
static void arena_traps(void **state)
{
    (void)state;
    unsigned char *d = ftrt__sim_alloc(10000);
    assert_non_null(d);
    unsigned char src[64];
    memset(src, 0x5a, sizeof src);
    assert_int_equal(ftrt__sim_write(d, src, sizeof src), 0); /* opened and closed again */
    int st = in_child(touch_read, d);
    if (!died_of_segv(st))
        fail_msg("a host read of simulated device memory was not trapped (status %#x)", st);
    st = in_child(touch_write, d + 8192); /* the last page too */
    if (!died_of_segv(st))
        fail_msg("a host write of simulated device memory was not trapped (status %#x)", st);
    st = in_child(through_backend, d);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    ftrt__sim_free(d);
    assert_null(ftrt__sim_alloc(0));
}

/* One backend's operations: round trips, CRC32C in place, d2d, and the mismatch refused. */
static void round_trips(const ftrt__loc_ops *ops, unsigned char *d1, unsigned char *d2, size_t n)
{
    unsigned char *h = malloc(n), *back = malloc(n);
    assert_non_null(h);
    assert_non_null(back);
    t_fill(h, n, 19);
    uint32_t want = ftrt__crc32c(0, h, n), crc = 0;
    assert_int_equal(ops->from_host(d1, h, n, want), 0);
    assert_int_equal(ops->to_host(back, d1, n, &crc), 0);
    assert_memory_equal(back, h, n);
    assert_int_equal(crc, want);
    crc = 0;
    assert_int_equal(ops->crc(d1, n, &crc), 0);
    assert_int_equal(crc, want);
    assert_int_equal(ops->crc(d1 + 1, n - 1, &crc), 0); /* an inner range */
    assert_int_equal(crc, ftrt__crc32c(0, h + 1, n - 1));
    assert_int_equal(ops->d2d(d2, d1, n), 0);
    memset(back, 0, n);
    assert_int_equal(ops->to_host(back, d2, n, &crc), 0);
    assert_memory_equal(back, h, n);
    /* A CRC32C that does not match what arrives is refused. */
    assert_int_equal(ops->from_host(d1, h, n, want ^ 0x10u), FTRT_ECORRUPT);
    h[n / 2] ^= 4; /* a damaged source against the right CRC */
    assert_int_equal(ops->from_host(d2, h, n, want), FTRT_ECORRUPT);
    assert_int_equal(ops->to_host(back, d1, 0, &crc), 0); /* empty: no-op */
    assert_int_equal(crc, 0);
    free(h);
    free(back);
}

static void backends(void **state)
{
    (void)state;
    size_t n = 3 * 4096 + 17;
    unsigned char *a = malloc(n), *b = malloc(n);
    round_trips(&ftrt__loc_host, a, b, n);
    free(a);
    free(b);
    const ftrt__loc_ops *sim = ftrt__loc_sim();
    assert_string_equal(sim->name, "sim");
    unsigned char *d1 = ftrt__sim_alloc(n), *d2 = ftrt__sim_alloc(n);
    assert_non_null(d1);
    assert_non_null(d2);
    round_trips(sim, d1, d2, n);
    /* Pointers the simulated device does not own: a host buffer, a range past the end. */
    unsigned char host[64] = {0};
    uint32_t crc;
    assert_int_equal(sim->to_host(host, host, sizeof host, &crc), FTRT_EINVAL);
    assert_int_equal(sim->to_host(host, d1 + n - 8, 16, &crc), FTRT_EINVAL);
    assert_int_equal(sim->from_host(d2 + 1, host, n, ftrt__crc32c(0, host, sizeof host)),
                     FTRT_EINVAL);
    assert_int_equal(sim->d2d(d1, d2, n), 0); /* d1 holds d2's (damaged) bytes now */
    ftrt__sim_free(d1);
    ftrt__sim_free(d2);
}

/* ---- the checkpoint engine with device regions on the simulated device ---------------------- */

typedef struct fixture {
    ftrt__watch w;
    t_host th;
    ftrt__ckpt_opts o;
    struct ftrt__ckpt_engine *e;
    t_coord coord; /* the fake coordinator: commits each shard (N = 1), keep 4 */
    char dir[4096];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(t_tmpdir(f->dir, sizeof f->dir, "locsim"), 0);
    f->o = (ftrt__ckpt_opts){.qd = 4, .chunk_kb = 256, .direct = 1, .policy = FTRT_CKPT_WAIT};
    memcpy(f->o.dir, f->dir, strlen(f->dir) + 1);
    t_watch_init(&f->w);
    ftrt__host host = t_host_init(&f->th);
    assert_int_equal(ftrt__ckpt_engine_new(&f->o, &f->w, host, &f->e), 0);
    assert_int_equal(t_coord_start(&f->coord, &f->th, f->e, f->dir, 4), 0);
    ftrt__loc_set_device(ftrt__loc_sim());
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    t_coord_stop(&f->coord);
    ftrt__ckpt_engine_free(f->e);
    t_coord_destroy(&f->coord);
    t_host_destroy(&f->th);
    t_rmtree(f->dir);
    free(f);
    ftrt__loc_set_device(NULL);
    return 0;
}

static ftrt__region region(const char *name, void *p, size_t bytes, ftrt__region_kind k,
                           ftrt__region_loc l)
{
    ftrt__region r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "%s", name);
    r.ptr = p;
    r.bytes = bytes;
    r.kind = k;
    r.loc = l;
    return r;
}

/* A committed checkpoint of regs, taken through the engine. */
static void checkpoint(fixture *f, int64_t step, const ftrt__region *regs, int n)
{
    assert_int_equal(ftrt__ckpt_start(f->e, step, regs, n, 0, 1), 0);
    ftrt__ckpt_finish_snapshot(f->e);
    assert_int_equal(ftrt__ckpt_wait_commit(f->e, step, 30000), 0);
}

/* Loads `step` with small reads (several pieces per device region). */
static int load(fixture *f, int64_t step, const ftrt__region *regs, int n)
{
    ftrt__load_opts o = {.qd = 2, .chunk = 1u << 20, .direct = 1};
    return ftrt__ckpt_load_ex(f->dir, step, 0, 1, regs, n, &o, NULL);
}

/* Device memory through the backend equals want. */
static void dev_equals(const void *dev, const void *want, size_t n)
{
    unsigned char *b = malloc(n);
    assert_non_null(b);
    assert_int_equal(ftrt__sim_read(b, dev, n), 0);
    assert_memory_equal(b, want, n);
    free(b);
}

/* Flips one bit of the shard of `step` where the bytes `needle` (64 of them) are. */
static void flip_in_shard(fixture *f, int64_t step, const unsigned char *needle)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/step-%lld/rank-0.ftrt", f->dir, (long long)step);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    unsigned char *buf = malloc((size_t)st.st_size);
    assert_non_null(buf);
    assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
    unsigned char *at = memmem(buf, (size_t)st.st_size, needle, 64);
    assert_non_null(at);
    unsigned char b = *at ^ 0x20;
    assert_int_equal(pwrite(fd, &b, 1, at - buf), 1);
    free(buf);
    close(fd);
}

static void device_checkpoint_restore(void **state)
{
    fixture *f = *state;
    /* SHARDED device state over two snapshot pieces (8 MiB each) and many restore pieces, a
     * REPLICATED device region and a host one. */
    size_t ns = (9u << 20) + 5, nr = 4097, nh = 1000;
    unsigned char *ds = ftrt__sim_alloc(ns), *dr = ftrt__sim_alloc(nr), *h = malloc(nh);
    unsigned char *s1 = malloc(ns), *r1 = malloc(nr), *h1 = malloc(nh);
    unsigned char *s2 = malloc(ns), *r2 = malloc(nr), *h2 = malloc(nh), *zero = calloc(1, ns);
    assert_true(ds && dr && h && s1 && r1 && h1 && s2 && r2 && h2 && zero);
    ftrt__region regs[3] = {
        region("dev.shard", ds, ns, FTRT__KIND_SHARDED, FTRT__LOC_DEVICE),
        region("dev.params", dr, nr, FTRT__KIND_REPLICATED, FTRT__LOC_DEVICE),
        region("host.rng", h, nh, FTRT__KIND_SHARDED, FTRT__LOC_HOST)};
    /* Step 1, then step 2 with other contents. */
    t_fill(s1, ns, 1), t_fill(r1, nr, 2), t_fill(h1, nh, 3);
    assert_int_equal(ftrt__sim_write(ds, s1, ns), 0);
    assert_int_equal(ftrt__sim_write(dr, r1, nr), 0);
    memcpy(h, h1, nh);
    checkpoint(f, 1, regs, 3);
    t_fill(s2, ns, 4), t_fill(r2, nr, 5), t_fill(h2, nh, 6);
    assert_int_equal(ftrt__sim_write(ds, s2, ns), 0);
    assert_int_equal(ftrt__sim_write(dr, r2, nr), 0);
    memcpy(h, h2, nh);
    checkpoint(f, 2, regs, 3);
    /* Wipe the state, restore step 2: byte-identical, in device memory. */
    assert_int_equal(ftrt__sim_write(ds, zero, ns), 0);
    assert_int_equal(ftrt__sim_write(dr, zero, nr), 0);
    memset(h, 0, nh);
    assert_int_equal(load(f, 2, regs, 3), 0);
    dev_equals(ds, s2, ns);
    dev_equals(dr, r2, nr);
    assert_memory_equal(h, h2, nh);
    /* A bit flipped in step 2's device data: that load fails with FTRT_ECORRUPT; step 1, the
     * one ftrt_restore falls back to, still comes back intact. */
    flip_in_shard(f, 2, s2 + (5u << 20));
    assert_int_equal(ftrt__sim_write(ds, zero, ns), 0);
    assert_int_equal(load(f, 2, regs, 3), FTRT_ECORRUPT);
    assert_int_equal(load(f, 1, regs, 3), 0);
    dev_equals(ds, s1, ns);
    dev_equals(dr, r1, nr);
    assert_memory_equal(h, h1, nh);
    /* ftrt__ckpt_load's defaults (one restore piece per region) load it too. */
    assert_int_equal(ftrt__sim_write(ds, zero, ns), 0);
    assert_int_equal(ftrt__ckpt_load(f->dir, 1, 0, 1, regs, 3), 0);
    dev_equals(ds, s1, ns);
    /* Without a device backend, device regions are refused, not skipped. */
    ftrt__loc_set_device(NULL);
    assert_int_equal(load(f, 1, regs, 3), FTRT_ENOTSUP);
    assert_non_null(strstr(ftrt_last_error(), "\"dev.shard\""));
    ftrt__loc_set_device(ftrt__loc_sim());
    ftrt__sim_free(ds);
    ftrt__sim_free(dr);
    free(h), free(s1), free(r1), free(h1), free(s2), free(r2), free(h2), free(zero);
}

/* Staging smaller than one shard: the engine writes synchronously (checkpoint/shard.c's
 * streaming writer), reading the device regions through the backend in staging-sized pieces;
 * the checkpoint commits and restores byte-identical into device memory. */
static void device_streaming_checkpoint(void **state)
{
    fixture *f = *state;
    size_t ns = (3u << 20) + 11, nr = 5000, nh = 333;
    unsigned char *ds = ftrt__sim_alloc(ns), *dr = ftrt__sim_alloc(nr), *h = malloc(nh);
    unsigned char *s1 = malloc(ns), *r1 = malloc(nr), *h1 = malloc(nh), *zero = calloc(1, ns);
    assert_true(ds && dr && h && s1 && r1 && h1 && zero);
    ftrt__region regs[3] = {
        region("dev.params", dr, nr, FTRT__KIND_REPLICATED, FTRT__LOC_DEVICE),
        region("host.x", h, nh, FTRT__KIND_REPLICATED, FTRT__LOC_HOST),
        region("dev.shard", ds, ns, FTRT__KIND_SHARDED, FTRT__LOC_DEVICE)};
    t_fill(s1, ns, 7), t_fill(r1, nr, 8), t_fill(h1, nh, 9);
    assert_int_equal(ftrt__sim_write(ds, s1, ns), 0);
    assert_int_equal(ftrt__sim_write(dr, r1, nr), 0);
    memcpy(h, h1, nh);
    f->o.staging_mb = 1;
    ftrt__ckpt_engine_set_opts(f->e, &f->o);
    checkpoint(f, 3, regs, 3);
    ftrt_ckpt_stats st;
    ftrt__ckpt_stats(f->e, &st, sizeof st);
    assert_true(st.flags & FTRT_CKPT_STAT_STREAMING);
    assert_int_equal(ftrt__sim_write(ds, zero, ns), 0);
    assert_int_equal(ftrt__sim_write(dr, zero, nr), 0);
    memset(h, 0, nh);
    assert_int_equal(load(f, 3, regs, 3), 0);
    dev_equals(ds, s1, ns);
    dev_equals(dr, r1, nr);
    assert_memory_equal(h, h1, nh);
    /* The writer refuses device regions when there is no backend to read them through. */
    ftrt__loc_set_device(NULL);
    assert_int_equal(ftrt__shard_write(f->dir, 4, 0, 1, regs, 3), FTRT_ENOTSUP);
    assert_non_null(strstr(ftrt_last_error(), "\"dev.params\""));
    ftrt__loc_set_device(ftrt__loc_sim());
    ftrt__sim_free(ds);
    ftrt__sim_free(dr);
    free(h), free(s1), free(r1), free(h1), free(zero);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(arena_traps),
        cmocka_unit_test(backends),
        cmocka_unit_test_setup_teardown(device_checkpoint_restore, setup, teardown),
        cmocka_unit_test_setup_teardown(device_streaming_checkpoint, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
