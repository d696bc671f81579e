/*
 * mlp_model.c - the model and the data step of examples/train_mlp, in plain C on the host.
 *
 * Model: 64 -> H (ReLU) -> 10, softmax cross-entropy, momentum SGD. All parameters live in one
 * float32 array laid out as W1[H][64], b1[H], W2[10][H], b2[10] (75 H + 10 floats); the
 * momentum buffer is a second array of the same size.
 *
 * Determinism: logical rank r's minibatch at step s is a pure function of (seed, s, r) (a
 * splitmix64 generator); every rank computes the gradient sum over its minibatch in a fixed
 * order in float32 (activations feature-major, one accumulator per sample: vectorizable
 * without reassociating a sum), and the update is applied element by element. With ftrt's
 * bitwise deterministic allreduce, a run that survives failures ends with bitwise the same
 * parameters as an undisturbed one (examples/train_mlp.c says how the loop keeps that).
 * examples/train_torch.py repeats the minibatch rule.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlp_model.h"

#define IN DIGITS_FEATURES  /* 64 inputs */
#define OUT DIGITS_CLASSES  /* 10 outputs */

/* ---- deterministic random numbers (splitmix64) and the minibatch ---- */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t *state)
{
    return mix64(*state += 0x9e3779b97f4a7c15ull);
}

/* Uniform float in [-1, 1) with 24 random bits (exact in float32). */
static float uniform_pm1(uint64_t *state)
{
    return (float)(splitmix64(state) >> 40) * 0x1p-23f - 1.0f;
}

/* The minibatch of logical rank `rank` at step `step`: `batch` indices drawn uniformly (with
 * replacement) from [0, n_train) by a generator seeded with a hash of (seed, step, rank). */
void minibatch_indices(uint64_t seed, int64_t step, int rank, size_t n_train, uint32_t *idx,
                       size_t batch)
{
    uint64_t s = mix64(seed ^ 0x6d696e6962617463ull);
    s = mix64(s ^ (uint64_t)step);
    s = mix64(s + 0x9e3779b97f4a7c15ull * ((uint64_t)(uint32_t)rank + 1));
    for (size_t b = 0; b < batch; b++)
        idx[b] = (uint32_t)(((splitmix64(&s) >> 32) * (uint64_t)n_train) >> 32);
}

/* ---- the model ---- */

/* Number of floats in the parameter array for H hidden units: W1 + b1 + W2 + b2. */
size_t mlp_param_count(size_t hidden)
{
    return hidden * IN + hidden + OUT * hidden + OUT;
}

/* Views of one parameter-shaped array (parameters or gradients). */
typedef struct mlp_view {
    float *w1; /* [H][IN] */
    float *b1; /* [H] */
    float *w2; /* [OUT][H] */
    float *b2; /* [OUT] */
} mlp_view;

static mlp_view mlp_view_of(float *base, size_t hidden)
{
    mlp_view v;
    v.w1 = base;
    v.b1 = v.w1 + hidden * IN;
    v.w2 = v.b1 + hidden;
    v.b2 = v.w2 + OUT * hidden;
    return v;
}

/* Initial parameters from `seed`: W1 He-uniform (limit sqrt(6/64)), W2 Glorot-uniform (limit
 * sqrt(6/(H+10))), biases zero. A pure function of (seed, hidden). */
void mlp_init(float *params, size_t hidden, uint64_t seed)
{
    mlp_view p = mlp_view_of(params, hidden);
    uint64_t s = mix64(seed ^ 0x696e69745f6d6c70ull);
    const float a1 = sqrtf(6.0f / (float)IN);
    const float a2 = sqrtf(6.0f / (float)(hidden + OUT));
    for (size_t i = 0; i < hidden * IN; i++) p.w1[i] = a1 * uniform_pm1(&s);
    memset(p.b1, 0, hidden * sizeof *p.b1);
    for (size_t i = 0; i < OUT * hidden; i++) p.w2[i] = a2 * uniform_pm1(&s);
    memset(p.b2, 0, OUT * sizeof *p.b2);
}

void mlp_work_free(mlp_work *w)
{
    free(w->x);
    free(w->xt);
    free(w->h);
    free(w->zt);
    free(w->dh);
    free(w->y);
    memset(w, 0, sizeof *w);
}

int mlp_work_alloc(mlp_work *w, size_t cap, size_t hidden)
{
    memset(w, 0, sizeof *w);
    w->cap = cap;
    w->hidden = hidden;
    w->x = malloc(cap * IN * sizeof *w->x);
    w->xt = malloc(cap * IN * sizeof *w->xt);
    w->h = malloc(hidden * cap * sizeof *w->h);
    w->zt = malloc(OUT * cap * sizeof *w->zt);
    w->dh = malloc(cap * sizeof *w->dh);
    w->y = malloc(cap * sizeof *w->y);
    if (!w->x || !w->xt || !w->h || !w->zt || !w->dh || !w->y) {
        mlp_work_free(w);
        return -ENOMEM;
    }
    return 0;
}

/* Copies nb samples into the work buffers: d's rows idx[0..nb) or, with idx NULL, rows
 * first..first+nb. */
static void mlp_load_batch(mlp_work *w, const digits *d, const uint32_t *idx, size_t first,
                           size_t nb)
{
    for (size_t b = 0; b < nb; b++) {
        size_t row = idx ? idx[b] : first + b;
        const float *src = d->x + row * IN;
        memcpy(w->x + b * IN, src, IN * sizeof *src);
        for (size_t i = 0; i < IN; i++) w->xt[i * nb + b] = src[i];
        w->y[b] = d->y[row];
    }
}

/* 1 when the caller's poll (mlp_work) asks to stop after hidden unit j; with `polling` 0 (or no
 * poll set) never. */
static int mlp_stop(mlp_work *w, int polling, size_t j)
{
    if (!polling || !w->poll || !w->poll_units || (j + 1) % w->poll_units) return 0;
    w->stopped = w->poll(w->poll_arg);
    return w->stopped != 0;
}

/* Forward pass of the loaded batch: fills w->h and the logits w->zt. polling: may stop early
 * (mlp_stop). */
static void mlp_forward(const float *params, mlp_work *w, size_t nb, int polling)
{
    const size_t hidden = w->hidden;
    mlp_view p = mlp_view_of((float *)params, hidden);
    for (size_t k = 0; k < OUT; k++)
        for (size_t b = 0; b < nb; b++) w->zt[k * nb + b] = p.b2[k];
    for (size_t j = 0; j < hidden; j++) {
        const float *wj = p.w1 + j * IN;
        float *hj = w->h + j * nb;
        for (size_t b = 0; b < nb; b++) hj[b] = p.b1[j];
        for (size_t i = 0; i < IN; i++) {
            const float wi = wj[i];
            const float *xi = w->xt + i * nb;
            for (size_t b = 0; b < nb; b++) hj[b] += wi * xi[b];
        }
        for (size_t b = 0; b < nb; b++) hj[b] = hj[b] > 0.0f ? hj[b] : 0.0f;
        for (size_t k = 0; k < OUT; k++) {
            const float wk = p.w2[k * hidden + j];
            float *zk = w->zt + k * nb;
            for (size_t b = 0; b < nb; b++) zk[b] += wk * hj[b];
        }
        if (mlp_stop(w, polling, j)) return;
    }
}

/* Softmax cross-entropy of the logits in w->zt against w->y. Replaces the logits with
 * d loss / d logits (softmax - one-hot) and returns the loss summed over the batch. */
static float mlp_softmax_xent(mlp_work *w, size_t nb)
{
    float loss = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const size_t y = w->y[b];
        float z[OUT], m = w->zt[b];
        for (size_t k = 0; k < OUT; k++) {
            z[k] = w->zt[k * nb + b];
            if (z[k] > m) m = z[k];
        }
        const float zy = z[y] - m;
        float sum = 0.0f;
        for (size_t k = 0; k < OUT; k++) {
            z[k] = expf(z[k] - m);
            sum += z[k];
        }
        loss += logf(sum) - zy; /* -log softmax_y, stable for any logits */
        for (size_t k = 0; k < OUT; k++)
            w->zt[k * nb + b] = z[k] / sum - (k == y ? 1.0f : 0.0f);
    }
    return loss;
}

/* Backward pass: writes into `grad` (parameter-shaped) the gradient of the summed loss, given
 * w->h from mlp_forward() and d loss / d logits in w->zt. May stop early (mlp_stop). */
static void mlp_backward(const float *params, mlp_work *w, size_t nb, float *grad)
{
    const size_t hidden = w->hidden;
    mlp_view p = mlp_view_of((float *)params, hidden);
    mlp_view g = mlp_view_of(grad, hidden);
    for (size_t k = 0; k < OUT; k++) {
        float s = 0.0f;
        for (size_t b = 0; b < nb; b++) s += w->zt[k * nb + b];
        g.b2[k] = s;
    }
    for (size_t j = 0; j < hidden; j++) {
        const float *hj = w->h + j * nb;
        for (size_t b = 0; b < nb; b++) w->dh[b] = 0.0f;
        for (size_t k = 0; k < OUT; k++) {
            const float *dzk = w->zt + k * nb;
            float s = 0.0f;
            for (size_t b = 0; b < nb; b++) s += dzk[b] * hj[b];
            g.w2[k * hidden + j] = s;
            const float wk = p.w2[k * hidden + j];
            for (size_t b = 0; b < nb; b++) w->dh[b] += wk * dzk[b];
        }
        float sb = 0.0f;
        for (size_t b = 0; b < nb; b++) {
            if (!(hj[b] > 0.0f)) w->dh[b] = 0.0f;
            sb += w->dh[b];
        }
        g.b1[j] = sb;
        float *gj = g.w1 + j * IN;
        for (size_t i = 0; i < IN; i++) gj[i] = 0.0f;
        for (size_t b = 0; b < nb; b++) {
            const float d = w->dh[b];
            if (d == 0.0f) continue; /* inactive unit: adds nothing */
            const float *xb = w->x + b * IN;
            for (size_t i = 0; i < IN; i++) gj[i] += d * xb[i];
        }
        if (mlp_stop(w, 1, j)) return;
    }
}

/* The gradient SUM over the minibatch idx[0..nb) of `train` into `grad` (parameter-shaped);
 * returns the summed loss. nb <= w->cap. */
float mlp_grad_sum(const float *params, mlp_work *w, const digits *train, const uint32_t *idx,
                   size_t nb, float *grad)
{
    w->stopped = 0;
    mlp_load_batch(w, train, idx, 0, nb);
    mlp_forward(params, w, nb, 1);
    if (w->stopped) return 0.0f;
    float loss = mlp_softmax_xent(w, nb);
    mlp_backward(params, w, nb, grad);
    return loss;
}

/* Momentum SGD on n parameters with the mean gradient grad_sum / denom:
 * v = mu * v + g; w -= lr * v. */
void sgd_momentum(float *params, float *mom, const float *grad_sum, size_t n, float denom,
                  float lr, float mu)
{
    for (size_t i = 0; i < n; i++) {
        const float g = grad_sum[i] / denom;
        mom[i] = mu * mom[i] + g;
        params[i] -= lr * mom[i];
    }
}

/* Number of correctly classified images of `set` (argmax of the logits, lowest class on ties). */
size_t mlp_correct(const float *params, mlp_work *w, const digits *set)
{
    size_t correct = 0;
    for (size_t first = 0; first < set->n; first += w->cap) {
        size_t nb = set->n - first < w->cap ? set->n - first : w->cap;
        mlp_load_batch(w, set, NULL, first, nb);
        mlp_forward(params, w, nb, 0);
        for (size_t b = 0; b < nb; b++) {
            size_t best = 0;
            for (size_t k = 1; k < OUT; k++)
                if (w->zt[k * nb + b] > w->zt[best * nb + b]) best = k;
            correct += best == w->y[b];
        }
    }
    return correct;
}

/* FNV-1a 64 of the parameters' little-endian float32 bytes (the --params-out file's bytes). */
uint64_t params_fnv1a64(const float *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &p[i], sizeof u);
        for (int k = 0; k < 4; k++) {
            h ^= (u >> (8 * k)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

