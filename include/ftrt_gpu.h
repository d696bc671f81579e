/*
 * ftrt_gpu.h - the GPU data plane of ftrt: NCCL collectives on a dedicated communication
 * stream, ordered against the application's streams with CUDA events, failure-aware like the
 * CPU plane (see ftrt.h, "Overlapped collectives"). Link libftrt_gpu (`ftrt::ftrt_gpu`), which
 * contains all of libftrt plus this plane, instead of libftrt; it needs the CUDA runtime and
 * NCCL, and loads (and reports FTRT_ENODEV) on machines without a GPU driver.
 *
 * The NCCL communicator is built lazily, at the first collective of each epoch: logical rank 0
 * creates an ncclUniqueId, it is broadcast over the trainers' MPI communicator (polled with the
 * epoch flag), and ncclCommInitRankConfig runs nonblocking (config.blocking = 0) and is polled
 * with ncclCommGetAsyncError together with the epoch flag, so a failure during init aborts it.
 * While collectives are in flight, ncclCommGetAsyncError is polled with the epoch flag; on an
 * epoch change the communicator is revoked (ncclCommRevoke) and destroyed, or aborted
 * (ncclCommAbort) when revoking is not possible, and the device buffers of its collectives go
 * to a graveyard: never reused. The unpack of a bucket queued behind an aborted allreduce checks
 * a guard word in mapped host memory and leaves the application's tensors alone.
 *
 * Threading: one application thread per plane (the thread that called ftrt_init()). All
 * device pointers belong to the plane's device.
 */
#ifndef FTRT_GPU_H
#define FTRT_GPU_H

#include <cuda_runtime_api.h>

#include "ftrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ftrt_gpu ftrt_gpu;

/*
 * Creates the GPU data plane of a trainer on CUDA device `device` (cudaSetDevice is called):
 * a nonblocking communication stream (highest priority) and the guard word; the NCCL
 * communicator comes with the first collective. out: owned by the caller; free it with
 * ftrt_gpu_free() before ftrt_finalize().
 * Returns 0; FTRT_ENODEV (no GPU, no driver, or no device `device`); FTRT_ESTATE (not a
 * trainer); FTRT_EINVAL; FTRT_ECUDA; -ENOMEM.
 */
FTRT_API int ftrt_gpu_create(ftrt_ctx *ctx, int device, ftrt_gpu **out);

/* Destroys the plane: waits for its stream, destroys (or, after a failure, aborts) the NCCL
 * communicator, frees its buffers and graveyard. Requests and bucketers of the plane must be
 * freed first (else FTRT_ESTATE and nothing is freed). NULL is accepted. Returns 0. */
FTRT_API int ftrt_gpu_free(ftrt_gpu *g);

/* The plane's communication stream (for the application's own cudaStreamWaitEvent). */
FTRT_API cudaStream_t ftrt_gpu_stream(const ftrt_gpu *g);

/*
 * Starts an in-place allreduce of `count` elements of `dtype` at device pointer `buf`, after
 * the work already queued on `producer` (the stream that computed buf; NULL = the legacy
 * default stream). The data is copied into a plane-owned device buffer, reduced with NCCL on
 * the communication stream and copied back into buf. buf must not be modified until the
 * collective completed on the device: order consumers with ftrt_gpu_request_order() and learn
 * the outcome with ftrt_request_test() / ftrt_request_wait() before trusting the result.
 * Collective over trainers, in the same order everywhere.
 * Returns 0 with *req; FTRT_ERECOVER / FTRT_ENOSPARE / FTRT_ECOORD / FTRT_EABORT; FTRT_EINVAL;
 * FTRT_ESTATE (ftrt_recover() owed); FTRT_ENCCL; FTRT_ECUDA; FTRT_EMPI (sending the unique id);
 * -ENOMEM.
 */
FTRT_API int ftrt_gpu_allreduce_start(ftrt_gpu *g, void *buf, size_t count, ftrt_dtype dtype,
                                      ftrt_op op, cudaStream_t producer, ftrt_request **req);

/* Makes `consumer` (e.g. the optimizer's stream) wait, on the device, for req's collective and
 * its copy back. Does not block the host. Returns 0, FTRT_EINVAL (not a GPU request), or
 * FTRT_ECUDA. After an abort the consumer proceeds on unreduced data: check the request. */
FTRT_API int ftrt_gpu_request_order(ftrt_request *req, cudaStream_t consumer);

/* A bucketer (ftrt.h) whose buckets are packed, reduced and unpacked on the device by this
 * plane. Tensors are device pointers. Returns as ftrt_bucketer_create(); FTRT_ECUDA. Free it
 * with ftrt_bucketer_free(); ftrt_bucketer_wait_all() / _reset() work as for the CPU plane. */
FTRT_API int ftrt_gpu_bucketer_create(ftrt_gpu *g, const size_t *counts, int ntensors,
                                      ftrt_dtype dtype, const ftrt_bucket_config *cfg,
                                      ftrt_bucketer **out);

/* Marks device tensor `tensor` ready at `ptr`, produced by the work queued so far on
 * `producer` (an event is recorded there; the bucket's pack waits for it on the device).
 * Returns as ftrt_bucketer_ready(); FTRT_EINVAL also for a bucketer not made by
 * ftrt_gpu_bucketer_create(); FTRT_ECUDA. */
FTRT_API int ftrt_gpu_bucketer_ready(ftrt_bucketer *b, int tensor, void *ptr,
                                     cudaStream_t producer);

/* Makes `consumer` wait, on the device, for every bucket of this step (all must have started:
 * else FTRT_ESTATE). Lets the optimizer run without a host round trip; call
 * ftrt_bucketer_wait_all() before committing the step. Returns 0, FTRT_EINVAL, FTRT_ESTATE,
 * FTRT_ECUDA. */
FTRT_API int ftrt_gpu_bucketer_order(ftrt_bucketer *b, cudaStream_t consumer);

#ifdef __cplusplus
}
#endif
#endif
