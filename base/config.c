/*
 * config.c - defaults and FTRT_* environment variables, read in one place.
 *
 * Precedence: application (fields set after ftrt_config_init) > environment > defaults.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/config.h"
#include "base/log.h"
#include "base/proto.h"
#include "ftrt.h"

/* Parses env var `name` as an int in [lo, hi] into *out. Returns 0 (also when unset) or
 * FTRT_ECONFIG after logging the bad value; *out is unchanged then. */
static int env_int(const char *name, int lo, int hi, int *out)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi) {
        ftrt_log_error("%s=\"%s\" is not an integer in [%d, %d]; keeping %d", name, v, lo, hi,
                       *out);
        return FTRT_ECONFIG;
    }
    *out = (int)x;
    return 0;
}

static int env_double(const char *name, double lo, double hi, double *out)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end || !(x >= lo && x <= hi)) {
        ftrt_log_error("%s=\"%s\" is not a number in [%g, %g]; keeping %g", name, v, lo, hi, *out);
        return FTRT_ECONFIG;
    }
    *out = x;
    return 0;
}

static int env_str(const char *name, char *dst, size_t cap)
{
    const char *v = getenv(name);
    if (!v) return 0;
    if (strlen(v) >= cap) {
        ftrt_log_error("%s is %zu bytes long; the limit is %zu", name, strlen(v), cap - 1);
        return FTRT_ECONFIG;
    }
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

int ftrt__parse_log_level(const char *v)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (!strcasecmp(v, names[i])) return i;
    return -1;
}

/* FTRT_CKPT_POLICY=wait|skip. */
static int env_policy(int *out)
{
    const char *v = getenv("FTRT_CKPT_POLICY");
    if (!v || !*v) return 0;
    if (!strcasecmp(v, "wait")) *out = FTRT_CKPT_WAIT;
    else if (!strcasecmp(v, "skip")) *out = FTRT_CKPT_SKIP;
    else {
        ftrt_log_error("FTRT_CKPT_POLICY=\"%s\" is not one of wait, skip", v);
        return FTRT_ECONFIG;
    }
    return 0;
}

/* FTRT_CKPT_CHUNK_KB: a power of two in [64, 65536]. */
static int env_chunk(int *out)
{
    int kb = *out;
    int rc = env_int("FTRT_CKPT_CHUNK_KB", 64, 65536, &kb);
    if (rc) return rc;
    if (kb & (kb - 1)) {
        ftrt_log_error("FTRT_CKPT_CHUNK_KB=%d is not a power of two; keeping %d", kb, *out);
        return FTRT_ECONFIG;
    }
    *out = kb;
    return 0;
}

static int env_log(int *out)
{
    const char *v = getenv("FTRT_LOG");
    if (!v || !*v) return 0;
    int lvl = ftrt__parse_log_level(v);
    if (lvl < 0) {
        ftrt_log_error("FTRT_LOG=\"%s\" is not one of error, warn, info, debug", v);
        return FTRT_ECONFIG;
    }
    *out = lvl;
    return 0;
}

int ftrt_config_init(ftrt_config *cfg, size_t size)
{
    if (!cfg || size < sizeof(ftrt_config)) return FTRT_EINVAL;
    memset(cfg, 0, sizeof *cfg);
    cfg->size = sizeof *cfg;
    cfg->version = FTRT_VERSION_MAJOR;
    cfg->spares = -1;
    cfg->heartbeat_ms = 100;
    cfg->heartbeat_timeout_ms = 1000;
    cfg->init_timeout_ms = 60000;
    cfg->ckpt_keep = 2;
    cfg->straggler_ratio = 1.5;
    cfg->progress = -1;
    cfg->timeline_max = 200000;
    cfg->ckpt_qd = 8;
    cfg->ckpt_chunk_kb = 4096;
    cfg->ckpt_direct = 1;
    cfg->async_progress = 1;
    cfg->progress_poll_us = 50;
    cfg->log_level = FTRT__LOG_WARN;
    snprintf(cfg->ckpt_dir, sizeof cfg->ckpt_dir, "ftrt-ckpt");

    int rc = 0, r;
#define KEEP_FIRST(x) (r = (x), rc = rc ? rc : r)
    KEEP_FIRST(env_log(&cfg->log_level));
    KEEP_FIRST(env_int("FTRT_SPARES", 0, FTRT__MAX_WORLD, &cfg->spares));
    KEEP_FIRST(env_int("FTRT_HEARTBEAT_MS", 1, 60000, &cfg->heartbeat_ms));
    KEEP_FIRST(env_int("FTRT_HEARTBEAT_TIMEOUT_MS", 2, 3600000, &cfg->heartbeat_timeout_ms));
    KEEP_FIRST(env_int("FTRT_INIT_TIMEOUT_MS", 100, 3600000, &cfg->init_timeout_ms));
    KEEP_FIRST(env_int("FTRT_CKPT_KEEP", 1, 1000000, &cfg->ckpt_keep));
    KEEP_FIRST(env_str("FTRT_CKPT_DIR", cfg->ckpt_dir, sizeof cfg->ckpt_dir));
    KEEP_FIRST(env_str("FTRT_STATUS_FILE", cfg->status_file, sizeof cfg->status_file));
    KEEP_FIRST(env_str("FTRT_REPORT", cfg->report_file, sizeof cfg->report_file));
    KEEP_FIRST(env_str("FTRT_FAULT_LOG", cfg->fault_log, sizeof cfg->fault_log));
    KEEP_FIRST(env_str("FTRT_COORD_ADDR", cfg->coord_addr, sizeof cfg->coord_addr));
    KEEP_FIRST(env_int("FTRT_PROGRESS_TIMEOUT_MS", 0, 86400000, &cfg->progress_timeout_ms));
    KEEP_FIRST(env_double("FTRT_STRAGGLER_RATIO", 1.0, 1000.0, &cfg->straggler_ratio));
    KEEP_FIRST(env_int("FTRT_DEBUG_RECOVERY_DELAY_MS", 0, 600000, &cfg->debug_recovery_delay_ms));
    KEEP_FIRST(env_double("FTRT_PEAK_FLOPS", 0.0, 1e21, &cfg->peak_flops));
    KEEP_FIRST(env_double("FTRT_MTBF_S", 0.0, 1e12, &cfg->mtbf_s));
    KEEP_FIRST(env_str("FTRT_METRICS_FILE", cfg->metrics_file, sizeof cfg->metrics_file));
    KEEP_FIRST(env_int("FTRT_PROGRESS", -1, 1, &cfg->progress));
    KEEP_FIRST(env_int("FTRT_TIMELINE_MAX", 0, 100000000, &cfg->timeline_max));
    KEEP_FIRST(env_int("FTRT_CKPT_QD", 1, 256, &cfg->ckpt_qd));
    KEEP_FIRST(env_chunk(&cfg->ckpt_chunk_kb));
    KEEP_FIRST(env_int("FTRT_CKPT_STAGING_MB", 0, 1 << 30, &cfg->ckpt_staging_mb));
    KEEP_FIRST(env_policy(&cfg->ckpt_policy));
    KEEP_FIRST(env_int("FTRT_CKPT_DIRECT", 0, 1, &cfg->ckpt_direct));
    KEEP_FIRST(env_int("FTRT_DEBUG_CKPT_WRITE_DELAY_MS", 0, 600000, &cfg->debug_ckpt_write_delay_ms));
    KEEP_FIRST(env_int("FTRT_ASYNC_PROGRESS", 0, 1, &cfg->async_progress));
    KEEP_FIRST(env_int("FTRT_PROGRESS_POLL_US", 0, 100000, &cfg->progress_poll_us));
#undef KEEP_FIRST
    return rc;
}

int ftrt__config_check(const ftrt_config *cfg, int world, int *spares_out)
{
    if (cfg->size < sizeof(ftrt_config) || cfg->version != FTRT_VERSION_MAJOR) {
        ftrt_log_error("ftrt_config was not set up with ftrt_config_init() (size %u, version %u)",
                       cfg->size, cfg->version);
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
    if (cfg->progress_timeout_ms < 0 || !(cfg->straggler_ratio >= 1.0)) {
        ftrt_log_error("progress timeout (%d ms) must be >= 0 and the straggler ratio (%g) >= 1",
                       cfg->progress_timeout_ms, cfg->straggler_ratio);
        return FTRT_ECONFIG;
    }
    int spares = cfg->spares < 0 ? (world >= 3 ? 1 : 0) : cfg->spares;
    if (spares > world - 2) {
        ftrt_log_error("FTRT_SPARES=%d leaves no trainer in a world of %d (1 coordinator + "
                       "trainers + spares): use at most %d", spares, world, world - 2);
        return FTRT_ECONFIG;
    }
    if (cfg->heartbeat_ms < 1 || cfg->heartbeat_timeout_ms <= cfg->heartbeat_ms) {
        ftrt_log_error("heartbeat timeout (%d ms) must exceed the heartbeat period (%d ms)",
                       cfg->heartbeat_timeout_ms, cfg->heartbeat_ms);
        return FTRT_ECONFIG;
    }
    if (cfg->ckpt_qd < 1 || cfg->ckpt_qd > 256 || cfg->ckpt_chunk_kb < 64 ||
        cfg->ckpt_chunk_kb > 65536 || (cfg->ckpt_chunk_kb & (cfg->ckpt_chunk_kb - 1)) ||
        cfg->ckpt_staging_mb < 0 || cfg->debug_ckpt_write_delay_ms < 0 ||
        (cfg->ckpt_policy != FTRT_CKPT_WAIT && cfg->ckpt_policy != FTRT_CKPT_SKIP)) {
        ftrt_log_error("checkpoint engine settings invalid: qd=%d (1..256) chunk=%d KiB (power of "
                       "two, 64..65536) staging=%d MiB policy=%d",
                       cfg->ckpt_qd, cfg->ckpt_chunk_kb, cfg->ckpt_staging_mb, cfg->ckpt_policy);
        return FTRT_ECONFIG;
    }
    if ((cfg->async_progress != 0 && cfg->async_progress != 1) || cfg->progress_poll_us < 0 ||
        cfg->progress_poll_us > 100000) {
        ftrt_log_error("overlapped-collective settings invalid: async_progress=%d (0 or 1) "
                       "progress_poll_us=%d (0..100000)", cfg->async_progress,
                       cfg->progress_poll_us);
        return FTRT_ECONFIG;
    }
    if (cfg->ckpt_keep < 1 || !cfg->ckpt_dir[0]) {
        ftrt_log_error("checkpoint settings invalid: keep=%d dir=\"%s\"", cfg->ckpt_keep,
                       cfg->ckpt_dir);
        return FTRT_ECONFIG;
    }
    *spares_out = spares;
    return 0;
}
