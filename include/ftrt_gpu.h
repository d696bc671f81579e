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
 * a guard word in mapped host memory and leaves the application's tensors alone. The epoch
 * change also reaches the plane when no ftrt call is running: a thread of the plane, woken by
 * the rank's agent thread, aborts the communicator of the old epoch at once (ncclCommAbort), so
 * a host synchronization with a stream that waits on the plane's collectives (loss.item()
 * between backward and the optimizer step) returns instead of waiting for a dead trainer.
 *
 * Threading: the plane belongs to the thread that creates it with ftrt_gpu_create(), which must
 * be the application thread (the one that called ftrt_init()): every function here is for that
 * thread only, except ftrt_gpu_bucketer_ready_from_any_thread() and
 * ftrt_gpu_bucketer_order_from_any_thread(), which any thread may call at any time between
 * ftrt_gpu_bucketer_create() and ftrt_bucketer_free(), however many at once.
 * That call starts the buckets its gradient completes (event waits, pack, ncclAllReduce,
 * unpack) on the calling thread, so buckets go out while the application thread is blocked in
 * a backward pass whose hooks autograd runs on its device threads. Internally every call that
 * touches the plane's NCCL communicator or stream holds the plane's mutex (NCCL: a
 * communicator may be used from several threads if only one at a time does, NCCL user guide,
 * "Thread Safety"; the CUDA runtime is thread-safe), and a bucketer's step is guarded by its
 * own mutex, taken first. The one thing a posting thread never does is build the NCCL
 * communicator (it broadcasts the unique id over MPI): until the application thread has built
 * the current epoch's (at its first collective of the epoch, or ftrt_gpu_connect()), posted
 * buckets wait for its next ftrt_gpu_bucketer_ready(), ftrt_bucketer_drain(),
 * ftrt_gpu_bucketer_order() or ftrt_bucketer_wait_all(). While posts of a step may be in
 * flight, the application thread must not call ftrt_recover() (it changes the epoch the posting
 * threads read): in PyTorch, backward() returns only after all of its hooks did.
 *
 * Devices: all device pointers and streams passed in belong to the plane's device. The
 * application thread's current device is set to it by ftrt_gpu_create() and by each collective
 * it starts; ftrt_gpu_bucketer_ready_from_any_thread() makes it current on the posting thread
 * for the duration of the call and gives the thread its own current device back before it
 * returns (autograd's device thread of that device has it current already).
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
 * a nonblocking communication stream (highest priority), the guard word and the thread that
 * aborts the communicator on an epoch change (above); the NCCL communicator comes with the
 * first collective. out: owned by the caller; free it with ftrt_gpu_free() before
 * ftrt_finalize().
 * Returns 0; FTRT_ENODEV (no GPU, no driver, or no device `device`); FTRT_ESTATE (not a
 * trainer); FTRT_EINVAL; FTRT_ECUDA; -ENOMEM; -EAGAIN (no thread could be started).
 */
FTRT_API int ftrt_gpu_create(ftrt_ctx *ctx, int device, ftrt_gpu **out);

/* Destroys the plane: stops its thread, waits for its stream, destroys (or, after a failure, aborts) the NCCL
 * communicator, frees its buffers and graveyard. Requests and bucketers of the plane must be
 * freed first (else FTRT_ESTATE and nothing is freed). NULL is accepted. Returns 0. */
FTRT_API int ftrt_gpu_free(ftrt_gpu *g);

/*
 * Builds the NCCL communicator of the current epoch now, if the plane has none (else returns 0
 * at once, communicating nothing), so that buckets posted from other threads during this
 * epoch's first step start on those threads (see "Threading"). Collective over the trainers
 * when it builds: every trainer calls it at the same point of its sequence of collectives
 * (e.g. before each backward pass; after ftrt_recover() it builds the new epoch's).
 * Application thread (the plane's creator) only.
 * Returns 0; FTRT_EINVAL (NULL, or not the plane's thread); FTRT_ERECOVER / FTRT_ENOSPARE /
 * FTRT_ECOORD / FTRT_EABORT; FTRT_ESTATE (ftrt_recover() owed); FTRT_ENCCL (also: this epoch's
 * communicator failed, the next recovery rebuilds it); FTRT_ECUDA; FTRT_EMPI.
 */
FTRT_API int ftrt_gpu_connect(ftrt_gpu *g);

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
 * dtype: any ftrt_dtype (ftrt.h; element sizes and the 16-bit rounding there), reduced by NCCL
 * in that type: ncclFloat32, ncclFloat64, ncclInt64, ncclBfloat16 (NCCL 2.10 and later),
 * ncclFloat16.
 * Returns 0 with *req; FTRT_ERECOVER / FTRT_ENOSPARE / FTRT_ECOORD / FTRT_EABORT; FTRT_EINVAL
 * (NULL g/req, NULL buf with count > 0, an unknown dtype or op: logged); FTRT_ENOTSUP
 * (FTRT_BFLOAT16 with an NCCL older than 2.10: logged); FTRT_ESTATE (ftrt_recover() owed);
 * FTRT_ENCCL; FTRT_ECUDA; FTRT_EMPI (sending the unique id); -ENOMEM.
 */
FTRT_API int ftrt_gpu_allreduce_start(ftrt_gpu *g, void *buf, size_t count, ftrt_dtype dtype,
                                      ftrt_op op, cudaStream_t producer, ftrt_request **req);

/*
 * Starts a broadcast of `count` elements of `dtype` at device pointer `buf` from the trainer of
 * logical rank `root` (ftrt_broadcast() of ftrt.h on the device), after the work already
 * queued on `producer` (NULL = the legacy default stream): copied into a plane-owned device
 * buffer, ncclBroadcast on the communication stream, copied back into buf by the guarded
 * unpack kernel, so that a broadcast of an epoch that ended writes nothing into buf. The
 * ordering and outcome rules of ftrt_gpu_allreduce_start() apply (ftrt_gpu_request_order(),
 * ftrt_request_test() / ftrt_request_wait()). Collective over the trainers, same count,
 * dtype and root everywhere, in the same order as the plane's other collectives.
 * Returns 0 with *req; FTRT_ERECOVER / FTRT_ENOSPARE / FTRT_ECOORD / FTRT_EABORT; FTRT_EINVAL
 * (NULL g/req, NULL buf with count > 0, an unknown dtype, root outside [0, trainers));
 * FTRT_ENOTSUP (FTRT_BFLOAT16 with an NCCL older than 2.10); FTRT_ESTATE (ftrt_recover()
 * owed); FTRT_ENCCL; FTRT_ECUDA; FTRT_EMPI (sending the unique id); -ENOMEM.
 */
FTRT_API int ftrt_gpu_broadcast_start(ftrt_gpu *g, void *buf, size_t count, ftrt_dtype dtype,
                                      int root, cudaStream_t producer, ftrt_request **req);

/*
 * Starts a reduce-scatter on the device (ftrt_reduce_scatter() of ftrt.h: logical rank r
 * receives in recvbuf[0, count) the op-reduction over the trainers of their sendbuf's elements
 * [r * count, (r + 1) * count)) after the work already queued on `producer` (NULL = the legacy
 * default stream). sendbuf (trainers * count elements of dtype) and recvbuf (count) are device
 * pointers; count is per trainer, in elements. Both sides are staged in one plane-owned device
 * buffer: sendbuf copied in by the pack kernel, ncclReduceScatter between its two halves on the
 * communication stream, the result copied to recvbuf by the guarded unpack kernel, so that a
 * reduce-scatter of an epoch that ended writes nothing into recvbuf. recvbuf may overlap
 * sendbuf only as one whole block of it (recvbuf == sendbuf + k * count elements), as on the
 * CPU plane. The ordering and outcome rules of ftrt_gpu_allreduce_start() apply
 * (ftrt_gpu_request_order(), ftrt_request_test() / ftrt_request_wait()). Collective over the
 * trainers, same count, dtype and op everywhere, in the same order as the plane's other
 * collectives.
 * Returns 0 with *req; FTRT_ERECOVER / FTRT_ENOSPARE / FTRT_ECOORD / FTRT_EABORT; FTRT_EINVAL
 * (NULL g/req, a NULL buffer with count > 0, an unknown dtype or op, buffers overlapping other
 * than at a whole block, (trainers + 1) * count elements overflowing size_t); FTRT_ENOTSUP
 * (FTRT_BFLOAT16 with an NCCL older than 2.10); FTRT_ESTATE (ftrt_recover() owed);
 * FTRT_ENCCL; FTRT_ECUDA; FTRT_EMPI (sending the unique id); -ENOMEM.
 */
FTRT_API int ftrt_gpu_reduce_scatter_start(ftrt_gpu *g, const void *sendbuf, void *recvbuf,
                                           size_t count, ftrt_dtype dtype, ftrt_op op,
                                           cudaStream_t producer, ftrt_request **req);

/*
 * Starts an all-gather on the device (ftrt_allgather() of ftrt.h: every trainer receives in
 * recvbuf[r * count, (r + 1) * count) the count elements of logical rank r's sendbuf) after the
 * work queued on `producer`. sendbuf (count elements) and recvbuf (trainers * count) are
 * device pointers, staged like ftrt_gpu_reduce_scatter_start() (ncclAllGather between the two
 * sides of one plane-owned buffer, the guarded unpack into recvbuf); sendbuf may be one whole
 * block of recvbuf (sendbuf == recvbuf + k * count elements). Same rules and returns as
 * ftrt_gpu_reduce_scatter_start() (no op).
 */
FTRT_API int ftrt_gpu_allgather_start(ftrt_gpu *g, const void *sendbuf, void *recvbuf,
                                      size_t count, ftrt_dtype dtype, cudaStream_t producer,
                                      ftrt_request **req);

/* Makes `consumer` (e.g. the optimizer's stream) wait, on the device, for req's collective and
 * its copy back. Does not block the host. Returns 0, FTRT_EINVAL (not a GPU request), or
 * FTRT_ECUDA. After an abort the consumer proceeds on unreduced data: check the request. */
FTRT_API int ftrt_gpu_request_order(ftrt_request *req, cudaStream_t consumer);

/* A bucketer (ftrt.h) whose buckets are packed, reduced and unpacked on the device by this
 * plane. Tensors are device pointers; dtypes as ftrt_gpu_allreduce_start() (the mean of a 16-bit
 * dtype is scaled by the unpack kernel exactly as the CPU plane scales it). Returns as
 * ftrt_bucketer_create(); FTRT_ENOTSUP (FTRT_BFLOAT16 with an NCCL older than 2.10); FTRT_ECUDA. Free it
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

/*
 * ftrt_gpu_bucketer_ready() for any thread (autograd's device threads, which run the backward
 * hooks of CUDA tensors while the application thread is blocked in backward()): records an
 * event on `producer` (a stream of the plane's device; NULL = the legacy default stream) after
 * the work queued there so far, marks tensor `tensor` ready at device pointer `ptr`
 * (counts[tensor] elements; the memory rules of ftrt_bucketer_ready()), and starts every
 * bucket this completes, on this thread, in bucket order, under the bucketer's mutex: the
 * stream waits for the bucket's producer events, then pack, ncclAllReduce and unpack are
 * queued on the plane's stream; nothing waits for the device. A bucket of an epoch whose NCCL
 * communicator the application thread has not built yet waits for that thread (see
 * "Threading"). The plane's device is current during the call; the caller's current device is
 * restored before it returns. Results are bitwise those of ftrt_gpu_bucketer_ready() on the
 * application thread (the same buckets, in the same order).
 * A post whose step ended while it ran (ftrt_bucketer_wait_all() or _reset() came first: a late
 * hook of an abandoned step) is dropped with an info message and returns 0; every post of a
 * step must happen before the application thread's ftrt_bucketer_wait_all().
 * Errors met while starting a bucket (an epoch change, NCCL or CUDA failures) are the step's
 * first error: returned to this poster and to every later one, and by ftrt_bucketer_wait_all()
 * to the application thread, which then acts on it (ftrt_recover() after FTRT_ERECOVER).
 * Returns 0; FTRT_EINVAL (NULL b, not a GPU bucketer, bad index, NULL ptr with counts[tensor] >
 * 0, tensor already ready in this step: nothing marked, the step unharmed); FTRT_ECUDA
 * (recording the event or setting the device failed: nothing marked); or, marked, the first
 * error of this step (FTRT_ERECOVER / FTRT_ENOSPARE / FTRT_ECOORD / FTRT_EABORT, FTRT_ENCCL,
 * FTRT_ECUDA, -ENOMEM).
 */
FTRT_API int ftrt_gpu_bucketer_ready_from_any_thread(ftrt_bucketer *b, int tensor, void *ptr,
                                                     cudaStream_t producer);

/* Makes `consumer` wait, on the device, for every bucket of this step (all must have started:
 * else FTRT_ESTATE; it first starts the buckets that posting threads left to the application
 * thread). Lets the optimizer run without a host round trip; call ftrt_bucketer_wait_all()
 * before committing the step. Returns 0, FTRT_EINVAL, FTRT_ESTATE, FTRT_ECUDA. */
FTRT_API int ftrt_gpu_bucketer_order(ftrt_bucketer *b, cudaStream_t consumer);

/*
 * ftrt_gpu_bucketer_order() for any thread, and without starting anything: when every bucket
 * of this step has started (every tensor was marked ready and every bucket went out, i.e. the
 * epoch's NCCL communicator existed when it completed), makes `consumer` (a stream of the
 * plane's device; NULL = the legacy default stream) wait, on the device, for every bucket's
 * allreduce and unpack, and returns 0: work queued on `consumer` afterwards sees the reduced
 * tensors (the host is not blocked). Otherwise it orders nothing and returns FTRT_ESTATE: a
 * tensor not yet posted, or a bucket a posting thread left to the application thread (no
 * communicator yet), which then starts it in ftrt_bucketer_wait_all() (or
 * ftrt_gpu_bucketer_order()). A step that has met an error orders nothing and returns that
 * error. Either way the application thread still ends the step with ftrt_bucketer_wait_all()
 * (which also reports failures of the collectives found after this call) and acts on its result.
 * Meant for PyTorch's end-of-backward callback, which autograd may run on its device thread
 * with the caller's current stream current (ftrt/pytorch.py). The plane's device is current
 * during the call; the caller's is restored. Runs under the bucketer's mutex (the posts of the
 * step and this call exclude each other); `consumer` is borrowed for the call.
 * Returns 0; FTRT_EINVAL (NULL b, not a GPU bucketer); FTRT_ESTATE (see above: nothing
 * ordered); the step's first error (FTRT_ERECOVER / FTRT_ENOSPARE / FTRT_ECOORD / FTRT_EABORT,
 * FTRT_ENCCL, FTRT_ECUDA, -ENOMEM: nothing ordered); FTRT_ECUDA (setting the device or
 * cudaStreamWaitEvent failed: the buckets before it stay ordered).
 */
FTRT_API int ftrt_gpu_bucketer_order_from_any_thread(ftrt_bucketer *b, cudaStream_t consumer);

#ifdef __cplusplus
}
#endif
#endif
