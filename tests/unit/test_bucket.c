/*
 * Unit tests: gradient buckets. The assignment (DDP's rules in gradient-ready order) on fixed
 * and random sizes, and the bucketer's step state machine over a fake backend: buckets start in
 * order, a bucket starts exactly when its last tensor is ready, pieces split tensors exactly and
 * start when the tensors they cover are ready, the mean is requested with 1/N, misuse is
 * refused, an epoch change ends the step with FTRT_ERECOVER.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "comm/bucketer.h"
#include "comm/plane.h"
#include "ftrt.h"
#include "helpers.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1 << 20)

/* ---- assignment ---- */

static void check_bucket(const int *order, const int *start, int k, const int *want, int nwant)
{
    assert_int_equal(start[k + 1] - start[k], nwant);
    for (int j = 0; j < nwant; j++) assert_int_equal(order[start[k] + j], want[j]);
}

static void assign_first_bucket_small(void **state)
{
    (void)state;
    /* 5 x 400 KiB, ready last-first: 4, 3, 2 reach 1200 KiB >= 1 MiB and close bucket 0. */
    size_t b[5] = {400 * KiB, 400 * KiB, 400 * KiB, 400 * KiB, 400 * KiB};
    int order[5], start[6], of[5];
    int nb = ftrt__bucket_assign(b, 5, 1, 1 * MiB, 25 * MiB, order, start, of);
    assert_int_equal(nb, 2);
    check_bucket(order, start, 0, (int[]){4, 3, 2}, 3);
    check_bucket(order, start, 1, (int[]){1, 0}, 2);
    assert_int_equal(of[4], 0);
    assert_int_equal(of[0], 1);
}

static void assign_oversized_and_exact(void **state)
{
    (void)state;
    /* A tensor above the limit closes its bucket at once (DDP appends, then compares). */
    size_t b[4] = {10 * MiB, 1 * KiB, 30 * MiB, 1 * KiB};
    int order[4], start[5], of[4];
    int nb = ftrt__bucket_assign(b, 4, 1, 1 * MiB, 25 * MiB, order, start, of);
    assert_int_equal(nb, 2);
    check_bucket(order, start, 0, (int[]){3, 2}, 2);
    check_bucket(order, start, 1, (int[]){1, 0}, 2);
    /* Exactly the limit closes the bucket; forward order when reverse = 0. */
    size_t c[4] = {1 * MiB, 20 * MiB, 5 * MiB, 1};
    nb = ftrt__bucket_assign(c, 4, 0, 1 * MiB, 25 * MiB, order, start, of);
    assert_int_equal(nb, 3);
    check_bucket(order, start, 0, (int[]){0}, 1);
    check_bucket(order, start, 1, (int[]){1, 2}, 2);
    check_bucket(order, start, 2, (int[]){3}, 1);
    /* One tensor: one bucket. */
    nb = ftrt__bucket_assign(c, 1, 1, 1 * MiB, 25 * MiB, order, start, of);
    assert_int_equal(nb, 1);
    assert_int_equal(ftrt__bucket_assign(c, 0, 1, 1, 1, order, start, of), FTRT_EINVAL);
    assert_int_equal(ftrt__bucket_assign(c, 4, 1, 0, 1, order, start, of), FTRT_EINVAL);
    assert_int_equal(ftrt__bucket_assign(c, 4, 1, 1, 0, order, start, of), FTRT_EINVAL);
}

/* Invariants on random sizes: order is the ready order; every bucket but the last reaches its
 * limit and would not without its last tensor; bucket_of agrees with start. */
static void assign_random_invariants(void **state)
{
    (void)state;
    srand(12345);
    for (int trial = 0; trial < 2000; trial++) {
        int n = 1 + rand() % 200, rev = rand() & 1;
        size_t first = 1 + (size_t)(rand() % 4096), cap = 1 + (size_t)(rand() % 65536);
        size_t *b = malloc((size_t)n * sizeof *b);
        int *order = malloc((size_t)n * sizeof *order), *start = malloc((size_t)(n + 1) * sizeof *start);
        int *of = malloc((size_t)n * sizeof *of);
        for (int i = 0; i < n; i++) b[i] = (size_t)(rand() % 3 ? rand() % 8192 : rand() % 200000);
        int nb = ftrt__bucket_assign(b, n, rev, first, cap, order, start, of);
        assert_true(nb >= 1 && nb <= n);
        assert_int_equal(start[0], 0);
        assert_int_equal(start[nb], n);
        for (int j = 0; j < n; j++) assert_int_equal(order[j], rev ? n - 1 - j : j);
        for (int k = 0; k < nb; k++) {
            assert_true(start[k + 1] > start[k]);
            size_t sum = 0, limit = k == 0 ? first : cap;
            for (int j = start[k]; j < start[k + 1]; j++) {
                assert_int_equal(of[order[j]], k);
                sum += b[order[j]];
            }
            size_t last = b[order[start[k + 1] - 1]];
            if (k < nb - 1) assert_true(sum >= limit);
            assert_true(sum - last < limit);
        }
        free(b);
        free(order);
        free(start);
        free(of);
    }
}

static void config_defaults(void **state)
{
    (void)state;
    ftrt_bucket_config c;
    assert_int_equal(ftrt_bucket_config_init(&c, sizeof c), 0);
    assert_int_equal(c.bucket_bytes, 25 * MiB);
    assert_int_equal(c.first_bucket_bytes, 1 * MiB);
    assert_int_equal(c.reverse, 1);
    assert_int_equal(c.average, 1);
    assert_int_equal(c.piece_bytes, 4 * MiB);
    assert_int_equal(c.size, sizeof c);
    assert_int_equal(ftrt_bucket_config_init(&c, 4), FTRT_EINVAL);
    /* a caller built before in_place: its fields filled, nothing past them written */
    size_t old = offsetof(ftrt_bucket_config, in_place);
    memset(&c, 0x5A, sizeof c);
    assert_int_equal(ftrt_bucket_config_init(&c, old), 0);
    assert_int_equal(c.size, old);
    assert_int_equal(c.piece_bytes, 4 * MiB);
    assert_int_equal(c.in_place, 0x5A5A5A5A);
    assert_int_equal(ftrt_bucket_config_init(NULL, sizeof c), FTRT_EINVAL);
    /* only whole structs of a known version: not a field cut in two, not a newer struct */
    assert_int_equal(ftrt_bucket_config_init(&c, sizeof c - 1), FTRT_EINVAL);
    assert_int_equal(ftrt_bucket_config_init(&c, old + 1), FTRT_EINVAL);
    assert_int_equal(ftrt_bucket_config_init(&c, sizeof c + 8), FTRT_EINVAL);
}

/* ---- the bucketer over a fake backend ---- */

typedef struct fake_req {
    struct ftrt_request base;
    int result;
} fake_req;

typedef struct fake_log {
    int nsub;
    int bucket[64], n[64];
    size_t count[64];
    double scale[64];
    int in_place[64];
    void *first_ptr[64];
    void *seg_ptr[64][3];
    size_t seg_bytes[64][3];
    int fail_with; /* result every request completes with */
    int live;      /* requests not yet freed */
} fake_log;

static int fr_test(struct ftrt_request *r) { return ((fake_req *)r)->result ? ((fake_req *)r)->result : 1; }
static int fr_wait(struct ftrt_request *r) { return ((fake_req *)r)->result; }
static fake_log *g_log;
static int fr_free(struct ftrt_request *r)
{
    g_log->live--;
    free(r);
    return 0;
}
static const ftrt__req_ops fr_ops = {fr_test, fr_wait, fr_free};

static int fake_submit(void *arg, int bucket, const int *tensors, const ftrt__seg *segs, int n,
                       size_t count, double scale, int in_place,
                       struct ftrt_request **req)
{
    fake_log *l = arg;
    (void)tensors;
    int i = l->nsub++;
    l->in_place[i] = in_place;
    l->bucket[i] = bucket;
    l->n[i] = n;
    l->count[i] = count;
    l->scale[i] = scale;
    l->first_ptr[i] = segs[0].ptr;
    for (int j = 0; j < n && j < 3; j++) {
        l->seg_ptr[i][j] = segs[j].ptr;
        l->seg_bytes[i][j] = segs[j].bytes;
    }
    fake_req *r = calloc(1, sizeof *r);
    r->base.ops = &fr_ops;
    r->result = l->fail_with;
    l->live++;
    *req = &r->base;
    return 0;
}

static const ftrt__bucket_backend fake_backend = {fake_submit, fr_wait, NULL, 0, NULL};

/* The data plane as the runtime would hand it over: a watch and a host (port fakes), the size
 * of the trainers' communicator; no MPI. */
typedef struct fake_plane {
    ftrt__plane p;
    ftrt__watch w;
    t_host th;
} fake_plane;

static fake_plane *fake_ctx(int size)
{
    fake_plane *fp = calloc(1, sizeof *fp);
    t_watch_init(&fp->w);
    ftrt__plane_init(&fp->p, &fp->w, t_host_init(&fp->th), 1, 50);
    fp->p.size = size;
    return fp;
}

static void free_ctx(fake_plane *fp)
{
    t_host_destroy(&fp->th);
    free(fp);
}

static void bucketer_orders_buckets(void **state)
{
    (void)state;
    fake_plane *ctx = fake_ctx(4);
    fake_log log = {0};
    g_log = &log;
    /* 6 float tensors of 100 elements (400 B); first bucket 400 B, then 800 B, reverse:
     * buckets {5}, {4, 3}, {2, 1}, {0}. */
    size_t counts[6] = {100, 100, 100, 100, 100, 100};
    float t[6][100];
    ftrt_bucket_config c;
    ftrt_bucket_config_init(&c, sizeof c);
    c.first_bucket_bytes = 400;
    c.bucket_bytes = 800;
    ftrt_bucketer *b;
    assert_int_equal(ftrt__bucketer_create_be(&ctx->p, counts, 6, FTRT_FLOAT32, &c, &fake_backend,
                                              &log, &b), 0);
    assert_int_equal(ftrt_bucketer_buckets(b), 4);
    assert_int_equal(ftrt_bucketer_bucket_of(b, 5), 0);
    assert_int_equal(ftrt_bucketer_bucket_of(b, 3), 1);
    assert_int_equal(ftrt_bucketer_bucket_of(b, 0), 3);
    assert_int_equal(ftrt_bucketer_bucket_of(b, 6), FTRT_EINVAL);
    for (int step = 0; step < 3; step++) {
        log.nsub = 0;
        /* Out of order: bucket 1 completes before bucket 0 and must wait for it. */
        assert_int_equal(ftrt_bucketer_ready(b, 4, t[4]), 0);
        assert_int_equal(ftrt_bucketer_ready(b, 3, t[3]), 0);
        assert_int_equal(log.nsub, 0);
        assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ESTATE); /* not all ready: no change */
        assert_int_equal(ftrt_bucketer_ready(b, 3, t[3]), FTRT_EINVAL); /* twice */
        assert_int_equal(ftrt_bucketer_ready(b, 5, t[5]), 0);
        assert_int_equal(log.nsub, 2); /* buckets 0 and 1, in order */
        assert_int_equal(log.bucket[0], 0);
        assert_int_equal(log.bucket[1], 1);
        assert_int_equal(log.n[1], 2);
        assert_int_equal(log.count[1], 200);
        assert_ptr_equal(log.first_ptr[1], t[4]); /* bucket order is ready order */
        assert_true(log.scale[0] == 0.25);        /* mean over 4 trainers */
        assert_int_equal(ftrt_bucketer_ready(b, 1, t[1]), 0);
        assert_int_equal(log.nsub, 2);
        assert_int_equal(ftrt_bucketer_ready(b, 2, t[2]), 0);
        assert_int_equal(log.nsub, 3);
        assert_int_equal(ftrt_bucketer_ready(b, 0, t[0]), 0);
        assert_int_equal(log.nsub, 4);
        assert_int_equal(ftrt_bucketer_free(b), FTRT_ESTATE); /* a step is in flight */
        assert_int_equal(ftrt_bucketer_wait_all(b), 0);
        assert_int_equal(log.live, 0);
        assert_int_equal(ctx->th.wait_ends, step + 1); /* one bracket per step, via the host */
    }
    assert_int_equal(ftrt_bucketer_ready(b, -1, t[0]), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_ready(b, 0, NULL), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_free(b), 0);
    free_ctx(ctx);
}

static void bucketer_epoch_change(void **state)
{
    (void)state;
    fake_plane *ctx = fake_ctx(2);
    fake_log log = {0};
    g_log = &log;
    size_t counts[3] = {10, 10, 10};
    float t[3][10];
    ftrt_bucket_config c;
    ftrt_bucket_config_init(&c, sizeof c);
    c.first_bucket_bytes = c.bucket_bytes = 40; /* one tensor per bucket */
    c.average = 0;
    ftrt_bucketer *b;
    assert_int_equal(ftrt__bucketer_create_be(&ctx->p, counts, 3, FTRT_FLOAT32, &c, &fake_backend,
                                              &log, &b), 0);
    assert_int_equal(ftrt_bucketer_ready(b, 2, t[2]), 0);
    assert_true(log.scale[0] == 1.0); /* plain sum */
    t_watch_announce(&ctx->w, 1); /* a rank failed */
    assert_int_equal(ftrt_bucketer_ready(b, 1, t[1]), FTRT_ERECOVER); /* not submitted */
    assert_int_equal(log.nsub, 1);
    assert_int_equal(ftrt_bucketer_ready(b, 0, t[0]), FTRT_ERECOVER);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_ERECOVER);
    assert_int_equal(ctx->w.needs_recover, 1);
    assert_int_equal(ctx->th.wait_recovers, 1); /* the host booked the failed wait */
    assert_int_equal(log.live, 0);
    /* Until ftrt_recover() ran, nothing starts. */
    assert_int_equal(ftrt_bucketer_ready(b, 2, t[2]), FTRT_ERECOVER);
    ftrt_bucketer_reset(b);
    /* Recovered: the next step works. */
    ctx->w.epoch = 1;
    ctx->w.needs_recover = 0;
    log.nsub = 0;
    for (int i = 2; i >= 0; i--) assert_int_equal(ftrt_bucketer_ready(b, i, t[i]), 0);
    assert_int_equal(log.nsub, 3);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    /* A request that fails (the backend reports an error) fails the step. */
    log.fail_with = FTRT_EMPI;
    for (int i = 2; i >= 0; i--) ftrt_bucketer_ready(b, i, t[i]);
    assert_int_equal(ftrt_bucketer_wait_all(b), FTRT_EMPI);
    assert_int_equal(log.live, 0);
    assert_int_equal(ftrt_bucketer_free(b), 0);
    free_ctx(ctx);
}

/* Pieces: a bucket's byte layout cut in ranges that split tensors; a piece starts once every
 * tensor it covers is ready, with exactly the overlapping parts of those tensors. */
static void bucketer_pieces(void **state)
{
    (void)state;
    fake_plane *ctx = fake_ctx(2);
    fake_log log = {0};
    g_log = &log;
    size_t counts[3] = {10, 30, 5}; /* bytes [0,40) [40,160) [160,180) of one bucket */
    float t[3][30];
    ftrt_bucket_config c;
    ftrt_bucket_config_init(&c, sizeof c);
    c.reverse = 0;
    c.piece_bytes = 66; /* rounded down to whole floats: 64 */
    ftrt_bucketer *b;
    assert_int_equal(ftrt__bucketer_create_be(&ctx->p, counts, 3, FTRT_FLOAT32, &c, &fake_backend,
                                              &log, &b), 0);
    assert_int_equal(ftrt_bucketer_buckets(b), 1);
    assert_int_equal(ftrt_bucketer_pieces(b), 3); /* [0,64) [64,128) [128,180) */
    for (int step = 0; step < 2; step++) {
        log.nsub = 0;
        assert_int_equal(ftrt_bucketer_ready(b, 0, t[0]), 0);
        assert_int_equal(log.nsub, 0); /* piece 0 also covers tensor 1 */
        assert_int_equal(ftrt_bucketer_ready(b, 1, t[1]), 0);
        assert_int_equal(log.nsub, 2); /* pieces 0 and 1; piece 2 waits for tensor 2 */
        assert_int_equal(log.n[0], 2);
        assert_ptr_equal(log.seg_ptr[0][0], t[0]);
        assert_int_equal(log.seg_bytes[0][0], 40);
        assert_ptr_equal(log.seg_ptr[0][1], t[1]);
        assert_int_equal(log.seg_bytes[0][1], 24);
        assert_int_equal(log.count[0], 16);
        assert_int_equal(log.n[1], 1);
        assert_ptr_equal(log.seg_ptr[1][0], (char *)t[1] + 24);
        assert_int_equal(log.seg_bytes[1][0], 64);
        assert_int_equal(ftrt_bucketer_ready(b, 2, t[2]), 0);
        assert_int_equal(log.nsub, 3);
        assert_int_equal(log.n[2], 2);
        assert_ptr_equal(log.seg_ptr[2][0], (char *)t[1] + 88);
        assert_int_equal(log.seg_bytes[2][0], 32);
        assert_ptr_equal(log.seg_ptr[2][1], t[2]);
        assert_int_equal(log.seg_bytes[2][1], 20);
        assert_int_equal(log.count[2], 13);
        for (int i = 0; i < 3; i++) assert_int_equal(log.bucket[i], 0);
        assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    }
    assert_int_equal(ftrt_bucketer_free(b), 0);
    /* Empty tensors gate the piece at their offset; piece_bytes = 0 means whole buckets. */
    size_t e[3] = {0, 4, 0};
    c.piece_bytes = 8;
    assert_int_equal(ftrt__bucketer_create_be(&ctx->p, e, 3, FTRT_FLOAT32, &c, &fake_backend, &log,
                                              &b), 0);
    assert_int_equal(ftrt_bucketer_pieces(b), 2);
    log.nsub = 0;
    assert_int_equal(ftrt_bucketer_ready(b, 1, t[1]), 0);
    assert_int_equal(log.nsub, 0); /* piece 0 waits for empty tensor 0 */
    assert_int_equal(ftrt_bucketer_ready(b, 0, NULL), 0);
    assert_int_equal(log.nsub, 1);
    assert_int_equal(ftrt_bucketer_ready(b, 2, NULL), 0);
    assert_int_equal(log.nsub, 2);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(ftrt_bucketer_free(b), 0);
    c.piece_bytes = 0;
    assert_int_equal(ftrt__bucketer_create_be(&ctx->p, counts, 3, FTRT_FLOAT32, &c, &fake_backend,
                                              &log, &b), 0);
    assert_int_equal(ftrt_bucketer_pieces(b), 1);
    assert_int_equal(ftrt_bucketer_free(b), 0);
    assert_int_equal(log.live, 0);
    free_ctx(ctx);
}

/* In place (ftrt_bucket_config.in_place): the layout places each tensor at its bucket offset;
 * gradients allocated there make every piece one run of memory, handed to the backend in
 * place, and nothing counts as packed; a piece whose tensors are apart is still copied (and
 * counted), as is everything without the option. */
static void bucketer_in_place(void **state)
{
    (void)state;
    fake_plane *ctx = fake_ctx(2);
    fake_log log = {0};
    g_log = &log;
    size_t counts[4] = {10, 30, 5, 100}; /* reverse: bucket 0 = {3}, bucket 1 = {2, 1, 0} */
    ftrt_bucket_config c;
    ftrt_bucket_config_init(&c, sizeof c);
    c.first_bucket_bytes = 400;
    c.piece_bytes = 64;
    c.in_place = 1;
    ftrt_bucketer *b;
    assert_int_equal(ftrt__bucketer_create_be(&ctx->p, counts, 4, FTRT_FLOAT32, &c, &fake_backend,
                                              &log, &b), 0);
    assert_int_equal(ftrt_bucketer_buckets(b), 2);
    size_t off[4], want[4] = {140, 20, 0, 0};
    for (int t = 0; t < 4; t++) {
        assert_int_equal(ftrt_bucketer_layout(b, t, &off[t]), t == 3 ? 0 : 1);
        assert_int_equal(off[t], want[t]);
    }
    assert_int_equal(ftrt_bucketer_layout(b, 4, &off[0]), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_layout(b, 0, NULL), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_layout(NULL, 0, &off[0]), FTRT_EINVAL);
    float flat0[100], flat1[45], apart[4][100];
    for (int step = 0; step < 2; step++) { /* views of one flat buffer per bucket */
        log.nsub = 0;
        for (int t = 3; t >= 0; t--) {
            float *base = t == 3 ? flat0 : flat1;
            assert_int_equal(ftrt_bucketer_ready(b, t, (char *)base + off[t]), 0);
        }
        assert_int_equal(log.nsub, ftrt_bucketer_pieces(b));
        for (int i = 0; i < log.nsub; i++) assert_int_equal(log.in_place[i], 1);
        assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    }
    assert_int_equal(ftrt_bucketer_packed_bytes(b), 0);
    log.nsub = 0; /* separate tensors: single-tensor pieces are in place, the others copied */
    for (int t = 3; t >= 0; t--) assert_int_equal(ftrt_bucketer_ready(b, t, apart[t]), 0);
    long long copied = 0;
    for (int i = 0; i < log.nsub; i++) {
        assert_int_equal(log.in_place[i], log.n[i] == 1);
        if (log.n[i] > 1) copied += (long long)log.count[i] * 4;
    }
    assert_true(copied > 0);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(ftrt_bucketer_packed_bytes(b), copied);
    assert_int_equal(ftrt_bucketer_free(b), 0);
    c.in_place = 0; /* the default: every piece copied, even a contiguous one */
    assert_int_equal(ftrt__bucketer_create_be(&ctx->p, counts, 4, FTRT_FLOAT32, &c, &fake_backend,
                                              &log, &b), 0);
    log.nsub = 0;
    for (int t = 3; t >= 0; t--)
        assert_int_equal(ftrt_bucketer_ready(b, t, (char *)(t == 3 ? flat0 : flat1) + off[t]), 0);
    for (int i = 0; i < log.nsub; i++) assert_int_equal(log.in_place[i], 0);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(ftrt_bucketer_packed_bytes(b), 580);
    assert_int_equal(ftrt_bucketer_packed_bytes(NULL), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_free(b), 0);
    c.in_place = 1; /* a config from a caller that does not know in_place: it stays off */
    c.size = (uint32_t)offsetof(ftrt_bucket_config, in_place);
    assert_int_equal(ftrt__bucketer_create_be(&ctx->p, counts, 4, FTRT_FLOAT32, &c, &fake_backend,
                                              &log, &b), 0);
    for (int t = 3; t >= 0; t--)
        assert_int_equal(ftrt_bucketer_ready(b, t, (char *)(t == 3 ? flat0 : flat1) + off[t]), 0);
    assert_int_equal(ftrt_bucketer_wait_all(b), 0);
    assert_int_equal(ftrt_bucketer_packed_bytes(b), 580);
    assert_int_equal(ftrt_bucketer_free(b), 0);
    assert_int_equal(log.live, 0);
    free_ctx(ctx);
}

static void bucketer_bad_arguments(void **state)
{
    (void)state;
    fake_plane *ctx = fake_ctx(2);
    size_t counts[2] = {1, 2};
    ftrt_bucketer *b = (ftrt_bucketer *)1;
    ftrt_bucket_config c;
    ftrt_bucket_config_init(&c, sizeof c);
    assert_int_equal(ftrt_bucketer_create(NULL, counts, 2, FTRT_FLOAT32, &c, &b), FTRT_EINVAL);
    assert_null(b);
    assert_int_equal(ftrt__bucketer_create(&ctx->p, counts, 0, FTRT_FLOAT32, &c, &b), FTRT_EINVAL);
    assert_int_equal(ftrt__bucketer_create(&ctx->p, counts, 2, (ftrt_dtype)7, &c, &b), FTRT_EINVAL);
    assert_int_equal(ftrt__bucketer_create(&ctx->p, counts, 2, FTRT_INT64, &c, &b), FTRT_EINVAL);
    c.bucket_bytes = 0;
    assert_int_equal(ftrt__bucketer_create(&ctx->p, counts, 2, FTRT_FLOAT32, &c, &b), FTRT_EINVAL);
    ftrt_bucket_config_init(&c, sizeof c);
    c.size = 8;
    assert_int_equal(ftrt__bucketer_create(&ctx->p, counts, 2, FTRT_FLOAT32, &c, &b), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_wait_all(NULL), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_buckets(NULL), FTRT_EINVAL);
    assert_int_equal(ftrt_bucketer_free(NULL), 0);
    free_ctx(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(assign_first_bucket_small), cmocka_unit_test(assign_oversized_and_exact),
        cmocka_unit_test(assign_random_invariants),  cmocka_unit_test(config_defaults),
        cmocka_unit_test(bucketer_orders_buckets),   cmocka_unit_test(bucketer_epoch_change),
        cmocka_unit_test(bucketer_pieces),           cmocka_unit_test(bucketer_bad_arguments),
        cmocka_unit_test(bucketer_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
