/*
 * mlp_model.h - the model and the data step of examples/train_mlp: a 64 -> H (ReLU) -> 10
 * multilayer perceptron with softmax cross-entropy and momentum SGD on one float32 array, and
 * the deterministic minibatch of a logical rank at a step (examples/mlp_model.c). Pure
 * computation on host memory: nothing here knows ftrt or MPI.
 */
#ifndef FTRT_EXAMPLE_MLP_MODEL_H
#define FTRT_EXAMPLE_MLP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "digits.h"

/*
 * Scratch space for a batch of up to `cap` samples. Activations are stored feature-major
 * ([feature][sample]) so that the inner loops run over samples with one accumulator per
 * sample: the compiler can vectorize them without reassociating any sum, which keeps every
 * result bitwise independent of the vector width.
 */
typedef struct mlp_work {
    size_t cap;    /* samples */
    size_t hidden; /* H */
    float *x;      /* [cap][64]  inputs, sample-major */
    float *xt;     /* [64][cap]  inputs, feature-major */
    float *h;      /* [H][cap]   hidden activations after ReLU */
    float *zt;     /* [10][cap]  logits, then d loss / d logits */
    float *dh;     /* [cap]      d loss / d hidden pre-activation, one unit at a time */
    uint8_t *y;    /* [cap]      labels */
    /* Optional, set by the caller (mlp_work_alloc leaves them 0): mlp_grad_sum calls poll(arg)
     * after every poll_units hidden units of its forward and backward passes (0: never); a
     * nonzero return stops the passes and is left in `stopped` (0 when it ran to the end). The
     * arithmetic is the same whether it polls or not. */
    int (*poll)(void *arg);
    void *poll_arg;
    size_t poll_units;
    int stopped;
} mlp_work;

/* The minibatch of logical rank `rank` at step `step`: `batch` indices drawn uniformly (with
 * replacement) from [0, n_train) into idx, a pure function of (seed, step, rank). */
void minibatch_indices(uint64_t seed, int64_t step, int rank, size_t n_train, uint32_t *idx,
                       size_t batch);

/* Number of floats in the parameter array for H hidden units: 75 H + 10. */
size_t mlp_param_count(size_t hidden);

/* Writes the initial parameters (mlp_param_count(hidden) floats), a pure function of
 * (seed, hidden). */
void mlp_init(float *params, size_t hidden, uint64_t seed);

/* Scratch space for batches of up to cap samples; 0 or -ENOMEM (nothing left allocated).
 * mlp_work_free() frees it and zeroes *w (also a zeroed one). */
int mlp_work_alloc(mlp_work *w, size_t cap, size_t hidden);
void mlp_work_free(mlp_work *w);

/* The gradient SUM over the minibatch idx[0..nb) of `train` into `grad` (parameter-shaped);
 * returns the summed loss. nb <= w->cap. When w->poll stopped it (w->stopped != 0), grad and
 * the loss are partial: discard them. */
float mlp_grad_sum(const float *params, mlp_work *w, const digits *train, const uint32_t *idx,
                   size_t nb, float *grad);

/* Momentum SGD on n parameters with the mean gradient grad_sum / denom:
 * v = mu * v + g; w -= lr * v. */
void sgd_momentum(float *params, float *mom, const float *grad_sum, size_t n, float denom,
                  float lr, float mu);

/* Number of correctly classified images of `set` (argmax of the logits, lowest class on ties). */
size_t mlp_correct(const float *params, mlp_work *w, const digits *set);

/* FNV-1a 64 of the parameters' little-endian float32 bytes (the --params-out file's bytes). */
uint64_t params_fnv1a64(const float *p, size_t n);

#endif
