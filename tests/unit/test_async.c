/*
 * Unit tests: the request engine of overlapped collectives (comm/async.c) over a fake
 * transport, with its progress thread and in inline mode, with whole requests and with requests
 * pipelined in chunks of 3 floats (chunks start in order, straddle tensor boundaries). Request lifecycle (pack, start in
 * submission order, unpack with scaling, test/wait/free), failure awareness (an epoch change or
 * a fatal code fails requests promptly and leaves application memory alone; started staging
 * buffers go to the graveyard and are never handed out again; unstarted ones are reused), requests
 * in place on the application's memory (no staging, bits as the copy path's), reduce-scatter
 * and all-gather requests (pieces packed and unpacked at their offsets), and a
 * stress run where the application thread and the progress thread meet (also run under
 * ThreadSanitizer by tests/run.sh).
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "comm/async.h"
#include "ftrt.h"

/* The fake collective: "allreduce over two identical ranks" = every float doubled, done when
 * the test releases it (released >= the request's ticket). While `gate` is closed nothing can
 * start. The transport runs on the progress side; the test thread reads the atomics. */
typedef struct fake {
    _Atomic long released;
    _Atomic int gate_closed;
    _Atomic long starts; /* number of starts */
    _Atomic long order_errors;
    _Atomic long last_started;
    long next_ticket; /* application thread only */
    void *_Atomic last_staging;
} fake;

static int f_bind(void *arg, ftrt__areq *r)
{
    fake *f = arg;
    r->fake = ++f->next_ticket;
    return 0;
}

static int f_ready(void *arg, ftrt__areq *r)
{
    fake *f = arg;
    (void)r;
    return atomic_load(&f->gate_closed) ? 0 : 1;
}

/* Chunks must start in (ticket, chunk) order; each doubles its floats. */
/* Reduce-scatter and all-gather: this process is rank FAKE_RANK of r->nranks members whose
 * send buffers are this one's plus 1000 * (member's rank) in every element: a reduce-scatter
 * (sum) gives rbuf[i] = nranks * buf[FAKE_RANK * count + i] + 1000 * (0 + 1 + ... + nranks-1)
 * (buf holds the chunk's nranks packed pieces), an all-gather rbuf[j * count + i] = buf[i] +
 * 1000 * j. */
#define FAKE_RANK 1
static void f_rsag(const ftrt__areq *r, const float *buf, float *rbuf, size_t count)
{
    int n = r->nranks;
    for (size_t i = 0; i < count; i++) {
        if (r->coll == FTRT__COLL_RSCATTER)
            rbuf[i] = (float)n * buf[FAKE_RANK * count + i] +
                      1000.0f * (float)(n * (n - 1) / 2);
        else
            for (int j = 0; j < n; j++) rbuf[(size_t)j * count + i] = buf[i] + 1000.0f * (float)j;
    }
}

static int f_start(void *arg, ftrt__areq *r, int chunk, void *buf, void *rbuf,
                   size_t count)
{
    fake *f = arg;
    long key = r->fake * 100000 + chunk, last = atomic_load(&f->last_started);
    if (key <= last || (chunk > 0 && key != last + 1) || (chunk == 0 && r->fake != last / 100000 + 1))
        atomic_fetch_add(&f->order_errors, 1);
    atomic_store(&f->last_started, key);
    float *x = buf;
    if (rbuf)
        f_rsag(r, x, rbuf, count);
    else
        for (size_t i = 0; i < count; i++) x[i] *= 2.0f;
    atomic_store(&f->last_staging, r->staging);
    atomic_fetch_add(&f->starts, 1);
    return 0;
}

static int f_test(void *arg, ftrt__areq *r, int chunk)
{
    fake *f = arg;
    (void)chunk;
    return atomic_load(&f->released) >= r->fake ? 1 : 0;
}

static const ftrt__xport fake_xport = {f_bind, f_ready, f_start, f_test};

typedef struct fx {
    fake f;
    ftrt__watch w; /* the epoch watch (base/ports.h) the runtime would hand over */
    ftrt__engine *e;
    int threaded;
} fx;

static int setup_mode(void **state, int threaded, size_t chunk_bytes)
{
    fx *x = calloc(1, sizeof *x);
    x->threaded = threaded;
    assert_int_equal(ftrt__engine_create_x(&fake_xport, &x->f, &x->w, threaded, &x->e),
                     0);
    if (chunk_bytes) x->e->chunk_bytes = chunk_bytes;
    *state = x;
    return 0;
}
static int setup_threaded(void **state) { return setup_mode(state, 1, 0); }
static int setup_inline(void **state) { return setup_mode(state, 0, 0); }
/* 3 floats per chunk: requests pipeline in many chunks that straddle tensor boundaries */
static int setup_chunked(void **state) { return setup_mode(state, 1, 12); }
static int setup_chunked_inline(void **state) { return setup_mode(state, 0, 12); }

static int teardown(void **state)
{
    fx *x = *state;
    ftrt__engine_free(x->e, 1);
    free(x);
    return 0;
}

static ftrt__areq *submit(fx *x, float *buf, size_t n, double scale, int epoch)
{
    ftrt__seg seg = {buf, n * sizeof(float)};
    ftrt__areq *r = NULL;
    assert_int_equal(ftrt__engine_submit(x->e, epoch, &seg, 1, n, FTRT_FLOAT32, FTRT_SUM, scale,
                                         0, &r),
                     0);
    return r;
}

/* Polls ftrt_request_test until it is not 0, for at most 5 s. */
static int test_until(ftrt_request *r)
{
    for (int i = 0; i < 500000; i++) {
        int rc = ftrt_request_test(r);
        if (rc) return rc;
        struct timespec ts = {0, 10000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void lifecycle(void **state)
{
    fx *x = *state;
    /* Three tensors of one bucket, packed back to back; mean over "2 ranks" gives them back. */
    float a[5] = {1, 2, 3, 4, 5}, b[1] = {0.1f}, c[3] = {-7, 8.5f, 1e30f};
    ftrt__seg segs[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
    ftrt__areq *r;
    assert_int_equal(ftrt__engine_submit(x->e, 0, segs, 3, 9, FTRT_FLOAT32, FTRT_SUM, 0.5, 0, &r),
                     0);
    ftrt_request *req = &r->base;
    assert_int_equal(ftrt_request_test(req), 0); /* not released */
    assert_int_equal(ftrt_request_free(req), FTRT_ESTATE);
    atomic_store(&x->f.released, 1);
    assert_int_equal(ftrt_request_wait(req), 0);
    assert_int_equal(ftrt_request_test(req), 1);
    assert_int_equal(ftrt_request_wait(req), 0); /* a final request keeps its answer */
    assert_true(a[0] == 1 && a[4] == 5 && b[0] == 0.1f && c[0] == -7 && c[1] == 8.5f &&
                c[2] == 1e30f);
    assert_int_equal(ftrt_request_free(req), 0);
    /* Without scaling the sum shows: everything doubled. */
    float d[4] = {1, 2, 3, 4};
    r = submit(x, d, 4, 1.0, 0);
    atomic_store(&x->f.released, 2);
    assert_int_equal(test_until(&r->base), 1);
    assert_true(d[0] == 2 && d[3] == 8);
    assert_int_equal(ftrt_request_free(&r->base), 0);
    assert_int_equal(ftrt_request_free(NULL), 0);
    assert_int_equal(ftrt_request_test(NULL), FTRT_EINVAL);
    assert_int_equal(ftrt_request_wait(NULL), FTRT_EINVAL);
}

static void starts_in_submission_order(void **state)
{
    fx *x = *state;
    atomic_store(&x->f.gate_closed, 1);
    float v[8][16];
    ftrt__areq *r[8];
    for (int i = 0; i < 8; i++) {
        for (int k = 0; k < 16; k++) v[i][k] = (float)(i * 16 + k);
        r[i] = submit(x, v[i], 16, 1.0, 0);
    }
    for (int i = 0; i < 8; i++) assert_int_equal(ftrt_request_test(&r[i]->base), 0);
    assert_int_equal(atomic_load(&x->f.starts), 0);
    atomic_store(&x->f.released, 8);
    atomic_store(&x->f.gate_closed, 0);
    for (int i = 7; i >= 0; i--) assert_int_equal(ftrt_request_wait(&r[i]->base), 0);
    assert_int_equal(atomic_load(&x->f.order_errors), 0);
    for (int i = 0; i < 8; i++) {
        for (int k = 0; k < 16; k++) assert_true(v[i][k] == 2.0f * (float)(i * 16 + k));
        assert_int_equal(ftrt_request_free(&r[i]->base), 0);
    }
}

static void epoch_change_fails_and_buries(void **state)
{
    fx *x = *state;
    float v[64], w[64], keep[64];
    for (int k = 0; k < 64; k++) v[k] = w[k] = keep[k] = (float)k + 0.5f;
    ftrt__areq *started = submit(x, v, 64, 1.0, 0);
    while (atomic_load(&x->f.starts) < 1) ftrt_request_test(&started->base); /* inline: drives */
    void *buried = atomic_load(&x->f.last_staging);
    atomic_store(&x->f.gate_closed, 1); /* the next one cannot start */
    ftrt__areq *queued = submit(x, w, 64, 1.0, 0);
    atomic_store(&x->w.pending_epoch, 1); /* a rank failed */
    assert_int_equal(ftrt_request_wait(&started->base), FTRT_ERECOVER);
    assert_int_equal(ftrt_request_wait(&queued->base), FTRT_ERECOVER);
    ftrt__engine_quiesce(x->e);
    assert_memory_equal(v, keep, sizeof v); /* application memory untouched */
    assert_memory_equal(w, keep, sizeof w);
    /* The started collective's staging is in the graveyard; the unstarted one's is not. */
    assert_int_equal(x->e->grave.n, 1);
    assert_ptr_equal(x->e->grave.p[0], buried);
    assert_int_equal(x->e->pool.n, 1);
    assert_int_equal(ftrt_request_free(&started->base), 0);
    assert_int_equal(ftrt_request_free(&queued->base), 0);
    /* Late "completion" of the dead collective must not matter. */
    atomic_store(&x->f.released, 100);
    /* The new epoch: buffers come from the pool or fresh, never from the graveyard. */
    atomic_store(&x->f.gate_closed, 0);
    for (int i = 0; i < 20; i++) {
        ftrt__areq *r = submit(x, v, 64, 1.0, 1);
        assert_int_equal(ftrt_request_wait(&r->base), 0);
        assert_ptr_not_equal(atomic_load(&x->f.last_staging), buried);
        assert_int_equal(ftrt_request_free(&r->base), 0);
    }
    /* Steady state reuses one staging buffer (no allocation per step). */
    void *p1, *p2;
    ftrt__areq *r = submit(x, v, 64, 1.0, 1);
    assert_int_equal(ftrt_request_wait(&r->base), 0);
    p1 = atomic_load(&x->f.last_staging);
    ftrt_request_free(&r->base);
    r = submit(x, v, 64, 1.0, 1);
    assert_int_equal(ftrt_request_wait(&r->base), 0);
    p2 = atomic_load(&x->f.last_staging);
    ftrt_request_free(&r->base);
    assert_ptr_equal(p1, p2);
}

/* Submits three tensors that lie back to back in buf (5, 1 and 3 floats), in place or not. */
static ftrt__areq *submit3(fx *x, float *buf, double scale, int in_place, int epoch)
{
    ftrt__seg segs[3] = {{buf, 5 * sizeof *buf}, {buf + 5, sizeof *buf},
                         {buf + 6, 3 * sizeof *buf}};
    ftrt__areq *r = NULL;
    assert_int_equal(ftrt__engine_submit(x->e, epoch, segs, 3, 9, FTRT_FLOAT32, FTRT_SUM, scale,
                                         in_place, &r),
                     0);
    return r;
}

/* In place: the collective runs on the application's memory (no staging buffer), the scale is
 * applied there, and the bits equal the copy path's; a started in-place request that fails is
 * neither buried nor pooled (the memory is the application's: ASan would catch a free). */
static void in_place_request(void **state)
{
    fx *x = *state;
    float v[9], w[9], keep[9];
    for (int k = 0; k < 9; k++) v[k] = w[k] = keep[k] = (float)k / 3.0f + 0.1f;
    atomic_store(&x->f.released, 1000);
    ftrt__areq *r = submit3(x, v, 1.0 / 3.0, 1, 0);
    assert_int_equal(ftrt_request_wait(&r->base), 0);
    assert_ptr_equal(atomic_load(&x->f.last_staging), v); /* started on v itself */
    assert_int_equal(ftrt_request_free(&r->base), 0);
    r = submit3(x, w, 1.0 / 3.0, 0, 0);
    assert_int_equal(ftrt_request_wait(&r->base), 0);
    assert_ptr_not_equal(atomic_load(&x->f.last_staging), w);
    assert_int_equal(ftrt_request_free(&r->base), 0);
    assert_memory_equal(v, w, sizeof v);               /* bit-identical to the copy path */
    assert_true(v[3] == (keep[3] * 2.0f) * (float)(1.0 / 3.0));
    int pooled = x->e->pool.n;
    atomic_store(&x->f.released, 0); /* the next one starts and never completes */
    long starts = atomic_load(&x->f.starts);
    r = submit3(x, v, 1.0, 1, 0);
    while (atomic_load(&x->f.starts) == starts) ftrt_request_test(&r->base); /* inline drives */
    atomic_store(&x->w.pending_epoch, 1);
    assert_int_equal(ftrt_request_wait(&r->base), FTRT_ERECOVER);
    ftrt__engine_quiesce(x->e);
    assert_int_equal(x->e->grave.n, 0);
    assert_int_equal(x->e->pool.n, pooled);
    assert_int_equal(ftrt_request_free(&r->base), 0);
}

static void fatal_code(void **state)
{
    fx *x = *state;
    float v[4] = {1, 2, 3, 4};
    ftrt__areq *r = submit(x, v, 4, 1.0, 0);
    atomic_store(&x->w.fatal, FTRT_ECOORD);
    assert_int_equal(ftrt_request_wait(&r->base), FTRT_ECOORD);
    assert_int_equal(ftrt_request_test(&r->base), FTRT_ECOORD);
    assert_int_equal(ftrt_request_free(&r->base), 0);
}

/* Many requests in flight, released out of step with the application's tests and waits. */
static void stress(void **state)
{
    fx *x = *state;
    enum { N = 400, LEN = 257 };
    float *v = malloc(sizeof(float) * N * LEN);
    ftrt__areq **r = malloc(sizeof *r * N);
    unsigned seed = 7;
    long released = 0;
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < LEN; k++) v[i * LEN + k] = (float)(i + k);
        size_t n = 1 + (size_t)(rand_r(&seed) % LEN);
        r[i] = submit(x, v + (size_t)i * LEN, n, 1.0, 0);
        if (rand_r(&seed) % 3 == 0) atomic_store(&x->f.released, released += rand_r(&seed) % 4);
        if (i > 0 && rand_r(&seed) % 5 == 0) ftrt_request_test(&r[rand_r(&seed) % i]->base);
    }
    atomic_store(&x->f.released, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(ftrt_request_wait(&r[i]->base), 0);
        size_t n = r[i]->count;
        for (size_t k = 0; k < LEN; k++)
            assert_true(v[i * LEN + k] == (float)(i + (int)k) * (k < n ? 2.0f : 1.0f));
        assert_int_equal(ftrt_request_free(&r[i]->base), 0);
    }
    assert_int_equal(atomic_load(&x->f.order_errors), 0);
    assert_int_equal(x->e->live, 0);
    free(v);
    free(r);
}

/* A reduce-scatter or all-gather request over the fake's 3 members (f_rsag), released at once
 * and waited for. */
static int rsag_run(fx *x, ftrt__coll coll, const float *send, float *recv, size_t count,
                    int epoch, ftrt__areq **out)
{
    ftrt__areq *r = NULL;
    int rc = ftrt__engine_submit_rsag(x->e, epoch, coll, send, recv, count, FTRT_FLOAT32,
                                      FTRT_SUM, 3, &r);
    if (rc) return rc;
    atomic_store(&x->f.released, r->fake);
    *out = r;
    return ftrt_request_wait(&r->base);
}

/* Reduce-scatter and all-gather through the engine (chunked setups: 1 element of each block
 * per chunk): each block's pieces packed side by side, the result unpacked at its offset,
 * aliasing at a block, an epoch change that leaves recv alone and buries the staging, and bad
 * arguments refused. */
static void rsag_requests(void **state)
{
    fx *x = *state;
    enum { C = 5, N = 3 };
    float send[N * C], recv[N * C], keep[N * C];
    for (int k = 0; k < N * C; k++) send[k] = (float)k + 0.25f;
    for (int k = 0; k < N * C; k++) recv[k] = -1.0f;
    ftrt__areq *r;
    assert_int_equal(rsag_run(x, FTRT__COLL_RSCATTER, send, recv, C, 0, &r), 0);
    for (int i = 0; i < C; i++) assert_true(recv[i] == 3.0f * send[FAKE_RANK * C + i] + 3000.0f);
    assert_true(recv[C] == -1.0f); /* count elements written, no more */
    ftrt_request_free(&r->base);
    assert_int_equal(rsag_run(x, FTRT__COLL_ALLGATHER, send, recv, C, 0, &r), 0);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < C; i++) assert_true(recv[j * C + i] == send[i] + 1000.0f * (float)j);
    ftrt_request_free(&r->base);
    /* in place: the all-gather sends its own block of recv, the reduce-scatter reduces into
     * its own block of send */
    for (int i = 0; i < C; i++) recv[FAKE_RANK * C + i] = 7.0f * (float)i;
    assert_int_equal(rsag_run(x, FTRT__COLL_ALLGATHER, recv + FAKE_RANK * C, recv, C, 0, &r), 0);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < C; i++)
            assert_true(recv[j * C + i] == 7.0f * (float)i + 1000.0f * (float)j);
    ftrt_request_free(&r->base);
    memcpy(keep, send, sizeof send);
    assert_int_equal(rsag_run(x, FTRT__COLL_RSCATTER, send, send + FAKE_RANK * C, C, 0, &r), 0);
    for (int i = 0; i < C; i++)
        assert_true(send[FAKE_RANK * C + i] == 3.0f * keep[FAKE_RANK * C + i] + 3000.0f);
    ftrt_request_free(&r->base);
    /* An epoch change: every chunk started, none complete; recv stays, staging is buried. */
    for (int k = 0; k < N * C; k++) recv[k] = keep[k] = -2.0f;
    long starts = atomic_load(&x->f.starts);
    int graves = x->e->grave.n;
    assert_int_equal(ftrt__engine_submit_rsag(x->e, 0, FTRT__COLL_ALLGATHER, send, recv, C,
                                              FTRT_FLOAT32, FTRT_SUM, N, &r), 0);
    while (atomic_load(&x->f.starts) < starts + 1) ftrt_request_test(&r->base);
    atomic_store(&x->w.pending_epoch, 1);
    assert_int_equal(ftrt_request_wait(&r->base), FTRT_ERECOVER);
    ftrt__engine_quiesce(x->e);
    assert_memory_equal(recv, keep, sizeof recv);
    assert_int_equal(x->e->grave.n, graves + 1);
    ftrt_request_free(&r->base);
    /* Not a reduce-scatter or all-gather, no members, an unknown dtype: refused, no request. */
    assert_int_equal(ftrt__engine_submit_rsag(x->e, 1, FTRT__COLL_ALLREDUCE, send, recv, C,
                                              FTRT_FLOAT32, FTRT_SUM, N, &r), FTRT_EINVAL);
    assert_null(r);
    assert_int_equal(ftrt__engine_submit_rsag(x->e, 1, FTRT__COLL_RSCATTER, send, recv, C,
                                              FTRT_FLOAT32, FTRT_SUM, 0, &r), FTRT_EINVAL);
    assert_int_equal(ftrt__engine_submit_rsag(x->e, 1, FTRT__COLL_RSCATTER, send, recv, C, 99,
                                              FTRT_SUM, N, &r), FTRT_EINVAL);
}

/* Stopping the thread with nothing in flight, then freeing: clean (ASan checks leaks). */
static void stop_is_idempotent(void **state)
{
    fx *x = *state;
    float v[2] = {1, 2};
    ftrt__areq *r = submit(x, v, 2, 1.0, 0);
    atomic_store(&x->f.released, 1);
    assert_int_equal(ftrt_request_wait(&r->base), 0);
    ftrt_request_free(&r->base);
    ftrt__engine_stop(x->e);
    ftrt__engine_stop(x->e);
}

#define BOTH(t)                                                                                  \
    cmocka_unit_test_setup_teardown(t, setup_threaded, teardown),                                \
        cmocka_unit_test_setup_teardown(t, setup_inline, teardown),                              \
        cmocka_unit_test_setup_teardown(t, setup_chunked, teardown),                             \
        cmocka_unit_test_setup_teardown(t, setup_chunked_inline, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(lifecycle), BOTH(starts_in_submission_order), BOTH(epoch_change_fails_and_buries),
        BOTH(fatal_code), BOTH(stress), BOTH(stop_is_idempotent), BOTH(in_place_request),
        BOTH(rsag_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
