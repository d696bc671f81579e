/*
 * bucketer.h - gradient buckets (internal): the assignment of tensors to buckets and the
 * bucketer's backend interface (the CPU engine in bucketer.c, the NCCL plane in libftrt_gpu).
 */
#ifndef FTRT_COMM_BUCKETER_H
#define FTRT_COMM_BUCKETER_H

#include <stddef.h>

#include "comm/async.h"
#include "ftrt.h"

/*
 * Assigns n tensors of bytes[i] bytes to buckets after PyTorch DDP's
 * compute_bucket_assignment_by_size (torch/csrc/distributed/c10d/reducer.cpp), walked in the
 * order the gradients become ready, as DDP's bucket rebuild does after its first iteration:
 * tensors are taken in ready order (n-1 .. 0 when `reverse`, else 0 .. n-1) and appended to the
 * open bucket; once the open bucket holds at least its limit it is closed, the first bucket's
 * limit being first_cap and every later one's cap (so a bucket may exceed its limit by its
 * last tensor, and a tensor larger than the limit closes its bucket at once).
 *   order[0..n):           tensor indices in bucket order (bucket 0's tensors first);
 *   start[0..nbuckets]:    bucket k is order[start[k] .. start[k+1]);
 *   bucket_of[0..n):       the bucket of each tensor.
 * Returns the number of buckets (>= 1 when n >= 1), or FTRT_EINVAL (n < 1, a cap of 0).
 */
int ftrt__bucket_assign(const size_t *bytes, int n, int reverse, size_t first_cap, size_t cap,
                        int *order, int *start, int *bucket_of);

/* The size of ftrt_bucket_config before `in_place` was added: a caller built against that
 * header passes it, and the fields it does not know take their defaults. */
#define FTRT__BUCKET_CONFIG_V1 offsetof(ftrt_bucket_config, in_place)

/* *dst = the defaults overlaid with the fields src's caller knows (src->size bytes; NULL:
 * the defaults), dst->size = sizeof *dst. 0, or FTRT_EINVAL (src->size neither sizeof *dst
 * nor FTRT__BUCKET_CONFIG_V1; dst holds the defaults). Thread-safe. */
int ftrt__bucket_config_copy(ftrt_bucket_config *dst, const ftrt_bucket_config *src);

/* What a direct backend's submit returns when it cannot start the bucket on the calling thread
 * (the GPU plane off its owning thread before the epoch's NCCL communicator exists, which only
 * the owner may build): the piece stays unsubmitted and the owner starts it at its next
 * ready / drain / wait_all. Never an error; positive so that it cannot be one. */
#define FTRT__BUCKET_DEFER 1

/* What the bucketer does with a complete bucket: start its allreduce (sum, then multiplied by
 * `scale`) of the tensors segs[0..n) (application pointers, in bucket order, `count` elements)
 * and return a request. in_place: 1 when the bucketer's configuration allows it and segs are
 * one run of memory (each starts where the one before ends): the backend reduces on that
 * memory itself, with no staging copy (ftrt_bucket_config.in_place). submit is called in
 * bucket order, from the application thread (a direct backend: from any thread, under the
 * bucketer's step lock). */
typedef struct ftrt__bucket_backend {
    /* tensors[0..n): the tensor indices of segs */
    int (*submit)(void *arg, int bucket, const int *tensors, const ftrt__seg *segs, int n,
                  size_t count, double scale, int in_place, struct ftrt_request **req);
    /* waits for a request without the wait bookkeeping (the bucketer counts one wait for
     * ftrt_bucketer_wait_all); returns its result */
    int (*wait_raw)(struct ftrt_request *req);
    /* called by ftrt_bucketer_free() (may be NULL) */
    void (*destroy)(void *arg);
    /* 1: a direct backend (the NCCL plane). Its submit is thread-safe against every other
     * call of the backend (it serializes them itself), checks the epoch watch itself (the
     * bucketer then reads neither the watch nor needs_recover off the owning thread), and may
     * return FTRT__BUCKET_DEFER. The bucketer then takes its step lock in every call, and a
     * post from another thread marks the tensor and starts the buckets it completes on the
     * posting thread, instead of queueing it for the owner (ftrt__bucketer_post_direct). */
    int direct;
    /* makes `consumer` (a stream of the backend, opaque here) wait for req's collective on
     * the device, without blocking the host; 0 or the backend's error. Any thread. NULL: the
     * backend cannot order (ftrt__bucketer_order returns FTRT_EINVAL). */
    int (*order)(void *arg, struct ftrt_request *req, void *consumer);
} ftrt__bucket_backend;

/* The backend and its argument of a bucketer (the GPU bucketer's calls check the backend). */
const ftrt__bucket_backend *ftrt__bucketer_backend(const ftrt_bucketer *b, void **arg);
/* The request of bucket k in this step, NULL before it is submitted. */
struct ftrt_request *ftrt__bucketer_request(const ftrt_bucketer *b, int k);
/* 1 when every bucket of this step has been submitted, else 0. */
int ftrt__bucketer_all_submitted(const ftrt_bucketer *b);
/* Posts of ftrt_bucketer_ready_from_any_thread() dropped so far because they arrived after
 * their step had ended (wait_all or reset). Owner thread. */
long ftrt__bucketer_stale_posts(const ftrt_bucketer *b);
/* The step generation posts are stamped with (never 0; +1 each time a step ends). Any thread. */
unsigned ftrt__bucketer_gen(ftrt_bucketer *b);
/* The second half of ftrt_bucketer_ready_from_any_thread(), after its argument checks and its
 * claim of the tensor's mark: queues (tensor, ptr) for generation `gen`. Lets a test stage a
 * post that read the generation before its step ended, or that claimed its mark just before
 * ftrt_bucketer_ready() marked the same tensor. Returns 0 or -ENOMEM. Any thread. */
int ftrt__bucketer_enqueue(ftrt_bucketer *b, int tensor, void *ptr, unsigned gen);

/* A post from any thread to a direct bucketer (ftrt__bucket_backend.direct): under the step
 * lock, drops it if the bucketer's generation is no longer `gen` (read by the poster before it
 * began: its step ended; counted in ftrt__bucketer_stale_posts, returns 0), refuses a tensor
 * already ready in this step (FTRT_EINVAL, the step unharmed), else marks it and starts every
 * piece it completes on the calling thread (a deferred piece waits for the owner). Returns 0,
 * FTRT_EINVAL (bad arguments, not a direct bucketer, already ready) or the step's first error
 * (the backend's: FTRT_ERECOVER, FTRT_ENCCL, ...; the owner gets it from wait_all too). */
int ftrt__bucketer_post_direct(ftrt_bucketer *b, int tensor, void *ptr, unsigned gen);
/* Orders `consumer` after every piece of this step through the backend's order op, under the
 * step lock (so from any thread for a direct bucketer; the owner's for the others). While a
 * piece has not started (a tensor not yet ready, or a piece a poster deferred to the owner)
 * nothing is ordered and FTRT_ESTATE is returned. With `strict`, a step that has met an error
 * orders nothing and returns that error (the step's first: FTRT_ERECOVER, FTRT_ENCCL, ...);
 * without, the pieces that failed to start are skipped (the owner's ftrt_bucketer_wait_all()
 * reports the error). Returns 0, FTRT_EINVAL (NULL b, a backend without an order op),
 * FTRT_ESTATE, the step's error (strict) or the order op's (pieces before it stay ordered). */
int ftrt__bucketer_order(ftrt_bucketer *b, void *consumer, int strict);
/* The step lock of a direct bucketer (no-op for the others), for the backend's owner-side
 * calls that read the step's requests (ftrt__bucketer_request, _all_submitted). */
void ftrt__bucketer_lock(ftrt_bucketer *b);
void ftrt__bucketer_unlock(ftrt_bucketer *b);

/* Creates a bucketer over a backend, reducing over `plane` (its epoch watch, host interface
 * and size; not owned, must outlive the bucketer). Arguments otherwise as
 * ftrt_bucketer_create() (include/ftrt.h), whose checks and errors it shares (FTRT_EINVAL,
 * -ENOMEM); the caller checks the role. */
int ftrt__bucketer_create_be(struct ftrt__plane *plane, const size_t *counts, int ntensors,
                             ftrt_dtype dtype, const ftrt_bucket_config *cfg,
                             const ftrt__bucket_backend *be, void *arg, ftrt_bucketer **out);
/* ftrt__bucketer_create_be over the plane's CPU request engine (comm/async.c). */
int ftrt__bucketer_create(struct ftrt__plane *plane, const size_t *counts, int ntensors,
                          ftrt_dtype dtype, const ftrt_bucket_config *cfg, ftrt_bucketer **out);

#endif
