/*
 * train_mlp.c - data-parallel training of a multilayer perceptron on the UCI handwritten
 * digits, kept alive through rank failures by ftrt. The main example of the runtime: this file
 * is the training loop under ftrt, with every error path.
 *
 *   mpirun --enable-recovery -np 6 ./train_mlp --steps 300 --ckpt-dir /tmp/ckpt
 *   (world rank 0: coordinator; 1..4: trainers; 5: hot spare)
 *
 * The program's parts: examples/mlp_options.c (the command line), examples/mlp_model.c (the
 * model, 64 -> H (ReLU) -> 10 with momentum SGD, and the minibatch of a logical rank at a
 * step), examples/mlp_state.c (the memory ftrt keeps: parameters and momentum, on the host or
 * with --device sim in the simulated device's memory; the --publish-addr test hook),
 * examples/digits.c (the data set). Here: joining the job, registering and restoring the
 * state, the step (gradients, allreduce, update, ftrt_step_done, checkpoints), the fault and
 * timing knobs of the tests, and the outputs.
 *
 * Determinism: data rank r's minibatch at step s is a pure function of (seed, s, r) (the data
 * rank is the logical rank until a shrink, ftrt_data_rank()), the gradient sum and the update
 * are computed in a fixed order in float32, and ftrt's allreduce is bitwise deterministic for a
 * fixed number of trainers. So a run that survives failures (or is restarted from a
 * checkpoint) ends with bitwise the same parameters as an undisturbed run with the same flags
 * and trainer count; under FTRT_NO_SPARE=shrink, as any run with the same membership history
 * (which data rank left at which step).
 *
 * The training loop follows the contract of include/ftrt.h: FTRT_ERECOVER from any collective
 * call means "call ftrt_recover() and continue at the step it returns".
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "digits.h"
#include "ftrt.h"
#include "mlp_model.h"
#include "mlp_options.h"
#include "mlp_state.h"

#define TEST_FRACTION 0.2   /* held-out share of the data set */
#define SPLIT_SEED 0x6469676974735f31ull /* fixed: the split never depends on --seed */
#define PROGRESS_EVERY 100  /* steps between progress lines */

/* ---- output files and helpers ---- */

/* Writes the parameters as raw little-endian float32 to `path` through a temporary file in the
 * same directory, fsynced and renamed over `path`; a path that is not a regular file
 * (/dev/null, a FIFO) is written in place, never renamed over. Returns 0 or -1 (message
 * printed). */
static int write_params(const char *path, const float *p, size_t n)
{
    size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    if (!tmp) {
        fprintf(stderr, "train_mlp: --params-out: out of memory\n");
        return -1;
    }
    struct stat st;
    int in_place = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
    snprintf(tmp, tlen, in_place ? "%s" : "%s.tmp.%ld", path, (long)getpid());
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
    if (ok && (fflush(f) != 0 || (!in_place && fsync(fileno(f)) != 0))) ok = 0, e = errno;
    if (fclose(f) != 0 && ok) ok = 0, e = errno;
    if (ok && !in_place && rename(tmp, path) != 0) ok = 0, e = errno;
    if (!ok) {
        fprintf(stderr, "train_mlp: cannot write %s: %s\n", path, strerror(e));
        if (!in_place) remove(tmp);
    }
    free(tmp);
    return ok ? 0 : -1;
}

/* Sleeps ms milliseconds (through EINTR). */
static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* This CPU's float32 FLOP/s on a cache-friendly 256x256 matmul (i-k-j order, which compilers
 * vectorize): the best of 3 runs, wall clock. Printed beside eMFU's peak as a sanity figure:
 * what this process got before the job, never the peak (on shared cores it is a share). */
static double measured_matmul_flops(void)
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

/* ---- training under ftrt ---- */

/* What a trainer's functions return when this process was drained (FTRT_EDRAINED): it
 * leaves the job with exit status 0 (run_trainer). */
#define DRAINED_LEFT 3

/* Prints a fatal ftrt code in the documented form and where it came from; returns 1. For
 * FTRT_EDRAINED (this process's logical rank went to a hot spare: not an error) it says so
 * and returns DRAINED_LEFT. */
static int fatal(ftrt_ctx *ctx, const char *call, int64_t step, int rc)
{
    if (rc == FTRT_EDRAINED) {
        printf("drained (world rank %d) after step %" PRId64 ": leaving the job (from %s)\n",
               ftrt_world_rank(ctx), step, call);
        fflush(stdout);
        return DRAINED_LEFT;
    }
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

/* Registers the state with ftrt and restores it (the newest usable checkpoint, a promoted
 * spare's handoff, or a fresh start at step 0), then publishes where it is (--publish-addr).
 * Returns 0 with *step the step to start at, or 1 (said on stderr). */
static int join_training(ftrt_ctx *ctx, const options *o, model *m, int64_t *step)
{
    const size_t n = m->n;
    /* The state ftrt keeps: the device copies with --device sim or cuda. */
    const unsigned loc = m->dparams ? FTRT_REGION_DEVICE : 0;
    int rc = ftrt_register(ctx, "params", m->dparams ? (void *)m->dparams : m->params,
                           n * sizeof *m->params, FTRT_REGION_REPLICATED | loc);
    if (rc < 0) return fatal(ctx, "ftrt_register(params)", *step, rc);
    rc = ftrt_register(ctx, "momentum", m->dmom ? (void *)m->dmom : m->mom, n * sizeof *m->mom,
                       (o->sharded_momentum ? FTRT_REGION_SHARDED : FTRT_REGION_REPLICATED) | loc);
    if (rc < 0) return fatal(ctx, "ftrt_register(momentum)", *step, rc);

    rc = ftrt_restore(ctx, step);
    if (rc == FTRT_ERECOVER) {
        rc = recover_until_done(ctx, step);
        if (rc != 0) return fatal(ctx, "ftrt_recover", *step, rc);
    } else if (rc == 1) {
        if (ftrt_rank(ctx) == 0) printf("resumed at step %" PRId64 "\n", *step);
    } else if (rc == 0) {
        *step = 0;
    } else {
        return fatal(ctx, "ftrt_restore", *step, rc < 0 ? rc : FTRT_EPROTO);
    }
    if (*step < 0) return fatal(ctx, "ftrt_restore", *step, FTRT_EPROTO);
    published_steps = *step;
    if (o->publish && publish_addresses(o->publish, ctx, m->dparams ? m->dparams : m->params,
                                        n * sizeof *m->params, m->dparams != NULL) < 0)
        return 1;
    return 0;
}

/* Gives ftrt the job's size for the goodput ledger's eMFU: a step's FLOPs (forward 2 and
 * backward 4 multiply-adds' worth per parameter per example, plus the update), and the peak
 * FLOP/s of a rank: FTRT_PEAK_FLOPS when set, else the CPU's float32 peak from libftrt's table
 * split among the trainers of this host (ftrt_cpu_peak_flops(), ftrt_host_trainers()); logical
 * rank 0 of epoch 0 prints it with its source and a measured matmul rate for comparison, and
 * the job's shape (not again from a promoted spare). Returns 0 or 1 (said on stderr). */
static int describe_job(ftrt_ctx *ctx, const options *o, size_t n, const digits *train,
                        const digits *test, int64_t step)
{
    const double step_flops = 6.0 * (double)n * (double)o->batch + 4.0 * (double)n;
    const int first = ftrt_rank(ctx) == 0 && ftrt_epoch(ctx) == 0;
    double peak = 0;
    char src[512] = "";
    int ranks = ftrt_host_trainers(ctx);
    int prc = getenv("FTRT_PEAK_FLOPS") || ranks < 1
                  ? 0 : ftrt_cpu_peak_flops(FTRT_FLOAT32, ranks, &peak, src, sizeof src);
    int rc = ftrt_set_job_info(ctx, o->no_total_steps ? 0 : o->steps, step_flops, peak);
    if (rc < 0) return fatal(ctx, "ftrt_set_job_info", step, rc);
    if (first && peak > 0)
        printf("train_mlp: peak FLOP/s per rank for eMFU: %.2f GFLOP/s (%s; FTRT_PEAK_FLOPS "
               "overrides); a 256x256 float32 matmul measured here: %.2f GFLOP/s\n",
               peak / 1e9, src, measured_matmul_flops() / 1e9);
    else if (first && prc < 0)
        printf("train_mlp: no peak FLOP/s for eMFU: %s (%s); set FTRT_PEAK_FLOPS\n", src,
               ftrt_err_name(prc));

    if (ftrt_rank(ctx) == 0 && ftrt_epoch(ctx) == 0) { /* not again from a promoted spare */
        printf("train_mlp: %d trainers, hidden %zu (%zu parameters, %.1f MiB), batch %zu per "
               "trainer, %" PRId64 " steps, lr %g, momentum %g, seed %" PRIu64 ", %zu train / "
               "%zu test images\n",
               ftrt_size(ctx), o->hidden, n, (double)n * sizeof(float) / 1048576.0, o->batch,
               o->steps, (double)o->lr, (double)o->momentum, o->seed, train->n, test->n);
        fflush(stdout);
    }
    return 0;
}

/* The fault and timing knobs of the tests, at `step` on logical rank `rank`, after the
 * gradients: --slow-rank computes longer, --hold-at-step holds logical rank 0 once per step
 * listed, --pause-file holds it while the file exists, --error-rank stops with an application
 * error (returns 1), --hang-rank gets stuck in its own code in epoch 0 (never returns).
 * Returns 0 otherwise. */
static int test_knobs(ftrt_ctx *ctx, options *o, int rank, int64_t step)
{
    if (rank == o->slow_rank && o->slow_ms > 0) sleep_ms(o->slow_ms);
    for (int k = 0; k < o->nhold && rank == 0; k++)
        if (step == o->hold_step[k]) {
            o->hold_step[k] = -1; /* once: not again when steps are redone */
            sleep_ms(o->hold_ms);
        }
    while (rank == 0 && o->pause_file && access(o->pause_file, F_OK) == 0) sleep_ms(10);
    if (rank == o->error_rank && step == o->error_step) {
        fprintf(stderr, "train_mlp: logical rank %d stops at step %" PRId64 " with an "
                        "application error (--error-rank/--error-at-step)\n", rank, step);
        ftrt_set_exit_code(ctx, -EIO); /* the job is failed, not finished */
        return 1;
    }
    if (rank == o->hang_rank && step == o->hang_step && ftrt_epoch(ctx) == 0) {
        fprintf(stderr, "train_mlp: logical rank %d hangs at step %" PRId64
                        " (--hang-rank/--hang-at-step)\n", rank, step);
        for (;;) sleep_ms(100); /* stuck in application code; the detector fences us */
    }
    return 0;
}

/* --lag-rank/--lag-at-step, after the step's allreduce: waits for a failure (ftrt_check every
 * 1 ms) and abandons the step, its update and ftrt_step_done undone: the others finished it.
 * Returns FTRT_ERECOVER, or the job's end code (fatal, said on stderr). */
static int lag(ftrt_ctx *ctx, int rank, int64_t step)
{
    int rc;
    while ((rc = ftrt_check(ctx)) == 0) sleep_ms(1);
    if (rc != FTRT_ERECOVER) return fatal(ctx, "ftrt_check", step, rc);
    fprintf(stderr, "train_mlp: logical rank %d abandoned step %" PRId64 " after its allreduce "
                    "(--lag-rank): a survivor a step behind\n", rank, step);
    return rc;
}

/* --flip-rank/--flip-at-step, after the update of `step`: silent data corruption from inside
 * the process (bit 20 of one weight, where the parameters live), said on stderr. Returns 0 or
 * 1 (fatal, said on stderr). */
static int flip_bit(ftrt_ctx *ctx, model *m, int64_t step)
{
    size_t i;
    float before, after;
    int rc = model_flip_bit(m, 20, &i, &before, &after);
    if (rc != 0) return fatal(ctx, "--flip-at-step", step, rc);
    fprintf(stderr, "train_mlp: logical rank %d flipped bit 20 of parameter %zu (%g -> %g) in "
                    "its %s memory after step %" PRId64 " (--flip-rank/--flip-at-step)\n",
            ftrt_rank(ctx), i, (double)before, (double)after, m->dev ? m->dev->name : "host",
            step);
    return 0;
}

/* Every --ckpt-every steps, after step `step`: an asynchronous checkpoint. Returns 0 (taken,
 * or failed with -errno: the previous committed one stays and training goes on, with a
 * warning), FTRT_ERECOVER, or 1 (fatal, said on stderr). */
static int checkpoint_after(ftrt_ctx *ctx, const options *o, int rank, int64_t step)
{
    if (o->ckpt_every <= 0 || step % o->ckpt_every != 0) return 0;
    /* Asynchronous: the snapshot overlaps the next step's forward and backward pass
     * (ftrt_checkpoint_wait_snapshot() in train_step()); the write and the commit run in the
     * background. A failed write is reported by the coordinator. */
    int rc = ftrt_checkpoint_start(ctx, step);
    if (rc == FTRT_ERECOVER) return rc;
    if (rc < 0 && rc > -1000) {
        /* -errno: this checkpoint failed (ENOSPC, EIO, ...); the previous committed one
         * stays, and training can go on. */
        fprintf(stderr,
                "train_mlp: warning: logical rank %d: checkpoint at step %" PRId64
                " failed: %s (%s); training goes on, the previous committed checkpoint "
                "stays\n",
                rank, step, ftrt_strerror(rc), ftrt_err_name(rc));
    } else if (rc < 0) {
        return fatal(ctx, "ftrt_checkpoint", step, rc);
    }
    return 0;
}

/* What mlp_work's poll needs: the context, the options, the step in progress and the checks
 * made in it. */
typedef struct pass_poll {
    ftrt_ctx *ctx;
    const options *o;
    int64_t step, checks;
} pass_poll;
static pass_poll the_poll;

/* mlp_work's poll: whether the step may go on (ftrt_check: 0, FTRT_ERECOVER or the job's end);
 * with --die-rank/--die-at-step, that rank dies at its 8th check of the step, and every
 * trainer's checks of the step sleep 2 ms (the others are then mid-pass when it dies). */
static int poll_ftrt(void *arg)
{
    pass_poll *p = arg;
    if (p->step == p->o->die_step && ftrt_epoch(p->ctx) == 0) {
        if (ftrt_rank(p->ctx) == p->o->die_rank && ++p->checks == 8) raise(SIGKILL);
        sleep_ms(2);
    }
    return ftrt_check(p->ctx);
}

/* One training step at *step: the minibatch's gradient sum, the allreduce, the update, the
 * bookkeeping and the checkpoint. Returns 0 (*step advanced, *last_loss set), FTRT_ERECOVER
 * (a rank failed: recover, then resume at the step ftrt_recover() gives), or 1 (fatal, said on
 * stderr). */
/* This trainer's data ranks (ftrt_data_ranks(): one, or more once a lost rank's data was
 * folded onto it) into m->data, with room in m->folded for the gradient sums beyond the first.
 * Returns their number, or an ftrt / -errno code. */
static int data_ranks(ftrt_ctx *ctx, model *m)
{
    int nd = ftrt_data_ranks(ctx, m->data, m->ndata_cap);
    if (nd > m->ndata_cap) {
        int *d = realloc(m->data, (size_t)nd * sizeof *d);
        if (d) m->data = d;
        void **c = d ? realloc(m->contrib, (size_t)nd * sizeof *c) : NULL;
        if (!c) return -ENOMEM;
        m->contrib = c;
        m->ndata_cap = nd;
        nd = ftrt_data_ranks(ctx, m->data, m->ndata_cap);
    }
    if (nd > 1 && (size_t)nd - 1 > m->nfolded) {
        float *f = realloc(m->folded, ((size_t)nd - 1) * (m->n + 1) * sizeof *f);
        if (!f) return -ENOMEM;
        m->folded = f;
        m->nfolded = (size_t)nd - 1;
    }
    return nd;
}

/* The gradient sums (and the loss sum, element n) of data rank k's minibatch (k-th of
 * m->data) into buffer k: m->grad, then m->folded's. Returns 0, FTRT_ERECOVER (a rank failed:
 * the step abandoned mid-pass) or the fatal code of a failed ftrt_check. */
static int data_rank_grad(ftrt_ctx *ctx, options *o, model *m, const digits *train,
                          int64_t step, int k)
{
    float *buf = k == 0 ? m->grad : m->folded + (size_t)(k - 1) * (m->n + 1);
    /* (by the data rank: a shrink skips the lost rank's minibatches, a fold computes them
     * here, and nobody else's change) */
    minibatch_indices(o->seed, step, m->data[k], train->n, m->idx, o->batch);
    buf[m->n] = mlp_grad_sum(m->params, &m->w, train, m->idx, o->batch, buf);
    if (m->w.stopped == FTRT_ERECOVER) { /* a rank failed: this step is abandoned mid-pass */
        fprintf(stderr, "train_mlp: logical rank %d stopped step %" PRId64 " mid-pass "
                "(ftrt_check: a rank failed)\n", ftrt_rank(ctx), step);
        return FTRT_ERECOVER;
    }
    return m->w.stopped ? fatal(ctx, "ftrt_check", step, m->w.stopped) : 0;
}

/* The sum over every data rank of the job of its gradient sums, into m->grad (n + 1 floats):
 * with --ordered in data-rank order (ftrt_allreduce_ordered: the same bytes whoever holds
 * which data rank), else this trainer's own summed in data-rank order, then ftrt_allreduce.
 * Returns 0, FTRT_ERECOVER or the fatal code. */
static int reduce_grad(ftrt_ctx *ctx, const options *o, model *m, int nd, int64_t step)
{
    const size_t n1 = m->n + 1;
    int rc;
    if (o->ordered) {
        for (int k = 0; k < nd; k++)
            m->contrib[k] = k == 0 ? m->grad : m->folded + (size_t)(k - 1) * n1;
        rc = ftrt_allreduce_ordered(ctx, ftrt_data_size(ctx), m->data, nd, m->contrib, m->grad,
                                    n1, FTRT_FLOAT32);
    } else {
        for (int k = 1; k < nd; k++)
            for (size_t i = 0; i < n1; i++) m->grad[i] += m->folded[(size_t)(k - 1) * n1 + i];
        rc = ftrt_allreduce(ctx, m->grad, n1, FTRT_FLOAT32, FTRT_SUM);
    }
    if (rc == FTRT_ERECOVER) return rc;
    return rc < 0 ? fatal(ctx, o->ordered ? "ftrt_allreduce_ordered" : "ftrt_allreduce", step,
                          rc)
                  : 0;
}

static int train_step(ftrt_ctx *ctx, options *o, model *m, const digits *train, int64_t *step,
                      float *last_loss)
{
    const size_t n = m->n;
    float *grad = m->grad;
    const int rank = ftrt_rank(ctx), ndata = ftrt_data_size(ctx), nd = data_ranks(ctx, m);
    if (rank < 0 || ndata <= 0 || nd <= 0)
        return fatal(ctx, "ftrt_rank/ftrt_data_size/ftrt_data_ranks", *step,
                     rank < 0 ? rank : nd <= 0 ? nd : ndata);
    int rc = state_read(m, 0); /* --device sim/cuda: this step's parameters from the device */
    if (rc < 0) return fatal(ctx, "the device read of the parameters", *step, rc);
    the_poll.step = *step;
    the_poll.checks = 0;
    for (int k = 0; k < nd; k++)
        if ((rc = data_rank_grad(ctx, o, m, train, *step, k)) != 0) return rc;
    if (test_knobs(ctx, o, rank, *step)) return 1;

    if ((rc = reduce_grad(ctx, o, m, nd, *step)) != 0) return rc;
    if (rank == o->lag_rank && *step == o->lag_step && ftrt_epoch(ctx) == 0)
        return lag(ctx, rank, *step);

    /* averaged over the data ranks held (the trainers present, unless folded) */
    const float denom = (float)(o->batch * (size_t)ndata);
    /* A checkpoint started after the previous step copied params and momentum while this
     * step's gradients were computed; the update must wait until that copy is done. */
    ftrt_checkpoint_wait_snapshot(ctx);
    rc = model_update(m, o, denom);
    if (rc < 0) return fatal(ctx, "the update's device read/write", *step, rc);
    if (rank == o->flip_rank && *step == o->flip_step && ftrt_epoch(ctx) == 0 &&
        flip_bit(ctx, m, *step) != 0)
        return 1;
    *last_loss = grad[n] / denom;
    published_steps = *step + 1; /* before ftrt_step_done, which may fingerprint the state */
    rc = ftrt_step_done(ctx, *step);
    if (rc == FTRT_ERECOVER) return rc; /* a partner-replica refresh (FTRT_SHARD_REPLICA_EVERY)
                                           met a failure */
    if (rc < 0) return fatal(ctx, "ftrt_step_done", *step, rc);
    if (o->step_log) append_step_log(o->step_log, rank, *step, ftrt_epoch(ctx));
    ++*step;
    if (rank == 0 && (*step % PROGRESS_EVERY == 0 || *step == o->steps)) {
        printf("step %" PRId64 "/%" PRId64 "  loss %.4f\n", *step, o->steps, (double)*last_loss);
        fflush(stdout);
    }
    rc = checkpoint_after(ctx, o, rank, *step);
    if (rc != 0) return rc;
    if (o->sleep_ms > 0) sleep_ms(o->sleep_ms);
    return 0;
}

/* After the last step, on logical rank 0: the final loss, the test accuracy, the parameters'
 * hash and --params-out (a failed write fails the job: ftrt_set_exit_code). Returns 0 or 1. */
static int finish(ftrt_ctx *ctx, const options *o, model *m, const digits *test, int64_t step,
                  float last_loss)
{
    if (ftrt_rank(ctx) != 0) return 0;
    int rc = state_read(m, 0);
    if (rc < 0) return fatal(ctx, "the device read of the parameters", step, rc);
    size_t correct = mlp_correct(m->params, &m->w, test);
    if (isnan(last_loss))
        printf("final train loss: n/a (no step ran in this process)\n");
    else
        printf("final train loss: %.4f (last step, mean over %d trainers x %zu, %d data "
               "rank(s))\n", (double)last_loss, ftrt_size(ctx), o->batch, ftrt_data_size(ctx));
    printf("test accuracy: %.4f (%zu/%zu)\n", (double)correct / (double)test->n, correct,
           test->n);
    printf("params fnv1a64: %016" PRIx64 "\n", params_fnv1a64(m->params, m->n));
    fflush(stdout);
    if (o->params_out && write_params(o->params_out, m->params, m->n) < 0) {
        ftrt_set_exit_code(ctx, -EIO); /* the job's output is missing: it did not finish */
        return 1;
    }
    return 0;
}

/* A trainer's (or a promoted spare's) whole part of the job. Returns its exit status. */

static int run_trainer(ftrt_ctx *ctx, options *o, model *m, const digits *train,
                       const digits *test)
{
    if (!m->params) {
        fprintf(stderr, "train_mlp: no model memory on this rank\n");
        return 1;
    }
    the_poll = (pass_poll){.ctx = ctx, .o = o};
    m->w.poll = poll_ftrt; /* a failure stops the passes within --check-every hidden units */
    m->w.poll_arg = &the_poll;
    m->w.poll_units = (size_t)o->check_every;
    int64_t step = 0;
    int code = join_training(ctx, o, m, &step);
    if (!code) code = describe_job(ctx, o, m->n, train, test, step);
    float last_loss = NAN;
    while (!code && step < o->steps) {
        int rc = train_step(ctx, o, m, train, &step, &last_loss);
        if (rc != FTRT_ERECOVER) {
            code = rc;
            continue;
        }
        /* FTRT_ERECOVER from any call of the step: a rank failed; resume where the plan says */
        rc = recover_until_done(ctx, &step);
        if (rc != 0) code = fatal(ctx, "ftrt_recover", step, rc);
        published_steps = step;
    }
    if (!code) code = finish(ctx, o, m, test, step, last_loss);
    ftrt_checkpoint_wait_snapshot(ctx); /* no snapshot may still read params when they go */
    return code == DRAINED_LEFT ? 0 : code;
}

/* --device cuda, before anything else: every rank checks that a GPU is usable, so that none
 * joins a job the others leave; the ranks that may train (not world rank 0, the coordinator,
 * which never touches CUDA) make theirs current. World rank 0 (or a process outside mpirun)
 * says why not. Returns 0, or the exit status: 0 / 77 for --check-device (GPU usable / not),
 * 1 when no GPU is usable. */
static int check_cuda(const options *o, int *done)
{
    *done = 0;
    if (o->device != MLP_DEVICE_CUDA) return 0;
    const char *wr = getenv("OMPI_COMM_WORLD_RANK");
    int coordinator = wr && strcmp(wr, "0") == 0;
    int rc = mlp_cuda_check(o->check_device || !wr || coordinator, !coordinator);
    if (o->check_device) {
        *done = 1;
        return rc == 0 ? 0 : 77;
    }
    *done = rc != 0;
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    options opt;
    int rc = parse_options(argc, argv, &opt);
    if (rc != 0) return rc > 0 ? 0 : 2;
    int done, code = check_cuda(&opt, &done);
    if (done) return code;
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
        if (ftrt_world_rank(ctx) == opt.exit_rank && opt.exit_status > 0 && !code)
            code = (int)opt.exit_status; /* --exit-rank/--exit-status: after ftrt_finalize */
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
