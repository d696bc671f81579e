/*
 * test_alloc.c - ftrt_alloc() and ftrt_free() (comm/cma.c): bad arguments, zeroed writable
 * memory, a block released once; the block table's lookup of a range (ftrt__cma_file_of) and a
 * mapping of the file through /proc/PID/fd as a recovery's source makes it (ftrt__cma_map: the
 * bytes written through it are the block's), refused for a file that is not of huge pages.
 * The huge-page cases need free huge pages: under tests/integration/with-huge-pages.sh
 * (ctest unit.alloc_huge, FTRT_TEST_HUGE_PAGES=1) they are required; otherwise they run when the
 * host has huge pages free and are skipped when it has none (the fallback, anonymous memory, is
 * then what is checked).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/cma.h"
#include "ftrt.h"
#include "helpers.h"

#define MIB ((size_t)1 << 20)

/* Whether the huge-page cases must run (with-huge-pages.sh reserved pages for them). */
static int huge_required(void)
{
    const char *e = getenv("FTRT_TEST_HUGE_PAGES");
    return e && strcmp(e, "1") == 0;
}

/* A block of 3 MiB + 5 bytes from ftrt_alloc(); 1 when it is a memory file of huge pages. */
static int alloc_block(unsigned char **p)
{
    void *q = NULL;
    assert_int_equal(ftrt_alloc(3 * MIB + 5, &q), 0);
    assert_non_null(q);
    *p = q;
    return ftrt__cma_file_of(q, 3 * MIB + 5).fd >= 0;
}

/* A block from alloc_block() that is a memory file of huge pages, for the huge-page cases; the
 * case is skipped (the block released) where the host has none free, and fails where
 * with-huge-pages.sh reserved them. */
static unsigned char *huge_block_or_skip(void)
{
    unsigned char *p;
    if (!alloc_block(&p)) {
        assert_false(huge_required());
        assert_int_equal(ftrt_free(p), 0);
        skip(); /* no huge pages free here: the block is anonymous memory, never mapped */
    }
    return p;
}

static void bad_arguments(void **state)
{
    (void)state;
    void *p = (void *)1;
    int local = 0;
    assert_int_equal(ftrt_alloc(0, &p), FTRT_EINVAL);
    assert_int_equal(ftrt_alloc(4096, NULL), FTRT_EINVAL);
    assert_int_equal(ftrt_free(NULL), 0);
    assert_int_equal(ftrt_free(&local), FTRT_EINVAL); /* never from ftrt_alloc */
    assert_int_equal(ftrt__cma_file_of(&local, sizeof local).fd, -1);
    assert_int_equal(ftrt__cma_file_of(NULL, 8).fd, -1);
}

static void zeroed_writable_released_once(void **state)
{
    (void)state;
    unsigned char *p;
    int huge = alloc_block(&p);
    if (huge_required()) assert_true(huge);
    for (size_t i = 0; i < 3 * MIB + 5; i += 4093) assert_int_equal(p[i], 0);
    assert_int_equal(p[3 * MIB + 4], 0);
    t_fill(p, 3 * MIB + 5, 7);
    unsigned char *copy = malloc(3 * MIB + 5);
    t_fill(copy, 3 * MIB + 5, 7);
    assert_memory_equal(p, copy, 3 * MIB + 5);
    free(copy);
    assert_int_equal(ftrt_free(p), 0);
    assert_int_equal(ftrt__cma_file_of(p, 16).fd, -1); /* gone from the table */
    assert_int_equal(ftrt_free(p), FTRT_EINVAL);      /* released once */
}

/* Huge pages: the lookup of ranges in the block (3 MiB + 5 bytes, 4 MiB of 2 MiB pages). */
static void lookup_ranges(void **state)
{
    (void)state;
    unsigned char *p = huge_block_or_skip();
    ftrt__cma_file f = ftrt__cma_file_of(p, 3 * MIB + 5);
    assert_true(f.fd >= 0);
    assert_int_equal(f.off, 0);
    f = ftrt__cma_file_of(p + MIB, MIB);
    assert_true(f.fd >= 0);
    assert_int_equal(f.off, MIB);
    /* within the 4 MiB block though past the 3 MiB asked for: the block's; past it: not */
    assert_true(ftrt__cma_file_of(p + 3 * MIB, MIB).fd >= 0);
    assert_int_equal(ftrt__cma_file_of(p + 3 * MIB, MIB + 1).fd, -1);
    assert_int_equal(ftrt__cma_file_of(p, 0).fd, -1);
    assert_int_equal(ftrt__cma_file_of(p + 4 * MIB, 1).fd, -1);
    assert_int_equal(ftrt_free(p), 0);
}

/* Huge pages: a mapping of the block's file through /proc/PID/fd (this process's own, as a
 * source maps a receiver's) writes the block's bytes, at an offset that is not a huge page's. */
static void mapped_writes_reach_the_block(void **state)
{
    (void)state;
    unsigned char *p = huge_block_or_skip();
    ftrt__cma_ident me;
    ftrt__cma_self(&me);
    ftrt__cma_file f = ftrt__cma_file_of(p + MIB + 3, 2 * MIB);
    void *base = NULL;
    size_t len = 0;
    unsigned char *m = ftrt__cma_map(&me, &f, 2 * MIB, &base, &len);
    assert_non_null(m);
    assert_true(len >= 2 * MIB && len % (2 * MIB) == 0);
    unsigned char *want = malloc(2 * MIB);
    t_fill(want, 2 * MIB, 11);
    memcpy(m, want, 2 * MIB);
    assert_memory_equal(p + MIB + 3, want, 2 * MIB);
    ftrt__cma_unmap(base, len);
    /* a range longer than the file: refused */
    f = ftrt__cma_file_of(p, MIB);
    assert_null(ftrt__cma_map(&me, &f, 5 * MIB, &base, &len));
    assert_null(base);
    free(want);
    assert_int_equal(ftrt_free(p), 0);
}

/* A file that is not of huge pages (this test's own stdin, or /dev/null) is never mapped: the
 * source writes with the kernel's copy instead. */
static void other_files_are_not_mapped(void **state)
{
    (void)state;
    ftrt__cma_ident me;
    ftrt__cma_self(&me);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    assert_int_equal(ftruncate(fileno(tmp), (off_t)(4 * MIB)), 0);
    ftrt__cma_file f = {fileno(tmp), 0};
    void *base = (void *)1;
    size_t len = 1;
    assert_null(ftrt__cma_map(&me, &f, MIB, &base, &len));
    assert_null(base);
    assert_int_equal(len, 0);
    f.fd = 100000; /* no such descriptor */
    assert_null(ftrt__cma_map(&me, &f, MIB, &base, &len));
    fclose(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(zeroed_writable_released_once),
        cmocka_unit_test(lookup_ranges),
        cmocka_unit_test(mapped_writes_reach_the_block),
        cmocka_unit_test(other_files_are_not_mapped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
