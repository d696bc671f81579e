/*
 * mlp_state.c - where examples/train_mlp's state lives, and how the step reaches it.
 *
 * The parameters and the momentum buffer are what ftrt keeps (registered as REPLICATED
 * regions, the momentum SHARDED with --sharded-momentum), so that a recovery or a restart
 * restores them exactly. The gradient, the activations and the minibatch indices are scratch.
 *
 * With --device sim or --device cuda the two arrays live in device memory and are registered
 * as FTRT_REGION_DEVICE regions: ftrt reaches them only through its device backend. sim is
 * ftrt's simulated device (include/ftrt_sim.h: a test arrangement, no GPU; the job runs with
 * FTRT_TEST_SIM_DEVICE=1); cuda is memory of cudaMalloc on a GPU (examples/mlp_cuda.c, in the
 * train_mlp_gpu build only, which links libftrt_gpu and so its CUDA device backend). The
 * example computes on host copies, as a GPU program would with kernels: each step reads the
 * parameters from the device for the forward and backward pass, and the update reads
 * parameters and momentum again, applies momentum SGD and writes both back. So the device holds
 * the state between steps, and a bit flipped there stays until the next update reads it. The
 * arithmetic is the same as on the host: the final parameters are too.
 *
 * The test hook of --publish-addr lives here too: the addresses an injector outside the
 * process (tools/ftrt-chaos flip-bit) reads and writes through /proc/<pid>/mem.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ftrt.h"
#include "ftrt_sim.h"
#include "mlp_state.h"

/* malloc of n floats, or NULL with a line naming `what`, its size and --hidden. */
static float *alloc_floats(size_t n, const char *what, size_t hidden, int ftrt_mem)
{
    float *p = NULL;
    if (n <= SIZE_MAX / sizeof *p && ftrt_mem) {
        void *q = NULL;
        p = ftrt_alloc(n * sizeof *p, &q) == 0 ? q : NULL;
    } else if (n <= SIZE_MAX / sizeof *p) {
        p = malloc(n * sizeof *p);
    }
    if (!p)
        fprintf(stderr,
                "train_mlp: cannot allocate the %s: %zu floats (%.1f MiB, --hidden %zu): %s\n",
                what, n, (double)n * sizeof *p / 1048576.0, hidden, strerror(ENOMEM));
    return p;
}

/* Test hook (--publish-addr): the steps this trainer has done, as the training loop counts
 * them (set before each ftrt_step_done() and at every resume), at an address an injector
 * outside the process reads while the process is stopped. */
volatile int64_t published_steps;
/* With --device sim: 1 while the update has read the state from the device and not yet
 * written it back (a bit flipped in device memory then would be overwritten: an injector that
 * finds it set lets the process go on and tries again). */
volatile int32_t published_busy;

/* Writes "<pid> <params address> <bytes> <published_steps address>" and, with --device sim,
 * " <published_busy address>" (params then being the simulated device's memory) to
 * <prefix>.w<world rank> (temporary file, then rename). Returns 0 or -1 (message printed). */
int publish_addresses(const char *prefix, ftrt_ctx *ctx, const float *params, size_t bytes,
                      int device)
{
    char path[4096 + 32], tmp[4096 + 48], busy[32] = "";
    snprintf(path, sizeof path, "%s.w%d", prefix, ftrt_world_rank(ctx));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (device) snprintf(busy, sizeof busy, " %#" PRIxPTR, (uintptr_t)&published_busy);
    FILE *f = fopen(tmp, "w");
    int ok = f && fprintf(f, "%ld %#" PRIxPTR " %zu %#" PRIxPTR "%s\n", (long)getpid(),
                          (uintptr_t)params, bytes, (uintptr_t)&published_steps, busy) > 0;
    if (f && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        fprintf(stderr, "train_mlp: --publish-addr: cannot write %s: %s\n", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

/* The simulated device's allocator and checked copies (include/ftrt_sim.h). */
static const mlp_dev_ops sim_ops = {.name = "sim",
                                    .alloc = ftrt_sim_alloc,
                                    .free = ftrt_sim_free,
                                    .write = ftrt_sim_write,
                                    .read = ftrt_sim_read};

#ifndef MLP_WITH_CUDA
/* Without CUDA (this is train_mlp, not train_mlp_gpu): --device cuda is refused. */
static int no_cuda(int say)
{
    if (say)
        fprintf(stderr, "train_mlp: --device cuda: this train_mlp was built without CUDA; run "
                        "train_mlp_gpu (built with the CUDA toolkit and NCCL, linked with "
                        "libftrt_gpu)\n");
    return FTRT_ENOTSUP;
}
int mlp_cuda_check(int say, int select)
{
    (void)select;
    return no_cuda(say);
}
const mlp_dev_ops *mlp_cuda_ops(void) { return NULL; }
#endif

void model_free(model *m)
{
    mlp_work_free(&m->w);
    free(m->idx);
    free(m->grad);
    free(m->folded);
    free(m->data);
    free(m->contrib);
    if (m->ftrt_mem) {
        ftrt_free(m->mom);
        ftrt_free(m->params);
    } else {
        free(m->mom);
        free(m->params);
    }
    if (m->dev) {
        m->dev->free(m->dparams);
        m->dev->free(m->dmom);
    }
    memset(m, 0, sizeof *m);
}

/* --device sim or cuda: the state's device copies, allocated and set from the host copies
 * (for cuda, on the GPU that main's mlp_cuda_check() made current). Returns 0 or -1 (said on
 * stderr). */
static int model_alloc_device(model *m, enum mlp_device where)
{
    size_t bytes = m->n * sizeof(float);
    m->dev = where == MLP_DEVICE_CUDA ? mlp_cuda_ops() : &sim_ops;
    int rc = m->dev->alloc(bytes, (void **)&m->dparams);
    if (rc == 0) rc = m->dev->alloc(bytes, (void **)&m->dmom);
    if (rc == 0) rc = m->dev->write(m->dparams, m->params, bytes);
    if (rc == 0) rc = m->dev->write(m->dmom, m->mom, bytes);
    if (rc != 0)
        fprintf(stderr, "train_mlp: --device %s: cannot set up %.1f MiB of device memory: %s "
                        "(%s)\n", m->dev->name, 2.0 * (double)bytes / 1048576.0,
                ftrt_strerror(rc), ftrt_err_name(rc));
    return rc == 0 ? 0 : -1;
}

/* --device sim or cuda: state_read copies the parameters (and, with mom, the momentum) from
 * the device into the host copies, state_write both back. Return 0 or an ftrt code; nothing
 * to do in host mode. */
int state_read(model *m, int mom)
{
    if (!m->dev) return 0;
    int rc = m->dev->read(m->params, m->dparams, m->n * sizeof(float));
    if (rc == 0 && mom) rc = m->dev->read(m->mom, m->dmom, m->n * sizeof(float));
    return rc;
}

static int state_write(model *m)
{
    if (!m->dev) return 0;
    int rc = m->dev->write(m->dparams, m->params, m->n * sizeof(float));
    if (rc == 0) rc = m->dev->write(m->dmom, m->mom, m->n * sizeof(float));
    return rc;
}

/* One momentum SGD update of the state: on the host copies, and with --device sim or cuda
 * read from the device first and written back after (published_busy set meanwhile). Returns 0 or an
 * ftrt code. */
int model_update(model *m, const options *o, float denom)
{
    published_busy = 1;
    int rc = state_read(m, 1);
    if (rc == 0) {
        sgd_momentum(m->params, m->mom, m->grad, m->n, denom, o->lr, o->momentum);
        rc = state_write(m);
    }
    published_busy = 0;
    return rc;
}

int model_flip_bit(model *m, int bit, size_t *index, float *before, float *after)
{
    int rc = state_read(m, 0); /* the parameters as they are where they live */
    if (rc != 0) return rc;
    size_t i = m->n / 3;
    while (i < m->n && !(fabsf(m->params[i]) >= 1e-3f)) i++;
    if (i == m->n) return FTRT_EINVAL;
    uint32_t u;
    memcpy(&u, &m->params[i], sizeof u);
    u ^= (uint32_t)1 << bit;
    float v;
    memcpy(&v, &u, sizeof v);
    *index = i;
    *before = m->params[i];
    *after = v;
    if (!m->dev) {
        m->params[i] = v; /* host mode: the host copy is the state */
        return 0;
    }
    return m->dev->write(m->dparams + i, &v, sizeof v); /* the device copy only */
}

/* Allocates the model and writes every page (initial weights, zero momentum), so that a hot
 * spare that is promoted only receives state: done before ftrt_init() on every rank that may
 * train. Returns 0 or -1 (said on stderr). */
int model_alloc(model *m, const options *o)
{
    const size_t hidden = o->hidden, n = mlp_param_count(hidden);
    memset(m, 0, sizeof *m);
    m->ftrt_mem = o->ftrt_alloc;
    m->params = alloc_floats(n, "parameters", hidden, m->ftrt_mem);
    m->mom = m->params ? alloc_floats(n, "momentum buffer", hidden, m->ftrt_mem) : NULL;
    m->grad = m->mom ? alloc_floats(n + 1, "gradient buffer", hidden, 0) : NULL;
    if (!m->grad) goto fail;
    m->idx = malloc(o->batch * sizeof *m->idx);
    if (!m->idx || mlp_work_alloc(&m->w, o->batch, hidden) < 0) {
        fprintf(stderr, "train_mlp: cannot allocate the activations (--batch %zu, --hidden %zu)\n",
                o->batch, hidden);
        goto fail;
    }
    mlp_init(m->params, hidden, o->seed);
    memset(m->mom, 0, n * sizeof *m->mom);
    memset(m->grad, 0, (n + 1) * sizeof *m->grad);
    m->n = n;
    if (o->device != MLP_DEVICE_HOST && model_alloc_device(m, o->device) < 0) goto fail;
    return 0;
fail:
    model_free(m);
    return -1;
}
