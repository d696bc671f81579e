/*
 * train_mlp.c - data-parallel training of a multilayer perceptron on the UCI handwritten
 * digits, kept alive through rank failures by ftrt. The main example of the runtime.
 *
 *   mpirun --enable-recovery -np 6 ./train_mlp --steps 300 --ckpt-dir /tmp/ckpt
 *   (world rank 0: coordinator; 1..4: trainers; 5: hot spare)
 *
 * Model: 64 -> H (ReLU) -> 10, softmax cross-entropy, momentum SGD. All parameters live in one
 * float32 array laid out as W1[H][64], b1[H], W2[10][H], b2[10] (75 H + 10 floats); the
 * momentum buffer is a second array of the same size. Both are registered with ftrt as
 * REPLICATED regions, so a recovery or a restart restores them exactly.
 *
 * With --device sim the two arrays live in device memory of ftrt's simulated device
 * (include/ftrt_sim.h: a test arrangement, no GPU; the job runs with FTRT_TEST_SIM_DEVICE=1)
 * and are registered as FTRT_REGION_DEVICE regions: ftrt reaches them only through its device
 * backend. The example computes on host copies, as a GPU program would with kernels: each
 * step reads the parameters from the device for the forward and backward pass, and the update
 * reads parameters and momentum again, applies momentum SGD and writes both back. So the
 * device holds the state between steps, and a bit flipped there stays until the next update
 * reads it. The arithmetic is the same as on the host: the final parameters are too.
 *
 * Determinism: logical rank r's minibatch at step s is a pure function of (seed, s, r); every
 * rank computes the gradient sum over its minibatch in a fixed order in float32, ftrt's
 * allreduce is bitwise deterministic for a fixed number of trainers, and the update is applied
 * element by element. So a run that survives failures (or is restarted from a checkpoint) ends
 * with bitwise the same parameters as an undisturbed run with the same flags and trainer count.
 *
 * The training loop follows the contract of include/ftrt.h: FTRT_ERECOVER from any collective
 * call means "call ftrt_recover() and continue at the step it returns".
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "digits.h"
#include "ftrt.h"
#include "ftrt_sim.h"

#define IN DIGITS_FEATURES  /* 64 inputs */
#define OUT DIGITS_CLASSES  /* 10 outputs */
#define TEST_FRACTION 0.2   /* held-out share of the data set */
#define SPLIT_SEED 0x6469676974735f31ull /* fixed: the split never depends on --seed */
#define PROGRESS_EVERY 100  /* steps between progress lines */
#define HIDDEN_MAX (1ull << 31)
#define BATCH_MAX (1ull << 20)

/* ------------------------------------------------------------------------------------------ */
/* Command line                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef struct options {
    int64_t steps;       /* total optimizer steps */
    size_t batch;        /* minibatch per logical rank */
    size_t hidden;       /* hidden units H */
    float lr;            /* learning rate */
    float momentum;      /* SGD momentum mu */
    uint64_t seed;       /* initial weights and minibatch sampling */
    int64_t ckpt_every;  /* steps between checkpoints; 0 = never */
    int64_t sleep_ms;    /* sleep after each step */
    int64_t hang_step;   /* fault injection: logical rank hang_rank spins in its own code... */
    int64_t hang_rank;   /* ...from step hang_step on, in epoch 0 only (-1 = off) */
    int64_t error_step;  /* fault injection: logical rank error_rank stops at error_step with an */
    int64_t error_rank;  /* application error (ftrt_set_exit_code), -1 = off */
    int64_t hold_step[8]; /* timing knob: logical rank 0 sleeps hold_ms the first time it */
    int nhold;            /* reaches each of these steps (a fault lands mid-interval) */
    int64_t hold_ms;
    int64_t slow_rank;   /* straggler injection: this logical rank computes slow_ms longer */
    int64_t slow_ms;
    const char *ckpt_dir;   /* NULL = ftrt's default (FTRT_CKPT_DIR or "ftrt-ckpt") */
    const char *report;     /* NULL = ftrt's default (FTRT_REPORT) */
    const char *params_out; /* NULL = do not write */
    const char *data;       /* data set path */
    const char *step_log;   /* append "<logical rank> <step> <epoch>" per completed step */
    const char *publish;    /* test hook: write "<pid> <params address> <bytes> <steps address>"
                               to <publish>.w<world rank> (tools/ftrt-chaos flip-bit) */
    int sharded_momentum;   /* register the momentum buffer SHARDED (recovery from checkpoint) */
    int device_sim;         /* --device sim: state in the simulated device's memory */
} options;

static void usage(FILE *f)
{
    fputs("usage: train_mlp [options]   (launched by mpirun; see README.md)\n"
          "Data-parallel MLP training on the UCI handwritten digits, fault tolerant via ftrt.\n"
          "\n"
          "  --steps N          optimizer steps (default 300)\n"
          "  --batch B          minibatch per trainer (default 32)\n"
          "  --hidden H         hidden units (default 64); parameters = 75*H + 10 floats\n"
          "  --lr X             learning rate (default 0.05)\n"
          "  --momentum X       SGD momentum in [0, 1) (default 0.9)\n"
          "  --seed S           seed of the initial weights and minibatches (default 1)\n"
          "  --ckpt-every K     checkpoint every K steps, 0 = never (default 50)\n"
          "  --ckpt-dir DIR     checkpoint directory (default ftrt-ckpt, or FTRT_CKPT_DIR)\n"
          "  --params-out FILE  write the final parameters as raw little-endian float32\n"
          "  --report FILE      JSON report of the job (written by the coordinator)\n"
          "  --data PATH        digits CSV (gzip); default " DIGITS_DEFAULT_PATH "\n"
          "  --step-sleep-ms M  sleep M ms after each step (default 0; for fault tests)\n"
          "  --hang-rank R --hang-at-step S\n"
          "                     fault injection: logical rank R gets stuck in its own code at step\n"
          "                     S (first epoch only, so its replacement does not), default off\n"
          "  --error-rank R --error-at-step S\n"
          "                     fault injection: logical rank R stops at step S with an application\n"
          "                     error (ftrt_set_exit_code): the job must end as failed\n"
          "  --hold-at-step S [--hold-ms M]\n"
          "                     timing knob (repeatable, up to 8): logical rank 0 sleeps M ms (1000)\n"
          "                     the first time it reaches step S, so that a fault injected then\n"
          "                     lands between checkpoints\n"
          "  --slow-rank R --slow-ms M\n"
          "                     straggler injection: logical rank R computes M ms longer per step\n"
          "  --step-log FILE    append \"<logical rank> <step> <epoch>\" for every completed step\n"
          "                     (ground truth of rework for tests)\n"
          "  --publish-addr P   test hook: each trainer writes \"<pid> <params address> <bytes>\n"
          "                     <steps-done address>\" (hex addresses) to P.w<world rank>, for\n"
          "                     an injector that flips a bit in its memory (ftrt-chaos flip-bit)\n"
          "  --sharded-momentum register the momentum buffer SHARDED: recoveries then reload the\n"
          "                     last committed checkpoint (exercises that path; same results)\n"
          "  --device D         where parameters and momentum live: host (default) or sim, the\n"
          "                     simulated device of ftrt_sim.h (a test arrangement: run the job\n"
          "                     with FTRT_TEST_SIM_DEVICE=1); same results\n"
          "  --help             this text\n",
          f);
}

static int bad_value(const char *flag, const char *want, const char *got)
{
    fprintf(stderr, "train_mlp: --%s: expected %s, got '%s' (see train_mlp --help)\n", flag, want,
            got);
    return -1;
}

static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) {
        char want[96];
        snprintf(want, sizeof want, "an integer in [%" PRId64 ", %" PRId64 "]", lo, hi);
        return bad_value(flag, want, s);
    }
    *out = (int64_t)v;
    return 0;
}

static int parse_size(const char *flag, const char *s, size_t lo, size_t hi, size_t *out)
{
    int64_t v;
    if (parse_i64(flag, s, (int64_t)lo, (int64_t)hi, &v) < 0) return -1;
    *out = (size_t)v;
    return 0;
}

static int parse_u64(const char *flag, const char *s, uint64_t *out)
{
    const char *p = s;
    while (*p == ' ' || *p == '\t') p++;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 0);
    if (*p < '0' || *p > '9' || end == p || *end != '\0' || errno != 0)
        return bad_value(flag, "an unsigned 64-bit integer (decimal or 0x hex)", s);
    *out = (uint64_t)v;
    return 0;
}

/* lo <= value < hi, or lo < value < hi when lo_open. */
static int parse_float(const char *flag, const char *s, double lo, int lo_open, double hi,
                       const char *want, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v) || v < lo || (lo_open && v == lo)
        || v >= hi)
        return bad_value(flag, want, s);
    *out = (float)v;
    return 0;
}

static int parse_path(const char *flag, const char *s, size_t cap, const char **out)
{
    if (s[0] == '\0' || strlen(s) >= cap) {
        char want[64];
        snprintf(want, sizeof want, "a path of 1..%zu bytes", cap - 1);
        return bad_value(flag, want, s);
    }
    *out = s;
    return 0;
}

enum {
    OPT_STEPS = 256, OPT_BATCH, OPT_HIDDEN, OPT_LR, OPT_MOMENTUM, OPT_SEED, OPT_CKPT_EVERY,
    OPT_CKPT_DIR, OPT_PARAMS_OUT, OPT_REPORT, OPT_DATA, OPT_SLEEP, OPT_HANG_RANK, OPT_HANG_STEP,
    OPT_SLOW_RANK, OPT_SLOW_MS, OPT_STEP_LOG, OPT_SHARDED_MOMENTUM, OPT_ERROR_RANK,
    OPT_ERROR_STEP, OPT_HOLD_STEP, OPT_HOLD_MS, OPT_PUBLISH, OPT_DEVICE, OPT_HELP = 'h'
};

/* Returns 0 (run), 1 (--help printed: exit 0) or -1 (message printed: exit 2). */
static int parse_options(int argc, char **argv, options *o)
{
    static const struct option longopts[] = {
        {"steps", required_argument, NULL, OPT_STEPS},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"hidden", required_argument, NULL, OPT_HIDDEN},
        {"lr", required_argument, NULL, OPT_LR},
        {"momentum", required_argument, NULL, OPT_MOMENTUM},
        {"seed", required_argument, NULL, OPT_SEED},
        {"ckpt-every", required_argument, NULL, OPT_CKPT_EVERY},
        {"ckpt-dir", required_argument, NULL, OPT_CKPT_DIR},
        {"params-out", required_argument, NULL, OPT_PARAMS_OUT},
        {"report", required_argument, NULL, OPT_REPORT},
        {"data", required_argument, NULL, OPT_DATA},
        {"step-sleep-ms", required_argument, NULL, OPT_SLEEP},
        {"hang-rank", required_argument, NULL, OPT_HANG_RANK},
        {"hang-at-step", required_argument, NULL, OPT_HANG_STEP},
        {"slow-rank", required_argument, NULL, OPT_SLOW_RANK},
        {"slow-ms", required_argument, NULL, OPT_SLOW_MS},
        {"step-log", required_argument, NULL, OPT_STEP_LOG},
        {"sharded-momentum", no_argument, NULL, OPT_SHARDED_MOMENTUM},
        {"error-rank", required_argument, NULL, OPT_ERROR_RANK},
        {"error-at-step", required_argument, NULL, OPT_ERROR_STEP},
        {"hold-at-step", required_argument, NULL, OPT_HOLD_STEP},
        {"hold-ms", required_argument, NULL, OPT_HOLD_MS},
        {"publish-addr", required_argument, NULL, OPT_PUBLISH},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    const size_t dir_cap = sizeof(((ftrt_config *)0)->ckpt_dir);
    const size_t report_cap = sizeof(((ftrt_config *)0)->report_file);
    *o = (options){.steps = 300, .batch = 32, .hidden = 64, .lr = 0.05f, .momentum = 0.9f,
                   .seed = 1, .ckpt_every = 50, .data = DIGITS_DEFAULT_PATH, .hang_step = -1,
                   .hang_rank = -1, .slow_rank = -1, .error_step = -1, .error_rank = -1, .hold_ms = 1000};
    int c, rc = 0;
    opterr = 0; /* one line of our own for an unknown option or a missing value */
    while (rc == 0 && (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_STEPS: rc = parse_i64("steps", optarg, 0, INT64_MAX / 2, &o->steps); break;
        case OPT_BATCH: rc = parse_size("batch", optarg, 1, BATCH_MAX, &o->batch); break;
        case OPT_HIDDEN: rc = parse_size("hidden", optarg, 1, HIDDEN_MAX, &o->hidden); break;
        case OPT_LR:
            rc = parse_float("lr", optarg, 0.0, 1, 1e6, "a number in (0, 1e6)", &o->lr);
            break;
        case OPT_MOMENTUM:
            rc = parse_float("momentum", optarg, 0.0, 0, 1.0, "a number in [0, 1)", &o->momentum);
            break;
        case OPT_SEED: rc = parse_u64("seed", optarg, &o->seed); break;
        case OPT_CKPT_EVERY:
            rc = parse_i64("ckpt-every", optarg, 0, INT64_MAX / 2, &o->ckpt_every);
            break;
        case OPT_CKPT_DIR: rc = parse_path("ckpt-dir", optarg, dir_cap, &o->ckpt_dir); break;
        case OPT_REPORT: rc = parse_path("report", optarg, report_cap, &o->report); break;
        case OPT_PARAMS_OUT: rc = parse_path("params-out", optarg, 4096, &o->params_out); break;
        case OPT_DATA: rc = parse_path("data", optarg, 4096, &o->data); break;
        case OPT_SLEEP: rc = parse_i64("step-sleep-ms", optarg, 0, 3600000, &o->sleep_ms); break;
        case OPT_HANG_RANK: rc = parse_i64("hang-rank", optarg, 0, 1 << 20, &o->hang_rank); break;
        case OPT_HANG_STEP:
            rc = parse_i64("hang-at-step", optarg, 0, INT64_MAX / 2, &o->hang_step);
            break;
        case OPT_SLOW_RANK: rc = parse_i64("slow-rank", optarg, 0, 1 << 20, &o->slow_rank); break;
        case OPT_SLOW_MS: rc = parse_i64("slow-ms", optarg, 0, 3600000, &o->slow_ms); break;
        case OPT_STEP_LOG: rc = parse_path("step-log", optarg, 4096, &o->step_log); break;
        case OPT_SHARDED_MOMENTUM: o->sharded_momentum = 1; break;
        case OPT_ERROR_RANK: rc = parse_i64("error-rank", optarg, 0, 1 << 20, &o->error_rank); break;
        case OPT_HOLD_STEP:
            if (o->nhold == 8) {
                fprintf(stderr, "train_mlp: --hold-at-step: at most 8 of them\n");
                return -1;
            }
            rc = parse_i64("hold-at-step", optarg, 0, INT64_MAX / 2, &o->hold_step[o->nhold++]);
            break;
        case OPT_HOLD_MS: rc = parse_i64("hold-ms", optarg, 0, 3600000, &o->hold_ms); break;
        case OPT_PUBLISH: rc = parse_path("publish-addr", optarg, 4000, &o->publish); break;
        case OPT_DEVICE:
            if (strcmp(optarg, "host") == 0) o->device_sim = 0;
            else if (strcmp(optarg, "sim") == 0) o->device_sim = 1;
            else rc = bad_value("device", "host or sim", optarg);
            break;
        case OPT_ERROR_STEP:
            rc = parse_i64("error-at-step", optarg, 0, INT64_MAX / 2, &o->error_step);
            break;
        case OPT_HELP: usage(stdout); return 1;
        case ':':
            fprintf(stderr, "train_mlp: %s needs a value (see train_mlp --help)\n",
                    argv[optind - 1]);
            rc = -1;
            break;
        default:
            fprintf(stderr, "train_mlp: unknown option '%s' (see train_mlp --help)\n",
                    argv[optind - 1]);
            rc = -1;
            break;
        }
    }
    if (rc == 0 && optind < argc) {
        fprintf(stderr, "train_mlp: unexpected argument '%s' (see train_mlp --help)\n",
                argv[optind]);
        rc = -1;
    }
    return rc;
}

/* The nearest existing path among path and its ancestors is a directory (is_dir) or, for a
 * file to be written, path is not a directory and its nearest existing ancestor is one. Else a
 * one-line message naming the option, printed by world rank 0 only (or when not under mpirun):
 * every rank stops at once, before joining the job. Returns 0 or -1. */
static int check_path(const char *flag, const char *path, int is_dir)
{
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s", path);
    int self = 1;
    while (stat(p, &st) != 0) {
        char *slash = strrchr(p, '/');
        if (!slash) {
            snprintf(p, sizeof p, ".");
        } else if (slash == p) {
            p[1] = '\0';
        } else {
            *slash = '\0';
        }
        self = 0;
    }
    const char *why = NULL;
    if (!S_ISDIR(st.st_mode) && (is_dir || !self)) why = "is not a directory";
    else if (S_ISDIR(st.st_mode) && self && !is_dir) why = "is a directory";
    if (!why) return 0;
    const char *wr = getenv("OMPI_COMM_WORLD_RANK");
    if (!wr || strcmp(wr, "0") == 0) {
        if (self) fprintf(stderr, "train_mlp: --%s %s: %s\n", flag, path, why);
        else fprintf(stderr, "train_mlp: --%s %s: %s %s\n", flag, path, p, why);
    }
    return -1;
}

static int check_paths(const options *o)
{
    if (o->ckpt_dir && check_path("ckpt-dir", o->ckpt_dir, 1) < 0) return -1;
    if (o->params_out && check_path("params-out", o->params_out, 0) < 0) return -1;
    if (o->report && check_path("report", o->report, 0) < 0) return -1;
    if (o->step_log && check_path("step-log", o->step_log, 0) < 0) return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Deterministic random numbers (splitmix64)                                                   */
/* ------------------------------------------------------------------------------------------ */

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
static void minibatch_indices(uint64_t seed, int64_t step, int rank, size_t n_train,
                              uint32_t *idx, size_t batch)
{
    uint64_t s = mix64(seed ^ 0x6d696e6962617463ull);
    s = mix64(s ^ (uint64_t)step);
    s = mix64(s + 0x9e3779b97f4a7c15ull * ((uint64_t)(uint32_t)rank + 1));
    for (size_t b = 0; b < batch; b++)
        idx[b] = (uint32_t)(((splitmix64(&s) >> 32) * (uint64_t)n_train) >> 32);
}

/* ------------------------------------------------------------------------------------------ */
/* The model                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Number of floats in the parameter array for H hidden units: W1 + b1 + W2 + b2. */
static size_t mlp_param_count(size_t hidden)
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
static void mlp_init(float *params, size_t hidden, uint64_t seed)
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

/*
 * Scratch space for a batch of up to `cap` samples. Activations are stored feature-major
 * ([feature][sample]) so that the inner loops run over samples with one accumulator per
 * sample: the compiler can vectorize them without reassociating any sum, which keeps every
 * result bitwise independent of the vector width.
 */
typedef struct mlp_work {
    size_t cap;    /* samples */
    size_t hidden; /* H */
    float *x;      /* [cap][IN]  inputs, sample-major */
    float *xt;     /* [IN][cap]  inputs, feature-major */
    float *h;      /* [H][cap]   hidden activations after ReLU */
    float *zt;     /* [OUT][cap] logits, then d loss / d logits */
    float *dh;     /* [cap]      d loss / d hidden pre-activation, one unit at a time */
    uint8_t *y;    /* [cap]      labels */
} mlp_work;

static void mlp_work_free(mlp_work *w)
{
    free(w->x);
    free(w->xt);
    free(w->h);
    free(w->zt);
    free(w->dh);
    free(w->y);
    memset(w, 0, sizeof *w);
}

static int mlp_work_alloc(mlp_work *w, size_t cap, size_t hidden)
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

/* Forward pass of the loaded batch: fills w->h and the logits w->zt. */
static void mlp_forward(const float *params, mlp_work *w, size_t nb)
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
 * w->h from mlp_forward() and d loss / d logits in w->zt. */
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
    }
}

/* The gradient SUM over the minibatch idx[0..nb) of `train` into `grad` (parameter-shaped);
 * returns the summed loss. nb <= w->cap. */
static float mlp_grad_sum(const float *params, mlp_work *w, const digits *train,
                          const uint32_t *idx, size_t nb, float *grad)
{
    mlp_load_batch(w, train, idx, 0, nb);
    mlp_forward(params, w, nb);
    float loss = mlp_softmax_xent(w, nb);
    mlp_backward(params, w, nb, grad);
    return loss;
}

/* Momentum SGD on n parameters with the mean gradient grad_sum / denom:
 * v = mu * v + g; w -= lr * v. */
static void sgd_momentum(float *params, float *mom, const float *grad_sum, size_t n,
                         float denom, float lr, float mu)
{
    for (size_t i = 0; i < n; i++) {
        const float g = grad_sum[i] / denom;
        mom[i] = mu * mom[i] + g;
        params[i] -= lr * mom[i];
    }
}

/* Number of correctly classified images of `set` (argmax of the logits, lowest class on ties). */
static size_t mlp_correct(const float *params, mlp_work *w, const digits *set)
{
    size_t correct = 0;
    for (size_t first = 0; first < set->n; first += w->cap) {
        size_t nb = set->n - first < w->cap ? set->n - first : w->cap;
        mlp_load_batch(w, set, NULL, first, nb);
        mlp_forward(params, w, nb);
        for (size_t b = 0; b < nb; b++) {
            size_t best = 0;
            for (size_t k = 1; k < OUT; k++)
                if (w->zt[k * nb + b] > w->zt[best * nb + b]) best = k;
            correct += best == w->y[b];
        }
    }
    return correct;
}

/* ------------------------------------------------------------------------------------------ */
/* Output files                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* FNV-1a 64 of the parameters' little-endian float32 bytes (the --params-out file's bytes). */
static uint64_t params_fnv1a64(const float *p, size_t n)
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

/* Writes the parameters as raw little-endian float32 to `path` through a temporary file in the
 * same directory, fsynced and renamed over `path`. Returns 0 or -1 (message printed). */
static int write_params(const char *path, const float *p, size_t n)
{
    size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    if (!tmp) {
        fprintf(stderr, "train_mlp: --params-out: out of memory\n");
        return -1;
    }
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "train_mlp: cannot create %s: %s\n", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    unsigned char buf[1 << 16];
    size_t used = 0;
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        uint32_t u;
        memcpy(&u, &p[i], sizeof u);
        for (int k = 0; k < 4; k++) buf[used++] = (unsigned char)(u >> (8 * k));
        if (used == sizeof buf || i + 1 == n) {
            ok = fwrite(buf, 1, used, f) == used;
            used = 0;
        }
    }
    int e = errno;
    if (ok && (fflush(f) != 0 || fsync(fileno(f)) != 0)) ok = 0, e = errno;
    if (fclose(f) != 0 && ok) ok = 0, e = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, e = errno;
    if (!ok) {
        fprintf(stderr, "train_mlp: cannot write %s: %s\n", path, strerror(e));
        remove(tmp);
    }
    free(tmp);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Training under ftrt                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* Prints a fatal ftrt code in the documented form and where it came from; returns 1. */
static int fatal(ftrt_ctx *ctx, const char *call, int64_t step, int rc)
{
    if (rc < 0) ftrt_set_exit_code(ctx, rc); /* leaving with an error: the job is failed */
    fprintf(stderr, "train_mlp: %s (%s)\n", ftrt_strerror(rc), ftrt_err_name(rc));
    fprintf(stderr, "train_mlp: (from %s at step %" PRId64 ", logical rank %d, epoch %d)\n", call,
            step, ftrt_rank(ctx), ftrt_epoch(ctx));
    return 1;
}

/* After FTRT_ERECOVER: calls ftrt_recover() until the trainers are whole again. Returns 0
 * with *step set to the step to resume at, or the fatal code (FTRT_ENOSPARE, ...). */
static int recover_until_done(ftrt_ctx *ctx, int64_t *step)
{
    int rc;
    do {
        rc = ftrt_recover(ctx, step);
    } while (rc == FTRT_ERECOVER);
    if (rc != 0) return rc;
    if (*step < 0) return FTRT_EPROTO;
    if (ftrt_rank(ctx) == 0) {
        printf("recovered (epoch %d): resuming at step %" PRId64 "\n", ftrt_epoch(ctx), *step);
        fflush(stdout);
    }
    return 0;
}

static float *alloc_floats(size_t n, const char *what, size_t hidden)
{
    float *p = NULL;
    if (n <= SIZE_MAX / sizeof *p) p = malloc(n * sizeof *p);
    if (!p)
        fprintf(stderr,
                "train_mlp: cannot allocate the %s: %zu floats (%.1f MiB, --hidden %zu): %s\n",
                what, n, (double)n * sizeof *p / 1048576.0, hidden, strerror(ENOMEM));
    return p;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* This CPU's float32 FLOP/s on a cache-friendly 256x256 matmul (i-k-j order, which compilers
 * vectorize): the best of 3 runs. A rough, honest peak for eMFU on a CPU run. */
static double measured_peak_flops(void)
{
    enum { N = 256 };
    static float a[N * N], b[N * N], c[N * N];
    for (int i = 0; i < N * N; i++) {
        a[i] = (float)(i % 7) * 0.5f;
        b[i] = (float)(i % 5) * 0.25f;
    }
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        memset(c, 0, sizeof c);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < N; i++)
            for (int k = 0; k < N; k++) {
                const float aik = a[i * N + k];
                for (int j = 0; j < N; j++) c[i * N + j] += aik * b[k * N + j];
            }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        volatile float sink = c[N * N / 2];
        (void)sink;
        if (s > 0 && 2.0 * N * N * N / s > best) best = 2.0 * N * N * N / s;
    }
    return best;
}

/* Appends one line to the step log (O_APPEND: lines of several processes do not interleave). */
static void append_step_log(const char *path, int rank, int64_t step, int epoch)
{
    char line[96];
    int len = snprintf(line, sizeof line, "%d %" PRId64 " %d\n", rank, step, epoch);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return;
    if (write(fd, line, (size_t)len) != len) { /* best effort: a test's ground truth */ }
    close(fd);
}

/* Test hook (--publish-addr): the steps this trainer has done, as the training loop counts
 * them (set before each ftrt_step_done() and at every resume), at an address an injector
 * outside the process reads while the process is stopped. */
static volatile int64_t published_steps;
/* With --device sim: 1 while the update has read the state from the device and not yet
 * written it back (a bit flipped in device memory then would be overwritten: an injector that
 * finds it set lets the process go on and tries again). */
static volatile int32_t published_busy;

/* Writes "<pid> <params address> <bytes> <published_steps address>" and, with --device sim,
 * " <published_busy address>" (params then being the simulated device's memory) to
 * <prefix>.w<world rank> (temporary file, then rename). Returns 0 or -1 (message printed). */
static int publish_addresses(const char *prefix, ftrt_ctx *ctx, const float *params, size_t bytes,
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

/* The model's memory: parameters, momentum, gradient, activations, minibatch indices; with
 * --device sim also the device copies of parameters and momentum, which are then the state
 * (params and mom being the host copies the computation works on). */
typedef struct model {
    float *params, *mom, *grad;
    float *dparams, *dmom; /* simulated device memory, or NULL (--device host) */
    size_t n;              /* floats in params and mom */
    mlp_work w;
    uint32_t *idx;
} model;

static void model_free(model *m)
{
    mlp_work_free(&m->w);
    free(m->idx);
    free(m->grad);
    free(m->mom);
    free(m->params);
    ftrt_sim_free(m->dparams);
    ftrt_sim_free(m->dmom);
    memset(m, 0, sizeof *m);
}

/* --device sim: the state's device copies, allocated and set from the host copies. Returns 0
 * or -1 (said on stderr). */
static int model_alloc_device(model *m)
{
    size_t bytes = m->n * sizeof(float);
    int rc = ftrt_sim_alloc(bytes, (void **)&m->dparams);
    if (rc == 0) rc = ftrt_sim_alloc(bytes, (void **)&m->dmom);
    if (rc == 0) rc = ftrt_sim_write(m->dparams, m->params, bytes);
    if (rc == 0) rc = ftrt_sim_write(m->dmom, m->mom, bytes);
    if (rc != 0)
        fprintf(stderr, "train_mlp: --device sim: cannot set up %.1f MiB of simulated device "
                        "memory: %s (%s)\n", 2.0 * (double)bytes / 1048576.0, ftrt_strerror(rc),
                ftrt_err_name(rc));
    return rc == 0 ? 0 : -1;
}

/* --device sim: state_read copies the parameters (and, with mom, the momentum) from the
 * device into the host copies, state_write both back. Return 0 or an ftrt code; nothing to do
 * in host mode. */
static int state_read(model *m, int mom)
{
    if (!m->dparams) return 0;
    int rc = ftrt_sim_read(m->params, m->dparams, m->n * sizeof(float));
    if (rc == 0 && mom) rc = ftrt_sim_read(m->mom, m->dmom, m->n * sizeof(float));
    return rc;
}

static int state_write(model *m)
{
    if (!m->dparams) return 0;
    int rc = ftrt_sim_write(m->dparams, m->params, m->n * sizeof(float));
    if (rc == 0) rc = ftrt_sim_write(m->dmom, m->mom, m->n * sizeof(float));
    return rc;
}

/* One momentum SGD update of the state: on the host copies, and with --device sim read from
 * the device first and written back after (published_busy set meanwhile). Returns 0 or an
 * ftrt code. */
static int model_update(model *m, const options *o, float denom)
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

/* Allocates the model and writes every page (initial weights, zero momentum), so that a hot
 * spare that is promoted only receives state: done before ftrt_init() on every rank that may
 * train. Returns 0 or -1 (said on stderr). */
static int model_alloc(model *m, const options *o)
{
    const size_t hidden = o->hidden, n = mlp_param_count(hidden);
    memset(m, 0, sizeof *m);
    m->params = alloc_floats(n, "parameters", hidden);
    m->mom = m->params ? alloc_floats(n, "momentum buffer", hidden) : NULL;
    m->grad = m->mom ? alloc_floats(n + 1, "gradient buffer", hidden) : NULL;
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
    if (o->device_sim && model_alloc_device(m) < 0) goto fail;
    return 0;
fail:
    model_free(m);
    return -1;
}

static int run_trainer(ftrt_ctx *ctx, options *o, model *m, const digits *train,
                       const digits *test)
{
    const size_t hidden = o->hidden, n = mlp_param_count(hidden);
    int code = 1, rc;
    int64_t step = 0;
    mlp_work w = m->w;
    uint32_t *idx = m->idx;
    float *params = m->params, *mom = m->mom, *grad = m->grad;
    if (!params) {
        fprintf(stderr, "train_mlp: no model memory on this rank\n");
        return 1;
    }

    /* The state ftrt keeps: the device copies with --device sim. */
    const unsigned loc = m->dparams ? FTRT_REGION_DEVICE : 0;
    rc = ftrt_register(ctx, "params", m->dparams ? (void *)m->dparams : params,
                       n * sizeof *params, FTRT_REGION_REPLICATED | loc);
    if (rc < 0) {
        code = fatal(ctx, "ftrt_register(params)", step, rc);
        goto out;
    }
    rc = ftrt_register(ctx, "momentum", m->dmom ? (void *)m->dmom : mom, n * sizeof *mom,
                       (o->sharded_momentum ? FTRT_REGION_SHARDED : FTRT_REGION_REPLICATED) | loc);
    if (rc < 0) {
        code = fatal(ctx, "ftrt_register(momentum)", step, rc);
        goto out;
    }

    rc = ftrt_restore(ctx, &step);
    if (rc == FTRT_ERECOVER) {
        rc = recover_until_done(ctx, &step);
        if (rc != 0) {
            code = fatal(ctx, "ftrt_recover", step, rc);
            goto out;
        }
    } else if (rc == 1) {
        if (ftrt_rank(ctx) == 0) printf("resumed at step %" PRId64 "\n", step);
    } else if (rc == 0) {
        step = 0;
    } else {
        code = fatal(ctx, "ftrt_restore", step, rc < 0 ? rc : FTRT_EPROTO);
        goto out;
    }
    if (step < 0) {
        code = fatal(ctx, "ftrt_restore", step, FTRT_EPROTO);
        goto out;
    }
    published_steps = step;
    if (o->publish && publish_addresses(o->publish, ctx, m->dparams ? m->dparams : params,
                                        n * sizeof *params, m->dparams != NULL) < 0)
        goto out;

    /* For the goodput ledger's eMFU: a step's FLOPs (forward 2 and backward 4 multiply-adds'
     * worth per parameter per example, plus the update), and this CPU's peak, measured by this
     * example with a float32 matmul micro-benchmark unless FTRT_PEAK_FLOPS gives it. */
    const double step_flops = 6.0 * (double)n * (double)o->batch + 4.0 * (double)n;
    double peak = getenv("FTRT_PEAK_FLOPS") ? 0 : measured_peak_flops();
    rc = ftrt_set_job_info(ctx, o->steps, step_flops, peak);
    if (rc < 0) {
        code = fatal(ctx, "ftrt_set_job_info", step, rc);
        goto out;
    }
    if (ftrt_rank(ctx) == 0 && ftrt_epoch(ctx) == 0 && peak > 0)
        printf("train_mlp: peak FLOP/s per rank for eMFU measured by this example with a 256x256 "
               "float32 matmul: %.2f GFLOP/s (set FTRT_PEAK_FLOPS to override)\n", peak / 1e9);

    if (ftrt_rank(ctx) == 0 && ftrt_epoch(ctx) == 0) { /* not again from a promoted spare */
        printf("train_mlp: %d trainers, hidden %zu (%zu parameters, %.1f MiB), batch %zu per "
               "trainer, %" PRId64 " steps, lr %g, momentum %g, seed %" PRIu64 ", %zu train / "
               "%zu test images\n",
               ftrt_size(ctx), hidden, n, (double)n * sizeof(float) / 1048576.0, o->batch,
               o->steps, (double)o->lr, (double)o->momentum, o->seed, train->n, test->n);
        fflush(stdout);
    }

    float last_loss = NAN;
    while (step < o->steps) {
        const int rank = ftrt_rank(ctx), size = ftrt_size(ctx);
        if (rank < 0 || size <= 0) {
            code = fatal(ctx, "ftrt_rank/ftrt_size", step, rank < 0 ? rank : size);
            goto out;
        }
        minibatch_indices(o->seed, step, rank, train->n, idx, o->batch);
        rc = state_read(m, 0); /* --device sim: this step's parameters from the device */
        if (rc < 0) {
            code = fatal(ctx, "ftrt_sim_read", step, rc);
            goto out;
        }
        grad[n] = mlp_grad_sum(params, &w, train, idx, o->batch, grad);
        if (rank == o->slow_rank && o->slow_ms > 0) sleep_ms(o->slow_ms);
        for (int k = 0; k < o->nhold && rank == 0; k++)
            if (step == o->hold_step[k]) {
                o->hold_step[k] = -1; /* once: not again when steps are redone */
                sleep_ms(o->hold_ms);
            }
        if (rank == o->error_rank && step == o->error_step) {
            fprintf(stderr, "train_mlp: logical rank %d stops at step %" PRId64 " with an "
                            "application error (--error-rank/--error-at-step)\n", rank, step);
            ftrt_set_exit_code(ctx, -EIO); /* the job is failed, not finished */
            code = 1;
            goto out;
        }
        if (rank == o->hang_rank && step == o->hang_step && ftrt_epoch(ctx) == 0) {
            fprintf(stderr, "train_mlp: logical rank %d hangs at step %" PRId64
                            " (--hang-rank/--hang-at-step)\n", rank, step);
            for (;;) sleep_ms(100); /* stuck in application code; the detector fences us */
        }

        rc = ftrt_allreduce(ctx, grad, n + 1, FTRT_FLOAT32, FTRT_SUM);
        if (rc == FTRT_ERECOVER) {
            goto recover;
        } else if (rc < 0) {
            code = fatal(ctx, "ftrt_allreduce", step, rc);
            goto out;
        }

        const float denom = (float)(o->batch * (size_t)size);
        /* A checkpoint started after the previous step copied params and momentum while this
         * step's gradients were computed; the update must wait until that copy is done. */
        ftrt_checkpoint_wait_snapshot(ctx);
        rc = model_update(m, o, denom);
        if (rc < 0) {
            code = fatal(ctx, "the update's ftrt_sim_read/ftrt_sim_write", step, rc);
            goto out;
        }
        last_loss = grad[n] / denom;
        published_steps = step + 1; /* before ftrt_step_done, which may fingerprint the state */
        rc = ftrt_step_done(ctx, step);
        if (rc == FTRT_ERECOVER) { /* a partner-replica refresh (FTRT_SHARD_REPLICA_EVERY) met a
                                      failure */
            goto recover;
        } else if (rc < 0) {
            code = fatal(ctx, "ftrt_step_done", step, rc);
            goto out;
        }
        if (o->step_log) append_step_log(o->step_log, rank, step, ftrt_epoch(ctx));
        step++;
        if (rank == 0 && (step % PROGRESS_EVERY == 0 || step == o->steps)) {
            printf("step %" PRId64 "/%" PRId64 "  loss %.4f\n", step, o->steps, (double)last_loss);
            fflush(stdout);
        }

        if (o->ckpt_every > 0 && step % o->ckpt_every == 0) {
            /* Asynchronous: the snapshot overlaps the next step's forward and backward pass
             * (ftrt_checkpoint_wait_snapshot() above); the write and the commit run in the
             * background. A failed write is reported by the coordinator. */
            rc = ftrt_checkpoint_start(ctx, step);
            if (rc == FTRT_ERECOVER) {
                goto recover;
            } else if (rc < 0 && rc > -1000) {
                /* -errno: this checkpoint failed (ENOSPC, EIO, ...); the previous committed
                 * one stays, and training can go on. */
                fprintf(stderr,
                        "train_mlp: warning: logical rank %d: checkpoint at step %" PRId64
                        " failed: %s (%s); training goes on, the previous committed checkpoint "
                        "stays\n",
                        rank, step, ftrt_strerror(rc), ftrt_err_name(rc));
            } else if (rc < 0) {
                code = fatal(ctx, "ftrt_checkpoint", step, rc);
                goto out;
            }
        }
        if (o->sleep_ms > 0) sleep_ms(o->sleep_ms);
        continue;
    recover: /* FTRT_ERECOVER from any call above: a rank failed; resume where the plan says */
        rc = recover_until_done(ctx, &step);
        if (rc != 0) {
            code = fatal(ctx, "ftrt_recover", step, rc);
            goto out;
        }
        published_steps = step;
    }

    code = 0;
    if (ftrt_rank(ctx) == 0 && (rc = state_read(m, 0)) < 0) {
        code = fatal(ctx, "ftrt_sim_read", step, rc);
        goto out;
    }
    if (ftrt_rank(ctx) == 0) {
        size_t correct = mlp_correct(params, &w, test);
        if (isnan(last_loss))
            printf("final train loss: n/a (no step ran in this process)\n");
        else
            printf("final train loss: %.4f (last step, mean over %d trainers x %zu)\n",
                   (double)last_loss, ftrt_size(ctx), o->batch);
        printf("test accuracy: %.4f (%zu/%zu)\n", (double)correct / (double)test->n, correct,
               test->n);
        printf("params fnv1a64: %016" PRIx64 "\n", params_fnv1a64(params, n));
        fflush(stdout);
        if (o->params_out && write_params(o->params_out, params, n) < 0) {
            ftrt_set_exit_code(ctx, -EIO); /* the job's output is missing: it did not finish */
            code = 1;
        }
    }

out:
    ftrt_checkpoint_wait_snapshot(ctx); /* no snapshot may still read params when they go */
    return code;
}

int main(int argc, char **argv)
{
    options opt;
    int rc = parse_options(argc, argv, &opt);
    if (rc != 0) return rc > 0 ? 0 : 2;
    if (check_paths(&opt) < 0) return 2;

    /* Load the data before joining the job, so that a missing file stops every process at
     * once with the same message instead of stranding the others in ftrt_init(). */
    digits all, train, test;
    char err[1024];
    rc = digits_load(opt.data, &all, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "train_mlp: %s\n", err);
        return 1;
    }
    rc = digits_split(&all, TEST_FRACTION, SPLIT_SEED, &train, &test);
    digits_free(&all);
    if (rc < 0) {
        fprintf(stderr, "train_mlp: cannot split the data set: %s\n", strerror(-rc));
        return 1;
    }

    ftrt_config cfg;
    rc = ftrt_config_init(&cfg, sizeof cfg);
    if (rc == FTRT_ECONFIG) {
        fprintf(stderr, "train_mlp: warning: %s (%s); using the defaults for those variables\n",
                ftrt_strerror(rc), ftrt_err_name(rc));
    } else if (rc < 0) {
        fprintf(stderr, "train_mlp: ftrt_config_init: %s (%s)\n", ftrt_strerror(rc),
                ftrt_err_name(rc));
        digits_free(&train);
        digits_free(&test);
        return 1;
    }
    if (opt.ckpt_dir) snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "%s", opt.ckpt_dir);
    if (opt.report) snprintf(cfg.report_file, sizeof cfg.report_file, "%s", opt.report);

    /* Every rank that may train (trainers and hot spares; not world rank 0, the coordinator,
     * when mpirun says which rank this is) holds its model before joining, so that a promoted
     * spare only has to receive the state. */
    model m = {0};
    const char *wr = getenv("OMPI_COMM_WORLD_RANK");
    if (!(wr && strcmp(wr, "0") == 0) && model_alloc(&m, &opt) < 0) {
        digits_free(&train);
        digits_free(&test);
        return 1;
    }

    ftrt_ctx *ctx = NULL;
    rc = ftrt_init(&cfg, &ctx);
    int code;
    if (rc == FTRT_DONE) {
        code = 0; /* the coordinator, or a spare that was never needed */
    } else if (rc != 0 && ctx) { /* the coordinator, or a spare never needed, of a failed job */
        fprintf(stderr, "train_mlp: the job failed: %s (%s)\n", ftrt_strerror(rc),
                ftrt_err_name(rc));
        code = 1;
    } else if (rc != 0) {
        fprintf(stderr, "train_mlp: ftrt_init: %s (%s)\n", ftrt_strerror(rc), ftrt_err_name(rc));
        code = 1;
    } else {
        if (!m.params && model_alloc(&m, &opt) < 0) /* not under mpirun's environment */
            code = 1;
        else
            code = run_trainer(ctx, &opt, &m, &train, &test);
    }
    if (ctx) {
        int frc = ftrt_finalize(ctx);
        if (frc < 0)
            fprintf(stderr, "train_mlp: warning: ftrt_finalize: %s (%s)\n", ftrt_strerror(frc),
                    ftrt_err_name(frc));
    }
    model_free(&m);
    digits_free(&train);
    digits_free(&test);
    return code;
}
