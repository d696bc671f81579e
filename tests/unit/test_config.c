/* Unit tests: configuration defaults, environment parsing, validation, a smaller (older)
 * struct, the settings table against the struct, the test knobs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ftrt.h"
#include "runtime/internal.h"
#include "base/knobs.h"

static void clear_env(void)
{
    int n;
    const ftrt__setting *s = ftrt__settings(&n);
    for (int i = 0; i < n; i++) unsetenv(s[i].env);
}

static void defaults(void **state)
{
    (void)state;
    clear_env();
    ftrt_config c;
    assert_int_equal(ftrt_config_init(&c, sizeof c), 0);
    assert_int_equal(c.size, sizeof c);
    assert_int_equal(c.spares, -1);
    assert_int_equal(c.heartbeat_ms, 100);
    assert_int_equal(c.heartbeat_timeout_ms, 1000);
    assert_int_equal(c.ckpt_keep, 2);
    assert_string_equal(c.ckpt_dir, "ftrt-ckpt");
    assert_string_equal(c.report_file, "");
    assert_int_equal(c.async_progress, 1);
    assert_int_equal(c.progress_poll_us, 50);
}

static void env_overrides(void **state)
{
    (void)state;
    clear_env();
    setenv("FTRT_SPARES", "2", 1);
    setenv("FTRT_HEARTBEAT_MS", "50", 1);
    setenv("FTRT_HEARTBEAT_TIMEOUT_MS", "400", 1);
    setenv("FTRT_CKPT_DIR", "/tmp/x", 1);
    setenv("FTRT_LOG", "debug", 1);
    setenv("FTRT_ASYNC_PROGRESS", "0", 1);
    setenv("FTRT_PROGRESS_POLL_US", "200", 1);
    setenv("FTRT_NCCL_CTA_POLICY", "Efficiency", 1);
    setenv("FTRT_NCCL_MAX_CTAS", "16", 1);
    ftrt_config c;
    assert_int_equal(ftrt_config_init(&c, sizeof c), 0);
    assert_int_equal(c.spares, 2);
    assert_int_equal(c.heartbeat_ms, 50);
    assert_int_equal(c.heartbeat_timeout_ms, 400);
    assert_string_equal(c.ckpt_dir, "/tmp/x");
    assert_int_equal(c.log_level, 3);
    assert_int_equal(c.async_progress, 0);
    assert_int_equal(c.progress_poll_us, 200);
    assert_int_equal(c.nccl_cta_policy, FTRT_NCCL_CTA_EFFICIENCY);
    assert_int_equal(c.nccl_max_ctas, 16);
    assert_int_equal(c.nccl_min_ctas, 0);
    clear_env();
}

static void bad_env_values(void **state)
{
    (void)state;
    const char *bad[][2] = {{"FTRT_SPARES", "abc"}, {"FTRT_SPARES", "-1"},
                            {"FTRT_HEARTBEAT_MS", "0"}, {"FTRT_HEARTBEAT_MS", "12x"},
                            {"FTRT_CKPT_KEEP", "0"}, {"FTRT_LOG", "loud"},
                            {"FTRT_HEARTBEAT_TIMEOUT_MS", "99999999999"},
                            {"FTRT_ASYNC_PROGRESS", "2"}, {"FTRT_PROGRESS_POLL_US", "-1"},
                            {"FTRT_PROGRESS_POLL_US", "100001"},
                            {"FTRT_NCCL_CTA_POLICY", "fast"}, {"FTRT_NCCL_MAX_CTAS", "65"},
                            {"FTRT_NCCL_MIN_CTAS", "-1"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        clear_env();
        setenv(bad[i][0], bad[i][1], 1);
        ftrt_config c;
        assert_int_equal(ftrt_config_init(&c, sizeof c), FTRT_ECONFIG);
        /* the bad variable leaves its default in place */
        assert_int_equal(c.heartbeat_ms, 100);
        assert_int_equal(c.ckpt_keep, 2);
        assert_int_equal(c.async_progress, 1);
        assert_int_equal(c.progress_poll_us, 50);
    }
    clear_env();
}

static void bad_arguments(void **state)
{
    (void)state;
    clear_env();
    ftrt_config c;
    assert_int_equal(ftrt_config_init(NULL, sizeof c), FTRT_EINVAL);
    assert_int_equal(ftrt_config_init(&c, 0), FTRT_EINVAL);
    assert_int_equal(ftrt_config_init(&c, 7), FTRT_EINVAL); /* not even size and version */
    struct {
        ftrt_config c;
        int newer_field; /* a caller with a newer, larger ftrt_config than the library's */
    } big;
    assert_int_equal(ftrt_config_init(&big.c, sizeof big), FTRT_EINVAL);
    assert_int_equal(ftrt_config_init(&c, 8), 0); /* just the header: nothing else to set */
    assert_int_equal(c.size, 8);
    assert_int_equal(c.version, FTRT_VERSION_MAJOR);
}

/* A caller built against an older, smaller ftrt_config (here: one that ended before
 * async_progress) passes its size: ftrt_config_init() writes only those bytes, and the library's
 * copy (ftrt_init()) gives the fields past it their defaults and environment variables. */
static void older_smaller_struct(void **state)
{
    (void)state;
    clear_env();
    const size_t old = offsetof(ftrt_config, async_progress);
    ftrt_config c;
    memset(&c, 0xab, sizeof c);
    assert_int_equal(ftrt_config_init(&c, old), 0);
    assert_int_equal(c.size, old);
    assert_int_equal(c.version, FTRT_VERSION_MAJOR);
    assert_int_equal(c.heartbeat_ms, 100);
    assert_int_equal(c.ckpt_direct, 1);
    assert_string_equal(c.ckpt_dir, "ftrt-ckpt");
    for (size_t i = old; i < sizeof c; i++) /* nothing past the caller's size is written */
        assert_int_equal(((unsigned char *)&c)[i], 0xab);
    c.heartbeat_ms = 70; /* set by the application */
    setenv("FTRT_PROGRESS_POLL_US", "200", 1);
    ftrt_config lib;
    memset(&lib, 0xcd, sizeof lib);
    ftrt__config_adopt(&lib, &c);
    unsetenv("FTRT_PROGRESS_POLL_US");
    assert_int_equal(lib.size, old);
    assert_int_equal(lib.heartbeat_ms, 70);
    assert_int_equal(lib.async_progress, 1);     /* past the caller's size: the default */
    assert_int_equal(lib.progress_poll_us, 200); /* ... or the environment */
    int spares;
    assert_int_equal(ftrt__config_check(&lib, 6, &spares), 0);
    assert_int_equal(spares, 1);
    /* A size that cuts a field: that field is the library's. */
    assert_int_equal(ftrt_config_init(&c, offsetof(ftrt_config, progress_poll_us) + 2), 0);
    c.progress_poll_us = 7;
    ftrt__config_adopt(&lib, &c);
    assert_int_equal(lib.progress_poll_us, 50);
    /* A full-size struct is taken as it is. */
    assert_int_equal(ftrt_config_init(&c, sizeof c), 0);
    c.progress_poll_us = 7;
    ftrt__config_adopt(&lib, &c);
    assert_int_equal(lib.progress_poll_us, 7);
    assert_int_equal(ftrt__config_check(&lib, 6, &spares), 0);
    /* Sizes from no ftrt_config_init(): only size and version are copied, and refused. */
    const uint32_t bad[] = {0, 4, (uint32_t)sizeof c + 8, 0xabababab};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&c, 0xab, sizeof c);
        c.size = bad[i];
        c.version = FTRT_VERSION_MAJOR;
        ftrt__config_adopt(&lib, &c);
        assert_int_equal(lib.size, bad[i]);
        assert_int_equal(lib.heartbeat_ms, 100);
        assert_int_equal(ftrt__config_check(&lib, 6, &spares), FTRT_ECONFIG);
    }
}

/* The table of base/config.c covers every field of ftrt_config after size and version, in
 * the struct's order, with nothing but padding between them; names are unique; defaults lie
 * in their ranges (the spares' -1 excepted: it means "auto"). */
static void settings_table(void **state)
{
    (void)state;
    int n;
    const ftrt__setting *s = ftrt__settings(&n);
    assert_true(n >= 25);
    size_t end = offsetof(ftrt_config, spares);
    assert_int_equal(end, 8);
    for (int i = 0; i < n; i++) {
        assert_true(s[i].offset >= end);
        assert_true(s[i].offset - end < 8); /* padding only */
        end = s[i].offset + s[i].size;
        assert_true(strncmp(s[i].env, "FTRT_", 5) == 0);
        assert_null(strchr(s[i].doc, '|'));
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(s[i].env, s[j].env);
            assert_string_not_equal(s[i].field, s[j].field);
        }
        switch (s[i].kind) {
        case FTRT__SET_STR:
            assert_non_null(s[i].def_str);
            assert_true(strlen(s[i].def_str) < s[i].size);
            assert_true(strlen(s[i].def_str) >= s[i].lo);
            break;
        case FTRT__SET_ENUM: {
            int names = 1;
            for (const char *p = s[i].names; *p; p++) names += *p == '|';
            assert_true(s[i].lo == 0 && s[i].hi == names - 1);
        } /* fall through */
        default:
            assert_true(s[i].size == sizeof(int) || s[i].kind == FTRT__SET_DBL);
            if (strcmp(s[i].field, "spares") != 0)
                assert_true(s[i].def >= s[i].lo && s[i].def <= s[i].hi);
        }
    }
    assert_true(sizeof(ftrt_config) - end < 8);
    assert_string_equal(s[0].field, "spares");
    assert_string_equal(s[n - 1].field, "joinable");
}

/* The test knobs: set from the environment only when a variable is set and valid. */
static void knobs(void **state)
{
    (void)state;
    struct ftrt__knobs k;
    memset(&k, 0, sizeof k);
    k.io_force_sync = 1; /* set by a test: left alone when the variable is unset */
    setenv("FTRT_DEBUG_RECOVERY_DELAY_MS", "1500", 1);
    setenv("FTRT_DEBUG_CKPT_WRITE_DELAY_MS", "100", 1);
    unsetenv("FTRT_TEST_IO_FORCE_SYNC");
    setenv("FTRT_TEST_CKPT_NO_FALLOCATE", "1", 1);
    assert_int_equal(ftrt__knobs_read(&k), 0);
    assert_int_equal(k.recovery_delay_ms, 1500);
    assert_int_equal(k.ckpt_write_delay_ms, 100);
    assert_int_equal(k.io_force_sync, 1);
    assert_int_equal(k.ckpt_no_fallocate, 1);
    assert_int_equal(k.ckpt_force_buffered, 0);
    setenv("FTRT_TEST_CKPT_FORCE_BUFFERED", "2", 1);
    setenv("FTRT_DEBUG_RECOVERY_DELAY_MS", "soon", 1);
    assert_int_equal(ftrt__knobs_read(&k), -1);
    assert_int_equal(k.ckpt_force_buffered, 0);
    assert_int_equal(k.recovery_delay_ms, 1500);
    const char *vars[] = {"FTRT_DEBUG_RECOVERY_DELAY_MS", "FTRT_DEBUG_CKPT_WRITE_DELAY_MS",
                          "FTRT_TEST_CKPT_NO_FALLOCATE", "FTRT_TEST_CKPT_FORCE_BUFFERED"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
    /* The knobs are not settings: ftrt_config_init() ignores them. */
    setenv("FTRT_DEBUG_RECOVERY_DELAY_MS", "soon", 1);
    clear_env();
    ftrt_config c;
    assert_int_equal(ftrt_config_init(&c, sizeof c), 0);
    unsetenv("FTRT_DEBUG_RECOVERY_DELAY_MS");
}

static void validation(void **state)
{
    (void)state;
    clear_env();
    ftrt_config c;
    int spares = -5;
    ftrt_config_init(&c, sizeof c);
    assert_int_equal(ftrt__config_check(&c, 1, &spares), FTRT_ECONFIG); /* no trainer */
    assert_int_equal(ftrt__config_check(&c, 2, &spares), 0);
    assert_int_equal(spares, 0); /* no room for a spare */
    assert_int_equal(ftrt__config_check(&c, 6, &spares), 0);
    assert_int_equal(spares, 1); /* default: one spare */
    c.spares = 4;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), 0);
    assert_int_equal(spares, 4);
    c.spares = 5;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    c.spares = 0;
    c.heartbeat_timeout_ms = c.heartbeat_ms;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    ftrt_config_init(&c, sizeof c);
    c.async_progress = 2;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    ftrt_config_init(&c, sizeof c);
    c.progress_poll_us = -1;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    ftrt_config_init(&c, sizeof c);
    c.size = 4; /* not set up by ftrt_config_init */
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    /* Every setting's range applies to application-set fields too, as to the environment. */
    ftrt_config_init(&c, sizeof c);
    c.spares = -1; /* the default: auto */
    assert_int_equal(ftrt__config_check(&c, 6, &spares), 0);
    ftrt_config_init(&c, sizeof c);
    c.log_level = 4;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    ftrt_config_init(&c, sizeof c);
    c.ckpt_chunk_kb = 3000; /* in range, not a power of two */
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    ftrt_config_init(&c, sizeof c);
    c.ckpt_policy = 2;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    ftrt_config_init(&c, sizeof c);
    c.straggler_ratio = NAN;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    ftrt_config_init(&c, sizeof c);
    c.init_timeout_ms = 10; /* below 100, as FTRT_INIT_TIMEOUT_MS */
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    ftrt_config_init(&c, sizeof c);
    c.ckpt_dir[0] = 0;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    ftrt_config_init(&c, sizeof c);
    memset(c.report_file, 'x', sizeof c.report_file); /* not NUL-terminated */
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    ftrt_config_init(&c, sizeof c);
    c.version = FTRT_VERSION_MAJOR + 1;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    /* The NCCL plane's CTA settings: unset by default, min at most max when both are set. */
    ftrt_config_init(&c, sizeof c);
    assert_int_equal(c.nccl_cta_policy, FTRT_NCCL_CTA_UNSET);
    assert_int_equal(c.nccl_min_ctas, 0);
    assert_int_equal(c.nccl_max_ctas, 0);
    c.nccl_cta_policy = 4;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    c.nccl_cta_policy = FTRT_NCCL_CTA_EFFICIENCY;
    c.nccl_min_ctas = 8;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), 0); /* max unset: NCCL's own */
    c.nccl_max_ctas = 4;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), FTRT_ECONFIG);
    c.nccl_max_ctas = 8;
    assert_int_equal(ftrt__config_check(&c, 6, &spares), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults),       cmocka_unit_test(env_overrides),
        cmocka_unit_test(bad_env_values), cmocka_unit_test(bad_arguments),
        cmocka_unit_test(validation),     cmocka_unit_test(older_smaller_struct),
        cmocka_unit_test(settings_table), cmocka_unit_test(knobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
