/*
 * bucketer.c - gradient buckets: tensors are assigned to buckets once (after PyTorch DDP's
 * Reducer, see bucketer.h), the application marks each gradient ready as its backward pass
 * produces it, and each bucket's allreduce starts as soon as its last tensor is ready and every
 * earlier bucket has started (so every trainer starts the buckets in the same order, as DDP
 * requires). ftrt_bucketer_wait_all() ends the step.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "comm/bucketer.h"
#include "runtime/internal.h"
#include "runtime/log.h"

#define DEFAULT_BUCKET_BYTES ((size_t)25 << 20)      /* DDP: bucket_cap_mb = 25 */
#define DEFAULT_FIRST_BUCKET_BYTES ((size_t)1 << 20) /* DDP: _DEFAULT_FIRST_BUCKET_BYTES */

struct ftrt_bucketer {
    ftrt_ctx *ctx;
    const ftrt__bucket_backend *be;
    void *be_arg;
    ftrt_dtype dtype;
    size_t esize;
    int average;
    int n, nb;
    size_t *counts;
    int *order, *start, *bucket_of;
    /* this step */
    void **ptrs;
    unsigned char *ready;
    int *pending;        /* tensors of each bucket not yet ready */
    ftrt_request **reqs; /* per bucket, once submitted */
    int next;            /* next bucket to submit */
    int err;             /* first error of this step */
    ftrt__seg *segs;     /* scratch: the largest bucket's tensors */
    int *tidx;           /* scratch: their indices */
};

int ftrt__bucket_assign(const size_t *bytes, int n, int reverse, size_t first_cap, size_t cap,
                        int *order, int *start, int *bucket_of)
{
    if (n < 1 || first_cap == 0 || cap == 0) return FTRT_EINVAL;
    int nb = 0;
    size_t open = 0, limit = first_cap;
    start[0] = 0;
    for (int j = 0; j < n; j++) {
        int t = reverse ? n - 1 - j : j;
        order[j] = t;
        bucket_of[t] = nb;
        open += bytes[t];
        if (open >= limit) { /* close the bucket: DDP's `bucket.size >= bucket_size_limit` */
            start[++nb] = j + 1;
            open = 0;
            limit = cap;
        }
    }
    if (start[nb] < n) start[++nb] = n; /* the open bucket */
    return nb;
}

int ftrt_bucket_config_init(ftrt_bucket_config *cfg, size_t size)
{
    if (!cfg || size < sizeof *cfg) return FTRT_EINVAL;
    memset(cfg, 0, sizeof *cfg);
    cfg->size = sizeof *cfg;
    cfg->version = FTRT_VERSION_MAJOR;
    cfg->bucket_bytes = DEFAULT_BUCKET_BYTES;
    cfg->first_bucket_bytes = DEFAULT_FIRST_BUCKET_BYTES;
    cfg->reverse = 1;
    cfg->average = 1;
    return 0;
}

static void step_reset(ftrt_bucketer *b)
{
    memset(b->ready, 0, (size_t)b->n);
    for (int k = 0; k < b->nb; k++) b->pending[k] = b->start[k + 1] - b->start[k];
    b->next = 0;
    b->err = 0;
}

int ftrt_bucketer_free(ftrt_bucketer *b)
{
    if (!b) return 0;
    for (int k = 0; k < b->nb; k++)
        if (b->reqs && b->reqs[k]) return FTRT_ESTATE;
    if (b->be && b->be->destroy) b->be->destroy(b->be_arg);
    free(b->tidx);
    free(b->counts);
    free(b->order);
    free(b->start);
    free(b->bucket_of);
    free(b->ptrs);
    free(b->ready);
    free(b->pending);
    free(b->reqs);
    free(b->segs);
    free(b);
    return 0;
}

int ftrt__bucketer_create_be(ftrt_ctx *ctx, const size_t *counts, int ntensors, ftrt_dtype dtype,
                             const ftrt_bucket_config *cfg, const ftrt__bucket_backend *be,
                             void *arg, ftrt_bucketer **out)
{
    if (!out) return FTRT_EINVAL;
    *out = NULL;
    ftrt_bucket_config def;
    if (!cfg) {
        ftrt_bucket_config_init(&def, sizeof def);
        cfg = &def;
    }
    size_t es = dtype == FTRT_FLOAT32 ? 4 : (dtype == FTRT_FLOAT64 || dtype == FTRT_INT64) ? 8 : 0;
    if (!ctx || !counts || ntensors < 1 || !es || cfg->size < sizeof *cfg ||
        cfg->bucket_bytes == 0 || cfg->first_bucket_bytes == 0 ||
        (cfg->average && dtype == FTRT_INT64))
        return FTRT_EINVAL;
    for (int i = 0; i < ntensors; i++)
        if (counts[i] > SIZE_MAX / 16 / (size_t)ntensors) return FTRT_EINVAL;
    if (ctx->role != FTRT__ROLE_TRAINER) return FTRT_ESTATE;
    ftrt_bucketer *b = calloc(1, sizeof *b);
    if (!b) return -ENOMEM;
    int n = ntensors;
    b->ctx = ctx;
    b->be = be;
    b->be_arg = arg;
    b->dtype = dtype;
    b->esize = es;
    b->average = cfg->average ? 1 : 0;
    b->n = n;
    b->counts = malloc((size_t)n * sizeof *b->counts);
    b->order = malloc((size_t)n * sizeof *b->order);
    b->start = malloc((size_t)(n + 1) * sizeof *b->start);
    b->bucket_of = malloc((size_t)n * sizeof *b->bucket_of);
    b->ptrs = calloc((size_t)n, sizeof *b->ptrs);
    b->ready = calloc((size_t)n, 1);
    size_t *bytes = malloc((size_t)n * sizeof *bytes);
    if (!b->counts || !b->order || !b->start || !b->bucket_of || !b->ptrs || !b->ready || !bytes) {
        free(bytes);
        b->be = NULL;
        ftrt_bucketer_free(b);
        return -ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        b->counts[i] = counts[i];
        bytes[i] = counts[i] * es;
    }
    b->nb = ftrt__bucket_assign(bytes, n, cfg->reverse, cfg->first_bucket_bytes,
                                cfg->bucket_bytes, b->order, b->start, b->bucket_of);
    free(bytes);
    int widest = 0;
    for (int k = 0; k < b->nb; k++)
        if (b->start[k + 1] - b->start[k] > widest) widest = b->start[k + 1] - b->start[k];
    b->pending = malloc((size_t)b->nb * sizeof *b->pending);
    b->reqs = calloc((size_t)b->nb, sizeof *b->reqs);
    b->segs = malloc((size_t)widest * sizeof *b->segs);
    b->tidx = malloc((size_t)widest * sizeof *b->tidx);
    if (!b->pending || !b->reqs || !b->segs || !b->tidx) {
        b->be = NULL; /* the backend's argument is not ours to destroy yet */
        ftrt_bucketer_free(b);
        return -ENOMEM;
    }
    step_reset(b);
    ftrt_log_debug("bucketer: %d tensors in %d buckets (first %zu B, then %zu B)", n, b->nb,
                   cfg->first_bucket_bytes, cfg->bucket_bytes);
    *out = b;
    return 0;
}

/* The CPU backend: the context's request engine. */
static int cpu_submit(void *arg, int bucket, const int *tensors, const ftrt__seg *segs, int n,
                      size_t count, double scale, struct ftrt_request **req)
{
    ftrt_bucketer *b = arg;
    (void)bucket;
    (void)tensors;
    int rc;
    ftrt__engine *e = ftrt__engine_get(b->ctx, &rc);
    if (!e) return rc;
    ftrt__areq *r;
    rc = ftrt__engine_submit(e, b->ctx->epoch, segs, n, count, (int)b->dtype, FTRT_SUM, scale,
                             &r);
    if (rc) return rc;
    *req = &r->base;
    return 0;
}

static int cpu_wait_raw(struct ftrt_request *req) { return ftrt__areq_wait((ftrt__areq *)req); }

static const ftrt__bucket_backend cpu_backend = {cpu_submit, cpu_wait_raw, NULL};

int ftrt_bucketer_create(ftrt_ctx *ctx, const size_t *counts, int ntensors, ftrt_dtype dtype,
                         const ftrt_bucket_config *cfg, ftrt_bucketer **out)
{
    int rc = ftrt__bucketer_create_be(ctx, counts, ntensors, dtype, cfg, &cpu_backend, NULL, out);
    if (!rc) (*out)->be_arg = *out;
    return rc;
}

/* Starts bucket k's allreduce. */
static int submit(ftrt_bucketer *b, int k)
{
    int rc = ftrt__interrupted(b->ctx);
    if (rc) return rc;
    if (b->ctx->needs_recover) return FTRT_ESTATE;
    int first = b->start[k], n = b->start[k + 1] - first;
    size_t count = 0;
    for (int j = 0; j < n; j++) {
        int t = b->order[first + j];
        b->tidx[j] = t;
        b->segs[j].ptr = b->ptrs[t];
        b->segs[j].bytes = b->counts[t] * b->esize;
        count += b->counts[t];
    }
    double scale = b->average ? 1.0 / (double)b->ctx->size : 1.0;
    return b->be->submit(b->be_arg, k, b->tidx, b->segs, n, count, scale, &b->reqs[k]);
}

int ftrt_bucketer_ready(ftrt_bucketer *b, int tensor, void *ptr)
{
    if (!b || tensor < 0 || tensor >= b->n || (!ptr && b->counts[tensor])) return FTRT_EINVAL;
    if (b->ready[tensor]) {
        ftrt_log_error("ftrt_bucketer_ready: tensor %d is already ready in this step", tensor);
        return FTRT_EINVAL;
    }
    b->ready[tensor] = 1;
    b->ptrs[tensor] = ptr;
    b->pending[b->bucket_of[tensor]]--;
    while (b->next < b->nb && b->pending[b->next] == 0) {
        int rc = submit(b, b->next++);
        if (rc && !b->err) b->err = rc;
    }
    return b->err;
}

/* Waits for every submitted bucket (raw) and clears the step; returns the first error. */
static int drain(ftrt_bucketer *b)
{
    int rc = b->err;
    for (int k = 0; k < b->nb; k++) {
        if (!b->reqs[k]) continue;
        int r = b->be->wait_raw(b->reqs[k]);
        if (r && !rc) rc = r;
        ftrt_request_free(b->reqs[k]);
        b->reqs[k] = NULL;
    }
    step_reset(b);
    if (rc == FTRT_ERECOVER) b->ctx->needs_recover = 1;
    return rc;
}

int ftrt_bucketer_wait_all(ftrt_bucketer *b)
{
    if (!b) return FTRT_EINVAL;
    for (int i = 0; i < b->n; i++)
        if (!b->ready[i]) {
            ftrt_log_error("ftrt_bucketer_wait_all: tensor %d was not marked ready", i);
            return FTRT_ESTATE;
        }
    ftrt__wait_begin(b->ctx);
    int rc = drain(b);
    ftrt__wait_end(b->ctx, rc);
    return rc;
}

int ftrt_bucketer_reset(ftrt_bucketer *b)
{
    if (!b) return FTRT_EINVAL;
    drain(b);
    return 0;
}

int ftrt_bucketer_buckets(const ftrt_bucketer *b) { return b ? b->nb : FTRT_EINVAL; }

int ftrt_bucketer_bucket_of(const ftrt_bucketer *b, int tensor)
{
    if (!b || tensor < 0 || tensor >= b->n) return FTRT_EINVAL;
    return b->bucket_of[tensor];
}

const ftrt__bucket_backend *ftrt__bucketer_backend(const ftrt_bucketer *b, void **arg)
{
    if (arg) *arg = b->be_arg;
    return b->be;
}

struct ftrt_request *ftrt__bucketer_request(const ftrt_bucketer *b, int k)
{
    return k >= 0 && k < b->nb ? b->reqs[k] : NULL;
}

int ftrt__bucketer_all_submitted(const ftrt_bucketer *b) { return b->next == b->nb; }
