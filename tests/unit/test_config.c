/* Unit tests: configuration defaults, environment parsing, validation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "ftrt.h"
#include "runtime/internal.h"

static void clear_env(void)
{
    const char *vars[] = {"FTRT_SPARES", "FTRT_HEARTBEAT_MS", "FTRT_HEARTBEAT_TIMEOUT_MS",
                          "FTRT_CKPT_KEEP", "FTRT_CKPT_DIR", "FTRT_LOG", "FTRT_REPORT",
                          "FTRT_STATUS_FILE", "FTRT_INIT_TIMEOUT_MS", "FTRT_FAULT_LOG",
                          "FTRT_COORD_ADDR", "FTRT_ASYNC_PROGRESS", "FTRT_PROGRESS_POLL_US"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
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
    ftrt_config c;
    assert_int_equal(ftrt_config_init(&c, sizeof c), 0);
    assert_int_equal(c.spares, 2);
    assert_int_equal(c.heartbeat_ms, 50);
    assert_int_equal(c.heartbeat_timeout_ms, 400);
    assert_string_equal(c.ckpt_dir, "/tmp/x");
    assert_int_equal(c.log_level, 3);
    assert_int_equal(c.async_progress, 0);
    assert_int_equal(c.progress_poll_us, 200);
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
                            {"FTRT_PROGRESS_POLL_US", "100001"}};
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
    ftrt_config c;
    assert_int_equal(ftrt_config_init(NULL, sizeof c), FTRT_EINVAL);
    assert_int_equal(ftrt_config_init(&c, sizeof c - 1), FTRT_EINVAL);
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
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults),      cmocka_unit_test(env_overrides),
        cmocka_unit_test(bad_env_values), cmocka_unit_test(bad_arguments),
        cmocka_unit_test(validation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
