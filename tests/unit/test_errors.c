/* Unit tests: every return code of FTRT_ERROR_MAP (errors and positive results) has a distinct
 * name and message, errors lie outside the errno range, unknown codes say so; ftrt_version();
 * ftrt_last_error() per thread. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ftrt.h"

static const struct {
    int code;
    const char *name, *msg;
} table[] = {
#define X(name, value, msg) {name, #name, msg},
    FTRT_ERROR_MAP(X)
#undef X
};
#define NCODES (sizeof table / sizeof *table)

static void names_and_messages(void **state)
{
    (void)state;
    assert_true(NCODES >= 20);
    int positives = 0;
    for (size_t i = 0; i < NCODES; i++) {
        int c = table[i].code;
        if (c < 0) {
            assert_true(c <= -1000); /* outside the errno range */
            assert_true(strncmp(table[i].name, "FTRT_E", 6) == 0);
        } else {
            assert_true(c > 0); /* 0 is success, named "OK" outside the table */
            positives++;
        }
        assert_string_equal(ftrt_err_name(c), table[i].name);
        assert_string_equal(ftrt_strerror(c), table[i].msg);
        assert_true(strlen(ftrt_strerror(c)) > 10);
        assert_string_not_equal(ftrt_strerror(c), "unknown ftrt error code");
        for (size_t j = 0; j < i; j++) {
            assert_int_not_equal(c, table[j].code);
            assert_string_not_equal(ftrt_err_name(c), ftrt_err_name(table[j].code));
            assert_string_not_equal(ftrt_strerror(c), ftrt_strerror(table[j].code));
        }
    }
    assert_int_equal(positives, 3);
    assert_string_equal(ftrt_err_name(FTRT_ERECOVER), "FTRT_ERECOVER");
    assert_string_equal(ftrt_err_name(0), "OK");
    assert_string_equal(ftrt_strerror(0), "success");
    assert_string_equal(ftrt_err_name(FTRT_DONE), "FTRT_DONE");
    assert_string_equal(ftrt_err_name(FTRT_SKIP_MPI_FINALIZE), "FTRT_SKIP_MPI_FINALIZE");
    assert_string_equal(ftrt_err_name(FTRT_SKIPPED), "FTRT_SKIPPED");
    assert_int_equal(FTRT_DONE, 1);
    assert_int_equal(FTRT_SKIP_MPI_FINALIZE, 2);
    assert_int_equal(FTRT_SKIPPED, 3);
}

static void unknown_and_errno_codes(void **state)
{
    (void)state;
    assert_string_equal(ftrt_err_name(-ENOSPC), "ENOSPC");
    assert_string_equal(ftrt_strerror(-ENOSPC), strerror(ENOSPC));
    const int unknown[] = {4, 123456, -999999, -2000, INT32_MIN};
    for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
        assert_string_equal(ftrt_err_name(unknown[i]), "UNKNOWN");
        assert_string_equal(ftrt_strerror(unknown[i]), "unknown ftrt error code");
    }
}

static void version(void **state)
{
    (void)state;
    int major = -1, minor = -1, patch = -1;
    int v = ftrt_version(&major, &minor, &patch);
    assert_int_equal(major, FTRT_VERSION_MAJOR);
    assert_int_equal(minor, FTRT_VERSION_MINOR);
    assert_int_equal(patch, FTRT_VERSION_PATCH);
    assert_int_equal(v, major * 10000 + minor * 100 + patch);
    assert_int_equal(ftrt_version(NULL, NULL, NULL), v);
    char s[64];
    snprintf(s, sizeof s, "%d.%d.%d", major, minor, patch);
    assert_string_equal(s, FTRT_VERSION_STRING);
}

typedef struct {
    const char *callers; /* the calling thread's buffer */
    int ok;              /* set: this thread's is another one, and empty */
} other_arg;

static void *other_thread(void *p)
{
    other_arg *a = p;
    const char *mine = ftrt_last_error();
    a->ok = mine != a->callers && mine[0] == 0;
    return NULL;
}

static void last_error(void **state)
{
    (void)state;
    /* Run first: nothing logged on this thread yet. */
    assert_non_null(ftrt_last_error());
    assert_string_equal(ftrt_last_error(), "");
    setenv("FTRT_HEARTBEAT_MS", "fast", 1);
    ftrt_config c;
    assert_int_equal(ftrt_config_init(&c, sizeof c), FTRT_ECONFIG);
    unsetenv("FTRT_HEARTBEAT_MS");
    const char *e = ftrt_last_error();
    assert_non_null(strstr(e, "FTRT_HEARTBEAT_MS=\"fast\""));
    assert_null(strstr(e, "ERROR")); /* the message only, without the log prefix */
    /* A later success does not clear it; another thread has its own (empty) one. */
    assert_int_equal(ftrt_config_init(&c, sizeof c), 0);
    assert_ptr_equal(ftrt_last_error(), e);
    assert_non_null(strstr(ftrt_last_error(), "FTRT_HEARTBEAT_MS"));
    other_arg arg = {e, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, other_thread, &arg), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(arg.ok, 1);
    /* The next error replaces it. */
    setenv("FTRT_CKPT_POLICY", "maybe", 1);
    assert_int_equal(ftrt_config_init(&c, sizeof c), FTRT_ECONFIG);
    unsetenv("FTRT_CKPT_POLICY");
    assert_non_null(strstr(ftrt_last_error(), "FTRT_CKPT_POLICY=\"maybe\" is not one of wait, skip"));
    assert_null(strstr(ftrt_last_error(), "HEARTBEAT"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(last_error), cmocka_unit_test(names_and_messages),
        cmocka_unit_test(unknown_and_errno_codes), cmocka_unit_test(version)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
