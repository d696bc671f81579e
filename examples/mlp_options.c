/*
 * mlp_options.c - examples/train_mlp's command line: --help, the parsers of each kind of value
 * (integers in a range, seeds, floats, paths that fit ftrt_config's fields), getopt_long, and
 * the check of the output and checkpoint paths before the job starts. Every bad value ends
 * the process with one line naming the option, what was expected and what was given.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "digits.h"
#include "ftrt.h"
#include "mlp_options.h"

#define HIDDEN_MAX (1ull << 31)
#define BATCH_MAX (1ull << 20)

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
          "  --data PATH        digits CSV (gzip); default $" DIGITS_DATA_ENV " if set, else\n"
          "                     " DIGITS_DEFAULT_PATH "\n"
          "  --ordered          reduce the gradients in data-rank order (ftrt_allreduce_ordered)\n"
          "                     instead of ftrt_allreduce: under FTRT_NO_SPARE=fold a folded\n"
          "                     run then ends byte-identical to an undisturbed one with --ordered\n"
          "                     (not with FTRT_NO_SPARE=shrink: skipped data ranks)\n"
          "  --no-total-steps   do not give ftrt the job's total steps (ftrt_set_job_info with\n"
          "                     0: unknown), as a job whose length ftrt is not told\n"
          "  --step-sleep-ms M  sleep M ms after each step (default 0; for fault tests)\n"
          "  --check-every U    ftrt_check() after every U hidden units of the forward and\n"
          "                     backward passes, so that a failure stops the step there, not at\n"
          "                     its allreduce; 0 = never (default 1024)\n"
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
          "  --pause-file F     timing knob: logical rank 0 waits at the end of every step while\n"
          "                     the file F exists (polled every 10 ms), so that a test can keep\n"
          "                     the job from finishing while it does something\n"
          "  --die-rank R --die-at-step S\n"
          "                     fault injection: logical rank R SIGKILLs itself inside its forward\n"
          "                     pass at step S (first epoch only), at its 8th ftrt_check; every\n"
          "                     trainer's checks at step S sleep 2 ms, so that the others are in\n"
          "                     their passes when they learn of it (needs --check-every <= H/8)\n"
          "  --lag-rank R --lag-at-step S\n"
          "                     fault timing: logical rank R stops after step S's allreduce (first\n"
          "                     epoch only), before its update, and waits (ftrt_check every 1 ms)\n"
          "                     until a failure is announced, then abandons step S: the others\n"
          "                     finished it, so R is a survivor a step behind (with --die-at-step\n"
          "                     S+1 on another rank)\n"
          "  --slow-rank R --slow-ms M\n"
          "                     straggler injection: logical rank R computes M ms longer per step\n"
          "  --step-log FILE    append \"<logical rank> <step> <epoch>\" for every completed step\n"
          "                     (ground truth of rework for tests)\n"
          "  --publish-addr P   test hook: each trainer writes \"<pid> <params address> <bytes>\n"
          "                     <steps-done address>\" (hex addresses) to P.w<world rank>, for\n"
          "                     an injector that flips a bit in its memory (ftrt-chaos flip-bit)\n"
          "  --flip-rank R --flip-at-step S\n"
          "                     silent data corruption from inside: logical rank R flips one bit\n"
          "                     of one weight of its parameters where they live (device memory\n"
          "                     with --device sim or cuda) after its update of step S, in the\n"
          "                     first epoch only; for CUDA memory, which --publish-addr's injector\n"
          "                     cannot reach\n"
          "  --exit-rank W --exit-status S\n"
          "                     test hook: world rank W returns S (1..255) from main() after\n"
          "                     ftrt_finalize(), without ftrt_set_exit_code(): the job finished,\n"
          "                     and tools/ftrt-run exits S all the same\n"
          "  --sharded-momentum register the momentum buffer SHARDED: recoveries then reload the\n"
          "                     last committed checkpoint (exercises that path; same results)\n"
          "  --ftrt-alloc       parameters and momentum (host copies) from ftrt_alloc(): huge\n"
          "                     pages where the host has them free (vm.nr_hugepages), which a\n"
          "                     recovery's sources on this host map and write at the speed of a\n"
          "                     local copy; same results\n"
          "  --device D         where parameters and momentum live: host (default); sim, the\n"
          "                     simulated device of ftrt_sim.h (a test arrangement: run the job\n"
          "                     with FTRT_TEST_SIM_DEVICE=1); or cuda, CUDA memory of a GPU (the\n"
          "                     train_mlp_gpu build, linked with libftrt_gpu; GPU = local rank\n"
          "                     modulo the visible GPUs); same results\n"
          "  --check-device     with --device cuda: say which GPU this process would use and\n"
          "                     exit 0, or why none is usable and exit 77; joins no job\n"
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
    OPT_ERROR_STEP, OPT_HOLD_STEP, OPT_HOLD_MS, OPT_PUBLISH, OPT_DEVICE, OPT_CHECK_DEVICE,
    OPT_FLIP_RANK, OPT_FLIP_STEP, OPT_CHECK_EVERY, OPT_DIE_RANK, OPT_DIE_STEP, OPT_LAG_RANK,
    OPT_LAG_STEP, OPT_EXIT_RANK, OPT_EXIT_STATUS, OPT_PAUSE_FILE, OPT_ORDERED,
    OPT_NO_TOTAL, OPT_FTRT_ALLOC, OPT_HELP = 'h'
};

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
    {"ftrt-alloc", no_argument, NULL, OPT_FTRT_ALLOC},
    {"error-rank", required_argument, NULL, OPT_ERROR_RANK},
    {"error-at-step", required_argument, NULL, OPT_ERROR_STEP},
    {"hold-at-step", required_argument, NULL, OPT_HOLD_STEP},
    {"hold-ms", required_argument, NULL, OPT_HOLD_MS},
    {"pause-file", required_argument, NULL, OPT_PAUSE_FILE},
    {"ordered", no_argument, NULL, OPT_ORDERED},
    {"no-total-steps", no_argument, NULL, OPT_NO_TOTAL},
    {"publish-addr", required_argument, NULL, OPT_PUBLISH},
    {"flip-rank", required_argument, NULL, OPT_FLIP_RANK},
    {"flip-at-step", required_argument, NULL, OPT_FLIP_STEP},
    {"check-every", required_argument, NULL, OPT_CHECK_EVERY},
    {"die-rank", required_argument, NULL, OPT_DIE_RANK},
    {"die-at-step", required_argument, NULL, OPT_DIE_STEP},
    {"lag-rank", required_argument, NULL, OPT_LAG_RANK},
    {"lag-at-step", required_argument, NULL, OPT_LAG_STEP},
    {"exit-rank", required_argument, NULL, OPT_EXIT_RANK},
    {"exit-status", required_argument, NULL, OPT_EXIT_STATUS},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"check-device", no_argument, NULL, OPT_CHECK_DEVICE},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

enum { NOT_MINE = 2 }; /* an option the called parser does not handle */

/* The options of the training itself: model, optimizer, data, checkpoints, outputs. Returns 0,
 * -1 (message printed) or NOT_MINE. */
static int train_option(int c, const char *arg, options *o)
{
    const size_t dir_cap = sizeof(((ftrt_config *)0)->ckpt_dir);
    const size_t report_cap = sizeof(((ftrt_config *)0)->report_file);
    switch (c) {
    case OPT_STEPS: return parse_i64("steps", arg, 0, INT64_MAX / 2, &o->steps);
    case OPT_BATCH: return parse_size("batch", arg, 1, BATCH_MAX, &o->batch);
    case OPT_HIDDEN: return parse_size("hidden", arg, 1, HIDDEN_MAX, &o->hidden);
    case OPT_LR: return parse_float("lr", arg, 0.0, 1, 1e6, "a number in (0, 1e6)", &o->lr);
    case OPT_MOMENTUM:
        return parse_float("momentum", arg, 0.0, 0, 1.0, "a number in [0, 1)", &o->momentum);
    case OPT_SEED: return parse_u64("seed", arg, &o->seed);
    case OPT_CKPT_EVERY: return parse_i64("ckpt-every", arg, 0, INT64_MAX / 2, &o->ckpt_every);
    case OPT_CKPT_DIR: return parse_path("ckpt-dir", arg, dir_cap, &o->ckpt_dir);
    case OPT_REPORT: return parse_path("report", arg, report_cap, &o->report);
    case OPT_PARAMS_OUT: return parse_path("params-out", arg, 4096, &o->params_out);
    case OPT_DATA: return parse_path("data", arg, 4096, &o->data);
    case OPT_STEP_LOG: return parse_path("step-log", arg, 4096, &o->step_log);
    case OPT_CHECK_EVERY: return parse_i64("check-every", arg, 0, HIDDEN_MAX, &o->check_every);
    case OPT_SHARDED_MOMENTUM: o->sharded_momentum = 1; return 0;
    case OPT_FTRT_ALLOC: o->ftrt_alloc = 1; return 0;
    case OPT_ORDERED: o->ordered = 1; return 0;
    case OPT_NO_TOTAL: o->no_total_steps = 1; return 0;
    case OPT_DEVICE:
        if (strcmp(arg, "host") == 0) o->device = MLP_DEVICE_HOST;
        else if (strcmp(arg, "sim") == 0) o->device = MLP_DEVICE_SIM;
        else if (strcmp(arg, "cuda") == 0) o->device = MLP_DEVICE_CUDA;
        else return bad_value("device", "host, sim or cuda", arg);
        return 0;
    case OPT_CHECK_DEVICE: o->check_device = 1; return 0;
    default: return NOT_MINE;
    }
}

/* The test hooks: slow, hung, failing and holding ranks, the published address. Returns 0,
 * -1 (message printed) or NOT_MINE. */
static int test_option(int c, const char *arg, options *o)
{
    switch (c) {
    case OPT_SLEEP: return parse_i64("step-sleep-ms", arg, 0, 3600000, &o->sleep_ms);
    case OPT_HANG_RANK: return parse_i64("hang-rank", arg, 0, 1 << 20, &o->hang_rank);
    case OPT_HANG_STEP: return parse_i64("hang-at-step", arg, 0, INT64_MAX / 2, &o->hang_step);
    case OPT_SLOW_RANK: return parse_i64("slow-rank", arg, 0, 1 << 20, &o->slow_rank);
    case OPT_SLOW_MS: return parse_i64("slow-ms", arg, 0, 3600000, &o->slow_ms);
    case OPT_ERROR_RANK: return parse_i64("error-rank", arg, 0, 1 << 20, &o->error_rank);
    case OPT_ERROR_STEP:
        return parse_i64("error-at-step", arg, 0, INT64_MAX / 2, &o->error_step);
    case OPT_HOLD_STEP:
        if (o->nhold == 8) {
            fprintf(stderr, "train_mlp: --hold-at-step: at most 8 of them\n");
            return -1;
        }
        return parse_i64("hold-at-step", arg, 0, INT64_MAX / 2, &o->hold_step[o->nhold++]);
    case OPT_HOLD_MS: return parse_i64("hold-ms", arg, 0, 3600000, &o->hold_ms);
    case OPT_PAUSE_FILE: return parse_path("pause-file", arg, 4096, &o->pause_file);
    case OPT_PUBLISH: return parse_path("publish-addr", arg, 4000, &o->publish);
    case OPT_FLIP_RANK: return parse_i64("flip-rank", arg, 0, 1 << 20, &o->flip_rank);
    case OPT_FLIP_STEP: return parse_i64("flip-at-step", arg, 0, INT64_MAX / 2, &o->flip_step);
    case OPT_DIE_RANK: return parse_i64("die-rank", arg, 0, 1 << 20, &o->die_rank);
    case OPT_DIE_STEP: return parse_i64("die-at-step", arg, 0, INT64_MAX / 2, &o->die_step);
    case OPT_LAG_RANK: return parse_i64("lag-rank", arg, 0, 1 << 20, &o->lag_rank);
    case OPT_LAG_STEP: return parse_i64("lag-at-step", arg, 0, INT64_MAX / 2, &o->lag_step);
    case OPT_EXIT_RANK: return parse_i64("exit-rank", arg, 0, 1 << 20, &o->exit_rank);
    case OPT_EXIT_STATUS: return parse_i64("exit-status", arg, 1, 255, &o->exit_status);
    default: return NOT_MINE;
    }
}

/* Returns 0 (run), 1 (--help printed: exit 0) or -1 (message printed: exit 2). */
int parse_options(int argc, char **argv, options *o)
{
    const char *data = getenv(DIGITS_DATA_ENV);
    *o = (options){.steps = 300, .batch = 32, .hidden = 64, .lr = 0.05f, .momentum = 0.9f,
                   .seed = 1, .ckpt_every = 50,
                   .data = data && *data ? data : DIGITS_DEFAULT_PATH, .hang_step = -1,
                   .hang_rank = -1, .slow_rank = -1, .error_step = -1, .error_rank = -1,
                   .hold_ms = 1000, .flip_rank = -1, .flip_step = -1, .check_every = 1024,
                   .die_step = -1, .die_rank = -1, .lag_step = -1, .lag_rank = -1,
                   .exit_rank = -1, .exit_status = -1};
    int c, rc = 0;
    opterr = 0; /* one line of our own for an unknown option or a missing value */
    while (rc == 0 && (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == OPT_HELP) {
            usage(stdout);
            return 1;
        }
        if (c == ':') {
            fprintf(stderr, "train_mlp: %s needs a value (see train_mlp --help)\n",
                    argv[optind - 1]);
            return -1;
        }
        rc = train_option(c, optarg, o);
        if (rc == NOT_MINE) rc = test_option(c, optarg, o);
        if (rc == NOT_MINE) {
            fprintf(stderr, "train_mlp: unknown option '%s' (see train_mlp --help)\n",
                    argv[optind - 1]);
            return -1;
        }
    }
    if (rc == 0 && optind < argc) {
        fprintf(stderr, "train_mlp: unexpected argument '%s' (see train_mlp --help)\n",
                argv[optind]);
        rc = -1;
    }
    if (rc == 0 && o->check_device && o->device != MLP_DEVICE_CUDA) {
        fprintf(stderr, "train_mlp: --check-device needs --device cuda\n");
        rc = -1;
    }
    if (rc == 0 && o->publish && o->device == MLP_DEVICE_CUDA) {
        fprintf(stderr, "train_mlp: --publish-addr: not with --device cuda (an injector "
                        "outside the process cannot reach CUDA memory)\n");
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

int check_paths(const options *o)
{
    if (o->ckpt_dir && check_path("ckpt-dir", o->ckpt_dir, 1) < 0) return -1;
    if (o->params_out && check_path("params-out", o->params_out, 0) < 0) return -1;
    if (o->report && check_path("report", o->report, 0) < 0) return -1;
    if (o->step_log && check_path("step-log", o->step_log, 0) < 0) return -1;
    return 0;
}
