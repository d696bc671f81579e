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
          "  --data PATH        digits CSV (gzip); default " DIGITS_DEFAULT_PATH "\n"
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
          "  --die-rank R --die-at-step S\n"
          "                     fault injection: logical rank R SIGKILLs itself inside its forward\n"
          "                     pass at step S (first epoch only), at its 8th ftrt_check; every\n"
          "                     trainer's checks at step S sleep 2 ms, so that the others are in\n"
          "                     their passes when they learn of it (needs --check-every <= H/8)\n"
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
    OPT_ERROR_STEP, OPT_HOLD_STEP, OPT_HOLD_MS, OPT_PUBLISH, OPT_DEVICE, OPT_CHECK_EVERY, OPT_DIE_RANK, OPT_DIE_STEP,
    OPT_HELP = 'h'
};

/* Returns 0 (run), 1 (--help printed: exit 0) or -1 (message printed: exit 2). */
int parse_options(int argc, char **argv, options *o)
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
        {"check-every", required_argument, NULL, OPT_CHECK_EVERY},
        {"die-rank", required_argument, NULL, OPT_DIE_RANK},
        {"die-at-step", required_argument, NULL, OPT_DIE_STEP},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    const size_t dir_cap = sizeof(((ftrt_config *)0)->ckpt_dir);
    const size_t report_cap = sizeof(((ftrt_config *)0)->report_file);
    *o = (options){.steps = 300, .batch = 32, .hidden = 64, .lr = 0.05f, .momentum = 0.9f,
                   .seed = 1, .ckpt_every = 50, .data = DIGITS_DEFAULT_PATH, .hang_step = -1,
                   .hang_rank = -1, .slow_rank = -1, .error_step = -1, .error_rank = -1,
                   .hold_ms = 1000, .check_every = 1024, .die_step = -1, .die_rank = -1};
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
        case OPT_DIE_RANK: rc = parse_i64("die-rank", optarg, 0, 1 << 20, &o->die_rank); break;
        case OPT_DIE_STEP:
            rc = parse_i64("die-at-step", optarg, 0, INT64_MAX / 2, &o->die_step);
            break;
        case OPT_CHECK_EVERY:
            rc = parse_i64("check-every", optarg, 0, HIDDEN_MAX, &o->check_every);
            break;
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

int check_paths(const options *o)
{
    if (o->ckpt_dir && check_path("ckpt-dir", o->ckpt_dir, 1) < 0) return -1;
    if (o->params_out && check_path("params-out", o->params_out, 0) < 0) return -1;
    if (o->report && check_path("report", o->report, 0) < 0) return -1;
    if (o->step_log && check_path("step-log", o->step_log, 0) < 0) return -1;
    return 0;
}
