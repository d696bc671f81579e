/* Unit tests: every error code has a distinct name and message outside the errno range. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "ftrt.h"

static const int codes[] = {
#define X(name, value, msg) name,
    FTRT_ERROR_MAP(X)
#undef X
};

static void names_and_messages(void **state)
{
    (void)state;
    size_t n = sizeof codes / sizeof *codes;
    assert_true(n >= 10);
    for (size_t i = 0; i < n; i++) {
        assert_true(codes[i] <= -1000); /* outside the errno range */
        assert_true(strncmp(ftrt_err_name(codes[i]), "FTRT_E", 6) == 0);
        assert_true(strlen(ftrt_strerror(codes[i])) > 10);
        for (size_t j = 0; j < i; j++) {
            assert_int_not_equal(codes[i], codes[j]);
            assert_string_not_equal(ftrt_err_name(codes[i]), ftrt_err_name(codes[j]));
        }
    }
    assert_string_equal(ftrt_err_name(FTRT_ERECOVER), "FTRT_ERECOVER");
    assert_string_equal(ftrt_err_name(0), "OK");
    assert_string_equal(ftrt_err_name(FTRT_DONE), "FTRT_DONE");
    assert_string_equal(ftrt_err_name(FTRT_SKIP_MPI_FINALIZE), "FTRT_SKIP_MPI_FINALIZE");
    assert_true(strlen(ftrt_strerror(FTRT_SKIP_MPI_FINALIZE)) > 10);
}

static void errno_codes(void **state)
{
    (void)state;
    assert_string_equal(ftrt_err_name(-ENOSPC), "ENOSPC");
    assert_string_equal(ftrt_strerror(-ENOSPC), strerror(ENOSPC));
    assert_string_equal(ftrt_err_name(-999999), "UNKNOWN");
    assert_non_null(ftrt_strerror(123456));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(names_and_messages),
                                       cmocka_unit_test(errno_codes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
