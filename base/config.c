/*
 * config.c - the settings of ftrt_config, their defaults, FTRT_* environment variables and
 * ranges, in one table; and the test knobs (base/knobs.h).
 *
 * Precedence: application (fields set after ftrt_config_init) > environment > defaults.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/config.h"
#include "base/log.h"
#include "base/proto.h"
#include "base/knobs.h"
#include "ftrt.h"

/*
 * Every setting of ftrt_config, in the struct's order (unit.config checks the order and that
 * every field after size and version is here), written once:
 *   X(field, environment variable, kind, default, lo, hi, names, doc)
 * kind:
 *   INT   int in [lo, hi]
 *   POW2  int in [lo, hi] and a power of two
 *   DBL   double in [lo, hi] (NaN refused)
 *   ENUM  int in [lo, hi]; the environment gives one of `names` ("a|b|c", case-insensitive),
 *         the field holds its index
 *   STR   NUL-terminated char[] of at least lo bytes (hi unused); the environment value is
 *         taken as it is, empty included, when it fits
 * From this table come ftrt_config_init() (defaults, then the environment; a bad value is
 * logged by name and the default kept), the range checks of ftrt__config_check() (an
 * application-set field outside its range is refused; the default itself is always accepted,
 * e.g. spares = -1) and docs/configuration.md's settings table (ftrt__settings(), tools/settings_table.c,
 * ctest unit.settings_table). The doc is that table's "meaning" column: no '|'.
 */
#define FTRT__SETTINGS(X)                                                                          \
    X(spares, "FTRT_SPARES", INT, -1, 0, FTRT__MAX_WORLD, NULL,                                    \
      "hot spares (the last world ranks); -1 = 1 if the world has at least 3 processes, else 0")   \
    X(heartbeat_ms, "FTRT_HEARTBEAT_MS", INT, 100, 1, 60000, NULL,                                 \
      "heartbeat period of every rank's agent thread, ms")                                         \
    X(heartbeat_timeout_ms, "FTRT_HEARTBEAT_TIMEOUT_MS", INT, 1000, 2, 3600000, NULL,              \
      "silence after which a rank is declared failed (and fenced), ms; must exceed the "           \
      "heartbeat period")                                                                          \
    X(init_timeout_ms, "FTRT_INIT_TIMEOUT_MS", INT, 60000, 100, 3600000, NULL,                     \
      "time for every rank to connect at start, ms")                                               \
    X(ckpt_keep, "FTRT_CKPT_KEEP", INT, 2, 1, 1000000, NULL, "committed checkpoints kept")         \
    X(log_level, "FTRT_LOG", ENUM, FTRT__LOG_WARN, 0, 3, "error|warn|info|debug",                  \
      "log level (stderr, `ftrt[w<world rank>]` prefix); the field holds 0..3")                    \
    X(ckpt_dir, "FTRT_CKPT_DIR", STR, "ftrt-ckpt", 1, 0, NULL,                                     \
      "checkpoint directory (shared by all ranks)")                                                \
    X(status_file, "FTRT_STATUS_FILE", STR, "", 0, 0, NULL,                                        \
      "the coordinator's status file; empty = `<ckpt_dir>/status.json`")                           \
    X(report_file, "FTRT_REPORT", STR, "", 0, 0, NULL,                                             \
      "JSON report path (train_mlp: `--report`); empty = none")                                    \
    X(fault_log, "FTRT_FAULT_LOG", STR, "", 0, 0, NULL,                                            \
      "JSON-lines ground truth written by a fault injector, for true MTTD; empty = none")          \
    X(coord_addr, "FTRT_COORD_ADDR", STR, "", 0, 0, NULL,                                          \
      "IPv4 address the coordinator listens on, for a host whose other addresses some ranks "     \
      "cannot reach; empty = every interface, and each rank connects to the first of the "         \
      "coordinator host's addresses that answers (loopback last)")                                 \
    X(progress_timeout_ms, "FTRT_PROGRESS_TIMEOUT_MS", INT, 0, 0, 86400000, NULL,                  \
      "stalled-progress timeout, ms; 0 = adaptive: max(5 s, 10 × median step time), armed once "   \
      "a step time is measured")                                                                   \
    X(straggler_ratio, "FTRT_STRAGGLER_RATIO", DBL, 1.5, 1.0, 1000.0, NULL,                        \
      "compute time per step above this multiple of the trainers' median is reported as a "        \
      "straggler")                                                                                 \
    X(peak_flops, "FTRT_PEAK_FLOPS", DBL, 0.0, 0.0, 1e21, NULL,                                    \
      "peak FLOP/s of one rank, for eMFU; 0 = unknown unless `ftrt_set_job_info()` gives it")      \
    X(mtbf_s, "FTRT_MTBF_S", DBL, 0.0, 0.0, 1e12, NULL,                                            \
      "mean time between failures for the checkpoint-interval advice, s; 0 = the observed one")    \
    X(metrics_file, "FTRT_METRICS_FILE", STR, "", 0, 0, NULL,                                      \
      "OpenMetrics text file rewritten every 2 s by the coordinator (for a node exporter's "       \
      "textfile collector); empty = none")                                                         \
    X(progress, "FTRT_PROGRESS", INT, -1, -1, 1, NULL,                                             \
      "live progress line on the coordinator's stderr: -1 = when stderr is a terminal, 0 = off, "  \
      "1 = on")                                                                                    \
    X(timeline_max, "FTRT_TIMELINE_MAX", INT, 200000, 0, 100000000, NULL,                          \
      "ledger intervals kept per rank for the report's timeline (totals stay exact)")              \
    X(ckpt_qd, "FTRT_CKPT_QD", INT, 8, 1, 256, NULL,                                               \
      "checkpoint write (and restore read) requests in flight per shard")                          \
    X(ckpt_chunk_kb, "FTRT_CKPT_CHUNK_KB", POW2, 4096, 64, 65536, NULL,                            \
      "bytes per checkpoint I/O request, KiB")                                                     \
    X(ckpt_staging_mb, "FTRT_CKPT_STAGING_MB", INT, 0, 0, 1 << 30, NULL,                           \
      "staging memory for snapshots, MiB: two shards = double buffering, one = a single buffer, "  \
      "less = synchronous writes; 0 = two shards, within half of the physical memory")            \
    X(ckpt_policy, "FTRT_CKPT_POLICY", ENUM, FTRT_CKPT_WAIT, 0, 1, "wait|skip",                    \
      "when every staging buffer is still being written: `wait` for the oldest, or `skip` this "   \
      "checkpoint (counted in the report); the field holds `FTRT_CKPT_WAIT` or `FTRT_CKPT_SKIP`")  \
    X(ckpt_direct, "FTRT_CKPT_DIRECT", INT, 1, 0, 1, NULL,                                         \
      "1 = O_DIRECT where the file system accepts it (else buffered, said once); 0 = always "      \
      "buffered")                                                                                  \
    X(async_progress, "FTRT_ASYNC_PROGRESS", INT, 1, 0, 1, NULL,                                   \
      "overlapped collectives: 1 = a progress thread (when MPI provides `MPI_THREAD_MULTIPLE`), "  \
      "0 = progress inside ftrt calls only")                                                       \
    X(progress_poll_us, "FTRT_PROGRESS_POLL_US", INT, 50, 0, 100000, NULL,                         \
      "the progress thread's poll interval while a collective is in flight, µs (it sleeps while "  \
      "none is)")                                                                                  \
    X(sdc_every, "FTRT_SDC_EVERY", INT, 10, 0, 1000000, NULL,                                      \
      "silent data corruption check: every this many steps each trainer fingerprints its "        \
      "replicated regions (CRC32C; device regions on the device) and the coordinator compares "  \
      "the replicas; 0 = off")                                                                   \
    X(shard_replica_every, "FTRT_SHARD_REPLICA_EVERY", INT, 0, -1, 1000000, NULL,                  \
      "in-memory partner replicas of sharded regions: 0 = refreshed at each checkpoint snapshot, " \
      "K > 0 = every K steps (in `ftrt_step_done()`), -1 = off")                                    \
    X(host_agents, "FTRT_HOST_AGENTS", INT, 1, 0, 1, NULL,                                         \
      "1 = the ranks of each host reach the coordinator through one host agent (a thread in one "  \
      "of them; those of the coordinator's host connect to it directly), 0 = each rank has its "  \
      "own TCP connection to the coordinator")                                                     \
    X(standby, "FTRT_STANDBY", INT, 1, 0, 1, NULL,                                                 \
      "1 = a hot spare on another host than the coordinator's is the standby coordinator, which "  \
      "takes over in place when the coordinator is lost; 0 = no standby (the coordinator's loss "  \
      "ends the job, a relaunch resumes from the last committed checkpoint)")                    \
    X(timeline_budget_mb, "FTRT_TIMELINE_BUDGET_MB", INT, 256, 0, 1 << 20, NULL,                   \
      "MiB the coordinator holds for the report's per-rank timelines, split over the ranks it "    \
      "holds them for (`FTRT_TIMELINE_RANKS`); the others' totals only (exact); 0 = none")       \
    X(timeline_ranks, "FTRT_TIMELINE_RANKS", INT, 1024, 0, FTRT__MAX_WORLD, NULL,                  \
      "ranks whose whole timeline the report holds: the first this many world ranks and every "   \
      "hot spare (all ranks of a job this small); the others' totals only")                     \
    X(nccl_cta_policy, "FTRT_NCCL_CTA_POLICY", ENUM, FTRT_NCCL_CTA_UNSET, 0, 3,                    \
      "unset|default|efficiency|zero",                                                             \
      "the NCCL plane's communicator CTA policy (`ncclConfig_t.CTAPolicy`, NCCL 2.27+; `zero` "   \
      "where nccl.h has it): `efficiency` = the fewest CTAs (SMs) for decent bandwidth, leaving "  \
      "SMs to compute; "                                                                           \
      "`unset` = NCCL's own (its `NCCL_CTA_POLICY`)")                                             \
    X(nccl_min_ctas, "FTRT_NCCL_MIN_CTAS", INT, 0, 0, 64, NULL,                                    \
      "the NCCL plane's communicator: least CTAs per collective (`ncclConfig_t.minCTAs`); 0 = "   \
      "NCCL's own")                                                                                \
    X(nccl_max_ctas, "FTRT_NCCL_MAX_CTAS", INT, 0, 0, 64, NULL,                                    \
      "the NCCL plane's communicator: most CTAs per collective (`ncclConfig_t.maxCTAs`), fewer "   \
      "leave more SMs to compute; 0 = NCCL's own")                                                 \
    X(sigterm, "FTRT_SIGTERM", ENUM, FTRT_SIGTERM_EXIT, 0, 1, "exit|drain",                        \
      "what SIGTERM means: `exit` = its default action (a trainer that gets it dies: a "          \
      "failure); `drain` = to a trainer or hot spare, a drain of that rank (a scheduler's "      \
      "warning to one node), to the coordinator, the end of the whole job (aborted, every rank " \
      "exits); the field holds `FTRT_SIGTERM_EXIT` or `FTRT_SIGTERM_DRAIN`")                      \
    X(no_spare, "FTRT_NO_SPARE", ENUM, FTRT_NO_SPARE_STOP, 0, 2, "stop|shrink|fold",               \
      "what a trainer's failure does when no hot spare is left: `stop` = the job ends "           \
      "(`FTRT_ENOSPARE`); `shrink` = the job goes on with one trainer fewer, the logical ranks "  \
      "above the lost one renumbered down, the lost one's data skipped; `fold` = the same, a "    \
      "survivor training on the lost one's data as well (`ftrt_data_ranks()`); both refused "    \
      "(the job ends) with sharded regions; the field holds `FTRT_NO_SPARE_STOP`, "              \
      "`FTRT_NO_SPARE_SHRINK` or `FTRT_NO_SPARE_FOLD`")                                           \
    X(fold_max, "FTRT_FOLD_MAX", INT, 0, 0, 262144, NULL,                                          \
      "under `FTRT_NO_SPARE=fold`, the most data ranks one trainer may hold: a fold that finds "  \
      "no survivor with room is refused (the job ends with `FTRT_ENOSPARE`, a drain is refused) " \
      "instead of overloading a trainer whose per-data-rank state (activations, buffers) would "  \
      "not fit; 0 = no limit")                                                                     \
    X(shard_redundancy, "FTRT_SHARD_REDUNDANCY", ENUM, FTRT_SHARD_REPLICA, 0, 1, "replica|erasure", \
      "how sharded regions are kept in memory between refreshes (`FTRT_SHARD_REPLICA_EVERY`): "   \
      "`replica` = each trainer's shard copied to a partner (survives one loss per pair); "       \
      "`erasure` = Reed-Solomon parity over groups of `FTRT_EC_GROUP` trainers, 2 parity "        \
      "chunks per stripe (any two losses in a group rebuilt from memory; needs ISA-L in the "     \
      "build); the field holds `FTRT_SHARD_REPLICA` or `FTRT_SHARD_ERASURE`")                    \
    X(ec_group, "FTRT_EC_GROUP", INT, 4, 3, 32, NULL,                                              \
      "under `FTRT_SHARD_REDUNDANCY=erasure`, the trainers per redundancy group: the job's N "    \
      "trainers form max(1, N / this) groups (logical rank l in group l mod groups); each "       \
      "member keeps 2 / (group size - 2) of its shard in parity")                              \
    X(joinable, "FTRT_JOINABLE", INT, 0, 0, 4096, NULL,                                            \
      "processes that may join the running job as hot spares over its life (`ftrt-run --join`, " \
      "docs/join.md; Open MPI 4.1 with `ompi-server` only: `ftrt-run --joinable` sets it); 0 = "  \
      "none, a JOIN is refused")

/* The default in the descriptor's number or string slot, by kind. */
#define FTRT__DEFNUM_INT(d) (double)(d)
#define FTRT__DEFNUM_POW2(d) (double)(d)
#define FTRT__DEFNUM_DBL(d) (double)(d)
#define FTRT__DEFNUM_ENUM(d) (double)(d)
#define FTRT__DEFNUM_STR(d) 0.0
#define FTRT__DEFSTR_INT(d) NULL
#define FTRT__DEFSTR_POW2(d) NULL
#define FTRT__DEFSTR_DBL(d) NULL
#define FTRT__DEFSTR_ENUM(d) NULL
#define FTRT__DEFSTR_STR(d) d

static const ftrt__setting settings[] = {
#define FTRT__SETTING(field, env, kind, def, lo, hi, names, doc)                                   \
    {#field, env, FTRT__SET_##kind, offsetof(ftrt_config, field),                              \
     sizeof(((ftrt_config *)0)->field), FTRT__DEFNUM_##kind(def), FTRT__DEFSTR_##kind(def),   \
     (double)(lo), (double)(hi), names, doc},
    FTRT__SETTINGS(FTRT__SETTING)
#undef FTRT__SETTING
};
#define NSETTINGS ((int)(sizeof settings / sizeof settings[0]))

/* Each kind is stored in a field of its type: int for INT/POW2/ENUM, double for DBL, char[]
 * for STR. */
#define FTRT__FIELD(f) (((ftrt_config *)0)->f)
#define FTRT__TYPE_INT(f) _Generic(FTRT__FIELD(f), int: 1, default: 0)
#define FTRT__TYPE_POW2(f) FTRT__TYPE_INT(f)
#define FTRT__TYPE_ENUM(f) FTRT__TYPE_INT(f)
#define FTRT__TYPE_DBL(f) _Generic(FTRT__FIELD(f), double: 1, default: 0)
#define FTRT__TYPE_STR(f)                                                                          \
    _Generic(&FTRT__FIELD(f)[0], char *: sizeof FTRT__FIELD(f) > 1, default: 0)
#define FTRT__TYPECHECK(field, env, kind, def, lo, hi, names, doc)                                 \
    _Static_assert(FTRT__TYPE_##kind(field), "ftrt_config." #field " is not of its kind's type");
FTRT__SETTINGS(FTRT__TYPECHECK)
#undef FTRT__TYPECHECK

/* The bytes before the first setting: size and version. */
#define HEADER_BYTES offsetof(ftrt_config, spares)

const ftrt__setting *ftrt__settings(int *n)
{
    *n = NSETTINGS;
    return settings;
}

static void *field_at(ftrt_config *cfg, const ftrt__setting *s)
{
    return (char *)cfg + s->offset;
}

/* Index of v among the '|'-separated names (case-insensitive), or -1. */
static int name_index(const char *names, const char *v)
{
    size_t len = strlen(v);
    int i = 0;
    for (const char *p = names;; i++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && !strncasecmp(p, v, n)) return i;
        if (!bar) return -1;
        p = bar + 1;
    }
}

/* names with ", " between them, into buf. */
static const char *names_list(const char *names, char *buf, size_t cap)
{
    size_t o = 0;
    for (const char *p = names; *p && o + 3 < cap; p++) {
        if (*p == '|') {
            buf[o++] = ',';
            buf[o++] = ' ';
        } else {
            buf[o++] = *p;
        }
    }
    buf[o] = 0;
    return buf;
}

/* Applies setting s's environment variable to cfg. Returns 0 (also when unset) or FTRT_ECONFIG
 * after logging the bad value; the field is unchanged then. */
static int env_apply(ftrt_config *cfg, const ftrt__setting *s)
{
    const char *v = getenv(s->env);
    if (!v) return 0;
    if (s->kind == FTRT__SET_STR) {
        if (strlen(v) >= s->size) {
            ftrt_log_error("%s is %zu bytes long; the limit is %zu", s->env, strlen(v),
                           s->size - 1);
            return FTRT_ECONFIG;
        }
        memcpy(field_at(cfg, s), v, strlen(v) + 1);
        return 0;
    }
    if (!*v) return 0;
    char *end;
    errno = 0;
    if (s->kind == FTRT__SET_DBL) {
        double *out = field_at(cfg, s);
        double x = strtod(v, &end);
        if (errno || *end || !(x >= s->lo && x <= s->hi)) {
            ftrt_log_error("%s=\"%s\" is not a number in [%g, %g]; keeping %g", s->env, v, s->lo,
                           s->hi, *out);
            return FTRT_ECONFIG;
        }
        *out = x;
        return 0;
    }
    int *out = field_at(cfg, s);
    if (s->kind == FTRT__SET_ENUM) {
        int i = name_index(s->names, v);
        if (i < 0) {
            char list[256];
            ftrt_log_error("%s=\"%s\" is not one of %s", s->env, v,
                           names_list(s->names, list, sizeof list));
            return FTRT_ECONFIG;
        }
        *out = i;
        return 0;
    }
    long x = strtol(v, &end, 10);
    if (errno || *end || x < (long)s->lo || x > (long)s->hi) {
        ftrt_log_error("%s=\"%s\" is not an integer in [%ld, %ld]; keeping %d", s->env, v,
                       (long)s->lo, (long)s->hi, *out);
        return FTRT_ECONFIG;
    }
    if (s->kind == FTRT__SET_POW2 && (x & (x - 1))) {
        ftrt_log_error("%s=%ld is not a power of two; keeping %d", s->env, x, *out);
        return FTRT_ECONFIG;
    }
    *out = (int)x;
    return 0;
}

/* Sets the settings that lie wholly within the first `bytes` bytes of cfg (present = 1), or
 * those that do not (present = 0), to their defaults, then applies their environment variables.
 * Returns 0 or FTRT_ECONFIG (the first bad variable; every one is logged). */
static int fill(ftrt_config *cfg, size_t bytes, int present)
{
    int rc = 0;
    for (int i = 0; i < NSETTINGS; i++) {
        const ftrt__setting *s = &settings[i];
        if ((s->offset + s->size <= bytes) != present) continue;
        void *f = field_at(cfg, s);
        switch (s->kind) {
        case FTRT__SET_DBL: *(double *)f = s->def; break;
        case FTRT__SET_STR: snprintf(f, s->size, "%s", s->def_str); break;
        default: *(int *)f = (int)s->def; break;
        }
        int r = env_apply(cfg, s);
        if (!rc) rc = r;
    }
    return rc;
}

int ftrt_config_init(ftrt_config *cfg, size_t size)
{
    if (!cfg || size < HEADER_BYTES || size > sizeof(ftrt_config)) return FTRT_EINVAL;
    memset(cfg, 0, size);
    cfg->size = (uint32_t)size;
    cfg->version = FTRT_VERSION_MAJOR;
    return fill(cfg, size, 1);
}

void ftrt__config_adopt(ftrt_config *dst, const ftrt_config *src)
{
    size_t n = src->size;
    if (n < HEADER_BYTES || n > sizeof *dst) n = HEADER_BYTES; /* ftrt__config_check refuses it */
    memcpy(dst, src, n);
    fill(dst, n, 0); /* a bad variable is logged; its field keeps the default */
}

int ftrt__config_check(const ftrt_config *cfg, int world, int *spares_out)
{
    if (cfg->size < HEADER_BYTES || cfg->size > sizeof(ftrt_config) ||
        cfg->version != FTRT_VERSION_MAJOR) {
        ftrt_log_error("ftrt_config was not set up with ftrt_config_init() of this library "
                       "(size %u, version %u; this library: size %zu at most, version %d)",
                       cfg->size, cfg->version, sizeof(ftrt_config), FTRT_VERSION_MAJOR);
        return FTRT_ECONFIG;
    }
    if (world < 2) {
        ftrt_log_error("the world has %d process(es); ftrt needs a coordinator (world rank 0) "
                       "and at least one trainer: run with mpirun -np 2 or more", world);
        return FTRT_ECONFIG;
    }
    if (world > FTRT__MAX_WORLD) {
        ftrt_log_error("the world has %d processes; at most %d are supported", world,
                       FTRT__MAX_WORLD);
        return FTRT_ECONFIG;
    }
    for (int i = 0; i < NSETTINGS; i++) {
        const ftrt__setting *s = &settings[i];
        const char *f = (const char *)cfg + s->offset;
        if (s->kind == FTRT__SET_STR) {
            size_t len = strnlen(f, s->size);
            if (len == s->size || len < (size_t)s->lo) {
                ftrt_log_error("ftrt_config.%s (%s) is %s", s->field, s->env,
                               len == s->size ? "not NUL-terminated" : "empty");
                return FTRT_ECONFIG;
            }
        } else if (s->kind == FTRT__SET_DBL) {
            double v;
            memcpy(&v, f, sizeof v);
            if (!(v >= s->lo && v <= s->hi) && v != s->def) {
                ftrt_log_error("ftrt_config.%s (%s) = %g is not in [%g, %g]", s->field, s->env,
                               v, s->lo, s->hi);
                return FTRT_ECONFIG;
            }
        } else {
            int v;
            memcpy(&v, f, sizeof v);
            int pow2 = s->kind == FTRT__SET_POW2;
            if ((v < s->lo || v > s->hi || (pow2 && (v & (v - 1)))) && v != (int)s->def) {
                ftrt_log_error("ftrt_config.%s (%s) = %d is not %sin [%ld, %ld]", s->field,
                               s->env, v, pow2 ? "a power of two " : "", (long)s->lo,
                               (long)s->hi);
                return FTRT_ECONFIG;
            }
        }
    }
    int spares = cfg->spares < 0 ? (world >= 3 ? 1 : 0) : cfg->spares;
    if (spares > world - 2) {
        ftrt_log_error("FTRT_SPARES=%d leaves no trainer in a world of %d (1 coordinator + "
                       "trainers + spares): use at most %d", spares, world, world - 2);
        return FTRT_ECONFIG;
    }
    if (cfg->heartbeat_timeout_ms <= cfg->heartbeat_ms) {
        ftrt_log_error("heartbeat timeout (%d ms) must exceed the heartbeat period (%d ms)",
                       cfg->heartbeat_timeout_ms, cfg->heartbeat_ms);
        return FTRT_ECONFIG;
    }
    if (cfg->nccl_min_ctas && cfg->nccl_max_ctas && cfg->nccl_min_ctas > cfg->nccl_max_ctas) {
        ftrt_log_error("FTRT_NCCL_MIN_CTAS=%d exceeds FTRT_NCCL_MAX_CTAS=%d", cfg->nccl_min_ctas,
                       cfg->nccl_max_ctas);
        return FTRT_ECONFIG;
    }
    *spares_out = spares;
    return 0;
}

/* ---- test knobs (base/knobs.h) -------------------------------------------------------- */

struct ftrt__knobs ftrt__knobs;

int ftrt__knobs_read(struct ftrt__knobs *k)
{
    int rc = 0;
#define FTRT__KNOB_READ(field, env, max, doc)                                                      \
    do {                                                                                           \
        const char *v = getenv(env);                                                               \
        if (!v || !*v) break;                                                                      \
        char *end;                                                                                 \
        errno = 0;                                                                                 \
        long x = strtol(v, &end, 10);                                                              \
        if (errno || *end || x < 0 || x > (max)) {                                                 \
            ftrt_log_error("%s=\"%s\" is not an integer in [0, %d]; test knob ignored", env, v,   \
                           (int)(max));                                                            \
            rc = -1;                                                                               \
            break;                                                                                 \
        }                                                                                          \
        k->field = (int32_t)x;                                                                     \
    } while (0);
    FTRT__KNOBS(FTRT__KNOB_READ)
#undef FTRT__KNOB_READ
    return rc;
}

static pthread_once_t knobs_once = PTHREAD_ONCE_INIT;

static void knobs_load_once(void)
{
    ftrt__knobs_read(&ftrt__knobs);
}

void ftrt__knobs_load(void)
{
    pthread_once(&knobs_once, knobs_load_once);
}
