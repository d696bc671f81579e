/*
 * test_net.c - the control plane's TCP helpers (base/net.c): the coordinator listens on every
 * interface and offers this host's addresses (loopback last); a rank connects to the first
 * address that answers, whatever comes before it in the list; nothing answering is a bounded
 * -ETIMEDOUT; a bad list is -EINVAL. Loopback only (127.0.0.0/8).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/clock.h"
#include "base/net.h"
#include "helpers.h"

static void host_addrs(void **state)
{
    (void)state;
    char list[FTRT__ADDRS_MAX];
    int n = ftrt__host_addrs(list, sizeof list);
    assert_true(n >= 1);
    /* loopback last: other hosts try the routable addresses first */
    const char *lo = strstr(list, "127.0.0.1");
    assert_non_null(lo);
    assert_string_equal(lo, "127.0.0.1");
}

static void listen_any_and_connect_first_that_answers(void **state)
{
    (void)state;
    char offered[FTRT__ADDRS_MAX];
    int port = 0;
    int lfd = ftrt__listen("", offered, sizeof offered, &port); /* FTRT_COORD_ADDR unset */
    assert_true(lfd >= 0);
    assert_true(port > 0);
    assert_non_null(strstr(offered, "127.0.0.1"));
    char used[64];
    /* 127.0.0.2 is loopback too, but nothing listens on it... except the 0.0.0.0 listener:
     * so use a list whose first entry is malformed and whose second answers. */
    int fd = ftrt__connect_any("not-an-address 127.0.0.1", port, 2000, used, sizeof used);
    assert_true(fd >= 0);
    assert_string_equal(used, "127.0.0.1");
    close(fd);
    close(lfd);

    /* A listener on 127.0.0.1 only: the first address (127.0.0.2) refuses, the second
     * answers. */
    char a[64];
    lfd = ftrt__listen("127.0.0.1", a, sizeof a, &port);
    assert_true(lfd >= 0);
    assert_string_equal(a, "127.0.0.1");
    char list[96];
    snprintf(list, sizeof list, "127.0.0.2,127.0.0.1");
    fd = ftrt__connect_any(list, port, 2000, used, sizeof used);
    assert_true(fd >= 0);
    assert_string_equal(used, "127.0.0.1");
    close(fd);
    close(lfd);
}

static void nothing_answers(void **state)
{
    (void)state;
    /* A port nobody listens on: bounded by the timeout, not by the kernel's retries. */
    char a[64];
    int port;
    int l2 = ftrt__listen("127.0.0.1", a, sizeof a, &port);
    assert_true(l2 >= 0);
    close(l2); /* the port is free again and refuses */
    double t0 = ftrt__now();
    int fd = ftrt__connect_any("127.0.0.1 127.0.0.3", port, 300, NULL, 0);
    double took = ftrt__now() - t0;
    assert_int_equal(fd, -ETIMEDOUT);
    assert_true(took >= 0.25 && took < 2.0);
    assert_int_equal(ftrt__connect_any("", port, 100, NULL, 0), -EINVAL);
    assert_int_equal(ftrt__connect_any("nonsense", port, 100, NULL, 0), -EINVAL);
    assert_int_equal(ftrt__listen("not-an-address", a, sizeof a, &port), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(host_addrs),
        cmocka_unit_test(listen_any_and_connect_first_that_answers),
        cmocka_unit_test(nothing_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
