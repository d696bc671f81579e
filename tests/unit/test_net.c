/*
 * test_net.c - the control plane's TCP helpers (base/net.c): the coordinator listens on every
 * interface and offers this host's addresses (loopback last); a rank connects to the first
 * address that answers, whatever comes before it in the list; nothing answering is a bounded
 * -ETIMEDOUT; a bad list is -EINVAL. Loopback only (127.0.0.0/8). And the coordinator's mark
 * on its host (an abstract Unix name): seen while held, by any number of probes, and never
 * seen by two ranks probing at once when nobody holds it.
 */
#include <errno.h>
#include <pthread.h>
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

static void mark_seen_while_held(void **state)
{
    (void)state;
    uint64_t secret = 0x6d61726b00000000ULL ^ (uint64_t)getpid();
    assert_int_equal(ftrt__local_marked(secret), 0);
    int fd = ftrt__local_mark(secret);
    assert_true(fd >= 0);
    assert_int_equal(ftrt__local_mark(secret), -EADDRINUSE);
    for (int i = 0; i < 8; i++) /* (more probes than the mark's queue holds) */
        assert_int_equal(ftrt__local_marked(secret), 1);
    close(fd);
    assert_int_equal(ftrt__local_marked(secret), 0);
}

/* Probes an unmarked name 2,000 times; counts the times it was seen marked. */
static void *probe_many(void *arg)
{
    uint64_t secret = *(const uint64_t *)arg;
    intptr_t seen = 0;
    for (int i = 0; i < 2000; i++) seen += ftrt__local_marked(secret);
    return (void *)seen;
}

static void probes_at_once_see_no_mark(void **state)
{
    (void)state;
    /* Two ranks of one host start at once: neither may take the other's probe for the
     * coordinator's mark (a probe by bind did, now and then, and left a rank off its host
     * agent). */
    uint64_t secret = 0x70726f6200000000ULL ^ (uint64_t)getpid();
    pthread_t t[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, probe_many, &secret), 0);
    intptr_t seen = 0;
    for (int i = 0; i < 2; i++) {
        void *r;
        assert_int_equal(pthread_join(t[i], &r), 0);
        seen += (intptr_t)r;
    }
    assert_int_equal(seen, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(host_addrs),
        cmocka_unit_test(listen_any_and_connect_first_that_answers),
        cmocka_unit_test(nothing_answers),
        cmocka_unit_test(mark_seen_while_held),
        cmocka_unit_test(probes_at_once_see_no_mark),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
