/*
 * bucketer.c - gradient buckets: tensors are assigned to buckets once (after PyTorch DDP's
 * Reducer, see bucketer.h), the application marks each gradient ready as its backward pass
 * produces it, and the buckets are reduced in bucket order, so every trainer starts the same
 * collectives in the same order, as DDP requires. ftrt_bucketer_wait_all() ends the step.
 *
 * Pieces: each bucket is reduced in pieces of at most piece_bytes (its byte layout cut into
 * consecutive ranges, which may split a tensor), and a piece starts as soon as the tensors it
 * covers are ready and every earlier piece has started. With piece_bytes = 0 a piece is the
 * whole bucket: DDP's behaviour. Smaller pieces shorten the tail of a step: the last bucket to
 * become ready starts communicating while the backward pass still produces its tensors, instead
 * of all at once at the end (docs/collectives.md has the measurements). Pieces
 * depend only on the counts, dtype and configuration, so they are the same on every trainer.
 *
 * Threads: the bucketer belongs to the application thread that owns the plane (the one that
 * called ftrt_init()): only it submits, so every MPI, NCCL and CUDA call of a step stays on that
 * thread. Other threads (autograd's device threads run CUDA backward hooks) hand a gradient over
 * with ftrt_bucketer_ready_from_any_thread(): a post into the bucketer's queue (a mutex-guarded
 * array, `post_lock`), applied by the owner at its next ready / drain / wait_all / reset. The
 * owner sees that the queue holds something with one atomic load (`nposts`), so ready() on the
 * owner costs about what it did (bench/bucketer_ready.sh: 8 instructions more per gradient).
 * Posts carry the step generation (`gen`) they were made in: one that arrives after its step
 * ended (a late hook of an abandoned step) is dropped, never counted in the next step.
 * `posted[t]` holds the generation tensor t was last marked in, so that a second mark in a step
 * is refused to the thread that makes it; `ready[]`, the owner's own record, catches the rest.
 *
 * Direct backends (the NCCL plane; bucketer.h, ftrt__bucket_backend.direct): while autograd's
 * device threads run the hooks of a CUDA backward pass, the owner is blocked inside backward()
 * and drains nothing, so a queue would hold every bucket back until backward returns. A direct
 * backend's submit is thread-safe (the plane serializes its NCCL and CUDA calls under its own
 * lock), so a post marks its tensor and starts the buckets it completes on the posting thread,
 * under the bucketer's `step_lock`, which every call of a direct bucketer takes (the owner's
 * too, for its whole wait_all). The lock order is step_lock, then the backend's lock. A piece
 * the backend cannot start off the owner (FTRT__BUCKET_DEFER) waits for the owner's next
 * ready / drain / wait_all. Errors stay the step's error (`err`), returned to the posters and,
 * at wait_all, to the owner.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "comm/bucketer.h"
#include "comm/plane.h"

#define DEFAULT_BUCKET_BYTES ((size_t)25 << 20)      /* DDP: bucket_cap_mb = 25 */
#define DEFAULT_FIRST_BUCKET_BYTES ((size_t)1 << 20) /* DDP: _DEFAULT_FIRST_BUCKET_BYTES */
#define DEFAULT_PIECE_BYTES ((size_t)4 << 20)

/* One gradient handed over by another thread: tensor, where, and the step it belongs to. */
typedef struct post {
    int tensor;
    unsigned gen;
    void *ptr;
} post;

typedef struct post_queue {
    post *v;
    int n, cap;
} post_queue;

struct ftrt_bucketer {
    ftrt__plane *plane; /* the data plane it reduces over (its watch, host and size) */
    const ftrt__bucket_backend *be;
    void *be_arg;
    ftrt_dtype dtype;
    size_t esize;
    int average;
    int in_place;        /* cfg->in_place: contiguous pieces are reduced on their memory */
    _Atomic long long packed; /* bytes of the pieces sent through a staging copy */
    int n, nb, np;
    size_t *counts;
    int *order, *start, *bucket_of;
    size_t *t_off;       /* byte offset of each tensor in its bucket */
    int *t_p0, *t_p1;    /* the pieces each tensor overlaps */
    int *p_bucket;       /* per piece: its bucket, */
    size_t *p_lo, *p_hi; /* its byte range in the bucket, */
    int *p_first;        /* the position (in order[]) of its first tensor, */
    int *p_ntens;        /* and the number of tensors that gate it */
    /* this step */
    void **ptrs;
    unsigned char *ready;
    int *pending;        /* per piece: gating tensors not yet ready */
    ftrt_request **reqs; /* per piece, once submitted */
    int next;            /* next piece to submit */
    int err;             /* first error of this step */
    ftrt__seg *segs;     /* scratch: the widest bucket's tensors */
    int *tidx;           /* scratch: their indices */
    /* hand-over from other threads (see the file's header) */
    unsigned step_gen;            /* owner's copy of gen */
    _Atomic unsigned gen;         /* this step's generation (never 0); owner writes */
    _Atomic unsigned *posted;     /* per tensor: generation it was last marked in (0: never) */
    _Atomic int pub_err;          /* err, as the posting threads read it */
    atomic_int nposts;            /* entries in q (the owner's lock-free look) */
    pthread_mutex_t post_lock;    /* guards q */
    post_queue q;                 /* posts not yet taken by the owner */
    post_queue taken;             /* owner: the batch being applied */
    long stale;                   /* owner: posts dropped because their step had ended */
    /* direct backends (see the file's header) */
    int direct;                   /* be->direct: every call takes step_lock */
    pthread_mutex_t step_lock;    /* guards the step (ready .. err) of a direct bucketer */
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
    if (!cfg || (size != FTRT__BUCKET_CONFIG_V1 && size != sizeof(ftrt_bucket_config)))
        return FTRT_EINVAL; /* (only whole structs of a known version) */
    ftrt_bucket_config c;
    memset(&c, 0, sizeof c);
    c.size = (uint32_t)(size < sizeof c ? size : sizeof c); /* the fields the caller knows */
    c.version = FTRT_VERSION_MAJOR;
    c.bucket_bytes = DEFAULT_BUCKET_BYTES;
    c.first_bucket_bytes = DEFAULT_FIRST_BUCKET_BYTES;
    c.reverse = 1;
    c.average = 1;
    c.piece_bytes = DEFAULT_PIECE_BYTES;
    memcpy(cfg, &c, c.size);
    return 0;
}

int ftrt__bucket_config_copy(ftrt_bucket_config *dst, const ftrt_bucket_config *src)
{
    ftrt_bucket_config_init(dst, sizeof *dst);
    if (!src) return 0;
    if (src->size != FTRT__BUCKET_CONFIG_V1 && src->size != sizeof *dst) return FTRT_EINVAL;
    memcpy(dst, src, src->size < sizeof *dst ? src->size : sizeof *dst);
    dst->size = sizeof *dst;
    return 0;
}

/* Clears the step and opens the next generation: posts of the step that ended no longer count. */
static void step_reset(ftrt_bucketer *b)
{
    memset(b->ready, 0, (size_t)b->n);
    memcpy(b->pending, b->p_ntens, (size_t)b->np * sizeof *b->pending);
    b->next = 0;
    b->err = 0;
    atomic_store_explicit(&b->pub_err, 0, memory_order_relaxed);
    b->step_gen = b->step_gen + 1 ? b->step_gen + 1 : 1; /* 0 means "never marked" */
    atomic_store_explicit(&b->gen, b->step_gen, memory_order_release);
}

int ftrt_bucketer_free(ftrt_bucketer *b)
{
    if (!b) return 0;
    for (int p = 0; p < b->np; p++)
        if (b->reqs && b->reqs[p]) return FTRT_ESTATE;
    if (b->be && b->be->destroy) b->be->destroy(b->be_arg);
    void *arrays[] = {b->tidx,   b->counts,   b->order,  b->start,   b->bucket_of, b->t_off,
                      b->t_p0,   b->t_p1,     b->p_bucket, b->p_lo,  b->p_hi,      b->p_first,
                      b->p_ntens, b->ptrs,    b->ready,  b->pending, b->reqs,      b->segs,
                      (void *)b->posted, b->q.v, b->taken.v};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++) free(arrays[i]);
    pthread_mutex_destroy(&b->post_lock);
    pthread_mutex_destroy(&b->step_lock);
    free(b);
    return 0;
}

/* Cuts every bucket into pieces of at most `piece` bytes (0: whole buckets) and records which
 * tensors gate which piece. Returns 0 or -ENOMEM. */
static int make_pieces(ftrt_bucketer *b, size_t piece)
{
    int np = 0;
    for (int k = 0; k < b->nb; k++) {
        size_t B = 0;
        for (int j = b->start[k]; j < b->start[k + 1]; j++) B += b->counts[b->order[j]] * b->esize;
        np += piece && B > piece ? (int)((B + piece - 1) / piece) : 1;
    }
    b->np = np;
    b->p_bucket = malloc((size_t)np * sizeof *b->p_bucket);
    b->p_lo = malloc((size_t)np * sizeof *b->p_lo);
    b->p_hi = malloc((size_t)np * sizeof *b->p_hi);
    b->p_first = malloc((size_t)np * sizeof *b->p_first);
    b->p_ntens = calloc((size_t)np, sizeof *b->p_ntens);
    if (!b->p_bucket || !b->p_lo || !b->p_hi || !b->p_first || !b->p_ntens) return -ENOMEM;
    int base = 0;
    for (int k = 0; k < b->nb; k++) {
        size_t B = 0;
        for (int j = b->start[k]; j < b->start[k + 1]; j++) B += b->counts[b->order[j]] * b->esize;
        size_t P = piece && B > piece ? piece : (B ? B : 1);
        int npk = (int)((B + P - 1) / P);
        if (npk < 1) npk = 1;
        for (int q = 0; q < npk; q++) {
            b->p_bucket[base + q] = k;
            b->p_lo[base + q] = (size_t)q * P;
            b->p_hi[base + q] = (size_t)(q + 1) * P < B ? (size_t)(q + 1) * P : B;
            b->p_first[base + q] = -1;
        }
        size_t o = 0;
        for (int j = b->start[k]; j < b->start[k + 1]; j++) {
            int t = b->order[j];
            size_t bt = b->counts[t] * b->esize;
            int first = (int)(o / P), last = bt ? (int)((o + bt - 1) / P) : first;
            if (first > npk - 1) first = last = npk - 1; /* an empty tensor at the end */
            b->t_off[t] = o;
            b->t_p0[t] = base + first;
            b->t_p1[t] = base + last;
            for (int q = first; q <= last; q++) {
                b->p_ntens[base + q]++;
                if (b->p_first[base + q] < 0) b->p_first[base + q] = j;
            }
            o += bt;
        }
        base += npk;
    }
    return 0;
}

/* Allocates b's per-tensor arrays for b->n tensors (the marks for posting threads at 0). Returns
 * 0 or -ENOMEM (what was allocated is freed by ftrt_bucketer_free). */
static int alloc_tensor_arrays(ftrt_bucketer *b)
{
    size_t n = (size_t)b->n;
    b->counts = malloc(n * sizeof *b->counts);
    b->order = malloc(n * sizeof *b->order);
    b->start = malloc((n + 1) * sizeof *b->start);
    b->bucket_of = malloc(n * sizeof *b->bucket_of);
    b->t_off = malloc(n * sizeof *b->t_off);
    b->t_p0 = malloc(n * sizeof *b->t_p0);
    b->t_p1 = malloc(n * sizeof *b->t_p1);
    b->ptrs = calloc(n, sizeof *b->ptrs);
    b->ready = calloc(n, 1);
    b->posted = malloc(n * sizeof *b->posted);
    b->q.v = malloc(n * sizeof *b->q.v); /* a step's posts fit: no allocation later */
    b->taken.v = malloc(n * sizeof *b->taken.v);
    b->q.cap = b->taken.cap = b->n;
    if (!b->counts || !b->order || !b->start || !b->bucket_of || !b->t_off || !b->t_p0 ||
        !b->t_p1 || !b->ptrs || !b->ready || !b->posted || !b->q.v || !b->taken.v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) atomic_init(&b->posted[i], 0);
    return 0;
}

int ftrt__bucketer_create_be(ftrt__plane *plane, const size_t *counts, int ntensors, ftrt_dtype dtype,
                             const ftrt_bucket_config *cfg, const ftrt__bucket_backend *be,
                             void *arg, ftrt_bucketer **out)
{
    if (!out) return FTRT_EINVAL;
    *out = NULL;
    ftrt_bucket_config def; /* cfg as this library knows it: later fields at defaults */
    if (ftrt__bucket_config_copy(&def, cfg)) return FTRT_EINVAL;
    cfg = &def;
    size_t es = ftrt__k_esize((int)dtype);
    if (!es) {
        ftrt_log_error("bucketer: unknown dtype %d (FTRT_FLOAT32, FTRT_FLOAT64, FTRT_INT64, "
                       "FTRT_BFLOAT16, FTRT_FLOAT16)", (int)dtype);
        return FTRT_EINVAL;
    }
    if (cfg->average && dtype == FTRT_INT64) {
        ftrt_log_error("bucketer: average (the mean) is not defined for FTRT_INT64: use a sum");
        return FTRT_EINVAL;
    }
    if (!plane || !counts || ntensors < 1 || cfg->bucket_bytes == 0 || cfg->first_bucket_bytes == 0)
        return FTRT_EINVAL;
    for (int i = 0; i < ntensors; i++)
        if (counts[i] > SIZE_MAX / 16 / (size_t)ntensors) return FTRT_EINVAL;
    ftrt_bucketer *b = calloc(1, sizeof *b);
    if (!b) return -ENOMEM;
    pthread_mutex_init(&b->post_lock, NULL);
    pthread_mutex_init(&b->step_lock, NULL);
    int n = ntensors;
    b->plane = plane;
    b->dtype = dtype;
    b->esize = es;
    b->average = cfg->average ? 1 : 0;
    b->in_place = cfg->in_place ? 1 : 0;
    b->n = n;
    size_t *bytes = malloc((size_t)n * sizeof *bytes);
    int rc = -ENOMEM;
    if (!bytes || alloc_tensor_arrays(b)) goto fail;
    for (int i = 0; i < n; i++) {
        b->counts[i] = counts[i];
        bytes[i] = counts[i] * es;
    }
    b->nb = ftrt__bucket_assign(bytes, n, cfg->reverse, cfg->first_bucket_bytes,
                                cfg->bucket_bytes, b->order, b->start, b->bucket_of);
    size_t piece = cfg->piece_bytes / es * es; /* whole elements */
    if (cfg->piece_bytes && !piece) piece = es;
    if ((rc = make_pieces(b, piece)) != 0) goto fail;
    int widest = 0;
    for (int k = 0; k < b->nb; k++)
        if (b->start[k + 1] - b->start[k] > widest) widest = b->start[k + 1] - b->start[k];
    b->pending = malloc((size_t)b->np * sizeof *b->pending);
    b->reqs = calloc((size_t)b->np, sizeof *b->reqs);
    b->segs = malloc((size_t)widest * sizeof *b->segs);
    b->tidx = malloc((size_t)widest * sizeof *b->tidx);
    rc = -ENOMEM;
    if (!b->pending || !b->reqs || !b->segs || !b->tidx) goto fail;
    free(bytes);
    b->be = be;
    b->be_arg = arg;
    b->direct = be && be->direct;
    step_reset(b);
    ftrt_log_debug("bucketer: %d tensors in %d buckets (first %zu B, then %zu B), %d pieces", n,
                   b->nb, cfg->first_bucket_bytes, cfg->bucket_bytes, b->np);
    *out = b;
    return 0;
fail: /* the backend's argument is not ours to destroy: b->be is still NULL */
    free(bytes);
    ftrt_bucketer_free(b);
    return rc;
}

/* The CPU backend: the context's request engine. */
static int cpu_submit(void *arg, int bucket, const int *tensors, const ftrt__seg *segs, int n,
                      size_t count, double scale, int in_place, struct ftrt_request **req)
{
    ftrt_bucketer *b = arg;
    (void)bucket;
    (void)tensors;
    int rc;
    ftrt__engine *e = ftrt__engine_get(b->plane, &rc);
    if (!e) return rc;
    ftrt__areq *r;
    rc = ftrt__engine_submit(e, b->plane->watch->epoch, segs, n, count, (int)b->dtype, FTRT_SUM,
                             scale, in_place, &r);
    if (rc) return rc;
    *req = &r->base;
    return 0;
}

static int cpu_wait_raw(struct ftrt_request *req) { return ftrt__areq_wait((ftrt__areq *)req); }

static const ftrt__bucket_backend cpu_backend = {cpu_submit, cpu_wait_raw, NULL, 0, NULL};

int ftrt__bucketer_create(ftrt__plane *plane, const size_t *counts, int ntensors,
                          ftrt_dtype dtype, const ftrt_bucket_config *cfg, ftrt_bucketer **out)
{
    if (!out) return FTRT_EINVAL;
    *out = NULL;
    MPI_Datatype t; /* checks dtype and creates its MPI reduction now, on this thread */
    MPI_Op o;
    size_t es;
    int rc = ftrt__mpi_reduction((int)dtype, FTRT_SUM, &t, &o, &es);
    if (rc) return rc;
    rc = ftrt__bucketer_create_be(plane, counts, ntensors, dtype, cfg, &cpu_backend, NULL, out);
    if (!rc) (*out)->be_arg = *out;
    return rc;
}

/* 1 when segs[0..n) are one run of memory: each starts where the one before it ends. */
static int contiguous(const ftrt__seg *segs, int n)
{
    for (int i = 1; i < n; i++)
        if ((char *)segs[i].ptr != (char *)segs[i - 1].ptr + segs[i - 1].bytes) return 0;
    return 1;
}

/* Starts piece p's allreduce over the parts of its tensors that fall in its byte range. A
 * direct backend checks the watch itself (it may run on a posting thread). */
static inline __attribute__((always_inline)) int submit(ftrt_bucketer *b, int p)
{
    if (!b->direct) {
        int rc = ftrt__watch_check(b->plane->watch);
        if (rc) return rc;
        if (b->plane->watch->needs_recover) return FTRT_ESTATE;
    }
    int k = b->p_bucket[p], n = 0;
    size_t lo = b->p_lo[p], hi = b->p_hi[p];
    for (int j = b->p_first[p]; j < b->start[k + 1]; j++) {
        int t = b->order[j];
        size_t t0 = b->t_off[t], t1 = t0 + b->counts[t] * b->esize;
        if (t0 >= hi && t1 > t0) break;
        size_t a = t0 > lo ? t0 : lo, z = t1 < hi ? t1 : hi;
        if (a >= z) continue; /* an empty tensor */
        b->tidx[n] = t;
        b->segs[n].ptr = (char *)b->ptrs[t] + (a - t0);
        b->segs[n].bytes = z - a;
        n++;
    }
    if (n == 0) { /* an empty bucket: one zero-length collective keeps the sequence aligned */
        b->tidx[0] = b->order[b->start[k]];
        b->segs[0].ptr = b->ptrs[b->tidx[0]];
        b->segs[0].bytes = 0;
        n = 1;
    }
    double scale = b->average ? 1.0 / (double)b->plane->size : 1.0;
    int in_place = b->in_place && contiguous(b->segs, n);
    if (!in_place)
        atomic_fetch_add_explicit(&b->packed, (long long)(hi - lo), memory_order_relaxed);
    return b->be->submit(b->be_arg, k, b->tidx, b->segs, n, (hi - lo) / b->esize, scale, in_place,
                         &b->reqs[p]);
}

/* Keeps rc as the step's first error (also for the posting threads). */
static void set_err(ftrt_bucketer *b, int rc)
{
    if (!rc || b->err) return;
    b->err = rc;
    atomic_store_explicit(&b->pub_err, rc, memory_order_relaxed);
}

/* Starts every complete piece, in piece order, until one is incomplete or deferred
 * (FTRT__BUCKET_DEFER: a direct backend off its owner; the owner starts it later). */
static inline __attribute__((always_inline)) void advance(ftrt_bucketer *b)
{
    while (b->next < b->np && b->pending[b->next] == 0) {
        int rc = submit(b, b->next);
        if (rc == FTRT__BUCKET_DEFER) break;
        b->next++;
        set_err(b, rc);
    }
}

/* Marks tensor ready at ptr and starts every piece this completes, in piece order. Owner (a
 * direct bucketer: any thread, under step_lock). mark() and submit() are forced inline (two
 * callers now: ready and take_posts), so that ftrt_bucketer_ready() runs the code it ran before
 * the hand-over, plus the mark for posting threads (bench/bucketer_ready.sh). */
static inline __attribute__((always_inline)) void mark(ftrt_bucketer *b, int tensor, void *ptr)
{
    b->ready[tensor] = 1;
    b->ptrs[tensor] = ptr;
    atomic_store_explicit(&b->posted[tensor], b->step_gen, memory_order_relaxed);
    for (int p = b->t_p0[tensor]; p <= b->t_p1[tensor]; p++) b->pending[p]--;
    advance(b);
}

/* Takes what other threads posted (owner). With `apply`, marks the posts of this step (a post
 * of a tensor already ready is the step's error, FTRT_EINVAL); without, drops them (reset).
 * Posts of an ended step are dropped either way. Returns the number of posts marked. */
static int take_posts(ftrt_bucketer *b, int apply)
{
    pthread_mutex_lock(&b->post_lock);
    post_queue t = b->q;
    b->q = b->taken; /* empty */
    b->taken = t;
    atomic_store_explicit(&b->nposts, 0, memory_order_relaxed);
    pthread_mutex_unlock(&b->post_lock);
    int marked = 0;
    for (int i = 0; i < b->taken.n; i++) {
        const post *e = &b->taken.v[i];
        if (e->gen != b->step_gen) {
            b->stale++;
            ftrt_log_info("bucketer: tensor %d was posted for a step that has ended; dropped",
                          e->tensor);
        } else if (!apply) {
            continue;
        } else if (b->ready[e->tensor]) {
            ftrt_log_error("ftrt_bucketer_ready_from_any_thread: tensor %d is already ready in "
                           "this step (marked by ftrt_bucketer_ready)", e->tensor);
            set_err(b, FTRT_EINVAL);
        } else {
            mark(b, e->tensor, e->ptr);
            marked++;
        }
    }
    b->taken.n = 0;
    return marked;
}

/* Owner: applies the queued posts, if any (one atomic load when there are none). */
static inline int take_if_posted(ftrt_bucketer *b, int apply)
{
    return atomic_load_explicit(&b->nposts, memory_order_relaxed) ? take_posts(b, apply) : 0;
}

void ftrt__bucketer_lock(ftrt_bucketer *b)
{
    if (b->direct) pthread_mutex_lock(&b->step_lock);
}

void ftrt__bucketer_unlock(ftrt_bucketer *b)
{
    if (b->direct) pthread_mutex_unlock(&b->step_lock);
}

/* A direct bucketer's mark under step_lock, on any thread: see ftrt__bucketer_post_direct. */
static int post_direct_locked(ftrt_bucketer *b, int tensor, void *ptr, unsigned gen,
                              const char *who)
{
    if (gen != b->step_gen) {
        b->stale++;
        ftrt_log_info("bucketer: tensor %d was posted for a step that has ended; dropped", tensor);
        return 0;
    }
    if (b->ready[tensor]) {
        ftrt_log_error("%s: tensor %d is already ready in this step", who, tensor);
        return FTRT_EINVAL;
    }
    mark(b, tensor, ptr); /* also starts pieces deferred by earlier posts, where it may */
    return b->err;
}

int ftrt__bucketer_post_direct(ftrt_bucketer *b, int tensor, void *ptr, unsigned gen)
{
    if (!b || !b->direct || tensor < 0 || tensor >= b->n || (!ptr && b->counts[tensor]))
        return FTRT_EINVAL;
    pthread_mutex_lock(&b->step_lock);
    int rc = post_direct_locked(b, tensor, ptr, gen, "ftrt_bucketer_ready_from_any_thread");
    pthread_mutex_unlock(&b->step_lock);
    return rc;
}

/* ftrt_bucketer_ready() of a direct bucketer: the owner's own post. */
static __attribute__((noinline)) int ready_direct(ftrt_bucketer *b, int tensor, void *ptr)
{
    pthread_mutex_lock(&b->step_lock);
    take_if_posted(b, 1); /* only ftrt__bucketer_enqueue (a test) queues to a direct bucketer */
    int rc = post_direct_locked(b, tensor, ptr, b->step_gen, "ftrt_bucketer_ready");
    pthread_mutex_unlock(&b->step_lock);
    return rc;
}

int ftrt_bucketer_ready(ftrt_bucketer *b, int tensor, void *ptr)
{
    if (!b || tensor < 0 || tensor >= b->n || (!ptr && b->counts[tensor])) return FTRT_EINVAL;
    if (b->direct) return ready_direct(b, tensor, ptr);
    take_if_posted(b, 1);
    if (b->ready[tensor]) {
        ftrt_log_error("ftrt_bucketer_ready: tensor %d is already ready in this step", tensor);
        return FTRT_EINVAL;
    }
    mark(b, tensor, ptr);
    return b->err;
}

/* Appends a post to q, growing it (only stale posts can outgrow a step's n). 0 or -ENOMEM. */
static int push(post_queue *q, int tensor, unsigned gen, void *ptr)
{
    if (q->n == q->cap) {
        int cap = 2 * q->cap;
        post *v = realloc(q->v, (size_t)cap * sizeof *v);
        if (!v) return -ENOMEM;
        q->v = v;
        q->cap = cap;
    }
    q->v[q->n++] = (post){tensor, gen, ptr};
    return 0;
}

int ftrt__bucketer_enqueue(ftrt_bucketer *b, int tensor, void *ptr, unsigned gen)
{
    pthread_mutex_lock(&b->post_lock);
    int rc = push(&b->q, tensor, gen, ptr);
    if (!rc) atomic_store_explicit(&b->nposts, b->q.n, memory_order_relaxed);
    pthread_mutex_unlock(&b->post_lock);
    return rc;
}

unsigned ftrt__bucketer_gen(ftrt_bucketer *b)
{
    return atomic_load_explicit(&b->gen, memory_order_acquire);
}

int ftrt_bucketer_ready_from_any_thread(ftrt_bucketer *b, int tensor, void *ptr)
{
    if (!b || tensor < 0 || tensor >= b->n || (!ptr && b->counts[tensor])) return FTRT_EINVAL;
    if (b->direct) { /* a GPU bucketer: the post must record its producer's event */
        ftrt_log_error("ftrt_bucketer_ready_from_any_thread: a GPU bucketer takes "
                       "ftrt_gpu_bucketer_ready_from_any_thread()");
        return FTRT_EINVAL;
    }
    unsigned gen = ftrt__bucketer_gen(b);
    unsigned old = atomic_exchange_explicit(&b->posted[tensor], gen, memory_order_relaxed);
    if (old == gen) {
        ftrt_log_error("ftrt_bucketer_ready_from_any_thread: tensor %d is already ready in this "
                       "step", tensor);
        return FTRT_EINVAL;
    }
    int rc = ftrt__bucketer_enqueue(b, tensor, ptr, gen);
    if (rc) { /* not posted: give the mark back */
        atomic_compare_exchange_strong_explicit(&b->posted[tensor], &gen, old,
                                                memory_order_relaxed, memory_order_relaxed);
        return rc;
    }
    return atomic_load_explicit(&b->pub_err, memory_order_relaxed);
}

int ftrt_bucketer_drain(ftrt_bucketer *b)
{
    if (!b) return FTRT_EINVAL;
    ftrt__bucketer_lock(b);
    int marked = take_if_posted(b, 1);
    if (b->direct) advance(b); /* the pieces a poster deferred */
    int rc = b->err ? b->err : marked;
    ftrt__bucketer_unlock(b);
    return rc;
}

/* Waits for every submitted piece (raw) and clears the step; returns the first error. */
static int drain(ftrt_bucketer *b)
{
    int rc = b->err;
    for (int p = 0; p < b->np; p++) {
        if (!b->reqs[p]) continue;
        int r = b->be->wait_raw(b->reqs[p]);
        if (r && !rc) rc = r;
        ftrt_request_free(b->reqs[p]);
        b->reqs[p] = NULL;
    }
    step_reset(b);
    return ftrt__watch_note(b->plane->watch, rc);
}

/* wait_all (a direct bucketer: under step_lock, held through the wait). */
static int wait_all(ftrt_bucketer *b)
{
    take_if_posted(b, 1);
    for (int i = 0; i < b->n; i++)
        if (!b->ready[i]) {
            ftrt_log_error("ftrt_bucketer_wait_all: tensor %d was not marked ready", i);
            return FTRT_ESTATE;
        }
    if (b->direct) advance(b); /* the pieces posters deferred start here, on the owner */
    if (b->next < b->np) {     /* a direct backend that deferred on the owner too */
        ftrt_log_error("ftrt_bucketer_wait_all: piece %d could not be started", b->next);
        set_err(b, FTRT_ESTATE);
    }
    ftrt__host_wait_begin(&b->plane->host);
    int rc = drain(b);
    ftrt__host_wait_end(&b->plane->host, rc);
    return rc;
}

int ftrt_bucketer_wait_all(ftrt_bucketer *b)
{
    if (!b) return FTRT_EINVAL;
    ftrt__bucketer_lock(b);
    int rc = wait_all(b);
    ftrt__bucketer_unlock(b);
    return rc;
}

int ftrt_bucketer_reset(ftrt_bucketer *b)
{
    if (!b) return FTRT_EINVAL;
    ftrt__bucketer_lock(b);
    take_if_posted(b, 0);
    drain(b);
    ftrt__bucketer_unlock(b);
    return 0;
}

long ftrt__bucketer_stale_posts(const ftrt_bucketer *b) { return b->stale; }

int ftrt_bucketer_buckets(const ftrt_bucketer *b) { return b ? b->nb : FTRT_EINVAL; }

int ftrt_bucketer_pieces(const ftrt_bucketer *b) { return b ? b->np : FTRT_EINVAL; }

int ftrt_bucketer_bucket_of(const ftrt_bucketer *b, int tensor)
{
    if (!b || tensor < 0 || tensor >= b->n) return FTRT_EINVAL;
    return b->bucket_of[tensor];
}

int ftrt_bucketer_layout(const ftrt_bucketer *b, int tensor, size_t *offset)
{
    if (!b || !offset || tensor < 0 || tensor >= b->n) return FTRT_EINVAL;
    *offset = b->t_off[tensor];
    return b->bucket_of[tensor];
}

long long ftrt_bucketer_packed_bytes(const ftrt_bucketer *b)
{
    if (!b) return FTRT_EINVAL;
    return atomic_load_explicit(&((ftrt_bucketer *)b)->packed, memory_order_relaxed);
}

const ftrt__bucket_backend *ftrt__bucketer_backend(const ftrt_bucketer *b, void **arg)
{
    if (arg) *arg = b->be_arg;
    return b->be;
}

struct ftrt_request *ftrt__bucketer_request(const ftrt_bucketer *b, int p)
{
    return p >= 0 && p < b->np ? b->reqs[p] : NULL;
}

int ftrt__bucketer_all_submitted(const ftrt_bucketer *b) { return b->next == b->np; }

int ftrt__bucketer_order(ftrt_bucketer *b, void *consumer, int strict)
{
    if (!b || !b->be->order) return FTRT_EINVAL;
    ftrt__bucketer_lock(b);
    int rc = strict ? b->err : 0;
    if (!rc && b->next < b->np) rc = FTRT_ESTATE; /* a piece not started: nothing ordered */
    for (int p = 0; !rc && p < b->np; p++)
        if (b->reqs[p]) rc = b->be->order(b->be_arg, b->reqs[p], consumer);
    ftrt__bucketer_unlock(b);
    return rc;
}
