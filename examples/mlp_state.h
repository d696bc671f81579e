/*
 * mlp_state.h - the memory of examples/train_mlp's model (examples/mlp_state.c): the state
 * ftrt keeps (parameters and momentum, on the host or, with --device sim or cuda, in the
 * simulated device's or a GPU's memory), the host buffers the step computes in, the momentum
 * SGD update between them, and the test hook that publishes where the state is for a fault
 * injector.
 */
#ifndef FTRT_EXAMPLE_MLP_STATE_H
#define FTRT_EXAMPLE_MLP_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "ftrt.h"
#include "mlp_model.h"
#include "mlp_options.h"

/* A device the state can live in: its allocator and copies, each returning 0 or an ftrt code
 * (FTRT_EINVAL, FTRT_ENODEV, FTRT_ECUDA, -ENOMEM, ...). alloc: `bytes` (> 0) of device memory,
 * zeroed, into *dev; free: NULL accepted; write: host -> device; read: device -> host, both
 * synchronous (done when they return). */
typedef struct mlp_dev_ops {
    const char *name; /* "sim", "cuda": for messages */
    int (*alloc)(size_t bytes, void **dev);
    int (*free)(void *dev);
    int (*write)(void *dst_dev, const void *src_host, size_t bytes);
    int (*read)(void *dst_host, const void *src_dev, size_t bytes);
} mlp_dev_ops;

/* --device cuda (examples/mlp_cuda.c in train_mlp_gpu; refusals in train_mlp): the CUDA
 * device's ops, or NULL in a build without CUDA. */
const mlp_dev_ops *mlp_cuda_ops(void);

/* --device cuda: checks that a GPU is usable (cudaGetDeviceCount) and, with select, picks
 * this process's GPU (mpirun's local rank, OMPI_COMM_WORLD_LOCAL_RANK, modulo the visible
 * GPUs; 0 outside mpirun) and makes it current (cudaSetDevice, which creates the CUDA context).
 * With say, prints on stderr the GPU chosen, or why none is usable. Returns 0, FTRT_ENODEV (no
 * usable GPU or driver), FTRT_ECUDA, -ENOMEM, or FTRT_ENOTSUP (a build without CUDA). */
int mlp_cuda_check(int say, int select);

/* The model's memory: parameters, momentum, gradient, activations, minibatch indices; with
 * --device sim or cuda also the device copies of parameters and momentum, which are then the
 * state (params and mom being the host copies the computation works on). */
typedef struct model {
    float *params, *mom, *grad;
    float *folded;         /* the gradient sums of the data ranks held beyond the first (fold),
                              nfolded x (n + 1) floats, grown on demand (train_mlp.c) */
    size_t nfolded;
    int *data;             /* this trainer's data ranks (ftrt_data_ranks()), ndata_cap of room */
    void **contrib;        /* ndata_cap pointers: the gradient buffer of each (--ordered) */
    int ndata_cap;
    float *dparams, *dmom; /* device memory (of dev), or NULL (--device host) */
    const mlp_dev_ops *dev; /* the device of dparams and dmom, or NULL (--device host) */
    size_t n;              /* floats in params and mom */
    int ftrt_mem;          /* params and mom are ftrt_alloc() memory (--ftrt-alloc) */
    mlp_work w;
    uint32_t *idx;
} model;

/* Allocates the model for o (--hidden, --batch, --seed, --device) and writes every page
 * (initial weights, zero momentum), so that a hot spare that is promoted only receives state:
 * done before ftrt_init() on every rank that may train. Returns 0 or -1 (said on stderr;
 * nothing left allocated). model_free() frees it and zeroes *m (also a zeroed one). */
int model_alloc(model *m, const options *o);
void model_free(model *m);

/* Test hook (--flip-rank/--flip-at-step): flips bit `bit` (0 = lowest) of one parameter, the
 * first at or after index n/3 with |w| >= 1e-3, where the state lives: in device memory only
 * (a 4-byte write through the device's copy; the host copy is overwritten by the next read),
 * or the host copy in host mode. Sets *index, *before and *after. Returns 0 or an ftrt code
 * (FTRT_EINVAL: no such weight). */
int model_flip_bit(model *m, int bit, size_t *index, float *before, float *after);

/* --device sim or cuda: copies the parameters (and, with mom, the momentum) from the device
 * into the host copies. Returns 0 or an ftrt code; nothing to do in host mode. */
int state_read(model *m, int mom);

/* One momentum SGD update of the state with the mean gradient m->grad / denom: on the host
 * copies, and with --device sim or cuda read from the device first and written back after
 * (published_busy set meanwhile). Returns 0 or an ftrt code. */
int model_update(model *m, const options *o, float denom);

/* Test hook (--publish-addr, tools/ftrt-chaos flip-bit): the steps this trainer has done, as
 * the training loop counts them (set before each ftrt_step_done() and at every resume), and
 * with --device sim a flag set while an update holds the state on the host. */
extern volatile int64_t published_steps;
extern volatile int32_t published_busy;

/* Writes "<pid> <params address> <bytes> <published_steps address>" and, with device,
 * " <published_busy address>" to <prefix>.w<world rank> (temporary file, then rename).
 * Returns 0 or -1 (message printed). */
int publish_addresses(const char *prefix, ftrt_ctx *ctx, const float *params, size_t bytes,
                      int device);

#endif
